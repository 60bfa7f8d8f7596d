"""A fetch the step merges (the loss, the accuracy) computed by the first statistics pass that makes its rows'
inputs (planner.crossbatch._adds): rows made from the pass's own by ops cheaper than a layer (the accuracy's
per-example hits from the logits) no longer send it to the micro-batch run, which would keep the last layer's input
through every pass to recompute the head. The step trains as the unsplit step does."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import random_feeds

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.runtime.facts import device_facts

DEVICES = ["cpu", pytest.param("opencl", marks=needs_opencl)]


def _net():
    """MobileNet's first blocks, narrow, at 8x8, batch 16; its step fetches the loss and the accuracy."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (8, 16, 16)})
    return tg, random_feeds(tg, 16, 8), [tg.train_op, tg.loss, tg.accuracy]


def _plan(tg, feeds, fetches, facts):
    return planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, facts, graph=tg.graph, force=(4, 1))


def test_the_accuracy_is_computed_by_a_pass():
    """The accuracy (argmax of the logits against the labels: rows of its own) and the loss come from a statistics
    pass, and the micro-batch run normalizes no layer the passes normalized for the head."""
    tg, feeds, fetches = _net()
    p = _plan(tg, feeds, fetches, device_facts("cpu"))
    where = {t: ph.name for ph in p.phases for t in ph.fetches if not isinstance(t, tf.Operation)}
    for t in (tg.accuracy, tg.loss):
        assert where[p.tensor_map[t]].startswith("statistics pass"), t.name
    last = next(ph for ph in p.phases if ph.name == "micro-batch")
    assert not any(op.type == "ArgMax" for op in last.order)


@pytest.mark.parametrize("device", DEVICES)
def test_the_step_with_the_accuracy_in_a_pass_trains_as_the_unsplit_step(device):
    """Three steps: losses, accuracies and variables as the unsplit step's."""
    tg, feeds, fetches = _net()
    runs = {}
    for split in (False, True):
        gc.collect()
        with tf.Session(graph=tg.graph, device=device, memory_budget="1GB") as sess:
            sess.run(tg.init_op)
            if split:
                install(sess, fetches, _plan(tg, feeds, fetches, device_facts(sess.runtime)))
            values = [sess.run(fetches, feeds)[1:] for _ in range(3)]
            variables = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
        runs[split] = values, variables
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-5)
    for name, w in runs[False][1].items():
        np.testing.assert_allclose(runs[True][1][name], w, rtol=1e-5, atol=1e-5, err_msg=name)
