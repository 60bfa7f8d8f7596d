"""Shared by the OpenCL launchers: kernel lookup by dtype, registration with the host path, stride geometry.

The host path: an op whose inputs were all computed on the host from constants and shapes alone (not from fed
values) and whose outputs are small runs its NumPy kernel there, so shape arithmetic never round-trips through
the device.
"""
from __future__ import annotations

import functools

import numpy as np

from tfplus.dtypes import as_dtype
from tfplus.registry import find_kernel, register_kernel
from tfplus.runtime.opencl import int8

SUFFIX = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "b8", "uint8": "u8",
          "int8": "i8", "int16": "i16"}
CTYPE = {"float32": "float", "float64": "double", "int32": "int", "int64": "long", "bool": "uchar",
         "uint8": "uchar", "int8": "char", "int16": "short"}
# Largest total output size (elements) an all-host op computes on the host.
HOST_MAX_ELEMENTS = 4096


def dtype_name(dt) -> str:
    return np.dtype(getattr(dt, "np", dt)).name


def build_options(dt, **defines) -> str:
    """-D options of a program built for dtype `dt` (T, SFX, IS_FLOAT) plus `defines`."""
    name = dtype_name(dt)
    if name not in CTYPE:
        raise TypeError(f"no OpenCL kernels for dtype {name}")
    kind = np.dtype(name).kind
    opts = [f"-DT={CTYPE[name]}", f"-DSFX={SUFFIX[name]}", f"-DIS_FLOAT={int(kind == 'f')}",
            f"-DIS_SIGNED={int(kind in 'if')}"]
    opts += [f"-D{k}={v}" for k, v in sorted(defines.items())]
    return " ".join(opts)


_KERNELS: dict = {}


def kernel(rt, files, base: str, dt, want: str | None = None, **defines):
    """Kernel `base`_<suffix of dt> from `files` built for dtype `dt` with -D`defines`, compiling only the
    kernels under `#if WANT_<want>` (default: base); see common.cl."""
    key = (rt.dev, files, base, dt, want, tuple(sorted(defines.items())))
    k = _KERNELS.get(key)
    if k is None:
        name = dtype_name(dt)
        if name == "float64" and not rt.info["fp64"]:
            raise NotImplementedError(f"{rt.describe()} has no float64 support (cl_khr_fp64); use float32")
        opts = build_options(dt, **defines) + f" -DWANT_{want or base}=1"
        k = _KERNELS[key] = rt.kernel(files, f"{base}_{SUFFIX[name]}", opts)
    return k


def plan(rt, key, make):
    """`make()`'s result (a launch plan: kernel, sizes, scalar arguments), made once per runtime and key."""
    p = rt.plans.get(key)
    if p is None:
        p = rt.plans[key] = make()
    return p


def key_dtype(attrs, outs, ins):
    """The dtype a kernel is registered under: attr T, else the first output's, else the first input's."""
    t = attrs.get("T")
    if t is not None and hasattr(t, "np"):
        return t
    return as_dtype((outs[0] if outs else ins[0]).dtype)


def register(op_type: str, dtypes, host: bool = True, **facts):
    """Decorator: registers an opencl kernel for `dtypes`. With `host`, a call whose inputs were all computed
    from constants and shapes alone and whose outputs are small runs the op's cpu kernel on the host. `facts`:
    register_kernel's (inplace=, chunk=)."""
    def deco(fn):
        if host:
            inner = fn

            def fn(ctx, ins, outs, attrs):
                if ins and ins[0].block.derived and _on_host(ctx, ins, outs):
                    cpu = find_kernel(op_type, "cpu", key_dtype(attrs, outs, ins))
                    if cpu is not None:
                        return run_on_host(ctx, cpu, ins, outs, attrs, upload=False)
                return inner(ctx, ins, outs, attrs)
            fn.__name__ = inner.__name__
        return register_kernel(op_type, "opencl", dtypes, **facts)(fn)
    return deco


def _on_host(ctx, ins, outs) -> bool:
    if ctx.op.op_def.stateful:
        return False
    for a in ins:
        if not a.block.derived:
            return False
    return sum(o.size for o in outs) <= HOST_MAX_ELEMENTS


class _HostContext:
    """What a cpu kernel sees when the opencl device runs it on the host."""

    def __init__(self, ctx):
        self.op, self.runtime, self._ctx = ctx.op, None, ctx

    @property
    def node_name(self) -> str:
        return self.op.name

    def random_stream(self, size: int):
        return self._ctx.random_stream(size)

    def workspace(self, shape, dtype):
        return np.empty(shape, np.dtype(getattr(dtype, "np", dtype)))


def run_on_host(ctx, cpu_kernel, ins, outs, attrs, upload: bool) -> None:
    """Runs `cpu_kernel` on host copies of `ins`; outputs get host copies (and device copies now if `upload`);
    variables the kernel updated in place are written back to the device. Outputs count as `derived` (see
    tfplus.runtime.opencl.memory.Block) when every input was."""
    rt, op_def = ctx.runtime, ctx.op.op_def
    h_ins = [rt.copy_out(a) for a in ins]
    h_outs = []
    for k, o in enumerate(outs):
        src = op_def.aliases.get(k)
        h_outs.append(h_ins[src].reshape(o.shape) if src is not None else np.empty(o.shape, o.dtype))
    cpu_kernel(_HostContext(ctx), h_ins, h_outs, attrs)
    for k, (o, h) in enumerate(zip(outs, h_outs)):
        if k in op_def.aliases:
            continue
        rt.set_host(o, h, derived=all(a.block.derived for a in ins))
        if upload:
            rt.buffer(o)
    for k in op_def.ref_inputs:
        rt.upload_into(ins[k], h_ins[k])


# -- stride geometry -----------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def contiguous_strides(shape: tuple) -> tuple:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(st[::-1])


@functools.lru_cache(maxsize=4096)
def broadcast_strides(in_shape: tuple, out_shape: tuple) -> tuple:
    """Strides (elements) reading an array of `in_shape` broadcast to `out_shape` (0 on broadcast dims)."""
    st = contiguous_strides(in_shape)
    pad = len(out_shape) - len(in_shape)
    return (0,) * pad + tuple(0 if d == 1 and o != 1 else s for d, o, s in zip(in_shape, out_shape[pad:], st))


def merge(shape, *strides):
    """Drops size-1 dims and merges neighbours that every operand walks contiguously.
    Returns (shape, strides...) innermost first, as the kernels' int8 vectors want them."""
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(shape) if d != 1]
    out: list = []
    for d, st in reversed(dims):  # innermost first
        if out:
            pd, pst = out[-1]
            if all(s == ps * pd for s, ps in zip(st, pst)):
                out[-1] = (pd * d, pst)
                continue
        out.append((d, st))
    if not out:
        out = [(1, [0] * len(strides))]
    return [d for d, _ in out], *[[st[k] for _, st in out] for k in range(len(strides))]


def geometry(shape, *strides):
    """(rank, int8 shape, int8 strides...) for strided_offset() in common.cl."""
    return _geometry(tuple(shape), *(tuple(s) for s in strides))


@functools.lru_cache(maxsize=4096)
def _geometry(shape, *strides):
    m = merge(shape, *strides)
    if len(m[0]) > 8:
        raise ValueError(f"shape {tuple(shape)} needs {len(m[0])} dims after merging; kernels take at most 8")
    return (np.int32(len(m[0])), int8(m[0])) + tuple(int8(s) for s in m[1:])


__all__ = ["register", "kernel", "plan", "build_options", "geometry", "merge", "broadcast_strides",
           "contiguous_strides",
           "run_on_host", "SUFFIX", "CTYPE", "key_dtype"]
