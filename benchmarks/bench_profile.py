"""Where one Mentee training step's time goes, in tfplus (its own tracer) and in PyTorch (torch.profiler).

    python benchmarks/bench_profile.py [--device cpu|opencl] [--batch 128] [--steps 3]

Prints tfplus's table by layer (forward / backward / update), then one table by kind of work for both
frameworks: convolution forward and backward, dense layers, ReLU, pooling, loss, optimizer update, the rest.
tfplus's figures are its traced op times (device time on opencl); PyTorch's are the self times of its aten
ops in torch.profiler (CPU time on cpu, CUDA time when tfplus runs on opencl and a CUDA GPU is present), so
nested calls are not counted twice. Both are per-step means over `--steps` traced steps after two warm-up
steps. PyTorch is optional: `pip install torch==2.13.0`.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import numpy as np

KINDS = ("conv forward", "conv backward", "dense", "relu", "pool", "loss", "update", "other")


def kind_of(name: str, update: bool = False) -> str:
    """The kind of work an op does, from a tfplus op type or a PyTorch aten op name."""
    n = name.lower()
    if update or n.startswith("apply") or "optimizer" in n:
        return "update"
    if "conv" in n:
        return "conv backward" if ("backprop" in n or "backward" in n) else "conv forward"
    if "biasaddgrad" in n:
        return "conv backward"
    if "biasadd" in n:
        return "conv forward"
    if any(k in n for k in ("matmul", "addmm", "aten::mm", "aten::linear")):
        return "dense"
    if "relu" in n or "threshold" in n:
        return "relu"
    if "pool" in n:
        return "pool"
    if any(k in n for k in ("softmax", "entropy", "nll", "log_softmax")):
        return "loss"
    return "other"


def profile_tfplus(device: str, batch: int, steps: int):
    import tfplus as tf
    from tfplus import profiler
    from tfplus.graphs.mentee import training_graph
    from tfplus.profile_cli import report

    tg = training_graph(total_steps=10 ** 6, seed=0, optimizer="momentum", nesterov=False, weight_decay=0.0,
                        schedule="const", learning_rate=1e-4)
    rng = np.random.default_rng(0)
    feed = {tg.images: rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
    runs = []
    with tf.Session(graph=tg.graph, device=device) as s:
        s.run(tg.init_op)
        for _ in range(2):
            s.run([tg.train_op, tg.loss], feed)
        for _ in range(steps):
            runs.append(profiler.RunMetadata())
            s.run([tg.train_op, tg.loss], feed,
                  options=profiler.RunOptions(profiler.RunOptions.FULL_TRACE), run_metadata=runs[-1])
        describe = s.runtime.describe()
    kinds = defaultdict(float)
    for md in runs:
        for st in md.step_stats:
            kinds[kind_of(st.type, st.phase == "update")] += st.device_us / 1e3 / steps
    step_ms = sum(md.step_us for md in runs) / 1e3 / steps
    return describe, report(runs, top=20), kinds, step_ms


def profile_torch(cuda: bool, batch: int, steps: int):
    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_reference import Mentee

    dev = torch.device("cuda" if cuda else "cpu")
    model = Mentee().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)).to(dev)
    y = torch.from_numpy(rng.integers(0, 10, batch)).to(dev)

    def forward_backward():
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        return loss

    def step():
        loss = forward_backward()
        opt.step()
        loss.item()

    def self_ms(fn) -> dict:
        """Per-step self times by kind of work of `steps` calls of fn under torch.profiler."""
        fn()
        fn()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(steps):
                fn()
            if cuda:
                torch.cuda.synchronize()
        kinds = defaultdict(float)
        for ev in prof.key_averages():
            kinds[kind_of(ev.key)] += (ev.self_device_time_total if cuda else ev.self_cpu_time_total) / 1e3 / steps
        return kinds

    # The optimizer's aten ops (add_, mul_) look like any other by name: profile the step without it too,
    # and call the difference the update.
    kinds = self_ms(lambda: forward_backward().item())
    full = sum(self_ms(step).values())
    kinds["update"] = max(0.0, full - sum(kinds.values()))
    return f"PyTorch {torch.__version__} on {dev}", kinds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", help="tfplus device: cpu (default) or opencl[:N]")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    describe, table, ours, step_ms = profile_tfplus(args.device, args.batch, args.steps)
    print(f"tfplus: Mentee step, batch {args.batch}, on {describe}; traced step {step_ms:.1f} ms\n")
    print(table)
    try:
        import torch
    except ImportError:
        print("\nPyTorch not installed: no peer column", file=sys.stderr)
        return
    cuda = args.device.startswith("opencl") and torch.cuda.is_available()
    peer, theirs = profile_torch(cuda, args.batch, args.steps)
    unit = "device ms" if args.device.startswith("opencl") else "CPU ms"
    print(f"\nby kind of work, per step ({unit}): tfplus vs {peer}")
    print(f"{'kind':<16} {'tfplus':>10} {'share':>7} {'PyTorch':>10} {'share':>7} {'ratio':>7}")
    a_tot, b_tot = sum(ours.values()) or 1e-9, sum(theirs.values()) or 1e-9
    for k in KINDS:
        a, b = ours.get(k, 0.0), theirs.get(k, 0.0)
        ratio = f"{a / b:7.2f}" if b > 0.01 else f"{'-':>7}"
        print(f"{k:<16} {a:>10.2f} {a / a_tot:>7.1%} {b:>10.2f} {b / b_tot:>7.1%} {ratio}")
    print(f"{'total':<16} {a_tot:>10.2f} {'':>7} {b_tot:>10.2f} {'':>7} {a_tot / b_tot:7.2f}")


if __name__ == "__main__":
    main()
