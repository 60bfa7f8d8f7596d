"""`tfplus train` in everyday use: a short run's learning rate reaches its peak, --logdir writes what TensorBoard
shows (the graph, a validation run), progress off a terminal comes every few seconds, and the README's training
lines work as written."""
from __future__ import annotations

import glob
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from tfplus import trainer
from tfplus.cli import main

SMALL = ["--synthetic", "--model", "lenet", "--batch-size", "16"]
README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def tiny_set(monkeypatch):
    """A synthetic set of 64 training / 32 test images: 4 steps an epoch at batch 16."""
    monkeypatch.setattr(trainer, "SYNTHETIC_TRAIN", 64)
    monkeypatch.setattr(trainer, "SYNTHETIC_TEST", 32)


def _rows(log, kind: str) -> list[dict]:
    with open(log) as f:
        return [r for r in map(json.loads, f) if r["kind"] == kind]


# -- the learning rate of a short run -----------------------------------------------------------------------------
def test_one_epoch_warms_up_to_the_full_learning_rate(tiny_set, tmp_path):
    """The default warm-up is one epoch: a one-epoch run rises linearly to 0.05 at its last step (the warm-up
    was multiplied into a cosine over the whole run, which peaked at 26% of the rate)."""
    log = tmp_path / "log.jsonl"
    assert main(["train", *SMALL, "--epochs", "1", "--no-eval", "--log", str(log), "--log-every", "1"]) == 0
    assert [r["lr"] for r in _rows(log, "step")] == pytest.approx([0.0125, 0.025, 0.0375, 0.05], rel=1e-6)


def test_the_cosine_decays_over_the_steps_after_the_warm_up(tiny_set, tmp_path, tf1):
    """Three epochs of 4 steps, warm-up 4: steps 0-3 ramp to 0.05, steps 4-11 follow TensorFlow's cosine_decay
    over the 8 steps after the warm-up (Keras's CosineDecay(warmup_steps=4) from its step 4 on)."""
    log = tmp_path / "log.jsonl"
    assert main(["train", *SMALL, "--epochs", "3", "--no-eval", "--log", str(log), "--log-every", "1"]) == 0
    lrs = [r["lr"] for r in _rows(log, "step")]
    with tf1.Graph().as_default(), tf1.Session() as sess:
        want = sess.run([tf1.train.cosine_decay(0.05, t - 4, 8) for t in range(4, 12)])
    assert lrs[:4] == pytest.approx([0.05 * (t + 1) / 4 for t in range(4)], rel=1e-6)
    assert lrs[4:] == pytest.approx(want, rel=1e-5, abs=1e-9)
    assert lrs[4] == pytest.approx(0.05) and max(lrs) == lrs[4]


# -- TensorBoard ---------------------------------------------------------------------------------------------
def _events(tf1, folder) -> list:
    [path] = glob.glob(str(Path(folder) / "events.out.tfevents.*"))
    return list(tf1.train.summary_iterator(path))


def test_logdir_holds_the_graph_and_a_validation_run(tiny_set, tmp_path, tf1):
    """Read back with TensorFlow: the training run's event file has the graph (TensorBoard's GRAPHS tab) and its
    scalars; logdir/validation has the test set's epoch/accuracy and epoch/loss at each evaluated epoch, the tags
    of the training's epoch means, so TensorBoard draws them in the same charts."""
    logdir, log = tmp_path / "tb", tmp_path / "log.jsonl"
    assert main(["train", *SMALL, "--epochs", "2", "--logdir", str(logdir), "--log", str(log)]) == 0
    train = _events(tf1, logdir)
    [graph] = [e.graph_def for e in train if e.graph_def]
    names = {n.name for n in tf1.GraphDef.FromString(graph).node}
    assert "train_op" in names and "images" in names
    tags = {v.tag for e in train for v in e.summary.value}
    assert {"train/loss", "train/lr", "epoch/loss", "epoch/accuracy", "epoch/test_accuracy"} <= tags
    validation = {(e.step, v.tag): v.simple_value for e in _events(tf1, logdir / "validation") for v in e.summary.value}
    epochs = _rows(log, "epoch")
    assert validation == pytest.approx({(r["step"], f"epoch/{k}"): r[f"test_{k}"] for r in epochs
                                        for k in ("accuracy", "loss")})
    assert all(0 < r["test_loss"] < 10 for r in epochs)


# -- progress off a terminal ----------------------------------------------------------------------------------
def test_off_a_terminal_progress_prints_every_few_seconds(monkeypatch):
    """A step a second over a 100-step epoch: a line at the first step, then every 10 s, and at the end (it was
    every 10% of an epoch, however long that took: minutes apart on a slow device)."""
    clock = [0.0]
    monkeypatch.setattr(trainer.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    bar = trainer.Progress(stream, 100, "epoch 1/1")
    for done in range(1, 101):
        clock[0] += 1.0
        bar.update(done, "")
    printed = [int(line.split()[2].split("/")[0]) for line in stream.getvalue().splitlines()]
    assert printed == [1, 11, 21, 31, 41, 51, 61, 71, 81, 91, 100]


# -- the README's training lines ------------------------------------------------------------------------------
def _readme_train_lines() -> list[list[str]]:
    """The `tfplus train` command lines of the README's quick start (comments dropped)."""
    lines = [m.group(1) for m in re.finditer(r"^ {4}tfplus (train [^#\n]*)", README.read_text(), re.M)]
    return [shlex.split(line) for line in lines]


def test_the_readmes_fine_tuning_lines_work_as_written(tmp_path, monkeypatch):
    """Each README line that starts from a checkpoint (--init-from X), run after the README line that makes X
    (--checkpoint-dir X), on the synthetic set for 2 steps: the checkpoint exists and fits the model."""
    monkeypatch.chdir(tmp_path)
    lines = _readme_train_lines()
    makers = {line[line.index("--checkpoint-dir") + 1]: line for line in lines if "--checkpoint-dir" in line}
    fine_tuning = [line for line in lines if "--init-from" in line]
    assert len(fine_tuning) >= 2
    short = ["--synthetic", "--steps", "2", "--batch-size", "8", "--no-eval"]
    for line in fine_tuning:
        source = line[line.index("--init-from") + 1]
        assert source in makers, f"the README never makes the checkpoint {source!r} that {' '.join(line)} uses"
        if not Path(source).exists():
            assert main([*makers[source], *short]) == 0
        assert main([*line, *short]) == 0, " ".join(line)


def test_a_run_keeps_a_bounded_history_with_its_best_epoch():
    """A run of many one-step epochs: its checkpoints carried every epoch's row (their metadata grew with the
    run, past what the Saver reads back); now the last HISTORY_KEPT rows and the best evaluated one."""
    history = []
    for epoch in range(1, 3 * trainer.HISTORY_KEPT):
        acc = 0.9 if epoch == 7 else (0.5 if epoch % 2 else None)
        history = trainer._kept_history(history + [{"epoch": epoch, "test_accuracy": acc}])
    assert len(history) == trainer.HISTORY_KEPT + 1
    assert [r["epoch"] for r in history] == [7, *range(2 * trainer.HISTORY_KEPT, 3 * trainer.HISTORY_KEPT)]
