"""A session's steps, compiled, specialized and replayed per signature (tfplus.engine.executor), split over worker
processes (tfplus.engine.workers) or run by a memory plan, give what a fresh Session gives for the same feeds when
the fed shapes change between runs: batch sizes that change, a last partial batch, placeholders of unknown rank,
fed tensors that are not placeholders, tf.shape / tf.size / tf.rank of fed tensors used as values (reshape targets,
tf.range and tf.zeros sizes, a loop's bound), a placeholder_with_default fed or not.

Each run of the session under test is checked against a fresh Session (no workers, no budget) that starts from
the same variable values, so a replay of a signature's kept values on another signature shows as a difference."""
import numpy as np
import pytest

import tfplus as tf

# Runs of each case: repeated sizes make the executor specialize, record and replay a signature (a tape needs
# two identical recordings), then the size changes (a larger batch, a last partial one).
SIZES = (8, 8, 8, 8, 16, 16, 16, 8, 12)


def _train(loss):
    return tf.train.GradientDescentOptimizer(0.1).minimize(loss)


def unknown_rank_target():
    """Keras's loss on targets of unknown rank: reshaped to the output's batch shape (tf.shape of a row tensor)."""
    x, y = tf.placeholder(tf.float32, [None, 5]), tf.placeholder(tf.int32)
    w = tf.Variable(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))
    out = tf.matmul(x, w)
    labels = tf.reshape(y, tf.shape(out)[:-1])
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=out))
    return [loss, out, _train(loss)], lambda n, r: {x: r.rand(n, 5), y: r.randint(0, 3, n)}


def shape_values():
    """tf.shape, tf.size and tf.rank of a fed tensor as values: a reshape target, tf.range and tf.zeros sizes."""
    x = tf.placeholder(tf.float32, [None, 4])
    n = tf.shape(x)[0]
    folded = tf.reduce_sum(tf.reshape(x, tf.stack([n * 2, 2])), 1)
    counted = tf.cast(tf.range(n), tf.float32) * tf.cast(tf.size(x), tf.float32) + tf.cast(tf.rank(x), tf.float32)
    zeros = tf.zeros(tf.shape(x)) + x
    return [folded, counted, zeros], lambda n, r: {x: r.rand(n, 4)}


def unknown_rank_input():
    """A placeholder of unknown rank fed tensors of another rank when the batch changes."""
    x = tf.placeholder(tf.float32)
    flat = tf.reshape(x, [-1]) * tf.cast(tf.rank(x), tf.float32)
    return [flat, tf.shape(x), tf.reduce_sum(x * 2.0)], \
        lambda n, r: {x: r.rand(n, 3) if n != 16 else r.rand(n, 2, 2)}


def with_default():
    """A placeholder_with_default fed some runs (its batch) and not others (its default's 4 rows)."""
    d = tf.placeholder_with_default(tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3)), [None, 3])
    scaled = d * tf.cast(tf.shape(d)[0], tf.float32)
    return [tf.reduce_sum(scaled, 0), tf.reshape(scaled, [-1])], lambda n, r: {} if n == 12 else {d: r.rand(n, 3)}


def fed_intermediate():
    """A fed tensor that is not a placeholder (an op's output), fed a batch of another size than x's."""
    x = tf.placeholder(tf.float32, [None, 3])
    h = x * 2.0
    out = tf.reshape(h, [-1]) + tf.cast(tf.size(h), tf.float32)
    return [out, tf.shape(h)], lambda n, r: {h: r.rand(n, 3)} if n % 16 == 0 else {x: r.rand(n, 3)}


def loop_bound():
    """A while loop over the rows of a fed tensor: its bound is tf.shape(x)[0]."""
    x = tf.placeholder(tf.float32, [None, 3])

    def body(i, acc):
        return i + 1, acc + tf.reduce_sum(tf.gather(x, i)) * tf.cast(i + 1, tf.float32)
    _, total = tf.while_loop(lambda i, acc: i < tf.shape(x)[0], body, [tf.constant(0), tf.constant(0.0)])
    return [total], lambda n, r: {x: r.rand(n, 3)}


def training_batches():
    """A training step whose batch changes: labels of known rank, a mean loss, an update."""
    x, y = tf.placeholder(tf.float32, [None, 4]), tf.placeholder(tf.int32, [None])
    w = tf.Variable(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2))
    h = tf.nn.relu(tf.matmul(x, w))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
    return [loss, _train(loss)], lambda n, r: {x: r.rand(n, 4), y: r.randint(0, 2, n)}


CASES = [unknown_rank_target, shape_values, unknown_rank_input, with_default, fed_intermediate, loop_bound,
         training_batches]
# (device, memory budget, workers, inter-op threads: > 1 runs the fast loop in waves)
SETUPS = [("cpu", None, 1, 0), ("cpu", None, 2, 0), ("cpu", None, 1, 2), ("cpu", "64MB", 1, 0), ("opencl", None, 1, 0),
          ("opencl", "64MB", 1, 0)]


def _fresh(graph, device, variables, values, fetches, feeds):
    """The fetches' values (and the variables' after) from a new Session whose variables start at `values`."""
    with tf.Session(graph=graph, device=device, workers=1) as s:
        s.run(tf.variables_initializer(variables))
        for v, value in zip(variables, values):
            v.load(value, s)
        return s.run(fetches, feeds), s.run(variables)


def _check(a, b, where):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{where}: shape {a.shape}, a fresh Session gives {b.shape}"
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=where)


# A budgeted Session refuses a tf.while_loop (the planner cannot size its outputs before it runs: PlanError).
PAIRS = [(c, s) for s in SETUPS for c in CASES if not (s[1] and c is loop_bound)]


@pytest.mark.parametrize(("case", "setup"), PAIRS, ids=[f"{c.__name__}-{'-'.join(map(str, s))}" for c, s in PAIRS])
def test_replayed_steps_match_a_fresh_session_when_fed_shapes_change(case, setup):
    device, budget, workers, inter = setup
    config = tf.ConfigProto(inter_op_parallelism_threads=inter)
    graph = tf.Graph()
    with graph.as_default():
        fetches, make = case()
        variables = tf.global_variables()
        init = tf.variables_initializer(variables)
    rng = np.random.RandomState(0)
    with tf.Session(graph=graph, device=device, memory_budget=budget, workers=workers, config=config) as s:
        s.run(init)
        for run, n in enumerate(SIZES):
            feeds = make(n, rng)
            before = s.run(variables) if variables else []
            got = s.run(fetches, feeds)
            after = s.run(variables) if variables else []
            want, want_after = _fresh(graph, device, variables, before, fetches, feeds)
            for k, (a, b) in enumerate(zip(got, want)):
                if b is not None:
                    _check(a, b, f"{case.__name__} run {run} (batch {n}): fetch {k}")
            for v, a, b in zip(variables, after, want_after):
                _check(a, b, f"{case.__name__} run {run} (batch {n}): variable {v.op.name}")


@pytest.mark.parametrize("y_shape", [None, [16]], ids=["unknown-rank", "fixed"])
def test_a_fed_tensor_with_the_batchs_rows_but_no_open_dimension_keeps_the_step_whole(y_shape):
    """Targets of unknown rank or a fixed leading dimension, reshaped to the rows' shape: the workers (and the
    planner's micro-batches) would slice x but not y, so the step runs whole, as a fresh Session runs it."""
    from tfplus.planner.batch import split_step
    graph = tf.Graph()
    with graph.as_default():
        x, y = tf.placeholder(tf.float32, [None, 5]), tf.placeholder(tf.int32, y_shape)
        w = tf.Variable(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))
        out = tf.matmul(x, w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(y, tf.shape(out)[:-1]), logits=out))
        fetches, variables = [loss, _train(loss)], tf.global_variables()
    why = split_step([], fetches, {x, y}, {x: (16, 5), y: (16,)}, None)
    assert f"'{y.name}' has as many rows as the batch" in str(why) and "shape=[None, ...]" in str(why)
    rng = np.random.RandomState(1)
    with tf.Session(graph=graph, workers=2) as s:
        s.run(tf.variables_initializer(variables))
        for run in range(3):
            feeds = {x: rng.rand(16, 5), y: rng.randint(0, 3, 16)}
            before = s.run(variables)
            got = s.run(fetches, feeds)[0]
            want = _fresh(graph, "cpu", variables, before, fetches, feeds)[0][0]
            _check(got, want, f"run {run}")
