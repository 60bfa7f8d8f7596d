"""tf.keras.activations: Keras's activation names ('relu', 'softmax', ...) as tf.nn's functions."""
from __future__ import annotations

from tfplus import nn
from tfplus.ops import math_ops


def linear(x):
    return x


def softmax(x, axis=-1):
    """softmax along `axis`; the output keeps its logits (`_keras_logits`), from which Keras's crossentropy
    losses score it, as TensorFlow's Keras does."""
    out = nn.softmax(x, axis=axis)
    out._keras_logits = x
    return out


def sigmoid(x):
    """sigmoid, keeping its logits for binary_crossentropy (as softmax)."""
    out = nn.sigmoid(x)
    out._keras_logits = x
    return out


def hard_sigmoid(x):
    """clip(0.2 x + 0.5, 0, 1), Keras's piecewise-linear sigmoid."""
    return math_ops.clip_by_value(0.2 * x + 0.5, 0.0, 1.0)


def exponential(x):
    return math_ops.exp(x)


_BY_NAME = {"relu": nn.relu, "relu6": nn.relu6, "elu": nn.elu, "selu": nn.selu, "sigmoid": sigmoid,
            "tanh": nn.tanh, "softplus": nn.softplus, "softsign": nn.softsign, "swish": nn.swish, "softmax": softmax,
            "linear": linear, "hard_sigmoid": hard_sigmoid, "exponential": exponential}
relu, relu6, elu, selu, tanh = nn.relu, nn.relu6, nn.elu, nn.selu, nn.tanh
softplus, softsign, swish = nn.softplus, nn.softsign, nn.swish


def get(identifier):
    """A Keras activation by name, a callable as it is, None as the identity."""
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    if identifier not in _BY_NAME:
        raise ValueError(f"tf.keras.activations.get: unknown activation {identifier!r}; known: {sorted(_BY_NAME)}")
    return _BY_NAME[identifier]


def serialize(activation) -> str:
    return getattr(activation, "__name__", str(activation))


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.activations")
