"""Hostile command lines (issue 32, item 9): every option of every subcommand given values an attacker or a slip
of the keyboard would give. Each run ends within a bound, exits 0, 1 or 2 (tfplus.cli's codes; 2, a usage
error, names the option), prints no traceback and no "internal error", and writes nothing outside its folders.

Runs `tfplus.cli.main(argv)` in-process in a thread with a deadline; a few in subprocesses, as a user runs them.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import threading

import pytest

from tfplus.cli import build_parser, main

DEADLINE_S = 60  # generous for a loaded 2-core machine: each run below takes well under a second
# Values that are wrong for most options; the few options that accept one (a path named '0', a budget of 0)
# run up to the base command line's quick failure (no CIFAR-10 in an empty folder, no checkpoint in it).
HOSTILE = ["", " ", "0", "-1", "nan", "inf", "1e309", "2147483648", "99999999999999999999999", "9" * 5000,
           "0x10", "1,,2", "x\0y", "~nosuchuser/x", "/" + "a" * 5000, "a/" * 3000, "\udcff", "+-5", "line\nbreak"]


def _run(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of main(argv), run in a thread that must end within DEADLINE_S."""
    out, err, result = io.StringIO(), io.StringIO(), {}

    def go():
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                result["rc"] = main(argv)
            except BaseException as e:  # noqa: BLE001  reported below, with the command line
                result["raised"] = e
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(DEADLINE_S)
    assert not t.is_alive(), f"{argv!r:.300} still running after {DEADLINE_S} s"
    assert "raised" not in result, f"{argv!r:.300} raised {result.get('raised')!r}"
    return result["rc"], out.getvalue(), err.getvalue()


def _check(argv: list[str], rc: int, err: str, names=(), base_error=None) -> None:
    """`names`: the option given a hostile value, which a usage error names unless it is the base line's own
    failure, `base_error` (the value was accepted)."""
    where = f"{argv!r:.300}: {err!r:.600}"
    assert rc in (0, 1, 2), where
    assert "Traceback" not in err and "internal error" not in err, where
    if rc:
        assert 1 <= len(err.strip().splitlines()) <= 3 and err.startswith("tfplus"), where
    if rc == 2 and names and not (base_error and base_error in err):
        assert any(n in err for n in names), f"the message does not name {names}: {where}"


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """An empty data folder (TFPLUS_DATA), the working folder (a path option's value such as '0' lands there),
    a text file, and a FIFO, which a writer opening it would wait on forever."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "cwd").mkdir()
    (tmp_path / "text").write_text("root:x:0:0\n")
    os.mkfifo(tmp_path / "fifo")
    monkeypatch.setenv("TFPLUS_DATA", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


# Each subcommand's base line fails fast once its options are accepted (no data, no checkpoint: the error
# beside it) or runs a tiny model.
BASES = {
    "train": (lambda d: ["--model", "lenet", "--batch-size", "2"], "CIFAR-10 not found"),
    "eval": (lambda d: ["--checkpoint", str(d / "empty")], "no checkpoint in this directory"),
    "plan": (lambda d: ["--model", "lenet", "--batch-size", "2"], None),
    "profile": (lambda d: ["--model", "lenet", "--batch-size", "2", "--steps", "4"], None),
}


def _options(command: str) -> list[argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if a.option_strings and a.nargs is None
            and (a.type is not None or a.choices is not None)]


@pytest.mark.parametrize("command", sorted(BASES))
def test_every_option_of_every_subcommand_refuses_hostile_values_in_one_line(command, folders):
    base, base_error = BASES[command]
    for action in _options(command):
        for value in HOSTILE:
            argv = [command, *base(folders), action.option_strings[0], value]
            rc, _, err = _run(argv)
            _check(argv, rc, err, action.option_strings, base_error)


@pytest.mark.parametrize("argv,code,message", [
    # the samples
    (["train", "--classes", "0-99999999999"], 2, "argument --classes: '0-99999999999'"),
    (["train", "--classes", "3-12"], 2, "the classes are numbered 0..9"),
    (["train", "--fc-widths", "2147483648"], 2, "argument --fc-widths: layer widths are whole numbers 1..4096"),
    (["train", "--widths", ",".join(["8"] * 65)], 2, "argument --widths: at most 64 layers"),
    (["train", "--data", "~nosuchuser/data"], 2, "argument --data: ~nosuchuser/data: no user 'nosuchuser'"),
    (["train", "--checkpoint-dir", "~nosuchuser/run"], 2, "no user 'nosuchuser' to expand ~nosuchuser"),
    (["eval", "--checkpoint", "/" + "a" * 5000], 2, "argument --checkpoint: /aaaa"),
    (["train", "--log", "a/" * 3000 + "x.jsonl"], 2, "too long (6007 bytes"),
    (["train", "--init-from", "ck\0pt"], 2, "argument --init-from: 'ck\\x00pt' contains a NUL byte"),
    (["train", "--threads", "2147483648"], 2, "argument --threads: must be at most 256"),
    (["train", "--workers", "100000"], 2, "argument --workers: must be at most 256"),
    (["train", "--steps", "9" * 5000], 2, "argument --steps: expected a whole number"),
    (["train", "--epochs", str(2**53)], 2, "argument --epochs: must be at most"),
    (["train", "--lr", "nan"], 2, "--lr must be a finite number > 0, got nan"),
    (["train", "--momentum", "1"], 2, "--momentum must be in [0, 1), got 1.0"),
    (["train", "--weight-decay", "-inf"], 2, "argument --weight-decay: expected one argument"),
    (["train", "--weight-decay", "1e309"], 2, "--weight-decay must be a finite number >= 0, got inf"),
    (["plan", "--fine-tune-last", "-3"], 2, "argument --fine-tune-last: must be >= 1"),
    # files where folders are expected and folders where files are
    (["train", "--data", "{d}/text"], 2, "--data {d}/text: not a directory"),
    (["train", "--checkpoint-dir", "{d}/text"], 2, "--checkpoint-dir {d}/text"),
    (["train", "--log", "{d}/empty"], 2, "argument --log: {d}/empty is a folder"),
    (["profile", "--trace", "{d}"], 2, "argument --trace: {d} is a folder"),
    # a FIFO would block its writer; a file that is not a log is not appended to (nor a trace overwritten)
    (["train", "--log", "{d}/fifo"], 2, "argument --log: {d}/fifo is a FIFO that no process reads"),
    (["train", "--log", "{d}/text"], 2, "argument --log: {d}/text exists and is not JSON"),
    (["profile", "--trace", "{d}/text"], 2, "argument --trace: {d}/text exists and is not JSON"),
    # typos and abbreviations (item 16)
    (["trian"], 2, "invalid choice: 'trian' (choose from 'devices', 'train', 'eval', 'plan', 'profile', "
                   "'federated'); did you mean train?"),
    (["train", "--epocs", "3"], 2, "tfplus train: error: unrecognized arguments: --epocs 3; did you mean --epochs?"),
    (["train", "--epoch", "3"], 2, "unrecognized arguments: --epoch 3; did you mean --epochs?"),
    (["plan", "--memory-budge=5MB"], 2, "tfplus plan: error: unrecognized arguments: --memory-budge=5MB; did you "
                                        "mean --memory-budget?"),
    (["plan", "--optimizer", "adamw"], 2, "did you mean adam?"),
    (["devices", "--verbose"], 2, "tfplus devices: error: unrecognized arguments: --verbose"),
    (["--verison"], 2, "did you mean --version?"),
])
def test_hostile_arguments_get_one_line_naming_the_flag(argv, code, message, folders):
    argv = [a.format(d=folders) for a in argv]
    rc, _, err = _run(argv)
    _check(argv, rc, err)
    assert rc == code and message.format(d=folders) in err and len(err.strip().splitlines()) == 1, err
    assert (folders / "text").read_text() == "root:x:0:0\n"
    assert not os.listdir(folders / "cwd"), "a path option made something in the working folder"


@pytest.mark.parametrize("text, value", [("1e6", 10**6), ("1E9", 10**9), ("2.5e3", 2500), (".5e1", 5), ("+7", 7)])
def test_counts_in_scientific_notation_are_taken_when_whole(text, value):
    """`--epochs 1e6` ran before the CLI's bounds; a whole number written so still does."""
    assert build_parser().parse_args(["train", "--epochs", text]).epochs == value


@pytest.mark.parametrize("text, message", [("1.5", "expected a whole number"), ("1e-3", "expected a whole number"),
                                           ("1e30", "must be at most"), ("1e", "expected a whole number")])
def test_counts_that_are_not_whole_or_too_large_are_refused(text, message, folders):
    rc, _, err = _run(["train", "--steps", text])
    assert rc == 2 and "argument --steps" in err and message in err, err


@pytest.mark.parametrize("variable", ["TFPLUS_NUM_THREADS", "TFPLUS_WORKERS"])
def test_a_huge_thread_or_worker_count_in_the_environment_is_refused(variable, monkeypatch, capsys):
    """A worker process per thread: $TFPLUS_NUM_THREADS=100000 would fork 100,000 of them at the first step."""
    monkeypatch.setenv(variable, "100000")
    assert main(["devices"]) == 2
    assert capsys.readouterr().err.strip() == f"tfplus devices: error: ${variable}=100000: at most 256; set a " \
        "smaller number or unset it"


def test_every_long_option_must_be_spelled_out(folders):
    """An abbreviation (a prefix of one long option) is refused with a suggestion, in every subcommand: argparse
    would take --check for --checkpoint-dir, or --b for --batch-size."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in sub.choices.items():
        base = BASES[command][0](folders) if command in BASES else []
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and len(option) > 5 and option not in ("--help",):
                    argv = [command, *base, option[:-1], "1"]
                    # (one letter short of --budgets is --budget, an option of its own: no abbreviation)
                    if option[:-1] not in parser._option_string_actions and \
                            any(o.startswith(option[:-1]) for o in parser._option_string_actions):
                        rc, _, err = _run(argv)
                        assert rc == 2 and "unrecognized arguments" in err and "did you mean" in err, (argv, err)


def test_hostile_command_lines_in_a_process_print_no_traceback(tmp_path):
    """As a user runs them: `python -m tfplus ...` (the import path, stderr as a terminal would show it)."""
    env = dict(os.environ, TFPLUS_DATA=str(tmp_path), TFPLUS_DEBUG="0")
    for argv in (["train", "--classes", "0-99999999999"], ["train", "--data", "~nosuchuser/x", "--steps", "1"],
                 ["plan", "--fc-widths", "2147483648"]):
        p = subprocess.run([sys.executable, "-m", "tfplus", *argv], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
        assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, \
            (argv, p.stderr)
        assert p.stderr.startswith(f"tfplus {argv[0]}: error: argument {argv[1]}"), p.stderr


def test_a_misspelt_tf_app_flag_gets_a_suggestion():
    """tf.app.flags, as absl's: an unknown flag in a strict parse names the one it resembles."""
    from tfplus import flags
    fv = flags.FlagValues()
    flags.DEFINE_integer("batch_size", 32, "examples per step", flag_values=fv)
    with pytest.raises(flags.UnrecognizedFlagError, match=r"unknown command line flag '--batch_sise=8'; did you "
                                                           r"mean --batch_size\?"):
        fv(["prog", "--batch_sise=8"])
    with pytest.raises(flags.UnrecognizedFlagError, match=r"'--zzz'$"):
        fv(["prog", "--zzz"])


def test_a_folder_this_user_may_not_search_is_one_line(folders, monkeypatch):
    """As a user other than root meets it (these tests may run as root, whom no mode stops): looking at a path
    under a folder of mode 000 raises PermissionError, which the option's check reports in one line."""
    import pathlib
    real = pathlib.Path.stat

    def stat(self, *args, **kwargs):
        if "locked" in self.parts:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "stat", stat)
    for argv in (["train", "--log", "{d}/locked/run.jsonl"], ["profile", "--trace", "{d}/locked/t.json"]):
        argv = [a.format(d=folders) for a in argv]
        rc, _, err = _run(argv)
        assert rc == 2 and err == f"tfplus {argv[0]}: error: argument {argv[1]}: cannot write {argv[2]}: " \
            "Permission denied\n", err


def test_a_log_into_a_pipe_that_is_read_is_written(folders):
    """`--log /dev/stdout | jq` and the like: a FIFO with a reader takes the log (one without waits forever)."""
    fifo = str(folders / "fifo")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        rc, _, err = _run(["train", "--model", "lenet", "--log", fifo])
        assert rc == 1 and "CIFAR-10 not found" in err  # the option was taken; the run stops for want of data
    finally:
        os.close(reader)
