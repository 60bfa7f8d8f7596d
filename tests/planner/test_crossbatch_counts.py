"""A micro-batch count per run (planner.crossbatch, plan._Step._counts): the statistics passes over the deep,
narrow layers, which start from rows kept whole, run on fewer micro-batches than the runs over the wide ones; the
backward's values that carry a count (kept dy rows and hand-written statistics, k times the whole batch's share in a
run of k micro-batches; not the norms' gradient sums, averaged to the batch's at any count) are scaled where a run
of another count reads them. The step equals the unsplit one on every device."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import random_feeds, rows_net, train_planned

import tfplus as tf
from tfplus import planner
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.planner import crossbatch
from tfplus.runtime.facts import device_facts

DEVICES = ["cpu", pytest.param("opencl", marks=needs_opencl)]


def _net():
    """MobileNet's first blocks, narrow, at 8x8: the deep layers' rows are a few kB at the whole batch."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (8, 16, 16)})
    return tg, random_feeds(tg, 16, 8)


def _train(tg, feeds, device, force=None, steps=5):
    """train_planned's losses, variables and plan, and whether the planned step replayed as one recorded tape
    (opencl: from the fourth step on)."""
    losses, variables, p, bound = train_planned(tg, feeds, device, force, steps, variables="variables")
    return losses, variables, p, bound is not None and bound.whole.tape is not None


def _assert_same(got, want, rtol):
    np.testing.assert_allclose(got[0], want[0], rtol=rtol)
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=rtol, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_runs_of_their_own_counts_equal_the_unsplit_step(device):
    """Forced to 4 micro-batches, some passes take fewer (their runs fit in what the largest run of 4 needs),
    those on one micro-batch write their values straight into the accumulators and kept rows, gradient values
    cross runs of other counts and are scaled, and five steps train as the unsplit step does,
    and as every run in 4 micro-batches does (COUNTS off), in no more bytes."""
    tg, feeds = _net()
    got = _train(tg, feeds, device, force=(4, 1))
    p = got[2]
    assert p.microbatches == 4 and max(p.run_microbatches) == 4 and min(p.run_microbatches) < 4
    assert len(p.run_microbatches) == len(p.statistics) + 1
    # the norms' gradient statistics are the whole batch's sums at any count (crossbatch.Statistics.uncounted):
    # only kept dy rows are scaled for a reader of another count
    assert all(isinstance(v, crossbatch.Kept) for run in p.rescale for v, _ in run), p.rescale
    assert got[3] == (device == "opencl")  # the rescales replay with the whole step's tape
    # a run on one micro-batch writes its statistics and kept rows where they are merged: no copies after it
    written = {t for _, t in p.written}
    assert 1 in p.run_microbatches
    assert bool(written & {x.tensor for x in p.kept}) and bool(written & {t for level in p.statistics for t in level})
    # opencl: its kernels sum in another order than the unsplit step's, as every split step's do
    rtol = 1e-5 if device == "cpu" else 2e-3
    _assert_same(got, _train(tg, feeds, device), rtol)
    crossbatch.COUNTS = False
    try:
        uniform = _train(tg, feeds, device, force=(4, 1))
    finally:
        crossbatch.COUNTS = True
    q = uniform[2]
    assert not q.run_microbatches or set(q.run_microbatches) == {4}
    _assert_same(got, uniform, rtol)
    assert p.peak_bytes <= q.peak_bytes
    assert p.predicted_overhead < q.predicted_overhead  # fewer launches: the cost model counts each run's


def test_rescales_scale_a_gradient_value_where_its_reader_s_count_changes():
    """A backward statistic written by a run of 4 micro-batches carries 4x the whole batch's share: a reader of 4
    takes it as it is, a reader of 2 halves it first, and a later reader of 2 takes the halved value; kept dy rows
    written by a run of 1 are quadrupled for a reader of 4; a forward statistic is never scaled."""
    fwd, bwd, dy = (_Named(n) for n in ("fwd", "bwd", "dy"))
    levels = [[fwd], [bwd], [], [], []]
    kept = crossbatch.Kept(dy, 0, 2)
    reads = [set(), {fwd}, {fwd, bwd, dy}, {bwd}, {bwd}]
    out = crossbatch.rescales([1, 4, 4, 2, 2], levels, [kept], {bwd, kept}, reads)
    assert out == [[], [], [(kept, 4.0)], [(bwd, 0.5)], []]


class _Named:  # a tensor as rescales sees one: a name, hashed by identity
    def __init__(self, name):
        self.name = name


def test_without_kept_rows_every_run_takes_k():
    """A pass that recomputes from the fed batch needs the most bytes at the fewest micro-batches: without kept
    rows (KEEP off) no run is given a count of its own."""
    tg, feeds = _net()
    crossbatch.KEEP = False
    try:
        p = planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("cpu"),
                         graph=tg.graph, force=(4, 1))
    finally:
        crossbatch.KEEP = True
    assert p.statistics and set(p.run_microbatches) == {4} and not any(p.rescale)


def test_a_budgeted_session_gives_its_runs_counts_that_fit_the_budget():
    """Under a memory budget the session's plan gives each run the fewest micro-batches that fit the room the
    budget leaves: the runs' counts differ, the peak fits, and the steps train as the unsplit step does."""
    tg, feeds = _net()
    want = _train(tg, feeds, "cpu", steps=3)
    fetches = [tg.train_op, tg.loss]
    with tf.Session(graph=tg.graph, memory_budget="380kB") as sess:
        sess.run(tg.init_op)
        losses = [sess.run(fetches, feeds)[1] for _ in range(3)]
        variables = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
        p = max(sess.memory_plans, key=lambda p: p.microbatches)
    assert p.microbatches > 1 and len(set(p.run_microbatches)) > 1 and p.peak_bytes <= 380_000
    _assert_same((losses, variables), want, 1e-5)


def _norm_then_moments_net():
    """x (8, 6) -> dense -> a fused batch norm -> tf.nn.moments over the batch written by hand -> dense -> mean
    cross-entropy: the hand-written statistic's gradient is a backward statistic of its own (a Sum over rows)."""
    def stat(h):
        h = tf.reshape(tf.layers.batch_normalization(tf.reshape(h, [-1, 1, 1, 8]), training=True), [-1, 8])
        mean, var = tf.nn.moments(h, [0])
        return (h - mean) / tf.sqrt(var + 1e-3)
    return rows_net(stat)


def _force_counts(monkeypatch, counts) -> None:
    """Every step planned gets these micro-batch counts per run (`counts(n)`: for n runs) instead of the fewest
    that fit: the scaling between runs must hold for any counts, not only for those the sizes choose."""
    chosen = importlib.import_module("tfplus.planner.plan")._Step._counts
    monkeypatch.setattr(importlib.import_module("tfplus.planner.plan")._Step, "_counts",
                        lambda self, k: counts(len(chosen(self, k))))


@pytest.mark.parametrize("device", DEVICES)
def test_runs_of_any_counts_equal_the_unsplit_step(device, monkeypatch):
    """Runs on 1, 2 and 4 micro-batches in turn, whatever their sizes ask: the norms' statistics cross runs of
    other counts unscaled and the steps train as the unsplit one."""
    _force_counts(monkeypatch, lambda n: tuple((1, 2, 4)[i % 3] for i in range(n)))
    tg, feeds = _net()
    got = _train(tg, feeds, device, force=(4, 1))
    assert len(set(got[2].run_microbatches)) == 3
    assert all(isinstance(v, crossbatch.Kept) for run in got[2].rescale for v, _ in run)
    _assert_same(got, _train(tg, feeds, device), 1e-5 if device == "cpu" else 2e-3)


def test_a_hand_written_backward_statistic_is_scaled_between_counts(monkeypatch):
    """The gradient of tf.nn.moments written by hand sums dy over the batch (a statistic merged 'sum', not a
    norm's, which carries the count of the run that wrote it): written by a run on one micro-batch and read by
    runs on 4, it is scaled by 4, and the step trains as the unsplit one."""
    _force_counts(monkeypatch, lambda n: (1,) * (n - 2) + (4, 4))
    tg, feeds = _norm_then_moments_net()
    got = _train(tg, feeds, "cpu", force=(4, 1), steps=3)
    scaled = [(v, f) for run in got[2].rescale for v, f in run if not isinstance(v, crossbatch.Kept)]
    assert any(v.op.type == "Sum" and "FusedBatchNorm" not in v.name and f == 4 for v, f in scaled), scaled
    _assert_same(got, _train(tg, feeds, "cpu", steps=3), 1e-5)
