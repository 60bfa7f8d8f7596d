"""TensorProto, TensorShapeProto and AttrValue encoding (TensorFlow's tensor_util): NumPy values and static
shapes to and from the protos of tfplus/proto, which use TensorFlow's field numbers; and the dtype TensorFlow
gives a Python or NumPy value. Below the graph: it imports no graph, op or kernel module.

    >>> make_ndarray(make_tensor_proto(np.float32([1, 2])))
    array([1., 2.], dtype=float32)
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np

from tfplus import dtypes as _dt
from tfplus.proto import attr_value_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tfplus.tensor_shape import TensorShape


def infer_dtype(value, preferred=None) -> _dt.DType:
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
    if arr.dtype.kind in "SUO" and all(isinstance(v, (str, bytes)) for v in arr.reshape(-1)):
        return _dt.string
    raise TypeError(f"cannot convert {value!r} to a tensor")


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


def dtype_from_enum(enum: int) -> _dt.DType:
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
    dtype = dtype_from_enum(proto.dtype)
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
    "type": ("type", lambda v: _dt.as_dtype(v).as_datatype_enum, dtype_from_enum),
    "shape": ("shape", shape_to_proto, shape_from_proto),
    "tensor": ("tensor", make_tensor_proto, _frozen_ndarray),
}
_MESSAGE_FIELDS = ("shape", "tensor")


@functools.lru_cache(maxsize=None)
def _attr_kind(kind: str):
    """(AttrValue field, converters, is a list) for a declared attr type such as 'int' or 'list(shape)'."""
    is_list = kind.startswith("list(") and kind.endswith(")")
    base = kind[5:-1] if is_list else kind
    if base == "func":  # NOTE: only If and While have one; graph_export writes their sub-graphs as functions
        raise ValueError("a func attr is a control-flow sub-graph, written as a function of the GraphDef's library "
                         "by the If/While export (graph_export._control_flow_attrs), not as a plain attr")
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


def dense_set_operation(set1: np.ndarray, set2: np.ndarray, operation: str) -> tuple:
    """TF's DenseToDenseSetOperation: per index of the leading axes, the sorted distinct values of the last axis of
    `set1` and `set2` combined by `operation` ('a-b', 'b-a', 'intersection' or 'union'), as a sparse tensor
    (int64 indices [n, rank], values [n], int64 dense shape: the leading axes and the largest set's size).

        >>> dense_set_operation(np.array([[1, 2], [3, 3]]), np.array([[2, 5], [1, 3]]), "a-b")[1]
        array([1])
    """
    combine = {"a-b": np.setdiff1d, "b-a": lambda a, b: np.setdiff1d(b, a), "intersection": np.intersect1d,
               "union": np.union1d}
    if operation not in combine:
        raise ValueError(f"DenseToDenseSetOperation: set_operation {operation!r} is none of {sorted(combine)}")
    if set1.ndim < 2 or set1.shape[:-1] != set2.shape[:-1]:
        raise ValueError(f"DenseToDenseSetOperation: sets of shapes {set1.shape} and {set2.shape}: both need rank 2 "
                         "or more and the same leading dimensions")
    lead = set1.shape[:-1]
    rows = [combine[operation](set1[i], set2[i]) for i in np.ndindex(*lead)]
    indices = [(*i, j) for i, row in zip(np.ndindex(*lead), rows) for j in range(row.size)]
    values = np.concatenate(rows).astype(set1.dtype) if rows else np.zeros((0,), set1.dtype)
    shape = np.array([*lead, max((row.size for row in rows), default=0)], np.int64)
    return np.array(indices, np.int64).reshape(-1, len(lead) + 1), values, shape
