"""The host's path through a replayed opencl step (what two ranks' steps wait for, issue 36): a replayed tape
flushes the queue as it goes (after the first launch, every few launches, each host item and the last), so that a
driver that holds enqueued commands until a flush starts the device on a step while the host queues the rest, and
the flushes change no value the replay computes; a device's session run leaves BLAS's threads alone."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
from tfplus import threads
from tfplus.runtime.opencl.discovery import cl

pytestmark = needs_opencl


def _recorded_twice(rt, feeds: list, done: list):
    """A tape of a copy out of a feed, three launches, host work, one launch; recorded with each of two feeds."""
    from tfplus.kernels.opencl.elementwise import scale
    out = rt.allocate((2, 4), np.float32)

    def record(feed):
        assert rt.tape_begin([feed], [])
        rt.copy(out, feed)
        for _ in range(3):
            scale(rt, out, 2.0)
        rt.tape_host(lambda: done.append(1), ("note",))
        scale(rt, out, 0.5)
        return rt.tape_end([])
    first, second = record(feeds[0]), record(feeds[1])
    assert first.same(second)
    return second, out


def _shape(tape) -> str:
    """The compiled calls as letters: F a flush of the queue, k a launch, c a device copy, h host work."""
    names = {cl._cl.enqueue_nd_range_kernel: "k", cl._cl._enqueue_copy_buffer: "c"}
    return "".join("F" if getattr(fn, "__name__", "") == "flush" else names.get(fn, "h") for fn, _ in tape.items)


def test_a_replay_flushes_after_the_first_launch_every_few_host_work_and_the_last(monkeypatch):
    from tfplus.runtime import opencl
    rt = opencl.OpenCLRuntime()
    batch = rt.copy_in(np.arange(24, dtype=np.float32).reshape(6, 4))
    done: list = []
    tape, out = _recorded_twice(rt, [batch[0:2], batch[2:4]], done)
    tape.compile(rt.queue, every=2)
    assert _shape(tape) == "cFkFkkFhFkF"
    done.clear()
    assert rt.tape_play(tape, [batch[4:6]], [])  # the feed moved: the copy's source follows it past the flushes
    np.testing.assert_array_equal(rt.copy_out(out), 4 * np.arange(16, 24, dtype=np.float32).reshape(2, 4))
    assert done == [1]


def test_a_tape_with_host_work_polls_at_each_flush_and_a_step_not_replayed_at_each_launch():
    """The all-reduces the main thread moves on (kernels/numpy/collective.Reducer.poll) are polled at each flush of a
    replay, from the list as it is at each call, and at each launch of a run that is not replayed."""
    from tfplus.kernels.opencl.elementwise import scale
    from tfplus.runtime import opencl
    rt = opencl.OpenCLRuntime()
    batch = rt.copy_in(np.arange(24, dtype=np.float32).reshape(6, 4))
    polls: list = []
    seen: list = []
    tape, out = _recorded_twice(rt, [batch[0:2], batch[2:4]], [])
    tape.compile(rt.queue, every=2, polls=polls)
    polls.append(lambda: seen.append("replay"))  # after the compile: read when the flush runs
    assert rt.tape_play(tape, [batch[0:2]], [])
    assert seen == ["replay"] * _shape(tape).count("F") == ["replay"] * 5
    rt.dev.polls.append(lambda: seen.append("launch"))
    try:
        scale(rt, out, 2.0)
        scale(rt, out, 2.0)
    finally:
        rt.dev.polls.pop()
    assert seen[5:] == ["launch", "launch"]


def test_flush_0_replays_without_flushes(monkeypatch):
    from tfplus.runtime import opencl
    monkeypatch.setenv("TFPLUS_OPENCL_FLUSH", "0")
    rt = opencl.OpenCLRuntime()
    batch = rt.copy_in(np.arange(24, dtype=np.float32).reshape(6, 4))
    tape, out = _recorded_twice(rt, [batch[0:2], batch[2:4]], [])
    rt.tape_ready(tape)
    assert _shape(tape) == "ckkkhk"
    assert rt.tape_play(tape, [batch[0:2]], [])
    np.testing.assert_array_equal(rt.copy_out(out), 4 * np.arange(8, dtype=np.float32).reshape(2, 4))


def test_by_default_only_a_tape_with_host_work_flushes(monkeypatch):
    from tfplus.runtime.opencl.tape import flush_every
    monkeypatch.delenv("TFPLUS_OPENCL_FLUSH", raising=False)
    assert flush_every(host_work=True) == 4 and flush_every(host_work=False) == 0
    monkeypatch.setenv("TFPLUS_OPENCL_FLUSH", "8")
    assert flush_every(host_work=False) == 8


def test_a_flush_count_that_is_not_a_whole_number_is_refused(monkeypatch):
    from tfplus.runtime.opencl.tape import flush_every
    monkeypatch.setenv("TFPLUS_OPENCL_FLUSH", "-1")
    with pytest.raises(ValueError, match="TFPLUS_OPENCL_FLUSH='-1'.*whole number"):
        flush_every()


def test_a_bad_flush_count_is_refused_when_the_device_is_made(monkeypatch):
    from tfplus.runtime import opencl
    monkeypatch.setenv("TFPLUS_OPENCL_FLUSH", "abc")
    with pytest.raises(ValueError, match="TFPLUS_OPENCL_FLUSH='abc'"):
        opencl.OpenCLRuntime()


def test_only_a_cpu_session_s_run_limits_blas(monkeypatch):
    """threads.step's BLAS limit (threadpoolctl, tens of us a run) is the cpu device's: an opencl run skips it."""
    limited = []
    real = threads.blas_single_threaded

    def counted():
        limited.append(1)
        return real()
    monkeypatch.setattr(threads, "blas_single_threaded", counted)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [2])
        y = x * 2.0
    for device, runs in (("opencl", 0), ("cpu", 1)):
        limited.clear()
        with tf.Session(graph=g, device=device, workers=1) as sess:
            np.testing.assert_array_equal(sess.run(y, {x: [1.0, 2.0]}), [2.0, 4.0])
        assert len(limited) == runs, device
