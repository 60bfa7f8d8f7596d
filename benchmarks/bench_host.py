"""Host time per Mentee training step: what the executor itself costs, apart from the kernels. Not a test.

    python benchmarks/bench_host.py [--steps 200] [--budget 1GB] [--device cpu]
    python benchmarks/bench_host.py --compare f958a5a     # and the executor of an older commit, alternating
    python benchmarks/bench_host.py --device opencl --kernels launch   # the launchers too, nothing enqueued

The step: Mentee NCHW float32, momentum SGD, the loss fetched, batch 4. After the initializer, every kernel of
the device is swapped for one that does nothing (the registry's table; the ops computing shapes keep theirs),
so a step costs only the host work around the kernels: feeds, the executor's per-op loop, output allocation,
shape handling, the fetch. Rows: the plain executor (the runtime's pool) and the planned arena (a memory
budget, micro-batching forced to 1 and to 2), each the median over `--steps` steps after a warm-up, in
microseconds per step and per executed op, the ops the executor's fast loop ran per step (`loop`: the rest
are computed once per signature, or ran the careful way) and that loop's own time (`loop us`: no feeding, no
fetching). On an OpenCL device the swapped kernels enqueue
nothing, so the figure is the host's share of a GPU step. `--kernels launch` (OpenCL) keeps the launchers and
the setting of kernel arguments and stubs only the enqueue, so it adds their host time;
`--kernels real` runs everything (on PoCL the kernels' CPU time is in it).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Kept: the ops whose values become shapes (a shape function reads them), and the control-flow ops.
_KEEP = {"Shape", "ShapeN", "Size", "Rank", "Const", "Pack", "StridedSlice", "If", "While"}


def _null_kernels(device: str) -> dict:
    """Replaces the kernels of `device` by one that leaves its outputs as they are (the registry is a dict);
    returns the table to put back."""
    from tfplus import registry

    def nothing(ctx, ins, outs, attrs):
        pass
    saved = dict(registry.KERNELS)
    for key in saved:
        if key[1] == device and key[0] not in _KEEP:
            registry.KERNELS[key] = nothing
    return saved


def _stub_enqueue() -> None:
    """Makes OpenCL launches enqueue nothing: pyopencl's bare enqueue, which its kernel call makes after setting
    the arguments."""
    import pyopencl
    pyopencl._cl.enqueue_nd_range_kernel = lambda *args: None


def _loop_counter() -> tuple[list, list, object]:
    """Counts the ops the fast loop runs (executor.Program._fast) and times it: ([count], [seconds per call],
    the original to put back)."""
    from tfplus.engine import executor
    count, spent, fast = [0], [], executor.Program._fast

    def counted(self, slots, steps):
        count[0] += len(steps)
        t = time.perf_counter()
        try:
            return fast(self, slots, steps)
        finally:
            spent.append(time.perf_counter() - t)
    executor.Program._fast = counted
    return count, spent, fast


def _step(device: str, steps: int, budget, force, kernels: str = "null") -> tuple[float, int, float]:
    import numpy as np

    import tfplus as tf
    from tfplus import planner, registry
    from tfplus.graphs.mentee import training_graph
    from tfplus.runtime import parse_device
    from tfplus.runtime.facts import device_facts
    tg = training_graph(total_steps=10 ** 6, seed=0, optimizer="momentum", nesterov=False, weight_decay=0.0,
                        schedule="const", learning_rate=0.01)
    batch = 4
    feed = {tg.images: np.zeros((batch, 3, 32, 32), np.float32), tg.labels: np.zeros(batch, np.int32)}
    fetches = [tg.train_op, tg.loss]
    with tf.Session(graph=tg.graph, device=device, memory_budget=budget) as s:
        s.run(tg.init_op)  # with the real kernels: the variables get their values
        saved = _null_kernels(parse_device(device)[0]) if kernels == "null" else {}
        if force is not None:
            from tfplus.engine.memory import install
            p = planner.plan(fetches, {t: v.shape for t, v in feed.items()}, device_facts(s.runtime), graph=tg.graph,
                             force=force)
            install(s, fetches, p)
        for _ in range(5):
            s.run(fetches, feed)
        if kernels == "launch":
            s.runtime.synchronize()
            _stub_enqueue()
        times = []
        count, spent, fast = _loop_counter()
        try:
            for _ in range(steps):
                t = time.perf_counter()
                s.run(fetches, feed)
                times.append(time.perf_counter() - t)
        finally:
            from tfplus.engine import executor
            executor.Program._fast = fast
        s.runtime.synchronize()
        registry.KERNELS.update(saved)
    n_ops = len(planner.plan(fetches, {t: v.shape for t, v in feed.items()}, device_facts(device), graph=tg.graph)
                .phases[0].order)
    per_step = len(spent) // steps  # fast loops per step (a micro-batched plan runs one per phase and batch)
    loops = [sum(spent[i:i + per_step]) for i in range(0, per_step * steps, per_step)] if per_step else [0.0]
    return statistics.median(times) * 1e6, n_ops, count[0] / steps, statistics.median(loops) * 1e6


_ROWS = [("plain (runtime pool)", False, None), ("planned arena", True, (1, 1)),
         ("planned arena, 2 micro-batches", True, (2, 1))]


def _measure(device: str, steps: int, budget: str, kernels: str = "null") -> dict:
    from tfplus.runtime import get_runtime
    get_runtime(device)  # loads the device's kernels before they are swapped
    return {name: _step(device, steps, budget if planned else None, force, kernels)
            for name, planned, force in _ROWS}


def _in_subprocess(args, rev: str | None) -> dict:
    """_measure in a fresh process, on this tree or (rev) on a copy of the tfplus package of git revision `rev`
    put first on the path (ops/ and kernels/ stay this tree's: the editable install maps them)."""
    cmd = [sys.executable, __file__, "--json", "--device", args.device, "--steps", str(args.steps),
           "--budget", args.budget, "--kernels", args.kernels]
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        if rev is not None:
            root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                                  check=True, cwd=os.path.dirname(__file__)).stdout.strip()
            tar = subprocess.run(["git", "archive", rev, "tfplus"], capture_output=True, check=True, cwd=root)
            subprocess.run(["tar", "-x", "-C", tmp], input=tar.stdout, check=True)
            env["PYTHONPATH"] = tmp + os.pathsep + env.get("PYTHONPATH", "")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--budget", default="1GB", help="the planned rows' memory budget (forced plans ignore it)")
    ap.add_argument("--compare", metavar="REV", help="also measure git revision REV's executor (e.g. an older "
                    "commit), alternating with this tree's for --rounds rounds; the best round of each is shown")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kernels", choices=("null", "launch", "real"), default="null",
                    help="null: kernels do nothing; launch: OpenCL launchers run, nothing enqueued; real: all")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.json:
        print(json.dumps(_measure(args.device, args.steps, args.budget, args.kernels)))
        return
    if args.compare:
        runs: dict = {"this tree": [], args.compare: []}
        for _ in range(args.rounds):
            runs["this tree"].append(_in_subprocess(args, None))
            runs[args.compare].append(_in_subprocess(args, args.compare))
        results = {who: {name: min(r[name] for r in rs) for name, _, _ in _ROWS} for who, rs in runs.items()}
    else:
        results = {"this tree": _measure(args.device, args.steps, args.budget, args.kernels)}
    what = {"null": "kernels do nothing", "launch": "launchers run, nothing enqueued", "real": "kernels run"}
    print(f"host time per Mentee step (batch 4, {what[args.kernels]}) on {args.device}")
    print(f"{'executor':<34} {'tree':<12} {'us/step':>9} {'ops':>5} {'us/op':>7} {'loop':>5} {'loop us':>8}")
    for name, _, force in _ROWS:
        for who, rows in results.items():
            us, n, loop, loop_us = rows[name]
            n *= force[0] if force else 1
            print(f"{name:<34} {who[:12]:<12} {us:9.0f} {n:5d} {us / n:7.1f} {loop:5.0f} {loop_us:8.0f}")


if __name__ == "__main__":
    main()
