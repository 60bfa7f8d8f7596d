"""`tfplus train` / `tfplus eval` when things go wrong: a diverging run, bad numbers in flags, an unwritable
checkpoint folder, a full disk, odd checkpoint metadata. Runs `tfplus.cli.main(argv)` in-process."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tfplus as tf
from tfplus.cli import main
from tfplus.data import TrainBatches

SMALL = ["--synthetic", "--model", "lenet", "--batch-size", "16"]


def _checkpoints(folder) -> list:
    """The checkpoints' paths (prefixes of TensorFlow-format checkpoints)."""
    return sorted(p.with_suffix("") for p in folder.iterdir() if p.name.startswith("model.ckpt-")
                  and p.name.endswith(".index"))


def _finite(path) -> bool:
    return all(np.isfinite(tf.train.load_variable(str(path), key)).all()
               for key, _ in tf.train.list_variables(str(path)))


def test_a_diverging_run_stops_with_exit_1_and_keeps_its_finite_checkpoints(tmp_path, capsys):
    """At learning rate 1000 without warm-up the loss is NaN by step 3; checkpoints every step would otherwise
    replace all three kept ones with NaN weights."""
    ckpt = tmp_path / "ckpt"
    argv = ["train", *SMALL, "--steps", "12", "--lr", "1000", "--warmup-steps", "0", "--checkpoint-dir",
            str(ckpt), "--checkpoint-every", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    last = tf.train.latest_checkpoint(str(ckpt))
    assert f"tfplus train: error: training diverged at step 3/12: the loss is nan (learning rate 933); the last " \
           f"checkpoint, {last}, holds finite weights. Start a new run with a lower --lr" in err
    assert _checkpoints(ckpt) and all(_finite(p) for p in _checkpoints(ckpt))
    assert "done:" not in capsys.readouterr().out


def test_non_finite_weights_are_never_saved(tmp_path, capsys, monkeypatch):
    """Weights made non-finite by the last update, while the loss was still finite, are caught by the save:
    an infinite momentum slot before step 2 gives a finite step-2 loss and an infinite bias after it."""
    from tfplus import trainer
    sessions, real_session = [], trainer._session
    monkeypatch.setattr(trainer, "_session", lambda *a: sessions.append(real_session(*a)) or sessions[-1])
    _next, seen = TrainBatches.__next__, [0]

    def next_and_poison(self):
        seen[0] += 1
        if seen[0] == 2:
            sess = sessions[0]
            [slot] = [v for v in sess.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
                      if v.op.name == "fc3/biases/Momentum"]
            slot.load(np.full(slot.shape.as_list(), np.inf, np.float32), session=sess)
        return _next(self)
    monkeypatch.setattr(TrainBatches, "__next__", next_and_poison)
    ckpt = tmp_path / "ckpt"
    assert main(["train", *SMALL, "--steps", "3", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1"]) == 1
    assert "diverged at step 2/3: variable 'fc3/biases' (and 1 more) holds NaN or infinite values" \
        in capsys.readouterr().err
    assert [p.name for p in _checkpoints(ckpt)] == ["model.ckpt-1"] and _finite(ckpt / "model.ckpt-1")


@pytest.mark.parametrize("flag,value,message", [
    ("--lr", "inf", "--lr must be a finite number > 0, got inf"),
    ("--lr", "1e400", "--lr must be a finite number > 0, got inf"),
    ("--lr", "nan", "--lr must be a finite number > 0, got nan"),
    ("--lr", "-0.1", "--lr must be a finite number > 0, got -0.1"),
    ("--learning-rate", "inf", "--lr must be a finite number > 0, got inf"),
    ("--weight-decay", "inf", "--weight-decay must be a finite number >= 0, got inf"),
    ("--weight-decay", "nan", "--weight-decay must be a finite number >= 0, got nan"),
    ("--momentum", "nan", "--momentum must be in [0, 1), got nan"),
    ("--seed", "-1", "--seed must be in [0, 2**63), got -1"),
])
def test_non_finite_and_negative_numbers_are_refused_naming_the_flag(flag, value, message, capsys):
    assert main(["train", *SMALL, "--steps", "2", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"tfplus train: error: {message}"


def test_learning_rate_is_the_long_spelling_of_lr(tmp_path):
    log = tmp_path / "log.jsonl"
    assert main(["train", *SMALL, "--steps", "1", "--learning-rate", "0.01", "--log", str(log)]) == 0
    start = json.loads(log.read_text().splitlines()[0])
    assert start["recipe"]["lr"] == 0.01
