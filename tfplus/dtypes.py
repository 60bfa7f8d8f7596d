"""Data types, with TensorFlow's DataType enum values so GraphDefs stay compatible."""
from __future__ import annotations

import numpy as np


class DType:
    """A tensor element type: `tf.float32.as_numpy_dtype is np.float32`."""

    def __init__(self, name: str, np_dtype, enum: int):
        self.name = name
        self.as_numpy_dtype = np.dtype(np_dtype).type
        self.np = np.dtype(np_dtype)
        self.as_datatype_enum = enum

    @property
    def is_floating(self) -> bool:
        return self.np.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.np.kind in "iu"

    @property
    def size(self) -> int:
        return self.np.itemsize

    @property
    def base_dtype(self) -> DType:
        return self

    def __repr__(self) -> str:
        return f"tf.{self.name}"

    def __reduce__(self):
        return (as_dtype, (self.name,))


float16 = DType("float16", np.float16, 19)
float32 = DType("float32", np.float32, 1)
float64 = DType("float64", np.float64, 2)
int8 = DType("int8", np.int8, 6)
int16 = DType("int16", np.int16, 5)
int32 = DType("int32", np.int32, 3)
int64 = DType("int64", np.int64, 9)
uint8 = DType("uint8", np.uint8, 4)
bool_ = DType("bool", np.bool_, 10)
half, double = float16, float64

ALL = (float16, float32, float64, int8, int16, int32, int64, uint8, bool_)
FLOATS = (float32, float64)
NUMERIC = (float32, float64, int32, int64)
_BY_NAME = {d.name: d for d in ALL}
_BY_NP = {d.np: d for d in ALL}
_BY_ENUM = {d.as_datatype_enum: d for d in ALL}


def as_dtype(value) -> DType:
    """Converts a DType, name, NumPy dtype or TF enum into a DType: `as_dtype("float32") is tf.float32`."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    if isinstance(value, int) and not isinstance(value, bool) and value in _BY_ENUM:
        return _BY_ENUM[value]
    if value is bool:
        return bool_
    try:
        return _BY_NP[np.dtype(value)]
    except (TypeError, KeyError):
        raise TypeError(f"unsupported dtype {value!r}; supported: {sorted(_BY_NAME)}") from None


# -- strings -------------------------------------------------------------------------------------------------
# For the file and tensor names of the checkpoint ops (SaveV2/RestoreV2 in TensorFlow-built graphs): elements
# are Python bytes in object arrays; cpu only, no arithmetic. Not in ALL, which lists the numeric types.
string = DType("string", object, 7)
_BY_NAME[string.name] = string
_BY_ENUM[string.as_datatype_enum] = string
_BY_NP[string.np] = string
