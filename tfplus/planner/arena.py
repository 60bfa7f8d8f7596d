"""Offsets in one arena for buffers with lifetimes: no two buffers alive at the same step may overlap.

Greedy by size (the largest buffer first, each at the best-fitting gap among the buffers it overlaps in
time, TFLite's arena planner does the same), tried over a few orderings; the smallest arena wins.
"""
from __future__ import annotations

import bisect
import random

from tfplus.planner.liveness import Buffer

# Orderings tried; each is a sort key. Size first is usually best; the others break its worst cases (many
# equal sizes, long-lived small buffers ending up on top of short-lived big ones).
_ORDERINGS = (
    lambda b: (-b.size, b.start, b.end),
    lambda b: (-(b.size.bit_length() // 2), -(b.end - b.start), -b.size),
    lambda b: (-b.size.bit_length(), -(b.end - b.start), -b.size),
    lambda b: (-(b.size.bit_length() // 3), -(b.end - b.start), -b.size),
    lambda b: (-b.size, -(b.end - b.start)),
)
_TRIES = 24  # randomly perturbed orders tried when no ordering above reaches the liveness bound


def assign_offsets(buffers: list[Buffer], seed: int = 0) -> int:
    """Sets `offset` on every buffer and returns the arena size in bytes (sizes are already aligned, and
    every offset is a sum of aligned sizes, so every offset is aligned too). Deterministic for a seed."""
    if not buffers:
        return 0
    bound = lower_bound(buffers)
    rng = random.Random(seed)
    keys = list(_ORDERINGS) + [_jittered(rng) for _ in range(_TRIES)]
    best_size, best = None, None
    for key in keys:
        ordered = sorted(buffers, key=key)
        offsets = _greedy(ordered)
        size = max(o + b.size for o, b in zip(offsets, ordered))
        if best_size is None or size < best_size:
            best_size, best = size, (ordered, offsets)
        if best_size <= bound:
            break
    for b, o in zip(*best):
        b.offset = o
    return best_size


def _jittered(rng: random.Random):
    """Size classes (factor 2, 4 or 8), longest-lived first within a class, sizes scaled by random noise."""
    spread, width = rng.choice((0.1, 0.3, 0.6)), rng.choice((1, 2, 3))
    noise: dict[str, float] = {}

    def key(b):
        if b.name not in noise:
            noise[b.name] = 1 + rng.uniform(-spread, spread)
        size = int(b.size * noise[b.name])
        return (-(size.bit_length() // width), -(b.end - b.start), -size)
    return key


def lower_bound(buffers: list[Buffer]) -> int:
    """The most bytes alive at one step: no arena can be smaller."""
    events: dict[int, int] = {}
    for b in buffers:
        events[b.start] = events.get(b.start, 0) + b.size
        events[b.end + 1] = events.get(b.end + 1, 0) - b.size
    live = peak = 0
    for t in sorted(events):
        live += events[t]
        peak = max(peak, live)
    return peak


def _greedy(ordered: list[Buffer]) -> list[int]:
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, start, end), kept sorted by offset
    offsets = []
    for b in ordered:
        lo, best, best_gap = 0, None, None
        for o, s, st, en in placed:  # the gaps between placed buffers alive at some step b is alive
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


def check_no_overlap(buffers: list[Buffer]) -> None:
    """Raises AssertionError if two buffers alive at a common step share a byte (used by tests and debug)."""
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.start <= b.end and b.start <= a.end and a.offset < b.offset + b.size and \
                    b.offset < a.offset + a.size and a.size and b.size:
                raise AssertionError(f"{a.name} [{a.offset}, +{a.size}) steps {a.start}-{a.end} overlaps "
                                     f"{b.name} [{b.offset}, +{b.size}) steps {b.start}-{b.end}")
