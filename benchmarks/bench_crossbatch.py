"""Batch norm under micro-batching (planner.crossbatch): a step of k micro-batches with statistics passes against
the unsplit step, predicted (the planner's cost model) and measured (median wall time of planned steps on the
cpu), and each plan's peak. Small models, so that the k * (2L + 1) runs of a split step finish in seconds.

    python benchmarks/bench_crossbatch.py                      # mobilenet 8,16,16 at 16x16 and seqnet 6,8,8
    python benchmarks/bench_crossbatch.py --batch 32 --ks 2,4 --steps 5
    python benchmarks/bench_crossbatch.py --full --models mobilenet   # its 27 batch norms, at 16x16
    python benchmarks/bench_crossbatch.py --no-keep            # every pass from the fed batch (crossbatch.KEEP)
    python benchmarks/bench_crossbatch.py --no-counts          # every run in k micro-batches (crossbatch.COUNTS)
    python benchmarks/bench_crossbatch.py --ks 4 --size 8 --budget 480kB --reserves 1
                                               # kept rows beside each run's own bytes only (plan.KEPT_RESERVES)
    python benchmarks/bench_crossbatch.py --device opencl --full --models mobilenet --size 32 --batch 128 --ks 8 \
        --budget 128MB                                         # the runs' counts as the 128 MB plan's
    python benchmarks/bench_crossbatch.py --device opencl --full --models mobilenet --size 8 --ks 4,8
                                                               # launches per step (a replayed tape's included)

`launches` counts the kernel launches of one step on opencl, launcher by launcher or from a replayed tape,
`commands` a replayed tape's launches and device copies (`tapes`: the recorded tapes the step replayed; a
micro-batched step that replays as one tape plays one).

`counts` sums up the micro-batch count of each statistics pass and of the micro-batch run (planner.crossbatch: a
count per run), e.g. 1x50,4x5: 50 runs on the whole batch, 5 in 4 micro-batches.

`--op-calls 128MB,64MB` plans, without running anything, the step `tfplus plan --model mobilenet` plans (the
trainer's, batch 128, 32x32, the --device's facts, opencl's defaults where it has none) for each budget, as the search
chooses, and prints its predicted cost and the op calls a step runs per op type (each run's ops times its count):
where a GPU's time goes, counted here. With `--gpu-graph`, of the step the GPU timings run instead (.gpu's
steady-state script: momentum without Nesterov, no weight decay, train_op and the loss fetched), whose weight
gradients go straight into the momentum slots under micro-batching (planner.batch.slot_folds; the trainer's default,
Nesterov, keeps accumulators). With `--updates`, also per variable the run that merges its gradient and the later
runs that read its weights: where none does, its update runs right after that run and its accumulator ends there
(planner.batch.update_groups, issue 34's lever (b); `--no-early` turns it off: the plans before it). `--optimizer`
plans the trainer's step with another optimizer (adam, sgd), as `tfplus plan --optimizer` does.

`kept` counts the rows statistics passes keep whole for later runs (planner.crossbatch.kept), `folded` the
gradients and fetches the passes compute, which the micro-batch run then does not.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import statistics
import time

import numpy as np

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install
from tfplus.graphs import get_model, training_graph
from tfplus.planner import batch, crossbatch
from tfplus.runtime.facts import device_facts
from tfplus.units import format_size

MODELS = {"mobilenet": ({"conv_widths": (8, 16, 16)}, 16), "seqnet": ({"conv_widths": (6, 8, 8)}, 8)}


def _step_seconds(tg, feeds, force, steps: int, device: str = "cpu", budget: str | None = None
                  ) -> tuple[float, planner.MemoryPlan, tuple]:
    """Median seconds of `steps` planned steps, the plan (for `budget`: the rows kept and the runs' counts fill
    its room), and (launches, commands, tapes played) of the last (opencl)."""
    fetches = [tg.train_op, tg.loss]
    with tf.Session(graph=tg.graph, memory_budget="1GB", device=device) as sess:
        sess.run(tg.init_op)
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                         budget, graph=tg.graph, force=force)
        install(sess, fetches, p)
        for _ in range(3):  # the first run binds the plan; a tape replays once two runs recorded the same
            sess.run(fetches, feeds)
        times = []
        with _launches(sess.runtime) as counted:
            for _ in range(steps):
                counted[:] = [0, 0, 0]
                start = time.perf_counter()
                sess.run(fetches, feeds)
                times.append(time.perf_counter() - start)
    return statistics.median(times), p, tuple(counted)


@contextlib.contextmanager
def _launches(rt):
    """[launches, a replayed tape's commands, tapes played] since reset, on a runtime that records launches
    (else stays zeros)."""
    counted = [0, 0, 0]
    if not rt.records_launches:
        yield counted
        return
    from tfplus.runtime.opencl.tape import Tape
    run, play = rt.run, Tape.play

    def launched(*args):
        counted[0] += 1
        return run(*args)

    def played(tape, feeds):
        counted[0] += tape.launches
        counted[1] += len(tape.items)
        counted[2] += 1
        return play(tape, feeds)
    rt.run, Tape.play = launched, played
    try:
        yield counted
    finally:
        del rt.run
        Tape.play = play


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ks", default="2,4", help="micro-batch counts to time")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per plan (median)")
    ap.add_argument("--models", default=",".join(MODELS), help="of " + ", ".join(MODELS))
    ap.add_argument("--full", action="store_true", help="the models' own widths (all their batch norms)")
    ap.add_argument("--no-keep", action="store_true", help="no rows kept between passes (crossbatch.KEEP)")
    ap.add_argument("--budget", help="plan the forced k for this memory budget (e.g. 128MB): kept rows and the "
                    "runs' counts fill the room it leaves; without, the room of the largest run of k")
    ap.add_argument("--no-counts", action="store_true", help="every run in k micro-batches (crossbatch.COUNTS)")
    ap.add_argument("--reserves", help="the reserves of a run's own bytes the kept rows of --budget are chosen "
                    "under, the cheapest predicted kept (planner.plan.KEPT_RESERVES; default 1,2,4)")
    ap.add_argument("--device", default="cpu", help="cpu or opencl")
    ap.add_argument("--size", type=int, default=None, help="image side (default: the model's above)")
    ap.add_argument("--op-calls", metavar="BUDGETS", help="only count the op calls per type of the trainer's MobileNet "
                    "step planned for each of these budgets (e.g. 128MB,64MB), batch 128")
    ap.add_argument("--gpu-graph", action="store_true", help="with --op-calls: the step the GPU timings run "
                    "(momentum without Nesterov, no weight decay, a constant rate: fetches train_op and loss) "
                    "instead of the trainer's default (Nesterov, weight decay, running sums)")
    ap.add_argument("--gpu-model", default="mobilenet", help="with --gpu-graph: the model (mobilenet or mentee)")
    ap.add_argument("--updates", action="store_true", help="with --op-calls: per variable, the run that merges its "
                    "gradient and the later runs that read its weights")
    ap.add_argument("--optimizer", help="with --op-calls: the trainer's step with this optimizer (momentum, adam, sgd)")
    ap.add_argument("--no-early", action="store_true", help="every update in the update run (batch.EARLY_UPDATES)")
    args = ap.parse_args(argv)
    batch.EARLY_UPDATES = not args.no_early
    crossbatch.KEEP = not args.no_keep
    crossbatch.COUNTS = not args.no_counts
    if args.reserves:
        importlib.import_module("tfplus.planner.plan").KEPT_RESERVES = tuple(int(r) for r in args.reserves.split(","))
    if args.op_calls:
        for budget in args.op_calls.split(","):
            _op_calls(budget, args.device, args.gpu_graph and args.gpu_model, args.updates, args.optimizer)
        return
    print(f"{'model':>10} {'k':>3} {'passes':>6} {'kept':>5} {'folded':>6} {'predicted':>10} {'measured':>10} "
          f"{'ms/step':>9} {'peak':>10} {'launches':>9} {'commands':>9} {'tapes':>6}  counts")
    for name in args.models.split(","):
        kwargs, size = MODELS[name]
        size = args.size or size
        tg = training_graph(get_model(name).build, total_steps=10, seed=0, image_shape=(3, size, size),
                            model_kwargs={} if args.full else kwargs)
        rng = np.random.default_rng(0)
        feeds = {tg.images: rng.standard_normal((args.batch, 3, size, size)).astype(np.float32),
                 tg.labels: rng.integers(0, 10, args.batch).astype(np.int32)}
        plain, p, n = _step_seconds(tg, feeds, (1, 1), args.steps, args.device)
        print(f"{name:>10} {1:>3} {0:>6} {'':>5} {'':>6} {'':>10} {'':>10} {plain * 1e3:9.1f} "
              f"{format_size(p.peak_bytes):>10} {n[0]:>9} {n[1]:>9} {n[2]:>6}", flush=True)
        for k in (int(v) for v in args.ks.split(",")):
            seconds, p, n = _step_seconds(tg, feeds, (k, 1), args.steps, args.device, args.budget)
            folded = sum(f in p.accumulators and f not in level  # gradients and fetches a pass merges
                         for ph, level in zip(p.phases, p.statistics) for f in ph.fetches)
            print(f"{name:>10} {k:>3} {len(p.statistics):>6} {len(p.kept):>5} {folded:>6} "
                  f"{1 + p.predicted_overhead:9.1f}x {seconds / plain:9.1f}x {seconds * 1e3:9.1f} "
                  f"{format_size(p.peak_bytes):>10} {n[0]:>9} {n[1]:>9} {n[2]:>6}  {_counts(p)}", flush=True)


def _op_calls(budget: str, device: str, gpu_model: str | None = None, updates: bool = False,
              optimizer: str | None = None) -> None:
    """The op calls per type of the MobileNet training step `tfplus plan` plans for `budget` (batch 128); with
    `gpu_model`, of that model's step as the GPU timings run it (_gpu_step); with `updates`, _updates too."""
    from tfplus.plan_cli import _TrainStep
    from tfplus.planner.liveness import executes
    from tfplus.units import parse_size
    start = time.process_time()
    if gpu_model:
        graph, fetches, shapes = _gpu_step(gpu_model)
        start = time.process_time()
        p = planner.plan(fetches, shapes, device_facts(device), parse_size(budget), graph=graph,
                         raise_if_infeasible=False)
    else:
        step = _TrainStep(argparse.Namespace(model="mobilenet", conv_widths=None, fc_widths=None, optimizer=optimizer,
                                             data_format=None, trainable=None, fine_tune_last=None, input=None,
                                             batch_size=128, device=device))
        start = time.process_time()
        p = step.plan(128, parse_size(budget))
    seconds = time.process_time() - start
    counts = p.run_microbatches or [p.microbatches]
    calls: dict[str, int] = {}
    for i, ph in enumerate(p.phases):
        fed = {t for t in ph.specs if t in ph.feeds or t.op not in set(ph.order)}
        for op in ph.order:
            if executes(op, fed):
                calls[op.type] = calls.get(op.type, 0) + (counts[i] if i < len(counts) else 1)
    print(f"{budget}: peak {format_size(p.peak_bytes)}, fits {p.fits}, predicted {p.predicted_overhead:+.1%}, "
          f"{len(p.slot_folds)} gradients into momentum slots, "
          f"{sum(len(g) for s in p.shares for g in s.groups.values())} variables updated early in {len(p.shares)} "
          f"shares, "
          f"{p.microbatches} micro-batches ({_counts(p)}), planned in {seconds:.1f} s CPU; op calls a step "
          f"{sum(calls.values())}:")
    for name in sorted(calls, key=lambda n: -calls[n]):
        if "Conv" in name or "Norm" in name or "Depthwise" in name:
            print(f"    {name:40s} {calls[name]:6d}")
    if updates:
        _updates(p)


def _updates(p: planner.MemoryPlan) -> None:
    """Per variable of the update run's Apply ops (a _FusedApply's group): the run that merges its gradient (the
    statistics pass or micro-batch run whose fetches hold its accumulator), the later runs that read its weights and
    whether the plan updates it right after that run (MemoryPlan.shares). None reads them after: its update may run
    right after that run, freeing the accumulator there; one does: it must stay in the update run (the weights would
    change under that run)."""
    from tfplus.ops.fused_ops import apply_groups, split_decay
    a = len(p.statistics)
    counts = p.run_microbatches or [p.microbatches] * (a + 1)
    writer = {t: i for i, ph in enumerate(p.phases[:a + 1]) for t in ph.fetches
              if isinstance(t, tf.Tensor) and t in p.accumulators and t not in (p.statistics + [[]])[i]}
    reads = [{t.op for op in ph.order for t in op.inputs if t.op.type == "VariableV2"} for ph in p.phases]
    early = late = 0
    shared = {(op, j) for s in p.shares for op, groups in s.groups.items() for j in groups}
    for op in p.phases[a + 1].order if len(p.phases) > a + 1 else ():
        if op.type == "_FusedApply":
            groups = apply_groups(op.attrs["op"], split_decay(list(op.inputs), op.attrs)[0])
        elif op.type.startswith("Apply"):
            groups = [list(op.inputs)]
        else:
            continue
        for j, g in enumerate(groups):
            grads = [t for t in g if t in writer]
            if not grads:
                continue
            w = max(writer[t] for t in grads)
            later = [i for i in range(w + 1, a + 1) if g[0].op in reads[i]]
            nbytes = sum(p.accumulators[t].size for t in grads)
            early, late = (early + nbytes, late) if not later else (early, late + nbytes)
            print(f"    {g[0].op.name:32s} gradient merged by run {w} ({p.phases[w].name}, {counts[w]} "
                  f"micro-batches), {format_size(nbytes)}; its weights read after by runs "
                  f"{','.join(map(str, later)) or 'none'}{'; updated after it' if (op, j) in shared else ''}")
    print(f"  accumulators whose update may follow their run: {format_size(early)}; read later: {format_size(late)}")


def _gpu_step(model: str) -> tuple:
    """(graph, fetches, feed shapes) of `model`'s step as the GPU timings run it (.gpu's steady-state script: momentum
    without Nesterov, no weight decay, a constant rate; train_op and the loss fetched, batch 128), rewritten as a
    session rewrites it."""
    from tfplus.engine.rewrite import enabled, optimize
    tg = training_graph(get_model(model).build, total_steps=10**6, seed=0, optimizer="momentum",
                        nesterov=False, weight_decay=0.0, schedule="const", learning_rate=0.01)
    fetches, fed = [tg.train_op, tg.loss], [tg.images, tg.labels]
    graph = tg.graph
    rw = optimize(graph, fetches, set(fed)) if enabled() else None
    if rw is not None:
        graph, fetches, fed = rw.graph, [rw.element[f] for f in fetches], [rw.element[t] for t in fed]
    return graph, fetches, {fed[0]: (128, 3, 32, 32), fed[1]: (128,)}


def _counts(p: planner.MemoryPlan) -> str:
    """The runs' micro-batch counts as count x runs, e.g. 1x50,4x5."""
    counts = p.run_microbatches or [p.microbatches]
    return ",".join(f"{n}x{counts.count(n)}" for n in sorted(set(counts)))


if __name__ == "__main__":
    main()
