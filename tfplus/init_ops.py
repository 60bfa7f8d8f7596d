"""Initializers: callables (shape, dtype) -> a Tensor of graph ops, as in TF1's tf.*_initializer."""
from __future__ import annotations

import math

import numpy as np

from tfplus import dtypes as _dt


def _fans(shape):
    """(fan_in, fan_out) as TF computes them: conv filters HWIO count receptive field * channels."""
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


class Initializer:
    def __call__(self, shape, dtype=None, partition_info=None):
        raise NotImplementedError

    def _dtype(self, dtype):
        return _dt.as_dtype(dtype or getattr(self, "dtype", None) or _dt.float32)


class Zeros(Initializer):
    def __init__(self, dtype=_dt.float32):
        self.dtype = dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        from tfplus.ops.array_ops import zeros
        return zeros(shape, dtype=self._dtype(dtype))


class Ones(Initializer):
    def __init__(self, dtype=_dt.float32):
        self.dtype = dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        from tfplus.ops.array_ops import ones
        return ones(shape, dtype=self._dtype(dtype))


class Constant(Initializer):
    def __init__(self, value=0, dtype=_dt.float32):
        self.value, self.dtype = value, dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        from tfplus.ops.array_ops import constant
        return constant(self.value, dtype=self._dtype(dtype), shape=shape)


class RandomNormal(Initializer):
    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=_dt.float32):
        self.mean, self.stddev, self.seed, self.dtype = mean, stddev, seed, dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        from tfplus.ops.random_ops import random_normal
        return random_normal(shape, self.mean, self.stddev, self._dtype(dtype), seed=self.seed)


class TruncatedNormal(RandomNormal):
    def __call__(self, shape, dtype=None, partition_info=None):
        from tfplus.ops.random_ops import truncated_normal
        return truncated_normal(shape, self.mean, self.stddev, self._dtype(dtype), seed=self.seed)


class RandomUniform(Initializer):
    def __init__(self, minval=0.0, maxval=None, seed=None, dtype=_dt.float32):
        self.minval, self.maxval, self.seed, self.dtype = minval, maxval, seed, dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        from tfplus.ops.random_ops import random_uniform
        return random_uniform(shape, self.minval, self.maxval, self._dtype(dtype), seed=self.seed)


class VarianceScaling(Initializer):
    """scale / fan (fan_in, fan_out or their mean); 'truncated_normal', 'untruncated_normal' or 'uniform'."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None, dtype=_dt.float32):
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"VarianceScaling: mode {mode!r} must be fan_in, fan_out or fan_avg")
        if distribution == "normal":
            distribution = "truncated_normal"
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform"):
            raise ValueError(f"VarianceScaling: unknown distribution {distribution!r}")
        self.scale, self.mode, self.distribution, self.seed, self.dtype = scale, mode, distribution, seed, dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        from tfplus.ops import random_ops
        fan_in, fan_out = _fans(tuple(int(d) for d in shape))
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        var = self.scale / max(1.0, fan)
        dtype = self._dtype(dtype)
        if self.distribution == "truncated_normal":
            # 0.8796... is the stddev of a standard normal truncated to [-2, 2].
            return random_ops.truncated_normal(shape, 0.0, math.sqrt(var) / 0.87962566103423978, dtype,
                                               seed=self.seed)
        if self.distribution == "untruncated_normal":
            return random_ops.random_normal(shape, 0.0, math.sqrt(var), dtype, seed=self.seed)
        limit = math.sqrt(3.0 * var)
        return random_ops.random_uniform(shape, -limit, limit, dtype, seed=self.seed)


class Orthogonal(Initializer):
    """`gain` times a random orthogonal matrix reshaped to `shape` (its last axis the columns), as TF1's
    tf.orthogonal_initializer: the Q of the QR decomposition of a standard normal matrix, with R's diagonal made
    positive. The QR is Gram-Schmidt's (twice per column, for the precision of Householder's), built from
    matmuls, so any device runs it; its ops grow with the number of columns (min(rows, cols))."""

    def __init__(self, gain=1.0, seed=None, dtype=_dt.float32):
        self.gain, self.seed, self.dtype = gain, seed, dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        from tfplus.framework import name_scope
        from tfplus.ops import array_ops, math_ops, random_ops
        shape = [int(d) for d in shape]
        if len(shape) < 2:
            raise ValueError(f"tf.orthogonal_initializer: the shape {shape} must have at least 2 dimensions")
        dtype = self._dtype(dtype)
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        m, n = max(rows, cols), min(rows, cols)
        with name_scope(None, "orthogonal"):
            a = random_ops.random_normal([m, n], dtype=dtype, seed=self.seed)
            columns = []
            for j in range(n):
                v = array_ops.slice(a, [0, j], [m, 1])
                if columns:
                    q = array_ops.concat(columns, 1)
                    for _ in range(2):  # NOTE: one pass of classical Gram-Schmidt loses orthogonality
                        v = v - math_ops.matmul(q, math_ops.matmul(q, v, transpose_a=True))
                columns.append(v * math_ops.rsqrt(math_ops.reduce_sum(math_ops.square(v))))
            q = array_ops.concat(columns, 1) if n > 1 else columns[0]
            if rows < cols:
                q = array_ops.transpose(q)
            return math_ops.multiply(array_ops.reshape(q, shape), self.gain)


def glorot_uniform_initializer(seed=None, dtype=_dt.float32):
    return VarianceScaling(1.0, "fan_avg", "uniform", seed, dtype)


def glorot_normal_initializer(seed=None, dtype=_dt.float32):
    return VarianceScaling(1.0, "fan_avg", "truncated_normal", seed, dtype)


def he_normal(seed=None):
    return VarianceScaling(2.0, "fan_in", "truncated_normal", seed)


def he_uniform(seed=None):
    return VarianceScaling(2.0, "fan_in", "uniform", seed)


zeros_initializer, ones_initializer, constant_initializer = Zeros, Ones, Constant
random_normal_initializer, truncated_normal_initializer = RandomNormal, TruncatedNormal
orthogonal_initializer = Orthogonal
random_uniform_initializer, variance_scaling_initializer = RandomUniform, VarianceScaling
GlorotUniform, GlorotNormal = glorot_uniform_initializer, glorot_normal_initializer
