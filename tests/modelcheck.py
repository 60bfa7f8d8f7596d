"""Models and checks the test modules share: the checks every model builder of graphs/ passes (test_mobilenet,
test_seqnet), and a small CNN trained by forced plans on each device (the planner, replay and recompute tests)."""
from __future__ import annotations

import gc
import tracemalloc
from types import SimpleNamespace

import numpy as np

import tfplus as tf
from tfplus import planner, threads
from tfplus.engine.memory import Bound, install, measure_device_step, measure_step
from tfplus.runtime.facts import device_facts


def random_feeds(tg, batch: int, size: int, seed: int = 0) -> dict:
    """A fixed batch of random NCHW images of size x size and labels for training graph `tg`."""
    rng = np.random.default_rng(seed)
    return {tg.images: rng.standard_normal((batch, 3, size, size)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}


def assert_fits_a_fixed_batch(tg, feeds: dict, device: str, steps: int = 12) -> None:
    """Training on one batch brings its loss below 60% of the first; predictions have one label per image."""
    with tf.Session(graph=tg.graph, device=device) as sess:
        sess.run(tg.init_op)
        losses = [float(sess.run([tg.train_op, tg.loss], feeds)[1]) for _ in range(steps)]
        pred = sess.run(tg.predictions, {tg.images: feeds[tg.images]})
    assert losses[-1] < 0.6 * losses[0], losses
    assert pred.shape == (len(feeds[tg.labels]),)


# What a planned step may allocate beyond its plan: NumPy's ufunc buffers (np.getbufsize() elements for each of
# up to 3 float32 operands, when a ufunc cannot stream its operands as one run), in each of the intra-op
# threads at once, the fetched loss and a few KiB of the executor's Python objects (views, dicts).
_UNPLANNED = 3 * np.getbufsize() * 4 * threads.default_threads() + 16 * 1024


def assert_planned_bytes_are_measured(tg, feeds: dict, force: tuple | None = None) -> None:
    """The NumPy data a planned training step holds and adds is its plan's
    (every kernel's scratch is declared), it allocates nothing through the runtime, and the session's plans (the
    step's and the initializer's) share one arena; `force`: planner.plan's, a given combination of
    transformations."""
    fetches = [tg.train_op, tg.loss]
    p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts("cpu"), graph=tg.graph,
                     force=force)
    tracemalloc.start(16)  # frames enough to reach the planner's, which plans the initializer (measure_step)
    try:
        with tf.Session(graph=tg.graph, memory_budget="1GB") as sess:
            sess.run(tg.init_op)
            install(sess, fetches, p)
            sess.run(fetches, feeds)  # allocates the arena
            allocated = sess.runtime.allocated_bytes
            m = measure_step(sess, fetches, feeds)
            assert sess.runtime.allocated_bytes == allocated, "a planned step allocates nothing via the runtime"
            bounds = [s.bound for s in sess.steps if isinstance(s.bound, Bound)]  # the step's and the initializer's
            assert bounds[0].arena.nbytes == max(b.plan.arena_bytes for b in bounds), "one arena: the biggest"
    finally:
        tracemalloc.stop()
    assert_measured_is_planned(m, p)


def assert_measured_is_planned(m: dict, p) -> None:
    """measure_step's `m` of a step run by MemoryPlan `p` is what `p` predicts: what it holds to the byte (beside
    the arena's alignment padding, and the small constants that a cond's predicate program keeps outside the plan:
    measure_step's pool_kept), what it adds up to NumPy's unplanned buffers."""
    assert m["feeds"] == p.feed_bytes
    held = p.fixed_bytes - p.feed_bytes + p.arena_bytes
    assert 0 <= m["held"] - held <= m["pool_kept"] and m["padding"] == p.alignment, (m, "planned held", held)
    assert m["during"] <= _UNPLANNED, m
    assert 0 <= m["peak"] - p.peak_bytes <= _UNPLANNED + m["pool_kept"]


def assert_graphdef_round_trips(graph) -> None:
    """The graph's GraphDef imports into a new graph that exports the very same bytes."""
    from tfplus import graph_io
    graph_def = graph.as_graph_def()
    copy = tf.Graph()
    with copy.as_default():
        graph_io.import_graph_def(graph_def, name="")
    assert copy.as_graph_def().SerializeToString(deterministic=True) == \
        graph_def.SerializeToString(deterministic=True)


# -- a small CNN, trained by forced plans ------------------------------------------------------------------------
def small_cnn(hidden: int = 16):
    """A small Mentee: two convolutions of 4 and 8 channels, a pool after each, one hidden layer of `hidden`."""
    import tfplus.train  # noqa: F401  (tf.train, until tfplus/__init__ imports it)
    from tfplus.graphs import get_model, training_graph
    return training_graph(get_model("mentee").build, total_steps=10, seed=0, image_shape=(3, 16, 16),
                          model_kwargs={"conv_widths": (4, 8), "fc_widths": (hidden,)})


def cnn_feeds(tg, batch=8):
    rng = np.random.default_rng(0)
    return {tg.images: rng.standard_normal((batch, 3, 16, 16)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}


def train_steps(tg, feeds, budget=None, force=None, steps=2):
    """Losses of `steps` training steps and the weights after them."""
    return train_graph(tg.graph, tg.init_op, tg.train_op, tg.loss, feeds, budget, force, steps)


def train_graph(graph, init, train, loss, feeds, budget=None, force=None, steps=2, plan=None):
    """train_steps of a graph built by hand: `train` and `loss` fetched, under the plan of transformations
    `force` when given, or the cpu plan `plan` the caller made for it (installed on a session with `budget`)."""
    fetches = [train, loss]
    with tf.Session(graph=graph, memory_budget=budget) as sess:
        sess.run(init)
        if force is not None or plan is not None:
            p = plan if plan is not None else planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, graph=graph,
                                                          force=force)
            install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(steps)]
        weights = {v.op.name: sess.run(v) for v in graph.get_collection("trainable_variables")}
    return losses, weights


def train_planned(tg, feeds, device="cpu", force=None, steps=2, variables="trainable_variables"):
    """Losses of `steps` training steps on `device`, by the plan of transformations `force` when given (installed
    on a session with a budget), the `variables` collection after them, the plan and its binding (None, None
    without `force`)."""
    fetches = [tg.train_op, tg.loss]
    p = bound = None
    gc.collect()
    with tf.Session(graph=tg.graph, device=device, memory_budget=None if force is None else "1GB") as sess:
        sess.run(tg.init_op)
        if force is not None:
            p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                             graph=tg.graph, force=force)
            bound = install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(steps)]
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection(variables)}
    return losses, weights, p, bound


def rows_net(stat, batch: int = 8):
    """x (N, 6) -> dense -> stat(h) -> dense -> mean cross-entropy, SGD under the UPDATE_OPS: `stat` returns rows
    computed from h (a batch statistic written by hand, a norm); the graph and a batch of `batch` feeds."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        h = tf.matmul(x, tf.Variable(np.linspace(-1, 1, 48).reshape(6, 8).astype(np.float32)))
        h = stat(h)
        logits = tf.matmul(h, tf.Variable(np.linspace(1, -1, 24).reshape(8, 3).astype(np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        init_op = tf.global_variables_initializer()
    data = np.random.default_rng(2)
    feeds = {x: (data.standard_normal((batch, 6)) * 2 + 1).astype(np.float32),
             y: data.integers(0, 3, batch).astype(np.int32)}
    return SimpleNamespace(graph=g, train_op=train_op, loss=loss, init_op=init_op), feeds


def train_session_step(tg, feeds, device, plan_for, steps=2):
    """Losses of `steps` training steps of the step a session runs (its rewritten graph, tfplus.engine.rewrite)
    by the plan `plan_for(step, facts)` makes for it, the weights after them, and that plan."""
    fetches = [tg.train_op, tg.loss]
    with tf.Session(graph=tg.graph, device=device, memory_budget="1GB") as sess:
        sess.run(tg.init_op)
        step = sess.step(fetches, feeds)
        p = plan_for(step, device_facts(sess.runtime))
        step.use_plan(p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(steps)]
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
    return losses, weights, p


def use_forced_plan(sess, fetches, feeds, force=(4, 1)) -> None:
    """Makes `sess` run `fetches` fed `feeds` by the plan of force[0] micro-batches (planner.plan's force: the plan a
    budget makes where the step fits only so), after checking the plan has them."""
    step = sess.step(fetches, feeds)
    p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph, force=force)
    assert p.microbatches == force[0], p.notes
    step.use_plan(p)


def train_case(g, fetches, feeds, init, device, steps=2, force=None, **session) -> tuple:
    """The losses of `steps` runs of `fetches` (the loss second) on `device` and the trainable variables after them;
    with `force`, the step planned so (use_forced_plan) under a session budget."""
    with tf.Session(graph=g, device=device, **session, **({"memory_budget": "1GB"} if force else {})) as sess:
        if force:
            use_forced_plan(sess, fetches, feeds, force)
        sess.run(init)
        losses = [sess.run(fetches, feeds)[1] for _ in range(steps)]
        return losses, [sess.run(v) for v in g.get_collection("trainable_variables")]


def assert_trains_alike(got: tuple, want: tuple, tol: float, name: str) -> None:
    """train_case's losses and variables agree within `tol`."""
    np.testing.assert_allclose(got[0], want[0], rtol=tol, err_msg=name)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)


def assert_close_training(got, want, rtol=1e-5) -> None:
    """Two training results (losses, weights) within float tolerance."""
    np.testing.assert_allclose(got[0], want[0], rtol=rtol)
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=rtol, atol=1e-6, err_msg=name)


def assert_same_training(a, b) -> None:
    """Two train_steps results (losses, weights) are the same bits."""
    np.testing.assert_array_equal(a[0], b[0])
    for name in a[1]:
        np.testing.assert_array_equal(a[1][name], b[1][name], err_msg=name)


def train_opencl(tg, feeds, force=None, steps=2, compute_units=None):
    """Losses of `steps` training steps on opencl (by the forced plan, if any), the weights after them, the
    plan and the ledger's measurement of the last step. `compute_units` overrides the device's count (which
    sets how the kernels split long reductions, and so their scratch)."""
    fetches = [tg.train_op, tg.loss]
    p = m = None
    gc.collect()  # other tests' device buffers go back to the pool before the ledger is read
    with tf.Session(graph=tg.graph, device="opencl", memory_budget=None if force is None else "1GB") as sess:
        if compute_units:
            sess.runtime.info = {**sess.runtime.info, "compute_units": compute_units}
        sess.run(tg.init_op)
        if force is not None:
            p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                             graph=tg.graph,
                             force=force)
            install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(steps - 1)]
        m = measure_device_step(sess, fetches, feeds)
        losses.append(sess.run(fetches, feeds)[1])
        weights = {v.op.name: sess.run(v) for v in tg.graph.get_collection("trainable_variables")}
    return losses, weights, p, m


def recompute_level(tg, feeds, device="cpu") -> int:
    """The first recomputation level of the training step of `tg` (planner.plan._Step.levels)."""
    from tfplus.planner.plan import _Step
    step = _Step([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, device_facts(device), tg.graph,
                 None)
    return step.levels()[0]


def checkpoint_variables(path) -> dict:
    """{variable name: value} of the checkpoint at `path` (a prefix, as a saver writes it)."""
    reader = tf.train.load_checkpoint(str(path))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def assert_variables_close(got: dict, want: dict, atol: float = 1e-5) -> None:
    """Two {name: value} maps hold the same variables, each within `atol`."""
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=atol, err_msg=name)
