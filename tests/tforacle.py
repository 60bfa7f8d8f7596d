"""Helpers for the conformance tests against TensorFlow (the `tf1` fixture is tf.compat.v1 in graph mode):
move a tfplus GraphDef into TensorFlow and run it there."""
from __future__ import annotations

import numpy as np

import tfplus as tf


def import_into_tf(tf1, graph: tf.Graph):
    """A new TensorFlow graph holding `graph`'s nodes under their own names (our GraphDef, parsed by TF; NCHW
    nodes that TF's CPU cannot run are run in NHWC between transposes: nchw_as_nhwc)."""
    tf_graph = tf1.Graph()
    with tf_graph.as_default():
        graph_def = tf1.GraphDef.FromString(graph.as_graph_def().SerializeToString())
        tf1.import_graph_def(nchw_as_nhwc(tf1, graph_def), name="")
    return tf_graph


def tf_tensors(tf_graph, tensors) -> list:
    """The TensorFlow tensors with the names of our `tensors` (after import_into_tf)."""
    return [tf_graph.get_tensor_by_name(t.name) for t in tensors]


# TensorFlow's CPU kernels for these ops run NHWC only. For each: its inputs that are NCHW images, its inputs
# that are NCHW shape vectors, and whether its output is an image.
_NHWC_ONLY = {
    "Conv2D": ((0,), (), True), "Conv2DBackpropInput": ((2,), (0,), True),
    "Conv2DBackpropFilter": ((0, 2), (), False), "MaxPool": ((0,), (), True), "AvgPool": ((0,), (), True),
    "MaxPoolGrad": ((0, 1, 2), (), True), "MaxPoolGradGrad": ((0, 1, 2), (), True),
    "AvgPoolGrad": ((1,), (0,), True),
    "DepthwiseConv2dNative": ((0,), (), True), "DepthwiseConv2dNativeBackpropInput": ((2,), (0,), True),
    "DepthwiseConv2dNativeBackpropFilter": ((0, 2), (), False),
}
_TO_NHWC, _TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def nchw_as_nhwc(tf1, graph_def):
    """`graph_def` (TensorFlow's GraphDef) with every NCHW node of the ops above computed in NHWC between
    transposes, under the same node names, so that TensorFlow's CPU runs it with unchanged meaning."""
    out = tf1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)

    def const(name, values):
        node = out.node.add(name=name, op="Const")
        node.attr["dtype"].type = tf1.int32.as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf1.make_tensor_proto(values, tf1.int32))
        return name

    for node in graph_def.node:
        fmt = node.attr["data_format"].s if "data_format" in node.attr else b""
        if node.op not in _NHWC_ONLY or fmt != b"NCHW":
            out.node.add().CopyFrom(node)
            continue
        images, shapes, image_out = _NHWC_ONLY[node.op]
        inner = out.node.add()
        inner.CopyFrom(node)
        inner.name = node.name + "/nhwc" if image_out else node.name
        inner.attr["data_format"].s = b"NHWC"
        for key in ("strides", "ksize"):
            if key in node.attr:
                values = list(node.attr[key].list.i)
                del inner.attr[key].list.i[:]
                inner.attr[key].list.i.extend([values[i] for i in _TO_NHWC])
        perm = const(node.name + "/to_nhwc", _TO_NHWC)
        for i in images:
            t = out.node.add(name=f"{node.name}/input{i}_nhwc", op="Transpose", input=[node.input[i], perm])
            t.attr["T"].CopyFrom(node.attr["T"])
            t.attr["Tperm"].type = tf1.int32.as_datatype_enum
            inner.input[i] = t.name
        for i in shapes:
            axis = const(f"{node.name}/input{i}_axis", 0)
            gather = out.node.add(name=f"{node.name}/input{i}_nhwc", op="GatherV2",
                                  input=[node.input[i], perm, axis])
            for key, kind in (("Tparams", tf1.int32), ("Tindices", tf1.int32), ("Taxis", tf1.int32)):
                gather.attr[key].type = kind.as_datatype_enum
            inner.input[i] = gather.name
        if image_out:
            back = out.node.add(name=node.name, op="Transpose",
                                input=[inner.name, const(node.name + "/to_nchw", _TO_NCHW)])
            back.attr["T"].CopyFrom(node.attr["T"])
            back.attr["Tperm"].type = tf1.int32.as_datatype_enum
    return out


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run_built(mod, build, arrays, device=None, grads=True):
    """build(mod, *placeholders) -> output, in module `mod` (tfplus, on `device`, or TensorFlow), run with `arrays`
    after initializing its variables; with `grads` also the gradients of sum(output^2 / 2 + 0.3 output) with
    respect to every input (sparse ones, of a gather, made dense; d loss / d out = out + 0.3)."""
    g = mod.Graph()
    with g.as_default():
        phs = [mod.placeholder(mod.as_dtype(a.dtype), a.shape) for a in arrays]
        out = build(mod, *phs)
        fetches = [out]
        if grads:
            loss = mod.reduce_sum(0.5 * mod.square(out) + 0.3 * out)
            fetches += [mod.convert_to_tensor(d) for d in mod.gradients(loss, phs)]
        init = mod.global_variables_initializer()
        kwargs = {"graph": g, "device": device} if mod is tf else {"graph": g}
        with mod.Session(**kwargs) as s:
            s.run(init)
            return s.run(fetches, dict(zip(phs, arrays)))


def same_as_tensorflow(tf1, device, build, arrays, grads=True, tf_build=None, tol=1e-5):
    """build's output and input gradients (run_built) in tfplus on `device` equal TensorFlow's (of `tf_build`, where
    TensorFlow spells the API differently), dtypes included."""
    got = run_built(tf, build, arrays, device, grads)
    want = run_built(tf1, tf_build or build, arrays, grads=grads)
    for k, (a, b) in enumerate(zip(got, want)):
        assert np.asarray(a).dtype == np.asarray(b).dtype, f"output/gradient {k}"
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"output/gradient {k}")
