"""tfplus.rnn against TF1's tf.nn.rnn_cell, static_rnn, dynamic_rnn and bidirectional_dynamic_rnn (the `tf1`
oracle): the same variable names and shapes, and the same outputs, final states and gradients given the same
weights, on every device; float64 finite differences for the gradients of the unrolled and the while-loop RNN."""
import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

B, T, D = 3, 4, 2
LENGTHS = np.array([4, 2, 3], np.int32)


def _nested(state) -> list:
    return [t for s in state for t in _nested(s)] if isinstance(state, (tuple, list)) else [state]


def _cells(mod, kind):
    rc = mod.nn.rnn_cell
    return {"basic_rnn": lambda: rc.BasicRNNCell(3),
            "gru": lambda: rc.GRUCell(3),
            "basic_lstm": lambda: rc.BasicLSTMCell(3, forget_bias=0.5),
            "lstm_concat_state": lambda: rc.LSTMCell(3, state_is_tuple=False, activation=mod.nn.relu),
            "multi": lambda: rc.MultiRNNCell([rc.GRUCell(3), rc.LSTMCell(2)])}[kind]()


CASES = {  # name: (time dimension known?, build(mod, x, lengths) -> tensors compared)
    **{f"dynamic_{k}": (True, lambda m, x, n, k=k: [*m.nn.dynamic_rnn(_cells(m, k), x, dtype=m.float32)])
       for k in ("basic_rnn", "gru", "basic_lstm", "lstm_concat_state", "multi")},
    "dynamic_time_major_lengths": (True, lambda m, x, n: [*m.nn.dynamic_rnn(
        _cells(m, "basic_lstm"), m.transpose(x, [1, 0, 2]), sequence_length=n, dtype=m.float32, time_major=True)]),
    "dynamic_while_loop_lengths": (False, lambda m, x, n: [*m.nn.dynamic_rnn(
        _cells(m, "gru"), x, sequence_length=n, dtype=m.float32, scope="seq")]),
    "dynamic_while_loop_lstm": (False, lambda m, x, n: [*m.nn.dynamic_rnn(_cells(m, "multi"), x, dtype=m.float32)]),
    "static_initial_state": (True, lambda m, x, n: [*m.nn.static_rnn(
        _cells(m, "gru"), m.unstack(x, axis=1), initial_state=m.tanh(x[:, 0, :1] * m.ones([1, 3])))]),
    "static_lengths": (True, lambda m, x, n: [*m.nn.static_rnn(
        _cells(m, "basic_rnn"), m.unstack(x, axis=1), sequence_length=n, dtype=m.float32)]),
    "bidirectional": (True, lambda m, x, n: [*m.nn.bidirectional_dynamic_rnn(
        _cells(m, "gru"), _cells(m, "basic_lstm"), x, dtype=m.float32)]),
    "bidirectional_lengths": (True, lambda m, x, n: [*m.nn.bidirectional_dynamic_rnn(
        _cells(m, "gru"), _cells(m, "gru"), x, sequence_length=n, dtype=m.float32)]),
    "bidirectional_while_loop": (False, lambda m, x, n: [*m.nn.bidirectional_dynamic_rnn(
        _cells(m, "basic_rnn"), _cells(m, "gru"), x, sequence_length=n, dtype=m.float32)]),
    "two_layers_and_time_distributed_dense": (True, lambda m, x, n: [m.layers.dense(
        m.nn.dynamic_rnn(_cells(m, "gru"), m.nn.dynamic_rnn(_cells(m, "gru"), x, dtype=m.float32)[0],
                         dtype=m.float32, scope="rnn2")[0], 5)]),
}


def _graph(mod, case, dtype=np.float32):
    known, build = CASES[case]
    g = mod.Graph()
    with g.as_default():
        mod.set_random_seed(0)
        x = mod.placeholder(mod.float32, [None, T if known else None, D])
        n = mod.placeholder(mod.int32, [None])
        ys = _nested(build(mod, x, n))
        rng = np.random.default_rng(1)
        loss = mod.add_n([mod.reduce_sum(y * rng.standard_normal(y.shape.as_list()[-1:]).astype(np.float32))
                          for y in ys])
        trainable = mod.trainable_variables()
        grads = mod.gradients(loss, [x] + trainable)
        names = [(v.op.name, tuple(v.shape.as_list())) for v in mod.global_variables()]
    return g, x, n, ys + grads, names, len(ys)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rnn_matches_tf1(tf1, case):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, D)).astype(np.float32)
    tg, tx, tn, tfetch, tnames, n_out = _graph(tf1, case)
    og, ox, on, ofetch, onames, _ = _graph(tf, case)
    assert onames == tnames
    assert [f.shape.as_list() for f in ofetch[:n_out]] == [f.shape.as_list() for f in tfetch[:n_out]]
    with tf1.Session(graph=tg) as s:
        s.run(tf1.global_variables_initializer())
        values = {v.op.name: s.run(v) for v in tg.get_collection("variables")}
        theirs = s.run(tfetch, {tx: x, tn: LENGTHS})
    for device in DEVICES:
        with tf.Session(graph=og, device=device) as s:
            with og.as_default():
                s.run([tf.assign(v, values[v.op.name]) for v in og.get_collection("variables")])
            ours = s.run(ofetch, {ox: x, on: LENGTHS})
        for k, (a, b) in enumerate(zip(ours, theirs)):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5, err_msg=f"{case}: fetch {k} on {device}")


@pytest.mark.parametrize("known", [True, False], ids=["unrolled", "while_loop"])
@pytest.mark.parametrize("kind", ["gru", "basic_lstm"])
def test_rnn_gradients_match_finite_differences(known, kind):
    """d loss / d inputs and d loss / d kernel in float64 against central differences."""
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((2, 3, 2))
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, 3 if known else None, 2])
        y, _ = tf.nn.dynamic_rnn(_cells(tf, kind), x, sequence_length=[3, 2], dtype=tf.float64)
        loss = tf.reduce_sum(y * rng.standard_normal((1, 1, 3)))
        kernel = tf.trainable_variables()[0]
        gx, gk = tf.gradients(loss, [x, kernel])
        k_in = tf.placeholder(tf.float64, kernel.shape)
        set_k = tf.assign(kernel, k_in)
        with tf.Session() as s:
            s.run(tf.global_variables_initializer())
            k0 = s.run(kernel)
            ax, ak = s.run([gx, gk], {x: x0})

            def f(xv, kv):
                s.run(set_k, {k_in: kv})
                return s.run(loss, {x: xv})
            eps = 1e-6
            nx = np.zeros_like(x0)
            for i in np.ndindex(x0.shape):
                d = np.zeros_like(x0)
                d[i] = eps
                nx[i] = (f(x0 + d, k0) - f(x0 - d, k0)) / (2 * eps)
            nk = np.zeros_like(k0)
            for i in list(np.ndindex(k0.shape))[::3]:
                d = np.zeros_like(k0)
                d[i] = eps
                nk[i] = (f(x0, k0 + d) - f(x0, k0 - d)) / (2 * eps)
    np.testing.assert_allclose(ax, nx, rtol=1e-6, atol=1e-8)
    sub = tuple(np.array(list(np.ndindex(k0.shape))[::3]).T)
    np.testing.assert_allclose(ak[sub], nk[sub], rtol=1e-6, atol=1e-8)
    assert np.all(ax[1, 2] == 0)  # past the second sequence's end, its input has no effect


def test_cells_errors_name_the_problem():
    with tf.Graph().as_default():
        with pytest.raises(NotImplementedError, match="num_unit_shards"):
            tf.nn.rnn_cell.LSTMCell(3, num_unit_shards=2)
        with pytest.raises(ValueError, match="initial_state or dtype"):
            tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(3), tf.placeholder(tf.float32, [2, 3, 4]))
        with pytest.raises(ValueError, match="rank 3"):
            tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(3), tf.placeholder(tf.float32, [2, 3]), dtype=tf.float32)
        assert tf.contrib.rnn.GRUCell is tf.nn.rnn_cell.GRUCell


@pytest.mark.parametrize("kind", ["basic_rnn", "gru", "multi"])
def test_while_loop_rnn_keeps_the_static_batch_size(tf1, kind):
    """Time unknown, batch known: the while-loop dynamic_rnn's outputs and final state have TensorFlow's static
    shapes (the batch size included), for plain, gated and nested LSTM state."""
    def shapes(mod):
        with mod.Graph().as_default():
            x = mod.placeholder(mod.float32, [B, None, D])
            out, state = mod.nn.dynamic_rnn(_cells(mod, kind), x, dtype=mod.float32)
            return [t.shape.as_list() for t in [out] + _nested(state)]
    ours = shapes(tf)
    assert ours == shapes(tf1)
    assert all(s[0] == B for s in ours)
