"""The fused recurrent cells (tfplus.engine.rewrite_rnn) on and off, in one run: a seqnet training step (Adam,
the trainer's graph: tfplus.graphs.mentee.training_graph) with rewrite_rnn's passes on and with them off (every
other fusion of the rewrite on in both), in turns; optionally the PyTorch mirror's step (benchmarks/torch_seqnet.py,
TF's cells written out) at the same thread count. Not a test.

    python benchmarks/bench_rnn_fused.py                                  # seqnet, seqnet-lstm, seqnet-bi on cpu
    python benchmarks/bench_rnn_fused.py --models seqnet --torch          # and torch's step (pip install torch)
    python benchmarks/bench_rnn_fused.py --device opencl --models seqnet,seqnet-lstm,seqnet-bi,seqnet-bilstm \
        --sums-apart

The sides alternate in rounds (`--steps` steps each per round) so that load from other processes falls on all
alike; the figure per side is the median step. Both tfplus sessions start from the same weights; their losses
after the run are printed side by side. ops/step is what the executor runs, launches/step (opencl) the kernel
launches of one step.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tfplus as tf
from tfplus.engine import rewrite, rewrite_rnn
from tfplus.graphs import seqnet as seqnet_module
from tfplus.graphs.mentee import training_graph

MODELS = {"seqnet": {}, "seqnet-lstm": {"cell": "lstm"}, "seqnet-bi": {"bidirectional": True},
          "seqnet-bilstm": {"cell": "lstm", "bidirectional": True}}


def _session(tg, device: str, cells: bool, sums: bool, fetches, feed):
    """A session of `tg` whose first step (where the rewrite is made) runs with the passes of
    tfplus.engine.rewrite_rnn on or off: the cells', and the weight gradients summed over the steps."""
    sess = tf.Session(graph=tg.graph, device=device)
    sess.run(tg.init_op)
    real = rewrite.fuse_cells, rewrite.fuse_weight_sums
    if not cells:
        rewrite.fuse_cells = lambda *a, **k: rewrite_rnn.Cells()
    if not sums:
        rewrite.fuse_weight_sums = lambda *a, **k: rewrite_rnn.Cells()
    try:
        sess.run(fetches, feed)  # plan, rewrite, build kernels
    finally:
        rewrite.fuse_cells, rewrite.fuse_weight_sums = real
    return sess


def _ops(sess) -> int:
    return max(len(p.order) for p in [*sess.programs, *(p for s in sess.steps for p in s.programs)])


def _launches(sess, fetches, feed) -> int | None:
    """Kernel launches of one step (calls of the OpenCL runtime's run()); None on the cpu device."""
    rt = sess.runtime
    if not hasattr(rt, "run"):
        return None
    count = [0]
    run = rt.run

    def counted(*a):
        count[0] += 1
        return run(*a)
    rt.run = counted
    try:
        sess.run(fetches, feed)
    finally:
        del rt.run
    return count[0]


def _torch_step(model_name: str, widths, batch: int, images: np.ndarray, labels: np.ndarray):
    """One training step of benchmarks/torch_seqnet.py's model (Adam, weight decay as its recipe), as a
    function; torch runs on the cpu with tfplus's intra-op thread count."""
    import os
    import sys
    from pathlib import Path

    # NOTE: OpenMP's busy-waiting threads make torch's cpu step 30-60x slower on a loaded machine (measured on a
    # shared 2-core box); tfplus's threads sleep when idle, so the mirror's do too.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from torch_seqnet import SeqNet

    from tfplus import threads
    torch.set_num_threads(threads.current())
    torch.manual_seed(0)
    model = SeqNet(widths, "lstm" if "lstm" in model_name else "gru", "-bi" in model_name)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))

    def step():
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)
    return step, f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.environ['OMP_WAIT_POLICY']}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default="seqnet,seqnet-lstm,seqnet-bi", help=f"comma-separated, of {list(MODELS)}")
    p.add_argument("--widths", default="64,128,128", help="Conv1D filters, RNN 1 units, RNN 2 units")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=2, help="steps per side per round")
    p.add_argument("--torch", action="store_true", help="also time the PyTorch mirror's step (cpu)")
    p.add_argument("--sums-apart", action="store_true",
                   help="also time the fused cells without _FusedMatMulSum (the steps' weight gradients apart)")
    args = p.parse_args()
    widths = tuple(int(w) for w in args.widths.split(","))
    rng = np.random.default_rng(0)
    images = rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 10, args.batch).astype(np.int32)
    for name in args.models.split(","):
        kwargs = {"conv_widths": widths, **MODELS[name]}
        tg = training_graph(seqnet_module.seqnet, total_steps=10 ** 6, seed=0, optimizer="adam", schedule="const",
                            learning_rate=1e-3, model_kwargs=kwargs)
        feed = {tg.images: images, tg.labels: labels}
        fetches = [tg.train_op, tg.loss]
        sides = {}
        variants = [("cells fused", True, True), ("cells unfused", False, False)]
        if args.sums_apart:
            variants.insert(1, ("cells fused, weight grads per step", True, False))
        for side, cells, sums in variants:
            sess = _session(tg, args.device, cells, sums, fetches, feed)
            sides[side] = {"run": lambda s=sess, f=fetches, d=feed: s.run(f, d)[1], "sess": sess, "times": [],
                           "ops": _ops(sess), "launches": _launches(sess, fetches, feed)}
        if args.torch:
            step, what = _torch_step(name, widths, args.batch, images, labels)
            step()
            sides[what] = {"run": step, "sess": None, "times": [], "ops": None, "launches": None}
        for _ in range(args.rounds):
            for side in sides.values():
                for _ in range(args.steps):
                    t = time.perf_counter()
                    side["loss"] = float(side["run"]())
                    side["times"].append(time.perf_counter() - t)
        runtime = sides["cells fused"]["sess"].runtime.describe()
        print(f"{name} {widths}, batch {args.batch}, device {args.device} ({runtime}), {args.rounds} rounds x "
              f"{args.steps} steps")
        print(f"  {'':40s} {'ms/step':>9s} {'ops/step':>9s} {'launches':>9s}  loss after the run")
        for what, side in sides.items():
            ops = "-" if side["ops"] is None else str(side["ops"])
            launches = "-" if side["launches"] is None else str(side["launches"])
            print(f"  {what:40s} {statistics.median(side['times']) * 1e3:9.1f} {ops:>9s} {launches:>9s}  "
                  f"{side['loss']:.6f}")
            if side["sess"] is not None:
                side["sess"].close()


if __name__ == "__main__":
    main()
