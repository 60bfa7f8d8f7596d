"""A streamed step (planner.stream) on a runtime that records launches (opencl) replays as one tape of all its runs,
as a micro-batched step does (memory.Bound._as_one_tape): once two steps after the first recorded the same launches,
a step is one tape play and no launcher launch, where before each of its runs' programs replayed its own tape with
Python between them. By that tape it trains as the unstreamed step, and the device ledger's peak is the plan's."""
from __future__ import annotations

import contextlib
import gc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import assert_close_training, cnn_feeds, recompute_level, small_cnn, train_planned

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install, measure_device_step
from tfplus.runtime.facts import device_facts

pytestmark = needs_opencl

STEPS = 5  # the first finds shapes, the second and third record agreeing tapes, the fourth and fifth play it


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


@contextlib.contextmanager
def _counted(rt):
    """[tape plays, launcher launches] of the runtime while in the block."""
    n = [0, 0]
    play, run = rt.tape_play, rt.run

    def played(*args):
        n[0] += 1
        return play(*args)

    def launched(*args):
        n[1] += 1
        return run(*args)
    rt.tape_play, rt.run = played, launched
    try:
        yield n
    finally:
        del rt.tape_play, rt.run


def _fine_tuned_cnn():
    """small_cnn with its last layer trained only: a streamed prefix without a backward pass (two runs)."""
    import tfplus.train  # noqa: F401  (tf.train, until tfplus/__init__ imports it)
    from tfplus.finetune import select_trainable
    from tfplus.graphs import get_model, training_graph
    return training_graph(get_model("mentee").build, total_steps=10, seed=0, image_shape=(3, 16, 16),
                          model_kwargs={"conv_widths": (4, 8), "fc_widths": (16,)},
                          var_list=lambda vs: select_trainable(vs, None, 1))


@pytest.mark.parametrize("prefix", ["plain", "kept", "recomputing", "fine-tuning"])
def test_a_streamed_step_replays_as_one_tape_training_as_the_plain_step_in_its_planned_peak(prefix):
    tg = _fine_tuned_cnn() if prefix == "fine-tuning" else small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    fetches = [tg.train_op, tg.loss]
    want = train_planned(tg, feeds, "opencl", steps=STEPS + 1)[:2]  # the measured step last
    cut = ("MaxPool:0", 2, 1, 0, True) if prefix == "kept" else ("MaxPool:0", 2)
    force = (1, 1, False, 1, recompute_level(tg, feeds, "opencl") if prefix == "recomputing" else 0, cut)
    gc.collect()  # the ledger counts what earlier sessions left for the collector
    with tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                         graph=tg.graph, force=force)
        bound = install(sess, fetches, p)
        counts, losses = [], []
        for _ in range(STEPS):
            with _counted(sess.runtime) as n:
                losses.append(sess.run(fetches, feeds)[1])
            counts.append(tuple(n))
        with _counted(sess.runtime) as n:
            m = measure_device_step(sess, fetches, feeds)
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
    assert [ph.name for ph in p.phases] == ["prefix", "rest"] + \
        ([] if prefix == "fine-tuning" else ["prefix backward", "update"])
    assert bool(p.stream.saved) == (prefix == "kept") and bool(p.recomputed) == (prefix == "recomputing")
    assert bound.whole.tape is not None, bound.whole.why
    assert all(launches > 0 for _, launches in counts[:3]), counts
    assert counts[3:] == [(1, 0)] * (STEPS - 3) and tuple(n) == (1, 0), (counts, n)
    assert_close_training((losses, weights), (want[0][:STEPS], want[1]))
    assert not np.allclose(losses[0], losses[-1]), "the step trains"
    # the replayed step (the one measured, a tape play too) in the plan's bytes, allocating nothing
    assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)


def test_the_sessions_rewritten_step_keeping_argmax_and_bits_replays_as_one_tape():
    """The step a session runs (fused convolutions, conv1's mask as bits) streamed keeping its argmax."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=16)
    fetches = [tg.train_op, tg.loss]
    want = train_planned(tg, feeds, "opencl", steps=STEPS + 1)[:2]  # the measured step last
    gc.collect()
    with tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        step = sess.step(fetches, feeds)
        p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph,
                         force=(1, 1, False, 1, 0, ("MaxPool:0", 4, 1, 0, True)))
        step.use_plan(p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(STEPS - 1)]
        with _counted(sess.runtime) as n:
            losses.append(sess.run(fetches, feeds)[1])
        m = measure_device_step(sess, fetches, feeds)
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
    assert any(op.type == "_ReluGradBits" for ph in p.phases for op in ph.order)
    assert step.bound.whole.tape is not None and tuple(n) == (1, 0), (step.bound.whole.why, n)
    assert_close_training((losses, weights), (want[0][:STEPS], want[1]))
    assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)
