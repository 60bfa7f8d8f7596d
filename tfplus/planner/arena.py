"""Offsets in one arena for buffers with lifetimes: no two buffers alive at the same step may overlap.

Tried in turn, cheapest first, until the arena is within 1/65536 of the liveness bound (the most bytes alive at
one step: no placement is smaller, and what is left to save is below 64 bytes a 4 MB): two sweeps over the steps
(each buffer, as it starts, into the best-fitting gap the buffers ended so far left; O(n log n)); greedy passes by
breadth (TFLite's "greedy by breadth": the buffers alive where the most bytes are live first, then the largest,
then the longest-lived, each at the best-fitting gap among the buffers placed and alive at one of its steps), each
repair pass moving the buffers that ended above the bound to the front; then greedy passes by size over a few
orderings (TFLite's "greedy by size"). The smallest arena wins. On the recurrent models' steps (thousands of
buffers) one to three breadth passes reach the bound, where 29 size orderings stayed percents above it.

A greedy pass finds the gaps with a segment tree over the steps whose nodes keep the offsets taken under them
as sorted disjoint intervals (a placement reads and updates O(log steps) small sets, where walking every placed
buffer made a pass quadratic), and stops as soon as its arena reaches the best one so far: it cannot win.
"""
from __future__ import annotations

import bisect
import functools
import random
from bisect import bisect_left, bisect_right
from typing import NamedTuple

import numpy as np

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
_NO_GAP = float("inf")  # a gap larger than every gap
_TRIES = 24  # randomly perturbed orders tried when no ordering above reaches the liveness bound
# Sweeps tried first; each sorts the buffers that start at one step (largest first, longest-lived first).
_SWEEPS = (lambda b: (b.start, -b.size), lambda b: (b.start, b.start - b.end, -b.size))
_CLOSE = 1 << 16  # an arena within 1/_CLOSE of the liveness bound ends the search
_REPAIRS = 3   # greedy passes by breadth: the first and its repairs


def assign_offsets(buffers: list[Buffer], seed: int = 0) -> int:
    """Sets `offset` on every buffer and returns the arena size in bytes (sizes are already aligned, and
    every offset is a sum of aligned sizes, so every offset is aligned too). Deterministic for a seed."""
    if not buffers:
        return 0
    size, offsets = _placed(tuple(_Span(b.name, b.size, b.start, b.end) for b in buffers), seed)
    for b, o in zip(buffers, offsets):
        b.offset = o
    return size


class _Span(NamedTuple):
    """What placing a buffer reads of it."""
    name: str
    size: int
    start: int
    end: int


# A placement is a function of the spans and the seed, and a budget search places the same buffers again and
# again (seqnet-bi's floor: 34 placements of 6 sets, 60% of its time): the last ones are remembered.
@functools.lru_cache(maxsize=16)
def _placed(buffers: tuple[_Span, ...], seed: int) -> tuple[int, tuple[int, ...]]:
    """(arena size, each buffer's offset) of assign_offsets."""
    bound = lower_bound(buffers)
    close = bound + bound // _CLOSE
    best_size, best = None, None
    for key in _SWEEPS:
        ordered = sorted(buffers, key=key)
        offsets = _sweep(ordered)
        size = max(o + b.size for o, b in zip(offsets, ordered))
        if best_size is None or size < best_size:
            best_size, best = size, (ordered, offsets)
    if best_size > close:
        steps = max(b.end for b in buffers) + 1
        leaves = 1 << (steps - 1).bit_length()
        cover = {id(b): _cover(b.start, b.end, leaves) for b in buffers}  # the same in every pass
        widest = _widest(buffers)
        boost: dict[int, int] = {}  # id(buffer) -> the passes it ended above the bound in
        for i in range(_REPAIRS):
            ordered = sorted(buffers, key=lambda b: (-boost.get(id(b), 0), -widest[id(b)], -b.size, b.start - b.end))
            offsets = _greedy(ordered, cover, best_size)
            over = best_size - bound
            if len(offsets) == len(ordered):
                best_size, best = max(o + b.size for o, b in zip(offsets, ordered)), (ordered, offsets)
            if best_size <= close or (i and best_size - bound > over // 2):
                break  # a repair that does not halve the bytes above the bound rarely reaches it (seqnet-lstm)
            # The buffers that ended above the bound (and the one that stopped the pass) go first next time.
            for b in [b for b, o in zip(ordered, offsets) if o + b.size > bound] + ordered[len(offsets):][:1]:
                boost[id(b)] = boost.get(id(b), 0) + 1
        tried = set()
        rng = random.Random(seed)
        for key in list(_ORDERINGS) + [_jittered(rng) for _ in range(_TRIES)]:
            if best_size <= close:
                break
            ordered = sorted(buffers, key=key)
            order = tuple(id(b) for b in ordered)
            if order in tried:  # perturbed keys often sort alike
                continue
            tried.add(order)
            offsets = _greedy(ordered, cover, best_size)
            if len(offsets) == len(ordered):
                best_size, best = max(o + b.size for o, b in zip(offsets, ordered)), (ordered, offsets)
    at = {id(b): o for b, o in zip(*best)}
    return best_size, tuple(at[id(b)] for b in buffers)


def _widest(buffers: list[Buffer]) -> dict[int, int]:
    """id(buffer) -> the most bytes alive at one step of its lifetime (a sparse table of range maxima)."""
    steps = max(b.end for b in buffers) + 1
    delta = np.zeros(steps + 1, np.int64)
    starts = np.array([b.start for b in buffers])
    ends = np.array([b.end for b in buffers])
    sizes = np.array([b.size for b in buffers], np.int64)
    np.add.at(delta, starts, sizes)
    np.add.at(delta, ends + 1, -sizes)
    table = [np.cumsum(delta[:steps])]  # table[j][t]: the most bytes alive at steps t .. t + 2^j - 1
    while 1 << len(table) <= steps:
        half = 1 << (len(table) - 1)
        table.append(np.maximum(table[-1][:-half], table[-1][half:]))
    j = np.array([(b.end - b.start + 1).bit_length() - 1 for b in buffers])
    most = np.zeros(len(buffers), np.int64)
    for k in np.unique(j):
        at = j == k
        most[at] = np.maximum(table[k][starts[at]], table[k][ends[at] - (1 << k) + 1])
    return {id(b): int(m) for b, m in zip(buffers, most)}


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


def _greedy(ordered: list[Buffer], cover: dict, stop: int) -> list[int]:
    """Each buffer in turn at the smallest gap that holds it (the lowest of equal ones; else on top) among the
    offsets taken by the buffers placed before it and alive at one of its steps, until one would reach `stop`:
    the offsets of the buffers placed before it (of all of them when none does). `cover`: id(buffer) -> its
    steps' nodes (_cover). Buffers of no bytes take offset 0 and are left out of the sets: they change no gap."""
    # A node's offsets are sorted disjoint intervals kept flat, [lo0, hi0, lo1, hi1, ...] (strictly increasing:
    # touching ones are merged), so plain bisects find them (a key per probe cost a third of a pass) and an
    # index's parity says whether a point is inside one.
    own: dict[int, list] = {}    # node -> offsets of the buffers stored at it (alive at all its steps)
    under: dict[int, list] = {}  # node -> offsets of the buffers stored at it or below it
    offsets = []
    for b in ordered:
        size = b.size
        if not size:
            offsets.append(0)
            continue
        nodes, above = cover[id(b)]
        flat: list[int] = []
        for n in nodes:
            flat += under.get(n, ())
        for n in above:
            flat += own.get(n, ())
        # The intervals by their low ends: indices sorted by a list's getter compare plain ints, 3x faster than
        # sorting (lo, hi) pairs. Equal low ends (from different nodes) may come in any order: the gap below them
        # is the same, and past the first one none is left.
        los, his = flat[::2], flat[1::2]
        lo, best, best_gap = 0, None, _NO_GAP
        for i in sorted(range(len(los)), key=los.__getitem__):
            o = los[i]
            if size <= o - lo < best_gap:
                best, best_gap = lo, o - lo
                if best_gap == size:  # no gap fits better, and this is the lowest of the exact fits
                    break
            end = his[i]
            if end > lo:
                lo = end
        off = lo if best is None else best
        hi = off + size
        if hi >= stop:
            return offsets
        offsets.append(off)
        # [off, hi) joins its nodes' own and under sets and their ancestors' under sets (a node's holds its
        # children's), merged with the intervals it overlaps or touches. Inline: a call per set cost 7% of a pass.
        for sets, ns in ((own, nodes), (under, nodes), (under, above)):
            for n in ns:
                bounds = sets.get(n)
                if bounds is None:
                    sets[n] = [off, hi]
                    continue
                i = bisect_right(bounds, off)
                if i & 1 and hi <= bounds[i]:  # often: inside one already
                    continue
                i = bisect_left(bounds, off, 0, i)
                j = bisect_right(bounds, hi, i)
                # Boundaries within [off, hi] go; off (hi) stays one unless it falls inside an interval kept.
                bounds[i:j] = ([] if i & 1 else [off]) + ([] if j & 1 else [hi])
    return offsets


def _cover(start: int, end: int, leaves: int) -> tuple[list[int], set[int]]:
    """The nodes of a segment tree over `leaves` steps that together are steps start..end, and the nodes above
    them."""
    nodes, lo, hi = [], start + leaves, end + leaves + 1
    while lo < hi:
        if lo & 1:
            nodes.append(lo)
            lo += 1
        if hi & 1:
            hi -= 1
            nodes.append(hi)
        lo, hi = lo >> 1, hi >> 1
    above: set[int] = set()
    for n in nodes:
        n >>= 1
        while n and n not in above:
            above.add(n)
            n >>= 1
    return nodes, above


def _sweep(ordered: list[Buffer]) -> list[int]:
    """Offsets for buffers sorted by start: before a buffer starts, the buffers that ended free their bytes
    (merged with free neighbours); it takes the smallest free gap that holds it (the lowest of equal ones), else
    the free gap under the top grown, else the top."""
    by_end = sorted(range(len(ordered)), key=lambda i: ordered[i].end)
    offsets = [0] * len(ordered)
    starts: list[int] = []                     # free gaps below the top, by offset
    length: dict[int, int] = {}                # gap offset -> its length
    by_size: list[tuple[int, int]] = []        # (length, offset) of the same gaps
    top, k = 0, 0

    def drop(i):
        o = starts.pop(i)
        del by_size[bisect.bisect_left(by_size, (length[o], o))]
        return o, length.pop(o)
    for i, b in enumerate(ordered):
        while k < len(by_end) and ordered[by_end[k]].end < b.start:
            o, n = offsets[by_end[k]], ordered[by_end[k]].size
            k += 1
            if not n:
                continue
            j = bisect.bisect_left(starts, o)
            if j and starts[j - 1] + length[starts[j - 1]] == o:
                j -= 1
                o, m = drop(j)
                n += m
            if j < len(starts) and starts[j] == o + n:
                n += drop(j)[1]
            if o + n == top:
                top = o
            else:
                starts.insert(j, o)
                length[o] = n
                bisect.insort(by_size, (n, o))
        if not b.size:
            continue
        j = bisect.bisect_left(by_size, (b.size, -1))
        if j < len(by_size):
            n, o = by_size[j]
            drop(bisect.bisect_left(starts, o))
            if n > b.size:
                starts.insert(bisect.bisect_left(starts, o), o + b.size)
                length[o + b.size] = n - b.size
                bisect.insort(by_size, (n - b.size, o + b.size))
        elif starts and starts[-1] + length[starts[-1]] == top:
            o = drop(len(starts) - 1)[0]
            top = o + b.size
        else:
            o, top = top, top + b.size
        offsets[i] = o
    return offsets


def check_no_overlap(buffers: list[Buffer]) -> None:
    """Raises AssertionError if two buffers alive at a common step share a byte (used by tests and debug)."""
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.start <= b.end and b.start <= a.end and a.offset < b.offset + b.size and \
                    b.offset < a.offset + a.size and a.size and b.size:
                raise AssertionError(f"{a.name} [{a.offset}, +{a.size}) steps {a.start}-{a.end} overlaps "
                                     f"{b.name} [{b.offset}, +{b.size}) steps {b.start}-{b.end}")
