"""Batch statistics under micro-batching (planner.crossbatch): found from the graph's dataflow, and training-mode
batch norm computed in statistics passes over the micro-batches, so that a micro-batched step equals the unsplit
one (loss, weights, moving averages) on every device, against TensorFlow too, in the bytes it planned."""
from __future__ import annotations

import gc
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import assert_planned_bytes_are_measured, random_feeds, rows_net

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install, measure_device_step
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.graphs.seqnet import seqnet
from tfplus.planner import crossbatch
from tfplus.runtime.facts import device_facts

BATCH = 8


def _bn_net(rank: int = 4, data_format: str = "NHWC", tf_losses: bool = False):
    """Two layers, each followed by a training-mode tf.layers.batch_normalization (moving averages in
    UPDATE_OPS, run by the training op as TF1 does), then dense logits and a mean cross-entropy. Rank 4: 3x3
    convolutions in `data_format`; rank 3: (N, 6 steps, C) time-distributed products (the layer's Size-based
    Bessel factor); rank 2: dense layers. Variables start from fixed arrays."""
    rng = np.random.default_rng(0)

    def var(*shape):
        return tf.Variable((rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32))
    g = tf.Graph()
    with g.as_default():
        if rank == 4:
            nchw = data_format == "NCHW"
            x = tf.placeholder(tf.float32, [None, 3, 5, 5] if nchw else [None, 5, 5, 3], name="x")
            h = x
            for i, (cin, cout) in enumerate([(3, 4), (4, 4)]):
                h = tf.nn.conv2d(h, var(3, 3, cin, cout), [1, 1, 1, 1], "SAME", data_format=data_format)
                h = tf.layers.batch_normalization(h, axis=1 if nchw else -1, training=True, momentum=0.9,
                                                  name=f"bn{i + 1}")
                h = tf.nn.relu(h) if i == 0 else h
            h = tf.reshape(h, [-1, 100])
        else:
            x = tf.placeholder(tf.float32, [None, 6, 3] if rank == 3 else [None, 5], name="x")
            h = x
            for i, (cin, cout) in enumerate([(h.shape.as_list()[-1], 4), (4, 4)]):
                h = tf.matmul(tf.reshape(h, [-1, cin]), var(cin, cout))
                h = tf.reshape(h, [-1, 6, cout]) if rank == 3 else h
                h = tf.layers.batch_normalization(h, training=True, momentum=0.9, name=f"bn{i + 1}")
                h = tf.nn.relu(h) if i == 0 else h
            h = tf.reshape(h, [-1, 24 if rank == 3 else 4])
        logits = tf.matmul(h, var(h.shape.as_list()[-1], 3))
        y = tf.placeholder(tf.int32, [None], name="y")
        loss = (tf.losses.sparse_softmax_cross_entropy(y, logits) if tf_losses else  # divides by a count
                tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.GradientDescentOptimizer(0.5).minimize(
                loss, gate_gradients=tf.train.Optimizer.GATE_GRAPH)
        init_op = tf.global_variables_initializer()
    data = np.random.default_rng(1)
    feeds = {x: (data.standard_normal([BATCH] + x.shape.as_list()[1:]) * 2 + 1).astype(np.float32),
             y: data.integers(0, 3, BATCH).astype(np.int32)}
    return SimpleNamespace(graph=g, train_op=train_op, loss=loss, init_op=init_op), feeds


def _train(tg, feeds, force=None, device="cpu", steps=2):
    """Losses of `steps` training steps (by plan `force`, if given), every variable after them, and the plan."""
    fetches = [tg.train_op, tg.loss]
    p = None
    with tf.Session(graph=tg.graph, device=device, memory_budget=None if force is None else "1GB") as sess:
        sess.run(tg.init_op)
        if force is not None:
            p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                             graph=tg.graph, force=force)
            install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(steps)]
        variables = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
    return losses, variables, p


def _assert_same(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=1e-5, atol=1e-6, err_msg=name)


# -- finding batch statistics from the graph ------------------------------------------------------------------
def _moments_over_batch(h):
    mean, var = tf.nn.moments(h, [0])
    return (h - mean) / tf.sqrt(var + 1e-3)


def _layer_norm(h):  # over the features: each row its own statistics
    mean, var = tf.nn.moments(h, [1], keep_dims=True)
    return (h - mean) / tf.sqrt(var + 1e-3)


def _share_of_batch(h):  # a sum over the batch, broadcast back onto the rows
    return h / tf.reduce_sum(tf.abs(h), 0)


def _over_batch_max(h):  # a max over the batch: no pass combines slices' maxima into the gradient's ties
    return h / tf.reduce_max(tf.abs(h), 0)


def _norm_and_moments(h):  # a fused batch norm, then a hand-written one
    h = tf.reshape(tf.layers.batch_normalization(tf.reshape(h, [-1, 1, 1, 8]), training=True), [-1, 8])
    return _moments_over_batch(h)


def _fetches_and_shapes(tg, feeds):
    return [tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}


@pytest.mark.parametrize("stat, passes", [(_moments_over_batch, 3), (_share_of_batch, 2), (_layer_norm, 0),
                                          (tf.nn.relu, 0)], ids=["moments", "share", "layer_norm", "relu"])
def test_batch_statistics_are_found_from_the_dataflow(stat, passes):
    """A reduction over the batch whose result is broadcast back onto the rows is found whatever ops compute it
    (hand-written moments: a pass for the mean, one for the variance about it, one for their gradients' sums
    over the batch); a layer norm over the features, the loss's mean and the weight gradients (sums over the batch that
    only the fetches and updates read) are not batch statistics: those steps micro-batch as before."""
    tg, feeds = rows_net(stat, BATCH)
    p = planner.plan(*_fetches_and_shapes(tg, feeds), graph=tg.graph, force=(2, 1))
    assert p.microbatches == 2 and len(p.statistics) == passes and not p.notes


def test_statistics_are_tensors_that_rows_are_computed_from_again():
    """planner.crossbatch.statistics on its own: of hand-written moments, the kept batch mean and the variance
    (which reads it), and the backward's sums over the batch that reach the rows through their gradients; not
    the loss's mean over the batch, nor the weight gradients."""
    tg, feeds = rows_net(_moments_over_batch, BATCH)
    fetches, shapes = _fetches_and_shapes(tg, feeds)
    order = sorted(tf.framework.needed_ops(fetches, set(shapes)), key=lambda op: op._id)
    found = crossbatch.statistics(order, set(shapes), set(shapes), crossbatch.open_rows(order, set(shapes)))
    forward = [t.op for t in found if not t.op.backward]
    assert [(op.type, op.name) for op in forward] == [("Mean", "moments/Mean"), ("Mean", "moments/Mean_1")]
    assert found[2:] and all(t.op.type == "Sum" and t.op.name.startswith("gradients/") for t in found[2:])
    assert not any(t.op.name.startswith(("Mean", "gradients/MatMul")) for t in found)


@pytest.mark.parametrize("stat, k", [(_moments_over_batch, 2), (_moments_over_batch, 8), (_share_of_batch, 4),
                                     (_norm_and_moments, 4)], ids=["moments-k2", "moments-k8", "share-k4", "both-k4"])
def test_hand_written_statistics_split_step_equals_the_unsplit_step(stat, k):
    """Statistics written by hand run in passes too: a mean's gradient divides by the whole batch's size (its
    Size folded), a sum's partials add up; beside a fused batch norm as well."""
    tg, feeds = rows_net(stat, BATCH)
    got = _train(tg, feeds, force=(k, 1), steps=3)
    _assert_same(got, _train(tg, feeds, steps=3))
    assert got[2].statistics


def test_a_statistic_no_pass_can_combine_is_refused_by_name():
    """A max over the batch broadcast onto the rows: the slices' maxima do not make the gradient's; refused,
    naming the op."""
    tg, feeds = rows_net(_over_batch_max, BATCH)
    fetches, shapes = _fetches_and_shapes(tg, feeds)
    with pytest.raises(planner.PlanError, match="Max 'Max' reduces its input over the batch .* not a Max's"):
        planner.plan(fetches, shapes, graph=tg.graph, force=(2, 1))
    assert "Max 'Max'" in planner.plan(fetches, shapes, graph=tg.graph).notes[0]


# -- batch norm in statistics passes: equal to the unsplit step -----------------------------------------------
@pytest.mark.parametrize("rank, fmt, k", [(4, "NHWC", 2), (4, "NCHW", 4), (3, "NHWC", 2), (2, "NHWC", 8)],
                         ids=["nhwc-k2", "nchw-k4", "rank3-k2", "rank2-k8"])
def test_batch_norm_split_step_equals_the_unsplit_step(rank, fmt, k):
    """Loss, weights and moving mean/variance after two micro-batched steps are the unsplit steps' (the rank-3
    layer's Bessel factor from the batch's size is the whole batch's); the moving averages moved."""
    tg, feeds = _bn_net(rank, fmt)
    want = _train(tg, feeds)
    got = _train(tg, feeds, force=(k, 1))
    _assert_same(got, want)
    p = got[2]
    assert p.microbatches == k and len(p.statistics) == 4  # a pass per layer (mean and variance), the backward's
    assert [ph.name for ph in p.phases][-2:] == ["micro-batch", "update"]
    start = _train(tg, feeds, steps=0)[1]
    for name in ("bn1/moving_mean", "bn2/moving_variance", "bn1/gamma"):
        assert not np.allclose(start[name], want[1][name]), name


def test_a_tf_losses_loss_with_batch_norm_splits_as_the_unsplit_step():
    """tf.losses' mean divides by a count of examples, a forward sum over the batch whose only rows are its
    gradient's: no statistic (each micro-batch's mean with its own count, averaged), while the batch norms still
    run in passes. Taken for a statistic, the loss and the gradients came out k times too small."""
    tg, feeds = _bn_net(tf_losses=True)
    got = _train(tg, feeds, force=(4, 1))
    _assert_same(got, _train(tg, feeds))
    assert got[2].microbatches == 4 and len(got[2].statistics) == 4


def _dense_bn_net(name: str, **bn_kwargs):
    """Features [None, 6] -> a training-mode batch norm `name` -> a dense layer of 3 logits, SGD with the norm's
    moving averages updated before it: (step, features placeholder, labels placeholder)."""
    g = tf.Graph()
    with g.as_default():
        x, y = tf.placeholder(tf.float32, [None, 6]), tf.placeholder(tf.int32, [None])
        h = tf.layers.batch_normalization(x, training=True, name=name, **bn_kwargs)
        logits = tf.matmul(h, tf.Variable(np.linspace(1, -1, 18).reshape(6, 3).astype(np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        init_op = tf.global_variables_initializer()
    return SimpleNamespace(graph=g, train_op=train_op, loss=loss, init_op=init_op), x, y


def test_a_norm_of_the_fed_batch_and_a_forward_only_step():
    """A batch norm of the fed batch itself: its input gradient is not needed, nor its statistics (1 pass, not
    2); a step that only evaluates the loss in training mode: the forward passes only, the same loss."""
    tg, x, y = _dense_bn_net("first")
    rng = np.random.default_rng(0)
    feeds = {x: (rng.standard_normal((BATCH, 6)) * 3 + 2).astype(np.float32),
             y: rng.integers(0, 3, BATCH).astype(np.int32)}
    got = _train(tg, feeds, force=(4, 1), steps=3)
    _assert_same(got, _train(tg, feeds, steps=3))
    assert len(got[2].statistics) == 1
    tg, feeds = _bn_net(4, "NHWC")
    p = planner.plan([tg.loss], {t: v.shape for t, v in feeds.items()}, graph=tg.graph, force=(2, 1))
    assert len(p.statistics) == 2 and [ph.name for ph in p.phases][-1] == "micro-batch"
    with tf.Session(graph=tg.graph, memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        want = sess.run(tg.loss, feeds)
        install(sess, [tg.loss], p)
        np.testing.assert_allclose(sess.run(tg.loss, feeds), want, rtol=1e-5)


def test_one_pass_variance_keeps_its_digits_far_from_zero():
    """A layer's mean and variance come from one pass: each micro-batch's mean and its variance about it, plus the
    spread of the micro-batches' means, in float64. Rows 100 sigma from zero, where float32's E[x^2] - E[x]^2
    would keep no digit of the variance: the moving variance is the float64 reference's, as unsplit."""
    tg, x, y = _dense_bn_net("far", momentum=0.0)
    rng = np.random.default_rng(3)
    rows = (rng.standard_normal((BATCH, 6)) + 100).astype(np.float32)
    feeds = {x: rows, y: rng.integers(0, 3, BATCH).astype(np.int32)}
    got = _train(tg, feeds, force=(4, 1), steps=1)
    _assert_same(got, _train(tg, feeds, steps=1))
    assert len(got[2].statistics) == 1
    want = rows.astype(np.float64).var(0)  # a rank-2 layer's moving variance is the biased one, as TF's
    np.testing.assert_allclose(got[1]["far/moving_variance"], want, rtol=1e-4)


def test_batch_norm_split_step_matches_tensorflow(tf1):
    """Our micro-batched step (statistics passes) against TensorFlow running the same GraphDef unsplit."""
    from tforacle import import_into_tf
    tg, feeds = _bn_net(4, "NHWC")
    losses, mine, _ = _train(tg, feeds, force=(4, 1), steps=3)
    tf_graph = import_into_tf(tf1, tg.graph)
    by_name = {t.name: v for t, v in feeds.items()}
    with tf1.Session(graph=tf_graph) as sess:
        sess.run(tf_graph.get_operation_by_name(tg.init_op.name))
        theirs = [sess.run([tf_graph.get_operation_by_name(tg.train_op.name),
                            tf_graph.get_tensor_by_name(tg.loss.name)], by_name)[1] for _ in range(3)]
        values = {n: sess.run(tf_graph.get_tensor_by_name(n + ":0")) for n in mine}
    np.testing.assert_allclose(losses, theirs, rtol=1e-5)
    for name, v in values.items():
        np.testing.assert_allclose(mine[name], v, rtol=1e-4, atol=1e-5, err_msg=name)


def test_the_budget_search_prices_the_statistics_passes():
    """MobileNet with batch norm: a budget the plain step exceeds and only micro-batches meet is met by
    statistics passes, which the plan says and prices (more runs than plain micro-batching's k + 1); a budget
    the plain step fits needs none."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (4, 8, 8)})
    fetches, shapes = [tg.train_op, tg.loss], {tg.images: (16, 3, 8, 8), tg.labels: (16,)}
    plain = planner.plan(fetches, shapes, "cpu", graph=tg.graph)
    assert not plain.statistics
    small = planner.smallest_plan(fetches, shapes, "cpu", graph=tg.graph)
    assert small.statistics and small.peak_bytes < plain.peak_bytes
    p = planner.plan(fetches, shapes, "cpu", graph=tg.graph, budget=small.peak_bytes)
    norms = sum(op.type == "FusedBatchNormV3" and op.attrs["is_training"]  # conv0, block1-2's dw and pw
                for op in tg.graph.get_operations())
    assert norms == 5 and p.fits and p.microbatches > 1
    assert len(p.statistics) == 2 * norms  # per layer a pass for its mean and variance, one for its backward
    detail = next(t["detail"] for t in p.transformations if t["name"] == "microbatch")
    assert f"first {len(p.statistics)} statistics passes" in detail and "5 training-mode batch norms" in detail
    assert p.predicted_overhead > len(p.statistics)  # each pass reruns a part of the step, k micro-batches
    assert p.to_json()["statistics_passes"] == len(p.statistics) and "statistics_passes" not in plain.to_json()


def test_kept_rows_and_folded_gradients_change_no_bit(monkeypatch):
    """Statistics passes that keep rows whole for later runs (a norm's input, a norm gradient's dy: no pass
    recomputes the layers below them) and compute the gradients whose rows they have (crossbatch.kept) train to
    the very bits of passes that recompute everything from the fed batch, running fewer ops in no more bytes; and
    match the unsplit step. (Every run in k micro-batches: a count per run, crossbatch.COUNTS, sums in another
    order.)"""
    monkeypatch.setattr(crossbatch, "COUNTS", False)
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (4, 8, 8)})
    feeds = random_feeds(tg, 8, 8)
    got = _train(tg, feeds, force=(2, 1))
    monkeypatch.setattr(crossbatch, "KEEP", False)
    plain = _train(tg, feeds, force=(2, 1))
    np.testing.assert_array_equal(got[0], plain[0])
    for name, v in plain[1].items():
        np.testing.assert_array_equal(got[1][name], v, err_msg=name)
    _assert_same(got, _train(tg, feeds))
    p, q = got[2], plain[2]
    assert p.kept and not q.kept
    micro = [[ph for ph in plan.phases if ph.name == "micro-batch"][0] for plan in (p, q)]
    assert len(micro[0].fetches) < len(micro[1].fetches)  # gradients the passes computed
    assert sum(len(ph.order) for ph in p.phases) < sum(len(ph.order) for ph in q.phases)
    assert p.predicted_overhead < q.predicted_overhead and p.peak_bytes <= q.peak_bytes


@pytest.mark.parametrize("model", ["mobilenet", "seqnet"])
def test_batch_norm_split_plans_are_measured(model):
    """The NumPy data a BN-split step holds is its plan's (the statistics' accumulators and the rows kept between
    passes included)."""
    build, kwargs, size = {"mobilenet": (mobilenet, {"conv_widths": (4, 8, 8)}, 8),
                           "seqnet": (seqnet, {"conv_widths": (6, 8, 8)}, 4)}[model]
    tg = training_graph(build, total_steps=10, seed=0, image_shape=(3, size, size), model_kwargs=kwargs)
    feeds = random_feeds(tg, 8, size)
    p = planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("cpu"),
                     graph=tg.graph, force=(2, 1))
    assert p.kept  # rows kept between passes, in buffers of their own
    assert_planned_bytes_are_measured(tg, feeds, force=(2, 1))


@needs_opencl
def test_batch_norm_split_step_runs_on_opencl():
    """The OpenCL executor runs the statistics passes, rows kept between them (from the fourth step on as one
    recorded tape): the unsplit opencl step's results, and the device ledger finds the planned peak with no
    allocation during the step."""
    tg, feeds = _bn_net(4, "NCHW")
    _assert_same(_train(tg, feeds, force=(2, 1), device="opencl", steps=5), _train(tg, feeds, device="opencl", steps=5))
    fetches = [tg.train_op, tg.loss]
    gc.collect()  # the sessions' device buffers go back to the pool before the ledger is read
    with tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                         graph=tg.graph, force=(2, 1))
        bound = install(sess, fetches, p)
        sess.run(fetches, feeds)
        m = measure_device_step(sess, fetches, feeds)
        for _ in range(3):
            sess.run(fetches, feeds)
        assert bound.whole.tape is not None  # the whole step, its passes and kept rows, replays as one tape
    assert p.statistics and p.kept and m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)


def test_a_budget_below_the_smallest_plan_is_taken_when_a_plan_for_it_fits():
    """The smallest plan is made without a budget; planned for a budget, statistics passes keep whole rows only
    as far as it leaves room, and go lower. `tfplus train --memory-budget` (step_budget.check_budget) takes such a
    budget instead of refusing it by the smallest plan's peak (MobileNet b128 fits 50 MB; its smallest plan
    62.6 MB)."""
    from tfplus.graphs import get_model, training_graph
    from tfplus.step_budget import check_budget, smallest_peak, training_runs
    # Narrow widths: at full widths the same check plans ~5x as long (the smallest plan 49.7 MB, the floor
    # 44.9 MB at this batch and size); here the smallest plan is 244 kB.
    tg = training_graph(get_model("mobilenet").build, total_steps=10, seed=0, image_shape=(3, 16, 16),
                        model_kwargs={"conv_widths": (8, 16, 16)})
    runs = training_runs(tg, tg.train_op, 16)
    smallest = smallest_peak(tg.graph, runs, "cpu")
    check_budget(tg.graph, runs, "cpu", int(smallest * 0.95))
