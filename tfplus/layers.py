"""tf.layers (TF1's functional layers) with TF1's variable names: a layer called without `name` gets the
scope `dense`, `dense_1`, ... (`conv2d`, ...) in the current variable scope, holding `kernel` and `bias`, so
checkpoints and variable lists line up with TensorFlow's.

    import tfplus as tf
    h = tf.layers.conv2d(x, 16, 3, padding="same", activation=tf.nn.relu)   # conv2d/kernel, conv2d/bias
    h = tf.layers.max_pooling2d(h, 2, 2)
    logits = tf.layers.dense(tf.layers.flatten(h), 10)                       # dense/kernel, dense/bias

The classes (tf.layers.Dense, Conv2D, ..., BatchNormalization) make their variables on the first call, in a scope
named as TF1 names it (`dense`, `dense_1`, ... or `<name>`, `<name>_1`), and share them on every later call.
Checked against TensorFlow in tests/tf_oracle/test_tf_layers.py.
"""
from __future__ import annotations

import inspect

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import GraphKeys, Tensor, add_to_collection, convert_to_tensor, name_scope
from tfplus.init_ops import zeros_initializer
from tfplus.layers_ext import batch_normalization, conv1d, separable_conv2d
from tfplus.ops import math_ops, nn_ops
from tfplus.ops.array_ops import concat, expand_dims, identity, reshape, shape, squeeze, stack
from tfplus.variables import VariableScope, get_variable, global_variables, variable_scope

__all__ = ["dense", "conv1d", "conv2d", "conv3d", "conv2d_transpose", "separable_conv2d", "max_pooling1d",
           "max_pooling2d", "average_pooling1d", "average_pooling2d", "flatten", "dropout", "batch_normalization",
           "Dense", "Conv1D", "Conv2D", "Conv2DTranspose", "SeparableConv2D", "MaxPooling1D", "MaxPooling2D",
           "AveragePooling1D", "AveragePooling2D", "Flatten", "Dropout", "BatchNormalization"]


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
        else:  # [..., in] -> [..., units]; outer dimensions unknown until run time come from tf.shape
            flat = math_ops.matmul(reshape(inputs, [-1, n_in]), kernel)
            outer = inputs.shape.as_list()[:-1]
            y = reshape(flat, [-1] + outer[1:] + [units] if None not in outer[1:] else
                        concat([shape(inputs)[:-1], [units]], 0))
            y.set_shape(outer + [units])
        return _finish(y, bias, activation, activity_regularizer)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
           kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
           bias_constraint=None, trainable=True, name=None, reuse=None) -> Tensor:
    """2-D convolution; variables `<name>/kernel` [kh, kw, in, filters] and `<name>/bias` [filters]."""
    dilation_rate = _pair(dilation_rate, "dilation_rate")
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
        y = nn_ops.conv2d(inputs, kernel, stride4, _padding(padding), data_format=fmt, dilations=dilation_rate)
        return _finish(y, bias, activation, activity_regularizer, fmt)


def conv3d(inputs, filters, kernel_size, strides=(1, 1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1, 1), activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
           kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
           bias_constraint=None, trainable=True, name=None, reuse=None) -> Tensor:
    """3-D convolution (tf.nn.conv3d's); variables `<name>/kernel` [kd, kh, kw, in, filters] and `<name>/bias`
    [filters]; channels last only."""
    def triple(value, what):
        value = (value,) * 3 if isinstance(value, int) else tuple(int(v) for v in value)
        if len(value) != 3:
            raise ValueError(f"conv3d: {what} must be an int or three ints, got {value}")
        return value
    if data_format != "channels_last":
        raise ValueError(f"conv3d: data_format {data_format!r} is not supported; tfplus takes 'channels_last'")
    inputs = convert_to_tensor(inputs)
    n_in = inputs.shape[-1].value
    if n_in is None:
        raise ValueError(f"conv3d: the channel dimension of the inputs ({inputs.name}, shape {inputs.shape}) "
                         "must be known")
    with variable_scope(name, default_name="conv3d", reuse=reuse):
        kernel, bias = _weights(list(triple(kernel_size, "kernel_size")) + [n_in, filters], inputs.dtype,
                                kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer, use_bias,
                                trainable, filters)
        y = nn_ops.conv3d(inputs, kernel, [1, *triple(strides, "strides"), 1], _padding(padding),
                          dilations=[1, *triple(dilation_rate, "dilation_rate"), 1])
        return _finish(y, bias, activation, activity_regularizer)


def conv2d_transpose(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
                     activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
                     kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                     bias_constraint=None, trainable=True, name=None, reuse=None) -> Tensor:
    """The transpose of conv2d; variables `<name>/kernel` [kh, kw, filters, in] and `<name>/bias` [filters].
    Output size per spatial dim: in * stride ('same'), in * stride + max(kernel - stride, 0) ('valid')."""
    inputs = convert_to_tensor(inputs)
    fmt = _data_format(data_format)
    h_ax, w_ax, c_ax = (1, 2, 3) if fmt == "NHWC" else (2, 3, 1)
    n_in = inputs.shape[c_ax].value
    if n_in is None:
        raise ValueError(f"conv2d_transpose: the channel dimension of the inputs ({inputs.name}, shape "
                         f"{inputs.shape}) must be known")
    kh, kw = _pair(kernel_size, "kernel_size")
    with variable_scope(name, default_name="conv2d_transpose", reuse=reuse):
        kernel, bias = _weights([kh, kw, filters, n_in], inputs.dtype, kernel_initializer, bias_initializer,
                                kernel_regularizer, bias_regularizer, use_bias, trainable, filters)
        y = _transposed_conv(inputs, kernel, _pair(strides, "strides"), _padding(padding), fmt)
        return _finish(y, bias, activation, activity_regularizer, fmt)


def _transposed_conv(inputs: Tensor, kernel: Tensor, strides: tuple[int, int], pad: str, fmt: str) -> Tensor:
    """tf.nn.conv2d_transpose of `inputs` with `kernel` [kh, kw, out, in] to the size of a layer's output: per
    spatial dim in * stride ('SAME'), in * stride + max(kernel - stride, 0) ('VALID')."""
    h_ax, w_ax, c_ax = (1, 2, 3) if fmt == "NHWC" else (2, 3, 1)
    kh, kw, filters = kernel.shape.as_list()[:3]
    sh, sw = strides

    def out_size(n, k, s):
        return n * s if pad == "SAME" else n * s + max(k - s, 0)
    static = inputs.shape.as_list()
    static[c_ax] = filters
    for ax, k, s in ((h_ax, kh, sh), (w_ax, kw, sw)):
        static[ax] = None if static[ax] is None else out_size(static[ax], k, s)
    # The output's size, from tf.shape where the input's is unknown until run time (the batch, usually).
    dyn = shape(inputs)
    sizes = [d if d is not None else out_size(dyn[ax], *{h_ax: (kh, sh), w_ax: (kw, sw)}[ax])
             if ax in (h_ax, w_ax) else dyn[ax] for ax, d in enumerate(static)]
    stride4 = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
    y = nn_ops.conv2d_transpose(inputs, kernel, stack(sizes), stride4, pad, data_format=fmt)
    y.set_shape(static)
    return y


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


def _pool1d(fn, default_name, inputs, pool_size, strides, padding, data_format, name):
    """A 1-D pooling as the 2-D one over [batch, 1, width, channels] (TF1 does the same)."""
    first = _data_format(data_format) == "NCHW"
    with name_scope(name, default_name):
        x = expand_dims(convert_to_tensor(inputs), 2 if first else 1)
        (p,), (s,) = (_ints1(pool_size, "pool_size"), _ints1(strides, "strides"))
        y = _pool(fn, None, x, (1, p), (1, s), padding, data_format, "pool")
        return squeeze(y, [2 if first else 1])


def _ints1(value, what: str) -> tuple[int]:
    value = (value,) if isinstance(value, int) else tuple(value)
    if len(value) != 1:
        raise ValueError(f"{what} must be an int or one int, got {value}")
    return (int(value[0]),)


def max_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None) -> Tensor:
    """Max over pool_size windows of [batch, width, channels]."""
    return _pool1d(nn_ops.max_pool, "max_pooling1d", inputs, pool_size, strides, padding, data_format, name)


def average_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None) -> Tensor:
    """Mean over pool_size windows of [batch, width, channels]."""
    return _pool1d(nn_ops.avg_pool, "average_pooling1d", inputs, pool_size, strides, padding, data_format, name)


def flatten(inputs, name=None, data_format="channels_last") -> Tensor:
    """[batch, d1, d2, ...] -> [batch, d1 * d2 * ...] (computed at run time where a dimension is unknown)."""
    inputs = convert_to_tensor(inputs)
    with name_scope(name, "flatten"):
        dims = inputs.shape.as_list()
        if inputs.shape.ndims is None or any(d is None for d in dims[1:]):
            return reshape(inputs, stack([shape(inputs)[0], -1]))
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


# -- The classes (TF1's tf.layers.Dense, ...): the functional forms, bound to one variable scope --------------
class _Layer:
    """A TF1 layer object: `Dense(10)(x)`. Constructor arguments are the functional form's (less inputs and
    reuse); the first call opens a scope named as TF1 names a layer object (unique: `<name>`, `<name>_1`, ...)
    and every later call reuses its variables."""
    _fn = staticmethod(dense)
    _base_name = "dense"
    _has_variables = True

    def __init__(self, *args, **kwargs):
        params = list(inspect.signature(self._fn).parameters)[1:]  # after inputs
        bound = dict(zip(params, args), **kwargs)
        self.name = bound.pop("name", None) or self._base_name
        bound.pop("reuse", None)
        unknown = set(bound) - set(params) - {"dtype", "_reuse", "_scope"}
        if unknown:
            raise TypeError(f"tf.layers.{type(self).__name__}: unknown arguments {sorted(unknown)}")
        self._config = {k: v for k, v in bound.items() if k in params}
        self.trainable = self._config.get("trainable", True)
        self._scope: VariableScope | None = None
        self.built = False

    def __call__(self, inputs, *args, **kwargs):
        if not self._has_variables:
            return type(self)._fn(inputs, *args, **kwargs, **self._config, name=self.name)
        if self._scope is None:  # TF1's Layer._set_scope: a unique scope, captured once
            with variable_scope(None, default_name=self.name) as scope:
                self._scope = scope
        out = type(self)._fn(inputs, *args, **kwargs, **self._config, name=self._scope,
                             reuse=True if self.built else None)
        self.built = True
        return out

    apply = __call__

    @property
    def variables(self) -> list:
        if self._scope is None:
            return []
        return [v for v in global_variables() if v.op.name.startswith(self._scope.name + "/")]

    weights = variables

    @property
    def trainable_variables(self) -> list:
        trainable = {id(v) for v in _trainable()}
        return [v for v in self.variables if id(v) in trainable]

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self) -> list:
        trainable = {id(v) for v in _trainable()}
        return [v for v in self.variables if id(v) not in trainable]

    non_trainable_weights = non_trainable_variables

    def __getattr__(self, attr):  # layer.kernel, layer.bias, layer.gamma, layer.moving_mean, ...
        if not attr.startswith("_") and self.__dict__.get("_scope") is not None:
            for v in self.variables:
                if v.op.name == f"{self._scope.name}/{attr}":
                    return v
        raise AttributeError(f"tf.layers.{type(self).__name__} '{self.name}' has no attribute {attr!r}"
                             + ("" if self.__dict__.get("built") else " (its variables exist after its first call)"))


def _trainable() -> list:
    from tfplus.variables import trainable_variables
    return trainable_variables()


def _layer_class(class_name: str, fn, base_name: str, has_variables: bool = True) -> type:
    doc = f"tf.layers.{class_name}: the object form of tf.layers.{fn.__name__}; {_Layer.__doc__.split(': ', 1)[1]}"
    return type(class_name, (_Layer,), {"_fn": staticmethod(fn), "_base_name": base_name,
                                        "_has_variables": has_variables, "__doc__": doc, "__module__": __name__})


Dense = _layer_class("Dense", dense, "dense")
Conv1D = _layer_class("Conv1D", conv1d, "conv1d")
Conv2D = _layer_class("Conv2D", conv2d, "conv2d")
Conv2DTranspose = _layer_class("Conv2DTranspose", conv2d_transpose, "conv2d_transpose")
SeparableConv2D = _layer_class("SeparableConv2D", separable_conv2d, "separable_conv2d")
BatchNormalization = _layer_class("BatchNormalization", batch_normalization, "batch_normalization")
MaxPooling1D = _layer_class("MaxPooling1D", max_pooling1d, "max_pooling1d", False)
MaxPooling2D = _layer_class("MaxPooling2D", max_pooling2d, "max_pooling2d", False)
AveragePooling1D = _layer_class("AveragePooling1D", average_pooling1d, "average_pooling1d", False)
AveragePooling2D = _layer_class("AveragePooling2D", average_pooling2d, "average_pooling2d", False)
Flatten = _layer_class("Flatten", flatten, "flatten", False)
Dropout = _layer_class("Dropout", dropout, "dropout", False)

from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.layers")
