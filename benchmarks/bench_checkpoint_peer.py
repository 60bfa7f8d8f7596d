"""PyTorch with torch.utils.checkpoint as tfplus's memory peer (issue 34): per model, PyTorch's training step plain
and with checkpoint_sequential over the model's blocks in 2, 4, ... segments (its peak memory and step time), and
for each of them a tfplus step planned to that peak (tf.Session(memory_budget=peak)): its planned and measured peak
and its step time; plus tfplus's step without a budget. Not a test.

    pip install torch==2.13.0
    python benchmarks/bench_checkpoint_peer.py --device cuda/opencl         # a GPU: batch 128 (3 minutes expected)
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_checkpoint_peer.py --device cpu --batch 16 --steps 5 --threads 1
    python benchmarks/bench_checkpoint_peer.py --device cpu/opencl --models mentee --batch 16   # tfplus on PoCL

--device is 'cpu' or 'TORCH/TFPLUS' (PyTorch's device, tfplus's: cuda/opencl, cuda:1/opencl:1). Each side runs in
its own process (PyTorch in a child, `python -P`, which loads its sibling torch_reference.py by path), so that the
two never share a GPU's allocator; the child measures its peaks first, then steps when told, in turns with tfplus.

Peak memory, one definition on both sides: the most device memory the step's tensors hold at once, the whole
footprint (parameters, optimizer slots, the batch, and every transient: activations, gradients, convolution
workspaces), an allocator's cache of freed blocks not counted.
- PyTorch on cuda: torch.cuda.max_memory_allocated over one step after reset_peak_memory_stats. Its gradients go
  at the end of each step (zero_grad(set_to_none=True)), as tfplus's transient gradients, so that between steps
  it holds its parameters, momentum buffers and the batch ('held').
- PyTorch on the cpu: 'held' (the bytes of those tensors) plus the highest running sum of the CPU allocator's
  allocations and frees during one step under torch.profiler (profile_memory=True); 'n/a' where the profiler does
  not report them.
- tfplus: the plan's peak_bytes (variables and slots + fed arrays + the arena) and the measured peak, as
  bench_remat.py: on opencl the runtime's ledger of device memory in use (engine.memory.measure_device_step),
  on the cpu tracemalloc's NumPy memory (engine.memory.measure_step). The budget is PyTorch's peak to the byte.
Step time: wall-clock median of --steps steps after --warmup, each step ending with a synchronization
(torch.cuda.synchronize, the OpenCL queue's finish); in each round every PyTorch configuration steps once, then
every tfplus session, so that drift on a shared machine falls on all alike (never two steps at once). A tfplus
plan whose step takes over --max-step-s is timed by that one step (a plan with many micro-batches can take seconds
a step on a GPU).

Same model and recipe on both sides: torch_reference.py's mirror of tfplus.graphs' Mentee and MobileNet (tfplus's
initializers), SGD with Nesterov momentum 0.9, weight decay 5e-4 on the weights, a cosine learning rate, mean
cross-entropy, float32 (no TF32 on cuda), random images and labels. tfplus's cpu steps run in this process
(workers=1), so that tracemalloc sees them. MobileNet's batch norms under checkpointing run twice a step in
PyTorch (the recomputation updates the running statistics again): the time is that of the real thing.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

MODELS = ("mentee", "mobilenet")
MB = 1e6
# Small enough that random labels do not drive the weights to inf or NaN within the run (non-finite arithmetic
# would time something else); the loss after the run is reported.
LR = 0.001


def _reference():
    """torch_reference.py, beside this file, loaded by path (under `python -P` the folder is not on sys.path)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_reference.py")
    spec = importlib.util.spec_from_file_location("torch_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- PyTorch (the child process) ----------------------------------------------------------------------------------
def torch_side(model_name: str, device: str, batch: int, warmup: int, segments: list[str],
               threads: int | None) -> None:
    """Each configuration's peak (printed on a line 'READY {json}'), then one step of each per line 'round' read
    from stdin (answered 'ROUND'), and after any other line their median step times ('RESULT {json}').
    `segments`: counts, or 'all' (one per block)."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint_sequential
    ref = _reference()
    ref.strict_fp32()
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    model = (ref.MobileNet() if model_name == "mobilenet" else ref.Mentee()).to(dev)
    decayed = model.decayed() if model_name == "mobilenet" else \
        [m.weight for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    opt, sched = ref.make_optimizer(model, decayed, "momentum", LR, 0.9, 5e-4, total=10 ** 6, warmup=0)
    blocks = model.blocks()
    x = torch.randn(batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step(k: int):
        # checkpoint_sequential runs its last segment plainly: 1 segment is the plain step.
        out = blocks(x) if k == 1 else checkpoint_sequential(blocks, k, x, use_reentrant=False)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)  # gradients live within the step, as tfplus's
        if cuda:
            torch.cuda.synchronize()
        return loss.detach()

    def held() -> int:
        slots = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
        return sum(t.nbytes for t in (*model.parameters(), *model.buffers(), *slots, x, y))

    def peak(k: int) -> tuple[int, int | None]:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(dev)
            start = torch.cuda.memory_allocated(dev)
            step(k)
            return start, torch.cuda.max_memory_allocated(dev)
        start = held()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            step(k)
        try:
            records = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
        except AttributeError:  # a torch whose profiler results read otherwise: no cpu peak
            return start, None
        running = top = 0
        for e in sorted(records, key=lambda e: e.start_ns()):
            running += e.nbytes()
            top = max(top, running)
        return start, start + top

    counts = sorted({len(blocks) if k == "all" else int(k) for k in ["1", *segments]})
    configs = [{"name": "plain" if k == 1 else f"ckpt {k}", "segments": k} for k in counts
               if k <= len(blocks)]
    live = []
    for c in configs:
        try:
            for _ in range(warmup):
                step(c["segments"])
            c["held"], c["peak"] = peak(c["segments"])
            live.append(c)
        except Exception as e:  # noqa: BLE001  a configuration that fails (out of memory) is a row
            c["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    name = torch.cuda.get_device_name(dev) if cuda else f"cpu, {torch.get_num_threads()} threads"
    res = {"torch": torch.__version__, "device": name, "blocks": len(blocks), "configs": configs}
    print("READY " + json.dumps(res), flush=True)
    times: dict[str, list[float]] = {c["name"]: [] for c in live}
    for line in sys.stdin:
        if line.strip() != "round":
            break
        for c in live:
            t = time.perf_counter()
            step(c["segments"])
            times[c["name"]].append(time.perf_counter() - t)
        print("ROUND", flush=True)
    for c in live:
        if times[c["name"]]:
            c["ms"] = statistics.median(times[c["name"]]) * 1e3
    if live:
        configs[0]["loss"] = float(step(1))
    print("RESULT " + json.dumps(res), flush=True)


class TorchPeer:
    """torch_side in a child process, driven a round at a time so that its steps take turns with tfplus's (never
    at the same time: each step ends synchronized). `result` is its answer so far; a child that fails, lacks torch
    or takes over --torch-timeout seconds to answer leaves an 'error' there."""

    def __init__(self, args, model: str, torch_device: str):
        cmd = [sys.executable, "-P", os.path.abspath(__file__), "--torch-side", model, "--device", torch_device,
               "--batch", str(args.batch), "--warmup", str(args.warmup), "--segments", args.segments]
        cmd += ["--threads", str(args.threads)] if args.threads else []
        self.timeout = args.torch_timeout
        self.stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True)
        # A reader thread, so that a silent child times out instead of blocking this process.
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.result: dict = {}
        self._answer("READY")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the end of its output

    def _answer(self, tag: str) -> None:
        """Waits for the child's line starting with `tag`; its JSON, if any, becomes `result`."""
        line = ""
        try:
            while not line.startswith(tag):
                line = self.lines.get(timeout=self.timeout)
                if not line:  # the end of its output: it exited
                    return self._fail(None)
        except queue.Empty:
            return self._fail(f"no answer in {self.timeout} s")
        if line[len(tag):].strip():
            self.result = json.loads(line[len(tag):])

    def _fail(self, why: str | None) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.seek(0)
        why = why or (self.stderr.read().strip().splitlines() or ["exited without output"])[-1][:200]
        self.result["error"] = why

    def _send(self, what: str, tag: str) -> None:
        if self.result.get("error"):
            return
        try:
            self.proc.stdin.write(what + "\n")
            self.proc.stdin.flush()
        except OSError:  # it died: _answer says why
            pass
        self._answer(tag)

    def round(self) -> None:
        self._send("round", "ROUND")

    def finish(self) -> dict:
        self._send("done", "RESULT")
        if self.proc.poll() is None:
            self.proc.wait(timeout=self.timeout)
        return self.result


# -- tfplus (this process) ------------------------------------------------------------------------------------------
def _plan_summary(p) -> str:
    if p is None:
        return "-"
    names = [x["name"] for x in p.transformations if x["name"] not in ("schedule", "inplace")]
    if p.microbatches > 1:
        names = [f"microbatch x{p.microbatches}" if n == "microbatch" else n for n in names]
    return ", ".join(names) or "none"


def tfplus_side(model: str, device: str, batch: int, steps: int, warmup: int, budgets: list,
                max_step_s: float, threads: int | None, each_round: Callable[[], None]) -> list[dict]:
    """One row per (name, budget bytes or None): planned and measured peak, median ms, or an error. Each of the
    `steps` rounds calls `each_round` (the peer's round) before its own steps."""
    import tracemalloc

    import numpy as np

    import tfplus as tf
    from tfplus.engine.memory import measure_device_step, measure_step
    from tfplus.graphs import get_model, training_graph
    from tfplus.planner import BudgetError
    tg = training_graph(get_model(model).build, total_steps=10 ** 6, optimizer="momentum", learning_rate=LR)
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((batch, 3, 32, 32), dtype=np.float32),
             tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
    fetches = [tg.train_op, tg.loss]
    cpu = device == "cpu"
    config = tf.ConfigProto(intra_op_parallelism_threads=threads) if threads else None
    rows, live = [], {}

    def timed(sess, row: dict) -> float:
        t = time.perf_counter()
        row["loss"] = float(sess.run(fetches, feeds)[1])
        sess.runtime.synchronize()
        return time.perf_counter() - t

    for name, budget in budgets:
        row = {"name": name, "budget": budget}
        rows.append(row)
        sess = None
        # NOTE: a closed session's device memory goes back when its arrays are collected; a collection during
        # the measured step would lower the ledger below its base.
        gc.collect()
        try:
            if cpu:  # before the session allocates anything, after the feeds were made (measure_step)
                tracemalloc.start()
            sess = tf.Session(graph=tg.graph, device=device, memory_budget=budget, workers=1,
                              config=config)
            # Other sessions on the device are idle and hold the same bytes throughout: the ledger's base.
            base = 0 if cpu else sess.runtime.in_use_bytes
            sess.run(tg.init_op)
            t = time.perf_counter()
            sess.run(fetches, feeds)
            row["first_s"] = time.perf_counter() - t
            t = time.perf_counter()
            row["measured"] = (measure_step if cpu else measure_device_step)(sess, fetches, feeds)["peak"] - base
            measured_s = time.perf_counter() - t
            p = sess.step(fetches, feeds).plan
            row["planned"], row["plan"] = (p.peak_bytes if p else None), _plan_summary(p)
            if not cpu and measured_s > max_step_s:  # the ledger costs nothing: an ordinary step (tracemalloc not)
                row["ms"] = measured_s * 1e3
        except BudgetError as e:
            row["error"] = f"no plan fits; the smallest needs {e.smallest_bytes / MB:.1f} MB"
        except Exception as e:  # noqa: BLE001  a budget tfplus fails at is a row, not a crash
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        finally:
            if cpu and tracemalloc.is_tracing():
                tracemalloc.stop()
        if "error" in row:
            if sess is not None:
                sess.close()
            continue
        for _ in range(0 if "ms" in row else warmup):
            last = timed(sess, row)
            if last > max_step_s:
                row["ms"] = last * 1e3
                break
        if "ms" in row:
            row["plan"] += " (timed by 1 step)"
            sess.close()
            continue
        live[name] = sess, row
    times: dict[str, list[float]] = {name: [] for name in live}
    for _ in range(steps):
        each_round()
        for name, (sess, row) in live.items():
            times[name].append(timed(sess, row))
    for name, (sess, row) in live.items():
        row["ms"] = statistics.median(times[name]) * 1e3
        sess.close()
    return rows


# -- the table -----------------------------------------------------------------------------------------------------
def _mb(v) -> str:
    return "n/a" if v is None else f"{v / MB:.1f}"


def report(model: str, torch_res: dict, rows: list[dict], tfplus_device: str) -> None:
    print(f"\n{model}: PyTorch {torch_res.get('torch', '?')} on {torch_res.get('device', '?')}, "
          f"{torch_res.get('blocks', '?')} blocks; tfplus on {tfplus_device}")
    if "error" in torch_res:
        print(f"  PyTorch side unavailable: {torch_res['error']}")
    print(f"  {'config':17s} {'torch MB':>9s} {'torch ms':>9s} {'budget MB':>10s} {'planned MB':>10s} "
          f"{'measured MB':>11s} {'tfplus ms':>9s} {'ratio':>6s} {'first s':>7s}  tfplus plan")
    by_name = {row["name"]: row for row in rows}
    for c in [*torch_res.get("configs", []), {"name": "tfplus no budget"}]:
        row = by_name.get(c["name"], {"budget": None, "error": "no PyTorch peak to plan to"})
        t_mb = _mb(c.get("peak")) if "segments" in c else "-"
        t_ms = f"{c['ms']:.2f}" if "ms" in c else "-"
        budget = _mb(row["budget"]) if row["budget"] is not None else "none" if c["name"] in by_name else "-"
        error = c.get("error") or row.get("error")
        if error:
            print(f"  {c['name']:17s} {t_mb:>9s} {t_ms:>9s} {budget:>10s}  {error}")
            continue
        ms = row["ms"]
        ratio = f"{ms / c['ms']:.2f}" if "ms" in c else "-"
        print(f"  {c['name']:17s} {t_mb:>9s} {t_ms:>9s} {budget:>10s} {_mb(row['planned']):>10s} "
              f"{_mb(row['measured']):>11s} {ms:9.2f} {ratio:>6s} {row['first_s']:7.1f}  {row['plan']}")
    held = [c["held"] for c in torch_res.get("configs", []) if "held" in c]
    if held:
        print(f"  PyTorch holds {held[0] / MB:.1f} MB between steps (parameters, momentum buffers, batch)")
    print("  MB = 10^6 bytes; ratio = tfplus ms / torch ms; first s: tfplus's first step, its planning (in a "
          "model's first row also kernel builds) included")
    torch_loss = next((f"{c['loss']:.4f}" for c in torch_res.get("configs", []) if "loss" in c), "n/a")
    print(f"  loss after the run (finite: the arithmetic timed was ordinary): PyTorch {torch_loss}, tfplus "
          + (", ".join(f"{row['loss']:.4f}" for row in rows if "loss" in row) or "n/a"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="'cpu' or TORCH/TFPLUS, e.g. cuda/opencl (default cpu)")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10, help="timed rounds (each configuration one step a round)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--segments", default="2,4,8,all",
                    help="checkpoint_sequential segment counts ('all': one per block; more than the blocks: left out)")
    ap.add_argument("--max-step-s", type=float, default=2.0,
                    help="a tfplus step slower than this (the measured one on a GPU, else a warm-up step) times its "
                    "plan alone (raise it for large cpu steps)")
    ap.add_argument("--threads", type=int, help="cpu threads of both (default: each library's own choice)")
    ap.add_argument("--torch-timeout", type=int, default=300,
                    help="seconds the PyTorch side may take to answer (its set-up, a round)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--torch-side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_side:  # the child: args.device is PyTorch's device
        torch_side(args.torch_side, args.device, args.batch, args.warmup, args.segments.split(","), args.threads)
        return
    torch_device, tfplus_device = ("cpu", "cpu") if args.device == "cpu" else (args.device.split("/") + [""])[:2]
    if not tfplus_device:
        ap.error(f"--device {args.device!r}: write 'cpu' or PyTorch's and tfplus's devices, e.g. cuda/opencl")
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    results = {}
    for model in models:
        peer = TorchPeer(args, model, torch_device)
        budgets = [(c["name"], c.get("peak")) for c in peer.result.get("configs", [])
                   if c.get("peak") is not None]
        rows = tfplus_side(model, tfplus_device, args.batch, args.steps, args.warmup,
                           budgets + [("tfplus no budget", None)], args.max_step_s, args.threads, peer.round)
        torch_res = peer.finish()
        report(model, torch_res, rows, tfplus_device)
        results[model] = {"torch": torch_res, "tfplus": rows}
    print(f"\nbatch {args.batch}, median of {args.steps} steps after {args.warmup} warm-up, configurations in turns, "
          "PyTorch's round before tfplus's")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
