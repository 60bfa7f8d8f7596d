"""Finding OpenCL devices: pyopencl's import, the devices of every platform, choosing one by a selector, what a
device says of itself, and the settings read from the environment and the package (cache folder, replay,
shipped GEMM tiles)."""
from __future__ import annotations

import ctypes
import functools
import importlib.resources
import json
import os
from pathlib import Path

try:
    import pyopencl as cl
    import pyopencl.cltypes as cltypes
except ImportError:  # no pyopencl: available() is False and OpenCLRuntime() explains
    cl = cltypes = None


def shipped_tuning(device_name: str) -> tuple[dict, str | None]:
    """The GEMM tiles the package ships for an OpenCL device of this name (kernels/opencl/tuning-gpu.json,
    written by tools/gen_program_lists.py --tuning on such a device) as {problem key: tile}, and the name of the
    device they were tuned on (None: nothing shipped). JSON only; a file that is not {name: {str: [int, ...]}}
    is ignored."""
    try:
        text = importlib.resources.files("tfplus.kernels.opencl").joinpath("tuning-gpu.json").read_text()
    except OSError:
        return {}, None
    return parse_tuning(text, device_name)


def parse_tuning(text: str, device_name: str) -> tuple[dict, str | None]:
    """shipped_tuning's reading of a tuning-gpu.json text: ({}, None) unless it is valid. A GPU takes its own
    tiles, and for each problem it has none for, the tile of the listed GPU of the same vendor whose name shares
    the longest start with its own that has one (an H200 takes the H100's: one architecture, and the shipped
    program lists were recorded with those tiles; the H100 takes the H200's tiles of the 3x3 conv kernels, tuned
    there only). The name returned is whose tiles it starts from: its own, else the nearest GPU's. A GPU listed
    with no tiles takes none. Tuning at the first step instead costs a fresh H200 ~2.5 s of its cold start
    (BENCHMARKS.md); a tile the device cannot run is tuned afresh when asked for (kernels/opencl/_tune.choose)."""
    try:
        table = json.loads(text)
    except ValueError:
        return {}, None
    if not isinstance(table, dict):
        return {}, None
    vendor = device_name.split(" ", 1)[0]
    others = sorted((n for n in table if isinstance(n, str) and n != device_name and n.split(" ", 1)[0] == vendor),
                    key=lambda n: (-len(os.path.commonprefix([n, device_name])), n))
    names = [device_name] if device_name in table else others[:1]
    if not names or not _tiles_ok(table[names[0]]):
        return {}, None
    tiles: dict = {}
    for name in reversed(names + others):  # the nearest last: its tile of a problem wins
        if _tiles_ok(table[name]):
            tiles.update(table[name])
    return tiles, names[0]


def _tiles_ok(tiles) -> bool:
    """Whether one GPU's entry of tuning-gpu.json is a non-empty {problem key: [int, ...]}."""
    return isinstance(tiles, dict) and bool(tiles) and all(
        isinstance(k, str) and isinstance(v, list) and v and all(type(x) is int for x in v) for k, v in tiles.items())


def replay_enabled() -> bool:
    """Whether planned steps replay their recorded launches (see Tape): unless TFPLUS_OPENCL_REPLAY=0."""
    return os.environ.get("TFPLUS_OPENCL_REPLAY", "1") not in ("", "0")


def cache_dir() -> Path:
    """Where built programs and autotuning choices are kept."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfplus" / "opencl"


# -- devices -------------------------------------------------------------------------------------------------
@functools.cache
def _bind_pocl_now() -> None:
    """Load each system PoCL that the ICD files name with every symbol bound now, before the ICD loader loads it
    lazily. Debian's PoCL links LLVM dynamically; a symbol still unbound when TensorFlow has run a graph (which
    loads TensorFlow's own LLVM with RTLD_GLOBAL) binds to that LLVM, and every later build fails with "unknown
    target CPU" or the process dies. (The PoCL in pyopencl's wheel holds its LLVM inside.)"""
    where = Path(os.environ.get("OCL_ICD_VENDORS") or "/etc/OpenCL/vendors")
    for icd in ([where] if where.is_file() else sorted(where.glob("*.icd")) if where.is_dir() else []):
        try:
            library = icd.read_text().strip()
            if "pocl" in library:
                ctypes.CDLL(library, mode=os.RTLD_NOW)
        except OSError:  # unreadable, or not loadable here: the ICD loader reports it as it would have
            continue


def cl_devices() -> list:
    """Every OpenCL device of every platform, in platform order (the order of list_devices())."""
    if cl is None:
        return []
    _bind_pocl_now()
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD / no platform installed
        return []
    out = []
    for p in platforms:
        try:
            out.extend(p.get_devices())
        except cl.Error:  # a platform with no devices raises DEVICE_NOT_FOUND
            continue
    return out


def device_info(d) -> dict:
    fp16 = "cl_khr_fp16" in d.extensions.split()
    return {
        "platform": d.platform.name.strip(), "name": d.name.strip(),
        "type": cl.device_type.to_string(d.type), "global_mem_bytes": int(d.global_mem_size),
        "compute_units": int(d.max_compute_units), "max_work_group_size": int(d.max_work_group_size),
        "local_mem_bytes": int(d.local_mem_size), "fp16": fp16, "fp64": "cl_khr_fp64" in d.extensions.split(),
        "opencl_version": d.version.strip(), "driver_version": d.driver_version.strip(),
    }


def list_devices() -> list[dict]:
    """One dict per OpenCL device: index, platform, name, type, global_mem_bytes, compute_units,
    max_work_group_size, local_mem_bytes, fp16, fp64, opencl_version, driver_version."""
    return [{"index": i, **device_info(d)} for i, d in enumerate(cl_devices())]


def available() -> bool:
    """True when pyopencl is installed and at least one OpenCL device is present."""
    return bool(cl_devices())


# What a device's compiler must build for select() to take it by default.
PROBE = "__kernel void tfplus_probe(__global float *a) { a[0] = 1.0f; }"


@functools.cache
def build_error(device) -> str | None:
    """Why `device` cannot build a one-line program (its compiler's first error line), or None if it can. A PoCL
    whose LLVM predates the host CPU fails on every program ("unknown target CPU 'generic'": pyopencl's wheel bundles
    PoCL 3.0 with LLVM 14, which knows no AMD Zen 5), while another PoCL on the same host (Debian's, LLVM 15) works."""
    try:
        cl.Program(cl.Context([device]), PROBE).build()
    except cl.Error as e:
        lines = [ln.strip() for ln in str(e).splitlines() if "error" in ln.lower() and "clBuildProgram" not in ln]
        return lines[0] if lines else str(e).strip().splitlines()[-1]
    return None


def select(selector: str | None):
    devices = cl_devices()
    if not devices:
        raise RuntimeError("no OpenCL device found: install a GPU driver's OpenCL ICD, or PoCL for a CPU "
                           "device (pip install pocl-binary-distribution)")
    selector = selector or os.environ.get("TFPLUS_OPENCL_DEVICE") or None
    listing = "; ".join(f"{i}: {d.platform.name.strip()} / {d.name.strip()}" for i, d in enumerate(devices))
    if selector is None:
        gpus = [d for d in devices if d.type & cl.device_type.GPU]
        if gpus:
            return gpus[0]
        # Among CPU devices, the first whose compiler works: two PoCLs may be installed, one too old for this CPU.
        for d in devices:
            if build_error(d) is None:
                return d
        why = "; ".join(f"{i}: {d.platform.version.strip()} / {d.name.strip()}: {build_error(d)}"
                        for i, d in enumerate(devices))
        raise RuntimeError(f"no OpenCL device here can compile a kernel ({why}); a PoCL older than this CPU cannot "
                           "target it: install a newer PoCL (Debian/Ubuntu: apt install pocl-opencl-icd), or choose "
                           "a device with TFPLUS_OPENCL_DEVICE")
    selector = str(selector).strip()
    if selector.isdigit():
        i = int(selector)
        if i >= len(devices):
            raise ValueError(f"OpenCL device {i} does not exist; devices: {listing}")
        return devices[i]
    for d in devices:
        if selector.lower() in f"{d.platform.name} {d.name}".lower():
            return d
    raise ValueError(f"no OpenCL device matches {selector!r}; devices: {listing}")
