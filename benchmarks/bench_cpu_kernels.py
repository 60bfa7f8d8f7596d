"""Where a Mentee step's cpu kernels lose their threads: per kernel and thread count, wall time, busy cores,
the time outside the parallel section, and how much of the shards' time they actually ran on a core.

    python benchmarks/bench_cpu_kernels.py --threads 1,4,8,16 [--batch 128] [--reps 5] [--ops Conv2D,MaxPoolGrad]

Each kernel of a Mentee training step (NCHW, batch 128: conv1..conv5, their input and filter gradients, the
pools and the fused bias+ReLU ops) is called directly, as the executor calls it, with fresh scratch, inside
tfplus.threads.step(N). Columns:
- ms: median wall time of one call; GF/s its GFLOP/s (convolutions);
- cores: process CPU time / wall time during the calls (N would be perfect scaling);
- serial%: the share of the wall time outside threads.run / run_shared (set-up, weight transforms,
  partial-sum reductions);
- oncpu%: the tasks' thread CPU time / their wall time: below 100 a task waited (for the GIL, a lock, a
  page fault, a core); near 100 with few cores busy means the tasks were short and the pool idle in between;
- imbal: the busiest thread's time in tasks / the mean thread's (1.0: balanced);
- wait/sh, preempt/sh: the voluntary and involuntary context switches of a task's thread while it ran the
  task: a voluntary one is a wait for the GIL (or a lock), an involuntary one a preemption by another thread
  or process (a busy machine).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import numpy as np


def _layers(batch: int):
    """(name, op type, input arrays, output shapes, attrs, GFLOP) of one Mentee step's conv/pool/fused kernels."""
    rng = np.random.default_rng(0)
    conv = {"data_format": "NCHW", "padding": "SAME", "strides": [1, 1, 1, 1], "dilations": [1, 1, 1, 1],
            "T": None}
    pool = {"data_format": "NCHW", "padding": "VALID", "ksize": [1, 1, 2, 2], "strides": [1, 1, 2, 2], "T": None}
    fused = {"data_format": "NCHW", "activation": "Relu", "T": None}
    out = []
    shapes = [("conv1", 3, 32, 32), ("conv2", 32, 32, 32), ("conv3", 32, 64, 16), ("conv4", 64, 64, 16),
              ("conv5", 64, 128, 8)]
    for name, c, k, hw in shapes:
        x = rng.standard_normal((batch, c, hw, hw)).astype(np.float32)
        f = rng.standard_normal((3, 3, c, k)).astype(np.float32)
        dy = rng.standard_normal((batch, k, hw, hw)).astype(np.float32)
        b = rng.standard_normal(k).astype(np.float32)
        gflop = 2 * batch * hw * hw * 9 * c * k / 1e9
        out.append((name, "Conv2D", [x, f], [dy.shape], conv, gflop))
        if c > 3:  # the first layer's input gradient is never asked for
            out.append((name, "Conv2DBackpropInput", [np.array(x.shape, np.int32), f, dy], [x.shape], conv, gflop))
        out.append((name, "Conv2DBackpropFilter", [x, np.array(f.shape, np.int32), dy], [f.shape], conv, gflop))
        out.append((name, "_FusedBiasAddRelu", [dy, b], [dy.shape], fused, 0))
        out.append((name, "_FusedReluGradBiasAddGrad", [dy, np.maximum(dy, 0)], [dy.shape, b.shape], fused, 0))
        if name in ("conv2", "conv4", "conv5"):
            y = np.maximum(np.maximum(dy[:, :, 0::2, 0::2], dy[:, :, 1::2, 0::2]),
                           np.maximum(dy[:, :, 0::2, 1::2], dy[:, :, 1::2, 1::2]))
            out.append((name, "MaxPool", [dy], [y.shape], pool, 0))
            out.append((name, "MaxPoolGrad", [dy, y, np.ones_like(y)], [dy.shape], pool, 0))
    return out


class _Ctx:
    """The kernel context of a direct call: fresh scratch from the cpu runtime, as the executor's plain
    allocator gives (the runtime also tunes malloc as a session does)."""

    def __init__(self, runtime):
        self.runtime = runtime

    def workspace(self, shape, dtype):
        return self.runtime.allocate(shape, dtype)


class _Probe:
    """Wraps tfplus.threads.run and run_shared to add up the time in parallel sections and each task's wall and
    CPU time, context switches and thread."""

    def __init__(self, threads):
        self.threads, self.real = threads, (threads.run, threads.run_shared)
        self.parallel = self.shard_wall = self.shard_cpu = 0.0
        self.shards = self.waits = self.preemptions = 0
        self.imbalance = []

    def _timed(self, call, fn, items) -> list:
        def timed(slot, item):
            u, w, c = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter(), time.thread_time()
            r = fn(item) if slot is None else fn(slot, item)
            w, c, v = time.perf_counter() - w, time.thread_time() - c, resource.getrusage(resource.RUSAGE_THREAD)
            return r, w, c, v.ru_nvcsw - u.ru_nvcsw, v.ru_nivcsw - u.ru_nivcsw, slot
        t = time.perf_counter()
        results = call(timed)
        self.parallel += time.perf_counter() - t
        busy: dict = {}  # per thread (slot; a shard of run is its own)
        for i, (_, w, c, vol, invol, slot) in enumerate(results):
            busy[i if slot is None else slot] = busy.get(i if slot is None else slot, 0.0) + w
            self.shard_wall += w
            self.shard_cpu += c
            self.waits += vol
            self.preemptions += invol
        self.shards += len(results)
        if busy:
            self.imbalance.append(max(busy.values()) / max(statistics.mean(busy.values()), 1e-9))
        return [r[0] for r in results]

    def __enter__(self):
        run, run_shared = self.real
        self.threads.run = lambda fn, items: self._timed(
            lambda timed: run(lambda item: timed(None, item), items), fn, items)
        self.threads.run_shared = lambda fn, items: self._timed(lambda timed: run_shared(timed, items), fn, items)
        return self

    def __exit__(self, *exc):
        self.threads.run, self.threads.run_shared = self.real


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,4,8,16 (default 1,2)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--reps", type=int, default=5, help="timed calls per kernel and thread count")
    p.add_argument("--ops", help="only these op types (comma-separated)")
    args = p.parse_args()
    counts = [int(t) for t in args.threads.split(",")]

    import tfplus.kernels.numpy  # noqa: F401  registers the kernels
    from tfplus import threads
    from tfplus.dtypes import float32
    from tfplus.registry import find_kernel
    from tfplus.runtime.cpu import CPURuntime

    ctx = _Ctx(CPURuntime())

    wanted = set(args.ops.split(",")) if args.ops else None
    layers = [row for row in _layers(args.batch) if wanted is None or row[1] in wanted]
    print(f"Mentee cpu kernels, batch {args.batch}, median of {args.reps} calls; {threads.available_cores()} "
          f"cores available, load average {os.getloadavg()[0]:.1f}")
    print(f"{'layer':<6} {'op':<26} {'threads':>7} {'ms':>8} {'GF/s':>6} {'cores':>5} {'serial%':>7} "
          f"{'oncpu%':>6} {'imbal':>5} {'wait/sh':>7} {'preempt/sh':>10}")
    totals = {n: 0.0 for n in counts}
    for name, op_type, ins, out_shapes, attrs, gflop in layers:
        kernel = find_kernel(op_type, "cpu", float32)
        attrs = dict(attrs, T=float32)
        for n in counts:
            outs = [np.empty(s, np.float32) for s in out_shapes]
            with threads.step(n):
                kernel(ctx, ins, outs, attrs)  # warm-up: the pool's threads, the allocator's pages
                walls, cpus = [], []
                with _Probe(threads) as probe:
                    for _ in range(args.reps):
                        w, c = time.perf_counter(), time.process_time()
                        kernel(ctx, ins, outs, attrs)
                        walls.append(time.perf_counter() - w)
                        cpus.append(time.process_time() - c)
            wall = statistics.median(walls)
            totals[n] += wall
            total = sum(walls)
            serial = 100 * (total - probe.parallel) / total
            oncpu = 100 * probe.shard_cpu / probe.shard_wall if probe.shard_wall else float("nan")
            imbal = statistics.mean(probe.imbalance) if probe.imbalance else float("nan")
            gfs = f"{gflop / wall:6.1f}" if gflop else f"{'':6}"
            shards = max(probe.shards, 1)
            print(f"{name:<6} {op_type:<26} {n:>7} {wall * 1e3:>8.2f} {gfs} {sum(cpus) / total:>5.1f} "
                  f"{serial:>7.1f} {oncpu:>6.0f} {imbal:>5.2f} {probe.waits / shards:>7.1f} "
                  f"{probe.preemptions / shards:>10.1f}", flush=True)
    print("sum of medians: " + ", ".join(f"{n} threads {t * 1e3:.1f} ms" for n, t in totals.items()))


if __name__ == "__main__":
    main()
