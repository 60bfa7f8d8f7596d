"""tf.lookup (TF 1.14+) and tf.contrib.lookup (TF 1.0-1.13): static lookup tables, the vocabulary maps of text
pipelines. A table is filled by its initializer's op (run by tf.tables_initializer(), as in TF1) from tensors
(KeyValueTensorInitializer) or a text file (TextFileInitializer); lookup maps a tensor (or a SparseTensor's values)
of keys to values, the default value for keys not in the table. Both are host ops (PyFunc) over the NumPy values;
a lookup before the initializer ran is TF's FailedPreconditionError "Table not initialized.".

    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(["a", "b"], [1, 2], value_dtype=tf.int64), 0)
    ids = table.lookup(tf.string_split(sentences).values)
    sess.run(tf.tables_initializer())

Tables that hash keys out of the vocabulary into buckets (StaticVocabularyTable, num_oov_buckets > 0) need TF's
Fingerprint64 and are refused.
"""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus import errors
from tfplus.framework import GraphKeys, Tensor, add_to_collection, convert_to_tensor, get_default_graph, name_scope
from tfplus.ops import array_ops, math_ops
from tfplus.ops.host_ops import host_op, to_bytes
from tfplus.ops.script_ops import call_py_func
from tfplus.sparse import SparseTensor

__all__ = ["KeyValueTensorInitializer", "TextFileInitializer", "TextFileIndex", "StaticHashTable", "HashTable",
           "index_table_from_tensor", "index_table_from_file", "index_to_string_table_from_tensor",
           "index_to_string_table_from_file"]

TABLE_INITIALIZERS = GraphKeys.TABLE_INITIALIZERS


class TextFileIndex:
    WHOLE_LINE = -2
    LINE_NUMBER = -1


def _key(value, dtype):
    """A key or value element as a hashable Python value of `dtype` (strings as bytes)."""
    if dtype == _dt.string:
        return to_bytes(value)
    return dtype.as_numpy_dtype(value).item()


class KeyValueTensorInitializer:
    """The table's contents from two tensors of equal length: keys and values."""

    def __init__(self, keys, values, key_dtype=None, value_dtype=None, name=None):
        with name_scope(name, "key_value_init"):
            self._keys = convert_to_tensor(keys, dtype=key_dtype, name="keys")
            self._values = convert_to_tensor(values, dtype=value_dtype, name="values")
        self.key_dtype, self.value_dtype = self._keys.dtype, self._values.dtype

    def _inputs(self) -> list:
        return [self._keys, self._values]

    def _pairs(self, keys, values) -> list:
        if np.shape(keys) != np.shape(values):
            raise ValueError(f"keys of shape {np.shape(keys)} and values of shape {np.shape(values)} differ")
        return list(zip(np.ravel(keys), np.ravel(values)))


class TextFileInitializer:
    """The table's contents from a text file, one entry a line: the key and the value each a column (split by
    `delimiter`), the whole line (TextFileIndex.WHOLE_LINE) or the line's number from 0 (LINE_NUMBER); at most
    vocab_size lines."""

    def __init__(self, filename, key_dtype, key_index, value_dtype, value_index, vocab_size=None, delimiter="\t",
                 name=None):
        self._filename = convert_to_tensor(filename, dtype=_dt.string)
        self.key_dtype, self.value_dtype = _dt.as_dtype(key_dtype), _dt.as_dtype(value_dtype)
        self._key_index, self._value_index = key_index, value_index
        self._vocab_size, self._delimiter = vocab_size, delimiter
        for index, dtype, what in ((key_index, self.key_dtype, "key"), (value_index, self.value_dtype, "value")):
            if index == TextFileIndex.LINE_NUMBER and dtype != _dt.int64:
                raise ValueError(f"tf.lookup.TextFileInitializer: the {what} is the line number, so its dtype must "
                                 f"be int64, not {dtype.name}")
            if index == TextFileIndex.WHOLE_LINE and dtype != _dt.string:
                raise ValueError(f"tf.lookup.TextFileInitializer: the {what} is the whole line, so its dtype must "
                                 f"be string, not {dtype.name}")

    def _inputs(self) -> list:
        return [self._filename]

    def _pairs(self, filename) -> list:
        name = to_bytes(np.asarray(filename, object).item()).decode()
        try:
            with open(name, "rb") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise errors.NotFoundError(None, None, f"tf.lookup.TextFileInitializer: cannot read {name}: {e}") from None
        if self._vocab_size is not None:
            if len(lines) < self._vocab_size:
                raise errors.InvalidArgumentError(None, None, f"Invalid vocab_size in {name}: expected "
                                                              f"{self._vocab_size}, got {len(lines)}")
            lines = lines[:self._vocab_size]

        def column(number, line, index, dtype):
            if index == TextFileIndex.LINE_NUMBER:
                return number
            if index == TextFileIndex.WHOLE_LINE:
                return line
            cols = line.split(self._delimiter.encode())
            if index >= len(cols):
                raise errors.InvalidArgumentError(None, None, f"Invalid number of columns in {name} line {number} "
                                                              f"({line!r}): expected more than {index}")
            return cols[index] if dtype == _dt.string else dtype.as_numpy_dtype(cols[index].decode()).item()
        return [(column(i, line, self._key_index, self.key_dtype), column(i, line, self._value_index,
                                                                         self.value_dtype))
                for i, line in enumerate(lines)]


class StaticHashTable:
    """A table of fixed contents, filled when its initializer op runs; lookup gives default_value for keys it
    lacks (TF's StaticHashTable, TF1's tf.contrib.lookup.HashTable)."""

    def __init__(self, initializer, default_value, name=None):
        self.key_dtype, self.value_dtype = initializer.key_dtype, initializer.value_dtype
        graph = get_default_graph()
        with name_scope(name, "hash_table") as scope:
            self._name = scope.rstrip("/")
            self._default_value = convert_to_tensor(default_value, dtype=self.value_dtype, name="default_value")
            self._contents: dict | None = None
            self._initializer_obj = initializer

            def fill(*values):
                self._contents = {_key(k, self.key_dtype): _key(v, self.value_dtype)
                                  for k, v in initializer._pairs(*values)}
                return []
            with graph.control_dependencies(None):
                self.initializer = call_py_func(fill, initializer._inputs(), [], name="table_init")
        add_to_collection(TABLE_INITIALIZERS, self.initializer)

    name = property(lambda self: self._name)
    default_value = property(lambda self: self._default_value)
    init = property(lambda self: self.initializer)   # TF1's HashTable.init

    def _table(self, node: str, op_type: str) -> dict:
        if self._contents is None:
            raise errors.FailedPreconditionError(node, op_type, "Table not initialized.")
        return self._contents

    def lookup(self, keys, name=None):
        """The values of `keys` (a tensor of any shape, or a SparseTensor whose values are keys)."""
        sparse = not isinstance(keys, Tensor) and hasattr(keys, "dense_shape")
        values = keys.values if sparse else convert_to_tensor(keys, dtype=self.key_dtype)
        if values.dtype != self.key_dtype:
            raise TypeError(f"table '{self._name}': keys of dtype {values.dtype.name}, but the table's keys are "
                            f"{self.key_dtype.name}")
        with name_scope(name, f"{self._name}_Lookup") as scope:
            node = scope + "LookupTableFindV2"

            def find(keys_value, default):
                table = self._table(node, "LookupTableFindV2")
                default = _key(np.asarray(default).item(), self.value_dtype)
                found = [table.get(_key(k, self.key_dtype), default) for k in np.ravel(keys_value)]
                out = np.empty(len(found), object if self.value_dtype == _dt.string else
                               self.value_dtype.as_numpy_dtype)
                out[:] = found
                return [out.reshape(np.shape(keys_value))]
            (out,) = host_op("LookupTableFindV2", find, [values, self._default_value], [self.value_dtype],
                             shapes=[values.shape.as_list() if values.shape.ndims is not None else None])
        if sparse:
            return SparseTensor(keys.indices, out, keys.dense_shape)
        return out

    def size(self, name=None):
        """The number of entries, an int64 scalar."""
        with name_scope(name, f"{self._name}_Size") as scope:
            node = scope + "LookupTableSizeV2"
            (out,) = host_op("LookupTableSizeV2", lambda: [np.int64(len(self._table(node, "LookupTableSizeV2")))],
                             [], [_dt.int64], shapes=[[]])
        return out


HashTable = StaticHashTable


def _refuse_oov(num_oov_buckets: int, fn: str) -> None:
    if num_oov_buckets:
        raise NotImplementedError(f"tf.contrib.lookup.{fn}: num_oov_buckets={num_oov_buckets} hashes keys by TF's "
                                  "Fingerprint64, which tfplus does not implement; map unknown keys to "
                                  "default_value (num_oov_buckets=0)")


def index_table_from_tensor(mapping, num_oov_buckets=0, default_value=-1, hasher_spec=None, dtype=_dt.string,
                            name=None):
    """A table mapping each element of the 1-D `mapping` to its position (int64), others to default_value."""
    _refuse_oov(num_oov_buckets, "index_table_from_tensor")
    with name_scope(name, "string_to_index"):
        keys = convert_to_tensor(mapping, dtype=dtype)
        ids = math_ops.range(math_ops.cast(array_ops.shape(keys)[0], _dt.int64), dtype=_dt.int64)
        return StaticHashTable(KeyValueTensorInitializer(keys, ids), default_value)


def index_table_from_file(vocabulary_file=None, num_oov_buckets=0, vocab_size=None, default_value=-1,
                          hasher_spec=None, key_dtype=_dt.string, name=None, key_column_index=TextFileIndex.WHOLE_LINE,
                          value_column_index=TextFileIndex.LINE_NUMBER, delimiter="\t"):
    """A table mapping each line (or column) of a vocabulary file to its line number (int64)."""
    _refuse_oov(num_oov_buckets, "index_table_from_file")
    with name_scope(name, "string_to_index"):
        return StaticHashTable(TextFileInitializer(vocabulary_file, key_dtype, key_column_index, _dt.int64,
                                                   value_column_index, vocab_size, delimiter), default_value)


def index_to_string_table_from_tensor(vocabulary_list, default_value="UNK", name=None):
    """A table mapping int64 positions in the 1-D `vocabulary_list` to its strings, others to default_value."""
    with name_scope(name, "index_to_string"):
        values = convert_to_tensor(vocabulary_list, dtype=_dt.string)
        ids = math_ops.range(math_ops.cast(array_ops.shape(values)[0], _dt.int64), dtype=_dt.int64)
        return StaticHashTable(KeyValueTensorInitializer(ids, values), default_value)


def index_to_string_table_from_file(vocabulary_file, vocab_size=None, default_value="UNK", name=None,
                                    key_column_index=TextFileIndex.LINE_NUMBER,
                                    value_column_index=TextFileIndex.WHOLE_LINE, delimiter="\t"):
    """A table mapping int64 line numbers of a vocabulary file to its lines (or a column)."""
    with name_scope(name, "index_to_string"):
        return StaticHashTable(TextFileInitializer(vocabulary_file, _dt.int64, key_column_index, _dt.string,
                                                   value_column_index, vocab_size, delimiter), default_value)


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.lookup")  # StaticVocabularyTable & co: UnsupportedError
