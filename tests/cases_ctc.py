"""Op-table cases for CTCLoss (tfplus.ops.ctc_ops): the loss against a sum over every alignment, and its
gradient by float64 finite differences."""
import itertools

import numpy as np
from optable import Case

from tfplus.ops.ctc_ops import ctc_loss_op

_LABELS = [[0, 1, 1], [2]]            # a repeated label (needs a blank between), and a single one
_SEQ_LEN = [5, 3]


def _collapse(path, blank, merge):
    out, prev = [], None
    for c in path:
        if c != blank and not (merge and c == prev):
            out.append(c)
        prev = c
    return out


def _ctc_brute(x, merge=True, collapse_labels=False):
    """-log of the summed probability of every path (one class per step) whose collapse gives the labels."""
    t_max, batch, classes = x.shape
    loss = np.zeros(batch, x.dtype)
    for b, labels in enumerate(_LABELS):
        if collapse_labels:
            labels = [v for i, v in enumerate(labels) if i == 0 or v != labels[i - 1]]
        logits = x[:_SEQ_LEN[b], b].astype(np.float64)
        y = np.exp(logits - logits.max(1, keepdims=True))
        y /= y.sum(1, keepdims=True)
        total = sum(np.prod(y[np.arange(len(p)), p]) for p in itertools.product(range(classes), repeat=len(logits))
                    if _collapse(p, classes - 1, merge) == labels)
        loss[b] = -np.log(total)
    return loss


_INDICES = np.array([(b, i) for b, seq in enumerate(_LABELS) for i in range(len(seq))], np.int64)
_VALUES = np.array([v for seq in _LABELS for v in seq], np.int32)

CASES = [
    Case("ctc_loss", lambda x: ctc_loss_op(x, _INDICES, _VALUES, _SEQ_LEN)[0], inputs=[(5, 2, 4)], ref=_ctc_brute),
    Case("ctc_loss_unmerged", lambda x: ctc_loss_op(x, _INDICES, _VALUES, _SEQ_LEN, ctc_merge_repeated=False)[0],
         inputs=[(5, 2, 4)], ref=lambda x: _ctc_brute(x, merge=False)),
    Case("ctc_loss_collapsed_labels", lambda x: ctc_loss_op(x, _INDICES, _VALUES, _SEQ_LEN,
                                                            preprocess_collapse_repeated=True)[0],
         inputs=[(5, 2, 4)], ref=lambda x: _ctc_brute(x, collapse_labels=True)),
]
