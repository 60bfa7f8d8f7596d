"""TF1's API surface against TensorFlow: tf.layers (variable names and values), tf.losses (every reduction),
tf.nn composites and clipping (values and gradients), ExponentialMovingAverage, get_variable with a Tensor
initializer, softmax cross-entropy fed int labels; and, where TensorFlow 2 no longer has the TF1 module, against
TF1's documented behaviour: flags, logging, gfile, contrib.layers, the monitored session and its hooks."""
from __future__ import annotations

import logging as std_logging

import numpy as np
import pytest

import tfplus as tf

RNG = np.random.default_rng(5)


def _run_both(tf1, build, feeds_np, copy_variables=True):
    """Builds `build(lib, placeholders)` in both libraries; our variables get TensorFlow's initial values.
    Returns (ours, theirs, our variable names, their variable names)."""
    results, names = [], []
    tf_values = None
    for lib in (tf1, tf):
        g = lib.Graph()
        with g.as_default():
            phs = [lib.placeholder(lib.as_dtype(a.dtype), a.shape) for a in feeds_np]
            outs = build(lib, phs)
            variables = lib.global_variables()
            names.append([v.op.name for v in variables])
            with lib.Session(graph=g) as sess:
                sess.run(lib.global_variables_initializer())
                if lib is tf1:
                    tf_values = sess.run(variables)
                elif copy_variables:
                    for v, value in zip(variables, tf_values):
                        v.load(value, sess)
                results.append(sess.run(outs, dict(zip(phs, feeds_np))))
    return results[1], results[0], names[1], names[0]


def _close(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


# -- tf.layers -----------------------------------------------------------------------------------------------
def test_layers_have_tf1_variable_names_and_values(tf1):
    x = RNG.standard_normal((2, 6, 6, 3)).astype(np.float32)

    def build(t, phs):
        h = t.layers.conv2d(phs[0], 4, 3, padding="same", activation=t.nn.relu)
        h = t.layers.max_pooling2d(h, 2, 2)
        h = t.layers.conv2d(h, 5, (2, 2), strides=(1, 1), padding="valid")
        h = t.layers.average_pooling2d(h, 2, 1, padding="same")
        with t.variable_scope("head"):
            f = t.layers.flatten(h)
            h = t.layers.dense(f, 7, activation=t.tanh)
            h = t.layers.dropout(h, rate=0.5, training=False)
            out = t.layers.dense(h, 3, use_bias=False, name="logits")
        return [out, t.gradients(t.reduce_sum(out * out), t.trainable_variables())]

    mine, theirs, my_names, their_names = _run_both(tf1, build, [x])
    assert my_names == their_names == ["conv2d/kernel", "conv2d/bias", "conv2d_1/kernel", "conv2d_1/bias",
                                       "head/dense/kernel", "head/dense/bias", "head/logits/kernel"]
    _close([mine[0]], [theirs[0]])
    _close(mine[1], theirs[1], rtol=1e-4, atol=1e-5)


def test_layers_dropout_with_a_training_tensor():
    x = np.ones((50, 40), np.float32)
    with tf.Graph().as_default():
        training = tf.placeholder(tf.bool, [])
        y = tf.layers.dropout(tf.constant(x), rate=0.5, training=training)
        with tf.Session() as sess:
            off, on = sess.run(y, {training: False}), sess.run(y, {training: True})
    np.testing.assert_array_equal(off, x)
    assert set(np.unique(on)) <= {0.0, 2.0} and 0.3 < (on == 0).mean() < 0.7


# -- tf.losses -----------------------------------------------------------------------------------------------
def _column(w):
    """Per-example weights from the [n, 1] weights (a number stays a number)."""
    return w if isinstance(w, float) else w[:, 0]


LOSS_CASES = {
    "mean_squared_error": lambda t, a, b, w, r: t.losses.mean_squared_error(a, b, weights=w, reduction=r),
    "absolute_difference": lambda t, a, b, w, r: t.losses.absolute_difference(a, b, weights=w, reduction=r),
    "huber_loss": lambda t, a, b, w, r: t.losses.huber_loss(a, 3 * b, weights=w, delta=1.5, reduction=r),
    "sigmoid_cross_entropy": lambda t, a, b, w, r: t.losses.sigmoid_cross_entropy(
        t.cast(a > 0, t.float32), b, weights=w, label_smoothing=0.1, reduction=r),
    "softmax_cross_entropy": lambda t, a, b, w, r: t.losses.softmax_cross_entropy(
        t.one_hot(t.argmax(a, 1), 4), b, weights=_column(w), label_smoothing=0.2, reduction=r),
    "sparse_softmax_cross_entropy": lambda t, a, b, w, r: t.losses.sparse_softmax_cross_entropy(
        t.cast(t.argmax(a, 1), t.int32), b, weights=_column(w), reduction=r),
}
REDUCTIONS = ["NONE", "SUM", "MEAN", "SUM_OVER_BATCH_SIZE", "SUM_BY_NONZERO_WEIGHTS"]


@pytest.mark.parametrize("loss", list(LOSS_CASES))
def test_losses_match_tensorflow_for_every_reduction(loss, tf1):
    a = RNG.standard_normal((5, 4)).astype(np.float32)
    b = RNG.standard_normal((5, 4)).astype(np.float32)
    w = np.array([[1.0], [0.0], [2.0], [0.5], [0.0]], np.float32)

    def build(t, phs):
        outs = [LOSS_CASES[loss](t, phs[0], phs[1], phs[2], getattr(t.losses.Reduction, r)) for r in REDUCTIONS]
        outs.append(LOSS_CASES[loss](t, phs[0], phs[1], 1.0, t.losses.Reduction.SUM_BY_NONZERO_WEIGHTS))
        return outs + [t.constant(len(t.losses.get_losses())), t.gradients(outs[-1], [phs[1]])[0]]

    mine, theirs, _, _ = _run_both(tf1, build, [a, b, w])
    _close(mine, theirs)


def test_total_and_regularization_losses_match_tensorflow(tf1):
    x = RNG.standard_normal((3, 4)).astype(np.float32)

    def build(t, phs):
        def reg(v):
            return 0.1 * t.nn.l2_loss(v)
        h = t.layers.dense(phs[0], 5, kernel_regularizer=reg)
        t.losses.mean_squared_error(t.zeros_like(h), h)
        return [t.losses.get_regularization_loss(), t.losses.get_total_loss(),
                t.losses.get_total_loss(add_regularization_losses=False), t.constant(len(t.losses.get_losses()))]

    mine, theirs, _, _ = _run_both(tf1, build, [x])
    _close(mine[:3], theirs[:3])
    assert mine[3] == theirs[3] == 1


# -- tf.nn composites, clipping ------------------------------------------------------------------------------
def test_nn_composites_and_clipping_match_tensorflow(tf1):
    x = RNG.standard_normal((4, 3))
    z = RNG.standard_normal((4, 3)) * 5
    labels = (RNG.random((4, 3)) < 0.5).astype(np.float64)

    def build(t, phs):
        x, z, y = phs
        mean, var = t.nn.moments(x, [0])
        outs = [t.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z),
                t.nn.batch_normalization(x, mean, var, t.constant([0.1, 0.2, 0.3], t.float64),
                                         t.constant([1.5, 1.0, 0.5], t.float64), 1e-3),
                t.nn.batch_normalization(x, mean, var, None, None, 1e-3),
                t.clip_by_norm(z, 2.0), t.clip_by_norm(z, 2.0, axes=[1]), t.clip_by_value(z, -1.0, 1.0),
                t.global_norm([x, None, z])]
        clipped, norm = t.clip_by_global_norm([x, None, z], 3.0)
        outs += [clipped[0], clipped[2], norm]
        loss = t.add_n([t.reduce_sum(o * o) for o in outs])
        return outs + t.gradients(loss, [x, z])

    mine, theirs, _, _ = _run_both(tf1, build, [x, z, labels])
    _close(mine, theirs, rtol=1e-10, atol=1e-12)


def test_clip_by_norm_of_zeros_has_a_zero_gradient():
    with tf.Graph().as_default():
        x = tf.zeros([3])
        (g,) = tf.gradients(tf.reduce_sum(tf.clip_by_norm(x, 1.0)), [x])
        with tf.Session() as sess:
            assert np.all(np.isfinite(sess.run(g)))


def test_softmax_cross_entropy_fed_int_labels_is_tf1s(tf1):
    z = RNG.standard_normal((3, 4)).astype(np.float32)
    onehot = np.eye(4, dtype=np.int32)[[0, 3, 1]]

    def build(t, phs):
        return [t.nn.softmax_cross_entropy_with_logits(labels=phs[1], logits=phs[0]),
                t.nn.softmax_cross_entropy_with_logits_v2(labels=phs[1], logits=phs[0]),
                t.losses.softmax_cross_entropy(phs[1], phs[0])]

    mine, theirs, _, _ = _run_both(tf1, build, [z, onehot])
    _close(mine, theirs)


def test_get_variable_takes_shape_and_dtype_from_a_tensor_initializer(tf1):
    w0 = RNG.standard_normal((2, 3))

    def build(t, phs):
        w = t.get_variable("w", initializer=t.constant(w0))
        return [w, t.shape(w)]

    mine, theirs, names, _ = _run_both(tf1, build, [], copy_variables=False)
    _close(mine, theirs, rtol=0, atol=0)
    assert mine[0].dtype == np.float64 and names == ["w"]


def test_exponential_moving_average_matches_tensorflow(tf1):
    def run(t):
        g = t.Graph()
        with g.as_default():
            w = t.Variable(np.array([1.0, -2.0], np.float32), name="w")
            step = t.Variable(0, name="step", trainable=False)
            ema = t.train.ExponentialMovingAverage(0.75, num_updates=step)
            update = ema.apply([w])
            move = t.group(w.assign_add([0.5, 1.0]), step.assign_add(1))
            with t.Session(graph=g) as sess:
                sess.run(t.variables_initializer([w, step]))  # TF's shadow reads w's initialized value
                sess.run(t.global_variables_initializer())
                for _ in range(4):
                    sess.run(move)
                    sess.run(update)
                return sess.run(ema.average(w)), ema.average_name(w), sorted(ema.variables_to_restore())

    mine, theirs = run(tf), run(tf1)
    np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-6)
    assert mine[1:] == theirs[1:]


def test_interactive_session_initialize_all_variables_and_graph_def():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(3.0)
        sess = tf.InteractiveSession()
        tf.initialize_all_variables().run()
        assert (v * 2.0).eval() == 6.0
        assert {n.name for n in sess.graph_def.node} >= {"Variable", "init"}
        sess.close()
        assert tf.get_default_session() is None  # as TF1's (test_get_default_session_is_none_without_one)


def test_get_default_session_is_none_without_one():
    import tensorflow as real_tf
    with real_tf.Graph().as_default():
        assert real_tf.compat.v1.get_default_session() is None
    with tf.Graph().as_default():
        t = tf.constant(1.0)
        assert tf.get_default_session() is None
        with pytest.raises(ValueError, match=r"Cannot evaluate tensor using `eval\(\)`: no default session"):
            t.eval()
        with pytest.raises(ValueError, match=r"Cannot execute operation using `run\(\)`: no default session"):
            t.op.run()
        with tf.Session() as sess:
            assert tf.get_default_session() is sess and t.eval() == 1.0
        assert tf.get_default_session() is None


# -- tf.contrib.layers (TF1 names: TensorFlow 2 has no contrib) -----------------------------------------------
def test_contrib_layers_names_defaults_and_regularizer():
    with tf.Graph().as_default():
        x = tf.constant(RNG.standard_normal((2, 5, 5, 3)).astype(np.float32))
        h = tf.contrib.layers.conv2d(x, 4, 3, weights_regularizer=tf.contrib.layers.l2_regularizer(0.5))
        f = tf.contrib.layers.flatten(h)
        y = tf.contrib.layers.fully_connected(f, 2, activation_fn=None,
                                              weights_initializer=tf.contrib.layers.xavier_initializer())
        he = tf.contrib.layers.variance_scaling_initializer()
        z = tf.contrib.layers.fully_connected(f, 2, weights_initializer=he)
        names = [v.op.name for v in tf.global_variables()]
        assert names == ["Conv/weights", "Conv/biases", "fully_connected/weights", "fully_connected/biases",
                         "fully_connected_1/weights", "fully_connected_1/biases"]
        assert h.shape.as_list() == [2, 5, 5, 4] and f.shape.as_list() == [2, 100]  # SAME padding by default
        [reg] = tf.losses.get_regularization_losses()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            hv, zv, rv, wv = sess.run([h, z, reg, tf.global_variables()[0]])
            assert hv.min() >= 0 and zv.min() >= 0  # ReLU is contrib's default activation
            np.testing.assert_allclose(rv, 0.5 * (wv ** 2).sum() / 2, rtol=1e-5)
        assert y.shape.as_list() == [2, 2]
    with pytest.raises(NotImplementedError, match=r"tf\.contrib\.rnn\.AttentionCellWrapper"):
        tf.contrib.rnn.AttentionCellWrapper  # noqa: B018


# -- flags, app, logging, gfile ------------------------------------------------------------------------------
def test_flags_parse_like_absl_and_app_run_passes_the_rest(monkeypatch):
    from tfplus import flags as flags_module
    fv = flags_module.FlagValues()
    flags_module.DEFINE_string("name", "x", "a string", flag_values=fv)
    flags_module.DEFINE_integer("steps", 10, "an int", lower_bound=0, flag_values=fv)
    flags_module.DEFINE_float("lr", 0.1, "a float", flag_values=fv)
    flags_module.DEFINE_boolean("fast", False, "a bool", flag_values=fv)
    flags_module.DEFINE_bool("slow", True, "a bool", flag_values=fv)
    flags_module.DEFINE_list("layers", "1,2", "a list", flag_values=fv)
    flags_module.DEFINE_enum("mode", "train", ["train", "eval"], "an enum", flag_values=fv)
    rest = fv(["prog", "--name=abc", "--steps", "5", "pos1", "--fast", "--noslow", "--layers=a,b,c", "--lr=1e-3",
               "--mode", "eval", "--unknown=3", "--", "--steps=7"], known_only=True)
    assert rest == ["prog", "pos1", "--unknown=3", "--steps=7"]
    assert (fv.name, fv.steps, fv.lr, fv.fast, fv.slow, fv.layers, fv.mode) == \
        ("abc", 5, 1e-3, True, False, ["a", "b", "c"], "eval")
    with pytest.raises(flags_module.IllegalFlagValueError, match="--steps=-1"):
        fv(["prog", "--steps=-1"])
    with pytest.raises(flags_module.IllegalFlagValueError, match="--mode=test"):
        fv(["prog", "--mode=test"])
    with pytest.raises(flags_module.UnrecognizedFlagError, match="--nope"):
        fv(["prog", "--nope"])
    with pytest.raises(flags_module.Error, match="defined twice"):
        flags_module.DEFINE_string("name", "y", "again", flag_values=fv)
    assert tf.flags is tf.app.flags and isinstance(tf.app.flags.FLAGS, flags_module.FlagValues)

    seen = []
    monkeypatch.setattr(tf.app.flags, "FLAGS", fv)
    with pytest.raises(SystemExit) as done:
        tf.app.run(main=lambda argv: seen.append(argv) or 3, argv=["prog", "--steps=2", "extra"])
    assert done.value.code == 3 and seen == [["prog", "extra"]] and fv.steps == 2


def test_logging_levels_and_messages(caplog):
    tf.logging.set_verbosity(tf.logging.INFO)
    try:
        with caplog.at_level(std_logging.DEBUG, logger="tensorflow"):
            tf.logging.set_verbosity(tf.logging.INFO)
            tf.logging.debug("hidden %d", 1)
            tf.logging.info("step %d", 2)
            tf.logging.warn("careful")
            tf.logging.error("bad")
        assert [r.getMessage() for r in caplog.records] == ["step 2", "careful", "bad"]
        assert tf.logging.get_verbosity() == tf.logging.INFO
        assert (tf.logging.DEBUG, tf.logging.INFO, tf.logging.WARN, tf.logging.ERROR) == (10, 20, 30, 40)
    finally:
        tf.logging.set_verbosity(tf.logging.WARN)


def test_gfile_operations(tmp_path):
    d = tmp_path / "a" / "b"
    tf.gfile.MakeDirs(str(d))
    assert tf.gfile.IsDirectory(str(d)) and tf.gfile.Exists(str(d))
    with tf.gfile.GFile(str(d / "f.txt"), "w") as f:
        f.write("one\ntwo\n")
    with tf.gfile.Open(str(d / "f.txt")) as f:
        assert list(f) == ["one\n", "two\n"]
    tf.gfile.Copy(str(d / "f.txt"), str(d / "g.txt"))
    with pytest.raises(tf.errors.AlreadyExistsError):
        tf.gfile.Copy(str(d / "f.txt"), str(d / "g.txt"))
    tf.gfile.Rename(str(d / "g.txt"), str(d / "h.txt"))
    tf.gfile.MkDir(str(d / "sub"))
    assert tf.gfile.ListDirectory(str(d)) == ["f.txt", "h.txt", "sub"]
    assert tf.gfile.Glob(str(d / "*.txt")) == [str(d / "f.txt"), str(d / "h.txt")]
    assert [w[0] for w in tf.gfile.Walk(str(tmp_path / "a"))] == [str(tmp_path / "a"), str(d), str(d / "sub")]
    tf.gfile.Remove(str(d / "h.txt"))
    with pytest.raises(tf.errors.NotFoundError, match="h.txt"):
        tf.gfile.Remove(str(d / "h.txt"))
    with pytest.raises(tf.errors.NotFoundError):
        tf.gfile.GFile(str(d / "missing"))
    tf.gfile.DeleteRecursively(str(tmp_path / "a"))
    assert not tf.gfile.Exists(str(tmp_path / "a"))


# -- MonitoredTrainingSession and hooks ---------------------------------------------------------------------
def _regression():
    x = tf.constant(RNG.standard_normal((8, 3)).astype(np.float32))
    w = tf.Variable(tf.zeros([3, 1]), name="w")
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
    step = tf.train.get_or_create_global_step()
    return loss, tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step), step


def test_monitored_training_session_stops_saves_restores_and_logs(tmp_path, caplog):
    with tf.Graph().as_default():
        loss, train_op, step = _regression()
        tf.summary.scalar("loss", loss)
        hooks = [tf.train.StopAtStepHook(last_step=5), tf.train.NanTensorHook(loss),
                 tf.train.LoggingTensorHook({"loss": loss}, every_n_iter=2)]
        tf.logging.set_verbosity(tf.logging.INFO)
        try:
            with caplog.at_level(std_logging.INFO, logger="tensorflow"):
                with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), hooks=hooks,
                                                       save_summaries_steps=2) as sess:
                    runs = 0
                    while not sess.should_stop():
                        sess.run(train_op)
                        runs += 1
        finally:
            tf.logging.set_verbosity(tf.logging.WARN)
        assert runs == 5
        assert sum("loss = " in r.getMessage() for r in caplog.records) == 3  # runs 0, 2, 4
        assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-5")
    with tf.Graph().as_default():  # a new session restores the last checkpoint and goes on from step 5
        loss, train_op, step = _regression()
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path),
                                               hooks=[tf.train.StopAtStepHook(num_steps=2)]) as sess:
            assert sess.run(step) == 5
            runs = 0
            while not sess.should_stop():
                sess.run(train_op)
                runs += 1
        assert runs == 2 and tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-7")
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    steps = [e.step for e in acc.Scalars("loss")]  # every 2nd of the 5 runs (the step read in that run)
    assert len(steps) == 3 and np.all(np.diff(steps) == 2)


def test_nan_tensor_hook_raises_or_stops():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [])
        tf.train.get_or_create_global_step()
        with tf.train.MonitoredTrainingSession(hooks=[tf.train.NanTensorHook(x)]) as sess:
            sess.run(x, {x: 1.0})
            with pytest.raises(tf.train.NanLossDuringTrainingError):
                sess.run(x, {x: np.nan})
        with tf.train.MonitoredTrainingSession(hooks=[tf.train.NanTensorHook(x, fail_on_nan_loss=False)]) as sess:
            sess.run(x, {x: np.nan})
            assert sess.should_stop()


# -- unsupported names ---------------------------------------------------------------------------------------
def test_missing_tf1_names_say_tfplus_lacks_them():
    with pytest.raises(NotImplementedError, match=r"does not implement tf\.estimator\.BaselineRegressor.*model_fn"):
        tf.estimator.BaselineRegressor  # noqa: B018
    with pytest.raises(NotImplementedError, match=r"tf\.nn\.conv3d_transpose.*tf\.nn\.conv2d_transpose"):
        tf.nn.conv3d_transpose  # noqa: B018
    with pytest.raises(NotImplementedError, match=r"tf\.train\.AdagradDAOptimizer.*AdagradOptimizer"):
        tf.train.AdagradDAOptimizer  # noqa: B018
    with pytest.raises(AttributeError, match=r"tfplus does not implement tf\.no_such_thing"):
        tf.no_such_thing  # noqa: B018
    assert not hasattr(tf, "no_such_thing") and not hasattr(tf.nn, "no_such_thing")
    with pytest.raises(ImportError):
        from tfplus import no_such_thing  # noqa: F401


def test_monitored_session_hooks_run_and_save_when_tensorflows_do(tf1, tmp_path):
    """StopAtStepHook's run count and CheckpointSaverHook's checkpoint steps, as in TensorFlow's own."""
    def run(t, folder):
        with t.Graph().as_default():
            x = t.constant(np.ones((4, 3), np.float32))
            w = t.Variable(t.zeros([3, 1]), name="w")
            loss = t.reduce_mean(t.square(t.matmul(x, w) - 1.0))
            step = t.train.get_or_create_global_step()
            train_op = t.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
            hooks = [t.train.StopAtStepHook(num_steps=7)]
            runs = 0
            with t.train.MonitoredTrainingSession(checkpoint_dir=str(folder), hooks=hooks, save_checkpoint_secs=None,
                                                  save_checkpoint_steps=3, save_summaries_steps=None,
                                                  log_step_count_steps=None) as sess:
                while not sess.should_stop():
                    sess.run(train_op)
                    runs += 1
        state = t.train.get_checkpoint_state(str(folder))
        return runs, [p.rsplit("-", 1)[1] for p in state.all_model_checkpoint_paths]

    ours = run(tf, tmp_path / "ours")
    assert ours == run(tf1, tmp_path / "theirs")
    assert ours[0] == 7 and len(ours[1]) >= 3
