"""tf.keras.layers in TF1 graph mode, on tf.layers' implementations (tfplus.layers, layers_ext) and tf.nn.

    import tfplus as tf
    x = tf.placeholder(tf.float32, [None, 28, 28, 1])
    h = tf.keras.layers.Conv2D(16, 3, activation="relu")(x)        # conv2d/kernel, conv2d/bias
    h = tf.keras.layers.MaxPooling2D()(h)
    logits = tf.keras.layers.Dense(10)(tf.keras.layers.Flatten()(h))

Keras's defaults where they differ from tf.layers': initializers by name ('glorot_uniform' kernels, 'zeros'
biases), pooling strides = pool_size, Dropout and BatchNormalization in training mode when the learning phase
(tf.keras.backend.learning_phase()) is fed 1 or `training=True` is passed. Checked against TensorFlow's Keras in
tests/tf_oracle/test_keras*.py.
"""
from __future__ import annotations

import inspect

import numpy as np

from tfplus import dtypes as _dt
from tfplus import layers as _tfl
from tfplus import layers_ext as _ext
from tfplus.framework import convert_to_tensor
from tfplus.keras import activations, initializers, regularizers
from tfplus.keras.engine import Input, InputLayer, Layer
from tfplus.keras.recurrent import GRU, LSTM, Bidirectional, SimpleRNN
from tfplus.ops import array_ops, control_flow_ops, math_ops, nn_ops

__all__ = ["Activation", "Add", "Average", "AveragePooling1D", "AveragePooling2D", "BatchNormalization",
           "Bidirectional", "Concatenate", "Conv1D", "Conv2D", "Conv2DTranspose", "Dense", "Dropout", "ELU",
           "Embedding", "Flatten", "GRU", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
           "GlobalMaxPooling2D", "Input", "InputLayer", "LSTM", "Lambda", "Layer", "LeakyReLU", "MaxPooling1D",
           "MaxPooling2D", "Maximum", "Minimum", "Multiply", "Permute", "ReLU", "RepeatVector", "Reshape",
           "SeparableConv2D", "SimpleRNN", "Softmax", "Subtract", "TimeDistributed", "UpSampling2D", "ZeroPadding2D",
           "add", "average", "concatenate", "maximum", "minimum", "multiply", "subtract"]

_LAYER_ARGS = ("trainable", "name", "dtype", "input_shape", "batch_input_shape", "input_dim", "batch_size")


def _resolve(key: str, value):
    """A Keras argument as tf.layers takes it: activations, initializers and regularizers by name."""
    if key == "activation":
        return None if value is None else activations.get(value)
    if key.endswith("_initializer"):
        return initializers.get(value)
    if key.endswith("_regularizer"):
        return regularizers.get(value)
    return value


class _TFLayer(Layer):
    """A Keras layer computed by a tf.layers function `_fn(inputs, ..., trainable, name, reuse)`, its variables
    in the layer's scope. `_defaults` are Keras's where they differ from the function's."""
    _fn = staticmethod(_tfl.dense)
    _defaults: dict = {}
    _names_ops = False  # the tf.layers function opens the layer's scope

    def __init__(self, *args, **kwargs):
        params = [p for p in list(inspect.signature(self._fn).parameters)[1:] if p not in ("name", "reuse")]
        base = {k: kwargs.pop(k) for k in list(kwargs) if k in _LAYER_ARGS}
        config = dict(self._defaults)
        config.update(zip(params, args))
        unknown = set(kwargs) - set(params)
        if unknown:
            raise TypeError(f"tf.keras.layers.{type(self).__name__}: unknown arguments {sorted(unknown)}")
        config.update(kwargs)
        if config.get("data_format", "") is None:
            config["data_format"] = "channels_last"
        self._config = {k: _resolve(k, v) for k, v in config.items()}
        super().__init__(**base)

    def call(self, inputs):
        return type(self)._fn(inputs, **self._config, trainable=self.trainable, name=self._scope)

    def get_config(self) -> dict:
        return {**super().get_config(), **self._config}

    def __getattr__(self, attr):  # layer.kernel, layer.bias, layer.gamma, layer.moving_mean, ...
        if not attr.startswith("_") and self.__dict__.get("_scope") is not None:
            for v in self.__dict__.get("_weights", []):
                if v.op.name == f"{self._scope.name}/{attr}":
                    return v
        raise AttributeError(f"tf.keras.layers.{type(self).__name__} '{self.__dict__.get('name')}' has no attribute "
                             f"{attr!r}" + ("" if self.__dict__.get("built") else " (its weights exist after its "
                                                                                  "first call)"))


def _tf_layer(class_name: str, fn, **defaults) -> type:
    return type(class_name, (_TFLayer,), {"_fn": staticmethod(fn), "_defaults": defaults, "__module__": __name__,
                                          "__doc__": f"tf.keras.layers.{class_name}: tf.layers.{fn.__name__} with "
                                                     "Keras's defaults."})


_KERNEL = {"kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"}
Dense = _tf_layer("Dense", _tfl.dense, **_KERNEL)
Conv1D = _tf_layer("Conv1D", _ext.conv1d, **_KERNEL)
Conv2D = _tf_layer("Conv2D", _tfl.conv2d, **_KERNEL)
Conv2DTranspose = _tf_layer("Conv2DTranspose", _tfl.conv2d_transpose, **_KERNEL)
SeparableConv2D = _tf_layer("SeparableConv2D", _ext.separable_conv2d, depthwise_initializer="glorot_uniform",
                            pointwise_initializer="glorot_uniform", bias_initializer="zeros")
Convolution1D, Convolution2D = Conv1D, Conv2D


class BatchNormalization(_TFLayer):
    """tf.layers.batch_normalization; training mode (batch statistics, moving averages updated by
    model.updates / fit) when the learning phase is 1 or `training=True`."""
    _fn = staticmethod(_ext.batch_normalization)
    _defaults = {"beta_initializer": "zeros", "gamma_initializer": "ones", "moving_mean_initializer": "zeros",
                 "moving_variance_initializer": "ones"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._config.pop("training", None)

    def call(self, inputs, training=None):
        if isinstance(training, (int, np.integer)):
            training = bool(training)
        return _ext.batch_normalization(inputs, **self._config, training=training, trainable=self.trainable,
                                        name=self._scope)


class _Pooling(Layer):
    _fn = staticmethod(_tfl.max_pooling2d)
    _default_pool = (2, 2)

    def __init__(self, pool_size=None, strides=None, padding="valid", data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.pool_size = self._default_pool if pool_size is None else pool_size
        self.strides = self.pool_size if strides is None else strides
        self.padding, self.data_format = padding, data_format or "channels_last"

    def call(self, inputs):
        return type(self)._fn(inputs, self.pool_size, self.strides, self.padding, self.data_format)


def _pooling(class_name: str, fn, pool) -> type:
    return type(class_name, (_Pooling,), {"_fn": staticmethod(fn), "_default_pool": pool, "__module__": __name__})


MaxPooling2D = _pooling("MaxPooling2D", _tfl.max_pooling2d, (2, 2))
AveragePooling2D = _pooling("AveragePooling2D", _tfl.average_pooling2d, (2, 2))
MaxPooling1D = _pooling("MaxPooling1D", _tfl.max_pooling1d, 2)
AveragePooling1D = _pooling("AveragePooling1D", _tfl.average_pooling1d, 2)
MaxPool2D, AvgPool2D, MaxPool1D, AvgPool1D = MaxPooling2D, AveragePooling2D, MaxPooling1D, AveragePooling1D


class _GlobalPooling(Layer):
    _reduce = staticmethod(math_ops.reduce_mean)
    _axes = (1, 2)

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(**kwargs)
        first = (data_format or "channels_last") == "channels_first"
        self._axes = tuple(a + 1 for a in self._axes) if first else self._axes
        self.keepdims = keepdims

    def call(self, inputs):
        return type(self)._reduce(inputs, list(self._axes), keepdims=self.keepdims)


def _global(class_name: str, reduce, axes) -> type:
    return type(class_name, (_GlobalPooling,), {"_reduce": staticmethod(reduce), "_axes": axes,
                                                "__module__": __name__})


GlobalAveragePooling2D = _global("GlobalAveragePooling2D", math_ops.reduce_mean, (1, 2))
GlobalMaxPooling2D = _global("GlobalMaxPooling2D", math_ops.reduce_max, (1, 2))
GlobalAveragePooling1D = _global("GlobalAveragePooling1D", math_ops.reduce_mean, (1,))
GlobalMaxPooling1D = _global("GlobalMaxPooling1D", math_ops.reduce_max, (1,))
GlobalAvgPool2D, GlobalMaxPool2D = GlobalAveragePooling2D, GlobalMaxPooling2D


class Flatten(Layer):
    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.data_format = data_format or "channels_last"

    def call(self, inputs):
        return _tfl.flatten(inputs, data_format=self.data_format)


class Dropout(Layer):
    """Drops `rate` of the elements (scaling the rest by 1 / (1 - rate)) in training mode; the identity else."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate, self.noise_shape, self.seed = rate, noise_shape, seed

    def call(self, inputs, training=None):
        if isinstance(training, (int, np.integer)):
            training = bool(training)
        if self.rate == 0 or training is False:
            return array_ops.identity(inputs)
        if training is True:
            return _tfl.dropout(inputs, self.rate, self.noise_shape, self.seed, training=True)
        # The learning phase: a cond, as Keras's smart_cond, so no dropout is drawn at test time.
        return control_flow_ops.cond(training, lambda: _tfl.dropout(inputs, self.rate, self.noise_shape, self.seed,
                                                                    training=True),
                                     lambda: array_ops.identity(inputs))


class Activation(Layer):
    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs):
        return self.activation(inputs)


class ReLU(Layer):
    """max(x, 0) (x below threshold: negative_slope * (x - threshold)), capped at max_value."""

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, **kwargs):
        super().__init__(**kwargs)
        self.max_value, self.negative_slope, self.threshold = max_value, negative_slope, threshold

    def call(self, inputs):
        x = convert_to_tensor(inputs)
        if self.negative_slope == 0 and self.threshold == 0:
            y = nn_ops.relu(x)
        else:
            y = math_ops.where(x >= self.threshold, x, self.negative_slope * (x - self.threshold))
        return y if self.max_value is None else math_ops.minimum(y, float(self.max_value))


class LeakyReLU(Layer):
    def __init__(self, alpha=0.3, **kwargs):
        super().__init__(**kwargs)
        self.alpha = alpha

    def call(self, inputs):
        return nn_ops.leaky_relu(inputs, alpha=self.alpha)


class ELU(Layer):
    def __init__(self, alpha=1.0, **kwargs):
        if alpha != 1.0:
            raise NotImplementedError(f"tf.keras.layers.ELU(alpha={alpha}): only alpha=1 is supported by tfplus")
        super().__init__(**kwargs)

    def call(self, inputs):
        return nn_ops.elu(inputs)


class Softmax(Layer):
    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = axis

    def call(self, inputs):
        return activations.softmax(inputs, axis=self.axis)


class Embedding(Layer):
    """Rows of `embeddings` (input_dim, output_dim) for integer ids; initializer 'uniform' (+-0.05)."""

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", embeddings_regularizer=None,
                 activity_regularizer=None, embeddings_constraint=None, mask_zero=False, input_length=None,
                 **kwargs):
        if mask_zero:
            raise NotImplementedError("tf.keras.layers.Embedding(mask_zero=True): masking is not supported by "
                                      "tfplus; pass sequence lengths to the RNN instead (tf.nn.dynamic_rnn)")
        if input_length is not None and "input_shape" not in kwargs:
            kwargs["input_shape"] = (input_length,) if isinstance(input_length, int) else tuple(input_length)
        super().__init__(**kwargs)
        self.input_dim, self.output_dim = input_dim, output_dim
        self.embeddings_initializer, self.embeddings_regularizer = embeddings_initializer, embeddings_regularizer

    def build(self, input_shape):
        self.embeddings = self.add_weight("embeddings", (self.input_dim, self.output_dim),
                                          initializer=self.embeddings_initializer,
                                          regularizer=self.embeddings_regularizer)
        self.built = True

    def call(self, inputs):
        ids = convert_to_tensor(inputs)
        if not ids.dtype.is_integer:
            ids = math_ops.cast(ids, _dt.int32)
        return array_ops.embedding_lookup(self.embeddings, ids)


class Reshape(Layer):
    def __init__(self, target_shape, **kwargs):
        super().__init__(**kwargs)
        self.target_shape = tuple(target_shape)

    def call(self, inputs):
        return array_ops.reshape(inputs, (-1,) + self.target_shape)


class Permute(Layer):
    def __init__(self, dims, **kwargs):
        super().__init__(**kwargs)
        self.dims = tuple(dims)

    def call(self, inputs):
        return array_ops.transpose(inputs, (0,) + self.dims)


class RepeatVector(Layer):
    def __init__(self, n, **kwargs):
        super().__init__(**kwargs)
        self.n = n

    def call(self, inputs):
        return array_ops.tile(array_ops.expand_dims(inputs, 1), [1, self.n, 1])


class ZeroPadding2D(Layer):
    def __init__(self, padding=(1, 1), data_format=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(padding, int):
            padding = ((padding, padding), (padding, padding))
        elif isinstance(padding[0], int):
            padding = ((padding[0], padding[0]), (padding[1], padding[1]))
        self.padding = tuple(tuple(p) for p in padding)
        self.first = (data_format or "channels_last") == "channels_first"

    def call(self, inputs):
        pads = [[0, 0], [0, 0], list(self.padding[0]), list(self.padding[1])] if self.first else \
            [[0, 0], list(self.padding[0]), list(self.padding[1]), [0, 0]]
        return array_ops.pad(inputs, pads)


class Lambda(Layer):
    """Any function of the inputs as a layer: Lambda(lambda x: x * 2)."""

    def __init__(self, function, output_shape=None, mask=None, arguments=None, **kwargs):
        super().__init__(**kwargs)
        self.function, self.arguments = function, arguments or {}

    def call(self, inputs):
        return self.function(inputs, **self.arguments)


class UpSampling2D(Layer):
    """Each pixel repeated size[0] x size[1] times (Keras's 'nearest' interpolation)."""

    def __init__(self, size=(2, 2), data_format=None, interpolation="nearest", **kwargs):
        if interpolation != "nearest":
            raise NotImplementedError(f"tf.keras.layers.UpSampling2D(interpolation={interpolation!r}): only "
                                      "'nearest' is supported by tfplus")
        super().__init__(**kwargs)
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.first = (data_format or "channels_last") == "channels_first"

    def call(self, inputs):
        x = convert_to_tensor(inputs)
        h_ax = 2 if self.first else 1
        for ax, n in ((h_ax, self.size[0]), (h_ax + 1, self.size[1])):
            shape = x.shape.as_list()
            x = array_ops.expand_dims(x, ax + 1)
            x = array_ops.tile(x, [1] * (ax + 1) + [n] + [1] * (len(shape) - ax - 1))
            dyn = array_ops.shape(x)
            x = array_ops.reshape(x, array_ops.concat([dyn[:ax], [dyn[ax] * n], dyn[ax + 2:]], 0))
            x.set_shape(shape[:ax] + [None if shape[ax] is None else shape[ax] * n] + shape[ax + 1:])
        return x


class TimeDistributed(Layer):
    """`layer` applied to every step of (batch, time, ...) inputs; its weights are this layer's
    (`time_distributed/kernel`)."""

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer

    def call(self, inputs):
        x = convert_to_tensor(inputs)
        shape = x.shape.as_list()
        if self.layer._scope is None:
            self.layer._scope = self._scope  # as Keras: the inner layer's variables under this layer's name
        y = self.layer(array_ops.reshape(x, [-1] + shape[2:]))
        out = y.shape.as_list()[1:]
        steps = shape[1] if shape[1] is not None else array_ops.shape(x)[1]
        y = array_ops.reshape(y, [-1, steps] + out) if shape[1] is not None else \
            array_ops.reshape(y, array_ops.concat([[-1, steps], out], 0))
        y.set_shape([shape[0], shape[1]] + out)
        return y


# -- merging layers ------------------------------------------------------------------------------------------------
class _Merge(Layer):
    def call(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
            raise ValueError(f"tf.keras.layers.{type(self).__name__} '{self.name}': expects a list of at least 2 "
                             f"tensors, got {inputs!r}")
        return self._merge([convert_to_tensor(x) for x in inputs])


def _fold(fn):
    def merge(self, xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out
    return merge


class Add(_Merge):
    _merge = _fold(math_ops.add)


class Multiply(_Merge):
    _merge = _fold(math_ops.multiply)


class Maximum(_Merge):
    _merge = _fold(math_ops.maximum)


class Minimum(_Merge):
    _merge = _fold(math_ops.minimum)


class Subtract(_Merge):
    def _merge(self, xs):
        if len(xs) != 2:
            raise ValueError(f"tf.keras.layers.Subtract '{self.name}': expects exactly 2 inputs, got {len(xs)}")
        return math_ops.subtract(xs[0], xs[1])


class Average(_Merge):
    def _merge(self, xs):
        return _fold(math_ops.add)(self, xs) / float(len(xs))


class Concatenate(_Merge):
    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = axis

    def _merge(self, xs):
        return array_ops.concat(xs, self.axis)


def _functional(cls):
    def fn(inputs, **kwargs):
        return cls(**kwargs)(inputs)
    fn.__name__ = cls.__name__.lower()
    fn.__doc__ = f"tf.keras.layers.{cls.__name__}(**kwargs)(inputs)"
    return fn


add, multiply, maximum, minimum = _functional(Add), _functional(Multiply), _functional(Maximum), _functional(Minimum)
subtract, average, concatenate = _functional(Subtract), _functional(Average), _functional(Concatenate)


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.layers")
