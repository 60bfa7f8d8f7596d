"""tf.cond and tf.while_loop on the batch's rows (issue 34, planner.rows): a cond whose predicate is fed
(is_training) and a recurrent network over a tf.while_loop (dynamic_rnn with an open time axis) keep the rows row by
row, so they train on micro-batches under a memory budget and on the cpu's worker processes as the unsplit step does;
a cond on the batch's values, a branch or a loop body that moves or reduces the rows, and a tf.scan over the batch
are refused, naming the op and the fix."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from conftest import DEVICES
from modelcheck import use_forced_plan

import tfplus as tf
import tfplus.kernels.numpy  # noqa: F401  planner.rows folds shape arithmetic on the cpu kernels
from tfplus import planner
from tfplus.framework import needed_ops, topo_order
from tfplus.planner import rows as row_rules
from tfplus.planner.liveness import PlanError
from tfplus.runtime.facts import device_facts

BATCH, STEPS = 16, 3  # two worker slices of workers.MIN_ROWS rows
TOL = {"cpu": 1e-5, "opencl": 1e-4}


def _w(rng, *shape):
    return tf.Variable((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))


def _dense(x, rng, width=5):
    return tf.matmul(tf.reshape(x, [-1, 24]), _w(rng, 24, width))


def cond_scale(x, training, rng):
    """tf.cond(is_training, ...) with a variable of its own in the taken branch, on a fed flag."""
    h = tf.tanh(_dense(x, rng))
    scale = tf.Variable(np.full(5, 0.5, np.float32), name="scale")
    return tf.cond(training, lambda: h * scale + 0.1, lambda: h)


def case_on_flag(x, training, rng):
    """tf.case on predicates computed from the fed flag: nested conds."""
    h = _dense(x, rng)
    flag = tf.cast(training, tf.int32)
    return tf.case([(tf.equal(flag, 0), lambda: tf.nn.relu(h)), (tf.equal(flag, 1), lambda: tf.tanh(h) * 2.0)],
                   default=lambda: h)


def rnn_while(x, training, rng):
    """A GRU over a tf.while_loop (dynamic_rnn of an open time axis): a state [B, 5] and a TensorArray of each
    step's [B, 5] outputs, time on its axis 0, the rows on axis 1."""
    outputs, state = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(5), x, dtype=tf.float32)
    return state + tf.reduce_mean(outputs, 1)


def lstm_lengths(x, training, rng):
    """An LSTM over a tf.while_loop with each example's own length (3 or 4 steps, from its first feature): its state
    stops at its end."""
    lengths = 4 - tf.cast(x[:, 0, 0] > 0, tf.int32)
    _, state = tf.nn.dynamic_rnn(tf.nn.rnn_cell.LSTMCell(5), x, sequence_length=lengths, dtype=tf.float32)
    return state.h


def while_by_hand(x, training, rng):
    """tf.while_loop over the time axis (tf.shape(x)[1] steps): a tanh recurrence on a state [B, 5], each step's
    state written to a TensorArray [time, B, 5]."""
    w, u = _w(rng, 6, 5), _w(rng, 5, 5)
    steps = tf.shape(x)[1]
    xt = tf.transpose(x, [1, 0, 2])
    h0 = tf.zeros_like(tf.matmul(xt[0], w))
    states = tf.TensorArray(tf.float32, size=steps, element_shape=tf.shape(h0))

    def body(t, h, states):
        h = tf.tanh(tf.matmul(tf.gather(xt, t), w) + tf.matmul(h, u))
        return t + 1, h, states.write(t, h)
    _, h, states = tf.while_loop(lambda t, h, states: t < steps, body, [0, h0, states])
    return h + tf.reduce_max(states.stack(), 0)


ROW_BY_ROW = {"cond_scale": cond_scale, "case_on_flag": case_on_flag, "rnn_while": rnn_while,
              "lstm_lengths": lstm_lengths, "while_by_hand": while_by_hand}


def _case(build, seed=0):
    """A training step of `build(x, training, rng) -> [B, 5]` on x [None, None, 6] (examples of time steps of 6
    features): (graph, [train, loss], feeds, init)."""
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)  # the GRU's initializers
        x = tf.placeholder(tf.float32, [None, None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        training = tf.placeholder_with_default(False, [], name="is_training")
        logits = tf.matmul(build(x, training, rng), _w(rng, 5, 3))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):  # a batch norm's moving stats
            train = tf.train.AdamOptimizer(0.05).minimize(loss)
        feeds = {x: rng.standard_normal((BATCH, 4, 6)).astype(np.float32),
                 y: rng.integers(0, 3, BATCH).astype(np.int32), training: True}
        return g, [train, loss], feeds, tf.global_variables_initializer()


def _train(sess, g, fetches, feeds, init):
    sess.run(init)
    losses = [sess.run(fetches, feeds)[1] for _ in range(STEPS)]
    return losses, [sess.run(v) for v in g.get_collection("variables")]


@functools.cache
def _unsplit(name: str, device: str):
    g, fetches, feeds, init = _case(ROW_BY_ROW[name])
    with tf.Session(graph=g, device=device, workers=1) as sess:
        return _train(sess, g, fetches, feeds, init)


def _assert_same(got, want, tol, name):
    np.testing.assert_allclose(got[0], want[0], rtol=tol, err_msg=name)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)  # Adam: the float order


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ROW_BY_ROW)
def test_a_fed_cond_or_a_loop_micro_batched_under_a_budget_trains_as_the_unsplit_step(name, device):
    """A budgeted Session plans a fed cond's taken branch (engine.step.resolve_conds) and a loop of a trip count
    known from the shapes unrolled (engine.step.resolve_static): straight-line ops, micro-batched."""
    g, fetches, feeds, init = _case(ROW_BY_ROW[name])
    with tf.Session(graph=g, device=device, memory_budget="1GB") as sess:
        use_forced_plan(sess, fetches, feeds)  # 4 micro-batches
        got = _train(sess, g, fetches, feeds, init)
    _assert_same(got, _unsplit(name, device), TOL[device], name)


def _on_workers(name: str, **session) -> tuple:
    g, fetches, feeds, init = _case(ROW_BY_ROW[name])
    with tf.Session(graph=g, config=tf.ConfigProto(intra_op_parallelism_threads=2), **session) as sess:
        got = _train(sess, g, fetches, feeds, init)
        return got, sess.workers.summary()


@pytest.mark.parametrize("name", ROW_BY_ROW)
def test_the_cpu_workers_split_a_cond_or_a_while_loop_step_as_the_unsplit_step(name, monkeypatch):
    monkeypatch.setenv("TFPLUS_WORKERS", "2")
    got, where = _on_workers(name)
    assert where == "training steps on 2 worker processes", where
    _assert_same(got, _unsplit(name, "cpu"), TOL["cpu"], name)
    monkeypatch.delenv("TFPLUS_WORKERS")
    got, where = _on_workers(name)  # the default: workers.Payoff's rule, from 2 threads on (Linux)
    # A cond on the fed flag alone resolves before the rule prices the step (this tiny one stays in the parent); a
    # loop's cost, or a tf.case's nested conds', is known only as it runs, so such a step goes to the workers.
    if name == "cond_scale":
        assert where.startswith("training steps in this process: too small a step for the workers"), where
    else:
        assert where == "training steps on 2 worker processes: the cost of its control flow is known only as it " \
            "runs", where
    _assert_same(got, _unsplit(name, "cpu"), TOL["cpu"], name)


def on_batch(x, training, rng):
    h = _dense(x, rng)
    return tf.cond(tf.reduce_mean(x) > 0, lambda: h * 2.0, lambda: h, name="on_batch")


def scale_on_batch(x, training, rng):
    """A scalar picked by the batch's mean: no rows in or out of the cond, but each micro-batch would pick its own."""
    return _dense(x, rng) * tf.cond(tf.reduce_mean(x) > 0, lambda: 2.0, lambda: 1.0, name="scale")


def reversed_in_branch(x, training, rng):
    h = _dense(x, rng)
    return tf.cond(training, lambda: h[::-1], lambda: h, name="reversing")


def batch_norm_switch(x, training, rng):
    """tf.layers.batch_normalization(training=is_training): a tf.cond between the batch's statistics and the moving
    ones."""
    return tf.layers.batch_normalization(_dense(x, rng), training=training, momentum=0.9)


def statistic_inside_branch(x, training, rng):
    h = _dense(x, rng)
    return tf.cond(training, lambda: h - tf.reduce_mean(h, 0), lambda: h, name="centre")


def scan_over_batch(x, training, rng):
    return tf.scan(lambda acc, row: acc + row, _dense(x, rng), initializer=tf.zeros([5]))


def map_over_batch(x, training, rng):
    w = _w(rng, 24, 5)
    return tf.map_fn(lambda row: tf.tanh(tf.matmul(tf.reshape(row, [1, 24]), w))[0], x)


def loop_on_values(x, training, rng):
    """A loop that runs while the batch's activations are large: its trip count is the batch's."""
    h = _dense(x, rng)
    _, out = tf.while_loop(lambda i, h: tf.logical_and(i < 5, tf.reduce_max(h) > 1.0),
                           lambda i, h: (i + 1, h * 0.5), [0, h])
    return out


# graph -> what the refusal says
REFUSED = {
    on_batch: r"If 'on_batch/If' branches on 'Greater:0', computed from the values of the batch's rows .*"
              r"compute the predicate from fed scalars",
    scale_on_batch: r"If 'scale/If' branches on 'Greater:0', computed from the values of the batch's rows",
    reversed_in_branch: r"If 'reversing/If' runs a branch true_fn \('cond_true'\) in which StridedSlice "
                        r"'reversing/strided_slice' steps through the batch's rows by -1",
    statistic_inside_branch: r"If 'centre/If' runs a branch true_fn \('cond_true'\) in which Mean 'centre/Mean' "
                             r"reduces over the batch's rows inside control flow .* compute it outside the tf.cond",
    scan_over_batch: r"While 'scan/scan_loop/While' loops while '.*', computed from the batch's number of rows "
                     r"\(tf.map_fn, tf.scan or tf.foldl over the batch's axis.*apply the function to the whole batch",
    loop_on_values: r"While 'while/While' loops while 'LogicalAnd:0', computed from the values of the batch's rows",
}


@pytest.mark.parametrize("build", REFUSED, ids=[b.__name__ for b in REFUSED])
def test_control_flow_that_mixes_the_rows_is_refused_naming_the_op_and_the_fix(build):
    g, fetches, feeds, _ = _case(build)
    shapes = {t: np.shape(v) for t, v in feeds.items()}
    order = topo_order(needed_ops(fetches, set(feeds)))
    why = row_rules.why_not(order, set(feeds), shapes, {t for t in feeds if shapes[t][:1] == (BATCH,)})
    assert why is not None
    assert re.search(REFUSED[build], why), why


def test_a_batch_norm_switch_splits_on_the_workers_and_micro_batched_through_the_statistics_passes():
    """tf.layers.batch_normalization(training=is_training) computes the batch's statistics in a tf.cond branch: the
    workers and a budget alike split the branch the fed value takes, as straight-line ops, whose statistics
    planner.crossbatch computes over the whole batch first (the workers ran it in the parent)."""
    want = None
    for session in ({"workers": 1}, {"workers": 2}, {"workers": 1, "memory_budget": "1GB"}):
        g, fetches, feeds, init = _case(batch_norm_switch)
        with tf.Session(graph=g, config=tf.ConfigProto(intra_op_parallelism_threads=2), **session) as sess:
            if "memory_budget" in session:
                step = sess.step(fetches, feeds)
                p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph,
                                 force=(2, 1))
                assert p.microbatches == 2 and p.statistics, p.notes  # a statistics pass first
                step.use_plan(p)
            got = _train(sess, g, fetches, feeds, init)
            if session["workers"] == 2:
                assert sess.workers.summary() == "training steps on 2 worker processes", sess.workers.summary()
        if want is None:
            want = got
        else:
            _assert_same(got, want, TOL["cpu"], str(session))
    assert not np.allclose(want[1][-1], 1.0)  # the moving variance moved (the training branch ran)


def test_a_tf_cond_on_the_batch_under_a_budget_says_why():
    g, fetches, feeds, init = _case(on_batch)
    with tf.Session(graph=g, memory_budget="1MB") as sess:
        with pytest.raises(PlanError, match=r"If 'on_batch/If'"):
            sess.run(init)
            sess.run(fetches, feeds)


def test_tfplus_plan_plans_an_exported_while_loop_unrolled(tmp_path, capsys):
    """`tfplus plan --graph` on a MetaGraph with a tf.while_loop over its time axis: planned unrolled (it refused
    control flow), and its smallest budget is the session's (step_budget)."""
    import json

    from tfplus.cli import main
    from tfplus.step_budget import smallest_budget
    path = tmp_path / "rnn.meta"
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        h = tf.reshape(while_by_hand(x, None, np.random.default_rng(0)), [-1, 5])
        logits = tf.matmul(h, _w(np.random.default_rng(1), 5, 3))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        tf.train.export_meta_graph(str(path))
    assert main(["plan", "--graph", str(path), "--memory-budget", "1GB", "--batch-size", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    g = tf.Graph()
    with g.as_default():  # a session of the file
        tf.train.import_meta_graph(str(path))
        init = tf.global_variables_initializer()
    x, y = g.get_tensor_by_name("x:0"), g.get_tensor_by_name("y:0")
    want = smallest_budget(g, [(g.get_collection("train_op")[:1], {x: (16, 4, 6), y: (16,)}), (init, {})], "cpu")
    assert out["fits"] and out["smallest_feasible_budget_bytes"] == want, out
