"""NumPy kernels for the linear-algebra ops (tfplus.ops.linalg_ops): numpy.linalg over the innermost two axes,
batched over the leading ones. A singular or non-positive-definite input raises InvalidArgumentError naming the
node, as TensorFlow's kernels do."""
from __future__ import annotations

import numpy as np

from tfplus import errors
from tfplus.registry import register_kernel

FLOATS = ("float16", "float32", "float64")


def _work(x):
    """float16 is factored in float32 (LAPACK has no half precision), as TF's kernels compute in float32."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _failed(ctx, what: str):
    op = ctx.op
    return errors.InvalidArgumentError(op.name, op.type, f"{what} (node '{op.name}', op {op.type})")


def _t(x):
    return np.swapaxes(x, -1, -2)


@register_kernel("MatrixInverse", "cpu", FLOATS)
def _matrix_inverse(ctx, ins, outs, attrs):
    a = _work(ins[0])
    try:
        outs[0][...] = np.linalg.inv(_t(a) if attrs["adjoint"] else a)
    except np.linalg.LinAlgError:
        raise _failed(ctx, "Input is not invertible.") from None


@register_kernel("MatrixDeterminant", "cpu", FLOATS)
def _matrix_determinant(ctx, ins, outs, attrs):
    outs[0][...] = np.linalg.det(_work(ins[0]))


@register_kernel("LogMatrixDeterminant", "cpu", FLOATS)
def _log_matrix_determinant(ctx, ins, outs, attrs):
    outs[0][...], outs[1][...] = np.linalg.slogdet(_work(ins[0]))


@register_kernel("Cholesky", "cpu", FLOATS)
def _cholesky(ctx, ins, outs, attrs):
    try:
        outs[0][...] = np.linalg.cholesky(_work(ins[0]))  # reads the lower triangle, as TF
    except np.linalg.LinAlgError:
        raise _failed(ctx, "Cholesky decomposition was not successful. The input might not be valid.") from None


def _solve(ctx, a, b):
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        raise _failed(ctx, "Input matrix is not invertible.") from None


@register_kernel("MatrixSolve", "cpu", FLOATS)
def _matrix_solve(ctx, ins, outs, attrs):
    a, b = _work(ins[0]), _work(ins[1])
    outs[0][...] = _solve(ctx, _t(a) if attrs["adjoint"] else a, b)


@register_kernel("MatrixTriangularSolve", "cpu", FLOATS)
def _matrix_triangular_solve(ctx, ins, outs, attrs):
    a, b = _work(ins[0]), _work(ins[1])
    a = np.tril(a) if attrs["lower"] else np.triu(a)  # the other triangle is not read
    outs[0][...] = _solve(ctx, _t(a) if attrs["adjoint"] else a, b)


@register_kernel("Qr", "cpu", FLOATS)
def _qr(ctx, ins, outs, attrs):
    outs[0][...], outs[1][...] = np.linalg.qr(_work(ins[0]), mode="complete" if attrs["full_matrices"] else "reduced")


@register_kernel("Svd", "cpu", FLOATS)
def _svd(ctx, ins, outs, attrs):
    a = _work(ins[0])
    if not attrs["compute_uv"]:
        outs[0][...] = np.linalg.svd(a, compute_uv=False)
        return
    u, s, vh = np.linalg.svd(a, full_matrices=attrs["full_matrices"])
    outs[0][...], outs[1][...], outs[2][...] = s, u, _t(vh)


@register_kernel("SelfAdjointEigV2", "cpu", FLOATS)
def _self_adjoint_eig(ctx, ins, outs, attrs):
    a = _work(ins[0])
    if not attrs["compute_v"]:
        outs[0][...] = np.linalg.eigvalsh(a, UPLO="L")
        return
    outs[0][...], outs[1][...] = np.linalg.eigh(a, UPLO="L")
