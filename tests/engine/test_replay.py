"""Replayed launches on the opencl device (PoCL in CI): a step whose launches were recorded (tfplus.runtime.opencl
_Tape) gives the bits of the same step launched op by op, follows its feeds and variables when they move, and
is not replayed when a run could differ from the recorded one (values read on the host). Random draws replay with
a new run each time (tests/engine/test_replay_random.py)."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import cnn_feeds, small_cnn

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import Bound, install
from tfplus.runtime.facts import device_facts

pytestmark = needs_opencl


def _tapes(sess) -> list:
    """The tape records (tfplus.engine.replay.Recording) of the session's planned programs and micro-batched steps."""
    steps = [s for s in sess.steps if s.bound is not None]
    return [t for s in steps for prog in s.programs for t in prog.tapes.values()] + [s.bound.whole for s in steps]


def _replaying(sess) -> bool:
    return any(t.tape is not None for t in _tapes(sess))


def _batches(tg, n: int, batch: int = 8) -> list[dict]:
    rng = np.random.default_rng(1)
    return [{tg.images: rng.standard_normal((batch, 3, 16, 16)).astype(np.float32),
             tg.labels: rng.integers(0, 10, batch).astype(np.int32)} for _ in range(n)]


def _force(sess, tg, force) -> Bound:
    """Makes `sess` (one with a memory budget) run tg's training step by the plan of transformations `force`."""
    fetches, feeds = [tg.train_op, tg.loss], cnn_feeds(tg)
    shapes = {t: v.shape for t, v in feeds.items()}
    return install(sess, fetches, planner.plan(fetches, shapes, device_facts(sess.runtime), graph=tg.graph,
                                               force=force))


def train_steps(monkeypatch, replay: bool, budget=None, force=None, steps: int = 7):
    """Losses of `steps` steps on new batches, the weights after them, and whether the session replayed."""
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1" if replay else "0")
    tg = small_cnn()
    fetches = [tg.train_op, tg.loss]
    with tf.Session(graph=tg.graph, device="opencl", memory_budget=budget) as sess:
        sess.run(tg.init_op)
        if force is not None:
            _force(sess, tg, force)
        losses = [sess.run(fetches, feed)[1] for feed in _batches(tg, steps)]
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
        return losses, weights, _replaying(sess)


def test_a_batch_norm_training_step_replays_bit_for_bit(monkeypatch):
    """A training-mode FusedBatchNormV3 (MobileNet's blocks) writes its reserve output by a kernel: the step is
    recorded and replayed (an upload from the host kept every batch-norm model's step launched op by op), with
    the op-by-op launches' bits, moving averages included."""
    from tfplus.graphs import get_model, training_graph

    def run(replay: bool):
        monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1" if replay else "0")
        tg = training_graph(get_model("mobilenet").build, total_steps=10, seed=0, image_shape=(3, 16, 16),
                            model_kwargs={"conv_widths": (8, 8, 16)})
        with tf.Session(graph=tg.graph, device="opencl") as sess:
            sess.run(tg.init_op)
            losses = [sess.run([tg.train_op, tg.loss], feed)[1] for feed in _batches(tg, 6)]
            state = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
            return losses, state, _replaying(sess)

    want, got = run(False), run(True)
    assert got[2] and not want[2]
    assert got[0] == want[0]
    assert any("moving_mean" in name for name in want[1])
    for name, w in want[1].items():
        np.testing.assert_array_equal(got[1][name], w, err_msg=name)


# (Without a budget, and micro-batched in two: test_a_restored_variable_is_read_by_the_next_replay's steps, which
# check the same and more.)
@pytest.mark.parametrize("budget, force", [("1GB", (1, 1)), ("1GB", (2, 1, True, 1, 1))],
                         ids=["arena", "compact_recompute_micro2"])
def test_replayed_steps_are_the_launched_steps_bit_for_bit(monkeypatch, budget, force):
    """Without a budget the session moves a repeated step onto an unconstrained plan and replays it; under a
    plan (micro-batches: the feeds move by rows) it replays too. Both give the op-by-op launches' bits."""
    want = train_steps(monkeypatch, False, budget, force)
    got = train_steps(monkeypatch, True, budget, force)
    assert got[2] and not want[2]
    assert got[0] == want[0]
    for name, w in want[1].items():
        np.testing.assert_array_equal(got[1][name], w, err_msg=name)


def test_a_micro_batched_step_replays_as_one_tape_and_follows_a_new_arena(monkeypatch):
    """A micro-batched step runs a program per micro-batch and merges their gradients (copy, add, add and
    divide); once two steps recorded the same launches, all of it replays as one tape: nothing is set up per
    micro-batch. When the arena moves (a plan that needs more binds every plan again), the step runs and records
    anew. The losses are those of launching op by op (test_replayed_steps_are_the_launched_steps_bit_for_bit
    checks the weights)."""
    from tfplus.kernels.opencl import fused
    want = train_steps(monkeypatch, False, "1GB", (4, 1), steps=6)[0]
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1")
    calls = []
    real = fused.multi_accumulate
    monkeypatch.setattr(fused, "multi_accumulate", lambda *a, **k: (calls.append(a[3]), real(*a, **k)))
    tg = small_cnn()
    fetches = [tg.train_op, tg.loss]
    with tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        bound = _force(sess, tg, (4, 1))
        replays = []
        real_replay = type(bound.programs[0]).replay
        monkeypatch.setattr(type(bound.programs[0]), "replay", lambda self, f: (replays.append(self),
                                                                                 real_replay(self, f))[1])
        batches = _batches(tg, 6)
        losses = [sess.run(fetches, b)[1] for b in batches[:3]]  # the first runs, the next two record
        assert sorted(set(calls)) == ["add", "add_scale", "copy"]
        assert bound.whole.tape is not None
        calls.clear()
        replays.clear()
        losses += [sess.run(fetches, b)[1] for b in batches[3:5]]
        assert calls == [] and replays == [], "the step replays as one tape"
        bound.bind(sess.runtime.allocate_arena(bound.arena.nbytes))  # as when the session's arena grows
        assert bound.whole.tape is None
        losses.append(sess.run(fetches, batches[5])[1])
        assert sorted(set(calls)) == ["add", "add_scale", "copy"], "a new arena: run and recorded again"
    assert losses == want


def test_fed_scalars_and_fetched_feeds_follow_each_run(monkeypatch):
    """A fed scalar that stays the same for a few runs and then changes, read by a kernel from its buffer, and
    a fetched fed tensor: each run sees its own values."""
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1")
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4])
        s = tf.placeholder(tf.float32, [])
        w = tf.Variable(np.arange(4, dtype=np.float32))
        y = tf.reduce_sum(tf.nn.relu(x * s + w), axis=1)
        x_back = tf.identity(x)
        init = tf.variables_initializer([w])
    with tf.Session(graph=g, device="opencl") as sess:
        sess.run(init)
        rng = np.random.default_rng(0)
        for i, scale in enumerate([1, 1, 1, 1, 2, 2, -3, 1]):
            xv = rng.standard_normal((5, 4)).astype(np.float32)
            got, back = sess.run([y, x_back], {x: xv, s: scale})
            want = np.maximum(xv * np.float32(scale) + np.arange(4, dtype=np.float32), 0).sum(1)
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"run {i}")
            np.testing.assert_array_equal(back, xv)
        assert _tapes(sess), "the repeated run is planned"


def test_a_fill_of_a_fed_value_is_not_replayed(monkeypatch):
    """tf.fill of a fed scalar takes the value on the host (a kernel argument): such a run is never replayed,
    and each run fills with its own value."""
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1")
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        v = tf.placeholder(tf.float32, [])
        y = x + tf.fill([3], v)
    with tf.Session(graph=g, device="opencl") as sess:
        for value in [1.0, 1.0, 1.0, 1.0, 5.0, -2.0]:
            np.testing.assert_allclose(sess.run(y, {x: np.zeros((2, 3), np.float32), v: value}),
                                       np.full((2, 3), value, np.float32))
        tapes = _tapes(sess)
        assert tapes and not _replaying(sess)
        assert "host" in tapes[0].why


def test_random_ops_replay_drawing_anew(monkeypatch):
    """Dropout draws new numbers each run (its stream's counter), which a replay sets anew: the replayed step
    draws as the op-by-op launches do."""
    def run(replay):
        monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1" if replay else "0")
        g = tf.Graph()
        with g.as_default():
            x = tf.placeholder(tf.float32, [None, 64])
            y = tf.nn.dropout(x, keep_prob=0.5, seed=3)
        with tf.Session(graph=g, device="opencl") as sess:
            outs = [sess.run(y, {x: np.ones((4, 64), np.float32)}) for _ in range(6)]
            return outs, _tapes(sess)
    want, _ = run(False)
    got, tapes = run(True)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert len({a.tobytes() for a in got}) == len(got), "each run draws anew"
    assert tapes and tapes[0].tape is not None, [t.why for t in tapes]


@pytest.mark.parametrize("force", [None, (2, 1)], ids=["default", "micro2"])
def test_a_restored_variable_is_read_by_the_next_replay(monkeypatch, tmp_path, force):
    """Variables written between steps (a restore, an assign from the host) are what the next step reads, also
    in a micro-batched step replayed whole. The replayed steps give the op-by-op launches' bits, losses and
    weights, without a budget (on the unconstrained plan the session moves a repeated step onto) and in two
    micro-batches (test_replayed_steps_are_the_launched_steps_bit_for_bit's other cases)."""
    def run(replay):
        monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1" if replay else "0")
        tg = small_cnn()
        fetches = [tg.train_op, tg.loss]
        batches = _batches(tg, 12)
        with tg.graph.as_default():
            saver = tf.train.Saver()
            w = tg.graph.get_collection("trainable_variables")[0]
            assign = w.assign(np.full(w.shape.as_list(), 0.01, np.float32))
        with tf.Session(graph=tg.graph, device="opencl", memory_budget=force and "1GB") as sess:
            sess.run(tg.init_op)
            if force:
                _force(sess, tg, force)
            losses = [sess.run(fetches, b)[1] for b in batches[:5]]
            path = saver.save(sess, str(tmp_path / f"ckpt{int(replay)}"))
            losses += [sess.run(fetches, b)[1] for b in batches[5:8]]
            replayed = _replaying(sess)
            saver.restore(sess, path)
            losses += [sess.run(fetches, b)[1] for b in batches[8:10]]
            sess.run(assign)
            losses += [sess.run(fetches, b)[1] for b in batches[10:]]
            weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
        return losses, weights, replayed
    want, got = run(False), run(True)
    assert got[2] and not want[2]
    assert got[0] == want[0]
    for name, w in want[1].items():
        np.testing.assert_array_equal(got[1][name], w, err_msg=name)


@pytest.mark.parametrize("force", [None, (2, 1)], ids=["default", "micro2"])
def test_a_variable_given_another_buffer_is_what_the_next_step_reads(monkeypatch, force):
    """A replayed step looks at where the variables are only after one got another buffer (the executor's
    var_version); then it records again, and reads and updates the new buffer, not the old one, as a step
    launched op by op does; a micro-batched step replayed whole too."""
    def run(replay):
        monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1" if replay else "0")
        tg = small_cnn()
        fetches = [tg.train_op, tg.loss]
        batches = _batches(tg, 8)
        with tf.Session(graph=tg.graph, device="opencl", memory_budget=force and "1GB") as sess:
            sess.run(tg.init_op)
            if force:
                whole = _force(sess, tg, force).whole
            losses = [sess.run(fetches, b)[1] for b in batches[:6]]
            assert _replaying(sess) == replay
            if force:
                assert (whole.tape is not None) == replay
            ex, rt = sess.executor, sess.runtime
            name = tg.graph.get_collection("trainable_variables")[0].op.name
            old = ex.vars[name]
            new = rt.allocate(old.shape, old.dtype)
            rt.copy(new, old)
            before = rt.copy_out(old)
            ex.assigned(name, new)
            losses += [sess.run(fetches, b)[1] for b in batches[6:]]
            np.testing.assert_array_equal(rt.copy_out(old), before)  # no longer the variable: left alone
            assert not np.array_equal(rt.copy_out(new), before), "the steps updated the variable's new buffer"
        return losses
    assert run(True) == run(False)


def test_the_recompute_copy_keeps_the_fused_update_s_variables():
    """The planning copy of a rewritten step (tfplus.engine.rewrite's one _FusedApply for all variables) keeps that
    op's ref inputs, so the step micro-batches with recomputation: its gradients are accumulated."""
    from tfplus.engine.rewrite import optimize
    tg = small_cnn()
    feeds = cnn_feeds(tg)
    rw = optimize(tg.graph, [tg.train_op, tg.loss], set(feeds))
    assert rw is not None and rw.fused.get("_FusedApply")
    fetches = [rw.element[tg.train_op], rw.element[tg.loss]]
    shapes = {rw.element[t]: v.shape for t, v in feeds.items()}
    p = planner.plan(fetches, shapes, "cpu", graph=rw.graph, force=(2, 1, False, 1, 1))
    assert p.recomputed and p.microbatches == 2
    # a gradient per variable (the update's inputs) and the loss are summed over the micro-batches
    assert len(p.accumulators) >= len(tg.graph.get_collection("trainable_variables")) + 1


def test_a_step_the_planner_cannot_plan_runs_plainly_every_time(monkeypatch):
    """Control flow sizes its outputs at run time, which no memory plan can: the repeated run stays on the plain
    executor and gives the same answers."""
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1")
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        p = tf.placeholder(tf.bool, [])
        y = tf.cond(p, lambda: x * 2.0, lambda: x - 1.0)
    with tf.Session(graph=g, device="opencl") as sess:
        for i in range(6):
            xv = np.full((2, 3), float(i), np.float32)
            np.testing.assert_allclose(sess.run(y, {x: xv, p: i % 2 == 0}), xv * 2 if i % 2 == 0 else xv - 1)
        assert any(s.plain_runs == -1 for s in sess.steps) and not _tapes(sess)


def test_a_value_computed_on_the_host_is_what_every_planned_run_returns(monkeypatch):
    """An op of constants with a small output runs its cpu kernel on the host (the opencl host path), whose value
    the planned slot holds until a kernel reads it. The first planned run once returned the arena's bytes instead:
    compiling its fast loop after the run forgot the slot's host value before the fetches were read."""
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        y = tf.matmul(tf.constant(a), tf.constant(b))
    with tf.Session(graph=g, device="opencl") as sess:
        for _ in range(4):
            np.testing.assert_allclose(sess.run(y), a @ b, rtol=1e-4, atol=1e-4)
        assert any(isinstance(s.bound, Bound) for s in sess.steps)


def test_a_step_moved_onto_a_plan_holds_one_step_s_memory(monkeypatch):
    """The plain run's buffers go back to the driver when the plan's arena takes over: the device holds the
    variables, slots and the arena, not also a pool of the plain run's buffers."""
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1")
    tg = small_cnn()
    fetches = [tg.train_op, tg.loss]
    feeds = _batches(tg, 4)
    with tf.Session(graph=tg.graph, device="opencl") as sess:
        rt = sess.runtime
        gc.collect()  # the device's pool is shared: other tests' buffers go back to it, and out of it, first
        rt.trim()
        base = rt.pool_bytes - rt.in_use_bytes  # what the pool keeps for good (constants, tables)
        sess.run(tg.init_op)
        sess.run(fetches, feeds[0])  # plain: its temporaries end up in the pool's free lists
        free = rt.pool_bytes - rt.in_use_bytes - base
        for feed in feeds[1:]:
            sess.run(fetches, feed)
        gc.collect()
        bound = next(s.bound for s in sess.steps if isinstance(s.bound, Bound))
        assert rt.in_use_bytes >= bound.plan.arena_bytes
        after = rt.pool_bytes - rt.in_use_bytes - base  # the last run's fed batch
        assert after < free / 4, (free, after)


def test_a_recorded_copy_and_launch_follow_their_feed_when_it_moves():
    """The runtime's tape on its own: a device copy out of a feed and a kernel reading it, recorded twice with the
    feed in two places, replayed with it in a third: both read the third."""
    from tfplus.kernels.opencl.elementwise import scale
    from tfplus.runtime import opencl
    rt = opencl.OpenCLRuntime()
    batch = rt.copy_in(np.arange(24, dtype=np.float32).reshape(6, 4))
    out = rt.allocate((2, 4), np.float32)

    def record(feed):
        assert rt.tape_begin([feed], [])
        rt.copy(out, feed)
        scale(rt, out, 2.0)  # a launch on a fixed buffer, after the copy
        return rt.tape_end([])
    first, second = record(batch[0:2]), record(batch[2:4])
    assert first.same(second) and [s[2] for s in second.subs] == [0]
    rt.tape_ready(second)
    assert rt.tape_play(second, [batch[4:6]], [])
    np.testing.assert_array_equal(rt.copy_out(out), 2 * np.arange(16, 24, dtype=np.float32).reshape(2, 4))


def test_devices_says_whether_steps_replay(monkeypatch, capsys):
    from tfplus.cli import main
    monkeypatch.delenv("TFPLUS_OPENCL_REPLAY", raising=False)
    assert main(["devices"]) == 0
    assert "repeated steps: replay their recorded kernel launches" in capsys.readouterr().out
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "0")
    assert main(["devices"]) == 0
    assert "repeated steps: launched op by op" in capsys.readouterr().out
