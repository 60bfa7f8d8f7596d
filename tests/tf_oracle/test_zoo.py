"""The model-zoo TF1 scripts (tests/zoo.py: U-Net, pix2pix, ESPCN, capsules, style transfer, a YOLO loss, a
Transformer encoder, WaveNet, actor-critic, freezing) run with `import tfplus as tf` as with TensorFlow's
tf.compat.v1: the same losses, weights and outputs, with the same initial values and random numbers. All on the
cpu device; on OpenCL, those whose ops are new. A frozen GraphDef loads both ways between the two."""
import numpy as np
import pytest
from conftest import needs_opencl
from tutorials import Feeder, check_against_tensorflow, sessions_on_opencl
from zoo import SCRIPTS, run_script

import tfplus
from tfplus.unsupported import UnsupportedError

# Compared with TensorFlow; seq2seq_attention needs tf.contrib.seq2seq, which TensorFlow 2 lacks and tfplus refuses.
_COMPARED = sorted(set(SCRIPTS) - {"seq2seq_attention"})
_ON_OPENCL = ("unet", "pix2pix", "yolo_loss")  # resizing, mirror padding, non-max suppression


@pytest.mark.parametrize("name", _COMPARED)
def test_zoo_script_runs_as_in_tensorflow(tf1, name):
    check_against_tensorflow(tf1, run_script, name)


@needs_opencl
@pytest.mark.parametrize("name", _ON_OPENCL)
def test_zoo_script_runs_as_in_tensorflow_on_opencl(tf1, name, monkeypatch):
    sessions_on_opencl(monkeypatch)
    check_against_tensorflow(tf1, run_script, name)


@pytest.mark.xfail(raises=UnsupportedError, strict=True,
                   reason="tf.contrib.seq2seq's attention and decoders (BahdanauAttention, AttentionWrapper, "
                          "TrainingHelper, BasicDecoder, dynamic_decode) are not implemented")
def test_seq2seq_attention_trains():
    out = run_script(tfplus, "seq2seq_attention", Feeder({}))
    assert out["loss"][-1] < out["loss"][0]


def _freeze(mod, x_value):
    """A trained two-layer net frozen by `mod`: (serialized GraphDef, its output for x_value)."""
    with mod.Graph().as_default():
        x = mod.placeholder(mod.float32, [None, 4], name="input")
        w = mod.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
        b = mod.Variable(np.float32([0.1, -0.2, 0.3]), name="b")
        logits = mod.nn.bias_add(mod.matmul(mod.nn.relu(x), w), b)
        out = mod.nn.softmax(mod.identity(logits), name="output")
        loss = mod.reduce_sum(mod.square(out - 0.5))
        step = mod.train.GradientDescentOptimizer(0.3).minimize(loss)
        with mod.Session() as sess:
            sess.run(mod.global_variables_initializer())
            sess.run(step, {x: x_value})
            frozen = mod.graph_util.convert_variables_to_constants(sess, sess.graph.as_graph_def(), ["output"])
            want = sess.run(out, {x: x_value})
    frozen = mod.graph_util.remove_training_nodes(frozen)
    assert not any(n.op in ("VariableV2", "Assign", "Identity") for n in frozen.node), [n.op for n in frozen.node]
    return frozen.SerializeToString(), want


def _run_frozen(mod, blob, x_value):
    with mod.Graph().as_default() as graph:
        graph_def = mod.GraphDef()
        graph_def.ParseFromString(blob)
        (out,) = mod.import_graph_def(graph_def, return_elements=["output:0"], name="")
        with mod.Session(graph=graph) as sess:
            return sess.run(out, {graph.get_tensor_by_name("input:0"): x_value})


def test_frozen_graphs_load_both_ways(tf1):
    x_value = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ours, ours_out = _freeze(tfplus, x_value)
    theirs, theirs_out = _freeze(tf1, x_value)
    np.testing.assert_allclose(ours_out, theirs_out, rtol=1e-6)
    for producer, blob in (("tfplus", ours), ("tensorflow", theirs)):
        for consumer in (tfplus, tf1):
            np.testing.assert_allclose(_run_frozen(consumer, blob, x_value), theirs_out, rtol=1e-6,
                                       err_msg=f"frozen by {producer}, run by {consumer.__name__}")


def test_graph_util_prunes_as_tensorflow_does(tf1):
    """extract_sub_graph and remove_training_nodes, ours and TensorFlow's, on the same GraphDef: the same nodes
    with the same inputs (CheckNumerics dropped, Identity and StopGradient spliced unless protected or tied to
    control edges)."""
    with tfplus.Graph().as_default() as g:
        x = tfplus.placeholder(tfplus.float32, [2], name="x")
        checked = tfplus.check_numerics(x, "x")
        with tfplus.control_dependencies([checked]):
            guarded = tfplus.identity(x, name="guarded")
        chain = tfplus.identity(tfplus.stop_gradient(tfplus.identity(guarded * 2.0, name="a"), name="sg"), name="b")
        kept = tfplus.identity(chain, name="kept")
        with tfplus.control_dependencies([kept]):
            out = tfplus.add(chain, 1.0, name="out")
        tfplus.identity(x * 3.0, name="unused")
    blob = g.as_graph_def().SerializeToString()

    def nodes(graph_def):
        return [(n.name, n.op, list(n.input)) for n in graph_def.node]

    for dest, protected in ((["out"], None), (["out", "kept"], ["kept", "a"])):
        mine = tfplus.graph_util.extract_sub_graph(tfplus.GraphDef.FromString(blob), dest)
        theirs = tf1.graph_util.extract_sub_graph(tf1.GraphDef.FromString(blob), dest)
        assert nodes(mine) == nodes(theirs)
        mine = tfplus.graph_util.remove_training_nodes(mine, protected)
        theirs = tf1.graph_util.remove_training_nodes(theirs, protected)
        assert nodes(mine) == nodes(theirs)
    assert out.op.name == "out"
