"""Rematerialization that scales: segment checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear
Memory Cost"), its checkpoints chosen per memory bound by a mixed-integer program in the manner of Checkmate (Jain
et al., MLSys 2020), solved by HiGHS (scipy.optimize.milp) under a time limit, with a greedy fallback.

The step's forward ops, in the planner's order, can be cut after any position p: the frontier F(p) is the set
of buffers made at or before p that a later forward op reads (not fed, not variables or constants). Keeping the
frontiers of chosen positions p1 < p2 < ... (the checkpoints) through the step, every other activation that the
backward pass reads and that was made in (p_i, p_i+1] is dropped after its forward use and recomputed by one
copy of that segment's forward ops, which reads only the frontiers and other kept tensors, just before the
segment's backward starts (planner.recompute.rewrite, Segment). Modelled peak of saved state: the checkpoints'
bytes plus the largest segment's dropped bytes (Chen: O(sqrt n) memory for about one extra forward pass).

The program: a path from the start to the end of the forward pass through the positions (binary y_ab: a and b
consecutive checkpoints) and one of CAPS sizes for the largest segment (binary z_s, one chosen; y_ab only under
a cap its dropped bytes M_ab fit), with sum of y_ab |F(b)| + sum of z_s cap_s <= L (|F(b)| the bytes b's
frontier keeps; tensors kept anyway count 0); it minimizes the sum of C_ab y_ab, C_ab the predicted time of the
segment's ops (the planner's cost model). (One continuous maximum over all segments, Checkmate's way, left a
relaxation HiGHS could not close in seconds; with caps it proves MobileNet's bounds optimal in about one.) The
forward is coarsened first: of the positions that split the droppable activations alike, the one of smallest
frontier; of more than MAX_NODES such, the one of smallest frontier in each of MAX_NODES runs. `solutions` solves
it for a few bounds L from the least reachable to the plain step's saved bytes: each solution is one recomputation
level of the plan search, which checks every plan exactly anyway (liveness and arena on the rewritten graph). A
segment that cannot fit beside its own frontiers is left out. Without one proven optimal in TIME_LIMIT (or with
solver='greedy'), greedy segments over the same positions: for a cap on a segment's dropped bytes, a checkpoint
wherever the next position would pass it, the cap chosen per bound.

Exact: a copy runs the same kernels on the same inputs. Stateful ops (random numbers, variables, queues), ops
with control inputs and fetched tensors are never recomputed: their outputs are leaves that the copies read.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tfplus.framework import Operation, Tensor
from tfplus.planner.liveness import alias_root, executes, nbytes, phase_of
from tfplus.planner.recompute import Segment, Solution, recomputable, saved, stale

MAX_NODES = 40          # positions the program takes; a longer forward is coarsened to this many
TIME_LIMIT = 2.0        # seconds HiGHS may take per bound (its root node alone can take one on a busy machine)
CAPS = 16               # sizes the largest segment may be capped at (the program picks one)
GAP = 0.02              # HiGHS stops within this fraction of the optimum's recompute time (its proof is slow)
NODE_LIMIT = 200        # branch-and-bound nodes per bound; past it, as past TIME_LIMIT, the greedy's
# The bounds solved for: L = least + f (plain - least), from the cheapest level to the most frugal.
FRACTIONS = (0.6, 0.35, 0.2, 0.1, 0.0)
GREEDY_CAPS = 40        # segment caps the greedy tries, geometric between the smallest and all dropped bytes
_SOLVED: dict = {}      # milp's programs -> their answers (Problem.milp)
_SOLVED_MAX = 256


def solutions(order: list[Operation], specs, feeds: set[Tensor], fetches: list, keep: set[Tensor],
              op_time: Callable[[Operation], float], solver: str = "milp") -> list[Solution]:
    """Segment-checkpointing Solutions of the step `order`, most saved bytes first (the last: the least the model
    reaches), each distinct. `keep`: planner.compact's ReLU outputs (never dropped, never read by a copy);
    `op_time(op)`: the predicted seconds of one call of a forward op; solver 'milp' (greedy when HiGHS finds no
    solution in time) or 'greedy'."""
    p = _Problem(order, specs, feeds, fetches, keep, op_time)
    if not p.dropped_bytes:
        return []
    out: list[Solution] = []
    seen: set[tuple] = set()
    least = p.memory(p.greedy(None))  # the bounds' low end: the greedy's least (a MILP of the least is slow)
    for f in FRACTIONS:
        bound = least + f * (p.dropped_bytes - least)
        chosen, how = (p.milp(bound) if solver == "milp" else None), "greedy"
        if chosen is None:
            chosen = p.greedy(bound)
            if solver == "milp":
                how = f"greedy (HiGHS proved no solution within {GAP:.0%} in {TIME_LIMIT:g} s)"
        else:
            chosen, how = chosen
        if tuple(chosen) in seen:
            continue
        seen.add(tuple(chosen))
        sol = p.solution(chosen, f"{how}, modelled saved state <= {bound / 1e6:.3g} MB")
        if sol.segments:
            out.append(sol)
    return out


class _Problem:
    """The step's forward pass as positions, frontiers and droppable activations."""

    def __init__(self, order, specs, feeds, fetches, keep, op_time):
        self.feeds, self.keep, self.in_step = feeds, keep, set(order)
        self.late = stale(order, feeds)
        self.fwd = [op for op in order if phase_of(op) == "forward" and executes(op, feeds)]
        self.pos = {op: i for i, op in enumerate(self.fwd)}
        readers, aliased = saved(order, feeds)
        fetched = {alias_root(f, feeds) for f in fetches if isinstance(f, Tensor)}
        self.readers = readers
        self.droppable = {t: nbytes(specs[t]) for t in readers if t not in aliased and t not in fetched
                          and t not in keep and t.op in self.pos and recomputable(t.op, feeds, self.late)}
        # Saved tensors kept anyway: free to keep as checkpoints, and leaves for the copies (not compact's: those
        # die at their pool).
        self.forced = {t for t in readers if t not in self.droppable}
        n = len(self.fwd)
        last: dict[Tensor, int] = {}  # buffer -> the last forward position that reads it
        for op in self.fwd:
            for u in op.inputs:
                r = alias_root(u, feeds)
                if not self._base_leaf(r) and r.op in self.pos:
                    last[r] = max(last.get(r, -1), self.pos[op])
        made: list[list[Tensor]] = [[] for _ in range(n)]
        for r, end in last.items():
            if self.pos[r.op] < end:
                made[self.pos[r.op]].append(r)
        self.frontier: list[tuple[Tensor, ...]] = []
        live: set[Tensor] = set()
        for i in range(n):
            live.update(made[i])
            live = {r for r in live if last[r] > i}
            self.frontier.append(tuple(sorted(live, key=lambda t: (t.op._id, t.value_index))))
        self.kbytes = {r: 0 if r in self.forced else nbytes(specs[r]) for f in self.frontier for r in f}
        drop_at = np.zeros(n)
        for t, b in self.droppable.items():
            drop_at[self.pos[t.op]] += b
        self.dropped_cum = np.concatenate([[0.0], np.cumsum(drop_at)])  # [p + 1]: dropped bytes made up to p
        self.dropped_bytes = float(self.dropped_cum[-1])
        times = [op_time(op) if recomputable(op, feeds, self.late) else 0.0 for op in self.fwd]
        self.time_cum = np.concatenate([[0.0], np.cumsum(times)])
        self.times = times
        self.positions = list(range(n - 1))  # after the last op nothing crosses: the end
        self.nodes = self._coarse()

    def _base_leaf(self, r: Tensor) -> bool:
        return r in self.feeds or r.op.type in ("VariableV2", "Const")

    def _leaf(self, r: Tensor) -> bool:
        """A buffer the copies read as it is: fed, a variable or constant, kept anyway, or made by an op that is
        never recomputed."""
        return self._base_leaf(r) or r.op not in self.pos or (r in self.forced and r not in self.keep) or \
            not recomputable(r.op, self.feeds, self.late)

    def _coarse(self) -> list[int]:
        """At most MAX_NODES positions: of the positions that split the droppable activations alike (the same
        ones made up to there), the one of smallest frontier; if more than MAX_NODES remain, the one of smallest
        frontier in each of MAX_NODES runs of them."""
        best: dict[float, int] = {}
        for p in self.positions:
            key = float(self.dropped_cum[p + 1])
            if key not in best or self._fbytes(p) <= self._fbytes(best[key]):
                best[key] = p
        reps = sorted(best.values())
        if len(reps) <= MAX_NODES:
            return reps
        runs = np.array_split(np.arange(len(reps)), MAX_NODES)
        return [min((reps[i] for i in run), key=lambda p: (self._fbytes(p), -p)) for run in runs]

    def _fbytes(self, p: int) -> int:
        return sum(self.kbytes[r] for r in self.frontier[p])

    def _ends(self, a: int, b: int) -> int:
        """The bytes the frontiers of a and b keep (the start's and the end's are empty)."""
        return sum(self.kbytes[r] for r in set(self.frontier[a] if a >= 0 else ()) | set(self.frontier[b]))

    # -- the model ---------------------------------------------------------------------------------------------
    def seg_bytes(self, a: int, b: int) -> float:
        """Bytes the segment (a, b] drops: the droppable activations made there, less those b's frontier keeps."""
        kept = sum(self.droppable.get(r, 0) for r in self.frontier[b] if self.pos[r.op] > a)
        return float(self.dropped_cum[b + 1] - self.dropped_cum[a + 1]) - kept

    def seg_time(self, a: int, b: int) -> float:
        """Predicted time of the segment's copies: its recomputable ops, less those whose outputs b keeps."""
        kept = {r.op for r in self.frontier[b] if self.pos[r.op] > a}
        return float(self.time_cum[b + 1] - self.time_cum[a + 1]) - sum(self.times[self.pos[op]] for op in kept)

    def memory(self, chosen: list[int]) -> float:
        """The modelled saved state of checkpoints at `chosen`: kept bytes (each checkpoint's frontier: a tensor in
        two counts twice, an over-estimate that keeps the program small) plus the largest segment."""
        kept = sum(self._fbytes(p) for p in chosen)
        path = [-1] + list(chosen) + [len(self.fwd) - 1]
        return kept + max(self.seg_bytes(a, b) for a, b in zip(path, path[1:]))

    def cost(self, chosen: list[int]) -> float:
        path = [-1] + list(chosen) + [len(self.fwd) - 1]
        return sum(self.seg_time(a, b) for a, b in zip(path, path[1:]))

    # -- solvers -----------------------------------------------------------------------------------------------
    def milp(self, bound: float) -> tuple[list[int], str] | None:
        """The checkpoints of least recompute time whose modelled saved state is at most `bound`, and how they were
        found; None when HiGHS proves none optimal (within GAP) in TIME_LIMIT. A segment that cannot fit beside its
        own two frontiers is left out of the program."""
        nodes = [-1] + self.nodes + [len(self.fwd) - 1]
        edges = [(i, j) for i in range(len(nodes)) for j in range(i + 1, len(nodes))
                 if self.seg_bytes(nodes[i], nodes[j]) + self._ends(nodes[i], nodes[j]) <= bound]
        seg_mb = [self.seg_bytes(nodes[i], nodes[j]) / 1e6 for i, j in edges]
        seg_ms = [self.seg_time(nodes[i], nodes[j]) * 1e3 for i, j in edges]
        kept_mb = [self._fbytes(nodes[j]) / 1e6 if j < len(nodes) - 1 else 0.0 for _, j in edges]
        # One program is solved once per process: a budget's plan and the smallest plan (tfplus plan makes both,
        # a session's step and its micro-batches make several) pose the same programs.
        key = (TIME_LIMIT, NODE_LIMIT, GAP, bound, tuple(nodes), tuple(edges), tuple(seg_mb), tuple(seg_ms),
               tuple(kept_mb))
        if key in _SOLVED:
            return _SOLVED[key]
        answer = self._solve(nodes, edges, seg_mb, seg_ms, kept_mb, bound)
        if len(_SOLVED) >= _SOLVED_MAX:  # (sessions planning on other threads: at worst one program solved twice)
            _SOLVED.clear()
        _SOLVED[key] = answer
        return answer

    def _solve(self, nodes, edges, seg_mb, seg_ms, kept_mb, bound) -> tuple[list[int], str] | None:
        """milp's program, solved by HiGHS."""
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix
        sizes = np.unique(seg_mb)
        caps = sizes[np.unique(np.linspace(0, len(sizes) - 1, min(CAPS, len(sizes))).round().astype(int))]
        ne, nv, nc = len(edges), len(nodes), len(caps)
        nvar = ne + nc  # y (edges), then z (caps); bytes in MB, time in ms
        rows, cols, vals, lo, hi = [], [], [], [], []

        def row(entries, low, high):
            r = len(lo)
            for c, v in entries:
                rows.append(r)
                cols.append(c)
                vals.append(v)
            lo.append(low)
            hi.append(high)
        outs: list[list[int]] = [[] for _ in nodes]
        ins: list[list[int]] = [[] for _ in nodes]
        for e, (i, j) in enumerate(edges):
            outs[i].append(e)
            ins[j].append(e)
        for v in range(nv):  # one path from the start to the end
            need = -1.0 if v == 0 else 1.0 if v == nv - 1 else 0.0
            row([(e, 1.0) for e in ins[v]] + [(e, -1.0) for e in outs[v]], need, need)
        row([(ne + k, 1.0) for k in range(nc)], 1.0, 1.0)
        for e in range(ne):
            first = int(np.searchsorted(caps, seg_mb[e]))  # the smallest cap it fits
            row([(e, 1.0)] + [(ne + k, -1.0) for k in range(first, nc)], -np.inf, 0.0)
        # The kept bytes: each checkpoint's frontier (as `memory` counts them).
        row([(e, kept_mb[e]) for e in range(ne)] + [(ne + k, caps[k]) for k in range(nc)], -np.inf, bound / 1e6)
        c = np.concatenate([seg_ms, np.zeros(nc)])
        a = coo_matrix((vals, (rows, cols)), shape=(len(lo), nvar)).tocsr()
        options = {"time_limit": TIME_LIMIT, "disp": False, "mip_rel_gap": GAP, "node_limit": NODE_LIMIT,
                   "presolve": False}  # (HiGHS's presolve took the whole time limit on these programs)
        res = milp(c, constraints=LinearConstraint(a, lo, hi), integrality=np.ones(nvar), bounds=Bounds(0, 1),
                   options=options)
        # NOTE: a solution cut short by the time limit is not taken: which one HiGHS has by then depends on the
        # machine's speed and load, and the plan must be a function of the step, the device and the budget.
        if res.x is None or res.status != 0:  # infeasible, or not proven within GAP in time
            return None
        chosen, v = [], 0
        while v != nv - 1:
            e = next(e for e in outs[v] if res.x[e] > 0.5)
            v = edges[e][1]
            if v != nv - 1:
                chosen.append(nodes[v])
        what = f"optimal within {GAP:.0%}"
        size = f"{len(self.nodes)} of {len(self.positions)} positions"
        return chosen, f"MILP (HiGHS, {what}; {size}, {ne} segments)"

    def greedy(self, bound: float | None) -> list[int]:
        """Checkpoints by a cap on a segment's dropped bytes (a checkpoint wherever the next position would pass
        it), over the program's positions: the cheapest cap whose modelled saved state is within `bound`, else the
        least."""
        smallest = min(self.droppable.values())
        caps = np.geomspace(smallest, max(self.dropped_bytes, smallest), GREEDY_CAPS)
        found = []
        for cap in caps:
            chosen, a = [], -1
            for k, p in enumerate(self.nodes):
                nxt = self.nodes[k + 1] if k + 1 < len(self.nodes) else len(self.fwd) - 1
                if self.seg_bytes(a, nxt) > cap and p > a:
                    chosen.append(p)
                    a = p
            found.append((self.memory(chosen), self.cost(chosen), chosen))
        fits = [f for f in found if bound is not None and f[0] <= bound]
        return min(fits, key=lambda f: (f[1], f[0]))[2] if fits else min(found, key=lambda f: (f[0], f[1]))[2]

    # -- the solution ------------------------------------------------------------------------------------------
    def solution(self, chosen: list[int], solver: str) -> Solution:
        """The Segments of checkpoints at `chosen`: per segment its dropped activations, the ops that recompute
        them from kept tensors (creation order) and their backward readers."""
        path = [-1] + list(chosen) + [len(self.fwd) - 1]
        kept = {r for p in chosen for r in self.frontier[p]}
        segments = []
        for a, b in zip(path, path[1:]):
            ends = set(self.frontier[b])  # (nothing crosses the end)
            tensors = sorted((t for t in self.droppable if a < self.pos[t.op] <= b and t not in ends),
                             key=lambda t: (t.op._id, t.value_index))
            if not tensors:
                continue
            ops: set[Operation] = set()
            stack = [t.op for t in tensors]
            while stack:
                op = stack.pop()
                if op in ops:
                    continue
                ops.add(op)
                for u in op.inputs:
                    r = alias_root(u, self.feeds)
                    if not (self._leaf(r) or r in kept):
                        stack.append(u.op)
            # Shape-only backward readers too (planner.recompute leaves them out): one with control inputs runs
            # in the backward pass, where it reads the copy, not the original.
            readers = sorted({op for t in tensors for op in t.consumers() if op in self.in_step
                              and phase_of(op) == "backward"}, key=lambda op: op._id)
            segments.append(Segment(sorted(ops, key=lambda op: op._id), tensors, readers))
        checkpoints = sorted(kept, key=lambda t: (self.pos[t.op], t.value_index))
        return Solution(solver, checkpoints, segments)

