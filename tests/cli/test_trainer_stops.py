"""`tfplus train` when it is stopped or something fails under it: every stop and failure saves the last completed
step first (SIGHUP as SIGTERM, a dead or stopped worker process, a full disk under --log/--logdir), a stop right
after a save does not save that step again, a run of any declared length reaches its first step, and --resume
with only --checkpoint-dir restores the options that change the weights (bit-identical to an unbroken run)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import tfplus as tf
from tfplus import tensor_bundle, trainer
from tfplus.cli import main
from tfplus.data import TrainBatches
from tfplus.engine import workers
from tfplus.train import saver as saver_lib

SMALL = ["--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval"]
# `python -c` this, then the command line: main(argv) with a signal sent to the process itself as the
# $STOP_AT-th batch is drawn, so the step it feeds is the last (a real signal, handled as one from outside).
_STOPPER = ("import os, signal, sys\n"
            "from tfplus.data import TrainBatches\n"
            "from tfplus.cli import main\n"
            "_next, seen = TrainBatches.__next__, [0]\n"
            "def next_then_stop(self):\n"
            "    seen[0] += 1\n"
            "    if seen[0] == int(os.environ['STOP_AT']):\n"
            "        os.kill(os.getpid(), getattr(signal, os.environ['STOP_WITH']))\n"
            "    return _next(self)\n"
            "TrainBatches.__next__ = next_then_stop\n"
            "sys.exit(main(sys.argv[1:]))\n")


def _run_stopped(argv, at: int, signame: str, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, STOP_AT=str(at), STOP_WITH=signame)
    return subprocess.run([sys.executable, "-c", _STOPPER, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _stop_at(monkeypatch, at: int, signum=signal.SIGTERM, then=None) -> None:
    """In this process: `signum` as the at-th batch is drawn (or `then()`, if given)."""
    _next, seen = TrainBatches.__next__, [0]

    def next_then_stop(self):
        seen[0] += 1
        if seen[0] == at:
            then() if then else os.kill(os.getpid(), signum)
        return _next(self)
    monkeypatch.setattr(TrainBatches, "__next__", next_then_stop)


def _weights(folder) -> dict[str, np.ndarray]:
    path = tf.train.latest_checkpoint(str(folder))
    return {k: tf.train.load_variable(path, k) for k, _ in tf.train.list_variables(path)}


def _step_of(folder) -> int:
    return int(tf.train.latest_checkpoint(str(folder)).rsplit("-", 1)[1])


def _sessions(monkeypatch) -> list:
    """The sessions the trainer opens, in order."""
    sessions, real = [], trainer._session
    monkeypatch.setattr(trainer, "_session", lambda *a: sessions.append(real(*a)) or sessions[-1])
    return sessions


# -- stops and failures save first ------------------------------------------------------------------------------
def test_sighup_saves_and_stops_as_sigterm_does(tmp_path):
    """A closed terminal (SIGHUP) lost the run: the process died without saving."""
    ckpt = tmp_path / "ckpt"
    proc = _run_stopped(["train", *SMALL, "--steps", "50", "--checkpoint-dir", str(ckpt)], 3, "SIGHUP", tmp_path)
    assert proc.returncode == 129, proc.stderr
    assert f"SIGHUP: stopped at step 3/50; saved {ckpt}/model.ckpt-3; continue with" in proc.stderr
    assert _step_of(ckpt) == 3


def test_a_stop_during_a_periodic_save_does_not_save_that_step_again(tmp_path, monkeypatch, capsys):
    """SIGTERM while step 2's periodic checkpoint is written: the stop's save would write model.ckpt-2 again,
    over the listed one (a kill in between left an index over other data)."""
    saves, real = [], trainer._save

    def save_then_sigterm(saver, sess, folder, step, meta):
        saves.append(step)
        path = real(saver, sess, folder, step, meta)
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return path
    monkeypatch.setattr(trainer, "_save", save_then_sigterm)
    ckpt = tmp_path / "ckpt"
    assert main(["train", *SMALL, "--steps", "9", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2"]) == 143
    assert saves == [2]
    assert f"SIGTERM: stopped at step 2/9; saved {ckpt}/model.ckpt-2;" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_a_worker_that_dies_or_stops_ends_the_run_after_saving(how, tmp_path, monkeypatch, capsys):
    """A worker process killed (or stopped) before step 4: the step fails, the trainer saves step 3 (the
    variables hold it: the parent applies the updates) and stops with one line, exit 1."""
    monkeypatch.setattr(workers, "STOPPED_SECONDS", 0.5)
    sessions = _sessions(monkeypatch)
    pids = []

    def hit_a_worker():
        pids.extend(sessions[0].workers.pids())
        os.kill(pids[-1], getattr(signal, how))
    _stop_at(monkeypatch, 4, then=hit_a_worker)
    ckpt = tmp_path / "ckpt"
    assert main(["train", *SMALL, "--steps", "9", "--workers", "2", "--checkpoint-dir", str(ckpt)]) == 1
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("tfplus train: error: "))
    assert f"worker process {pids[-1]} " in line and "internal error" not in err
    assert line.endswith(f"stopped at step 3/9; saved {ckpt}/model.ckpt-3; continue with --checkpoint-dir "
                         f"{ckpt} --resume")
    assert _step_of(ckpt) == 3


def _fill_disk(log_file):
    """From now on the file's writes fail as on a full disk (ENOSPC): /dev/full."""
    def fill():
        log_file[0]._file = open("/dev/full", "a")
    return fill


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("which", ["log", "logdir"])
def test_a_full_disk_under_a_log_saves_then_stops_naming_the_file(which, tmp_path, monkeypatch, capsys):
    logs, real = [], trainer.JsonLog

    def remembered(path):
        logs.append(real(path))
        return logs[-1]
    monkeypatch.setattr(trainer, "JsonLog", remembered)
    if which == "logdir":  # the event file's writes fail
        made, real_writer = [], tf.summary.FileWriter
        monkeypatch.setattr(tf.summary, "FileWriter", lambda *a, **kw: made.append(real_writer(*a, **kw))
                            or made[-1])
        fill = lambda: setattr(made[0], "_file", open("/dev/full", "wb"))  # noqa: E731
    else:
        fill = _fill_disk(logs)
    _stop_at(monkeypatch, 5, then=fill)
    ckpt, log = tmp_path / "ckpt", tmp_path / "run.jsonl"
    where = ["--logdir", str(tmp_path / "tb")] if which == "logdir" else []
    assert main(["train", *SMALL, "--steps", "9", "--log", str(log), "--log-every", "1", *where,
                 "--checkpoint-dir", str(ckpt)]) == 1
    err = capsys.readouterr().err
    name = f"--log {log}" if which == "log" else f"--logdir event file {made[0].path}"
    assert f"tfplus train: error: cannot write {name} (No space left on device); stopped at step 5/9; saved " \
           f"{ckpt}/model.ckpt-5; continue with --checkpoint-dir {ckpt} --resume" in err
    assert "Traceback" not in err and _step_of(ckpt) == 5


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_log_on_a_full_disk_from_the_start_is_one_line(capsys):
    assert main(["train", *SMALL, "--steps", "2", "--log", "/dev/full"]) == 1
    assert "tfplus train: error: cannot write --log /dev/full (No space left on device)" in capsys.readouterr().err


# -- any declared length ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("length", [["--epochs", "1000000000"], ["--steps", str(2**53)]])
def test_a_huge_declared_length_reaches_its_first_steps(length, tmp_path):
    """The ETA counted the evaluations of every remaining epoch at every step: a billion epochs never reached
    a first step. Stopped after 2 steps (with the test set evaluated each epoch, as by default)."""
    ckpt = tmp_path / "ckpt"
    argv = ["train", "--synthetic", "--model", "lenet", "--batch-size", "16", *length, "--checkpoint-dir",
            str(ckpt)]
    proc = _run_stopped(argv, 2, "SIGTERM", tmp_path, timeout=90)
    assert proc.returncode == 143, proc.stderr
    assert "SIGTERM: stopped at step 2/" in proc.stderr and _step_of(ckpt) == 2


@pytest.mark.parametrize("length,message", [
    ({"steps": 2**63}, f"{2**63} steps is more than the global step can count"),
    ({"epochs": 10**17}, f"{10**17} epochs at 312 steps per epoch is more than the global step can count"),
])
def test_a_length_beyond_the_global_step_is_refused(length, message):
    with pytest.raises(trainer.UsageError, match=message):
        trainer.train(trainer.TrainConfig(model="lenet", synthetic=True, batch_size=16, **length))


# -- --resume restores the run's options ------------------------------------------------------------------------
@pytest.mark.parametrize("options,env", [
    (["--memory-budget", "1.5MB"], {}),     # a plan's micro-batches: other rounding than the whole batch's
    (["--threads", "1"], {}),               # no worker processes, where the default (2 threads) has 2
    ([], {"TFPLUS_WORKERS": "1"}),          # the same, set by the environment
])
def test_resume_with_only_the_folder_gives_the_unbroken_runs_weights(options, env, tmp_path, monkeypatch, capsys):
    """README's `tfplus train --checkpoint-dir DIR --resume` after a stop: the run's options come from the
    checkpoint (they were forgotten: a budgeted run resumed without its budget, another worker count), so the
    weights are bit-identical to an unbroken run's; its --checkpoint-every, --log and --no-eval go on too."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    argv = ["train", *SMALL, "--steps", "6", "--checkpoint-every", "2", *options]
    assert main([*argv, "--checkpoint-dir", str(tmp_path / "unbroken")]) == 0
    ckpt, log = tmp_path / "ckpt", tmp_path / "run.jsonl"
    with monkeypatch.context() as m:
        _stop_at(m, 3)
        assert main([*argv, "--checkpoint-dir", str(ckpt), "--log", str(log), "--log-every", "1"]) == 143
    for k in env:
        monkeypatch.delenv(k)
    capsys.readouterr()

    assert main(["train", "--checkpoint-dir", str(ckpt), "--resume"]) == 0
    want, got = _weights(tmp_path / "unbroken"), _weights(ckpt)
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)
    captured = capsys.readouterr()
    said = next(line for line in captured.err.splitlines() if line.startswith("options from the checkpoint: "))
    assert f"--log {log}" in said and "--checkpoint-every 2" in said and "--no-eval" in said
    assert ("--memory-budget 1.5 MB" in said) == ("--memory-budget" in options)
    assert os.path.exists(ckpt / "model.ckpt-4.index")  # every 2 steps, not only at the end
    assert [r["step"] for r in map(json.loads, open(log)) if r["kind"] == "step"] == [1, 2, 3, 4, 5, 6]
    assert "test acc" not in captured.out


def test_resume_refuses_options_that_change_the_weights_and_takes_the_others(tmp_path, monkeypatch, capsys):
    ckpt = str(tmp_path / "ckpt")
    assert main(["train", *SMALL, "--steps", "4", "--threads", "2", "--workers", "1", "--checkpoint-dir", ckpt]) == 0
    capsys.readouterr()
    for option, message in [(["--threads", "1"], "--threads 1 differs from the checkpoint's 2"),
                            (["--memory-budget", "2MB"], "--memory-budget 2.0 MB differs from the checkpoint's none"),
                            (["--workers", "2"], "--workers 2 differs from the checkpoint's 1")]:
        assert main(["train", "--checkpoint-dir", ckpt, "--resume", *option]) == 2
        err = capsys.readouterr().err
        assert f"tfplus train: error: {message}: a resumed run keeps the options that change its weights" in err
    monkeypatch.setenv("TFPLUS_NUM_THREADS", "1")
    assert main(["train", "--checkpoint-dir", ckpt, "--resume"]) == 2
    assert "--threads 1 differs from the checkpoint's 2" in capsys.readouterr().err
    monkeypatch.delenv("TFPLUS_NUM_THREADS")
    # where it logs may change (and the same values given again are no change)
    log = tmp_path / "other.jsonl"
    assert main(["train", "--checkpoint-dir", ckpt, "--resume", "--threads", "2", "--log", str(log)]) == 0
    assert "options from the checkpoint: --workers 1, --no-eval\n" in capsys.readouterr().err
    assert [r["kind"] for r in map(json.loads, open(log))] == ["start"]


def test_resume_after_kill_9_with_only_the_folder_gives_the_unbroken_runs_weights(tmp_path):
    """The README's resume line after a SIGKILL (nothing saved at the kill: the periodic checkpoint of step 4),
    on a run with a memory budget and every 2 steps a checkpoint."""
    argv = ["train", *SMALL, "--steps", "6", "--checkpoint-every", "2", "--memory-budget", "1.5MB"]
    assert main([*argv, "--checkpoint-dir", str(tmp_path / "unbroken")]) == 0
    ckpt = tmp_path / "ckpt"
    proc = _run_stopped([*argv, "--checkpoint-dir", str(ckpt)], 5, "SIGKILL", tmp_path)
    assert proc.returncode == -signal.SIGKILL and _step_of(ckpt) == 4, proc.stderr
    assert main(["train", "--checkpoint-dir", str(ckpt), "--resume"]) == 0
    want, got = _weights(tmp_path / "unbroken"), _weights(ckpt)
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)


def test_resume_options_of_an_opencl_run():
    """An opencl run's options come back with the README's resume line (its device too: it resumed on the cpu);
    the thread and worker counts change no opencl numbers, so they may differ; a memory budget may not."""
    saved = dict(trainer.RUN_DEFAULTS, device="opencl:0", memory_budget=8 << 20, threads=2, workers=1,
                 checkpoint_every=5)
    cfg, taken = trainer.resolve_options(trainer.TrainConfig(), saved)
    assert (cfg.device, cfg.memory_budget, cfg.checkpoint_every, cfg.workers) == ("opencl:0", 8 << 20, 5, 1)
    assert {"device", "memory_budget", "checkpoint_every"} <= set(taken)
    cfg, taken = trainer.resolve_options(trainer.TrainConfig(threads=1), saved)
    assert cfg.threads == 1 and "threads" not in taken
    with pytest.raises(trainer.UsageError, match="--memory-budget 16.8 MB differs from the checkpoint's 8.4 MB"):
        trainer.resolve_options(trainer.TrainConfig(memory_budget="16MiB"), saved)


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_resume_appends_only_to_a_log_that_a_run_wrote(kind, tmp_path, capsys):
    """A checkpoint folder from elsewhere names the files its run logged to: --resume takes a --log that is a
    run's log (its first line a start row) and a --logdir holding event files, not any file it names (a
    ~/.bashrc would run a recipe's "$(...)" strings at the next login; a FIFO would hang)."""
    ckpt = tmp_path / "ckpt"
    assert main(["train", *SMALL, "--steps", "2", "--checkpoint-dir", str(ckpt), "--log", str(tmp_path / "l")]) == 0
    victim, folder = tmp_path / "victim", tmp_path / "folder"
    if kind == "fifo":
        os.mkfifo(victim)
    else:
        victim.write_text("echo hello\n")
    folder.mkdir()
    path = tf.train.latest_checkpoint(str(ckpt))
    meta = tf.train.read_checkpoint_metadata(path)
    meta["options"].update(log=str(victim), logdir=str(folder))
    reader = tensor_bundle.BundleReader(path)
    tensors = {k: reader.read(k) for k in reader.keys()}
    tensors[saver_lib.METADATA_KEY] = np.array(json.dumps(meta).encode(), dtype=object)
    tensor_bundle.write_bundle(path, tensors)
    capsys.readouterr()
    assert main(["train", "--checkpoint-dir", str(ckpt), "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"the checkpoint's --log {victim} is not a tfplus log (any more): not written" in err
    assert f"the checkpoint's --logdir {folder} is not a tfplus logdir (any more): not written" in err
    assert os.listdir(folder) == [] and (kind == "fifo" or victim.read_text() == "echo hello\n")


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_closed_output_pipe_saves_then_stops(stream, tmp_path):
    """`tfplus train | head` (and `2>&1 | head`): the pipe's close ended the run with what it had saved at the last
    --checkpoint-every, or at no step at all; now the last completed step is saved first."""
    ckpt = tmp_path / "ckpt"
    argv = [sys.executable, "-m", "tfplus", "train", *SMALL, "--epochs", "3", "--checkpoint-every", "1000",
            "--checkpoint-dir", str(ckpt)]
    if stream == "stdout":  # the epoch lines go to stdout: the first ends the pipe's reader
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
    else:  # the progress lines go to stderr
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        proc.stderr.readline()
        proc.stderr.close()
        err = ""
    assert proc.wait(timeout=120) == 1, err
    if stream == "stdout":
        assert "error: cannot write to standard output (Broken pipe); stopped at step" in err and "saved" in err
    assert 0 < _step_of(ckpt) < 3 * 312  # a step of the run's, saved although no --checkpoint-every came due
