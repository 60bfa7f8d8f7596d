"""A ReLU's mask as bits, for the gradient: ops that only the planner's planning copies make
(tfplus.planner.compact.keeping), so that a ReLU output that a filter gradient reads can die at that filter gradient
instead of living on until the ReLU's own gradient (one bit per element saved instead of four bytes).

_ReluMaskBits(features) -> bits: per row of a batch-major tensor (N, ...), its elements' (features > 0) packed 8 to a
byte, the first element in bit 0: bits has shape (N, ceil(elements per row / 8)), uint8.
_ReluGradBits(gradients, bits) -> (backprops, bias_backprop): _FusedReluGradBiasAddGrad(gradients, features) from
the bits: gradients * mask, and its sum per channel of `data_format`.
Made after autodiff: declared not differentiable, as tfplus/ops/fused_ops.py's are.
"""
from __future__ import annotations

from tfplus import dtypes, flops
from tfplus.ops.row_rules import rowwise
from tfplus.registry import not_differentiable, register_op, register_rows
from tfplus.tensor_shape import check_rank, spec


def bits_per_row(shape) -> int | None:
    """Bytes of one row's bits for a tensor of `shape` (batch first)."""
    n = 1
    for d in shape[1:]:
        if d is None:
            return None
        n *= d
    return -(-n // 8)


def _bits_shape(ins, attrs):
    (f,) = ins
    if f.dtype not in (dtypes.float32, dtypes.float64):
        raise TypeError(f"features must be float32 or float64, got {f.dtype.name}")
    if f.shape is None or len(f.shape) < 2:
        raise ValueError(f"features must have a batch axis and more, got shape {f.shape}")
    return [spec((f.shape[0], bits_per_row(f.shape)), dtypes.uint8)]


register_op("_ReluMaskBits", inputs=("features",), outputs=("bits",), attrs={"T": "type"}, shape_fn=_bits_shape,
            flops=flops.zero)
register_rows(rowwise, "_ReluMaskBits")
not_differentiable("_ReluMaskBits")


def _grad_bits_shape(ins, attrs):
    g, b = ins
    check_rank(g, 4, "gradients")
    if b.dtype != dtypes.uint8 or b.shape is None or len(b.shape) != 2:
        raise TypeError(f"bits must be _ReluMaskBits' uint8 (N, bytes), got {b.dtype.name} {b.shape}")
    if g.shape is not None and None not in b.shape and b.shape[1] != bits_per_row(g.shape):
        raise ValueError(f"bits of {b.shape[1]} bytes a row do not match gradients of shape {g.shape}")
    c = None if g.shape is None else g.shape[1 if attrs["data_format"] == "NCHW" else 3]
    return [spec(g.shape, g.dtype), spec((c,), g.dtype)]


register_op("_ReluGradBits", inputs=("gradients", "bits"), outputs=("backprops", "bias_backprop"),
            attrs={"T": "type", "data_format": "string"}, shape_fn=_grad_bits_shape, flops=flops.per_input,
            tags=("row_sums",))
register_rows(rowwise, "_ReluGradBits")
not_differentiable("_ReluGradBits")
