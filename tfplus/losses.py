"""tf.losses (TF1): per-example losses, weighted and reduced, added to the LOSSES collection.

    import tfplus as tf
    tf.losses.sparse_softmax_cross_entropy(labels=y, logits=logits)
    total = tf.losses.get_total_loss()        # every added loss plus the regularization losses
"""
from __future__ import annotations

from tfplus.framework import GraphKeys, Tensor, add_to_collection, convert_to_tensor, get_collection, name_scope
from tfplus.nn_impl import sigmoid_cross_entropy_with_logits
from tfplus.ops import math_ops
from tfplus.ops.array_ops import constant, ones_like, shape, size, stop_gradient, zeros_like
from tfplus.ops.nn_ops import relu, softmax_cross_entropy_with_logits_v2, sparse_softmax_cross_entropy_with_logits

__all__ = ["Reduction", "compute_weighted_loss", "add_loss", "get_losses", "get_regularization_losses",
           "get_regularization_loss", "get_total_loss", "absolute_difference", "huber_loss", "log_loss",
           "mean_squared_error", "sigmoid_cross_entropy", "softmax_cross_entropy",
           "sparse_softmax_cross_entropy", "hinge_loss", "cosine_distance", "mean_pairwise_squared_error"]


class Reduction:
    """How compute_weighted_loss reduces the weighted losses (TF1's names and default)."""
    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls) -> tuple:
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE, cls.SUM_BY_NONZERO_WEIGHTS)


def _safe_div(total: Tensor, count: Tensor, name: str) -> Tensor:
    """total / count, 0 where count is 0 (no example has weight)."""
    positive = math_ops.greater(count, zeros_like(count))
    return math_ops.where(positive, total / math_ops.where(positive, count, ones_like(count)), zeros_like(total),
                          name=name)


def compute_weighted_loss(losses, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """losses * weights, reduced by `reduction`, added to `loss_collection` (None: to none).

        >>> import tfplus as tf
        >>> loss = tf.losses.compute_weighted_loss(tf.constant([1.0, 3.0]), weights=[1.0, 0.0])  # 1.0
    """
    if reduction not in Reduction.all():
        raise ValueError(f"compute_weighted_loss: invalid reduction {reduction!r}; use one of {Reduction.all()}")
    with name_scope(scope, "weighted_loss"):
        losses = convert_to_tensor(losses)
        weights = convert_to_tensor(weights, dtype=losses.dtype)
        weighted = math_ops.multiply(losses, weights)
        if reduction == Reduction.NONE:
            loss = weighted
        else:
            loss = math_ops.reduce_sum(weighted)
            # every weight broadcast to the losses' shape, so a per-example weight counts once per element
            broadcast = weights * ones_like(losses)
            if reduction == Reduction.MEAN:
                loss = _safe_div(loss, math_ops.reduce_sum(broadcast), "value")
            elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
                loss = _safe_div(loss, math_ops.cast(size(losses), losses.dtype), "value")
            elif reduction == Reduction.SUM_BY_NONZERO_WEIGHTS:
                present = math_ops.cast(math_ops.not_equal(broadcast, zeros_like(broadcast)), losses.dtype)
                loss = _safe_div(loss, math_ops.reduce_sum(present), "value")
        if loss_collection is not None:
            add_to_collection(loss_collection, loss)
        return loss


def add_loss(loss, loss_collection=GraphKeys.LOSSES) -> None:
    """Adds an externally computed loss to `loss_collection`."""
    if loss_collection is not None:
        add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=GraphKeys.LOSSES) -> list:
    return get_collection(loss_collection, scope)


def get_regularization_losses(scope=None) -> list:
    return get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss") -> Tensor:
    """The sum of the regularization losses (0.0 when there are none)."""
    losses = get_regularization_losses(scope)
    return math_ops.add_n(losses, name=name) if losses else constant(0.0, name=name)


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None) -> Tensor:
    """The sum of every loss in LOSSES (and, by default, the regularization losses)."""
    losses = get_losses(scope)
    if add_regularization_losses:
        losses = losses + get_regularization_losses(scope)
    if not losses:
        raise ValueError("get_total_loss: no losses in the LOSSES collection (and no regularization losses)")
    return math_ops.add_n(losses, name=name)


def _pair(labels, predictions):
    predictions = convert_to_tensor(predictions)
    labels = convert_to_tensor(labels, preferred_dtype=predictions.dtype)
    if labels.dtype is not predictions.dtype:
        labels = math_ops.cast(labels, predictions.dtype)
    if not labels.shape.is_compatible_with(predictions.shape):
        raise ValueError(f"labels shape {labels.shape} and predictions shape {predictions.shape} must match")
    return labels, predictions


def absolute_difference(labels, predictions, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                        reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """|predictions - labels|, weighted and reduced."""
    with name_scope(scope, "absolute_difference"):
        labels, predictions = _pair(labels, predictions)
        return compute_weighted_loss(math_ops.abs(predictions - labels), weights, None, loss_collection, reduction)


def mean_squared_error(labels, predictions, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """(predictions - labels)^2, weighted and reduced."""
    with name_scope(scope, "mean_squared_error"):
        labels, predictions = _pair(labels, predictions)
        return compute_weighted_loss(math_ops.squared_difference(predictions, labels), weights, None,
                                     loss_collection, reduction)


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """0.5 e^2 where |e| <= delta, else delta (|e| - 0.5 delta), e = predictions - labels."""
    with name_scope(scope, "huber_loss"):
        labels, predictions = _pair(labels, predictions)
        abs_error = math_ops.abs(predictions - labels)
        quadratic = math_ops.minimum(abs_error, delta)
        linear = abs_error - quadratic  # the part of |e| beyond delta
        losses = 0.5 * quadratic * quadratic + delta * linear
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None, loss_collection=GraphKeys.LOSSES,
             reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """-labels log(predictions + eps) - (1 - labels) log(1 - predictions + eps)."""
    with name_scope(scope, "log_loss"):
        labels, predictions = _pair(labels, predictions)
        losses = -labels * math_ops.log(predictions + epsilon) - \
            (1.0 - labels) * math_ops.log(1.0 - predictions + epsilon)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Elementwise sigmoid cross-entropy; label smoothing moves labels toward 0.5."""
    with name_scope(scope, "sigmoid_cross_entropy_loss"):
        labels, logits = _pair(multi_class_labels, logits)
        if label_smoothing > 0:
            labels = labels * (1 - label_smoothing) + 0.5 * label_smoothing
        losses = sigmoid_cross_entropy_with_logits(labels=labels, logits=logits, name="xentropy")
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Per-example softmax cross-entropy against one-hot (or soft) labels, which get no gradient; label
    smoothing mixes them with the uniform distribution."""
    with name_scope(scope, "softmax_cross_entropy_loss"):
        labels, logits = _pair(onehot_labels, logits)
        if label_smoothing > 0:
            classes = math_ops.cast(shape(labels)[-1], logits.dtype)
            labels = labels * (1 - label_smoothing) + label_smoothing / classes
        losses = softmax_cross_entropy_with_logits_v2(labels=stop_gradient(labels), logits=logits, name="xentropy")
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Per-example softmax cross-entropy against integer class labels."""
    with name_scope(scope, "sparse_softmax_cross_entropy_loss"):
        losses = sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits, name="xentropy")
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.losses")


def hinge_loss(labels, logits, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """max(0, 1 - (2 labels - 1) logits): labels 0/1 taken as -1/+1."""
    with name_scope(scope, "hinge_loss"):
        labels, logits = _pair(labels, logits)
        losses = relu(1.0 - (2.0 * labels - 1.0) * logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def cosine_distance(labels, predictions, axis=None, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                    reduction=Reduction.SUM_BY_NONZERO_WEIGHTS, dim=None) -> Tensor:
    """1 - sum(labels * predictions) along `axis` (kept, size 1), for unit-normalized labels and predictions."""
    axis = dim if axis is None else axis
    if axis is None:
        raise ValueError("tf.losses.cosine_distance: axis is required")
    with name_scope(scope, "cosine_distance_loss"):
        labels, predictions = _pair(labels, predictions)
        losses = 1.0 - math_ops.reduce_sum(labels * predictions, axis, keepdims=True)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def mean_pairwise_squared_error(labels, predictions, weights=1.0, scope=None,
                                loss_collection=GraphKeys.LOSSES) -> Tensor:
    """The mean over each example's pairs of elements (i, j) of ((p_i - p_j) - (l_i - l_j))^2, weighted by the
    example's weight and summed over the batch, as TF1 computes it: with d = predictions - labels and n the
    example's count of elements of nonzero weight, 2 sum(d^2) / (n - 1) - 2 sum(d)^2 / (n (n - 1)). Always
    float32, as TF1's."""
    from tfplus.dtypes import float32
    from tfplus.ops.array_ops import rank
    with name_scope(scope, "mean_pairwise_squared_error"):
        weights = math_ops.cast(convert_to_tensor(weights), float32)
        labels = math_ops.cast(convert_to_tensor(labels), float32)
        predictions = math_ops.cast(convert_to_tensor(predictions), float32)
        labels, predictions = _pair(labels, predictions)
        diffs = predictions - labels
        axis = math_ops.range(1, rank(diffs))
        present = math_ops.where(math_ops.equal(weights, 0.0), zeros_like(weights), ones_like(weights))
        n = math_ops.reduce_sum(present * ones_like(diffs), axis=axis, keepdims=True)  # per example
        term1 = 2.0 * math_ops.div_no_nan(math_ops.reduce_sum(math_ops.square(diffs), axis=axis, keepdims=True),
                                          math_ops.maximum(n - 1, 0.0))
        term2 = 2.0 * math_ops.div_no_nan(math_ops.square(math_ops.reduce_sum(diffs, axis=axis, keepdims=True)),
                                          math_ops.maximum(n * (n - 1), 0.0))
        loss = math_ops.reduce_sum((term1 - term2) * weights)
        loss = math_ops.where(math_ops.reduce_sum(n) > 0, loss, zeros_like(loss), name="value")
        add_loss(loss, loss_collection)
        return loss
