"""TFPLUS_DEBUG: how much tfplus says on stderr about what it does, read in one place.

0 or unset: nothing. 1: devices, placement, what the rewrite fused, why a step runs without a plan or a replay,
tuning results. 2: per-op timing as well. 3: OpenCL compiler output too. A value that is not a number, such as
'yes', means 1 (the variable is on).
"""
from __future__ import annotations

import os


def level() -> int:
    """The TFPLUS_DEBUG level now (read each call: tests and users set it after import)."""
    text = os.environ.get("TFPLUS_DEBUG", "").strip()
    if text in ("", "0"):
        return 0
    try:
        return max(int(text), 0)
    except ValueError:
        return 1


def on(at: int = 1) -> bool:
    """Whether TFPLUS_DEBUG is at least `at`."""
    return level() >= at
