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

from tfplus import dtypes as _dt
from tfplus.framework import GraphKeys, add_to_collection, convert_to_tensor, get_default_graph
from tfplus.ops import array_ops, math_ops, special_math_ops
from tfplus.variables import Variable, variable_scope

__all__ = ["accuracy", "mean", "precision", "recall", "auc", "true_positives", "false_positives",
           "false_negatives", "true_negatives", "mean_iou", "mean_per_class_accuracy"]

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
        labels = math_ops.cast(convert_to_tensor(labels), _dt.bool_)
        predictions = math_ops.cast(convert_to_tensor(predictions), _dt.float32)
        predictions, labels = _squeeze_last(predictions, labels)
        # [batch, 1] against [1, thresholds]: each example's prediction above each threshold
        flat_p = array_ops.reshape(predictions, [-1, 1])
        flat_l = array_ops.reshape(labels, [-1, 1])
        above = math_ops.greater(flat_p, array_ops.constant([thresholds], dtype=_dt.float32))
        w = array_ops.ones_like(math_ops.cast(flat_p, _dt.float32)) if weights is None else \
            array_ops.reshape(math_ops.cast(convert_to_tensor(weights), _dt.float32) * array_ops.ones_like(predictions),
                              [-1, 1])
        counts, updates = {}, {}
        for key, label, pred in (("true_positives", True, True), ("false_negatives", True, False),
                                 ("true_negatives", False, False), ("false_positives", False, True)):
            var = _metric_variable([n], _dt.float32, key)
            hit = math_ops.logical_and(flat_l if label else math_ops.logical_not(flat_l),
                                       above if pred else math_ops.logical_not(above))
            updates[key] = var.assign_add(math_ops.reduce_sum(math_ops.cast(hit, _dt.float32) * w, axis=0))
            counts[key] = var.read_value()

        def area(c, op_name):
            tp, fn, tn, fp = c["true_positives"], c["false_negatives"], c["true_negatives"], c["false_positives"]
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


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.metrics")  # TF1's other metrics: UnsupportedError, not AttributeError
