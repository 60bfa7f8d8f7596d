"""A micro-batched step of a narrowed MobileNet on the cpu holds, to the byte, the NumPy data its plan says, while
its caller holds the weights it read after an earlier step: engine.memory.measure_step counted those copies (and the
arena's alignment padding) as the step's, 154,536 bytes over the plan of a wider MobileNet at batch 16."""
from __future__ import annotations

import gc
import tracemalloc

from modelcheck import random_feeds

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import measure_step
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.runtime.facts import device_facts


def test_a_step_holds_its_planned_bytes_beside_the_weights_its_caller_read():
    tg = training_graph(mobilenet, total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (4, 8, 8)})
    feeds = random_feeds(tg, 4, 8)
    fetches = [tg.train_op, tg.loss]
    gc.collect()
    with tf.Session(graph=tg.graph, device="cpu", memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        # (planned untraced: the trace slows the planner tenfold)
        p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), 1 << 30, graph=step.graph,
                         force=(2, 1))
        tracemalloc.start(16)  # before the session allocates its variables and arena (measure_step)
        try:
            step.use_plan(p)
            sess.run(tg.init_op)
            sess.run(fetches, feeds)
            weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
            m = measure_step(sess, fetches, feeds)
        finally:
            tracemalloc.stop()
    assert p.microbatches == 2 and weights
    assert m["feeds"] == p.feed_bytes
    assert m["held"] == p.fixed_bytes - p.feed_bytes + p.arena_bytes, (m, p.fixed_bytes, p.arena_bytes)
    assert m["padding"] == p.alignment and m["pool_kept"] == 0, m
