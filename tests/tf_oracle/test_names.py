"""Default node names as TensorFlow 1 gives them: a graph built by the same code in TensorFlow (the tf1 oracle) and
in tfplus has the same node names, op types and inputs, so that scripts fetching by name (`"sub:0"`,
`get_tensor_by_name("add/y:0")`) run unchanged."""
from __future__ import annotations

import pytest

import tfplus as tf


def _inputs(t):
    x = t.placeholder(t.float32, [2, 3], name="x")
    i = t.placeholder(t.int32, [2, 3], name="i")
    b = t.placeholder(t.bool, [2], name="b")
    m = t.placeholder(t.float32, [3, 3], name="m")
    return x, i, b, m


# Each case builds ops from the placeholders (x float [2,3], i int32 [2,3], b bool [2], m float [3,3]) with `t`,
# the module under test (tensorflow.compat.v1 or tfplus), and no names of its own.
CASES = {
    "sub_const": lambda t, x, i, b, m: x - 4.0,
    "add_const": lambda t, x, i, b, m: x + 1.0,
    "add_twice": lambda t, x, i, b, m: (x + 1.0, x + x, t.add(x, 1.0)),
    "mul_rmul": lambda t, x, i, b, m: (x * 2, 2 * x),
    "rsub": lambda t, x, i, b, m: 1.0 - x,
    "truediv": lambda t, x, i, b, m: x / 2.0,
    "int_truediv": lambda t, x, i, b, m: i / 2,
    "floordiv": lambda t, x, i, b, m: x // 2.0,
    "mod": lambda t, x, i, b, m: x % 2.0,
    "pow": lambda t, x, i, b, m: x ** 2,
    "matmul_op": lambda t, x, i, b, m: (m @ m, t.matmul(m, m)),
    "neg_abs": lambda t, x, i, b, m: (-x, abs(x)),
    "compare": lambda t, x, i, b, m: (x < 1.0, x <= 1.0, x > 1.0, x >= 1.0),
    "logical_ops": lambda t, x, i, b, m: (b & b, b | b, ~b),
    "xor_op": lambda t, x, i, b, m: b ^ b,
    "getitem": lambda t, x, i, b, m: (x[0], x[:, 1:], x[0, 1]),
    "tf_binary": lambda t, x, i, b, m: (t.subtract(x, 1.0), t.multiply(x, 2.0), t.divide(x, 2.0),
                                        t.maximum(x, 0.0), t.minimum(x, 0.0), t.equal(x, 1.0), t.pow(x, 2.0)),
    "reduce": lambda t, x, i, b, m: (t.reduce_sum(x), t.reduce_mean(x, 1), t.reduce_max(x, axis=[0])),
    "unary": lambda t, x, i, b, m: (t.nn.relu(x), t.square(x), t.exp(x), t.sqrt(x), t.tanh(x), t.sigmoid(x)),
    "cast": lambda t, x, i, b, m: t.cast(x, t.int32),
    "reshape": lambda t, x, i, b, m: t.reshape(x, [3, 2]),
    "concat": lambda t, x, i, b, m: t.concat([x, x], 0),
    "transpose": lambda t, x, i, b, m: t.transpose(x),
    "add_n": lambda t, x, i, b, m: t.add_n([x, x]),
    "clip": lambda t, x, i, b, m: t.clip_by_value(x, 0.0, 1.0),
    "softmax": lambda t, x, i, b, m: t.nn.softmax(x),
    "logical_xor": lambda t, x, i, b, m: t.logical_xor(b, b),
    "in_scope": lambda t, x, i, b, m: _scoped(t, x),
}


# TF1"s public functions (tools/tf1_api.txt, tf.* / tf.math.* / tf.nn.*) that build ops from one float [2, 3]
# tensor x, two (x, y), or a list [x, y], which TensorFlow and tfplus both implement: listed by probing every
# such name of the inventory with those arguments in both. Those whose graphs differ in structure (tfplus builds
# another composition: tf.norm, tf.nn.selu, tf.math.is_nan, ...) are not listed; they are
# tfplus's own compositions, whose names follow TF's scopes but not its node-by-node structure.
API_CALLS = {
    "x": (
        "abs", "argmax", "argmin", "ceil", "cos", "count_nonzero", "cumsum", "erf", "exp", "floor", "identity",
        "log", "log1p", "log_sigmoid", "negative", "reciprocal", "reduce_max", "reduce_mean", "reduce_min",
        "reduce_prod", "reduce_sum", "round", "rsqrt", "sigmoid", "sign", "sin", "sqrt", "square", "squeeze",
        "tanh", "to_double", "to_int32", "to_int64", "transpose", "unstack", "where", "where_v2", "nn.elu",
        "nn.l2_loss", "nn.leaky_relu", "nn.log_softmax", "nn.relu", "nn.relu6", "nn.sigmoid", "nn.softmax",
        "nn.softplus", "nn.tanh", "nn.top_k", "math.abs", "math.argmax", "math.argmin", "math.ceil", "math.cos",
        "math.count_nonzero", "math.cumsum", "math.erf", "math.exp", "math.floor", "math.log", "math.log1p",
        "math.log_sigmoid", "math.log_softmax", "math.negative", "math.reciprocal", "math.reduce_max",
        "math.reduce_mean", "math.reduce_min", "math.reduce_prod", "math.reduce_sum", "math.round", "math.rsqrt",
        "math.sigmoid", "math.sign", "math.sin", "math.softmax", "math.softplus", "math.sqrt", "math.square",
        "math.tanh"
    ),
    "xy": (
        "add", "div", "div_no_nan", "divide", "equal", "floor_div", "floordiv", "floormod", "greater",
        "greater_equal", "less", "less_equal", "maximum", "minimum", "mod", "multiply", "not_equal", "pow",
        "realdiv", "squared_difference", "subtract", "truediv", "nn.log_poisson_loss", "math.add", "math.divide",
        "math.divide_no_nan", "math.equal", "math.floordiv", "math.floormod", "math.greater", "math.greater_equal",
        "math.less", "math.less_equal", "math.maximum", "math.minimum", "math.mod", "math.multiply",
        "math.not_equal", "math.pow", "math.squared_difference", "math.subtract", "math.truediv"
    ),
    "list": (
        "add_n", "identity_n", "shape_n", "math.add_n"
    ),
}


def _scoped(t, x):
    with t.name_scope("layer"):
        return x * 2.0 + 1.0


def _nodes(t, fn) -> list:
    """(name, op type, inputs) of each node `fn` adds to a new graph, in the order they were created."""
    g = t.Graph()
    with g.as_default():
        fn(t, *_inputs(t))
    return [(n.name, n.op, list(n.input)) for n in g.as_graph_def().node if n.op != "Placeholder"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_names_match_tensorflow(tf1, case):
    assert _nodes(tf, CASES[case]) == _nodes(tf1, CASES[case])


def _call(name: str, pattern: str):
    def fn(t, x, i, b, m):
        f = t
        for part in name.split("."):
            f = getattr(f, part)
        y = t.placeholder(t.float32, [2, 3], name="y")
        return f(*{"x": (x,), "xy": (x, y), "list": ([x, y],)}[pattern])
    return fn


@pytest.mark.parametrize("name,pattern", [(n, p) for p, names in API_CALLS.items() for n in names])
def test_api_functions_name_nodes_as_tensorflow(tf1, name, pattern):
    assert _nodes(tf, _call(name, pattern)) == _nodes(tf1, _call(name, pattern))
