"""Device runtimes. Each is one file behind one small interface (see cpu.py's CPURuntime)."""
from __future__ import annotations


def get_runtime(device: str):
    """'cpu' -> the NumPy runtime; 'opencl', 'opencl:N' or 'opencl:<name>' -> an OpenCL device."""
    kind, _, index = (device or "cpu").partition(":")
    kind = kind.lower()
    if kind == "cpu":
        if index not in ("", "0"):
            raise ValueError(f"device {device!r}: there is one cpu device, 'cpu'")
        from tfplus.runtime.cpu import CPURuntime
        return CPURuntime()
    if kind in ("opencl", "gpu", "cl"):
        from tfplus.runtime.opencl import OpenCLRuntime
        return OpenCLRuntime(index or None)
    raise ValueError(f"unknown device {device!r}; use 'cpu', 'opencl' or 'opencl:N' (tfplus devices lists them)")
