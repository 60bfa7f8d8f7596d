"""Building OpenCL programs: their sources (common.cl first) and the disk cache of built binaries, the notice
that compiling is under way, background builds on threads and in child processes (Builder: `python -m
tfplus.runtime.opencl`), and the program lists that prebuild starts from."""
from __future__ import annotations

import atexit
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
from pathlib import Path

from tfplus import debug
from tfplus.engine.signals import deferred
from tfplus.runtime.opencl.discovery import cache_dir, cl, cl_devices

# Held while file descriptor 2 is redirected (native_stderr) and while a build thread prints, so that a line
# printed by one thread is never swallowed by another thread's redirect.
_STDERR = threading.RLock()


@contextlib.contextmanager
def native_stderr():
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


def quiet(background: bool):
    """native_stderr() on the main thread; on a build thread nothing (fd 2 is the process's, not the thread's)."""
    return contextlib.nullcontext([""]) if background else native_stderr()


class CompileNotice:
    """Says on stderr that OpenCL programs are being compiled, how many and for how long: a first run on PoCL
    compiles dozens of programs for tens of seconds, which would otherwise look like a hang. A line when
    compiling starts, then the count and the time so far every few seconds of compiling. Builds run on
    several threads at once (Device.prebuild): `seconds` is the wall-clock time during which at least one
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


def program_source(d, files: tuple[str, ...], options: str) -> tuple[str, str, Path]:
    """The source of program (files, options) on device `d` (common.cl first), its build options, and where
    its built binary is cached: a file named by the sha256 of source, options, device and driver."""
    pkg = importlib.resources.files("tfplus.kernels.opencl")
    src = "".join(f"// ---- {f}\n{pkg.joinpath(f).read_text()}\n" for f in ("common.cl",) + files)
    extra = os.environ.get("TFPLUS_OPENCL_BUILD_OPTIONS", "")
    opts = " ".join(x for x in (_std(d), options, extra) if x)
    digest = hashlib.sha256("\0".join([src, opts, d.platform.name, d.name, d.version, d.driver_version,
                                       cl.VERSION_TEXT]).encode()).hexdigest()
    return src, opts, cache_dir() / f"{digest}.bin"


def merge_wants(keys, built) -> tuple[list, dict]:
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


def build_processes(d=None) -> int:
    """How many child processes may build programs for device `d` at once: NVIDIA's driver builds one program
    at a time per process (threads add ~1.3x), so a GPU's first run builds in children, each with its own
    context (TFPLUS_OPENCL_BUILD_PROCESSES; default: half the cores, at most 8, on a GPU; none on a CPU device,
    whose compiler would take the cores the step needs; `d` None: a device not known yet, counted as a GPU).
    NOTE: a fresh H200 (16 cores, stop 43) reached its first Mentee step in 4.0 and 4.5 s with 8 children, 4.8-4.9 s
    with 4 or 6: 34 programs, a few long ones each."""
    env = os.environ.get("TFPLUS_OPENCL_BUILD_PROCESSES", "")
    if env.strip().isdigit():
        return int(env)
    if env.strip():
        raise ValueError(f"TFPLUS_OPENCL_BUILD_PROCESSES={env!r}: expected a count of processes, e.g. 4 "
                         "(0: build on threads of this process)")
    return min(8, (os.cpu_count() or 1) // 2) if d is None or d.type & cl.device_type.GPU else 0


class Builder:
    """A child process (`python -m tfplus.runtime.opencl SELECTOR`: __main__.py) that builds programs of one device
    into the disk cache when asked: the parent then loads each binary, which on NVIDIA also finds the driver's JIT
    of it in the driver's own cache (CUDA_CACHE_PATH), so a program's build costs the parent ~1 ms. Started before
    the parent makes its context, so that the child's (~0.3-2 s) overlaps it; `tfplus train` starts them earlier
    still (early()). `selector`: the device's index in cl_devices(), or a selector as "opencl:SELECTOR"
    takes ("": the default), whose device is checked when the child is adopted (its `index` set then)."""

    def __init__(self, selector: int | str):
        # Run from the folder that holds this process's tfplus, which `-m` puts first on the child's path: from
        # the caller's folder, a tfplus source checkout there (its tfplus/ without the installed package's ops
        # and kernels) was imported instead, the child failed, and the parent built everything itself (the
        # first step of `tfplus train` run in a checkout took 5-6 s instead of 3 on an H100).
        cmd = [sys.executable, "-m", "tfplus.runtime.opencl", str(selector)]
        self.started = time.time()  # wall clock: the child's "ready" line says when, on the same clock
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, cwd=Path(__file__).resolve().parents[3])
        self.index = selector if isinstance(selector, int) else None  # the device the child must choose
        self.ready: bool | None = None  # None until the child says whether it made its context

    def wait_ready(self) -> bool:
        """Whether the child made its context on device `index` (waits for it to say so: "ready INDEX TIME")."""
        if self.ready is None:
            try:
                words = self.proc.stdout.readline().split()
            except (OSError, ValueError):
                words = []
            self.ready = (len(words) == 3 and words[0] == "ready"
                          and (self.index is None or words[1] == str(self.index)))
            if debug.level() >= 1:
                said = (f"ready {float(words[2]) - self.started:.2f} s after its start" if self.ready else
                        f"not used ({' '.join(words) or 'it made no context'}; the device wanted: {self.index})")
                with _STDERR:  # not into another thread's native_stderr()
                    print(f"tfplus: OpenCL build process {self.proc.pid} {said}", file=sys.stderr, flush=True)
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

    def close(self, now: bool = False) -> None:
        """Ends the child (it exits when its input ends) and waits for it; `now`: a child given no work is
        killed, not waited for (it may be making its context, up to ~2 s; it has written nothing)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        if now:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Builds:
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
        `builders` (child processes, Builder) gets a thread that hands it queued builds once it is ready;
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


def program_list(d, name: str) -> list:
    """The programs `name` used last time on device `d` (record()), else the package's list for its kind."""
    keys = read_program_list(programs_path(d), name)
    if not keys:
        kind = "gpu" if d.type & cl.device_type.GPU else "cpu"
        keys = read_program_list(importlib.resources.files("tfplus.kernels.opencl") / f"programs-{kind}.json",
                                 name)
    return keys


def programs_path(d) -> Path:
    """Where record() keeps device `d`'s program lists: keyed by platform and device name, not driver, so that a
    new driver (whose cached binaries no longer load) still finds what to build."""
    return cache_dir() / f"programs-{hashlib.sha256(f'{d.platform.name}|{d.name}'.encode()).hexdigest()[:16]}.json"


def start_builders(d, keys) -> list:
    """Child processes (Builder) for device `d`, one per four of `keys`' programs not in the disk cache, up to
    build_processes(d): those early() started, if running, else new ones; [] when they cannot start. The
    early ones not needed (everything cached, a CPU device, fewer programs left) are ended now."""
    early, _early[:] = list(_early), []
    try:
        most = build_processes(d)
    except ValueError as e:  # on prebuild's thread: said, not raised, and the threads build
        with _STDERR:
            print(f"tfplus: {e}; building on threads", file=sys.stderr, flush=True)
        most = 0
    todo, _ = merge_wants(keys, ())
    n = min(most, sum(not program_source(d, *k)[2].exists() for k in todo) // 4)
    index = [x.int_ptr for x in cl_devices()].index(d.int_ptr) if n else None
    adopted = [b for b in early if b.proc.poll() is None][:n]
    for b in early:
        if b in adopted:
            b.index = index  # used if the child chose this device (wait_ready)
        else:
            b.close(now=True)
    if early and debug.level() >= 1:
        with _STDERR:
            print(f"tfplus: {len(adopted)} of the {len(early)} OpenCL build processes started early are used "
                  f"({n} wanted)", file=sys.stderr, flush=True)
    try:
        new = [Builder(index) for _ in range(n - len(adopted))]
    except OSError:  # no interpreter to start (a frozen app): threads of this process build
        new = []
    _said_started(new)
    return adopted + new


# Build processes that `tfplus train` started before it knew its device (early()), until start_builders takes
# them: module state, as the CLI hands them to the trainer's prebuild thread past the trainer's code.
_early: list = []


@contextlib.contextmanager
def early(selector: str | None, name: str):
    """Starts the processes that build the programs of work `name` (e.g. "train-mentee") on device `selector`
    (as "opencl:SELECTOR" takes it; None: the default) now, before the caller has made its device, read its
    data or built its graph: their start (an interpreter, tfplus's imports, a device context: ~1-1.5 s on an
    H200) then overlaps that work instead of preceding the builds. As many as build_processes() gives a GPU; the
    prebuild of the device (start_builders) uses those it needs and ends the others. On leaving the block, those
    never taken are ended. None start with TFPLUS_OPENCL_PREBUILD=0 or TFPLUS_OPENCL_BUILD_PROCESSES=0, nor
    where this cache holds a list of `name`'s programs (recorded by a run that built them: they are likely cached;
    prebuild then starts what a driver change left to build, as before).

        >>> with build.early(None, "train-mentee"):     # doctest: +SKIP
        ...     train(cfg)
    """
    try:
        n = 0 if os.environ.get("TFPLUS_OPENCL_PREBUILD", "1") == "0" or cl is None or _listed(name) \
            else build_processes()
    except ValueError:  # start_builders says so
        n = 0
    started: list = []
    try:
        # NOTE: a stop signal (Ctrl-C; the command line's Stopped) comes out once the processes started are in
        # _early, for the end below: one between two starts ended the command and left the first running (~3 s,
        # making its context) after it.
        with deferred():
            with contextlib.suppress(OSError):  # (no more processes: the threads build)
                for _ in range(n):
                    started.append(Builder(selector or ""))
            _early.extend(started)
        _said_started(started)
        yield
    finally:
        for b in started:
            if b in _early:
                _early.remove(b)
                b.close(now=True)


def _listed(name: str) -> bool:
    """Whether a program list in the cache directory (any device's) names work `name`."""
    for path in cache_dir().glob("programs-*.json"):
        try:
            if name in json.loads(path.read_text()):
                return True
        except (OSError, ValueError, TypeError):
            continue
    return False


def _said_started(builders) -> None:
    if debug.level() >= 1 and builders:
        with _STDERR:
            print(f"tfplus: started {len(builders)} OpenCL build process{'es' * (len(builders) != 1)} (pids "
                  f"{', '.join(str(b.proc.pid) for b in builders)})", file=sys.stderr, flush=True)
