"""OpenCL kernel for MatMul: a tiled, register-blocked GEMM (matmul.cl on the tile engine of gemm.cl) whose
tile sizes come from the per-device autotuner (_tune.py); small outputs with long sums split K over work-group
layers (_tune.split_k) and add the layers up; the layers and the adding's partials are kernel scratch
(ctx.workspace), declared for the memory planner."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl import _tune
from tfplus.kernels.opencl._common import kernel, register
from tfplus.kernels.opencl.elementwise import fill
from tfplus.kernels.opencl.reduce import FINISH_LOADS, finishes, reduce, split_scratch, tile_counters
from tfplus.registry import register_workspace

SRC = ("gemm.cl", "matmul.cl")
NUM = ("float32", "float64", "int32", "int64")


def _splits(m: int, n: int, k: int, compute_units: int) -> tuple[int, int]:
    """(layers, k per layer): about two work-groups per compute unit, each layer at least 8 K slices deep."""
    return _tune.split_k(m, n, k, compute_units, 2, 8)


def scratch(m: int, n: int, k: int, dtype, compute_units: int) -> list[tuple]:
    """The (shape, dtype) scratch `matmul` of an m x n x k product asks for: the layers, then their sum's."""
    if m * n == 0:
        return []  # an empty product (a batch of 0 rows) launches nothing
    return split_scratch(_splits(m, n, k, compute_units)[0] if k else 1, m * n, dtype, compute_units)


# _FusedMatMul's activation -> matmul.cl's `act`
ACTS = {"": 1, "Relu": 2, "Relu6": 3}


def matmul(rt, c, a, b, m: int, n: int, k: int, sam: int, sak: int, sbk: int, sbn: int, workspace=None,
           bias=None, act: int = 0) -> None:
    """c (m x n, contiguous) = sum_k a[m*sam + k*sak] * b[k*sbk + n*sbn], with `act` (matmul.cl) 1-3 plus
    bias[n] and its activation; scratch from `workspace(shape, dtype)` (a kernel's ctx.workspace), else
    rt.allocate."""
    workspace = workspace or rt.allocate
    if m * n == 0:  # nothing to write (a batch of 0 rows)
        return
    if k == 0:
        fill(rt, c, 0)
        if act:
            _epilogue(rt, c, bias, act)
        return
    key = ("matmul", c.dtype, m, n, k, sam, sak, sbk, sbn)
    plan = rt.plans.get(key)
    if plan is None:
        fast = {"A_K_FAST": int(sak == 1 and sam != 1), "B_K_FAST": int(sbk == 1 and sbn != 1)}
        i32 = np.int32

        def make(cfg):
            splits, chunk = _splits(m, n, k, rt.info["compute_units"])
            g, loc = _tune.launch_shape(cfg, m, n, splits)
            scalars = (i32(m), i32(n), i32(k), i32(sam), i32(sak), i32(sbk), i32(sbn), i32(n), i32(chunk))
            # the last layer of each tile adds the layers up (gemm.cl's GEMM_SPLIT_FINISH) when they are few
            finish = finishes(rt, splits, cfg, FINISH_LOADS)
            return kernel(rt, SRC, "matmul", c.dtype, **fast, **_tune.defines(cfg)), g, loc, scalars, splits, finish

        def run(cfg):
            _launch(rt, make(cfg), c, a, b, rt.allocate)
        cfg = _tune.choose(rt, f"matmul|{c.dtype.name}|{fast['A_K_FAST']}{fast['B_K_FAST']}|{m}x{n}x{k}",
                           c.dtype.itemsize, run)
        plan = rt.plans[key] = make(cfg)
    _launch(rt, plan, c, a, b, workspace, bias, act)


def _launch(rt, plan, c, a, b, workspace, bias=None, act: int = 0) -> None:
    k, g, loc, scalars, splits, finish = plan
    i32 = np.int32
    if splits == 1:
        rt.run(k, g, loc, c, a, b, None, None, bias, *scalars, i32(0), i32(act))
        return
    layers = workspace((splits, c.size), c.dtype)
    if finish:
        done = tile_counters(rt, g, loc)
        rt.run(k, g, loc, layers, a, b, c, done, bias, *scalars, i32(1), i32(act))
        return
    rt.run(k, g, loc, layers, a, b, None, None, None, *scalars, i32(0), i32(0))
    reduce(rt, "sum", c, layers, [0], 1, workspace)
    if act:
        _epilogue(rt, c, bias, act)


def _epilogue(rt, c, bias, act: int) -> None:
    """matmul.cl's `act` over c in place, for a product the kernel did not write itself (split layers added up
    by a second pass): the kernels of BiasAdd and of _FusedBiasAddRelu."""
    k = kernel(rt, "nn.cl", "bias_add", c.dtype) if act == 1 else \
        kernel(rt, "fused.cl", "fused_bias_relu", c.dtype, RELU6=int(act == 3))
    rt.run(k, *rt.grid1d(c.size), c, c, bias, np.int32(c.size), np.int32(bias.size), np.int32(1))


@register("MatMul", NUM)
def _matmul(ctx, ins, outs, attrs):
    _product(ctx, *ins, outs[0], attrs)


def _product(ctx, a, b, out, attrs, bias=None, act: int = 0) -> None:
    m, n = out.shape
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]
    k = a.shape[0] if ta else a.shape[1]
    sam, sak = (1, m) if ta else (k, 1)
    sbk, sbn = (1, k) if tb else (n, 1)
    matmul(ctx.runtime, out, a, b, m, n, k, sam, sak, sbk, sbn, ctx.workspace, bias, act)


@register("_FusedMatMul", ("float32", "float64"))
def _fused_matmul(ctx, ins, outs, attrs):
    _product(ctx, *ins[:2], outs[0], attrs, ins[2], ACTS[attrs["activation"]])


@register_workspace("_FusedMatMul", "opencl")
@register_workspace("MatMul", "opencl")
def _matmul_scratch(ins, attrs, compute_units):
    a, b = ins[:2]
    m = a.shape[1] if attrs["transpose_a"] else a.shape[0]
    n = b.shape[0] if attrs["transpose_b"] else b.shape[1]
    k = a.shape[0] if attrs["transpose_a"] else a.shape[1]
    return scratch(m, n, k, a.dtype, compute_units)
