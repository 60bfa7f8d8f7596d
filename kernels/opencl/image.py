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


@register("CropAndResize", ("float32", "float64"), host=False)
def _crop_and_resize(ctx, ins, outs, attrs):
    rt = ctx.runtime
    image, boxes, box_ind, _ = ins
    out = outs[0]
    n, crop_h, crop_w, depth = out.shape
    batch, h, w, _ = image.shape
    # NOTE: a box index past the batch would read another buffer's bytes: checked on a host copy (n ints), as
    # TensorFlow's GPU kernel checks it.
    bad = [int(i) for i in rt.copy_out(box_ind) if not 0 <= i < batch]
    if bad:
        raise ValueError(f"CropAndResize: box_ind {bad[0]} is not in [0, {batch})")
    if out.size == 0:
        return
    k = kernel(rt, SRC, "crop_and_resize", image.dtype)
    rt.run1d(k, out.size, out, image, boxes, box_ind, np.int32(n), np.int32(crop_h), np.int32(crop_w), np.int32(h),
             np.int32(w), np.int32(depth), np.int32(attrs["method"] == "nearest"),
             np.float32(attrs["extrapolation_value"]))


# The gradients scatter each box's samples into the image (and reduce per box): on the host, as the NMS above
# (TensorFlow runs them on the GPU with atomic adds; a detector's head has a few hundred boxes).
for _op in ("CropAndResizeGradImage", "CropAndResizeGradBoxes"):
    register_kernel(_op, "opencl")(lambda ctx, ins, outs, attrs, _op=_op: run_on_host(
        ctx, find_kernel(_op, "cpu", None), ins, outs, attrs, upload=True))
