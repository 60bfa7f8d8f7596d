"""What DistributedOptimizer's buckets add to a step with nothing to reduce: one process (MPI's singleton, a world of
one), Mentee's training step plain, and with the buckets' all-reduces built anyway (TFPLUS_ALLREDUCE_ALONE=1), the
host waiting for each sum and running ahead (TFPLUS_ALLREDUCE_RUNAHEAD=0 and 1), the exchanges moved on by the main
thread (TFPLUS_ALLREDUCE_POLL=1, the default) and by the communication thread (0); sessions in turns on one device.
Not a test.

    python benchmarks/bench_allreduce_alone.py --device opencl --small --batch 8     # PoCL: the host's side
    python benchmarks/bench_allreduce_alone.py --device opencl --batch 128 --steps 200   # a GPU: Mentee, as trained

Per variant: the host's ms a step (session.run of the train op, which reads nothing back; the trainer's step), the
step's ms (--steps steps in a row, then the device's finish, over the steps: what images/s follows), what the
replayed step enqueues (kernel launches, buffer copies, flushes of the queue, host work items: the tape), and per
step the host's waits for a sum (count, ms blocked) and the communication thread's jobs. A world of one trains plain
(no all-reduce is built, tfplus.distributed); the bucket variants are what each of N ranks pays besides MPI.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import time

import numpy as np


def _tape_counts(sess) -> dict:
    """What the replayed train step enqueues: {"launches", "copies", "flushes", "host work"}."""
    from tfplus.runtime.opencl.tape import cl
    counts = collections.Counter()
    for step in sess.steps:
        for prog in step.programs:
            for rec in prog.tapes.values():
                if rec.tape is None:
                    continue
                for fn, _ in rec.tape.items:
                    counts["launches" if fn is cl._cl.enqueue_nd_range_kernel else "copies"
                           if fn is cl._cl._enqueue_copy_buffer else "flushes" if getattr(fn, "__name__", "") == "flush"
                           else "host work"] += 1
    return dict(counts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="opencl")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--small", action="store_true", help="bench_step_launches.py's small Mentee (PoCL)")
    p.add_argument("--steps", type=int, default=30, help="steps of a variant per turn")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--buckets", default="4KB,64KB,1MB", help="TFPLUS_ALLREDUCE_BUCKET of the bucket variants")
    args = p.parse_args()
    os.environ["TFPLUS_ALLREDUCE_BUCKET"] = args.buckets
    import tfplus as tf
    import tfplus.distributed as dist
    from tfplus.graphs import get_model, training_graph
    from tfplus.kernels.numpy.collective import reducer
    dist.init()
    if dist.size() != 1:
        raise SystemExit("bench_allreduce_alone.py runs as one process (no mpiexec, or mpiexec -n 1)")
    model = get_model("mentee")
    kwargs = {"conv_widths": (8, 8, 16, 16, 16), "fc_widths": (32, 16)} if args.small else {}
    blocked = [0, 0.0]  # the host's waits for a sum, and their seconds
    finish = reducer.finish

    def timed_finish(job):
        t = time.perf_counter()
        try:
            return finish(job)
        finally:
            blocked[0] += 1
            blocked[1] += time.perf_counter() - t
    reducer.finish = timed_finish
    # TFPLUS_ALLREDUCE_POLL: 1, the main thread moves the exchanges on; 0, the communication thread (read when a
    # step's kernels first run: the warm-up round below sets it per variant, as RUNAHEAD)
    variants = {"plain": ("0", "0", "1"), "buckets, waiting": ("1", "0", "1"), "buckets, run-ahead": ("1", "1", "1"),
                "waiting, thread": ("1", "0", "0"), "run-ahead, thread": ("1", "1", "0")}
    runs = {}
    rng = np.random.default_rng(0)
    for name, (alone, ahead, poll) in variants.items():
        os.environ["TFPLUS_ALLREDUCE_ALONE"] = alone  # read when the graph is built
        tg = training_graph(model.build, total_steps=10_000, seed=0, model_kwargs=kwargs,
                            wrap_optimizer=dist.DistributedOptimizer)
        feed = {tg.images: rng.standard_normal((args.batch, *tg.images.shape.as_list()[1:])).astype(np.float32),
                tg.labels: rng.integers(0, 10, args.batch).astype(np.int32)}
        sess = tf.Session(graph=tg.graph, device=args.device)
        sess.run(tg.init_op)
        runs[name] = (sess, tg.train_op, feed, (ahead, poll), {"host": [], "step": [], "waits": [], "jobs": [],
                                                               "wakes": []})
    for _ in range(args.rounds + 1):  # the first round warms up (plans, builds, records the tapes)
        for sess, train, feed, (ahead, poll), got in runs.values():
            os.environ["TFPLUS_ALLREDUCE_RUNAHEAD"] = ahead  # read by each step's kernels
            os.environ["TFPLUS_ALLREDUCE_POLL"] = poll
            sess.runtime.synchronize()
            blocked[:], jobs, hosts, wakes = [0, 0.0], reducer.count, [], reducer.wakes
            t0 = time.perf_counter()
            for _ in range(args.steps):
                t = time.perf_counter()
                sess.run(train, feed)
                hosts.append(time.perf_counter() - t)
            sess.runtime.synchronize()
            got["step"].append((time.perf_counter() - t0) / args.steps)
            got["host"].append(statistics.median(hosts))
            got["waits"].append((blocked[0] / args.steps, blocked[1] / args.steps))
            got["jobs"].append((reducer.count - jobs) / args.steps)
            got["wakes"].append((reducer.wakes - wakes) / args.steps)
    print(f"mentee{' (small)' if args.small else ''}, batch {args.batch}, {args.device}, {args.steps} steps x "
          f"{args.rounds} rounds in turns (medians of the rounds after the first), buckets {args.buckets}")
    base = None
    for name, (sess, _, _, _, got) in runs.items():
        step = statistics.median(got["step"][1:]) * 1e3
        base = base or step
        waits = got["waits"][1:]
        host = statistics.median(got["host"][1:]) * 1e3
        waited, blocked_ms = (statistics.median(w[i] for w in waits) for i in (0, 1))
        print(f"  {name:20s} step {step:7.3f} ms ({step / base:4.2f}x plain), host {host:7.3f} ms a step; host waits "
              f"{waited:.0f} a step, blocked {blocked_ms * 1e3:.3f} ms; jobs {statistics.median(got['jobs'][1:]):.0f}, "
              f"the thread's hand-offs {statistics.median(got['wakes'][1:]):.1f}; "
              f"tape {_tape_counts(sess)}")
        sess.close()


if __name__ == "__main__":
    main()
