"""Op-table cases for the ops TF's own gradient and optimizer code emits (gather, segment sums, stitches,
splits, products, top-k, ShapeN, IdentityN, Snapshot), plus unit tests checked against TensorFlow."""
import numpy as np
import pytest
from optable import Case

import tfplus as tf
from tfplus.ops import array_ops, math_ops

FLOAT = ("float32", "float64")
INT = ("int32", "int64")
ALL = FLOAT + INT


def value(v, dtype):
    return lambda rng, dt: np.array(v, dtype)


def distinct(shape):
    """Values with no ties (top_k and prod gradients are smooth there), in the test dtype."""
    return lambda rng, dt: (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.37 - 1.1).astype(dt)


def _segment_sum(data, ids, n):
    out = np.zeros((n,) + data.shape[ids.ndim:], data.dtype)
    flat = data.reshape((ids.size,) + out.shape[1:])
    for i, s in enumerate(ids.reshape(-1)):
        if s >= 0:
            out[s] += flat[i]
    return out


def _top_k(x, k):
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, -1), order.astype(np.int32)


def _stitch(indices, data):
    n = max(int(i.max()) + 1 for i in indices)
    out = np.zeros((n,) + data[0].shape[indices[0].ndim:], data[0].dtype)
    for i, d in zip(indices, data):
        out[i] = d
    return out


CASES = [
    Case("gather", lambda p, i: tf.gather(p, i), inputs=[(5, 3), value([4, 0, 4, 2], np.int32)],
         ref=lambda p, i: p[i], dtypes=ALL, grad=[0]),
    Case("gather_axis1_2d_indices", lambda p, i: tf.gather(p, i, axis=1),
         inputs=[(2, 4, 3), value([[3, 1], [1, 0]], np.int64)], ref=lambda p, i: np.take(p, i, 1), grad=[0]),
    Case("gather_dynamic", lambda p, i: tf.gather(p, i), inputs=[(4, 2), value([1, 1, 3], np.int32)],
         ref=lambda p, i: p[i], grad=[0], static_shapes=False),
    Case("gather_v1", lambda p, i: array_ops.apply_op("Gather", [p, i], {"Tparams": p.dtype,
                                                                      "Tindices": i.dtype}),
         inputs=[(4, 2), value([3, 0], np.int32)], ref=lambda p, i: p[i], grad=[0]),
    Case("embedding_lookup", lambda p, i: tf.nn.embedding_lookup(p, i),
         inputs=[(6, 3), value([[5, 0], [2, 2]], np.int32)], ref=lambda p, i: p[i], grad=[0]),
    Case("unsorted_segment_sum", lambda d, i: tf.unsorted_segment_sum(d, i, 4),
         inputs=[(5, 2), value([3, 0, 3, -1, 1], np.int32)], ref=lambda d, i: _segment_sum(d, i, 4), dtypes=ALL,
         grad=[0]),
    Case("unsorted_segment_sum_2d_ids", lambda d, i: tf.unsorted_segment_sum(d, i, 3),
         inputs=[(2, 2, 3), value([[0, 2], [2, 2]], np.int64)], ref=lambda d, i: _segment_sum(d, i, 3),
         grad=[0], static_shapes=False),
    Case("dynamic_stitch", lambda i0, i1, a, b: tf.dynamic_stitch([i0, i1], [a, b]),
         inputs=[value([0, 3], np.int32), value([[1], [2]], np.int32), (2, 3), (2, 1, 3)],
         ref=lambda i0, i1, a, b: _stitch([i0, i1], [a, b]), dtypes=ALL, grad=[2, 3]),
    Case("dynamic_stitch_shapes", lambda x: tf.dynamic_stitch([[0, 2], [1]], [tf.shape(x)[:2], [7]]),
         inputs=[(2, 5, 3)], ref=lambda x: np.array([2, 7, 5], np.int32), grad=False, static_shapes=False),
    Case("split", lambda x: tuple(tf.split(x, 3, axis=1)), inputs=[(2, 6)],
         ref=lambda x: tuple(np.split(x, 3, 1)), dtypes=ALL),
    Case("split_partial_use", lambda x: tf.split(x, 2)[1] * 2.0, inputs=[(4, 3)], ref=lambda x: x[2:] * 2),
    Case("split_v", lambda x: tuple(tf.split(x, [1, -1, 2], axis=-1)), inputs=[(2, 6)],
         ref=lambda x: (x[:, :1], x[:, 1:4], x[:, 4:]), dtypes=ALL),
    Case("split_v_dynamic", lambda x: tuple(tf.split(x, [2, 1], 0)), inputs=[(3, 2)],
         ref=lambda x: (x[:2], x[2:]), static_shapes=False),
    Case("reduce_prod_all", lambda x: tf.reduce_prod(x), inputs=[(2, 3)], ref=np.prod, dtypes=ALL),
    Case("reduce_prod_axis", lambda x: tf.reduce_prod(x, axis=1, keepdims=True), inputs=[(2, 3, 2)],
         ref=lambda x: x.prod(1, keepdims=True)),
    Case("reduce_prod_zeros", lambda x: tf.reduce_prod(x, 1),
         inputs=[value([[1.5, 0.0, -2.0], [0.0, 3.0, 0.0], [0.5, 2.0, -1.0]], np.float64)],
         ref=lambda x: x.prod(1), dtypes=("float64",)),
    Case("reduce_prod_dynamic", lambda x: tf.reduce_prod(x, 0), inputs=[(3, 2)], ref=lambda x: x.prod(0),
         static_shapes=False),
    Case("top_k", lambda x: tf.nn.top_k(x, 2), inputs=[distinct((3, 5))], ref=lambda x: _top_k(x, 2),
         dtypes=ALL, grad=True),
    Case("top_k_ties", lambda x: tf.nn.top_k(x, 3),
         inputs=[value([[1, 3, 3, 0], [2, 2, 2, 2]], np.int32)], ref=lambda x: _top_k(x, 3), dtypes=("int32",),
         grad=False),
    Case("top_k_dynamic", lambda x: tf.nn.top_k(x, 1)[0], inputs=[distinct((2, 2, 3))],
         ref=lambda x: _top_k(x, 1)[0], static_shapes=False),
    Case("shape_n", lambda a, b: tuple(tf.shape_n([a, b])), inputs=[(2, 3), (4,)],
         ref=lambda a, b: (np.array([2, 3], np.int32), np.array([4], np.int32)), grad=False,
         static_shapes=False),
    Case("identity_n", lambda a, b: tuple(tf.identity_n([a, b])), inputs=[(2,), (1, 3)],
         ref=lambda a, b: (a, b), dtypes=ALL),
    Case("snapshot", lambda x: tf.snapshot(x), inputs=[(3,)], ref=lambda x: x, dtypes=ALL),
    Case("prevent_gradient", lambda x: tf.prevent_gradient(x) + 1.0, inputs=[(3,)], ref=lambda x: x + 1,
         grad=False),
]


# -- unit tests ----------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()


def test_errors_name_the_problem():
    x = tf.placeholder(tf.float32, [4, 6])
    with pytest.raises(ValueError, match="does not divide into 4"):
        tf.split(x, 4, axis=1)
    with pytest.raises(ValueError, match="must add up to dimension 1"):
        tf.split(x, [2, 2], axis=1)
    with pytest.raises(ValueError, match="k=7 is larger"):
        tf.nn.top_k(x, 7)
    with pytest.raises(LookupError, match="Gradient explicitly disabled.*no grads here"):
        tf.gradients(tf.prevent_gradient(x, "no grads here"), [x])
    bad = tf.gather(x, [4])
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match=r"GatherV2.*out of range"):
        sess.run(bad, {x: np.zeros((4, 6))})


def test_forward_and_gradients_match_tensorflow(tf1):
    """gather (two axes), segment sum, stitch, prod with zeros, top_k, div_no_nan with zeros, where_v2: values
    and gradients as in TF."""
    rng = np.random.default_rng(0)
    p = rng.standard_normal((5, 4))
    p[1, 2] = 0.0
    idx = np.array([[4, 0], [4, 1]], np.int32)

    def build(lib):
        x = lib.constant(p)
        outs = [lib.gather(x, idx), lib.gather(x, [3, 1], axis=1),
                lib.unsorted_segment_sum(x, [2, 0, 2, -1, 1], 3),
                lib.dynamic_stitch([[1, 0], [2]], [x[:2], x[2:3]]),
                lib.reduce_prod(x, 1), lib.reduce_prod(x[1:3], 0), lib.nn.top_k(x, 3)[0],
                lib.div_no_nan(x, lib.maximum(x, 0.0)), lib.where_v2(x[:, :1] > 0, x, x[0] * 2.0)]
        w = [lib.constant(rng.standard_normal(o.shape.as_list())) for o in outs]
        loss = lib.add_n([lib.reduce_sum(o * wi) for o, wi in zip(outs, w)])
        return outs + lib.gradients(loss, [x])

    g = tf1.Graph()
    with g.as_default():
        rng = np.random.default_rng(0)
        want_t = build(tf1)
    with tf1.Session(graph=g) as sess:
        want = sess.run(want_t)
    rng = np.random.default_rng(0)
    got_t = build(tf)
    with tf.Session() as sess:
        got = sess.run(got_t)
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"output {k}")


def _loop_ref(x, w):
    for _ in range(3):
        x = x * w + np.sin(x)
    return x


CASES += [
    # every dim indexed: a scalar StridedSlice (the opencl launcher once read a NumPy scalar's address)
    Case("getitem_scalar", lambda x: x[1, -1] * 2.0, inputs=[(2, 3)], ref=lambda x: x[1, -1] * 2, dtypes=ALL),
    Case("while_loop", lambda x, w: tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * w + tf.sin(y)),
                                                  [0, x])[1],
         inputs=[(2, 3), (3,)], ref=_loop_ref),
    Case("while_loop_dynamic_max_iterations",
         lambda x: tf.while_loop(lambda y: tf.reduce_sum(y) < 1e9, lambda y: y * 1.5 + 1.0, [x],
                                 maximum_iterations=4),
         inputs=[(3,)], ref=lambda x: (((x * 1.5 + 1) * 1.5 + 1) * 1.5 + 1) * 1.5 + 1, static_shapes=False),
    Case("cond_true", lambda x, p: tf.cond(p, lambda: tf.square(x), lambda: x * 3.0),
         inputs=[(2, 2), value(True, np.bool_)], ref=lambda x, p: x * x, grad=[0]),
    Case("cond_false", lambda x, y, p: tf.cond(p, lambda: x * y, lambda: tf.exp(y) - 1.0),
         inputs=[(3,), (3,), value(False, np.bool_)], ref=lambda x, y, p: np.exp(y) - 1, grad=[0, 1]),
]


def _div_no_nan(x, y):
    return np.where(y == 0, 0, x / np.where(y == 0, 1, y))


def _with_zeros(rng, dt):
    y = rng.uniform(0.5, 2.0, (2, 3)).astype(dt)
    y[0, 1] = y[1, 2] = 0
    return y


CASES += [
    # y = 0 has no derivative (a jump): only x's gradient is checked there
    Case("div_no_nan", lambda x, y: tf.div_no_nan(x, y), inputs=[(2, 3), _with_zeros], ref=_div_no_nan,
         grad=[0]),
    Case("div_no_nan_bcast", lambda x, y: tf.div_no_nan(x, y), inputs=[(2, 3), lambda rng, dt: np.array(
        [1.5, 0.7, -2.0], dt)], ref=_div_no_nan),
    Case("where_v2", lambda c, x, y: tf.where_v2(c, x, y),
         inputs=[value([[True], [False]], np.bool_), (2, 3), (3,)], ref=np.where, dtypes=ALL, grad=[1, 2]),
    Case("rsqrt_grad", lambda y, dy: math_ops._fused_grad("RsqrtGrad", y, dy),
         inputs=[lambda rng, dt: rng.uniform(0.5, 2, (2, 3)).astype(dt), (2, 3)],
         ref=lambda y, dy: -0.5 * dy * y ** 3),
    Case("sqrt_grad", lambda y, dy: math_ops._fused_grad("SqrtGrad", y, dy),
         inputs=[lambda rng, dt: rng.uniform(0.5, 2, (3,)).astype(dt), (3,)], ref=lambda y, dy: 0.5 * dy / y),
    Case("reciprocal_grad", lambda y, dy: math_ops._fused_grad("ReciprocalGrad", y, dy),
         inputs=[(2, 2), (2, 2)], ref=lambda y, dy: -dy * y * y),
]


def test_strided_slice_with_run_time_index_keeps_what_the_masks_tell():
    x = tf.placeholder(tf.float32, [4, 2, 3])
    t = tf.placeholder(tf.int32, [])
    assert x[t].shape.as_list() == [2, 3]
    assert x[:, t].shape.as_list() == [4, 3]
    assert x[t, :, tf.newaxis].shape.as_list() == [2, 1, 3]
    assert x[t:].shape.as_list() == [None, 2, 3]
    # so a loop indexing its input by the counter keeps fixed loop-variable shapes, as in TF1
    h = tf.while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, tf.tanh(x[i] + h)), [0, tf.zeros([2, 3])])[1]
    with tf.Session() as sess:
        xs = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
        want = np.zeros((2, 3), np.float32)
        for k in range(4):
            want = np.tanh(xs[k] + want)
        np.testing.assert_allclose(sess.run(h, {x: xs}), want, rtol=1e-6)
