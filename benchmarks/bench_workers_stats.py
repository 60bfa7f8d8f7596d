"""Time a batch-norm training step (MobileNet) on the cpu device in one process and on the step workers, which run
its batch statistics in statistics passes (tfplus.engine.workers, planner.plan.spread).

    python benchmarks/bench_workers_stats.py [--batch 128] [--workers 2] [--threads 2] [--rounds 3] [--steps 2]

MobileNet for CIFAR (graphs/mobilenet.py: its default widths, 3x32x32 images, 10 classes) in the default recipe
(training_graph: momentum SGD, weight decay). Both sessions get `--threads` intra-op threads; one runs with
workers=1 (every step in this process: what a batch-norm step did before), the other with `--workers` worker
processes. They alternate in rounds of `--steps` steps, so that load from other processes falls on both alike; the
figures are median steps over all rounds, in images/s. For the workers' steps it also says where the time went,
from the parent's side: the statistics passes (their runs on the workers, waited for), the parent's merges of
their statistics between them, the micro-batch run, the average of the gradients, and the update run in the parent;
and the CPU time, on one thread, of the one-process step against the slices' runs one after another (the passes' own
cost, apart from waiting at each pass for the slowest worker; CPU time, which the other processes' load changes
little).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import tfplus as tf
from tfplus import threads
from tfplus.engine import workers
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet

_spent: dict[str, float] = {}


def _timed(name: str, fn):
    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[name] = _spent.get(name, 0.0) + time.perf_counter() - start
    return run


def _instrument() -> None:
    """Adds up the parent's time in the workers' commands and merges (_spent)."""
    call, merge_level, finish = workers._Group.call, workers._Step.merge_level, workers._Step.finish

    def timed_call(self, command: bytes):
        if command[:1] == b"m":
            name = "gradient average"
        else:
            r = int.from_bytes(command[1:3], "little")
            name = "statistics passes" if r < len(self.step.levels) else "micro-batch run"
        return _timed(name, call)(self, command)
    workers._Group.call = timed_call
    workers._Step.merge_level = _timed("statistics merges", merge_level)
    workers._Step.finish = _timed("update run", finish)


def _cpu(fn, n: int) -> float:
    """The median CPU time of this process over n calls of fn (the work itself, whatever the other processes'
    load), BLAS on one thread as in a step."""
    times = []
    with threads.blas_single_threaded():
        for _ in range(n):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=2, help="steps per session per round")
    args = p.parse_args()
    print(f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; {args.threads} threads; MobileNet "
          f"b{args.batch}; median step of {args.rounds} rounds x {args.steps} steps")
    tg = training_graph(mobilenet, total_steps=1000, seed=0)
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32),
             tg.labels: rng.integers(0, 10, args.batch).astype(np.int32)}
    fetches = [tg.train_op, tg.loss]
    config = tf.ConfigProto(intra_op_parallelism_threads=args.threads)
    sessions = {n: tf.Session(graph=tg.graph, config=config, workers=n) for n in (1, args.workers)}
    times: dict[int, list[float]] = {n: [] for n in sessions}
    for n, sess in sessions.items():
        sess.run(tg.init_op)
        start = time.perf_counter()
        sess.run(fetches, feeds)  # the first step: compiles, and on workers plans the passes, checks and forks
        print(f"first step, {n} worker(s): {time.perf_counter() - start:.1f} s")
    w = sessions[args.workers].workers
    st = next(s for s in w.steps.values() if not isinstance(s, str)) if w and w.groups else None
    if st is not None:
        print(f"{len(st.levels)} statistics passes, then the micro-batch run; {w.summary()}")
    _instrument()
    pids = w.pids() if w else []
    ticks = {pid: 0 for pid in pids}  # each worker's CPU time in the timed steps (clock ticks)
    for _ in range(args.rounds):
        for n, sess in sessions.items():
            for _ in range(args.steps):
                if n == args.workers:
                    _spent.clear()
                    before = {pid: workers._stat(pid)[1] for pid in pids}
                start = time.perf_counter()
                sess.run(fetches, feeds)
                times[n].append(time.perf_counter() - start)
                if n == args.workers:
                    for pid in pids:
                        ticks[pid] += workers._stat(pid)[1] - before[pid]
    spent, total = dict(_spent), times[args.workers][-1]
    one, many = (statistics.median(times[n]) for n in (1, args.workers))
    print(f"1 process {one * 1e3:.0f} ms ({args.batch / one:.1f} images/s), {args.workers} workers "
          f"{many * 1e3:.0f} ms ({args.batch / many:.1f} images/s): {one / many:.2f}x")
    print(f"the last {args.workers}-worker step, {total * 1e3:.0f} ms: " +
          ", ".join(f"{k} {v * 1e3:.0f} ms ({v / total:.0%})" for k, v in spent.items()))
    if pids:
        hz, steps = os.sysconf("SC_CLK_TCK"), args.rounds * args.steps
        print("each worker's CPU time a step: " + ", ".join(f"{ticks[pid] / hz / steps * 1e3:.0f} ms" for pid in pids))
    if st is not None:  # the work itself on one thread, one run at a time: the passes' cost, no waits between them
        with tf.Session(graph=tg.graph, config=tf.ConfigProto(intra_op_parallelism_threads=1), workers=1) as single:
            single.run(tg.init_op)
            single.run(fetches, feeds)
            plain = _cpu(lambda: single.run(fetches, feeds), args.rounds)
        element = sessions[args.workers].step(fetches, feeds)._element  # the session's rewrite of the step
        mine = st.mine({element[t] if element else t: v for t, v in feeds.items()})
        passes = _cpu(lambda: st.slices(mine, args.workers, object()), args.rounds)
        print(f"CPU time on one thread: the one-process step {plain * 1e3:.0f} ms; the {args.workers} slices' runs "
              f"(statistics passes and micro-batch run) one after another {passes * 1e3:.0f} ms "
              f"({passes / plain:.2f}x)")
    for sess in sessions.values():
        sess.close()


if __name__ == "__main__":
    main()
