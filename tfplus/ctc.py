"""tf.nn.ctc_loss (TF1's signature: SparseTensor labels, time-major inputs), tf.nn.ctc_greedy_decoder and
tf.edit_distance, as a speech recognizer's training and evaluation use them:

    loss = tf.nn.ctc_loss(targets, logits, seq_len)          # targets: tf.sparse_placeholder(tf.int32)
    decoded, log_prob = tf.nn.ctc_greedy_decoder(logits, seq_len)
    decoded, log_prob = tf.nn.ctc_beam_search_decoder(logits, seq_len, beam_width=10, top_paths=2)
    ler = tf.reduce_mean(tf.edit_distance(tf.cast(decoded[0], tf.int32), targets))
"""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.ops import array_ops, math_ops
from tfplus.ops.ctc_ops import ctc_loss_op
from tfplus.ops.host_ops import host_op
from tfplus.sparse import SparseTensor

__all__ = ["ctc_loss", "ctc_loss_v2", "ctc_greedy_decoder", "ctc_beam_search_decoder", "ctc_beam_search_decoder_v2",
           "edit_distance"]


def ctc_loss(labels, inputs=None, sequence_length=None, preprocess_collapse_repeated=False, ctc_merge_repeated=True,
             ignore_longer_outputs_than_inputs=False, time_major=True, logits=None) -> Tensor:
    """The CTC loss per sequence [batch] of unnormalized `inputs` ([max_time, batch, num_classes], or batch-major
    with time_major=False; the last class is the blank) against `labels`, a SparseTensor [batch, max_label_len]
    of int32 class ids. Differentiable in `inputs` (once)."""
    if not isinstance(labels, SparseTensor):
        raise TypeError("tf.nn.ctc_loss: labels must be a SparseTensor (TF1's signature; tf.sparse_placeholder or "
                        "tf.SparseTensor), got " + type(labels).__name__)
    inputs = logits if inputs is None else inputs
    if inputs is None or sequence_length is None:
        raise ValueError("tf.nn.ctc_loss: inputs (logits) and sequence_length are required")
    with name_scope(None, "ctc_loss"):
        inputs = convert_to_tensor(inputs)
        if not time_major:
            inputs = array_ops.transpose(inputs, [1, 0, 2])
        loss, _ = ctc_loss_op(inputs, labels.indices, labels.values, sequence_length, preprocess_collapse_repeated,
                              ctc_merge_repeated, ignore_longer_outputs_than_inputs)
        return loss


def ctc_loss_v2(labels, logits, label_length, logit_length, logits_time_major=True, unique=None, blank_index=None,
                name=None) -> Tensor:
    """TF 1.14's CTC interface: `labels` dense [batch, max_label_len] int with `label_length` (then the blank is
    class 0 unless blank_index says), or a SparseTensor (then blank_index is required); logits time-major
    unless logits_time_major=False. The loss per sequence [batch], ctc_loss's with the blank moved last.

        >>> import tfplus as tf
        >>> loss = tf.nn.ctc_loss_v2(tf.constant([[1, 2]]), tf.zeros([5, 1, 4]), tf.constant([2]), tf.constant([5]))
    """
    if unique is not None:
        raise NotImplementedError("tf.nn.ctc_loss_v2: unique= (tf.nn.ctc_unique_labels' speed-up) is not supported; "
                                  "leave it None: the loss is the same")
    with name_scope(name, "ctc_loss_v2"):
        logits = convert_to_tensor(logits)
        classes = logits.shape.as_list()[2]
        if isinstance(labels, SparseTensor):
            if blank_index is None:
                raise ValueError("tf.nn.ctc_loss_v2: blank_index is required when labels is a SparseTensor")
        else:
            from tfplus.nn_impl import sequence_mask
            labels = convert_to_tensor(labels)
            where = math_ops.where(sequence_mask(label_length, array_ops.shape(labels)[1]))
            labels = SparseTensor(where, array_ops.gather_nd(labels, where),
                                  array_ops.shape(labels, out_type=_dt.int64))
            blank_index = 0 if blank_index is None else blank_index
        if classes is None:
            raise ValueError(f"tf.nn.ctc_loss_v2: logits '{logits.name}' need a known number of classes (last "
                             "dimension) to place the blank")
        blank = blank_index % classes
        if blank != classes - 1:  # the blank moved last and the labels above it down one, as TF does
            logits = array_ops.concat([logits[:, :, :blank], logits[:, :, blank + 1:],
                                       logits[:, :, blank:blank + 1]], 2)
            values = labels.values
            labels = SparseTensor(labels.indices, math_ops.where_v2(values < blank, values, values - 1),
                                  labels.dense_shape)
        return ctc_loss(labels, logits, logit_length, time_major=logits_time_major)


def ctc_greedy_decoder(inputs, sequence_length, merge_repeated=True, blank_index=None):
    """Best path decoding: the most likely class at each step, repeats merged (merge_repeated) and blanks
    dropped. ([SparseTensor int64 [batch, longest]], log_probabilities [batch, 1] = -sum of the best logits), as
    TF's CTCGreedyDecoder (on the host)."""
    with name_scope(None, "CTCGreedyDecoder"):
        inputs = convert_to_tensor(inputs)
        seq = convert_to_tensor(sequence_length, dtype=_dt.int32)

        def run(x, lengths):
            classes = x.shape[2]
            blank = classes - 1 if blank_index is None or blank_index == classes - 1 else blank_index % classes
            indices, values, log_p = [], [], np.zeros((x.shape[1], 1), x.dtype)
            longest = 0
            for b in range(x.shape[1]):
                prev, decoded = -1, []
                for t in range(int(lengths[b])):
                    best = int(np.argmax(x[t, b]))
                    log_p[b, 0] -= x[t, b, best]
                    if best != blank and not (merge_repeated and best == prev):
                        decoded.append(best)
                    prev = best
                indices += [(b, i) for i in range(len(decoded))]
                values += decoded
                longest = max(longest, len(decoded))
            return [np.array(indices, np.int64).reshape(-1, 2), np.array(values, np.int64),
                    np.array([x.shape[1], longest], np.int64), log_p]
        batch = inputs.shape.as_list()[1] if inputs.shape.ndims == 3 else None
        indices, values, shape, log_p = host_op("CTCGreedyDecoder", run, [inputs, seq],
                                                [_dt.int64, _dt.int64, _dt.int64, inputs.dtype],
                                                [(None, 2), (None,), (2,), (batch, 1)])
        return [SparseTensor(indices, values, shape)], log_p


def _log_sum_exp(a, b):
    """log(e^a + e^b) in the inputs' precision; -inf is log 0."""
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    return a + np.log1p(np.exp(b - a)) if a > b else b + np.log1p(np.exp(a - b))


class _Prefix:
    """A node of the beam search's prefix tree: a labelling ending in `label`, with its log probabilities at the
    previous step (old) and this one (new), each [total, ending in blank, ending in the label]. Nodes persist
    for the sequence (a pruned one is reset to log 0, inactive, and may come back)."""

    def __init__(self, parent, label: int, zero):
        self.parent, self.label, self.children = parent, label, {}
        self.old, self.new = [zero] * 3, [zero] * 3

    def active(self) -> bool:
        return self.new[0] != -np.inf

    def child(self, label: int, zero):
        if label not in self.children:
            self.children[label] = _Prefix(self, label, zero)
        return self.children[label]

    def labels(self, merge_repeated: bool) -> list:
        out, node, prev = [], self, -1
        while node.parent is not None:
            if not merge_repeated or node.label != prev:
                out.append(node.label)
            prev, node = node.label, node.parent
        return out[::-1]


def _candidate(total, leaves: list, beam_width: int) -> bool:
    """Whether a labelling of log probability `total` enters the beam: it is possible, and the beam has room or
    its lowest is lower."""
    return total > -np.inf and (len(leaves) < beam_width or total > min(q.new[0] for q in leaves))


def _beam_search(x, beam_width: int, top_paths: int, merge_repeated: bool):
    """TF's CTCBeamSearchDecoder for one sequence x [time, classes] (blank last, no label selection, no language
    model): the `top_paths` best labellings and their log probabilities (the logits normalized by a log softmax at
    each step, as TF's kernel)."""
    zero, blank = x.dtype.type(-np.inf), x.shape[1] - 1
    root = _Prefix(None, -1, zero)
    root.new = [x.dtype.type(0), x.dtype.type(0), zero]
    leaves = [root]
    for row in x:
        row = row - row.max()
        row = row - np.log(np.exp(row).sum())  # log softmax: the scores are log probabilities
        branches = sorted(leaves, key=lambda p: -p.new[0])
        for p in branches:
            p.old = list(p.new)
        leaves = []
        for p in branches:
            if p.parent is not None:
                label = p.new[2]
                if p.parent.active():
                    prev = p.parent.old[1] if p.label == p.parent.label else p.parent.old[0]
                    label = _log_sum_exp(label, prev)
                p.new[2] = label + row[p.label]
            p.new[1] = p.old[0] + row[blank]
            p.new[0] = _log_sum_exp(p.new[1], p.new[2])
            leaves.append(p)
        for p in branches:
            if not _candidate(p.old[0], leaves, beam_width):
                continue
            for label in range(blank):
                c = p.child(label, zero)
                if c.active():
                    continue
                prev = p.old[1] if c.label == p.label else p.old[0]
                c.new = [row[label] + prev, zero, row[label] + prev]
                if _candidate(c.new[0], leaves, beam_width):
                    if len(leaves) == beam_width:  # the lowest leaves the beam
                        bottom = min(leaves, key=lambda q: q.new[0])
                        bottom.new = [zero] * 3
                        leaves.remove(bottom)
                    leaves.append(c)
                else:
                    c.old, c.new = [zero] * 3, [zero] * 3
    if top_paths > len(leaves):
        raise ValueError(f"CTCBeamSearchDecoder: top_paths={top_paths} but the beam holds {len(leaves)} "
                         "labellings (fewer than requested): lower top_paths")
    best = sorted(leaves, key=lambda p: -p.new[0])[:top_paths]
    return [p.labels(merge_repeated) for p in best], [p.new[0] for p in best]


def ctc_beam_search_decoder(inputs, sequence_length, beam_width=100, top_paths=1, merge_repeated=True):
    """Beam search decoding of the logits `inputs` [max_time, batch, num_classes] (blank last): ([top_paths
    SparseTensors int64 [batch, longest]], log_probabilities [batch, top_paths]), as TF's CTCBeamSearchDecoder
    (on the host)."""
    if top_paths > beam_width:
        raise ValueError(f"tf.nn.ctc_beam_search_decoder: top_paths ({top_paths}) must be at most beam_width "
                         f"({beam_width})")
    with name_scope(None, "CTCBeamSearchDecoder"):
        inputs = convert_to_tensor(inputs)
        seq = convert_to_tensor(sequence_length, dtype=_dt.int32)

        def run(x, lengths):
            batch = x.shape[1]
            found = [_beam_search(x[:int(lengths[b]), b], beam_width, top_paths, merge_repeated)
                     for b in range(batch)]
            out = []
            for k in range(top_paths):
                paths = [f[0][k] for f in found]
                out += [np.array([(b, i) for b, p in enumerate(paths) for i in range(len(p))], np.int64).reshape(-1, 2),
                        np.array([v for p in paths for v in p], np.int64),
                        np.array([batch, max(len(p) for p in paths)], np.int64)]
            return out + [np.array([f[1] for f in found], x.dtype).reshape(batch, top_paths)]
        batch = inputs.shape.as_list()[1] if inputs.shape.ndims == 3 else None
        outs = host_op("CTCBeamSearchDecoder", run, [inputs, seq],
                       [_dt.int64, _dt.int64, _dt.int64] * top_paths + [inputs.dtype],
                       [(None, 2), (None,), (2,)] * top_paths + [(batch, top_paths)])
        decoded = [SparseTensor(*outs[3 * k:3 * k + 3]) for k in range(top_paths)]
        return decoded, outs[-1]


def ctc_beam_search_decoder_v2(inputs, sequence_length, beam_width=100, top_paths=1):
    """TF2's form: repeated labels of a path are kept (merge_repeated=False)."""
    return ctc_beam_search_decoder(inputs, sequence_length, beam_width, top_paths, merge_repeated=False)


def _levenshtein(a: list, b: list) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def _groups(indices, values) -> dict:
    """A SparseTensor's entries grouped by all but their last index, each group in last-index order."""
    out: dict = {}
    for idx, v in sorted(zip(map(tuple, np.asarray(indices).tolist()), list(values)), key=lambda p: p[0]):
        out.setdefault(idx[:-1], []).append(v)
    return out


def edit_distance(hypothesis, truth, normalize=True, name="edit_distance") -> Tensor:
    """The Levenshtein distance between the sequences of two SparseTensors (the last dimension the sequence,
    the others the group): float32 of the dense shape but the last, divided by the truth's length if
    `normalize` (inf where the truth is empty and the hypothesis not), as TF's EditDistance (on the host)."""
    if not isinstance(hypothesis, SparseTensor) or not isinstance(truth, SparseTensor):
        raise TypeError("tf.edit_distance: hypothesis and truth must be SparseTensors")
    if hypothesis.dtype != truth.dtype:
        raise TypeError(f"tf.edit_distance: hypothesis is {hypothesis.dtype.name} but truth is {truth.dtype.name}")

    def run(h_idx, h_val, h_shape, t_idx, t_val, t_shape):
        if len(h_shape) != len(t_shape):
            raise ValueError(f"EditDistance: hypothesis has rank {len(h_shape)} but truth has rank {len(t_shape)}")
        out = np.zeros(np.maximum(h_shape, t_shape)[:-1], np.float32)
        hyp, tru = _groups(h_idx, h_val), _groups(t_idx, t_val)
        for key in set(hyp) | set(tru):
            h, t = hyp.get(key, []), tru.get(key, [])
            d = np.float32(_levenshtein(h, t))
            if normalize:
                with np.errstate(divide="ignore", invalid="ignore"):
                    d = np.float32(d / np.float32(len(t))) if t else np.float32(np.inf if d else 0)
            out[key] = d
        return [out]
    rank = truth.shape.ndims if truth.shape.ndims is not None else hypothesis.shape.ndims
    with name_scope(name):
        return host_op("EditDistance", run, [hypothesis.indices, hypothesis.values, hypothesis.dense_shape,
                                             truth.indices, truth.values, truth.dense_shape], [_dt.float32],
                       [None if rank is None else (None,) * (rank - 1)])[0]
