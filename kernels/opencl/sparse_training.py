"""OpenCL kernels for the sparse optimizer updates (ops/sparse_training_ops.py). Source: sparse_training.cl.

A _SparseApply* op gathers the named rows of the variable and of its slots into scratch (one row per index),
sums the gradient's rows per index, runs the dense Apply* kernel (training.py) on those rows, and scatters the
first row of each index back: the variables never leave the device, and the dense formula is written once.
"""
from __future__ import annotations

import math

import numpy as np

from tfplus.kernels.numpy.sparse_training import SPARSE
from tfplus.kernels.opencl._common import CTYPE, kernel, register
from tfplus.registry import find_kernel, register_workspace

SRC = "sparse_training.cl"
F = ("float32", "float64")


def _geometry(var, indices) -> tuple:
    """(positions, elements per row, rows of the variable) as the kernels' int arguments."""
    return np.int32(indices.size), np.int32(math.prod(var.shape[1:])), np.int32(var.shape[0])


def _k(rt, name: str, dt, indices):
    return kernel(rt, SRC, name, dt, TI=CTYPE[indices.dtype.name])


# Scatter op -> its SCATTER_OP code in sparse_training.cl's scatter kernel.
_SCATTER_OPS = {"ScatterUpdate": 0, "ScatterAdd": 1, "ScatterSub": 2, "ScatterMul": 3, "ScatterDiv": 4,
                "ScatterMin": 5, "ScatterMax": 6}


def _scatter_kernel(op_type: str):
    def fn(ctx, ins, outs, attrs):
        rt, (ref, indices, updates) = ctx.runtime, ins
        n, inner, rows = _geometry(ref, indices)
        k = kernel(rt, SRC, "scatter", ref.dtype, TI=CTYPE[indices.dtype.name], SCATTER_OP=_SCATTER_OPS[op_type])
        rt.run1d(k, int(n) * int(inner), ref, indices, updates, n, inner, rows)
    return fn


for _op in _SCATTER_OPS:
    register(_op, F)(_scatter_kernel(_op))


def _sparse_kernel(op_type: str):
    dense_op, refs, grad_at, _ = SPARSE[op_type]

    def fn(ctx, ins, outs, attrs):
        rt, var, grad, indices = ctx.runtime, ins[0], ins[grad_at], ins[grad_at + 1]
        n, inner, rows = _geometry(var, indices)
        total = int(n) * int(inner)
        if total == 0:
            return
        bufs = [ctx.workspace(grad.shape, attrs["T"]) for _ in range(1 + refs)]
        summed, gathered = bufs[0], bufs[1:]
        rt.run1d(_k(rt, "sum_rows", var.dtype, indices), total, summed, grad, indices, n, inner)
        gather = _k(rt, "gather_rows", var.dtype, indices)
        for r in range(refs):
            rt.run1d(gather, total, gathered[r], ins[r], indices, n, inner, rows)
        # The dense kernel updates every element of its first input, element by element: the scratch rows.
        dense_ins = gathered + list(ins[refs:grad_at]) + [summed] + list(ins[grad_at + 2:])
        find_kernel(dense_op, "opencl", attrs["T"])(ctx, dense_ins, [dense_ins[0]], attrs)
        scatter = _k(rt, "scatter_rows", var.dtype, indices)
        for r in range(refs):
            rt.run1d(scatter, total, ins[r], gathered[r], indices, n, inner, rows)

    @register_workspace(op_type, "opencl")
    def _workspace(ins, attrs, compute_units):
        return [(ins[grad_at].shape, attrs["T"])] * (1 + refs)

    fn.__name__ = "_" + op_type.lstrip("_").lower()
    register(op_type, F)(fn)


for _op in SPARSE:
    _sparse_kernel(_op)
