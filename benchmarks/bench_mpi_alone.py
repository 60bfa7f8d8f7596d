"""MPI_Allreduce alone, at the sizes of a Mentee step's gradient buckets, between the ranks of `mpiexec -n N`: from
NumPy arrays and, with --device opencl, from the pinned host arrays the all-reduce kernels use (runtime.pinned_array:
CL_MEM_ALLOC_HOST_PTR, mapped once), the two in turns. Not a test: what the exchange costs without the device, to
set beside a step's trace (on two H200s the 2 MB bucket's all-reduce took ~1 ms inside the step: BENCHMARKS.md,
mpib). Rank 0 prints the medians.

    mpiexec -n 2 python benchmarks/bench_mpi_alone.py --device opencl --sizes 4KB 64KB 512KB 2MB --reps 200
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu: NumPy arrays only; opencl: also this rank's pinned arrays")
    p.add_argument("--sizes", nargs="+", default=["4KB", "64KB", "512KB", "2MB"])
    p.add_argument("--reps", type=int, default=200, help="all-reduces of a size and memory per round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import tfplus.distributed as dist
    from tfplus.units import parse_size
    dist.init()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    kinds = {"numpy": lambda n, key: np.ones(n, np.float32)}
    if args.device.startswith("opencl"):
        import tfplus as tf
        sess = tf.Session(device=dist.local_device())  # kept: its device holds the pinned arrays
        rt = sess.runtime
        kinds["pinned"] = lambda n, key: rt.pinned_array(("bench", key), (n,), np.float32)
    times: dict = {}
    for _ in range(args.rounds):
        for size in args.sizes:
            n = parse_size(size, "--sizes") // 4
            for kind, make in kinds.items():
                a = make(n, size)
                a[:] = 1.0
                comm.Barrier()
                for _ in range(args.reps):
                    t = time.perf_counter()
                    comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
                    times.setdefault((size, kind), []).append(time.perf_counter() - t)
    if comm.Get_rank() == 0:
        print(f"MPI_Allreduce, {comm.Get_size()} ranks, float32 sum in place, {args.rounds} rounds x {args.reps} "
              f"(medians; the first round's first 10 left out): {MPI.Get_library_version().splitlines()[0][:40]}")
        for (size, kind), ts in times.items():
            ms = np.median(ts[10:]) * 1e3
            nbytes = parse_size(size, "--sizes")
            print(f"  {size:>6s} {kind:6s} {ms:8.3f} ms  {nbytes / ms / 1e6:6.2f} GB/s  (p90 "
                  f"{np.percentile(ts[10:], 90) * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
