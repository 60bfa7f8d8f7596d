"""tf.contrib.slim (TF1): the layers of tf.contrib.layers under slim's names, arg_scope, repeat and stack, and the
variable helpers of slim's training scripts (tf.contrib.layers' variables and defaults; slim's nets, learning and
its old losses module are not here: tf.losses takes (labels, logits), slim.losses took (logits, labels)).

    import tfplus as tf
    slim = tf.contrib.slim
    with slim.arg_scope([slim.conv2d, slim.fully_connected], weights_regularizer=slim.l2_regularizer(5e-4)):
        net = slim.repeat(images, 2, slim.conv2d, 16, [3, 3], scope="conv1")   # conv1/conv1_1, conv1/conv1_2
        net = slim.max_pool2d(net, [2, 2], scope="pool1")
"""
from __future__ import annotations

from tfplus.contrib.framework import add_arg_scope, arg_scope
from tfplus.contrib.layers import (
    avg_pool2d,
    batch_norm,
    conv2d,
    conv2d_transpose,
    dropout,
    flatten,
    fully_connected,
    l1_regularizer,
    l2_regularizer,
    layer_norm,
    max_pool2d,
    one_hot_encoding,
    repeat,
    stack,
    variance_scaling_initializer,
    xavier_initializer,
)
from tfplus.framework import GraphKeys, get_collection
from tfplus.unsupported import module_getattr

__all__ = ["add_arg_scope", "arg_scope", "avg_pool2d", "batch_norm", "conv2d", "conv2d_transpose", "dropout",
           "flatten", "fully_connected", "l1_regularizer", "l2_regularizer", "layer_norm", "max_pool2d",
           "one_hot_encoding", "repeat", "stack", "variance_scaling_initializer", "xavier_initializer",
           "convolution2d", "get_variables", "get_model_variables", "get_trainable_variables",
           "get_variables_to_restore"]

convolution2d = conv2d


def get_variables(scope=None, suffix=None, collection=GraphKeys.GLOBAL_VARIABLES) -> list:
    """The variables of `collection` under `scope` whose names end with `suffix`."""
    return [v for v in get_collection(collection, scope) if suffix is None or v.op.name.endswith(suffix)]


def get_model_variables(scope=None, suffix=None) -> list:
    return get_variables(scope, suffix, GraphKeys.MODEL_VARIABLES)


def get_trainable_variables(scope=None, suffix=None) -> list:
    return get_variables(scope, suffix, GraphKeys.TRAINABLE_VARIABLES)


def get_variables_to_restore(include=None, exclude=None) -> list:
    """The global variables under the scopes in `include` (all by default), less those under `exclude` (a
    fine-tuning script's classifier: exclude=["vgg_16/fc8"])."""
    found = [v for scope in include for v in get_variables(scope)] if include is not None else get_variables()
    return [v for v in found if not any(v.op.name.startswith(s) for s in exclude or ())]


__getattr__ = module_getattr(__name__, "tf.contrib.slim")
