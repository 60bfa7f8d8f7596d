"""The segment order of the rows statistics passes shed (crossbatch.kept's `segments`, crossbatch._bisection): rows
of one size shed so that those kept through the backward split the forward into even segments (Chen et al.), priced
beside the default order at each reserve (plan._Step._choose_kept, crossbatch.SEGMENTS). Rows kept in that
order train as the unsplit step does."""
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
from tfplus.planner import crossbatch
from tfplus.runtime.facts import device_facts

DEVICES = ["cpu", pytest.param("opencl", marks=needs_opencl)]
BUDGET = 500_000  # rows of the small net's tail shed in its backward passes
plan_module = importlib.import_module("tfplus.planner.plan")


def _net():
    """MobileNet's first blocks, narrow, with a tail of five blocks of one width, at 8x8, batch 16."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (8, 16, 16, 16, 16, 16, 16)})
    return tg, random_feeds(tg, 16, 8)


def _plan(tg, feeds, facts, monkeypatch, segments: bool | None):
    """The plan of 4 micro-batches at BUDGET: `segments` None prices both orders (the default); True or False
    sheds in that order alone."""
    if segments is not None:
        kept = crossbatch.kept
        monkeypatch.setattr(crossbatch, "kept", lambda *args: kept(*args[:6], segments))
    monkeypatch.setattr(crossbatch, "SEGMENTS", segments is None)
    try:
        return planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, facts, BUDGET,
                            graph=tg.graph, force=(4, 1))
    finally:
        monkeypatch.undo()


def test_bisection_ranks_the_middles_first():
    """The middle row first, then the middles of the halves, left before right, and so on down."""
    rows = list("abcdefg")
    rank = crossbatch._bisection(rows)
    assert sorted(rows, key=rank.get) == list("dbfaceg")
    assert crossbatch._bisection([]) == {}


def test_the_cheaper_order_is_kept(monkeypatch):
    """The two orders keep other rows at other predicted costs; priced side by side, the plan is the cheaper one's
    (on the cpu's facts, which price launches and elements written dearly, the default order's)."""
    tg, feeds = _net()
    facts = device_facts("cpu")
    alone = {s: _plan(tg, feeds, facts, monkeypatch, s) for s in (False, True)}
    chosen = _plan(tg, feeds, facts, monkeypatch, None)
    assert alone[True].predicted_overhead != alone[False].predicted_overhead
    assert chosen.predicted_overhead == min(p.predicted_overhead for p in alone.values())
    assert chosen.fits and all(p.fits for p in alone.values())


@pytest.mark.parametrize("device", DEVICES)
def test_rows_kept_in_segments_train_as_the_unsplit_step(device, monkeypatch):
    """The rows and counts of the segment order (not the default order's) train three steps as the unsplit step
    does."""
    tg, feeds = _net()
    want = train_planned(tg, feeds, device, steps=3, variables="variables")
    fetches = [tg.train_op, tg.loss]
    gc.collect()
    with tf.Session(graph=tg.graph, device=device, memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        facts = device_facts(sess.runtime)
        p = _plan(tg, feeds, facts, monkeypatch, True)
        other = _plan(tg, feeds, facts, monkeypatch, False)
        assert p.run_microbatches != other.run_microbatches and p.fits
        install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(3)]
        variables = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(variables[name], w, rtol=1e-5, atol=1e-5, err_msg=name)
