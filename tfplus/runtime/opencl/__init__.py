"""The opencl device: tensors live in OpenCL buffers; kernels are the OpenCL kernels in tfplus.kernels.opencl.

    >>> from tfplus.runtime import opencl
    >>> opencl.available()                                  # doctest: +SKIP
    True
    >>> [d["name"] for d in opencl.list_devices()]          # doctest: +SKIP
    ['NVIDIA H100 80GB HBM3', 'pthread-AMD EPYC']
    >>> sess = tf.Session(device="opencl")                  # doctest: +SKIP

Which device: "opencl:N" is entry N of list_devices(); "opencl:<text>" the first device whose platform or
device name contains <text> (case-insensitive); plain "opencl" takes TFPLUS_OPENCL_DEVICE (an index or text)
if set, else the first GPU, else the first device.

What stays where: variables, optimizer slots, activations and gradients stay in device buffers between steps;
per step only the fed arrays go in and the fetched values come out (`h2d_bytes`, `d2h_bytes` count them).
Values made on the host (feeds, constants, shapes and arithmetic on them) keep a host copy, so shape functions
and fetches read them without a transfer, except a fed batch (256 KB or more), which goes up through pinned
staging buffers and keeps none; small constants and shapes reach the device once (their device
copies are cached by content), graph constants once per runtime. Freed buffers go back to a pool keyed by
size class, so a steady-state step allocates nothing. Kernels take each tensor as a buffer and a byte offset
in it (common.cl: GLOBAL, SHIFT), so a memory plan's arena slots and rows of a batch (`a[i:j]`) are views of
one buffer: no copies, no cl sub-buffers.

Programs are built once per context and kept; built binaries are also cached on disk
($XDG_CACHE_HOME/tfplus/opencl, else ~/.cache/tfplus/opencl), keyed by the sha256 of the source, build
options, device and driver; TFPLUS_OPENCL_BUILD_OPTIONS adds compiler options. prebuild() starts building a
listed set of programs on background threads (`tfplus train` does, before it makes its graph), so a step's
launchers find them built or building; TFPLUS_OPENCL_PREBUILD=0 turns it off. On a GPU whose programs are not
cached yet, the threads hand most builds to child processes (TFPLUS_OPENCL_BUILD_PROCESSES, default half the
cores, at most 8): NVIDIA's driver builds one program at a time per process. Ops with no OpenCL kernel raise
NotImplementedError unless TFPLUS_OPENCL_FALLBACK=1, Session(config={"allow_soft_placement": True}) or
`runtime.allow_fallback = True`: then they run their NumPy kernel on copies, and `placement_report()` lists
each such op with the bytes it moved. TFPLUS_OPENCL_PROFILE=1 records kernel times (`profile_report()`);
a traced Session.run (tfplus.profiler) runs on a queue with profiling on.

The package, by concern: discovery (pyopencl, devices, settings), memory (blocks, DeviceArray, the pool), tape
(recorded launches), build (sources, the disk cache, background and child-process builds, program lists), device
(Device: what a device's runtimes share; Kernel; prebuild) and runtime (OpenCLRuntime). `python -m
tfplus.runtime.opencl INDEX` is a child that builds programs for its parent (__main__.py).
"""
from tfplus.runtime.opencl.build import read_program_list, write_program_list
from tfplus.runtime.opencl.device import prebuild, prebuild_soon
from tfplus.runtime.opencl.discovery import (
    available,
    cache_dir,
    cl,
    list_devices,
    parse_tuning,
    replay_enabled,
    select,
    shipped_tuning,
)
from tfplus.runtime.opencl.memory import DeviceArray
from tfplus.runtime.opencl.runtime import OpenCLRuntime, int8, record

__all__ = ["DeviceArray", "OpenCLRuntime", "available", "cache_dir", "cl", "int8", "list_devices", "parse_tuning",
           "prebuild", "prebuild_soon", "read_program_list", "record", "replay_enabled", "select", "shipped_tuning",
           "write_program_list"]
