"""CTCLoss on an OpenCL device: on the host (TensorFlow's kernel is CPU-only too), its outputs uploaded."""
from __future__ import annotations

from tfplus.kernels.opencl._common import run_on_host
from tfplus.registry import find_kernel, register_kernel


@register_kernel("CTCLoss", "opencl")
def _ctc_loss(ctx, ins, outs, attrs):
    run_on_host(ctx, find_kernel("CTCLoss", "cpu", None), ins, outs, attrs, upload=True)
