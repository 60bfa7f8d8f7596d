"""tf.keras.optimizers in graph mode: Keras's names, arguments and defaults over tfplus's TF1 optimizers.

    opt = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9, nesterov=True)
    model.compile(opt, "categorical_crossentropy")     # or "sgd", "adam", "rmsprop", "adagrad", "adadelta"

Keras's defaults: SGD lr 0.01; Adam lr 0.001, epsilon 1e-7; RMSprop lr 0.001, rho 0.9, epsilon 1e-7, its mean
square starting at zeros (TF1's RMSProp starts it at ones) and, without momentum, epsilon outside the square
root; Adagrad lr 0.001, initial accumulator 0.1 (its 1e-7 epsilon beside sqrt(accumulator) >= 0.3 is left out);
Adadelta lr 0.001, rho 0.95, epsilon 1e-7. A TF1 optimizer (tf.train.AdamOptimizer(...)) may be given to compile
as it is."""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus import train as _train
from tfplus.framework import Tensor, convert_to_tensor, get_default_graph, name_scope
from tfplus.ops import math_ops, state_ops
from tfplus.variables import Variable

__all__ = ["SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Optimizer", "get"]
Optimizer = _train.Optimizer


def _lr(learning_rate, kwargs: dict, name: str):
    """The learning rate (`lr` is Keras's old name for it); other arguments left at Keras's defaults only."""
    lr = kwargs.pop("lr", learning_rate)
    unsupported = sorted(k for k, v in kwargs.items() if v)  # decay=0.0, clipnorm=None: the defaults
    if unsupported:
        raise TypeError(f"tf.keras.optimizers.{name}: arguments {unsupported} are not supported by tfplus")
    return lr


class _KerasLR:
    """Keras's learning rate: a float32 variable `learning_rate` of the optimizer, made when the training step
    is, which K.set_value and the LearningRateScheduler / ReduceLROnPlateau callbacks change between steps. A
    tensor given as the rate is used as it is."""

    def _init_lr(self, learning_rate, kwargs: dict, name: str):
        self._lr_value, self._lr_var = _lr(learning_rate, kwargs, name), None
        return lambda: self.learning_rate  # the TF1 optimizer's hyperparameter, read when the step is built

    @property
    def learning_rate(self):
        if isinstance(self._lr_value, (Tensor, Variable)):
            return self._lr_value
        if self._lr_var is None or self._lr_var.graph is not get_default_graph():
            with get_default_graph().control_dependencies(None), name_scope(self._name + "/"):
                self._lr_var = Variable(float(self._lr_value), trainable=False, name="learning_rate",
                                        dtype=_dt.float32)
        return self._lr_var

    lr = learning_rate


class SGD(_KerasLR, _train.MomentumOptimizer):
    """Keras's momentum: v = momentum * v - lr * g; var += v (Nesterov: var += momentum * v - lr * g), so a
    learning rate changed between steps (callbacks) scales only the new gradients. Sparse gradients (embeddings)
    take TF1's sparse Momentum, the same updates while the learning rate stays."""

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        super().__init__(self._init_lr(learning_rate, kwargs, "SGD"), momentum, name=name, use_nesterov=nesterov)

    def _create_slots(self, var_list):
        if self._momentum:
            super()._create_slots(var_list)

    def _apply_dense(self, grad, var):
        if not self._momentum:  # plain gradient descent, as Keras's SGD runs it
            return _train.GradientDescentOptimizer._apply_dense(self, grad, var)
        lr = self._hyper("learning_rate", self._learning_rate, var.dtype)
        momentum = self._hyper("momentum", self._momentum, var.dtype)
        v = self.get_slot(var, "momentum")
        v_new = state_ops.assign(v, momentum * v - lr * grad, use_locking=self._use_locking)
        step = momentum * v_new - lr * grad if self._use_nesterov else v_new
        return state_ops.assign_add(var, step, use_locking=self._use_locking).op

    def _apply_sparse_duplicate_indices(self, grad, var):
        if not self._momentum:
            return _train.GradientDescentOptimizer._apply_sparse_duplicate_indices(self, grad, var)
        return super()._apply_sparse_duplicate_indices(grad, var)


class Adam(_KerasLR, _train.AdamOptimizer):
    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, name="Adam",
                 **kwargs):
        if amsgrad:
            raise NotImplementedError("tf.keras.optimizers.Adam: amsgrad=True is not supported by tfplus")
        super().__init__(self._init_lr(learning_rate, kwargs, "Adam"), beta_1, beta_2, epsilon, name=name)


class RMSprop(_KerasLR, _train.RMSPropOptimizer):
    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, name="RMSprop",
                 **kwargs):
        super().__init__(self._init_lr(learning_rate, kwargs, "RMSprop"), rho, momentum, epsilon, centered=centered,
                         name=name)

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


class Adagrad(_KerasLR, _train.AdagradOptimizer):
    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, name="Adagrad", **kwargs):
        super().__init__(self._init_lr(learning_rate, kwargs, "Adagrad"), initial_accumulator_value, name=name)


class Adadelta(_KerasLR, _train.AdadeltaOptimizer):
    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-7, name="Adadelta", **kwargs):
        super().__init__(self._init_lr(learning_rate, kwargs, "Adadelta"), rho, epsilon, name=name)


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
