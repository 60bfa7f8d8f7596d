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
_BY_NP = {d.np.type: d for d in ALL}
_BY_ENUM = {d.as_datatype_enum: d for d in ALL}
# The strings tf.as_dtype accepts for the dtypes tfplus has: the names, TF's aliases ("float" is float32, not
# NumPy's float64), and the "_ref" names (tfplus has no reference dtypes: a variable's value has the base dtype).
_BY_STRING = {**{d.name: d for d in ALL}, "half": float16, "float": float32, "double": float64}
_BY_STRING.update({f"{k}_ref": d for k, d in list(_BY_STRING.items())})
# Python types as tf.as_dtype maps them (int is not one: TF refuses it).
_BY_PYTHON = {float: float32, bool: bool_}
# Names tf.as_dtype accepts for dtypes tfplus does not have.
_TF_ONLY = ("bfloat16", "complex64", "complex128", "string", "uint16", "uint32", "uint64", "qint8", "quint8",
            "qint16", "quint16", "qint32", "resource", "variant", "int4", "uint4", "int2", "uint2",
            "float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2fnuz",
            "float4_e2m1fn")


def as_dtype(value) -> DType:
    """Converts a value into a DType as tf.as_dtype does: a DType, one of TensorFlow's dtype names
    ("float32", "float" (float32), "double", "half", "int32", ...), a NumPy dtype or scalar type, an object
    with a `.dtype`, a DataType enum, or the Python types float (float32) and bool.

        >>> as_dtype("float") is float32
        True
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        if value in _BY_STRING:
            return _BY_STRING[value]
        base = value[:-4] if value.endswith("_ref") else value
        if base in _TF_ONLY:
            raise TypeError(f"dtype {value!r} is not supported by tfplus; supported: {_supported()}")
        raise TypeError(f"cannot convert {value!r} to a dtype: not one of TensorFlow's dtype names "
                        f"({_supported()}, 'float', 'double', 'half')")
    if isinstance(value, int) and not isinstance(value, bool):
        if value in _BY_ENUM:
            return _BY_ENUM[value]
        raise TypeError(f"DataType enum {value} is not a dtype tfplus supports ({_supported()})")
    if isinstance(value, type) and value in _BY_PYTHON:
        return _BY_PYTHON[value]
    enum = getattr(value, "as_datatype_enum", None)  # a TensorFlow DType
    if isinstance(enum, int) and enum in _BY_ENUM:
        return _BY_ENUM[enum]
    try:
        np_type = np.dtype(value).type if isinstance(value, (np.dtype, type)) else np.dtype(value.dtype).type
    except (TypeError, AttributeError):
        np_type = None
    if np_type in _BY_NP and value is not int:
        return _BY_NP[np_type]
    raise TypeError(f"cannot convert {value!r} to a dtype; supported: {_supported()}")


def _supported() -> str:
    return ", ".join(d.name for d in ALL)


# -- strings -------------------------------------------------------------------------------------------------
# For the file and tensor names of the checkpoint ops (SaveV2/RestoreV2 in TensorFlow-built graphs): elements
# are Python bytes in object arrays; cpu only, no arithmetic. Not in ALL, which lists the numeric types.
string = DType("string", object, 7)
_BY_STRING.update({"string": string, "string_ref": string})
_BY_ENUM[string.as_datatype_enum] = string
_BY_NP[np.object_] = string
_TF_ONLY = tuple(n for n in _TF_ONLY if n != "string")
