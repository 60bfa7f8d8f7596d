"""GraphDef round trips (same bytes, same outputs bit for bit), attrs of every type, TensorProto decoding,
import_graph_def's options and its errors, write_graph / read_graph_def; control flow's function library."""
import numpy as np
import pytest
from controlflow import CF_FEEDS, control_flow_model

import tfplus as tf
from tfplus import graph_io, registry, tensor_util
from tfplus.graph_io import import_graph_def, parse_graph_def
from tfplus.proto import graph_pb2, tensor_pb2
from tfplus.tensor_shape import spec
from tfplus.tensor_util import attr_from_proto, attr_to_proto, make_ndarray
from tfplus.train.saver import Saver

XS = np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5


def _model():
    """A small graph with variables, a control dependency and several op types; returns (graph, y's name)."""
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(7)
        x = tf.placeholder(tf.float32, [None, 2], name="x")
        tf.placeholder(tf.float32, None, name="any_shape")  # shape attr of unknown rank
        w = tf.Variable(tf.random_normal([2]), name="w")
        b = tf.Variable(tf.fill([2], 0.25), name="b")
        with tf.name_scope("layer"):
            h = tf.add(tf.multiply(x, w), b)
            with tf.control_dependencies([h]):
                c = tf.constant(np.float32([[1.5, -2.0]]) * np.ones((3, 1), np.float32))
                y = tf.identity(tf.add_n([h, x, c]), name="y")
        tf.global_variables_initializer()
    return g, y.name


def _run(graph, init="init", y="layer/y:0", x="x:0"):
    with tf.Session(graph=graph) as sess:
        sess.run(init)
        return sess.run(y, {x: XS})


def test_round_trip_bytes_and_outputs_bit_for_bit():
    g, y = _model()
    data = g.as_graph_def().SerializeToString()
    gd = parse_graph_def(data)
    assert [n.name for n in gd.node] == [op.name for op in g.get_operations()]
    g2 = tf.Graph()
    with g2.as_default():
        y2, init2 = import_graph_def(gd, return_elements=[y, "init"], name="")
    assert y2.name == y and init2.type == "NoOp"
    # Importing without a prefix rebuilds the same graph: the same bytes again.
    assert g2.as_graph_def().SerializeToString(deterministic=True) == gd.SerializeToString(deterministic=True)
    a, b = _run(g), _run(g2)
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_imported_variables_are_initialized_or_restored_by_name(tmp_path):
    g, y = _model()
    with tf.Session(graph=g) as sess:
        sess.run("init")
        sess.run("b/Assign")
        path = Saver(g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)).save(sess, str(tmp_path / "m"))
        expected = sess.run(y, {"x:0": XS})
    g2 = tf.Graph()
    with g2.as_default():
        (w_assign,) = import_graph_def(g.as_graph_def(), return_elements=["w/Assign"], name="imported")
        # An imported graph has VariableV2 nodes but no tf.Variable objects: a Saver takes the nodes.
        saver = Saver({"w": g2.get_operation_by_name("imported/w"),
                       "b": g2.get_tensor_by_name("imported/b:0")})
    with tf.Session(graph=g2) as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="imported/w"):
            sess.run("imported/layer/y:0", {"imported/x:0": XS})
        sess.run(w_assign)
        sess.run("imported/b/Assign")
        saver.restore(sess, path)
        assert sess.run("imported/layer/y:0", {"imported/x:0": XS}).tobytes() == expected.tobytes()


def test_unsorted_graph_def_and_control_inputs():
    g, y = _model()
    gd = g.as_graph_def()
    shuffled = graph_pb2.GraphDef(versions=gd.versions)
    shuffled.node.extend(reversed(gd.node))
    g2 = tf.Graph()
    with g2.as_default():
        (y2,) = import_graph_def(shuffled, return_elements=[y])
    assert [c.name for c in y2.op.control_inputs] == ["import/layer/Add"]
    assert _run(g2, "import/init", y2, "import/x:0").tobytes() == _run(g).tobytes()


def test_input_map_prefixes_and_return_elements():
    g, y = _model()
    gd = g.as_graph_def()
    g2 = tf.Graph()
    with g2.as_default():
        first = import_graph_def(gd, return_elements=["x"])
        feed = tf.constant(XS, name="feed")
        y2, init = import_graph_def(gd, input_map={"x": feed}, return_elements=[y, "init"])
        with tf.name_scope("outer"):
            (y3,) = import_graph_def(gd, return_elements=[y], name="net")
    assert first[0].name == "import/x" and isinstance(first[0], tf.Operation)
    assert y2.name == "import_1/layer/y:0" and y3.name == "outer/net/layer/y:0"
    assert g2.get_operation_by_name("import_1/layer/Mul").inputs[0] is feed
    with tf.Session(graph=g2) as sess:
        sess.run(init)
        assert sess.run(y2).tobytes() == _run(g).tobytes()
    with tf.Graph().as_default():
        assert import_graph_def(gd) is None


def test_import_errors_are_clear():
    g, _ = _model()
    gd = g.as_graph_def()
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"input_map names inputs that no node .* uses: \['nope:0'\]"):
            import_graph_def(gd, input_map={"nope": tf.constant(1.0)})
        with pytest.raises(ValueError, match="return element 'missing:0' names no node"):
            import_graph_def(gd, return_elements=["missing:0"])
    broken = graph_pb2.GraphDef()
    broken.CopyFrom(gd)
    next(n for n in broken.node if n.name == "layer/y").input[0] = "ghost:0"
    with tf.Graph().as_default(), pytest.raises(ValueError, match=r"input 'ghost:0'.*no node 'ghost'"):
        import_graph_def(broken)
    cyclic = graph_pb2.GraphDef(node=[graph_pb2.NodeDef(name="a", op="NoOp", input=["^b"]),
                                      graph_pb2.NodeDef(name="b", op="NoOp", input=["^a"])])
    with tf.Graph().as_default() as g3, pytest.raises(ValueError, match=r"cycle through \['a', 'b'\]"):
        import_graph_def(cyclic)
    assert g3.get_operations() == []  # checked before anything was created
    bad_attr = graph_pb2.GraphDef()
    bad_attr.CopyFrom(gd)
    bad_attr.node[0].attr["dtype"].CopyFrom(attr_to_proto("int", 3))
    with tf.Graph().as_default(), pytest.raises(ValueError, match="'x' .*'dtype'.*holds i where.*'type'"):
        import_graph_def(bad_attr)


def test_unknown_op_type_names_node_op_and_registered_types():
    gd = graph_pb2.GraphDef(node=[graph_pb2.NodeDef(name="a", op="NoOp"),
                                  graph_pb2.NodeDef(name="mystery", op="Frobnicate", input=["^a"])])
    with tf.Graph().as_default() as g, pytest.raises(ValueError) as info:
        import_graph_def(gd)
    msg = str(info.value)
    assert "'mystery'" in msg and "'Frobnicate'" in msg and "registered op types" in msg
    assert "Const" in msg and "VariableV2" in msg
    assert g.get_operations() == []


def test_truncated_and_garbage_bytes(tmp_path):
    g, _ = _model()
    data = g.as_graph_def().SerializeToString()
    with pytest.raises(ValueError, match=r"cannot parse a GraphDef from \d+ bytes"):
        parse_graph_def(data[:-7])
    with pytest.raises(ValueError, match="cannot parse a GraphDef"):
        parse_graph_def(b"\xff" * 16)
    with pytest.raises(ValueError, match=r"not a GraphDef: it has unknown top-level fields \[7\]"):
        parse_graph_def(b"\x38\x01")  # field 7, a varint: valid protobuf, but no GraphDef field
    path = tmp_path / "graph.pb"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="graph.pb"):
        graph_io.read_graph_def(str(path))


def test_write_graph_text_and_binary(tmp_path):
    g, y = _model()
    text = tf.train.write_graph(g, str(tmp_path / "logs"), "graph.pbtxt")  # TF1's name for it
    binary = graph_io.write_graph(g.as_graph_def(), str(tmp_path / "logs"), "graph.pb", as_text=False)
    assert text.endswith("graph.pbtxt") and 'op: "VariableV2"' in open(text).read()
    expected = g.as_graph_def().SerializeToString(deterministic=True)
    for path in (text, binary):
        assert graph_io.read_graph_def(path).SerializeToString(deterministic=True) == expected
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["graph.pb", "graph.pbtxt"]  # no temps
    assert g.get_operation_by_name("w/Assign").node_def.input == ["w", "random_normal"]


def test_add_shapes_writes_output_shapes_and_import_ignores_them():
    g, y = _model()
    gd = g.as_graph_def(add_shapes=True)
    node = next(n for n in gd.node if n.name == "x")
    assert attr_from_proto("list(shape)", node.attr["_output_shapes"]) == [(None, 2)]
    with tf.Graph().as_default():
        (y2,) = import_graph_def(gd, return_elements=[y])
    assert "_output_shapes" not in y2.op.attrs


# -- attrs of every type -----------------------------------------------------------------------------------
ATTRS = {
    "t": ("type", tf.float64),
    "i": ("int", -(2**40)),
    "f": ("float", 0.375),
    "b": ("bool", False),
    "s": ("string", "VALID"),
    "shape_known": ("shape", (2, 3)),
    "shape_partial": ("shape", (None, 3)),
    "shape_scalar": ("shape", ()),
    "shape_unknown": ("shape", None),
    "tensor": ("tensor", np.arange(6, dtype=np.int64).reshape(2, 3)),
    "li": ("list(int)", [1, 2, 2, 1]),
    "lf": ("list(float)", [0.5, -1.25]),
    "lb": ("list(bool)", [True, False]),
    "lt": ("list(type)", [tf.int32, tf.bool]),
    "ls": ("list(string)", ["a", "bc"]),
    "lshape": ("list(shape)", [(1,), None, (None,)]),
    "ltensor": ("list(tensor)", [np.float16([1.5, 2.0]), np.array(True)]),
    "empty": ("list(int)", []),
}


def _same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape,
                                                                                  b.tobytes())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b if not isinstance(a, tf.DType) else a is b


@pytest.mark.parametrize("key", sorted(ATTRS))
def test_each_attr_type_round_trips(key):
    kind, value = ATTRS[key]
    av = attr_to_proto(kind, value)
    back = attr_from_proto(kind, type(av).FromString(av.SerializeToString()))
    assert _same(value if kind != "shape" or value is None else tuple(value), back), (value, back)


def test_attrs_of_every_type_survive_a_node_round_trip(monkeypatch):
    # A probe op registered only for this test (monkeypatch removes it again).
    probe = registry.OpDef("AttrProbe", (), ("y",), {k: kind for k, (kind, _) in ATTRS.items()},
                           lambda ins, attrs: [spec((), tf.float32)])
    monkeypatch.setitem(registry.OPS, "AttrProbe", probe)
    g = tf.Graph()
    with g.as_default():
        op = g.create_op("AttrProbe", [], {k: v for k, (_, v) in ATTRS.items()}, name="probe")
    gd = parse_graph_def(g.as_graph_def().SerializeToString())
    with tf.Graph().as_default():
        (op2,) = import_graph_def(gd, return_elements=["probe"])
    for key in ATTRS:
        assert _same(op.attrs[key], op2.attrs[key]), key
    assert not op2.attrs["tensor"].flags.writeable  # like tf.constant's value


def test_float_attrs_are_32_bit_as_in_tensorflow():
    assert attr_from_proto("float", attr_to_proto("float", 0.1)) == float(np.float32(0.1))


def test_undeclared_or_mistyped_attrs_are_rejected():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [2], name="x")
    x.op.attrs["bogus"] = 1
    with pytest.raises(ValueError, match="Placeholder 'x': attr 'bogus' is not declared"):
        g.as_graph_def()
    del x.op.attrs["bogus"]
    x.op.attrs["dtype"] = "not a dtype"
    with pytest.raises(TypeError, match="Placeholder 'x': cannot serialize attr 'dtype'"):
        g.as_graph_def()


# -- TensorProto --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [d.name for d in tf.dtypes.ALL])
def test_tensor_content_round_trips_every_dtype(dtype):
    rng = np.random.default_rng(0)
    for shape in [(), (0,), (2, 3, 1)]:
        value = np.asarray(rng.normal(size=shape) * 50).astype(dtype)
        data = tensor_util.make_tensor_proto(value).SerializeToString()
        back = make_ndarray(tensor_pb2.TensorProto.FromString(data))
        assert _same(value, back)


def test_typed_val_fields_and_tensorflows_fill_rule():
    def proto(dtype, shape, **vals):
        return tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum,
                                      tensor_shape=tensor_util.shape_to_proto(shape), **vals)
    assert _same(make_ndarray(proto(tf.float32, (2, 2), float_val=[1.5])), np.full((2, 2), 1.5, np.float32))
    assert _same(make_ndarray(proto(tf.int32, (4,), int_val=[1, 2])), np.int32([1, 2, 2, 2]))
    assert _same(make_ndarray(proto(tf.uint8, (2,), int_val=[7, 255])), np.uint8([7, 255]))
    assert _same(make_ndarray(proto(tf.int64, (), int64_val=[2**40])), np.array(2**40, np.int64))
    assert _same(make_ndarray(proto(tf.float64, (3,))), np.zeros(3))
    assert _same(make_ndarray(proto(tf.bool, (2,), bool_val=[True])), np.array([True, True]))
    half = np.float16([0.5, -3.0])
    assert _same(make_ndarray(proto(tf.float16, (2,), half_val=half.view(np.uint16).tolist())), half)
    with pytest.raises(ValueError, match="3 values but shape"):
        make_ndarray(proto(tf.float32, (2,), float_val=[1, 2, 3]))
    with pytest.raises(ValueError, match="tensor_content has 3 bytes .* needs 8"):
        make_ndarray(proto(tf.float32, (2,), tensor_content=b"abc"))
    with pytest.raises(TypeError, match="DT_COMPLEX64 is not supported"):
        make_ndarray(tensor_pb2.TensorProto(dtype=8))
    strings = make_ndarray(proto(tf.string, (3,), string_val=[b"a", b"bc"]))  # the checkpoint ops' names
    assert strings.dtype == object and strings.tolist() == [b"a", b"bc", b"bc"]
    assert make_ndarray(tensor_util.make_tensor_proto(np.array(["x", "yz"]))).tolist() == [b"x", b"yz"]


def _train_twice(graph) -> list:
    with tf.Session(graph=graph) as sess:
        sess.run("init")
        return [sess.run(["loss:0", "train"], CF_FEEDS)[0] for _ in range(2)] + [sess.run("rnn_out:0", CF_FEEDS)]


def test_control_flow_graph_round_trips_bytes_and_training(tmp_path):
    """cond, while_loop, cond in while_loop, a GRU's dynamic_rnn and their gradients: sub-graphs become functions
    of the GraphDef's library; imported, the graph is the same bytes again and trains bit for bit the same."""
    with tf.Graph().as_default() as g:
        control_flow_model()
    gd = parse_graph_def(g.as_graph_def().SerializeToString())
    functions = {f.signature.name for f in gd.library.function}
    calls = [(n.op, av.func.name) for n in gd.node for av in n.attr.values() if av.WhichOneof("value") == "func"]
    assert {op for op, _ in calls} == {"If", "While"} and {name for _, name in calls} <= functions
    g2 = tf.Graph()
    with g2.as_default():
        import_graph_def(gd, name="")
    assert g2.as_graph_def().SerializeToString(deterministic=True) == gd.SerializeToString(deterministic=True)
    for a, b in zip(_train_twice(g), _train_twice(g2)):
        assert a.tobytes() == b.tobytes()
    # write_graph, text and binary, and one node's NodeDef
    for path in (tf.train.write_graph(g, str(tmp_path), "cf.pbtxt"),
                 graph_io.write_graph(g, str(tmp_path), "cf.pb", as_text=False)):
        assert graph_io.read_graph_def(path) == gd
    assert g.get_operation_by_name("branch/If").node_def.attr["then_branch"].func.name == "branch_If_then"


def test_control_flow_functions_errors_are_clear():
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [2], name="x")
        tf.while_loop(lambda v: tf.reduce_sum(v) < 10.0, lambda v: tf.cond(v[0] > 0, lambda: v * 2.0,
                                                                           lambda: v + 1.0), [x], name="loop")
    gd = g.as_graph_def()

    def fails(edit, error, match):
        bad = graph_pb2.GraphDef()
        bad.CopyFrom(gd)
        edit(bad)
        with tf.Graph().as_default(), pytest.raises(error, match=match):
            import_graph_def(bad)
    body = next(f for f in gd.library.function if f.signature.name == "loop_While_body")
    fails(lambda b: b.node[1].attr["body"].func.__setattr__("name", "nope"), ValueError,
          r"node 'loop/While' \(While\) calls function 'nope', which the GraphDef's library does not define")
    fails(lambda b: b.library.function.remove(next(f for f in b.library.function if f.signature.name ==
                                                   body.signature.name)), ValueError, "does not define")

    def recurse(b):  # the body's If calls the body again
        f = next(f for f in b.library.function if f.signature.name == "loop_While_body")
        next(n for n in f.node_def if n.op == "If").attr["then_branch"].func.name = "loop_While_body"
    fails(recurse, ValueError, "calls itself")
    fails(lambda b: b.library.function[0].signature.input_arg[0].__setattr__("type", 3), TypeError,
          r"takes \(int32\) but the node passes \(float32\)")
    fails(lambda b: b.node[1].attr["_tfplus_n_loop_vars"].__setattr__("i", 5), ValueError,
          r"attr '_tfplus_n_loop_vars' is 5, outside \[0, 1\]")
    fails(lambda b: b.library.function.add().CopyFrom(b.library.function[0]), ValueError, "twice")
    with tf.Graph().as_default() as deep:  # 65 conds, each inside the last
        def nest(v, depth):
            return v if depth == 0 else tf.cond(v[0] > 0, lambda: nest(v * 2.0, depth - 1), lambda: v)
        nest(tf.placeholder(tf.float32, [2]), 65)
    with tf.Graph().as_default(), pytest.raises(ValueError, match="functions nest more than 64 deep"):
        import_graph_def(deep.as_graph_def())


def test_mangled_control_flow_graph_defs_fail_with_clear_errors():
    """A few hundred random edits of a GraphDef with loops, branches and gradients (inputs, op types, attrs,
    names, dropped nodes, in the graph and in its functions): each imports or fails with ValueError / TypeError
    naming what is wrong, and a failed import adds nothing to the graph."""
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [2], name="x")
        v = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tf.cond(v[0] > 0, lambda: v * 0.5,
                                                                            lambda: tf.sin(v))), [0, x])[1]
        tf.gradients(tf.reduce_sum(v * v), [x])
    gd = g.as_graph_def()
    rng = np.random.default_rng(11)
    names = [n.name for n in gd.node] + [n.name for f in gd.library.function for n in f.node_def] + ["nope"]
    ops = sorted({n.op for n in gd.node} | {"While", "If", "TensorListStack", "Switch"})

    def some_node(d):
        if rng.random() < 0.5 or not d.library.function:
            return d.node, d.node[int(rng.integers(len(d.node)))]
        f = d.library.function[int(rng.integers(len(d.library.function)))]
        return f.node_def, f.node_def[int(rng.integers(len(f.node_def)))] if f.node_def else f.node_def.add()
    for trial in range(300):
        bad = graph_pb2.GraphDef()
        bad.CopyFrom(gd)
        for _ in range(int(rng.integers(1, 3))):
            nodes, node = some_node(bad)
            kind = rng.integers(6)
            if kind == 0 and node.input:
                node.input[int(rng.integers(len(node.input)))] = str(rng.choice(names)) + str(
                    rng.choice(["", ":1", ":output:0", ":z:7", ":0"]))
            elif kind == 1:
                node.op = str(rng.choice(ops))
            elif kind == 2 and node.attr:
                av = node.attr[str(rng.choice(sorted(node.attr)))]
                av.i = int(rng.integers(-3, 9))
            elif kind == 3:
                nodes.remove(node)
            elif kind == 4:
                node.name = str(rng.choice(names))
            elif bad.library.function:
                f = bad.library.function[int(rng.integers(len(bad.library.function)))]
                f.signature.name = str(rng.choice([f.signature.name + "x", bad.library.function[0].signature.name]))
        with tf.Graph().as_default() as target:
            try:
                import_graph_def(bad)
            except (ValueError, TypeError) as e:
                assert "import_graph_def" in str(e) or "function" in str(e), (trial, e)
                assert not target.get_operations(), trial
