"""The training and evaluation loops behind `tfplus train` and `tfplus eval`, usable without the CLI.

    from tfplus.trainer import TrainConfig, train, evaluate
    result = train(TrainConfig(model="lenet", synthetic=True, steps=50, batch_size=32))
    result.final_test_accuracy                      # e.g. 0.93
    evaluate(checkpoint_dir="runs/a")               # prints a per-class accuracy table

A run is exactly repeatable: the weights come from the graph seed, the batches are a pure function of
(seed, epoch, batch) (tfplus.data.train_batches), and a training step draws no random numbers. A checkpoint
holds the variables (optimizer slots and global step included) and, as JSON metadata, the recipe, the run's
options (RUN_OPTIONS: its memory budget, thread and worker counts, device, logs, ...), the data iterator's
position and the epoch history, so `--resume` after a crash continues with the very batches, learning rates
and options of an uninterrupted run and, on the cpu, gives its losses and weights bit for bit.

The --log file gets one JSON object per line (field names are stable):
- {"kind": "start", "step", "total_steps", "steps_per_epoch", "resumed", "device", "recipe"} per session;
- {"kind": "step", "step", "epoch", "loss", "accuracy", "lr", "images_per_sec", "peak_bytes", "h2d_bytes",
  "d2h_bytes"} every log_every steps and at an epoch's end: `step` counts steps done (1-based), `epoch` is
  1-based, loss and accuracy are the means over the steps since the last row (with log_every 1, that step's
  batch's), lr is that step's, images_per_sec is over the steps since the last row, peak_bytes the process's
  peak RSS (plus the memory its worker processes do not share with it, tfplus.engine.workers), h2d/d2h_bytes the
  session runtime's transfer counters so far;
- {"kind": "epoch", ..., "test_accuracy", "epoch_time_s"} after each epoch, with the epoch's mean loss and
  accuracy and its training time (evaluation excluded); test_accuracy is null for an epoch not evaluated
  (eval_every, --no-eval); with --logdir, also "test_loss" (the test set's mean cross-entropy, null likewise);
- with profile_every N, {"kind": "profile", "step", "epoch", "step_ms", "op_ms", "forward_ms", "backward_ms",
  "update_ms", "device_ms", "gflop", "gflop_per_s", "h2d_bytes", "d2h_bytes", "transfer_ms",
  "peak_live_bytes", "ops", "top_ops"} for every Nth step, traced (tfplus.profiler.RunMetadata.summary; the
  traced step's own times, so its images_per_sec in a step row is a little lower); top_ops lists the five
  costliest op types as [op type, ms].

A training step reads nothing back: the step adds its loss and accuracy to sums kept on the device
(RunningSums), which the loop reads only for a log row, a progress line, a checkpoint and an epoch's end.
So the host queues the next step while the device still runs this one, and a loss that turns NaN or
infinite is caught at the next read, naming the steps since the previous one.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

import tfplus as tf
from tfplus import data as tfdata
from tfplus import errors, finetune, profiler
from tfplus.engine.signals import raise_stopped
from tfplus.gfile import remove_orphan_temps
from tfplus.graphs import get_model, training_graph
from tfplus.graphs.mentee import DATA_FORMATS, DEFAULT_LR, OPTIMIZERS, SCHEDULES, default_warmup
from tfplus.train.saver import remove_interrupted_saves
from tfplus.units import format_size, parse_size

# The synthetic dataset (tfplus.data.synthetic): small enough that an epoch takes seconds.
SYNTHETIC_TRAIN, SYNTHETIC_TEST, SYNTHETIC_SEED = 5000, 1000, 0
# Test-set batches: larger than training ones (a forward pass needs far less memory than a training step),
# except under a memory budget, which was chosen for the training batch.
EVAL_BATCH = 500
CHECKPOINT_PREFIX = "model.ckpt"
CHECKPOINT_FORMAT = 1
MAX_STEPS = 2**63 - 1  # a run's steps: the global step is an int64
# Epoch rows a run keeps (with its best): each checkpoint's metadata carries them, so they may not grow with a
# run of a billion one-step epochs (the Saver reads at most 16 MB of metadata).
HISTORY_KEPT = 1000
# The stop requests the loop honours by saving, then exiting 128 + the signal's number. SIGHUP: the terminal
# closed (an ssh session dropped): the run is saved as for SIGTERM, not lost.
EXIT_ON_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
if hasattr(signal, "SIGHUP"):  # not on Windows
    EXIT_ON_SIGNAL[signal.SIGHUP] = 129


class UsageError(ValueError):
    """A bad option or option combination; the CLI prints it as one line and exits with code 2."""


class RunError(RuntimeError):
    """The run failed and stopped (e.g. a checkpoint could not be written); the CLI prints it as one line and
    exits with code 1."""


class LogError(RunError):
    """A --log or --logdir file could not be written (a full disk, say): the run saves, then stops with it.

    Stopping, rather than training on without the log: a full disk fails the next checkpoint too, and a log
    with a hole in it misleads; after the save, --resume continues the run and its log once there is space."""


class DivergedError(RunError):
    """The loss or the weights became NaN or infinite: the run stopped without saving them."""


# ---------------------------------------------------------------------------------------------------------
# Configuration

@dataclasses.dataclass
class TrainConfig:
    """One training run. Recipe fields left None take RECIPE_DEFAULTS, or on --resume the checkpoint's values.

    Recipe fields decide the numbers a run produces and must not change when resuming; the others
    (where the data is, the device, logging, checkpointing) may.
    """
    # recipe
    model: str | None = None
    conv_widths: tuple[int, ...] | None = None   # None: the model's default
    fc_widths: tuple[int, ...] | None = None
    data_format: str | None = None
    synthetic: bool | None = None
    batch_size: int | None = None
    epochs: int | None = None
    steps: int | None = None
    optimizer: str | None = None
    lr: float | None = None                      # None: 0.05 for momentum/sgd, 0.001 for adam
    momentum: float | None = None
    nesterov: bool | None = None
    weight_decay: float | None = None
    schedule: str | None = None
    warmup_steps: int | None = None              # None: one epoch (a shorter run stays in it)
    augment: bool | None = None
    seed: int | None = None
    # fine-tuning (recipe too): train only some variables, on some classes
    trainable: str | None = None                 # regex over variable names (tfplus.finetune.select_trainable)
    fine_tune_last: int | None = None            # train the last N layers only
    classes: tuple[int, ...] | None = None       # train and test on these classes only (labels kept as they are)
    # run: the fields of RUN_OPTIONS left None take RUN_DEFAULTS, or on --resume the checkpoint's values
    data: str | None = None
    device: str | None = None                    # None: cpu
    memory_budget: int | str | None = None
    threads: int | None = None                   # cpu threads (None: $TFPLUS_NUM_THREADS, else the cores)
    workers: int | None = None                   # worker processes (None: $TFPLUS_WORKERS, else tfplus.engine.workers)
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None          # steps; None: at the end of each epoch
    resume: bool = False
    log: str | None = None
    log_every: int | None = None                 # None: 10
    logdir: str | None = None                    # TensorBoard event files: the graph, scalars, the test set's
    profile_every: int | None = None             # steps between traced steps (rows of kind "profile")
    eval_every: int | None = None                # epochs between test-set evaluations (and the last); 0: none
    download: bool = False                       # fetch CIFAR-10 if absent (never without being asked)
    init_from: str | None = None                 # a checkpoint (file or folder) to start a new run from
    init_map: list[tuple[str, str]] | None = None   # (checkpoint name or scope, model name or scope) pairs
    input: str | None = None                     # "host" or "device" (CifarAugment); None: device_input()
    distributed: bool = False                    # one rank of an mpiexec or torchrun job (tfplus.distributed)


RECIPE = ("model", "conv_widths", "fc_widths", "data_format", "synthetic", "batch_size", "epochs", "steps",
          "optimizer", "lr", "momentum", "nesterov", "weight_decay", "schedule", "warmup_steps", "augment",
          "seed", "trainable", "fine_tune_last", "classes")
RECIPE_DEFAULTS: dict[str, Any] = {
    "model": "mentee", "conv_widths": None, "fc_widths": None, "data_format": "NCHW", "synthetic": False,
    "batch_size": 128, "epochs": 15, "steps": None, "optimizer": "momentum", "lr": None, "momentum": 0.9,
    "nesterov": True, "weight_decay": 5e-4, "schedule": "cosine", "warmup_steps": None, "augment": True,
    "seed": 0, "trainable": None, "fine_tune_last": None, "classes": None,
}


# The options besides the recipe that a checkpoint keeps ("options" in its metadata), so that `--resume` with
# only --checkpoint-dir runs on as the run did: where it runs, its memory, what it writes where.
RUN_OPTIONS = ("device", "memory_budget", "threads", "workers", "input", "checkpoint_every", "eval_every", "log",
               "log_every", "logdir", "profile_every")
RUN_DEFAULTS: dict[str, Any] = {
    "device": "cpu", "memory_budget": None, "threads": None, "workers": None, "input": None,
    "checkpoint_every": None, "eval_every": 1, "log": None, "log_every": 10, "logdir": None, "profile_every": None,
}
# Of those, the ones that change the weights a cpu step computes: its thread count (its kernels' shards, so the
# rounding), its batch split over worker processes, and a memory plan's micro-batches. A resumed run that changes
# one is refused, as a recipe change is; a changed device is taken (a run may move), with a note.
RESULT_OPTIONS = ("memory_budget", "threads", "workers")
_MAX_PROCESSES = 4096  # threads and worker processes a checkpoint may ask for


def _option_flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _given_options(cfg: TrainConfig) -> dict[str, Any]:
    """The run options this run sets: its fields that are not None, and the thread and worker counts the
    environment sets ($TFPLUS_NUM_THREADS, $TFPLUS_WORKERS), each as the value a checkpoint keeps."""
    from tfplus import threads
    from tfplus.engine import workers
    from tfplus.units import parse_size
    given = {k: getattr(cfg, k) for k in RUN_OPTIONS if getattr(cfg, k) is not None}
    try:
        if "memory_budget" in given:
            given["memory_budget"] = parse_size(given["memory_budget"], "--memory-budget")
        if "threads" not in given and os.environ.get(threads.ENV, "").strip():
            given["threads"] = threads.default_threads()
        if "threads" in given:
            given["threads"] = threads.parse_threads(given["threads"], "--threads")
        if "workers" in given or os.environ.get(workers.ENV, "").strip():
            given["workers"] = workers.resolve(given.get("workers"), given.get("threads", 1))
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    for k in ("log", "logdir"):  # kept absolute: a resumed run from another folder writes to the same files
        if k in given:
            given[k] = os.path.abspath(os.path.expanduser(given[k]))
    return given


def resolve_options(cfg: TrainConfig, saved: dict[str, Any] | None = None,
                    err: IO[str] | None = None) -> tuple[TrainConfig, list[str]]:
    """(cfg with its run options filled, the options taken from `saved`): the options this run sets, else
    `saved` (a checkpoint's "options"), else RUN_DEFAULTS; the thread count and a given worker count are resolved
    to numbers (threads.default_threads, workers.resolve), so a checkpoint records what ran; a worker count not
    given stays None, the default's per-step rule (tfplus.engine.workers.Payoff), which a resumed run keeps.

    A run that sets a RESULT_OPTIONS value other than `saved`'s is a UsageError: it would not give the
    uninterrupted run's weights. A saved --log or --logdir that is not a run's log (any more) is not taken (a
    note on `err` says so)."""
    from tfplus import threads
    from tfplus.engine import workers
    given, saved = _given_options(cfg), saved or {}
    device = given.get("device", saved.get("device", RUN_DEFAULTS["device"]))
    check_device(device)
    # A memory plan changes the numbers on every device; the thread count only the cpu's; the worker count only
    # an unbudgeted cpu run's (tf.Session starts no workers elsewhere).
    budget = given.get("memory_budget", saved.get("memory_budget"))
    checked = ("memory_budget",) + (("threads",) if device.startswith("cpu") else ()) + \
        (("workers",) if device.startswith("cpu") and budget is None else ())
    for k in checked:
        if saved and k in given and given[k] != saved.get(k):
            raise UsageError(f"{_option_flag(k)} {_fmt_option(k, given[k])} differs from the checkpoint's "
                             f"{_fmt_option(k, saved.get(k))}: a resumed run keeps the options that change its "
                             "weights (drop the option, or start a new run in another --checkpoint-dir)")
    values = {k: given[k] if k in given else saved.get(k, RUN_DEFAULTS[k]) for k in RUN_OPTIONS}
    for k, is_ours in (("log", _is_our_log), ("logdir", _is_our_logdir)):
        # NOTE: a checkpoint folder may come from elsewhere: it names files to append to, so only what a run
        # already wrote is taken (not ~/.bashrc, which would run a recipe's "$(...)" strings at the next login).
        if k not in given and values[k] is not None and not is_ours(values[k]):
            if err is not None:
                print(f"the checkpoint's {_option_flag(k)} {values[k]} is not a tfplus {k} (any more): not written; "
                      f"give {_option_flag(k)} to write one", file=err)
            values[k] = None
    taken = [k for k in RUN_OPTIONS if k not in given and values[k] is not None and saved.get(k) is not None]
    try:
        values["threads"] = threads.parse_threads(values["threads"] or threads.default_threads(), "--threads")
        # What runs. None: the default count of more than one, whose workers take the steps where they pay
        # (workers.Payoff); a checkpoint keeps None, so that a resumed run splits the steps its run split.
        if not device.startswith("cpu") or budget is not None:
            values["workers"] = 1
        else:
            n = workers.resolve(values["workers"], values["threads"])
            values["workers"] = None if values["workers"] is None and n > 1 else n
    except ValueError as e:
        raise UsageError(str(e)) from None
    return dataclasses.replace(cfg, **values), taken


def _is_our_log(path: str) -> bool:
    """Whether `path` is a --log file of `tfplus train`: a regular file whose first line is a "start" row."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device would hang or never end
            return False
        with open(path, encoding="utf-8", errors="replace") as f:
            first = json.loads(f.readline(1 << 16))
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and first.get("kind") == "start"


def _is_our_logdir(path: str) -> bool:
    """Whether `path` is a --logdir folder: a folder holding TensorBoard event files."""
    return os.path.isdir(path) and any(name.startswith("events.out.tfevents.") for name in os.listdir(path))


def _fmt_option(key: str, value: Any) -> str:
    if key == "memory_budget":
        return "none" if value is None else format_size(value)
    if key == "workers" and value is None:
        return "default (one per thread, for the steps where they pay)"
    return "none" if value is None else str(value)


def _describe_option(key: str, value: Any) -> str:
    """An option as the flag that sets it: '--threads 2', '--no-eval', '--memory-budget 12.0 MB'."""
    if key == "eval_every" and value == 0:
        return "--no-eval"
    return f"{_option_flag(key)} {_fmt_option(key, value)}"


def _options(cfg: TrainConfig) -> dict[str, Any]:
    """The run options a checkpoint keeps (as resolve_options left them: numbers and absolute paths)."""
    return {k: getattr(cfg, k) for k in RUN_OPTIONS}


def _recipe(cfg: TrainConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in RECIPE}


def _json_ready(recipe: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in recipe.items()}


def _from_json(recipe: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in recipe.items()}


def resolve(cfg: TrainConfig, saved: dict[str, Any] | None = None) -> TrainConfig:
    """Fills the recipe fields left None: from `saved` (a checkpoint's recipe) if given, else the defaults.

    A field set both in cfg and in saved must agree (a resumed run keeps its recipe). Raises UsageError.
    """
    given = {k: v for k, v in _recipe(cfg).items() if v is not None}
    if saved is not None:
        saved = _from_json(saved)
        # --steps and --epochs are one choice: giving the other one is a change too.
        if given.get("epochs") is not None and saved.get("steps") is not None or \
                given.get("steps") is not None and saved.get("epochs") is not None:
            raise UsageError(f"the checkpoint's run is {_length(saved)}; a resumed run keeps its length "
                             "(drop --epochs/--steps)")
        for k, v in given.items():
            if saved.get(k) != v:
                raise UsageError(f"--{k.replace('_', '-')} {_fmt(v)} differs from the checkpoint's "
                                 f"{_fmt(saved.get(k))}; a resumed run keeps its recipe (drop the option, or "
                                 "start a new run in another --checkpoint-dir)")
        base = saved
    else:
        if given.get("epochs") is not None and given.get("steps") is not None:
            raise UsageError("give --epochs or --steps, not both")
        base = dict(RECIPE_DEFAULTS, **({"epochs": None} if given.get("steps") is not None else {}))
    out = dataclasses.replace(cfg, **{k: given.get(k, base.get(k)) for k in RECIPE})
    _check(out)
    if out.lr is None:
        out.lr = DEFAULT_LR[out.optimizer]
    return out


def _length(recipe: dict[str, Any]) -> str:
    return f"{recipe['steps']} steps" if recipe.get("steps") is not None else f"{recipe.get('epochs')} epochs"


def _fmt(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)


def _check(cfg: TrainConfig) -> None:
    try:
        get_model(cfg.model)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _check_fine_tuning(cfg)
    checks = [
        (cfg.batch_size >= 1, f"--batch-size must be >= 1, got {cfg.batch_size}"),
        (cfg.epochs is None or cfg.epochs >= 1, f"--epochs must be >= 1, got {cfg.epochs}"),
        (cfg.steps is None or cfg.steps >= 1, f"--steps must be >= 1, got {cfg.steps}"),
        (cfg.optimizer in OPTIMIZERS, f"unknown optimizer {cfg.optimizer!r}; use {', '.join(OPTIMIZERS)}"),
        (cfg.schedule in SCHEDULES, f"unknown schedule {cfg.schedule!r}; use {', '.join(SCHEDULES)}"),
        (cfg.data_format in DATA_FORMATS, f"--data-format must be one of {', '.join(DATA_FORMATS)}"),
        (cfg.lr is None or 0 < cfg.lr < math.inf, f"--lr must be a finite number > 0, got {cfg.lr}"),
        (cfg.warmup_steps is None or cfg.warmup_steps >= 0,
         f"--warmup-steps must be >= 0, got {cfg.warmup_steps}"),
        (0 <= cfg.weight_decay < math.inf, f"--weight-decay must be a finite number >= 0, got {cfg.weight_decay}"),
        (0 <= cfg.momentum < 1, f"--momentum must be in [0, 1), got {cfg.momentum}"),
        (0 <= cfg.seed < 2**63, f"--seed must be in [0, 2**63), got {cfg.seed}"),
        (cfg.log_every is None or cfg.log_every >= 1, f"--log-every must be >= 1, got {cfg.log_every}"),
        (cfg.eval_every is None or cfg.eval_every >= 0, f"--eval-every must be >= 1, got {cfg.eval_every}"),
        (cfg.profile_every is None or cfg.profile_every >= 1,
         f"--profile-every must be >= 1, got {cfg.profile_every}"),
        (cfg.profile_every is None or cfg.log is not None, "--profile-every needs --log"),
        (cfg.checkpoint_every is None or cfg.checkpoint_every >= 1,
         f"--checkpoint-every must be >= 1, got {cfg.checkpoint_every}"),
        (cfg.checkpoint_every is None or cfg.checkpoint_dir is not None,
         "--checkpoint-every needs --checkpoint-dir"),
        (not cfg.resume or cfg.checkpoint_dir is not None, "--resume needs --checkpoint-dir"),
        (cfg.checkpoint_dir != "", "--checkpoint-dir '': give a folder"),
        (cfg.log != "", "--log '': give a file"),
        (cfg.synthetic is False or cfg.data is None, "give --data or --synthetic, not both"),
        (cfg.input in (None, "host", "device"), f"--input must be host or device, got {cfg.input!r}"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)


def _check_fine_tuning(cfg: TrainConfig) -> None:
    """The fine-tuning fields (written into checkpoints after RECIPE_SCHEMA, so checked here, types first)."""
    if cfg.trainable is not None and not isinstance(cfg.trainable, str):
        raise UsageError(f"--trainable must be a regular expression, got {_short(cfg.trainable)}")
    if cfg.fine_tune_last is not None and (type(cfg.fine_tune_last) is not int or cfg.fine_tune_last < 1):
        raise UsageError(f"--fine-tune-last must be a whole number >= 1, got {_short(cfg.fine_tune_last)}")
    if cfg.trainable is not None and cfg.fine_tune_last is not None:
        raise UsageError("give --trainable or --fine-tune-last, not both")
    if cfg.classes is not None:
        ok = isinstance(cfg.classes, tuple) and cfg.classes and \
            all(type(c) is int and 0 <= c < len(tfdata.CLASSES) for c in cfg.classes) and \
            len(set(cfg.classes)) == len(cfg.classes)
        if not ok:
            raise UsageError(f"--classes must list distinct class numbers 0..{len(tfdata.CLASSES) - 1}, got "
                             f"{_short(list(cfg.classes) if isinstance(cfg.classes, tuple) else cfg.classes)}")


def parse_classes(text: str) -> tuple[int, ...]:
    """'0-4' -> (0, 1, 2, 3, 4); '5,7' -> (5, 7); '0-2,9' -> (0, 1, 2, 9). ValueError if malformed."""
    out: list[int] = []
    n = len(tfdata.CLASSES)
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not re.fullmatch("[0-9]{1,3}", lo) or dash and not re.fullmatch("[0-9]{1,3}", hi) or \
                dash and int(hi) < int(lo):
            raise ValueError(f"{text!r}: give class numbers and ranges, e.g. 0-4 or 5,7,9")
        if int(hi if dash else lo) >= n:  # checked before a range is made: 0-99999999999 would fill the memory
            raise ValueError(f"{text!r}: the classes are numbered 0..{n - 1}")
        out += range(int(lo), int(hi if dash else lo) + 1)
    return tuple(out)


def only_classes(dataset: tfdata.CifarDataset, classes: tuple[int, ...]) -> tfdata.CifarDataset:
    """The training and test images of `classes` only; labels keep their numbers (0..9), so the model keeps its
    10 outputs and a checkpoint of one subset initializes a run on another."""
    train, test = np.isin(dataset.train_labels, classes), np.isin(dataset.test_labels, classes)
    return dataclasses.replace(dataset, train_images=dataset.train_images[train],
                               train_labels=dataset.train_labels[train], test_images=dataset.test_images[test],
                               test_labels=dataset.test_labels[test])


def check_device(device: str) -> None:
    """Refuses device strings that tfplus.runtime.parse_device does not read, before any work is done."""
    from tfplus.runtime import parse_device
    try:
        parse_device(device)
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None


def _session(graph: tf.Graph, device: str, memory_budget, threads: int | None = None,
             workers: int | None = None) -> tf.Session:
    """A Session on `device` (threads, workers: None for the defaults); a device or budget the runtime cannot
    provide is a UsageError."""
    check_device(device)
    try:
        return tf.Session(graph=graph, device=device, memory_budget=memory_budget, workers=workers,
                          config=tf.ConfigProto(intra_op_parallelism_threads=threads or 0))
    except ImportError as e:
        raise UsageError(f"--device {device}: the OpenCL runtime is not available ({e})") from None
    except NotImplementedError as e:
        raise UsageError(f"--device {device}" + (f" --memory-budget {memory_budget}" if memory_budget else "")
                         + f": {e}") from None
    except (ValueError, RuntimeError, TypeError) as e:
        raise UsageError(f"--device {device}: {e}") from None


# ---------------------------------------------------------------------------------------------------------
# Data

def load_data(data: str | None = None, synthetic: bool = False, download: bool = False,
              err: IO[str] | None = None) -> tuple[tfdata.CifarDataset, str | None]:
    """(dataset, its folder): the synthetic dataset (folder None), or CIFAR-10 from `data` / $TFPLUS_DATA /
    the cache dir, downloaded there if absent and `download`.

    An explicit `data` that is missing, not a folder or not readable is a UsageError (a mistyped folder is
    never created); missing data is a tfplus.data.DataError that says how to get it.
    """
    if synthetic:
        return tfdata.synthetic(SYNTHETIC_TRAIN, SYNTHETIC_TEST, seed=SYNTHETIC_SEED), None
    if data is not None:
        path = Path(data).expanduser()
        if not path.exists():
            raise UsageError(f"--data {data}: no such directory; give the folder that holds "
                             "cifar-10-batches-bin/ (or add --download without --data to fetch CIFAR-10)")
        if not path.is_dir():
            raise UsageError(f"--data {data}: not a directory; give the folder of cifar-10-batches-bin/")
        if not os.access(path, os.R_OK | os.X_OK):
            raise UsageError(f"--data {data}: the directory is not readable (check its permissions)")
    found = tfdata.find_data_dir(data)
    if found is None:
        if data is not None and download:  # a folder the user named is read, never made a download target
            raise UsageError(f"--data {data} holds no CIFAR-10; --download fetches it into $TFPLUS_DATA or "
                             f"{tfdata.cache_dir()} (drop --data), or give the folder that holds it")
        if not download:
            tfdata.load(data)  # raises DataError naming the folder and the fixes
        print(f"CIFAR-10 not found in {tfdata.data_root(data)}; downloading it there", file=err or sys.stderr)
        found = tfdata.download(data)
    return tfdata.read_batches(found), str(found.resolve())


def _saved_data_dir(meta: dict[str, Any] | None) -> str | None:
    """The data folder a checkpoint was trained on, if it is still there (used when --data is not given)."""
    folder = (meta or {}).get("data")
    return folder if folder and os.path.isdir(folder) else None


# ---------------------------------------------------------------------------------------------------------
# Checkpoints: the Saver writes the variables; the JSON metadata holds everything else a resume needs.

def latest_checkpoint(checkpoint_dir: str | os.PathLike) -> str | None:
    return tf.train.latest_checkpoint(str(checkpoint_dir))


def newest_checkpoint(checkpoint_dir: str | os.PathLike, err: IO[str]):
    """The newest checkpoint of `checkpoint_dir` that verifies, opened (a CheckpointReader: its files stay
    readable if another process's Saver deletes them meanwhile), after saying on `err` which newer ones were
    skipped and why; None if the folder holds none. UsageError if it holds some but none verifies."""
    reader, skipped = tf.train.newest_valid_checkpoint(str(checkpoint_dir))
    for path, why in skipped:
        print(f"skipped checkpoint {path}: {why}", file=err)
    if reader is None and skipped:
        raise UsageError(f"no checkpoint in {checkpoint_dir} is whole ({len(skipped)} damaged, see above); "
                         "move them away to start a new run there")
    return reader


def read_metadata(path) -> dict[str, Any]:
    """The JSON metadata stored with checkpoint `path` (a path or an open CheckpointReader; checksummed by the
    Saver), checked against what `tfplus train` writes (METADATA); a checkpoint that is not one of ours, or
    whose metadata is odd, is a UsageError naming the file and the first bad field."""
    if isinstance(path, str):
        meta = tf.train.read_checkpoint_metadata(path)
    else:
        path, meta = path.path, path.metadata()
    if not isinstance(meta, dict) or "recipe" not in meta:
        raise UsageError(f"{path}: not a checkpoint of `tfplus train` (no run recipe in its metadata)")
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise UsageError(f"{path}: checkpoint format {_short(meta.get('format'))}; this tfplus reads format "
                         f"{CHECKPOINT_FORMAT}")
    problem = _schema_problem(meta, METADATA)
    if problem is None:
        try:
            resolve(TrainConfig(), meta["recipe"])
            finetune.check_pattern(meta["recipe"].get("trainable"))  # matching an unsafe one could hang
        except (UsageError, ValueError) as e:
            problem = f"its recipe is invalid: {e}"
    if problem is not None:
        raise UsageError(f"{path}: not a valid `tfplus train` checkpoint: {problem}")
    return meta


# The checkpoint metadata `tfplus train` writes: each field as (check, what it must be), or a dict of fields for
# an object. The one place it is checked, so that the code reading it can index it without fear of a KeyError or
# a TypeError.
def _count(low: int = 0) -> tuple:
    return lambda v: type(v) is int and low <= v < 2**63, f"a whole number >= {low}"


def _nullable(field: tuple) -> tuple:
    return lambda v: v is None or field[0](v), f"null or {field[1]}"


def _list_of(field: tuple) -> tuple:
    return lambda v: isinstance(v, list) and all(map(field[0], v)), f"a list, each item {field[1]}"


def _optional(field: tuple) -> tuple:
    """A field that checkpoints written before it existed lack; checked where present."""
    return (*field, "optional")


def _object(fields: dict[str, tuple]) -> tuple:
    return lambda v: _schema_problem(v, fields) is None, f"an object with {', '.join(fields)}"


_NUMBER = (lambda v: type(v) in (int, float) and 0 <= v < math.inf, "a finite number >= 0")
_STR = (lambda v: isinstance(v, str), "a string")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_SUMS = (lambda v: isinstance(v, list) and len(v) == 3 and _NUMBER[0](v[0]) and _NUMBER[0](v[1])
         and _count()[0](v[2]), "[loss sum, accuracy sum, steps]")
RECIPE_SCHEMA: dict[str, tuple] = {
    "model": _STR, "conv_widths": _nullable(_list_of(_count(1))), "fc_widths": _nullable(_list_of(_count(1))),
    "data_format": _STR, "synthetic": _BOOL, "batch_size": _count(1), "epochs": _nullable(_count(1)),
    "steps": _nullable(_count(1)), "optimizer": _STR, "lr": _NUMBER, "momentum": _NUMBER, "nesterov": _BOOL,
    "weight_decay": _NUMBER, "schedule": _STR, "warmup_steps": _count(), "augment": _BOOL, "seed": _count(),
}
_PROCESSES = (lambda v: type(v) is int and 1 <= v <= _MAX_PROCESSES, f"a whole number 1..{_MAX_PROCESSES}")
OPTIONS_SCHEMA: dict[str, tuple] = {
    "device": _STR, "memory_budget": _nullable(_count(1)), "threads": _PROCESSES, "workers": _nullable(_PROCESSES),
    "input": _nullable(_STR), "checkpoint_every": _nullable(_count(1)), "eval_every": _count(), "log": _nullable(_STR),
    "log_every": _count(1), "logdir": _nullable(_STR), "profile_every": _nullable(_count(1)),
}
METADATA: dict[str, tuple] = {
    "step": _count(), "recipe": RECIPE_SCHEMA, "data": _nullable(_STR),
    "data_state": {"seed": _count(), "epoch": _count(), "batch_index": _count()},
    "history": _list_of(_object({"epoch": _count(1), "test_accuracy": _nullable(_NUMBER)})),
    "sums": _SUMS,
    # The device's running sums (RunningSums) of the steps since the last log row, not yet in "sums".
    "window": _optional(_SUMS),
    "elapsed_s": _NUMBER, "epoch_s": _NUMBER, "h2d_bytes": _count(), "d2h_bytes": _count(),
    "options": _optional(_object(OPTIONS_SCHEMA)),
    "ranks": _optional(_PROCESSES),  # the processes that trained together (--distributed); absent: 1
}


def _schema_problem(obj: Any, fields: dict[str, Any], where: str = "") -> str | None:
    """What is wrong with `obj` against `fields` (None if nothing; keys not in `fields` are ignored)."""
    if not isinstance(obj, dict):
        return f"{where or 'the metadata'} must be an object, got {_short(obj)}"
    for key, field in fields.items():
        name = f"{where}.{key}" if where else key
        if key not in obj:
            if isinstance(field, tuple) and field[2:] == ("optional",):
                continue
            return f"{name} is missing"
        if isinstance(field, dict):
            problem = _schema_problem(obj[key], field, name)
            if problem:
                return problem
        elif not field[0](obj[key]):
            return f"{name} must be {field[1]}, got {_short(obj[key])}"
    return None


def _short(v: Any) -> str:
    try:
        text = json.dumps(v)
    except RecursionError:
        return f"a deeply nested {type(v).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def _save(saver, sess: tf.Session, checkpoint_dir: str, step: int, meta: dict[str, Any]) -> str:
    # No .meta: the trainer rebuilds its graph from the model, and exporting it at every checkpoint costs time.
    return saver.save(sess, os.path.join(checkpoint_dir, CHECKPOINT_PREFIX), global_step=step, metadata=meta,
                      write_meta_graph=False)


def prepare_checkpoint_dir(folder: str, err: IO[str]) -> None:
    """Creates `folder` if needed and proves that files can be created in it, so that a bad --checkpoint-dir
    fails at startup rather than at the first save after an epoch's work; removes the temporary files of
    checkpoint writes that were killed (a folder is one run's: no other process writes there)."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        removed = remove_orphan_temps(folder) + remove_interrupted_saves(folder)
    except OSError as e:
        why = "it is a file, not a folder" if os.path.exists(folder) and not os.path.isdir(folder) else \
            e.strerror or str(e)
        raise UsageError(f"--checkpoint-dir {folder}: cannot write checkpoints there ({why})") from None
    if removed:
        print(f"removed {len(removed)} temporary file{'s' * (len(removed) > 1)} of interrupted checkpoint "
              f"writes from {folder}", file=err)


# ---------------------------------------------------------------------------------------------------------
# Output: progress bar, JSON lines log

class _Console:
    """stdout or stderr for the run's lines. The first write that fails (a closed pipe: `tfplus train | head`; a
    full disk under a redirection) is a LogError, so that the run saves before it stops, as for --log; later
    writes are dropped, so that nothing on the way to the save (a progress bar's clear) fails again."""

    def __init__(self, stream: IO[str], name: str):
        self._stream, self._name, self.broken = stream, name, False

    def _do(self, method: str, *args):
        if self.broken:
            return None
        try:
            return getattr(self._stream, method)(*args)
        except OSError as e:
            self.broken = True
            raise LogError(f"cannot write to {self._name} ({e.strerror or e})") from None

    def write(self, text: str):
        return self._do("write", text)

    def flush(self) -> None:
        self._do("flush")

    def isatty(self) -> bool:
        return self._stream.isatty()


class Progress:
    """One epoch's progress bar: redrawn in place (\\r) on a terminal, else a plain line at its first update,
    then every PRINT_EVERY_S seconds, and at the epoch's end (as tqdm does off a terminal: a log shows progress
    every few seconds however long an epoch is, and not a line per step however short)."""

    PRINT_EVERY_S = 10.0

    def __init__(self, stream: IO[str], total: int, label: str):
        self.stream, self.total, self.label = stream, total, label
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._width = 0
        self._printed: float | None = None  # when the last line was printed
        self._due: tuple[int, bool] = (-1, False)  # (done, whether update(done) prints a line)

    def prints(self, done: int) -> bool:
        """Whether update(done) writes a new line (off a terminal); on one, every update redraws the bar. The
        answer for `done` is kept, so that update(done) prints the line the caller has read its numbers for."""
        if self.tty:
            return False
        if self._due[0] != done:
            self._due = (done, self._printed is None or done == self.total or
                         time.monotonic() - self._printed >= self.PRINT_EVERY_S)
        return self._due[1]

    def update(self, done: int, text: str) -> None:
        if self.tty:
            filled = 20 * done // self.total
            line = f"{self.label} [{'#' * filled}{'.' * (20 - filled)}] {done}/{self.total} {text}"
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        elif self.prints(done):
            self.stream.write(f"{self.label} {done}/{self.total} {text}\n")
            self._printed = time.monotonic()
        self.stream.flush()

    def clear(self) -> None:
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


class JsonLog:
    """Appends one JSON object per line and flushes it, so a killed run loses no logged row. A row that cannot
    be written is a LogError naming the file."""

    def __init__(self, path: str | None):
        self._file, self._path, self._failed = None, path, False
        if path:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                _cut_torn_row(path)
                self._file = open(path, "a", encoding="utf-8")  # closed in close()
            except OSError as e:
                raise UsageError(f"--log {path}: cannot open it for writing ({e.strerror})") from None

    def write(self, row: dict[str, Any]) -> None:
        if self._file is not None:
            try:
                self._file.write(json.dumps(row) + "\n")
                self._file.flush()
            except OSError as e:
                self._failed = True
                raise LogError(f"cannot write --log {self._path} ({e.strerror or e})") from None

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                if not self._failed:  # after a failed write, its unwritten row fails again here: said already
                    raise


def _cut_torn_row(path: str) -> None:
    """Cuts off the end of a JSON-lines file after its last newline: a row that a writer killed (or stopped by a
    full disk) left half-written, which the next row appended would otherwise join into one line no JSON reader
    takes. Only a regular file: a pipe or a terminal is written as it is."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
    except FileNotFoundError:
        return
    with open(path, "rb+") as f:
        end = pos = f.seek(0, os.SEEK_END)
        while pos > 0:  # the last newline, read backwards
            size = min(pos, 1 << 16)
            f.seek(pos - size)
            newline = f.read(size).rfind(b"\n")
            if newline >= 0:
                pos += newline - size + 1
                break
            pos -= size
        if pos < end:
            f.truncate(pos)
            print(f"tfplus: note: {path}: cut off its last {end - pos} bytes, a row left unfinished by a run that "
                  "was stopped while writing it", file=sys.stderr)


class TensorBoardLog:
    """Passes rows on to a JsonLog and writes them to TensorBoard event files in `logdir`: the training graph
    (the GRAPHS tab), the numbers of step rows as train/loss, train/accuracy, train/lr, train/images_per_sec,
    train/peak_bytes, ..., of epoch rows as epoch/...; and, in `logdir`/validation (a run of its own, as
    Keras's TensorBoard callback writes), the test set's epoch/accuracy and epoch/loss, drawn over the
    training's in the same charts. A file that cannot be written is a LogError naming it."""

    SCALARS = ("loss", "accuracy", "lr", "images_per_sec", "peak_bytes", "test_accuracy", "epoch_time_s")
    VALIDATION = {"test_accuracy": "accuracy", "test_loss": "loss"}  # epoch row field -> validation tag

    def __init__(self, log: JsonLog, logdir: str, graph: tf.Graph):
        from tfplus import summary
        self._log, self._summary, self._failed = log, summary, False
        self._writer = self._validation = None
        try:
            self._writer = summary.FileWriter(logdir)
            self._validation = summary.FileWriter(os.path.join(logdir, "validation"))
        except OSError as e:
            self.close()
            raise UsageError(f"--logdir {logdir}: cannot write there ({e.strerror})") from None
        self._guarded(self._writer, lambda: self._writer.add_graph(graph))

    def _guarded(self, writer, add) -> None:
        try:
            add()
            writer.flush()
        except OSError as e:
            self._failed = True
            raise LogError(f"cannot write --logdir event file {writer.path} ({e.strerror or e})") from None

    def _add(self, writer, tags: dict[str, str], row: dict[str, Any], prefix: str) -> None:
        values = [self._summary.Summary.Value(tag=f"{prefix}/{tag}", simple_value=float(row[k]))
                  for k, tag in tags.items() if isinstance(row.get(k), (int, float))]
        if values:
            self._guarded(writer, lambda: writer.add_summary(self._summary.Summary(value=values), row["step"]))

    def write(self, row: dict[str, Any]) -> None:
        self._log.write(row)
        if row.get("kind") in ("step", "epoch"):
            prefix = "train" if row["kind"] == "step" else "epoch"
            self._add(self._writer, {k: k for k in self.SCALARS}, row, prefix)
        if row.get("kind") == "epoch":
            self._add(self._validation, self.VALIDATION, row, "epoch")

    def close(self) -> None:
        self._log.close()
        for writer in (self._writer, self._validation):
            try:
                if writer is not None:
                    writer.close()
            except OSError:
                if not self._failed:  # after a failed write, its unwritten events fail again here: said already
                    raise


def peak_rss_bytes(sess: tf.Session | None = None) -> int:
    """The process's peak resident set size, plus the memory of `sess`'s live worker processes (tfplus.engine.workers)
    that is their own, not shared with this one (/proc's smaps_rollup) (0 where the platform does not report
    it)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    own = int(peak) if sys.platform == "darwin" else int(peak) * 1024  # macOS reports bytes, Linux KiB
    pids = sess.workers.pids() if sess is not None and sess.workers is not None else []
    return own + sum(map(_private_bytes, pids))


def _private_bytes(pid: int) -> int:
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except OSError:
        pass
    return total


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


# ---------------------------------------------------------------------------------------------------------
# Training

@dataclasses.dataclass
class TrainResult:
    steps: int                                   # global step reached
    total_steps: int
    history: list[dict[str, Any]]                # one dict per finished epoch (the epoch rows of the log): the
                                                 # last HISTORY_KEPT, and the best evaluated one
    final_test_accuracy: float | None
    best_test_accuracy: float | None
    best_epoch: int | None
    total_time_s: float                          # over all sessions of a resumed run
    peak_bytes: int
    checkpoint: str | None                       # the last checkpoint written, if any
    exit_code: int = 0                           # 130 / 143 / 129 when stopped by SIGINT / SIGTERM / SIGHUP


def _model_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    kw = {}
    if cfg.conv_widths is not None:
        kw["conv_widths"] = tuple(cfg.conv_widths)
    if cfg.fc_widths is not None:
        kw["fc_widths"] = tuple(cfg.fc_widths)
    return kw


def _select(cfg: TrainConfig):
    """training_graph's var_list: the variables --trainable / --fine-tune-last pick (None: all)."""
    if cfg.trainable is None and cfg.fine_tune_last is None:
        return None

    def pick(variables):
        try:
            return finetune.select_trainable(variables, cfg.trainable, cfg.fine_tune_last)
        except ValueError as e:
            raise UsageError(str(e)) from None
    return pick


def device_input(cfg: TrainConfig) -> bool:
    """Whether batches reach the graph as uint8 bytes and crops (tfplus.ops.image_ops.cifar_augment makes the
    floats where the model runs): --input device, and by default on opencl. It moves a quarter of the bytes and
    takes the augmentation off the host, whose Python shares the GIL with the step's launches: on the H100, 15
    epochs took 24.6 s with it and 33.3 s with host input (BENCHMARKS.md). The cpu device augments on the host
    (the kernel would run on the same cores)."""
    if cfg.input is None:
        return cfg.device.startswith("opencl")
    return cfg.input == "device"


def build_graph(cfg: TrainConfig, total_steps: int, device_input: bool = False, wrap_optimizer=None):
    """The training graph of a resolved config; `wrap_optimizer` wraps its optimizer (training_graph's), e.g.
    FedProx's proximal term (tfplus.federated.model)."""
    if cfg.distributed:  # the ranks average the gradients the given wrapper makes
        inner, distributed = wrap_optimizer, _distributed().DistributedOptimizer
        wrap_optimizer = distributed if inner is None else (lambda opt: distributed(inner(opt)))
    try:
        model = get_model(cfg.model)
        return training_graph(model.build, total_steps=total_steps, seed=cfg.seed, image_shape=model.image_shape,
                              optimizer=cfg.optimizer, learning_rate=cfg.lr, momentum=cfg.momentum,
                              nesterov=cfg.nesterov, weight_decay=cfg.weight_decay, schedule=cfg.schedule,
                              warmup_steps=cfg.warmup_steps or 0, data_format=cfg.data_format,
                              model_kwargs=_model_kwargs(cfg), var_list=_select(cfg), device_input=device_input,
                              wrap_optimizer=wrap_optimizer)
    except UsageError:
        raise
    except ValueError as e:  # e.g. widths that pool the image away
        raise UsageError(f"cannot build model {cfg.model!r} with these options: {e}") from None


def model_variables(tg) -> list:
    """The model's variables (weights, batch norm's moving statistics): those created before the global step,
    which training_graph makes after the model and before the optimizer's slots."""
    return [v for v in tg.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
            if v.op._id < tg.global_step.op._id]


def _init_map(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """--init-map's pairs as tf.train.init_from_checkpoint's map; UsageError for a name mapped two ways."""
    mapping: dict[str, str] = {}
    for old, new in pairs:
        if mapping.setdefault(old, new) != new:
            raise UsageError(f"--init-map maps {old} twice ({old}={mapping[old]} and {old}={new}); keep one")
    return mapping


def _init_from(cfg: TrainConfig, tg, meta: dict[str, Any] | None, err: IO[str]):
    """The InitFrom of --init-from and --init-map (in tg's graph, before the session), after one line saying how
    many variables it restores, how many of them under another name, and which it leaves fresh."""
    if cfg.init_map and cfg.init_from is None:
        raise UsageError("--init-map needs --init-from CKPT, the checkpoint whose names it maps")
    if cfg.init_from is None:
        return None
    if meta is not None:
        print(f"--init-from {cfg.init_from} ignored: resuming, the variables come from the run's checkpoint",
              file=err)
        return None
    try:
        init = finetune.init_from(model_variables(tg), cfg.init_from, _init_map(cfg.init_map or []))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not init.restored:
        raise UsageError(f"--init-from {cfg.init_from}: no variable of model {cfg.model!r} matches the "
                         f"checkpoint by name and shape ({init.skipped[0][0]}: {init.skipped[0][1]}, ...)")
    fresh = list(dict.fromkeys(name.split("/", 1)[0] for name, _ in init.skipped))  # top-level scopes, in order
    print(f"init from {init.path}: restored {len(init.restored)} of {len(init.restored) + len(init.skipped)} "
          f"model variables ({len(init.renamed)} renamed), left {len(init.skipped)} fresh"
          + (f" (scopes {', '.join(fresh)})" if fresh else ""), file=err)
    for name, why in init.skipped:
        print(f"  not restored: {name} ({why})", file=err)
    return init


def _say_trainable(cfg: TrainConfig, tg, err: IO[str]) -> None:
    if cfg.trainable is None and cfg.fine_tune_last is None:
        return
    every = tg.graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)
    train_vars = _select(cfg)(every)
    chosen = {id(v) for v in train_vars}
    layers = [name for name, vs in finetune.model_layers(every) if any(id(v) in chosen for v in vs)]
    print(f"fine-tuning: training {len(train_vars)} of {len(every)} variables (layers {', '.join(layers)}); "
          "the rest frozen", file=err)


class RunningSums:
    """The loss and accuracy of the steps since the last reset, summed on the device by the training step
    itself (step_op: train_op and the sum), so that a step copies nothing back and the host can queue the next
    one at once. A local variable: the Saver leaves it out; a checkpoint's metadata holds its values.

        sums = RunningSums(tg); sums.start(sess)
        sess.run(sums.step_op, feed); sums.steps += 1
        loss_sum, accuracy_sum = sums.read(sess)      # the only copy to the host (a sync)
    """

    def __init__(self, tg):
        with tg.graph.as_default(), tf.name_scope("running_sums"):
            self.var = tf.Variable(tf.zeros([2]), trainable=False, collections=[tf.GraphKeys.LOCAL_VARIABLES],
                                   name="loss_accuracy")
            add = self.var.assign_add(tf.stack([tg.loss, tg.accuracy]))
            self.step_op = tf.group(tg.train_op, add, name="train_step")
        self.steps = 0  # steps summed since the last reset

    def start(self, sess: tf.Session, window: list | None = None) -> None:
        """Starts from a checkpoint's [loss sum, accuracy sum, steps] (float32 values, so bit for bit), or 0."""
        loss, acc, self.steps = window or (0.0, 0.0, 0)
        self.var.load(np.array([loss, acc], np.float32), sess)

    def read(self, sess: tf.Session) -> tuple[float, float]:
        loss, acc = sess.run(self.var)
        return float(loss), float(acc)

    def reset(self, sess: tf.Session) -> None:
        self.start(sess)


def train(cfg: TrainConfig, out: IO[str] | None = None, err: IO[str] | None = None) -> TrainResult:
    """Trains per `cfg`; epoch summaries go to `out` (stdout), the progress bar and notes to `err` (stderr).

    Raises UsageError for bad options and tfplus.data.DataError for missing data. On SIGINT/SIGTERM/SIGHUP it
    finishes the step, saves a checkpoint (with checkpoint_dir) and returns with exit_code 130/143/129. A
    worker process that dies or stops (tfplus.errors.UnavailableError) or a log file that cannot be written
    (a full disk) is a RunError, raised after saving the last completed step.

    The steps run in a tf.train.MonitoredSession whose hooks do the rest: _ProgressHook counts and shows them,
    _EpochHook evaluates and reports each epoch, _CheckpointHook saves, _StopHook stops at the last step or on a
    signal, _PeakMemoryHook measures the run's memory before the session closes.

    With `distributed`, this process is one rank of an `mpiexec -n N` or `torchrun --nproc-per-node N` job (see
    _for_this_rank): the ranks train one model on disjoint shards of each batch; a rank that fails ends the job
    (distributed.abort), so none waits forever.
    """
    if not cfg.distributed:
        return _train(cfg, out, err)
    dist = _distributed()
    try:
        dist.init()
    except (ImportError, ValueError, dist.LaunchError) as e:
        raise UsageError(f"--distributed: {e}") from None
    if cfg.workers not in (None, 1):
        raise UsageError(f"--workers {cfg.workers} with --distributed: each rank is one process; start more ranks "
                         f"({dist.launcher('N')}) instead")
    # Each rank takes its share of this host's cores, and forks no workers.
    cfg = dataclasses.replace(cfg, workers=1, threads=cfg.threads or max(1, _threads().default_threads()
                                                                         // dist.local_size()))
    try:
        if dist.rank() == 0:
            return _train(cfg, out, err)
        with open(os.devnull, "w") as quiet:  # rank 0 reports for the job
            return _train(cfg, quiet, quiet)
    except BaseException as e:
        if dist.size() > 1:
            # Ctrl-C before the steps' stop handling (or a second one): mpiexec passes it on to every rank. A
            # SIGTERM or SIGHUP then (the command line's engine.signals.Stopped, a KeyboardInterrupt too) ends the
            # job with its own status: it was 130, "interrupted".
            signum = getattr(e, "signum", signal.SIGINT) if isinstance(e, KeyboardInterrupt) else None
            what = f"failed ({type(e).__name__}: {e})" if signum is None else "was interrupted" \
                if signum == signal.SIGINT else f"was stopped by {signal.Signals(signum).name}"
            print(f"tfplus train --distributed: rank {dist.rank()} of {dist.size()} {what}; ending every rank",
                  file=sys.stderr, flush=True)
            dist.abort(1 if signum is None else EXIT_ON_SIGNAL[signum])
        raise


def _check_ranks(saved: int, ranks: int, folder: str) -> None:
    """A resumed run trains on as many ranks as the checkpoint's: the batch's split over them changes the weights
    (its rounding), as --threads does; `tfplus train --resume` under mpiexec without --distributed ran a copy of
    the whole run in every process, each writing into the one folder."""
    if saved == ranks:
        return
    how = f"{_distributed().launcher(saved)} tfplus train --distributed" if saved > 1 else "tfplus train"
    raise UsageError(f"--checkpoint-dir {folder}: its run trained on {saved} rank{'s' * (saved > 1)} and this one "
                     f"on {ranks} (a different split of each batch changes the weights): resume it as it ran, "
                     f"{how} --checkpoint-dir {folder} --resume, or start a new run in another --checkpoint-dir")


def _distributed():
    from tfplus import distributed  # NOTE: imported for --distributed only: it loads the MPI extra's modules
    return distributed


def _threads():
    from tfplus import threads
    return threads


def _for_this_rank(cfg: TrainConfig, dist) -> TrainConfig:
    """A --distributed rank's options: --device opencl becomes this host's K-th GPU by local rank K
    (distributed.local_device: one device per process, shared in turn if too few; a device named, such as
    opencl:0, is every rank's); rank 0 alone logs and evaluates (every rank has the same weights)."""
    if cfg.batch_size % dist.size():
        raise UsageError(f"--batch-size {cfg.batch_size} is not a multiple of the {dist.size()} ranks "
                         f"({dist.launcher('N')}): each rank takes an equal shard of every batch")
    from tfplus.runtime import parse_device
    if parse_device(cfg.device) == ("opencl", None):
        cfg = dataclasses.replace(cfg, device=dist.local_device())
    if dist.rank() != 0:
        cfg = dataclasses.replace(cfg, log=None, logdir=None, profile_every=None, eval_every=0)
    return cfg


def _train(cfg: TrainConfig, out: IO[str] | None, err: IO[str] | None) -> TrainResult:
    started = time.perf_counter()
    out, err = _Console(out or sys.stdout, "standard output"), _Console(err or sys.stderr, "standard error")
    if cfg.device is not None:
        check_device(cfg.device)
    rank = _distributed().rank() if cfg.distributed else 0
    if cfg.checkpoint_dir and rank == 0:  # rank 0 alone writes checkpoints; every rank reads them on --resume
        prepare_checkpoint_dir(cfg.checkpoint_dir, err)
    if cfg.distributed:
        _distributed().barrier()  # the others read the folder once rank 0 has made it
    reader = newest_checkpoint(cfg.checkpoint_dir, err) if cfg.checkpoint_dir else None
    ckpt, meta = reader and reader.path, None
    if ckpt is not None:
        if not cfg.resume:
            raise UsageError(f"--checkpoint-dir {cfg.checkpoint_dir} already holds a checkpoint ({ckpt}); "
                             "pass --resume to continue it, or choose another directory")
        meta = read_metadata(reader)
    if meta:
        _check_ranks(meta.get("ranks", 1), _distributed().size() if cfg.distributed else 1, cfg.checkpoint_dir)
    cfg, taken = resolve_options(cfg, meta.get("options") if meta else None, err)
    cfg = resolve(cfg, meta["recipe"] if meta else None)
    if cfg.distributed:
        cfg = _for_this_rank(cfg, _distributed())
    said = [_describe_option(k, getattr(cfg, k)) for k in taken
            if k in RESULT_OPTIONS or getattr(cfg, k) != RUN_DEFAULTS[k]]
    if said:
        print(f"options from the checkpoint: {', '.join(said)}", file=err)
    if meta and meta.get("options") and cfg.device != meta["options"]["device"]:
        print(f"--device {cfg.device}: the checkpoint's run was on {meta['options']['device']}; the weights will "
              "differ from its uninterrupted run's within rounding", file=err)
    prebuild_opencl(cfg)
    if cfg.resume and ckpt is None:
        print(f"no checkpoint in {cfg.checkpoint_dir}: starting a new run", file=err)

    if cfg.data is None and not cfg.synthetic:
        cfg.data = _saved_data_dir(meta)
    dataset, data_dir = load_data(cfg.data, cfg.synthetic, cfg.download, err)
    if cfg.classes is not None:
        dataset = only_classes(dataset, cfg.classes)
    n_train = len(dataset.train_labels)
    if tuple(dataset.train_images.shape[1:]) != get_model(cfg.model).image_shape:
        raise UsageError(f"model {cfg.model!r} takes {'x'.join(map(str, get_model(cfg.model).image_shape))} images "
                         f"but the data's are {'x'.join(map(str, dataset.train_images.shape[1:]))}; plan it with "
                         f"tfplus plan --model {cfg.model}, or build it in Python for your own images")
    if cfg.batch_size > n_train:
        raise UsageError(f"--batch-size {cfg.batch_size} exceeds the {n_train} training images")
    spe = n_train // cfg.batch_size
    total_steps = cfg.steps if cfg.steps is not None else cfg.epochs * spe
    if total_steps > MAX_STEPS:  # the global step is an int64
        raise UsageError(f"{_length(_recipe(cfg))} at {spe} steps per epoch" * (cfg.steps is None) +
                         f"{cfg.steps} steps" * (cfg.steps is not None) +
                         f" is more than the global step can count ({MAX_STEPS}); give fewer")
    if cfg.warmup_steps is None:  # recorded as a number, so a resumed run need not recompute it
        cfg.warmup_steps = default_warmup(spe)
    tg = build_graph(cfg, total_steps, device_input(cfg))
    with tg.graph.as_default():
        saver = tf.train.Saver(max_to_keep=3)
        init = _init_from(cfg, tg, meta, err)
    sums = RunningSums(tg)
    # The test set's loss, for TensorBoard's validation run (the --log file's epoch rows then carry it too).
    loss_sum = eval_loss_sum(tg) if cfg.logdir and tg.eval_logits is not None else None
    _say_trainable(cfg, tg, err)

    run = _Run(cfg, tg, sums, dataset, data_dir, spe, total_steps, started, out, err)
    if cfg.distributed:
        run.rank, run.ranks = rank, _distributed().size()
    progress, checkpoints, stop, peak = _ProgressHook(run), _CheckpointHook(run, saver), _StopHook(run), \
        _PeakMemoryHook(run)
    # after_run in this order: a step is counted and shown, its epoch ended, saved, then the run may stop.
    hooks = [progress, _FeedHook(run), _EpochHook(run, loss_sum), checkpoints, stop, peak]
    if cfg.distributed:  # the ranks start from rank 0's variables, however each initialized or restored them
        hooks.append(_distributed().BroadcastGlobalVariablesHook(0))
        if os.environ.get("TFPLUS_ALLREDUCE_TRACE", "") not in ("", "0"):  # the host's path between steps, timed
            hooks = [_TraceHook("before_run hooks begin", "session.run returned")] + hooks + \
                [_TraceHook("before_run hooks done", "after_run hooks done")]
    trace_options = profiler.RunOptions(profiler.RunOptions.FULL_TRACE) if cfg.profile_every else None
    with tg.graph.as_default(), \
            tf.train.MonitoredSession(hooks, session_creator=_SessionCreator(run, saver, reader, meta, init)) as mon:
        try:
            run.log = JsonLog(cfg.log)
            if cfg.logdir:
                run.log = TensorBoardLog(run.log, cfg.logdir, tg.graph)
            run.log.write({"kind": "start", "step": run.step, "total_steps": total_steps, "steps_per_epoch": spe,
                           "resumed": meta is not None, "device": cfg.device, "recipe": _json_ready(_recipe(cfg))})
            print(f"{cfg.model} on {cfg.device}: {total_steps} steps ({run.n_epochs} epoch{'s' * (run.n_epochs > 1)} "
                  f"of {spe}) at batch {cfg.batch_size}, {n_train} training / {len(dataset.test_labels)} test images",
                  file=err)
            run.start_time = time.perf_counter()
            run.batches = tfdata.train_batches(dataset, cfg.batch_size, seed=cfg.seed, augment=cfg.augment,
                                               data_format=cfg.data_format, state=run.state["data_state"],
                                               raw=tg.raw_images is not None)
            with stop:
                try:
                    while not mon.should_stop() and not stop.stopping():
                        md = None
                        if cfg.profile_every and (run.step + 1) % cfg.profile_every == 0:
                            md = profiler.RunMetadata()
                        # NOTE: nothing is read back here (see RunningSums): the device may still be running this
                        # step when the next one is queued.
                        mon.run(sums.step_op, options=trace_options, run_metadata=md)
                except (errors.UnavailableError, LogError) as e:
                    progress.clear()
                    raise checkpoints.stopped(e) from e
                mon.close()  # the hooks' end() (a stop's save, said) while a second signal is still caught
        finally:
            if run.batches is not None:
                run.batches.close()
            if run.log is not None:
                run.log.close()

    step, history = run.step, run.state["history"]
    exit_code = EXIT_ON_SIGNAL[stop.stopped_by] if stop.stopped_by is not None else 0
    total_time = run.state["elapsed_s"] + time.perf_counter() - run.start_time
    accs = [(r["test_accuracy"], r["epoch"]) for r in history if r["test_accuracy"] is not None]
    best = max(accs, key=lambda a: a[0]) if accs else (None, None)
    final = history[-1]["test_accuracy"] if history and step == total_steps else None
    result = TrainResult(step, total_steps, history, final, best[0], best[1], total_time, peak.peak_bytes,
                         run.last_ckpt, exit_code)
    if exit_code == 0:
        tested = "no test evaluation" if final is None else \
            f"test accuracy final {100 * final:.2f}%, best {100 * best[0]:.2f}% (epoch {best[1]})"
        rss = f"RSS, and what its {peak.workers} worker processes add" if peak.workers else "RSS"
        built = _built(run.sess)
        print(f"done: {step} steps in {_clock(total_time)}; {tested}; peak memory "
              f"{format_size(result.peak_bytes)} ({rss})" + (f"; {built}" if built else ""), file=out, flush=True)
    return result


class _Run:
    """What the hooks of one `tfplus train` session share: the steps done (`step`, this process's count: a step
    reads nothing back, so nobody reads the global step), the session's state that a checkpoint carries besides
    the variables, its clocks and its last checkpoint; and what several hooks do with them."""

    def __init__(self, cfg: TrainConfig, tg, sums: RunningSums, dataset: tfdata.CifarDataset, data_dir: str | None,
                 spe: int, total_steps: int, started: float, out: _Console, err: _Console):
        self.cfg, self.tg, self.sums, self.dataset, self.data_dir = cfg, tg, sums, dataset, data_dir
        self.spe, self.total_steps, self.started, self.out, self.err = spe, total_steps, started, out, err
        self.n_epochs = -(-total_steps // spe)  # in integers: exact for any length
        self.sess: tf.Session | None = None
        self.log: JsonLog | TensorBoardLog | None = None
        self.batches = None
        self.step, self.lr = 0, float("nan")
        self.last_ckpt: str | None = None
        self.rank, self.ranks = 0, 1  # --distributed: this process's rank, and how many train together
        self.saved_step: int | None = None  # the step of last_ckpt
        self.start_time = time.perf_counter()  # this process's training time counts from here (set as the steps begin)
        # What a checkpoint carries besides the variables. sums: the epoch's loss and accuracy sums and steps up to
        # the last log row; window: those of the steps since (on the device, in `sums`, while running); epoch_s:
        # training seconds of the unfinished epoch spent before this process; h2d/d2h_bytes: transfer counts so far
        # (a new session starts its own at 0).
        self.state: dict[str, Any] = {"history": [], "sums": [0.0, 0.0, 0], "window": [0.0, 0.0, 0],
                                      "elapsed_s": 0.0, "data_state": None, "epoch_s": 0.0, "h2d_bytes": 0,
                                      "d2h_bytes": 0}
        # The running epoch's clock: when this process started on it, plus what earlier processes spent on it.
        self.clock = {"t0": time.perf_counter(), "before": 0.0, "eval_s": 0.0}  # eval_s: the last evaluation's

    def epoch_end(self, epoch: int) -> int:
        """The step that ends (0-based) `epoch`."""
        return min((epoch + 1) * self.spe, self.total_steps)

    def counters(self) -> dict[str, Any]:
        rt = self.sess.runtime
        return {"peak_bytes": peak_rss_bytes(self.sess),
                "h2d_bytes": self.state["h2d_bytes"] + rt.h2d_bytes,
                "d2h_bytes": self.state["d2h_bytes"] + rt.d2h_bytes}

    def epoch_seconds(self) -> float:
        return self.clock["before"] + time.perf_counter() - self.clock["t0"]

    def diverged(self, what: str) -> DivergedError:
        kept = f"the last checkpoint, {self.last_ckpt}, holds finite weights" if self.last_ckpt else \
            "nothing was saved"
        return DivergedError(f"training diverged at step {self.step}/{self.total_steps}: {what} (learning rate "
                             f"{self.lr:.4g}); {kept}. Start a new run with a lower --lr or a longer --warmup-steps")

    def learning_rate(self, done: int) -> float:
        """The learning rate of (1-based) step `done`: the schedule at the global step it started from."""
        return float(self.sess.run(self.tg.learning_rate, {self.tg.global_step: np.int64(done - 1)}))

    def window(self) -> tuple[float, float]:
        """The device's loss and accuracy sums of the steps since the last log row (the step waits for the
        device); stops the run if the loss became NaN or infinite at one of them."""
        loss, acc = self.sums.read(self.sess)
        if not math.isfinite(loss):
            self.lr = self.learning_rate(self.step)
            n, step = self.sums.steps, self.step
            raise self.diverged(f"the loss is {loss}" if n == 1 else
                                f"the mean loss of steps {step - n + 1}-{step} is {loss / n}")
        return loss, acc

    def evaluations_after(self, epoch: int) -> int:
        """How many of the epochs after (1-based) `epoch` are evaluated: counted, not listed (a run may declare
        10**18 epochs)."""
        every, n_epochs = self.cfg.eval_every, self.n_epochs
        if every == 0 or epoch >= n_epochs:
            return 0
        return n_epochs // every - epoch // every + (n_epochs % every != 0)


class _SessionCreator(tf.train.SessionCreator):
    """The training session: on the run's device, its budget checked as `tfplus plan` names it (before any run),
    then restored from the checkpoint resumed (its metadata into the run's state) or initialized (and
    --init-from's variables restored)."""

    def __init__(self, run: _Run, saver, reader, meta: dict[str, Any] | None, init):
        self._run, self._saver, self._reader, self._meta, self._init = run, saver, reader, meta, init

    def create_session(self) -> tf.Session:
        run, cfg, tg, meta = self._run, self._run.cfg, self._run.tg, self._meta
        sess = _session(tg.graph, cfg.device, cfg.memory_budget, cfg.threads, cfg.workers)
        if cfg.memory_budget is not None:  # the run's smallest budget, named as `tfplus plan` names it
            from tfplus.step_budget import check_budget, training_runs
            check_budget(tg.graph, training_runs(tg, run.sums.step_op, cfg.batch_size), cfg.device,
                         parse_size(cfg.memory_budget, "--memory-budget"))
        if meta is not None:
            ckpt = self._reader.path
            with self._reader:
                self._saver.restore(sess, self._reader)
            # Adopt the earlier session's checkpoints (and the one resumed, if the state file did not list it), so
            # max_to_keep also deletes those.
            state_file = tf.train.get_checkpoint_state(cfg.checkpoint_dir)  # None: a first save killed unlisted
            kept = list(state_file.all_model_checkpoint_paths) if state_file else []
            self._saver.recover_last_checkpoints(kept + [ckpt] * (ckpt not in kept))
            run.state.update({k: meta.get(k, v) for k, v in run.state.items()})
            step = int(sess.run(tg.global_step))
            ds, spe = meta["data_state"], run.spe
            if step != meta["step"] or ds["epoch"] * spe + ds["batch_index"] != step or ds["batch_index"] >= spe \
                    or ds["seed"] != cfg.seed or step > run.total_steps or run.state["window"][2] > ds["batch_index"]:
                raise UsageError(f"{ckpt}: inconsistent checkpoint (global step {step}, metadata step "
                                 f"{meta['step']}, data position {ds}); resume from another one")
            print(f"resumed from {ckpt} at step {step}/{run.total_steps}", file=run.err)
            run.last_ckpt, run.saved_step = ckpt, step
        else:
            sess.run(tg.init_op)
            if self._init is not None:
                self._init.restore(sess)
            step = 0
        run.sums.start(sess, run.state["window"])
        run.sess, run.step = sess, step
        return sess


class _ProgressHook(tf.train.SessionRunHook):
    """Counts the steps and shows them: each epoch's progress bar with the epoch's running means and the run's
    ETA, the --log's step and profile rows, the first step's line (and the memory plan's). It reads the device's
    running sums only when one of these needs them (RunningSums), and so finds a NaN or infinite loss then."""

    def __init__(self, run: _Run):
        self._run, self._bar, self._first_said = run, None, False

    def before_run(self, run_context):
        if self._bar is None:  # an epoch starts, or this process's part of one
            run = self._run
            step, spe = run.step, run.spe
            epoch = step // spe
            self._bar = Progress(run.err, run.epoch_end(epoch) - epoch * spe, f"epoch {epoch + 1}/{run.n_epochs}")
            t_epoch = time.perf_counter()
            run.clock.update(t0=t_epoch, before=run.state["epoch_s"] if step % spe else 0.0)
            run.state["epoch_s"] = 0.0
            self._t_row, self._row_step, self._done_at_start = t_epoch, step, step
            # The pace (img/s, ETA) is timed from here, or from the end of this process's first step, which builds
            # the step's programs (minutes on PoCL from a cold cache) and would claim "0 img/s".
            self._t_pace, self._paced_from = t_epoch, step
            self._means = ""  # the epoch's means as of the last read, for the progress bar
        return None

    def after_run(self, run_context, run_values):
        run, cfg, bar = self._run, self._run.cfg, self._bar
        run.step += 1
        run.sums.steps += 1
        step = run.step
        epoch = (step - 1) // run.spe
        epoch_end = run.epoch_end(epoch)
        row, done = step % cfg.log_every == 0 or step == epoch_end, step - epoch * run.spe
        if row or bar.prints(done) or not self._first_said:
            try:
                loss, acc = run.window()
            except DivergedError:
                bar.clear()
                raise
            s = run.state["sums"]
            n = s[2] + run.sums.steps
            self._means = f"epoch mean loss {(s[0] + loss) / n:.4f} acc {100 * (s[1] + acc) / n:.1f}% "
        now = time.perf_counter()
        md = run_values.run_metadata
        if md is not None:
            run.log.write({"kind": "profile", "step": step, "epoch": epoch + 1, **md.summary(),
                           "top_ops": profiler.top_op_types(md)})
        if row:
            run.lr = run.learning_rate(step)
            speed = (step - self._row_step) * cfg.batch_size / max(now - self._t_row, 1e-9)
            run.log.write({"kind": "step", "step": step, "epoch": epoch + 1, "loss": loss / run.sums.steps,
                           "accuracy": acc / run.sums.steps, "lr": run.lr, "images_per_sec": speed,
                           **run.counters()})
            s = run.state["sums"]
            run.state["sums"] = [s[0] + loss, s[1] + acc, s[2] + run.sums.steps]
            run.sums.reset(run.sess)
            self._t_row, self._row_step = now, step
        n, elapsed = step - self._paced_from, now - self._t_pace
        if step == self._done_at_start + 1 and cfg.memory_budget:  # the plan is made by now
            print(_plan_line(run.sess, cfg.memory_budget), file=run.err)
        if step == self._done_at_start + 1 and not self._first_said:
            self._first_said = True
            bar.clear()
            print(_first_step_line(run.sess, time.perf_counter() - run.started), file=run.err)
            prebuild_opencl(cfg, run.sess)
            self._t_pace, self._paced_from = time.perf_counter(), step
            n = 0
        if n:  # the whole run's ETA: its steps at this pace, its evaluations at the last one's
            eta = elapsed / n * (run.total_steps - step) + run.evaluations_after(epoch + 1) * run.clock["eval_s"]
            bar.update(done, f"{self._means}{n * cfg.batch_size / elapsed:.0f} img/s run ETA {_clock(eta)}")
        else:
            bar.update(done, self._means + ("building OpenCL programs..." if _building(run.sess) else
                                            "timing the steps..."))
        if step == epoch_end:
            self.clear()

    def clear(self) -> None:
        """Clears the epoch's bar, which the next step's epoch draws anew."""
        if self._bar is not None:
            self._bar.clear()
            self._bar = None

    def end(self, session):
        self.clear()  # a stop within an epoch: its line comes next


class _FeedHook(tf.train.SessionRunHook):
    """Feeds each step the run's next batch (tfplus.data.train_batches: a pure function of the seed and the
    position that a checkpoint keeps)."""

    def __init__(self, run: _Run):
        self._run = run

    def before_run(self, run_context):
        x, y = next(self._run.batches)
        tg, run = self._run.tg, self._run
        if run.ranks > 1:  # rank r of N trains on rows [r*m, (r+1)*m) of the global batch, m = batch / N
            rows = slice(run.rank * len(y) // run.ranks, (run.rank + 1) * len(y) // run.ranks)
            x, y = tuple(a[rows] for a in x) if isinstance(x, tuple) else x[rows], y[rows]
        return tf.train.SessionRunArgs(None, {**image_feed(tg, x), tg.labels: y})


class _EpochHook(tf.train.SessionRunHook):
    """At each epoch's end: the test set's evaluation (every eval_every epochs, and the last), the epoch's row in
    the logs and its line on stdout."""

    def __init__(self, run: _Run, loss_sum: tf.Tensor | None):
        self._run, self._loss_sum, self._evaluated = run, loss_sum, False

    def after_run(self, run_context, run_values):
        run = self._run
        epoch = (run.step - 1) // run.spe
        if run.step == run.epoch_end(epoch):
            self._finish(epoch + 1, run.epoch_seconds(), (run.step - epoch * run.spe) * run.cfg.batch_size)

    def _evaluated_after(self, epoch: int) -> bool:
        """Whether the test set is evaluated after (1-based) `epoch`: every eval_every, and the last."""
        every = self._run.cfg.eval_every
        return every > 0 and (epoch % every == 0 or epoch == self._run.n_epochs)

    def _finish(self, epoch: int, seconds: float, images: int) -> None:
        """Evaluates (if its turn), logs and prints the epoch that just ended (1-based `epoch`)."""
        run, cfg = self._run, self._run.cfg
        train_loss, acc_sum, n = run.state["sums"]
        test_acc = test_loss = None
        if self._evaluated_after(epoch):
            t0 = time.perf_counter()
            eval_batch = cfg.batch_size if cfg.memory_budget else max(cfg.batch_size, EVAL_BATCH)
            test_acc, _, test_loss = evaluate_predictions(run.sess, run.tg, run.dataset, eval_batch, cfg.data_format,
                                                          progress=run.err, loss_sum=self._loss_sum)
            if not self._evaluated:  # this process's first evaluation
                _record_eval_programs(cfg, run.sess)
                self._evaluated = True
            run.clock["eval_s"] = time.perf_counter() - t0
        row = {"kind": "epoch", "step": run.step, "epoch": epoch, "loss": train_loss / max(n, 1),
               "accuracy": acc_sum / max(n, 1), "lr": run.lr, "images_per_sec": images / max(seconds, 1e-9),
               "test_accuracy": test_acc, "epoch_time_s": seconds, **run.counters()}
        if self._loss_sum is not None:
            row["test_loss"] = test_loss
        run.state["history"] = _kept_history(run.state["history"] + [row])
        run.state["sums"] = [0.0, 0.0, 0]
        run.log.write(row)
        test = "" if test_acc is None else f"  test acc {100 * test_acc:.2f}%"
        print(f"epoch {epoch:>{len(str(run.n_epochs))}}/{run.n_epochs}  train loss {row['loss']:.4f} acc "
              f"{100 * row['accuracy']:.2f}% (epoch means){test}  {seconds:.1f} s "
              f"({row['images_per_sec']:.0f} img/s)", file=run.out, flush=True)


class _CheckpointHook(tf.train.SessionRunHook):
    """Saves the run (with --checkpoint-dir): every checkpoint_every steps, else at each epoch's end; at the last
    step; at the end of the session (a stop: where it left the run); and before a failure ends it (stopped()).
    Each save is atomic (the Saver's), and a step is saved once."""

    def __init__(self, run: _Run, saver):
        self._run, self._saver = run, saver

    def after_run(self, run_context, run_values):
        run, every = self._run, self._run.cfg.checkpoint_every
        step = run.step
        if step == run.epoch_end((step - 1) // run.spe):
            due = every is None or step % every == 0 or step == run.total_steps
        else:
            due = bool(every) and step % every == 0
        if due:
            self.save()

    def end(self, session):
        self.save()  # nothing new after a finished run: its last step is saved

    def save(self) -> str | None:
        """Saves this step (unless saved already: a stop right after a periodic save) and returns its path."""
        run, cfg = self._run, self._run.cfg
        if not cfg.checkpoint_dir or run.rank != 0:
            return None
        if run.last_ckpt is not None and run.step == run.saved_step:
            # NOTE: never rewritten: a checkpoint once listed stays as it was (a kill while rewriting its files
            # would leave an index over other data).
            return run.last_ckpt
        loss, acc = run.window()
        bad = _non_finite_variables(run.sess, run.tg.graph)
        if bad:  # never replace a finite checkpoint with these
            raise run.diverged(f"variable {bad[0]!r}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                               + " holds NaN or infinite values")
        moved, state, step = run.counters(), run.state, run.step
        meta_out = {"format": CHECKPOINT_FORMAT, "step": step, "recipe": _json_ready(_recipe(cfg)),
                    "data": run.data_dir, "data_state": run.batches.state(), "history": state["history"],
                    "sums": state["sums"], "window": [loss, acc, run.sums.steps], "options": _options(cfg),
                    "ranks": run.ranks,
                    "elapsed_s": state["elapsed_s"] + time.perf_counter() - run.start_time,
                    "epoch_s": run.epoch_seconds() if step % run.spe else 0.0,
                    "h2d_bytes": moved["h2d_bytes"], "d2h_bytes": moved["d2h_bytes"]}
        try:
            path = _save(self._saver, run.sess, cfg.checkpoint_dir, step, meta_out)
        except OSError as e:  # e.g. a full disk; the Saver leaves the earlier checkpoints as they were
            kept = f"the last checkpoint, {run.last_ckpt}, is intact" if run.last_ckpt else "nothing was saved"
            raise RunError(f"cannot write the checkpoint of step {step} into {cfg.checkpoint_dir} "
                           f"({e.strerror or e}); {kept}. Free some space, then continue with --resume") from e
        run.last_ckpt, run.saved_step = path, step
        return path

    def stopped(self, e: Exception) -> RunError:
        """The RunError of a failure that ends the run (a worker's death, a log that cannot be written), after
        saving the last completed step: the session still reads its variables."""
        run = self._run
        where = f"stopped at step {run.step}/{run.total_steps}"
        try:
            saved = self.save()
        except (RunError, errors.OpError, OSError) as failed:
            return RunError(f"{e}; {where}, and its checkpoint could not be written: {failed}")
        return RunError(f"{e}; {where}; " +
                        (f"saved {saved}; continue with --checkpoint-dir {run.cfg.checkpoint_dir} --resume" if saved
                         else "nothing saved (no --checkpoint-dir)"))


class _StopHook(tf.train.SessionRunHook):
    """Stops the session at the run's last step, or after the step during which SIGINT, SIGTERM or SIGHUP came
    (--distributed: the first step that any rank got one before; caught while entered, `with hook:` around the
    steps, unless ignored when it is entered (nohup); a handler installed before is called after ours; a second
    SIGINT interrupts at once), so that the checkpoint is consistent: the handler notes the signal, and the loop
    asks stopping() before each step. end() says where a signal stopped the run (after _CheckpointHook's save)."""

    def __init__(self, run: _Run):
        self._run = run
        self.signum: int | None = None
        # The signal that stopped the run, said by end(): one noted after it (the session closing: its workers) came
        # after the run's work and last save, and left exit 143 with no line; the run's own status is the right one.
        self.stopped_by: int | None = None
        self._old: dict[int, Any] = {}
        self._asked = None  # --distributed: the ranks' exchange of their signals, started before this step

    def after_create_session(self, session, coord):
        if self._run.step >= self._run.total_steps:  # a finished run resumed
            coord.request_stop()

    def before_run(self, run_context):
        if self._run.ranks > 1:
            # Started before the step and read after it, the exchange runs while the step does: a blocking one after
            # the step would hold the host between steps (the device idle) until every rank got there.
            self._asked = _distributed().max_over_ranks_later(self.signum or 0)

    def after_run(self, run_context, run_values):
        if self._asked is not None:
            # NOTE: the ranks stop after the same step, the first that any of them got a signal before: a rank that
            # stopped alone would leave the others waiting in the next step's all-reduce.
            signum, self._asked = self._asked(), None
            if signum:
                self.signum = self.signum or signum
                run_context.request_stop()
        if self._run.step >= self._run.total_steps:
            run_context.request_stop()

    def stopping(self) -> bool:
        """Whether a signal stops the run before its next step (a rank of several waits for after_run, where the
        ranks agree). NOTE: the handler leaves the session's coordinator alone: a signal between the loop's
        should_stop() and MonitoredSession.run's own check of it made that run raise "Run called even after
        should_stop requested" (exit 1, an internal error, no save)."""
        return self.signum is not None and self._run.ranks == 1

    def _handle(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        users = self._old.get(signum)
        # The caller's own handler runs too; Python's SIGINT one and the command line's (engine.signals) raise.
        if callable(users) and users not in (signal.default_int_handler, raise_stopped):
            users(signum, frame)

    def __enter__(self) -> _StopHook:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            for s in EXIT_ON_SIGNAL:
                # An ignored signal stays ignored: nohup's SIGHUP, a background job's SIGINT.
                if signal.getsignal(s) != signal.SIG_IGN:
                    self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)

    def end(self, session):
        if self.signum is None:
            return
        self.stopped_by, run = self.signum, self._run
        saved = run.last_ckpt if run.cfg.checkpoint_dir else None
        print(f"\n{signal.Signals(self.signum).name}: stopped at step {run.step}/{run.total_steps}; " +
              (f"saved {saved}; continue with --checkpoint-dir {run.cfg.checkpoint_dir} --resume"
               if saved else "nothing saved (no --checkpoint-dir)"), file=run.err, flush=True)


class _TraceHook(tf.train.SessionRunHook):
    """--distributed with TFPLUS_ALLREDUCE_TRACE=1: notes when the host passes this hook (tfplus.distributed.
    trace_mark), first and last in the hook list, so that each rank's report splits the host's path between steps
    into the session's and the hooks' parts."""

    def __init__(self, before: str, after: str):
        self._before, self._after = before, after

    def before_run(self, run_context):
        _distributed().trace_mark(self._before)

    def after_run(self, run_context, run_values):
        _distributed().trace_mark(self._after)


class _PeakMemoryHook(tf.train.SessionRunHook):
    """Measures the run's peak memory and counts its worker processes at the end, while they live."""

    def __init__(self, run: _Run):
        self._run, self.peak_bytes, self.workers = run, 0, 0

    def end(self, session):
        self.peak_bytes = peak_rss_bytes(session)
        self.workers = len(session.workers.pids()) if session.workers is not None else 0


def _kept_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The epoch rows a run keeps (and its checkpoints carry): the last HISTORY_KEPT, and the best evaluated one
    before them (TrainResult's best), so a checkpoint's metadata stays small however many epochs a run has."""
    if len(history) <= HISTORY_KEPT:
        return history
    recent, older = history[-HISTORY_KEPT:], history[:-HISTORY_KEPT]
    tested = [r for r in older if r["test_accuracy"] is not None]
    best = max(tested, key=lambda r: r["test_accuracy"], default=None)
    if best is None or any(r["test_accuracy"] is not None and r["test_accuracy"] > best["test_accuracy"]
                           for r in recent):
        return recent
    return [best, *recent]


def _non_finite_variables(sess: tf.Session, graph: tf.Graph) -> list[str]:
    """The floating-point variables (weights, optimizer slots) holding a NaN or an infinity."""
    bad = []
    for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES):
        value = sess.variable_value(v.op.name)
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            bad.append(v.op.name)
    return bad


# ---------------------------------------------------------------------------------------------------------
# Evaluation

def evaluate_predictions(sess: tf.Session, tg, dataset: tfdata.CifarDataset, batch_size: int,
                         data_format: str = "NCHW", progress: IO[str] | None = None,
                         loss_sum: tf.Tensor | None = None) -> tuple[float, np.ndarray, float | None]:
    """(test accuracy, confusion counts (true class, predicted class), mean test loss) over the whole test set,
    with a progress bar on `progress` if given. The loss is `loss_sum`'s (a batch's summed loss, eval_loss_sum)
    mean over the images, if given, else None."""
    k = len(dataset.classes)
    confusion = np.zeros((k, k), np.int64)
    n = len(dataset.test_labels)
    bar = Progress(progress, math.ceil(n / batch_size), "test set") if progress else None
    raw = tg.raw_images is not None
    total = 0.0
    with tfdata.eval_batches(dataset, batch_size, data_format, raw=raw) as batches:
        for i, (x, y) in enumerate(batches):
            feed = image_feed(tg, (x, tfdata.no_crops(len(x))) if raw else x)
            if loss_sum is None:
                predicted = sess.run(tg.predictions, feed)
            else:
                predicted, summed = sess.run([tg.predictions, loss_sum], {**feed, tg.labels: y})
                total += float(summed)
            np.add.at(confusion, (y, predicted), 1)
            if bar:
                bar.update(i + 1, "batches")
    if bar:
        bar.clear()
    count = max(int(confusion.sum()), 1)
    return float(np.trace(confusion) / count), confusion, None if loss_sum is None else total / count


def eval_loss_sum(tg) -> tf.Tensor:
    """A batch's summed cross-entropy of the predictions' logits (evaluation mode), added to tg's graph."""
    with tg.graph.as_default(), tf.name_scope("test_loss"):
        return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tg.labels, logits=tg.eval_logits))


def image_feed(tg, images) -> dict:
    """The feed of a batch's images: floats for tg.images, or (uint8 images, crops) with device input."""
    if tg.raw_images is None:
        return {tg.images: images}
    return {tg.raw_images: images[0], tg.crops: images[1]}


def prebuild_opencl(cfg: TrainConfig, sess: tf.Session | None = None) -> None:
    """On an opencl device: without `sess`, starts building the programs this model's first step used last time
    (or the package's list for it) on background threads, while the data and the graph are made; with it (after
    the first step), records the programs this run's first step used, for the next run, and starts building the
    evaluation's (eval-<model>)."""
    from tfplus.runtime import parse_device
    kind, selector = parse_device(cfg.device)
    if kind == "opencl":
        from tfplus.runtime import opencl
        if sess is None:
            opencl.prebuild_soon(selector, f"train-{cfg.model}")
        else:
            opencl.record(sess.runtime, f"train-{cfg.model}")
            if cfg.eval_every > 0 and not cfg.memory_budget:
                # Its batches' shapes have tiles and programs of their own: built while the first epoch trains,
                # not at its end; listed by _record_eval_programs. (Under a budget it evaluates at the training
                # batch, whose programs the step built.)
                opencl.prebuild(selector, f"eval-{cfg.model}")


def _record_eval_programs(cfg: TrainConfig, sess: tf.Session) -> None:
    """On an opencl device, after the run's first evaluation: keeps the programs it was first to use as the
    model's evaluation list, which the next run starts building after its first step (prebuild_opencl)."""
    from tfplus.runtime import parse_device
    if parse_device(cfg.device)[0] == "opencl":
        from tfplus.runtime import opencl
        opencl.record(sess.runtime, f"eval-{cfg.model}")


def _built(sess: tf.Session) -> str | None:
    """What compiling OpenCL programs took in this process (None: nothing was compiled, or not on opencl)."""
    notice = sess.runtime.compiling
    return notice.summary() if notice is not None else None


def _building(sess: tf.Session) -> bool:
    """Whether OpenCL programs were compiled in this process (the first steps' times are the builds')."""
    return _built(sess) is not None


def _first_step_line(sess: tf.Session, seconds: float) -> str:
    """How long the start took, up to the end of the first step, and what of it compiling OpenCL programs
    took (the first run on a device; later ones load the built programs from the cache)."""
    built = _built(sess)
    where = sess.workers.summary() if sess.workers is not None else ""
    return f"first step done {seconds:.1f} s after start" + "".join(f"; {s}" for s in (built, where) if s)


def _plan_line(sess: tf.Session, budget) -> str:
    """What the memory plan of a session with a budget does (after its first run): micro-batches,
    transformations, planned bytes."""
    plans = sess.memory_plans
    if not plans:
        return f"--memory-budget {format_size(budget)}: no plan made yet"
    p = max(plans, key=lambda p: p.peak_bytes)
    names = list(dict.fromkeys(t["name"] for t in p.transformations))  # one "schedule" per statistics pass
    if p.stream is not None:  # only the layers up to the cut run in micro-batches
        k = f"the layers up to {p.stream.tensor.op.name} in {p.stream_microbatches} micro-batches"
        if p.stream_lanes > 1:
            k += f" ({p.stream_lanes} at once)"
    else:
        k = f"{p.microbatches} micro-batch{'es' * (p.microbatches > 1)}"
    return (f"memory plan for --memory-budget {format_size(budget)}: {k}, "
            + (", ".join(names) if names else "no transformations") + f"; planned peak {format_size(p.peak_bytes)}")


@dataclasses.dataclass
class EvalResult:
    checkpoint: str
    step: int
    accuracy: float
    per_class: dict[str, float]
    confusion: np.ndarray


def evaluate(checkpoint: str, data: str | None = None, synthetic: bool | None = None, device: str = "cpu",
             memory_budget=None, batch_size: int | None = None, out: IO[str] | None = None,
             err: IO[str] | None = None, download: bool = False) -> EvalResult:
    """Test accuracy of a `tfplus train` checkpoint (a file prefix or its directory), with a per-class table.

    The model and its options come from the checkpoint. The data is `data`, or the synthetic set if
    `synthetic`; by default, the data the checkpoint was trained on (its folder if still there).
    """
    out, err = out or sys.stdout, err or sys.stderr
    check_device(device)
    # Opened once, here: a live run's Saver may delete it (max_to_keep) before the restore below.
    reader = newest_checkpoint(checkpoint, err) if os.path.isdir(checkpoint) else tf.train.NewCheckpointReader(
        checkpoint)
    if reader is None:
        raise UsageError(f"--checkpoint {checkpoint}: no checkpoint in this directory")
    path = reader.path
    meta = read_metadata(reader)
    cfg = resolve(TrainConfig(), meta["recipe"])
    if synthetic is None:
        synthetic = bool(cfg.synthetic) and data is None
    if synthetic and data is not None:
        raise UsageError("give --data or --synthetic, not both")
    moved = None
    if data is None and not synthetic:
        data = _saved_data_dir(meta)
        moved = meta.get("data") if data is None else None
    try:
        dataset, data_dir = load_data(data, synthetic, download, err=err)
    except tfdata.DataError as e:
        if moved:  # say why the checkpoint's own folder was not used
            raise tfdata.DataError(f"the checkpoint was trained on the data in {moved}, which is no longer "
                                   f"there; give its new place with --data DIR.\n{e}") from None
        raise
    if cfg.classes is not None:  # the run's classes: its test images are those
        dataset = only_classes(dataset, cfg.classes)
    tg = build_graph(cfg, max(meta["step"], 1), device_input(dataclasses.replace(cfg, device=device)))
    with tg.graph.as_default():
        saver = tf.train.Saver()
    sess = _session(tg.graph, device, memory_budget)
    try:
        with reader:
            saver.restore(sess, reader)
        step = int(sess.run(tg.global_step))
        if batch_size is None:
            batch_size = cfg.batch_size if memory_budget else max(cfg.batch_size, EVAL_BATCH)
        from tfplus.planner import BudgetError
        try:
            acc, confusion, _ = evaluate_predictions(sess, tg, dataset, batch_size, cfg.data_format, progress=err)
        except BudgetError as e:  # "or a smaller batch": say which batch, and the option that sets it
            if batch_size == 1:
                raise
            raise BudgetError(f"{e}; the test batches hold {batch_size} images (--batch-size; under a budget the "
                              "default is the training batch)", e.plan) from None
        if memory_budget:
            print(_plan_line(sess, memory_budget), file=err)
    finally:
        sess.close()
    totals = confusion.sum(1)
    per_class = {name: float(confusion[i, i] / totals[i]) if totals[i] else float("nan")
                 for i, name in enumerate(dataset.classes)}
    width = max(len(c) for c in (*dataset.classes, "class"))
    source = data_dir or "the synthetic set"
    print(f"{path} (step {step}, {cfg.model}) on the {len(dataset.test_labels)} test images of {source}",
          file=out)
    print(f"{'class':<{width}}  correct  total  accuracy", file=out)
    for i, name in enumerate(dataset.classes):
        print(f"{name:<{width}}  {confusion[i, i]:>7}  {totals[i]:>5}  {100 * per_class[name]:>7.2f}%",
              file=out)
    print(f"{'all':<{width}}  {np.trace(confusion):>7}  {totals.sum():>5}  {100 * acc:>7.2f}%", file=out,
          flush=True)
    return EvalResult(path, step, acc, per_class, confusion)
