"""Fused recurrent cells that only the graph rewrite creates (tfplus.engine.rewrite_rnn): one time step of TF1's
GRUCell or BasicLSTMCell / LSTMCell (tfplus/rnn.py) forward in one op, and its gradient in one op, in place of
the ~13 forward and ~80 backward ops the unrolled cell is built from. Like the other `_Fused*` ops they exist only
after autodiff, so they are declared not differentiable.

Each forward op also outputs what the backward reads: the concatenated [x, h] the weight gradients multiply by
and the gate activations. Each gradient op outputs the gates' pre-activation gradient (what the weight gradients
read) and the gradients of the step's input x and previous state, each already summed over the cell's uses of it.
The weight gradients of all the steps are one _FusedMatMulSum per kernel (and its bias).
"""
from __future__ import annotations

from tfplus.ops.row_rules import reduces, rowwise
from tfplus.registry import not_differentiable, register_op, register_rows
from tfplus.tensor_shape import check_rank, check_same_dtype, fmt, merge_dim, spec


def _dims(x, h, kernel, gates: int, what: str) -> tuple:
    """(batch, depth, units) of a cell step: x (batch, depth), h (batch, units), kernel (depth + units,
    gates * units)."""
    for s, name in ((x, "x"), (h, "h"), (kernel, "kernel")):
        check_rank(s, 2, name)
    batch = merge_dim(x.shape[0] if x.shape else None, h.shape[0] if h.shape else None,
                      f"{what}: x {fmt(x.shape)} and h {fmt(h.shape)} must have one batch size")
    depth = x.shape[1] if x.shape else None
    units = h.shape[1] if h.shape else None
    if kernel.shape is not None:
        rows, cols = kernel.shape
        units = merge_dim(units, None if cols is None else cols // gates,
                          f"{what}: kernel {fmt(kernel.shape)} must have {gates} x units columns, h {fmt(h.shape)}")
        if rows is not None and depth is not None and units is not None and rows != depth + units:
            raise ValueError(f"{what}: kernel {fmt(kernel.shape)} must have depth + units = {depth} + {units} rows")
    return batch, depth, units


def _cell_flops(gates: int):
    """2 per multiply-add of the step's product [x, h] @ kernel, plus ~10 per gate element (activations)."""
    def fn(ins, outs, attrs) -> float:
        batch, depth = ins[0]
        units = ins[1][1]
        return float(2 * batch * (depth + units) * gates * units + 10 * batch * gates * units)
    return fn


# -- _FusedGRUCell: TF1's GRUCell step -----------------------------------------------------------------------
# r, u = split(sigmoid([x, h] @ gate_kernel + gate_bias)); c = tanh([x, r * h] @ cand_kernel + cand_bias);
# h' = c + u * (h - c). Outputs h', [x, h], the gates (r | u, after the sigmoid), [x, r * h] and c.
def _gru_shape(ins, attrs):
    check_same_dtype(ins, "the inputs of _FusedGRUCell")
    x, h, gk, gb, ck, cb = ins
    b, d, n = _dims(x, h, gk, 2, "_FusedGRUCell")
    _dims(x, h, ck, 1, "_FusedGRUCell")
    check_rank(gb, 1, "gate_bias")
    check_rank(cb, 1, "cand_bias")
    row = None if d is None or n is None else d + n
    two = None if n is None else 2 * n
    t = x.dtype
    return [spec((b, n), t), spec((b, row), t), spec((b, two), t), spec((b, row), t), spec((b, n), t)]


register_op("_FusedGRUCell", inputs=("x", "h", "gate_kernel", "gate_bias", "cand_kernel", "cand_bias"),
            outputs=("new_h", "xh", "gates", "xrh", "cand"), attrs={"T": "type"}, shape_fn=_gru_shape,
            flops=_cell_flops(3), tags=("gemm",))
register_rows(rowwise, "_FusedGRUCell")
not_differentiable("_FusedGRUCell")


# -- _FusedGRUCellGrad: the gradient of one _FusedGRUCell step -------------------------------------------------
# From dh' (the new state's gradient), h, the gates and c: d_gates (of the gates' pre-activation, (batch, 2n)),
# d_cand (of the candidate's pre-activation, (batch, n)), dx and dh (each summed over the cell's uses of it).
def _gru_grad_shape(ins, attrs):
    check_same_dtype(ins, "the inputs of _FusedGRUCellGrad")
    dh, h, gates, cand, gk, ck = ins
    for s, name in ((dh, "new_h_backprop"), (gates, "gates"), (cand, "cand")):
        check_rank(s, 2, name)
    b = merge_dim(dh.shape[0] if dh.shape else None, h.shape[0] if h.shape else None,
                  f"_FusedGRUCellGrad: dh {fmt(dh.shape)} and h {fmt(h.shape)} must have one batch size")
    n = h.shape[1] if h.shape else None
    check_rank(gk, 2, "gate_kernel")
    d = None if gk.shape is None or gk.shape[0] is None or n is None else gk.shape[0] - n
    t = dh.dtype
    return [spec((b, None if n is None else 2 * n), t), spec((b, n), t), spec((b, d), t), spec((b, n), t)]


def _gru_grad_flops(ins, outs, attrs) -> float:
    batch, units = ins[0]
    return float(2 * batch * ins[4][0] * 3 * units + 20 * batch * units)


register_op("_FusedGRUCellGrad", inputs=("new_h_backprop", "h", "gates", "cand", "gate_kernel", "cand_kernel"),
            outputs=("gates_backprop", "cand_backprop", "x_backprop", "h_backprop"), attrs={"T": "type"},
            shape_fn=_gru_grad_shape, flops=_gru_grad_flops, tags=("gemm",))
register_rows(rowwise, "_FusedGRUCellGrad")
not_differentiable("_FusedGRUCellGrad")


# -- _FusedLSTMCell: TF1's BasicLSTMCell / LSTMCell step (no peepholes, clipping or projection) ---------------
# i, j, f, o = split([x, h] @ kernel + bias, 4); c' = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j);
# h' = tanh(c') * sigmoid(o). Outputs h', c', [x, h], the activations (sigmoid(i) | tanh(j) | sigmoid(f +
# forget_bias) | sigmoid(o), (batch, 4n)) and tanh(c').
def _lstm_shape(ins, attrs):
    check_same_dtype(ins, "the inputs of _FusedLSTMCell")
    x, h, c, k, bias = ins
    b, d, n = _dims(x, h, k, 4, "_FusedLSTMCell")
    check_rank(c, 2, "c")
    check_rank(bias, 1, "bias")
    row = None if d is None or n is None else d + n
    t = x.dtype
    return [spec((b, n), t), spec((b, n), t), spec((b, row), t), spec((b, None if n is None else 4 * n), t),
            spec((b, n), t)]


register_op("_FusedLSTMCell", inputs=("x", "h", "c", "kernel", "bias"),
            outputs=("new_h", "new_c", "xh", "acts", "tanh_c"), attrs={"T": "type", "forget_bias": "float"},
            shape_fn=_lstm_shape, flops=_cell_flops(4), tags=("gemm",))
register_rows(rowwise, "_FusedLSTMCell")
not_differentiable("_FusedLSTMCell")


# -- _FusedLSTMCellGrad: the gradient of one _FusedLSTMCell step -----------------------------------------------
# From dh' and, when c' has a gradient of its own (the next step reads it), dc' (the variadic last input, N 0 or
# 1): d_gates (of [i, j, f, o] before the activations, (batch, 4n)), dx, dh and dc.
def _lstm_grad_shape(ins, attrs):
    check_same_dtype(ins, "the inputs of _FusedLSTMCellGrad")
    dh, c, acts, tanh_c, k, *dc = ins
    if len(dc) != attrs.get("N", 0) or len(dc) > 1:
        raise ValueError(f"_FusedLSTMCellGrad takes 0 or 1 new_c_backprop (attr N), got {len(dc)}")
    check_rank(dh, 2, "new_h_backprop")
    check_rank(k, 2, "kernel")
    b = dh.shape[0] if dh.shape else None
    n = dh.shape[1] if dh.shape else None
    d = None if k.shape is None or k.shape[0] is None or n is None else k.shape[0] - n
    t = dh.dtype
    return [spec((b, None if n is None else 4 * n), t), spec((b, d), t), spec((b, n), t), spec((b, n), t)]


def _lstm_grad_flops(ins, outs, attrs) -> float:
    batch, units = ins[0]
    return float(2 * batch * ins[4][0] * 4 * units + 20 * batch * units)


register_op("_FusedLSTMCellGrad", inputs=("new_h_backprop", "c", "acts", "tanh_c", "kernel", "new_c_backprop*"),
            outputs=("gates_backprop", "x_backprop", "h_backprop", "c_backprop"), attrs={"T": "type", "N": "int"},
            shape_fn=_lstm_grad_shape, flops=_lstm_grad_flops, tags=("gemm",))
register_rows(rowwise, "_FusedLSTMCellGrad")
not_differentiable("_FusedLSTMCellGrad")


# -- _FusedMatMulSum: a kernel's and a bias's gradients summed over the MatMuls that share them ---------------
# Inputs t: a_1..a_n (rows, k) then g_1..g_n (rows, m) (attr N = 2n). Outputs sum_i a_i^T @ g_i (k, m), what n
# MatMul(a_i, g_i, transpose_a=True) and their AddN give (an unrolled RNN's weight gradient, one MatMul per step),
# and sum_i of g_i's column sums (m,), what n BiasAddGrad(g_i) and their AddN give.
def _matmul_sum_shape(ins, attrs):
    check_same_dtype(ins, "the inputs of _FusedMatMulSum")
    if len(ins) != attrs.get("N") or len(ins) < 2 or len(ins) % 2:
        raise ValueError(f"_FusedMatMulSum takes pairs: a_1..a_n then g_1..g_n (attr N = 2n), got {len(ins)}")
    for s in ins:
        check_rank(s, 2, "each input of _FusedMatMulSum")
    n = len(ins) // 2
    k = m = None
    for a, g in zip(ins[:n], ins[n:]):
        rows = (a.shape[0] if a.shape else None, g.shape[0] if g.shape else None)
        merge_dim(*rows, f"_FusedMatMulSum: a {fmt(a.shape)} and g {fmt(g.shape)} must have one number of rows")
        k = merge_dim(k, a.shape[1] if a.shape else None, "_FusedMatMulSum: every a must have one number of columns")
        m = merge_dim(m, g.shape[1] if g.shape else None, "_FusedMatMulSum: every g must have one number of columns")
    return [spec((k, m), ins[0].dtype), spec((m,), ins[0].dtype)]


def _matmul_sum_flops(ins, outs, attrs) -> float:
    n = len(ins) // 2
    return float(sum(2 * a[0] * a[1] * g[1] + a[0] * g[1] for a, g in zip(ins[:n], ins[n:])))


register_op("_FusedMatMulSum", inputs=("t*",), outputs=("product_sum", "column_sum"), attrs={"T": "type", "N": "int"},
            shape_fn=_matmul_sum_shape, flops=_matmul_sum_flops, tags=("gemm",))
register_rows(reduces, "_FusedMatMulSum")
not_differentiable("_FusedMatMulSum")
