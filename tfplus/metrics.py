"""tf.metrics (TF1): streaming metrics. Each returns (value, update_op): running update_op folds a batch into the
metric's local variables and gives the updated value; `value` reads the variables without changing them.

    import tfplus as tf
    acc, acc_update = tf.metrics.accuracy(labels, tf.argmax(logits, 1))
    sess.run(tf.local_variables_initializer())          # start (or restart) the stream
    for batch in batches:
        sess.run(acc_update, feed_dict=batch)
    print(sess.run(acc))

As in TF1, the variables are local (GraphKeys.LOCAL_VARIABLES and METRIC_VARIABLES: not saved by a Saver, not
trained), created under a variable scope named after the metric ('accuracy/total', 'accuracy/count', 'mean_1/...').
"""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import (
    GraphKeys,
    Tensor,
    add_to_collection,
    convert_to_tensor,
    get_default_graph,
    name_scope,
)
from tfplus.ops import array_ops, math_ops, special_math_ops
from tfplus.variables import Variable, variable_scope

__all__ = ["accuracy", "mean", "precision", "recall", "auc", "true_positives", "false_positives",
           "false_negatives", "true_negatives", "mean_iou", "mean_per_class_accuracy", "mean_squared_error",
           "root_mean_squared_error", "mean_absolute_error", "mean_relative_error", "mean_cosine_distance",
           "percentage_below", "mean_tensor", "true_positives_at_thresholds", "false_positives_at_thresholds",
           "false_negatives_at_thresholds", "true_negatives_at_thresholds", "precision_at_thresholds",
           "recall_at_thresholds", "precision_at_k", "recall_at_k", "precision_at_top_k", "recall_at_top_k",
           "sparse_precision_at_k", "average_precision_at_k", "sparse_average_precision_at_k"]

def _metric_variable(shape, dtype, name: str) -> Variable:
    """A zero-initialized local variable (its initializer outside the caller's control dependencies)."""
    with get_default_graph().control_dependencies(None):
        return Variable(array_ops.zeros(shape, dtype), trainable=False, name=name,
                        collections=[GraphKeys.LOCAL_VARIABLES, GraphKeys.METRIC_VARIABLES])


def _collect(value, update_op, metrics_collections, updates_collections):
    for key in metrics_collections or ():
        add_to_collection(key, value)
    for key in updates_collections or ():
        add_to_collection(key, update_op)
    return value, update_op


def _squeeze_last(a, b):
    """TF1's _remove_squeezable_dimensions: when one rank is the other's plus one and its last dim is 1 (labels
    of shape [N, 1] beside predictions of shape [N]), that dim goes."""
    ra, rb = a.shape.ndims, b.shape.ndims
    if ra is not None and rb is not None:
        if ra == rb + 1 and a.shape.as_list()[-1] == 1:
            a = array_ops.squeeze(a, [-1])
        elif rb == ra + 1 and b.shape.as_list()[-1] == 1:
            b = array_ops.squeeze(b, [-1])
    return a, b


def _weighted(values, weights):
    """(values * weights, weights broadcast to the values' shape) as float32; weights default to ones."""
    values = math_ops.cast(values, _dt.float32)
    if weights is None:
        return values, array_ops.ones_like(values)
    weights = math_ops.cast(convert_to_tensor(weights), _dt.float32) * array_ops.ones_like(values)
    return values * weights, weights


def mean(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The (weighted) mean of every value seen: total / count, 0 before any (TF1's tf.metrics.mean)."""
    with variable_scope(name, "mean"):
        values = convert_to_tensor(values)
        total = _metric_variable([], _dt.float32, "total")
        count = _metric_variable([], _dt.float32, "count")
        weighted, weights = _weighted(values, weights)
        update_total = total.assign_add(math_ops.reduce_sum(weighted))
        update_count = count.assign_add(math_ops.reduce_sum(weights))
        value = math_ops.div_no_nan(total.read_value(), count.read_value(), name="value")
        update_op = math_ops.div_no_nan(update_total, update_count, name="update_op")
    return _collect(value, update_op, metrics_collections, updates_collections)


def accuracy(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """How often predictions equal labels: the mean of equal(predictions, labels) (TF1's tf.metrics.accuracy)."""
    labels, predictions = convert_to_tensor(labels), convert_to_tensor(predictions)
    predictions, labels = _squeeze_last(predictions, labels)
    if labels.dtype != predictions.dtype:
        predictions = math_ops.cast(predictions, labels.dtype)
    is_correct = math_ops.cast(math_ops.equal(predictions, labels), _dt.float32)
    return mean(is_correct, weights, metrics_collections, updates_collections, name or "accuracy")


# -- Errors of regressions: TF1's, each the streaming mean of a per-element error ------------------------------
def mean_squared_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                       name=None):
    """The (weighted) mean of (labels - predictions)^2 over the stream (TF1's tf.metrics.mean_squared_error)."""
    predictions, labels = _squeeze_last(convert_to_tensor(predictions), convert_to_tensor(labels))
    return mean(math_ops.squared_difference(predictions, labels), weights, metrics_collections,
                updates_collections, name or "mean_squared_error")


def root_mean_squared_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                            name=None):
    """The square root of the streamed mean squared error (TF1's tf.metrics.root_mean_squared_error)."""
    mse, update_mse = mean_squared_error(labels, predictions, weights, name=name or "root_mean_squared_error")
    return _collect(math_ops.sqrt(mse), math_ops.sqrt(update_mse), metrics_collections, updates_collections)


def mean_absolute_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                        name=None):
    """The (weighted) mean of |labels - predictions| over the stream (TF1's tf.metrics.mean_absolute_error)."""
    predictions, labels = _squeeze_last(convert_to_tensor(predictions), convert_to_tensor(labels))
    return mean(math_ops.abs(predictions - labels), weights, metrics_collections, updates_collections,
                name or "mean_absolute_error")


def mean_relative_error(labels, predictions, normalizer, weights=None, metrics_collections=None,
                        updates_collections=None, name=None):
    """The (weighted) mean of |labels - predictions| / normalizer, 0 where the normalizer is 0 (TF1's
    tf.metrics.mean_relative_error)."""
    predictions, labels = _squeeze_last(convert_to_tensor(predictions), convert_to_tensor(labels))
    normalizer = convert_to_tensor(normalizer)
    relative = math_ops.where(math_ops.equal(normalizer, 0.0), array_ops.zeros_like(labels),
                              math_ops.abs(labels - predictions) / normalizer)
    return mean(relative, weights, metrics_collections, updates_collections, name or "mean_relative_error")


def mean_cosine_distance(labels, predictions, dim=None, weights=None, metrics_collections=None,
                         updates_collections=None, name=None):
    """1 - the streamed mean of sum(labels * predictions) along `dim` (TF1's tf.metrics.mean_cosine_distance:
    the rows are expected unit-normalized, as tf.nn.l2_normalize leaves them)."""
    if dim is None:
        raise ValueError("tf.metrics.mean_cosine_distance: give dim, the axis the vectors lie along")
    predictions, labels = _squeeze_last(convert_to_tensor(predictions), convert_to_tensor(labels))
    radial = math_ops.reduce_sum(predictions * labels, axis=[dim], keepdims=True)
    value, update_op = mean(radial, weights, name=name or "mean_cosine_distance")
    return _collect(1.0 - value, 1.0 - update_op, metrics_collections, updates_collections)


def percentage_below(values, threshold, weights=None, metrics_collections=None, updates_collections=None,
                     name=None):
    """The (weighted) fraction of values below `threshold` over the stream (TF1's tf.metrics.percentage_below)."""
    is_below = math_ops.cast(math_ops.less(convert_to_tensor(values), threshold), _dt.float32)
    return mean(is_below, weights, metrics_collections, updates_collections, name or "percentage_below_threshold")


def mean_tensor(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The element-wise (weighted) mean of every `values` seen, a tensor of their static shape (TF1's
    tf.metrics.mean_tensor; NaN where no weight has been seen yet, as TF1's)."""
    with variable_scope(name, "mean"):
        values = math_ops.cast(convert_to_tensor(values), _dt.float32)
        shape = values.shape
        if not shape.is_fully_defined():
            raise ValueError(f"tf.metrics.mean_tensor: the values' shape {shape} must be fully defined (its "
                             "variables take it)")
        total = _metric_variable(shape.as_list(), _dt.float32, "total_tensor")
        count = _metric_variable(shape.as_list(), _dt.float32, "count_tensor")
        weighted, weights = _weighted(values, weights)
        update_total = total.assign_add(weighted)
        update_count = count.assign_add(weights)
        value = math_ops.truediv(total.read_value(), math_ops.maximum(count.read_value(), 0.0), name="value")
        update_op = math_ops.truediv(update_total, math_ops.maximum(update_count, 0.0), name="update_op")
    return _collect(value, update_op, metrics_collections, updates_collections)


def _count(condition, weights, scope: str, name, metrics_collections, updates_collections):
    """The (weighted) count of true `condition` values, as TF1's true_positives & co."""
    with variable_scope(name, scope):
        count = _metric_variable([], _dt.float32, "count")
        weighted, _ = _weighted(condition, weights)
        update_op = count.assign_add(math_ops.reduce_sum(weighted))
        value = array_ops.identity(count.read_value(), name="value")
    return _collect(value, update_op, metrics_collections, updates_collections)


def _booleans(labels, predictions):
    labels = math_ops.cast(convert_to_tensor(labels), _dt.bool_)
    predictions = math_ops.cast(convert_to_tensor(predictions), _dt.bool_)
    return _squeeze_last(labels, predictions)


def _counter(scope: str, label: bool, prediction: bool):
    def metric(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
        labels, predictions = _booleans(labels, predictions)
        want_l = labels if label else math_ops.logical_not(labels)
        want_p = predictions if prediction else math_ops.logical_not(predictions)
        return _count(math_ops.logical_and(want_l, want_p), weights, scope, name, metrics_collections,
                      updates_collections)
    metric.__name__ = scope
    metric.__doc__ = f"The (weighted) count of labels == {label} with predictions == {prediction} (TF1's " \
                     f"tf.metrics.{scope})."
    return metric


true_positives = _counter("true_positives", True, True)
false_positives = _counter("false_positives", False, True)
false_negatives = _counter("false_negatives", True, False)
true_negatives = _counter("true_negatives", False, False)


def _ratio(scope: str, other, doc: str):
    def metric(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
        with variable_scope(name, scope):
            labels, predictions = _booleans(labels, predictions)
            tp, tp_update = true_positives(labels, predictions, weights)
            miss, miss_update = other(labels, predictions, weights)

            def ratio(a, b, op_name):  # a / (a + b), 0 while a + b is 0
                return math_ops.div_no_nan(a, a + b, name=op_name)
            value, update_op = ratio(tp, miss, "value"), ratio(tp_update, miss_update, "update_op")
        return _collect(value, update_op, metrics_collections, updates_collections)
    metric.__name__, metric.__doc__ = scope, doc
    return metric


precision = _ratio("precision", false_positives,
                   "true positives / (true positives + false positives) over the stream (TF1's tf.metrics.precision).")
recall = _ratio("recall", false_negatives,
                "true positives / (true positives + false negatives) over the stream (TF1's tf.metrics.recall).")


def _streaming_confusion_matrix(labels, predictions, num_classes: int, weights):
    """TF1's: a float64 [num_classes, num_classes] local variable summing confusion matrices (rows the labels);
    (the variable, its update)."""
    total_cm = _metric_variable([num_classes, num_classes], _dt.float64, "total_confusion_matrix")
    labels, predictions = (array_ops.reshape(convert_to_tensor(t), [-1]) for t in (labels, predictions))
    if weights is not None:
        weights = array_ops.reshape(convert_to_tensor(weights), [-1])
    current = special_math_ops.confusion_matrix(labels, predictions, num_classes, weights=weights, dtype=_dt.float64)
    return total_cm, total_cm.assign_add(current)


def mean_iou(labels, predictions, num_classes: int, weights=None, metrics_collections=None,
             updates_collections=None, name=None):
    """The mean over classes of intersection / union (TP / (TP + FP + FN)) from the streamed confusion matrix,
    classes with an empty union left out (TF1's tf.metrics.mean_iou). update_op gives the confusion matrix."""
    with variable_scope(name, "mean_iou"):
        total_cm, update_op = _streaming_confusion_matrix(labels, predictions, num_classes, weights)
        cm = total_cm.read_value()
        rows = math_ops.cast(math_ops.reduce_sum(cm, 0), _dt.float32)
        cols = math_ops.cast(math_ops.reduce_sum(cm, 1), _dt.float32)
        diag = math_ops.cast(special_math_ops.diag_part(cm), _dt.float32)
        union = rows + cols - diag
        iou = diag / math_ops.where(union > 0, union, array_ops.ones_like(union))   # 0 where the union is
        valid = math_ops.reduce_sum(math_ops.cast(math_ops.not_equal(union, 0), _dt.float32))
        value = math_ops.where(valid > 0, math_ops.reduce_sum(iou) / math_ops.maximum(valid, 1.0), 0.0,
                                name="mean_iou")
    return _collect(value, update_op, metrics_collections, updates_collections)


def mean_per_class_accuracy(labels, predictions, num_classes: int, weights=None, metrics_collections=None,
                            updates_collections=None, name=None):
    """The mean over all num_classes of each class's accuracy, a class never seen counting 0 (TF1's
    tf.metrics.mean_per_class_accuracy); update_op gives the per-class accuracies."""
    with variable_scope(name, "mean_accuracy"):
        labels = math_ops.cast(array_ops.reshape(convert_to_tensor(labels), [-1]), _dt.int32)
        predictions = math_ops.cast(array_ops.reshape(convert_to_tensor(predictions), [-1]), labels.dtype)
        ones = array_ops.ones_like(labels, _dt.float32)
        correct = math_ops.cast(math_ops.equal(labels, predictions), _dt.float32)
        if weights is not None:
            weights = math_ops.cast(array_ops.reshape(convert_to_tensor(weights), [-1]), _dt.float32)
            ones, correct = ones * weights, correct * weights
        total = _metric_variable([num_classes], _dt.float32, "total")
        count = _metric_variable([num_classes], _dt.float32, "count")
        update_total = total.assign_add(math_ops.unsorted_segment_sum(ones, labels, num_classes))
        update_count = count.assign_add(math_ops.unsorted_segment_sum(correct, labels, num_classes))
        value = math_ops.reduce_mean(math_ops.div_no_nan(count.read_value(), total.read_value()),
                                     name="mean_accuracy")
        update_op = math_ops.div_no_nan(update_count, update_total, name="update_op")
    return _collect(value, update_op, metrics_collections, updates_collections)


# -- Confusion counts at thresholds (TF1's _confusion_matrix_at_thresholds) and the metrics made of them --------
_AT_THRESHOLDS = {"tp": ("true_positives", True, True), "fn": ("false_negatives", True, False),
                  "tn": ("true_negatives", False, False), "fp": ("false_positives", False, True)}


def _confusion_at_thresholds(labels, predictions, thresholds, weights, includes):
    """({key: variable's value}, {key: its update}) for the keys of `includes` ('tp', 'fn', 'tn', 'fp'): the
    (weighted) counts of predictions above each threshold (or not) against labels true (or not), one float32
    variable of len(thresholds) each, named true_positives, false_negatives, ... NOTE: predictions outside
    [0, 1] are counted, not refused: TF1's range check is never attached to float32 predictions."""
    predictions = math_ops.cast(convert_to_tensor(predictions), _dt.float32)
    labels = math_ops.cast(convert_to_tensor(labels), _dt.bool_)
    predictions, labels = _squeeze_last(predictions, labels)
    # [examples, 1] against [1, thresholds]: each prediction above each threshold
    above = math_ops.greater(array_ops.reshape(predictions, [-1, 1]),
                             array_ops.constant([list(thresholds)], dtype=_dt.float32))
    flat_labels = array_ops.reshape(labels, [-1, 1])
    w = None if weights is None else array_ops.reshape(
        math_ops.cast(convert_to_tensor(weights), _dt.float32) * array_ops.ones_like(predictions), [-1, 1])
    values, updates = {}, {}
    for key in includes:
        var_name, label, pred = _AT_THRESHOLDS[key]
        var = _metric_variable([len(thresholds)], _dt.float32, var_name)
        hit = math_ops.cast(math_ops.logical_and(flat_labels if label else math_ops.logical_not(flat_labels),
                                                 above if pred else math_ops.logical_not(above)), _dt.float32)
        updates[key] = var.assign_add(math_ops.reduce_sum(hit if w is None else hit * w, axis=0))
        values[key] = var.read_value()
    return values, updates


def _count_at_thresholds(key: str):
    scope = _AT_THRESHOLDS[key][0]

    def metric(labels, predictions, thresholds, weights=None, metrics_collections=None, updates_collections=None,
               name=None):
        with variable_scope(name, scope):
            values, updates = _confusion_at_thresholds(labels, predictions, thresholds, weights, (key,))
        return _collect(values[key], updates[key], metrics_collections, updates_collections)
    metric.__name__ = f"{scope}_at_thresholds"
    metric.__doc__ = f"The (weighted) {scope.replace('_', ' ')} of predictions above each threshold, a vector " \
                     f"(TF1's tf.metrics.{scope}_at_thresholds)."
    return metric


true_positives_at_thresholds = _count_at_thresholds("tp")
false_positives_at_thresholds = _count_at_thresholds("fp")
false_negatives_at_thresholds = _count_at_thresholds("fn")
true_negatives_at_thresholds = _count_at_thresholds("tn")


def _ratio_at_thresholds(scope: str, other: str):
    def metric(labels, predictions, thresholds, weights=None, metrics_collections=None, updates_collections=None,
               name=None):
        with variable_scope(name, scope):
            values, updates = _confusion_at_thresholds(labels, predictions, thresholds, weights, ("tp", other))

            def ratio(c, op_name):  # TF1's: tp / (1e-7 + tp + other)
                return math_ops.truediv(c["tp"], 1e-7 + c["tp"] + c[other], name=op_name)
            value, update_op = ratio(values, "value"), ratio(updates, "update_op")
        return _collect(value, update_op, metrics_collections, updates_collections)
    metric.__name__ = scope
    metric.__doc__ = f"true positives / (true positives + {_AT_THRESHOLDS[other][0].replace('_', ' ')}) at each " \
                     f"threshold over the stream (TF1's tf.metrics.{scope})."
    return metric


precision_at_thresholds = _ratio_at_thresholds("precision_at_thresholds", "fp")
recall_at_thresholds = _ratio_at_thresholds("recall_at_thresholds", "fn")


def auc(labels, predictions, weights=None, num_thresholds: int = 200, metrics_collections=None,
        updates_collections=None, curve: str = "ROC", name=None, summation_method: str = "trapezoidal",
        thresholds=None):
    """The area under the ROC (or 'PR') curve, from confusion counts at `num_thresholds` thresholds spread over
    [0, 1] (TF1's tf.metrics.auc: predictions are probabilities; summation 'trapezoidal', 'minoring' or
    'majoring')."""
    if curve not in ("ROC", "PR"):
        raise ValueError(f"tf.metrics.auc: curve={curve!r}; give 'ROC' or 'PR'")
    if summation_method not in ("trapezoidal", "minoring", "majoring"):
        raise NotImplementedError(f"tf.metrics.auc: summation_method={summation_method!r} is not implemented in "
                                  "tfplus; use 'trapezoidal', 'minoring' or 'majoring'")
    epsilon = 1.0e-7
    if thresholds is None:
        if num_thresholds < 2:
            raise ValueError(f"tf.metrics.auc: num_thresholds={num_thresholds}; give 2 or more")
        inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        thresholds = [0.0 - epsilon] + inner + [1.0 + epsilon]  # TF1's: the ends catch predictions of 0 and 1
    else:
        thresholds = [0.0 - epsilon] + list(thresholds) + [1.0 + epsilon]
    n = len(thresholds)
    with variable_scope(name, "auc"):
        counts, updates = _confusion_at_thresholds(labels, predictions, thresholds, weights, ("tp", "fn", "tn", "fp"))

        def area(c, op_name):
            tp, fn, tn, fp = c["tp"], c["fn"], c["tn"], c["fp"]
            rec = (tp + epsilon) / (tp + fn + epsilon)
            if curve == "ROC":
                x, y = fp / (fp + tn + epsilon), rec
            else:
                x, y = rec, (tp + epsilon) / (tp + fp + epsilon)
            left, right = y[: n - 1], y[1:]
            height = (left + right) / 2.0 if summation_method == "trapezoidal" else \
                math_ops.minimum(left, right) if summation_method == "minoring" else math_ops.maximum(left, right)
            return math_ops.reduce_sum((x[: n - 1] - x[1:]) * height, name=op_name)
        value, update_op = area(counts, "value"), area(updates, "update_op")
    return _collect(value, update_op, metrics_collections, updates_collections)


# -- Retrieval at k: TF1's set arithmetic between each example's top k class ids and its label ids ---------------
def _at_k_name(name: str, k, class_id) -> str:
    name = f"{name}_at_{k}" if k is not None else f"{name}_at_k"
    return name if class_id is None else f"{name}_class{class_id}"


def _label_ids(labels, predictions_idx):
    """The label ids as int64 [..., num_labels]: a last axis of 1 added to labels of the predictions' rank less
    one (TF1's _maybe_expand_labels)."""
    if not isinstance(labels, Tensor) and hasattr(labels, "dense_shape"):
        raise NotImplementedError("tf.metrics at k: SparseTensor labels are not implemented in tfplus; give a "
                                  "dense int64 tensor [batch, num_labels] padded with -1")
    labels = math_ops.cast(convert_to_tensor(labels), _dt.int64)
    if labels.shape.ndims is not None and labels.shape.ndims == predictions_idx.shape.ndims - 1:
        labels = array_ops.expand_dims(labels, -1)
    return labels


def _first_occurrence(ids):
    """[..., n] booleans: no equal id earlier in its row (TF1's set ops count each distinct id once)."""
    n = ids.shape.as_list()[-1]
    if n is None:
        raise ValueError(f"tf.metrics at k: the last dimension of {ids.name} must be known")
    same = math_ops.equal(array_ops.expand_dims(ids, -1), array_ops.expand_dims(ids, -2))   # [..., n, n]
    earlier = array_ops.constant(np.tril(np.ones((n, n), bool), -1))
    return math_ops.logical_not(math_ops.reduce_any(math_ops.logical_and(same, earlier), axis=-1))


def _set_counts(labels, predictions_idx, class_id):
    """Per example, float64: the distinct predicted ids among the labels (tp), those not (fp), and the distinct
    label ids not predicted (fn); with class_id, only that id counts."""
    if class_id is not None:
        labelled = math_ops.reduce_any(math_ops.equal(labels, class_id), axis=-1)
        predicted = math_ops.reduce_any(math_ops.equal(predictions_idx, class_id), axis=-1)
        tp = math_ops.logical_and(labelled, predicted)
        fp = math_ops.logical_and(predicted, math_ops.logical_not(labelled))
        fn = math_ops.logical_and(labelled, math_ops.logical_not(predicted))
        return tuple(math_ops.cast(c, _dt.float64) for c in (tp, fp, fn))
    same = math_ops.equal(array_ops.expand_dims(predictions_idx, -1), array_ops.expand_dims(labels, -2))
    hit = math_ops.reduce_any(same, axis=-1)     # [..., k]: each prediction among the labels
    found = math_ops.reduce_any(same, axis=-2)   # [..., num_labels]: each label among the predictions
    first_p, first_l = _first_occurrence(predictions_idx), _first_occurrence(labels)

    def count(c):
        return math_ops.reduce_sum(math_ops.cast(c, _dt.float64), axis=-1)
    return (count(math_ops.logical_and(hit, first_p)), count(math_ops.logical_and(math_ops.logical_not(hit), first_p)),
            count(math_ops.logical_and(math_ops.logical_not(found), first_l)))


def _stream_sum(per_example, weights, name: str):
    """A float64 local variable `name` (in the metric's name scope) summing per_example, weighted; (it, update)."""
    if weights is not None:
        per_example = per_example * math_ops.cast(convert_to_tensor(weights), _dt.float64)
    var = _metric_variable([], _dt.float64, name)
    return var.read_value(), var.assign_add(math_ops.reduce_sum(per_example))


def _retrieval_at_k(kind: str):
    """precision (tp / (tp + fp)) or recall (tp / (tp + fn)) at k, from the top k ids or from the predictions."""
    other = "false_positive" if kind == "precision" else "false_negative"

    def from_ids(labels, predictions_idx, k, class_id, weights, metrics_collections, updates_collections):
        predictions_idx = math_ops.cast(convert_to_tensor(predictions_idx), _dt.int64)
        tp, fp, fn = _set_counts(_label_ids(labels, predictions_idx), predictions_idx, class_id)
        tp_var, tp_update = _stream_sum(tp, weights, _at_k_name("true_positive", k, class_id))
        o_var, o_update = _stream_sum(fp if kind == "precision" else fn, weights, _at_k_name(other, k, class_id))
        value = math_ops.truediv(tp_var, tp_var + o_var, name="value")   # NaN before any, as TF1's
        return _collect(value, math_ops.truediv(tp_update, tp_update + o_update, name="update"),
                        metrics_collections, updates_collections)

    def at_top_k(labels, predictions_idx, k=None, class_id=None, weights=None, metrics_collections=None,
                 updates_collections=None, name=None):
        with name_scope(name, _at_k_name(kind, k, class_id)):
            return from_ids(labels, predictions_idx, k, class_id, weights, metrics_collections, updates_collections)

    def at_k(labels, predictions, k, class_id=None, weights=None, metrics_collections=None,
             updates_collections=None, name=None):
        with name_scope(name, _at_k_name(kind, k, class_id)):
            _, top = math_ops.top_k(convert_to_tensor(predictions), k)
            return from_ids(labels, top, k, class_id, weights, metrics_collections, updates_collections)
    what = f"The streamed {kind}, true positives / (true positives + {other}s), between"
    at_k.__name__ = f"{kind}_at_k"
    at_k.__doc__ = f"{what} the k largest predictions' class ids and the label ids (TF1's tf.metrics.{kind}_at_k)."
    at_top_k.__name__ = f"{kind}_at_top_k"
    at_top_k.__doc__ = f"{what} given top-k class ids and the label ids (TF1's tf.metrics.{kind}_at_top_k)."
    return at_k, at_top_k


precision_at_k, precision_at_top_k = _retrieval_at_k("precision")
recall_at_k, recall_at_top_k = _retrieval_at_k("recall")
sparse_precision_at_k = precision_at_k   # TF1's earlier name


def average_precision_at_k(labels, predictions, k: int, weights=None, metrics_collections=None,
                           updates_collections=None, name=None):
    """The streamed mean over examples of the average precision of the k largest predictions: the precisions at
    each relevant rank summed over min(k, the example's label count); labels outside [0, num_classes) are none
    (TF1's tf.metrics.average_precision_at_k)."""
    if k < 1:
        raise ValueError(f"tf.metrics.average_precision_at_k: k={k}; give k >= 1")
    with name_scope(name, _at_k_name("average_precision", k, None)):
        predictions = convert_to_tensor(predictions)
        _, top = math_ops.top_k(predictions, k)
        top = math_ops.cast(top, _dt.int64)
        labels = _label_ids(labels, top)
        num_classes = math_ops.cast(array_ops.shape(predictions)[-1], _dt.int64)
        labels = math_ops.where(labels >= num_classes, -array_ops.ones_like(labels), labels)
        relevant = math_ops.cast(math_ops.reduce_any(math_ops.equal(array_ops.expand_dims(top, -1),
                                                                    array_ops.expand_dims(labels, -2)), axis=-1),
                                 _dt.float64)
        precision_per_k = math_ops.cumsum(relevant, axis=-1) / math_ops.cumsum(array_ops.ones_like(relevant), axis=-1)
        num_relevant = math_ops.minimum(math_ops.reduce_sum(math_ops.cast(labels >= 0, _dt.float64), axis=-1),
                                        float(k))
        ap = math_ops.reduce_sum(precision_per_k * relevant, axis=-1) / num_relevant
        if weights is None:
            count = math_ops.cast(array_ops.size(ap), _dt.float64)
        else:
            weights = math_ops.cast(convert_to_tensor(weights), _dt.float64) * array_ops.ones_like(ap)
            ap, count = ap * weights, math_ops.reduce_sum(weights)
        max_var = _metric_variable([], _dt.float64, "max")
        total_var = _metric_variable([], _dt.float64, "total")
        max_update, total_update = max_var.assign_add(count), total_var.assign_add(math_ops.reduce_sum(ap))
        value = math_ops.div_no_nan(total_var.read_value(), max_var.read_value(), name="mean")
        update_op = math_ops.div_no_nan(total_update, max_update, name="update")
    return _collect(value, update_op, metrics_collections, updates_collections)


sparse_average_precision_at_k = average_precision_at_k   # TF1's earlier name


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.metrics")  # TF1's other metrics: UnsupportedError, not AttributeError
