"""Training ops made to wait (control inputs) for ops of the batch's run micro-batch like any step (issue 34): the
update run treats what the micro-batches ran as done, instead of refusing the step or running it whole. Three kinds
of user graph, each split (micro-batches under a budget, on cpu and opencl; the cpu's worker processes) and checked
against the unsplit step's losses and weights:
- a TF1 script that gates its train op on the loss and the accuracy (`with tf.control_dependencies([loss, acc])`:
  the gradients and the optimizer's constants made inside wait for them too), an EMA of the weights after it and
  the two grouped (tf.group);
- Keras's training function (tfplus.keras Model.fit: the updates wait for the loss and the metrics);
- a training MetaGraph exported and imported again (tfplus's, and TensorFlow's, whose updates wait for the reads
  of the weights)."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from modelcheck import assert_measured_is_planned

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import measure_device_step, measure_step
from tfplus.planner.liveness import PlanError
from tfplus.runtime.facts import device_facts

BATCH, STEPS = 16, 3
RNG = np.random.default_rng(3)
X = RNG.standard_normal((BATCH, 6)).astype(np.float32)
Y = RNG.integers(0, 3, BATCH).astype(np.int32)
W1 = (RNG.standard_normal((6, 12)) * 0.4).astype(np.float32)
W2 = (RNG.standard_normal((12, 3)) * 0.4).astype(np.float32)


def _mlp(t, x, y):
    """Two dense layers of fixed weights in `t` (tfplus or tensorflow.compat.v1); the mean loss and accuracy."""
    w1, w2 = t.Variable(W1, name="w1"), t.Variable(W2, name="w2")
    logits = t.matmul(t.nn.relu(t.matmul(x, w1)), w2)
    loss = t.reduce_mean(t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
    # (not tf.equal: TensorFlow's has an attr tfplus's import does not take)
    hit = t.cast(t.nn.in_top_k(logits, y, 1), t.float32)
    return loss, t.reduce_mean(hit, name="accuracy")


def _gated():
    """The train op waits for the loss and the accuracy, an EMA of the weights for the train op, and a tf.group
    runs both. (With batch statistics and early updates: test_early_updates.py's gated net.)"""
    g = tf.Graph()
    with g.as_default():
        x, y = tf.placeholder(tf.float32, [None, 6], name="x"), tf.placeholder(tf.int32, [None], name="y")
        loss, acc = _mlp(tf, x, y)
        with tf.control_dependencies([loss, acc]):
            train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        ema = tf.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            averages = ema.apply(tf.trainable_variables())
        step = tf.group(train, averages)
        init = tf.global_variables_initializer()
    return g, [step, loss, acc], {x: X, y: Y}, init


def _exported(t, folder: str) -> str:
    """A training graph built in `t`, exported to folder/model.meta: tfplus's updates wait for the backward's reads
    of the weights in the export (as TensorFlow needs), TensorFlow's plain ones would not, so its script gates its
    train op on the loss and the accuracy."""
    path = os.path.join(folder, "model.meta")
    with t.Graph().as_default():
        x, y = t.placeholder(t.float32, [None, 6], name="x"), t.placeholder(t.int32, [None], name="y")
        loss, acc = _mlp(t, x, y)
        with t.control_dependencies([loss, acc] if t is not tf else None):
            t.train.MomentumOptimizer(0.1, 0.9).minimize(loss, name="train")
        t.variables_initializer(t.global_variables(), name="init")
        t.train.export_meta_graph(path)
    return path


def _imported(path: str):
    g = tf.Graph()
    with g.as_default():
        tf.train.import_meta_graph(path)
    names = ["train", "loss:0", "accuracy:0"]
    fetches = [g.get_operation_by_name(n) if ":" not in n else g.get_tensor_by_name(n) for n in names]
    return g, fetches, {g.get_tensor_by_name("x:0"): X, g.get_tensor_by_name("y:0"): Y}, \
        g.get_operation_by_name("init")


def _keras_model():
    keras = tf.keras
    model = keras.Sequential([keras.layers.Dense(12, activation="relu", input_shape=(6,),
                                                 kernel_initializer=keras.initializers.Constant(W1)),
                              keras.layers.Dense(3, kernel_initializer=keras.initializers.Constant(W2))])
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _keras():
    """Keras's training function (Model.fit's step): its updates wait for the loss and the accuracy."""
    g = tf.Graph()
    with g.as_default():
        model = _keras_model()
        step = model._train_step()
        feeds = {model.inputs[0]: X, model.targets[0]: Y[:, None].astype(np.float32)}
        init = tf.global_variables_initializer()
    return g, [step, *model._fetches], feeds, init


def _train(case, device: str = "cpu", workers: int | None = None, force: tuple | None = None):
    """STEPS steps' fetched values (all but the last's where it is measured) and the variables after them; the plan
    forced on the step (`force`, planner.plan's) and its last step's measured bytes; the worker processes' ids and
    the steps they split (workers._Step)."""
    graph, fetches, feeds, init = case
    gc.collect()
    p = m = None
    with tf.Session(graph=graph, device=device, workers=workers, memory_budget="1GB" if force else None) as sess:
        if force:
            step = sess.step(fetches, feeds)
            p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), 10**9, graph=step.graph,
                             force=force)
            if device == "cpu":
                tracemalloc.start(16)  # before the session allocates its variables and arena (measure_step)
        try:
            if force:
                step.use_plan(p)
            sess.run(init)
            values = [sess.run(fetches, feeds)[1:] for _ in range(STEPS - 1)]
            if force:  # (the measured step's values are not kept)
                m = (measure_step if device == "cpu" else measure_device_step)(sess, fetches, feeds)
            else:
                values.append(sess.run(fetches, feeds)[1:])
            variables = {v.op.name: sess.run(v) for v in graph.get_collection("variables")}
        finally:
            if tracemalloc.is_tracing():
                tracemalloc.stop()
        state = sess.workers
        pids = [pid for grp in state.groups.values() for pid in grp.pids] if state else []
        split = [s for s in state.steps.values() if not isinstance(s, str)] if state else []
    return np.array(values, np.float64), variables, p, m, pids, split


def _assert_same(got, want, what: str) -> None:
    n = min(len(got[0]), len(want[0]))
    np.testing.assert_allclose(got[0][:n], want[0][:n], rtol=1e-5, atol=1e-6, err_msg=what)
    assert got[1].keys() == want[1].keys()
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=1e-5, atol=1e-6, err_msg=f"{what}: {name}")
    assert want[0][-1][0] < want[0][0][0], "the steps did not train"


KINDS = ["gated", "keras", "tfplus-meta", "tf-meta"]


# TensorFlow writes its MetaGraph in a child process: with TensorFlow's LLVM loaded, PoCL fails to build the OpenCL
# programs it has not cached ("unknown target CPU").
_TF_EXPORT = """import os, sys
os.environ.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")
import tensorflow.compat.v1 as t
t.disable_eager_execution(); t.disable_resource_variables()
sys.path[:0] = sys.argv[1:3]
from test_update_control_inputs import _exported
_exported(t, sys.argv[3])
"""


@pytest.fixture(scope="module")
def tf_meta(tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("tf-meta"))
    here = os.path.dirname(__file__)
    subprocess.run([sys.executable, "-c", _TF_EXPORT, here, os.path.dirname(here), folder], check=True)
    return os.path.join(folder, "model.meta")


@pytest.fixture
def maker(request, tmp_path):
    def make(name):
        if name == "tf-meta":
            return _imported(request.getfixturevalue("tf_meta"))
        return _gated() if name == "gated" else _keras() if name == "keras" else _imported(_exported(tf, str(tmp_path)))
    return make


_UNSPLIT: dict = {}  # (kind, device): the unsplit step's _train, the reference of both ways of splitting it


@pytest.mark.parametrize("how", ["micro-batches", "stream"])
@pytest.mark.parametrize("name", KINDS)
def test_micro_batches_train_as_the_unsplit_step_in_the_planned_bytes(name, how, device, maker):
    """In 4 micro-batches; or streamed (planner.stream) at the first layer's ReLU in 4 micro-batches, where the
    prefix's backward and the updates wait for the rest's loss."""
    case = maker(name)
    relu = next(op for op in case[0].get_operations() if op.type == "Relu").outputs[0].name
    if (name, device) not in _UNSPLIT:
        _UNSPLIT[name, device] = _train(maker(name), device)
    want = _UNSPLIT[name, device]
    got = _train(case, device, force=(4, 1) if how == "micro-batches" else (1, 1, False, 1, 0, (relu, 4)))
    p, m = got[2], got[3]
    assert (p.microbatches, p.stream_microbatches) == ((4, 1) if how == "micro-batches" else (1, 4))
    _assert_same(got, want, f"{name} on {device} in 4 micro-batches ({how})")
    if device == "cpu":
        assert_measured_is_planned(m, p)
    else:
        assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)


@pytest.mark.parametrize("name", KINDS)
def test_worker_processes_split_the_step(name, maker):
    want = _train(maker(name), workers=1)
    got = _train(maker(name), workers=2)
    assert len(got[4]) == 2 and len(got[5]) == 1  # the training step ran on two worker processes
    _assert_same(got, want, f"{name} on 2 worker processes")


FIT_X = RNG.standard_normal((64, 6)).astype(np.float32)
FIT_Y = RNG.integers(0, 3, 64).astype(np.int32)


def _fit(device: str, budget: int | None):
    """Keras's Model.fit, 2 epochs of 2 batches of 32, in a session under `budget`: the weights, the epochs' losses
    and the plans of the session's steps."""
    g = tf.Graph()
    with g.as_default():
        sess = tf.Session(graph=g, device=device, memory_budget=budget)
        tf.keras.backend.set_session(sess)
        try:
            model = _keras_model()
            history = model.fit(FIT_X, FIT_Y, batch_size=32, epochs=2, shuffle=False, verbose=0)
            plans = [s.bound.plan for s in sess.steps if s.bound is not None]
            return model.get_weights(), history.history["loss"], plans
        finally:
            tf.keras.backend.set_session(None)
            sess.close()


def test_keras_fit_under_a_budget_trains_to_the_weights_without_one(device):
    weights, losses, _ = _fit(device, None)
    # the unsplit training step needs 5.7 kB on cpu, 7.9 kB on opencl (its 4 micro-batches 4.0 kB, 6.8 kB)
    got_weights, got_losses, plans = _fit(device, {"cpu": 4000, "opencl": 7000}[device])
    assert max(p.microbatches for p in plans) >= 2, [(p.microbatches, p.peak_bytes) for p in plans]
    np.testing.assert_allclose(got_losses, losses, rtol=1e-5)
    assert losses[1] < losses[0], "fit did not train"
    for a, b in zip(got_weights, weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _unmergeable():
    """_gated's script whose learning rate also reads the batch's largest input: a Max over its rows, which no
    merge of micro-batches' values makes."""
    g = tf.Graph()
    with g.as_default():
        x, y = tf.placeholder(tf.float32, [None, 6], name="x"), tf.placeholder(tf.int32, [None], name="y")
        loss, acc = _mlp(tf, x, y)
        with tf.control_dependencies([loss, acc]):
            rate = 0.1 / (1.0 + tf.abs(tf.reduce_max(x)))
            train = tf.train.GradientDescentOptimizer(rate).minimize(loss)
        init = tf.global_variables_initializer()
    return g, [train, loss, acc], {x: X, y: Y}, init


def test_an_update_that_needs_a_batch_value_no_merge_makes_is_still_refused():
    """The update run takes what it waits for as done, but not a value it reads: a budget that needs micro-batches
    says why they were refused, and the workers run the step whole, to the one-process result."""
    graph, fetches, feeds, _ = _unmergeable()
    why = r"cannot micro-batch: the update input '.*' depends on the batch, but Max '.*' reduces over the rows"
    with tf.Session(graph=graph) as sess, pytest.raises(PlanError, match=why):
        step = sess.step(fetches, feeds)
        planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph, force=(4, 1))
    want = _train(_unmergeable(), workers=1)
    got = _train(_unmergeable(), workers=2)
    assert not got[4] and not got[5]
    np.testing.assert_array_equal(got[0], want[0])

