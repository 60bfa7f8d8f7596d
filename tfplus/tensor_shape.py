"""Static shapes: TensorShape and Dimension (TF1's), and the helpers shape functions share. Below the graph: it
imports no graph, op or kernel module, so shape functions, kernels and the planner can all use it.

Shape functions are pure: (input TensorSpecs, attrs) -> output specs; a shape is a tuple with None for an
unknown dimension, or None for an unknown rank.

    >>> TensorShape([None, 3]).as_list()
    [None, 3]
    >>> conv_output(7, 3, 2, "SAME")
    (4, 1, 1)
"""
from __future__ import annotations

import math

import numpy as np

from tfplus.registry import TensorSpec


class Dimension:
    """One dimension of a TensorShape (TF1 style): `.value` is an int or None."""

    def __init__(self, value):
        self.value = None if value is None else int(value)

    def __int__(self):
        if self.value is None:
            raise ValueError("cannot convert an unknown Dimension to int")
        return self.value

    __index__ = __int__

    def __eq__(self, other):
        other = other.value if isinstance(other, Dimension) else other
        return self.value == other

    def __hash__(self):
        return hash(self.value)

    def _op(self, other, fn):
        other = other.value if isinstance(other, Dimension) else other
        return Dimension(None if self.value is None or other is None else fn(self.value, other))

    def __add__(self, o): return self._op(o, lambda a, b: a + b)
    def __sub__(self, o): return self._op(o, lambda a, b: a - b)
    def __mul__(self, o): return self._op(o, lambda a, b: a * b)
    def __floordiv__(self, o): return self._op(o, lambda a, b: a // b)
    __radd__, __rmul__ = __add__, __mul__

    def __repr__(self):
        return f"Dimension({self.value})"

    def __str__(self):
        return "?" if self.value is None else str(self.value)


class TensorShape:
    """A possibly partially known shape. `TensorShape([None, 3]).as_list() == [None, 3]`."""

    def __init__(self, dims):
        if isinstance(dims, TensorShape):
            dims = dims.dims_tuple
        self.dims_tuple = None if dims is None else tuple(
            None if (d is None or (isinstance(d, Dimension) and d.value is None)) else int(d) for d in dims)

    @property
    def ndims(self):
        return None if self.dims_tuple is None else len(self.dims_tuple)

    rank = ndims

    @property
    def dims(self):
        return None if self.dims_tuple is None else [Dimension(d) for d in self.dims_tuple]

    def as_list(self) -> list:
        if self.dims_tuple is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape")
        return list(self.dims_tuple)

    def is_fully_defined(self) -> bool:
        return self.dims_tuple is not None and None not in self.dims_tuple

    def num_elements(self):
        return int(np.prod(self.dims_tuple, dtype=np.int64)) if self.is_fully_defined() else None

    def is_compatible_with(self, other) -> bool:
        return shapes_compatible(self.dims_tuple, TensorShape(other).dims_tuple)

    def concatenate(self, other) -> TensorShape:
        """This shape's dims then `other`'s (unknown if either rank is): TF's, as in
        `x.shape[:-1].concatenate(w.shape[-1:])`."""
        other = TensorShape(other)
        if self.dims_tuple is None or other.dims_tuple is None:
            return TensorShape(None)
        return TensorShape(self.dims_tuple + other.dims_tuple)

    __add__ = concatenate

    def merge_with(self, other) -> TensorShape:
        """The shape with what both know; a ValueError where they disagree."""
        other = TensorShape(other)
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {other} are not compatible")
        if self.dims_tuple is None or other.dims_tuple is None:
            return TensorShape(other.dims_tuple if self.dims_tuple is None else self.dims_tuple)
        return TensorShape([a if a is not None else b for a, b in zip(self.dims_tuple, other.dims_tuple)])

    def __len__(self):
        if self.dims_tuple is None:
            raise ValueError("len() of an unknown TensorShape")
        return len(self.dims_tuple)

    def __iter__(self):
        return iter(self.dims)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return TensorShape(self.dims_tuple[i])
        return Dimension(self.dims_tuple[i])

    def __eq__(self, other):
        try:
            return self.dims_tuple == TensorShape(other).dims_tuple
        except TypeError:
            return NotImplemented

    def __hash__(self):
        return hash(self.dims_tuple)

    def __repr__(self):
        return f"TensorShape({None if self.dims_tuple is None else list(self.dims_tuple)})"

    def __str__(self):
        return fmt(self.dims_tuple)


def fmt(shape) -> str:
    """A static shape as TensorFlow (2.x's tf.compat.v1 too) prints it: `(None, 3)`, `(2,)`, `<unknown>`."""
    if shape is None:
        return "<unknown>"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def shapes_compatible(a, b) -> bool:
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


# The most elements one tensor may have: its element count must fit in int64 (as TensorFlow's).
MAX_ELEMENTS = 2**63 - 1


def shape_error(shape) -> str | None:
    """Why a static shape (None for unknown dims) is not a valid tensor shape, or None: a negative size,
    or more elements than int64 can count."""
    if shape is None:
        return None
    for i, d in enumerate(shape):
        if d is not None and d < 0:
            return f"dimension {i} is {d}; sizes must be >= 0 (None for unknown)"
    if None not in shape and math.prod(shape) > MAX_ELEMENTS:
        return f"{math.prod(shape):.3g} elements, more than a tensor can hold ({MAX_ELEMENTS})"
    return None


def num_elements(shape):
    if shape is None or None in shape:
        return None
    n = 1
    for d in shape:
        n *= d
    return n


# -- helpers of shape functions -------------------------------------------------------------------------------
def spec(shape, dtype, value=None) -> TensorSpec:
    return TensorSpec(None if shape is None else tuple(shape), dtype, value)


def same_as_input(i: int = 0):
    """Shape function of an op whose single output has the shape and dtype of input i."""
    def fn(ins, attrs):
        return [spec(ins[i].shape, ins[i].dtype)]
    return fn


def check_rank(s: TensorSpec, rank: int, what: str) -> None:
    if s.shape is not None and len(s.shape) != rank:
        raise ValueError(f"{what} must have rank {rank}, got shape {fmt(s.shape)}")


def check_same_dtype(ins, what: str = "inputs") -> None:
    kinds = {s.dtype for s in ins}
    if len(kinds) > 1:
        raise TypeError(f"{what} must have one dtype, got " + ", ".join(s.dtype.name for s in ins))


def merge_dim(a, b, what: str):
    if a is None:
        return b
    if b is not None and a != b:
        raise ValueError(f"{what}: dimension {a} does not match {b}")
    return a


def broadcast(a, b):
    """NumPy broadcasting of two static shapes (None = unknown dim; a None shape = unknown rank)."""
    if a is None or b is None:
        return None
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or y == x:
            out.append(x)
        elif x is None:
            out.append(y)
        elif y is None:
            out.append(x)
        else:
            raise ValueError(f"shapes {fmt(a)} and {fmt(b)} are not broadcastable")
    return tuple(reversed(out))


def broadcast_gradient_args_value(s0, s1) -> tuple[list[int], list[int]]:
    """Axes of broadcast(s0, s1) that a gradient must be summed over to get back to s0, and to s1 (known shapes;
    BroadcastGradientArgs' value)."""
    n = max(len(s0), len(s1))
    a, b = [1] * (n - len(s0)) + list(s0), [1] * (n - len(s1)) + list(s1)
    r0, r1 = [], []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {list(s0)} and {list(s1)} are not broadcastable")
        if x == 1 and y != 1:
            r0.append(i)
        if y == 1 and x != 1:
            r1.append(i)
    return r0, r1


def strided_slice_index(begin, end, strides, masks) -> tuple:
    """StridedSlice's (begin, end, strides, *_mask attrs) as a NumPy basic index (ints, slices, None, ...)."""
    index = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        bit = 1 << i
        if masks["ellipsis_mask"] & bit:
            index.append(Ellipsis)
        elif masks["new_axis_mask"] & bit:
            index.append(None)
        elif masks["shrink_axis_mask"] & bit:
            index.append(int(b))
        else:
            index.append(slice(None if masks["begin_mask"] & bit else int(b),
                               None if masks["end_mask"] & bit else int(e), int(s)))
    return tuple(index)


def conv_output(size, ksize, stride, padding: str) -> tuple:
    """One spatial dimension of a sliding window (conv or pool), by TensorFlow's rule: (output size, padding
    before, padding after). SAME: out = ceil(size / stride), padded by max((out - 1) * stride + ksize - size, 0),
    the odd element after; VALID: out = ceil((size - ksize + 1) / stride), no padding. An unknown size or
    window gives None for all three.

        >>> conv_output(32, 3, 1, "SAME"), conv_output(32, 3, 2, "VALID")
        ((32, 1, 1), (15, 0, 0))
    """
    if size is None or ksize is None:
        return None, None, None
    if padding == "SAME":
        out = -(-size // stride)
        pad = max((out - 1) * stride + ksize - size, 0)
        return out, pad // 2, pad - pad // 2
    if padding == "VALID":
        if size < ksize:
            raise ValueError(f"VALID padding needs every input dimension >= the window, got {size} < {ksize}; "
                             "use padding='SAME' or a smaller window")
        return (size - ksize) // stride + 1, 0, 0
    raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")
