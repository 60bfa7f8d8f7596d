"""Training steps a TF1 user writes, round 3: a variable written and read in one run. TF1 orders an update and a
read of the same variable that no data or control edge orders in no particular way (its executor runs whichever is
ready first, on several threads); tfplus runs them in the executor's creation order (framework.topo_order), and a
memory plan keeps that order for every read and write of one variable (liveness.dependency_graph), so a budgeted
step computes what the unbudgeted one does: a GAN's two train ops in one run, an assign and a read of its variable,
an EMA update and a read of the average, an assign_add counter read in the same run. Each is checked against the
unbudgeted session on its device: planned whole, micro-batched where it has a batch, and at its floor."""
from __future__ import annotations

import gc
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf
from tfplus import planner
from tfplus.runtime.facts import device_facts

BATCH = 8
RUNS = 3
TOL = {"cpu": 1e-5, "opencl": 1e-4}


def _dense(t, units, name):
    return tf.layers.dense(t, units, name=name, kernel_initializer=tf.glorot_uniform_initializer(seed=len(name)))


def _gan():
    """The discriminator's and the generator's train ops fetched in one run: the generator's gradients through the
    discriminator's weights are made after the discriminator's update, so they read the updated weights."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        z, real = tf.placeholder(tf.float32, [None, 4], name="z"), tf.placeholder(tf.float32, [None, 6], name="real")
        with tf.variable_scope("G"):
            fake = _dense(tf.nn.relu(_dense(z, 8, "g1")), 6, "g2")

        def discriminator(t, reuse):
            with tf.variable_scope("D", reuse=reuse):
                return _dense(tf.nn.relu(_dense(t, 8, "h")), 1, "o")
        on_real, on_fake = discriminator(real, False), discriminator(fake, True)
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        d_loss = tf.reduce_mean(xent(labels=tf.ones_like(on_real), logits=on_real) +
                                xent(labels=tf.zeros_like(on_fake), logits=on_fake))
        g_loss = tf.reduce_mean(xent(labels=tf.ones_like(on_fake), logits=on_fake))
        train_d = tf.train.MomentumOptimizer(0.1, 0.9).minimize(d_loss, var_list=tf.trainable_variables("D"))
        train_g = tf.train.MomentumOptimizer(0.1, 0.9).minimize(g_loss, var_list=tf.trainable_variables("G"))
        init = tf.global_variables_initializer()
    feeds = {z: rng.standard_normal((BATCH, 4)).astype(np.float32),
             real: rng.standard_normal((BATCH, 6)).astype(np.float32)}
    return SimpleNamespace(graph=g, fetches=[train_d, train_g, d_loss, g_loss], feeds=feeds, init=init)


def _state(kind: str):
    """A dense step with state written and read in the same run: `kind` 'assign' (a fetched assign of a scale
    and a read of it made after), 'ema' (the average of the weights updated after the train op and read in the
    loss's run), 'counter' (an assign_add counter and a read of it made after, both fetched)."""
    rng = np.random.default_rng(1)
    g = tf.Graph()
    with g.as_default():
        x, y = tf.placeholder(tf.float32, [None, 6], name="x"), tf.placeholder(tf.int32, [None], name="y")
        w = tf.Variable((rng.standard_normal((6, 3)) / 3).astype(np.float32), name="w")
        logits = tf.matmul(x, w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        fetches = [train, loss]
        if kind == "assign":
            scale = tf.Variable(1.0, name="scale")
            grow = tf.assign(scale, scale * 1.5 + tf.reduce_sum(w))
            fetches += [grow, scale * tf.reduce_sum(logits)]  # the read, made after the assign, sees its value
        elif kind == "ema":
            ema = tf.train.ExponentialMovingAverage(0.5)
            with tf.control_dependencies([train]):
                average = ema.apply([w])
            fetches = [average, loss, tf.reduce_sum(ema.average(w) * tf.reduce_mean(x))]
        elif kind == "counter":
            seen = tf.Variable(0.0, name="seen")
            count = tf.assign_add(seen, tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y),
                                                             tf.float32)))
            fetches += [count, seen * 1.0]
        init = tf.global_variables_initializer()
    feeds = {x: rng.standard_normal((BATCH, 6)).astype(np.float32), y: rng.integers(0, 3, BATCH).astype(np.int32)}
    return SimpleNamespace(graph=g, fetches=fetches, feeds=feeds, init=init)


def _run(case, device: str, force=None, floor: bool = False):
    """RUNS steps' tensor fetches and every variable after them: unbudgeted, planned with `force`, or at the floor."""
    gc.collect()
    with tf.Session(graph=case.graph, device=device, memory_budget="1GB" if force or floor else None) as sess:
        sess.run(case.init)
        if force or floor:
            step = sess.step(case.fetches, case.feeds)
            facts = device_facts(sess.runtime)
            budget = planner.floor_plan(step.fetches, step.feed_shapes, facts, graph=step.graph).budget_bytes \
                if floor else None
            step.use_plan(planner.plan(step.fetches, step.feed_shapes, facts, budget, graph=step.graph,
                                       force=force))
        fetched = [[v for v in sess.run(case.fetches, case.feeds) if v is not None] for _ in range(RUNS)]
        variables = {v.op.name: sess.run(v) for v in case.graph.get_collection("variables")}
    return fetched, variables


def _assert_same(got, want, device: str, what: str) -> None:
    tol = TOL[device]
    for i, (a, b) in enumerate(zip(got[0], want[0])):
        for j, (u, v) in enumerate(zip(a, b)):
            np.testing.assert_allclose(u, v, rtol=tol, atol=tol / 10, err_msg=f"{what}: step {i}, fetch {j}")
    for name, value in want[1].items():
        np.testing.assert_allclose(got[1][name], value, rtol=tol, atol=tol / 10, err_msg=f"{what}: {name}")


CASES = {"gan": _gan, "assign": lambda: _state("assign"), "ema": lambda: _state("ema"),
         "counter": lambda: _state("counter")}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CASES))
def test_a_variable_written_and_read_in_one_run_computes_the_unbudgeted_steps_values_under_any_plan(name, device):
    case = CASES[name]()
    want = _run(case, device)
    _assert_same(_run(case, device, force=(1, 1)), want, device, f"{name} planned whole")
    _assert_same(_run(case, device, floor=True), want, device, f"{name} at its floor")


def test_a_gan_step_is_no_micro_batch_step_and_its_floor_runs_it_whole():
    """Micro-batches update once, after all of them, but the generator's gradients (rows of the batch) read the
    discriminator's updated weights: refused, naming an op that reads them; the floor runs the step whole."""
    case = _gan()
    with tf.Session(graph=case.graph, memory_budget="1GB") as sess:
        step = sess.step(case.fetches, case.feeds)
        with pytest.raises(planner.PlanError, match=r"cannot micro-batch: '.*' has rows of the batch and depends on "
                                                    r"updated variables \(MatMul 'gradients_1/D_1/.*' runs after an "
                                                    r"update whose value it reads.*run the train ops in separate"):
            planner.plan(step.fetches, step.feed_shapes, "cpu", graph=step.graph, force=(4, 1))
        assert planner.floor_plan(step.fetches, step.feed_shapes, device_facts("cpu"),
                                  graph=step.graph).microbatches == 1


def test_the_plan_orders_reads_and_writes_of_a_variable_as_the_executor_does():
    """liveness.dependency_graph: each read a creation order puts after an update of its variable is after it in
    the graph the planner orders by, each read before it before it (the GAN's generator gradient through D's
    kernel, made after D's update, and D's own backward's read, made before it)."""
    from tfplus.framework import needed_ops, topo_order
    from tfplus.planner.liveness import dependency_graph
    case = _gan()
    ops = needed_ops(case.fetches, set(case.feeds))
    g = dependency_graph(ops, set(case.feeds))
    pos = {op: i for i, op in enumerate(topo_order(ops))}
    kernel = case.graph.get_tensor_by_name("D/h/kernel:0")
    update = next(op for op in ops if op.op_def.ref_inputs and op.inputs[0] is kernel)
    readers = [op for op in ops if op.type == "MatMul" and any(t.op.name == "D/h/kernel/read" for t in op.inputs)]
    before = [r for r in readers if pos[r] < pos[update]]
    after = [r for r in readers if pos[r] > pos[update]]
    assert before and after, [r.name for r in readers]
    assert all(g.has_edge(r, update) for r in before) and all(g.has_edge(update, r) for r in after)
