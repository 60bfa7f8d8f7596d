"""Op-table cases for math ops (tfplus.ops.math_ops), and unit tests of shape-function errors and TF's integer
semantics."""
import numpy as np
import pytest
from optable import Case
from scipy import special

import tfplus as tf
from tfplus.framework import apply_op
from tfplus.ops import math_ops

FLOAT = ("float32", "float64")
INT = ("int32", "int64")
ALL = FLOAT + INT


def positive(shape, lo=0.5):
    """Values in [lo, lo + 1.5): away from the poles of log, sqrt, 1/x."""
    return lambda rng, dt: (lo + 1.5 * rng.random(shape)).astype(dt)


def distinct(shape):
    """Distinct values (no ties for max/min/argmax), 0.1 apart so finite differences never reorder them."""
    n = int(np.prod(shape))
    return lambda rng, dt: (rng.permutation(n).reshape(shape) * 0.1 - 0.05 * n).astype(dt)


def ints(shape, lo=-5, hi=6, dtype=None):
    return lambda rng, dt: rng.integers(lo, hi, shape).astype(dtype or dt)


def nonzero_ints(shape):
    return lambda rng, dt: (rng.integers(1, 6, shape) * rng.choice([-1, 1], shape)).astype(dt)


def bools(shape):
    return lambda rng, dt: rng.random(shape) < 0.5


def away_from_ints(shape):
    """Values whose fractional part is in [0.2, 0.8]: floor/ceil/round are smooth (flat) there."""
    return lambda rng, dt: (rng.integers(-3, 4, shape) + 0.2 + 0.6 * rng.random(shape)).astype(dt)


def separated(shape, sign=1):
    """Two inputs that never tie: x = y + sign * (0.2 .. 1.0)."""
    def make(rng, dt):
        y = rng.standard_normal(shape)
        return [(y + sign * (0.2 + 0.8 * rng.random(shape))).astype(dt), y.astype(dt)]
    return make


def _int_mean(x, axis=None, keepdims=False):
    total = x.astype(np.int64).sum(axis=axis, keepdims=keepdims)
    count = x.size // max(total.size, 1)
    return (np.sign(total) * (np.abs(total) // count)).astype(x.dtype)


CASES = [
    # -- binary arithmetic, with broadcasting --------------------------------------------------------------
    Case("add", lambda x, y: tf.add(x, y), inputs=[(2, 3), (2, 3)], ref=np.add, dtypes=ALL, grad=True),
    Case("add_bcast_row", lambda x, y: x + y, inputs=[(3, 4), (4,)], ref=np.add),
    Case("add_bcast_both", lambda x, y: x + y, inputs=[(3, 1, 5), (4, 1)], ref=np.add),
    Case("add_scalar_const", lambda x: 2.5 + x, inputs=[(3,)], ref=lambda x: 2.5 + x),
    # Add: what GraphDefs of TensorFlow before 1.15 hold (tf.add builds AddV2 now, as TF's does)
    Case("add_v1_node", lambda x, y: apply_op("Add", [x, y]), inputs=[(2, 3), (2, 3)], ref=np.add, dtypes=ALL,
         grad=True),
    Case("add_v2", lambda x, y: math_ops.add_v2(x, y), inputs=[(2, 1), (1, 3)], ref=np.add),
    Case("add_v2_same_shape", lambda x, y: math_ops.add_v2(x, y), inputs=[(2, 3), (2, 3)], ref=np.add),
    Case("add_dynamic", lambda x, y: x + y, inputs=[(2, 3), (3,)], ref=np.add, static_shapes=False),
    Case("add_dynamic_bcast_1", lambda x, y: x + y, inputs=[(2, 1, 3), (4, 1)], ref=np.add,
         static_shapes=False),
    Case("subtract", lambda x, y: tf.subtract(x, y), inputs=[(2, 3), (2, 1)], ref=np.subtract, dtypes=ALL),
    Case("rsub", lambda x: 1.0 - x, inputs=[(4,)], ref=lambda x: 1 - x),
    Case("multiply", lambda x, y: x * y, inputs=[(2, 3, 4), (3, 1)], ref=np.multiply),
    Case("multiply_int", lambda x, y: x * y, inputs=[(2, 3), (3,)], ref=np.multiply, dtypes=INT, grad=False),
    Case("multiply_dynamic", lambda x, y: x * y, inputs=[(2, 3), (1, 3)], ref=np.multiply,
         static_shapes=False),
    Case("divide", lambda x, y: x / y, inputs=[(2, 3), positive((3,))], ref=np.divide),
    Case("divide_bcast", lambda x, y: tf.divide(x, y), inputs=[positive((2, 1)), positive((3,))],
         ref=np.divide),
    Case("rtruediv", lambda x: 2.0 / x, inputs=[positive((3,))], ref=lambda x: 2 / x),
    Case("truediv_int32", lambda x, y: tf.truediv(x, y), inputs=[ints((5,)), nonzero_ints((5,))],
         ref=lambda x, y: x.astype(np.float64) / y, dtypes=("int32",), grad=False),
    Case("realdiv", lambda x, y: math_ops.realdiv(x, y), inputs=[(3,), positive((3,))], ref=np.divide),
    Case("floordiv_int", lambda x, y: tf.floordiv(x, y), inputs=[ints((6,)), nonzero_ints((6,))],
         ref=np.floor_divide, dtypes=INT, grad=False),
    Case("floordiv_float", lambda x, y: tf.floordiv(x, y), inputs=[(6,), positive((6,))], ref=np.floor_divide,
         grad=False),
    Case("div_int", lambda x, y: tf.div(x, y), inputs=[ints((6,)), nonzero_ints((6,))], ref=np.floor_divide,
         dtypes=INT, grad=False),
    Case("floormod_int", lambda x, y: tf.floormod(x, y), inputs=[ints((6,)), nonzero_ints((6,))], ref=np.mod,
         dtypes=INT, grad=False),
    Case("floormod_float", lambda x, y: tf.mod(x, y), make=lambda rng, dt: [
        (rng.integers(-3, 4, (5,)) * 2.0 + 0.3 + 1.4 * rng.random(5)).astype(dt), np.full(5, 2.0, dt)],
        ref=np.mod),
    Case("pow", lambda x, y: tf.pow(x, y), inputs=[positive((2, 3)), (2, 3)], ref=np.power),
    Case("pow_operator_const", lambda x: x ** 3, inputs=[(4,)], ref=lambda x: x ** 3, grad=[0]),
    Case("pow_negative_base", lambda x, y: tf.pow(x, y), make=lambda rng, dt: [
        -positive((4,))(rng, dt), np.array([1.0, 2.0, 3.0, 2.0], dt)], ref=np.power, grad=[0]),
    Case("pow_int", lambda x, y: tf.pow(x, y), inputs=[ints((4,)), ints((4,), 0, 4)], ref=np.power,
         dtypes=INT, grad=False),
    Case("maximum", lambda x, y: tf.maximum(x, y), make=separated((2, 3)), ref=np.maximum),
    Case("maximum_other_side", lambda x, y: tf.maximum(x, y), make=separated((2, 3), -1), ref=np.maximum),
    Case("maximum_bcast", lambda x, y: tf.maximum(x, y), inputs=[distinct((3, 4)), lambda rng, dt: np.array(
        [0.07, -0.33, 0.41, 0.02], dt)], ref=np.maximum),
    Case("minimum", lambda x, y: tf.minimum(x, y), make=separated((4,)), ref=np.minimum),
    Case("minimum_bcast", lambda x, y: tf.minimum(x, y), inputs=[distinct((2, 3)), lambda rng, dt: np.array(
        0.07, dt)], ref=np.minimum),
    Case("maximum_int", lambda x, y: tf.maximum(x, y), inputs=[(3, 4), (4,)], ref=np.maximum, dtypes=INT,
         grad=False),
    Case("clip_by_value", lambda x: tf.clip_by_value(x, -0.45, 0.55), inputs=[distinct((3, 4))],
         ref=lambda x: np.clip(x, -0.45, 0.55)),
    Case("squared_difference", lambda x, y: tf.squared_difference(x, y), inputs=[(2, 3), (3,)],
         ref=lambda x, y: (x - y) ** 2),
    Case("squared_difference_same_shape", lambda x, y: tf.squared_difference(x, y), inputs=[(2, 3), (2, 3)],
         ref=lambda x, y: (x - y) ** 2),
    Case("add_n", lambda a, b, c: tf.add_n([a, b, c]), inputs=[(2, 3)] * 3, ref=lambda a, b, c: a + b + c,
         dtypes=ALL),
    Case("add_n_one", lambda a: tf.add_n([a]), inputs=[(3,)], ref=lambda a: a),
    # -- matmul ----------------------------------------------------------------------------------------------
    Case("matmul", lambda a, b: tf.matmul(a, b), inputs=[(3, 4), (4, 5)], ref=np.matmul),
    Case("matmul_ta", lambda a, b: tf.matmul(a, b, transpose_a=True), inputs=[(4, 3), (4, 5)],
         ref=lambda a, b: a.T @ b),
    Case("matmul_tb", lambda a, b: tf.matmul(a, b, transpose_b=True), inputs=[(3, 4), (5, 4)],
         ref=lambda a, b: a @ b.T),
    Case("matmul_ta_tb", lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
         inputs=[(4, 3), (5, 4)], ref=lambda a, b: a.T @ b.T),
    Case("matmul_operator", lambda a, b: a @ b, inputs=[(1, 3), (3, 2)], ref=np.matmul),
    Case("matmul_int", lambda a, b: tf.matmul(a, b), inputs=[(2, 3), (3, 2)], ref=np.matmul, dtypes=INT,
         grad=False),
    Case("matmul_dynamic", lambda a, b: tf.matmul(a, b), inputs=[(3, 2), (2, 4)], ref=np.matmul,
         static_shapes=False),
    # -- unary -----------------------------------------------------------------------------------------------
    Case("negative", lambda x: -x, inputs=[(2, 3)], ref=np.negative, dtypes=ALL),
    Case("abs", lambda x: abs(x), inputs=[(2, 3)], ref=np.abs, dtypes=ALL),
    Case("sign", lambda x: tf.sign(x), inputs=[(7,)], ref=np.sign, dtypes=ALL),
    Case("square", lambda x: tf.square(x), inputs=[(2, 3)], ref=np.square, dtypes=ALL),
    Case("exp", lambda x: tf.exp(x), inputs=[(2, 3)], ref=np.exp),
    Case("log", lambda x: tf.log(x), inputs=[positive((2, 3))], ref=np.log),
    Case("log1p", lambda x: tf.log1p(x), inputs=[positive((5,), -0.4)], ref=np.log1p),
    Case("sqrt", lambda x: tf.sqrt(x), inputs=[positive((2, 3))], ref=np.sqrt),
    Case("rsqrt", lambda x: tf.rsqrt(x), inputs=[positive((2, 3))], ref=lambda x: 1 / np.sqrt(x)),
    Case("reciprocal", lambda x: tf.reciprocal(x), inputs=[positive((4,))], ref=lambda x: 1 / x),
    Case("sin", lambda x: tf.sin(x), inputs=[(2, 3)], ref=np.sin),
    Case("cos", lambda x: tf.cos(x), inputs=[(2, 3)], ref=np.cos),
    Case("erf", lambda x: tf.erf(x), inputs=[(2, 3)], ref=special.erf),
    Case("floor", lambda x: tf.floor(x), inputs=[away_from_ints((2, 3))], ref=np.floor),
    Case("ceil", lambda x: tf.ceil(x), inputs=[away_from_ints((2, 3))], ref=np.ceil),
    Case("round", lambda x: tf.round(x),
         inputs=[lambda rng, dt: np.array([-2.5, -1.5, -0.4, 0.5, 1.5, 2.6], dt)],
         ref=np.round, grad=False),  # halves on purpose: not smooth there
    # -- cast ------------------------------------------------------------------------------------------------
    Case("cast_f_to_f", lambda x: tf.cast(x, tf.float64), inputs=[(2, 3)], ref=lambda x: x.astype(np.float64),
         dtypes=("float32",), grad=False),
    Case("cast_float_to_int_truncates", lambda x: tf.cast(x, tf.int32),
         inputs=[lambda rng, dt: np.array([-2.7, -1.2, -0.5, 0.0, 0.5, 1.9, 3.999], dt)],
         ref=lambda x: np.trunc(x).astype(np.int32), grad=False),
    Case("cast_int_to_float", lambda x: tf.to_float(x), inputs=[(5,)], ref=lambda x: x.astype(np.float32),
         dtypes=INT, grad=False),
    Case("cast_to_bool", lambda x: tf.cast(x, tf.bool), inputs=[ints((6,), -1, 2)], ref=lambda x: x != 0,
         dtypes=ALL, grad=False),
    Case("cast_from_bool", lambda x: tf.cast(x, tf.float32), inputs=[bools((5,))],
         ref=lambda x: x.astype(np.float32), dtypes=("bool",), grad=False),
    Case("saturate_cast", lambda x: tf.saturate_cast(x * 1e3, tf.int8), inputs=[(6,)],
         ref=lambda x: np.trunc(np.clip(x * 1e3, -128, 127)).astype(np.int8), dtypes=("float64",),
         grad=False),
    # -- comparisons and logic -------------------------------------------------------------------------------
    Case("equal", lambda x, y: tf.equal(x, y), inputs=[ints((3, 4), 0, 3), ints((4,), 0, 3)], ref=np.equal,
         dtypes=ALL, grad=False),
    Case("equal_bool", lambda x, y: tf.equal(x, y), inputs=[bools((5,)), bools((5,))], ref=np.equal,
         dtypes=("bool",), grad=False),
    Case("not_equal", lambda x, y: tf.not_equal(x, y), inputs=[ints((6,), 0, 3), ints((6,), 0, 3)],
         ref=np.not_equal, dtypes=ALL, grad=False),
    Case("less", lambda x, y: x < y, inputs=[(2, 3), (3,)], ref=np.less, dtypes=ALL, grad=False),
    Case("less_equal", lambda x, y: x <= y, inputs=[ints((6,), 0, 3), ints((6,), 0, 3)], ref=np.less_equal,
         dtypes=ALL, grad=False),
    Case("greater", lambda x: x > 0.0, inputs=[(2, 3)], ref=lambda x: x > 0, grad=False),
    Case("greater_equal", lambda x, y: x >= y, inputs=[ints((6,), 0, 3), ints((6,), 0, 3)],
         ref=np.greater_equal, dtypes=ALL, grad=False),
    Case("logical_and", lambda x, y: tf.logical_and(x, y), inputs=[bools((2, 3)), bools((3,))],
         ref=np.logical_and, dtypes=("bool",), grad=False),
    Case("logical_or", lambda x, y: tf.logical_or(x, y), inputs=[bools((4,)), bools((4,))], ref=np.logical_or,
         dtypes=("bool",), grad=False),
    Case("logical_not", lambda x: tf.logical_not(x), inputs=[bools((4,))], ref=np.logical_not,
         dtypes=("bool",), grad=False),
    Case("logical_xor", lambda x, y: tf.logical_xor(x, y), inputs=[bools((6,)), bools((6,))],
         ref=np.logical_xor, dtypes=("bool",), grad=False),
    # -- select / where / range ------------------------------------------------------------------------------
    Case("where_select", lambda c, x, y: tf.where(c, x, y), inputs=[bools((2, 3)), (2, 3), (2, 3)],
         ref=np.where, grad=[1, 2]),
    Case("where_select_int", lambda c, x, y: tf.where(c, x, y), inputs=[bools((5,)), (5,), (5,)],
         ref=np.where, dtypes=INT, grad=False),
    Case("where_select_vector_cond", lambda c, x, y: tf.where(c, x, y), inputs=[bools((3,)), (3, 2), (3, 2)],
         ref=lambda c, x, y: np.where(c[:, None], x, y), grad=[1, 2]),
    Case("where_indices", lambda c: tf.where(c), inputs=[bools((3, 4))], ref=np.argwhere, dtypes=("bool",),
         grad=False),
    Case("range", lambda: tf.range(5), inputs=[], ref=lambda: np.arange(5, dtype=np.int32), dtypes=("int32",),
         grad=False),
    Case("range_start_delta", lambda: tf.range(10, 1, -3), inputs=[], ref=lambda: np.arange(10, 1, -3,
         dtype=np.int32), dtypes=("int32",), grad=False),
    Case("range_float", lambda: tf.range(1.0, 2.0, 0.25), inputs=[], ref=lambda: np.arange(1, 2, 0.25,
         dtype=np.float32), dtypes=("float32",), grad=False),
    Case("range_tensor_limit", lambda n: tf.range(n), inputs=[lambda rng, dt: np.array(4, np.int32)],
         ref=lambda n: np.arange(n, dtype=np.int32), dtypes=("int32",), grad=False),
    # -- reductions ------------------------------------------------------------------------------------------
    Case("reduce_sum_all", lambda x: tf.reduce_sum(x), inputs=[(2, 3, 4)], ref=np.sum, dtypes=ALL),
    Case("reduce_sum_axis", lambda x: tf.reduce_sum(x, axis=1, keepdims=True), inputs=[(2, 3, 4)],
         ref=lambda x: x.sum(1, keepdims=True)),
    Case("reduce_sum_neg_axes", lambda x: tf.reduce_sum(x, axis=[-1, 0]), inputs=[(2, 3, 5)],
         ref=lambda x: x.sum((0, 2)), dtypes=ALL),
    Case("reduce_sum_keep_dims_alias", lambda x: tf.reduce_sum(x, reduction_indices=[0], keep_dims=True),
         inputs=[(3, 2)], ref=lambda x: x.sum(0, keepdims=True)),
    Case("reduce_sum_empty_axes", lambda x: tf.reduce_sum(x, axis=[]), inputs=[(2, 3)], ref=lambda x: x),
    Case("reduce_sum_dynamic", lambda x: tf.reduce_sum(x, axis=0), inputs=[(3, 2)], ref=lambda x: x.sum(0),
         static_shapes=False),
    Case("reduce_sum_dynamic_keep", lambda x: tf.reduce_sum(x, axis=[0, 2], keepdims=True),
         inputs=[(2, 3, 2)], ref=lambda x: x.sum((0, 2), keepdims=True), static_shapes=False),
    Case("reduce_mean", lambda x: tf.reduce_mean(x, axis=0), inputs=[(3, 4)], ref=lambda x: x.mean(0)),
    Case("reduce_mean_all_keep", lambda x: tf.reduce_mean(x, keepdims=True), inputs=[(2, 3)],
         ref=lambda x: x.mean(keepdims=True)),
    Case("reduce_mean_dynamic", lambda x: tf.reduce_mean(x, axis=-1), inputs=[(2, 5)],
         ref=lambda x: x.mean(-1), static_shapes=False),
    Case("reduce_mean_int_truncates", lambda x: tf.reduce_mean(x, axis=1), inputs=[ints((3, 4), -9, 10)],
         ref=lambda x: _int_mean(x, 1), dtypes=INT, grad=False),
    Case("reduce_max", lambda x: tf.reduce_max(x, axis=1), inputs=[distinct((3, 4))], ref=lambda x: x.max(1),
         dtypes=ALL),
    Case("reduce_max_all_keep", lambda x: tf.reduce_max(x, keepdims=True), inputs=[distinct((2, 3))],
         ref=lambda x: x.max(keepdims=True)),
    Case("reduce_max_ties", lambda x: tf.reduce_max(x, axis=0),
         inputs=[lambda rng, dt: np.array([[1.0, 2.0], [1.0, 0.5], [0.2, 2.0]], dt)], ref=lambda x: x.max(0),
         grad=False),
    Case("reduce_min", lambda x: tf.reduce_min(x, axis=[0, 2], keepdims=True), inputs=[distinct((2, 3, 2))],
         ref=lambda x: x.min((0, 2), keepdims=True), dtypes=ALL),
    Case("reduce_any", lambda x: tf.reduce_any(x, axis=1), inputs=[bools((3, 2))], ref=lambda x: x.any(1),
         dtypes=("bool",), grad=False),
    Case("reduce_all", lambda x: tf.reduce_all(x, keepdims=True), inputs=[bools((2, 2))],
         ref=lambda x: x.all(keepdims=True), dtypes=("bool",), grad=False),
    Case("count_nonzero", lambda x: tf.count_nonzero(x, axis=0), inputs=[ints((4, 3), -1, 2)],
         ref=lambda x: np.count_nonzero(x, 0).astype(np.int64), dtypes=ALL, grad=False),
    Case("argmax", lambda x: tf.argmax(x, axis=1), inputs=[distinct((3, 4))], ref=lambda x: x.argmax(1),
         dtypes=ALL, grad=False),
    Case("argmax_int32_neg_axis", lambda x: tf.argmax(x, -2, output_type=tf.int32), inputs=[distinct((3, 4))],
         ref=lambda x: x.argmax(0).astype(np.int32), grad=False),
    Case("argmax_ties_first", lambda x: tf.argmax(x, 0),
         inputs=[lambda rng, dt: np.array([1, 3, 3, 0], dt)], ref=lambda x: np.int64(1), dtypes=ALL,
         grad=False),
    Case("argmin", lambda x: tf.argmin(x, axis=0), inputs=[distinct((3, 4))], ref=lambda x: x.argmin(0),
         dtypes=ALL, grad=False),
    Case("cumsum", lambda x: tf.cumsum(x, axis=1), inputs=[(2, 4)], ref=lambda x: np.cumsum(x, 1),
         dtypes=ALL),
    Case("cumsum_exclusive_reverse", lambda x: tf.cumsum(x, 0, exclusive=True, reverse=True), inputs=[(4, 2)],
         ref=lambda x: np.flip(np.cumsum(np.flip(x, 0), 0), 0) - x),
    # -- compositions whose gradients exercise several rules at once -----------------------------------------
    Case("mse_like", lambda x, w, y: tf.reduce_mean(tf.square(tf.matmul(x, w) - y)),
         inputs=[(4, 3), (3, 1), (4, 1)], ref=lambda x, w, y: np.mean((x @ w - y) ** 2)),
    Case("fan_out", lambda x: x * x + tf.exp(x) * x, inputs=[(3,)], ref=lambda x: x * x + np.exp(x) * x),
]


# -- unit tests: shape-function errors and TF's integer semantics --------------------------------------------
@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()


def test_matmul_inner_dim_mismatch_names_node_and_shapes():
    a = tf.placeholder(tf.float32, [2, 3])
    b = tf.placeholder(tf.float32, [4, 5])
    with pytest.raises(ValueError, match=r"MatMul 'scores'.*\(2, 3\).*\(4, 5\)"):
        tf.matmul(a, b, name="scores")


def test_matmul_rank_and_dtype_errors():
    with pytest.raises(ValueError, match="matrices"):
        tf.matmul(tf.zeros([2, 3, 4]), tf.zeros([5, 2]))  # a batched product whose inner dims differ
    with pytest.raises(TypeError, match="one dtype"):
        tf.matmul(tf.zeros([2, 3]), tf.zeros([3, 2], tf.float64))


def test_broadcast_mismatch_names_shapes():
    with pytest.raises(ValueError, match=r"AddV2 'add'.*\(2, 3\) and \(4,\)"):
        tf.add(tf.zeros([2, 3]), tf.zeros([4]), name="add")


def test_float_only_ops_reject_ints_and_fractional_constants():
    with pytest.raises(TypeError, match="Exp .*int32"):
        tf.exp(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="fraction"):
        tf.constant([1, 2]) + 1.5


def test_reduction_axis_out_of_range():
    with pytest.raises(ValueError, match="axis 2 is out of range .* rank 2"):
        tf.reduce_sum(tf.zeros([2, 3]), axis=2)


def test_integer_division_and_mean_follow_tf():
    x = tf.constant([-7, 7, 5])
    y = tf.constant([2, 2, -2])
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(tf.floordiv(x, y)), [-4, 3, -3])
        quotient = sess.run(x / y)
        assert quotient.dtype == np.float64
        np.testing.assert_allclose(quotient, [-3.5, 3.5, -2.5])
        assert sess.run(tf.reduce_mean(tf.constant([-3, 0]))) == -1  # truncates toward zero
        np.testing.assert_array_equal(sess.run(tf.cast(tf.constant([-1.7, 1.7]), tf.int32)), [-1, 1])


def test_static_shapes_fold_for_gradients():
    """With fully known shapes the broadcast gradient needs no Shape/BroadcastGradientArgs nodes at all."""
    x = tf.placeholder(tf.float32, [2, 3])
    b = tf.placeholder(tf.float32, [3])
    gx, gb = tf.gradients(tf.reduce_sum(x + b), [x, b])
    types = {op.type for op in tf.get_default_graph().get_operations()}
    assert "BroadcastGradientArgs" not in types and "Shape" not in types
    assert gb.shape.as_list() == [3] and gx.shape.as_list() == [2, 3]


def test_gradient_of_dynamic_broadcast_uses_run_time_shapes():
    x = tf.placeholder(tf.float32, [None, None])
    b = tf.placeholder(tf.float32, [None])
    [gb] = tf.gradients(tf.reduce_sum((x + b) * 2.0), [b])
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(gb, {x: np.ones((4, 3)), b: np.ones(3)}), [8.0, 8.0, 8.0])
        np.testing.assert_allclose(sess.run(gb, {x: np.ones((2, 1)), b: np.ones(5)}), [4.0] * 5)


def test_cast_gradient_casts_back_between_floats_and_stops_at_ints():
    x = tf.placeholder(tf.float32, [3])
    y = tf.reduce_sum(tf.cast(x, tf.float64) * 2.0) + tf.cast(tf.reduce_sum(tf.cast(x, tf.int32)), tf.float64)
    [g] = tf.gradients(y, [x])
    assert g.dtype == tf.float32
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(g, {x: [0.5, 1.5, 2.5]}), [2.0, 2.0, 2.0])
