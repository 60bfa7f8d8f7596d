"""tests/planner/test_phone_models_budgets.py's budgets for its other models (a ViT block, a causal TCN, siamese
towers, weight decay with label smoothing and clipping), in a file of their own so that test processes take half
each."""
from __future__ import annotations

import pytest
from conftest import DEVICES
from phonecheck import check_budgeted_step, ladder

LADDER = ladder("seq", DEVICES)


@pytest.mark.parametrize("name, device, rung", LADDER, ids=["-".join(c) for c in LADDER])
def test_a_budgeted_step_trains_as_the_unbudgeted_one_in_its_planned_bytes(name, device, rung):
    check_budgeted_step(name, device, rung)
