"""The thread sweep: Session.run from many threads on every execution path gives what a serial run gives. TF1's
sessions are thread-safe, and its scripts lean on it: input or evaluation threads beside the training one, two
sessions of one graph, a Saver in one thread while another steps. Each path (cpu; cpu with worker processes; the
fused and the unfused update; memory plans micro-batched, streamed and rematerialized; OpenCL on PoCL replaying
taped steps) is held to:
- sessions of one graph training in threads, one each: every loss and the final weights those of the sessions
  trained one after another, bit for bit (each session's steps are its own);
- one session trained by one thread and evaluated by others, fed strided views and holding their fetches to the
  end: every evaluation equals the serial run's at one of the training's weight states, in the order the trainer
  made them (a valid serialization), and the trainer's losses and weights are the serial run's;
- commutative updates (plain SGD, gradients free of the weights, exact in float32) from every thread: the final
  weights are the sum of every step's, so no update is lost or torn;
- a variable assigned whole by one thread and read by others: no read sees half an assignment; assign_add from
  every thread counts every add;
- a session closed while threads run on it: each gets the closed-session error, none crashes or hangs;
- checkpoints saved while another thread trains: each one step's weights, and no save waits for ever (a worker
  process forked during a save kept its folder's lock);
- partial runs set up from two threads at once: two handles."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from conftest import DEVICES
from modelcheck import recompute_level, small_cnn, use_forced_plan
from threaded import in_threads

import tfplus as tf
from tfplus import gfile

THREADS, STEPS, BATCH = 3, 3, 16  # BATCH: two slices of workers.MIN_ROWS rows
_WORKERS = {"workers": 2, "config": tf.ConfigProto(intra_op_parallelism_threads=2)}
_UNFUSED = {"workers": 1, "config": {"graph_options": {"rewrite_options": {"remapping": "OFF"}}}}
# path -> (device, Session keyword arguments, planner.plan's force for the training step, or None). The forced
# plans are those a tight budget picks (tests/planner); forcing keeps the test off the planner's search.
PATHS = {
    "cpu": ("cpu", {"workers": 1}, None),
    "cpu-unfused": ("cpu", _UNFUSED, None),
    "cpu-workers": ("cpu", _WORKERS, None),
    "micro-batched": ("cpu", {"memory_budget": "1GB"}, (2, 1)),
    "streamed": ("cpu", {"memory_budget": "1GB"}, (1, 1, False, 1, 0, ("MaxPool:0", 2))),
    "rematerialized": ("cpu", {"memory_budget": "1GB"}, "recompute"),
    "opencl": ("opencl", {}, None),
    "opencl-micro-batched": ("opencl", {"memory_budget": "1GB"}, (2, 1)),
}
CASES = [p for p, (device, _, _) in PATHS.items() if device in DEVICES]


def _feeds(tg, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {tg.images: rng.standard_normal((BATCH, 3, 16, 16)).astype(np.float32),
            tg.labels: rng.integers(0, 10, BATCH).astype(np.int32)}


def _session(tg, path: str) -> tf.Session:
    """A session of `path` on the graph of `tg`, initialized, its training step planned as the path says."""
    device, kwargs, force = PATHS[path]
    sess = tf.Session(graph=tg.graph, device=device, **kwargs)
    if force is not None:
        feeds = _feeds(tg, 0)
        if force == "recompute":
            force = (1, 1, False, 1, recompute_level(tg, feeds, device))
        use_forced_plan(sess, [tg.train_op, tg.loss], feeds, force)
    sess.run(tg.init_op)
    return sess


def _weights(sess, tg) -> list:
    return sess.run(tg.graph.get_collection("trainable_variables"))


def _train(sess, tg, feeds: dict) -> list:
    return [sess.run([tg.train_op, tg.loss], feeds)[1] for _ in range(STEPS)]


def _assert_equal(got, want, what: str):
    assert len(got) == len(want), what
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(a, b, err_msg=f"{what}[{k}]")


@pytest.mark.parametrize("path", CASES)
def test_sessions_of_one_graph_train_in_threads_as_one_after_another(path):
    tg = small_cnn()

    def run(i):
        with _session(tg, path) as sess:
            return _train(sess, tg, _feeds(tg, i)), _weights(sess, tg)
    serial = [run(i) for i in range(THREADS)]
    for i, (losses, weights) in enumerate(in_threads(run, THREADS)):
        _assert_equal(losses, serial[i][0], f"session {i}'s losses")
        _assert_equal(weights, serial[i][1], f"session {i}'s weights")


@pytest.mark.parametrize("path", CASES)
def test_threads_evaluating_while_one_trains_see_one_weight_state_at_a_time(path):
    """The evaluators' feeds are strided views of one array (every THREADS-th image), and their fetched values
    (the logits, the loss and a weight) are held to the end, so a fetch that aliased a buffer a later step
    rewrites would show."""
    tg = small_cnn()
    pool = np.random.default_rng(7).standard_normal((BATCH * THREADS, 3, 16, 16)).astype(np.float32)
    labels = np.arange(BATCH, dtype=np.int32) % 10
    views = [{tg.images: pool[i::THREADS], tg.labels: labels} for i in range(THREADS)]
    weight = tg.graph.get_collection("trainable_variables")[0]
    probe = [tg.eval_logits if tg.eval_logits is not None else tg.logits, tg.loss, weight]
    train_feeds = _feeds(tg, 11)
    with _session(tg, path) as sess:  # serially: the probes at every weight state, then the training
        states = [[sess.run(probe, views[i]) for i in range(1, THREADS)]]
        losses = []
        for _ in range(STEPS):
            losses.append(sess.run([tg.train_op, tg.loss], train_feeds)[1])
            states.append([sess.run(probe, views[i]) for i in range(1, THREADS)])
        final = _weights(sess, tg)
    with _session(tg, path) as sess:
        done = threading.Event()

        def body(i):
            if i == 0:
                try:
                    return _train(sess, tg, train_feeds), _weights(sess, tg)
                finally:
                    done.set()
            seen = [sess.run(probe, views[i])]
            while not done.is_set():
                seen.append(sess.run(probe, views[i]))
            seen.append(sess.run(probe, views[i]))  # (after the last step)
            return seen
        (got_losses, got_final), *evaluated = in_threads(body, THREADS)
    _assert_equal(got_losses, losses, "the trainer's losses")
    _assert_equal(got_final, final, "the final weights")
    for i, seen in enumerate(evaluated):
        at = [_state_of(values, [s[i] for s in states]) for values in seen]
        assert None not in at, f"evaluator {i + 1}: fetch {at.index(None)} matches no weight state of the run"
        assert at == sorted(at) and at[-1] == STEPS, f"evaluator {i + 1} saw the states in the order {at}"


def _state_of(values: list, states: list) -> int | None:
    """The first weight state whose probe values equal `values` exactly, or None."""
    return next((k for k, s in enumerate(states) if all(np.array_equal(a, b) for a, b in zip(values, s))), None)


def _commuting():
    """Two variables updated by plain SGD from gradients that do not depend on them (loss = mean(h * w) +
    mean(h[:, :2] * v), h = 2x + 1), exact in float32 for the integer feeds below: every order of the steps ends
    at the same bits. Both updates share their learning rate, so the rewrite fuses them into one _FusedApply."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4], name="x")
        w = tf.Variable(tf.zeros([4]), name="w")
        v = tf.Variable(tf.zeros([2]), name="v")
        h = x * 2.0 + 1.0
        loss = tf.reduce_mean(h * w) + tf.reduce_mean(h[:, :2] * v)
        train = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
        init = tf.global_variables_initializer()
    return g, x, (w, v), h, train, init


def _int_feed(thread: int, run: int) -> np.ndarray:
    return np.random.default_rng(1000 * thread + run).integers(0, 8, (BATCH, 4)).astype(np.float32)


@pytest.mark.parametrize("path", CASES)
def test_commuting_updates_from_every_thread_all_land(path):
    g, x, (w, v), h, train, init = _commuting()
    device, kwargs, force = PATHS[path]
    runs = 8
    with tf.Session(graph=g, device=device, **kwargs) as sess:
        if force is not None:
            use_forced_plan(sess, [train, h], {x: _int_feed(0, 0)}, (2, 1))  # (the plans above need convs)
        sess.run(init)

        def body(i):
            fetched = [(xv, sess.run([train, h], {x: xv})[1]) for xv in (_int_feed(i, r) for r in range(runs))]
            return all(np.array_equal(hv, 2 * xv + 1) for xv, hv in fetched)
        assert all(in_threads(body, THREADS))
        got_w, got_v = sess.run([w, v])
    hs = [2 * _int_feed(i, r).astype(np.float64) + 1 for i in range(THREADS) for r in range(runs)]
    np.testing.assert_array_equal(got_w, -sum(hv.mean(0) / 4 for hv in hs).astype(np.float32))
    np.testing.assert_array_equal(got_v, -sum(hv[:, :2].mean(0) / 2 for hv in hs).astype(np.float32))


@pytest.mark.parametrize("path", CASES)
def test_checkpoints_saved_while_another_thread_trains_each_hold_one_step_of_every_variable(path, tmp_path):
    """Every checkpoint a thread saves while another trains holds the weights after the trainer's k-th step, for
    one k shared by every variable: none holds two steps' values, none a step's half."""
    g, x, (w, v), h, train, init = _commuting()
    device, kwargs, force = PATHS[path]
    runs = 12
    with g.as_default():
        saver = tf.train.Saver(max_to_keep=None)
    with tf.Session(graph=g, device=device, **kwargs) as sess:
        if force is not None:
            use_forced_plan(sess, [train, h], {x: _int_feed(0, 0)}, (2, 1))
        sess.run(init)
        done = threading.Event()

        def body(i):
            if i == 0:
                try:
                    for r in range(runs):
                        sess.run([train, h], {x: _int_feed(0, r)})
                finally:
                    done.set()
                return []
            saved = [saver.save(sess, str(tmp_path / "model"), global_step=0)]
            while not done.is_set():
                saved.append(saver.save(sess, str(tmp_path / "model"), global_step=len(saved)))
            return saved
        _, saved = in_threads(body, 2)
    hs = [2 * _int_feed(0, r).astype(np.float64) + 1 for r in range(runs)]
    states = [(-sum(hv.mean(0) / 4 for hv in hs[:k]) + np.zeros(4), -sum(hv[:, :2].mean(0) / 2 for hv in hs[:k])
               + np.zeros(2)) for k in range(runs + 1)]
    at = []
    for path_ in saved:
        got = (tf.train.load_variable(path_, w.op.name), tf.train.load_variable(path_, v.op.name))
        at.append(next((k for k, (sw, sv) in enumerate(states)
                        if np.array_equal(got[0], sw.astype(np.float32)) and np.array_equal(got[1], sv.astype(
                            np.float32))), None))
    assert None not in at and at == sorted(at), f"the checkpoints' steps: {at}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX's")
def test_a_process_forked_while_a_save_holds_its_folders_lock_does_not_keep_the_lock(tmp_path):
    """A session's worker processes fork at its first training step, maybe while another thread saves: an flock
    belongs to the open file the fork shares, so the workers kept the Saver's folder lock after the save and the
    next save waited forever (the checkpoint test above hung on cpu-workers)."""
    import fcntl
    r, w = os.pipe()
    with gfile.folder_lock(str(tmp_path)):
        pid = os.fork()
        if pid == 0:  # the child lives on, as a worker does, until the parent ends it
            os.close(w)
            os.read(r, 1)
            os._exit(0)
    os.close(r)
    try:
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (BlockingIOError while the child holds it)
        finally:
            os.close(fd)
    finally:
        os.close(w)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("device, budget", [(d, b) for d in DEVICES for b in (None, "1GB")])
def test_a_variable_read_while_another_thread_assigns_it_is_never_half_assigned(device, budget):
    size, rounds = 1 << 16, 20
    g = tf.Graph()
    with g.as_default():
        value = tf.placeholder(tf.float32, [size])
        w = tf.Variable(tf.zeros([size]))
        assign = w.assign(value)
        count = tf.Variable(0.0)
        add = count.assign_add(1.0)
        read = tf.identity(w) * 1.0  # a kernel reading it, besides the variable's own fetch
        init = tf.global_variables_initializer()
    with tf.Session(graph=g, device=device, memory_budget=budget) as sess:
        sess.run(init)
        done = threading.Event()

        def body(i):
            if i == 0:
                try:
                    for k in range(1, rounds + 1):
                        sess.run([assign, add], {value: np.full(size, k, np.float32)})
                finally:
                    done.set()
                return []
            reads = []
            while not done.is_set():
                reads += sess.run([w, read, add])[:2]
            return reads
        reads = sum(in_threads(body, THREADS), [])
        torn = [r for r in reads if not (r == r[0]).all()]
        assert not torn, f"{len(torn)} of {len(reads)} reads saw two assignments' values, e.g. {np.unique(torn[0])}"
        assert sess.run(w)[0] == rounds
        assert sess.run(count) == rounds + len(reads) // 2  # every add counted, the trainer's and the readers'


@pytest.mark.parametrize("path", ["cpu", "cpu-workers", "micro-batched", "opencl"])
def test_a_session_closed_while_threads_run_on_it_is_the_closed_error_in_each(path):
    if PATHS[path][0] not in DEVICES:
        pytest.skip("TFPLUS_TESTS_CPU_ONLY=1: cpu device only")
    tg = small_cnn()
    feeds = _feeds(tg, 0)
    sess = _session(tg, path)
    started = threading.Barrier(THREADS)

    def body(i):
        if i == 0:
            started.wait(60)  # every other thread has run a step
            sess.close()
            return None
        sess.run([tg.train_op, tg.loss], feeds)
        started.wait(60)
        try:
            while True:
                sess.run([tg.train_op, tg.loss] if i % 2 else tg.logits, feeds)
        except RuntimeError as e:
            return str(e)
    errors = in_threads(body, THREADS, limit=60.0)[1:]
    assert errors == ["Attempted to use a closed Session"] * (THREADS - 1)


def test_partial_runs_set_up_at_once_in_threads_get_their_own_handles(monkeypatch):
    """Two threads inside partial_run_setup at once (held together where it reads its feeds, after it names the
    handle) get two handles, and each partial run is fed and fetches its own values."""
    from tfplus.engine import session as session_mod
    g = tf.Graph()
    with g.as_default():
        a = tf.placeholder(tf.float32, [])
        b = a * 2.0
        c = b + 1.0
    together, first = threading.Barrier(2), threading.local()
    as_feed_key = session_mod._as_feed_key

    def held(graph, key):
        if not getattr(first, "passed", False):  # (each thread's first call: partial_run_setup's)
            first.passed = True
            together.wait(30)
        return as_feed_key(graph, key)
    monkeypatch.setattr(session_mod, "_as_feed_key", held)
    with tf.Session(graph=g) as sess:
        def body(i):
            handle = sess.partial_run_setup([b, c], [a])
            return handle, sess.partial_run(handle, b, {a: float(i)}), sess.partial_run(handle, c)
        (h0, b0, c0), (h1, b1, c1) = in_threads(body, 2, limit=60.0)
    assert h0 != h1
    assert (b0, c0, b1, c1) == (0.0, 1.0, 2.0, 3.0)
