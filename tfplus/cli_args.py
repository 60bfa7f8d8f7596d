"""The command line's shared parts: exit codes, bounds, the argparse type functions that check a flag's value
before any work starts, and the parser that reports a bad option as one line with a suggestion. `tfplus.cli` and
its subcommand modules (tfplus.plan_cli, tfplus.profile_cli) build their parsers from these.

    from tfplus import cli_args
    p = cli_args.Parser(prog="tfplus")
    p.add_argument("--batch-size", type=cli_args.batch_size)   # 1..MAX_BATCH_SIZE, also as 1e3
"""
from __future__ import annotations

import argparse
import decimal
import json
import os
import re
import stat
from pathlib import Path
from typing import Callable

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
# The largest --batch-size of any command: 2^16 CIFAR images are 805 MB of float32 input alone, beyond the
# devices tfplus is for, and planning stays within seconds below it (a batch's divisors are its candidate
# micro-batch counts).
MAX_BATCH_SIZE = 1 << 16
MAX_SEED = 2**31 - 1
# Counts of steps (--steps, --checkpoint-every, ...) up to 2^53 stay exact in a float64, which the schedule and the
# ETA compute with; an epoch of CIFAR-10 is at most 50,000 steps, so --epochs stays within that too.
MAX_COUNT = 2**53
MAX_EPOCHS = MAX_COUNT // 50_000
# --threads / --workers: a training step forks one worker process per thread from 2.
MAX_THREADS = 256
# Layer widths: a 4096-wide 3x3 conv holds 604 MB of float32 weights (and as much again per gradient and slot),
# beyond the devices tfplus is for; wider would allocate tens of gigabytes before the first step.
MAX_WIDTH, MAX_LAYERS = 4096, 64
# Linux's PATH_MAX (with its terminating NUL) and NAME_MAX: a longer name fails in the kernel (ENAMETOOLONG).
MAX_PATH, MAX_NAME = 4096, 255

class Parser(argparse.ArgumentParser):
    """Reports a bad option as one line, `tfplus train: error: ...`, and exits with code 2. Long options are
    spelled out (an abbreviation such as --epoch is refused, not taken for --epochs), and a misspelt option or
    choice gets a suggestion ("did you mean --epochs?")."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        # A subcommand's parser reports what it does not know itself, so that the message names the subcommand
        # and the suggestion comes from its options (argparse would leave them to the top-level parser).
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str):
        # One line even when a value holds a line break (a hostile --model or path would start a line of its own).
        message = message.replace("\r", "\\r").replace("\n", "\\n")
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{self._suggestion(message)}\n")

    def _suggestion(self, message: str) -> str:
        """'; did you mean --epochs?' for the first unknown option or choice that resembles a known one."""
        import difflib
        if message.startswith("unrecognized arguments:"):
            known = [s for a in self._actions for s in a.option_strings]
            words = [w.partition("=")[0] for w in message.split(":", 1)[1].split() if w.startswith("-")]
        else:
            m = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
            known, words = (re.findall(r"'(.*?)'", m.group(2)), [m.group(1)]) if m else ([], [])
        for word in words:
            close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
            if close:
                return f"; did you mean {close[0]}?"
        return ""


def classes(text: str) -> tuple[int, ...]:
    from tfplus.trainer import parse_classes
    try:
        return parse_classes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def whole(text: str, low: int, high: int) -> int:
    """An integer in [low, high], also written as a whole number in scientific notation (1e6, 2.5e3); refused before
    Python builds a huge integer from thousands of digits or a large exponent."""
    text = text.strip()
    if not re.fullmatch(r"[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,4})?", text):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    number = decimal.Decimal(text)
    if number.adjusted() > 30:  # more digits than any bound here
        raise argparse.ArgumentTypeError(f"must be at most {high}, got {text}")
    if number != number.to_integral_value():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    value = int(number)
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
    if value > high:
        raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
    return value


def positive_int(text: str) -> int:
    return whole(text, 1, MAX_COUNT)


def count(text: str) -> int:
    return whole(text, 0, MAX_COUNT)


def epochs(text: str) -> int:
    return whole(text, 1, MAX_EPOCHS)


def threads(text: str) -> int:
    return whole(text, 1, MAX_THREADS)


def batch_size(text: str) -> int:
    return whole(text, 1, MAX_BATCH_SIZE)


def seed(text: str) -> int:
    return whole(text, 0, MAX_SEED)


def widths(text: str) -> tuple[int, ...]:
    parts = text.split(",")
    if len(parts) > MAX_LAYERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_LAYERS} layers, got {len(parts)}")
    try:
        return tuple(whole(w, 1, MAX_WIDTH) for w in parts)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"layer widths are whole numbers 1..{MAX_WIDTH}, comma-separated such "
                                         f"as 32,32,64 ({e}); got {text!r}") from None


def size(text: str) -> int:
    from tfplus.units import parse_size
    try:
        return parse_size(text, "--memory-budget")
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--memory-budget: ")) from None


def device(text: str) -> str:
    from tfplus.runtime import parse_device
    try:
        parse_device(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def partition(text: str) -> str:
    """A federated partition of the training set: iid, dirichlet:ALPHA or classes:K (tfplus.federated.partition)."""
    from tfplus.federated.partition import parse_spec
    try:
        parse_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


THREADS_HELP = ("cpu threads per step (default $TFPLUS_NUM_THREADS, else every core this process may use; "
                 "from 2, a training step splits its batch over as many worker processes, $TFPLUS_WORKERS; "
                 "`tfplus devices` shows both)")


def model(text: str) -> str:
    from tfplus.graphs import get_model
    try:
        get_model(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


# Variable names and scopes as TensorFlow allows them (and '/' for the root); anything else is a typo or worse.
_VARIABLE_NAME = re.compile(r"[A-Za-z0-9_.\-/]+")
MAX_MAP_BYTES = 1 << 20  # an --init-map file: a map of every variable of a large model is a few dozen KB


def init_map(text: str) -> list[tuple[str, str]]:
    """An --init-map value: OLD=NEW (a value with '=' is a pair), else a JSON file of {OLD: NEW}."""
    if "=" in text:
        pairs = [tuple(text.split("=", 1))]
    else:
        name = path(text)
        if not os.path.isfile(name):  # NOTE: a FIFO would block the open; a map is a regular file
            raise argparse.ArgumentTypeError(f"{text}: neither OLD=NEW nor a JSON file")
        try:
            with open(name, "rb") as f:
                raw = f.read(MAX_MAP_BYTES + 1)
        except OSError as e:
            raise argparse.ArgumentTypeError(f"{text}: cannot read it ({e.strerror})") from None
        if len(raw) > MAX_MAP_BYTES:
            raise argparse.ArgumentTypeError(f"{text}: larger than {MAX_MAP_BYTES} bytes; a name map is smaller")
        try:
            mapping = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise argparse.ArgumentTypeError(f"{text}: not JSON ({e})") from None
        if not isinstance(mapping, dict):
            raise argparse.ArgumentTypeError(f"{text}: the JSON must be an object {{OLD: NEW}}, got "
                                             f"{type(mapping).__name__}")
        pairs = list(mapping.items())
    for old, new in pairs:
        for name in (old, new):
            if not isinstance(name, str) or not _VARIABLE_NAME.fullmatch(name):
                raise argparse.ArgumentTypeError(f"{old!r}={new!r}: {name!r} is not a variable name or scope "
                                                 "(letters, digits, _ . - and /; a scope ends with /)")
    return pairs


def path(text: str) -> str:
    """A file or folder name: not empty ('' would silently mean no file, or the current folder), no NUL byte,
    within the system's length limits, and a leading ~ or ~user expanded here (a ~user that does not exist is an
    error, not a folder named '~user' made in the current one)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path; give a file or folder name")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} contains a NUL byte, which no file name can hold")
    path = os.path.expanduser(text)
    if path.startswith("~"):
        user = path[1:].partition("/")[0]
        raise argparse.ArgumentTypeError(f"{text}: " + (f"no user {user!r} to expand ~{user}" if user else
                                         "no home folder to expand ~ ($HOME is not set)") + "; give the path in full")
    try:
        encoded = os.fsencode(path)
    except UnicodeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid file name here") from None
    longest = max(map(len, encoded.split(b"/")))
    if len(encoded) >= MAX_PATH or longest > MAX_NAME:
        raise argparse.ArgumentTypeError(f"{text[:40]}...: too long ({len(encoded)} bytes; a path holds at most "
                                         f"{MAX_PATH - 1}, a name in it {MAX_NAME})")
    return path


def output_file(make_folders: bool = False, json: bool = False) -> Callable[[str], str]:
    """An argparse type for a file a command writes: checked writable before the work starts. An existing file
    must be a regular file, a device such as /dev/null or a FIFO some process reads (one nobody reads would block
    the writer forever); with `json`, one that holds a JSON object or lines of them (a log is appended to: a
    mistyped name must not grow an unrelated file)."""
    def check(text: str) -> str:
        name = Path(path(text))
        try:
            return _writable(name, text, make_folders, json)
        except OSError as e:  # e.g. a folder on the way that this user may not search
            raise argparse.ArgumentTypeError(f"cannot write {text}: {e.strerror or e}") from None
    return check


def _writable(path: Path, text: str, make_folders: bool, json: bool) -> str:
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISFIFO(mode):  # a pipe someone reads (/dev/stdout into `| jq`) is fine; one nobody reads is not
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: no reader, and a writer's open would wait for one forever
                raise argparse.ArgumentTypeError(f"{text} is a FIFO that no process reads (writing it would wait "
                                                 "forever); give a file name") from None
        elif not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
            raise argparse.ArgumentTypeError(f"{text} is not a regular file; give a file name")
        if json and stat.S_ISREG(mode):
            with open(path, "rb") as f:
                head = f.read(64).lstrip()
            if head and not head.startswith(b"{"):
                raise argparse.ArgumentTypeError(f"{text} exists and is not JSON (it does not start with '{{'); "
                                                 "give a new file name or one this command wrote")
    folder = path.parent
    while make_folders and not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the writer creates the missing folders below the nearest existing one
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(
            f"cannot write {text}: {folder} " + ("is not a folder" if folder.exists() else
                                                 "does not exist; create it first"))
    if not os.access(path if path.exists() else folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: permission denied")
    return str(path)

