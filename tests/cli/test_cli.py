"""The `tfplus` command line: train / eval / devices on the synthetic dataset, exact resume, bad options.

Runs `tfplus.cli.main(argv)` in-process, except the kill -9 test, which needs a process to kill.
"""
from __future__ import annotations

import json
import os
import re
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
    # a warm-up of one epoch (312 steps), longer than the run: the cosine would start after it
    lrs = [0.05 * (t + 1) / 312 for t in range(STEPS)]
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
    (["eval"], "--checkpoint"),
    (["eval", "--checkpoint", "{tmp}"], "no checkpoint"),
])
def test_bad_options_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("tfplus")


# -- bad input: one clear line naming the flag or file, never a traceback (issue 16) ---------------------------
@pytest.mark.parametrize("argv,message", [
    (["train", "--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["train", "--seed", str(2**31)], "--seed: must be at most 2147483647"),
    (["train", "--synthetic", "--checkpoint-dir", ""], "argument --checkpoint-dir: empty path"),
    (["train", "--synthetic", "--log", ""], "argument --log: empty path"),
    (["train", "--synthetic", "--log", "{tmp}"], "argument --log: {tmp} is a folder"),
    (["train", "--synthetic", "--log", "{tmp}/file/x.jsonl"], "file is not a folder"),
    (["train", "--data", ""], "argument --data: empty path"),
    (["train", "--batch-size", "1000000000"], "--batch-size: must be at most 65536"),
    (["train", "--device", "cpu:abc"], "device 'cpu:abc': there is one cpu device"),
    (["train", "--device", "opencl:"], "give an index or a name after 'opencl:'"),
    (["eval", "--checkpoint", ""], "argument --checkpoint: empty path"),
    (["plan", "--model", "lenet", "--batch-size", "1000000000"], "--batch-size: must be at most 65536"),
    (["plan", "--memory-budget", "1e400"], "'1e400' is too large"),
    (["plan", "--budget", "1e999999999"], "argument --budget: '1e999999999' is too large"),
    (["plan", "--plot", "/nonexistent/x.svg"], "cannot write /nonexistent/x.svg: /nonexistent does not exist"),
    (["plan", "--plot", "{tmp}/x.pdf"], "must end in .svg or .png"),
    (["plan", "--device", "cpu:abc"], "device 'cpu:abc': there is one cpu device"),
    (["plan", "--device", "opencl:9"], "--device opencl:9: OpenCL device 9 does not exist"),
    (["plan", "--optimizer", "adamw"], "argument --optimizer: invalid choice: 'adamw'"),
    (["plan", "--data-format", "nchw"], "argument --data-format: invalid choice"),
    (["plan", "--model", "resnet"], "unknown model 'resnet'"),
    (["plan", "--device-profile", "nexus6"], "argument --device-profile: invalid choice: 'nexus6'"),
    (["plan", "--max-batch"], "--max-batch needs a budget"),
    (["plan", "--memory-budget", "1MB", "--budget", "2MB"], "not allowed with argument"),
    (["profile", "--trace", "/nonexistent/x.json"], "cannot write /nonexistent/x.json"),
    (["profile", "--optimizer", "adamw"], "argument --optimizer: invalid choice"),
    (["profile", "--data-format", "CHW"], "argument --data-format: invalid choice"),
    (["profile", "--steps", "3"], "--steps: must be >= 4"),
    (["profile", "--device", "cpu:1"], "there is one cpu device"),
])
def test_bad_input_of_every_subcommand_is_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message.format(tmp=tmp_path) in err and len(err.splitlines()) == 1 and err.startswith("tfplus"), err


def test_an_unexpected_error_is_one_line_saying_where_to_report(monkeypatch, capsys):
    from tfplus import plan_cli

    def broken(self, batch, budget):
        raise KeyError("boom")
    monkeypatch.setattr(plan_cli._TrainStep, "plan", broken)
    argv = ["plan", "--model", "lenet", "--batch-size", "4"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("tfplus plan: internal error: KeyError: 'boom' (at ") and "test_cli.py" in err
    assert "in broken). This is a bug in tfplus; please report it" in err and "TFPLUS_DEBUG=1" in err
    monkeypatch.setenv("TFPLUS_DEBUG", "1")
    with pytest.raises(KeyError, match="boom"):
        main(argv)


def test_plan_exits_1_when_the_budget_does_not_fit(capsys):
    small = ["plan", "--model", "lenet", "--batch-size", "8"]
    assert main([*small, "--memory-budget", "10kB"]) == 1
    captured = capsys.readouterr()
    assert "does NOT fit" in captured.out
    assert "the step does not fit the budget of 10.0 kB" in captured.err
    assert main([*small, "--budget", "10kB", "--json"]) == 1  # the deprecated spelling still works, and says so
    captured = capsys.readouterr()
    assert json.loads(captured.out)["fits"] is False and "--budget is deprecated" in captured.err
    assert main([*small, "--memory-budget", "64MB", "--widths", "4,4", "--fc-widths", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] and out["breakdown"]["parameters"] < 20_000  # narrower than lenet's 62k parameters


def test_plan_of_a_huge_batch_answers_at_once():
    """The planner's micro-batch candidates are a batch's divisors: found in O(sqrt(n)) steps, not O(n)."""
    from tfplus.planner.plan import _divisors
    assert [_divisors(n) for n in (1, 12, 16, 97)] == [[1], [1, 2, 3, 4, 6, 12], [1, 2, 4, 8, 16], [1, 97]]
    assert len(_divisors(10**12)) == 169 and _divisors(10**12)[-2:] == [5 * 10**11, 10**12]


def test_train_and_plan_advise_the_same_budget_and_it_runs(capsys):
    """Issue 32, item 14: `tfplus train` named the initializer's need (7.7 MB), then at 10 MB the step's (12.8 MB),
    and exited 2 where `tfplus plan` exited 1. Now both name the run's smallest budget, exit 1, and a budget of
    exactly that figure (or the rounded figure the advice names) trains."""
    from tfplus.units import parse_size
    model = ["--model", "lenet", "--batch-size", "8"]
    assert main(["plan", *model, "--memory-budget", "100kB"]) == 1
    err = capsys.readouterr().err
    need = int(re.search(r"needs at least [\d.]+ \w+ \((\d+) bytes\)", err).group(1))
    run = ["train", "--synthetic", *model, "--steps", "1", "--no-eval"]
    for too_small in ("100kB", str(need - 1)):
        assert main([*run, "--memory-budget", too_small]) == 1
        err = capsys.readouterr().err.strip()
        assert "--memory-budget: the step needs at least" in err and f"({need} bytes)" in err, err
        assert len(err.splitlines()) == 1
    advised = re.search(r"use a budget of at least ([\d.]+) (\w+)", err)
    assert need <= parse_size(advised.group(1) + advised.group(2)) < need * 1.1
    assert main([*run, "--memory-budget", str(need)]) == 0
    assert main(["plan", *model, "--memory-budget", str(need)]) == 0


def test_plan_plans_the_step_train_runs(monkeypatch, capsys):
    """`tfplus plan` built its step without the warm-up that `tfplus train` has by default: the learning rate's
    ramp ops were missing, and the floors the two named for LeNet at batch 8 differed by 7.5 kB once the conv
    kernels' scratch was smaller. Both now plan the same ops."""
    import tfplus.step_budget as step_budget
    from tfplus.framework import needed_ops
    steps, planned = [], step_budget._planned

    def recording(graph, runs):
        fetches, shapes = runs[0]
        steps.append(sorted((op.name, op.type, tuple(t.name for t in op.inputs))
                            for op in needed_ops(fetches, set(shapes))))
        return planned(graph, runs)
    monkeypatch.setattr(step_budget, "_planned", recording)
    model = ["--model", "lenet", "--batch-size", "8", "--memory-budget", "100kB"]
    assert main(["plan", *model]) == 1
    assert main(["train", "--synthetic", *model, "--steps", "1", "--no-eval"]) == 1
    capsys.readouterr()
    assert len(steps) >= 2 and steps[0] == steps[-1]


@pytest.fixture
def tiny_cifar(tmp_path, monkeypatch):
    """A CIFAR-10 folder of 20 records per file, which the CLI reads (it expects 10,000 per file)."""
    import functools

    import tfplus.data
    from tfplus.data import read_batches, synthetic, write_binary_batches
    monkeypatch.setattr(tfplus.data, "read_batches", functools.partial(read_batches, records_per_file=20))

    def no_download(*args, **kwargs):
        raise AssertionError("tried to download")
    monkeypatch.setattr(tfplus.data, "download", no_download)
    monkeypatch.setenv("TFPLUS_DATA", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    write_binary_batches(tmp_path / "data", synthetic(100, 20))
    return tmp_path


def test_missing_data_is_an_error_that_says_how_to_get_it(tiny_cifar, capsys):
    tiny = ["--model", "lenet", "--batch-size", "16", "--steps", "1"]
    assert main(["train", *tiny]) == 1
    err = capsys.readouterr().err
    assert "CIFAR-10 not found in" in err and "--download" in err and "--data DIR" in err and "TFPLUS_DATA" in err
    assert main(["train", *tiny, "--data", str(tiny_cifar / "typo"), "--download"]) == 2
    assert "--data" in capsys.readouterr().err and not (tiny_cifar / "typo").exists()
    assert main(["train", *tiny, "--data", str(tiny_cifar / "empty"), "--download"]) == 2  # a wrong folder
    assert "holds no CIFAR-10; --download fetches it into $TFPLUS_DATA" in capsys.readouterr().err


def test_eval_after_the_data_moved_says_so_instead_of_downloading(tiny_cifar, capsys):
    ckpt = str(tiny_cifar / "ckpt")
    argv = ["train", "--model", "lenet", "--batch-size", "16", "--steps", "2", "--checkpoint-dir", ckpt]
    assert main([*argv, "--data", str(tiny_cifar / "data")]) == 0
    assert main(["eval", "--checkpoint", ckpt]) == 0  # the checkpoint's own data folder
    capsys.readouterr()
    (tiny_cifar / "data").rename(tiny_cifar / "moved")
    assert main(["eval", "--checkpoint", ckpt]) == 1
    err = capsys.readouterr().err
    assert "was trained on the data in" in err and "no longer there" in err and "--data DIR" in err
    assert main(["eval", "--checkpoint", ckpt, "--data", str(tiny_cifar / "moved")]) == 0


def test_unreadable_cifar_file_is_one_clear_error(tiny_cifar, monkeypatch, capsys):
    from tfplus.data import cifar10
    path = tiny_cifar / "data" / "cifar-10-batches-bin" / "data_batch_2.bin"

    def open_denied(file, *args, **kwargs):  # as chmod 0 does for a user (the tests may run as root)
        if os.fspath(file) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return open(file, *args, **kwargs)
    monkeypatch.setattr(cifar10, "open", open_denied, raising=False)
    argv = ["train", "--model", "lenet", "--batch-size", "16", "--steps", "1", "--data", str(tiny_cifar / "data")]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"tfplus train: error: cannot read {path}: Permission denied; check its permissions (e.g. chmod u+r)"


def test_python_dash_m_tfplus():
    out = subprocess.run([sys.executable, "-m", "tfplus", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"tfplus {tfplus.__version__}"


def test_opencl_compiling_is_announced_and_compiler_chatter_kept_out(tmp_path, monkeypatch, capfd):
    from tfplus.runtime import opencl
    assert opencl.available()  # PoCL gives every machine an OpenCL device
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing built before
    monkeypatch.setattr(opencl.build.CompileNotice, "EVERY_S", 0.0)
    dev = opencl.OpenCLRuntime().dev
    monkeypatch.setattr(dev, "compiling", opencl.build.CompileNotice())
    capfd.readouterr()
    with opencl.build.native_stderr() as chatter:  # what native code writes to fd 2, e.g. "1 warning generated."
        os.write(2, b"1 warning generated.\n")
    assert chatter == ["1 warning generated.\n"] and capfd.readouterr().err == ""
    # A program no earlier build made (its options differ), compiled from source: announced with count and time.
    dev._build(("elementwise.cl",), f"-DT=float -DSFX=f32 -DIS_FLOAT=1 -DIS_SIGNED=1 -DNONCE={os.getpid()}")
    err = capfd.readouterr().err.splitlines()
    assert err[0] == f"tfplus: compiling OpenCL kernels for {dev.info['name']} (once: later runs load them from " \
        f"{tmp_path / 'tfplus' / 'opencl'})"
    assert err[1].startswith("tfplus: compiled 1 OpenCL program in ") and len(err) == 2


def test_an_opencl_device_on_the_cpu_is_named_with_the_faster_choice(tmp_path, monkeypatch, capsys):
    """Issue 32, item 13: PoCL runs OpenCL on the machine's own cores, where --device cpu is faster and a cold
    cache builds programs for minutes: `tfplus devices` says so of each such device, and `tfplus train --device
    opencl` warns first (naming the device), then goes on as asked."""
    from tfplus.runtime import opencl
    cpus = [d for d in opencl.list_devices() if "CPU" in d["type"].split(" | ")]
    assert cpus, "PoCL gives every machine an OpenCL CPU device"
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert out.count("a CPU device (OpenCL on this machine's cores): --device cpu is faster here") == len(cpus)
    monkeypatch.setenv("TFPLUS_DATA", str(tmp_path))  # no data: the run stops after its warning
    assert main(["train", "--device", f"opencl:{cpus[0]['index']}", "--model", "lenet"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"tfplus train: warning: --device opencl:{cpus[0]['index']} is {cpus[0]['name'].strip()}, an " \
        "OpenCL device on this machine's CPU: --device cpu is faster here, and a first run builds the step's " \
        "OpenCL programs (minutes on a cold cache)"
    assert "CIFAR-10 not found" in err[1]
    assert main(["eval", "--device", f"opencl:{cpus[0]['index']}", "--checkpoint", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"tfplus eval: warning: --device opencl:{cpus[0]['index']} is ")


def test_progress_claims_no_pace_before_a_step_is_timed_and_the_end_names_the_builds(monkeypatch, capsys):
    """The first step of a process builds its programs (29 minutes on PoCL from a cold cache): its time is no
    pace ("0 img/s", an ETA of hours), so progress says what is happening until a later step is timed, and the
    closing line says what the builds took."""
    from tfplus import trainer
    built = "built 3 OpenCL programs (first run on this device): 12.0 s"
    monkeypatch.setattr(trainer, "_built", lambda sess: built, raising=False)
    assert main(["train", *SMALL, "--steps", "3", "--no-eval", "--log-every", "100"]) == 0
    captured = capsys.readouterr()
    bars = [line for line in captured.err.splitlines() if line.startswith("epoch 1/1 ")]
    assert bars[0].startswith("epoch 1/1 1/") and bars[0].endswith("building OpenCL programs..."), bars
    assert "img/s" not in bars[0] and "ETA" not in bars[0]
    assert "img/s run ETA" in bars[-1]
    assert captured.out.splitlines()[-1].startswith("done: 3 steps in ") and captured.out.endswith(f"; {built}\n")


def test_profile_steps_means_steps_run_and_reports_progress(monkeypatch, capsys):
    from tfplus import profile_cli
    monkeypatch.setattr(profile_cli._Progress, "EVERY_S", 0.0)
    argv = ["profile", "--model", "lenet", "--batch-size", "4", "--steps", "5", "--data-format", "NHWC"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    # 5 steps as `train --steps 5` runs 5: 2 warm-up, then untraced, traced, untraced
    assert "step time (2 untraced steps)" in captured.out
    assert [line.split()[3] for line in captured.err.splitlines()] == ["1/5", "2/5", "3/5", "4/5"]


def test_download_only_when_asked_and_into_the_data_root(tiny_cifar, monkeypatch, capsys):
    import tfplus.data
    from tfplus.data import synthetic, write_binary_batches
    calls = []

    def fake_download(dest=None):
        calls.append(dest)
        return write_binary_batches(tfplus.data.data_root(dest), synthetic(100, 20))
    monkeypatch.setattr(tfplus.data, "download", fake_download)
    argv = ["train", "--model", "lenet", "--batch-size", "16", "--steps", "1"]
    assert main(argv) == 1 and calls == []
    assert main([*argv, "--download"]) == 0 and calls == [None]
    assert (tiny_cifar / "empty" / "cifar-10-batches-bin" / "test_batch.bin").exists()  # $TFPLUS_DATA
    assert "downloading it there" in capsys.readouterr().err


# The command line's modules, lowest first: each may import only those before it (and the core below them all).
TOOLS = ("step_budget", "trainer", "cli_args", "plan_cli", "profile_cli", "cli")


def _tfplus_imports(module: str) -> set[str]:
    """The tfplus modules `module` imports, at its top or inside a function (tfplus.x for `from tfplus import x`
    as well as `import tfplus.x` and `from tfplus.x import y`)."""
    import ast
    import importlib.util
    tree = ast.parse(open(importlib.util.find_spec(f"tfplus.{module}").origin).read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "tfplus":
            found |= {f"tfplus.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {name.split(".")[1] for name in found if name.startswith("tfplus.")}


def test_the_command_line_modules_import_only_downwards():
    for i, module in enumerate(TOOLS):
        above = set(TOOLS[i + 1:]) & _tfplus_imports(module)
        assert not above, f"tfplus.{module} imports {sorted(above)}, which sit above it (or import it back)"


@pytest.mark.parametrize("command", [["plan", "--model", "lenet", "--batch-size", "8"],
                                     ["train", "--synthetic", "--model", "lenet", "--steps", "1"]])
def test_a_bad_TFPLUS_PAGE_SLOTS_is_one_line_naming_it_before_any_work(command, monkeypatch, capsys):
    """It was read as the planner was imported: a traceback, exit 1."""
    monkeypatch.setenv("TFPLUS_PAGE_SLOTS", "yes")
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tfplus {command[0]}: error: TFPLUS_PAGE_SLOTS='yes': give 1 (the planner may page the "
                   "optimizer's slots to the host where that is cheaper) or 0 (never: the default)"], err
