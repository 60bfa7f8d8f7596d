"""The `tfplus` command: train and evaluate CNNs on CIFAR-10, list devices.

    tfplus devices
    tfplus train --data ~/data --epochs 15 --log run.jsonl --checkpoint-dir runs/a
    tfplus train --checkpoint-dir runs/a --resume       # after a crash, Ctrl-C or kill
    tfplus eval --checkpoint runs/a
    tfplus plan --model mentee --batch-size 128 --memory-budget 64MB   # the memory of a step (tfplus.plan_cli)
    tfplus profile --model mentee --trace step.json            # where a step's time goes (tfplus.profile_cli)

Exit codes: 0 done, 1 failed (missing data, a diverged run, a full disk, a runtime error, a --memory-budget
too small for the step: train, eval, plan and profile alike; a worker process that died or a log that cannot be
written, after saving), 2 bad options, 130 / 143 / 129 stopped by Ctrl-C / SIGTERM / SIGHUP (after saving a
checkpoint when --checkpoint-dir is given). No command prints a Python traceback: an
unexpected error is one line saying what failed and where; set TFPLUS_DEBUG=1 for the traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Sequence

from tfplus import cli_args, debug

_TRAIN_EPILOG = """\
default recipe: Mentee, SGD with Nesterov momentum 0.9, learning rate 0.05 (Adam: 0.001) decayed to 0 by a
cosine over the run (per step) after a linear warm-up over the first epoch, weight decay 5e-4 on the
weights, batch 128, 15 epochs, random crop (pad 4) and horizontal flip, per-channel normalization, seed 0.

data: --data DIR, else $TFPLUS_DATA, else ~/.cache/tfplus. --download fetches CIFAR-10 (~170 MB) into the
latter two if it is absent (never into a --data folder); without it, missing data is an error. --synthetic
trains on a small generated dataset instead (offline smoke runs).

output: the console shows running means over the current epoch (loss, accuracy) and an ETA for the whole
run; each --log row has the means over its --log-every steps. A step copies nothing back from the device: its
loss and accuracy are summed there and read at log rows, progress lines and checkpoints, so a loss that turns
NaN stops the run at the next of these.

checkpoints: with --checkpoint-dir, written at the end of each epoch (or every --checkpoint-every steps), at
the end, on Ctrl-C/SIGTERM/SIGHUP, and before stopping when a worker process dies or a log cannot be written;
--resume continues the last one exactly (same batches, same learning rates): the run options not given again
(--memory-budget, --threads, --device, --log, --logdir, --checkpoint-every, --eval-every/--no-eval, ...) are the
checkpoint's, and one that would change the weights (--memory-budget, --threads) is refused.

fine-tuning: --init-from CKPT starts a new run from another run's checkpoint (the variables that match by name
and shape; its global step and optimizer slots are not taken; --init-map OLD=NEW takes checkpoint names or
scopes under other names, by tf.train.init_from_checkpoint's rules, and leaves those whose shapes differ fresh);
--fine-tune-last N or --trainable REGEX trains only those variables (the others get no gradient and no optimizer
slot; a batch-norm layer whose variables are all frozen runs in inference mode: it normalizes with its moving
statistics and does not update them, as Keras's BatchNormalization(trainable=False)); --classes 5-9 trains and
tests on those classes, labels unchanged.
E.g. tfplus train --classes 5-9 --init-from runs/pre --fine-tune-last 1
"""


_DOWNLOAD_HELP = "download CIFAR-10 (~170 MB) into $TFPLUS_DATA or ~/.cache/tfplus if it is not there"



def build_parser() -> argparse.ArgumentParser:
    from tfplus import __version__
    from tfplus.graphs import MODELS
    from tfplus.graphs.mentee import DATA_FORMATS, OPTIMIZERS, SCHEDULES

    parser = cli_args.Parser(prog="tfplus", description="Train and evaluate CNNs with tfplus, a TensorFlow-1-style "
                     "graph runtime for memory-constrained devices.")
    parser.add_argument("--version", action="version", version=f"tfplus {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=cli_args.Parser)

    sub.add_parser("devices", help="list the devices tfplus can run on")

    t = sub.add_parser("train", help="train a model on CIFAR-10", epilog=_TRAIN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    # Recipe options default to None: the trainer fills them from its defaults, or on --resume from the
    # checkpoint, and refuses a resumed run whose explicit options change the recipe.
    g = t.add_argument_group("model")
    g.add_argument("--model", type=cli_args.model, help=f"one of {', '.join(sorted(MODELS))} (default mentee)")
    g.add_argument("--widths", dest="conv_widths", type=cli_args.widths, metavar="W,W,..",
                   help="conv layer widths; their number sets the depth (mentee default 32,32,64,64,128)")
    g.add_argument("--fc-widths", type=cli_args.widths, metavar="W,W,..",
                   help="hidden FC widths (mentee default 256,128)")
    g.add_argument("--data-format", choices=DATA_FORMATS, help="activation layout (default NCHW)")
    g = t.add_argument_group("data")
    g.add_argument("--data", type=cli_args.path, metavar="DIR",
                   help="CIFAR-10 folder (default $TFPLUS_DATA or ~/.cache/tfplus)")
    g.add_argument("--download", action="store_true", help=_DOWNLOAD_HELP)
    g.add_argument("--synthetic", action="store_const", const=True,
                   help="train on a small generated CIFAR-shaped dataset (no download)")
    g.add_argument("--no-augment", dest="augment", action="store_const", const=False,
                   help="no random crop and flip")
    g = t.add_argument_group("recipe")
    g.add_argument("--batch-size", type=cli_args.batch_size, metavar="N", help="default 128")
    length = g.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=cli_args.epochs, metavar="N", help="default 15")
    length.add_argument("--steps", type=cli_args.positive_int, metavar="N", help="train N steps, not whole epochs")
    g.add_argument("--optimizer", choices=OPTIMIZERS, help="default momentum (Nesterov)")
    g.add_argument("--lr", "--learning-rate", dest="lr", type=float,
                   help="peak learning rate (default 0.05; adam 0.001)")
    g.add_argument("--momentum", type=float, metavar="M", help="default 0.9")
    g.add_argument("--no-nesterov", dest="nesterov", action="store_const", const=False,
                   help="classical momentum instead of Nesterov's")
    g.add_argument("--weight-decay", type=float, metavar="WD", help="L2 factor on the weights (default 5e-4)")
    g.add_argument("--schedule", choices=SCHEDULES,
                   help="cosine: to 0 over the run (default); step: /10 at 50%% and 75%%; const")
    g.add_argument("--warmup-steps", type=cli_args.count, metavar="N",
                   help="linear learning-rate warm-up (default: one epoch; a shorter run stays in it)")
    g.add_argument("--seed", type=cli_args.seed, metavar="S", help="initial weights and data order (default 0)")
    g = t.add_argument_group("fine-tuning")
    g.add_argument("--init-from", type=cli_args.path, metavar="CKPT", help="start from a checkpoint (file or "
                   "folder): every variable whose name and shape match is restored; the others are listed, with the "
                   "reason")
    g.add_argument("--init-map", type=cli_args.init_map, action="append", metavar="OLD=NEW|FILE.json",
                   help="restore checkpoint name or scope OLD (e.g. keras/conv1/ or /) into model name or scope NEW, "
                   "by tf.train.init_from_checkpoint's rules; repeatable, or a JSON file of {OLD: NEW}. Variables "
                   "whose shapes differ (a new head) stay freshly initialized")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--trainable", metavar="REGEX", help="train only the variables whose name matches "
                       "(re.search); the rest are frozen (no gradient, no optimizer slot; batch norm with all its "
                       "variables frozen runs in inference mode: moving statistics, not updated)")
    which.add_argument("--fine-tune-last", type=cli_args.positive_int, metavar="N",
                       help="train only the last N layers (top-level variable scopes: conv1 .. fc3 in mentee)")
    g.add_argument("--classes", type=cli_args.classes, metavar="LIST", help="train and test on these classes only, "
                   "e.g. 0-4 or 5,7,9; labels keep their numbers (the model keeps its 10 outputs)")
    g = t.add_argument_group("run")
    # Run options default to None too: on --resume the trainer takes the checkpoint's (tfplus.trainer.RUN_OPTIONS)
    # and refuses a value that would change the run's weights (a memory budget, the thread count).
    g.add_argument("--device", type=cli_args.device, help="cpu (default), opencl or opencl:N")
    g.add_argument("--threads", type=cli_args.threads, metavar="N", help=cli_args.THREADS_HELP)
    g.add_argument("--workers", type=cli_args.threads, metavar="N", help="worker processes a cpu training step "
                   "splits its batch over (default $TFPLUS_WORKERS, else one per --threads thread from 2; 1: none)")
    g.add_argument("--input", choices=("host", "device"), help="where training batches are augmented and "
                   "normalized: host (NumPy, floats uploaded) or device (uint8 uploaded, one kernel); the "
                   "batches are the same. Default: device on opencl, host on cpu")
    g.add_argument("--memory-budget", type=cli_args.size, metavar="SIZE",
                   help="plan each step to fit SIZE bytes (e.g. 64MB, 64MiB)")
    g.add_argument("--distributed", action="store_true", help="one rank of a data-parallel job, `mpiexec -n N tfplus "
                   "train --distributed ...` (MPI: pip install 'tfplus[mpi]') or `torchrun --nproc-per-node N -m "
                   "tfplus train --distributed ...` (gloo: pip install 'tfplus[gloo]'): N processes train one model, "
                   "each on 1/N of every batch (TFPLUS_DISTRIBUTED_BACKEND=mpi|gloo forces one; README: "
                   "data-parallel training)")
    g.add_argument("--checkpoint-dir", type=cli_args.path, metavar="DIR", help="write checkpoints here")
    g.add_argument("--checkpoint-every", type=cli_args.positive_int, metavar="N",
                   help="steps between checkpoints (default: each epoch)")
    g.add_argument("--resume", action="store_true",
                   help="continue from the last checkpoint in --checkpoint-dir, with the run's options (those not "
                   "given again: memory budget, threads, workers, device, logs, ...)")
    g.add_argument("--log", type=cli_args.output_file(make_folders=True, json=True), metavar="FILE.jsonl",
                   help="append one JSON object per logged step and per epoch")
    evals = g.add_mutually_exclusive_group()
    evals.add_argument("--eval-every", type=cli_args.positive_int, metavar="N",
                       help="evaluate on the test set every N epochs and at the end (default 1)")
    evals.add_argument("--no-eval", dest="eval_every", action="store_const", const=0,
                       help="never evaluate on the test set")
    g.add_argument("--logdir", type=cli_args.path, metavar="DIR", help="write TensorBoard event files here (the graph; "
                   "loss, accuracy, learning rate, images/s, memory; the test set's accuracy and loss under "
                   "DIR/validation): tensorboard --logdir DIR")
    g.add_argument("--log-every", type=cli_args.positive_int, metavar="N", help="steps between log rows "
                   "(default 10); a row holds the means of its steps, read from the device then")
    g.add_argument("--profile-every", type=cli_args.positive_int, metavar="N",
                   help="trace every Nth step into the --log file as a row {kind: profile, step, epoch, step_ms, "
                   "op_ms, forward_ms, backward_ms, update_ms, device_ms, gflop, gflop_per_s, h2d_bytes, "
                   "d2h_bytes, transfer_ms, peak_live_bytes, ops, top_ops} (tfplus.trainer)")

    e = sub.add_parser("eval", help="test accuracy of a checkpoint, per class")
    e.add_argument("--checkpoint", type=cli_args.path, required=True, metavar="PATH",
                   help="a checkpoint directory or file prefix")
    e.add_argument("--data", type=cli_args.path, metavar="DIR",
                   help="CIFAR-10 folder (default: the checkpoint's, else $TFPLUS_DATA or ~/.cache/tfplus)")
    e.add_argument("--download", action="store_true", help=_DOWNLOAD_HELP)
    e.add_argument("--synthetic", action="store_const", const=True,
                   help="evaluate on the synthetic dataset (default: what the checkpoint was trained on)")
    e.add_argument("--device", type=cli_args.device, default="cpu", help="cpu (default), opencl or opencl:N")
    e.add_argument("--memory-budget", type=cli_args.size, metavar="SIZE", help="plan each step to fit SIZE bytes")
    e.add_argument("--threads", type=cli_args.threads, metavar="N", help=cli_args.THREADS_HELP)
    e.add_argument("--batch-size", type=cli_args.batch_size,
                   help="default 500 (under a memory budget: the training batch size)")

    from tfplus import plan_cli, profile_cli
    from tfplus.federated import cli as federated_cli
    plan_cli.add_parser(sub)
    profile_cli.add_parser(sub)
    federated_cli.add_parser(sub)
    return parser


def _devices(out) -> int:
    from tfplus import threads
    from tfplus.engine import workers
    from tfplus.units import format_size
    n = threads.default_threads()
    print(f"cpu        NumPy, {n} threads ({threads.available_cores()} cores available to "
          f"this process, {os.cpu_count()} in the host; set by --threads, ${threads.ENV} or "
          "ConfigProto.intra_op_parallelism_threads)", file=out)
    w = workers.resolve(None, n)
    print(f"{'':10} training steps: " + (f"the batch split over {w} worker processes where that pays" if w > 1
                                         else "in this process") +
          f" (${workers.ENV}; by default one per thread from {workers.AUTO_FROM} threads)", file=out)
    try:
        from tfplus.runtime import opencl
    except ImportError as e:
        print(f"opencl     not available: {e}", file=out)
        return 0
    try:
        devices = opencl.list_devices()
    except Exception as e:  # pyopencl reports a missing ICD loader or platform in many ways
        devices, why = [], str(e)
    else:
        why = ""
    if not devices:
        print("opencl     no OpenCL platform found" + (f" ({why})" if why else "") + "; install your GPU's "
              "OpenCL driver, or PoCL for a CPU device: pip install 'tfplus[pocl]'", file=out)
    for d in devices:
        print(f"{'opencl:%d' % d['index']:<10} {d['name'].strip()} ({d['platform'].strip()}), {d['type']}, "
              f"{d['compute_units']} compute units, {format_size(d['global_mem_bytes'])}, "
              f"{d['opencl_version'].strip()}", file=out)
        if "CPU" in d["type"].split(" | "):
            print(f"{'':10} a CPU device (OpenCL on this machine's cores): --device cpu is faster here, and a "
                  "first run on it builds its OpenCL programs for minutes", file=out)
    if devices:
        print(f"{'':10} repeated steps: " + ("replay their recorded kernel launches" if opencl.replay_enabled()
                                              else "launched op by op") + " ($TFPLUS_OPENCL_REPLAY=0: op by op)",
              file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line `argv` (default sys.argv[1:]) and returns the exit code."""
    program = argv is None  # (the process's command: it ends after this)
    argv = sys.argv[1:] if argv is None else list(argv)
    with _stopped_by_signals(program) as status:
        try:
            with _opencl_builds_from_the_start(argv):
                status["code"] = _main(argv)
        except KeyboardInterrupt as e:  # Ctrl-C before a command's own handling (parsing, imports): nothing written
            prog = f"tfplus {argv[0]}" if argv and not argv[0].startswith("-") else "tfplus"
            status["code"] = _interrupted(prog, e)
    return status["code"]


def _opencl_builds_from_the_start(argv: list[str]):
    """`tfplus train --device opencl[:SELECTOR]`: the processes that build the step's OpenCL programs on a cold
    cache, started first thing (opencl.build.early), before the parser, trainer, data and graph are imported and
    made. Read from argv as given: options the parser then refuses only start processes that the block ends."""
    values = {}
    for i, arg in enumerate(argv):
        for flag in ("--device", "--model"):
            if arg == flag and i + 1 < len(argv):
                values[flag] = argv[i + 1]
            elif arg.startswith(flag + "="):
                values[flag] = arg[len(flag) + 1:]
    from tfplus.runtime import parse_device
    try:
        kind, selector = parse_device(values.get("--device", "cpu"))
        if argv[:1] != ["train"] or kind != "opencl":
            return contextlib.nullcontext()
        from tfplus.runtime.opencl import build
    except (ValueError, ImportError):  # the parser or the trainer says what is wrong
        return contextlib.nullcontext()
    return build.early(selector, f"train-{values.get('--model', 'mentee')}")


def _main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a bad option (already reported)
        return int(e.code or 0)
    except Exception as e:  # an argument check that broke: a bug, reported as one line too
        if _debug():
            raise
        return _internal("tfplus", e)
    if args.command is None:
        parser.print_help(sys.stderr)
        return cli_args.EXIT_USAGE
    from tfplus import threads
    from tfplus.engine import workers
    prog = f"tfplus {args.command}"
    try:  # --threads, else $TFPLUS_NUM_THREADS, else the cores this process may use
        nthreads = getattr(args, "threads", None) or threads.default_threads()
        nworkers = workers.resolve(None, nthreads)  # $TFPLUS_WORKERS, checked before any work
        # The variables get the flags' bound too: a step forks a worker process per thread from 2.
        for n, name in ((nthreads, f"${threads.ENV}"), (nworkers, f"${workers.ENV}")):
            if n > cli_args.MAX_THREADS:
                raise ValueError(f"{name}={n}: at most {cli_args.MAX_THREADS}; set a smaller number or unset it")
        if args.command in ("train", "plan", "profile", "federated"):  # the commands that plan steps
            from tfplus.planner import paging
            paging.chosen()  # $TFPLUS_PAGE_SLOTS
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return cli_args.EXIT_USAGE
    with threads.default(nthreads):
        return _dispatch(args, prog)


@contextlib.contextmanager
def _stopped_by_signals(program: bool):
    """SIGTERM and SIGHUP raise engine.signals.Stopped inside (after a running step: engine.signals), ending the
    command as Ctrl-C does, with a line naming the signal and 128 + its number; by their default action they ended
    the process with no line. train and federated stop on them with a save of their own once they start; an ignored
    one (nohup's SIGHUP) stays ignored, and a caller's own handler is left as it is. Yields {"code": the command's
    exit status, once known}: for the process's command (`program`), one that comes after the command, while
    Python ends the process (~0.5 s: its threads, atexit, modules), ends it at once with that status (by their
    default action it died with no line and 128 + the signal, its work done); so does a Ctrl-C then."""
    from tfplus.engine.signals import raise_stopped
    status: dict = {"code": None}
    old = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            s = getattr(signal, name, None)
            if s is not None and signal.getsignal(s) == signal.SIG_DFL:
                old[s] = signal.signal(s, raise_stopped)
    try:
        yield status
    finally:
        for s, handler in old.items():
            signal.signal(s, functools.partial(_exit_ended, status) if program else handler)
        # Ctrl-C after the command too: Python's KeyboardInterrupt there (in atexit, or joining threads) ended the
        # process by SIGINT, its work done, with no line.
        if program and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, functools.partial(_exit_ended, status))


def _exit_ended(status: dict, signum: int, frame) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # (a closed pipe)
            stream.flush()
    os._exit(status["code"] if status["code"] is not None else 128 + signum)


def _dispatch(args: argparse.Namespace, prog: str) -> int:
    from tfplus import errors
    from tfplus.data import DataError
    from tfplus.planner import BudgetError
    from tfplus.trainer import UsageError
    debug = _debug()
    try:
        if args.command in ("train", "eval", "profile"):  # the commands that run steps on the device
            warning = _opencl_cpu_warning(args.device)
            if warning:
                print(f"{prog}: {warning}", file=sys.stderr, flush=True)
        if args.command == "devices":
            return _devices(sys.stdout)
        if args.command == "train":
            return _train(args)
        if args.command == "eval":
            return _eval(args)
        return args.func(args)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return cli_args.EXIT_USAGE
    except BudgetError as e:  # no plan of a step fits --memory-budget: as `tfplus plan` says it, exit 1
        print(f"{prog}: error: --memory-budget: {e}", file=sys.stderr)
        return cli_args.EXIT_FAILED
    except KeyboardInterrupt as e:
        return _interrupted(prog, e)
    except (DataError, errors.OpError, NotImplementedError, MemoryError, OSError) as e:
        if debug:
            raise
        print(f"{prog}: error: {_message(e)}", file=sys.stderr)
        return cli_args.EXIT_FAILED
    except Exception as e:  # a bug in tfplus: say what and where, in one line
        if debug:
            raise
        return _internal(prog, e)


def _interrupted(prog: str, e: KeyboardInterrupt) -> int:
    """Ctrl-C's line and code (130), or a SIGTERM's or SIGHUP's (engine.signals.Stopped: 128 + the signal)."""
    signum = getattr(e, "signum", None)
    if signum is None:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return cli_args.EXIT_INTERRUPTED
    print(f"\n{prog}: {signal.Signals(signum).name}: stopped", file=sys.stderr)
    return 128 + signum


def _debug() -> bool:
    return debug.on()


def _internal(prog: str, e: Exception) -> int:
    text = " ".join(str(e).split())
    print(f"{prog}: internal error: {type(e).__name__}{': ' * bool(text)}{text} (at {_where(e)}). This is "
          "a bug in tfplus; please report it to the tfplus issue tracker with this command line and the "
          "traceback that TFPLUS_DEBUG=1 prints.", file=sys.stderr)
    return cli_args.EXIT_FAILED


def _message(e: BaseException) -> str:
    """An expected error's text: an OSError as its file and reason, an empty message as the error's type."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e).strip() or type(e).__name__


def _where(e: BaseException) -> str:
    """file:line in function of the innermost frame of `e`'s traceback, the path relative to the package."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "unknown location"
    f = frames[-1]
    parts = Path(f.filename).parts
    top = len(parts) - 1 - parts[::-1].index("tfplus") if "tfplus" in parts else len(parts) - 1
    short = "/".join(parts[top:])
    return f"{short}:{f.lineno} in {f.name}"


def _opencl_cpu_warning(device: str | None) -> str | None:
    """A warning when `device` is an OpenCL device that is a CPU (PoCL): the NumPy cpu device is faster on the
    same cores, and a cold cache builds the step's programs for minutes (29 on a 2-core box)."""
    from tfplus.runtime import parse_device
    kind, selector = parse_device(device or "cpu")
    if kind != "opencl":  # before importing pyopencl (~0.1 s), which a cpu run never needs
        return None
    try:
        from tfplus.runtime import opencl
    except ImportError:  # no pyopencl: the trainer says so
        return None
    if not opencl.available():
        return None
    try:
        # NOTE: the runtime's own choice (a GPU first, else the first device), so that the warning names it.
        d = opencl.select(selector)
    except (ValueError, RuntimeError):  # no such device: the trainer says so
        return None
    if not d.type & opencl.cl.device_type.CPU:
        return None
    return (f"warning: --device {device} is {d.name.strip()}, an OpenCL device on this machine's CPU: --device "
            "cpu is faster here, and a first run builds the step's OpenCL programs (minutes on a cold cache)")


def _train(args: argparse.Namespace) -> int:
    from tfplus.trainer import RECIPE, RunError, TrainConfig, train
    options = {k: getattr(args, k) for k in RECIPE}
    cfg = TrainConfig(**options, data=args.data, device=args.device, memory_budget=args.memory_budget,
                      threads=args.threads, workers=args.workers,
                      checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                      resume=args.resume, log=args.log, log_every=args.log_every,
                      profile_every=args.profile_every, eval_every=args.eval_every, logdir=args.logdir,
                      download=args.download, init_from=args.init_from, input=args.input,
                      init_map=[p for pairs in args.init_map or [] for p in pairs] or None,
                      distributed=args.distributed)
    try:
        return train(cfg).exit_code
    except RunError as e:  # diverged, or a checkpoint could not be written
        print(f"tfplus train: error: {e}", file=sys.stderr)
        return cli_args.EXIT_FAILED


def _eval(args: argparse.Namespace) -> int:
    from tfplus.trainer import evaluate
    evaluate(args.checkpoint, data=args.data, synthetic=args.synthetic, device=args.device,
             memory_budget=args.memory_budget, batch_size=args.batch_size, download=args.download)
    return 0


if __name__ == "__main__":
    sys.exit(main())
