"""The memory planner: sizes, lifetimes, arena offsets, planned execution, budget transformations, CLI."""
import json
import os
import random
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import assert_planned_bytes_are_measured, cnn_feeds, small_cnn, train_steps

import tfplus as tf
from tfplus import planner
from tfplus.framework import apply_op
from tfplus.planner.arena import assign_offsets, check_no_overlap
from tfplus.planner.liveness import Buffer
from tfplus.registry import register_kernel, register_op, register_workspace
from tfplus.runtime import opencl
from tfplus.tensor_shape import same_as_input
from tfplus.units import format_size, parse_size


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


# A test op whose kernel uses two declared scratch buffers (and one that asks for an undeclared one).
register_op("TestScratchSquare", inputs=("x",), outputs=("y",), attrs={"T": "type"},
            shape_fn=same_as_input(0))
register_op("TestRowSum", inputs=("x",), outputs=("y",), attrs={"T": "type"},
            shape_fn=lambda ins, attrs: [ins[0]._replace(shape=ins[0].shape[:1])])
register_op("TestUndeclaredScratch", inputs=("x",), outputs=("y",), attrs={"T": "type"},
            shape_fn=same_as_input(0))


@register_workspace("TestScratchSquare", "cpu")
def _scratch_square_ws(ins, attrs):
    return [(ins[0].shape, attrs["T"]), ((7,), tf.float64)]


@register_kernel("TestScratchSquare", "cpu")
def _scratch_square(ctx, ins, outs, attrs):
    tmp = ctx.workspace(ins[0].shape, attrs["T"])
    ctx.workspace((7,), tf.float64).fill(0)
    np.multiply(ins[0], ins[0], out=tmp)
    np.copyto(outs[0], tmp)


@register_kernel("TestRowSum", "cpu")
def _row_sum(ctx, ins, outs, attrs):
    np.sum(ins[0], axis=1, out=outs[0])


@register_kernel("TestUndeclaredScratch", "cpu")
def _undeclared(ctx, ins, outs, attrs):
    np.copyto(outs[0], ins[0] + ctx.workspace(ins[0].shape, attrs["T"]) * 0)


def _scratch_square(x):
    return apply_op("TestScratchSquare", [x])


# -- units ---------------------------------------------------------------------------------------------------
def test_parse_size_si_iec_and_plain_bytes():
    assert parse_size("64MB") == 64_000_000
    assert parse_size("64MiB") == 67_108_864
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("512") == 512 and parse_size(4096) == 4096
    assert parse_size(" 2 kib ") == 2048 and parse_size("1.1MB") == 1_100_000
    assert format_size(64_000_000) == "64.0 MB" and format_size(67_108_864, iec=True) == "64.0 MiB"


@pytest.mark.parametrize("text, match", [("64M", "ambiguous"), ("1.5", "whole number"),
                                         ("lots", "cannot read"), ("-3MB", "cannot read"),
                                         ("", "cannot read")])
def test_parse_size_errors_name_the_flag_and_value(text, match):
    with pytest.raises(ValueError, match=match) as e:
        parse_size(text, "--budget")
    assert "--budget" in str(e.value)


def test_session_rejects_a_bad_budget_naming_it():
    with pytest.raises(ValueError, match=r"memory_budget: cannot read '64 megs'"):
        tf.Session(memory_budget="64 megs")


# -- arena ---------------------------------------------------------------------------------------------------
def _buf(name, size, start, end):
    return Buffer(name, size, size, start, end, "forward")


def test_arena_reuses_memory_of_dead_buffers():
    # a [0,1] and c [2,3] never live together: c can take a's bytes; b [1,2] overlaps both.
    a, b, c = _buf("a", 128, 0, 1), _buf("b", 256, 1, 2), _buf("c", 128, 2, 3)
    assert assign_offsets([a, b, c]) == 384
    check_no_overlap([a, b, c])
    assert c.offset == a.offset


def test_arena_of_random_lifetimes_has_no_overlap_and_is_near_the_bound():
    rng = random.Random(0)
    for trial in range(30):
        bufs = []
        for i in range(rng.randint(1, 60)):  # noqa: B007
            s = rng.randint(0, 40)
            bufs.append(_buf(f"b{i}", 64 * rng.randint(0, 50), s, s + rng.randint(0, 10)))
        size = assign_offsets(bufs)
        check_no_overlap(bufs)
        live = max(sum(b.size for b in bufs if b.start <= t <= b.end) for t in range(60))
        assert live <= size <= 2 * max(live, 1), trial


# -- lifetimes on a small hand-checked graph -----------------------------------------------------------------
def test_lifetimes_aliases_fetches_and_workspaces():
    x = tf.placeholder(tf.float32, [None, 10], name="x")
    a = tf.multiply(x, 2.0, name="a")       # 4 x 10 floats = 160 bytes -> 192 with 64-byte alignment
    r = tf.identity(a, name="r")            # shares a's buffer
    s = _scratch_square(r)                  # workspace: 160 (192) bytes + 7 doubles (64)
    b = tf.add(s, r, name="b")              # last reader of a (through r)
    p = planner.plan([b, s], {x: (4, 10)})
    order = [op.name for op in p.phases[0].order]
    life = p.phases[0].life
    buf_a = life.of_tensor[a]
    assert r not in life.of_tensor, "Identity aliases its input: no buffer of its own"
    n = len(order)
    assert life.of_tensor[b] is buf_a, "Add writes over a (read through r), which dies there"
    assert (buf_a.start, buf_a.end) == (order.index("a"), n), "...and b is fetched: alive until copied out"
    assert life.of_tensor[s].end == n
    ws = life.workspaces[s.op]
    assert [(w.start, w.end, w.size) for w in ws] == [(order.index(s.op.name),) * 2 + (192,),
                                                      (order.index(s.op.name),) * 2 + (64,)]
    check_no_overlap(p.buffers)
    assert p.arena_lower_bound_bytes <= p.arena_bytes
    assert p.feed_bytes == 160 and p.parameter_bytes == 0


def test_variables_and_feeds_are_counted_apart_from_the_arena():
    x = tf.placeholder(tf.float32, [None, 100], name="x")
    w = tf.Variable(tf.zeros([100]), name="w")
    slot = tf.Variable(tf.zeros([100]), name="slot", trainable=False)
    y = x * w + slot
    p = planner.plan([y], {x: (8, 100)})
    assert (p.parameter_bytes, p.slot_bytes, p.feed_bytes) == (400, 400, 3200)
    assert p.peak_bytes == 4000 + p.arena_bytes
    bd = p.breakdown()
    assert bd["parameters"] == 400 and bd["optimizer_slots"] == 400 and bd["peak"] == p.peak_bytes


# -- random DAGs: no overlap, and planned execution computes what unplanned execution does -------------------
def _random_graph(rng: random.Random):
    xs = [tf.placeholder(tf.float32, [None, 16], name=f"x{i}") for i in range(2)]
    pool = list(xs)
    for _ in range(rng.randint(5, 25)):
        kind = rng.choice(["add", "mul", "addn", "id", "const", "scratch"])
        a, b = rng.choice(pool), rng.choice(pool)
        if kind == "add":
            t = a + b
        elif kind == "mul":
            t = a * b * 0.5
        elif kind == "addn":
            t = tf.add_n(rng.sample(pool, min(3, len(pool))))
        elif kind == "id":
            t = tf.identity(a)
        elif kind == "scratch":
            t = _scratch_square(a) * 0.1
        else:
            t = a + np.float32(rng.random())
        pool.append(t)
    fetches = rng.sample(pool[2:], min(3, len(pool) - 2))
    return xs, fetches


def test_random_graphs_planned_equals_unplanned():
    rng = random.Random(1)
    data = np.random.default_rng(0)
    for _trial in range(12):
        g = tf.Graph()
        with g.as_default():
            xs, fetches = _random_graph(rng)
        batch = rng.randint(1, 9)
        feeds = {x: data.standard_normal((batch, 16)).astype(np.float32) for x in xs}
        p = planner.plan(fetches, {x: v.shape for x, v in feeds.items()}, graph=g)
        check_no_overlap(p.buffers)
        assert p.arena_lower_bound_bytes <= p.arena_bytes
        with tf.Session(graph=g) as plain, tf.Session(graph=g, memory_budget="1GB") as planned:
            want = plain.run(fetches, feeds)
            got = planned.run(fetches, feeds)
            got2 = planned.run(fetches, feeds)  # the arena is reused: the second step must be the same
        for w_, g_, g2 in zip(want, got, got2):
            np.testing.assert_allclose(g_, w_, rtol=1e-6)
            np.testing.assert_array_equal(g_, g2)


def test_memory_aware_order_is_used_when_it_needs_less():
    # Four independent branches, each a big temporary reduced to a small result: creation order builds all the
    # big ones first; the greedy order finishes one branch before starting the next.
    x = tf.placeholder(tf.float32, [None, 256], name="x")
    bigs = [x * float(i + 1) for i in range(4)]
    smalls = [apply_op("TestRowSum", [b]) for b in bigs]
    out = tf.add_n(smalls)
    p = planner.plan([out], {x: (64, 256)})
    big = 64 * 256 * 4
    assert p.phases[0].creation_order_bound >= 4 * big
    assert p.phases[0].schedule == "memory-aware" and p.arena_bytes < 2 * big
    assert p.transformations[0]["name"] == "schedule"
    check_no_overlap(p.buffers)
    with tf.Session(memory_budget="1MB") as sess:
        feed = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
        np.testing.assert_allclose(sess.run(out, {x: feed}), 10 * feed.sum(1), rtol=1e-4)


# -- workspaces ----------------------------------------------------------------------------------------------
def test_undeclared_workspace_is_a_clear_error():
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    y = apply_op("TestUndeclaredScratch", [x], name="odd")
    with tf.Session(memory_budget="1MB") as sess, \
            pytest.raises(RuntimeError, match=r"TestUndeclaredScratch 'odd'.*workspace #0.*declares none"):
        sess.run(y, {x: np.ones((2, 4), np.float32)})


# -- budgets -------------------------------------------------------------------------------------------------
def test_infeasible_budget_raises_before_running_anything():
    x = tf.placeholder(tf.float32, [None, 1000], name="x")
    w = tf.Variable(tf.zeros([1000]), name="w")
    step = tf.assign_add(w._ref(), tf.reduce_sum(x * 2.0, axis=0))
    with tf.Session(memory_budget="20kB") as sess:
        sess.run(w.initializer)
        with pytest.raises(planner.BudgetError, match=r"needs at least .* budget of at least") as e:
            sess.run(step, {x: np.ones((16, 1000), np.float32)})
        assert e.value.smallest_bytes > 20_000
        np.testing.assert_array_equal(sess.run(w), np.zeros(1000, np.float32))  # nothing ran


# -- a training step of a small CNN under budgets ------------------------------------------------------------
def _assert_same_training(a, b, rtol=2e-5):
    np.testing.assert_allclose(a[0], b[0], rtol=rtol)
    for name in a[1]:
        np.testing.assert_allclose(b[1][name], a[1][name], rtol=rtol, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("force", [(1, 1), (1, 4), (2, 1), (4, 2), (8, 1), (1, 1, True), (2, 2, True),
                                   (1, 1, False, 4), (1, 1, False, 16), (4, 1, True, 8), (2, 2, False, 8)],
                         ids=["arena", "chunks4", "micro2", "micro4_chunks2", "micro8", "compact",
                              "compact_micro2_chunks2", "scratch4", "scratch16",
                              "compact_micro4_scratch8", "micro2_chunks2_scratch8"])
def test_transformations_preserve_the_training_step(force):
    tg = small_cnn()
    feeds = cnn_feeds(tg)
    plain = train_steps(tg, feeds)
    planned = train_steps(tg, feeds, budget="1GB", force=force)
    _assert_same_training(plain, planned)


def test_compact_saved_state_frees_the_relu_output_before_a_pool_and_trains_the_same():
    """The ReLU output before a 2x2 max-pool is not saved for backward (a uint8 argmax per window is): the
    arena's liveness bound drops when that output was live at the peak, the overhead is reported, and two
    training steps give bit-identical losses and weights."""
    tg = small_cnn()
    feeds = cnn_feeds(tg)
    shapes = {t: v.shape for t, v in feeds.items()}
    fetches = [tg.train_op, tg.loss]
    plain, small = (planner.plan(fetches, shapes, graph=tg.graph, force=(1, 1, z)) for z in (False, True))
    (sites,) = [ph.sites for ph in small.phases]
    assert [s.pool.type for s in sites] == ["MaxPool"] and not plain.phases[0].sites
    relu_out = sites[0].pool.inputs[0]
    pos = {op: i for i, op in enumerate(small.phases[0].order)}
    assert small.phases[0].life.of_tensor[relu_out].end == pos[sites[0].pool], "dies at the pool"
    plain_pos = {op: i for i, op in enumerate(plain.phases[0].order)}
    assert plain.phases[0].life.of_tensor[relu_out].end > plain_pos[sites[0].pool]
    assert small.arena_lower_bound_bytes <= plain.arena_lower_bound_bytes
    (t,) = [t for t in small.transformations if t["name"] == "compact"]
    assert t["predicted_overhead"] >= 0  # measured about 0: the argmax pass repays itself in the backward pass
    check_no_overlap(small.buffers)
    a, b = train_steps(tg, feeds, budget="1GB", force=(1, 1)), train_steps(tg, feeds, budget="1GB", force=(1, 1, True))
    np.testing.assert_array_equal(a[0], b[0])
    for name in a[1]:
        np.testing.assert_array_equal(a[1][name], b[1][name], err_msg=name)


def test_a_tight_budget_picks_transformations_that_fit_and_train_the_same():
    tg = small_cnn()
    # NOTE: batch 16: at 8 the scratch transformation (smaller conv chunks) alone fits half the arena, no split
    feeds = cnn_feeds(tg, 16)
    fetches = [tg.train_op, tg.loss]
    shapes = {t: v.shape for t, v in feeds.items()}
    free = planner.plan(fetches, shapes, graph=tg.graph)
    budget = free.fixed_bytes + free.arena_bytes // 2
    p = planner.plan(fetches, shapes, graph=tg.graph, budget=budget)
    assert p.fits and p.peak_bytes <= budget < free.peak_bytes
    assert {t["name"] for t in p.transformations} & {"microbatch", "chunk"}
    check_no_overlap(p.buffers)
    _assert_same_training(train_steps(tg, feeds), train_steps(tg, feeds, budget=budget))


def test_infeasible_budget_names_the_smallest_that_fits():
    tg = small_cnn()
    feeds = cnn_feeds(tg)
    shapes = {t: v.shape for t, v in feeds.items()}
    with pytest.raises(planner.BudgetError, match="use a budget of at least") as e:
        planner.plan([tg.train_op, tg.loss], shapes, graph=tg.graph, budget="100kB")
    smallest = e.value.smallest_bytes
    p = planner.plan([tg.train_op, tg.loss], shapes, graph=tg.graph, budget=smallest)
    assert p.fits and p.peak_bytes == smallest


def test_budget_search_shortcuts_change_no_candidate():
    """The search orders a candidate only when a quick lower bound on its peak fits the budget, so that bound
    must never exceed the candidate's liveness bound; and candidates built one after another (sharing runs
    and buffers) come out as each does alone."""
    from tfplus.planner.plan import _Step
    tg = small_cnn()
    shapes = {t: v.shape for t, v in cnn_feeds(tg).items()}
    args = ([tg.train_op, tg.loss], shapes, "cpu", tg.graph, None)
    step = _Step(*args)
    cands = step.candidates(planner.TRANSFORMATIONS)
    # every candidate without recomputation; with it (a planning copy of the graph each), the first few
    for kc in [kc for kc in cands if not kc.recompute] + [kc for kc in cands if kc.recompute][:6]:
        p, alone = step.build(*kc, place=False), _Step(*args).build(*kc, place=False)
        assert step.least_bytes(*kc) <= p.lower_bound_bytes, kc
        assert [(b.name, b.start, b.end, b.size) for b in p.buffers] == \
            [(b.name, b.start, b.end, b.size) for b in alone.buffers], kc
        # (by name: a plan with recomputation runs its own planning copy of the graph)
        assert [[op.name for op in ph.order] for ph in p.phases] == \
            [[op.name for op in ph.order] for ph in alone.phases], kc


def test_memory_plan_json_is_stable():
    tg = small_cnn()
    shapes = {t: v.shape for t, v in cnn_feeds(tg).items()}
    out = planner.plan([tg.train_op, tg.loss], shapes, graph=tg.graph, budget="10MB").to_json()
    json.dumps(out)
    assert {"peak_bytes", "lower_bound_bytes", "budget_bytes", "fits", "transformations", "breakdown",
            "arena_bytes", "arena_lower_bound_bytes"} <= set(out)
    assert set(out["breakdown"]) == {"parameters", "optimizer_slots", "feeds", "saved_activations",
                                     "gradients", "workspaces", "accumulators", "arena", "peak"}
    assert out["lower_bound_bytes"] <= out["peak_bytes"] <= out["budget_bytes"] and out["fits"] is True


# -- planned bytes are the bytes the step uses ---------------------------------------------------------------
def _step_peak(sess, fetches, feeds) -> int:
    """tracemalloc's peak during one step, above what was allocated before it (a warm-up step runs first)."""
    sess.run(fetches, feeds)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        sess.run(fetches, feeds)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("force", [(1, 1), (1, 4), (2, 1), (4, 2), (2, 2, True), (1, 1, False, 16),
                                   (4, 1, True, 8)],
                         ids=["arena", "chunks4", "micro2", "micro4_chunks2", "compact_micro2_chunks2", "scratch16",
                              "compact_micro4_scratch8"])
def test_planned_bytes_are_measured_bytes(force):
    """A CNN step with conv, bias, ReLU, max-pool, dense, cross-entropy and momentum, by a forced plan:
    tracemalloc (engine.memory.measure_step) finds the NumPy data held at the step's start (variables,
    slots, the arena) equal to the plan's to the byte (the arena's alignment padding apart), and the step adds
    no more than NumPy's ufunc buffers: every kernel's scratch is a declared, planned workspace."""
    tg = small_cnn()
    assert_planned_bytes_are_measured(tg, cnn_feeds(tg, batch=32), force)


def test_planned_arena_is_near_its_bound_and_the_plain_executor_needs_more():
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=32)
    fetches = [tg.train_op, tg.loss]
    p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, graph=tg.graph)
    assert p.arena_bytes <= 1.02 * p.arena_lower_bound_bytes
    # every output a fresh array, freed after its last use (in this process: no worker processes)
    with tf.Session(graph=tg.graph, workers=1) as sess:
        sess.run(tg.init_op)
        assert _step_peak(sess, fetches, feeds) > p.arena_lower_bound_bytes


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_inplace_table_matches_the_kernels(device):
    """Every (op, device) the planner lets write over an input gives the same result when it does."""
    import tfplus.kernels.numpy  # noqa: F401
    from tfplus.planner.inplace import INPLACE
    from tfplus.registry import find_kernel
    rng = np.random.default_rng(0)
    if device == "opencl":
        import tfplus.kernels.opencl  # noqa: F401
        rt = opencl.OpenCLRuntime()

        def put(a):  # device-computed memory (no host copy), as a kernel's output is
            d = rt.allocate(a.shape, a.dtype)
            rt.upload_into(d, a)
            return d
        ctx, get = type("Ctx", (), {"runtime": rt})(), rt.copy_out
    else:  # the fused gradient's kernel asks for scratch
        ctx, put, get = type("Ctx", (), {"workspace": staticmethod(
            lambda shape, dtype: np.empty(shape, getattr(dtype, "np", dtype)))})(), np.copy, np.asarray
    entries = {op_type: ix for (op_type, dev), ix in INPLACE.items() if dev == device}
    assert {"Add", "Relu", "AddN", "BiasAdd", "ReluGrad"} <= set(entries)
    for op_type, indices in entries.items():
        kernel = find_kernel(op_type, device, tf.float32)
        assert kernel is not None, op_type
        arity = {"AddN": 5, "BiasAdd": 2, "ReluGrad": 2, "Relu6Grad": 2, "TanhGrad": 2, "_FusedBiasAddRelu": 2,
                 "_FusedReluGradBiasAddGrad": 2}.get(op_type, 2 if op_type in (
            "Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference") else 1)
        ins = [np.abs(rng.standard_normal((2, 3, 4))).astype(np.float32) + 0.5 for _ in range(arity)]
        ins[0] -= 1.0  # both signs where the domain allows (relu, abs, sign, max, ...)
        if op_type in ("Log", "Sqrt", "Rsqrt"):
            ins[0] += 1.0
        if op_type in ("BiasAdd", "_FusedBiasAddRelu"):
            ins[1] = ins[1][0, 0]
        attrs = {"T": tf.float32, "data_format": "NHWC", "N": arity, "activation": "Relu"}
        # Outputs past the first (the fused gradient's db) are not written over an input.
        more = (lambda: [put(np.zeros(4, np.float32))]) if op_type == "_FusedReluGradBiasAddGrad" else list
        want = put(np.zeros_like(ins[0]))
        kernel(ctx, [put(a) for a in ins], [want, *more()], attrs)
        for i in indices:
            args = [put(a) for a in ins]
            kernel(ctx, args, [args[i], *more()], attrs)
            np.testing.assert_allclose(get(args[i]), get(want), rtol=1e-6, err_msg=f"{op_type} over input {i}")


# -- tfplus plan ---------------------------------------------------------------------------------------------
def test_plan_cli_json_schema(tmp_path, capsys):
    import argparse

    from tfplus import plan_cli
    parser = argparse.ArgumentParser()
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    svg = tmp_path / "step.svg"
    # LeNet: Mentee's --max-batch search plans and runs steps of ~100 images (a minute on CI) for the same keys
    args = parser.parse_args(["plan", "--model", "lenet", "--batch-size", "8", "--memory-budget", "4MB", "--json",
                              "--max-batch", "--plot", str(svg)])
    assert args.func(args) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    # the --max-batch search reports each probe on stderr (the JSON's stdout stays clean)
    probes = [line for line in captured.err.splitlines() if line.startswith("tfplus plan: max batch")]
    assert len(probes) >= 5 and "batch 1 needs" in probes[0] and "confirming batch" in captured.err
    assert {"peak_bytes", "lower_bound_bytes", "budget_bytes", "fits", "transformations", "breakdown",
            "max_batch_size", "smallest_feasible_budget_bytes", "model", "batch_size"} <= set(out)
    assert out["budget_bytes"] == 4_000_000 and out["fits"] and out["max_batch_confirmed"]
    assert out["max_batch_size"] >= 8 and out["smallest_feasible_budget_bytes"] <= out["peak_bytes"]
    assert all({"name", "detail", "predicted_overhead"} <= set(t) for t in out["transformations"])
    assert svg.read_text().startswith("<svg") and "budget" in svg.read_text()
    with pytest.raises(SystemExit):
        parser.parse_args(["plan", "--memory-budget", "64M"])
    assert "--memory-budget: '64M' is ambiguous" in capsys.readouterr().err


def test_plan_cli_plans_the_step_a_session_with_that_budget_runs():
    """`tfplus plan` plans the step as a session runs it, rewritten (tfplus.engine.rewrite's fused ops): its plan is
    the one a session with the same budget runs, byte for byte."""
    import argparse

    from tfplus import plan_cli
    parser = argparse.ArgumentParser()
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    step = plan_cli._TrainStep(parser.parse_args(["plan", "--batch-size", "8", "--memory-budget", "13MB"]))
    assert step.graph is not step.tg.graph, "the step is rewritten"
    want = step.plan(8, 13_000_000)
    rng = np.random.default_rng(0)
    feeds = {step.tg.images: rng.standard_normal((8, 3, 32, 32)).astype(np.float32),
             step.tg.labels: rng.integers(0, 10, 8).astype(np.int32)}
    with tf.Session(graph=step.tg.graph, memory_budget="13MB") as sess:
        sess.run(step.tg.init_op)
        step.sums.start(sess)
        sess.run(step.fetches, feeds)
        ran = [p for p in sess.memory_plans  # the step's: fed a batch of images
               if (8, 3, 32, 32) in p.feed_shapes.values()]
    assert len(ran) == 1 and ran[0].peak_bytes == want.peak_bytes
    assert ran[0].summary() == want.summary()


def test_plan_max_batch_is_exact_in_a_few_plans():
    """`tfplus plan --max-batch` (issue 32, item 14: ten minutes on Mentee): the largest multiple of 8 that fits,
    with and without micro-batching, found by a secant search in a dozen plans or fewer (doubling and bisection
    planned 15 batches here, and dozens of big ones for Mentee)."""
    import argparse

    from tfplus import plan_cli
    parser = argparse.ArgumentParser()
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    step = plan_cli._TrainStep(parser.parse_args(["plan", "--model", "lenet", "--batch-size", "8"]))
    planned, fit, smallest = [], step.fit, step.smallest
    step.fit = lambda b, budget, t=planner.TRANSFORMATIONS: planned.append(b) or fit(b, budget, t)
    budget = 4_000_000
    plain = step.max_batch(budget, ("chunk",))
    assert len(set(planned)) <= 12
    planned.clear()
    micro = step.max_batch(budget, at_least=plain)
    assert len(set(planned)) <= 12
    for b, t in ((plain, ("chunk",)), (micro, planner.TRANSFORMATIONS)):
        assert b % 8 == 0 and smallest(b, t) <= budget < smallest(b + 8, t), (b, t)
    assert micro > plain >= 16


def test_a_run_of_no_kernel_calls_runs_under_a_budget():
    """Fetching a variable under a memory budget plans a step that calls no kernel (no cost to compare
    transformations against)."""
    tf.reset_default_graph()
    v = tf.Variable(np.arange(3, dtype=np.float32), name="v")
    with tf.Session(memory_budget="1MB") as sess:
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(v), [0, 1, 2])


def test_micro_batches_merge_fetches_by_kind_and_refuse_a_maximum_over_the_batch():
    """A fetched mean loss is averaged over the micro-batches, batch-major rows concatenated, an integer count of
    the batch's rows summed; a maximum over the batch is neither (planner.batch.merges and fetch_merge)."""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=8)
    with tg.graph.as_default():
        rows = tf.argmax(tg.logits, axis=1)
        right = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(tg.logits, 1, output_type=tf.int32), tg.labels), tf.int32))
        largest = tf.reduce_max(tg.logits)
    shapes = {t: v.shape for t, v in feeds.items()}
    p = planner.plan([tg.train_op, tg.loss, rows, right], shapes, graph=tg.graph, force=(2, 1))
    assert p.fetch_merge[tg.loss] == "mean" and p.fetch_merge[rows] == "concat" and p.fetch_merge[right] == "sum"
    with pytest.raises(planner.PlanError, match=r"'Max[^']*' \(float32, shape \(\)\) depends on the batch but is "
                                                r"neither a sum or mean .*: Max 'Max' reduces over the rows"):
        planner.plan([tg.train_op, largest], shapes, graph=tg.graph, force=(2, 1))


def test_the_planner_reads_no_runtime_thread_count_or_kernel_module():
    """The planner is a function of (graph, DeviceFacts, budget): none of its modules imports a device runtime,
    tfplus.threads or a kernel package, by name or through importlib (planner/execute.py is the engine's)."""
    import ast
    import pathlib

    folder = pathlib.Path(planner.__file__).parent
    for path in sorted(folder.glob("*.py")):
        if path.name == "execute.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names] \
                if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith(("tfplus.runtime", "tfplus.threads", "tfplus.kernels", "importlib")), \
                    f"{path.name}:{node.lineno} imports {name}"


def test_the_planner_takes_the_thread_count_as_a_device_fact():
    """The cpu kernels' scratch is per thread: a plan on 2 threads declares what they ask for on 2, whatever
    thread count the planning thread runs kernels with."""
    from tfplus import threads
    from tfplus.graphs import get_model, training_graph
    from tfplus.planner import DeviceFacts
    tg = training_graph(get_model("mentee").build, total_steps=10)
    shapes = {tg.images: (64, 3, 32, 32), tg.labels: (64,)}

    def scratch(n):
        p = planner.plan([tg.train_op, tg.loss], shapes, DeviceFacts("cpu", "cpu", threads=n), graph=tg.graph)
        return [b.size for ws in p.phases[0].life.workspaces.values() for b in ws]
    with threads.using(1):
        two = scratch(2)
    with threads.using(2):
        assert scratch(2) == two
        assert scratch(1) != two
    with pytest.raises(ValueError, match="device_facts"):
        planner.plan([tg.train_op, tg.loss], shapes, "opencl:0", graph=tg.graph)


def test_backward_is_what_autodiff_added_whatever_its_scope():
    """A gradient built in a scope of the caller's naming is backward: autodiff marks the ops it adds (the
    planner's phases, the profiler's), and a GraphDef import marks TensorFlow's `gradients/` scope."""
    from tfplus.planner.liveness import phase_of
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    w = tf.Variable(np.ones((4, 3), np.float32), name="w")
    loss = tf.reduce_sum(tf.matmul(x, w))
    grads = tf.gradients(loss, [w], name="grads")
    matmuls = [op for op in tf.get_default_graph().get_operations() if op.type == "MatMul"]
    assert [phase_of(op) for op in matmuls] == ["forward"] + ["backward"] * (len(matmuls) - 1)
    assert phase_of(grads[0].op) == "backward" and phase_of(x.op) == phase_of(w.op) == "forward"
    tf.gradients(loss, [w])
    graph_def, g = tf.get_default_graph().as_graph_def(), tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    imported = {op.name: phase_of(op) for op in g.get_operations()}
    assert imported["gradients/MatMul_grad/MatMul_1"] == "backward" and imported["MatMul"] == "forward"


def test_op_tags_are_declared_where_the_ops_are_registered():
    """The planner and the executor read op facts from the registry (register_op(tags=...)), not from lists of
    op types of their own; an unknown tag is refused, naming the known ones."""
    from tfplus import registry
    assert registry.tagged("view") == sorted(["Identity", "Reshape", "Squeeze", "ExpandDims", "StopGradient",
                                              "PlaceholderWithDefault"])
    assert registry.tagged("shape_only") == sorted(["Shape", "ShapeN", "Size", "Rank", "OnesLike", "ZerosLike"])
    assert {"Conv2D", "MatMul", "_FusedConv2DBiasRelu"} <= set(registry.tagged("gemm"))
    assert registry.has_tag("Conv2DBackpropFilter", "row_sums") and not registry.has_tag("Relu", "row_sums")
    assert registry.tagged("cross_batch") == ["FusedBatchNorm", "FusedBatchNormV3", "_FusedBatchNormRelu"]
    with pytest.raises(ValueError, match="unknown tags"):
        register_op("TestBadTag", shape_fn=same_as_input(0), tags=("fast",))


def test_a_plan_needs_its_device_kernels_registered():
    """A plan made before any kernel package of its device is loaded would miss their scratch and in-place facts:
    it is refused, naming the fix (a kernel a test registers does not count)."""
    code = ("import tfplus as tf\nfrom tfplus import planner\nfrom tfplus.registry import register_kernel\n"
            "register_kernel('Mul', 'cpu', ['float32'])(lambda ctx, ins, outs, attrs: None)\n"
            "x = tf.placeholder(tf.float32, [None, 4])\n"
            "try:\n    planner.plan([x * 2.0], {x: (2, 4)}, 'cpu')\nexcept ValueError as e:\n    print(e)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "no cpu kernels are registered" in out.stdout and "device_facts('cpu')" in out.stdout, out.stdout


def test_seqnet_bi_arena_is_at_the_liveness_bound():
    """The bidirectional recurrent model (10K buffers) at a small batch: the placement packs its arena into the
    most bytes alive at one step, as it did when the arena search was made faster (issue 38). Planned as built: the
    rewrite's fused recurrent cells (tfplus.engine.rewrite_rnn) leave ~3K buffers, too few to test the search at
    scale."""
    from tfplus.graphs import get_model, training_graph
    from tfplus.planner import DeviceFacts
    model = get_model("seqnet-bi")
    tg = training_graph(model.build, total_steps=10, optimizer="momentum", image_shape=model.image_shape)
    fetches = [tg.train_op, tg.loss]
    shapes = {tg.images: (4,) + tuple(tg.images.shape.as_list()[1:]), tg.labels: (4,)}
    p = planner.plan(fetches, shapes, DeviceFacts("cpu", "cpu"), graph=tg.graph)
    assert len(p.buffers) > 10000
    assert p.arena_bytes == p.arena_lower_bound_bytes
