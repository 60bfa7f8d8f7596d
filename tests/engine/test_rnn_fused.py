"""The recurrent-cell pass of the graph rewrite (tfplus.engine.rewrite_rnn): which steps it fuses, what it leaves, that
a fused training step equals the unfused one on every device, and that the fused gradient ops are the gradient of
the fused cells (float64 finite differences). The kernels against NumPy: tests/cases_rnn_fused.py."""
from __future__ import annotations

import numpy as np
import pytest
from cases_rnn_fused import CASES
from conftest import needs_opencl
from optable import check_forward

import tfplus as tf
from tfplus.engine.rewrite import optimize
from tfplus.framework import apply_op, needed_ops
from tfplus.graphs.mentee import training_graph
from tfplus.graphs.seqnet import seqnet

T, D = 4, 3
OFF = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
    remapping=tf.RewriterConfig.OFF)))


def _cell(kind):
    rc = tf.nn.rnn_cell
    return {"gru": lambda: rc.GRUCell(5), "lstm": lambda: rc.BasicLSTMCell(4, forget_bias=0.5),
            "lstm_cell": lambda: rc.LSTMCell(4)}[kind]()


BUILDS = {  # name: (steps fused per kind, build(x, lengths) -> outputs)
    "gru": (T, lambda x, n: tf.nn.dynamic_rnn(_cell("gru"), x, dtype=tf.float32)[0]),
    "lstm": (T, lambda x, n: tf.nn.dynamic_rnn(_cell("lstm"), x, dtype=tf.float32)[0]),
    "lstm_final_state": (T, lambda x, n: _outputs_and_c(tf.nn.dynamic_rnn(_cell("lstm_cell"), x, dtype=tf.float32))),
    "gru_lengths": (T, lambda x, n: tf.nn.dynamic_rnn(_cell("gru"), x, sequence_length=n, dtype=tf.float32)[0]),
    "static_lstm_lengths": (T, lambda x, n: tf.concat(tf.nn.static_rnn(
        _cell("lstm_cell"), tf.unstack(x, axis=1), sequence_length=n, dtype=tf.float32)[0], 1)),
    "bidirectional": (2 * T, lambda x, n: tf.concat(tf.nn.bidirectional_dynamic_rnn(
        _cell("gru"), _cell("lstm"), x, sequence_length=n, dtype=tf.float32)[0], 2)),
    "two_layers": (2 * T, lambda x, n: tf.nn.dynamic_rnn(_cell("gru"), tf.nn.dynamic_rnn(
        _cell("lstm"), x, dtype=tf.float32, scope="one")[0], dtype=tf.float32, scope="two")[0]),
}


def _outputs_and_c(rnn):
    """The outputs plus the final c (so the last step's c' has a gradient of its own)."""
    outputs, state = rnn
    return outputs + tf.expand_dims(state.c, 1)


def _training(name):
    """(graph, x, lengths, fetches: the loss and every gradient) of BUILDS[name]."""
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(0)
        x = tf.placeholder(tf.float32, [None, T, D])
        n = tf.placeholder(tf.int32, [None])
        y = BUILDS[name][1](x, n)
        loss = tf.reduce_mean(tf.square(y)) + tf.reduce_sum(y)
        fetches = [loss] + tf.gradients(loss, [x] + tf.trainable_variables())
        init = tf.global_variables_initializer()
    return g, x, n, fetches, init


def _fused(r) -> dict:
    return {k: v for k, v in r.fused.items() if "Cell" in k}


@pytest.mark.parametrize("name", list(BUILDS))
def test_every_step_fuses_and_the_step_equals_the_unfused_one(device, name):
    g, x, n, fetches, init = _training(name)
    before = g.as_graph_def().SerializeToString(deterministic=True)
    r = optimize(g, fetches, [x, n])
    assert sum(_fused(r).values()) == 2 * BUILDS[name][0]  # each step's cell and its gradient
    assert g.as_graph_def().SerializeToString(deterministic=True) == before
    feed = {x: np.random.default_rng(1).standard_normal((3, T, D)).astype(np.float32), n: [4, 1, 3]}
    runs = []
    for config in (None, OFF):
        with tf.Session(graph=g, device=device, config=config) as sess:
            sess.run(init)
            runs.append(sess.run(fetches, feed))
    for fused, plain in zip(*runs):
        np.testing.assert_allclose(fused, plain, rtol=2e-5, atol=2e-6)


@needs_opencl
def test_rows_too_big_for_local_memory_go_through_the_outputs(monkeypatch):
    """The opencl kernels keep a row's vectors in the outputs where local memory is too small for them."""
    from tfplus.runtime import get_runtime
    monkeypatch.setitem(get_runtime("opencl").info, "local_mem_bytes", 16)
    for case in CASES:
        check_forward(case, "float32", "opencl")


def test_a_fetched_inner_tensor_keeps_its_step_as_built():
    g, x, n, fetches, init = _training("gru")
    inner = [op for op in g.get_operations() if op.type == "Sub"]  # h - c: no output of the fused cell
    r = optimize(g, fetches + [inner[1].outputs[0]], [x, n])
    assert _fused(r) == {"_FusedGRUCell": T - 1, "_FusedGRUCellGrad": T - 1}
    feed = {x: np.random.default_rng(2).standard_normal((2, T, D)).astype(np.float32), n: [4, 4]}
    runs = []
    for config in (None, OFF):
        with tf.Session(graph=g, config=config) as sess:
            sess.run(init)
            runs.append(sess.run(fetches + [inner[1].outputs[0]], feed))
    for fused, plain in zip(*runs):
        np.testing.assert_allclose(fused, plain, rtol=2e-5, atol=2e-6)


def test_a_cell_without_a_backward_fuses_alone():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, T, D])
        y, _ = tf.nn.dynamic_rnn(_cell("lstm"), x, dtype=tf.float32)
    assert _fused(optimize(g, [y], [x])) == {"_FusedLSTMCell": T}


def test_other_cells_and_activations_run_as_built():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, T, D])
        a, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(3, activation=tf.nn.relu), x, dtype=tf.float32, scope="a")
        b, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.BasicRNNCell(3), x, dtype=tf.float32, scope="b")
        grads = tf.gradients(tf.reduce_sum(a) + tf.reduce_sum(b), tf.trainable_variables())
    r = optimize(g, grads, [x])
    assert r is None or not _fused(r)


def test_a_seqnet_training_step_runs_far_fewer_ops():
    for cell in ("gru", "lstm"):
        tg = training_graph(seqnet, total_steps=10, seed=0, optimizer="adam", model_kwargs={
            "conv_widths": (4, 3, 2), "cell": cell, "bidirectional": True})
        fetches, feeds = [tg.train_op, tg.loss], [tg.images, tg.labels]
        r = optimize(tg.graph, fetches, feeds)
        kind = "GRU" if cell == "gru" else "LSTM"
        assert _fused(r) == {f"_Fused{kind}Cell": 4 * 32, f"_Fused{kind}CellGrad": 4 * 32}  # 2 layers x 2 ways
        assert r.fused["_FusedMatMulSum"] == 4 * (2 if cell == "gru" else 1)  # one per kernel
        assert len(r.graph.get_operations()) < len(needed_ops(fetches, set(feeds))) / 6


def test_a_kernel_shared_by_matmuls_of_other_batch_sizes_gets_one_summed_gradient(device):
    """Two products of one kernel (rows 2 and 5) and weight decay: the kernel's and the bias's gradients each
    from one _FusedMatMulSum, the decay added to its sum; the same values as the unfused step."""
    rng = np.random.default_rng(4)
    g = tf.Graph()
    with g.as_default():
        x1, x2 = tf.placeholder(tf.float32, [2, 3]), tf.placeholder(tf.float32, [None, 3])
        w, b = tf.Variable(rng.standard_normal((3, 4)).astype(np.float32)), tf.Variable(tf.zeros([4]))
        loss = tf.reduce_sum(tf.tanh(tf.nn.bias_add(tf.matmul(x1, w), b))) + \
            tf.reduce_sum(tf.square(tf.nn.bias_add(tf.matmul(x2, w), b))) + 0.1 * tf.nn.l2_loss(w)
        grads = tf.gradients(loss, [w, b])
        init = tf.global_variables_initializer()
    r = optimize(g, grads, [x1, x2])
    assert r.fused["_FusedMatMulSum"] == 1
    assert not [op for op in r.graph.get_operations() if op.type in ("MatMul", "BiasAddGrad")]
    feed = {x1: rng.standard_normal((2, 3)).astype(np.float32), x2: rng.standard_normal((5, 3)).astype(np.float32)}
    runs = []
    for config in (None, OFF):
        with tf.Session(graph=g, device=device, config=config) as sess:
            sess.run(init)
            runs.append(sess.run(grads, feed))
    for fused, plain in zip(*runs):
        np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-6)


# -- the gradient ops against finite differences of the fused cells (float64, the cpu's NumPy kernels) -------
def _loss_and_grads(kind, arrays, weights):
    """sum(weights[k] * output k) of the fused cell at `arrays` (its inputs), and its gradient w.r.t. each input
    from the fused gradient op (the weight gradients as the rewrite leaves them: [x, h]^T @ d gates, ...)."""
    g = tf.Graph()
    with g.as_default():
        phs = [tf.placeholder(tf.float64, a.shape) for a in arrays]
        if kind == "gru":
            new_h, xh, gates, xrh, cand = apply_op("_FusedGRUCell", phs, name="cell")
            loss = tf.reduce_sum(new_h * weights[0])
            d_gates, d_cand, dx, dh = apply_op("_FusedGRUCellGrad", [tf.constant(weights[0]), phs[1], gates, cand,
                                                                     phs[2], phs[4]], name="grad")
            grads = [dx, dh, tf.matmul(xh, d_gates, transpose_a=True), tf.reduce_sum(d_gates, 0),
                     tf.matmul(xrh, d_cand, transpose_a=True), tf.reduce_sum(d_cand, 0)]
        else:
            new_h, new_c, xh, acts, tanh_c = apply_op("_FusedLSTMCell", phs, {"forget_bias": 0.7}, "cell")
            loss = tf.reduce_sum(new_h * weights[0]) + tf.reduce_sum(new_c * weights[1])
            d_gates, dx, dh, dc = apply_op("_FusedLSTMCellGrad", [tf.constant(weights[0]), phs[2], acts, tanh_c,
                                                                  phs[3], [tf.constant(weights[1])]], name="grad")
            grads = [dx, dh, dc, tf.matmul(xh, d_gates, transpose_a=True), tf.reduce_sum(d_gates, 0)]
    with tf.Session(graph=g) as sess:
        return sess.run([loss, grads], dict(zip(phs, arrays)))


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_the_fused_gradient_is_the_fused_cells_gradient(kind):
    rng = np.random.default_rng(3)
    b, d, n = 2, 3, 2
    shapes = [(b, d), (b, n), (d + n, 2 * n), (2 * n,), (d + n, n), (n,)] if kind == "gru" else \
        [(b, d), (b, n), (b, n), (d + n, 4 * n), (4 * n,)]
    arrays = [rng.standard_normal(s) for s in shapes]
    weights = [rng.standard_normal((b, n)) for _ in range(2)]
    _, grads = _loss_and_grads(kind, arrays, weights)
    eps = 1e-6
    for a, grad in zip(arrays, grads):
        numeric = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            keep = a[i]
            a[i] = keep + eps
            up = _loss_and_grads(kind, arrays, weights)[0]
            a[i] = keep - eps
            down = _loss_and_grads(kind, arrays, weights)[0]
            a[i] = keep
            numeric[i] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)
