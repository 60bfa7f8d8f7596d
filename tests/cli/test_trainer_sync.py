"""The training loop reads nothing back from the device between log rows (so the host queues step k+1 while the
device runs step k), and what it logs is what the old per-step read-back logged: the means of the steps'
losses and accuracies, and each row's step's learning rate."""
from __future__ import annotations

import io
import json
import os
import signal

import numpy as np
import pytest

import tfplus as tf
from tfplus import data as tfdata
from tfplus import trainer
from tfplus.cli import main
from tfplus.data import TrainBatches
from tfplus.runtime.cpu import CPURuntime

TINY = dict(model="lenet", synthetic=True, batch_size=16, eval_every=0)


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal: the progress bar redraws in place and prints no lines of its own
    (off a terminal, each of its ~10% lines reads the running means)."""

    def isatty(self) -> bool:
        return True


def _count_reads(monkeypatch, device: str) -> list[int]:
    """A list whose one item counts the calls that wait for the device: synchronize, copy_out (on opencl, of
    device memory: a value computed on the host from constants and shapes is copied from its host copy) and, on
    opencl, blocking host<->device copies."""
    calls = [0]

    def counted(f):
        def wrapper(self, *a):
            calls[0] += device == "cpu" or f.__name__ == "synchronize" or a[0].block.host is None
            return f(self, *a)
        return wrapper
    if device == "cpu":
        runtime = CPURuntime
    else:
        from tfplus.runtime import opencl
        runtime = opencl.OpenCLRuntime
        copy = opencl.cl.enqueue_copy

        def enqueue_copy(queue, dest, src, **kw):
            if kw.get("is_blocking", True) and (isinstance(dest, np.ndarray) or isinstance(src, np.ndarray)):
                calls[0] += 1
            return copy(queue, dest, src, **kw)
        monkeypatch.setattr(opencl.cl, "enqueue_copy", enqueue_copy)
    for name in ("copy_out", "synchronize"):
        monkeypatch.setattr(runtime, name, counted(getattr(runtime, name)))
    return calls


@pytest.mark.parametrize("where", ["host", "device"])
def test_no_read_back_between_log_rows(device, where, monkeypatch):
    calls = _count_reads(monkeypatch, device)
    per_step, seen, _next = [], [], TrainBatches.__next__

    def next_and_count(self):  # called as each step starts: the reads since the last call are the last step's
        seen.append(calls[0])
        return _next(self)
    monkeypatch.setattr(TrainBatches, "__next__", next_and_count)
    # Batches of 4: PoCL's unoptimized kernels on a busy CI box take seconds per step of 16.
    cfg = trainer.TrainConfig(**dict(TINY, batch_size=4), steps=8, log_every=3, device=device, input=where)
    result = trainer.train(cfg, out=io.StringIO(), err=_Terminal())
    assert result.steps == 8
    per_step = dict(enumerate(np.diff(seen), start=1))  # step -> its reads (steps 1..7)
    # Step 1 is read once (the first-step line says when it was done); rows at 3 and 6 read the sums and the
    # learning rate; every other step none.
    assert {s: n for s, n in per_step.items() if s not in (1, 3, 6)} == dict.fromkeys((2, 4, 5, 7), 0)
    assert per_step[3] > 0 and per_step[6] > 0


def _old_way(device: str, steps: int) -> tuple[list, list, list]:
    """Each step's loss, accuracy and learning rate, fetched with the step (what the trainer did before)."""
    cfg = trainer.resolve(trainer.TrainConfig(**TINY, steps=steps, device=device))
    dataset, _ = trainer.load_data(synthetic=True)
    cfg.warmup_steps = trainer.default_warmup(len(dataset.train_labels) // cfg.batch_size)
    tg = trainer.build_graph(cfg, steps)
    sess = tf.Session(graph=tg.graph, device=device)
    sess.run(tg.init_op)
    losses, accs, lrs = [], [], []
    with tfdata.train_batches(dataset, cfg.batch_size, seed=cfg.seed) as batches:
        for _ in range(steps):
            x, y = next(batches)
            _, loss, acc, lr = sess.run([tg.train_op, tg.loss, tg.accuracy, tg.learning_rate],
                                        {tg.images: x, tg.labels: y})
            losses.append(float(loss)), accs.append(float(acc)), lrs.append(float(lr))
    sess.close()
    return losses, accs, lrs


@pytest.mark.parametrize("device", ["cpu"])  # the device's sums are the same ops on opencl (test above)
def test_logged_means_are_the_means_of_the_steps(device, tmp_path):
    log = tmp_path / "log.jsonl"
    trainer.train(trainer.TrainConfig(**TINY, steps=10, log_every=4, device=device, log=str(log)),
                  out=io.StringIO(), err=io.StringIO())
    rows = [json.loads(line) for line in open(log)]
    steps, [epoch] = [r for r in rows if r["kind"] == "step"], [r for r in rows if r["kind"] == "epoch"]
    losses, accs, lrs = _old_way(device, 10)
    assert [r["step"] for r in steps] == [4, 8, 10]  # the last row ends the (shortened) epoch
    for row, window in zip(steps, (slice(0, 4), slice(4, 8), slice(8, 10))):
        assert row["loss"] == pytest.approx(np.mean(losses[window]), rel=1e-6)
        assert row["accuracy"] == pytest.approx(np.mean(accs[window]), rel=1e-6)
        assert row["lr"] == lrs[window.stop - 1]
    assert epoch["loss"] == pytest.approx(np.mean(losses), rel=1e-6)
    assert epoch["accuracy"] == pytest.approx(np.mean(accs), rel=1e-6)
    assert epoch["lr"] == lrs[-1]


def test_a_resume_mid_row_logs_the_rows_of_an_unbroken_run(tmp_path, monkeypatch, capsys):
    """SIGINT at step 7 of rows of 5 steps: the checkpoint holds the device's sums of steps 6 and 7, so the
    resumed run's row of steps 6-10 and its epoch row are those of an unbroken run, bit for bit (cpu)."""
    argv = ["train", "--synthetic", "--model", "lenet", "--batch-size", "16", "--steps", "12", "--no-eval",
            "--log-every", "5"]
    assert main([*argv, "--log", str(tmp_path / "reference.jsonl")]) == 0
    _next, seen = TrainBatches.__next__, [0]

    def next_with_ctrl_c(self):
        seen[0] += 1
        if seen[0] == 7:
            os.kill(os.getpid(), signal.SIGINT)
        return _next(self)
    monkeypatch.setattr(TrainBatches, "__next__", next_with_ctrl_c)
    argv += ["--checkpoint-dir", str(tmp_path / "ckpt"), "--log", str(tmp_path / "log.jsonl")]
    assert main(argv) == 130
    monkeypatch.undo()
    meta = tf.train.read_checkpoint_metadata(tf.train.latest_checkpoint(str(tmp_path / "ckpt")))
    assert meta["step"] == 7 and meta["window"][2] == 2 and meta["sums"][2] == 5
    saved = [name for name, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(tmp_path / "ckpt")))]
    assert "global_step" in saved and not [n for n in saved if n.startswith("running_sums")]
    assert main([*argv, "--resume"]) == 0
    capsys.readouterr()

    def rows(name):
        return [(r["kind"], r["step"], r["loss"], r["accuracy"], r["lr"])
                for r in map(json.loads, open(tmp_path / name)) if r["kind"] in ("step", "epoch")]
    assert rows("log.jsonl") == rows("reference.jsonl")


def test_a_diverged_loss_is_caught_at_the_next_read():
    """At learning rate 1000 without warm-up the loss is NaN by step 3; with rows of 5 steps (and a terminal, so
    no progress lines), the run stops at the row of step 5 and says which steps the NaN mean covers."""
    cfg = trainer.TrainConfig(**TINY, steps=12, log_every=5, lr=1000.0, warmup_steps=0)
    with pytest.raises(trainer.DivergedError, match=r"diverged at step 5/12: the mean loss of steps 1-5 is nan"):
        trainer.train(cfg, out=io.StringIO(), err=_Terminal())
