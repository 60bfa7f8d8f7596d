"""TF1 training scripts as users write them around a training loop (tf.data input pipelines, savers, monitored
sessions and hooks, summaries, learning-rate schedules, control flow, host callbacks and checks, session API),
each run with TensorFlow's tf.compat.v1 and with tfplus: what they print must be the same. The scripts print
values rounded or exact (float32 values that both compute the same way), checkpoint names and contents, and
what TensorBoard's event reader finds in their event files."""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from conftest import oracle_module

import tfplus as tf

# name -> script; `tf` is the library under test, `np` NumPy; each runs in a fresh default graph, in its own
# working directory.
SCRIPTS = {
    "data_slices_map_batch_one_shot": """
x = np.arange(10, dtype=np.float32)
y = np.arange(10, dtype=np.int64) % 3
ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2.0, b + 1)).batch(3)
it = ds.make_one_shot_iterator()
a, b = it.get_next()
with tf.Session() as sess:
    while True:
        try:
            va, vb = sess.run([a, b])
            print(va.tolist(), vb.tolist())
        except tf.errors.OutOfRangeError:
            print("done")
            break
""",
    "data_initializable_placeholder_repeat_drop": """
p = tf.placeholder(tf.float32, [None, 2])
ds = tf.data.Dataset.from_tensor_slices(p).repeat(2).batch(4, drop_remainder=True).prefetch(1)
it = tf.data.make_initializable_iterator(ds)
nxt = it.get_next()
print(nxt.shape.as_list())
with tf.Session() as sess:
    for n in (5, 3):
        sess.run(it.initializer, {p: np.arange(2 * n, dtype=np.float32).reshape(n, 2)})
        out = []
        try:
            while True:
                out.append(sess.run(nxt).tolist())
        except tf.errors.OutOfRangeError:
            pass
        print(n, out)
""",
    "data_from_structure_zip_dict": """
tr = tf.data.Dataset.range(6).map(lambda i: tf.cast(i, tf.float32) * 10.0)
va = tf.data.Dataset.from_tensors(tf.constant([1.0, 2.0])).repeat(2)
z = tf.data.Dataset.zip((tf.data.Dataset.range(3), tf.data.Dataset.from_tensor_slices({"a": [1, 2, 3, 4]})))
it = tf.data.Iterator.from_structure(tf.data.get_output_types(tr), tf.TensorShape([None]))
tri = it.make_initializer(tr.batch(4))
x = it.get_next()
zn = tf.data.make_one_shot_iterator(z).get_next()
with tf.Session() as sess:
    sess.run(tri)
    print(sess.run(x).tolist(), sess.run(x).tolist())
    for _ in range(3):
        v = sess.run(zn)
        print(v[0], v[1]["a"])
""",
    "data_shuffle_placeholder_with_default": """
ds = tf.data.Dataset.range(8).shuffle(8, seed=3).batch(8)
n = tf.data.make_one_shot_iterator(ds).get_next()
with tf.Session() as sess:
    v = sess.run(n)
    print(sorted(v.tolist()), len(v))
d = tf.placeholder_with_default(tf.constant(2.0), [])
with tf.Session() as sess:
    print(sess.run(d * 3), sess.run(d * 3, {d: 5.0}))
""",
    "saver_max_to_keep_dict_reader": """
import os
w = tf.Variable([1.0, 2.0], name="w")
b = tf.Variable(3.0, name="b")
gs = tf.train.get_or_create_global_step()
inc = tf.assign_add(w, [1.0, 1.0])
saver = tf.train.Saver(max_to_keep=2)
s2 = tf.train.Saver({"bias": b})
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(4):
        sess.run(inc)
        print(os.path.basename(saver.save(sess, "ck/model", global_step=step)))
    s2.save(sess, "ck2/b")
print(sorted(os.listdir("ck")))
print(os.path.basename(tf.train.latest_checkpoint("ck")))
st = tf.train.get_checkpoint_state("ck")
print([os.path.basename(p) for p in st.all_model_checkpoint_paths])
print(sorted(tf.train.list_variables("ck/model-3")))
print(tf.train.load_variable("ck/model-3", "w").tolist())
r = tf.train.NewCheckpointReader("ck2/b")
print(r.get_variable_to_shape_map(), r.get_tensor("bias"), r.has_tensor("b"))
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    saver.restore(sess, "ck/model-2")
    print(sess.run(w).tolist())
""",
    "import_meta_graph_collections": """
with tf.Graph().as_default():
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    w = tf.Variable([[1.0], [2.0]], name="w")
    y = tf.matmul(x, w, name="y")
    tf.add_to_collection("pred", y)
    train = tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(y))
    tf.add_to_collection("train_op", train)
    saver = tf.train.Saver()
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        saver.save(s, "./mg/model")
with tf.Graph().as_default():
    sv = tf.train.import_meta_graph("./mg/model.meta")
    with tf.Session() as s:
        sv.restore(s, "./mg/model")
        y = tf.get_collection("pred")[0]
        op = tf.get_collection("train_op")[0]
        s.run(op, {"x:0": [[1.0, 1.0]]})
        print(s.run(y, feed_dict={"x:0": [[1.0, 1.0]]}).tolist())
        print(s.run(tf.global_variables()[0]).tolist())
""",
    "write_graph_import_input_map": """
with tf.Graph().as_default() as g:
    x = tf.placeholder(tf.float32, [2], name="x")
    y = tf.multiply(x, 3.0, name="y")
    z = tf.add(y, 1.0, name="z")
    tf.train.write_graph(g, ".", "g.pbtxt")
    tf.train.write_graph(g.as_graph_def(), ".", "g.pb", as_text=False)
with tf.Graph().as_default():
    gd = tf.GraphDef()
    with open("g.pb", "rb") as f:
        gd.ParseFromString(f.read())
    c = tf.constant([1.0, 2.0])
    z2, y2 = tf.import_graph_def(gd, input_map={"x:0": c}, return_elements=["z:0", "y"], name="imp")
    with tf.Session() as s:
        print(s.run(z2).tolist(), y2.name, y2.type)
""",
    "monitored_session_hooks": """
import os
class H(tf.train.SessionRunHook):
    def begin(self):
        self.n = 0
    def before_run(self, ctx):
        return tf.train.SessionRunArgs({"loss": loss, "gs": gs})
    def after_run(self, ctx, vals):
        self.n += 1
        print("after", round(float(vals.results["loss"]), 4))
    def end(self, session):
        print("end", self.n)
gs = tf.train.get_or_create_global_step()
w = tf.Variable(2.0, name="w")
loss = tf.square(w - 1.0)
tf.summary.scalar("loss", loss)
train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
hooks = [tf.train.StopAtStepHook(last_step=5), H(), tf.train.NanTensorHook(loss),
         tf.train.LoggingTensorHook({"loss": loss}, every_n_iter=2)]
with tf.train.MonitoredTrainingSession(checkpoint_dir="run", hooks=hooks, save_checkpoint_steps=2,
                                       save_summaries_steps=1) as sess:
    while not sess.should_stop():
        sess.run(train)
print(os.path.basename(tf.train.latest_checkpoint("run")))
print(tf.train.load_variable("run", "global_step"), round(float(tf.train.load_variable("run", "w")), 5))
""",
    "monitored_session_resume_scaffold": """
import os
def build():
    gs = tf.train.get_or_create_global_step()
    w = tf.Variable(2.0, name="w")
    loss = tf.square(w - 1.0)
    train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=gs)
    return gs, w, train
for rnd in range(2):
    with tf.Graph().as_default():
        gs, w, train = build()
        with tf.train.MonitoredTrainingSession(checkpoint_dir="run", hooks=[tf.train.StopAtStepHook(num_steps=3)],
                                               save_summaries_steps=None, save_checkpoint_secs=None,
                                               save_checkpoint_steps=100) as sess:
            print("start", sess.run(gs))
            while not sess.should_stop():
                sess.run(train)
        print("round", rnd, tf.train.load_variable("run", "global_step"))
with tf.Graph().as_default():
    gs, w, train = build()
    scaffold = tf.train.Scaffold(saver=tf.train.Saver(max_to_keep=1))
    with tf.train.SingularMonitoredSession(checkpoint_dir="run", scaffold=scaffold) as sess:
        print("sing", sess.run(gs), round(float(sess.run(w)), 5))
        print(type(sess.raw_session()).__name__)
""",
    "summaries_file_writer": """
import glob
from tensorboard.backend.event_processing import event_accumulator as ea
x = tf.placeholder(tf.float32, [None])
tf.summary.scalar("avg", tf.reduce_mean(x))
tf.summary.histogram("h", x)
img = tf.reshape(tf.range(12, dtype=tf.float32) / 12.0, [1, 2, 2, 3])
tf.summary.image("img", img, max_outputs=1)
tf.summary.text("txt", tf.constant("hello"))
merged = tf.summary.merge_all()
other = tf.summary.merge([tf.summary.scalar("s2", tf.reduce_max(x))])
with tf.Session() as sess:
    w = tf.summary.FileWriter("logs", graph=sess.graph)
    for step in range(3):
        s, o = sess.run([merged, other], {x: [1.0, 2.0, float(step)]})
        w.add_summary(s, step)
        w.add_summary(o, global_step=step)
    w.add_graph(sess.graph)
    w.flush()
    w.close()
acc = ea.EventAccumulator("logs", size_guidance={"tensors": 0})
acc.Reload()
t = acc.Tags()
print(sorted(t["scalars"]), sorted(t["histograms"]), sorted(t["images"]), sorted(t["tensors"]), t["graph"])
print([(e.step, round(e.value, 4)) for e in acc.Scalars("avg")])
print([(e.step, round(e.value, 4)) for e in acc.Scalars("s2")])
print(len(acc.Images("img/image/0" if "img/image/0" in t["images"] else "img/image")))
print(acc.Histograms("h")[-1].histogram_value.num, acc.Histograms("h")[-1].histogram_value.sum)
""",
    "learning_rate_schedules": """
gs = tf.Variable(0, trainable=False, name="global_step", dtype=tf.int64)
lrs = [tf.train.exponential_decay(0.1, gs, 3, 0.5, staircase=True),
       tf.train.exponential_decay(0.1, gs, 3, 0.5),
       tf.train.piecewise_constant(gs, [2, 5], [1.0, 0.5, 0.1]),
       tf.train.polynomial_decay(0.1, gs, 4, 0.01, power=2.0, cycle=True),
       tf.train.polynomial_decay(0.1, gs, 4, 0.01),
       tf.train.cosine_decay(0.1, gs, 5, alpha=0.1),
       tf.train.cosine_decay_restarts(0.1, gs, 3, t_mul=2.0, m_mul=0.5),
       tf.train.inverse_time_decay(0.1, gs, 2, 0.5, staircase=True),
       tf.train.natural_exp_decay(0.1, gs, 2, 0.5)]
inc = tf.assign_add(gs, 1)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for _ in range(8):
        print([round(float(v), 5) for v in sess.run(lrs)])
        sess.run(inc)
""",
    "clipped_gradients_adam_nesterov": """
gs = tf.train.get_or_create_global_step()
w = tf.Variable([1.0, -2.0, 3.0], name="w")
v = tf.Variable([0.5, 0.5], name="v")
loss = tf.reduce_sum(tf.square(w)) * 3.0 + tf.reduce_sum(v * w[:2])
lr = tf.train.exponential_decay(0.1, gs, 2, 0.5, staircase=True)
opt = tf.train.AdamOptimizer(lr)
gv = opt.compute_gradients(loss, var_list=[w, v], gate_gradients=tf.train.Optimizer.GATE_GRAPH,
                           colocate_gradients_with_ops=True)
clipped = [(tf.clip_by_value(g, -1.0, 1.0), var) for g, var in gv]
train = opt.apply_gradients(clipped, global_step=gs)
m = tf.train.MomentumOptimizer(0.01, 0.9, use_nesterov=True).minimize(loss, global_step=gs)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for _ in range(4):
        sess.run(train)
        sess.run(m)
    print(sess.run(gs), [round(float(a), 5) for a in sess.run(w)], [round(float(a), 5) for a in sess.run(v)])
    print(sorted(x.op.name for x in tf.global_variables()))
""",
    "while_loop_tensor_array_gradient": """
def body(i, acc, ta):
    ta = ta.write(i, tf.cast(i, tf.float32) * x)
    return i + 1, tf.concat([acc, [tf.cast(i, tf.float32)]], 0), ta
x = tf.Variable(2.0, name="x")
ta0 = tf.TensorArray(tf.float32, size=4, element_shape=[])
i, acc, ta = tf.while_loop(lambda i, a, t: i < 4, body, [tf.constant(0), tf.zeros([0]), ta0],
                           shape_invariants=[tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape(None)],
                           parallel_iterations=1)
st = ta.stack()
loss = tf.reduce_sum(st * st)
g = tf.gradients(loss, x)[0]
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    print(sess.run([i, acc]), sess.run(st).tolist(), sess.run(g), sess.run(ta.size()))
""",
    "map_fn_scan_fold_gradient": """
x = tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], name="x")
m = tf.map_fn(lambda r: tf.reduce_sum(r * r), x)
m2 = tf.map_fn(lambda r: (r[0] * 2.0, tf.cast(r[1], tf.int32)), x, dtype=(tf.float32, tf.int32))
s = tf.scan(lambda a, r: a * r, x, initializer=tf.ones([2]))
f = tf.foldl(lambda a, r: a + r[0] * r[1], x, initializer=tf.constant(0.0))
fr = tf.foldr(lambda a, r: a * 2.0 + r[0], x, initializer=tf.constant(0.0))
gs = tf.gradients([tf.reduce_sum(m), tf.reduce_sum(s), f], x)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    print(sess.run(m).tolist(), [v.tolist() for v in sess.run(m2)])
    print(sess.run(s).tolist(), sess.run(f), sess.run(fr))
    print(sess.run(gs)[0].tolist())
""",
    "case_and_nested_cond": """
p = tf.placeholder(tf.int32, [])
c = tf.case([(tf.equal(p, 0), lambda: tf.constant(10.0)), (tf.equal(p, 1), lambda: tf.constant(20.0))],
            default=lambda: tf.constant(-1.0), exclusive=True)
c2 = tf.case({tf.less(p, 1): lambda: tf.constant(1), tf.greater(p, 1): lambda: tf.constant(3)},
             default=lambda: tf.constant(2))
x = tf.Variable(3.0)
r = tf.cond(p > 0, lambda: {"a": x * 2.0, "b": (x, x + 1.0)}, lambda: {"a": x * x, "b": (x - 1.0, x)})
g = tf.gradients(r["a"] + r["b"][1], x)[0]
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for v in (0, 1, 2):
        print(sess.run(c, {p: v}), sess.run(c2, {p: v}), sess.run(r, {p: v}), sess.run(g, {p: v}))
""",
    "py_func_print_checks": """
def f(a):
    return (a * 2).astype(np.float32)
x = tf.constant([1.0, 2.0])
y = tf.py_func(f, [x], tf.float32)
z = tf.numpy_function(lambda a, b: (a + b).astype(np.float32), [x, y], tf.float32)
pz = tf.Print(z, [z], "z=")
chk = tf.check_numerics(pz, "bad")
with tf.control_dependencies([tf.assert_equal(tf.shape(x), [2]), tf.debugging.assert_positive(x)]):
    out = tf.identity(chk)
vf = tf.verify_tensor_all_finite(out, "inf")
with tf.Session() as sess:
    print(sess.run(vf).tolist())
bad = tf.check_numerics(tf.constant([1.0]) / tf.constant([0.0]), "div")
with tf.Session() as sess:
    try:
        sess.run(bad)
    except tf.errors.InvalidArgumentError as e:
        print("caught InvalidArgumentError")
q = tf.placeholder(tf.int32, [])
a = tf.assert_equal(q, tf.constant(2))
with tf.Session() as sess:
    sess.run(a, {q: 2})
    try:
        sess.run(a, {q: 1})
    except tf.errors.InvalidArgumentError:
        print("assert caught")
""",
    "session_fetch_structures_callable": """
import collections
P = collections.namedtuple("P", "a b")
tf.reset_default_graph()
g = tf.Graph()
with g.as_default():
    with tf.device("/cpu:0"):
        x = tf.placeholder(tf.float32, [2], name="inp")
        y = x * 2.0
    z = y + 1.0
    cfg = tf.ConfigProto(gpu_options=tf.GPUOptions(allow_growth=True), log_device_placement=False,
                         allow_soft_placement=True)
    with tf.Session(config=cfg) as sess:
        out = sess.run({"p": P(a=y, b=[z, {"q": x}])}, feed_dict={"inp:0": [1.0, 2.0]})
        print(out["p"].a.tolist(), out["p"].b[0].tolist(), out["p"].b[1]["q"].tolist(), type(out["p"]).__name__)
        fn = sess.make_callable([y, z], feed_list=[x])
        print([v.tolist() for v in fn([3.0, 4.0])])
        opts = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
        md = tf.RunMetadata()
        print(sess.run(z, {x: [0.0, 0.0]}, options=opts, run_metadata=md).tolist())
        print(sess.run(y.op, {x: [0.0, 0.0]}))
sess = tf.InteractiveSession()
a = tf.constant([1.0, 2.0])
print((a * 3.0).eval().tolist())
v = tf.Variable(1.0)
v.initializer.run()
print(v.eval())
sess.close()
""",
    "partial_run": """
a = tf.placeholder(tf.float32, [])
b = tf.placeholder(tf.float32, [])
r1 = a + 1.0
r2 = r1 * b
with tf.Session() as sess:
    h = sess.partial_run_setup([r1, r2], [a, b])
    print(sess.partial_run(h, r1, {a: 1.0}))
    print(sess.partial_run(h, r2, {b: 3.0}))
""",
    "tensor_array_dynamic_scatter": """
ta0 = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
i, ta = tf.while_loop(lambda i, t: i < 5, lambda i, t: (i + 1, t.write(i, tf.cast(i, tf.float32) * 2.0)),
                      [tf.constant(0), ta0])
ta2 = tf.TensorArray(tf.float32, size=3).unstack(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
gat = ta2.gather([2, 0])
rd = ta2.read(1)
ta3 = tf.TensorArray(tf.float32, size=3).scatter([2, 0, 1], tf.constant([7.0, 8.0, 9.0])).stack()
with tf.Session() as sess:
    print(sess.run(ta.stack()).tolist(), sess.run(ta.size()))
    print(sess.run(gat).tolist(), sess.run(rd).tolist(), sess.run(ta3).tolist())
""",
    "data_filter_skip_take_monitored_loop_generator": """
X = np.arange(24, dtype=np.float32).reshape(12, 2) / 10.0
Y = (X.sum(1) > 1.0).astype(np.int32)
ds = tf.data.Dataset.from_tensor_slices({"x": X, "y": Y}).filter(lambda d: d["y"] >= 0).skip(2).take(8)
ds = ds.map(lambda d: (d["x"], d["y"])).repeat(2).batch(4)
print(ds.output_shapes, ds.output_types)
x, y = tf.data.make_one_shot_iterator(ds).get_next()
w = tf.Variable(tf.zeros([2, 2]))
logits = tf.matmul(x, w)
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
gs = tf.train.get_or_create_global_step()
train = tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=gs)
hooks = [tf.train.StopAtStepHook(last_step=100)]
with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:
    while not sess.should_stop():
        _, l = sess.run([train, loss])
        print(round(float(l), 4))
def gen():
    for i in range(3):
        yield i, [float(i)] * 2
g = tf.data.Dataset.from_generator(gen, (tf.int64, tf.float32), (tf.TensorShape([]), tf.TensorShape([2])))
a, b = tf.data.make_one_shot_iterator(g.batch(2)).get_next()
with tf.Session() as sess:
    print(sess.run([a, b]))
    print(sess.run(a))
""",
    "explicit_hooks_sharded_saver": """
import glob, os
gs = tf.train.get_or_create_global_step()
w = tf.Variable(3.0, name="w")
loss = tf.square(w)
s = tf.summary.scalar("loss", loss)
train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
saver = tf.train.Saver(max_to_keep=10, keep_checkpoint_every_n_hours=1, sharded=True)
hooks = [tf.train.CheckpointSaverHook("ck", save_steps=2, saver=saver),
         tf.train.SummarySaverHook(save_steps=1, output_dir="sm", summary_op=s),
         tf.train.StopAtStepHook(num_steps=4)]
with tf.train.SingularMonitoredSession(hooks=hooks) as sess:
    while not sess.should_stop():
        sess.run(train)

st = tf.train.get_checkpoint_state("ck")
print([os.path.basename(p) for p in st.all_model_checkpoint_paths])
print(round(float(tf.train.load_variable("ck", "w")), 5), tf.train.load_variable("ck", "global_step"))
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator("sm"); acc.Reload()
print([(e.step, round(e.value, 4)) for e in acc.Scalars("loss")])
""",
    "session_manager": """
w = tf.Variable([1.0, 2.0], name="w")
saver = tf.train.Saver()
with tf.Session() as s:
    s.run(w.initializer)
    saver.save(s, "./sm/m")
with tf.Graph().as_default():
    w = tf.Variable([0.0, 0.0], name="w")
    sm = tf.train.SessionManager()
    sess = sm.prepare_session("", init_op=tf.global_variables_initializer(), saver=tf.train.Saver(),
                              checkpoint_dir="./sm")
    print(sess.run(w).tolist())
    sess.close()
with tf.Graph().as_default():
    v = tf.Variable([5.0], name="v")
    sess = tf.train.SessionManager().prepare_session("", init_op=tf.global_variables_initializer())
    print(sess.run(v).tolist())
""",
    "padded_batch_autotune": """
ds = tf.data.Dataset.range(1, 5).map(lambda n: tf.fill([tf.cast(n, tf.int32)], tf.cast(n, tf.int32)))
pb = ds.padded_batch(2, padded_shapes=[None], padding_values=-1).prefetch(tf.data.experimental.AUTOTUNE)
pb2 = ds.padded_batch(3, padded_shapes=[5], drop_remainder=True)
print(pb.output_shapes, pb2.output_shapes)
n1 = tf.data.make_one_shot_iterator(pb).get_next()
n2 = tf.data.make_one_shot_iterator(pb2).get_next()
with tf.Session() as sess:
    print(sess.run(n1).tolist(), sess.run(n1).tolist(), sess.run(n2).tolist())
""",
    "queue_input_pipeline": """
import os
rec = bytes(range(1, 1 + 3 * 4 * 4 * 3))
with open("data.bin", "wb") as f:
    for i in range(6):
        f.write(bytes([i % 10]) + bytes((b + i) % 256 for b in rec[:3 * 2 * 2]))
q = tf.train.string_input_producer(["data.bin"], shuffle=False)
reader = tf.FixedLengthRecordReader(record_bytes=1 + 12)
key, value = reader.read(q)
raw = tf.decode_raw(value, tf.uint8)
label = tf.reshape(tf.cast(tf.strided_slice(raw, [0], [1]), tf.int32), [1])
img = tf.reshape(tf.strided_slice(raw, [1], [13]), [3, 2, 2])
img = tf.cast(tf.transpose(img, [1, 2, 0]), tf.float32)
imgs, labels = tf.train.batch([img, label], batch_size=3)
with tf.Session() as sess:
    coord = tf.train.Coordinator()
    threads = tf.train.start_queue_runners(sess=sess, coord=coord)
    for _ in range(2):
        a, b = sess.run([imgs, labels])
        print(a.shape, a.sum(), b.ravel().tolist())
    coord.request_stop()
    coord.join(threads)
""",
    "saver_subset_report_uninitialized": """
with tf.Graph().as_default():
    a = tf.Variable([1.0, 2.0], name="a")
    sv = tf.train.Saver([a])
    with tf.Session() as s:
        s.run(a.initializer); s.run(a.assign([5.0, 6.0]))
        sv.save(s, "./m")
with tf.Graph().as_default():
    a = tf.Variable([0.0, 0.0], name="a")
    c = tf.Variable([9.0], name="c")
    sv = tf.train.Saver(var_list=[a])
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        sv.restore(s, "./m")
        print(s.run([a, c]))
        print(s.run(tf.report_uninitialized_variables()).tolist())
""",
}


def _run(lib, script: str) -> str:
    lib.reset_default_graph()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, "<script>", "exec"), {"tf": lib, "np": np, "__name__": "__script__"})  # noqa: S102
    return out.getvalue()


def _compare(tf1, name, tmp_path, monkeypatch):
    oracle_module("tensorboard")
    (tmp_path / "tf").mkdir()
    (tmp_path / "tfplus").mkdir()
    monkeypatch.chdir(tmp_path / "tf")
    want = _run(tf1, SCRIPTS[name])
    monkeypatch.chdir(tmp_path / "tfplus")
    got = _run(tf, SCRIPTS[name])
    assert want, "the script printed nothing under TensorFlow"
    assert got == want


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_script_prints_what_tensorflow_prints(tf1, name, tmp_path, monkeypatch):
    _compare(tf1, name, tmp_path, monkeypatch)


# -- single behaviours, against TensorFlow -------------------------------------------------------------------
def _both(tf1, build):
    """build(lib) -> fetches, run in a fresh graph of each library."""
    results = []
    for lib in (tf1, tf):
        with lib.Graph().as_default(), lib.Session() as sess:
            results.append(sess.run(build(lib)))
    return results


def test_case_exclusive_fails_the_run_when_two_predicates_hold(tf1):
    for lib in (tf1, tf):
        with lib.Graph().as_default():
            p = lib.placeholder(lib.int32, [])
            one, two, zero = lib.constant(1), lib.constant(2), lib.constant(0)
            c = lib.case([(p > 0, lambda: one), (p > 1, lambda: two)],  # noqa: B023 (called at once)
                         default=lambda: zero, exclusive=True)  # noqa: B023
            with lib.Session() as sess:
                assert sess.run(c, {p: 1}) == 1 and sess.run(c, {p: 0}) == 0
                with pytest.raises(lib.errors.InvalidArgumentError):
                    sess.run(c, {p: 2})


def test_check_numerics_gradient_and_failure(tf1):
    def build(lib):
        x = lib.constant([1.0, 4.0])
        y = lib.check_numerics(lib.sqrt(x), "sqrt")
        return lib.gradients(lib.reduce_sum(y * y * y), x)[0]
    want, got = _both(tf1, build)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with tf.Graph().as_default(), tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="bad : Tensor had NaN values"):
            sess.run(tf.check_numerics(tf.sqrt(tf.constant([-1.0])), "bad"))


def test_static_assert_fails_when_built(tf1):
    for lib in (tf1, tf):
        with lib.Graph().as_default(), pytest.raises(lib.errors.InvalidArgumentError):
            lib.assert_equal(lib.constant([1, 2]), lib.constant([1, 3]))


def test_print_passes_its_input_and_gradient_through(tf1, capfd):
    def build(lib):
        x = lib.constant([1.0, 2.0])
        y = lib.Print(x * 3.0, [x], "x is ")
        return [y, lib.gradients(lib.reduce_sum(y * y), x)[0]]
    want, got = _both(tf1, build)
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1])
    assert "x is [1 2]" in capfd.readouterr().err


def test_py_func_runs_on_every_device(device):
    with tf.Graph().as_default():
        x = tf.constant([1.0, 2.0, 3.0])
        y = tf.py_func(lambda a: np.cumsum(a).astype(np.float32), [x * 2.0], tf.float32)
        with tf.Session(device=device) as sess:
            np.testing.assert_array_equal(sess.run(y + 1.0), [3.0, 7.0, 13.0])


def test_end_of_dataset_is_out_of_range_each_time_after(tf1):
    for lib in (tf1, tf):
        with lib.Graph().as_default():
            n = lib.data.make_one_shot_iterator(lib.data.Dataset.range(2)).get_next()
            with lib.Session() as sess:
                assert [sess.run(n), sess.run(n)] == [0, 1]
                for _ in range(2):
                    with pytest.raises(lib.errors.OutOfRangeError):
                        sess.run(n)


def test_uninitialized_iterator_is_a_failed_precondition(tf1):
    for lib in (tf1, tf):
        with lib.Graph().as_default():
            it = lib.data.make_initializable_iterator(lib.data.Dataset.range(2))
            with lib.Session() as sess, pytest.raises(lib.errors.FailedPreconditionError):
                sess.run(it.get_next())


def test_while_gradient_beside_a_growing_accumulator(tf1):
    def build(lib):
        x = lib.constant(1.5)

        def body(i, acc, y):
            return i + 1, lib.concat([acc, [y]], 0), y * x
        _, acc, y = lib.while_loop(lambda i, a, y: i < 3, body, [0, lib.zeros([0]), lib.constant(1.0)],
                                   shape_invariants=[lib.TensorShape([]), lib.TensorShape([None]),
                                                     lib.TensorShape([])])
        return [acc, lib.gradients(y, x)[0]]
    want, got = _both(tf1, build)
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
