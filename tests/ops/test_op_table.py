"""Runs the op table: every Case of every tests/cases_*.py, forward on every device and dtype, and its float64
finite-difference gradient on the cpu."""
from __future__ import annotations

import pytest
from optable import Case, all_cases, check_forward, check_gradient

CASES = all_cases()


@pytest.mark.parametrize("case,dtype",
                         [pytest.param(c, d, id=f"{c.name}-{d}") for c in CASES for d in c.dtypes])
def test_forward(case: Case, dtype: str, device: str) -> None:
    check_forward(case, dtype, device)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES if c.grad])
def test_gradient(case: Case) -> None:
    check_gradient(case)
