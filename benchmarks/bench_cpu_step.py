"""Time one Mentee training step on tfplus's cpu device and, in the same run, the same step in PyTorch CPU.

    pip install torch==2.13.0          # optional peer: pip install '.[bench]'
    python benchmarks/bench_cpu_step.py [--batch 128] [--rounds 5] [--steps 3] [--threads N]

The step: NCHW float32 batch 128, conv3x3 SAME 32, 32, [pool], 64, 64, [pool], 128, [pool], ReLU, FC
2048-256-128-10, sparse softmax cross-entropy, momentum SGD, the loss fetched every step. The two frameworks
alternate in rounds (`--steps` steps each per round) so that load from other processes falls on both alike;
the figure per framework is the median step over all rounds, and the ratio is tfplus / PyTorch. `--threads`
caps both (OpenBLAS and torch) at N threads; by default each uses every core.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3, help="steps per framework per round")
    p.add_argument("--threads", type=int, help="threads for both frameworks (default: all cores)")
    args = p.parse_args()
    if args.threads:  # before NumPy loads OpenBLAS
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)

    import numpy as np

    import tfplus as tf
    from tfplus.graphs.mentee import training_graph

    rng = np.random.default_rng(0)
    images = rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 10, args.batch).astype(np.int32)

    tg = training_graph(total_steps=10 ** 6, seed=0, optimizer="momentum", nesterov=False, weight_decay=0.0,
                        schedule="const", learning_rate=0.01)
    sess = tf.Session(graph=tg.graph, device="cpu")
    sess.run(tg.init_op)
    feed = {tg.images: images, tg.labels: labels}

    def tfplus_step():
        sess.run([tg.train_op, tg.loss], feed)

    runners = {"tfplus cpu": tfplus_step}
    try:
        import torch
    except ImportError:
        print("PyTorch not installed (pip install torch==2.13.0): timing tfplus alone", file=sys.stderr)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_reference import Mentee

        if args.threads:
            torch.set_num_threads(args.threads)
        model = Mentee()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        x, y = torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))

        def torch_step():
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()

        runners[f"PyTorch {torch.__version__} cpu"] = torch_step

    for run in runners.values():  # warm-up: first-step allocations, kernel selection
        run()
    times = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, run in runners.items():
            for _ in range(args.steps):
                t = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t)
    threads = args.threads or os.cpu_count()
    print(f"Mentee training step, batch {args.batch}, {threads} thread(s), "
          f"{args.rounds} rounds x {args.steps} steps each")
    med = {}
    for name, ts in times.items():
        med[name] = statistics.median(ts) * 1e3
        print(f"  {name:28s} median {med[name]:7.1f} ms  min {min(ts) * 1e3:7.1f}  max {max(ts) * 1e3:7.1f}")
    if len(med) == 2:
        a, b = med.values()
        print(f"  ratio tfplus / PyTorch: {a / b:.2f}")


if __name__ == "__main__":
    main()
