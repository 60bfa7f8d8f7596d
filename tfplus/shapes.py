"""Helpers shared by shape functions. Shape functions are pure: (input TensorSpecs, attrs) -> output specs."""
from __future__ import annotations

from tfplus.registry import TensorSpec


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


def num_elements(shape):
    if shape is None or None in shape:
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def fmt(shape) -> str:
    if shape is None:
        return "<unknown>"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
