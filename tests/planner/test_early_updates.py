"""Each variable's update right after the statistics pass that finishes its gradient (planner.batch.update_groups,
issue 34's lever (b)): where no later run reads the variable, a share of its update op runs after that pass's last
merge and the gradient's accumulator ends there. The step trains as the unsplit step (weights, slots, global step)
on the cpu and PoCL for the trainer's Nesterov momentum with weight decay, Adam and plain SGD, in the bytes planned."""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import assert_measured_is_planned, random_feeds

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import measure_device_step, measure_step
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.ops.fused_ops import apply_groups, split_decay
from tfplus.planner import batch
from tfplus.runtime.facts import device_facts

DEVICES = ["cpu", pytest.param("opencl", marks=needs_opencl)]
OPTIMIZERS = ["nesterov", "adam", "sgd"]


def _mobilenet(optimizer: str):
    """MobileNet's first blocks, narrow, at 8x8, batch 16 (batch norms: statistics passes), weight decay 5e-4."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        optimizer="momentum" if optimizer == "nesterov" else optimizer, nesterov=True,
                        weight_decay=5e-4, model_kwargs={"conv_widths": (8, 16, 16)})
    return tg.graph, [tg.train_op, tg.loss], random_feeds(tg, 16, 8), tg.init_op


def _conv_net(optimizer: str, gated: bool = False):
    """Three 3x3 convolutions, each with a training-mode batch norm, a dense layer, weight decay on the kernels
    (an L2 loss, folded into the update by the session's rewrite) and a decaying rate of the global step; `gated`:
    the train op waits for the loss too (as Keras's training function does: test_update_control_inputs.py)."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        h, kernels = x, []
        for i, (cin, cout) in enumerate([(3, 4), (4, 6), (6, 6)]):
            kernels.append(tf.Variable((rng.standard_normal((3, 3, cin, cout)) / 3).astype(np.float32)))
            h = tf.nn.conv2d(h, kernels[-1], [1, 1, 1, 1], "SAME")
            h = tf.nn.relu(tf.layers.batch_normalization(h, training=True, momentum=0.9, name=f"bn{i}"))
        kernels.append(tf.Variable((rng.standard_normal((216, 3)) / 15).astype(np.float32)))
        logits = tf.matmul(tf.reshape(h, [-1, 216]), kernels[-1])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        loss = loss + 5e-4 * tf.add_n([tf.nn.l2_loss(k) for k in kernels])
        step = tf.train.get_or_create_global_step()
        lr = tf.train.exponential_decay(0.1, step, 2, 0.5)
        opt = {"nesterov": tf.train.MomentumOptimizer(lr, 0.9, use_nesterov=True),
               "adam": tf.train.AdamOptimizer(lr / 10), "sgd": tf.train.GradientDescentOptimizer(lr)}[optimizer]
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS) + ([loss] if gated else [])):
            train_op = opt.minimize(loss, global_step=step)
        init = tf.global_variables_initializer()
    data = np.random.default_rng(1)
    feeds = {x: data.standard_normal((16, 6, 6, 3)).astype(np.float32), y: data.integers(0, 3, 16).astype(np.int32)}
    return g, [train_op, loss], feeds, init


NETS = {"mobilenet": _mobilenet, "conv_net": _conv_net, "conv_net_gated": lambda opt: _conv_net(opt, gated=True)}
# (net, optimizer): every optimizer on the plain nets; the gated net's updates wait for the batch's loss (issue 34)
CASES = [(name, optimizer) for name in ("conv_net", "mobilenet") for optimizer in OPTIMIZERS] + \
    [("conv_net_gated", "nesterov")]


def _train(net, device: str, split: bool, early: bool = True, measure: bool = False):
    """Three steps' losses and every variable after them (slots and global step too), of the session's rewritten
    step unsplit or in 4 micro-batches (kept rows chosen as for a roomy budget: the passes start from them); the
    plan and the third step's measured bytes."""
    graph, fetches, feeds, init = net
    gc.collect()
    p = m = None
    with tf.Session(graph=graph, device=device, memory_budget="1GB") as sess:
        if split:
            step = sess.step(fetches, feeds)
            batch.EARLY_UPDATES = early
            try:
                p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), 10**9,
                                 graph=step.graph, force=(4, 1))
            finally:
                batch.EARLY_UPDATES = True
        if measure and device == "cpu":
            tracemalloc.start(16)  # before the session allocates its variables and arena (measure_step)
        try:
            if split:
                step.use_plan(p)
            sess.run(init)
            losses = [sess.run(fetches, feeds)[1] for _ in range(2)]
            if measure:
                m = (measure_step if device == "cpu" else measure_device_step)(sess, fetches, feeds)
            else:
                losses.append(sess.run(fetches, feeds)[1])
            variables = {v.op.name: sess.run(v) for v in graph.get_collection("variables")}
        finally:
            if tracemalloc.is_tracing():
                tracemalloc.stop()
    return losses, variables, p, m


def _assert_same(got, want, tol: float = 1e-5) -> None:
    n = min(len(got[0]), len(want[0]))  # (a measured step's loss is not kept)
    np.testing.assert_allclose(got[0][:n], want[0][:n], rtol=1e-5, atol=1e-6)
    assert got[1].keys() == want[1].keys()
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=tol, atol=tol / 10, err_msg=name)


def _reads(p, i: int) -> set[str]:
    return {op.name for op in p.phases[i].order if op.type == "VariableV2"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, optimizer", CASES)
def test_early_updates_train_as_the_unsplit_step_in_the_planned_bytes(name, optimizer, device):
    """Updates run after the passes that finish their gradients: the weights, slots and global step after three
    steps and the losses are the unsplit step's; the plan holds the bytes it planned (cpu: NumPy data; opencl:
    the device ledger, to the byte), no more than the plan without early updates."""
    net = NETS[name](optimizer)
    got = _train(net, device, True, measure=True)
    p = got[2]
    assert p.shares and all(s.after < len(p.statistics) for s in p.shares)
    # Adam divides each gradient by its own root mean square: a tiny one's summation order shows 10x more
    _assert_same(got, _train(net, device, False), 1e-4 if optimizer == "adam" else 1e-5)
    if device == "cpu":
        assert_measured_is_planned(got[3], p)
    else:
        assert got[3]["peak"] == p.peak_bytes, (got[3], p.peak_bytes)
    graph, fetches, feeds, _ = net
    with tf.Session(graph=graph, device=device, memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        batch.EARLY_UPDATES = False
        try:
            late = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), 10**9, graph=step.graph,
                                force=(4, 1))
        finally:
            batch.EARLY_UPDATES = True
    assert not late.shares and late.peak_bytes >= p.peak_bytes


def test_a_variable_read_by_a_later_run_keeps_its_update_at_the_end():
    """Of every variable whose gradient a statistics pass merges, the update follows that pass exactly when no
    later run reads the variable; the others (a pass that restarts higher up backprops through their layers)
    stay in the update run, which updates the groups no share took. Without kept rows the passes recompute the
    step from the batch, reading the weights below their layers: fewer move (a norm gradient's dx, fed scale / sigma
    and masked from x and the offset (crossbatch.MASK_FROM_X), reads no scale, so some do)."""
    net = _mobilenet("nesterov")
    graph, fetches, feeds, _ = net
    with tf.Session(graph=graph, device="cpu", memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        facts = device_facts(sess.runtime)
        p = planner.plan(step.fetches, step.feed_shapes, facts, 10**9, graph=step.graph, force=(4, 1))
        bare = planner.plan(step.fetches, step.feed_shapes, facts, graph=step.graph, force=(4, 1))
    moves = _early_moves(p)
    assert moves > _early_moves(bare)


def _early_moves(p) -> int:
    """The variables whose update follows the pass that merges their gradient; checks that exactly those no later
    run reads move, each after that pass, its accumulator ending before the update run."""
    a = len(p.statistics)
    writer = {t: i for i, ph in enumerate(p.phases[:a]) for t in ph.fetches if t not in p.statistics[i]}
    shared = {(op, j): s.after for s in p.shares for op, groups in s.groups.items() for j in groups}
    moves = 0
    for op in p.phases[a + 1].order:
        if op.type != "_FusedApply":
            continue
        for j, group in enumerate(apply_groups(op.attrs["op"], split_decay(list(op.inputs), op.attrs)[0])):
            grad = next((t for t in group if t in writer), None)
            if grad is None:
                continue
            w = writer[grad]
            read_later = any(group[0].op.name in _reads(p, i) for i in range(w + 1, a + 1))
            assert ((op, j) in shared) == (not read_later), (group[0].op.name, w)
            assert shared.get((op, j), w) == w
            assert p.accumulators[grad].end < p.phases[a + 1].start or read_later
            moves += not read_later
    return moves
