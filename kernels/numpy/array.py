"""NumPy kernels for array ops. Kernels write into the output buffers they are given."""
from __future__ import annotations

import numpy as np

from tfplus.registry import register_kernel

ANY = (None,)


@register_kernel("Const", "cpu")
def _const(ctx, ins, outs, attrs):
    np.copyto(outs[0], attrs["value"])


# Ops whose output aliases their input: the executor already made the view, nothing to compute.
for _t in ("Identity", "PlaceholderWithDefault", "NoOp"):
    register_kernel(_t, "cpu")(lambda ctx, ins, outs, attrs: None)


@register_kernel("Fill", "cpu")
def _fill(ctx, ins, outs, attrs):
    outs[0].fill(ins[1])


@register_kernel("ZerosLike", "cpu")
def _zeros_like(ctx, ins, outs, attrs):
    outs[0].fill(0)


@register_kernel("OnesLike", "cpu")
def _ones_like(ctx, ins, outs, attrs):
    outs[0].fill(1)
