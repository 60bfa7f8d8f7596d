"""tf.data's transformations that group elements (TF 1.12-1.15): Dataset.window (each window a structure of
datasets, flattened by flat_map), Dataset.enumerate / unbatch / shard, and tf.data.experimental's group_by_window
and bucket_by_sequence_length (the NMT pipelines' length bucketing).

    ds = tf.data.Dataset.from_tensor_slices(series).window(5, shift=1, drop_remainder=True)
    ds = ds.flat_map(lambda w: w.batch(5))             # every run of 5 consecutive values

A group (a window) is handed on as a `Rows` dataset: its elements are the group's, given by the grouping stage
when it runs, so rows of different shapes (sequences of different lengths) group without being stacked.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tfplus import dtypes as _dt
from tfplus.data.dataset_ops import Dataset, _Derived, _flatten, _pack, _Spec, trace
from tfplus.framework import Graph, Tensor, constant_value
from tfplus.ops import array_ops, math_ops

__all__ = ["group_by_window", "bucket_by_sequence_length", "unbatch", "enumerate_dataset"]


class Rows(Dataset):
    """A dataset of the elements a grouping stage gives it when it runs (values[id(self)], a list)."""

    def __init__(self, structure):
        self._structure = structure

    def _elements(self, values):
        return iter(values[id(self)])


class Window(_Derived):
    """Dataset.window: windows of `size` elements (every `stride`-th), one starting every `shift` elements; each
    window is the element's structure with a Rows dataset for each component. The last windows are shorter unless
    drop_remainder."""

    def __init__(self, dataset: Dataset, size: int, shift, stride: int, drop_remainder: bool):
        self._size, self._shift, self._stride = int(size), int(shift if shift is not None else size), int(stride)
        if min(self._size, self._shift, self._stride) < 1:
            raise ValueError(f"tf.data.Dataset.window: size ({size}), shift ({shift}) and stride ({stride}) must be "
                             "positive")
        self._inputs, self._drop = (dataset,), drop_remainder
        self._structure = _pack(dataset._structure, iter([Rows(s) for s in _flatten(dataset._structure)]))

    def _elements(self, values):
        it = self._inputs[0]._elements(values)
        buffer: list = []          # buffer[i] is element base + i
        base, start, exhausted = 0, 0, False
        span = (self._size - 1) * self._stride + 1
        while True:
            while not exhausted and base + len(buffer) < start + span:
                element = next(it, None)
                if element is None:
                    exhausted = True
                else:
                    buffer.append(element)
            rows = buffer[start - base::self._stride][:self._size]
            if not rows or (self._drop and len(rows) < self._size):
                return
            yield _pack(self._structure, iter([[_flatten(r)[k] for r in rows]
                                               for k in range(len(_flatten(self._structure)))]))
            start += self._shift
            del buffer[:start - base]
            base = max(base, start)


class Enumerate(_Derived):
    def __init__(self, dataset: Dataset, start: int):
        self._inputs, self._start = (dataset,), int(start)
        self._structure = (_Spec(_dt.int64, []), dataset._structure)

    def _elements(self, values):
        for i, element in enumerate(self._inputs[0]._elements(values), self._start):
            yield np.int64(i), element


class Unbatch(_Derived):
    def __init__(self, dataset: Dataset):
        specs = _flatten(dataset._structure)
        if any(s.sparse or s.shape.ndims == 0 for s in specs):
            raise ValueError("tf.data.Dataset.unbatch: every component must be a dense tensor with a first "
                             "dimension to split")
        self._inputs = (dataset,)
        self._structure = _pack(dataset._structure, iter([
            _Spec(s.dtype, None if s.shape.ndims is None else s.shape.as_list()[1:]) for s in specs]))

    def _elements(self, values):
        for element in self._inputs[0]._elements(values):
            parts = [np.asarray(p) for p in _flatten(element)]
            for i in range(len(parts[0])):
                yield _pack(self._structure, iter([p[i] for p in parts]))


def _traced_runner(graph: Graph, feeds_of: Callable, outputs: list) -> Callable:
    """A function running `outputs` of `graph` in a session of its own (made on first use) with feeds_of(arg)."""
    state: dict = {}

    def run(arg):
        if "session" not in state:
            from tfplus.engine.session import Session
            state["session"] = Session(graph=graph, device="cpu")  # an input pipeline runs on the host, as in TF
        return state["session"].run(outputs, feeds_of(arg))
    return run


class GroupByWindow(_Derived):
    """group_by_window: each element's key (key_func traced once), its group given to reduce(key, rows) -- a
    dataset made once per key over a Rows dataset -- whenever it holds window_size(key) elements, and the groups
    left at the end of the input in the order their keys first came."""

    def __init__(self, dataset: Dataset, key_func: Callable, window_size: Callable[[int], int],
                 reduce: Callable[[int, Rows], Dataset]):
        self._inputs, self._window_size, self._reduce = (dataset,), window_size, reduce
        graph, args, key = trace(dataset, key_func)
        key = key if isinstance(key, Tensor) else array_ops.constant(key)
        if key.dtype != _dt.int64 or key.shape.ndims not in (0, None):
            raise ValueError(f"tf.data.experimental.group_by_window: key_func must return an int64 scalar, got "
                             f"{key.dtype.name} of shape {key.shape}")
        self._key = _traced_runner(graph, lambda element: dict(zip(args, _flatten(element))), [key])
        self._per_key: dict = {}
        self._structure = self._for_key(0)[1]._structure

    def _for_key(self, key: int) -> tuple:
        if key not in self._per_key:
            rows = Rows(self._inputs[0]._structure)
            self._per_key[key] = (rows, self._reduce(key, rows), self._window_size(key))
        return self._per_key[key]

    def _elements(self, values):
        groups: dict = {}
        for element in self._inputs[0]._elements(values):
            key = int(self._key(element)[0])
            groups.setdefault(key, []).append(element)
            rows, inner, size = self._for_key(key)
            if len(groups[key]) >= size:
                yield from inner._elements({**values, id(rows): groups.pop(key)})
        for key, group in groups.items():
            rows, inner, _ = self._for_key(key)
            yield from inner._elements({**values, id(rows): group})


def _int_of(fn: Callable, key: int) -> int:
    """fn(key) (a Python int or a constant tensor, made in a graph of its own) as an int."""
    with Graph().as_default():
        value = fn(array_ops.constant(np.int64(key)))
        if isinstance(value, Tensor):
            folded = constant_value(value)
            if folded is None:
                from tfplus.engine.session import Session
                folded = Session(device="cpu").run(value)
            value = folded
    return int(np.asarray(value).reshape(()))


def group_by_window(key_func, reduce_func, window_size=None, window_size_func=None):
    """`ds.apply(group_by_window(key_func, reduce_func, window_size))`: elements grouped by key_func (an int64
    scalar), each group of window_size (or window_size_func(key)) elements made a dataset by reduce_func(key,
    window) and its elements given in turn."""
    if (window_size is None) == (window_size_func is None):
        raise ValueError("tf.data.experimental.group_by_window: give exactly one of window_size and "
                         "window_size_func")
    sizes: dict = {}

    def size_of(key: int) -> int:
        if key not in sizes:
            sizes[key] = int(window_size) if window_size is not None else _int_of(window_size_func, key)
        return sizes[key]

    def reduce(key: int, rows: Rows) -> Dataset:
        with Graph().as_default():  # NOTE: made while the iterator runs too: never in the script's graph
            inner = reduce_func(array_ops.constant(np.int64(key)), rows)
        if not isinstance(inner, Dataset) or inner._captured():
            raise TypeError("tf.data.experimental.group_by_window: reduce_func must return a dataset made of its "
                            f"window alone (window.batch(n), window.padded_batch(...)), got {type(inner).__name__}")
        return inner
    return lambda dataset: GroupByWindow(dataset, key_func, size_of, reduce)


def bucket_by_sequence_length(element_length_func, bucket_boundaries, bucket_batch_sizes, padded_shapes=None,
                              padding_values=None, pad_to_bucket_boundary=False, no_padding=False,
                              drop_remainder=False):
    """`ds.apply(bucket_by_sequence_length(len_fn, [10, 20], [32, 32, 16]))`: elements bucketed by
    element_length_func's int32 length (bucket i holds lengths in [boundaries[i-1], boundaries[i])), each bucket
    batched by its batch size, padded to the batch's longest (or to the bucket's boundary - 1)."""
    boundaries = [int(b) for b in bucket_boundaries]
    sizes = [int(b) for b in bucket_batch_sizes]
    if len(sizes) != len(boundaries) + 1:
        raise ValueError(f"tf.data.experimental.bucket_by_sequence_length: {len(sizes)} batch sizes for "
                         f"{len(boundaries)} boundaries; give len(bucket_boundaries) + 1")
    if boundaries != sorted(boundaries):
        raise ValueError(f"tf.data.experimental.bucket_by_sequence_length: bucket_boundaries {boundaries} must be "
                         "sorted")

    def bucket_of(*args):
        length = math_ops.cast(element_length_func(*args), _dt.int64)
        below = math_ops.cast(math_ops.less_equal(array_ops.constant(np.array(boundaries, np.int64)), length),
                              _dt.int64)
        return math_ops.reduce_sum(below)   # the number of boundaries at or below the length

    def reduce(key: int, rows: Rows) -> Dataset:
        if no_padding:
            return rows.batch(sizes[key], drop_remainder)
        shapes = padded_shapes if padded_shapes is not None else rows.output_shapes
        if pad_to_bucket_boundary:
            if key == len(boundaries):
                raise ValueError("tf.data.experimental.bucket_by_sequence_length: pad_to_bucket_boundary needs "
                                 "every length below the last boundary")
            shapes = _map_shapes(shapes, boundaries[key] - 1)
        return rows.padded_batch(sizes[key], shapes, padding_values, drop_remainder)
    return lambda dataset: GroupByWindow(dataset, lambda *a: bucket_of(*a), lambda key: sizes[key], reduce)


def _map_shapes(shapes, filler: int):
    from tfplus.tensor_shape import TensorShape
    return _pack(shapes, iter([[filler if d is None else d for d in TensorShape(s).as_list()]
                               for s in _flatten(shapes)]))


def unbatch():
    """`ds.apply(tf.data.experimental.unbatch())`: Dataset.unbatch."""
    return lambda dataset: dataset.unbatch()


def enumerate_dataset(start=0):
    """`ds.apply(tf.data.experimental.enumerate_dataset())`: Dataset.enumerate."""
    return lambda dataset: dataset.enumerate(start)
