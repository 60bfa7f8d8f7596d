"""TF1 RNN scripts off the shapes and options the fused-cell rewrite was measured on (issue 37), against TensorFlow:
LSTMCell's peepholes, cell_clip and projection (whose core the rewrite recognizes: its state is narrower than its
units), also in a tf.while_loop; static_bidirectional_rnn; float64; hand-written LSTMs; DropoutWrapper. Each case
compares the outputs, final states, the gradients w.r.t. the inputs, the given initial state and every weight, and
one SGD step's weights, on every device with the rewrite on and off."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf
from tfplus.engine.rewrite import optimize

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

B, T, D, N = 3, 4, 5, 7
LENGTHS = np.array([1, 4, 0], np.int32)  # unsorted, one empty, one full
OFF = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
    remapping=tf.RewriterConfig.OFF)))


def _flat(s) -> list:
    return [t for x in s for t in _flat(x)] if isinstance(s, (tuple, list)) else [s]


def _rc(m):
    return m.nn.rnn_cell


def _hand_lstm(forget_bias):
    """An LSTM a user writes by hand, BasicLSTMCell's ops with its own forget bias constant (the rewrite matches
    such a cell by its ops, whatever built it): a build of CASES."""
    def build(m, x):
        k, b = m.get_variable("k", [D + N, 4 * N]), m.get_variable("b", [4 * N], initializer=m.zeros_initializer())
        h = c = m.zeros([B, N])
        outs = []
        for t in range(T):
            i, j, f, o = m.split(m.nn.bias_add(m.matmul(m.concat([x[:, t], h], 1), k), b), 4, 1)
            forget = m.sigmoid(m.add(f, m.constant(forget_bias, dtype=m.float32)))
            c = m.add(m.multiply(c, forget), m.multiply(m.sigmoid(i), m.tanh(j)))
            h = m.multiply(m.tanh(c), m.sigmoid(o))
            outs.append(h)
        return m.stack(outs, 1), c
    return build


CASES = {  # name: (build(mod, **placeholders) -> tensors compared, the feeds' shapes; "n" is the lengths)
    "peepholes_lengths": (lambda m, x, n: m.nn.dynamic_rnn(
        _rc(m).LSTMCell(N, use_peepholes=True, forget_bias=0.5), x, sequence_length=n, dtype=m.float32), {}),
    "peepholes_concat_state_relu": (lambda m, x: m.nn.dynamic_rnn(_rc(m).LSTMCell(
        N, use_peepholes=True, state_is_tuple=False, activation=m.nn.relu), x, dtype=m.float32), {}),
    "cell_clip_time_major": (lambda m, x: m.nn.dynamic_rnn(
        _rc(m).LSTMCell(N, cell_clip=0.3), x, dtype=m.float32, time_major=True), {}),
    "projection_initial_state_lengths": (lambda m, x, c, h, n: m.nn.dynamic_rnn(
        _rc(m).LSTMCell(N, num_proj=3), x, initial_state=_rc(m).LSTMStateTuple(c, h), sequence_length=n),
        {"c": (B, N), "h": (B, 3)}),
    "projection_concat_state": (lambda m, x, s: m.nn.dynamic_rnn(
        _rc(m).LSTMCell(N, num_proj=9, state_is_tuple=False), x, initial_state=s), {"s": (B, N + 9)}),
    "projection_as_wide_as_units": (lambda m, x: m.nn.dynamic_rnn(
        _rc(m).LSTMCell(N, num_proj=N), x, dtype=m.float32), {}),
    "all_options": (lambda m, x: m.nn.dynamic_rnn(_rc(m).LSTMCell(
        N, use_peepholes=True, cell_clip=1.0, num_proj=3, proj_clip=0.3), x, dtype=m.float32), {}),
    "bidirectional_projected_stack": (lambda m, x, n: m.nn.bidirectional_dynamic_rnn(
        _rc(m).MultiRNNCell([_rc(m).LSTMCell(N, num_proj=4), _rc(m).GRUCell(3)]), _rc(m).LSTMCell(N, cell_clip=0.3),
        x, sequence_length=n, dtype=m.float32), {}),
    "static_bidirectional_lengths": (lambda m, x, n: m.nn.static_bidirectional_rnn(
        _rc(m).GRUCell(N), _rc(m).LSTMCell(3), m.unstack(x, axis=1), sequence_length=n, dtype=m.float32), {}),
    "static_bidirectional_initial_states": (lambda m, x, h, c: m.nn.static_bidirectional_rnn(
        _rc(m).LSTMCell(3), _rc(m).GRUCell(N), m.unstack(x, axis=1), initial_state_fw=_rc(m).LSTMStateTuple(c, c),
        initial_state_bw=h), {"h": (B, N), "c": (B, 3)}),
    "dropout_wrapper_keep_1_stack": (lambda m, x, n: m.nn.dynamic_rnn(_rc(m).MultiRNNCell([_rc(m).DropoutWrapper(
        _rc(m).LSTMCell(N), input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0), _rc(m).ResidualWrapper(
            _rc(m).GRUCell(N))]), x, sequence_length=n, dtype=m.float32), {}),
    "while_loop_peepholes_projection_lengths": (lambda m, xd, n: m.nn.dynamic_rnn(_rc(m).MultiRNNCell([
        _rc(m).LSTMCell(N, num_proj=4, use_peepholes=True, cell_clip=0.5), _rc(m).GRUCell(3)]), xd,
        sequence_length=n, dtype=m.float32), {}),
    # a forget bias per unit (no number for _FusedLSTMCell's attr: it runs as built; the rewrite raised a
    # TypeError), and one of shape (1,) (it fuses)
    "hand_written_lstm_forget_bias_per_unit": (_hand_lstm(np.linspace(0.0, 1.0, N)), {}),
    "hand_written_lstm_forget_bias_of_one": (_hand_lstm([0.7]), {}),
}
FLOAT64 = {"float64_gru_lstm_bidirectional": (lambda m, x, n: m.nn.bidirectional_dynamic_rnn(
    _rc(m).GRUCell(N), _rc(m).BasicLSTMCell(N), x, sequence_length=n, dtype=m.float64), {})}


def _graph(mod, build, shapes, dtype):
    """(graph, placeholders, fetches: the outputs then the gradients, variable names and shapes, train op)."""
    g = mod.Graph()
    with g.as_default():
        mod.set_random_seed(0)
        args = build.__code__.co_varnames[1:build.__code__.co_argcount]
        phs = {k: mod.placeholder(mod.int32, [None]) if k == "n" else
               mod.placeholder(dtype, [B, None, D] if k == "xd" else shapes[k]) for k in args}
        ys = _flat(build(mod, **phs))
        rng = np.random.default_rng(1)
        loss = mod.add_n([mod.reduce_sum(y * rng.standard_normal(y.shape.as_list()[-1:]).astype(dtype)) for y in ys])
        floats = [p for k, p in phs.items() if k != "n"]
        fetches = ys + mod.gradients(loss, floats + mod.trainable_variables())
        # 0.5: a learning rate float32 holds exactly (TF1 rounds a Python number to float32, tfplus does not)
        train = mod.train.GradientDescentOptimizer(0.5).minimize(loss)
        names = [(v.op.name, tuple(v.shape.as_list())) for v in mod.global_variables()]
    return g, phs, fetches, names, train


def _compare(tf1, build, extra, dtype, tol):
    shapes = {"x": (B, T, D), "xd": (B, T, D), **extra}  # xd: the time dimension unknown (a tf.while_loop)
    rng = np.random.default_rng(0)
    values = {k: LENGTHS if k == "n" else rng.standard_normal(shapes[k]).astype(dtype) for k in
              build.__code__.co_varnames[1:build.__code__.co_argcount]}
    tg, tp, tfetch, tnames, ttrain = _graph(tf1, build, shapes, dtype)
    og, op, ofetch, onames, otrain = _graph(tf, build, shapes, dtype)
    assert onames == tnames
    with tf1.Session(graph=tg) as s:
        s.run(tf1.global_variables_initializer())
        weights = {v.op.name: s.run(v) for v in tg.get_collection("variables")}
        feed = {tp[k]: v for k, v in values.items()}
        theirs = s.run(tfetch, feed)
        s.run(ttrain, feed)
        stepped = {v.op.name: s.run(v) for v in tg.get_collection("variables")}
    for device in DEVICES:
        for config in (None, OFF):
            where = f"{device}, rewrite {'off' if config else 'on'}"
            with tf.Session(graph=og, device=device, config=config) as s:
                with og.as_default():
                    s.run([tf.assign(v, weights[v.op.name]) for v in og.get_collection("variables")])
                feed = {op[k]: v for k, v in values.items()}
                ours = s.run(ofetch, feed)
                s.run(otrain, feed)
                for v in og.get_collection("variables"):
                    np.testing.assert_allclose(s.run(v), stepped[v.op.name], *tol, err_msg=f"{v.op.name}: {where}")
            for k, (a, b) in enumerate(zip(ours, theirs)):
                np.testing.assert_allclose(a, b, *tol, err_msg=f"fetch {k} ({ofetch[k].name}): {where}")


@pytest.mark.parametrize("case", list(CASES))
def test_matches_tf1(tf1, case):
    _compare(tf1, *CASES[case], np.float32, (2e-4, 2e-5))


@pytest.mark.parametrize("case", list(FLOAT64))
def test_float64_matches_tf1(tf1, case):
    """The fused cells compute in float64 (they fuse, and agree with TensorFlow to float64's precision)."""
    build, extra = FLOAT64[case]
    g, phs, fetches, _, _ = _graph(tf, build, {"x": (B, T, D), **extra}, np.float64)
    fused = optimize(g, fetches, list(phs.values())).fused
    assert fused["_FusedGRUCell"] == fused["_FusedGRUCellGrad"] == fused["_FusedLSTMCellGrad"] == T
    _compare(tf1, build, extra, np.float64, (1e-10, 1e-12))


@pytest.mark.parametrize("num_proj, fused", [(3, False), (9, False), (N, True)])
def test_a_projected_lstm_fuses_only_when_its_state_is_as_wide_as_its_units(num_proj, fused):
    """The projected cell's core is BasicLSTMCell's ops, but the fused kernels take the units from the state's
    width: narrower or wider, the step stays as built (the rewrite raised a shape error here before)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [2, T, D])
        y, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.LSTMCell(N, num_proj=num_proj), x, dtype=tf.float32)
        grads = tf.gradients(tf.reduce_sum(y), tf.trainable_variables())
    r = optimize(g, grads, [x])
    cells = {k: v for k, v in r.fused.items() if "Cell" in k}
    assert cells == ({"_FusedLSTMCell": T, "_FusedLSTMCellGrad": T} if fused else {})


def test_dropout_inside_the_wrapper_stays_when_the_cells_fuse(device):
    """DropoutWrapper's dropout is outside the cell: the steps fuse around it, and the fused step draws the same
    masks as the unfused one (the same values), dropping about 1 - keep of the outputs."""
    rc = tf.nn.rnn_cell
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(3)
        x = tf.placeholder(tf.float32, [64, T, D])
        cell = rc.MultiRNNCell([rc.DropoutWrapper(rc.GRUCell(N), input_keep_prob=0.7, state_keep_prob=0.6),
                                rc.DropoutWrapper(rc.LSTMCell(N), output_keep_prob=0.5, state_keep_prob=0.8)])
        y, _ = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        fetches = [y] + tf.gradients(tf.reduce_sum(y * y), [x] + tf.trainable_variables())
        init = tf.global_variables_initializer()
    fused = optimize(g, fetches, [x]).fused
    assert fused["_FusedGRUCell"] == fused["_FusedLSTMCell"] == fused["_FusedLSTMCellGrad"] == T
    feed = {x: np.random.default_rng(0).standard_normal((64, T, D)).astype(np.float32)}
    runs = []
    for config in (None, OFF):
        with tf.Session(graph=g, device=device, config=config) as s:
            s.run(init)
            runs.append(s.run(fetches, feed))
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert abs(np.mean(runs[0][0] == 0) - 0.5) < 0.05


def test_embedding_rows_a_step_does_not_look_up_keep_their_momentum(tf1):
    def run(mod, values=None):
        g = mod.Graph()
        with g.as_default():
            ids = mod.placeholder(mod.int32, [2, T])
            emb = mod.get_variable("emb", [4, D])
            y, _ = mod.nn.dynamic_rnn(mod.nn.rnn_cell.GRUCell(N), mod.nn.embedding_lookup(emb, ids), dtype=mod.float32)
            train = mod.train.MomentumOptimizer(0.1, 0.9).minimize(mod.reduce_sum(y))
            init = mod.global_variables_initializer()
        with mod.Session(graph=g) as s:
            s.run(init)
            if values is None:
                values = {v.op.name: s.run(v) for v in g.get_collection("variables")}
            else:
                with g.as_default():
                    s.run([mod.assign(v, values[v.op.name]) for v in g.get_collection("variables")])
            for rows in ([0, 1], [2, 3]):  # the second step looks up neither row 0 nor row 1
                s.run(train, {ids: np.repeat(np.array(rows, np.int32)[:, None], T, 1)})
            return values, s.run(emb)
    values, theirs = run(tf1)
    np.testing.assert_allclose(run(tf, values)[1], theirs, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("forget_bias, fused", [(np.linspace(0.0, 1.0, N), 0), ([0.7], T), (0.7, T)])
def test_a_hand_written_lstm_fuses_when_its_forget_bias_is_one_number(forget_bias, fused):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [B, T, D])
        y, _ = _hand_lstm(forget_bias)(tf, x)
        grads = tf.gradients(tf.reduce_sum(y), [x] + tf.trainable_variables())
    r = optimize(g, grads, [x])
    assert r.fused.get("_FusedLSTMCell", 0) == r.fused.get("_FusedLSTMCellGrad", 0) == fused
