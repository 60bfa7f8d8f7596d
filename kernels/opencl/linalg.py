"""The linear-algebra ops on the opencl device: their NumPy kernels on host copies. Factorizations of small
matrices are latency-bound on a GPU and no training path of the model zoo has one."""
from tfplus.kernels.opencl._common import run_on_host
from tfplus.registry import find_kernel, register_kernel

for _t in ("MatrixInverse", "MatrixDeterminant", "LogMatrixDeterminant", "Cholesky", "MatrixSolve",
           "MatrixTriangularSolve", "Qr", "Svd", "SelfAdjointEigV2"):
    def _on_host(ctx, ins, outs, attrs, _t=_t):
        run_on_host(ctx, find_kernel(_t, "cpu", ctx.op.inputs[0].dtype), ins, outs, attrs, upload=True)
    register_kernel(_t, "opencl")(_on_host)
