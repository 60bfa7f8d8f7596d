"""The smallest memory budget of a training session: what `tfplus plan` reports and `tfplus train` checks
before its first run, so both name the same figure.

    from tfplus.step_budget import check_budget, training_runs
    check_budget(tg.graph, training_runs(tg, step_op, batch=128), "cpu", budget=64 * 10**6)   # or BudgetError
"""
from __future__ import annotations

from tfplus.planner import TRANSFORMATIONS, plan, smallest_plan
from tfplus.runtime.facts import device_facts
from tfplus.units import format_size


def smallest_budget(graph, runs: list, device, transformations=TRANSFORMATIONS) -> int:
    """The smallest memory budget in which a session on `device` runs every one of `runs` ([(fetches,
    {fed tensor: shape})]), each planned as the session plans it (rewritten by tfplus.engine.rewrite): the largest of
    their smallest plans' peaks (each run is planned to fit the budget on its own). `tfplus plan` reports it and
    `tfplus train` checks it before its first run, so both name the same figure, and a budget of exactly that
    figure plans every run."""
    return _neediest(graph, runs, device, transformations).peak_bytes


def check_budget(graph, runs: list, device, budget: int) -> None:
    """Raises planner.BudgetError naming smallest_budget(graph, runs, device) when `budget` is below it."""
    from tfplus.planner import BudgetError
    p = _neediest(graph, runs, device)
    # NOTE: the smallest plans are made without a budget; one made for this budget may go lower (statistics
    # passes keep whole rows only as far as the budget leaves room: planner.crossbatch.kept), so below their peak
    # the runs are planned for the budget itself before the budget is refused.
    if budget < p.peak_bytes and not all(plan.fits for plan in _plans(graph, runs, device, budget=budget)):
        need = format_size(p.peak_bytes, up=True)
        raise BudgetError(f"the step needs at least {need} ({p.peak_bytes} bytes) but the memory budget is "
                          f"{format_size(budget)} ({budget} bytes); use a budget of at least {need} or a "
                          "smaller --batch-size", p)


def _neediest(graph, runs: list, device, transformations=TRANSFORMATIONS):
    """The smallest plan of the run in `runs` whose smallest plan is the largest."""
    return max(_plans(graph, runs, device, transformations), key=lambda p: p.peak_bytes)


def _plans(graph, runs: list, device, transformations=TRANSFORMATIONS, budget: int | None = None) -> list:
    """Each run's plan as the session makes it (rewritten by tfplus.engine.rewrite): its smallest, or with `budget`
    the one the planner picks for that budget (MemoryPlan.fits says whether it does)."""
    from tfplus.engine.rewrite import enabled, optimize
    plans = []
    for fetches, shapes in runs:
        fetches = fetches if isinstance(fetches, list) else [fetches]
        rw = optimize(graph, fetches, set(shapes)) if enabled() else None
        g, planned = (graph, fetches) if rw is None else (rw.graph, [rw.element[f] for f in fetches])
        fed = shapes if rw is None else {rw.element[t]: s for t, s in shapes.items()}
        facts = device_facts(device)
        plans.append(smallest_plan(planned, fed, facts, graph=g, transformations=transformations) if budget is None
                     else plan(planned, fed, facts, budget, graph=g, raise_if_infeasible=False))
    return plans


def training_feeds(tg) -> tuple:
    """The tensors a training step of `tg` (graphs.TrainingGraph) is fed: its images (or, with device input, the
    dataset's bytes and the crops) and labels."""
    images = (tg.images,) if tg.raw_images is None else (tg.raw_images, tg.crops)
    return images + (tg.labels,)


def training_runs(tg, step_op, batch: int) -> list:
    """The runs of a training session whose needs decide its budget: the step `step_op` at `batch`, and the
    initializer (a session's other runs, reading values or evaluating at the training batch, need less)."""
    shapes = {t: (batch,) + tuple(t.shape.as_list()[1:]) for t in training_feeds(tg)}
    return [([step_op], shapes), (tg.init_op, {})]
