"""Data-parallel worker processes for the cpu device: a training step's batch split over forked processes.

NumPy kernels hold the GIL between their loops (dispatch, slicing, the kernels' own Python), so the intra-op
threads of one process stop scaling past a few threads (BENCHMARKS.md, issue 13). Each process has its own GIL.
With P workers (P > 1; by default one per thread on Linux: resolve), a training step, one whose variable
updates read a fed batch, runs on P slices of the batch at once, one per forked worker process, each on one
thread:

1. the parent copies the fed tensors into shared memory and wakes the workers;
2. worker i runs the forward and backward ops on rows [i*m, (i+1)*m) of the batch (m = batch / P) and writes
   what the updates read of the batch (the gradients) and the fetched tensors into its own shared slot;
3. the parent averages the gradients over the slices (summed in worker order), merges the fetches (a scalar
   is averaged, a batch-major tensor concatenated, one that does not depend on the batch taken from slice
   0) and runs the updates on its own intra-op threads.

These are the planner's micro-batches (plan.split_step) run side by side, exact under the same condition: a
loss that averages over the batch, whose full-batch gradient is the slices' average (up to float rounding).
A summed loss's is their sum. So the first run of a step runs the P slices in this process, one after another,
and the whole batch as well, and compares them. The step goes to the workers only if every merged value
matches the whole batch's; otherwise it stays in this process (`why` says so). A slice's result does not
depend on the process that runs it, so a step is bit-for-bit the same for a fixed P.

Batch statistics (a training-mode batch norm, tf.nn.moments over the batch written by hand: planner.crossbatch)
take statistics passes, as the planner's micro-batches do: the step runs as the planner's runs of P micro-batches
without a budget (planner.plan.spread), worker i micro-batch i of each. Per statistics pass, each worker computes its
slice's per-channel sums and means (and what the next pass starts from: the rows it keeps for its own later runs,
such as a norm's input, which never leave the worker) into its shared slot; the parent merges the slots in worker
order (a mean summed then divided by P; what every slice computes alike, slice 0's) into the statistics the next
runs are fed. The backward's batch reductions (a norm gradient's sums of dy and dy * x_hat) are passes too. The
micro-batch run and the merge of the gradients follow as above, and the update run, fed the merged statistics,
updates the moving averages once, with the whole batch's. A pass's values depend on its slice and the merged values
alone, never on timing: a step is the same bits run after run for a fixed P, and equals the one-process step within
float rounding (which the backward of a deep net of norms amplifies: BN_RTOL).

Random draws (dropout) are the unsplit step's, as in the planner's micro-batches (KernelContext.random_draw): the
parent advances each random node's run counter once per step and gives the run to every worker (shared memory),
and a draw shaped like the batch (leading dimension open) starts at the slice's first row, so worker i draws rows
[i*m, (i+1)*m) of the numbers the step draws in one process. A draw of a fixed shape is the whole step's in every
worker; one of an open leading dimension that is not the batch's rows does not add up in the first run's check,
which keeps its step in the parent. A draw inside a tf.cond or tf.while_loop keeps its step in the parent too (it
draws once per run of its sub-graph: an iteration).

The variables the slices read are moved into shared memory (MAP_SHARED, made before the fork), where the
parent's updates change them in place, so the workers read them without a copy. The workers are forked after
that first run, so they inherit the session's graph and compiled programs. A worker exits when the session
closes or its parent dies: its end of the socket then closes.

Forks and threads: no process is forked while a thread is inside a step of any session (`stepping`: steps hold a
process-wide gate shared, os.fork's hooks hold it alone), so a child never inherits a lock or a BLAS call held
halfway. Any other process forked from one with workers (os.fork, multiprocessing) gets private copies of the
shared variables before it can run a step (`_after_fork`): the parent's memory is never written by a process that
did not make it. The parent waits on its workers in short polls that let signal handlers run, and a worker that
dies, stays stopped (SIGSTOP) for STOPPED_SECONDS or hangs (no CPU time used for HUNG_SECONDS) is an
errors.UnavailableError; its step then runs in the parent.

With the default count (Session(workers=None), no $TFPLUS_WORKERS: on Linux, one a thread from AUTO_FROM threads),
the workers take a step only where the split pays (Payoff, decided from the step's shapes before its first run:
the divisible work it saves against the kernel calls every worker repeats, RUN_SECONDS a run of the slices and the
shared-memory copies); the others run in the parent, and summary() says why with those figures. A count given is
obeyed. Other steps run in the parent whatever the count:
- no fed batch that P divides into slices of MIN_ROWS rows or more;
- batch statistics that statistics passes do not compute (a Max over the batch: planner.crossbatch says which);
- an op that moves, picks or mixes the batch's rows (x[:25] of a tower, tf.concat of two batches, a gather of
  rows by index: planner.rows), or control flow on them;
- stateful ops other than random draws before the updates (an allreduce, say: it must run once per step), and
  any stateful op inside a control-flow op's sub-graph there;
- a memory budget (the plan's arena), a traced run (the profiler), or a device other than the cpu.
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import mmap
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
import warnings
import weakref
from typing import NamedTuple

import numpy as np

from tfplus import errors, threads
from tfplus.framework import Graph, Tensor, needed_ops, topo_order
from tfplus.registry import has_tag

ENV = "TFPLUS_WORKERS"
# Thread counts from which a session splits training steps over worker processes by default (one thread
# each). Mentee's step in turns (BENCHMARKS.md, issue 13): 2-core EPYC, 2 threads 252-255 ms, 2 workers
# 217-221; 16-core Xeon, 2 threads 386, 2 workers 352; 4: 227 and 181; 8: 190 and 111.
AUTO_FROM = 2
# A slice's least rows: the conv kernels' fast paths take 8 images a task (kernels/numpy/conv.py).
MIN_ROWS = 8
# The conv kernels' chunk budgets are divided by this in a slice (kernels/numpy/conv.py smaller_chunks).
CHUNK_DIVISOR = 2
# How far the first step's merged slices may be from the whole batch's (relative to the value's norm: _Step.first),
# and in a step with batch statistics, whose normalizations amplify rounding.
RTOL, BN_RTOL = 1e-3, 3e-2
# When the workers take a step by default (Session(workers=None), no $TFPLUS_WORKERS: Workers.by_rule): where the
# time the split saves beats its own cost, both estimated from the step's shapes before it runs (Payoff). Each run
# of the slices (a statistics pass, the micro-batch run) ends in a rendezvous: the parent waits for the slowest
# worker. An idle round trip costs 0.03-0.06 ms; after a run, on the busy 2-core box, the parent waited 7-42 ms a
# rendezvous beyond the slower worker's CPU time (seqnet, MobileNet: the load's, not the machinery's), while a
# free 16-core host ran MobileNet's 55 a step at batch 128 1.57x as fast as one process (stop 50). This price
# keeps in the parent the steps that lost on the busy box, and sends MobileNet's to the workers from batch 48
# (BENCHMARKS.md, wkpay).
RUN_SECONDS = 3e-3
# Benchmarks only: the workers take every step they can, as an explicit worker count makes them.
FORCE = False
# Steps whose workers stay alive at once (a loop that also fetches a summary every 100 steps, say): more would
# leave processes idle; fewer would fork anew at each switch.
MAX_GROUPS = 2
_ALIGN = 64  # bytes: a cache line, so that no two workers' slots share one
# Ops that may run in a slice although stateful: reading a variable, checking a value.
_SLICE_STATEFUL = ("VariableV2", "Assert")
_NO_BATCH = "no fed tensor has an open batch dimension"
# The parent's waits on its workers return to Python this often (seconds), so that signal handlers run (the
# trainer's SIGTERM handler sets its stop flag) and a dead or stopped worker is noticed.
POLL_SECONDS = 0.2
# A worker stopped (SIGSTOP, SIGTSTP: state T) for this long while its parent waits is an error, not a wait; so is
# one that used no CPU time for HUNG_SECONDS while it had work (a worker only sleeps between commands: a deadlock).
STOPPED_SECONDS = 10.0
HUNG_SECONDS = 120.0
# How long a fork from outside tfplus waits for the steps running in other threads (_Gate).
FOREIGN_FORK_SECONDS = 10.0
_live_sockets: set = set()  # the groups' parent ends in this process (and a forking worker's ends: _Group.fork)
_all: weakref.WeakSet = weakref.WeakSet()  # every session's Workers in this process


class _Gate:
    """Process-wide, entered by every step (`with _gate:`, any number at once) and held alone by a fork. A thread's
    own steps do not hold up its fork (a step forks its workers); a thread already inside a step enters another at
    once.

    tfplus forks its workers holding the gate (`exclusive`, outside os.fork). Other forks (os.fork,
    multiprocessing) wait for the running steps in os.fork's hook, for FOREIGN_FORK_SECONDS at most.
    NOTE: a bounded wait, because other libraries' fork hooks (h5py's, logging's) hold their locks while ours runs:
    a step that needs such a lock (to fork its workers, say) cannot finish while the hook waits for it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.inside = 0  # steps running, in all threads
        self.forks = 0  # forks waiting or under way (steps wait for them: a fork is not starved)
        self.forking = False
        self.mine = threading.local()  # .depth: this thread's steps; .own: those its fork set aside; .hooked

    def __enter__(self):
        mine = self.mine
        depth = getattr(mine, "depth", 0)
        with self.lock:
            while self.forks and not depth:
                self.cond.wait()
            self.inside += 1
        mine.depth = depth + 1

    def __exit__(self, *exc):
        self.mine.depth -= 1
        with self.lock:
            self.inside -= 1
            if self.forks and not self.inside:
                self.cond.notify_all()

    def _acquire(self, timeout: float | None) -> bool:
        """Holds the gate alone once no other thread is in a step or a fork; False if `timeout` passed first."""
        own = getattr(self.mine, "depth", 0)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            self.forks += 1
            self.inside -= own
            try:
                while self.inside or self.forking:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError
                    self.cond.wait(left)
            except BaseException as e:  # the wait ran out, or a signal handler raised
                self.forks -= 1
                self.inside += own
                self.cond.notify_all()
                if isinstance(e, TimeoutError):
                    return False
                raise
            self.forking = True
        self.mine.own = own
        return True

    def _release(self) -> None:
        with self.lock:
            self.forking = False
            self.forks -= 1
            self.inside += self.mine.own
            self.cond.notify_all()
        self.mine.own = None

    @contextlib.contextmanager
    def exclusive(self):
        """Held by tfplus's own forks (_Group.fork) around os.fork."""
        self._acquire(None)
        try:
            yield
        finally:
            self._release()

    def before_fork(self) -> None:
        self.mine.hooked = False
        if getattr(self.mine, "own", None) is None:  # not tfplus's own fork, which holds the gate already
            self.mine.hooked = self._acquire(FOREIGN_FORK_SECONDS)

    def after_fork_in_parent(self) -> None:
        if getattr(self.mine, "hooked", False):
            self.mine.hooked = False
            self._release()

    def after_fork_in_child(self) -> None:
        # The only thread now is the one that forked: its steps are the only ones inside.
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.inside, self.forks, self.forking = getattr(self.mine, "depth", 0), 0, False
        self.mine.own, self.mine.hooked = None, False


_gate = _Gate()
_forking = threading.local()  # .worker: the socket of the worker this thread is forking (_Group.fork)


def stepping() -> _Gate:
    """What a session's step (and its close) holds: no process is forked meanwhile, from any thread."""
    return _gate


def _after_fork() -> None:
    """In any forked child (a worker, or a process the user forks): the parent's sockets to its workers are
    not this process's to use, and a worker must see EOF when its parent dies, so the copies close here; the
    groups they belong to then count as gone (_Group.owner). A child that is not a worker gets private copies
    of the variables in its parent's shared memory (Workers.disown)."""
    _gate.after_fork_in_child()
    mine = getattr(_forking, "worker", None)  # a worker's own socket to its parent
    for s in list(_live_sockets):
        if s is not mine:
            s.close()
    _live_sockets.clear()
    if mine is None:
        for w in list(_all):
            w.disown()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_gate.before_fork, after_in_parent=_gate.after_fork_in_parent,
                        after_in_child=_after_fork)


def by_default(requested) -> bool:
    """Whether a session given `requested` workers (Session(workers=)) has the default count, whose workers take
    only the steps where they pay (Payoff): none given, and no $TFPLUS_WORKERS."""
    return requested is None and not os.environ.get(ENV, "").strip()


def resolve(requested, n_threads: int) -> int:
    """A session's worker count: `requested` (Session(workers=)), else $TFPLUS_WORKERS, else one per thread
    from AUTO_FROM threads on; 1 means none."""
    where = "workers"
    if requested is None:
        value = os.environ.get(ENV, "").strip()
        if not value:
            # Only where forking a process that has loaded NumPy's BLAS and made threads is known to be safe:
            # macOS's Accelerate is not fork-safe, and Windows has no fork.
            return n_threads if n_threads >= AUTO_FROM and sys.platform.startswith("linux") else 1
        requested, where = value, ENV
    try:
        n = int(str(requested).strip())
    except ValueError:
        n = 0
    if n < 1 or isinstance(requested, bool):
        raise ValueError(f"{where}={requested!r}: the number of worker processes must be a positive integer "
                         "(1: training steps run in this process)")
    if n > 1 and not hasattr(os, "fork"):
        raise ValueError(f"{where}={requested!r}: worker processes are forked, and this platform cannot fork; "
                         "use 1")
    return n


class Payoff(NamedTuple):
    """What splitting a step over n workers should save and cost (seconds a step), from its shapes, as the
    planner's cpu cost model prices them (planner.cost.CostModel.WEIGHTS): `work` the whole batch's divisible work
    (GEMM FLOPs, elements written), which the split divides by n; `calls` its kernel calls' own cost, which every
    worker pays in full (n - 1 more times than the parent: on a machine without idle cores they compete);
    `commands` the runs of the slices a step makes (its statistics passes, the micro-batch run), RUN_SECONDS each
    for the rendezvous that ends it; `copied` the elements that go through shared memory (the fed batch, each
    slice's gradients, which the workers then average, an even and brief rendezvous of its own)."""
    n: int
    work: float
    calls: float
    commands: int
    copied: int

    @property
    def saved(self) -> float:
        return self.work * (1 - 1 / self.n)

    @property
    def cost(self) -> float:
        from tfplus.planner.cost import CostModel  # (not at import: importing tfplus loads no planner)
        return (self.n - 1) * self.calls + self.commands * RUN_SECONDS + self.copied * CostModel.WEIGHTS["elements"]

    @property
    def pays(self) -> bool:
        return self.saved > self.cost

    def __str__(self) -> str:
        return (f"{self.n} workers would save ~{self.saved * 1e3:.1f} ms of its ~{self.work * 1e3:.1f} ms of "
                f"divisible work and cost ~{self.cost * 1e3:.1f} ms: {self.n - 1} x its ~{self.calls * 1e3:.1f} ms of "
                f"kernel calls (every worker makes them all), {self.commands} rendezvous, "
                f"{self.copied / 1e6:.2f}M elements through shared memory")


def payoff(order: list, shapes: dict, n: int, commands: int, grads: list) -> Payoff | None:
    """The Payoff of a step of ops `order` fed `shapes` on n workers, whose slices send gradients `grads`; None
    when its shapes are known only as it runs (control flow)."""
    from tfplus.planner import cost
    from tfplus.planner.liveness import static_specs
    try:
        specs = static_specs(order, shapes)
    except Exception:  # noqa: BLE001  control flow's PlanError; a step must not fail for want of an estimate
        return None
    f = dict.fromkeys(cost.FEATURES, 0.0)
    for op in order:
        cost.count(f, [], 1, op, specs)
    w = cost.CostModel.WEIGHTS
    # (a statistics copy's gradients are not the step's tensors: their shapes are static, the variables')
    copied = sum(math.prod(s) for s in shapes.values()) + n * sum(
        math.prod(specs[g].shape if g in specs else g.shape.as_list()) for g in grads)
    return Payoff(n, f["flops"] * w["flops"] + f["elements"] * w["elements"],
                  sum(f[k] * w[k] for k in ("calls", "host_calls", "conv_calls")), commands, int(copied))


class Workers:
    """A session's worker processes and the steps it has looked at: run(flat, feeds) -> buffers, or None for a
    step that runs in the parent."""

    def __init__(self, executor, n: int, by_rule: bool = False):
        # by_rule: a default worker count (Session(workers=None), no $TFPLUS_WORKERS), whose workers take only the
        # steps where they pay (Payoff); a count given is obeyed
        self.executor, self.n, self.by_rule = executor, n, by_rule
        self.steps: dict[tuple, _Step | str] = {}  # step key -> _Step, or why it runs in the parent
        self.groups: dict[tuple, _Group] = {}  # step key -> its live workers, least recently used first
        self.lock = threading.Lock()
        _all.add(self)

    def pids(self) -> list[int]:
        """The live worker processes' ids."""
        return [pid for g in self.groups.values() for pid in g.pids]

    def summary(self) -> str:
        """Where the training steps run so far, for a progress line."""
        if self.groups:
            where = f"training steps on {self.n} worker processes"
            if not self.by_rule:
                return where
            pay = next(iter(self.groups.values())).step.payoff
            return f"{where}: " + (f"{pay}" if pay is not None else
                                   "the cost of its control flow is known only as it runs")
        whys = [s for s in self.steps.values() if isinstance(s, str) and s != _NO_BATCH]
        return f"training steps in this process: {whys[-1]}" if whys else ""

    def run(self, flat: list, feeds: dict) -> list | None:
        branch = _fed_branch(flat, feeds)
        key = _key(flat, feeds) + tuple(branch.values())
        with self.lock:
            st = self.steps.get(key)
            if st is None:
                st = _prepare(self.executor, self.n, flat, feeds, branch)
                if self.by_rule and not FORCE and not isinstance(st, str) and st.payoff is not None and \
                        not st.payoff.pays:
                    st = f"too small a step for the workers ({st.payoff}; {ENV}=N or --workers N splits it anyway)"
                self.steps[key] = st
            if isinstance(st, str):
                return None
            feeds = st.mine(feeds)
            group = self.groups.pop(key, None)
            if group is not None and group.ready(feeds):
                self.groups[key] = group
                try:
                    return group.run(feeds)
                except errors.UnavailableError as e:  # the group has closed: the parent runs the step from now on
                    del self.groups[key], self.steps[key]  # (summary() tells the latest why)
                    self.steps[key] = f"a worker process failed ({e.message.split(';')[0]})"
                    raise
            if group is not None:
                group.close()
            values, parts = st.first(feeds)
            if parts is None:  # the slices do not add up to the batch: the parent runs it from now on
                self.steps[key] = st.why
                return values
            while len(self.groups) >= MAX_GROUPS:
                self.groups.pop(next(iter(self.groups))).close()
            self.groups[key] = _Group(st, feeds, parts)
            return values

    def close(self) -> None:
        with self.lock:
            for group in self.groups.values():
                group.close()
            self.groups.clear()

    def disown(self) -> None:
        """In a process forked from this one's (not a worker): the workers are the parent's, and so is the shared
        memory their variables live in; the session's variables become private copies. (Its lock is free: no
        fork happens while a thread is in a step.)"""
        ex = self.executor
        for group in self.groups.values():
            for name in group.step.variables:
                view = group.shared["var", name]
                if ex.vars.get(name) is view:
                    ex.assigned(name, np.array(view))
            group.sockets, group.pids = [], []
        self.groups.clear()


def _key(flat: list, feeds: dict) -> tuple:
    return tuple(id(f) for f in flat), tuple(sorted((id(t), v.shape) for t, v in feeds.items()))


def _fed_branch(flat: list, feeds: dict) -> dict:
    """{predicate: its value} of the step's tf.conds whose predicates are fed (`training=is_training`, a fed bool
    placeholder selecting batch norm's mode): the step the workers split is the branches they take
    (engine.step.resolve_conds), as a budgeted session's is; {} where any cond's predicate is not fed."""
    from tfplus.engine import step as step_mod
    preds = step_mod.fed_conds(flat, {t: np.shape(v) for t, v in feeds.items()})
    if not preds or any(p not in feeds or np.size(feeds[p]) != 1 for p in preds):
        return {}
    return {p: bool(np.asarray(feeds[p]).reshape(())) for p in preds}


def _prepare(executor, n: int, flat: list, feeds: dict, branch: dict | None = None):
    """The step's _Step, or why it cannot run on n workers. `branch`: its fed conds' predicates' values, whose
    branches the step is resolved to first (_fed_branch)."""
    element = {}
    if branch:
        from tfplus.engine.step import resolve_conds
        r = resolve_conds(next(f for f in flat).graph, flat, {t: np.shape(v) for t, v in feeds.items()}, branch)
        element = r.element
        flat, feeds = [element[f] for f in flat], {element[t]: v for t, v in feeds.items()}
    st = _prepare_resolved(executor, n, flat, feeds)
    if isinstance(st, _Step):
        st.element = element
    return st


def _prepare_resolved(executor, n: int, flat: list, feeds: dict):
    """_prepare of a step without fed conds left."""
    from tfplus.planner import rows as row_rules
    from tfplus.planner.batch import batch_feeds, batch_size, batch_statistics, split_step
    from tfplus.planner.liveness import PlanError
    from tfplus.planner.plan import spread as spread_runs
    from tfplus.runtime.facts import device_facts

    shapes = {t: tuple(v.shape) for t, v in feeds.items()}
    batch = batch_size(shapes)
    if batch is None:
        return _NO_BATCH
    if batch % n or batch // n < MIN_ROWS:
        return f"{n} workers do not divide the batch of {batch} into slices of {MIN_ROWS} rows or more"
    order = topo_order(needed_ops(flat, set(feeds)))
    s = split_step(order, flat, set(feeds), shapes, batch)
    spread = None
    rows = batch_feeds(shapes, batch)
    if isinstance(s, PlanError) and batch_statistics(order, set(feeds), rows) and \
            not row_rules.why_not(order, set(feeds), shapes, rows):  # each slice a micro-batch of statistics passes
        try:
            spread = spread_runs(flat, shapes, device_facts(executor.runtime, 1), n)
        except PlanError as e:
            s = e
        except Exception as e:  # noqa: BLE001  a step the parent runs must not fail for want of a split
            s = PlanError(f"the statistics passes could not be planned ({type(e).__name__}: {e})")
        else:
            s = s if spread is None else spread.split
    if isinstance(s, PlanError):
        # a draw inside control flow is the more telling reason (the planner refuses control flow's rows as a
        # whole: planner.rows)
        held = next(((op, inner) for op in order for inner in [_stateful_inside(op)] if inner is not None), None)
        return str(s).removeprefix("cannot micro-batch: ") if held is None else _holds(*held)
    if not s.grads:
        return "no variable update reads the batch (not a training step)"
    if s.gathered:  # the workers' merge averages every gradient; a sparse one's rows concatenate (the planner's)
        return (f"the update input '{next(iter(s.gathered)).name}' is a sparse gradient's (tf.IndexedSlices), whose "
                "rows the workers do not concatenate")
    runs = spread.runs if spread else [(s.a_fetches, set(feeds))]
    a_ops = set().union(*(needed_ops(fetches, fed) for fetches, fed in runs))
    for op in sorted(a_ops, key=lambda op: op._id):
        if op.op_def.stateful and op.type not in _SLICE_STATEFUL and not has_tag(op.type, "random"):
            return (f"{op.type} '{op.name}' runs before the updates and is stateful (each worker would run it: "
                    "it must run once per step)")
        inner = _stateful_inside(op)
        if inner is not None:  # a draw there is counted per run of the sub-graph (an iteration), not per step
            return _holds(op, inner)
    variables = sorted({op.name for op in a_ops if op.type == "VariableV2"})
    draws = sorted(op.name for op in a_ops if has_tag(op.type, "random"))
    own = spread.tensor_map if spread else {}
    st = _Step(executor, n, batch // n, s, variables, draws, [own.get(f, f) for f in flat if isinstance(f, Tensor)],
               runs, spread)
    st.payoff = payoff(order, shapes, n, len(runs), list(s.grads))
    return st


def _holds(op, inner) -> str:
    return (f"{op.type} '{op.name}' runs before the updates and its sub-graph holds the stateful {inner.type} "
            f"'{inner.name}' (each worker would run it; a random draw there is counted per iteration, not per step)")


def _stateful_inside(op):
    """The first stateful op (other than a variable read or a check) of the sub-graphs op runs (a tf.cond's branches,
    a tf.while_loop's condition and body, at any depth), or None."""
    for value in op.attrs.values():
        for graph in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(graph, Graph):
                for inner in graph.get_operations():
                    if inner.op_def.stateful and inner.type not in _SLICE_STATEFUL:
                        return inner
                    found = _stateful_inside(inner)
                    if found is not None:
                        return found
    return None


class _Step:
    """One step signature that may run on the workers: its split (plan.split_step) and how to merge. A step with
    batch statistics runs in the statistics copy of its graph (plan.spread: `runs`, the statistics passes then the
    micro-batch run; its fed and fetched tensors are the copy's, `own` maps the step's feeds to them)."""

    def __init__(self, executor, n: int, rows: int, split, variables: list[str], draws: list[str],
                 fetched: list[Tensor], runs: list[tuple[list, set[Tensor]]], spread=None):
        self.executor, self.n, self.rows, self.fetched = executor, n, rows, fetched
        self.batch_feeds = split.batch_feeds
        self.grads = split.grads
        self.a_fetches = split.a_fetches
        self.a_tensors = [f for f in split.a_fetches if isinstance(f, Tensor)]
        self.b_fetches = split.b_fetches
        self.done = split.done  # what the slices ran that the updates wait for
        self.batch_dep = split.batch_dep
        self.merges: list[str] = []  # per a-tensor: 'mean', 'concat' or 'last' (plan.fetch_merge), from a run
        self.variables = variables
        self.draws = draws  # the random nodes the slices run: each draws its slice's rows of the step's numbers
        self.why = ""
        self.payoff: Payoff | None = None  # what the split should save and cost (by_rule)
        self.runs = runs
        self.levels = spread.levels if spread else []  # the statistics each pass computes, merged after it
        self.stat_merges = spread.merges if spread else {}
        self.own = spread.tensor_map if spread else {}
        self.element: dict = {}  # the step's tensors -> the copy with its fed conds resolved (_prepare), if any
        self.stats: dict = {}  # a statistic -> the merged value of the first run (its shape and dtype)
        stats = set(self.stat_merges)
        # per run, its fetches that a later run of the slice is fed (kept rows, shape-only values: plan.spread), and
        # what the slice holds no longer after it
        self.carried = [{f for f in fetches if isinstance(f, Tensor) and f not in stats and
                         any(f in fed for _, fed in runs[r + 1:])} for r, (fetches, _) in enumerate(runs)]
        self.dropped = [{t for c in self.carried[:r + 1] for t in c if not any(t in fed for _, fed in runs[r + 1:])}
                        for r in range(len(runs))]

    def mine(self, feeds: dict) -> dict:
        """The step's feeds as its runs take them (the resolved conds' copy's, then the statistics copy's tensors)."""
        own, element = self.own, self.element
        feeds = {element[t]: v for t, v in feeds.items()} if element else feeds
        return {own.get(t, t): v for t, v in feeds.items()} if own else feeds

    def part(self, feeds: dict, i: int, rows: int | None = None) -> dict:
        m = rows or self.rows
        return {t: v[i * m:(i + 1) * m] if t in self.batch_feeds else v for t, v in feeds.items()}

    def slice_run(self, r: int, feeds: dict, stats: dict, carry: dict) -> dict:
        """Run r on a slice, as a worker computes it: fed its `feeds` (rows of the batch), the merged statistics of
        the passes before it (`stats`) and what its earlier runs left it (`carry`, updated for the later ones); on
        one thread, the conv kernels' scratch in smaller chunks (the workers share the caches). {fetched tensor:
        its value}."""
        from tfplus.kernels.numpy.conv import smaller_chunks
        fetches, fed = self.runs[r]
        given = {t: feeds[t] if t in feeds else stats[t] if t in stats else carry[t] for t in fed}
        with threads.using(1), smaller_chunks(CHUNK_DIVISOR):
            out = dict(zip([f for f in fetches if isinstance(f, Tensor)], self.executor.run(fetches, given)))
        for t in self.dropped[r]:
            carry.pop(t, None)
        carry.update((t, np.array(out[t])) for t in self.carried[r])  # (a later run reuses the pool's buffers)
        return out

    def merge_level(self, r: int, pieces: list[dict], into: dict) -> None:
        """The batch's statistics of pass r from the slices' (`pieces[i]`: slice i's), in slice order."""
        for t in self.levels[r]:
            how = self.stat_merges[t]
            _merge_of(len(pieces), how == "mean", how == "last")(into[t], *[p[t] for p in pieces])

    def slices(self, feeds: dict, n: int, step: object) -> tuple[list[list], dict]:
        """The step's runs in this process on n slices, pass by pass, all drawing the step's random numbers (each
        slice its rows'): each slice's values of the a-tensors, and the merged statistics."""
        pool, rows = self.executor.pool, len(next(v for t, v in feeds.items() if t in self.batch_feeds)) // n
        wanted = set(self.a_tensors) | set(self.stat_merges)
        outs: list[dict] = [{} for _ in range(n)]
        carry: list[dict] = [{} for _ in range(n)]
        merged: dict = {}
        for r in range(len(self.runs)):  # (the first draw of a node makes its key: workers forked later draw under it)
            for i in range(n):
                with _drawing(pool, step, i):
                    got = self.slice_run(r, self.part(feeds, i, rows), merged, carry[i])
                outs[i].update((t, np.array(v)) for t, v in got.items() if t in wanted)
            if r < len(self.levels):
                merged.update((t, np.empty_like(outs[0][t])) for t in self.levels[r])
                self.merge_level(r, outs, merged)
        return [[o[t] for t in self.a_tensors] for o in outs], merged

    def first(self, feeds: dict) -> tuple[list, list | None]:
        """Runs the step in this process: the slices one after another, and, to check that they add up, the
        whole batch, all drawing the step's random numbers (each slice its rows'). Returns the step's buffers and
        the slices' values, or None for those if they do not add up (`why` then says which value differed)."""
        from tfplus.planner.batch import fetch_merge
        from tfplus.planner.liveness import PlanError
        step = object()
        parts, self.stats = self.slices(feeds, self.n, step)
        (whole,), whole_stats = self.slices(feeds, 1, step)
        self.draws = [name for name in self.draws if name in self.executor.rngs]  # the others ran no kernel
        try:  # floating-point gradients are averaged (right for a loss averaged over the batch: checked below)
            self.merges = ["mean" if t in self.grads and t.dtype.is_floating else
                           fetch_merge(t, v.shape, self.batch_dep, self.rows) for t, v in zip(self.a_tensors, parts[0])]
        except PlanError as e:
            self.why = str(e)
            return self.finish(feeds, whole, whole_stats), None
        merged = self.merge(parts)
        # NOTE: the backward of a batch norm cancels (dy less its projections on 1 and x_hat), so a deep net of them
        # amplifies rounding: MobileNet's first gradients at initialization differ by 0.5% between 1 and 2 threads
        # of the one-process step. What the check is for (a summed loss's P times, other random numbers) is far off.
        rtol = BN_RTOL if self.levels else RTOL
        for t, a, b in zip(self.a_tensors, merged, whole):
            if not _close(a, b, rtol):
                self.why = (f"the {self.n} slices' merged '{t.name}' differs from the whole batch's (a loss "
                            "summed over the batch instead of averaged?)")
                return self.finish(feeds, whole, whole_stats), None
        return self.finish(feeds, merged, self.stats), parts

    def merge(self, parts: list[list], done: dict | None = None) -> list:
        """The step's values of the a-fetches from the slices' (parts[i][j]: slice i's of a_tensors[j]);
        `done`: {j: value} of those merged already (the workers' averages)."""
        out = []
        for j, how in enumerate(self.merges):
            pieces = [p[j] for p in parts]
            if done and j in done:
                out.append(done[j])
            elif how == "concat":
                out.append(np.concatenate(pieces))
            elif how == "last":
                out.append(np.array(pieces[0]))
            else:
                acc = np.empty_like(pieces[0])
                threads.sharded(_merge_of(len(pieces)), acc, *pieces)
                out.append(acc)
        return out

    def finish(self, feeds: dict, values: list, stats: dict) -> list:
        """Runs the updates from the merged values and statistics (the moving averages read those: updated once,
        with the batch's); the buffers of the step's tensor fetches."""
        known = dict(zip(self.a_tensors, values))
        rest = {t: v for t, v in feeds.items() if t not in self.batch_feeds}
        b_values = self.executor.run(self.b_fetches, {**rest, **stats, **{g: known[g] for g in self.grads}}, self.done)
        known.update(zip([f for f in self.b_fetches if isinstance(f, Tensor)], b_values))
        return [known[t] for t in self.fetched]


@contextlib.contextmanager
def _drawing(pool, step: object, i: int):
    """The runs of `pool`'s programs meanwhile are slice `i` of one step (`step`): a random node draws the step's
    run once for them all (KernelContext.random_draw), and a draw of rows starts at the slice's first row."""
    pool.draw_step, pool.draw_slice = step, i
    try:
        yield
    finally:  # the class's: a run by itself draws anew
        del pool.draw_step, pool.draw_slice


def _merge_of(n: int, mean: bool = True, first: bool = False):
    """The merge of n slices' values: summed in slice order, then scaled for a `mean`, element by element (so
    sharding the elements over threads changes nothing); slice 0's for `first` (a value the same in every slice)."""
    def body(out, *pieces):
        if first or n == 1:
            np.copyto(out, pieces[0])
            return
        np.add(pieces[0], pieces[1], out=out)
        for p in pieces[2:]:
            np.add(out, p, out=out)
        if mean:
            np.multiply(out, 1.0 / n, out=out, dtype=out.dtype)
    return body


def _close(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    """Equal up to the rounding of summing in another order (relative to the tensor's norm: elements near zero
    are sums that cancel)."""
    if a.shape != b.shape:
        return False
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.linalg.norm(a - b) <= rtol * np.linalg.norm(b) + 1e-30)


class _Group:
    """The worker processes of one step, and the shared memory they work in."""

    def __init__(self, st: _Step, feeds: dict, parts: list[list]):
        self.step, ex = st, st.executor
        # The averaged values of each dtype lie end to end, in each worker's slot and in the merged block, so
        # that worker i averages its 1/P of every slot's in a few NumPy calls (reduce).
        means = [j for j, how in enumerate(st.merges) if how == "mean"]
        self.dtypes = sorted({parts[0][j].dtype.str for j in means})
        flat = {d: sum(parts[0][j].size for j in means if parts[0][j].dtype.str == d) for d in self.dtypes}
        arrays = {("in", t): v for t, v in feeds.items()}
        arrays.update((("var", name), ex.vars[name]) for name in st.variables)
        arrays.update((("merged", d), np.empty(flat[d], d)) for d in self.dtypes)
        arrays.update((("flat", i, d), np.empty(flat[d], d)) for i in range(st.n) for d in self.dtypes)
        arrays.update((("out", i, j), v) for i, p in enumerate(parts) for j, v in enumerate(p) if j not in means)
        arrays.update((("stat", i, t), v) for i in range(st.n) for t, v in st.stats.items())  # each slice's
        arrays.update((("stats", t), v) for t, v in st.stats.items())  # merged by the parent after each pass
        arrays["runs"] = np.zeros(len(st.draws), np.int64)  # the step's run of each random node, set by the parent
        size = sum(_padded(v.nbytes) for v in arrays.values())
        self.memory = mmap.mmap(-1, max(size, 1))  # anonymous and MAP_SHARED: the forked workers see it
        self.shared, at = {}, 0
        for key, v in arrays.items():
            self.shared[key] = np.frombuffer(self.memory, v.dtype, v.size, at).reshape(v.shape)
            np.copyto(self.shared[key], v)
            at += _padded(v.nbytes)
        at = dict.fromkeys(self.dtypes, 0)
        for j in means:  # views of the flat blocks
            v = parts[0][j]
            d, lo, hi = v.dtype.str, at[v.dtype.str], at[v.dtype.str] + v.size
            self.shared["mean", j] = self.shared["merged", d][lo:hi].reshape(v.shape)
            for i in range(st.n):
                self.shared["out", i, j] = self.shared["flat", i, d][lo:hi].reshape(v.shape)
            at[d] = hi
        for name in st.variables:  # the parent's updates now write where the workers read
            ex.assigned(name, self.shared["var", name])
        self.shapes = {t: v.shape for t, v in feeds.items()}
        self.sockets: list[socket.socket] = []
        self.pids: list[int] = []
        self.owner = os.getpid()  # a process forked from the owner inherits this group but cannot use it
        self.fork()

    def fork(self) -> None:
        with _gate.exclusive():  # no other thread in a step (in OpenBLAS, say) while the workers are forked
            self._fork()

    def _fork(self) -> None:
        for i in range(self.step.n):
            parent, child = socket.socketpair()
            # Both ends are closed in any other child forked before this fork is done (another thread's fork of
            # its own workers may come first): a copy there would keep the other end from seeing this end close.
            _live_sockets.update((parent, child))
            with warnings.catch_warnings():
                # Python 3.12 warns on fork() in a process with threads: the parent's are the intra-op pool's
                # (parked on their queues; a worker makes none of its own: threads.using(1)), other sessions'
                # threads (outside their steps: the fork waits for them, _Gate) and the trainer's input thread,
                # whose locks a worker never takes.
                warnings.simplefilter("ignore", DeprecationWarning)
                _forking.worker = child
                try:
                    pid = os.fork()
                finally:
                    _forking.worker = None
            if pid == 0:
                code = 1
                try:
                    # (every inherited socket but `child` closed at the fork: _after_fork)
                    # Ctrl-C, and a SIGTERM or SIGHUP sent to the process group, are the parent's to handle (the
                    # trainer finishes its step and saves); a worker lives as long as its socket to the parent.
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                        signal.signal(sig, signal.SIG_IGN)
                    # What the worker inherited lives as long as it does: out of the collector's sight, whose
                    # passes would write to (and so copy) pages it shares with the parent (2 Mentee workers: 16
                    # MB less in all).
                    gc.freeze()
                    self.serve(i, child)
                    code = 0
                finally:
                    os._exit(code)
            _live_sockets.discard(child)
            child.close()
            self.sockets.append(parent)
            self.pids.append(pid)

    def serve(self, i: int, sock: socket.socket) -> None:
        """A worker's loop: on b"r" and a run's index, that run (_Step.runs) of slice i of the shared feeds into its
        shared slots; on b"m", its part of the average over the slots (reduce)."""
        st, ex = self.step, self.step.executor
        ex.inter_op, ex.trace = 1, None
        feeds = st.part({t: self.shared["in", t] for t in self.shapes}, i)
        slots = {t: self.shared["out", i, j] for j, t in enumerate(st.a_tensors)}
        slots.update((t, self.shared["stat", i, t]) for t in st.stats)
        stats = {t: self.shared["stats", t] for t in st.stats}
        carry: dict = {}  # what the slice's runs hand on to its later runs in a step (_Step.carried)
        # Every run here is slice i of a step: its random nodes draw the run the parent gives, at the slice's rows.
        ex.pool.draw_step, ex.pool.draw_slice = object(), i
        while (command := sock.recv(1)) in (b"r", b"m"):
            try:
                if command == b"r":
                    r = struct.unpack("<H", _recv_exact(sock, 2))[0]
                    if r == 0:
                        ex.take_runs(st.draws, self.shared["runs"], ex.pool.draw_step)
                        carry.clear()
                    for t, value in st.slice_run(r, feeds, stats, carry).items():
                        if t in slots:
                            np.copyto(slots[t], value)
                else:
                    self.reduce(i)
                reply = b"k"
            except Exception as e:  # noqa: BLE001  sent to the parent, which raises it
                text = json.dumps([type(e).__name__, getattr(e, "node_name", None), getattr(e, "op_type", None),
                                   getattr(e, "message", str(e))]).encode()
                reply = b"e" + struct.pack("<I", len(text)) + text
            sock.sendall(reply)

    def reduce(self, i: int) -> None:
        """Averages elements [i/P, (i+1)/P) of every slot's flat blocks into the merged ones (as _merge_of)."""
        n = self.step.n
        for d in self.dtypes:
            merged = self.shared["merged", d]
            lo, hi = len(merged) * i // n, len(merged) * (i + 1) // n
            if hi > lo:
                _merge_of(n)(merged[lo:hi], *[self.shared["flat", k, d][lo:hi] for k in range(n)])

    def ready(self, feeds: dict) -> bool:
        """Whether the workers can run this step: same feed shapes, and the variables still the shared ones (a
        variable replaced by another buffer is copied back in; one of a new shape needs new workers)."""
        if {t: v.shape for t, v in feeds.items()} != self.shapes or not self.pids or self.owner != os.getpid():
            return False
        ex = self.step.executor
        for name in self.step.variables:
            view, buf = self.shared["var", name], ex.vars.get(name)
            if buf is view:
                continue
            if buf is None or buf.shape != view.shape or buf.dtype != view.dtype:
                return False
            np.copyto(view, buf)
            ex.assigned(name, view)
        return True

    def run(self, feeds: dict) -> list:
        st = self.step
        for t, v in feeds.items():
            np.copyto(self.shared["in", t], v)
        self.shared["runs"][:] = st.executor.step_runs(st.draws)
        stats = {t: self.shared["stats", t] for t in st.stats}
        for r in range(len(st.runs)):  # the statistics passes, each merged before the next, then the micro-batch run
            self.call(b"r" + struct.pack("<H", r))
            if r < len(st.levels):
                st.merge_level(r, [{t: self.shared["stat", i, t] for t in st.levels[r]} for i in range(st.n)], stats)
        self.call(b"m")
        parts = [[self.shared["out", i, j] for j in range(len(st.a_tensors))] for i in range(st.n)]
        merged = st.merge(parts, done={j: self.shared["mean", j] for j in range(len(st.merges))
                                       if st.merges[j] == "mean"})
        return st.finish(feeds, merged, stats)

    def call(self, command: bytes) -> None:
        """Sends `command` to every worker and waits for all; raises the first worker's error, or an
        UnavailableError when a worker died or stays stopped (the group is closed then)."""
        try:
            for s in self.sockets:
                with contextlib.suppress(OSError):  # a dead worker's: its reply says so
                    s.sendall(command)
            replies = self.replies()
        except BaseException:  # a worker's end, or e.g. Ctrl-C while waiting: replies would be left unread
            self.close(kill=True)
            raise
        failed = next((e for e in replies if e is not None), None)
        if failed is not None:
            raise failed

    def replies(self) -> list:
        """Each worker's answer to the command sent (None: done; else the error it raised), waited for in polls
        of POLL_SECONDS: between them signal handlers run, and the workers not done yet are looked at."""
        replies: list = [None] * len(self.sockets)
        waiting = dict(enumerate(self.sockets))
        stopped: dict[int, float] = {}  # worker -> since when it has been seen stopped, poll after poll
        idle: dict[int, tuple] = {}  # worker -> (its CPU time, since when it has not changed)
        last = time.monotonic()
        while waiting:
            ready, _, _ = select.select(list(waiting.values()), [], [], POLL_SECONDS)
            now = time.monotonic()
            if now - last > 10 * POLL_SECONDS:  # this process did not run meanwhile (Ctrl-Z stops the whole
                stopped.clear()                 # process group): what it saw before tells nothing
                idle.clear()
            last = now
            for i in [i for i, s in waiting.items() if s in ready]:
                reply = _reply(waiting.pop(i), self.pids[i])
                if reply is _ENDED:
                    raise self.unavailable(i, _ended(self.pids[i], wait=1.0))
                replies[i] = reply
            if ready:
                continue
            for i in waiting:
                how = _ended(self.pids[i])
                if how is not None:
                    raise self.unavailable(i, how)
                state, ticks = _stat(self.pids[i])
                if state not in ("T", "t"):
                    stopped.pop(i, None)
                elif now - stopped.setdefault(i, now) >= STOPPED_SECONDS:
                    raise self.unavailable(i, f"has been stopped (state T: SIGSTOP or SIGTSTP) for "
                                              f"{now - stopped[i]:.1f} s")
                if ticks < 0 or idle.get(i, (None,))[0] != ticks:  # (< 0: no /proc to read)
                    idle[i] = ticks, now
                elif now - idle[i][1] >= HUNG_SECONDS:
                    raise self.unavailable(i, f"has used no CPU time for {now - idle[i][1]:.0f} s while running "
                                              f"its part of the step (hung; state {state})")
        return replies

    def unavailable(self, i: int, how: str) -> errors.UnavailableError:
        return errors.UnavailableError(
            None, None, f"worker process {self.pids[i]} ({i + 1} of {self.step.n}) of the cpu device's "
            f"data-parallel training step {how}; the step did not run (the variables hold the previous step's "
            f"values) and the session runs this step in this process from now on. Save and resume, and to keep "
            f"every step in this process use Session(workers=1) or {ENV}=1 (tfplus train --workers 1)")

    def close(self, kill: bool = False) -> None:
        """Lets the workers go (`kill`: at once, also a stopped one)."""
        if self.owner != os.getpid():  # inherited: the workers are another process's children
            self.sockets, self.pids = [], []
            return
        for s in self.sockets:
            _live_sockets.discard(s)
            s.close()
        for pid in self.pids:  # each sees its socket close once done with what it was running
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _reap(pid)
        self.sockets, self.pids = [], []


_ENDED = object()  # _reply: the worker's socket closed (it ended)


def _reply(sock: socket.socket, pid: int):
    """Worker `pid`'s answer to a run: None when done, the error it raised, or _ENDED if its socket closed."""
    try:
        head = sock.recv(1)
        if head == b"e":
            n = struct.unpack("<I", _recv_exact(sock, 4))[0]
            kind, node, op_type, message = json.loads(_recv_exact(sock, n))
    except (OSError, EOFError):  # reset, or closed mid-reply: the worker ended
        return _ENDED
    if head == b"k":
        return None
    if head != b"e":
        return _ENDED
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.OpError):
        return cls(node, op_type, message)
    if kind == "MemoryError":
        return errors.ResourceExhaustedError(None, None, f"worker process {pid} ran out of memory ({message}); "
                                             f"use fewer workers (Session(workers=1) or {ENV}=1) or a smaller batch")
    return RuntimeError(f"worker process {pid}: {kind}: {message}")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("a worker process closed its socket mid-reply")
        data += chunk
    return data


def _ended(pid: int, wait: float = 0.0) -> str | None:
    """How worker `pid` ended ("was killed by SIGKILL", "exited with code 1"), reaping it; None while it runs.
    `wait`: seconds to give a worker whose socket closed to become a zombie."""
    deadline = time.monotonic() + wait
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return "ended (reaped elsewhere: its exit status is unknown)"
        if done:
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                try:
                    return f"was killed by {signal.Signals(sig).name}"
                except ValueError:  # a real-time signal
                    return f"was killed by signal {sig}"
            return f"exited with code {os.waitstatus_to_exitcode(status)}"
        if time.monotonic() >= deadline:
            return None if wait == 0 else "closed its socket without exiting"
        time.sleep(0.01)


def _stat(pid: int) -> tuple[str, int]:
    """The process state letter of /proc/<pid>/stat (R, S, D, T: stopped, ...) and the CPU time it has used
    (clock ticks); ("", -1) where there is none to read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after the name, which may hold spaces
        return fields[0].decode(), int(fields[11]) + int(fields[12])  # state, utime + stime
    except (OSError, IndexError, ValueError):
        return "", -1


def _reap(pid: int, patience: float = 30.0) -> None:
    """Waits for a worker to exit; kills it if it has not within `patience` seconds, or at once if it is
    stopped (it would not see its socket close)."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline and _stat(pid)[0] not in ("T", "t"):
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:  # reaped already (_ended)
            return
        time.sleep(0.001)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _padded(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN
