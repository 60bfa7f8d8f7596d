"""An OpenCL device as all its runtimes share it (Device: context, queue, buffer pool, built programs, tuning),
its kernels (Kernel), and prebuild: building a listed set of programs before they are asked for."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import warnings

import numpy as np

from tfplus import debug
from tfplus.runtime.opencl.build import (
    Builds,
    CompileNotice,
    merge_wants,
    program_list,
    program_source,
    programs_path,
    quiet,
    start_builders,
    write_program_list,
)
from tfplus.runtime.opencl.discovery import cache_dir, cl, device_info, select, shipped_tuning
from tfplus.runtime.opencl.memory import DeviceArray, Pool


class Kernel:
    """One kernel of a program: its program is built (or, when a build thread has it under way, waited for) when
    the kernel is asked for, or at its first launch when it was asked for under Device.programs_of, which
    builds nothing. Scalar argument types are taken from the first call's NumPy scalars (launchers always pass
    the same types), after which pyopencl's generated invoker does the work."""

    __slots__ = ("name", "k", "typed", "dev", "program_key")

    def __init__(self, name: str, dev: Device, program_key: tuple):
        self.name, self.k, self.typed, self.dev, self.program_key = name, None, False, dev, program_key

    def type_args(self, args) -> None:
        """`args` as launchers pass them: a DeviceArray (or None, no buffer) is two kernel arguments, the
        buffer and its byte offset (common.cl: GLOBAL)."""
        dev = self.dev
        if dev.recording is not None:  # Device.programs_of: note the program, launch nothing
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
    """Ends a launcher run under Device.programs_of at its first launch of a kernel not launched before."""


_forked_from = {"pid": None}  # in a process forked after its parent made an OpenCL context: the parent's id
# Why a forked process cannot use OpenCL (Runtime.fork_unsafe).
FORK_REASON = ("the OpenCL driver does not survive a fork: its threads stay in the parent, and a launch in the child "
               "would wait for them for ever")
# What to do instead (the session's error says it too).
FORK_FIX = ("start such processes with multiprocessing.get_context('spawn') (or 'forkserver'), or fork before the "
            "first OpenCL session; the 'cpu' device works in a forked process")


def forked_message() -> str:
    return (f"this process ({os.getpid()}) was forked (os.fork, multiprocessing's 'fork' start method) from process "
            f"{_forked_from['pid']} after it used an OpenCL device, and {FORK_REASON}; {FORK_FIX}")


def refuse_if_forked() -> None:
    """RuntimeError (forked_message) in a process forked after its parent used an OpenCL device."""
    if _forked_from["pid"] is not None:
        raise RuntimeError(forked_message())


def _after_fork_in_child() -> None:
    if Device._all and _forked_from["pid"] is None:
        _forked_from["pid"] = os.getppid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Device:
    """What all runtimes of one OpenCL device share: context, queue, buffer pool, built programs, tuning."""

    _all: dict = {}
    # One context per device, also when prebuild_soon's thread is making it (held until its builds are queued,
    # so that a runtime made meanwhile finds them queued).
    _making = threading.RLock()

    @classmethod
    def get(cls, cl_device) -> Device:
        key = cl_device.int_ptr
        refuse_if_forked()
        with cls._making:
            if key not in cls._all:
                cls._all[key] = cls(cl_device)
        return cls._all[key]

    def __init__(self, d):
        self.device = d
        self.info = device_info(d)
        self.ctx = cl.Context([d])
        # TFPLUS_ALLREDUCE_TRACE=device times the all-reduces' copies on the device (kernels/opencl/collective.py)
        profiled = os.environ.get("TFPLUS_OPENCL_PROFILE") or os.environ.get("TFPLUS_ALLREDUCE_TRACE") == "device"
        self.queue = cl.CommandQueue(self.ctx, properties=(
            cl.command_queue_properties.PROFILING_ENABLE if profiled else 0))
        self.pool = Pool(self.ctx)
        # Its sessions' steps take turns: a launch sets its kernel object's arguments, shared by the device's
        # runtimes, and a tape records the launches of this thread's step alone.
        self.step_lock = threading.RLock()
        self.profiling_queue = None  # made on the first traced run (tfplus.profiler)
        self.programs: dict = {}
        self.kernels: dict = {}
        self.small: dict = {}     # (dtype, bytes) -> device buffer holding those bytes (read-only)
        self.tables: dict = {}    # key -> DeviceArray: kernels' lookup tables
        self.staging: dict = {}   # size class -> pinned upload buffers (OpenCLRuntime._staged_upload)
        self.pinned: dict = {}    # key -> (buffer, mapped host array): OpenCLRuntime.pinned_array
        self.gated: dict = {}     # key -> deque of (wait for the host, event): OpenCLRuntime.gated
        self.polls: list = []     # host work a replay calls at each flush of a tape with host work (Tape.compile)
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
            self.tuning, tuned_on = shipped_tuning(d.name) if self.is_gpu else ({}, None)
            if tuned_on not in (None, d.name):
                print(f"tfplus: no GEMM tiles are shipped for {d.name}; using those tuned on {tuned_on} "
                      "(a source checkout's tools/gen_program_lists.py --tuning tunes and ships its own)",
                      file=sys.stderr)
                self.save_tuning()  # this device's own from now on: said once
        self.programs_path = programs_path(d)
        self.used: list = []      # (files, options) keys in the order this process first asked for them
        self.listed_from: dict = {}  # name -> len(used) when prebuild_named(name) was called
        self.merged: dict = {}    # (files, options) -> the key of the prebuilt program that also holds its kernels
        self.builds = Builds(self._build)
        self.recording: list | None = None  # programs_of() collects program keys here
        self.tune_seconds = 0.0   # choosing tiles (kernels/opencl/_tune.py), compiles included
        self.compiling = CompileNotice()
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
        and in `builders` (child processes, Builder) if given; program() waits for one that is building, and
        builds one that has not started itself. Returns how many builds were started. Keys that differ only
        in their -DWANT_ flags are built as one program (merge_wants); the GEMM-based ones (the longest
        builds) go first, so that no long build starts last."""
        todo, merged = merge_wants(keys, self.programs)
        self.merged.update(merged)
        todo.sort(key=lambda k: "gemm.cl" not in k[0])  # stable: first use order otherwise
        return self.builds.start(todo, builders)

    def prebuild_named(self, name: str, from_start: bool = False, builders=(), keys=None) -> int:
        """prebuild() of the programs listed under `name` (see the module function prebuild; `keys`: that list,
        if read already); record_programs(name) later keeps the programs used since now, or since the device
        was made if `from_start`."""
        self.listed_from[name] = 0 if from_start else len(self.used)
        return self.prebuild(program_list(self.device, name) if keys is None else keys, builders)

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
        main thread's output would go with the compiler's). `builder`: a child process (Builder) asked to
        build it into the cache first."""
        d = self.device
        src, opts, path = program_source(d, files, options)
        what = f"{'+'.join(files)} [{opts}] for {self.info['name']}"
        if builder is not None and not path.exists():
            self.compiling.start(self.info["name"])
            self.compiling.done(built=builder.build(files, options))
        if path.exists():
            try:
                prg = cl._cl._Program(self.ctx, [d], [path.read_bytes()])
                with warnings.catch_warnings(), quiet(background):
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
            with warnings.catch_warnings(), quiet(background) as chatter:
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
    with Device._making:
        builders = []
        try:
            d = select(selector)
            keys = program_list(d, name)
            builders = [] if d.int_ptr in Device._all else start_builders(d, keys)
            dev = Device.get(d)
        except (RuntimeError, ValueError, cl.Error):
            for b in builders:
                b.close()
            return 0
        return dev.prebuild_named(name, from_start, builders, keys)


def prebuild_soon(selector: str | None, name: str) -> threading.Thread:
    """prebuild() on a daemon thread, so that making the device's context (~2 s on an H100: CUDA's start) and
    queueing the builds overlap what the caller does meanwhile (loading data, building a graph); a runtime
    made meanwhile waits for that context rather than making another. Returns the thread."""
    # from_start: the caller may use programs before this thread lists `name`; record() keeps those too.
    t = threading.Thread(target=prebuild, args=(selector, name, True), name="tfplus-opencl-prebuild", daemon=True)
    t.start()
    return t
