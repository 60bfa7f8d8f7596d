"""Planned execution on the opencl device (PoCL in CI): every transformation gives the cpu's results, and the
runtime's own ledger of device memory finds what the plan predicts, with no device allocation during a step."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import cnn_feeds, small_cnn, train_opencl

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import measure_device_step
from tfplus.runtime import opencl
from tfplus.runtime.facts import device_facts

pytestmark = needs_opencl

FORCED = {"arena": (1, 1), "compact": (1, 1, True), "micro2": (2, 1), "micro4": (4, 1),
          "compact_micro2": (2, 1, True), "micro2_chunk2": (2, 2)}


@pytest.mark.parametrize("force", FORCED.values(), ids=FORCED.keys())
def test_planned_opencl_step_equals_the_plain_step(force):
    """Training by a forced plan on opencl gives the plain executor's losses and weights (the random
    initializers are the device's own, so the reference is the same device without a plan)."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    want = train_opencl(tg, feeds)
    got = train_opencl(tg, feeds, force)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=1e-5, atol=1e-6, err_msg=name)
    p = got[2]
    if force[1] > 1:
        assert p.chunks, "convolutions run on row views of their batch"
    if len(force) > 2:
        assert p.phases[0].sites, "compact state applies on opencl"


@pytest.mark.parametrize("compute_units", [None, 64], ids=["device", "64cu"])
@pytest.mark.parametrize("force", [(1, 1), (4, 1, True)], ids=["arena", "compact_micro4"])
def test_opencl_ledger_measures_the_planned_peak(force, compute_units):
    """The most device memory the tensors hold during a step is the plan's peak, to the byte: variables, slots
    and the fed batch in the pool's size classes, the arena (outputs, the kernels' split-reduction partials)
    exactly; the device creates no buffer during the step."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=16)
    *_, p, m = train_opencl(tg, feeds, force, compute_units=compute_units)
    assert m["allocations"] == 0, "a planned step creates no device buffer"
    assert m["peak"] == p.peak_bytes, (m, p.peak_bytes)
    assert m["held"] + p.feed_bytes == m["peak"], "held at the start: variables, slots, arena"
    if compute_units:
        assert any(op.type in ("Conv2DBackpropFilter", "MatMul") for ph in p.phases for op in ph.life.workspaces)


def test_opencl_session_fits_a_budget_by_micro_batching():
    """A budget the plain plan exceeds: the opencl session plans micro-batches (of the whole step, or of a streamed
    prefix) and its steps stay within it."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=32)
    fetches = [tg.train_op, tg.loss]
    shapes = {t: v.shape for t, v in feeds.items()}
    free = planner.plan(fetches, shapes, device_facts("opencl"), graph=tg.graph)
    budget = int(free.peak_bytes * 0.5)  # (at 0.7 recomputation fits without micro-batches: test_recompute.py)
    fitted = planner.plan(fetches, shapes, device_facts("opencl"), budget, graph=tg.graph)
    assert fitted.fits and fitted.peak_bytes <= budget < free.peak_bytes
    # The opencl cost model counts kernel launches (~18 us each, replayed) and GEMM FLOPs: a micro-batch repeats the
    # step's launches (a streamed prefix: the prefix's) on fewer images, most of this small step's time.
    k = fitted.microbatches * fitted.stream_microbatches
    assert k > 1 and fitted.predicted_overhead > 0.4 * (k - 1)
    gc.collect()
    with tf.Session(graph=tg.graph, device="opencl", memory_budget=budget) as sess:
        sess.run(tg.init_op)
        loss = sess.run(fetches, feeds)[1]
        m = measure_device_step(sess, fetches, feeds)
    assert np.isfinite(loss) and m["allocations"] == 0
    assert m["peak"] <= budget * 1.05, (m, budget)


def test_a_plan_for_a_device_that_is_not_here_counts_its_kernels_scratch(monkeypatch):
    """Planning for 'opencl' without the device uses the documented defaults, and the opencl kernels'
    scratch (split reductions) is in the plan whether or not a runtime was ever made."""
    import importlib

    plan_mod = importlib.import_module("tfplus.planner.plan")  # the module (tfplus.planner.plan is a function)
    tg = small_cnn()
    shapes = {t: v.shape for t, v in cnn_feeds(tg, batch=64).items()}
    with pytest.raises(ValueError, match="OpenCL device 99 does not exist"):
        device_facts("opencl:99")
    monkeypatch.setattr(opencl, "available", lambda: False)
    p = planner.plan([tg.train_op, tg.loss], shapes, device_facts("opencl"), graph=tg.graph)
    assert p.alignment == plan_mod.OPENCL_DEFAULT_ALIGNMENT and "assumed" in p.device
    assert any(op.type == "Conv2DBackpropFilter" for op in p.phases[0].life.workspaces)

    class Phone:  # a runtime object: its own alignment and compute units
        kernel_device, name, arena_alignment, info = "opencl", "phone", 256, {"compute_units": 2}
    q = planner.plan([tg.train_op, tg.loss], shapes, device_facts(Phone()), graph=tg.graph)

    def scratch(plan):
        return sum(b.nbytes for ws in plan.phases[0].life.workspaces.values() for b in ws)
    assert q.alignment == 256 and 0 <= scratch(q) < scratch(p), "fewer compute units: fewer partial sums"


def test_planned_opencl_runs_an_empty_arena_and_top_k_scratch():
    """A plan with nothing in its arena (a lone Identity) and TopKV2's declared uint8 scratch both run."""
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        ph = tf.placeholder(tf.float32, x.shape)
        same, (values, _) = tf.identity(ph), tf.nn.top_k(ph, 2)
    with tf.Session(graph=g, device="opencl", memory_budget="1GB") as sess:
        np.testing.assert_array_equal(sess.run(same, {ph: x}), x)
        np.testing.assert_array_equal(sess.run(values, {ph: x}), -np.sort(-x)[:, :2])


def test_pooled_compact_state_launches_less_and_trains_as_the_plain_step(monkeypatch):
    """Under a budget the opencl session plans its rewritten step (fused ReLU and bias gradients), where compact
    state is "pooled" (planner.compact): each MaxPoolGrad launches nothing and the ReLU gradient routes the pool
    gradient itself. The losses and weights are the plain step's; the pooled kernel ran for every pool."""
    from tfplus.engine.rewrite import optimize
    from tfplus.kernels.opencl import fused
    from tfplus.planner import compact
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    fetches = [tg.train_op, tg.loss]
    r = optimize(tg.graph, fetches, list(feeds))
    shapes = {r.element[t]: v.shape for t, v in feeds.items()}
    step = [r.element[f] for f in fetches]
    free = planner.plan(step, shapes, "opencl", graph=r.graph)
    pooled = planner.plan(step, shapes, "opencl", graph=r.graph, force=(1, 1, True))
    sites = pooled.phases[0].sites
    assert sites and all(compact.pooled(s, "opencl") for s in sites)
    assert pooled.predicted_overhead < 0  # a launch less per pool: the cost model's cheapest plan
    budget = (pooled.peak_bytes + free.peak_bytes) // 2
    assert pooled.peak_bytes < budget < free.peak_bytes
    calls = []
    sums = fused.channel_sums
    monkeypatch.setattr(fused, "channel_sums", lambda *a, **kw: calls.append(kw.get("pooled")) or sums(*a, **kw))
    runs = {}
    for b in (None, budget):
        with tf.Session(graph=tg.graph, device="opencl", memory_budget=b) as sess:
            sess.run(tg.init_op)
            losses = [sess.run(fetches, feeds)[1] for _ in range(3)]
            runs[b] = losses, {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
            chosen = [[t["name"] for t in p.plan.transformations if t["name"] not in ("inplace", "schedule")]
                      for p in sess.steps if p.plan is not None]
    assert ["compact"] in chosen, chosen  # the training step's plan (the initializer's needs none)
    assert sum(c is not None for c in calls) >= 3 * len(sites)  # each pool, in each of the three steps
    np.testing.assert_allclose(runs[budget][0], runs[None][0], rtol=1e-5)
    for name, w in runs[None][1].items():
        np.testing.assert_allclose(runs[budget][1][name], w, rtol=1e-5, atol=1e-6, err_msg=name)
