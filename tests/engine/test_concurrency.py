"""Sessions under threads and forks (issue 32): Session.run from many threads at once gives every thread its own
step's values on every path (plain, inter-op threads, a memory budget, OpenCL replay, worker processes); a child
forked from a process whose session has workers never writes the parent's variables; two sessions with workers
in two threads do not deadlock; a worker that dies or stops is a clear error, never a hang."""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest
from conftest import DEVICES
from threaded import in_threads as _in_threads

import tfplus as tf
from tfplus import errors
from tfplus.engine import workers

BATCH = 16  # two slices of workers.MIN_ROWS
THREADS, RUNS = 4, 12


def _linear():
    """A step whose fetched values depend on its feed alone and whose update commutes: loss = mean(h * w) with
    h = 2x + 1, so the gradient, mean_rows(h) / 4, does not depend on w. Integer-valued feeds keep every value
    exact in float32, so any serial order of the updates gives the same bits."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4], name="x")
        w = tf.Variable(tf.zeros([4]), name="w")
        h = x * 2.0 + 1.0
        s = tf.reduce_sum(h, axis=1)
        loss = tf.reduce_mean(h * w)
        train = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
        init = tf.global_variables_initializer()
    return g, x, w, h, s, train, init


def _feed(thread: int, run: int) -> np.ndarray:
    return np.random.default_rng(1000 * thread + run).integers(0, 8, (BATCH, 4)).astype(np.float32)


def _grad(x: np.ndarray) -> np.ndarray:
    return (2.0 * x.astype(np.float64) + 1.0).sum(axis=0) / (4 * len(x))


# Every way a session runs a step: its Session keyword arguments and config.
PATHS = {
    "plain": ({"workers": 1}, None),
    "budget": ({"memory_budget": "64MB"}, None),
    "inter-op": ({"workers": 1}, tf.ConfigProto(inter_op_parallelism_threads=2)),
    "workers": ({"workers": 2}, tf.ConfigProto(intra_op_parallelism_threads=2)),
    "workers-inter-op": ({"workers": 2}, tf.ConfigProto(inter_op_parallelism_threads=2)),
}


# Inter-op threads and worker processes are the cpu device's; on opencl, "plain" replays its steps from an arena
# (engine.memory.run_replayed) and "budget" runs each by a memory plan.
CASES = [(d, p) for d in DEVICES for p in PATHS if d == "cpu" or p in ("plain", "budget")]


def _session(g, device: str, path: str):
    kwargs, config = PATHS[path]
    sess = tf.Session(graph=g, device=device, config=config, **kwargs)
    copy_out = sess.runtime.copy_out

    def slow_copy_out(buf):  # a slow device-to-host copy (a GPU's): other threads run meanwhile
        time.sleep(2e-4)
        return copy_out(buf)
    sess.runtime.copy_out = slow_copy_out
    return sess


@pytest.mark.parametrize("device, path", CASES)
def test_threads_running_one_session_each_get_their_own_values(device, path):
    g, x, w, h, s, train, init = _linear()
    with _session(g, device, path) as sess:
        sess.run(init)

        def infer(i):
            wrong = 0
            for r in range(RUNS):
                xv = _feed(i, r)
                hv, sv = sess.run([h, s], {x: xv})
                wrong += int(not (np.array_equal(hv, 2 * xv + 1) and np.array_equal(sv, (2 * xv + 1).sum(1))))
            return wrong
        assert sum(_in_threads(infer)) == 0


@pytest.mark.parametrize("device, path", CASES)
def test_training_steps_from_threads_are_those_of_some_serial_order(device, path):
    g, x, w, h, s, train, init = _linear()
    with _session(g, device, path) as sess:
        sess.run(init)

        def step(i):
            wrong = 0
            for r in range(RUNS):
                xv = _feed(i, r)
                _, hv = sess.run([train, h], {x: xv})
                wrong += int(not np.array_equal(hv, 2 * xv + 1))
            return wrong
        assert sum(_in_threads(step)) == 0
        final = sess.run(w)
    expected = -sum(_grad(_feed(i, r)) for i in range(THREADS) for r in range(RUNS))
    np.testing.assert_array_equal(final, expected.astype(np.float32))  # exact: no update lost or torn


def _trained(sess, train, x, steps: range):
    for r in steps:
        sess.run(train, {x: _feed(0, r)})


def test_a_forked_child_never_writes_the_parents_variables():
    g, x, w, h, s, train, init = _linear()
    with tf.Session(graph=g, workers=2, config=PATHS["workers"][1]) as sess:
        sess.run(init)
        _trained(sess, train, x, range(3))  # the first step forks the workers; the next ones run on them
        assert len(sess.workers.pids()) == 2
        before = sess.run(w)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: trains three steps of its own, sends what it got, and exits
            code = 1
            try:
                os.close(read)
                got = [sess.run([train, h], {x: _feed(7, r)})[1] for r in range(3)]
                with os.fdopen(write, "wb") as f:
                    pickle.dump((got, sess.run(w), sess.workers.pids()), f)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        got, child_w, child_workers = pickle.loads(data)  # noqa: S301  our own child's bytes
        assert not set(child_workers) & set(sess.workers.pids())  # its own workers, none of the parent's
        for r, hv in enumerate(got):
            np.testing.assert_array_equal(hv, 2 * _feed(7, r) + 1)
        np.testing.assert_array_equal(child_w, before - sum(_grad(_feed(7, r)) for r in range(3)).astype(np.float32))
        np.testing.assert_array_equal(sess.run(w), before)  # the parent's variables are untouched
        _trained(sess, train, x, range(3, 4))  # and its own workers still serve it
        np.testing.assert_array_equal(sess.run(w), before - _grad(_feed(0, 3)).astype(np.float32))


def _blas_training():
    """A training step with GEMMs (OpenBLAS), on workers."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 256], name="x")
        v = tf.Variable(tf.random_normal([256, 256], seed=1), name="v")
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.matmul(x, v), v)))
        train = tf.train.GradientDescentOptimizer(1e-4).minimize(loss)
        init = tf.global_variables_initializer()
    return g, x, v, train, init


def test_two_sessions_with_workers_train_in_two_threads_without_deadlock():
    graphs = [_blas_training() for _ in range(2)]

    def train(i, steps=6):
        g, x, v, step, init = graphs[i]
        with tf.Session(graph=g, workers=2, config=PATHS["workers"][1]) as sess:
            sess.run(init)
            for r in range(steps):
                sess.run(step, {x: np.random.default_rng(100 * i + r).standard_normal((BATCH, 256), np.float32)})
            return sess.run(v), len(sess.workers.pids())
    # (a worker kept alive by a socket another worker inherited made the sessions' close wait 30 s, then kill it)
    together = _in_threads(train, n=2, limit=20.0)
    for i in range(2):
        alone, n = train(i)
        assert together[i][1] == n == 2
        # the serial result up to float32 rounding: OpenBLAS's Haswell kernels (which this box's environment picks)
        # may round a product otherwise when the two sessions' workers share the cores; a wrong result is far larger
        np.testing.assert_allclose(together[i][0], alone, rtol=1e-5, atol=1e-6)


def _on_workers(sess, train, x):
    sess.run(sess.graph.get_operation_by_name("init"))
    _trained(sess, train, x, range(2))
    pids = sess.workers.pids()
    assert len(pids) == 2
    return pids


def test_a_killed_worker_is_an_unavailable_error_and_the_session_can_still_save():
    g, x, w, h, s, train, init = _linear()
    with tf.Session(graph=g, workers=2, config=PATHS["workers"][1]) as sess:
        pid = _on_workers(sess, train, x)[1]
        before = sess.run(w)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(errors.UnavailableError, match=rf"worker process {pid} .*SIGKILL.*workers=1"):
            sess.run(train, {x: _feed(0, 2)})
        np.testing.assert_array_equal(sess.run(w), before)  # the failed step changed nothing; still readable
        _trained(sess, train, x, range(3, 4))  # later steps run in this process
        np.testing.assert_array_equal(sess.run(w), before - _grad(_feed(0, 3)).astype(np.float32))
        assert sess.workers.pids() == []


def test_a_stopped_worker_is_an_unavailable_error_within_a_bound(monkeypatch):
    monkeypatch.setattr(workers, "STOPPED_SECONDS", 0.5)
    g, x, w, h, s, train, init = _linear()
    with tf.Session(graph=g, workers=2, config=PATHS["workers"][1]) as sess:
        pid = _on_workers(sess, train, x)[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            t = time.monotonic()
            with pytest.raises(errors.UnavailableError, match=rf"worker process {pid} .*stopped"):
                sess.run(train, {x: _feed(0, 2)})
            assert time.monotonic() - t < 10
        finally:
            with contextlib.suppress(ProcessLookupError):  # (the error killed and reaped it)
                os.kill(pid, signal.SIGCONT)
        assert sess.run(w).shape == (4,)



def test_a_hung_worker_is_an_unavailable_error_within_a_bound(monkeypatch):
    monkeypatch.setattr(workers, "HUNG_SECONDS", 0.6)
    parent, slice_run = os.getpid(), workers._Step.slice_run

    def hanging(self, *run):  # in a worker: blocked for good, using no CPU time (as in a deadlock)
        if os.getpid() != parent:
            time.sleep(3600)
        return slice_run(self, *run)
    monkeypatch.setattr(workers._Step, "slice_run", hanging)
    g, x, w, h, s, train, init = _linear()
    with tf.Session(graph=g, workers=2, config=PATHS["workers"][1]) as sess:
        sess.run(init)
        _trained(sess, train, x, range(1))  # in this process; then the workers are forked
        pid = sess.workers.pids()[0]
        t = time.monotonic()
        with pytest.raises(errors.UnavailableError, match=rf"worker process {pid} .*no CPU time .*hung"):
            sess.run(train, {x: _feed(0, 1)})
        assert time.monotonic() - t < 10
        np.testing.assert_array_equal(sess.run(w), -_grad(_feed(0, 0)).astype(np.float32))


def test_a_worker_out_of_memory_is_a_resource_exhausted_error_naming_it(monkeypatch):
    parent, slice_run = os.getpid(), workers._Step.slice_run

    def short_of_memory(self, *run):
        if os.getpid() != parent:
            raise MemoryError("Unable to allocate 64.0 MiB")
        return slice_run(self, *run)
    monkeypatch.setattr(workers._Step, "slice_run", short_of_memory)
    g, x, w, h, s, train, init = _linear()
    with tf.Session(graph=g, workers=2, config=PATHS["workers"][1]) as sess:
        sess.run(init)
        _trained(sess, train, x, range(1))
        pid = sess.workers.pids()[0]
        with pytest.raises(errors.ResourceExhaustedError, match=rf"worker process {pid} ran out of memory .*64.0 MiB"):
            sess.run(train, {x: _feed(0, 1)})


def test_a_fork_waits_for_the_steps_running_in_other_threads():
    g, x, w, h, s, train, init = _linear()
    inside, left = threading.Event(), []
    with tf.Session(graph=g, workers=1) as sess:
        sess.run(init)
        copy_out = sess.runtime.copy_out

        def slow_copy_out(buf):  # the step of the thread below lasts 0.5 s
            inside.set()
            time.sleep(0.5)
            left.append(time.monotonic())
            return copy_out(buf)
        sess.runtime.copy_out = slow_copy_out
        t = threading.Thread(target=sess.run, args=(h, {x: _feed(0, 0)}))
        t.start()
        inside.wait()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forked = time.monotonic()
        os.waitpid(pid, 0)
        t.join()
    assert left and forked >= left[0]  # the fork came after the step, not in the middle of it



_hook_lock, _hook_active, _hook_holds, _hook_held = threading.Lock(), threading.Event(), threading.Event(), \
    threading.local()


def _other_library_before_fork():  # as h5py's and logging's hooks: a lock of theirs held over the fork
    if _hook_active.is_set() and not getattr(_hook_held, "yes", False):
        _hook_lock.acquire()
        _hook_held.yes = True
        _hook_holds.set()


def _other_library_after_fork():
    if getattr(_hook_held, "yes", False):
        _hook_held.yes = False
        _hook_lock.release()


# Registered after tfplus's, so it runs before tfplus's hook (os.fork runs its `before` hooks newest first).
os.register_at_fork(before=_other_library_before_fork, after_in_parent=_other_library_after_fork,
                    after_in_child=_other_library_after_fork)


def test_a_fork_whose_other_hooks_hold_a_lock_that_a_step_needs_does_not_deadlock(monkeypatch):
    """A fork from outside tfplus holds another library's lock while tfplus's hook waits for a step that needs that
    lock to fork its workers: the wait is bounded (it hung for good in a suite that had imported h5py)."""
    monkeypatch.setattr(workers, "FOREIGN_FORK_SECONDS", 0.5)
    g, x, w, h, s, train, init = _linear()
    in_fork = threading.Event()
    real_fork = workers._Group.fork

    def fork_when_the_lock_is_held(group):
        in_fork.set()
        assert _hook_holds.wait(10)
        real_fork(group)
    monkeypatch.setattr(workers._Group, "fork", fork_when_the_lock_is_held)
    with tf.Session(graph=g, workers=2, config=PATHS["workers"][1]) as sess:
        sess.run(init)
        t = threading.Thread(target=_trained, args=(sess, train, x, range(2)), daemon=True)
        t.start()
        assert in_fork.wait(30)  # the step is inside, about to fork its workers
        _hook_active.set()
        try:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        finally:
            _hook_active.clear()
            _hook_holds.clear()
        t.join(30)
        assert not t.is_alive(), "the step's worker fork is still waiting: a deadlock"
        assert len(sess.workers.pids()) == 2
