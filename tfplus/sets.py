"""tf.sets: set operations along the last axis of int or string tensors (dense, or SparseTensors whose last index is
the position in the set). Each row's result is sorted and without repeats, as a SparseTensor whose last dimension
is the largest result's size (TF's set ops); set_size counts each row's distinct elements. Host ops (PyFunc) over
the NumPy values.

    common = tf.sets.set_intersection(predicted_ids, label_ids)      # a SparseTensor, a row per example
    overlap = tf.sets.set_size(common)                               # int32 [batch]
"""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.ops.host_ops import host_op
from tfplus.sparse import SparseTensor

__all__ = ["set_intersection", "set_union", "set_difference", "set_size", "intersection", "union", "difference",
           "size"]

_DTYPES = (_dt.int8, _dt.int16, _dt.int32, _dt.int64, _dt.uint8, _dt.string)


def _parts(x, what: str) -> tuple[list, bool]:
    """The graph tensors a set argument is made of, and whether it is sparse."""
    if isinstance(x, SparseTensor) or (not isinstance(x, Tensor) and hasattr(x, "dense_shape")):
        sp = SparseTensor.from_value(x)
        return [sp.indices, sp.values, sp.dense_shape], True
    t = convert_to_tensor(x)
    if t.shape.ndims is not None and t.shape.ndims < 2:
        raise ValueError(f"tf.sets.{what}: '{t.name}' must have rank 2 or more (its last axis holds the sets), "
                         f"got shape {t.shape}")
    return [t], False


def _rows(values: list, sparse: bool) -> tuple[dict, tuple]:
    """{row index (a tuple): the row's elements}, and the shape of the rows' grid."""
    if not sparse:
        dense = np.asarray(values[0])
        grid = dense.shape[:-1]
        return {index: list(dense[index]) for index in np.ndindex(*grid)}, grid
    indices, elements, shape = (np.asarray(v) for v in values)
    grid = tuple(int(d) for d in shape[:-1])
    rows: dict = {index: [] for index in np.ndindex(*grid)}
    for index, element in zip(indices, elements):
        rows[tuple(int(i) for i in index[:-1])].append(element)
    return rows, grid


def _set_op(kind: str, a, b, aminusb: bool, validate_indices: bool):
    what = {"intersection": "set_intersection", "union": "set_union", "difference": "set_difference"}[kind]
    a_parts, a_sparse = _parts(a, what)
    b_parts, b_sparse = _parts(b, what)
    if a_sparse and not b_sparse:  # as TF: the dense one first (a difference flips its direction)
        a_parts, b_parts, a_sparse, b_sparse, aminusb = b_parts, a_parts, False, True, not aminusb
    dtype = a_parts[1 if a_sparse else 0].dtype
    if dtype not in _DTYPES:
        raise TypeError(f"tf.sets.{what}: elements of dtype {dtype.name}; sets hold ints or strings")

    def run(*values):
        rows_a, grid = _rows(list(values[:len(a_parts)]), a_sparse)
        rows_b, _ = _rows(list(values[len(a_parts):]), b_sparse)
        out = {}
        for index, row in rows_a.items():
            sa, sb = set(row), set(rows_b.get(index, ()))
            result = sa & sb if kind == "intersection" else sa | sb if kind == "union" else \
                (sa - sb if aminusb else sb - sa)
            out[index] = sorted(result)
        width = max((len(r) for r in out.values()), default=0)
        indices = [index + (j,) for index in sorted(out) for j in range(len(out[index]))]
        elements = [e for index in sorted(out) for e in out[index]]
        rank = len(grid) + 1
        element_array = np.empty(len(elements), object) if dtype == _dt.string else \
            np.asarray(elements, dtype.as_numpy_dtype)
        if dtype == _dt.string:
            element_array[:] = elements
        return [np.asarray(indices, np.int64).reshape(-1, rank), element_array,
                np.asarray(grid + (width,), np.int64)]
    rank = (a_parts[0].shape.ndims if not a_sparse else None)
    indices, values, shape = host_op(f"{'Dense' if not a_sparse else 'Sparse'}To{'Sparse' if b_sparse else 'Dense'}"
                                     "SetOperation", run, a_parts + b_parts, [_dt.int64, dtype, _dt.int64],
                                     [[None, rank], [None], [rank]])
    return SparseTensor(indices, values, shape)


def set_intersection(a, b, validate_indices=True):
    """The elements each row of `a` shares with the same row of `b`."""
    with name_scope(None, "set_intersection"):
        return _set_op("intersection", a, b, True, validate_indices)


def set_union(a, b, validate_indices=True):
    """The elements of each row of `a` or of the same row of `b`."""
    with name_scope(None, "set_union"):
        return _set_op("union", a, b, True, validate_indices)


def set_difference(a, b, aminusb=True, validate_indices=True):
    """The elements of each row of `a` not in the same row of `b` (aminusb=False: those of `b` not in `a`)."""
    with name_scope(None, "set_difference"):
        return _set_op("difference", a, b, aminusb, validate_indices)


def set_size(a, validate_indices=True):
    """The number of distinct elements in each row of the SparseTensor `a` (int32, its dense shape less the
    last dimension)."""
    if isinstance(a, Tensor):
        raise TypeError("tf.sets.set_size: `a` must be a SparseTensor (a set op's result); for a dense tensor, "
                        "give tf.sparse.from_dense(a)")
    parts, _ = _parts(a, "set_size")
    rank = parts[0].shape.as_list()[1] if parts[0].shape.ndims == 2 else None

    def run(*values):
        rows, grid = _rows(list(values), True)
        return [np.asarray([len(set(rows[i])) for i in np.ndindex(*grid)], np.int32).reshape(grid)]
    with name_scope(None, "set_size"):
        return host_op("SetSize", run, parts, [_dt.int32], [None if rank is None else [None] * (rank - 1)])[0]


intersection, union, difference, size = set_intersection, set_union, set_difference, set_size
