"""The checks of tests/planner/test_phone_models_budgets*.py (tests/phonezoo.py's models): each model's unbudgeted
step against TensorFlow's, and its step at its floor and halfway to its unconstrained peak against the unbudgeted
one, in the bytes its plan predicts."""
from __future__ import annotations

import functools
import gc
import tracemalloc

import numpy as np
from modelcheck import assert_measured_is_planned
from phonezoo import build, start

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import measure_device_step, measure_step
from tfplus.runtime.facts import device_facts

BATCH, SIZE, FRAMES = 4, 4, 8  # images SIZE x SIZE, the TCN's FRAMES time steps
STEPS = 2
TOL = {"cpu": 2e-5, "opencl": 1e-4}


def train(t, name: str, device: str | None = None, budget: int | None = None, measure: bool = False):
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
            if measure:
                step.use_plan(p)  # (else the session plans it again)
            start(sess, case)
            losses = [sess.run(case.fetches, case.feeds)[1] for _ in range(STEPS - measure)]
            if measure:
                m = (measure_step if device == "cpu" else measure_device_step)(sess, case.fetches, case.feeds)
            variables = {v.op.name: sess.run(v) for v in case.graph.get_collection("variables")}
        finally:
            tracemalloc.stop()
    return (np.array(losses, np.float64), variables), m, p


@functools.cache
def tensorflow_steps(tf1, name: str):
    return train(tf1, name)[0]


@functools.cache
def unbudgeted(name: str, device: str):
    return train(tf, name, device)[0]


@functools.cache
def budgets(name: str, device: str) -> dict[str, int]:
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


def assert_same(got, want, tol: float, what: str) -> None:
    np.testing.assert_allclose(got[0], want[0][:len(got[0])], rtol=tol, atol=tol, err_msg=f"{what}: losses")
    assert got[1].keys() == want[1].keys(), what
    for var, value in want[1].items():  # (a conv's bias before a batch norm has gradients of rounding alone)
        np.testing.assert_allclose(got[1][var], value, rtol=tol, atol=tol, err_msg=f"{what}: {var}")


# The models of each test file (test_phone_models_budgets.py, _seq.py: about half the time each); on opencl, two of
# each (a floor search per model and device is most of a file's time).
GROUPS = {"cnn": ("resnet", "densenet", "unet", "squeeze_shuffle"),
          "seq": ("transformer", "tcn", "siamese", "regularized")}
ON_OPENCL = ("unet", "squeeze_shuffle", "transformer", "tcn")


def ladder(group: str, devices) -> list[tuple[str, str, str]]:
    return [(n, d, rung) for n in GROUPS[group] for d in devices if d == "cpu" or n in ON_OPENCL
            for rung in ("floor", "between")]


def check_budgeted_step(name: str, device: str, rung: str) -> None:
    """`name`'s step in its `rung` budget ("floor" or "between") on `device` trains as the unbudgeted step and
    holds the bytes its plan predicts (cpu: tracemalloc; opencl: the device ledger)."""
    budget = budgets(name, device)[rung]
    got, m, p = train(tf, name, device, budget, measure=True)
    assert p.fits and p.peak_bytes <= budget, (name, device, rung, p.peak_bytes, budget)
    assert_same(got, unbudgeted(name, device), TOL[device], f"{name} on {device} in the {rung} budget {budget}")
    if device == "cpu":
        assert_measured_is_planned(m, p)
    else:
        assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (name, m, p.peak_bytes)
