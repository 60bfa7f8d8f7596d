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
cached yet, the threads hand most builds to child processes (TFPLUS_OPENCL_BUILD_PROCESSES, default up to 4):
NVIDIA's driver builds one program at a time per process. Ops with no OpenCL kernel raise
NotImplementedError unless TFPLUS_OPENCL_FALLBACK=1, Session(config={"allow_soft_placement": True}) or
`runtime.allow_fallback = True`: then they run their NumPy kernel on copies, and `placement_report()` lists
each such op with the bytes it moved. TFPLUS_OPENCL_PROFILE=1 records kernel times (`profile_report()`);
a traced Session.run (tfplus.profiler) runs on a queue with profiling on.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import hashlib
import importlib.resources
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tfplus import debug
from tfplus.runtime import size_class
from tfplus.runtime.base import Runtime

try:
    import pyopencl as cl
    import pyopencl.cltypes as cltypes
except ImportError:  # no pyopencl: available() is False and OpenCLRuntime() explains
    cl = None

# Values at most this big reach the device through the content cache: one device copy per distinct value.
_SMALL_BYTES = 1024
# Fed arrays at least this big (a batch) go up through pinned staging buffers (OpenCLRuntime._staged_upload), a
# ring of this many per size class: an upload of a step reuses the buffer of the upload that many feeds before.
_STAGED_BYTES = 1 << 18
_STAGING_RING = 4
_INT8 = None if cl is None else cltypes.int8


def shipped_tuning(device_name: str) -> dict:
    """The GEMM tiles the package ships for an OpenCL device of this name (kernels/opencl/tuning-gpu.json,
    written by tools/gen_program_lists.py --tuning on such a device): {problem key: tile}. JSON only; a file
    that is not {name: {str: [int, ...]}} is ignored."""
    try:
        text = importlib.resources.files("tfplus.kernels.opencl").joinpath("tuning-gpu.json").read_text()
    except OSError:
        return {}
    return parse_tuning(text, device_name)


def parse_tuning(text: str, device_name: str) -> dict:
    """shipped_tuning's reading of a tuning-gpu.json text: {} unless it is valid."""
    try:
        table = json.loads(text)
        table = table.get(device_name, {}) if isinstance(table, dict) else None
    except ValueError:
        return {}
    ok = isinstance(table, dict) and all(
        isinstance(k, str) and isinstance(v, list) and v and all(type(x) is int for x in v) for k, v in table.items())
    return dict(table) if ok else {}


def replay_enabled() -> bool:
    """Whether planned steps replay their recorded launches (see _Tape): unless TFPLUS_OPENCL_REPLAY=0."""
    return os.environ.get("TFPLUS_OPENCL_REPLAY", "1") not in ("", "0")


def cache_dir() -> Path:
    """Where built programs and autotuning choices are kept."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfplus" / "opencl"


# -- devices -------------------------------------------------------------------------------------------------
def _cl_devices() -> list:
    """Every OpenCL device of every platform, in platform order (the order of list_devices())."""
    if cl is None:
        return []
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


def _info(d) -> dict:
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
    return [{"index": i, **_info(d)} for i, d in enumerate(_cl_devices())]


def available() -> bool:
    """True when pyopencl is installed and at least one OpenCL device is present."""
    return bool(_cl_devices())


def _select(selector: str | None):
    devices = _cl_devices()
    if not devices:
        raise RuntimeError("no OpenCL device found: install a GPU driver's OpenCL ICD, or PoCL for a CPU "
                           "device (pip install pocl-binary-distribution)")
    selector = selector or os.environ.get("TFPLUS_OPENCL_DEVICE") or None
    listing = "; ".join(f"{i}: {d.platform.name.strip()} / {d.name.strip()}" for i, d in enumerate(devices))
    if selector is None:
        gpus = [d for d in devices if d.type & cl.device_type.GPU]
        return (gpus or devices)[0]
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


# -- buffers -------------------------------------------------------------------------------------------------
_CLASSES: dict[int, int] = {}  # nbytes -> size_class(nbytes)


class _Block:
    """Device memory behind one or more DeviceArrays (reshaped views share it). Kernels see it as (`buf`,
    `off`): a cl.Buffer and the byte offset of the first byte in it (see common.cl: GLOBAL, SHIFT). `buf` is
    made on first device use. A block with a `parent` owns no memory: it lies at byte `offset` of the parent's
    (a planned arena slot; rows of another array), which it keeps alive. `host` is a host copy of the contents
    when they came from the host (feeds, constants, shapes) — device kernels never write such a block, so the
    copy stays valid. `derived` marks contents computed without any fed value (constants, shapes, arithmetic
    on them): ops on such values may run on the host. `pool` gets `buf` back when the block dies."""

    __slots__ = ("buf", "off", "host", "derived", "cap", "pool", "parent", "offset", "__weakref__")

    def __init__(self, cap: int, pool=None, buf=None, host=None, parent=None, derived=False, offset=0):
        self.buf, self.host, self.cap, self.pool, self.parent = buf, host, cap, pool, parent
        self.derived, self.offset, self.off = derived, offset, 0
        if parent is not None and parent.buf is not None and host is None:
            self.buf, self.off = parent.buf, parent.off + offset

    def __del__(self):
        if self.pool is not None and self.buf is not None:
            self.pool.give(self.cap, self.buf)


def _home(b: _Block) -> tuple[_Block, int]:
    """The block owning b's memory and b's byte offset in it."""
    off = 0
    while b.parent is not None:
        off, b = off + b.offset, b.parent
    return b, off


class DeviceArray:
    """A tensor in device memory: .shape, .dtype (NumPy), .nbytes, and the _Block holding its bytes.
    Copy it to the host with `runtime.copy_out(a)`."""

    __slots__ = ("shape", "dtype", "block")

    def __init__(self, shape, dtype, block: _Block):
        self.shape, self.dtype, self.block = tuple(int(d) for d in shape), np.dtype(dtype), block

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def host(self) -> np.ndarray | None:
        """The host copy of the contents, when they were computed on the host; else None."""
        b = self.block
        h = b.host
        if h is not None and not b.derived and _taping.tape is not None:
            _taping.tape.refuse("a kernel read a fed or computed value on the host")  # it may differ next run
        return None if h is None else h.reshape(self.shape)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DeviceArray lives in OpenCL memory; copy it to the host with runtime.copy_out(a)")

    def __getitem__(self, index: slice) -> DeviceArray:
        """Rows `index` (a slice of the first axis, step 1) as a view of the same device memory: no copy.
        Used for batch slices (micro-batches, convolution chunks); its contents live on the device only.

            >>> rt.copy_out(rt.copy_in(np.arange(6.0).reshape(3, 2))[1:])   # doctest: +SKIP
            array([[2., 3.], [4., 5.]])
        """
        if not isinstance(index, slice) or not self.shape:
            raise TypeError(f"a DeviceArray of shape {self.shape} takes one slice of its rows (a[i:j]), "
                            f"not {index!r}")
        start, stop, step = index.indices(self.shape[0])
        if step != 1:
            raise ValueError(f"a DeviceArray row view needs step 1 (got {step}): rows must be contiguous")
        rows = max(stop - start, 0)
        row = self.nbytes // self.shape[0] if self.shape[0] else 0
        return DeviceArray((rows,) + self.shape[1:], self.dtype,
                           _Block(rows * row, parent=self.block, offset=start * row))

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"


class _Pool:
    """Freed device buffers by size class; reused before anything new is allocated."""

    def __init__(self, ctx):
        self.ctx, self.free = ctx, {}
        self.held_bytes = 0     # all buffers the pool made (in use or free)
        self.allocations = 0    # clCreateBuffer calls
        # The ledger of device memory in use by tensors (taken and not given back), and its peak; what the
        # runtime keeps for its life (graph constants, kernels' index tables) is counted apart, in cache_bytes.
        self.in_use_bytes = self.peak_in_use_bytes = self.cache_bytes = 0

    def take(self, cap: int, cache: bool = False):
        if cache:
            self.cache_bytes += cap
        else:
            self.in_use_bytes += cap
            self.peak_in_use_bytes = max(self.peak_in_use_bytes, self.in_use_bytes)
        bufs = self.free.get(cap)
        if bufs:
            return bufs.pop()
        self.allocations += 1
        self.held_bytes += cap
        # OpenCL has no empty buffers; a plan's arena is empty when no output needs one (a lone Identity).
        return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, max(cap, 1))

    def give(self, cap: int, buf) -> None:
        self.in_use_bytes -= cap
        self.free.setdefault(cap, []).append(buf)

    def trim(self) -> int:
        """Releases every free buffer; returns the bytes released."""
        n = sum(cap * len(b) for cap, b in self.free.items())
        self.free.clear()
        self.held_bytes -= n
        return n


# -- tapes: a program's launches, recorded once and replayed ------------------------------------------------
class _Taping(threading.local):
    tape: _Tape | None = None  # the tape this thread's launches are recorded on


_taping = _Taping()


class _Tape:
    """The kernel launches and device copies of one run of a compiled program (tfplus.executor), recorded by
    the runtime as the launchers make them, to be replayed without the launchers: each launch gets a kernel
    object of its own whose arguments are set once, so a replay is one enqueue per launch.

    A replay is right only if the next run would launch the same kernels on the same memory with the same
    scalars. The executor replays a tape only after two runs recorded the same one, and only for a planned
    arena (fixed buffers); recording refuses what a replay could not repeat (`refuse`): host reads of values
    that can change from run to run, device reads, host values written into planned buffers, random draws.
    The program's fed buffers may move between runs (each step's batch; micro-batches' rows): a launch
    argument inside a feed is recorded relative to it, and `play` points it at the feed's current place."""

    __slots__ = ("feeds", "fixed", "at", "items", "sig", "subs", "why", "launches")

    def __init__(self, feeds: list):
        self.feeds = feeds  # (buffer, offset, nbytes) of each feed while recording
        self.fixed: list = []  # where the buffers that must not move were (OpenCLRuntime.tape_begin)
        self.at = [(b, o) for b, o, _ in feeds]  # where the launches' feed arguments point now
        self.items: list = []  # ("k", Kernel, gsize, lsize, flat args) or ("c", dst, dst_off, src, src_off, n)
        self.sig: list = []  # what two recordings must agree on
        self.subs: list = []  # (item, argument position, feed, byte offset in the feed)
        self.why: str | None = None  # why it cannot be replayed
        self.launches = 0

    def refuse(self, why: str) -> None:
        if self.why is None:
            self.why = why

    def _where(self, item: int, pos: int, buf, off: int):
        """A buffer argument for the signature: (feed, offset in it), noted for `play`; else the buffer."""
        for i, (fb, fo, n) in enumerate(self.feeds):
            if buf is fb and fo <= off < fo + max(n, 1):
                self.subs.append((item, pos, i, off - fo))
                return ("feed", i, off - fo)
        return (id(buf), off)

    def launch(self, k, gsize, lsize, flat: list) -> None:
        item, sig = len(self.items), [k.name, gsize, lsize]
        pos = 0
        while pos < len(flat):
            a = flat[pos]
            if a is None or isinstance(a, cl.Buffer):  # a buffer and its byte offset: one entry
                sig.append(None if a is None else self._where(item, pos, a, flat[pos + 1]))
                pos += 2
                continue
            sig.append((a.dtype.str, a.tobytes()))
            pos += 1
        self.items.append(("k", k, gsize, lsize, list(flat)))
        self.sig.append(tuple(sig))
        self.launches += 1

    def copy(self, dst, dst_off: int, src, src_off: int, n: int) -> None:
        item = len(self.items)
        self.sig.append(("copy", self._where(item, 1, dst, dst_off), self._where(item, 3, src, src_off), n))
        self.items.append(["c", dst, dst_off, src, src_off, n])

    def same(self, other: _Tape) -> bool:
        return self.sig == other.sig

    def compile(self, queue) -> None:
        """Turns the recorded items into enqueue calls: kernels get a clone each, arguments set once."""
        calls = []
        for it in self.items:
            if it[0] == "k":
                _, k, gsize, lsize, flat = it
                kc = k.k.clone()
                for pos, a in enumerate(flat):
                    if type(a) is int:
                        a = np.uint64(a)  # a buffer's byte offset (common.cl: GLOBAL)
                    kc.set_arg(pos, a)
                calls.append((cl._cl.enqueue_nd_range_kernel, [queue, kc, gsize, lsize]))
            else:
                _, dst, dst_off, src, src_off, n = it
                calls.append((cl._cl._enqueue_copy_buffer, [queue, src, dst, n, src_off, dst_off]))
        self.items = calls

    def play(self, feeds: list) -> None:
        """Enqueues the recorded launches, with the feeds' arguments pointed at `feeds` (buffer, offset)."""
        if feeds != self.at:
            for item, pos, i, rel in self.subs:
                buf, off = feeds[i]
                fn, args = self.items[item]
                if fn is cl._cl._enqueue_copy_buffer:  # pos 1: dst, 3: src, as recorded
                    args[2 if pos == 1 else 1], args[5 if pos == 1 else 4] = buf, off + rel
                else:
                    args[1].set_arg(pos, buf)
                    args[1].set_arg(pos + 1, np.uint64(off + rel))
            self.at = list(feeds)
        for fn, args in self.items:
            fn(*args)


# -- programs ------------------------------------------------------------------------------------------------
class Kernel:
    """One kernel of a program: its program is built (or, when a build thread has it under way, waited for) when
    the kernel is asked for, or at its first launch when it was asked for under _Device.programs_of, which
    builds nothing. Scalar argument types are taken from the first call's NumPy scalars (launchers always pass
    the same types), after which pyopencl's generated invoker does the work."""

    __slots__ = ("name", "k", "typed", "dev", "program_key")

    def __init__(self, name: str, dev: _Device, program_key: tuple):
        self.name, self.k, self.typed, self.dev, self.program_key = name, None, False, dev, program_key

    def type_args(self, args) -> None:
        """`args` as launchers pass them: a DeviceArray (or None, no buffer) is two kernel arguments, the
        buffer and its byte offset (common.cl: GLOBAL)."""
        dev = self.dev
        if dev.recording is not None:  # _Device.programs_of: note the program, launch nothing
            dev.recording.append(self.program_key)
            raise _Recorded
        if self.k is None:
            self.resolve()
        types: list = []
        for a in args:
            types += [None, np.uint64] if isinstance(a, DeviceArray) or a is None else [a.dtype]
        self.k.set_scalar_arg_dtypes(types)
        self.typed = True

    def resolve(self) -> None:
        """Makes the cl.Kernel, building its program first if needed."""
        prg = self.dev.program(*self.program_key)
        try:
            self.k = cl.Kernel(prg, self.name)
        except cl.Error:
            raise RuntimeError(f"OpenCL program {'+'.join(self.program_key[0])} has no kernel "
                               f"{self.name!r}") from None


class _Recorded(Exception):
    """Ends a launcher run under _Device.programs_of at its first launch of a kernel not launched before."""


# Held while file descriptor 2 is redirected (_native_stderr) and while a build thread prints, so that a line
# printed by one thread is never swallowed by another thread's redirect.
_STDERR = threading.RLock()


@contextlib.contextmanager
def _native_stderr():
    """Collects what native code writes to file descriptor 2 meanwhile (PoCL's compiler prints '1 warning
    generated.' there, past Python's sys.stderr) into the one-element list it yields."""
    out = [""]
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no descriptor 2 to redirect (an embedded interpreter)
        yield out
        return
    with _STDERR, tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out[0] = tmp.read().decode(errors="replace")


def _quiet(background: bool):
    """_native_stderr() on the main thread; on a build thread nothing (fd 2 is the process's, not the thread's)."""
    return contextlib.nullcontext([""]) if background else _native_stderr()


class _CompileNotice:
    """Says on stderr that OpenCL programs are being compiled, how many and for how long: a first run on PoCL
    compiles dozens of programs for tens of seconds, which would otherwise look like a hang. A line when
    compiling starts, then the count and the time so far every few seconds of compiling. Builds run on
    several threads at once (_Device.prebuild): `seconds` is the wall-clock time during which at least one
    was compiling, not the sum of their times."""

    EVERY_S = 5.0

    def __init__(self):
        self.count, self._busy, self._shown = 0, 0.0, 0.0
        self._active, self._since, self._lock = 0, 0.0, threading.Lock()

    @property
    def seconds(self) -> float:
        with self._lock:
            return self._busy + (time.perf_counter() - self._since if self._active else 0.0)

    def start(self, device: str) -> None:
        with self._lock:
            first = self.count == 0 and self._active == 0 and self._busy == 0.0
            self._active += 1
            if self._active == 1:
                self._since = time.perf_counter()
        if first:
            with _STDERR:
                print(f"tfplus: compiling OpenCL kernels for {device} (once: later runs load them from "
                      f"{cache_dir()})", file=sys.stderr, flush=True)

    def summary(self) -> str | None:
        """One line on what compiling cost so far (None if nothing was compiled)."""
        if not self.count:
            return None
        return (f"built {self.count} OpenCL program{'s' * (self.count != 1)} (first run on this device): "
                f"{self.seconds:.1f} s")

    def done(self, built: bool = True) -> None:
        with self._lock:
            self.count += built
            self._active -= 1
            if self._active == 0:
                self._busy += time.perf_counter() - self._since
            count = self.count
        seconds = self.seconds
        if seconds - self._shown >= self.EVERY_S:
            self._shown = seconds
            with _STDERR:
                print(f"tfplus: compiled {count} OpenCL program{'s' * (count != 1)} in {seconds:.1f} s",
                      file=sys.stderr, flush=True)


def _std(d) -> str:
    """The -cl-std option of device `d`: OpenCL C 1.2 where the device has it."""
    ver = d.version.split()[1] if len(d.version.split()) > 1 else "1.1"
    c_ver = d.opencl_c_version.split()[2] if hasattr(d, "opencl_c_version") else ver
    return "-cl-std=CL1.2" if tuple(int(x) for x in c_ver.split(".")[:2]) >= (1, 2) else ""


def _program_source(d, files: tuple[str, ...], options: str) -> tuple[str, str, Path]:
    """The source of program (files, options) on device `d` (common.cl first), its build options, and where
    its built binary is cached: a file named by the sha256 of source, options, device and driver."""
    pkg = importlib.resources.files("tfplus.kernels.opencl")
    src = "".join(f"// ---- {f}\n{pkg.joinpath(f).read_text()}\n" for f in ("common.cl",) + files)
    extra = os.environ.get("TFPLUS_OPENCL_BUILD_OPTIONS", "")
    opts = " ".join(x for x in (_std(d), options, extra) if x)
    digest = hashlib.sha256("\0".join([src, opts, d.platform.name, d.name, d.version, d.driver_version,
                                       cl.VERSION_TEXT]).encode()).hexdigest()
    return src, opts, cache_dir() / f"{digest}.bin"


def _merge_wants(keys, built) -> tuple[list, dict]:
    """The programs to build for `keys` (less those in `built`), where keys that differ only in their -DWANT_
    flags (kernels of one .cl file for one dtype and defines) become one program with all their flags: a build
    has a fixed cost (NVIDIA H100: ~60 ms for a one-line kernel), and 40 programs of Mentee's step become 30.
    Returns (programs, {key: the merged program that holds its kernels})."""
    groups: dict = {}
    for files, options in keys:
        if (files, options) in built:
            continue
        base = " ".join(o for o in options.split() if not o.startswith("-DWANT_"))
        groups.setdefault((files, base), []).append(options)
    todo, merged = [], {}
    for (files, base), members in groups.items():
        if len(members) == 1:
            todo.append((files, members[0]))
            continue
        wants = sorted({o for m in members for o in m.split() if o.startswith("-DWANT_")})
        key = (files, " ".join([base] + wants))
        merged.update({(files, m): key for m in members})
        todo.append(key)
    return todo, merged


def _build_processes(d) -> int:
    """How many child processes may build programs for device `d` at once: NVIDIA's driver builds one program
    at a time per process (threads add ~1.3x), so a GPU's first run builds in children, each with its own
    context (TFPLUS_OPENCL_BUILD_PROCESSES; default: a quarter of the cores, at most 4, on a GPU; none on a
    CPU device, whose compiler would take the cores the step needs)."""
    env = os.environ.get("TFPLUS_OPENCL_BUILD_PROCESSES", "")
    if env.strip().isdigit():
        return int(env)
    if env.strip():
        raise ValueError(f"TFPLUS_OPENCL_BUILD_PROCESSES={env!r}: expected a count of processes, e.g. 4 "
                         "(0: build on threads of this process)")
    return min(4, (os.cpu_count() or 1) // 4) if d.type & cl.device_type.GPU else 0


class _Builder:
    """A child process (tfplus.runtime._opencl_build) that builds programs of one device into the disk cache
    when asked: the parent then loads each binary, which on NVIDIA also finds the driver's JIT of it in the
    driver's own cache (CUDA_CACHE_PATH), so a program's build costs the parent ~1 ms. Started before the
    parent makes its context, so that the child's (~0.3-2 s) overlaps it."""

    def __init__(self, index: int):
        # Run from the folder that holds this process's tfplus, which `-m` puts first on the child's path: from
        # the caller's folder, a tfplus source checkout there (its tfplus/ without the installed package's ops
        # and kernels) was imported instead, the child failed, and the parent built everything itself (the
        # first step of `tfplus train` run in a checkout took 5-6 s instead of 3 on an H100).
        cmd = [sys.executable, "-m", "tfplus.runtime._opencl_build", str(index)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, cwd=Path(__file__).resolve().parents[2])
        self.ready: bool | None = None  # None until the child says whether it made its context

    def wait_ready(self) -> bool:
        """Whether the child made its context (waits for it to say so)."""
        if self.ready is None:
            try:
                self.ready = self.proc.stdout.readline().strip() == "ready"
            except (OSError, ValueError):
                self.ready = False
        return self.ready

    def build(self, files: tuple[str, ...], options: str) -> bool:
        """Whether the child built (files, options) into the cache; False once it failed or ended."""
        try:
            if not self.wait_ready():
                return False
            self.proc.stdin.write(json.dumps([list(files), options]) + "\n")
            self.proc.stdin.flush()
            if self.proc.stdout.readline().strip() == "ok":
                return True
        except (OSError, ValueError):  # the child ended: a broken pipe, or a closed file
            pass
        self.ready = False
        return False

    def close(self) -> None:
        """Ends the child (it exits when its input ends) and waits for it."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class _Builds:
    """Programs being built on background threads, in the order they were asked for: clBuildProgram releases
    the GIL, and OpenCL lets threads build different programs of one context at once. Threads are daemons that
    end when the queue is empty; at exit, queued builds are dropped and running ones waited for, so that no
    thread is inside the driver while the process ends."""

    THREADS = min(8, os.cpu_count() or 1)

    def __init__(self, build):
        self.build = build                   # (files, options, background, builder) -> program
        self.lock = threading.Lock()
        self.queue: dict = {}                # key -> True, in order: not started
        self.running: dict = {}              # key -> threading.Event, set when its build ends
        self.done: dict = {}                 # key -> program, or the exception its build raised
        self.threads: list = []
        atexit.register(self.stop)

    def start(self, keys, builders=()) -> int:
        """Queues the builds of `keys` (those not already queued, running or done); returns how many. Each of
        `builders` (child processes, _Builder) gets a thread that hands it queued builds once it is ready;
        beside them, threads of this process build (two: the driver builds one program at a time per process
        anyway, and they load what the children built)."""
        with self.lock:
            new = [k for k in keys if k not in self.queue and k not in self.running and k not in self.done]
            self.queue.update(dict.fromkeys(new, True))
            local = min(self.THREADS, len(self.queue), 2 if builders else self.THREADS)
            for b in builders:
                self._thread(b)
            while sum(t.name == "tfplus-opencl-build" for t in self.threads) < local:
                self._thread(None)
        return len(new)

    def _thread(self, builder) -> None:
        t = threading.Thread(target=self._work, args=(builder,), daemon=True,
                             name="tfplus-opencl-build" + ("-child" if builder else ""))
        self.threads.append(t)
        t.start()

    def claim(self, key) -> bool:
        """Whether `key` was queued and not started: it is dropped from the queue, for the caller to build."""
        with self.lock:
            return bool(self.queue.pop(key, False))

    def take(self, key):
        """The program of `key` built here (waiting for it if its build is running); None if none was
        started (it is dropped from the queue: the caller builds it now) or its build failed (the caller
        builds it again, which raises with the build log)."""
        with self.lock:
            if self.queue.pop(key, False):
                return None
            ev = self.running.get(key)
        if ev is not None:
            ev.wait()
        with self.lock:
            out = self.done.pop(key, None)
        return None if isinstance(out, Exception) else out

    def _work(self, builder) -> None:
        # A child takes no build before its context is made: threads of this process take them meanwhile.
        ready = builder is None or builder.wait_ready()
        while True:
            with self.lock:
                if not self.queue or not ready:
                    self.threads.remove(threading.current_thread())
                    break
                key = next(iter(self.queue))
                del self.queue[key]
                ev = self.running[key] = threading.Event()
            try:
                out = self.build(*key, background=True, builder=builder)
            except Exception as e:  # noqa: BLE001  kept for take(): the caller's own build reports it
                out = e
            with self.lock:
                self.done[key] = out
                del self.running[key]
            ev.set()
        if builder is not None:
            builder.close()

    def stop(self) -> None:
        with self.lock:
            self.queue.clear()
            threads = list(self.threads)
        for t in threads:
            t.join()


# A program list's options are -D defines only (values such as 64, float, -INFINITY, (-2147483647-1)): nothing
# read from a list file reaches the compiler but macros.
_DEFINE = re.compile(r"-D[A-Za-z_]\w*=[\w.()+-]+\Z")


def _cl_files() -> frozenset:
    pkg = importlib.resources.files("tfplus.kernels.opencl")
    return frozenset(p.name for p in pkg.iterdir() if p.name.endswith(".cl"))


def read_program_list(path, name: str) -> list[tuple[tuple[str, ...], str]]:
    """The (files, options) program keys listed under `name` in the JSON file at `path` (a dict: name -> list
    of [[.cl file, ...], options]); [] when the file is missing or unreadable, or when anything in it is not
    such a key: files must be the package's .cl files and options -DNAME=VALUE defines."""
    try:
        data = json.loads(Path(path).read_text())
        entries = data.get(name, []) if isinstance(data, dict) else None
        known, keys = _cl_files(), []
        for files, options in entries:
            if not (isinstance(files, list) and files and all(f in known for f in files)
                    and isinstance(options, str) and all(_DEFINE.match(o) for o in options.split())):
                raise ValueError(f"not a program key: {[files, options]!r}")
            keys.append((tuple(files), options))
        return keys
    except (OSError, ValueError, TypeError, AttributeError) as e:
        if debug.level() >= 1 and not isinstance(e, FileNotFoundError):
            print(f"tfplus: ignoring the OpenCL program list {path}: {e}", file=sys.stderr)
        return []


def write_program_list(path, name: str, keys) -> None:
    """Sets `name`'s list in the JSON file at `path` to `keys` (other names' lists are kept); atomic."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data[name] = [[list(files), options] for files, options in keys]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    os.replace(tmp, path)


def prebuild(selector: str | None, name: str, from_start: bool = False) -> int:
    """Starts building, on background threads, the OpenCL programs that the work called `name` (e.g.
    "train-mentee") used the last time it ran on this device (the list record() kept in cache_dir()), else
    those the package lists for `name` on this kind of device (kernels/opencl/programs-<cpu|gpu>.json, made by
    tools/gen_program_lists.py). Launchers then find their programs built or building. Returns how many builds
    were started; 0 with TFPLUS_OPENCL_PREBUILD=0, or with no OpenCL device (the runtime reports that when it
    is made).

        >>> opencl.prebuild(None, "train-mentee")     # doctest: +SKIP
        30
    """
    if os.environ.get("TFPLUS_OPENCL_PREBUILD", "1") == "0" or cl is None:
        return 0
    with _Device._making:
        builders = []
        try:
            d = _select(selector)
            keys = _program_list(d, name)
            builders = [] if d.int_ptr in _Device._all else _start_builders(d, keys)
            dev = _Device.get(d)
        except (RuntimeError, ValueError, cl.Error):
            for b in builders:
                b.close()
            return 0
        return dev.prebuild_named(name, from_start, builders, keys)


def _program_list(d, name: str) -> list:
    """The programs `name` used last time on device `d` (record()), else the package's list for its kind."""
    keys = read_program_list(_programs_path(d), name)
    if not keys:
        kind = "gpu" if d.type & cl.device_type.GPU else "cpu"
        keys = read_program_list(importlib.resources.files("tfplus.kernels.opencl") / f"programs-{kind}.json",
                                 name)
    return keys


def _programs_path(d) -> Path:
    """Where record() keeps device `d`'s program lists: keyed by platform and device name, not driver, so that a
    new driver (whose cached binaries no longer load) still finds what to build."""
    return cache_dir() / f"programs-{hashlib.sha256(f'{d.platform.name}|{d.name}'.encode()).hexdigest()[:16]}.json"


def _start_builders(d, keys) -> list:
    """Child processes (_Builder) for device `d`, one per four of `keys`' programs not in the disk cache, up to
    _build_processes(d); [] when they cannot start."""
    try:
        most = _build_processes(d)
    except ValueError as e:  # on prebuild's thread: said, not raised, and the threads build
        print(f"tfplus: {e}; building on threads", file=sys.stderr, flush=True)
        return []
    todo, _ = _merge_wants(keys, ())
    n = min(most, sum(not _program_source(d, *k)[2].exists() for k in todo) // 4)
    if n == 0:
        return []
    index = [x.int_ptr for x in _cl_devices()].index(d.int_ptr)
    try:
        return [_Builder(index) for _ in range(n)]
    except OSError:  # no interpreter to start (a frozen app): threads of this process build
        return []


def prebuild_soon(selector: str | None, name: str) -> threading.Thread:
    """prebuild() on a daemon thread, so that making the device's context (~2 s on an H100: CUDA's start) and
    queueing the builds overlap what the caller does meanwhile (loading data, building a graph); a runtime
    made meanwhile waits for that context rather than making another. Returns the thread."""
    # from_start: the caller may use programs before this thread lists `name`; record() keeps those too.
    t = threading.Thread(target=prebuild, args=(selector, name, True), name="tfplus-opencl-prebuild", daemon=True)
    t.start()
    return t


def record(runtime: OpenCLRuntime, name: str) -> None:
    """Keeps the programs `runtime`'s device was first asked for since prebuild(..., name) as `name`'s list in
    cache_dir(), for the next prebuild of `name` (`tfplus train` records "train-<model>" after its first step, what
    that step needs, and "eval-<model>" after its first evaluation, what the evaluation added)."""
    runtime.dev.record_programs(name)


class _Device:
    """What all runtimes of one OpenCL device share: context, queue, buffer pool, built programs, tuning."""

    _all: dict = {}
    # One context per device, also when prebuild_soon's thread is making it (held until its builds are queued,
    # so that a runtime made meanwhile finds them queued).
    _making = threading.RLock()

    @classmethod
    def get(cls, cl_device) -> _Device:
        key = cl_device.int_ptr
        with cls._making:
            if key not in cls._all:
                cls._all[key] = cls(cl_device)
        return cls._all[key]

    def __init__(self, d):
        self.device = d
        self.info = _info(d)
        self.ctx = cl.Context([d])
        self.queue = cl.CommandQueue(self.ctx, properties=(
            cl.command_queue_properties.PROFILING_ENABLE if os.environ.get("TFPLUS_OPENCL_PROFILE") else 0))
        self.pool = _Pool(self.ctx)
        # Its sessions' steps take turns: a launch sets its kernel object's arguments, shared by the device's
        # runtimes, and a tape records the launches of this thread's step alone.
        self.step_lock = threading.RLock()
        self.profiling_queue = None  # made on the first traced run (tfplus.profiler)
        self.programs: dict = {}
        self.kernels: dict = {}
        self.small: dict = {}     # (dtype, bytes) -> device buffer holding those bytes (read-only)
        self.tables: dict = {}    # key -> DeviceArray: kernels' lookup tables
        self.staging: dict = {}   # size class -> pinned upload buffers (OpenCLRuntime._staged_upload)
        self.is_gpu = bool(d.type & cl.device_type.GPU)
        self.max_wg = int(d.max_work_group_size)
        self.align = max(1, int(d.mem_base_addr_align) // 8)
        ident = "|".join([d.platform.name, d.platform.version, d.name, d.version, d.driver_version])
        self.key = hashlib.sha256(ident.encode()).hexdigest()[:16]
        self.tuning_path = cache_dir() / f"tuning-{self.key}.json"
        self.tuning: dict = {}
        try:
            self.tuning = json.loads(self.tuning_path.read_text())
        except (OSError, ValueError):
            # A fresh machine: the tiles shipped for this device's name, if any (a first step need not spend
            # TFPLUS_OPENCL_TUNE_S timing candidates); what it tunes beyond them is saved as its own.
            self.tuning = shipped_tuning(d.name) if self.is_gpu else {}
        self.programs_path = _programs_path(d)
        self.used: list = []      # (files, options) keys in the order this process first asked for them
        self.listed_from: dict = {}  # name -> len(used) when prebuild_named(name) was called
        self.merged: dict = {}    # (files, options) -> the key of the prebuilt program that also holds its kernels
        self.builds = _Builds(self._build)
        self.recording: list | None = None  # programs_of() collects program keys here
        self.tune_seconds = 0.0   # choosing tiles (kernels/opencl/_tune.py), compiles included
        self.compiling = _CompileNotice()
        if debug.level() >= 1:
            print(f"tfplus: opencl device {self.info['platform']} / {self.info['name']} "
                  f"({self.info['opencl_version']}, driver {self.info['driver_version']})", file=sys.stderr)

    # -- programs -------------------------------------------------------------------------------------------
    def program(self, files: tuple[str, ...], options: str):
        key = (files, options)
        prg = self.programs.get(key)
        if prg is None:
            self.used.append(key)
            merged = self.merged.get(key)
            if merged is not None:  # a failed merged build (None) falls back to this key's own
                prg = self.programs.get(merged)
                if prg is None and self.builds.claim(merged):
                    # Not started yet: built here with all its kernels, not as this key's own (its other
                    # kernels would each need a build of their own, which the driver does one at a time).
                    try:
                        prg = self._build(*merged)
                    except Exception:  # noqa: BLE001  kernels that clash in one program: each builds alone
                        prg = None
                elif prg is None:
                    prg = self.builds.take(merged)
                if prg is not None:
                    self.programs[merged] = prg
            prg = self.programs[key] = prg or self.builds.take(key) or self._build(files, options)
        return prg

    def prebuild(self, keys, builders=()) -> int:
        """Starts building programs `keys` ((files, options) as program() takes them) on background threads,
        and in `builders` (child processes, _Builder) if given; program() waits for one that is building, and
        builds one that has not started itself. Returns how many builds were started. Keys that differ only
        in their -DWANT_ flags are built as one program (_merge_wants); the GEMM-based ones (the longest
        builds) go first, so that no long build starts last."""
        todo, merged = _merge_wants(keys, self.programs)
        self.merged.update(merged)
        todo.sort(key=lambda k: "gemm.cl" not in k[0])  # stable: first use order otherwise
        return self.builds.start(todo, builders)

    def prebuild_named(self, name: str, from_start: bool = False, builders=(), keys=None) -> int:
        """prebuild() of the programs listed under `name` (see the module function prebuild; `keys`: that list,
        if read already); record_programs(name) later keeps the programs used since now, or since the device
        was made if `from_start`."""
        self.listed_from[name] = 0 if from_start else len(self.used)
        return self.prebuild(_program_list(self.device, name) if keys is None else keys, builders)

    def record_programs(self, name: str) -> None:
        """Keeps the programs first asked for since prebuild_named(name) as `name`'s list in the cache directory
        (not those of anything the process ran before)."""
        keys = self.used[self.listed_from.get(name, 0):]
        if keys:
            try:
                write_program_list(self.programs_path, name, keys)
            except OSError:  # a read-only cache directory: no list, programs are built as asked for
                pass

    def programs_of(self, fn, *args) -> list:
        """The programs whose kernels `fn(*args)` launches, up to its first launch of a kernel not launched
        before: that launch and what follows it are skipped, and nothing is built (the tuner lists its
        candidates' programs this way, to build them all at once)."""
        self.recording = []
        try:
            fn(*args)
        except _Recorded:
            pass
        finally:
            keys, self.recording = self.recording, None
        return keys

    def _build(self, files: tuple[str, ...], options: str, background: bool = False, builder=None):
        """The program of `files` (after common.cl) built with `options`: from the disk cache's binary, else
        from source (cached). `background`: on a build thread, where file descriptor 2 is left alone (the
        main thread's output would go with the compiler's). `builder`: a child process (_Builder) asked to
        build it into the cache first."""
        d = self.device
        src, opts, path = _program_source(d, files, options)
        what = f"{'+'.join(files)} [{opts}] for {self.info['name']}"
        if builder is not None and not path.exists():
            self.compiling.start(self.info["name"])
            self.compiling.done(built=builder.build(files, options))
        if path.exists():
            try:
                prg = cl._cl._Program(self.ctx, [d], [path.read_bytes()])
                with warnings.catch_warnings(), _quiet(background):
                    warnings.simplefilter("ignore", cl.CompilerWarning)
                    prg.build(opts.encode(), [d])
                return prg
            except cl.Error:  # a stale or foreign binary: rebuild from source below
                pass
        if debug.level() >= 3:
            print(f"tfplus: building {what}\n{src}", file=sys.stderr)
        prg = cl._cl._Program(self.ctx, src)
        self.compiling.start(self.info["name"])
        # NOTE: a build thread cannot catch what PoCL's compiler prints on fd 2 (the process's, not the
        # thread's), so it builds with warnings off; the code is the same, so the digest above leaves -w out.
        build_opts = f"{opts} -w" if background and debug.level() < 3 else opts
        try:
            # Compiler chatter (e.g. always-false compares in an int build) goes to the build log, which
            # TFPLUS_DEBUG=3 shows: not the Python warnings, nor what PoCL's compiler prints on stderr.
            with warnings.catch_warnings(), _quiet(background) as chatter:
                warnings.simplefilter("ignore", cl.CompilerWarning)
                prg.build(build_opts.encode(), [d])
        except cl.Error as e:
            self.compiling.done(built=False)
            try:
                log = prg.get_build_info(d, cl.program_build_info.LOG)
            except cl.Error:
                log = str(e)
            raise RuntimeError(f"OpenCL build of {what} failed:\n{log.strip() or e}") from None
        if debug.level() >= 3:
            print(f"tfplus: build log of {what}:\n{prg.get_build_info(d, cl.program_build_info.LOG)}"
                  f"{chatter[0]}", file=sys.stderr)
        self.compiling.done()
        try:
            binary = prg.get_info(cl.program_info.BINARIES)[0]
            if binary:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")  # builds run on threads
                tmp.write_bytes(binary)
                os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
        except (OSError, cl.Error):  # a read-only home or a device that gives no binaries: memory cache only
            pass
        return prg

    def kernel(self, files: tuple[str, ...], name: str, options: str) -> Kernel:
        """Kernel `name` of program (files, options), built now (at its first launch under programs_of)."""
        key = (files, name, options)
        k = self.kernels.get(key)
        if k is None:
            k = Kernel(name, self, (files, options))
            if self.recording is None:
                k.resolve()
            self.kernels[key] = k
        return k

    def save_tuning(self) -> None:
        try:
            self.tuning_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.tuning_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.tuning, indent=1, sort_keys=True))
            os.replace(tmp, self.tuning_path)
        except OSError:
            pass


# -- the runtime ---------------------------------------------------------------------------------------------
class OpenCLRuntime(Runtime):
    """One OpenCL device (tfplus.runtime.base.Runtime).

    Runtimes of one device share its context, queue, buffer pool and programs; each counts its own traffic:
    `h2d_bytes`, `d2h_bytes` (bytes moved), `allocated_bytes` (bytes handed out by allocate).
    """

    name = "opencl"
    kernel_device = "opencl"
    records_launches = True

    def __init__(self, selector: str | None = None):
        if cl is None:
            raise RuntimeError("the opencl device needs pyopencl: pip install pyopencl (and "
                               "pocl-binary-distribution "
                               "for a CPU device)")
        import tfplus.kernels.opencl  # noqa: F401  registers the OpenCL kernels
        self.dev = _Device.get(_select(selector))
        self.queue = self.dev.queue
        self.info = self.dev.info
        self.h2d_bytes = self.d2h_bytes = self.allocated_bytes = 0
        self.arena_alignment = self.dev.align
        self.allow_fallback = os.environ.get("TFPLUS_OPENCL_FALLBACK", "0") not in ("", "0")
        self.fallbacks: dict[str, dict] = {}   # node name -> {"op", "runs", "h2d_bytes", "d2h_bytes"}
        self._consts: dict[int, tuple] = {}    # id(Const value) -> (value, its block)
        self.plans: dict = {}  # launchers' per-shape launch plans (kernel, sizes, scalar arguments)
        self._uploads: collections.deque = collections.deque(maxlen=16)  # events of copy_in's uploads
        self.profile: list | None = [] if os.environ.get("TFPLUS_OPENCL_PROFILE") else None
        self.replay = replay_enabled()
        self.step_lock = self.dev.step_lock  # (the runtime interface: see cpu.py)

    # -- the interface the executor uses ---------------------------------------------------------------------
    def allocate(self, shape, dtype) -> DeviceArray:
        a = DeviceArray.__new__(DeviceArray)  # NOTE: the hot path of every op: no validation here
        a.shape, a.dtype = tuple(shape), np.dtype(getattr(dtype, "np", dtype))
        n = a.nbytes
        cap = _CLASSES.get(n) or _CLASSES.setdefault(n, size_class(n))
        a.block = _Block(cap, self.dev.pool)
        self.allocated_bytes += n
        return a

    def view(self, buf: DeviceArray, shape) -> DeviceArray:
        return DeviceArray(shape, buf.dtype, buf.block)

    def copy_in(self, array: np.ndarray) -> DeviceArray:
        array = np.asarray(array, order="C")  # NOTE: not ascontiguousarray, which makes 0-d arrays 1-d
        a = self.allocate(array.shape, array.dtype)
        if array.nbytes >= _STAGED_BYTES:  # a batch: through pinned memory, and no host copy kept
            b = a.block
            b.buf = self.dev.pool.take(b.cap)
            self._staged_upload(b.buf, array, b.cap)
            return a
        # Uploaded without waiting, so that feeding step k+1 does not wait for step k to finish (a blocking
        # write on an in-order queue would); small feeds too, or a batch's labels make every step a sync. Our
        # own copy: the caller may refill its array meanwhile.
        # NOTE: pyopencl's event holds the host array and waits for the copy when dropped: keep the last few.
        b = a.block
        b.host = np.array(array, copy=True)
        b.buf = self.dev.pool.take(b.cap)
        self._upload(b.buf, b.host, blocking=False)
        return a

    def _staged_upload(self, buf, array: np.ndarray, cap: int) -> None:
        """Uploads `array` into `buf` without waiting, through one of a few pinned host buffers of its size
        class (CL_MEM_ALLOC_HOST_PTR, mapped once): one copy into pinned memory, then a DMA. From pageable
        memory the driver stages the bytes itself inside the enqueue call, which took a step's host ~0.2 ms
        for a 1.5 MB batch on the H100 (before any kernel of the step could start)."""
        ring = self.dev.staging.setdefault(cap, collections.deque())
        if len(ring) < _STAGING_RING:
            pinned = cl.Buffer(self.dev.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, cap)
            view, _ = cl.enqueue_map_buffer(self.queue, pinned, cl.map_flags.WRITE, 0, (cap,), np.uint8,
                                            is_blocking=True)
            entry = [pinned, view, None]
        else:
            entry = ring.popleft()
            entry[2].wait()  # its last upload (steps ago) must be done before its bytes are overwritten
        host = entry[1][:array.nbytes].view(array.dtype).reshape(array.shape)
        np.copyto(host, array)
        entry[2] = cl.enqueue_copy(self.queue, buf, host, is_blocking=False)
        ring.append(entry)
        self.h2d_bytes += array.nbytes

    def copy_out(self, buf: DeviceArray) -> np.ndarray:
        if buf.block.host is not None:
            return np.array(buf.host, copy=True)
        out = np.empty(buf.shape, buf.dtype)
        if _taping.tape is not None:
            _taping.tape.refuse("a kernel read a device value on the host")
        if out.nbytes:
            cl.enqueue_copy(self.queue, out, self.buffer(buf), src_offset=buf.block.off, is_blocking=True)
            self.d2h_bytes += out.nbytes
        return out

    def synchronize(self) -> None:
        self.queue.finish()

    def profiling_queue(self):
        """A queue of this device with event profiling on, for traced runs (tfplus.profiler); the usual one
        has it off unless TFPLUS_OPENCL_PROFILE is set."""
        dev = self.dev
        if dev.profiling_queue is None:
            dev.profiling_queue = cl.CommandQueue(dev.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        return dev.profiling_queue

    @contextlib.contextmanager
    def timing(self):
        """Launches inside the block go to the profiling queue; yields the list of (kernel name, event) they
        add, all complete when the block ends (autotuning times by the GPU's clock: the host's would time the
        launches of a short kernel)."""
        queue, profile = self.queue, self.profile
        self.synchronize()  # the work queued before finishes on the old queue first
        self.queue, self.profile = self.profiling_queue(), []
        try:
            yield self.profile
        finally:
            self.synchronize()
            self.queue, self.profile = queue, profile

    def describe(self) -> str:
        i = self.info
        return f"opencl ({i['platform']} / {i['name']}, {i['opencl_version']}, driver {i['driver_version']})"

    # -- planner hooks: one arena, tensors at aligned offsets in it ------------------------------------------
    def allocate_arena(self, nbytes: int, alignment: int | None = None) -> DeviceArray:  # starts aligned
        a = DeviceArray((nbytes,), np.uint8, _Block(nbytes, self.dev.pool))  # its exact size: no size class
        self.buffer(a)
        self.allocated_bytes += nbytes
        return a

    def sub_buffer(self, arena: DeviceArray, offset: int, shape, dtype) -> DeviceArray:
        """A view of `arena` at byte `offset`: the arena's buffer and that offset, no cl sub-buffer (NVIDIA
        charges ~87 us per launch on overlapping sub-buffers, and the spec leaves a command using two of
        them undefined)."""
        dt = np.dtype(getattr(dtype, "np", dtype))
        if offset % self.dev.align:
            # The planner aligns every slot to arena_alignment; kernels may rely on it (see common.cl).
            raise ValueError(f"arena offset {offset} is not a multiple of the arena alignment {self.dev.align}")
        a = DeviceArray(shape, dt, None)
        self.buffer(arena)
        a.block = _Block(a.nbytes, parent=arena.block, offset=offset)
        return a

    # -- micro-batching (tfplus.planner.execute) --------------------------------------------------------------
    def copy_rows(self, dst: DeviceArray, dst_row: int, src: DeviceArray, src_row: int, rows: int) -> None:
        """dst[dst_row:dst_row + rows] = src[src_row:src_row + rows] on the device (same row size)."""
        if rows:
            self.copy(dst[dst_row:dst_row + rows], src[src_row:src_row + rows])

    def add_into(self, acc: DeviceArray, x: DeviceArray) -> None:
        """acc += x (same shape)."""
        from tfplus.kernels.opencl.elementwise import binary
        binary(self, "add", acc, acc, x)

    def scale(self, acc: DeviceArray, factor: float) -> None:
        """acc *= factor."""
        from tfplus.kernels.opencl.elementwise import scale
        scale(self, acc, factor)

    def accumulate(self, accs: list, xs: list | None, how: str, factor: float = 1.0) -> None:
        """copy / add_into / scale / add_into then scale ("copy", "add", "scale", "add_scale") of many tensors
        at once: one launch when they share a buffer (a plan's arena), else a launch per eight."""
        from tfplus.kernels.opencl.fused import multi_accumulate
        multi_accumulate(self, accs, xs, how, factor)

    def accumulation(self, accs: list, xs: list | None, how: str, factor: float = 1.0):
        """accumulate(...) now, recorded: the callable it returns repeats it on the same buffers with a bare
        enqueue per launch (a micro-batched step's merges, tfplus.planner.execute); None when this runtime does
        not record now (as tape_begin)."""
        if not self.tape_begin([], []):
            self.accumulate(accs, xs, how, factor)
            return None
        try:
            self.accumulate(accs, xs, how, factor)
        finally:
            tape = self.tape_end([])
        if isinstance(tape, str):
            return None
        self.tape_ready(tape)
        return lambda: tape.play([])

    # -- tapes (tfplus.executor replays a planned program's launches) -----------------------------------------
    def tape_begin(self, feeds: list, fixed: list) -> bool:
        """Starts recording this thread's launches on a tape; `feeds`: the run's fed buffers, `fixed`: buffers
        that must stay where they are for a replay (variables). False when this runtime does not record now
        (a profiled queue, TFPLUS_OPENCL_REPLAY=0, a tape already recording)."""
        if self.profile is not None or not self.replay or _taping.tape is not None:
            return False
        tape = _taping.tape = _Tape([(self.buffer(f), f.block.off, f.nbytes) for f in feeds])
        tape.fixed = self._places(fixed)
        return True

    def tape_end(self, fetched: list) -> _Tape | str:
        """The tape recorded since tape_begin, or why it cannot be replayed. `fetched`: the buffers the run
        returns, which must not be fed ones (a replay returns the recorded buffers)."""
        tape, _taping.tape = _taping.tape, None
        fed = {id(b) for b, _, _ in tape.feeds}
        if any(f is not None and id(f.block.buf) in fed for f in fetched):
            tape.refuse("the run returns a fed value")
        return tape if tape.why is None else tape.why

    @staticmethod
    def tape_recording() -> bool:
        """Whether this thread's launches go on a tape now (a replay then would enqueue past it)."""
        return _taping.tape is not None

    @staticmethod
    def tape_refuse(why: str) -> None:
        """Marks the tape being recorded (if any) as not replayable, e.g. for a random op's draw."""
        if _taping.tape is not None:
            _taping.tape.refuse(why)

    def tape_ready(self, tape: _Tape) -> None:
        """Makes `tape` replayable (a kernel object per launch, its arguments set)."""
        tape.compile(self.queue)

    def tape_play(self, tape: _Tape, feeds: list, fixed: list | None) -> bool:
        """Replays a ready `tape` with the run's `feeds`; False (nothing done) when a `fixed` buffer moved
        (None: the caller knows none did)."""
        if fixed is not None and self._places(fixed) != tape.fixed:
            return False
        tape.play([(self.buffer(f), f.block.off) for f in feeds])
        return True

    def _places(self, arrays: list) -> list:
        return [(id(self.buffer(a)), a.block.off) for a in arrays]

    # -- kernels ---------------------------------------------------------------------------------------------
    def kernel(self, files, name: str, options: str = "") -> Kernel:
        """Kernel `name` of the program built from `files` (a .cl name or a tuple, after common.cl)."""
        return self.dev.kernel(files if isinstance(files, tuple) else (files,), name, options)

    def run(self, k: Kernel, gsize: tuple, lsize: tuple | None, *args) -> None:
        """Enqueues kernel `k` over `gsize` work-items (rounded up to `lsize` multiples by the caller).
        DeviceArray arguments become their buffers; scalars must be NumPy scalars."""
        if 0 in gsize:
            return
        if not k.typed:
            k.type_args(args)
        flat: list = []
        add = flat.append
        for a in args:  # NOTE: the hot path of every launch: (buffer, offset) per DeviceArray, inline
            if type(a) is DeviceArray:
                b = a.block
                if b.buf is None:
                    self._materialize(b)
                add(b.buf)
                add(b.off)
            elif a is None:
                add(None)
                add(0)
            else:
                add(a)
        ev = k.k(self.queue, gsize, lsize, *flat)
        tape = _taping.tape
        if tape is not None:
            tape.launch(k, gsize, lsize, flat)
        if self.profile is not None:
            self.profile.append((k.name, ev))

    def run1d(self, k: Kernel, n: int, *args, local: int = 256) -> None:
        """`k` over n work-items in groups of `local` (the kernel checks i < n)."""
        self.run(k, *self.grid1d(n, local), *args)

    def grid1d(self, n: int, local: int = 256) -> tuple[tuple, tuple]:
        """(global, local) sizes of n work-items in groups of `local` (at most the device's limit)."""
        local = min(local, self.dev.max_wg)
        return (-(-n // local) * local,), (local,)

    def buffer(self, a: DeviceArray):
        """The cl.Buffer holding `a` (at byte a.block.off), made (and filled from its host copy) on first use."""
        b = a.block
        if b.buf is None:
            self._materialize(b)
        return b.buf

    def _materialize(self, b: _Block) -> None:
        host = b.host
        small = host is not None and b.derived and host.nbytes <= _SMALL_BYTES
        if b.parent is not None:  # in another block's memory: an arena slot, rows of an array
            if small:  # a host value (set_host), read by a kernel now: the cached copy waits for nothing
                b.buf, b.off = self._small(host), 0
                return
            p = b.parent
            if p.buf is None:
                self._materialize(p)
            b.buf, b.off = p.buf, p.off + b.offset
            if host is not None:
                if _taping.tape is not None:  # a replay would not write it, and later ops reuse the slot
                    _taping.tape.refuse("a host value was written into a planned buffer")
                self._upload(b.buf, host, b.off)
            return
        if host is None:
            b.buf = self.dev.pool.take(b.cap)
            return
        if small:  # constants and shapes: few distinct values
            b.buf, b.pool = self._small(host), None  # shared and read-only: never back to the pool
            return
        b.buf = self.dev.pool.take(b.cap, cache=b.pool is None)  # no pool to go back to: kept for good
        self._upload(b.buf, host)

    def _small(self, host: np.ndarray):
        """The device's read-only copy of a small derived value (constants, shapes), uploaded once."""
        key = (host.dtype.str, host.tobytes())
        buf = self.dev.small.get(key)
        if buf is None:
            buf = self.dev.small[key] = cl.Buffer(self.dev.ctx, cl.mem_flags.READ_WRITE, max(host.nbytes, 4))
            self._upload(buf, host)
        return buf

    def _upload(self, buf, host: np.ndarray, off: int = 0, blocking: bool = True) -> None:
        if host.nbytes:
            ev = cl.enqueue_copy(self.queue, buf, np.asarray(host, order="C"), dst_offset=off, is_blocking=blocking)
            if not blocking:
                self._uploads.append(ev)
            self.h2d_bytes += host.nbytes

    def constant(self, value: np.ndarray) -> _Block:
        """The block of a graph constant: one per value for the runtime's life, uploaded at first use."""
        hit = self._consts.get(id(value))
        if hit is None or hit[0] is not value:
            hit = self._consts[id(value)] = (value, _Block(size_class(value.nbytes), None, host=value,
                                                           derived=True))
        return hit[1]

    def table(self, key, make) -> DeviceArray:
        """A read-only table for kernels (e.g. convolution tap offsets): `make()` builds it on the host once
        per device and key; it is uploaded on first use and kept."""
        t = self.dev.tables.get(key)
        if t is None:
            host = np.asarray(make(), order="C")
            t = self.dev.tables[key] = DeviceArray(host.shape, host.dtype, _Block(
                size_class(host.nbytes), None, host=host, derived=True))
        return t

    def set_host(self, a: DeviceArray, value: np.ndarray, derived: bool = True) -> None:
        """Makes `a` hold `value`, computed on the host (from constants and shapes alone if `derived`); it
        goes to the device only if a device kernel reads it."""
        value = np.asarray(value, a.dtype, order="C").reshape(a.shape)
        if not derived and _taping.tape is not None:
            _taping.tape.refuse("a kernel computed a value on the host")
        b = a.block
        if b.parent is not None:
            # A planned arena slot stays where the plan put it; like any host value, it is written to the
            # device only if a device kernel reads it (buffer()), so host readers (shapes, axes) never wait.
            b.buf, b.host, b.derived = None, value, derived
            return
        a.block = _Block(b.cap, self.dev.pool, host=value, derived=derived)

    @staticmethod
    def held_apart(a: DeviceArray) -> bool:
        """Whether `a`'s value lives apart from any planned arena, so that later ops writing the arena leave it
        alone: a block of its own (a constant), or a small host value, which kernels read through the content
        cache (_materialize), never from the arena slot."""
        b = a.block
        return b.parent is None or (b.host is not None and b.derived and b.host.nbytes <= _SMALL_BYTES)

    @staticmethod
    def fresh(a: DeviceArray) -> DeviceArray:
        """A planned arena slot about to be written again (planner.execute): what it held is forgotten."""
        b = a.block
        p = b.parent
        if p is not None:
            b.buf, b.off, b.host, b.derived = p.buf, p.off + b.offset, None, False
        return a

    def copy(self, dst: DeviceArray, src: DeviceArray) -> None:
        """dst[...] = src on the device (same number of bytes); nothing when dst is src's memory (a plan's
        in-place output)."""
        if src.nbytes and not self.same_memory(dst, src):
            d, s = self.buffer(dst), self.buffer(src)
            cl.enqueue_copy(self.queue, d, s, byte_count=src.nbytes, src_offset=src.block.off,
                            dst_offset=dst.block.off)
            tape = _taping.tape
            if tape is not None:
                tape.copy(d, dst.block.off, s, src.block.off, src.nbytes)

    @staticmethod
    def same_memory(a: DeviceArray, b: DeviceArray) -> bool:
        """Whether a and b start at the same device memory: one block, or one offset of one block's memory
        (a plan's output written over its input is another view of the input's arena slot)."""
        x, y = a.block, b.block
        return x is y or _home(x) == _home(y)

    def upload_into(self, a: DeviceArray, value: np.ndarray) -> None:
        """Writes host `value` into `a`'s device buffer now (counted in h2d_bytes)."""
        if _taping.tape is not None:
            _taping.tape.refuse("a host value was written into a device buffer")
        self._upload(self.buffer(a), np.asarray(value, a.dtype, order="C"), a.block.off)

    # -- fallback to the NumPy kernels ----------------------------------------------------------------------
    def fallback_kernel(self, op_type: str, dtype):
        """A kernel running op_type's cpu kernel on host copies, if fallback is enabled and one exists."""
        if not self.allow_fallback:
            return None
        from tfplus.registry import find_kernel
        cpu = find_kernel(op_type, "cpu", dtype)
        if cpu is None:
            return None
        from tfplus.kernels.opencl._common import run_on_host

        def kernel(ctx, ins, outs, attrs):
            before = (self.h2d_bytes, self.d2h_bytes)
            run_on_host(ctx, cpu, ins, outs, attrs, upload=True)
            rec = self.fallbacks.setdefault(ctx.op.name, {"op": op_type, "runs": 0, "h2d_bytes": 0,
                                                          "d2h_bytes": 0})
            if rec["runs"] == 0 and debug.level() >= 1:
                print(f"tfplus: {op_type} '{ctx.op.name}' has no opencl kernel: running its cpu kernel",
                      file=sys.stderr)
            rec["runs"] += 1
            rec["h2d_bytes"] += self.h2d_bytes - before[0]
            rec["d2h_bytes"] += self.d2h_bytes - before[1]
        return kernel

    def placement_report(self) -> str:
        """Every op that ran on the host instead of the device, with the bytes its copies moved."""
        if not self.fallbacks:
            return f"all ops ran on {self.describe()}"
        lines = [f"ops that fell back to the cpu (on {self.describe()}):",
                 f"{'node':40s} {'op':28s} {'runs':>5s} {'h2d bytes':>12s} {'d2h bytes':>12s}"]
        for name, r in sorted(self.fallbacks.items()):
            lines.append(f"{name:40s} {r['op']:28s} {r['runs']:5d} {r['h2d_bytes']:12d} {r['d2h_bytes']:12d}")
        return "\n".join(lines)

    # -- statistics ------------------------------------------------------------------------------------------
    @property
    def device_allocations(self) -> int:
        """clCreateBuffer calls made by the device's pool so far (flat in a steady state)."""
        return self.dev.pool.allocations

    @property
    def pool_bytes(self) -> int:
        return self.dev.pool.held_bytes

    @property
    def in_use_bytes(self) -> int:
        """Device memory the device's tensors hold now (pool size classes; the planner's arena exactly)."""
        return self.dev.pool.in_use_bytes

    def reset_peak(self) -> int:
        """Starts a new peak of in_use_bytes (read it from peak_bytes); returns the previous peak."""
        pool = self.dev.pool
        peak, pool.peak_in_use_bytes = pool.peak_in_use_bytes, pool.in_use_bytes
        return peak

    @property
    def peak_bytes(self) -> int:
        """The most device memory the tensors held at once since the last reset_peak()."""
        return self.dev.pool.peak_in_use_bytes

    @property
    def cache_bytes(self) -> int:
        """Device memory the runtime keeps for good beside the tensors: graph constants and kernels' index
        tables above the small-value cache's size (not in in_use_bytes)."""
        return self.dev.pool.cache_bytes

    def trim(self) -> int:
        """Gives the device's free pooled buffers back to the driver; returns the bytes freed."""
        return self.dev.pool.trim()

    def profile_report(self) -> dict[str, tuple[int, float]]:
        """With TFPLUS_OPENCL_PROFILE=1: {kernel name: (launches, total ms)} since the last call."""
        if self.profile is None:
            raise RuntimeError("set TFPLUS_OPENCL_PROFILE=1 before the runtime is made to profile kernels")
        self.synchronize()
        out: dict[str, Any] = {}
        for name, ev in self.profile:
            n, ms = out.get(name, (0, 0.0))
            out[name] = (n + 1, ms + (ev.profile.end - ev.profile.start) * 1e-6)
        self.profile.clear()
        return out


def int8(values) -> Any:
    """An OpenCL int8 vector argument holding up to 8 ints (the rest 0): shapes and strides for kernels."""
    v = list(values) + [0] * (8 - len(values))
    if len(v) > 8:
        raise ValueError(f"at most 8 dims after merging, got {len(values)}")
    return np.array(tuple(v), _INT8)
