"""OpenCL kernels of the image input ops (ops/image_ops.py). Source: image.cl."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import kernel, register

SRC = "image.cl"


@register("CifarAugment", ("float32",), host=False)
def _cifar_augment(ctx, ins, outs, attrs):
    rt = ctx.runtime
    images, crops, scale, shift = ins
    n, c, h, w = images.shape
    k = kernel(rt, SRC, "cifar_augment", outs[0].dtype)
    rt.run1d(k, outs[0].size, outs[0], images, crops, scale, shift, np.int32(n), np.int32(c), np.int32(h),
             np.int32(w), np.int32(attrs["pad"]), np.int32(attrs["data_format"] == "NHWC"))
