"""Time one Mentee training step on tfplus's cpu device and, in the same run, the same step in PyTorch CPU, at
each of several thread counts.

    pip install torch==2.13.0          # optional peer: pip install '.[bench]'
    python benchmarks/bench_cpu_step.py --threads 1,2,4,8,16 [--contended] [--batch 128] [--rounds 5] [--steps 3]
        [--model mentee|lenet] [--recipe momentum|trainer]

The step: NCHW float32 batch 128, conv3x3 SAME 32, 32, [pool], 64, 64, [pool], 128, [pool], ReLU, FC
2048-256-128-10 (--model lenet: tfplus.graphs.lenet, conv5x5 VALID 6, pool, 16, pool, FC 400-120-84-10),
sparse softmax cross-entropy, the loss fetched every step; momentum SGD at a constant rate, or with --recipe trainer
`tfplus train`'s (Nesterov momentum 0.9, weight decay 5e-4 on the weights, a warm-up and cosine schedule: PyTorch's
side is torch_reference.make_optimizer with its LambdaLR stepped every step). Per thread count N,
tfplus runs with tf.ConfigProto(intra_op_parallelism_threads=N) and PyTorch with torch.set_num_threads(N). The
two frameworks alternate in rounds (`--steps` steps each per round) so that load from other processes falls on
both alike; the figure per framework is the median step over all rounds, and the ratio is tfplus / PyTorch.
Beside it, each framework's median CPU time per step (all threads; tfplus's also its worker processes' from 2
threads on: tfplus.engine.workers) and their ratio: on a busy machine the steadier figures (at one thread,
the wall time less the time other processes took the core), and CPU / wall is the cores a framework kept busy.
With --contended every thread count is measured twice, quiet and while another process keeps one core busy,
and the slowdown (contended / quiet) of each framework is printed beside.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time


def _thread_counts(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--threads {text!r}: give thread counts like 1,2,4")
    return counts


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


class _Burner:
    """Another process that keeps one core busy while it lives."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.5)  # let it reach the scheduler
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def _children_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the live processes `pids` have used, from /proc (0 where it is missing)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat(5))
    return total / os.sysconf("SC_CLK_TCK")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=_thread_counts, help="thread counts, e.g. 1,2,4,8,16 (default: 1 and "
                   "every core this process may use)")
    p.add_argument("--contended", action="store_true", help="also time each count with one core kept busy")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3, help="steps per framework per round")
    p.add_argument("--model", choices=("mentee", "lenet"), default="mentee")
    p.add_argument("--recipe", choices=("momentum", "trainer"), default="momentum",
                   help="momentum: SGD momentum 0.9 at a constant rate; trainer: tfplus train's recipe")
    args = p.parse_args()

    import numpy as np

    import tfplus as tf
    from tfplus import threads
    from tfplus.graphs.lenet import lenet
    from tfplus.graphs.mentee import mentee, training_graph

    cores = threads.available_cores()
    counts = args.threads or sorted({1, cores})
    rng = np.random.default_rng(0)
    images = rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 10, args.batch).astype(np.int32)
    total, warmup = 10 ** 6, 390
    recipe = {"nesterov": False, "weight_decay": 0.0, "schedule": "const", "learning_rate": 0.01} \
        if args.recipe == "momentum" else {"warmup_steps": warmup}
    tg = training_graph(lenet if args.model == "lenet" else mentee, total_steps=total, seed=0, **recipe)
    feed = {tg.images: images, tg.labels: labels}

    sessions = {}

    def tfplus_runner(n: int):
        sess = sessions[n] = tf.Session(graph=tg.graph, device="cpu",
                                        config=tf.ConfigProto(intra_op_parallelism_threads=n))
        sess.run(tg.init_op)
        return lambda: sess.run([tg.train_op, tg.loss], feed)

    def cpu_seconds(name: str, n: int) -> float:
        """This process's CPU time, and for tfplus its session's worker processes' (tfplus.engine.workers)."""
        w = sessions[n].workers if name == "tfplus" else None
        return time.process_time() + (_children_cpu(w.pids()) if w is not None else 0.0)

    torch_runner = None
    try:
        import torch
    except ImportError:
        print("PyTorch not installed (pip install torch==2.13.0): timing tfplus alone", file=sys.stderr)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_reference import LeNet, Mentee, make_optimizer

        torch.manual_seed(0)
        model = LeNet() if args.model == "lenet" else Mentee()
        if args.recipe == "momentum":
            opt, sched = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), None
        else:
            weights = [m.weight for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
            opt, sched = make_optimizer(model, weights, "momentum", 0.05, 0.9, 5e-4, total, warmup)
        loss_fn = torch.nn.CrossEntropyLoss()
        x, y = torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))

        def torch_step():
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            loss.item()

        def torch_runner(n: int):
            def step():
                torch.set_num_threads(n)  # per call: the setting is the process's, tfplus's runs leave it
                torch_step()
            return step

    def measure(n: int) -> tuple[dict[str, float], dict[str, float]]:
        runners = {"tfplus": tfplus_runner(n)}
        if torch_runner is not None:
            runners["torch"] = torch_runner(n)
        for run in runners.values():  # warm-up: first-step allocations, kernel selection, pool start
            run()
            run()
        times, cpu = {name: [] for name in runners}, {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, run in runners.items():
                for _ in range(args.steps):
                    t, c = time.perf_counter(), cpu_seconds(name, n)
                    run()
                    times[name].append(time.perf_counter() - t)
                    cpu[name].append(cpu_seconds(name, n) - c)
        return ({name: statistics.median(ts) * 1e3 for name, ts in times.items()},
                {name: statistics.median(cs) * 1e3 for name, cs in cpu.items()})

    peer = f"PyTorch {torch.__version__}" if torch_runner is not None else "(no PyTorch)"
    print(f"{args.model} training step ({args.recipe} recipe), batch {args.batch}, median of {args.rounds} rounds x "
          f"{args.steps} steps; tfplus vs {peer}")
    print(f"machine: {_cpu_model()}, {cores} cores available to this process ({os.cpu_count()} in the host), "
          f"load average {os.getloadavg()[0]:.1f} at start")
    head = f"{'threads':>7} {'tfplus ms':>10} {'cpu ms':>7} {'torch ms':>9} {'cpu ms':>7} {'ratio':>6} {'cpu ratio':>9}"
    if args.contended:
        head += f" | {'contended: tfplus ms':>20} {'torch ms':>9} {'ratio':>6} {'slowdown tfplus':>15} {'torch':>6}"
    print(head)
    for n in counts:
        quiet, cpu = measure(n)
        nan = float("nan")
        row = (f"{n:>7} {quiet['tfplus']:>10.1f} {cpu['tfplus']:>7.1f} {quiet.get('torch', nan):>9.1f} "
               f"{cpu.get('torch', nan):>7.1f} {quiet['tfplus'] / quiet.get('torch', nan):>6.2f} "
               f"{cpu['tfplus'] / cpu.get('torch', nan):>9.2f}")
        if args.contended:
            with _Burner():
                busy, _ = measure(n)
            row += (f" | {busy['tfplus']:>20.1f} {busy.get('torch', float('nan')):>9.1f} "
                    f"{busy['tfplus'] / busy.get('torch', float('nan')):>6.2f} "
                    f"{busy['tfplus'] / quiet['tfplus']:>15.2f} "
                    f"{busy.get('torch', float('nan')) / quiet.get('torch', float('nan')):>6.2f}")
        w = sessions[n].workers
        where = f"  ({w.summary()})" if w is not None else ""
        print(row + ("  (more threads than cores)" if n > cores else "") + where, flush=True)


if __name__ == "__main__":
    main()
