"""Linear algebra (tf.linalg and TF1's top-level aliases): the factorizations and solves are ops of their own
(MatrixInverse, MatrixDeterminant, LogMatrixDeterminant, Cholesky, MatrixSolve, MatrixTriangularSolve, Qr, Svd,
SelfAdjointEigV2), each over the innermost two axes and batched over the leading ones, with TensorFlow's
gradients built from registered ops; the rest (trace, diag_part, set_diag, matvec, cross, logdet,
cholesky_solve, lstsq, ...) are composites of registered ops, as TensorFlow builds them.

    import tfplus as tf
    x = tf.linalg.solve(a, b)              # a x = b
    chol = tf.cholesky(tf.matmul(a, a, transpose_b=True) + tf.eye(3))
    s, u, v = tf.svd(a)
"""
from __future__ import annotations

import builtins

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, apply_op, convert_to_tensor, name_scope
from tfplus.ops import array_ops, composite_ops, math_ops
from tfplus.registry import register_gradient, register_op
from tfplus.tensor_shape import fmt, spec

__all__ = ["matrix_inverse", "matrix_determinant", "cholesky", "matrix_solve", "matrix_triangular_solve", "qr",
           "svd", "self_adjoint_eig", "self_adjoint_eigvals", "matrix_diag_part", "matrix_set_diag",
           "matrix_transpose", "trace", "cross", "cholesky_solve", "matrix_solve_ls"]

_FLOATS = (_dt.float16, _dt.float32, _dt.float64)


def _matrix(s, op_type: str, what: str = "input", square: bool = True):
    """The (rows, columns) of `s`, a [..., M, N] tensor spec; raises naming the op when it is no (square)
    matrix."""
    if s.dtype not in _FLOATS:
        raise TypeError(f"{op_type}: {what} has dtype {s.dtype.name}; it takes float16, float32 or float64")
    if s.shape is None:
        return None, None
    if len(s.shape) < 2:
        raise ValueError(f"{op_type}: {what} must be a [..., M, N] matrix (rank >= 2), got shape {fmt(s.shape)}")
    m, n = s.shape[-2:]
    if square and m is not None and n is not None and m != n:
        raise ValueError(f"{op_type}: {what} must be square, got shape {fmt(s.shape)}")
    return m, n


def _cubic(ins, outs, attrs) -> float:
    """n^3 per matrix: the order of an LU, Cholesky, QR, SVD or eigen decomposition."""
    shape = ins[0]
    n = builtins.max(shape[-2:]) if len(shape) >= 2 else 1
    return float(np.prod(shape[:-2], dtype=np.float64) * n ** 3)


def _square_shape(op_type):
    def fn(ins, attrs):
        _matrix(ins[0], op_type)
        return [spec(ins[0].shape, ins[0].dtype)]
    return fn


def _batch_scalar_shape(op_type, n_out=1):
    def fn(ins, attrs):
        _matrix(ins[0], op_type)
        batch = None if ins[0].shape is None else ins[0].shape[:-2]
        return [spec(batch, ins[0].dtype)] * n_out
    return fn


def adjoint(matrix, name=None) -> Tensor:
    """The transpose of the innermost two axes (tf.linalg.adjoint: tfplus has no complex dtypes)."""
    with name_scope(name, "adjoint"):
        return matrix_transpose(matrix)


def matrix_transpose(a, name="matrix_transpose", conjugate=False) -> Tensor:
    """`a` with its innermost two axes swapped: `tf.linalg.matrix_transpose(x)` of [..., m, n] is [..., n, m]."""
    with name_scope(name, "matrix_transpose"):
        a = convert_to_tensor(a)
        rank = a.shape.ndims
        if rank is None or rank < 2:
            raise ValueError(f"tf.linalg.matrix_transpose: '{a.name}' must have a known rank >= 2, got {a.shape}")
        return array_ops.transpose(a, list(builtins.range(rank - 2)) + [rank - 1, rank - 2])


# -- MatrixInverse -------------------------------------------------------------------------------------------
register_op("MatrixInverse", inputs=("input",), outputs=("output",), attrs={"adjoint": "bool", "T": "type"},
            shape_fn=_square_shape("MatrixInverse"), flops=_cubic)


@register_gradient("MatrixInverse")
def _matrix_inverse_grad(op, grad):
    """dA = -A^-T dY A^-T (Y = A^-1; A and Y swap for adjoint=True)"""
    y, adj = op.outputs[0], op.attrs["adjoint"]
    return [math_ops.negative(math_ops.matmul(y, math_ops.matmul(grad, y, adjoint_a=adj, adjoint_b=not adj),
                                              adjoint_a=not adj))]


def matrix_inverse(input, adjoint=False, name=None) -> Tensor:
    """The inverse of each innermost square matrix (of its transpose with adjoint=True): `tf.linalg.inv(a)`."""
    return apply_op("MatrixInverse", [convert_to_tensor(input)], {"adjoint": bool(adjoint)}, name)


# -- MatrixDeterminant ---------------------------------------------------------------------------------------
register_op("MatrixDeterminant", inputs=("input",), outputs=("output",), attrs={"T": "type"},
            shape_fn=_batch_scalar_shape("MatrixDeterminant"), flops=_cubic)


@register_gradient("MatrixDeterminant")
def _matrix_determinant_grad(op, grad):
    """dA = dy det(A) A^-T"""
    scale = array_ops.expand_dims(array_ops.expand_dims(math_ops.multiply(grad, op.outputs[0]), -1), -1)
    return [math_ops.multiply(scale, matrix_inverse(op.inputs[0], adjoint=True))]


def matrix_determinant(input, name=None) -> Tensor:
    """The determinant of each innermost square matrix: `tf.linalg.det(a)`."""
    return apply_op("MatrixDeterminant", [convert_to_tensor(input)], name=name)


# -- LogMatrixDeterminant ------------------------------------------------------------------------------------
register_op("LogMatrixDeterminant", inputs=("input",), outputs=("sign", "log_abs_determinant"),
            attrs={"T": "type"}, shape_fn=_batch_scalar_shape("LogMatrixDeterminant", 2), flops=_cubic)


@register_gradient("LogMatrixDeterminant")
def _log_matrix_determinant_grad(op, _sign_grad, grad):
    """dA = d log|det A| A^-T (the sign is piecewise constant)"""
    scale = array_ops.expand_dims(array_ops.expand_dims(grad, -1), -1)
    return [math_ops.multiply(scale, matrix_inverse(op.inputs[0], adjoint=True))]


def slogdet(input, name=None) -> tuple:
    """(sign, log |det|) of each innermost square matrix: `sign, logabs = tf.linalg.slogdet(a)`."""
    return apply_op("LogMatrixDeterminant", [convert_to_tensor(input)], name=name)


def logdet(matrix, name=None) -> Tensor:
    """log det of each innermost symmetric positive-definite matrix, 2 sum(log(diag(cholesky))) as TF."""
    with name_scope(name, "logdet"):
        chol = cholesky(matrix)
        return 2.0 * math_ops.reduce_sum(math_ops.log(matrix_diag_part(chol)), -1)  # TF's 'logdet/mul'


# -- Cholesky ------------------------------------------------------------------------------------------------
register_op("Cholesky", inputs=("input",), outputs=("output",), attrs={"T": "type"},
            shape_fn=_square_shape("Cholesky"), flops=_cubic)


@register_gradient("Cholesky")
def _cholesky_grad(op, grad):
    """dA = sym(L^-T Phi(L^T dL) L^-1) / 2, Phi = the lower triangle with the diagonal halved (Murray 2016);
    symmetric, as the input is"""
    chol = op.outputs[0]
    inv = matrix_inverse(chol)
    middle = math_ops.matmul(chol, grad, adjoint_a=True)
    middle = matrix_set_diag(composite_ops.matrix_band_part(middle, -1, 0),
                             math_ops.multiply(0.5, matrix_diag_part(middle)))
    grad_a = math_ops.matmul(math_ops.matmul(inv, middle, adjoint_a=True), inv)
    return [math_ops.multiply(0.5, math_ops.add(grad_a, matrix_transpose(grad_a)))]


def cholesky(input, name=None) -> Tensor:
    """The lower-triangular L with L L^T = input, for each innermost symmetric positive-definite matrix (only
    its lower triangle is read): `tf.cholesky(a)`."""
    return apply_op("Cholesky", [convert_to_tensor(input)], name=name)


# -- MatrixSolve ---------------------------------------------------------------------------------------------
def _solve_shape(op_type):
    def fn(ins, attrs):
        a, b = ins
        m, _ = _matrix(a, op_type, "matrix")
        bm, _ = _matrix(b, op_type, "rhs", square=False)
        if a.dtype != b.dtype:
            raise TypeError(f"{op_type}: matrix is {a.dtype.name} but rhs is {b.dtype.name}")
        if m is not None and bm is not None and m != bm:
            raise ValueError(f"{op_type}: matrix of shape {fmt(a.shape)} and rhs of shape {fmt(b.shape)} need the "
                             f"same number of rows")
        if a.shape is None or b.shape is None:
            return [spec(b.shape, b.dtype)]
        try:
            batch = np.broadcast_shapes(*(tuple(1 if d is None else d for d in s.shape[:-2]) for s in (a, b)))
        except ValueError:
            raise ValueError(f"{op_type}: the batch dims of matrix {fmt(a.shape)} and rhs {fmt(b.shape)} do not "
                             "broadcast") from None
        return [spec(tuple(batch) + tuple(b.shape[-2:]), b.dtype)]
    return fn


register_op("MatrixSolve", inputs=("matrix", "rhs"), outputs=("output",), attrs={"adjoint": "bool", "T": "type"},
            shape_fn=_solve_shape("MatrixSolve"), flops=_cubic)


def _solve_matrix_grad(op, grad_b):
    """-dB X^T (or -X dB^T for adjoint), summed over broadcast batch dims"""
    x = op.outputs[0]
    if op.attrs["adjoint"]:
        grad_a = math_ops.negative(math_ops.matmul(x, grad_b, adjoint_b=True))
    else:
        grad_a = math_ops.negative(math_ops.matmul(grad_b, x, adjoint_b=True))
    return grad_a


def _to_shape_of(grad, t):
    """`grad` summed down to `t`'s shape (batch dims that were broadcast)."""
    return math_ops._reduce_to(grad, array_ops._shape_of(t))


@register_gradient("MatrixSolve")
def _matrix_solve_grad(op, grad):
    """dB = A^-T dX, dA = -dB X^T"""
    a, b = op.inputs
    grad_b = matrix_solve(a, grad, adjoint=not op.attrs["adjoint"])
    return [_to_shape_of(_solve_matrix_grad(op, grad_b), a), _to_shape_of(grad_b, b)]


def matrix_solve(matrix, rhs, adjoint=False, name=None) -> Tensor:
    """X with matrix X = rhs (matrix^T X = rhs with adjoint): `tf.linalg.solve(a, b)`."""
    return apply_op("MatrixSolve", [convert_to_tensor(matrix), convert_to_tensor(rhs)], {"adjoint": bool(adjoint)},
                    name)


# -- MatrixTriangularSolve -----------------------------------------------------------------------------------
register_op("MatrixTriangularSolve", inputs=("matrix", "rhs"), outputs=("output",),
            attrs={"lower": "bool", "adjoint": "bool", "T": "type"},
            shape_fn=_solve_shape("MatrixTriangularSolve"), flops=_cubic)


@register_gradient("MatrixTriangularSolve")
def _matrix_triangular_solve_grad(op, grad):
    """dB = A^-T dX, dA = the (lower or upper) triangle of -dB X^T"""
    a, b = op.inputs
    lower = op.attrs["lower"]
    grad_b = matrix_triangular_solve(a, grad, lower=lower, adjoint=not op.attrs["adjoint"])
    grad_a = composite_ops.matrix_band_part(_solve_matrix_grad(op, grad_b), -1 if lower else 0, 0 if lower else -1)
    return [_to_shape_of(grad_a, a), _to_shape_of(grad_b, b)]


def matrix_triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None) -> Tensor:
    """X with matrix X = rhs for triangular `matrix` (only its lower, or upper, triangle is read)."""
    return apply_op("MatrixTriangularSolve", [convert_to_tensor(matrix), convert_to_tensor(rhs)],
                    {"lower": bool(lower), "adjoint": bool(adjoint)}, name)


def triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None) -> Tensor:
    """tf.linalg.triangular_solve: MatrixTriangularSolve under the scope 'triangular_solve', as TF names it."""
    with name_scope(name, "triangular_solve"):
        return matrix_triangular_solve(matrix, rhs, lower, adjoint)


def cholesky_solve(chol, rhs, name=None) -> Tensor:
    """X with A X = rhs, given chol = cholesky(A): two triangular solves."""
    with name_scope(name, "cholesky_solve"):
        y = matrix_triangular_solve(chol, rhs, lower=True, adjoint=False)
        return matrix_triangular_solve(chol, y, lower=True, adjoint=True)


def matrix_solve_ls(matrix, rhs, l2_regularizer=0.0, fast=True, name=None) -> Tensor:
    """The least-squares X of matrix X = rhs (M >= N: the normal equations (A^T A + l2 I) X = A^T rhs solved by
    Cholesky, as TF's fast path; M < N: the minimum-norm solution A^T (A A^T + l2 I)^-1 rhs)."""
    if not fast:
        raise ValueError("tf.linalg.lstsq: fast=False (complete orthogonal decomposition) is not implemented by "
                         "tfplus; use fast=True")
    with name_scope(name, "matrix_solve_ls"):
        a, b = convert_to_tensor(matrix), convert_to_tensor(rhs)
        m, n = a.shape.as_list()[-2:] if a.shape.ndims and a.shape.ndims >= 2 else (None, None)
        if m is None or n is None:
            raise ValueError(f"tf.linalg.lstsq: the matrix dims of '{a.name}' must be known, got {a.shape}")
        wide = m < n
        gram = math_ops.matmul(a, a, adjoint_a=not wide, adjoint_b=wide)
        reg = composite_ops.eye(builtins.min(m, n), dtype=a.dtype)
        if not (isinstance(l2_regularizer, (int, float)) and l2_regularizer == 0):
            gram = math_ops.add(gram, math_ops.multiply(math_ops.cast(l2_regularizer, a.dtype), reg))
        chol = cholesky(gram)
        if wide:
            return math_ops.matmul(a, cholesky_solve(chol, b), adjoint_a=True)
        return cholesky_solve(chol, math_ops.matmul(a, b, adjoint_a=True))


# -- Qr ------------------------------------------------------------------------------------------------------
def _qr_shape(ins, attrs):
    m, n = _matrix(ins[0], "Qr", square=False)
    x = ins[0]
    if x.shape is None:
        return [spec(None, x.dtype)] * 2
    batch = tuple(x.shape[:-2])
    k = None if m is None or n is None else builtins.min(m, n)
    if attrs["full_matrices"]:
        return [spec(batch + (m, m), x.dtype), spec(batch + (m, n), x.dtype)]
    return [spec(batch + (m, k), x.dtype), spec(batch + (k, n), x.dtype)]


register_op("Qr", inputs=("input",), outputs=("q", "r"), attrs={"full_matrices": "bool", "T": "type"},
            shape_fn=_qr_shape, flops=_cubic)


def _solve_right_upper(x, r):
    """x R^-T for upper-triangular R: (R^-1 x^T)^T."""
    return matrix_transpose(matrix_triangular_solve(r, matrix_transpose(x), lower=False))


@register_gradient("Qr")
def _qr_grad(op, dq, dr):
    """For M >= N, reduced (Walter & Lehmann 2018, as TF): dA = Q (dR + L R^-T) + (dQ - Q Q^T dQ) R^-T, L the
    lower triangle of (Q^T dQ - dQ^T Q) + (R dR^T - dR R^T)"""
    a = op.inputs[0]
    q, r = op.outputs
    m, n = a.shape.as_list()[-2:] if a.shape.ndims else (None, None)
    if m is None or n is None or m < n or (op.attrs["full_matrices"] and m != n):
        raise NotImplementedError(f"Qr '{op.name}': tfplus (as TensorFlow) differentiates QR only for M >= N with "
                                  f"full_matrices=False, got input shape {a.shape}")
    dq = array_ops.zeros_like(q) if dq is None else dq
    dr = array_ops.zeros_like(r) if dr is None else dr
    qdq = math_ops.matmul(q, dq, adjoint_a=True)
    qdq_ = math_ops.subtract(qdq, matrix_transpose(qdq))
    rdr = math_ops.matmul(r, dr, adjoint_b=True)
    rdr_ = math_ops.subtract(rdr, matrix_transpose(rdr))
    tril = composite_ops.matrix_band_part(math_ops.add(qdq_, rdr_), -1, 0)
    grad_a = math_ops.matmul(q, math_ops.add(dr, _solve_right_upper(tril, r)))
    grad_b = _solve_right_upper(math_ops.subtract(dq, math_ops.matmul(q, qdq)), r)
    return [math_ops.add(grad_a, grad_b)]


def qr(input, full_matrices=False, name=None) -> tuple:
    """(q, r) with input = q r, q orthonormal columns, r upper triangular: `q, r = tf.linalg.qr(a)`."""
    return apply_op("Qr", [convert_to_tensor(input)], {"full_matrices": bool(full_matrices)}, name)


# -- Svd -----------------------------------------------------------------------------------------------------
def _svd_shape(ins, attrs):
    m, n = _matrix(ins[0], "Svd", square=False)
    x = ins[0]
    if x.shape is None:
        return [spec(None, x.dtype)] * 3
    batch = tuple(x.shape[:-2])
    k = None if m is None or n is None else builtins.min(m, n)
    s = spec(batch + (k,), x.dtype)
    if not attrs["compute_uv"]:  # TF's u and v are then empty
        return [s, spec((0,), x.dtype), spec((0,), x.dtype)]
    if attrs["full_matrices"]:
        return [s, spec(batch + (m, m), x.dtype), spec(batch + (n, n), x.dtype)]
    return [s, spec(batch + (m, k), x.dtype), spec(batch + (n, k), x.dtype)]


register_op("Svd", inputs=("input",), outputs=("s", "u", "v"),
            attrs={"compute_uv": "bool", "full_matrices": "bool", "T": "type"}, shape_fn=_svd_shape, flops=_cubic)


@register_gradient("Svd")
def _svd_grad(op, grad_s, grad_u, grad_v):
    """Townsend (2016) as TF's _SvdGrad, for full_matrices=False: dA = U [diag(dS) + (F o (U^T dU - dU^T U)) S
    + S (F o (V^T dV - dV^T V))] V^T (+ the M != N terms), F_ij = 1 / (s_j^2 - s_i^2) off the diagonal"""
    a = op.inputs[0]
    if grad_s is None:
        grad_s = array_ops.zeros_like(op.outputs[0])
    if not op.attrs["compute_uv"]:
        s, u, v = svd(a, compute_uv=True)
        return [math_ops.matmul(math_ops.multiply(u, array_ops.expand_dims(grad_s, -2)), v, adjoint_b=True)]
    m, n = a.shape.as_list()[-2:] if a.shape.ndims else (None, None)
    if m is None or n is None or (op.attrs["full_matrices"] and m != n):
        raise NotImplementedError(f"Svd '{op.name}': tfplus (as TensorFlow) differentiates the SVD only with "
                                  f"full_matrices=False (or square matrices) of known size, got {a.shape}")
    s, u, v = op.outputs
    grad_u = array_ops.zeros_like(u) if grad_u is None else grad_u
    grad_v = array_ops.zeros_like(v) if grad_v is None else grad_v
    if m > n:  # work on A^T (M <= N), whose U and V are A's V and U
        u, v, grad_u, grad_v = v, u, grad_v, grad_u
        m, n = n, m
    s_mat = composite_ops.matrix_diag(s)
    s2 = math_ops.square(s)
    f = matrix_set_diag(math_ops.reciprocal(math_ops.subtract(array_ops.expand_dims(s2, -2),
                                                              array_ops.expand_dims(s2, -1))),
                        array_ops.zeros_like(s))
    u_gu = math_ops.matmul(u, grad_u, adjoint_a=True)
    v_gv = math_ops.matmul(v, grad_v, adjoint_a=True)
    f_u, f_v = math_ops.multiply(f, u_gu), math_ops.multiply(f, v_gv)
    inner = math_ops.add(math_ops.add(composite_ops.matrix_diag(grad_s),
                                      math_ops.matmul(math_ops.add(f_u, matrix_transpose(f_u)), s_mat)),
                         math_ops.matmul(s_mat, math_ops.add(f_v, matrix_transpose(f_v))))
    grad_a = math_ops.matmul(u, math_ops.matmul(inner, v, adjoint_b=True))
    if m != n:
        gvt = matrix_transpose(grad_v)
        rest = math_ops.subtract(gvt, math_ops.matmul(math_ops.matmul(gvt, v), v, adjoint_b=True))
        s_inv = composite_ops.matrix_diag(math_ops.reciprocal(s))
        grad_a = math_ops.add(grad_a, math_ops.matmul(u, math_ops.matmul(s_inv, rest)))
    if op.inputs[0].shape.as_list()[-2] > op.inputs[0].shape.as_list()[-1]:
        grad_a = matrix_transpose(grad_a)
    return [grad_a]


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """The singular values s (descending) and, with compute_uv, u and v with tensor = u diag(s) v^T:
    `s, u, v = tf.svd(a)`; `s = tf.svd(a, compute_uv=False)`."""
    s, u, v = apply_op("Svd", [convert_to_tensor(tensor)],
                       {"compute_uv": bool(compute_uv), "full_matrices": bool(full_matrices)}, name)
    return (s, u, v) if compute_uv else s


# -- SelfAdjointEigV2 ----------------------------------------------------------------------------------------
def _eig_shape(ins, attrs):
    _matrix(ins[0], "SelfAdjointEigV2")
    x = ins[0]
    if x.shape is None:
        return [spec(None, x.dtype)] * 2
    v = spec(x.shape, x.dtype) if attrs["compute_v"] else spec((0,), x.dtype)
    return [spec(tuple(x.shape[:-1]), x.dtype), v]


register_op("SelfAdjointEigV2", inputs=("input",), outputs=("e", "v"), attrs={"compute_v": "bool", "T": "type"},
            shape_fn=_eig_shape, flops=_cubic)


@register_gradient("SelfAdjointEigV2")
def _self_adjoint_eig_grad(op, grad_e, grad_v):
    """dA = V (diag(de) + F o (V^T dV)) V^T, F_ij = 1 / (e_j - e_i) off the diagonal, then its lower triangle
    (with the diagonal halved) of its symmetric part, as TF (the op reads the lower triangle)"""
    a = op.inputs[0]
    if not op.attrs["compute_v"]:
        e, v = self_adjoint_eig(a)
        grad_v = None
    else:
        e, v = op.outputs
    if grad_e is None:
        grad_e = array_ops.zeros_like(e)
    inner = composite_ops.matrix_diag(grad_e)
    if grad_v is not None:
        f = matrix_set_diag(math_ops.reciprocal(math_ops.subtract(array_ops.expand_dims(e, -2),
                                                                  array_ops.expand_dims(e, -1))),
                            array_ops.zeros_like(e))
        inner = math_ops.add(inner, math_ops.multiply(f, math_ops.matmul(v, grad_v, adjoint_a=True)))
    grad_a = math_ops.matmul(v, math_ops.matmul(inner, v, adjoint_b=True))
    grad_a = composite_ops.matrix_band_part(math_ops.add(grad_a, matrix_transpose(grad_a)), -1, 0)
    return [matrix_set_diag(grad_a, math_ops.multiply(0.5, matrix_diag_part(grad_a)))]


def self_adjoint_eig(tensor, name=None) -> tuple:
    """(e, v): the eigenvalues (ascending) and eigenvectors (columns) of each innermost symmetric matrix (its
    lower triangle is read): `e, v = tf.linalg.eigh(a)`."""
    return apply_op("SelfAdjointEigV2", [convert_to_tensor(tensor)], {"compute_v": True}, name)


def self_adjoint_eigvals(tensor, name=None) -> Tensor:
    """The eigenvalues (ascending) of each innermost symmetric matrix: `tf.linalg.eigvalsh(a)`."""
    return apply_op("SelfAdjointEigV2", [convert_to_tensor(tensor)], {"compute_v": False}, name)[0]


# -- composites ----------------------------------------------------------------------------------------------
def _diagonal_mask(x: Tensor, what: str):
    """A bool [m, n] tensor that is True on the main diagonal of `x`'s innermost matrices, and (m, n)."""
    if x.shape.ndims is None or x.shape.ndims < 2:
        raise ValueError(f"{what}: '{x.name}' must be a [..., M, N] matrix of known rank, got {x.shape}")
    m, n = x.shape.as_list()[-2:]
    if m is None or n is None:
        if m is None and n is None:  # a square matrix of a size known when the graph runs (a Gram matrix's)
            dims = array_ops.shape(x)[-2:]
            return math_ops.equal(array_ops.expand_dims(math_ops.range(dims[0]), 1), math_ops.range(dims[1])), m, n
        raise ValueError(f"{what}: the matrix dims of '{x.name}' must be both known or both unknown (then square), "
                         f"got {x.shape}")
    return array_ops.constant(np.eye(m, n, dtype=bool)), m, n


def matrix_diag_part(input, name="diag_part", k=0, padding_value=0, align="RIGHT_LEFT") -> Tensor:
    """The main diagonal [..., min(M, N)] of each innermost matrix: `tf.linalg.diag_part(a)` (k=0 only)."""
    if k != 0:
        raise ValueError(f"tf.linalg.diag_part: k={k} is not supported; tfplus takes the main diagonal (k=0)")
    with name_scope(name, "diag_part") as scope:
        x = convert_to_tensor(input)
        mask, m, n = _diagonal_mask(x, "tf.linalg.diag_part")
        on_diag = math_ops.where_v2(mask, x, array_ops.zeros_like(x))
        return math_ops.reduce_sum(on_diag, -1 if m is None or m <= n else -2, name=scope)


def matrix_set_diag(input, diagonal, name="set_diag", k=0, align="RIGHT_LEFT") -> Tensor:
    """`input` with the main diagonal of each innermost matrix replaced by `diagonal` [..., min(M, N)]."""
    if k != 0:
        raise ValueError(f"tf.linalg.set_diag: k={k} is not supported; tfplus sets the main diagonal (k=0)")
    with name_scope(name, "set_diag") as scope:
        x = convert_to_tensor(input)
        d = convert_to_tensor(diagonal, dtype=x.dtype)
        mask, m, n = _diagonal_mask(x, "tf.linalg.set_diag")
        # At (i, i) the broadcast of d[..., i] along the longer side is d[..., i].
        return math_ops.where_v2(mask, array_ops.expand_dims(d, -1 if m is None or m <= n else -2), x, name=scope)


def trace(x, name=None) -> Tensor:
    """The sum of the main diagonal of each innermost matrix: `tf.linalg.trace(a)`."""
    with name_scope(name, "Trace") as scope:
        return math_ops.reduce_sum(matrix_diag_part(x), -1, name=scope)


def matvec(a, b, transpose_a=False, adjoint_a=False, a_is_sparse=False, b_is_sparse=False, name=None) -> Tensor:
    """a [..., M, N] times the vectors b [..., N]: [..., M]."""
    with name_scope(name, "MatVec"):
        out = math_ops.matmul(a, array_ops.expand_dims(b, -1), transpose_a=transpose_a, adjoint_a=adjoint_a)
        return array_ops.squeeze(out, -1)


def cross(a, b, name=None) -> Tensor:
    """The cross product of the 3-vectors along the last axis: `tf.linalg.cross(u, v)`."""
    with name_scope(name, "Cross") as scope:
        a, b = math_ops._operands(a, b)
        for t in (a, b):
            if t.shape.ndims is not None and t.shape.as_list()[-1] not in (None, 3):
                raise ValueError(f"tf.linalg.cross: the last axis of '{t.name}' must be 3, got shape {t.shape}")
        def rot(t, k):
            return array_ops.gather(t, [k % 3, (k + 1) % 3, (k + 2) % 3], axis=-1)
        return math_ops.subtract(math_ops.multiply(rot(a, 1), rot(b, 2)), math_ops.multiply(rot(a, 2), rot(b, 1)),
                                 name=scope)


def eye(num_rows, num_columns=None, batch_shape=None, dtype=_dt.float32, name=None) -> Tensor:
    """tf.linalg.eye: the identity matrix, repeated over `batch_shape` (tf.eye)."""
    return composite_ops.eye(num_rows, num_columns, batch_shape, dtype, name)



def pinv(a, rcond=None, validate_args=False, name=None) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each innermost matrix, from its SVD: singular values at most
    rcond * max(s) count as 0 (rcond defaults to 10 max(M, N) eps, as TF)."""
    with name_scope(name, "pinv"):
        a = convert_to_tensor(a)
        m, n = a.shape.as_list()[-2:] if a.shape.ndims and a.shape.ndims >= 2 else (None, None)
        if rcond is None:
            if m is None or n is None:
                raise ValueError(f"tf.linalg.pinv: pass rcond, or give '{a.name}' known matrix dims ({a.shape})")
            rcond = 10.0 * builtins.max(m, n) * float(np.finfo(a.dtype.np).eps)
        s, u, v = svd(a)
        cutoff = math_ops.multiply(math_ops.cast(rcond, a.dtype), math_ops.reduce_max(s, -1, keepdims=True))
        kept = math_ops.greater(s, cutoff)
        s_inv = math_ops.where_v2(kept, math_ops.reciprocal(math_ops.where_v2(kept, s, array_ops.ones_like(s))),
                                  array_ops.zeros_like(s))
        return math_ops.matmul(math_ops.multiply(v, array_ops.expand_dims(s_inv, -2)), u, adjoint_b=True)


def matrix_rank(a, tol=None, validate_args=False, name=None) -> Tensor:
    """The number of singular values of each innermost matrix above `tol` (default eps max(M, N) max(s))."""
    with name_scope(name, "matrix_rank"):
        a = convert_to_tensor(a)
        s = svd(a, compute_uv=False)
        if tol is None:
            m, n = a.shape.as_list()[-2:]
            if m is None or n is None:
                raise ValueError(f"tf.linalg.matrix_rank: pass tol, or give '{a.name}' known matrix dims")
            tol = math_ops.multiply(float(np.finfo(a.dtype.np).eps) * builtins.max(m, n),
                                    math_ops.reduce_max(s, -1, keepdims=True))
        return math_ops.reduce_sum(math_ops.cast(math_ops.greater(s, tol), _dt.int32), -1)


def normalize(tensor, ord="euclidean", axis=None, name=None) -> tuple:
    """(tensor / norm, norm): tf.linalg.normalize."""
    with name_scope(name, "normalize"):
        x = convert_to_tensor(tensor)
        norm = composite_ops.norm(x, ord=ord, axis=axis, keepdims=True)
        return math_ops.realdiv(x, norm), norm
