"""PyFunc on the opencl device: the device-independent kernel of tfplus.kernels.numpy.script (the values go
through the host)."""
from tfplus.kernels.numpy.script import py_func_kernel
from tfplus.registry import register_kernel

register_kernel("PyFunc", "opencl")(py_func_kernel)
