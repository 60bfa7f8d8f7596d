"""Run metadata and `tfplus profile`: the Chrome trace, analytic FLOPs, forward/backward/update, op times that
add up to the step, transfers, live bytes; `tfplus train --profile-every`; the executor's shape cache."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

import tfplus as tf
from tfplus import profiler
from tfplus.cli import main
from tfplus.graphs import training_graph
from tfplus.graphs.mentee import mentee
from tfplus.profiler import RunMetadata, RunOptions, chrome_trace, flops

# A Mentee small enough that a traced step takes milliseconds.
SMALL = {"conv_widths": (4, 4, 8, 8, 8), "fc_widths": (8, 8)}
BATCH = 2


def _traced_step(device: str, memory_budget=None):
    """(session plan order, feeds, RunMetadata, outer wall seconds) of one traced training step of SMALL."""
    tg = training_graph(mentee, total_steps=10, model_kwargs=SMALL)
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((BATCH, 3, 32, 32)).astype(np.float32),
             tg.labels: rng.integers(0, 10, BATCH).astype(np.int32)}
    md = RunMetadata()
    with tf.Session(graph=tg.graph, device=device, memory_budget=memory_budget) as sess:
        sess.run(tg.init_op)
        sess.run([tg.train_op, tg.loss], feeds)  # warm-up: the traced step is a steady-state one
        t0 = time.perf_counter()
        sess.run([tg.train_op, tg.loss], feeds, options=RunOptions(trace_level=RunOptions.FULL_TRACE),
                 run_metadata=md)
        outer = time.perf_counter() - t0
        # The run's hooks are gone: nobody told of the runtime's copies, the usual OpenCL queue back.
        assert sess._trace is None and sess.runtime.on_transfer is None
        if device == "opencl":
            assert sess.runtime.queue is sess.runtime.dev.queue
    return tg, feeds, md, outer


@pytest.fixture(scope="module", params=["cpu", "opencl"])
def traced(request):
    from conftest import CPU_ONLY, DEVICES
    if request.param not in DEVICES:
        pytest.skip(f"{CPU_ONLY}=1: cpu device only")
    return request.param, *_traced_step(request.param)


def test_chrome_trace_is_valid_and_has_one_span_per_executed_op(traced):
    device, tg, feeds, md, _ = traced
    trace = json.loads(json.dumps(chrome_trace([md])))
    events = trace["traceEvents"]
    for e in events:
        assert {"ph", "ts", "pid", "tid", "name"} <= set(e), e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
    ts = [e["ts"] for e in events]
    assert ts == sorted(ts)
    ops = [e for e in events if e["ph"] == "X" and e.get("cat") == "op"]
    # Every op the executor ran: the step's ops less the fed placeholders and the variables (no kernel).
    executed = [s.name for s in md.step_stats]
    assert [e["name"] for e in ops] == executed
    names = {op.name for op in tg.graph.get_operations()}
    assert set(executed) <= names
    # the graph rewrite (tfplus.engine.rewrite) runs conv1's Conv2D, BiasAdd and Relu as one op, named as the Relu
    assert "conv1/Relu" in executed and "train_op" in executed
    assert not any(n in executed for n in ("images", "labels", "conv1/weights"))
    assert len([e for e in events if e["ph"] == "C"]) == len(ops)  # the memory counter, after each op
    feeds_in = [t for t in md.transfers if t.op == "feed"]
    assert sum(t.bytes for t in feeds_in) == sum(v.nbytes for v in feeds.values())
    assert any(e["ph"] == "X" and e.get("cat") == "transfer" for e in events)
    if device == "opencl":  # kernel spans from OpenCL event profiling, inside their op's span
        kernels = [e for e in events if e.get("cat") == "kernel"]
        # the graph rewrite (tfplus.engine.rewrite) updates all variables in one op, named as the last update
        (update,) = [s.name for s in md.step_stats if s.type == "_FusedApply"]
        assert update.startswith("train_op/update_") and update.endswith("/ApplyMomentum")
        assert {e["args"]["op"] for e in kernels} >= {"conv1/Relu", update}
        conv = next(s for s in md.step_stats if s.name == "conv1/Relu")
        assert 0 < conv.device_us <= conv.wall_us


def test_op_times_add_up_to_the_step_time(traced):
    """Ops' spans are back to back from the executor's start, so they cover the traced step but for the feeds,
    the plan lookup and the fetches: stated tolerance, at least half of it. (Not of the time measured around run():
    on a busy machine the session's own Python around the step, outside any op, took 60% of that.)"""
    _, _, _, md, outer = traced
    total = sum(s.wall_us for s in md.step_stats)
    assert md.step_us <= outer * 1e6
    assert 0.5 * md.step_us <= total <= md.step_us


def test_live_bytes_and_flops_recorded(traced):
    _, _, feeds, md, _ = traced
    conv = next(s for s in md.step_stats if s.name == "conv1/Relu")  # Conv2D, BiasAdd and Relu as one op
    assert conv.type == "_FusedConv2DBiasRelu"
    assert conv.input_shapes == [(BATCH, 3, 32, 32), (3, 3, 3, 4), (4,)] and conv.output_shapes == [(BATCH, 4, 32, 32)]
    assert conv.flops == 2 * BATCH * 4 * 32 * 32 * 3 * 3 * 3
    assert conv.bytes_written == BATCH * 4 * 32 * 32 * 4
    # Live bytes hold at least the conv's output and the fed images.
    assert conv.live_bytes >= conv.bytes_written + feeds[next(iter(feeds))].nbytes
    assert max(s.live_bytes for s in md.step_stats) == md.summary()["peak_live_bytes"] > 0


def test_phases_of_a_mentee_step(traced):
    _, _, _, md, _ = traced
    phase = {s.name: s.phase for s in md.step_stats}
    assert {s.phase for s in md.step_stats} == {"forward", "backward", "update"}
    for s in md.step_stats:
        if s.name.startswith("gradients/"):
            assert s.phase == "backward", s
        else:
            assert s.phase != "backward", s
        if s.type.startswith("Apply") or s.type == "_FusedApply":
            assert s.phase == "update", s
    assert phase["conv1/Relu"] == phase["fc3/BiasAdd"] == phase["loss/cross_entropy"] == "forward"
    assert phase["gradients/conv2/Conv2D_grad/Conv2DBackpropFilter"] == "backward"
    assert phase["train_op"] == phase["train_op/update"] == "update"  # global step += 1, the group
    # the graph rewrite (tfplus.engine.rewrite) updates the 16 variables in one op, adding the 8 weights' decay
    (update,) = [s for s in md.step_stats if s.type == "_FusedApply"]
    variables = update.input_shapes[2:-1:3]  # (var, accum, grad) each; the decay coefficient last
    assert len(variables) == 16
    assert update.flops == 4 * sum(np.prod(s) for s in variables) + 2 * sum(np.prod(s) for s in variables
                                                                            if len(s) > 1)


def test_layers():
    assert profiler.layer_of("conv2/Conv2D") == "conv2"
    assert profiler.layer_of("gradients/conv2/Conv2D_grad/Conv2DBackpropFilter") == "conv2"
    assert profiler.layer_of("gradients_1/fc1/MatMul_grad/MatMul") == "fc1"
    assert profiler.layer_of("train_op/update_fc3/biases/ApplyMomentum") == "fc3"
    assert profiler.layer_of("gradients/MaxPool_1_grad/MaxPoolGrad") == "MaxPool_1"


def test_flops_of_conv_and_matmul_match_hand_counts():
    # Conv2D NCHW (2, 3, 8, 8) * (3, 3, 3, 4) SAME: 2*4*8*8 outputs, each 3*3*3 multiply-adds.
    x, w, y = (2, 3, 8, 8), (3, 3, 3, 4), (2, 4, 8, 8)
    assert flops("Conv2D", [x, w], [y], {}) == 2 * 512 * 27 == 27648
    assert flops("Conv2DBackpropInput", [(4,), w, y], [x], {}) == 27648
    assert flops("Conv2DBackpropFilter", [x, (4,), y], [w], {}) == 27648
    # Strided VALID: (1, 2, 9, 9) * (3, 3, 2, 5) stride 2 -> (1, 5, 4, 4): 80 outputs of 18 multiply-adds.
    assert flops("Conv2D", [(1, 2, 9, 9), (3, 3, 2, 5)], [(1, 5, 4, 4)], {}) == 2 * 80 * 18
    assert flops("MatMul", [(5, 7), (7, 3)], [(5, 3)], {}) == 2 * 5 * 3 * 7 == 210
    assert flops("MatMul", [(7, 5), (7, 3)], [(5, 3)], {"transpose_a": True}) == 210
    assert flops("Relu", [(2, 3)], [(2, 3)], {}) == 6
    assert flops("Reshape", [(2, 3), (2,)], [(3, 2)], {}) == 0


def test_traced_run_of_a_matmul_reports_its_flops(device):
    g = tf.Graph()
    with g.as_default():
        a = tf.placeholder(tf.float32, [None, 7])
        b = tf.constant(np.ones((7, 3), np.float32))
        c = tf.matmul(a, b)
    md = RunMetadata()
    with tf.Session(graph=g, device=device) as sess:
        out = sess.run(c, {a: np.ones((5, 7), np.float32)}, options=RunOptions(RunOptions.FULL_TRACE),
                       run_metadata=md)
    np.testing.assert_allclose(out, np.full((5, 3), 7.0))
    mm = next(s for s in md.step_stats if s.type == "MatMul")
    assert mm.flops == 210 and mm.output_shapes == [(5, 3)]
    assert [t.op for t in md.transfers if t.direction == "d2h"][-1] == "fetch"


def test_untraced_runs_record_nothing():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None])
        y = x * 2.0
    md = RunMetadata()
    with tf.Session(graph=g) as sess:
        sess.run(y, {x: [1.0]}, run_metadata=md)  # no options: TF1 records no step stats
        sess.run(y, {x: [1.0]}, options=RunOptions(), run_metadata=md)  # NO_TRACE
    assert md.step_stats == [] and md.transfers == []


def test_live_bytes_come_from_the_memory_plan_under_a_budget():
    _, _, md, _ = _traced_step("cpu", memory_budget="1GB")
    assert md.planned
    assert all(s.live_bytes > 0 for s in md.step_stats)


def test_profile_cli_smoke(device, tmp_path, capsys):
    out = tmp_path / "out.json"
    # PoCL's unoptimized test builds take seconds per full-width Mentee step: narrow layers there.
    narrow = ["--widths", "4,4,8,8,8", "--fc-widths", "8,8"] if device == "opencl" else []
    code = main(["profile", "--model", "mentee", "--device", device, "--batch-size", "2", "--steps", "6",
                 "--trace", str(out), *narrow])
    text = capsys.readouterr().out
    assert code == 0, text
    for needle in ("by op type", "by layer", "Conv2DBackpropFilter", "conv1", "step time", "tracing overhead",
                   "CPU utilization", "peak RSS", "device memory peak", "bytes moved per step"):
        assert needle in text, needle
    events = json.loads(out.read_text())["traceEvents"]
    steps = [e for e in events if e.get("cat") == "step"]
    ops = [e for e in events if e.get("cat") == "op"]
    assert len(steps) == 2 and len(ops) % 2 == 0 and len(ops) > 100


def test_train_profile_every_logs_profile_rows(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    code = main(["train", "--synthetic", "--model", "lenet", "--batch-size", "16", "--steps", "4",
                 "--log", str(log), "--profile-every", "2"])
    assert code == 0
    rows = [r for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == "profile"]
    assert [r["step"] for r in rows] == [2, 4]
    keys = {"step", "epoch", "step_ms", "op_ms", "forward_ms", "backward_ms", "update_ms", "device_ms", "gflop",
            "gflop_per_s", "h2d_bytes", "d2h_bytes", "transfer_ms", "peak_live_bytes", "ops", "top_ops"}
    for r in rows:
        assert keys <= set(r)
        assert r["backward_ms"] > 0 and r["gflop"] > 0 and r["h2d_bytes"] > 0
    assert main(["train", "--synthetic", "--steps", "2", "--profile-every", "1"]) == 2  # needs --log
    assert "--profile-every needs --log" in capsys.readouterr().err


# -- the executor's shape cache --------------------------------------------------------------------------------
def test_shape_cache_follows_feed_shapes_and_values():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        shape = tf.placeholder(tf.int32, [2])
        y = tf.reduce_sum(tf.matmul(x, tf.ones([3, 4])), axis=1)
        z = tf.reshape(x, shape)  # a shape function that reads a fed value
    with tf.Session(graph=g) as sess:
        for n in (2, 5, 2, 1):
            xs = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
            np.testing.assert_allclose(sess.run(y, {x: xs}), xs.sum(1) * 4)
        xs = np.arange(6, dtype=np.float32).reshape(2, 3)
        assert sess.run(z, {x: xs, shape: [3, 2]}).shape == (3, 2)
        assert sess.run(z, {x: xs, shape: [6, 1]}).shape == (6, 1)  # same input shapes, new value
        assert sess.run(z, {x: xs, shape: [1, 6]}).shape == (1, 6)
        with pytest.raises(tf.errors.InvalidArgumentError, match="Reshape"):
            sess.run(z, {x: xs, shape: [4, 2]})
