"""TF1's tf.data for graph-mode scripts: Dataset (from_tensor_slices, from_tensors, range, zip, from_generator,
list_files; map, batch, shuffle, repeat, take, skip, filter, prefetch, cache, interleave, flat_map, apply; window,
enumerate, unbatch, shard in tfplus.data.window_ops) and its iterators.

A dataset is a host-side description; its elements are NumPy values made on the host. An iterator's get_next() is
a PyFunc node (tfplus.ops.script_ops) that returns the next element, and raises tf.errors.OutOfRangeError past the
end; its initializer is a PyFunc that takes the values of the graph tensors the dataset was built from (a fed
placeholder, say) and starts it over. A map function is traced once into a graph of its own, which a session of
its own runs for each element.

    import tfplus as tf
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(100, seed=1).batch(32)
    x, y = tf.data.make_one_shot_iterator(ds).get_next()
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator as _Stream
from typing import Any, Callable

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Graph, Tensor, get_default_graph
from tfplus.ops import array_ops
from tfplus.ops.script_ops import call_py_func
from tfplus.sparse import SparseTensor, SparseTensorValue, sparse_placeholder
from tfplus.tensor_shape import TensorShape
from tfplus.tensor_util import infer_dtype

__all__ = ["AUTOTUNE", "Dataset", "Iterator", "make_one_shot_iterator", "make_initializable_iterator",
           "get_output_types", "get_output_shapes", "get_output_classes"]


AUTOTUNE = -1  # tf.data.experimental.AUTOTUNE: a prefetch or map's parallelism "of the runtime's choice"


# -- nested structures: tuples (named ones too) and dicts, keys sorted as tf.nest sorts them. NOTE: a list is
# a component (a tensor's value), not a structure, as tf.data takes it.
def _flatten(s) -> list:
    if isinstance(s, dict):
        return [leaf for k in sorted(s) for leaf in _flatten(s[k])]
    if isinstance(s, tuple) and not isinstance(s, SparseTensorValue):  # a sparse value is one component
        return [leaf for x in s for leaf in _flatten(x)]
    return [s]


def _pack(template, leaves: _Stream):
    if isinstance(template, dict):
        return {k: _pack(template[k], leaves) for k in sorted(template)}
    if isinstance(template, tuple) and not isinstance(template, SparseTensorValue):
        packed = [_pack(x, leaves) for x in template]
        return type(template)(*packed) if hasattr(template, "_fields") else type(template)(packed)
    return next(leaves)


def _map_structure(fn, s):
    return _pack(s, iter([fn(leaf) for leaf in _flatten(s)]))


class _Spec:
    """One component of an element: dtype and static shape (None entries unknown)."""

    def __init__(self, dtype: _dt.DType, shape, sparse: bool = False):
        self.dtype, self.shape, self.sparse = dtype, TensorShape(shape), sparse


def _spec_of_result(t) -> _Spec:
    """The spec of a map function's result: a Tensor, or a SparseTensor (its values' dtype, its dense rank)."""
    if isinstance(t, SparseTensor):
        return _Spec(t.dtype, t.shape, sparse=True)
    return _Spec(t.dtype, t.shape)


def _placeholder_for(s: _Spec, name: str):
    if s.sparse:
        return sparse_placeholder(s.dtype, None if s.shape.ndims is None else [None] * s.shape.ndims, name=name)
    return array_ops.placeholder(s.dtype, s.shape.dims_tuple if s.shape.ndims is not None else None, name=name)


def _batch_sparse(values: list) -> SparseTensorValue:
    """Sparse components stacked as tf.data batches them: each one's indices behind its row in the batch, the
    dense shape the batch size then the largest of each dimension."""
    rank = len(values[0].dense_shape)
    indices = [np.concatenate([np.full((len(v.indices), 1), i, np.int64), np.asarray(v.indices, np.int64)], 1)
               for i, v in enumerate(values)]
    shape = np.max([np.asarray(v.dense_shape, np.int64) for v in values], axis=0) if rank else np.zeros(0, np.int64)
    return SparseTensorValue(np.concatenate(indices).reshape(-1, rank + 1),
                             np.concatenate([np.asarray(v.values) for v in values]),
                             np.concatenate([[len(values)], shape]).astype(np.int64))


def _leaf_value(v, dtype=None):
    """A component given to from_tensor_slices / from_tensors: a graph tensor (evaluated when the iterator starts)
    or a value, made an array of TF's dtype for it (Python floats float32, ints int32)."""
    if isinstance(v, Tensor):
        return v
    dt = _dt.as_dtype(dtype) if dtype is not None else infer_dtype(v)
    return np.asarray(v, dtype=dt.np)


def _spec_of(leaf) -> _Spec:
    if isinstance(leaf, Tensor):
        return _Spec(leaf.dtype, leaf.shape)
    return _Spec(_dt.as_dtype(leaf.dtype), leaf.shape)


# -- datasets -------------------------------------------------------------------------------------------------
class Dataset:
    """A sequence of elements, each a nested structure of arrays. Subclasses say how to iterate (_elements)
    over the values of the graph tensors they capture (a dict id(tensor) -> array)."""

    _structure: Any  # nested structure of _Spec

    # what the dataset was built from
    def _captured(self) -> list[Tensor]:
        return []

    def _elements(self, values: dict) -> _Stream:
        raise NotImplementedError

    # TF1's properties
    @property
    def output_types(self):
        return _map_structure(lambda s: s.dtype, self._structure)

    @property
    def output_shapes(self):
        return _map_structure(lambda s: s.shape, self._structure)

    @property
    def output_classes(self):
        return _map_structure(lambda s: Tensor, self._structure)

    # sources
    @staticmethod
    def from_tensor_slices(tensors) -> Dataset:
        return _Slices(tensors, sliced=True)

    @staticmethod
    def from_tensors(tensors) -> Dataset:
        return _Slices(tensors, sliced=False)

    @staticmethod
    def range(*args, output_type=_dt.int64) -> Dataset:
        return _Range(range(*args), _dt.as_dtype(output_type))

    @staticmethod
    def zip(datasets) -> Dataset:
        return _Zip(datasets)

    @staticmethod
    def from_generator(generator, output_types, output_shapes=None, args=None) -> Dataset:
        return _Generator(generator, output_types, output_shapes, args or ())

    # transformations
    def map(self, map_func, num_parallel_calls=None, deterministic=None) -> Dataset:
        return _Map(self, map_func)

    def filter(self, predicate) -> Dataset:
        return _Map(self, predicate, keep_if=True)

    def batch(self, batch_size: int, drop_remainder: bool = False, num_parallel_calls=None,
              deterministic=None) -> Dataset:
        return _Batch(self, int(batch_size), bool(drop_remainder))

    def padded_batch(self, batch_size: int, padded_shapes=None, padding_values=None,
                     drop_remainder: bool = False) -> Dataset:
        return _Batch(self, int(batch_size), bool(drop_remainder), padded_shapes, padding_values, True)

    def shuffle(self, buffer_size: int, seed=None, reshuffle_each_iteration=True) -> Dataset:
        return _Shuffle(self, int(buffer_size), seed, reshuffle_each_iteration)

    def repeat(self, count=None) -> Dataset:
        return _Stage(self, lambda it, values: _repeat(self, values, count))

    def take(self, count: int) -> Dataset:
        return _Stage(self, lambda it, values: it if count < 0 else itertools.islice(it, count))

    def skip(self, count: int) -> Dataset:
        return _Stage(self, lambda it, values: iter(()) if count < 0 else itertools.islice(it, count, None))

    def interleave(self, map_func, cycle_length=None, block_length=1, num_parallel_calls=None,
                   deterministic=None) -> Dataset:
        from tfplus.data.interleave import Interleave
        return Interleave(self, map_func, cycle_length, block_length)

    def flat_map(self, map_func) -> Dataset:
        return self.interleave(map_func, cycle_length=1)

    def window(self, size: int, shift=None, stride: int = 1, drop_remainder: bool = False) -> Dataset:
        from tfplus.data.window_ops import Window
        return Window(self, size, shift, stride, drop_remainder)

    def enumerate(self, start: int = 0) -> Dataset:
        from tfplus.data.window_ops import Enumerate
        return Enumerate(self, start)

    def unbatch(self) -> Dataset:
        from tfplus.data.window_ops import Unbatch
        return Unbatch(self)

    def shard(self, num_shards: int, index: int) -> Dataset:
        if not 0 <= int(index) < int(num_shards):
            raise ValueError(f"tf.data.Dataset.shard: index {index} must be in [0, num_shards={num_shards})")
        return _Stage(self, lambda it, values: itertools.islice(it, int(index), None, int(num_shards)))

    def apply(self, transformation_func) -> Dataset:
        return transformation_func(self)

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None) -> Dataset:
        from tfplus.data.interleave import list_files
        return list_files(file_pattern, shuffle, seed)

    def concatenate(self, dataset: Dataset) -> Dataset:
        return _Concat(self, dataset)

    def prefetch(self, buffer_size) -> Dataset:
        return self  # the elements are made on the host when get_next() runs; nothing to overlap with

    def cache(self, filename: str = "") -> Dataset:
        return self  # each pass makes the same elements again (a shuffle draws anew, as after a cache in TF)

    # TF1's iterator methods (DatasetV1)
    def make_one_shot_iterator(self) -> Iterator:
        return make_one_shot_iterator(self)

    def make_initializable_iterator(self, shared_name=None) -> Iterator:
        return make_initializable_iterator(self)


class _Slices(Dataset):
    def __init__(self, tensors, sliced: bool):
        self._template = tensors
        self._leaves = [_leaf_value(v) for v in _flatten(tensors)]
        self._sliced = sliced
        specs = [_spec_of(v) for v in self._leaves]
        if sliced:
            for s in specs:
                if s.shape.ndims == 0:
                    raise ValueError("tf.data.Dataset.from_tensor_slices: a component is a scalar; each must "
                                     "have a first dimension to slice")
            specs = [_Spec(s.dtype, None if s.shape.ndims is None else s.shape.as_list()[1:]) for s in specs]
        self._structure = _pack(tensors, iter(specs))

    def _captured(self):
        return [v for v in self._leaves if isinstance(v, Tensor)]

    def _elements(self, values):
        arrays = [values[id(v)] if isinstance(v, Tensor) else v for v in self._leaves]
        if not self._sliced:
            yield _pack(self._template, iter(arrays))
            return
        sizes = {len(a) for a in arrays}
        if len(sizes) > 1:
            raise ValueError(f"tf.data.Dataset.from_tensor_slices: the components' first dimensions differ "
                             f"({sorted(sizes)})")
        for i in range(sizes.pop() if sizes else 0):
            yield _pack(self._template, iter([a[i] for a in arrays]))


class _Range(Dataset):
    def __init__(self, r: range, dtype: _dt.DType):
        self._range, self._structure = r, _Spec(dtype, [])

    def _elements(self, values):
        for i in self._range:
            yield np.asarray(i, self._structure.dtype.np)


class _Generator(Dataset):
    def __init__(self, generator, output_types, output_shapes, args):
        self._generator, self._args = generator, args
        self._types = output_types
        shapes = output_shapes if output_shapes is not None else _map_structure(lambda t: None, output_types)
        self._structure = _pack(output_types, iter([_Spec(_dt.as_dtype(t), s) for t, s in
                                                    zip(_flatten(output_types), _flatten(shapes))]))

    def _elements(self, values):
        dtypes = [s.dtype for s in _flatten(self._structure)]
        for element in self._generator(*self._args):
            leaves = [np.asarray(v, d.np) for v, d in zip(_flatten(element), dtypes)]
            yield _pack(self._types, iter(leaves))


class _Derived(Dataset):
    """A dataset made from others: it captures what they capture."""
    _inputs: tuple = ()

    def _captured(self):
        seen, out = set(), []
        for d in self._inputs:
            for t in d._captured():
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
        return out


class _Zip(_Derived):
    def __init__(self, datasets):
        self._template = datasets
        self._inputs = tuple(_datasets_in(datasets))
        self._structure = _pack_datasets(datasets, iter([d._structure for d in self._inputs]))

    def _elements(self, values):
        for parts in zip(*[d._elements(values) for d in self._inputs]):
            yield _pack_datasets(self._template, iter(parts))


def _datasets_in(s):
    """zip's argument: a nested structure whose leaves are datasets (their elements may be structures too)."""
    if isinstance(s, Dataset):
        return [s]
    if isinstance(s, dict):
        return [d for k in sorted(s) for d in _datasets_in(s[k])]
    return [d for x in s for d in _datasets_in(x)]


def _pack_datasets(template, parts: _Stream):
    if isinstance(template, Dataset):
        return next(parts)
    if isinstance(template, dict):
        return {k: _pack_datasets(template[k], parts) for k in sorted(template)}
    return type(template)(_pack_datasets(x, parts) for x in template)


class _Concat(_Derived):
    def __init__(self, a: Dataset, b: Dataset):
        self._inputs, self._structure = (a, b), a._structure

    def _elements(self, values):
        return itertools.chain(self._inputs[0]._elements(values), self._inputs[1]._elements(values))


class _Stage(_Derived):
    """A transformation of the input's element stream: step(iterator, values) -> iterator."""

    def __init__(self, dataset: Dataset, step: Callable):
        self._inputs, self._structure, self._step = (dataset,), dataset._structure, step

    def _elements(self, values):
        return self._step(self._inputs[0]._elements(values), values)


def _repeat(dataset: Dataset, values: dict, count):
    for n in itertools.count():
        if count is not None and 0 <= count <= n:
            return
        yield from dataset._elements(values)


class _Batch(_Derived):
    """batch, and padded_batch: each component padded (with its padding value, else 0) up to its padded shape,
    whose unknown (None or -1) dimensions take the batch's largest."""

    def __init__(self, dataset: Dataset, size: int, drop_remainder: bool, padded_shapes=None, padding_values=None,
                 padded: bool = False):
        if size < 1:
            raise ValueError(f"tf.data.Dataset.batch: batch_size must be at least 1, got {size}")
        self._inputs, self._size, self._drop = (dataset,), size, drop_remainder
        specs = _flatten(dataset._structure)
        self._pads = None
        if padded_shapes is not None or padded:
            given = _flatten_shapes(padded_shapes) if padded_shapes is not None else [None] * len(specs)
            self._pads = [None if TensorShape(g or s.shape).ndims is None else
                          [None if d is None or d < 0 else int(d) for d in TensorShape(g or s.shape).as_list()]
                          for g, s in zip(given, specs)]
            values = _flatten(padding_values) if padding_values is not None else [0] * len(specs)
            self._fill = values if len(values) == len(specs) else values * len(specs)
        first = size if drop_remainder else None
        shapes = [[first] + self._pads[i] if self._pads is not None and self._pads[i] is not None else
                  None if s.shape.ndims is None else [first] + s.shape.as_list() for i, s in enumerate(specs)]
        self._structure = _pack(dataset._structure, iter([_Spec(s.dtype, shape, s.sparse) for s, shape in
                                                          zip(specs, shapes)]))

    def _elements(self, values):
        it = self._inputs[0]._elements(values)
        while True:
            rows = list(itertools.islice(it, self._size))
            if not rows or (self._drop and len(rows) < self._size):
                return
            columns = list(zip(*[_flatten(r) for r in rows]))
            if self._pads is not None and any(s.sparse for s in _flatten(self._structure)):
                raise ValueError("tf.data.Dataset.padded_batch: a component is a SparseTensor; use batch")
            if self._pads is not None:
                columns = [self._padded(k, [np.asarray(v) for v in column]) for k, column in enumerate(columns)]
            yield _pack(rows[0], iter([_batch_sparse(column) if isinstance(column[0], SparseTensorValue) else
                                       np.stack(column) for column in columns]))

    def _padded(self, k: int, column: list) -> list:
        pads = self._pads[k] if self._pads[k] is not None else [None] * column[0].ndim
        target = [d if d is not None else max(v.shape[i] for v in column) for i, d in enumerate(pads)]
        fill = np.asarray(self._fill[k]).astype(column[0].dtype)
        # NOTE: np.pad refuses a scalar component (no dimension to pad): it stays as it is
        return [np.pad(v, [(0, t - n) for t, n in zip(target, v.shape)], constant_values=fill) if v.ndim else v
                for v in column]


class _Shuffle(_Derived):
    """A buffer of buffer_size elements; each element given out is drawn from it at random (TF's algorithm;
    the draws are NumPy's, so the order differs from TensorFlow's for the same seed)."""

    def __init__(self, dataset: Dataset, buffer_size: int, seed, reshuffle: bool):
        if buffer_size < 1:
            raise ValueError(f"tf.data.Dataset.shuffle: buffer_size must be at least 1, got {buffer_size}")
        self._inputs, self._structure = (dataset,), dataset._structure
        self._size, self._reshuffle = buffer_size, reshuffle
        graph_seed = get_default_graph().seed
        self._seed = seed if seed is not None else graph_seed
        self._passes = 0

    def _elements(self, values):
        seed = None if self._seed is None else (self._seed, self._passes if self._reshuffle else 0)
        self._passes += 1
        rng = np.random.default_rng(seed)
        buffer: list = []
        for element in self._inputs[0]._elements(values):
            buffer.append(element)
            if len(buffer) == self._size:
                yield buffer.pop(int(rng.integers(len(buffer))))
        while buffer:
            yield buffer.pop(int(rng.integers(len(buffer))))


def trace(dataset: Dataset, fn: Callable) -> tuple[Graph, list, object]:
    """fn called once on placeholders of the dataset's element components, in a graph of its own (with the script's
    graph seed): (that graph, the placeholders, what fn returned)."""
    graph = Graph()
    graph.seed = get_default_graph().seed
    with graph.as_default():
        # a window's components are datasets (window_ops.Rows): the function gets them as they are
        args = [s if isinstance(s, Dataset) else _placeholder_for(s, f"arg{i}")
                for i, s in enumerate(_flatten(dataset._structure))]
        arg = _pack(dataset._structure, iter(args))
        result = fn(*arg) if isinstance(arg, tuple) and not hasattr(arg, "_fields") else fn(arg)
    return graph, args, result


class _Map(_Derived):
    """map (and filter: keep_if) with a function traced once into a graph of its own, run by a session of its
    own for each element. The function sees the element's components as placeholders."""

    def __init__(self, dataset: Dataset, fn: Callable, keep_if: bool = False):
        self._inputs, self._keep_if = (dataset,), keep_if
        try:
            self._graph, self._args, result = trace(dataset, fn)
        except ValueError as e:
            raise ValueError(f"tf.data.Dataset.{'filter' if keep_if else 'map'}: the function failed while "
                             f"traced in the dataset's own graph ({e}); it may use only its arguments and "
                             "constants it makes, not tensors of the script's graph") from e
        with self._graph.as_default():
            if isinstance(result, list):  # as TensorFlow: a list of results is a tuple (a list is a component)
                result = tuple(result)
            result = _map_structure(lambda v: v if isinstance(v, (Tensor, SparseTensor)) else array_ops.constant(v),
                                    result)
        self._result = result
        self._outputs = _flatten(result)
        self._structure = dataset._structure if keep_if else \
            _map_structure(_spec_of_result, result)
        self._session = None

    def _run(self, element):
        if self._session is None:
            from tfplus.engine.session import Session  # the dataset's own session, made when it first runs
            self._session = Session(graph=self._graph, device="cpu")  # an input pipeline runs on the host, as in TF
        feeds = dict(zip(self._args, _flatten(element)))
        return self._session.run(self._outputs, feeds)

    def _elements(self, values):
        for element in self._inputs[0]._elements(values):
            out = self._run(element)
            if self._keep_if:
                if bool(np.asarray(out[0]).reshape(())):
                    yield element
            else:
                yield _pack(self._result, iter(out))


# -- iterators -----------------------------------------------------------------------------------------------
class Iterator:
    """TF1's tf.data.Iterator: get_next() is a PyFunc node giving the next element of the dataset the iterator
    was last initialized with; `initializer` (or make_initializer(dataset)) starts it."""

    def __init__(self, structure, one_shot: Dataset | None = None):
        self._structure = structure
        self._stream: _Stream | None = None
        self._one_shot = one_shot
        self._handle: Tensor | None = None  # from_string_handle's: the iterator to read is the one it names
        self.initializer = None

    @staticmethod
    def from_string_handle(string_handle, output_types, output_shapes=None, output_classes=None) -> Iterator:
        """A feedable iterator: get_next() reads the iterator whose string_handle() value `string_handle` (a
        tf.string placeholder, say) holds when it runs, e.g. a training or a validation one."""
        it = Iterator.from_structure(output_types, output_shapes)
        it._handle = string_handle
        return it

    def string_handle(self, name=None) -> Tensor:
        """This iterator's name for from_string_handle's iterators: a string to fetch once and feed."""
        captured = self._one_shot._captured() if self._one_shot is not None else []
        handle = f"tfplus-iterator-{id(self)}"

        def register(*arrays):
            _BY_HANDLE[handle] = (self, arrays)  # a one-shot iterator starts on the values they had then
            return [np.asarray(handle.encode())]
        return call_py_func(register, captured, [_dt.string], [()], name=name or "IteratorToStringHandle").outputs[0]

    @staticmethod
    def from_structure(output_types, output_shapes=None, shared_name=None, output_classes=None) -> Iterator:
        shapes = output_shapes if output_shapes is not None else _map_structure(lambda t: None, output_types)
        flat_shapes = [None] * len(_flatten(output_types)) if shapes is None else _flatten_shapes(shapes)
        specs = [_Spec(_dt.as_dtype(t), s) for t, s in zip(_flatten(output_types), flat_shapes)]
        return Iterator(_pack(output_types, iter(specs)))

    @property
    def output_types(self):
        return _map_structure(lambda s: s.dtype, self._structure)

    @property
    def output_shapes(self):
        return _map_structure(lambda s: s.shape, self._structure)

    def make_initializer(self, dataset: Dataset, name=None):
        """The op that starts this iterator over `dataset` (its captured tensors' values as they are then)."""
        mine, theirs = _flatten(self._structure), _flatten(dataset._structure)
        if len(mine) != len(theirs) or any(a.dtype is not b.dtype for a, b in zip(mine, theirs)):
            raise TypeError(f"Iterator.make_initializer: the dataset's types {dataset.output_types} differ from "
                            f"the iterator's {self.output_types}")
        captured = dataset._captured()

        def start(*arrays):
            self._stream = dataset._elements({id(t): a for t, a in zip(captured, arrays)})
            return []
        return call_py_func(start, captured, [], name=name or "MakeIterator")

    def _next_element(self, captured: list, arrays) -> list:
        """The next element's arrays; a sparse component is three: indices, values, dense_shape."""
        if self._stream is None:
            if self._one_shot is None:
                raise _failed_precondition("GetNext() failed because the iterator has not been initialized. "
                                           "Run the iterator's initializer (sess.run(iterator.initializer)) "
                                           "before fetching elements")
            self._stream = self._one_shot._elements({id(t): a for t, a in zip(captured, arrays)})
        return [part for leaf in _flatten(next(self._stream))
                for part in (leaf if isinstance(leaf, SparseTensorValue) else [leaf])]

    def get_next(self, name=None):
        specs = _flatten(self._structure)
        if self._handle is not None:
            captured = [self._handle]

            def next_element(handle):
                key = np.asarray(handle).reshape(()).item()
                key = key.decode() if isinstance(key, bytes) else str(key)
                if key not in _BY_HANDLE:
                    raise _invalid_argument(f"IteratorGetNext: {key!r} is not the value of a string_handle() "
                                            "fetched in this process; feed the value sess.run(it.string_handle()) "
                                            "gave")
                target, arrays = _BY_HANDLE[key]
                return target._next_element(target._one_shot._captured() if target._one_shot else [], arrays)
        else:
            captured = self._one_shot._captured() if self._one_shot is not None else []

            def next_element(*arrays):
                return self._next_element(captured, arrays)
        types, shapes = [], []
        for s in specs:
            rank = s.shape.ndims
            types += [_dt.int64, s.dtype, _dt.int64] if s.sparse else [s.dtype]
            shapes += [(None, rank), (None,), (rank,)] if s.sparse else \
                [s.shape.dims_tuple if rank is not None else None]
        outputs = iter(call_py_func(next_element, captured, types, shapes, name=name or "IteratorGetNext").outputs)
        return _pack(self._structure, iter([SparseTensor(next(outputs), next(outputs), next(outputs)) if s.sparse
                                            else next(outputs) for s in specs]))


def _flatten_shapes(shapes) -> list:
    """The leaves of a structure of shapes: TensorShapes, lists of ints and Nones are leaves, not structures."""
    if isinstance(shapes, dict):
        return [leaf for k in sorted(shapes) for leaf in _flatten_shapes(shapes[k])]
    if isinstance(shapes, tuple) and not all(d is None or isinstance(d, int) for d in shapes):
        return [leaf for x in shapes for leaf in _flatten_shapes(x)]
    return [shapes]


# string_handle() value -> (its iterator, the values of a one-shot iterator's captured tensors then)
_BY_HANDLE: dict = {}


def _invalid_argument(message: str):
    from tfplus import errors
    return errors.InvalidArgumentError(None, None, message)


def _failed_precondition(message: str):
    from tfplus import errors
    return errors.FailedPreconditionError(None, None, message)


def make_one_shot_iterator(dataset: Dataset) -> Iterator:
    """An iterator that starts itself on its first get_next(), once; the dataset's captured tensors (constants)
    are its get_next node's inputs."""
    return Iterator(dataset._structure, one_shot=dataset)


def make_initializable_iterator(dataset: Dataset, shared_name=None) -> Iterator:
    """An iterator whose `initializer` (re)starts it; fed placeholders the dataset uses take their values then."""
    it = Iterator(dataset._structure)
    it.initializer = it.make_initializer(dataset)
    return it


def get_output_types(dataset_or_iterator):
    return dataset_or_iterator.output_types


def get_output_shapes(dataset_or_iterator):
    return dataset_or_iterator.output_shapes


def get_output_classes(dataset_or_iterator):
    return _map_structure(lambda s: Tensor, dataset_or_iterator._structure)
