"""Connectionist temporal classification: the CTCLoss op (TF's: the loss and its gradient in one pass of the
forward-backward algorithm, on the host as TF's CPU-only kernel), whose registered gradient scales the gradient
it computed. The SparseTensor-facing API (tf.nn.ctc_loss, ctc_greedy_decoder, tf.edit_distance) is tfplus/ctc.py."""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus import flops
from tfplus.framework import Tensor, apply_op, convert_to_tensor
from tfplus.registry import register_gradient, register_op, register_rows
from tfplus.tensor_shape import check_rank, merge_dim, spec


def ctc_sequence(logits: np.ndarray, labels: list, merge_repeated: bool) -> tuple[float, np.ndarray]:
    """One sequence's CTC loss -log p(labels | logits) and its gradient in the logits [T, classes] (the last
    class the blank), by TF's ctc_loss_calculator: alpha and beta in log space over the labels with blanks
    around, a repeated label reachable without a blank between only when `merge_repeated` is False."""
    t_len, classes = logits.shape
    blank = classes - 1
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_y = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    l_prime = [blank]
    for label in labels:
        l_prime += [label, blank]
    u_len = len(l_prime)
    lp = np.array(l_prime)
    # Which transitions feed position u from u - 2: a label unlike the one two back (or any, unmerged).
    skip = np.zeros(u_len, bool)
    skip[2:] = (lp[2:] != blank) & ~(merge_repeated & (lp[2:] == lp[:-2]))
    stay = merge_repeated | (lp == blank)
    alpha = np.full((u_len, t_len), -np.inf)
    alpha[0, 0] = log_y[0, blank]
    if u_len > 1:
        alpha[1, 0] = log_y[0, lp[1]]
    for t in range(1, t_len):
        start, end = max(0, u_len - 2 * (t_len - t)), min(u_len, 2 * (t + 1))
        for u in range(start, end):
            s = alpha[u, t - 1] if stay[u] else -np.inf
            if u > 0:
                s = np.logaddexp(s, alpha[u - 1, t - 1])
            if skip[u]:
                s = np.logaddexp(s, alpha[u - 2, t - 1])
            alpha[u, t] = log_y[t, lp[u]] + s
    beta = np.full((u_len, t_len), -np.inf)
    beta[u_len - 1, t_len - 1] = 0.0
    if u_len > 1:
        beta[u_len - 2, t_len - 1] = 0.0
    for t in range(t_len - 2, -1, -1):
        start, end = max(0, u_len - 2 * (t_len - t)), min(u_len, 2 * (t + 1))
        for u in range(start, end):
            b = beta[u, t + 1] + log_y[t + 1, lp[u]] if stay[u] else -np.inf
            if u + 1 < u_len:
                b = np.logaddexp(b, beta[u + 1, t + 1] + log_y[t + 1, lp[u + 1]])
            if u + 2 < u_len and skip[u + 2]:
                b = np.logaddexp(b, beta[u + 2, t + 1] + log_y[t + 1, lp[u + 2]])
            beta[u, t] = b
    log_p = -np.inf
    for u in range(u_len):
        log_p = np.logaddexp(log_p, alpha[u, 0] + beta[u, 0])
    prob_sum = np.full((t_len, classes), -np.inf)
    for u in range(u_len):
        prob_sum[:, lp[u]] = np.logaddexp(prob_sum[:, lp[u]], alpha[u] + beta[u])
    grad = np.exp(log_y) - np.exp(prob_sum - log_p)
    return -log_p, grad


def _ctc_loss_shape(ins, attrs):
    inputs, indices, values, seq_len = ins
    check_rank(inputs, 3, "inputs [max_time, batch_size, num_classes]")
    check_rank(indices, 2, "labels_indices [num_labels, 2]")
    check_rank(values, 1, "labels_values [num_labels]")
    check_rank(seq_len, 1, "sequence_length [batch_size]")
    batch = None if inputs.shape is None else inputs.shape[1]
    if seq_len.shape is not None:
        batch = merge_dim(batch, seq_len.shape[0], "inputs batch_size and sequence_length")
    return [spec((batch,), inputs.dtype), spec(inputs.shape, inputs.dtype)]


register_op("CTCLoss", inputs=("inputs", "labels_indices", "labels_values", "sequence_length"),
            outputs=("loss", "gradient"), attrs={"T": "type", "preprocess_collapse_repeated": "bool",
                                                 "ctc_merge_repeated": "bool",
                                                 "ignore_longer_outputs_than_inputs": "bool"},
            shape_fn=_ctc_loss_shape, flops=flops.zero)
register_rows(lambda op, rows: "reads each sequence's labels from a SparseTensor over the whole batch", "CTCLoss")


@register_gradient("CTCLoss")
def _ctc_loss_grad(op, grad_loss, _):
    """d inputs = d loss[b] * (softmax(inputs) - the labels' posterior), the gradient the op computed"""
    from tfplus.ops.array_ops import expand_dims, prevent_gradient
    from tfplus.ops.math_ops import multiply
    # NOTE: the op's gradient output has no gradient of its own (TF's message).
    gradient = prevent_gradient(op.outputs[1], message="Currently there is no way to take the second derivative "
                                "of ctc_loss due to the fused implementation's interaction with tf.gradients()")
    return [multiply(expand_dims(expand_dims(grad_loss, 0), -1), gradient), None, None, None]


def ctc_loss_op(inputs, labels_indices, labels_values, sequence_length, preprocess_collapse_repeated=False,
                ctc_merge_repeated=True, ignore_longer_outputs_than_inputs=False, name=None) -> list[Tensor]:
    """The CTCLoss node: [loss [batch], gradient like inputs] for time-major `inputs` and labels given as a
    SparseTensor's indices and values (tf.nn.ctc_loss builds it)."""
    inputs = convert_to_tensor(inputs)
    if inputs.dtype not in (_dt.float32, _dt.float64):
        raise TypeError(f"tf.nn.ctc_loss: inputs '{inputs.name}' must be float32 or float64, got {inputs.dtype.name}")
    ins = [inputs, convert_to_tensor(labels_indices, dtype=_dt.int64), convert_to_tensor(labels_values,
                                                                                          dtype=_dt.int32),
           convert_to_tensor(sequence_length, dtype=_dt.int32)]
    attrs = {"T": inputs.dtype, "preprocess_collapse_repeated": bool(preprocess_collapse_repeated),
             "ctc_merge_repeated": bool(ctc_merge_repeated),
             "ignore_longer_outputs_than_inputs": bool(ignore_longer_outputs_than_inputs)}
    return list(apply_op("CTCLoss", ins, attrs, name))


