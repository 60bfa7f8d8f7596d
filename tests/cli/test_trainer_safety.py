"""`tfplus train` / `tfplus eval` when things go wrong: a diverging run, bad numbers in flags, an unwritable
checkpoint folder, a full disk, odd checkpoint metadata. Runs `tfplus.cli.main(argv)` in-process."""
from __future__ import annotations

import copy
import errno
import json
import os
import shutil
import tempfile
import time

import numpy as np
import pytest

import tfplus as tf
from tfplus import tensor_bundle
from tfplus.cli import main
from tfplus.data import TrainBatches
from tfplus.train import saver as saver_lib

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
    # The loss is read at the checkpoints (and log rows, progress lines), not at every step: here the sum of
    # steps 1-3, read at step 3's checkpoint.
    assert f"tfplus train: error: training diverged at step 3/12: the mean loss of steps 1-3 is nan (learning " \
           f"rate 933); the last " \
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
    ("--seed", "-1", "argument --seed: must be >= 0, got -1"),  # checked by the parser
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


@pytest.mark.parametrize("where,why", [
    ("file", "it is a file, not a folder"),
    ("file/sub", "Not a directory"),
    ("readonly/sub", "Permission denied"),
    ("readonly", "Permission denied"),
])
def test_an_unwritable_checkpoint_folder_is_refused_before_training(where, why, tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    (tmp_path / "readonly").mkdir(mode=0o555)
    if where.startswith("readonly") and os.geteuid() == 0:  # root writes anywhere: play the refusal
        def refuse(*args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied")
        monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    folder = tmp_path / where
    log = tmp_path / "log.jsonl"
    assert main(["train", *SMALL, "--steps", "2", "--checkpoint-dir", str(folder), "--log", str(log)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tfplus train: error: --checkpoint-dir {folder}: cannot write checkpoints there (")
    assert why in err and len(err.splitlines()) == 1
    assert not log.exists()  # nothing ran


@pytest.mark.parametrize("flag", ["--checkpoint-dir", "--log"])
def test_empty_paths_are_refused(flag, capsys):
    assert main(["train", *SMALL, "--steps", "1", flag, ""]) == 2
    assert f"error: argument {flag}: empty path; give a" in capsys.readouterr().err  # refused by the parser


def test_a_full_disk_is_a_clear_error_and_keeps_the_earlier_checkpoints(tmp_path, monkeypatch, capsys):
    real = tensor_bundle.atomic_open

    def disk_full_after_step_1(path):
        if "model.ckpt-1." not in path:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path)
    monkeypatch.setattr(tensor_bundle, "atomic_open", disk_full_after_step_1)
    ckpt = tmp_path / "ckpt"
    assert main(["train", *SMALL, "--steps", "3", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"tfplus train: error: cannot write the checkpoint of step 2 into {ckpt} (No space left on " \
                  f"device); the last checkpoint, {ckpt / 'model.ckpt-1'}, is intact. Free some space, then " \
                  "continue with --resume"
    assert sorted(os.listdir(ckpt)) == ["checkpoint", "model.ckpt-1.data-00000-of-00001", "model.ckpt-1.index"]
    assert tf.train.latest_checkpoint(str(ckpt)) == str(ckpt / "model.ckpt-1")


def test_orphan_temporary_files_of_killed_writes_are_removed(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    orphans = [".model.ckpt-8.0123456789ab.tmp", ".checkpoint.abcdef012345.tmp"]
    others = ["notes.tmp", ".model.ckpt-8.tmp", ".model.ckpt-8.0123456789AB.tmp", "model.ckpt-8.0123456789ab.tmp"]
    for name in orphans + others:
        (ckpt / name).write_text("x")
    (ckpt / ".folder.0123456789ab.tmp").mkdir()  # not a file: not ours
    (tmp_path / "target").write_text("keep")
    os.symlink(tmp_path / "target", ckpt / ".link.0123456789ab.tmp")
    assert main(["train", *SMALL, "--steps", "1", "--checkpoint-dir", str(ckpt)]) == 0
    assert "removed 2 temporary files of interrupted checkpoint writes" in capsys.readouterr().err
    assert sorted(os.listdir(ckpt)) == sorted(["checkpoint", "model.ckpt-1.data-00000-of-00001", "model.ckpt-1.index",
                                               ".folder.0123456789ab.tmp",
                                               ".link.0123456789ab.tmp", *others])
    assert (tmp_path / "target").read_text() == "keep"


# -- checkpoint metadata with a valid checksum but odd contents ----------------------------------------------
@pytest.fixture(scope="module")
def run4(tmp_path_factory):
    """A finished 4-step run's checkpoint folder."""
    folder = tmp_path_factory.mktemp("run4") / "ckpt"
    assert main(["train", *SMALL, "--steps", "4", "--checkpoint-dir", str(folder)]) == 0
    return folder


def rewrite_metadata(path, meta_json: str) -> None:
    """Replaces a checkpoint's metadata (the string entry of the trainer's TensorFlow-format checkpoints), with
    valid checksums (what a crafted file can do)."""
    reader = tensor_bundle.BundleReader(path)
    tensors = {k: reader.read(k) for k in reader.keys()}
    tensors[saver_lib.METADATA_KEY] = np.array(meta_json.encode(), dtype=object)
    tensor_bundle.write_bundle(path, tensors)


def _edited(meta, edit):
    meta = copy.deepcopy(meta)
    where, key = (meta, edit[0]) if len(edit) == 2 else (meta[edit[0]], edit[1])
    if edit[-1] is DELETE:
        del where[key]
    else:
        where[key] = edit[-1]
    return meta


DELETE = object()
ODD_METADATA = [  # (edit: (key, value) or (key, subkey, value), what the error names)
    (("step", DELETE), "step is missing"),
    (("step", "4"), 'step must be a whole number >= 0, got "4"'),
    (("step", 10**30), "step must be a whole number >= 0, got 1000000000000000000000000000000"),
    (("step", None), "step must be a whole number"),
    (("recipe", [1, 2]), "recipe must be an object, got [1, 2]"),
    (("recipe", DELETE), "not a checkpoint of `tfplus train`"),
    (("format", 2), "checkpoint format 2; this tfplus reads format 1"),
    (("recipe", "batch_size", "16"), 'recipe.batch_size must be a whole number >= 1, got "16"'),
    (("recipe", "batch_size", True), "recipe.batch_size must be a whole number >= 1, got true"),
    (("recipe", "lr", float("inf")), "recipe.lr must be a finite number >= 0, got Infinity"),
    (("recipe", "lr", 0), "its recipe is invalid: --lr must be a finite number > 0, got 0"),
    (("recipe", "conv_widths", [8, -1]),
     "recipe.conv_widths must be null or a list, each item a whole number >= 1, got [8, -1]"),
    (("recipe", "model", None), "recipe.model must be a string, got null"),
    (("recipe", "model", "resnet"), "its recipe is invalid: unknown model 'resnet'"),
    (("recipe", "seed", DELETE), "recipe.seed is missing"),
    (("recipe", "warmup_steps", 10**400), "recipe.warmup_steps must be a whole number >= 0, got 1000"),
    (("data_state", {"epoch": 0}), "data_state.seed is missing"),
    (("data_state", "epoch", -1), "data_state.epoch must be a whole number >= 0, got -1"),
    (("history", "x"), 'history must be a list, each item an object with epoch, test_accuracy, got "x"'),
    (("history", [{"epoch": 1}]), "history must be a list, each item an object"),
    (("sums", [1, 2]), "sums must be [loss sum, accuracy sum, steps], got [1, 2]"),
    (("window", [1, -2, 0]), "window must be [loss sum, accuracy sum, steps], got [1, -2, 0]"),
    (("data", 5), "data must be null or a string, got 5"),
    (("elapsed_s", {"a": [[[[[]]]]]}), 'elapsed_s must be a finite number >= 0, got {"a": [[[[[]]]]]}'),
]


@pytest.mark.parametrize("edit,message", ODD_METADATA, ids=[m for _, m in ODD_METADATA])
def test_odd_metadata_is_one_clear_line_in_eval_and_resume(edit, message, run4, tmp_path, capsys):
    folder = tmp_path / "ckpt"
    shutil.copytree(run4, folder)
    path = tf.train.latest_checkpoint(str(folder))
    rewrite_metadata(path, json.dumps(_edited(tf.train.read_checkpoint_metadata(path), edit)))
    for argv in (["eval", "--checkpoint", str(folder)], ["train", "--checkpoint-dir", str(folder), "--resume"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"tfplus {argv[0]}: error: {path}: ") and message in err, err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize("meta_json,message", [
    ("[" * 100_000 + "]" * 100_000, "its metadata is nested too deeply"),
    ('{"format": 1, "recipe": ' + "[" * 100_000 + "]" * 100_000 + "}", "its metadata is nested too deeply"),
    ("{not json", "cannot be decoded"),
    ('"a string"', "not a checkpoint of `tfplus train`"),
])
def test_metadata_that_is_not_an_object_or_too_deep(meta_json, message, run4, tmp_path, capsys):
    folder = tmp_path / "ckpt"
    shutil.copytree(run4, folder)
    rewrite_metadata(tf.train.latest_checkpoint(str(folder)), meta_json)
    for argv in (["eval", "--checkpoint", str(folder)], ["train", "--checkpoint-dir", str(folder), "--resume"]):
        assert main(argv) in (1, 2)
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"tfplus {argv[0]}: error: ") and message in err and len(err.splitlines()) == 1


def test_data_state_that_disagrees_with_the_run_is_refused_on_resume(run4, tmp_path, capsys):
    folder = tmp_path / "ckpt"
    shutil.copytree(run4, folder)
    path = tf.train.latest_checkpoint(str(folder))
    rewrite_metadata(path, json.dumps(_edited(tf.train.read_checkpoint_metadata(path), ("data_state", "seed", 7))))
    assert main(["train", "--checkpoint-dir", str(folder), "--resume"]) == 2
    assert f"{path}: inconsistent checkpoint" in capsys.readouterr().err


# -- everyday use: evaluation when asked, progress, a whole-run ETA, the memory plan in use -------------------
@pytest.fixture
def tiny_set(monkeypatch):
    """A synthetic set of 64 training / 32 test images: 4 steps an epoch at batch 16."""
    from tfplus import trainer
    monkeypatch.setattr(trainer, "SYNTHETIC_TRAIN", 64)
    monkeypatch.setattr(trainer, "SYNTHETIC_TEST", 32)


def _epoch_rows(log) -> list[dict]:
    return [r for r in map(json.loads, open(log)) if r["kind"] == "epoch"]


def test_no_eval_and_eval_every(tiny_set, tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    assert main(["train", *SMALL, "--epochs", "3", "--no-eval", "--log", str(log)]) == 0
    captured = capsys.readouterr()
    assert [r["test_accuracy"] for r in _epoch_rows(log)] == [None, None, None]
    assert "test set" not in captured.err and "test acc" not in captured.out
    assert "; no test evaluation; " in captured.out
    log.unlink()
    assert main(["train", *SMALL, "--epochs", "3", "--eval-every", "2", "--log", str(log),
                 "--checkpoint-dir", str(tmp_path / "ckpt")]) == 0
    accs = [r["test_accuracy"] for r in _epoch_rows(log)]
    assert accs[0] is None and 0 <= accs[1] <= 1 and 0 <= accs[2] <= 1  # every 2nd epoch, and the last
    captured = capsys.readouterr()
    assert captured.out.count("  test acc ") == 2 and "test accuracy final" in captured.out
    assert "test set 1/1 batches" in captured.err  # progress while evaluating
    assert main(["eval", "--checkpoint", str(tmp_path / "ckpt"), "--batch-size", "8"]) == 0
    assert "test set 4/4 batches" in capsys.readouterr().err
    assert main(["train", *SMALL, "--steps", "3", "--no-eval", "--eval-every", "2"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_eta_covers_the_whole_run(tiny_set, monkeypatch, capsys):
    """With a clock that ticks one second per reading, each step takes the same time: the ETA shown at the
    first step of the second of three epochs covers 7 steps, at the first step of the last epoch 3. The first
    step of the run builds its programs: it times no pace and shows no ETA (issue 32, item 13)."""
    ticks = iter(range(10**6))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))
    assert main(["train", *SMALL, "--epochs", "3", "--no-eval"]) == 0
    err = capsys.readouterr().err
    firsts = [line for line in err.splitlines() if " 1/4 " in line]
    assert len(firsts) == 3 and firsts[0].endswith("timing the steps...") and "ETA" not in firsts[0]
    etas = [line.split("run ETA ")[1] for line in firsts[1:]]
    seconds = [int(m) * 60 + int(s) for m, s in (e.split(":") for e in etas)]
    assert seconds[0] > 3 * seconds[1] / 2 > 0
    assert "epoch mean loss" in err


def test_the_memory_plan_in_use_is_shown(capsys):
    assert main(["train", *SMALL, "--steps", "1", "--no-eval", "--memory-budget", "4MB"]) == 0
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("memory plan"))
    assert line.startswith("memory plan for --memory-budget 4.0 MB: 1 micro-batch, ") and "planned peak" in line


def test_console_means_are_labelled(capsys):
    assert main(["train", "--help"]) == 0
    assert "running means over the current epoch" in capsys.readouterr().out


def test_a_short_run_stays_in_its_warm_up(tmp_path):
    """The default warm-up is one epoch however short the run: a 6-step run of a (narrow) Mentee no longer
    reaches the full learning rate at step 3, where its loss jumped from 4.7 to 15.6."""
    log = tmp_path / "log.jsonl"
    assert main(["train", "--synthetic", "--batch-size", "32", "--widths", "8,8,16,16,32", "--fc-widths",
                 "32,32", "--steps", "6", "--no-eval", "--log", str(log), "--log-every", "1"]) == 0
    rows = [json.loads(line) for line in open(log)]
    assert rows[0]["recipe"]["warmup_steps"] == 5000 // 32
    losses = [r["loss"] for r in rows if r["kind"] == "step"]
    assert len(losses) == 6 and max(losses) < 1.2 * losses[0]
