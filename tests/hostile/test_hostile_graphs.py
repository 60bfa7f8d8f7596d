"""Hostile GraphDefs: truncated, random and bit-flipped bytes, and crafted ones (wrong input counts, bad attrs,
huge declared shapes, cycles, unknown ops, duplicate names, bad input references). Each must import or fail
with a clear error (ValueError/TypeError/tfplus.errors naming what is wrong, an import error naming the node),
never a raw IndexError/KeyError/MemoryError/RecursionError..., and a failed import adds nothing to the graph.
Seeded, a few hundred cases."""
import numpy as np
import pytest

import tfplus as tf
from tfplus import errors, registry
from tfplus.graph_io import import_graph_def, parse_graph_def
from tfplus.proto import graph_pb2, tensor_pb2, tensor_shape_pb2
from tfplus.tensor_util import attr_to_proto, make_tensor_proto

CLEAR = (ValueError, TypeError, errors.OpError)


def _model_bytes() -> bytes:
    """A small training graph with many op types and attr kinds (conv, pooling, gradients, an optimizer)."""
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, 2, 6, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        w = tf.Variable(tf.truncated_normal([3, 3, 2, 4], stddev=0.1), name="w")
        b = tf.Variable(tf.zeros([4]), name="b")
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME", data_format="NCHW"), b,
                                      data_format="NCHW"))
        h = tf.reshape(tf.nn.max_pool(h, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", data_format="NCHW"), [-1, 36])
        logits = tf.matmul(h, tf.Variable(tf.random_uniform([36, 3]), name="v"))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        tf.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        tf.global_variables_initializer()
    return g.as_graph_def().SerializeToString(deterministic=True)


MODEL = _model_bytes()


def _outcome(data: bytes):
    """Parses and imports `data` into a fresh graph: None if it imported, else the clear error. Anything else
    fails the test, as does a failed import that left nodes behind."""
    try:
        gd = parse_graph_def(data)
    except ValueError as e:
        assert "GraphDef" in str(e), e
        return e
    return _import(gd)


def _import(gd):
    g = tf.Graph()
    with g.as_default():
        try:
            import_graph_def(gd)
        except CLEAR as e:
            assert g.get_operations() == [], f"a failed import left {len(g.get_operations())} nodes: {e}"
            assert "import_graph_def" in str(e), e
            return e
    return None


def test_truncated_graph_defs():
    rng = np.random.default_rng(0)
    cuts = sorted(set(rng.integers(1, len(MODEL), 60).tolist()))
    for cut in cuts:
        _outcome(MODEL[:cut])  # some prefixes are whole GraphDefs of fewer nodes: they may import


def test_random_bytes():
    rng = np.random.default_rng(1)
    for n in rng.integers(1, 400, 80):
        _outcome(rng.integers(0, 256, n, dtype=np.uint8).tobytes())


def test_bit_flipped_graph_defs():
    rng = np.random.default_rng(2)
    data = np.frombuffer(MODEL, np.uint8)
    outcomes = []
    for _ in range(150):
        flipped = data.copy()
        for pos in rng.integers(0, len(data), rng.integers(1, 4)):
            flipped[pos] ^= np.uint8(1 << rng.integers(0, 8))
        outcomes.append(_outcome(flipped.tobytes()))
    assert sum(o is not None for o in outcomes) > 30  # most flips are caught, not imported


# -- crafted GraphDefs: each must be refused, naming the node --------------------------------------------------
def _node(name, op, inputs=(), **attrs):
    node = graph_pb2.NodeDef(name=name, op=op, input=list(inputs))
    for key, (kind, value) in attrs.items():
        node.attr[key].CopyFrom(attr_to_proto(kind, value))
    return node


def _ph(name="a", shape=(2, 3), dtype=tf.float32):
    return _node(name, "Placeholder", dtype=("type", dtype), shape=("shape", shape))


def _const(name, value, dtype=None, **proto_fields):
    node = graph_pb2.NodeDef(name=name, op="Const")
    proto = make_tensor_proto(value) if value is not None else \
        tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum, **proto_fields)
    node.attr["value"].tensor.CopyFrom(proto)
    node.attr["dtype"].CopyFrom(attr_to_proto("type", dtype or tf.as_dtype(proto.dtype)))
    return node


def _dims(*sizes):
    return tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=s) for s in sizes])


def _raw_attr(node, key, **fields):
    node.attr[key].Clear()
    for field, value in fields.items():
        if field == "type_enum":
            node.attr[key].type = value
        else:
            setattr(node.attr[key], field, value)
    return node


F32 = ("type", tf.float32)
CRAFTED = {
    "too many inputs": [_ph(), _ph("b"), _node("bad", "Relu", ["a", "b"], T=F32)],
    "too few inputs": [_ph(), _node("bad", "MatMul", ["a"], T=F32)],
    "N disagrees": [_ph(), _node("bad", "AddN", ["a", "a"], T=F32, N=("int", 3))],
    "N negative": [_ph(), _node("bad", "AddN", [], T=F32, N=("int", -1))],
    "N missing": [_ph(), _node("bad", "AddN", ["a"], T=F32)],
    "attr of the wrong kind": [_ph(), _node("bad", "Relu", ["a"], T=("int", 1))],
    "undeclared attr": [_ph(), _node("bad", "Relu", ["a"], T=F32, alpha=("float", 0.2))],
    "unsupported dtype": [_raw_attr(_ph("bad"), "dtype", type_enum=14)],  # DT_BFLOAT16 (DT_STRING is supported)
    "unknown dtype enum": [_raw_attr(_ph("bad"), "dtype", type_enum=999)],
    "T no input has": [_ph(), _node("bad", "Relu", ["a"], T=("type", tf.int32))],
    "missing attr": [_node("bad", "Placeholder", shape=("shape", (2,)))],
    "strides too short": [_ph("a", (1, 4, 4, 2)), _ph("f", (3, 3, 2, 2)),
                          _node("bad", "Conv2D", ["a", "f"], T=F32, strides=("list(int)", [1]),
                                padding=("string", "SAME"), data_format=("string", "NHWC"))],
    "zero strides": [_ph("a", (1, 4, 4, 2)), _ph("f", (3, 3, 2, 2)),
                     _node("bad", "Conv2D", ["a", "f"], T=F32, strides=("list(int)", [1, 0, 0, 1]),
                           padding=("string", "VALID"), data_format=("string", "NHWC"))],
    "empty ksize": [_ph("a", (1, 4, 4, 2)),
                    _node("bad", "MaxPool", ["a"], T=F32, ksize=("list(int)", []), strides=("list(int)", []),
                          padding=("string", "VALID"), data_format=("string", "NHWC"))],
    "bad padding": [_ph("a", (1, 4, 4, 2)),
                    _node("bad", "MaxPool", ["a"], T=F32, ksize=("list(int)", [1, 2, 2, 1]),
                          strides=("list(int)", [1, 2, 2, 1]), padding=("string", b"\xff\xfe"),
                          data_format=("string", "NHWC"))],
    "huge Const": [_const("bad", None, dtype=tf.float32, tensor_shape=_dims(10**9, 10**9), float_val=[1.0])],
    "negative Const dim": [_const("bad", None, dtype=tf.float32, tensor_shape=_dims(-7, 2))],
    "short tensor_content": [_const("bad", None, dtype=tf.float32, tensor_shape=_dims(4), tensor_content=b"ab")],
    "too many values": [_const("bad", None, dtype=tf.float32, tensor_shape=_dims(1), float_val=[1, 2])],
    "uint8 out of range": [_const("bad", None, dtype=tf.uint8, tensor_shape=_dims(1), int_val=[300])],
    "Const dtype mismatch": [_const("bad", np.float32([1.0]), dtype=tf.int32)],
    "huge Placeholder": [_ph("bad", (2**40, 2**40))],
    "negative Placeholder dim": [_node("bad", "Placeholder", dtype=F32, shape=("shape", (2,)))],
    "cycle": [_node("bad", "Identity", ["c"], T=F32), _node("c", "Identity", ["bad"], T=F32)],
    "self loop": [_node("bad", "NoOp", ["^bad"])],
    "unknown op": [_node("bad", "Frobnicate")],
    "duplicate names": [_ph("bad"), _ph("bad")],
    "missing input node": [_node("bad", "Relu", ["ghost"], T=F32)],
    "output index out of range": [_ph(), _node("bad", "Relu", ["a:5"], T=F32)],
    "invalid name": [_node("bad name!", "NoOp")],
    "empty name": [_node("", "NoOp")],
    "control input first": [_ph(), _node("bad", "Relu", ["^a", "a"], T=F32)],
    "negative reshape": [_ph(), _const("s", np.int32([-3, 2])),
                         _node("bad", "Reshape", ["a", "s"], T=F32, Tshape=("type", tf.int32))],
    "huge Unpack num": [_ph("a", (None, 3)),
                        _node("bad", "Unpack", ["a"], T=F32, num=("int", 10**12), axis=("int", 0))],
    "Unpack axis out of range": [_ph(), _node("bad", "Unpack", ["a"], T=F32, num=("int", 2), axis=("int", 9))],
    "huge Fill": [_const("d", np.int64([2**40, 2**40])), _const("v", np.float32(0)),
                  _node("bad", "Fill", ["d", "v"], T=F32, index_type=("type", tf.int64))],
    "Transpose bad perm": [_ph(), _const("p", np.int32([0, 0])),
                           _node("bad", "Transpose", ["a", "p"], T=F32, Tperm=("type", tf.int32))],
}
CRAFTED["negative Placeholder dim"][0].attr["shape"].shape.CopyFrom(_dims(-5, 3))


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_graph_defs_are_refused_naming_the_node(case):
    gd = graph_pb2.GraphDef(node=CRAFTED[case])
    error = _outcome(gd.SerializeToString())
    assert error is not None, f"{case}: imported silently"
    name = "bad name!" if case == "invalid name" else "" if case == "empty name" else "bad"
    assert f"'{name}'" in str(error), f"{case}: {error}"


def test_a_deep_chain_imports_without_recursion():
    nodes = [_ph("n0", (2,))] + [_node(f"n{i}", "Identity", [f"n{i - 1}"], T=F32) for i in range(1, 3000)]
    assert _import(graph_pb2.GraphDef(node=nodes[::-1])) is None  # reversed: the import must sort it


def _random_attr(kind: str, rng):
    """A random AttrValue of declared type `kind`, with edge values (negative, zero, huge, NaN, junk bytes)."""
    base = kind[5:-1] if kind.startswith("list(") else kind
    def one():
        if base == "int":
            return int(rng.choice([-(2**62), -3, -1, 0, 1, 2, 3, 4, 7, 2**31, 2**40]))
        if base == "float":
            return float(rng.choice([np.nan, np.inf, -1.0, 0.0, 1e30]))
        if base == "bool":
            return bool(rng.integers(2))
        if base == "string":
            return rng.choice([b"SAME", b"VALID", b"NCHW", b"NHWC", rng.bytes(3), b""])
        if base == "type":
            return tf.as_dtype(str(rng.choice([d.name for d in tf.dtypes.ALL])))
        if base == "shape":
            return tuple(int(rng.choice([-1, 0, 1, 3, 2**40])) for _ in range(rng.integers(0, 5)))
        shape = tuple(int(d) for d in rng.integers(0, 4, rng.integers(0, 3)))
        return rng.standard_normal(shape).astype(str(rng.choice(["float32", "int32", "int64", "bool"])))
    if kind.startswith("list("):
        return attr_to_proto(kind, [one() for _ in range(rng.integers(0, 6))])
    return attr_to_proto(kind, one())


def _mutate(gd: graph_pb2.GraphDef, rng) -> None:
    """One structural change to a random node: another op type with as many inputs, an input dropped, added
    or redirected, or an attr given a random value of its declared type (now and then of another)."""
    node = gd.node[rng.integers(len(gd.node))]
    names = [n.name for n in gd.node]
    what = rng.integers(5)
    if what == 0:
        same = sorted(k for k, o in registry.OPS.items() if len(o.inputs) == len(registry.OPS[node.op].inputs))
        node.op = str(rng.choice(same))
    elif what == 1 and node.input:
        del node.input[rng.integers(len(node.input))]
    elif what == 2:
        node.input.insert(int(rng.integers(len(node.input) + 1)), f"{rng.choice(names)}:{rng.integers(3)}")
    elif what == 3 and node.input:
        node.input[rng.integers(len(node.input))] = str(rng.choice(names))
    else:
        declared = registry.OPS[node.op].attrs if node.op in registry.OPS else {}
        if not declared:
            return
        key = str(rng.choice(sorted(declared)))
        kind = declared[key] if rng.random() < 0.85 else str(rng.choice(["int", "list(int)", "type", "string"]))
        node.attr[key].CopyFrom(_random_attr(kind, rng))


def test_structurally_mutated_graph_defs():
    base = parse_graph_def(MODEL)
    rng = np.random.default_rng(3)
    refused = 0
    for _ in range(200):
        gd = graph_pb2.GraphDef()
        gd.CopyFrom(base)
        for _ in range(rng.integers(1, 3)):
            _mutate(gd, rng)
        refused += _import(gd) is not None
    assert refused > 100
