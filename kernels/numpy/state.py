"""NumPy kernels for variables (the random ops are in random.py)."""
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


@register_kernel("IsVariableInitialized", "cpu")
def is_variable_initialized(ctx, ins, outs, attrs):
    """Device-independent: the executor gives None for a variable that holds no value yet."""
    outs[:] = [ctx.runtime.copy_in(np.array(ins[0] is not None))]
