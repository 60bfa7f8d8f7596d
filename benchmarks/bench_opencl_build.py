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
"""
from __future__ import annotations

import argparse
import importlib.resources
import os
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
    args = p.parse_args()
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


if __name__ == "__main__":
    main()
