"""NumPy kernels of the image input ops (ops/image_ops.py)."""
from __future__ import annotations

import numpy as np

from tfplus.data.cifar10 import crop_flip
from tfplus.registry import register_kernel


@register_kernel("CifarAugment", "cpu", ("float32",))
def _cifar_augment(ctx, ins, outs, attrs):
    images, crops, scale, shift = ins
    x = crop_flip(images, crops[:, 0], crops[:, 1], crops[:, 2] != 0, attrs["pad"])
    out, shape = outs[0], (1, -1, 1, 1)
    if attrs["data_format"] == "NHWC":
        x, shape = x.transpose(0, 2, 3, 1), (1, 1, 1, -1)
    # The same two float32 roundings as tfplus.data.normalize and the OpenCL kernel: equal bits on every path.
    np.multiply(x, scale.reshape(shape), out=out, dtype=np.float32)
    out -= shift.reshape(shape)
