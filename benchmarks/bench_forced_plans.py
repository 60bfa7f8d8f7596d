"""Named candidate plans of the Mentee step, each timed against the plain step, with the cost model's prediction and
the plan's peak beside the measurement: the ground truth for the model's ranking of plans that the search does not
choose (a streamed prefix with a scratch divisor, deeper prefixes). Not a test.

The step is bench_gpu_step.py's (momentum, batch 128, float images fed) as the session runs it (the graph
rewrite on). A candidate is written as plan.Candidate's fields, `k,c,z,d,r` and optionally a streamed prefix
`/cut,m[,keep|keep2][,sN]`: e.g. `2,1,1,1,2` (2 micro-batches, compact, recompute level 2) or
`1,1,0,4,0/MaxPool:0,2,keep` (the prefix up to pool1 in 2 micro-batches keeping its argmax, scratch divisor 4);
`...,keep,s3` the same with 3 convolutions' scratch divided where the step peaks instead (plan._Step._spread);
keep2 keeps the pools' outputs too (plan.KEEP_OUTPUTS: a prefix to pool2 reruns conv1 and conv3 in its backward,
not conv2). Sessions run one step each in turns.

    python benchmarks/bench_forced_plans.py --device opencl --plans 2,1,1,1,2 "1,1,0,4,0/MaxPool:0,2,keep"
    python benchmarks/bench_forced_plans.py --compute-units 132 --plans ...   # predictions only, on those facts
    TFPLUS_OPENCL_PROFILE=1 python benchmarks/bench_forced_plans.py --device opencl --profile --plans ...  # + kernels
    python benchmarks/bench_forced_plans.py --model mobilenet --trainer-recipe --compute-units 132 --counts \
        --budgets 128MB,64MB --weights calls=4e-6   # the search's MobileNet plans on the H200's facts, kernel calls
    python benchmarks/bench_forced_plans.py --model mobilenet --trainer-recipe --compute-units 132 --alignment 512 \
        --groups --budgets 1TB,128MB,64MB           # their work by group of runs: where the time goes

With --compute-units N nothing runs: the plans are made for an OpenCL device of N compute units (the H200 has 132)
on this machine's kernels, and their peaks and predicted costs printed, with the plan the search chooses for each
of --budgets (with --counts, its kernel calls per op type and its runs' micro-batch counts too). --weights NAME=V
sets opencl cost-model weights (cost.CostModel.OPENCL_WEIGHTS) for the planning here.
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import time


def candidate(text: str, plan):
    """plan.Candidate of 'k,c,z,d,r[/cut,m[,keep|keep2][,sN]]' (sN: N rounds of scratch divisors spread where the
    step peaks, plan._Step._spread)."""
    head, _, tail = text.partition("/")
    k, c, z, d, r = (int(x) for x in head.split(","))
    s = None
    if tail:
        cut, m, *more = tail.split(",")
        rounds = next((int(x[1:]) for x in more if x.startswith("s")), 0)
        keep = 2 if "keep2" in more else int("keep" in more)
        s = plan.Prefix(cut, int(m), 1, rounds, keep)
    return plan.Candidate(k, c, bool(z), d, r, s)


# Ops the executor visits that launch no kernel on a GPU (the host computes them or they alias their input).
_HOST = {"Const", "Identity", "NoOp", "Shape", "Reshape", "Squeeze", "ExpandDims", "VariableV2", "Placeholder"}


def op_calls(p) -> dict[str, int]:
    """Op type -> the calls of that type's kernel one step by plan `p` makes: each run's ops (those the executor
    runs a kernel for, but the host's) times the run's micro-batches."""
    from tfplus.planner.liveness import executes
    if p.stream is not None:
        times = {"prefix": p.stream_microbatches, "prefix backward": p.stream_microbatches}
    else:
        counts = p.run_microbatches or [p.microbatches] * (len(p.phases) - 1) + [1]
        times = {ph.name: n for ph, n in zip(p.phases, counts)} if p.microbatches > 1 else {}
    calls: dict[str, int] = {}
    for ph in p.phases:
        for op in ph.order:
            if executes(op, ph.feeds) and op.type not in _HOST:
                calls[op.type] = calls.get(op.type, 0) + times.get(ph.name, 1)
    return calls


def _print_counts(p) -> None:
    calls = op_calls(p)
    print(f"    {sum(calls.values())} kernel calls: " +
          ", ".join(f"{t} {n}" for t, n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))))
    if p.run_microbatches:
        print("    runs' micro-batch counts: " + " ".join(map(str, p.run_microbatches)))


def _layers(ph) -> dict[str, list[int]]:
    """A run's layer calls by kind (forward convolutions, normalizations, convolution backprops), each with the
    spatial side of the activations it reads (NCHW; filters are HWIO: 1 or 3 rows)."""
    from tfplus.planner.liveness import executes
    kinds: dict[str, list] = {}
    for op in ph.order:
        if not executes(op, ph.feeds) or op.type in _HOST:
            continue
        kind = ("conv" if op.type in ("Conv2D", "DepthwiseConv2dNative") else
                "norm" if op.type in ("_BatchNormApply", "FusedBatchNormV3") else
                "backprop" if "Backprop" in op.type else None)
        if kind:
            shapes = [ph.specs[t].shape for t in op.inputs if t in ph.specs]
            side = max((h for n, _, h, w in (x for x in shapes if len(x) == 4) if n > 3 and h == w), default=0)
            kinds.setdefault(kind, []).append(side)
    return kinds


def _print_runs(p) -> None:
    """Per run of a split step: its micro-batch count and its layers' calls (forward convolutions, normalizations,
    convolution backprops), with the spatial sizes of the activations they read: where the recomputation is."""
    counts = p.run_microbatches or [p.microbatches] * len(p.phases)
    for i, ph in enumerate(p.phases):
        kinds = _layers(ph)
        n = counts[i] if i < len(counts) else 1
        print(f"    run {i:2d} {ph.name[:28]:28s} x{n}: " + ", ".join(
            f"{k} {len(v)} ({','.join(f'{s}' for s in sorted(set(v), reverse=True))})" for k, v in kinds.items()))


def _print_profile(name: str, s, fetches, feed, steps: int = 3) -> None:
    """The GPU's kernels a step of session `s` (TFPLUS_OPENCL_PROFILE=1): launches, their summed ms (the rest of
    a step's wall time is the host's and the gaps between launches), the 10 costliest by kernel name."""
    s.runtime.profile_report()
    for _ in range(steps):
        s.run(fetches, feed)
    rep = s.runtime.profile_report()
    top = sorted(rep.items(), key=lambda kv: -kv[1][1])[:10]
    print(f"  {name}: {sum(n for n, _ in rep.values()) / steps:.0f} launches, "
          f"{sum(ms for _, ms in rep.values()) / steps:.3f} GPU ms a step; "
          + ", ".join(f"{k} {n / steps:.0f}/{ms / steps:.3f}" for k, (n, ms) in top), flush=True)

def _print_groups(p) -> None:
    """A split step's work by group of runs: the forward passes and the backward passes (those that run a
    convolution backprop) by the side of the finest activation their layers read, the update runs apart; each
    group's kernel calls, GEMM GFLOPs and elements written (M), all times the runs' micro-batch counts: where the
    recomputation and the launches are."""
    import math

    from tfplus.planner import cost
    from tfplus.planner.liveness import executes
    counts = p.run_microbatches or [p.microbatches] * len(p.phases)
    groups: dict[str, list[float]] = {}
    for i, ph in enumerate(p.phases):
        n = counts[i] if i < len(counts) else 1
        kinds = _layers(ph)
        side = max((s for v in kinds.values() for s in v), default=0)
        name = ("update" if ph.name.startswith("update") else
                f"{'backward' if 'backprop' in kinds else 'forward'} passes to {side}x{side}")
        g = groups.setdefault(name, [0, 0, 0.0, 0.0])
        g[0] += 1
        for op in ph.order:
            if executes(op, ph.feeds) and op.type not in _HOST:
                g[1] += n
                g[2] += n * cost.matmul_flops(op, ph.specs) / 1e9
                g[3] += n * sum(math.prod(ph.specs[o].shape) for o in op.outputs if o in ph.specs) / 1e6
    for name, (runs, calls, gflop, melem) in groups.items():
        print(f"    {name:28s} {runs:3d} runs: {calls:5d} kernel calls, {gflop:6.1f} GFLOP, {melem:6.0f} M elements")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl")
    ap.add_argument("--plans", nargs="+", default=[], metavar="K,C,Z,D,R[/CUT,M[,keep|keep2][,sN]]")
    ap.add_argument("--budgets", default="40MB,32MB,28MB,24MB", help="with --compute-units: the search's choices")
    ap.add_argument("--compute-units", type=int, help="only predict, for an OpenCL device of this many compute units")
    ap.add_argument("--alignment", type=int, help="with --compute-units: its arena alignment in bytes (the H200's is "
                    "512; default this machine's device's)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--model", choices=("mentee", "mobilenet"), default="mentee")
    ap.add_argument("--trainer-recipe", action="store_true", help="the trainer's optimizer (Nesterov momentum, weight "
                    "decay 5e-4, cosine schedule) instead of plain momentum, as bench_gpu_step.py's")
    ap.add_argument("--weights", default="", help="NAME=V,...: opencl cost-model weights to plan with (e.g. "
                    "calls=4e-6,divided=0.6e-14)")
    ap.add_argument("--runs", action="store_true", help="with --compute-units: per run of each budget's plan, its "
                    "micro-batch count and its layers' calls with the spatial sizes they read")
    ap.add_argument("--profile", action="store_true", help="after the timed rounds, each session's kernels a step "
                    "over 3 steps (needs TFPLUS_OPENCL_PROFILE=1): launches, GPU ms and the costliest kernels")

    ap.add_argument("--no-segments", action="store_true", help="plan without the segment order of shedding kept "
                    "rows (planner.crossbatch.SEGMENTS off)")
    ap.add_argument("--groups", action="store_true", help="with --compute-units: each plan's kernel calls, GEMM "
                    "FLOPs and elements written per group of runs (forward and backward passes by the finest side "
                    "their layers read)")
    ap.add_argument("--counts", action="store_true", help="with --compute-units: each plan's kernel calls per op "
                    "type per step (the ops the executor runs a kernel for, times their run's micro-batches)")
    args = ap.parse_args()

    import numpy as np

    import tfplus as tf
    from tfplus.graphs.mentee import default_warmup, mentee, training_graph
    from tfplus.graphs.mobilenet import mobilenet
    from tfplus.planner import crossbatch
    from tfplus.planner.cost import CostModel
    from tfplus.runtime.facts import device_facts
    plan = importlib.import_module("tfplus.planner.plan")  # the module (tfplus.planner.plan is also the function)
    crossbatch.SEGMENTS = not args.no_segments
    for item in filter(None, args.weights.split(",")):
        name, _, value = item.partition("=")
        CostModel.OPENCL_WEIGHTS[name] = float(value)
    # bench_gpu_step.py's recipes, the trainer's with its warm-up (without, its steps turn NaN by the fifth)
    recipe = dict(warmup_steps=default_warmup(50_000 // 128)) if args.trainer_recipe else \
        dict(nesterov=False, weight_decay=0.0, schedule="const", learning_rate=0.01)
    tg = training_graph(mobilenet if args.model == "mobilenet" else mentee, total_steps=10 ** 6, seed=0,
                        optimizer="momentum", **recipe)
    rng = np.random.default_rng(0)
    feed = {tg.images: rng.standard_normal((128, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, 128).astype(np.int32)}
    fetches = [tg.train_op, tg.loss]

    def session(budget=None):
        # NOTE: a GPU session without a budget folds some backward ops (engine.rewrite.backward_folds), one with a
        # budget does not: the candidates are plans of the budgeted session's step, as the search makes them.
        s = tf.Session(graph=tg.graph, device=args.device, memory_budget=budget)
        s.run(tg.init_op)
        compiled = s.step(fetches, feed)  # the rewritten step the session runs
        facts = device_facts(s.runtime)
        if args.compute_units:
            facts = plan.DeviceFacts(f"opencl ({args.compute_units} compute units)", "opencl",
                                     args.alignment or facts.alignment, args.compute_units)
        return s, plan._Step(compiled.fetches, compiled.feed_shapes, facts, compiled.graph, None), compiled

    base = session()[0]  # the plain step, as bench_gpu_step.py times it
    planning, step, compiled = session("1TB")
    print(f"facts: {step.facts}")
    if args.compute_units:
        for b in args.budgets.split(","):
            t = time.perf_counter()
            p = plan.plan(compiled.fetches, compiled.feed_shapes, step.facts, b, graph=compiled.graph,
                          raise_if_infeasible=False)
            names = " + ".join(x["name"] for x in p.transformations if x["name"] not in ("schedule", "inplace"))
            print(f"{b:>6}: peak {p.peak_bytes / 1e6:6.2f} MB{'' if p.fits else ' (does not fit)'}, predicted "
                  f"{p.predicted_overhead:+7.1%}, {names} ({time.perf_counter() - t:.1f} s to plan)")
            if args.counts:
                _print_counts(p)
            if args.runs:
                _print_runs(p)
            if args.groups:
                _print_groups(p)
        for text in args.plans:
            kc = candidate(text, plan)
            p = step.build(*kc)
            print(f"  {text:40s} predicted {p.predicted_overhead:+7.1%}  peak {p.peak_bytes / 1e6:6.2f} MB")
            if args.counts:
                _print_counts(p)
        base.close()
        planning.close()
        return
    runs = []
    for text in args.plans:
        s, st, c = session("1TB")
        p = st.build(*candidate(text, plan))
        c.use_plan(p)
        for _ in range(8):  # the streamed and micro-batched steps play one tape from the fourth
            s.run(fetches, feed)
        runs.append((text, p, s, []))
    plain: list = []
    for _ in range(args.rounds):
        for s, times in [(base, plain)] + [(r[2], r[3]) for r in runs]:
            t = time.perf_counter()
            s.run(fetches, feed)
            times.append(time.perf_counter() - t)
    b0 = statistics.median(plain) * 1e3
    print(f"plain step {b0:.2f} ms (median of {args.rounds}, in turns)", flush=True)
    for text, p, _s, times in runs:
        ms = statistics.median(times) * 1e3
        print(f"  {text:40s} {ms:6.2f} ms {ms / b0 - 1:+7.1%}  predicted {p.predicted_overhead:+7.1%}  "
              f"peak {p.peak_bytes / 1e6:6.2f} MB", flush=True)
    if args.profile:
        for text, s in [("plain", base)] + [(r[0], r[2]) for r in runs]:
            _print_profile(text, s, fetches, feed)
    for r in runs:
        r[2].close()
    base.close()
    planning.close()


if __name__ == "__main__":
    main()
