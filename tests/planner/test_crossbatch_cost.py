"""What a micro-batched step with statistics passes (planner.crossbatch) costs: which runs it repeats, and that
the OpenCL device replays it as one tape."""
from __future__ import annotations

import numpy as np
from conftest import needs_opencl
from modelcheck import random_feeds

from tfplus import planner
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.runtime.facts import device_facts

FORWARD = ("Conv2D", "DepthwiseConv2dNative", "MatMul")


def test_the_micro_batch_run_starts_from_the_rows_the_passes_kept():
    """The last backward pass keeps the lowest norm gradient's dy, so the micro-batch run (the first layer's
    filter gradient, which no pass could compute before that norm's statistics) recomputes no layer's forward.
    It recomputed the whole forward and backward pass in every micro-batch where its room was sized by the run
    that recomputes them (a full step per micro-batch: MobileNet b16, 4 micro-batches, 8,399 launches a step
    on PoCL, now 6,259)."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (4, 8, 8)})
    feeds = random_feeds(tg, 8, 8)
    p = planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("cpu"),
                     graph=tg.graph, force=(2, 1))
    micro = next(ph for ph in p.phases if ph.name == "micro-batch")
    assert [op.type for op in micro.order if op.type in FORWARD] == []
    assert any(x.last == len(p.statistics) for x in p.kept)  # a span read by the micro-batch run


@needs_opencl
def test_a_tape_may_return_arena_views_beside_its_feeds():
    """A planned step's feeds and fetches can be views of one arena (its statistics passes feed the kept rows,
    pooled feeds may share a buffer with it): a tape refuses a run only when a fetched view overlaps a fed one
    (a replay would return the recorded buffer), not when it shares the feed's buffer. Refused by buffer, the
    budgeted MobileNet step on the H200 ran every pass launcher by launcher."""
    from tfplus.kernels.opencl.elementwise import scale
    from tfplus.runtime import opencl
    rt = opencl.OpenCLRuntime()
    arena = rt.allocate_arena(4096, rt.arena_alignment)
    feed = rt.sub_buffer(arena, 0, (16,), np.float32)
    apart = rt.sub_buffer(arena, 1024, (16,), np.float32)
    within = rt.sub_buffer(arena, 0, (8,), np.float32)
    for fetched, replayable in ((apart, True), (within, False)):
        assert rt.tape_begin([feed], [])
        rt.copy(fetched, feed[:fetched.shape[0]])
        scale(rt, fetched, 2.0)
        tape = rt.tape_end([fetched])
        assert isinstance(tape, str) != replayable, tape


def test_a_norm_s_per_channel_values_are_computed_by_one_pass():
    """A norm's 1 / sigma (with its mean, variance and scale / sigma) is computed once per micro-batch by the
    first pass that can, and fed to the later passes and the micro-batch run, which recomputed it each."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (4, 8, 8)})
    feeds = random_feeds(tg, 8, 8)
    p = planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("cpu"),
                     graph=tg.graph, force=(2, 1))
    norms = sum(op.type == "FusedBatchNormV3" and op.attrs.get("is_training", True) for op in tg.graph._ops)
    computed = [ph.name for ph in p.phases for op in ph.order if op.type == "_BatchNormFromMoments"]
    assert len(computed) == norms, computed
    assert "micro-batch" not in computed
