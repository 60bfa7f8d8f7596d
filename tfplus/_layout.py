"""Where tfplus.ops, tfplus.kernels and tfplus.graphs live when this tfplus/ is a source checkout's.

An install (pyproject's package-dir) puts the top-level ops/, kernels/ and graphs/ inside tfplus/. The checkout
keeps them beside it, so a tfplus/ imported from the checkout's root (python -m tfplus or a script run there,
which put the working folder first on sys.path ahead of any install, or a strict editable install's link tree
seen from there) would have no tfplus.ops. This finds those three, and no other folder of the checkout's root, there.
"""
from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

_TFPLUS = Path(__file__).resolve().parent
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
