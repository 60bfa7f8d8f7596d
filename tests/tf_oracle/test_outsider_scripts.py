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

from tfplus.unsupported import UnsupportedError


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
            # NOTE: the summaries in a run of their own: fetched with train_op, whether the histogram reads w
            # before or after the update is a race (in TensorFlow too: a ref variable's read aliases it)
            writer.add_summary(sess.run(merged, {x: xs}), step)
            sess.run(train_op, {x: xs})
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


# ---- Second sweep ---------------------------------------------------------------------------------------------

def inception_distort_color(tf, feeder):
    """inception_preprocessing.distort_color (tensorflow/models' slim): random brightness, saturation, hue and
    contrast in one of two orders, clipped to [0, 1], after convert_image_dtype from uint8 and a central crop."""
    raw = tf.placeholder(tf.uint8, [6, 6, 3])
    image = tf.image.central_crop(tf.image.convert_image_dtype(raw, tf.float32), 0.9)
    out = {}
    for ordering in (0, 1):
        x = image
        if ordering == 0:
            x = tf.image.random_brightness(x, max_delta=32. / 255.)
            x = tf.image.random_saturation(x, lower=0.5, upper=1.5)
            x = tf.image.random_hue(x, max_delta=0.2)
            x = tf.image.random_contrast(x, lower=0.5, upper=1.5)
        else:
            x = tf.image.random_saturation(x, lower=0.5, upper=1.5)
            x = tf.image.random_brightness(x, max_delta=32. / 255.)
            x = tf.image.random_contrast(x, lower=0.5, upper=1.5)
            x = tf.image.random_hue(x, max_delta=0.2)
        out[f"order{ordering}"] = tf.clip_by_value(x, 0.0, 1.0)
    hsv = tf.image.rgb_to_hsv(image)
    out["hsv"], out["rgb"] = hsv, tf.image.hsv_to_rgb(hsv)
    out["hue"] = tf.image.adjust_hue(image, -0.3)
    out["sat"] = tf.image.adjust_saturation(image, 2.0)
    (xs,) = data(124, ("i", (6, 6, 3), 256))
    xs[0, 0] = [7, 7, 7]  # a gray pixel: no hue
    with tf.Session() as sess:
        return sess.run(out, {raw: xs.astype(np.uint8), **feeder.feeds(tf)})


def wide_deep_ftrl(tf, feeder):
    """The wide & deep recipe: the wide (linear) part on one-hot crosses trained by FTRL with L1 and L2, the deep
    part on embeddings by Adagrad, two optimizers over var_lists grouped into one train op."""
    cross = tf.placeholder(tf.int32, [None])
    cat = tf.placeholder(tf.int32, [None])
    num = tf.placeholder(tf.float32, [None, 2])
    y = tf.placeholder(tf.float32, [None])
    with tf.variable_scope("wide"):
        w = tf.get_variable("w", [12, 1], initializer=tf.zeros_initializer())
        wide = tf.squeeze(tf.matmul(tf.one_hot(cross, 12), w), 1)
    with tf.variable_scope("deep"):
        emb = tf.get_variable("emb", [5, 3], initializer=tf.truncated_normal_initializer(stddev=0.5))
        h = tf.layers.dense(tf.concat([tf.nn.embedding_lookup(emb, cat), num], 1), 4, tf.nn.relu)
        deep = tf.squeeze(tf.layers.dense(h, 1), 1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=wide + deep))
    wide_opt = tf.train.FtrlOptimizer(0.2, l1_regularization_strength=0.01, l2_regularization_strength=0.1)
    deep_opt = tf.train.AdagradOptimizer(0.1)
    train_op = tf.group(wide_opt.minimize(loss, var_list=tf.trainable_variables("wide")),
                        deep_opt.minimize(loss, var_list=tf.trainable_variables("deep")))
    cs, ks, ns = data(125, ("i", (8,), 12), ("i", (8,), 5), ("n", (8, 2)))
    feed = {cross: cs, cat: ks, num: ns, y: (cs % 2).astype(np.float32)}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], feed, steps=4)
    return _trained(tf, sess, out)


def raw_rnn_seq2seq(tf, feeder):
    """ematvey/tensorflow-seq2seq-tutorials' model 2: an LSTM encoder by dynamic_rnn (time-major) and a decoder by
    tf.nn.raw_rnn whose loop_fn feeds back the embedding of the previous step's argmax, the decoder's outputs read
    from the emit TensorArray and projected to the vocabulary."""
    vocab, units, batch, src_len = 6, 5, 2, 4
    encoder_inputs = tf.placeholder(tf.int32, [src_len, batch])
    decoder_targets = tf.placeholder(tf.int32, [src_len + 1, batch])
    embeddings = tf.Variable(tf.random_uniform([vocab, units], -1.0, 1.0))
    encoder_cell = tf.nn.rnn_cell.LSTMCell(units)
    _, encoder_state = tf.nn.dynamic_rnn(encoder_cell, tf.nn.embedding_lookup(embeddings, encoder_inputs),
                                         dtype=tf.float32, time_major=True, scope="encoder")
    decoder_cell = tf.nn.rnn_cell.LSTMCell(units)
    decoder_lengths = tf.fill([batch], src_len + 1)
    W = tf.Variable(tf.random_uniform([units, vocab], -1, 1))
    b = tf.Variable(tf.zeros([vocab]))
    eos_step = tf.nn.embedding_lookup(embeddings, tf.ones([batch], tf.int32))
    pad_step = tf.nn.embedding_lookup(embeddings, tf.zeros([batch], tf.int32))

    def loop_fn(time, previous_output, previous_state, previous_loop_state):
        if previous_state is None:  # the initial call
            return tf.equal(0, decoder_lengths), eos_step, encoder_state, None, None
        finished = time >= decoder_lengths
        prediction = tf.argmax(tf.add(tf.matmul(previous_output, W), b), axis=1)
        next_input = tf.cond(tf.reduce_all(finished), lambda: pad_step,
                             lambda: tf.nn.embedding_lookup(embeddings, prediction))
        return finished, next_input, previous_state, previous_output, None

    outputs_ta, final_state, _ = tf.nn.raw_rnn(decoder_cell, loop_fn)
    outputs = outputs_ta.stack()
    max_time, batch_size, dim = tf.unstack(tf.shape(outputs))
    logits = tf.reshape(tf.matmul(tf.reshape(outputs, (-1, dim)), W) + b, (max_time, batch_size, vocab))
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(
        labels=tf.one_hot(decoder_targets, vocab), logits=logits))
    train_op = tf.train.AdamOptimizer(0.05).minimize(loss)
    src, tgt = data(126, ("i", (src_len, batch), vocab), ("i", (src_len + 1, batch), vocab))
    sess = _session_run(tf, feeder)
    feed = {encoder_inputs: src, decoder_targets: tgt}
    out = _steps(tf, sess, [train_op, loss], feed)
    out["predicted"] = sess.run(tf.argmax(logits, 2), feed)
    out["final_c"] = sess.run(final_state.c, feed)
    return _trained(tf, sess, out)


def bn_moments_ema_cond(tf, feeder):
    """The batch norm of the 2016 StackOverflow answer every early script copied: tf.nn.moments over the batch
    and space, an ExponentialMovingAverage applied inside a tf.cond on a phase_train placeholder (identity'd
    under its control dependency), the averages read in the other branch, tf.nn.batch_normalization."""
    def batch_norm(x, n_out, phase_train):
        with tf.variable_scope("bn"):
            beta = tf.Variable(tf.constant(0.0, shape=[n_out]), name="beta", trainable=True)
            gamma = tf.Variable(tf.constant(1.0, shape=[n_out]), name="gamma", trainable=True)
            batch_mean, batch_var = tf.nn.moments(x, [0, 1, 2], name="moments")
            ema = tf.train.ExponentialMovingAverage(decay=0.5)

            def mean_var_with_update():
                ema_apply_op = ema.apply([batch_mean, batch_var])
                with tf.control_dependencies([ema_apply_op]):
                    return tf.identity(batch_mean), tf.identity(batch_var)
            mean, var = tf.cond(phase_train, mean_var_with_update,
                                lambda: (ema.average(batch_mean), ema.average(batch_var)))
            return tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-3)

    images = tf.placeholder(tf.float32, [None, 5, 5, 2])
    labels = tf.placeholder(tf.int32, [None])
    phase_train = tf.placeholder(tf.bool, name="phase_train")
    w = tf.Variable(tf.truncated_normal([3, 3, 2, 4], stddev=0.3))
    h = tf.nn.relu(batch_norm(tf.nn.conv2d(images, w, [1, 1, 1, 1], "SAME"), 4, phase_train))
    logits = tf.layers.dense(tf.reshape(h, [-1, 5 * 5 * 4]), 3)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    xs, ys = data(127, ("n", (6, 5, 5, 2)), ("i", (6,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {images: xs, labels: ys, phase_train: True})
    out["eval"] = sess.run(loss, {images: xs, labels: ys, phase_train: False})
    return _trained(tf, sess, out, names=[v.op.name for v in tf.global_variables()])


def attention_pooling_classifier(tf, feeder):
    """A 2017 review classifier: a time-major GRU by dynamic_rnn with sequence lengths, attention pooling by
    tf.tensordot with a context vector, padded steps masked with tf.sequence_mask and tf.where before the
    softmax, dropout on the pooled vector with a keep_prob placeholder, and L2 on the weights by name."""
    ids = tf.placeholder(tf.int32, [5, None])  # time, batch
    lengths = tf.placeholder(tf.int32, [None])
    labels = tf.placeholder(tf.int32, [None])
    keep_prob = tf.placeholder_with_default(1.0, [])
    emb = tf.get_variable("emb", [7, 4])
    outputs, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(6), tf.nn.embedding_lookup(emb, ids),
                                   sequence_length=lengths, dtype=tf.float32, time_major=True)
    outputs = tf.transpose(outputs, [1, 0, 2])
    u = tf.tanh(tf.layers.dense(outputs, 6, name="att"))
    context = tf.get_variable("context", [6])
    scores = tf.tensordot(u, context, axes=1)
    mask = tf.sequence_mask(lengths, 5)
    scores = tf.where(mask, scores, tf.fill(tf.shape(scores), -1e9))
    alphas = tf.nn.softmax(scores, axis=1)
    pooled = tf.reduce_sum(outputs * tf.expand_dims(alphas, -1), 1)
    logits = tf.layers.dense(tf.nn.dropout(pooled, keep_prob), 2, name="out")
    l2 = tf.add_n([tf.nn.l2_loss(v) for v in tf.trainable_variables() if "kernel" in v.name])
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)) + 1e-3 * l2
    train_op = tf.train.AdamOptimizer(0.02).minimize(loss)
    xs, ys = data(128, ("i", (5, 8), 7), ("i", (8,), 2))
    sess = _session_run(tf, feeder)
    feed = {ids: xs, lengths: [5, 3, 1, 4, 5, 2, 2, 3], labels: ys}
    out = _steps(tf, sess, [train_op, loss], {keep_prob: 0.7, **feed, **feeder.feeds(tf)})
    out["alphas"] = sess.run(alphas, feed)
    return _trained(tf, sess, out)


def replay_memory_scatter(tf, feeder):
    """A replay memory and an episodic memory held in variables on the graph (2017 DQN and memory-network code):
    tf.scatter_update writes transitions at a cursor, tf.scatter_add accumulates visit counts, the batch is
    tf.gather'ed back, and a content-addressed read (cosine similarity, softmax) updates the memory by
    Variable.scatter_sub of the usage."""
    memory = tf.Variable(tf.zeros([6, 3]), trainable=False)
    counts = tf.Variable(tf.zeros([6]), trainable=False)
    cursor = tf.placeholder(tf.int32, [2])
    items = tf.placeholder(tf.float32, [2, 3])
    write = tf.group(tf.scatter_update(memory, cursor, items), tf.scatter_add(counts, cursor, tf.ones([2])))
    query = tf.placeholder(tf.float32, [3])
    keys = tf.nn.l2_normalize(memory, 1)
    weights = tf.nn.softmax(tf.squeeze(tf.matmul(keys, tf.nn.l2_normalize(query, 0)[:, None]), 1) * 5.0)
    read = tf.reduce_sum(memory * weights[:, None], 0)
    top = tf.nn.top_k(weights, 2).indices
    decay = memory.scatter_sub(tf.IndexedSlices(0.1 * tf.gather(memory, top), top))
    batch = tf.gather(memory, tf.constant([0, 3, 5]))
    rows = data(129, ("n", (6, 3)))[0]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for k in range(0, 6, 2):
            sess.run(write, {cursor: [k, (k + 3) % 6], items: rows[k:k + 2]})
        out = {"read": sess.run(read, {query: rows[1]}), "decayed": sess.run(decay, {query: rows[1]})}
        out["batch"], out["counts"] = sess.run([batch, counts])
        return out


def sharded_embedding_div(tf, feeder):
    """A large vocabulary's embedding split in shards (the distributed word2vec's), read by embedding_lookup with
    partition_strategy="div" and max_norm, trained by a full softmax, with tf.nn.l2_normalize'd nearest words
    by tf.nn.top_k."""
    shards = [tf.get_variable(f"emb_{i}", [n, 4], initializer=tf.truncated_normal_initializer())
              for i, n in enumerate((4, 3, 3))]
    ids = tf.placeholder(tf.int32, [None])
    targets = tf.placeholder(tf.int32, [None])
    embedded = tf.nn.embedding_lookup(shards, ids, partition_strategy="div", max_norm=1.5)
    logits = tf.layers.dense(embedded, 10)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits))
    train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    normalized = tf.nn.l2_normalize(tf.concat(shards, 0), 1)
    sim = tf.matmul(tf.gather(normalized, [1, 7]), normalized, transpose_b=True)
    nearest = tf.nn.top_k(sim, 3).indices
    xs, ts = data(130, ("i", (8,), 10), ("i", (8,), 10))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {ids: xs, targets: ts})
    out["nearest"] = sess.run(nearest)
    return _trained(tf, sess, out)


def clipped_grads_summaries(tf, feeder):
    """A highway MLP's training loop as the 2017 repos wrote it: compute_gradients, the None gradients dropped,
    each clipped by tf.clip_by_norm, a histogram summary per gradient named by the variable's name (its ':0'
    sanitized by TF), linear_cosine_decay of the rate, apply_gradients with a global step."""
    x = tf.placeholder(tf.float32, [None, 6])
    y = tf.placeholder(tf.float32, [None, 1])
    h = x
    for i in range(2):
        with tf.variable_scope(f"highway_{i}"):
            transform = tf.layers.dense(h, 6, tf.nn.selu, name="transform")
            gate = tf.layers.dense(h, 6, tf.nn.sigmoid, bias_initializer=tf.constant_initializer(-1.0), name="gate")
            h = gate * transform + (1.0 - gate) * h
    unused = tf.get_variable("unused", [2])  # no gradient: dropped from the update, as the repos' filter does
    pred = tf.layers.dense(h, 1)
    loss = tf.losses.mean_squared_error(y, pred)
    step = tf.train.get_or_create_global_step()
    lr = tf.train.linear_cosine_decay(0.05, step, 5, num_periods=0.5, alpha=0.1, beta=0.01)
    opt = tf.train.AdamOptimizer(lr, epsilon=1e-4)
    grads = [(tf.clip_by_norm(g, 0.5), v) for g, v in opt.compute_gradients(loss) if g is not None]
    for g, v in grads:
        tf.summary.histogram(v.name, g)
    merged = tf.summary.merge_all()
    train_op = opt.apply_gradients(grads, global_step=step)
    xs, ys = data(131, ("n", (8, 6)), ("n", (8, 1)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss, lr], {x: xs, y: ys}, steps=4)
    summary = tf.Summary()
    summary.ParseFromString(sess.run(merged, {x: xs, y: ys}))
    out["tags"] = np.array([v.tag for v in summary.value])
    out["n_grads"] = np.array(len(grads))
    return _trained(tf, sess, out, names=[v.op.name for v in tf.trainable_variables() if v is not unused])


def char_cnn_conv1d(tf, feeder):
    """Character-level CNN text classification (Zhang et al. 2015, as the 2017 TF repos built it): one-hot
    characters, tf.layers.Conv1D objects, max_pooling1d, tf.layers.average_pooling1d, a global max by
    reduce_max, and tf.layers.Dense objects with SELU."""
    chars = tf.placeholder(tf.int32, [None, 12])
    labels = tf.placeholder(tf.int32, [None])
    x = tf.one_hot(chars, 6)
    conv1 = tf.layers.Conv1D(5, 3, activation=tf.nn.relu, name="conv1")
    conv2 = tf.layers.Conv1D(5, 3, padding="same", activation=tf.nn.relu, name="conv2")
    h = tf.layers.max_pooling1d(conv1(x), 2, 2)
    h = tf.layers.average_pooling1d(conv2(h), 2, 1)
    pooled = tf.reduce_max(h, axis=1)
    fc = tf.layers.Dense(8, activation=tf.nn.selu, name="fc")
    logits = tf.layers.Dense(3, name="logits")(fc(pooled))
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True).minimize(loss)
    cs, ys = data(132, ("i", (4, 12), 6), ("i", (4,), 3))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {chars: cs, labels: ys})
    out["kernel_shape"] = np.array(conv1.kernel.shape.as_list())
    return _trained(tf, sess, out)


# ---- Third sweep ----------------------------------------------------------------------------------------------

def deprecated_keywords(tf, feeder):
    """A TF 1.0-1.4 era script's spellings, still accepted by TF1's last releases: keep_dims, reduction_indices,
    dim= on softmax, log_softmax, l2_normalize, expand_dims and the cross-entropy, dimension= on argmax,
    squeeze_dims, tf.nn.moments(keep_dims=), tf.count_nonzero(keep_dims=) and tf.reduce_logsumexp."""
    x = tf.placeholder(tf.float32, [None, 3, 4])
    labels = tf.placeholder(tf.float32, [None, 4])
    h = tf.layers.dense(x, 4)
    pooled = tf.reduce_mean(h, reduction_indices=[1])
    total = tf.reduce_sum(h, 1, keep_dims=True)
    probs = tf.nn.softmax(pooled, dim=-1)
    logp = tf.nn.log_softmax(pooled, dim=1)
    unit = tf.nn.l2_normalize(pooled, dim=1)
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=pooled, dim=-1))
    mean, var = tf.nn.moments(h, axes=[1], keep_dims=True)
    best = tf.argmax(pooled, dimension=1)
    squeezed = tf.squeeze(tf.expand_dims(pooled, dim=1), squeeze_dims=[1])
    nonzero = tf.count_nonzero(tf.nn.relu(h), axis=2, keep_dims=True)
    lse = tf.reduce_logsumexp(h, axis=2, keep_dims=True)
    train_op = tf.train.GradientDescentOptimizer(0.2).minimize(loss)
    xs, ys = data(133, ("n", (4, 3, 4)), ("i", (4,), 4))
    sess = _session_run(tf, feeder)
    feed = {x: xs, labels: one_hot_np(ys, 4)}
    out = _steps(tf, sess, [train_op, loss], feed)
    for k, t in dict(total=total, probs=probs, logp=logp, unit=unit, mean=mean, var=var, best=best,
                     squeezed=squeezed, nonzero=nonzero, lse=lse).items():
        out[k] = sess.run(t, feed)
    return _trained(tf, sess, out)


def feature_columns_input_layer(tf, feeder):
    """A 2018 census model without Estimators: tf.feature_column's numeric, bucketized and identity categorical
    columns (ids padded with -1), indicator and embedding columns, tf.feature_column.input_layer on a dict of
    placeholders, and a DNN on top."""
    fc = tf.feature_column
    age = fc.numeric_column("age")
    columns = [age, fc.bucketized_column(age, boundaries=[25.0, 40.0, 60.0]),
               fc.indicator_column(fc.categorical_column_with_identity("color", num_buckets=3)),
               fc.embedding_column(fc.categorical_column_with_identity("shop", num_buckets=5), dimension=3)]
    features = {"age": tf.placeholder(tf.float32, [None, 1]), "color": tf.placeholder(tf.int64, [None, 2]),
                "shop": tf.placeholder(tf.int64, [None, 2])}
    net = fc.input_layer(features, columns)
    logits = tf.layers.dense(tf.layers.dense(net, 6, tf.nn.relu), 1)
    y = tf.placeholder(tf.float32, [None, 1])
    loss = tf.losses.sigmoid_cross_entropy(y, logits)
    # NOTE: not Adam: its first step is lr * sign(g), which turns a gradient of rounding noise (1e-11 here, 0 in
    # TensorFlow) into a full step
    train_op = tf.train.AdagradOptimizer(0.5).minimize(loss)
    feed = {features["age"]: [[22.0], [41.0], [67.0], [33.0]],
            features["color"]: [[0, -1], [2, 2], [1, 0], [-1, -1]],
            features["shop"]: [[0, -1], [4, 1], [2, 2], [3, 0]], y: [[0.0], [1.0], [1.0], [0.0]]}
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], feed)
    out["net"] = sess.run(net, feed)
    return _trained(tf, sess, out)


def transfer_saver_mapping(tf, feeder):
    """Transfer learning by checkpoint names (2017 fine-tuning scripts): a model trained in scope "pretrained"
    and saved; tf.train.list_variables and a NewCheckpointReader inspect it; a new graph builds the same layers
    in scope "finetune" plus a new head, and a Saver with a {checkpoint name: variable} dict restores the shared
    layers before training the head alone (var_list)."""
    xs, ys = data(134, ("n", (6, 4)), ("i", (6,), 3))
    with tempfile.TemporaryDirectory() as d:
        with tf.Graph().as_default():
            x = tf.placeholder(tf.float32, [None, 4])
            with tf.variable_scope("pretrained"):
                feats = tf.layers.dense(x, 5, tf.nn.relu, name="body")
                logits = tf.layers.dense(feats, 3, name="head")
            loss = tf.losses.sparse_softmax_cross_entropy(ys, logits)
            train_op = tf.train.GradientDescentOptimizer(0.3).minimize(loss)
            sess = _session_run(tf, feeder)
            for _ in range(2):
                sess.run(train_op, {x: xs})
            path = tf.train.Saver().save(sess, os.path.join(d, "pre.ckpt"))
            want_feats = sess.run(feats, {x: xs})
            sess.close()
        listed = tf.train.list_variables(path)
        shapes = tf.train.NewCheckpointReader(path).get_variable_to_shape_map()
        with tf.Graph().as_default():
            x = tf.placeholder(tf.float32, [None, 4])
            with tf.variable_scope("finetune"):
                feats = tf.layers.dense(x, 5, tf.nn.relu, name="body")
                logits = tf.layers.dense(feats, 2, kernel_initializer=tf.zeros_initializer(), name="new_head")
            body = tf.trainable_variables("finetune/body")
            restorer = tf.train.Saver({v.op.name.replace("finetune", "pretrained"): v for v in body})
            loss = tf.losses.sparse_softmax_cross_entropy(ys % 2, logits)
            train_op = tf.train.AdamOptimizer(0.05).minimize(loss, var_list=tf.trainable_variables("finetune/new_head"))
            sess = _session_run(tf, feeder)
            restorer.restore(sess, path)
            out = _steps(tf, sess, [train_op, loss], {x: xs})
            out["feats"], out["want_feats"] = sess.run(feats, {x: xs}), want_feats
            out["listed"] = np.array([f"{n}:{s}" for n, s in listed])
            out["shapes"] = np.array(sorted(f"{k}:{v}" for k, v in shapes.items()))
            return _trained(tf, sess, out)


def dynamic_batch_generator(tf, feeder):
    """A DCGAN generator for any batch size: conv2d_transpose's output_shape built by tf.stack from
    tf.shape(z)[0], a tf.layers.conv2d_transpose, a pixel shuffle by tf.depth_to_space and a bilinear resize, then
    a discriminator by strided convolutions; trained at one batch size, run at another."""
    z = tf.placeholder(tf.float32, [None, 6])
    batch = tf.shape(z)[0]
    h = tf.reshape(tf.layers.dense(z, 2 * 2 * 8), [-1, 2, 2, 8])
    w = tf.get_variable("deconv_w", [3, 3, 4, 8], initializer=tf.random_normal_initializer(stddev=0.2))
    h = tf.nn.relu(tf.nn.conv2d_transpose(h, w, tf.stack([batch, 4, 4, 4]), [1, 2, 2, 1], padding="SAME"))
    h = tf.layers.conv2d_transpose(h, 8, 3, strides=2, padding="same", activation=tf.nn.relu)
    h = tf.depth_to_space(h, 2)  # [batch, 16, 16, 2]
    images = tf.tanh(tf.image.resize_bilinear(h, [12, 12]))
    d = tf.layers.conv2d(images, 4, 4, strides=2, padding="same", activation=tf.nn.leaky_relu)
    d = tf.layers.conv2d(d, 4, 4, strides=2, padding="valid")
    score = tf.reduce_mean(d, [1, 2, 3])
    loss = tf.reduce_mean(tf.nn.softplus(-score))
    train_op = tf.train.AdamOptimizer(1e-3, beta1=0.5).minimize(loss)
    zs, zs_other = data(135, ("n", (4, 6)), ("n", (3, 6)))
    sess = _session_run(tf, feeder)
    out = _steps(tf, sess, [train_op, loss], {z: zs})
    out["images"] = sess.run(images, {z: zs_other})
    return _trained(tf, sess, out)


def loops_and_cases(tf, feeder):
    """Control flow of 2018 RL and meta-learning code: tf.while_loop with maximum_iterations and a namedtuple
    state, tf.case over a step counter, tf.map_fn returning a tuple (dtype given), tf.foldr, and gradients through
    the loop into the weights."""
    import collections
    State = collections.namedtuple("State", ["h", "acc"])
    x = tf.placeholder(tf.float32, [3, 4])
    mode = tf.placeholder(tf.int32, [])
    w = tf.Variable(tf.truncated_normal([4, 4], stddev=0.4))

    def body(i, s):
        h = tf.tanh(tf.matmul(s.h, w) + x)
        return i + 1, State(h, s.acc + tf.reduce_sum(h))
    _, final = tf.while_loop(lambda i, s: s.acc < 100.0, body, [tf.constant(0), State(x, tf.constant(0.0))],
                             maximum_iterations=3)
    scale = tf.case([(tf.equal(mode, 0), lambda: tf.constant(0.5)), (tf.equal(mode, 1), lambda: tf.constant(2.0))],
                    default=lambda: tf.constant(1.0), exclusive=True)
    norms, maxes = tf.map_fn(lambda row: (tf.norm(row), tf.reduce_max(row)), final.h, dtype=(tf.float32, tf.float32))
    folded = tf.foldr(lambda acc, v: acc * 0.5 + v, norms, initializer=tf.constant(0.0))
    loss = scale * (tf.reduce_sum(tf.square(final.h)) + folded)
    train_op = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
    (xs,) = data(136, ("n", (3, 4)))
    sess = _session_run(tf, feeder)
    out = {"loss": [sess.run([train_op, loss], {x: xs, mode: m})[1] for m in (0, 1, 2)]}
    out["maxes"], out["acc"] = sess.run([maxes, final.acc], {x: xs, mode: 2})
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


SCRIPTS = {f.__name__: f for f in (
    vae_distributions, gan_scoped_var_list, char_rnn_stateful, custom_rnn_cell, seq2seq_greedy_while,
    scan_rnn_and_returns, ctc_ocr_beam, feedable_iterator, monitored_session_resume, summaries_read_back,
    lr_schedules, saver_ema_restore, bn_training_flag, py_func_preprocess, gradient_accumulation, multitask_losses,
    wide_sparse_linear, image_preprocessing, gp_regression, triplet_batch_hard, dann_gradient_reversal,
    dqn_soft_update, slim_vgg_arg_scope, inception_distort_color, wide_deep_ftrl, raw_rnn_seq2seq,
    bn_moments_ema_cond, attention_pooling_classifier, replay_memory_scatter, sharded_embedding_div,
    clipped_grads_summaries, char_cnn_conv1d, deprecated_keywords, feature_columns_input_layer,
    transfer_saver_mapping, dynamic_batch_generator, loops_and_cases)}


def run_script(tf, name: str, feeder: Feeder) -> dict:
    """Runs script `name` in a fresh default graph of `tf`."""
    tf.reset_default_graph()
    with tf.Graph().as_default():
        return SCRIPTS[name](tf, feeder)


_REFUSED = {"raw_rnn_seq2seq": "tf.nn.raw_rnn is not implemented: its emit TensorArray grows inside the loop, and "
                              "tfplus's while_loop gradient needs loop variables of fixed shapes"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(raises=UnsupportedError, strict=True,
                                                                          reason=_REFUSED[n]))
                                  if n in _REFUSED else n for n in sorted(SCRIPTS)])
def test_outsider_script_runs_as_in_tensorflow(tf1, name):
    check_against_tensorflow(tf1, run_script, name)


def test_slots_and_moving_averages_are_named_in_their_variable_scope(tf1):
    """An optimizer's slots and a moving average's shadows made inside a variable scope take its prefix, as TF1's
    slot_creator names them (checkpoints are read by these names); a name scope does not prefix them."""
    import tfplus

    def names(tf):
        with tf.Graph().as_default():
            w = tf.Variable(tf.zeros([2]), name="w")
            x = tf.reduce_sum(w * 2.0, name="x")
            with tf.variable_scope("train"):
                tf.train.AdamOptimizer(0.1).minimize(tf.square(x))
                tf.train.ExponentialMovingAverage(0.9).apply([w, x])
            with tf.name_scope("ns"):
                tf.train.ExponentialMovingAverage(0.9, name="E2").apply([w])
            return sorted(v.op.name for v in tf.global_variables())
    assert names(tfplus) == names(tf1)


def test_custom_gradient_of_a_function_reading_a_variable():
    """A @tf.custom_gradient function that reads a variable: its grad_fn gets `variables` and gives their
    gradients (TensorFlow's graph mode does this only for resource variables, so no oracle here: the rule is
    deliberately not the true gradient, and tf.gradients must return the rule's values); without `variables`
    in its signature the call is refused, naming the variable."""
    import tfplus as tf
    with tf.Graph().as_default():
        w = tf.Variable([2.0, 3.0], name="w")
        x = tf.constant([5.0, 7.0])

        @tf.custom_gradient
        def scaled(x):
            def grad(dy, variables=None):
                return dy * 10.0, [dy * x]
            return x * w, grad

        @tf.custom_gradient
        def forgets_variables(x):
            return x * w, lambda dy: dy
        dx, dw = tf.gradients(tf.reduce_sum(scaled(x)), [x, w])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(dx), [10.0, 10.0])
            np.testing.assert_array_equal(sess.run(dw), [5.0, 7.0])
        with pytest.raises(TypeError, match=r"reads the variables \['w'\].*keyword argument 'variables'"):
            forgets_variables(x)
