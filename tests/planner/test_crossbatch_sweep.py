"""Cross-batch ops in TF1 graphs the planner's own tests never built (issue 34): each graph trains 3 steps split into
micro-batches (planner.plan's force: 2 or 4 of batch 8) and must give the unsplit step's losses and variables, or be
refused with a message that names the op that mixes the rows. Never a wrong result.

Split exactly: tf.nn.moments over the batch (axes [0], keep_dims; [0, 1, 2] of a conv), instance, group and layer
norms by hand, tf.contrib.layers' layer, instance and batch norms, tf.layers' batch norm (fused or not),
l2_normalize over either axis, a mean written as sum / tf.shape(x)[0], label smoothing, weight decay summed over the
variables, clipping by the global norm, an ExponentialMovingAverage of the weights, a center loss that
tf.scatter_subs its class centers, a loss masked by fed weights, a moving average of a batch mean and counters
assigned beside the step, a variance about the batch's mean, moments fetched, of dropped-out rows, or before a
summed loss, a mask from the labels, tf.nn.moments with tf.nn.batch_normalization or a scale inside the inverse
deviation (their gradients are taken from backward statistics: they were k times too large), clipped by the
global norm, by each gradient's norm or average norm (also a plain convolution's and tf.layers' batch norm's), a
loss that is a non-linear function of a mean over the batch (its square root or log, a penalty on the mean
activation). Refused: a softmax, max, min, argmax, cumsum or top_k over the batch, a loss times the batch size
or the square root of a sum over it, the worst example's loss, tf.range over the batch, mixup by tf.reverse(x, [0]),
tf.unique of the labels, an InfoNCE or batch-hard triplet loss (the batch's pairs), a GAN's real and fake batches
through one tf.concat, and two optimizers whose second reads the first's update. The graphs build in TensorFlow
too (`t`: tfplus or tensorflow.compat.v1) where TF1 has the API, and the unsplit step is held against TensorFlow's."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf
from tfplus import planner
from tfplus.runtime.facts import device_facts

B, F, C = 8, 6, 3
STEPS = 3
TOL = {"cpu": 2e-5, "opencl": 1e-4}


def _w(t, rng, *shape):
    return t.Variable((rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32))


def _xent(t, logits, y):
    return t.reduce_mean(t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def _dense(t, kind: str, rng):
    """x (B, 6) -> tanh dense -> `kind` -> dense logits; (loss, feeds, fetched beside the training op)."""
    x = t.placeholder(t.float32, [None, F], name="x")
    y = t.placeholder(t.int32, [None], name="y")
    feeds = {x: rng.standard_normal((B, F)).astype(np.float32) * 2 + 0.5, y: rng.integers(0, C, B).astype(np.int32)}
    h = t.tanh(t.matmul(x, _w(t, rng, F, 8)))
    n = t.cast(t.shape(x)[0], t.float32)
    extra = []
    if kind in ("moments0", "moments0_keep"):
        m, v = t.nn.moments(h, [0], keep_dims=kind.endswith("keep"))
        h = (h - m) * t.rsqrt(v + 1e-3)
    elif kind == "nn_batch_normalization":  # x * inv + (offset - mean * inv): offset's gradient is a statistic
        m, v = t.nn.moments(h, [0])
        h = t.nn.batch_normalization(h, m, v, t.Variable(np.zeros(8, np.float32)), t.Variable(np.ones(8, np.float32)),
                                     1e-3)
    elif kind == "gamma_in_inverse":
        m, v = t.nn.moments(h, [0])
        h = (h - m) * (t.Variable(np.ones(8, np.float32)) * t.rsqrt(v + 1e-3))
    elif kind == "layers_unfused":
        h = t.layers.batch_normalization(h, training=True, fused=False)
    elif kind == "contrib_batch_norm":
        h = t.contrib.layers.batch_norm(h, is_training=True, scale=True)
    elif kind == "fetched_moments":
        m, v = t.nn.moments(h, [0])
        h = (h - m) * t.rsqrt(v + 1e-3)
        extra += [m, v, h]
    elif kind == "dropout_moments":
        m, v = t.nn.moments(t.nn.dropout(h, keep_prob=0.7, seed=3), [0])
        h = (h - m) * t.rsqrt(v + 1e-3)
    elif kind == "layer_norm":
        m, v = t.nn.moments(h, [1], keep_dims=True)
        h = (h - m) * t.rsqrt(v + 1e-3)
    elif kind == "contrib_layer_norm":
        h = t.contrib.layers.layer_norm(h)
    elif kind in ("l2_normalize0", "l2_normalize1"):
        h = t.nn.l2_normalize(h, axis=int(kind[-1]))
    elif kind == "softmax0":
        h = t.nn.softmax(h, axis=0)
    elif kind == "max0":
        h = h - t.reduce_max(h, axis=0)
    elif kind == "min0":
        h = h * t.reduce_min(h, axis=0, keepdims=True)
    elif kind == "argmax0":
        h = h - 0.1 * t.cast(t.argmax(h, axis=0), t.float32)
    elif kind == "cumsum0":
        h = t.cumsum(h, axis=0)
    elif kind == "topk0":  # top_k over the batch, through a transpose
        h = h - t.reduce_mean(t.nn.top_k(t.transpose(h), k=2)[0], axis=1)
    elif kind == "range_one_hot":
        h = h + t.one_hot(t.range(t.shape(x)[0]) % 8, 8)
    elif kind == "mixup":
        h = h * 0.7 + t.reverse(h, [0]) * 0.3
    elif kind == "unique":
        h = h * t.cast(t.size(t.unique(y)[0]), t.float32)
    elif kind == "moving_mean":  # batch norm by hand with a moving average of its mean, assigned beside the step
        m, v = t.nn.moments(h, [0])
        moving = t.Variable(np.zeros(8, np.float32), trainable=False)
        extra.append(t.assign(moving, 0.9 * moving + 0.1 * m))
        h = (h - m) * t.rsqrt(v + 1e-3)
    elif kind == "two_level_variance":  # the variance about the batch's mean: a statistic of a statistic
        m = t.reduce_mean(h, 0)
        h = (h - m) / t.sqrt(t.reduce_mean(t.square(h - m), 0) + 1e-3)
    elif kind == "counters":  # examples seen and the features' running sum, added up beside the step
        seen, total = t.Variable(0.0, trainable=False), t.Variable(np.zeros(8, np.float32), trainable=False)
        extra += [t.assign_add(seen, n), t.assign_add(total, t.reduce_sum(h, 0))]
    elif kind == "center":  # centers move toward each class's features once a step, by all of the batch's rows
        centers = t.Variable(np.zeros((C, 8), np.float32), trainable=False)
        c = t.gather(centers, y)
        extra.append(t.scatter_sub(centers, y, 0.5 * (c - h)))
        per = t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=t.matmul(h, _w(t, rng, 8, C)))
        return t.reduce_mean(per) + 0.1 * t.reduce_mean(t.reduce_sum(t.square(h - c), 1)), feeds, extra
    logits = t.matmul(h, _w(t, rng, 8, C))
    if kind == "sum_over_count":
        return t.reduce_sum(t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)) / n, feeds, extra
    if kind == "summed_moments":  # a loss summed over the batch after a batch norm by hand
        m, v = t.nn.moments(logits, [0])
        per = t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=(logits - m) * t.rsqrt(v + 1e-3))
        return t.reduce_sum(per), feeds, extra
    if kind == "labels_mask":  # a mask computed from the fed labels, its sum the divisor
        mask = t.cast(t.not_equal(y, 0), t.float32)
        per = t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        return t.reduce_sum(per * mask) / t.maximum(t.reduce_sum(mask), 1.0), feeds, extra
    if kind == "rmse":  # a non-linear function of a mean over the batch
        return t.sqrt(t.reduce_mean(t.square(logits - 1.0))), feeds, extra
    if kind == "log_of_mean":
        return t.log(t.reduce_mean(t.exp(logits))) - t.reduce_mean(logits), feeds, extra
    if kind == "mean_penalty":  # a penalty on the batch's mean activation, squared
        return _xent(t, logits, y) + t.reduce_sum(t.square(t.reduce_mean(h, 0) - 0.1)), feeds, extra
    if kind == "sqrt_of_sum":  # a non-linear function of a sum over the batch: each micro-batch's gradient its share
        return t.sqrt(t.reduce_sum(t.square(logits - 1.0))), feeds, extra
    if kind == "worst_example":
        return t.reduce_max(t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)), feeds, extra
    if kind == "times_count":
        return _xent(t, logits, y) * n, feeds, extra
    if kind == "label_smoothing":
        return t.losses.softmax_cross_entropy(t.one_hot(y, C), logits, label_smoothing=0.1), feeds, extra
    if kind == "weight_decay":
        return _xent(t, logits, y) + 1e-2 * t.add_n([t.nn.l2_loss(v) for v in t.trainable_variables()]), feeds, extra
    if kind == "masked":
        mask = t.placeholder(t.float32, [None], name="mask")
        feeds[mask] = np.array([1, 0, 1, 1, 0, 1, 1, 1], np.float32)
        return t.losses.sparse_softmax_cross_entropy(y, logits, weights=mask), feeds, extra
    return _xent(t, logits, y), feeds, extra


def _conv(t, kind: str, rng):
    """x (B, 4, 4, 3) -> 3x3 conv -> `kind` -> relu, global mean, dense logits."""
    x = t.placeholder(t.float32, [None, 4, 4, 3], name="x")
    y = t.placeholder(t.int32, [None], name="y")
    feeds = {x: rng.standard_normal((B, 4, 4, 3)).astype(np.float32), y: rng.integers(0, C, B).astype(np.int32)}
    h = t.nn.conv2d(x, _w(t, rng, 3, 3, 3, 4), [1, 1, 1, 1], "SAME")
    if kind == "batch_norm":  # tf.nn.moments over the batch and the image
        m, v = t.nn.moments(h, [0, 1, 2])
        h = (h - m) * t.rsqrt(v + 1e-3)
    elif kind == "instance_norm":
        m, v = t.nn.moments(h, [1, 2], keep_dims=True)
        h = (h - m) * t.rsqrt(v + 1e-3)
    elif kind == "group_norm":  # 2 groups of 2 channels, by hand
        g = t.reshape(h, [-1, 4, 4, 2, 2])
        m, v = t.nn.moments(g, [1, 2, 4], keep_dims=True)
        h = t.reshape((g - m) * t.rsqrt(v + 1e-3), t.shape(h))
    elif kind == "nn_batch_normalization":
        m, v = t.nn.moments(h, [0, 1, 2])
        h = t.nn.batch_normalization(h, m, v, t.Variable(np.zeros(4, np.float32)), t.Variable(np.ones(4, np.float32)),
                                     1e-3)
    elif kind == "layers_batch_norm":
        h = t.layers.batch_normalization(h, training=True)
    elif kind == "layers_batch_norm_unfused":
        h = t.layers.batch_normalization(h, training=True, fused=False)
    elif kind == "contrib_instance_norm":
        h = t.contrib.layers.instance_norm(h)
    logits = t.matmul(t.reduce_mean(t.nn.relu(h), [1, 2]), _w(t, rng, 4, C))
    return _xent(t, logits, y), feeds, []


def _pairs(t, kind: str, rng):
    """Losses over the batch's pairs of examples: InfoNCE (z z^T against labels tf.range(batch)) or a triplet loss
    with batch-hard mining (pairwise distances, the farthest positive and nearest negative per example)."""
    x = t.placeholder(t.float32, [None, F], name="x")
    y = t.placeholder(t.int32, [None], name="y")
    feeds = {x: rng.standard_normal((B, F)).astype(np.float32), y: rng.integers(0, 2, B).astype(np.int32)}
    e = t.matmul(x, _w(t, rng, F, 4))
    if kind == "infonce":
        z = t.nn.l2_normalize(e, axis=1)
        return _xent(t, t.matmul(z, z, transpose_b=True) / 0.5, t.range(t.shape(x)[0])), feeds, []
    sq = t.reduce_sum(t.square(e), 1)
    d = t.expand_dims(sq, 1) - 2 * t.matmul(e, e, transpose_b=True) + t.expand_dims(sq, 0)
    same = t.cast(t.equal(t.expand_dims(y, 0), t.expand_dims(y, 1)), t.float32)
    return t.reduce_mean(t.nn.relu(t.reduce_max(d * same, 1) - t.reduce_min(d + 1e3 * same, 1) + 0.5)), feeds, []


def _gan(t, concat: bool, rng):
    """A generator and a discriminator, each trained by its own Adam in one run: the real and fake batches through
    the discriminator apart, or through one tf.concat sliced back."""
    x = t.placeholder(t.float32, [None, F], name="x")
    z = t.placeholder(t.float32, [None, 3], name="z")
    feeds = {x: rng.standard_normal((B, F)).astype(np.float32), z: rng.standard_normal((B, 3)).astype(np.float32)}
    w_g, w_d = _w(t, rng, 3, F), _w(t, rng, F, 1)
    fake = t.tanh(t.matmul(z, w_g))
    if concat:
        both = t.matmul(t.concat([x, fake], 0), w_d)
        real_logit, fake_logit = both[:B], both[B:]
    else:
        real_logit, fake_logit = t.matmul(x, w_d), t.matmul(fake, w_d)
    xent = t.nn.sigmoid_cross_entropy_with_logits
    d_loss = t.reduce_mean(xent(labels=t.ones_like(real_logit), logits=real_logit)) + \
        t.reduce_mean(xent(labels=t.zeros_like(fake_logit), logits=fake_logit))
    g_loss = t.reduce_mean(xent(labels=t.ones_like(fake_logit), logits=fake_logit))
    train = t.group(t.train.AdamOptimizer(0.01).minimize(d_loss, var_list=[w_d]),
                    t.train.AdamOptimizer(0.01).minimize(g_loss, var_list=[w_g]))
    return d_loss + g_loss, feeds, train


# name -> (builder(t, rng), optimizer, what a split does: "exact", or a phrase of the refusal naming the op)
CASES = {
    "moments-axis0": (functools.partial(_dense, kind="moments0"), "momentum", "exact"),
    "moments-axis0-keep_dims": (functools.partial(_dense, kind="moments0_keep"), "adam", "exact"),
    "moments-axes012": (functools.partial(_conv, kind="batch_norm"), "sgd", "exact"),
    "instance-norm": (functools.partial(_conv, kind="instance_norm"), "sgd", "exact"),
    "group-norm": (functools.partial(_conv, kind="group_norm"), "sgd", "exact"),
    "layer-norm": (functools.partial(_dense, kind="layer_norm"), "sgd", "exact"),
    "contrib-layer_norm": (functools.partial(_dense, kind="contrib_layer_norm"), "sgd", "exact"),
    "contrib-instance_norm": (functools.partial(_conv, kind="contrib_instance_norm"), "sgd", "exact"),
    "layers-batch_normalization": (functools.partial(_conv, kind="layers_batch_norm"), "adam", "exact"),
    "l2_normalize-axis0": (functools.partial(_dense, kind="l2_normalize0"), "sgd", "exact"),
    "l2_normalize-axis1": (functools.partial(_dense, kind="l2_normalize1"), "sgd", "exact"),
    "sum-over-batch-size": (functools.partial(_dense, kind="sum_over_count"), "sgd", "exact"),
    "label-smoothing": (functools.partial(_dense, kind="label_smoothing"), "sgd", "exact"),
    "weight-decay": (functools.partial(_dense, kind="weight_decay"), "momentum", "exact"),
    "clip_by_global_norm": (functools.partial(_dense, kind="moments0"), "clip", "exact"),
    "ema-of-weights": (functools.partial(_dense, kind="plain"), "ema", "exact"),
    "moments-moving-average": (functools.partial(_dense, kind="moving_mean"), "sgd", "exact"),
    "variance-about-batch-mean": (functools.partial(_dense, kind="two_level_variance"), "sgd", "exact"),
    "assign_add-counters": (functools.partial(_dense, kind="counters"), "sgd", "exact"),
    "layers-batch_normalization-unfused": (functools.partial(_dense, kind="layers_unfused"), "momentum", "exact"),
    "contrib-batch_norm": (functools.partial(_dense, kind="contrib_batch_norm"), "sgd", "exact"),
    # were wrong (the offset's and scale's gradients, taken from backward statistics, k times too large)
    "nn-batch_normalization": (functools.partial(_dense, kind="nn_batch_normalization"), "adam", "exact"),
    "nn-batch_normalization-conv": (functools.partial(_conv, kind="nn_batch_normalization"), "momentum", "exact"),
    "gamma-inside-the-inverse-deviation": (functools.partial(_dense, kind="gamma_in_inverse"), "sgd", "exact"),
    "moments-fetched": (functools.partial(_dense, kind="fetched_moments"), "sgd", "exact"),
    "dropout-then-moments": (functools.partial(_dense, kind="dropout_moments"), "sgd", "exact"),
    "moments-summed-loss": (functools.partial(_dense, kind="summed_moments"), "sgd", "exact"),
    "mask-from-labels": (functools.partial(_dense, kind="labels_mask"), "sgd", "exact"),
    "center-loss-scatter_sub": (functools.partial(_dense, kind="center"), "sgd", "exact"),
    "masked-loss": (functools.partial(_dense, kind="masked"), "sgd", "exact"),
    # were refused: a statistics pass computes the mean, each micro-batch's backward reads it (the Mean's gradient
    # divided by the batch's count: k times too small)
    "sqrt-of-mean-loss": (functools.partial(_dense, kind="rmse"), "sgd", "exact"),
    "log-of-mean-loss": (functools.partial(_dense, kind="log_of_mean"), "adam", "exact"),
    "mean-activation-penalty": (functools.partial(_dense, kind="mean_penalty"), "momentum", "exact"),
    # (was refused: the clip of the scaled path's gradients ran in each micro-batch, on its own gradients)
    "nn-batch_normalization-clipped": (functools.partial(_dense, kind="nn_batch_normalization"), "clip", "exact"),
    "nn-batch_normalization-conv-clip_by_norm": (functools.partial(_conv, kind="nn_batch_normalization"),
                                                 "clip_by_norm", "exact"),
    # clipped gradients of batch norms: the update run clips the merged, whole-batch gradients
    "layers-batch_normalization-clipped": (functools.partial(_conv, kind="layers_batch_norm"), "clip", "exact"),
    "layers-batch_normalization-unfused-clip_by_norm": (functools.partial(_conv, kind="layers_batch_norm_unfused"),
                                                        "clip_by_norm", "exact"),
    "moments-clip_by_average_norm": (functools.partial(_conv, kind="batch_norm"), "clip_by_average_norm", "exact"),
    "conv-clip_by_global_norm": (functools.partial(_conv, kind="plain"), "clip", "exact"),
    "softmax-axis0": (functools.partial(_dense, kind="softmax0"), "sgd", "Softmax 'Softmax"),
    "reduce_max-axis0": (functools.partial(_dense, kind="max0"), "sgd", "Max 'Max'"),
    "reduce_min-axis0": (functools.partial(_dense, kind="min0"), "sgd", "Min 'Min'"),
    "argmax-axis0": (functools.partial(_dense, kind="argmax0"), "sgd", "ArgMax 'ArgMax'"),
    "cumsum-axis0": (functools.partial(_dense, kind="cumsum0"), "sgd", "Cumsum 'Cumsum' accumulates along axis 0"),
    "top_k-over-the-batch": (functools.partial(_dense, kind="topk0"), "sgd", "TopKV2 'TopKV2' sorts the batch's"),
    "sqrt-of-sum-loss": (functools.partial(_dense, kind="sqrt_of_sum"), "sgd", "non-linear function of a sum"),
    "max-over-examples-loss": (functools.partial(_dense, kind="worst_example"), "sgd", "reduces over the batch by Max"),
    "loss-times-batch-size": (functools.partial(_dense, kind="times_count"), "sgd", "scales a value of the batch by"),
    "range-one_hot": (functools.partial(_dense, kind="range_one_hot"), "sgd", "Range 'range' numbers the batch's"),
    "mixup-reverse": (functools.partial(_dense, kind="mixup"), "sgd", "Range 'ReverseV2/range'"),
    # (no budget plans a step whose shapes follow its values)
    "unique-labels": (functools.partial(_dense, kind="unique"), "sgd", "Unique 'Unique': output 0 has shape (None,)"),
    "infonce": (functools.partial(_pairs, kind="infonce"), "sgd", "pairs the batch's examples"),
    "triplet-batch-hard": (functools.partial(_pairs, kind="triplet"), "sgd", "pairs the batch's examples"),
    "gan-concat": (functools.partial(_gan, concat=True), "own", "ConcatV2 'concat' concatenates along axis 0"),
    "gan-two-optimizers": (functools.partial(_gan, concat=False), "own", "depends on updated variables"),
}
# tf.contrib is not in TensorFlow 2's compat.v1; TensorFlow 2.21's ExponentialMovingAverage initializes its shadow
# variables from the weights in the same initializer run, which it may run first (an uninitialized-value error); it
# runs a tf.group's two minimize calls in no fixed order, where each reads the variables the other updates; its
# dropout draws other random numbers.
NOT_IN_TF = ("contrib-layer_norm", "contrib-instance_norm", "contrib-batch_norm", "ema-of-weights",
             "gan-two-optimizers", "gan-concat", "dropout-then-moments")


def _build(t, name: str):
    """Case `name` in module `t`: (graph, fetches [training op, loss, *extra], init, feeds by placeholder name)."""
    builder, optimizer, _ = CASES[name]
    rng = np.random.default_rng(0)
    g = t.Graph()
    with g.as_default():
        loss, feeds, extra = builder(t, rng=rng)
        if optimizer == "own":
            train, extra = extra, []
        elif optimizer.startswith("clip"):
            params = t.trainable_variables()
            grads = t.gradients(loss, params)
            if optimizer == "clip":
                grads, _ = t.clip_by_global_norm(grads, 0.5)
            else:
                clip = t.clip_by_norm if optimizer == "clip_by_norm" else t.clip_by_average_norm
                grads = [clip(g, 0.05) for g in grads]
            # (every update after every gradient: TensorFlow's ref variables let an update run before another
            # gradient reads the variable, which a per-tensor clip, unlike the global norm, does not order)
            with t.control_dependencies(grads):
                train = t.train.GradientDescentOptimizer(0.1).apply_gradients(list(zip(grads, params)))
        else:
            opt = {"momentum": lambda: t.train.MomentumOptimizer(0.1, 0.9), "adam": lambda: t.train.AdamOptimizer(0.01)
                   }.get(optimizer, lambda: t.train.GradientDescentOptimizer(0.1))()
            with t.control_dependencies(t.get_collection(t.GraphKeys.UPDATE_OPS)):
                train = opt.minimize(loss)
        if optimizer == "ema":
            with t.control_dependencies([train]):
                train = t.train.ExponentialMovingAverage(0.9).apply(t.trainable_variables())
        init = t.global_variables_initializer()
    return g, [train, loss, *extra], init, {p.name: v for p, v in feeds.items()}


def _train(t, name: str, device: str | None = None, k: int | None = None):
    """STEPS steps of case `name` (tfplus on `device`, split into `k` micro-batches if given; else `t` is
    TensorFlow): the losses, and every variable by name."""
    g, fetches, init, feeds = _build(t, name)
    kwargs = {} if device is None else {"device": device, "memory_budget": "1GB" if k else None}
    with t.Session(graph=g, **kwargs) as sess:
        sess.run(init)
        if k:
            step = sess.step(fetches, feeds)
            p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph,
                             force=(k, 1))
            assert p.microbatches == k
            step.use_plan(p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(STEPS)]
        return np.array(losses, np.float64), {v.op.name: sess.run(v) for v in g.get_collection("variables")}


@functools.cache
def _unsplit(name: str, device: str):
    return _train(tf, name, device)


def _assert_same(got, want, rtol: float, what: str):
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=rtol, err_msg=f"{what}: losses")
    assert got[1].keys() == want[1].keys(), what
    for var, value in want[1].items():
        np.testing.assert_allclose(got[1][var], value, rtol=rtol, atol=rtol, err_msg=f"{what}: {var}")


# An exact case on each device (4 micro-batches on cpu, 2 on opencl); a refusal, the planner's alone, on cpu.
SPLITS = [(name, device, 4 if device == "cpu" else 2) for name, (_, _, outcome) in CASES.items() for device in DEVICES
          if outcome == "exact" or device == "cpu"]


@pytest.mark.parametrize("name, device, k", SPLITS, ids=[f"{n}-{d}-k{k}" for n, d, k in SPLITS])
def test_a_split_step_trains_as_the_unsplit_one_or_is_refused_naming_the_op(name, device, k):
    outcome = CASES[name][2]
    if outcome != "exact":
        with pytest.raises(planner.PlanError) as e:
            _train(tf, name, device, k)
        assert outcome in str(e.value), str(e.value)
        return
    want = _unsplit(name, device)
    assert np.all(np.isfinite(want[0])) and want[0][-1] != want[0][0], "the steps did not train"
    _assert_same(_train(tf, name, device, k), want, TOL[device], f"{name} on {device} in {k} micro-batches")


TF_CASES = [n for n in CASES if n not in NOT_IN_TF]


@pytest.mark.parametrize("name", TF_CASES)
def test_the_unsplit_step_is_tensorflows(tf1, name):
    """The reference the splits are held against: TensorFlow's step of the same graph (a refused graph's too)."""
    _assert_same(_unsplit(name, "cpu"), _train(tf1, name), 1e-4, f"{name}: tfplus against TensorFlow")


def test_tensorflows_masked_tf_losses_graph_plans_its_floor_in_micro_batches(tf1, tmp_path):
    """TensorFlow's tf.losses with weights checks that they broadcast by a tf.cond nested in another's branch; the
    planner of `tfplus plan --graph` and `tfplus train` (step_budget) resolves them level by level from the fed
    shapes, as a budgeted session does: it raised an internal error ("If ... sizes its outputs only as it runs")."""
    from tfplus import step_budget
    with tf1.Graph().as_default():
        x = tf1.placeholder(tf1.float32, [None, 5, 4], name="x")
        y = tf1.placeholder(tf1.int32, [None, 5], name="y")
        lengths = tf1.placeholder(tf1.int32, [None], name="lengths")
        logits = tf1.tensordot(x, tf1.Variable(np.ones((4, C), np.float32)), 1)
        loss = tf1.losses.sparse_softmax_cross_entropy(y, logits, weights=tf1.sequence_mask(lengths, 5, tf1.float32))
        tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        tf1.train.export_meta_graph(str(tmp_path / "masked.meta"))
    g = tf.Graph()
    with g.as_default():
        tf.train.import_meta_graph(str(tmp_path / "masked.meta"))
    shapes = {g.get_tensor_by_name("x:0"): (B, 5, 4), g.get_tensor_by_name("y:0"): (B, 5),
              g.get_tensor_by_name("lengths:0"): (B,)}
    floor = step_budget.floor(g, [([g.get_operation_by_name("train")], shapes)], "cpu")
    assert floor.microbatches > 1, floor.transformations


@pytest.mark.parametrize("name", ["l2_normalize-axis1", "instance-norm", "mean-activation-penalty",
                                  "nn-batch_normalization-clipped"])
def test_a_step_at_its_floor_trains_as_the_unsplit_one(name):
    """The floor's plan of these steps streamed a prefix whose backward recomputed the loss's fused mean over the
    batch (planner.recompute dropped its gradient output): run on each micro-batch's rows, it divided by their
    count, and the prefix's gradients came out k times too large (0.1 off after 3 steps). A stream's backward now
    refuses a recomputed reduction over the rows, and the floor micro-batches instead."""
    g, fetches, init, feeds = _build(tf, name)
    with tf.Session(graph=g, memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        floor = planner.floor_plan(step.fetches, step.feed_shapes, device_facts("cpu"), graph=step.graph)
    g, fetches, init, feeds = _build(tf, name)
    with tf.Session(graph=g, memory_budget=floor.budget_bytes) as sess:
        sess.run(init)
        got = np.array([sess.run(fetches, feeds)[1] for _ in range(STEPS)], np.float64), \
            {v.op.name: sess.run(v) for v in g.get_collection("variables")}
    _assert_same(got, _unsplit(name, "cpu"), TOL["cpu"], f"{name} at its floor, {floor.budget_bytes} bytes")


@pytest.mark.parametrize("name", ["cumsum-axis0", "range-one_hot", "top_k-over-the-batch", "mixup-reverse"])
def test_a_prefix_that_mixes_the_batchs_rows_is_no_cut(name):
    """A streamed prefix runs in micro-batches like a split step: an op in it that moves or mixes rows refuses the
    cut, naming the op (a cumsum over the batch streamed up to the logits trained 0.09 off in 3 steps)."""
    g, fetches, _, feeds = _build(tf, name)
    cut = [op for op in g.get_operations() if op.type == "MatMul"][1].outputs[0].name  # the logits
    with tf.Session(graph=g, memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        with pytest.raises(planner.PlanError, match=f"cannot stream the step's prefix up to '{cut}'") as e:
            planner.plan(step.fetches, step.feed_shapes, device_facts("cpu"), graph=step.graph,
                         force=(1, 1, False, 1, 0, (cut, 4)))
    assert CASES[name][2] in str(e.value), str(e.value)
