"""test_every_model_budgets.py's checks for MobileNet at 224's proportions and the GRU seqnets (one- and
bidirectional): a file of its own, so that another test process runs it."""
from __future__ import annotations

import pytest
from conftest import DEVICES
from everymodel import GROUPS, cases, check_budgeted_step, check_model_floor, floor_of

CASES = cases("seq", DEVICES)


@pytest.mark.parametrize("model, device, budget", CASES, ids=["-".join(c) for c in CASES])
def test_budgeted_step_trains_as_the_unbudgeted_one_in_its_planned_bytes(model, device, budget):
    check_budgeted_step(model, device, budget)


@pytest.mark.parametrize("model", GROUPS["seq"])
def test_the_floor_plans_and_a_budget_below_it_is_refused(model, monkeypatch):
    check_model_floor(model, monkeypatch)  # test_floor_search.py's check, on the floor of the cases above


def test_a_bidirectional_rnn_step_micro_batches_at_its_floor():
    """bidirectional_dynamic_rnn reverses time by a gather along the time axis, each row from its own steps, so its
    step micro-batches; a gather of the (time * batch) rows by indices computed from tf.range(batch) was refused,
    and seqnet-bi's floor was twice seqnet's. (That it trains as the unbudgeted step: the cases above, whose floor
    this is.)"""
    assert floor_of("seqnet-bi", "cpu").microbatches > 1
