"""MpiAllreduce on the opencl device: MPI reads and writes host memory (NCCL cannot take OpenCL buffers), so the
packed buffer is copied out, reduced by the cpu kernel and copied back."""
from __future__ import annotations

from tfplus.kernels.opencl._common import run_on_host
from tfplus.registry import find_kernel, register_kernel


@register_kernel("MpiAllreduce", "opencl", ("float32", "float64"))
def _mpi_allreduce(ctx, ins, outs, attrs):
    run_on_host(ctx, find_kernel("MpiAllreduce", "cpu", attrs["T"]), ins, outs, attrs, upload=True)
