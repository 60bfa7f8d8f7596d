"""Training steps a TF1 user writes, round 2 (issue 34, one step off the models of graphs/): losses summed over the
batch (tf.reduce_sum, tf.losses' reduction=SUM, SUM_OVER_BATCH_SIZE and MEAN, a sum beside a weight decay or a
mean, weights fed per example), tf.conds whose predicates the session resolves before the step (a fed mode,
two fed flags, the global step, a cond nested in a taken branch), optimizers beyond SGD and momentum (Adam,
RMSProp, Adagrad, Adadelta, Nesterov momentum; minimize(global_step=gs) once per step; an exponential decay of the
learning rate from it; ExponentialMovingAverage after the update; weight decay from the regularization
collection), state updated in the step (tf.metrics.accuracy and mean, an assign_add counter, moving averages
with a fed momentum), fetches a user asks for (the weight gradients, the gradient of an activation, logits,
a fetched count of correct examples), and graphs (dynamic_rnn LSTM and GRU classifiers, a Conv1D text model, a
conv2d_transpose autoencoder, a Siamese net sharing its tower by variable_scope reuse, label smoothing, focal
loss).

Each runs in a tf.Session with a memory budget: micro-batched (planner.plan's force: the merges must be exact),
at its floor (the planner's choice; planned bytes == measured: cpu NumPy data, opencl the device ledger) and
below it (a BudgetError naming the floor), and trains as the unbudgeted step. Refusals are clear: a step that
pairs the batch's examples with each other (in-batch hard-negative mining) is no micro-batch step."""
from __future__ import annotations

import functools
import gc
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import DEVICES
from modelcheck import assert_measured_is_planned

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import measure_device_step, measure_step
from tfplus.planner import PlanError
from tfplus.runtime.facts import device_facts
from tfplus.units import format_size

BATCH = 8
RUNS = 3
TOL = {"cpu": 1e-5, "opencl": 1e-4}
OPENCL = "opencl" if "opencl" in DEVICES else "cpu"


def _weights(rng, *shape):
    return tf.Variable((rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32))


def _dense(loss_kind: str = "mean", optimizer: str = "sgd", cond: str = "", fetch: str = "", batch: int = BATCH):
    """x (N, 6) -> tanh dense (-> a cond) -> logits, int labels; the loss `loss_kind`, minimized with
    global_step=gs by `optimizer`; `fetch` adds fetches. Fetches [train_op, loss, *more]."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        gs = tf.train.get_or_create_global_step()
        w1 = _weights(rng, 6, 8)
        feeds = {x: rng.standard_normal((batch, 6)).astype(np.float32),
                 y: rng.integers(0, 3, batch).astype(np.int32)}
        h = tf.nn.tanh(tf.matmul(x, w1))
        if cond == "mode":
            mode = tf.placeholder(tf.int32, [], name="mode")
            h = tf.cond(tf.equal(mode, 0), lambda: h * 0.5, lambda: h, name="by_mode")
            feeds[mode] = np.int32(0)  # as the placeholder holds it: no conversion the feeds measure
        elif cond == "two_flags":
            a, b = tf.placeholder(tf.bool, [], name="a"), tf.placeholder(tf.bool, [], name="b")
            h = tf.cond(tf.logical_and(a, b), lambda: h * 0.5, lambda: h + 1.0, name="both")
            feeds.update({a: np.bool_(True), b: np.bool_(False)})
        elif cond == "global_step":  # a warm-up: the branch changes after the second step
            h = tf.cond(tf.less(gs, 2), lambda: h * 0.5, lambda: h, name="warmup")
        elif cond == "nested":
            a, mode = tf.placeholder(tf.bool, [], name="a"), tf.placeholder(tf.int32, [], name="mode")
            h = tf.cond(a, lambda: tf.cond(tf.equal(mode, 1), lambda: h * 0.5, lambda: h * 2.0, name="inner"),
                        lambda: h, name="outer")
            feeds.update({a: np.bool_(True), mode: np.int32(1)})
        logits = tf.matmul(h, _weights(rng, 8, 3))
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        reduction = tf.losses.Reduction
        if loss_kind == "mean":
            loss = tf.reduce_mean(xent)
        elif loss_kind == "sum":
            loss = tf.reduce_sum(xent)
        elif loss_kind == "sum_decay":
            loss = 0.5 * tf.reduce_sum(xent) + 0.01 * tf.nn.l2_loss(w1)
        elif loss_kind == "sum_and_mean":
            loss = tf.reduce_sum(xent) + tf.reduce_mean(tf.square(logits))
        elif loss_kind == "mean_times_constant":
            loss = tf.reduce_mean(xent) * 3.0
        elif loss_kind.startswith("losses_"):  # tf.losses with a reduction
            loss = tf.losses.sparse_softmax_cross_entropy(y, logits, reduction=getattr(reduction, loss_kind[7:]))
        elif loss_kind.startswith("weighted_"):  # weights fed per example, some zero
            weights = tf.placeholder(tf.float32, [None], name="weights")
            feeds[weights] = (rng.random(batch) * (rng.random(batch) > 0.3)).astype(np.float32)
            loss = tf.losses.sparse_softmax_cross_entropy(y, logits, weights=weights,
                                                          reduction=getattr(reduction, loss_kind[9:]))
        elif loss_kind == "regularized":
            tf.add_to_collection(tf.GraphKeys.REGULARIZATION_LOSSES, 0.01 * tf.nn.l2_loss(w1))
            loss = tf.reduce_mean(xent) + tf.losses.get_regularization_loss()
        more = []
        lr = tf.train.exponential_decay(0.1, gs, 1, 0.5) if optimizer == "decay" else 0.1
        opt = {"adam": lambda: tf.train.AdamOptimizer(0.01), "rmsprop": lambda: tf.train.RMSPropOptimizer(0.01),
               "adagrad": lambda: tf.train.AdagradOptimizer(0.1), "adadelta": lambda: tf.train.AdadeltaOptimizer(1.0),
               "nesterov": lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True)}.get(
            optimizer, lambda: tf.train.GradientDescentOptimizer(lr))()
        if fetch == "gradients":
            params = tf.trainable_variables()
            grads = tf.gradients(loss, params)
            # NOTE: before the update: the executor runs a read made after an update after it, the planner before
            more = grads + [tf.gradients(loss, h)[0], logits]
            train = opt.apply_gradients(list(zip(grads, params)), global_step=gs)
        else:
            train = opt.minimize(loss, global_step=gs)
        if optimizer == "ema":
            with tf.control_dependencies([train]):
                train = tf.train.ExponentialMovingAverage(0.9).apply(tf.trainable_variables())
        if fetch == "metrics":
            correct = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32)
            _, accuracy = tf.metrics.accuracy(y, tf.argmax(logits, 1))
            _, mean_loss = tf.metrics.mean(loss)
            seen = tf.Variable(0.0, trainable=False, name="examples_seen")
            train = tf.group(train, tf.assign_add(seen, tf.cast(tf.shape(x)[0], tf.float32)))
            more = [accuracy, mean_loss, tf.reduce_sum(correct), tf.reduce_mean(correct)]
        init = [tf.global_variables_initializer(), tf.local_variables_initializer()]
    return SimpleNamespace(graph=g, fetches=[train, loss, *more], feeds=feeds, init=init)


def _model(kind: str):
    """The graphs: a dynamic_rnn classifier (LSTM, GRU), a Conv1D text model, a conv2d_transpose autoencoder, a
    Siamese net (contrastive loss per pair), label smoothing, focal loss, a batch statistic whose moving average
    takes a fed momentum; momentum SGD under the UPDATE_OPS dependency."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(2)
        y = tf.placeholder(tf.int32, [None], name="y")
        feeds = {y: rng.integers(0, 3, BATCH).astype(np.int32)}
        logits = None
        if kind in ("lstm", "gru"):
            x = tf.placeholder(tf.float32, [None, 5, 4], name="x")
            cell = tf.nn.rnn_cell.LSTMCell(6) if kind == "lstm" else tf.nn.rnn_cell.GRUCell(6)
            out, _ = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)
            logits = tf.layers.dense(out[:, -1], 3)
            feeds[x] = rng.standard_normal((BATCH, 5, 4)).astype(np.float32)
        elif kind == "conv1d":
            ids = tf.placeholder(tf.int32, [None, 10], name="ids")
            table = tf.Variable(rng.standard_normal((20, 4)).astype(np.float32))
            h = tf.layers.conv1d(tf.nn.embedding_lookup(table, ids), 6, 3, activation=tf.nn.relu)
            logits = tf.layers.dense(tf.reduce_max(h, axis=1), 3)
            feeds[ids] = rng.integers(0, 20, (BATCH, 10)).astype(np.int32)
        elif kind == "autoencoder":
            x = tf.placeholder(tf.float32, [None, 8, 8, 2], name="x")
            h = tf.layers.conv2d(x, 4, 3, strides=2, padding="same", activation=tf.nn.relu)
            loss = tf.reduce_mean(tf.square(tf.layers.conv2d_transpose(h, 2, 3, strides=2, padding="same") - x))
            feeds = {x: rng.standard_normal((BATCH, 8, 8, 2)).astype(np.float32)}
        elif kind == "siamese":
            a, b = tf.placeholder(tf.float32, [None, 6], name="a"), tf.placeholder(tf.float32, [None, 6], name="b")
            same = tf.placeholder(tf.float32, [None], name="same")

            def tower(t, reuse):
                with tf.variable_scope("tower", reuse=reuse):
                    return tf.layers.dense(tf.layers.dense(t, 8, activation=tf.nn.relu, name="d1"), 4, name="d2")
            d = tf.reduce_sum(tf.square(tower(a, False) - tower(b, True)), 1)
            loss = tf.reduce_mean(same * d + (1 - same) * tf.square(tf.nn.relu(1.0 - tf.sqrt(d + 1e-6))))
            feeds = {a: rng.standard_normal((BATCH, 6)).astype(np.float32),
                     b: rng.standard_normal((BATCH, 6)).astype(np.float32),
                     same: (rng.random(BATCH) > 0.5).astype(np.float32)}
        else:
            x = tf.placeholder(tf.float32, [None, 6], name="x")
            feeds[x] = rng.standard_normal((BATCH, 6)).astype(np.float32)
            h = tf.layers.dense(x, 8)
            if kind == "batch_momentum":
                momentum = tf.placeholder(tf.float32, [], name="momentum")
                mean, var = tf.nn.moments(h, [0])
                average = tf.Variable(np.zeros(8, np.float32), trainable=False, name="moving_mean")
                tf.add_to_collection(tf.GraphKeys.UPDATE_OPS,
                                     tf.assign(average, momentum * average + (1 - momentum) * mean))
                h = (h - mean) * tf.rsqrt(var + 1e-3)
                feeds[momentum] = 0.9
            logits = tf.layers.dense(tf.nn.relu(h), 3)
            if kind == "smoothing":
                loss = tf.losses.softmax_cross_entropy(tf.one_hot(y, 3), logits, label_smoothing=0.1)
            elif kind == "focal":
                p = tf.reduce_sum(tf.nn.softmax(logits) * tf.one_hot(y, 3), 1)
                loss = tf.reduce_mean(-tf.square(1 - p) * tf.log(p + 1e-7))
            logits = None if kind in ("smoothing", "focal") else logits
        if logits is not None:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
        init = [tf.global_variables_initializer()]
    return SimpleNamespace(graph=g, fetches=[train, loss], feeds=feeds, init=init)


CASES = {**{f"loss-{k}": functools.partial(_dense, k) for k in
            ("sum", "sum_decay", "sum_and_mean", "mean_times_constant", "losses_SUM", "losses_SUM_OVER_BATCH_SIZE",
             "losses_MEAN", "weighted_SUM", "weighted_SUM_OVER_BATCH_SIZE", "regularized")},
         **{f"cond-{c}": functools.partial(_dense, "mean", "sgd", c) for c in
            ("mode", "two_flags", "global_step", "nested")},
         **{f"optimizer-{o}": functools.partial(_dense, "mean", o) for o in
            ("adam", "rmsprop", "adagrad", "adadelta", "nesterov", "decay", "ema")},
         "fetch-gradients": functools.partial(_dense, "sum", "adam", "", "gradients"),
         "fetch-metrics": functools.partial(_dense, "mean", "sgd", "", "metrics"),
         **{f"model-{m}": functools.partial(_model, m) for m in
            ("lstm", "gru", "conv1d", "autoencoder", "siamese", "smoothing", "focal", "batch_momentum")}}


def _run(case, device: str, budget=None, force=None, measure=False):
    """RUNS steps' fetches (but the train op) and every variable after them; with `measure`, the last step's
    memory (measure_step's or measure_device_step's) and its plan."""
    gc.collect()  # other sessions' buffers go back before the memory is measured
    with tf.Session(graph=case.graph, device=device, memory_budget="1GB" if force else budget) as sess:
        p = None
        if force:  # a cond's predicate may read a variable: the step is found (its conds resolved) once they are set
            sess.run(case.init)
        if force or measure:
            step = sess.step(case.fetches, case.feeds)
            # the session's plan, made before tracemalloc starts (it slows the planner tenfold)
            p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), budget, graph=step.graph,
                             force=force)
        if measure and device == "cpu":
            tracemalloc.start(16)  # before the session allocates its variables and arena (measure_step)
        try:
            if p is not None:
                step.use_plan(p)
            if not force:
                sess.run(case.init)
            fetched = [sess.run(case.fetches, case.feeds)[1:] for _ in range(RUNS - measure)]
            m = None
            if measure:
                m = (measure_step if device == "cpu" else measure_device_step)(sess, case.fetches, case.feeds)
            variables = {v.op.name: sess.run(v) for v in
                         case.graph.get_collection("variables") + case.graph.get_collection("local_variables")}
        finally:
            tracemalloc.stop()
    return fetched, variables, m, p


@functools.cache
def _unbudgeted(name: str, device: str):
    return _run(CASES[name](), device)[:2]


def _assert_trains_as(got, want, device: str, what: str) -> None:
    for i, (a, b) in enumerate(zip(got[0], want[0])):
        for j, (u, v) in enumerate(zip(a, b)):
            np.testing.assert_allclose(u, v, rtol=TOL[device], atol=TOL[device] / 10,
                                       err_msg=f"{what}: step {i}, fetch {j + 1}")
    for var, value in want[1].items():
        np.testing.assert_allclose(got[1][var], value, rtol=TOL[device], atol=TOL[device] / 10,
                                   err_msg=f"{what}: {var}")


ON_OPENCL = ("loss-sum_decay", "loss-losses_SUM", "cond-nested", "cond-global_step", "optimizer-adam",
             "fetch-gradients", "fetch-metrics", "model-gru")
FORCED = [(n, "cpu") for n in CASES] + [(n, OPENCL) for n in ON_OPENCL]


@pytest.mark.parametrize("name, device", FORCED, ids=["-".join(c) for c in FORCED])
def test_a_user_step_in_four_micro_batches_trains_as_the_unsplit_step(name, device):
    got = _run(CASES[name](), device, force=(4, 1))
    assert got[3].microbatches == 4
    _assert_trains_as(got, _unbudgeted(name, device), device, f"{name} on {device} in 4 micro-batches")


def test_the_global_step_counts_steps_once_and_its_cond_turns_under_a_budget():
    """minimize(global_step=gs) adds one per step in 4 micro-batches, and a cond on tf.less(gs, 2) takes its
    other branch from the third step: two plans, each planned once."""
    case = _dense("mean", "sgd", "global_step")
    with tf.Session(graph=case.graph, memory_budget="1GB") as sess:
        sess.run(case.init)
        for _ in range(4):
            step = sess.step(case.fetches, case.feeds)
            if step.bound is None:
                step.use_plan(planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime),
                                           graph=step.graph, force=(4, 1)))
            sess.run(case.fetches, case.feeds)
        assert sess.run(tf.train.get_global_step(case.graph)) == 4
        assert len({id(s) for s in sess.steps if s.plan is not None and s.plan.microbatches == 4}) == 2


FLOOR = ["loss-sum", "loss-sum_and_mean", "cond-nested", "fetch-metrics", "model-lstm"]
LADDER = [(n, "cpu", rung) for n in FLOOR for rung in ("between", "floor")] + \
    [(n, OPENCL, "floor") for n in ("loss-sum_decay", "fetch-gradients")]


@functools.cache
def _budgets(name: str, device: str) -> dict[str, int]:
    """The step's floor (the largest of its runs', the training step's and the initializer's) and the budget
    halfway from it to the unconstrained plan's peak."""
    case = CASES[name]()
    facts = device_facts(device)
    with tf.Session(graph=case.graph, device=device, memory_budget="1GB") as sess:
        sess.run(case.init)  # a cond's predicate may read a variable
        steps = sess.step(case.fetches, case.feeds), sess.step(case.init)
        low = max(planner.floor_plan(s.fetches, s.feed_shapes, facts, graph=s.graph).budget_bytes for s in steps)
        free = planner.plan(steps[0].fetches, steps[0].feed_shapes, facts, graph=steps[0].graph).peak_bytes
    return {"floor": low, "between": (low + max(free, low)) // 2}


@pytest.mark.parametrize("name, device, rung", LADDER, ids=["-".join(c) for c in LADDER])
def test_a_user_step_in_a_ladder_of_budgets_trains_as_the_unbudgeted_one_in_its_planned_bytes(name, device, rung):
    """Between the floor and the unconstrained peak, and at the floor; below it, a BudgetError naming it."""
    budgets = _budgets(name, device)
    budget = budgets[rung]
    got = _run(CASES[name](), device, budget, measure=True)
    m, p = got[2], got[3]
    assert p.fits and p.peak_bytes <= budget
    want = _unbudgeted(name, device)
    _assert_trains_as(got, (want[0][:RUNS - 1], want[1]), device, f"{name} on {device} in {rung} {budget}")
    if device == "cpu":
        assert_measured_is_planned(m, p)
    else:
        assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (name, m, p.peak_bytes)
    if rung == "between":
        return
    case = CASES[name]()
    with tf.Session(graph=case.graph, device=device, memory_budget=budget * 97 // 100) as sess, \
            pytest.raises(planner.BudgetError) as e:
        sess.run(case.init)
        sess.run(case.fetches, case.feeds)
    assert e.value.smallest_bytes == budget
    assert f"use a budget of at least {format_size(budget, up=True)} (the step's floor" in str(e.value)


def _triplet():
    """Embeddings of the batch, their pairwise distances (N, N), the hardest positive and negative of each
    example among the batch's: a loss no micro-batch computes."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        e = tf.nn.l2_normalize(tf.matmul(tf.nn.relu(tf.matmul(x, _weights(rng, 6, 8))), _weights(rng, 8, 4)), 1)
        d = tf.reduce_sum(tf.square(tf.expand_dims(e, 1) - tf.expand_dims(e, 0)), 2)
        same = tf.cast(tf.equal(tf.expand_dims(y, 1), tf.expand_dims(y, 0)), tf.float32)
        loss = tf.reduce_mean(tf.nn.relu(tf.reduce_max(d * same, 1) - tf.reduce_min(d + 10.0 * same, 1) + 0.2))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = [tf.global_variables_initializer()]
    feeds = {x: rng.standard_normal((BATCH, 6)).astype(np.float32),
             y: np.array([0, 0, 1, 1, 2, 2, 0, 1], np.int32)}
    return SimpleNamespace(graph=g, fetches=[train, loss], feeds=feeds, init=init)


def test_in_batch_hard_negative_mining_is_no_micro_batch_step_and_trains_at_its_floor():
    case = _triplet()
    with pytest.raises(PlanError, match=r"cannot micro-batch: Sub 'sub' pairs the batch's examples with each other "
                                        r"\(its output 'sub:0' of shape \(8, 8, 4\) has the batch along 2 axes\)"):
        planner.plan(case.fetches, {t: v.shape for t, v in case.feeds.items()}, "cpu", graph=case.graph,
                     force=(4, 1))
    want = _run(case, "cpu")
    with tf.Session(graph=case.graph, memory_budget="1GB") as sess:
        step = sess.step(case.fetches, case.feeds)
        budget = planner.floor_plan(step.fetches, step.feed_shapes, device_facts("cpu"), graph=step.graph).budget_bytes
    got = _run(case, "cpu", budget)
    _assert_trains_as(got, want, "cpu", f"triplet at its floor {budget}")


@pytest.mark.parametrize("reduction", ["MEAN", "SUM_BY_NONZERO_WEIGHTS"])
def test_a_loss_over_the_sum_of_fed_weights_micro_batches(reduction):
    case = _dense(f"weighted_{reduction}")
    _assert_trains_as(_run(case, "cpu", force=(4, 1)), _run(case, "cpu")[:2], "cpu", reduction)


ODD = [("loss-sum", 127), ("fetch-metrics", 100), ("cond-two_flags", 1)]


@pytest.mark.parametrize("name, batch", ODD, ids=[f"{n}-{b}" for n, b in ODD])
def test_a_batch_of_a_prime_size_of_100_or_of_1_at_its_floor_trains_as_the_unbudgeted_step(name, batch):
    """The floor micro-batches 127 rows in 127 runs of one, 100 in runs of 2; one row runs whole."""
    build = functools.partial(CASES[name].func, *CASES[name].args, batch=batch)
    case = build()
    with tf.Session(graph=case.graph, memory_budget="1GB") as sess:
        sess.run(case.init)
        step = sess.step(case.fetches, case.feeds)
        budget = planner.floor_plan(step.fetches, step.feed_shapes, device_facts("cpu"), graph=step.graph).budget_bytes
    got = _run(build(), "cpu", budget, measure=True)
    assert got[3].microbatches == {127: 127, 100: 50, 1: 1}[batch], got[3].transformations
    # a sum over 127 rows: its gradients' rounding is the rows' sum's
    _assert_trains_as(got, _run(build(), "cpu")[:2], "cpu" if batch != 127 else "opencl", f"{name}, batch {batch}")
    assert_measured_is_planned(got[2], got[3])


def _gan():
    """A GAN step as users fetch it: the discriminator's and the generator's train ops in one run, the generator's
    gradients through the discriminator's weights, which the discriminator's update changes."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(0)  # the runs compared must start from the same weights
        z, real = tf.placeholder(tf.float32, [None, 4], name="z"), tf.placeholder(tf.float32, [None, 6], name="real")
        with tf.variable_scope("G"):
            fake = tf.layers.dense(tf.layers.dense(z, 8, activation=tf.nn.relu), 6)

        def discriminator(t, reuse):
            with tf.variable_scope("D", reuse=reuse):
                return tf.layers.dense(tf.layers.dense(t, 8, activation=tf.nn.relu, name="h"), 1, name="o")
        on_real, on_fake = discriminator(real, False), discriminator(fake, True)
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        d_loss = tf.reduce_mean(xent(labels=tf.ones_like(on_real), logits=on_real) +
                                xent(labels=tf.zeros_like(on_fake), logits=on_fake))
        g_loss = tf.reduce_mean(xent(labels=tf.ones_like(on_fake), logits=on_fake))
        scope = tf.GraphKeys.TRAINABLE_VARIABLES
        train_d = tf.train.AdamOptimizer(0.01).minimize(d_loss, var_list=tf.get_collection(scope, "D"))
        train_g = tf.train.AdamOptimizer(0.01).minimize(g_loss, var_list=tf.get_collection(scope, "G"))
        init = [tf.global_variables_initializer()]
    feeds = {z: rng.standard_normal((BATCH, 4)).astype(np.float32),
             real: rng.standard_normal((BATCH, 6)).astype(np.float32)}
    return SimpleNamespace(graph=g, fetches=[train_d, d_loss, g_loss, train_g], feeds=feeds, init=init)


def test_a_gan_step_fetching_both_train_ops_trains_as_the_unbudgeted_step_when_planned():
    case = _gan()
    got, want = _run(case, "cpu", force=(1, 1)), _run(case, "cpu")
    losses = [[f[:2] for f in run[0]] for run in (got, want)]  # the fetched train_g is None
    _assert_trains_as((losses[0], got[1]), (losses[1], want[1]), "cpu", "a GAN step by a plan")


def test_mixup_by_a_fed_permutation_is_refused_by_the_planner():
    """A permutation fed per example gathers rows of the whole batch: each micro-batch's slice of it names rows
    its slice does not have (the kernel's range check refused it as it ran, when they fell outside the slice)."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        perm = tf.placeholder(tf.int32, [None], name="perm")
        mixed = 0.7 * x + 0.3 * tf.gather(x, perm)
        labels = 0.7 * tf.one_hot(y, 3) + 0.3 * tf.gather(tf.one_hot(y, 3), perm)
        logits = tf.matmul(mixed, _weights(rng, 6, 3))
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    feeds = {x: (8, 6), y: (8,), perm: (8,)}
    with pytest.raises(PlanError, match=r"cannot micro-batch: GatherV2 'GatherV2' picks rows of the batch's 'x:0' "
                                        r"by indices 'perm:0' computed from the batch"):
        planner.plan([train, loss], feeds, "cpu", graph=g, force=(4, 1))
