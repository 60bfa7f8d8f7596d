"""The graph rewrite (tfplus.engine.rewrite): what it fuses, what it refuses, and that a fused training step equals the
unfused one on every device (the kernels themselves are in the op table: tests/cases_fused.py)."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
from tfplus.engine.rewrite import optimize
from tfplus.graphs.mentee import mentee, training_graph
from tfplus.runtime.facts import device_facts

_SMALL = {"conv_widths": (4, 4, 8, 8, 8), "fc_widths": (16, 8)}


def _types(r) -> list[str]:
    return sorted(op.type for op in r.graph.get_operations())


def _bias_relu():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        z = tf.nn.bias_add(x, tf.constant([1.0, -2.0, 3.0]))
        y = tf.nn.relu(z)
    return g, x, z, y


def _bias_grad(activation):
    """(graph, x, the bias's gradient) of sum(activation(x + b))."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [4, 3])
        b = tf.Variable(tf.zeros([3]))
        (db,) = tf.gradients(tf.reduce_sum(activation(tf.nn.bias_add(x, b))), [b])
    return g, x, db


def test_bias_relu_fuses_and_the_users_graph_is_untouched():
    g, x, z, y = _bias_relu()
    before = g.as_graph_def().SerializeToString(deterministic=True)
    r = optimize(g, [y], [x])
    assert _types(r) == ["Const", "Placeholder", "_FusedBiasAddRelu"]
    assert r.element[y].op.name == y.op.name and r.element[x].op.name == x.op.name
    assert g.as_graph_def().SerializeToString(deterministic=True) == before
    with tf.Session(graph=g) as sess:
        assert np.array_equal(sess.run(y, {x: [[1.0, 1.0, -5.0]]}), [[2.0, 0.0, 0.0]])


def test_refuses_when_the_intermediate_is_fetched_fed_or_read_elsewhere():
    g, x, z, y = _bias_relu()
    assert optimize(g, [y, z], [x]) is None                     # fetched
    assert optimize(g, [y], [x, z]) is None                     # fed: the BiasAdd does not even run
    with g.as_default():
        w = z * 2.0
    assert optimize(g, [y, w], [x]) is None                     # another consumer in the step
    assert optimize(g, [y], [x]) is not None                    # ... which does not count when it does not run
    assert optimize(g, [y, z.op], [x]) is None                  # the BiasAdd fetched as an op


@pytest.mark.parametrize("activation, name", [(tf.nn.relu, "Relu"), (tf.nn.relu6, "Relu6"), (None, "")])
def test_a_dense_layer_fuses_into_one_matmul_op_that_computes_what_the_chain_did(device, activation, name):
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [5, 40])
        w = tf.constant(rng.standard_normal((40, 6)).astype(np.float32))
        p = tf.matmul(x, w)
        z = tf.nn.bias_add(p, tf.constant(rng.standard_normal(6).astype(np.float32)))
        y = activation(z) if activation else z
    r = optimize(g, [y], [x])
    fused = [op for op in r.graph.get_operations() if op.type == "_FusedMatMul"]
    assert len(fused) == 1 and fused[0].attrs["activation"] == name
    assert "MatMul" not in _types(r) and "BiasAdd" not in _types(r)
    kept = optimize(g, [y, p], [x])  # the product fetched: the MatMul stays
    assert kept is None or "_FusedMatMul" not in kept.fused
    feed = {x: rng.standard_normal((5, 40)).astype(np.float32) * 3}
    with tf.Session(graph=g, device=device) as on, tf.Session(graph=g, device=device, config=_OFF) as off:
        np.testing.assert_allclose(on.run(y, feed), off.run(y, feed), rtol=1e-5, atol=1e-6)


def test_relu6_grad_keeps_the_pre_activation_so_only_the_backward_fuses():
    g, x, db = _bias_grad(tf.nn.relu6)
    r = optimize(g, [db], [x])
    assert "_FusedBiasAddRelu" not in r.fused and r.fused["_FusedReluGradBiasAddGrad"] == 1


def _steps(device, data_format, config=None, n=2, optimizer="momentum"):
    rng = np.random.default_rng(0)
    shape = (4, 3, 16, 16) if data_format == "NCHW" else (4, 16, 16, 3)
    x, y = rng.standard_normal(shape).astype(np.float32), rng.integers(0, 10, 4).astype(np.int32)
    tg = training_graph(mentee, total_steps=10, seed=0, data_format=data_format, optimizer=optimizer,
                        image_shape=(3, 16, 16), model_kwargs=_SMALL)
    with tf.Session(graph=tg.graph, device=device, config=config) as sess:
        sess.run(tg.init_op)
        losses = [sess.run([tg.train_op, tg.loss], {tg.images: x, tg.labels: y})[1] for _ in range(n)]
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
        fused = {id(s.rewrite): s.rewrite.fused for s in sess.steps if s.rewrite is not None}  # one per rewrite
    return np.array(losses), weights, fused


_OFF = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
    remapping=tf.RewriterConfig.OFF)))


@pytest.mark.parametrize("data_format, optimizer", [("NCHW", "momentum"), ("NHWC", "sgd"), ("NCHW", "adam")])
def test_a_mentee_step_fused_equals_unfused(device, data_format, optimizer):
    on, w_on, fused = _steps(device, data_format, optimizer=optimizer)
    off, w_off, none = _steps(device, data_format, config=_OFF, optimizer=optimizer)
    assert not none
    (step,) = [f for f in fused.values() if "_FusedReluGradBiasAddGrad" in f]
    np.testing.assert_allclose(on, off, rtol=1e-5)
    for name in w_off:
        np.testing.assert_allclose(w_on[name], w_off[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # 7 ReLUs after a bias: 5 with their conv, 2 with their dense layer's MatMul, and the logits' MatMul and bias;
    # the 16 variables' updates as one op; the 8 weights' L2Losses and their AddN as one op; the cross-entropy,
    # its mean and their gradient as one op
    # (checked last: a GPU also folds ReLU gradients into input gradients and pools, so there the values are
    # what this test checks)
    assert step == {"_FusedConv2DBiasRelu": 5, "_FusedMatMul": 3, "_FusedReluGradBiasAddGrad": 7,
                    "_FusedApply": 1, "_FusedL2Loss": 1, "_FusedSparseXentMean": 1}


def test_the_env_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("TFPLUS_REWRITE", "0")
    _, _, fused = _steps("cpu", "NCHW", n=1)
    assert not fused


def test_the_planner_plans_the_rewritten_step_and_compacts_its_fused_relus(device):
    """A memory plan of the rewritten step (compact state forced: ReLU -> 2x2 pool sites end in fused ops)
    trains as the unfused plain step does."""
    from tfplus import planner
    from tfplus.engine.memory import install
    rng = np.random.default_rng(0)
    tg = training_graph(mentee, total_steps=10, seed=0, image_shape=(3, 16, 16), model_kwargs=_SMALL)
    feeds = {tg.images: rng.standard_normal((4, 3, 16, 16)).astype(np.float32),
             tg.labels: rng.integers(0, 10, 4).astype(np.int32)}
    fetches = [tg.train_op, tg.loss]
    r = optimize(tg.graph, fetches + [tg.init_op], list(feeds))
    new_fetches = [r.element[f] for f in fetches]
    new_feeds = {r.element[t]: v for t, v in feeds.items()}
    with tf.Session(graph=r.graph, device=device, memory_budget="1GB") as sess:
        sess.run(r.element[tg.init_op])
        p = planner.plan(new_fetches, {t: v.shape for t, v in new_feeds.items()}, device_facts(sess.runtime),
                         graph=r.graph, force=(1, 1, True))
        sites = p.phases[0].sites
        assert len(sites) == 3 and {s.relu_grad.type for s in sites} == {"_FusedReluGradBiasAddGrad"}
        install(sess, new_fetches, p)
        planned = [sess.run(new_fetches, new_feeds)[1] for _ in range(2)]
    with tf.Session(graph=tg.graph, device=device, config=_OFF) as sess:
        sess.run(tg.init_op)
        plain = [sess.run(fetches, feeds)[1] for _ in range(2)]
    np.testing.assert_allclose(planned, plain, rtol=1e-5)


def test_a_budgeted_session_plans_the_rewritten_graph():
    rng = np.random.default_rng(0)
    tg = training_graph(mentee, total_steps=10, seed=0, image_shape=(3, 16, 16), model_kwargs=_SMALL)
    feeds = {tg.images: rng.standard_normal((4, 3, 16, 16)).astype(np.float32),
             tg.labels: rng.integers(0, 10, 4).astype(np.int32)}
    with tf.Session(graph=tg.graph, memory_budget="64MB") as sess:
        sess.run(tg.init_op)
        losses = [sess.run([tg.train_op, tg.loss], feeds)[1] for _ in range(2)]
        types = {op.type for p in sess.memory_plans for ph in p.phases for op in ph.order}
    assert "_FusedReluGradBiasAddGrad" in types and "ReluGrad" not in types
    with tf.Session(graph=tg.graph, config=_OFF) as sess:
        sess.run(tg.init_op)
        plain = [sess.run([tg.train_op, tg.loss], feeds)[1] for _ in range(2)]
    np.testing.assert_allclose(losses, plain, rtol=1e-5)


@pytest.mark.parametrize("optimizer", ["momentum", "sgd"])
def test_fused_updates_of_ten_variables_equal_numpy(device, optimizer):
    """One _FusedApply over 10 variables (two launches of 8 slots on opencl) updates each as its own op would."""
    from tfplus.ops.training_ops import apply_gradient_descent, apply_momentum
    rng = np.random.default_rng(0)
    sizes = [1, 3, 7, 300, 2, 5, 11, 13, 1, 257]
    init = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    grads = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    g = tf.Graph()
    with g.as_default():
        vs = [tf.Variable(v) for v in init]
        accs = [tf.Variable(np.full(n, 0.5, np.float32)) for n in sizes]
        lr, mom = tf.constant(0.1), tf.constant(0.9)
        if optimizer == "momentum":
            ups = [apply_momentum(v, a, lr, tf.constant(d), mom, use_nesterov=True)
                   for v, a, d in zip(vs, accs, grads)]
        else:
            ups = [apply_gradient_descent(v, lr, tf.constant(d)) for v, d in zip(vs, grads)]
        step = tf.group(*[u.op for u in ups])
        init_op = tf.variables_initializer(vs + accs)
    r = optimize(g, [step], [])
    assert r.fused == {"_FusedApply": 1}
    with tf.Session(graph=g, device=device) as sess:
        sess.run(init_op)
        for _ in range(2):
            sess.run(step)
        got = [sess.run(v) for v in vs]
    for v0, d, v in zip(init, grads, got):
        want = v0.copy()
        if optimizer == "momentum":
            a = np.full_like(v0, 0.5)
            for _ in range(2):
                a = a * np.float32(0.9) + d
                want -= np.float32(0.1) * (d + np.float32(0.9) * a)
        else:
            want -= 2 * np.float32(0.1) * d
        np.testing.assert_allclose(v, want, rtol=1e-5, atol=1e-6)


def test_gradient_and_update_fusion_refusals():
    """The backward pair is not fused when dx is fed; an update whose output is fetched or read stays alone, and
    only updates sharing their scalar tensors group."""
    from tfplus.ops.training_ops import apply_gradient_descent
    g, x, db = _bias_grad(tf.nn.relu)
    with g.as_default():
        dx = db.op.inputs[0]
        lr = tf.constant(0.5)
        vs = [tf.Variable(tf.zeros([2])) for _ in range(4)]
        ups = [apply_gradient_descent(v, lr, tf.ones([2])) for v in vs[:3]]
        alone = apply_gradient_descent(vs[3], 0.5, tf.ones([2]))  # its own learning-rate constant
        read = ups[2] * 2.0
    assert dx.op.type == "ReluGrad"
    assert optimize(g, [db], [x]).fused == {"_FusedReluGradBiasAddGrad": 1, "_FusedBiasAddRelu": 1}
    assert optimize(g, [db], [x, dx]) is None
    ops = [u.op for u in ups] + [alone.op]

    def members(r):
        (fused,) = [op for op in r.graph.get_operations() if op.type == "_FusedApply"]
        return fused.attrs["num_vars"], {op.name for op in r.graph.get_operations() if op.type.startswith("Apply")}
    assert members(optimize(g, ops, [])) == (3, {alone.op.name})
    assert members(optimize(g, ops + [ups[0]], [])) == (2, {alone.op.name, ups[0].op.name})
    assert optimize(g, ops + [read, ups[0]], []) is None


def test_a_bad_rewrite_switch_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("TFPLUS_REWRITE", "maybe")
    with pytest.raises(ValueError, match="TFPLUS_REWRITE='maybe'"):
        tf.Session(graph=tf.Graph())


def test_weight_decay_sum_fuses_into_one_l2_loss_op_only_when_nothing_else_reads_the_terms(device):
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        ws = [tf.Variable(rng.standard_normal(s).astype(np.float32)) for s in [(3, 3, 2, 4), (300,), (5, 7)]]
        terms = [tf.nn.l2_loss(w) for w in ws]
        total = tf.add_n(terms)
        init = tf.variables_initializer(ws)
    r = optimize(g, [total], [])
    assert r.fused == {"_FusedL2Loss": 1} and r.element[total].op.type == "_FusedL2Loss"
    assert optimize(g, [total, terms[1]], []) is None       # a term fetched
    with g.as_default():
        other = terms[0] * 2.0
    assert optimize(g, [total, other], []) is None          # a term read elsewhere
    with tf.Session(graph=g, device=device) as sess:
        sess.run(init)
        fused, values = sess.run(total), sess.run(ws)
        assert any(s.rewrite is not None and "_FusedL2Loss" in s.rewrite.fused for s in sess.steps)
    with tf.Session(graph=g, device=device, config=_OFF) as sess:
        sess.run(init)
        plain = sess.run(total)
    np.testing.assert_allclose(fused, plain, rtol=1e-6)
    np.testing.assert_allclose(fused, sum(np.dot(v.ravel(), v.ravel()) / 2 for v in values), rtol=1e-5)


@pytest.mark.parametrize("optimizer", ["momentum", "sgd"])
def test_weight_decay_folds_into_the_fused_update(device, optimizer):
    """grad + decay * var (L2Loss's gradient AddN(Mul(var, decay), grad)) becomes the update's own arithmetic for
    the variables that have it (10 variables: two launches of 8 slots on opencl), and trains as the unfused
    graph does; a decay term read elsewhere stays an op."""
    from tfplus.ops.training_ops import apply_gradient_descent, apply_momentum
    rng = np.random.default_rng(1)
    sizes = [1, 3, 7, 300, 2, 5, 11, 13, 1, 257]
    g = tf.Graph()
    with g.as_default():
        vs = [tf.Variable(rng.standard_normal(n).astype(np.float32)) for n in sizes]
        accs = [tf.Variable(np.full(n, 0.5, np.float32)) for n in sizes]
        lr, mom, wd = tf.constant(0.1), tf.constant(0.9), tf.constant(0.05)
        terms = [v * wd if i % 3 != 1 else None for i, v in enumerate(vs)]
        grads = [tf.constant(rng.standard_normal(n).astype(np.float32)) for n in sizes]
        grads = [tf.add_n([t, d]) if t is not None else d for t, d in zip(terms, grads)]
        if optimizer == "momentum":
            ups = [apply_momentum(v, a, lr, d, mom, use_nesterov=True) for v, a, d in zip(vs, accs, grads)]
        else:
            ups = [apply_gradient_descent(v, lr, d) for v, d in zip(vs, grads)]
        step = tf.group(*[u.op for u in ups])
        init_op = tf.variables_initializer(vs + accs)
    r = optimize(g, [step], [])
    (fused,) = [op for op in r.graph.get_operations() if op.type == "_FusedApply"]
    assert fused.attrs["decayed"] == [int(i % 3 != 1) for i in range(10)]
    assert not [op for op in r.graph.get_operations() if op.type in ("AddN", "Mul")]
    (fused,) = [op for op in optimize(g, [step, terms[3]], []).graph.get_operations() if op.type == "_FusedApply"]
    assert fused.attrs["decayed"][3] == 0 and sum(fused.attrs["decayed"]) == 6   # the fetched term stays
    _assert_two_steps_match_unfused(g, device, init_op, step, vs)


def _assert_two_steps_match_unfused(g, device, init_op, step, variables) -> None:
    """Two runs of `step` leave `variables` as they leave them with the graph rewrites off."""
    got = []
    for config in (None, _OFF):
        with tf.Session(graph=g, device=device, config=config) as sess:
            sess.run(init_op)
            for _ in range(2):
                sess.run(step)
            got.append(sess.run(variables))
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_fused_adam_of_ten_variables_equals_the_unfused_updates(device, nesterov):
    """One _FusedApply of ApplyAdam over 10 variables (opencl: two launches of 8 slots) updates each as its own
    ApplyAdam does."""
    from tfplus.ops.training_ops import apply_adam
    rng = np.random.default_rng(2)
    sizes = [1, 3, 7, 300, 2, 5, 11, 13, 1, 257]
    g = tf.Graph()
    with g.as_default():
        vs = [tf.Variable(rng.standard_normal(n).astype(np.float32)) for n in sizes]
        ms = [tf.Variable(rng.standard_normal(n).astype(np.float32)) for n in sizes]
        us = [tf.Variable(rng.uniform(0.1, 1, n).astype(np.float32)) for n in sizes]
        scalars = [tf.constant(c) for c in (0.81, 0.998, 0.01, 0.9, 0.999, 1e-7)]
        ups = [apply_adam(v, m, u, *scalars[:5], scalars[5], tf.constant(rng.standard_normal(n).astype(np.float32)),
                          use_nesterov=nesterov) for v, m, u, n in zip(vs, ms, us, sizes)]
        step = tf.group(*[u.op for u in ups])
        init_op = tf.variables_initializer(vs + ms + us)
    assert optimize(g, [step], []).fused == {"_FusedApply": 1}
    _assert_two_steps_match_unfused(g, device, init_op, step, vs + ms + us)


def _xent_mean(batch, **kw):
    """(graph, logits, labels, loss, d loss / d logits) of a mean sparse cross-entropy over a batch of 6 x 5
    logits (`batch`: the placeholders' leading dimension, None or 6); `kw` goes to tf.gradients."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [batch, 5])
        y = tf.placeholder(tf.int32, [batch])
        rows = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x)
        loss = tf.reduce_mean(rows)
        (dx,) = tf.gradients(loss, [x], **kw)
    return g, x, y, rows, loss, dx


@pytest.mark.parametrize("batch", [None, 6])
def test_a_mean_cross_entropy_and_its_gradient_fuse_into_one_op_with_the_same_bits(device, batch, monkeypatch):
    """The loss, its mean and the gradient chain through both become one _FusedSparseXentMean named as the Mean;
    the logits' gradient keeps its bits (the same 1 / N in the same precision) and the loss its value, on each
    device, with the batch open (the sizes' RealDiv) or known (a constant scale)."""
    import tfplus.engine.rewrite as rewrite
    g, x, y, rows, loss, dx = _xent_mean(batch)
    r = optimize(g, [loss, dx], [x, y])
    assert r.fused == {"_FusedSparseXentMean": 1}
    fused = r.element[loss].op
    assert fused.type == "_FusedSparseXentMean" and fused.name == loss.op.name and r.element[dx].op is fused
    assert not {"Mean", "SparseSoftmaxCrossEntropyWithLogits", "BroadcastTo", "Size"} & set(_types(r))
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((6, 5)).astype(np.float32) * 4, y: rng.integers(0, 5, 6).astype(np.int32)}
    with tf.Session(graph=g, device=device) as sess:
        on = sess.run([loss, dx], feed)
    monkeypatch.setattr(rewrite, "_fused_loss", lambda *a: None)
    assert optimize(g, [loss, dx], [x, y]) is None
    with tf.Session(graph=g, device=device) as sess:
        off = sess.run([loss, dx], feed)
    np.testing.assert_array_equal(on[1], off[1])
    np.testing.assert_allclose(on[0], off[0], rtol=1e-6)
    z = feed[x] - feed[x].max(1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    np.testing.assert_allclose(on[0], np.mean(-np.log(p[np.arange(6), feed[y]])), rtol=1e-5)
    np.testing.assert_allclose(on[1], (p - np.eye(5)[feed[y]]) / 6, rtol=1e-5, atol=1e-7)


def test_the_fused_loss_is_refused_unless_the_chain_is_the_mean_losss_own():
    g, x, y, rows, loss, dx = _xent_mean(None)
    assert "_FusedSparseXentMean" in optimize(g, [loss, dx], [x, y]).fused
    assert optimize(g, [loss, dx, rows], [x, y]) is None                   # the rows' losses fetched
    assert optimize(g, [dx], [x, y]).fused == {"_FusedSparseXentMean": 1}  # the loss itself need not be
    g, x, y, rows, loss, dx = _xent_mean(None, grad_ys=2.0)
    assert optimize(g, [loss, dx], [x, y]) is None                         # not differentiated from ones
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 5])
        y = tf.placeholder(tf.int32, [None])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x))
        (twice,) = tf.gradients(2.0 * loss, [x])
        (plain,) = tf.gradients(loss, [x])
    assert optimize(g, [loss, twice], [x, y]) is None                      # a scaled loss: no ones into the Mean
    assert optimize(g, [loss, twice, plain], [x, y]) is None               # two chains read the backprop
    assert optimize(g, [loss, plain], [x, y]).fused == {"_FusedSparseXentMean": 1}


def test_a_total_losss_ones_reach_the_fused_mean_through_its_sum(device):
    """A loss plus a penalty (tf.add_n): the gradient into the Mean is the total's grad_ys, ones, so the mean
    cross-entropy still fuses, and the step computes what the unfused one does."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 5])
        y = tf.placeholder(tf.int32, [None])
        w = tf.Variable(tf.ones([5, 5]))
        logits = tf.matmul(x, w)
        xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        total = tf.add_n([xent, 0.01 * tf.reduce_sum(w * w)])
        (dw,) = tf.gradients(total, [w])
        init = tf.global_variables_initializer()
    assert optimize(g, [total, dw], [x, y]).fused.get("_FusedSparseXentMean") == 1
    rng = np.random.default_rng(1)
    feed = {x: rng.standard_normal((7, 5)).astype(np.float32), y: rng.integers(0, 5, 7).astype(np.int32)}
    out = {}
    for config in (None, _OFF):
        with tf.Session(graph=g, device=device, config=config) as sess:
            sess.run(init)
            out[config is None] = sess.run([total, dw], feed)
    np.testing.assert_allclose(out[True][0], out[False][0], rtol=1e-6)
    np.testing.assert_allclose(out[True][1], out[False][1], rtol=1e-6, atol=1e-7)


def test_a_label_out_of_range_in_the_fused_loss(device):
    """As the cross-entropy alone: the cpu kernel raises naming the label and the node (the fused op, named as
    the Mean), the opencl one gives a nan loss and nan gradients (TF's GPU kernel)."""
    from tfplus import errors
    g, x, y, rows, loss, dx = _xent_mean(None)
    assert "_FusedSparseXentMean" in optimize(g, [loss, dx], [x, y]).fused
    feed = {x: np.zeros((2, 5), np.float32), y: [0, 5]}
    with tf.Session(graph=g, device=device) as sess:
        if device == "cpu":
            with pytest.raises(errors.InvalidArgumentError, match=r"Mean.*labels\[1\] = 5 is not a class index"):
                sess.run([loss, dx], feed)
        else:
            out = sess.run([loss, dx], feed)
            assert np.isnan(out[0]) and np.isnan(out[1][1]).all() and np.isfinite(out[1][0]).all()


def _cifar10_tutorial_step():
    """(graph, x, y, init op, train op, total loss) shaped as TensorFlow's CIFAR-10 tutorial's train(): a moving
    average of the losses (which reads the cross-entropy), and the gradients computed under control_dependencies
    on it, so the loss's gradient chain must run after an op that reads the loss."""
    g = tf.Graph()
    with g.as_default():
        rng = np.random.default_rng(7)
        x, y = tf.placeholder(tf.float32, [4, 6], name="x"), tf.placeholder(tf.int32, [4], name="y")
        step = tf.train.get_or_create_global_step()
        w1 = tf.Variable(rng.standard_normal((6, 5)).astype(np.float32), name="w1")
        b1 = tf.Variable(np.zeros(5, np.float32), name="b1")
        w2 = tf.Variable(rng.standard_normal((5, 3)).astype(np.float32), name="w2")
        hidden = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w1), b1))
        logits = tf.matmul(hidden, w2)
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        tf.add_to_collection("losses", tf.reduce_mean(xent, name="cross_entropy"))
        tf.add_to_collection("losses", tf.multiply(tf.nn.l2_loss(w1), 0.004, name="weight_loss"))
        total = tf.add_n(tf.get_collection("losses"), name="total_loss")
        loss_averages = tf.train.ExponentialMovingAverage(0.9, name="avg")
        loss_averages_op = loss_averages.apply(tf.get_collection("losses") + [total])
        with tf.control_dependencies([loss_averages_op]):
            opt = tf.train.GradientDescentOptimizer(0.1)
            grads = opt.compute_gradients(total)
        apply_op = opt.apply_gradients(grads, global_step=step)
        variable_averages = tf.train.ExponentialMovingAverage(0.99, step)
        with tf.control_dependencies([apply_op]):
            train = variable_averages.apply(tf.trainable_variables())
        init = tf.global_variables_initializer()
    return g, x, y, init, train, total


def test_cifar10_tutorial_gradients_under_control_dependencies_run_as_unfused():
    """The rewrite leaves the loss unfused (its gradient is ordered after an op reading the loss: fusing them
    would close a cycle) and fuses the rest; two steps give what they give with the rewrite off."""
    g, x, y, init, train, total = _cifar10_tutorial_step()
    variables = g.get_collection("variables")
    feeds = {x: np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6), y: [0, 2, 1, 0]}
    r = optimize(g, [train, total], [x, y])
    assert "_FusedSparseXentMean" not in r.fused and r.fused.get("_FusedMatMul") == 1
    got = []
    for config in (None, _OFF):
        with tf.Session(graph=g, config=config) as sess:
            sess.run(init)
            got.append([sess.run([train, total], feeds)[1] for _ in range(2)] + sess.run(variables))
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _varied_step(seed: int):
    """A small training step drawn by `seed`: one or two dense layers (relu, relu6 or none after a bias), a mean
    sparse cross-entropy, maybe weight decay, an SGD or momentum update, control dependencies drawn among a
    counter's increment, a moving average of the loss and the step's own ops, and extra fetches of
    intermediates. Returns (graph, fetches, feeds)."""
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    with g.as_default():
        x, y = tf.placeholder(tf.float32, [4, 6]), tf.placeholder(tf.int32, [4])
        counter = tf.Variable(0.0, trainable=False)
        h, width, weights, inner = x, 6, [], []
        for _ in range(int(rng.integers(1, 3))):
            w = tf.Variable(rng.standard_normal((width, 5)).astype(np.float32))
            b = tf.Variable(rng.standard_normal(5).astype(np.float32))
            pre = tf.nn.bias_add(tf.matmul(h, w), b)
            act = [tf.nn.relu, tf.nn.relu6, tf.identity][int(rng.integers(3))]
            if rng.random() < 0.3:
                with tf.control_dependencies([counter.assign_add(1.0)]):
                    h = act(pre)
            else:
                h = act(pre)
            weights, width = weights + [w], 5
            inner += [pre, h]
        logits = tf.nn.bias_add(tf.matmul(h, tf.Variable(rng.standard_normal((5, 3)).astype(np.float32))),
                                tf.Variable(np.zeros(3, np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        if rng.random() < 0.5:
            loss = tf.add_n([loss, 0.01 * tf.add_n([tf.nn.l2_loss(w) for w in weights])])
        before = [tf.train.ExponentialMovingAverage(0.5).apply([loss]), counter.assign_add(2.0), loss.op]
        chosen = [before[i] for i in rng.permutation(3)[:int(rng.integers(0, 3))]]
        opt = tf.train.GradientDescentOptimizer(0.1) if rng.random() < 0.5 else tf.train.MomentumOptimizer(0.1, 0.9)
        with tf.control_dependencies(chosen):
            grads = opt.compute_gradients(loss)
        train = opt.apply_gradients(grads)
        extra = [inner[i] for i in rng.permutation(len(inner))[:int(rng.integers(0, 2))]]
        init = tf.global_variables_initializer()
    feeds = {x: rng.standard_normal((4, 6)).astype(np.float32), y: rng.integers(0, 3, 4)}
    return g, init, [train, loss, *extra], feeds


@pytest.mark.parametrize("seed", range(12))
def test_the_rewrite_of_varied_steps_computes_what_the_graph_as_built_does(seed):
    """Property: for each drawn step (fusable or not, ordered or not), two runs with the rewrite on fetch what
    they fetch with it off, and leave the same variables."""
    g, init, fetches, feeds = _varied_step(seed)
    got = []
    for config in (None, _OFF):
        with tf.Session(graph=g, config=config) as sess:
            sess.run(init)
            runs = [sess.run(fetches, feeds)[1:] for _ in range(2)]
            got.append([v for run in runs for v in run] + sess.run(g.get_collection("variables")))
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
