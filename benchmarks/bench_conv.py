"""Times the NumPy conv kernels on each Mentee conv layer (NCHW, 3x3 SAME, batch 128): forward, input
gradient and filter gradient, in ms and GFLOP/s (2*N*H*W*C*K*9 per pass), and compares with PyTorch if it is
installed. Run: `python benchmarks/bench_conv.py [--batch 128] [--repeat 5] [--generic] [--clock cpu]
[--torch-threads 1] [--paths shift,winograd,winograd4]` (--paths: each fast path of conv.py on every layer, the one
conv._path picks or not, as columns beside the kernels').

The machine may be shared: each pass is timed `--repeat` times and the minimum is reported, and the
alternatives are interleaved in one run so that load affects them alike. On a busy machine, compare
single-threaded runs by CPU time: `OPENBLAS_NUM_THREADS=1 python benchmarks/bench_conv.py --clock cpu
--torch-threads 1` (multi-threaded BLAS slows down many times over when another process holds a core).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tfplus.kernels.numpy  # noqa: F401  registers the kernels
from tfplus import dtypes
from tfplus.kernels.numpy import conv
from tfplus.registry import find_kernel

# (name, in channels, out channels, height = width) of Mentee's conv layers on 32x32 CIFAR images.
LAYERS = [("conv1", 3, 32, 32), ("conv2", 32, 32, 32), ("conv3", 32, 64, 16), ("conv4", 64, 64, 16),
          ("conv5", 64, 128, 8)]
ATTRS = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW", "dilations": [1, 1, 1, 1]}


class Ctx:
    """The part of the executor's kernel context the conv kernels use."""

    def workspace(self, shape, dtype):
        return np.empty(shape, dtype.np)


def best_ms(fn, repeat: int, clock=time.perf_counter) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = clock()
        fn()
        times.append(clock() - t)
    return 1e3 * min(times)


def numpy_passes(n, c, k, hw, generic: bool):
    """The three passes of one layer as closures over fresh random buffers."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, hw, hw), np.float32)
    f = rng.standard_normal((3, 3, c, k), np.float32)
    dy = rng.standard_normal((n, k, hw, hw), np.float32)
    y, dx, df = np.empty_like(dy), np.empty_like(x), np.empty_like(f)
    sizes_x, sizes_f = np.array(x.shape, np.int32), np.array(f.shape, np.int32)
    ctx = Ctx()
    if generic:
        return {"forward": lambda: conv._conv2d_generic(ctx, x, f, y, ATTRS),
                "input": lambda: conv._conv2d_backprop_input_generic(ctx, f, dy, dx, ATTRS),
                "filter": lambda: conv._conv2d_backprop_filter_generic(ctx, x, dy, df, ATTRS)}
    kern = {op: find_kernel(op, "cpu", dtypes.float32)
            for op in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")}
    return {"forward": lambda: kern["Conv2D"](ctx, [x, f], [y], ATTRS),
            "input": lambda: kern["Conv2DBackpropInput"](ctx, [sizes_x, f, dy], [dx], ATTRS),
            "filter": lambda: kern["Conv2DBackpropFilter"](ctx, [x, sizes_f, dy], [df], ATTRS)}


def path_passes(n, c, k, hw, path: str):
    """The three passes of one layer by one fast path (conv._TILE's Winograd tiles or 'shift'), whichever
    conv._path would choose; the filter's transforms are made in each pass, as the kernels make them."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, hw, hw), np.float32)
    f = rng.standard_normal((3, 3, c, k), np.float32)
    dy = rng.standard_normal((n, k, hw, hw), np.float32)
    y, dx, df = np.empty_like(dy), np.empty_like(x), np.empty_like(f)
    ctx, dt, r = Ctx(), dtypes.float32, conv._TILE.get(path)

    def conv_with(src, filt, cin, cout, out):
        shared = conv._shared(ctx, path, "forward", filt, cin, cout, hw, hw, dt)
        if r:
            conv._wino_conv(ctx, src, shared, out, r=r)
        else:
            conv._shift_conv(ctx, src, shared, out)

    def filter_grad():
        if r:
            conv._wino_backprop_filter(ctx, x, dy, df, [], r=r)
        else:
            conv._shift_backprop_filter(ctx, x, dy, df, [])
    return {"forward": lambda: conv_with(x, f, c, k, y), "input": lambda: conv_with(dy, conv._flipped(f), k, c, dx),
            "filter": filter_grad}


def torch_passes(n, c, k, hw):
    import torch
    torch.manual_seed(0)
    x = torch.randn(n, c, hw, hw, requires_grad=True)
    w = torch.randn(k, c, 3, 3, requires_grad=True)
    dy = torch.randn(n, k, hw, hw)
    nn = torch.nn.grad
    return {"forward": lambda: torch.nn.functional.conv2d(x, w, padding=1),
            "input": lambda: nn.conv2d_input(x.shape, w, dy, padding=1),
            "filter": lambda: nn.conv2d_weight(x, w.shape, dy, padding=1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--generic", action="store_true", help="also time the generic im2col path")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time, or this process's CPU time (all threads)")
    ap.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--paths", default="", help="comma list of fast paths to time on every layer: "
                    + ", ".join(["shift", *conv._TILE]))
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    bad = [p for p in paths if p not in ("shift", *conv._TILE)]
    if bad:
        ap.error(f"--paths {','.join(bad)}: not a fast path (shift, {', '.join(conv._TILE)})")
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    try:
        import torch
        torch.set_grad_enabled(False)
        if args.torch_threads:
            torch.set_num_threads(args.torch_threads)
    except ImportError:
        torch = None
    impls = ["tfplus"] + (["generic"] if args.generic else []) + paths + (["torch"] if torch else [])
    threads = f", torch threads {torch.get_num_threads()}" if torch else ""
    print(f"batch {args.batch}, NCHW float32, 3x3 SAME stride 1; best of {args.repeat}, {args.clock} clock, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}{threads}")
    print(f"{'layer':6s} {'pass':8s} " + " ".join(f"{name:>18s}" for name in impls))
    totals = dict.fromkeys(impls, 0.0)
    for name, c, k, hw in LAYERS:
        n = args.batch
        gflop = 2 * n * hw * hw * c * k * 9 / 1e9
        passes = {"tfplus": numpy_passes(n, c, k, hw, False)}
        if args.generic:
            passes["generic"] = numpy_passes(n, c, k, hw, True)
        for path in paths:
            passes[path] = path_passes(n, c, k, hw, path)
        if torch:
            passes["torch"] = torch_passes(n, c, k, hw)
        for p in ("forward", "input", "filter"):
            if p == "input" and name == "conv1":
                continue  # the first layer's input gradient is never needed in training
            cells = []
            for impl in impls:
                ms = best_ms(passes[impl][p], args.repeat, clock)
                totals[impl] += ms
                cells.append(f"{ms:7.1f}ms {gflop / ms * 1e3:5.0f}GF/s")
            print(f"{name:6s} {p:8s} " + " ".join(f"{cell:>18s}" for cell in cells))
    print(f"{'total':15s} " + " ".join(f"{totals[i]:16.1f}ms" for i in impls))


if __name__ == "__main__":
    main()
