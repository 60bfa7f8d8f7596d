"""tf.contrib.seq2seq (TF1): sequence_loss, the weighted cross-entropy of sequence models. The decoders and
attention wrappers are not implemented; their names raise UnsupportedError.

    import tfplus as tf
    loss = tf.contrib.seq2seq.sequence_loss(logits, targets, tf.ones_like(targets, tf.float32))  # a scalar
"""
from __future__ import annotations

from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.ops import array_ops, math_ops, nn_ops
from tfplus.unsupported import module_getattr

__all__ = ["sequence_loss"]


def sequence_loss(logits, targets, weights, average_across_timesteps=True, average_across_batch=True,
                  sum_over_timesteps=False, sum_over_batch=False, softmax_loss_function=None,
                  name=None) -> Tensor:
    """The cross-entropy of `logits` [batch, time, classes] against `targets` [batch, time] (class indices),
    times `weights` [batch, time]; averaged over the weights (or summed over the nonzero ones) across the
    timesteps and/or the batch as contrib's loss.py does: a scalar, [batch], [time] or [batch, time]."""
    if (average_across_timesteps and sum_over_timesteps) or (average_across_batch and sum_over_batch):
        raise ValueError("sequence_loss: average_across_* and sum_over_* of one axis cannot both be True")
    with name_scope(name, "sequence_loss"):
        logits, weights = convert_to_tensor(logits), convert_to_tensor(weights)
        targets = convert_to_tensor(targets)
        if logits.shape.ndims not in (None, 3) or targets.shape.ndims not in (None, 2):
            raise ValueError(f"sequence_loss: logits must be [batch, time, classes] and targets [batch, time], got "
                             f"{logits.shape} and {targets.shape}")
        classes = logits.shape.as_list()[-1]
        flat_logits = array_ops.reshape(logits, [-1, -1 if classes is None else classes])
        flat_targets = array_ops.reshape(targets, [-1])
        if softmax_loss_function is None:
            crossent = nn_ops.sparse_softmax_cross_entropy_with_logits(labels=flat_targets, logits=flat_logits)
        else:
            crossent = softmax_loss_function(labels=flat_targets, logits=flat_logits)
        crossent = math_ops.multiply(crossent, array_ops.reshape(weights, [-1]))

        def count(axis=None):  # how many weights are nonzero
            return math_ops.cast(math_ops.count_nonzero(weights, axis=axis), crossent.dtype)
        if average_across_timesteps and average_across_batch:
            return math_ops.div_no_nan(math_ops.reduce_sum(crossent), math_ops.reduce_sum(weights))
        if sum_over_timesteps and sum_over_batch:
            return math_ops.div_no_nan(math_ops.reduce_sum(crossent), count())
        crossent = array_ops.reshape(crossent, array_ops.shape(logits)[0:2])
        if average_across_timesteps or average_across_batch:
            axis = [0] if average_across_batch else [1]
            return math_ops.div_no_nan(math_ops.reduce_sum(crossent, axis), math_ops.reduce_sum(weights, axis))
        if sum_over_timesteps or sum_over_batch:
            axis = [0] if sum_over_batch else [1]
            return math_ops.div_no_nan(math_ops.reduce_sum(crossent, axis), count(axis))
        return crossent


__getattr__ = module_getattr(__name__, "tf.contrib.seq2seq")
