"""tf.keras.losses: per-example losses (the mean over the last axis where Keras takes one), by function or name.

As Keras: a probability output of Keras's softmax or sigmoid activation is scored from the logits it came from
(activations.softmax keeps them), otherwise clipped to [epsilon, 1 - epsilon] before the log."""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus import nn
from tfplus.framework import convert_to_tensor
from tfplus.keras import backend
from tfplus.ops import array_ops, math_ops


def _logits(output, from_logits: bool, op_type: str):
    """(logits or probabilities, whether they are logits)."""
    if from_logits:
        return output, True
    if getattr(output, "_keras_logits", None) is not None:
        return output._keras_logits, True
    if output.op.type == op_type and not hasattr(output, "_keras_history"):
        return output.op.inputs[0], True
    return output, False


def _clipped(p):
    eps = backend.epsilon()
    return math_ops.clip_by_value(p, eps, 1.0 - eps)


def mean_squared_error(y_true, y_pred):
    y_pred = convert_to_tensor(y_pred)
    return math_ops.reduce_mean(math_ops.square(y_pred - math_ops.cast(y_true, y_pred.dtype)), axis=-1)


def mean_absolute_error(y_true, y_pred):
    y_pred = convert_to_tensor(y_pred)
    return math_ops.reduce_mean(math_ops.abs(y_pred - math_ops.cast(y_true, y_pred.dtype)), axis=-1)


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0):
    y_pred = convert_to_tensor(y_pred)
    y_true = math_ops.cast(y_true, y_pred.dtype)
    if label_smoothing:
        n = math_ops.cast(array_ops.shape(y_true)[-1], y_pred.dtype)
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / n
    out, logits = _logits(y_pred, from_logits, "Softmax")
    if logits:
        return nn.softmax_cross_entropy_with_logits_v2(labels=y_true, logits=out)
    out = out / math_ops.reduce_sum(out, -1, keepdims=True)
    return -math_ops.reduce_sum(y_true * math_ops.log(_clipped(out)), -1)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False):
    y_pred = convert_to_tensor(y_pred)
    out, logits = _logits(y_pred, from_logits, "Softmax")
    if not logits:
        out = math_ops.log(_clipped(out))
    labels = math_ops.cast(array_ops.reshape(y_true, array_ops.shape(out)[:-1]), _dt.int64)
    return nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=out)


def elementwise_binary_crossentropy(y_true, y_pred, from_logits=False):
    """Each element's binary crossentropy (tf.keras.backend.binary_crossentropy)."""
    y_pred = convert_to_tensor(y_pred)
    y_true = math_ops.cast(y_true, y_pred.dtype)
    out, logits = _logits(y_pred, from_logits, "Sigmoid")
    if logits:
        return nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=out)
    eps = backend.epsilon()
    out = _clipped(out)
    return -(y_true * math_ops.log(out + eps) + (1.0 - y_true) * math_ops.log(1.0 - out + eps))


def binary_crossentropy(y_true, y_pred, from_logits=False):
    return math_ops.reduce_mean(elementwise_binary_crossentropy(y_true, y_pred, from_logits), axis=-1)


def hinge(y_true, y_pred):
    y_pred = convert_to_tensor(y_pred)
    y_true = math_ops.cast(y_true, y_pred.dtype)
    return math_ops.reduce_mean(math_ops.maximum(1.0 - y_true * y_pred, 0.0), axis=-1)


mse, mae = mean_squared_error, mean_absolute_error
MSE, MAE = mse, mae
_BY_NAME = {"mean_squared_error": mean_squared_error, "mse": mean_squared_error, "MSE": mean_squared_error,
            "mean_absolute_error": mean_absolute_error, "mae": mean_absolute_error, "MAE": mean_absolute_error,
            "categorical_crossentropy": categorical_crossentropy,
            "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
            "binary_crossentropy": binary_crossentropy, "hinge": hinge}


class Loss:
    """A loss object (tf.keras.losses.CategoricalCrossentropy(from_logits=True)): called on a batch, the mean
    of its per-example losses."""
    _fn = staticmethod(mean_squared_error)

    def __init__(self, name=None, **kwargs):
        self.name, self._kwargs = name or backend.to_snake_case(type(self).__name__), kwargs

    def call(self, y_true, y_pred):
        return type(self)._fn(y_true, y_pred, **self._kwargs)

    def __call__(self, y_true, y_pred, sample_weight=None):
        per = self.call(y_true, y_pred)
        if sample_weight is not None:
            per = per * math_ops.cast(sample_weight, per.dtype)
        return math_ops.reduce_mean(per)


def _loss_class(name: str, fn, *keywords) -> type:
    def __init__(self, *args, name=None, reduction=None, **kwargs):
        kwargs.update(zip(keywords, args))
        Loss.__init__(self, name=name, **kwargs)
    return type(name, (Loss,), {"_fn": staticmethod(fn), "__init__": __init__, "__module__": __name__})


MeanSquaredError = _loss_class("MeanSquaredError", mean_squared_error)
MeanAbsoluteError = _loss_class("MeanAbsoluteError", mean_absolute_error)
CategoricalCrossentropy = _loss_class("CategoricalCrossentropy", categorical_crossentropy, "from_logits",
                                      "label_smoothing")
SparseCategoricalCrossentropy = _loss_class("SparseCategoricalCrossentropy", sparse_categorical_crossentropy,
                                            "from_logits")
BinaryCrossentropy = _loss_class("BinaryCrossentropy", binary_crossentropy, "from_logits")
Hinge = _loss_class("Hinge", hinge)


def get(identifier):
    """A loss by name ('categorical_crossentropy', 'mse', ...), a callable as it is."""
    if callable(identifier):
        return identifier
    if identifier not in _BY_NAME:
        raise ValueError(f"tf.keras.losses.get: unknown loss {identifier!r}; known: {sorted(_BY_NAME)}")
    return _BY_NAME[identifier]


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.losses")
