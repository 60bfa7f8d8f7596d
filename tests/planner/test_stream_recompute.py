"""A streamed prefix on the recomputing copy of a step (planner.plan._Step.recomputing): the first layers in
micro-batches, the rest at full batch with its largest activations recomputed. Training by it gives the plain
step's losses and weights on every device, its planned bytes are the measured ones (cpu: NumPy data; opencl: the
device ledger), and planner.recompute's copies that read the prefix's rows run in the prefix's backward."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import (
    assert_close_training,
    assert_planned_bytes_are_measured,
    cnn_feeds,
    recompute_level,
    small_cnn,
    train_planned,
    train_session_step,
)

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install, measure_device_step
from tfplus.planner.plan import _Step
from tfplus.runtime.facts import device_facts


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield



def _train(tg, feeds, device, force=None, steps=2):
    losses, weights, p, bound = train_planned(tg, feeds, device, force, steps)
    if bound is not None:  # the session ran the step by the plan, to its last phase (not a plan of its own)
        assert bound.phase == len(p.phases) - 1
    return losses, weights, p


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
@pytest.mark.parametrize("z", [False, True], ids=["plain", "compact"])
def test_streamed_prefix_with_recomputation_trains_as_the_plain_step(device, z):
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    want = _train(tg, feeds, device)
    r = recompute_level(tg, feeds)
    losses, weights, p = _train(tg, feeds, device, force=(1, 1, z, 1, r, ("MaxPool:0", 2)))
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    assert not np.allclose(losses[0], losses[1]), "the step trains"
    for name, w in want[1].items():
        np.testing.assert_allclose(weights[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
    assert [ph.name for ph in p.phases] == ["prefix", "rest", "prefix backward", "update"]
    assert p.recomputed and p.tensor_map, "the plan runs the recomputing copy"
    assert [t["name"] for t in p.transformations if t["name"] in ("recompute", "stream")] == ["recompute", "stream"]
    clones = [(i, op) for i, ph in enumerate(p.phases) for op in ph.order if "/recompute_" in op.name]
    assert clones, "recomputing ops run"


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_the_sessions_rewritten_step_streams_with_recomputation(device):
    """The step a session runs (tfplus.engine.rewrite's fused convolutions and ReLU gradients), streamed on its
    recomputing copy, trains as the plain step."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    want = _train(tg, feeds, device)

    def plan_for(step, facts):
        r = _Step(step.fetches, step.feed_shapes, facts, step.graph, None).levels()[0]
        return planner.plan(step.fetches, step.feed_shapes, facts, graph=step.graph,
                            force=(1, 1, True, 1, r, ("MaxPool:0", 2)))
    *got, p = train_session_step(tg, feeds, device, plan_for)
    assert p.recomputed and p.stream is not None
    assert_close_training(got, want)


def test_copies_reading_the_prefix_rows_run_in_the_prefix_backward():
    """A copy that recomputes a prefix activation (conv1's ReLU output, read by conv2's filter gradient) reads
    the micro-batch's rows of the batch: it runs in the prefix backward, on each micro-batch, and not in the rest
    (where it would read rows computed per micro-batch)."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    r = recompute_level(tg, feeds)
    p = planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, "cpu", graph=tg.graph,
                     force=(1, 1, False, 1, r, ("MaxPool:0", 2)))
    assert any(t.startswith("conv1/") for t in p.recomputed), p.recomputed
    where = {op.name: ph.name for ph in p.phases for op in ph.order if "/recompute_" in op.name}
    assert where and all(ph == "prefix backward" for name, ph in where.items() if name.startswith("conv1/")), where
    assert all(op.name.startswith("conv1/") is False for op in p.phases[1].order if "/recompute_" in op.name)


def test_streamed_prefix_with_recomputation_planned_bytes_are_measured_bytes():
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=32)
    assert_planned_bytes_are_measured(tg, feeds, force=(1, 1, True, 1, recompute_level(tg, feeds), ("MaxPool:0", 4)))


@needs_opencl
def test_streamed_prefix_with_recomputation_opencl_ledger_measures_the_planned_peak():
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=16)
    fetches = [tg.train_op, tg.loss]
    r = recompute_level(tg, feeds, "opencl")
    gc.collect()
    with tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                         graph=tg.graph, force=(1, 1, True, 1, r, ("MaxPool:0", 4)))
        install(sess, fetches, p)
        sess.run(fetches, feeds)
        m = measure_device_step(sess, fetches, feeds)
    assert p.recomputed
    assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)


def test_the_search_streams_with_recomputation_where_that_is_cheapest():
    """Half the plain step's peak on opencl: the first block streamed in micro-batches on the recomputing copy, the
    rest at full batch, is predicted cheaper than any plan without a streamed prefix or without recomputation
    (2026-11-29: +60.2% against +79.6%, recomputation and 2 micro-batches of the whole step)."""
    from tfplus.planner import TRANSFORMATIONS
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=32)
    fetches, shapes, facts = [tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("opencl")
    budget = planner.plan(fetches, shapes, facts, graph=tg.graph).peak_bytes // 2
    p = planner.plan(fetches, shapes, facts, budget, graph=tg.graph)
    assert p.fits and p.stream is not None and p.recomputed, p.transformations
    for without in ("stream", "recompute"):
        other = planner.plan(fetches, shapes, facts, budget, graph=tg.graph,
                             transformations=[t for t in TRANSFORMATIONS if t != without])
        assert other.fits and p.predicted_overhead < other.predicted_overhead, (without, other.transformations)
