"""NumPy kernels for variables and random ops."""
from __future__ import annotations

import numpy as np

from tfplus.registry import register_kernel


@register_kernel("Assign", "cpu")
def _assign(ctx, ins, outs, attrs):
    np.copyto(ins[0], ins[1])


@register_kernel("AssignAdd", "cpu")
def _assign_add(ctx, ins, outs, attrs):
    np.add(ins[0], ins[1], out=ins[0])


@register_kernel("AssignSub", "cpu")
def _assign_sub(ctx, ins, outs, attrs):
    np.subtract(ins[0], ins[1], out=ins[0])


@register_kernel("RandomStandardNormal", "cpu")
def _random_normal(ctx, ins, outs, attrs):
    outs[0][...] = ctx.rng().standard_normal(outs[0].shape)


@register_kernel("TruncatedNormal", "cpu")
def _truncated_normal(ctx, ins, outs, attrs):
    """Standard normal, redrawing values beyond two standard deviations (as TF does)."""
    rng, out = ctx.rng(), outs[0].reshape(-1)
    vals = rng.standard_normal(out.size)
    bad = np.abs(vals) > 2.0
    while bad.any():
        vals[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(vals) > 2.0
    out[...] = vals


@register_kernel("RandomUniform", "cpu")
def _random_uniform(ctx, ins, outs, attrs):
    outs[0][...] = ctx.rng().random(outs[0].shape)
