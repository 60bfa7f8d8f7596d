"""The newer writers under kills and damage: Keras's save_weights (and so ModelCheckpoint) killed at any file
operation leaves the weights saved before loadable, a file from another model is refused naming the file; the
federated server's initial_weights.npz is written atomically and a damaged one named; a JSON-lines log (the
trainer's --log, the federated rounds.jsonl) whose last row a killed run left half-written gets whole rows on."""
from __future__ import annotations

import json
import os
import select
import signal
import warnings

import numpy as np
import pytest

from tfplus import errors, keras

_FILE_OPS = ("replace", "rename", "link", "fsync", "remove", "unlink")


def _killed_at(k: int, body) -> bool:
    """Runs body() in a forked child that SIGKILLs itself at its k-th file operation (os.replace, link, fsync,
    ...): a kill -9 at that point. True if it was killed, False if body() ended first."""
    pid = os.fork()
    if pid == 0:
        try:
            calls = [0]

            def wrap(real):
                def op(*args, **kwargs):
                    calls[0] += 1
                    if calls[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(*args, **kwargs)
                return op
            for name in _FILE_OPS:
                setattr(os, name, wrap(getattr(os, name)))
            body()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)


def _model(units: int = 2):
    m = keras.Sequential([keras.layers.Dense(3, input_shape=(2,)), keras.layers.Dense(units)])
    m.compile("sgd", "mse")
    return m


def _same(a: list, b: list) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_keras_save_weights_killed_at_any_file_operation_leaves_the_weights_saved_before(tmp_path):
    m = _model()
    before = m.get_weights()
    after = [w + 1.0 for w in before]
    for k in range(1, 100):
        path = str(tmp_path / str(k) / "weights")
        m.set_weights(before)
        m.save_weights(path)

        def save_after(path=path):
            m.set_weights(after)
            m.save_weights(path)
        killed = _killed_at(k, save_after)
        m.set_weights([np.zeros_like(w) for w in before])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn file read from its backup says so
            m.load_weights(path)
        assert _same(m.get_weights(), before) or _same(m.get_weights(), after), k
        m.set_weights(after)
        m.save_weights(path)  # and the next save puts everything right, leaving nothing behind
        m.set_weights(before)
        m.load_weights(path)
        assert _same(m.get_weights(), after), k
        assert sorted(os.listdir(os.path.dirname(path))) == ["weights.data-00000-of-00001", "weights.index"], k
        if not killed:
            break
    assert k > 4, "the save made too few file operations to have been killed at each"


def test_a_second_process_saving_weights_at_one_path_waits_for_the_first(tmp_path):
    """Writer A pauses between its two renames (1 s at most) until writer B, started then, says it saved: B must
    wait for A instead (the folder's lock). Interleaved, B deleted A's new index as a killed save's leftover, and
    A's save failed."""
    path = str(tmp_path / "weights")
    m = _model()
    shapes = [w.shape for w in m.get_weights()]
    m.save_weights(path)
    in_window, b_done = os.pipe(), os.pipe()

    def writer(c: float, pause: bool) -> int:
        pid = os.fork()
        if pid:
            return pid
        code = 1  # a save that raised
        try:
            if pause:
                real = os.replace

                def replace(src, dst):
                    real(src, dst)
                    if dst == path + ".data-00000-of-00001":  # A's data is in place, its index not yet
                        os.write(in_window[1], b"x")
                        select.select([b_done[0]], [], [], 1.0)
                os.replace = replace
            m.set_weights([np.full(s, c, np.float32) for s in shapes])
            m.save_weights(path)
            if not pause:
                os.write(b_done[1], b"x")
            code = 0
        finally:
            os._exit(code)
    a = writer(1.0, pause=True)
    assert os.read(in_window[0], 1) == b"x"
    b = writer(2.0, pause=False)
    assert os.waitpid(a, 0)[1] == 0 and os.waitpid(b, 0)[1] == 0
    m.load_weights(path)
    assert {float(v) for w in m.get_weights() for v in w.ravel()} == {2.0}  # B's weights, saved after A's, whole
    assert sorted(os.listdir(tmp_path)) == ["weights.data-00000-of-00001", "weights.index"]


def test_keras_load_weights_of_another_models_file_names_the_file_and_the_weight(tmp_path):
    path = str(tmp_path / "w")
    _model(2).save_weights(path)
    other = _model(1)
    with pytest.raises(ValueError, match=r"load_weights: .*w holds layer_with_weights-1/kernel.* shape \(3, 2\).*"
                                         r"has shape \(3, 1\)"):
        other.load_weights(path)


def test_federated_weights_file_killed_while_written_keeps_the_old_one_and_a_damaged_one_is_named(tmp_path):
    from tfplus.federated.model import load_weights, save_weights
    path = str(tmp_path / "initial_weights.npz")
    old = {"conv1/weights": np.arange(2000, dtype=np.float32), "b": np.ones(3, np.float32)}
    save_weights(path, old)
    for k in (1, 2):  # killed while the new file is written, at its fsync; at its rename
        assert _killed_at(k, lambda: save_weights(path, {n: w + 1 for n, w in old.items()}))
        assert all(np.array_equal(w, old[n]) for n, w in load_weights(path).items())
    whole = open(path, "rb").read()
    for damaged in (whole[:len(whole) // 2], whole[:100] + bytes([whole[100] ^ 0xFF]) + whole[101:]):
        with open(path, "wb") as f:
            f.write(damaged)
        with pytest.raises(errors.DataLossError, match=f"{path}: not a whole weights file"):
            load_weights(path)


def test_a_row_left_half_written_is_cut_before_the_next_run_appends(tmp_path, capsys):
    from tfplus.trainer import JsonLog
    path = tmp_path / "rounds.jsonl"
    path.write_text(json.dumps({"round": 0}) + "\n" + json.dumps({"round": 1})[:7])  # a run killed mid-row
    log = JsonLog(str(path))
    log.write({"round": 1})
    log.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"round": 0}, {"round": 1}]
    assert f"{path}: cut off its last 7 bytes" in capsys.readouterr().err
    JsonLog(str(path)).close()  # a whole file stays as it is
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"round": 0}, {"round": 1}]


def _estimator(model_dir):
    import tfplus as tf

    def model_fn(features, labels, mode):
        w = tf.get_variable("w", [3, 2], initializer=tf.ones_initializer())
        y = tf.matmul(features["x"], w)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"y": y})
        loss = tf.reduce_mean(tf.square(y - labels))
        step = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tf.train.get_or_create_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=step)
    est = tf.estimator.Estimator(model_fn, model_dir=str(model_dir))
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    est.train(tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=4, num_epochs=None, shuffle=False), steps=1)

    def receiver():
        x = tf.placeholder(tf.float32, [None, 3])
        return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})
    return est, receiver


def test_an_estimator_export_stopped_by_ctrl_c_leaves_no_half_written_folder(tmp_path, monkeypatch):
    from tfplus.saved_model import builder
    est, receiver = _estimator(tmp_path / "model")
    save = builder.SavedModelBuilder.save

    def interrupted(self, as_text=False):
        raise KeyboardInterrupt
    monkeypatch.setattr(builder.SavedModelBuilder, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        est.export_saved_model(str(tmp_path / "export"), receiver)
    assert os.listdir(tmp_path / "export") == []  # a temp-<stamp> folder with its variables stayed
    monkeypatch.setattr(builder.SavedModelBuilder, "save", save)
    path = est.export_saved_model(str(tmp_path / "export"), receiver).decode()
    assert os.listdir(tmp_path / "export") == [os.path.basename(path)]
    assert sorted(os.listdir(path)) == ["saved_model.pb", "variables"]
