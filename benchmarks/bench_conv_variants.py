"""The Mentee convolutions under each of kernels/opencl/conv.py's TFPLUS_CONV_VARIANTS (issue 37 item 3). Not a test.

Part 1, per problem: each Mentee conv layer's forward (with its fused bias and ReLU, as the step runs it), input
gradient and filter gradient, NCHW float32, at each batch (128 and the micro-batches 64 and 32), under each
variant set; the GPU's time for the pass (OpenCL event timing, every kernel the launcher enqueues: a filter
gradient's second pass too), median of --reps, and the pass's error: max |output - NumPy| / max |NumPy|, the
NumPy result in float64 (its output zeroed first, so that a pass that writes nothing shows).
Part 2, the whole training step (bench_gpu_step.py's Mentee step:
momentum SGD, batch 128, the graph rewrite on, replayed from its tape) under each variant set, each in a process of
its own, in --rounds rounds (drift on a shared machine falls on all alike): median wall ms a step and launches;
with --kernel-sums also each set's kernel time a step (a profiled process per set: all kernels, conv.cl's).

    python benchmarks/bench_conv_variants.py                                   # GPU: both parts
    TFPLUS_OPENCL_TUNE_S=inf python benchmarks/bench_conv_variants.py          # tune every variant's tiles first
    python benchmarks/bench_conv_variants.py --batches 4 --reps 2 --steps 2 --warmup 1 --rounds 1   # PoCL check

On a GPU, halo is the default since stop 45 (conv.py GPU_VARIANTS: 3x3+vtile with the forwards and input gradients
on conv3_halo; the H200's tiles for both are shipped); "all" is 3x3+vtile with dwfinish, "halo+dw" adds the filter
gradients on conv3_wgrad_halo (slower on the H200), "halo+dwt" the filter gradients on conv3_wgrad_tile (stop 46),
"halo+kg" halo's forwards and input gradients tuned over configs with channel groups too (stop 46: a GPU's default
since, conv.GPU_VARIANTS, so "halo" now names the set without them), "halo+kg+dwt" both.
Tiles: the other sets' kernels are new problems to the tuner; under the default bound on tuning (1 s a process)
most would run the nearest tuned problem's tile or the default one. Run with TFPLUS_OPENCL_TUNE_S=inf: part 1
tunes them all (kept in the device's tuning file), and part 2's processes find them there.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# (name, in channels, out channels, height = width) of Mentee's conv layers on 32x32 images.
LAYERS = [("conv1", 3, 32, 32), ("conv2", 32, 32, 32), ("conv3", 32, 64, 16), ("conv4", 64, 64, 16),
          ("conv5", 64, 128, 8)]
ATTRS = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW", "dilations": [1, 1, 1, 1],
         "activation": "Relu"}
THREE = "fwd3x3,dx3x3,dw3x3"
# name -> TFPLUS_CONV_VARIANTS
CONFIGS = {"general": "none", "3x3": THREE, "3x3+vtile": THREE + ",vtile", "all": THREE + ",vtile,dwfinish",
           "halo": THREE + ",vtile,halo", "halo+dw": THREE + ",vtile,halo,dwhalo",
           "halo+dwt": THREE + ",vtile,halo,dwtile", "halo+kg": THREE + ",vtile,halo,halokg",
           "halo+kg+dwt": THREE + ",vtile,halo,halokg,dwtile"}
STEP_CONFIGS = {"general": "none", "fwd3x3": "fwd3x3", "dx3x3": "dx3x3", "dw3x3": "dw3x3", **CONFIGS}


class _Ctx:
    """What the conv launchers use of the executor's kernel context."""

    def __init__(self, rt):
        self.runtime = rt

    def workspace(self, shape, dtype):
        return self.runtime.allocate(shape, dtype)


def _np_conv(x, w):
    """A 3x3 stride-1 SAME Conv2D of NCHW x by HWIO w in float64 (the reference of part 1's error column)."""
    import numpy as np
    h, wd = x.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    return sum(np.einsum("nchw,co->nohw", xp[:, :, kh:kh + h, kw:kw + wd], w[kh, kw].astype(np.float64),
                         optimize=True) for kh in range(3) for kw in range(3))


def _np_filter_grad(x, dy):
    import numpy as np
    h, wd = x.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    return np.stack([np.stack([np.einsum("nchw,nohw->co", xp[:, :, kh:kh + h, kw:kw + wd], dy.astype(np.float64),
                                         optimize=True) for kw in range(3)]) for kh in range(3)])


def _passes(rt, batch: int, cin: int, cout: int, hw: int):
    """{pass: (a call of its opencl kernel, its output buffer, its NumPy result in float64)} over random device
    buffers of one layer."""
    import numpy as np

    from tfplus import dtypes
    from tfplus.registry import find_kernel
    rng = np.random.default_rng(0)

    hx, hf, hb, hdy = (rng.standard_normal(s).astype(np.float32) for s in
                       ((batch, cin, hw, hw), (3, 3, cin, cout), (cout,), (batch, cout, hw, hw)))
    x, f, b, dy = (rt.copy_in(a) for a in (hx, hf, hb, hdy))
    y, dx, df = rt.allocate(dy.shape, np.float32), rt.allocate(x.shape, np.float32), rt.allocate(f.shape, np.float32)
    sizes_x = rt.copy_in(np.array(x.shape, np.int32))
    sizes_f = rt.copy_in(np.array(f.shape, np.int32))
    ctx = _Ctx(rt)

    def kern(op):
        return find_kernel(op, "opencl", dtypes.float32)
    out = {"forward": (lambda: kern("_FusedConv2DBiasRelu")(ctx, [x, f, b], [y], ATTRS), y,
                       lambda: np.maximum(_np_conv(hx, hf) + hb[:, None, None], 0)),
           "filter": (lambda: kern("Conv2DBackpropFilter")(ctx, [x, sizes_f, dy], [df], ATTRS), df,
                      lambda: _np_filter_grad(hx, hdy))}
    if cin > 3:  # the first layer's input gradient is never computed in training
        out["input"] = (lambda: kern("Conv2DBackpropInput")(ctx, [sizes_x, f, dy], [dx], ATTRS), dx,
                        lambda: _np_conv(hdy, hf[::-1, ::-1].transpose(0, 1, 3, 2)))
    return out


def _gpu_ms(rt, fn, reps: int) -> float:
    """Median over `reps` calls of the GPU time of every kernel one call of `fn` enqueues."""
    fn()  # plans, builds, tunes
    times = []
    for _ in range(reps):
        with rt.timing() as events:
            fn()
        times.append(sum(ev.profile.end - ev.profile.start for _, ev in events) * 1e-6)
    return statistics.median(times)


def problems(device: str, batches: list[int], reps: int, configs: dict) -> None:
    import numpy as np

    from tfplus.runtime import opencl
    rt = opencl.OpenCLRuntime(None if device == "opencl" else device.split(":", 1)[1])
    print(f"{rt.describe()}; GPU ms per pass, median of {reps}; TFPLUS_OPENCL_TUNE_S="
          f"{os.environ.get('TFPLUS_OPENCL_TUNE_S', 'unset (1 s)')}")
    names = list(configs)
    print("each cell: GPU ms / max |output - NumPy (float64)| / max |NumPy| (float32 rounding: ~1e-6)")
    print(f"{'layer':6s} {'pass':8s} {'batch':>5s} " + " ".join(f"{n:>18s}" for n in names))
    for batch in batches:
        totals = dict.fromkeys(names, 0.0)
        for layer, cin, cout, hw in LAYERS:
            passes = _passes(rt, batch, cin, cout, hw)
            for p, (fn, out, reference) in passes.items():
                cells, want = [], reference()
                for name in names:
                    os.environ["TFPLUS_CONV_VARIANTS"] = configs[name]  # read at each call; plans keyed by it
                    try:
                        ms = _gpu_ms(rt, fn, reps)
                        rt.copy(out, rt.copy_in(np.zeros(out.shape, np.float32)))  # a pass writing nothing shows
                        fn()
                        err = float(np.abs(rt.copy_out(out) - want).max() / np.abs(want).max())
                    except Exception as e:  # noqa: BLE001  one variant that fails (a build) leaves the others' rows
                        print(f"{layer} {p} {batch} {name}: {type(e).__name__}: {str(e)[:2000]}", file=sys.stderr)
                        ms = err = float("nan")
                    totals[name] += ms
                    cells.append(f"{ms:8.4f} /{err:8.1e}")
                print(f"{layer:6s} {p:8s} {batch:5d} " + " ".join(cells), flush=True)
        print(f"{'total':6s} {'':8s} {batch:5d} " + " ".join(f"{totals[n]:18.4f}" for n in names), flush=True)
    os.environ.pop("TFPLUS_CONV_VARIANTS", None)


def _step_child(args) -> None:
    """One step measurement under the TFPLUS_CONV_VARIANTS this process was given: a JSON line."""
    spec = importlib.util.spec_from_file_location("bench_gpu_step", Path(__file__).with_name("bench_gpu_step.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.bench_tfplus(args.device, args.step_batch, args.steps, args.warmup, profile=args.profile)
    print(json.dumps({"ms": r["ms"], "launches": r["launches"], "loss_first": r["loss_first"],
                      "loss_last": r["loss_last"], "kernels": r["kernels"]}))


def _child(args, name: str, variants: str, profile: bool) -> dict | None:
    """A step child's result under `variants` (with TFPLUS_OPENCL_PROFILE=1 when `profile`), or None."""
    env = {**os.environ, "TFPLUS_CONV_VARIANTS": variants, **({"TFPLUS_OPENCL_PROFILE": "1"} if profile else {})}
    cmd = [sys.executable, *(["-P"] if sys.flags.safe_path else []), __file__, "--step-child", "--device",
           args.device, "--step-batch", str(args.step_batch), "--steps", str(args.steps), "--warmup",
           str(args.warmup), *(["--profile"] if profile else [])]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode:
        print(f"{name}: failed\n{done.stderr[-2000:]}", flush=True)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def steps(args, configs: dict) -> None:
    got: dict = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, value in configs.items():
            r = _child(args, name, value, False)
            if r:
                got[name].append(r)
    print(f"\nwhole step, batch {args.step_batch}, {args.steps} steps after {args.warmup}, {args.rounds} rounds "
          "(median of the rounds' medians)")
    print("(the same data and initial weights: the first loss, before any update, agrees to float32 rounding; the last,"
          " after every step the bench runs, drifts apart with the steps)")
    print(f"{'variants':12s} {'ms/step':>8s} {'launches':>9s} {'first loss':>11s} {'last loss':>10s}")
    for name, runs in got.items():
        if runs:
            print(f"{name:12s} {statistics.median(r['ms'] for r in runs):8.3f} {runs[-1]['launches']:9.0f} "
                  f"{runs[-1]['loss_first']:11.6f} {runs[-1]['loss_last']:10.5f}")
    if not args.kernel_sums:
        return
    print("\nkernel time a step (TFPLUS_OPENCL_PROFILE=1, one process each): all kernels, the conv.cl ones, the rest")
    print(f"{'variants':12s} {'sum ms':>8s} {'conv ms':>8s} {'other ms':>8s}  conv kernels (ms, launches)")
    for name, value in configs.items():
        r = _child(args, name, value, True)
        if r:
            kernels = r["kernels"]  # name -> (launches, ms) a step
            conv = {k: v for k, v in kernels.items() if k.startswith("conv")}
            total, conv_ms = sum(v[1] for v in kernels.values()), sum(v[1] for v in conv.values())
            detail = ", ".join(f"{k} {v[1]:.3f} ({v[0]:.0f})" for k, v in sorted(conv.items()))
            print(f"{name:12s} {total:8.3f} {conv_ms:8.3f} {total - conv_ms:8.3f}  {detail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl", help="opencl, or opencl:<selector> (an index or a name)")
    ap.add_argument("--batches", default="128,64,32", help="part 1's batch sizes")
    ap.add_argument("--reps", type=int, default=50, help="part 1: timed calls per pass and variant")
    ap.add_argument("--step-batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200, help="part 2: timed steps per process")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="part 2: processes per variant set")
    ap.add_argument("--only", choices=("problems", "step"), help="run one part")
    ap.add_argument("--configs", help=f"comma list of variant sets to run (default all: {', '.join(STEP_CONFIGS)}; "
                    "part 1 takes those of " + ", ".join(CONFIGS) + ")")
    ap.add_argument("--timeout", type=int, default=300, help="part 2: seconds a process may take")
    ap.add_argument("--kernel-sums", action="store_true",
                    help="part 2: also each set's kernel time a step (a profiled process per set)")
    ap.add_argument("--step-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step_child:
        _step_child(args)
        return
    picked = args.configs.split(",") if args.configs else list(STEP_CONFIGS)
    unknown = sorted(set(picked) - set(STEP_CONFIGS))
    if unknown:
        ap.error(f"--configs: {unknown} unknown; give some of {', '.join(STEP_CONFIGS)}")
    if args.only != "step":
        problems(args.device, [int(b) for b in args.batches.split(",")], args.reps,
                 {n: v for n, v in CONFIGS.items() if n in picked})
    if args.only != "problems":
        steps(args, {n: v for n, v in STEP_CONFIGS.items() if n in picked})


if __name__ == "__main__":
    main()
