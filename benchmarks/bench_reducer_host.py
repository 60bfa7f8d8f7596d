"""What the communication thread's jobs cost the main thread's host time a step, without a device or a second rank:
the main thread does --work-us of Python work per "launch" (small NumPy calls, as queuing a kernel is), --launches a
step, and starts a job after each 1/--jobs of them, then waits for all (kernels/numpy/collective.py's Reducer, a world
of one: MPI_Allreduce's job, or the shared-memory job's barrier and memcpys). Each job's ready() blocks in C for
--ready-us, as the wait for a device's copy out does. Variants in turns: no jobs, then each path at --jobs jobs.

    python benchmarks/bench_reducer_host.py --launches 60 --jobs 1 5 --steps 300 --rounds 3

Not a test: the numbers depend on the machine (and on a busy one, on its load).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launches", type=int, default=60)
    p.add_argument("--work-us", type=float, default=20, help="Python work per launch, microseconds")
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 5])
    p.add_argument("--ready-us", type=float, default=200)
    p.add_argument("--kb", type=int, default=512, help="each job's buffer")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    from tfplus.kernels.numpy.collective import reducer, shared_ranks
    shared_ranks()  # the host communicator, before the thread starts
    a = np.zeros(16, np.float32)
    t0 = time.perf_counter()
    for _ in range(10000):
        np.add(a, a, out=a)
    per = max(1, round(args.work_us * 1e-6 / ((time.perf_counter() - t0) / 10000)))  # NumPy calls a launch
    n = args.kb * 256

    def step(jobs: int, path: str) -> None:
        started = []
        for i in range(args.launches):
            for _ in range(per):
                np.add(a, a, out=a)
            if jobs and (i + 1) % (args.launches // jobs) == 0 and len(started) < jobs:
                k = len(started) + 1
                ready = lambda: time.sleep(args.ready_us * 1e-6)  # noqa: E731
                if path == "shm":
                    turn = reducer.shared_slots(1000 * jobs + k, n, np.float32)
                    rows = pinned[k] if reducer.staged else turn
                    reducer.start(k, rows, ready, shared=(turn, 0))
                else:
                    reducer.start(k, pinned[k][0], ready)
                started.append(k)
        for k in started:
            reducer.wait(k)

    pinned = {k: np.zeros((1, n), np.float32) for k in range(1, max(args.jobs) + 1)}
    variants = [("no jobs", 0, "", None)] + [(f"{j} jobs, {name}", j, path, staged) for j in args.jobs
                                              for name, path, staged in (("MPI_Allreduce", "mpi", None),
                                                                         ("window", "shm", False),
                                                                         ("through pinned", "shm", True))]
    times: dict[str, list[float]] = {v[0]: [] for v in variants}
    for _ in range(args.rounds):
        for name, jobs, path, staged in variants:
            reducer.staged = staged
            for _ in range(10):
                step(jobs, path)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step(jobs, path)
            times[name].append((time.perf_counter() - t0) / args.steps * 1e3)
    base = statistics.median(times["no jobs"][1:] or times["no jobs"])
    print(f"{args.launches} launches of ~{args.work_us:g} us a step, jobs of {args.kb} KB, ready() "
          f"{args.ready_us:g} us; medians of rounds 2-{args.rounds}")
    for name, ts in times.items():
        ms = statistics.median(ts[1:] or ts)
        print(f"  {name:28s} host {ms:.3f} ms a step (+{ms - base:.3f})")


if __name__ == "__main__":
    main()
