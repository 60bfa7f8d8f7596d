"""Milliseconds per step of the all-reduces of Mentee's gradient buckets, on MPI and on gloo, 2 ranks on this host.

    python benchmarks/bench_allreduce_backends.py                      # 5 rounds of each backend, alternated
    python benchmarks/bench_allreduce_backends.py --steps 200 --rounds 3 --buckets 4MB 4KB,64KB,1MB

A step here is what the communication thread of a --distributed cpu rank does between the backward pass and the
updates: one blocking all-reduce (sum) of each bucket, in place, through the backend's interface
(tfplus.runtime.comm: MPI_Allreduce, or torch.distributed.all_reduce on a gloo process group), of the buckets
DistributedOptimizer cuts Mentee's float32 gradients into (TFPLUS_ALLREDUCE_BUCKET: the default 4 MB, one bucket of
Mentee's ~2.8 MB; a schedule: several). Each run: `mpiexec -n 2` or `torchrun --standalone --nproc-per-node 2`, warm-up
steps, then --steps steps timed one by one (the ranks meet at a barrier first); rank 0 prints the median ms a step
and the median of each bucket. The backends alternate run by run (a busy machine's load falls on both), and the
summary gives each backend's median over its runs and their ratio. Not a test: the numbers depend on the machine.
Needs the mpi and gloo extras (pip install ".[mpi,gloo]").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent  # the mpich wheel's mpiexec and torch's torchrun sit beside the interpreter


def bucket_sizes(spec: str) -> list[int]:
    """The element counts of the buckets DistributedOptimizer cuts Mentee's gradients into under `spec`."""
    import tfplus as tf
    from tfplus.distributed import _bucket_sizes, _buckets
    from tfplus.graphs.mentee import mentee
    with tf.Graph().as_default():
        logits = mentee(tf.placeholder(tf.float32, [None, 3, 32, 32]))
        pairs = [(tf.zeros(v.get_shape()), v) for v in tf.trainable_variables()]
        del logits
        return [sum(int(np.prod(v.get_shape().as_list())) for _, v in b)
                for b in _buckets(pairs, _bucket_sizes(spec, "--buckets"))]


def rank_main(args) -> None:
    """One rank: time the steps' all-reduces and, on rank 0, print them as JSON."""
    import tfplus.distributed as dist
    from tfplus.runtime import comm
    dist.init()
    world = comm.world()
    buffers = [np.full(n, 1.0 + world.rank, np.float32) for n in bucket_sizes(args.buckets[0])]
    for _ in range(args.warmup):
        for buf in buffers:
            world.allreduce(buf)
    world.barrier()
    steps, each = [], [[] for _ in buffers]
    for _ in range(args.steps):
        start = time.perf_counter()
        for k, buf in enumerate(buffers):
            t = time.perf_counter()
            world.allreduce(buf)
            each[k].append(time.perf_counter() - t)
        steps.append(time.perf_counter() - start)
    if world.rank == 0:
        print(json.dumps({"backend": world.name, "step_ms": 1e3 * float(np.median(steps)),
                          "bucket_ms": [1e3 * float(np.median(t)) for t in each],
                          "bucket_mb": [4 * b.size / 1e6 for b in buffers]}), flush=True)


def one_run(backend: str, spec: str, args) -> dict:
    me = [sys.executable, __file__, "--rank", "--buckets", spec, "--steps", str(args.steps), "--warmup",
          str(args.warmup)]
    launch = [str(BIN / "mpiexec"), "-n", "2"] if backend == "mpi" else \
        [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "--no-python", "--"]
    env = dict(os.environ, TFPLUS_DISTRIBUTED_BACKEND=backend, OMP_NUM_THREADS="1")
    run = subprocess.run([*launch, *me], env=env, capture_output=True, text=True, timeout=600)
    if run.returncode:
        sys.exit(f"{backend} run failed:\n{run.stderr[-3000:]}")
    return json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="timed steps a run (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    p.add_argument("--rounds", type=int, default=5, help="runs of each backend, alternated (default 5)")
    p.add_argument("--buckets", nargs="+", default=["4MB", "4KB,64KB,1MB"],
                   help="TFPLUS_ALLREDUCE_BUCKET values, each measured (default: 4MB 4KB,64KB,1MB)")
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)  # one rank of a run (rank_main)
    args = p.parse_args()
    if args.rank:
        return rank_main(args)
    print(f"2 ranks on this host ({os.cpu_count()} cores), {args.steps} steps a run after {args.warmup}, "
          f"{args.rounds} runs of each backend, alternated")
    for spec in args.buckets:
        got: dict[str, list[dict]] = {"mpi": [], "gloo": []}
        for _ in range(args.rounds):
            for backend in got:
                got[backend].append(one_run(backend, spec, args))
        sizes = ", ".join(f"{mb:.3f}" for mb in got["mpi"][0]["bucket_mb"])
        print(f"buckets {spec}: {len(got['mpi'][0]['bucket_mb'])} of {sizes} MB")
        medians = {}
        for backend, runs in got.items():
            steps = [r["step_ms"] for r in runs]
            medians[backend] = float(np.median(steps))
            per_bucket = np.median([r["bucket_ms"] for r in runs], axis=0)
            print(f"  {backend:4s} ms a step: median {medians[backend]:.3f} over runs "
                  f"({', '.join(f'{s:.3f}' for s in steps)}); per bucket {', '.join(f'{b:.3f}' for b in per_bucket)}")
        print(f"  gloo / mpi: {medians['gloo'] / medians['mpi']:.2f}x")


if __name__ == "__main__":
    main()
