"""What the planner is told of a device of this machine (planner.DeviceFacts): the one place where a plan's device
meets a runtime, so that the planner itself reads no device, kernel module or thread count.

    >>> from tfplus.runtime.facts import device_facts
    >>> device_facts("cpu", threads=2)
    DeviceFacts(name='cpu', kernel_device='cpu', alignment=64, compute_units=None, threads=2)
"""
from __future__ import annotations

import importlib

from tfplus import threads as _threads
from tfplus.planner.plan import CPU_ALIGNMENT, OPENCL_DEFAULT_ALIGNMENT, OPENCL_DEFAULT_COMPUTE_UNITS, DeviceFacts
from tfplus.runtime import get_runtime, parse_device

# The kernel package of each kind: their workspace declarations are a plan's scratch, device at hand or not.
_KERNELS = {"cpu": "tfplus.kernels.numpy", "opencl": "tfplus.kernels.opencl"}


def device_facts(device, threads: int | None = None) -> DeviceFacts:
    """The DeviceFacts of `device`, a device string ('cpu', 'opencl', 'opencl:1') or a runtime, its kernels
    registered, on `threads` cpu threads (None: as many as the calling thread runs kernels with,
    tfplus.threads.current()). An OpenCL device on this machine gives its own alignment and compute units (a wrong
    index raises, naming the devices there are); with no OpenCL here, the documented defaults, its name saying so."""
    n = threads or _threads.current()
    if not isinstance(device, str):  # a runtime registered its kernels when it was made
        kd = device.kernel_device
        return DeviceFacts(device.name, kd, device.arena_alignment,
                           device.info["compute_units"] if kd == "opencl" else None, n)
    kind = parse_device(device)[0]
    if kind == "cpu":
        importlib.import_module(_KERNELS["cpu"])
        return DeviceFacts(device, "cpu", CPU_ALIGNMENT, None, n)
    from tfplus.runtime import opencl  # pyopencl (~0.1 s): not for the cpu, nor for `tfplus plan`'s parser
    if not opencl.available():  # no OpenCL here at all: plan for the documented defaults, and say so
        importlib.import_module(_KERNELS["opencl"])
        return DeviceFacts(f"{device} (not here: {OPENCL_DEFAULT_COMPUTE_UNITS} compute units assumed)", "opencl",
                           OPENCL_DEFAULT_ALIGNMENT, OPENCL_DEFAULT_COMPUTE_UNITS, n)
    return device_facts(get_runtime(device), n)
