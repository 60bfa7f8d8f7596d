"""The TF1 scripts of tests/zoo2.py (BERT, GPT-2, GCN, PINN, MAML, speech with CTC, tf.distributions, PPO,
factorization machines, NCF, detection and segmentation) run with `import tfplus as tf` as with TensorFlow's
tf.compat.v1: the same losses, weights and outputs, with the same initial values and random numbers; and the API
pieces they brought in, checked against TensorFlow beyond the scripts' cases."""
import numpy as np
import pytest
from tutorials import check_against_tensorflow
from zoo2 import SCRIPTS, run_script

import tfplus

_COMPARED = sorted(SCRIPTS)


@pytest.mark.parametrize("name", _COMPARED)
def test_zoo2_script_runs_as_in_tensorflow(tf1, name):
    check_against_tensorflow(tf1, run_script, name)


def _lookup(mod, sizes, strategy, ids, max_norm=None):
    with mod.Graph().as_default():
        parts = [mod.constant(np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 10 * i) for i, n in enumerate(sizes)]
        with mod.Session() as sess:
            return sess.run(mod.nn.embedding_lookup(parts, mod.constant(ids), partition_strategy=strategy,
                                                    max_norm=max_norm))


@pytest.mark.parametrize("sizes", [(3, 3, 2), (2, 2, 2), (3, 2)])
@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_partitioned_embedding_lookup_as_tensorflow(tf1, sizes, strategy):
    """Every row of a table split in partitions of uneven sizes (as tf.fixed_size_partitioner splits one), by
    both strategies, and max_norm's clipping."""
    ids = np.arange(sum(sizes), dtype=np.int32)[::-1].reshape(-1, 2 if sum(sizes) % 2 == 0 else 1)
    np.testing.assert_allclose(_lookup(tfplus, sizes, strategy, ids), _lookup(tf1, sizes, strategy, ids))
    np.testing.assert_allclose(_lookup(tfplus, sizes, strategy, ids, 5.0), _lookup(tf1, sizes, strategy, ids, 5.0),
                               rtol=1e-6)


def _class_metrics(mod):
    labels = mod.placeholder(mod.int64, [None, 2])
    preds = mod.placeholder(mod.int32, [None, 2])
    weights = mod.placeholder(mod.float32, [None, 2])
    metrics = [mod.metrics.mean_iou(labels, preds, 4), mod.metrics.mean_iou(labels, preds, 4, weights=weights),
               mod.metrics.mean_per_class_accuracy(labels, preds, 4),
               mod.metrics.mean_per_class_accuracy(labels, preds, 4, weights=weights)]
    batches = [([[0, 1], [1, 2]], [[0, 2], [1, 2]], [[1.0, 0.5], [2.0, 0.0]]),
               ([[2, 2], [0, 0]], [[2, 1], [3, 0]], [[1.0, 1.0], [0.0, 3.0]])]
    out = []
    with mod.Session() as sess:
        sess.run(mod.local_variables_initializer())
        out.append(sess.run([v for v, _ in metrics]))                    # nothing seen yet
        for lab, pre, w in batches:
            out.append(sess.run([u for _, u in metrics], {labels: lab, preds: pre, weights: w}))
            out.append(sess.run([v for v, _ in metrics]))
    return out


def test_mean_iou_and_mean_per_class_accuracy_as_tensorflow(tf1):
    """Streamed over two batches, with and without weights, class 3 predicted but never a label: the values and
    the update ops' results (a confusion matrix, per-class accuracies) are TensorFlow's."""
    with tf1.Graph().as_default():
        want = _class_metrics(tf1)
    with tfplus.Graph().as_default():
        got = _class_metrics(tfplus)
    for w, g in zip(want, got):
        for a, b in zip(w, g):
            np.testing.assert_allclose(b, a, rtol=1e-6)
