"""Op, gradient and kernel registries: plain dicts filled at import time.

    >>> from tfplus import registry
    >>> registry.kernels_for("Relu")  # doctest: +SKIP
    {('cpu', 'float32'): <function ...>, ...}
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from tfplus.dtypes import DType


class TensorSpec(NamedTuple):
    """What a shape function sees of a tensor: shape (tuple, None for unknown dims; None for unknown rank),
    dtype, and the constant value where the op asked for it (`value_inputs`) and it is known."""
    shape: tuple | None
    dtype: DType
    value: Any = None


NOT_DIFFERENTIABLE = "not differentiable"


@dataclass
class OpDef:
    """An op's signature. `inputs` names end in '*' for a variadic list (its length is attr 'N').
    `attrs` maps attr name -> TF attr type ('type', 'int', 'float', 'bool', 'string', 'shape', 'tensor',
    'list(int)', 'list(float)', 'list(type)'). `shape_fn(inputs: list[TensorSpec], attrs) -> list[TensorSpec]`
    is pure. `aliases` maps an output index to the input index whose buffer it shares (reshape-like ops, Assign).
    `ref_inputs` are inputs that must come straight from a VariableV2 and are updated in place.
    `allocates_outputs`: the kernel makes its own output buffers (their shapes are known only once it has run,
    e.g. a while loop's); the executor passes it a list of None to fill."""
    name: str
    inputs: tuple
    outputs: tuple
    attrs: dict
    shape_fn: Callable
    value_inputs: tuple = ()
    aliases: dict = field(default_factory=dict)
    ref_inputs: tuple = ()
    stateful: bool = False
    grad: Any = None  # a function (op, *output_grads) -> input grads, NOT_DIFFERENTIABLE, or None
    where: str = ""
    allocates_outputs: bool = False


OPS: dict[str, OpDef] = {}
KERNELS: dict[tuple[str, str, str | None], Callable] = {}
_KERNEL_WHERE: dict[tuple, str] = {}
# (op type, device) -> fn(input specs, attrs) -> [(shape, dtype), ...]: the scratch buffers that device's
# kernel asks for with ctx.workspace, in request order. The memory planner preallocates exactly these.
WORKSPACES: dict[tuple[str, str], Callable] = {}


def _caller(depth: int = 2) -> str:
    # NOTE: not inspect.stack(): it reads source lines for every frame, which made `import tfplus` take 10+ s.
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def register_op(name: str, *, inputs=(), outputs=("y",), attrs=None, shape_fn, value_inputs=(),
                aliases=None, ref_inputs=(), stateful=False, allocates_outputs=False) -> OpDef:
    """Declares op type `name`. Registering a name twice raises and names both places."""
    where = _caller()
    if name in OPS:
        raise ValueError(f"op type {name!r} registered twice: at {OPS[name].where} and at {where}")
    OPS[name] = op = OpDef(name, tuple(inputs), tuple(outputs), dict(attrs or {}), shape_fn,
                           tuple(value_inputs), dict(aliases or {}), tuple(ref_inputs), stateful, None, where,
                           allocates_outputs)
    return op


def register_gradient(op_type: str):
    """Decorator: `@register_gradient("Relu") def _relu_grad(op, grad): ...` returns one grad per input."""
    def deco(fn):
        _set_grad(op_type, fn)
        return fn
    return deco


def not_differentiable(*op_types: str) -> None:
    """Declares ops through which no gradient flows (tf.gradients treats their inputs as constants)."""
    for t in op_types:
        _set_grad(t, NOT_DIFFERENTIABLE)


def _set_grad(op_type, fn):
    if op_type not in OPS:
        raise ValueError(f"gradient for unregistered op type {op_type!r}")
    if OPS[op_type].grad is not None:
        raise ValueError(f"gradient for {op_type!r} registered twice")
    OPS[op_type].grad = fn


def register_kernel(op_type: str, device: str, dtypes=(None,)):
    """Decorator registering `fn(ctx, inputs, outputs, attrs)` for (op type, device, dtype).
    The kernel writes its results into `outputs` (buffers the runtime allocated) and returns nothing.
    dtype None matches any dtype."""
    def deco(fn):
        for dt in dtypes:
            key = (op_type, device, None if dt is None else _dtype_name(dt))
            if key in KERNELS:
                raise ValueError(f"kernel {key} registered twice: at {_KERNEL_WHERE[key]} and at {_caller()}")
            KERNELS[key] = fn
            _KERNEL_WHERE[key] = _caller()
        return fn
    return deco


def register_workspace(op_type: str, device: str):
    """Decorator declaring a kernel's scratch needs, `fn(ins: list[TensorSpec], attrs) -> [(shape, dtype)]`
    in the order the kernel calls `ctx.workspace(shape, dtype)`. Shapes are concrete (the planner passes the
    step's static shapes). `@register_workspace("Conv2D", "cpu") def _ws(ins, attrs): return [...]`. An
    opencl declaration takes a third argument, the device's compute units (its launch geometry, and so its
    partial results, depend on them)."""
    def deco(fn):
        key = (op_type, device)
        if key in WORKSPACES:
            raise ValueError(f"workspace of {key} declared twice: at {_KERNEL_WHERE[key]} and at {_caller()}")
        WORKSPACES[key] = fn
        _KERNEL_WHERE[key] = _caller()
        return fn
    return deco


def _dtype_name(dt) -> str:
    return dt if isinstance(dt, str) else dt.name


def find_kernel(op_type: str, device: str, dtype: DType | None):
    name = None if dtype is None else dtype.name
    return KERNELS.get((op_type, device, name)) or KERNELS.get((op_type, device, None))


def kernels_for(op_type: str) -> dict:
    """{(device, dtype name or None): kernel} for one op type."""
    return {(d, t): fn for (o, d, t), fn in KERNELS.items() if o == op_type}


def devices_with_kernel(op_type: str) -> list[str]:
    return sorted({d for (o, d, _t) in KERNELS if o == op_type})


def get_op_def(op_type: str) -> OpDef:
    try:
        return OPS[op_type]
    except KeyError:
        raise ValueError(f"unknown op type {op_type!r}; registered op types: {len(OPS)} "
                         f"(see tfplus.registry.OPS)") from None


def kernel_dtype(op):
    """The dtype an op's kernel is looked up by: attr T when the op has one, else its first output's (or
    input's) dtype."""
    t = op.attrs.get("T")
    if t is not None and hasattr(t, "np"):
        return t
    if op.outputs:
        return op.outputs[0].dtype
    return op.inputs[0].dtype if op.inputs else None
