"""Image ops: CIFAR-style augmentation and normalization of uint8 batches, as a graph op so that it runs on the
device next to the model (the opencl trainer uploads bytes, not floats); non-max suppression of detected boxes."""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus import flops
from tfplus.framework import Tensor, apply_op, convert_to_tensor
from tfplus.ops.row_rules import rowwise
from tfplus.registry import not_differentiable, register_gradient, register_op, register_rows
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
register_rows(rowwise, "CifarAugment")
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


# -- NonMaxSuppressionV3 -------------------------------------------------------------------------------------
def nms_select(boxes: np.ndarray, scores: np.ndarray, max_output_size: int, iou_threshold: float,
               score_threshold: float) -> np.ndarray:
    """Greedy non-max suppression as TensorFlow's CPU kernel does it: boxes scoring above `score_threshold`, best
    first (ties: the lower index), each kept unless its IoU with a kept box exceeds `iou_threshold`; at most
    `max_output_size` int32 indices. Boxes are [y1, x1, y2, x2] with the corners in either order."""
    lo = np.minimum(boxes[:, :2], boxes[:, 2:])
    hi = np.maximum(boxes[:, :2], boxes[:, 2:])
    area = np.prod(hi - lo, axis=1)
    order = [i for i in np.argsort(-scores, kind="stable") if scores[i] > score_threshold]
    kept: list = []
    for i in order:
        if len(kept) == max_output_size:
            break
        if kept:
            k = np.array(kept)
            inter = np.prod(np.maximum(np.minimum(hi[k], hi[i]) - np.maximum(lo[k], lo[i]), 0), axis=1)
            union = area[k] + area[i] - inter
            iou = np.where((area[k] > 0) & (area[i] > 0), inter / np.where(union > 0, union, 1), 0)
            if np.any(iou > iou_threshold):
                continue
        kept.append(i)
    return np.array(kept, np.int32)


def _nms_shape(ins, attrs):
    boxes, scores, max_size, iou, score = ins
    check_rank(boxes, 2, "boxes [num_boxes, 4]")
    check_rank(scores, 1, "scores [num_boxes]")
    for s, what in ((max_size, "max_output_size"), (iou, "iou_threshold"), (score, "score_threshold")):
        check_rank(s, 0, what)
    if boxes.shape is not None and boxes.shape[1] not in (None, 4):
        raise ValueError(f"boxes must have shape [num_boxes, 4], got {fmt(boxes.shape)}")
    if boxes.shape is not None and scores.shape is not None:
        merge_dim(boxes.shape[0], scores.shape[0], "boxes and scores num_boxes")
    if any(s.value is None for s in ins):
        return [spec((None,), _dt.int32)]
    # The number of boxes kept depends on the values, so the shape function runs the selection (value_inputs).
    kept = nms_select(boxes.value, scores.value, int(max_size.value), float(iou.value), float(score.value))
    return [spec(kept.shape, _dt.int32)]


register_op("NonMaxSuppressionV3", inputs=("boxes", "scores", "max_output_size", "iou_threshold",
                                           "score_threshold"), outputs=("selected_indices",),
            attrs={"T": "type", "T_threshold": "type"}, shape_fn=_nms_shape, value_inputs=(0, 1, 2, 3, 4),
            flops=flops.zero)
not_differentiable("NonMaxSuppressionV3")


def non_max_suppression(boxes, scores, max_output_size, iou_threshold=0.5, score_threshold=float("-inf"),
                        name=None) -> Tensor:
    """The indices (int32, best first) of at most `max_output_size` boxes kept by greedy non-max suppression:
    a box is dropped when its IoU with a better kept box exceeds `iou_threshold` (forward only: no gradient).

        keep = tf.image.non_max_suppression(boxes, scores, max_output_size=10, iou_threshold=0.5)
        kept_boxes = tf.gather(boxes, keep)
    """
    boxes = convert_to_tensor(boxes)
    if not boxes.dtype.is_floating:
        raise TypeError(f"tf.image.non_max_suppression: boxes '{boxes.name}' must be float, got {boxes.dtype.name}")
    scores = convert_to_tensor(scores, dtype=boxes.dtype)
    ins = [boxes, scores, convert_to_tensor(max_output_size, dtype=_dt.int32),
           convert_to_tensor(iou_threshold, dtype=_dt.float32), convert_to_tensor(score_threshold, dtype=_dt.float32)]
    return apply_op("NonMaxSuppressionV3", ins, {"T": boxes.dtype, "T_threshold": _dt.float32}, name)


# -- CropAndResize -------------------------------------------------------------------------------------------
def crop_geometry(box, size: int, extent: int):
    """Where TF's CropAndResize samples one axis of one box: (the sample coordinates in the image, float32 as
    TF computes them, and whether each lies inside [0, extent - 1]). box is (start, end) normalized."""
    lo, hi = np.float32(box[0]), np.float32(box[1])
    span = np.float32(extent - 1)
    if size > 1:
        coords = lo * span + np.arange(size, dtype=np.float32) * ((hi - lo) * span / np.float32(size - 1))
    else:
        coords = np.full(1, np.float32(0.5) * (lo + hi) * span, np.float32)
    return coords, (coords >= 0) & (coords <= span)


def _crop_and_resize_shape(ins, attrs):
    image, boxes, box_ind, crop_size = ins
    check_rank(image, 4, "image [batch, height, width, depth]")
    check_rank(boxes, 2, "boxes [num_boxes, 4]")
    check_rank(box_ind, 1, "box_ind [num_boxes]")
    check_rank(crop_size, 1, "crop_size [2]")
    if boxes.dtype is not _dt.float32:
        raise TypeError(f"boxes must be float32, got {boxes.dtype.name}")
    if attrs["method"] not in ("bilinear", "nearest"):
        raise ValueError(f"method must be 'bilinear' or 'nearest', got {attrs['method']!r}")
    if boxes.shape is not None and boxes.shape[1] not in (None, 4):
        raise ValueError(f"boxes must have shape [num_boxes, 4], got {fmt(boxes.shape)}")
    n = None if boxes.shape is None else boxes.shape[0]
    if box_ind.shape is not None:
        n = merge_dim(n, box_ind.shape[0], "boxes and box_ind num_boxes")
    if crop_size.value is not None:
        size = [int(d) for d in np.ravel(crop_size.value)]
        if len(size) != 2 or min(size) < 1:
            raise ValueError(f"crop_size must be 2 positive ints [crop_height, crop_width], got {size}")
    else:
        size = [None, None]
    depth = None if image.shape is None else image.shape[3]
    return [spec((n, *size, depth), _dt.float32)]


def _crop_rows(op, rows, image: int = 0) -> str | None:
    if op.inputs[image] in rows:
        return "reads each box's image by box_ind: a micro-batch's boxes may name another's images"
    return rowwise(op, rows)


register_op("CropAndResize", inputs=("image", "boxes", "box_ind", "crop_size"), outputs=("crops",),
            attrs={"T": "type", "method": "string", "extrapolation_value": "float"},
            shape_fn=_crop_and_resize_shape, value_inputs=(3,), flops=flops.zero)
register_rows(_crop_rows, "CropAndResize")


@register_gradient("CropAndResize")
def _crop_and_resize_grad(op, grad):
    """d image: each crop's gradient spread back onto the pixels it sampled (its bilinear weights, or the nearest);
    d boxes: how moving each corner moves the bilinear samples."""
    image, boxes, box_ind, _ = op.inputs
    d_image = None
    if image.dtype.is_floating:
        from tfplus.ops.array_ops import shape
        d_image = apply_op("CropAndResizeGradImage", [grad, boxes, box_ind, shape(image, out_type=_dt.int32)],
                           {"T": image.dtype, "method": op.attrs["method"]})
    # NOTE: TF takes the bilinear boxes gradient whatever the method (nearest's is zero almost everywhere).
    d_boxes = apply_op("CropAndResizeGradBoxes", [grad, image, boxes, box_ind], {"T": image.dtype})
    return [d_image, d_boxes, None, None]


def _grad_image_shape(ins, attrs):
    grads, boxes, box_ind, image_size = ins
    check_rank(grads, 4, "grads [num_boxes, crop_height, crop_width, depth]")
    if image_size.value is None:
        return [spec((None,) * 4, attrs["T"])]
    return [spec(tuple(int(d) for d in np.ravel(image_size.value)), attrs["T"])]


register_op("CropAndResizeGradImage", inputs=("grads", "boxes", "box_ind", "image_size"), outputs=("output",),
            attrs={"T": "type", "method": "string"}, shape_fn=_grad_image_shape, value_inputs=(3,), flops=flops.zero)
register_rows(lambda op, rows: "adds each box's gradient into the image box_ind names, across the batch",
              "CropAndResizeGradImage")
not_differentiable("CropAndResizeGradImage")


def _grad_boxes_shape(ins, attrs):
    grads, image, boxes, box_ind = ins
    return [spec((None if boxes.shape is None else boxes.shape[0], 4), _dt.float32)]


register_op("CropAndResizeGradBoxes", inputs=("grads", "image", "boxes", "box_ind"), outputs=("output",),
            attrs={"T": "type"}, shape_fn=_grad_boxes_shape, flops=flops.zero)
register_rows(lambda op, rows: _crop_rows(op, rows, image=1), "CropAndResizeGradBoxes")
not_differentiable("CropAndResizeGradBoxes")


def crop_and_resize(image, boxes, box_ind=None, crop_size=None, method="bilinear", extrapolation_value=0.0,
                    name=None, box_indices=None) -> Tensor:
    """Crops of `image` [batch, h, w, depth] at `boxes` [n, 4] (normalized [y1, x1, y2, x2]; y1 > y2 flips), box
    i from image box_ind[i], each resized to `crop_size` [crop_h, crop_w] by bilinear (or nearest) sampling;
    samples outside the image take `extrapolation_value`. float32 [n, crop_h, crop_w, depth]. Faster R-CNN's
    ROI pooling and Mask R-CNN's ROI align:

        crops = tf.image.crop_and_resize(features, rois, tf.zeros([n], tf.int32), [7, 7])
    """
    if box_ind is None:
        box_ind = box_indices
    if box_ind is None or crop_size is None:
        raise ValueError("tf.image.crop_and_resize: box_ind (box_indices) and crop_size are required")
    image = convert_to_tensor(image)
    ins = [image, convert_to_tensor(boxes, dtype=_dt.float32), convert_to_tensor(box_ind, dtype=_dt.int32),
           convert_to_tensor(crop_size, dtype=_dt.int32)]
    return apply_op("CropAndResize", ins, {"T": image.dtype, "method": method,
                                           "extrapolation_value": float(extrapolation_value)}, name)
