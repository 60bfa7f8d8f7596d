"""The rows statistics passes keep under a budget, chosen with each run's room for fewer micro-batches in mind
(plan._Step._choose_kept, KEPT_RESERVES): rows kept through a run leave it less room and so more micro-batches;
each reserve of a run's own bytes gives a choice of rows and of counts, and the cheapest predicted is kept. Every
choice trains as the unsplit step does."""
from __future__ import annotations

import gc
import importlib

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import random_feeds, train_planned

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.runtime.facts import device_facts

DEVICES = ["cpu", pytest.param("opencl", marks=needs_opencl)]
BUDGET = 480_000  # the small net's rows and runs fill it: reserves 1 and 2 keep other rows, in other counts
plan_module = importlib.import_module("tfplus.planner.plan")


def _net():
    """MobileNet's first blocks, narrow, at 8x8, batch 16."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (8, 16, 16)})
    return tg, random_feeds(tg, 16, 8)


def _plan(tg, feeds, reserves, monkeypatch, device="cpu", facts=None):
    monkeypatch.setattr(plan_module, "KEPT_RESERVES", reserves)
    return planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()},
                        facts or device_facts(device), BUDGET, graph=tg.graph, force=(4, 1))


def test_the_rows_of_the_cheapest_reserve_are_kept(monkeypatch):
    """Each reserve alone keeps other rows in other counts at other predicted costs; all of them tried, the plan is
    no dearer than the cheapest of those, and cheaper than the rows that fill the room beside each run's own bytes
    (reserve 1). With several reserves the search also prices each one's rows shed in the segment order
    (crossbatch.SEGMENTS, which a reserve alone does not try), so it may find rows cheaper than any reserve alone."""
    tg, feeds = _net()
    alone = {r: _plan(tg, feeds, (r,), monkeypatch) for r in (1, 2, 4)}
    chosen = _plan(tg, feeds, (1, 2, 4), monkeypatch)
    assert len({p.predicted_overhead for p in alone.values()}) == 3
    assert len({tuple(p.run_microbatches) for p in alone.values()}) == 3
    assert chosen.predicted_overhead <= min(p.predicted_overhead for p in alone.values())
    assert chosen.predicted_overhead < alone[1].predicted_overhead
    assert chosen.fits and all(p.fits for p in alone.values())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reserve", [2, 4])
def test_the_rows_of_any_reserve_train_as_the_unsplit_step(device, reserve, monkeypatch):
    """The rows and counts a reserve gives (not those of reserve 1) train three steps as the unsplit step does,
    in the bytes planned."""
    tg, feeds = _net()
    want = train_planned(tg, feeds, device, steps=3, variables="variables")
    fetches = [tg.train_op, tg.loss]
    gc.collect()
    with tf.Session(graph=tg.graph, device=device, memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        p = _plan(tg, feeds, (reserve,), monkeypatch, facts=device_facts(sess.runtime))
        other = _plan(tg, feeds, (1,), monkeypatch, facts=device_facts(sess.runtime))
        assert p.run_microbatches != other.run_microbatches and p.fits
        install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(3)]
        variables = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(variables[name], w, rtol=1e-5, atol=1e-5, err_msg=name)
