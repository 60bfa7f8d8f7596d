"""tf.SparseTensor and tf.sparse (TF1): a sparse tensor is three dense tensors, indices (int64 [N, rank]), values
([N]) and dense_shape (int64 [rank]). Session.run fetches one as a tf.SparseTensorValue and feeds one (a
sparse_placeholder) from a SparseTensorValue or an (indices, values, dense_shape) tuple.

Ops whose result is differentiable in a dense operand (sparse_tensor_dense_matmul, embedding_lookup_sparse) are
built from registered ops (gather, multiply, unsorted_segment_sum); the index bookkeeping ones (to_dense, reorder,
reshape, add) run on the host (tfplus.io.host).

    import tfplus as tf
    sp = tf.SparseTensor(indices=[[0, 0], [1, 2]], values=[1.0, 2.0], dense_shape=[3, 4])
    dense = tf.sparse.to_dense(sp)
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, constant_value, convert_to_tensor, name_scope
from tfplus.ops import array_ops, math_ops, special_math_ops
from tfplus.ops.host_ops import host_op
from tfplus.tensor_shape import TensorShape

__all__ = ["SparseTensor", "SparseTensorValue", "sparse_placeholder", "to_dense", "sparse_tensor_to_dense",
           "reorder", "sparse_reorder", "reshape", "sparse_reshape", "add", "sparse_add", "sparse_dense_matmul",
           "sparse_tensor_dense_matmul", "embedding_lookup_sparse", "to_indicator", "sparse_to_indicator",
           "sparse_to_dense", "retain", "sparse_retain", "from_dense", "placeholder", "matmul", "reduce_sum",
           "sparse_reduce_sum", "concat", "sparse_concat", "transpose", "sparse_transpose", "fill_empty_rows",
           "sparse_fill_empty_rows", "slice", "sparse_slice", "expand_dims"]


class SparseTensorValue(NamedTuple):
    """What Session.run gives for a fetched SparseTensor: its parts as arrays."""
    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray


class SparseTensor:
    """tf.SparseTensor(indices, values, dense_shape): values[i] at position indices[i] of a tensor of shape
    dense_shape, zero elsewhere."""

    def __init__(self, indices, values, dense_shape, static_shape=None):
        self._static_shape = None if static_shape is None else TensorShape(static_shape)
        with name_scope(None, "SparseTensor"):
            self._indices = convert_to_tensor(indices, dtype=_dt.int64, name="indices")
            self._values = convert_to_tensor(values, name="values")
            self._dense_shape = convert_to_tensor(dense_shape, dtype=_dt.int64, name="dense_shape")
        if self._indices.shape.ndims not in (None, 2):
            raise ValueError(f"SparseTensor: indices must be a matrix [N, rank], got shape {self._indices.shape}")
        if self._values.shape.ndims not in (None, 1):
            raise ValueError(f"SparseTensor: values must be a vector [N], got shape {self._values.shape}")

    @classmethod
    def from_value(cls, value) -> SparseTensor:
        return value if isinstance(value, SparseTensor) else cls(value.indices, value.values, value.dense_shape)

    indices = property(lambda self: self._indices)
    values = property(lambda self: self._values)
    dense_shape = property(lambda self: self._dense_shape)
    dtype = property(lambda self: self._values.dtype)
    graph = property(lambda self: self._values.graph)
    op = property(lambda self: self._values.op)

    @property
    def shape(self) -> TensorShape:
        """The dense tensor's static shape: dense_shape's value where known (or a sparse_placeholder's shape),
        else its rank."""
        if self._static_shape is not None:
            return self._static_shape
        known = constant_value(self._dense_shape)
        if known is not None:
            return TensorShape([int(d) for d in known])
        rank = self._dense_shape.shape.as_list()[0] if self._dense_shape.shape.ndims == 1 else None
        return TensorShape(None if rank is None else [None] * rank)

    def get_shape(self) -> TensorShape:
        return self.shape

    def _with_values(self, values) -> SparseTensor:
        """The same positions holding `values` (tf.cast's result on a SparseTensor)."""
        return SparseTensor(self._indices, values, self._dense_shape, self._static_shape)

    # TF's sparse-dense element-wise ops: the dense side broadcast to dense_shape, read at the indices.
    def _cwise(self, other, fn, name):
        with name_scope(None, name):
            other = convert_to_tensor(other, dtype=self.dtype)
            if other.shape.ndims != 0:
                other = array_ops.gather_nd(array_ops.broadcast_to(other, self._dense_shape), self._indices)
            return SparseTensor(self._indices, fn(self._values, other), self._dense_shape, self._static_shape)

    def __mul__(self, other):
        """`sp * dense` (Kipf's sparse dropout scales by 1 / keep_prob)."""
        return self._cwise(other, math_ops.multiply, "SparseDenseCwiseMul")

    def __truediv__(self, other):
        return self._cwise(other, math_ops.truediv, "SparseDenseCwiseDiv")

    def eval(self, feed_dict=None, session=None):
        from tfplus.framework import get_default_session
        return (session or get_default_session()).run(self, feed_dict)

    # Session.run: fetched as its three tensors, fed through them.
    def _fetch_expand(self):
        return [self._indices, self._values, self._dense_shape], lambda parts: SparseTensorValue(*parts)

    def _feed_expand(self, value):
        if isinstance(value, SparseTensor):
            raise TypeError("cannot feed a tf.SparseTensor; feed a tf.SparseTensorValue or an (indices, values, "
                            "dense_shape) tuple")
        indices, values, dense_shape = value
        return [(self._indices, indices), (self._values, values), (self._dense_shape, dense_shape)]

    def __repr__(self):
        return (f"SparseTensor(indices={self._indices!r}, values={self._values!r}, "
                f"dense_shape={self._dense_shape!r})")


def sparse_placeholder(dtype, shape=None, name=None) -> SparseTensor:
    """A SparseTensor fed at Session.run time (a SparseTensorValue or an (indices, values, dense_shape) tuple).
    A fully known `shape`, or a shape tensor (Kipf's gcn passes tf.constant(shape, tf.int64)), is the
    dense_shape's default."""
    with name_scope(name, "sparse_placeholder"):
        default = None
        if isinstance(shape, Tensor):
            default = shape
            known = constant_value(shape)
            shape = TensorShape(None if known is None else [int(d) for d in known])
            if shape.ndims is None and default.shape.ndims == 1 and default.shape.as_list()[0] is not None:
                shape = TensorShape([None] * default.shape.as_list()[0])
        shape = None if shape is None else TensorShape(shape)
        rank = None if shape is None or shape.ndims is None else shape.ndims
        values = array_ops.placeholder(dtype, [None], name="values")
        indices = array_ops.placeholder(_dt.int64, [None, rank], name="indices")
        if default is not None:
            dense_shape = array_ops.placeholder_with_default(math_ops.cast(default, _dt.int64), [rank], name="shape")
        elif shape is not None and shape.is_fully_defined():
            dense_shape = array_ops.placeholder_with_default(np.array(shape.as_list(), np.int64), [rank],
                                                             name="shape")
        else:
            dense_shape = array_ops.placeholder(_dt.int64, [rank], name="shape")
        return SparseTensor(indices, values, dense_shape, static_shape=shape)


placeholder = sparse_placeholder


def _dense_shape_static(sp: SparseTensor):
    return sp.shape.dims_tuple if sp.shape.ndims is not None else None


# -- host ops ------------------------------------------------------------------------------------------------
def _scatter(indices, values, shape, default, what: str):
    out = np.full(tuple(int(d) for d in shape), default, dtype=values.dtype if values.dtype != object else object)
    if len(indices):
        if (indices < 0).any() or (indices >= np.asarray(shape)).any():
            bad = indices[((indices < 0) | (indices >= np.asarray(shape))).any(axis=1)][0]
            raise _invalid(f"{what}: index {bad.tolist()} is out of bounds of dense_shape {list(shape)}")
        out[tuple(indices.T)] = values
    return out


def _picked(values: Tensor, source: Tensor, host_values: Tensor) -> Tensor:
    """An op's output values: host_values (the host's result), but for floats the input values gathered at
    `source` (-1: an entry of the host's own, a filler), so that they carry TensorFlow's gradient: the host op
    itself (a PyFunc) has none."""
    if not values.dtype.is_floating:
        return host_values
    picked = array_ops.gather(values, math_ops.maximum(source, 0))
    return math_ops.where(source >= 0, picked, host_values)


def _summed(values: Tensor, target: Tensor, count, host_values: Tensor) -> Tensor:
    """An op's output values that sum input values: host_values, but for floats the sums of the input values at
    their `target` output positions (-1: dropped) by unsorted_segment_sum, which carries the gradient."""
    if not values.dtype.is_floating:
        return host_values
    return math_ops.unsorted_segment_sum(values, target, count)


def _invalid(message: str):
    from tfplus import errors
    return errors.InvalidArgumentError(None, None, message)


def to_dense(sp_input: SparseTensor, default_value=None, validate_indices=True, name=None) -> Tensor:
    """The dense tensor of `sp_input`, `default_value` (0 or b"") where it has no value."""
    sp = SparseTensor.from_value(sp_input)
    if default_value is None:
        default_value = b"" if sp.dtype is _dt.string else 0
    default = convert_to_tensor(default_value, dtype=sp.dtype)

    def run(indices, values, shape, dflt):
        if validate_indices and len(indices) > 1:
            keys = [tuple(r) for r in indices.tolist()]
            if any(a >= b for a, b in zip(keys, keys[1:])):
                raise _invalid(f"SparseToDense: indices {indices.tolist()} are not in lexicographic order or "
                               "repeat; use tf.sparse.reorder first (or validate_indices=False)")
        dense = _scatter(indices, values, shape, dflt[()] if dflt.ndim == 0 else dflt, "SparseToDense")
        flat = np.ravel_multi_index(tuple(indices.T), tuple(int(d) for d in shape)) if len(indices) else \
            np.zeros(0, np.int64)
        return [dense, flat.astype(np.int64)]
    dense, flat = host_op(name or "SparseToDense", run, [sp.indices, sp.values, sp.dense_shape, default],
                          [sp.dtype, _dt.int64], [_dense_shape_static(sp), (None,)])
    if not sp.dtype.is_floating:
        return dense
    # the given values where an entry is (a later repeat of an index replaces, as the host's), elsewhere the host's
    size = math_ops.reduce_prod(array_ops.shape(dense))
    given = math_ops.unsorted_segment_sum(array_ops.ones_like(sp.values), flat, size) > 0
    last = special_math_ops.unsorted_segment_max(math_ops.range(array_ops.shape(flat, out_type=_dt.int64)[0]), flat,
                                                 size)
    values = array_ops.gather(sp.values, math_ops.maximum(last, 0))
    return array_ops.reshape(math_ops.where(given, values, array_ops.reshape(dense, [-1])), array_ops.shape(dense))


sparse_tensor_to_dense = to_dense


def sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value=0, validate_indices=True,
                    name=None) -> Tensor:
    """TF1's tf.sparse_to_dense: the dense tensor with sparse_values at sparse_indices (a vector of indices for
    a vector output, or [N, rank])."""
    indices = convert_to_tensor(sparse_indices, dtype=_dt.int64)
    if indices.shape.ndims == 1:
        indices = array_ops.reshape(indices, [-1, 1])
    values = convert_to_tensor(sparse_values)
    if values.shape.ndims == 0:
        values = array_ops.fill(array_ops.shape(indices)[:1], values)
    return to_dense(SparseTensor(indices, values, output_shape), default_value, validate_indices, name)


def _order(indices: np.ndarray) -> np.ndarray:
    return np.lexsort(indices.T[::-1]) if len(indices) else np.arange(0)


def reorder(sp_input: SparseTensor, name=None) -> SparseTensor:
    """`sp_input` with its entries in row-major (lexicographic) order of their indices."""
    sp = SparseTensor.from_value(sp_input)

    def run(indices, values):
        order = _order(indices)
        return [indices[order], values[order], order.astype(np.int64)]
    indices, values, order = host_op(name or "SparseReorder", run, [sp.indices, sp.values],
                                     [_dt.int64, sp.dtype, _dt.int64],
                                     [sp.indices.shape.dims_tuple if sp.indices.shape.ndims else None,
                                      sp.values.shape.dims_tuple if sp.values.shape.ndims else None, (None,)])
    return SparseTensor(indices, _picked(sp.values, order, values), sp.dense_shape)


sparse_reorder = reorder


def reshape(sp_input: SparseTensor, shape, name=None) -> SparseTensor:
    """`sp_input` with dense shape `shape` (one entry may be -1), its entries at the same row-major positions."""
    sp = SparseTensor.from_value(sp_input)
    new = convert_to_tensor(shape, dtype=_dt.int64)

    def run(indices, old, target):
        size = int(np.prod(old))
        target = target.copy()
        if (target == -1).sum() > 1:
            raise _invalid(f"SparseReshape: at most one dimension of {target.tolist()} may be -1")
        if (target == -1).any():
            known = int(np.prod(target[target != -1]))
            target[target == -1] = size // known if known else 0
        if int(np.prod(target)) != size:
            raise _invalid(f"SparseReshape: cannot reshape a tensor of shape {old.tolist()} ({size} elements) to "
                           f"{target.tolist()}")
        flat = np.ravel_multi_index(tuple(indices.T), tuple(old)) if len(indices) else np.zeros(0, np.int64)
        out = np.stack(np.unravel_index(flat, tuple(target)), axis=1) if len(indices) else \
            np.zeros((0, len(target)), np.int64)
        return [out.astype(np.int64), target]
    rank = new.shape.as_list()[0] if new.shape.ndims == 1 else None
    indices, dense_shape = host_op(name or "SparseReshape", run, [sp.indices, sp.dense_shape, new],
                                   [_dt.int64, _dt.int64], [(None, rank), (rank,)])
    return SparseTensor(indices, sp.values, dense_shape)


sparse_reshape = reshape


def add(a, b, threshold=0, name=None):
    """sparse + sparse -> a SparseTensor (values at the same index summed; sums with |x| < threshold dropped),
    sparse + dense (either order) -> a dense Tensor."""
    if not isinstance(a, SparseTensor) and not isinstance(b, SparseTensor):
        raise TypeError("tf.sparse.add: at least one operand must be a SparseTensor")
    if not isinstance(a, SparseTensor) or not isinstance(b, SparseTensor):
        sp, dense = (a, b) if isinstance(a, SparseTensor) else (b, a)
        dense = convert_to_tensor(dense, dtype=sp.dtype)
        return math_ops.add(dense, to_dense(sp, validate_indices=False))
    if a.dtype is not b.dtype:
        raise TypeError(f"tf.sparse.add: the operands' dtypes differ ({a.dtype.name}, {b.dtype.name})")
    thresh = convert_to_tensor(threshold, dtype=a.dtype)

    def run(ai, av, ashape, bi, bv, bshape, th):
        if not np.array_equal(ashape, bshape):
            raise _invalid(f"SparseAdd: the operands' dense shapes differ ({ashape.tolist()}, {bshape.tolist()})")
        indices = np.concatenate([ai, bi]).reshape(-1, len(ashape))
        values = np.concatenate([av, bv])
        order = _order(indices)
        indices, values = indices[order], values[order]
        keep_idx, keep_val = [], []
        target = np.empty(len(order), np.int64)   # each input entry's output position (-1: dropped)
        for j, (idx, v) in enumerate(zip(map(tuple, indices.tolist()), values)):
            if keep_idx and keep_idx[-1] == idx:
                keep_val[-1] = keep_val[-1] + v
            else:
                keep_idx.append(idx)
                keep_val.append(v)
            target[order[j]] = len(keep_idx) - 1
        keep = np.array([abs(v) >= th for v in keep_val], bool)
        position = np.where(keep, np.cumsum(keep) - 1, -1)
        out_i = np.array([i for i, k in zip(keep_idx, keep) if k], np.int64).reshape(-1, len(ashape))
        out_v = np.array([v for v, k in zip(keep_val, keep) if k], av.dtype)
        return [out_i, out_v, position[target] if len(target) else target, np.int64(len(out_v))]
    indices, values, target, count = host_op(
        name or "SparseAdd", run, [a.indices, a.values, a.dense_shape, b.indices, b.values, b.dense_shape, thresh],
        [_dt.int64, a.dtype, _dt.int64, _dt.int64],
        [(None, a.indices.shape.as_list()[1] if a.indices.shape.ndims else None), (None,), (None,), ()])
    values = _summed(array_ops.concat([a.values, b.values], 0), target, count, values)
    return SparseTensor(indices, values, a.dense_shape)


sparse_add = add


def retain(sp_input: SparseTensor, to_retain) -> SparseTensor:
    """The entries of `sp_input` where the boolean vector `to_retain` is True."""
    sp = SparseTensor.from_value(sp_input)
    keep = array_ops.reshape(math_ops.where(convert_to_tensor(to_retain, dtype=_dt.bool_)), [-1])
    return SparseTensor(array_ops.gather(sp.indices, keep), array_ops.gather(sp.values, keep), sp.dense_shape)


sparse_retain = retain


def from_dense(tensor, name=None) -> SparseTensor:
    """The SparseTensor of the nonzero (non-empty) elements of `tensor`."""
    t = convert_to_tensor(tensor)
    with name_scope(name, "dense_to_sparse"):
        zero = b"" if t.dtype is _dt.string else 0
        indices = math_ops.where(math_ops.not_equal(t, array_ops.constant(zero, dtype=t.dtype)))
        return SparseTensor(indices, array_ops.gather_nd(t, indices), array_ops.shape(t, out_type=_dt.int64))


def to_indicator(sp_input: SparseTensor, vocab_size, name=None) -> Tensor:
    """A bool tensor [..., vocab_size]: True at [i..., id] for each id among row i...'s values."""
    sp = SparseTensor.from_value(sp_input)

    def run(indices, values, shape, n):
        out = np.zeros(tuple(int(d) for d in shape[:-1]) + (int(n),), bool)
        for idx, v in zip(indices, values):
            out[tuple(idx[:-1]) + (int(v),)] = True
        return [out]
    static = _dense_shape_static(sp)
    n = constant_value(convert_to_tensor(vocab_size))
    shape = None if static is None else static[:-1] + (None if n is None else int(n),)
    return host_op(name or "SparseToIndicator", run, [sp.indices, sp.values, sp.dense_shape,
                                                      convert_to_tensor(vocab_size, dtype=_dt.int64)],
                   [_dt.bool_], [shape])[0]


sparse_to_indicator = to_indicator


def _rank_of(sp: SparseTensor):
    return sp.indices.shape.as_list()[1] if sp.indices.shape.ndims == 2 else None


def reduce_sum(sp_input: SparseTensor, axis=None, keepdims=None, output_is_sparse=False, name=None,
               reduction_axes=None, keep_dims=None) -> Tensor:
    """The dense sum of `sp_input`'s values over `axis` (all axes when None; negative axes count from the end)."""
    if output_is_sparse:
        raise ValueError("tf.sparse.reduce_sum: output_is_sparse=True is not supported; take the dense result and "
                         "tf.sparse.from_dense it")
    sp = SparseTensor.from_value(sp_input)
    axes = axis if axis is not None else reduction_axes
    keep = bool(keepdims if keepdims is not None else keep_dims)

    def run(indices, values, shape):
        dense = np.zeros(tuple(int(d) for d in shape), values.dtype)
        np.add.at(dense, tuple(indices.T), values)
        which = None if axes is None else tuple(int(a) % len(shape) for a in np.atleast_1d(axes))
        out = np.asarray(dense.sum(axis=which, keepdims=keep), values.dtype)
        # each entry's output position: its index with the summed axes set to 0, in the kept-dims grid
        kept = indices.copy()
        kept[:, list(which if which is not None else range(len(shape)))] = 0
        grid = tuple(1 if which is None or d in which else int(n) for d, n in enumerate(shape))
        target = np.ravel_multi_index(tuple(kept.T), grid) if len(kept) else np.zeros(0, np.int64)
        return [out, target.astype(np.int64), np.asarray(out.shape, np.int64)]
    out, target, out_shape = host_op(name or "SparseReduceSum", run, [sp.indices, sp.values, sp.dense_shape],
                                     [sp.dtype, _dt.int64, _dt.int64], [None, (None,), (None,)])
    if not sp.dtype.is_floating:
        return out
    return array_ops.reshape(_summed(sp.values, target, math_ops.reduce_prod(out_shape), out), out_shape)


sparse_reduce_sum = reduce_sum


def concat(axis, sp_inputs, name=None, expand_nonconcat_dims=False, concat_dim=None, expand_nonconcat_dim=None):
    """The SparseTensors `sp_inputs` joined along `axis` (their other dimensions equal, or with
    expand_nonconcat_dims the largest of each), entries in row-major order."""
    axis = concat_dim if concat_dim is not None else axis
    expand = bool(expand_nonconcat_dim if expand_nonconcat_dim is not None else expand_nonconcat_dims)
    sps = [SparseTensor.from_value(s) for s in sp_inputs]
    if not sps:
        raise ValueError("tf.sparse.concat: no SparseTensors given")
    parts = [t for sp in sps for t in (sp.indices, sp.values, sp.dense_shape)]

    def run(*arrays):
        triples = [arrays[i:i + 3] for i in range(0, len(arrays), 3)]
        shapes = np.stack([np.asarray(t[2], np.int64) for t in triples])
        ax = int(axis) % shapes.shape[1]
        others = np.delete(shapes, ax, axis=1)
        if not expand and (others != others[0]).any():
            raise _invalid(f"SparseConcat: the inputs' dense shapes {shapes.tolist()} differ outside axis {ax}; "
                           "pass expand_nonconcat_dims=True to take the largest")
        offsets = np.concatenate([[0], np.cumsum(shapes[:, ax])[:-1]])
        indices = [np.asarray(t[0], np.int64).copy().reshape(-1, shapes.shape[1]) for t in triples]
        for idx, off in zip(indices, offsets):
            idx[:, ax] += off
        out_i = np.concatenate(indices)
        out_v = np.concatenate([np.asarray(t[1]) for t in triples])
        order = _order(out_i)
        out_shape = shapes.max(axis=0)
        out_shape[ax] = shapes[:, ax].sum()
        return [out_i[order], out_v[order], out_shape]
    rank = _rank_of(sps[0])
    indices, values, dense_shape = host_op(name or "SparseConcat", run, parts, [_dt.int64, sps[0].dtype, _dt.int64],
                                           [(None, rank), (None,), (rank,)])
    return SparseTensor(indices, values, dense_shape)


sparse_concat = concat


def transpose(sp_input: SparseTensor, perm=None, name=None) -> SparseTensor:
    """`sp_input` with its dimensions permuted by `perm` (reversed when None), entries reordered."""
    sp = SparseTensor.from_value(sp_input)

    def run(indices, values, shape):
        p = np.arange(len(shape))[::-1] if perm is None else np.asarray(perm, np.int64)
        if sorted(p.tolist()) != list(range(len(shape))):
            raise _invalid(f"SparseTranspose: perm {p.tolist()} is not a permutation of the {len(shape)} dimensions")
        out_i = indices[:, p]
        order = _order(out_i)
        return [out_i[order], values[order], shape[p], order.astype(np.int64)]
    rank = _rank_of(sp)
    indices, values, dense_shape, order = host_op(name or "SparseTranspose", run,
                                                  [sp.indices, sp.values, sp.dense_shape],
                                                  [_dt.int64, sp.dtype, _dt.int64, _dt.int64],
                                                  [(None, rank), (None,), (rank,), (None,)])
    return SparseTensor(indices, _picked(sp.values, order, values), dense_shape)


sparse_transpose = transpose


def fill_empty_rows(sp_input: SparseTensor, default_value, name=None):
    """(`sp_input` with `default_value` at [row, 0, ...] of each row that has no entry, a bool vector saying
    which rows were empty). The entries must be ordered by row, as TensorFlow requires."""
    sp = SparseTensor.from_value(sp_input)
    default = convert_to_tensor(default_value, dtype=sp.dtype)

    def run(indices, values, shape, dflt):
        rows = int(shape[0]) if len(shape) else 0
        empty = np.ones(rows, bool)
        empty[indices[:, 0]] = False
        extra = np.zeros((int(empty.sum()), len(shape)), np.int64)
        extra[:, 0] = np.flatnonzero(empty)
        out_i = np.concatenate([indices, extra])
        fill = np.empty(len(extra), values.dtype)
        fill[:] = dflt[()] if dflt.ndim == 0 else dflt
        out_v = np.concatenate([values, fill])
        source = np.concatenate([np.arange(len(values)), -np.ones(len(extra), np.int64)])
        order = np.argsort(out_i[:, 0], kind="stable")  # rows in order, each row's entries as they were
        return [out_i[order], out_v[order], empty, source[order].astype(np.int64)]
    rank = _rank_of(sp)
    indices, values, empty, source = host_op(name or "SparseFillEmptyRows", run,
                                             [sp.indices, sp.values, sp.dense_shape, default],
                                             [_dt.int64, sp.dtype, _dt.bool_, _dt.int64],
                                             [(None, rank), (None,), (None,), (None,)])
    return SparseTensor(indices, _picked(sp.values, source, values), sp.dense_shape), empty


sparse_fill_empty_rows = fill_empty_rows


def slice(sp_input: SparseTensor, start, size, name=None) -> SparseTensor:  # noqa: A001 (TF's name)
    """The entries of `sp_input` in the box [start, start + size), indices relative to `start`; the dense shape
    is the box cut at the input's bounds."""
    sp = SparseTensor.from_value(sp_input)
    start_t, size_t = convert_to_tensor(start, dtype=_dt.int64), convert_to_tensor(size, dtype=_dt.int64)

    def run(indices, values, shape, begin, extent):
        end = np.minimum(begin + extent, shape)
        keep = ((indices >= begin) & (indices < end)).all(axis=1) if len(indices) else np.zeros(0, bool)
        return [indices[keep] - begin, values[keep], np.maximum(end - begin, 0), np.flatnonzero(keep).astype(np.int64)]
    rank = _rank_of(sp)
    indices, values, dense_shape, source = host_op(name or "SparseSlice", run,
                                                   [sp.indices, sp.values, sp.dense_shape, start_t, size_t],
                                                   [_dt.int64, sp.dtype, _dt.int64, _dt.int64],
                                                   [(None, rank), (None,), (rank,), (None,)])
    return SparseTensor(indices, _picked(sp.values, source, values), dense_shape)


sparse_slice = slice


def expand_dims(sp_input: SparseTensor, axis=None, name=None) -> SparseTensor:
    """`sp_input` with a dimension of size 1 inserted at `axis` (negative: from the end)."""
    sp = SparseTensor.from_value(sp_input)

    def run(indices, shape):
        ax = int(axis) % (len(shape) + 1)
        return [np.insert(indices, ax, 0, axis=1), np.insert(shape, ax, 1)]
    rank = None if _rank_of(sp) is None else _rank_of(sp) + 1
    indices, dense_shape = host_op(name or "SparseExpandDims", run, [sp.indices, sp.dense_shape],
                                   [_dt.int64, _dt.int64], [(None, rank), (rank,)])
    return SparseTensor(indices, sp.values, dense_shape)


# -- built from registered ops (differentiable in the dense operand) -------------------------------------------
def sparse_dense_matmul(sp_a: SparseTensor, b, adjoint_a=False, adjoint_b=False, name=None) -> Tensor:
    """The matrix product of the sparse matrix `sp_a` (transposed with adjoint_a) and the dense `b` (transposed
    with adjoint_b): out[r] = sum over entries (r, c, v) of v * b[c]."""
    sp = SparseTensor.from_value(sp_a)
    with name_scope(name, "SparseTensorDenseMatMul"):
        b = convert_to_tensor(b, dtype=sp.dtype)
        # NOTE: TensorFlow's gradient in b is a dense tensor, not the gather's IndexedSlices: the transpose, or a
        # reshape (a view), makes it one.
        b = array_ops.transpose(b) if adjoint_b else array_ops.reshape(b, array_ops.shape(b))
        rows, cols = sp.indices[:, 0], sp.indices[:, 1]
        if adjoint_a:
            rows, cols = cols, rows
        products = math_ops.multiply(array_ops.expand_dims(sp.values, 1), array_ops.gather(b, cols))
        n = sp.dense_shape[1 if adjoint_a else 0]
        static = _dense_shape_static(sp)
        known = None if static is None else static[1 if adjoint_a else 0]
        return math_ops.unsorted_segment_sum(products, rows, known if known is not None else n)


sparse_tensor_dense_matmul = matmul = sparse_dense_matmul


def embedding_lookup_sparse(params, sp_ids: SparseTensor, sp_weights: SparseTensor | None, partition_strategy="mod",
                            name=None, combiner=None, max_norm=None) -> Tensor:
    """Row i of the result combines the embeddings params[id] of row i's ids (sp_ids' values), weighted by
    sp_weights' values (1 without): "sum", "mean" (by the sum of the weights, TF's default) or "sqrtn" (by the
    root of the sum of squared weights). Rows are 0 .. the largest row with an id, as in TensorFlow."""
    combiner = "mean" if combiner is None else combiner
    if combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"embedding_lookup_sparse: combiner {combiner!r}; use 'sum', 'mean' or 'sqrtn'")
    if isinstance(params, (list, tuple)):
        if len(params) != 1:
            raise ValueError("embedding_lookup_sparse: tfplus takes one params tensor (partitioned params are not "
                             "supported); concatenate the shards")
        params = params[0]
    if max_norm is not None:
        raise ValueError("embedding_lookup_sparse: max_norm is not supported; clip the params instead")
    with name_scope(name, "embedding_lookup_sparse"):
        params = convert_to_tensor(params)
        rows = sp_ids.indices[:, 0]
        num = math_ops.add(math_ops.reduce_max(rows), 1)
        emb = array_ops.gather(params, sp_ids.values)
        if sp_weights is None:
            weights = array_ops.ones_like(math_ops.cast(sp_ids.values, params.dtype))
        else:
            weights = math_ops.cast(sp_weights.values, params.dtype)
        weighted = math_ops.multiply(emb, array_ops.expand_dims(weights, 1))
        total = math_ops.unsorted_segment_sum(weighted, rows, num)
        if combiner == "sum":
            return total
        per_row = weights if combiner == "mean" else math_ops.square(weights)
        norm = math_ops.unsorted_segment_sum(per_row, rows, num)
        if combiner == "sqrtn":
            norm = math_ops.sqrt(norm)
        return math_ops.div_no_nan(total, array_ops.expand_dims(norm, 1))


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.sparse")
