"""tf.metrics against TensorFlow's tf.compat.v1.metrics: the same streams of batches through the same calls give the
same values after each update, the same local variables and collections; local_variables_initializer restarts a
stream."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf

RNG = np.random.default_rng(40)
# three batches of labels in {0, 1}, probabilities, class predictions and weights (zeros among them)
BATCHES = [(RNG.integers(0, 2, 7), RNG.random(7).astype(np.float32), RNG.integers(0, 2, 7),
            RNG.integers(0, 3, 7).astype(np.float32)) for _ in range(3)]

# name -> metric(lib, labels, probabilities, predictions, weights): the same call in both libraries
METRICS = {
    "accuracy": lambda t, y, p, c, w: t.metrics.accuracy(y, c),
    "accuracy_weighted": lambda t, y, p, c, w: t.metrics.accuracy(y, c, weights=w),
    "mean": lambda t, y, p, c, w: t.metrics.mean(p),
    "mean_weighted": lambda t, y, p, c, w: t.metrics.mean(p, weights=w),
    "precision": lambda t, y, p, c, w: t.metrics.precision(y, c),
    "recall_weighted": lambda t, y, p, c, w: t.metrics.recall(y, c, weights=w),
    "auc": lambda t, y, p, c, w: t.metrics.auc(y, p),
    "auc_pr_weighted": lambda t, y, p, c, w: t.metrics.auc(y, p, weights=w, curve="PR", num_thresholds=50),
    "auc_minoring": lambda t, y, p, c, w: t.metrics.auc(y, p, summation_method="minoring", num_thresholds=20),
    "true_negatives": lambda t, y, p, c, w: t.metrics.true_negatives(y, c),
}


def _stream(t, metric):
    """The metric's value after each batch's update (and its update_op's result), then after a restart."""
    with t.Graph().as_default():
        y, c = t.placeholder(t.int64, [None]), t.placeholder(t.int64, [None])
        p, w = t.placeholder(t.float32, [None]), t.placeholder(t.float32, [None])
        value, update = metric(t, y, p, c, w)
        names = sorted(v.op.name for v in t.local_variables())
        metric_vars = sorted(v.op.name for v in t.get_collection(t.GraphKeys.METRIC_VARIABLES))
        seen = []
        with t.Session() as sess:
            for restart in range(2):
                sess.run(t.local_variables_initializer())
                seen.append(sess.run(value))
                for batch in BATCHES[restart:]:
                    seen.append(sess.run(update, dict(zip((y, p, c, w), batch))))
                    seen.append(sess.run(value))
        return names, metric_vars, np.array(seen, np.float64)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metric_streams_match_tensorflow(tf1, name):
    names, metric_vars, got = _stream(tf, METRICS[name])
    want_names, want_metric_vars, want = _stream(tf1, METRICS[name])
    assert names == want_names and metric_vars == want_metric_vars == names
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_metric_collections_and_scopes(tf1):
    """metrics_collections / updates_collections, a second metric's scope, and nothing trainable or global."""
    def build(t):
        with t.Graph().as_default() as g:
            x = t.placeholder(t.float32, [None])
            a = t.metrics.mean(x, metrics_collections=["vals"], updates_collections=["ups"])
            b = t.metrics.mean(x, name="second")
            t.metrics.mean(x)
            return ([v.name for v in g.get_collection("vals") + g.get_collection("ups")],
                    [v.name for v in a + b], sorted(v.op.name for v in t.local_variables()),
                    t.global_variables(), t.trainable_variables())
    assert build(tf) == build(tf1)
