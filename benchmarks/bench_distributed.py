"""Images/s of `tfplus train` on cpu in one process and in N ranks of `mpiexec -n N ... --distributed`.

    python benchmarks/bench_distributed.py                         # lenet, batch 64, 1 and 2 ranks
    python benchmarks/bench_distributed.py --model mentee --batch-size 128 --steps 60 --ranks 1 2 4

Each run trains --steps steps on synthetic data at the global --batch-size (each rank 1/N of it); images/s is the
median of the --log file's step rows after the first two (the first steps build and plan). One process runs as
`tfplus train` does by default (its worker processes included: --workers); N ranks split the cores between them
and fork none. Needs the mpi extra (pip install ".[mpi]"). Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

MPIEXEC = Path(sys.executable).parent / "mpiexec"  # the mpich wheel installs it beside the interpreter


def images_per_sec(ranks: int, args) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        train = [sys.executable, "-m", "tfplus", "train", "--synthetic", "--model", args.model, "--batch-size",
                 str(args.batch_size), "--steps", str(args.steps), "--no-eval", "--log-every", "5", "--log", log]
        cmd = train if ranks == 1 else [str(MPIEXEC), "-n", str(ranks), *train, "--distributed"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(line) for line in Path(log).read_text().splitlines()]
        speeds = [r["images_per_sec"] for r in rows if r["kind"] == "step"][2:]
    if not speeds:
        raise SystemExit(f"--steps {args.steps} gave too few log rows (every 5 steps, after the first 2): give more")
    return float(np.median(speeds))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="lenet")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    print(f"{args.model}, global batch {args.batch_size}, cpu, {os.cpu_count()} cores")
    for n in args.ranks:
        print(f"{n} rank{'s' * (n > 1)}: {images_per_sec(n, args):8.0f} images/s", flush=True)


if __name__ == "__main__":
    main()
