"""A second sweep of TF1 graph-mode scripts written from outside the tests that shaped tfplus, of kinds that
test_outsider_scripts.py, tutorials.py, zoo.py, zoo2.py, infra_scripts.py and io_scripts.py do not hold: K-means
and k-NN in the graph, adversarial examples, spectral and weight normalization, the streaming metrics an
Estimator's eval_metric_ops use, the tf.distributions family beyond the normal, vocabulary lookup tables, two
graphs in two sessions, a CRF's forward algorithm, normalizing flows, learning to rank, ... Each runs with
TensorFlow's tf.compat.v1 (the oracle) and with `import tfplus as tf`, the random numbers fed the same
(tutorials.Feeder), and must give the same numbers."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from conftest import needs_opencl
from test_outsider_scripts import _steps
from tutorials import _session_run, _trained, check_against_tensorflow, data, script_runner, sessions_on_opencl

from tfplus.unsupported import UnsupportedError

# ---- Clustering, neighbours, second-order methods -------------------------------------------------------------


def kmeans_assign(tf, feeder):
    """K-means as the 2016 blog posts wrote it: the points a constant, the centroids a variable started from the
    first points by tf.slice, squared distances by broadcasting expand_dims'ed tensors, assignments by argmin, the
    new centroids by unsorted_segment_sum over counts, written back by tf.assign, one Session.run an iteration."""
    (pts,) = data(201, ("n", (20, 2)))
    pts[:10] += 3.0
    points = tf.constant(pts)
    k = 3
    centroids = tf.Variable(tf.slice(points, [0, 0], [k, -1]))
    distances = tf.reduce_sum(tf.square(tf.subtract(tf.expand_dims(points, 0), tf.expand_dims(centroids, 1))), 2)
    assignments = tf.argmin(distances, 0)
    sums = tf.unsorted_segment_sum(points, assignments, k)
    counts = tf.unsorted_segment_sum(tf.ones_like(points), assignments, k)
    update = tf.assign(centroids, sums / tf.maximum(counts, 1.0))
    inertia = tf.reduce_sum(tf.reduce_min(distances, reduction_indices=[0]))
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    out = {"inertia": [], "assignments": []}
    for _ in range(4):
        i, a = sess.run([inertia, assignments])
        out["inertia"].append(i)
        out["assignments"].append(a)
        sess.run(update)
    out = {k: np.array(v) for k, v in out.items()}
    out["centroids"] = sess.run(centroids)
    return out


def knn_top_k_vote(tf, feeder):
    """k nearest neighbours in the graph: L1 distances of every test row to every training row, the k nearest by
    tf.nn.top_k of the negated distances, a vote weighted by exp(-distance) over one_hot'ed gathered labels, and
    the cosine neighbours by l2_normalize'd matmul; tf.nn.in_top_k scores the votes."""
    xs_train, xs_test, ys_train, ys_test = data(202, ("n", (24, 5)), ("n", (6, 5)), ("i", (24,), 3), ("i", (6,), 3))
    xtr = tf.placeholder(tf.float32, [None, 5])
    xte = tf.placeholder(tf.float32, [None, 5])
    ytr = tf.placeholder(tf.int32, [None])
    yte = tf.placeholder(tf.int32, [None])
    dist = tf.reduce_sum(tf.abs(tf.expand_dims(xte, 1) - tf.expand_dims(xtr, 0)), axis=2)
    neg_dist, idx = tf.nn.top_k(tf.negative(dist), k=4)
    votes = tf.reduce_sum(tf.one_hot(tf.gather(ytr, idx), 3) * tf.expand_dims(tf.exp(neg_dist), -1), axis=1)
    pred = tf.argmax(votes, 1, output_type=tf.int32)
    in_top2 = tf.nn.in_top_k(votes, yte, 2)
    cosine = tf.matmul(tf.nn.l2_normalize(xte, 1), tf.nn.l2_normalize(xtr, 1), transpose_b=True)
    cos_vals, cos_idx = tf.nn.top_k(cosine, 3, sorted=True)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(pred, yte), tf.float32))
    with tf.Session() as sess:
        names = ["idx", "votes", "pred", "in_top2", "cos_vals", "cos_idx", "accuracy"]
        values = sess.run([idx, votes, pred, in_top2, cos_vals, cos_idx, accuracy],
                          {xtr: xs_train, xte: xs_test, ytr: ys_train, yte: ys_test})
    return dict(zip(names, values))


def newton_logistic_hessians(tf, feeder):
    """Logistic regression fitted by Newton's method in float64 (the 2017 second-order examples): tf.hessians of
    the regularized loss, tf.matrix_solve of H d = g, tf.assign_sub of d; the Cholesky form of the same step by
    tf.cholesky and tf.cholesky_solve is fetched beside it."""
    xs, ys = data(203, ("n", (30, 3)), ("i", (30,), 2))
    x = tf.constant(xs.astype(np.float64))
    y = tf.constant(ys.astype(np.float64))
    w = tf.Variable(tf.zeros([3], dtype=tf.float64), name="w")
    logits = tf.reduce_sum(x * w, axis=1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits)) + \
        0.01 * tf.reduce_sum(tf.square(w))
    grad = tf.gradients(loss, w)[0]
    hess = tf.hessians(loss, w)[0]
    direction = tf.squeeze(tf.matrix_solve(hess, tf.expand_dims(grad, 1)), 1)
    chol_direction = tf.squeeze(tf.cholesky_solve(tf.cholesky(hess), tf.expand_dims(grad, 1)), 1)
    step = tf.assign_sub(w, direction)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    out = {"loss": [], "hess": [], "chol": []}
    for _ in range(3):
        loss_v, hess_v, chol_v = sess.run([loss, hess, chol_direction])
        sess.run(step)
        out["loss"].append(loss_v)
        out["hess"].append(hess_v)
        out["chol"].append(chol_v)
    out = {k: np.array(v) for k, v in out.items()}
    out["w"] = sess.run(w)
    return out


# ---- Adversarial training and normalization of weights --------------------------------------------------------

def fgsm_adversarial_training(tf, feeder):
    """Goodfellow's fast gradient sign method as cleverhans-era scripts wrote it: the input gradient of the loss
    by tf.gradients, x + eps * tf.sign(grad) clipped and stop_gradient'ed, the same classifier called again in its
    scope with reuse=True, a loss mixing clean and adversarial examples; then the iterative method (BIM) unrolled
    three steps, each projected back into the eps-ball by clip_by_value, and the accuracy under it."""
    x = tf.placeholder(tf.float32, [None, 16])
    y = tf.placeholder(tf.int64, [None])

    def model(inputs, reuse):
        with tf.variable_scope("classifier", reuse=reuse):
            h = tf.layers.dense(inputs, 12, tf.nn.relu, name="hidden")
            return tf.layers.dense(h, 4, name="logits")
    logits = model(x, False)
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    grad, = tf.gradients(loss, x)
    x_adv = tf.stop_gradient(tf.clip_by_value(x + 0.1 * tf.sign(grad), 0.0, 1.0))
    adv_loss = tf.losses.sparse_softmax_cross_entropy(y, model(x_adv, True))
    total = 0.5 * loss + 0.5 * adv_loss
    train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(total)
    x_bim = x
    for _ in range(3):
        g, = tf.gradients(tf.losses.sparse_softmax_cross_entropy(y, model(x_bim, True)), x_bim)
        x_bim = tf.clip_by_value(tf.clip_by_value(x_bim + 0.02 * tf.sign(g), x - 0.05, x + 0.05), 0.0, 1.0)
    bim_accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(model(x_bim, True), 1), y), tf.float32))
    xs, ys = data(204, ("f", (10, 16)), ("i", (10,), 4))
    sess = _session_run(tf, feeder)
    feed = {x: xs, y: ys.astype(np.int64)}
    out = _steps(tf, sess, [train_op, loss, adv_loss], feed)
    out["x_bim"], out["bim_accuracy"] = sess.run([x_bim, bim_accuracy], feed)
    out["losses"] = np.array(len(tf.get_collection(tf.GraphKeys.LOSSES)))
    return _trained(tf, sess, out)


def spectral_norm_discriminator(tf, feeder):
    """SN-GAN's spectral normalization (taki0112's spectral_norm): the kernel reshaped to a matrix, one power
    iteration from a non-trainable u by l2_normalize'd matmuls, u and v stop_gradient'ed, the kernel divided by
    sigma under a control dependency on u's assign; a conv and a dense discriminator trained by the hinge loss
    with Adam(beta1=0, beta2=0.9)."""
    def spectral_norm(w):
        w_shape = w.shape.as_list()
        w = tf.reshape(w, [-1, w_shape[-1]])
        u = tf.get_variable("u", [1, w_shape[-1]], initializer=tf.random_normal_initializer(), trainable=False)
        v_hat = tf.nn.l2_normalize(tf.matmul(u, tf.transpose(w)))
        u_hat = tf.nn.l2_normalize(tf.matmul(v_hat, w))
        u_hat, v_hat = tf.stop_gradient(u_hat), tf.stop_gradient(v_hat)
        sigma = tf.matmul(tf.matmul(v_hat, w), tf.transpose(u_hat))
        with tf.control_dependencies([u.assign(u_hat)]):
            w_norm = tf.reshape(w / sigma, w_shape)
        return w_norm, sigma

    def discriminator(images):
        with tf.variable_scope("discriminator"):
            with tf.variable_scope("conv"):
                kernel = tf.get_variable("kernel", [3, 3, 2, 4])
                kernel, sigma = spectral_norm(kernel)
                h = tf.nn.leaky_relu(tf.nn.conv2d(images, kernel, [1, 2, 2, 1], "SAME"), 0.1)
            with tf.variable_scope("dense"):
                w = tf.get_variable("w", [4 * 4 * 4, 1])
                w, _ = spectral_norm(w)
                b = tf.get_variable("b", [1], initializer=tf.zeros_initializer())
                return tf.matmul(tf.reshape(h, [-1, 4 * 4 * 4]), w) + b, sigma
    real = tf.placeholder(tf.float32, [None, 8, 8, 2])
    fake = tf.placeholder(tf.float32, [None, 8, 8, 2])
    # One call on real and fake together: a second call would assign u again in the same run, racing the first.
    d_out, sigma = discriminator(tf.concat([real, fake], axis=0))
    d_real, d_fake = tf.split(d_out, 2)
    d_loss = tf.reduce_mean(tf.nn.relu(1.0 - d_real)) + tf.reduce_mean(tf.nn.relu(1.0 + d_fake))
    train_op = tf.train.AdamOptimizer(1e-2, beta1=0.0, beta2=0.9).minimize(d_loss)
    rs, fs = data(205, ("n", (4, 8, 8, 2)), ("n", (4, 8, 8, 2)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, d_loss, sigma], {real: rs, fake: fs + 0.5})
    return _trained(tf, sess, out, names=[v.op.name for v in tf.global_variables()])


def weight_norm_data_init(tf, feeder):
    """Weight normalization (openai/weightnorm, Salimans & Kingma 2016): w = g * V / ||V|| by columns, once with
    the norm written out and once by tf.nn.l2_normalize(V, 0); the data-dependent initialization run once before
    training (g and b assigned from tf.nn.moments of the first pre-activations), then centered RMSProp."""
    x = tf.placeholder(tf.float32, [None, 6])
    y = tf.placeholder(tf.float32, [None, 1])
    inits = []

    def dense_wn(inputs, units, name, activation=None):
        with tf.variable_scope(name):
            V = tf.get_variable("V", [int(inputs.shape[1]), units], initializer=tf.random_normal_initializer(0, 0.05))
            g = tf.get_variable("g", [units], initializer=tf.constant_initializer(1.0))
            b = tf.get_variable("b", [units], initializer=tf.constant_initializer(0.0))
            pre = tf.matmul(inputs, V) * tf.reshape(g / tf.sqrt(tf.reduce_sum(tf.square(V), [0])), [1, units])
            m_init, v_init = tf.nn.moments(pre, [0])
            scale_init = 1.0 / tf.sqrt(v_init + 1e-10)
            inits.extend([g.assign(scale_init), b.assign(-m_init * scale_init)])
            out = pre + tf.reshape(b, [1, units])
            return out if activation is None else activation(out)
    h = dense_wn(x, 8, "layer1", tf.nn.elu)
    with tf.variable_scope("out"):
        V = tf.get_variable("V", [8, 1], initializer=tf.random_normal_initializer(0, 0.05))
        g = tf.get_variable("g", [1], initializer=tf.ones_initializer())
        pred = tf.matmul(h, g * tf.nn.l2_normalize(V, 0))
    loss = tf.losses.mean_squared_error(y, pred)
    train_op = tf.train.RMSPropOptimizer(0.01, momentum=0.9, centered=True).minimize(loss)
    xs, ys = data(206, ("n", (12, 6)), ("n", (12, 1)))
    sess = _session_run(tf, feeder)
    feed = {x: xs, y: ys}
    out = {"init": np.concatenate([np.ravel(v) for v in sess.run(inits, feed)])}
    out.update(_steps(tf, sess, [train_op, loss], feed))
    return _trained(tf, sess, out)


# ---- Streaming metrics (an Estimator's eval_metric_ops, written in a Session loop) ----------------------------

def _stream(tf, sess, metrics: dict, feeds: list) -> dict:
    """Runs every metric's update op over `feeds` (one run a batch) after local_variables_initializer; the
    updates' values per batch and the final values, by metric name."""
    sess.run(tf.local_variables_initializer())
    names = sorted(metrics)
    updates = [sess.run([metrics[n][1] for n in names], feed) for feed in feeds]
    finals = sess.run([metrics[n][0] for n in names], feeds[-1])
    out = {f"update:{n}": np.array([u[i] for u in updates]) for i, n in enumerate(names)}
    out.update({f"value:{n}": v for n, v in zip(names, finals)})
    out["locals"] = np.array(sorted(v.op.name for v in tf.local_variables()))
    return out


def metrics_regression_eval(tf, feeder):
    """The regression metrics of a 2018 Estimator's eval_metric_ops, streamed over three batches in a Session:
    mean squared, root mean squared, absolute and relative errors (weighted and not), the cosine distance of
    normalized rows, percentage_below and mean_tensor, each a (value, update_op) pair over local variables."""
    labels = tf.placeholder(tf.float32, [None, 3])
    preds = tf.placeholder(tf.float32, [None, 3])
    weights = tf.placeholder(tf.float32, [None, 1])
    metrics = {
        "mse": tf.metrics.mean_squared_error(labels, preds, weights=weights),
        "rmse": tf.metrics.root_mean_squared_error(labels, preds),
        "mae": tf.metrics.mean_absolute_error(labels, preds),
        "mre": tf.metrics.mean_relative_error(labels, preds, normalizer=tf.abs(labels) + 1.0),
        "cosine": tf.metrics.mean_cosine_distance(tf.nn.l2_normalize(labels, 1), tf.nn.l2_normalize(preds, 1),
                                                  dim=1),
        "below": tf.metrics.percentage_below(preds, 0.2),
        "mean_tensor": tf.metrics.mean_tensor(tf.reduce_mean(preds, 0), name="per_position_mean"),
    }
    batches = data(208, ("n", (4, 3)), ("n", (4, 3)), ("f", (4, 1)), ("n", (5, 3)), ("n", (5, 3)), ("f", (5, 1)),
                   ("n", (2, 3)), ("n", (2, 3)), ("f", (2, 1)))
    feeds = [{labels: batches[i], preds: batches[i + 1], weights: batches[i + 2]} for i in (0, 3, 6)]
    return _stream(tf, tf.Session(), metrics, feeds)


def metrics_ranking_at_k(tf, feeder):
    """A recommender's offline metrics: precision and recall at k of logits against int64 label ids (one per row
    and several per row, padded with -1, which counts as no label), for one class_id too, precision_at_top_k of
    tf.nn.top_k's indices, and average_precision_at_k, streamed over two batches."""
    logits = tf.placeholder(tf.float32, [None, 6])
    one_label = tf.placeholder(tf.int64, [None, 1])
    many_labels = tf.placeholder(tf.int64, [None, 3])
    _, top = tf.nn.top_k(logits, 2)
    metrics = {
        "p@1": tf.metrics.precision_at_k(one_label, logits, 1),
        "p@3": tf.metrics.precision_at_k(many_labels, logits, 3),
        "r@2": tf.metrics.recall_at_k(many_labels, logits, 2),
        "r@3_class2": tf.metrics.recall_at_k(many_labels, logits, 3, class_id=2),
        "p@top2": tf.metrics.precision_at_top_k(many_labels, tf.cast(top, tf.int64)),
        "ap@3": tf.metrics.average_precision_at_k(many_labels, logits, 3),
    }
    ls, = data(209, ("n", (5, 6)))
    lab = np.array([[1, 4, -1], [0, -1, -1], [2, 3, 5], [5, -1, -1], [2, 0, -1]], np.int64)
    feeds = [{logits: ls[:3], one_label: lab[:3, :1], many_labels: lab[:3]},
             {logits: ls[3:], one_label: lab[3:, :1], many_labels: lab[3:]}]
    out = _stream(tf, tf.Session(), metrics, feeds)
    # TensorFlow's average precision variable is 'max_1': an op named 'Max' in its scope took the name first.
    out["locals"] = np.array([n for n in out["locals"] if not n.startswith("average_precision")])
    return out


def multilabel_thresholds(tf, feeder):
    """A multi-label tagger (sigmoid outputs, weighted_cross_entropy_with_logits with a pos_weight) evaluated the
    way the 2017 tagging repos did: precision and recall at several thresholds, the confusion counts at those
    thresholds, the F1 at each threshold from them, and auc, streamed while the model trains."""
    x = tf.placeholder(tf.float32, [None, 5])
    y = tf.placeholder(tf.float32, [None, 4])
    logits = tf.layers.dense(x, 4)
    loss = tf.reduce_mean(tf.nn.weighted_cross_entropy_with_logits(targets=y, logits=logits, pos_weight=2.0))
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss)
    probs = tf.sigmoid(logits)
    thresholds = [0.3, 0.5, 0.7]
    prec, prec_update = tf.metrics.precision_at_thresholds(y, probs, thresholds)
    rec, rec_update = tf.metrics.recall_at_thresholds(y, probs, thresholds)
    tp, tp_update = tf.metrics.true_positives_at_thresholds(y, probs, thresholds)
    fp, fp_update = tf.metrics.false_positives_at_thresholds(y, probs, thresholds)
    fn, fn_update = tf.metrics.false_negatives_at_thresholds(y, probs, thresholds)
    tn, tn_update = tf.metrics.true_negatives_at_thresholds(y, probs, thresholds)
    f1 = 2 * prec * rec / (prec + rec + 1e-7)
    auc, auc_update = tf.metrics.auc(y, probs, num_thresholds=50)
    updates = tf.group(prec_update, rec_update, tp_update, fp_update, fn_update, tn_update, auc_update)
    xs, ys = data(210, ("n", (12, 5)), ("f", (12, 4)))
    ys = (ys > 0.6).astype(np.float32)
    sess = _session_run(tf, feeder)
    sess.run(tf.local_variables_initializer())
    out = {"loss": []}
    for i in range(3):
        feed = {x: xs[4 * i:4 * i + 4], y: ys[4 * i:4 * i + 4]}
        out["loss"].append(sess.run([train_op, loss], feed)[1])
        sess.run(updates, feed)
    out["loss"] = np.array(out["loss"])
    for name, t in (("precision", prec), ("recall", rec), ("tp", tp), ("fp", fp), ("fn", fn), ("tn", tn),
                    ("f1", f1), ("auc", auc)):
        out[name] = sess.run(t)
    out["locals"] = np.array(sorted(v.op.name for v in tf.local_variables()))
    return _trained(tf, sess, out)


# ---- Probability distributions --------------------------------------------------------------------------------

def beta_policy_gradient(tf, feeder):
    """A continuous-control policy with a Beta distribution (Chou et al. 2017, as the 2018 PPO repos built it):
    concentrations softplus(dense) + 1, log_prob of the actions taken (rescaled into (0, 1)), the entropy bonus,
    mean and variance fetched for the logs, and the KL between the old and the new policy by kl_divergence."""
    tfd = tf.distributions
    obs = tf.placeholder(tf.float32, [None, 4])
    actions = tf.placeholder(tf.float32, [None, 2])
    advantages = tf.placeholder(tf.float32, [None])
    old_a = tf.placeholder(tf.float32, [None, 2])
    old_b = tf.placeholder(tf.float32, [None, 2])
    h = tf.layers.dense(obs, 8, tf.nn.tanh)
    alpha = tf.nn.softplus(tf.layers.dense(h, 2)) + 1.0
    beta = tf.nn.softplus(tf.layers.dense(h, 2)) + 1.0
    policy = tfd.Beta(alpha, beta)
    log_prob = tf.reduce_sum(policy.log_prob((actions + 1.0) / 2.0), axis=1)
    entropy = tf.reduce_mean(tf.reduce_sum(policy.entropy(), axis=1))
    kl = tf.reduce_mean(tf.reduce_sum(tfd.kl_divergence(tfd.Beta(old_a, old_b), policy), axis=1))
    loss = -tf.reduce_mean(log_prob * advantages) - 0.01 * entropy
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    xs, acts, adv, oa = data(211, ("n", (6, 4)), ("f", (6, 2)), ("n", (6,)), ("f", (6, 2)))
    feed = {obs: xs, actions: acts * 1.8 - 0.9, advantages: adv, old_a: oa + 1.0, old_b: 2.0 - oa}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, entropy], feed)
    stats = [kl, policy.mean(), policy.variance(), policy.mode()]
    out["kl"], out["mean"], out["variance"], out["mode"] = sess.run(stats, feed)
    return _trained(tf, sess, out)


def bayesian_conjugate_family(tf, feeder):
    """Variational Bayes in the Edward era (2017): a Gamma posterior over a Poisson rate and an Exponential prior,
    a Dirichlet posterior over mixture weights against a symmetric Dirichlet prior, Laplace and Student-t
    likelihoods of residuals, a Multinomial count likelihood: log_prob, mean, variance, entropy and the
    analytic KLs (Gamma-Gamma, Dirichlet-Dirichlet), the ELBO trained by Adam."""
    tfd = tf.distributions
    counts, resid, multi = data(212, ("i", (8,), 6), ("n", (8,)), ("i", (4, 3), 4))
    with tf.variable_scope("q"):
        conc = tf.nn.softplus(tf.get_variable("conc", [], initializer=tf.constant_initializer(1.0))) + 0.1
        rate = tf.nn.softplus(tf.get_variable("rate", [], initializer=tf.constant_initializer(0.5))) + 0.1
        dir_conc = tf.nn.softplus(tf.get_variable("dir", [3], initializer=tf.constant_initializer([0.5, 1.0, 2.0])))
        scale = tf.nn.softplus(tf.get_variable("scale", [], initializer=tf.constant_initializer(0.3)))
        df = tf.nn.softplus(tf.get_variable("df", [], initializer=tf.constant_initializer(3.0))) + 1.0
    q_rate = tfd.Gamma(concentration=conc, rate=rate)
    prior_rate = tfd.Gamma(concentration=2.0, rate=1.0)
    q_w = tfd.Dirichlet(dir_conc)
    prior_w = tfd.Dirichlet(tf.ones([3]) * 1.5)
    lam = q_rate.mean()
    poisson_ll = tf.reduce_sum(tf.constant(counts.astype(np.float32)) * tf.log(lam) - lam -
                               tf.lgamma(tf.constant(counts.astype(np.float32)) + 1.0))
    laplace_ll = tf.reduce_sum(tfd.Laplace(loc=0.0, scale=scale).log_prob(resid))
    student_ll = tf.reduce_sum(tfd.StudentT(df=df, loc=0.0, scale=scale).log_prob(resid))
    multinomial_ll = tf.reduce_sum(tfd.Multinomial(total_count=tf.constant(multi.sum(1).astype(np.float32)),
                                                   probs=q_w.mean()).log_prob(multi.astype(np.float32)))
    exp_prior = tfd.Exponential(rate=0.5).log_prob(scale)
    kl = tfd.kl_divergence(q_rate, prior_rate) + tfd.kl_divergence(q_w, prior_w)
    elbo = poisson_ll + laplace_ll + student_ll + multinomial_ll + exp_prior - kl
    train_op = tf.train.AdamOptimizer(0.05).minimize(-elbo)
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, elbo, kl, student_ll, multinomial_ll], {})
    stats = {"gamma_var": q_rate.variance(), "gamma_entropy": q_rate.entropy(), "dir_var": q_w.variance(),
             "dir_entropy": q_w.entropy(), "dir_logp": q_w.log_prob([0.2, 0.3, 0.5]),
             "laplace_entropy": tfd.Laplace(0.0, scale).entropy(), "student_var": tfd.StudentT(df + 2, 0.0,
                                                                                               scale).variance(),
             "student_entropy": tfd.StudentT(df, 0.0, scale).entropy(), "exp_mean": tfd.Exponential(2.0).mean(),
             "multinomial_mean": tfd.Multinomial(5.0, probs=[0.2, 0.3, 0.5]).mean()}
    for k, v in stats.items():
        out[k] = sess.run(v)
    return _trained(tf, sess, out)


def reinforce_gaussian_policy(tf, feeder):
    """REINFORCE with a Gaussian policy (the 2017 continuous-control tutorials): a state-independent log_std
    variable, tf.distributions.Normal's log_prob of the actions taken, a learned baseline whose prediction is
    stop_gradient'ed out of the policy loss, the advantages standardized by tf.nn.moments."""
    obs = tf.placeholder(tf.float32, [None, 3])
    act = tf.placeholder(tf.float32, [None, 2])
    ret = tf.placeholder(tf.float32, [None])
    with tf.variable_scope("pi"):
        mu = tf.layers.dense(tf.layers.dense(obs, 8, tf.nn.tanh), 2)
        log_std = tf.get_variable("log_std", [2], initializer=tf.constant_initializer(-0.5))
    with tf.variable_scope("v"):
        value = tf.squeeze(tf.layers.dense(tf.layers.dense(obs, 8, tf.nn.relu), 1), axis=1)
    dist = tf.distributions.Normal(loc=mu, scale=tf.exp(log_std))
    logp = tf.reduce_sum(dist.log_prob(act), axis=1)
    adv = ret - tf.stop_gradient(value)
    m, v = tf.nn.moments(adv, axes=[0])
    adv = (adv - m) / (tf.sqrt(v) + 1e-8)
    pi_loss = -tf.reduce_mean(logp * adv)
    v_loss = tf.reduce_mean((ret - value) ** 2)
    pi_train = tf.train.AdamOptimizer(3e-3).minimize(pi_loss, var_list=tf.trainable_variables("pi"))
    v_train = tf.train.AdamOptimizer(1e-2).minimize(v_loss, var_list=tf.trainable_variables("v"))
    xs, acts, rets = data(213, ("n", (8, 3)), ("n", (8, 2)), ("n", (8,)))
    sess = _session_run(tf, feeder)
    feed = {obs: xs, act: acts, ret: rets}
    out = _steps(tf, sess, [tf.group(pi_train, v_train), pi_loss, v_loss], feed)
    out["entropy"] = sess.run(dist.entropy(), feed)
    return _trained(tf, sess, out)


# ---- Text: vocabulary tables ----------------------------------------------------------------------------------

def vocab_table_bag_of_words(tf, feeder):
    """A bag-of-words classifier on raw sentences (the 2018 text tutorials before tf.keras): tf.string_split into
    a SparseTensor of words, a tf.lookup.StaticHashTable from a KeyValueTensorInitializer mapping them to ids (0
    for words out of the vocabulary), the reverse table from ids back to words, a vocabulary file read by a
    TextFileInitializer, tables_initializer, and embedding_lookup_sparse with the mean combiner."""
    vocab = ["the", "cat", "sat", "on", "mat", "dog", "ran"]
    tmp = tempfile.mkdtemp()
    vocab_file = os.path.join(tmp, "vocab.txt")
    with open(vocab_file, "w") as f:
        f.write("\n".join(["<unk>"] + vocab) + "\n")
    sentences = tf.placeholder(tf.string, [None])
    labels = tf.placeholder(tf.int32, [None])
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(vocab), tf.range(1, len(vocab) + 1, dtype=tf.int64)), 0)
    reverse = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.range(1, len(vocab) + 1, dtype=tf.int64), tf.constant(vocab)),
        "<unk>")
    file_table = tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                      tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), -1)
    words = tf.string_split(sentences)
    ids = tf.SparseTensor(words.indices, table.lookup(words.values), words.dense_shape)
    embeddings = tf.get_variable("embeddings", [len(vocab) + 1, 6])
    features = tf.nn.embedding_lookup_sparse(embeddings, ids, None, combiner="mean")
    logits = tf.layers.dense(features, 2)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdagradOptimizer(0.5).minimize(loss)
    texts = np.array([b"the cat sat on the mat", b"the dog ran", b"a cat ran on a mat", b"dog sat"])
    feed = {sentences: texts, labels: np.array([0, 1, 0, 1], np.int32)}
    sess = _session_run(tf, feeder)
    sess.run(tf.tables_initializer())
    out = _steps(tf, sess, [train_op, loss], feed)
    out["ids"] = sess.run(tf.sparse_tensor_to_dense(ids), feed)
    out["file_ids"] = sess.run(file_table.lookup(tf.constant(["cat", "<unk>", "zebra"])))
    out["back"] = sess.run(reverse.lookup(tf.constant([3, 0, 7], tf.int64))).astype(str)
    out["size"] = sess.run(table.size())
    return _trained(tf, sess, out)


# ---- Graphs and sessions --------------------------------------------------------------------------------------

def two_graphs_distillation(tf, feeder):
    """Knowledge distillation with the teacher and the student in graphs of their own (tf.Graph().as_default()
    twice, a Session for each, both open at once): the teacher trains a few steps, its temperature-softened
    probabilities are fed to the student, whose loss mixes T^2 * soft cross-entropy and the hard labels'; a
    tensor of one graph used in the other is a ValueError."""
    xs, ys = data(214, ("n", (8, 6)), ("i", (8,), 3))
    temperature = 2.0
    teacher_graph, student_graph = tf.Graph(), tf.Graph()
    with teacher_graph.as_default():
        tx = tf.placeholder(tf.float32, [None, 6])
        ty = tf.placeholder(tf.int32, [None])
        t_logits = tf.layers.dense(tf.layers.dense(tx, 16, tf.nn.relu), 3)
        t_loss = tf.losses.sparse_softmax_cross_entropy(ty, t_logits)
        t_train = tf.train.AdamOptimizer(0.02).minimize(t_loss)
        soft_targets = tf.nn.softmax(t_logits / temperature)
        t_sess = tf.Session(graph=teacher_graph)
        t_sess.run(tf.global_variables_initializer(), feeder.feeds(tf, teacher_graph))
    with student_graph.as_default():
        sx = tf.placeholder(tf.float32, [None, 6])
        sy = tf.placeholder(tf.int32, [None])
        soft = tf.placeholder(tf.float32, [None, 3])
        # NOTE: a normal initializer, so the Feeder's record of the teacher graph's uniform draws stays its own.
        s_logits = tf.layers.dense(sx, 3, kernel_initializer=tf.random_normal_initializer(stddev=0.3))
        soft_loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=soft,
                                                                              logits=s_logits / temperature))
        hard_loss = tf.losses.sparse_softmax_cross_entropy(sy, s_logits)
        s_loss = temperature ** 2 * soft_loss + hard_loss
        s_train = tf.train.GradientDescentOptimizer(0.1).minimize(s_loss)
        s_sess = tf.Session()
        s_sess.run(tf.global_variables_initializer(), feeder.feeds(tf, student_graph))
        try:
            tf.add(s_logits, t_logits)
            mixed = "no error"
        except ValueError:
            mixed = "ValueError"
    out = {"t_loss": [], "s_loss": []}
    for _ in range(3):
        out["t_loss"].append(t_sess.run([t_train, t_loss], {tx: xs, ty: ys})[1])
    targets = t_sess.run(soft_targets, {tx: xs})
    for _ in range(3):
        out["s_loss"].append(s_sess.run([s_train, s_loss], {sx: xs, sy: ys, soft: targets})[1])
    out = {k: np.array(v) for k, v in out.items()}
    out["targets"] = targets
    out["mixed"] = np.array(mixed)
    out["graphs"] = np.array([len(teacher_graph.get_collection("trainable_variables")),
                              len(student_graph.get_collection("trainable_variables")),
                              tf.get_default_graph() is not student_graph])
    with student_graph.as_default():
        out.update({"student:" + v.op.name: s_sess.run(v) for v in tf.trainable_variables()})
    t_sess.close()
    s_sess.close()
    return out


# ---- Losses of their own ---------------------------------------------------------------------------------------

def center_loss_scatter_sub(tf, feeder):
    """Center loss (Wen et al. 2016, as EncodeTS/TensorFlow_Center_Loss wrote it): a non-trainable centers
    variable, the batch's centers by tf.gather, each class's step divided by 1 + its count in the batch (from
    tf.unique_with_counts), tf.scatter_sub of the steps (repeated labels add up), the train op under a control
    dependency on that update."""
    x = tf.placeholder(tf.float32, [None, 6])
    y = tf.placeholder(tf.int32, [None])
    features = tf.layers.dense(x, 2, name="features")
    logits = tf.layers.dense(features, 3, name="logits")
    centers = tf.get_variable("centers", [3, 2], dtype=tf.float32, initializer=tf.constant_initializer(0),
                              trainable=False)
    labels = tf.reshape(y, [-1])
    centers_batch = tf.gather(centers, labels)
    center_loss = tf.nn.l2_loss(features - centers_batch)
    diff = centers_batch - features
    unique_label, unique_idx, unique_count = tf.unique_with_counts(labels)
    appear_times = tf.reshape(tf.gather(unique_count, unique_idx), [-1, 1])
    diff = 0.5 * diff / tf.cast(1 + appear_times, tf.float32)
    centers_update_op = tf.scatter_sub(centers, labels, diff)
    softmax_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    total = softmax_loss + 0.1 * center_loss
    with tf.control_dependencies([centers_update_op]):
        train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(total)
    xs, ys = data(215, ("n", (9, 6)), ("i", (9,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, total, unique_label, unique_count], {x: xs, y: ys})
    out["centers"] = sess.run(centers)
    return _trained(tf, sess, out)


def focal_loss_anchors(tf, feeder):
    """RetinaNet's losses as keras-retinanet's TF1 backend wrote them: the sigmoid focal loss with alpha and
    gamma, anchors whose state is -1 (ignored) dropped by tf.where and tf.gather_nd, the sum normalized by the
    positive count (at least 1), and smooth L1 on the positives' box deltas by tf.boolean_mask and
    tf.losses.huber_loss with a SUM reduction."""
    feats = tf.placeholder(tf.float32, [None, 10, 4])
    cls_target = tf.placeholder(tf.float32, [None, 10, 3])
    box_target = tf.placeholder(tf.float32, [None, 10, 4])
    state = tf.placeholder(tf.int32, [None, 10])
    h = tf.layers.dense(feats, 8, tf.nn.relu)
    cls_logits = tf.layers.dense(h, 3, bias_initializer=tf.constant_initializer(-np.log(99.0)))
    box_pred = tf.layers.dense(h, 4)
    keep = tf.where(tf.not_equal(state, -1))
    logits_kept = tf.gather_nd(cls_logits, keep)
    labels_kept = tf.gather_nd(cls_target, keep)
    p = tf.sigmoid(logits_kept)
    alpha_factor = tf.where(tf.equal(labels_kept, 1), tf.ones_like(labels_kept) * 0.25,
                            tf.ones_like(labels_kept) * 0.75)
    focal_weight = alpha_factor * tf.pow(tf.where(tf.equal(labels_kept, 1), 1 - p, p), 2.0)
    cls_loss = focal_weight * tf.nn.sigmoid_cross_entropy_with_logits(labels=labels_kept, logits=logits_kept)
    positives = tf.equal(state, 1)
    normalizer = tf.maximum(1.0, tf.cast(tf.reduce_sum(tf.cast(positives, tf.int32)), tf.float32))
    cls_loss = tf.reduce_sum(cls_loss) / normalizer
    box_loss = tf.losses.huber_loss(tf.boolean_mask(box_target, positives), tf.boolean_mask(box_pred, positives),
                                    delta=1.0 / 9, reduction=tf.losses.Reduction.SUM) / normalizer
    loss = cls_loss + box_loss
    train_op = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
    fs, bt, st = data(216, ("n", (2, 10, 4)), ("n", (2, 10, 4)), ("i", (2, 10), 3))
    st = st - 1
    ct = np.zeros((2, 10, 3), np.float32)
    ct[st == 1, 0] = 1.0
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, cls_loss, box_loss, normalizer],
                 {feats: fs, cls_target: ct, box_target: bt, state: st})
    return _trained(tf, sess, out)


def ranknet_pairwise(tf, feeder):
    """Learning to rank (RankNet, with LambdaRank's |delta NDCG| weights, as the 2018 ranking repos wrote them
    before TF-Ranking): pairwise score differences by broadcasting, the pairs of different relevance picked by
    tf.boolean_mask, the sigmoid cross-entropy of the pairs, and NDCG@3 from tf.nn.top_k with log2 discounts."""
    feats = tf.placeholder(tf.float32, [6, 4])
    rel = tf.placeholder(tf.float32, [6])
    # NOTE: no bias on the score: it cancels in every pair, so its gradient is rounding noise that Adam amplifies.
    scores = tf.squeeze(tf.layers.dense(tf.layers.dense(feats, 8, tf.nn.relu), 1, use_bias=False), 1)
    s_diff = tf.expand_dims(scores, 1) - tf.expand_dims(scores, 0)
    r_diff = tf.expand_dims(rel, 1) - tf.expand_dims(rel, 0)
    pair_mask = tf.greater(r_diff, 0)
    gains = tf.pow(2.0, rel) - 1.0
    _, order = tf.nn.top_k(scores, k=6)
    ranks = tf.cast(tf.invert_permutation(order), tf.float32) + 1.0
    discounts = 1.0 / (tf.log(ranks + 1.0) / tf.log(2.0))
    ideal, _ = tf.nn.top_k(gains, k=6)
    idcg = tf.reduce_sum(ideal[:3] / (tf.log(tf.range(2.0, 5.0)) / np.log(2.0)))
    ndcg_at_3 = tf.reduce_sum(tf.where(ranks <= 3, gains * discounts, tf.zeros_like(gains))) / idcg
    delta = tf.abs((tf.expand_dims(gains, 1) - tf.expand_dims(gains, 0)) *
                   (tf.expand_dims(discounts, 1) - tf.expand_dims(discounts, 0))) / idcg
    pair_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.ones_like(s_diff), logits=s_diff)
    loss = tf.reduce_mean(tf.boolean_mask(pair_loss * tf.stop_gradient(delta), pair_mask))
    train_op = tf.train.AdamOptimizer(0.02).minimize(loss)
    fs, rs = data(217, ("n", (6, 4)), ("i", (6,), 3))
    sess = _session_run(tf, feeder)
    return _trained(tf, sess, _steps(tf, sess, [train_op, loss, ndcg_at_3], {feats: fs, rel: rs.astype(np.float32)}))


# ---- Sequences --------------------------------------------------------------------------------------------------

def bilstm_crf_forward(tf, feeder):
    """A BiLSTM-CRF tagger with the CRF written out (as NER repos did where tf.contrib.crf was not at hand): the
    emission scores of a bidirectional_dynamic_rnn with sequence lengths, the log-partition by tf.scan of
    logsumexp over a transitions variable (steps past a sequence's end keep the previous alphas by tf.where),
    the gold path's score from tf.gather_nd on the transitions, and Viterbi's best scores by the same scan
    with reduce_max."""
    n_tags, batch, steps = 4, 3, 5
    x = tf.placeholder(tf.float32, [batch, steps, 3])
    tags = tf.placeholder(tf.int32, [batch, steps])
    lengths = tf.placeholder(tf.int32, [batch])
    cell_fw, cell_bw = tf.nn.rnn_cell.LSTMCell(4), tf.nn.rnn_cell.LSTMCell(4)
    (out_fw, out_bw), _ = tf.nn.bidirectional_dynamic_rnn(cell_fw, cell_bw, x, sequence_length=lengths,
                                                          dtype=tf.float32)
    emissions = tf.layers.dense(tf.concat([out_fw, out_bw], axis=-1), n_tags)
    transitions = tf.get_variable("transitions", [n_tags, n_tags])
    mask = tf.sequence_mask(lengths, steps)
    em_t = tf.transpose(emissions, [1, 0, 2])
    mask_t = tf.transpose(mask)

    def recursion(reduce):
        def step(alpha, inputs):
            em, m = inputs
            scores = tf.expand_dims(alpha, 2) + tf.expand_dims(transitions, 0) + tf.expand_dims(em, 1)
            return tf.where(m, reduce(scores, axis=1), alpha)
        alphas = tf.scan(step, (em_t[1:], mask_t[1:]), initializer=em_t[0])
        return reduce(alphas[-1], axis=1)
    log_z = recursion(tf.reduce_logsumexp)
    best = recursion(tf.reduce_max)
    unary = tf.reduce_sum(tf.where(mask, tf.reduce_sum(emissions * tf.one_hot(tags, n_tags), -1),
                                   tf.zeros([batch, steps])), axis=1)
    pairs = tf.stack([tags[:, :-1], tags[:, 1:]], axis=2)
    binary = tf.reduce_sum(tf.gather_nd(transitions, pairs) * tf.cast(mask[:, 1:], tf.float32), axis=1)
    loss = tf.reduce_mean(log_z - unary - binary)
    train_op = tf.train.AdamOptimizer(0.02).minimize(loss)
    xs, ts = data(218, ("n", (batch, steps, 3)), ("i", (batch, steps), n_tags))
    sess = _session_run(tf, feeder)
    feed = {x: xs, tags: ts, lengths: [5, 3, 1]}
    out = _steps(tf, sess, [train_op, loss], feed)
    out["best"] = sess.run(best, feed)
    return _trained(tf, sess, out)


def greedy_decode_shape_invariants(tf, feeder):
    """Autoregressive greedy decoding as 2017 scripts wrote it before dynamic_decode: a GRUCell trained by teacher
    forcing (dynamic_rnn over the shifted targets' embeddings), then a tf.while_loop growing the generated ids by
    tf.concat (its shape_invariants [batch, None]), stopping when every row has emitted the end id or at the
    maximum length."""
    vocab, hidden, batch, end_id = 5, 6, 2, 0
    embedding = tf.get_variable("embedding", [vocab, 4])
    cell = tf.nn.rnn_cell.GRUCell(hidden)
    targets = tf.placeholder(tf.int32, [batch, 4])
    decoder_in = tf.concat([tf.fill([batch, 1], 1), targets[:, :-1]], axis=1)
    with tf.variable_scope("decoder"):
        outputs, _ = tf.nn.dynamic_rnn(cell, tf.nn.embedding_lookup(embedding, decoder_in), dtype=tf.float32)
        projection = tf.layers.Dense(vocab, name="projection")
        logits = projection(outputs)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits))
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss)

    def cond(t, state, ids, done):
        return tf.logical_and(t < 6, tf.logical_not(tf.reduce_all(done)))

    def body(t, state, ids, done):
        with tf.variable_scope("decoder/rnn", reuse=True):
            out, state = cell(tf.nn.embedding_lookup(embedding, ids[:, -1]), state)
        next_id = tf.argmax(projection(out), axis=1, output_type=tf.int32)
        next_id = tf.where(done, tf.fill([batch], end_id), next_id)
        return t + 1, state, tf.concat([ids, tf.expand_dims(next_id, 1)], 1), tf.logical_or(done,
                                                                                          tf.equal(next_id, end_id))
    start = (tf.constant(0), cell.zero_state(batch, tf.float32), tf.fill([batch, 1], 1), tf.zeros([batch], tf.bool))
    _, _, generated, _ = tf.while_loop(cond, body, start, shape_invariants=(
        tf.TensorShape([]), tf.TensorShape([batch, hidden]), tf.TensorShape([batch, None]), tf.TensorShape([batch])))
    (ts,) = data(219, ("i", (batch, 4), vocab))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {targets: ts})
    out["generated"] = sess.run(generated)
    return _trained(tf, sess, out)


def transformer_causal_decoder(tf, feeder):
    """A GPT-style decoder layer of 2018-2019 TF1 code: sinusoidal position encodings computed in the graph, a
    causal mask from tf.matrix_band_part, heads split by reshape and transpose, layer norm by tf.nn.moments,
    gelu written with tanh, label smoothing through tf.losses.softmax_cross_entropy, and the Noam learning rate
    (warm-up then inverse square root) from the global step."""
    vocab, d, heads, steps = 7, 8, 2, 5
    ids = tf.placeholder(tf.int32, [None, steps])
    targets = tf.placeholder(tf.int32, [None, steps])
    emb = tf.get_variable("wte", [vocab, d], initializer=tf.random_normal_initializer(stddev=0.2))
    pos = tf.cast(tf.range(steps), tf.float32)[:, None]
    dims = tf.cast(tf.range(d // 2), tf.float32)[None, :]
    angles = pos / tf.pow(10000.0, 2.0 * dims / d)
    h = tf.nn.embedding_lookup(emb, ids) * np.sqrt(d) + tf.concat([tf.sin(angles), tf.cos(angles)], axis=1)

    def norm(x, scope):
        with tf.variable_scope(scope):
            g = tf.get_variable("g", [d], initializer=tf.constant_initializer(1))
            b = tf.get_variable("b", [d], initializer=tf.constant_initializer(0))
            mean, var = tf.nn.moments(x, axes=[-1], keep_dims=True)
            return (x - mean) * tf.rsqrt(var + 1e-5) * g + b

    def split_heads(x):
        return tf.transpose(tf.reshape(x, [-1, steps, heads, d // heads]), [0, 2, 1, 3])
    with tf.variable_scope("h0"):
        # NOTE: no bias: the keys' cancels in the softmax, so its gradient is rounding noise that Adam amplifies.
        qkv = tf.layers.dense(norm(h, "ln_1"), 3 * d, use_bias=False, name="c_attn")
        q, k, v = map(split_heads, tf.split(qkv, 3, axis=2))
        w = tf.matmul(q, k, transpose_b=True) * tf.rsqrt(tf.cast(d // heads, tf.float32))
        causal = tf.matrix_band_part(tf.ones([steps, steps]), -1, 0)
        w = tf.nn.softmax(w * causal - 1e10 * (1 - causal))
        a = tf.reshape(tf.transpose(tf.matmul(w, v), [0, 2, 1, 3]), [-1, steps, d])
        h = h + tf.layers.dense(a, d, name="c_proj")
        m = norm(h, "ln_2")
        m = 0.5 * m * (1 + tf.tanh(np.sqrt(2 / np.pi) * (m + 0.044715 * tf.pow(m, 3))))
        h = h + tf.layers.dense(m, d, name="mlp")
    logits = tf.matmul(tf.reshape(norm(h, "ln_f"), [-1, d]), emb, transpose_b=True)
    loss = tf.losses.softmax_cross_entropy(tf.one_hot(tf.reshape(targets, [-1]), vocab), logits,
                                           label_smoothing=0.1)
    global_step = tf.train.get_or_create_global_step()
    step = tf.cast(global_step + 1, tf.float32)
    lr = d ** -0.5 * tf.minimum(step ** -0.5, step * 4.0 ** -1.5)
    train_op = tf.train.AdamOptimizer(lr, beta2=0.98, epsilon=1e-9).minimize(loss, global_step=global_step)
    xs, = data(220, ("i", (3, steps + 1), vocab))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, lr], {ids: xs[:, :-1], targets: xs[:, 1:]}, steps=4)
    out["attention"] = sess.run(w, {ids: xs[:, :-1]})
    return _trained(tf, sess, out)


# ---- Images -----------------------------------------------------------------------------------------------------

def spatial_transformer(tf, feeder):
    """A spatial transformer network (kevinzakka/spatial-transformer-network, 2017): a localisation net whose
    last layer starts at the identity transform, the sampling grid by tf.meshgrid of tf.linspace, a batched
    matmul with theta, bilinear sampling by tf.gather_nd on (batch, y, x) indices clipped to the image, and a
    classifier trained through the sampler."""
    batch, size = 2, 6
    images = tf.placeholder(tf.float32, [batch, size, size, 1])
    labels = tf.placeholder(tf.int32, [batch])
    flat = tf.reshape(images, [batch, -1])
    loc = tf.layers.dense(flat, 8, tf.nn.tanh)
    theta = tf.layers.dense(loc, 6, kernel_initializer=tf.zeros_initializer(),
                            bias_initializer=tf.constant_initializer([1.0, 0, 0, 0, 1.0, 0]))
    theta = tf.reshape(theta, [batch, 2, 3])
    xg, yg = tf.meshgrid(tf.linspace(-1.0, 1.0, size), tf.linspace(-1.0, 1.0, size))
    grid = tf.stack([tf.reshape(xg, [-1]), tf.reshape(yg, [-1]), tf.ones([size * size])])
    grid = tf.tile(tf.expand_dims(grid, 0), [batch, 1, 1])
    sampling = tf.matmul(theta, grid)
    xs_ = 0.5 * (sampling[:, 0] + 1.0) * (size - 1)
    ys_ = 0.5 * (sampling[:, 1] + 1.0) * (size - 1)
    x0 = tf.floor(xs_)
    y0 = tf.floor(ys_)
    x1, y1 = x0 + 1, y0 + 1

    def pixel(xc, yc):
        xi = tf.cast(tf.clip_by_value(xc, 0, size - 1), tf.int32)
        yi = tf.cast(tf.clip_by_value(yc, 0, size - 1), tf.int32)
        b = tf.tile(tf.range(batch)[:, None], [1, size * size])
        return tf.gather_nd(images, tf.stack([b, yi, xi], axis=2))
    wa = tf.expand_dims((x1 - xs_) * (y1 - ys_), 2)
    wb = tf.expand_dims((x1 - xs_) * (ys_ - y0), 2)
    wc = tf.expand_dims((xs_ - x0) * (y1 - ys_), 2)
    wd = tf.expand_dims((xs_ - x0) * (ys_ - y0), 2)
    out_img = tf.add_n([wa * pixel(x0, y0), wb * pixel(x0, y1), wc * pixel(x1, y0), wd * pixel(x1, y1)])
    out_img = tf.reshape(out_img, [batch, size, size, 1])
    logits = tf.layers.dense(tf.layers.flatten(out_img), 3)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss)
    ims, ls = data(221, ("f", (batch, size, size, 1)), ("i", (batch,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, theta], {images: ims, labels: ls})
    out["warped"] = sess.run(out_img, {images: ims})
    return _trained(tf, sess, out)


def pixelcnn_masked_conv(tf, feeder):
    """PixelCNN's masked convolutions (van den Oord 2016, as the 2017 TF reimplementations wrote them): a NumPy
    mask of type A then B multiplied into each kernel, gated activations tanh * sigmoid over a split of the
    channels, a 1x1 conv to a 4-level softmax per pixel, and the loss in bits per dimension."""
    levels = 4

    def masked_conv(x, out_ch, k, mask_type, scope):
        with tf.variable_scope(scope):
            in_ch = x.shape.as_list()[-1]
            mask = np.ones((k, k, in_ch, out_ch), np.float32)
            mask[k // 2, k // 2 + (mask_type == "B"):, :, :] = 0.0
            mask[k // 2 + 1:, :, :, :] = 0.0
            w = tf.get_variable("weights", [k, k, in_ch, out_ch],
                                initializer=tf.contrib.layers.xavier_initializer()
                                if hasattr(tf, "contrib") else tf.glorot_uniform_initializer())
            b = tf.get_variable("biases", [out_ch], initializer=tf.zeros_initializer())
            return tf.nn.bias_add(tf.nn.conv2d(x, w * tf.constant(mask), [1, 1, 1, 1], "SAME"), b)
    images = tf.placeholder(tf.int32, [None, 6, 6, 1])
    x = tf.cast(images, tf.float32) / (levels - 1)
    h = masked_conv(x, 8, 5, "A", "conv_A")
    for i in range(2):
        g = masked_conv(h, 8, 3, "B", "gated_%d" % i)
        a, b = tf.split(g, 2, axis=3)
        h = h[..., :4] + tf.tanh(a) * tf.sigmoid(b) if i == 0 else h + tf.tanh(a) * tf.sigmoid(b)
    logits = masked_conv(tf.nn.relu(h), levels, 1, "B", "out")
    nll = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.squeeze(images, 3),
                                                                        logits=logits))
    bits_per_dim = nll / np.log(2.0)
    train_op = tf.train.AdamOptimizer(0.01).minimize(nll)
    ims, = data(222, ("i", (2, 6, 6, 1), levels))
    sess = _session_run(tf, feeder)
    return _trained(tf, sess, _steps(tf, sess, [train_op, bits_per_dim], {images: ims}))


# ---- Input pipelines ------------------------------------------------------------------------------------------

def dataset_window_forecast(tf, feeder):
    """The 2019 time-series tutorial's windowed dataset in graph mode: Dataset.window(size + 1, shift=1,
    drop_remainder=True), flat_map of each window batched whole, map into (inputs, target), batch, a one-shot
    iterator; a linear forecaster trained on each batch until OutOfRangeError; Dataset.enumerate and
    Dataset.unbatch beside it."""
    series = np.sin(np.arange(12, dtype=np.float32) * 0.7) + 0.1 * np.arange(12, dtype=np.float32)
    size = 3
    ds = tf.data.Dataset.from_tensor_slices(series)
    ds = ds.window(size + 1, shift=1, drop_remainder=True)
    ds = ds.flat_map(lambda w: w.batch(size + 1))
    ds = ds.map(lambda w: (w[:-1], w[-1:]))
    ds = ds.batch(4)
    x, y = tf.data.make_one_shot_iterator(ds).get_next()
    pred = tf.layers.dense(tf.reshape(x, [-1, size]), 1)
    loss = tf.losses.mean_squared_error(y, pred)
    train_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
    pairs = tf.data.Dataset.from_tensor_slices(series[:6].reshape(3, 2)).unbatch().enumerate(start=5)
    pair = tf.data.make_one_shot_iterator(pairs).get_next()
    sess = _session_run(tf, feeder)
    out = {"loss": [], "x": []}
    while True:
        try:
            _, loss_v, x_v = sess.run([train_op, loss, x])
        except tf.errors.OutOfRangeError:
            break
        out["loss"].append(loss_v)
        out["x"].append(x_v[0])
    out = {k: np.array(v) for k, v in out.items()}
    out["pairs"] = np.array([np.concatenate([np.ravel(v) for v in sess.run(pair)]) for _ in range(3)])
    return _trained(tf, sess, out)


def bucketed_padded_batches(tf, feeder):
    """The NMT pipeline's length bucketing: a generator of variable-length sequences, Dataset.from_generator,
    tf.data.experimental.bucket_by_sequence_length with padded batches per bucket boundary, and a
    sequence_mask'ed mean of embeddings trained on each batch, the batches' shapes recorded."""
    seqs = [[1, 2], [3, 4, 5, 6], [2], [5, 5, 5, 5, 5], [1, 3, 2], [6], [4, 4, 4, 4, 4, 4], [2, 2]]

    def gen():
        for s in seqs:
            yield s, len(s) % 2

    ds = tf.data.Dataset.from_generator(gen, (tf.int32, tf.int32), (tf.TensorShape([None]), tf.TensorShape([])))
    ds = ds.apply(tf.data.experimental.bucket_by_sequence_length(
        lambda s, label: tf.shape(s)[0], bucket_boundaries=[3, 5], bucket_batch_sizes=[2, 2, 2]))
    tokens, labels = tf.data.make_one_shot_iterator(ds).get_next()
    emb = tf.get_variable("emb", [7, 4])
    mask = tf.cast(tf.sequence_mask(tf.reduce_sum(tf.cast(tokens > 0, tf.int32), 1), tf.shape(tokens)[1]),
                   tf.float32)
    pooled = tf.reduce_sum(tf.nn.embedding_lookup(emb, tokens) * mask[:, :, None], 1) / \
        tf.reduce_sum(mask, 1, keepdims=True)
    logits = tf.layers.dense(pooled, 2)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdagradOptimizer(0.3).minimize(loss)
    sess = _session_run(tf, feeder)
    out = {"loss": [], "shapes": []}
    while True:
        try:
            _, loss_v, tok = sess.run([train_op, loss, tokens])
        except tf.errors.OutOfRangeError:
            break
        out["loss"].append(loss_v)
        out["shapes"].append(tok.shape)
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


def fifo_queue_threads(tf, feeder):
    """The 2016 input pipeline with a queue of one's own: a tf.FIFOQueue fed by enqueue_many from placeholders in a
    Python thread, dequeue_many into the model, a Coordinator stopping the thread and the queue closed at the
    end (its size read as it drains)."""
    xs, ys = data(223, ("n", (12, 4)), ("i", (12,), 2))
    x_in = tf.placeholder(tf.float32, [None, 4])
    y_in = tf.placeholder(tf.int32, [None])
    queue = tf.FIFOQueue(capacity=16, dtypes=[tf.float32, tf.int32], shapes=[[4], []])
    enqueue = queue.enqueue_many([x_in, y_in])
    close = queue.close()
    x, y = queue.dequeue_many(4)
    loss = tf.losses.sparse_softmax_cross_entropy(y, tf.layers.dense(x, 2))
    train_op = tf.train.GradientDescentOptimizer(0.2).minimize(loss)
    sess = _session_run(tf, feeder)
    coord = tf.train.Coordinator()
    import threading

    def feed():
        for i in range(0, 12, 4):
            sess.run(enqueue, {x_in: xs[i:i + 4], y_in: ys[i:i + 4]})
        sess.run(close)
    thread = threading.Thread(target=feed)
    thread.start()
    coord.join([thread])
    out = {"size": [sess.run(queue.size())], "loss": []}
    try:
        while True:
            out["loss"].append(sess.run([train_op, loss])[1])
            out["size"].append(sess.run(queue.size()))
    except tf.errors.OutOfRangeError:
        pass
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


def slice_input_producer_batch(tf, feeder):
    """In-memory arrays through the queue API (the 2016 MNIST-from-NumPy scripts): tf.train.slice_input_producer
    over images and labels (no shuffling, two epochs), tf.train.batch of 3, start_queue_runners with a
    Coordinator, training until the producer's epochs run out (OutOfRangeError), then coord.request_stop and
    join; num_epochs makes a local variable, so local_variables_initializer runs first."""
    xs, ys = data(224, ("n", (6, 4)), ("i", (6,), 2))
    image, label = tf.train.slice_input_producer([tf.constant(xs), tf.constant(ys)], num_epochs=2, shuffle=False)
    images, labels = tf.train.batch([image, label], batch_size=3)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, tf.layers.dense(images, 2))
    train_op = tf.train.GradientDescentOptimizer(0.2).minimize(loss)
    sess = _session_run(tf, feeder)
    sess.run(tf.local_variables_initializer())
    coord = tf.train.Coordinator()
    threads = tf.train.start_queue_runners(sess=sess, coord=coord)
    out = {"loss": [], "labels": []}
    try:
        while not coord.should_stop():
            _, loss_v, lab = sess.run([train_op, loss, labels])
            out["loss"].append(loss_v)
            out["labels"].append(lab)
    except tf.errors.OutOfRangeError:
        pass
    finally:
        coord.request_stop()
    coord.join(threads)
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


# ---- Recommenders and reinforcement learning --------------------------------------------------------------------

def deep_cross_network(tf, feeder):
    """Deep & Cross (Wang et al. 2017) as the 2018 CTR repos wrote it: field embeddings by embedding_lookup
    concatenated with dense features, cross layers x0 * (x_l . w) + b + x_l by tf.tensordot, a deep tower of
    tf.layers.dense beside them, the logit from both, log loss through tf.losses.log_loss on the sigmoid, the
    embeddings' L2 in the regularization collection, and Adagrad with an initial accumulator."""
    fields = tf.placeholder(tf.int32, [None, 3])
    dense = tf.placeholder(tf.float32, [None, 2])
    click = tf.placeholder(tf.float32, [None, 1])
    emb = tf.get_variable("embeddings", [10, 3], regularizer=lambda t: 1e-3 * tf.nn.l2_loss(t))
    x0 = tf.concat([tf.reshape(tf.nn.embedding_lookup(emb, fields), [-1, 9]), dense], axis=1)
    xl = x0
    for i in range(2):
        w = tf.get_variable("cross_w_%d" % i, [11], initializer=tf.glorot_normal_initializer())
        b = tf.get_variable("cross_b_%d" % i, [11], initializer=tf.zeros_initializer())
        xl = x0 * tf.expand_dims(tf.tensordot(xl, w, axes=1), 1) + b + xl
    deep = tf.layers.dense(tf.layers.dense(x0, 8, tf.nn.relu), 4, tf.nn.relu)
    logit = tf.layers.dense(tf.concat([xl, deep], axis=1), 1)
    prob = tf.sigmoid(logit)
    log_loss = tf.losses.log_loss(click, prob)
    loss = log_loss + tf.losses.get_regularization_loss()
    train_op = tf.train.AdagradOptimizer(0.1, initial_accumulator_value=0.01).minimize(loss)
    fs, ds, cs = data(225, ("i", (8, 3), 10), ("n", (8, 2)), ("i", (8, 1), 2))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, log_loss, loss], {fields: fs, dense: ds, click: cs.astype(np.float32)})
    return _trained(tf, sess, out)


def double_dqn_prioritized(tf, feeder):
    """Double DQN with prioritized replay (the 2018 baselines-style graph): the online network picks the next
    action by argmax, the target network scores it through tf.gather_nd on stacked (row, action) indices, TD
    errors give the new priorities, tf.losses.huber_loss weighted by the importance weights, gradients clipped by
    tf.clip_by_norm each, and the target synced by tf.group of assigns over the scopes' sorted variables."""
    def q_net(s, scope):
        with tf.variable_scope(scope, reuse=tf.AUTO_REUSE):
            return tf.layers.dense(tf.layers.dense(s, 8, tf.nn.relu), 3)
    s = tf.placeholder(tf.float32, [None, 4])
    a = tf.placeholder(tf.int32, [None])
    r = tf.placeholder(tf.float32, [None])
    s2 = tf.placeholder(tf.float32, [None, 4])
    done = tf.placeholder(tf.float32, [None])
    is_weights = tf.placeholder(tf.float32, [None])
    q = q_net(s, "online")
    q_next_online = q_net(s2, "online")
    q_next_target = q_net(s2, "target")
    rows = tf.range(tf.shape(a)[0])
    q_sa = tf.gather_nd(q, tf.stack([rows, a], axis=1))
    best = tf.argmax(q_next_online, axis=1, output_type=tf.int32)
    q_target = r + 0.99 * (1.0 - done) * tf.gather_nd(q_next_target, tf.stack([rows, best], axis=1))
    td = tf.stop_gradient(q_target) - q_sa
    priorities = tf.abs(td) + 1e-6
    loss = tf.losses.huber_loss(tf.stop_gradient(q_target), q_sa, weights=is_weights)
    online_vars = sorted(tf.trainable_variables("online"), key=lambda v: v.name)
    target_vars = sorted(tf.trainable_variables("target"), key=lambda v: v.name)
    optimizer = tf.train.RMSPropOptimizer(0.01, decay=0.95, epsilon=0.01)
    grads = optimizer.compute_gradients(loss, var_list=online_vars)
    train_op = optimizer.apply_gradients([(tf.clip_by_norm(g, 1.0), v) for g, v in grads])
    sync = tf.group(*[t.assign(o) for t, o in zip(target_vars, online_vars)])
    ss, aa, rr, ss2, dd, ww = data(226, ("n", (6, 4)), ("i", (6,), 3), ("n", (6,)), ("n", (6, 4)), ("i", (6,), 2),
                                   ("f", (6,)))
    feed = {s: ss, a: aa, r: rr, s2: ss2, done: dd.astype(np.float32), is_weights: ww}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, priorities], feed)
    sess.run(sync)
    out["after_sync"] = sess.run(loss, feed)
    return _trained(tf, sess, out)


# ---- Latent variables and densities -----------------------------------------------------------------------------

def gumbel_softmax_vae(tf, feeder):
    """A categorical VAE (Jang et al. 2016, ericjang/gumbel-softmax): Gumbel noise -log(-log(u)) from
    tf.random_uniform, the temperature a placeholder annealed each step, the straight-through hard sample
    (tf.stop_gradient(hard - y) + y) from tf.one_hot of the argmax, the KL to a uniform prior, a Bernoulli
    decoder by sigmoid cross-entropy."""
    x = tf.placeholder(tf.float32, [None, 10])
    tau = tf.placeholder(tf.float32, [])
    logits_y = tf.reshape(tf.layers.dense(tf.layers.dense(x, 16, tf.nn.relu), 2 * 3), [-1, 2, 3])
    u = tf.random_uniform(tf.shape(logits_y), minval=0, maxval=1)
    gumbel = -tf.log(-tf.log(u + 1e-20) + 1e-20)
    y = tf.nn.softmax((logits_y + gumbel) / tau)
    hard = tf.cast(tf.one_hot(tf.argmax(y, -1), 3), y.dtype)
    z = tf.stop_gradient(hard - y) + y
    recon_logits = tf.layers.dense(tf.layers.dense(tf.reshape(z, [-1, 6]), 16, tf.nn.relu), 10)
    q_y = tf.nn.softmax(logits_y)
    kl = tf.reduce_sum(q_y * (tf.log(q_y + 1e-20) - np.log(1.0 / 3)), [1, 2])
    recon = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=recon_logits), 1)
    loss = tf.reduce_mean(recon + kl)
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    xs, = data(227, ("f", (8, 10)))
    xs = (xs > 0.5).astype(np.float32)
    sess = _session_run(tf, feeder)
    out = {"loss": []}
    for step in range(3):
        out["loss"].append(sess.run([train_op, loss], {x: xs, tau: max(0.5, np.exp(-0.3 * step)),
                                                       **feeder.feeds(tf)})[1])
    out["loss"] = np.array(out["loss"])
    out["hard"] = sess.run(hard, {x: xs, tau: 0.5, **feeder.feeds(tf)})
    return _trained(tf, sess, out)


def planar_flow(tf, feeder):
    """Variational inference with planar normalizing flows (Rezende & Mohamed 2015, as the 2017 TF demos wrote
    it): K flows z + u_hat * tanh(w.z + b) with u_hat keeping each invertible, log|det| = log|1 + u_hat.psi|
    summed, base samples from tf.random_normal, fitted to an unnormalized 2-D energy by minimizing the KL."""
    z0 = tf.random_normal([16, 2])
    z = z0
    log_det = 0.0
    for k in range(3):
        with tf.variable_scope("flow_%d" % k):
            u = tf.get_variable("u", [2], initializer=tf.constant_initializer([0.5, -0.3 + 0.2 * k]))
            w = tf.get_variable("w", [2], initializer=tf.constant_initializer([0.4, 0.6 - 0.1 * k]))
            b = tf.get_variable("b", [], initializer=tf.zeros_initializer())
            wu = tf.reduce_sum(w * u)
            u_hat = u + (-1.0 + tf.nn.softplus(wu) - wu) * w / tf.reduce_sum(tf.square(w))
            lin = tf.reduce_sum(z * w, axis=1, keepdims=True) + b
            psi = (1.0 - tf.square(tf.tanh(lin))) * w
            log_det += tf.log(tf.abs(1.0 + tf.reduce_sum(psi * u_hat, axis=1)) + 1e-8)
            z = z + u_hat * tf.tanh(lin)
    energy = 0.5 * tf.square((tf.norm(z, axis=1) - 2.0) / 0.4) - \
        tf.reduce_logsumexp(tf.stack([-0.5 * tf.square((z[:, 0] - 2.0) / 0.6),
                                      -0.5 * tf.square((z[:, 0] + 2.0) / 0.6)]), axis=0)
    log_q0 = tf.reduce_sum(tf.distributions.Normal(0.0, 1.0).log_prob(z0), axis=1)
    kl = tf.reduce_mean(log_q0 - log_det + energy)
    train_op = tf.train.AdamOptimizer(0.05).minimize(kl)
    sess = _session_run(tf, feeder)
    return _trained(tf, sess, _steps(tf, sess, [train_op, kl, tf.reduce_mean(log_det)], feeder.feeds(tf)))


def bayes_by_backprop(tf, feeder):
    """Bayes by Backprop (Blundell et al. 2015, as the 2017 TF posts wrote it): each weight a mean and a rho with
    sigma = log1p(exp(rho)), sampled by mu + sigma * eps from tf.random_normal, the closed-form KL to a N(0, 1)
    prior through tf.distributions.kl_divergence scaled by the batches per epoch, and the predictive mean of
    several forward passes by tf.map_fn-free unrolling."""
    x = tf.placeholder(tf.float32, [None, 3])
    y = tf.placeholder(tf.float32, [None, 1])
    kls = []

    def bayes_dense(inputs, units, name):
        with tf.variable_scope(name):
            shape = [int(inputs.shape[1]), units]
            mu = tf.get_variable("mu", shape, initializer=tf.truncated_normal_initializer(stddev=0.1))
            rho = tf.get_variable("rho", shape, initializer=tf.constant_initializer(-3.0))
            sigma = tf.log1p(tf.exp(rho))
            w = mu + sigma * tf.random_normal(shape)
            posterior = tf.distributions.Normal(mu, sigma)
            kls.append(tf.reduce_sum(tf.distributions.kl_divergence(posterior, tf.distributions.Normal(0.0, 1.0))))
            return tf.matmul(inputs, w)
    pred = bayes_dense(tf.nn.relu(bayes_dense(x, 6, "l1")), 1, "l2")
    nll = -tf.reduce_sum(tf.distributions.Normal(pred, 0.5).log_prob(y))
    loss = nll + tf.add_n(kls) / 4.0
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    xs, ys = data(228, ("n", (8, 3)), ("n", (8, 1)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, nll], {x: xs, y: ys, **feeder.feeds(tf)})
    return _trained(tf, sess, out)


# ---- Fourth batch: tables in variables, weighted statistics --------------------------------------------------

def tabular_q_scatter_nd(tf, feeder):
    """Tabular Q-learning with the table in a variable (the 2016-2017 FrozenLake tutorials' graph form): Q(s, a)
    read by tf.gather_nd, the TD target from the next state's row max, written back by tf.scatter_nd_update on
    (state, action) pairs; visit counts kept by tf.scatter_nd_add and a decaying bonus by tf.scatter_nd_sub."""
    n_states, n_actions = 5, 3
    q_table = tf.Variable(tf.zeros([n_states, n_actions]), name="q_table")
    visits = tf.Variable(tf.zeros([n_states, n_actions]), trainable=False, name="visits")
    bonus = tf.Variable(tf.ones([n_states]), trainable=False, name="bonus")
    states = tf.placeholder(tf.int32, [None])
    actions = tf.placeholder(tf.int32, [None])
    rewards = tf.placeholder(tf.float32, [None])
    next_states = tf.placeholder(tf.int32, [None])
    pairs = tf.stack([states, actions], axis=1)
    q_sa = tf.gather_nd(q_table, pairs)
    target = rewards + 0.9 * tf.reduce_max(tf.gather(q_table, next_states), axis=1)
    new_q = q_sa + 0.5 * (target - q_sa)
    update = tf.scatter_nd_update(q_table, pairs, new_q)
    count = tf.scatter_nd_add(visits, pairs, tf.ones_like(rewards))
    decay = tf.scatter_nd_sub(bonus, tf.expand_dims(states, 1), 0.1 * tf.ones_like(rewards))
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    out = {"td": []}
    for episode in range(3):
        s_, a_, r_, s2_ = data(230 + episode, ("i", (4,), n_states), ("i", (4,), n_actions), ("n", (4,)),
                               ("i", (4,), n_states))
        s_ = np.arange(4, dtype=np.int32)  # distinct (state, action) pairs, as scatter_nd_update asks
        feed = {states: s_, actions: a_, rewards: r_, next_states: s2_}
        out["td"].append(sess.run(target - q_sa, feed))
        sess.run([update, count, decay], feed)
    out["td"] = np.array(out["td"])
    out["q"], out["visits"], out["bonus"] = sess.run([q_table, visits, bonus])
    out["greedy"] = sess.run(tf.argmax(q_table, axis=1))
    return out


def weighted_moments_balanced_norm(tf, feeder):
    """Class-balanced normalization statistics (2018 imbalanced-data code): each example weighted by the inverse
    frequency of its class (tf.bincount over the labels, gathered), tf.nn.weighted_moments over the batch, the
    features normalized with them by tf.nn.batch_normalization, and the weighted loss trained by Adam."""
    x = tf.placeholder(tf.float32, [None, 5])
    y = tf.placeholder(tf.int32, [None])
    counts = tf.cast(tf.bincount(y, minlength=3), tf.float32)
    weights = tf.gather(1.0 / tf.maximum(counts, 1.0), y)
    h = tf.layers.dense(x, 6, use_bias=False)  # the normalization removes a bias (its gradient is noise)
    mean, variance = tf.nn.weighted_moments(h, axes=[0], frequency_weights=tf.expand_dims(weights, 1))
    kept_mean, kept_var = tf.nn.weighted_moments(h, [0], tf.expand_dims(weights, 1), keep_dims=True)
    h = tf.nn.batch_normalization(h, mean, variance, offset=None, scale=None, variance_epsilon=1e-3)
    logits = tf.layers.dense(tf.nn.relu(h), 3)
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits, weights=weights)
    train_op = tf.train.AdamOptimizer(0.02).minimize(loss)
    xs, ys = data(233, ("n", (10, 5)), ("i", (10,), 3))
    ys[:6] = 0
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, mean, variance], {x: xs, y: ys})
    out["kept"] = np.concatenate(sess.run([kept_mean, kept_var], {x: xs, y: ys}))
    return _trained(tf, sess, out)


def srcnn_ssim_loss(tf, feeder):
    """SRCNN trained on a mix of L1 and 1 - SSIM (Zhao et al. 2017's loss, as 2018 super-resolution repos wrote
    it): bicubic-free upsampling by tf.image.resize_bilinear, three convs, tf.image.ssim with max_val 1.0 in the
    loss (its gradient through the Gaussian window), and PSNR and SSIM of the uint8-converted outputs
    (max_val 255, a smaller filter) for the logs."""
    low = tf.placeholder(tf.float32, [None, 8, 8, 1])
    high = tf.placeholder(tf.float32, [None, 16, 16, 1])
    up = tf.image.resize_bilinear(low, [16, 16])
    h = tf.layers.conv2d(up, 8, 5, padding="same", activation=tf.nn.relu)
    h = tf.layers.conv2d(h, 4, 1, padding="same", activation=tf.nn.relu)
    out = up + tf.layers.conv2d(h, 1, 3, padding="same")
    ssim = tf.reduce_mean(tf.image.ssim(out, high, max_val=1.0))
    loss = 0.84 * (1.0 - ssim) + 0.16 * tf.reduce_mean(tf.abs(out - high))
    train_op = tf.train.AdamOptimizer(1e-3).minimize(loss)
    as_uint8 = tf.image.convert_image_dtype(tf.clip_by_value(out, 0.0, 1.0), tf.uint8, saturate=True)
    target_uint8 = tf.image.convert_image_dtype(high, tf.uint8, saturate=True)
    psnr = tf.image.psnr(as_uint8, target_uint8, max_val=255)
    ssim_map = tf.image.ssim(as_uint8, target_uint8, max_val=255, filter_size=7, return_index_map=True)
    hs, = data(234, ("f", (2, 16, 16, 1)))
    ls = hs.reshape(2, 8, 2, 8, 2, 1).mean((2, 4))
    sess = _session_run(tf, feeder)
    feed = {low: ls, high: hs}
    result = _steps(tf, sess, [train_op, loss, ssim], feed)
    result["psnr"], result["ssim_map"] = sess.run([psnr, ssim_map], feed)
    return _trained(tf, sess, result)



def gae_scan_reverse(tf, feeder):
    """Generalized advantage estimation in the graph (2018 PPO/A2C repos): TD residuals from a value head,
    tf.scan with reverse=True accumulating gamma * lambda * (1 - done) backwards, discounted returns also by
    tf.cumprod(exclusive=True) weights over a matrix_band_part upper triangle, and the actor-critic loss with
    the advantages stop_gradient'ed."""
    steps = 6
    obs = tf.placeholder(tf.float32, [steps + 1, 3])
    rewards = tf.placeholder(tf.float32, [steps])
    dones = tf.placeholder(tf.float32, [steps])
    actions = tf.placeholder(tf.int32, [steps])
    h = tf.layers.dense(obs, 8, tf.nn.tanh)
    values = tf.squeeze(tf.layers.dense(h, 1), 1)
    logits = tf.layers.dense(h[:-1], 2)
    deltas = rewards + 0.99 * values[1:] * (1.0 - dones) - values[:-1]
    advantages = tf.scan(lambda acc, x: x[0] + 0.99 * 0.95 * (1.0 - x[1]) * acc, (deltas, dones),
                         initializer=tf.constant(0.0), reverse=True)
    discounts = tf.cumprod(tf.fill([steps], 0.99), exclusive=True)
    upper = tf.matrix_band_part(tf.ones([steps, steps]), 0, -1)
    returns = tf.reduce_sum(upper * discounts[None, :] / discounts[:, None] * rewards[None, :], axis=1)
    logp = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)
    loss = -tf.reduce_mean(logp * tf.stop_gradient(advantages)) + \
        0.5 * tf.reduce_mean(tf.square(tf.stop_gradient(advantages + values[:-1]) - values[:-1]))
    train_op = tf.train.RMSPropOptimizer(7e-3, decay=0.99, epsilon=1e-5).minimize(loss)
    os_, rs, ds, acts = data(235, ("n", (steps + 1, 3)), ("n", (steps,)), ("i", (steps,), 2), ("i", (steps,), 2))
    feed = {obs: os_, rewards: rs, dones: (ds * (rs > 1)).astype(np.float32), actions: acts}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, advantages], feed)
    out["returns"] = sess.run(returns, feed)
    return _trained(tf, sess, out)


def a3c_global_local(tf, feeder):
    """A3C's global and worker networks (the 2017 DeepMind-Atari tutorials, one worker here): the worker's
    gradients (clipped by global norm) applied to the global network's variables by zip, the worker synced from
    the global one by tf.assign over both scopes' trainable variables, an entropy bonus from the softmax."""
    def net(scope, s):
        with tf.variable_scope(scope):
            h = tf.layers.dense(s, 8, tf.nn.elu, name="hidden")
            return tf.layers.dense(h, 3, name="policy"), tf.layers.dense(h, 1, name="value")
    s = tf.placeholder(tf.float32, [None, 4])
    a = tf.placeholder(tf.int32, [None])
    target_v = tf.placeholder(tf.float32, [None])
    net("global", s)
    logits, value = net("worker_0", s)
    policy = tf.nn.softmax(logits)
    advantage = target_v - tf.squeeze(value, 1)
    responsible = tf.reduce_sum(policy * tf.one_hot(a, 3), axis=1)
    entropy = -tf.reduce_sum(policy * tf.log(policy + 1e-8))
    loss = 0.5 * tf.reduce_sum(tf.square(advantage)) - tf.reduce_sum(tf.log(responsible + 1e-8) *
                                                                      tf.stop_gradient(advantage)) - 0.01 * entropy
    local_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, "worker_0")
    global_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, "global")
    grads, grad_norm = tf.clip_by_global_norm(tf.gradients(loss, local_vars), 5.0)
    apply_grads = tf.train.AdamOptimizer(1e-2).apply_gradients(zip(grads, global_vars))
    sync = tf.group(*[lv.assign(gv) for lv, gv in zip(local_vars, global_vars)])
    ss, aa, vv = data(236, ("n", (5, 4)), ("i", (5,), 3), ("n", (5,)))
    sess = _session_run(tf, feeder)
    feed = {s: ss, a: aa, target_v: vv}
    out = {"loss": [], "norm": []}
    for _ in range(3):
        sess.run(sync)
        loss_v, norm_v, _ = sess.run([loss, grad_norm, apply_grads], feed)
        out["loss"].append(loss_v)
        out["norm"].append(norm_v)
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


def tag_sets_jaccard(tf, feeder):
    """Tag-set similarity as 2018 recommender code computed it with tf.sets: the intersection and union of each
    row's predicted top-3 tags with its true tags (padded with -1), their sizes, the Jaccard index, and a
    difference densified by tf.sparse_tensor_to_dense."""
    logits = tf.placeholder(tf.float32, [None, 6])
    truth = tf.placeholder(tf.int32, [None, 3])
    _, top = tf.nn.top_k(logits, 3)
    inter = tf.sets.set_intersection(top, truth)
    union = tf.sets.set_union(top, truth)
    missed = tf.sets.set_difference(truth, top)
    jaccard = tf.cast(tf.sets.set_size(inter), tf.float32) / tf.cast(tf.sets.set_size(union), tf.float32)
    ls, = data(237, ("n", (4, 6)))
    tags = np.array([[0, 2, 5], [1, 1, 3], [4, 0, 2], [5, 3, 1]], np.int32)
    with tf.Session() as sess:
        names = ["jaccard", "inter", "missed"]
        values = sess.run([jaccard, tf.sparse_tensor_to_dense(inter, default_value=-1),
                           tf.sparse_tensor_to_dense(missed, default_value=-1)], {logits: ls, truth: tags})
    return dict(zip(names, values))



def text_cnn_pool_over_time(tf, feeder):
    """A sentence CNN with TF 1.14's pooling names (Kim 2014 as 2019 TF1 code wrote it): conv1d feature maps
    max-pooled over time by tf.nn.pool with a window of the whole length, a second branch by tf.nn.max_pool1d
    and tf.nn.avg_pool1d, 2-D pooling of a stacked map by tf.nn.max_pool_v2 and avg_pool_v2, dropout off at
    evaluation by a keep_prob placeholder of default 1."""
    steps, vocab = 8, 9
    ids = tf.placeholder(tf.int32, [None, steps])
    labels = tf.placeholder(tf.int32, [None])
    keep_prob = tf.placeholder_with_default(1.0, [])
    emb = tf.nn.embedding_lookup(tf.get_variable("emb", [vocab, 6]), ids)
    feats = []
    for width in (2, 3):
        with tf.variable_scope("conv_%d" % width):
            w = tf.get_variable("W", [width, 6, 4], initializer=tf.truncated_normal_initializer(stddev=0.1))
            h = tf.nn.relu(tf.nn.conv1d(emb, w, stride=1, padding="VALID"))
            feats.append(tf.squeeze(tf.nn.pool(h, [steps - width + 1], "MAX", "VALID"), 1))
    local = tf.nn.max_pool1d(emb, ksize=2, strides=2, padding="SAME")
    smooth = tf.nn.avg_pool1d(local, ksize=[1, 2, 1], strides=[1, 1, 1], padding="VALID")
    grid = tf.reshape(emb, [-1, 2, steps // 2, 6])
    grid_max = tf.nn.max_pool_v2(grid, ksize=2, strides=2, padding="VALID")
    grid_avg = tf.nn.avg_pool_v2(grid, ksize=[1, 2], strides=[1, 2], padding="SAME")
    pooled = tf.concat(feats + [tf.layers.flatten(smooth), tf.layers.flatten(grid_max),
                                tf.layers.flatten(grid_avg)], axis=1)
    logits = tf.layers.dense(tf.nn.dropout(pooled, keep_prob), 2)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    xs, ys = data(238, ("i", (4, steps), vocab), ("i", (4,), 2))
    sess = _session_run(tf, feeder)
    return _trained(tf, sess, _steps(tf, sess, [train_op, loss], {ids: xs, labels: ys}))


SCRIPTS = {f.__name__: f for f in (
    kmeans_assign, knn_top_k_vote, newton_logistic_hessians, fgsm_adversarial_training,
    spectral_norm_discriminator, weight_norm_data_init, metrics_regression_eval,
    metrics_ranking_at_k, multilabel_thresholds, beta_policy_gradient, bayesian_conjugate_family,
    reinforce_gaussian_policy, vocab_table_bag_of_words, two_graphs_distillation, center_loss_scatter_sub,
    focal_loss_anchors, ranknet_pairwise, bilstm_crf_forward, greedy_decode_shape_invariants,
    transformer_causal_decoder, spatial_transformer, pixelcnn_masked_conv, dataset_window_forecast,
    bucketed_padded_batches, fifo_queue_threads, slice_input_producer_batch, deep_cross_network,
    double_dqn_prioritized, gumbel_softmax_vae, planar_flow, bayes_by_backprop, tabular_q_scatter_nd,
    weighted_moments_balanced_norm, srcnn_ssim_loss, gae_scan_reverse, a3c_global_local, tag_sets_jaccard,
    text_cnn_pool_over_time)}


run_script = script_runner(SCRIPTS)


_REFUSED = {"fifo_queue_threads": "tf.FIFOQueue is refused: a session's steps take turns, so a dequeue waiting in a "
                                  "step for another thread's enqueue would wait forever (tf.data.Dataset."
                                  "from_generator is the alternative named)"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(raises=UnsupportedError, strict=True,
                                                                          reason=_REFUSED[n]))
                                  if n in _REFUSED else n for n in sorted(SCRIPTS)])
def test_outsider_script_runs_as_in_tensorflow(tf1, name):
    check_against_tensorflow(tf1, run_script, name)


# A script of each family this sweep added (distributions, metrics, lookup tables, windows, a layer called again
# in a while_loop body, scatter_nd into a variable), on the OpenCL device.
_ON_OPENCL = ["bayesian_conjugate_family", "metrics_ranking_at_k", "vocab_table_bag_of_words",
              "dataset_window_forecast", "greedy_decode_shape_invariants", "tabular_q_scatter_nd"]


@needs_opencl
@pytest.mark.parametrize("name", _ON_OPENCL)
def test_outsider_script_runs_as_in_tensorflow_on_opencl(tf1, name, monkeypatch):
    sessions_on_opencl(monkeypatch)
    check_against_tensorflow(tf1, run_script, name)


def test_lookup_tables_as_tensorflow_fails_and_maps(tf1, tmp_path):
    """TF1's contrib spellings of the vocabulary tables (index_table_from_tensor and _file, index_to_string_table_
    from_tensor) map as TF's StaticHashTable of the same contents, and a TSV's columns (int64, string and float
    keys and values) as TF reads them; a lookup before tables_initializer is TF's
    FailedPreconditionError naming the lookup node; hashing out-of-vocabulary keys into buckets is refused."""
    import tfplus
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\nc\n")
    counts = tmp_path / "counts.tsv"
    counts.write_text("7\tb\t0.5\n3\ta\t1.5\n")
    keys = np.array([b"b", b"z", b"a"])

    def columns(tf):  # a TSV's columns as keys and values, both ways
        weights = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            str(counts), tf.string, 1, tf.float32, 2), -1.0)
        ids = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            str(counts), tf.int64, 0, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, delimiter="\t"), "?")
        return [weights.lookup(tf.constant(keys)), ids.lookup(tf.constant([3, 8], tf.int64))]

    def tensorflow():
        with tf1.Graph().as_default():
            table = tf1.lookup.StaticHashTable(tf1.lookup.KeyValueTensorInitializer(
                ["a", "b", "c"], tf1.constant([0, 1, 2], tf1.int64)), -1)
            back = tf1.lookup.StaticHashTable(tf1.lookup.KeyValueTensorInitializer(
                tf1.constant([0, 1, 2], tf1.int64), ["a", "b", "c"]), "UNK")
            ids, words = table.lookup(tf1.constant(keys)), back.lookup(tf1.constant([2, 7], tf1.int64))
            from_columns = columns(tf1)
            with tf1.Session() as sess:
                with pytest.raises(tf1.errors.FailedPreconditionError, match="not initialized"):
                    sess.run(ids)
                sess.run(tf1.tables_initializer())
                return sess.run([ids, ids, words] + from_columns)

    def tfplus_contrib():
        tf = tfplus
        with tf.Graph().as_default():
            table = tf.contrib.lookup.index_table_from_tensor(["a", "b", "c"])
            from_file = tf.contrib.lookup.index_table_from_file(str(vocab))
            back = tf.contrib.lookup.index_to_string_table_from_tensor(["a", "b", "c"])
            ids, words = table.lookup(tf.constant(keys)), back.lookup(tf.constant([2, 7], tf.int64))
            file_ids = from_file.lookup(tf.constant(keys))
            from_columns = columns(tf)
            with tf.Session() as sess:
                with pytest.raises(tf.errors.FailedPreconditionError, match="LookupTableFindV2.*not initialized"):
                    sess.run(ids)
                sess.run(tf.tables_initializer())
                return sess.run([ids, file_ids, words] + from_columns)
    for want, got in zip(tensorflow(), tfplus_contrib()):
        assert np.asarray(want).tolist() == np.asarray(got).tolist()
    with pytest.raises(NotImplementedError, match="num_oov_buckets=2.*Fingerprint64"):
        tfplus.contrib.lookup.index_table_from_tensor(["a"], num_oov_buckets=2)
    with pytest.raises(UnsupportedError, match="tf.lookup.StaticVocabularyTable"):
        tfplus.lookup.StaticVocabularyTable(None, 1)


def test_dataset_windows_groups_and_padded_scalars_as_tensorflow(tf1):
    """The grouping transformations give TensorFlow's elements: window with shift and stride (the short last
    windows kept, then dropped), enumerate, unbatch, shard, group_by_window by window_size_func, and padded_batch
    of a sequence beside a scalar label (the scalar is not padded)."""
    import tfplus

    def pipelines(tf):
        ds = tf.data.Dataset.range(7)
        seqs = tf.data.Dataset.from_generator(lambda: ([1] * n for n in (2, 3, 1, 4)), tf.int32,
                                              tf.TensorShape([None]))
        labelled = tf.data.Dataset.zip((seqs, tf.data.Dataset.range(4)))
        return {
            "window": ds.window(3, shift=2, stride=2).flat_map(lambda w: w.batch(3)),
            "window_drop": ds.window(3, shift=2, drop_remainder=True).flat_map(lambda w: w.batch(3)),
            "window_pairs": tf.data.Dataset.zip((ds, ds.map(lambda v: v * 10))).window(2).flat_map(
                lambda a, b: tf.data.Dataset.zip((a.batch(2), b.batch(2)))).map(lambda a, b: a + b),
            "enumerate": ds.skip(4).enumerate(start=3).map(lambda i, v: i * 100 + v),
            "unbatch": ds.batch(3).unbatch().shard(2, 1),
            "group": ds.apply(tf.data.experimental.group_by_window(
                lambda v: v % 2, lambda key, w: w.batch(2), window_size_func=lambda key: key + 2)).map(
                lambda b: tf.reduce_sum(b) * 10 + tf.cast(tf.size(b), tf.int64)),
            "padded": labelled.padded_batch(2, (tf.TensorShape([None]), tf.TensorShape([]))).map(
                lambda s, label: tf.reduce_sum(s, 1) * 10 + tf.cast(label, tf.int32)),
        }

    def run(tf):
        with tf.Graph().as_default():
            nexts = {k: tf.data.make_one_shot_iterator(d).get_next() for k, d in pipelines(tf).items()}
            out = {}
            with tf.Session() as sess:
                for k, t in nexts.items():
                    out[k] = []
                    try:
                        while True:
                            out[k].append(np.asarray(sess.run(t)).tolist())
                    except tf.errors.OutOfRangeError:
                        pass
            return out
    want, got = run(tf1), run(tfplus)
    assert got == want


def test_distribution_statistics_as_tensorflow(tf1):
    """The new distributions' statistics where the scripts do not reach: Laplace's cdf, NaN where a mode or a
    moment is undefined (Gamma with concentration < 1, Beta's mode at a concentration <= 1, StudentT's mean at
    df <= 1) and StudentT's infinite variance at 1 < df <= 2, Dirichlet's mode, Exponential's entropy and
    log_prob; samples have TF's shapes, and their means are near the distributions'."""
    import tfplus

    def stats(tf):
        tfd = tf.distributions
        with tf.Graph().as_default():
            gamma = tfd.Gamma([0.5, 2.0, 3.0], [1.0, 2.0, 0.5])
            beta = tfd.Beta([0.8, 2.0], [3.0, 4.0])
            student = tfd.StudentT([0.8, 1.5, 5.0], 0.5, 2.0)
            dirichlet = tfd.Dirichlet([[2.0, 3.0, 4.0], [1.5, 1.5, 6.0]])
            laplace = tfd.Laplace([0.0, 1.0], 2.0)
            exponential = tfd.Exponential([0.5, 3.0])
            named = {"gamma_mode": gamma.mode(), "beta_mode": beta.mode(), "student_mean": student.mean(),
                     "student_var": student.variance(), "student_stddev": student.stddev(),
                     # (TensorFlow's mode of a batch of Dirichlets fails to build: one of each)
                     "dirichlet_mode": tfd.Dirichlet([2.0, 3.0, 4.0]).mode(),
                     "dirichlet_nan_mode": tfd.Dirichlet([0.5, 3.0, 4.0]).mode(), "dirichlet_var": dirichlet.variance(),
                     "laplace_cdf": laplace.cdf([[-1.0], [2.0]]), "laplace_stddev": laplace.stddev(),
                     "exp_entropy": exponential.entropy(), "exp_logp": exponential.log_prob([[0.3], [2.0]]),
                     "beta_cdf_free_prob": beta.prob([0.3, 0.6]), "gamma_kl_exp": tfd.kl_divergence(
                         gamma, tfd.Exponential(1.5))}
            samples = {"gamma": gamma.sample(4000, seed=1), "beta": beta.sample([2, 2000], seed=2),
                       "student": tfd.StudentT(6.0, [0.0, 1.0], 1.0).sample(4000, seed=3),
                       "dirichlet": dirichlet.sample(3000, seed=4), "laplace": laplace.sample(4000, seed=5),
                       "exponential": exponential.sample(4000, seed=6)}
            shapes = {k: v.shape.as_list() for k, v in samples.items()}
            with tf.Session() as sess:
                values, drawn = sess.run([named, samples])
            means = {k: v.reshape((-1,) + v.shape[len(shapes[k]) - len(shapes[k]) + (2 if k == "beta" else 1):])
                     .mean(0) for k, v in drawn.items()}
            return values, shapes, means
    (want, want_shapes, want_means), (got, got_shapes, got_means) = stats(tf1), stats(tfplus)
    assert got_shapes == want_shapes
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    for key in want_means:   # two draws of a few thousand: a few standard errors apart at most
        np.testing.assert_allclose(got_means[key], want_means[key], rtol=0.1, atol=0.1, err_msg=key)


def test_metric_weights_and_bad_predictions_as_tensorflow(tf1):
    """Weighted at-k and at-threshold metrics stream as TensorFlow's; predictions outside [0, 1] are counted as
    TensorFlow counts them (its range check is never attached to float32 predictions)."""
    import tfplus

    def run(tf):
        with tf.Graph().as_default():
            logits = tf.constant([[0.1, 0.9, 0.3, 0.2], [0.8, 0.1, 0.05, 0.7], [0.2, 0.3, 0.6, 0.1]])
            labels = tf.constant([[1, 3], [2, -1], [2, 0]], tf.int64)
            weights = tf.constant([1.0, 0.5, 2.0])
            probs = tf.placeholder(tf.float32, [None])
            metrics = [tf.metrics.precision_at_k(labels, logits, 2, weights=weights),
                       tf.metrics.recall_at_k(labels, logits, 2, class_id=2, weights=weights),
                       tf.metrics.average_precision_at_k(labels, logits, 3, weights=weights),
                       tf.metrics.recall_at_thresholds(tf.constant([True, False, True]), probs, [0.25, 0.5],
                                                       weights=weights)]
            with tf.Session() as sess:
                sess.run(tf.local_variables_initializer())
                out = sess.run([u for _, u in metrics], {probs: [0.3, 0.6, 0.9]})
                return out + [sess.run(metrics[3][1], {probs: [0.3, 1.5, -0.2]})]
    for want, got in zip(run(tf1), run(tfplus)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_sets_as_tensorflow(tf1):
    """tf.sets on strings, on SparseTensors (both, and one beside a dense tensor, which TF puts first), a
    difference both ways, and set_size of a SparseTensor with repeated elements, as TensorFlow gives them."""
    import tfplus

    def run(tf):
        with tf.Graph().as_default():
            words = tf.constant([[b"a", b"b", b"c"], [b"c", b"c", b"d"]])
            other = tf.constant([[b"b", b"x", b"a"], [b"d", b"e", b"f"]])
            sp = tf.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 1]], tf.constant([4, 2, 7, 7], tf.int64), [3, 2])
            dense = tf.constant([[2, 3], [5, 5], [7, 1]], tf.int64)
            results = [tf.sets.set_intersection(words, other), tf.sets.set_union(sp, sp),
                       tf.sets.set_difference(sp, dense), tf.sets.set_difference(dense, sp, aminusb=False),
                       tf.sets.set_intersection(sp, dense)]
            sizes = [tf.sets.set_size(sp)] + [tf.sets.set_size(r) for r in results]
            with tf.Session() as sess:
                values, counts = sess.run([results, sizes])
        return [(v.indices.tolist(), v.values.tolist(), v.dense_shape.tolist()) for v in values], \
            [c.tolist() for c in counts]
    assert run(tfplus) == run(tf1)


def test_sparse_values_carry_tensorflows_gradients(tf1):
    """A SparseTensor's float values get TensorFlow's gradient through sparse_add, sparse_reduce_sum,
    sparse_tensor_to_dense, sparse_reorder, sparse_slice, sparse_fill_empty_rows and sparse_transpose (host ops
    underneath, which had none: tf.gradients gave None, and variables before them silently did not train)."""
    import tfplus

    def gradients(tf):
        cases = {
            "add": lambda sp: tf.sparse_add(sp, tf.SparseTensor([[0, 2], [1, 0]], [-3.0, 5.0], [2, 4])).values,
            "add_threshold": lambda sp: tf.sparse_add(sp, sp, threshold=3.0).values,
            "add_dense": lambda sp: tf.sparse_add(tf.ones([2, 4]), sp),
            "reduce_sum": lambda sp: tf.sparse_reduce_sum(sp, 1) * tf.constant([1.0, 3.0]),
            "reduce_sum_all": lambda sp: tf.sparse_reduce_sum(sp),
            "to_dense": lambda sp: tf.sparse_tensor_to_dense(sp, default_value=0.5) * tf.range(8.0)[None, :4],
            "reorder": lambda sp: tf.sparse_reorder(tf.SparseTensor(
                sp.indices[::-1], sp.values[::-1], sp.dense_shape)).values * tf.constant([1.0, 2.0, 3.0]),
            "slice": lambda sp: tf.sparse_slice(sp, [1, 0], [1, 4]).values,
            "fill_empty": lambda sp: tf.sparse_fill_empty_rows(
                tf.SparseTensor(sp.indices, sp.values, [3, 4]), 7.0)[0].values * tf.range(1.0, 5.0),
            "transpose": lambda sp: tf.sparse_transpose(sp).values * tf.constant([1.0, 2.0, 3.0]),
        }
        out = {}
        for key, fn in cases.items():
            with tf.Graph().as_default():
                values = tf.constant([1.0, 2.0, 4.0])
                sp = tf.SparseTensor(tf.constant([[0, 1], [1, 0], [1, 3]], tf.int64), values,
                                     tf.constant([2, 4], tf.int64))
                y = fn(sp)
                grad = tf.convert_to_tensor(tf.gradients(tf.reduce_sum(y * y), [values])[0])
                with tf.Session() as sess:
                    out[key] = sess.run([y, grad])
        return out
    want, got = gradients(tf1), gradients(tfplus)
    for key in want:
        for w, g in zip(want[key], got[key]):
            np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=key)
