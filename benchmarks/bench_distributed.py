"""Images/s of `tfplus train` in one process and in N ranks of `mpiexec -n N ... --distributed` (or torchrun's, gloo),
with the gradient all-reduce overlapped with the backward pass or not.

    python benchmarks/bench_distributed.py                         # lenet, global batch 64, cpu, 1 and 2 ranks
    python benchmarks/bench_distributed.py --device opencl --model mentee --batch-size 128 --per-rank \\
        --steps 600 --log-every 50 --ranks 1 2 --buckets 1MB 4KB,64KB,1MB --flush 0 4 1 --runahead 0 1 --trace
                                                                # 2 GPUs: the issue's measurement

Each run trains --steps steps on synthetic data; images/s is the median of the --log file's step rows after the
first two (the first steps build and plan). --batch-size is the global batch (each rank takes 1/N of it), or with
--per-rank each rank's (the global batch N times it, as data-parallel training grows). N ranks run once per
--buckets value (TFPLUS_ALLREDUCE_BUCKET): 1MB (the default): gradient buckets of 1 MB all-reduced while the
backward pass goes on; 1GB: one bucket, all-reduced after the backward pass (replayed on opencl, no overlap); 0: one
MpiAllreduce after the backward pass, the step waiting (no overlap, no replay: the path before buckets); a schedule
such as 4KB,64KB,1MB: buckets cut from the input side growing, the first layer's gradients alone in the last one
(the all-reduce the step waits for after the backward pass). --trace: TFPLUS_ALLREDUCE_TRACE=1, and each rank's
report (per bucket, and the host's path between steps segment by segment, session.run's parts among them) printed
under its run. --flush: every run once per TFPLUS_OPENCL_FLUSH value (launches between a replay's flushes of the
queue; 0: none, as before stop 43). --runahead: N ranks once per TFPLUS_ALLREDUCE_RUNAHEAD value (1: the host queues
the copy back of each sum behind an event the communication thread completes and runs on, the default on a GPU; 0:
it waits for each sum). --switch-ms: N ranks once per
TFPLUS_ALLREDUCE_SWITCH_MS value (Python's switch interval while the communication thread runs: how soon it gets
Python's lock from the main thread).
On opencl each rank takes device opencl:K, K its local rank. One process runs as `tfplus train` does by default (its
worker processes included: --workers); N ranks fork none. Needs the mpi extra (pip install ".[mpi]"). Not a test:
the numbers depend on the machine.

    python benchmarks/bench_distributed.py --lock-handoff 5 0.2 5 0.2    # Python's lock while launches are queued
    python benchmarks/bench_distributed.py --model mentee --ranks 2 --buckets 4MB --backends mpi gloo gloo mpi --trace
                                                                # MPI against gloo (torchrun; the gloo extra)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

WHAT = {"0": "one MpiAllreduce after the backward pass", "1GB": "one bucket after the backward pass"}


def images_per_sec(ranks: int, bucket: str, flush: str, ahead: str, switch: str, extra: str, args,
                   alone: bool = False, backend: str = "mpi") -> tuple[float, list[str]]:
    """Images/s of one run; `alone`: one rank under mpiexec with --distributed, its all-reduces built anyway
    (TFPLUS_ALLREDUCE_ALONE=1: the buckets' machinery at size 1; --env TFPLUS_ALLREDUCE_ALONE=0: none, as a world of
    one trains by default)."""
    batch = args.batch_size * ranks if args.per_rank else args.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        train = [sys.executable, "-m", "tfplus", "train", "--synthetic", "--model", args.model, "--batch-size",
                 str(batch), "--steps", str(args.steps), "--no-eval", "--log-every", str(args.log_every), "--log",
                 log, "--device", args.device] + (["--lr", str(args.lr)] if args.lr else [])
        launch = [args.mpiexec, "-n", str(ranks)] if backend == "mpi" else [
            _torchrun(), "--standalone", "--nproc-per-node", str(ranks),
            "--no-python", "--"]  # `--`: torchrun's parser would take the program's --log for its own --log-dir
        cmd = train if ranks == 1 and not alone else [*launch, *train, "--distributed"]
        env = dict(os.environ, TFPLUS_ALLREDUCE_BUCKET=bucket, TFPLUS_ALLREDUCE_TRACE=str(int(args.trace)),
                   TFPLUS_OPENCL_FLUSH=flush, TFPLUS_ALLREDUCE_RUNAHEAD=ahead, TFPLUS_ALLREDUCE_SWITCH_MS=switch,
                   TFPLUS_ALLREDUCE_ALONE=str(int(alone)), TFPLUS_DISTRIBUTED_BACKEND=backend)
        env.update(_assignments(extra))
        # From a temporary folder: `-m tfplus` from a checkout's root would import its tfplus/ before the installed
        # package (which maps ops/, kernels/, graphs/ into it).
        # Its own process group, so that a run past --run-timeout ends with its ranks (mpiexec's children).
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp,
                                start_new_session=True)
        try:
            _, err = proc.communicate(timeout=args.run_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            raise RunFailed(f"{' '.join(cmd)} ran past --run-timeout {args.run_timeout} s:\n" + err[-3000:]) from None
        if proc.returncode:
            raise RunFailed(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n" + err[-3000:])
        rows = [json.loads(line) for line in Path(log).read_text().splitlines()]
        speeds = [r["images_per_sec"] for r in rows if r["kind"] == "step"][2:]
    if not speeds:
        raise SystemExit(f"--steps {args.steps} gave too few log rows (every {args.log_every} steps, after the "
                         "first 2): give more")
    return float(np.median(speeds)), [line for line in err.splitlines()
                                      if line.startswith("tfplus all-") or "RuntimeWarning" in line]


def _torchrun() -> str:
    """torchrun beside this interpreter (a venv's), else the one on PATH (a system-wide torch's)."""
    beside = Path(sys.executable).parent / "torchrun"
    return str(beside) if beside.exists() else shutil.which("torchrun") or "torchrun"


def _assignments(extra: str) -> dict:
    """--env's "NAME=VALUE,NAME=VALUE" ("-": none) as a dict."""
    pairs = [] if extra == "-" else [a.split("=", 1) for a in extra.split(",")]
    if any(len(p) != 2 for p in pairs):
        raise SystemExit(f"--env {extra!r}: give NAME=VALUE pairs joined by commas, or - for none")
    return dict(pairs)


class RunFailed(Exception):
    """A run that failed or ran too long: reported, and the next run goes on (one GPU call measures them all)."""


def lock_handoff(switch_ms: float, seconds: float = 2.0) -> str:
    """How late a thread that wakes every 0.5 ms gets Python's lock while the main thread queues OpenCL launches
    (the communication thread's lot while the host runs ahead), at a switch interval of `switch_ms`."""
    import pyopencl as cl
    sys.setswitchinterval(switch_ms / 1e3)
    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    k = cl.Program(ctx, "__kernel void add1(__global float *a) { a[get_global_id(0)] += 1; }").build().add1
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256)  # NOTE: kept: a kernel argument does not hold its buffer
    k.set_arg(0, buf)
    late, stop = [], threading.Event()

    def wake():
        while not stop.is_set():
            t = time.perf_counter()
            time.sleep(0.0005)
            late.append(time.perf_counter() - t - 0.0005)
    thread = threading.Thread(target=wake)
    thread.start()
    end, launches = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        for _ in range(50):
            cl.enqueue_nd_range_kernel(queue, k, (64,), None)
        queue.flush()
        launches += 50
        if launches % 5000 == 0:
            queue.finish()
    stop.set()
    thread.join()
    queue.finish()
    ms = np.array(late) * 1e3
    return (f"switch interval {switch_ms:g} ms: the thread late by a median {np.median(ms):.3f} ms (p90 "
            f"{np.percentile(ms, 90):.3f}); the main thread queued {launches / seconds:,.0f} launches/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="lenet")
    p.add_argument("--device", default="cpu", help="cpu or opencl (each rank opencl:K by its local rank)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--per-rank", action="store_true", help="--batch-size is each rank's, not the global batch")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--ranks", nargs="+", default=["1", "2"],
                   help="rank counts; 1d: one rank under mpiexec with --distributed, its all-reduces built "
                   "(TFPLUS_ALLREDUCE_ALONE=1: the all-reduce machinery alone)")
    p.add_argument("--lr", type=float, help="the peak learning rate (synthetic data at a global batch of 256 "
                   "diverged at the recipe's: each log row is a median, so give one that trains)")
    # The mpich wheel installs mpiexec beside the interpreter. Give its real path, not a link to it: Hydra's
    # mpiexec finds its proxy beside itself, and a link elsewhere left the ranks waiting (an H200 pair).
    beside = Path(sys.executable).parent / "mpiexec"
    p.add_argument("--mpiexec", default=str(beside) if beside.exists() else shutil.which("mpiexec") or "mpiexec")
    p.add_argument("--buckets", nargs="+", default=["1MB", "0"],
                   help="TFPLUS_ALLREDUCE_BUCKET values for N > 1 ranks (default 1MB 0: overlap on, off; a schedule "
                   "from the input side: 4KB,64KB,1MB)")
    p.add_argument("--trace", action="store_true", help="print each rank's TFPLUS_ALLREDUCE_TRACE report")
    p.add_argument("--flush", nargs="+", default=["4"],
                   help="TFPLUS_OPENCL_FLUSH values, each a round of the runs (launches a replay queues between two "
                   "flushes of the queue; 0: no flush, the path before stop 43)")
    p.add_argument("--run-timeout", type=float, default=600, help="seconds a run may take before it is ended "
                   "(with its ranks) and reported as failed; the next run goes on")
    p.add_argument("--switch-ms", nargs="+", default=["0.2"],
                   help="TFPLUS_ALLREDUCE_SWITCH_MS values for N > 1 ranks (Python's switch interval while the "
                   "communication thread runs; 5: Python's own)")
    p.add_argument("--runahead", nargs="+", default=["1"],
                   help="TFPLUS_ALLREDUCE_RUNAHEAD values for N > 1 ranks (1: the host runs ahead of the sums; 0: it "
                   "waits for each, the path before stop 48)")
    p.add_argument("--backends", nargs="+", default=["mpi"], choices=["mpi", "gloo"],
                   help="the backends of N > 1 ranks, each a run in turn (mpi: mpiexec; gloo: torchrun, the gloo "
                   "extra); repeat them to alternate, as the load of a busy machine changes")
    p.add_argument("--env", nargs="+", default=["-"], metavar="NAME=VALUE,...",
                   help="further environments for distributed runs, each a round (MPICH's MPIR_CVAR_*, say; -: none)")
    p.add_argument("--lock-handoff", nargs="+", type=float, metavar="MS",
                   help="only measure how late a waking thread gets Python's lock while this one queues OpenCL "
                   "launches, at each switch interval given (ms; one process each)")
    args = p.parse_args()
    if args.lock_handoff:
        for ms in args.lock_handoff:  # a process each: the switch interval and the driver's state are per process
            subprocess.run([sys.executable, __file__, "--lock-handoff-one", str(ms)], check=True)
        return
    per = "per rank" if args.per_rank else "global"
    print(f"{args.model}, batch {args.batch_size} {per}, {args.device}, {os.cpu_count()} cores", flush=True)
    for flush in args.flush:
        print(f"TFPLUS_OPENCL_FLUSH={flush}", flush=True)
        one = None
        for ranks in args.ranks:
            alone = ranks == "1d"
            n = 1 if alone else int(ranks)
            plain = n == 1 and not alone
            runs = [("1MB", "1", "5", "-", "mpi")] if plain else [
                (b, a, w, e, k) for b in args.buckets for a in args.runahead for w in args.switch_ms for e in args.env
                for k in args.backends]
            for bucket, ahead, switch, extra, backend in runs:
                what = WHAT.get(bucket, "growing from the input side" if "," in bucket else "overlapped")
                label = "" if plain else (f"  {backend}, {'(mpiexec -n 1) ' * alone}TFPLUS_ALLREDUCE_BUCKET={bucket}: "
                                          f"{what}, RUNAHEAD={ahead}, SWITCH_MS={switch}, env {extra}")
                try:
                    speed, trace = images_per_sec(n, bucket, flush, ahead, switch, extra, args, alone, backend)
                except RunFailed as e:
                    print(f"{n} rank{'s' * (n > 1)}: FAILED{label}\n{e}", flush=True)
                    continue
                one = speed if plain else one
                vs = "" if one is None or plain else f"  {speed / one:.2f}x one rank"
                print(f"{n} rank{'s' * (n > 1)}: {speed:8.0f} images/s{vs}{label}", flush=True)
                for line in trace:
                    print(f"    {line}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--lock-handoff-one"]:
        print(lock_handoff(float(sys.argv[2])), flush=True)
    else:
        main()
