"""Models users train on phones, none of them tfplus.graphs' (tests/phonezoo.py: ResNet, DenseNet, U-Net, SqueezeNet
and ShuffleNet, a ViT-style encoder, a causal dilated TCN, siamese towers, weight decay with label smoothing and
clipping), under memory budgets (issue 34: the planner fits any graph). Each model's unbudgeted step trains as
TensorFlow's on both devices; at its floor (the smallest budget the planner fits, step_budget's figure over the
initializer's and the training step's runs) and halfway from there to the unconstrained peak, it trains as the
unbudgeted step in the bytes its plan predicts (cpu: NumPy data, tracemalloc; opencl: the device ledger): here the
CNNs, in _seq.py the others; every model on cpu, two of each file on opencl (tests/phonecheck.py). And what the
models found: a session refused the floor floor_plan named, a causal conv's padding refused micro-batches, and a
max over time streamed trained to NaN."""
from __future__ import annotations

from importlib import import_module

import numpy as np
import pytest
from conftest import DEVICES
from phonecheck import (
    BATCH,
    FRAMES,
    SIZE,
    STEPS,
    TOL,
    assert_same,
    check_budgeted_step,
    ladder,
    tensorflow_steps,
    unbudgeted,
)
from phonezoo import NAMES, build, start

import tfplus as tf
from tfplus import planner
from tfplus.planner import PlanError
from tfplus.runtime.facts import device_facts

plan_module = import_module("tfplus.planner.plan")  # (tfplus.planner.plan is the function)


ORACLE = [(n, d) for n in NAMES for d in DEVICES]


@pytest.mark.parametrize("name, device", ORACLE, ids=["-".join(c) for c in ORACLE])
def test_the_unbudgeted_step_trains_as_tensorflows(tf1, name, device):
    assert_same(unbudgeted(name, device), tensorflow_steps(tf1, name), 10 * TOL[device], f"{name} on {device}")


LADDER = ladder("cnn", DEVICES)


@pytest.mark.parametrize("name, device, rung", LADDER, ids=["-".join(c) for c in LADDER])
def test_a_budgeted_step_trains_as_the_unbudgeted_one_in_its_planned_bytes(name, device, rung):
    check_budgeted_step(name, device, rung)


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
    assert_same((np.array(got, np.float64), variables), unbudgeted("tcn", "cpu"), TOL["cpu"], "tcn in 4")


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
