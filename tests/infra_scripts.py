"""TF1 scaffolding scripts as users write them around their models: unit tests on tf.test.TestCase, the profiler
and traced runs, Supervisor and monitored sessions with hooks, device placement and towers, checkpoint utilities,
graph plumbing (graphs, collections, partitioned variables, custom getters, freezing), and a script's main() under
tf.app.run with flags, tf.logging and tf.gfile. Each is written once against the TF1 API `tf`, takes (tf, folder),
may print, and returns {name: value}; tests/tf_oracle/test_infra_scripts.py runs it with TensorFlow's tf.compat.v1
and with tfplus and compares what it printed, what it returned and the files it wrote."""
from __future__ import annotations

import json
import os
import unittest

import numpy as np

X = np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(8, 3)
Y = (X @ np.array([[0.5], [-1.0], [2.0]], np.float32) + 0.25).astype(np.float32)


def _regression(tf, scope: str = "model"):
    """x, y placeholders, a linear model with a global step, and its loss and train op."""
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    y = tf.placeholder(tf.float32, [None, 1], name="y")
    with tf.variable_scope(scope):
        w = tf.get_variable("w", initializer=tf.constant(np.full((3, 1), 0.1, np.float32)))
        b = tf.get_variable("b", initializer=tf.constant([0.0]))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y), name="loss")
    step = tf.train.get_or_create_global_step()
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return x, y, loss, train, step


def _files(d: str) -> list[str]:
    """The files under `d`, relative, sorted (event files by their kind only: their names hold a time)."""
    out = []
    for root, _, names in os.walk(d):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), d)
            out.append(rel.split("events.out.tfevents")[0] + "events" if "tfevents" in n else rel)
    return sorted(out)


def tf_test_case_unit_tests(tf, d):
    """A user's tests on tf.test.TestCase: cached_session/session/test_session, evaluate, assertAllClose,
    assertAllEqual, assertRaisesOpError, assertShapeEqual, get_temp_dir; run by unittest, each must pass."""
    class ModelTest(tf.test.TestCase):
        def test_square(self):
            with self.cached_session() as sess:
                x = tf.constant([1.0, 2.0, 3.0])
                self.assertAllClose(sess.run(tf.square(x)), [1.0, 4.0, 9.0])
                self.assertAllClose(self.evaluate(tf.reduce_sum(x)), 6.0)

        def test_session_and_eval(self):
            with self.session() as sess:
                v = tf.Variable([[1, 2], [3, 4]])
                sess.run(v.initializer)
                self.assertAllEqual(v.eval(), [[1, 2], [3, 4]])
                self.assertShapeEqual(np.zeros((2, 2)), v + 0)
                self.assertEqual(self.evaluate({"a": v + 1})["a"].tolist(), [[2, 3], [4, 5]])

        def test_legacy_test_session(self):
            with self.test_session():
                self.assertAllClose(tf.nn.relu(tf.constant([-1.0, 2.0])).eval(), [0.0, 2.0])

        def test_op_error(self):
            with self.cached_session() as sess:
                p = tf.placeholder(tf.float32, [2])
                check = tf.debugging.assert_positive(p)
                with self.assertRaisesOpError("x > 0"):
                    sess.run(check, {p: [1.0, -1.0]})

        def test_temp_dir(self):
            self.assertTrue(os.path.isdir(self.get_temp_dir()))

        def test_failing_assertion_is_caught(self):
            with self.assertRaises(AssertionError):
                self.assertAllClose([1.0, 2.0], [1.0, 2.5])
    result = unittest.TextTestRunner(stream=open(os.devnull, "w"), verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(ModelTest))
    print("ran", result.testsRun, "failures", [str(t) for t, _ in result.failures + result.errors])
    print("gpu", tf.test.is_gpu_available(), repr(tf.test.gpu_device_name()), tf.test.is_built_with_cuda() in (0, 1))
    return {"ran": result.testsRun, "ok": result.wasSuccessful()}


def profiler_flops_and_parameters(tf, d):
    """tf.profiler.profile with ProfileOptionBuilder: the float ops of a fully defined model, and its trainable
    parameter count (by scope). NOTE: constant initializers: a random one counts fewer float ops here than in
    TensorFlow, whose initializer graph computes what tfplus's leaves out (a uniform range's width, a scalar Sub;
    the Add of a zero mean)."""
    x = tf.constant(np.ones((4, 8, 8, 3), np.float32))
    with tf.variable_scope("conv"):
        k = tf.get_variable("k", [3, 3, 3, 5], initializer=tf.ones_initializer())
        b = tf.get_variable("b", [5], initializer=tf.zeros_initializer())
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, k, [1, 1, 1, 1], "SAME"), b))
    with tf.variable_scope("dense"):
        w = tf.get_variable("w", [8 * 8 * 5, 10], initializer=tf.constant_initializer(0.01))
        logits = tf.matmul(tf.reshape(h, [4, -1]), w) + tf.get_variable("b", [10], initializer=tf.zeros_initializer())
    tf.reduce_mean(logits)
    graph = tf.get_default_graph()
    opts = tf.profiler.ProfileOptionBuilder.float_operation()
    flops = tf.profiler.profile(graph, run_meta=tf.RunMetadata(), cmd="op",
                                options=tf.profiler.ProfileOptionBuilder(opts).with_empty_output().build())
    params = tf.profiler.profile(graph, cmd="scope", options=tf.profiler.ProfileOptionBuilder(
        tf.profiler.ProfileOptionBuilder.trainable_variables_parameter()).with_empty_output().build())
    print("flops", flops.total_float_ops, "params", params.total_parameters)
    print(sorted((c.name, c.total_parameters) for c in params.children))
    return {"flops": flops.total_float_ops, "params": params.total_parameters}


def traced_run_metadata_timeline(tf, d):
    """RunOptions(trace_level=FULL_TRACE) + RunMetadata on a training step: step_stats name the executed nodes,
    timeline.Timeline writes a Chrome trace, FileWriter.add_run_metadata tags the step in the event file."""
    x, y, loss, train, step = _regression(tf)
    opts = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    md = tf.RunMetadata()
    writer = tf.summary.FileWriter(os.path.join(d, "logs"), tf.get_default_graph())
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, {x: X, y: Y}, options=opts, run_metadata=md)
        writer.add_run_metadata(md, "step1", global_step=1)
    writer.close()
    nodes = {n.node_name for dev in md.step_stats.dev_stats for n in dev.node_stats}
    print("traced", len(md.step_stats.dev_stats) > 0, {"Square", "model/w/read", "GradientDescent"} <= nodes)
    trace = json.loads(_timeline(tf).Timeline(md.step_stats).generate_chrome_trace_format())
    names = {e.get("args", {}).get("name") for e in trace["traceEvents"]}
    print("timeline", "Square" in names)
    return {"files": _files(d)}


def _timeline(tf):
    """`from tensorflow.python.client import timeline`, the import users write, for either library."""
    if tf.__name__.startswith("tfplus"):
        from tfplus.python.client import timeline
    else:
        from tensorflow.python.client import timeline
    return timeline


def supervisor_managed_session(tf, d):
    """tf.train.Supervisor: managed_session initializes, trains until should_stop, saves a checkpoint on exit;
    a second Supervisor on the same logdir restores it."""
    logdir = os.path.join(d, "sv")
    with tf.Graph().as_default():
        x, y, loss, train, step = _regression(tf)
        sv = tf.train.Supervisor(logdir=logdir, save_model_secs=0, save_summaries_secs=0, global_step=step)
        with sv.managed_session() as sess:
            for _ in range(5):
                if sv.should_stop():
                    break
                sess.run(train, {x: X, y: Y})
            sv.saver.save(sess, sv.save_path, global_step=step)
            print("trained", sess.run(step), round(float(sess.run(loss, {x: X, y: Y})), 5))
        print("stopped", sv.should_stop())
    with tf.Graph().as_default():
        x, y, loss, train, step = _regression(tf)
        sv = tf.train.Supervisor(logdir=logdir, save_model_secs=0, save_summaries_secs=0)
        with sv.managed_session() as sess:
            print("restored", sess.run(step), round(float(sess.run(loss, {x: X, y: Y})), 5))
            sv.request_stop()
            print("should_stop", sv.should_stop())
    return {"latest": os.path.basename(tf.train.latest_checkpoint(logdir))}


def monitored_session_custom_hooks(tf, d):
    """MonitoredSession with ChiefSessionCreator(scaffold, checkpoint_dir) and a custom SessionRunHook
    (begin, after_create_session, before_run feeding and fetching by SessionRunArgs, after_run stopping by
    run_context.request_stop, end), FinalOpsHook, FeedFnHook and StopAtStepHook, then a MonitoredTrainingSession
    with CheckpointSaverHook/SummarySaverHook that a second one resumes."""
    x, y, loss, train, step = _regression(tf)
    tf.summary.scalar("loss", loss)
    events = []

    class Hook(tf.train.SessionRunHook):
        def begin(self):
            events.append("begin")

        def after_create_session(self, session, coord):
            events.append(("created", int(session.run(step))))

        def before_run(self, run_context):
            return tf.train.SessionRunArgs({"loss": loss, "step": step}, feed_dict={y: Y})

        def after_run(self, run_context, run_values):
            r = run_values.results
            events.append(("after", int(r["step"]), round(float(r["loss"]), 5)))
            if r["step"] >= 3:
                run_context.request_stop()

        def end(self, session):
            events.append(("end", int(session.run(step))))
    final = tf.train.FinalOpsHook(loss * 2.0, final_ops_feed_dict={x: X, y: Y})
    feed = tf.train.FeedFnHook(lambda: {x: X})
    scaffold = tf.train.Scaffold(init_op=tf.global_variables_initializer())
    creator = tf.train.ChiefSessionCreator(scaffold=scaffold, checkpoint_dir=os.path.join(d, "none"))
    with tf.train.MonitoredSession(session_creator=creator, hooks=[Hook(), final, feed]) as sess:
        while not sess.should_stop():
            sess.run(train)
    print(events)
    print("final", round(float(final.final_ops_values), 5))
    ckpt = os.path.join(d, "mts")
    for last in (2, 4):
        with tf.train.MonitoredTrainingSession(checkpoint_dir=ckpt, save_checkpoint_steps=1, save_summaries_steps=1,
                                               hooks=[tf.train.StopAtStepHook(last_step=last)]) as sess:
            while not sess.should_stop():
                sess.run(train, {x: X, y: Y})
        print("resumed to", tf.train.load_variable(ckpt, "global_step"))
    return {"files": _files(d)}


def device_placement(tf, d):
    """Device strings as users write them: tf.device('/gpu:0'), '/cpu:0', a device function, None; ConfigProto
    (allow_soft_placement, log_device_placement, gpu_options) runs them on the one device. A graph with ops on
    '/job:worker/task:0' or from replica_device_setter (the strings it assigns printed) is refused by a local
    session, whatever the run fetches."""
    with tf.device("/cpu:0"):
        a = tf.constant([1.0, 2.0], name="a")
    with tf.device("/gpu:0"):
        b = tf.multiply(a, 3.0, name="b")
        with tf.device(None):
            n = tf.identity(b, name="n")
        with tf.device("/device:GPU:1"):
            e = tf.negative(b, name="e")
    with tf.device(lambda op: "/cpu:0" if op.type == "Sum" else ""):
        s = tf.reduce_sum(e, name="s")
    for t in (a, b, n, e, s):
        print(t.op.name, repr(t.device))
    print(tf.DeviceSpec.from_string("/job:ps/task:1/device:GPU:2").to_string())
    config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=True)
    config.gpu_options.allow_growth = True
    with tf.Session(config=config) as sess:
        values = sess.run([n, s])
    with tf.Graph().as_default():
        local = tf.constant(1.0, name="local")
        with tf.device("/job:worker/task:0"):
            c = tf.add(local, 1.0, name="c")
            with tf.device("/device:GPU:1"):
                g = tf.negative(c, name="g")
        with tf.device(tf.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:1")):
            v1 = tf.Variable(1.0, name="v1")
            v2 = tf.Variable(2.0, name="v2")
            m = tf.multiply(v1, v2, name="m")
        for t in (c, g, v1, v2, m):
            print(t.op.name, repr(t.device))
        with tf.Session(config=config) as sess:
            try:
                sess.run(local)
            except tf.errors.InvalidArgumentError:
                print("no worker job in a local session")
    return {"values": values}


def multi_tower_average_gradients(tf, d):
    """The multi-GPU CIFAR-10 pattern: a tower per device (tf.device('/gpu:%d') + name_scope, variables shared by
    reuse), the towers' gradients averaged on the CPU and applied once."""
    xs = tf.split(tf.constant(X), 2)
    ys = tf.split(tf.constant(Y), 2)
    opt = tf.train.GradientDescentOptimizer(0.2)
    tower_grads = []
    with tf.variable_scope(tf.get_variable_scope()):
        for i in range(2):
            with tf.device("/gpu:%d" % i), tf.name_scope("tower_%d" % i) as scope:
                w = tf.get_variable("w", [3, 1], initializer=tf.constant_initializer(0.1))
                loss = tf.reduce_mean(tf.square(tf.matmul(xs[i], w) - ys[i]))
                tf.add_to_collection("losses", loss)
                tf.get_variable_scope().reuse_variables()
                tower_grads.append(opt.compute_gradients(loss))
                print(scope, len(tf.get_collection("losses", scope)))
    with tf.device("/cpu:0"):
        averaged = []
        for grad_and_vars in zip(*tower_grads):
            g = tf.reduce_mean(tf.stack([g for g, _ in grad_and_vars]), 0)
            averaged.append((g, grad_and_vars[0][1]))
        train = opt.apply_gradients(averaged)
    total = tf.add_n(tf.get_collection("losses"))
    with tf.Session(config=tf.ConfigProto(allow_soft_placement=True)) as sess:
        sess.run(tf.global_variables_initializer())
        losses = [sess.run([total, train])[0] for _ in range(4)]
        return {"losses": np.array(losses), "w": sess.run(tf.trainable_variables()[0])}


def checkpoint_utilities(tf, d):
    """Reading checkpoints without a graph: list_variables, load_variable, NewCheckpointReader, get_checkpoint_state,
    latest_checkpoint, checkpoint_exists, get_checkpoint_mtimes, checkpoints_iterator."""
    x, y, loss, train, step = _regression(tf)
    saver = tf.train.Saver(max_to_keep=3)
    prefix = os.path.join(d, "ckpt", "model")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(3):
            sess.run(train, {x: X, y: Y})
            saver.save(sess, prefix, global_step=step)
    folder = os.path.dirname(prefix)
    print(tf.train.list_variables(folder))
    state = tf.train.get_checkpoint_state(folder)
    print(os.path.basename(state.model_checkpoint_path),
          [os.path.basename(p) for p in state.all_model_checkpoint_paths])
    latest = tf.train.latest_checkpoint(folder)
    reader = tf.train.NewCheckpointReader(latest)
    print(sorted(reader.get_variable_to_shape_map().items()), reader.has_tensor("model/w"), reader.has_tensor("q"))
    print(sorted(reader.get_variable_to_dtype_map().items()))
    print(tf.train.checkpoint_exists(latest), tf.train.checkpoint_exists(prefix + "-9"))
    mtimes = tf.train.get_checkpoint_mtimes(state.all_model_checkpoint_paths)
    print(len(mtimes), all(m > 0 for m in mtimes))
    seen = [os.path.basename(p) for p in tf.train.checkpoints_iterator(folder, timeout=0.1)]
    print("iterated", seen)
    return {"w": tf.train.load_variable(folder, "model/w"), "b": reader.get_tensor("model/b"),
            "step": tf.train.load_variable(latest, "global_step")}


def saver_options(tf, d):
    """Saver(var_list=dict, max_to_keep, keep_checkpoint_every_n_hours, sharded, save_relative_paths, filename),
    last_checkpoints, recover_last_checkpoints, set_last_checkpoints_with_time, restore of a subset."""
    v = tf.Variable([1.0, 2.0], name="v")
    u = tf.Variable(3.0, name="u")
    inc = [v.assign_add([1.0, 1.0]), u.assign_add(1.0)]
    saver = tf.train.Saver({"renamed/v": v, "u": u}, max_to_keep=2, keep_checkpoint_every_n_hours=10000,
                           save_relative_paths=True, filename="my_ckpt")
    sharded = tf.train.Saver([v], sharded=True)
    folder = os.path.join(d, "s")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for i in range(4):
            sess.run(inc)
            saver.save(sess, os.path.join(folder, "m"), global_step=i, latest_filename="my_ckpt")
        os.makedirs(os.path.join(d, "sh"))
        sharded.save(sess, os.path.join(d, "sh", "v"))
        print([os.path.basename(p) for p in saver.last_checkpoints])
    with open(os.path.join(folder, "my_ckpt")) as f:
        print(f.read())
    print(sorted(n for n, _ in tf.train.list_variables(os.path.join(folder, "m-3"))))
    restorer = tf.train.Saver({"renamed/v": v})
    restorer.recover_last_checkpoints([os.path.join(folder, "m-2"), os.path.join(folder, "m-3")])
    print([os.path.basename(p) for p in restorer.last_checkpoints])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        restorer.restore(sess, os.path.join(folder, "m-2"))
        tf.train.Saver([v]).restore(sess, os.path.join(d, "sh", "v"))
        return {"values": sess.run([v, u]), "files": _files(d)}


def ema_variables_to_restore(tf, d):
    """ExponentialMovingAverage during training; evaluation restores the averages into the variables with
    ema.variables_to_restore()."""
    with tf.Graph().as_default():
        x, y, loss, train, step = _regression(tf)
        ema = tf.train.ExponentialMovingAverage(0.9, step)
        with tf.control_dependencies([train]):
            train_ema = ema.apply(tf.trainable_variables())
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.variables_initializer([step] + tf.trainable_variables()))  # the averages start from them
            sess.run(tf.global_variables_initializer())
            for _ in range(3):
                sess.run(train_ema, {x: X, y: Y})
            shadow = sess.run(ema.average(tf.trainable_variables()[0]))
            print(ema.average_name(tf.trainable_variables()[0]))
            saver.save(sess, os.path.join(d, "ema"))
    with tf.Graph().as_default():
        x, y, loss, train, step = _regression(tf)
        ema = tf.train.ExponentialMovingAverage(0.9)
        mapping = ema.variables_to_restore()
        print(sorted(mapping))
        with tf.Session() as sess:
            tf.train.Saver(mapping).restore(sess, os.path.join(d, "ema"))
            w = sess.run(tf.trainable_variables()[0])
    return {"shadow": shadow, "restored": w}


def warm_start_and_init_from_checkpoint(tf, d):
    """tf.train.warm_start (a regex and a var_name_to_prev_var_name map) and init_from_checkpoint with an
    assignment map of scopes: the initializers load the checkpoint's values."""
    with tf.Graph().as_default():
        _regression(tf, "old")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run([v.assign(v + 1.5) for v in tf.trainable_variables()])
            tf.train.Saver().save(sess, os.path.join(d, "prev"))
    with tf.Graph().as_default():
        _regression(tf, "new")
        tf.train.warm_start(os.path.join(d, "prev"), vars_to_warm_start="new/w",
                            var_name_to_prev_var_name={"new/w": "old/w"})
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            warm = sess.run(tf.trainable_variables())
    with tf.Graph().as_default():
        _regression(tf, "new")
        tf.train.init_from_checkpoint(os.path.join(d, "prev"), {"old/": "new/"})
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            init = sess.run(tf.trainable_variables())
    print([v.tolist() for v in warm], [v.tolist() for v in init])
    return {"warm": warm, "init": init}


def graphs_and_finalize(tf, d):
    """Several graphs: as_default, the default graph's identity, reset_default_graph, a finalized graph refusing
    new ops, is_finalized, a tensor from another graph refused, get_tensor_by_name and get_operation_by_name."""
    g1, g2 = tf.Graph(), tf.Graph()
    with g1.as_default():
        a = tf.constant(1.0, name="a")
        print(tf.get_default_graph() is g1, a.graph is g1)
    with g2.as_default():
        b = tf.constant(2.0, name="a")
        print(b.name, tf.get_default_graph() is g2)
        try:
            tf.add(a, b)
        except ValueError:
            print("mixed graphs refused")
    g1.finalize()
    print(g1.finalized)
    try:
        with g1.as_default():
            tf.constant(3.0)
    except RuntimeError:
        print("finalized refused")
    with tf.Session(graph=g1) as sess:
        print(sess.run(g1.get_tensor_by_name("a:0")), g1.get_operation_by_name("a").type)
    with tf.Graph().as_default() as g3:
        tf.constant(0.0, name="z")
        print([op.name for op in g3.get_operations()], g3.version > 0)
    return {}


def custom_getter_and_partitions(tf, d):
    """variable_scope(custom_getter=...) wrapping each get_variable; partitioned variables with
    fixed_size_partitioner and min_max_variable_partitioner used in a matmul and trained."""
    created = []

    def getter(getter, name, *args, **kwargs):
        created.append(name)
        return getter(name, *args, **kwargs) * 1.0

    with tf.variable_scope("cg", custom_getter=getter):
        w = tf.get_variable("w", [2], initializer=tf.ones_initializer())
        with tf.variable_scope("inner"):
            tf.get_variable("u", [1])
    print(created, w.op.type)
    with tf.variable_scope("p", partitioner=tf.fixed_size_partitioner(3)):
        pw = tf.get_variable("pw", [6, 2], initializer=tf.constant_initializer(0.5))
    mm = tf.get_variable("mm", [40, 3], initializer=tf.ones_initializer(),
                         partitioner=tf.min_max_variable_partitioner(max_partitions=4, min_slice_size=128))
    print(type(pw).__name__, len(list(pw)), [(p.op.name, p.get_shape().as_list()) for p in pw])
    print([p.name for p in mm], pw.get_shape().as_list())
    print(sorted(v.op.name for v in tf.global_variables()))
    xin = tf.constant(np.ones((1, 6), np.float32))
    loss = tf.reduce_sum(tf.matmul(xin, pw) ** 2) + tf.reduce_sum(tf.convert_to_tensor(mm)) * 0.0
    train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train)
        return {"pw": sess.run(tf.convert_to_tensor(pw)), "parts": sess.run(list(pw)), "w": sess.run(w)}


def collections_and_keys(tf, d):
    """tf.add_to_collection / add_to_collections / get_collection (by scope) / get_collection_ref /
    clear_collection and the GraphKeys collections that variables, summaries, losses and update ops fill."""
    with tf.variable_scope("net"):
        w = tf.get_variable("w", [2], initializer=tf.ones_initializer())
        tf.get_variable("frozen", [1], trainable=False)
        loc = tf.get_local_variable("count", [], initializer=tf.zeros_initializer())
        tf.add_to_collection(tf.GraphKeys.REGULARIZATION_LOSSES, tf.nn.l2_loss(w))
        bn = tf.layers.batch_normalization(tf.ones([4, 2]), training=True)
    tf.summary.scalar("s", tf.reduce_sum(bn))
    tf.add_to_collections(["mine", "yours"], w)
    tf.add_to_collection("mine", loc)
    ref = tf.get_collection_ref("mine")
    ref.append(tf.constant(1.0, name="one"))
    print([v.op.name for v in tf.get_collection("mine")], [v.op.name for v in tf.get_collection("yours")])
    for key in ("GLOBAL_VARIABLES", "TRAINABLE_VARIABLES", "LOCAL_VARIABLES", "MODEL_VARIABLES", "UPDATE_OPS",
                "SUMMARIES", "REGULARIZATION_LOSSES", "MOVING_AVERAGE_VARIABLES"):
        items = tf.get_collection(getattr(tf.GraphKeys, key))
        print(key, getattr(tf.GraphKeys, key), sorted(i.name for i in items))
    print([v.name for v in tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="net/batch")])
    print(len(tf.losses.get_regularization_losses()), "losses" in tf.get_default_graph().get_all_collection_keys())
    tf.get_default_graph().clear_collection("mine")
    print(tf.get_collection("mine"), sorted(k for k in tf.get_default_graph().get_all_collection_keys()
                                            if k in ("mine", "yours")))
    return {}


def interactive_session(tf, d):
    """tf.InteractiveSession as in notebooks: Tensor.eval() and Operation.run() without a session argument,
    eval with feed_dict, the default session, close."""
    sess = tf.InteractiveSession()
    x = tf.placeholder(tf.float32, [2])
    v = tf.Variable([1.0, 1.0])
    tf.global_variables_initializer().run()
    v.assign_add([2.0, 3.0]).op.run()
    out = {"v": v.eval(), "fed": (x * v).eval(feed_dict={x: [2.0, 0.5]})}
    print(tf.get_default_session() is sess, (v * 2).eval(session=sess).tolist())
    sess.close()
    with tf.Session() as s2:
        s2.run(v.initializer)
        print(v.eval().tolist(), tf.get_default_session() is s2)
    print(tf.get_default_session() is None)
    return out


def partial_run_steps(tf, d):
    """Session.partial_run_setup / partial_run: feeding and fetching a step piece by piece."""
    a = tf.placeholder(tf.float32, [], name="a")
    b = tf.placeholder(tf.float32, [], name="b")
    c = tf.placeholder(tf.float32, [], name="c")
    r1 = tf.add(a, b)
    r2 = tf.multiply(r1, c)
    with tf.Session() as sess:
        h = sess.partial_run_setup([r1, r2], [a, b, c])
        v1 = sess.partial_run(h, r1, feed_dict={a: 1.0, b: 2.0})
        v2 = sess.partial_run(h, r2, feed_dict={c: v1 * 2})
        print(v1, v2)
    return {"r": [v1, v2]}


def freeze_and_import(tf, d):
    """The freezing recipe: write_graph (text and binary), convert_variables_to_constants, remove_training_nodes,
    extract_sub_graph, then import_graph_def with input_map and return_elements in a new graph."""
    x = tf.placeholder(tf.float32, [None, 3], name="input")
    with tf.variable_scope("dense"):
        w = tf.get_variable("w", initializer=tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2)))
    h = tf.identity(tf.matmul(x, w), name="hidden")
    tf.identity(tf.nn.softmax(h), name="probs")
    tf.reduce_sum(h, name="unused")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        tf.train.write_graph(sess.graph_def, d, "graph.pbtxt")
        tf.train.write_graph(sess.graph, d, "graph.pb", as_text=False)
        frozen = tf.graph_util.convert_variables_to_constants(sess, sess.graph.as_graph_def(), ["probs"])
    frozen = tf.graph_util.remove_training_nodes(frozen, protected_nodes=["hidden", "probs"])
    sub = tf.graph_util.extract_sub_graph(frozen, ["hidden"])
    print(sorted(n.name for n in frozen.node), sorted(n.name for n in sub.node))
    print(sorted(n.op for n in frozen.node))
    with tf.gfile.GFile(os.path.join(d, "frozen.pb"), "wb") as f:
        f.write(frozen.SerializeToString())
    gd = tf.GraphDef()
    with tf.gfile.GFile(os.path.join(d, "frozen.pb"), "rb") as f:
        gd.ParseFromString(f.read())
    with tf.Graph().as_default() as g:
        new_x = tf.placeholder(tf.float32, [None, 3], name="new_input")
        probs, op = tf.import_graph_def(gd, input_map={"input:0": new_x}, return_elements=["probs:0", "hidden"],
                                        name="frozen")
        print(probs.name, op.name, op.type, [o.name for o in g.get_operations()][:3])
        with tf.Session() as sess:
            return {"probs": sess.run(probs, {new_x: X[:2]}), "files": _files(d)}


def main_with_flags_logging_gfile(tf, d):
    """A script's main(): tf.app.flags defined and parsed from argv by tf.app.run, tf.logging, and tf.gfile making
    folders and reading, writing, listing, copying, renaming and removing files."""
    flags = tf.app.flags
    for name in ("infra_data_dir", "infra_steps", "infra_rate", "infra_debug", "infra_mode", "infra_tags"):
        if name in flags.FLAGS:
            delattr(flags.FLAGS, name)
    flags.DEFINE_string("infra_data_dir", "/nonexistent", "where the data is")
    flags.DEFINE_integer("infra_steps", 10, "how many steps")
    flags.DEFINE_float("infra_rate", 0.5, "learning rate")
    flags.DEFINE_boolean("infra_debug", False, "debug")
    flags.DEFINE_enum("infra_mode", "train", ["train", "eval"], "mode")
    flags.DEFINE_list("infra_tags", [], "tags")
    FLAGS = flags.FLAGS  # noqa: N806 (the name scripts use)
    seen = {}

    def main(argv):
        tf.logging.set_verbosity(tf.logging.INFO)
        tf.logging.info("steps %d", FLAGS.infra_steps)
        seen["argv"] = argv[1:]
        seen["flags"] = [FLAGS.infra_steps, FLAGS.infra_rate, FLAGS.infra_debug, FLAGS.infra_mode, FLAGS.infra_tags]
        root = FLAGS.infra_data_dir
        if tf.gfile.Exists(root):
            tf.gfile.DeleteRecursively(root)
        tf.gfile.MakeDirs(os.path.join(root, "a", "b"))
        with tf.gfile.GFile(os.path.join(root, "a", "x.txt"), "w") as f:
            f.write("hello\nworld\n")
        with tf.gfile.Open(os.path.join(root, "a", "x.txt")) as f:
            seen["lines"] = f.readlines()
        tf.gfile.Copy(os.path.join(root, "a", "x.txt"), os.path.join(root, "y.txt"), overwrite=True)
        tf.gfile.Rename(os.path.join(root, "y.txt"), os.path.join(root, "a", "b", "z.txt"))
        seen["glob"] = sorted(os.path.relpath(p, root) for p in tf.gfile.Glob(os.path.join(root, "a", "*.txt")))
        seen["list"] = sorted(tf.gfile.ListDirectory(os.path.join(root, "a")))
        seen["walk"] = [(os.path.relpath(r, root), sorted(ds), sorted(fs)) for r, ds, fs in tf.gfile.Walk(root)]
        seen["isdir"] = [tf.gfile.IsDirectory(os.path.join(root, "a")), tf.gfile.IsDirectory(os.path.join(root, "y"))]
        seen["size"] = tf.gfile.Stat(os.path.join(root, "a", "b", "z.txt")).length
        tf.gfile.Remove(os.path.join(root, "a", "x.txt"))
        seen["after"] = _files(root)
        return 0
    try:
        tf.app.run(main, argv=["prog", "--infra_data_dir=" + os.path.join(d, "data"), "--infra_steps=3",
                               "--infra_debug", "--infra_mode=eval", "--infra_tags=a,b", "rest"])
    except SystemExit as e:
        seen["exit"] = e.code
    print(seen)
    return {}


def initialization_checks(tf, d):
    """report_uninitialized_variables, is_variable_initialized, variables_initializer of a list,
    assert_variables_initialized, and the error of reading an uninitialized variable."""
    a = tf.Variable(1.0, name="a")
    b = tf.Variable([2.0, 3.0], name="b")
    with tf.variable_scope("s"):
        c = tf.get_variable("c", [2], initializer=tf.zeros_initializer())
    report = tf.report_uninitialized_variables()
    with tf.Session() as sess:
        print(sess.run(report).tolist(), sess.run(tf.is_variable_initialized(a)))
        try:
            sess.run(b)
        except tf.errors.FailedPreconditionError:
            print("uninitialized read refused")
        sess.run(tf.variables_initializer([a, c]))
        print(sess.run(report).tolist(), sess.run(tf.is_variable_initialized(a)))
        print(sess.run(tf.report_uninitialized_variables([a, c])).tolist())
        try:
            sess.run(tf.assert_variables_initialized())
        except tf.errors.FailedPreconditionError:
            print("assert_variables_initialized refused")
        sess.run(b.initializer)
        print(sess.run(report).shape, sess.run(tf.assert_variables_initialized()) is None)
        return {"values": sess.run([a, b, c])}


def summary_iterator_reads_events(tf, d):
    """Writing scalars, histograms and text with a FileWriter and reading them back with tf.train.summary_iterator
    (the way users check their logs), FileWriterCache, and tf.summary.merge_all with a collection key."""
    v = tf.placeholder(tf.float32, [])
    tf.summary.scalar("loss", v)
    tf.summary.histogram("h", tf.stack([v, v * 2.0]))
    tf.summary.scalar("other", v * 10.0, collections=["extra"])
    merged = tf.summary.merge_all()
    extra = tf.summary.merge_all(key="extra")
    writer = tf.summary.FileWriter(os.path.join(d, "ev"))
    with tf.Session() as sess:
        for step in range(3):
            s, e = sess.run([merged, extra], {v: step / 2.0})
            writer.add_summary(s, step)
            writer.add_summary(e, step)
    writer.flush()
    writer.close()
    print(tf.summary.FileWriterCache.get(os.path.join(d, "ev2")) is tf.summary.FileWriterCache.get(
        os.path.join(d, "ev2")))
    tf.summary.FileWriterCache.clear()
    path = tf.gfile.Glob(os.path.join(d, "ev", "events.out.tfevents*"))[0]
    got = []
    for event in tf.train.summary_iterator(path):
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            got.append((event.step, value.tag, kind, round(value.simple_value, 4) if kind == "simple_value"
                        else (value.histo.num, value.histo.sum)))
    print(got)
    return {}


def basic_loops_and_hooks_state(tf, d):
    """SingularMonitoredSession (the graph finalized while it runs) with StepCounterHook writing steps/sec,
    LoggingTensorHook with a formatter, SummarySaverHook with an explicit summary op and output_dir, NanTensorHook
    stopping on NaN."""
    x, y, loss, train, step = _regression(tf)
    lines = []
    s_op = tf.summary.scalar("mse", loss)
    hooks = [tf.train.LoggingTensorHook({"l": loss, "s": step}, every_n_iter=2,
                                        formatter=lambda v: lines.append((int(v["s"]), round(float(v["l"]), 4)))),
             tf.train.SummarySaverHook(save_steps=2, output_dir=os.path.join(d, "sum"), summary_op=s_op),
             tf.train.StepCounterHook(every_n_steps=2, output_dir=os.path.join(d, "sum")),
             tf.train.StopAtStepHook(num_steps=5)]
    with tf.train.SingularMonitoredSession(hooks=hooks) as sess:
        while not sess.should_stop():
            sess.run(train, {x: X, y: Y})
        print("raw session step", sess.raw_session().run(step))
        try:
            tf.constant(1.0)
        except RuntimeError:
            print("the graph is finalized in the session")
    print("and open after it", tf.constant(1.0).op.type, tf.get_default_graph().finalized)
    print(lines)
    bad = tf.placeholder(tf.float32, [])
    try:
        with tf.train.MonitoredSession(hooks=[tf.train.NanTensorHook(bad)]) as sess:
            sess.run(train, {x: X, y: Y, bad: np.nan})
    except tf.train.NanLossDuringTrainingError:
        print("nan stopped")
    with tf.train.MonitoredSession(hooks=[tf.train.NanTensorHook(bad, fail_on_nan_loss=False)]) as sess:
        sess.run(train, {x: X, y: Y, bad: np.nan})
        print("nan requested stop", sess.should_stop())
    return {"files": _files(d)}


def run_step_fn_and_callable(tf, d):
    """MonitoredSession.run_step_fn with step_context.run_with_hooks and request_stop, Session.make_callable with
    feeds, and the session's list_devices."""
    x, y, loss, train, step = _regression(tf)
    seen = []

    def step_fn(step_context):
        value, _ = step_context.run_with_hooks([loss, train], {x: X, y: Y})
        seen.append(round(float(value), 5))
        if len(seen) == 3:
            step_context.request_stop()
        return value
    with tf.train.MonitoredSession() as sess:
        while not sess.should_stop():
            sess.run_step_fn(step_fn)
    print(seen)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        run = sess.make_callable([loss, step], feed_list=[x, y])
        print([round(float(v), 5) for v in run(X, Y)])
        print([dev.device_type for dev in sess.list_devices()][:1])
    return {}


def gradient_overrides(tf, d):
    """Custom gradients as TF1 scripts write them: tf.RegisterGradient + Graph.gradient_override_map for a guided
    ReLU and for a py_func's gradient, tf.NoGradient through an override, tf.stop_gradient."""
    @tf.RegisterGradient("InfraGuidedRelu")
    def _guided(op, grad):
        return tf.where(grad > 0.0, grad * tf.cast(op.outputs[0] > 0.0, tf.float32), tf.zeros_like(grad))

    @tf.RegisterGradient("InfraCubeGrad")
    def _cube_grad(op, grad):
        return 3.0 * tf.square(op.inputs[0]) * grad

    tf.NoGradient("InfraBlocked")
    x = tf.constant([-1.0, 0.5, 2.0])
    g = tf.get_default_graph()
    with g.gradient_override_map({"Relu": "InfraGuidedRelu"}):
        guided = tf.nn.relu(x * 2.0)
    plain = tf.nn.relu(x * 2.0)
    with g.gradient_override_map({"PyFunc": "InfraCubeGrad"}):
        cube = tf.py_func(lambda a: a ** 3, [x], tf.float32)
    with g.gradient_override_map({"Square": "InfraBlocked"}):
        blocked = tf.square(x)
    up = tf.constant([1.0, -1.0, 1.0])
    grads = [tf.gradients(guided, x, up)[0], tf.gradients(plain, x, up)[0], tf.gradients(cube, x)[0],
             tf.gradients(blocked + x, x)[0], tf.gradients(tf.stop_gradient(x * x) + x, x)[0]]
    print(guided.op.type, cube.op.type)
    with tf.Session() as sess:
        values = sess.run(grads)
    print([v.tolist() for v in values])
    return {"grads": values}


def templates_and_collections(tf, d):
    """tf.make_template sharing variables across calls, colocate_with and container blocks, model_variables,
    moving_average_variables, all_variables and initialize_all_tables."""
    def dense(x, units):
        w = tf.get_variable("w", [3, units], initializer=tf.constant_initializer(0.5))
        return tf.matmul(x, w)
    layer = tf.make_template("shared", dense, units=2)
    a, b = layer(tf.ones([1, 3])), layer(tf.fill([1, 3], 2.0))
    print(layer.variable_scope.name, [v.op.name for v in layer.variables], a.op.name, b.op.name)
    with tf.colocate_with(a.op), tf.container("c"):
        c = tf.identity(a * 2.0, name="c")
    m = tf.Variable(1.0, name="m", collections=[tf.GraphKeys.GLOBAL_VARIABLES, tf.GraphKeys.MODEL_VARIABLES])
    ema = tf.train.ExponentialMovingAverage(0.5)
    update = ema.apply([m])
    print([v.op.name for v in tf.model_variables()], [v.op.name for v in tf.moving_average_variables()])
    print(sorted(v.op.name for v in tf.all_variables()))
    with tf.Session() as sess:
        sess.run(m.initializer)  # the average starts from it
        sess.run([tf.global_variables_initializer(), tf.initialize_all_tables()])
        sess.run(update)
        return {"ab": sess.run([a, b, c]), "avg": sess.run(ema.average(m))}


def checkpoint_state_and_loops(tf, d):
    """The state-file helpers (generate_checkpoint_state_proto, update_checkpoint_state, remove_checkpoint),
    tf.train.basic_train_loop on a Supervisor, and ProfilerHook writing a timeline every 2 steps."""
    folder = os.path.join(d, "run")
    with tf.Graph().as_default():  # a Supervisor finalizes its graph
        x, y, loss, train, step = _regression(tf)
        sv = tf.train.Supervisor(logdir=folder, save_model_secs=0, save_summaries_secs=0)
        seen = []

        def train_step(sess, n):
            seen.append(round(float(sess.run([loss, train], {x: X, y: Y})[0]), 5))
            if len(seen) == n:
                sv.request_stop()
        tf.train.basic_train_loop(sv, train_step, args=(3,))
        print(seen, sv.should_stop())
    x, y, loss, train, step = _regression(tf)
    saver = tf.train.Saver()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for k in range(3):
            saver.save(sess, os.path.join(folder, "m"), global_step=k, write_state=False)
    state = tf.train.generate_checkpoint_state_proto(folder, os.path.join(folder, "m-2"),
                                                     [os.path.join(folder, "m-0")])
    print([os.path.basename(p) for p in state.all_model_checkpoint_paths])
    tf.train.update_checkpoint_state(folder, os.path.join(folder, "m-1"), [os.path.join(folder, "m-0")])
    print(os.path.basename(tf.train.latest_checkpoint(folder)))
    tf.train.remove_checkpoint(os.path.join(folder, "m-0"))
    print(tf.train.checkpoint_exists(os.path.join(folder, "m-0")), tf.train.checkpoint_exists(os.path.join(folder,
                                                                                                           "m-1")))
    hook = tf.train.ProfilerHook(save_steps=2, output_dir=os.path.join(d, "prof"))
    with tf.train.MonitoredSession(hooks=[hook, tf.train.StopAtStepHook(num_steps=5)]) as sess:
        while not sess.should_stop():
            sess.run(train, {x: X, y: Y})
    traces = [t for t in _files(os.path.join(d, "prof")) if t.endswith(".json")]
    print(_files(os.path.join(d, "prof")), all(json.load(open(os.path.join(d, "prof", t)))["traceEvents"]
                                               for t in traces))
    return {}


def tf_test_case_helpers(tf, d):
    """The rest of users' test toolbox: tf.test.compute_gradient_error of a right and a wrong gradient,
    tf.test.assert_equal_graph_def, tf.test.mock, a tf.test.Benchmark, assertAllCloseAccordingToType,
    assertAllInRange and assertRaisesWithPredicateMatch."""
    class Helpers(tf.test.TestCase):
        def test_gradient_error(self):
            with self.cached_session():
                x = tf.placeholder(tf.float64, [2, 2])
                y = tf.reduce_sum(tf.tanh(x) * x, axis=1)
                err = tf.test.compute_gradient_error(x, [2, 2], y, [2], x_init_value=np.ones((2, 2)) * 0.3)
                self.assertLess(err, 1e-6)

        def test_graph_defs(self):
            def graph_def(c):
                g = tf.Graph()
                with g.as_default():
                    tf.add(tf.constant(1.0, name="a"), c, name="s")
                return g.as_graph_def()
            tf.test.assert_equal_graph_def(graph_def(2.0), graph_def(2.0))
            with self.assertRaises(AssertionError):
                tf.test.assert_equal_graph_def(graph_def(2.0), graph_def(3.0))

        def test_mock_and_ranges(self):
            with tf.test.mock.patch.object(os.path, "isdir", return_value=False):
                self.assertFalse(os.path.isdir(self.get_temp_dir()))
            with self.cached_session():
                v = tf.constant([0.25, 0.5], tf.float32)
                self.assertAllCloseAccordingToType(v, np.array([0.25, 0.5], np.float32))
                self.assertAllInRange(v, 0.0, 1.0)
                with self.assertRaisesWithPredicateMatch(ValueError, lambda e: "shape" in str(e)):
                    tf.reshape(v, [3])

    class Bench(tf.test.Benchmark):
        def benchmark_add(self):
            self.report_benchmark(iters=1, wall_time=0.5, name="add")
    Bench().benchmark_add()
    Bench().report_benchmark(iters=3, wall_time=2.0, extras={"mb": 1.5}, name="more")
    result = unittest.TextTestRunner(stream=open(os.devnull, "w"), verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(Helpers))
    print("ran", result.testsRun, "failures", [str(t) for t, _ in result.failures + result.errors])
    return {"ok": result.wasSuccessful()}


def session_and_graph_options(tf, d):
    """Session and graph options as scripts set them: ConfigProto (device_count, gpu_options, jit level,
    thread counts, timeouts), RunOptions' other fields, sess_str, device strings in their many spellings,
    Graph.collections, building_function, prevent_feeding / prevent_fetching."""
    for spec in ("/device:XLA_CPU:0", "gpu:0", "/GPU:0", "/job:a/replica:0/task:0/cpu:0", "/cpu:*", "CPU:1",
                 "/replica:1", "/task:2/device:GPU:3"):
        with tf.Graph().as_default(), tf.device(spec):
            print(spec, repr(tf.constant(1.0).device))
    spec = tf.DeviceSpec.from_string("/job:a/task:2/device:GPU:1")
    print(spec.job, spec.replica, spec.task, spec.device_type, spec.device_index,
          tf.DeviceSpec(job="w", task=1).to_string(), spec.make_merged_spec(tf.DeviceSpec(task=5)).to_string())
    config = tf.ConfigProto(device_count={"GPU": 0}, allow_soft_placement=True, intra_op_parallelism_threads=1,
                            inter_op_parallelism_threads=1, operation_timeout_in_ms=10000,
                            gpu_options=tf.GPUOptions(per_process_gpu_memory_fraction=0.5))
    config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
    config.gpu_options.visible_device_list = "0"
    with tf.Graph().as_default() as g:
        a = tf.placeholder(tf.float32, [], name="a")
        b = a * 2.0
        tf.add_to_collection("mine", b)
        print(g.collections, g.building_function)
        g.prevent_feeding(b)
        g.prevent_fetching(a.op)
        print(g.is_feedable(a), g.is_feedable(b), g.is_fetchable(a.op), g.is_fetchable(b))
        with tf.Session(config=config) as sess:
            options = tf.RunOptions(timeout_in_ms=1000, report_tensor_allocations_upon_oom=True)
            print(sess.sess_str, sess.run(b, {a: 1.5}, options=options))
            for fetch, feeds in ((b * 1.0, {b: 1.0}), (a, {a: 1.0})):
                try:
                    sess.run(fetch, feeds)
                except ValueError:
                    print("refused")
    return {}


SCRIPTS = [tf_test_case_unit_tests, profiler_flops_and_parameters, traced_run_metadata_timeline,
           supervisor_managed_session, monitored_session_custom_hooks, device_placement,
           multi_tower_average_gradients, checkpoint_utilities, saver_options, ema_variables_to_restore,
           warm_start_and_init_from_checkpoint, graphs_and_finalize, custom_getter_and_partitions,
           collections_and_keys, interactive_session, partial_run_steps, freeze_and_import,
           main_with_flags_logging_gfile, initialization_checks, summary_iterator_reads_events,
           basic_loops_and_hooks_state, run_step_fn_and_callable, gradient_overrides, templates_and_collections,
           checkpoint_state_and_loops, tf_test_case_helpers, session_and_graph_options]
