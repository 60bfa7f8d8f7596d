"""NumPy kernels of the image input ops (ops/image_ops.py)."""
from __future__ import annotations

import numpy as np

from tfplus.ops.image_ops import crop_geometry, nms_select
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


def _box_samples(boxes, b, crop_h, crop_w, h, w):
    """Box b's sample rows and columns: (coordinates, inside-the-image masks), float32 as TF computes them."""
    y1, x1, y2, x2 = boxes[b]
    ys, y_ok = crop_geometry((y1, y2), crop_h, h)
    xs, x_ok = crop_geometry((x1, x2), crop_w, w)
    return ys, y_ok, xs, x_ok


def _boxes_inside(boxes, crop_h, crop_w, h, w):
    """(b, row coordinates, rows inside, column coordinates, columns inside) of each box with samples inside the
    image (row and column indices of the crop): what the gradients spread back."""
    for b in range(len(boxes)):
        ys, y_ok, xs, x_ok = _box_samples(boxes, b, crop_h, crop_w, h, w)
        ry, rx = np.nonzero(y_ok)[0], np.nonzero(x_ok)[0]
        if len(ry) and len(rx):
            yield b, ys[ry], ry, xs[rx], rx


def _corners(coords):
    lo = np.floor(coords).astype(np.int64)
    return lo, np.ceil(coords).astype(np.int64), (coords - lo).astype(np.float32)


def _nearest(coords):
    return np.floor(np.abs(coords) + np.float32(0.5)).astype(np.int64)  # C's roundf: halves away from zero


@register_kernel("CropAndResize", "cpu")
def _crop_and_resize(ctx, ins, outs, attrs):
    image, boxes, box_ind, _ = ins
    out = outs[0]
    n, crop_h, crop_w, _ = out.shape
    _, h, w, _ = image.shape
    out[...] = np.float32(attrs["extrapolation_value"])
    for b in range(n):
        ys, y_ok, xs, x_ok = _box_samples(boxes, b, crop_h, crop_w, h, w)
        if not (0 <= box_ind[b] < image.shape[0]):
            raise ValueError(f"CropAndResize: box_ind[{b}] = {box_ind[b]} is not in [0, {image.shape[0]})")
        img = image[box_ind[b]].astype(np.float32)
        ry, rx = np.nonzero(y_ok)[0], np.nonzero(x_ok)[0]
        if not len(ry) or not len(rx):
            continue
        if attrs["method"] == "nearest":
            out[b, ry[:, None], rx[None, :]] = img[_nearest(ys[ry])[:, None], _nearest(xs[rx])[None, :]]
            continue
        top, bottom, y_lerp = _corners(ys[ry])
        left, right, x_lerp = _corners(xs[rx])
        xl = x_lerp[None, :, None]
        upper = img[top][:, left] + (img[top][:, right] - img[top][:, left]) * xl
        lower = img[bottom][:, left] + (img[bottom][:, right] - img[bottom][:, left]) * xl
        out[b, ry[:, None], rx[None, :]] = upper + (lower - upper) * y_lerp[:, None, None]


@register_kernel("CropAndResizeGradImage", "cpu")
def _crop_and_resize_grad_image(ctx, ins, outs, attrs):
    grads, boxes, box_ind, _ = ins
    out = outs[0]
    out[...] = 0
    _, crop_h, crop_w, _ = grads.shape
    _, h, w, _ = out.shape
    for b, ys, ry, xs, rx in _boxes_inside(boxes, crop_h, crop_w, h, w):
        g = grads[b][ry[:, None], rx[None, :]]
        dst = out[box_ind[b]]
        if attrs["method"] == "nearest":
            np.add.at(dst, (_nearest(ys)[:, None], _nearest(xs)[None, :]), g)
            continue
        top, bottom, y_lerp = _corners(ys)
        left, right, x_lerp = _corners(xs)
        yl, xl = y_lerp[:, None, None], x_lerp[None, :, None]
        for rows, wy in ((top, 1 - yl), (bottom, yl)):
            for cols, wx in ((left, 1 - xl), (right, xl)):
                np.add.at(dst, (rows[:, None], cols[None, :]), g * wy * wx)


@register_kernel("CropAndResizeGradBoxes", "cpu")
def _crop_and_resize_grad_boxes(ctx, ins, outs, attrs):
    grads, image, boxes, box_ind = ins
    out = outs[0]
    out[...] = 0
    _, crop_h, crop_w, _ = grads.shape
    _, h, w, _ = image.shape
    for b, ys, ry, xs, rx in _boxes_inside(boxes, crop_h, crop_w, h, w):
        img = image[box_ind[b]].astype(np.float32)
        top, bottom, y_lerp = _corners(ys)
        left, right, x_lerp = _corners(xs)
        yl, xl = y_lerp[:, None, None], x_lerp[None, :, None]
        tl, tr = img[top][:, left], img[top][:, right]
        bl, br = img[bottom][:, left], img[bottom][:, right]
        g = grads[b][ry[:, None], rx[None, :]].astype(np.float32)
        dy = (((1 - xl) * (bl - tl) + xl * (br - tr)) * g).sum(axis=2)      # d crop / d sample row, per sample
        dx = (((1 - yl) * (tr - tl) + yl * (br - bl)) * g).sum(axis=2)
        # How a sample moves with each corner: d in_y / d y1 = (h - 1) - y * ratio, d in_y / d y2 = y * ratio.
        ratio_y = np.float32(h - 1) / np.float32(crop_h - 1) if crop_h > 1 else None
        ratio_x = np.float32(w - 1) / np.float32(crop_w - 1) if crop_w > 1 else None
        wy2 = ry * ratio_y if ratio_y is not None else np.full(len(ry), np.float32(0.5) * (h - 1))
        wy1 = (h - 1) - ry * ratio_y if ratio_y is not None else wy2
        wx2 = rx * ratio_x if ratio_x is not None else np.full(len(rx), np.float32(0.5) * (w - 1))
        wx1 = (w - 1) - rx * ratio_x if ratio_x is not None else wx2
        out[b] = [(dy * wy1[:, None]).sum(), (dx * wx1[None, :]).sum(), (dy * wy2[:, None]).sum(),
                  (dx * wx2[None, :]).sum()]
