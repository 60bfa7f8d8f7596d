"""The executor: a step compiled once and replayed (tfplus.engine.executor), the fast loop against the careful one."""
import ast
import pathlib

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
from tfplus import planner
from tfplus.engine import executor
from tfplus.engine import memory as execute


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


def _careful_runs(monkeypatch) -> list:
    """Counts the runs that took the careful loop (the first of each signature, and the special cases)."""
    runs = []
    careful = executor.Program._careful

    def counted(self, *args):
        runs.append(self)
        return careful(self, *args)
    monkeypatch.setattr(executor.Program, "_careful", counted)
    return runs


def _train_graph():
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    labels = tf.placeholder(tf.int32, [None], name="labels")
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4) / 10.0, name="w")
    logits = tf.reshape(tf.nn.relu(tf.matmul(x, w)), [-1, 4])
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    return x, labels, w, loss, train


def test_shapes_are_found_once_per_signature_and_the_fast_loop_matches_the_careful_one(monkeypatch):
    x, labels, w, loss, train = _train_graph()
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 4, n)) for n in (2, 2, 5, 2, 5)]
    runs = _careful_runs(monkeypatch)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        fast = [sess.run([train, loss], {x: a, labels: b})[1] for a, b in batches]
        fast_w = sess.run(w)
    # the initializer, w's fetch, and the step once per batch size: 2 and 5
    assert len(runs) == 4
    options, metadata = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE), tf.RunMetadata()
    with tf.Session() as sess:  # a traced run takes the careful loop every time
        sess.run(tf.global_variables_initializer())
        careful = [sess.run([train, loss], {x: a, labels: b}, options=options, run_metadata=metadata)[1]
                   for a, b in batches]
        np.testing.assert_array_equal(sess.run(w), fast_w)
    np.testing.assert_array_equal(careful, fast)


def _step_programs(sess) -> list:
    """(program, steps, kept) of every signature the session's plain programs specialized."""
    return [(p, steps, kept) for p in sess.programs if isinstance(p, executor.Program)
            for steps, kept in p._specialized.values()]


def test_static_ops_run_once_per_signature_and_give_every_run_the_same_results(device):
    x, labels, w, loss, train = _train_graph()
    shape, size = tf.shape(x), tf.size(x) * 2 + tf.constant(1)  # shape arithmetic, kept per signature
    big = tf.reduce_sum(tf.zeros([200, 200]) + 1.0)  # a static op too large to keep (executor._KEEP_BYTES)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 4, n)) for n in (2, 5, 2, 5, 2)]
    fetches = [train, loss, shape, size, big]
    with tf.Session(device=device) as sess:
        sess.run(tf.global_variables_initializer())
        fast = [sess.run(fetches, {x: a, labels: b})[1:] for a, b in batches]
        fast_w = sess.run(w)
        programs = _step_programs(sess)
    options, metadata = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE), tf.RunMetadata()
    with tf.Session(device=device) as sess:  # the careful loop runs every op every time
        sess.run(tf.global_variables_initializer())
        careful = [sess.run(fetches, {x: a, labels: b}, options=options, run_metadata=metadata)[1:]
                   for a, b in batches]
        np.testing.assert_allclose(sess.run(w), fast_w, rtol=1e-6)
    for (a, _), f, c in zip(batches, fast, careful):
        np.testing.assert_allclose(f[0], c[0], rtol=1e-6)
        assert list(f[1]) == list(c[1]) == list(a.shape)
        assert f[2] == c[2] == 2 * a.size + 1
        assert f[3] == c[3] == 40000.0
    step = [(prog, steps, kept) for prog, steps, kept in programs if len(steps) > 5]
    assert len(step) == 2  # one per batch size
    for prog, steps, kept in step:
        looped = {prog.ops[st[0]].op for st in steps}
        assert kept and all(prog.ops[i].op not in looped for i, r in enumerate(prog.ops) if r.static and
                            r.op.type in ("Const", "Shape", "Size"))
        assert {"Shape", "Size", "Const"}.isdisjoint(op.type for op in looped)
        assert any(op.type == "Fill" for op in looped)  # 160 kB: run every time, not held


@needs_opencl
def test_static_ops_under_a_memory_plan_keep_only_values_held_apart_from_the_arena():
    """On opencl a planned step keeps its static ops' host values from run to run (later ops reuse the arena
    memory, not those values); the results are the careful loop's."""
    x, labels, w, loss, train = _train_graph()
    size = tf.size(x) * 2 + tf.constant(1)
    scaled = loss * tf.cast(size, tf.float32)  # a device op reading a kept value after the arena was reused
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((4, 3)).astype(np.float32), rng.integers(0, 4, 4)) for _ in range(4)]
    fetches = [train, loss, size, scaled]
    runs = []
    for options in (None, tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)):
        with tf.Session(device="opencl", memory_budget="1GB") as sess:
            sess.run(tf.global_variables_initializer())
            got = [sess.run(fetches, {x: a, labels: b}, options=options,
                            run_metadata=None if options is None else tf.RunMetadata())[1:] for a, b in batches]
            runs.append((got, sess.run(w)))
            if options is None:
                bound = [s.bound for s in sess.steps if isinstance(s.bound, execute.Bound)]
                kept = [k for b in bound for prog in b.programs for _, k in prog._specialized.values()]
    (fast, fast_w), (careful, careful_w) = runs
    np.testing.assert_allclose(fast_w, careful_w, rtol=1e-6)
    for f, c in zip(fast, careful):
        np.testing.assert_allclose(f[0], c[0], rtol=1e-6)
        assert f[1] == c[1] == 2 * 12 + 1
        np.testing.assert_allclose(f[2], c[2], rtol=1e-6)
    assert any(kept)


def test_a_fed_tensor_makes_the_ops_after_it_not_static(device):
    c = tf.constant([1.0, 2.0]) + 1.0
    d = c * 3.0 + tf.cast(tf.size(c), tf.float32)
    with tf.Session(device=device) as sess:
        for v in ([None] * 3 + [[0.0, 1.0], [4.0, -1.0], [2.0, 2.0]]) * 2:
            got = sess.run(d) if v is None else sess.run(d, {c: v})
            np.testing.assert_allclose(got, np.multiply([2.0, 3.0] if v is None else v, 3.0) + 2.0)


def test_shapes_from_fed_values_are_found_every_run():
    x = tf.placeholder(tf.float32, [6])
    shape = tf.placeholder(tf.int32, [2])
    y = tf.reshape(x, shape) * 2.0
    with tf.Session() as sess:
        for s in ([2, 3], [3, 2], [1, 6]):
            out = sess.run(y, {x: np.arange(6, dtype=np.float32), shape: s})
            np.testing.assert_array_equal(out, 2.0 * np.arange(6).reshape(s))


def test_an_error_in_the_fast_loop_names_the_node_and_op():
    params = tf.constant([1.0, 2.0, 3.0])
    idx = tf.placeholder(tf.int32, [2])
    y = tf.gather(params, idx, name="pick")
    with tf.Session() as sess:
        for _ in range(2):  # the second run takes the fast loop
            np.testing.assert_array_equal(sess.run(y, {idx: [2, 0]}), [3.0, 1.0])
        with pytest.raises(tf.errors.InvalidArgumentError, match="pick") as e:
            sess.run(y, {idx: [0, 7]})
        assert e.value.node_name == "pick" and e.value.op_type == "GatherV2"


def test_a_variable_given_a_new_shape_is_read_at_its_new_shape():
    v = tf.Variable(tf.zeros([2]), name="v", validate_shape=False)
    new = tf.placeholder(tf.float32, [None])
    grow = tf.assign(v, new, validate_shape=False)
    doubled = v * 2.0
    with tf.Session() as sess:
        sess.run(v.initializer)
        for _ in range(2):
            np.testing.assert_array_equal(sess.run(doubled), [0.0, 0.0])
        sess.run(grow, {new: [1.0, 2.0, 3.0]})
        np.testing.assert_array_equal(sess.run(doubled), [2.0, 4.0, 6.0])


def test_control_flow_subgraphs_are_compiled_once():
    n = tf.placeholder(tf.int32, [])
    _, total = tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + tf.cast(i, tf.float32)),
                             (tf.constant(0), tf.constant(0.0)))
    with tf.Session() as sess:
        assert sess.run(total, {n: 4}) == 6.0
        compiled = len(sess.programs)
        assert sess.run(total, {n: 5}) == 10.0
        assert len(sess.programs) == compiled


def test_the_planner_takes_device_facts_and_imports_no_session():
    x, labels, w, loss, train = _train_graph()
    feeds = {x: (4, 3), labels: (4,)}
    by_name = planner.plan([train, loss], feeds, "cpu")
    by_facts = planner.plan([train, loss], feeds, planner.DeviceFacts("cpu", "cpu"))
    assert by_facts.peak_bytes == by_name.peak_bytes and by_facts.alignment == by_name.alignment
    root = pathlib.Path(planner.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) else []
            assert not any(n and n.startswith("tfplus.engine") for n in names), path


def test_inter_op_parallelism_gives_the_sequential_results_bit_for_bit():
    tf.set_random_seed(3)  # both sessions start from the same weights
    x = tf.placeholder(tf.float32, [None, 4, 4, 2], name="x")
    labels = tf.placeholder(tf.int32, [None], name="labels")
    conv = tf.layers.conv2d(x, 3, 3, padding="same", activation=tf.nn.relu, name="conv")
    hidden = tf.layers.dense(tf.reshape(conv, [-1, 48]), 8, activation=tf.nn.relu, name="fc1")
    logits = tf.layers.dense(hidden, 4, name="fc2")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    init = tf.global_variables_initializer()
    rng = np.random.default_rng(1)
    feeds = {x: rng.standard_normal((6, 4, 4, 2)).astype(np.float32), labels: rng.integers(0, 4, 6)}

    def train_steps(inter: int):
        config = tf.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=inter)
        with tf.Session(config=config) as sess:
            sess.run(init)
            losses = [sess.run([train, loss], feeds)[1] for _ in range(4)]
            waves = [s for p in sess.programs for s, _ in p._specialized.values()]
            return losses, sess.run(tf.trainable_variables()), waves
    losses, weights, _ = train_steps(1)
    again, weights_again, waves = train_steps(3)
    assert any(len(w) > 1 for ws in waves for w, _ in ws if isinstance(w, list)), "some ops ran side by side"
    assert again == losses
    for a, b in zip(weights, weights_again):
        np.testing.assert_array_equal(a, b)


def test_a_planned_step_binds_its_arena_once_and_replays_fast(monkeypatch):
    x, labels, w, loss, train = _train_graph()
    rng = np.random.default_rng(2)
    feeds = {x: rng.standard_normal((4, 3)).astype(np.float32), labels: rng.integers(0, 4, 4)}
    runs = _careful_runs(monkeypatch)
    with tf.Session(memory_budget="1GB") as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run([train, loss], feeds)[1]
        allocated, careful = sess.runtime.allocated_bytes, len(runs)
        later = [sess.run([train, loss], feeds)[1] for _ in range(3)]
        assert len(runs) == careful, "the planned step's later runs take the fast loop"
        assert sess.runtime.allocated_bytes == allocated, "they allocate nothing: outputs are the arena's views"
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        plain = [sess.run([train, loss], feeds)[1] for _ in range(4)]
    np.testing.assert_allclose([first, *later], plain, rtol=1e-6)


@pytest.mark.parametrize("kind", ["plain", "plan", pytest.param("replay", marks=needs_opencl)])
def test_a_session_compiles_a_step_once_per_fed_shapes_and_its_driver_with_it(kind):
    """Session.run looks up the step compiled for its (fetches, fed tensors, fed shapes): the driver is chosen
    when it is compiled; the executor's caches hold programs only, the memory plans' arena is its own."""
    x = tf.placeholder(tf.float32, [None, 3])
    y = x * 2.0
    kwargs = {"plain": {"workers": 1}, "plan": {"memory_budget": "1MB"}, "replay": {"device": "opencl"}}[kind]
    with tf.Session(**kwargs) as sess:
        for _ in range(3):
            np.testing.assert_array_equal(sess.run(y, {x: np.ones((2, 3), np.float32)}), np.full((2, 3), 2.0))
        (step,) = sess.steps
        assert step.driver == kind and sess.step(y, {x: np.ones((2, 3), np.float32)}) is step
        assert (step.plan is not None) == (kind != "plain") and sess.memory_plans == ([] if kind == "plain" else
                                                                                      [step.plan])
        assert (sess.executor.arena is None) == (kind == "plain")
        sess.run(y, {x: np.ones((4, 3), np.float32)})  # another batch: another step
        assert len(sess.steps) == 2
        assert all(isinstance(p, executor.Program) for p in sess.programs)
        assert all(isinstance(p, executor.Program) for s in sess.steps for p in s.programs)
