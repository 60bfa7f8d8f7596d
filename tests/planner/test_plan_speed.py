"""Planning does less work than it did, and its plans are no bigger: every model's step (small shapes) gets an
arena no larger than the placement before the breadth passes finds for the same buffers (kept here as the
reference), with fewer greedy passes; the smallest plan places only the candidates that can beat the best.
Work is counted (greedy passes, placements), never timed."""
from __future__ import annotations

import importlib
import random

import pytest

import tfplus.kernels.numpy  # noqa: F401  (the planner reads the kernels' workspace declarations)
import tfplus.kernels.opencl  # noqa: F401
from tfplus.graphs import MODELS, get_model, training_graph
from tfplus.planner import DeviceFacts, arena
from tfplus.planner.arena import check_no_overlap, lower_bound
from tfplus.planner.liveness import Buffer

plan_module = importlib.import_module("tfplus.planner.plan")  # the module (tfplus.planner.plan is the function)


def _reference(buffers: list[Buffer]) -> int:
    """The arena assign_offsets found before the breadth passes: the two sweeps, then greedy passes by size over
    every ordering (the 5 fixed and 24 jittered ones), each stopped once it reaches the best so far, the search
    ended at the liveness bound."""
    bound = lower_bound(buffers)
    best = None
    for key in arena._SWEEPS:
        ordered = sorted(buffers, key=key)
        size = max(o + b.size for o, b in zip(arena._sweep(ordered), ordered))
        best = size if best is None else min(best, size)
    leaves = 1 << max(b.end for b in buffers).bit_length()
    cover = {id(b): arena._cover(b.start, b.end, leaves) for b in buffers}
    rng = random.Random(0)
    for key in list(arena._ORDERINGS) + [arena._jittered(rng) for _ in range(arena._TRIES)]:
        if best <= bound:
            break
        ordered = sorted(buffers, key=key)
        offsets = arena._greedy(ordered, cover, best)
        if len(offsets) == len(ordered):
            best = max(o + b.size for o, b in zip(offsets, ordered))
    return best


def _step(model: str) -> tuple:
    """(fetches, feed shapes) of a momentum training step of `model`: the recurrent ones over 8 time steps at
    batch 32 (where the size orderings stay above the liveness bound), the others at batch 2."""
    recurrent = model.startswith("seqnet")
    shape = (3, 8, 8) if recurrent else get_model(model).image_shape
    batch = 32 if recurrent else 2
    tg = training_graph(get_model(model).build, total_steps=1000, optimizer="momentum", image_shape=shape)
    return [tg.train_op, tg.loss], {tg.images: (batch,) + shape, tg.labels: (batch,)}


def _placed(p) -> list[Buffer]:
    """The buffers assign_offsets placed for plan `p` (with lanes: the block instead of the prefix's buffers)."""
    return p.buffers if p.lane_block is None else [b for b in p.buffers if b not in p.lane_offsets] + [p.lane_block]


@pytest.mark.parametrize("device", ["cpu", "opencl"])
@pytest.mark.parametrize("model", list(MODELS))
def test_every_models_arena_is_no_larger_than_before(model, device):
    fetches, shapes = _step(model)
    p = plan_module.plan(fetches, shapes, DeviceFacts(device, device))
    buffers = _placed(p)
    check_no_overlap(buffers)
    before = _reference([Buffer(**vars(b)) for b in buffers])
    assert p.arena_lower_bound_bytes <= p.arena_bytes <= before, (p.arena_bytes, before)


def test_a_recurrent_step_reaches_the_bound_in_fewer_passes(monkeypatch):
    """seqnet at batch 32: the size orderings stay above the liveness bound after every one of them; a breadth
    pass reaches it, and no size ordering runs after it."""
    fetches, shapes = _step("seqnet")
    p = plan_module.plan(fetches, shapes, DeviceFacts("cpu", "cpu"))
    buffers = [Buffer(**vars(b)) for b in _placed(p)]
    passes = [0]
    greedy = arena._greedy

    def counted(ordered, cover, stop):
        passes[0] += 1
        return greedy(ordered, cover, stop)
    monkeypatch.setattr(arena, "_greedy", counted)
    before = _reference([Buffer(**vars(b)) for b in buffers])
    reference_passes, passes[0] = passes[0], 0
    arena._placed.cache_clear()  # plan() placed these very buffers: count the passes of a placement, not a recall
    size = arena.assign_offsets(buffers)
    check_no_overlap(buffers)
    assert size == lower_bound(buffers) < before
    assert passes[0] <= arena._REPAIRS < reference_passes == len(arena._ORDERINGS) + arena._TRIES


def test_smallest_plan_does_not_place_a_plain_step_that_cannot_win(monkeypatch):
    """mentee at batch 64: the frugal plan's peak is below the plain step's liveness bound, so the plain step is
    built but never placed, and the plan chosen is the one placing it too would choose."""
    tg = training_graph(get_model("mentee").build, total_steps=1000, optimizer="momentum")
    fetches, shapes = [tg.train_op, tg.loss], {tg.images: (64, 3, 32, 32), tg.labels: (64,)}
    placed = []
    place = plan_module.place
    monkeypatch.setattr(plan_module, "place", lambda p: placed.append(p) or place(p))
    p = plan_module.smallest_plan(fetches, shapes, "cpu")
    plain = plan_module._Step(fetches, shapes, "cpu", None, None).build(1, 1, place=False)
    assert p.peak_bytes < plain.lower_bound_bytes
    assert p in placed and not any(q.transformations == plain.transformations for q in placed)
    assert p.peak_bytes < place(plain).peak_bytes
