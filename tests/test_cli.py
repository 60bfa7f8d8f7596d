"""The `tfplus` command line: train / eval / devices on the synthetic dataset, exact resume, bad options.

Runs `tfplus.cli.main(argv)` in-process, except the kill -9 test, which needs a process to kill.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest

import tfplus
from tfplus.cli import main
from tfplus.data import CLASSES, TrainBatches

# LeNet at batch 16 on the synthetic set: a few milliseconds a step on a laptop.
SMALL = ["--synthetic", "--model", "lenet", "--batch-size", "16", "--log-every", "1"]
STEPS = 24


def _rows(path, kind="step") -> list[dict]:
    with open(path) as f:
        return [r for r in map(json.loads, f) if r["kind"] == kind]


def _losses(path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in _rows(path)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run: its log and checkpoint folder."""
    d = tmp_path_factory.mktemp("reference")
    code = main(["train", *SMALL, "--steps", str(STEPS), "--log", str(d / "log.jsonl"),
                 "--checkpoint-dir", str(d / "ckpt")])
    assert code == 0
    return d


def test_version_help_and_devices(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tfplus {tfplus.__version__}"
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in ("train", "eval", "devices"))
    assert main(["train", "--help"]) == 0
    assert "cosine" in capsys.readouterr().out
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cpu") and "opencl" in out


def test_train_smoke_logs_and_loss_falls(reference, capsys):
    rows = _rows(reference / "log.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    fields = {"kind", "step", "epoch", "loss", "accuracy", "lr", "images_per_sec", "peak_bytes", "h2d_bytes",
              "d2h_bytes"}
    assert all(set(r) == fields for r in rows)
    losses = [r["loss"] for r in rows]
    assert sum(losses[-5:]) < sum(losses[:5])
    # a cosine to 0 and a warm-up of one epoch (312 steps), longer than the run
    lrs = [0.05 * (1 + math.cos(math.pi * t / STEPS)) / 2 * (t + 1) / 312 for t in range(STEPS)]
    assert [r["lr"] for r in rows] == pytest.approx(lrs, abs=1e-7)  # float32
    assert rows[-1]["h2d_bytes"] > rows[0]["h2d_bytes"] > 0 and rows[0]["peak_bytes"] > 0
    [epoch] = _rows(reference / "log.jsonl", "epoch")
    assert 0 <= epoch["test_accuracy"] <= 1 and epoch["step"] == STEPS
    assert os.path.exists(reference / "ckpt" / f"model.ckpt-{STEPS}.index")  # TensorFlow's format


def test_resume_after_kill_9_repeats_the_run(reference, tmp_path):
    """kill -9 during step 13 (checkpoints every 8 steps), then --resume: the losses of an unbroken run."""
    argv = ["train", *SMALL, "--steps", str(STEPS), "--checkpoint-dir", str(tmp_path / "ckpt"),
            "--checkpoint-every", "8"]
    killer = ("import os, signal, sys\n"
              "from tfplus.data import TrainBatches\n"
              "from tfplus.cli import main\n"
              "_next, seen = TrainBatches.__next__, [0]\n"
              "def next_or_die(self):\n"
              "    seen[0] += 1\n"
              "    if seen[0] == 13:\n"
              "        os.kill(os.getpid(), signal.SIGKILL)\n"
              "    return _next(self)\n"
              "TrainBatches.__next__ = next_or_die\n"
              "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", killer, *argv, "--log", str(tmp_path / "killed.jsonl")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["checkpoint", "model.ckpt-8.data-00000-of-00001",
                                                     "model.ckpt-8.index"]

    assert main([*argv, "--resume", "--log", str(tmp_path / "resumed.jsonl")]) == 0
    want = _losses(reference / "log.jsonl")
    killed, resumed = _losses(tmp_path / "killed.jsonl"), _losses(tmp_path / "resumed.jsonl")
    assert sorted(killed) == list(range(1, 13)) and sorted(resumed) == list(range(9, STEPS + 1))
    assert killed == {s: want[s] for s in killed}
    assert resumed == {s: want[s] for s in resumed}  # bit for bit on the cpu
    ref_epoch, = _rows(reference / "log.jsonl", "epoch")
    epoch, = _rows(tmp_path / "resumed.jsonl", "epoch")
    assert (epoch["loss"], epoch["test_accuracy"]) == (ref_epoch["loss"], ref_epoch["test_accuracy"])


def test_ctrl_c_saves_then_resume_and_eval(reference, tmp_path, monkeypatch, capsys):
    """SIGINT during step 11 finishes that step, saves, exits 130; --resume ends the run; eval reads it."""
    argv = ["train", *SMALL, "--steps", str(STEPS), "--checkpoint-dir", str(tmp_path / "ckpt"),
            "--log", str(tmp_path / "log.jsonl")]
    _next, seen = TrainBatches.__next__, [0]

    def next_with_ctrl_c(self):
        seen[0] += 1
        if seen[0] == 11:
            os.kill(os.getpid(), signal.SIGINT)
        return _next(self)

    monkeypatch.setattr(TrainBatches, "__next__", next_with_ctrl_c)
    assert main(argv) == 130
    assert "SIGINT: stopped at step 11" in capsys.readouterr().err
    assert os.path.exists(tmp_path / "ckpt" / "model.ckpt-11.index")
    monkeypatch.undo()

    assert main([*argv, "--resume"]) == 0
    assert _losses(tmp_path / "log.jsonl") == _losses(reference / "log.jsonl")
    capsys.readouterr()
    # The epoch row written after the resume covers the whole epoch, both processes' parts of it.
    ref_epoch, = _rows(reference / "log.jsonl", "epoch")
    epoch, = _rows(tmp_path / "log.jsonl", "epoch")
    # Every batch went in, as in the unbroken run, plus the restored variables; the second process alone fed
    # 11 batches (of 196,608 bytes) fewer.
    assert epoch["h2d_bytes"] >= ref_epoch["h2d_bytes"] > 0
    assert epoch["images_per_sec"] * epoch["epoch_time_s"] == pytest.approx(STEPS * 16)

    assert main(["eval", "--checkpoint", str(tmp_path / "ckpt")]) == 0
    out = capsys.readouterr().out
    table = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert list(table) == [*CLASSES, "all"]
    assert sum(int(table[c][2]) for c in CLASSES) == int(table["all"][2]) == 1000
    epoch, = _rows(reference / "log.jsonl", "epoch")
    assert float(table["all"][3].rstrip("%")) == pytest.approx(100 * epoch["test_accuracy"], abs=0.01)


def test_sigterm_without_checkpoint_dir_exits_143(monkeypatch, capsys):
    _next, seen = TrainBatches.__next__, [0]

    def next_with_sigterm(self):
        seen[0] += 1
        if seen[0] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return _next(self)

    monkeypatch.setattr(TrainBatches, "__next__", next_with_sigterm)
    assert main(["train", *SMALL, "--steps", "5"]) == 143
    assert "SIGTERM: stopped at step 2/5; nothing saved (no --checkpoint-dir)" in capsys.readouterr().err


def test_existing_checkpoint_needs_resume_and_the_same_recipe(reference, capsys):
    ckpt = str(reference / "ckpt")
    assert main(["train", *SMALL, "--steps", str(STEPS), "--checkpoint-dir", ckpt]) == 2
    assert "pass --resume" in capsys.readouterr().err
    resume = ["--checkpoint-dir", ckpt, "--resume"]
    assert main(["train", *SMALL, "--steps", str(STEPS), "--lr", "0.1", *resume]) == 2
    assert "--lr 0.1 differs from the checkpoint's 0.05" in capsys.readouterr().err
    assert main(["train", *SMALL, "--epochs", "3", *resume]) == 2
    assert "keeps its length" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["train", "--model", "resnet"], "unknown model 'resnet'"),
    (["train", "--device", "tpu"], "unknown device 'tpu'"),
    (["train", "--batch-size", "0"], "--batch-size: must be >= 1"),
    (["train", "--epochs", "2", "--steps", "3"], "not allowed with argument"),
    (["train", "--memory-budget", "64M"], "ambiguous"),
    (["train", "--resume"], "--resume needs --checkpoint-dir"),
    (["train", "--synthetic", "--data", "."], "not both"),
    (["train", "--data", "{tmp}/missing"], "no such directory"),
    (["train", "--data", "{tmp}/file"], "not a directory"),
    (["train", "--synthetic", "--widths", "8,8,8,8,8,8,8,8,8,8,8,8"], "cannot build model"),
    (["train", *SMALL, "--steps", "2", "--device", "opencl:9"], "--device opencl:9: "),
    (["train", *SMALL, "--steps", "2", "--memory-budget", "10kB"], "the step needs at least"),
    (["eval"], "--checkpoint"),
    (["eval", "--checkpoint", "{tmp}"], "no checkpoint"),
])
def test_bad_options_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("tfplus")
