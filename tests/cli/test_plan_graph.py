"""`tfplus plan --graph FILE` (issue 34): a user's own training graph, exported by tfplus or by TensorFlow (the
oracle) as a MetaGraphDef or a GraphDef, planned as `--model`'s step is; bad files and names are one-line errors
naming the file or node and the fix."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import tfplus as tf
from tfplus.cli import main
from tfplus.step_budget import smallest_budget

HIDDEN = 96


def _mlp(tf_api, x_shape=(None, 32)):
    """A two-layer classifier's training step in the default graph of `tf_api` (tfplus or tf.compat.v1)."""
    x = tf_api.placeholder(tf_api.float32, list(x_shape), name="x")
    y = tf_api.placeholder(tf_api.int32, [x_shape[0]], name="y")
    w1 = tf_api.get_variable("w1", [x_shape[1], HIDDEN])
    w2 = tf_api.get_variable("w2", [HIDDEN, 10])
    logits = tf_api.matmul(tf_api.nn.relu(tf_api.matmul(x, w1)), w2)
    loss = tf_api.reduce_mean(tf_api.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    train = tf_api.train.MomentumOptimizer(0.1, 0.9).minimize(loss)  # apply_gradients: the 'train_op' collection
    init = tf_api.global_variables_initializer()
    return x, y, train, init


def _plan(capsys, *argv) -> tuple[int, dict | str]:
    code = main(["plan", *map(str, argv)])
    out = capsys.readouterr()
    return code, json.loads(out.out) if "--json" in argv and code != 2 else out.err


@pytest.fixture(scope="module")
def tfplus_meta(tmp_path_factory):
    """A MetaGraphDef tfplus wrote, and the smallest budget of a session that imports it and runs its train op
    at batch 128 after its initializer."""
    path = tmp_path_factory.mktemp("tfplus") / "mlp.meta"
    with tf.Graph().as_default():
        _mlp(tf)
        tf.train.export_meta_graph(str(path))
    g = tf.Graph()
    with g.as_default():
        tf.train.import_meta_graph(str(path))
        init = tf.global_variables_initializer()
    x, y = g.get_tensor_by_name("x:0"), g.get_tensor_by_name("y:0")
    runs = [(g.get_collection("train_op")[:1], {x: (128, 32), y: (128,)}), (init, {})]
    return path, smallest_budget(g, runs, "cpu")


def test_a_tfplus_meta_graph_plans_as_a_session_of_it_would(tfplus_meta, capsys):
    path, smallest = tfplus_meta
    code, out = _plan(capsys, "--graph", path, "--memory-budget", "1MB", "--json")
    assert code == 0
    assert out["fetch"] == ["Momentum"] and out["batch_size"] == 128
    assert out["fed"] == {"x:0": [128, 32], "y:0": [128]}
    assert out["fits"] and out["smallest_feasible_budget_bytes"] == smallest
    code, small = _plan(capsys, "--graph", path, "--batch-size", "16", "--memory-budget", "1MB", "--json")
    assert code == 0 and small["fed"] == {"x:0": [16, 32], "y:0": [16]}
    assert small["peak_bytes"] < out["peak_bytes"]
    code, err = _plan(capsys, "--graph", path, "--memory-budget", f"{smallest // 2}B")  # under its floor
    assert code == 1 and "it needs at least" in err


@pytest.fixture(scope="module")
def tf_files(tf1, tmp_path_factory):
    """The same step written by TensorFlow: a MetaGraphDef, a binary GraphDef and a text one."""
    folder = tmp_path_factory.mktemp("tf")
    with tf1.Graph().as_default() as g:
        _mlp(tf1)
        tf1.train.export_meta_graph(str(folder / "mlp.meta"))
        tf1.train.write_graph(g, str(folder), "mlp.pb", as_text=False)
        tf1.train.write_graph(g, str(folder), "mlp.pbtxt")
    return folder


def test_tensorflows_meta_graph_and_graph_defs_plan_alike_and_the_max_batch_runs(tf_files, capsys):
    found = []
    for name, fetch in (("mlp.meta", ()), ("mlp.pb", ("--fetch", "Momentum")), ("mlp.pbtxt", ("--fetch", "Momentum"))):
        code, out = _plan(capsys, "--graph", tf_files / name, *fetch, "--memory-budget", "1MB", "--json")
        assert code == 0, name
        assert out["fetch"] == ["Momentum"] and out["fed"] == {"x:0": [128, 32], "y:0": [128]}, name
        found.append(out["smallest_feasible_budget_bytes"])
    assert found[0] == found[1] == found[2]
    code, out = _plan(capsys, "--graph", tf_files / "mlp.meta", "--memory-budget", "400KB", "--max-batch", "--json")
    assert code == 0 and out["max_batch_size"] >= 16 and out["max_batch_confirmed"]  # one step run under 400 kB


def _fixed_batch(folder):
    with tf.Graph().as_default():
        _mlp(tf, x_shape=(8, 32))
        return tf.train.export_meta_graph(str(folder / "fixed.meta")) and folder / "fixed.meta"


def _open_inner(folder):
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, None], name="x")
        w = tf.get_variable("w", [4, 1])
        tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.matmul(tf.reshape(x, [-1, 4]), w)))
        return tf.train.export_meta_graph(str(folder / "open.meta")) and folder / "open.meta"


ERRORS = [
    (lambda d: ["--graph", d / "none.meta"], r"--graph \S*none.meta: no such file; give a MetaGraphDef"),
    (lambda d: ["--graph", (d / "junk.pb").write_bytes(b"\x01\x02junk") and d / "junk.pb"],
     r"junk.pb: neither a MetaGraphDef nor a GraphDef"),
    (lambda d: ["--graph", d / "mlp.pb"], r"mlp.pb: no train op \(a GraphDef has no collections\); give --fetch "
                                          r"NAME \(ops nothing else reads: Momentum, init"),
    (lambda d: ["--graph", d / "mlp.meta", "--fetch", "Momentum_9"], r"--fetch Momentum_9: \S*mlp.meta has no op or "
                                                                     r"tensor named 'Momentum_9'; its ops .*Momentum"),
    (lambda d: ["--graph", _fixed_batch(d), "--batch-size", "16"], r"fixed.meta: --batch-size needs a placeholder "
                                                                   r"whose first dimension is unknown.*'x'"),
    (lambda d: ["--graph", _open_inner(d)], r"open.meta: placeholder 'x' has shape \(None, None\): only the first "
                                            r"dimension \(the batch\) may be unknown"),
    (lambda d: ["--fetch", "Momentum"], r"--fetch names ops of a graph file: give --graph FILE"),
    (lambda d: ["--graph", d / "mlp.meta", "--model", "lenet"], r"--model: not allowed with argument --graph"),
]


@pytest.mark.parametrize("argv, message", ERRORS, ids=["missing", "junk", "no-train-op", "bad-fetch",
                                                        "fixed-batch", "open-dims", "fetch-alone", "model-too"])
def test_bad_files_and_names_are_one_line_errors(tf_files, capsys, argv, message):
    code, err = _plan(capsys, *argv(tf_files))
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err


def test_a_fixed_batch_graph_plans_at_its_batch(tmp_path, capsys):
    code, out = _plan(capsys, "--graph", _fixed_batch(tmp_path), "--json")
    assert code == 0 and out["batch_size"] == 8 and out["fed"] == {"x:0": [8, 32], "y:0": [8]}
    assert np.isfinite(out["peak_bytes"])


def test_max_batch_when_not_one_example_fits_says_what_one_needs(tfplus_meta, capsys):
    path, _ = tfplus_meta
    code, out = _plan(capsys, "--graph", path, "--memory-budget", "20KB", "--max-batch", "--json")
    assert code == 1 and out["max_batch_size"] == 0 and not out["max_batch_confirmed"]
    assert out["batch_1_needs_bytes"] > 2 * 4 * (32 * HIDDEN + HIDDEN * 10)  # the weights and their momentum
    assert main(["plan", "--graph", str(path), "--memory-budget", "20KB", "--max-batch"]) == 1
    assert "max batch size     0: no batch fits 20.0 kB; batch 1 needs 61.0 kB" in capsys.readouterr().out
