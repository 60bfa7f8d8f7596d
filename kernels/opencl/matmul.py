"""OpenCL kernel for MatMul: a tiled, register-blocked GEMM (matmul.cl on the tile engine of gemm.cl) whose
tile sizes come from the per-device autotuner (_tune.py); small outputs with long sums split K over work-group
layers and add the layers up."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl import _tune
from tfplus.kernels.opencl._common import kernel, register
from tfplus.kernels.opencl.elementwise import fill
from tfplus.kernels.opencl.reduce import reduce

SRC = ("gemm.cl", "matmul.cl")
NUM = ("float32", "float64", "int32", "int64")


def _splits(rt, cfg, m: int, n: int, k: int) -> tuple[int, int]:
    """(layers, k per layer): enough work-groups to fill the device, each layer at least 8 K slices deep."""
    tiles = -(-m // cfg[0]) * -(-n // cfg[1])
    splits = max(1, min(2 * rt.info["compute_units"] // tiles, k // (8 * cfg[2])))
    per = -(-k // splits)
    chunk = -(-per // cfg[2]) * cfg[2]
    return -(-k // chunk), chunk


def matmul(rt, c, a, b, m: int, n: int, k: int, sam: int, sak: int, sbk: int, sbn: int) -> None:
    """c (m x n, contiguous) = sum_k a[m*sam + k*sak] * b[k*sbk + n*sbn]."""
    if k == 0:
        fill(rt, c, 0)
        return
    key = ("matmul", c.dtype, m, n, k, sam, sak, sbk, sbn)
    plan = rt.plans.get(key)
    if plan is None:
        fast = {"A_K_FAST": int(sak == 1 and sam != 1), "B_K_FAST": int(sbk == 1 and sbn != 1)}
        i32 = np.int32

        def make(cfg):
            splits, chunk = _splits(rt, cfg, m, n, k)
            g, loc = _tune.launch_shape(cfg, m, n, splits)
            scalars = (i32(m), i32(n), i32(k), i32(sam), i32(sak), i32(sbk), i32(sbn), i32(n), i32(chunk))
            return kernel(rt, SRC, "matmul", c.dtype, **fast, **_tune.defines(cfg)), g, loc, scalars, splits

        def run(cfg):
            _launch(rt, make(cfg), c, a, b)
        cfg = _tune.choose(rt, f"matmul|{c.dtype.name}|{fast['A_K_FAST']}{fast['B_K_FAST']}|{m}x{n}x{k}",
                           c.dtype.itemsize, run)
        plan = rt.plans[key] = make(cfg)
    _launch(rt, plan, c, a, b)


def _launch(rt, plan, c, a, b) -> None:
    k, g, loc, scalars, splits = plan
    if splits == 1:
        rt.run(k, g, loc, c, a, b, *scalars)
        return
    layers = rt.allocate((splits, c.size), c.dtype)
    rt.run(k, g, loc, layers, a, b, *scalars)
    reduce(rt, "sum", c, layers, [0])


@register("MatMul", NUM)
def _matmul(ctx, ins, outs, attrs):
    a, b = ins
    out = outs[0]
    m, n = out.shape
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]
    k = a.shape[0] if ta else a.shape[1]
    sam, sak = (1, m) if ta else (k, 1)
    sbk, sbn = (1, k) if tb else (n, 1)
    matmul(ctx.runtime, out, a, b, m, n, k, sam, sak, sbk, sbn)
