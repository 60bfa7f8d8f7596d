"""NumPy kernels for the cpu device. Importing this package registers all of them."""
import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
