"""Op, gradient and kernel registries: plain dicts filled at import time. Facts the planner and profiler
use are declared at registration too: an op's FLOP formula (register_op(flops=)), a kernel's in-place inputs
and chunk spec (register_kernel(inplace=, chunk=)), its variants (register_variant) and its scratch
(register_workspace).

    >>> from tfplus import registry
    >>> registry.kernels_for("Relu")  # doctest: +SKIP
    {('cpu', 'float32'): <function ...>, ...}
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from tfplus import threads as _threads
from tfplus.dtypes import DType


class TensorSpec(NamedTuple):
    """What a shape function sees of a tensor: shape (tuple, None for unknown dims; None for unknown rank),
    dtype, and the constant value where the op asked for it (`value_inputs`) and it is known; where it is not,
    `partial`: what is known of a shape vector's entries (None for the unknown ones: tf.stack([tf.shape(x)[0], 4]),
    TF's constant_value_as_shape)."""
    shape: tuple | None
    dtype: DType
    value: Any = None
    partial: tuple | None = None


NOT_DIFFERENTIABLE = "not differentiable"


@dataclass
class OpDef:
    """An op's signature. `inputs` names end in '*' for a variadic list (its length is attr 'N').
    `attrs` maps attr name -> TF attr type ('type', 'int', 'float', 'bool', 'string', 'shape', 'tensor',
    'list(int)', 'list(float)', 'list(type)'). `shape_fn(inputs: list[TensorSpec], attrs) -> list[TensorSpec]`
    is pure. `aliases` maps an output index to the input index whose buffer it shares (reshape-like ops, Assign).
    `ref_inputs` are inputs that must come straight from a VariableV2 and are updated in place.
    `allocates_outputs`: the kernel makes its own output buffers (their shapes are known only once it has run,
    e.g. a while loop's); the executor passes it a list of None to fill. `flops(in_shapes, out_shapes, attrs)`
    counts the op's arithmetic (tfplus.flops: its formulas, `flops.zero` for data movement). `tags`: facts of
    TAGS that the planner and the executor read (has_tag) instead of lists of op types."""
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
    flops: Callable | None = None
    tags: frozenset = frozenset()
    rows: Callable | None = None  # how it treats the rows of the batch (register_rows)


# The facts an op may declare with register_op(tags=...): tag -> what it says of the op.
TAGS = {
    "gemm": "a matrix product (a convolution or matmul): recomputing one costs a large part of a layer",
    "view": "its outputs are views of its inputs (reshape-like): the executor makes them without a kernel",
    "shape_only": "its value depends on its inputs' shapes only, never on their values",
    "row_sums": "an output without the batch axis is a sum over the rows of its batch-major inputs (a weight "
                "gradient): micro-batches' partial sums add up to the batch's",
    "row_means": "an output without the batch axis is a mean over the rows of its batch-major inputs: equal "
                 "micro-batches' partial means average to the batch's",
    "cross_batch": "in training mode (attr is_training) it mixes the rows of the batch (batch statistics)",
    "activation_last": "its output is its attr `activation` applied last (a fused op ending in a ReLU)",
    "activation_grad_first": "it starts with the gradient of its attr `activation` (a fused ReLU gradient)",
    "random": "it draws from its node's random stream (KernelContext.random_draw): a run of some of a step's rows "
              "draws those rows' numbers of the unsplit step",
}

OPS: dict[str, OpDef] = {}
KERNELS: dict[tuple[str, str, str | None], Callable] = {}
_KERNEL_PACKAGES: set[str] = set()  # devices whose kernel package registered all its kernels (has_kernels)
_KERNEL_WHERE: dict[tuple, str] = {}
# (op type, device) -> fn(input specs, attrs) -> [(shape, dtype), ...]: the scratch buffers that device's
# kernel asks for with ctx.workspace, in request order. The memory planner preallocates exactly these.
WORKSPACES: dict[tuple[str, str], Callable] = {}


def _caller(depth: int = 2) -> str:
    # NOTE: not inspect.stack(): it reads source lines for every frame, which made `import tfplus` take 10+ s.
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def register_op(name: str, *, inputs=(), outputs=("y",), attrs=None, shape_fn, value_inputs=(),
                aliases=None, ref_inputs=(), stateful=False, allocates_outputs=False, flops=None, tags=()) -> OpDef:
    """Declares op type `name`. Registering a name twice raises and names both places."""
    where = _caller()
    if name in OPS:
        raise ValueError(f"op type {name!r} registered twice: at {OPS[name].where} and at {where}")
    unknown = set(tags) - set(TAGS)
    if unknown:
        raise ValueError(f"op type {name!r} at {where}: unknown tags {sorted(unknown)}; tags are {sorted(TAGS)}")
    OPS[name] = op = OpDef(name, tuple(inputs), tuple(outputs), dict(attrs or {}), shape_fn,
                           tuple(value_inputs), dict(aliases or {}), tuple(ref_inputs), stateful, None, where,
                           allocates_outputs, flops, frozenset(tags))
    return op


def has_tag(op_type: str, tag: str) -> bool:
    """Whether op type `op_type` declared `tag` (TAGS) at register_op: `has_tag("Reshape", "view")`."""
    op = OPS.get(op_type)
    return op is not None and tag in op.tags


def tagged(tag: str) -> list[str]:
    """The op types that declared `tag`, sorted (for messages that list them)."""
    return sorted(name for name, op in OPS.items() if tag in op.tags)


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


def register_rows(rule: Callable, *op_types: str) -> None:
    """Declares how ops of `op_types` treat the rows of a fed batch (axis 0 of a [None, ...] placeholder), which
    micro-batches and the cpu workers slice: `rule(op, rows) -> str | None`, `rows` the step's tensors with rows of
    the batch. None where each row of its outputs with rows is computed from the same row of its inputs with rows
    (elementwise, a matmul's or convolution's rows, a softmax over the features), or where it reduces over the rows
    (a statistic: tfplus.planner.crossbatch merges or refuses it); else why not, a phrase after the op's name
    ("takes rows 0:25 of the batch"). An op that declares none is refused wherever it meets the rows
    (tfplus.planner.rows), so a new op cannot silently break a split step. Ops that update variables in place
    (ref_inputs) need none: the update run has no rows."""
    for t in op_types:
        op = get_op_def(t)
        if op.rows is not None:
            raise ValueError(f"row rule for {t!r} registered twice")
        op.rows = rule


class ChunkSpec(NamedTuple):
    """A kernel the executor may call on slices of the batch (tfplus.planner.chunking), one call per slice:
    `batch` are the inputs with the batch on axis 0, `size` the input whose *value* starts with the batch size
    (a backprop's input_sizes) or None, `summed` says output 0 is a sum over the batch (a filter gradient: the
    slices' results are added) rather than batch-major. `scratch_divisor`: the kernel also reads the attr
    SCRATCH_ATTR = d and works through its batch in pieces 1/d its usual size (as its workspace declaration)."""
    batch: tuple
    size: int | None = None
    summed: bool = False
    scratch_divisor: bool = False


# The attr a chunkable kernel with `scratch_divisor` reads (set by the planned executor, never by users).
SCRATCH_ATTR = "_scratch_divisor"


@dataclass
class KernelFacts:
    """What the planner and profiler may assume of one (op type, device)'s kernel, declared where it is
    registered. `inplace`: input indices whose buffer the output may be (the kernel reads each element of
    that input before it writes the same element of the output); tests/ops/test_completeness.py runs every one
    both ways. `chunk`: a ChunkSpec. `variants`: name -> another kernel for the same op that the planned
    executor calls in its place (tfplus.planner.compact's are named "compact" and "pooled"). Facts are per op
    type and device: a kernel registered for some dtypes of that pair vouches for all of them."""
    inplace: tuple = ()
    chunk: ChunkSpec | None = None
    variants: dict = field(default_factory=dict)
    where: str = ""


FACTS: dict[tuple[str, str], KernelFacts] = {}
_NO_FACTS = KernelFacts()
_facts_version = 0  # bumped on every declaration: FactsView rebuilds from it


def register_kernel(op_type: str, device: str, dtypes=(None,), *, inplace=(), chunk: ChunkSpec | None = None):
    """Decorator registering `fn(ctx, inputs, outputs, attrs)` for (op type, device, dtype).
    The kernel writes its results into `outputs` (buffers the runtime allocated) and returns nothing.
    dtype None matches any dtype. `inplace` and `chunk` declare the kernel's KernelFacts:
    `@register_kernel("Relu", "cpu", FLOATS, inplace=(0,))`."""
    def deco(fn):
        where = _caller()
        old = kernel_facts(op_type, device)
        if (inplace or chunk is not None) and (old.inplace or old.chunk) and \
                (old.inplace, old.chunk) != (tuple(inplace), chunk):
            raise ValueError(f"kernels of ({op_type!r}, {device!r}) declare different facts: at {old.where} and "
                             f"at {where}; the planner keeps one per op and device")
        for dt in dtypes:
            key = (op_type, device, None if dt is None else _dtype_name(dt))
            if key in KERNELS:
                raise ValueError(f"kernel {key} registered twice: at {_KERNEL_WHERE[key]} and at {where}")
            KERNELS[key] = fn
            _KERNEL_WHERE[key] = where
        if inplace or chunk is not None:
            facts = _facts(op_type, device, where)
            facts.inplace, facts.chunk, facts.where = tuple(inplace), chunk, where
        return fn
    return deco


def register_variant(op_type: str, device: str, name: str):
    """Decorator declaring `fn` as kernel variant `name` of (op type, device)'s kernel (KernelFacts.variants),
    which the planned executor may call in its place: `@register_variant("MaxPool", "cpu", "compact")`."""
    def deco(fn):
        facts = _facts(op_type, device, _caller())
        if name in facts.variants:
            raise ValueError(f"variant {name!r} of ({op_type!r}, {device!r}) declared twice (at {_caller()})")
        facts.variants[name] = fn
        return fn
    return deco


def _facts(op_type: str, device: str, where: str) -> KernelFacts:
    global _facts_version
    _facts_version += 1
    if (op_type, device) not in FACTS:
        FACTS[op_type, device] = KernelFacts(where=where)
    return FACTS[op_type, device]


def kernel_facts(op_type: str, device: str) -> KernelFacts:
    """The facts (op type, device)'s kernel declared (empty ones when it declared none)."""
    return FACTS.get((op_type, device), _NO_FACTS)


def inplace_inputs(op_type: str, device: str) -> tuple:
    """The inputs whose buffer (op type, device)'s kernel may write its output over."""
    return kernel_facts(op_type, device).inplace


def kernel_variant(op_type: str, device: str, name: str) -> Callable:
    """Kernel variant `name` of (op type, device): `kernel_variant("ReluGrad", "cpu", "compact")`."""
    try:
        return FACTS[op_type, device].variants[name]
    except KeyError:
        raise NotImplementedError(f"no {name!r} variant of the {op_type} kernel on {device}; variants there: "
                                  f"{sorted(kernel_facts(op_type, device).variants)}") from None


class FactsView(Mapping):
    """A read-only dict derived from FACTS by `derive() -> dict`, rebuilt when a kernel declares facts (kernel
    modules register as they are imported): for code that reads facts as a table (planner.inplace.INPLACE,
    planner.chunking.CHUNKABLE)."""

    def __init__(self, derive: Callable[[], dict]):
        self._derive, self._version, self._table = derive, -1, {}

    def _current(self) -> dict:
        if self._version != _facts_version:
            self._table, self._version = self._derive(), _facts_version
        return self._table

    def __getitem__(self, key):
        return self._current()[key]

    def __contains__(self, key) -> bool:  # the planner asks this per op: no KeyError round trip
        return key in self._current()

    def __iter__(self):
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


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


def declared_scratch(op_type: str, device: str, ins: list[TensorSpec], attrs: dict, *, threads: int | None = None,
                     compute_units: int | None = None) -> list | None:
    """The [(shape, dtype)] scratch (op type, device)'s kernel declares (register_workspace) for inputs `ins` and
    `attrs`, None when it declares none. The cpu kernels cut their work into tasks per thread and ask for scratch
    per thread: the declaration runs on `threads` threads as the kernel would (None: the count the calling thread
    runs kernels with). An opencl declaration is given the device's compute units."""
    fn = WORKSPACES.get((op_type, device))
    if fn is None:
        return None
    args = (ins, attrs) + ((compute_units,) if device == "opencl" else ())
    if threads is None:
        return fn(*args)
    with _threads.using(threads):
        return fn(*args)


def kernels_registered(device: str) -> None:
    """Said by a device's kernel package once it has registered all its kernels (has_kernels)."""
    _KERNEL_PACKAGES.add(device)


def has_kernels(device: str) -> bool:
    """Whether `device`'s kernel package has registered its kernels (a runtime imports its own): one kernel
    registered elsewhere, e.g. by a test, does not count, since a plan needs every kernel's facts."""
    return device in _KERNEL_PACKAGES


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


# -- host callbacks (tf.py_func, tf.data's iterators) ---------------------------------------------------------
# token -> the Python function a PyFunc node calls. A node holds only the token (attr `token`, as TensorFlow's
# PyFunc does), so its GraphDef stays serializable; the function lives as long as the process.
PY_FUNCS: dict[str, Callable] = {}


def register_py_func(fn: Callable) -> str:
    """A new token for `fn`, which the PyFunc kernels call (registry.PY_FUNCS[token])."""
    token = f"pyfunc_{len(PY_FUNCS)}"
    PY_FUNCS[token] = fn
    return token
