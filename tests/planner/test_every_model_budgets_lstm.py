"""test_every_model_budgets.py's checks for MobileNet (small images) and the LSTM seqnets (one- and bidirectional):
a file of its own, so that another test process runs it."""
from __future__ import annotations

import pytest
from conftest import DEVICES
from everymodel import GROUPS, cases, check_budgeted_step, check_model_floor

CASES = cases("lstm", DEVICES)


@pytest.mark.parametrize("model, device, budget", CASES, ids=["-".join(c) for c in CASES])
def test_budgeted_step_trains_as_the_unbudgeted_one_in_its_planned_bytes(model, device, budget):
    check_budgeted_step(model, device, budget)


@pytest.mark.parametrize("model", GROUPS["lstm"])
def test_the_floor_plans_and_a_budget_below_it_is_refused(model, monkeypatch):
    check_model_floor(model, monkeypatch)  # test_floor_search.py's check, on the floor of the cases above
