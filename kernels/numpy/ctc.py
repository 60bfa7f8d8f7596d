"""NumPy kernel of CTCLoss (ops/ctc_ops.py)."""
from __future__ import annotations

import numpy as np

from tfplus.ops.ctc_ops import ctc_sequence
from tfplus.registry import register_kernel


def batch_labels(indices: np.ndarray, values: np.ndarray, batch: int, what: str) -> list[list]:
    """A SparseTensor's [batch, time] entries as one label list per batch row, in time order."""
    out: list[list] = [[] for _ in range(batch)]
    for (b, _), v in sorted(zip(map(tuple, indices.tolist()), values.tolist())):
        if not 0 <= b < batch:
            raise ValueError(f"{what}: label batch index {b} is not in [0, {batch})")
        out[b].append(v)
    return out


@register_kernel("CTCLoss", "cpu")
def _ctc_loss(ctc, ins, outs, attrs):
    inputs, indices, values, seq_len = ins
    loss, grad = outs
    t_max, batch, classes = inputs.shape
    grad[...] = 0
    for b, labels in enumerate(batch_labels(indices, values, batch, "CTCLoss")):
        if attrs["preprocess_collapse_repeated"]:
            labels = [v for i, v in enumerate(labels) if i == 0 or v != labels[i - 1]]
        if not labels:
            raise ValueError(f"CTCLoss: the labels of sequence {b} are empty (TensorFlow refuses them too)")
        if any(not 0 <= v < classes - 1 for v in labels):
            raise ValueError(f"CTCLoss: labels of sequence {b} ({labels}) must be in [0, {classes - 1}): class "
                             f"{classes - 1} is the blank")
        t_len = int(seq_len[b])
        if not 0 <= t_len <= t_max:
            raise ValueError(f"CTCLoss: sequence_length[{b}] = {t_len} is not in [0, max_time {t_max}]")
        # Each repeated label needs a blank between its copies (when repeats are merged): more time steps.
        needed = len(labels) + (sum(a == b for a, b in zip(labels, labels[1:])) if attrs["ctc_merge_repeated"] else 0)
        if needed > t_len:
            if attrs["ignore_longer_outputs_than_inputs"]:
                loss[b] = 0
                continue
            raise ValueError(f"CTCLoss: not enough time for the labels of sequence {b}: they need {needed} steps, "
                             f"sequence_length is {t_len} (or pass ignore_longer_outputs_than_inputs=True)")
        value, g = ctc_sequence(inputs[:t_len, b].astype(np.float64), labels, attrs["ctc_merge_repeated"])
        loss[b] = value
        grad[:t_len, b] = g
