"""tf.keras.metrics: per-example metric functions, by function or name ('accuracy' picks the binary,
categorical or sparse one from the loss and the output, as Keras's compile does)."""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus.framework import convert_to_tensor
from tfplus.keras import losses
from tfplus.ops import array_ops, math_ops


def _float(x):
    return math_ops.cast(x, _dt.float32)


def binary_accuracy(y_true, y_pred, threshold=0.5):
    y_pred = convert_to_tensor(y_pred)
    hit = math_ops.equal(math_ops.cast(y_true, y_pred.dtype), math_ops.cast(y_pred > threshold, y_pred.dtype))
    return math_ops.reduce_mean(_float(hit), axis=-1)


def categorical_accuracy(y_true, y_pred):
    return _float(math_ops.equal(math_ops.argmax(y_true, -1), math_ops.argmax(y_pred, -1)))


def sparse_categorical_accuracy(y_true, y_pred):
    y_pred = convert_to_tensor(y_pred)
    labels = math_ops.cast(array_ops.reshape(y_true, array_ops.shape(y_pred)[:-1]), _dt.int64)
    return _float(math_ops.equal(labels, math_ops.argmax(y_pred, -1)))


mean_squared_error = mse = losses.mean_squared_error
mean_absolute_error = mae = losses.mean_absolute_error
categorical_crossentropy = losses.categorical_crossentropy
sparse_categorical_crossentropy = losses.sparse_categorical_crossentropy
binary_crossentropy = losses.binary_crossentropy
_BY_NAME = {"binary_accuracy": binary_accuracy, "categorical_accuracy": categorical_accuracy,
            "sparse_categorical_accuracy": sparse_categorical_accuracy, **losses._BY_NAME}


def get(identifier, loss_fn=None, output_shape=None):
    """(history name, per-example function) of a compile metric; 'accuracy'/'acc' chosen by `loss_fn` and the
    output's last dimension, as Keras does."""
    if callable(identifier):
        return getattr(identifier, "__name__", "metric"), identifier
    if identifier in ("accuracy", "acc"):
        loss_fn = getattr(loss_fn, "_fn", loss_fn)  # a loss object's function
        if loss_fn is losses.binary_crossentropy or (output_shape and output_shape[-1] == 1):
            return identifier, binary_accuracy
        if loss_fn is losses.sparse_categorical_crossentropy:
            return identifier, sparse_categorical_accuracy
        return identifier, categorical_accuracy
    if identifier not in _BY_NAME:
        raise ValueError(f"tf.keras.metrics.get: unknown metric {identifier!r}; known: "
                         f"{sorted(_BY_NAME) + ['accuracy']}")
    return identifier, _BY_NAME[identifier]


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.metrics")
