"""`tfplus plan`: the memory one training step needs, and what makes it fit a budget.

    tfplus plan --model mentee --batch-size 128 --memory-budget 64MB
    tfplus plan --device-profile nexus5 --max-batch --json
    tfplus plan --memory-budget 32MB --plot step.svg
    tfplus plan --model mobilenet --budgets 400MB,300MB,220MB
    tfplus plan --graph model.meta --memory-budget 16MB      # a user's own training graph (MetaGraphDef or GraphDef)

Exit status 0 when the step fits the budget (or no budget is given), 1 when it does not, 2 for bad options.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time

from tfplus import cli_args
from tfplus.planner import TRANSFORMATIONS
from tfplus.planner import plan as _plan
from tfplus.planner.profiles import PROFILES, get_profile
from tfplus.runtime.facts import device_facts
from tfplus.step_budget import floor, planned_runs, runs_fit, smallest_peak, training_feeds, training_runs
from tfplus.units import format_size

# What the largest batch one step holds may use: every transformation but those that split the batch.
ONE_STEP = tuple(t for t in TRANSFORMATIONS if t not in ("stream", "microbatch"))


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `plan` subcommand to an argparse subparsers object; its handler is `main` (set as `func`)."""
    from tfplus.graphs.mentee import DATA_FORMATS, OPTIMIZERS
    p = subparsers.add_parser(
        "plan", help="plan the memory of one training step (breakdown, budget fit, max batch)",
        description="Plans one training step of a model (forward, backward, optimizer update): memory by "
                    "role, the liveness lower bound, and, given a budget, the cheapest transformations that "
                    "fit it. Exit status 1 when the step does not fit the budget.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--model", type=cli_args.model, default="mentee", help="registered model "
                        "(tfplus.graphs.MODELS); default mentee")
    source.add_argument("--graph", type=cli_args.path, metavar="FILE",
                        help="plan your own training graph instead: a MetaGraphDef (.meta, tf.train.export_meta_graph "
                             "or a Saver's) or a GraphDef (tf.train.write_graph), written by tfplus or TensorFlow; "
                             "the step runs the op of its 'train_op' collection or --fetch, fed its placeholders, "
                             "their batch dimension --batch-size (or the placeholders' own)")
    p.add_argument("--fetch", metavar="NAME[,NAME..]", help="with --graph: the op(s) or tensor(s) a training step "
                   "runs (default: the MetaGraphDef's 'train_op' collection)")
    p.add_argument("--widths", dest="conv_widths", type=cli_args.widths, metavar="W,W,..",
                   help="conv layer widths (default: the model's, mentee 32,32,64,64,128)")
    p.add_argument("--fc-widths", type=cli_args.widths, metavar="W,W,..", help="hidden FC widths (mentee 256,128)")
    p.add_argument("--batch-size", type=cli_args.batch_size, help="examples per step (default 128; with --graph, "
                   "the placeholders' batch dimension, when they fix it)")
    p.add_argument("--device", type=cli_args.device, default="cpu", help="cpu or opencl[:N]: its kernels' scratch, "
                   "which transformations apply, and (the OpenCL device when it is here) alignment and compute "
                   "units; default cpu")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--memory-budget", type=cli_args.size, metavar="SIZE",
                        help="memory budget, e.g. 64MB (10^6 bytes) or 64MiB (2^20)")
    budget.add_argument("--budget", type=cli_args.size, metavar="SIZE", help="deprecated spelling of --memory-budget")
    budget.add_argument("--device-profile", type=str.lower, choices=sorted(PROFILES), metavar="NAME",
                        help=f"budget of a phone-class device: {', '.join(PROFILES)}")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="momentum", help="default momentum (Nesterov)")
    p.add_argument("--data-format", choices=DATA_FORMATS, default="NCHW", help="activation layout (default "
                   "NCHW)")
    p.add_argument("--input", choices=("host", "device"), help="the step `tfplus train --input` runs: host (float "
                   "images fed) or device (the dataset's uint8 bytes fed, a quarter of the feed); default device on "
                   "opencl, host on cpu")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--fine-tune-last", type=cli_args.positive_int, metavar="N", help="plan a step that trains "
                       "only the last N layers (frozen layers: no weight gradient, no slot; nothing below the lowest "
                       "trained layer runs backward or keeps activations)")
    which.add_argument("--trainable", metavar="REGEX", help="plan a step that trains only the variables whose "
                       "name matches")
    p.add_argument("--budgets", type=_sizes, metavar="SIZE,SIZE,..", help="plan the step under each of these budgets "
                   "and list, per budget, whether it fits, its peak, the transformations chosen, the recomputation's "
                   "solver and checkpoints, and the predicted step time")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--plot", type=_plot_file(cli_args.output_file()), metavar="FILE",
                   help="write memory over the step to FILE (.svg; .png with matplotlib)")
    p.add_argument("--max-batch", action="store_true",
                   help="find the largest batch that fits the budget (binary search, confirmed by one step)")
    p.set_defaults(func=main)
    return p


def _sizes(text: str) -> list[int]:
    """--budgets' type: sizes separated by commas."""
    sizes = [cli_args.size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError(f"{text!r} names no budget; give sizes separated by commas, e.g. 64MB,32MB")
    return sizes


def _per_budget(p, budget: int) -> dict:
    """What `--budgets` lists for the plan `p` of one budget."""
    names = [t["name"] for t in p.transformations if t["name"] not in ("schedule", "inplace")]
    row = {"budget_bytes": budget, "fits": p.fits, "peak_bytes": p.peak_bytes, "transformations": names,
           "predicted_overhead": round(p.predicted_overhead, 4), "choice": p.choice}
    for t in p.transformations:
        if t["name"] == "recompute":
            row.update(solver=t.get("solver", ""), checkpoints=t.get("checkpoints", []),
                       recomputed=t.get("recomputed", []))
        if t["name"] == "page":
            row.update(paged=t["detail"], paged_overhead=round(t["predicted_overhead"], 4))
    return row


def _names(p) -> str:
    """The transformations of plan `p` as the smallest-feasible line says them."""
    out = []
    for t in p.transformations:
        name = t["name"]
        if name == "microbatch":
            out.append(f"{p.microbatches} micro-batches")
        elif name == "stream":
            out.append(f"a prefix streamed in {p.stream_microbatches} micro-batches")
        elif name not in ("schedule", "inplace"):
            out.append(name)
    return ", ".join(out)


def _print_budgets(rows: list[dict]) -> None:
    print(f"  {'budget':>10} {'peak':>10} {'fits':>4} {'predicted':>9}  transformations")
    for row in rows:
        print(f"  {format_size(row['budget_bytes']):>10} {format_size(row['peak_bytes']):>10} "
              f"{'yes' if row['fits'] else 'no':>4} {row['predicted_overhead']:>+9.1%}  "
              f"{' + '.join(row['transformations']) or 'none'}")
        if row.get("solver"):
            ck = row["checkpoints"]
            more = f", ... ({len(ck) - 8} more; --json lists them)" if len(ck) > 8 else ""
            print(f"  {'':>10} recompute: {len(row['recomputed'])} activations, by {row['solver']}; "
                  f"{len(ck)} checkpoints" + (f": {', '.join(ck[:8])}{more}" if ck else ""))
        if row.get("paged"):
            print(f"  {'':>10} page: {row['paged']} ({row['paged_overhead']:+.1%})")
        times = re.search(r"([\d.e+]+ ms) -> ([\d.e+]+ ms)", row["choice"])
        if times:
            print(f"  {'':>10} predicted step time {times.group(1)} unconstrained -> {times.group(2)}")


def _plot_file(writable):
    """--plot's type: a writable .svg, or a .png when matplotlib is installed; checked before planning."""
    def check(text: str) -> str:
        suffix = text.lower().rpartition(".")[2]
        if suffix not in ("svg", "png"):
            raise argparse.ArgumentTypeError(f"{text}: the file name must end in .svg or .png")
        if suffix == "png":
            import importlib.util
            if importlib.util.find_spec("matplotlib") is None:
                raise argparse.ArgumentTypeError(f"{text}: a PNG needs matplotlib, which is not installed; "
                                                 "write an .svg")
        return writable(text)
    return check


def main(args: argparse.Namespace) -> int:
    """Runs `tfplus plan`; returns the exit status: 0, or 1 when the step does not fit the budget."""
    from tfplus.runtime import get_runtime, opencl, parse_device
    from tfplus.trainer import UsageError
    if parse_device(args.device)[0] == "opencl" and opencl.available():  # else plans for assumed defaults
        try:
            get_runtime(args.device)
        except (ValueError, RuntimeError) as e:  # no such OpenCL device here
            raise UsageError(f"--device {args.device}: {e}") from None
    if args.budget is not None:
        print("tfplus plan: note: --budget is deprecated; use --memory-budget", file=sys.stderr)
    budget = args.memory_budget if args.memory_budget is not None else args.budget
    source = "--memory-budget" if budget is not None else None
    if args.device_profile is not None:
        prof = get_profile(args.device_profile)
        budget, source = prof.usable_bytes, f"{prof.name}: {prof.description}; usable memory (assumed) " \
            f"{format_size(prof.usable_bytes)} of {format_size(prof.ram_bytes)} RAM"
    if args.max_batch and budget is None:
        raise UsageError("--max-batch needs a budget: give --memory-budget SIZE or --device-profile NAME")
    if args.fetch and not args.graph:
        raise UsageError("--fetch names ops of a graph file: give --graph FILE with it (a --model's step is known)")
    if args.graph:
        step: _TrainStep = _GraphStep(args)
        args.batch_size = step.batch
        what = f"{args.graph}: {', '.join(f.name for f in step.fetches)}"
    else:
        args.batch_size = args.batch_size or 128
        step = _TrainStep(args)
        what = args.model
    p = step.plan(args.batch_size, budget)
    lowest, seconds = step.floor(args.batch_size)
    smallest = lowest.budget_bytes
    out = p.to_json()
    if args.graph:
        out.update(graph=args.graph, fetch=[f.name for f in step.fetches],
                   fed={t.name: list(s) for t, s in step.shapes(args.batch_size, step.fed).items()})
    else:
        out.update(model=args.model, optimizer=args.optimizer, fine_tune_last=args.fine_tune_last,
                   trainable=args.trainable)
    out.update(batch_size=args.batch_size, smallest_feasible_budget_bytes=smallest,
               smallest_feasible_plan={"peak_bytes": lowest.peak_bytes, "transformations": _names(lowest),
                                       "predicted_overhead": round(lowest.predicted_overhead, 4),
                                       "planning_seconds": round(seconds, 2)})
    if args.max_batch:
        # The batch one step holds (micro-batching only splits a batch that is already in memory, so with it
        # the limit is mostly the fed images themselves: reported apart, not run).
        n = p.max_batch_size = out["max_batch_size"] = step.max_batch(budget, ONE_STEP)
        if n:
            _note(f"confirming batch {n} by running one training step under {format_size(budget)}")
        out["max_batch_confirmed"] = step.confirm(n, budget) if n else False
        out["max_batch_size_with_microbatching"] = step.max_batch(budget, at_least=n)
        if not n:  # not even one example: say what one needs (the weights and slots alone may not fit)
            out["batch_1_needs_bytes"] = step.fit(1, budget, ONE_STEP)[0]
    rows = [_per_budget(step.plan(args.batch_size, b), b) for b in args.budgets or ()]
    if rows:
        out["budgets"] = rows
    if args.plot:
        from tfplus.planner.plot import write_plot
        write_plot(p, args.plot, f"{what}, batch {args.batch_size}" +
                   ("" if args.graph else f", {args.optimizer}") + f" on {args.device}")
    # A budget a little below the floor may fit too (the floor's search stops within planner.FLOOR_PRECISION)
    status = 0 if budget is None or smallest <= budget or p.fits else cli_args.EXIT_FAILED
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        tuned = f", trains the last {args.fine_tune_last} layers" if args.fine_tune_last else \
            f", trains /{args.trainable}/" if args.trainable else ""
        if args.graph:
            fed = ", ".join(f"{t.name} {_shape(s)}" for t, s in step.shapes(args.batch_size, step.fed).items())
            print(f"{what}, batch {args.batch_size} (fed {fed or 'nothing'})")
        else:
            print(f"{args.model}, batch {args.batch_size}, {args.optimizer}, {args.data_format}{tuned}")
        if source:
            print(f"budget from {source}")
        print(p.summary())
        print(f"  smallest feasible budget {format_size(smallest, up=True)} ({smallest} bytes): fits "
              f"{format_size(lowest.peak_bytes)} with {_names(lowest) or 'the plain step'}, predicted "
              f"{lowest.predicted_overhead:+.1%} (found in {seconds:.1f} s)")
        if args.max_batch and not out["max_batch_size"]:
            print(f"  max batch size     0: no batch fits {format_size(budget)}; batch 1 needs "
                  f"{format_size(out['batch_1_needs_bytes'], up=True)} (parameters {format_size(p.parameter_bytes)}, "
                  f"optimizer slots {format_size(p.slot_bytes)}); use a larger budget")
        elif args.max_batch:
            ok = "confirmed by running one step" if out["max_batch_confirmed"] else "NOT confirmed"
            print(f"  max batch size     {out['max_batch_size']} ({ok}); "
                  f"{out['max_batch_size_with_microbatching']} with micro-batching (not run)")
        if rows:
            print(f"per budget (batch {args.batch_size}):")
            _print_budgets(rows)
        if args.plot:
            print(f"  plot written to {args.plot}")
    if status:
        print(f"tfplus plan: the step does not fit the budget of {format_size(budget)}: it needs at least "
              f"{format_size(smallest, up=True)} ({smallest} bytes); use a larger budget or a smaller --batch-size",
              file=sys.stderr)
    return status


def _note(text: str) -> None:
    """Progress of a long phase, on stderr (stdout carries the table or the JSON)."""
    print(f"tfplus plan: {text}", file=sys.stderr, flush=True)


_PLANNED_STEPS = 1000  # the run length the planned step's learning-rate schedule is built for


class _TrainStep:
    """The training step `tfplus train` runs (tfplus.trainer's graph and running sums), planned at any batch."""

    def __init__(self, args):
        from tfplus.graphs.mentee import default_warmup
        from tfplus.trainer import RunningSums, TrainConfig, build_graph, device_input, resolve
        self.args = args
        given = {k: getattr(args, k, None) for k in ("model", "conv_widths", "fc_widths", "optimizer",
                                                     "data_format", "trainable", "fine_tune_last", "input")}
        cfg = resolve(TrainConfig(**given, batch_size=getattr(args, "batch_size", None), synthetic=True,
                                  device=args.device))
        # NOTE: the step `tfplus train` runs, warm-up included (its default: one epoch, so always some): without
        # it the learning rate's graph lacked the ramp's ops, and the planner's floor for LeNet at batch 8 came out
        # 7.5 kB apart from train's (its recomputation choice moved). The figures (1000 steps) change no shape.
        if cfg.warmup_steps is None:
            cfg.warmup_steps = default_warmup(_PLANNED_STEPS)
        self.tg = build_graph(cfg, _PLANNED_STEPS, device_input(cfg))
        self.sums = RunningSums(self.tg)  # the step the trainer runs sums its loss and accuracy on the device
        self.fed = training_feeds(self.tg)
        self.fetches = [self.sums.step_op]
        from tfplus.engine.rewrite import enabled, optimize
        rw = optimize(self.tg.graph, self.fetches, set(self.fed)) if enabled() else None
        self.source = self.tg.graph  # the step as built (self.graph: rewritten, for the tests' plans)
        self.graph, self.planned, self.planned_fed = self.tg.graph, self.fetches, self.fed
        if rw is not None:
            self.graph, self.planned = rw.graph, [rw.element[f] for f in self.fetches]
            self.planned_fed = tuple(rw.element[t] for t in self.fed)
        self._floors: dict = {}

    def shapes(self, batch: int, fed=None) -> dict:
        return {t: (batch,) + tuple(t.shape.as_list()[1:]) for t in fed or self.planned_fed}

    def runs(self, batch: int) -> list:
        """The runs whose needs decide a session's budget (step_budget.training_runs)."""
        return training_runs(self.tg, self.sums.step_op, batch)

    def plan(self, batch: int, budget):
        """The plan of a run of `batch` for `budget`, made as the session makes it (step_budget.planned_runs: its
        loops unrolled, then rewritten; where that does not fit, its maps of the rows unrolled for micro-batches)."""
        first = None
        for graph, fetches, shapes in planned_runs(self.source, self.fetches, self.shapes(batch, self.fed)):
            p = _plan(fetches, shapes, device_facts(self.args.device), budget, graph=graph, raise_if_infeasible=False)
            if p.fits or budget is None:
                return p
            first = first or p
        return first

    def floor(self, batch: int, transformations=TRANSFORMATIONS) -> tuple:
        """(the floor plan of a run of `batch`, the seconds its search took): step_budget.floor of training_runs,
        its budget_bytes the smallest budget the runs fit; remembered per batch."""
        key = (batch, tuple(transformations))
        if key not in self._floors:
            t0 = time.perf_counter()
            runs = self.runs(batch)
            self._floors[key] = floor(self.source, runs, self.args.device, transformations), \
                time.perf_counter() - t0
        return self._floors[key]

    def smallest(self, batch: int, transformations=TRANSFORMATIONS) -> int:
        """The smallest budget a run of `batch` fits in (its floor's budget)."""
        return self.floor(batch, transformations)[0].budget_bytes

    def fit(self, batch: int, budget: int, transformations=TRANSFORMATIONS) -> tuple[int, bool]:
        """(the need of a run of `batch`, whether it fits `budget`): the need is its smallest plan's peak
        (step_budget.smallest_peak, one plan a run where the floor's search is several), and a budget below it
        may still fit a plan made for it (planner.floor_plan), asked only then."""
        runs = self.runs(batch)
        need = smallest_peak(self.source, runs, self.args.device, transformations)
        return need, need <= budget or "microbatch" in transformations and \
            runs_fit(self.source, runs, self.args.device, budget, transformations)

    def max_batch(self, budget: int, transformations=TRANSFORMATIONS, at_least: int = 0) -> int:
        """The largest batch up to tfplus.cli_args.MAX_BATCH_SIZE that fits (a multiple of 8 from 8 on: micro-batching
        needs a batch with divisors), `at_least` known to fit. Past a few examples a step's need grows about
        linearly with its batch (without micro-batching its activations, with it the fed images), so each probe
        is where the line through the last two probes reaches the budget (a secant search), every other one the
        middle of what is left once the answer is bracketed: a dozen plans where doubling and bisection made
        dozens of plans of big batches. Each probe is reported on stderr."""
        limit = cli_args.MAX_BATCH_SIZE
        what = "with micro-batching" if "microbatch" in transformations else "without micro-batching"
        t0 = time.perf_counter()
        probes: list[tuple[int, int]] = []

        def fits(b):
            need, ok = self.fit(b, budget, transformations)
            probes.append((b, need))
            how = "fits" if need <= budget else "a plan for the budget fits" if ok else "too big"
            _note(f"max batch {what}: batch {b} needs {format_size(need)} ({how}; {time.perf_counter() - t0:.1f} s)")
            return ok
        # lo fits (0: nothing does), hi does not or is past the limit. With a batch of 16 or more known to fit,
        # the smallest batches are no question: 8 and 16 give the secant its first two points.
        lo, hi = 0, 8 if at_least >= 16 else 1
        while hi <= min(16, limit) and fits(hi):  # the smallest batches, where the line does not hold yet
            lo, hi = hi, hi * 2
        if lo == 16:
            lo, hi, top, bisect, gallop = max(lo, at_least // 8 * 8), None, limit // 8 * 8, False, 8
            while lo < top and (hi is None or hi - lo > 8):
                (b1, n1), (b2, n2) = sorted(probes[-2:])
                guess = int(b2 + (budget - n2) / max((n2 - n1) / max(b2 - b1, 1), 1.0)) // 8 * 8
                if hi is None:  # not bracketed yet: at least a growing step past the last fit
                    b = min(max(guess, lo + gallop), top)
                    gallop *= 2
                else:
                    b = (lo + hi) // 2 // 8 * 8 if bisect else min(max(guess, lo + 8), hi - 8)
                    bisect = not bisect
                lo, hi = (b, hi) if fits(b) else (lo, b)
            return lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def confirm(self, batch: int, budget: int) -> bool:
        """Runs one training step at `batch` under the budget on the device (random images and labels)."""
        import numpy as np

        import tfplus as tf
        rng = np.random.default_rng(0)
        shapes = self.shapes(batch, self.fed)
        feeds = {t: rng.integers(0, 10, shapes[t]).astype(t.dtype.as_numpy_dtype) for t in self.fed}
        if self.tg.raw_images is None:
            feeds[self.tg.images] = rng.standard_normal(shapes[self.tg.images]).astype(np.float32)
        else:  # device input: the dataset's bytes, and crops at the top left without a flip
            feeds[self.tg.raw_images] = rng.integers(0, 256, shapes[self.tg.raw_images]).astype(np.uint8)
            feeds[self.tg.crops] = np.zeros(shapes[self.tg.crops], np.int32)
        # one step: no worker processes to fork and check (tfplus.engine.workers)
        with tf.Session(graph=self.tg.graph, device=self.args.device, memory_budget=budget, workers=1) as sess:
            sess.run(self.tg.init_op)
            self.sums.start(sess)
            sess.run(self.fetches, feeds)
            loss = self.sums.read(sess)[0]
        return bool(np.isfinite(loss))


def _shape(shape: tuple) -> str:
    return f"({', '.join(map(str, shape))}{',' * (len(shape) == 1)})"


_MAX_GRAPH_BYTES = 2 << 30  # a graph file may come from elsewhere: a larger one is refused before it is read


def _read_graph(path: str):
    """("MetaGraphDef" or "GraphDef", the proto) of the file at `path`, binary or text; a UsageError naming the file
    when it is neither."""
    import os

    from google.protobuf import text_format
    from google.protobuf.message import DecodeError

    from tfplus.graph_io import parse_graph_def
    from tfplus.proto import graph_pb2, meta_graph_pb2
    from tfplus.trainer import UsageError
    want = "give a MetaGraphDef (tf.train.export_meta_graph, a Saver's .meta) or a GraphDef (tf.train.write_graph)"
    if not os.path.isfile(path):
        raise UsageError(f"--graph {path}: no such file; {want}")
    if os.path.getsize(path) > _MAX_GRAPH_BYTES:
        raise UsageError(f"--graph {path}: larger than {format_size(_MAX_GRAPH_BYTES)}, more than a graph; {want}")
    with open(path, "rb") as f:
        data = f.read()

    def nodes_ok(gd) -> bool:  # a parse of the other kind of file gives no nodes, or nodes without an op
        return len(gd.node) > 0 and all(n.name and n.op for n in gd.node)

    def binary(parse):
        try:
            return parse(data)
        except (DecodeError, ValueError):  # not this kind of file: the next parse says
            return None

    def text(proto):
        try:  # TensorFlow writes fields tfplus's protos lack (NodeDef.experimental_type): skipped, as binary's
            return text_format.Parse(data.decode("utf-8"), proto, allow_unknown_field=True)
        except (UnicodeDecodeError, text_format.ParseError):
            return None

    for meta in (binary(meta_graph_pb2.MetaGraphDef.FromString), text(meta_graph_pb2.MetaGraphDef())):
        if meta is not None and nodes_ok(meta.graph_def):
            return "MetaGraphDef", meta
    for gd in (binary(lambda d: parse_graph_def(d, source=repr(path))), text(graph_pb2.GraphDef())):
        if gd is not None and nodes_ok(gd):
            return "GraphDef", gd
    raise UsageError(f"--graph {path}: neither a MetaGraphDef nor a GraphDef (binary or text) with nodes; {want}")


def _sinks(graph, limit: int = 6) -> str:
    """The forward ops nothing else reads, NoOps first (a training graph's train op is among them), for a hint."""
    ops = graph.get_operations()
    read = {t.op for op in ops for t in op.inputs} | {c for op in ops for c in op.control_inputs}
    names = [op.name for op in sorted(ops, key=lambda op: op.type != "NoOp")
             if op not in read and not op.backward and op.type not in ("Const", "Placeholder")]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


class _GraphStep(_TrainStep):
    """A user's own training step from a graph file (`--graph`): the op(s) of its 'train_op' collection or
    `--fetch`, fed every placeholder they need; a placeholder's unknown first dimension is the batch (--batch-size,
    default 128), the others must be known. The session's other run that decides its budget: the variables'
    initializer (a MetaGraphDef's global variables; a GraphDef's NoOp named 'init', when it has one)."""

    def __init__(self, args):
        import tfplus as tf
        from tfplus.framework import needed_ops, topo_order
        from tfplus.trainer import UsageError
        self.args, path = args, args.graph
        kind, proto = _read_graph(path)
        self.source = self.graph = tf.Graph()
        with self.graph.as_default():
            try:
                if kind == "MetaGraphDef":
                    tf.train.import_meta_graph(proto)
                else:
                    tf.import_graph_def(proto, name="")
            except (ValueError, TypeError, KeyError, NotImplementedError) as e:
                raise UsageError(f"--graph {path}: cannot import its {kind}: {' '.join(str(e).split())}") from None
            self.fetches = self._fetches(kind)
            has_variables = bool(tf.global_variables())
            self.init = tf.global_variables_initializer() if has_variables else None
        if self.init is None:
            named = [op for op in self.graph.get_operations() if op.name == "init" and op.type == "NoOp"]
            self.init = named[0] if named else None
        ops = topo_order(needed_ops(self.fetches, set()))
        self.fed = tuple(op.outputs[0] for op in ops if op.type == "Placeholder")
        self._rowed = set()
        fixed = set()
        for t in self.fed:
            dims = t.shape.as_list() if t.shape.dims is not None else None
            if dims is None or None in dims[1:]:
                raise UsageError(f"--graph {path}: placeholder {t.op.name!r} has shape {t.shape}: only the first "
                                 "dimension (the batch) may be unknown; export it with its other dimensions set")
            if dims and dims[0] is None:
                self._rowed.add(t)
            elif dims:
                fixed.add(dims[0])
        if self._rowed:
            self.batch = args.batch_size or 128
        else:
            if args.batch_size or args.max_batch:
                what = "--batch-size" if args.batch_size else "--max-batch"
                raise UsageError(f"--graph {path}: {what} needs a placeholder whose first dimension is unknown "
                                 f"(the batch), and {', '.join(repr(t.op.name) for t in self.fed) or 'none is fed'}"
                                 " fix theirs; export them with shape [None, ...] or drop " + what)
            self.batch = max(fixed, default=1)
        self.planned, self.planned_fed = self.fetches, self.fed
        from tfplus.engine.rewrite import enabled, optimize
        rw = optimize(self.graph, self.fetches, set(self.fed)) if enabled() else None
        if rw is not None:
            self.graph, self.planned = rw.graph, [rw.element[f] for f in self.fetches]
            self.planned_fed = tuple(rw.element[t] for t in self.fed)
        self._floors: dict = {}

    def _fetches(self, kind: str) -> list:
        """The step's fetches: --fetch's names, else the 'train_op' collection; a UsageError naming the file,
        the name and what the graph offers."""
        from tfplus.trainer import UsageError
        g, path = self.graph, self.args.graph
        if not self.args.fetch:
            found = list(dict.fromkeys(g.get_collection("train_op")))  # apply_gradients adds it too: once
            if found:
                return found
            where = "its 'train_op' collection is empty" if kind == "MetaGraphDef" else "a GraphDef has no collections"
            raise UsageError(f"--graph {path}: no train op ({where}); give --fetch NAME (ops nothing else reads: "
                             f"{_sinks(g)}), or tf.add_to_collection('train_op', train_op) before exporting")
        fetches = []
        for name in (n.strip() for n in self.args.fetch.split(",")):
            try:
                fetches.append(g.as_graph_element(name))
            except (KeyError, ValueError, TypeError):
                raise UsageError(f"--fetch {name}: {path} has no op or tensor named {name!r}; its ops nothing else "
                                 f"reads: {_sinks(g)}") from None
        return fetches

    def shapes(self, batch: int, fed=None) -> dict:
        """Each fed tensor's shape at `batch` (`fed`: the graph's placeholders or, by default, the planned step's,
        in the same order)."""
        return {p: (batch,) + tuple(t.shape.as_list()[1:]) if t in self._rowed else tuple(t.shape.as_list())
                for p, t in zip(fed or self.planned_fed, self.fed)}

    def runs(self, batch: int) -> list:
        return [(self.fetches, self.shapes(batch, self.fed))] + ([(self.init, {})] if self.init is not None else [])

    def confirm(self, batch: int, budget: int) -> bool:
        """Runs one step at `batch` under the budget on the device (after the initializer; without one it cannot
        run: False): random floats, zero integers and booleans, so labels and indices stay in range."""
        import numpy as np

        import tfplus as tf
        if self.init is None:
            _note("cannot confirm: the graph has no initializer (no global variables, no NoOp 'init')")
            return False
        rng = np.random.default_rng(0)
        feeds = {t: (rng.standard_normal(s) if t.dtype.is_floating else np.zeros(s)).astype(t.dtype.as_numpy_dtype)
                 for t, s in self.shapes(batch, self.fed).items()}
        with tf.Session(graph=self.source, device=self.args.device, memory_budget=budget, workers=1) as sess:
            sess.run(self.init)
            values = sess.run(self.fetches, feeds)
        return all(np.isfinite(v).all() for v in values if v is not None and np.asarray(v).dtype.kind == "f")
