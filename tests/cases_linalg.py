"""Op-table cases for linear algebra (tfplus.ops.linalg_ops): forward against numpy.linalg, gradients against
float64 finite differences, and (test_tf_ops) both against TensorFlow. Inputs are well conditioned (a matrix
plus 3 I); factorizations whose signs are a convention (QR, SVD, eigenvectors) are compared after fixing the
signs, and symmetric inputs are built inside the graph so finite differences move both triangles."""
import numpy as np
from optable import Case

import tfplus as tf

F = ("float32", "float64")


def well_conditioned(*shape):
    return lambda rng, dt: (rng.standard_normal(shape) + 3 * np.eye(shape[-1])).astype(dt)


def spd(x, lib=np):
    """x x^T + 3 I, in NumPy or in the graph."""
    n = x.shape[-1]
    if lib is np:
        return x @ np.swapaxes(x, -1, -2) + 3 * np.eye(n, dtype=x.dtype)
    return tf.matmul(x, x, transpose_b=True) + 3 * tf.eye(int(n), dtype=x.dtype)


def sym(x, lib=np):
    return (x + np.swapaxes(x, -1, -2)) / 2 if lib is np else (x + tf.linalg.adjoint(x)) / 2


def _t(x):
    return np.swapaxes(x, -1, -2)


def _np_qr(x):
    q, r = np.linalg.qr(x)
    d = np.sign(np.diagonal(r, axis1=-2, axis2=-1))
    return q * d[..., None, :], r * d[..., :, None]


def _tf_qr(x):
    q, r = tf.linalg.qr(x)
    d = tf.sign(tf.linalg.diag_part(r))
    return q * tf.expand_dims(d, -2), r * tf.expand_dims(d, -1)


def _np_svd(x):
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    d = np.sign(u[..., :1, :])
    return s, u * d, _t(vh) * d


def _tf_svd(x):
    s, u, v = tf.svd(x)
    d = tf.sign(u[..., :1, :])
    return s, u * d, v * d


def _np_eigh(x):
    e, v = np.linalg.eigh(sym(x))
    return e, v * np.sign(v[..., :1, :])


def _tf_eigh(x):
    e, v = tf.linalg.eigh(sym(x, tf))
    return e, v * tf.sign(v[..., :1, :])


def _lower(x):
    return np.tril(x) + 3 * np.eye(x.shape[-1], dtype=x.dtype)


CASES = [
    Case("matrix_inverse", lambda x: tf.linalg.inv(x), make=lambda rng, dt: [well_conditioned(2, 3, 3)(rng, dt)],
         ref=np.linalg.inv, dtypes=F),
    Case("matrix_inverse_adjoint", lambda x: tf.matrix_inverse(x, adjoint=True),
         make=lambda rng, dt: [well_conditioned(3, 3)(rng, dt)], ref=lambda x: np.linalg.inv(x.T), dtypes=F),
    Case("matrix_determinant", lambda x: tf.linalg.det(x), make=lambda rng, dt: [well_conditioned(2, 3, 3)(rng, dt)],
         ref=np.linalg.det, dtypes=F, rtol=1e-4),
    Case("log_matrix_determinant", lambda x: tf.linalg.slogdet(x), inputs=[(2, 3, 3)],
         ref=lambda x: tuple(np.linalg.slogdet(x)), dtypes=F, rtol=1e-4),
    Case("cholesky", lambda x: tf.cholesky(spd(x, tf)), inputs=[(2, 3, 3)],
         ref=lambda x: np.linalg.cholesky(spd(x)), dtypes=F, rtol=1e-4),
    Case("logdet", lambda x: tf.linalg.logdet(spd(x, tf)), inputs=[(3, 3)],
         ref=lambda x: np.linalg.slogdet(spd(x))[1], dtypes=F, rtol=1e-4),
    Case("cholesky_solve", lambda x, b: tf.linalg.cholesky_solve(tf.cholesky(spd(x, tf)), b),
         inputs=[(3, 3), (3, 2)], ref=lambda x, b: np.linalg.solve(spd(x), b), dtypes=F, rtol=1e-4),
    Case("matrix_solve", lambda a, b: tf.linalg.solve(a, b),
         make=lambda rng, dt: [well_conditioned(2, 3, 3)(rng, dt), rng.standard_normal((2, 3, 2)).astype(dt)],
         ref=np.linalg.solve, dtypes=F, rtol=1e-4),
    Case("matrix_solve_adjoint", lambda a, b: tf.matrix_solve(a, b, adjoint=True),
         make=lambda rng, dt: [well_conditioned(3, 3)(rng, dt), rng.standard_normal((3, 1)).astype(dt)],
         ref=lambda a, b: np.linalg.solve(a.T, b), dtypes=F, rtol=1e-4),
    Case("triangular_solve_lower", lambda a, b: tf.linalg.triangular_solve(a, b),
         make=lambda rng, dt: [well_conditioned(2, 3, 3)(rng, dt), rng.standard_normal((2, 3, 2)).astype(dt)],
         ref=lambda a, b: np.linalg.solve(np.tril(a), b), dtypes=F, rtol=1e-4),
    Case("triangular_solve_upper_adjoint", lambda a, b: tf.matrix_triangular_solve(a, b, lower=False, adjoint=True),
         make=lambda rng, dt: [well_conditioned(3, 3)(rng, dt), rng.standard_normal((3, 2)).astype(dt)],
         ref=lambda a, b: np.linalg.solve(np.triu(a).T, b), dtypes=F, rtol=1e-4),
    Case("lstsq_tall", lambda a, b: tf.linalg.lstsq(a, b), inputs=[(5, 3), (5, 2)],
         ref=lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0], dtypes=F, rtol=1e-3, atol=1e-4),
    Case("lstsq_wide_l2", lambda a, b: tf.linalg.lstsq(a, b, l2_regularizer=0.5), inputs=[(2, 4), (2, 1)],
         ref=lambda a, b: a.T @ np.linalg.solve(a @ a.T + 0.5 * np.eye(2), b), dtypes=F, rtol=1e-3, atol=1e-4),
    Case("qr_tall", _tf_qr, inputs=[(2, 4, 3)], ref=_np_qr, dtypes=F, rtol=1e-4, atol=1e-5),
    Case("qr_square", _tf_qr, inputs=[(3, 3)], ref=_np_qr, dtypes=F, rtol=1e-4, atol=1e-5),
    Case("svd_tall", _tf_svd, inputs=[(4, 3)], ref=_np_svd, dtypes=F, rtol=1e-4, atol=1e-5),
    Case("svd_wide_batched", _tf_svd, inputs=[(2, 2, 3)], ref=_np_svd, dtypes=F, rtol=1e-4, atol=1e-5),
    Case("svd_values_only", lambda x: tf.svd(x, compute_uv=False), inputs=[(3, 4)],
         ref=lambda x: np.linalg.svd(x, compute_uv=False), dtypes=F, rtol=1e-4),
    Case("self_adjoint_eig", _tf_eigh, inputs=[(2, 3, 3)], ref=_np_eigh, dtypes=F, rtol=1e-4, atol=1e-5),
    Case("self_adjoint_eigvals", lambda x: tf.linalg.eigvalsh(sym(x, tf)), inputs=[(3, 3)],
         ref=lambda x: np.linalg.eigvalsh(sym(x)), dtypes=F, rtol=1e-4, atol=1e-5),
    Case("trace", lambda x: tf.linalg.trace(x), inputs=[(2, 3, 4)], ref=lambda x: np.trace(x, axis1=-2, axis2=-1)),
    Case("matrix_diag_part_wide", lambda x: tf.linalg.diag_part(x), inputs=[(2, 3, 4)],
         ref=lambda x: np.diagonal(x, axis1=-2, axis2=-1)),
    Case("matrix_diag_part_tall", lambda x: tf.matrix_diag_part(x), inputs=[(4, 3)], ref=np.diagonal),
    Case("matrix_set_diag", lambda x, d: tf.linalg.set_diag(x, d), inputs=[(2, 4, 3), (2, 3)],
         ref=lambda x, d: np.where(np.eye(4, 3, dtype=bool), d[:, None, :], x)),
    Case("cross", lambda a, b: tf.linalg.cross(a, b), inputs=[(2, 3), (2, 3)], ref=np.cross),
    Case("matvec", lambda a, b: tf.linalg.matvec(a, b), inputs=[(2, 3, 4), (2, 4)],
         ref=lambda a, b: np.einsum("bij,bj->bi", a, b)),
]
