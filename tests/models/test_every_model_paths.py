"""Every model of graphs/ down the paths a user takes: `tfplus train` (odd batch, checkpoints, its own test-set
evaluation), `tfplus eval` of the checkpoint, fine-tuning its last layer from it, kill -9 and --resume, and export to
TensorFlow (the Saver's MetaGraphDef and a GraphDef with the checkpoint).

What runs where, and why: train + eval + fine-tune for every trainable model (seven; alexnet and mobilenet224 take
ImageNet-size images, which the CLI refuses on CIFAR's, so they are exported only), on the cpu and at tiny widths on
a 20-records-per-file CIFAR folder; export for all nine models; kill -9 for seqnet-lstm, the model with both batch
norm and recurrent state (tests/cli/test_cli.py kills LeNet). Budgeted steps of every model, on both devices, are
tests/planner/test_every_model_budgets.py's (planned bytes measured, weights of the unbudgeted step). The wider
sweep behind this file (each model x budget floor/between, resume, fine-tune under a budget, --input, workers,
optimizers, batch 1/7/127, TensorBoard logs, plan --max-batch, federated simulate, on cpu and PoCL) ran as a
script outside the suite: its cells take minutes each on a shared 2-core box.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from modelcheck import checkpoint_variables

import tfplus as tf
from tfplus.cli import main
from tfplus.graphs import MODELS, get_model, training_graph

# Widths that keep each model's step small (CLI --widths / --fc-widths; builder keywords for the export).
WIDTHS = {"mentee": ((4, 4, 8, 8, 8), (16, 8)), "lenet": ((4, 8), (16, 8)), "mobilenet": ((4, 8, 8), None),
          "alexnet": ((4, 8, 8, 8, 8), (16, 16)), "mobilenet224": ((4, 8, 8), None)} | \
    {m: ((6, 8, 8), None) for m in ("seqnet", "seqnet-lstm", "seqnet-bi", "seqnet-bilstm")}
# Image sides for the export: the smallest each model's pooling takes (the CLI trains on 32x32).
EXPORT_SIDE = {"alexnet": 67, "mobilenet224": 32, "lenet": 32}
IMAGENET = ("alexnet", "mobilenet224")
TRAINABLE = sorted(set(MODELS) - set(IMAGENET))
RECORDS = 20  # per CIFAR file: 100 training images, 20 test images


def test_every_model_is_covered():
    assert set(WIDTHS) == set(MODELS)


def _width_args(model: str) -> list[str]:
    conv, fc = WIDTHS[model]
    return ["--widths", ",".join(map(str, conv))] + (["--fc-widths", ",".join(map(str, fc))] if fc else [])


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """A CIFAR-10 folder of RECORDS records per file, which the CLI reads (it expects 10,000 per file)."""
    import functools

    import tfplus.data
    from tfplus.data import read_batches, synthetic, write_binary_batches
    folder = tmp_path_factory.mktemp("cifar")
    write_binary_batches(folder, synthetic(5 * RECORDS, RECORDS))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tfplus.data, "read_batches", functools.partial(read_batches, records_per_file=RECORDS))
        mp.setenv("TFPLUS_WORKERS", "1")
        yield str(folder)


def _train_argv(model: str, cifar: str, ckpt, *extra: str) -> list[str]:
    return ["train", "--model", model, *_width_args(model), "--data", cifar, "--batch-size", "7",
            "--checkpoint-dir", str(ckpt), "--log-every", "1", *extra]


def _epoch_row(log) -> dict:
    with open(log) as f:
        return [r for r in map(json.loads, f) if r["kind"] == "epoch"][-1]


def _eval_correct(out: str) -> int:
    """The number of test images `tfplus eval` printed as right (its table's `all` row)."""
    return int(re.search(r"^all\s+(\d+)\s+(\d+)\s", out, re.M).group(1))


def _floats(path) -> dict:
    return {k: v for k, v in checkpoint_variables(path).items() if np.asarray(v).dtype.kind == "f"}


@pytest.mark.parametrize("model", TRAINABLE)
def test_every_model_trains_evaluates_and_fine_tunes_its_last_layer(model, cifar, tmp_path, capsys):
    """Batch 7 (a last partial batch of 2 in an epoch of 100): the trainer's test accuracy is `tfplus eval`'s of
    the checkpoint it wrote; --fine-tune-last 1 from it changes that layer's variables and leaves the others."""
    pre = tmp_path / "pre"
    assert main(_train_argv(model, cifar, pre, "--steps", "2", "--log", str(tmp_path / "pre.jsonl"))) == 0
    acc = _epoch_row(tmp_path / "pre.jsonl")["test_accuracy"]
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(pre)]) == 0
    assert _eval_correct(capsys.readouterr().out) == round(acc * RECORDS), model

    tuned = tmp_path / "tuned"
    assert main(_train_argv(model, cifar, tuned, "--steps", "2", "--no-eval", "--init-from", str(pre),
                            "--fine-tune-last", "1")) == 0
    before, after = _floats(pre), _floats(tuned)
    shared = sorted(set(before) & set(after) - {"global_step"})
    changed = {n for n in shared if not np.array_equal(before[n], after[n])}
    assert changed, f"{model}: fine-tuning changed no variable"
    layers = {n.split("/")[0] for n in changed}
    assert len(layers) == 1, f"{model}: fine-tuning the last layer changed {sorted(changed)}"
    last, = layers
    frozen = [n for n in shared if n.split("/")[0] != last]
    assert frozen and not changed & set(frozen)


def test_resume_after_kill_9_gives_the_weights_of_an_unbroken_run(cifar, tmp_path):
    """seqnet-lstm (batch norm's moving statistics, LSTM state, momentum slots): killed during step 4 with a
    checkpoint every 2 steps, then --resume to step 5: every variable of the run never stopped, bit for bit."""
    model = "seqnet-lstm"
    assert main(_train_argv(model, cifar, tmp_path / "ref", "--steps", "5", "--no-eval")) == 0
    argv = _train_argv(model, cifar, tmp_path / "ckpt", "--steps", "5", "--no-eval", "--checkpoint-every", "2")
    killer = ("import functools, os, signal, sys\n"
              "import tfplus.data\n"
              "from tfplus.data import TrainBatches, read_batches\n"
              "from tfplus.cli import main\n"
              f"tfplus.data.read_batches = functools.partial(read_batches, records_per_file={RECORDS})\n"
              "_next, seen = TrainBatches.__next__, [0]\n"
              "def next_or_die(self):\n"
              "    seen[0] += 1\n"
              "    if seen[0] == 4:\n"
              "        os.kill(os.getpid(), signal.SIGKILL)\n"
              "    return _next(self)\n"
              "TrainBatches.__next__ = next_or_die\n"
              "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", killer, *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TFPLUS_WORKERS="1"))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert [f for f in os.listdir(tmp_path / "ckpt") if f.endswith(".index")] == ["model.ckpt-2.index"]
    assert main(["train", "--checkpoint-dir", str(tmp_path / "ckpt"), "--resume"]) == 0
    got, want = checkpoint_variables(tmp_path / "ckpt" / "model.ckpt-5"), checkpoint_variables(
        tmp_path / "ref" / "model.ckpt-5")
    assert set(got) == set(want)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_model_exports_to_tensorflow(model, tf1, tmp_path):
    """The trained graph (NHWC: TensorFlow's cpu convolutions take no NCHW) and its checkpoint, imported by
    TensorFlow from the Saver's .meta and from a GraphDef, give tfplus's logits (evaluation mode: alexnet's
    dropout draws its own masks in training mode)."""
    conv, fc = WIDTHS[model]
    kwargs = {"conv_widths": conv} | ({"fc_widths": fc} if fc else {})
    side = EXPORT_SIDE.get(model, 8)
    m = get_model(model)
    tg = training_graph(m.build, total_steps=10, seed=0, model_kwargs=kwargs, image_shape=(3, side, side),
                        data_format="NHWC")
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((3, side, side, 3)).astype(np.float32),
             tg.labels: rng.integers(0, 10, 3).astype(np.int32)}
    logits = tg.eval_logits if tg.eval_logits is not None else tg.logits
    with tg.graph.as_default():
        saver = tf.train.Saver()
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        sess.run(tg.train_op, feeds)
        want = sess.run(logits, feeds)
        path = saver.save(sess, str(tmp_path / "model"))
        tf.train.write_graph(tg.graph.as_graph_def(), str(tmp_path), "graph.pb", as_text=False)
    by_name = {t.name: v for t, v in feeds.items()}
    with tf1.Graph().as_default() as g, tf1.Session(graph=g) as sess:
        tf1.train.import_meta_graph(path + ".meta").restore(sess, path)
        np.testing.assert_allclose(sess.run(logits.name, by_name), want, rtol=1e-4, atol=1e-5, err_msg=model)
    graph_def = tf1.GraphDef()
    graph_def.ParseFromString((tmp_path / "graph.pb").read_bytes())
    with tf1.Graph().as_default() as g, tf1.Session(graph=g) as sess:
        tf1.import_graph_def(graph_def, name="")
        variables = {op.name: op.outputs[0] for op in g.get_operations() if op.type == "VariableV2"}
        tf1.train.Saver(var_list=variables).restore(sess, path)
        np.testing.assert_allclose(sess.run(logits.name, by_name), want, rtol=1e-4, atol=1e-5, err_msg=model)


COMMANDS = [["train"], ["eval"], ["plan"], ["profile"], ["devices"], ["federated", "simulate"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_help_shows_percent_signs_as_written(command, capsys):
    """A `%` in a help text or description is escaped as `%%` only where argparse formats it (an option's help):
    `tfplus profile --help` printed its description's '%% of the step'."""
    assert main([*command, "--help"]) == 0
    assert "%%" not in capsys.readouterr().out


def test_eval_under_too_small_a_budget_names_its_batch_and_option(cifar, tmp_path, capsys):
    """`tfplus eval --memory-budget` runs the test set in training-size batches; when they do not fit, the one-line
    error's "or a smaller batch" says which batch and the option that sets it (it named neither)."""
    assert main(_train_argv("lenet", cifar, tmp_path / "ck", "--steps", "1", "--no-eval")) == 0
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(tmp_path / "ck"), "--memory-budget", "100kB"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tfplus eval: error: --memory-budget: "), err
    assert "the test batches hold 7 images (--batch-size; under a budget the default is the training batch)" in err
