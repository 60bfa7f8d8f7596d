"""NumPy kernels of the fused recurrent cells (tfplus/ops/rnn_fused_ops.py, made by tfplus.engine.rewrite_rnn).

A step's rows are independent, so each shard of rows runs the whole cell (its two products and every gate) while
its rows are in cache. The activations are computed as the unfused kernels compute them (sigmoid as
(1 + tanh(x / 2)) / 2, TanhGrad as (1 - y * y) * dy), so a fused step differs from the unfused one only in the
order of a few sums.
"""
from __future__ import annotations

import numpy as np

from tfplus import threads
from tfplus.dtypes import FLOATS, as_dtype
from tfplus.ops import rnn_fused_ops  # noqa: F401  (the ops these kernels are registered for)
from tfplus.registry import register_kernel, register_workspace


def _sigmoid(v: np.ndarray) -> None:
    """v = sigmoid(v) in place, as the Sigmoid kernel computes it (no overflow)."""
    np.multiply(v, 0.5, out=v)
    np.tanh(v, out=v)
    np.multiply(v, 0.5, out=v)
    np.add(v, 0.5, out=v)


def _rows(batch: int, depth: int, units: int, gates: int, body) -> None:
    """body(lo, hi) over shards of the batch's rows, each at least a GEMM's grain of work."""
    threads.parallel_for(batch, body, threads.flop_grain(2 * (depth + units) * gates * units))


@register_kernel("_FusedGRUCell", "cpu", FLOATS)
def _gru_cell(ctx, ins, outs, attrs):
    x, h, gk, gb, ck, cb = ins
    new_h, xh, gates, xrh, cand = outs
    d, n = x.shape[1], h.shape[1]

    def body(lo, hi):
        s = slice(lo, hi)
        xh[s, :d], xh[s, d:] = x[s], h[s]
        np.matmul(xh[s], gk, out=gates[s])
        np.add(gates[s], gb, out=gates[s])
        _sigmoid(gates[s])
        xrh[s, :d] = x[s]
        np.multiply(gates[s, :n], h[s], out=xrh[s, d:])
        np.matmul(xrh[s], ck, out=cand[s])
        np.add(cand[s], cb, out=cand[s])
        np.tanh(cand[s], out=cand[s])
        np.subtract(h[s], cand[s], out=new_h[s])       # h' = c + u * (h - c), as the cell writes it
        np.multiply(gates[s, n:], new_h[s], out=new_h[s])
        np.add(cand[s], new_h[s], out=new_h[s])
    _rows(x.shape[0], d, n, 3, body)


@register_kernel("_FusedGRUCellGrad", "cpu", FLOATS)
def _gru_cell_grad(ctx, ins, outs, attrs):
    dh_new, h, gates, cand, gk, ck = ins
    d_gates, d_cand, dx, dh = outs
    n = h.shape[1]
    d = gk.shape[0] - n
    wide = ctx.workspace((h.shape[0], d + n), as_dtype(h.dtype))     # d[x, h] of one product
    tmp = ctx.workspace((h.shape[0], 2 * n), as_dtype(h.dtype))

    def body(lo, hi):
        s = slice(lo, hi)
        r, u = gates[s, :n], gates[s, n:]
        du, t = d_gates[s, n:], tmp[s, :n]
        np.subtract(h[s], cand[s], out=du)
        np.multiply(du, dh_new[s], out=du)                # du = dh' * (h - c)
        np.multiply(dh_new[s], u, out=dh[s])              # h's share through u * h
        np.subtract(dh_new[s], dh[s], out=d_cand[s])      # dc = dh' - dh' * u
        np.multiply(cand[s], cand[s], out=t)
        np.subtract(1, t, out=t)
        np.multiply(d_cand[s], t, out=d_cand[s])          # through tanh
        np.matmul(d_cand[s], ck.T, out=wide[s])           # d[x, r * h]
        dx[s] = wide[s, :d]
        drh = wide[s, d:]
        np.multiply(drh, r, out=t)
        np.add(dh[s], t, out=dh[s])
        np.multiply(drh, h[s], out=d_gates[s, :n])        # dr
        np.subtract(1, gates[s], out=tmp[s])
        np.multiply(tmp[s], gates[s], out=tmp[s])
        np.multiply(d_gates[s], tmp[s], out=d_gates[s])   # through the sigmoid
        np.matmul(d_gates[s], gk.T, out=wide[s])          # d[x, h]
        np.add(dx[s], wide[s, :d], out=dx[s])
        np.add(dh[s], wide[s, d:], out=dh[s])
    _rows(h.shape[0], d, n, 3, body)


@register_workspace("_FusedGRUCellGrad", "cpu")
def _gru_cell_grad_ws(ins, attrs):
    batch, n = ins[1].shape
    return [((batch, ins[4].shape[0]), ins[0].dtype), ((batch, 2 * n), ins[0].dtype)]


@register_kernel("_FusedLSTMCell", "cpu", FLOATS)
def _lstm_cell(ctx, ins, outs, attrs):
    x, h, c, k, b = ins
    new_h, new_c, xh, acts, tanh_c = outs
    d, n = x.shape[1], h.shape[1]
    forget = x.dtype.type(attrs["forget_bias"])

    def body(lo, hi):
        s = slice(lo, hi)
        xh[s, :d], xh[s, d:] = x[s], h[s]
        a = acts[s]
        np.matmul(xh[s], k, out=a)
        np.add(a, b, out=a)
        i, j, f, o = a[:, :n], a[:, n:2 * n], a[:, 2 * n:3 * n], a[:, 3 * n:]
        np.add(f, forget, out=f)
        _sigmoid(i)
        np.tanh(j, out=j)
        _sigmoid(f)
        _sigmoid(o)
        np.multiply(c[s], f, out=new_c[s])
        np.multiply(i, j, out=tanh_c[s])
        np.add(new_c[s], tanh_c[s], out=new_c[s])
        np.tanh(new_c[s], out=tanh_c[s])
        np.multiply(tanh_c[s], o, out=new_h[s])
    _rows(x.shape[0], d, n, 4, body)


@register_kernel("_FusedLSTMCellGrad", "cpu", FLOATS)
def _lstm_cell_grad(ctx, ins, outs, attrs):
    dh_new, c, acts, tanh_c, k, *dc_new = ins
    d_gates, dx, dh, dc = outs
    n = dh_new.shape[1]
    d = k.shape[0] - n
    wide = ctx.workspace((c.shape[0], d + n), as_dtype(c.dtype))
    tmp = ctx.workspace((c.shape[0], n), as_dtype(c.dtype))

    def body(lo, hi):
        s = slice(lo, hi)
        a, g, t = acts[s], d_gates[s], tmp[s]
        i, j, f, o = a[:, :n], a[:, n:2 * n], a[:, 2 * n:3 * n], a[:, 3 * n:]
        di, dj, df, do = g[:, :n], g[:, n:2 * n], g[:, 2 * n:3 * n], g[:, 3 * n:]
        total = dc[s]                                    # c''s whole gradient, until dc's own value below
        np.multiply(dh_new[s], o, out=total)
        np.multiply(tanh_c[s], tanh_c[s], out=t)
        np.subtract(1, t, out=t)
        np.multiply(total, t, out=total)
        if dc_new:
            np.add(total, dc_new[0][s], out=total)
        np.multiply(dh_new[s], tanh_c[s], out=do)
        np.multiply(total, j, out=di)
        np.multiply(total, i, out=dj)
        np.multiply(total, c[s], out=df)
        np.multiply(total, f, out=total)                  # dc = c''s gradient * sigmoid(f + forget_bias)
        np.multiply(j, j, out=t)
        np.subtract(1, t, out=t)
        np.multiply(dj, t, out=dj)                        # through tanh(j)
        for v, y in ((di, i), (df, f), (do, o)):          # through the sigmoids
            np.subtract(1, y, out=t)
            np.multiply(t, y, out=t)
            np.multiply(v, t, out=v)
        np.matmul(g, k.T, out=wide[s])
        dx[s], dh[s] = wide[s, :d], wide[s, d:]
    _rows(c.shape[0], d, n, 4, body)


@register_workspace("_FusedLSTMCellGrad", "cpu")
def _lstm_cell_grad_ws(ins, attrs):
    batch, n = ins[0].shape
    return [((batch, ins[4].shape[0]), ins[0].dtype), ((batch, n), ins[0].dtype)]


# -- _FusedMatMulSum: _SUM_CHUNK pairs stacked a GEMM at a time, so that BLAS sees tall products ------------------
_SUM_CHUNK = 8


def _sum_chunks(shapes) -> list[range]:
    """The pairs' indices, _SUM_CHUNK at a time."""
    n = len(shapes) // 2
    return [range(i, min(i + _SUM_CHUNK, n)) for i in range(0, n, _SUM_CHUNK)]


def _stacked_rows(shapes) -> int:
    """The most rows a chunk stacks (the pairs may differ in rows)."""
    return max(sum(shapes[i][0] for i in chunk) for chunk in _sum_chunks(shapes))


@register_kernel("_FusedMatMulSum", "cpu", FLOATS)
def _matmul_sum(ctx, ins, outs, attrs):
    total, columns = outs
    n = len(ins) // 2
    k, m = total.shape
    most = _stacked_rows([t.shape for t in ins])
    dt = as_dtype(total.dtype)
    a_all, g_all, part = ctx.workspace((most, k), dt), ctx.workspace((most, m), dt), ctx.workspace((k, m), dt)
    for c, chunk in enumerate(_sum_chunks([t.shape for t in ins])):
        at = 0
        for i in chunk:
            rows = ins[i].shape[0]
            a_all[at:at + rows], g_all[at:at + rows] = ins[i], ins[n + i]
            at += rows
        a, g = a_all[:at], g_all[:at]
        out = total if c == 0 else part
        threads.parallel_for(k, lambda lo, hi, a=a, g=g, out=out: np.matmul(a[:, lo:hi].T, g, out=out[lo:hi]),
                             threads.flop_grain(2 * at * m))
        if c == 0:
            np.sum(g, 0, out=columns)
        else:
            np.add(total, part, out=total)
            np.add(columns, g.sum(0), out=columns)


@register_workspace("_FusedMatMulSum", "cpu")
def _matmul_sum_ws(ins, attrs):
    shapes = [t.shape for t in ins]
    most, k, m = _stacked_rows(shapes), shapes[0][1], shapes[-1][1]
    return [((most, k), ins[0].dtype), ((most, m), ins[0].dtype), ((k, m), ins[0].dtype)]
