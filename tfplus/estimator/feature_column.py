"""tf.feature_column for numeric inputs: numeric_column, bucketized_column, categorical_column_with_identity and
its indicator_column and embedding_column, and input_layer.

    columns = [tf.feature_column.numeric_column("rooms"), tf.feature_column.numeric_column("pixels", shape=[784])]
    net = tf.feature_column.input_layer(features, columns)      # [batch, 1 + 784], the columns sorted by key

Columns of strings (vocabulary lists and files, hash buckets) and crossed columns need TF's lookup tables and
string hashing, which tfplus lacks: they raise UnsupportedError (map the strings to ids in NumPy and feed them to
categorical_column_with_identity).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from tfplus import dtypes
from tfplus.framework import Tensor
from tfplus.unsupported import module_getattr


class NumericColumn(NamedTuple):
    """A dense feature of fixed `shape` per example, read from features[key]."""
    key: str
    shape: tuple
    default_value: object
    dtype: dtypes.DType
    normalizer_fn: Callable | None

    @property
    def name(self) -> str:
        return self.key


def numeric_column(key: str, shape=(1,), default_value=None, dtype=dtypes.float32, normalizer_fn=None):
    """The feature features[key] as a [batch, *shape] float tensor (normalizer_fn applied to it)."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"numeric_column: key must be a non-empty string, got {key!r}")
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if any(d <= 0 for d in shape):
        raise ValueError(f"numeric_column {key!r}: shape dimensions must be greater than 0, got {shape}")
    dtype = dtypes.as_dtype(dtype)
    if not (dtype.is_floating or dtype.is_integer):
        raise ValueError(f"numeric_column {key!r}: dtype must be a number type, got {dtype}")
    if normalizer_fn is not None and not callable(normalizer_fn):
        raise TypeError(f"numeric_column {key!r}: normalizer_fn must be a callable, got {normalizer_fn!r}")
    return NumericColumn(key, shape, default_value, dtype, normalizer_fn)


class BucketizedColumn(NamedTuple):
    """A numeric column's values as one-hot bucket indices: bucket i holds boundaries[i-1] <= x < boundaries[i]."""
    source_column: NumericColumn
    boundaries: tuple

    @property
    def name(self) -> str:
        return f"{self.source_column.name}_bucketized"


class IdentityCategoricalColumn(NamedTuple):
    """Integer ids in [0, num_buckets) read from features[key] ([batch] or [batch, k]; -1 pads)."""
    key: str
    num_buckets: int
    default_value: object

    @property
    def name(self) -> str:
        return self.key


class IndicatorColumn(NamedTuple):
    """A categorical column as a multi-hot [batch, num_buckets] (an id seen twice counts 2)."""
    categorical_column: IdentityCategoricalColumn

    @property
    def name(self) -> str:
        return f"{self.categorical_column.name}_indicator"


class EmbeddingColumn(NamedTuple):
    """A categorical column as the combination (mean, sum or sqrtn) of its ids' rows of a [num_buckets, dimension]
    variable `input_layer/<name>/embedding_weights`."""
    categorical_column: IdentityCategoricalColumn
    dimension: int
    combiner: str
    initializer: Callable | None
    trainable: bool

    @property
    def name(self) -> str:
        return f"{self.categorical_column.name}_embedding"


def bucketized_column(source_column, boundaries) -> BucketizedColumn:
    """`source_column` (a numeric_column) bucketed by the sorted `boundaries`: len(boundaries) + 1 buckets."""
    if not isinstance(source_column, NumericColumn):
        raise ValueError(f"bucketized_column: source_column must be a numeric_column, got {source_column!r}")
    boundaries = tuple(float(b) for b in boundaries)
    if not boundaries or list(boundaries) != sorted(set(boundaries)):
        raise ValueError(f"bucketized_column {source_column.key!r}: boundaries must be a sorted list without "
                         f"repeats, got {list(boundaries)}")
    return BucketizedColumn(source_column, boundaries)


def categorical_column_with_identity(key: str, num_buckets: int, default_value=None) -> IdentityCategoricalColumn:
    """Ids in [0, num_buckets) given as integers in features[key]."""
    if int(num_buckets) < 1:
        raise ValueError(f"categorical_column_with_identity {key!r}: num_buckets must be at least 1, got "
                         f"{num_buckets}")
    if default_value is not None:
        raise NotImplementedError(f"categorical_column_with_identity {key!r}: default_value is not supported by "
                                  "tfplus; map out-of-range ids before feeding them")
    return IdentityCategoricalColumn(key, int(num_buckets), default_value)


def indicator_column(categorical_column) -> IndicatorColumn:
    return IndicatorColumn(_categorical(categorical_column, "indicator_column"))


def embedding_column(categorical_column, dimension: int, combiner="mean", initializer=None, ckpt_to_load_from=None,
                     tensor_name_in_ckpt=None, max_norm=None, trainable=True) -> EmbeddingColumn:
    """Embeddings of a categorical column's ids; TF's initializer by default (a truncated normal of stddev
    1 / sqrt(dimension))."""
    if combiner not in ("mean", "sum", "sqrtn"):
        raise ValueError(f"embedding_column: combiner must be 'mean', 'sum' or 'sqrtn', got {combiner!r}")
    if ckpt_to_load_from is not None or max_norm is not None:
        raise NotImplementedError("embedding_column: ckpt_to_load_from and max_norm are not supported by tfplus "
                                  "(tf.train.init_from_checkpoint loads the variable; clip the rows yourself)")
    return EmbeddingColumn(_categorical(categorical_column, "embedding_column"), int(dimension), combiner,
                           initializer, trainable)


def _categorical(column, what: str) -> IdentityCategoricalColumn:
    if not isinstance(column, IdentityCategoricalColumn):
        raise ValueError(f"{what}: tfplus takes a categorical_column_with_identity here, got {column!r}")
    return column


def _feature(features: dict, key: str) -> Tensor:
    if key not in features:
        raise ValueError(f"feature column {key!r}: the features hold no {key!r} (they hold {sorted(features)})")
    return features[key]


def _ids(features: dict, column: IdentityCategoricalColumn) -> Tensor:
    """The column's ids as [batch, k] int32 (a [batch] feature is one id per example)."""
    from tfplus.ops.array_ops import expand_dims
    from tfplus.ops.math_ops import cast
    ids = cast(_feature(features, column.key), dtypes.int32)
    return expand_dims(ids, 1) if ids.shape.ndims == 1 else ids


def _dense(features: dict, column) -> Tensor:
    """The column's [batch, size] float32 tensor."""
    from tfplus.framework import convert_to_tensor
    from tfplus.ops.array_ops import one_hot, reshape
    from tfplus.ops.math_ops import cast, greater_equal, reduce_sum
    if isinstance(column, NumericColumn):
        value = cast(_feature(features, column.key), dtypes.float32)
        if column.normalizer_fn is not None:
            value = column.normalizer_fn(value)
        return reshape(value, [-1, int(np.prod(column.shape))])
    if isinstance(column, BucketizedColumn):
        x = _dense(features, column.source_column)
        bounds = convert_to_tensor(np.asarray(column.boundaries, np.float32))
        bucket = reduce_sum(cast(greater_equal(reshape(x, [-1, x.shape.as_list()[1], 1]), bounds), dtypes.int32),
                            -1)
        n = len(column.boundaries) + 1
        return reshape(one_hot(bucket, n), [-1, int(np.prod(column.source_column.shape)) * n])
    if isinstance(column, IndicatorColumn):
        ids = _ids(features, column.categorical_column)  # -1 pads: one_hot gives it a zero row
        return reduce_sum(one_hot(ids, column.categorical_column.num_buckets), 1)
    if isinstance(column, EmbeddingColumn):
        return _embedded(features, column)
    raise TypeError(f"feature column {column!r}: tfplus's input_layer takes numeric, bucketized, indicator and "
                    "embedding columns")


def _embedded(features: dict, column: EmbeddingColumn) -> Tensor:
    import math

    from tfplus.init_ops import truncated_normal_initializer
    from tfplus.ops.array_ops import expand_dims, gather
    from tfplus.ops.math_ops import cast, greater_equal, maximum, multiply, reduce_sum, sqrt
    from tfplus.variables import get_variable, variable_scope
    cat = column.categorical_column
    with variable_scope(None, default_name=column.name):
        weights = get_variable("embedding_weights", [cat.num_buckets, column.dimension], dtypes.float32,
                               initializer=column.initializer or truncated_normal_initializer(
                                   0.0, 1.0 / math.sqrt(column.dimension)), trainable=column.trainable)
    ids = _ids(features, cat)
    valid = cast(greater_equal(ids, 0), dtypes.float32)  # -1 pads count for nothing
    rows = multiply(gather(weights, maximum(ids, 0)), expand_dims(valid, -1))
    total = reduce_sum(rows, 1)
    if column.combiner == "sum":
        return total
    count = reduce_sum(valid, 1, keepdims=True)
    count = sqrt(count) if column.combiner == "sqrtn" else count
    return total / maximum(count, 1.0)


def input_layer(features: dict, feature_columns, weight_collections=None, trainable=True, cols_to_vars=None,
                cols_to_output_tensors=None) -> Tensor:
    """The columns' features side by side, [batch, sum of their sizes], the columns sorted by name (TF's
    order)."""
    from tfplus.framework import name_scope
    from tfplus.ops.array_ops import concat
    columns = sorted(feature_columns, key=lambda c: c.name)
    if not columns:
        raise ValueError("input_layer: feature_columns must not be empty")
    from tfplus.variables import variable_scope
    with variable_scope("input_layer"), name_scope("input_layer"):
        tensors = [_dense(features, c) for c in columns]
        return tensors[0] if len(tensors) == 1 else concat(tensors, 1)


__all__ = ["numeric_column", "bucketized_column", "categorical_column_with_identity", "indicator_column",
           "embedding_column", "input_layer"]
__getattr__ = module_getattr(__name__, "tf.feature_column")
