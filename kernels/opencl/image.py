"""OpenCL kernels of the image input ops (ops/image_ops.py). Source: image.cl."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import kernel, register, run_on_host
from tfplus.registry import find_kernel, register_kernel

SRC = "image.cl"


@register("CifarAugment", ("float32",), host=False)
def _cifar_augment(ctx, ins, outs, attrs):
    rt = ctx.runtime
    images, crops, scale, shift = ins
    n, c, h, w = images.shape
    k = kernel(rt, SRC, "cifar_augment", outs[0].dtype)
    rt.run1d(k, outs[0].size, outs[0], images, crops, scale, shift, np.int32(n), np.int32(c), np.int32(h),
             np.int32(w), np.int32(attrs["pad"]), np.int32(attrs["data_format"] == "NHWC"))


# A sequential greedy loop over a few hundred boxes at most, and its output's length is data-dependent: it runs
# on the host (as TensorFlow's GPU graph runs it after copying the scores), its result uploaded when read.
@register_kernel("NonMaxSuppressionV3", "opencl")
def _non_max_suppression(ctx, ins, outs, attrs):
    run_on_host(ctx, find_kernel("NonMaxSuppressionV3", "cpu", None), ins, outs, attrs, upload=False)


# Box by box with data-dependent gathers and scatters, a few hundred boxes of a detector's head at most: on the
# host, as the NMS above (TensorFlow has GPU kernels for these; tfplus has none yet).
for _op in ("CropAndResize", "CropAndResizeGradImage", "CropAndResizeGradBoxes"):
    register_kernel(_op, "opencl")(lambda ctx, ins, outs, attrs, _op=_op: run_on_host(
        ctx, find_kernel(_op, "cpu", None), ins, outs, attrs, upload=True))
