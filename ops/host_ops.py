"""Host ops of tf.io, tf.strings, tf.sparse and the record readers (tfplus.io, tfplus.sparse): each is a PyFunc node
named as TensorFlow's op, whose function runs on the host on the inputs' NumPy values, on every device. Strings
are object arrays of bytes, as TensorFlow's Session gives them."""
from __future__ import annotations

from typing import Callable

import numpy as np

from tfplus import dtypes as _dt
from tfplus.ops.script_ops import call_py_func


def to_bytes(value) -> bytes:
    """A string element as bytes (str is UTF-8 encoded)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, np.bytes_):
        return bytes(value)
    raise TypeError(f"expected a string, got {type(value).__name__} {value!r}")


def object_vector(items) -> np.ndarray:
    """A 1-D object array of `items` as they are. NOTE: not `out[:] = items`, which goes through NumPy's bytes
    dtype and drops each string's trailing NUL bytes."""
    out = np.empty(len(items), object)
    for i, v in enumerate(items):
        out[i] = v
    return out


def bytes_array(value) -> np.ndarray:
    """`value` (an array of str or bytes, any shape) as an object array of bytes."""
    a = np.asarray(value, object)
    out = np.empty(a.shape, object)
    for i, v in np.ndenumerate(a):
        out[i] = to_bytes(v)
    return out


def host_op(name: str, fn: Callable, inputs, Tout, shapes=None) -> list:
    """The outputs of a node `name` that returns fn(*input values) (a list of arrays, one per Tout) when it runs."""
    def run(*values):
        return list(fn(*values))
    op = call_py_func(run, inputs, [_dt.as_dtype(t) for t in Tout], shapes, name=name)
    return list(op.outputs)
