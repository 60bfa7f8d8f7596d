"""TensorFlow's tf.gather(..., batch_dims=1) (each example picks its own entries) in an imported MetaGraph (issue 34):
its GatherV2 carries batch_dims, which import refused ("batch_dims=1 is not supported"). It imports as tf.gather
builds it (gather_nd of each entry's batch coordinates), trains as TensorFlow's step, and splits into micro-batches
as the unsplit step on both devices."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf
from tfplus import planner
from tfplus.runtime.facts import device_facts

B, STEPS = 8, 3
TOL = {"cpu": 1e-5, "opencl": 1e-4}
_rng = np.random.default_rng(0)
FEEDS = {"x:0": _rng.standard_normal((B, 5, 4)).astype(np.float32),
         "idx:0": _rng.integers(0, 5, (B, 2)).astype(np.int32), "y:0": np.arange(B, dtype=np.int32) % 3}
W0 = _rng.standard_normal((4, 3)).astype(np.float32)


def _build(t):
    """Each example's two picked time steps, averaged, a dense layer, a mean loss; SGD."""
    x = t.placeholder(t.float32, [None, 5, 4], name="x")
    idx = t.placeholder(t.int32, [None, 2], name="idx")
    y = t.placeholder(t.int32, [None], name="y")
    w = t.Variable(W0, name="w")
    logits = t.tensordot(t.reduce_mean(t.gather(x, idx, batch_dims=1), 1), w, 1)
    loss = t.reduce_mean(t.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
    t.train.GradientDescentOptimizer(0.5).minimize(loss, name="train")
    return w


def _run(sess, g, k=None):
    feeds = {g.get_tensor_by_name(n): v for n, v in FEEDS.items()}
    fetches = [g.get_operation_by_name("train"), g.get_tensor_by_name("loss:0")]
    sess.run(g.get_operation_by_name("init"))
    if k:
        step = sess.step(fetches, feeds)
        p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph, force=(k, 1))
        assert p.microbatches == k, p.summary()
        step.use_plan(p)
    losses = [sess.run(fetches, feeds)[1] for _ in range(STEPS)]
    return np.array(losses, np.float64), sess.run(g.get_tensor_by_name("w:0"))


def _exported(tf1, path):
    """TensorFlow's steps of the graph, exported to `path` first."""
    with tf1.Graph().as_default() as g:
        _build(tf1)
        tf1.global_variables_initializer()  # "init"
        tf1.train.export_meta_graph(path)
        with tf1.Session(graph=g) as sess:
            return _run(sess, g)


def _imported(path, device, k=None):
    g = tf.Graph()
    with g.as_default():
        tf.train.import_meta_graph(path)
        assert not [op for op in g.get_operations() if op.type == "GatherV2" and op.attrs.get("batch_dims")]
        with tf.Session(graph=g, device=device, memory_budget="1GB" if k else None) as sess:
            return _run(sess, g, k)


@pytest.mark.parametrize("device", DEVICES)
def test_an_imported_gather_with_batch_dims_trains_as_tensorflow_and_splits_exactly(tf1, tmp_path, device):
    path = str(tmp_path / "gather.meta")
    want = _exported(tf1, path)
    assert want[0][-1] < want[0][0], "TensorFlow's steps did not train"
    got = _imported(path, device)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, err_msg="losses against TensorFlow")
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-5, err_msg="w against TensorFlow")
    k = 4 if device == "cpu" else 2
    split = _imported(path, device, k)
    np.testing.assert_allclose(split[0], got[0], rtol=TOL[device], err_msg=f"losses in {k} micro-batches")
    np.testing.assert_allclose(split[1], got[1], rtol=TOL[device], atol=TOL[device], err_msg=f"w in {k} micro-batches")
