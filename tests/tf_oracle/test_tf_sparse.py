"""Sparse gradients against TensorFlow: tf.gradients of a gather's params is an IndexedSlices with TF's values and
indices; optimizers update only the rows a step looked up (their slots too), with repeated ids, on every device;
clipping keeps IndexedSlices sparse; the sparse update ops match a NumPy reference and survive a GraphDef round
trip and a memory budget."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
from tfplus.engine.memory import Bound
from tfplus.ops import sparse_training_ops as sto

RNG = np.random.default_rng(5)
EMB, W = RNG.standard_normal((6, 3)), RNG.standard_normal((3, 2)) * 0.5
TARGET = RNG.standard_normal((4, 2))
# Three steps' ids: repeats, and rows a step does not look up (row 5 only in the first, rows 2 and 4 never).
STEPS = ([0, 3, 3, 5], [1, 1, 1, 3], [0, 0, 1, 1])

# The same constructor call in both libraries; hyperparameters exact in float32 (see test_tf_train.py).
OPTIMIZERS = {
    "sgd": lambda t: t.train.GradientDescentOptimizer(0.125),
    "momentum": lambda t: t.train.MomentumOptimizer(0.125, 0.875),
    "nesterov": lambda t: t.train.MomentumOptimizer(0.0625, 0.875, use_nesterov=True),
    "rmsprop": lambda t: t.train.RMSPropOptimizer(2.0 ** -7, epsilon=2.0 ** -30, decay=0.875),
    "rmsprop_momentum": lambda t: t.train.RMSPropOptimizer(2.0 ** -7, decay=0.75, momentum=0.5, epsilon=2.0 ** -20),
    "rmsprop_centered": lambda t: t.train.RMSPropOptimizer(2.0 ** -7, decay=0.75, momentum=0.25,
                                                           epsilon=2.0 ** -20, centered=True),
    "adagrad": lambda t: t.train.AdagradOptimizer(0.125, initial_accumulator_value=0.25),
    "adadelta": lambda t: t.train.AdadeltaOptimizer(1.0, rho=0.875, epsilon=2.0 ** -20),
    "adam": lambda t: t.train.AdamOptimizer(0.0625, beta1=0.875, beta2=0.9375, epsilon=2.0 ** -20),
    "ftrl": lambda t: t.train.FtrlOptimizer(0.25, l1_regularization_strength=0.0625,
                                            l2_regularization_strength=0.125),
    "ftrl_power_shrinkage": lambda t: t.train.FtrlOptimizer(0.25, learning_rate_power=-0.75,
                                                            initial_accumulator_value=0.5,
                                                            l2_shrinkage_regularization_strength=0.125),
}


def _model(t):
    """An embedding table looked up by `ids`, then a dense layer; returns (ids placeholder, loss)."""
    ids = t.placeholder(t.int32, [4], name="ids")
    emb, w = t.Variable(EMB, name="emb"), t.Variable(W, name="w")
    h = t.tanh(t.matmul(t.nn.embedding_lookup(emb, ids), w))
    return ids, t.reduce_sum(t.square(h - TARGET))


def _train(t, opt, session_kwargs=None) -> dict:
    """Three steps of `opt` on the model; {variable name: value} of every variable, slots included."""
    g = t.Graph()
    with g.as_default():
        ids, loss = _model(t)
        step = opt(t).minimize(loss)
        init = t.global_variables_initializer()
        variables = t.global_variables()
    with t.Session(graph=g, **(session_kwargs or {})) as sess:
        sess.run(init)
        for rows in STEPS:
            sess.run(step, {ids: rows})
        return dict(zip([v.op.name for v in variables], sess.run(variables)))


def _tol(device):
    return {"rtol": 1e-10, "atol": 1e-12} if device == "cpu" else {"rtol": 1e-6, "atol": 1e-8}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_an_embedding_trains_like_tensorflow(name, tf1, device):
    theirs = _train(tf1, OPTIMIZERS[name])
    mine = _train(tf, OPTIMIZERS[name], {"device": device})
    assert sorted(mine) == sorted(theirs), "variable names differ (slots included)"
    for k in theirs:
        np.testing.assert_allclose(mine[k], theirs[k], err_msg=k, **_tol(device))
    if name != "adam":  # Adam's TF1 sparse update decays every row's moments: it moves rows 2 and 4 too
        np.testing.assert_array_equal(mine["emb"][[2, 4]], EMB[[2, 4]])


def _gradient_parts(t, build):
    """tf.gradients of build(t)'s loss by its table: (the type's name, its parts as arrays)."""
    g = t.Graph()
    with g.as_default():
        table = t.Variable(np.arange(12.0).reshape(4, 3), name="table")
        [grad] = t.gradients(build(t, table), [table])
        init = t.global_variables_initializer()
    with t.Session(graph=g) as sess:
        sess.run(init)
        if isinstance(grad, (tf.IndexedSlices, t.IndexedSlices)):
            return "IndexedSlices", sess.run([grad.values, grad.indices, grad.dense_shape])
        return "dense", [sess.run(grad)]


GRADIENT_CASES = {
    "gather": lambda t, p: t.reduce_sum(t.gather(p, [[2, 0], [2, 1]]) * 2.0),
    "embedding_lookup": lambda t, p: t.reduce_sum(t.square(t.nn.embedding_lookup(p, [3, 3, 0]))),
    "two_gathers_concatenate": lambda t, p: t.reduce_sum(t.gather(p, [0, 2]) ** 2) +
    t.reduce_sum(t.nn.embedding_lookup(p, [[3], [2]])),
    "gather_and_dense_densify": lambda t, p: t.reduce_sum(t.gather(p, [1, 1])) + t.reduce_sum(p * p),
    "gather_axis_1_is_dense": lambda t, p: t.reduce_sum(t.gather(p, [2, 0], axis=1) * 3.0),
}


@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_gradients_of_a_gather_are_tensorflows(case, tf1):
    kind, theirs = _gradient_parts(tf1, GRADIENT_CASES[case])
    my_kind, mine = _gradient_parts(tf, GRADIENT_CASES[case])
    assert my_kind == kind
    for a, b in zip(mine, theirs):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def _clipped(t):
    """clip_by_global_norm of [an embedding's IndexedSlices, a dense gradient] and clip_by_norm of the former."""
    g = t.Graph()
    with g.as_default():
        ids, loss = _model(t)
        grads = t.gradients(loss, t.trainable_variables())
        clipped, norm = t.clip_by_global_norm(grads, 0.5)
        by_norm = t.clip_by_norm(grads[0], 0.25)
        init = t.global_variables_initializer()
    kinds = ["IndexedSlices" if hasattr(c, "indices") else "dense" for c in clipped + [by_norm]]
    with t.Session(graph=g) as sess:
        sess.run(init)
        parts = [clipped[0].values, clipped[0].indices, clipped[1], norm, by_norm.values, by_norm.indices]
        return kinds, sess.run(parts, {ids: STEPS[0]})


def test_clip_by_global_norm_of_a_mix_is_tensorflows(tf1):
    their_kinds, theirs = _clipped(tf1)
    my_kinds, mine = _clipped(tf)
    assert my_kinds == their_kinds == ["IndexedSlices", "dense", "IndexedSlices"]
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12)


# -- the update ops against NumPy ----------------------------------------------------------------------------
IDS = np.array([4, 1, 4, 4, 0])  # repeats, in no order; rows 2 and 3 untouched
ROWS = (6, 2, 3)                 # a rank-3 variable: rows of 2 x 3


def _dense_reference(op_type, dense_op, var, slots, hypers, grad):
    """What TF1's optimizer does: sum the rows of repeated ids, then the dense op on those rows only (run on
    the cpu: the dense ops are checked against TensorFlow in test_tf_train)."""
    rows, where = np.unique(IDS, return_inverse=True)
    summed = np.zeros((rows.size,) + ROWS[1:])
    np.add.at(summed, where, grad)
    g = tf.Graph()
    with g.as_default():
        vs = [tf.Variable(a[rows]) for a in [var] + slots]
        step = dense_op(*vs, *hypers, tf.constant(summed))
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        sess.run(step)
        out = [a.copy() for a in [var] + slots]
        for a, v in zip(out, sess.run(vs)):
            a[rows] = v
        return out


SPARSE_OPS = {  # sparse wrapper, dense wrapper, slots (and their starting values), hyperparameters
    "momentum": (sto.sparse_apply_momentum, "apply_momentum", 1, (0.25, 0.875)),
    "rmsprop": (sto.sparse_apply_rms_prop, "apply_rms_prop", 2, (0.25, 0.875, 0.5, 1e-6)),
    "centered_rmsprop": (sto.sparse_apply_centered_rms_prop, "apply_centered_rms_prop", 3, (0.25, 0.875, 0.5, 1e-6)),
    "adagrad": (sto.sparse_apply_adagrad, "apply_adagrad", 1, (0.25,)),
    "adadelta": (sto.sparse_apply_adadelta, "apply_adadelta", 2, (0.5, 0.875, 1e-6)),
}


@pytest.mark.parametrize("name", list(SPARSE_OPS))
def test_sparse_updates_match_the_dense_update_of_the_summed_rows(name, device):
    from tfplus.ops import training_ops
    sparse, dense_name, n_slots, hyper_values = SPARSE_OPS[name]
    var = RNG.standard_normal(ROWS)
    slots = [RNG.uniform(0.5, 1.5, ROWS) for _ in range(n_slots)]  # positive: they are mean squares in some
    if name == "centered_rmsprop":  # the mean gradient mg: small, so that ms - mg^2 + epsilon stays positive
        slots[0] = RNG.uniform(-0.25, 0.25, ROWS)
    grad = RNG.standard_normal((IDS.size,) + ROWS[1:])
    g = tf.Graph()
    with g.as_default():
        vs = [tf.Variable(a) for a in [var] + slots]
        hypers = [tf.constant(h, tf.float64) for h in hyper_values]
        if name == "momentum":  # (var, accum, lr, grad, indices, momentum)
            step = sparse(*vs, hypers[0], tf.constant(grad), tf.constant(IDS), hypers[1])
        else:
            step = sparse(*vs, *hypers, tf.constant(grad), tf.constant(IDS))
        init = tf.global_variables_initializer()
    with tf.Session(graph=g, device=device) as sess:
        sess.run(init)
        sess.run(step)
        mine = sess.run(vs)
    dense = getattr(training_ops, dense_name)
    if name == "momentum":
        want = _dense_reference(name, lambda v, a, lr, m, gr: dense(v, a, lr, gr, m), var, slots, hyper_values,
                                grad)
    else:
        want = _dense_reference(name, dense, var, slots, hyper_values, grad)
    for a, b in zip(mine, want):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, **_tol(device))
    for a, b in zip(mine, [var] + slots):
        np.testing.assert_array_equal(a[[2, 3, 5]], b[[2, 3, 5]])


def test_scatter_sub_subtracts_repeated_rows_in_turn(device):
    var, updates = RNG.standard_normal(ROWS), RNG.standard_normal((IDS.size,) + ROWS[1:])
    want = var.copy()
    for i, row in enumerate(IDS):
        want[row] -= updates[i]
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(var)
        step = sto.scatter_sub(v, tf.constant(IDS.astype(np.int64)), tf.constant(updates))
        init = tf.global_variables_initializer()
    with tf.Session(graph=g, device=device) as sess:
        sess.run(init)
        sess.run(step)
        np.testing.assert_allclose(sess.run(v), want, **_tol(device))


@pytest.mark.parametrize("fn", ["scatter_update", "scatter_add", "scatter_sub", "scatter_mul", "scatter_div",
                                "scatter_min", "scatter_max"])
def test_scatter_ops_combine_rows_as_tensorflow(fn, tf1, device):
    """tf.scatter_* on a variable, repeated indices included (an update keeps the last row), as TensorFlow's; and
    Variable.scatter_update of an IndexedSlices."""
    var, updates = RNG.standard_normal(ROWS), RNG.standard_normal((IDS.size,) + ROWS[1:]) + 2.0
    got = []
    for lib in (tf1, tf):
        with lib.Graph().as_default():
            v = lib.Variable(var)
            step = getattr(lib, fn)(v, lib.constant(IDS.astype(np.int64)), lib.constant(updates))
            extra = v.scatter_update(lib.IndexedSlices(lib.constant(updates[:2]), lib.constant([0, 1])))
            with lib.Session(**({} if lib is tf1 else {"device": device})) as sess:
                sess.run(lib.global_variables_initializer())
                got.append([sess.run(step), sess.run(extra)])
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, **_tol(device))


def test_a_sparse_training_graph_survives_a_graphdef_round_trip():
    g = tf.Graph()
    with g.as_default():
        ids, loss = _model(tf)
        step = tf.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True).minimize(loss)
        init = tf.global_variables_initializer()
    assert "_SparseApplyCenteredRMSProp" in {op.type for op in g.get_operations()}
    g2 = tf.Graph()
    with g2.as_default():
        tf.import_graph_def(g.as_graph_def(), name="")
    assert g2.as_graph_def() == g.as_graph_def()
    results = []
    for graph in (g, g2):
        with tf.Session(graph=graph) as sess:
            sess.run(graph.get_operation_by_name(init.name))
            for rows in STEPS:
                sess.run(graph.get_operation_by_name(step.name), {graph.get_tensor_by_name(ids.name): rows})
            results.append(sess.run(graph.get_tensor_by_name("emb:0")))
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("name", ["momentum", "adadelta", "sgd"])
def test_sparse_updates_plan_under_a_memory_budget(name, device):
    """The planner counts the sparse updates' outputs and scratch: under a budget the step runs from its arena
    (a miscounted workspace would fail there) and trains as without one."""
    free = _train(tf, OPTIMIZERS[name], {"device": device})
    planned = _train(tf, OPTIMIZERS[name], {"device": device, "memory_budget": "1MB"})
    for k in free:
        np.testing.assert_array_equal(planned[k], free[k], err_msg=k)


def test_a_fetched_indexed_slices_is_an_indexed_slices_value():
    p = tf.constant(np.ones((3, 2)))
    [grad] = tf.gradients(tf.reduce_sum(tf.gather(p, [2, 2])), [p])
    with tf.Session() as sess:
        got = sess.run({"g": grad})["g"]
    assert isinstance(got, tf.IndexedSlicesValue)
    np.testing.assert_array_equal(got.indices, [2, 2])
    np.testing.assert_array_equal(got.dense_shape, [3, 2])
    np.testing.assert_array_equal(got.values, np.ones((2, 2)))


def test_gate_graph_keeps_a_sparse_gradient_sparse():
    g = tf.Graph()
    with g.as_default():
        _, loss = _model(tf)
        opt = tf.train.MomentumOptimizer(0.1, 0.9)
        pairs = opt.compute_gradients(loss, gate_gradients=opt.GATE_GRAPH)
    assert [type(gr).__name__ for gr, _ in pairs] == ["IndexedSlices", "Tensor"]


def _loop_gradient(t):
    """The gradient of a table gathered inside a tf.while_loop's body: made dense there (TF does too)."""
    g = t.Graph()
    with g.as_default():
        table = t.Variable(np.arange(12.0).reshape(4, 3), name="table")
        _, total = t.while_loop(lambda i, acc: i < 3,
                                lambda i, acc: (i + 1, acc + t.reduce_sum(t.gather(table, [i, i + 1]) ** 2)),
                                [t.constant(0), t.constant(0.0, t.float64)])
        [grad] = t.gradients(total, [table])
        init = t.global_variables_initializer()
    with t.Session(graph=g) as sess:
        sess.run(init)
        return sess.run(t.convert_to_tensor(grad))


def test_a_gather_in_a_while_loop_has_tensorflows_gradient(tf1):
    np.testing.assert_allclose(_loop_gradient(tf), _loop_gradient(tf1), rtol=1e-12)


def test_a_sparse_step_is_micro_batched():
    """A budget only micro-batches meet: the sparse gradient's rows and indices are concatenated over them (it used
    to be refused, and before that to fail inside a kernel), and the step trains as the unbudgeted one."""
    g = tf.Graph()
    with g.as_default():
        ids = tf.placeholder(tf.int32, [None])
        x = tf.placeholder(tf.float32, [None, 512])
        emb = tf.Variable(np.linspace(-1, 1, 400).reshape(50, 8).astype(np.float32))
        h = tf.tanh(tf.matmul(tf.nn.embedding_lookup(emb, ids), tf.ones([8, 512])) * x)
        step = tf.train.MomentumOptimizer(0.5, 0.9).minimize(tf.reduce_mean(tf.square(tf.tanh(h * x + h))))
        init = tf.global_variables_initializer()
    feeds = {ids: np.arange(1024, dtype=np.int32) % 7, x: np.full((1024, 512), 0.5, np.float32)}
    runs = []
    for budget in (None, "5MB"):
        with tf.Session(graph=g, memory_budget=budget, workers=1) as sess:
            sess.run(init)
            sess.run(step, feeds)
            if budget:
                assert any(st.bound.plan.microbatches > 1 for st in sess.steps if isinstance(st.bound, Bound))
            runs.append(sess.run(emb))
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-7)
