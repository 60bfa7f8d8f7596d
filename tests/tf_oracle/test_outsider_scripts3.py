"""A third sweep of TF1 graph-mode scripts written from outside the tests that shaped tfplus, of kinds the first
two sweeps and the tutorial, zoo, keras, estimator and io files do not hold: straight-through estimators and
tf.custom_gradient, fake quantization, the proximal optimizers, hand-written beam search, ODE solvers, Sinkhorn
and conjugate gradients in while_loops, Viterbi by tf.scan, message passing by segment ops, metric-learning losses
(contrastive, ArcFace, NT-Xent), SVD and log-determinants in losses, einsum, coupling flows, memory networks, a
convolutional LSTM cell of one's own, ... Each runs with TensorFlow's tf.compat.v1 (the oracle) and with `import
tfplus as tf`, the random numbers fed the same (tutorials.Feeder), and must give the same numbers."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl
from test_outsider_scripts import _steps
from tutorials import _session_run, _trained, check_against_tensorflow, data, script_runner, sessions_on_opencl

from tfplus.unsupported import UnsupportedError

# ---- Gradients of one's own -----------------------------------------------------------------------------------


def straight_through_binarized(tf, feeder):
    """A binarized network (Courbariaux et al. 2016, as the 2017 BNN repos wrote it in TF1): weights and
    activations binarized by sign in the forward pass, the gradient passed straight through by the
    x + stop_gradient(sign(x) - x) trick, clipped to |x| <= 1 by a hard tanh; the real-valued weights clipped
    back into [-1, 1] after each Adam step by a tf.group of assigns under a control dependency."""
    def binarize(x):
        return x + tf.stop_gradient(tf.sign(x) - x)

    def hard_tanh(x):
        return tf.clip_by_value(x, -1.0, 1.0)
    x = tf.placeholder(tf.float32, [None, 8])
    y = tf.placeholder(tf.int32, [None])
    w1 = tf.get_variable("w1", [8, 16], initializer=tf.random_uniform_initializer(-1.0, 1.0))
    w2 = tf.get_variable("w2", [16, 3], initializer=tf.random_uniform_initializer(-1.0, 1.0))
    h = binarize(hard_tanh(tf.matmul(x, binarize(w1))))
    logits = tf.matmul(h, binarize(w2)) / 4.0
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    step = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    with tf.control_dependencies([step]):
        train_op = tf.group(*[v.assign(tf.clip_by_value(v, -1.0, 1.0)) for v in (w1, w2)])
    xs, ys = data(301, ("n", (12, 8)), ("i", (12,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, h], {x: xs, y: ys}, steps=4)
    return _trained(tf, sess, out)


def vq_vae_codebook(tf, feeder):
    """VQ-VAE's vector quantizer (van den Oord 2017, as the 2018 sonnet-free TF1 repos wrote it): encoder
    outputs matched to the nearest codebook row by argmin of expanded squared distances, the codes gathered, the
    codebook and commitment losses by stop_gradient on either side, the decoder fed z + stop_gradient(q - z)."""
    x = tf.placeholder(tf.float32, [None, 6])
    codebook = tf.get_variable("codebook", [5, 3], initializer=tf.random_normal_initializer())
    z = tf.layers.dense(tf.layers.dense(x, 8, tf.nn.relu, name="enc1"), 3, name="enc2")
    distances = (tf.reduce_sum(z ** 2, 1, keepdims=True) - 2 * tf.matmul(z, codebook, transpose_b=True)
                 + tf.reduce_sum(codebook ** 2, 1))
    codes = tf.argmin(distances, 1)
    q = tf.gather(codebook, codes)
    codebook_loss = tf.reduce_mean(tf.square(tf.stop_gradient(z) - q))
    commitment = tf.reduce_mean(tf.square(z - tf.stop_gradient(q)))
    recon = tf.layers.dense(z + tf.stop_gradient(q - z), 6, name="dec")
    loss = tf.reduce_mean(tf.square(recon - x)) + codebook_loss + 0.25 * commitment
    perplexity = tf.exp(-tf.reduce_sum(tf.reduce_mean(tf.one_hot(codes, 5), 0) *
                                       tf.log(tf.reduce_mean(tf.one_hot(codes, 5), 0) + 1e-10)))
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    (xs,) = data(302, ("n", (10, 6)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, codes, perplexity], {x: xs})
    return _trained(tf, sess, out)


def custom_gradient_recipes(tf, feeder):
    """The tf.custom_gradient recipes of TF's docstring and 2019 posts: a numerically stable log1pexp, a gradient
    clipped by norm on the way back, a gradient reversal layer (for domain adaptation) and a function of two
    inputs returning a gradient for each; their gradients fetched beside a trained model that uses them."""
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))
        return tf.log(1 + e), grad

    @tf.custom_gradient
    def clip_gradient(x):
        def grad(dy):
            return tf.clip_by_norm(dy, 0.05)
        return tf.identity(x), grad

    @tf.custom_gradient
    def reverse_gradient(x):
        return tf.identity(x), lambda dy: -0.5 * dy

    @tf.custom_gradient
    def scaled_product(a, b):
        def grad(dy):
            return dy * b * 2.0, tf.reduce_sum(dy * a)
        return a * b, grad
    x = tf.placeholder(tf.float32, [None, 4])
    t = tf.placeholder(tf.float32, [None, 1])
    w = tf.get_variable("w", [4, 1], initializer=tf.random_normal_initializer())
    v = tf.get_variable("v", [4, 1], initializer=tf.random_normal_initializer())
    pred = log1pexp(clip_gradient(tf.matmul(x, w))) + scaled_product(tf.matmul(reverse_gradient(x), v), 0.5)
    loss = tf.reduce_mean(tf.square(pred - t))
    grads = tf.gradients(loss, [w, v])
    probe = tf.constant([-30.0, 0.0, 30.0])
    probe_grad = tf.gradients(log1pexp(probe), probe)[0]
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    xs, ts = data(303, ("n", (8, 4)), ("f", (8, 1)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, grads[0], grads[1]], {x: xs, t: ts})
    out["probe_grad"] = sess.run(probe_grad)
    return _trained(tf, sess, out)


def gradients_api_options(tf, feeder):
    """tf.gradients' less used arguments as optimization code used them: grad_ys weighting each output,
    stop_gradients holding an intermediate fixed, unconnected_gradients='zero' for a variable the loss does not
    read, aggregation_method; a Hessian-vector product by double backprop (the gradient of grad . v), and
    tf.hessians checked against it."""
    a = tf.Variable([1.0, -2.0, 0.5], name="a")
    b = tf.Variable([0.3, 0.7], name="b")
    unused = tf.Variable(1.0, name="unused")
    h = tf.tanh(a * 2.0)
    y = tf.reduce_sum(h ** 2) * tf.reduce_sum(b) + tf.reduce_sum(a * a * b[0])
    weighted = tf.gradients([h, y], [a], grad_ys=[tf.constant([1.0, 2.0, 3.0]), tf.constant(0.5)])[0]
    held = tf.gradients(y, [a, b], stop_gradients=[h])
    zeros = tf.gradients(y, [unused], unconnected_gradients="zero")[0]
    nones = tf.gradients(y, [unused])[0]
    summed = tf.gradients([y, y * 2.0], [a], aggregation_method=tf.AggregationMethod.ADD_N)[0]
    vec = tf.constant([0.1, -0.2, 0.3])
    ga = tf.gradients(y, a)[0]
    hvp = tf.gradients(tf.reduce_sum(ga * tf.stop_gradient(vec)), a)[0]
    hess_vec = tf.squeeze(tf.matmul(tf.hessians(y, a)[0], tf.expand_dims(vec, 1)), 1)
    sess = _session_run(tf, feeder)
    names = ["weighted", "held_a", "held_b", "zeros", "summed", "hvp", "hess_vec"]
    out = dict(zip(names, sess.run([weighted, held[0], held[1], zeros, summed, hvp, hess_vec])))
    out["nones"] = np.array(nones is None)
    return out


def fake_quant_training(tf, feeder):
    """Quantization-aware training as TF1's contrib.quantize rewrote graphs by hand (2018): weights through
    tf.quantization.fake_quant_with_min_max_vars with min/max variables learnt beside them, activations through
    fake_quant_with_min_max_args at a fixed range, 8 and 4 bits, narrow_range; the gradients pass inside the
    range and the min/max get theirs."""
    x = tf.placeholder(tf.float32, [None, 5])
    y = tf.placeholder(tf.float32, [None, 2])
    w = tf.get_variable("w", [5, 2], initializer=tf.random_normal_initializer(stddev=0.5))
    w_min = tf.get_variable("w_min", initializer=-0.6)
    w_max = tf.get_variable("w_max", initializer=0.6)
    qw = tf.quantization.fake_quant_with_min_max_vars(w, w_min, w_max, num_bits=4, narrow_range=True)
    act = tf.quantization.fake_quant_with_min_max_args(tf.matmul(x, qw), min=-2.0, max=2.0, num_bits=8)
    loss = tf.reduce_mean(tf.square(act - y))
    grads = tf.gradients(loss, [w, w_min, w_max])
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    xs, ys = data(305, ("n", (8, 5)), ("n", (8, 2)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, qw, grads[0], grads[1], grads[2]], {x: xs, y: ys})
    return _trained(tf, sess, out)


# ---- Optimizers and schedules ----------------------------------------------------------------------------------

def proximal_optimizers_clipped(tf, feeder):
    """The optimizers 2017 sparse-model code chose, each on its own copy of a linear model, all behind
    compute_gradients, tf.clip_by_global_norm and apply_gradients with a global step: Adadelta, ProximalAdagrad
    and ProximalGradientDescent with L1 and L2, Ftrl with l2_shrinkage, RMSProp with momentum and centered, and
    Adagrad with an initial accumulator."""
    x = tf.constant(data(306, ("n", (6, 4)))[0])
    target = tf.constant([[1.0], [0.0], [2.0], [-1.0], [0.5], [0.0]])
    step = tf.train.get_or_create_global_step()
    optimizers = {
        "adadelta": tf.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-6),
        "proximal_adagrad": tf.train.ProximalAdagradOptimizer(0.2, l1_regularization_strength=0.01,
                                                              l2_regularization_strength=0.02),
        "proximal_sgd": tf.train.ProximalGradientDescentOptimizer(0.1, l1_regularization_strength=0.05,
                                                                  l2_regularization_strength=0.01),
        "ftrl_shrinkage": tf.train.FtrlOptimizer(0.3, l1_regularization_strength=0.01,
                                                 l2_shrinkage_regularization_strength=0.1),
        "rmsprop_centered": tf.train.RMSPropOptimizer(0.01, momentum=0.9, centered=True),
        "adagrad": tf.train.AdagradOptimizer(0.1, initial_accumulator_value=0.5),
    }
    losses, train_ops, norms = {}, [], []
    for name, opt in optimizers.items():
        with tf.variable_scope(name):
            w = tf.get_variable("w", [4, 1], initializer=tf.constant_initializer(0.3))
        losses[name] = tf.reduce_mean(tf.square(tf.matmul(x, w) - target))
        grads, variables = zip(*opt.compute_gradients(losses[name], [w]))
        clipped, norm = tf.clip_by_global_norm(grads, 1.0)
        norms.append(norm)
        train_ops.append(opt.apply_gradients(zip(clipped, variables)))
    with tf.control_dependencies(train_ops):
        train_op = tf.assign_add(step, 1)
    sess = _session_run(tf, feeder)
    out = {name: [] for name in losses}
    out["norms"] = []
    for _ in range(5):
        values, n, _ = sess.run([losses, norms, train_op])
        for k, v in values.items():
            out[k].append(v)
        out["norms"].append(n)
    out = {k: np.array(v) for k, v in out.items()}
    out["step"] = sess.run(step)
    return _trained(tf, sess, out)


def linear_cosine_schedules(tf, feeder):
    """The schedules from 'Neural Optimizer Search' (Bello et al. 2017) TF 1.5 added: linear_cosine_decay and
    noisy_linear_cosine_decay (its noise a random_normal, fed the same to both), beside piecewise_constant on
    float boundaries read through tf.cast of the step and polynomial_decay without cycle past its end."""
    step = tf.train.get_or_create_global_step()
    schedules = {
        "linear_cosine": tf.train.linear_cosine_decay(0.1, step, 6, num_periods=1.5, alpha=0.1, beta=0.01),
        "noisy": tf.train.noisy_linear_cosine_decay(0.1, step, 6, initial_variance=0.5, variance_decay=0.6),
        "piecewise_float": tf.train.piecewise_constant(tf.cast(step, tf.float32), [1.5, 3.5], [0.2, 0.1, 0.05]),
        "polynomial": tf.train.polynomial_decay(0.1, step, 3, 0.02, power=0.5),
    }
    w = tf.Variable([1.0, -1.0])
    loss = tf.reduce_sum(tf.square(w - 0.25))
    lr = schedules["linear_cosine"] + schedules["piecewise_float"] + schedules["polynomial"]
    train_op = tf.train.GradientDescentOptimizer(lr).minimize(loss, global_step=step)
    sess = _session_run(tf, feeder)
    out = {k: [] for k in schedules}
    for _ in range(8):
        for k, v in sess.run(schedules, feeder.feeds(tf)).items():
            out[k].append(v)
        sess.run(train_op)
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


# ---- Loops: search, solvers, dynamic programming ----------------------------------------------------------------

def beam_search_while(tf, feeder):
    """Beam search written by hand before tf.contrib.seq2seq's BeamSearchDecoder (the 2017 NMT forks): a GRU
    cell stepped in a tf.while_loop, log-probabilities added to each beam's score, the top beam_width of the
    flattened beam x vocabulary scores by tf.nn.top_k, parents by floordiv and tokens by floormod, states
    reordered by tf.gather, parents and tokens written into TensorArrays, then the best path walked back from
    the last step by a second while_loop reading them."""
    beam, vocab, steps = 3, 6, 4
    embeddings = tf.get_variable("embeddings", [vocab, 4], initializer=tf.random_normal_initializer())
    cell = tf.nn.rnn_cell.GRUCell(5, name="gru")
    proj = tf.layers.Dense(vocab, name="proj")
    start = tf.zeros([beam], tf.int32)
    state0 = cell.zero_state(beam, tf.float32)
    scores0 = tf.constant([0.0] + [-1e9] * (beam - 1))

    def body(t, tokens, state, scores, parents_ta, tokens_ta):
        out, state = cell(tf.nn.embedding_lookup(embeddings, tokens), state)
        logp = tf.nn.log_softmax(proj(out))
        total = tf.reshape(tf.expand_dims(scores, 1) + logp, [-1])
        best, flat = tf.nn.top_k(total, beam)
        parent, token = flat // vocab, flat % vocab
        return (t + 1, token, tf.gather(state, parent), best, parents_ta.write(t, parent),
                tokens_ta.write(t, token))
    ta = [tf.TensorArray(tf.int32, size=steps) for _ in range(2)]
    _, _, _, scores, parents_ta, tokens_ta = tf.while_loop(
        lambda t, *_: t < steps, body, [tf.constant(0), start, state0, scores0, ta[0], ta[1]])
    parents, tokens = parents_ta.stack(), tokens_ta.stack()

    def back(t, k, path):
        return t - 1, parents[t, k], path.write(t, tokens[t, k])
    _, _, path = tf.while_loop(lambda t, *_: t >= 0, back,
                               [tf.constant(steps - 1), tf.argmax(scores, output_type=tf.int32),
                                tf.TensorArray(tf.int32, size=steps)])
    sess = _session_run(tf, feeder)
    names = ["scores", "parents", "tokens", "best_path"]
    return dict(zip(names, sess.run([scores, parents, tokens, path.stack()])))


def ode_rk4_while(tf, feeder):
    """A neural ODE fitted by backpropagating through the solver (2018-2019 TF1 posts before tfdiffeq): the
    dynamics a small MLP, fourth-order Runge-Kutta steps in a tf.while_loop whose trajectory a TensorArray
    records, the loss on the trajectory against targets; gradients flow back through every step."""
    h = 0.1
    y0 = tf.placeholder(tf.float32, [None, 2])
    targets = tf.placeholder(tf.float32, [5, None, 2])

    def f(y):
        with tf.variable_scope("dynamics", reuse=tf.AUTO_REUSE):
            return tf.layers.dense(tf.layers.dense(y, 8, tf.tanh, name="l1"), 2, name="l2")

    def step(i, y, ta):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return i + 1, y, ta.write(i, y)
    _, y_end, ta = tf.while_loop(lambda i, *_: i < 5, step,
                                 [tf.constant(0), y0, tf.TensorArray(tf.float32, size=5)])
    trajectory = ta.stack()
    loss = tf.reduce_mean(tf.square(trajectory - targets))
    train_op = tf.train.AdamOptimizer(0.02).minimize(loss)
    ys, ts = data(307, ("n", (4, 2)), ("n", (5, 4, 2)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, y_end], {y0: ys, targets: ts * 0.3 + ys})
    return _trained(tf, sess, out)


def sinkhorn_log_domain(tf, feeder):
    """Entropic optimal transport by Sinkhorn iterations in the log domain (Cuturi 2013, as 2018 TF1 code
    wrote it for Wasserstein losses): a cost matrix of pairwise squared distances, the dual potentials updated
    by reduce_logsumexp a fixed number of times in a tf.while_loop, the transport plan and its cost; the
    points' gradient by tf.gradients through the loop moves them."""
    a_pts = tf.Variable(data(308, ("n", (5, 2)))[0], name="a_pts")
    b_pts = tf.constant(data(309, ("n", (4, 2)))[0] + 1.0)
    eps = 0.5
    cost = tf.reduce_sum(tf.square(tf.expand_dims(a_pts, 1) - tf.expand_dims(b_pts, 0)), 2)
    log_a = tf.fill([5], -np.log(5.0).astype(np.float32))
    log_b = tf.fill([4], -np.log(4.0).astype(np.float32))

    def body(i, f, g):
        f = -eps * tf.reduce_logsumexp((tf.expand_dims(g, 0) - cost) / eps + tf.expand_dims(log_b, 0), 1)
        g = -eps * tf.reduce_logsumexp((tf.expand_dims(f, 1) - cost) / eps + tf.expand_dims(log_a, 1), 0)
        return i + 1, f, g
    _, f, g = tf.while_loop(lambda i, f, g: i < 20, body, [0, tf.zeros([5]), tf.zeros([4])])
    plan = tf.exp((tf.expand_dims(f, 1) + tf.expand_dims(g, 0) - cost) / eps + tf.expand_dims(log_a, 1) +
                  tf.expand_dims(log_b, 0))
    distance = tf.reduce_sum(plan * cost)
    train_op = tf.train.GradientDescentOptimizer(0.2).minimize(distance)
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, distance, tf.reduce_sum(plan, 1)], {})
    out["plan"] = sess.run(plan)
    return _trained(tf, sess, out)


def conjugate_gradient_solver(tf, feeder):
    """The conjugate gradient method in the graph (TRPO's natural gradient step, 2017 baselines-style): the
    state a tuple (x, r, p, r.r, i) through a tf.while_loop whose condition stops on the residual or at
    max_iterations, back_prop=False, on a symmetric positive definite A built from a variable; the solution
    checked against tf.matrix_solve."""
    m = tf.constant(data(310, ("n", (4, 4)))[0])
    A = tf.matmul(m, m, transpose_b=True) + 4.0 * tf.eye(4)
    b = tf.constant([[1.0], [2.0], [-1.0], [0.5]])

    def cond(x, r, p, rr, i):
        return tf.logical_and(rr > 1e-10, i < 10)

    def body(x, r, p, rr, i):
        Ap = tf.matmul(A, p)
        alpha = rr / tf.reduce_sum(p * Ap)
        x, r = x + alpha * p, r - alpha * Ap
        rr_new = tf.reduce_sum(r * r)
        return x, r, r + rr_new / rr * p, rr_new, i + 1
    x, _, _, rr, iterations = tf.while_loop(cond, body, (tf.zeros([4, 1]), b, b, tf.reduce_sum(b * b), 0),
                                            back_prop=False)
    direct = tf.matrix_solve(A, b)
    with tf.Session() as sess:
        names = ["x", "rr_small", "iterations", "direct"]
        out = dict(zip(names, sess.run([x, rr < 1e-6, iterations, direct])))
    return out


def viterbi_scan_backtrack(tf, feeder):
    """Viterbi decoding of an HMM in the graph (the 2017 POS-tagging posts): tf.scan over the emission scores
    carrying the best score per state and emitting the argmax back-pointers, then the best path recovered by a
    second tf.scan over the reversed back-pointers, gathered with tf.gather_nd; the transition matrix a trained
    variable whose forward-algorithm likelihood (reduce_logsumexp in a scan) is maximized."""
    emissions = tf.placeholder(tf.float32, [6, 3])
    transitions = tf.get_variable("transitions", [3, 3], initializer=tf.random_normal_initializer(stddev=0.5))

    def viterbi_step(carry, emission):
        best, _ = carry
        scores = tf.expand_dims(best, 1) + transitions
        return tf.reduce_max(scores, 0) + emission, tf.argmax(scores, 0, output_type=tf.int32)
    best, pointers = tf.scan(viterbi_step, emissions[1:], initializer=(emissions[0], tf.zeros([3], tf.int32)))
    last = tf.argmax(best[-1], output_type=tf.int32)

    def back(state, pointer):
        return tf.gather_nd(pointer, tf.expand_dims(state, 0))
    path = tf.concat([tf.reverse(tf.scan(back, tf.reverse(pointers, [0]), initializer=last), [0]),
                      tf.expand_dims(last, 0)], 0)

    def forward(alpha, emission):
        return tf.reduce_logsumexp(tf.expand_dims(alpha, 1) + transitions, 0) + emission
    log_z = tf.reduce_logsumexp(tf.scan(forward, emissions[1:], initializer=emissions[0])[-1])
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(-log_z)
    (em,) = data(311, ("n", (6, 3)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, log_z], {emissions: em})
    # Decoded after training: a fetch beside the train op may read the transitions before or after its update.
    out["path"], out["best"] = sess.run([path, best[-1]], {emissions: em})
    return _trained(tf, sess, out)


def tensorarray_api(tf, feeder):
    """The TensorArray methods 2017-2018 loop code used beyond write and stack: unstack of an input and read in
    the body, an array of no element_shape filled in the loop, scatter at given indices and gather back, written out
    of order and concat'ed, size(), identity; a while_loop with maximum_iterations and parallel_iterations=1;
    and gradients through unstack/read/stack into a variable."""
    seq = tf.placeholder(tf.float32, [5, 3])
    w = tf.Variable(tf.ones([3]) * 0.5, name="w")
    inputs = tf.TensorArray(tf.float32, size=5).unstack(seq)
    grown = tf.TensorArray(tf.float32, size=4)

    def body(i, acc, ta):
        acc = acc * w + inputs.read(i)
        return i + 1, acc, ta.write(i, acc)
    n, acc, grown = tf.while_loop(lambda i, *_: True, body, [0, tf.zeros([3]), grown], maximum_iterations=4,
                                  parallel_iterations=1)
    stacked = grown.stack()
    scattered = tf.TensorArray(tf.float32, size=4).scatter([3, 0, 2, 1], stacked).gather([1, 3])
    pieces = tf.TensorArray(tf.float32, size=3)
    pieces = pieces.write(0, tf.range(2.0)).write(2, tf.range(2.0) * 10).write(1, tf.constant([7.0, 8.0]))
    loss = tf.reduce_sum(tf.square(stacked))
    train_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
    (xs,) = data(312, ("n", (5, 3)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, stacked, scattered, n, grown.size(), pieces.concat()], {seq: xs})
    return _trained(tf, sess, out)


def dynamic_tensorarray_gradient(tf, feeder):
    """An RNN unrolled by hand into a TensorArray(size=0, dynamic_size=True) (the 2017 tutorials' decoder that
    does not know its length), the loss on the stacked outputs trained through the loop."""
    seq = tf.placeholder(tf.float32, [5, 3])
    w = tf.Variable(tf.eye(3) * 0.5, name="w")

    def body(i, h, ta):
        h = tf.tanh(tf.matmul(h, w) + tf.expand_dims(seq[i], 0))
        return i + 1, h, ta.write(i, h[0])
    _, _, outputs = tf.while_loop(lambda i, *_: i < 5, body,
                                  [0, tf.zeros([1, 3]), tf.TensorArray(tf.float32, size=0, dynamic_size=True)])
    loss = tf.reduce_sum(tf.square(outputs.stack() - 0.5))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    sess = _session_run(tf, feeder)
    return _trained(tf, sess, _steps(tf, sess, [train_op, loss], {seq: data(343, ("n", (5, 3)))[0]}))


def fold_and_map_fn(tf, feeder):
    """tf.foldl, tf.foldr and tf.map_fn as functional-style 2017 code wrote them: a running product by foldl, a
    Horner polynomial by foldr with a tuple accumulator, map_fn over a tuple of tensors returning a tuple of two
    dtypes (dtype=(tf.float32, tf.int32)), and a per-example loss by map_fn whose gradient trains a variable."""
    x = tf.placeholder(tf.float32, [4, 3])
    coeffs = tf.Variable([0.5, -1.0, 2.0], name="coeffs")
    prod = tf.foldl(lambda acc, row: acc * row, x, initializer=tf.ones([3]))
    horner, count = tf.foldr(lambda acc, c: (acc[0] * 0.5 + c, acc[1] + 1), coeffs,
                             initializer=(tf.constant(0.0), tf.constant(0)))
    norms, argmaxes = tf.map_fn(lambda row: (tf.norm(row[0] + row[1]), tf.argmax(row[0], output_type=tf.int32)),
                                (x, x * 2.0), dtype=(tf.float32, tf.int32))
    per_example = tf.map_fn(lambda row: tf.reduce_sum(tf.square(row * coeffs - 1.0)), x)
    loss = tf.reduce_mean(per_example)
    train_op = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
    (xs,) = data(313, ("n", (4, 3)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, prod, norms, argmaxes], {x: xs})
    out["horner"], out["count"] = sess.run([horner, count])  # after the steps: it reads the variable
    return _trained(tf, sess, out)


# ---- Segments: graphs, bags, counts ----------------------------------------------------------------------------

def gnn_message_passing(tf, feeder):
    """Message passing on a graph given as an edge list (the 2018 GraphSAGE / MPNN TF1 repos before
    tf-gnn): source features gathered per edge, messages by a dense layer on [h_src, h_dst, edge feature],
    aggregated at each target by unsorted_segment_sum, _mean and _max (isolated nodes get zeros, TF's identity
    for max replaced by tf.where), a GRU-style update, two rounds sharing weights by AUTO_REUSE, node labels
    trained with a mask of labelled nodes."""
    senders = tf.constant([0, 1, 2, 3, 0, 4, 2])
    receivers = tf.constant([1, 2, 3, 0, 2, 1, 4])
    n = 6  # node 5 has no edges
    nodes = tf.placeholder(tf.float32, [n, 4])
    edges = tf.placeholder(tf.float32, [7, 2])
    labels = tf.placeholder(tf.int32, [n])
    mask = tf.constant([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])

    def round_(h):
        with tf.variable_scope("mp", reuse=tf.AUTO_REUSE):
            msg = tf.layers.dense(tf.concat([tf.gather(h, senders), tf.gather(h, receivers), edges], 1), 4,
                                  tf.nn.relu, name="message")
            total = tf.unsorted_segment_sum(msg, receivers, n)
            mean = tf.math.unsorted_segment_mean(msg, receivers, n)
            biggest = tf.unsorted_segment_max(msg, receivers, n)
            has_in = tf.unsorted_segment_sum(tf.ones([7]), receivers, n) > 0
            biggest = tf.where(has_in, biggest, tf.zeros_like(biggest))
            z = tf.layers.dense(tf.concat([h, total, mean, biggest], 1), 4, tf.sigmoid, name="gate")
            return z * h + (1 - z) * tf.layers.dense(tf.concat([total, mean], 1), 4, tf.tanh, name="cand")
    h = round_(round_(nodes))
    logits = tf.layers.dense(h, 3, name="readout")
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits, weights=mask)
    train_op = tf.train.AdamOptimizer(0.02).minimize(loss)
    ns, es, ls = data(314, ("n", (n, 4)), ("n", (7, 2)), ("i", (n,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, h], {nodes: ns, edges: es, labels: ls})
    return _trained(tf, sess, out)


def bag_segment_pooling(tf, feeder):
    """Multi-instance learning over bags of variable size flattened into one batch (the 2018 MIL and
    recommender repos): instance embeddings pooled per bag by the sorted tf.segment_sum, segment_mean,
    segment_max and segment_min, and by sparse_segment_mean and sparse_segment_sqrt_n over ids into an embedding
    table; a bag classifier trained on the concatenation."""
    instances = tf.placeholder(tf.float32, [None, 3])
    bag_ids = tf.placeholder(tf.int32, [None])
    item_ids = tf.placeholder(tf.int32, [None])
    y = tf.placeholder(tf.float32, [None, 1])
    table = tf.get_variable("items", [7, 3], initializer=tf.random_normal_initializer())
    h = tf.layers.dense(instances, 3, tf.nn.relu, name="instance")
    pooled = tf.concat([tf.segment_sum(h, bag_ids), tf.math.segment_mean(h, bag_ids),
                        tf.segment_max(h, bag_ids), tf.segment_min(h, bag_ids),
                        tf.sparse_segment_mean(table, item_ids, bag_ids),
                        tf.sparse_segment_sqrt_n(table, item_ids, bag_ids)], 1)
    logits = tf.layers.dense(pooled, 1, name="bag")
    loss = tf.losses.sigmoid_cross_entropy(y, logits)
    train_op = tf.train.AdagradOptimizer(0.2).minimize(loss)
    (xs,) = data(315, ("n", (9, 3)))
    feed = {instances: xs, bag_ids: [0, 0, 1, 1, 1, 2, 3, 3, 3], item_ids: [1, 2, 3, 6, 0, 4, 5, 5, 2],
            y: [[1.0], [0.0], [1.0], [0.0]]}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, pooled], feed)
    return _trained(tf, sess, out)


def tfidf_unique_counts(tf, feeder):
    """TF-IDF features computed in the graph (the 2017 text-classification posts without sklearn): each
    document's token ids deduplicated by tf.unique_with_counts, term counts by tf.math.bincount with minlength
    and by tf.scatter_nd, document frequencies by a reduce_sum of counts > 0, idf by tf.log, rows normalized by
    tf.nn.l2_normalize; a logistic regression trained on them."""
    docs = tf.placeholder(tf.int32, [3, 6])
    y = tf.placeholder(tf.float32, [3])
    vocab = 8
    counts = tf.stack([tf.math.bincount(docs[i], minlength=vocab, maxlength=vocab, dtype=tf.float32)
                       for i in range(3)])
    uniq, _, uniq_counts = tf.unique_with_counts(docs[0])
    by_scatter = tf.scatter_nd(tf.expand_dims(uniq, 1), uniq_counts, [vocab])
    df = tf.reduce_sum(tf.cast(counts > 0, tf.float32), 0)
    idf = tf.log((1.0 + 3.0) / (1.0 + df)) + 1.0
    tfidf = tf.nn.l2_normalize(counts * idf, 1)
    w = tf.Variable(tf.zeros([vocab]), name="w")
    logits = tf.reduce_sum(tfidf * w, 1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
    train_op = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
    feed = {docs: [[1, 2, 2, 5, 1, 1], [0, 3, 3, 3, 7, 2], [5, 5, 6, 1, 4, 4]], y: [1.0, 0.0, 1.0]}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, tfidf, uniq, uniq_counts, by_scatter], feed)
    return _trained(tf, sess, out)


def confusion_matrix_eval(tf, feeder):
    """An evaluation script's summaries of a classifier (2017-2018): tf.confusion_matrix of labels and
    predictions with num_classes and per-example weights, per-class precision and recall from its diagonal,
    tf.histogram_fixed_width of the logits, tf.math.count_nonzero, tf.nn.in_top_k and the mean of correct ones
    by tf.metrics.mean_per_class_accuracy streamed over two batches."""
    logits = tf.placeholder(tf.float32, [None, 4])
    labels = tf.placeholder(tf.int64, [None])
    weights = tf.placeholder(tf.float32, [None])
    predictions = tf.argmax(logits, 1)
    cm = tf.confusion_matrix(labels, predictions, num_classes=4, weights=weights)
    counts = tf.confusion_matrix(labels, predictions, num_classes=4)
    diag = tf.cast(tf.diag_part(counts), tf.float32)
    precision = diag / tf.maximum(tf.cast(tf.reduce_sum(counts, 0), tf.float32), 1.0)
    recall = diag / tf.maximum(tf.cast(tf.reduce_sum(counts, 1), tf.float32), 1.0)
    hist = tf.histogram_fixed_width(logits, [-2.0, 2.0], nbins=6)
    nonzero = tf.math.count_nonzero(tf.nn.relu(logits), axis=1)
    in_top2 = tf.reduce_mean(tf.cast(tf.nn.in_top_k(logits, tf.cast(labels, tf.int32), 2), tf.float32))
    per_class, update = tf.metrics.mean_per_class_accuracy(labels, predictions, 4)
    batches = [data(316 + i, ("n", (8, 4)), ("i", (8,), 4), ("f", (8,))) for i in range(2)]
    out = {}
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        for i, (ls, ys, ws) in enumerate(batches):
            feed = {logits: ls, labels: ys.astype(np.int64), weights: ws}
            values = sess.run([cm, counts, precision, recall, hist, nonzero, in_top2, update], feed)
            for name, v in zip(["cm", "counts", "precision", "recall", "hist", "nonzero", "in_top2"], values):
                out[f"{name}{i}"] = v
        out["per_class"] = sess.run(per_class)
    return out


# ---- Losses of metric learning and regularization ----------------------------------------------------------------

def siamese_contrastive(tf, feeder):
    """A Siamese network with the contrastive loss (Hadsell et al. 2006, as the 2017 ywpkwon/siamese-tf repos
    wrote it): one tower built twice under variable_scope(reuse=tf.AUTO_REUSE), the Euclidean distance with an
    epsilon under the sqrt, the margin hinge for dissimilar pairs, trained by Momentum."""
    left = tf.placeholder(tf.float32, [None, 6])
    right = tf.placeholder(tf.float32, [None, 6])
    same = tf.placeholder(tf.float32, [None])

    def tower(x):
        with tf.variable_scope("siamese", reuse=tf.AUTO_REUSE):
            h = tf.layers.dense(x, 8, tf.nn.relu, name="fc1")
            return tf.layers.dense(h, 2, name="fc2")
    a, b = tower(left), tower(right)
    distance = tf.sqrt(tf.reduce_sum(tf.square(a - b), 1) + 1e-6)
    margin = 1.0
    loss = tf.reduce_mean(same * tf.square(distance) +
                          (1 - same) * tf.square(tf.maximum(margin - distance, 0.0))) / 2
    train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    ls, rs, ss = data(318, ("n", (8, 6)), ("n", (8, 6)), ("i", (8,), 2))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, distance], {left: ls, right: rs, same: ss.astype(np.float32)})
    out["n_vars"] = np.array(len(tf.trainable_variables()))
    return _trained(tf, sess, out)


def arcface_margin(tf, feeder):
    """ArcFace's additive angular margin (Deng et al. 2018, as the 2018 InsightFace TF1 ports wrote it):
    embeddings and class weights l2-normalized, cos(theta) by matmul, cos(theta + m) expanded by cos/sin with
    sin = sqrt(1 - cos^2), the easy-margin fallback by tf.where on theta + m > pi, only the target logits
    replaced through a one_hot mask, scaled by s; beside it CosFace's cos(theta) - m."""
    x = tf.placeholder(tf.float32, [None, 5])
    y = tf.placeholder(tf.int32, [None])
    emb = tf.layers.dense(x, 4, name="embedding")
    W = tf.get_variable("arc_weights", [4, 3], initializer=tf.random_normal_initializer())
    cos_t = tf.matmul(tf.nn.l2_normalize(emb, 1), tf.nn.l2_normalize(W, 0))
    s, m = 8.0, 0.3
    sin_t = tf.sqrt(tf.maximum(1.0 - tf.square(cos_t), 1e-6))
    cos_mt = cos_t * np.cos(m) - sin_t * np.sin(m)
    cos_mt = tf.where(cos_t > np.cos(np.pi - m), cos_mt, cos_t - np.sin(np.pi - m) * m)
    mask = tf.one_hot(y, 3)
    arc_logits = s * (mask * cos_mt + (1 - mask) * cos_t)
    cos_logits = s * (cos_t - m * mask)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=arc_logits)) + \
        0.5 * tf.losses.sparse_softmax_cross_entropy(y, cos_logits)
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    xs, ys = data(319, ("n", (9, 5)), ("i", (9,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, arc_logits], {x: xs, y: ys})
    return _trained(tf, sess, out)


def simclr_nt_xent(tf, feeder):
    """SimCLR's NT-Xent loss (Chen et al. 2020, as the google-research/simclr TF1 code wrote it): two views'
    projections l2-normalized, the 2N x 2N similarity logits by matmul / temperature with the self-similarity
    masked out by subtracting a large number on the diagonal (tf.one_hot of tf.range), the positive the other
    view, softmax_cross_entropy over [logits_ab, logits_aa] per side."""
    view_a = tf.placeholder(tf.float32, [4, 6])
    view_b = tf.placeholder(tf.float32, [4, 6])

    def head(x):
        with tf.variable_scope("head", reuse=tf.AUTO_REUSE):
            return tf.layers.dense(tf.layers.dense(x, 8, tf.nn.relu, name="h1"), 3, name="h2")
    a, b = tf.nn.l2_normalize(head(view_a), -1), tf.nn.l2_normalize(head(view_b), -1)
    n, temperature, large = 4, 0.5, 1e9
    labels = tf.one_hot(tf.range(n), n * 2)
    masks = tf.one_hot(tf.range(n), n)
    logits_aa = tf.matmul(a, a, transpose_b=True) / temperature - masks * large
    logits_bb = tf.matmul(b, b, transpose_b=True) / temperature - masks * large
    logits_ab = tf.matmul(a, b, transpose_b=True) / temperature
    logits_ba = tf.matmul(b, a, transpose_b=True) / temperature
    loss_a = tf.losses.softmax_cross_entropy(labels, tf.concat([logits_ab, logits_aa], 1))
    loss_b = tf.losses.softmax_cross_entropy(labels, tf.concat([logits_ba, logits_bb], 1))
    loss = loss_a + loss_b
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits_ab, 1), tf.argmax(labels[:, :n], 1)),
                                      tf.float32))
    train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    xs, noise = data(320, ("n", (4, 6)), ("n", (4, 6)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, accuracy], {view_a: xs, view_b: xs + 0.3 * noise})
    return _trained(tf, sess, out)


def tf_losses_family(tf, feeder):
    """The tf.losses functions a 2018 multi-head model summed, each with weights and a reduction: hinge_loss,
    huber_loss with delta, log_loss with epsilon, cosine_distance along an axis, mean_pairwise_squared_error,
    absolute_difference with Reduction.SUM_BY_NONZERO_WEIGHTS and NONE, mean_squared_error with
    loss_collection=None, and tf.losses.get_total_loss adding a regularization loss."""
    x = tf.placeholder(tf.float32, [None, 4])
    t = tf.placeholder(tf.float32, [None, 3])
    w = tf.placeholder(tf.float32, [None, 1])
    out = tf.layers.dense(x, 3, name="head", kernel_regularizer=lambda k: 0.01 * tf.reduce_sum(tf.square(k)))
    probs = tf.sigmoid(out)
    losses = {
        "hinge": tf.losses.hinge_loss(tf.cast(t > 0.5, tf.float32), out, weights=w),
        "huber": tf.losses.huber_loss(t, out, weights=w, delta=0.5),
        "log": tf.losses.log_loss(tf.cast(t > 0.5, tf.float32), probs, epsilon=1e-5),
        "cosine": tf.losses.cosine_distance(tf.nn.l2_normalize(t, 1), tf.nn.l2_normalize(out, 1), axis=1),
        "pairwise": tf.losses.mean_pairwise_squared_error(t, out, weights=2.0),
        "abs_nonzero": tf.losses.absolute_difference(t, out, weights=w * tf.constant([1.0, 0.0, 2.0]),
                                                     reduction=tf.losses.Reduction.SUM_BY_NONZERO_WEIGHTS),
        "mse_uncollected": tf.losses.mean_squared_error(t, out, loss_collection=None),
    }
    per_example = tf.losses.absolute_difference(t, out, reduction=tf.losses.Reduction.NONE, loss_collection=None)
    total = tf.losses.get_total_loss()
    train_op = tf.train.GradientDescentOptimizer(0.05).minimize(total)
    xs, ts, ws = data(321, ("n", (6, 4)), ("f", (6, 3)), ("f", (6, 1)))
    sess = _session_run(tf, feeder)
    feed = {x: xs, t: ts, w: ws}
    result = {}
    for _ in range(3):
        values = sess.run([losses, per_example, total, train_op], feed)
        for k, v in values[0].items():
            result.setdefault(k, []).append(v)
        result.setdefault("per_example", []).append(values[1])
        result.setdefault("total", []).append(values[2])
    result = {k: np.array(v) for k, v in result.items()}
    result["n_losses"] = np.array(len(tf.losses.get_losses()))
    return _trained(tf, sess, result)


def mixup_label_smoothing(tf, feeder):
    """mixup (Zhang et al. 2017, as the 2018 TF1 CIFAR repos wrote it) with label smoothing: the mixing
    coefficient drawn by NumPy's Beta and fed, the batch paired with its reverse (tf.reverse), inputs and one-hot
    labels mixed, tf.losses.softmax_cross_entropy(label_smoothing=0.1) on the mixed targets, and softmax_cross_
    entropy_with_logits_v2 with stop_gradient'ed labels for the clean batch."""
    x = tf.placeholder(tf.float32, [None, 5])
    y = tf.placeholder(tf.int32, [None])
    lam = tf.placeholder(tf.float32, [])
    onehot = tf.one_hot(y, 4)
    mixed_x = lam * x + (1 - lam) * tf.reverse(x, [0])
    mixed_y = lam * onehot + (1 - lam) * tf.reverse(onehot, [0])

    def net(inputs):
        with tf.variable_scope("net", reuse=tf.AUTO_REUSE):
            return tf.layers.dense(tf.layers.dense(inputs, 6, tf.nn.relu, name="fc1"), 4, name="fc2")
    mixed_loss = tf.losses.softmax_cross_entropy(mixed_y, net(mixed_x), label_smoothing=0.1)
    clean = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.stop_gradient(onehot),
                                                                      logits=net(x)))
    train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(mixed_loss)
    xs, ys = data(322, ("n", (8, 5)), ("i", (8,), 4))
    lams = np.random.RandomState(322).beta(0.4, 0.4, 3).astype(np.float32)
    sess = _session_run(tf, feeder)
    out = {"mixed": [], "clean": []}
    for v in lams:
        out["clean"].append(sess.run(clean, {x: xs, y: ys}))  # its own run: it reads the weights the step writes
        out["mixed"].append(sess.run([train_op, mixed_loss], {x: xs, y: ys, lam: v})[1])
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


def masked_token_loss(tf, feeder):
    """A tagger's loss over padded sequences (2018 NER and language-model code): tf.sequence_mask from lengths,
    sparse_softmax_cross_entropy_with_logits per token multiplied by the mask and divided by its sum, the same
    through tf.losses.sparse_softmax_cross_entropy(weights=mask), token accuracy over tf.boolean_mask'ed
    predictions, and the loss per sequence by tf.reduce_sum over time divided by the lengths."""
    tokens = tf.placeholder(tf.float32, [None, 5, 3])
    tags = tf.placeholder(tf.int32, [None, 5])
    lengths = tf.placeholder(tf.int32, [None])
    logits = tf.layers.dense(tokens, 4, name="tagger")
    mask = tf.sequence_mask(lengths, 5, dtype=tf.float32)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tags, logits=logits)
    loss = tf.reduce_sum(xent * mask) / tf.reduce_sum(mask)
    weighted = tf.losses.sparse_softmax_cross_entropy(tags, logits, weights=mask)
    per_sequence = tf.reduce_sum(xent * mask, 1) / tf.cast(lengths, tf.float32)
    bool_mask = tf.sequence_mask(lengths, 5)
    hits = tf.equal(tf.boolean_mask(tf.argmax(logits, -1, output_type=tf.int32), bool_mask),
                    tf.boolean_mask(tags, bool_mask))
    accuracy = tf.reduce_mean(tf.cast(hits, tf.float32))
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss)
    xs, ys = data(323, ("n", (3, 5, 3)), ("i", (3, 5), 4))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, weighted, per_sequence, accuracy],
                 {tokens: xs, tags: ys, lengths: [5, 2, 3]})
    return _trained(tf, sess, out)


# ---- Linear algebra in losses ----------------------------------------------------------------------------------

def linalg_losses(tf, feeder):
    """Linear algebra inside training losses (2018 geometry and probabilistic code): orthogonal Procrustes by
    tf.svd (full_matrices=False) with the rotation U V^T, a nuclear-norm penalty from the singular values, a
    Gaussian negative log-likelihood with the log-determinant by tf.linalg.slogdet and the Mahalanobis term by
    tf.matrix_triangular_solve of a Cholesky factor, a QR factor's R diagonal; the parameters trained in
    float64."""
    src = tf.constant(data(324, ("n", (6, 3)))[0].astype(np.float64))
    dst = tf.constant(data(325, ("n", (6, 3)))[0].astype(np.float64))
    W = tf.Variable(np.eye(3) + 0.1 * data(326, ("n", (3, 3)))[0].astype(np.float64), name="W")
    L_raw = tf.Variable(np.eye(3) * 0.8, name="L_raw")
    s, u, v = tf.svd(tf.matmul(tf.matmul(src, W), dst, transpose_a=True), full_matrices=False)
    rotation = tf.matmul(u, v, transpose_b=True)
    nuclear = tf.reduce_sum(tf.svd(W, compute_uv=False))
    L = tf.matrix_band_part(L_raw, -1, 0) + 1e-3 * tf.eye(3, dtype=tf.float64)
    cov = tf.matmul(L, L, transpose_b=True)
    sign, logdet = tf.linalg.slogdet(cov)
    resid = tf.transpose(tf.matmul(src, W) - dst)
    maha = tf.reduce_sum(tf.square(tf.matrix_triangular_solve(tf.cholesky(cov), resid, lower=True)))
    nll = 0.5 * (6.0 * logdet + maha)
    _, r = tf.qr(tf.matmul(src, W))
    loss = nll + 0.1 * nuclear + tf.reduce_sum(tf.square(rotation - tf.eye(3, dtype=tf.float64)))
    train_op = tf.train.GradientDescentOptimizer(0.005).minimize(loss)
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, s, sign, logdet, tf.abs(tf.diag_part(r)), tf.linalg.det(cov)], {})
    return _trained(tf, sess, out)


def einsum_bilinear(tf, feeder):
    """tf.einsum as 2018-2019 TF1 research code used it: a bilinear attention score 'bi,ij,bkj->bk', batched
    outer products 'bi,bj->bij' pooled over positions 'bti,btj->bij', a trace 'ii', a transpose 'bij->bji', a
    tensor contraction with a weight 'btd,dhk->bthk' (multi-head projection), and 'bthk,bshk->bhts' scores."""
    q = tf.placeholder(tf.float32, [None, 4])
    keys = tf.placeholder(tf.float32, [None, 3, 4])
    seq = tf.placeholder(tf.float32, [None, 5, 4])
    Wb = tf.get_variable("bilinear", [4, 4], initializer=tf.random_normal_initializer(stddev=0.3))
    Wh = tf.get_variable("heads", [4, 2, 3], initializer=tf.random_normal_initializer(stddev=0.3))
    scores = tf.einsum("bi,ij,bkj->bk", q, Wb, keys)
    attended = tf.einsum("bk,bkj->bj", tf.nn.softmax(scores), keys)
    outer = tf.einsum("bi,bj->bij", attended, q)
    pooled = tf.einsum("bti,btj->bij", seq, seq) / 5.0
    trace = tf.einsum("ii", Wb)
    heads = tf.einsum("btd,dhk->bthk", seq, Wh)
    head_scores = tf.einsum("bthk,bshk->bhts", heads, heads)
    loss = tf.reduce_mean(tf.square(outer - tf.einsum("bij->bji", pooled))) + 0.01 * tf.reduce_mean(head_scores) \
        + 0.001 * tf.square(trace)
    train_op = tf.train.AdamOptimizer(0.02).minimize(loss)
    qs, ks, ss = data(327, ("n", (2, 4)), ("n", (2, 3, 4)), ("n", (2, 5, 4)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, scores, head_scores], {q: qs, keys: ks, seq: ss})
    return _trained(tf, sess, out)


def als_matrix_factorization(tf, feeder):
    """Alternating least squares for a ratings matrix (the 2017 implicit-feedback posts): each side's factors
    solved in closed form by tf.matrix_solve_ls with l2_regularizer against the other side held fixed, written
    back by tf.assign, the two half-steps ordered by control_dependencies; the masked RMSE each sweep."""
    ratings = tf.constant(data(328, ("f", (6, 5)))[0] * 4 + 1)
    observed = tf.constant((data(329, ("f", (6, 5)))[0] > 0.3).astype(np.float32))
    users = tf.Variable(data(330, ("n", (6, 2)))[0], name="users")
    items = tf.Variable(data(331, ("n", (5, 2)))[0], name="items")
    # All users observe every item here so one least-squares solve per side covers them.
    new_users = tf.transpose(tf.matrix_solve_ls(items, tf.transpose(ratings), l2_regularizer=0.1))
    update_users = tf.assign(users, new_users)
    with tf.control_dependencies([update_users]):
        update_items = tf.assign(items, tf.transpose(tf.matrix_solve_ls(tf.identity(users), ratings,
                                                                        l2_regularizer=0.1)))
    sweep = tf.group(update_users, update_items)
    rmse = tf.sqrt(tf.reduce_sum(observed * tf.square(tf.matmul(users, items, transpose_b=True) - ratings)) /
                   tf.reduce_sum(observed))
    sess = _session_run(tf, feeder)
    out = {"rmse": []}
    for _ in range(3):
        out["rmse"].append(sess.run(rmse))
        sess.run(sweep)
    out["rmse"] = np.array(out["rmse"])
    return _trained(tf, sess, out)


def realnvp_coupling(tf, feeder):
    """A RealNVP affine coupling flow (Dinh et al. 2016, as the 2018 TF1 density-estimation posts wrote it):
    alternating binary masks, scale and shift from a small network of the masked half (tanh-bounded scale),
    y = x * exp(s) + t on the other half, the log-determinant the sum of s, the density by
    tf.distributions.Normal's log_prob plus the log-determinants; the inverse pass checked to give x back."""
    x = tf.placeholder(tf.float32, [None, 4])
    masks = [np.array([1, 0, 1, 0], np.float32), np.array([0, 1, 0, 1], np.float32)]

    def coupling(h, mask, name, inverse=False):
        with tf.variable_scope(name, reuse=tf.AUTO_REUSE):
            hidden = tf.layers.dense(h * mask, 8, tf.nn.relu, name="hidden")
            s = tf.tanh(tf.layers.dense(hidden, 4, name="scale")) * (1 - mask)
            t = tf.layers.dense(hidden, 4, name="shift") * (1 - mask)
        if inverse:
            return h * mask + (1 - mask) * (h - t) * tf.exp(-s), -tf.reduce_sum(s, 1)
        return h * mask + (1 - mask) * (h * tf.exp(s) + t), tf.reduce_sum(s, 1)
    z, log_det = x, 0.0
    for i, mask in enumerate(masks * 2):
        z, ld = coupling(z, mask, f"coupling{i}")
        log_det += ld
    base = tf.distributions.Normal(loc=0.0, scale=1.0)
    log_prob = tf.reduce_sum(base.log_prob(z), 1) + log_det
    loss = -tf.reduce_mean(log_prob)
    back = z
    for i, mask in reversed(list(enumerate(masks * 2))):
        back, _ = coupling(back, mask, f"coupling{i}", inverse=True)
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    (xs,) = data(332, ("n", (8, 4)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {x: xs * [1.0, 2.0, 0.5, 1.0] + 1.0})
    out["roundtrip_error"] = sess.run(tf.reduce_max(tf.abs(back - x)), {x: xs}) < 1e-4
    return _trained(tf, sess, out)


# ---- Architectures ----------------------------------------------------------------------------------------------

def shufflenet_se_block(tf, feeder):
    """A ShuffleNet unit with a squeeze-and-excitation gate (2018 mobile-vision TF1 repos): a grouped 1x1
    convolution by tf.split into groups and tf.concat, the channel shuffle by reshape-transpose-reshape, a 3x3
    depthwise_conv2d, SE's global average pool, two dense layers and a sigmoid scaling the channels, a residual
    add; batch norm from tf.layers with its UPDATE_OPS run with the step."""
    images = tf.placeholder(tf.float32, [None, 6, 6, 4])
    labels = tf.placeholder(tf.int32, [None])
    training = tf.placeholder_with_default(True, [])

    def group_conv(x, out_channels, groups, name):
        with tf.variable_scope(name):
            parts = tf.split(x, groups, axis=3)
            return tf.concat([tf.layers.conv2d(p, out_channels // groups, 1, name=f"g{i}")
                              for i, p in enumerate(parts)], 3)

    def channel_shuffle(x, groups):
        n, h, w, c = tf.shape(x)[0], x.shape[1], x.shape[2], x.shape[3]
        x = tf.reshape(x, [n, h, w, groups, c // groups])
        return tf.reshape(tf.transpose(x, [0, 1, 2, 4, 3]), [n, h, w, c])
    h = tf.nn.relu(tf.layers.batch_normalization(group_conv(images, 4, 2, "gconv1"), training=training))
    h = channel_shuffle(h, 2)
    dw = tf.get_variable("depthwise", [3, 3, 4, 1], initializer=tf.random_normal_initializer(stddev=0.3))
    h = tf.layers.batch_normalization(tf.nn.depthwise_conv2d(h, dw, [1, 1, 1, 1], "SAME"), training=training)
    h = group_conv(h, 4, 2, "gconv2")
    squeeze = tf.reduce_mean(h, [1, 2])
    excite = tf.layers.dense(tf.layers.dense(squeeze, 2, tf.nn.relu, name="se1"), 4, tf.sigmoid, name="se2")
    h = tf.nn.relu(images + h * tf.reshape(excite, [-1, 1, 1, 4]))
    logits = tf.layers.dense(tf.reduce_mean(h, [1, 2]), 3, name="logits")
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    xs, ys = data(333, ("n", (4, 6, 6, 4)), ("i", (4,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {images: xs, labels: ys})
    out["eval_logits"] = sess.run(logits, {images: xs, training: False})
    return _trained(tf, sess, out, names=[v.op.name for v in tf.global_variables()])


def memory_network_hops(tf, feeder):
    """End-to-end memory networks (Sukhbaatar et al. 2015, as the 2016 bAbI TF repos wrote them): story
    sentences and the question embedded as bags of words with the position encoding, input and output memories
    by separate embeddings, three hops of softmax attention over the memories with adjacent weight tying
    (hop k's output embedding is hop k+1's input), the answer by a final projection; gradients clipped by
    norm per variable with tf.clip_by_norm in a compute/apply loop."""
    story = tf.placeholder(tf.int32, [None, 4, 3])
    question = tf.placeholder(tf.int32, [None, 3])
    answer = tf.placeholder(tf.int32, [None])
    vocab, d, hops = 9, 5, 3
    J, D = 3, d
    encoding = np.array([[(1 - j / J) - (k / D) * (1 - 2 * j / J) for k in range(1, D + 1)]
                         for j in range(1, J + 1)], np.float32)
    embeddings = [tf.get_variable(f"C{k}", [vocab, d], initializer=tf.random_normal_initializer(stddev=0.1))
                  for k in range(hops + 1)]
    u = tf.reduce_sum(tf.nn.embedding_lookup(embeddings[0], question) * encoding, 1)
    for k in range(hops):
        m = tf.reduce_sum(tf.nn.embedding_lookup(embeddings[k], story) * encoding, 2)
        c = tf.reduce_sum(tf.nn.embedding_lookup(embeddings[k + 1], story) * encoding, 2)
        p = tf.nn.softmax(tf.reduce_sum(m * tf.expand_dims(u, 1), 2))
        u = u + tf.reduce_sum(c * tf.expand_dims(p, 2), 1)
    logits = tf.matmul(u, embeddings[-1], transpose_b=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=answer, logits=logits))
    opt = tf.train.GradientDescentOptimizer(0.5)
    grads = [(tf.clip_by_norm(g, 0.5), v) for g, v in opt.compute_gradients(loss)]
    train_op = opt.apply_gradients(grads)
    ss, qs, ans = data(334, ("i", (3, 4, 3), vocab), ("i", (3, 3), vocab), ("i", (3,), vocab))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, p], {story: ss, question: qs, answer: ans})
    return _trained(tf, sess, out)


def convlstm_cell_of_ones_own(tf, feeder):
    """A convolutional LSTM cell written as an RNNCell subclass (Shi et al. 2015, as the 2017 precipitation-
    nowcasting TF1 repos wrote it before contrib's ConvLSTMCell): state_size and output_size TensorShapes of
    [h, w, c], the four gates from one conv2d of [x, h] split along channels, an LSTMStateTuple state, run by
    tf.nn.dynamic_rnn over a batch of frame sequences with sequence_length."""
    class ConvLSTMCell(tf.nn.rnn_cell.RNNCell):
        def __init__(self, shape, filters, kernel):
            super().__init__()
            self._shape, self._filters, self._kernel = shape, filters, kernel

        @property
        def state_size(self):
            size = tf.TensorShape(self._shape + [self._filters])
            return tf.nn.rnn_cell.LSTMStateTuple(size, size)

        @property
        def output_size(self):
            return tf.TensorShape(self._shape + [self._filters])

        def call(self, x, state):
            c, h = state
            channels = x.shape[-1].value if hasattr(x.shape[-1], "value") else x.shape[-1]
            kernel = tf.get_variable("kernel", self._kernel + [channels + self._filters, 4 * self._filters],
                                     initializer=tf.random_normal_initializer(stddev=0.2))
            bias = tf.get_variable("bias", [4 * self._filters], initializer=tf.zeros_initializer())
            gates = tf.nn.conv2d(tf.concat([x, h], 3), kernel, [1, 1, 1, 1], "SAME") + bias
            i, j, f, o = tf.split(gates, 4, axis=3)
            c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
            h = tf.sigmoid(o) * tf.tanh(c)
            return h, tf.nn.rnn_cell.LSTMStateTuple(c, h)
    frames = tf.placeholder(tf.float32, [None, 4, 5, 5, 1])
    lengths = tf.placeholder(tf.int32, [None])
    target = tf.placeholder(tf.float32, [None, 5, 5, 1])
    cell = ConvLSTMCell([5, 5], 3, [3, 3])
    outputs, state = tf.nn.dynamic_rnn(cell, frames, sequence_length=lengths, dtype=tf.float32)
    prediction = tf.layers.conv2d(state.h, 1, 1, name="readout")
    loss = tf.reduce_mean(tf.square(prediction - target))
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    fs, ts = data(335, ("f", (2, 4, 5, 5, 1)), ("f", (2, 5, 5, 1)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, outputs[:, -1]], {frames: fs, lengths: [4, 2], target: ts})
    return _trained(tf, sess, out)


def lstm_peephole_projection(tf, feeder):
    """The LSTM variants of Google's 2014 speech LSTMs as TF1 exposed them: tf.nn.rnn_cell.LSTMCell with
    use_peepholes, cell_clip, num_proj and proj_clip, stacked in a MultiRNNCell with a ResidualWrapper on the
    second layer, unrolled by tf.nn.static_rnn over tf.unstack'ed inputs; an utterance classifier."""
    x = tf.placeholder(tf.float32, [None, 4, 3])
    y = tf.placeholder(tf.int32, [None])
    cells = [tf.nn.rnn_cell.LSTMCell(6, use_peepholes=True, cell_clip=1.0, num_proj=3, proj_clip=0.8,
                                     name="lstm0"),
             tf.nn.rnn_cell.ResidualWrapper(tf.nn.rnn_cell.LSTMCell(5, use_peepholes=True, num_proj=3,
                                                                    name="lstm1"))]
    outputs, state = tf.nn.static_rnn(tf.nn.rnn_cell.MultiRNNCell(cells), tf.unstack(x, axis=1), dtype=tf.float32)
    logits = tf.layers.dense(outputs[-1], 2, name="logits")
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    train_op = tf.train.RMSPropOptimizer(0.02).minimize(loss)
    xs, ys = data(336, ("n", (3, 4, 3)), ("i", (3,), 2))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, state[0].c, state[1].h], {x: xs * 2, y: ys})
    return _trained(tf, sess, out)


def film_conditioning(tf, feeder):
    """FiLM (Perez et al. 2017, as the 2018 visual-reasoning TF1 repos wrote it): a question encoded by a GRU
    run by dynamic_rnn, its final state projected to a per-channel gamma and beta for each of two conv blocks,
    the feature maps modulated as (1 + gamma) * h + beta after batch normalization with center and scale off."""
    images = tf.placeholder(tf.float32, [None, 5, 5, 2])
    words = tf.placeholder(tf.int32, [None, 4])
    answer = tf.placeholder(tf.int32, [None])
    embed = tf.get_variable("words", [7, 3], initializer=tf.random_normal_initializer())
    _, q = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(4, name="qgru"), tf.nn.embedding_lookup(embed, words),
                             dtype=tf.float32)
    h = images
    for k in range(2):
        with tf.variable_scope(f"block{k}"):
            film = tf.layers.dense(q, 2 * 3, name="film")
            gamma, beta = tf.split(tf.reshape(film, [-1, 1, 1, 6]), 2, axis=3)
            h = tf.layers.conv2d(h, 3, 3, padding="same", use_bias=False, name="conv")
            h = tf.layers.batch_normalization(h, center=False, scale=False, training=True)
            h = tf.nn.relu((1 + gamma) * h + beta)
    logits = tf.layers.dense(tf.reduce_max(h, [1, 2]), 3, name="classifier")
    loss = tf.losses.sparse_softmax_cross_entropy(answer, logits)
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    xs, ws, ans = data(337, ("n", (3, 5, 5, 2)), ("i", (3, 4), 7), ("i", (3,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {images: xs, words: ws, answer: ans})
    return _trained(tf, sess, out)


# ---- Text, speech, frameworks, randomness -----------------------------------------------------------------------

def char_ngram_text(tf, feeder):
    """fastText-style features from raw strings in the graph (2018-2019 TF1 text code): lower-casing by
    tf.strings.lower, punctuation removed by tf.strings.regex_replace, tokens by tf.strings.split into a
    SparseTensor made dense with a pad word, word bigrams by tf.strings.ngrams with a separator, both looked up
    in a vocabulary table (index_table_from_tensor with a default), embedded, averaged over non-pad positions and
    classified; tf.strings.length and tf.strings.reduce_join fetched beside."""
    sentences = tf.placeholder(tf.string, [None])
    labels = tf.placeholder(tf.int32, [None])
    clean = tf.strings.regex_replace(tf.strings.lower(sentences), "[.,!?]", "")
    words = tf.sparse.to_dense(tf.strings.split(clean, sep=" "), default_value="<pad>")
    bigrams = tf.strings.ngrams(words, 2, separator="_")
    vocab = ["<pad>", "the", "cat", "sat", "dog", "ran", "the_cat", "cat_sat", "the_dog", "dog_ran"]
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(vocab, tf.range(10, dtype=tf.int64)), 10)
    ids = tf.concat([table.lookup(words), table.lookup(bigrams)], 1)
    embeddings = tf.get_variable("embeddings", [11, 4], initializer=tf.random_normal_initializer())
    keep = tf.cast(tf.not_equal(ids, 0), tf.float32)
    doc = tf.reduce_sum(tf.nn.embedding_lookup(embeddings, ids) * tf.expand_dims(keep, 2), 1) / \
        tf.reduce_sum(keep, 1, keepdims=True)
    logits = tf.layers.dense(doc, 2, name="classifier")
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdagradOptimizer(0.3).minimize(loss)
    sess = _session_run(tf, feeder)
    sess.run(tf.tables_initializer())
    feed = {sentences: ["The cat sat.", "the dog ran!", "Dog, the cat?"], labels: [0, 1, 0]}
    out = _steps(tf, sess, [train_op, loss, ids], feed)
    lengths, joined, grams = sess.run([tf.strings.length(clean), tf.strings.reduce_join(words, 1, separator="|"),
                                       bigrams], feed)
    out.update(lengths=lengths, joined=joined.astype(str), bigrams=grams.astype(str))
    return _trained(tf, sess, out)


def ctc_dense_labels(tf, feeder):
    """A speech or handwriting model on TF 1.14's CTC interface: tf.nn.ctc_loss_v2 with dense padded labels,
    label_length and logit_length, batch-major logits (logits_time_major=False) and the blank last, trained by
    Adam; decoded by tf.nn.ctc_greedy_decoder on time-major logits and scored by tf.edit_distance against
    labels made sparse by tf.contrib-free dense-to-sparse (tf.where of non-padding)."""
    feats = tf.placeholder(tf.float32, [None, 7, 3])
    labels = tf.placeholder(tf.int32, [None, 3])
    label_length = tf.placeholder(tf.int32, [None])
    logits = tf.layers.dense(tf.layers.dense(feats, 8, tf.tanh, name="enc"), 5, name="out")
    loss = tf.reduce_mean(tf.nn.ctc_loss_v2(labels, logits, label_length, tf.fill([tf.shape(feats)[0]], 7),
                                            logits_time_major=False, blank_index=-1))
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss)
    decoded, neg_log = tf.nn.ctc_greedy_decoder(tf.transpose(logits, [1, 0, 2]), tf.fill([tf.shape(feats)[0]], 7))
    where = tf.where(tf.sequence_mask(label_length, 3))
    truth = tf.SparseTensor(where, tf.gather_nd(labels, where), tf.shape(labels, out_type=tf.int64))
    cer = tf.reduce_mean(tf.edit_distance(tf.cast(decoded[0], tf.int32), truth))
    fs, ls = data(338, ("n", (2, 7, 3)), ("i", (2, 3), 4))
    feed = {feats: fs, labels: ls, label_length: [3, 2]}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], feed, steps=4)
    dense, nl, c = sess.run([tf.sparse.to_dense(decoded[0], -1), neg_log, cer], feed)
    out.update(decoded=dense, neg_log=nl, cer=c)
    return _trained(tf, sess, out)


def keras_dataset_fit_weights(tf, feeder):
    """tf.keras in a TF 1.13-1.15 graph-mode script: a functional model fit on a tf.data.Dataset of (features,
    labels) with steps_per_epoch, a LambdaCallback recording each batch's loss, evaluate and predict on
    datasets, save_weights in TensorFlow's checkpoint format, a second model of the same layers load_weights
    from it and predict the same."""
    import tempfile
    keras = tf.keras
    xs, ys = data(339, ("n", (12, 5)), ("i", (12,), 3))

    def build():
        inputs = keras.Input((5,))
        h = keras.layers.Dense(6, activation="tanh")(inputs)
        return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(h))
    model = build()
    model.set_weights([np.linspace(-0.5, 0.5, w.size, dtype=np.float32).reshape(w.shape)
                       for w in model.get_weights()])
    model.compile(keras.optimizers.SGD(0.2, momentum=0.5), "sparse_categorical_crossentropy", metrics=["accuracy"])
    dataset = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(4).repeat()
    batch_losses = []
    record = keras.callbacks.LambdaCallback(on_batch_end=lambda batch, logs: batch_losses.append(logs["loss"]))
    history = model.fit(dataset, epochs=2, steps_per_epoch=3, verbose=0, callbacks=[record])
    out = {"loss": np.array(history.history["loss"]), "batch_losses": np.array(batch_losses)}
    out["evaluate"] = np.array(model.evaluate(tf.data.Dataset.from_tensor_slices((xs, ys)).batch(6), verbose=0))
    out["predict"] = model.predict(tf.data.Dataset.from_tensor_slices(xs).batch(5))
    with tempfile.TemporaryDirectory() as folder:
        model.save_weights(folder + "/weights")
        again = build()
        again.load_weights(folder + "/weights")
        out["reloaded"] = again.predict(xs)
    return out


def random_seed_determinism(tf, feeder):
    """The reproducibility checks of 2018 scripts that set tf.set_random_seed: with a graph seed, the same
    graph in two sessions draws the same sequence; each run of an op draws new numbers; two ops of the same op
    seed in one graph draw the same; op seeds without a graph seed repeat across sessions; tf.random.shuffle and
    dropout with seeds repeat too. (TF's generator's numbers themselves are its own: the checks are the rules.)"""
    def draws(graph_seed):
        with tf.Graph().as_default() as g:
            if graph_seed is not None:
                tf.set_random_seed(graph_seed)
            a = tf.random_uniform([3])
            b = tf.random_normal([2], seed=5)
            c = tf.random_normal([2], seed=5)
            shuffled = tf.random.shuffle(tf.range(6), seed=2)
            dropped = tf.nn.dropout(tf.ones([8]), rate=0.5, seed=3)
            runs = []
            for _ in range(2):
                with tf.Session(graph=g) as sess:
                    runs.append([sess.run([a, b, c, shuffled, dropped]) for _ in range(2)])
            return runs
    out = {}
    for graph_seed in (1, None):
        (first, second), (again, _) = draws(graph_seed)
        key = f"seed{graph_seed}"
        out[key + "_sessions_same"] = np.array([np.array_equal(x, y) for x, y in zip(first, again)])
        out[key + "_runs_differ"] = np.array([not np.array_equal(x, y) for x, y in zip(first, second)])
        out[key + "_op_seed_twins"] = np.array(np.array_equal(first[1], first[2]))
        out[key + "_shuffle_is_permutation"] = np.sort(first[3])
        out[key + "_dropout_values"] = np.unique(first[4])
    return out


def c3d_video_clips(tf, feeder):
    """Action recognition on short clips with 3D convolutions (C3D, Tran et al. 2015, as the 2017 TF1 repos
    wrote it): tf.nn.conv3d with a [3, 3, 3, in, out] kernel and SAME padding, tf.nn.max_pool3d over time and
    space, tf.layers.conv3d for the second block, a dense classifier on the flattened features."""
    clips = tf.placeholder(tf.float32, [None, 4, 6, 6, 1])
    labels = tf.placeholder(tf.int32, [None])
    kernel = tf.get_variable("conv1", [3, 3, 3, 1, 3], initializer=tf.random_normal_initializer(stddev=0.3))
    h = tf.nn.relu(tf.nn.conv3d(clips, kernel, [1, 1, 1, 1, 1], "SAME"))
    h = tf.nn.max_pool3d(h, [1, 1, 2, 2, 1], [1, 1, 2, 2, 1], "VALID")
    h = tf.layers.conv3d(h, 4, 3, strides=(2, 1, 1), padding="valid", activation=tf.nn.relu, name="conv2")
    logits = tf.layers.dense(tf.layers.flatten(h), 3, name="fc")
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.MomentumOptimizer(0.02, 0.9).minimize(loss)
    xs, ys = data(340, ("n", (2, 4, 6, 6, 1)), ("i", (2,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {clips: xs, labels: ys})
    return _trained(tf, sess, out)


def numpy_function_dataset(tf, feeder):
    """NumPy preprocessing inside a tf.data pipeline (the 2019 posts' librosa/OpenCV pattern): tf.numpy_function
    returning two arrays of two dtypes from a NumPy function, the lost static shapes put back by set_shape in
    the map, a tf.py_func beside it in the graph; the batches train a model."""
    def standardize(x, k):
        x = (x - x.mean()) / (x.std() + 1e-6)
        return x.astype(np.float32), np.int32(k % 3)

    def parse(x, k):
        feats, label = tf.numpy_function(standardize, [x, k], [tf.float32, tf.int32])
        feats.set_shape([4])
        label.set_shape([])
        return feats, label
    xs, ks = data(341, ("n", (6, 4)), ("i", (6,), 10))
    ds = tf.data.Dataset.from_tensor_slices((xs, ks)).map(parse).batch(3).repeat()
    feats, labels = tf.data.make_one_shot_iterator(ds).get_next()
    clipped = tf.py_func(lambda v: np.clip(v, -1.0, 1.0).astype(np.float32), [feats], tf.float32)
    logits = tf.layers.dense(tf.reshape(clipped, [-1, 4]), 3, name="fc")
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.GradientDescentOptimizer(0.3).minimize(loss)
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, labels], {}, steps=4)
    out["static"] = np.array([str(feats.shape), str(labels.shape)])
    return _trained(tf, sess, out)


def image_geometry_pipeline(tf, feeder):
    """A tf.image preprocessing function mapped over a tf.data pipeline of decoded images (the deterministic
    half of the 2018 object-recognition pipelines): central_crop, resize_image_with_crop_or_pad, rot90 by k,
    flip_up_down, transpose_image, adjust_brightness, adjust_contrast, adjust_saturation and adjust_hue,
    rgb_to_grayscale, per_image_standardization; tf.image.sobel_edges and total_variation of the batch feed a
    small classifier's loss."""
    def preprocess(image, label):
        image = tf.image.central_crop(image, 0.75)
        image = tf.image.resize_image_with_crop_or_pad(image, 8, 8)
        image = tf.image.rot90(image, k=label % 4)
        image = tf.image.flip_up_down(tf.image.transpose_image(image))
        image = tf.image.adjust_brightness(image, 0.1)
        image = tf.image.adjust_contrast(image, 1.5)
        image = tf.image.adjust_saturation(image, 0.7)
        image = tf.image.adjust_hue(image, 0.1)
        gray = tf.image.rgb_to_grayscale(image)
        return tf.image.per_image_standardization(image), gray, label
    xs, ys = data(342, ("f", (4, 8, 8, 3)), ("i", (4,), 4))
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).map(preprocess).batch(4)
    images, gray, labels = tf.data.make_one_shot_iterator(ds).get_next()
    edges = tf.image.sobel_edges(gray)
    tv = tf.image.total_variation(images)
    features = tf.concat([tf.reduce_mean(images, [1, 2]), tf.reduce_mean(tf.abs(edges), [1, 2, 3])], 1)
    logits = tf.layers.dense(features, 4, name="fc")
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits) + 1e-4 * tf.reduce_mean(tv)
    train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    sess = _session_run(tf, feeder)
    values = sess.run([train_op, loss, images, gray, edges, tv])
    return _trained(tf, sess, dict(zip(["loss", "images", "gray", "edges", "tv"], values[1:])))


# ---- The driver -----------------------------------------------------------------------------------------------

SCRIPTS = {f.__name__: f for f in (
    straight_through_binarized, vq_vae_codebook, custom_gradient_recipes, gradients_api_options,
    fake_quant_training, proximal_optimizers_clipped, linear_cosine_schedules, beam_search_while, ode_rk4_while,
    sinkhorn_log_domain, conjugate_gradient_solver, viterbi_scan_backtrack, tensorarray_api,
    dynamic_tensorarray_gradient, fold_and_map_fn,
    gnn_message_passing, bag_segment_pooling, tfidf_unique_counts, confusion_matrix_eval, siamese_contrastive,
    arcface_margin, simclr_nt_xent, tf_losses_family, mixup_label_smoothing, masked_token_loss,
    linalg_losses, einsum_bilinear, als_matrix_factorization, realnvp_coupling, shufflenet_se_block,
    memory_network_hops, convlstm_cell_of_ones_own, lstm_peephole_projection, film_conditioning,
    char_ngram_text, ctc_dense_labels, keras_dataset_fit_weights, random_seed_determinism, c3d_video_clips,
    numpy_function_dataset, image_geometry_pipeline)}

run_script = script_runner(SCRIPTS)

_REFUSED = {"dynamic_tensorarray_gradient": "the gradient through a TensorArray(dynamic_size=True) written in a "
                                            "loop is refused: its rows grow each iteration, and the loop's recorded "
                                            "history is dense (the error names a fixed size as the alternative)"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(raises=UnsupportedError, strict=True,
                                                                          reason=_REFUSED[n]))
                                  if n in _REFUSED else n for n in sorted(SCRIPTS)])
def test_outsider_script_runs_as_in_tensorflow(tf1, name):
    check_against_tensorflow(tf1, run_script, name)


# A script of each family this sweep added that runs device kernels of its own making (fake quantization under
# custom_gradient, 3-D convolutions of folded frames, a loop whose body made its variables, the proximal rules).
_ON_OPENCL = ["fake_quant_training", "c3d_video_clips", "ode_rk4_while", "proximal_optimizers_clipped"]


@needs_opencl
@pytest.mark.parametrize("name", _ON_OPENCL)
def test_outsider_script_runs_as_in_tensorflow_on_opencl(tf1, name, monkeypatch):
    sessions_on_opencl(monkeypatch)
    check_against_tensorflow(tf1, run_script, name)


def test_fake_quantization_as_tensorflow(tf1):
    """tf.quantization's fake quantization gives TensorFlow's values and gradients: a range nudged onto a level
    for 0.0 (a tie in float32 included), narrow_range, 2 to 8 bits, per channel, a [0, 0] range (zeros, the
    gradient passed through whole), and the gradients of min and max (dy summed below and above the range)."""
    import tfplus
    xs = np.linspace(-2.5, 2.5, 60, dtype=np.float32).reshape(20, 3)
    cases = [
        lambda tf, x, lo, hi: tf.quantization.fake_quant_with_min_max_args(x, min=-2.0, max=2.0),
        lambda tf, x, lo, hi: tf.quantization.fake_quant_with_min_max_args(x, -1.0, 1.0, num_bits=2),
        lambda tf, x, lo, hi: tf.fake_quant_with_min_max_vars(x, lo[0], hi[0], num_bits=4, narrow_range=True),
        lambda tf, x, lo, hi: tf.quantization.fake_quant_with_min_max_vars(x, lo[1], hi[1]),
        lambda tf, x, lo, hi: tf.quantization.fake_quant_with_min_max_vars(x, lo[2], hi[2]),
        lambda tf, x, lo, hi: tf.quantization.fake_quant_with_min_max_vars_per_channel(x, lo, hi, num_bits=3),
    ]

    def run(tf, case):
        with tf.Graph().as_default():
            x = tf.constant(xs)
            lo, hi = tf.constant([-0.6, -0.3, 0.0]), tf.constant([0.6, 1.7, 0.0])
            y = case(tf, x, lo, hi)
            grads = tf.gradients(tf.reduce_sum(y * (x + 3.0)), [x, lo, hi], unconnected_gradients="zero")
            with tf.Session() as sess:
                return sess.run([y] + grads)
    for i, case in enumerate(cases):
        for want, got in zip(run(tf1, case), run(tfplus, case)):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=3e-6, err_msg=f"case {i}")


def test_ctc_loss_v2_as_tensorflow(tf1):
    """tf.nn.ctc_loss_v2 gives TensorFlow's losses and logit gradients: dense labels with the blank at class 0
    (its default) and time-major logits, and SparseTensor labels with the blank in the middle."""
    import tfplus
    logits_np = data(350, ("n", (6, 2, 5)))[0]

    def run(tf):
        with tf.Graph().as_default():
            logits = tf.constant(logits_np)
            dense = tf.nn.ctc_loss_v2(tf.constant([[1, 4, 4], [3, 2, 0]]), logits, tf.constant([3, 2]),
                                      tf.constant([6, 5]))
            sparse = tf.nn.ctc_loss_v2(tf.SparseTensor([[0, 0], [0, 1], [1, 0]], [4, 1, 3], [2, 2]), logits, None,
                                       tf.constant([6, 6]), blank_index=2)
            grads = tf.gradients(tf.reduce_sum(dense) + 2.0 * tf.reduce_sum(sparse), logits)
            with tf.Session() as sess:
                return sess.run([dense, sparse] + grads)
    for want, got in zip(run(tf1), run(tfplus)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_string_ngrams_as_tensorflow(tf1):
    """tf.strings.ngrams on dense tokens gives TensorFlow's strings: one width and a list of widths, left and
    right pads of their default and a given width, a row shorter than the width kept whole or dropped."""
    import tfplus
    tokens = np.array([[b"a", b"b", b"c"], [b"d", b"e", b"f"]])
    cases = [dict(ngram_width=2), dict(ngram_width=[1, 3], separator="+"),
             dict(ngram_width=3, pad_values=("<s>", "</s>")), dict(ngram_width=2, pad_values="#", padding_width=1),
             dict(ngram_width=4, preserve_short_sequences=True), dict(ngram_width=4)]

    def run(tf):
        with tf.Graph().as_default():
            outs = [tf.strings.ngrams(tf.constant(tokens), **kw) for kw in cases]
            with tf.Session() as sess:
                return sess.run(outs)
    for kw, want, got in zip(cases, run(tf1), run(tfplus)):
        assert np.asarray(got).tolist() == np.asarray(want).tolist(), kw


def test_variables_first_made_in_a_loop_body_or_a_branch_train_as_in_tensorflow(tf1):
    """A layer first called inside a tf.while_loop body and a get_variable first asked for in a tf.cond branch
    make their variables in the script's graph, as TF's init_scope does: they are initialized and trained beside a
    variable made outside (they were in no collection, so silently neither)."""
    import tfplus
    xs = data(351, ("n", (2, 3)))[0]

    def run(tf):
        with tf.Graph().as_default():
            x = tf.placeholder(tf.float32, [2, 3])
            w = tf.get_variable("outside", initializer=tf.constant(np.eye(3, dtype=np.float32) * 0.5))

            def body(i, h):
                with tf.variable_scope("cell", reuse=tf.AUTO_REUSE):
                    h = tf.layers.dense(tf.matmul(h, w), 3, tf.tanh, name="dense",
                                        kernel_initializer=tf.constant_initializer(0.1))
                return i + 1, h
            _, h = tf.while_loop(lambda i, h: i < 2, body, [0, x])

            def branch():
                return h * tf.get_variable("scale", [3], initializer=tf.constant_initializer(2.0))
            y = tf.cond(tf.reduce_sum(x) > -100.0, branch, lambda: h)
            loss = tf.reduce_sum(tf.square(y - 1.0))
            train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                losses = [sess.run([train_op, loss], {x: xs})[1] for _ in range(3)]
                return [v.op.name for v in tf.trainable_variables()], losses, sess.run(tf.trainable_variables())
    want, got = run(tf1), run(tfplus)
    assert got[0] == want[0] == ["outside", "cell/dense/kernel", "cell/dense/bias", "scale"]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
    for a, b in zip(got[2], want[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_proximal_optimizers_sparse_rows_as_tensorflow(tf1):
    """ProximalAdagrad and ProximalGradientDescent update only an embedding's looked-up rows (an IndexedSlices
    gradient) as TensorFlow's sparse kernels do, with and without L1."""
    import tfplus

    def run(tf):
        with tf.Graph().as_default():
            ids = tf.constant([3, 0, 4])
            out = {}
            for name, opt in [("pa", tf.train.ProximalAdagradOptimizer(0.3, l1_regularization_strength=0.05,
                                                                      l2_regularization_strength=0.1)),
                              ("pa_l2", tf.train.ProximalAdagradOptimizer(0.3, l2_regularization_strength=0.1)),
                              ("pgd", tf.train.ProximalGradientDescentOptimizer(0.2, 0.02, 0.05))]:
                table = tf.get_variable(name, initializer=tf.constant(data(352, ("n", (5, 2)))[0]))
                loss = tf.reduce_sum(tf.square(tf.nn.embedding_lookup(table, ids) - 0.3))
                out[name] = (table, opt.minimize(loss))
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                for _ in range(2):
                    sess.run([op for _, op in out.values()])
                return sess.run([t for t, _ in out.values()])
    for want, got in zip(run(tf1), run(tfplus)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_conv3d_and_max_pool3d_as_tensorflow(tf1):
    """tf.nn.conv3d and tf.nn.max_pool3d (2-D windows over frames folded into the batch) give TensorFlow's values
    and gradients: SAME and VALID, strides in depth and space, odd sizes (SAME's extra frame after)."""
    import tfplus
    xs, ws = data(353, ("n", (2, 5, 6, 7, 2)), ("n", (3, 2, 3, 2, 3)))

    def run(tf):
        with tf.Graph().as_default():
            x, w = tf.constant(xs), tf.constant(ws)  # TF's MaxPool3D takes no float64
            outs = [tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "SAME"), tf.nn.conv3d(x, w, [1, 2, 2, 1, 1], "SAME"),
                    tf.nn.conv3d(x, w, [1, 2, 1, 2, 1], "VALID"),
                    tf.nn.max_pool3d(x, [1, 2, 2, 3, 1], [1, 2, 2, 2, 1], "SAME"),
                    tf.nn.max_pool3d(x, [1, 3, 2, 2, 1], [1, 1, 2, 1, 1], "VALID")]
            loss = tf.add_n([tf.reduce_sum(tf.sin(o)) for o in outs])
            with tf.Session() as sess:
                return sess.run(outs + tf.gradients(loss, [x, w]))
    for i, (want, got) in enumerate(zip(run(tf1), run(tfplus))):
        assert np.shape(got) == np.shape(want), i
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5, err_msg=str(i))  # float32 sums
