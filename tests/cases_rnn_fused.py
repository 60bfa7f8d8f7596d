"""Op-table cases of the fused recurrent cells (tfplus/ops/rnn_fused_ops.py, made by tfplus.engine.rewrite_rnn): each
against the NumPy of TF1's cell formulas. They exist only after autodiff (not differentiable); their gradient ops
are checked against finite differences in tests/engine/test_rnn_fused.py."""
from __future__ import annotations

import numpy as np
from optable import Case

from tfplus.framework import apply_op


def _uniform(shape, lo, hi):
    return lambda rng, dt: rng.uniform(lo, hi, shape).astype(dt)


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def ref_gru(x, h, gk, gb, ck, cb):
    """TF1's GRUCell: (h', [x, h], sigmoid gates r | u, [x, r * h], the candidate c)."""
    n = h.shape[1]
    xh = np.concatenate([x, h], 1)
    gates = sigmoid(xh @ gk + gb)
    r, u = gates[:, :n], gates[:, n:]
    xrh = np.concatenate([x, r * h], 1)
    c = np.tanh(xrh @ ck + cb)
    return u * h + (1 - u) * c, xh, gates, xrh, c


def ref_gru_grad(dh, h, gates, c, gk, ck):
    """The chain rule through ref_gru: (d gates before the sigmoid, d c before the tanh, dx, dh)."""
    n = h.shape[1]
    d = gk.shape[0] - n
    r, u = gates[:, :n], gates[:, n:]
    d_cand = dh * (1 - u) * (1 - c * c)
    d_xrh = d_cand @ ck.T
    d_gates = np.concatenate([d_xrh[:, d:] * h, dh * (h - c)], 1) * gates * (1 - gates)
    d_xh = d_gates @ gk.T
    return d_gates, d_cand, d_xrh[:, :d] + d_xh[:, :d], dh * u + d_xrh[:, d:] * r + d_xh[:, d:]


def ref_lstm(x, h, c, k, b, forget_bias):
    """TF1's BasicLSTMCell: (h', c', [x, h], the activations i | j | f | o, tanh(c'))."""
    n = h.shape[1]
    xh = np.concatenate([x, h], 1)
    z = xh @ k + b
    acts = np.concatenate([sigmoid(z[:, :n]), np.tanh(z[:, n:2 * n]), sigmoid(z[:, 2 * n:3 * n] + forget_bias),
                           sigmoid(z[:, 3 * n:])], 1)
    i, j, f, o = (acts[:, m * n:(m + 1) * n] for m in range(4))
    new_c = c * f + i * j
    return np.tanh(new_c) * o, new_c, xh, acts, np.tanh(new_c)


def ref_lstm_grad(dh, c, acts, tanh_c, k, *dc_new):
    """The chain rule through ref_lstm: (d [i, j, f, o] before the activations, dx, dh, dc)."""
    n = dh.shape[1]
    d = k.shape[0] - n
    i, j, f, o = (acts[:, m * n:(m + 1) * n] for m in range(4))
    dc = dh * o * (1 - tanh_c ** 2) + (dc_new[0] if dc_new else 0)
    d_gates = np.concatenate([dc * j * i * (1 - i), dc * i * (1 - j * j), dc * c * f * (1 - f),
                              dh * tanh_c * o * (1 - o)], 1)
    d_xh = d_gates @ k.T
    return d_gates, d_xh[:, :d], d_xh[:, d:], dc * f


def _gru(b, d, n, tag):
    return Case(f"fused_gru_cell_{tag}", lambda *ins: apply_op("_FusedGRUCell", list(ins), name="fused"),
                inputs=[(b, d), (b, n), (d + n, 2 * n), (2 * n,), (d + n, n), (n,)], ref=ref_gru, grad=False)


def _gru_grad(b, d, n, tag):
    return Case(f"fused_gru_cell_grad_{tag}", lambda *ins: apply_op("_FusedGRUCellGrad", list(ins), name="fused"),
                inputs=[(b, n), (b, n), _uniform((b, 2 * n), 0.05, 0.95), _uniform((b, n), -0.95, 0.95),
                        (d + n, 2 * n), (d + n, n)], ref=ref_gru_grad, grad=False)


def _lstm(b, d, n, forget_bias, tag):
    return Case(f"fused_lstm_cell_{tag}",
                lambda *ins: apply_op("_FusedLSTMCell", list(ins), {"forget_bias": forget_bias}, "fused"),
                inputs=[(b, d), (b, n), (b, n), (d + n, 4 * n), (4 * n,)],
                ref=lambda *a: ref_lstm(*a, forget_bias), grad=False)


def _lstm_grad(b, d, n, with_dc, tag):
    def build(dh, c, acts, tanh_c, k, *dc):
        return apply_op("_FusedLSTMCellGrad", [dh, c, acts, tanh_c, k, list(dc)], name="fused")
    acts = np.concatenate  # the activations: sigmoids in (0, 1), tanh(j) in (-1, 1)
    return Case(f"fused_lstm_cell_grad_{tag}", build,
                inputs=[(b, n), (b, n),
                        lambda rng, dt: acts([rng.uniform(0.05, 0.95, (b, n)), rng.uniform(-0.95, 0.95, (b, n)),
                                              rng.uniform(0.05, 0.95, (b, 2 * n))], 1).astype(dt),
                        _uniform((b, n), -0.95, 0.95), (d + n, 4 * n)] + ([(b, n)] if with_dc else []),
                ref=ref_lstm_grad, grad=False)


def _matmul_sum(rows, k, m, tag):
    """Pairs (rows[i], k) and (rows[i], m)."""
    pairs = len(rows)

    def ref(*ts):
        a, g = ts[:pairs], ts[pairs:]
        return sum(x.T @ y for x, y in zip(a, g)), sum(y.sum(0) for y in g)
    return Case(f"fused_matmul_sum_{tag}", lambda *ts: apply_op("_FusedMatMulSum", [list(ts)], name="fused"),
                inputs=[(r, k) for r in rows] + [(r, m) for r in rows], ref=ref, grad=False)


CASES = [
    _gru(3, 5, 4, "small"),
    _gru(2, 7, 150, "wide"),            # more gate columns than a work-group (opencl): the strided loop
    _gru_grad(3, 5, 4, "small"),
    _gru_grad(2, 3, 150, "wide"),
    _lstm(3, 5, 4, 1.0, "small"),
    _lstm(2, 4, 70, 0.5, "wide_forget_bias"),
    _lstm_grad(3, 5, 4, True, "small"),
    _lstm_grad(2, 3, 70, False, "wide_no_dc"),
    _matmul_sum([4, 4, 4], 5, 6, "three"),
    _matmul_sum([3] * 11, 4, 70, "eleven"),          # opencl: two launches of up to 8 pairs, the second adding
    _matmul_sum([2, 2, 5, 1, 1] + [3] * 9, 3, 4, "uneven_rows"),  # cpu: stacks of uneven rows; opencl: one
    # launch per run of one number of rows
]
