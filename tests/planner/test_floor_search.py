"""The smallest feasible budget is the planner's true floor (issue 34, stop 43): the smallest budget that a plan
made for it fits (planner.floor_plan), which statistics passes' kept rows put below the smallest plan made without
a budget. `tfplus plan` reports it with its plan, and `tfplus train` (step_budget.check_budget) refuses a budget
below it naming it. On the cpu: every model of graphs/ at small shapes in tests/planner/test_every_model_budgets*.py
(everymodel.check_floor, on the floor its budget cases search), the ImageNet-sized ones at full size here."""
from __future__ import annotations

import json
import re

import pytest
from everymodel import SMALL, check_floor

from tfplus import planner
from tfplus.graphs import MODELS, get_model, training_graph
from tfplus.planner.plan import _search, _smallest, _Step
from tfplus.runtime.facts import device_facts
from tfplus.step_budget import floor, runs_fit, smallest_peak, training_runs
from tfplus.units import format_size

# The models whose floor is checked here at their own size (everymodel's SMALL checks every model at small shapes).
FULL = ("lenet", "alexnet", "mobilenet224")


def _graph(model: str, small: bool = True):
    kwargs, image = SMALL[model] if small else ({}, None)
    m = get_model(model)
    return training_graph(m.build, total_steps=10, seed=0, model_kwargs=kwargs, image_shape=image or m.image_shape)


def test_every_model_is_listed():
    assert set(FULL) <= set(SMALL) == set(MODELS)


@pytest.mark.parametrize("model", FULL)
def test_the_floor_plans_and_a_budget_below_it_is_refused(model, monkeypatch):
    tg = _graph(model, small=False)
    batch = 1 if model in ("alexnet", "mobilenet224") else 4  # their ImageNet-sized images
    runs = training_runs(tg, tg.train_op, batch)
    check_floor(tg.graph, runs, floor(tg.graph, runs, "cpu"), monkeypatch)


def test_kept_rows_put_the_floor_below_the_smallest_plan():
    """seqnet's statistics passes keep fewer rows under a tight budget: a budget below the smallest plan's peak
    (made without a budget) fits, and `tfplus train` takes it."""
    tg = _graph("seqnet")
    runs = training_runs(tg, tg.train_op, 16)
    p = floor(tg.graph, runs, "cpu")
    assert p.budget_bytes < smallest_peak(tg.graph, runs, "cpu") and p.microbatches > 1 and p.statistics
    assert runs_fit(tg.graph, runs, "cpu", p.budget_bytes)


def test_a_step_planned_for_many_budgets_plans_each_as_a_fresh_one():
    """The floor's search plans one step for several budgets, its caches shared (kept rows per room, runs by their
    fetches and feeds): each budget's plan is the one a fresh plan() makes."""
    tg = _graph("seqnet")
    fetches, shapes, facts = [tg.train_op], {tg.images: (4, 3, 4, 4), tg.labels: (4,)}, device_facts("cpu")
    shared = _Step(fetches, shapes, facts, tg.graph, None)
    # planner.smallest_plan's peak, found on the shared step first, as the floor's search finds it (plan._floor)
    top = _smallest(shared, planner.TRANSFORMATIONS).peak_bytes
    for b in (top, int(top * 0.93)):  # the second's rows kept for its budget
        mine, _ = _search(shared, b, planner.TRANSFORMATIONS)
        fresh = planner.plan(fetches, shapes, facts, b, graph=tg.graph, raise_if_infeasible=False)
        assert mine.summary() == fresh.summary() and mine.choice == fresh.choice, b
        assert mine.fits or b < top


def test_plan_reports_the_floor_with_its_plan(capsys, monkeypatch):
    from tfplus import plan_cli
    from tfplus.cli import main
    argv = ["plan", "--model", "lenet", "--batch-size", "8"]
    # The three runs differ in their budget only: they plan the first one's step, its floor searched once.
    made, build = [], plan_cli._TrainStep
    monkeypatch.setattr(plan_cli, "_TrainStep", lambda args: made[0] if made else made.append(build(args)) or made[0])
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    floor_bytes, how = out["smallest_feasible_budget_bytes"], out["smallest_feasible_plan"]
    assert how["peak_bytes"] <= floor_bytes and how["planning_seconds"] >= 0 and how["transformations"]
    assert main([*argv, "--memory-budget", str(floor_bytes)]) == 0
    text = capsys.readouterr().out
    line = re.search(r"smallest feasible budget .* \((\d+) bytes\): fits [\d.]+ \w?B with (.+), predicted "
                     r"[+-][\d.]+% \(found in [\d.]+ s\)", text)
    assert line and int(line.group(1)) == floor_bytes and line.group(2) == how["transformations"], text
    assert main([*argv, "--memory-budget", str(floor_bytes - 1)]) == 1
    assert f"it needs at least {format_size(floor_bytes, up=True)} ({floor_bytes} bytes)" in capsys.readouterr().err
