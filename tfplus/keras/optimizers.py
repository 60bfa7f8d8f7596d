"""tf.keras.optimizers in graph mode: Keras's names, arguments and defaults over tfplus's TF1 optimizers.

    opt = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9, nesterov=True)
    model.compile(opt, "categorical_crossentropy")     # or "sgd", "adam", "rmsprop", "adagrad", "adadelta"

Keras's defaults: SGD lr 0.01; Adam lr 0.001, epsilon 1e-7; RMSprop lr 0.001, rho 0.9, epsilon 1e-7, its mean
square starting at zeros (TF1's RMSProp starts it at ones) and, without momentum, epsilon outside the square
root; Adagrad lr 0.001, initial accumulator 0.1 (its 1e-7 epsilon beside sqrt(accumulator) >= 0.3 is left out);
Adadelta lr 0.001, rho 0.95, epsilon 1e-7. A TF1 optimizer (tf.train.AdamOptimizer(...)) may be given to compile
as it is."""
from __future__ import annotations

from tfplus import train as _train
from tfplus.framework import convert_to_tensor
from tfplus.ops import math_ops, state_ops

__all__ = ["SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Optimizer", "get"]
Optimizer = _train.Optimizer


def _lr(learning_rate, kwargs: dict, name: str):
    """The learning rate (`lr` is Keras's old name for it); other arguments left at Keras's defaults only."""
    lr = kwargs.pop("lr", learning_rate)
    unsupported = sorted(k for k, v in kwargs.items() if v)  # decay=0.0, clipnorm=None: the defaults
    if unsupported:
        raise TypeError(f"tf.keras.optimizers.{name}: arguments {unsupported} are not supported by tfplus")
    return lr


class SGD(_train.MomentumOptimizer):
    """v = momentum * v - lr * g; var += v (Nesterov: var += momentum * v - lr * g): TF1's Momentum with
    accum = -v / lr; without momentum plain gradient descent (its slot stays g)."""

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        self.learning_rate = _lr(learning_rate, kwargs, "SGD")
        super().__init__(self.learning_rate, momentum, name=name, use_nesterov=nesterov)


class Adam(_train.AdamOptimizer):
    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, name="Adam",
                 **kwargs):
        if amsgrad:
            raise NotImplementedError("tf.keras.optimizers.Adam: amsgrad=True is not supported by tfplus")
        self.learning_rate = _lr(learning_rate, kwargs, "Adam")
        super().__init__(self.learning_rate, beta_1, beta_2, epsilon, name=name)


class RMSprop(_train.RMSPropOptimizer):
    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, name="RMSprop",
                 **kwargs):
        self.learning_rate = _lr(learning_rate, kwargs, "RMSprop")
        super().__init__(self.learning_rate, rho, momentum, epsilon, centered=centered, name=name)

    def _create_slots(self, var_list):
        for v in var_list:  # Keras's mean square starts at zeros
            self._zeros_slot(v, "rms", self._name, fill=0.0)
            if self._centered:
                self._zeros_slot(v, "mg", self._name)
            self._zeros_slot(v, "momentum", self._name)

    def _apply_dense(self, grad, var):
        """Without momentum Keras adds epsilon outside the square root: var -= lr g / (sqrt(ms) + epsilon)
        (with momentum it runs TF1's ApplyRMSProp, epsilon inside)."""
        if self._momentum or self._centered:
            return super()._apply_dense(grad, var)
        lr, rho, _, epsilon = self._hypers(var.dtype)
        rms = self.get_slot(var, "rms")
        ms = state_ops.assign(rms, rho * rms + (1.0 - rho) * math_ops.square(grad), use_locking=self._use_locking)
        return state_ops.assign_sub(var, lr * grad / (math_ops.sqrt(ms) + epsilon), use_locking=self._use_locking).op

    def _apply_sparse(self, grad, var):
        # Keras decays every row's mean square and moves only the gradient's rows: the dense rule of the dense
        # gradient does both.
        if self._momentum or self._centered:
            return super()._apply_sparse(grad, var)
        return self._apply_dense(convert_to_tensor(grad), var)


class Adagrad(_train.AdagradOptimizer):
    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, name="Adagrad", **kwargs):
        self.learning_rate = _lr(learning_rate, kwargs, "Adagrad")
        super().__init__(self.learning_rate, initial_accumulator_value, name=name)


class Adadelta(_train.AdadeltaOptimizer):
    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-7, name="Adadelta", **kwargs):
        self.learning_rate = _lr(learning_rate, kwargs, "Adadelta")
        super().__init__(self.learning_rate, rho, epsilon, name=name)


for _cls in (SGD, Adam, RMSprop, Adagrad, Adadelta):
    _cls.lr = property(lambda self: self.learning_rate)  # Keras's older name

_BY_NAME = {"sgd": SGD, "adam": Adam, "rmsprop": RMSprop, "adagrad": Adagrad, "adadelta": Adadelta}


def get(identifier) -> Optimizer:
    """An optimizer by Keras name ('adam'), an instance (Keras's or a TF1 tf.train one) as it is."""
    if isinstance(identifier, Optimizer):
        return identifier
    if not isinstance(identifier, str) or identifier.lower() not in _BY_NAME:
        raise ValueError(f"tf.keras.optimizers.get: unknown optimizer {identifier!r}; known: {sorted(_BY_NAME)}")
    return _BY_NAME[identifier.lower()]()


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.optimizers")
