"""NumPy kernels for the cpu device. Importing this package registers all of them."""
import importlib
import pkgutil

from tfplus.registry import kernels_registered

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
kernels_registered("cpu")
