"""Graph, Operation and Tensor: the TF1 dataflow graph. Building a graph touches no device."""
from __future__ import annotations

import contextlib
import math
import re
import threading
from typing import Any, Iterable

import numpy as np

from tfplus import dtypes as _dt
from tfplus.registry import TensorSpec, get_op_def

_VALID_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")


class Dimension:
    """One dimension of a TensorShape (TF1 style): `.value` is an int or None."""

    def __init__(self, value):
        self.value = None if value is None else int(value)

    def __int__(self):
        if self.value is None:
            raise ValueError("cannot convert an unknown Dimension to int")
        return self.value

    __index__ = __int__

    def __eq__(self, other):
        other = other.value if isinstance(other, Dimension) else other
        return self.value == other

    def __hash__(self):
        return hash(self.value)

    def _op(self, other, fn):
        other = other.value if isinstance(other, Dimension) else other
        return Dimension(None if self.value is None or other is None else fn(self.value, other))

    def __add__(self, o): return self._op(o, lambda a, b: a + b)
    def __sub__(self, o): return self._op(o, lambda a, b: a - b)
    def __mul__(self, o): return self._op(o, lambda a, b: a * b)
    def __floordiv__(self, o): return self._op(o, lambda a, b: a // b)
    __radd__, __rmul__ = __add__, __mul__

    def __repr__(self):
        return f"Dimension({self.value})"

    def __str__(self):
        return "?" if self.value is None else str(self.value)


class TensorShape:
    """A possibly partially known shape. `TensorShape([None, 3]).as_list() == [None, 3]`."""

    def __init__(self, dims):
        if isinstance(dims, TensorShape):
            dims = dims.dims_tuple
        self.dims_tuple = None if dims is None else tuple(
            None if (d is None or (isinstance(d, Dimension) and d.value is None)) else int(d) for d in dims)

    @property
    def ndims(self):
        return None if self.dims_tuple is None else len(self.dims_tuple)

    rank = ndims

    @property
    def dims(self):
        return None if self.dims_tuple is None else [Dimension(d) for d in self.dims_tuple]

    def as_list(self) -> list:
        if self.dims_tuple is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape")
        return list(self.dims_tuple)

    def is_fully_defined(self) -> bool:
        return self.dims_tuple is not None and None not in self.dims_tuple

    def num_elements(self):
        return int(np.prod(self.dims_tuple, dtype=np.int64)) if self.is_fully_defined() else None

    def is_compatible_with(self, other) -> bool:
        return shapes_compatible(self.dims_tuple, TensorShape(other).dims_tuple)

    def __len__(self):
        if self.dims_tuple is None:
            raise ValueError("len() of an unknown TensorShape")
        return len(self.dims_tuple)

    def __iter__(self):
        return iter(self.dims)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return TensorShape(self.dims_tuple[i])
        return Dimension(self.dims_tuple[i])

    def __eq__(self, other):
        try:
            return self.dims_tuple == TensorShape(other).dims_tuple
        except TypeError:
            return NotImplemented

    def __hash__(self):
        return hash(self.dims_tuple)

    def __repr__(self):
        return f"TensorShape({None if self.dims_tuple is None else list(self.dims_tuple)})"

    def __str__(self):
        if self.dims_tuple is None:
            return "<unknown>"
        return "(" + ", ".join("?" if d is None else str(d) for d in self.dims_tuple) + \
            ("," if len(self.dims_tuple) == 1 else "") + ")"


def shapes_compatible(a, b) -> bool:
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def _fmt_shape(s) -> str:
    return str(TensorShape(s))


# The most elements one tensor may have: its element count must fit in int64 (as TensorFlow's).
MAX_ELEMENTS = 2**63 - 1


def shape_error(shape) -> str | None:
    """Why a static shape (None for unknown dims) is not a valid tensor shape, or None: a negative size,
    or more elements than int64 can count."""
    if shape is None:
        return None
    for i, d in enumerate(shape):
        if d is not None and d < 0:
            return f"dimension {i} is {d}; sizes must be >= 0 (None for unknown)"
    if None not in shape and math.prod(shape) > MAX_ELEMENTS:
        return f"{math.prod(shape):.3g} elements, more than a tensor can hold ({MAX_ELEMENTS})"
    return None


def input_count_error(op_def, attrs: dict, n: int) -> str | None:
    """Why `n` inputs do not fit an op's signature, or None. A variadic input ('name*') takes attr N of them
    where the op declares N, else any number."""
    fixed = sum(1 for s in op_def.inputs if not s.endswith("*"))
    variadic = len(op_def.inputs) - fixed
    signature = f"({', '.join(op_def.inputs)})"
    if variadic and "N" not in op_def.attrs:
        return None if n >= fixed else f"takes at least {fixed} inputs {signature}, got {n}"
    if variadic:
        count = attrs.get("N")
        if type(count) is not int or count < 0:
            return f"attr N (the length of its variadic input) must be an int >= 0, got {count!r}"
        want = fixed + variadic * count
        if n != want:
            return f"takes {want} inputs {signature} with N={count}, got {n}"
        return None
    if n != fixed:
        return f"takes {fixed} input{'' if fixed == 1 else 's'} {signature}, got {n}"
    return None


def _dtype_causes(inputs: list) -> str:
    """Where inputs of different dtypes got them, for a dtype error: the usual causes are a placeholder
    declared with another dtype and a constant made from a float64 NumPy value."""
    if len({t.dtype for t in inputs}) < 2:
        return ""
    causes = []
    for t in inputs:
        op, dt = t.op, t.dtype.name
        while op.type == "Identity" and op.inputs:  # a variable's value is read through Identity 'w/read'
            op = op.inputs[0].op
        if op.type == "Placeholder":
            causes.append(f"'{t.name}' is {dt} because placeholder '{op.name}' was declared {dt}")
        elif op.type == "Const":
            why = " (NumPy arrays keep their dtype: np.float64 unless made with np.float32)" \
                if dt == "float64" else ""
            causes.append(f"'{t.name}' is {dt} because it is a constant made from a {dt} value{why}")
        elif op.type == "VariableV2":
            causes.append(f"'{t.name}' is {dt} because variable '{op.name}' was created {dt}")
    causes.append("make the dtypes agree where the values are made, or convert one with tf.cast")
    return "; likely cause: " + "; ".join(causes)


def _brief(attrs: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(attrs.items()) if not isinstance(v, np.ndarray)) or "none"


class Tensor:
    """The `value_index`-th output of an Operation; a symbolic handle, evaluated by a Session."""

    def __init__(self, op: Operation, value_index: int, dtype: _dt.DType, shape):
        self.op, self.value_index, self.dtype = op, value_index, dtype
        self._shape = None if shape is None else tuple(shape)

    @property
    def name(self) -> str:
        return f"{self.op.name}:{self.value_index}"

    @property
    def graph(self) -> Graph:
        return self.op.graph

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._shape)

    def get_shape(self) -> TensorShape:
        return self.shape

    def set_shape(self, shape) -> None:
        """Refines the static shape (TF's set_shape): dims must be compatible."""
        new = TensorShape(shape).dims_tuple
        if not shapes_compatible(self._shape, new):
            raise ValueError(f"Tensor '{self.name}': shape {_fmt_shape(self._shape)} is not compatible "
                             f"with {_fmt_shape(new)}")
        if self._shape is None:
            self._shape = new
        elif new is not None:
            self._shape = tuple(a if a is not None else b for a, b in zip(self._shape, new))

    @property
    def consumers_list(self) -> list:
        return [op for op in self.op.graph._consumers.get(self, ())]

    def consumers(self) -> list:
        return self.consumers_list

    def eval(self, feed_dict=None, session=None):
        from tfplus.session import _session_for
        return _session_for(session, "evaluate tensor", "eval").run(self, feed_dict)

    def __repr__(self):
        return f"<tf.Tensor '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):  # TF1: tensors compare by identity, so they can key dicts
        return self is other

    def __bool__(self):
        raise TypeError(f"using tf.Tensor '{self.name}' as a Python bool is not allowed: the value is only "
                        "known when a Session runs it")

    def __iter__(self):
        raise TypeError(f"tf.Tensor '{self.name}' is not iterable in graph mode")

    # Above ndarray's, so `np.float32(2) * t` and `array + t` defer to Tensor's reflected operators.
    __array_priority__ = 100

    def __array__(self, dtype=None, copy=None):
        raise TypeError(f"cannot convert the symbolic tf.Tensor '{self.name}' to a NumPy array; "
                        "fetch it with Session.run")


def _binary(opname, reverse=False):
    def method(self, other):
        from tfplus.ops import math_ops
        fn = getattr(math_ops, opname)
        return fn(other, self) if reverse else fn(self, other)
    return method


def _unary(opname):
    def method(self):
        from tfplus.ops import math_ops
        return getattr(math_ops, opname)(self)
    return method


def _getitem(self, key):
    from tfplus.ops import array_ops
    return array_ops._slice_helper(self, key)


_OPERATORS = {
    "__add__": _binary("add"), "__radd__": _binary("add", True),
    "__sub__": _binary("subtract"), "__rsub__": _binary("subtract", True),
    "__mul__": _binary("multiply"), "__rmul__": _binary("multiply", True),
    "__truediv__": _binary("divide"), "__rtruediv__": _binary("divide", True),
    "__matmul__": _binary("matmul"), "__rmatmul__": _binary("matmul", True),
    "__pow__": _binary("pow"), "__rpow__": _binary("pow", True),
    "__lt__": _binary("less"), "__le__": _binary("less_equal"),
    "__gt__": _binary("greater"), "__ge__": _binary("greater_equal"),
    "__floordiv__": _binary("floordiv"), "__rfloordiv__": _binary("floordiv", True),
    "__mod__": _binary("floormod"), "__rmod__": _binary("floormod", True),
    "__and__": _binary("logical_and"), "__rand__": _binary("logical_and", True),
    "__or__": _binary("logical_or"), "__ror__": _binary("logical_or", True),
    "__xor__": _binary("logical_xor"), "__rxor__": _binary("logical_xor", True),
    "__neg__": _unary("negative"), "__abs__": _unary("abs"), "__invert__": _unary("logical_not"),
    "__getitem__": _getitem,
}
for _name, _fn in _OPERATORS.items():
    setattr(Tensor, _name, _fn)


class Operation:
    """A node: op type, inputs, attrs, outputs. Mirrors NodeDef."""

    def __init__(self, graph: Graph, op_type: str, name: str, inputs: list[Tensor], attrs: dict,
                 control_inputs: list[Operation], device: str = ""):
        self.graph, self.type, self.name = graph, op_type, name
        self.inputs = list(inputs)
        self.attrs = attrs
        self.control_inputs = list(control_inputs)
        self.device = device
        self.op_def = get_op_def(op_type)
        self.outputs: list[Tensor] = []
        self._id = len(graph._ops)
        self.backward = False  # tf.gradients added it (tfplus.gradients sets it; planner.liveness.phase_of reads it)

    def get_attr(self, name: str):
        try:
            return self.attrs[name]
        except KeyError:
            raise ValueError(f"{self.type} '{self.name}' has no attr {name!r}; it has {sorted(self.attrs)}") \
                from None

    @property
    def node_def(self):
        from tfplus import graph_io
        return graph_io.node_to_proto(self)

    def run(self, feed_dict=None, session=None):
        from tfplus.session import _session_for
        _session_for(session, "execute operation", "run").run(self, feed_dict)

    def _add_control_input(self, op: Operation) -> None:
        if op not in self.control_inputs:
            self.control_inputs.append(op)

    def _update_input(self, index: int, tensor: Tensor) -> None:
        """Makes input `index` read `tensor` (TF1's private name), which must have the old input's dtype and
        shape: shape functions are not run again."""
        old = self.inputs[index]
        if tensor.dtype is not old.dtype or tensor._shape != old._shape:
            raise ValueError(f"{self.type} '{self.name}': input {index} is {old.dtype.name} {old._shape}; cannot "
                             f"replace it with {tensor.name} ({tensor.dtype.name} {tensor._shape})")
        consumers = self.graph._consumers
        consumers[old].remove(self)
        consumers.setdefault(tensor, []).append(self)
        self.inputs[index] = tensor

    def __repr__(self):
        return f"<tf.Operation '{self.name}' type={self.type}>"


class Graph:
    """A TF1 graph. `with tf.Graph().as_default() as g: ...` makes it the default for new ops."""

    def __init__(self):
        self._ops: list[Operation] = []
        self._by_name: dict[str, Operation] = {}
        self._names_in_use: dict[str, int] = {}
        self._consumers: dict[Tensor, list[Operation]] = {}
        self._name_stack = ""
        self._control_stack: list[list[Operation]] = []
        self._device_stack: list[str] = []
        self._collections: dict[str, list] = {}
        self._lock = threading.RLock()
        self.seed: int | None = None
        self._var_store: dict[str, Any] = {}  # get_variable's store, owned by tfplus.variables
        self._var_scope_stack: list = []
        self._finalized = False

    # -- building ---------------------------------------------------------------------------------------
    def create_op(self, op_type: str, inputs: Iterable = (), attrs: dict | None = None, name: str | None = None,
                  dtypes=None) -> Operation:
        """Adds a node; runs the op's shape function. Most code calls op wrappers instead."""
        if self._finalized:
            raise RuntimeError("Graph is finalized and cannot be modified")
        op_def = get_op_def(op_type)
        attrs = dict(attrs or {})
        for k, kind in op_def.attrs.items():
            # A "float" attr is a 32-bit float in TF's AttrValue: kernels of every dtype see that value, as in TF.
            if kind == "float" and isinstance(attrs.get(k), (int, float)) and not isinstance(attrs[k], bool):
                attrs[k] = float(np.float32(attrs[k]))
        inputs = list(inputs)
        for t in inputs:
            if not isinstance(t, Tensor):
                raise TypeError(f"{op_type}: input {t!r} is not a Tensor; use the op's wrapper function")
            if t.graph is not self:
                raise ValueError(f"{op_type} '{name}': input '{t.name}' is from a different Graph; "
                                 "build all ops of one step in one graph (check your tf.Graph().as_default())")
        problem = input_count_error(op_def, attrs, len(inputs))
        if problem:
            raise ValueError(f"{op_type} '{name or op_type}': {problem}: "
                             f"{[t.name for t in inputs]}; pass the inputs its signature lists")
        with self._lock:
            if name and name.endswith("/"):  # TF convention: a name ending in '/' is used exactly
                full = name[:-1]
                if full in self._by_name:
                    raise ValueError(f"duplicate node name {full!r}")
                self._names_in_use.setdefault(full.lower(), 1)
            else:
                full = self.unique_name(name or op_type)
            control = [op for frame in self._control_stack for op in frame]
            control = [c for c in dict.fromkeys(control) if all(t.op is not c for t in inputs)]
            op = Operation(self, op_type, full, inputs, attrs, control,
                           self._device_stack[-1] if self._device_stack else "")
            # value_inputs may count from the end (-1: ConcatV2's axis, after its variadic values)
            vi, n = op_def.value_inputs, len(inputs)
            specs = [TensorSpec(t._shape, t.dtype, constant_value(t) if i in vi or i - n in vi else None)
                     for i, t in enumerate(inputs)]
            try:
                out_specs = op_def.shape_fn(specs, attrs)
            except (ValueError, TypeError) as e:
                shapes = ", ".join(f"{t.name} {_fmt_shape(t._shape)} {t.dtype.name}" for t in inputs)
                hint = _dtype_causes(inputs) if isinstance(e, TypeError) else ""
                raise type(e)(f"{op_type} '{full}': {e} (inputs: {shapes}){hint}") from None
            except KeyError as e:  # a shape function reading an attr the node lacks
                raise ValueError(f"{op_type} '{full}': lacks attr {e}; it has {sorted(attrs)}") from None
            except (ArithmeticError, IndexError) as e:  # NOTE: attrs or sizes no wrapper makes (a GraphDef's)
                shapes = ", ".join(f"{t.name} {_fmt_shape(t._shape)}" for t in inputs)
                raise ValueError(f"{op_type} '{full}': its inputs or attrs do not fit the op ({type(e).__name__}: "
                                 f"{e}; inputs: {shapes or 'none'}; attrs: {_brief(attrs)})") from None
            for k, out in enumerate(out_specs):
                problem = shape_error(out.shape)
                if problem:
                    shapes = ", ".join(f"{t.name} {_fmt_shape(t._shape)}" for t in inputs)
                    raise ValueError(f"{op_type} '{full}': output {k} would have shape {list(out.shape)}: "
                                     f"{problem} (inputs: {shapes or 'none'}; attrs: {_brief(attrs)})")
            op.outputs = [Tensor(op, i, s.dtype, s.shape) for i, s in enumerate(out_specs)]
            for i, s in enumerate(out_specs):
                op.outputs[i]._const = s.value  # shape functions may fold constants (Shape of a known shape)
            self._ops.append(op)
            self._by_name[full] = op
            for t in inputs:
                self._consumers.setdefault(t, []).append(op)
        return op

    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        full = f"{self._name_stack}/{name}" if self._name_stack else name
        if not _VALID_NAME.match(full):
            raise ValueError(f"{full!r} is not a valid node name (letters, digits, '.', '_', '-', '/')")
        key = full.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count:
            base = full
            while True:
                full = f"{base}_{count}"
                if full.lower() not in self._names_in_use:
                    break
                count += 1
            if mark_as_used:
                self._names_in_use[full.lower()] = 1
        return full

    @contextlib.contextmanager
    def name_scope(self, name: str | None):
        """TF1 name_scope: 'scope' is made unique ('scope_1'); 'scope/' re-enters exactly; None or '' resets."""
        old = self._name_stack
        if not name:
            new = ""
        elif name.endswith("/"):
            new = name[:-1]
        else:
            new = self.unique_name(name)
        self._name_stack = new
        try:
            yield (new + "/") if new else ""
        finally:
            self._name_stack = old

    def get_name_scope(self) -> str:
        return self._name_stack

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        """Ops created inside run after `control_inputs`. None clears the outer ones."""
        if control_inputs is None:
            saved, self._control_stack = self._control_stack, []
            try:
                yield
            finally:
                self._control_stack = saved
            return
        ops = []
        for c in control_inputs:
            c = c.op if isinstance(c, Tensor) else getattr(c, "op", c) if not isinstance(c, Operation) else c
            if not isinstance(c, Operation):
                raise TypeError(f"control_dependencies: {c!r} is not an Operation or Tensor")
            ops.append(c)
        self._control_stack.append(ops)
        try:
            yield
        finally:
            self._control_stack.pop()

    @contextlib.contextmanager
    def device(self, name):
        """Accepted for TF compatibility; placement is the Session's."""
        self._device_stack.append(name or "")
        try:
            yield
        finally:
            self._device_stack.pop()

    @contextlib.contextmanager
    def as_default(self):
        _default_stack().append(self)
        try:
            yield self
        finally:
            _default_stack().pop()

    # -- lookup -------------------------------------------------------------------------------------------
    def get_operations(self) -> list[Operation]:
        return list(self._ops)

    def get_operation_by_name(self, name: str) -> Operation:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"the graph has no operation named {name!r}") from None

    def get_tensor_by_name(self, name: str) -> Tensor:
        op_name, _, idx = name.rpartition(":")
        if not op_name or not idx.isdigit():
            raise ValueError(f"{name!r} is not a tensor name ('op_name:index')")
        op = self.get_operation_by_name(op_name)
        if int(idx) >= len(op.outputs):
            raise KeyError(f"{op.type} '{op_name}' has {len(op.outputs)} outputs; there is no {name!r}")
        return op.outputs[int(idx)]

    def as_graph_element(self, obj):
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise ValueError(f"{obj!r} is not an element of this graph")
            return obj
        if isinstance(obj, str):
            return self.get_tensor_by_name(obj) if ":" in obj else self.get_operation_by_name(obj)
        if hasattr(obj, "_as_graph_element"):
            return self.as_graph_element(obj._as_graph_element())
        raise TypeError(f"cannot interpret {obj!r} as a Tensor or Operation")

    # -- collections --------------------------------------------------------------------------------------
    def add_to_collection(self, name: str, value) -> None:
        self._collections.setdefault(name, []).append(value)

    def get_collection(self, name: str, scope: str | None = None) -> list:
        items = list(self._collections.get(name, []))
        if scope is None:
            return items
        pat = re.compile(scope)
        return [v for v in items if pat.match(getattr(v, "name", ""))]

    def get_collection_ref(self, name: str) -> list:
        return self._collections.setdefault(name, [])

    def get_all_collection_keys(self) -> list[str]:
        return sorted(self._collections)

    def finalize(self) -> None:
        self._finalized = True

    @property
    def finalized(self) -> bool:
        return self._finalized

    @property
    def version(self) -> int:
        return len(self._ops)

    def as_graph_def(self, add_shapes: bool = False):
        from tfplus import graph_io
        return graph_io.as_graph_def(self, add_shapes=add_shapes)


class GraphKeys:
    GLOBAL_VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    MODEL_VARIABLES = "model_variables"
    GLOBAL_STEP = "global_step"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    SUMMARIES = "summaries"
    UPDATE_OPS = "update_ops"
    TRAIN_OP = "train_op"
    INIT_OP = "init_op"
    SAVERS = "savers"
    WEIGHTS = "weights"
    BIASES = "biases"
    ACTIVATIONS = "activations"
    VARIABLES = GLOBAL_VARIABLES


_local = threading.local()
_global_default = [Graph()]


def _default_stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def get_default_graph() -> Graph:
    stack = _default_stack()
    return stack[-1] if stack else _global_default[0]


def reset_default_graph() -> None:
    if _default_stack():
        raise AssertionError("reset_default_graph() called inside a `with graph.as_default()` block")
    _global_default[0] = Graph()


def constant_value(t: Tensor):
    """The value of `t` if it is known when the graph is built (a Const, or a folded Shape), else None."""
    if t.op.type == "Const":
        return t.op.attrs["value"]
    return getattr(t, "_const", None)


def convert_to_tensor(value, dtype=None, name=None, preferred_dtype=None) -> Tensor:
    """Tensors pass through; Variables give their value; Python and NumPy values become Const ops."""
    if hasattr(value, "_as_tensor"):
        value = value._as_tensor()
    if isinstance(value, Tensor):
        if dtype is not None and _dt.as_dtype(dtype) is not value.dtype:
            raise TypeError(f"Tensor '{value.name}' has dtype {value.dtype.name} where {_dt.as_dtype(dtype).name} "
                            "is required; use tf.cast")
        return value
    from tfplus.ops.array_ops import constant
    return constant(value, dtype=dtype or _infer_dtype(value, preferred_dtype), name=name or "Const")


def _infer_dtype(value, preferred=None):
    """TF's rules: Python floats are float32, Python ints int32, NumPy arrays keep their dtype."""
    if isinstance(value, (np.ndarray, np.generic)):
        return _dt.as_dtype(value.dtype)
    arr = np.asarray(value)
    if preferred is not None:
        return _dt.as_dtype(preferred)
    if arr.dtype.kind == "f":
        return _dt.float32
    if arr.dtype.kind in "iu":
        return _dt.int32
    if arr.dtype.kind == "b":
        return _dt.bool_
    raise TypeError(f"cannot convert {value!r} to a tensor")


def name_scope(name, default_name=None, values=None):
    """`with tf.name_scope("layer1"):` prefixes names of ops created inside."""
    g = _graph_of(values) if values else get_default_graph()
    return g.name_scope(name if name is not None else default_name)


def _graph_of(values) -> Graph:
    for v in values:
        if isinstance(v, (Tensor, Operation)):
            return v.graph
        if hasattr(v, "graph"):
            return v.graph
    return get_default_graph()


def control_dependencies(control_inputs):
    return get_default_graph().control_dependencies(control_inputs)


def device(name):
    return get_default_graph().device(name)


def add_to_collection(name, value):
    get_default_graph().add_to_collection(name, value)


def get_collection(name, scope=None):
    return get_default_graph().get_collection(name, scope)


def get_collection_ref(name):
    return get_default_graph().get_collection_ref(name)


def needed_ops(fetches: list, feeds: set) -> set[Operation]:
    """The ops that computing `fetches` (Tensors or Operations) runs, given fed tensors (as the executor
    prunes)."""
    needed: set[Operation] = set()
    stack = [f.op if isinstance(f, Tensor) else f for f in fetches
             if not (isinstance(f, Tensor) and f in feeds)]
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        stack.extend(t.op for t in op.inputs if t not in feeds)
        stack.extend(op.control_inputs)
    return needed


def apply_op(op_type: str, inputs=(), attrs: dict | None = None, name: str | None = None):
    """Creates a node and returns its output (one Tensor), outputs (a tuple), or the Operation if it has none.

    A list at a variadic input's position fills it (attr N is set). Non-tensor values are converted to the dtype of
    the first tensor input, so `x * 2` works for any float x; wrappers convert mixed-type inputs themselves.
    Attr "T" is set from the first input when the op declares it and the caller did not.
    """
    attrs = dict(attrs or {})
    op_def = get_op_def(op_type)
    # Only an input declared variadic ("name*") takes a list; anywhere else a list is a value, as in
    # `v.assign([0.0, 0.0])`.
    variadic = [name.endswith("*") for name in op_def.inputs]
    variadic += [False] * (len(inputs) - len(variadic))
    flat = []
    for v, many in zip(inputs, variadic):
        flat.extend(v) if many else flat.append(v)
    known = next((v for v in flat if isinstance(v, Tensor) or hasattr(v, "_as_tensor")), None)
    graph = (known._as_tensor() if hasattr(known, "_as_tensor") else known).graph if known is not None \
        else get_default_graph()
    hint = attrs.get("T") or (convert_to_tensor(known).dtype if known is not None else None)
    default = get_default_graph()
    if graph is not default and graph in getattr(default, "outer_graphs", ()):
        graph = default  # building a control-flow sub-graph: outer tensors are captured into it
    with graph.as_default():
        tensors = []
        for v, many in zip(inputs, variadic):
            if many:
                attrs.setdefault("N", len(v))
                tensors.extend(convert_to_tensor(x, dtype=_hint_for(x, hint)) for x in v)
            else:
                tensors.append(convert_to_tensor(v, dtype=_hint_for(v, hint)))
        if "T" in op_def.attrs and "T" not in attrs and tensors:
            attrs["T"] = tensors[0].dtype
        op = graph.create_op(op_type, tensors, attrs, name)
    if not op.outputs:
        return op
    return op.outputs[0] if len(op.outputs) == 1 else tuple(op.outputs)


def _hint_for(value, hint):
    if isinstance(value, Tensor) or hasattr(value, "_as_tensor") or hint is None:
        return None
    return hint
