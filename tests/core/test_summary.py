"""tf.summary writes event files that TensorBoard's own reader (EventAccumulator) reads: scalars, histograms,
images, merged summaries, the graph (control flow's functions too); the TFRecord framing's CRC-32C;
`tfplus train --logdir`."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from conftest import oracle_module
from controlflow import control_flow_model

import tfplus as tf
from tfplus import graph_io
from tfplus import summary as summary_module

event_accumulator = oracle_module("tensorboard.backend.event_processing.event_accumulator")


def _read(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"images": 0, "histograms": 0,
                                                                         "scalars": 0})
    acc.Reload()
    return acc


def test_scalars_histograms_images_and_graph_read_by_tensorboard(tmp_path):
    rng = np.random.default_rng(0)
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [None, 4, 5, 3])
        w = tf.placeholder(tf.float32, [100])
        loss = tf.reduce_mean(x)
        with tf.name_scope("train"):
            tf.summary.scalar("loss", loss)
        tf.summary.histogram("weights", w)
        tf.summary.image("inputs", x, max_outputs=2)
        only_loss = tf.summary.scalar("again", loss * 2.0, collections=[])
        merged = tf.summary.merge_all()
        assert merged is not None and tf.summary.merge_all("nothing here") is None
        writer = tf.summary.FileWriter(str(tmp_path), g)
        wv = rng.standard_normal(100).astype(np.float32)
        with tf.Session() as sess:
            for step in range(3):
                xv = rng.random((3, 4, 5, 3)).astype(np.float32)
                s, s2 = sess.run([merged, only_loss], {x: xv, w: wv})
                assert isinstance(s, bytes)
                writer.add_summary(s, step)
                writer.add_summary(s2, step)
        writer.close()
    acc = _read(tmp_path)
    tags = acc.Tags()
    assert sorted(tags["scalars"]) == ["again", "train/loss"]
    assert tags["histograms"] == ["weights"] and sorted(tags["images"]) == ["inputs/image/0", "inputs/image/1"]
    assert [e.step for e in acc.Scalars("train/loss")] == [0, 1, 2]
    np.testing.assert_allclose([e.value for e in acc.Scalars("again")],
                               [2 * e.value for e in acc.Scalars("train/loss")], rtol=1e-6)
    h = acc.Histograms("weights")[0].histogram_value
    assert h.num == 100 and np.isclose(h.min, wv.min()) and np.isclose(h.max, wv.max())
    assert np.isclose(h.sum, wv.sum(), rtol=1e-5) and sum(h.bucket) == 100
    img = acc.Images("inputs/image/0")[0]
    assert (img.width, img.height) == (5, 4) and img.encoded_image_string.startswith(b"\x89PNG")
    graph = acc.Graph()
    assert {n.name for n in graph.node} >= {"Placeholder", "Mean"}


def test_png_encoding_roundtrips_through_a_png_reader():
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 7
    png = summary_module.encode_png(image)
    # Decode by hand: one IDAT chunk, zlib, one filter byte (0) per row.
    start = png.index(b"IDAT") + 4
    length = int.from_bytes(png[start - 8:start - 4], "big")
    raw = zlib.decompress(png[start:start + length])
    rows = [raw[i * 10 + 1:(i + 1) * 10] for i in range(2)]
    np.testing.assert_array_equal(np.frombuffer(b"".join(rows), np.uint8).reshape(2, 3, 3), image)


def test_image_scaling_is_tf1s(tf1):
    """Float images scale like TensorFlow's image summary: [0, max] -> [0, 255], else centred on 128."""
    batch = np.stack([np.linspace(0, 2, 12).reshape(2, 2, 3), np.linspace(-1, 3, 12).reshape(2, 2, 3)]).astype(
        np.float32)
    ours = summary_module._to_uint8(batch)
    g = tf1.Graph()
    with g.as_default():
        s = tf1.summary.image("im", tf1.constant(batch), max_outputs=2)
        with tf1.Session() as sess:
            proto = tf1.Summary.FromString(sess.run(s))
            theirs = sess.run([tf1.image.decode_png(v.image.encoded_image_string) for v in proto.value])
    for i in range(2):
        np.testing.assert_allclose(ours[i].astype(int), theirs[i].astype(int), atol=1)


def test_text_summary_read_by_tensorboard(tmp_path):
    with tf.Graph().as_default():
        note = tf.summary.text("note", "hello")
        with tf.Session() as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
            writer.add_summary(sess.run(note), 1)
    acc = _read(tmp_path)
    [event] = acc.Tensors("note")
    assert event.step == 1 and event.tensor_proto.string_val == [b"hello"]


def test_summary_errors_are_clear(tmp_path):
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="scalar is needed"):
            tf.summary.scalar("bad", tf.zeros([3]))
        with pytest.raises(ValueError, match="channels"):
            tf.summary.image("bad", tf.zeros([2, 4, 4, 2]))
        w = tf.summary.FileWriter(str(tmp_path))
        with pytest.raises(TypeError, match="serialized Summary"):
            w.add_summary(3.0)
        w.close()


def test_train_logdir_writes_tensorboard_scalars(tmp_path):
    from tfplus.cli import main
    code = main(["train", "--synthetic", "--model", "lenet", "--batch-size", "8", "--steps", "4", "--log-every",
                 "2", "--logdir", str(tmp_path)])
    assert code == 0
    tags = _read(tmp_path).Tags()["scalars"]
    for tag in ("train/loss", "train/accuracy", "train/lr", "train/images_per_sec", "train/peak_bytes",
                "epoch/test_accuracy"):
        assert tag in tags, tags
    assert [e.step for e in _read(tmp_path).Scalars("train/loss")] == [2, 4]


def test_control_flow_graph_read_by_tensorboard(tmp_path):
    """FileWriter(logdir, graph) and add_graph with cond, while_loop, cond in while_loop and a GRU's dynamic_rnn:
    TensorBoard reads the graph and its function library, and the graph it reads imports into tfplus again."""
    with tf.Graph().as_default() as g:
        control_flow_model()
        with tf.summary.FileWriter(str(tmp_path / "a"), g):
            pass
        writer = tf.summary.FileWriter(str(tmp_path / "b"))
        writer.add_graph(g.as_graph_def())  # a GraphDef as `graph`, as TF1 takes it
        with pytest.raises(TypeError, match="pass a tf.Graph .* got str"):
            writer.add_graph("graph.pbtxt")
        writer.close()
    want = g.as_graph_def().SerializeToString(deterministic=True)
    for run in ("a", "b"):
        graph = _read(tmp_path / run).Graph()
        assert {"If", "While"} <= {n.op for n in graph.node}
        # a tf.Graph is written with its tensors' shapes, which TensorBoard shows on the edges (as TF1 writes it)
        assert ("_output_shapes" in graph.node[0].attr) == (run == "a")
        assert {f.signature.name for f in graph.library.function} >= {"branch_If_then", "loop_While_body"}
        with tf.Graph().as_default() as back:
            tf.import_graph_def(graph_io.parse_graph_def(graph.SerializeToString()), name="")
        assert back.as_graph_def().SerializeToString(deterministic=True) == want
