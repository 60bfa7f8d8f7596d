"""OpenCL kernels for random ops (RandomUniform, RandomStandardNormal, TruncatedNormal; TF1 dropout is built
from RandomUniform): numbers are made on the device by a counter-based generator (Philox4x32-10) keyed by the
op's seeds and counted per run, so a seeded graph repeats exactly on the same device. They are not the numbers
the cpu device's NumPy generator draws. Source: random.cl."""
from __future__ import annotations

import os

import numpy as np
import pyopencl.cltypes as cltypes

from tfplus.kernels.opencl._common import kernel, register

SRC = "random.cl"
F = ("float32", "float64")


def _key(rt, node: str, attrs):
    """(Philox key, this run's counter) of a node: its seeds, or random ones fixed per runtime if unseeded."""
    seed, seed2 = attrs.get("seed", 0), attrs.get("seed2", 0)
    if not (seed or seed2):
        fresh = tuple(int.from_bytes(os.urandom(4), "little") for _ in range(2))
        seed, seed2 = rt.rng_keys.setdefault(node, fresh)
    run = rt.rng_counters.get(node, 0)
    rt.rng_counters[node] = run + 1
    key = cltypes.make_uint2(seed & 0xFFFFFFFF, seed2 & 0xFFFFFFFF)
    return key, np.uint32(run & 0xFFFFFFFF), np.uint32(run >> 32)


def _register(op_type: str, name: str) -> None:
    # NOTE: these ops' attr T is the dtype of their shape input, which is what kernels are keyed by.
    @register(op_type, ("int32", "int64"))
    def launch(ctx, ins, outs, attrs):
        rt, out = ctx.runtime, outs[0]
        if out.dtype.name not in F:
            raise TypeError(f"{op_type}: no OpenCL kernel for dtype {out.dtype}; use float32 or float64")
        key, lo, hi = _key(rt, ctx.op.name, attrs)
        k = kernel(rt, SRC, name, out.dtype, IS_DOUBLE=int(out.dtype == np.float64))
        rt.run1d(k, out.size, out, np.int32(out.size), key, lo, hi)


_register("RandomUniform", "random_uniform")
_register("RandomStandardNormal", "random_normal")
_register("TruncatedNormal", "truncated_normal")
