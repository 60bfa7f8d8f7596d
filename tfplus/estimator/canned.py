"""Canned estimators over numeric feature columns (TF1's v1 heads): LinearRegressor, LinearClassifier,
DNNRegressor, DNNClassifier.

    columns = [tf.feature_column.numeric_column("x", shape=[4])]
    est = tf.estimator.DNNClassifier(hidden_units=[16, 8], feature_columns=columns, n_classes=3, model_dir="run")
    est.train(input_fn, steps=100)

As TensorFlow's: variables named dnn/hiddenlayer_<i>/kernel, dnn/logits/..., linear/linear_model/<key>/weights
and linear/linear_model/bias_weights; the training loss is the batch's summed loss (Reduction.SUM), evaluate
reports it ("loss", the mean over batches) and the per-example "average_loss" with the head's metrics.
Predictions hold no "classes" / "all_classes" (class names are strings, which tfplus lacks): "class_ids" and
"all_class_ids" are the same classes as numbers. Exports have TensorFlow's signatures: "serving_default" and
"regression" / "classification" take serialized tf.Examples (so a placeholder receiver leaves them out, as in
TensorFlow), "predict" takes the receiver's tensors.
"""
from __future__ import annotations

from tfplus import dtypes
from tfplus.estimator.estimator import Estimator, EstimatorSpec, ModeKeys
from tfplus.estimator.export import ClassificationOutput, PredictOutput, RegressionOutput
from tfplus.estimator.feature_column import _dense, input_layer
from tfplus.saved_model import constants

_DNN_LEARNING_RATE = 0.05  # TF1's canned DNN default (Adagrad)
_LINEAR_LEARNING_RATE = 0.2


def _optimizer(opt, learning_rate: float, what: str):
    """An optimizer instance from TF's forms: an instance, a callable returning one, or a name."""
    from tfplus.train import optimizer as opts
    if isinstance(opt, opts.Optimizer):
        return opt
    if isinstance(opt, str):
        by_name = {"Adagrad": opts.AdagradOptimizer, "Adam": opts.AdamOptimizer, "RMSProp": opts.RMSPropOptimizer,
                   "SGD": opts.GradientDescentOptimizer}
        if opt not in by_name:
            raise ValueError(f"{what}: optimizer {opt!r} is not one tfplus has by name ({sorted(by_name)}; no Ftrl): "
                             "pass an optimizer instance, e.g. optimizer=tf.train.GradientDescentOptimizer(0.1)")
        return by_name[opt](learning_rate)
    if callable(opt):
        return _optimizer(opt(), learning_rate, what)
    raise ValueError(f"{what}: optimizer must be an Optimizer, a callable returning one, or a name; got {opt!r}")


def _check_columns(feature_columns, what: str) -> list:
    columns = list(feature_columns or ())
    if not columns:
        raise ValueError(f"{what}: feature_columns must be given (e.g. [tf.feature_column.numeric_column('x')])")
    return columns


def _dnn_logits(features, columns, hidden_units, units, activation_fn, dropout, batch_norm, mode):
    from tfplus import layers
    from tfplus.init_ops import glorot_uniform_initializer
    from tfplus.variables import variable_scope
    if batch_norm:
        raise NotImplementedError("DNN estimators: batch_norm=True is not implemented in tfplus; write a model_fn "
                                  "with tf.layers.batch_normalization instead")
    with variable_scope("dnn"):
        with variable_scope("input_from_feature_columns"):
            net = input_layer(features, columns)
        for i, n in enumerate(hidden_units):
            net = layers.dense(net, n, activation=activation_fn, kernel_initializer=glorot_uniform_initializer(),
                               name=f"hiddenlayer_{i}")
            if dropout is not None and mode == ModeKeys.TRAIN:
                net = layers.dropout(net, rate=dropout, training=True)
        return layers.dense(net, units, kernel_initializer=glorot_uniform_initializer(), name="logits")


def _linear_logits(features, columns, units):
    from tfplus.init_ops import zeros_initializer
    from tfplus.ops.math_ops import add_n, matmul
    from tfplus.variables import get_variable, variable_scope
    with variable_scope("linear"), variable_scope("linear_model"):
        terms = []
        for column in sorted(columns, key=lambda c: c.name):
            x = _dense(features, column)
            with variable_scope(column.name):
                w = get_variable("weights", [x.shape.dims_tuple[1], units], initializer=zeros_initializer())
            terms.append(matmul(x, w))
        bias = get_variable("bias_weights", [units], initializer=zeros_initializer())
        return add_n(terms) + bias if len(terms) > 1 else terms[0] + bias


def _regression_head(label_dimension: int):
    def head(logits, labels, mode):
        from tfplus import metrics
        from tfplus.ops.array_ops import reshape
        from tfplus.ops.math_ops import cast, reduce_sum, squared_difference
        predictions = {"predictions": logits}
        if mode == ModeKeys.PREDICT:
            regression = RegressionOutput(logits)
            return predictions, None, None, {constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY: regression,
                                             "regression": regression, "predict": PredictOutput(predictions)}
        labels = reshape(cast(labels, dtypes.float32), [-1, label_dimension])
        unreduced = squared_difference(logits, labels)
        eval_ops = {"average_loss": metrics.mean(unreduced), "label/mean": metrics.mean(labels),
                    "prediction/mean": metrics.mean(logits)}
        return predictions, reduce_sum(unreduced), eval_ops, None
    return head, label_dimension


def _classification_head(n_classes: int):
    if n_classes < 2:
        raise ValueError(f"n_classes must be > 1 for classification: {n_classes}.")

    def head(logits, labels, mode):
        from tfplus import metrics, nn
        from tfplus.nn import sigmoid
        from tfplus.ops.array_ops import concat, expand_dims, reshape, tile, zeros_like
        from tfplus.ops.array_ops import shape as shape_of
        from tfplus.ops.math_ops import argmax, cast, reduce_sum
        from tfplus.ops.math_ops import range as range_
        if n_classes == 2:
            logistic = sigmoid(logits)
            two = concat([zeros_like(logits), logits], 1)  # TF's two-class logits: class 1 where logit > 0
            probabilities = concat([1.0 - logistic, logistic], 1)
            predictions = {"logits": logits, "logistic": logistic, "probabilities": probabilities}
        else:
            two, probabilities = logits, nn.softmax(logits)
            predictions = {"logits": logits, "probabilities": probabilities}
        class_ids = expand_dims(argmax(two, 1), 1)
        predictions["class_ids"] = class_ids
        predictions["all_class_ids"] = tile(expand_dims(range_(n_classes), 0), [shape_of(logits)[0], 1])
        if mode == ModeKeys.PREDICT:
            classification = ClassificationOutput(scores=probabilities)
            return predictions, None, None, {constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY: classification,
                                             "classification": classification, "predict": PredictOutput(predictions)}
        labels = reshape(cast(labels, dtypes.int64), [-1, 1])
        if n_classes == 2:
            float_labels = cast(labels, dtypes.float32)
            unreduced = nn.sigmoid_cross_entropy_with_logits(labels=float_labels, logits=logits)
            label_mean = metrics.mean(float_labels)
            eval_ops = {"accuracy": metrics.accuracy(labels, class_ids), "average_loss": metrics.mean(unreduced),
                        "label/mean": label_mean, "prediction/mean": metrics.mean(logistic),
                        "accuracy_baseline": _accuracy_baseline(label_mean),
                        "auc": metrics.auc(labels, logistic), "auc_precision_recall": metrics.auc(
                            labels, logistic, curve="PR"),
                        "precision": metrics.precision(labels, class_ids), "recall": metrics.recall(labels, class_ids)}
        else:
            unreduced = expand_dims(nn.sparse_softmax_cross_entropy_with_logits(labels=reshape(labels, [-1]),
                                                                                logits=logits), 1)
            eval_ops = {"accuracy": metrics.accuracy(labels, class_ids), "average_loss": metrics.mean(unreduced)}
        return predictions, reduce_sum(unreduced), eval_ops, None
    return head, 1 if n_classes == 2 else n_classes


def _accuracy_baseline(label_mean):
    """max(mean label, 1 - mean label): the accuracy of always guessing the commoner class."""
    from tfplus.ops.math_ops import maximum
    value, update = label_mean
    return maximum(value, 1.0 - value), update


def _model_fn(logits_fn, head, optimizer, what: str):
    head_fn, _ = head

    def model_fn(features, labels, mode, config):
        from tfplus.train.training_util import get_global_step
        if not isinstance(features, dict):
            raise ValueError(f"{what}: the features must be a dict {{column key: tensor}} (numpy_input_fn with a "
                             "dict x, or a dataset of dicts)")
        logits = logits_fn(features, mode)
        predictions, loss, eval_ops, export = head_fn(logits, labels, mode)
        if mode == ModeKeys.PREDICT:
            return EstimatorSpec(mode, predictions=predictions, export_outputs=export)
        train_op = None
        if mode == ModeKeys.TRAIN:
            train_op = optimizer().minimize(loss, global_step=get_global_step())
        return EstimatorSpec(mode, predictions=predictions, loss=loss, train_op=train_op, eval_metric_ops=eval_ops)
    return model_fn


def _refuse(what: str, **args) -> None:
    for name, value in args.items():
        if value is not None:
            raise NotImplementedError(f"{what}({name}=...): tfplus does not implement it; leave it unset (or write "
                                      "a model_fn)")


class DNNRegressor(Estimator):
    """A fully connected network (hidden_units, ReLU by default) over the feature columns, predicting
    label_dimension numbers; squared error; Adagrad(0.05) by default."""

    def __init__(self, hidden_units, feature_columns, model_dir=None, label_dimension: int = 1, weight_column=None,
                 optimizer="Adagrad", activation_fn=None, dropout=None, input_layer_partitioner=None, config=None,
                 warm_start_from=None, loss_reduction=None, batch_norm: bool = False):
        from tfplus.nn import relu
        _refuse("DNNRegressor", weight_column=weight_column, input_layer_partitioner=input_layer_partitioner,
                loss_reduction=loss_reduction)
        columns, head = _check_columns(feature_columns, "DNNRegressor"), _regression_head(label_dimension)
        fn = _model_fn(lambda f, mode: _dnn_logits(f, columns, hidden_units, head[1], activation_fn or relu, dropout,
                                                   batch_norm, mode),
                       head, lambda: _optimizer(optimizer, _DNN_LEARNING_RATE, "DNNRegressor"), "DNNRegressor")
        super().__init__(fn, model_dir, config, warm_start_from=warm_start_from)


class DNNClassifier(Estimator):
    """A fully connected network over the feature columns classifying into n_classes (a sigmoid for 2, a
    softmax above); Adagrad(0.05) by default."""

    def __init__(self, hidden_units, feature_columns, model_dir=None, n_classes: int = 2, weight_column=None,
                 label_vocabulary=None, optimizer="Adagrad", activation_fn=None, dropout=None,
                 input_layer_partitioner=None, config=None, warm_start_from=None, loss_reduction=None,
                 batch_norm: bool = False):
        from tfplus.nn import relu
        _refuse("DNNClassifier", weight_column=weight_column, label_vocabulary=label_vocabulary,
                input_layer_partitioner=input_layer_partitioner, loss_reduction=loss_reduction)
        columns, head = _check_columns(feature_columns, "DNNClassifier"), _classification_head(n_classes)
        fn = _model_fn(lambda f, mode: _dnn_logits(f, columns, hidden_units, head[1], activation_fn or relu, dropout,
                                                   batch_norm, mode),
                       head, lambda: _optimizer(optimizer, _DNN_LEARNING_RATE, "DNNClassifier"), "DNNClassifier")
        super().__init__(fn, model_dir, config, warm_start_from=warm_start_from)


def _linear_optimizer(optimizer, columns, what: str):
    if optimizer == "Ftrl":  # TF's default: tfplus has no Ftrl
        raise NotImplementedError(f"{what}: the default optimizer, Ftrl, is not implemented in tfplus; pass one, "
                                  "e.g. optimizer=tf.train.GradientDescentOptimizer(0.1) or 'Adagrad'")
    return lambda: _optimizer(optimizer, _LINEAR_LEARNING_RATE, what)


class LinearRegressor(Estimator):
    """A linear model of the feature columns (weights and bias start at zero); squared error. Give an optimizer:
    TF's default, Ftrl, is not implemented."""

    def __init__(self, feature_columns, model_dir=None, label_dimension: int = 1, weight_column=None,
                 optimizer="Ftrl", config=None, partitioner=None, warm_start_from=None, loss_reduction=None,
                 sparse_combiner: str = "sum"):
        _refuse("LinearRegressor", weight_column=weight_column, partitioner=partitioner,
                loss_reduction=loss_reduction)
        columns, head = _check_columns(feature_columns, "LinearRegressor"), _regression_head(label_dimension)
        fn = _model_fn(lambda f, mode: _linear_logits(f, columns, head[1]), head,
                       _linear_optimizer(optimizer, columns, "LinearRegressor"), "LinearRegressor")
        super().__init__(fn, model_dir, config, warm_start_from=warm_start_from)


class LinearClassifier(Estimator):
    """A linear model of the feature columns classifying into n_classes (logistic regression for 2). Give an
    optimizer: TF's default, Ftrl, is not implemented."""

    def __init__(self, feature_columns, model_dir=None, n_classes: int = 2, weight_column=None,
                 label_vocabulary=None, optimizer="Ftrl", config=None, partitioner=None, warm_start_from=None,
                 loss_reduction=None, sparse_combiner: str = "sum"):
        _refuse("LinearClassifier", weight_column=weight_column, label_vocabulary=label_vocabulary,
                partitioner=partitioner, loss_reduction=loss_reduction)
        columns, head = _check_columns(feature_columns, "LinearClassifier"), _classification_head(n_classes)
        fn = _model_fn(lambda f, mode: _linear_logits(f, columns, head[1]), head,
                       _linear_optimizer(optimizer, columns, "LinearClassifier"), "LinearClassifier")
        super().__init__(fn, model_dir, config, warm_start_from=warm_start_from)


__all__ = ["DNNRegressor", "DNNClassifier", "LinearRegressor", "LinearClassifier"]
