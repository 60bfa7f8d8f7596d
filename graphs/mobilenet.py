"""A CIFAR-sized MobileNet v1: a 3x3 conv, then depthwise separable blocks (3x3 depthwise conv + BN + ReLU6,
1x1 pointwise conv + BN + ReLU6), global average pooling and a dense layer for the logits.

    images = tf.placeholder(tf.float32, [None, 3, 32, 32])
    logits = mobilenet(images, training=True)                        # batch statistics; UPDATE_OPS filled
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
        eval_logits = mobilenet(images, training=False)              # moving statistics, same variables

    tg = training_graph(mobilenet, total_steps=1000)   # builds both; train_op runs the moving-average updates

The widths are ImageNet MobileNet's (32 | 64, 128, 128, 256, 256, 512 x 6, 1024, 1024) times
`width_multiplier`; a block is strided (2) where its width grows, except the first, so 32x32 images end at 2x2.
Strides fit CIFAR: the stem keeps 32x32 (ImageNet's has stride 2). Every layer is named (conv0, block1/dw,
block1/pw, ..., logits), so a second build with reuse=True shares all variables.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import tfplus as tf
from tfplus import layers_ext
from tfplus.graphs.mentee import _channels, _check_data_format, decay, dense

# The stem's width, then each depthwise separable block's output width (multiplier 1).
WIDTHS = (32, 64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024)
BN_MOMENTUM = 0.9  # moving averages over ~10 steps: short CIFAR runs evaluate with settled statistics
BN_EPSILON = 1e-3


def widths(width_multiplier: float = 1.0) -> tuple[int, ...]:
    """The layer widths for a width multiplier (at least 8 channels each).

        widths(0.25)[:4] == (8, 16, 32, 32)
    """
    return tuple(max(8, int(w * width_multiplier)) for w in WIDTHS)


def _bn_relu6(x, name: str, training: bool, data_format: str):
    axis = 1 if data_format == "NCHW" else -1
    y = layers_ext.batch_normalization(x, axis=axis, momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
                                       training=layers_ext.layer_training(training, name), name=name)
    return tf.nn.relu6(y)


def _strides(s: int, data_format: str) -> list[int]:
    return [1, 1, s, s] if data_format == "NCHW" else [1, s, s, 1]


def conv_bn(x, name: str, filters: int, ksize: int, stride: int, training: bool, data_format: str):
    """relu6(bn(conv2d(x, W))) with W (ksize, ksize, in, filters) He-normal; no bias (BN's beta is one)."""
    with tf.variable_scope(name):
        w = tf.get_variable("weights", [ksize, ksize, _channels(x, data_format), filters],
                            initializer=tf.initializers.he_normal())
        decay(w)
        y = tf.nn.conv2d(x, w, _strides(stride, data_format), "SAME", data_format=data_format)
        return _bn_relu6(y, "bn", training, data_format)


def depthwise_bn(x, name: str, stride: int, training: bool, data_format: str):
    """relu6(bn(depthwise_conv2d(x, W))) with W (3, 3, C, 1) normal of He's variance 2 / 9 (each output reads
    9 inputs: he_normal would count 9 * C); not weight-decayed (few parameters, and decaying them hurts)."""
    with tf.variable_scope(name):
        w = tf.get_variable("depthwise_weights", [3, 3, _channels(x, data_format), 1],
                            initializer=tf.random_normal_initializer(stddev=math.sqrt(2 / 9)))
        y = tf.nn.depthwise_conv2d(x, w, _strides(stride, data_format), "SAME", data_format=data_format)
        return _bn_relu6(y, "bn", training, data_format)


def mobilenet(images: tf.Tensor, conv_widths: Sequence[int] | None = None, fc_widths: Sequence[int] = (),
              num_classes: int = 10, width_multiplier: float = 1.0, training: bool | Callable[[str], bool] = True,
              data_format: str = "NCHW") -> tf.Tensor:
    """MobileNet v1 logits (N, num_classes). conv_widths overrides the widths (the stem's, then one per
    block; default widths(width_multiplier)); fc_widths are hidden dense layers before the logits (none by
    default). training=True normalizes with batch statistics and adds the moving-average updates to
    UPDATE_OPS; False uses the moving statistics; a callable decides per batch-norm layer from its scope name
    (layers_ext.layer_training: fine-tuning runs frozen ones with their moving statistics).

        logits = mobilenet(images, conv_widths=(8, 16, 32, 32), training=True)    # a stem and 3 blocks
    """
    _check_data_format(data_format)
    ws = tuple(conv_widths) if conv_widths is not None else widths(width_multiplier)
    if len(ws) < 2:
        raise ValueError(f"mobilenet: conv_widths needs the stem's width and at least one block's, got {ws}")
    x = conv_bn(images, "conv0", ws[0], 3, 1, training, data_format)
    for i, width in enumerate(ws[1:], start=1):
        stride = 2 if i > 1 and width > ws[i - 1] else 1
        with tf.variable_scope(f"block{i}"):
            x = depthwise_bn(x, "dw", stride, training, data_format)
            x = conv_bn(x, "pw", width, 1, 1, training, data_format)
    x = tf.reduce_mean(x, [2, 3] if data_format == "NCHW" else [1, 2], name="global_pool")
    for i, width in enumerate(fc_widths):
        x = dense(x, f"fc{i + 1}", width)
    return dense(x, "logits", num_classes, relu=False)
