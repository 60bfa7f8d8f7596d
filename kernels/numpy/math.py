"""NumPy kernels for math ops."""
from __future__ import annotations

import numpy as np

from tfplus.registry import register_kernel


@register_kernel("Add", "cpu")
def _add(ctx, ins, outs, attrs):
    np.add(ins[0], ins[1], out=outs[0])


@register_kernel("Mul", "cpu")
def _mul(ctx, ins, outs, attrs):
    np.multiply(ins[0], ins[1], out=outs[0])


@register_kernel("AddN", "cpu")
def _add_n(ctx, ins, outs, attrs):
    np.copyto(outs[0], ins[0])
    for x in ins[1:]:
        np.add(outs[0], x, out=outs[0])
