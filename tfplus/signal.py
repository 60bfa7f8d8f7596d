"""tf.signal's real-valued parts: frame, the Hann and Hamming windows, the mel filterbank, DCT-II and MFCCs, built
from gathers and matrix products of constants (so gradients flow through them). tf.signal.stft, rfft and their
inverses give complex tensors, which tfplus does not have: they raise UnsupportedError.

    mel = tf.tensordot(magnitudes, tf.signal.linear_to_mel_weight_matrix(40, 257, 16000, 20.0, 7600.0), 1)
    mfccs = tf.signal.mfccs_from_log_mel_spectrograms(tf.log(mel + 1e-6))[..., :13]
"""
from __future__ import annotations

import math

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, constant_value, convert_to_tensor, name_scope
from tfplus.ops import array_ops, composite_ops, math_ops
from tfplus.unsupported import module_getattr as _module_getattr

__all__ = ["frame", "hann_window", "hamming_window", "linear_to_mel_weight_matrix", "dct",
           "mfccs_from_log_mel_spectrograms"]


def _static_int(value, what: str) -> int:
    known = constant_value(value) if isinstance(value, Tensor) else value
    if known is None:
        raise ValueError(f"tf.signal: {what} must be known when the graph is built, got {value}")
    return int(known)


def frame(signal, frame_length, frame_step, pad_end=False, pad_value=0, axis=-1, name=None) -> Tensor:
    """Frames of `frame_length` samples every `frame_step` along `axis` (the axis becomes [frames,
    frame_length]); `pad_end` pads the end with `pad_value` so that every sample is in a frame."""
    with name_scope(name, "frame"):
        signal = convert_to_tensor(signal)
        length, step = _static_int(frame_length, "frame_length"), _static_int(frame_step, "frame_step")
        rank = signal.shape.ndims
        if rank is None:
            raise ValueError("tf.signal.frame: the signal's rank must be known")
        axis = axis % rank
        n = signal.shape.as_list()[axis]
        if n is None:
            raise ValueError(f"tf.signal.frame: the signal's axis {axis} must be known, got shape {signal.shape}")
        if pad_end:
            frames = -(-n // step)
            extra = max(0, (frames - 1) * step + length - n)
            pads = [[0, 0]] * rank
            pads[axis] = [0, extra]
            signal = array_ops.pad(signal, pads, constant_values=pad_value)
        else:
            frames = max(0, 1 + (n - length) // step)
        index = (np.arange(frames)[:, None] * step + np.arange(length)[None, :]).astype(np.int32)
        return array_ops.gather(signal, index, axis=axis)


def _raised_cosine(window_length, periodic, dtype, a: float, b: float, what: str) -> Tensor:
    n = _static_int(window_length, "window_length")
    dtype = _dt.as_dtype(dtype)
    if n == 1:
        return array_ops.ones([1], dtype)
    even = 1 - n % 2
    denominator = n + int(bool(periodic)) * even - 1
    count = np.arange(n, dtype=dtype.np)
    return array_ops.constant((a - b * np.cos(2.0 * math.pi * count / denominator)).astype(dtype.np), name=what)


def hann_window(window_length, periodic=True, dtype=_dt.float32, name=None) -> Tensor:
    """0.5 - 0.5 cos(2 pi n / N), N the length (periodic) or the length - 1."""
    with name_scope(name, "hann_window"):
        return _raised_cosine(window_length, periodic, dtype, 0.5, 0.5, "hann_window")


def hamming_window(window_length, periodic=True, dtype=_dt.float32, name=None) -> Tensor:
    """0.54 - 0.46 cos(2 pi n / N), N the length (periodic) or the length - 1."""
    with name_scope(name, "hamming_window"):
        return _raised_cosine(window_length, periodic, dtype, 0.54, 0.46, "hamming_window")


def _hertz_to_mel(f):
    return f.dtype.type(1127.0) * np.log(f.dtype.type(1.0) + f / f.dtype.type(700.0))


def _linspace(start, stop, num: int, np_dtype) -> np.ndarray:
    """TF's linspace in `np_dtype`: start + i * (stop - start) / (num - 1), the last value exactly stop."""
    start, stop = np_dtype(start), np_dtype(stop)
    out = start + np.arange(num, dtype=np_dtype) * ((stop - start) / np_dtype(num - 1))
    out[-1] = stop
    return out


def linear_to_mel_weight_matrix(num_mel_bins=20, num_spectrogram_bins=129, sample_rate=8000,
                                lower_edge_hertz=125.0, upper_edge_hertz=3800.0, dtype=_dt.float32,
                                name=None) -> Tensor:
    """[num_spectrogram_bins, num_mel_bins]: triangular filters evenly spaced on the mel scale (HTK's), each
    spectrogram bin weighted by its place between a band's edges; the DC bin gets none. TF's definition, in
    `dtype`'s arithmetic as TF computes it (float32 rounding shows in the small weights)."""
    if not 0.0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2.0:
        raise ValueError(f"tf.signal.linear_to_mel_weight_matrix: need 0 <= lower_edge_hertz ({lower_edge_hertz}) "
                         f"< upper_edge_hertz ({upper_edge_hertz}) <= sample_rate / 2 ({sample_rate / 2.0})")
    t = np.dtype(_dt.as_dtype(dtype).np).type
    with name_scope(name, "linear_to_mel_weight_matrix"):
        bins = _hertz_to_mel(_linspace(0.0, sample_rate / 2.0, int(num_spectrogram_bins), t)[1:])[:, None]
        edges = _linspace(_hertz_to_mel(np.array(lower_edge_hertz, t)), _hertz_to_mel(np.array(upper_edge_hertz, t)),
                          int(num_mel_bins) + 2, t)
        lower, center, upper = edges[:-2][None, :], edges[1:-1][None, :], edges[2:][None, :]
        weights = np.maximum(t(0), np.minimum((bins - lower) / (center - lower), (upper - bins) / (upper - center)))
        return array_ops.constant(np.pad(weights, [[1, 0], [0, 0]]).astype(t), name="mel_weights")


def dct(input, type=2, n=None, axis=-1, norm=None, name=None) -> Tensor:
    """DCT-II along the last axis: y[k] = 2 sum_n x[n] cos(pi k (2n + 1) / 2N) (norm='ortho' scales y[0] by
    sqrt(1 / 4N) and the others by sqrt(1 / 2N)), as a product with a constant matrix."""
    if type != 2 or n is not None or axis not in (-1, None):
        raise NotImplementedError("tf.signal.dct: tfplus has type 2 along the last axis, without n")
    if norm not in (None, "ortho"):
        raise ValueError(f"tf.signal.dct: norm must be None or 'ortho', got {norm!r}")
    with name_scope(name, "dct"):
        x = convert_to_tensor(input)
        size = x.shape.as_list()[-1] if x.shape.ndims else None
        if size is None:
            raise ValueError(f"tf.signal.dct: the last axis must be known, got shape {x.shape}")
        k, m = np.meshgrid(np.arange(size), np.arange(size))   # m: the input sample, k: the coefficient
        basis = 2.0 * np.cos(np.pi * k * (2 * m + 1) / (2.0 * size))
        if norm == "ortho":
            basis[:, 0] *= math.sqrt(1.0 / (4 * size))
            basis[:, 1:] *= math.sqrt(1.0 / (2 * size))
        return composite_ops.tensordot(x, array_ops.constant(basis.astype(x.dtype.np)), 1)


def mfccs_from_log_mel_spectrograms(log_mel_spectrograms, name=None) -> Tensor:
    """MFCCs: the DCT-II of log mel spectrograms [..., num_mel_bins] scaled by 1 / sqrt(2 num_mel_bins) (TF's)."""
    with name_scope(name, "mfccs_from_log_mel_spectrograms"):
        x = convert_to_tensor(log_mel_spectrograms)
        size = x.shape.as_list()[-1] if x.shape.ndims else None
        if size is None:
            raise ValueError(f"tf.signal.mfccs_from_log_mel_spectrograms: num_mel_bins (the last axis) must be known, "
                             f"got shape {x.shape}")
        return math_ops.multiply(dct(x), 1.0 / math.sqrt(2.0 * size))


__getattr__ = _module_getattr(__name__, "tf.signal")  # stft, rfft & co.: complex results, UnsupportedError
