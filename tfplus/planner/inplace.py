"""Elementwise ops whose kernels may write their output over an input: (op type, device) -> input indices.

When such an input dies at the op (no later reader, not fetched) and has the output's shape and dtype, the
planner gives the output that input's buffer: the arena needs one tensor less at that step, at no compute
cost. Each kernel declares it where it is registered (`register_kernel(..., inplace=(0, 1))`,
tfplus.registry.KernelFacts); INPLACE is the table of those declarations, derived as kernels are imported.
An entry is a promise about the kernel: it reads every element of that input before writing the same
element of the output (a single ufunc call with out=, or a chain of them that only rereads `out`).
tests/ops/test_completeness.py checks every entry by running the kernel both ways.
"""
from __future__ import annotations

from tfplus.registry import FACTS, FactsView

INPLACE = FactsView(lambda: {key: f.inplace for key, f in FACTS.items() if f.inplace})
