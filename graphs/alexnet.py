"""AlexNet as in Krizhevsky, Sutskever and Hinton (2012), on one device (no two-tower grouping) for 227x227 images:
conv 11x11 stride 4 (96) + LRN + max-pool 3x3/2, conv 5x5 (256) + LRN + pool, conv 3x3 384, 384, 256 + pool,
FC 4096 + dropout, FC 4096 + dropout, FC classes; ReLU after every layer but the last. 62.4M parameters at 1000
classes, 58.3M of them in the FC layers.

    images = tf.placeholder(tf.float32, [None, 3, 227, 227])
    logits = alexnet(images, num_classes=1000, training=True)      # dropout 0.5 before fc7 and fc8

Layers are named conv1..conv5, fc6..fc8 (variables `weights`, `biases`), as Caffe's and TF-slim's AlexNets: a
checkpoint of either maps onto them by scope (Caffe's conv kernels are (out, in, h, w): transpose to (h, w, in,
out)).
"""
from __future__ import annotations

from typing import Callable, Sequence

import tfplus as tf
from tfplus import layers_ext
from tfplus.graphs.mentee import _channels, _check_data_format, decay, dense, flatten

# The paper's LRN: k = 2, n = 5, alpha = 1e-4, beta = 0.75. TensorFlow's alpha multiplies the sum, not its
# mean over the n channels, so it is alpha / n (as Caffe's and TF-slim's ports convert it).
LRN = {"depth_radius": 2, "bias": 2.0, "alpha": 1e-4 / 5, "beta": 0.75}


def _conv(x, name: str, filters: int, ksize: int, stride: int, padding: str, data_format: str):
    """relu(conv2d(x, W, stride) + b), W (ksize, ksize, in, filters) He-normal, b zero."""
    strides = [1, 1, stride, stride] if data_format == "NCHW" else [1, stride, stride, 1]
    with tf.variable_scope(name):
        w = tf.get_variable("weights", [ksize, ksize, _channels(x, data_format), filters],
                            initializer=tf.initializers.he_normal())
        b = tf.get_variable("biases", [filters], initializer=tf.zeros_initializer())
        decay(w)
        y = tf.nn.conv2d(x, w, strides, padding, data_format=data_format)
        return tf.nn.relu(tf.nn.bias_add(y, b, data_format=data_format))


def _lrn(x, data_format: str):
    """LRN over the channels; NOTE: the op takes NHWC only, so NCHW goes through two transposes."""
    if data_format == "NHWC":
        return tf.nn.lrn(x, **LRN)
    return tf.transpose(tf.nn.lrn(tf.transpose(x, [0, 2, 3, 1]), **LRN), [0, 3, 1, 2])


def _pool(x, data_format: str):
    """The paper's overlapping max-pool: 3x3 windows at stride 2."""
    window, strides = ([1, 1, 3, 3], [1, 1, 2, 2]) if data_format == "NCHW" else ([1, 3, 3, 1], [1, 2, 2, 1])
    return tf.nn.max_pool(x, ksize=window, strides=strides, padding="VALID", data_format=data_format)


def alexnet(images: tf.Tensor, conv_widths: Sequence[int] = (96, 256, 384, 384, 256),
            fc_widths: Sequence[int] = (4096, 4096), num_classes: int = 10,
            training: bool | Callable[[str], bool] = True, dropout: float = 0.5,
            data_format: str = "NCHW") -> tf.Tensor:
    """AlexNet logits (N, num_classes) for 227x227 images (fc6 reads 6x6x256; its size follows the image's).
    conv_widths are conv1..conv5's filters, fc_widths fc6's and fc7's units (the paper's by default).
    training=True drops a `dropout` fraction of fc6's and fc7's outputs; False (evaluation) keeps all."""
    _check_data_format(data_format)
    if len(conv_widths) != 5 or len(fc_widths) != 2:
        raise ValueError(f"alexnet: conv_widths needs 5 widths and fc_widths 2, got {tuple(conv_widths)} and "
                         f"{tuple(fc_widths)}")
    c1, c2, c3, c4, c5 = conv_widths
    x = _pool(_lrn(_conv(images, "conv1", c1, 11, 4, "VALID", data_format), data_format), data_format)
    x = _pool(_lrn(_conv(x, "conv2", c2, 5, 1, "SAME", data_format), data_format), data_format)
    x = _conv(x, "conv3", c3, 3, 1, "SAME", data_format)
    x = _conv(x, "conv4", c4, 3, 1, "SAME", data_format)
    x = flatten(_pool(_conv(x, "conv5", c5, 3, 1, "SAME", data_format), data_format))
    for name, width in zip(("fc6", "fc7"), fc_widths):
        x = dense(x, name, width)
        if layers_ext.layer_training(training, name) and dropout:
            x = tf.nn.dropout(x, rate=dropout)
    return dense(x, "fc8", num_classes, relu=False)
