"""`tfplus profile`: where a training step's time, memory and transfers go, by op type and by layer.

    tfplus profile --model mentee --batch-size 128 --steps 12
    tfplus profile --device opencl --trace step.json        # open in chrome://tracing or ui.perfetto.dev
    tfplus profile --memory-budget 64MB                     # live bytes from the memory plan

It trains `--steps` steps (as `tfplus train --steps` does), on random images and labels: two warm-up steps,
then untraced steps (the step time distribution, CPU utilization) alternating with traced ones (the tables,
the trace: tfplus.profiler).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict

from tfplus import cli_args, gfile
from tfplus.units import format_size

WARMUP_STEPS = 2  # plans, programs, buffer pools, the allocator's first pages
# Each traced step's metadata is kept for the tables: a profile of more steps would only grow the memory.
MAX_STEPS = 1000


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `profile` subcommand to an argparse subparsers object; its handler is `main` (set as `func`)."""
    from tfplus.graphs.mentee import DATA_FORMATS, OPTIMIZERS
    p = subparsers.add_parser(
        "profile", help="time, FLOPs, memory and transfers of a training step, by op type and by layer",
        description="Profiles training steps of a model on random data: tables by op type and by layer (time, "
                    "% of the step, GFLOP/s, forward/backward/update split), the step time distribution, CPU "
                    "utilization, peak memory and bytes moved; --trace writes a Chrome trace / Perfetto JSON.")
    p.add_argument("--model", type=cli_args.model, default="mentee",
                   help="registered model (tfplus.graphs.MODELS); default mentee")
    p.add_argument("--widths", dest="conv_widths", type=cli_args.widths, metavar="W,W,..",
                   help="conv layer widths (default: the model's, mentee 32,32,64,64,128)")
    p.add_argument("--fc-widths", type=cli_args.widths, metavar="W,W,..", help="hidden FC widths (mentee 256,128)")
    p.add_argument("--device", type=cli_args.device, default="cpu", help="cpu (default), opencl or opencl:N")
    p.add_argument("--batch-size", type=cli_args.batch_size, default=128, help="examples per step (default 128)")
    p.add_argument("--steps", type=_profile_steps, default=12, metavar="N",
                   help=f"training steps to run (default 12): {WARMUP_STEPS} warm-up, then untraced and traced "
                   f"ones in turn; at least {WARMUP_STEPS + 2}")
    p.add_argument("--trace", type=cli_args.output_file(json=True), metavar="FILE.json",
                   help="write the traced steps as Chrome trace JSON")
    p.add_argument("--memory-budget", type=cli_args.size, metavar="SIZE", help="run each step by a memory plan of SIZE")
    p.add_argument("--threads", type=cli_args.threads, metavar="N", help=cli_args.THREADS_HELP)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="momentum", help="default momentum (Nesterov)")
    p.add_argument("--data-format", choices=DATA_FORMATS, default="NCHW", help="activation layout (default "
                   "NCHW)")
    p.add_argument("--top", type=cli_args.positive_int, default=15, metavar="N", help="rows per table (default 15)")
    p.set_defaults(func=main)
    return p


def _profile_steps(text: str) -> int:
    value = cli_args.whole(text, 1, MAX_STEPS)
    if value < WARMUP_STEPS + 2:
        raise argparse.ArgumentTypeError(f"must be >= {WARMUP_STEPS + 2} ({WARMUP_STEPS} warm-up steps, then at "
                                         f"least one untraced and one traced step), got {value}")
    return value


def main(args: argparse.Namespace) -> int:
    """Runs `tfplus profile`; returns the exit status (0, or 2 for a usage error)."""
    import numpy as np

    import tfplus as tf
    from tfplus import profiler
    from tfplus.graphs import get_model, training_graph
    from tfplus.trainer import UsageError, peak_rss_bytes
    try:
        # A small constant learning rate: random data at the recipe's rate diverges to inf within steps, and
        # the costs measured should be those of finite numbers.
        tg = training_graph(get_model(args.model).build, total_steps=1000, optimizer=args.optimizer,
                            learning_rate=1e-4, schedule="const", data_format=args.data_format,
                            model_kwargs=_model_kwargs(args), image_shape=get_model(args.model).image_shape)
        # In one process (no tfplus.engine.workers): the traced steps, which the untraced ones are compared with, run
        # their ops here.
        sess = tf.Session(graph=tg.graph, device=args.device, memory_budget=args.memory_budget, workers=1)
    except (ImportError, RuntimeError, ValueError) as e:
        raise UsageError(str(e)) from None
    rng = np.random.default_rng(0)
    image = tuple(tg.images.shape.as_list()[1:])  # the model's layout (NCHW or NHWC)
    feeds = {tg.images: rng.standard_normal((args.batch_size,) + image).astype(np.float32),
             tg.labels: rng.integers(0, 10, args.batch_size).astype(np.int32)}
    fetches = [tg.train_op, tg.loss]
    progress = _Progress(args.steps)
    with sess:
        sess.run(tg.init_op)
        for _ in range(WARMUP_STEPS):
            sess.run(fetches, feeds)
            progress.step()
        # Untraced and traced steps alternate, so that both see the same machine load.
        times, runs, cpu_s, wall_s = [], [], 0.0, 0.0
        trace = profiler.RunOptions(profiler.RunOptions.FULL_TRACE)
        for i in range(args.steps - WARMUP_STEPS):
            if i % 2:
                runs.append(profiler.RunMetadata())
                sess.run(fetches, feeds, options=trace, run_metadata=runs[-1])
            else:
                c0, t0 = os.times(), time.perf_counter()
                sess.run(fetches, feeds)
                c1, t1 = os.times(), time.perf_counter()
                times.append(t1 - t0)
                cpu_s += (c1.user - c0.user) + (c1.system - c0.system)
                wall_s += t1 - t0
            progress.step()
        pool = sess.runtime.pool_bytes or None  # 0: a device with no buffer pool (the cpu)
        describe = sess.runtime.describe()
    out = sys.stdout
    print(f"{args.model}, batch {args.batch_size}, {args.optimizer}, on {describe}"
          + (f", memory budget {format_size(args.memory_budget)}" if args.memory_budget else ""), file=out)
    print(report(runs, args.top), file=out)
    med = statistics.median(times)
    traced = statistics.median(md.step_us / 1e6 for md in runs)
    print(f"step time ({len(times)} untraced steps): min {min(times) * 1e3:.1f} ms, median {med * 1e3:.1f} ms, "
          f"max {max(times) * 1e3:.1f} ms; {args.batch_size / med:.0f} images/s", file=out)
    print(f"traced step: median {traced * 1e3:.1f} ms (tracing overhead {traced / med - 1:+.1%})", file=out)
    cores = os.cpu_count() or 1
    util = cpu_s / max(wall_s, 1e-9)
    print(f"process CPU utilization {util:.0%} of one core ({util / cores:.0%} of {cores}); peak RSS "
          f"{format_size(peak_rss_bytes())}", file=out)
    peak = max(md.summary()["peak_live_bytes"] for md in runs)
    source = "memory plan" if runs[-1].planned else "executor's count"
    print(f"device memory peak: {format_size(peak)} live ({source})"
          + (f"; OpenCL buffer pool {format_size(pool)}" if pool is not None else ""), file=out)
    s = runs[-1].summary()
    traffic = sum(st.bytes_read + st.bytes_written for st in runs[-1].step_stats)
    print(f"bytes moved per step: host->device {format_size(s['h2d_bytes'])}, device->host "
          f"{format_size(s['d2h_bytes'])} ({s['transfer_ms']:.2f} ms); kernels read+write "
          f"{format_size(traffic)}", file=out)
    if args.trace:
        trace = profiler.chrome_trace(runs, f"tfplus {args.model} batch {args.batch_size}")
        gfile.write_output(args.trace, json.dumps(trace).encode())
        print(f"trace written to {args.trace} ({len(trace['traceEvents'])} events; chrome://tracing or "
              "ui.perfetto.dev)", file=out)
    return 0


class _Progress:
    """Steps done, on stderr every few seconds: a PoCL step of Mentee takes seconds, its first one a minute."""

    EVERY_S = 5.0

    def __init__(self, total: int):
        self.total, self.done = total, 0
        self.t0 = self.shown = time.perf_counter()

    def step(self) -> None:
        self.done += 1
        now = time.perf_counter()
        if now - self.shown >= self.EVERY_S and self.done < self.total:
            self.shown = now
            print(f"tfplus profile: step {self.done}/{self.total} ({now - self.t0:.0f} s)", file=sys.stderr,
                  flush=True)


def _model_kwargs(args) -> dict:
    return {k: getattr(args, k) for k in ("conv_widths", "fc_widths") if getattr(args, k) is not None}


def report(runs: list, top: int = 15) -> str:
    """The by-op-type and by-layer tables of traced runs (per-step means), and the phase split."""
    step_ms = statistics.mean(md.step_us for md in runs) / 1e3
    lines = []
    for title, key in (("op type", lambda s: s.type), ("layer", lambda s: s.layer)):
        rows = _aggregate(runs, key)
        lines.append(f"{'by ' + title:<28} {'n':>4} {'ms':>8} {'%step':>6} {'dev ms':>8} {'GFLOP':>8} "
                     f"{'GFLOP/s':>8} {'fwd ms':>8} {'bwd ms':>8} {'upd ms':>8}")
        for name, r in rows[:top]:
            lines.append(f"{name[:28]:<28} {r['n']:>4.0f} {r['ms']:>8.2f} {r['ms'] / step_ms:>6.1%} "
                         f"{r['dev']:>8.2f} {r['gflop']:>8.3f} {r['gflop'] / max(r['ms'], 1e-9) * 1e3:>8.2f} "
                         f"{r['forward']:>8.2f} {r['backward']:>8.2f} {r['update']:>8.2f}")
        if len(rows) > top:
            rest = sum(r["ms"] for _, r in rows[top:])
            lines.append(f"{f'({len(rows) - top} more)':<28} {'':>4} {rest:>8.2f} {rest / step_ms:>6.1%}")
        lines.append("")
    phase = {k: statistics.mean(md.summary()[f"{k}_ms"] for md in runs) for k in ("forward", "backward", "update")}
    total = sum(phase.values()) or 1e-9
    lines.append("phases: " + ", ".join(f"{k} {v:.1f} ms ({v / total:.0%})" for k, v in phase.items())
                 + f"; ops {total:.1f} ms of a {step_ms:.1f} ms traced step")
    return "\n".join(lines)


def _aggregate(runs: list, key) -> list[tuple[str, dict]]:
    """Per-step means by `key`, biggest time first."""
    acc: dict = defaultdict(lambda: defaultdict(float))
    for md in runs:
        for s in md.step_stats:
            r = acc[key(s)]
            r["n"] += 1
            r["ms"] += s.wall_us / 1e3
            r["dev"] += s.device_us / 1e3
            r["gflop"] += s.flops / 1e9
            r[s.phase] += s.wall_us / 1e3
    n = len(runs)
    rows = [(name, {k: v / n for k, v in r.items()}) for name, r in acc.items()]
    for _, r in rows:
        for k in ("forward", "backward", "update"):
            r.setdefault(k, 0.0)
    return sorted(rows, key=lambda kv: -kv[1]["ms"])
