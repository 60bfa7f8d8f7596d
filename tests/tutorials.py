"""Classic TF1 tutorial and model-zoo scripts (MNIST, CIFAR-10, word2vec, autoencoders, GANs, LSTMs, RL, ResNet),
written once against the TF1 API `tf` and run twice: with TensorFlow's tf.compat.v1 and with tfplus.

Each script builds its graph, runs a few training steps and returns {name: array} (losses per step, weights after
training). The random numbers are the same in both runs: every random op's output is fed (`Feeder`), keyed by its
op type and the order of creation, with the shapes TensorFlow's run saw."""
from __future__ import annotations

import zlib

import numpy as np

import tfplus

# Random op type -> the distribution fed. TF's Keras-based tf.layers draw their initial values with stateless ops.
_RANDOM_OPS = {"TruncatedNormal": "truncated", "StatelessTruncatedNormalV2": "truncated",
               "RandomStandardNormal": "normal", "StatelessRandomNormalV2": "normal",
               "RandomUniform": "uniform", "StatelessRandomUniformV2": "uniform"}


class Feeder:
    """Feeds every random op's output with NumPy's numbers, the same for TensorFlow's run and tfplus's: the
    k-th op of a type gets the same array in both. `shapes` is TensorFlow's run's record (filled when None)."""

    def __init__(self, shapes: dict | None = None, batch: int = 8):
        self.shapes = {} if shapes is None else shapes
        self.record = shapes is None
        self.batch = batch

    def feeds(self, tf, graph=None) -> dict:
        graph = graph or tf.get_default_graph()
        counts: dict = {}
        out = {}
        for op in graph.get_operations():
            if op.type not in _RANDOM_OPS:
                continue
            kind = _RANDOM_OPS[op.type]
            k = counts.get(kind, 0)
            counts[kind] = k + 1
            key = f"{kind}:{k}"
            if self.record:
                self.shapes[key] = tuple(self.batch if d is None else d for d in op.outputs[0].shape.as_list())
            if key not in self.shapes:
                continue  # a random op of tfplus's own (tf.multinomial's uniform draws): its result is compared
            shape = self.shapes[key]
            rng = np.random.RandomState(zlib.crc32(key.encode()))
            if kind == "uniform":
                value = rng.uniform(0.0, 1.0, shape)
            else:
                value = rng.standard_normal(shape)
                if kind == "truncated":
                    value = np.clip(value, -1.9, 1.9)
            out[op.outputs[0]] = value.astype(np.float32)
        return out


def data(seed: int, *shapes_and_kinds):
    """Synthetic data: ('f', shape) floats in [0, 1), ('n', shape) normals, ('i', shape, n) ints below n."""
    rng = np.random.RandomState(seed)
    out = []
    for kind, shape, *n in shapes_and_kinds:
        if kind == "f":
            out.append(rng.uniform(0, 1, shape).astype(np.float32))
        elif kind == "n":
            out.append(rng.standard_normal(shape).astype(np.float32))
        else:
            out.append(rng.randint(0, n[0], shape).astype(np.int32))
    return out


def contrib(tf):
    """`tf.contrib`; for TensorFlow 2 (which has none) the TF1 contrib functions the scripts use, written out from
    TF1's definitions (tf.contrib.layers, legacy_seq2seq, seq2seq)."""
    if not hasattr(tf, "get_seed"):  # tfplus (TensorFlow's tf.compat.v1 has get_seed)
        return tf.contrib
    ns = type("contrib", (), {})

    def l2_regularizer(scale):
        return lambda weights: tf.multiply(scale, tf.nn.l2_loss(weights), name="l2_regularizer")

    def sequence_loss_by_example(logits, targets, weights, average_across_timesteps=True):
        log_perps = tf.add_n([w * tf.nn.sparse_softmax_cross_entropy_with_logits(labels=t, logits=lo)
                              for lo, t, w in zip(logits, targets, weights)])
        if average_across_timesteps:
            log_perps /= tf.add_n(weights) + 1e-12
        return log_perps

    def sequence_loss(logits, targets, weights, average_across_timesteps=True, average_across_batch=True):
        n = tf.shape(logits)[-1]
        crossent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.reshape(targets, [-1]),
                                                                  logits=tf.reshape(logits, [-1, n]))
        crossent = tf.reshape(crossent * tf.reshape(weights, [-1]), tf.shape(targets))
        axes = [a for a, on in ((0, average_across_batch), (1, average_across_timesteps)) if on]
        return tf.reduce_sum(crossent, axes) / (tf.reduce_sum(weights, axes) + 1e-12)

    def batch_norm(inputs, decay=0.999, center=True, scale=False, epsilon=0.001, activation_fn=None,
                   updates_collections=tf.GraphKeys.UPDATE_OPS, is_training=True, scope=None):
        # TF1's contrib batch_norm, fused path (is_training a Python bool here).
        with tf.variable_scope(scope, default_name="BatchNorm"):
            x = inputs if inputs.shape.ndims == 4 else tf.reshape(inputs, [-1, 1, 1, inputs.shape.as_list()[-1]])
            c = x.shape.as_list()[-1]
            beta = tf.get_variable("beta", [c], initializer=tf.zeros_initializer()) if center else tf.zeros([c])
            gamma = tf.get_variable("gamma", [c], initializer=tf.ones_initializer()) if scale else tf.ones([c])
            mm = tf.get_variable("moving_mean", [c], initializer=tf.zeros_initializer(), trainable=False)
            mv = tf.get_variable("moving_variance", [c], initializer=tf.ones_initializer(), trainable=False)
            if is_training:
                y, mean, var = tf.nn.fused_batch_norm(x, gamma, beta, epsilon=epsilon)
                updates = [tf.assign_sub(mm, (mm - mean) * (1 - decay)), tf.assign_sub(mv, (mv - var) * (1 - decay))]
                if updates_collections is None:
                    with tf.control_dependencies(updates):
                        y = tf.identity(y)
                else:
                    for u in updates:
                        tf.add_to_collection(updates_collections, u)
            else:
                y = tf.nn.fused_batch_norm(x, gamma, beta, mm, mv, epsilon=epsilon, is_training=False)[0]
            y = y if inputs.shape.ndims == 4 else tf.reshape(y, tf.shape(inputs))
            return y if activation_fn is None else activation_fn(y)

    def layer_norm(inputs, center=True, scale=True, begin_norm_axis=1, begin_params_axis=-1, scope=None):
        with tf.variable_scope(scope, default_name="LayerNorm"):
            shape = inputs.shape.as_list()[begin_params_axis:]
            beta = tf.get_variable("beta", shape, initializer=tf.zeros_initializer()) if center else None
            gamma = tf.get_variable("gamma", shape, initializer=tf.ones_initializer()) if scale else None
            axes = list(range(begin_norm_axis % inputs.shape.ndims, inputs.shape.ndims))
            mean, variance = tf.nn.moments(inputs, axes, keep_dims=True)
            return tf.nn.batch_normalization(inputs, mean, variance, beta, gamma, 1e-12)

    def conv2d_transpose(inputs, num_outputs, kernel_size, stride=1, padding="SAME", activation_fn=tf.nn.relu,
                         scope=None):
        with tf.variable_scope(scope, default_name="Conv2d_transpose"):
            n, h, w, c = inputs.shape.as_list()
            weights = tf.get_variable("weights", [kernel_size, kernel_size, num_outputs, c],
                                      initializer=tf.glorot_uniform_initializer())
            biases = tf.get_variable("biases", [num_outputs], initializer=tf.zeros_initializer())
            extra = 0 if padding == "SAME" else max(kernel_size - stride, 0)
            y = tf.nn.conv2d_transpose(inputs, weights, [n, h * stride + extra, w * stride + extra, num_outputs],
                                       [1, stride, stride, 1], padding)
            y = tf.nn.bias_add(y, biases)
            return y if activation_fn is None else activation_fn(y)

    def stack_bidirectional_dynamic_rnn(cells_fw, cells_bw, inputs, sequence_length=None, dtype=None):
        states_fw, states_bw, layer = [], [], inputs
        with tf.variable_scope("stack_bidirectional_rnn"):
            for i, (cell_fw, cell_bw) in enumerate(zip(cells_fw, cells_bw)):
                with tf.variable_scope("cell_%d" % i):
                    outputs, (state_fw, state_bw) = tf.nn.bidirectional_dynamic_rnn(
                        cell_fw, cell_bw, layer, sequence_length=sequence_length, dtype=dtype)
                    layer = tf.concat(outputs, 2)
                states_fw.append(state_fw)
                states_bw.append(state_bw)
        return layer, tuple(states_fw), tuple(states_bw)

    ns.rnn = type("rnn", (), {"stack_bidirectional_dynamic_rnn": staticmethod(stack_bidirectional_dynamic_rnn)})
    ns.layers = type("layers", (), {"l2_regularizer": staticmethod(l2_regularizer),
                                    "batch_norm": staticmethod(batch_norm), "layer_norm": staticmethod(layer_norm),
                                    "conv2d_transpose": staticmethod(conv2d_transpose),
                                    # contrib's xavier_initializer(uniform=True) is Glorot's uniform
                                    "xavier_initializer": staticmethod(lambda: tf.glorot_uniform_initializer())})
    ns.legacy_seq2seq = type("legacy_seq2seq", (), {"sequence_loss_by_example": staticmethod(sequence_loss_by_example)})
    ns.seq2seq = type("seq2seq", (), {"sequence_loss": staticmethod(sequence_loss)})
    return ns


def one_hot_np(labels, n):
    return np.eye(n, dtype=np.float32)[labels]


def _session_run(tf, feeder, trainables_first=False):
    sess = tf.Session()
    if trainables_first:
        # NOTE: TensorFlow's moving averages read their variable's value in a cond on whether it is initialized,
        # which races with the variable's own initializer when both run in one Session.run.
        sess.run(tf.variables_initializer(tf.trainable_variables()), feeder.feeds(tf))
    sess.run(tf.global_variables_initializer(), feeder.feeds(tf))
    return sess


def _trained(tf, sess, out: dict, names=None) -> dict:
    vs = tf.trainable_variables() if names is None else [v for v in tf.global_variables() if v.op.name in names]
    for v, value in zip(vs, sess.run(vs)):
        out["var:" + v.op.name] = value
    return out


# ---- MNIST ----------------------------------------------------------------------------------------------------

def mnist_softmax(tf, feeder):
    x = tf.placeholder(tf.float32, [None, 64])
    W = tf.Variable(tf.zeros([64, 10]))
    b = tf.Variable(tf.zeros([10]))
    y = tf.matmul(x, W) + b
    y_ = tf.placeholder(tf.float32, [None, 10])
    cross_entropy = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y))
    train_step = tf.train.GradientDescentOptimizer(0.5).minimize(cross_entropy)
    correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
    sess = tf.InteractiveSession()
    tf.global_variables_initializer().run()
    xs, ys = data(1, ("f", (16, 64)), ("i", (16,), 10))
    losses = []
    for _ in range(4):
        _, loss = sess.run([train_step, cross_entropy], feed_dict={x: xs, y_: one_hot_np(ys, 10)})
        losses.append(loss)
    acc = sess.run(accuracy, feed_dict={x: xs, y_: one_hot_np(ys, 10)})
    out = _trained(tf, sess, {"loss": np.array(losses), "accuracy": acc})
    sess.close()
    return out


def deep_mnist(tf, feeder):
    def weight_variable(shape):
        return tf.Variable(tf.truncated_normal(shape, stddev=0.1))

    def bias_variable(shape):
        return tf.Variable(tf.constant(0.1, shape=shape))

    def conv2d(x, W):
        return tf.nn.conv2d(x, W, strides=[1, 1, 1, 1], padding="SAME")

    def max_pool_2x2(x):
        return tf.nn.max_pool(x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")

    x = tf.placeholder(tf.float32, shape=[None, 144])
    y_ = tf.placeholder(tf.float32, shape=[None, 10])
    x_image = tf.reshape(x, [-1, 12, 12, 1])
    h_conv1 = tf.nn.relu(conv2d(x_image, weight_variable([5, 5, 1, 4])) + bias_variable([4]))
    h_pool1 = max_pool_2x2(h_conv1)
    h_conv2 = tf.nn.relu(conv2d(h_pool1, weight_variable([5, 5, 4, 8])) + bias_variable([8]))
    h_pool2 = max_pool_2x2(h_conv2)
    h_pool2_flat = tf.reshape(h_pool2, [-1, 3 * 3 * 8])
    h_fc1 = tf.nn.relu(tf.matmul(h_pool2_flat, weight_variable([72, 32])) + bias_variable([32]))
    keep_prob = tf.placeholder(tf.float32)
    h_fc1_drop = tf.nn.dropout(h_fc1, keep_prob)
    y_conv = tf.matmul(h_fc1_drop, weight_variable([32, 10])) + bias_variable([10])
    cross_entropy = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=y_, logits=y_conv))
    train_step = tf.train.AdamOptimizer(1e-3).minimize(cross_entropy)
    correct_prediction = tf.equal(tf.argmax(y_conv, 1), tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
    xs, ys = data(2, ("f", (8, 144)), ("i", (8,), 10))
    with tf.Session() as sess:
        feeds = feeder.feeds(tf)
        sess.run(tf.global_variables_initializer(), feeds)
        losses = []
        for _ in range(3):
            # The dropout mask is the fed RandomUniform: the same in both runs.
            _, loss = sess.run([train_step, cross_entropy], {x: xs, y_: one_hot_np(ys, 10), keep_prob: 0.5, **feeds})
            losses.append(loss)
        acc = accuracy.eval(feed_dict={x: xs, y_: one_hot_np(ys, 10), keep_prob: 1.0, **feeds})
        return _trained(tf, sess, {"loss": np.array(losses), "accuracy": acc})


# ---- CIFAR-10 (models/tutorials/image/cifar10) ------------------------------------------------------------------

def cifar10(tf, feeder):
    batch = 4

    def _activation_summary(x):
        tf.summary.histogram(x.op.name + "/activations", x)
        tf.summary.scalar(x.op.name + "/sparsity", tf.nn.zero_fraction(x))

    def _variable_on_cpu(name, shape, initializer):
        with tf.device("/cpu:0"):
            return tf.get_variable(name, shape, initializer=initializer, dtype=tf.float32)

    def _variable_with_weight_decay(name, shape, stddev, wd):
        var = _variable_on_cpu(name, shape, tf.truncated_normal_initializer(stddev=stddev, dtype=tf.float32))
        if wd is not None:
            weight_decay = tf.multiply(tf.nn.l2_loss(var), wd, name="weight_loss")
            tf.add_to_collection("losses", weight_decay)
        return var

    images = tf.placeholder(tf.float32, [batch, 8, 8, 3])
    labels = tf.placeholder(tf.int32, [batch])
    with tf.variable_scope("conv1") as scope:
        kernel = _variable_with_weight_decay("weights", shape=[5, 5, 3, 8], stddev=5e-2, wd=None)
        conv = tf.nn.conv2d(images, kernel, [1, 1, 1, 1], padding="SAME")
        biases = _variable_on_cpu("biases", [8], tf.constant_initializer(0.0))
        conv1 = tf.nn.relu(tf.nn.bias_add(conv, biases), name=scope.name)
        _activation_summary(conv1)
    pool1 = tf.nn.max_pool(conv1, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME", name="pool1")
    norm1 = tf.nn.lrn(pool1, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75, name="norm1")
    with tf.variable_scope("conv2") as scope:
        kernel = _variable_with_weight_decay("weights", shape=[5, 5, 8, 8], stddev=5e-2, wd=None)
        conv = tf.nn.conv2d(norm1, kernel, [1, 1, 1, 1], padding="SAME")
        biases = _variable_on_cpu("biases", [8], tf.constant_initializer(0.1))
        conv2 = tf.nn.relu(tf.nn.bias_add(conv, biases), name=scope.name)
        _activation_summary(conv2)
    norm2 = tf.nn.lrn(conv2, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75, name="norm2")
    pool2 = tf.nn.max_pool(norm2, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME", name="pool2")
    with tf.variable_scope("local3") as scope:
        reshape = tf.reshape(pool2, [images.get_shape().as_list()[0], -1])
        dim = reshape.get_shape().as_list()[1]
        weights = _variable_with_weight_decay("weights", shape=[dim, 16], stddev=0.04, wd=0.004)
        biases = _variable_on_cpu("biases", [16], tf.constant_initializer(0.1))
        local3 = tf.nn.relu(tf.matmul(reshape, weights) + biases, name=scope.name)
        _activation_summary(local3)
    with tf.variable_scope("softmax_linear") as scope:
        weights = _variable_with_weight_decay("weights", [16, 10], stddev=1 / 16.0, wd=None)
        biases = _variable_on_cpu("biases", [10], tf.constant_initializer(0.0))
        logits = tf.add(tf.matmul(local3, weights), biases, name=scope.name)
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int64), logits=logits,
                                                                   name="cross_entropy_per_example")
    cross_entropy_mean = tf.reduce_mean(cross_entropy, name="cross_entropy")
    tf.add_to_collection("losses", cross_entropy_mean)
    total_loss = tf.add_n(tf.get_collection("losses"), name="total_loss")

    global_step = tf.train.get_or_create_global_step()
    lr = tf.train.exponential_decay(0.1, global_step, 2, 0.1, staircase=True)
    tf.summary.scalar("learning_rate", lr)
    loss_averages = tf.train.ExponentialMovingAverage(0.9, name="avg")
    losses = tf.get_collection("losses")
    loss_averages_op = loss_averages.apply(losses + [total_loss])
    for lo in losses + [total_loss]:
        tf.summary.scalar(lo.op.name + " (raw)", lo)
        tf.summary.scalar(lo.op.name, loss_averages.average(lo))
    with tf.control_dependencies([loss_averages_op]):
        opt = tf.train.GradientDescentOptimizer(lr)
        grads = opt.compute_gradients(total_loss)
    apply_gradient_op = opt.apply_gradients(grads, global_step=global_step)
    for var in tf.trainable_variables():
        tf.summary.histogram(var.op.name, var)
    for grad, var in grads:
        if grad is not None:
            tf.summary.histogram(var.op.name + "/gradients", grad)
    # The later tutorial's form: the averages after the step (in the earlier one they race with it).
    variable_averages = tf.train.ExponentialMovingAverage(0.9999, global_step)
    with tf.control_dependencies([apply_gradient_op]):
        variables_averages_op = variable_averages.apply(tf.trainable_variables())
    with tf.control_dependencies([variables_averages_op]):
        train_op = tf.no_op(name="train")
    top_k_op = tf.nn.in_top_k(logits, labels, 1)
    summary_op = tf.summary.merge_all()
    shadow = variable_averages.average(tf.trainable_variables()[0])
    restore_names = sorted(variable_averages.variables_to_restore())

    xs, ys = data(3, ("f", (batch, 8, 8, 3)), ("i", (batch,), 10))
    sess = _session_run(tf, feeder, trainables_first=True)
    out = {"loss": [], "lr": [], "in_top_k": []}
    for _ in range(4):
        _, loss, rate, top = sess.run([train_op, total_loss, lr, top_k_op], {images: xs, labels: ys})
        out["loss"].append(loss)
        out["lr"].append(rate)
        out["in_top_k"].append(top)
    sess.run(summary_op, {images: xs, labels: ys})
    out["shadow"] = sess.run(shadow)
    out["loss_avg"] = sess.run(loss_averages.average(total_loss))
    out["step"] = sess.run(global_step)
    out["names"] = np.array([variable_averages.average_name(v) for v in tf.trainable_variables()] + restore_names)
    out = {k: np.array(v) for k, v in out.items()}
    out = _trained(tf, sess, out)
    sess.close()
    return out


# ---- word2vec basic -------------------------------------------------------------------------------------------

def _word2vec(tf, feeder, loss_fn):
    vocabulary_size, embedding_size, batch_size, num_sampled = 40, 8, 6, 5
    train_inputs = tf.placeholder(tf.int32, shape=[batch_size])
    train_labels = tf.placeholder(tf.int32, shape=[batch_size, 1])
    valid_dataset = tf.constant([1, 3, 5], dtype=tf.int32)
    embeddings = tf.Variable(tf.random_uniform([vocabulary_size, embedding_size], -1.0, 1.0))
    embed = tf.nn.embedding_lookup(embeddings, train_inputs)
    nce_weights = tf.Variable(tf.truncated_normal([vocabulary_size, embedding_size],
                                                  stddev=1.0 / np.sqrt(embedding_size)))
    nce_biases = tf.Variable(tf.zeros([vocabulary_size]))
    # The sampled ids fixed (the same in both runs): the candidate sampler's output, as a script may pass it.
    sampled = tf.constant([0, 2, 7, 11, 30], dtype=tf.int64)
    expected_true = tf.fill([batch_size, 1], 0.3)
    expected_sampled = tf.constant([0.5, 0.3, 0.1, 0.08, 0.02])
    loss = tf.reduce_mean(loss_fn(tf)(weights=nce_weights, biases=nce_biases, labels=train_labels, inputs=embed,
                                      num_sampled=num_sampled, num_classes=vocabulary_size,
                                      sampled_values=(sampled, expected_true, expected_sampled)))
    optimizer = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
    norm = tf.sqrt(tf.reduce_sum(tf.square(embeddings), 1, keepdims=True))
    normalized_embeddings = embeddings / norm
    valid_embeddings = tf.nn.embedding_lookup(normalized_embeddings, valid_dataset)
    similarity = tf.matmul(valid_embeddings, normalized_embeddings, transpose_b=True)
    l2_similarity = tf.matmul(tf.nn.l2_normalize(valid_embeddings, 1), tf.nn.l2_normalize(embeddings, axis=1),
                              transpose_b=True)
    grad_w = tf.gradients(loss, nce_weights)[0]
    grad_w = tf.convert_to_tensor(grad_w)
    inputs, labels = data(4, ("i", (batch_size,), vocabulary_size), ("i", (batch_size, 1), vocabulary_size))
    # One label is a sampled id (an accidental hit).
    labels[0, 0] = 7
    sess = _session_run(tf, feeder)
    out = {"loss": []}
    out["grad_w"] = sess.run(grad_w, {train_inputs: inputs, train_labels: labels})
    for _ in range(3):
        _, lo = sess.run([optimizer, loss], {train_inputs: inputs, train_labels: labels})
        out["loss"].append(lo)
    out["similarity"], out["l2_similarity"] = sess.run([similarity, l2_similarity])
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def word2vec_nce(tf, feeder):
    return _word2vec(tf, feeder, lambda tf: tf.nn.nce_loss)


def word2vec_sampled_softmax(tf, feeder):
    return _word2vec(tf, feeder, lambda tf: tf.nn.sampled_softmax_loss)


# ---- autoencoder and VAE --------------------------------------------------------------------------------------

def autoencoder(tf, feeder):
    X = tf.placeholder("float", [None, 16])
    weights = {k: tf.Variable(tf.random_normal(shape)) for k, shape in (
        ("encoder_h1", [16, 8]), ("encoder_h2", [8, 4]), ("decoder_h1", [4, 8]), ("decoder_h2", [8, 16]))}
    biases = {k: tf.Variable(tf.random_normal([n])) for k, n in (("encoder_b1", 8), ("encoder_b2", 4),
                                                                 ("decoder_b1", 8), ("decoder_b2", 16))}
    layer = tf.nn.sigmoid(tf.add(tf.matmul(X, weights["encoder_h1"]), biases["encoder_b1"]))
    code = tf.nn.sigmoid(tf.add(tf.matmul(layer, weights["encoder_h2"]), biases["encoder_b2"]))
    layer = tf.nn.sigmoid(tf.add(tf.matmul(code, weights["decoder_h1"]), biases["decoder_b1"]))
    y_pred = tf.nn.sigmoid(tf.add(tf.matmul(layer, weights["decoder_h2"]), biases["decoder_b2"]))
    loss = tf.reduce_mean(tf.pow(X - y_pred, 2))
    optimizer = tf.train.RMSPropOptimizer(0.01).minimize(loss)
    (xs,) = data(5, ("f", (8, 16)))
    sess = _session_run(tf, feeder)
    losses = [sess.run([optimizer, loss], {X: xs})[1] for _ in range(4)]
    out = _trained(tf, sess, {"loss": np.array(losses)})
    sess.close()
    return out


def vae(tf, feeder):
    n_in, n_hidden, n_z = 16, 8, 2
    x = tf.placeholder(tf.float32, [None, n_in])

    def dense(inp, n_out, name):
        with tf.variable_scope(name):
            w = tf.get_variable("w", [inp.get_shape()[1], n_out], initializer=tf.glorot_uniform_initializer())
            b = tf.get_variable("b", [n_out], initializer=tf.zeros_initializer())
            return tf.matmul(inp, w) + b

    h = tf.nn.relu(dense(x, n_hidden, "enc"))
    z_mean = dense(h, n_z, "z_mean")
    z_log_sigma_sq = dense(h, n_z, "z_log_sigma_sq")
    eps = tf.random_normal(tf.shape(z_mean), 0, 1, dtype=tf.float32)
    z = tf.add(z_mean, tf.multiply(tf.sqrt(tf.exp(z_log_sigma_sq)), eps))
    logits = dense(tf.nn.relu(dense(z, n_hidden, "dec")), n_in, "out")
    recon = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=logits), 1)
    kl = -0.5 * tf.reduce_sum(1 + z_log_sigma_sq - tf.square(z_mean) - tf.exp(z_log_sigma_sq), 1)
    cost = tf.reduce_mean(recon + kl)
    optimizer = tf.train.AdamOptimizer(learning_rate=0.01).minimize(cost)
    (xs,) = data(6, ("f", (8, n_in)))
    sess = _session_run(tf, feeder)
    feeds = feeder.feeds(tf)
    costs = [sess.run((optimizer, cost), {x: xs, **feeds})[1] for _ in range(4)]
    out = _trained(tf, sess, {"loss": np.array(costs)})
    sess.close()
    return out


# ---- GAN and DCGAN --------------------------------------------------------------------------------------------

def gan(tf, feeder):
    z = tf.placeholder(tf.float32, [None, 4])
    x = tf.placeholder(tf.float32, [None, 8])

    def generator(z):
        with tf.variable_scope("gen"):
            h = tf.layers.dense(z, 16, activation=tf.nn.leaky_relu)
            return tf.layers.dense(h, 8, activation=tf.nn.tanh)

    def discriminator(x):
        with tf.variable_scope("disc", reuse=tf.AUTO_REUSE):
            h = tf.layers.dense(x, 16)
            h = tf.nn.leaky_relu(h, alpha=0.1)
            return tf.layers.dense(h, 1)

    g = generator(z)
    d_real, d_fake = discriminator(x), discriminator(g)
    d_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(logits=d_real, labels=tf.ones_like(d_real))
                            + tf.nn.sigmoid_cross_entropy_with_logits(logits=d_fake, labels=tf.zeros_like(d_fake)))
    g_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(logits=d_fake, labels=tf.ones_like(d_fake)))
    g_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="gen")
    d_vars = [v for v in tf.trainable_variables() if v.name.startswith("disc/")]
    d_opt = tf.train.AdamOptimizer(0.01, beta1=0.5).minimize(d_loss, var_list=d_vars)
    g_opt = tf.train.AdamOptimizer(0.01, beta1=0.5).minimize(g_loss, var_list=g_vars)
    zs, xs = data(7, ("n", (6, 4)), ("n", (6, 8)))
    sess = _session_run(tf, feeder)
    out = {"d_loss": [], "g_loss": [], "names": np.array(sorted(v.name for v in tf.trainable_variables()))}
    for _ in range(3):
        out["d_loss"].append(sess.run([d_opt, d_loss], {x: xs, z: zs})[1])
        out["g_loss"].append(sess.run([g_opt, g_loss], {z: zs})[1])
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def dcgan(tf, feeder):
    batch = 4
    z = tf.placeholder(tf.float32, [batch, 8])
    images = tf.placeholder(tf.float32, [batch, 8, 8, 1])
    is_training = tf.placeholder(tf.bool)

    def generator(z):
        with tf.variable_scope("gen"):
            h = tf.reshape(tf.layers.dense(z, 2 * 2 * 8), [-1, 2, 2, 8])
            h = tf.nn.relu(tf.layers.batch_normalization(h, training=is_training))
            # NOTE: no biases before a batch norm (which takes them out): Adam would amplify their gradients' noise.
            h = tf.layers.conv2d_transpose(h, 4, 3, strides=2, padding="same", use_bias=False)
            h = tf.nn.relu(tf.layers.batch_normalization(h, training=is_training))
            w = tf.get_variable("w_out", [3, 3, 1, 4], initializer=tf.random_normal_initializer(stddev=0.2))
            return tf.nn.tanh(tf.nn.conv2d_transpose(h, w, output_shape=[batch, 8, 8, 1], strides=[1, 2, 2, 1],
                                                     padding="SAME"))

    def discriminator(x):
        with tf.variable_scope("disc", reuse=tf.AUTO_REUSE):
            h = tf.nn.leaky_relu(tf.layers.conv2d(x, 4, 3, strides=2, padding="same"))
            h = tf.layers.conv2d(h, 8, 3, strides=2, padding="same", use_bias=False)
            h = tf.nn.leaky_relu(tf.layers.batch_normalization(h, training=is_training))
            return tf.layers.dense(tf.layers.flatten(h), 1)

    fake = generator(z)
    d_real, d_fake = discriminator(images), discriminator(fake)
    d_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(logits=d_real, labels=tf.ones_like(d_real))
                            + tf.nn.sigmoid_cross_entropy_with_logits(logits=d_fake, labels=tf.zeros_like(d_fake)))
    g_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(logits=d_fake, labels=tf.ones_like(d_fake)))
    t_vars = tf.trainable_variables()
    d_vars = [v for v in t_vars if "disc" in v.name]
    g_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="gen")
    # The valid-padding transpose of the generator's output, as a check of VALID.
    w_valid = tf.get_variable("w_valid", [3, 3, 2, 1], initializer=tf.random_normal_initializer(stddev=0.2))
    valid = tf.nn.conv2d_transpose(fake, w_valid, output_shape=[batch, 17, 17, 2], strides=[1, 2, 2, 1],
                                   padding="VALID")
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        d_opt = tf.train.AdamOptimizer(0.002, beta1=0.5).minimize(d_loss, var_list=d_vars)
        g_opt = tf.train.AdamOptimizer(0.002, beta1=0.5).minimize(g_loss, var_list=g_vars)
    zs, xs = data(8, ("n", (batch, 8)), ("f", (batch, 8, 8, 1)))
    sess = _session_run(tf, feeder)
    out = {"d_loss": [], "g_loss": []}
    for _ in range(2):
        out["d_loss"].append(sess.run([d_opt, d_loss], {images: xs, z: zs, is_training: True})[1])
        out["g_loss"].append(sess.run([g_opt, g_loss], {z: zs, images: xs, is_training: True})[1])
    out["sample"], out["valid"] = sess.run([fake, valid], {z: zs, is_training: False})
    # NOTE: the discriminator's moving averages are updated by both of its applications, in an order (and with
    # reads) that TensorFlow leaves open; the generator's are compared.
    moving = [v.op.name for v in tf.global_variables() if "moving_" in v.op.name and v.op.name.startswith("gen/")]
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    out = _trained(tf, sess, out, names=moving)
    sess.close()
    return out


# ---- char-RNN / PTB LSTM --------------------------------------------------------------------------------------

def _lstm_lm(tf, feeder, contrib_loss: bool):
    batch_size, num_steps, hidden, vocab, layers = 3, 4, 6, 10, 2
    input_data = tf.placeholder(tf.int32, [batch_size, num_steps])
    targets = tf.placeholder(tf.int32, [batch_size, num_steps])
    initializer = tf.random_uniform_initializer(-0.1, 0.1)
    with tf.variable_scope("model", initializer=initializer):
        cells = [tf.nn.rnn_cell.LSTMCell(hidden, forget_bias=0.0, state_is_tuple=True) for _ in range(layers)]
        cell = tf.nn.rnn_cell.MultiRNNCell(cells, state_is_tuple=True)
        initial_state = cell.zero_state(batch_size, tf.float32)
        embedding = tf.get_variable("embedding", [vocab, hidden], dtype=tf.float32)
        inputs = tf.nn.embedding_lookup(embedding, input_data)
        outputs, state = tf.nn.dynamic_rnn(cell, inputs, initial_state=initial_state)
        output = tf.reshape(outputs, [-1, hidden])
        softmax_w = tf.get_variable("softmax_w", [hidden, vocab], dtype=tf.float32)
        softmax_b = tf.get_variable("softmax_b", [vocab], dtype=tf.float32)
        logits = tf.nn.xw_plus_b(output, softmax_w, softmax_b)
        if contrib_loss:
            logits3 = tf.reshape(logits, [batch_size, num_steps, vocab])
            loss = contrib(tf).seq2seq.sequence_loss(logits3, targets, tf.ones([batch_size, num_steps], tf.float32),
                                                    average_across_timesteps=False, average_across_batch=True)
            cost = tf.reduce_sum(loss)
        else:
            loss = contrib(tf).legacy_seq2seq.sequence_loss_by_example(
                [logits], [tf.reshape(targets, [-1])], [tf.ones([batch_size * num_steps], dtype=tf.float32)])
            cost = tf.reduce_sum(loss) / batch_size
        lr = tf.Variable(0.0, trainable=False)
        tvars = tf.trainable_variables()
        grads, _ = tf.clip_by_global_norm(tf.gradients(cost, tvars), 5.0)
        optimizer = tf.train.GradientDescentOptimizer(lr)
        train_op = optimizer.apply_gradients(zip(grads, tvars),
                                             global_step=tf.train.get_or_create_global_step())
        new_lr = tf.placeholder(tf.float32, shape=[], name="new_learning_rate")
        lr_update = tf.assign(lr, new_lr)
    xs, ys = data(9, ("i", (batch_size, 3 * num_steps), vocab), ("i", (batch_size, 3 * num_steps), vocab))
    sess = _session_run(tf, feeder)
    sess.run(lr_update, feed_dict={new_lr: 1.0})
    state_value = sess.run(initial_state)
    costs = []
    for step in range(3):
        feed_dict = {input_data: xs[:, step * num_steps:(step + 1) * num_steps],
                     targets: ys[:, step * num_steps:(step + 1) * num_steps]}
        for i, (c, h) in enumerate(initial_state):
            feed_dict[c] = state_value[i].c
            feed_dict[h] = state_value[i].h
        c_, state_value, _ = sess.run([cost, state, train_op], feed_dict)
        costs.append(c_)
    out = _trained(tf, sess, {"cost": np.array(costs), "state": np.array([[s.c, s.h] for s in state_value])})
    sess.close()
    return out


def ptb_lstm(tf, feeder):
    return _lstm_lm(tf, feeder, contrib_loss=False)


def char_rnn(tf, feeder):
    return _lstm_lm(tf, feeder, contrib_loss=True)


# ---- reinforcement learning -----------------------------------------------------------------------------------

def policy_gradient(tf, feeder):
    n_obs, n_actions = 4, 3
    observations = tf.placeholder(tf.float32, [None, n_obs])
    actions = tf.placeholder(tf.int32, [None])
    advantages = tf.placeholder(tf.float32, [None])
    hidden = tf.layers.dense(observations, 8, activation=tf.nn.relu)
    logits = tf.layers.dense(hidden, n_actions)
    sample_op = tf.multinomial(logits, 1)
    categorical = tf.random.categorical(logits, 200)
    log_probs = tf.nn.log_softmax(logits)
    log_prob = tf.reduce_sum(log_probs * tf.one_hot(actions, n_actions), axis=1)
    loss = -tf.reduce_mean(log_prob * advantages)
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    obs, acts, adv = data(10, ("n", (6, n_obs)), ("i", (6,), n_actions), ("n", (6,)))
    sess = _session_run(tf, feeder)
    sampled, many, probs = sess.run([sample_op, categorical, tf.nn.softmax(logits)], {observations: obs})
    assert sampled.shape == (6, 1) and sampled.dtype == np.int64 and ((0 <= sampled) & (sampled < n_actions)).all()
    # The sampled actions follow the policy (a loose check: 200 draws a row).
    freq = np.stack([(many == a).mean(1) for a in range(n_actions)], 1)
    assert np.abs(freq - probs).max() < 0.2, (freq, probs)
    losses = [sess.run([train_op, loss], {observations: obs, actions: acts, advantages: adv})[1] for _ in range(3)]
    out = _trained(tf, sess, {"loss": np.array(losses)})
    sess.close()
    return out


def dqn(tf, feeder):
    n_obs, n_actions, gamma = 4, 3, 0.9

    def q_network(x, scope):
        with tf.variable_scope(scope):
            h = tf.layers.dense(x, 8, activation=tf.nn.relu, name="h")
            return tf.layers.dense(h, n_actions, name="q")

    state = tf.placeholder(tf.float32, [None, n_obs])
    next_state = tf.placeholder(tf.float32, [None, n_obs])
    action = tf.placeholder(tf.int32, [None])
    reward = tf.placeholder(tf.float32, [None])
    q = q_network(state, "online")
    q_next = q_network(next_state, "target")
    online_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="online")
    target_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="target")
    copy_op = tf.group(*[tf.assign(t, o) for t, o in zip(target_vars, online_vars)])
    q_taken = tf.reduce_sum(q * tf.one_hot(action, n_actions), axis=1)
    indices = tf.stack([tf.range(tf.shape(action)[0]), action], axis=1)
    q_gathered = tf.gather_nd(q, indices)
    target = tf.stop_gradient(reward + gamma * tf.reduce_max(q_next, axis=1))
    loss = tf.losses.huber_loss(target, q_gathered)
    loss_mse = tf.reduce_mean(tf.square(target - q_taken))
    train_op = tf.train.RMSPropOptimizer(0.01, decay=0.95, epsilon=0.01).minimize(loss + 0.1 * loss_mse,
                                                                                 var_list=online_vars)
    s, s2, a, r = data(11, ("n", (5, n_obs)), ("n", (5, n_obs)), ("i", (5,), n_actions), ("n", (5,)))
    sess = _session_run(tf, feeder)
    sess.run(copy_op)
    out = {"loss": []}
    for step in range(4):
        out["loss"].append(sess.run([train_op, loss], {state: s, next_state: s2, action: a, reward: r})[1])
        if step == 1:
            sess.run(copy_op)
    out["q_taken"] = sess.run(q_taken - q_gathered, {state: s, action: a})
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


# ---- ResNet with tf.layers, and dilated convolutions ----------------------------------------------------------

def resnet(tf, feeder):
    images = tf.placeholder(tf.float32, [None, 8, 8, 3])
    labels = tf.placeholder(tf.int64, [None])
    training = tf.placeholder_with_default(False, [])
    reg = contrib(tf).layers.l2_regularizer(1e-3)

    def block(x, filters, strides, name):
        with tf.variable_scope(name):
            shortcut = x
            if strides != 1 or x.get_shape().as_list()[-1] != filters:
                shortcut = tf.layers.conv2d(x, filters, 1, strides=strides, use_bias=False, kernel_regularizer=reg,
                                            name="proj")
            h = tf.layers.conv2d(x, filters, 3, strides=strides, padding="same", use_bias=False,
                                 kernel_regularizer=reg, name="conv1")
            h = tf.nn.relu(tf.layers.batch_normalization(h, training=training, name="bn1"))
            h = tf.layers.conv2d(h, filters, 3, padding="same", use_bias=False, kernel_regularizer=reg, name="conv2")
            h = tf.layers.batch_normalization(h, training=training, name="bn2")
            return tf.nn.relu(h + shortcut)

    h = tf.layers.conv2d(images, 4, 3, padding="same", kernel_regularizer=reg, name="stem")
    h = block(h, 4, 1, "block1")
    h = block(h, 8, 2, "block2")
    h = tf.reduce_mean(h, axis=[1, 2])
    logits = tf.layers.dense(h, 5, kernel_regularizer=reg, name="fc")
    xent = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    reg_loss = tf.losses.get_regularization_loss()
    loss = xent + reg_loss
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    xs, ys = data(12, ("f", (4, 8, 8, 3)), ("i", (4,), 5))
    sess = _session_run(tf, feeder)
    out = {"loss": [], "reg": []}
    for _ in range(3):
        _, lo, rl = sess.run([train_op, loss, reg_loss], {images: xs, labels: ys, training: True})
        out["loss"].append(lo)
        out["reg"].append(rl)
    out["eval"] = sess.run(logits, {images: xs})
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def dilated(tf, feeder):
    images = tf.placeholder(tf.float32, [2, 9, 9, 3])
    target = tf.placeholder(tf.float32, [2, 9, 9, 4])
    w1 = tf.get_variable("w1", [3, 3, 3, 4], initializer=tf.truncated_normal_initializer(stddev=0.3))
    h = tf.nn.atrous_conv2d(images, w1, rate=2, padding="SAME")
    w2 = tf.get_variable("w2", [3, 3, 4, 4], initializer=tf.orthogonal_initializer(gain=0.5))
    # NOTE: TensorFlow's CPU has no Conv2DBackpropFilter for dilations > 1: this one is compared forward only.
    h_dilations = tf.nn.conv2d(tf.stop_gradient(h), tf.stop_gradient(w2), strides=[1, 1, 1, 1], padding="SAME",
                               dilations=[1, 3, 3, 1])
    h = tf.nn.relu(tf.nn.atrous_conv2d(h, w2, rate=3, padding="SAME"))
    h2 = tf.layers.conv2d(h, 4, 3, padding="same", dilation_rate=(2, 2), name="dilated_layer",
                          kernel_initializer=tf.truncated_normal_initializer(stddev=0.3))
    w3 = tf.get_variable("w3", [2, 3, 4, 4], initializer=tf.truncated_normal_initializer(stddev=0.3))
    valid = tf.nn.atrous_conv2d(h2, w3, rate=2, padding="VALID")
    w_wide = tf.get_variable("w_wide", [4, 9], initializer=tf.initializers.orthogonal())
    loss = tf.reduce_mean(tf.square(h2 - target)) + 0.1 * tf.reduce_mean(tf.square(valid)) + \
        0.01 * tf.reduce_sum(tf.matmul(tf.reduce_mean(h2, [1, 2]), w_wide))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    xs, ys = data(13, ("n", (2, 9, 9, 3)), ("n", (2, 9, 9, 4)))
    sess = _session_run(tf, feeder)
    losses = [sess.run([train_op, loss], {images: xs, target: ys})[1] for _ in range(3)]
    out = _trained(tf, sess, {"loss": np.array(losses), "dilations": sess.run(h_dilations, {images: xs}),
                              "valid_shape": np.array(valid.get_shape().as_list())})
    sess.close()
    return out


# ---- scripts in the style of popular repositories: DCGAN-tensorflow, WGAN-GP, a Transformer block ----------------

def dcgan_carpedm20(tf, feeder):
    batch, z_dim = 4, 6

    class batch_norm:
        def __init__(self, epsilon=1e-5, momentum=0.9, name="batch_norm"):
            self.epsilon, self.momentum, self.name = epsilon, momentum, name

        def __call__(self, x, train=True):
            return contrib(tf).layers.batch_norm(x, decay=self.momentum, updates_collections=None,
                                                 epsilon=self.epsilon, scale=True, is_training=train, scope=self.name)

    def conv2d(input_, output_dim, k=3, d=2, stddev=0.02, name="conv2d"):
        with tf.variable_scope(name):
            w = tf.get_variable("w", [k, k, input_.get_shape()[-1], output_dim],
                                initializer=tf.truncated_normal_initializer(stddev=stddev))
            conv = tf.nn.conv2d(input_, w, strides=[1, d, d, 1], padding="SAME")
            biases = tf.get_variable("biases", [output_dim], initializer=tf.constant_initializer(0.0))
            return tf.reshape(tf.nn.bias_add(conv, biases), conv.get_shape())

    def deconv2d(input_, output_shape, k=3, d=2, stddev=0.02, name="deconv2d"):
        with tf.variable_scope(name):
            w = tf.get_variable("w", [k, k, output_shape[-1], input_.get_shape()[-1]],
                                initializer=tf.random_normal_initializer(stddev=stddev))
            deconv = tf.nn.conv2d_transpose(input_, w, output_shape=output_shape, strides=[1, d, d, 1])
            biases = tf.get_variable("biases", [output_shape[-1]], initializer=tf.constant_initializer(0.0))
            return tf.reshape(tf.nn.bias_add(deconv, biases), deconv.get_shape())

    def lrelu(x, leak=0.2):
        return tf.maximum(x, leak * x)

    def linear(input_, output_size, scope=None, stddev=0.02, bias_start=0.0):
        shape = input_.get_shape().as_list()
        with tf.variable_scope(scope or "Linear"):
            matrix = tf.get_variable("Matrix", [shape[1], output_size], tf.float32,
                                     tf.random_normal_initializer(stddev=stddev))
            bias = tf.get_variable("bias", [output_size], initializer=tf.constant_initializer(bias_start))
            return tf.matmul(input_, matrix) + bias

    d_bn1, d_bn2, g_bn0, g_bn1 = (batch_norm(name=n) for n in ("d_bn1", "d_bn2", "g_bn0", "g_bn1"))

    def discriminator(image, reuse=False):
        with tf.variable_scope("discriminator") as scope:
            if reuse:
                scope.reuse_variables()
            h0 = lrelu(conv2d(image, 4, name="d_h0_conv"))
            h1 = lrelu(d_bn1(conv2d(h0, 8, name="d_h1_conv")))
            h2 = lrelu(d_bn2(conv2d(h1, 8, name="d_h2_conv")))
            h3 = linear(tf.reshape(h2, [batch, -1]), 1, "d_h3_lin")
            return tf.nn.sigmoid(h3), h3

    def generator(z):
        with tf.variable_scope("generator"):
            h0 = tf.nn.relu(g_bn0(tf.reshape(linear(z, 2 * 2 * 8, "g_h0_lin"), [-1, 2, 2, 8])))
            h1 = tf.nn.relu(g_bn1(deconv2d(h0, [batch, 4, 4, 4], name="g_h1")))
            return tf.nn.tanh(deconv2d(h1, [batch, 8, 8, 1], name="g_h2"))

    inputs = tf.placeholder(tf.float32, [batch, 8, 8, 1], name="real_images")
    z = tf.placeholder(tf.float32, [batch, z_dim], name="z")
    G = generator(z)
    D, D_logits = discriminator(inputs, reuse=False)
    D_, D_logits_ = discriminator(G, reuse=True)

    def sigmoid_cross_entropy_with_logits(x, y):
        return tf.nn.sigmoid_cross_entropy_with_logits(logits=x, labels=y)
    d_loss = tf.reduce_mean(sigmoid_cross_entropy_with_logits(D_logits, tf.ones_like(D))) + \
        tf.reduce_mean(sigmoid_cross_entropy_with_logits(D_logits_, tf.zeros_like(D_)))
    g_loss = tf.reduce_mean(sigmoid_cross_entropy_with_logits(D_logits_, tf.ones_like(D_)))
    t_vars = tf.trainable_variables()
    d_vars = [var for var in t_vars if "d_" in var.name]
    g_vars = [var for var in t_vars if "g_" in var.name]
    d_optim = tf.train.AdamOptimizer(0.0002, beta1=0.5).minimize(d_loss, var_list=d_vars)
    g_optim = tf.train.AdamOptimizer(0.0002, beta1=0.5).minimize(g_loss, var_list=g_vars)
    zs, xs = data(14, ("n", (batch, z_dim)), ("f", (batch, 8, 8, 1)))
    sess = _session_run(tf, feeder)
    out = {"d_loss": [], "g_loss": []}
    for _ in range(2):
        out["d_loss"].append(sess.run([d_optim, d_loss], {inputs: xs, z: zs})[1])
        out["g_loss"].append(sess.run([g_optim, g_loss], {z: zs})[1])
    # NOTE: the biases of the convolutions before a batch norm are left out: the norm takes them out, and Adam
    # makes steps of their zero gradients' rounding noise.
    keep = [v.op.name for v in t_vars if not (v.op.name.endswith("biases") and ("_h1" in v.op.name or
                                                                              "_h2_conv" in v.op.name))]
    gen_moving = [v.op.name for v in tf.global_variables() if v.op.name.startswith("generator/g_bn")]
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()}, names=keep + gen_moving)
    sess.close()
    return out


def wgan_gp(tf, feeder):
    batch, lam = 6, 10.0
    real = tf.placeholder(tf.float32, [batch, 5])
    z = tf.placeholder(tf.float32, [batch, 3])

    def generator(z):
        with tf.variable_scope("generator"):
            return tf.layers.dense(tf.layers.dense(z, 8, tf.nn.relu), 5)

    def critic(x):
        with tf.variable_scope("critic", reuse=tf.AUTO_REUSE):
            h = tf.layers.dense(x, 8, activation=tf.nn.leaky_relu)
            return tf.layers.dense(tf.nn.tanh(h), 1)

    fake = generator(z)
    alpha = tf.random_uniform(shape=[batch, 1], minval=0.0, maxval=1.0)
    interpolates = real + alpha * (fake - real)
    gradients = tf.gradients(critic(interpolates), [interpolates])[0]
    slopes = tf.sqrt(tf.reduce_sum(tf.square(gradients), reduction_indices=[1]))
    gradient_penalty = tf.reduce_mean((slopes - 1.0) ** 2)
    norm_penalty = tf.reduce_mean(tf.square(tf.norm(gradients, axis=1) - 1.0))
    d_loss = tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real)) + lam * gradient_penalty
    g_loss = -tf.reduce_mean(critic(fake))
    c_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="critic")
    g_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="generator")
    d_train = tf.train.AdamOptimizer(1e-3, beta1=0.5, beta2=0.9).minimize(d_loss, var_list=c_vars)
    g_train = tf.train.AdamOptimizer(1e-3, beta1=0.5, beta2=0.9).minimize(g_loss, var_list=g_vars)
    clip = [v.assign(tf.clip_by_value(v, -0.5, 0.5)) for v in c_vars]  # WGAN's weight clipping
    xs, zs = data(15, ("n", (batch, 5)), ("n", (batch, 3)))
    sess = _session_run(tf, feeder)
    feeds = feeder.feeds(tf)
    out = {"d_loss": [], "g_loss": [], "penalty": []}
    for _ in range(3):
        # NOTE: the losses before the step: fetched with it, TensorFlow may read some weights after the update.
        dl, gp, npen = sess.run([d_loss, gradient_penalty, norm_penalty], {real: xs, z: zs, **feeds})
        sess.run(d_train, {real: xs, z: zs, **feeds})
        sess.run(clip)
        out["d_loss"].append(dl)
        out["penalty"].append([gp, npen])
        out["g_loss"].append(sess.run([g_train, g_loss], {z: zs})[1])
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def transformer_block(tf, feeder):
    batch, seq, d_model, heads, vocab = 2, 5, 8, 2, 11
    tokens = tf.placeholder(tf.int32, [None, seq])
    targets = tf.placeholder(tf.int32, [None, seq])
    lengths = tf.placeholder(tf.int32, [None])
    d_head = d_model // heads
    embedding = tf.get_variable("embedding", [vocab, d_model], initializer=tf.random_normal_initializer(0, 0.3))
    positions = tf.range(seq, dtype=tf.float32)[:, None] / tf.pow(
        10000.0, tf.range(0, d_model, 2, dtype=tf.float32)[None, :] / d_model)
    pos_encoding = tf.concat([tf.sin(positions), tf.cos(positions)], axis=1)
    x = tf.nn.embedding_lookup(embedding, tokens) * np.sqrt(d_model) + pos_encoding

    def split_heads(t):
        return tf.transpose(tf.reshape(t, [-1, seq, heads, d_head]), [0, 2, 1, 3])

    with tf.variable_scope("attention"):
        q = split_heads(tf.layers.dense(x, d_model, use_bias=False, name="q"))
        k = split_heads(tf.layers.dense(x, d_model, use_bias=False, name="k"))
        v = split_heads(tf.layers.dense(x, d_model, use_bias=False, name="v"))
        scores = tf.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d_head)
        causal = tf.matrix_band_part(tf.ones([seq, seq]), -1, 0)
        padding = tf.cast(tf.sequence_mask(lengths, seq), tf.float32)[:, None, None, :]
        scores += (1.0 - causal * padding) * -1e9
        weights = tf.nn.softmax(scores, axis=-1)
        context = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]), [-1, seq, d_model])
        attended = contrib(tf).layers.layer_norm(x + tf.layers.dense(context, d_model, name="out"),
                                                 begin_norm_axis=-1, scope="ln1")
    with tf.variable_scope("ffn"):
        w1 = tf.get_variable("w1", [d_model, 16])
        hidden = tf.tensordot(attended, w1, axes=[[2], [0]])
        hidden = 0.5 * hidden * (1.0 + tf.erf(hidden / tf.sqrt(2.0)))  # BERT's GELU
        ffn = tf.layers.dense(hidden, d_model, name="w2")
        y = contrib(tf).layers.layer_norm(attended + ffn, begin_norm_axis=-1, scope="ln2")
    logits = tf.tensordot(y, embedding, axes=[[2], [1]])
    mask = tf.sequence_mask(lengths, seq, dtype=tf.float32)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    loss = tf.reduce_sum(xent * mask) / tf.reduce_sum(mask)
    masked = tf.boolean_mask(xent, tf.cast(mask, tf.bool))
    global_step = tf.train.get_or_create_global_step()
    warmup = tf.minimum(tf.cast(global_step + 1, tf.float32) / 3.0, 1.0)
    train_op = tf.train.AdamOptimizer(0.01 * warmup, beta1=0.9, beta2=0.98, epsilon=1e-9).minimize(
        loss, global_step=global_step)
    toks, tgts = data(16, ("i", (batch, seq), vocab), ("i", (batch, seq), vocab))
    lens = np.array([5, 3], np.int32)
    sess = _session_run(tf, feeder)
    out = {"loss": []}
    for _ in range(3):
        out["loss"].append(sess.run([train_op, loss], {tokens: toks, targets: tgts, lengths: lens})[1])
    out["masked"], out["attention"] = sess.run([masked, weights], {tokens: toks, targets: tgts, lengths: lens})
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def text_cnn(tf, feeder):
    """dennybritz/cnn-text-classification-tf's TextCNN."""
    seq, classes, vocab, emb, filter_sizes, num_filters = 7, 3, 20, 6, [2, 3], 4
    input_x = tf.placeholder(tf.int32, [None, seq], name="input_x")
    input_y = tf.placeholder(tf.float32, [None, classes], name="input_y")
    dropout_keep_prob = tf.placeholder(tf.float32, name="dropout_keep_prob")
    l2_loss = tf.constant(0.0)
    with tf.device("/cpu:0"), tf.name_scope("embedding"):
        W = tf.Variable(tf.random_uniform([vocab, emb], -1.0, 1.0), name="W")
        embedded_chars_expanded = tf.expand_dims(tf.nn.embedding_lookup(W, input_x), -1)
    pooled_outputs = []
    for filter_size in filter_sizes:
        with tf.name_scope("conv-maxpool-%s" % filter_size):
            W_f = tf.Variable(tf.truncated_normal([filter_size, emb, 1, num_filters], stddev=0.1), name="W")
            b = tf.Variable(tf.constant(0.1, shape=[num_filters]), name="b")
            conv = tf.nn.conv2d(embedded_chars_expanded, W_f, strides=[1, 1, 1, 1], padding="VALID", name="conv")
            h = tf.nn.relu(tf.nn.bias_add(conv, b), name="relu")
            pooled = tf.nn.max_pool(h, ksize=[1, seq - filter_size + 1, 1, 1], strides=[1, 1, 1, 1],
                                    padding="VALID", name="pool")
            pooled_outputs.append(pooled)
    num_filters_total = num_filters * len(filter_sizes)
    h_pool_flat = tf.reshape(tf.concat(pooled_outputs, 3), [-1, num_filters_total])
    with tf.name_scope("dropout"):
        h_drop = tf.nn.dropout(h_pool_flat, dropout_keep_prob)
    with tf.name_scope("output"):
        W_o = tf.get_variable("W", shape=[num_filters_total, classes],
                              initializer=contrib(tf).layers.xavier_initializer())
        b_o = tf.Variable(tf.constant(0.1, shape=[classes]), name="b")
        l2_loss += tf.nn.l2_loss(W_o)
        l2_loss += tf.nn.l2_loss(b_o)
        scores = tf.nn.xw_plus_b(h_drop, W_o, b_o, name="scores")
        predictions = tf.argmax(scores, 1, name="predictions")
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=scores, labels=input_y)) + 0.1 * l2_loss
    accuracy = tf.reduce_mean(tf.cast(tf.equal(predictions, tf.argmax(input_y, 1)), "float"), name="accuracy")
    global_step = tf.Variable(0, name="global_step", trainable=False)
    optimizer = tf.train.AdamOptimizer(1e-3)
    grads_and_vars = optimizer.compute_gradients(loss)
    train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
    summaries = []
    for g, v in grads_and_vars:
        if g is not None:
            summaries.append(tf.summary.histogram("{}/grad/hist".format(v.name), g))
            summaries.append(tf.summary.scalar("{}/grad/sparsity".format(v.name), tf.nn.zero_fraction(g)))
    train_summary_op = tf.summary.merge(summaries + [tf.summary.scalar("loss", loss)])
    xs, ys = data(17, ("i", (8, seq), vocab), ("i", (8,), classes))  # 8: the batch of the fed dropout mask
    sess = _session_run(tf, feeder)
    feeds = feeder.feeds(tf)
    out = {"loss": [], "accuracy": []}
    for _ in range(3):
        _, step, lo, acc, _ = sess.run([train_op, global_step, loss, accuracy, train_summary_op],
                                       {input_x: xs, input_y: one_hot_np(ys, classes), dropout_keep_prob: 0.5,
                                        **feeds})
        out["loss"].append(lo)
        out["accuracy"].append(acc)
    out["step"] = step
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def dynamic_rnn_seqlen(tf, feeder):
    """aymericdamien/TensorFlow-Examples' dynamic_rnn: variable-length sequences, the last relevant output."""
    seq_max_len, n_hidden, n_classes, batch_size = 6, 5, 2, 4
    x = tf.placeholder("float", [None, seq_max_len, 1])
    y = tf.placeholder("float", [None, n_classes])
    seqlen = tf.placeholder(tf.int32, [None])
    weights = {"out": tf.Variable(tf.random_normal([n_hidden, n_classes]))}
    biases = {"out": tf.Variable(tf.random_normal([n_classes]))}
    lstm_cell = tf.nn.rnn_cell.BasicLSTMCell(n_hidden)
    outputs, states = tf.nn.dynamic_rnn(lstm_cell, x, dtype=tf.float32, sequence_length=seqlen)
    batch = tf.shape(outputs)[0]
    index = tf.range(0, batch) * seq_max_len + (seqlen - 1)
    last = tf.gather(tf.reshape(outputs, [-1, n_hidden]), index)
    pred = tf.matmul(last, weights["out"]) + biases["out"]
    cost = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=pred, labels=y))
    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.1).minimize(cost)
    correct_pred = tf.equal(tf.argmax(pred, 1), tf.argmax(y, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_pred, tf.float32))
    xs, ys = data(18, ("f", (batch_size, seq_max_len, 1)), ("i", (batch_size,), n_classes))
    lens = np.array([6, 2, 4, 1], np.int32)
    xs[np.arange(seq_max_len)[None, :] >= lens[:, None]] = 0.0
    sess = _session_run(tf, feeder)
    out = {"cost": []}
    for _ in range(3):
        out["cost"].append(sess.run([optimizer, cost], {x: xs, y: one_hot_np(ys, n_classes), seqlen: lens})[1])
    out["accuracy"], out["state_h"] = sess.run([accuracy, states.h], {x: xs, y: one_hot_np(ys, n_classes),
                                                                      seqlen: lens})
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def birnn_classifier(tf, feeder):
    """A bidirectional GRU sentence classifier: bidirectional_dynamic_rnn with DropoutWrapper, a mean over the
    valid steps, a manual backward pass by tf.reverse_sequence checked against the library's."""
    batch, seq, emb, hidden, classes, vocab = 3, 5, 4, 3, 2, 9
    tokens = tf.placeholder(tf.int32, [batch, seq])
    lengths = tf.placeholder(tf.int32, [batch])
    labels = tf.placeholder(tf.int64, [batch])
    embedding = tf.get_variable("embedding", [vocab, emb])
    inputs = tf.nn.embedding_lookup(embedding, tokens)
    cell_fw = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.GRUCell(hidden), output_keep_prob=1.0)
    cell_bw = tf.nn.rnn_cell.GRUCell(hidden)
    (out_fw, out_bw), _ = tf.nn.bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=lengths,
                                                          dtype=tf.float32, scope="birnn")
    with tf.variable_scope("birnn/bw", reuse=True):
        manual_bw, _ = tf.nn.dynamic_rnn(cell_bw, tf.reverse_sequence(inputs, lengths, seq_axis=1, batch_axis=0),
                                         sequence_length=lengths, dtype=tf.float32)
    manual_bw = tf.reverse_sequence(manual_bw, lengths, seq_axis=1, batch_axis=0)
    stacked, _, states_bw = contrib(tf).rnn.stack_bidirectional_dynamic_rnn(
        [tf.nn.rnn_cell.GRUCell(hidden) for _ in range(2)], [tf.nn.rnn_cell.GRUCell(hidden) for _ in range(2)],
        inputs, sequence_length=lengths, dtype=tf.float32)
    mask = tf.expand_dims(tf.sequence_mask(lengths, seq, dtype=tf.float32), -1)
    pooled = tf.reduce_sum(tf.concat([out_fw, out_bw, stacked], 2) * mask, 1) / tf.cast(lengths[:, None],
                                                                                      tf.float32)
    logits = tf.layers.dense(pooled, classes)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    tvars = tf.trainable_variables()
    grads = tf.gradients(loss, tvars)
    grads, norm = tf.clip_by_global_norm(grads, 1.0)
    train_op = tf.train.AdagradOptimizer(0.5).apply_gradients(zip(grads, tvars))
    toks, labs = data(19, ("i", (batch, seq), vocab), ("i", (batch,), classes))
    lens = np.array([5, 2, 3], np.int32)
    sess = _session_run(tf, feeder)
    out = {"loss": [], "norm": []}
    for _ in range(3):
        _, lo, nm = sess.run([train_op, loss, norm], {tokens: toks, lengths: lens, labels: labs})
        out["loss"].append(lo)
        out["norm"].append(nm)
    out["bw"], out["manual_bw"] = sess.run([out_bw, manual_bw], {tokens: toks, lengths: lens})
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def nearest_neighbor_logreg(tf, feeder):
    """aymericdamien's nearest neighbor (tf.arg_min of L1 distances) and logistic regression (tf.log of the
    softmax, reduction_indices)."""
    xtr = tf.placeholder("float", [None, 6])
    xte = tf.placeholder("float", [6])
    distance = tf.reduce_sum(tf.abs(tf.add(xtr, tf.negative(xte))), reduction_indices=1)
    pred_nn = tf.arg_min(distance, 0)
    x = tf.placeholder(tf.float32, [None, 6])
    y = tf.placeholder(tf.float32, [None, 3])
    W = tf.Variable(tf.zeros([6, 3]))
    b = tf.Variable(tf.zeros([3]))
    pred = tf.nn.softmax(tf.matmul(x, W) + b)
    cost = tf.reduce_mean(-tf.reduce_sum(y * tf.log(pred), reduction_indices=1))
    optimizer = tf.train.GradientDescentOptimizer(0.5).minimize(cost)
    train_x, test_x, ys = data(20, ("f", (8, 6)), ("f", (3, 6)), ("i", (8,), 3))
    sess = _session_run(tf, feeder)
    out = {"nn": [sess.run(pred_nn, {xtr: train_x, xte: t}) for t in test_x], "cost": []}
    for _ in range(3):
        out["cost"].append(sess.run([optimizer, cost], {x: train_x, y: one_hot_np(ys, 3)})[1])
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


SCRIPTS = {f.__name__: f for f in (mnist_softmax, deep_mnist, cifar10, word2vec_nce, word2vec_sampled_softmax,
                                   autoencoder, vae, gan, dcgan, ptb_lstm, char_rnn, policy_gradient, dqn, resnet,
                                   dilated, dcgan_carpedm20, wgan_gp, transformer_block, text_cnn, dynamic_rnn_seqlen,
                                   birnn_classifier, nearest_neighbor_logreg)}


def script_runner(scripts: dict):
    """The driver of a file of scripts: run(tf, name, feeder) runs `scripts[name]` in a fresh default graph of
    `tf` (what check_against_tensorflow calls)."""
    def run(tf, name: str, feeder: Feeder) -> dict:
        tf.reset_default_graph()
        with tf.Graph().as_default():
            return scripts[name](tf, feeder)
    return run


run_script = script_runner(SCRIPTS)


def compare(want: dict, got: dict, rtol=2e-4, atol=2e-5) -> list[str]:
    """The differences between TensorFlow's results `want` and tfplus's `got`, one line each."""
    diffs = []
    for key in sorted(set(want) | set(got)):
        if key not in want or key not in got:
            diffs.append(f"{key}: only in {'tensorflow' if key in want else 'tfplus'}")
            continue
        a, b = np.asarray(want[key]), np.asarray(got[key])
        if a.dtype.kind in "US" or b.dtype.kind in "US":
            if a.tolist() != b.tolist():
                diffs.append(f"{key}: {a.tolist()} != {b.tolist()}")
        elif a.shape != b.shape:
            diffs.append(f"{key}: shape {a.shape} != {b.shape}")
        elif not np.allclose(a, b, rtol=rtol, atol=atol):
            diffs.append(f"{key}: max abs diff {np.abs(a.astype(float) - b.astype(float)).max():.3g}")
    return diffs


def check_against_tensorflow(tf1, run, name: str) -> None:
    """Script `name`, run by `run(tf, name, feeder)` (this module's run_script or zoo's), gives tfplus the outputs
    TensorFlow's run gives, with the random numbers TensorFlow drew."""
    feeder = Feeder()
    want = run(tf1, name, feeder)
    got = run(tfplus, name, Feeder(feeder.shapes))
    diffs = compare(want, got)
    assert not diffs, f"{name} differs from TensorFlow:\n" + "\n".join(diffs)


def sessions_on_opencl(monkeypatch) -> None:
    """The scripts open plain tf.Session()s: make their default device OpenCL's."""
    init = tfplus.Session.__init__
    monkeypatch.setattr(tfplus.Session, "__init__", lambda self, *a, device="opencl", **k: init(self, *a,
                                                                                              device=device, **k))
