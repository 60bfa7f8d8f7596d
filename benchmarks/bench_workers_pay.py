"""When the cpu's step workers pay: per model, a training step in one process against the same step on the forked
workers (tfplus.engine.workers), beside the inputs of the rule that picks between them (workers.Payoff).

    python benchmarks/bench_workers_pay.py [--models lenet,mentee,...] [--rounds 3] [--steps 3] [--threads 2]

Models: lenet, mentee (b128), bigru-tiny (b32, 16 steps of 16 features, 32 units), bigru-mid (b128, 32 steps of 64
features, 128 units), seqnet (b64, batch norms: statistics passes), mobilenet (b32, 27 batch norms: 54 passes),
mapfn (b64, a per-row tf.map_fn augmentation before a small CNN); `mobilenet:64` takes another batch (the
CIFAR models). Both sessions get `--threads` intra-op threads;
one runs every step in this process (workers=1), the other on 2 workers forced past the rule (workers.FORCE). They
alternate in rounds of `--steps` steps, so that the other processes' load falls on both alike; figures are medians.
It also times the parent's side of the workers' commands (a run of the slices or a statistics pass: a rendezvous
with every worker) against the slower worker's CPU time in them (the difference is the wait for it: the load's and
the machinery's), the gradients' average alone (an idle rendezvous and one pass over the gradients), and the CPU
time a step of both sessions (this process's threads, plus the workers'): what the split adds, whatever the load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def build(name: str, batch: int | None = None):
    """(graph, init op, fetches, feeds) of model `name` (lenet, mentee, seqnet, mobilenet: at `batch` if given)."""
    import tfplus as tf
    from tfplus.graphs import training_graph
    rng = np.random.default_rng(0)
    if name.startswith("bigru"):
        from bench_rows_index import build as rnn
        g, fetches, feeds = rnn("bigru", 32, 16, 16, 32) if name == "bigru-tiny" else rnn("bigru", 128, 32, 64, 128)
        with g.as_default():
            init = tf.global_variables_initializer()
        return g, init, fetches, feeds
    if name == "mapfn":
        from bench_map_rows import augment_cnn
        g = tf.Graph()
        with g.as_default():
            tf.set_random_seed(1)
            x = tf.placeholder(tf.float32, [None, 32, 32, 3], name="x")
            y = tf.placeholder(tf.int32, [None], name="y")
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=augment_cnn(tf, x)))
            train = tf.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
            init = tf.global_variables_initializer()
        return g, init, [train, loss], {x: rng.standard_normal((64, 32, 32, 3)).astype(np.float32),
                                        y: rng.integers(0, 10, 64).astype(np.int32)}
    from tfplus.graphs.lenet import lenet
    from tfplus.graphs.mentee import mentee
    from tfplus.graphs.mobilenet import mobilenet
    from tfplus.graphs.seqnet import seqnet
    model, default = {"lenet": (lenet, 128), "mentee": (mentee, 128), "seqnet": (seqnet, 64),
                      "mobilenet": (mobilenet, 32)}[name]
    batch = batch or default
    tg = training_graph(model, total_steps=1000, seed=0, learning_rate=0.001)  # (random data: no divergence)
    return tg.graph, tg.init_op, [tg.train_op, tg.loss], {
        tg.images: rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
        tg.labels: rng.integers(0, 10, batch).astype(np.int32)}


def measure(name: str, rounds: int, steps: int, n_threads: int) -> dict:
    import tfplus as tf
    from tfplus.engine import workers
    model, _, batch = name.partition(":")
    g, init, fetches, feeds = build(model, int(batch) if batch else None)
    config = tf.ConfigProto(intra_op_parallelism_threads=n_threads)
    sessions = {n: tf.Session(graph=g, config=config, workers=n) for n in (1, 2)}
    workers.FORCE = True
    try:
        for sess in sessions.values():
            sess.run(init)
            sess.run(fetches, feeds)
    finally:
        workers.FORCE = False
    w = sessions[2].workers
    st = next((s for s in w.steps.values() if not isinstance(s, str)), None)
    if st is None or not w.groups:
        return {"name": name, "why": w.summary()}
    group = next(iter(w.groups.values()))
    call, waited = workers._Group.call, []

    def timed(self, command):
        start = time.perf_counter()
        try:
            return call(self, command)
        finally:
            waited.append(time.perf_counter() - start)
    times: dict[int, list[float]] = {1: [], 2: []}
    cpus: dict[int, list[float]] = {1: [], 2: []}  # CPU time a step: this process's threads, and the workers
    rendezvous = []  # per workers' step: (parent's time in the commands, the slower worker's CPU time in the step)
    hz = os.sysconf("SC_CLK_TCK")
    workers._Group.call = timed
    try:
        for _ in range(rounds):
            for n, sess in sessions.items():
                for _ in range(steps):
                    waited.clear()
                    before = [workers._stat(pid)[1] for pid in group.pids]
                    start, own = time.perf_counter(), time.process_time()
                    sess.run(fetches, feeds)
                    times[n].append(time.perf_counter() - start)
                    own = time.process_time() - own
                    if n == 2:
                        used = [(workers._stat(pid)[1] - b) / hz for pid, b in zip(group.pids, before)]
                        rendezvous.append((sum(waited), max(used), len(waited)))
                        own += sum(used)
                    cpus[n].append(own)
    finally:
        workers._Group.call = call
    averages = []  # the gradients' average alone: a rendezvous with the workers and a pass over the gradients
    for _ in range(10 * rounds):
        start = time.perf_counter()
        group.call(b"m")
        averages.append(time.perf_counter() - start)
    for sess in sessions.values():
        sess.close()
    one, two = (statistics.median(times[n]) for n in (1, 2))
    commands = rendezvous[0][2]
    per_run = statistics.median((t - c) / k for t, c, k in rendezvous)
    return {"name": name, "one": one, "two": two, "commands": commands, "per_run": per_run,
            "cpu": [statistics.median(cpus[n]) for n in (1, 2)],
            "average": statistics.median(averages), "pay": st.payoff}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="lenet,mentee,bigru-tiny,bigru-mid,seqnet,mobilenet,mapfn")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3, help="steps per session per round")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    print(f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; {args.threads} intra-op threads; median "
          f"step of {args.rounds} rounds x {args.steps} steps")
    print("| model | 1 process | 2 workers | ratio | commands a step (runs, average) | wait beyond the workers' "
          "CPU, per command | the gradients' average alone | CPU a step, 1 process / workers | the rule: saves / "
          "costs (repeated calls) | the rule's choice |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in args.models.split(","):
        r = measure(name, args.rounds, args.steps, args.threads)
        if "why" in r:
            print(f"| {name} | | | | | | | | | {r['why']} |", flush=True)
            continue
        pay = r["pay"]
        rule = "(control flow: unknown)" if pay is None else \
            f"{pay.saved * 1e3:.1f} / {pay.cost * 1e3:.1f} ms ({(pay.n - 1) * pay.calls * 1e3:.1f})"
        choice = "workers" if pay is None or pay.pays else "parent"
        print(f"| {name} | {r['one'] * 1e3:.1f} ms | {r['two'] * 1e3:.1f} ms | {r['one'] / r['two']:.2f}x | "
              f"{r['commands']} | {r['per_run'] * 1e3:.1f} ms | {r['average'] * 1e3:.2f} ms | "
              f"{r['cpu'][0] * 1e3:.0f} / {r['cpu'][1] * 1e3:.0f} ms | {rule} | {choice} |",
              flush=True)


if __name__ == "__main__":
    main()
