"""Recomputation in the memory planner (planner.recompute): exact on both devices, planned == measured bytes,
chosen by the cost model before micro-batching where it fits, never applied to random ops."""
from __future__ import annotations

import gc
import re

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import assert_same_training, cnn_feeds, small_cnn, train_graph, train_opencl, train_steps

import tfplus as tf
from tfplus import planner
from tfplus.planner import recompute
from tfplus.planner.arena import check_no_overlap
from tfplus.registry import has_tag
from tfplus.runtime.facts import device_facts


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


def _shapes(feeds):
    return {t: v.shape for t, v in feeds.items()}


@pytest.mark.parametrize("force", [(1, 1, False, 1, 1), (1, 1, True, 1, 2), (2, 1, True, 1, 1),
                                   (1, 2, False, 4, 1)],
                         ids=["recompute1", "compact_recompute2", "compact_micro2_recompute1", "chunks2_scratch4"])
def test_recomputation_trains_bit_identically_on_cpu(force):
    """Two training steps with activations recomputed give the same bits as the same plan without."""
    tg = small_cnn()
    feeds = cnn_feeds(tg)
    p = planner.plan([tg.train_op, tg.loss], _shapes(feeds), graph=tg.graph, force=force)
    assert p.recomputed and p.recomputed[0] == "conv1/Relu:0", p.recomputed
    assert any(t["name"] == "recompute" for t in p.transformations)
    check_no_overlap(p.buffers)
    assert_same_training(train_steps(tg, feeds, budget="1GB", force=force[:4]),
                         train_steps(tg, feeds, budget="1GB", force=force))


def test_recomputed_activation_lives_only_beside_its_reader():
    """The dropped ReLU output dies at its forward reader; each backward reader gets its own copy, made right
    before it, and the saved bytes lower the liveness bound."""
    tg = small_cnn()
    shapes = _shapes(cnn_feeds(tg, batch=32))
    fetches = [tg.train_op, tg.loss]
    plain = planner.plan(fetches, shapes, graph=tg.graph, force=(1, 1, True, 1, 0))
    p = planner.plan(fetches, shapes, graph=tg.graph, force=(1, 1, True, 1, 1))
    ph = p.phases[0]
    pos = {op: i for i, op in enumerate(ph.order)}
    relu = next(op for op in ph.order if op.name == "conv1/Relu")
    readers = [op for op in ph.order if relu.outputs[0] in op.inputs]
    assert all(not op.name.startswith("gradients/") or has_tag(op.type, "shape_only") for op in readers)
    copies = [op for op in ph.order if op.name.startswith("conv1/Relu/recompute_")]
    assert len(copies) == 2  # the next conv's filter gradient and the ReLU's own gradient
    for c in copies:
        (reader,) = c.outputs[0].consumers()
        assert reader.name.startswith("gradients/") and pos[reader] - pos[c] <= 3, (c.name, reader.name)
        # its buffer (the recomputing conv's, which bias and ReLU write over) is made at most 3 steps before
        assert pos[reader] - ph.life.of_tensor[c.outputs[0]].start <= 3
    last_forward = max(pos[op] for op in readers if not op.name.startswith("gradients/"))
    assert ph.life.of_tensor[relu.outputs[0]].end == last_forward, "the original dies at its forward reader"
    assert p.arena_lower_bound_bytes < plain.arena_lower_bound_bytes


def test_planner_picks_recomputation_before_micro_batching():
    """A budget between the recomputed step's peak and the plain step's: recomputation fits it without
    micro-batches (predicted far cheaper on opencl, where each micro-batch costs a step's kernel launches), and
    a tighter budget needs fewer micro-batches with recomputation than without."""
    tg = small_cnn()
    shapes = _shapes(cnn_feeds(tg, batch=32))
    fetches = [tg.train_op, tg.loss]
    opencl = device_facts("opencl")  # registers the opencl kernels (their scratch), whatever ran before
    free = planner.plan(fetches, shapes, opencl, graph=tg.graph)
    budget = int(free.peak_bytes * 0.7)
    old = planner.plan(fetches, shapes, opencl, budget, graph=tg.graph,
                       transformations=("compact", "scratch", "chunk", "microbatch"))
    new = planner.plan(fetches, shapes, opencl, budget, graph=tg.graph)
    assert new.fits and new.microbatches == 1 and new.recomputed, new.summary()
    assert old.microbatches > 1 and new.predicted_overhead < old.predicted_overhead
    (t,) = [t for t in new.transformations if t["name"] == "recompute"]
    assert "conv1/Relu:0" in t["detail"] and 0 < t["predicted_overhead"] < 0.5
    tight = int(free.peak_bytes * 0.4)
    old = planner.plan(fetches, shapes, opencl, tight, graph=tg.graph,
                       transformations=("compact", "scratch", "chunk", "microbatch"))
    new = planner.plan(fetches, shapes, opencl, tight, graph=tg.graph)
    assert new.fits and new.microbatches <= old.microbatches and new.predicted_overhead <= old.predicted_overhead


def test_random_ops_are_never_recomputed():
    """Dropout's mask comes from a random op: no recomputation redraws it (a dropped activation may be
    recomputed from the saved mask, which is exact), and training the same seeded step with and without
    recomputation gives the same bits."""
    import tfplus.train  # noqa: F401
    with tf.Graph().as_default() as g:
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, 64])
        w1 = tf.Variable(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32) * 0.1)
        w2 = tf.Variable(np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32) * 0.1)
        h = tf.nn.dropout(tf.nn.relu(tf.matmul(x, w1)), keep_prob=0.5, seed=3)
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(h), w2)))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    feeds = {x: np.random.default_rng(2).standard_normal((16, 64)).astype(np.float32)}
    p = planner.plan([train, loss], _shapes(feeds), graph=g, force=(1, 1, False, 1, recompute.MAX_LEVEL))
    assert p.recomputed
    copies = [op for ph in p.phases for op in ph.order if "/recompute_" in op.name]
    assert copies and not any(op.op_def.stateful for op in copies)

    assert_same_training(train_graph(g, init, train, loss, feeds, "1GB", (1, 1)),
                         train_graph(g, init, train, loss, feeds, "1GB", (1, 1, False, 1, recompute.MAX_LEVEL)))


@needs_opencl
def test_recomputation_on_opencl_is_exact_and_measured_to_the_byte():
    """On the opencl device (PoCL) recomputation gives the same bits as the plan without it, and the runtime's
    ledger of device memory peaks at the plan's peak, with no device allocation during the step."""
    force = (2, 1, True, 1, 1)  # compact state, 2 micro-batches, one activation recomputed
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=16)
    gc.collect()
    want = train_opencl(tg, feeds, force[:4])
    got = train_opencl(tg, feeds, force)
    p, m = got[2], got[3]
    assert p.recomputed and m["allocations"] == 0
    assert m["peak"] == p.peak_bytes, (m, p.peak_bytes)
    assert p.peak_bytes < want[2].peak_bytes
    assert_same_training(want, got)


def test_plan_cli_says_what_it_chose_and_why(capsys):
    """`tfplus plan --device opencl` under a budget the plain step exceeds: the summary lists recomputation
    with its predicted cost and the line saying why this combination was chosen (predicted step time)."""
    import argparse

    from tfplus import plan_cli
    parser = argparse.ArgumentParser()
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    base = ["plan", "--batch-size", "16", "--widths", "8,8,16,16,32", "--device", "opencl"]
    step = plan_cli._TrainStep(parser.parse_args(base))
    # a budget that compact state alone cannot reach and recomputation can
    lo, hi = (planner.smallest_plan(step.planned, step.shapes(16), device_facts("opencl"), graph=step.graph,
                                    transformations=t).peak_bytes for t in (("compact", "recompute"), ("compact",)))
    assert lo < hi
    args = parser.parse_args(base + ["--memory-budget", str((lo + hi) // 2)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    chosen = out.split("smallest feasible budget")[0]  # the floor's own plan may stream micro-batches
    assert "+ recompute: " in chosen and "conv1/Relu:0" in chosen and "micro-batches" not in chosen, out
    assert re.search(r"chosen: (\w+ \+ )*recompute( \+ \w+)*: the cheapest of the combinations that fit, by "
                     "predicted step time on opencl", out), out


@needs_opencl
def test_opencl_scratch_divisor_shrinks_the_filter_gradients_partials():
    """On opencl the scratch divisor splits the filter gradients' long sums fewer ways (a device of 8 compute
    units splits them): smaller declared partials, the ledger still at the plan's peak, the same training."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=16)
    gc.collect()
    want = train_opencl(tg, feeds, (1, 1), compute_units=8)
    got = train_opencl(tg, feeds, (1, 1, False, 16), compute_units=8)

    def partials(p):
        return sum(b.size for ph in p.phases for op, bs in ph.life.workspaces.items()
                   if op.type == "Conv2DBackpropFilter" for b in bs)
    assert 0 <= partials(got[2]) < partials(want[2])
    assert got[3]["peak"] == got[2].peak_bytes and got[3]["allocations"] == 0
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=1e-5, atol=1e-6, err_msg=name)
