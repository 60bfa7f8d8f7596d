"""Graph, Operation and Tensor: the TF1 dataflow graph, and the stacks of default graphs and sessions. Building a
graph touches no device.

The graph core (TensorFlow's python/framework): this module imports no op, session, kernel or graph_io module.
Below it are tfplus.tensor_shape (static shapes), tfplus.tensor_util (TensorProto and AttrValue encoding) and
tfplus.graph_export (GraphDef writing). What the layers above provide they install here, as TensorFlow's do:
tfplus.ops.math_ops and array_ops put the operators on Tensor (Tensor._override_operator), array_ops registers the
conversion of Python and NumPy values (register_tensor_conversion_function), and a Session pushes itself onto the
default-session stack (default_session).
"""
from __future__ import annotations

import contextlib
import heapq
import re
import threading
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from tfplus import dtypes as _dt
from tfplus import graph_export
from tfplus.device_spec import DeviceSpec
from tfplus.device_spec import merge as merge_device
from tfplus.registry import TensorSpec, get_op_def
from tfplus.tensor_shape import TensorShape, shape_error, shapes_compatible
from tfplus.tensor_shape import fmt as _fmt_shape

_VALID_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")


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
    def device(self) -> str:
        return self.op.device

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
        return _session_or_default(session, "evaluate tensor", "eval").run(self, feed_dict)

    def __repr__(self):
        return f"<tf.Tensor '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    # TF1: tensors compare by identity, so they can key dicts: object's own __eq__ and __hash__, which run in C (a
    # Python-level identity hash took a sixth of a MobileNet plan's time, 39 million calls)

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

    # The operators the op modules define (TensorFlow's list): tfplus.ops.math_ops installs the arithmetic,
    # comparison and logical ones, tfplus.ops.array_ops __getitem__ (slicing).
    OVERLOADABLE_OPERATORS = frozenset({
        "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
        "__matmul__", "__rmatmul__", "__pow__", "__rpow__", "__lt__", "__le__", "__gt__", "__ge__",
        "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__and__", "__rand__", "__or__", "__ror__",
        "__xor__", "__rxor__", "__neg__", "__abs__", "__invert__", "__getitem__"})

    @classmethod
    def _override_operator(cls, operator: str, func: Callable) -> None:
        """Makes `func` Tensor's `operator` (TensorFlow's private name); only OVERLOADABLE_OPERATORS, once each."""
        if operator not in cls.OVERLOADABLE_OPERATORS:
            raise ValueError(f"Tensor._override_operator: {operator!r} is not one of Tensor.OVERLOADABLE_OPERATORS")
        if operator in cls.__dict__:
            raise ValueError(f"Tensor._override_operator: {operator} is already {cls.__dict__[operator]!r}")
        setattr(cls, operator, func)


class IndexedSlicesValue(NamedTuple):
    """What Session.run gives for a fetched IndexedSlices: its parts as arrays."""
    values: Any
    indices: Any
    dense_shape: Any


class IndexedSlices:
    """TF1's sparse gradient: the rows `values[i]` of a tensor of shape `dense_shape` at rows `indices[i]`
    (indices may repeat: the dense tensor sums them). tf.gradients returns one for the params of a gather along
    axis 0 (tf.nn.embedding_lookup), so an optimizer updates only the rows a step looked up.
    tf.convert_to_tensor densifies it (an UnsortedSegmentSum; tfplus.ops.array_ops registers the conversion).

        >>> import tfplus as tf
        >>> s = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([2]), tf.constant([3, 2]))
        >>> d = tf.convert_to_tensor(s)  # [[0, 0], [0, 0], [1, 2]]
    """

    def __init__(self, values: Tensor, indices: Tensor, dense_shape: Tensor | None = None):
        self._values, self._indices, self._dense_shape = values, indices, dense_shape

    values = property(lambda self: self._values)
    indices = property(lambda self: self._indices)
    dense_shape = property(lambda self: self._dense_shape)
    name = property(lambda self: self._values.name)
    dtype = property(lambda self: self._values.dtype)
    op = property(lambda self: self._values.op)
    graph = property(lambda self: self._values.graph)
    device = property(lambda self: self._values.op.device)

    @property
    def shape(self) -> TensorShape:
        """The dense tensor's static shape: dense_shape's value where known, else the values' row shape."""
        known = None if self._dense_shape is None else constant_value(self._dense_shape)
        if known is not None:
            return TensorShape([int(d) for d in known])
        rows = self._values._shape
        return TensorShape(None if rows is None else (None,) + rows[1:])

    def get_shape(self) -> TensorShape:
        return self.shape

    def __neg__(self):
        return IndexedSlices(-self._values, self._indices, self._dense_shape)

    def _fetch_expand(self):
        """Session.run fetches the parts and gives an IndexedSlicesValue, as TF1 does."""
        parts = [self._values, self._indices] + ([] if self._dense_shape is None else [self._dense_shape])
        return parts, lambda got: IndexedSlicesValue(got[0], got[1], got[2] if len(got) == 3 else None)

    def __repr__(self):
        ds = "None" if self._dense_shape is None else self._dense_shape.name
        return f"IndexedSlices(indices={self._indices.name}, values={self._values.name}, dense_shape={ds})"


class Operation:
    """A node: op type, inputs, attrs, outputs. Mirrors NodeDef."""

    # The gradient name tf.RegisterGradient gave, when a Graph.gradient_override_map made the op (TF1's
    # "_gradient_op_type"): tf.gradients uses that gradient instead of the op type's.
    gradient_op_type: str | None = None

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
        self.grad_of: Operation | None = None  # the op whose gradient function tf.gradients made it in

    def get_attr(self, name: str):
        try:
            return self.attrs[name]
        except KeyError:
            raise ValueError(f"{self.type} '{self.name}' has no attr {name!r}; it has {sorted(self.attrs)}") \
                from None

    @property
    def node_def(self):
        return graph_export.node_to_proto(self)

    def run(self, feed_dict=None, session=None):
        _session_or_default(session, "execute operation", "run").run(self, feed_dict)

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


class _Scopes(threading.local):
    """A graph's scopes as one thread sees them: each thread that builds ops starts at the top level, as in TF1
    (its Graph._thread_local). Shared, one thread's `with tf.control_dependencies([train_op])` gave the ops
    another thread made meanwhile that control input, so running them trained, silently; name and variable
    scopes and devices leaked the same way."""

    def __init__(self):
        self.name_stack = ""
        self.control_stack: list[list[Operation]] = []
        self.device_stack: list = []  # device strings and device functions
        self.var_scope_stack: list = []


def _scoped(field: str) -> property:
    """A Graph attribute kept per thread in its _Scopes."""
    return property(lambda g: getattr(g._scopes, field), lambda g, value: setattr(g._scopes, field, value))


class Graph:
    """A TF1 graph. `with tf.Graph().as_default() as g: ...` makes it the default for new ops."""

    _name_stack = _scoped("name_stack")
    _control_stack = _scoped("control_stack")
    _device_stack = _scoped("device_stack")
    _var_scope_stack = _scoped("var_scope_stack")  # tfplus.variables' variable_scope

    def __init__(self):
        self._ops: list[Operation] = []
        self._by_name: dict[str, Operation] = {}
        self._names_in_use: dict[str, int] = {}
        self._consumers: dict[Tensor, list[Operation]] = {}
        self._scopes = _Scopes()
        self._gradient_overrides: dict[str, str] = {}
        self._unfeedable: set = set()
        self._unfetchable: set = set()
        self._collections: dict[str, list] = {}
        self._lock = threading.RLock()
        self.seed: int | None = None
        self._var_store: dict[str, Any] = {}  # get_variable's store, owned by tfplus.variables
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
            op = Operation(self, op_type, full, inputs, attrs, control)
            self._apply_devices(op)
            op.gradient_op_type = self._gradient_overrides.get(op_type)
            # value_inputs may count from the end (-1: ConcatV2's axis, after its variadic values)
            vi, n = op_def.value_inputs, len(inputs)
            specs = [TensorSpec(t._shape, t.dtype, constant_value(t), partial_value(t)) if i in vi or i - n in vi
                     else TensorSpec(t._shape, t.dtype) for i, t in enumerate(inputs)]
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
            if op_type in ("Shape", "Pack", "ConcatV2") and len(op.outputs) == 1 and op.outputs[0]._const is None:
                op.outputs[0]._partial = _partial_shape_vector(op)
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

    def _apply_devices(self, op: Operation) -> None:
        """TF1's order: the innermost tf.device block first, each outer one filling the fields still unset; a
        device function's answer is taken as it is; a tf.device(None) block stops the walk."""
        for entry in reversed(self._device_stack):
            if entry is None:
                break
            if callable(entry):
                found = entry(op)
                op.device = found.to_string() if hasattr(found, "to_string") else found or ""
            elif entry:
                op.device = merge_device(entry, op.device)

    @contextlib.contextmanager
    def gradient_override_map(self, op_type_map: dict):
        """TF1's: the ops of the types in `op_type_map` made inside take the gradient registered under its value
        with tf.RegisterGradient (a py_func's, a guided ReLU's)."""
        saved = dict(self._gradient_overrides)
        self._gradient_overrides.update(op_type_map)
        try:
            yield
        finally:
            self._gradient_overrides = saved

    @contextlib.contextmanager
    def colocate_with(self, op, ignore_existing=False):
        """Accepted for TF1 scripts (optimizers' slots, multi-tower code): tfplus places a whole step on the
        Session's device, so colocation holds anyway."""
        yield

    @contextlib.contextmanager
    def container(self, container_name):
        """Accepted for TF1 scripts: one Session holds its variables (no containers to reset)."""
        yield

    @contextlib.contextmanager
    def device(self, name_or_function):
        """TF1's tf.device: a device string (merged with the blocks around it, '/gpu:0' read as '/device:GPU:0'),
        a function of the op returning one (tf.train.replica_device_setter), or None (forgets the blocks
        around it). The strings become the ops' `device` (the GraphDef's); placement is the Session's
        (tfplus.device_spec)."""
        if isinstance(name_or_function, str):
            DeviceSpec.from_string(name_or_function)  # a string it cannot read fails here, at the `with`
        elif name_or_function is not None and not callable(name_or_function):
            name_or_function = name_or_function.to_string()  # a DeviceSpec
        self._device_stack.append(name_or_function)
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

    def add_to_collections(self, names, value) -> None:
        """Adds `value` to each collection of `names` (one name or several; each once)."""
        for name in dict.fromkeys([names] if isinstance(names, str) else names):
            self.add_to_collection(name, value)

    def get_collection(self, name: str, scope: str | None = None) -> list:
        items = list(self._collections.get(name, []))
        if scope is None:
            return items
        pat = re.compile(scope)
        return [v for v in items if pat.match(getattr(v, "name", ""))]

    def get_collection_ref(self, name: str) -> list:
        return self._collections.setdefault(name, [])

    def clear_collection(self, name: str) -> None:
        self._collections.pop(name, None)

    @property
    def collections(self) -> list[str]:
        return list(self._collections)

    building_function = False  # tfplus has no function graphs (tf.function)

    def prevent_feeding(self, tensor) -> None:
        """TF1's: a Session.run feeding `tensor` is refused."""
        self._unfeedable.add(tensor)

    def prevent_fetching(self, op) -> None:
        """TF1's: a Session.run fetching `op` (or any of its outputs) is refused."""
        self._unfetchable.add(op)

    def is_feedable(self, tensor) -> bool:
        return tensor not in self._unfeedable

    def is_fetchable(self, tensor_or_op) -> bool:
        return getattr(tensor_or_op, "op", tensor_or_op) not in self._unfetchable

    def get_all_collection_keys(self) -> list[str]:
        return sorted(self._collections)

    def finalize(self) -> None:
        self._finalized = True

    def _unsafe_unfinalize(self) -> None:
        """TF1's: a MonitoredSession that finalized the graph opens it again when it closes."""
        self._finalized = False

    @property
    def finalized(self) -> bool:
        return self._finalized

    @property
    def version(self) -> int:
        return len(self._ops)

    def as_graph_def(self, add_shapes: bool = False):
        """The graph as a GraphDef (tfplus.graph_export); `add_shapes` adds TensorFlow's `_output_shapes` attr."""
        return graph_export.as_graph_def(self, add_shapes=add_shapes)


class GraphKeys:
    GLOBAL_VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    METRIC_VARIABLES = "metric_variables"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    MODEL_VARIABLES = "model_variables"
    GLOBAL_STEP = "global_step"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    SUMMARIES = "summaries"
    UPDATE_OPS = "update_ops"
    TRAIN_OP = "train_op"
    INIT_OP = "init_op"
    TABLE_INITIALIZERS = "table_initializer"
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


# -- the default session ----------------------------------------------------------------------------------------
def get_default_session():
    """The innermost session made the default in this thread (`with tf.Session() as sess:`, `sess.as_default()`,
    an InteractiveSession); None when there is none, as TF1's."""
    stack = getattr(_local, "sessions", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def default_session(session):
    """Makes `session` the default in this thread inside the block (Session.as_default)."""
    if not hasattr(_local, "sessions"):
        _local.sessions = []
    _local.sessions.append(session)
    try:
        yield session
    finally:
        _local.sessions.pop()


def _session_or_default(session, what: str, call: str):
    """`session`, else the default session; `what` and `call` name the caller in the error when there is none
    (Tensor.eval, Operation.run)."""
    session = session or get_default_session()
    if session is None:
        raise ValueError(f"Cannot {what} using `{call}()`: no default session is registered. Use `with "
                         f"sess.as_default():` (or `with tf.Session() as sess:`) or pass a session: "
                         f"`{call}(session=sess)`")
    return session


def partial_value(t: Tensor) -> tuple | None:
    """What is known of an int vector that holds a shape, entry by entry (None for unknown entries), or None:
    TF's constant_value_as_shape."""
    if not t.dtype.is_integer:
        return None
    value = constant_value(t)
    if value is not None:
        return tuple(int(v) for v in np.asarray(value).reshape(-1)) if np.ndim(value) == 1 else None
    return getattr(t, "_partial", None)


def _partial_shape_vector(op) -> tuple | None:
    """The partial value of a Shape (its input's static dims), a Pack of int scalars (the constant ones), or a
    ConcatV2 along 0 of int vectors of known lengths."""
    out = op.outputs[0]
    if not out.dtype.is_integer or out._shape is None or len(out._shape) != 1:
        return None
    if op.type == "Shape":
        return None if op.inputs[0]._shape is None else tuple(op.inputs[0]._shape)
    if op.type == "Pack":
        values = [constant_value(t) for t in op.inputs]
        return tuple(None if v is None or np.ndim(v) else int(v) for v in values)
    axis = constant_value(op.inputs[-1])
    if axis is None or int(axis) not in (0, -1):
        return None
    parts = [partial_value(t) or (None if t._shape is None or t._shape[0] is None else (None,) * t._shape[0])
             for t in op.inputs[:-1]]
    return None if any(p is None for p in parts) else tuple(d for p in parts for d in p)


def constant_value(t: Tensor):
    """The value of `t` if it is known when the graph is built (a Const, or a folded Shape), else None."""
    if t.op.type == "Const":
        return t.op.attrs["value"]
    return getattr(t, "_const", None)


# -- conversion to tensors -----------------------------------------------------------------------------------
# priority -> [(base type, conversion function)], in registration order; lower priorities are tried first.
_CONVERSIONS: dict[int, list[tuple[type, Callable]]] = {}


def register_tensor_conversion_function(base_type, conversion_func: Callable, priority: int = 100) -> None:
    """Makes convert_to_tensor convert instances of `base_type` (a type or a tuple of types) with
    `conversion_func(value, dtype=None, name=None, preferred_dtype=None) -> Tensor`, as TensorFlow's (which passes
    as_ref where tfplus passes preferred_dtype, the dtype to give a value that does not decide its own).
    Functions are tried by priority, lowest first, then in registration order: tfplus.ops.array_ops registers
    the constant conversion of Python and NumPy values for `object` at priority 200.

        >>> register_tensor_conversion_function(Fraction, lambda v, dtype=None, name=None, preferred_dtype=None:
        ...     tf.constant(float(v), dtype=dtype, name=name or "Const"))  # doctest: +SKIP
    """
    types = base_type if isinstance(base_type, tuple) else (base_type,)
    if not all(isinstance(t, type) for t in types):
        raise TypeError(f"register_tensor_conversion_function: base_type must be a type or a tuple of types, "
                        f"got {base_type!r}")
    if any(issubclass(t, Tensor) for t in types):
        raise TypeError("register_tensor_conversion_function: Tensors convert to themselves; cannot register a "
                        f"conversion for {base_type!r}")
    _CONVERSIONS.setdefault(priority, []).append((base_type, conversion_func))


def convert_to_tensor(value, dtype=None, name=None, preferred_dtype=None) -> Tensor:
    """Tensors pass through; Variables give their value; other values go through the conversion function
    registered for their type (register_tensor_conversion_function): Python and NumPy values become Const ops."""
    if hasattr(value, "_as_tensor"):
        value = value._as_tensor()
    if isinstance(value, Tensor):
        if dtype is not None and _dt.as_dtype(dtype) is not value.dtype:
            raise TypeError(f"Tensor '{value.name}' has dtype {value.dtype.name} where {_dt.as_dtype(dtype).name} "
                            "is required; use tf.cast")
        return value
    for priority in sorted(_CONVERSIONS):
        for base_type, func in _CONVERSIONS[priority]:
            if isinstance(value, base_type):
                return func(value, dtype=dtype, name=name, preferred_dtype=preferred_dtype)
    raise TypeError(f"cannot convert {value!r} ({type(value).__name__}) to a tensor: no conversion function is "
                    "registered for it (import tfplus, whose ops register the conversion of Python and NumPy "
                    "values, or register one with register_tensor_conversion_function)")


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


def colocate_with(op, ignore_existing=False):
    return get_default_graph().colocate_with(op, ignore_existing)


def container(container_name):
    return get_default_graph().container(container_name)


def add_to_collections(names, value):
    get_default_graph().add_to_collections(names, value)


def get_collection(name, scope=None):
    return get_default_graph().get_collection(name, scope)


def get_collection_ref(name):
    return get_default_graph().get_collection_ref(name)


def needed_ops(fetches: list, feeds: set, done: frozenset = frozenset()) -> set[Operation]:
    """The ops that computing `fetches` (Tensors or Operations) runs, given fed tensors (as the executor
    prunes); `done`: ops that ran already (a micro-batched step's batch run, for its update run), so a control
    input among them is satisfied, not run again."""
    return _reach(fetches, feeds, done.__contains__)[0]


def control_waits(fetches: list, feeds: set, stop: Callable[[Operation], bool]) -> frozenset[Operation]:
    """The control inputs `c` with stop(c) that the ops computing `fetches` from `feeds` wait for, not looking
    past them (ops an earlier run ran, for the run of a split step's updates: needed_ops' `done`)."""
    return frozenset(_reach(fetches, feeds, stop)[1])


def _reach(fetches: list, feeds: set, stop: Callable[[Operation], bool]) -> tuple[set, set]:
    """The ops computing `fetches` from `feeds` reach through data and control inputs, not walking past a control
    input `c` with stop(c); and those control inputs."""
    reached: set[Operation] = set()
    stopped: set[Operation] = set()
    stack = [f.op if isinstance(f, Tensor) else f for f in fetches if not (isinstance(f, Tensor) and f in feeds)]
    while stack:
        op = stack.pop()
        if op in reached:
            continue
        reached.add(op)
        stack.extend(t.op for t in op.inputs if t not in feeds)
        for c in op.control_inputs:
            (stopped.add if stop(c) else stack.append)(c)
    return reached, stopped


def _op_inputs(op: Operation) -> list[Operation]:
    return [t.op for t in op.inputs] + op.control_inputs


def topo_order(nodes: Iterable, inputs_of: Callable = _op_inputs, key: Callable = lambda op: op._id,
               what: str = "the graph") -> list:
    """`nodes` in topological order by Kahn's algorithm: each after what `inputs_of(node)` lists of `nodes`, ties
    broken by the smallest `key` (unique per node). For Operations (the default): their data and control inputs,
    ties in creation order (deterministic, and it keeps TF1's habit of running optimizer updates after the reads
    created before them). A cycle raises ValueError naming `what` and up to five of its nodes.

        >>> [op.name for op in topo_order(needed_ops([loss], set()))]  # doctest: +SKIP
    """
    indeg = {n: 0 for n in nodes}
    succ: dict[Any, list] = {n: [] for n in indeg}
    for n in indeg:
        for p in inputs_of(n):
            if p in indeg:
                indeg[n] += 1
                succ[p].append(n)
    heap = [(key(n), n) for n, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, n = heapq.heappop(heap)
        order.append(n)
        for s in succ[n]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (key(s), s))
    if len(order) != len(indeg):
        stuck = sorted(n.name for n, d in indeg.items() if d > 0)[:5]
        raise ValueError(f"{what} has a cycle through {stuck}")
    return order


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
    # As TF's op_def_library: the node's name is a scope, so a value converted for input `y` is the Const
    # '<node>/y' ('sub/y', 'Reshape/shape'), and a list input's values are '<node>/values_0', ...
    with graph.as_default(), graph.name_scope(name or op_type) as scope:
        tensors = []
        args = [arg.rstrip("*") for arg in op_def.inputs] + [f"input_{i}" for i in range(len(inputs))]
        for v, many, arg in zip(inputs, variadic, args):
            if many:
                attrs.setdefault("N", len(v))
                tensors.extend(convert_to_tensor(x, dtype=_hint_for(x, hint), name=f"{arg}_{i}")
                               for i, x in enumerate(v))
            else:
                tensors.append(convert_to_tensor(v, dtype=_hint_for(v, hint), name=arg))
        if "T" in op_def.attrs and "T" not in attrs and tensors:
            attrs["T"] = tensors[0].dtype
        op = graph.create_op(op_type, tensors, attrs, scope)
    if not op.outputs:
        return op
    return op.outputs[0] if len(op.outputs) == 1 else tuple(op.outputs)


def _hint_for(value, hint):
    if isinstance(value, Tensor) or hasattr(value, "_as_tensor") or hint is None:
        return None
    return hint
