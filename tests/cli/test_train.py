"""tf.train: the Apply* update kernels against their formulas, optimizers against NumPy reimplementations of
TF's updates, slots, the global step, learning-rate schedules."""
import numpy as np
import pytest

import tfplus as tf
import tfplus.ops.training_ops as training_ops
import tfplus.train  # noqa: F401  (tf.train until tfplus/__init__ imports it)
from tfplus.registry import NOT_DIFFERENTIABLE, OPS

train = tf.train


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


RNG = np.random.default_rng(0)
SHAPE = (3, 4)


# -- the Apply* kernels, fed gradients, against the formulas -------------------------------------------------
def _ref_sgd(var, grad, lr):
    return var - lr * grad


def _ref_momentum(var, accum, grad, lr, mom, nesterov):
    accum = accum * mom + grad
    var = var - (lr * grad + lr * mom * accum if nesterov else lr * accum)
    return var, accum


def _ref_adam(var, m, v, grad, t, lr, b1, b2, eps, nesterov=False):
    lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    m = b1 * m + (1 - b1) * grad
    v = b2 * v + (1 - b2) * grad * grad
    num = b1 * m + (1 - b1) * grad if nesterov else m
    return var - lr_t * num / (np.sqrt(v) + eps), m, v


def _tol(dtype):
    return {tf.float16: {"rtol": 1e-2, "atol": 1e-2}, tf.float32: {"rtol": 1e-5, "atol": 1e-5},
            tf.float64: {"rtol": 1e-13, "atol": 1e-13}}[dtype]


def _variables(dtype, *arrays):
    return [tf.Variable(a.astype(dtype.np), name=f"v{i}") for i, a in enumerate(arrays)]


@pytest.mark.parametrize("dtype", [tf.float64, tf.float32, tf.float16])
def test_apply_gradient_descent_kernel(dtype):
    init = RNG.standard_normal(SHAPE)
    [var] = _variables(dtype, init)
    grad = tf.placeholder(dtype, SHAPE)
    out = training_ops.apply_gradient_descent(var, 0.3, grad)
    assert out.op.type == "ApplyGradientDescent" and out.shape.as_list() == list(SHAPE)
    ref = init
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(4):
            g = RNG.standard_normal(SHAPE)
            got = sess.run(out, {grad: g})
            ref = _ref_sgd(ref, g, 0.3)
            np.testing.assert_allclose(got, ref, **_tol(dtype))
        np.testing.assert_allclose(sess.run(var), ref, **_tol(dtype))


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("dtype", [tf.float64, tf.float32])
def test_apply_momentum_kernel(dtype, nesterov):
    init, acc0 = RNG.standard_normal(SHAPE), RNG.standard_normal(SHAPE)
    var, accum = _variables(dtype, init, acc0)
    grad = tf.placeholder(dtype, SHAPE)
    lr = tf.placeholder(dtype, [])
    step = training_ops.apply_momentum(var, accum, lr, grad, 0.9, use_nesterov=nesterov)
    ref_v, ref_a = init, acc0
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for k in range(4):
            g, rate = RNG.standard_normal(SHAPE), 0.1 / (k + 1)
            sess.run(step, {grad: g, lr: rate})
            ref_v, ref_a = _ref_momentum(ref_v, ref_a, g, rate, 0.9, nesterov)
            np.testing.assert_allclose(sess.run(var), ref_v, **_tol(dtype))
            np.testing.assert_allclose(sess.run(accum), ref_a, **_tol(dtype))


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("dtype", [tf.float64, tf.float32])
def test_apply_adam_kernel(dtype, nesterov):
    init = RNG.standard_normal(SHAPE)
    var, m, v = _variables(dtype, init, np.zeros(SHAPE), np.zeros(SHAPE))
    grad = tf.placeholder(dtype, SHAPE)
    b1p, b2p = tf.placeholder(dtype, []), tf.placeholder(dtype, [])
    step = training_ops.apply_adam(var, m, v, b1p, b2p, 0.01, 0.9, 0.999, 1e-8, grad, use_nesterov=nesterov)
    ref = (init, np.zeros(SHAPE), np.zeros(SHAPE))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for t in range(1, 5):
            g = RNG.standard_normal(SHAPE)
            sess.run(step, {grad: g, b1p: 0.9 ** t, b2p: 0.999 ** t})
            ref = _ref_adam(*ref, g, t, 0.01, 0.9, 0.999, 1e-8, nesterov)
            for got, want in zip(sess.run([var, m, v]), ref):
                np.testing.assert_allclose(got, want, **_tol(dtype))


def test_apply_ops_check_shapes_dtypes_and_refs():
    var = tf.Variable(np.zeros(SHAPE), name="w")
    with pytest.raises(ValueError, match=r"ApplyGradientDescent.*delta shape \(4, 3\) vs variable shape"):
        training_ops.apply_gradient_descent(var, 0.1, tf.constant(np.zeros((4, 3))))
    with pytest.raises(ValueError, match="lr must be a scalar"):
        training_ops.apply_momentum(var, var, tf.constant(np.ones(2)), tf.constant(np.zeros(SHAPE)), 0.9)
    with pytest.raises(TypeError, match="float32"):
        training_ops.apply_gradient_descent(var, 0.1, tf.constant(np.zeros(SHAPE, np.float32)))
    not_a_var = tf.constant(np.zeros(SHAPE))
    step = training_ops.apply_gradient_descent(not_a_var, 0.1, tf.constant(np.zeros(SHAPE)))
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match="must be a variable"):
        sess.run(step)
    for op_type in ("ApplyGradientDescent", "ApplyMomentum", "ApplyAdam"):
        assert OPS[op_type].grad is NOT_DIFFERENTIABLE and OPS[op_type].aliases == {0: 0}


# -- optimizers on a quadratic, against NumPy reimplementations of TF's updates -----------------------------
A = np.array([[1.0, 2.0, 0.5], [3.0, 1.5, 1.0]])
C = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]])
W0 = np.zeros_like(A)


def _quadratic(w):
    """loss = sum(A * (w - C)^2), gradient 2 A (w - C)."""
    return tf.reduce_sum(tf.square(w - C) * A)


def _loss(w):
    return float(np.sum(A * (w - C) ** 2))


def _numpy_steps(kind, steps, lr, **kw):
    """TF's update rules, step by step, on the quadratic: the reference the optimizers must match."""
    w, slot1, slot2 = W0.copy(), np.zeros_like(W0), np.zeros_like(W0)
    out = []
    for t in range(1, steps + 1):
        g = 2 * A * (w - C)
        if kind == "sgd":
            w = _ref_sgd(w, g, lr)
        elif kind == "momentum":
            w, slot1 = _ref_momentum(w, slot1, g, lr, kw["momentum"], kw.get("use_nesterov", False))
        else:
            w, slot1, slot2 = _ref_adam(w, slot1, slot2, g, t, lr, 0.9, 0.999, 1e-8)
        out.append(w)
    return out


@pytest.mark.parametrize("kind,make,kw", [
    ("sgd", lambda: train.GradientDescentOptimizer(0.05), {}),
    ("momentum", lambda: train.MomentumOptimizer(0.05, 0.9), {"momentum": 0.9}),
    ("momentum", lambda: train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
     {"momentum": 0.9, "use_nesterov": True}),
    ("adam", lambda: train.AdamOptimizer(0.05), {}),
])
def test_optimizer_matches_tf_update_and_reduces_loss(kind, make, kw):
    w = tf.Variable(W0, name="w")
    train_op = make().minimize(_quadratic(w))
    want = _numpy_steps(kind, 5, 0.05, **kw)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for ref in want:
            sess.run(train_op)
            np.testing.assert_allclose(sess.run(w), ref, rtol=1e-12, atol=1e-14)
    assert _loss(want[-1]) < 0.9 * _loss(W0)


def test_adam_beta_powers_update_after_the_step():
    w = tf.Variable(W0, name="w")
    opt = train.AdamOptimizer(0.05, beta1=0.8, beta2=0.99)
    train_op = opt.minimize(_quadratic(w))
    b1, b2 = opt._get_beta_accumulators()
    assert (b1.name, b2.name) == ("beta1_power:0", "beta2_power:0") and not b1.trainable
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for t in range(1, 4):
            sess.run(train_op)
            np.testing.assert_allclose(sess.run([b1, b2]), [0.8 ** (t + 1), 0.99 ** (t + 1)], rtol=1e-14)


def test_float32_variables_and_a_learning_rate_tensor():
    w = tf.Variable(W0.astype(np.float32), name="w")
    lr = tf.placeholder(tf.float32, [], name="lr")
    loss = tf.reduce_sum(w * A.astype(np.float32))  # gradient A
    train_op = train.MomentumOptimizer(lr, 0.5).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train_op, {lr: 0.1})
        sess.run(train_op, {lr: 0.01})
        got = sess.run(w)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, -(0.1 * A + 0.01 * (0.5 * A + A)), rtol=1e-6)


# -- slots, global step, var_list ---------------------------------------------------------------------------
def test_slots_have_tf_names_and_are_zero_initialized_global_variables():
    w = tf.Variable(np.ones(SHAPE), name="w")
    with tf.variable_scope("fc"):
        b = tf.get_variable("b", [4], tf.float64, initializer=tf.ones_initializer())
    loss = tf.reduce_sum(w * w + b * b)
    mom, adam = train.MomentumOptimizer(0.1, 0.9), train.AdamOptimizer()
    mom.minimize(loss)
    adam.minimize(loss)
    assert mom.get_slot_names() == ["momentum"] and adam.get_slot_names() == ["m", "v"]
    assert mom.get_slot(w, "momentum").name == "w/Momentum:0"
    assert mom.get_slot(b, "momentum").name == "fc/b/Momentum:0"
    assert (adam.get_slot(w, "m").name, adam.get_slot(w, "v").name) == ("w/Adam:0", "w/Adam_1:0")
    assert mom.get_slot(w, "m") is None
    assert [v.name for v in adam.variables()] == ["beta1_power:0", "beta2_power:0", "fc/b/Adam:0",
                                                  "fc/b/Adam_1:0", "w/Adam:0", "w/Adam_1:0"]
    slots = mom.variables() + adam.variables()
    assert all(s in tf.global_variables() and s not in tf.trainable_variables() for s in slots)
    assert tf.trainable_variables() == [w, b]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(adam._get_beta_accumulators()), [0.9, 0.999])
        for s in [x for x in slots if not x.name.startswith("beta")]:
            value = sess.run(s)
            assert value.shape == tuple(s.shape.as_list()) and not value.any()


def test_global_step_creation():
    assert train.get_global_step() is None
    step = train.get_or_create_global_step()
    assert step.name == "global_step:0" and step.dtype is tf.int64 and step.shape.as_list() == []
    assert not step.trainable and step in tf.global_variables()
    assert tf.get_collection(tf.GraphKeys.GLOBAL_STEP) == [step]
    assert train.get_global_step() is step and train.get_or_create_global_step() is step
    with pytest.raises(ValueError, match="already exists"):
        train.create_global_step()
    g = tf.Graph()
    assert train.get_global_step(g) is None and train.create_global_step(g).graph is g


@pytest.mark.parametrize("make", [lambda: train.GradientDescentOptimizer(0.1), lambda: train.AdamOptimizer()])
def test_global_step_increments_once_per_apply_after_the_updates(make):
    w = tf.Variable(W0, name="w")
    step = train.get_or_create_global_step()
    opt = make()
    train_op = opt.minimize(_quadratic(w), global_step=step)
    name = opt.get_name()
    assert train_op.type == "AssignAdd" and train_op.name == name
    assert [c.name for c in train_op.control_inputs] == [f"{name}/update"]
    assert train_op in tf.get_collection(tf.GraphKeys.TRAIN_OP)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for k in range(1, 4):
            sess.run(train_op)
            assert sess.run(step) == k


def test_compute_gradients_returns_none_for_unused_variables_and_apply_skips_them():
    w = tf.Variable(W0, name="w")
    unused = tf.Variable(np.ones(3), name="unused")
    opt = train.MomentumOptimizer(0.1, 0.9)
    grads_and_vars = opt.compute_gradients(_quadratic(w))
    assert [v for _, v in grads_and_vars] == [w, unused]
    assert grads_and_vars[0][0] is not None and grads_and_vars[1][0] is None
    train_op = opt.apply_gradients(grads_and_vars)
    assert opt.get_slot(unused, "momentum") is None
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train_op)
        np.testing.assert_array_equal(sess.run(unused), np.ones(3))
        assert not np.array_equal(sess.run(w), W0)
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        opt.minimize(_quadratic(w), var_list=[unused])
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        opt.apply_gradients([(None, w)])


def test_minimize_with_var_list_updates_only_those():
    w = tf.Variable(W0, name="w")
    u = tf.Variable(W0, name="u")
    train_op = train.GradientDescentOptimizer(0.05).minimize(_quadratic(w) + _quadratic(u), var_list=[u])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train_op)
        np.testing.assert_array_equal(sess.run(w), W0)
        np.testing.assert_allclose(sess.run(u), _numpy_steps("sgd", 1, 0.05)[0], rtol=1e-14)


def test_optimizer_rejects_bad_arguments():
    w = tf.Variable(W0, name="w")
    opt = train.GradientDescentOptimizer(0.1)
    with pytest.raises(TypeError, match="not a tf.Variable"):
        opt.compute_gradients(_quadratic(w), var_list=[tf.constant(1.0)])
    with pytest.raises(ValueError, match="No variables to optimize"):
        tf.reset_default_graph()
        opt.compute_gradients(tf.constant(1.0) * tf.constant(2.0))
    with pytest.raises(TypeError, match="int32"):
        opt.compute_gradients(tf.constant(1) * tf.constant(2))


def test_scalar_variable_and_gate_graph():
    w = tf.Variable(3.0, name="w")
    train_op = train.GradientDescentOptimizer(0.25).minimize(w * w, gate_gradients=train.Optimizer.GATE_GRAPH)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train_op)
        assert sess.run(w) == 1.5  # w - 0.25 * 2w


def test_weight_decay_via_l2_loss_adds_wd_times_w_to_the_gradient():
    w = tf.Variable(W0 + 1.0, name="w")
    b = tf.Variable(np.ones(3), name="b")
    wd = 0.01
    loss = _quadratic(w) + tf.reduce_sum(b) + wd * tf.add_n([tf.nn.l2_loss(v) for v in [w, b]])
    train_op = train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train_op)
        w1 = W0 + 1.0
        np.testing.assert_allclose(sess.run(w), w1 - 0.1 * (2 * A * (w1 - C) + wd * w1), rtol=1e-14)
        np.testing.assert_allclose(sess.run(b), np.ones(3) - 0.1 * (1 + wd), rtol=1e-14)


# -- learning-rate schedules -------------------------------------------------------------------------------
STEPS = [0, 1, 7, 10, 25, 99, 100, 150]


def _schedule_values(make):
    step = tf.placeholder(tf.int64, [], name="step")
    lr = make(step)
    with tf.Session() as sess:
        return lr, [float(sess.run(lr, {step: s})) for s in STEPS]


@pytest.mark.parametrize("make,formula", [
    (lambda s: train.exponential_decay(0.1, s, 10, 0.5), lambda k: 0.1 * 0.5 ** (k / 10)),
    (lambda s: train.exponential_decay(0.1, s, 10, 0.5, staircase=True), lambda k: 0.1 * 0.5 ** (k // 10)),
    (lambda s: train.natural_exp_decay(0.1, s, 10, 0.5), lambda k: 0.1 * np.exp(-0.5 * k / 10)),
    (lambda s: train.inverse_time_decay(0.1, s, 10, 0.5, staircase=True),
     lambda k: 0.1 / (1 + 0.5 * (k // 10))),
    (lambda s: train.polynomial_decay(0.1, s, 100, 0.01, power=2.0),
     lambda k: (0.1 - 0.01) * (1 - min(k, 100) / 100) ** 2 + 0.01),
    (lambda s: train.polynomial_decay(0.1, s, 40, 0.01, cycle=True),
     lambda k: (0.1 - 0.01) * (1 - k / (40 * max(1, np.ceil(k / 40)))) + 0.01),
    (lambda s: train.cosine_decay(0.1, s, 100),
     lambda k: 0.1 * 0.5 * (1 + np.cos(np.pi * min(k, 100) / 100))),
    (lambda s: train.cosine_decay(0.1, s, 100, alpha=0.1),
     lambda k: 0.1 * (0.9 * 0.5 * (1 + np.cos(np.pi * min(k, 100) / 100)) + 0.1)),
    (lambda s: train.piecewise_constant(s, [10, 99], [1.0, 0.5, 0.1]),
     lambda k: 1.0 if k <= 10 else 0.5 if k <= 99 else 0.1),
])
def test_schedules_match_closed_forms(make, formula):
    lr, got = _schedule_values(make)
    assert lr.dtype is tf.float32 and lr.shape.as_list() == []
    np.testing.assert_allclose(got, [formula(k) for k in STEPS], rtol=1e-6, atol=1e-8)  # float32 rates


def test_schedule_names_dtypes_and_errors():
    step = train.get_or_create_global_step()
    lr = train.exponential_decay(tf.constant(0.1, tf.float64), step, 10, 0.5)
    assert lr.op.name == "ExponentialDecay" and lr.dtype is tf.float64
    assert train.cosine_decay(0.1, step, 10, name="lr").op.name == "lr"
    pc = train.piecewise_constant(tf.cast(step, tf.float32), [2.5], [1.0, 2.0])
    assert pc.op.name == "PiecewiseConstant" and pc.dtype is tf.float32
    widened = train.piecewise_constant(step, [tf.constant(1)], [0.1, 0.2])  # int32 boundary, int64 x
    with tf.Session() as sess:
        sess.run(step.initializer)
        assert sess.run([pc, widened]) == [1.0, np.float32(0.1)]
    with pytest.raises(ValueError, match="global_step is required for cosine_decay"):
        train.cosine_decay(0.1, None, 10)
    with pytest.raises(ValueError, match="2 boundaries need 3 values, got 2"):
        train.piecewise_constant(step, [1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="boundary .* float32 but x has int64"):
        train.piecewise_constant(step, [tf.constant(1.0)], [0.1, 0.2])
    with pytest.raises(ValueError, match="one dtype"):
        train.piecewise_constant(step, [1], [tf.constant(0.1), tf.constant(0.2, tf.float64)])
    with pytest.raises(TypeError, match="fraction"):
        train.piecewise_constant(step, [1.5], [0.1, 0.2])


def test_optimizer_follows_a_schedule_of_the_global_step():
    w = tf.Variable(W0, name="w")
    step = train.get_or_create_global_step()
    lr = train.exponential_decay(0.1, step, 1, 0.5)  # float32 rate for a float64 variable: cast
    train_op = train.GradientDescentOptimizer(lr).minimize(_quadratic(w), global_step=step)
    ref = W0
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for k in range(3):
            sess.run(train_op)
            ref = _ref_sgd(ref, 2 * A * (ref - C), np.float64(np.float32(0.1 * 0.5 ** k)))
        np.testing.assert_allclose(sess.run(w), ref, rtol=1e-12)
        assert sess.run(step) == 3
