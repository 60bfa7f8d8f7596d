"""TF1 behaviours that scripts rely on, against TensorFlow: Session.run's 0-d fetches are NumPy scalars (and
Saver.save takes a fetched global step), ExponentialMovingAverage averages tensors (losses) too, summary names
TF1 cleans ('W1:0', 'loss (raw)') are cleaned the same way, and FileWriter(logdir, graph) writes a graph with while
loops that TensorFlow imports and runs."""
from __future__ import annotations

import glob

import numpy as np
import pytest
from controlflow import CF_FEEDS, control_flow_model

import tfplus as tf


def _fetch_types(t):
    with t.Graph().as_default(), t.Session() as sess:
        fetched = sess.run({"f": t.constant(1.5), "i": t.constant(3, t.int64), "b": t.constant(True),
                            "v": t.constant([1, 2]), "l": [t.constant(2)]})
        return {k: (type(v[0] if k == "l" else v), np.asarray(v).tolist()) for k, v in fetched.items()}


def test_zero_d_fetches_are_numpy_scalars(tf1):
    assert _fetch_types(tf) == _fetch_types(tf1)


def _save_with_fetched_step(t, path):
    with t.Graph().as_default():
        step = t.train.get_or_create_global_step()
        bump = t.assign_add(step, 7)
        saver = t.train.Saver()
        with t.Session() as sess:
            sess.run(t.global_variables_initializer())
            _, at = sess.run([bump, step])
            return [saver.save(sess, path, global_step=at), saver.save(sess, path, global_step=step),
                    saver.save(sess, path, global_step=np.int32(9)), saver.save(sess, path, global_step=11)]


def test_saver_save_takes_a_fetched_global_step(tf1, tmp_path):
    got = _save_with_fetched_step(tf, str(tmp_path / "a" / "model"))
    want = _save_with_fetched_step(tf1, str(tmp_path / "b" / "model"))
    assert [p.rsplit("-", 1)[1] for p in got] == [p.rsplit("-", 1)[1] for p in want] == ["7", "7", "9", "11"]


def _loss_averages(t):
    """CIFAR-10's _add_loss_summaries: a moving average of two losses and their total, fed a stream of batches."""
    with t.Graph().as_default():
        x = t.placeholder(t.float32, [3])
        w = t.Variable([0.5, -1.0, 2.0], name="w")
        losses = [t.reduce_mean(t.square(x - w), name="xent"), t.multiply(t.nn.l2_loss(w), 0.1, name="decay")]
        total = t.add_n(losses, name="total")
        ema = t.train.ExponentialMovingAverage(0.9, name="avg")
        update = ema.apply(losses + [total])
        names = sorted(v.op.name for v in t.global_variables())
        averaged = t.get_collection(t.GraphKeys.MOVING_AVERAGE_VARIABLES)
        shadows = [ema.average(t_) for t_ in losses + [total]]
        with t.Session() as sess:
            sess.run(t.global_variables_initializer())
            start = sess.run(shadows)
            for i in range(3):
                sess.run(update, {x: [i, 2.0 * i, -1.0]})
            return names, [v.op.name for v in averaged], [ema.average_name(total)], start, sess.run(shadows)


def test_moving_average_of_tensors(tf1):
    got, want = _loss_averages(tf), _loss_averages(tf1)
    assert got[:3] == want[:3]
    np.testing.assert_allclose(got[3], want[3])  # zeros: a tensor's shadow starts at zero
    np.testing.assert_allclose(got[4], want[4], rtol=1e-6)


def test_moving_average_of_a_tensor_of_unknown_shape_names_it():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None])
        with pytest.raises(ValueError, match="tensor Placeholder:0 has shape .* fully known shape"):
            tf.train.ExponentialMovingAverage(0.9).apply([x])


def _summary_tags(t, caplog):
    with t.Graph().as_default():
        x = t.constant([1.0, 2.0])
        handles = [t.summary.scalar("W1:0", x[0]), t.summary.scalar("loss (raw)", x[1]),
                   t.summary.histogram("/lead:ing", x), t.summary.scalar("ok", x[0], family="fam ily")]
        with t.Session() as sess:
            out = sess.run(t.summary.merge(handles))
    return [v.tag for v in t.Summary.FromString(out).value]


def test_summary_names_are_cleaned_as_tf1_cleans_them(tf1, caplog):
    assert _summary_tags(tf, caplog) == _summary_tags(tf1, caplog) == \
        ["W1_0", "loss__raw_", "lead_ing", "fam_ily/fam_ily/ok"]
    assert "Summary name loss (raw) is illegal; using loss__raw_ instead." in caplog.text


def test_file_writer_graph_with_while_loops_runs_in_tensorflow(tf1, tmp_path):
    with tf.Graph().as_default() as g:
        control_flow_model(train=False)
        tf.summary.FileWriter(str(tmp_path), g).close()
        with tf.Session() as sess:
            sess.run("init")
            want = sess.run("acc:0", CF_FEEDS)  # (not the GRU: its initializers draw from TF's own generator)
    (events,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    (graph_def,) = [e.graph_def for e in tf1.train.summary_iterator(events) if e.graph_def]
    with tf1.Graph().as_default() as tg:
        tf1.import_graph_def(tf1.GraphDef.FromString(graph_def), name="")
        with tf1.Session(graph=tg) as sess:
            sess.run("init")
            got = sess.run("acc:0", CF_FEEDS)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
