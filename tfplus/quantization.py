"""tf.quantization's fake quantization (quantization-aware training, TF1's contrib.quantize rewrite by hand):
values clamped to a range, rounded onto 2^num_bits levels and mapped back, all in float, with TF's gradients
(straight through inside the range; below and above it the range's ends get the gradient). Written with
registered ops under tf.custom_gradient, so it runs on every device and its gradient is TF's rule, not the
rounding's zero.

    >>> import tfplus as tf
    >>> y = tf.quantization.fake_quant_with_min_max_args(tf.constant([0.26, -7.0]), min=-6.0, max=6.0)
"""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.gradients import custom_gradient
from tfplus.ops import array_ops, math_ops


def _nudged(low, high, num_bits: int, narrow_range: bool):
    """TF's nudging of [low, high] so that 0.0 is exactly one of the levels, in float32 as TF's kernels:
    (nudged low, nudged high, scale, inverse scale, the zero's level)."""
    if not 2 <= num_bits <= 16:
        raise ValueError(f"fake_quant: num_bits = {num_bits}; it must be between 2 and 16")
    quant_min, quant_max = (1.0 if narrow_range else 0.0), float(2 ** num_bits - 1)
    scale = (high - low) / (quant_max - quant_min)
    inv_scale = (quant_max - quant_min) / (high - low)  # not 1 / scale: TF's kernels keep this precision
    zero_point = quant_min - low / scale
    # std::round's halves away from zero (tf.round's go to even); the zero point is not negative
    nudged_zero = math_ops.floor(math_ops.minimum(math_ops.maximum(zero_point, quant_min), quant_max) + 0.5)
    n_low = (quant_min - nudged_zero) * scale
    return n_low, (quant_max - nudged_zero) * scale, scale, inv_scale, math_ops.floor(-n_low * inv_scale + 0.5)


def _quantize(x, low, high, num_bits, narrow_range, axes_of_range, divide):
    """y and the gradient function of TF's FakeQuantWithMinMaxArgs/Vars/VarsPerChannel: the range's gradients
    are the sums of dy below and above it, over `axes_of_range` (None: all of x's axes). `divide`: the level by
    dividing by the scale (the Vars kernel's), not multiplying by its inverse (the others')."""
    n_low, n_high, scale, inv_scale, zero = _nudged(low, high, num_bits, narrow_range)
    shifted = math_ops.minimum(math_ops.maximum(x, n_low), n_high) - n_low
    level = shifted / scale if divide else shifted * inv_scale
    y = math_ops.floor(level - zero + 0.5) * scale
    # TF's kernels: a [0, 0] range gives zeros, and passes the whole gradient to the inputs
    empty = math_ops.logical_and(math_ops.equal(low, 0.0), math_ops.equal(high, 0.0))
    y = math_ops.where_v2(empty, array_ops.zeros_like(y), y)
    below = math_ops.logical_and(math_ops.less(x, n_low), math_ops.logical_not(empty))
    above = math_ops.logical_and(math_ops.greater(x, n_high), math_ops.logical_not(empty))

    def grad(dy):
        zeros = array_ops.zeros_like(dy)
        inside = math_ops.where_v2(math_ops.logical_or(below, above), zeros, dy)
        return (inside, math_ops.reduce_sum(math_ops.where_v2(below, dy, zeros), axes_of_range),
                math_ops.reduce_sum(math_ops.where_v2(above, dy, zeros), axes_of_range))
    return y, grad


def _inputs(inputs, min, max, what):
    x = convert_to_tensor(inputs)
    if x.dtype is not _dt.float32:
        raise TypeError(f"tf.quantization.{what}: inputs are {x.dtype.name}; TF's fake quantization takes float32")
    return x, convert_to_tensor(min, dtype=_dt.float32), convert_to_tensor(max, dtype=_dt.float32)


def fake_quant_with_min_max_vars(inputs, min, max, num_bits=8, narrow_range=False, name=None) -> Tensor:
    """`inputs` fake-quantized onto [min, max] (scalar tensors, variables in quantization-aware training); min
    and max get gradients (TF's FakeQuantWithMinMaxVars)."""
    with name_scope(name, "FakeQuantWithMinMaxVars"):
        @custom_gradient
        def quant(x, low, high):
            return _quantize(x, low, high, num_bits, narrow_range, None, True)
        return quant(*_inputs(inputs, min, max, "fake_quant_with_min_max_vars"))


def fake_quant_with_min_max_vars_per_channel(inputs, min, max, num_bits=8, narrow_range=False,
                                             name=None) -> Tensor:
    """fake_quant_with_min_max_vars with a range per channel (the last axis; min and max of its length)."""
    with name_scope(name, "FakeQuantWithMinMaxVarsPerChannel"):
        x, low, high = _inputs(inputs, min, max, "fake_quant_with_min_max_vars_per_channel")
        axes = list(range((x.shape.ndims or 1) - 1))

        @custom_gradient
        def quant(x, low, high):
            return _quantize(x, low, high, num_bits, narrow_range, axes, False)
        return quant(x, low, high)


def fake_quant_with_min_max_args(inputs, min=-6.0, max=6.0, num_bits=8, narrow_range=False, name=None) -> Tensor:
    """`inputs` fake-quantized onto the fixed range [min, max] (TF's FakeQuantWithMinMaxArgs): the gradient
    passes inside the range."""
    if not min < max:
        raise ValueError(f"tf.quantization.fake_quant_with_min_max_args: min = {min} must be below max = {max}")
    with name_scope(name, "FakeQuantWithMinMaxArgs"):
        x, low, high = _inputs(inputs, min, max, "fake_quant_with_min_max_args")

        @custom_gradient
        def quant(x):
            y, grad = _quantize(x, low, high, num_bits, narrow_range, None, False)
            return y, lambda dy: grad(dy)[0]
        return quant(x)
