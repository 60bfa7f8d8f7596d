"""How long building a training step's OpenCL programs takes from an empty cache: one after another (as a
launcher asking for them does) and on the runtime's background build threads (prebuild), on one device.

    python benchmarks/bench_opencl_build.py                          # the default device, model mentee
    python benchmarks/bench_opencl_build.py --device opencl:0 --threads 1 4 16

Each way gets a new context and an empty tfplus cache, with the drivers' own caches off (CUDA_CACHE_DISABLE,
POCL_KERNEL_CACHE: read once per process, so set here before the driver loads), and builds the programs of
the package's list for `train-<model>` (kernels/opencl/programs-<cpu|gpu>.json; the cpu list where the
device's kind has none). Whether the driver builds programs of one context concurrently is the driver's
choice (PoCL 3.0 on a 2-core box did not: 8 builds took 1.6 s on 1, 2 or 4 threads, though pyopencl releases
the GIL meanwhile), so the threaded figures say how much of the list's build time threads save here; what they
cannot save still runs beside the work before the first step (data, graph, plan).

    python benchmarks/bench_opencl_build.py --timeline 3 -- --device opencl --steps 3 --no-eval

--timeline N runs `python -m tfplus train --synthetic ARGS` N times, each with a fresh XDG_CACHE_HOME and
CUDA_CACHE_PATH and TFPLUS_DEBUG=1, and prints when (seconds from the process's start, as this script reads its
stderr) the build processes were started, each was ready (its start plus the time its "ready" line says), the device
was made and the first step was done. --from-cache DIR --uncached K starts each run from a copy of DIR's cache (an
XDG_CACHE_HOME that a run filled) less its program lists and the binaries of the first K programs that the package
lists for train-<model>, as prebuild orders them: K builds on a device whose every build takes long (PoCL).
"""
from __future__ import annotations

import argparse
import importlib.resources
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("CUDA_CACHE_DISABLE", "1")
os.environ.setdefault("POCL_KERNEL_CACHE", "0")
from tfplus.runtime import opencl  # noqa: E402  after the drivers' cache switches


def fresh_device(selector):
    """A _Device with its own context, empty program tables and an empty cache directory."""
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tfplus-bench-")
    opencl.device.Device._all.clear()
    return opencl.OpenCLRuntime(selector).dev


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="opencl")
    p.add_argument("--model", default="mentee")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--timeline", type=int, metavar="N", help="N runs of `tfplus train` from a cold cache, timed")
    p.add_argument("--from-cache", metavar="DIR", help="--timeline: start from this XDG_CACHE_HOME's cache")
    p.add_argument("--uncached", type=int, default=0, metavar="K", help="--from-cache: less K programs' binaries")
    p.add_argument("train_args", nargs="*", help="--timeline: the options of tfplus train (after --)")
    args = p.parse_args()
    if args.timeline:
        for _ in range(args.timeline):
            timeline(args)
        return
    from tfplus.runtime import parse_device
    selector = parse_device(args.device)[1]
    dev = fresh_device(selector)
    pkg = importlib.resources.files("tfplus.kernels.opencl")
    kind = "gpu" if dev.is_gpu else "cpu"
    keys = opencl.read_program_list(pkg / f"programs-{kind}.json", f"train-{args.model}") or \
        opencl.read_program_list(pkg / "programs-cpu.json", f"train-{args.model}")
    print(f"{len(keys)} programs of train-{args.model} on {dev.info['platform']} / {dev.info['name']} "
          f"({os.cpu_count()} cpus)")
    t = time.perf_counter()
    for key in keys:
        dev.program(*key)
    serial = time.perf_counter() - t
    print(f"one after another      {serial:7.2f} s")
    for n in args.threads:
        opencl.build.Builds.THREADS = n
        dev = fresh_device(selector)
        t = time.perf_counter()
        dev.prebuild(keys)
        for key in keys:
            dev.program(*key)
        s = time.perf_counter() - t
        print(f"{n:2d} build thread{'s' * (n != 1)} + caller {s:7.2f} s  ({serial / s:.2f}x)")


# The stderr lines a timeline reports: build processes started or ready, the device made, the first step done.
_EVENTS = re.compile(r"OpenCL build process|opencl device|first step done|built \d+ OpenCL program")


def timeline(args) -> None:
    """One run of `tfplus train --synthetic ARGS` from a cold cache: its events' seconds from its start."""
    home = tempfile.mkdtemp(prefix="tfplus-bench-")
    env = dict(os.environ, XDG_CACHE_HOME=home, CUDA_CACHE_PATH=tempfile.mkdtemp(prefix="tfplus-bench-cuda-"),
               TFPLUS_DEBUG="1")
    if args.from_cache:
        uncache(args.from_cache, home, args.model, args.uncached, env)
    cmd = [sys.executable, "-m", "tfplus", "train", "--synthetic", "--model", args.model, *args.train_args]
    t0 = time.time()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    events, spawned = [], {}
    for line in p.stderr:
        t, line = time.time() - t0, line.strip()
        started = re.match(r"tfplus: started .* \(pids (.*)\)", line)
        ready = re.match(r"tfplus: OpenCL build process (\d+) ready ([\d.]+) s after its start", line)
        if ready:  # said when the parent first reads it: the child's own time is its start's plus its count
            events.append((spawned[ready[1]] + float(ready[2]), f"build process {ready[1]} ready"))
        elif _EVENTS.search(line) or started:
            events.append((t, line[:110]))
        if started:
            spawned.update(dict.fromkeys(started[1].split(", "), t))
    p.wait()
    print(f"-- {' '.join(cmd[1:])}: exit {p.returncode}")
    for t, what in sorted(events):
        print(f"{t:7.2f} s  {what}")
    shutil.rmtree(home, ignore_errors=True)


def uncache(src: str, home: str, model: str, k: int, env: dict) -> None:
    """Copies XDG_CACHE_HOME `src` to `home`, less its program lists and the binaries of the first
    `k` programs of the package's train-`model` list, in prebuild's order (the GEMM ones first)."""
    shutil.copytree(src, home, dirs_exist_ok=True)  # PoCL's kernel cache too: a first step's launches compile
    os.environ["XDG_CACHE_HOME"] = home
    d = opencl.select(env.get("TFPLUS_OPENCL_DEVICE"))
    for f in opencl.cache_dir().glob("programs-*.json"):
        f.unlink()
    kind = "gpu" if d.type & opencl.cl.device_type.GPU else "cpu"
    keys = opencl.read_program_list(importlib.resources.files("tfplus.kernels.opencl") / f"programs-{kind}.json",
                                    f"train-{model}")
    todo, _ = opencl.build.merge_wants(keys, ())
    todo.sort(key=lambda k: "gemm.cl" not in k[0])
    for key in todo[:k]:
        opencl.build.program_source(d, *key)[2].unlink(missing_ok=True)


if __name__ == "__main__":
    main()
