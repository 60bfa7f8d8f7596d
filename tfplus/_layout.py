"""Where tfplus.ops, tfplus.kernels and tfplus.graphs live when this tfplus/ is a source checkout's.

An install (pyproject's package-dir) puts the top-level ops/, kernels/ and graphs/ inside tfplus/; the checkout
keeps them beside it. Run from the checkout's root (python -m tfplus, python -c, a script there), Python puts the
working folder first on sys.path, ahead of any install, plain or editable: the checkout's tfplus/ is imported,
and had no tfplus.ops. This finds those three in the root, and nothing else there (no tfplus.tests).
"""
from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

_TFPLUS = Path(__file__).absolute().parent  # not resolved: a strict editable install's link tree has its own ops/
_ROOT = _TFPLUS.parent
_SUBPACKAGES = {f"tfplus.{name}" for name in ("ops", "kernels", "graphs")}


class _BesideTfplus:
    """A meta path finder for the three subpackages, in the checkout's root."""

    @staticmethod
    def find_spec(name: str, path=None, target=None) -> ModuleSpec | None:
        return PathFinder.find_spec(name, [str(_ROOT)]) if name in _SUBPACKAGES else None


# Installed, tfplus/ops exists and nothing is added; in a checkout, ops/__init__.py is beside tfplus/.
if not (_TFPLUS / "ops").is_dir() and (_ROOT / "ops" / "__init__.py").is_file():
    sys.meta_path.append(_BesideTfplus)
