"""tf.contrib.legacy_seq2seq (TF1): the sequence losses of the PTB and char-RNN scripts, over lists of per-timestep
logits, targets and weights. The seq2seq models of this module are not implemented; their names raise
UnsupportedError.

    import tfplus as tf
    loss = tf.contrib.legacy_seq2seq.sequence_loss_by_example([logits], [targets], [weights])  # [batch]
"""
from __future__ import annotations

from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.ops import array_ops, math_ops, nn_ops
from tfplus.unsupported import module_getattr

__all__ = ["sequence_loss", "sequence_loss_by_example"]


def sequence_loss_by_example(logits, targets, weights, average_across_timesteps=True, softmax_loss_function=None,
                             name=None) -> Tensor:
    """Per example: sum over timesteps t of weights[t] * crossent(logits[t], targets[t]) ([batch, classes] and
    [batch] each), divided by the sum of the weights (+1e-12, as TF1) when `average_across_timesteps`."""
    if not len(logits) == len(targets) == len(weights):
        raise ValueError(f"sequence_loss_by_example: logits, targets and weights must be lists of one length, got "
                         f"{len(logits)}, {len(targets)} and {len(weights)}")
    with name_scope(name, "sequence_loss_by_example"):
        terms = []
        for logit, target, weight in zip(logits, targets, weights):
            if softmax_loss_function is None:
                crossent = nn_ops.sparse_softmax_cross_entropy_with_logits(
                    labels=array_ops.reshape(target, [-1]), logits=logit)
            else:
                crossent = softmax_loss_function(labels=target, logits=logit)
            terms.append(math_ops.multiply(crossent, weight))
        log_perps = math_ops.add_n(terms)
        if average_across_timesteps:
            log_perps = math_ops.divide(log_perps, math_ops.add(math_ops.add_n(list(weights)), 1e-12))
        return log_perps


def sequence_loss(logits, targets, weights, average_across_timesteps=True, average_across_batch=True,
                  softmax_loss_function=None, name=None) -> Tensor:
    """The sum over the batch of sequence_loss_by_example, divided by the batch size when
    `average_across_batch`: a scalar."""
    with name_scope(name, "sequence_loss"):
        cost = math_ops.reduce_sum(sequence_loss_by_example(logits, targets, weights, average_across_timesteps,
                                                            softmax_loss_function))
        if average_across_batch:
            batch = array_ops.shape(convert_to_tensor(targets[0]))[0]
            return math_ops.divide(cost, math_ops.cast(batch, cost.dtype))
        return cost


__getattr__ = module_getattr(__name__, "tf.contrib.legacy_seq2seq")
