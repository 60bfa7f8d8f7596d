"""Speed of one Mentee (or MobileNet: --model mobilenet) training step (NCHW float32, batch 128, momentum SGD) on
tfplus's opencl device, and in the same run its peers when present: PyTorch eager (CUDA) and tinygrad (OpenCL and
CUDA; Mentee only). Not a test.

    python benchmarks/bench_gpu_step.py                       # opencl + peers, prints a table
    python benchmarks/bench_gpu_step.py --device cpu --batch 32 --steps 3 --no-peers
    TFPLUS_OPENCL_PROFILE=1 python benchmarks/bench_gpu_step.py --profile   # + per-kernel GPU times
    python benchmarks/bench_gpu_step.py --no-peers --budgets 1TB,64MB,32MB,24MB  # planned steps vs plain
    python benchmarks/bench_gpu_step.py --model mobilenet --no-peers --budgets 1TB,128MB,64MB --trainer-recipe
    python benchmarks/bench_gpu_step.py --model mobilenet --no-peers --budgets 128MB,128MB@calls=4e-6 --trainer-recipe
                                      # a budget planned under other cost weights (bench_budgets, _planning)
    python benchmarks/bench_gpu_step.py --model mobilenet --no-peers --trainer-recipe --budgets \
        64MB,64MB@page=0,128MB,128MB@page=0          # optimizer slots paged to the host where priced, and not
    python benchmarks/bench_gpu_step.py --unfused --no-peers   # the graph rewrite on and off, same run
    python benchmarks/bench_gpu_step.py --model mobilenet --unfused   # MobileNet (CIFAR); peer: PyTorch's mirror
    python benchmarks/bench_gpu_step.py --peers torch,torch:graph   # PyTorch eager and its step as a CUDA graph

Reports ms/step (median), kernel launches per step, GFLOP/s (Mentee: 22.85 GFLOP per step at batch 128, scaled
by batch; MobileNet: its convolutions' and the dense layer's, mobilenet_gflop_per_sample), the forward share (a
forward-only run fetching the loss), bytes host->device and device->host per step, device allocations in the
steady state, and the cold start (process start to the end of the first step: imports, OpenCL program builds or
their disk cache, autotuning). With --budgets: the step under each memory budget (1TB: the planned arena,
unconstrained) against the plain executor, sessions in turns, one step each per round (medians). Measurements
are recorded in benchmarks/gpu_notes.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

T_START = time.perf_counter()
GFLOP_PER_SAMPLE = 22.85 / 128  # forward + backward of the Mentee step (conv and FC multiply-adds x 2 x 3)


def mobilenet_gflop_per_sample(widths=(32, 64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024),
                               size: int = 32, classes: int = 10) -> float:
    """Forward + backward GFLOP of one 32x32 image through tfplus.graphs.mobilenet (its layout: a 3x3 stem at
    stride 1, then per block a 3x3 depthwise conv, strided where the width grows except the first block, and a
    1x1 conv; the dense layer): multiply-adds x 2 x 3, as GFLOP_PER_SAMPLE's."""
    macs = size * size * 9 * 3 * widths[0]
    for i in range(1, len(widths)):
        c, w = widths[i - 1], widths[i]
        if i > 1 and w > c:
            size = -(-size // 2)
        macs += size * size * c * (9 + w)
    macs += widths[-1] * classes
    return macs * 2 * 3 / 1e9


def _gflop_per_sample(model: str) -> float:
    return mobilenet_gflop_per_sample() if model == "mobilenet" else GFLOP_PER_SAMPLE


def _times(fn, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


# -- tfplus --------------------------------------------------------------------------------------------------
def bench_tfplus(device: str, batch: int, steps: int, warmup: int, profile: bool,
                 cprofile: bool = False, rewrite: bool = True, model: str = "mentee") -> dict:
    import numpy as np

    import tfplus as tf
    from tfplus.graphs.mentee import mentee, training_graph
    from tfplus.graphs.mobilenet import mobilenet
    t_import = time.perf_counter() - T_START
    tg = training_graph(mobilenet if model == "mobilenet" else mentee, total_steps=10 ** 6, seed=0,
                        optimizer="momentum", nesterov=False, weight_decay=0.0, schedule="const", learning_rate=0.01)
    rng = np.random.default_rng(0)
    images = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 10, batch).astype(np.int32)
    feed = {tg.images: images, tg.labels: labels}
    # The graph rewrite (tfplus.engine.rewrite: fused bias+ReLU, their gradients, one optimizer update) on or off.
    config = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
        remapping=tf.RewriterConfig.DEFAULT if rewrite else tf.RewriterConfig.OFF)))
    with tf.Session(graph=tg.graph, device=device, config=config) as s:
        rt = s.runtime
        s.run(tg.init_op)
        t = time.perf_counter()
        first_loss = s.run([tg.train_op, tg.loss], feed)[1]
        t_first = time.perf_counter() - t
        cold = time.perf_counter() - T_START
        for _ in range(warmup):
            s.run([tg.train_op, tg.loss], feed)
        h2d, d2h, allocs = rt.h2d_bytes, rt.d2h_bytes, getattr(rt, "device_allocations", 0)
        step = _times(lambda: s.run([tg.train_op, tg.loss], feed), steps)
        per = {"h2d_bytes": (rt.h2d_bytes - h2d) // steps, "d2h_bytes": (rt.d2h_bytes - d2h) // steps,
               "new_device_allocations": getattr(rt, "device_allocations", 0) - allocs}
        fwd = _times(lambda: s.run(tg.loss, feed), steps)
        host = _host_breakdown(s, lambda: s.run([tg.train_op, tg.loss], feed), steps)
        launches = _launches(rt, lambda: s.run([tg.train_op, tg.loss], feed), steps)
        if cprofile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            prof.runcall(lambda: [s.run([tg.train_op, tg.loss], feed) for _ in range(steps)])
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        kernels = {}
        if profile and getattr(rt, "profile", None) is not None:
            rt.profile_report()
            for _ in range(steps):
                s.run([tg.train_op, tg.loss], feed)
            kernels = {k: (n / steps, ms / steps) for k, (n, ms) in rt.profile_report().items()}
        last_loss = s.run(tg.loss, feed)
        desc = rt.describe()
        n_ops = max(len(p.order) for p in [*s.programs, *(p for st in s.steps for p in st.programs)])
    ms = statistics.median(step) * 1e3
    name = f"tfplus {device}" + ("" if rewrite else " unfused")
    return {"name": name, "device": desc, "launches": launches, "batch": batch, "ms": ms,
            "ms_mean": statistics.mean(step) * 1e3,
            "gflops": _gflop_per_sample(model) * batch / (ms * 1e-3), "fwd_ms": statistics.median(fwd) * 1e3,
            "import_s": t_import, "first_step_s": t_first, "cold_start_s": cold, **per,
            "loss_first": float(first_loss), "loss_last": float(last_loss), "kernels": kernels, "host": host,
            "ops": n_ops}


def bench_budgets(device: str, batch: int, steps: int, warmup: int, budgets: list[str], model: str = "mentee",
                  trainer: bool = False, profile: bool = False) -> dict:
    """Median ms/step of the plain executor and of a session per memory budget, run in turns (one step of each
    per round), so that drift on a shared machine falls on all alike. trainer: the trainer's optimizer (Nesterov
    momentum, weight decay 5e-4, cosine schedule) instead of plain momentum. A budget may name planner settings
    its session plans under (`_planning`), e.g. 128MB@calls=4e-6@early=0; a budget named twice is planned twice.
    Prints each plan (its predicted cost and runs' micro-batch counts) and each session's loss after the timed
    steps (the same steps from the same weights: equal within float tolerance); with `profile` (TFPLUS_OPENCL_PROFILE=1)
    each session's kernels a step: launches and GPU ms by kernel name."""
    import numpy as np

    import tfplus as tf
    from tfplus.graphs.mentee import default_warmup, mentee, training_graph
    from tfplus.graphs.mobilenet import mobilenet
    # NOTE: the trainer's recipe starts with its warm-up (one epoch of CIFAR-10): from step 0 at the peak rate it
    # diverges within 5 steps (README), and the losses printed to check the plans against each other are NaN.
    recipe = dict(warmup_steps=default_warmup(50_000 // batch)) if trainer else \
        dict(nesterov=False, weight_decay=0.0, schedule="const", learning_rate=0.01)
    tg = training_graph(mobilenet if model == "mobilenet" else mentee, total_steps=10 ** 6, seed=0,
                        optimizer="momentum", **recipe)
    rng = np.random.default_rng(0)
    feed = {tg.images: rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
    fetches = [tg.train_op, tg.loss]
    names = ["plain"] + [b if budgets.count(b) == 1 else f"{b}#{i}" for i, b in enumerate(budgets)]
    sessions = {"plain": tf.Session(graph=tg.graph, device=device)}
    sessions.update({n: tf.Session(graph=tg.graph, device=device, memory_budget=b.split("@")[0])
                     for n, b in zip(names[1:], budgets)})
    times: dict = {name: [] for name in sessions}
    try:
        for (name, s), spec in zip(sessions.items(), [""] + budgets):
            s.run(tg.init_op)
            with _planning(spec):
                s.run(fetches, feed)
            for _ in range(warmup):
                s.run(fetches, feed)
            p = list(s.steps)[-1].plan  # the training step's (the first is init's)
            if p is not None and name != "plain":
                c = p.run_microbatches
                pg = p.paging
                paged = "" if pg is None else f", {len(pg.slots)} slots paged ({pg.paged_bytes / 1e6:.1f} MB, " \
                    f"staging {max(pg.staging.values()) / 1e6:.1f} MB)"
                print(f"  {name}: planned peak {p.peak_bytes / 1e6:.1f} MB, predicted {p.predicted_overhead:+.1%}, "
                      f"runs' counts {','.join(f'{n}x{c.count(n)}' for n in sorted(set(c))) or p.microbatches}"
                      f"{paged}", flush=True)
        losses = {}
        for _ in range(steps):
            for name, s in sessions.items():
                t = time.perf_counter()
                losses[name] = s.run(fetches, feed)[1]
                times[name].append(time.perf_counter() - t)
        # the same steps from the same weights: a budget's plan trains as the plain step (float tolerance)
        print("  loss after the steps: " + ", ".join(f"{n} {v:.6f}" for n, v in losses.items()), flush=True)
        if profile:
            for name, s in sessions.items():
                s.runtime.profile_report()
                for _ in range(3):
                    s.run(fetches, feed)
                rep = s.runtime.profile_report()
                total = sum(ms for _, ms in rep.values()) / 3
                print(f"  {name} kernels a step: {sum(n for n, _ in rep.values()) / 3:.0f} launches, {total:.2f} ms: "
                      + ", ".join(f"{k} {n / 3:.0f}/{ms / 3:.2f}" for k, (n, ms) in
                                  sorted(rep.items(), key=lambda kv: -kv[1][1])[:16]), flush=True)
    finally:
        for s in sessions.values():
            s.close()
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


@contextlib.contextmanager
def _planning(spec: str):
    """Planner settings for the plans made inside, from a budget's `@NAME=V` parts: a cost-model weight of opencl
    (planner.cost.CostModel.OPENCL_WEIGHTS: calls, divided, ...), early=0|1 (planner.batch.EARLY_UPDATES),
    maskx=0|1 (planner.crossbatch.MASK_FROM_X), segments=0|1 (planner.crossbatch.SEGMENTS), reserves=1/2/4
    (planner.plan.KEPT_RESERVES), page=0|1 (planner.paging.PAGE: the optimizer's slots paged to the host where the
    cost model says so) or hostbw=BYTES/S (planner.paging.DEFAULT_HOST_BANDWIDTH: the copies' price)."""
    import importlib

    from tfplus.planner import batch, cost, crossbatch, paging
    plan = importlib.import_module("tfplus.planner.plan")
    switches = {"early": (batch, "EARLY_UPDATES", lambda v: v == "1"),
                "page": (paging, "PAGE", lambda v: v == "1"),
                "hostbw": (paging, "DEFAULT_HOST_BANDWIDTH", float),
                "maskx": (crossbatch, "MASK_FROM_X", lambda v: v == "1"),
                "segments": (crossbatch, "SEGMENTS", lambda v: v == "1"),
                "reserves": (plan, "KEPT_RESERVES", lambda v: tuple(int(r) for r in v.split("/")))}
    weights = dict(cost.CostModel.OPENCL_WEIGHTS)
    saved = {name: getattr(module, attr) for name, (module, attr, _) in switches.items()}
    try:
        for item in spec.split("@")[1:]:
            name, _, value = item.partition("=")
            if name in switches:
                module, attr, parse = switches[name]
                setattr(module, attr, parse(value))
            elif name in weights:
                cost.CostModel.OPENCL_WEIGHTS[name] = float(value)
            else:
                raise SystemExit(f"--budgets {spec}: unknown setting {name!r} ({', '.join(switches)} or one of "
                                 f"{', '.join(weights)})")
        yield
    finally:
        cost.CostModel.OPENCL_WEIGHTS.update(weights)
        for name, (module, attr, _) in switches.items():
            setattr(module, attr, saved[name])


def _launches(rt, step, steps: int) -> float | None:
    """Kernel launches per step (calls of the OpenCL runtime's run(), and the launches of replayed tapes; copies
    not counted); None on the cpu."""
    if not hasattr(rt, "run"):
        return None
    count = [0]
    run, play = rt.run, rt.tape_play

    def counted(*args):
        count[0] += 1
        return run(*args)

    def played(tape, *args):
        count[0] += tape.launches
        return play(tape, *args)
    rt.run, rt.tape_play = counted, played  # the launchers and the executor call them through the instance
    try:
        for _ in range(steps):
            step()
    finally:
        del rt.run, rt.tape_play
    return count[0] / steps


def _host_breakdown(session, step, steps: int) -> dict:
    """Host milliseconds per step in the executor: all of it (tfplus.engine.executor.Program.replay), in kernels
    (launchers and enqueueing), and the rest (the executor's own loop, output allocation). Wraps the
    executor's internals and has the session's programs bind their kernels again (benchmark only)."""
    from tfplus.engine import executor as E
    spent = {"execute": 0.0, "kernels": 0.0}
    by_type: dict = {}

    def replay(self, feeds):
        t = time.perf_counter()
        try:
            return saved[0](self, feeds)
        finally:
            spent["execute"] += time.perf_counter() - t

    def find(op_type, device, dtype):
        k = saved[1](op_type, device, dtype)
        if k is None:
            return k

        def kernel(*a):
            t = time.perf_counter()
            try:
                return k(*a)
            finally:
                dt = time.perf_counter() - t
                spent["kernels"] += dt
                by_type[op_type] = by_type.get(op_type, 0.0) + dt
        return kernel

    def rebind():
        for p in [*session.programs, *(p for st in session.steps for p in st.programs)]:
            p._version = None
    saved = E.Program.replay, E.find_kernel
    E.Program.replay, E.find_kernel = replay, find
    rebind()
    step()  # binds the wrapped kernels and finds the shapes again, outside the measurement
    spent["execute"] = spent["kernels"] = 0.0
    by_type.clear()
    try:
        for _ in range(steps):
            step()
    finally:
        E.Program.replay, E.find_kernel = saved
        rebind()
    out = {k: v / steps * 1e3 for k, v in spent.items()}
    out["outputs"] = out["execute"] - out["kernels"]
    out["by_type"] = {k: v / steps * 1e3 for k, v in sorted(by_type.items(), key=lambda kv: -kv[1])[:12]}
    return out


def launch_overhead(device: str, n: int = 5000) -> None:
    """Host microseconds per launch of a tiny kernel: through rt.run, pyopencl's invoker, and a bare enqueue
    (arguments already set), to see what a step's ~100 launches cost on the host."""
    import numpy as np
    import pyopencl as cl

    from tfplus.kernels.opencl._common import kernel
    from tfplus.runtime import get_runtime
    rt = get_runtime(device)
    a = rt.copy_in(np.ones(256, np.float32))
    k = kernel(rt, "training.cl", "apply_momentum", a.dtype)
    args = (a, a, a, a, a, np.int32(256), np.int32(0))
    cargs = [c for x in args for c in ((rt.buffer(x), x.block.off) if hasattr(x, "block") else (x,))]
    rt.run(k, (256,), (256,), *args)
    ways = {"rt.run": lambda: rt.run(k, (256,), (256,), *args),
            "invoker": lambda: k.k(rt.queue, (256,), (256,), *cargs),
            "bare enqueue": lambda: cl._cl.enqueue_nd_range_kernel(rt.queue, k.k, (256,), (256,), None, None,
                                                                     False, False)}
    for name, fn in ways.items():
        rt.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        rt.synchronize()
        print(f"launch overhead, {name:13s}: {(time.perf_counter() - t) / n * 1e6:6.2f} us")


# -- peers ---------------------------------------------------------------------------------------------------
def bench_torch(batch: int, steps: int, warmup: int, which: str = "mentee", graph: bool = False) -> dict:
    """PyTorch's step on CUDA: eager, or with `graph` the whole step (forward, backward, the optimizer's update)
    captured once as a CUDA graph and replayed (PyTorch's documented whole-network capture): PyTorch with no host
    cost a step, the bar issue 37 names."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    dev = torch.device("cuda")

    def conv(i, o):
        return [nn.Conv2d(i, o, 3, padding=1), nn.ReLU()]
    if which == "mobilenet":  # torch_reference.py's mirror of tfplus.graphs.mobilenet (train mode: batch norm)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_reference import MobileNet
        model = MobileNet().to(dev).train()
    else:
        model = nn.Sequential(*conv(3, 32), *conv(32, 32), nn.MaxPool2d(2), *conv(32, 64), *conv(64, 64),
                              nn.MaxPool2d(2), *conv(64, 128), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(2048, 256),
                              nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    if graph:  # warm up on a side stream (the momentum buffers made there), then capture one step
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(captured):
            static_loss = F.cross_entropy(model(x), y)
            static_loss.backward()
            opt.step()

        def step():
            captured.replay()
            return static_loss.item()

    def fwd():
        with torch.no_grad():
            return F.cross_entropy(model(x), y).item()
    for _ in range(warmup):
        step()
    ms = statistics.median(_times(step, steps)) * 1e3
    return {"name": "pytorch cuda graph" if graph else "pytorch eager", "device": torch.cuda.get_device_name(),
            "batch": batch, "ms": ms,
            "gflops": _gflop_per_sample(which) * batch / (ms * 1e-3),
            "fwd_ms": statistics.median(_times(fwd, steps)) * 1e3}


def bench_tinygrad(backend: str, batch: int, steps: int, warmup: int) -> dict:
    os.environ["DEV"] = backend
    os.environ["TRAINING"] = "1"  # tinygrad's optimizers step only in training mode
    from tinygrad import Device, Tensor, TinyJit, nn
    t0 = time.perf_counter()

    class Mentee:
        def __init__(self):
            widths = ((3, 32), (32, 32), (32, 64), (64, 64), (64, 128))
            self.convs = [nn.Conv2d(i, o, 3, padding=1) for i, o in widths]
            self.fcs = [nn.Linear(2048, 256), nn.Linear(256, 128), nn.Linear(128, 10)]

        def __call__(self, x):
            for i, c in enumerate(self.convs):
                x = c(x).relu()
                if i in (1, 3, 4):
                    x = x.max_pool2d(2)
            x = x.flatten(1)
            x = self.fcs[1](self.fcs[0](x).relu()).relu()
            return self.fcs[2](x)
    model = Mentee()
    opt = nn.optim.SGD(nn.state.get_parameters(model), lr=0.01, momentum=0.9)
    x = Tensor.randn(batch, 3, 32, 32).realize()
    y = Tensor.randint(batch, high=10).realize()

    @TinyJit
    def jit_step():
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward()
        opt.step()
        return loss.realize()

    def step():
        return jit_step().item()
    step()
    compile_s = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    ms = statistics.median(_times(step, steps)) * 1e3
    return {"name": f"tinygrad {backend}", "device": Device.DEFAULT, "batch": batch, "ms": ms,
            "gflops": GFLOP_PER_SAMPLE * batch / (ms * 1e-3), "first_step_s": compile_s}


def _peer(args, which: str) -> dict | None:
    """Runs one peer in a child process (a peer that is missing or fails is reported, not fatal)."""
    cmd = [sys.executable, "-P", os.path.abspath(__file__), "--peer", which, "--batch", str(args.batch),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--model", args.model]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.peer_timeout)
    except subprocess.TimeoutExpired:
        return {"name": which, "error": f"timed out after {args.peer_timeout} s"}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"name": which, "error": (r.stderr.strip().splitlines() or ["no output"])[-1][:200]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="opencl")
    p.add_argument("--model", choices=("mentee", "mobilenet"), default="mentee",
                   help="the step timed (and --budgets's); MobileNet's peer is PyTorch only")
    p.add_argument("--trainer-recipe", action="store_true", help="--budgets times the trainer's optimizer (Nesterov "
                   "momentum, weight decay) instead of plain momentum")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile", action="store_true",
                   help="per-kernel GPU times (needs TFPLUS_OPENCL_PROFILE=1)")
    p.add_argument("--cprofile", action="store_true", help="print the host-side Python profile of the steps")
    p.add_argument("--launch-overhead", action="store_true", help="time one kernel launch three ways")
    p.add_argument("--budgets", default="", help="comma-separated memory budgets (1TB: the unconstrained "
                   "planned arena) to time against the plain executor, e.g. 1TB,64MB,32MB,24MB")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--unfused", action="store_true",
                   help="also run tfplus with the graph rewrite off (TFPLUS_REWRITE=0's effect), same process")
    p.add_argument("--peers", default=None, help="default: torch,tinygrad:CL,tinygrad:CUDA (MobileNet: torch); "
                   "torch:graph: PyTorch's step captured as a CUDA graph")
    p.add_argument("--peer", help=argparse.SUPPRESS)
    p.add_argument("--peer-timeout", type=int, default=240)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    if args.peers is None:
        args.peers = "torch" if args.model == "mobilenet" else "torch,tinygrad:CL,tinygrad:CUDA"
    if args.peer:
        if args.peer in ("torch", "torch:graph"):
            res = bench_torch(args.batch, args.steps, args.warmup, args.model,
                              graph=args.peer == "torch:graph")
        else:
            res = bench_tinygrad(args.peer.split(":")[1], args.batch, args.steps, args.warmup)
        print("RESULT " + json.dumps(res))
        return
    if args.launch_overhead:
        launch_overhead(args.device)
    if args.budgets:
        ms = bench_budgets(args.device, args.batch, args.steps, args.warmup, args.budgets.split(","), args.model,
                           args.trainer_recipe, args.profile)
        print(f"{args.model} step by memory budget ({args.device}, batch {args.batch}, {args.steps} rounds in "
              f"turns{', the trainer recipe' if args.trainer_recipe else ''}):")
        for name, v in ms.items():
            print(f"  {name:8s} {v:8.2f} ms/step  {v / ms['plain'] - 1:+7.1%} vs plain")
    results = [bench_tfplus(args.device, args.batch, args.steps, args.warmup, args.profile, args.cprofile,
                            model=args.model)]
    if args.unfused:
        results.append(bench_tfplus(args.device, args.batch, args.steps, args.warmup, False, rewrite=False,
                                    model=args.model))
    if not args.no_peers:
        results += [r for r in (_peer(args, w) for w in args.peers.split(",")) if r]
    import platform
    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), cpu)
    print(f"\nhost CPU: {cpu}, Python {platform.python_version()}")
    print(f"\n{'run':22s} {'ms/step':>8s} {'GFLOP/s':>8s} {'fwd ms':>7s} {'fwd %':>6s} {'first s':>8s} "
          f"{'launches':>8s}  device")
    for r in results:
        if "error" in r:
            print(f"{r['name']:22s} unavailable: {r['error']}")
            continue
        fwd = r.get("fwd_ms")
        print(f"{r['name']:22s} {r['ms']:8.2f} {r['gflops']:8.0f} {fwd or float('nan'):7.2f} "
              f"{100 * fwd / r['ms'] if fwd else float('nan'):6.1f} "
              f"{r.get('first_step_s', float('nan')):8.2f} "
              f"{r.get('launches') or float('nan'):8.1f}  "
              f"{r['device']}")
    t = results[0]
    print(f"\ntfplus: batch {t['batch']}, h2d {t['h2d_bytes']} B/step, d2h {t['d2h_bytes']} B/step, "
          f"new device allocations in {args.steps} steps: {t['new_device_allocations']}; "
          f"import {t['import_s']:.2f} s, "
          f"first step {t['first_step_s']:.2f} s, cold start {t['cold_start_s']:.2f} s; "
          f"loss {t['loss_first']:.4f} -> {t['loss_last']:.4f}")
    h = t["host"]
    print(f"host time per step ({t['ops']} ops): executor {h['execute']:.2f} ms, of which kernel launchers "
          f"{h['kernels']:.2f} ms and the executor's own loop and allocation {h['outputs']:.2f} ms; "
          "launchers by op type (ms): "
          + ", ".join(f"{k} {v:.2f}" for k, v in h["by_type"].items()))
    if t["kernels"]:
        total = sum(ms for _, ms in t["kernels"].values())
        print(f"GPU kernel time {total:.2f} ms/step of {t['ms']:.2f} ms wall; top kernels:")
        for name, (n, ms) in sorted(t["kernels"].items(), key=lambda kv: -kv[1][1])[:15]:
            print(f"  {name:28s} {n:5.1f} launches {ms:7.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
