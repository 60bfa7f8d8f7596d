"""tf.SparseTensor and tf.sparse against TensorFlow: fetching and feeding (sparse_placeholder), to_dense, reorder,
reshape, add, retain, from_dense, to_indicator, sparse_to_dense; sparse_tensor_dense_matmul and
embedding_lookup_sparse with their gradients in the dense operand (TensorFlow's, and float64 finite differences)."""
import numpy as np
import pytest
from io_scripts import same

import tfplus as tf

UNORDERED = ([[2, 1], [0, 3], [1, 0], [0, 0]], [1.0, 2.0, 3.0, 4.0], [3, 4])


def _both(tf1, build, feeds=None):
    """build(lib) -> fetches, run in TensorFlow and in tfplus; feeds(lib, fetches...) -> feed_dict."""
    results = []
    for lib in (tf1, tf):
        with lib.Graph().as_default():
            fetches = build(lib)
            with lib.Session() as sess:
                results.append(sess.run(fetches, feeds(fetches) if feeds else None))
    same(results[0], results[1])
    return results[1]


def test_reorder_reshape_to_dense_and_fetch(tf1):
    def build(t):
        st = t.SparseTensor(*UNORDERED)
        ordered = t.sparse.reorder(st)
        return {"st": st, "ordered": ordered, "dense": t.sparse.to_dense(ordered, default_value=-1.0),
                "reshaped": t.sparse.reshape(ordered, [-1, 2]), "reshaped3": t.sparse.reshape(ordered, [2, 2, 3])}
    out = _both(tf1, build)
    assert out["ordered"].indices.tolist() == [[0, 0], [0, 3], [1, 0], [2, 1]]


def test_add_retain_from_dense_to_indicator_sparse_to_dense(tf1):
    def build(t):
        a = t.SparseTensor([[0, 1], [1, 0], [2, 2]], [1.0, -2.0, 0.25], [3, 3])
        b = t.SparseTensor([[0, 1], [2, 0], [2, 2]], [3.0, 5.0, -0.125], [3, 3])
        ids = t.SparseTensor([[0, 0], [0, 1], [2, 0]], t.constant([3, 1, 0], t.int64), [3, 2])
        return {"sum": t.sparse.add(a, b), "thresholded": t.sparse.add(a, b, threshold=0.2),
                "dense_sum": t.sparse.add(a, t.ones([3, 3])), "retain": t.sparse.retain(a, [True, False, True]),
                "from_dense": t.sparse.from_dense(t.constant([[0, 2], [3, 0]])),
                "indicator": t.sparse.to_indicator(ids, 4),
                "sparse_to_dense": t.sparse_to_dense([[0, 1], [2, 0]], [3, 2], [7, 8], default_value=-1),
                "vector": t.sparse_to_dense([1, 3], [5], 1.5)}
    _both(tf1, build)


def test_sparse_placeholder_fed_with_a_value_or_a_tuple(tf1):
    value = (np.array([[0, 2], [1, 1]], np.int64), np.array([b"a", b"bc"], object), np.array([2, 3], np.int64))

    def build(t):
        ph = t.sparse_placeholder(t.string, name="words")
        return ph, t.sparse.to_dense(ph, default_value="-")
    for feed in (value, tf.SparseTensorValue(*value)):
        _both(tf1, build, lambda f, feed=feed: {f[0]: feed})
    with tf.Graph().as_default():
        ph = tf.sparse_placeholder(tf.float32, shape=[2, 3])
        assert ph.shape.as_list() == [2, 3] and ph.dtype is tf.float32
        with tf.Session() as sess:  # the fully known shape is dense_shape's default
            got = sess.run(tf.sparse.to_dense(ph), {ph.indices: [[1, 2]], ph.values: [4.0]})
        assert got.tolist() == [[0, 0, 0], [0, 0, 4.0]]


def test_to_dense_of_unordered_indices_is_an_error_unless_not_validated(tf1):
    for lib in (tf1, tf):
        with lib.Graph().as_default(), lib.Session() as sess:
            st = lib.SparseTensor(*UNORDERED)
            with pytest.raises(lib.errors.InvalidArgumentError):
                sess.run(lib.sparse.to_dense(st))
            assert sess.run(lib.sparse.to_dense(st, validate_indices=False))[2, 1] == 1.0
    with tf.Graph().as_default(), tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"SparseToDense.*tf.sparse.reorder"):
            sess.run(tf.sparse.to_dense(tf.SparseTensor(*UNORDERED)))


@pytest.mark.parametrize("adjoint_a, adjoint_b", [(False, False), (True, False), (False, True), (True, True)])
def test_sparse_dense_matmul_and_its_gradient(tf1, adjoint_a, adjoint_b):
    rng = np.random.default_rng(1)
    shape_b = (4, 3) if not adjoint_a else (3, 3)
    b = rng.standard_normal(shape_b[::-1] if adjoint_b else shape_b)

    def build(t):
        st = t.SparseTensor([[0, 1], [1, 3], [2, 0], [2, 2]] if not adjoint_a else [[0, 1], [1, 2], [2, 0]],
                            t.constant([1.5, -2.0, 0.5, 1.0] if not adjoint_a else [1.5, -2.0, 0.5], t.float64),
                            [3, 4] if not adjoint_a else [3, 3])
        w = t.constant(b)
        out = t.sparse_tensor_dense_matmul(st, w, adjoint_a=adjoint_a, adjoint_b=adjoint_b)
        return out, t.gradients(t.reduce_sum(t.square(out)), w)[0]  # dense in both
    _both(tf1, build)


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_embedding_lookup_sparse_and_its_gradient(tf1, combiner):
    params = np.random.default_rng(2).standard_normal((6, 3))

    def build(t):
        p = t.constant(params)
        ids = t.SparseTensor([[0, 0], [0, 1], [1, 0], [3, 0], [3, 2]], t.constant([1, 4, 4, 0, 5], t.int64), [4, 3])
        w = t.SparseTensor(ids.indices, t.constant([2.0, 0.5, 1.0, -1.0, 3.0], t.float64), ids.dense_shape)
        out = t.nn.embedding_lookup_sparse(p, ids, w, combiner=combiner)
        grad = t.gradients(t.reduce_sum(t.sin(out)), p)[0]
        return out, t.convert_to_tensor(grad)
    _both(tf1, build)


def test_matmul_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    b0 = rng.standard_normal((4, 2))
    with tf.Graph().as_default():
        st = tf.SparseTensor([[0, 1], [1, 3], [1, 0]], tf.constant([1.5, -2.0, 0.5], tf.float64), [2, 4])
        b = tf.placeholder(tf.float64, [4, 2])
        loss = tf.reduce_sum(tf.sin(tf.sparse_tensor_dense_matmul(st, b)))
        grad = tf.gradients(loss, b)[0]
        with tf.Session() as sess:
            analytic = sess.run(grad, {b: b0})
            numeric = np.zeros_like(b0)
            for i in np.ndindex(b0.shape):
                e = np.zeros_like(b0)
                e[i] = 1e-6
                numeric[i] = (sess.run(loss, {b: b0 + e}) - sess.run(loss, {b: b0 - e})) / 2e-6
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_reduce_sum_concat_transpose_fill_empty_rows_slice_expand_dims(tf1):
    def build(t):
        a = t.SparseTensor([[0, 1], [0, 3], [2, 0], [2, 2]], [1.0, 2.0, 3.0, 4.0], [4, 4])
        b = t.SparseTensor([[0, 0], [1, 1]], [5.0, 6.0], [4, 2])
        c = t.SparseTensor([[1, 0]], [7.0], [3, 4])
        filled, empty = t.sparse.fill_empty_rows(a, -1.0)
        return {"sum_all": t.sparse.reduce_sum(a), "sum0": t.sparse.reduce_sum(a, axis=0),
                "sum_keep": t.sparse.reduce_sum(a, axis=-1, keepdims=True),
                "concat1": t.sparse.concat(1, [a, b]), "concat0": t.sparse.concat(0, [a, c]),
                "transpose": t.sparse.transpose(a), "filled": filled, "empty": empty,
                "slice": t.sparse.slice(a, [0, 1], [3, 5]), "expand": t.sparse.expand_dims(a, -1),
                "expand0": t.sparse.expand_dims(b, 0)}
    _both(tf1, build)
