"""Micro-batched steps with sparse gradients (tf.IndexedSlices, an embedding's): each micro-batch's values and
indices are copied into preallocated whole-batch accumulators (the values then divided by the micro-batch count, as
the summed gradients are), so the update sees the whole batch's rows in the whole batch's order. Loss, variables
and slots after a few steps equal the unbudgeted step's on every device, for optimizers that scatter (SGD) and that
sum repeated rows first (Momentum, Adagrad); planned == measured bytes; the budget search micro-batches such a step;
what is still impossible is refused by name."""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import DEVICES, needs_opencl
from modelcheck import assert_planned_bytes_are_measured, train_opencl, train_planned

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import Bound, install
from tfplus.planner.liveness import PlanError
from tfplus.runtime.facts import device_facts

OPTIMIZERS = {
    "sgd": lambda: tf.train.GradientDescentOptimizer(0.25),
    "momentum": lambda: tf.train.MomentumOptimizer(0.125, 0.875),
    "adagrad": lambda: tf.train.AdagradOptimizer(0.25, initial_accumulator_value=0.5),
}
VOCAB, DIM, IDS = 12, 4, 3  # few rows: a batch's ids repeat within and across micro-batches


def _embedding_net(opt="momentum", conv=False, hidden=6, norm=False, gru=False, t=tf):
    """ids (N, IDS) -> embedding (VOCAB, DIM) -> dense (or a conv over the ids' rows, or a GRU over them (its last
    state), then dense; with `norm` a training-mode batch norm after it) -> mean squared error, trained by
    OPTIMIZERS[opt]; in a new graph, or with `t` (TensorFlow's tf.compat.v1) its loss only, in its default graph."""
    rng = np.random.default_rng(3)
    g = tf.Graph() if t is tf else t.get_default_graph()
    with g.as_default():
        ids = t.placeholder(t.int32, [None, IDS], name="ids")
        y = t.placeholder(t.float32, [None, 2], name="y")
        emb = t.Variable(rng.standard_normal((VOCAB, DIM)).astype(np.float32), name="emb")
        h = t.nn.embedding_lookup(emb, ids)
        if conv:
            f = t.Variable((rng.standard_normal((2, 2, 1, 3)) * 0.5).astype(np.float32), name="filter")
            h = t.nn.relu(t.nn.conv2d(t.reshape(h, [-1, IDS, DIM, 1]), f, [1, 1, 1, 1], "SAME"))
        width = IDS * DIM * (3 if conv else 1)
        if gru:
            t.set_random_seed(1)  # the GRU's initializers draw: the same numbers in every session
            _, h = t.nn.dynamic_rnn(t.nn.rnn_cell.GRUCell(5), h, dtype=t.float32)
            width = 5
        w1 = t.Variable((rng.standard_normal((width, hidden)) * 0.3).astype(np.float32), name="w1")
        w2 = t.Variable((rng.standard_normal((hidden, 2)) * 0.3).astype(np.float32), name="w2")
        h = t.matmul(t.reshape(h, [-1, width]), w1)
        if norm:
            h = t.layers.batch_normalization(h, training=True)
        loss = t.reduce_mean(t.square(t.matmul(t.tanh(h), w2) - y))
        init = t.global_variables_initializer()
        if t is not tf:
            return SimpleNamespace(loss=loss, init_op=init, ids=ids, y=y, emb=emb)
        with t.control_dependencies(t.get_collection(t.GraphKeys.UPDATE_OPS)):
            train = OPTIMIZERS[opt]().minimize(loss)
        init = t.global_variables_initializer()
    return SimpleNamespace(graph=g, train_op=train, loss=loss, init_op=init, ids=ids, y=y)


def _feeds(tg, batch=8):
    rng = np.random.default_rng(4)
    return {tg.ids: rng.integers(0, VOCAB, (batch, IDS)).astype(np.int32),
            tg.y: rng.standard_normal((batch, 2)).astype(np.float32)}


def _plan(tg, feeds, device="cpu", **kw):
    return planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts(device),
                        graph=tg.graph, **kw)


def _assert_same_step(got, want):
    """Float32 training within rounding: micro-batches sum the dense gradients in another order."""
    tol = {"rtol": 1e-5, "atol": 1e-6}
    np.testing.assert_allclose(got[0], want[0], **tol)
    assert set(got[1]) == set(want[1])
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, err_msg=name, **tol)


@functools.cache
def _unsplit(opt: str, device: str, net: str = ""):
    """Losses and variables of three unbudgeted steps of _embedding_net(opt) (with `net`): the reference of every k
    (the net's weights are the same numbers in every graph built)."""
    tg = _embedding_net(opt, **({net: True} if net else {}))
    return train_planned(tg, _feeds(tg), device, steps=3, variables="variables")[:2]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_micro_batched_sparse_step_is_the_whole_step(opt, k, device):
    """Three steps in k micro-batches: the losses, every variable and every slot are the unbudgeted steps'."""
    tg = _embedding_net(opt)
    feeds = _feeds(tg)
    want = _unsplit(opt, device)
    got = train_planned(tg, feeds, device, force=(k, 1), steps=3, variables="variables")
    assert got[2].microbatches == k
    assert len(want[1]) == {"sgd": 3, "momentum": 6, "adagrad": 6}[opt], "the slots are compared too"
    _assert_same_step(got, want)


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("net", ["conv", "gru", "norm"])
def test_embedding_into_a_conv_a_gru_or_a_batch_norm_micro_batches(net, k):
    """An embedding whose rows feed a convolution, a GRU (a tf.while_loop), or a batch norm (whose statistics
    passes, planner.crossbatch, run before the micro-batch run): micro-batches give the whole step's training."""
    tg = _embedding_net("momentum", **{net: True})
    feeds = _feeds(tg)
    want = _unsplit("momentum", "cpu", net)
    got = train_planned(tg, feeds, force=(k, 1), steps=3, variables="variables")
    assert bool(got[2].statistics) == (net == "norm")
    _assert_same_step(got, want)


def test_concatenated_rows_are_tensorflows_whole_batch_indexed_slices(tf1):
    """After a step in 4 micro-batches the sparse gradient's accumulators hold the whole batch's IndexedSlices as
    TensorFlow's tf.gradients makes them: its indices, and its values to float rounding, in its order of rows
    (Momentum's update reads them as they are; SGD's reads lr * values)."""
    tg = _embedding_net("momentum")
    feeds = _feeds(tg)
    with tf.Session(graph=tg.graph, memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        install(sess, [tg.train_op, tg.loss], _plan(tg, feeds, force=(4, 1)))
        sess.run([tg.train_op, tg.loss], feeds)
        bound = next(st.bound for st in sess.steps if isinstance(st.bound, Bound) and st.bound.plan.microbatches > 1)
        ours = {bound.plan.fetch_merge[t]: np.array(bound.acc[t]) for t in bound.acc
                if bound.plan.fetch_merge.get(t) in ("concat", "concat_mean")}
    with tf1.Graph().as_default():
        theirs = _embedding_net(t=tf1)
        grad = tf1.gradients(theirs.loss, theirs.emb)[0]
        with tf1.Session() as sess:
            sess.run(theirs.init_op)
            values, indices = sess.run([grad.values, grad.indices], {theirs.ids: feeds[tg.ids], theirs.y: feeds[tg.y]})
    np.testing.assert_array_equal(ours["concat"], indices)
    np.testing.assert_allclose(ours["concat_mean"], values, rtol=1e-6, atol=1e-7)


def test_sparse_gradient_accumulators_hold_the_whole_batch_rows():
    """The values' and indices' accumulators are the whole batch's rows, concatenated (not summed): the plan says
    so, and its accumulators' bytes count them."""
    tg = _embedding_net()
    feeds = _feeds(tg, batch=8)
    p = _plan(tg, feeds, force=(4, 1))
    ways = {t.name: (p.fetch_merge.get(t), b.shape) for t, b in p.accumulators.items()}
    sparse = {w: shape for w, shape in ways.values() if w in ("concat", "concat_mean")}
    assert sparse == {"concat": (8 * IDS,), "concat_mean": (8 * IDS, DIM)}, ways
    assert p.breakdown()["accumulators"] >= (8 * IDS) * (DIM + 1) * 4


@pytest.mark.parametrize("force", [(2, 1), (4, 1)], ids=["micro2", "micro4"])
def test_sparse_micro_batches_planned_bytes_are_measured(force):
    tg = _embedding_net("adagrad")
    assert_planned_bytes_are_measured(tg, _feeds(tg, batch=16), force)


@needs_opencl
def test_sparse_micro_batches_opencl_ledger_is_the_plan():
    """On opencl the device memory a step holds at its peak is the plan's, to the byte, and it creates no buffer."""
    tg = _embedding_net("momentum")
    *_, p, m = train_opencl(tg, _feeds(tg, batch=16), (4, 1))
    assert m["allocations"] == 0
    assert m["peak"] == p.peak_bytes, (m, p.peak_bytes)


def test_budget_search_micro_batches_an_embedding_step():
    """A budget below what the step needs without micro-batches: the search plans micro-batches (the sparse
    gradient no longer refuses them), and the session's budgeted steps train as the unbudgeted ones."""
    tg = _embedding_net("adagrad", hidden=256)
    feeds = _feeds(tg, batch=32)
    unsplit = planner.smallest_plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()},
                                    device_facts("cpu"), graph=tg.graph,
                                    transformations=[t for t in planner.TRANSFORMATIONS if t != "microbatch"])
    budget = _plan(tg, feeds, force=(8, 1)).peak_bytes
    assert budget < unsplit.peak_bytes
    p = _plan(tg, feeds, budget=budget)
    assert p.fits and p.microbatches > 1, p.summary()
    fetches = [tg.train_op, tg.loss]
    runs = []
    for b in (None, budget):
        with tf.Session(graph=tg.graph, memory_budget=b) as sess:
            sess.run(tg.init_op)
            losses = [sess.run(fetches, feeds)[1] for _ in range(3)]
            runs.append((losses, {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}))
    _assert_same_step(runs[1], runs[0])


def test_rows_of_the_batch_that_are_no_sparse_gradient_are_refused():
    """An update that reads rows of the batch without indices (an Assign of them) is not a sum nor a sparse
    gradient: micro-batching it stays refused, naming the input and the op."""
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [None, 3], name="x")
        seen = tf.Variable(np.zeros((8, 3), np.float32), name="seen")
        w = tf.Variable(np.ones((3, 1), np.float32), name="w")
        loss = tf.reduce_mean(tf.matmul(x, w))
        train = tf.group(tf.train.GradientDescentOptimizer(0.1).minimize(loss), tf.assign(seen, x * 2.0))
    with pytest.raises(PlanError, match=r"cannot micro-batch: the update input 'mul:0' has rows of the batch but "
                                        r"Assign '.*' reads it and takes no indices"):
        planner.plan([train, loss], {x: (8, 3)}, device_facts("cpu"), graph=g, force=(2, 1))


def test_workers_keep_a_sparse_step_in_the_parent():
    """The worker processes average every gradient they merge: a sparse one is not theirs to split, and they say
    so (the planner's micro-batches concatenate it)."""
    from tfplus.engine import workers
    tg = _embedding_net()
    feeds = _feeds(tg, batch=16)
    why = workers._prepare(None, 2, [tg.train_op, tg.loss], feeds)
    assert why == ("the update input 'gradients/embedding_lookup_grad/Reshape:0' is a sparse gradient's "
                   "(tf.IndexedSlices), whose rows the workers do not concatenate"), why
