"""A differential sweep of the ops tfplus already had against TensorFlow (the `tf1` oracle): each elementwise op,
reduction and shape op of `tf`, `tf.math` and `tf.nn`, called on other shapes and dtypes than the op table's
(float16/32/64, int32/64, bool where TF takes them), with broadcasting, negative axes, keepdims, empty tensors
and scalars; values, dtypes, static shapes and whether it raises must be TensorFlow's. Also the composites that
tfplus.ops.special_math_ops adds on top (truncatediv, confusion_matrix, unravel_index, ...)."""
import numpy as np
import pytest

import tfplus as tf

FLOATS = ("float16", "float32", "float64")
INTS = ("int32", "int64")


def _value(rng, shape, dtype, positive=False, nonzero=False):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INTS:
        lo = 1 if positive else -5
        v = rng.integers(lo, 6, shape)
        if nonzero:
            v[v == 0] = 3
        return v.astype(dtype)
    v = rng.standard_normal(shape) * 2
    if positive:
        v = np.abs(v) + 0.5
    return v.astype(dtype)


def _run(mod, build, arrays):
    """(output values, dtypes, static shapes) of build(mod, *placeholders), or the exception it raised."""
    g = mod.Graph()
    try:
        with g.as_default():
            phs = [mod.placeholder(mod.as_dtype(a.dtype.name), a.shape) for a in arrays]
            outs = build(mod, *phs)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            shapes = [o.shape.as_list() if o.shape.ndims is not None else None for o in outs]
            with mod.Session(graph=g) as s:
                values = s.run(outs, dict(zip(phs, arrays)))
        return values, [o.dtype.name for o in outs], shapes
    except Exception as e:  # noqa: BLE001  (the sweep compares *whether* each side raises)
        return e


def _compare(tf1, build, arrays, what):
    ours, theirs = _run(tf, build, arrays), _run(tf1, build, arrays)
    if isinstance(theirs, Exception) and "OpKernel" in str(theirs) and not isinstance(ours, Exception):
        return  # TF's CPU has no kernel for this dtype (Cumsum of half, ...): tfplus computing it is no error
    if isinstance(theirs, Exception) or isinstance(ours, Exception):
        assert isinstance(ours, Exception) == isinstance(theirs, Exception), \
            f"{what}: tfplus {'raised ' + repr(ours) if isinstance(ours, Exception) else 'did not raise'}; " \
            f"TensorFlow {'raised ' + repr(theirs)[:300] if isinstance(theirs, Exception) else 'did not raise'}"
        return
    (got, got_dtypes, got_shapes), (want, want_dtypes, want_shapes) = ours, theirs
    assert got_dtypes == want_dtypes, f"{what}: dtypes {got_dtypes} vs TensorFlow's {want_dtypes}"
    assert got_shapes == want_shapes, f"{what}: static shapes {got_shapes} vs TensorFlow's {want_shapes}"
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{what}: output {k} has shape {a.shape}, TensorFlow's {b.shape}"
        if b.dtype.kind == "f":
            tol = 2e-3 if b.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(a, b, err_msg=what)


# -- elementwise ----------------------------------------------------------------------------------------------
UNARY = {
    "abs": FLOATS + INTS, "negative": FLOATS + INTS, "sign": FLOATS + INTS, "square": FLOATS + INTS,
    "sqrt": FLOATS, "rsqrt": FLOATS, "exp": FLOATS, "log": FLOATS, "log1p": FLOATS, "sin": FLOATS, "cos": FLOATS,
    "tan": FLOATS, "floor": FLOATS, "ceil": FLOATS, "round": FLOATS + INTS, "reciprocal": FLOATS, "erf": FLOATS,
    "sigmoid": FLOATS, "tanh": FLOATS, "nn.relu": FLOATS, "nn.relu6": FLOATS, "nn.elu": FLOATS,
    "nn.softplus": FLOATS, "nn.softsign": FLOATS, "is_nan": FLOATS, "is_finite": FLOATS, "lgamma": FLOATS,
    "expm1": FLOATS, "math.log_sigmoid": FLOATS, "logical_not": ("bool",), "rint": FLOATS, "atan": FLOATS,
    "math.reciprocal_no_nan": FLOATS, "math.softplus": FLOATS, "zeros_like": FLOATS + INTS + ("bool",),
    "ones_like": FLOATS + INTS + ("bool",), "identity": FLOATS + INTS + ("bool",), "stop_gradient": FLOATS,
    "to_float": INTS + FLOATS, "to_int32": FLOATS + INTS, "nn.l2_normalize": FLOATS, "math.cumsum": FLOATS + INTS,
    "math.cumprod": FLOATS + INTS, "nn.softmax": FLOATS, "nn.log_softmax": FLOATS,
}
SHAPES = [(), (0,), (2, 3)]


def _attr(mod, dotted):
    obj = mod
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_ops_match_tensorflow(tf1, name):
    rng = np.random.default_rng(0)
    for dtype in UNARY[name]:
        for shape in SHAPES:
            x = _value(rng, shape, dtype)
            _compare(tf1, lambda m, a: _attr(m, name)(a), [x], f"tf.{name} of {dtype}{list(shape)}")


BINARY = {
    "add": FLOATS + INTS, "subtract": FLOATS + INTS, "multiply": FLOATS + INTS, "divide": FLOATS + INTS,
    "truediv": FLOATS + INTS, "floordiv": FLOATS + INTS, "floormod": FLOATS + INTS, "mod": FLOATS + INTS,
    "maximum": FLOATS + INTS, "minimum": FLOATS + INTS, "pow": FLOATS, "squared_difference": FLOATS + INTS,
    "equal": FLOATS + INTS + ("bool",), "not_equal": FLOATS + INTS + ("bool",), "less": FLOATS + INTS,
    "less_equal": FLOATS + INTS, "greater": FLOATS + INTS, "greater_equal": FLOATS + INTS,
    "logical_and": ("bool",), "logical_or": ("bool",), "logical_xor": ("bool",), "div": FLOATS + INTS,
    "realdiv": FLOATS, "div_no_nan": FLOATS, "atan2": FLOATS, "math.xlogy": FLOATS, "math.xdivy": FLOATS,
    "truncatediv": INTS, "truncatemod": FLOATS + INTS, "math.multiply_no_nan": FLOATS,
}
PAIRS = [((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2,)), ((0, 3), (3,)), ((2, 3), (4,)), ((3,), ())]


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_ops_broadcast_like_tensorflow(tf1, name):
    rng = np.random.default_rng(1)
    divides = name in ("divide", "truediv", "floordiv", "floormod", "mod", "div", "truncatediv", "truncatemod")
    for dtype in BINARY[name]:
        for sx, sy in PAIRS:
            x, y = _value(rng, sx, dtype), _value(rng, sy, dtype, nonzero=divides)
            _compare(tf1, lambda m, a, b: _attr(m, name)(a, b), [x, y], f"tf.{name}({dtype}{list(sx)}, {list(sy)})")


def test_binary_ops_take_python_scalars_like_tensorflow(tf1):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for build in (lambda m, a: a * 2, lambda m, a: 2 - a, lambda m, a: a / 4, lambda m, a: 1 / (a + 1),
                  lambda m, a: a // 2, lambda m, a: a % 4, lambda m, a: -a, lambda m, a: a ** 2,
                  lambda m, a: m.maximum(a, 3), lambda m, a: m.pow(2.0, a), lambda m, a: abs(a - 3)):
        _compare(tf1, build, [x], "python scalar operand")


# -- reductions -----------------------------------------------------------------------------------------------
REDUCTIONS = {
    "reduce_sum": FLOATS + INTS, "reduce_mean": FLOATS + INTS, "reduce_max": FLOATS + INTS,
    "reduce_min": FLOATS + INTS, "reduce_prod": FLOATS + INTS, "reduce_any": ("bool",), "reduce_all": ("bool",),
    "reduce_logsumexp": FLOATS, "math.reduce_std": ("float32", "float64"),
    "math.reduce_variance": ("float32", "float64"), "math.reduce_euclidean_norm": FLOATS,
    "count_nonzero": FLOATS + INTS + ("bool",),
}
AXES = [None, -1, [0, -1]]


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_match_tensorflow(tf1, name):
    rng = np.random.default_rng(2)
    for dtype in REDUCTIONS[name]:
        for shape in ((2, 3), (0, 3), (4,)):
            x = _value(rng, shape, dtype)
            for axis in AXES:
                for keepdims in (False, True):
                    _compare(tf1, lambda m, a, ax=axis, kd=keepdims: _attr(m, name)(a, axis=ax, keepdims=kd), [x],
                             f"tf.{name}({dtype}{list(shape)}, axis={axis}, keepdims={keepdims})")


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_match_tensorflow(tf1, name):
    rng = np.random.default_rng(3)
    for dtype in FLOATS + INTS:
        for shape, axis in (((2, 3), 0), ((2, 3), -1), ((4,), 0), ((2, 3), 2)):
            x = _value(rng, shape, dtype)
            for out in ("int32", "int64"):
                _compare(tf1, lambda m, a, ax=axis, o=out: _attr(m, name)(a, ax, output_type=_attr(m, o)), [x],
                         f"tf.{name}({dtype}{list(shape)}, {axis}, {out})")


# -- shape ops ------------------------------------------------------------------------------------------------
SHAPE_OPS = {
    "reshape": lambda m, a: m.reshape(a, [-1]),
    "reshape_split": lambda m, a: m.reshape(a, [3, -1]),
    "transpose": lambda m, a: m.transpose(a),
    "transpose_perm": lambda m, a: m.transpose(a, [1, 0, 2]),
    "expand_dims_neg": lambda m, a: m.expand_dims(a, -1),
    "squeeze_axis": lambda m, a: m.squeeze(m.expand_dims(a, 1), [1]),
    "concat_neg": lambda m, a: m.concat([a, a], -1),
    "stack_neg": lambda m, a: m.stack([a, a], axis=-1),
    "unstack": lambda m, a: m.unstack(a, axis=-1),
    "tile": lambda m, a: m.tile(a, [2, 1, 1]),
    "pad": lambda m, a: m.pad(a, [[1, 0], [0, 2], [0, 0]]),
    "pad_reflect": lambda m, a: m.pad(a, [[0, 0], [1, 1], [1, 1]], mode="REFLECT"),
    "slice": lambda m, a: m.slice(a, [0, 1, 0], [-1, 1, 2]),
    "strided_slice": lambda m, a: a[:, ::-1, 1:],
    "strided_newaxis": lambda m, a: a[..., None, 0],
    "gather_neg_axis": lambda m, a: m.gather(a, [1, 0, 1], axis=-1),
    "gather_nd": lambda m, a: m.gather_nd(a, [[0, 1], [1, 2]]),
    "reverse": lambda m, a: m.reverse(a, [-1]),
    "split": lambda m, a: m.split(a, 2, axis=-1),
    "split_sizes": lambda m, a: m.split(a, [1, 2], axis=1),
    "one_hot": lambda m, a: m.one_hot(m.cast(m.abs(a[0, 0]), m.int32), 4),
    "cumsum_neg": lambda m, a: m.cumsum(a, -1, exclusive=True, reverse=True),
    "cumprod_neg": lambda m, a: m.math.cumprod(a, -1, exclusive=True),
    "top_k": lambda m, a: m.nn.top_k(a, 2),
    "where_v1_index": lambda m, a: m.where(a > 0),
    "where_v1_select": lambda m, a: m.where(a > 0, a, -a),
    "where_v1_rows": lambda m, a: m.where(m.constant([True, False]), a, -a),
    "where_v2_broadcast": lambda m, a: m.where_v2(a > 0, a, 0 * a[:1]),
    "clip_by_value": lambda m, a: m.clip_by_value(a, -0.5, 0.5),
    "boolean_mask": lambda m, a: m.boolean_mask(a, a[..., 0] > 0),
    "boolean_mask_axis": lambda m, a: m.boolean_mask(a, a[0] > 0, axis=1),
    "sequence_mask": lambda m, a: m.sequence_mask([1, 3, 2], 4),
    "shape_size_rank": lambda m, a: (m.shape(a), m.size(a), m.rank(a)),
    "broadcast_to": lambda m, a: m.broadcast_to(a[:, :1], [2, 3, 2]),
    "matrix_band_part": lambda m, a: m.matrix_band_part(a, 1, 0),
    "roll_neg": lambda m, a: m.roll(a, -1, -1),
    "space_to_depth": lambda m, a: m.space_to_depth(m.reshape(a[:, :2], [1, 2, 2, 2]), 2),
    "reverse_sequence": lambda m, a: m.reverse_sequence(a, [1, 3], seq_axis=1, batch_axis=0),
}


@pytest.mark.parametrize("name", list(SHAPE_OPS))
def test_shape_ops_match_tensorflow(tf1, name):
    rng = np.random.default_rng(4)
    for dtype in ("float16", "float32", "float64", "int32", "int64"):
        x = _value(rng, (2, 3, 2), dtype)
        _compare(tf1, SHAPE_OPS[name], [x], f"{name} of {dtype}")


def test_clip_by_global_norm_matches_tensorflow(tf1):
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(4, np.float32)
    _compare(tf1, lambda m, x, y: m.clip_by_global_norm([x, y], 2.0)[0] + [m.clip_by_global_norm([x, y], 2.0)[1]],
             [a, b], "clip_by_global_norm")


# -- the composites added with the special-math ops ------------------------------------------------------------
COMPOSITES = {
    "truncatediv_int": lambda m, a: m.truncatediv(m.cast(a * 3, m.int32), 2),
    "truncatemod": lambda m, a: m.truncatemod(a * 3, 2.0),
    "erfcinv": lambda m, a: m.math.erfcinv(m.sigmoid(a)),
    "cumulative_logsumexp": lambda m, a: m.math.cumulative_logsumexp(a, 1),
    "confusion_matrix": lambda m, a: m.math.confusion_matrix([0, 1, 2, 1], [0, 2, 2, 1]),
    "confusion_matrix_weights": lambda m, a: m.confusion_matrix([0, 1], [1, 1], num_classes=3, weights=[2.0, 3.0],
                                                                dtype=m.float32),
    "unravel_index": lambda m, a: (m.unravel_index([5, 7], [3, 4]), m.unravel_index(5, [3, 4])),
    "diag_part": lambda m, a: m.diag_part(a[:, :2]),
    "clip_by_average_norm": lambda m, a: m.clip_by_average_norm(a, 0.5),
    "accumulate_n": lambda m, a: m.accumulate_n([a, a]),
    "tensor_scatter_update": lambda m, a: m.tensor_scatter_update(a, [[1]], a[:1] * 2),
}


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_new_composites_match_tensorflow(tf1, name):
    x = _value(np.random.default_rng(5), (2, 3), "float32")
    _compare(tf1, COMPOSITES[name], [x], name)


NAMED = {
    "lgamma": lambda m, a, i: m.lgamma(a), "erfc": lambda m, a, i: m.erfc(a), "atan2": lambda m, a, i: m.atan2(a, a),
    "xlogy": lambda m, a, i: m.math.xlogy(a, a), "bessel_i0e": lambda m, a, i: m.math.bessel_i0e(a),
    "erfinv": lambda m, a, i: m.math.erfinv(a), "betainc": lambda m, a, i: m.math.betainc(a, a, a),
    "cumprod": lambda m, a, i: m.cumprod(a), "unique": lambda m, a, i: m.unique(i)[0],
    "unique_with_counts": lambda m, a, i: m.unique_with_counts(i)[2],
    "unsorted_segment_max": lambda m, a, i: m.unsorted_segment_max(a, i, 3),
    "segment_max": lambda m, a, i: m.segment_max(a, [0, 0, 1]), "roll": lambda m, a, i: m.roll(a, 1, 0),
    "histogram_fixed_width": lambda m, a, i: m.histogram_fixed_width(a, [0.0, 1.0], 3),
    "tensor_scatter_update": lambda m, a, i: m.tensor_scatter_update(a, [[0]], a[:1]),
    "polyval": lambda m, a, i: m.math.polyval([a, a], a), "lbeta": lambda m, a, i: m.math.lbeta(a),
    "truncatediv": lambda m, a, i: m.truncatediv(i, i), "cross": lambda m, a, i: m.linalg.cross(a, a),
    "set_diag": lambda m, a, i: m.linalg.set_diag(a, a[0]), "diag_part": lambda m, a, i: m.linalg.diag_part(a),
    "logdet": lambda m, a, i: m.linalg.logdet(a), "matvec": lambda m, a, i: m.linalg.matvec(a, a[0]),
    "einsum": lambda m, a, i: m.einsum("ij,jk->ik", a, a), "einsum_transposed": lambda m, a, i: m.einsum("ij->ji", a),
}


def test_default_node_names_are_tensorflows(tf1):
    """The tensor each new function returns has TF1's default name (its scope and op)."""
    for what, build in NAMED.items():
        names = []
        for mod in (tf, tf1):
            with mod.Graph().as_default():
                a, i = mod.placeholder(mod.float32, [3, 3]), mod.placeholder(mod.int32, [3])
                names.append(build(mod, a, i).name)
        assert names[0] == names[1], what
