"""Gradients added straight into their momentum slots under micro-batching (planner.batch.slot_folds): a momentum
update without Nesterov is linear in its gradient, so the micro-batches scale the slot by the momentum and add
their gradients into it, and the update run does var -= lr * accum; the gradients need no accumulators. Where the
update is not linear in the gradient (Nesterov, Adam) or the gradient is read elsewhere (clipped, fetched), the
accumulators stay. Each step trains as the unsplit step, on the cpu and PoCL, in the bytes planned."""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import assert_measured_is_planned, random_feeds

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install, measure_device_step, measure_step
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.planner import batch
from tfplus.runtime.facts import device_facts

DEVICES = ["cpu", pytest.param("opencl", marks=needs_opencl)]
BATCH, WIDTH = 32, 16


def _mobilenet(nesterov: bool = False):
    """MobileNet's first blocks, narrow, at 8x8, batch 16 (batch norms: statistics passes), momentum 0.9."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8), optimizer="momentum",
                        nesterov=nesterov, weight_decay=0.0, model_kwargs={"conv_widths": (8, 16, 16)})
    return tg.graph, [tg.train_op, tg.loss], random_feeds(tg, 16, 8), tg.init_op


def _dense(optimizer: str, clip: bool = False, fetch_grad: bool = False):
    """Two dense layers, no batch statistics: `optimizer` ('momentum', 'nesterov', 'adam') on the gradients,
    clipped by their global norm if `clip`; the first layer's gradient's sum of squares fetched too if
    `fetch_grad`. Also returns that gradient."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, WIDTH], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        w1 = tf.Variable((rng.standard_normal((WIDTH, WIDTH)) / 4).astype(np.float32), name="w1")
        w2 = tf.Variable((rng.standard_normal((WIDTH, 3)) / 4).astype(np.float32), name="w2")
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt = {"momentum": tf.train.MomentumOptimizer(0.1, 0.9),
               "nesterov": tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
               "adam": tf.train.AdamOptimizer(0.01)}[optimizer]
        grads = tf.gradients(loss, [w1, w2])
        applied = tf.clip_by_global_norm(grads, 0.5)[0] if clip else grads
        train_op = opt.apply_gradients(list(zip(applied, [w1, w2])))
        fetched = [tf.reduce_sum(tf.square(grads[0]))] if fetch_grad else []
        init = tf.global_variables_initializer()
    data = np.random.default_rng(1)
    feeds = {x: data.standard_normal((BATCH, WIDTH)).astype(np.float32),
             y: data.integers(0, 3, BATCH).astype(np.int32)}
    return g, [train_op, loss] + fetched, feeds, init, grads[0]


def _plan(graph, fetches, feeds, facts, fold: bool = True):
    """The plan of 4 micro-batches; without `fold`, every update in the update run (no early updates either)."""
    batch.FOLD_SLOTS = batch.EARLY_UPDATES = fold
    try:
        return planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, facts, graph=graph, force=(4, 1))
    finally:
        batch.FOLD_SLOTS = batch.EARLY_UPDATES = True


def _train(net, device: str, split: bool, steps: int = 3):
    """Losses (and other fetches) of `steps` steps and the variables after them, unsplit or in the plan of 4
    micro-batches (the graph as built: one ApplyMomentum a variable); the plan."""
    graph, fetches, feeds, init = net[:4]
    gc.collect()
    with tf.Session(graph=graph, device=device, memory_budget="1GB") as sess:
        sess.run(init)
        p = _plan(graph, fetches, feeds, device_facts(sess.runtime)) if split else None
        if split:
            install(sess, fetches, p)
        values = [sess.run(fetches, feeds)[1:] for _ in range(steps)]
        variables = {v.op.name: sess.run(v) for v in graph.get_collection("variables")}
    return values, variables, p


def _assert_same(got, want) -> None:
    for a, b in zip(got[0], want[0]):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_momentum_gradients_have_no_accumulators():
    """Every weight gradient of the MobileNet step goes into its slot: none has an accumulator, the plan holds
    fewer bytes, and the folded updates are the momentum updates."""
    graph, fetches, feeds, _ = _mobilenet()
    facts = device_facts("cpu")
    kept, folded = _plan(graph, fetches, feeds, facts, fold=False), _plan(graph, fetches, feeds, facts)
    assert not kept.slot_folds and folded.slot_folds
    names = {g.name for g in folded.slot_folds}  # (each plan has a statistics copy of the graph of its own)
    kept_acc = {t.name: b.size for t, b in kept.accumulators.items()}
    folded_acc = {t.name: b.size for t, b in folded.accumulators.items()}
    assert names <= kept_acc.keys() and not names & folded_acc.keys()
    assert {n for n in kept_acc if n not in names} == folded_acc.keys()
    assert {f.update.type for f in folded.slot_folds.values()} == {"ApplyMomentum"}
    assert {f.momentum for f in folded.slot_folds.values()} == {float(np.float32(0.9))}
    assert folded.peak_bytes < kept.peak_bytes


@pytest.mark.parametrize("device", DEVICES)
def test_folded_momentum_trains_as_the_unsplit_step(device):
    """MobileNet's step with statistics passes, its gradients added into the slots: three steps' losses and
    variables (the slots included) as the unsplit step's."""
    net = _mobilenet()
    got = _train(net, device, True)
    assert got[2].slot_folds
    _assert_same(got, _train(net, device, False))


@pytest.mark.parametrize("device", DEVICES)
def test_folded_dense_momentum_trains_as_the_unsplit_step(device):
    """A step without batch statistics (one micro-batch run, then the update run)."""
    net = _dense("momentum")
    got = _train(net, device, True)
    assert len(got[2].slot_folds) == 2 and not any(g in got[2].accumulators for g in got[2].slot_folds)
    _assert_same(got, _train(net, device, False))


@pytest.mark.parametrize("optimizer, clip, fetch_grad", [("nesterov", False, False), ("adam", False, False),
                                                         ("momentum", True, False), ("momentum", False, True)],
                         ids=["nesterov", "adam", "clipped", "fetched"])
def test_updates_not_linear_in_a_gradient_keep_its_accumulator(optimizer, clip, fetch_grad):
    """Nesterov reads the gradient beside the slot, Adam squares it, a clipped gradient is scaled by the whole
    batch's norm and a fetched one's sum of squares is the caller's: their gradients keep accumulators (that
    gradient's neighbour still folds) and the step trains as the unsplit one."""
    net = _dense(optimizer, clip, fetch_grad)
    got = _train(net, "cpu", True)
    p = got[2]
    if fetch_grad:
        assert net[4] not in p.slot_folds and net[4] in p.accumulators and len(p.slot_folds) == 1
    else:
        assert not p.slot_folds
    _assert_same(got, _train(net, "cpu", False))


@pytest.mark.parametrize("device", DEVICES)
def test_a_budgeted_session_folds_its_fused_updates_in_the_planned_bytes(device):
    """A session under a budget plans its rewritten step (the updates one _FusedApply): forced into 4
    micro-batches, its gradients go into the slots, it trains as the unbudgeted step and holds the bytes planned
    (cpu: NumPy data; opencl: the device ledger)."""
    graph, fetches, feeds, init = _mobilenet()
    want = _train((graph, fetches, feeds, init), device, False)  # the measured run is the third
    gc.collect()
    with tf.Session(graph=graph, device=device, memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph,
                         force=(4, 1))
        assert p.slot_folds and {f.update.type for f in p.slot_folds.values()} == {"_FusedApply"}
        if device == "cpu":
            tracemalloc.start(16)  # before the session allocates its variables and arena (measure_step)
        try:
            step.use_plan(p)
            sess.run(init)
            values = [sess.run(fetches, feeds)[1:] for _ in range(2)]
            m = (measure_step if device == "cpu" else measure_device_step)(sess, fetches, feeds)
            variables = {v.op.name: sess.run(v) for v in graph.get_collection("variables")}
        finally:
            tracemalloc.stop()
    _assert_same((values, variables), want)
    if device == "cpu":
        assert_measured_is_planned(m, p)
    else:
        assert m["peak"] == p.peak_bytes, (m, p.peak_bytes)
