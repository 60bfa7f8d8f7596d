"""Op-table cases for array ops (tfplus.ops.array_ops), plus unit tests of shape functions and slicing."""
import numpy as np
import pytest
from optable import Case

import tfplus as tf
from tfplus.ops import array_ops

FLOAT = ("float32", "float64")
INT = ("int32", "int64")
ALL = FLOAT + INT


def ints(shape, lo=-5, hi=6, dtype=None):
    return lambda rng, dt: rng.integers(lo, hi, shape).astype(dtype or dt)


def value(v, dtype=None):
    """A fixed input (an index, a shape) in its own dtype, or in the test dtype when dtype is None."""
    return lambda rng, dt: np.array(v, dtype or dt)


def index_value(v):
    """A fixed integer input in the test dtype, int32 when the test dtype is not an integer type."""
    return lambda rng, dt: np.array(v, dt if dt.kind in "iu" else np.int32)


def _tf_pad(x, paddings, c=0):
    return np.pad(x, paddings, constant_values=c)


def _one_hot(indices, depth, axis=-1, on=1.0, off=0.0, dtype=np.float32):
    out = np.where(indices[..., None] == np.arange(depth), on, off).astype(dtype)
    return np.moveaxis(out, -1, axis)


CASES = [
    # -- fill / zeros / ones / identity (existing ops) -------------------------------------------------------
    Case("identity", lambda x: tf.identity(x), inputs=[(2, 3)], ref=lambda x: x, dtypes=ALL + ("bool",),
         grad=True),
    Case("fill", lambda v: tf.fill([2, 3], v), inputs=[()], ref=lambda v: np.full((2, 3), v), dtypes=ALL),
    Case("zeros_ones_like", lambda x: (tf.zeros_like(x), tf.ones_like(x, dtype=tf.int32)), inputs=[(2, 2)],
         ref=lambda x: (np.zeros_like(x), np.ones(x.shape, np.int32)), grad=False),
    Case("zeros_ones", lambda: (tf.zeros([2, 3]), tf.ones([3], tf.int64)), inputs=[],
         ref=lambda: (np.zeros((2, 3), np.float32), np.ones(3, np.int64)), dtypes=("float32",), grad=False),
    Case("placeholder_with_default", lambda x: tf.placeholder_with_default(x, [2, 3]) * 2.0, inputs=[(2, 3)],
         ref=lambda x: x * 2, grad=False),
    # -- reshape and friends (their outputs alias their inputs) ----------------------------------------------
    Case("reshape", lambda x: tf.reshape(x, [4, 3]), inputs=[(2, 6)], ref=lambda x: x.reshape(4, 3),
         dtypes=ALL),
    Case("reshape_minus_one", lambda x: tf.reshape(x, [-1, 2]), inputs=[(3, 2, 2)],
         ref=lambda x: x.reshape(-1, 2)),
    Case("reshape_to_scalar", lambda x: tf.reshape(x, []), inputs=[(1, 1)], ref=lambda x: x.reshape(())),
    Case("reshape_dynamic", lambda x: tf.reshape(x, [-1]), inputs=[(3, 4)], ref=lambda x: x.reshape(-1),
         static_shapes=False),
    Case("reshape_packed_shape", lambda x: tf.reshape(x, [tf.shape(x)[0], -1]), inputs=[(2, 3, 2)],
         ref=lambda x: x.reshape(2, -1), static_shapes=False),
    Case("reshape_then_add", lambda x: tf.reshape(x, [3, 2]) + 1.0, inputs=[(6,)],
         ref=lambda x: x.reshape(3, 2) + 1),
    Case("squeeze_all", lambda x: tf.squeeze(x), inputs=[(1, 3, 1, 2)], ref=np.squeeze, dtypes=ALL),
    Case("squeeze_axis", lambda x: tf.squeeze(x, axis=[-1]), inputs=[(1, 3, 1)], ref=lambda x: x[..., 0]),
    Case("squeeze_dynamic", lambda x: tf.squeeze(x, 1), inputs=[(2, 1, 3)], ref=lambda x: x[:, 0],
         static_shapes=False),
    Case("expand_dims", lambda x: tf.expand_dims(x, 1), inputs=[(2, 3)], ref=lambda x: x[:, None],
         dtypes=ALL),
    Case("expand_dims_neg", lambda x: tf.expand_dims(x, -1), inputs=[(2, 3)], ref=lambda x: x[..., None]),
    Case("expand_dims_front_dynamic", lambda x: tf.expand_dims(x, axis=0), inputs=[(3,)],
         ref=lambda x: x[None], static_shapes=False),
    Case("stop_gradient", lambda x, y: tf.stop_gradient(x) * y, inputs=[(3,), (3,)], ref=np.multiply,
         grad=[1]),
    # -- transpose / concat / pad / tile -------------------------------------------------------------------
    Case("transpose_default", lambda x: tf.transpose(x), inputs=[(2, 3, 4)], ref=np.transpose, dtypes=ALL),
    Case("transpose_perm", lambda x: tf.transpose(x, [1, 2, 0]), inputs=[(2, 3, 4)],
         ref=lambda x: x.transpose(1, 2, 0)),
    Case("transpose_fed_perm", lambda x, p: tf.transpose(x, p),
         inputs=[(2, 3, 2), value([2, 0, 1], np.int32)], ref=lambda x, p: x.transpose(p), grad=[0]),
    Case("invert_permutation", lambda p: tf.invert_permutation(p), inputs=[index_value([2, 0, 3, 1])],
         ref=np.argsort, dtypes=INT, grad=False),
    Case("concat_axis1", lambda a, b: tf.concat([a, b], 1), inputs=[(2, 3), (2, 1)],
         ref=lambda a, b: np.concatenate([a, b], 1), dtypes=ALL),
    Case("concat_neg_axis3", lambda a, b, c: tf.concat([a, b, c], axis=-3),
         inputs=[(1, 2, 2), (2, 2, 2), (1, 2, 2)], ref=lambda a, b, c: np.concatenate([a, b, c], 0)),
    Case("concat_dynamic", lambda a, b: tf.concat([a, b], 0), inputs=[(2, 3), (1, 3)],
         ref=lambda a, b: np.concatenate([a, b], 0), static_shapes=False),
    Case("concat_one", lambda a: tf.concat([a], 0), inputs=[(2,)], ref=lambda a: a),
    Case("concat_offset", lambda s0, s1: array_ops.concat_offset(1, [s0, s1]),
         inputs=[value([2, 3, 5], np.int32), value([2, 4, 5], np.int32)],
         ref=lambda s0, s1: (np.array([0, 0, 0], np.int32), np.array([0, 3, 0], np.int32)), dtypes=("int32",),
         grad=False),
    Case("pad", lambda x: tf.pad(x, [[1, 0], [2, 1]]), inputs=[(2, 3)],
         ref=lambda x: _tf_pad(x, [[1, 0], [2, 1]]), dtypes=ALL),
    Case("pad_constant", lambda x: tf.pad(x, [[0, 1], [1, 1]], constant_values=-1.5), inputs=[(2, 2)],
         ref=lambda x: _tf_pad(x, [[0, 1], [1, 1]], -1.5)),
    Case("pad_fed_paddings", lambda x, p: tf.pad(x, p), inputs=[(2, 3), value([[0, 1], [2, 0]], np.int32)],
         ref=lambda x, p: _tf_pad(x, p), grad=[0]),
    Case("pad_dynamic", lambda x: tf.pad(x, [[1, 1], [0, 2]]), inputs=[(2, 2)],
         ref=lambda x: _tf_pad(x, [[1, 1], [0, 2]]), static_shapes=False),
    Case("tile", lambda x: tf.tile(x, [2, 3]), inputs=[(2, 3)], ref=lambda x: np.tile(x, (2, 3)), dtypes=ALL),
    Case("tile_dynamic", lambda x: tf.tile(x, [1, 2, 2]), inputs=[(2, 1, 3)],
         ref=lambda x: np.tile(x, (1, 2, 2)), static_shapes=False),
    Case("broadcast_to", lambda x: tf.broadcast_to(x, [2, 3, 4]), inputs=[(3, 1)],
         ref=lambda x: np.broadcast_to(x, (2, 3, 4)), dtypes=ALL),
    Case("broadcast_to_dynamic", lambda x: tf.broadcast_to(x, [3, 2]), inputs=[(2,)],
         ref=lambda x: np.broadcast_to(x, (3, 2)), static_shapes=False),
    Case("broadcast_gradient_args", lambda a, b: array_ops.broadcast_gradient_args(a, b),
         inputs=[value([2, 1, 3], np.int32), value([4, 1], np.int32)],
         ref=lambda a, b: (np.array([1], np.int32), np.array([0, 2], np.int32)), dtypes=("int32",),
         grad=False),
    # -- shape / size / rank ---------------------------------------------------------------------------------
    Case("shape", lambda x: tf.shape(x), inputs=[(2, 3)], ref=lambda x: np.array(x.shape, np.int32),
         grad=False),
    Case("shape_dynamic_int64", lambda x: tf.shape(x, out_type=tf.int64), inputs=[(2, 3, 1)],
         ref=lambda x: np.array(x.shape, np.int64), grad=False, static_shapes=False),
    Case("size", lambda x: tf.size(x), inputs=[(2, 3)], ref=lambda x: np.int32(x.size), grad=False,
         static_shapes=False),
    Case("rank", lambda x: tf.rank(x), inputs=[(2, 3, 1)], ref=lambda x: np.int32(x.ndim), grad=False,
         static_shapes=False),
    # -- one_hot ---------------------------------------------------------------------------------------------
    Case("one_hot", lambda i: tf.one_hot(i, 4), inputs=[value([0, 3, 1, 4, -1], np.int32)],
         ref=lambda i: _one_hot(i, 4), dtypes=("int32",), grad=False),
    Case("one_hot_axis0_values", lambda i: tf.one_hot(i, 3, on_value=5.0, off_value=-1.0, axis=0,
                                                      dtype=tf.float64),
         inputs=[value([[0, 2], [1, 1]], np.int64)], ref=lambda i: _one_hot(i, 3, 0, 5.0, -1.0, np.float64),
         dtypes=("int64",), grad=False),
    # -- slicing ---------------------------------------------------------------------------------------------
    Case("slice", lambda x: tf.slice(x, [1, 0], [2, -1]), inputs=[(4, 3)], ref=lambda x: x[1:3, 0:],
         dtypes=ALL),
    Case("slice_dynamic", lambda x: tf.slice(x, [0, 1, 1], [1, 2, -1]), inputs=[(2, 3, 3)],
         ref=lambda x: x[0:1, 1:3, 1:], static_shapes=False),
    Case("getitem_int", lambda x: x[1], inputs=[(3, 4)], ref=lambda x: x[1], dtypes=ALL),
    Case("getitem_slices", lambda x: x[1:, ::2], inputs=[(3, 5)], ref=lambda x: x[1:, ::2]),
    Case("getitem_negative_step", lambda x: x[::-1, -2], inputs=[(4, 3)], ref=lambda x: x[::-1, -2]),
    Case("getitem_ellipsis_newaxis", lambda x: x[..., None, 1:3], inputs=[(2, 3, 4)],
         ref=lambda x: x[..., None, 1:3]),
    Case("getitem_mixed", lambda x: x[-1, 1:-1, tf.newaxis],
         inputs=[(3, 4)], ref=lambda x: x[-1, 1:-1, None]),
    Case("getitem_out_of_bounds_slice", lambda x: x[2:10], inputs=[(4,)], ref=lambda x: x[2:10]),
    Case("getitem_dynamic", lambda x: x[:, 1], inputs=[(2, 3)], ref=lambda x: x[:, 1], static_shapes=False),
    Case("getitem_tensor_index", lambda x, i: x[i], inputs=[(3, 2), value(2, np.int32)], ref=lambda x,
         i: x[i], grad=[0]),
    Case("strided_slice_masks",
         lambda x: tf.strided_slice(x, [0, 1], [2, 3], [1, 1], begin_mask=1, end_mask=2),
         inputs=[(3, 4)], ref=lambda x: x[:2, 1:]),
    Case("strided_slice_grad", lambda dy: array_ops.strided_slice_grad([3, 4], [1, 0], [3, 4], [1, 2], dy),
         inputs=[(2, 2)], ref=lambda dy: np.pad(np.kron(dy, [1, 0]).reshape(2, 4), [[1, 0], [0, 0]])),
    # -- stack / unstack -------------------------------------------------------------------------------------
    Case("stack", lambda a, b, c: tf.stack([a, b, c]), inputs=[(2, 3)] * 3, ref=lambda *v: np.stack(v),
         dtypes=ALL),
    Case("stack_axis_last", lambda a, b: tf.stack([a, b], axis=-1), inputs=[(2, 3)] * 2,
         ref=lambda a, b: np.stack([a, b], -1)),
    Case("unstack", lambda x: tuple(tf.unstack(x, axis=1)), inputs=[(2, 3)],
         ref=lambda x: tuple(x[:, i] for i in range(3)), dtypes=ALL),
    Case("unstack_partial_use", lambda x: tf.unstack(x)[1] * 2.0, inputs=[(3, 2)], ref=lambda x: x[1] * 2),
]


# -- unit tests ----------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()


def test_reshape_bad_size_names_node_and_sizes():
    x = tf.placeholder(tf.float32, [2, 3])
    with pytest.raises(ValueError, match=r"Reshape 'flat'.*6 elements to shape \[4\]"):
        tf.reshape(x, [4], name="flat")
    with pytest.raises(ValueError, match="at most one dimension may be -1"):
        tf.reshape(x, [-1, -1])


def test_reshape_bad_size_at_run_time_names_node():
    x = tf.placeholder(tf.float32, [None, 3])
    y = tf.reshape(x, [-1, 4], name="regroup")
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match="regroup.*6 elements"):
        sess.run(y, {x: np.zeros((2, 3))})


def test_static_shapes_and_folding():
    x = tf.placeholder(tf.float32, [None, 4, 5])
    assert tf.reshape(x, [-1, 20]).shape.as_list() == [None, 20]
    assert tf.concat([x, x], -1).shape.as_list() == [None, 4, 10]
    assert x[:, 1:, ::2].shape.as_list() == [None, 3, 3]
    assert x[0].shape.as_list() == [4, 5]
    assert tf.transpose(x).shape.as_list() == [5, 4, None]
    from tfplus.framework import constant_value
    assert constant_value(tf.shape(x)) is None
    np.testing.assert_array_equal(constant_value(tf.shape(x[0])), [4, 5])
    assert constant_value(tf.size(x[0])) == 20 and constant_value(tf.rank(x)) == 3


def test_shape_fn_errors():
    x = tf.zeros([2, 3])
    with pytest.raises(ValueError, match="same rank"):
        tf.concat([x, tf.zeros([2])], 0)
    with pytest.raises(ValueError, match="dimension 0"):
        tf.concat([x, tf.zeros([3, 3])], 1)
    with pytest.raises(ValueError, match="cannot squeeze dim 1"):
        tf.squeeze(x, [1])
    with pytest.raises(ValueError, match="not a permutation"):
        tf.transpose(x, [0, 0])
    with pytest.raises(ValueError, match="out of bounds"):
        x[5]
    with pytest.raises(TypeError, match="tf.gather"):
        x[[0, 1]]


def test_aliasing_ops_share_the_input_buffer():
    from tfplus.registry import OPS
    for t in ("Reshape", "Squeeze", "ExpandDims", "StopGradient", "Identity"):
        assert OPS[t].aliases == {0: 0}, t


def test_unstack_needs_a_known_size():
    with pytest.raises(ValueError, match="pass num"):
        tf.unstack(tf.placeholder(tf.float32, [None, 2]))


def test_stop_gradient_blocks_the_gradient():
    x = tf.placeholder(tf.float32, [3])
    gx, gy = tf.gradients(tf.reduce_sum(tf.stop_gradient(x) * x), [x, tf.stop_gradient(x)])
    with tf.Session() as sess:
        # only the second factor contributes
        np.testing.assert_array_equal(sess.run(gx, {x: [1.0, 2.0, 3.0]}), [1.0, 2.0, 3.0])
