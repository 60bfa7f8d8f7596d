"""TF1's argument and shape semantics against TensorFlow (the `tf1` oracle), on ranks 1-4 with unknown dimensions:
cross-entropies of any rank, tf.layers.dense over [?, ?, n], Dimensions in shape lists, placeholder_with_default
left unfed, and Python lists of Tensors packed. The same builder runs on both APIs; static shapes and values
(and the gradients, where there are any) must agree."""
import numpy as np
import pytest

import tfplus as tf

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _compare(tf1, build, feeds, grads_of=None):
    """`build(mod)` -> (outputs, placeholders by key); compares the outputs' static shapes and values and, with
    `grads_of` (a key), the gradients of their sum by that placeholder."""
    results = []
    for mod in (tf1, tf):
        with mod.Graph().as_default():
            outs, phs = build(mod)
            if grads_of is not None:
                outs = outs + mod.gradients(sum(mod.reduce_sum(o) for o in outs), [phs[grads_of]])
            static = [o.shape.as_list() if o.shape.ndims is not None else None for o in outs]
            with mod.Session() as s:
                s.run(mod.global_variables_initializer())
                results.append((static, s.run(outs, {phs[k]: v for k, v in feeds.items()})))
    (ours_static, ours), (theirs_static, theirs) = results[1], results[0]
    assert ours_static == theirs_static
    for k, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"output {k}")


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_softmax_cross_entropies_flatten_the_outer_dimensions(tf1, rank):
    shape = (2, 3, 4)[:rank - 1] + (5,)

    def build(m):
        logits = m.placeholder(m.float32, [None] * (rank - 1) + [5])
        labels = m.placeholder(m.float32, [None] * (rank - 1) + [5])
        return [m.nn.softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits),
                m.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits),
                m.losses.softmax_cross_entropy(labels, logits)], {"logits": logits, "labels": labels}
    labels = np.abs(_x(*shape, seed=1))
    _compare(tf1, build, {"logits": _x(*shape), "labels": labels / labels.sum(-1, keepdims=True)}, "logits")


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_sparse_softmax_cross_entropies_flatten_the_outer_dimensions(tf1, rank):
    shape = (2, 3, 4)[:rank - 1]

    def build(m):
        logits = m.placeholder(m.float32, [None] * (rank - 1) + [5])
        labels = m.placeholder(m.int32, [None] * (rank - 1))
        return [m.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
                m.losses.sparse_softmax_cross_entropy(labels, logits)], {"logits": logits, "labels": labels}
    labels = np.random.default_rng(2).integers(0, 5, shape).astype(np.int32)
    _compare(tf1, build, {"logits": _x(*shape, 5), "labels": labels}, "logits")


@pytest.mark.parametrize("static", [[None, 4], [None, None, 4], [2, None, 4], [None, 3, None, 4]])
def test_dense_maps_the_last_axis_of_any_rank(tf1, static):
    value = _x(*[d or k + 2 for k, d in enumerate(static)])

    def build(m):
        x = m.placeholder(m.float32, static)
        y = m.layers.dense(x, 3, kernel_initializer=m.constant_initializer(_x(4, 3)),
                           bias_initializer=m.constant_initializer(0.5))
        return [y], {"x": x}
    _compare(tf1, build, {"x": value}, "x")


def test_dimensions_in_shape_lists(tf1):
    def build(m):
        x = m.placeholder(m.float32, [None, 3, 4])
        d1, d2 = x.shape[1], x.get_shape()[2]
        p = m.placeholder(m.float32, [None, d2])
        return [m.reshape(x, [-1, d1 * d2]), m.zeros([d1, d2]) + m.ones([2, d1, d2]), p,
                m.fill([d2, 2], 1.5), m.random_normal([d1, d2]) * 0.0,
                m.tile(m.reshape(x, [-1, d1, d2, 1]), [1, 1, 1, d1])], {"x": x, "p": p}
    _compare(tf1, build, {"x": _x(2, 3, 4), "p": _x(5, 4)})


@pytest.mark.parametrize("feed", [False, True])
def test_placeholder_with_default_and_an_unknown_batch(tf1, feed):
    def build(m):
        p = m.placeholder_with_default(_x(2, 3), [None, 3])
        q = m.placeholder_with_default(_x(4), [None])
        return [p * 2.0, m.reduce_sum(q), m.shape(p)], {"p": p}
    _compare(tf1, build, {"p": _x(5, 3, seed=3)} if feed else {})


def test_python_lists_of_tensors_are_packed(tf1):
    def build(m):
        x = m.placeholder(m.float32, [None, 3])
        s = m.reduce_sum(x)
        return [m.stop_gradient([x, x * 2.0]), m.reduce_sum([s, 1.0, s]), m.convert_to_tensor([[s, 2.0], (3, s)]),
                m.reshape(x, [m.shape(x)[0], 3]), m.add_n([x, x]) * m.reduce_mean([x[0, 0], 4.0])], {"x": x}
    _compare(tf1, build, {"x": _x(2, 3)}, "x")
