"""The checks of tests/planner/test_every_model_budgets*.py (split in three files, one test process each): every
model of graphs/, at small shapes, planned in budgets between its floor and its unconstrained peak and at its floor,
trains as the unbudgeted step in the bytes its plan predicts; its floor plans, and a budget below it is refused
naming it (check_floor, also tests/planner/test_floor_search.py's)."""
from __future__ import annotations

import functools
import gc
import tracemalloc

import numpy as np
import pytest
from modelcheck import assert_measured_is_planned, random_feeds

import tfplus as tf
from tfplus import planner, step_budget
from tfplus.engine.memory import measure_device_step, measure_step
from tfplus.graphs import get_model, training_graph
from tfplus.planner.plan import FLOOR_PRECISION
from tfplus.runtime.facts import device_facts
from tfplus.step_budget import check_budget, floor, smallest_peak, training_runs

# Widths and image sizes that keep each model's step small; the batch is BATCH.
SMALL = {"mentee": ({"conv_widths": (4, 4, 8, 8, 8), "fc_widths": (16, 8)}, (3, 8, 8)),
         "lenet": ({"conv_widths": (4, 8), "fc_widths": (16, 8)}, None),
         "alexnet": ({"conv_widths": (4, 8, 8, 8, 8), "fc_widths": (16, 16)}, (3, 67, 67)),
         "mobilenet224": ({"conv_widths": (4, 8, 8)}, (3, 32, 32)),
         "mobilenet": ({"conv_widths": (4, 8, 8)}, (3, 8, 8))} | \
    {m: ({"conv_widths": (6, 8, 8)}, (3, 4, 4)) for m in ("seqnet", "seqnet-lstm", "seqnet-bi", "seqnet-bilstm")}
BATCH = 4
STEPS = 2  # whose losses are compared with the unbudgeted step's (the weights after every run)
# Runs before the measured one on opencl: the first finds the shapes, the next two record the same launches
# (engine.replay.AGREE), so the measured run replays.
WARM = 4


@functools.cache
def graph(model: str):
    kwargs, image = SMALL[model]
    m = get_model(model)
    return training_graph(m.build, total_steps=10, seed=0, model_kwargs=kwargs, image_shape=image or m.image_shape)


@functools.cache
def floor_of(model: str, device: str):
    """step_budget.floor of the model's step on `device` (its budget and how it fits it)."""
    tg = graph(model)
    return floor(tg.graph, training_runs(tg, [tg.train_op, tg.loss], BATCH), device)


def check_floor(g, runs: list, p, monkeypatch) -> None:
    """`p`, step_budget.floor(g, runs, "cpu"), is a plan that fits its budget, at most the smallest plan's
    peak, and check_budget refuses a budget just below it naming it."""
    assert p.fits and p.peak_bytes <= p.budget_bytes <= smallest_peak(g, runs, "cpu")
    below = int(p.budget_bytes * (1 - FLOOR_PRECISION)) - 1
    # check_budget names the floor of the runs it refuses: `p`, handed back for these runs only (searching it
    # again was two fifths of a model's check).
    monkeypatch.setattr(step_budget, "floor", lambda *args: p if args == (g, runs, "cpu") else pytest.fail(
        f"check_budget asked for the floor of other runs: {args}"))
    with pytest.raises(planner.BudgetError) as e:
        check_budget(g, runs, "cpu", below)
    assert "the step needs at least " in str(e.value) and f"({p.budget_bytes} bytes) but" in str(e.value)
    assert f"({below} bytes); use a budget of at least" in str(e.value)


def check_model_floor(model: str, monkeypatch) -> None:
    """check_floor of the model's step at its small shapes (the floor its budget cases trained at, when they ran
    first in this process)."""
    tg = graph(model)
    check_floor(tg.graph, training_runs(tg, [tg.train_op, tg.loss], BATCH), floor_of(model, "cpu"), monkeypatch)


@functools.cache
def _budgets(model: str, device: str) -> dict[str, int]:
    """The budgets of the model's step on `device`: "floor" (step_budget.floor's) and "between" (halfway from it to
    the unconstrained plan's peak)."""
    tg = graph(model)
    runs = training_runs(tg, [tg.train_op, tg.loss], BATCH)
    low = floor_of(model, device).budget_bytes
    free = planner.plan(*runs[0], device_facts(device), graph=tg.graph).peak_bytes
    assert low < free, (model, device, low, free)
    return {"floor": low, "between": (low + free) // 2}


def _feeds(tg) -> dict:
    c, h, w = tg.images.shape.as_list()[1:]
    assert h == w
    feeds = random_feeds(tg, BATCH, h)
    assert feeds[tg.images].shape[1] == c
    return feeds


@functools.cache
def _unbudgeted(model: str, device: str, runs: int):
    """Losses of `runs` unbudgeted training steps and the weights after them (the random initializers are each
    device's own, so the reference is the same device's)."""
    tg = graph(model)
    feeds = _feeds(tg)
    with tf.Session(graph=tg.graph, device=device) as sess:
        sess.run(tg.init_op)
        losses = [sess.run([tg.train_op, tg.loss], feeds)[1] for _ in range(runs)]
        return losses, _weights(sess, tg)


def _weights(sess, tg) -> dict:
    return {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}


def _assert_trains_as(got, want, what: str) -> None:
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, err_msg=what)
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=1e-4, atol=1e-5, err_msg=f"{what}: {name}")


def _recordings(bound) -> list:
    """The tape records that run a planned step: the whole micro-batched or streamed step's, else its programs' (per
    phase and lane)."""
    if bound.plan.microbatches > 1 or bound.plan.stream is not None:
        return [bound.whole]
    programs = bound.programs + [lane.program for lane in bound.lanes]
    return [t for prog in programs for t in prog.tapes.values()]


# The models of each test file: together, every model of graphs/.
# (test_every_model_budgets.py, _seq.py, _lstm.py: about a third of the time each)
GROUPS = {"cnn": ("alexnet", "lenet", "mentee"), "seq": ("mobilenet224", "seqnet", "seqnet-bi"),
          "lstm": ("mobilenet", "seqnet-lstm", "seqnet-bilstm")}


def cases(group: str, devices) -> list[tuple[str, str, str]]:
    return [(m, d, b) for m in GROUPS[group] for d in devices for b in ("between", "floor")]


def check_budgeted_step(model: str, device: str, budget: str) -> None:
    """The model's step in the budget `budget` ("between" or "floor") on `device` trains as the unbudgeted step and
    holds the bytes its plan predicts (cpu: tracemalloc; opencl: the device ledger, replaying its tapes)."""
    tg = graph(model)
    feeds = _feeds(tg)
    fetches = [tg.train_op, tg.loss]
    nbytes = _budgets(model, device)[budget]
    what = f"{model} on {device} in the {budget} budget ({nbytes} bytes)"
    runs = STEPS + 1 if device == "cpu" else WARM + 1  # the last one measured
    want = _unbudgeted(model, device, runs)  # (before tracemalloc starts: it slows what it traces)
    gc.collect()  # other sessions' buffers go back before the memory is measured
    with tf.Session(graph=tg.graph, device=device, memory_budget=nbytes) as sess:
        # The plan the session makes for its step (engine.step: its rewritten step's, for the session's budget),
        # made before tracemalloc starts (it slows the planner's search tenfold) and used from the first run.
        step = sess.step(fetches, feeds)
        p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), nbytes, graph=step.graph)
        assert p.fits and p.peak_bytes <= nbytes, what
        if device == "cpu":
            tracemalloc.start(16)  # before the session allocates its variables and arena (measure_step)
        try:
            step.use_plan(p)
            sess.run(tg.init_op)
            losses = [sess.run(fetches, feeds)[1] for _ in range(STEPS)]
            if device == "cpu":
                m = measure_step(sess, fetches, feeds)
            else:
                for _ in range(WARM - STEPS):
                    sess.run(fetches, feeds)
                m = _measure_replayed(sess, step, fetches, feeds, what)
            weights = _weights(sess, tg)
        finally:
            tracemalloc.stop()
    _assert_trains_as((losses, weights), (want[0][:STEPS], want[1]), what)
    if device == "cpu":
        assert_measured_is_planned(m, p)
    else:
        assert m["allocations"] == 0, what
        assert m["peak"] == p.peak_bytes, (what, m, p.peak_bytes)


def _measure_replayed(sess, step, fetches, feeds, what: str) -> dict:
    """measure_device_step of a step that replays its recorded launches: every tape record it runs by has its tape,
    and the measured run played them."""
    rt = sess.runtime
    played = []
    play = rt.tape_play
    rt.tape_play = lambda *a: played.append(play(*a)) or played[-1]
    try:
        m = measure_device_step(sess, fetches, feeds)
    finally:
        del rt.tape_play
    recordings = _recordings(step.bound)
    untaped = [r.why for r in recordings if r.tape is None]
    assert recordings, what
    assert not untaped, (what, untaped)
    assert played and all(played), (what, played)
    return m
