"""tf.contrib.layers (TF1): fully_connected, conv2d, flatten, max_pool2d, avg_pool2d, dropout, regularizers and
initializers, with contrib's defaults (ReLU activation, `weights`/`biases` variables under `fully_connected`,
`Conv`, ...).

    import tfplus as tf
    h = tf.contrib.layers.conv2d(x, 16, 3)                 # Conv/weights, Conv/biases; SAME, ReLU
    logits = tf.contrib.layers.fully_connected(tf.contrib.layers.flatten(h), 10, activation_fn=None)
"""
from __future__ import annotations

import math

from tfplus import dtypes as _dt
from tfplus import layers as _layers
from tfplus.contrib.framework import add_arg_scope
from tfplus.framework import GraphKeys, Tensor, add_to_collection, convert_to_tensor, name_scope
from tfplus.init_ops import Initializer, VarianceScaling, _fans, zeros_initializer
from tfplus.ops import math_ops, nn_ops
from tfplus.ops.array_ops import constant
from tfplus.ops.random_ops import truncated_normal
from tfplus.unsupported import module_getattr
from tfplus.variables import get_variable, variable_scope

__all__ = ["flatten", "max_pool2d", "avg_pool2d", "dropout", "batch_norm", "layer_norm", "instance_norm",
           "conv2d_transpose", "embed_sequence",
           "l1_l2_regularizer", "fully_connected", "conv2d", "l1_regularizer", "l2_regularizer", "sum_regularizer",
           "apply_regularization", "xavier_initializer", "xavier_initializer_conv2d",
           "variance_scaling_initializer", "repeat", "stack", "one_hot_encoding"]


_ZEROS = zeros_initializer()  # contrib's default biases initializer (None means: no biases)


class _ContribVarianceScaling(Initializer):
    """contrib's variance scaling: uniform in +-sqrt(3 factor / n), or a normal truncated at 2 stddev with
    stddev sqrt(1.3 factor / n); n is fan_in, fan_out or their mean."""

    def __init__(self, factor, mode, uniform, seed, dtype):
        if mode not in ("FAN_IN", "FAN_OUT", "FAN_AVG"):
            raise TypeError(f"variance_scaling_initializer: unknown mode {mode!r} (FAN_IN, FAN_OUT, FAN_AVG)")
        self.factor, self.mode, self.uniform, self.seed, self.dtype = factor, mode, uniform, seed, dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        if self.uniform:
            mode = {"FAN_IN": "fan_in", "FAN_OUT": "fan_out", "FAN_AVG": "fan_avg"}[self.mode]
            return VarianceScaling(self.factor, mode, "uniform", self.seed, self.dtype)(shape, dtype)
        fan_in, fan_out = _fans(shape)
        n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "FAN_AVG": (fan_in + fan_out) / 2.0}[self.mode]
        return truncated_normal(shape, 0.0, math.sqrt(1.3 * self.factor / n), self._dtype(dtype), seed=self.seed)


def variance_scaling_initializer(factor=2.0, mode="FAN_IN", uniform=False, seed=None, dtype=_dt.float32):
    """He initialization by default (factor 2, FAN_IN, truncated normal)."""
    return _ContribVarianceScaling(factor, mode, uniform, seed, dtype)


def xavier_initializer(uniform=True, seed=None, dtype=_dt.float32):
    """Glorot/Xavier: variance 2 / (fan_in + fan_out)."""
    return variance_scaling_initializer(1.0, "FAN_AVG", uniform, seed, dtype)


xavier_initializer_conv2d = xavier_initializer


def l2_regularizer(scale, scope=None):
    """weights -> scale * sum(weights^2) / 2 (None for scale 0)."""
    if scale < 0.0:
        raise ValueError(f"l2_regularizer: scale must be >= 0, got {scale}")

    def l2(weights):
        if scale == 0.0:
            return None
        with name_scope(scope, "l2_regularizer"):
            return math_ops.multiply(constant(scale, dtype=weights.dtype, name="scale"), nn_ops.l2_loss(weights),
                                     name="value")
    return l2


def l1_regularizer(scale, scope=None):
    """weights -> scale * sum(|weights|) (None for scale 0)."""
    if scale < 0.0:
        raise ValueError(f"l1_regularizer: scale must be >= 0, got {scale}")

    def l1(weights):
        if scale == 0.0:
            return None
        with name_scope(scope, "l1_regularizer"):
            return math_ops.multiply(constant(scale, dtype=weights.dtype, name="scale"),
                                     math_ops.reduce_sum(math_ops.abs(weights)), name="value")
    return l1


def sum_regularizer(regularizer_list, scope=None):
    """weights -> the sum of the regularizers' penalties."""
    def total(weights):
        terms = [t for t in (r(weights) for r in regularizer_list) if t is not None]
        return math_ops.add_n(terms) if terms else None
    return total


def apply_regularization(regularizer, weights_list=None) -> Tensor:
    """The sum of `regularizer` over `weights_list` (default: the WEIGHTS collection), also added to
    REGULARIZATION_LOSSES."""
    from tfplus.framework import get_collection
    weights_list = get_collection(GraphKeys.WEIGHTS) if weights_list is None else weights_list
    terms = [t for t in (regularizer(w) for w in weights_list) if t is not None]
    if not terms:
        raise ValueError("apply_regularization: the regularizer gave no penalty for any weight")
    total = math_ops.add_n(terms)
    add_to_collection(GraphKeys.REGULARIZATION_LOSSES, total)
    return total


@add_arg_scope
def flatten(inputs, outputs_collections=None, scope=None) -> Tensor:
    """[batch, ...] -> [batch, k]."""
    with name_scope(scope, "Flatten"):
        return _layers.flatten(inputs)


def _collect(y, outputs_collections):
    for name in outputs_collections or ():
        add_to_collection(name, y)
    return y


def _pool2d(pool, default_name, inputs, kernel_size, stride, padding, data_format, outputs_collections, scope):
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"{default_name}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    layout = "channels_last" if data_format == "NHWC" else "channels_first"
    with name_scope(scope, default_name):
        return _collect(pool(inputs, kernel_size, stride, padding.lower(), layout), outputs_collections)


@add_arg_scope
def max_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC", outputs_collections=None,
               scope=None) -> Tensor:
    """contrib's max pooling: tf.layers.max_pooling2d with contrib's defaults (stride 2, VALID)."""
    return _pool2d(_layers.max_pooling2d, "MaxPool2D", inputs, kernel_size, stride, padding, data_format,
                   outputs_collections, scope)


@add_arg_scope
def avg_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC", outputs_collections=None,
               scope=None) -> Tensor:
    """contrib's average pooling: tf.layers.average_pooling2d with contrib's defaults (stride 2, VALID)."""
    return _pool2d(_layers.average_pooling2d, "AvgPool2D", inputs, kernel_size, stride, padding, data_format,
                   outputs_collections, scope)


@add_arg_scope
def dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True, outputs_collections=None, scope=None,
            seed=None) -> Tensor:
    """contrib's dropout: keeps each element with probability keep_prob (scaled by 1 / keep_prob) while
    is_training (a bool or a bool Tensor); the identity otherwise."""
    with name_scope(scope, "Dropout"):
        y = _layers.dropout(inputs, rate=1.0 - keep_prob, noise_shape=noise_shape, seed=seed, training=is_training)
        return _collect(y, outputs_collections)


def _weights_and_biases(shape, units, dtype, weights_initializer, weights_regularizer, biases_initializer,
                        biases_regularizer, trainable, variables_collections):
    weights = get_variable("weights", shape, dtype, initializer=weights_initializer,
                           regularizer=weights_regularizer, trainable=trainable)
    add_to_collection(GraphKeys.MODEL_VARIABLES, weights)
    add_to_collection(GraphKeys.WEIGHTS, weights)
    biases = None
    if biases_initializer is not None:
        biases = get_variable("biases", [units], dtype, initializer=biases_initializer,
                              regularizer=biases_regularizer, trainable=trainable)
        add_to_collection(GraphKeys.MODEL_VARIABLES, biases)
        add_to_collection(GraphKeys.BIASES, biases)
    for name in variables_collections or ():
        add_to_collection(name, weights)
        if biases is not None:
            add_to_collection(name, biases)
    return weights, biases


def _finish(y, biases, normalizer_fn, normalizer_params, activation_fn, outputs_collections, data_format="NHWC"):
    if normalizer_fn is not None:
        y = normalizer_fn(y, **(normalizer_params or {}))
    elif biases is not None:
        y = nn_ops.bias_add(y, biases, data_format=data_format)
    if activation_fn is not None:
        y = activation_fn(y)
    return _collect(y, outputs_collections)


@add_arg_scope
def fully_connected(inputs, num_outputs, activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None,
                    weights_initializer=None, weights_regularizer=None, biases_initializer=_ZEROS,
                    biases_regularizer=None, reuse=None, variables_collections=None, outputs_collections=None,
                    trainable=True, scope=None) -> Tensor:
    """activation_fn(inputs @ weights + biases); variables `<scope>/weights` and `<scope>/biases` (scope
    `fully_connected` by default). Biases are skipped with a normalizer_fn, as in TF1."""
    inputs = convert_to_tensor(inputs)
    n_in = inputs.shape[-1].value if inputs.shape.ndims else None
    if n_in is None:
        raise ValueError(f"fully_connected: the last dimension of {inputs.name} (shape {inputs.shape}) must be "
                         "known")
    with variable_scope(scope, default_name="fully_connected", reuse=reuse):
        weights, biases = _weights_and_biases(
            [n_in, num_outputs], num_outputs, inputs.dtype, weights_initializer or xavier_initializer(),
            weights_regularizer, None if normalizer_fn is not None else biases_initializer, biases_regularizer,
            trainable, variables_collections)
        return _finish(math_ops.matmul(inputs, weights), biases, normalizer_fn, normalizer_params, activation_fn,
                       outputs_collections)


@add_arg_scope
def conv2d(inputs, num_outputs, kernel_size, stride=1, padding="SAME", data_format=None, rate=1,
           activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None, weights_initializer=None,
           weights_regularizer=None, biases_initializer=_ZEROS, biases_regularizer=None, reuse=None,
           variables_collections=None, outputs_collections=None, trainable=True, scope=None) -> Tensor:
    """2-D convolution; variables `<scope>/weights` [kh, kw, in, out] and `<scope>/biases` (scope `Conv`)."""
    fmt = data_format or "NHWC"
    if fmt not in ("NHWC", "NCHW"):
        raise ValueError(f"conv2d: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    inputs = convert_to_tensor(inputs)
    n_in = inputs.shape[-1 if fmt == "NHWC" else 1].value
    kh, kw = _layers._pair(kernel_size, "kernel_size")
    sh, sw = _layers._pair(stride, "stride")
    with variable_scope(scope, default_name="Conv", reuse=reuse):
        weights, biases = _weights_and_biases(
            [kh, kw, n_in, num_outputs], num_outputs, inputs.dtype, weights_initializer or xavier_initializer(),
            weights_regularizer, None if normalizer_fn is not None else biases_initializer, biases_regularizer,
            trainable, variables_collections)
        strides = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
        y = nn_ops.conv2d(inputs, weights, strides, padding.upper(), data_format=fmt,
                          dilations=_layers._pair(rate, "rate"))
        return _finish(y, biases, normalizer_fn, normalizer_params, activation_fn, outputs_collections, fmt)


def _layer_name(layer, default: str) -> str:
    return getattr(layer, "__name__", None) or getattr(getattr(layer, "func", None), "__name__", None) or default


def repeat(inputs, repetitions, layer, *args, **kwargs) -> Tensor:
    """`layer(inputs, *args, **kwargs)` applied `repetitions` times, each in scope `<scope>/<scope>_<i>` (slim's
    VGG: repeat(x, 2, conv2d, 64, [3, 3], scope="conv1") makes conv1/conv1_1 and conv1/conv1_2)."""
    scope = kwargs.pop("scope", None)
    with variable_scope(scope, default_name="Repeat"):
        outputs = convert_to_tensor(inputs)
        name = scope or _layer_name(layer, "repeat")
        for i in range(repetitions):
            outputs = layer(outputs, *args, **{**kwargs, "scope": f"{name}_{i + 1}"})
        return outputs


def stack(inputs, layer, stack_args, **kwargs) -> Tensor:
    """`layer` applied once per entry of `stack_args` (its positional arguments), each in scope
    `<scope>/<scope>_<i>`: stack(x, fully_connected, [32, 64, 128], scope="fc")."""
    if not isinstance(stack_args, (list, tuple)):
        raise ValueError(f"stack: stack_args must be a list or tuple, got {type(stack_args).__name__}")
    scope = kwargs.pop("scope", None)
    with variable_scope(scope, default_name="Stack"):
        outputs = convert_to_tensor(inputs)
        name = scope or _layer_name(layer, "stack")
        for i, layer_args in enumerate(stack_args):
            layer_args = layer_args if isinstance(layer_args, (list, tuple)) else [layer_args]
            outputs = layer(outputs, *layer_args, **{**kwargs, "scope": f"{name}_{i + 1}"})
        return outputs


@add_arg_scope
def one_hot_encoding(labels, num_classes, on_value=1.0, off_value=0.0, outputs_collections=None, scope=None):
    """labels as float32 one-hot rows [..., num_classes]."""
    from tfplus.ops.array_ops import one_hot
    with name_scope(scope, "OneHotEncoding"):
        return _collect(one_hot(labels, num_classes, on_value=on_value, off_value=off_value), outputs_collections)


__getattr__ = module_getattr(__name__, "tf.contrib.layers")


def l1_l2_regularizer(scale_l1=1.0, scale_l2=1.0, scope=None):
    """weights -> scale_l1 * sum(|weights|) + scale_l2 * sum(weights^2) / 2."""
    return sum_regularizer([l1_regularizer(scale_l1), l2_regularizer(scale_l2)], scope=scope)


@add_arg_scope
def conv2d_transpose(inputs, num_outputs, kernel_size, stride=1, padding="SAME", data_format="NHWC",
                     activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None, weights_initializer=None,
                     weights_regularizer=None, biases_initializer=_ZEROS, biases_regularizer=None, reuse=None,
                     variables_collections=None, outputs_collections=None, trainable=True, scope=None) -> Tensor:
    """The transpose of conv2d (output size in * stride with SAME, in * stride + max(kernel - stride, 0) with
    VALID); variables `<scope>/weights` [kh, kw, out, in] and `<scope>/biases` (scope `Conv2d_transpose`)."""
    fmt = data_format or "NHWC"
    if fmt not in ("NHWC", "NCHW"):
        raise ValueError(f"conv2d_transpose: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    inputs = convert_to_tensor(inputs)
    n_in = inputs.shape.as_list()[-1 if fmt == "NHWC" else 1] if inputs.shape.ndims == 4 else None
    if n_in is None:
        raise ValueError(f"conv2d_transpose: inputs '{inputs.name}' must be rank 4 with known channels, got "
                         f"{inputs.shape}")
    kh, kw = _layers._pair(kernel_size, "kernel_size")
    with variable_scope(scope, default_name="Conv2d_transpose", reuse=reuse):
        weights, biases = _weights_and_biases(
            [kh, kw, num_outputs, n_in], num_outputs, inputs.dtype, weights_initializer or xavier_initializer(),
            weights_regularizer, None if normalizer_fn is not None else biases_initializer, biases_regularizer,
            trainable, variables_collections)
        y = _layers._transposed_conv(inputs, weights, _layers._pair(stride, "stride"), padding.upper(), fmt)
        return _finish(y, biases, normalizer_fn, normalizer_params, activation_fn, outputs_collections, fmt)


@add_arg_scope
def batch_norm(inputs, decay=0.999, center=True, scale=False, epsilon=0.001, activation_fn=None,
               param_initializers=None, param_regularizers=None, updates_collections=GraphKeys.UPDATE_OPS,
               is_training=True, reuse=None, variables_collections=None, outputs_collections=None, trainable=True,
               batch_weights=None, fused=None, data_format="NHWC", zero_debias_moving_mean=False, scope=None,
               renorm=False, renorm_clipping=None, renorm_decay=0.99, adjustment=None) -> Tensor:
    """TF1's contrib batch norm (its fused form, for every rank: the moving variance takes the batch's
    Bessel-corrected variance): variables `<scope>/beta`, `gamma` (scale=True), `moving_mean`, `moving_variance`
    (scope `BatchNorm`). updates_collections=None runs the moving averages' updates with the layer (its output
    waits for them), as TF1 does; otherwise they go to that collection."""
    from tfplus.framework import control_dependencies, get_collection, get_collection_ref
    from tfplus.layers_ext import batch_normalization
    from tfplus.ops import array_ops
    for what, given in (("batch_weights", batch_weights), ("renorm", renorm), ("adjustment", adjustment),
                        ("zero_debias_moving_mean", zero_debias_moving_mean)):
        if given:
            raise NotImplementedError(f"tf.contrib.layers.batch_norm: {what} is not supported by tfplus")
    x = convert_to_tensor(inputs)
    rank = x.shape.ndims
    if rank is None or rank < 2:
        raise ValueError(f"tf.contrib.layers.batch_norm: inputs '{x.name}' need a known rank >= 2, got {x.shape}")
    channels_first = data_format == "NCHW" and rank == 4
    x4 = x if rank == 4 else array_ops.reshape(x, [-1, 1, 1, x.shape.as_list()[-1]])
    inits, regs = param_initializers or {}, param_regularizers or {}
    updates = get_collection_ref(GraphKeys.UPDATE_OPS)
    before = len(updates)
    with variable_scope(scope, default_name="BatchNorm", reuse=reuse) as vs:
        y = batch_normalization(x4, axis=1 if channels_first else -1, momentum=decay, epsilon=epsilon, center=center,
                                scale=scale, beta_initializer=inits.get("beta"), gamma_initializer=inits.get("gamma"),
                                moving_mean_initializer=inits.get("moving_mean"),
                                moving_variance_initializer=inits.get("moving_variance"),
                                beta_regularizer=regs.get("beta"), gamma_regularizer=regs.get("gamma"),
                                training=is_training, trainable=trainable, name=vs, reuse=reuse)
        new_updates = updates[before:]
        if updates_collections is None and new_updates:
            del updates[before:]
            with control_dependencies(new_updates):
                y = array_ops.identity(y)
        elif updates_collections != GraphKeys.UPDATE_OPS:
            del updates[before:]
            for op in new_updates:
                add_to_collection(updates_collections, op)
        for name in variables_collections or ():
            for v in get_collection(GraphKeys.GLOBAL_VARIABLES, scope=vs.name + "/"):
                add_to_collection(name, v)
        if rank != 4:
            y = array_ops.reshape(y, array_ops.shape(x))
            y.set_shape(x.shape)
        if activation_fn is not None:
            y = activation_fn(y)
        return _collect(y, outputs_collections)


@add_arg_scope
def layer_norm(inputs, center=True, scale=True, activation_fn=None, reuse=None, variables_collections=None,
               outputs_collections=None, trainable=True, begin_norm_axis=1, begin_params_axis=-1,
               scope=None) -> Tensor:
    """Normalizes each example over its axes from `begin_norm_axis` on (mean 0, variance 1, epsilon 1e-12), then
    scales and shifts by `<scope>/gamma` and `<scope>/beta` of shape inputs.shape[begin_params_axis:] (scope
    `LayerNorm`), as TF1's contrib layer_norm."""
    from tfplus.init_ops import ones_initializer
    x = convert_to_tensor(inputs)
    rank = x.shape.ndims
    if rank is None:
        raise ValueError(f"tf.contrib.layers.layer_norm: inputs '{x.name}' need a known rank")
    norm_axes = list(range(begin_norm_axis % rank, rank))
    params_shape = x.shape.as_list()[begin_params_axis:]
    if None in params_shape:
        raise ValueError(f"tf.contrib.layers.layer_norm: inputs '{x.name}' need known dims from axis "
                         f"{begin_params_axis} on, got {x.shape}")
    with variable_scope(scope, default_name="LayerNorm", reuse=reuse):
        def param(name, init):
            v = get_variable(name, params_shape, x.dtype, initializer=init, trainable=trainable)
            for c in variables_collections or ():
                add_to_collection(c, v)
            return v
        beta = param("beta", zeros_initializer()) if center else None
        gamma = param("gamma", ones_initializer()) if scale else None
        mean, variance = nn_ops.moments(x, norm_axes, keep_dims=True)
        y = nn_ops.batch_normalization(x, mean, variance, beta, gamma, 1e-12)
        if activation_fn is not None:
            y = activation_fn(y)
        return _collect(y, outputs_collections)


@add_arg_scope
def instance_norm(inputs, center=True, scale=True, epsilon=1e-6, activation_fn=None, param_initializers=None,
                  reuse=None, variables_collections=None, outputs_collections=None, trainable=True,
                  data_format="NHWC", scope=None) -> Tensor:
    """Normalizes each example's each channel over its spatial axes (mean 0, variance 1), then scales and
    shifts by `<scope>/gamma` and `<scope>/beta` of shape [channels] (scope `InstanceNorm`), as TF1's contrib
    instance_norm (CycleGAN's generators use it).

        h = tf.contrib.layers.instance_norm(tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME"), activation_fn=tf.nn.relu)
    """
    from tfplus.init_ops import ones_initializer
    from tfplus.ops.array_ops import reshape
    x = convert_to_tensor(inputs)
    rank = x.shape.ndims
    if rank is None or rank < 3:
        raise ValueError(f"tf.contrib.layers.instance_norm: inputs '{x.name}' must have a known rank of at least "
                         f"3 (batch, spatial axes, channels), got {x.shape}")
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"tf.contrib.layers.instance_norm: data_format must be 'NHWC' or 'NCHW', got "
                         f"{data_format!r}")
    channel_axis = 1 if data_format == "NCHW" else rank - 1
    channels = x.shape.as_list()[channel_axis]
    if channels is None:
        raise ValueError(f"tf.contrib.layers.instance_norm: the channels of '{x.name}' must be known, got {x.shape}")
    initializers = param_initializers or {}
    with variable_scope(scope, default_name="InstanceNorm", reuse=reuse):
        def param(name, init):
            v = get_variable(name, [channels], x.dtype, initializer=initializers.get(name, init), trainable=trainable)
            for c in variables_collections or ():
                add_to_collection(c, v)
            # NCHW: [C, 1, ..., 1] to broadcast over the spatial axes.
            return v if channel_axis == rank - 1 else reshape(v, [channels] + [1] * (rank - 2))
        beta = param("beta", zeros_initializer()) if center else None
        gamma = param("gamma", ones_initializer()) if scale else None
        axes = [a for a in range(1, rank) if a != channel_axis]
        mean, variance = nn_ops.moments(x, axes, keep_dims=True)
        y = nn_ops.batch_normalization(x, mean, variance, beta, gamma, epsilon)
        if activation_fn is not None:
            y = activation_fn(y)
        return _collect(y, outputs_collections)


def embed_sequence(ids, vocab_size=None, embed_dim=None, unique=False, initializer=None, regularizer=None,
                   trainable=True, scope=None, reuse=None) -> Tensor:
    """The rows of `<scope>/embeddings` [vocab_size, embed_dim] (scope `EmbedSequence`) for `ids`."""
    from tfplus.ops.array_ops import embedding_lookup
    if vocab_size is None or embed_dim is None:
        raise ValueError("tf.contrib.layers.embed_sequence: vocab_size and embed_dim are required")
    with variable_scope(scope, default_name="EmbedSequence", reuse=reuse):
        embeddings = get_variable("embeddings", [vocab_size, embed_dim], initializer=initializer,
                                  regularizer=regularizer, trainable=trainable)
        return embedding_lookup(embeddings, ids)
