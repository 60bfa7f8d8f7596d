"""A streamed prefix that keeps its pools' argmax bytes (planner.compact.keeping, planner.stream's Cut.saved): the
prefix's backward pass reads them from its forward pass instead of recomputing the pool's input. Training by it
gives the plain step's losses and weights on every device, its planned bytes are the measured ones (cpu: NumPy
data; opencl: the device ledger), and the prefix's backward reruns only what the other gradients read."""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import (
    assert_close_training,
    assert_measured_is_planned,
    assert_planned_bytes_are_measured,
    cnn_feeds,
    recompute_level,
    small_cnn,
    train_planned,
    train_session_step,
)

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install, measure_device_step, measure_step
from tfplus.planner.plan import Prefix, _Step
from tfplus.runtime.facts import device_facts

KEEP = ("MaxPool:0", 2, 1, 0, True)  # the first block in 2 micro-batches, keeping its argmax


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield



@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
@pytest.mark.parametrize("recomputing", [False, True], ids=["step", "recomputing"])
def test_a_prefix_keeping_its_argmax_trains_as_the_plain_step(device, recomputing):
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    want = train_planned(tg, feeds, device)[:2]
    r = recompute_level(tg, feeds) if recomputing else 0
    losses, weights, p, bound = train_planned(tg, feeds, device, (1, 1, False, 1, r, KEEP))
    assert bound.phase == len(p.phases) - 1, "the session ran the step by the plan, to its last phase"
    assert_close_training((losses, weights), want)
    assert not np.allclose(losses[0], losses[1]), "the step trains"
    assert [ph.name for ph in p.phases] == ["prefix", "rest", "prefix backward", "update"]
    assert [t.name for t in p.stream.saved] == ["MaxPool:1"], "the argmax bytes are kept"
    assert "keep" in [t["name"] for t in p.transformations]
    # the prefix backward reruns conv1 (conv2's filter gradient reads its output), not conv2 nor the pool
    back = {op.name for op in p.phases[2].order}
    assert "conv1/Conv2D" in back or any(n.startswith("conv1/") and "Conv2D" in n for n in back), back
    assert not any(op.type in ("MaxPool", "_MaxPoolArgmax") or op.name.startswith("conv2/Conv2D")
                   for op in p.phases[2].order), sorted(back)


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_the_sessions_rewritten_step_streams_keeping_its_argmax(device):
    """The step a session runs (fused convolutions and ReLU gradients with their bias sums), keeping the bytes."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    want = train_planned(tg, feeds, device)[:2]

    def plan_for(step, facts):
        return planner.plan(step.fetches, step.feed_shapes, facts, graph=step.graph, force=(1, 1, False, 1, 0, KEEP))
    *got, p = train_session_step(tg, feeds, device, plan_for)
    assert p.stream is not None and p.stream.saved
    back = [op.type for op in p.phases[2].order]
    assert "_ReluMaskBits" in back and "_ReluGradBits" in back, "conv1's mask as bits, in the prefix backward"
    assert_close_training(got, want)


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_the_sessions_step_keeping_argmax_and_bits_measures_the_planned_peak(device):
    """The session's rewritten step with the argmax pair and conv1's mask bits: NumPy data (cpu) or the device
    ledger (opencl) at the plan's peak."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=16)
    fetches = [tg.train_op, tg.loss]
    gc.collect()
    if device == "cpu":
        tracemalloc.start(16)
    try:
        with tf.Session(graph=tg.graph, device=device, memory_budget="1GB") as sess:
            sess.run(tg.init_op)
            step = sess.step(fetches, feeds)
            p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph,
                             force=(1, 1, False, 1, 0, ("MaxPool:0", 4, 1, 0, True)))
            step.use_plan(p)
            sess.run(fetches, feeds)
            m = measure_step(sess, fetches, feeds) if device == "cpu" else measure_device_step(sess, fetches, feeds)
    finally:
        tracemalloc.stop()
    assert any(op.type == "_ReluGradBits" for ph in p.phases for op in ph.order)
    if device == "cpu":
        assert_measured_is_planned(m, p)
    else:
        assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)


def test_a_prefix_keeping_its_argmax_planned_bytes_are_measured_bytes():
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=32)
    assert_planned_bytes_are_measured(tg, feeds, force=(1, 1, False, 1, 0, ("MaxPool:0", 4, 1, 0, True)))


@needs_opencl
@pytest.mark.parametrize("recomputing", [False, True], ids=["step", "recomputing"])
def test_a_prefix_keeping_its_argmax_opencl_ledger_measures_the_planned_peak(recomputing):
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=16)
    fetches = [tg.train_op, tg.loss]
    r = recompute_level(tg, feeds, "opencl") if recomputing else 0
    gc.collect()
    with tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                         graph=tg.graph, force=(1, 1, False, 1, r, ("MaxPool:0", 4, 1, 0, True)))
        install(sess, fetches, p)
        sess.run(fetches, feeds)
        m = measure_device_step(sess, fetches, feeds)
    assert p.stream.saved
    assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)


def test_keeping_the_argmax_is_a_candidate_priced_below_recomputing_the_pool_input():
    """Against the same prefix streamed without keeping: fewer FLOPs (no conv2 rerun), so a lower prediction, and
    the search offers it."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=32)
    step = _Step([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("opencl"), tg.graph,
                 None)
    kept = Prefix("MaxPool:0", 2, keep=True)
    assert step.overhead(1, 1, False, 1, 0, kept) < step.overhead(1, 1, True, 1, 0, Prefix("MaxPool:0", 2))
    assert any(kc.stream is not None and kc.stream.keep for kc in step.candidates(planner.TRANSFORMATIONS))


def test_the_search_keeps_the_argmax_where_that_is_cheapest():
    """At 0.6 of the small CNN's plain peak on opencl the search streams the first block keeping its argmax, predicted
    cheaper than any plan without compact saved state (2026-11-29: +45.1%)."""
    from tfplus.planner import TRANSFORMATIONS
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=32)
    fetches, shapes, facts = [tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("opencl")
    budget = int(planner.plan(fetches, shapes, facts, graph=tg.graph).peak_bytes * 0.6)
    p = planner.plan(fetches, shapes, facts, budget, graph=tg.graph)
    assert p.fits and p.stream is not None and p.stream.saved, p.transformations
    other = planner.plan(fetches, shapes, facts, budget, graph=tg.graph,
                         transformations=[t for t in TRANSFORMATIONS if t != "compact"])
    assert other.fits and p.predicted_overhead < other.predicted_overhead, other.transformations
