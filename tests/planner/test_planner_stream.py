"""The streamed prefix (planner.stream): the first layers in micro-batches, the rest of the step once at full
batch. Training by it gives the plain step's losses and weights on every device, its planned bytes are the
measured ones, the budget search picks it for fine-tuning, and cuts it cannot stream exactly are refused."""
from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import assert_close_training, assert_planned_bytes_are_measured, cnn_feeds, train_session_step

import tfplus as tf
from tfplus import planner, threads
from tfplus.engine.memory import install, measure_device_step
from tfplus.kernels import opencl as _opencl_kernels  # noqa: F401  (DeviceFacts("opencl") plans read their scratch)
from tfplus.planner.chunking import SCRATCH_DIVISORS
from tfplus.planner.liveness import PlanError, alias_root
from tfplus.planner.plan import DeviceFacts, _Step
from tfplus.registry import SCRATCH_ATTR
from tfplus.runtime.facts import device_facts


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


def _cnn(last: int | None = None):
    """test_planner's small Mentee; with `last`, only its last `last` layers train (the rest frozen)."""
    import tfplus.train  # noqa: F401  (tf.train, until tfplus/__init__ imports it)
    from tfplus.finetune import select_trainable
    from tfplus.graphs import get_model, training_graph
    pick = None if last is None else (lambda vs: select_trainable(vs, None, last))
    return training_graph(get_model("mentee").build, total_steps=10, seed=0, image_shape=(3, 16, 16),
                          model_kwargs={"conv_widths": (4, 8), "fc_widths": (16,)}, var_list=pick)


def train_steps(tg, feeds, device="cpu", force=None, steps=2):
    """Losses of `steps` training steps (by the forced plan, if any), the weights after them, and the plan."""
    fetches = [tg.train_op, tg.loss]
    p = None
    gc.collect()
    with tf.Session(graph=tg.graph, device=device, memory_budget=None if force is None else "1GB") as sess:
        sess.run(tg.init_op)
        if force is not None:
            p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                             graph=tg.graph,
                             force=force)
            install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(steps)]
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
    return losses, weights, p


# (fine-tuned layers, cut, micro-batches, compact): the frozen features at a pool or after a frozen dense layer;
# a full step streamed at the first pool (the prefix trains: boundary gradient, recomputed forward, summed
# gradients), with compact saved state (the pool's argmax in the prefix backward runs), and after fc1 (two
# boundary tensors, a MatMul's sum over the rows).
CASES = {"finetune_pool": (1, "MaxPool:0", 4, False), "finetune_fc1": (1, "fc1/MatMul:0", 2, False),
         "full_pool": (None, "MaxPool:0", 4, False), "full_pool_compact": (None, "MaxPool:0", 2, True),
         "full_fc1": (None, "fc1/MatMul:0", 8, False)}


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_streamed_prefix_trains_as_the_plain_step(case, device):
    last, cut, k, z = case
    tg = _cnn(last)
    feeds = cnn_feeds(tg, batch=8)
    want = train_steps(tg, feeds, device)
    losses, weights, p = train_steps(tg, feeds, device, force=(1, 1, z, 1, 0, (cut, k)))
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    assert not np.allclose(losses[0], losses[1]), "the step trains"
    for name, w in want[1].items():
        np.testing.assert_allclose(weights[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
    names = [ph.name for ph in p.phases]
    assert names == (["prefix", "rest"] if last else ["prefix", "rest", "prefix backward", "update"])
    assert p.stream.tensor.name == cut and p.stream_microbatches == k
    assert p.phases[0].specs[p.stream.tensor].shape[0] == 8 // k, "the prefix runs on a micro-batch's rows"
    if last:  # frozen below the cut: nothing of the prefix runs backward
        assert not any(op.type.startswith("Conv2DBackprop") for ph in p.phases for op in ph.order)
    else:
        assert {t.name for t in p.stream.partials} >= {"gradients/conv1/Conv2D_grad/Conv2DBackpropFilter:0"}
        assert bool(p.phases[2].sites) == z, "compact state in the prefix backward runs"
    (t,) = [t for t in p.transformations if t["name"] == "stream"]
    assert f"{k} micro-batches of {8 // k}" in t["detail"] and cut in t["detail"]


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_the_sessions_rewritten_step_streams(device):
    """A session runs the rewritten step (tfplus.engine.rewrite), whose fused ReLU gradient also gives the bias
    gradient, a sum over the rows: that step streams too, and trains as the plain step."""
    tg = _cnn()
    feeds = cnn_feeds(tg, batch=8)
    want = train_steps(tg, feeds, device)
    *got, p = train_session_step(tg, feeds, device, lambda step, facts: planner.plan(
        step.fetches, step.feed_shapes, facts, graph=step.graph, force=(1, 1, False, 1, 0, ("MaxPool:0", 4))))
    assert "_FusedReluGradBiasAddGrad" in {t.op.type for t in p.stream.partials}
    assert_close_training(got, want)


@pytest.mark.parametrize("case", [CASES["finetune_pool"], CASES["full_pool"]], ids=["finetune", "full"])
def test_streamed_prefix_planned_bytes_are_measured_bytes(case):
    """As test_planner's check: the NumPy data the step holds is its plan's (the cut's full-batch buffer, the
    summed gradients and the boundary gradient included) and the step adds no more than NumPy's ufunc
    buffers."""
    last, cut, k, _ = case
    tg = _cnn(last)
    assert_planned_bytes_are_measured(tg, cnn_feeds(tg, batch=32), force=(1, 1, False, 1, 0, (cut, k)))


@needs_opencl
def test_streamed_prefix_opencl_ledger_measures_the_planned_peak():
    tg = _cnn()
    feeds = cnn_feeds(tg, batch=16)
    fetches = [tg.train_op, tg.loss]
    gc.collect()
    with tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                             graph=tg.graph,
                         force=(1, 1, False, 1, 0, ("MaxPool:0", 4)))
        install(sess, fetches, p)
        sess.run(fetches, feeds)
        m = measure_device_step(sess, fetches, feeds)
    assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)


def test_cross_phase_buffers_live_as_long_as_they_are_read():
    """The cut's full-batch buffer lives through the prefix and rest runs; the boundary gradient, written by
    the rest run, until the prefix backward runs have read it; the summed gradients through the update run;
    and the arena holds the largest run beside them."""
    tg = _cnn()
    shapes = {t: v.shape for t, v in cnn_feeds(tg, batch=8).items()}
    p = planner.plan([tg.train_op, tg.loss], shapes, graph=tg.graph, force=(1, 1, False, 1, 0, ("MaxPool:0", 2)))
    prefix, rest, back, update = p.phases
    whole = p.accumulators[p.stream.tensor]
    assert (whole.start, whole.end) == (0, rest.start + rest.life.steps - 1)
    (grad,) = p.stream.boundary
    b = rest.life.of_tensor[alias_root(grad, rest.feeds)]  # (a reshape of the gradient it writes)
    assert b.start < rest.start + rest.life.steps <= back.start + back.life.steps - 1 <= b.end
    for t in p.stream.partials:
        assert p.accumulators[t].start == back.start and p.accumulators[t].end == len(p.live) - 1
    planner.arena.check_no_overlap(p.buffers)
    assert p.arena_bytes >= p.arena_lower_bound_bytes >= max(ph.life.lower_bound for ph in p.phases)


def test_fine_tuning_mentee_under_12mb_streams_its_frozen_features():
    """Issue 15's case: Mentee at batch 128 training its last layer under a budget. The frozen convolutions run
    forward only, so where micro-batches alone no longer fit, streaming them is the cheapest plan; the search picks
    it at 9 MB (on 2 threads, the issue's box: the lanes' copies, one per thread, cost memory). (Issue 15's 12 MB
    now fits convolutions in half-batch chunks with micro-batches at +1.4%, since Winograd F(4x4)'s smaller
    workspaces; 10-11 MB micro-batches alone, at +7.6%.)"""
    import argparse

    from tfplus import threads
    from tfplus.plan_cli import _TrainStep
    args = argparse.Namespace(model="mentee", optimizer="momentum", data_format="NCHW", fine_tune_last=1,
                              trainable=None, device="cpu")
    step = _TrainStep(args)
    with threads.using(2):
        p = step.plan(128, "9MB")
    assert p.fits and p.stream is not None and not p.stream.backward, p.summary()
    assert p.choice.startswith("stream")
    assert "stream" not in [t["name"] for t in step.plan(128, None).transformations]


def _two_path_net(norm: bool = False, dropout: bool = False):
    """x -> dense -> [batch norm | dropout] -> relu -> h -> dense -> loss, plus (without norm or dropout) a
    path from x straight to the loss that bypasses h."""
    import tfplus.train  # noqa: F401
    x = tf.placeholder(tf.float32, [None, 6], name="x")
    w = tf.Variable(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4), name="w")
    v = tf.Variable(np.linspace(1, -1, 4, dtype=np.float32).reshape(4, 1), name="v")
    h = tf.matmul(x, w)
    if norm:
        from tfplus import layers_ext
        h = layers_ext.batch_normalization(h, training=True)
    if dropout:
        h = tf.nn.dropout(h, 0.5)
    h = tf.nn.relu(h, name="h")
    out = tf.matmul(h, v)
    if not (norm or dropout):
        out = out + tf.reduce_sum(x, axis=1, keepdims=True)
    loss = tf.reduce_mean(out * out)
    return x, loss, tf.train.GradientDescentOptimizer(0.1).minimize(loss)


@pytest.mark.parametrize("kind, match", [("bypass", "bypasses the cut"), ("norm", "statistics of the whole batch"),
                                         ("dropout", "random numbers")])
def test_cuts_that_cannot_stream_exactly_are_refused(kind, match):
    x, loss, train = _two_path_net(norm=kind == "norm", dropout=kind == "dropout")
    step = _Step([train, loss], {x: (8, 6)}, "cpu", None, None)
    with pytest.raises(PlanError, match=match):
        step.cut("h:0")
    assert "h:0" not in step.cuts()
    with pytest.raises(PlanError, match="h:0"):
        planner.plan([train, loss], {x: (8, 6)}, force=(1, 1, False, 1, 0, ("h:0", 2)))


@pytest.mark.parametrize("kernel_device", ["cpu", "opencl"])
def test_cost_model_prices_the_prefix_per_micro_batch_and_the_rest_once(kernel_device):
    """Fine-tuning: streaming the frozen prefix costs k prefix runs and the rest once, less than k whole steps;
    a prefix that trains pays its forward again and its backward per micro-batch (2k + 2 executor runs)."""
    device = DeviceFacts(kernel_device, kernel_device)
    for last, runs in ((1, 4 + 1), (None, 2 * 4 + 2)):
        tf.reset_default_graph()
        tg = _cnn(last)
        step = _Step([tg.train_op, tg.loss], {t: v.shape for t, v in cnn_feeds(tg, batch=8).items()}, device,
                     tg.graph, None)
        s = ("MaxPool:0", 4)
        f, plain = step.features(1, 1, s=s), step.features(1, 1)
        assert f["runs"] == runs and f["flops"] >= plain["flops"]
        prefix = step._stream_runs(*s)[0]
        calls = sum(op.type != "VariableV2" for op in prefix.order)

        def every(g):  # kernel calls and the calls that launch nothing (cost.py host_calls)
            return g["calls"] + g["host_calls"] + g["conv_calls"]
        assert every(f) >= every(plain) + 3 * calls + 4
        if last:
            assert 0 < step.overhead(1, 1, s=s) < step.overhead(4, 1)


# -- lanes: the prefix's micro-batches at once on a cpu of several threads ------------------------------------
@pytest.mark.parametrize("case", [CASES["finetune_pool"], CASES["full_pool"]], ids=["finetune", "full"])
def test_streamed_prefix_in_lanes_trains_as_the_plain_step(case):
    """On 2 threads the prefix's micro-batches run in 2 lanes at once (after a first step in turns), each on
    one thread and its own copy of the prefix run's buffers: the plain step's losses and weights, the same
    bits run after run whichever lane takes which micro-batch, and no lane's copy overlaps a buffer alive
    beside it."""
    last, cut, k, _ = case
    tg = _cnn(last)
    feeds = cnn_feeds(tg, batch=8)
    with threads.default(2):
        want = train_steps(tg, feeds, steps=3)
        runs = [train_steps(tg, feeds, force=(1, 1, False, 1, 0, (cut, k, 2, 0)), steps=3) for _ in range(2)]
    losses, weights, p = runs[0]
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(weights[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
        assert np.array_equal(runs[1][1][name], weights[name]), name
    assert runs[1][0] == losses
    assert p.stream_lanes == 2 and p.lane_block.size == 2 * p.lane_bytes > 0
    lane = p.phases[0].life.buffers
    assert all(p.lane_block.offset <= b.offset and b.offset + b.size <= p.lane_block.offset + p.lane_bytes
               for b in lane)
    copies = [dataclasses.replace(b, offset=b.offset + p.lane_bytes, name=b.name + "@1") for b in lane]
    planner.arena.check_no_overlap(p.buffers + copies)
    assert p.arena_bytes >= p.lane_block.offset + p.lane_block.size
    assert "2 lanes at once" in next(t["detail"] for t in p.transformations if t["name"] == "stream")


def test_streamed_prefix_in_lanes_planned_bytes_are_measured_bytes():
    tg = _cnn(1)
    with threads.default(2):
        assert_planned_bytes_are_measured(tg, cnn_feeds(tg, batch=32),
                                          force=(1, 1, False, 1, 0, ("MaxPool:0", 4, 2, 1)))


def test_lanes_divide_the_scratch_where_the_prefix_peaks():
    """Balancing rounds give the convolution the prefix run needs most bytes for the next scratch divisor,
    one op a round, and lower a lane's copy of the run; the cost model counts their extra pieces. A lane's
    kernels ask for what their declarations say (the executor checks every request), and train as the plain
    step."""
    tg = _cnn(1)
    feeds = cnn_feeds(tg, batch=128)  # micro-batches of 64 images: enough for a divisor to shrink scratch
    shapes = {t: v.shape for t, v in feeds.items()}
    with threads.default(2):
        step = _Step([tg.train_op, tg.loss], shapes, DeviceFacts("cpu", "cpu", threads=2), tg.graph, None)
        rounds = step.rounds("MaxPool:0", 2, 1)
        assert rounds[:2] == [0, 1]
        run = step._stream_runs("MaxPool:0", 2)[0]
        one = step._balanced(run, 1, 1)
        (op, div), = one.items()
        needs = step._needs(run, 1, lane=True)
        assert op is max(needs, key=needs.get) and op.type == "Conv2D"
        frozen = op.attrs.get(SCRATCH_ATTR, 1)  # finetune.shrink_forward_scratch's, which it divides further
        assert div == min(d for d in SCRATCH_DIVISORS if d > frozen)
        plans = [step.build(1, 1, False, 1, 0, ("MaxPool:0", 2, 2, b)) for b in rounds]
        assert plans[1].phases[0].life.scratch_ops == {op: div}
        assert plans[1].lane_bytes < plans[0].lane_bytes
        pieces = [step.features(1, 1, s=("MaxPool:0", 2, 2, b))["pieces"] for b in (0, 1)]
        assert pieces[1] > pieces[0]
        losses, _, p = train_steps(tg, feeds, force=(1, 1, False, 1, 0, ("MaxPool:0", 2, 2, 1)), steps=2)
        want = train_steps(tg, feeds, steps=2)[0]
    np.testing.assert_allclose(losses, want, rtol=1e-5)


def test_lanes_need_threads_and_a_prefix_without_random_numbers():
    tg = _cnn(1)
    shapes = {t: v.shape for t, v in cnn_feeds(tg, batch=8).items()}
    step = _Step([tg.train_op, tg.loss], shapes, DeviceFacts("cpu", "cpu", threads=1), tg.graph, None)
    assert step.lanes("MaxPool:0", 4) == 1
    assert all(kc.stream is None or kc.stream.lanes == 1 for kc in step.candidates(planner.TRANSFORMATIONS))
    step = _Step([tg.train_op, tg.loss], shapes, DeviceFacts("cpu", "cpu", threads=4), tg.graph, None)
    assert step.lanes("MaxPool:0", 4) == 4 and step.lanes("MaxPool:0", 2) == 2
    with pytest.raises(PlanError, match="at most 2"):
        step.build(1, 1, False, 1, 0, ("MaxPool:0", 2, 4, 0))
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 6], name="x")
    w = tf.Variable(np.ones((6, 4), np.float32), name="w", trainable=False)
    v = tf.Variable(np.ones((4, 1), np.float32), name="v")
    h = tf.nn.relu(tf.matmul(tf.nn.dropout(x, 0.5), w), name="h")
    loss = tf.reduce_mean(tf.matmul(h, v))
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=[v])
    step = _Step([train, loss], {x: (8, 6)}, DeviceFacts("cpu", "cpu", threads=2), None, None)
    step.cut("h:0")  # streams: the prefix has no backward pass
    assert step.lanes("h:0", 4) == 1, "lanes would draw the dropout's numbers in a varying order"
