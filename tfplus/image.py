"""tf.image's basics for graph-mode input pipelines, as TF1 computes them, built from registered ops: dtype
conversion, standardization, flips, crops and pads, grayscale, brightness and contrast. Images are [height, width,
channels] or batches [batch, height, width, channels]; crops and pads need the sizes known when the graph is built.
Resizing (resize_images, resize_bilinear, resize_nearest_neighbor) is TF1's legacy sampling, built from gathers
(nearest) and per-axis interpolation matrices (bilinear); the sizes must be known when the graph is built.

    import tfplus as tf
    img = tf.image.convert_image_dtype(raw_uint8, tf.float32)           # [0, 255] -> [0, 1]
    img = tf.image.random_flip_left_right(tf.image.per_image_standardization(img))
"""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, constant_value, convert_to_tensor, name_scope
from tfplus.ops import array_ops, composite_ops, math_ops, random_ops
from tfplus.ops.image_ops import crop_and_resize, non_max_suppression

__all__ = ["convert_image_dtype", "per_image_standardization", "flip_left_right", "flip_up_down",
           "random_flip_left_right", "random_flip_up_down", "crop_to_bounding_box", "pad_to_bounding_box",
           "central_crop", "resize_image_with_crop_or_pad", "rgb_to_grayscale", "grayscale_to_rgb",
           "adjust_brightness", "random_brightness", "adjust_contrast", "random_contrast", "random_crop",
           "ResizeMethod", "resize_images", "resize", "resize_bilinear", "resize_nearest_neighbor",
           "non_max_suppression", "total_variation", "image_gradients", "psnr", "ssim",
           "crop_and_resize", "non_max_suppression_padded", "rot90", "transpose_image", "transpose",
           "resize_with_crop_or_pad", "extract_image_patches", "extract_patches", "sobel_edges", "adjust_gamma",
           "rgb_to_yiq", "yiq_to_rgb", "rgb_to_yuv", "yuv_to_rgb", "rgb_to_hsv", "hsv_to_rgb", "adjust_hue",
           "random_hue", "adjust_saturation", "random_saturation"]


def _image(image, what: str) -> Tensor:
    image = convert_to_tensor(image)
    if image.shape.ndims not in (3, 4):
        raise ValueError(f"tf.image.{what}: '{image.name}' must be [height, width, channels] or a batch of them, "
                         f"got shape {image.shape}")
    return image


def _max(dtype) -> float:
    """The largest value of an integer image dtype (uint8: 255): what 1.0 of a float image becomes."""
    return float(2 ** (dtype.size * 8 - (0 if dtype.name.startswith("uint") else 1)) - 1)


def convert_image_dtype(image, dtype, saturate=False, name=None) -> Tensor:
    """Integer images scale to [0, 1] floats; floats in [0, 1] scale to the integer range (rounded, as TF1)."""
    dtype = _dt.as_dtype(dtype)
    with name_scope(name, "convert_image"):
        image = convert_to_tensor(image)
        if image.dtype is dtype:
            return array_ops.identity(image)
        if image.dtype.is_floating and dtype.is_floating:
            return math_ops.cast(image, dtype)
        if dtype.is_floating:  # int -> float
            return math_ops.multiply(math_ops.cast(image, dtype), 1.0 / _max(image.dtype))
        if image.dtype.is_floating:  # float -> int: x * (max + 0.5), truncated
            scaled = math_ops.multiply(image, _max(dtype) + 0.5)
            if saturate:
                scaled = math_ops.clip_by_value(scaled, 0.0, _max(dtype))
            return math_ops.cast(scaled, dtype)
        raise NotImplementedError(f"convert_image_dtype: {image.dtype.name} -> {dtype.name} is not supported by "
                                  "tfplus; convert through float32")


def per_image_standardization(image) -> Tensor:
    """(x - mean) / max(stddev, 1 / sqrt(number of elements)) per image, in float32."""
    with name_scope(None, "per_image_standardization"):
        image = _image(image, "per_image_standardization")
        x = image if image.dtype is _dt.float32 else math_ops.cast(image, _dt.float32)
        axes = [-1, -2, -3]
        n = math_ops.cast(math_ops.reduce_prod(array_ops.shape(x)[-3:]), _dt.float32)
        mean = math_ops.reduce_mean(x, axes, keepdims=True)
        variance = math_ops.reduce_mean(math_ops.square(x), axes, keepdims=True) - math_ops.square(mean)
        stddev = math_ops.sqrt(math_ops.maximum(variance, 0.0))
        return math_ops.divide(x - mean, math_ops.maximum(stddev, math_ops.rsqrt(n)))


def flip_left_right(image) -> Tensor:
    """The image mirrored along its width."""
    return _image(image, "flip_left_right")[..., ::-1, :]


def flip_up_down(image) -> Tensor:
    """The image mirrored along its height."""
    return _image(image, "flip_up_down")[..., ::-1, :, :]


def _random_flip(image, flip, seed, what):
    image = _image(image, what)
    with name_scope(None, what):
        shape = [array_ops.shape(image)[0], 1, 1, 1] if image.shape.ndims == 4 else []
        mask = math_ops.less(random_ops.random_uniform(shape, seed=seed), 0.5)  # per image in a batch, as TF
        return math_ops.where_v2(mask, flip(image), image)


def random_flip_left_right(image, seed=None) -> Tensor:
    """Each image mirrored along its width with probability 1/2."""
    return _random_flip(image, flip_left_right, seed, "random_flip_left_right")


def random_flip_up_down(image, seed=None) -> Tensor:
    """Each image mirrored along its height with probability 1/2."""
    return _random_flip(image, flip_up_down, seed, "random_flip_up_down")


def _hw(image, what) -> tuple[int, int]:
    h, w = image.shape.as_list()[-3:-1]
    if h is None or w is None:
        raise ValueError(f"tf.image.{what}: the height and width of '{image.name}' (shape {image.shape}) must be "
                         "known when the graph is built")
    return h, w


def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width) -> Tensor:
    """image[..., offset_height:offset_height + target_height, offset_width:offset_width + target_width, :]."""
    image = _image(image, "crop_to_bounding_box")
    h, w = _hw(image, "crop_to_bounding_box")
    if offset_height + target_height > h or offset_width + target_width > w or min(offset_height, offset_width) < 0:
        raise ValueError(f"crop_to_bounding_box: the box ({offset_height}, {offset_width}) + ({target_height}, "
                         f"{target_width}) does not fit in {h}x{w}")
    return image[..., offset_height:offset_height + target_height, offset_width:offset_width + target_width, :]


def pad_to_bounding_box(image, offset_height, offset_width, target_height, target_width) -> Tensor:
    """The image placed at (offset_height, offset_width) in zeros of target_height x target_width."""
    image = _image(image, "pad_to_bounding_box")
    h, w = _hw(image, "pad_to_bounding_box")
    bottom, right = target_height - offset_height - h, target_width - offset_width - w
    if min(offset_height, offset_width, bottom, right) < 0:
        raise ValueError(f"pad_to_bounding_box: a {h}x{w} image at ({offset_height}, {offset_width}) does not fit "
                         f"in {target_height}x{target_width}")
    pads = [[offset_height, bottom], [offset_width, right], [0, 0]]
    return array_ops.pad(image, [[0, 0]] + pads if image.shape.ndims == 4 else pads)


def central_crop(image, central_fraction) -> Tensor:
    """The central `central_fraction` (0, 1] of the height and width."""
    if not 0.0 < central_fraction <= 1.0:
        raise ValueError(f"central_crop: central_fraction must be in (0, 1], got {central_fraction}")
    image = _image(image, "central_crop")
    if central_fraction == 1.0:
        return image
    h, w = _hw(image, "central_crop")
    top, left = int((h - h * central_fraction) / 2), int((w - w * central_fraction) / 2)
    return crop_to_bounding_box(image, top, left, h - 2 * top, w - 2 * left)


def resize_image_with_crop_or_pad(image, target_height, target_width) -> Tensor:
    """Centrally cropped and/or zero-padded to target_height x target_width."""
    image = _image(image, "resize_image_with_crop_or_pad")
    h, w = _hw(image, "resize_image_with_crop_or_pad")
    cropped = crop_to_bounding_box(image, max(h - target_height, 0) // 2, max(w - target_width, 0) // 2,
                                   min(target_height, h), min(target_width, w))
    return pad_to_bounding_box(cropped, max(target_height - h, 0) // 2, max(target_width - w, 0) // 2,
                               target_height, target_width)


def rgb_to_grayscale(images, name=None) -> Tensor:
    """0.2989 R + 0.5870 G + 0.1140 B, keeping a channel axis of 1 (computed in float, in the input's dtype)."""
    with name_scope(name, "rgb_to_grayscale"):
        images = _image(images, "rgb_to_grayscale")
        flt = convert_image_dtype(images, _dt.float32)
        gray = math_ops.reduce_sum(math_ops.multiply(flt, [0.2989, 0.5870, 0.1140]), -1, keepdims=True)
        return convert_image_dtype(gray, images.dtype)


def grayscale_to_rgb(images, name=None) -> Tensor:
    """The one channel repeated three times."""
    with name_scope(name, "grayscale_to_rgb"):
        images = _image(images, "grayscale_to_rgb")
        return array_ops.concat([images] * 3, -1)


def adjust_brightness(image, delta) -> Tensor:
    """image + delta (in float; an integer image is converted there and back, as TF1)."""
    image = _image(image, "adjust_brightness")
    with name_scope(None, "adjust_brightness"):
        return convert_image_dtype(math_ops.add(convert_image_dtype(image, _dt.float32), delta), image.dtype)


def random_brightness(image, max_delta, seed=None) -> Tensor:
    """adjust_brightness by a delta drawn from [-max_delta, max_delta)."""
    if max_delta < 0:
        raise ValueError(f"random_brightness: max_delta must be non-negative, got {max_delta}")
    return adjust_brightness(image, random_ops.random_uniform([], -max_delta, max_delta, seed=seed))


def adjust_contrast(images, contrast_factor) -> Tensor:
    """(x - mean) * contrast_factor + mean, the mean per image and channel."""
    images = _image(images, "adjust_contrast")
    with name_scope(None, "adjust_contrast"):
        x = convert_image_dtype(images, _dt.float32)
        mean = math_ops.reduce_mean(x, [-3, -2], keepdims=True)
        return convert_image_dtype(math_ops.add(math_ops.multiply(x - mean, contrast_factor), mean), images.dtype)


def _channels(images, what: str) -> list:
    images = convert_to_tensor(images)
    if images.shape.ndims is None or images.shape.as_list()[-1] != 3:
        raise ValueError(f"tf.image.{what}: '{images.name}' must have 3 channels last, got shape {images.shape}")
    if not images.dtype.is_floating:
        raise TypeError(f"tf.image.{what}: '{images.name}' is {images.dtype.name}; convert it to a float image "
                        "first (tf.image.convert_image_dtype)")
    return array_ops.unstack(images, 3, axis=-1)


def rgb_to_hsv(images, name=None) -> Tensor:
    """RGB in [0, 1] to hue, saturation and value in [0, 1], as TF's RGBToHSV: v = max, s = (max - min) / max
    (0 where max is 0), hue by the sector of the largest channel (0 for grays)."""
    with name_scope(name, "rgb_to_hsv"):
        r, g, b = _channels(images, "rgb_to_hsv")
        v = math_ops.maximum(math_ops.maximum(r, g), b)
        spread = v - math_ops.minimum(math_ops.minimum(r, g), b)
        zeros = array_ops.zeros_like(v)
        s = math_ops.where_v2(v > 0, spread / math_ops.where_v2(v > 0, v, array_ops.ones_like(v)), zeros)
        norm = 1.0 / (6.0 * math_ops.where_v2(spread > 0, spread, array_ops.ones_like(spread)))
        h = math_ops.where_v2(math_ops.equal(r, v), norm * (g - b),
                              math_ops.where_v2(math_ops.equal(g, v), norm * (b - r) + 2.0 / 6.0,
                                                norm * (r - g) + 4.0 / 6.0))
        h = math_ops.where_v2(spread > 0, h, zeros)
        h = math_ops.where_v2(h < 0, h + 1.0, h)
        return array_ops.stack([h, s, v], axis=-1)


def hsv_to_rgb(images, name=None) -> Tensor:
    """The inverse of rgb_to_hsv, as TF's HSVToRGB: each channel (1 - s + s * ramp(6 h)) * v."""
    with name_scope(name, "hsv_to_rgb"):
        h, s, v = _channels(images, "hsv_to_rgb")
        dh = h * 6.0

        def ramp(x):
            return math_ops.minimum(math_ops.maximum(x, 0.0), 1.0)
        ramps = (ramp(math_ops.abs(dh - 3.0) - 1.0), ramp(2.0 - math_ops.abs(dh - 2.0)),
                 ramp(2.0 - math_ops.abs(dh - 4.0)))
        return array_ops.stack([(1.0 - s + s * d) * v for d in ramps], axis=-1)


def _in_hsv(image, what: str, change) -> Tensor:
    """`image` with `change(h, s, v) -> (h, s, v)` applied in HSV space (an integer image converted to float32 and
    back, as TF)."""
    image = convert_to_tensor(image)
    with name_scope(None, what):
        x = image if image.dtype.is_floating else convert_image_dtype(image, _dt.float32)
        h, s, v = array_ops.unstack(rgb_to_hsv(x), 3, axis=-1)
        return convert_image_dtype(hsv_to_rgb(array_ops.stack(change(h, s, v), axis=-1)), image.dtype)


def adjust_hue(image, delta, name=None) -> Tensor:
    """The hue turned by `delta` (in [-1, 1]; a full turn is 1), as TF's AdjustHue."""
    delta = convert_to_tensor(delta, dtype=_dt.float32)
    return _in_hsv(image, "adjust_hue", lambda h, s, v: (math_ops.floormod(h + delta, 1.0), s, v))


def random_hue(image, max_delta, seed=None) -> Tensor:
    """adjust_hue by a delta drawn from [-max_delta, max_delta) (max_delta at most 0.5)."""
    if not 0 <= max_delta <= 0.5:
        raise ValueError(f"random_hue: max_delta must be in [0, 0.5], got {max_delta}")
    return adjust_hue(image, random_ops.random_uniform([], -max_delta, max_delta, seed=seed))


def adjust_saturation(image, saturation_factor, name=None) -> Tensor:
    """The saturation times `saturation_factor`, clipped to [0, 1], as TF's AdjustSaturation."""
    factor = convert_to_tensor(saturation_factor, dtype=_dt.float32)
    return _in_hsv(image, "adjust_saturation",
                   lambda h, s, v: (h, math_ops.minimum(math_ops.maximum(s * factor, 0.0), 1.0), v))


def random_saturation(image, lower, upper, seed=None) -> Tensor:
    """adjust_saturation by a factor drawn from [lower, upper)."""
    if not 0 <= lower < upper:
        raise ValueError(f"random_saturation: need 0 <= lower < upper, got {lower}, {upper}")
    return adjust_saturation(image, random_ops.random_uniform([], lower, upper, seed=seed))


def random_contrast(image, lower, upper, seed=None) -> Tensor:
    """adjust_contrast by a factor drawn from [lower, upper)."""
    if not 0 <= lower < upper:
        raise ValueError(f"random_contrast: need 0 <= lower < upper, got {lower}, {upper}")
    return adjust_contrast(image, random_ops.random_uniform([], lower, upper, seed=seed))


def random_crop(value, size, seed=None, name=None) -> Tensor:
    """A slice of shape `size` at a uniformly random offset (every dimension of `value` known)."""
    with name_scope(name, "random_crop"):
        value = convert_to_tensor(value)
        shape = value.shape.as_list()
        size = [int(s) for s in size]
        if None in shape or len(size) != len(shape) or any(s > d for s, d in zip(size, shape)):
            raise ValueError(f"random_crop: size {size} must fit in the known shape of '{value.name}' "
                             f"({value.shape})")
        limit = [float(d - s + 1) for d, s in zip(shape, size)]
        offset = math_ops.cast(math_ops.floor(math_ops.multiply(random_ops.random_uniform([len(shape)], seed=seed),
                                                                limit)), _dt.int32)
        out = array_ops.slice(value, offset, size)
        out.set_shape(size)
        return out


class ResizeMethod:
    """TF1's tf.image.ResizeMethod (tfplus resizes by BILINEAR and NEAREST_NEIGHBOR)."""
    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


_METHODS = {ResizeMethod.BILINEAR: "bilinear", ResizeMethod.NEAREST_NEIGHBOR: "nearest", "bilinear": "bilinear",
            "nearest": "nearest"}


def _source(out_size: int, in_size: int, align_corners: bool, half_pixel: bool = False,
            offset: float = 0.5) -> np.ndarray:
    """Where each output row samples the input, in float32 as TensorFlow's kernels compute it, so that floor and
    round fall on the same rows: TF1's legacy sampling, or with half-pixel centers (out + 0.5) * scale - offset
    (bilinear's offset 0.5, nearest's 0)."""
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    rows = np.arange(out_size, dtype=np.float32)
    if half_pixel:
        return (rows + np.float32(0.5)) * np.float32(scale) - np.float32(offset)
    return rows * np.float32(scale)


def _bilinear_matrix(out_size: int, in_size: int, align_corners: bool, half_pixel: bool = False) -> np.ndarray:
    """The (out, in) matrix of one axis's linear interpolation weights (a sample before the first row, with
    half-pixel centers, takes it whole: TF clamps the lower row, not the weight)."""
    src = _source(out_size, in_size, align_corners, half_pixel)
    lower = np.floor(src)
    lerp = src - lower
    lower = np.maximum(lower.astype(np.int64), 0)
    upper = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    m = np.zeros((out_size, in_size), np.float32)
    rows = np.arange(out_size)
    np.add.at(m, (rows, lower), 1 - lerp)
    np.add.at(m, (rows, upper), lerp)
    return m


def _nearest_index(out_size: int, in_size: int, align_corners: bool, half_pixel: bool = False) -> np.ndarray:
    src = _source(out_size, in_size, align_corners, half_pixel, offset=0.0)
    # NOTE: C's round (half away from zero), not NumPy's (half to even); the sources are non-negative.
    index = np.floor(src + np.float32(0.5)) if align_corners else np.floor(src)
    return np.clip(index.astype(np.int32), 0, in_size - 1)


def _static_values(t: Tensor) -> list | None:
    """The values of int vector `t` that are known when the graph is built (None for the others), following
    Shape, StridedSlice, Mul and Pack as TF1's constant_value_as_shape does: U-Net's
    `tf.image.resize_images(up, tf.shape(skip)[1:3])` has a static size even when the batch dimension is not."""
    value = constant_value(t)
    if value is not None:
        return [int(v) for v in np.reshape(value, -1)]
    op = t.op
    if op.type == "Shape" and op.inputs[0].shape.ndims is not None:
        return op.inputs[0].shape.as_list()
    if op.type == "Pack":
        values = [_static_values(i) for i in op.inputs]
        return [v[0] if v is not None and len(v) == 1 else None for v in values]
    if op.type == "Mul":
        dims, factor = _static_values(op.inputs[0]), constant_value(op.inputs[1])
        if dims is None or factor is None or np.ndim(factor) != 0:
            return None
        return [None if d is None else d * int(factor) for d in dims]
    if op.type == "StridedSlice" and not op.get_attr("ellipsis_mask") and not op.get_attr("new_axis_mask"):
        dims = _static_values(op.inputs[0])
        begin, end, strides = (constant_value(i) for i in op.inputs[1:])
        if dims is None or begin is None or end is None or strides is None or len(begin) != 1:
            return None
        if op.get_attr("shrink_axis_mask"):  # x[i]: one value
            return [dims[int(begin[0])]] if -len(dims) <= int(begin[0]) < len(dims) else None
        start = None if op.get_attr("begin_mask") & 1 else int(begin[0])
        stop = None if op.get_attr("end_mask") & 1 else int(end[0])
        return dims[start:stop:int(strides[0])]
    return None


def _resize(images, size, method, align_corners: bool, what: str, name, half_pixel: bool = False) -> Tensor:
    kind = _METHODS.get(method)
    if align_corners and half_pixel:
        raise ValueError(f"tf.image.{what}: align_corners and half_pixel_centers cannot both be True")
    if kind is None:
        raise NotImplementedError(f"tf.image.{what}: method {method!r} is not implemented by tfplus; use "
                                  "ResizeMethod.BILINEAR or ResizeMethod.NEAREST_NEIGHBOR")
    with name_scope(name, what):
        images = _image(images, what)
        size = _static_values(convert_to_tensor(size))
        if size is None or len(size) != 2 or None in size:
            raise ValueError(f"tf.image.{what}: size must be [new_height, new_width] known when the graph is "
                             f"built, got {size}")
        x = images if images.shape.ndims == 4 else array_ops.expand_dims(images, 0)
        in_h, in_w = _hw(x, what)
        out_h, out_w = (int(v) for v in size)
        if kind == "nearest":
            y = array_ops.gather(x, _nearest_index(out_h, in_h, align_corners, half_pixel), axis=1)
            y = array_ops.gather(y, _nearest_index(out_w, in_w, align_corners, half_pixel), axis=2)
        else:
            # Separable: one matrix of interpolation weights per axis (a matmul each, whose gradient is
            # ResizeBilinearGrad's), in float32 as TF's ResizeBilinear outputs whatever the input's dtype.
            y = x if x.dtype is _dt.float32 else math_ops.cast(x, _dt.float32)
            y = composite_ops.einsum("yh,nhwc->nywc", _bilinear_matrix(out_h, in_h, align_corners, half_pixel), y)
            y = composite_ops.einsum("xw,nywc->nyxc", _bilinear_matrix(out_w, in_w, align_corners, half_pixel), y)
        return y if images.shape.ndims == 4 else array_ops.squeeze(y, [0])


def resize_images(images, size, method=ResizeMethod.BILINEAR, align_corners=False, preserve_aspect_ratio=False,
                  name=None) -> Tensor:
    """Images resized to `size` = [new_height, new_width] as TF1 resizes them (corner-aligned sampling without
    half-pixel centers); bilinear gives float32.

        up = tf.image.resize_images(features, [2 * h, 2 * w])
    """
    if preserve_aspect_ratio:
        raise NotImplementedError("tf.image.resize_images: preserve_aspect_ratio=True is not implemented by tfplus; "
                                  "compute the size that keeps the aspect ratio and pass it")
    return _resize(images, size, method, align_corners, "resize_images", name)


resize = resize_images


def resize_bilinear(images, size, align_corners=False, name=None, half_pixel_centers=False) -> Tensor:
    """tf.image.resize_images with method BILINEAR: [batch, height, width, channels] -> float32;
    `half_pixel_centers` samples at (out + 0.5) * scale - 0.5 (TF2's tf.image.resize)."""
    return _resize(images, size, ResizeMethod.BILINEAR, align_corners, "resize_bilinear", name, half_pixel_centers)


def resize_nearest_neighbor(images, size, align_corners=False, name=None, half_pixel_centers=False) -> Tensor:
    """tf.image.resize_images with method NEAREST_NEIGHBOR (the input's dtype kept); `half_pixel_centers`
    takes row floor((out + 0.5) * scale)."""
    return _resize(images, size, ResizeMethod.NEAREST_NEIGHBOR, align_corners, "resize_nearest_neighbor", name,
                   half_pixel_centers)


def total_variation(images, name=None) -> Tensor:
    """The sum of absolute differences between neighboring pixels, down and across: a scalar for one image,
    [batch] for a batch (style transfer's smoothness loss).

        tv_loss = tf.reduce_sum(tf.image.total_variation(generated))
    """
    with name_scope(name, "total_variation"):
        images = _image(images, "total_variation")
        axes = [-3, -2, -1] if images.shape.ndims == 4 else None
        down = images[..., 1:, :, :] - images[..., :-1, :, :]
        across = images[..., :, 1:, :] - images[..., :, :-1, :]
        return math_ops.add(math_ops.reduce_sum(math_ops.abs(down), axes),
                            math_ops.reduce_sum(math_ops.abs(across), axes))


def image_gradients(image) -> tuple[Tensor, Tensor]:
    """(dy, dx) of a [batch, height, width, channels] batch: the forward differences down and across, each the
    image's shape with zeros in the last row (dy) or column (dx)."""
    image = _image(image, "image_gradients")
    if image.shape.ndims != 4:
        raise ValueError(f"tf.image.image_gradients: '{image.name}' must be [batch, height, width, channels], got "
                         f"shape {image.shape}")
    with name_scope(None, "image_gradients"):
        dy = image[:, 1:, :, :] - image[:, :-1, :, :]
        dx = image[:, :, 1:, :] - image[:, :, :-1, :]
        return (array_ops.pad(dy, [[0, 0], [0, 1], [0, 0], [0, 0]]),
                array_ops.pad(dx, [[0, 0], [0, 0], [0, 1], [0, 0]]))


def psnr(a, b, max_val, name=None) -> Tensor:
    """The peak signal-to-noise ratio between images `a` and `b` (values up to `max_val`), per image, in dB:
    20 log10(max_val) - 10 log10(mean squared error), in float32 as TF1 (SRGAN's metric)."""
    with name_scope(name, "PSNR"):
        a, b = _image(a, "psnr"), _image(b, "psnr")
        max_val = math_ops.cast(convert_to_tensor(max_val), a.dtype)
        a, b = convert_image_dtype(a, _dt.float32), convert_image_dtype(b, _dt.float32)
        max_val = convert_image_dtype(max_val, _dt.float32)
        mse = math_ops.reduce_mean(math_ops.squared_difference(a, b), [-3, -2, -1])
        return math_ops.subtract(20 * math_ops.log(max_val) / math_ops.log(10.0),
                                 np.float32(10 / np.log(10)) * math_ops.log(mse), name="psnr")


def _gaussian_window(size: int, sigma: float) -> np.ndarray:
    """TF's _fspecial_gauss: a size x size Gaussian of width sigma, normalized to sum 1, as [size, size, 1, 1]."""
    coords = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = -0.5 * np.square(coords) / sigma ** 2
    g = np.exp(g[None, :] + g[:, None])
    return (g / g.sum()).astype(np.float32).reshape(size, size, 1, 1)


def ssim(img1, img2, max_val, filter_size=11, filter_sigma=1.5, k1=0.01, k2=0.03, return_index_map=False,
         name=None) -> Tensor:
    """The structural similarity of images img1 and img2 ([..., height, width, channels], values up to max_val)
    per image, averaged over channels: local means, variances and covariance under a Gaussian window (VALID, so
    each side must be at least filter_size), TF's formula with constants (k1 max_val)^2 and (k2 max_val)^2
    (tf.image.ssim; return_index_map: the map before the spatial mean)."""
    from tfplus.ops.nn_ops import depthwise_conv2d_native
    with name_scope(name, "SSIM"):
        img1, img2 = _image(img1, "ssim"), _image(img2, "ssim")
        for img in (img1, img2):
            hw = img.shape.as_list()[-3:-1] if img.shape.ndims is not None else [None, None]
            if any(d is not None and d < filter_size for d in hw):
                raise ValueError(f"tf.image.ssim: images of {hw[0]}x{hw[1]} pixels are smaller than the "
                                 f"{filter_size}x{filter_size} filter; give a smaller filter_size or larger images")
        max_val = convert_image_dtype(math_ops.cast(convert_to_tensor(max_val), img1.dtype), _dt.float32)
        img1, img2 = convert_image_dtype(img1, _dt.float32), convert_image_dtype(img2, _dt.float32)
        kernel = array_ops.tile(array_ops.constant(_gaussian_window(int(filter_size), float(filter_sigma))),
                                array_ops.stack([1, 1, array_ops.shape(img1)[-1], 1]))

        def reducer(x):
            shape = array_ops.shape(x)
            flat = array_ops.reshape(x, array_ops.concat([[-1], shape[-3:]], 0))
            y = depthwise_conv2d_native(flat, kernel, [1, 1, 1, 1], "VALID")
            return array_ops.reshape(y, array_ops.concat([shape[:-3], array_ops.shape(y)[1:]], 0))
        c1, c2 = (k1 * max_val) ** 2, (k2 * max_val) ** 2
        mean0, mean1 = reducer(img1), reducer(img2)
        num0 = mean0 * mean1 * 2.0
        den0 = math_ops.square(mean0) + math_ops.square(mean1)
        luminance = (num0 + c1) / (den0 + c1)
        num1 = reducer(img1 * img2) * 2.0
        den1 = reducer(math_ops.square(img1) + math_ops.square(img2))
        cs = (num1 - num0 + c2) / (den1 - den0 + c2)
        per_channel = luminance * cs if return_index_map else math_ops.reduce_mean(luminance * cs, [-3, -2])
        return math_ops.reduce_mean(per_channel, [-1])


def transpose_image(image, name=None) -> Tensor:
    """The image with its height and width swapped (tf.image.transpose)."""
    with name_scope(name, "transpose"):
        image = _image(image, "transpose")
        return array_ops.transpose(image, [0, 2, 1, 3] if image.shape.ndims == 4 else [1, 0, 2])


transpose = transpose_image


def rot90(image, k=1, name=None) -> Tensor:
    """The image rotated counter-clockwise by k quarter turns (k a Python int, or a tensor: then a tf.case over
    the four turns, with TF's unknown height and width)."""
    with name_scope(name, "rot90"):
        image = _image(image, "rot90")
        turns = constant_value(k) if isinstance(k, Tensor) else k
        if turns is not None:
            return _quarter_turns(image, int(turns) % 4)
        from tfplus.ops.control_flow_ops import case
        k = math_ops.floormod(convert_to_tensor(k, dtype=_dt.int32), 4)
        out = case([(math_ops.equal(k, n), lambda n=n: _quarter_turns(image, n)) for n in range(1, 4)],
                   default=lambda: image, exclusive=True)
        out.set_shape(image.shape.as_list()[:-3] + [None, None] + image.shape.as_list()[-1:])
        return out


def _quarter_turns(image, turns: int) -> Tensor:
    h, w = image.shape.ndims - 3, image.shape.ndims - 2  # the height and width axes
    if turns == 1:
        return transpose_image(composite_ops.reverse(image, [w]))
    if turns == 2:
        return composite_ops.reverse(image, [h, w])
    if turns == 3:
        return composite_ops.reverse(transpose_image(image), [w])
    return image


resize_with_crop_or_pad = resize_image_with_crop_or_pad


def extract_image_patches(images, ksizes=None, strides=None, rates=None, padding=None, name=None,
                          sizes=None) -> Tensor:
    """Each ksizes window's pixels laid out along the depth (row, then column, then channel), as TF1's
    ExtractImagePatches: a convolution with a one-hot filter (each output channel copies one input pixel of the
    window, exactly), so its gradient is the convolution's. `sizes` is TF2's tf.image.extract_patches' name."""
    ksizes = sizes if ksizes is None else ksizes
    with name_scope(name, "ExtractImagePatches"):
        images = convert_to_tensor(images)
        if images.shape.ndims != 4 or images.shape.as_list()[-1] is None:
            raise ValueError(f"tf.extract_image_patches: '{images.name}' must be [batch, height, width, depth] with "
                             f"a known depth, got shape {images.shape}")
        if not images.dtype.is_floating:
            raise TypeError(f"tf.extract_image_patches: '{images.name}' is {images.dtype.name}; tfplus extracts "
                            "patches of float images (cast them first)")
        from tfplus.ops import nn_ops
        kh, kw, c = int(ksizes[1]), int(ksizes[2]), images.shape.as_list()[-1]
        one_hot = np.eye(kh * kw * c, dtype=images.dtype.np).reshape(kh, kw, c, kh * kw * c)
        return nn_ops.conv2d(images, array_ops.constant(one_hot), list(strides), padding,
                             dilations=list(rates))


extract_patches = extract_image_patches


def sobel_edges(image) -> Tensor:
    """The Sobel filters' responses, [batch, height, width, channels, 2] (dy, then dx), on the image padded by
    reflection, as TF's."""
    from tfplus.ops import nn_ops
    with name_scope(None, "sobel_edges"):
        image = _image(image, "sobel_edges")
        c = image.shape.as_list()[-1]
        kernels = np.array([[[-1, -2, -1], [0, 0, 0], [1, 2, 1]], [[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]]])
        kernels = np.tile(np.transpose(kernels, (1, 2, 0))[:, :, None, :], [1, 1, c, 1]).astype(image.dtype.np)
        padded = array_ops.pad(image, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")
        out = nn_ops.depthwise_conv2d(padded, array_ops.constant(kernels), [1, 1, 1, 1], "VALID")
        return array_ops.reshape(out, array_ops.concat([array_ops.shape(image), [2]], 0))


def adjust_gamma(image, gamma=1, gain=1) -> Tensor:
    """gain * image ** gamma for float images; integer images are scaled to [0, 1] by their range first."""
    with name_scope(None, "adjust_gamma"):
        image = convert_to_tensor(image)
        if image.dtype.is_floating:
            return math_ops.multiply(gain, math_ops.pow(image, math_ops.cast(gamma, image.dtype)))
        scale = _max(image.dtype) - (0.0 if image.dtype.name.startswith("uint") else -_max(image.dtype) - 1)
        x = math_ops.cast(image, _dt.float32) / scale
        return math_ops.cast(math_ops.pow(x, math_ops.cast(gamma, _dt.float32)) * scale * gain, image.dtype)


def _color_matrix(kernel):
    """A linear color-space conversion: each pixel's 3 channels times `kernel`, as TF's (a tensordot)."""
    def convert(images, name=None):
        images = convert_to_tensor(images)
        if images.shape.as_list()[-1] != 3:
            raise ValueError(f"tf.image color conversion: '{images.name}' must have 3 channels, got shape "
                             f"{images.shape}")
        flat = array_ops.reshape(images, [-1, 3])
        out = math_ops.matmul(flat, array_ops.constant(np.asarray(kernel, images.dtype.np)))
        return array_ops.reshape(out, array_ops.shape(images), name=name)
    return convert


# TF's kernels (image_ops_impl.py), to the digits it writes them with.
rgb_to_yiq = _color_matrix([[0.299, 0.59590059, 0.2115], [0.587, -0.27455667, -0.52273617],
                            [0.114, -0.32134392, 0.31119955]])
yiq_to_rgb = _color_matrix([[1, 1, 1], [0.95598634, -0.27201283, -1.10674021], [0.6208248, -0.64720424, 1.70423049]])
rgb_to_yuv = _color_matrix([[0.299, -0.14714119, 0.61497538], [0.587, -0.28886916, -0.51496512],
                            [0.114, 0.43601035, -0.10001026]])
yuv_to_rgb = _color_matrix([[1, 1, 1], [0, -0.394642334, 2.03206185], [1.13988303, -0.58062185, 0]])


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.image")


def non_max_suppression_padded(boxes, scores, max_output_size, iou_threshold=0.5, score_threshold=float("-inf"),
                               pad_to_max_output_size=False, name=None, sorted_input=False,
                               canonicalized_coordinates=False, tile_size=512):
    """(selected indices, how many are valid): non_max_suppression's indices, padded with zeros to
    `max_output_size` when `pad_to_max_output_size` (a static shape for the boxes gathered after it). One image's
    boxes [num_boxes, 4]; the sorted_input, canonicalized_coordinates and tile_size hints change nothing here."""
    with name_scope(name, "non_max_suppression_padded"):
        boxes = convert_to_tensor(boxes)
        if boxes.shape.ndims not in (None, 2):
            raise ValueError(f"tf.image.non_max_suppression_padded: boxes must be [num_boxes, 4], got shape "
                             f"{boxes.shape}; tfplus does not batch it")
        keep = non_max_suppression(boxes, scores, max_output_size, iou_threshold, score_threshold)
        valid = array_ops.size(keep, out_type=_dt.int32)
        if pad_to_max_output_size:
            keep = array_ops.pad(keep, array_ops.reshape(array_ops.stack([0, max_output_size - valid]), [1, 2]))
            known = constant_value(convert_to_tensor(max_output_size))
            keep.set_shape([None if known is None else int(known)])
        return keep, valid
