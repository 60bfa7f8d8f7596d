"""tf.keras.initializers: Keras's initializer names and defaults over tfplus's TF1 initializers (init_ops).

Keras's defaults differ from TF1's where noted: RandomNormal, RandomUniform and TruncatedNormal draw with scale
0.05 ('random_normal' stddev 0.05, 'uniform' in [-0.05, 0.05])."""
from __future__ import annotations

from tfplus import init_ops as _init
from tfplus.init_ops import Constant, Initializer, Ones, Orthogonal, VarianceScaling, Zeros

__all__ = ["Constant", "GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform", "Initializer", "LecunNormal",
           "LecunUniform", "Ones", "Orthogonal", "RandomNormal", "RandomUniform", "TruncatedNormal",
           "VarianceScaling", "Zeros", "get"]


class RandomNormal(_init.RandomNormal):
    def __init__(self, mean=0.0, stddev=0.05, seed=None, dtype=None):
        super().__init__(mean, stddev, seed, dtype)


class TruncatedNormal(_init.TruncatedNormal):
    def __init__(self, mean=0.0, stddev=0.05, seed=None, dtype=None):
        super().__init__(mean, stddev, seed, dtype)


class RandomUniform(_init.RandomUniform):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None, dtype=None):
        super().__init__(minval, maxval, seed, dtype)


def _scaling(scale: float, mode: str, distribution: str, class_name: str) -> type:
    def __init__(self, seed=None):
        VarianceScaling.__init__(self, scale, mode, distribution, seed)
    return type(class_name, (VarianceScaling,), {"__init__": __init__, "__module__": __name__})


GlorotUniform = _scaling(1.0, "fan_avg", "uniform", "GlorotUniform")
GlorotNormal = _scaling(1.0, "fan_avg", "truncated_normal", "GlorotNormal")
HeNormal = _scaling(2.0, "fan_in", "truncated_normal", "HeNormal")
HeUniform = _scaling(2.0, "fan_in", "uniform", "HeUniform")
LecunNormal = _scaling(1.0, "fan_in", "truncated_normal", "LecunNormal")
LecunUniform = _scaling(1.0, "fan_in", "uniform", "LecunUniform")

_BY_NAME = {"zeros": Zeros, "ones": Ones, "constant": Constant, "random_normal": RandomNormal,
            "normal": RandomNormal, "random_uniform": RandomUniform, "uniform": RandomUniform,
            "truncated_normal": TruncatedNormal, "glorot_uniform": GlorotUniform, "glorot_normal": GlorotNormal,
            "he_normal": HeNormal, "he_uniform": HeUniform, "lecun_normal": LecunNormal,
            "lecun_uniform": LecunUniform, "orthogonal": Orthogonal, "variance_scaling": VarianceScaling}
zeros, ones, constant, orthogonal = Zeros, Ones, Constant, Orthogonal
glorot_uniform, glorot_normal, he_normal, he_uniform = GlorotUniform, GlorotNormal, HeNormal, HeUniform
lecun_normal, lecun_uniform = LecunNormal, LecunUniform


def get(identifier) -> Initializer | None:
    """An initializer by Keras name ('glorot_uniform', 'he_normal', ...), an instance as it is."""
    if identifier is None or callable(identifier) and not isinstance(identifier, type):
        return identifier
    if isinstance(identifier, type):
        return identifier()
    if identifier not in _BY_NAME:
        raise ValueError(f"tf.keras.initializers.get: unknown initializer {identifier!r}; known: {sorted(_BY_NAME)}")
    return _BY_NAME[identifier]()


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.initializers")
