"""Every model of graphs/ under budgets, on both devices (issue 34, item 3): the trainer's step (training_graph), at
small shapes, planned by a session with a memory budget between its floor and its unconstrained peak (the planner
chooses how) and with the floor itself (step_budget.floor), trains as the unbudgeted step, holds the bytes its
plan predicts (cpu: the NumPy data, tracemalloc; opencl: the runtime's device ledger, to the byte) and, on opencl,
replays its recorded launches (tapes) once they are recorded. The checks are tests/everymodel.py's; the models are
split over this file, test_every_model_budgets_seq.py and _lstm.py, so that test processes take a third each.

What the planner chose when this was written (batch 4; beside inplace and schedule), "between" | "floor":
    alexnet       cpu: scratch | stream k4               opencl: stream k2 | recompute + stream k4
    lenet         cpu: scratch | stream k4               opencl: compact + stream k2 | compact + recompute + micro k4
    mentee        cpu: chunk | compact + recompute + chunk    opencl: compact + recompute | recompute + stream k2
    mobilenet(224)  both: recompute | micro k4 with 10 statistics passes (batch norm split)
    seqnet, -bi   both: arena | micro k4 with 4 statistics passes
    seqnet-lstm   cpu: micro k2 | micro k4 (statistics)   opencl: arena | recompute
    seqnet-bilstm cpu: arena | micro k4 (statistics)      opencl: arena | recompute
"""
from __future__ import annotations

import pytest
from conftest import DEVICES
from everymodel import GROUPS, SMALL, cases, check_budgeted_step, check_model_floor

from tfplus.graphs import MODELS


def test_every_model_is_listed():
    assert set(SMALL) == set(MODELS) == {m for group in GROUPS.values() for m in group}


CASES = cases("cnn", DEVICES)


@pytest.mark.parametrize("model, device, budget", CASES, ids=["-".join(c) for c in CASES])
def test_budgeted_step_trains_as_the_unbudgeted_one_in_its_planned_bytes(model, device, budget):
    check_budgeted_step(model, device, budget)


@pytest.mark.parametrize("model", GROUPS["cnn"])
def test_the_floor_plans_and_a_budget_below_it_is_refused(model, monkeypatch):
    check_model_floor(model, monkeypatch)  # test_floor_search.py's check, on the floor of the cases above
