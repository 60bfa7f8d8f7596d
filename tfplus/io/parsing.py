"""tf.io.parse_example / parse_single_example / parse_single_sequence_example: tf.train.Example records (bytes)
parsed on the host into dense tensors (FixedLenFeature, FixedLenSequenceFeature) and tf.SparseTensors
(VarLenFeature), as TensorFlow's parsing ops give them.

    import tfplus as tf
    features = tf.parse_single_example(record, {"image": tf.FixedLenFeature([], tf.string),
                                                "label": tf.FixedLenFeature([], tf.int64),
                                                "tags": tf.VarLenFeature(tf.string)})
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tfplus import dtypes as _dt
from tfplus import errors
from tfplus.framework import convert_to_tensor
from tfplus.ops.host_ops import host_op, object_vector, to_bytes
from tfplus.proto import example_pb2
from tfplus.sparse import SparseTensor
from tfplus.tensor_shape import TensorShape

__all__ = ["FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature", "parse_example", "parse_single_example",
           "parse_single_sequence_example"]

# The feature dtypes an Example holds, and the list each is stored in.
_KINDS = {"float32": "float_list", "int64": "int64_list", "string": "bytes_list"}


class FixedLenFeature(NamedTuple):
    """A feature of a fixed number of values, parsed into a dense tensor of `shape`; `default_value` is used
    where an example lacks it (else it is required)."""
    shape: list
    dtype: _dt.DType
    default_value: object = None


class VarLenFeature(NamedTuple):
    """A feature of any number of values, parsed into a tf.SparseTensor."""
    dtype: _dt.DType


class FixedLenSequenceFeature(NamedTuple):
    """A feature of any number of `shape`-sized values, parsed into a dense [n, *shape] tensor (in parse_example,
    padded to the batch's longest with `default_value`); allow_missing lets an example lack it."""
    shape: list
    dtype: _dt.DType
    allow_missing: bool = False
    default_value: object = None


def _kind(spec, key: str) -> str:
    dtype = _dt.as_dtype(spec.dtype)
    if dtype.name not in _KINDS:
        raise ValueError(f"feature {key!r}: dtype {dtype.name} is not one an Example holds; use tf.float32, "
                         "tf.int64 or tf.string (then tf.cast)")
    return _KINDS[dtype.name]


def _np_dtype(spec):
    return _dt.as_dtype(spec.dtype).np


def _values(feature, kind: str, key: str, where: str) -> np.ndarray | None:
    """The values of one Feature as an array (None: it is absent)."""
    if feature is None:
        return None
    found = feature.WhichOneof("kind")
    if found is not None and found != kind:
        raise errors.InvalidArgumentError(None, None, f"{where}Key: {key}.  Data types don't match. Data type: "
                                          f"{found.split('_')[0]} but expected type: {kind.split('_')[0]}")
    values = list(getattr(feature, kind).value) if found is not None else []
    if kind == "bytes_list":
        return object_vector(values)
    return np.array(values, np.float32 if kind == "float_list" else np.int64)


def _parse(record, where: str) -> example_pb2.Example:
    try:
        return example_pb2.Example.FromString(to_bytes(record))
    except Exception:  # protobuf's DecodeError: the bytes are not an Example
        raise errors.InvalidArgumentError(None, None, f"{where}Could not parse example input, value: "
                                          f"{to_bytes(record)[:40]!r}") from None


def _default(spec, key: str):
    if spec.default_value is None:
        return None
    shape = TensorShape(spec.shape).as_list()
    value = np.asarray(spec.default_value, object if _dt.as_dtype(spec.dtype) is _dt.string else _np_dtype(spec))
    if value.dtype == object:
        value = np.vectorize(to_bytes, otypes=[object])(value) if value.size else value
    try:
        return np.broadcast_to(value.reshape(shape) if value.size == int(np.prod(shape)) else value, shape)
    except ValueError:
        raise ValueError(f"FixedLenFeature {key!r}: default_value of shape {value.shape} does not fit shape "
                         f"{shape}") from None


def _dense(values, spec, key: str, default, where: str) -> np.ndarray:
    shape = TensorShape(spec.shape).as_list()
    if values is None or (len(values) == 0 and default is not None and int(np.prod(shape)) != 0):
        if default is None:
            raise errors.InvalidArgumentError(None, None, f"{where}Feature: {key} (data type: "
                                              f"{_dt.as_dtype(spec.dtype).name}) is required but could not be "
                                              "found.")
        return np.array(default, _np_dtype(spec))
    if values.size != int(np.prod(shape)):
        raise errors.InvalidArgumentError(None, None, f"{where}Key: {key}.  Can't parse serialized Example: it "
                                          f"has {values.size} values, shape {shape} needs {int(np.prod(shape))}")
    return values.reshape(shape)


def _sequence(values, spec, key: str, where: str) -> np.ndarray:
    """A FixedLenSequenceFeature's values as [n, *shape]."""
    shape = TensorShape(spec.shape).as_list()
    step = int(np.prod(shape))
    if values is None:
        if not spec.allow_missing:
            raise errors.InvalidArgumentError(None, None, f"{where}Feature: {key} is required but could not be "
                                              "found (FixedLenSequenceFeature without allow_missing=True)")
        values = np.zeros(0, _np_dtype(spec))
    if (step == 0 and values.size) or (step and values.size % step):
        raise errors.InvalidArgumentError(None, None, f"{where}Key: {key}.  Number of values {values.size} is not "
                                          f"a multiple of the elements of shape {shape} ({step})")
    return values.reshape([-1 if step else 0] + shape)


def _sparse(per: list, spec) -> list:
    """A SparseTensor's indices, values and dense shape from each row's (or step's) list of values."""
    idx = [[b, j] for b, v in enumerate(per) for j in range(len(v))]
    return [np.array(idx, np.int64).reshape(-1, 2), np.concatenate(per) if per else _empty(spec),
            np.array([len(per), max((len(v) for v in per), default=0)], np.int64)]


def _empty(spec):
    return np.zeros(0, object) if _dt.as_dtype(spec.dtype) is _dt.string else np.zeros(0, _np_dtype(spec))


def _fill_value(spec):
    if spec.default_value is not None:
        return to_bytes(spec.default_value) if _dt.as_dtype(spec.dtype) is _dt.string else spec.default_value
    return b"" if _dt.as_dtype(spec.dtype) is _dt.string else 0


class _Plan:
    """The features to parse, in TensorFlow's output order: sparse (VarLen) first, then dense, each sorted by key."""

    def __init__(self, features: dict, what: str):
        if not features:
            raise ValueError(f"{what}: features must be a non-empty dict of feature name -> FixedLenFeature / "
                             "VarLenFeature / FixedLenSequenceFeature")
        for key, spec in features.items():
            if not isinstance(spec, (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature)):
                raise ValueError(f"{what}: feature {key!r} is a {type(spec).__name__}; use tf.io.FixedLenFeature, "
                                 "VarLenFeature or FixedLenSequenceFeature")
            _kind(spec, key)
        self.sparse = sorted(k for k, s in features.items() if isinstance(s, VarLenFeature))
        self.dense = sorted(k for k in features if k not in self.sparse)
        self.features = features
        self.defaults = {k: _default(features[k], k) for k in self.dense
                         if isinstance(features[k], FixedLenFeature)}


def _batch(plan: _Plan, records: np.ndarray, names) -> list:
    rows = []
    flat = np.asarray(records, object).reshape(-1)
    for i, record in enumerate(flat):
        where = f"Name: {names[i] if names is not None else '<unknown>'}, "
        rows.append(_parse(record, where).features.feature)
    outputs = []
    # sparse: indices [N, 2], values [N], dense_shape [B, longest]
    for key in plan.sparse:
        spec = plan.features[key]
        per = [_values(f.get(key), _kind(spec, key), key, "") for f in rows]
        outputs += _sparse([v if v is not None else _empty(spec) for v in per], spec)
    for key in plan.dense:
        spec = plan.features[key]
        kind = _kind(spec, key)
        if isinstance(spec, FixedLenFeature):
            vals = [_dense(_values(f.get(key), kind, key, ""), spec, key, plan.defaults[key], "") for f in rows]
            shape = TensorShape(spec.shape).as_list()
            out = np.stack(vals) if vals else np.zeros([0] + shape, _np_dtype(spec))
        else:
            seqs = [_sequence(_values(f.get(key), kind, key, ""), spec, key, "") for f in rows]
            longest = max((len(s) for s in seqs), default=0)
            shape = TensorShape(spec.shape).as_list()
            out = np.full([len(seqs), longest] + shape, _fill_value(spec),
                          object if kind == "bytes_list" else _np_dtype(spec))
            for b, s in enumerate(seqs):
                out[b, :len(s)] = s
        outputs.append(out.astype(object) if kind == "bytes_list" else out)
    return outputs


def _pack(plan: _Plan, outputs: list) -> dict:
    result, it = {}, iter(outputs)
    for key in plan.sparse:
        result[key] = SparseTensor(next(it), next(it), next(it))
    for key in plan.dense:
        result[key] = next(it)
    return result


def _out_types(plan: _Plan) -> list:
    types = []
    for key in plan.sparse:
        types += [_dt.int64, _dt.as_dtype(plan.features[key].dtype), _dt.int64]
    return types + [_dt.as_dtype(plan.features[k].dtype) for k in plan.dense]


def _shapes(plan: _Plan, lead: list, sparse_rank: int) -> list:
    """The outputs' static shapes: a sparse feature's indices, values and dense_shape, then each dense one's
    `lead` dims, [None] for a sequence, then its shape."""
    shapes = [(None, sparse_rank), (None,), (sparse_rank,)] * len(plan.sparse)
    return shapes + [tuple(lead + ([] if isinstance(plan.features[k], FixedLenFeature) else [None]) +
                           TensorShape(plan.features[k].shape).as_list()) for k in plan.dense]


def _single(plan: _Plan, record: bytes) -> list:
    """One record's outputs (parse_single_example's): a batch of one without its batch dimension."""
    outputs, single = iter(_batch(plan, np.array([record], object), None)), []
    for _ in plan.sparse:
        indices, values, dense_shape = next(outputs), next(outputs), next(outputs)
        single += [indices[:, 1:], values, dense_shape[1:]]
    return single + [v[0] for v in outputs]


def parse_example(serialized, features: dict, name=None, example_names=None) -> dict:
    """A batch of Examples (a string vector [B]) parsed: FixedLenFeature -> [B, *shape], VarLenFeature ->
    SparseTensor [B, longest], FixedLenSequenceFeature -> [B, longest, *shape] padded with default_value."""
    plan = _Plan(features, "tf.io.parse_example")
    serialized = convert_to_tensor(serialized, dtype=_dt.string)
    names = convert_to_tensor(example_names, dtype=_dt.string) if example_names is not None else None
    batch = serialized.shape.as_list()[0] if serialized.shape.ndims == 1 else None
    shapes = _shapes(plan, [batch], 2)

    def run(records, *maybe_names):
        given = [n.decode() if isinstance(n, bytes) else str(n) for n in maybe_names[0]] if maybe_names else None
        return _batch(plan, records, given)
    outputs = host_op(name or "ParseExample", run, [serialized] + ([names] if names is not None else []),
                      _out_types(plan), shapes)
    return _pack(plan, outputs)


def parse_single_example(serialized, features: dict, name=None, example_names=None) -> dict:
    """One Example (a string scalar) parsed: FixedLenFeature -> shape, VarLenFeature -> SparseTensor [longest],
    FixedLenSequenceFeature -> [n, *shape]."""
    plan = _Plan(features, "tf.io.parse_single_example")
    serialized = convert_to_tensor(serialized, dtype=_dt.string)
    shapes = _shapes(plan, [], 1)

    def run(record):
        return _single(plan, to_bytes(record[()]))
    return _pack(plan, host_op(name or "ParseSingleExample", run, [serialized], _out_types(plan), shapes))


def parse_single_sequence_example(serialized, context_features=None, sequence_features=None, example_name=None,
                                  name=None) -> tuple[dict, dict]:
    """One SequenceExample parsed: (context, sequences). Context features as in parse_single_example; a
    sequence's FixedLenSequenceFeature -> [steps, *shape], VarLenFeature -> SparseTensor [steps, longest]."""
    serialized = convert_to_tensor(serialized, dtype=_dt.string)
    context = _Plan(context_features, "parse_single_sequence_example") if context_features else None
    sequence = _Plan(sequence_features, "parse_single_sequence_example") if sequence_features else None
    if context is None and sequence is None:
        raise ValueError("parse_single_sequence_example: give context_features, sequence_features or both")
    shapes = (_shapes(context, [], 1) if context is not None else []) + \
        (_shapes(sequence, [], 2) if sequence is not None else [])
    types = (_out_types(context) if context is not None else []) + \
        (_out_types(sequence) if sequence is not None else [])

    def run(record):
        try:
            seq = example_pb2.SequenceExample.FromString(to_bytes(record[()] if isinstance(record, np.ndarray)
                                                                  else record))
        except Exception:
            raise errors.InvalidArgumentError(None, None, "Could not parse example input, value: "
                                              f"{to_bytes(record[()])[:40]!r}") from None
        out = []
        if context is not None:
            ex = example_pb2.Example()
            ex.features.CopyFrom(seq.context)
            out += _single(context, ex.SerializeToString())
        if sequence is not None:
            lists = seq.feature_lists.feature_list
            for key in sequence.sparse:
                spec = sequence.features[key]
                steps = [] if key not in lists else \
                    [_values(f, _kind(spec, key), key, "") for f in lists[key].feature]
                out += _sparse(steps, spec)
            for key in sequence.dense:
                spec = sequence.features[key]
                shape = TensorShape(spec.shape).as_list()
                if key not in lists:
                    if not getattr(spec, "allow_missing", False):
                        raise errors.InvalidArgumentError(None, None, f"Name: <unknown>, Feature list '{key}' is "
                                                          "required but could not be found.  Did you mean to "
                                                          "include it in feature_list_dense_missing_assumed_empty "
                                                          "or feature_list_dense_defaults?")
                    out.append(np.zeros([0] + shape, object if spec.dtype is _dt.string else _np_dtype(spec)))
                    continue
                steps = [_dense(_values(f, _kind(spec, key), key, ""), spec, key, None, "")
                         for f in lists[key].feature]
                out.append(np.stack(steps) if steps else np.zeros([0] + shape, _np_dtype(spec)))
        return out
    outputs = host_op(name or "ParseSingleSequenceExample", run, [serialized], types, shapes)
    n = len(_out_types(context)) if context is not None else 0
    return (_pack(context, outputs[:n]) if context is not None else {},
            _pack(sequence, outputs[n:]) if sequence is not None else {})
