"""tf.feature_column, the part canned estimators need for dense inputs: numeric_column and input_layer.

    columns = [tf.feature_column.numeric_column("rooms"), tf.feature_column.numeric_column("pixels", shape=[784])]
    net = tf.feature_column.input_layer(features, columns)      # [batch, 1 + 784], the columns sorted by key

Categorical, bucketized, crossed and embedding columns need string or sparse tensors, which tfplus lacks: they
raise UnsupportedError (feed such inputs as numbers: one-hot or bucket indices computed in NumPy).
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


def _dense(features: dict, column: NumericColumn) -> Tensor:
    """The column's [batch, num_elements] float32 tensor."""
    from tfplus.ops.array_ops import reshape
    from tfplus.ops.math_ops import cast
    if not isinstance(column, NumericColumn):
        raise TypeError(f"feature column {column!r}: tfplus implements numeric_column only (no string or sparse "
                        "tensors for categorical, bucketized or embedding columns)")
    if column.key not in features:
        raise ValueError(f"feature column {column.key!r}: the features hold no {column.key!r} (they hold "
                         f"{sorted(features)})")
    value = cast(features[column.key], dtypes.float32)
    if column.normalizer_fn is not None:
        value = column.normalizer_fn(value)
    return reshape(value, [-1, int(np.prod(column.shape))])


def input_layer(features: dict, feature_columns, weight_collections=None, trainable=True, cols_to_vars=None,
                cols_to_output_tensors=None) -> Tensor:
    """The columns' features side by side, [batch, sum of their sizes], the columns sorted by name (TF's
    order)."""
    from tfplus.framework import name_scope
    from tfplus.ops.array_ops import concat
    columns = sorted(feature_columns, key=lambda c: c.name)
    if not columns:
        raise ValueError("input_layer: feature_columns must not be empty")
    with name_scope("input_layer"):
        tensors = [_dense(features, c) for c in columns]
        return tensors[0] if len(tensors) == 1 else concat(tensors, 1)


__all__ = ["numeric_column", "input_layer"]
__getattr__ = module_getattr(__name__, "tf.feature_column")
