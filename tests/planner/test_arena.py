"""The arena placement against the quadratic greedy it replaced (kept here as the reference): on random interval
sets every placement is valid (no two buffers alive at one step share a byte, offsets aligned), a greedy pass of
one ordering puts every buffer where the reference puts it, and the arena is never larger than the reference's."""
from __future__ import annotations

import bisect
import random

import pytest

from tfplus.planner import arena
from tfplus.planner.arena import assign_offsets, check_no_overlap, lower_bound
from tfplus.planner.liveness import Buffer

ALIGN = 64


def _reference_greedy(ordered: list[Buffer]) -> list[int]:
    """The greedy pass before the segment tree: every placed buffer looked at for every buffer."""
    placed: list[tuple[int, int, int, int]] = []
    offsets = []
    for b in ordered:
        lo, best, best_gap = 0, None, None
        for o, s, st, en in placed:
            if st > b.end or en < b.start:
                continue
            gap = o - lo
            if gap >= b.size and (best_gap is None or gap < best_gap):
                best, best_gap = lo, gap
            lo = max(lo, o + s)
        off = lo if best is None else best
        offsets.append(off)
        bisect.insort(placed, (off, b.size, b.start, b.end))
    return offsets


def _reference(buffers: list[Buffer], seed: int = 0) -> int:
    """The arena size the previous assign_offsets found (every ordering, stopping at the liveness bound)."""
    bound = lower_bound(buffers)
    rng = random.Random(seed)
    keys = list(arena._ORDERINGS) + [arena._jittered(rng) for _ in range(arena._TRIES)]
    best = None
    for key in keys:
        ordered = sorted(buffers, key=key)
        size = max(o + b.size for o, b in zip(_reference_greedy(ordered), ordered))
        best = size if best is None else min(best, size)
        if best <= bound:
            break
    return best


def _random_buffers(rng: random.Random, zeros: bool = False) -> list[Buffer]:
    steps = rng.randint(1, 60)
    out = []
    for i in range(rng.randint(1, 80)):
        start = rng.randrange(steps)
        end = min(steps - 1, start + rng.choice((0, 1, 3, 10, 60)))
        size = ALIGN * rng.choice((0, 1, 2, 3, 4, 5, 8, 16, 64) if zeros else (1, 2, 3, 4, 5, 8, 16, 64))
        out.append(Buffer(f"b{i}", size, size, start, end, "forward"))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_greedy_pass_places_every_buffer_where_the_quadratic_one_did(seed):
    rng = random.Random(seed)
    bufs = _random_buffers(rng)
    leaves = 1 << max(b.end for b in bufs).bit_length()
    cover = {id(b): arena._cover(b.start, b.end, leaves) for b in bufs}
    for key in arena._ORDERINGS:
        ordered = sorted(bufs, key=key)
        assert arena._greedy(ordered, cover, 1 << 62) == _reference_greedy(ordered)


@pytest.mark.parametrize("seed", range(40))
def test_placement_is_valid_aligned_and_no_larger_than_before(seed):
    rng = random.Random(1000 + seed)
    bufs = _random_buffers(rng, zeros=seed % 4 == 0)
    before = _reference([Buffer(**vars(b)) for b in bufs])
    size = assign_offsets(bufs)
    check_no_overlap(bufs)
    assert all(b.offset % ALIGN == 0 for b in bufs)
    assert size == max(b.offset + b.size for b in bufs)
    assert lower_bound(bufs) <= size <= before


def test_sweep_packs_nested_lifetimes_at_the_liveness_bound():
    """Activations freed in reverse order (forward then backward) with a short temporary at every step: the sweep
    reuses each freed gap, so the arena is the most bytes alive at once."""
    n = 30
    bufs = [Buffer(f"a{i}", ALIGN * (1 + i % 3), ALIGN * (1 + i % 3), i, 2 * n - i, "forward") for i in range(n)]
    bufs += [Buffer(f"t{i}", ALIGN * 4, ALIGN * 4, i, i + 1, "workspace") for i in range(0, 2 * n, 2)]
    size = assign_offsets(bufs)
    check_no_overlap(bufs)
    assert size == lower_bound(bufs)


def test_an_ordering_that_cannot_win_stops_early():
    bufs = [Buffer(f"b{i}", ALIGN, ALIGN, 0, 0, "forward") for i in range(4)]
    cover = {id(b): arena._cover(0, 0, 1) for b in bufs}
    assert arena._greedy(bufs, cover, 3 * ALIGN) == [0, ALIGN]  # the third would reach the stop
    assert arena._greedy(bufs, cover, 4 * ALIGN + 1) == [0, ALIGN, 2 * ALIGN, 3 * ALIGN]


@pytest.mark.parametrize("seed", range(20))
def test_sweep_alone_is_valid(seed):
    bufs = _random_buffers(random.Random(2000 + seed), zeros=seed % 2 == 0)
    for key in arena._SWEEPS:
        ordered = sorted(bufs, key=key)
        for b, o in zip(ordered, arena._sweep(ordered)):
            b.offset = o
        check_no_overlap(bufs)
        assert all(b.offset % ALIGN == 0 for b in bufs)


def _unrolled_recurrence(cells: int) -> list[Buffer]:
    """An RNN unrolled over `cells` time steps with its backward: per cell a state and a saved gate alive until the
    cell's backward step (mirrored after the forward), and two gate temporaries; the backward's state gradient."""
    out, last = [], 6 * cells
    for t in range(cells):
        fwd, bwd = 3 * t, last - 3 * t
        out += [Buffer(f"h{t}", ALIGN * 4, ALIGN * 4, fwd, bwd, "forward"),
                Buffer(f"gate{t}", ALIGN * 3, ALIGN * 3, fwd + 1, bwd - 1, "forward"),
                Buffer(f"z{t}", ALIGN * 8, ALIGN * 8, fwd, fwd + 1, "forward"),
                Buffer(f"r{t}", ALIGN * 2, ALIGN * 2, fwd + 1, fwd + 2, "forward"),
                Buffer(f"dh{t}", ALIGN * 4, ALIGN * 4, bwd - 2, bwd, "backward")]
    return out


def test_greedy_placement_work_grows_about_linearly_with_the_time_steps(monkeypatch):
    """Placement work is counted as the intervals a pass gathers to find each buffer's gap (arena's calls of
    `sorted`), not time: each buffer reads O(log steps) tree nodes, so 8x the time steps cost under 8 * 2x the
    intervals (log steps grows 1.4x here); quadratic work would be 64x."""
    count = [0]

    def counted(items, **kw):
        out = sorted(items, **kw)
        count[0] += len(out)
        return out
    monkeypatch.setattr(arena, "sorted", counted, raising=False)

    def work(cells):
        bufs = _unrolled_recurrence(cells)
        leaves = 1 << max(b.end for b in bufs).bit_length()
        cover = {id(b): arena._cover(b.start, b.end, leaves) for b in bufs}
        count[0] = 0
        for key in arena._ORDERINGS:
            offsets = arena._greedy(sorted(bufs, key=key), cover, 1 << 62)
            for b, o in zip(sorted(bufs, key=key), offsets):
                b.offset = o
            check_no_overlap(bufs)
        return count[0]
    small, large = work(32), work(256)
    assert 8 * small <= large * 1.2 and large <= 8 * 2 * small, (small, large)
