"""TF1 graph-mode scripts written from outside the tests that shaped tfplus: the idioms of 2016-2019 tutorials,
books and repositories that tests/tutorials.py, zoo.py, zoo2.py, infra_scripts.py and io_scripts.py do not use
(feedable iterators, a gradient-reversal tf.custom_gradient, stateful char-RNN state fed back, gradient
accumulation, a GP's Cholesky algebra, ...). Each runs with TensorFlow's tf.compat.v1 (the oracle) and with
`import tfplus as tf`, the random numbers fed the same (tutorials.Feeder), and must give the same numbers."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from tutorials import Feeder, _session_run, _trained, check_against_tensorflow, contrib, data, one_hot_np


def _steps(tf, sess, fetches, feed, steps=3):
    """Runs `fetches` (the train op first) `steps` times; the other fetches' values per step, by name."""
    rows = [sess.run(fetches, feed)[1:] for _ in range(steps)]
    return {f"fetch{i}": np.array([r[i] for r in rows]) for i in range(len(fetches) - 1)}


# ---- Generative models ----------------------------------------------------------------------------------------

def vae_distributions(tf, feeder):
    """A VAE written with tf.distributions (Normal posterior and prior, kl_divergence, Bernoulli likelihood by
    logits), the reparameterisation by hand and tf.layers.dense everywhere."""
    tfd = tf.distributions
    x = tf.placeholder(tf.float32, [None, 12])
    with tf.variable_scope("encoder"):
        h = tf.layers.dense(x, 10, tf.nn.elu)
        loc = tf.layers.dense(h, 3)
        scale = tf.nn.softplus(tf.layers.dense(h, 3) - 1.0) + 1e-4
    posterior = tfd.Normal(loc=loc, scale=scale)
    prior = tfd.Normal(loc=tf.zeros(3), scale=tf.ones(3))
    z = loc + scale * tf.random_normal(tf.shape(loc))
    with tf.variable_scope("decoder"):
        logits = tf.layers.dense(tf.layers.dense(z, 10, tf.nn.elu), 12)
    likelihood = tfd.Bernoulli(logits=logits)
    log_lik = tf.reduce_sum(likelihood.log_prob(x), axis=1)
    kl = tf.reduce_sum(tfd.kl_divergence(posterior, prior), axis=1)
    elbo = tf.reduce_mean(log_lik - kl)
    optimizer = tf.train.AdamOptimizer(0.01)
    train_op = optimizer.minimize(-elbo)
    (xs,) = data(101, ("f", (8, 12)))
    xs = (xs > 0.5).astype(np.float32)
    sess = _session_run(tf, feeder)
    feed = {x: xs, **feeder.feeds(tf)}
    out = _steps(tf, sess, [train_op, elbo, tf.reduce_mean(kl)], feed)
    out["mean"] = sess.run(likelihood.mean(), feed)
    out["entropy"] = sess.run(posterior.entropy(), feed)
    return _trained(tf, sess, out)


def gan_scoped_var_list(tf, feeder):
    """A GAN in the style of the 2017 blog posts: generator and discriminator in variable scopes (the second call
    reuse=True), leaky ReLU, batch norm in the generator with its UPDATE_OPS filtered by scope, and two Adam
    optimizers (beta1=0.5) over get_collection(TRAINABLE_VARIABLES, scope)."""
    def generator(z, training):
        with tf.variable_scope("generator"):
            h = tf.layers.dense(z, 8, use_bias=False)  # batch norm's beta is the bias
            h = tf.nn.leaky_relu(tf.layers.batch_normalization(h, training=training, momentum=0.8), alpha=0.2)
            return tf.nn.tanh(tf.layers.dense(h, 6))

    def discriminator(x, reuse=False):
        with tf.variable_scope("discriminator", reuse=reuse):
            h = tf.nn.leaky_relu(tf.layers.dense(x, 8), alpha=0.2)
            return tf.layers.dense(h, 1)

    real = tf.placeholder(tf.float32, [None, 6])
    noise = tf.placeholder(tf.float32, [None, 4])
    fake = generator(noise, True)
    d_real = discriminator(real)
    d_fake = discriminator(fake, reuse=True)
    xent = tf.nn.sigmoid_cross_entropy_with_logits
    d_loss = tf.reduce_mean(xent(logits=d_real, labels=tf.ones_like(d_real) * 0.9)) + \
        tf.reduce_mean(xent(logits=d_fake, labels=tf.zeros_like(d_fake)))
    g_loss = tf.reduce_mean(xent(logits=d_fake, labels=tf.ones_like(d_fake)))
    d_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="discriminator")
    g_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="generator")
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS, scope="generator")):
        g_train = tf.train.AdamOptimizer(2e-3, beta1=0.5).minimize(g_loss, var_list=g_vars)
    d_train = tf.train.AdamOptimizer(2e-3, beta1=0.5).minimize(d_loss, var_list=d_vars)
    xs, zs = data(102, ("n", (8, 6)), ("n", (8, 4)))
    sess = _session_run(tf, feeder)
    out = {"d": [], "g": []}
    for _ in range(3):
        out["d"].append(sess.run([d_train, d_loss], {real: xs, noise: zs})[1])
        out["g"].append(sess.run([g_train, g_loss], {noise: zs})[1])
    out = {k: np.array(v) for k, v in out.items()}
    out["names"] = np.array([v.op.name for v in d_vars + g_vars])
    return _trained(tf, sess, out, names=[v.op.name for v in tf.global_variables()])


# ---- Sequence models ------------------------------------------------------------------------------------------

def char_rnn_stateful(tf, feeder):
    """sherjilozair/char-rnn-tensorflow's training loop: a MultiRNNCell of LSTMs, the final state of one batch fed
    as the initial state of the next (a feed per LSTMStateTuple's c and h), sequence_loss, gradients clipped by
    global norm and applied with a global step; then sampling by argmax, one character at a time."""
    vocab, hidden, batch, seq = 7, 6, 2, 5
    cell = tf.nn.rnn_cell.MultiRNNCell([tf.nn.rnn_cell.BasicLSTMCell(hidden) for _ in range(2)])
    inputs = tf.placeholder(tf.int32, [batch, seq])
    targets = tf.placeholder(tf.int32, [batch, seq])
    initial_state = cell.zero_state(batch, tf.float32)
    embedding = tf.get_variable("embedding", [vocab, hidden])
    outputs, final_state = tf.nn.dynamic_rnn(cell, tf.nn.embedding_lookup(embedding, inputs),
                                             initial_state=initial_state)
    softmax_w = tf.get_variable("softmax_w", [hidden, vocab])
    softmax_b = tf.get_variable("softmax_b", [vocab])
    logits = tf.reshape(tf.matmul(tf.reshape(outputs, [-1, hidden]), softmax_w) + softmax_b, [batch, seq, vocab])
    probs = tf.nn.softmax(logits)
    loss = contrib(tf).seq2seq.sequence_loss(logits, targets, tf.ones([batch, seq]))
    global_step = tf.Variable(0, trainable=False, name="global_step")
    tvars = tf.trainable_variables()
    grads, norm = tf.clip_by_global_norm(tf.gradients(loss, tvars), 0.5)
    train_op = tf.train.AdamOptimizer(0.02).apply_gradients(zip(grads, tvars), global_step=global_step)
    (text,) = data(103, ("i", (batch, 3 * seq + 1), vocab))
    sess = _session_run(tf, feeder)
    state = sess.run(initial_state)
    out = {"loss": [], "norm": []}
    for b in range(3):
        feed = {inputs: text[:, b * seq:(b + 1) * seq], targets: text[:, b * seq + 1:(b + 1) * seq + 1]}
        for i, (c, h) in enumerate(initial_state):
            feed[c] = state[i].c
            feed[h] = state[i].h
        loss_v, norm_v, state, _ = sess.run([loss, norm, final_state, train_op], feed)
        out["loss"].append(loss_v)
        out["norm"].append(norm_v)
    out = {k: np.array(v) for k, v in out.items()}
    out["state_h"] = state[-1].h
    out["step"] = sess.run(global_step)
    # Sampling, as the repo's sample(): one character at a time, the state carried in a Python loop.
    state = sess.run(initial_state)
    char, sampled = text[:, :1], []
    for _ in range(4):
        feed = {inputs: np.repeat(char, seq, axis=1)}
        feed.update({t: v for pair, value in zip(initial_state, state) for t, v in zip(pair, value)})
        p, state = sess.run([probs, final_state], feed)
        char = p[:, -1].argmax(axis=1)[:, None].astype(np.int32)
        sampled.append(char[:, 0])
    out["sampled"] = np.array(sampled)
    return _trained(tf, sess, out)


def custom_rnn_cell(tf, feeder):
    """A cell of one's own (a subclass of tf.nn.rnn_cell.RNNCell with state_size, output_size and call, the
    2017 way to write an IndRNN or a minimal GRU) stacked with an LSTMCell with peepholes, a projection and a
    cell clip under a ResidualWrapper, unrolled by tf.nn.static_rnn over tf.unstack'ed steps."""
    class MinimalGRUCell(tf.nn.rnn_cell.RNNCell):
        def __init__(self, units):
            super().__init__()
            self._units = units

        @property
        def state_size(self):
            return self._units

        @property
        def output_size(self):
            return self._units

        def call(self, inputs, state):
            size = inputs.get_shape().as_list()[-1] + self._units
            w = tf.get_variable("w", [size, 2 * self._units])
            b = tf.get_variable("b", [2 * self._units], initializer=tf.constant_initializer(1.0))
            gate, cand = tf.split(tf.matmul(tf.concat([inputs, state], 1), w) + b, 2, axis=1)
            new = tf.sigmoid(gate) * state + (1.0 - tf.sigmoid(gate)) * tf.tanh(cand)
            return new, new

    x = tf.placeholder(tf.float32, [3, 4, 5])
    y = tf.placeholder(tf.float32, [3, 5])
    lstm = tf.nn.rnn_cell.LSTMCell(5, use_peepholes=True, num_proj=5, cell_clip=1.0)
    cell = tf.nn.rnn_cell.MultiRNNCell([MinimalGRUCell(5), tf.nn.rnn_cell.ResidualWrapper(lstm)])
    outputs, state = tf.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
    loss = tf.reduce_mean(tf.squared_difference(outputs[-1], y))
    train_op = tf.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True).minimize(loss)
    xs, ys = data(104, ("n", (3, 4, 5)), ("n", (3, 5)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, state[1].c], {x: xs, y: ys})
    return _trained(tf, sess, out)


def seq2seq_greedy_while(tf, feeder):
    """An attention seq2seq written out by hand (before contrib.seq2seq settled): a GRU encoder by dynamic_rnn,
    a decoder GRUCell trained with teacher forcing in a Python loop, dot-product attention by tf.einsum, and
    greedy decoding in a tf.while_loop writing ids to a TensorArray, sharing the decoder's variables."""
    vocab, units, batch, src_len, tgt_len = 6, 5, 2, 4, 3
    source = tf.placeholder(tf.int32, [batch, src_len])
    target = tf.placeholder(tf.int32, [batch, tgt_len])
    embedding = tf.get_variable("embedding", [vocab, units])
    with tf.variable_scope("encoder"):
        memory, enc_state = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(units),
                                              tf.nn.embedding_lookup(embedding, source), dtype=tf.float32)
    cell = tf.nn.rnn_cell.GRUCell(units)

    def decode_step(prev_ids, state):
        with tf.variable_scope("decoder", reuse=tf.AUTO_REUSE):
            output, state = cell(tf.nn.embedding_lookup(embedding, prev_ids), state)
            scores = tf.einsum("btu,bu->bt", memory, output)
            context = tf.einsum("bt,btu->bu", tf.nn.softmax(scores), memory)
            logits = tf.layers.dense(tf.concat([output, context], 1), vocab, name="out")
        return logits, state

    go = tf.zeros([batch], tf.int32)
    state, prev, step_logits = enc_state, go, []
    for t in range(tgt_len):
        logits, state = decode_step(prev, state)
        step_logits.append(logits)
        prev = target[:, t]
    logits = tf.stack(step_logits, axis=1)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target, logits=logits))
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss)

    def body(t, prev_ids, state, ids):
        logits, state = decode_step(prev_ids, state)
        next_ids = tf.argmax(logits, axis=1, output_type=tf.int32)
        return t + 1, next_ids, state, ids.write(t, next_ids)

    _, _, _, ids = tf.while_loop(lambda t, *_: t < tgt_len, body,
                                 [tf.constant(0), go, enc_state, tf.TensorArray(tf.int32, size=tgt_len)])
    greedy = tf.transpose(ids.stack())
    src, tgt = data(105, ("i", (batch, src_len), vocab), ("i", (batch, tgt_len), vocab))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {source: src, target: tgt}, steps=4)
    out["greedy"] = sess.run(greedy, {source: src})
    return _trained(tf, sess, out)


def scan_rnn_and_returns(tf, feeder):
    """tf.scan as the 2016 blog posts used it: an Elman RNN over time-major inputs (trained through the scan),
    discounted returns by a reversed scan, tf.foldl for a running product and tf.map_fn over the batch."""
    x = tf.placeholder(tf.float32, [5, 3, 4])  # time, batch, features
    rewards = tf.placeholder(tf.float32, [5, 3])
    w_x = tf.Variable(tf.truncated_normal([4, 6], stddev=0.3))
    w_h = tf.Variable(tf.truncated_normal([6, 6], stddev=0.3))
    states = tf.scan(lambda h, x_t: tf.tanh(tf.matmul(x_t, w_x) + tf.matmul(h, w_h)), x, initializer=tf.zeros([3, 6]))
    returns = tf.scan(lambda acc, r: r + 0.9 * acc, rewards, initializer=tf.zeros([3]), reverse=True)
    values = tf.squeeze(tf.layers.dense(states, 1), -1)
    loss = tf.reduce_mean(tf.square(returns - values))
    product = tf.foldl(lambda acc, r: acc * (1.0 + 0.1 * r), rewards, initializer=tf.ones([3]))
    per_example = tf.map_fn(lambda seq: tf.reduce_max(seq, axis=0), tf.transpose(states, [1, 0, 2]))
    train_op = tf.train.AdagradOptimizer(0.1).minimize(loss)
    xs, rs = data(106, ("n", (5, 3, 4)), ("f", (5, 3)))
    sess = _session_run(tf, feeder)
    feed = {x: xs, rewards: rs}
    out = _steps(tf, sess, [train_op, loss], feed)
    out["returns"], out["product"], out["max"] = sess.run([returns, product, per_example], feed)
    return _trained(tf, sess, out)


def ctc_ocr_beam(tf, feeder):
    """A CRNN-style OCR head: conv features over a line image, a bidirectional LSTM, tf.nn.ctc_loss on time-major
    logits, and both decoders (greedy and beam search) scored by tf.edit_distance against the sparse labels."""
    classes, time = 4, 6
    images = tf.placeholder(tf.float32, [2, 4, time, 1])
    labels = tf.sparse_placeholder(tf.int32)
    seq_len = tf.placeholder(tf.int32, [2])
    conv = tf.layers.conv2d(images, 3, 3, padding="same", activation=tf.nn.relu)
    features = tf.reshape(tf.transpose(conv, [0, 2, 1, 3]), [2, time, 4 * 3])
    (fw, bw), _ = tf.nn.bidirectional_dynamic_rnn(tf.nn.rnn_cell.LSTMCell(4), tf.nn.rnn_cell.LSTMCell(4), features,
                                                  sequence_length=seq_len, dtype=tf.float32)
    logits = tf.transpose(tf.layers.dense(tf.concat([fw, bw], 2), classes + 1), [1, 0, 2])
    loss = tf.reduce_mean(tf.nn.ctc_loss(labels, logits, seq_len))
    train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    greedy, _ = tf.nn.ctc_greedy_decoder(logits, seq_len)
    beam, log_probs = tf.nn.ctc_beam_search_decoder(logits, seq_len, beam_width=4, top_paths=2)
    errors = [tf.reduce_mean(tf.edit_distance(tf.cast(d[0], tf.int32), labels)) for d in (greedy, beam)]
    (xs,) = data(107, ("n", (2, 4, time, 1)))
    sparse = tf.SparseTensorValue([[0, 0], [0, 1], [1, 0], [1, 1], [1, 2]], np.array([1, 2, 3, 3, 0], np.int32),
                                  [2, 3])
    sess = _session_run(tf, feeder)
    feed = {images: xs, labels: sparse, seq_len: [time, 5]}
    out = _steps(tf, sess, [train_op, loss], feed)
    out["greedy"] = sess.run(tf.sparse_tensor_to_dense(greedy[0], default_value=-1), feed)
    for k in range(2):
        out[f"beam{k}"] = sess.run(tf.sparse_tensor_to_dense(beam[k], default_value=-1), feed)
    out["log_probs"], out["errors"] = sess.run([log_probs, errors], feed)
    return _trained(tf, sess, out)


# ---- Input pipelines and training infrastructure --------------------------------------------------------------

def feedable_iterator(tf, feeder):
    """The 2018 tf.data guide's feedable iterator: a repeating training Dataset (map with num_parallel_calls,
    batch, repeat, prefetch) behind a one-shot iterator, a validation Dataset of placeholders behind an
    initializable one, switched by a string handle fed to tf.data.Iterator.from_string_handle."""
    xs, ys = data(108, ("n", (12, 5)), ("i", (12,), 3))
    vx = tf.placeholder(tf.float32, [None, 5])
    vy = tf.placeholder(tf.int32, [None])
    train_ds = tf.data.Dataset.from_tensor_slices((xs, ys)).map(lambda a, b: (a * 0.5, b), num_parallel_calls=2)
    train_ds = train_ds.batch(4).repeat().prefetch(1)
    valid_ds = tf.data.Dataset.from_tensor_slices((vx, vy)).filter(lambda a, b: b > 0).batch(3)
    handle = tf.placeholder(tf.string, shape=[])
    iterator = tf.data.Iterator.from_string_handle(handle, train_ds.output_types, train_ds.output_shapes)
    features, labels = iterator.get_next()
    train_iter = train_ds.make_one_shot_iterator()
    valid_iter = valid_ds.make_initializable_iterator()
    logits = tf.layers.dense(features, 3)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), labels), tf.int32))
    train_op = tf.train.GradientDescentOptimizer(0.3).minimize(loss)
    sess = _session_run(tf, feeder)
    train_handle, valid_handle = sess.run([train_iter.string_handle(), valid_iter.string_handle()])
    out = {"loss": [], "correct": []}
    for _epoch in range(2):
        for _ in range(3):
            out["loss"].append(sess.run([train_op, loss], {handle: train_handle})[1])
        sess.run(valid_iter.initializer, {vx: xs, vy: ys})
        total = 0
        while True:
            try:
                total += sess.run(correct, {handle: valid_handle})
            except tf.errors.OutOfRangeError:
                break
        out["correct"].append(total)
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


def monitored_session_resume(tf, feeder):
    """tf.train.MonitoredTrainingSession with a checkpoint_dir, StopAtStepHook and NanTensorHook, a Scaffold
    whose init_feed_dict gives the initial weights; a second session on the same directory restores the last
    checkpoint and continues to a later step."""
    with tempfile.TemporaryDirectory() as d:
        def build():
            global_step = tf.train.get_or_create_global_step()
            x = tf.constant(data(109, ("n", (6, 4)))[0])
            y = tf.constant(data(110, ("n", (6, 1)))[0])
            pred = tf.layers.dense(tf.layers.dense(x, 5, tf.nn.relu), 1)
            loss = tf.losses.mean_squared_error(y, pred)
            train_op = tf.train.AdamOptimizer(0.05).minimize(loss, global_step=global_step)
            return global_step, loss, train_op

        losses = []
        for last_step in (3, 5):
            with tf.Graph().as_default():
                global_step, loss, train_op = build()
                scaffold = tf.train.Scaffold(init_feed_dict=feeder.feeds(tf))
                hooks = [tf.train.StopAtStepHook(last_step=last_step), tf.train.NanTensorHook(loss)]
                with tf.train.MonitoredTrainingSession(checkpoint_dir=d, scaffold=scaffold, hooks=hooks,
                                                       save_checkpoint_steps=1, save_summaries_steps=None,
                                                       log_step_count_steps=None) as sess:
                    while not sess.should_stop():
                        losses.append(sess.run([train_op, loss])[1])
        latest = tf.train.latest_checkpoint(d)
        out = {"loss": np.array(losses), "latest": np.array(os.path.basename(latest))}
        out["step"] = tf.train.load_variable(latest, "global_step")
        out["kernel"] = tf.train.load_variable(latest, "dense_1/kernel")
        return out


def summaries_read_back(tf, feeder):
    """tf.summary scalars, a histogram and an image merged with merge_all, written by a FileWriter every step with
    add_summary(summary, step), flushed, and read back with tf.train.summary_iterator."""
    x = tf.placeholder(tf.float32, [4, 3, 3, 1])
    with tf.name_scope("model"):
        w = tf.Variable(tf.truncated_normal([3 * 3, 2], stddev=0.5), name="w")
        logits = tf.matmul(tf.reshape(x, [4, 9]), w)
    loss = tf.reduce_mean(tf.square(logits))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    tf.summary.scalar("loss", loss)
    tf.summary.histogram("weights", w)
    tf.summary.image("inputs", x, max_outputs=2)
    merged = tf.summary.merge_all()
    (xs,) = data(111, ("f", (4, 3, 3, 1)))
    with tempfile.TemporaryDirectory() as d:
        sess = _session_run(tf, feeder)
        writer = tf.summary.FileWriter(d, sess.graph)
        for step in range(3):
            summary, _ = sess.run([merged, train_op], {x: xs})
            writer.add_summary(summary, step)
        writer.close()
        tags, scalars, histo, images = [], [], [], []
        (path,) = [os.path.join(d, f) for f in os.listdir(d) if "tfevents" in f]
        for event in tf.train.summary_iterator(path):
            for value in event.summary.value:
                tags.append(value.tag)
                if value.HasField("simple_value"):
                    scalars.append((event.step, value.simple_value))
                elif value.HasField("histo"):
                    histo.append((value.histo.num, value.histo.sum, value.histo.min, value.histo.max))
                elif value.HasField("image"):
                    images.append((value.image.height, value.image.width, value.image.colorspace))
        return _trained(tf, sess, {"tags": np.array(tags), "scalars": np.array(scalars), "histo": np.array(histo),
                                   "images": np.array(images)})


def lr_schedules(tf, feeder):
    """The learning-rate schedules of TF1's tf.train, each read at each step of a Nesterov-momentum run that uses
    their sum: exponential (staircase), piecewise constant, polynomial with cycle, inverse time, natural exp,
    cosine and cosine with restarts."""
    global_step = tf.train.get_or_create_global_step()
    schedules = {
        "exponential": tf.train.exponential_decay(0.1, global_step, 2, 0.5, staircase=True),
        "piecewise": tf.train.piecewise_constant(global_step, [2, 4], [0.1, 0.05, 0.01]),
        "polynomial": tf.train.polynomial_decay(0.1, global_step, 3, 0.01, power=2.0, cycle=True),
        "inverse_time": tf.train.inverse_time_decay(0.1, global_step, 2, 0.5),
        "natural_exp": tf.train.natural_exp_decay(0.1, global_step, 2, 0.5, staircase=True),
        "cosine": tf.train.cosine_decay(0.1, global_step, 5, alpha=0.1),
        "restarts": tf.train.cosine_decay_restarts(0.1, global_step, 2, t_mul=2.0, m_mul=0.5),
    }
    lr = tf.add_n(list(schedules.values())) / len(schedules)
    x = tf.constant(data(112, ("n", (5, 3)))[0])
    w = tf.Variable(tf.truncated_normal([3, 1]))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
    train_op = tf.train.MomentumOptimizer(lr, 0.9, use_nesterov=True).minimize(loss, global_step=global_step)
    sess = _session_run(tf, feeder)
    out = {k: [] for k in schedules}
    out["loss"] = []
    for _ in range(7):
        values = sess.run(schedules)
        for k, v in values.items():
            out[k].append(v)
        out["loss"].append(sess.run([train_op, loss])[1])
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


def saver_ema_restore(tf, feeder):
    """Training with an ExponentialMovingAverage applied after each step, a Saver(max_to_keep=2) saving with
    global_step, get_checkpoint_state's history; then a fresh graph restores the averages into the model's
    variables (ema.variables_to_restore()) for evaluation, and another continues training from the checkpoint."""
    xs, ys = data(113, ("n", (6, 4)), ("i", (6,), 3))

    def build():
        x = tf.placeholder(tf.float32, [None, 4])
        y = tf.placeholder(tf.int32, [None])
        logits = tf.layers.dense(tf.layers.dense(x, 5, tf.nn.tanh, name="h"), 3, name="logits")
        loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
        step = tf.train.get_or_create_global_step()
        ema = tf.train.ExponentialMovingAverage(0.5, num_updates=step)
        opt_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step)
        with tf.control_dependencies([opt_op]):
            train_op = ema.apply(tf.trainable_variables())
        return x, y, logits, loss, train_op, ema

    with tempfile.TemporaryDirectory() as d:
        with tf.Graph().as_default():
            x, y, logits, loss, train_op, ema = build()
            saver = tf.train.Saver(max_to_keep=2)
            sess = _session_run(tf, feeder, trainables_first=True)
            losses = []
            for _ in range(3):
                losses.append(sess.run([train_op, loss], {x: xs, y: ys})[1])
                saver.save(sess, os.path.join(d, "model.ckpt"), global_step=tf.train.get_global_step())
            plain = sess.run(logits, {x: xs})
            sess.close()
        state = tf.train.get_checkpoint_state(d)
        kept = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
        with tf.Graph().as_default():
            x, y, logits, loss, train_op, ema = build()
            with tf.Session() as sess:
                tf.train.Saver(ema.variables_to_restore()).restore(sess, state.model_checkpoint_path)
                averaged = sess.run(logits, {x: xs})
        with tf.Graph().as_default():
            x, y, logits, loss, train_op, ema = build()
            with tf.Session() as sess:
                tf.train.Saver().restore(sess, tf.train.latest_checkpoint(d))
                for _ in range(2):
                    losses.append(sess.run([train_op, loss], {x: xs, y: ys})[1])
                return _trained(tf, sess, {"loss": np.array(losses), "kept": np.array(kept), "plain": plain,
                                           "averaged": averaged})


def bn_training_flag(tf, feeder):
    """The CNN with batch norm every 2018 tutorial warns about: is_training a placeholder_with_default(False),
    tf.layers.batch_normalization(training=is_training), the UPDATE_OPS run by control dependencies on the train
    op, and evaluation with the default (the moving statistics)."""
    images = tf.placeholder(tf.float32, [None, 6, 6, 2])
    labels = tf.placeholder(tf.int32, [None])
    is_training = tf.placeholder_with_default(False, shape=(), name="is_training")
    h = tf.layers.conv2d(images, 4, 3, padding="same", use_bias=False)
    h = tf.nn.relu(tf.layers.batch_normalization(h, training=is_training, momentum=0.9))
    h = tf.layers.conv2d(h, 4, 3, padding="same", use_bias=False)
    h = tf.nn.relu(tf.layers.batch_normalization(h, training=is_training, scale=False, epsilon=1e-3))
    h = tf.layers.flatten(tf.layers.max_pooling2d(h, 2, 2))
    logits = tf.layers.dense(h, 3)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    xs, ys = data(114, ("n", (8, 6, 6, 2)), ("i", (8,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {images: xs, labels: ys, is_training: True})
    out["eval_loss"] = sess.run(loss, {images: xs, labels: ys})
    out["n_updates"] = np.array(len(update_ops))
    return _trained(tf, sess, out, names=[v.op.name for v in tf.global_variables() if "Adam" not in v.op.name])


def py_func_preprocess(tf, feeder):
    """tf.py_func in a graph (NumPy preprocessing, set_shape after it, a stateless one in a Dataset.map) and a
    per-example loss weight computed by py_func from the labels."""
    xs, ys = data(115, ("n", (8, 4)), ("i", (8,), 2))

    def standardize(batch):
        return ((batch - batch.mean(axis=0)) / (batch.std(axis=0) + 1e-3)).astype(np.float32)

    def class_weights(labels):
        counts = np.bincount(labels, minlength=2)
        return (len(labels) / (2.0 * np.maximum(counts, 1)))[labels].astype(np.float32)

    ds = tf.data.Dataset.from_tensor_slices((xs, ys))
    ds = ds.map(lambda a, b: (tf.py_func(lambda v: np.clip(v, -1.5, 1.5), [a], tf.float32, stateful=False), b))
    features, labels = ds.batch(4).repeat().make_one_shot_iterator().get_next()
    features = tf.py_func(standardize, [features], tf.float32)
    features.set_shape([None, 4])
    weights = tf.py_func(class_weights, [labels], tf.float32)
    logits = tf.squeeze(tf.layers.dense(features, 1), 1)
    loss = tf.losses.sigmoid_cross_entropy(labels, logits, weights=weights)
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss)
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {}, steps=4)
    return _trained(tf, sess, out)


def gradient_accumulation(tf, feeder):
    """Gradient accumulation over micro-batches, as the 2018 answers wrote it: non-trainable accumulators made
    with tf.zeros_like(v.initialized_value()), zero and accumulate ops, and apply_gradients of the means, with
    an Adadelta optimizer; the result is one big-batch step's."""
    x = tf.placeholder(tf.float32, [None, 4])
    y = tf.placeholder(tf.float32, [None, 2])
    pred = tf.layers.dense(tf.layers.dense(x, 6, tf.nn.sigmoid), 2)
    loss = tf.reduce_mean(tf.squared_difference(pred, y))
    opt = tf.train.AdadeltaOptimizer(1.0)
    tvars = tf.trainable_variables()
    accum = [tf.Variable(tf.zeros_like(v.initialized_value()), trainable=False) for v in tvars]
    zero_ops = [a.assign(tf.zeros_like(a)) for a in accum]
    grads_and_vars = opt.compute_gradients(loss, tvars)
    accum_ops = [a.assign_add(g) for a, (g, _) in zip(accum, grads_and_vars)]
    n_micro = tf.placeholder(tf.float32, [])
    train_step = opt.apply_gradients([(a / n_micro, v) for a, (_, v) in zip(accum, grads_and_vars)])
    xs, ys = data(116, ("n", (8, 4)), ("n", (8, 2)))
    sess = _session_run(tf, feeder)
    losses = []
    for _ in range(2):
        sess.run(zero_ops)
        for i in range(0, 8, 4):
            losses.append(sess.run([accum_ops, loss], {x: xs[i:i + 4], y: ys[i:i + 4]})[1])
        sess.run(train_step, {n_micro: 2.0})
    return _trained(tf, sess, {"loss": np.array(losses), "accum": sess.run(accum[0])})


# ---- Losses, sparse inputs, images, linear algebra ------------------------------------------------------------

def multitask_losses(tf, feeder):
    """A multi-task head with tf.losses' family, their weights and reductions (label smoothing, Huber, hinge, log,
    cosine distance, absolute difference, mean pairwise squared error), kernel regularizers, tf.losses.add_loss
    and get_total_loss, optimized by Adam."""
    R = tf.losses.Reduction
    x = tf.placeholder(tf.float32, [None, 5])
    cls = tf.placeholder(tf.int32, [None])
    reg = tf.placeholder(tf.float32, [None, 3])
    w = tf.placeholder(tf.float32, [None])
    shared = tf.layers.dense(x, 8, tf.nn.relu, kernel_regularizer=tf.nn.l2_loss)
    logits = tf.layers.dense(shared, 3, kernel_regularizer=lambda k: 0.01 * tf.reduce_sum(tf.abs(k)))
    out3 = tf.layers.dense(shared, 3)
    probs = tf.nn.sigmoid(tf.layers.dense(shared, 1))
    onehot = tf.one_hot(cls, 3)
    terms = {
        "smoothed": tf.losses.softmax_cross_entropy(onehot, logits, label_smoothing=0.1, weights=w),
        "sparse": tf.losses.sparse_softmax_cross_entropy(cls, logits, weights=w, reduction=R.SUM),
        "huber": tf.losses.huber_loss(reg, out3, delta=0.5, reduction=R.SUM_BY_NONZERO_WEIGHTS),
        "hinge": tf.losses.hinge_loss(tf.cast(cls[:, None] > 0, tf.float32), probs - 0.5, loss_collection=None),
        "log": tf.losses.log_loss(tf.cast(cls[:, None] > 1, tf.float32), probs, weights=w[:, None],
                                  reduction=R.MEAN),
        "cosine": tf.losses.cosine_distance(tf.nn.l2_normalize(reg, 1), tf.nn.l2_normalize(out3, 1), axis=1),
        "abs": tf.losses.absolute_difference(reg, out3, reduction=R.SUM_OVER_BATCH_SIZE),
        "pairwise": tf.losses.mean_pairwise_squared_error(reg, out3),
    }
    tf.losses.add_loss(0.1 * tf.reduce_mean(tf.square(out3)))
    total = tf.losses.get_total_loss()
    train_op = tf.train.AdamOptimizer(0.01).minimize(total)
    xs, cs, rs, ws = data(117, ("n", (6, 5)), ("i", (6,), 3), ("n", (6, 3)), ("f", (6,)))
    ws[0] = 0.0
    sess = _session_run(tf, feeder)
    feed = {x: xs, cls: cs, reg: rs, w: ws}
    out = _steps(tf, sess, [train_op, total], feed)
    out.update(sess.run(terms, feed))
    out["n_losses"] = np.array(len(tf.losses.get_losses()))
    out["reg"] = sess.run(tf.losses.get_regularization_loss())
    return _trained(tf, sess, out)


def wide_sparse_linear(tf, feeder):
    """A wide (linear) click model on sparse features: a tf.sparse_placeholder fed SparseTensorValues,
    tf.sparse_tensor_dense_matmul, embedding_lookup_sparse with weights and the sqrtn combiner, tf.sparse ops on
    the ids, and an optimizer whose gradients are IndexedSlices (Adagrad)."""
    ids = tf.sparse_placeholder(tf.int64)
    vals = tf.sparse_placeholder(tf.float32)
    labels = tf.placeholder(tf.float32, [None])
    dense_x = tf.sparse_placeholder(tf.float32)
    embeddings = tf.Variable(tf.truncated_normal([10, 3], stddev=0.3))
    w_wide = tf.Variable(tf.zeros([6, 1]))
    emb = tf.nn.embedding_lookup_sparse(embeddings, ids, vals, combiner="sqrtn")
    deep = tf.reduce_sum(tf.layers.dense(emb, 2, tf.nn.relu), 1)
    wide = tf.squeeze(tf.sparse_tensor_dense_matmul(dense_x, w_wide), 1)
    logits = wide + deep
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    train_op = tf.train.AdagradOptimizer(0.3).minimize(loss)
    counts = tf.sparse_reduce_sum(tf.SparseTensor(ids.indices, tf.ones_like(ids.values, tf.float32),
                                                  ids.dense_shape), axis=1)
    dense_ids = tf.sparse.to_dense(tf.sparse.reorder(ids), default_value=-1)
    feed = {ids: tf.SparseTensorValue([[0, 0], [0, 1], [1, 0], [2, 0], [2, 1], [2, 2]],
                                      np.array([1, 4, 9, 4, 2, 1], np.int64), [3, 3]),
            vals: tf.SparseTensorValue([[0, 0], [0, 1], [1, 0], [2, 0], [2, 1], [2, 2]],
                                       np.array([1.0, 0.5, 2.0, 1.0, 1.0, 0.25], np.float32), [3, 3]),
            dense_x: tf.SparseTensorValue([[0, 1], [1, 5], [2, 0], [2, 3]],
                                          np.array([1.0, 1.0, 0.5, 2.0], np.float32), [3, 6]),
            labels: np.array([1.0, 0.0, 1.0], np.float32)}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], feed, steps=4)
    out["counts"], out["dense_ids"] = sess.run([counts, dense_ids], feed)
    return _trained(tf, sess, out)


def image_preprocessing(tf, feeder):
    """A preprocessing graph of tf.image (resize with align_corners and nearest neighbour, central and bounding-box
    crops, pad_to_bounding_box, flips and rot90, grayscale, brightness and contrast, per-image standardization by
    map_fn, extract_image_patches, total variation and PSNR) in front of a small CNN trained on it."""
    images = tf.placeholder(tf.float32, [2, 8, 8, 3])
    x = tf.image.resize_images(images, [10, 10], align_corners=True)
    x = tf.image.central_crop(x, 0.8)
    x = tf.image.pad_to_bounding_box(x, 1, 1, 10, 10)
    x = tf.image.crop_to_bounding_box(x, 1, 0, 8, 8)
    x = tf.image.flip_left_right(tf.image.rot90(x, k=1))
    x = tf.image.adjust_contrast(tf.image.adjust_brightness(x, 0.1), 1.5)
    x = tf.map_fn(tf.image.per_image_standardization, x)
    gray = tf.image.rgb_to_grayscale(x)
    small = tf.image.resize_nearest_neighbor(gray, [4, 4])
    patches = tf.extract_image_patches(gray, ksizes=[1, 3, 3, 1], strides=[1, 2, 2, 1], rates=[1, 1, 1, 1],
                                       padding="VALID")
    h = tf.layers.conv2d(tf.concat([x, gray], 3), 3, 3, activation=tf.nn.relu)
    logits = tf.layers.dense(tf.concat([tf.layers.flatten(h), tf.layers.flatten(patches)], 1), 2)
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=[[1.0, 0.0], [0.0, 1.0]], logits=logits))
    train_op = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
    (xs,) = data(118, ("f", (2, 8, 8, 3)))
    sess = _session_run(tf, feeder)
    feed = {images: xs}
    out = _steps(tf, sess, [train_op, loss], feed)
    out["small"], out["patches"] = sess.run([small, patches], feed)
    out["tv"] = sess.run(tf.image.total_variation(images), feed)
    out["psnr"] = sess.run(tf.image.psnr(images, tf.clip_by_value(images + 0.05, 0.0, 1.0), max_val=1.0), feed)
    return _trained(tf, sess, out)


def gp_regression(tf, feeder):
    """Gaussian-process regression in float64 (the GPflow-before-2.0 algebra): an RBF kernel with softplus
    hyperparameters, the log marginal likelihood by tf.cholesky, matrix_triangular_solve and the diagonal's logs,
    maximised by Adam; the predictive mean by cholesky_solve and the variance by a second solve; logdet checked."""
    rng = np.random.RandomState(119)
    xs = np.sort(rng.uniform(-2, 2, (8, 1)))
    ys = np.sin(2 * xs) + 0.1 * rng.standard_normal((8, 1))
    x_new = np.linspace(-2, 2, 4)[:, None]
    X = tf.placeholder(tf.float64, [None, 1])
    Y = tf.placeholder(tf.float64, [None, 1])
    Xs = tf.placeholder(tf.float64, [None, 1])
    raw = tf.Variable(np.array([0.5, 0.5, -1.0]), dtype=tf.float64)
    length, signal, noise = tf.unstack(tf.nn.softplus(raw))

    def rbf(a, b):
        sq = tf.reduce_sum(a ** 2, 1)[:, None] - 2 * tf.matmul(a, b, transpose_b=True) + tf.reduce_sum(b ** 2, 1)
        return signal * tf.exp(-0.5 * sq / length ** 2)

    n = tf.shape(X)[0]
    K = rbf(X, X) + (noise + 1e-6) * tf.eye(n, dtype=tf.float64)
    L = tf.cholesky(K)
    alpha = tf.matrix_triangular_solve(L, Y, lower=True)
    log_lik = -0.5 * tf.reduce_sum(tf.square(alpha)) - tf.reduce_sum(tf.log(tf.matrix_diag_part(L))) \
        - 0.5 * tf.cast(n, tf.float64) * np.log(2 * np.pi)
    train_op = tf.train.AdamOptimizer(0.05).minimize(-log_lik)
    Ks = rbf(X, Xs)
    mean = tf.matmul(Ks, tf.cholesky_solve(L, Y), transpose_a=True)
    v = tf.matrix_triangular_solve(L, Ks, lower=True)
    var = signal - tf.reduce_sum(tf.square(v), 0)
    feed = {X: xs, Y: ys, Xs: x_new}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, log_lik], feed, steps=4)
    out["mean"], out["var"] = sess.run([mean, var], feed)
    out["logdet"] = sess.run(tf.linalg.logdet(K) - 2 * tf.reduce_sum(tf.log(tf.linalg.diag_part(L))), feed)
    out["inv"] = sess.run(tf.matrix_inverse(K)[:2, :2], feed)
    return _trained(tf, sess, out)


def triplet_batch_hard(tf, feeder):
    """FaceNet-style embeddings (omoindrot's batch-hard triplet loss): a shared tower through tf.make_template,
    L2-normalised embeddings, pairwise distances, masks from label equality and tf.eye, the hardest positive and
    negative per anchor, and a contrastive loss on pairs beside it."""
    def tower(x):
        h = tf.layers.dense(x, 6, tf.nn.relu, name="h")
        return tf.nn.l2_normalize(tf.layers.dense(h, 3, name="emb"), axis=1)

    net = tf.make_template("tower", tower)
    x = tf.placeholder(tf.float32, [None, 5])
    labels = tf.placeholder(tf.int32, [None])
    other = tf.placeholder(tf.float32, [None, 5])
    emb = net(x)
    dot = tf.matmul(emb, emb, transpose_b=True)
    sq = tf.diag_part(dot)
    dist = tf.sqrt(tf.maximum(sq[:, None] - 2.0 * dot + sq[None, :], 0.0) + 1e-12)
    same = tf.equal(labels[:, None], labels[None, :])
    eye = tf.cast(tf.eye(tf.shape(labels)[0]), tf.bool)
    positive = tf.cast(tf.logical_and(same, tf.logical_not(eye)), tf.float32)
    hardest_pos = tf.reduce_max(positive * dist, axis=1)
    max_dist = tf.reduce_max(dist, axis=1, keepdims=True)
    hardest_neg = tf.reduce_min(dist + max_dist * tf.cast(same, tf.float32), axis=1)
    triplet = tf.reduce_mean(tf.maximum(hardest_pos - hardest_neg + 0.3, 0.0))
    pair_dist = tf.norm(emb - net(other), axis=1)
    pair_same = tf.cast(tf.equal(labels, tf.reverse(labels, [0])), tf.float32)
    contrastive = tf.reduce_mean(pair_same * tf.square(pair_dist) +
                                 (1 - pair_same) * tf.square(tf.maximum(1.0 - pair_dist, 0)))
    loss = triplet + 0.5 * contrastive
    train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    xs, ys = data(120, ("n", (6, 5)), ("i", (6,), 2))
    sess = _session_run(tf, feeder)
    feed = {x: xs, labels: ys, other: xs[::-1]}
    out = _steps(tf, sess, [train_op, triplet, contrastive], feed)
    out["n_vars"] = np.array(len(tf.trainable_variables()))
    return _trained(tf, sess, out)


def dann_gradient_reversal(tf, feeder):
    """Domain-adversarial training (pumpikano/tf-dann): a gradient reversal layer by tf.custom_gradient, a shared
    feature extractor, a label classifier on the source half of the batch (tf.slice with tf.cond on a training
    flag) and a domain classifier on all of it."""
    @tf.custom_gradient
    def flip_gradient(x):
        def grad(dy):
            return -0.3 * dy
        return tf.identity(x), grad

    x = tf.placeholder(tf.float32, [8, 4])
    y = tf.placeholder(tf.int32, [8])
    domain = tf.placeholder(tf.float32, [8, 2])
    train = tf.placeholder(tf.bool, [])
    feats = tf.layers.dense(x, 6, tf.nn.relu, name="features")
    source = tf.cond(train, lambda: tf.slice(feats, [0, 0], [4, -1]), lambda: feats)
    labels = tf.cond(train, lambda: tf.slice(y, [0], [4]), lambda: y)
    label_logits = tf.layers.dense(source, 3, name="classifier")
    label_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=label_logits))
    domain_logits = tf.layers.dense(flip_gradient(feats), 2, name="domain")
    domain_loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=domain, logits=domain_logits))
    train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(label_loss + domain_loss)
    xs, ys = data(121, ("n", (8, 4)), ("i", (8,), 3))
    ds = one_hot_np(np.array([0] * 4 + [1] * 4), 2)
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, label_loss, domain_loss], {x: xs, y: ys, domain: ds, train: True})
    out["eval"] = sess.run(label_loss, {x: xs, y: ys, train: False})
    return _trained(tf, sess, out)


def dqn_soft_update(tf, feeder):
    """A DQN with online and target networks in variable scopes, Q(s, a) picked by tf.gather_nd on
    tf.stack([tf.range(batch), actions]), a stop_gradient'ed double-DQN target, the Huber loss, RMSProp, and the
    target updated softly by tf.group of assigns (tau)."""
    def q_net(s, scope):
        with tf.variable_scope(scope):
            return tf.layers.dense(tf.layers.dense(s, 8, tf.nn.relu), 3)

    s = tf.placeholder(tf.float32, [None, 4])
    s_next = tf.placeholder(tf.float32, [None, 4])
    a = tf.placeholder(tf.int32, [None])
    r = tf.placeholder(tf.float32, [None])
    done = tf.placeholder(tf.float32, [None])
    q = q_net(s, "online")
    with tf.variable_scope("", reuse=True):
        q_next_online = q_net(s_next, "online")
    q_next_target = q_net(s_next, "target")
    batch = tf.shape(a)[0]
    q_sa = tf.gather_nd(q, tf.stack([tf.range(batch), a], axis=1))
    best = tf.argmax(q_next_online, axis=1, output_type=tf.int32)
    target = r + 0.99 * (1.0 - done) * tf.gather_nd(q_next_target, tf.stack([tf.range(batch), best], axis=1))
    loss = tf.losses.huber_loss(tf.stop_gradient(target), q_sa)
    online_vars = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, "online")
    target_vars = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, "target")
    train_op = tf.train.RMSPropOptimizer(0.01, decay=0.95, epsilon=0.01).minimize(loss, var_list=online_vars)
    soft_update = tf.group(*[t.assign(0.1 * o + 0.9 * t) for o, t in zip(online_vars, target_vars)])
    ss, sn, acts, rs = data(122, ("n", (5, 4)), ("n", (5, 4)), ("i", (5,), 3), ("f", (5,)))
    sess = _session_run(tf, feeder)
    feed = {s: ss, s_next: sn, a: acts, r: rs, done: np.array([0, 0, 1, 0, 1], np.float32)}
    losses = []
    for _ in range(3):
        losses.append(sess.run([train_op, loss], feed)[1])
        sess.run(soft_update)
    return _trained(tf, sess, {"loss": np.array(losses)}, names=[v.op.name for v in online_vars + target_vars])


# ---- slim ---------------------------------------------------------------------------------------------------

def _slim(tf):
    """tf.contrib.slim; for TensorFlow 2 (which has no contrib) the parts the script uses, written out from TF1's
    definitions (contrib/framework/python/ops/arg_scope.py, contrib/layers/python/layers/layers.py)."""
    if not hasattr(tf, "get_seed"):  # tfplus
        return tf.contrib.slim
    import contextlib
    import functools
    stack = [{}]

    @contextlib.contextmanager
    def arg_scope(ops, **kwargs):
        scope = dict(ops) if isinstance(ops, dict) else dict(stack[-1])
        for op in () if isinstance(ops, dict) else ops:
            scope[op] = {**scope.get(op, {}), **kwargs}
        stack.append(scope)
        try:
            yield scope
        finally:
            stack.pop()

    def add_arg_scope(fn):
        @functools.wraps(fn)
        def with_args(*args, **kwargs):
            return fn(*args, **{**stack[-1].get(with_args, {}), **kwargs})
        return with_args

    def _variables(shape, n_out, initializer, regularizer, with_biases):
        weights = tf.get_variable("weights", shape, initializer=initializer or tf.glorot_uniform_initializer(),
                                  regularizer=regularizer)
        tf.add_to_collection(tf.GraphKeys.MODEL_VARIABLES, weights)
        if not with_biases:
            return weights, None
        biases = tf.get_variable("biases", [n_out], initializer=tf.zeros_initializer())
        tf.add_to_collection(tf.GraphKeys.MODEL_VARIABLES, biases)
        return weights, biases

    def _finish(y, biases, normalizer_fn, normalizer_params, activation_fn):
        y = normalizer_fn(y, **(normalizer_params or {})) if normalizer_fn else tf.nn.bias_add(y, biases)
        return activation_fn(y) if activation_fn else y

    @add_arg_scope
    def conv2d(inputs, num_outputs, kernel_size, stride=1, padding="SAME", activation_fn=tf.nn.relu,
               normalizer_fn=None, normalizer_params=None, weights_initializer=None, weights_regularizer=None,
               scope=None):
        with tf.variable_scope(scope, default_name="Conv"):
            w, b = _variables(list(kernel_size) + [inputs.shape.as_list()[-1], num_outputs], num_outputs,
                              weights_initializer, weights_regularizer, normalizer_fn is None)
            y = tf.nn.conv2d(inputs, w, [1, stride, stride, 1], padding)
            return _finish(y, b, normalizer_fn, normalizer_params, activation_fn)

    @add_arg_scope
    def fully_connected(inputs, num_outputs, activation_fn=tf.nn.relu, normalizer_fn=None, normalizer_params=None,
                        weights_initializer=None, weights_regularizer=None, scope=None):
        with tf.variable_scope(scope, default_name="fully_connected"):
            w, b = _variables([inputs.shape.as_list()[-1], num_outputs], num_outputs, weights_initializer,
                              weights_regularizer, normalizer_fn is None)
            return _finish(tf.matmul(inputs, w), b, normalizer_fn, normalizer_params, activation_fn)

    @add_arg_scope
    def max_pool2d(inputs, kernel_size, stride=2, padding="VALID", scope=None):
        with tf.name_scope(scope, "MaxPool2D"):
            return tf.nn.max_pool(inputs, [1] + list(kernel_size) + [1], [1, stride, stride, 1], padding)

    def flatten(inputs, scope=None):
        with tf.name_scope(scope, "Flatten"):
            return tf.reshape(inputs, [-1, int(np.prod(inputs.shape.as_list()[1:]))])

    def repeat(inputs, repetitions, layer, *args, scope=None, **kwargs):
        with tf.variable_scope(scope, "Repeat"):
            for i in range(repetitions):
                inputs = layer(inputs, *args, scope=f"{scope or layer.__name__}_{i + 1}", **kwargs)
            return inputs

    def stack_(inputs, layer, stack_args, scope=None, **kwargs):
        with tf.variable_scope(scope, "Stack"):
            for i, a in enumerate(stack_args):
                inputs = layer(inputs, *(a if isinstance(a, (list, tuple)) else [a]),
                               scope=f"{scope or layer.__name__}_{i + 1}", **kwargs)
            return inputs

    def get_variables_to_restore(exclude=()):
        return [v for v in tf.global_variables() if not any(v.op.name.startswith(e) for e in exclude)]

    ns = type("slim", (), {})
    for name, fn in dict(arg_scope=arg_scope, conv2d=conv2d, fully_connected=fully_connected, max_pool2d=max_pool2d,
                         flatten=flatten, repeat=repeat, stack=stack_, batch_norm=add_arg_scope(
                             contrib(tf).layers.batch_norm), l2_regularizer=contrib(tf).layers.l2_regularizer,
                         get_model_variables=lambda: tf.get_collection(tf.GraphKeys.MODEL_VARIABLES),
                         get_variables_to_restore=get_variables_to_restore).items():
        setattr(ns, name, staticmethod(fn))
    return ns


def slim_vgg_arg_scope(tf, feeder):
    """A slim VGG in miniature (tensorflow/models' research/slim/nets/vgg.py style): a vgg_arg_scope function
    returning a reused scope, slim.repeat'ed convolutions, a nested arg_scope putting batch norm in as the
    normalizer_fn, slim.stack'ed fully connected layers, the weight decay as regularization losses in
    get_total_loss, and get_variables_to_restore excluding the classifier, as a fine-tuning script's."""
    slim = _slim(tf)

    def vgg_arg_scope(weight_decay=5e-3):
        with slim.arg_scope([slim.conv2d, slim.fully_connected], activation_fn=tf.nn.relu,
                            weights_regularizer=slim.l2_regularizer(weight_decay)):
            with slim.arg_scope([slim.conv2d], padding="SAME") as sc:
                return sc

    images = tf.placeholder(tf.float32, [4, 8, 8, 3])
    labels = tf.placeholder(tf.int32, [4])
    with slim.arg_scope(vgg_arg_scope()):
        with tf.variable_scope("vgg_tiny"):
            net = slim.repeat(images, 2, slim.conv2d, 4, [3, 3], scope="conv1")
            net = slim.max_pool2d(net, [2, 2], scope="pool1")
            with slim.arg_scope([slim.conv2d], normalizer_fn=slim.batch_norm,
                                normalizer_params={"is_training": True, "decay": 0.9, "scale": True}):
                net = slim.conv2d(net, 6, [3, 3], scope="conv2")
            net = slim.max_pool2d(net, [2, 2], scope="pool2")
            net = slim.stack(slim.flatten(net), slim.fully_connected, [8, 6], scope="fc")
            logits = slim.fully_connected(net, 3, activation_fn=None, scope="logits")
    tf.losses.sparse_softmax_cross_entropy(labels, logits)
    total = tf.losses.get_total_loss()
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(total)
    xs, ys = data(123, ("n", (4, 8, 8, 3)), ("i", (4,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, total], {images: xs, labels: ys})
    out["model_vars"] = np.array(sorted(v.op.name for v in slim.get_model_variables()))
    out["restore"] = np.array(sorted(v.op.name for v in slim.get_variables_to_restore(exclude=["vgg_tiny/logits"])
                                     if "Momentum" not in v.op.name))
    out["n_reg"] = np.array(len(tf.losses.get_regularization_losses()))
    return _trained(tf, sess, out, names=[v.op.name for v in tf.global_variables() if "Momentum" not in v.op.name])


SCRIPTS = {f.__name__: f for f in (
    vae_distributions, gan_scoped_var_list, char_rnn_stateful, custom_rnn_cell, seq2seq_greedy_while,
    scan_rnn_and_returns, ctc_ocr_beam, feedable_iterator, monitored_session_resume, summaries_read_back,
    lr_schedules, saver_ema_restore, bn_training_flag, py_func_preprocess, gradient_accumulation, multitask_losses,
    wide_sparse_linear, image_preprocessing, gp_regression, triplet_batch_hard, dann_gradient_reversal,
    dqn_soft_update, slim_vgg_arg_scope)}


def run_script(tf, name: str, feeder: Feeder) -> dict:
    """Runs script `name` in a fresh default graph of `tf`."""
    tf.reset_default_graph()
    with tf.Graph().as_default():
        return SCRIPTS[name](tf, feeder)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_outsider_script_runs_as_in_tensorflow(tf1, name):
    check_against_tensorflow(tf1, run_script, name)
