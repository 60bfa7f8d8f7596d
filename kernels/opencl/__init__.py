"""OpenCL kernels for the opencl device: one `.cl` per op family beside the Python launcher that registers it.
Importing this package registers all of them (the runtime imports it)."""
import importlib
import pkgutil

from tfplus.registry import kernels_registered

if __name__ == "kernels.opencl":
    raise ImportError("import this package as tfplus.kernels.opencl, not as top-level 'kernels'")

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")
kernels_registered("opencl")
