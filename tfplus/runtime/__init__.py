"""Device runtimes behind one declared interface (base.py's Runtime): cpu.py, and the opencl package; comm.py, the
ranks of a data-parallel job behind one for its backends (MPI, gloo)."""
from __future__ import annotations

DEVICE_FORMS = "cpu, opencl, opencl:N (`tfplus devices` lists them) or opencl:NAME (part of a device's name)"


def parse_device(device: str) -> tuple[str, str | None]:
    """('cpu', None) or ('opencl', selector or None): the one reader of device strings, for the runtimes, the
    planner and every CLI flag. The kind is case-insensitive; 'cpu:0' is the cpu; an opencl selector is an index
    or text in a device's name. Raises ValueError naming the string and the forms accepted.

        >>> parse_device("opencl:1"), parse_device("CPU")
        (('opencl', '1'), ('cpu', None))
    """
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'cpu' or 'opencl:0', got {device!r}")
    kind, colon, selector = device.strip().partition(":")
    kind, selector = kind.lower(), selector.strip()
    if kind == "cpu":
        if colon and selector != "0":
            raise ValueError(f"device {device!r}: there is one cpu device, 'cpu'")
        return "cpu", None
    if kind == "opencl":
        if colon and not selector:
            raise ValueError(f"device {device!r}: give an index or a name after 'opencl:', or plain 'opencl'")
        return "opencl", selector or None
    raise ValueError(f"unknown device {device!r}; use {DEVICE_FORMS}")


def get_runtime(device: str):
    """'cpu' -> the NumPy runtime; 'opencl', 'opencl:N' or 'opencl:<name>' -> an OpenCL device."""
    kind, selector = parse_device(device or "cpu")
    if kind == "cpu":
        from tfplus.runtime.cpu import CPURuntime
        return CPURuntime()
    from tfplus.runtime.opencl import OpenCLRuntime
    return OpenCLRuntime(selector)


