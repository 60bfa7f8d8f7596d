"""Op-table cases for the image input ops (tfplus.ops.image_ops), plus their bit-exactness across devices."""
import numpy as np
import pytest
from optable import Case

import tfplus as tf
from tfplus import data as tfdata
from tfplus.framework import apply_op
from tfplus.ops.image_ops import cifar_augment


def _augment_inputs(rng, dt, n=3, pad=2):
    images = rng.integers(0, 256, (n, 3, 5, 6), dtype=np.uint8)
    crops = np.stack([rng.integers(0, 2 * pad + 1, n), rng.integers(0, 2 * pad + 1, n), np.arange(n) % 2], 1)
    return [images, crops.astype(np.int32), rng.uniform(0.5, 2, 3).astype(np.float32),
            rng.uniform(-1, 1, 3).astype(np.float32)]


def _augment_ref(images, crops, scale, shift, pad=2, data_format="NCHW"):
    """Pixel by pixel, from the definition (not through crop_flip, which the cpu kernel uses)."""
    n, c, h, w = images.shape
    out = np.empty(images.shape, np.float32)
    for i, (top, left, flip) in enumerate(crops):
        for y in range(h):
            for x in range(w):
                sy, sx = top + y - pad, left + (w - 1 - x if flip else x) - pad
                p = images[i, :, sy, sx] if 0 <= sy < h and 0 <= sx < w else np.zeros(c, np.uint8)
                out[i, :, y, x] = p.astype(np.float32) * scale - shift
    return out if data_format == "NCHW" else out.transpose(0, 2, 3, 1)


def _nms_inputs(rng, dt, n=10):
    lo = rng.uniform(0, 1, (n, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(0.1, 0.5, (n, 2))], 1).astype(dt)
    boxes[1] = boxes[1, [2, 3, 0, 1]]  # corners in the other order
    return [boxes, rng.permutation(n).astype(dt)]  # distinct scores


def _nms_ref(boxes, scores, size=4, threshold=0.3):
    """Greedy, box by box from the best score, with the intersection over union written out."""
    def iou(a, b):
        (ay0, ax0), (ay1, ax1) = np.sort(a.reshape(2, 2), 0)
        (by0, bx0), (by1, bx1) = np.sort(b.reshape(2, 2), 0)
        inter = max(min(ay1, by1) - max(ay0, by0), 0) * max(min(ax1, bx1) - max(ax0, bx0), 0)
        return inter / ((ay1 - ay0) * (ax1 - ax0) + (by1 - by0) * (bx1 - bx0) - inter)
    kept = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        if len(kept) < size and all(iou(boxes[i], boxes[k]) <= threshold for k in kept):
            kept.append(i)
    return np.array(kept, np.int32)


def _crop_inputs(rng, dt):
    image = rng.standard_normal((2, 5, 6, 3)).astype(dt)
    # Inside, flipped (y1 > y2), partly outside the image, and a degenerate one (one row).
    boxes = np.array([[0.1, 0.2, 0.8, 0.86], [0.9, 0.72, 0.2, 0.1], [-0.3, 0.52, 0.6, 1.4], [0.5, 0.12, 0.5, 0.6]],
                     np.float32)
    return [image, boxes, np.array([0, 1, 1, 0], np.int32)]


def _crop_ref(image, boxes, box_ind, size=(3, 4), method="bilinear", extrapolation=-1.0, dtype=np.float32):
    """Sample by sample from TF's definition: box corner y1 * (h - 1) + i * (y2 - y1) * (h - 1) / (crop_h - 1)."""
    _, h, w, c = image.shape
    out = np.full((len(boxes), *size, c), extrapolation, np.float64)
    for b, (y1, x1, y2, x2) in enumerate(boxes.astype(np.float64)):
        for i in range(size[0]):
            y = y1 * (h - 1) + i * (y2 - y1) * (h - 1) / (size[0] - 1)
            for j in range(size[1]):
                x = x1 * (w - 1) + j * (x2 - x1) * (w - 1) / (size[1] - 1)
                if not (0 <= y <= h - 1 and 0 <= x <= w - 1):
                    continue
                img = image[box_ind[b]].astype(np.float64)
                if method == "nearest":
                    out[b, i, j] = img[int(np.floor(y + 0.5)), int(np.floor(x + 0.5))]
                    continue
                t, left = int(np.floor(y)), int(np.floor(x))
                bo, r = int(np.ceil(y)), int(np.ceil(x))
                fy, fx = y - t, x - left
                top = img[t, left] * (1 - fx) + img[t, r] * fx
                bottom = img[bo, left] * (1 - fx) + img[bo, r] * fx
                out[b, i, j] = top * (1 - fy) + bottom * fy
    return out.astype(dtype)


def _crop_grad_inputs(rng, dt):
    image, boxes, box_ind = _crop_inputs(rng, dt)
    return [rng.standard_normal((len(boxes), 3, 4, 3)).astype(dt), boxes, box_ind, image]


def _smooth_crop_grad_inputs(rng, dt):
    """Boxes whose samples fall between pixel rows and columns, inside the image: the crop is smooth there."""
    image = rng.standard_normal((2, 5, 6, 3)).astype(dt)
    boxes = np.array([[0.13, 0.21, 0.77, 0.86], [0.9, 0.72, 0.23, 0.1], [0.31, 0.57, 0.61, 0.93]], np.float32)
    return [rng.standard_normal((3, 3, 4, 3)).astype(dt), boxes, np.array([0, 1, 1], np.int32), image]


def _crop_grad_image_ref(grads, boxes, box_ind, image, method="bilinear"):
    """The adjoint of the reference crop (linear in the image), column by column of its Jacobian."""
    flat = np.zeros(image.size)
    out = np.zeros(image.size)
    for k in range(image.size):
        flat[k] = 1
        out[k] = np.sum(_crop_ref(flat.reshape(image.shape), boxes, box_ind, method=method, extrapolation=0.0,
                                  dtype=np.float64) * grads)
        flat[k] = 0
    return out.reshape(image.shape)


def _crop_grad_boxes_ref(grads, boxes, box_ind, image, eps=1e-6):
    """Central differences of the float64 reference crop in each box coordinate (the test boxes sit away from
    the kinks where a sample crosses a pixel row or the image's edge)."""
    out = np.zeros(boxes.shape)
    b64 = boxes.astype(np.float64)
    for i in np.ndindex(boxes.shape):
        hi, lo = b64.copy(), b64.copy()
        hi[i] += eps
        lo[i] -= eps
        diff = _crop_ref(image, hi, box_ind, dtype=np.float64) - _crop_ref(image, lo, box_ind, dtype=np.float64)
        out[i] = np.sum(diff * grads) / (2 * eps)
    return out.astype(np.float32)


def _crop_grad(op_type, method="bilinear"):
    def build(g, b, i, x):
        if op_type == "CropAndResizeGradImage":
            return apply_op(op_type, [g, b, i, tf.shape(x)], {"T": x.dtype, "method": method})
        return apply_op(op_type, [g, x, b, i], {"T": x.dtype})
    return build


# CropAndResize outputs float32 whatever the image's dtype (as TF's): float64 finite differences drown in its
# rounding, so its gradients are checked against TensorFlow's and by the adjoint identity
# (tests/tf_oracle/test_zoo2.py).
CASES = [
    Case("crop_and_resize", lambda x, b, i: tf.image.crop_and_resize(x, b, i, [3, 4], extrapolation_value=-1.0),
         make=_crop_inputs, ref=_crop_ref, grad=False, atol={"float64": 1e-6}),
    Case("crop_and_resize_nearest", lambda x, b, i: tf.image.crop_and_resize(x, b, i, [3, 4], method="nearest",
                                                                           extrapolation_value=-1.0),
         make=_crop_inputs, ref=lambda *a: _crop_ref(*a, method="nearest"), grad=False),
    # The sample weights are float32 as TF's, also for a float64 image: 1e-7 from the float64 reference.
    Case("crop_and_resize_grad_image", _crop_grad("CropAndResizeGradImage"), make=_crop_grad_inputs,
         ref=_crop_grad_image_ref, grad=False, atol={"float32": 1e-5, "float64": 1e-6}),
    Case("crop_and_resize_grad_image_nearest", _crop_grad("CropAndResizeGradImage", "nearest"),
         make=_crop_grad_inputs, ref=lambda *a: _crop_grad_image_ref(*a, method="nearest"), grad=False),
    Case("crop_and_resize_grad_boxes", _crop_grad("CropAndResizeGradBoxes"), make=_smooth_crop_grad_inputs,
         ref=_crop_grad_boxes_ref, grad=False, rtol=1e-4, atol=1e-4),
    Case("non_max_suppression", lambda b, s: tf.image.non_max_suppression(b, s, 4, iou_threshold=0.3),
         make=_nms_inputs, ref=_nms_ref, grad=False),
    Case("cifar_augment", lambda x, k, a, b: cifar_augment(x, k, a, b, pad=2), make=_augment_inputs,
         ref=_augment_ref, dtypes=("float32",), grad=False),
    Case("cifar_augment_nhwc", lambda x, k, a, b: cifar_augment(x, k, a, b, pad=2, data_format="NHWC"),
         make=_augment_inputs, ref=lambda *a: _augment_ref(*a, data_format="NHWC"), dtypes=("float32",),
         grad=False, static_shapes=False),
]


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_cifar_augment_equals_the_host_pipeline_bit_for_bit(device, data_format):
    """The trainer's device input gives the very floats of the host pipeline (crop_flip, then normalize)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 3, 8, 8), dtype=np.uint8)
    top, left = rng.integers(0, 9, (2, 5))
    flip = rng.random(5) < 0.5
    want = tfdata.normalize(tfdata.crop_flip(images, top, left, flip), data_format)
    g = tf.Graph()
    with g.as_default():
        raw = tf.placeholder(tf.uint8, [None, 3, 8, 8])
        crops = tf.placeholder(tf.int32, [None, 3])
        out = cifar_augment(raw, crops, 1 / (255 * tfdata.STD), tfdata.MEAN / tfdata.STD,
                            data_format=data_format)
    with tf.Session(graph=g, device=device) as sess:
        got = sess.run(out, {raw: images, crops: np.stack([top, left, flip], 1).astype(np.int32)})
    np.testing.assert_array_equal(got, want)


def test_cifar_augment_shape_errors():
    with tf.Graph().as_default():
        raw = tf.placeholder(tf.uint8, [2, 3, 8, 8])
        with pytest.raises(ValueError, match="crops"):
            cifar_augment(raw, tf.placeholder(tf.int32, [2, 2]), [1.0] * 3, [0.0] * 3)
        with pytest.raises(ValueError, match="channels and scale"):
            cifar_augment(raw, tf.placeholder(tf.int32, [2, 3]), [1.0] * 4, [0.0] * 3)
        with pytest.raises(TypeError, match="images must be uint8"):
            cifar_augment(tf.placeholder(tf.float32, [2, 3, 8, 8]), tf.placeholder(tf.int32, [2, 3]),
                          [1.0] * 3, [0.0] * 3)
