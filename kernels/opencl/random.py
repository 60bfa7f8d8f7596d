"""OpenCL kernels for random ops (RandomUniform, RandomStandardNormal, TruncatedNormal; TF1 dropout is built
from RandomUniform): numbers are made on the device by a counter-based generator (Philox4x32-10) keyed by the
op's seeds and counted per run (KernelContext.random_draw). The cpu device's kernels (kernels/numpy/random.py)
compute the same generator and transforms, so a seed gives the same numbers on both. Source: random.cl.

A replayed tape of a step sets each launch's run arguments anew (runtime.tape_vary): a replayed run draws the
numbers the same run would draw launched op by op."""
from __future__ import annotations

import numpy as np
import pyopencl.cltypes as cltypes

from tfplus.kernels.opencl._common import kernel, register

SRC = "random.cl"
F = ("float32", "float64")


def _run_words(run: int) -> tuple:
    """The run counter as the kernels' last two arguments (run_lo, run_hi)."""
    return np.uint32(run & 0xFFFFFFFF), np.uint32(run >> 32)


def _register(op_type: str, name: str) -> None:
    # NOTE: these ops' attr T is the dtype of their shape input, which is what kernels are keyed by.
    @register(op_type, ("int32", "int64"))
    def launch(ctx, ins, outs, attrs):
        rt, out = ctx.runtime, outs[0]
        if out.dtype.name not in F:
            raise TypeError(f"{op_type}: no OpenCL kernel for dtype {out.dtype}; use float32 or float64")
        if not out.size:  # no launch for a replay to draw with: the counter advances, the tape is refused
            ctx.random_stream(0)
            return
        d = ctx.random_draw(out.size)
        k = kernel(rt, SRC, name, out.dtype, IS_DOUBLE=int(out.dtype == np.float64))
        rt.run1d(k, out.size, out, np.int32(out.size), cltypes.make_uint2(*d.key), np.uint32(d.first),
                 *_run_words(d.run))
        again = d.again
        rt.tape_vary(2, lambda: _run_words(again()), ("draw", d.advances))


_register("RandomUniform", "random_uniform")
_register("RandomStandardNormal", "random_normal")
_register("TruncatedNormal", "truncated_normal")
