"""Runs the op table: every Case of every tests/cases_*.py, forward on every device and dtype, and its float64
finite-difference gradient on the cpu."""
from __future__ import annotations

import importlib
import pathlib

import pytest
from optable import Case, check_forward, check_gradient


def all_cases() -> list[Case]:
    """CASES of every tests/cases_*.py module, in file order; case names must be unique."""
    cases: list[Case] = []
    where: dict[str, str] = {}
    for path in sorted(pathlib.Path(__file__).parent.glob("cases_*.py")):
        module = importlib.import_module(path.stem)  # tests/ is on sys.path (pytest's rootdir insertion)
        for case in module.CASES:
            if case.name in where:
                raise ValueError(f"op-table case {case.name!r} defined in {where[case.name]} and {path.name}")
            where[case.name] = path.name
            cases.append(case)
    return cases


CASES = all_cases()


@pytest.mark.parametrize("case,dtype",
                         [pytest.param(c, d, id=f"{c.name}-{d}") for c in CASES for d in c.dtypes])
def test_forward(case: Case, dtype: str, device: str) -> None:
    check_forward(case, dtype, device)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES if c.grad])
def test_gradient(case: Case) -> None:
    check_gradient(case)
