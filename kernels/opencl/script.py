"""PyFunc, Print and CheckNumerics on the opencl device: the device-independent kernels of
tfplus.kernels.numpy.script (the values go through the host)."""
from tfplus.kernels.numpy.script import check_numerics_kernel, print_kernel, py_func_kernel
from tfplus.registry import register_kernel

register_kernel("PyFunc", "opencl")(py_func_kernel)
register_kernel("Print", "opencl")(print_kernel)
register_kernel("CheckNumerics", "opencl")(check_numerics_kernel)
