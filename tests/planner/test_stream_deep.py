"""A streamed prefix of two blocks that keeps its pools' outputs beside their argmax (Prefix.keep = KEEP_OUTPUTS),
and a streamed prefix whose convolutions get scratch divisors of their own where the step peaks (_Step._spread).
Both train as the plain step on every device, and their planned bytes are the measured ones."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import (
    assert_close_training,
    assert_planned_bytes_are_measured,
    cnn_feeds,
    train_planned,
    train_session_step,
)

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install, measure_device_step
from tfplus.planner.plan import KEEP_ARGMAX, KEEP_OUTPUTS, DeviceFacts, Prefix, _Step
from tfplus.runtime.facts import device_facts

DEEP = ("MaxPool_1:0", 2, 1, 0, KEEP_OUTPUTS)  # both blocks in 2 micro-batches, keeping pool1's output
H200 = DeviceFacts("opencl", "opencl", 128, 132)  # a GPU of 132 compute units (planned, not run)


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


def two_blocks(hidden: int = 16):
    """Mentee's first two blocks, small: conv1, conv2 (4 channels), pool1, conv3, conv4 (8), pool2, one hidden layer."""
    import tfplus.train  # noqa: F401  (tf.train, until tfplus/__init__ imports it)
    from tfplus.graphs import get_model, training_graph
    return training_graph(get_model("mentee").build, total_steps=10, seed=0, image_shape=(3, 16, 16),
                          model_kwargs={"conv_widths": (4, 4, 8, 8), "fc_widths": (hidden,)})


def _forward_convs(ph) -> list[str]:
    return sorted(op.name.split("/")[0] for op in ph.order if op.type in ("Conv2D", "_FusedConv2DBiasRelu"))


def _step(tg, feeds, facts):
    shapes = {t: getattr(v, "shape", v) for t, v in feeds.items()}  # arrays, or their shapes
    return _Step([tg.train_op, tg.loss], shapes, facts, tg.graph, None)


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_a_deep_prefix_keeping_its_pools_outputs_trains_as_the_plain_step(device):
    tg = two_blocks()
    feeds = cnn_feeds(tg, batch=8)
    want = train_planned(tg, feeds, device)[:2]
    losses, weights, p, bound = train_planned(tg, feeds, device, (1, 1, False, 1, 0, DEEP))
    assert bound.phase == len(p.phases) - 1, "the session ran the step by the plan, to its last phase"
    assert_close_training((losses, weights), want)
    assert not np.allclose(losses[0], losses[1]), "the step trains"
    assert sorted(t.name for t in p.stream.saved) == ["MaxPool:0", "MaxPool:1", "MaxPool_1:1"]
    # conv3's filter gradient reads pool1's kept rows: the prefix backward reruns conv1 (conv2's filter gradient
    # reads its output) and conv3 (conv4's), not conv2 for pool1's output
    assert _forward_convs(p.phases[2]) == ["conv1", "conv3"]
    argmax = train_planned(tg, feeds, device, (1, 1, False, 1, 0, DEEP[:4] + (KEEP_ARGMAX,)))[2]
    assert _forward_convs(argmax.phases[2]) == ["conv1", "conv2", "conv3"]


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_the_sessions_step_streams_a_deep_prefix_keeping_its_pools_outputs(device):
    tg = two_blocks()
    feeds = cnn_feeds(tg, batch=8)
    want = train_planned(tg, feeds, device)[:2]

    def plan_for(step, facts):
        return planner.plan(step.fetches, step.feed_shapes, facts, graph=step.graph, force=(1, 1, False, 1, 0, DEEP))
    *got, p = train_session_step(tg, feeds, device, plan_for)
    assert len(p.stream.saved) == 3 and _forward_convs(p.phases[2]) == ["conv1", "conv3"]
    assert_close_training(got, want)


def test_a_deep_prefix_keeping_its_pools_outputs_planned_bytes_are_measured_bytes():
    tg = two_blocks()
    feeds = cnn_feeds(tg, batch=32)
    assert_planned_bytes_are_measured(tg, feeds, force=(1, 1, False, 1, 0, ("MaxPool_1:0", 4, 1, 0, KEEP_OUTPUTS)))


def test_keeping_the_pools_outputs_is_priced_below_rerunning_the_first_block_and_offered():
    """Against the same deep prefix keeping the argmax only (its backward reruns conv1 for pool1's output)."""
    tg = two_blocks()
    feeds = cnn_feeds(tg, batch=32)
    step = _step(tg, feeds, device_facts("opencl"))
    argmax, outputs = (Prefix("MaxPool_1:0", 2, keep=level) for level in (KEEP_ARGMAX, KEEP_OUTPUTS))
    assert step.overhead(1, 1, False, 1, 0, outputs) < step.overhead(1, 1, False, 1, 0, argmax)
    offered = [kc.stream for kc in step.candidates(planner.TRANSFORMATIONS)]
    assert outputs in offered and Prefix("MaxPool:0", 2, keep=KEEP_ARGMAX) in offered
    # the first block's cut keeps nothing more (its pool's output is the cut): no such candidate
    assert Prefix("MaxPool:0", 2, keep=KEEP_OUTPUTS) not in offered


def test_spread_divisors_lower_the_peak_where_the_step_peaks_on_a_big_gpu():
    """Mentee at batch 128 planned for 132 compute units, whose filter gradients' split sums are the largest scratch:
    each round divides the one live where the step peaks, the peak falls, the model prices the divided filter
    gradients, and the search offers such prefixes."""
    device_facts("opencl")  # registers the opencl kernels, whose declarations are the plan's scratch
    tg = mentee()
    step = _step(tg, {tg.images: (128, 3, 32, 32), tg.labels: (128,)}, H200)
    s = Prefix("MaxPool:0", 2, keep=KEEP_ARGMAX)
    rounds = step.keeping(0)[0].spread_rounds("MaxPool:0", 2, False, 1)
    assert len(rounds) >= 2, rounds
    peaks = [step.build(1, 1, False, 1, 0, s._replace(rounds=b), place=False).lower_bound_bytes
             for b in [0] + rounds]
    assert peaks[-1] < peaks[0], peaks
    prices = [step.overhead(1, 1, False, 1, 0, s._replace(rounds=b)) for b in [0] + rounds]
    assert prices == sorted(prices) and prices[-1] > prices[0], prices
    own = step.keeping(0)[0]._spread("MaxPool:0", 2, False, 1, rounds[-1])
    assert own and all("BackpropFilter" in op.type for op in own), own
    assert s._replace(rounds=rounds[-1]) in [kc.stream for kc in step.candidates(planner.TRANSFORMATIONS)]


def mentee():
    import tfplus.train  # noqa: F401  (tf.train, until tfplus/__init__ imports it)
    from tfplus.graphs import get_model, training_graph
    return training_graph(get_model("mentee").build, total_steps=10, seed=0)


def wide(batch: int):
    """A CNN whose filter gradients' split sums are the largest scratch on a device of a few compute units: conv3
    (16 -> 64 channels) at 8x8."""
    import tfplus.train  # noqa: F401  (tf.train, until tfplus/__init__ imports it)
    from tfplus.graphs import get_model, training_graph
    tg = training_graph(get_model("mentee").build, total_steps=10, seed=0, image_shape=(3, 16, 16),
                        model_kwargs={"conv_widths": (4, 16, 64), "fc_widths": (16,)})
    return tg, cnn_feeds(tg, batch=batch)


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_a_spread_prefix_trains_as_the_plain_step_and_measures_its_planned_peak(device):
    """The divisors as the executor runs them (each op's own, life.scratch_ops): the plain step's losses and weights;
    NumPy data (cpu, assert_planned_bytes_are_measured's own session) or the device ledger (opencl) at the plan's
    peak."""
    tg, feeds = wide(8)
    fetches = [tg.train_op, tg.loss]
    want = train_planned(tg, feeds, device)[:2]
    gc.collect()
    with tf.Session(graph=tg.graph, device=device, memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        facts = device_facts(sess.runtime)
        rounds = _step(tg, feeds, facts).keeping(0)[0].spread_rounds("MaxPool:0", 2, False, 1)
        assert rounds, "a round divides some convolution's scratch"
        force = (1, 1, False, 1, 0, Prefix("MaxPool:0", 2, 1, rounds[-1], KEEP_ARGMAX))
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, facts, graph=tg.graph, force=force)
        assert any(ph.life.scratch_ops for ph in p.phases)
        install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(2)]
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
        m = measure_device_step(sess, fetches, feeds) if device == "opencl" else None
    assert_close_training((losses, weights), want)
    if device == "cpu":
        assert_planned_bytes_are_measured(tg, feeds, force=force)
    else:
        assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)



# (model, forced candidate): the shapes of the plans the H200's facts choose for Mentee at 36 and 24 MB (a prefix
# streamed on the copy that recomputes conv1, keeping the argmax, every scratch divided by 4) and the same prefix
# with spread divisors instead (BENCHMARKS.md, "Mentee under 32 and 24 MB on the H200: launches and passes")
RECOMPUTING = {
    "pool2 in 4, scratch /4": (two_blocks, 4, Prefix("MaxPool_1:0", 4, keep=KEEP_ARGMAX)),
    "pool1 in 2, spread": (lambda: wide(8)[0], 1, Prefix("MaxPool:0", 2, keep=KEEP_ARGMAX)),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
@pytest.mark.parametrize("which", list(RECOMPUTING))
def test_a_kept_prefix_on_the_recomputing_copy_trains_as_the_plain_step_and_measures_its_planned_peak(which, device):
    """A prefix streamed on the copy of the step that recomputes conv1's output (level 1), keeping the argmax, under a
    scratch divisor or spread divisors: the plain step's losses and weights, the planned bytes measured (NumPy data on
    cpu, the device ledger on opencl)."""
    build, d, s = RECOMPUTING[which]
    tg = build()
    feeds = cnn_feeds(tg, batch=8)
    fetches = [tg.train_op, tg.loss]
    want = train_planned(tg, feeds, device)[:2]
    gc.collect()
    with tf.Session(graph=tg.graph, device=device, memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        facts = device_facts(sess.runtime)
        step = _step(tg, feeds, facts)
        assert [t.name for t in step.view(1).remat.tensors] == ["conv1/Relu:0"]
        if d == 1:
            rounds = step.keeping(1)[0].spread_rounds(s.cut, s.microbatches, False, 1)
            assert rounds, "a round divides some convolution's scratch"
            s = s._replace(lanes=1, rounds=rounds[-1])
        force = (1, 1, False, d, 1, s)
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, facts, graph=tg.graph, force=force)
        assert p.recomputed == ["conv1/Relu:0"] and p.stream_microbatches == s.microbatches
        assert p.scratch_divisor == d and (d > 1 or any(ph.life.scratch_ops for ph in p.phases))
        install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(2)]
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
        m = measure_device_step(sess, fetches, feeds) if device == "opencl" else None
    assert_close_training((losses, weights), want)
    if device == "cpu":
        assert_planned_bytes_are_measured(tg, feeds, force=force)
    else:
        assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)
