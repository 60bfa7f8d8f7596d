"""tf.layers functions for MobileNet-style and sequence models: batch_normalization, conv1d, separable_conv2d.

TF1's variable names, shapes, collections and update ops (checked against TensorFlow in tests/ops/test_layers_ext.py):

    import tfplus as tf
    from tfplus import layers_ext as layers
    h = layers.conv1d(x, filters=16, kernel_size=3, padding="same")      # conv1d/kernel (3, in, 16), conv1d/bias
    h = layers.batch_normalization(h, training=True)                     # gamma, beta, moving_mean/variance
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)              # the moving-average updates
    with tf.control_dependencies(update_ops):
        train_op = tf.train.AdamOptimizer().minimize(loss)

`training` is a Python bool or a boolean tensor (e.g. a placeholder); a tensor switches between the batch and the
moving statistics at run time with tf.cond, as TF1 does, and the moving averages move only when it is True.

TF1 has no tf.layers.depthwise_conv2d; use tf.nn.depthwise_conv2d with a variable of your own.
"""
from __future__ import annotations

import numbers

import numpy as np

from tfplus.framework import GraphKeys, Tensor, add_to_collection, constant_value, convert_to_tensor, name_scope
from tfplus.init_ops import ones_initializer, zeros_initializer
from tfplus.ops import array_ops, control_flow_ops, math_ops, nn_ops, state_ops
from tfplus.variables import get_variable, get_variable_scope, variable_scope

__all__ = ["batch_normalization", "conv1d", "layer_training", "separable_conv2d"]


def _unsupported(what: str, **given) -> None:
    bad = [k for k, v in given.items() if v not in (None, False)]
    if bad:
        raise NotImplementedError(f"{what}: {', '.join(bad)} not supported by tfplus")


def _training_flag(training):
    """A Python bool, or a boolean Tensor whose value is known only at run time (a constant one is a bool)."""
    if isinstance(training, (bool, np.bool_)):
        return bool(training)
    if isinstance(training, Tensor):
        value = constant_value(training)
        return training if value is None else bool(value)
    raise TypeError(f"batch_normalization: training must be a bool or a bool Tensor, got {type(training).__name__}")


def layer_training(training, name: str) -> bool:
    """A model builder's `training` for its layer `name` under the current variable scope: a bool as it is, or
    a callable asked with the layer's full scope name (e.g. 'block3/dw/bn').

    Fine-tuning passes a callable that says False for the frozen batch-norm layers, which then normalize with
    their moving statistics and leave them unchanged, as Keras's BatchNormalization(trainable=False) does:

        bn = batch_normalization(x, training=layer_training(lambda scope: scope != "bn1", "bn1"), name="bn1")
    """
    if callable(training):
        scope = get_variable_scope().name
        return bool(training(f"{scope}/{name}" if scope else name))
    return training


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=None, gamma_initializer=None, moving_mean_initializer=None,
                        moving_variance_initializer=None, beta_regularizer=None, gamma_regularizer=None,
                        beta_constraint=None, gamma_constraint=None, training=False, trainable=True, name=None,
                        reuse=None, renorm=False, renorm_clipping=None, renorm_momentum=0.99, fused=None,
                        virtual_batch_size=None, adjustment=None) -> Tensor:
    """TF1's tf.layers.batch_normalization: normalizes over every axis but `axis` (the channels) with the batch's
    statistics (training=True; the moving averages' updates go to UPDATE_OPS) or the moving ones (False).

    Variables: <name>/gamma, beta (trainable), moving_mean, moving_variance (not trainable). Moving averages:
    moving -= (moving - batch) * (1 - momentum). As TF1, the moving variance is updated with the batch's
    Bessel-corrected variance for a rank-4 input (TF's fused kernel) and with the biased one otherwise (another
    rank, or fused=False: TF's moments).
    """
    _unsupported("batch_normalization", renorm=renorm, renorm_clipping=renorm_clipping,
                 virtual_batch_size=virtual_batch_size, adjustment=adjustment, beta_constraint=beta_constraint,
                 gamma_constraint=gamma_constraint)
    training = _training_flag(training)
    x = convert_to_tensor(inputs)
    rank = x.shape.ndims
    if rank is None or rank < 2:
        raise ValueError(f"batch_normalization: input '{x.name}' needs a known rank >= 2, got shape {x.shape}")
    ax = axis if isinstance(axis, numbers.Integral) else (list(axis)[0] if len(list(axis)) == 1 else None)
    if ax is None:
        raise NotImplementedError(f"batch_normalization: axis {axis}: only one channel axis is supported")
    ax = ax % rank
    if not (ax == rank - 1 or (rank == 4 and ax == 1)):
        raise NotImplementedError(f"batch_normalization: axis {axis} of a rank-{rank} input; tfplus supports "
                                  "the last axis, or axis 1 of a rank-4 (NCHW) input")
    channels = x.shape.as_list()[ax]
    if channels is None:
        raise ValueError(f"batch_normalization: the channel dimension (axis {axis}) of '{x.name}' must be known")
    dtype = x.dtype
    with variable_scope(name, default_name="batch_normalization", reuse=reuse):
        def var(vname, init, default, trainable_var, regularizer=None):
            return get_variable(vname, [channels], dtype, initializer=init or default, regularizer=regularizer,
                                trainable=trainable and trainable_var)
        gamma = var("gamma", gamma_initializer, ones_initializer(), True, gamma_regularizer) if scale else \
            array_ops.constant(np.ones(channels, dtype.np))
        beta = var("beta", beta_initializer, zeros_initializer(), True, beta_regularizer) if center else \
            array_ops.constant(np.zeros(channels, dtype.np))
        moving_mean = var("moving_mean", moving_mean_initializer, zeros_initializer(), False)
        moving_variance = var("moving_variance", moving_variance_initializer, ones_initializer(), False)
        # Rank 2 and 3 inputs run the same fused op on a rank-4 view: (N, C) -> (N, 1, 1, C), (N, W, C) ->
        # (N, 1, W, C).
        fmt = "NCHW" if rank == 4 and ax == 1 else "NHWC"
        spatial = [1, 2][:4 - rank]
        x4 = array_ops.expand_dims(x, 1) if rank == 3 else x
        x4 = array_ops.reshape(x, [-1, 1, 1, channels]) if rank == 2 else x4
        def batch_stats():
            y, mean, variance = nn_ops.fused_batch_norm(x4, gamma, beta, epsilon=epsilon, data_format=fmt)
            # TF1's non-fused path (a rank other than 4, or fused=False) averages the biased variance: (n - 1) / n
            # of the fused kernel's
            if rank != 4 or fused is False:
                n = math_ops.cast(array_ops.size(x), dtype) / float(channels)
                variance = math_ops.multiply(variance, math_ops.divide(math_ops.subtract(n, 1.0), n))
            return y, mean, variance

        def moving_stats():  # the moving statistics as the "batch" ones: their update below moves nothing
            y, _, _ = nn_ops.fused_batch_norm(x4, gamma, beta, moving_mean, moving_variance, epsilon=epsilon,
                                              data_format=fmt, is_training=False)
            return y, array_ops.identity(moving_mean), array_ops.identity(moving_variance)

        if training is False:
            y = moving_stats()[0]
        else:
            y, mean, variance = batch_stats() if training is True else \
                control_flow_ops.cond(training, batch_stats, moving_stats)
            for moving, value in ((moving_mean, mean), (moving_variance, variance)):
                with name_scope("AssignMovingAvg") as scope:  # TF1's: the update op is the scope's name
                    delta = math_ops.multiply(math_ops.subtract(moving, value),
                                              convert_to_tensor(1.0 - momentum, dtype=dtype, name="decay"))
                    add_to_collection(GraphKeys.UPDATE_OPS, state_ops.assign_sub(moving, delta, name=scope).op)
        return y if rank == 4 else array_ops.squeeze(y, spatial)


def _ints(value, n: int, what: str) -> tuple:
    if isinstance(value, numbers.Integral):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        raise ValueError(f"{what} must be an int or {n} ints, got {value}")
    return value


def _padding(padding: str) -> str:
    p = padding.upper()
    if p not in ("SAME", "VALID"):
        raise ValueError(f"padding must be 'valid' or 'same', got {padding!r}")
    return p


def _channels_first(data_format: str) -> bool:
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}")
    return data_format == "channels_first"


def _finish(y, bias, first: bool, activation):
    if bias is not None:
        y = nn_ops.bias_add(y, bias, data_format="NCHW" if first else "NHWC")
    return activation(y) if activation is not None else y


def conv1d(inputs, filters, kernel_size, strides=1, padding="valid", data_format="channels_last",
           dilation_rate=1, activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=None, kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
           reuse=None) -> Tensor:
    """TF1's tf.layers.conv1d: variables <name>/kernel (kernel_size, in, filters) and <name>/bias (filters).
    padding 'causal' (WaveNet's) pads dilation_rate * (kernel_size - 1) zeros before the sequence, then 'valid'."""
    _unsupported("conv1d", activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
                 bias_constraint=bias_constraint)
    x = convert_to_tensor(inputs)
    first = _channels_first(data_format)
    c = x.shape.as_list()[1 if first else -1]
    (k,), (s,) = _ints(kernel_size, 1, "kernel_size"), _ints(strides, 1, "strides")
    with variable_scope(name, default_name="conv1d", reuse=reuse):
        kernel = get_variable("kernel", [k, c, filters], x.dtype, initializer=kernel_initializer,
                              regularizer=kernel_regularizer, trainable=trainable)
        bias = get_variable("bias", [filters], x.dtype, initializer=bias_initializer or zeros_initializer(),
                            regularizer=bias_regularizer, trainable=trainable) if use_bias else None
        (rate,) = _ints(dilation_rate, 1, "dilation_rate")
        if padding.lower() == "causal":
            pads = [[0, 0], [0, 0], [0, 0]]
            pads[2 if first else 1][0] = rate * (k - 1)
            x, padding = array_ops.pad(x, pads), "valid"
        y = nn_ops.conv1d(x, kernel, s, _padding(padding), data_format="NCW" if first else "NWC", dilations=rate)
        return _finish(y, bias, first, activation)


def separable_conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
                     dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                     depthwise_initializer=None, pointwise_initializer=None, bias_initializer=None,
                     depthwise_regularizer=None, pointwise_regularizer=None, bias_regularizer=None,
                     activity_regularizer=None, depthwise_constraint=None, pointwise_constraint=None,
                     bias_constraint=None, trainable=True, name=None, reuse=None) -> Tensor:
    """TF1's tf.layers.separable_conv2d: a depthwise conv (<name>/depthwise_kernel (kh, kw, in,
    depth_multiplier)), then a 1x1 conv (<name>/pointwise_kernel (1, 1, in * depth_multiplier, filters)) and
    <name>/bias."""
    _unsupported("separable_conv2d", activity_regularizer=activity_regularizer,
                 depthwise_constraint=depthwise_constraint, pointwise_constraint=pointwise_constraint,
                 bias_constraint=bias_constraint)
    x = convert_to_tensor(inputs)
    first = _channels_first(data_format)
    c = x.shape.as_list()[1 if first else -1]
    kh, kw = _ints(kernel_size, 2, "kernel_size")
    sh, sw = _ints(strides, 2, "strides")
    with variable_scope(name, default_name="separable_conv2d", reuse=reuse):
        dw = get_variable("depthwise_kernel", [kh, kw, c, depth_multiplier], x.dtype,
                          initializer=depthwise_initializer, regularizer=depthwise_regularizer, trainable=trainable)
        pw = get_variable("pointwise_kernel", [1, 1, c * depth_multiplier, filters], x.dtype,
                          initializer=pointwise_initializer, regularizer=pointwise_regularizer, trainable=trainable)
        bias = get_variable("bias", [filters], x.dtype, initializer=bias_initializer or zeros_initializer(),
                            regularizer=bias_regularizer, trainable=trainable) if use_bias else None
        st = [1, 1, sh, sw] if first else [1, sh, sw, 1]
        y = nn_ops.separable_conv2d(x, dw, pw, st, _padding(padding), rate=_ints(dilation_rate, 2, "dilation_rate"),
                                    data_format="NCHW" if first else "NHWC")
        return _finish(y, bias, first, activation)

