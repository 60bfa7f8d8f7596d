"""NumPy kernels for the sparse optimizer updates (ops/sparse_training_ops.py).

A _SparseApply* kernel sums the gradient's rows per distinct index, gathers those rows of the variable and of its
slots into scratch, runs the dense Apply* kernel on them (the same arithmetic, so a row updates exactly as the
dense op would update it), and writes them back. Its scratch is declared as gradient-shaped buffers (at most one
distinct row per index), so the planner counts it.
"""
from __future__ import annotations

import numpy as np

from tfplus.registry import find_kernel, register_kernel, register_workspace

from .training import DTYPES

# op -> (its dense op, how many ref inputs lead, the position of grad (indices follow it), the dense kernel's
# scratch buffers (training.py's declarations))
SPARSE = {
    "_SparseApplyMomentum": ("ApplyMomentum", 2, 3, 1),
    "_SparseApplyRMSProp": ("ApplyRMSProp", 3, 7, 1),
    "_SparseApplyCenteredRMSProp": ("ApplyCenteredRMSProp", 4, 8, 1),
    "_SparseApplyAdagrad": ("ApplyAdagrad", 2, 3, 1),
    "_SparseApplyAdadelta": ("ApplyAdadelta", 3, 6, 2),
}


def _check_range(op_type: str, indices: np.ndarray, rows: int) -> None:
    bad = (indices < 0) | (indices >= rows)
    if bad.any():
        raise ValueError(f"{op_type}: indices {indices[bad].tolist()[:5]} are out of range [0, {rows}) of the "
                         "variable's rows")


# Scatter op -> the ufunc combining a row with an update; applied with ufunc.at, repeated indices combine in turn.
_COMBINE = {"ScatterAdd": np.add, "ScatterSub": np.subtract, "ScatterMul": np.multiply, "ScatterDiv": np.true_divide,
            "ScatterMin": np.minimum, "ScatterMax": np.maximum}


def _scatter_kernel(op_type: str):
    def kernel(ctx, ins, outs, attrs):
        ref, indices, updates = ins
        flat = indices.reshape(-1)
        _check_range(op_type, flat, ref.shape[0])
        rows = updates.reshape(flat.shape + ref.shape[1:])
        if op_type == "ScatterUpdate":
            ref[flat] = rows  # a repeated index: the last row written, as TF's kernel writes them in order
        else:
            _COMBINE[op_type].at(ref, flat, rows)
    return kernel


for _op in ("ScatterUpdate",) + tuple(_COMBINE):
    register_kernel(_op, "cpu", DTYPES)(_scatter_kernel(_op))


class _RowsContext:
    """What the dense kernel sees: its scratch comes from the sparse kernel's declared buffers, cut to the rows."""

    def __init__(self, ctx, buffers: list, k: int):
        self.op, self.runtime, self._buffers, self._k = ctx.op, ctx.runtime, iter(buffers), k

    def workspace(self, shape, dtype):
        return next(self._buffers)[:self._k].reshape(shape)


def _sparse_kernel(op_type: str):
    dense_op, refs, grad_at, scratch = SPARSE[op_type]

    def kernel(ctx, ins, outs, attrs):
        var, grad, indices = ins[0], ins[grad_at], ins[grad_at + 1].reshape(-1)
        if indices.size == 0:
            return
        _check_range(op_type, indices, var.shape[0])
        rows, where = np.unique(indices, return_inverse=True)
        k, row_shape = rows.size, (indices.size,) + var.shape[1:]
        bufs = [ctx.workspace(grad.shape, attrs["T"]).reshape(row_shape) for _ in range(1 + refs + scratch)]
        summed = bufs[0][:k]
        summed.fill(0)
        np.add.at(summed, where.reshape(-1), grad.reshape(row_shape))  # TF1 sums repeated rows in their order
        gathered = [np.take(ins[r], rows, axis=0, out=bufs[1 + r][:k]) for r in range(refs)]
        dense_ins = gathered + list(ins[refs:grad_at]) + [summed] + list(ins[grad_at + 2:])
        find_kernel(dense_op, "cpu", attrs["T"])(_RowsContext(ctx, bufs[1 + refs:], k), dense_ins,
                                                 [gathered[0]], attrs)
        for r in range(refs):
            ins[r][rows] = gathered[r]

    @register_workspace(op_type, "cpu")
    def _workspace(ins, attrs):
        grad = ins[grad_at]
        return [(grad.shape, attrs["T"])] * (1 + refs + scratch)

    register_kernel(op_type, "cpu", DTYPES)(kernel)


for _op in SPARSE:
    _sparse_kernel(_op)
