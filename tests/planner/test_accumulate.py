"""Gradients written into their accumulators where they are made (planner.accumulate: by the cpu MatMul's accumulate
variant, or by any op into a workspace then added), and the cpu optimizer update through scratch of a piece of a
variable: the plain micro-batched step's results up to float32 rounding (a product made in pieces may be blocked
otherwise by the BLAS), the step's within float tolerance (micro-batches sum in another order), planned == measured
bytes, and the budget search takes it."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from modelcheck import assert_close_training, assert_planned_bytes_are_measured, train_graph

import tfplus as tf
from tfplus import planner
from tfplus.runtime.facts import device_facts

ACCUMULATE = (4, 1, False, 1, 0, None, True)  # 4 micro-batches, gradients accumulated where they are made


@pytest.fixture(autouse=True)
def _small_sites(monkeypatch):
    """Sites of a few kB (the small model's bias gradient one too), so that a small step has both kinds."""
    from tfplus.planner import accumulate
    monkeypatch.setattr(accumulate, "MIN_PIECE_BYTES", 1024)


def _mlp():
    """A two-layer perceptron trained by Nesterov momentum: its weight gradients are MatMuls that only the update
    reads (the cpu MatMul's variant adds them in by pieces) and a BiasAddGrad (made whole and added); its activations
    outweigh its weights, so micro-batches pay."""
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [None, 64])
        y = tf.placeholder(tf.int32, [None])
        rng = np.random.default_rng(0)
        w1 = tf.Variable((rng.standard_normal((64, 1024)) * 0.1).astype(np.float32))
        w2 = tf.Variable((rng.standard_normal((1024, 10)) * 0.1).astype(np.float32))
        b1 = tf.Variable(np.zeros(1024, np.float32))
        logits = tf.matmul(tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w1), b1)), w2)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True).minimize(loss)
        init = tf.global_variables_initializer()
    rng = np.random.default_rng(1)
    feeds = {x: rng.standard_normal((256, 64)).astype(np.float32), y: rng.integers(0, 10, 256).astype(np.int32)}
    return SimpleNamespace(graph=g, train_op=train, loss=loss, init_op=init), feeds


def _plan(tg, feeds, **kw):
    return planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("cpu"),
                        graph=tg.graph, **kw)


def _train(tg, feeds, force=None, steps=3):
    return train_graph(tg.graph, tg.init_op, tg.train_op, tg.loss, feeds, "1GB" if force else None, force, steps)


def test_accumulated_gradients_train_as_the_plain_micro_batches_and_hold_no_buffer():
    tg, feeds = _mlp()
    plain, acc = _plan(tg, feeds, force=ACCUMULATE[:2]), _plan(tg, feeds, force=ACCUMULATE)
    run = acc.phases[0]
    sites = [x for x, _ in run.accumulated.values()]
    assert sorted(x.variant for x in sites) == [False, True, True]
    assert "accumulate" in [t["name"] for t in acc.transformations]
    for x, piece in run.accumulated.values():  # the gradient is its accumulator in the run, its piece is a workspace
        assert run.life.of_tensor[x.grad] is acc.accumulators[x.grad]
        assert all(b.tensor is not x.grad for b in run.life.buffers)
        assert piece.kind == "workspace" and piece.start == piece.end
        assert (piece.nbytes < acc.accumulators[x.grad].nbytes) == x.variant
    assert acc.arena_bytes < plain.arena_bytes
    assert acc.predicted_overhead > plain.predicted_overhead  # its pieces are calls

    same = _train(tg, feeds, ACCUMULATE)
    assert_close_training(_train(tg, feeds, ACCUMULATE[:2]), same)
    whole = _train(tg, feeds)
    np.testing.assert_allclose(same[0], whole[0], rtol=1e-5)
    for name in whole[1]:
        np.testing.assert_allclose(same[1][name], whole[1][name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_accumulated_plan_bytes_are_measured():
    tg, feeds = _mlp()
    assert_planned_bytes_are_measured(tg, feeds, ACCUMULATE)


def test_the_budget_search_accumulates_micro_batches_gradients():
    tg, feeds = _mlp()

    def smallest(transformations):
        p = planner.smallest_plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()},
                                  device_facts("cpu"), graph=tg.graph, transformations=transformations)
        return p, [t["name"] for t in p.transformations]
    (least, names), (without, others) = smallest(planner.TRANSFORMATIONS), \
        smallest(tuple(t for t in planner.TRANSFORMATIONS if t != "accumulate"))
    assert "microbatch" in names and "accumulate" in names and "accumulate" not in others
    assert least.peak_bytes < without.peak_bytes


def test_no_accumulation_without_micro_batches_or_on_a_device_without_the_variant():
    tg, feeds = _mlp()
    from tfplus.planner.plan import _Step
    opencl = _Step([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("opencl"), tg.graph,
                   None)
    assert not opencl._accumulates(0)  # an opencl program replays one recording for every micro-batch
    assert all(not kc.accumulate for kc in opencl.candidates(planner.TRANSFORMATIONS))
    try:
        _plan(tg, feeds, force=(1, 1, False, 1, 0, None, True))
    except planner.PlanError as e:
        assert "micro-batches" in str(e)
    else:
        raise AssertionError("accumulating a step of one run was planned")


def test_fused_update_through_pieces_of_a_variable_is_the_whole_update():
    """The cpu _FusedApply declares scratch of one piece (UPDATE_PIECE elements), not of its largest variable, and
    updates a variable of several pieces to the bits of one pass over it (Nesterov momentum with weight decay)."""
    from tfplus.kernels.numpy import fused
    from tfplus.registry import TensorSpec, declared_scratch, find_kernel
    n = 3 * fused.UPDATE_PIECE + 5
    rng = np.random.default_rng(0)
    var, accum, grad = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    small = rng.standard_normal(7).astype(np.float32)
    lr, momentum, decay = np.float32(0.1), np.float32(0.9), np.float32(5e-4)
    attrs = {"T": tf.float32, "op": "ApplyMomentum", "num_vars": 2, "use_locking": False, "use_nesterov": True,
             "decayed": [1, 0]}

    def ins(v, a, s, sa):
        return [lr, momentum, v, a, grad, s, sa, small * 0.5, decay]
    specs = [TensorSpec(np.shape(x), tf.float32) for x in ins(var, accum, small, small)]
    declared = declared_scratch("_FusedApply", "cpu", specs, attrs)
    assert declared and all(int(np.prod(shape)) == fused.UPDATE_PIECE for shape, _ in declared)

    class Ctx:
        def workspace(self, shape, dtype):
            assert int(np.prod(shape)) <= fused.UPDATE_PIECE
            return np.empty(shape, np.float32)
    kernel = find_kernel("_FusedApply", "cpu", tf.float32)
    pieces = [x.copy() for x in (var, accum, small, small)]
    kernel(Ctx(), ins(*pieces), [], attrs)
    whole = [x.copy() for x in (var, accum, small, small)]
    saved, fused.UPDATE_PIECE = fused.UPDATE_PIECE, n
    try:
        kernel(Ctx(), ins(*whole), [], attrs)
    finally:
        fused.UPDATE_PIECE = saved
    for a, b in zip(pieces, whole):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(pieces[0], var)


def test_a_convolution_gradient_in_batch_chunks_accumulates_as_the_plain_chunks():
    """A filter gradient whose kernel runs in batch chunks (their partial sums added into its output) is
    accumulated around the chunks: the plain plan of the same chunks' results up to float32 rounding."""
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [None, 3, 8, 8])
        y = tf.placeholder(tf.int32, [None])
        rng = np.random.default_rng(0)
        f = tf.Variable((rng.standard_normal((3, 3, 3, 16)) * 0.2).astype(np.float32))
        w = tf.Variable((rng.standard_normal((16 * 8 * 8, 10)) * 0.05).astype(np.float32))
        h = tf.nn.relu(tf.nn.conv2d(x, f, [1, 1, 1, 1], "SAME", data_format="NCHW"))
        logits = tf.matmul(tf.reshape(h, [-1, 16 * 8 * 8]), w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    rng = np.random.default_rng(1)
    feeds = {x: rng.standard_normal((16, 3, 8, 8)).astype(np.float32), y: rng.integers(0, 10, 16).astype(np.int32)}
    tg = SimpleNamespace(graph=g, train_op=train, loss=loss, init_op=init)
    force = (2, 2, False, 1, 0, None, True)
    p = _plan(tg, feeds, force=force)
    convs = [op for op in p.phases[0].accumulated if op.type == "Conv2DBackpropFilter"]
    assert convs and p.chunks.get(convs[0]) == 2
    assert_close_training(_train(tg, feeds, force[:2]), _train(tg, feeds, force))
    assert_planned_bytes_are_measured(tg, feeds, force)
