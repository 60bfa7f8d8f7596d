"""Losses normalized by a batch-wide quantity under micro-batches: every tf.losses function under every reduction,
with a scalar weight and with weights fed per example (some zero), a sequence loss masked by
tf.sequence_mask(lengths) and divided by the mask's sum, and TensorFlow's own tf.losses training graph imported
from its MetaGraph. Split into micro-batches by a memory budget (planner.plan's force), on the cpu worker processes
and unsplit, each trains to the same losses and weights: a divisor of the fed tensors alone is computed for the
whole batch before the micro-batches (planner.crossbatch.fed_only)."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import tfplus as tf
from tfplus import planner
from tfplus.runtime.facts import device_facts

BATCH = 16
STEPS = 2
TOL = 2e-5
REDUCTIONS = ["SUM", "MEAN", "SUM_OVER_BATCH_SIZE", "SUM_BY_NONZERO_WEIGHTS"]


def _losses(rng, per_example: bool, reduction: str):
    """A dense model's every tf.losses loss (reduction `reduction`, a scalar weight of 0.7 or the fed per-example
    `weights`), their sum trained by momentum; (graph, fetches, feeds, init)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        target = tf.placeholder(tf.float32, [None, 4], name="target")
        w = tf.placeholder(tf.float32, [None], name="weights")
        w1 = tf.Variable((rng.standard_normal((6, 4)) / 3).astype(np.float32))
        logits = tf.matmul(x, w1)
        onehot = tf.one_hot(y, 4)
        prob = tf.nn.sigmoid(logits)
        how = getattr(tf.losses.Reduction, reduction)
        row, col = (w, tf.expand_dims(w, 1)) if per_example else (0.7, 0.7)
        unit = tf.nn.l2_normalize(logits, 1)
        losses = [
            tf.losses.absolute_difference(target, logits, col, reduction=how),
            tf.losses.cosine_distance(tf.nn.l2_normalize(target, 1), unit, axis=1, weights=col, reduction=how),
            tf.losses.hinge_loss(onehot, logits, col, reduction=how),
            tf.losses.huber_loss(target, logits, col, delta=0.5, reduction=how),
            tf.losses.log_loss(onehot, prob, col, reduction=how),
            tf.losses.mean_squared_error(target, logits, col, reduction=how),
            tf.losses.sigmoid_cross_entropy(onehot, logits, col, label_smoothing=0.1, reduction=how),
            tf.losses.softmax_cross_entropy(onehot, logits, row, label_smoothing=0.2, reduction=how),
            tf.losses.sparse_softmax_cross_entropy(y, logits, row, reduction=how),
        ]
        rate = 0.005 if reduction == "SUM" else 0.05  # a sum over the batch has 16 times a mean's gradients
        train = tf.train.MomentumOptimizer(rate, 0.9).minimize(tf.add_n(losses))
        init = tf.global_variables_initializer()
    feeds = {x: rng.standard_normal((BATCH, 6)).astype(np.float32), y: rng.integers(0, 4, BATCH).astype(np.int32),
             target: rng.standard_normal((BATCH, 4)).astype(np.float32),
             w: (rng.random(BATCH) * (rng.random(BATCH) > 0.3)).astype(np.float32)}
    return g, [train, *losses], feeds, init


def _masked_sequence(rng):
    """A GRU over padded sequences, its per-step losses masked by tf.sequence_mask(lengths) and divided by the
    mask's sum (the number of real steps in the batch), as every sequence model's loss is."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 5, 3], name="x")
        y = tf.placeholder(tf.int32, [None, 5], name="y")
        lengths = tf.placeholder(tf.int32, [None], name="lengths")
        w1 = tf.Variable((rng.standard_normal((3, 4)) / 2).astype(np.float32))
        h = tf.nn.tanh(tf.tensordot(x, w1, 1))
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h)
        mask = tf.sequence_mask(lengths, 5, dtype=tf.float32)
        loss = tf.reduce_sum(xent * mask) / tf.reduce_sum(mask)
        train = tf.train.AdamOptimizer(0.05).minimize(loss)
        init = tf.global_variables_initializer()
    feeds = {x: rng.standard_normal((BATCH, 5, 3)).astype(np.float32),
             y: rng.integers(0, 4, (BATCH, 5)).astype(np.int32),
             lengths: rng.integers(1, 6, BATCH).astype(np.int32)}
    return g, [train, loss], feeds, init


def _train(case, device="cpu", force=None, workers=None):
    """Losses of STEPS steps and the variables after them; the plan when `force`d to (micro-batches, 1)."""
    g, fetches, feeds, init = case
    gc.collect()
    with tf.Session(graph=g, device=device, memory_budget="1GB" if force else None, workers=workers) as sess:
        sess.run(init)
        p = None
        if force:
            step = sess.step(fetches, feeds)
            p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), None, graph=step.graph,
                             force=force)
            step.use_plan(p)
        losses = [sess.run(fetches, feeds)[1:] for _ in range(STEPS)]
        variables = [sess.run(v) for v in g.get_collection("variables")]
        why = sess.workers.steps if sess.workers is not None else None
    return losses, variables, p, why


def _assert_same(got, want, what):
    np.testing.assert_allclose(np.array(got[0]), np.array(want[0]), rtol=TOL, atol=TOL / 10, err_msg=f"{what}: loss")
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL / 10, err_msg=f"{what}: weights")


@pytest.mark.parametrize("per_example", [False, True], ids=["scalar_weight", "weights_per_example"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_every_tf_losses_function_micro_batches_as_the_unbudgeted_step(reduction, per_example):
    want = _train(_losses(np.random.default_rng(1), per_example, reduction))
    assert sum(want[0][-1]) < sum(want[0][0]), "the losses did not train"
    got = _train(_losses(np.random.default_rng(1), per_example, reduction), force=(4, 1))
    assert got[2].microbatches == 4
    _assert_same(got, want, f"{reduction}, {'per-example' if per_example else 'scalar'} weights, 4 micro-batches")


@pytest.mark.parametrize("reduction", ["MEAN", "SUM_BY_NONZERO_WEIGHTS"])
def test_weights_per_example_micro_batch_on_every_device(device, reduction):
    want = _train(_losses(np.random.default_rng(2), True, reduction), device)
    got = _train(_losses(np.random.default_rng(2), True, reduction), device, force=(2, 1))
    assert got[2].microbatches == 2
    _assert_same(got, want, f"{reduction} on {device}")


def test_a_masked_sequence_loss_micro_batches_as_the_unbudgeted_step(device):
    want = _train(_masked_sequence(np.random.default_rng(3)), device)
    got = _train(_masked_sequence(np.random.default_rng(3)), device, force=(4, 1))
    assert got[2].microbatches == 4
    _assert_same(got, want, f"masked sequence loss on {device}")


def test_the_cpu_workers_train_a_weighted_mean_as_one_process(monkeypatch):
    """Two worker processes (TFPLUS_WORKERS=2) and the default count train as one process; the step the workers
    cannot split exactly (its divisor is the whole batch's) runs whole in the parent, saying why."""
    want = _train(_losses(np.random.default_rng(4), True, "MEAN"), workers=1)
    for count in ("2", None):
        if count is None:
            monkeypatch.delenv("TFPLUS_WORKERS", raising=False)
        else:
            monkeypatch.setenv("TFPLUS_WORKERS", count)
        got = _train(_losses(np.random.default_rng(4), True, "MEAN"))
        _assert_same(got, want, f"TFPLUS_WORKERS={count}")
        assert got[3] is None or any("sums" in why for why in got[3].values() if isinstance(why, str)), got[3]
    assert got[3] is not None or (os.cpu_count() or 1) == 1, "no workers by default"


@pytest.mark.parametrize("form", ["over_the_batch_size", "summed_after_a_reshape_by_the_count"])
def test_a_loss_with_the_batch_size_micro_batches_as_the_unbudgeted_step(form):
    """reduce_sum(losses / batch size): each micro-batch's is its own rows' mean, which averages to the batch's (it
    was taken for a sum and scaled by the micro-batch count: 4 times the loss and gradients). A count that only
    shapes the rows (tf.reshape(h, [n, -1])) leaves a reduce_sum loss a sum, scaled."""
    def case():
        rng = np.random.default_rng(5)
        g = tf.Graph()
        with g.as_default():
            x, y = tf.placeholder(tf.float32, [None, 6], name="x"), tf.placeholder(tf.int32, [None], name="y")
            n = tf.shape(x)[0]
            h = tf.reshape(tf.expand_dims(x, 2), [n, -1])
            xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=tf.matmul(h, tf.Variable((rng.standard_normal((6, 3)) / 3).astype(np.float32))))
            loss = tf.reduce_sum(xent / tf.cast(n, tf.float32)) if form == "over_the_batch_size" else \
                tf.reduce_sum(xent) / BATCH
            train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
            init = tf.global_variables_initializer()
        return g, [train, loss], {x: rng.standard_normal((BATCH, 6)).astype(np.float32),
                                  y: rng.integers(0, 3, BATCH).astype(np.int32)}, init
    _assert_same(_train(case(), force=(4, 1)), _train(case()), form)


def _tf_losses_graph(t, folder: str, reduction: str) -> str:
    """TensorFlow's (`t`: tensorflow.compat.v1) tf.losses training graph with per-example weights, a cross-entropy
    reduced by `reduction` and a weighted mean squared error, saved with its MetaGraph; the checkpoint's path."""
    with t.Graph().as_default():
        x = t.placeholder(t.float32, [None, 6], name="x")
        y = t.placeholder(t.int32, [None], name="y")
        w = t.placeholder(t.float32, [None], name="weights")
        logits = t.layers.dense(x, 4, kernel_initializer=t.glorot_uniform_initializer(seed=1))
        if reduction.startswith("pairwise"):  # its sum over the examples, guarded by a comparison of their count with 0
            loss = t.losses.mean_pairwise_squared_error(t.one_hot(y, 4), logits, weights=t.expand_dims(w, 1)
                                                        if reduction == "pairwise-weights" else 1.0)
        else:
            loss = t.losses.sparse_softmax_cross_entropy(y, logits, weights=w,
                                                         reduction=getattr(t.losses.Reduction, reduction)) + \
                t.losses.mean_squared_error(t.one_hot(y, 4), t.nn.softmax(logits), weights=t.expand_dims(w, 1),
                                            reduction=t.losses.Reduction.MEAN)
        train = t.train.MomentumOptimizer(0.01 if reduction.startswith("pairwise") else 0.1, 0.9).minimize(loss)
        t.add_to_collection("loss", loss)
        t.add_to_collection(t.GraphKeys.TRAIN_OP, train)
        saver = t.train.Saver()
        with t.Session() as sess:
            sess.run(t.global_variables_initializer())
            path = saver.save(sess, os.path.join(folder, "model"))
        t.train.export_meta_graph(path + ".meta")
    return path


def _run_imported(t, path: str, feeds: dict, force=None) -> list:
    """Imports the MetaGraph into `t`, restores and trains STEPS steps (micro-batched when `force`d): the losses,
    then every global variable's value by name."""
    with t.Graph().as_default() as g:
        saver = t.train.import_meta_graph(path + ".meta")
        loss, train = t.get_collection("loss")[0], t.get_collection(t.GraphKeys.TRAIN_OP)[0]
        budget = {"memory_budget": "1GB"} if force else {}
        with t.Session(**budget) as sess:
            saver.restore(sess, path)
            if force:
                fed = {g.get_tensor_by_name(k): v for k, v in feeds.items()}
                step = sess.step([loss, train], fed)
                p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), None, graph=step.graph,
                                 force=force)
                assert p.microbatches == force[0]
                step.use_plan(p)
            losses = [sess.run([loss, train], feeds)[0] for _ in range(STEPS)]
            variables = sorted(t.global_variables(), key=lambda v: v.name)
            return losses + list(zip([v.name for v in variables], sess.run(variables)))


@pytest.mark.parametrize("reduction", ["SUM_BY_NONZERO_WEIGHTS", "SUM", "pairwise", "pairwise-weights"])
def test_tensorflows_tf_losses_graph_imports_trains_as_tensorflow_and_micro_batches(tf1, tmp_path, reduction):
    """TensorFlow checks that the weights broadcast (a tf.cond on their shapes, resolved from the fed shapes) and
    seeds its gradients with ones that read nothing of the loss: its summed losses are found from the top of the
    forward pass (a sum over the batch was averaged over the micro-batches: k times too small). TensorFlow's
    mean_pairwise_squared_error (its scalar weight's form) compares each example's pairs alone: a summed loss.
    With weights per example, each example's pairs are weighted by its own weight: a sum too."""
    rng = np.random.default_rng(6)
    feeds = {"x:0": rng.standard_normal((BATCH, 6)).astype(np.float32),
             "y:0": rng.integers(0, 4, BATCH).astype(np.int32),
             "weights:0": (rng.random(BATCH) * (rng.random(BATCH) > 0.3)).astype(np.float32)}
    path = _tf_losses_graph(tf1, str(tmp_path), reduction)
    if reduction == "pairwise":
        feeds.pop("weights:0")
    want = _run_imported(tf1, path, feeds)
    assert want[STEPS - 1] < want[0], "the steps did not train"
    for got in (_run_imported(tf, path, feeds), _run_imported(tf, path, feeds, force=(4, 1))):
        np.testing.assert_allclose(got[:STEPS], want[:STEPS], rtol=1e-5, atol=1e-6)
        for (name, a), (want_name, b) in zip(got[STEPS:], want[STEPS:]):
            assert name == want_name
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=name)


def test_tfplus_plans_floor_micro_batches_a_masked_loss_as_the_session_runs_it():
    """step_budget (what `tfplus plan` and `tfplus train` report) plans the step as a budgeted session does, its
    summed loss scaled: the floor micro-batches, where the unscaled step's split was refused."""
    from tfplus import step_budget
    g, fetches, feeds, _ = _masked_sequence(np.random.default_rng(7))
    runs = [(fetches, {t: v.shape for t, v in feeds.items()})]
    floor = step_budget.floor(g, runs, "cpu")
    assert floor.microbatches > 1, floor.transformations
    assert floor.budget_bytes < step_budget.smallest_peak(g, runs, "cpu", ("schedule", "inplace"))
