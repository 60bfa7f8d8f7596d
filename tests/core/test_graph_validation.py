"""GraphDef and graph-building validation: input counts against the op's signature, Const values against their
dtype and the bytes present, shapes, attr types; an import adds all of a GraphDef or nothing."""
import tracemalloc

import pytest

import tfplus as tf
from tfplus.graph_io import import_graph_def, parse_graph_def
from tfplus.proto import graph_pb2, tensor_pb2, tensor_shape_pb2
from tfplus.tensor_util import attr_to_proto, make_ndarray, make_tensor_proto


def _node(name, op, inputs=(), **attrs):
    node = graph_pb2.NodeDef(name=name, op=op, input=list(inputs))
    for key, (kind, value) in attrs.items():
        node.attr[key].CopyFrom(attr_to_proto(kind, value))
    return node


def _placeholder(name="a", dtype=tf.float32, shape=(2,)):
    return _node(name, "Placeholder", dtype=("type", dtype), shape=("shape", shape))


def _const_proto(dtype, shape, **vals):
    return tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum, tensor_shape=tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in shape]), **vals)


def _const(name, proto, dtype=None):
    node = graph_pb2.NodeDef(name=name, op="Const")
    node.attr["value"].tensor.CopyFrom(proto)
    node.attr["dtype"].CopyFrom(attr_to_proto("type", dtype or tf.as_dtype(proto.dtype)))
    return node


def _import(*nodes, **kwargs):
    """Imports the nodes into a fresh graph; returns (result, graph)."""
    g = tf.Graph()
    with g.as_default():
        return import_graph_def(graph_pb2.GraphDef(node=list(nodes)), **kwargs), g


def test_input_count_is_checked_against_the_signature():
    with pytest.raises(ValueError, match=r"node 'r' \(Relu\) takes 1 input \(features\), got 2: \['a', 'b'\]"):
        _import(_placeholder("a"), _placeholder("b"), _node("r", "Relu", ["a", "b"], T=("type", tf.float32)))
    with pytest.raises(ValueError, match=r"node 'm' \(Mul\) takes 2 inputs \(x, y\), got 1"):
        _import(_placeholder("a"), _node("m", "Mul", ["a"], T=("type", tf.float32)))
    # A variadic input takes attr N tensors.
    add_n = _node("s", "AddN", ["a", "a", "a"], T=("type", tf.float32), N=("int", 2))
    with pytest.raises(ValueError, match=r"node 's' \(AddN\) takes 2 inputs \(inputs\*\) with N=2, got 3"):
        _import(_placeholder("a"), add_n)
    (s,), _ = _import(_placeholder("a"), _node("s", "AddN", ["a", "a"], T=("type", tf.float32), N=("int", 2)),
                      return_elements=["s:0"])
    assert len(s.op.inputs) == 2
    # Built in Python too, not only when imported.
    with tf.Graph().as_default() as g:
        a = tf.placeholder(tf.float32, [2])
        with pytest.raises(ValueError, match=r"Relu 'r': takes 1 input \(features\), got 2"):
            g.create_op("Relu", [a, a], {"T": tf.float32}, name="r")


def test_const_values_must_fit_their_dtype():
    for dtype, value in [(tf.uint8, 300), (tf.int8, 1000), (tf.uint8, -1), (tf.int16, 40000)]:
        with pytest.raises(ValueError, match=rf"node 'c' \(Const\), attr 'value': int_val holds {value}, out of "
                                             rf"range for {dtype.name}"):
            _import(_const("c", _const_proto(dtype, (2,), int_val=[1, value])))
    with pytest.raises(TypeError, match=r"node 'c' \(Const\) declares dtype int32 but its value is float32"):
        _import(_const("c", _const_proto(tf.float32, (1,), float_val=[1.5]), dtype=tf.int32))
    (c,), _ = _import(_const("c", _const_proto(tf.uint8, (2,), int_val=[7, 255])), return_elements=["c:0"])
    assert c.op.attrs["value"].tolist() == [7, 255]


def test_negative_dimensions_are_errors_and_minus_one_is_unknown():
    with pytest.raises(ValueError, match=r"node 'a' \(Placeholder\), attr 'shape': dimension 0 of shape \[-7, 2\] "
                                         r"is -7"):
        _import(_placeholder("a", shape=(2, 2)).__class__(
            name="a", op="Placeholder", attr={"dtype": attr_to_proto("type", tf.float32),
                                              "shape": _shape_attr([-7, 2])}))
    (a,), _ = _import(graph_pb2.NodeDef(name="a", op="Placeholder", attr={
        "dtype": attr_to_proto("type", tf.float32), "shape": _shape_attr([-1, 2])}), return_elements=["a:0"])
    assert a.shape.as_list() == [None, 2]
    with pytest.raises(ValueError, match="dimension 1 of shape"):
        make_ndarray(_const_proto(tf.float32, (2, -3)))


def _shape_attr(dims):
    av = attr_to_proto("shape", ())
    av.shape.dim.extend([tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims])
    return av


def test_building_with_negative_or_huge_shapes_names_the_op_and_the_dim():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"Placeholder 'x': output 0 would have shape \[-5, 3\]: dimension 0 "
                                             r"is -5; sizes must be >= 0"):
            tf.placeholder(tf.float32, [-5, 3], name="x")
        with pytest.raises(ValueError, match=r"Fill 'z': .*dimension 0 is -1; sizes must be >= 0"):
            tf.zeros([-1, -1], name="z")
        with pytest.raises(ValueError, match=r"Placeholder 'big': .*more than a tensor can hold"):
            tf.placeholder(tf.float32, [2**40, 2**40], name="big")
        assert tf.placeholder(tf.float32, shape=3).shape.as_list() == [3]  # TF1: an int shape is one dim
        assert tf.placeholder(tf.float32, [-1, 3]).shape.as_list() == [None, 3]


def test_huge_declared_tensors_fail_clearly_before_allocating():
    with pytest.raises(ValueError, match=r"node 'c' \(Const\), attr 'value': a float32 tensor of shape "
                                         r"\(1000000000, 1000000000\) needs 4e\+18 bytes, more than"):
        _import(_const("c", _const_proto(tf.float32, (10**9, 10**9), float_val=[1.0])))
    with pytest.raises(ValueError, match=r"needs 7.38e\+19 bytes"):  # NOTE: 2^32 * 2^32 is 0 in int64
        make_ndarray(_const_proto(tf.float32, (2**32, 2**32), tensor_content=b"\0" * 8))
    # A few bytes declaring a 400 MB fill: the graph holds a broadcast of the one value, nothing is allocated.
    data = graph_pb2.GraphDef(node=[_const("c", _const_proto(tf.float32, (10**8,), float_val=[2.5]))]
                              ).SerializeToString()
    assert len(data) < 60
    tracemalloc.start()
    try:
        (c,), _ = _import(*parse_graph_def(data).node, return_elements=["c:0"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10**7, peak
    assert c.shape.as_list() == [10**8] and c.op.attrs["value"][12345] == 2.5
    # Written back as one value, so the round trip stays small too.
    assert len(make_tensor_proto(c.op.attrs["value"]).SerializeToString()) < 20


def test_import_adds_everything_or_nothing():
    nodes = [_placeholder(f"p{i}") for i in range(12)] + [_node("r", "Relu", ["p0"], T=("type", tf.float32))]
    g = tf.Graph()
    with g.as_default():
        keep = tf.placeholder(tf.float32, [2], name="keep")
        with pytest.raises(ValueError, match=r"return element 'r:3' names output 3, but Relu 'import/r' has "
                                             r"1 output"):
            import_graph_def(graph_pb2.GraphDef(node=nodes), return_elements=["r:3"])
        assert g.get_operations() == [keep.op] and keep.consumers() == []
        (r,) = import_graph_def(graph_pb2.GraphDef(node=nodes), return_elements=["r:0"])
    assert r.name == "import/r:0"  # the failed import left no name taken
    bad_index = nodes + [_node("r2", "Relu", ["r:1"], T=("type", tf.float32))]
    with tf.Graph().as_default() as g2, pytest.raises(ValueError, match=r"node 'r2' has input 'r:1', but Relu"):
        import_graph_def(graph_pb2.GraphDef(node=bad_index))
    assert g2.get_operations() == []


def test_attrs_are_checked_against_their_declarations():
    wrong_t = _node("r", "Relu", ["a"], T=("type", tf.float64))
    with pytest.raises(TypeError, match=r"node 'r' \(Relu\) has attr T=float64, but no input has that dtype"):
        _import(_placeholder("a"), wrong_t)
    wrong_kind = _node("r", "Relu", ["a"], T=("int", 1))
    with pytest.raises(ValueError, match=r"node 'r' \(Relu\), attr 'T': the AttrValue holds i where the op "
                                         r"declares 'type'"):
        _import(_placeholder("a"), wrong_kind)
    late = _node("r", "Relu", ["^a", "a"], T=("type", tf.float32))
    with pytest.raises(ValueError, match=r"node 'r' \(Relu\) lists data input 'a' after a control input"):
        _import(_placeholder("a"), late)
    with pytest.raises(ValueError, match=r"node 'a' \(Placeholder\) lacks attr 'dtype'"):
        _import(graph_pb2.NodeDef(name="a", op="Placeholder"))
