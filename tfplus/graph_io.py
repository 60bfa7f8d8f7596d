"""GraphDef serialization: Graph -> GraphDef, GraphDef -> nodes of a Graph, and reading/writing graph files.

The messages (tfplus/proto/*.proto) use TensorFlow's field numbers, so TensorFlow parses what we write and we
parse what it writes (for the op types tfplus registers). Attrs are serialized by the type the op registration
declares for them (`tfplus.registry.OPS[op_type].attrs`).

    >>> import tfplus as tf
    >>> from tfplus import graph_io
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, [None, 2], name="x")
    ...     y = tf.identity(x, name="y")
    >>> gd = g.as_graph_def()
    >>> [(n.name, n.op, list(n.input)) for n in gd.node]
    [('x', 'Placeholder', []), ('y', 'Identity', ['x'])]
    >>> data = gd.SerializeToString()
    >>> with tf.Graph().as_default():
    ...     graph_io.import_graph_def(graph_io.parse_graph_def(data), return_elements=["y:0"])
    [<tf.Tensor 'import/y:0' shape=(?, 2) dtype=float32>]
"""
from __future__ import annotations

import contextlib
import functools
import gc
import heapq
import math
import os
import re
import stat
import uuid

import numpy as np
from google.protobuf import message as _message
from google.protobuf import text_format, unknown_fields

from tfplus import dtypes as _dt
from tfplus.framework import (
    _VALID_NAME,
    Graph,
    Operation,
    Tensor,
    TensorShape,
    get_default_graph,
    input_count_error,
)
from tfplus.proto import attr_value_pb2, graph_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tfplus.registry import OPS

__all__ = ["as_graph_def", "import_graph_def", "parse_graph_def", "read_graph_def", "write_graph",
           "make_tensor_proto", "make_ndarray", "node_to_proto", "atomic_write"]

# GraphDef.versions.producer: a TensorFlow-1.x-era GraphDef version (our ops have TF1 semantics). TensorFlow
# accepts any producer at or above its min_producer (0); min_consumer stays 0, so every consumer may read it.
PRODUCER = 134
# The field of TensorFlow's GraphDef that tfplus does not model (debug_info): a GraphDef that TensorFlow
# wrote may carry them. Any other unknown top-level field means the bytes are not a GraphDef.
_TF_ONLY_GRAPH_FIELDS = {5}
# Attrs TensorFlow writes that do not change the result where tfplus lacks them: kernel-choice hints (cuDNN;
# MatMul's grad_a/grad_b mark a gradient's matmul), and
# explicit paddings left empty (they apply only to padding="EXPLICIT"). Dropped on import when the op does not
# declare them; any other undeclared attr is an error, as it may change what the op computes.
# TensorFlow's control-flow ops that tfplus does not import: TF1's dataflow ones, and of TF2's functional ones
# (with a function library) all but If and While, which tfplus's own If/While are (see "Graph -> GraphDef").
_TF_CONTROL_FLOW = {"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "RefSwitch", "RefMerge",
                    "RefEnter", "RefExit", "RefNextIteration", "StatelessCase", "Case", "PartitionedCall",
                    "StatefulPartitionedCall"}
# TensorFlow's functional If/While op types -> tfplus's.
_FUNCTIONAL = {"If": "If", "StatelessIf": "If", "While": "While", "StatelessWhile": "While"}
_TF_NO_EFFECT_ATTRS = {
    "use_cudnn_on_gpu": lambda av: True,
    "grad_a": lambda av: True,
    "grad_b": lambda av: True,
    "explicit_paddings": lambda av: not av.list.i,
}


# -- shapes and tensors --------------------------------------------------------------------------------------
def shape_to_proto(shape) -> tensor_shape_pb2.TensorShapeProto:
    """None -> unknown rank; a None dimension -> size -1 (TensorFlow's 'unknown')."""
    dims = TensorShape(shape).dims_tuple
    if dims is None:
        return tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else d) for d in dims])


def shape_from_proto(proto: tensor_shape_pb2.TensorShapeProto) -> tuple | None:
    """The shape a TensorShapeProto holds; -1 is an unknown dimension, any other negative size an error."""
    if proto.unknown_rank:
        if proto.dim:
            raise ValueError(f"a shape of unknown rank cannot list dimensions, got {len(proto.dim)}")
        return None
    dims = tuple(d.size for d in proto.dim)
    for i, d in enumerate(dims):
        if d < -1:
            raise ValueError(f"dimension {i} of shape {list(dims)} is {d}; a size must be >= 0 (-1: unknown)")
    return tuple(None if d == -1 else d for d in dims)


def _dtype_from_enum(enum: int) -> _dt.DType:
    try:
        return _dt.as_dtype(int(enum))
    except TypeError:
        name = types_pb2.DataType.Name(enum) if enum in types_pb2.DataType.values() else f"DataType {enum}"
        raise TypeError(f"{name} is not supported by tfplus; supported: "
                        f"{', '.join(d.name for d in _dt.ALL)}") from None


def make_tensor_proto(values, dtype=None, shape=None) -> tensor_pb2.TensorProto:
    """An array as a TensorProto with `tensor_content` (raw little-endian bytes, row-major), as TensorFlow
    writes NumPy arrays. A single value is broadcast to `shape` if given.

        >>> make_tensor_proto(np.float32([1, 2])).tensor_content
        b'\\x00\\x00\\x80?\\x00\\x00\\x00@'
    """
    dtype = None if dtype is None else _dt.as_dtype(dtype)
    arr = np.asarray(values, dtype=None if dtype is None else dtype.np)
    if arr.dtype.kind in "SU":  # bytes or str: a string tensor
        arr = arr.astype(object)
    dtype = dtype or _dt.as_dtype(arr.dtype)
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        arr = np.broadcast_to(arr.reshape(()), shape) if arr.size == 1 else arr.reshape(shape)
    if dtype is _dt.string:  # string_val, one bytes value per element
        return tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum, tensor_shape=shape_to_proto(arr.shape),
                                      string_val=[_to_bytes(v) for v in arr.reshape(-1)])
    proto = tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum, tensor_shape=shape_to_proto(arr.shape))
    if arr.size > 1 and not any(arr.strides):  # one value broadcast (a fill): one value, TensorFlow's rule
        field, raw = _VAL_FIELDS[dtype.name]
        first = arr.reshape(-1)[:1]
        getattr(proto, field).extend((first.view(np.uint16) if dtype is _dt.float16 else first.astype(raw)).tolist())
        return proto
    proto.tensor_content = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    return proto


# The typed field TensorFlow uses for each dtype when `tensor_content` is empty, and the NumPy type its
# values arrive in (half_val holds float16 bit patterns, read as int64 to check their range).
_VAL_FIELDS = {
    "float16": ("half_val", np.int64), "float32": ("float_val", np.float32),
    "float64": ("double_val", np.float64), "int32": ("int_val", np.int64), "int16": ("int_val", np.int64),
    "int8": ("int_val", np.int64), "uint8": ("int_val", np.int64), "int64": ("int64_val", np.int64),
    "bool": ("bool_val", np.bool_),
}


def _max_tensor_bytes() -> int:
    """The largest tensor value a file may declare: this machine's physical memory (2^48 where unknown)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 1 << 48


def make_ndarray(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """A TensorProto's value as a new array. Reads `tensor_content` or the typed `*_val` field; with fewer
    values than elements the last value fills the rest (TensorFlow's rule: one value fills everything).
    Sizes are checked against the bytes present, and values against the dtype's range, before allocating."""
    return _decode_tensor(proto, fill_view=False)


def _decode_tensor(proto: tensor_pb2.TensorProto, fill_view: bool) -> np.ndarray:
    """make_ndarray; with `fill_view`, a tensor filled from one value is a read-only broadcast of it, so a
    small file cannot make us allocate a large array before anything runs."""
    dtype = _dtype_from_enum(proto.dtype)
    shape = shape_from_proto(proto.tensor_shape)
    if shape is None or None in shape:
        raise ValueError(f"a tensor value must have a fully known shape, got {TensorShape(shape)}")
    n = math.prod(shape)  # NOTE: Python ints: np.prod in int64 wraps for huge declared shapes
    if n * dtype.size > _max_tensor_bytes():
        raise ValueError(f"a {dtype.name} tensor of shape {TensorShape(shape)} needs {n * dtype.size:.3g} bytes, "
                         f"more than this machine's memory ({_max_tensor_bytes():.3g} bytes)")
    if dtype is _dt.string:
        if len(proto.string_val) > n or (len(proto.string_val) < n and n > 1 << 16):  # no huge fills
            raise ValueError(f"string_val has {len(proto.string_val)} values but shape {TensorShape(shape)} has "
                             f"{n} elements")
        out = np.empty(n, object)
        out[:] = list(proto.string_val) + [proto.string_val[-1] if proto.string_val else b""] * (
            n - len(proto.string_val))
        return out.reshape(shape)
    if proto.tensor_content:
        if len(proto.tensor_content) != n * dtype.size:
            raise ValueError(f"tensor_content has {len(proto.tensor_content)} bytes but a {dtype.name} "
                             f"tensor of shape {TensorShape(shape)} needs {n * dtype.size}")
        if dtype is _dt.bool_:  # NOTE: a byte other than 0 or 1 is not a valid NumPy bool
            return (np.frombuffer(proto.tensor_content, np.uint8) != 0).reshape(shape)
        return np.frombuffer(proto.tensor_content, dtype.np.newbyteorder("<")).astype(dtype.np).reshape(shape)
    field, raw = _VAL_FIELDS[dtype.name]
    vals = np.array(getattr(proto, field), dtype=raw)
    if vals.size > n:
        raise ValueError(f"{field} has {vals.size} values but shape {TensorShape(shape)} has {n} elements")
    _check_range(vals, np.uint16 if dtype is _dt.float16 else dtype.np, field)
    vals = vals.astype(np.uint16).view(np.float16) if dtype is _dt.float16 else vals.astype(dtype.np)
    if vals.size == n:
        return vals.reshape(shape)
    if vals.size <= 1:
        filled = np.broadcast_to(vals.reshape(()) if vals.size else np.zeros((), dtype.np), shape)
        return filled if fill_view else filled.copy()
    return np.concatenate([vals, np.full(n - vals.size, vals[-1], dtype.np)]).reshape(shape)


def _check_range(vals: np.ndarray, target: np.dtype, field: str) -> None:
    """Integer values must fit the dtype they are read as (TensorFlow stores uint8/int8/int16 in int_val)."""
    target = np.dtype(target)
    if target.kind not in "iu" or vals.size == 0:
        return
    info = np.iinfo(target)
    lo, hi = int(vals.min()), int(vals.max())
    if lo < info.min or hi > info.max:
        bad = lo if lo < info.min else hi
        raise ValueError(f"{field} holds {bad}, out of range for {target.name} [{info.min}, {info.max}]")


def _frozen_ndarray(proto):
    arr = _decode_tensor(proto, fill_view=True)
    arr.flags.writeable = False  # like tf.constant's value: the graph owns it
    return arr


# -- attrs ---------------------------------------------------------------------------------------------------
def _to_bytes(v) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


def _from_bytes(b: bytes):
    try:
        return b.decode()
    except UnicodeDecodeError:
        return b


# attr type -> (AttrValue field, Python value -> proto value, proto value -> Python value)
_ATTR_KINDS = {
    "string": ("s", _to_bytes, _from_bytes),
    "int": ("i", int, int),
    "float": ("f", float, float),
    "bool": ("b", bool, bool),
    "type": ("type", lambda v: _dt.as_dtype(v).as_datatype_enum, _dtype_from_enum),
    "shape": ("shape", shape_to_proto, shape_from_proto),
    "tensor": ("tensor", make_tensor_proto, _frozen_ndarray),
}
_MESSAGE_FIELDS = ("shape", "tensor")


@functools.lru_cache(maxsize=None)
def _attr_kind(kind: str):
    """(AttrValue field, converters, is a list) for a declared attr type such as 'int' or 'list(shape)'."""
    is_list = kind.startswith("list(") and kind.endswith(")")
    base = kind[5:-1] if is_list else kind
    if base == "func":  # NOTE: only If and While have one; node_to_proto writes their sub-graphs as functions
        raise ValueError("a func attr is a control-flow sub-graph, written as a function of the GraphDef's library "
                         "by the If/While export (_control_flow_attrs), not as a plain attr")
    if base not in _ATTR_KINDS:
        raise ValueError(f"attr type {kind!r} is not supported; supported: {sorted(_ATTR_KINDS)}, list(...)")
    return (*_ATTR_KINDS[base], is_list)


def attr_to_proto(kind: str, value) -> attr_value_pb2.AttrValue:
    """A Python attr value as an AttrValue, by its declared type: `attr_to_proto("list(int)", [1, 2])`."""
    field, to_proto, _, is_list = _attr_kind(kind)
    av = attr_value_pb2.AttrValue()
    if is_list:
        av.list.SetInParent()  # an empty list is still a list (TensorFlow writes `list {}`)
        getattr(av.list, field).extend([to_proto(v) for v in value])
    elif field in _MESSAGE_FIELDS:
        getattr(av, field).CopyFrom(to_proto(value))
    else:
        setattr(av, field, to_proto(value))
    return av


def attr_from_proto(kind: str, av: attr_value_pb2.AttrValue):
    """The Python value of an AttrValue whose declared type is `kind` (lists come back as lists)."""
    field, _, from_proto, is_list = _attr_kind(kind)
    which = av.WhichOneof("value")
    if which != ("list" if is_list else field):
        raise ValueError(f"the AttrValue holds {which or 'nothing'} where the op declares {kind!r}")
    if is_list:
        return [from_proto(v) for v in getattr(av.list, field)]
    return from_proto(getattr(av, field))


# -- Graph -> GraphDef ---------------------------------------------------------------------------------------
# NOTE (control flow): tfplus's If and While hold their sub-graphs (FuncGraph) as attrs. A GraphDef holds them as
# FunctionDefs in its library, called by name, in TensorFlow's functional form (TF2's If/While), so TensorFlow
# imports and runs what tfplus writes:
# - If: both branches take every input (Tin); tfplus's then branch uses the first n_then, the else branch the rest.
# - While: TensorFlow's loop carries every input (the loop variables, then cond's and body's captures, which its
#   body returns unchanged) and has one output per input. tfplus's While also outputs each loop variable's history
#   and the iteration count (what its gradient reads); where the graph reads them, the loop also carries what
#   TensorFlow's while_v2 carries for that: one TensorList per loop variable (EmptyTensorList before the loop,
#   TensorListPushBack in the body, TensorListStack after it gives the history) and a counter. Those nodes have the
#   attr _tfplus_accumulator: tfplus's import drops them and reads the history and count from its While again.
# The attrs _tfplus_n_then, _tfplus_n_loop_vars and _tfplus_n_cond (TensorFlow ignores attrs named "_...") keep
# the split, so a round trip is exact; an If or While that TensorFlow wrote imports with every input used by both
# branches, or carried as a loop variable.
_ACC, _ACC_SCOPE = "_tfplus_accumulator", "tfplus_accumulator"  # the nodes' marking attr, their names' scope
_VARIANT, _INT32 = types_pb2.DT_VARIANT, types_pb2.DT_INT32


def _accumulates(op: Operation) -> bool:
    """Whether a While's history or count is read, so that its GraphDef form carries the accumulators."""
    return op.type == "While" and any(t.consumers() for t in op.outputs[len(op.attrs["T"]):])


def _output_number(t: Tensor) -> int:
    """`t`'s output index in a GraphDef: a While's TensorLists and count come after the captures it passes on."""
    op, i = t.op, t.value_index
    if op.type != "While" or i < len(op.attrs["T"]):
        return i
    return i + len(op.inputs) - len(op.attrs["T"])


def _history_node(t: Tensor) -> str | None:
    """The name of the TensorListStack node that gives a While's history output `t` (None for other tensors)."""
    op, n = t.op, len(t.op.attrs["T"]) if t.op.type == "While" else 0
    return f"{op.name}/{_ACC_SCOPE}/history_{t.value_index - n}" if n <= t.value_index < 2 * n else None


def _input_name(t: Tensor) -> str:
    i = _output_number(t)
    return _history_node(t) or (t.op.name if i == 0 else f"{t.op.name}:{i}")


def _output_arg(op: Operation, i: int) -> tuple[str, int]:
    """Output `i` (GraphDef numbering) of `op` as (output arg name, index in that arg), how a FunctionDef names it:
    one name per output, or one list-valued arg (Split's `output`, a While's `output`)."""
    names = op.op_def.outputs
    if len(names) == len(op.outputs):
        return names[i], 0
    if len(names) == 1:
        return names[0], i
    raise ValueError(f"{op.type} '{op.name}': its registration names outputs {names} but it has {len(op.outputs)}, "
                     "so a function cannot refer to them; give each output a name in register_op(outputs=...)")


class _Library:
    """The FunctionDefs of a graph's control-flow sub-graphs, named once each, in the order they are met."""

    def __init__(self):
        self.functions: list[graph_pb2.FunctionDef] = []
        self._names: dict[tuple, str] = {}
        self._taken: set[str] = set()

    def function(self, sub, what: str, layout: tuple) -> graph_pb2.NameAttrList:
        """`sub` as a function taking the args `layout` describes (see _function_def); what calls it by name."""
        key = (id(sub), layout)
        if key not in self._names:
            name = base = re.sub(r"[^A-Za-z0-9_]", "_", what)
            k = 0
            while name in self._taken:
                k += 1
                name = f"{base}_{k}"
            self._taken.add(name)
            self._names[key] = name
            self.functions.append(_function_def(sub, name, *layout, self))
        return attr_value_pb2.NameAttrList(name=self._names[key])


def _acc_node(name: str, op: str, inputs: list, **attrs) -> graph_pb2.NodeDef:
    """A node of a While's accumulators (see the NOTE above); attrs are AttrValue keyword arguments."""
    node = graph_pb2.NodeDef(name=name, op=op, input=inputs)
    for key, value in {**attrs, _ACC: attr_value_pb2.AttrValue(b=True)}.items():
        node.attr[key].CopyFrom(value if isinstance(value, attr_value_pb2.AttrValue) else
                                attr_value_pb2.AttrValue(**value))
    return node


def _int32_const(name: str, values) -> graph_pb2.NodeDef:
    return _acc_node(name, "Const", [], dtype={"type": _INT32},
                     value={"tensor": make_tensor_proto(np.int32(values))})


def _function_def(sub, name: str, arg_types: tuple, owned: tuple, n_passed: int, n_acc: int, push: bool,
                  library: _Library):
    """A FunctionDef of `sub` whose args have `arg_types`; sub.all_inputs are the args at indices `owned` (the
    others are unused); it returns sub.outputs, then the last `n_passed` args unchanged (a While's captures).
    With `n_acc`, n_acc TensorLists and a counter follow those args; with `push` (a While's body), the first n_acc
    args are pushed onto the lists and the counter counts (see the NOTE above), returned after the rest."""
    fdef = graph_pb2.FunctionDef()
    fdef.signature.name = name
    args = set(sub.all_inputs)
    ops = [op for op in sub.get_operations() if not (op.type == "Placeholder" and op.outputs[0] in args)]
    taken = {op.name for op in ops}
    by_index = dict(zip(owned, sub.all_inputs))
    arg_names, refs = [], {}
    acc_args = [(f"{_ACC_SCOPE}_list_{k}", _VARIANT) for k in range(n_acc)] + [(f"{_ACC_SCOPE}_count", _INT32)]
    acc_args = acc_args if n_acc else []
    for i, dtype in enumerate([_dt.as_dtype(d).as_datatype_enum for d in arg_types] + [t for _, t in acc_args]):
        ph = by_index.get(i)
        # NOTE: TensorFlow wants argument names to be lowercase identifiers, unique among the body's nodes.
        if i >= len(arg_types):
            base = acc_args[i - len(arg_types)][0]
        else:
            base = re.sub(r"[^a-z0-9_]", "_", ph.op.name.lower()) if ph is not None else f"unused{i}"
        arg = base = base if base[0].isalpha() else f"arg_{base}"
        k = 0
        while arg in taken:
            k += 1
            arg = f"{base}_{k}"
        taken.add(arg)
        arg_names.append(arg)
        fdef.signature.input_arg.add(name=arg, type=dtype)
        if ph is not None:
            refs[ph] = arg
            fdef.arg_attr[i].attr["_output_shapes"].CopyFrom(attr_to_proto("list(shape)", [ph._shape]))

    def ref(t: Tensor) -> str:
        if t in refs:
            return refs[t]
        history = _history_node(t)
        if history:
            return f"{history}:tensor:0"
        out, k = _output_arg(t.op, _output_number(t))
        return f"{t.op.name}:{out}:{k}"
    for op in ops:
        fdef.node_def.extend(_node_defs(op, library, ref, f"{name}/"))
    passed = range(len(arg_types) - n_passed, len(arg_types))
    returns = [(ref(t), t.dtype.as_datatype_enum) for t in sub.outputs]
    returns += [(arg_names[i], _dt.as_dtype(arg_types[i]).as_datatype_enum) for i in passed]
    if push and n_acc:
        lists, count = arg_names[len(arg_types):-1], arg_names[-1]
        for k, lst in enumerate(lists):
            fdef.node_def.append(_acc_node(f"{_ACC_SCOPE}/push_{k}", "TensorListPushBack", [lst, arg_names[k]],
                                           element_dtype={"type": _dt.as_dtype(arg_types[k]).as_datatype_enum}))
            returns.append((f"{_ACC_SCOPE}/push_{k}:output_handle:0", _VARIANT))
        fdef.node_def.append(_int32_const(f"{_ACC_SCOPE}/one", 1))
        fdef.node_def.append(_acc_node(f"{_ACC_SCOPE}/count", "AddV2", [count, f"{_ACC_SCOPE}/one:output:0"],
                                       T={"type": _INT32}))
        returns.append((f"{_ACC_SCOPE}/count:z:0", _INT32))
    for k, (r, dtype) in enumerate(returns):
        fdef.signature.output_arg.add(name=f"output_{k}", type=dtype)
        fdef.ret[f"output_{k}"] = r
    fdef.signature.is_stateful = any(op.op_def.stateful for op in ops)
    return fdef


def _control_flow_attrs(op: Operation, library: _Library, prefix: str, n_acc: int) -> dict:
    """A tfplus If or While's attrs in TensorFlow's functional form, its sub-graphs added to `library`; a While
    with `n_acc` carries that many TensorLists and a counter after its inputs."""
    a, where = op.attrs, f"{prefix}{op.name}"
    types = tuple(t.dtype for t in op.inputs[op.type == "If":])
    if op.type == "If":
        n = a["n_then"]
        then = library.function(a["then_branch"], f"{where}_then", (types, tuple(range(n)), 0, 0, False))
        other = library.function(a["else_branch"], f"{where}_else", (types, tuple(range(n, len(types))), 0, 0, False))
        return {"Tcond": attr_to_proto("type", a["Tcond"]), "Tin": attr_to_proto("list(type)", types),
                "Tout": attr_to_proto("list(type)", a["Tout"]), "then_branch": attr_value_pb2.AttrValue(func=then),
                "else_branch": attr_value_pb2.AttrValue(func=other),
                "output_shapes": attr_to_proto("list(shape)", a["output_shapes"]),
                "_tfplus_n_then": attr_to_proto("int", n)}
    n, n_cond = len(a["T"]), a["n_cond"]
    loop, caps = tuple(range(n)), len(types) - n
    cond = library.function(a["cond"], f"{where}_cond", (types, loop + tuple(range(n, n + n_cond)), 0, n_acc, False))
    body = library.function(a["body"], f"{where}_body",
                            (types, loop + tuple(range(n + n_cond, len(types))), caps, n_acc, True))
    carried = attr_to_proto("list(type)", types)
    carried.list.type.extend([_VARIANT] * n_acc + [_INT32] * bool(n_acc))
    return {"T": carried, "cond": attr_value_pb2.AttrValue(func=cond), "body": attr_value_pb2.AttrValue(func=body),
            "output_shapes": attr_to_proto("list(shape)", _gd_output_shapes(op)),
            "parallel_iterations": attr_to_proto("int", a["parallel_iterations"]),
            "_tfplus_n_loop_vars": attr_to_proto("int", n), "_tfplus_n_cond": attr_to_proto("int", n_cond)}


def _gd_output_shapes(op: Operation) -> list:
    """`op`'s output shapes in GraphDef order: a While's are what TensorFlow's While carries (see the NOTE above)."""
    if op.type != "While":
        return [t._shape for t in op.outputs]
    n = len(op.attrs["T"])
    return [t._shape for t in op.outputs[:n] + op.inputs[n:]] + [()] * (n + 1) * _accumulates(op)


def node_to_proto(op: Operation) -> graph_pb2.NodeDef:
    """One Operation as a NodeDef: inputs "node[:idx]" then control inputs "^node", attrs by declared type (an If's
    or While's sub-graphs as calls of functions named after the node, which as_graph_def writes to its library)."""
    return next(node for node in _node_defs(op, _Library(), _input_name, "") if node.name == op.name)


def _node_defs(op: Operation, library: _Library, ref, prefix: str) -> list[graph_pb2.NodeDef]:
    """`op` as a NodeDef; a While whose history or count is read comes with its accumulators' nodes (see the
    NOTE above), written where `ref` names them (a GraphDef's or a function's inputs)."""
    node = graph_pb2.NodeDef(name=op.name, op=op.type, device=op.device or "")
    node.input.extend([ref(t) for t in op.inputs] + ["^" + c.name for c in op.control_inputs])
    if op.type in ("If", "While"):
        n_acc = len(op.attrs["T"]) if _accumulates(op) else 0
        for key, av in _control_flow_attrs(op, library, prefix, n_acc).items():
            node.attr[key].CopyFrom(av)
        return _with_accumulators(op, node, function=ref is not _input_name) if n_acc else [node]
    declared = op.op_def.attrs
    for key, value in sorted(op.attrs.items()):
        if key not in declared:
            raise ValueError(f"{op.type} '{op.name}': attr {key!r} is not declared by the op registration "
                             f"(declared: {sorted(declared)}); add it to register_op({op.type!r}, attrs=...)")
        if value is None and declared[key] != "shape":  # NOTE: None is a shape (unknown rank), else "unset"
            continue
        try:
            node.attr[key].CopyFrom(attr_to_proto(declared[key], value))
        except (TypeError, ValueError) as e:
            raise type(e)(f"{op.type} '{op.name}': cannot serialize attr {key!r} = {value!r} as "
                          f"{declared[key]!r}: {e}") from None
    return [node]


def _with_accumulators(op: Operation, node: graph_pb2.NodeDef, function: bool) -> list[graph_pb2.NodeDef]:
    """A While's NodeDef carrying its accumulators (see the NOTE above): their nodes before it, then it, then the
    TensorListStack of each history that is read. `function`: the nodes are a function's (inputs name output args)."""
    base, n = f"{op.name}/{_ACC_SCOPE}/", len(op.attrs["T"])

    def out(name: str, arg: str, i: int = 0) -> str:
        return f"{name}:{arg}:{i}" if function else (name if i == 0 else f"{name}:{i}")
    before, after = [_int32_const(f"{base}max_size", -1), _int32_const(f"{base}count0", 0)], []
    for k in range(n):
        shape, dtype = op.attrs["output_shapes"][k], {"type": op.attrs["T"][k].as_datatype_enum}
        dims = -1 if shape is None else [-1 if d is None else d for d in shape]  # TensorFlow's -1: unknown
        before.append(_int32_const(f"{base}shape_{k}", dims))
        before.append(_acc_node(f"{base}list_{k}", "EmptyTensorList", [out(f"{base}shape_{k}", "output"),
                                out(f"{base}max_size", "output")], element_dtype=dtype, shape_type={"type": _INT32}))
        if op.outputs[n + k].consumers():
            after.append(_acc_node(f"{base}history_{k}", "TensorListStack",
                                   [out(op.name, "output", len(op.inputs) + k), out(f"{base}shape_{k}", "output")],
                                   element_dtype=dtype, num_elements={"i": -1}))
    controls = list(node.input[len(op.inputs):])
    del node.input[len(op.inputs):]
    node.input.extend([out(f"{base}list_{k}", "handle") for k in range(n)] + [out(f"{base}count0", "output")] +
                      controls)
    return before + [node] + after


def as_graph_def(graph: Graph | None = None, add_shapes: bool = False) -> graph_pb2.GraphDef:
    """The graph as a GraphDef, nodes in creation order; tf.cond / tf.while_loop sub-graphs as functions of its
    library (see the NOTE above). `add_shapes` adds TensorFlow's `_output_shapes` attr.

        >>> as_graph_def(Graph()).versions.producer
        134
    """
    graph = graph or get_default_graph()
    gd = graph_pb2.GraphDef(versions=graph_pb2.VersionDef(producer=PRODUCER, min_consumer=0))
    library = _Library()
    for op in graph.get_operations():
        nodes = _node_defs(op, library, _input_name, "")
        if add_shapes and op.outputs:
            node = next(node for node in nodes if node.name == op.name)
            node.attr["_output_shapes"].CopyFrom(attr_to_proto("list(shape)", _gd_output_shapes(op)))
        gd.node.extend(nodes)
    if library.functions:
        gd.library.function.extend(library.functions)
    return gd


# -- bytes and files -----------------------------------------------------------------------------------------
def parse_graph_def(data: bytes, source: str | None = None) -> graph_pb2.GraphDef:
    """Parses a binary GraphDef; truncated or foreign bytes raise ValueError naming `source`."""
    where = source or f"{len(data)} bytes"
    gd = graph_pb2.GraphDef()
    try:
        gd.ParseFromString(data)
    except _message.DecodeError as e:
        raise ValueError(f"cannot parse a GraphDef from {where}: {e} (truncated or not a binary GraphDef? "
                         "a text GraphDef is read with read_graph_def(path, as_text=True))") from e
    # NOTE: protobuf keeps fields it does not know; bytes that parse only into such fields are not a GraphDef.
    stray = sorted({f.field_number for f in unknown_fields.UnknownFieldSet(gd)} - _TF_ONLY_GRAPH_FIELDS)
    if stray:
        raise ValueError(f"{where} is not a GraphDef: it has unknown top-level fields {stray}")
    return gd


def read_graph_def(path: str, as_text: bool | None = None) -> graph_pb2.GraphDef:
    """Reads a GraphDef file; `as_text=None` decides by the extension (.pbtxt/.txt are text)."""
    if as_text is None:
        as_text = os.path.splitext(path)[1].lower() in (".pbtxt", ".txt")
    with open(path, "rb") as f:
        data = f.read()
    if not as_text:
        return parse_graph_def(data, source=repr(path))
    try:
        return text_format.Parse(data.decode("utf-8"), graph_pb2.GraphDef())
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot parse a text GraphDef from {path!r}: {e}") from e


def write_graph(graph_or_graph_def, logdir: str, name: str, as_text: bool = True) -> str:
    """tf.train.write_graph: writes the GraphDef to logdir/name (text by default), atomically; returns the
    path.

        >>> write_graph(tf.get_default_graph(), "/tmp/run", "graph.pbtxt")  # doctest: +SKIP
        '/tmp/run/graph.pbtxt'
    """
    gd = graph_or_graph_def.as_graph_def() if isinstance(graph_or_graph_def, Graph) else graph_or_graph_def
    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(logdir, name)
    data = text_format.MessageToString(gd).encode() if as_text else gd.SerializeToString(deterministic=True)
    atomic_write(path, data)
    return path


def atomic_write(path: str, data: bytes) -> None:
    """Writes `data` to `path` so that readers (and a crash) see the old file or the new one, never a torn
    one (see atomic_open)."""
    with atomic_open(path) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_open(path: str):
    """A binary file to write `path` through: a temporary file in the same folder that on a clean exit is
    fsynced, renamed onto `path` and the rename made durable; on an error it is removed and `path` is as it
    was. For files too large to hold in memory at once (checkpoint data).

        >>> with atomic_open("/tmp/x.bin") as f:  # doctest: +SKIP
        ...     f.write(b"...")
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if os.name == "posix":  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# The temporary files atomic_write names: `.<name>.<12 hex digits>.tmp`.
_ATOMIC_TEMP = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")
# The name scope tf.gradients gives the ops it adds, by default: an imported graph's backward pass (Operation.backward).
_TF_GRADIENTS = re.compile(r"(^|/)gradients(_\d+)?/")


def remove_orphan_temps(folder: str) -> list[str]:
    """Deletes the temporary files that atomic_write left in `folder` when its process was killed mid-write
    (regular files named as atomic_write names them, nothing else); returns their names. Call it only while no
    other process writes into `folder`."""
    removed = []
    for entry in os.scandir(folder):
        if _ATOMIC_TEMP.fullmatch(entry.name) and stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
            with contextlib.suppress(FileNotFoundError):
                os.remove(entry.path)
                removed.append(entry.name)
    return sorted(removed)


# -- GraphDef -> Graph ---------------------------------------------------------------------------------------
def _split_input(s: str) -> tuple[str, int, bool]:
    """'^n' -> ('n', -1, True); 'n:2' -> ('n', 2, False); 'n' -> ('n', 0, False)."""
    if s.startswith("^"):
        return s[1:], -1, True
    name, sep, idx = s.rpartition(":")
    if sep and idx.isdigit():
        return name, int(idx), False
    return s, 0, False


def _canonical(key: str) -> str:
    name, idx, control = _split_input(key)
    return f"^{name}" if control else f"{name}:{idx}"


class _Node:
    """What import needs of one NodeDef, read once: protobuf field access is slow."""
    __slots__ = ("name", "op", "device", "inputs", "controls", "attrs", "calls")

    def __init__(self, node: graph_pb2.NodeDef):
        self.name, self.op, self.device = node.name, node.op, node.device
        self.inputs: list[tuple[str, int, str]] = []  # (source node, output index, as written)
        self.controls: list[str] = []
        self.calls: list[tuple] = []  # an If's or While's sub-graphs (see _functional_attrs)
        for s in node.input:
            src, idx, control = _split_input(s)
            if control:
                self.controls.append(src)
            elif self.controls:
                raise ValueError(f"import_graph_def: node {self.name!r} ({self.op}) lists data input {s!r} "
                                 "after a control input; control inputs ('^name') must come last")
            else:
                self.inputs.append((src, idx, s))


def _node_attrs(node: graph_pb2.NodeDef) -> dict:
    declared = OPS[node.op].attrs
    attrs = {}
    for key, av in node.attr.items():
        if key.startswith("_") or (key not in declared and _TF_NO_EFFECT_ATTRS.get(key, lambda av: False)(av)):
            continue  # TensorFlow's internal attrs (_output_shapes, _class) and kernel hints: not op semantics
        if key not in declared:
            raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) has attr {key!r}, which "
                             f"tfplus's {node.op} does not declare (declared: {sorted(declared)})")
        try:
            attrs[key] = attr_from_proto(declared[key], av)
        except (TypeError, ValueError) as e:
            raise type(e)(f"import_graph_def: node {node.name!r} ({node.op}), attr {key!r}: {e}") from None
    return attrs


def _check_node(node: _Node) -> None:
    """What a node must satisfy before it is created: its input count fits the op's signature, a Const's
    value has the declared dtype."""
    op_def = OPS[node.op]
    problem = input_count_error(op_def, node.attrs, len(node.inputs))
    if problem:
        raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) {problem}: "
                         f"{[s for _, _, s in node.inputs]}; fix the node's inputs (or its attr N)")
    if node.op == "Const" and "value" in node.attrs and "dtype" in node.attrs:
        have, want = _dt.as_dtype(node.attrs["value"].dtype), node.attrs["dtype"]
        if have is not want:
            raise TypeError(f"import_graph_def: node {node.name!r} (Const) declares dtype {want.name} but its "
                            f"value is {have.name}; make attr dtype match the value's dtype")
    for key in ("dtype", "T") if node.op in ("Const", "Placeholder", "VariableV2") else ():
        if key in op_def.attrs and key not in node.attrs:
            raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) lacks attr {key!r}")


def _check_type_attr(node: _Node, op: Operation) -> None:
    """Attr T picks the kernel, so it must be the dtype of an input (every registered op with attr T and
    inputs takes one input of dtype T); a GraphDef can say otherwise."""
    t = node.attrs.get("T")
    if op.op_def.attrs.get("T") != "type" or t is None or not op.inputs:
        return
    if all(x.dtype is not t for x in op.inputs):
        have = ", ".join(f"{x.name} {x.dtype.name}" for x in op.inputs)
        raise TypeError(f"import_graph_def: node {node.name!r} ({node.op}) has attr T={t.name}, but no input "
                        f"has that dtype (inputs: {have}); fix attr T or the inputs")


def _topological(nodes: list[_Node], deps: dict[str, list[str]]) -> list[_Node]:
    """Kahn's algorithm; ties keep GraphDef order (a GraphDef need not be sorted)."""
    index = {n.name: i for i, n in enumerate(nodes)}
    waiting = {name: len(ds) for name, ds in deps.items()}
    users: dict[str, list[str]] = {n.name: [] for n in nodes}
    for name, ds in deps.items():
        for d in ds:
            users[d].append(name)
    ready = [index[name] for name, k in waiting.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        for u in users[node.name]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, index[u])
    if len(order) != len(nodes):
        stuck = sorted(name for name, k in waiting.items() if k > 0)[:5]
        raise ValueError(f"import_graph_def: the GraphDef has a cycle through {stuck}")
    return order


@contextlib.contextmanager
def _gc_paused():
    """Pauses the cyclic garbage collector: an import makes many linked objects and frees none, and the
    collector's passes over them took half the time of importing a 100k-node GraphDef."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def _all_or_nothing(graph: Graph):
    """Undoes every node added to `graph` inside the block if the block fails: an import adds all its nodes
    or none."""
    n_ops, names = len(graph._ops), dict(graph._names_in_use)
    try:
        yield
    except BaseException:
        for op in graph._ops[n_ops:]:
            del graph._by_name[op.name]
            for t in op.inputs:
                users = graph._consumers.get(t)
                if users is not None and op in users:
                    users.remove(op)
        del graph._ops[n_ops:]
        graph._names_in_use = names
        raise


def import_graph_def(graph_def, input_map: dict | None = None, return_elements: list | None = None,
                     name: str | None = None) -> list | None:
    """tf.import_graph_def: recreates `graph_def`'s nodes in the default graph under the scope `name`
    ("import" if None, none if ""), through the op registry.

    `input_map` maps GraphDef tensor names ("x:0" or "x") to Tensors of this graph that replace them;
    `return_elements` names what to return: "n:i" gives a Tensor, "n" an Operation (e.g. an imported
    variable's "w/Assign" or the "init" op, which a new Session must run unless it restores a checkpoint).

        >>> y, init = tf.import_graph_def(gd, return_elements=["y:0", "init"])  # doctest: +SKIP

    Everything that can be checked beforehand (op types, attrs, input counts, inputs, names, Const values) is,
    before any node is created; what only shape inference finds (an output index a node does not have, shapes
    that do not fit) undoes the nodes already added, so an import adds all of the GraphDef or nothing.
    """
    with _gc_paused():
        return _import(graph_def, input_map, return_elements, name)


def _import(graph_def, input_map, return_elements, name):
    if not isinstance(graph_def, graph_pb2.GraphDef):
        if not hasattr(graph_def, "SerializeToString"):
            raise TypeError(f"import_graph_def: expected a GraphDef, got {type(graph_def).__name__}; "
                            "parse bytes with tfplus.graph_io.parse_graph_def")
        graph_def = parse_graph_def(graph_def.SerializeToString(), source=type(graph_def).__name__)
    graph = get_default_graph()
    library: dict[str, graph_pb2.FunctionDef] = {}
    for fdef in graph_def.library.function:
        if fdef.signature.name in library:
            raise ValueError(f"import_graph_def: the GraphDef's library defines function "
                             f"{fdef.signature.name!r} twice")
        library[fdef.signature.name] = fdef
    nodes, by_name = _parse(graph_def.node)

    mapped: dict[str, Tensor | Operation] = {}
    for key, value in (input_map or {}).items():
        value = value._as_tensor() if hasattr(value, "_as_tensor") else value
        wanted = Operation if key.startswith("^") else Tensor
        if not isinstance(value, wanted) or value.graph is not graph:
            raise ValueError(f"import_graph_def: input_map[{key!r}] must be a {wanted.__name__} of the "
                             f"default graph, got {value!r}")
        mapped[_canonical(key)] = value
    deps, used = _dependencies(nodes, by_name, mapped)
    unused = sorted(set(mapped) - used)
    if unused:
        raise ValueError(f"import_graph_def: input_map names inputs that no node of the GraphDef uses: "
                         f"{unused}")
    wanted_elements = []
    for elem in return_elements or ():
        src, idx, control = _split_input(elem) if isinstance(elem, str) else ("", 0, True)
        if control or src not in by_name:
            raise ValueError(f"import_graph_def: return element {elem!r} names no node of the GraphDef "
                             "(write 'node' for an operation, 'node:i' for its i-th output)")
        wanted_elements.append((elem, src, idx if ":" in elem else None))
    order = _topological(nodes, deps)

    with _all_or_nothing(graph), graph.name_scope("import" if name is None else name) as scope:
        created = _create(graph, order, mapped, scope, (library, {}), ())
        result = [created[src] if idx is None else
                  _output(created[src], idx, f"return element {elem!r} names output {idx}")
                  for elem, src, idx in wanted_elements]
    return None if return_elements is None else result


def _parse(protos) -> tuple[list[_Node], dict[str, _Node]]:
    """The NodeDefs read and checked as far as they can be before anything is created. A While's accumulators
    (see the NOTE at "Graph -> GraphDef") are dropped: what reads a history reads the While's output again."""
    nodes: list[_Node] = []
    by_name: dict[str, _Node] = {}
    history = {p.name: _split_input(p.input[0])[:2] for p in protos
               if _ACC in p.attr and p.op == "TensorListStack" and p.input}
    for proto in protos:
        if _ACC in proto.attr:
            continue
        node = _Node(proto)
        node.inputs = [(*history[src], s) if src in history and idx == 0 else (src, idx, s)
                       for src, idx, s in node.inputs]
        if not _VALID_NAME.match(node.name):
            raise ValueError(f"import_graph_def: {node.name!r} is not a valid node name (letters, digits, "
                             "'.', '_', '-', '/')")
        if node.name in by_name:
            raise ValueError(f"import_graph_def: the GraphDef has two nodes named {node.name!r}")
        if node.op in _TF_CONTROL_FLOW:
            raise ValueError(f"import_graph_def: node {node.name!r} is TensorFlow control flow ({node.op}), which "
                             "tfplus does not import; build the loop or branch in tfplus with tf.while_loop / "
                             "tf.cond instead")
        if node.op in _FUNCTIONAL:
            node.attrs = _functional_attrs(node, proto)
            node.op = _FUNCTIONAL[node.op]
        elif node.op not in OPS:
            raise ValueError(f"import_graph_def: node {node.name!r} has op type {node.op!r}, which is not "
                             f"registered in tfplus; registered op types: {', '.join(sorted(OPS))}")
        else:
            node.attrs = _node_attrs(proto)
        _check_node(node)
        by_name[node.name] = node
        nodes.append(node)
    return nodes, by_name


def _dependencies(nodes, by_name, mapped) -> tuple[dict[str, list[str]], set[str]]:
    """Each node's sources among `nodes`, and the keys of `mapped` that nodes use; an input that is neither
    fails, naming it."""
    used: set[str] = set()
    deps: dict[str, list[str]] = {}
    for node in nodes:
        ds = deps[node.name] = []
        for src, idx, s in node.inputs:
            key = f"{src}:{idx}"
            if key in mapped:
                used.add(key)
            elif src in by_name:
                ds.append(src)
            else:
                raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) has input {s!r}, but the "
                                 f"GraphDef has no node {src!r} and input_map does not provide it")
        for src in node.controls:
            if "^" + src in mapped:
                used.add("^" + src)
            elif src in by_name:
                ds.append(src)
            else:
                raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) has control input "
                                 f"'^{src}', but the GraphDef has no node {src!r} and input_map does not "
                                 "provide it")
    return deps, used


def _create(graph: Graph, order: list[_Node], mapped: dict, scope: str, functions: tuple, stack: tuple) -> dict:
    """Creates the sorted nodes in `graph` (an If's or While's functions built as sub-graphs first); returns
    name -> Operation. `functions`: the library by name, and the sub-graphs built from it so far."""
    created: dict[str, Operation] = {}
    for node in order:
        inputs = []
        for src, idx, s in node.inputs:
            target = mapped.get(f"{src}:{idx}")
            if target is None:
                target = _output(created[src], idx, f"node {node.name!r} has input {s!r}")
            inputs.append(target)
        attrs = node.attrs
        if node.calls:
            attrs = dict(attrs)
            where = f"import_graph_def: node {node.name!r} ({node.op})"
            for key, fname, loop, caps, lo, hi, n_out in node.calls:
                args = inputs[lo:hi]
                attrs[key] = _function_graph(graph, functions, fname, where, [t.dtype for t in args], loop, caps,
                                             args[caps.start:caps.stop], n_out, stack)
            if attrs.get("output_shapes") is None:  # TensorFlow's If may leave them out: what both branches give
                from tfplus.ops.control_flow_ops import _merge_shapes
                attrs["output_shapes"] = [_merge_shapes(a._shape, b._shape) for a, b in
                                          zip(attrs["then_branch"].outputs, attrs["else_branch"].outputs)]
        try:
            op = graph.create_op(node.op, inputs, attrs, name=f"{scope}{node.name}/")
        except (TypeError, ValueError) as e:
            raise type(e)(f"import_graph_def: node {node.name!r}: {e}") from None
        _check_type_attr(node, op)
        op.backward = bool(_TF_GRADIENTS.search(op.name))  # a GraphDef carries no marks: TF's gradient scope
        if node.controls:
            have = set(op.control_inputs)
            for src in dict.fromkeys(node.controls):
                c = mapped.get("^" + src) or created[src]
                if c not in have:
                    op.control_inputs.append(c)
                    have.add(c)
        if node.device:
            op.device = node.device
        created[node.name] = op
    return created


def _output(op: Operation, idx: int, what: str) -> Tensor:
    """Output `idx` of `op` as a GraphDef numbers it: a While's passed-through captures (see _output_number) are
    its inputs, unchanged."""
    if op.type == "While":
        n, passed = len(op.attrs["T"]), len(op.inputs) - len(op.attrs["T"])
        if n <= idx < n + passed:
            return op.inputs[idx]
        idx -= passed if idx >= n + passed else 0
    if idx >= len(op.outputs):
        raise ValueError(f"import_graph_def: {what}, but {op.type} '{op.name}' has {len(op.outputs)} "
                         f"output{'' if len(op.outputs) == 1 else 's'}")
    return op.outputs[idx]


# -- GraphDef -> Graph: functional control flow --------------------------------------------------------------
_REQUIRED = object()  # an attr without a default
_MAX_NESTING = 64  # functions calling functions: deeper is not a graph anyone built, and would exhaust the stack


def _functional_attrs(node: _Node, proto: graph_pb2.NodeDef) -> dict:
    """A functional If or While (tfplus's or TensorFlow's, see the NOTE at "Graph -> GraphDef") as tfplus's attrs;
    its functions, listed in node.calls as (attr, function, loop-variable args, captured args, the node's inputs
    [lo, hi) that are the args, outputs used), become sub-graphs in _create. TensorFlow's If shares its inputs
    between the branches, tfplus's takes each branch's own: those inputs are passed twice."""
    where = f"import_graph_def: node {node.name!r} ({proto.op})"

    def get(key, kind, default):
        if key not in proto.attr:
            if default is _REQUIRED:
                raise ValueError(f"{where} lacks attr {key!r}")
            return default
        try:
            return attr_from_proto(kind, proto.attr[key])
        except (TypeError, ValueError) as e:
            raise type(e)(f"{where}, attr {key!r}: {e}") from None

    def func(key) -> str:
        if key not in proto.attr or proto.attr[key].WhichOneof("value") != "func":
            raise ValueError(f"{where}: attr {key!r} must name a function of the GraphDef's library")
        return proto.attr[key].func.name

    def split(key, lo, hi, total) -> int:
        k = get(key, "int", None)
        if k is not None and not lo <= k <= hi:
            raise ValueError(f"{where}: attr {key!r} is {k}, outside [{lo}, {hi}] for {total} inputs")
        return k
    if _FUNCTIONAL[proto.op] == "If":
        n_in = len(node.inputs) - 1
        tin, tout = get("Tin", "list(type)", _REQUIRED), get("Tout", "list(type)", _REQUIRED)
        if n_in < 0 or len(tin) != n_in:
            raise ValueError(f"{where} has {n_in} inputs after its predicate but attr Tin lists {len(tin)}")
        n_then = split("_tfplus_n_then", 0, n_in, n_in)
        if n_then is None:
            node.inputs = node.inputs + node.inputs[1:]
            node.calls = [("then_branch", func("then_branch"), range(0), range(n_in), 1, 1 + n_in, len(tout)),
                          ("else_branch", func("else_branch"), range(0), range(n_in), 1 + n_in, 1 + 2 * n_in,
                           len(tout))]
            n_then, tin = n_in, tin + tin
        else:
            node.calls = [("then_branch", func("then_branch"), range(0), range(n_then), 1, 1 + n_in, len(tout)),
                          ("else_branch", func("else_branch"), range(0), range(n_then, n_in), 1, 1 + n_in,
                           len(tout))]
        shapes = get("output_shapes", "list(shape)", [])
        return {"Tcond": get("Tcond", "type", _dt.bool_), "Tin": tin, "Tout": tout, "n_then": n_then,
                "output_shapes": shapes if len(shapes) == len(tout) else None}
    n_extra = _accumulators(proto, where)  # carried after the inputs of tfplus's While; dropped here
    types = get("T", "list(type)", _REQUIRED) if not n_extra else \
        attr_from_proto("list(type)", attr_value_pb2.AttrValue(list={"type": proto.attr["T"].list.type[:-n_extra]}))
    if len(types) + n_extra != len(node.inputs):
        raise ValueError(f"{where} has {len(node.inputs)} inputs but attr T lists {len(types) + n_extra}")
    node.inputs = node.inputs[:len(types)]
    n = split("_tfplus_n_loop_vars", 0, len(types), len(types))
    n = len(types) if n is None else n
    n_cond = split("_tfplus_n_cond", 0, len(types) - n, len(types)) or 0
    node.calls = [("cond", func("cond"), range(n), range(n, n + n_cond), 0, len(types), 1),
                  ("body", func("body"), range(n), range(n + n_cond, len(types)), 0, len(types), n)]
    shapes = get("output_shapes", "list(shape)", [])
    return {"T": types[:n], "n_cond": n_cond, "parallel_iterations": get("parallel_iterations", "int", 10),
            "output_shapes": shapes[:n] if len(shapes) >= len(types) else [None] * n}


def _accumulators(proto: graph_pb2.NodeDef, where: str) -> int:
    """How many values a While that tfplus wrote carries for its gradient (a TensorList per loop variable, then a
    counter, see the NOTE at "Graph -> GraphDef"); 0 for any other While."""
    types = list(proto.attr["T"].list.type) if "T" in proto.attr else []
    n_acc = types.count(_VARIANT)
    if n_acc == 0:
        return 0
    n = proto.attr["_tfplus_n_loop_vars"].i if "_tfplus_n_loop_vars" in proto.attr else None
    if n != n_acc or types[-n_acc - 1:] != [_VARIANT] * n_acc + [_INT32]:
        raise TypeError(f"{where} carries DT_VARIANT values, which tfplus has no dtype for (only the TensorLists "
                        "that tfplus writes after a loop's inputs, one per loop variable, then an int32 count)")
    return n_acc + 1


def _function_graph(outer: Graph, functions: tuple, name: str, where: str, arg_types: list, loop: range,
                    caps: range, captured: list, n_out: int, stack: tuple):
    """Function `name` of the library as a sub-graph of `outer`: args `loop` become its loop-variable
    placeholders, args `caps` its capture placeholders (of the outer tensors `captured`), the others are unused
    and must stay so; its first `n_out` results are its outputs. Built once for each such use, and then shared,
    as tfplus shares a sub-graph between an op and its copies (a loop body inlined into its gradient)."""
    from tfplus.ops.control_flow_ops import FuncGraph
    library, built = functions
    if (name, loop, caps, n_out) in built:
        return built[name, loop, caps, n_out]
    fdef = library.get(name)
    if fdef is None:
        raise ValueError(f"{where} calls function {name!r}, which the GraphDef's library does not define")
    if name in stack:
        raise ValueError(f"{where}: function {name!r} calls itself ({' -> '.join(stack + (name,))}); functions "
                         "cannot recurse")
    if len(stack) >= _MAX_NESTING:
        raise ValueError(f"{where}: functions nest more than {_MAX_NESTING} deep ({' -> '.join(stack[:3])} ...)")
    sig = fdef.signature
    # NOTE: a loop body tfplus wrote takes its accumulators after the args the node passes (never read here).
    try:
        have = [_dtype_from_enum(a.type) for a in sig.input_arg[:len(arg_types)]]
    except TypeError as e:
        raise TypeError(f"{where}: function {name!r}: {e}") from None
    if have != list(arg_types) or any(a.type != _VARIANT for a in sig.input_arg[len(arg_types):-1]):
        raise TypeError(f"{where}: function {name!r} takes ({', '.join(d.name for d in have)}) but the node "
                        f"passes ({', '.join(d.name for d in arg_types)})")
    if len(sig.output_arg) < n_out:
        raise ValueError(f"{where}: function {name!r} returns {len(sig.output_arg)} values, the node needs {n_out}")
    g = FuncGraph(outer, name)
    args = {a.name: i for i, a in enumerate(sig.input_arg)}
    mapped = {}
    with g.as_default():
        for i in [*loop, *caps]:
            arg = sig.input_arg[i].name
            if not _VALID_NAME.match(arg) or arg in mapped:
                raise ValueError(f"{where}: function {name!r} has argument name {arg!r}: invalid or repeated")
            av = fdef.arg_attr[i].attr.get("_output_shapes") if i in fdef.arg_attr else None
            try:
                shapes = attr_from_proto("list(shape)", av) if av is not None else []
            except (TypeError, ValueError) as e:
                raise type(e)(f"{where}: function {name!r}, argument {arg!r}'s _output_shapes: {e}") from None
            ph = g.create_op("Placeholder", [], {"dtype": have[i], "shape": shapes[0] if shapes else None},
                             name=f"{arg}/")
            mapped[f"{arg}:0"] = ph.outputs[0]
    phs = list(mapped.values())
    g.inputs, g.capture_placeholders, g.captured = phs[:len(loop)], phs[len(loop):], list(captured)
    g._captures = dict(zip(g.captured, g.capture_placeholders))
    op_types = {n.name: _FUNCTIONAL.get(n.op, n.op) for n in fdef.node_def}
    accumulators = {n.name for n in fdef.node_def if _ACC in n.attr and n.op != "TensorListStack"}
    outputs_of = {**{op: OPS[op].outputs for op in set(op_types.values()) if op in OPS}, "TensorListStack": ("tensor",)}

    def graph_input(s: str) -> str:
        """A function's input ("arg", "node:output_arg:i" or "^node") as a GraphDef writes it."""
        if s.startswith("^"):
            return s
        if s in args:
            if f"{s}:0" not in mapped:
                raise ValueError(f"{where}: function {name!r} reads argument {s!r}, which this node does not "
                                 "pass to it")
            return s
        src, out, k = (s.split(":") + ["0"])[:3] if s.count(":") in (1, 2) else (s, None, None)
        if src in accumulators:  # a loop's TensorList or count, which _functional_attrs drops with them
            return s
        names = outputs_of.get(op_types.get(src), ())
        if out not in names or not k.isdigit():
            raise ValueError(f"{where}: function {name!r} has input {s!r}, which names no argument and no "
                             "node output ('node:output_arg:index')")
        return f"{src}:{names.index(out) + int(k)}"
    body, history = [], {}
    for proto in fdef.node_def:
        node = graph_pb2.NodeDef()
        node.CopyFrom(proto)
        if _ACC not in proto.attr or proto.op == "TensorListStack":  # the others are dropped unread
            node.input[:] = [graph_input(s) for s in proto.input[:1 if _ACC in proto.attr else None]]
        if _ACC in proto.attr and proto.op == "TensorListStack" and node.input:
            history[node.name] = node.input[0]
        body.append(node)
    nodes, by_name = _parse(body)
    deps, _ = _dependencies(nodes, by_name, mapped)
    with g.as_default():
        created = _create(g, _topological(nodes, deps), mapped, "", functions, stack + (name,))
    outputs = []
    for out in sig.output_arg[:n_out]:
        if out.name not in fdef.ret:
            raise ValueError(f"{where}: function {name!r} does not say what its result {out.name!r} is (ret)")
        src, idx, _ = _split_input(graph_input(fdef.ret[out.name]))
        if src in history and idx == 0:
            src, idx, _ = _split_input(history[src])
        if src in args:
            outputs.append(mapped[f"{src}:0"])
        elif src in created:
            outputs.append(_output(created[src], idx, f"function {name!r}'s result {out.name!r}"))
        else:
            raise ValueError(f"{where}: function {name!r}'s result {out.name!r} is {fdef.ret[out.name]!r}, which "
                             "names no node of the function")
    g.outputs = outputs
    built[name, loop, caps, n_out] = g
    return g
