"""A norm's output rows kept between statistics passes where the room allows (planner.crossbatch.filled,
Statistics.outputs, plan._Step._fill_outputs): a backward pass reads the output of its norm's layer and of the layer
above, and the pass before computed the latter, so keeping it saves a normalization per pass. The norms' inputs and
gradients are chosen first, as without; the outputs fill only the room each run leaves at its own count, and the
plan keeps them only where they are predicted cheaper. The step trains as the unsplit step does."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import random_feeds, train_planned

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.planner import crossbatch
from tfplus.runtime.facts import device_facts

DEVICES = ["cpu", pytest.param("opencl", marks=needs_opencl)]
# the small net's rows fill these; one norm's output still fits beside them (the devices' alignments differ)
BUDGETS = {"cpu": 480_000, "opencl": 440_000}


def _net():
    """MobileNet's first blocks, narrow, at 8x8, batch 16."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (8, 16, 16)})
    return tg, random_feeds(tg, 16, 8)


def _plan(tg, feeds, outputs: bool, monkeypatch, device="cpu", facts=None):
    monkeypatch.setattr(crossbatch, "KEEP_OUTPUTS", outputs)
    return planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()},
                        facts or device_facts(device), BUDGETS[device], graph=tg.graph, force=(4, 1))


def _normalizations(p) -> int:
    """The normalizations a step launches: each run's times its micro-batch count."""
    return sum(n for ph, n in zip(p.phases, p.run_microbatches) for op in ph.order if op.type == "_BatchNormApply")


def _outputs(p) -> list[str]:
    return [x.tensor.name for x in p.kept if x.tensor.op.type == "_BatchNormApply"]


def test_outputs_fill_the_room_the_runs_leave(monkeypatch):
    """With the outputs, a norm's output is kept and the step launches fewer normalizations, in the same counts and
    peak as without (the outputs take only room the runs leave at their counts), predicted cheaper."""
    tg, feeds = _net()
    without = _plan(tg, feeds, False, monkeypatch)
    with_outputs = _plan(tg, feeds, True, monkeypatch)
    assert _outputs(without) == [] and _outputs(with_outputs)
    assert _normalizations(with_outputs) < _normalizations(without)
    assert with_outputs.run_microbatches == without.run_microbatches
    assert with_outputs.peak_bytes <= without.peak_bytes and with_outputs.fits
    assert with_outputs.predicted_overhead < without.predicted_overhead
    # the inputs and gradients kept are those chosen without the outputs
    assert {x.tensor.name for x in without.kept} < {x.tensor.name for x in with_outputs.kept}


def test_no_room_no_outputs(monkeypatch):
    """A budget whose runs leave no room for an output keeps none: the plan is the one without."""
    tg, feeds = _net()
    monkeypatch.setattr(crossbatch, "KEEP_OUTPUTS", True)
    p = planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts("cpu"), 600_000,
                     graph=tg.graph, force=(4, 1))
    assert _outputs(p) == [] and p.fits


@pytest.mark.parametrize("device", DEVICES)
def test_kept_outputs_train_as_the_unsplit_step(device, monkeypatch):
    """The plan that keeps a norm's output trains three steps as the unsplit step does, in the bytes planned."""
    tg, feeds = _net()
    want = train_planned(tg, feeds, device, steps=3, variables="variables")
    fetches = [tg.train_op, tg.loss]
    gc.collect()
    with tf.Session(graph=tg.graph, device=device, memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        p = _plan(tg, feeds, True, monkeypatch, device, device_facts(sess.runtime))
        assert _outputs(p) and p.fits
        install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(3)]
        variables = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(variables[name], w, rtol=1e-5, atol=1e-5, err_msg=name)
