"""Op-table cases for tfplus.ops.special_math_ops: forward against NumPy/SciPy, gradients against float64 finite
differences, and (test_tf_ops) both against TensorFlow."""
import numpy as np
from optable import Case
from scipy import special

import tfplus as tf

F = ("float32", "float64")
ALL = ("float16", "float32", "float64")


def uniform(shape, lo, hi):
    return lambda rng, dt: (lo + (hi - lo) * rng.random(shape)).astype(dt)


def _unique(x):
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    rank = np.argsort(order)
    return values[order], rank[inverse].astype(np.int32), counts[order].astype(np.int32)


def _segment(ufunc, empty, data, ids, n):
    out = np.full((n,) + data.shape[ids.ndim:], empty, data.dtype)
    ufunc.at(out, ids[ids >= 0], data[ids >= 0])
    return out


_IDS = np.array([2, 0, 2, -1, 0], np.int32)
_SORTED_IDS = np.array([0, 0, 1, 3, 3], np.int32)
_FULL_IDS = np.array([2, 0, 1, -1, 0], np.int32)  # no empty segment: an empty max is -FLT_MAX, too big to difference

CASES = [
    Case("lgamma", lambda x: tf.lgamma(x), make=lambda rng, dt: [uniform((2, 3), 0.3, 4)(rng, dt)],
         ref=special.gammaln, dtypes=ALL, rtol={"float16": 5e-3}),
    Case("digamma", lambda x: tf.digamma(x), make=lambda rng, dt: [uniform((5,), 0.5, 4)(rng, dt)], ref=special.psi,
         dtypes=F),
    Case("erfc", lambda x: tf.erfc(x), inputs=[(2, 3)], ref=special.erfc, dtypes=F),
    Case("erfinv", lambda x: tf.math.erfinv(x), make=lambda rng, dt: [uniform((5,), -0.9, 0.9)(rng, dt)],
         ref=special.erfinv, dtypes=F, rtol=1e-4),
    Case("ndtri", lambda x: tf.math.ndtri(x), make=lambda rng, dt: [uniform((5,), 0.05, 0.95)(rng, dt)],
         ref=special.ndtri, dtypes=F, rtol=1e-4),
    Case("expm1", lambda x: tf.expm1(x), inputs=[(2, 3)], ref=np.expm1, dtypes=ALL),
    Case("tan", lambda x: tf.tan(x), make=lambda rng, dt: [uniform((5,), -1.2, 1.2)(rng, dt)], ref=np.tan, dtypes=F),
    Case("sinh_cosh", lambda x: (tf.sinh(x), tf.cosh(x)), inputs=[(2, 3)], ref=lambda x: (np.sinh(x), np.cosh(x)),
         dtypes=F),
    Case("asin_acos_atan", lambda x: (tf.asin(x), tf.acos(x), tf.atan(x)),
         make=lambda rng, dt: [uniform((5,), -0.9, 0.9)(rng, dt)],
         ref=lambda x: (np.arcsin(x), np.arccos(x), np.arctan(x)), dtypes=F),
    Case("asinh_atanh", lambda x: (tf.asinh(x), tf.atanh(x)), make=lambda rng, dt: [uniform((5,), -0.9, 0.9)(rng, dt)],
         ref=lambda x: (np.arcsinh(x), np.arctanh(x)), dtypes=F),
    Case("acosh", lambda x: tf.acosh(x), make=lambda rng, dt: [uniform((5,), 1.2, 4)(rng, dt)], ref=np.arccosh,
         dtypes=F),
    Case("bessel_i0e_i1e", lambda x: (tf.math.bessel_i0e(x), tf.math.bessel_i1e(x), tf.math.bessel_i0(x)),
         inputs=[(2, 4)], ref=lambda x: (special.i0e(x), special.i1e(x), special.i0(x)), dtypes=F, rtol=1e-4),
    Case("rint", lambda x: tf.rint(x), make=lambda rng, dt: [(rng.integers(-4, 4, 6) + [0.2, 0.5, 0.7, 0.5, 0.1, 0.9])
                                                           .astype(dt)], ref=np.rint, grad=False, dtypes=F),
    Case("atan2", lambda y, x: tf.atan2(y, x), inputs=[(2, 3), (3,)], ref=np.arctan2, dtypes=F),
    Case("xlogy", lambda x, y: tf.math.xlogy(x, y),
         make=lambda rng, dt: [np.array([0.0, 1.5, -2.0, 0.5], dt), uniform((4,), 0.5, 2)(rng, dt)],
         ref=lambda x, y: np.where(x == 0, 0, x * np.log(y)), grad=[1], dtypes=F),
    # TF's d/dx is 0 at x = 0 (where x log y is smooth): differenced away from 0
    Case("xlogy_xlog1py_xdivy_grad", lambda x, y: (tf.math.xlogy(x, y), tf.math.xlog1py(x, y), tf.math.xdivy(x, y)),
         make=lambda rng, dt: [rng.standard_normal((2, 3)).astype(dt), uniform((3,), 0.5, 2)(rng, dt)],
         ref=lambda x, y: (x * np.log(y), x * np.log1p(y), x / y), dtypes=F),
    Case("xlog1py_xdivy", lambda x, y: (tf.math.xlog1py(x, y), tf.math.xdivy(x, y)),
         make=lambda rng, dt: [np.array([[0.0, 1.5], [-2.0, 0.5]], dt), uniform((2,), 0.5, 2)(rng, dt)],
         ref=lambda x, y: (np.where(x == 0, 0, x * np.log1p(y)), np.where(x == 0, 0, x / y)), grad=[1], dtypes=F),
    Case("zeta", lambda x, q: tf.math.zeta(x, q),
         make=lambda rng, dt: [uniform((4,), 1.5, 4)(rng, dt), uniform((4,), 0.5, 2)(rng, dt)], ref=special.zeta,
         grad=[1], dtypes=F, rtol=1e-4),
    Case("polygamma", lambda a, x: tf.math.polygamma(a, x),
         make=lambda rng, dt: [np.array([0, 1, 2, 1], dt), uniform((4,), 0.5, 3)(rng, dt)],
         ref=lambda a, x: special.polygamma(a.astype(int), x), grad=[1], dtypes=F, rtol=1e-4),
    Case("betainc", lambda a, b, x: tf.math.betainc(a, b, x),
         make=lambda rng, dt: [uniform((4,), 0.5, 3)(rng, dt), uniform((4,), 0.5, 3)(rng, dt),
                               uniform((4,), 0.1, 0.9)(rng, dt)], ref=special.betainc, grad=[2], dtypes=F,
         rtol=1e-4),
    Case("lbeta", lambda x: tf.math.lbeta(x), make=lambda rng, dt: [uniform((2, 3), 0.5, 3)(rng, dt)],
         ref=lambda x: special.gammaln(x).sum(-1) - special.gammaln(x.sum(-1)), dtypes=F, rtol=1e-4),
    Case("cumprod", lambda x: tf.cumprod(x, 1), make=lambda rng, dt: [uniform((2, 4), 0.5, 2)(rng, dt)],
         ref=lambda x: np.cumprod(x, 1), dtypes=F),
    Case("cumprod_exclusive_reverse", lambda x: tf.math.cumprod(x, 0, exclusive=True, reverse=True),
         make=lambda rng, dt: [uniform((3, 2), 0.5, 2)(rng, dt)],
         ref=lambda x: np.concatenate([np.cumprod(x[::-1], 0)[::-1][1:], np.ones((1, 2), x.dtype)]), dtypes=F),
    Case("unique", lambda x: tf.unique(x), inputs=[lambda rng, dt: rng.integers(0, 4, 9).astype(np.int32)],
         ref=lambda x: _unique(x)[:2], grad=False, dtypes=("float32",)),
    Case("unique_with_counts", lambda x: tf.unique_with_counts(tf.cast(x, tf.int64), out_idx=tf.int64),
         inputs=[lambda rng, dt: rng.integers(-3, 3, 7).astype(np.int32)],
         ref=lambda x: tuple(a.astype(np.int64) for a in _unique(x)), grad=False, dtypes=("float32",)),
    Case("unsorted_segment_max_empty", lambda x: tf.unsorted_segment_max(x, _IDS, 4), inputs=[(5, 2)],
         ref=lambda x: _segment(np.maximum, np.finfo(x.dtype).min, x, _IDS, 4), grad=False, dtypes=F),
    Case("unsorted_segment_max", lambda x: tf.unsorted_segment_max(x, _FULL_IDS, 3), inputs=[(5, 2)],
         ref=lambda x: _segment(np.maximum, -np.inf, x, _FULL_IDS, 3), dtypes=F),
    Case("unsorted_segment_min_ties", lambda x: tf.unsorted_segment_min(x, _FULL_IDS, 3),
         make=lambda rng, dt: [np.array([1.0, 2.0, 1.0, 5.0, 2.0], dt)],
         ref=lambda x: _segment(np.minimum, np.inf, x, _FULL_IDS, 3), dtypes=F),
    Case("unsorted_segment_prod", lambda x: tf.unsorted_segment_prod(x, _IDS, 3),
         make=lambda rng, dt: [np.array([[1.5, 0.0], [2.0, -1.0], [0.5, 0.0], [3.0, 1.0], [-0.5, 2.0]], dt)],
         ref=lambda x: _segment(np.multiply, 1, x, _IDS, 3), dtypes=F),
    Case("segment_max_min_prod", lambda x: (tf.segment_max(x, _SORTED_IDS), tf.segment_min(x, _SORTED_IDS),
                                            tf.segment_prod(x, _SORTED_IDS)), inputs=[(5, 2)],
         ref=lambda x: (np.where(np.arange(4)[:, None] == 2, 0, _segment(np.maximum, -np.inf, x, _SORTED_IDS, 4)),
                        np.where(np.arange(4)[:, None] == 2, 0, _segment(np.minimum, np.inf, x, _SORTED_IDS, 4)),
                        _segment(np.multiply, 1, x, _SORTED_IDS, 4)), dtypes=F),
    Case("unsorted_segment_mean_sqrt_n", lambda x: (tf.math.unsorted_segment_mean(x, _IDS, 4),
                                                    tf.math.unsorted_segment_sqrt_n(x, _IDS, 4)), inputs=[(5, 2)],
         ref=lambda x: (_segment(np.add, 0, x, _IDS, 4) / np.maximum(np.bincount(_IDS[_IDS >= 0], minlength=4), 1)
                        [:, None], _segment(np.add, 0, x, _IDS, 4) /
                        np.sqrt(np.maximum(np.bincount(_IDS[_IDS >= 0], minlength=4), 1))[:, None]), dtypes=F),
    Case("searchsorted", lambda s, v: (tf.searchsorted(s, v), tf.searchsorted(s, v, side="right")),
         make=lambda rng, dt: [np.sort(rng.integers(0, 5, (2, 6)), 1).astype(dt),
                               rng.integers(0, 6, (2, 3)).astype(dt)],
         ref=lambda s, v: (np.stack([np.searchsorted(a, b) for a, b in zip(s, v)]).astype(np.int32),
                           np.stack([np.searchsorted(a, b, "right") for a, b in zip(s, v)]).astype(np.int32)),
         grad=False, dtypes=F),
    Case("bincount", lambda x: tf.math.bincount(x, minlength=7), inputs=[lambda rng, dt: rng.integers(0, 5, 9)
                                                                          .astype(np.int32)],
         ref=lambda x: np.bincount(x, minlength=7).astype(np.int32), grad=False, dtypes=("float32",)),
    Case("bincount_weights_maxlength", lambda x, w: tf.math.bincount(x, w, maxlength=3),
         make=lambda rng, dt: [rng.integers(0, 5, 9).astype(np.int32), rng.standard_normal(9).astype(dt)],
         ref=lambda x, w: np.bincount(x[x < 3], w[x < 3], minlength=3).astype(w.dtype), dtypes=F),
    Case("histogram_fixed_width", lambda v: tf.histogram_fixed_width(v, [-1.0, 1.0], nbins=5), inputs=[(4, 5)],
         ref=lambda v: np.bincount(np.clip(np.floor((v.reshape(-1) + 1) / 2 * 5), 0, 4).astype(int),
                                   minlength=5).astype(np.int32), grad=False, dtypes=F),
    Case("polyval", lambda x: tf.math.polyval([2.0, -1.0, 0.5], x), inputs=[(2, 3)],
         ref=lambda x: np.polyval([2.0, -1.0, 0.5], x).astype(x.dtype), dtypes=F),
    Case("roll", lambda x: tf.roll(x, [1, -2], [0, 2]), inputs=[(3, 2, 4)], ref=lambda x: np.roll(x, (1, -2), (0, 2))),
    Case("tensor_scatter_nd", lambda x, u: (tf.tensor_scatter_nd_update(x, [[0], [2]], u),
                                            tf.tensor_scatter_nd_add(x, [[0], [2]], u),
                                            tf.tensor_scatter_nd_sub(x, [[1], [1]], u)), inputs=[(3, 2), (2, 2)],
         ref=lambda x, u: (np.stack([u[0], x[1], u[1]]), np.stack([x[0] + u[0], x[1], x[2] + u[1]]),
                           np.stack([x[0], x[1] - u[0] - u[1], x[2]]))),
    Case("reduce_euclidean_norm", lambda x: tf.math.reduce_euclidean_norm(x, 1), inputs=[(2, 3)],
         ref=lambda x: np.sqrt((x * x).sum(1))),
    Case("multiply_reciprocal_no_nan", lambda x, y: (tf.math.multiply_no_nan(x, y), tf.math.reciprocal_no_nan(y)),
         make=lambda rng, dt: [rng.standard_normal(4).astype(dt), np.array([0.0, 1.5, -2.0, 0.0], dt)],
         ref=lambda x, y: (x * y, np.where(y == 0, 0, 1 / np.where(y == 0, 1, y))), grad=[0], dtypes=F),
]
