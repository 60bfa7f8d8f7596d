"""One graph, many threads (a web server's request threads): a graph's scopes are each thread's own, as in TF1, so
an op another thread builds meanwhile never takes this thread's control dependencies (running it would train),
name or variable scope; Keras's first calls from several threads make one session and one training op."""
from __future__ import annotations

import sys
import threading
import time

import numpy as np

import tfplus as tf
from tfplus import keras
from tfplus.keras import backend

WAIT = 0.5  # how long the first of two threads waits for the second to get as far: long enough on a busy box


def _two_threads(first, second) -> None:
    errors: list = []

    def run(body):
        try:
            body()
        except BaseException as e:  # noqa: BLE001  re-raised below
            errors.append(e)
    ts = [threading.Thread(target=run, args=(body,)) for body in (first, second)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "a thread is still running: a deadlock"
    if errors:
        raise errors[0]


def test_an_op_built_while_another_thread_is_inside_scopes_takes_none_of_them():
    g = tf.Graph()
    with g.as_default():
        counter = tf.Variable(0.0, name="counter")
        increment = tf.assign_add(counter, 1.0)
        x = tf.constant(2.0)
    inside, built = threading.Event(), threading.Event()
    made = {}

    def scoped():  # a thread inside every kind of scope while the other builds
        with g.as_default(), tf.control_dependencies([increment]), tf.name_scope("train"), \
                tf.variable_scope("tower"), tf.device("/cpu:0"):
            inside.set()
            assert built.wait(60)

    def other():
        assert inside.wait(60)
        with g.as_default():
            made["y"] = tf.identity(x, name="y")
            made["v"] = tf.get_variable("v", [], initializer=tf.zeros_initializer())
        built.set()
    _two_threads(scoped, other)
    y, v = made["y"], made["v"]
    assert (y.op.name, v.op.name, y.op.control_inputs, y.op.device) == ("y", "v", [], "")
    with tf.Session(graph=g) as sess:
        sess.run(tf.variables_initializer([counter, v]))
        assert sess.run(y) == 2.0 and sess.run(counter) == 0.0  # reading y trained nothing


def _model():
    m = keras.Sequential([keras.layers.Dense(4, input_shape=(3,)), keras.layers.Dense(2)])
    m.compile("adam", "mse")
    return m


def _waits_for_a_second_call(monkeypatch, owner, name: str) -> list:
    """Wraps owner.name so that its first call waits (WAIT s at most) for a second call; returns the calls' list."""
    real, calls, second = getattr(owner, name), [], threading.Event()

    def wrapped(*args, **kwargs):
        calls.append(threading.get_ident())
        if len(calls) == 1:
            second.wait(WAIT)
        else:
            second.set()
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, wrapped)
    return calls


def test_first_fits_from_two_threads_make_one_training_op(monkeypatch):
    backend.clear_session()  # the model in the process's default graph, which every thread sees
    m = _model()
    calls = _waits_for_a_second_call(monkeypatch, m.optimizer, "minimize")
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    _two_threads(lambda: m.train_on_batch(x, y), lambda: m.train_on_batch(x, y))
    assert len(calls) == 1  # two made two optimizer states, each thread training with its own
    backend.clear_session()


def test_first_predictions_from_two_threads_share_one_session_and_its_weights(monkeypatch):
    backend.clear_session()
    m = _model()
    made = _waits_for_a_second_call(monkeypatch, backend, "Session")
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    out: list = []
    _two_threads(lambda: out.append(m.predict(x)), lambda: out.append(m.predict(x)))
    assert len(made) == 1
    np.testing.assert_array_equal(out[0], out[1])  # one session: the same randomly initialized weights
    np.testing.assert_array_equal(m.predict(x), out[0])
    backend.clear_session()


def test_summaries_added_from_threads_are_each_written_once(tmp_path):
    from tfplus.io.tfrecord import read_records
    from tfplus.proto.event_pb2 import Event
    writer = tf.summary.FileWriter(str(tmp_path), max_queue=3)
    file = writer._file

    class SlowDisk:  # a write that takes a while (and lets the other thread run meanwhile)
        def write(self, data):
            time.sleep(1e-3)
            return file.write(data)

        def __getattr__(self, name):
            return getattr(file, name)
    writer._file = SlowDisk()
    per_thread, switch = 200, sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often, inside add_summary and flush

    def add(first: int):
        def run():
            for step in range(first, first + per_thread):
                writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag="loss", simple_value=1.0)]), step)
        return run
    try:
        _two_threads(add(0), add(per_thread))
    finally:
        sys.setswitchinterval(switch)
    writer.close()
    steps = [Event.FromString(r).step for r in read_records(writer.path)][1:]  # after the file_version event
    assert sorted(steps) == list(range(2 * per_thread))  # none lost, none twice
