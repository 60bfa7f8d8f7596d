"""Models that users train on phones, written as a TF1 user writes them (`t`: tfplus or TensorFlow's
tf.compat.v1; tf.contrib by tests/tutorials.contrib), none of them from tfplus.graphs: a ResNet-style net, a
DenseNet block, a U-Net, SqueezeNet's fire module and a ShuffleNet unit, a ViT-style transformer encoder, a causal
dilated temporal conv net for keyword spotting, a siamese pair of towers sharing their weights, and a CNN trained
with L2 weight decay, label smoothing and gradient clipping. tests/planner/test_phone_models_budgets.py plans them
under budgets and benchmarks/bench_phone_models.py measures their floors.

    case = build(tfplus, "resnet", batch=32)   # graph, fetches [train op, loss], init, feeds by placeholder name
"""
from __future__ import annotations

import zlib
from types import SimpleNamespace

import numpy as np
from tutorials import contrib

CLASSES = 10


def _bn(t, h, name):
    return t.layers.batch_normalization(h, training=True, name=name)


def resnet(t, x, size):
    """ResNet-20's shape at a third of its depth: a stem, an identity block and a projection block (stride 2,
    a 1x1 convolution on the shortcut), each conv batch-normalized, global average pooling, a dense head."""
    def block(h, width, stride, name):
        with t.variable_scope(name):
            r = t.nn.relu(_bn(t, t.layers.conv2d(h, width, 3, stride, "same", use_bias=False, name="c1"), "bn1"))
            r = _bn(t, t.layers.conv2d(r, width, 3, 1, "same", use_bias=False, name="c2"), "bn2")
            if stride != 1 or h.shape.as_list()[-1] != width:
                h = _bn(t, t.layers.conv2d(h, width, 1, stride, use_bias=False, name="proj"), "bnp")
            return t.nn.relu(h + r)
    h = t.nn.relu(_bn(t, t.layers.conv2d(x, 8, 3, padding="same", use_bias=False, name="stem"), "bn0"))
    h = block(block(h, 8, 1, "block1"), 16, 2, "block2")
    return t.layers.dense(t.reduce_mean(h, [1, 2]), CLASSES, name="head")


def densenet(t, x, size):
    """A dense block of three BN-ReLU-conv layers, each concatenating 4 channels to what came before, then a
    transition (BN-ReLU, 1x1 conv, average pooling)."""
    h = t.layers.conv2d(x, 8, 3, padding="same", name="stem")
    for i in range(3):
        new = t.layers.conv2d(t.nn.relu(_bn(t, h, f"bn{i}")), 4, 3, padding="same", name=f"grow{i}")
        h = t.concat([h, new], axis=3)
    h = t.layers.conv2d(t.nn.relu(_bn(t, h, "bnt")), 8, 1, name="transition")
    h = t.layers.average_pooling2d(h, 2, 2)
    return t.layers.dense(t.layers.flatten(h), CLASSES, name="head")


def unet(t, x, size):
    """Two levels down (max pooling) and up: conv2d_transpose, then resize_bilinear and a conv, each joined to the
    encoder's map by a concatenated skip; per-pixel logits."""
    def conv(h, width, name):
        return t.layers.conv2d(h, width, 3, padding="same", activation=t.nn.relu, name=name)
    e1 = conv(x, 8, "e1")
    e2 = conv(t.layers.max_pooling2d(e1, 2, 2), 12, "e2")
    bottom = conv(t.layers.max_pooling2d(e2, 2, 2), 16, "bottom")
    up2 = t.layers.conv2d_transpose(bottom, 12, 2, 2, name="up2")
    d2 = conv(t.concat([e2, up2], 3), 12, "d2")
    up1 = conv(t.image.resize_bilinear(d2, [size, size]), 8, "up1")
    d1 = conv(t.concat([e1, up1], 3), 8, "d1")
    return t.layers.conv2d(d1, 3, 1, name="pixels")


def squeeze_shuffle(t, x, size):
    """SqueezeNet's fire module (a 1x1 squeeze, 1x1 and 3x3 expands concatenated), then a ShuffleNet unit: a
    grouped 1x1 conv (split, conv per group, concat), batch norm, the channel shuffle (reshape to groups,
    transpose, reshape back), a 3x3 depthwise conv, a grouped 1x1 conv, added to its input."""
    groups = 2

    def grouped(h, width, name):
        parts = t.split(h, groups, axis=3)
        return t.concat([t.layers.conv2d(p, width // groups, 1, use_bias=False, name=f"{name}_g{i}")
                         for i, p in enumerate(parts)], 3)
    h = t.layers.conv2d(x, 8, 3, padding="same", activation=t.nn.relu, name="stem")
    s = t.layers.conv2d(h, 4, 1, activation=t.nn.relu, name="squeeze")
    h = t.concat([t.layers.conv2d(s, 8, 1, activation=t.nn.relu, name="expand1"),
                  t.layers.conv2d(s, 8, 3, padding="same", activation=t.nn.relu, name="expand3")], 3)
    r = t.nn.relu(_bn(t, grouped(h, 16, "gconv1"), "bn1"))
    c = r.shape.as_list()[-1]
    r = t.reshape(t.transpose(t.reshape(r, [-1, size, size, groups, c // groups]), [0, 1, 2, 4, 3]),
                  [-1, size, size, c])
    dw = t.Variable(_init(np.random.default_rng(5), (3, 3, c, 1)), name="depthwise")
    r = _bn(t, t.nn.depthwise_conv2d(r, dw, [1, 1, 1, 1], "SAME"), "bn2")
    h = t.nn.relu(h + _bn(t, grouped(r, 16, "gconv2"), "bn3"))
    return t.layers.dense(t.reduce_mean(h, [1, 2]), CLASSES, name="head")


def _gelu(t, h):
    return 0.5 * h * (1.0 + t.erf(h / np.sqrt(2.0).astype(np.float32)))


def transformer(t, x, size):
    """ViT at toy size: 2x2 patches (reshape and transpose) embedded by a dense layer plus a learned position
    table, one pre-norm encoder block (layer norm, two-head self-attention by matmul and softmax, a GELU MLP),
    mean-pooled tokens, a dense head."""
    heads, dim, patch = 2, 16, 2
    n = (size // patch) ** 2
    p = t.reshape(t.transpose(t.reshape(x, [-1, size // patch, patch, size // patch, patch, 3]),
                              [0, 1, 3, 2, 4, 5]), [-1, n, patch * patch * 3])
    h = t.layers.dense(p, dim, name="embed") + t.Variable(_init(np.random.default_rng(6), (n, dim)), name="pos")
    a = contrib(t).layers.layer_norm(h, begin_norm_axis=-1, scope="ln1")

    def split_heads(u):  # (N, n, dim) -> (N, heads, n, dim / heads)
        return t.transpose(t.reshape(u, [-1, n, heads, dim // heads]), [0, 2, 1, 3])
    q, k, v = (split_heads(t.layers.dense(a, dim, name=w)) for w in ("q", "k", "v"))
    att = t.nn.softmax(t.matmul(q, k, transpose_b=True) / np.float32(np.sqrt(dim // heads)))
    o = t.reshape(t.transpose(t.matmul(att, v), [0, 2, 1, 3]), [-1, n, dim])
    h = h + t.layers.dense(o, dim, name="out")
    m = contrib(t).layers.layer_norm(h, begin_norm_axis=-1, scope="ln2")
    h = h + t.layers.dense(_gelu(t, t.layers.dense(m, 2 * dim, name="mlp1")), dim, name="mlp2")
    return t.layers.dense(t.reduce_mean(h, 1), CLASSES, name="head")


def tcn(t, x, size):
    """Keyword spotting on (N, frames, 10 features): causal dilated Conv1D (left-padded by (3 - 1) * d, then
    VALID) at dilations 1, 2, 4, residual adds, ReLU, global max pooling over time."""
    h = t.layers.conv1d(x, 12, 1, name="inproj")
    for d in (1, 2, 4):
        r = t.pad(h, [[0, 0], [2 * d, 0], [0, 0]])
        r = t.layers.conv1d(r, 12, 3, dilation_rate=d, activation=t.nn.relu, name=f"dil{d}")
        h = h + r
    return t.layers.dense(t.reduce_max(h, 1), CLASSES, name="head")


def _tower(t, x, reuse):
    with t.variable_scope("tower", reuse=reuse):
        h = t.layers.conv2d(x, 8, 3, padding="same", activation=t.nn.relu, name="c1")
        h = t.layers.conv2d(t.layers.max_pooling2d(h, 2, 2), 8, 3, padding="same", activation=t.nn.relu, name="c2")
        return t.layers.dense(t.layers.flatten(h), 8, name="embed")


def regularized(t, x, size):
    """A CNN whose layers put an L2 penalty in the regularization collection (kernel_regularizer)."""
    l2 = contrib(t).layers.l2_regularizer(1e-3)
    h = t.layers.conv2d(x, 8, 3, padding="same", activation=t.nn.relu, kernel_regularizer=l2, name="c1")
    h = t.layers.conv2d(t.layers.max_pooling2d(h, 2, 2), 16, 3, padding="same", activation=t.nn.relu,
                        kernel_regularizer=l2, name="c2")
    return t.layers.dense(t.layers.flatten(h), CLASSES, kernel_regularizer=l2, name="head")


MODELS = {f.__name__: f for f in (resnet, densenet, unet, squeeze_shuffle, transformer, tcn, regularized)}
NAMES = (*MODELS, "siamese")


def _init(rng, shape):
    return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32)


def build(t, name: str, batch: int = 32, size: int = 8, frames: int = 16):
    """Model `name` in module `t` and its training step: (graph, fetches [train op, loss], init, feeds by
    placeholder name, fed values drawn from seed 0)."""
    rng = np.random.default_rng(0)
    g = t.Graph()
    with g.as_default():
        shape = [batch, frames, 10] if name == "tcn" else [batch, size, size, 3]
        x = t.placeholder(t.float32, [None, *shape[1:]], name="x")
        feeds = {x: rng.standard_normal(shape).astype(np.float32)}
        if name == "siamese":  # a contrastive loss on the towers' distance, same pairs pulled, others pushed apart
            x2 = t.placeholder(t.float32, [None, *shape[1:]], name="x2")
            same = t.placeholder(t.float32, [None], name="same")
            feeds.update({x2: rng.standard_normal(shape).astype(np.float32),
                          same: (rng.random(batch) > 0.5).astype(np.float32)})
            d = t.reduce_sum(t.square(_tower(t, x, False) - _tower(t, x2, True)), 1)
            loss = t.reduce_mean(same * d + (1 - same) * t.square(t.nn.relu(1.0 - t.sqrt(d + 1e-6))))
        elif name == "unet":  # a class per pixel
            y = t.placeholder(t.int32, [None, size, size], name="y")
            feeds[y] = rng.integers(0, 3, (batch, size, size)).astype(np.int32)
            loss = t.reduce_mean(t.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                               logits=MODELS[name](t, x, size)))
        else:
            y = t.placeholder(t.int32, [None], name="y")
            feeds[y] = rng.integers(0, CLASSES, batch).astype(np.int32)
            logits = MODELS[name](t, x, size)
            if name == "regularized":  # label smoothing and the collection's weight decay
                loss = t.losses.softmax_cross_entropy(t.one_hot(y, CLASSES), logits, label_smoothing=0.1) + \
                    t.losses.get_regularization_loss()
            else:
                loss = t.reduce_mean(t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        params = t.trainable_variables()
        with t.control_dependencies(t.get_collection(t.GraphKeys.UPDATE_OPS)):
            if name == "regularized":  # Adam on the gradients clipped by their global norm
                grads, _ = t.clip_by_global_norm(t.gradients(loss, params), 1.0)
                train = t.train.AdamOptimizer(0.01).apply_gradients(list(zip(grads, params)))
            else:
                train = t.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
        init = t.global_variables_initializer()
    return SimpleNamespace(graph=g, fetches=[train, loss], init=init, feeds={p.name: v for p, v in feeds.items()},
                           variables=[(v, _init(np.random.default_rng(zlib.crc32(v.op.name.encode())),
                                                v.shape.as_list()))
                                      for v in params if len(v.shape.as_list()) >= 2])


def start(sess, case) -> None:
    """Initializes the variables, then sets every kernel to values drawn from its name's seed, so that
    tfplus and TensorFlow start from the same weights."""
    sess.run(case.init)
    for v, value in case.variables:
        v.load(value, sess)
