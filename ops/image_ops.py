"""Image input ops: CIFAR-style augmentation and normalization of uint8 batches, as a graph op so that it runs
on the device next to the model (the opencl trainer uploads bytes, not floats)."""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus import flops
from tfplus.framework import Tensor, apply_op, convert_to_tensor
from tfplus.registry import not_differentiable, register_op
from tfplus.tensor_shape import check_rank, fmt, merge_dim, spec


# -- CifarAugment --------------------------------------------------------------------------------------------
def _cifar_augment_shape(ins, attrs):
    images, crops, scale, shift = ins
    for s, want, what in ((images, _dt.uint8, "images"), (crops, _dt.int32, "crops"),
                          (scale, _dt.float32, "scale"), (shift, _dt.float32, "shift")):
        if s.dtype is not want:
            raise TypeError(f"{what} must be {want.name}, got {s.dtype.name}")
    check_rank(images, 4, "images (N, C, H, W)")
    check_rank(crops, 2, "crops (N, 3)")
    check_rank(scale, 1, "scale (C,)")
    check_rank(shift, 1, "shift (C,)")
    if attrs["pad"] < 0:
        raise ValueError(f"pad must be >= 0, got {attrs['pad']}")
    if attrs["data_format"] not in ("NCHW", "NHWC"):
        raise ValueError(f"data_format must be 'NCHW' or 'NHWC', got {attrs['data_format']!r}")
    if crops.shape is not None and crops.shape[1] not in (None, 3):
        raise ValueError(f"crops must have shape (N, 3) (top, left, flip), got {fmt(crops.shape)}")
    if images.shape is None:
        return [spec(None, _dt.float32)]
    n, c, h, w = images.shape
    if crops.shape is not None:
        n = merge_dim(n, crops.shape[0], "images and crops batch")
    for s, what in ((scale, "scale"), (shift, "shift")):
        if s.shape is not None:
            c = merge_dim(c, s.shape[0], f"images channels and {what}")
    return [spec((n, c, h, w) if attrs["data_format"] == "NCHW" else (n, h, w, c), _dt.float32)]


register_op("CifarAugment", inputs=("images", "crops", "scale", "shift"), outputs=("output",),
            attrs={"pad": "int", "data_format": "string"}, shape_fn=_cifar_augment_shape,
            flops=flops.per_output)  # a multiply-add per pixel, counted once
not_differentiable("CifarAugment")


def cifar_augment(images, crops, scale, shift, pad: int = 4, data_format: str = "NCHW", name=None) -> Tensor:
    """Crop, flip and normalize uint8 (N, C, H, W) images in one op: image i, zero-padded by `pad`, is cut at
    (crops[i, 0], crops[i, 1]) (each 0..2*pad; pad, pad keeps it in place), mirrored left-right if crops[i, 2]
    is not 0, and each pixel p of channel c becomes float32(p) * scale[c] - shift[c] (two float32 roundings:
    tfplus.data.normalize computes the same), laid out as data_format.

        x = cifar_augment(raw, crops, 1 / (255 * STD), MEAN / STD)   # crops = [[4, 4, 0]] * N: no change
    """
    return apply_op("CifarAugment", [convert_to_tensor(images), convert_to_tensor(crops),
                                     convert_to_tensor(scale, dtype=_dt.float32),
                                     convert_to_tensor(shift, dtype=_dt.float32)],
                    {"pad": int(pad), "data_format": data_format}, name)
