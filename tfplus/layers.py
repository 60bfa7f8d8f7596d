"""tf.layers (TF1's functional layers) with TF1's variable names: a layer called without `name` gets the
scope `dense`, `dense_1`, ... (`conv2d`, ...) in the current variable scope, holding `kernel` and `bias`, so
checkpoints and variable lists line up with TensorFlow's.

    import tfplus as tf
    h = tf.layers.conv2d(x, 16, 3, padding="same", activation=tf.nn.relu)   # conv2d/kernel, conv2d/bias
    h = tf.layers.max_pooling2d(h, 2, 2)
    logits = tf.layers.dense(tf.layers.flatten(h), 10)                       # dense/kernel, dense/bias
"""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import GraphKeys, Tensor, add_to_collection, convert_to_tensor, name_scope
from tfplus.init_ops import zeros_initializer
from tfplus.ops import math_ops, nn_ops
from tfplus.ops.array_ops import identity, reshape
from tfplus.variables import get_variable, variable_scope

__all__ = ["dense", "conv2d", "max_pooling2d", "average_pooling2d", "flatten", "dropout"]


def _pair(value, what: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"{what} must be an int or a pair of ints, got {value}")
    return value


def _padding(padding: str) -> str:
    if padding.upper() not in ("SAME", "VALID"):
        raise ValueError(f"padding must be 'same' or 'valid', got {padding!r}")
    return padding.upper()


def _data_format(data_format: str) -> str:
    formats = {"channels_last": "NHWC", "channels_first": "NCHW"}
    if data_format not in formats:
        raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}")
    return formats[data_format]


def _weights(shape, dtype, kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
             use_bias, trainable, units):
    kernel = get_variable("kernel", shape, dtype, initializer=kernel_initializer, regularizer=kernel_regularizer,
                          trainable=trainable)
    bias = None
    if use_bias:
        bias = get_variable("bias", [units], dtype, initializer=bias_initializer or zeros_initializer(),
                            regularizer=bias_regularizer, trainable=trainable)
    return kernel, bias


def _finish(y, bias, activation, activity_regularizer, data_format="NHWC"):
    if bias is not None:
        y = nn_ops.bias_add(y, bias, data_format=data_format)
    if activation is not None:
        y = activation(y)
    if activity_regularizer is not None:
        with name_scope("ActivityRegularizer"):
            add_to_collection(GraphKeys.REGULARIZATION_LOSSES, activity_regularizer(y))
    return y


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
          kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
          bias_constraint=None, trainable=True, name=None, reuse=None) -> Tensor:
    """activation(inputs @ kernel + bias) over the last axis; variables `<name>/kernel` [in, units] and
    `<name>/bias` [units]."""
    inputs = convert_to_tensor(inputs)
    n_in = inputs.shape[-1].value if inputs.shape.ndims else None
    if n_in is None:
        raise ValueError(f"dense: the last dimension of the inputs ({inputs.name}, shape {inputs.shape}) must be "
                         "known")
    with variable_scope(name, default_name="dense", reuse=reuse):
        kernel, bias = _weights([n_in, units], inputs.dtype, kernel_initializer, bias_initializer,
                                kernel_regularizer, bias_regularizer, use_bias, trainable, units)
        if inputs.shape.ndims == 2:
            y = math_ops.matmul(inputs, kernel)
        else:  # [..., in] -> [..., units]
            flat = math_ops.matmul(reshape(inputs, [-1, n_in]), kernel)
            y = reshape(flat, [-1 if d is None else d for d in inputs.shape.as_list()[:-1]] + [units])
        return _finish(y, bias, activation, activity_regularizer)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
           kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
           bias_constraint=None, trainable=True, name=None, reuse=None) -> Tensor:
    """2-D convolution; variables `<name>/kernel` [kh, kw, in, filters] and `<name>/bias` [filters]."""
    if _pair(dilation_rate, "dilation_rate") != (1, 1):
        raise NotImplementedError("tf.layers.conv2d: dilation_rate other than 1 is not implemented in tfplus")
    inputs = convert_to_tensor(inputs)
    fmt = _data_format(data_format)
    n_in = inputs.shape[-1 if fmt == "NHWC" else 1].value
    if n_in is None:
        raise ValueError(f"conv2d: the channel dimension of the inputs ({inputs.name}, shape {inputs.shape}) "
                         "must be known")
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(strides, "strides")
    with variable_scope(name, default_name="conv2d", reuse=reuse):
        kernel, bias = _weights([kh, kw, n_in, filters], inputs.dtype, kernel_initializer, bias_initializer,
                                kernel_regularizer, bias_regularizer, use_bias, trainable, filters)
        stride4 = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
        y = nn_ops.conv2d(inputs, kernel, stride4, _padding(padding), data_format=fmt)
        return _finish(y, bias, activation, activity_regularizer, fmt)


def _pool(fn, default_name, inputs, pool_size, strides, padding, data_format, name):
    fmt = _data_format(data_format)
    ph, pw = _pair(pool_size, "pool_size")
    sh, sw = _pair(strides, "strides")
    four = (lambda a, b: [1, a, b, 1]) if fmt == "NHWC" else (lambda a, b: [1, 1, a, b])
    with name_scope(name, default_name):
        return fn(inputs, four(ph, pw), four(sh, sw), _padding(padding), data_format=fmt)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None) -> Tensor:
    """Max over pool_size windows."""
    return _pool(nn_ops.max_pool, "max_pooling2d", inputs, pool_size, strides, padding, data_format, name)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None) -> Tensor:
    """Mean over pool_size windows (SAME padding averages only the real elements, as TF does)."""
    return _pool(nn_ops.avg_pool, "average_pooling2d", inputs, pool_size, strides, padding, data_format, name)


def flatten(inputs, name=None, data_format="channels_last") -> Tensor:
    """[batch, d1, d2, ...] -> [batch, d1 * d2 * ...]."""
    inputs = convert_to_tensor(inputs)
    with name_scope(name, "flatten"):
        dims = inputs.shape.as_list()
        if inputs.shape.ndims is None or any(d is None for d in dims[1:]):
            raise ValueError(f"flatten: all but the first dimension of {inputs.name} (shape {inputs.shape}) must "
                             "be known")
        return reshape(inputs, [-1, int(np.prod(dims[1:]))])


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None) -> Tensor:
    """Drops elements with probability `rate` and scales the rest by 1 / (1 - rate) when `training` (a bool
    or a boolean tensor); the identity otherwise."""
    with name_scope(name, "dropout"):
        inputs = convert_to_tensor(inputs)
        if isinstance(training, bool):
            if not training:
                return identity(inputs)
            return nn_ops.dropout(inputs, keep_prob=1.0 - rate, noise_shape=noise_shape, seed=seed)
        # A tensor: blend the two branches by the flag (both are computed; no control flow needed).
        on = math_ops.cast(convert_to_tensor(training, dtype=_dt.bool_), inputs.dtype)
        dropped = nn_ops.dropout(inputs, keep_prob=1.0 - rate, noise_shape=noise_shape, seed=seed)
        return on * dropped + (1.0 - on) * inputs


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.layers")
