"""Each candidate plan that fits a memory budget, timed on this device against the session's own step: the ground
truth for the planner's cost model (tfplus.planner.cost.CostModel). Not a test.

The step is the Mentee training step of bench_gpu_step.py (momentum, batch 128), as the session runs it (the
graph rewrite on); a candidate is (micro-batches, conv chunks, compact, scratch divisor, recomputation level
[, streamed prefix]). Sessions run one step each in turns.

    python benchmarks/bench_plan_candidates.py --device opencl --budgets 32MB,24MB --limit 8
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl")
    ap.add_argument("--budgets", default="32MB,24MB")
    ap.add_argument("--limit", type=int, default=8, help="candidates per budget, cheapest predicted first")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    import numpy as np

    import tfplus as tf
    from tfplus.graphs.mentee import training_graph
    from tfplus.runtime.facts import device_facts
    plan = importlib.import_module("tfplus.planner.plan")  # the module (tfplus.planner.plan is also the function)
    tg = training_graph(total_steps=10 ** 6, seed=0, optimizer="momentum", nesterov=False, weight_decay=0.0,
                        schedule="const", learning_rate=0.01)
    rng = np.random.default_rng(0)
    feed = {tg.images: rng.standard_normal((128, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, 128).astype(np.int32)}
    fetches = [tg.train_op, tg.loss]

    def session(budget=None):
        s = tf.Session(graph=tg.graph, device=args.device, memory_budget=budget)
        s.run(tg.init_op)
        compiled = s.step(fetches, feed)  # the rewritten step the session runs
        step = plan._Step(compiled.fetches, compiled.feed_shapes, device_facts(s.runtime), compiled.graph,
                          None)
        return s, step, compiled

    base, step, *_ = session()
    for budget_name in args.budgets.split(","):
        budget = plan.parse_size(budget_name, "budget")
        fit = []
        for kc in step.candidates(plan.TRANSFORMATIONS):
            try:
                if step.least_bytes(*kc) > budget:
                    continue
                p = step.build(*kc, place=False)
                if p.lower_bound_bytes > budget:
                    continue
                plan.place(p)
            except plan.PlanError:
                continue
            p.budget_bytes = budget
            if p.fits:
                fit.append(kc)
            if len(fit) >= args.limit:
                break
        runs = []
        for kc in fit:  # each session plans its own rewritten graph
            s, st, compiled = session(budget_name)
            p = st.build(*kc)
            compiled.use_plan(p)
            for _ in range(8):
                s.run(fetches, feed)
            runs.append((str(kc), p, s, []))
        plain = []
        for _ in range(args.rounds):
            for s, times in [(base, plain)] + [(r[2], r[3]) for r in runs]:
                t = time.perf_counter()
                s.run(fetches, feed)
                times.append(time.perf_counter() - t)
        b0 = statistics.median(plain) * 1e3
        print(f"{budget_name}: {len(fit)} candidates fit; the session's own step {b0:.2f} ms")
        for name, p, s, times in runs:
            ms = statistics.median(times) * 1e3
            print(f"  {name:48s} {ms:6.2f} ms {ms / b0 - 1:+7.1%}  predicted {p.predicted_overhead:+7.1%}  "
                  f"peak {p.peak_bytes / 1e6:5.1f} MB")
            s.close()
    base.close()


if __name__ == "__main__":
    main()
