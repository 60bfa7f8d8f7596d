"""Training against TensorFlow: every optimizer over several steps, and whole small models (an MLP and a small
CNN) with tf.gradients and training, built by the same code in tfplus and in TensorFlow from the same initial
values, end with the same variable values."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf

RNG = np.random.default_rng(12)
X = RNG.standard_normal((6, 5))
Y = RNG.integers(0, 3, 6)
W1, B1 = RNG.standard_normal((5, 4)) * 0.5, RNG.standard_normal(4) * 0.1
W2, B2 = RNG.standard_normal((4, 3)) * 0.5, RNG.standard_normal(3) * 0.1

# name -> builder(lib): the same constructor call in both libraries. Hyperparameters are exact in float32:
# TensorFlow rounds numbers given as hyperparameters to float32 before casting them to a float64 variable's
# dtype, and keeps Adam's beta powers in float32; tfplus uses the variable's dtype for both (README:
# compatibility).
OPTIMIZERS = {
    "sgd": lambda t: t.train.GradientDescentOptimizer(0.125),
    "momentum": lambda t: t.train.MomentumOptimizer(0.125, 0.875),
    "nesterov": lambda t: t.train.MomentumOptimizer(0.0625, 0.875, use_nesterov=True),
    "adam": lambda t: t.train.AdamOptimizer(0.0625, beta1=0.875, beta2=0.9375, epsilon=2.0 ** -20),
    "rmsprop": lambda t: t.train.RMSPropOptimizer(2.0 ** -7, epsilon=2.0 ** -30, decay=0.875),
    "rmsprop_momentum": lambda t: t.train.RMSPropOptimizer(2.0 ** -7, decay=0.75, momentum=0.5,
                                                           epsilon=2.0 ** -20),
    "rmsprop_centered": lambda t: t.train.RMSPropOptimizer(2.0 ** -7, decay=0.75, momentum=0.25,
                                                           epsilon=2.0 ** -20, centered=True),
    "adagrad": lambda t: t.train.AdagradOptimizer(0.125, initial_accumulator_value=0.25),
    "adadelta": lambda t: t.train.AdadeltaOptimizer(1.0, rho=0.875, epsilon=2.0 ** -20),
}


def _mlp(t, dtype):
    """A 5-4-3 MLP with a sparse softmax cross-entropy loss; returns the loss."""
    x = t.placeholder(dtype, [None, 5], name="x")
    y = t.placeholder(t.int32, [None], name="y")
    w1, b1 = t.Variable(W1, dtype=dtype, name="w1"), t.Variable(B1, dtype=dtype, name="b1")
    w2, b2 = t.Variable(W2, dtype=dtype, name="w2"), t.Variable(B2, dtype=dtype, name="b2")
    h = t.nn.relu(t.matmul(x, w1) + b1)
    logits = t.nn.bias_add(t.matmul(h, w2), b2)
    return t.reduce_mean(t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


IMAGES = RNG.standard_normal((2, 7, 7, 2))
ONE_HOT = np.eye(3)[RNG.integers(0, 3, 2)]
K1, C1 = RNG.standard_normal((3, 3, 2, 4)) * 0.3, RNG.standard_normal(4) * 0.1
K2 = RNG.standard_normal((2, 2, 4, 3)) * 0.3
FC = RNG.standard_normal((12, 3)) * 0.3


def _cnn(t, dtype):
    """conv 3x3 SAME + bias + relu, max pool 2x2 SAME (odd size), conv 2x2 stride 2 VALID + tanh, avg pool,
    dense, softmax cross-entropy with one-hot labels, plus an L2 penalty; returns the loss."""
    x = t.placeholder(dtype, [None, 7, 7, 2], name="x")
    y = t.placeholder(dtype, [None, 3], name="y")
    k1, c1 = t.Variable(K1, dtype=dtype, name="k1"), t.Variable(C1, dtype=dtype, name="c1")
    k2, fc = t.Variable(K2, dtype=dtype, name="k2"), t.Variable(FC, dtype=dtype, name="fc")
    h = t.nn.relu(t.nn.bias_add(t.nn.conv2d(x, k1, [1, 1, 1, 1], "SAME"), c1))
    h = t.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")                       # 4x4
    h = t.tanh(t.nn.conv2d(h, k2, [1, 2, 2, 1], "VALID"))                          # 2x2x3
    h = t.nn.avg_pool(h, [1, 2, 2, 1], [1, 1, 1, 1], "SAME")                       # 2x2x3
    logits = t.matmul(t.reshape(h, [-1, 12]), fc)
    xent = t.nn.softmax_cross_entropy_with_logits_v2(labels=y, logits=logits)
    return t.reduce_mean(xent) + 0.01 * t.nn.l2_loss(fc)


MODELS = {"mlp": (_mlp, {"x": X, "y": Y}), "cnn": (_cnn, {"x": IMAGES, "y": ONE_HOT})}


def _train(t, model, opt, dtype, steps, session_kwargs=None):
    """Trains `model`'s loss with optimizer `opt` for `steps` steps; returns {variable name: value}, the losses
    and the gradients of the loss by tf.gradients at the initial values."""
    build, data = MODELS[model]
    g = t.Graph()
    with g.as_default():
        loss = build(t, dtype)
        grads = t.gradients(loss, t.trainable_variables())
        step = opt(t).minimize(loss, global_step=t.train.get_or_create_global_step())
        init = t.global_variables_initializer()
        variables = t.global_variables()
    feeds = {g.get_tensor_by_name(f"{k}:0"): v for k, v in data.items()}
    with t.Session(graph=g, **(session_kwargs or {})) as sess:
        sess.run(init)
        grad_values = sess.run(grads, feeds)
        losses = [sess.run([loss, step], feeds)[0] for _ in range(steps)]
        values = sess.run(variables)
    return dict(zip([v.op.name for v in variables], values)), losses, grad_values


def _check_same(mine, theirs, tol):
    assert sorted(mine) == sorted(theirs), "variable names differ (slots included)"
    for name in theirs:
        np.testing.assert_allclose(mine[name], theirs[name], err_msg=name, **tol)


def _tol(device):
    return {"rtol": 1e-10, "atol": 1e-12} if device == "cpu" else {"rtol": 1e-6, "atol": 1e-8}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_tensorflow(name, tf1, device):
    opt = OPTIMIZERS[name]
    theirs, their_losses, _ = _train(tf1, "mlp", opt, tf1.float64, 5)
    mine, my_losses, _ = _train(tf, "mlp", opt, tf.float64, 5, {"device": device})
    np.testing.assert_allclose(my_losses, their_losses, **_tol(device))
    _check_same(mine, theirs, _tol(device))
    assert my_losses[-1] < my_losses[0]


@pytest.mark.parametrize("model", list(MODELS))
def test_model_gradients_and_training_match_tensorflow(model, tf1, device):
    """tf.gradients of the whole model, then 4 momentum steps: same gradients, losses and variables."""
    opt = OPTIMIZERS["momentum"]
    theirs, their_losses, their_grads = _train(tf1, model, opt, tf1.float64, 4)
    mine, my_losses, my_grads = _train(tf, model, opt, tf.float64, 4, {"device": device})
    for a, b in zip(my_grads, their_grads):
        np.testing.assert_allclose(a, b, **_tol(device))
    np.testing.assert_allclose(my_losses, their_losses, **_tol(device))
    _check_same(mine, theirs, _tol(device))
    assert my_losses[-1] < my_losses[0]


def test_float32_cnn_trains_like_tensorflow(tf1):
    """The same in float32, where the hyperparameters' rounding does not differ."""
    opt = lambda t: t.train.AdamOptimizer(0.01)  # noqa: E731
    theirs, their_losses, _ = _train(tf1, "cnn", opt, tf1.float32, 4)
    mine, my_losses, _ = _train(tf, "cnn", opt, tf.float32, 4)
    np.testing.assert_allclose(my_losses, their_losses, rtol=1e-5)
    _check_same(mine, theirs, {"rtol": 1e-4, "atol": 1e-5})


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_training_graph_exported_to_tensorflow_trains_there_the_same(name, tf1):
    """Our whole training graph (variables, Apply* update ops, init op) as a GraphDef, imported into TensorFlow
    and run there: same variable values as running it here.

    NOTE: GATE_GRAPH. tfplus does not gate gradients per op (GATE_OP, TF's default, would keep gradients alive
    longer and raise peak memory); TensorFlow's executor may then run a variable's update before another
    gradient has read the old value (reference variables alias their reads). Gating all gradients before any
    update makes the exported graph safe to run there."""
    g = tf.Graph()
    with g.as_default():
        loss = _mlp(tf, tf.float64)
        train_op = OPTIMIZERS[name](tf).minimize(loss, global_step=tf.train.get_or_create_global_step(),
                                                 gate_gradients=tf.train.Optimizer.GATE_GRAPH)
        init = tf.global_variables_initializer()
        variables = tf.global_variables()
    feeds = {"x:0": X, "y:0": Y}
    with tf.Session(graph=g) as sess:
        sess.run(init)
        for _ in range(3):
            sess.run(train_op, {g.get_tensor_by_name(k): v for k, v in feeds.items()})
        mine = sess.run(variables)
    from tforacle import import_into_tf
    tg = import_into_tf(tf1, g)
    with tf1.Session(graph=tg) as sess:
        sess.run(tg.get_operation_by_name(init.name))
        for _ in range(3):
            sess.run(tg.get_operation_by_name(train_op.name), feeds)
        theirs = sess.run([tg.get_tensor_by_name(v.name) for v in variables])
    for v, a, b in zip(variables, mine, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=v.op.name)


def test_monitored_session_runs_a_creators_session_and_stops_on_a_coordinators_request():
    """TF1's MonitoredSession(session_creator=...): the creator's session, hooks given the coordinator in
    after_create_session (a stop requested there or between runs is seen before the next run), and, after an
    error, no hook's end() (no checkpoint of what the error left)."""
    class Creator(tf.train.SessionCreator):
        def create_session(self):
            sess = tf.Session()
            sess.run(tf.global_variables_initializer())
            return sess

    class Hook(tf.train.SessionRunHook):
        def __init__(self, stop_after):
            self.stop_after, self.runs, self.ended = stop_after, 0, False

        def after_create_session(self, session, coord):
            self.coord = coord
            if self.stop_after == 0:
                coord.request_stop()

        def after_run(self, run_context, run_values):
            self.runs += 1
            if self.runs == self.stop_after:
                self.coord.request_stop()

        def end(self, session):
            self.ended = True

    with tf.Graph().as_default():
        v = tf.Variable(0.0)
        add = v.assign_add(1.0)
        for stop_after in (0, 2):
            hook = Hook(stop_after)
            with tf.train.MonitoredSession([hook], session_creator=Creator()) as sess:
                while not sess.should_stop():
                    sess.run(add)
            assert (hook.runs, hook.ended) == (stop_after, True)
        hook = Hook(None)
        with pytest.raises(RuntimeError, match="a failure"):
            with tf.train.MonitoredSession([hook], session_creator=Creator()) as sess:
                sess.run(add)
                raise RuntimeError("a failure")
        assert hook.runs == 1 and not hook.ended
        with pytest.raises(ValueError, match="not both"):
            tf.train.MonitoredSession(checkpoint_dir="x", session_creator=Creator())
