"""NumPy kernels of the image input ops (ops/image_ops.py)."""
from __future__ import annotations

import numpy as np

from tfplus.ops.image_ops import nms_select
from tfplus.registry import register_kernel


@register_kernel("CifarAugment", "cpu", ("float32",))
def _cifar_augment(ctx, ins, outs, attrs):
    """tfplus.data.cifar10.crop_flip, then normalized, image by image straight into the output: no padded or
    cropped copy of the batch (a step planned to a budget declares no scratch for it). Padding is the byte 0."""
    images, crops, scale, shift = ins
    pad, out = attrs["pad"], outs[0]
    if attrs["data_format"] == "NHWC":
        out = out.transpose(0, 3, 1, 2)  # a view: the same pixels in (N, C, H, W) order
    h, w = images.shape[2:]
    scale, shift = scale.reshape(-1, 1, 1), shift.reshape(-1, 1, 1)
    for i, (top, left, flip) in enumerate(crops):
        r0, c0 = max(0, pad - top), max(0, pad - left)  # the window's first row and column that hold the image
        r1, c1 = min(h, h + pad - top), min(w, w + pad - left)
        src = images[i, :, r0 + top - pad:r1 + top - pad, c0 + left - pad:c1 + left - pad]
        dst = out[i]
        if flip:
            dst, (c0, c1) = dst[:, :, ::-1], (c0, c1)
        dst[...] = 0
        # The same two float32 roundings as tfplus.data.normalize and the OpenCL kernel: equal bits on every path.
        np.multiply(src, scale, out=dst[:, r0:r1, c0:c1], dtype=np.float32)
        dst -= shift


@register_kernel("NonMaxSuppressionV3", "cpu")
def _non_max_suppression(ctx, ins, outs, attrs):
    boxes, scores, max_size, iou, score = ins
    outs[0][...] = nms_select(boxes, scores, int(max_size), float(iou), float(score))
