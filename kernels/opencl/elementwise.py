"""OpenCL kernels for elementwise ops (math_ops arithmetic, comparisons, casts, select; nn activations and
their gradients). Source: elementwise.cl, built once per dtype."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import (
    HOST_MAX_ELEMENTS,
    SUFFIX,
    broadcast_strides,
    geometry,
    kernel,
    plan,
    register,
)

SRC = "elementwise.cl"
F = ("float32", "float64")
NUM = F + ("int32", "int64")
B = ("bool",)

BINARY = {
    "Add": ("add", NUM), "AddV2": ("add", NUM), "Sub": ("sub", NUM), "Mul": ("mul", NUM),
    "RealDiv": ("real_div", F), "FloorDiv": ("floor_div", NUM), "FloorMod": ("floor_mod", NUM),
    "Pow": ("pow", NUM), "Maximum": ("maximum", NUM), "Minimum": ("minimum", NUM),
    "SquaredDifference": ("squared_difference", NUM),
    "Equal": ("equal", NUM + B), "NotEqual": ("not_equal", NUM + B), "Less": ("less", NUM),
    "LessEqual": ("less_equal", NUM), "Greater": ("greater", NUM), "GreaterEqual": ("greater_equal", NUM),
    "LogicalAnd": ("logical_and", B), "LogicalOr": ("logical_or", B),
    "ReluGrad": ("relu_grad", F), "Relu6Grad": ("relu6_grad", F), "SigmoidGrad": ("sigmoid_grad", F),
    "TanhGrad": ("tanh_grad", F), "RsqrtGrad": ("rsqrt_grad", F), "SqrtGrad": ("sqrt_grad", F),
    "ReciprocalGrad": ("reciprocal_grad", F), "DivNoNan": ("div_no_nan", F),
    "EluGrad": ("elu_grad", F), "SoftplusGrad": ("softplus_grad", F),
}
UNARY = {
    "Neg": ("neg", NUM), "Abs": ("abs", NUM), "Sign": ("sign", NUM), "Square": ("square", NUM),
    "Exp": ("exp", F), "Log": ("log", F), "Log1p": ("log1p", F), "Sqrt": ("sqrt", F), "Rsqrt": ("rsqrt", F),
    "Reciprocal": ("reciprocal", F), "Sin": ("sin", F), "Cos": ("cos", F), "Erf": ("erf", F), "Floor": ("floor", F),
    "Ceil": ("ceil", F), "Round": ("round", NUM), "LogicalNot": ("logical_not", B),
    "Relu": ("relu", F), "Relu6": ("relu6", F), "Sigmoid": ("sigmoid", F), "Tanh": ("tanh", F),
    "Elu": ("elu", F), "Softplus": ("softplus", F),
}
# One work-item per element reads element i of every input, then writes element i: the output may be written
# over an input (KernelFacts.inplace), declared for these (and tested with aliased buffers).
_INPLACE = {**dict.fromkeys(("Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference",
                             "ReluGrad", "TanhGrad"), (0, 1)),
            **dict.fromkeys(("Neg", "Abs", "Sign", "Square", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Relu",
                             "Relu6", "Tanh", "Sigmoid"), (0,))}


def binary(rt, name: str, out, x, y) -> None:
    """out = name(x, y) with NumPy broadcasting (the kernel is chosen by x's dtype)."""
    k, g, loc, scalars = plan(rt, (name, x.shape, y.shape, out.shape, x.dtype),
                              lambda: _binary_plan(rt, name, out, x, y))
    rt.run(k, g, loc, out, x, y, *scalars)


def _binary_plan(rt, name: str, out, x, y):
    g, loc = rt.grid1d(out.size)
    if x.shape == y.shape == out.shape:
        return kernel(rt, SRC, name, x.dtype), g, loc, (np.int32(out.size),)
    geo = geometry(out.shape, broadcast_strides(x.shape, out.shape), broadcast_strides(y.shape, out.shape))
    return kernel(rt, SRC, name + "_bc", x.dtype, want=name), g, loc, (np.int32(out.size), *geo)


def unary(rt, name: str, out, x) -> None:
    k, g, loc, n = plan(rt, (name, x.shape, out.dtype, x.dtype),
                        lambda: (kernel(rt, SRC, name, x.dtype), *rt.grid1d(out.size), np.int32(out.size)))
    rt.run(k, g, loc, out, x, n)


def fill(rt, out, value) -> None:
    """out[...] = value, a Python number."""
    dt = np.dtype(np.uint8) if out.dtype == np.bool_ else out.dtype
    rt.run1d(kernel(rt, SRC, "fill_const", out.dtype), out.size, out, dt.type(value), np.int32(out.size))


def scale(rt, out, factor: float) -> None:
    """out *= factor, a Python number (micro-batching's mean of accumulated gradients)."""
    rt.run1d(kernel(rt, SRC, "scale_const", out.dtype), out.size, out, out.dtype.type(factor), np.int32(out.size))


def _register_binary(op_type: str, name: str, dtypes) -> None:
    @register(op_type, dtypes, inplace=_INPLACE.get(op_type, ()))
    def launch(ctx, ins, outs, attrs):
        binary(ctx.runtime, name, outs[0], ins[0], ins[1])


def _register_unary(op_type: str, name: str, dtypes) -> None:
    @register(op_type, dtypes, inplace=_INPLACE.get(op_type, ()))
    def launch(ctx, ins, outs, attrs):
        unary(ctx.runtime, name, outs[0], ins[0])


for _t, (_name, _dtypes) in BINARY.items():
    _register_binary(_t, _name, _dtypes)
for _t, (_name, _dtypes) in UNARY.items():
    _register_unary(_t, _name, _dtypes)


@register("Cast", (None,))
def _cast(ctx, ins, outs, attrs):
    x, out = ins[0], outs[0]
    if x.dtype.name not in SUFFIX or out.dtype.name not in SUFFIX:
        raise TypeError(f"Cast from {x.dtype} to {out.dtype}: no OpenCL kernel for these dtypes")
    unary(ctx.runtime, f"cast_{SUFFIX[out.dtype.name]}", out, x)


def _select(ctx, ins, outs, attrs):
    cond, t, e = ins
    out = outs[0]
    c_shape = cond.shape
    if ctx.op.type == "Select" and len(c_shape) == 1 and out.ndim > 1:  # a vector condition picks whole rows
        c_shape = c_shape + (1,) * (out.ndim - 1)
    g = geometry(out.shape, broadcast_strides(c_shape, out.shape), broadcast_strides(t.shape, out.shape),
                 broadcast_strides(e.shape, out.shape))
    rt = ctx.runtime
    rt.run1d(kernel(rt, SRC, "select", t.dtype), out.size, out, cond, t, e, np.int32(out.size), *g)


register("Select", NUM + B)(_select)
register("SelectV2", NUM + B)(_select)


@register("AddN", NUM, inplace=(0,))  # later calls reread the running sum, not input 0
def _add_n(ctx, ins, outs, attrs):
    rt, out = ctx.runtime, outs[0]
    if len(ins) == 1:
        rt.copy(out, ins[0])
        return
    k = kernel(rt, SRC, "add4", out.dtype)
    rest, first = list(ins), True
    while rest:
        # The first call sums up to four inputs; later calls add up to three more to the running sum.
        take = rest[:4] if first else [out] + rest[:3]
        rest = rest[4:] if first else rest[3:]
        terms = len(take)
        take += [take[0]] * (4 - terms)
        rt.run1d(k, out.size, out, *take, np.int32(out.size), np.int32(terms))
        first = False


@register("Fill", NUM + B)
def _fill(ctx, ins, outs, attrs):
    rt, out = ctx.runtime, outs[0]
    value = ins[1]
    if value.host is not None:
        fill(rt, out, value.host.item())
    else:
        rt.run1d(kernel(rt, SRC, "fill", out.dtype), out.size, out, value, np.int32(out.size))


@register("ZerosLike", NUM + B)
def _zeros_like(ctx, ins, outs, attrs):
    _fill_like(ctx.runtime, outs[0], 0)


@register("OnesLike", NUM + B)
def _ones_like(ctx, ins, outs, attrs):
    _fill_like(ctx.runtime, outs[0], 1)


def _fill_like(rt, out, value) -> None:
    """A small result is a host value derived from the input's shape alone, as Shape's: the ops computing on it
    (a loss's gradient seed ones_like(loss) scaled by 1 / batch, broadcast) then run on the host too, and a
    device kernel reads the result from the runtime's cached copy, so a step launches nothing for them."""
    if out.size <= HOST_MAX_ELEMENTS:
        rt.set_host(out, np.full(out.shape, value, out.dtype))
    else:
        fill(rt, out, value)


@register("Range", NUM)
def _range(ctx, ins, outs, attrs):
    rt, out = ctx.runtime, outs[0]
    start, _, delta = ins
    rt.run1d(kernel(rt, SRC, "range", out.dtype), out.size, out, start, delta, np.int32(out.size))
