"""NumPy kernels for the random ops: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
3") keyed by the op's seeds and counted per run (KernelContext.random_stream), with the same counters and
transforms as the OpenCL kernels (kernels/opencl/random.cl): a seed gives the same numbers on every device.
Element i of a draw starting at `first` draws from counter (first + i, attempt, run_lo, run_hi)."""
from __future__ import annotations

import numpy as np

from tfplus import errors
from tfplus.registry import register_kernel

_M32 = np.uint64(0xFFFFFFFF)
_MUL = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_WEYL = (0x9E3779B9, 0xBB67AE85)  # the key schedule's increments
_TWO_PI = 6.283185307179586


def philox(index: np.ndarray, attempt: int, run: int, key: tuple[int, int]) -> list[np.ndarray]:
    """The four 32-bit words (as uint64 arrays) of Philox4x32-10 at counters (index, attempt, run_lo, run_hi)."""
    c0 = np.asarray(index, np.uint64) & _M32
    c1 = np.full_like(c0, attempt & 0xFFFFFFFF)
    c2 = np.full_like(c0, run & 0xFFFFFFFF)
    c3 = np.full_like(c0, (run >> 32) & 0xFFFFFFFF)
    k0, k1 = key
    for _ in range(10):
        p0, p1 = c0 * _MUL[0], c2 * _MUL[1]  # 32 x 32 -> 64 bits: exact in uint64
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ np.uint64(k0), p1 & _M32, (p0 >> 32) ^ c3 ^ np.uint64(k1), p0 & _M32
        k0, k1 = (k0 + _WEYL[0]) & 0xFFFFFFFF, (k1 + _WEYL[1]) & 0xFFFFFFFF
    return [c0, c1, c2, c3]


def unit(a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
    """Uniform in [0, 1) with dtype's precision, exactly as the OpenCL kernels make it (24 bits for float32,
    53 for float64; float16 takes 11)."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return (((a << np.uint64(21)) ^ b) & np.uint64((1 << 53) - 1)).astype(np.float64) * 2.0**-53
    bits = np.finfo(dtype).nmant + 1
    return ((a >> np.uint64(32 - bits)).astype(np.float64) * 2.0**-bits).astype(dtype)


def normal(words: list[np.ndarray]) -> np.ndarray:
    """Standard normals (float64) by Box-Muller from Philox blocks, as random.cl computes them in double."""
    u1 = 1.0 - unit(words[0], words[1], np.float64)  # (0, 1]: log is finite
    u2 = unit(words[2], words[3], np.float64)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(_TWO_PI * u2)


@register_kernel("RandomUniform", "cpu")
def _random_uniform(ctx, ins, outs, attrs):
    out = outs[0]
    key, run, first = ctx.random_stream(out.size)
    words = philox(first + np.arange(out.size), 0, run, key)
    out[...] = unit(words[0], words[1], out.dtype).reshape(out.shape)


@register_kernel("RandomStandardNormal", "cpu")
def _random_normal(ctx, ins, outs, attrs):
    out = outs[0]
    key, run, first = ctx.random_stream(out.size)
    out[...] = normal(philox(first + np.arange(out.size), 0, run, key)).reshape(out.shape)


@register_kernel("TruncatedNormal", "cpu")
def _truncated_normal(ctx, ins, outs, attrs):
    """Standard normal, redrawing values beyond two standard deviations (as TF does) with the next attempt's
    counter, element by element as the OpenCL kernel does."""
    out = outs[0]
    key, run, first = ctx.random_stream(out.size)
    z = normal(philox(first + np.arange(out.size), 0, run, key))
    redo, attempt = np.flatnonzero(np.abs(z) > 2.0), 1
    while redo.size:
        z[redo] = normal(philox(first + redo, attempt, run, key))
        redo, attempt = redo[np.abs(z[redo]) > 2.0], attempt + 1
    out[...] = z.reshape(out.shape)


def _generator(key: tuple[int, int], run: int, first: int) -> np.random.Generator:
    """NumPy's Philox stream for draws whose element count varies (gamma, Poisson): keyed by the op's seeds,
    started at (first, run), so the same seeds give the same numbers every session."""
    return np.random.Generator(np.random.Philox(key=(key[0] << 32) | key[1], counter=[first, run, 0, 0]))


@register_kernel("RandomUniformInt", "cpu")
def _random_uniform_int(ctx, ins, outs, attrs):
    out = outs[0]
    lo, hi = int(ins[1]), int(ins[2])
    if not lo < hi:
        raise errors.InvalidArgumentError(ctx.op.name, ctx.op.type, f"Need minval < maxval: {lo} >= {hi}")
    key, run, first = ctx.random_stream(out.size)
    words = philox(first + np.arange(out.size), 0, run, key)
    bits = (words[0] << np.uint64(32)) | words[1]  # 64 random bits: the modulo bias is below 2^-32
    out[...] = (lo + (bits % np.uint64(hi - lo)).astype(np.int64)).reshape(out.shape)


@register_kernel("RandomGamma", "cpu")
def _random_gamma(ctx, ins, outs, attrs):
    out, alpha = outs[0], ins[1]
    key, run, first = ctx.random_stream(out.size)
    draw = _generator(key, run, first).standard_gamma(np.broadcast_to(alpha, out.shape).astype(np.float64))
    out[...] = draw


@register_kernel("RandomPoissonV2", "cpu")
def _random_poisson(ctx, ins, outs, attrs):
    out, rate = outs[0], ins[1]
    key, run, first = ctx.random_stream(out.size)
    out[...] = _generator(key, run, first).poisson(np.broadcast_to(rate, out.shape).astype(np.float64))


def _stateless_words(ins, out, attempt=0, index=None):
    s0, s1 = (int(v) & 0xFFFFFFFF for v in np.asarray(ins[1]).reshape(-1)[:2])
    return philox(np.arange(out.size) if index is None else index, attempt, 0, (s0, s1))


@register_kernel("StatelessRandomUniform", "cpu")
def _stateless_uniform(ctx, ins, outs, attrs):
    words = _stateless_words(ins, outs[0])
    outs[0][...] = unit(words[0], words[1], outs[0].dtype).reshape(outs[0].shape)


@register_kernel("StatelessRandomNormal", "cpu")
def _stateless_normal(ctx, ins, outs, attrs):
    outs[0][...] = normal(_stateless_words(ins, outs[0])).reshape(outs[0].shape)


@register_kernel("StatelessTruncatedNormal", "cpu")
def _stateless_truncated_normal(ctx, ins, outs, attrs):
    out = outs[0]
    z = normal(_stateless_words(ins, out))
    redo, attempt = np.flatnonzero(np.abs(z) > 2.0), 1
    while redo.size:
        z[redo] = normal(_stateless_words(ins, out, attempt, redo))
        redo, attempt = redo[np.abs(z[redo]) > 2.0], attempt + 1
    out[...] = z.reshape(out.shape)
