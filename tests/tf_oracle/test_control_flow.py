"""tf.cond, tf.while_loop and tf.TensorArray against TensorFlow's TF1 control flow: values, static shapes,
structures and gradients, on every device; a MonitoredTrainingSession training a graph with all of them
(tests/controlflow.py's, which the GraphDef, summary and TensorFlow-import tests share)."""
from __future__ import annotations

import collections

import numpy as np
import pytest
from conftest import DEVICES
from controlflow import CF_FEEDS, control_flow_model

import tfplus as tf

State = collections.namedtuple("State", ["h", "total"])


def _check_against_tf(tf1, build, feed_values):
    """Builds `build(lib, *placeholders)` (a list of tensors: outputs and gradients) in TensorFlow once and in
    tfplus on every device, and compares the values."""
    want = None
    for lib, device in [(tf1, None)] + [(tf, d) for d in DEVICES]:
        g = lib.Graph()
        with g.as_default():
            phs = [lib.placeholder(lib.float64, v.shape, name=f"in{i}") for i, v in enumerate(feed_values)]
            outs = build(lib, *phs)
        with lib.Session(graph=g, **({} if device is None else {"device": device})) as sess:
            got = sess.run(outs, dict(zip(phs, feed_values)))
        if want is None:
            want = got
            continue
        assert len(got) == len(want)
        for k, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=f"output {k} on {device}")


RNG = np.random.default_rng(5)
X, W = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 3)) * 0.5


def test_monitored_training_session_trains_saves_and_restores_a_control_flow_graph(tmp_path):
    from tfplus.graph_io import read_graph_def
    losses = []
    for run in range(2):
        with tf.Graph().as_default() as g:
            control_flow_model()
            with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=2,
                                                   save_summaries_steps=1) as sess:
                for _ in range(3):
                    losses.append(sess.run(["loss:0", "train"], CF_FEEDS)[0])
                if run == 0:
                    after = sess.run("loss:0", CF_FEEDS)
                else:
                    assert sess.run(tf.train.get_global_step()) == 6
        if run == 0:
            assert losses[2] < losses[0]
            assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
    assert losses[3] == after  # the second run starts from the first run's checkpoint
    written = read_graph_def(str(tmp_path / "graph.pbtxt"))  # the graph beside the checkpoints, as in TF1
    assert {n.op for n in written.node} >= {"If", "While"} and len(written.library.function) >= 8
    assert written == g.as_graph_def(add_shapes=True)


def test_while_loop_several_vars_structures_and_gradients(tf1):
    def build(lib, x, w):
        def body(i, state, extra):
            h = lib.tanh(lib.matmul(state.h, w)) + extra["bias"]
            return i + 1, State(h, state.total + lib.reduce_sum(h * h)), {"bias": extra["bias"] * 0.5}
        init = (lib.constant(0), State(x, lib.constant(0.0, lib.float64)), {"bias": lib.constant(0.1, lib.float64)})
        i, state, extra = lib.while_loop(lambda i, s, e: i < 4, body, init)
        loss = state.total + lib.reduce_sum(state.h * x) + extra["bias"]
        return [i, state.h, state.total, extra["bias"]] + lib.gradients(loss, [x, w])
    _check_against_tf(tf1, build, [X, W])


def test_while_loop_maximum_iterations_and_single_var_unpacking(tf1):
    def build(lib, x):
        # cond never turns False: maximum_iterations ends the loop; a one-variable list comes back unpacked
        y = lib.while_loop(lambda v: lib.reduce_sum(v) > -1e300, lambda v: [v * 1.5 - 0.25], [x],
                           maximum_iterations=3)
        assert not isinstance(y, (list, tuple))
        [z] = lib.while_loop(lambda v: lib.reduce_sum(v) < 1e300, lambda v: v * 2.0, [x],
                             return_same_structure=True, maximum_iterations=lib.constant(2))
        return [y, z] + lib.gradients(lib.reduce_sum(y * y) + lib.reduce_sum(z), [x])
    _check_against_tf(tf1, build, [X])


def test_while_loop_data_dependent_trip_count_and_captured_tensor_gradient(tf1):
    def build(lib, x, w):
        def body(v, n):
            return lib.sin(v) * w[0] + x, n + 1.0
        v, n = lib.while_loop(lambda v, n: lib.reduce_max(lib.abs(v)) < 8.0, body, [x, lib.constant(0.0, lib.float64)],
                              maximum_iterations=20)
        return [v, n] + lib.gradients(lib.reduce_sum(v), [x, w])
    _check_against_tf(tf1, build, [X, W])


def test_while_loop_shape_invariants(tf1):
    def build(lib, x):
        def body(i, acc):
            return i + 1, lib.concat([acc, acc[-1:] * 2.0], axis=0)
        i, acc = lib.while_loop(lambda i, acc: i < 3, body, [0, x],
                                shape_invariants=[lib.TensorShape([]), lib.TensorShape([None, 3])])
        assert acc.shape.as_list() == [None, 3]
        return [i, acc]
    _check_against_tf(tf1, build, [X])
    x = tf.zeros([2, 3])
    with pytest.raises(ValueError, match=r"enters the loop with shape \(2, 3\), but has shape \(3, 3\) after one "
                                         "iteration.*shape_invariants"):
        tf.while_loop(lambda v: True, lambda v: tf.concat([v, v[:1]], 0), [x])


def test_while_loop_back_prop_false_has_no_gradient(tf1):
    def check(lib):
        with lib.Graph().as_default():
            x = lib.constant([1.0, 2.0])
            y = lib.while_loop(lambda v: lib.reduce_sum(v) < 10.0, lambda v: v * 2.0, [x], back_prop=False)
            assert lib.gradients(lib.reduce_sum(y), [x]) == [None], lib
    check(tf1)
    check(tf)


def test_nested_while_loops_gradient(tf1):
    def build(lib, x, w):
        def outer(i, v):
            inner = lib.while_loop(lambda j, u: j < 2, lambda j, u: (j + 1, lib.tanh(u * w[1] + w[0])), [0, v])[1]
            return i + 1, inner + 0.5 * v
        v = lib.while_loop(lambda i, v: i < 3, outer, [0, x])[1]
        return [v] + lib.gradients(lib.reduce_sum(v * v), [x, w])
    _check_against_tf(tf1, build, [X, W])


def test_cond_branches_shapes_and_gradients(tf1):
    def build(lib, x, w):
        outs = []
        for p in (lib.reduce_sum(x) > 100.0, lib.reduce_sum(x) < 100.0):
            a, b = lib.cond(p, lambda: (lib.matmul(x, w), x[:1]), lambda: (lib.exp(x) * w[0], x * 2.0))
            assert b.shape.as_list() == [None, 3]  # (1, 3) in one branch, (2, 3) in the other
            outs += [a, b]
        [single] = lib.cond(outs[0][0, 0] > 0, lambda: [w * 2.0], lambda: [w - 1.0], strict=True)
        loss = lib.add_n([lib.reduce_sum(o * o) for o in outs]) + lib.reduce_sum(single)
        return outs + [single] + lib.gradients(loss, [x, w])
    _check_against_tf(tf1, build, [X, W])


def test_cond_unpacks_a_singleton_unless_strict():
    # TF 1.x's tf.cond (control flow v1, what TF1 scripts were written against) unpacks a one-element result
    # when strict=False; TF 2's compat.v1.cond (control flow v2) does not, so this is not checked with the oracle.
    w = tf.constant([1.0])
    assert isinstance(tf.cond(w[0] > 0, lambda: [w], lambda: [w * 2.0]), tf.Tensor)
    assert isinstance(tf.cond(w[0] > 0, lambda: [w], lambda: [w * 2.0], strict=True), list)


def test_cond_runs_only_the_taken_branch(device):
    x = tf.placeholder(tf.float32, [3])
    idx = tf.placeholder(tf.int32, [])
    y = tf.cond(idx < 3, lambda: tf.gather(x, idx), lambda: tf.constant(-1.0))
    with tf.Session(device=device) as sess:
        assert sess.run(y, {x: [1, 2, 3], idx: 2}) == 3.0
        assert sess.run(y, {x: [1, 2, 3], idx: 7}) == -1.0  # gather(x, 7) would fail: it does not run


def test_while_in_cond_and_cond_in_while(tf1):
    def build(lib, x, w):
        def body(i, v):
            return i + 1, lib.cond(lib.reduce_sum(v) > 0, lambda: v * w[0], lambda: lib.sin(v) - 0.5)
        v = lib.while_loop(lambda i, v: i < 4, body, [0, x])[1]
        u = lib.cond(lib.reduce_sum(x) > -100.0,
                     lambda: lib.while_loop(lambda i, u: i < 2, lambda i, u: (i + 1, u * u * 0.5 + w[2]), [0, x])[1],
                     lambda: x)
        return [v, u] + lib.gradients(lib.reduce_sum(v) + lib.reduce_sum(u), [x, w])
    _check_against_tf(tf1, build, [X, W])


def test_tensor_array_recurrence_like_dynamic_rnn(tf1):
    """What dynamic_rnn needs: unstack inputs, loop over time, write each output, stack; gradients included."""
    seq = RNG.standard_normal((4, 2, 3))

    def build(lib, xs, w):
        steps = lib.shape(xs)[0]
        inputs = lib.TensorArray(lib.float64, size=steps, element_shape=[2, 3]).unstack(xs)
        outputs = lib.TensorArray(lib.float64, size=steps, element_shape=[2, 3])

        def body(t, h, out):
            h = lib.tanh(lib.matmul(inputs.read(t) + h, w))
            return t + 1, h, out.write(t, h)
        _, h, out = lib.while_loop(lambda t, h, out: t < steps, body,
                                   [0, lib.zeros([2, 3], lib.float64), outputs])
        ys = out.stack()
        return [ys, h] + lib.gradients(lib.reduce_sum(ys * ys) + lib.reduce_sum(h), [xs, w])
    _check_against_tf(tf1, build, [seq, W])


def test_tensor_array_without_element_shape_takes_the_loops_first_write(tf1):
    """A fixed-size TensorArray with no element_shape entering a loop (greedy decoding's ids: TF infers the shape
    from the first write) gives TF's values, its stack TF's static shape, and TF's gradients through it."""
    def build(lib, x, w):
        def body(t, h, out):
            h = lib.tanh(lib.matmul(h, w) + x)
            return t + 1, h, out.write(t, h * 2.0)
        _, h, out = lib.while_loop(lambda t, h, out: t < 3, body, [0, x, lib.TensorArray(lib.float64, size=3)])
        stacked = out.stack()
        assert stacked.shape.as_list() == [3] + list(X.shape)
        return [stacked, h] + lib.gradients(lib.reduce_sum(lib.square(stacked)), [x, w])
    _check_against_tf(tf1, build, [X, W])


def test_errors_are_clear():
    x = tf.zeros([2])
    with pytest.raises(TypeError, match="pred must be a bool Tensor, not a Python bool"):
        tf.cond(True, lambda: x, lambda: x)
    with pytest.raises(TypeError, match="output 0 is float32 in true_fn but int32"):
        tf.cond(x[0] > 0, lambda: x, lambda: tf.constant([1, 2]))
    with pytest.raises(TypeError, match="cond must return one bool scalar"):
        tf.while_loop(lambda v: v, lambda v: v, [x])
    with pytest.raises(TypeError, match="enters as float32 but the body returns int32"):
        tf.while_loop(lambda v: True, lambda v: tf.constant([1, 2]), [x])


def test_assert_fails_the_run_with_its_data(device):
    x = tf.placeholder(tf.float32, [None])
    check = tf.Assert(tf.reduce_all(x > 0), [x, tf.shape(x)], summarize=2, name="positive")
    with tf.control_dependencies([check]):
        y = tf.identity(x) * 2.0
    with tf.Session(device=device) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: [1.0, 2.0]}), [2.0, 4.0])
        failed = r"positive.*assertion failed: \[\[ 1\., -2\.\], \[3\]\]"
        with pytest.raises(tf.errors.InvalidArgumentError, match=failed):
            sess.run(y, {x: [1.0, -2.0, 5.0]})


def test_memory_budget_refuses_control_flow_clearly():
    x = tf.placeholder(tf.float32, [2])
    y = tf.while_loop(lambda v: tf.reduce_sum(v) < 10.0, lambda v: v * 2.0, [x])
    from tfplus.planner import PlanError
    with tf.Session(memory_budget="16MB") as sess, \
            pytest.raises(PlanError, match="control flow.*without memory_budget"):
        sess.run(y, {x: [1.0, 1.0]})


def test_map_fn_scan_and_folds(tf1):
    def build(lib, x, w):
        m = lib.map_fn(lambda r: lib.reduce_sum(lib.tanh(r * w[0])), x)
        pair = lib.map_fn(lambda ab: (ab[0] * 2.0, ab[1][0]), (x, x), dtype=(lib.float64, lib.float64))
        s = lib.scan(lambda a, r: a * w[1] + r, x)
        sr = lib.scan(lambda a, r: lib.sin(a) + r, x, initializer=lib.zeros([3], lib.float64), reverse=True)
        fl = lib.foldl(lambda a, r: a * 0.5 + r * w[2], x)
        fr = lib.foldr(lambda a, r: a * 0.5 + r, x, initializer=lib.ones([3], lib.float64))
        outs = [m, pair[0], pair[1], s, sr, fl, fr]
        loss = lib.add_n([lib.reduce_sum(o * o) for o in outs])
        return outs + lib.gradients(loss, [x, w])
    _check_against_tf(tf1, build, [X, W])


def test_tensorflow_control_flow_graph_defs_import_or_fail_clearly(tf1):
    """TF1's tf.while_loop / tf.cond in TensorFlow 2 (functional While/If, a function library) import and give
    TensorFlow's values; TF1's dataflow control flow (Switch, Merge, ...) fails naming the node and the fix."""
    g = tf1.Graph()
    with g.as_default():
        x = tf1.placeholder(tf1.float32, [2], name="x")
        v = tf1.while_loop(lambda v: tf1.reduce_sum(v) < 10.0, lambda v: v * 2.0, [x])
        y = tf1.identity(tf1.cond(v[0] > v[1], lambda: v - 1.0, lambda: v * 3.0), name="y")
    graph_def = g.as_graph_def()
    assert {"StatelessWhile", "StatelessIf"} <= {n.op for n in graph_def.node} and graph_def.library.function
    with tf1.Session(graph=g) as sess:
        want = sess.run(y, {x: [1.0, 0.5]})
    with tf.Graph().as_default(), tf.Session() as sess:
        tf.import_graph_def(graph_def, name="")
        np.testing.assert_allclose(sess.run("y:0", {"x:0": [1.0, 0.5]}), want)
    switch = tf1.GraphDef()
    switch.node.add(name="p", op="Placeholder").attr["dtype"].type = 10
    switch.node.add(name="s", op="Switch", input=["p", "p"])
    with tf.Graph().as_default(), pytest.raises(ValueError, match="'s' is TensorFlow control flow.*tf.while_loop"):
        tf.import_graph_def(switch, name="")
