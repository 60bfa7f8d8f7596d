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

mobilenet224 is ImageNet's (stride-2 stem, 224x224 images); KERAS_NAMES maps its variables onto Keras's MobileNet
and load_keras_weights restores them from a TF1 checkpoint of it (Keras's published weights, converted once).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

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
              data_format: str = "NCHW", stem_stride: int = 1) -> tf.Tensor:
    """MobileNet v1 logits (N, num_classes). conv_widths overrides the widths (the stem's, then one per
    block; default widths(width_multiplier)); fc_widths are hidden dense layers before the logits (none by
    default). training=True normalizes with batch statistics and adds the moving-average updates to
    UPDATE_OPS; False uses the moving statistics; a callable decides per batch-norm layer from its scope name
    (layers_ext.layer_training: fine-tuning runs frozen ones with their moving statistics). stem_stride 2 is
    ImageNet's stem (mobilenet224).

        logits = mobilenet(images, conv_widths=(8, 16, 32, 32), training=True)    # a stem and 3 blocks
    """
    _check_data_format(data_format)
    ws = tuple(conv_widths) if conv_widths is not None else widths(width_multiplier)
    if len(ws) < 2:
        raise ValueError(f"mobilenet: conv_widths needs the stem's width and at least one block's, got {ws}")
    x = conv_bn(images, "conv0", ws[0], 3, stem_stride, training, data_format)
    for i, width in enumerate(ws[1:], start=1):
        stride = 2 if i > 1 and width > ws[i - 1] else 1
        with tf.variable_scope(f"block{i}"):
            x = depthwise_bn(x, "dw", stride, training, data_format)
            x = conv_bn(x, "pw", width, 1, 1, training, data_format)
    x = tf.reduce_mean(x, [2, 3] if data_format == "NCHW" else [1, 2], name="global_pool")
    for i, width in enumerate(fc_widths):
        x = dense(x, f"fc{i + 1}", width)
    return dense(x, "logits", num_classes, relu=False)


def mobilenet224(images: tf.Tensor, num_classes: int = 1000, width_multiplier: float = 1.0,
                 training: bool | Callable[[str], bool] = True, data_format: str = "NCHW", **kwargs) -> tf.Tensor:
    """ImageNet's MobileNet v1 (Howard et al. 2017, as tf.keras.applications.MobileNet): mobilenet() with the
    stride-2 stem, for 224x224 images (any size that is a multiple of 32: 128, 160, 192; 7x7 at the end for 224).
    Its variables map one to one onto Keras's (KERAS_NAMES). NOTE: SAME padding of a stride-2 layer on an even
    size pads one row and column after, as Keras's ZeroPadding2D((0, 1), (0, 1)) + VALID does, so the layers
    compute the same; the BN momentum is this module's (0.9; Keras 0.99), which only training sees, and Keras's
    dropout before the head (1e-3) is left out.

    Keras's published ImageNet weights (`mobilenet_1_0_224_tf.h5`: alpha 1.0 at 224; `mobilenet_2_5_128_tf.h5`:
    alpha 0.25 at 128, give input_shape=(128, 128, 3)), turned into a TF1 checkpoint once, offline, by a script run
    with TensorFlow and tf-keras installed:

        import os; os.environ["TF_USE_LEGACY_KERAS"] = "1"      # tf-keras: graph-mode variables a Saver saves
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        tf.keras.applications.MobileNet(alpha=1.0, weights="mobilenet_1_0_224_tf.h5")
        tf.compat.v1.train.Saver().save(tf.compat.v1.keras.backend.get_session(), "keras_mobilenet/model.ckpt")

    then loaded into this builder (images scaled as Keras's preprocess_input: x / 127.5 - 1):

        logits = mobilenet224(tf.placeholder(tf.float32, [None, 3, 224, 224]), num_classes=1000, training=False)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            load_keras_weights(sess, "keras_mobilenet/model.ckpt")   # head=False: keep a new head (other classes)
    """
    return mobilenet(images, num_classes=num_classes, width_multiplier=width_multiplier, training=training,
                     data_format=data_format, stem_stride=2, **kwargs)


_BN = ("gamma", "beta", "moving_mean", "moving_variance")

# tfplus variable name -> Keras's (tf.keras.applications.MobileNet, include_top=True) for the 13 blocks: 137
# names. The head's Keras kernel is a 1x1 conv (1, 1, C, classes); ours is the dense (C, classes) it equals.
KERAS_NAMES: dict[str, str] = {
    "conv0/weights": "conv1/kernel", **{f"conv0/bn/{k}": f"conv1_bn/{k}" for k in _BN},
    **{ours: theirs for i in range(1, len(WIDTHS)) for ours, theirs in (
        (f"block{i}/dw/depthwise_weights", f"conv_dw_{i}/depthwise_kernel"),
        *((f"block{i}/dw/bn/{k}", f"conv_dw_{i}_bn/{k}") for k in _BN),
        (f"block{i}/pw/weights", f"conv_pw_{i}/kernel"),
        *((f"block{i}/pw/bn/{k}", f"conv_pw_{i}_bn/{k}") for k in _BN))},
    "logits/weights": "conv_preds/kernel", "logits/biases": "conv_preds/bias",
}


def load_keras_weights(sess, checkpoint: str, head: bool = True, names: dict[str, str] = KERAS_NAMES
                       ) -> list[str]:
    """Restores a mobilenet224 graph's variables (those of sess.graph) from a TF1 checkpoint of Keras's MobileNet
    (a file prefix or a folder; mobilenet224's docstring says how to make one) through `names`, after the
    initializer has run; returns the names restored. head=False leaves the logits layer as initialized (another
    class count). ValueError naming both names for a variable the graph or the checkpoint lacks, or whose shape
    differs (another width multiplier: build with Keras's alpha).

        restored = load_keras_weights(sess, "keras_mobilenet/model.ckpt", head=False)    # 135 names
    """
    from tfplus.train import load_checkpoint
    variables = {v.op.name: v for v in sess.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
    restored = []
    with load_checkpoint(checkpoint) as reader:
        for ours, theirs in names.items():
            if not head and ours.startswith("logits/"):
                continue
            if ours not in variables:
                raise ValueError(f"load_keras_weights: the graph has no variable {ours!r} (Keras's {theirs!r}); "
                                 "build the model with mobilenet224")
            if not reader.has_tensor(theirs):
                raise ValueError(f"load_keras_weights: checkpoint {checkpoint!r} has no {theirs!r} (for {ours!r}); "
                                 "save it from tf.keras.applications.MobileNet(include_top=True)")
            value, shape = reader.get_tensor(theirs), variables[ours].shape.as_list()
            if value.size != math.prod(shape) or [d for d in value.shape if d != 1] != [d for d in shape if d != 1]:
                raise ValueError(f"load_keras_weights: Keras's {theirs!r} has shape {list(value.shape)} but "
                                 f"{ours!r} has {shape}; build with Keras's alpha as width_multiplier, or pass "
                                 "head=False for another class count")
            variables[ours].load(np.reshape(value, shape), sess)
            restored.append(ours)
    return restored
