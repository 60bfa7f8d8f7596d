"""What the communication thread's jobs cost the main thread's host time a step, without a device or a second rank:
the main thread does --work-us of Python work per "launch" (small NumPy calls, as queuing a kernel is), --launches a
step, and starts a job after each 1/--jobs of them, then waits for all (kernels/numpy/collective.py's Reducer, a world
of one: MPI_Allreduce's job, or the shared-memory job's barrier and memcpys). Each job's ready() blocks in C for
--ready-us, as the wait for a device's copy out does. Variants in turns: no jobs, then each path at --jobs jobs.

    python benchmarks/bench_reducer_host.py --launches 60 --jobs 1 5 --steps 300 --rounds 3
    python benchmarks/bench_reducer_host.py --ahead --jobs 1 5     # run-ahead: the thread's jobs against polled ones

--ahead: each job runs ahead as opencl's do (a release after the sum, the gate; the main thread waits for a step's
jobs only at the next step's end), through pinned memory, by the communication thread (TFPLUS_ALLREDUCE_POLL=0) or
moved on by the main thread at every 4th launch (Reducer.poll, the default); per variant also the gate's delay (from
the end of ready(), the copy out, to the release: the device idles behind the gate meanwhile) and the communication
thread's returns to Python a step (Reducer.wakes, hand-offs of Python's lock).

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
    p.add_argument("--ahead", action="store_true", help="run ahead: gates released by the thread or by polls")
    args = p.parse_args()
    if args.ahead:
        return _ahead(args)
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


def _ahead(args) -> None:
    from tfplus.kernels.numpy.collective import reducer, shared_ranks
    shared_ranks()
    reducer.staged = True
    a = np.zeros(16, np.float32)
    t0 = time.perf_counter()
    for _ in range(10000):
        np.add(a, a, out=a)
    per = max(1, round(args.work_us * 1e-6 / ((time.perf_counter() - t0) / 10000)))
    n = args.kb * 256
    ranks, me = reducer.host().Get_size(), reducer.host().Get_rank()  # under mpiexec -n N: N ranks meet
    pinned = {k: np.zeros((ranks, n), np.float32) for k in range(1, max(args.jobs) + 1)}
    gates: list[float] = []

    def step(jobs: int, polled: bool, last: list) -> list:
        started = []
        for i in range(args.launches):
            for _ in range(per):
                np.add(a, a, out=a)
            if polled and i % 4 == 0:
                reducer.poll()
            if jobs and (i + 1) % (args.launches // jobs) == 0 and len(started) < jobs:
                k = len(started) + 1
                due = time.perf_counter() + args.ready_us * 1e-6  # the "copy out" ends then

                def ready(due=due) -> None:
                    left = due - time.perf_counter()
                    if left > 0:  # NOTE: a sleep(0) on a loaded machine gives the core away for a time slice
                        time.sleep(left)

                def release(ok: bool, due=due) -> None:
                    gates.append(time.perf_counter() - due)
                turn = reducer.shared_slots(1000 * jobs + k, n, np.float32)
                if polled:
                    reducer.post(k, pinned[k], ready, lambda due=due: time.perf_counter() >= due, release, (turn, me))
                else:
                    reducer.start(k, pinned[k], ready, release, shared=(turn, me))
                started.append(reducer.take(k))
        for job in last:  # the step before's jobs (the run-ahead bound)
            reducer.finish(job)
        return started

    variants = [("no jobs", 0, False)] + [(f"{j} jobs, {name}", j, polled) for j in args.jobs
                                          for name, polled in (("thread", False), ("polled", True))]
    got: dict[str, list] = {v[0]: [] for v in variants}
    for _ in range(args.rounds):
        for name, jobs, polled in variants:
            last = []
            for _ in range(10):
                last = step(jobs, polled, last)
            gates.clear()
            wakes, t0 = reducer.wakes, time.perf_counter()
            for _ in range(args.steps):
                last = step(jobs, polled, last)
            ms = (time.perf_counter() - t0) / args.steps * 1e3
            for job in last:
                reducer.finish(job)
            got[name].append((ms, statistics.median(gates) * 1e3 if gates else 0.0,
                              (reducer.wakes - wakes) / args.steps))
    base = statistics.median(r[0] for r in got["no jobs"][1:] or got["no jobs"])
    if me:
        return
    print(f"run ahead, {ranks} rank(s) (rank 0's figures): {args.launches} launches of ~{args.work_us:g} us a step, "
          f"jobs of {args.kb} KB through pinned memory, copy out {args.ready_us:g} us; medians of rounds "
          f"2-{args.rounds}")
    for name, rows in got.items():
        ms, gate, wakes = (statistics.median(r[i] for r in rows[1:] or rows) for i in range(3))
        print(f"  {name:20s} host {ms:.3f} ms a step (+{ms - base:.3f}), gate opened {gate:.3f} ms after the copy "
              f"out, thread's hand-offs {wakes:.1f} a step")


if __name__ == "__main__":
    main()
