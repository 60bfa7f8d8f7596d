"""Models users train on phones, none of them tfplus.graphs' (tests/phonezoo.py: ResNet, DenseNet, U-Net, SqueezeNet
and ShuffleNet, a ViT-style encoder, a causal dilated TCN, siamese towers, weight decay with label smoothing and
clipping), under memory budgets (issue 34: the planner fits any graph). Each model's unbudgeted step trains as
TensorFlow's on both devices; at its floor (the smallest budget the planner fits, step_budget's figure over the
initializer's and the training step's runs) and halfway from there to the unconstrained peak, it trains as the
unbudgeted step in the bytes its plan predicts (cpu: NumPy data, tracemalloc; opencl: the device ledger)."""
from __future__ import annotations

import functools
import gc
import tracemalloc
from importlib import import_module

import numpy as np
import pytest
from conftest import DEVICES
from modelcheck import assert_measured_is_planned
from phonezoo import NAMES, build, start

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import measure_device_step, measure_step
from tfplus.planner import PlanError
from tfplus.runtime.facts import device_facts

BATCH, SIZE, FRAMES = 4, 4, 8  # images SIZE x SIZE, the TCN's FRAMES time steps
STEPS = 2
TOL = {"cpu": 2e-5, "opencl": 1e-4}
plan_module = import_module("tfplus.planner.plan")  # (tfplus.planner.plan is the function)


def _train(t, name: str, device: str | None = None, budget: int | None = None, measure: bool = False):
    """STEPS steps of `name` (tfplus on `device` in `budget`, else `t` is TensorFlow): the losses, every
    variable by name, and with `measure` the last step measured (its loss not kept) and the session's plan."""
    case = build(t, name, BATCH, SIZE, FRAMES)
    kwargs = {} if device is None else {"device": device, "memory_budget": budget}
    m = p = None
    gc.collect()  # other sessions' buffers go back before the memory is measured
    with t.Session(graph=case.graph, **kwargs) as sess:
        if measure:  # the session's plan, made before tracemalloc starts (it slows the planner tenfold)
            step = sess.step(case.fetches, case.feeds)
            p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), budget, graph=step.graph)
            if device == "cpu":
                tracemalloc.start(16)  # before the session allocates its variables and arena (measure_step)
        try:
            start(sess, case)
            losses = [sess.run(case.fetches, case.feeds)[1] for _ in range(STEPS - measure)]
            if measure:
                m = (measure_step if device == "cpu" else measure_device_step)(sess, case.fetches, case.feeds)
            variables = {v.op.name: sess.run(v) for v in case.graph.get_collection("variables")}
        finally:
            tracemalloc.stop()
    return (np.array(losses, np.float64), variables), m, p


@functools.cache
def _tensorflow(tf1, name: str):
    return _train(tf1, name)[0]


@functools.cache
def _unbudgeted(name: str, device: str):
    return _train(tf, name, device)[0]


@functools.cache
def _budgets(name: str, device: str) -> dict[str, int]:
    """The step's floor (the largest of its runs', the initializer's and the training step's) and the budget
    halfway from it to the unconstrained plan's peak."""
    case = build(tf, name, BATCH, SIZE, FRAMES)
    facts = device_facts(device)
    with tf.Session(graph=case.graph, device=device, memory_budget="1GB") as sess:
        steps = sess.step(case.fetches, case.feeds), sess.step(case.init)
        floors = [planner.floor_plan(s.fetches, s.feed_shapes, facts, graph=s.graph) for s in steps]
        free = planner.plan(steps[0].fetches, steps[0].feed_shapes, facts, graph=steps[0].graph).peak_bytes
    low = max(f.budget_bytes for f in floors)
    assert all(f.fits for f in floors), (name, device, [(f.budget_bytes, f.peak_bytes) for f in floors])
    assert low < free, (name, device, low, free)
    return {"floor": low, "between": (low + free) // 2}


def _assert_same(got, want, tol: float, what: str) -> None:
    np.testing.assert_allclose(got[0], want[0][:len(got[0])], rtol=tol, atol=tol, err_msg=f"{what}: losses")
    assert got[1].keys() == want[1].keys(), what
    for var, value in want[1].items():  # (a conv's bias before a batch norm has gradients of rounding alone)
        np.testing.assert_allclose(got[1][var], value, rtol=tol, atol=tol, err_msg=f"{what}: {var}")


ORACLE = [(n, d) for n in NAMES for d in DEVICES]


@pytest.mark.parametrize("name, device", ORACLE, ids=["-".join(c) for c in ORACLE])
def test_the_unbudgeted_step_trains_as_tensorflows(tf1, name, device):
    _assert_same(_unbudgeted(name, device), _tensorflow(tf1, name), 10 * TOL[device], f"{name} on {device}")


LADDER = [(n, d, rung) for n in NAMES for d in DEVICES for rung in ("floor", "between")]


@pytest.mark.parametrize("name, device, rung", LADDER, ids=["-".join(c) for c in LADDER])
def test_a_budgeted_step_trains_as_the_unbudgeted_one_in_its_planned_bytes(name, device, rung):
    budget = _budgets(name, device)[rung]
    got, m, p = _train(tf, name, device, budget, measure=True)
    assert p.fits and p.peak_bytes <= budget, (name, device, rung, p.peak_bytes, budget)
    _assert_same(got, _unbudgeted(name, device), TOL[device], f"{name} on {device} in the {rung} budget {budget}")
    if device == "cpu":
        assert_measured_is_planned(m, p)
    else:
        assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (name, m, p.peak_bytes)


def test_a_causal_convs_left_padding_micro_batches():
    """tf.pad's gradient is tf.slice(dy, before, tf.shape(x)): every row of a micro-batch's x, not some of the
    batch's (the rows rule refused it, so the TCN's floor could not micro-batch)."""
    case = build(tf, "tcn", BATCH, SIZE, FRAMES)
    with tf.Session(graph=case.graph, memory_budget="1GB") as sess:
        start(sess, case)
        step = sess.step(case.fetches, case.feeds)
        p = planner.plan(step.fetches, step.feed_shapes, device_facts("cpu"), graph=step.graph, force=(4, 1))
        step.use_plan(p)
        got = [sess.run(case.fetches, case.feeds)[1] for _ in range(STEPS)]
        variables = {v.op.name: sess.run(v) for v in case.graph.get_collection("variables")}
    assert p.microbatches == 4
    _assert_same((np.array(got, np.float64), variables), _unbudgeted("tcn", "cpu"), TOL["cpu"], "tcn in 4")


def test_a_max_over_time_is_no_streamed_cut():
    """Streamed at the TCN's max over time, the prefix's backward pass found the argmax by Equal(max, x) between
    the rest's max and its own recomputed x: on other kernel calls the last bits differed, and the step's weights
    turned NaN (at the floor and between it and the peak, batch 32)."""
    case = build(tf, "tcn", BATCH, SIZE, FRAMES)
    shapes = {case.graph.get_tensor_by_name(n): v.shape for n, v in case.feeds.items()}
    with pytest.raises(PlanError, match=r"cannot stream the step's prefix up to 'Max:0': Equal '[^']+' compares "
                                        r"'[^']+' of the rest of the step with a tensor its backward pass recomputes"):
        planner.plan(case.fetches, shapes, "cpu", graph=case.graph, force=(1, 1, False, 1, 0, ("Max:0", 2)))


def test_a_plan_fits_every_budget_the_floors_probe_fits(monkeypatch):
    """The floor's search asks whether the most frugal plan with the rows of the first reserve fits (fit_only);
    a plan for that budget first keeps the rows of the cheapest reserve, and where those do not fit it must try the
    probe's (a ResNet at batch 32: its floor, 183 kB, was refused by a session with that budget, 220 kB)."""
    tried = []

    def search_keeping(step, budget, keep, transformations, fit_only, priced=None):
        priced = not fit_only if priced is None else priced
        tried.append((keep, priced))
        fits = keep is not None and not priced  # the probe's rows alone fit
        return type("Plan", (), {"fits": fits, "peak_bytes": budget + (not fits)})(), ""
    monkeypatch.setattr(plan_module, "_search_keeping", search_keeping)
    step = type("Step", (), {"budget_shapes": lambda self, transformations: True})()
    assert plan_module._search(step, 1000, ())[0].fits
    assert tried == [(1000, True), (1000, False)]
