"""The smallest memory budget of a training session: what `tfplus plan` reports and `tfplus train` checks
before its first run, so both name the same figure.

    from tfplus.step_budget import check_budget, training_runs
    check_budget(tg.graph, training_runs(tg, step_op, batch=128), "cpu", budget=64 * 10**6)   # or BudgetError
"""
from __future__ import annotations

import functools

from tfplus.planner import TRANSFORMATIONS, fits, floor_plan, smallest_plan
from tfplus.runtime.facts import device_facts


def smallest_budget(graph, runs: list, device, transformations=TRANSFORMATIONS) -> int:
    """The smallest memory budget in which a session on `device` runs every one of `runs` ([(fetches,
    {fed tensor: shape})]), each planned as the session plans it (rewritten by tfplus.engine.rewrite): the largest of
    their floors (planner.floor_plan: the smallest budget the planner fits; each run is planned to fit the budget
    on its own). `tfplus plan` reports it and `tfplus train` checks it before its first run, so both name the same
    figure, and a budget of exactly that figure plans every run."""
    return floor(graph, runs, device, transformations).budget_bytes


def floor(graph, runs: list, device, transformations=TRANSFORMATIONS):
    """The floor plan (planner.floor_plan) of the run in `runs` whose floor is the largest: its `budget_bytes` is
    smallest_budget, and it is the plan made for that budget. A run with maps of the batch's rows has the smaller
    floor of its ways (planned_runs)."""
    def budget(p):
        return p.budget_bytes
    return max((min((floor_plan(planned, fed, device_facts(device), graph=g, transformations=transformations)
                     for g, planned, fed in ways), key=budget) for ways in _planned(graph, runs)), key=budget)


def smallest_peak(graph, runs: list, device, transformations=TRANSFORMATIONS) -> int:
    """The largest of the runs' smallest plans' peaks (planner.smallest_plan, no budget to fill): every budget
    from it up fits, and a step whose plans depend on the budget may fit less (smallest_budget). Cheaper than
    the floor: one plan a run."""
    return max(min(smallest_plan(planned, fed, device_facts(device), graph=g,
                                 transformations=transformations).peak_bytes for g, planned, fed in ways)
               for ways in _planned(graph, runs))


def runs_fit(graph, runs: list, device, budget: int, transformations=TRANSFORMATIONS) -> bool:
    """Whether the planner fits every one of `runs` in `budget` (planner.fits)."""
    facts = device_facts(device)
    return all(any(fits(planned, fed, facts, budget, graph=g, transformations=transformations)
                   for g, planned, fed in ways) for ways in _planned(graph, runs))


def check_budget(graph, runs: list, device, budget: int) -> None:
    """Raises planner.BudgetError naming smallest_budget(graph, runs, device) when a run does not fit `budget`."""
    from tfplus.planner import BudgetError
    from tfplus.planner.plan import budget_message
    if runs_fit(graph, runs, device, budget):
        return
    p = floor(graph, runs, device)
    raise BudgetError(budget_message(p.budget_bytes, budget, fix="a smaller --batch-size"), p)


def _planned(graph, runs: list):
    """Each run's ways as the session plans it (planned_runs)."""
    for fetches, shapes in runs:
        yield planned_runs(graph, fetches if isinstance(fetches, list) else [fetches], shapes)


def planned_runs(graph, fetches: list, shapes: dict):
    """The ways a budgeted session may plan a run of `fetches` fed `shapes` (planned_run), made as asked for: as
    such, then, where it has maps of the batch's rows (planner.maps), in k micro-batches with them unrolled for
    those, k ascending, as the session tries them where the first does not fit (engine.step.Step.mapped)."""
    from tfplus.planner.batch import batch_size
    yield planned_run(graph, fetches, shapes)
    batch = batch_size(shapes) or 1
    for k in (k for k in range(2, batch + 1) if batch % k == 0):
        way = planned_run(graph, fetches, shapes, k)
        if way is None:
            return
        yield way


def planned_run(graph, fetches: list, shapes: dict, microbatches: int = 1) -> tuple | None:
    """A run of `fetches` fed `shapes` as a budgeted session plans it: its tf.while_loops of trip counts known from
    the shapes unrolled (tfplus.engine.step.resolve_static; with `microbatches` k, its maps of the batch's rows
    unrolled for k micro-batches, None where it has none), its losses summed over the batch scaled
    (engine.step.scale_summed_losses, which micro-batches need), then rewritten by tfplus.engine.rewrite: (graph,
    fetches, {fed: shape})."""
    from tfplus.engine.rewrite import enabled, optimize
    from tfplus.engine.step import resolve_static, scale_summed_losses
    from tfplus.framework import needed_ops
    first = resolve_static if microbatches == 1 else functools.partial(resolve_static, microbatches=microbatches)
    for rewrite in (first, lambda g, f, s: scale_summed_losses(g, f, s) if s else None,
                    lambda g, f, s: optimize(g, f, set(s)) if enabled() else None):
        while (rw := rewrite(graph, fetches, shapes)) is not None:
            graph, fetches, shapes = rw.graph, [rw.element[f] for f in fetches], \
                {rw.element[t]: s for t, s in shapes.items()}
            if rewrite is not first:
                break
            # again: a tf.cond nested in a branch it inlined folds now (TensorFlow's tf.losses weights check, whose
            # else branch asks whether the weights' shape broadcasts), as the session resolves level by level
    if microbatches > 1 and not any(op.attrs.get("_row_map") for op in needed_ops(fetches, set(shapes))):
        return None  # (the marks hold its plans to k micro-batches: a rewrite that dropped them drops the way)
    return graph, fetches, shapes


def training_feeds(tg) -> tuple:
    """The tensors a training step of `tg` (graphs.TrainingGraph) is fed: its images (or, with device input, the
    dataset's bytes and the crops) and labels."""
    images = (tg.images,) if tg.raw_images is None else (tg.raw_images, tg.crops)
    return images + (tg.labels,)


def training_runs(tg, step_op, batch: int) -> list:
    """The runs of a training session whose needs decide its budget: the step `step_op` (or a list of fetches,
    e.g. [train_op, loss]) at `batch`, and the initializer (a session's other runs, reading values or evaluating at
    the training batch, need less)."""
    shapes = {t: (batch,) + tuple(t.shape.as_list()[1:]) for t in training_feeds(tg)}
    return [(list(step_op) if isinstance(step_op, (list, tuple)) else [step_op], shapes), (tg.init_op, {})]
