"""The arena allocator: runs a step by its MemoryPlan, every output and workspace a view of one arena.

A session has one arena (the executor's `arena`), as big as its biggest plan needs, shared by all its plans (a
training step and the initializer, say); planned runs of one session therefore take turns (a lock), and a run's
fetched values are copied out of the arena before the next may start (engine.step: the steps driven by a plan,
with a memory budget, or replayed, without one, on a device that replays recorded launches, since a planned
arena's buffers stay put from run to run, which a replay needs). A `Bound` plan is the allocator of the
executor's programs (tfplus.engine.executor) for its phases: it hands out outputs (`output`), kernel scratch
(`workspace`) and wraps kernels (`kernel`: restarts the workspace cursor, splits chunked convolutions over the
batch), once per program; micro-batching replays the phase's program once per micro-batch, and on a runtime
that records launches a micro-batched or a streamed step's launches replay as one tape (`Bound._as_one_tape`).

What it asks of a device runtime is declared by tfplus.runtime.base.Runtime: `allocate_arena(nbytes, alignment)`,
`sub_buffer(arena, offset, shape, dtype)` (a view at a byte offset) and `arena_alignment`; micro-batching's
`copy_rows` and `accumulate`/`accumulation` (copy, add, scale over many tensors at once); and `fresh`, which a
runtime whose views remember a host value has, called when a planned output is handed out again.
"""
from __future__ import annotations

import contextlib
import os
import threading
import tracemalloc

import numpy as np

from tfplus import errors, threads
from tfplus.engine import paging
from tfplus.engine.replay import Merges, Recording
from tfplus.framework import Tensor
from tfplus.ops.fused_ops import on_groups, slot_refs
from tfplus.planner import chunking, compact
from tfplus.planner.crossbatch import Kept
from tfplus.planner.paging import STAGING
from tfplus.planner.plan import MemoryPlan
from tfplus.registry import kernel_variant


def install(session, fetches: list, p: MemoryPlan) -> Bound:
    """Makes `session` run `fetches` (the flat list it will be given) by plan `p` of the graph as built (not
    rewritten), e.g. one made with planner.plan(..., force=(k, c)) for a test or a benchmark."""
    return session._install([session.graph.as_graph_element(f) for f in fetches], p).bound


class _Arena:
    """The session's arena and the plans bound to it; it grows (and rebinds them) when a plan needs more."""

    def __init__(self, runtime):
        self.runtime, self.buffer, self.nbytes, self.bounds = runtime, None, -1, []
        self.lock = threading.RLock()

    def fit(self, p: MemoryPlan, bound: Bound) -> None:
        if p.arena_bytes > self.nbytes:
            self.buffer, self.nbytes = None, -1  # let the old arena go before the new one is allocated
            self.buffer, self.nbytes = _allocate(self.runtime, p.arena_bytes, p.alignment), p.arena_bytes
            for b in self.bounds:
                b.bind(self.buffer)
        self.bounds.append(bound)
        bound.bind(self.buffer)


def arena_of(executor) -> _Arena:
    """The executor's arena, made when its first plan is bound (Executor.clear, at Session.close, lets it go)."""
    if executor.arena is None:
        executor.arena = _Arena(executor.runtime)
    return executor.arena


def audit_step(session, fetches, feed_dict=None) -> dict[str, int]:
    """Runs one planned step and returns {op name: bytes its kernel allocated on its own}, for every kernel
    that allocated more than a few Python objects' worth: memory the plan cannot see (NumPy temporaries inside
    a kernel). The session needs a memory budget; the step is planned first if it is new.

        >>> with tf.Session(memory_budget="1GB") as sess:          # doctest: +SKIP
        ...     sess.run(init); print(audit_step(sess, [train_op, loss], feeds))
    """
    session.run(fetches, feed_dict)  # plan (and allocate the arena) outside the measurement
    bounds = [s.bound for s in session.steps if s.bound is not None]
    for b in bounds:
        b.audit, b.kernels = {}, {}
        b.version += 1  # the programs wrap their kernels again, audited
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        session.run(fetches, feed_dict)
    finally:
        if started:
            tracemalloc.stop()
    found: dict[str, int] = {}
    for b in bounds:
        found.update(b.audit)
        b.audit, b.kernels = None, {}
        b.version += 1
    return {name: n for name, n in sorted(found.items(), key=lambda kv: -kv[1]) if n > _AUDIT_SLACK}


_AUDIT_SLACK = 4096  # bytes: a kernel's own Python objects (views, small tuples) are not data


def measure_step(session, fetches, feed_dict) -> dict[str, int]:
    """Runs one step and measures its memory with tracemalloc, which must have been tracing since before the
    session allocated its variables and arena (and must not have traced the fed arrays' allocation):
    `held`, the NumPy data alive when the step starts (variables, optimizer slots, the arena, kernels'
    caches: tracemalloc's NumPy domain, so the planner's and the graph's Python objects are left out), less
    what earlier runs' fetches copied out for the caller (still held by it, e.g. the weights it read: its data,
    not the step's) and less `padding`, the bytes the arena's allocation takes beyond its size to align its
    start (the plan's alignment: NumPy aligns arrays to 16 bytes only); `during`, the most allocated on top of
    everything during the step (kernel temporaries, NumPy's ufunc buffers, fetched copies, the executor's
    Python objects); `feeds`, the fed arrays; `peak`, held + during + feeds, which is what a MemoryPlan's
    peak_bytes predicts; `pool_kept`, the bytes that the session's programs outside any plan keep from run to run
    (their static ops' small outputs: those of the program that computes a cond's predicate before a step is
    chosen, engine.step.taken), which `held` counts where they were allocated under the trace.

        >>> tracemalloc.start(16); sess = tf.Session(memory_budget="64MB"); sess.run(init)  # doctest: +SKIP
        >>> sess.run(step, feeds); measure_step(sess, step, feeds)["peak"]                 # doctest: +SKIP
    """
    if not tracemalloc.is_tracing():
        raise RuntimeError("measure_step: start tracemalloc before the session allocates its memory")
    # NOTE: a session plans a step at its first run, under the trace: the plans' own arrays (their live-bytes
    # timelines, kilobytes a plan) are the planner's, not the step's data; tracemalloc.start(frames) with enough
    # frames to reach the planner's (16) leaves them out.
    planner_files = os.path.join(os.path.dirname(chunking.__file__), "*")
    # The fetched values the caller still holds were copied by the runtime's copy_out: leave out what it allocated.
    copy_out = type(session.runtime).copy_out.__code__
    fetched = [tracemalloc.Filter(False, copy_out.co_filename, line, all_frames=True)
               for line in {line for _, _, line in copy_out.co_lines() if line is not None}]
    held = sum(t.size for t in tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain),
         tracemalloc.Filter(False, planner_files, all_frames=True), *fetched]).traces)
    arena = session.executor.arena
    # (the cpu runtime's arena is a view of the array allocated, its base: runtime.cpu.allocate_arena)
    padding = 0 if arena is None or arena.buffer is None or arena.buffer.base is None else \
        arena.buffer.base.nbytes - arena.buffer.nbytes
    held -= padding
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    session.run(fetches, feed_dict)
    during = tracemalloc.get_traced_memory()[1] - before
    feeds = sum(np.asarray(v).nbytes for v in (feed_dict or {}).values())
    kept = {id(b): b.nbytes for prog in session.executor.programs.values() if not prog.alloc.fixed
            for _, bufs in prog._specialized.values() for _, b in bufs if b.base is None}  # (a view holds none)
    return {"held": held, "during": during, "feeds": feeds, "peak": held + during + feeds, "padding": padding,
            "pool_kept": sum(kept.values())}


def measure_device_step(session, fetches, feed_dict) -> dict[str, int]:
    """measure_step for a device runtime with a memory ledger (OpenCLRuntime: in_use_bytes, peak_bytes):
    `held`, the device memory the tensors hold when the step starts (variables, optimizer slots, the arena);
    `peak`, the most they held at once during it (the uploaded batch included), which is what a MemoryPlan's
    peak_bytes predicts; `allocations`, the device buffers the step created (0 in a steady state)."""
    rt = session.runtime
    rt.synchronize()
    held, made = rt.in_use_bytes, rt.device_allocations
    rt.reset_peak()
    session.run(fetches, feed_dict)
    rt.synchronize()
    return {"held": held, "peak": rt.peak_bytes, "allocations": rt.device_allocations - made}


class Bound:
    """A MemoryPlan bound to an executor's runtime: the arena and a view for every planned buffer; the
    allocator of the programs that run the plan's phases."""

    fixed = True  # outputs are fixed views: a program binds them once
    feed_order: list | None = None  # the fed tensors in the order a whole-step tape takes them (_as_one_tape)
    lane = 0  # the copy of the streamed prefix's buffers it runs on (MemoryPlan.stream_lanes)
    lanes: list = []
    microbatch = 0  # the micro-batch the micro-batch run is on: accumulated gradients' ops add from the second on
    draw_step = None  # the micro-batched step being run: its random ops draw once for all its runs (random_stream)
    draw_slice = 0  # the micro-batch a run of it is on: a random op with rows draws that micro-batch's rows
    groups: dict = {}  # (phase, update op) -> the variables' groups it updates there (_share_groups)

    def __init__(self, p: MemoryPlan, executor):
        self.runtime, self.plan = executor.runtime, p
        self.kernels: dict = {}
        self.cursor: dict = {}
        self.version = 0  # bumped when the views or the kernel wrappers change: programs bind again
        # A device runtime's views may remember the host value last written to them (OpenCL set_host).
        self.fresh = self.runtime.fresh
        self.phase = 0
        self.audit: dict[str, int] | None = None  # op name -> bytes its kernel allocated, when auditing
        self.lanes = [_Lane(self, i, executor) for i in range(1, p.stream_lanes)]
        self.warm = False  # whether each lane has run once (their first runs record their fast loops in turn)
        self.executor = executor
        arena_of(executor).fit(p, self)
        self.groups = _share_groups(p)
        self.programs = [executor.compile(ph.fetches, ph.feeds, self, ph.order) for ph in p.phases]
        self.var_names = [n for prog in self.programs for n in prog.var_slots]  # what a whole-step tape fixes

    def bind(self, arena) -> None:
        """Makes a view of `arena` for every buffer of the plan."""
        rt, p = self.runtime, self.plan
        self.arena = arena
        self.outputs: list[dict[Tensor, object]] = []
        self.workspaces: list[dict] = []
        self.argmax: list[dict] = []  # per phase: pool and its argmax's last reader -> the argmax view (compact)
        self.pool_inputs: dict = {}  # pooled compact site -> its MaxPoolGrad's (pool output, gradient): _pooled
        self.tmp: dict = {}
        self.pieces: dict = {}  # accumulated gradient's op -> its piece view (planner.accumulate)
        self.kernels = {}
        self.merges = Merges()  # the micro-batches' merges, replayed when they take the same buffers
        self.whole = Recording()  # a micro-batched or streamed step's launches, all its runs' (_as_one_tape)
        self.ran = False  # whether that step ran on these views (its first run is not recorded)
        self.version += 1
        shift = self.lane * p.lane_bytes
        staged: dict = {}  # paged slot -> its view of its update's staging (planner.paging)
        for ph in p.phases[:1] if self.lane else p.phases:  # another lane runs the prefix only
            # A view per tensor, even where one writes over another's buffer: a kernel may rebind its output
            # view (the opencl Const kernel points it at the cached constant), which must not move the other.
            self.outputs.append({t: _view(rt, arena, b, shift) for t, b in ph.life.of_tensor.items()})
            ws = {op: [_view(rt, arena, b, shift) for b in bs] for op, bs in ph.life.workspaces.items()}
            for op in ph.accumulated:  # its piece, the op's last workspace, is for _accumulating only
                self.pieces[op] = ws[op].pop()
            for op, bs in ph.life.workspaces.items():  # a paged update's staging (its last): the slots' views
                if p.paging is not None and bs[-1].name.endswith(STAGING):
                    ws[op].pop()
                    staged.update((t.op.name, _slot_view(rt, arena, bs[-1].offset + shift, p.paging.slots[t.op.name]))
                                  for g in slot_refs(op) for t in g)
            for op, n in ph.life.chunks.items():
                if chunking.summed(op) and n > 1:
                    self.tmp[op] = ws[op].pop()
            self.workspaces.append(ws)
            self.argmax.append({op: _view(rt, arena, b, shift) for op, b in ph.argmax.items()})
        self.acc = {t: _view(rt, arena, b) for t, b in p.accumulators.items()}
        self.kept = {x: _view(rt, arena, b) for x, b in p.kept.items()}
        for lane in self.lanes:
            lane.bind(arena)
        if staged:
            paging.page_slots(self.executor, self, staged)

    # -- hooks the executor calls ----------------------------------------------------------------------------
    def output(self, op, k: int, shape, dtype):
        v = self.slot(op, k, shape, dtype)
        return v if self.fresh is None else self.fresh(v)

    def slot(self, op, k: int, shape, dtype):
        """The planned view of op's output k, as it is: output() also forgets what it held (runtime.fresh), which
        a program compiled after a run must not do before that run's fetches are read."""
        t = op.outputs[k]
        v = self.outputs[self.phase].get(t)
        if v is None or tuple(v.shape) != tuple(shape):
            planned = "no buffer" if v is None else f"shape {tuple(v.shape)}"
            raise errors.InvalidArgumentError(
                op.name, op.type, f"output {k} has shape {tuple(shape)} at run time but the memory plan has "
                f"{planned}; the planner's shape propagation and the executor disagree")
        return v

    def workspace(self, op, shape, dtype):
        bufs = self.workspaces[self.phase].get(op, ())
        i = self.cursor.get(op, 0)
        want = (tuple(int(d) for d in shape), np.dtype(getattr(dtype, "np", dtype)))
        if (self.phase, op) in self.groups and i < len(bufs) and bufs[i].dtype == want[1] and \
                len(want[0]) == len(bufs[i].shape) == 1 and want[0][0] <= bufs[i].shape[0]:
            # a share of a _FusedApply: its pieces are sized for its own largest variable, the buffer for the op's
            self.cursor[op] = i + 1
            b = self.plan.phases[self.phase].life.workspaces[op][i]
            return self.runtime.sub_buffer(self.arena, b.offset, want[0], b.dtype)
        if i >= len(bufs) or (tuple(bufs[i].shape), bufs[i].dtype) != want:
            declared = [(tuple(b.shape), str(b.dtype)) for b in bufs]
            raise RuntimeError(
                f"{op.type} '{op.name}': its {self.runtime.kernel_device} kernel asked for workspace #{i} "
                f"{want[0]} {want[1]} but tfplus.registry.WORKSPACES[({op.type!r}, "
                f"{self.runtime.kernel_device!r})] declares {declared or 'none'}; the declaration must list "
                "every ctx.workspace call of one kernel call, in order (a bug in the declaration or the "
                "kernel)")
        self.cursor[op] = i + 1
        return bufs[i]

    def kernel(self, op, kernel):
        """`kernel`, restarting the op's workspace cursor per call and split over the batch if planned so."""
        key = (self.phase, op, self.version)  # a new version wraps again (audit_step)
        wrapped = self.kernels.get(key)
        if wrapped is None:
            def restart():
                self.cursor[op] = 0
            life = self.plan.phases[self.phase].life
            n = life.chunks.get(op, 1)
            kernel = self._variant(op, kernel)
            if (self.phase, op) in self.groups:  # an update op split into shares (MemoryPlan.shares)
                kernel = _on_groups(kernel, op, self.groups[self.phase, op])
            div = life.scratch_ops.get(op, life.scratch)
            if div > 1 and op.type in chunking.CHUNKABLE:  # smaller chunks inside the kernel
                kernel = _with_attrs(kernel, chunking.attrs(op, div))
            if n > 1:
                spec = self.plan.phases[self.phase].specs
                size_in = chunking.CHUNKABLE[op.type][1]
                sizes = None if size_in is None else chunking.chunk_sizes(spec[op.inputs[size_in]].value, n)
                wrapped = chunking.chunked_kernel(kernel, op, n, sizes, self.tmp.get(op), restart)
            else:
                def wrapped(ctx, ins, outs, attrs):
                    restart()
                    kernel(ctx, ins, outs, attrs)
            if op in self.plan.phases[self.phase].accumulated:  # around the chunks: they sum into its output
                wrapped = self._accumulating(op, wrapped)
            if self.audit is not None:
                wrapped = self._audited(op, wrapped)
            self.kernels[key] = wrapped
        return wrapped

    def _variant(self, op, kernel):
        """The compact-state kernel variant (planner.compact) that the plan chose for `op`, the "folded" variant of
        an update whose gradients the micro-batches added into its slots (MemoryPlan.slot_folds), else `kernel`."""
        device = self.runtime.kernel_device
        if any(f.update is op for f in self.plan.slot_folds.values()):
            return kernel_variant(op.type, device, "folded")
        for s in self.plan.phases[self.phase].sites:
            if op not in (s.pool, s.pool_grad, s.relu_grad):
                continue
            argmax = self.argmax[self.phase][s.pool]
            if compact.pooled(s, device) and op is not s.pool:
                return self._pooled(s, op, argmax)
            variant = kernel_variant(op.type, device, "compact")
            if op is s.relu_grad:
                return variant
            return lambda ctx, ins, outs, attrs: variant(ctx, ins, outs, attrs, argmax)  # writes / reads argmax
        return kernel

    def _accumulating(self, op, kernel):
        """An accumulated gradient's op (planner.accumulate), `kernel` its wrapped kernel: on the first micro-batch
        `kernel` writes the accumulator (the output's view); on later ones the "accumulate" variant adds into it
        through the piece, or `kernel` writes the piece, which is then added."""
        site, piece = self.plan.phases[self.phase].accumulated[op][0], self.pieces[op]
        rt, i = self.runtime, site.grad.value_index
        if site.variant:
            adds = kernel_variant(op.type, rt.kernel_device, "accumulate")

        def run(ctx, ins, outs, attrs):
            if not self.microbatch:
                kernel(ctx, ins, outs, attrs)
            elif site.variant:
                adds(ctx, ins, outs, attrs, piece)
            else:
                into = list(outs)
                into[i] = piece
                kernel(ctx, ins, into, attrs)
                rt.add_into(outs[i], piece)
        return run

    def _pooled(self, s, op, argmax):
        """A pooled site's kernels (planner.compact.pooled): MaxPoolGrad launches nothing but hands its inputs
        (the pool output and its gradient, alive until the ReLU gradient by the plan) to the ReLU gradient's
        "pooled" variant, which writes what both would have."""
        if op is s.pool_grad:
            def hand_over(ctx, ins, outs, attrs):
                self.pool_inputs[s] = ins[1], ins[2]
            return hand_over
        variant = kernel_variant(op.type, self.runtime.kernel_device, "pooled")
        return lambda ctx, ins, outs, attrs: variant(ctx, ins, outs, attrs, *self.pool_inputs[s], argmax)

    def _audited(self, op, kernel):
        """`kernel`, recording the most memory it allocated beyond its planned buffers (tracemalloc)."""
        def run(ctx, ins, outs, attrs):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            kernel(ctx, ins, outs, attrs)
            extra = tracemalloc.get_traced_memory()[1] - before
            self.audit[op.name] = max(self.audit.get(op.name, 0), extra)
        return run

    # -- one step --------------------------------------------------------------------------------------------
    def run(self, feeds: dict) -> dict:
        """{tensor: buffer} for the plan's tensor fetches, from `feeds` ({Tensor: device buffer})."""
        m = self.plan.tensor_map  # a plan with recomputation runs a planning copy of the graph
        if not m:
            return self._run(feeds)
        out = self._run({m[t]: v for t, v in feeds.items()})
        return {t: out[c] for t, c in m.items() if c in out}

    def _run(self, feeds: dict) -> dict:
        p = self.plan
        if p.stream is not None:
            return self._streamed(feeds)
        if p.microbatches == 1:
            # one draw of each random op for the step: an unrolled loop's copies draw its iterations' at once
            self.draw_step = object()
            try:
                return self._phase(0, feeds)
            finally:
                self.draw_step = None
        return self._microbatched(feeds)

    def _microbatched(self, feeds: dict) -> dict:
        """A micro-batched step (`_passes`), replayed as one tape on a runtime that records launches (_as_one_tape)."""
        return self._as_one_tape(feeds, self._passes)

    def _as_one_tape(self, feeds: dict, passes) -> dict:
        """`passes(feeds)`, a step of several runs (a micro-batched or a streamed one); on a runtime that records
        launches (OpenCL), replayed as one tape of all its runs, merges and updates once two steps recorded the
        same launches: the Python between them (a program's replay and the merges' bookkeeping each run, ~60 us)
        would otherwise be host time of every run, on a step that a slow host's launches already bound. Not on
        the first step (the programs' first runs find their shapes), nor an audited or a traced one, nor one whose
        streamed prefix runs in lanes (on other threads, whose launches cannot go on this thread's tape)."""
        ex, rt, names, whole = self.programs[0].executor, self.runtime, self.var_names, self.whole
        if not self.ran or self.audit is not None or ex.trace is not None or not rt.records_launches \
                or self.lanes or whole.vars_at != ex.var_version and any(ex.vars.get(n) is None for n in names):
            self.ran = True
            return passes(feeds)

        ran: list = []

        def record():
            ran.append(passes(feeds))
            return ran[0], list(ran[0].values())
        if self.feed_order is None:  # the plan's feeds, in an order of their own (a caller's dict may reorder)
            self.feed_order = sorted(feeds, key=lambda t: t.name)
        if whole.run(rt, [feeds[t] for t in self.feed_order], lambda: [ex.vars[n] for n in names], ex.var_version,
                     record):
            return ran[0] if ran else whole.fetched
        return passes(feeds)

    def _passes(self, feeds: dict) -> dict:
        """The micro-batched step's runs: its statistics passes (planner.crossbatch: each over the micro-batches,
        their values summed in micro-batch order, means divided by their count, into the whole batch's, fed to the
        later runs; rows kept whole for later runs copied in a micro-batch at a time), the micro-batch run (gradients
        and fetches merged, some of them by statistics passes that computed them) and the update run; a variable
        whose gradient a pass finished and no later run reads is updated right after that pass (MemoryPlan.shares:
        the update op's kernel on its groups, the first share computing the rates the others read). Each run over
        its own count of micro-batches (MemoryPlan.run_microbatches), first scaling the gradient values it reads
        that a run of another count wrote to its own (MemoryPlan.rescale)."""
        p, rt = self.plan, self.runtime
        a = len(p.statistics)
        counts = p.run_microbatches or [p.microbatches] * (a + 1)
        batch_feeds = set(p.batch_feeds)
        # NOTE: a fed tensor that an update reads (tf.scatter_sub's indices: labels) has an accumulator too, its
        # micro-batches' rows concatenated: the runs read the feed, which that accumulator would hide until written
        known = {**self.acc, **feeds}

        def run(i: int, j: int, m: int, kept: dict) -> dict:  # phase i on micro-batch j of m rows: its rows of
            rows = {**known, **kept}                              # a fed (or kept) batch are a view of it
            self.draw_slice = j
            return self._phase(i, {t: rows[t][j * m:(j + 1) * m] if t in batch_feeds or t in kept else rows[t]
                                   for t in p.phases[i].feeds})
        out = {}
        self.draw_step = object()  # its random ops' draws: those of the unsplit step (KernelContext.random_draw)
        added = [x.grad for x, _ in p.phases[a].accumulated.values()]  # by their ops, into their accumulators
        slots = self._slots(counts)
        known.update((g, slot) for g, (slot, _) in slots.items())  # the update run's folded variant reads no grad
        for i in range(a + 1):
            k = counts[i]
            m = p.batch_size // k
            for factor in sorted({f for _, f in p.rescale[i]} if p.rescale else ()):
                self.merges.run(rt, "scale", [(self.kept[v] if isinstance(v, Kept) else self.acc[v], None)
                                              for v, f in p.rescale[i] if f == factor], factor)
            kept = {x.tensor: self.kept[x] for x in self.kept if x.writer < i <= x.last}
            keeps = [x for x in self.kept if x.writer == i and (i, x.tensor) not in p.written]
            fetched = {f for f in p.phases[i].fetches if isinstance(f, Tensor)}
            merged = [(t, acc) for t, acc in self.acc.items() if t in fetched and t not in added]
            merging = [(t, acc) for t, acc in merged if (i, t) not in p.written]  # the others are written there
            for j in range(k):
                self.microbatch = j if i == a else 0
                values = run(i, j, m, kept)
                for x in keeps:
                    rt.copy_rows(self.kept[x], j * m, values[x.tensor], 0, m)
                merge: dict[str, list] = {"copy": [], "add": [], "add_scale": [], "scale": []}
                for t, acc in merging:
                    src = values[t]
                    way = p.fetch_merge.get(t, "mean")
                    if way in ("concat", "concat_mean"):  # rows of the batch (a sparse gradient's: its own count)
                        n = src.shape[0]
                        rt.copy_rows(acc, j * n, src, 0, n)
                        if way == "concat_mean" and j == k - 1:  # a sparse gradient's rows, divided as the sums are
                            merge["scale"].append((acc, None))
                    elif way == "last":  # the same in every micro-batch: copied with the first one's copies
                        if j == 0:
                            merge["copy"].append((acc, src))
                    elif j == 0:
                        merge["copy"].append((acc, src))
                    else:  # a mean: summed over the micro-batches (k >= 2), divided by k with the last; a sum summed
                        merge["add_scale" if j == k - 1 and way == "mean" else "add"].append((acc, src))
                for g in [g for g in slots if g in fetched]:  # added into the momentum slot, averaged with the last
                    merge["add_scale" if j == k - 1 else "add"].append((slots[g][0], values[g]))
                for how, pairs in merge.items():
                    self.merges.run(rt, how, pairs, 1.0 / k)
            statistics = set(p.statistics[i]) if i < a else set()
            out.update((t, acc) for t, acc in merged if t not in statistics)
            for share in p.shares:  # updates whose gradients this run finished (planner.batch.update_groups)
                if share.after == i:
                    rates = self._phase(share.phase, {t: known[t] for t in p.phases[share.phase].feeds})
                    # the first share's rates, held for the later ones and the update run
                    self.merges.run(rt, "copy", [(self.acc[t], v) for t, v in rates.items()], 1.0)
        self.microbatch, self.draw_step, self.draw_slice = 0, None, 0
        self.merges.run(rt, "scale", [(self.acc[g], None) for g in added], 1.0 / k)
        if len(p.phases) > a + 1:
            out.update(self._phase(a + 1, {t: known[t] for t in p.phases[a + 1].feeds}))
        return out

    def _slots(self, counts: list[int]) -> dict:
        """{gradient: (its momentum slot's buffer, the run that merges it)} of the gradients added straight into
        their slots (MemoryPlan.slot_folds), each slot scaled first by its momentum times that run's micro-batch
        count k: the run's micro-batch gradients then add into it, and its last merge divides the sum by k,
        leaving momentum * slot + the batch's gradient (the update's own first half)."""
        p = self.plan
        if not p.slot_folds:
            return {}
        ex = self.programs[0].executor
        writer = {g: i for i, ph in enumerate(p.phases[:len(counts)]) for g in ph.fetches if g in p.slot_folds}
        slots = {g: (ex.read_variable(f.slot), writer[g]) for g, f in p.slot_folds.items()}
        by_factor: dict[float, list] = {}
        for g, f in p.slot_folds.items():
            by_factor.setdefault(f.momentum * counts[writer[g]], []).append((slots[g][0], None))
        for factor, pairs in sorted(by_factor.items()):
            self.merges.run(self.runtime, "scale", pairs, factor)
        return slots

    def _streamed(self, feeds: dict) -> dict:
        """A step with a streamed prefix (`_stream_passes`), replayed as one tape on a runtime that records
        launches (_as_one_tape)."""
        return self._as_one_tape(feeds, self._stream_passes)

    def _stream_passes(self, feeds: dict) -> dict:
        """A step with a streamed prefix (planner.stream): the prefix on each micro-batch's rows, its output's
        rows copied into the cut's full-batch buffer (and those of the tensors it keeps for its backward into
        theirs); the rest at full batch; then, if the prefix trains, its backward on each micro-batch's rows
        (weight gradients summed) and the updates."""
        p, rt, cut = self.plan, self.runtime, self.plan.stream
        k = p.stream_microbatches
        m = p.batch_size // k
        known = {**feeds, **self.acc}  # the cut and the summed gradients are fed from their buffers

        def run(i: int, j: int | None = None, lane: Bound = self) -> dict:
            return lane._phase(i, {t: known[t][j * m:(j + 1) * m] if j is not None and t in cut.rows else known[t]
                                   for t in p.phases[i].feeds})
        whole = self.acc[cut.tensor]
        lanes = [self] + self.lanes

        def prefix(i: int, js) -> None:  # lane i runs micro-batches js on its own buffers
            with threads.using(1) if self.lanes else contextlib.nullcontext():
                for j in js:
                    lanes[i].draw_slice = j  # its rows of the unsplit step's random draws (KernelContext.random_draw)
                    values = run(0, j, lanes[i])
                    rt.copy_rows(whole, j * m, values[cut.tensor], 0, m)
                    for t in cut.saved:  # kept for the prefix backward (planner.stream's Cut.saved)
                        rt.copy_rows(self.acc[t], j * m, values[t], 0, m)
        # Lanes run at once on the intra-op threads, each taking the next micro-batch when it gets free (a
        # micro-batch's result does not depend on its lane), once each has recorded its fast loop; the first run,
        # an audited or a traced one runs them in turn.
        self.draw_step = object()  # its random ops draw once for the step, as in the unsplit step
        if self.lanes and self.warm and self.audit is None and self.programs[0].executor.trace is None \
                and len(lanes) <= threads.current():
            shared = iter(range(k))  # next() on it is atomic under the GIL
            threads.run(lambda i: prefix(i, shared), range(len(lanes)))
        else:
            for i in range(len(lanes)):
                prefix(i, range(i, k, len(lanes)))
            self.warm = bool(self.lanes)
        self.draw_slice = 0  # the rest runs on the whole batch
        out = run(1)
        self.draw_step = None  # the prefix backward draws nothing (planner.stream)
        if not cut.backward:
            return out
        known.update(out)
        for j in range(k):
            sums = run(2, j)
            self.merges.run(rt, "add" if j else "copy", [(self.acc[t], sums[t]) for t in cut.partials], 1.0)
        out.update(run(3))
        return out

    def _phase(self, i: int, feeds: dict) -> dict:
        self.phase = i
        prog = self.programs[i]
        return dict(zip(prog.fetches, prog.replay(feeds)))

class _Lane(Bound):
    """Lane `lane` >= 1 of a plan whose streamed prefix runs in lanes (MemoryPlan.stream_lanes): the allocator
    of its own program of the prefix run, on its own copy of that run's buffers (lane * plan.lane_bytes further
    into the arena) and with its own workspace cursor, so that the lanes can run at once."""

    def __init__(self, bound: Bound, lane: int, executor):
        self.runtime, self.plan, self.lane, self.bound = bound.runtime, bound.plan, lane, bound
        self.kernels, self.cursor, self.phase, self.fresh = {}, {}, 0, bound.fresh
        ph = self.plan.phases[0]
        self.program = executor.compile(ph.fetches, ph.feeds, self, ph.order)

    @property
    def version(self) -> int:  # bumped with its bound's (Bound.bind binds the lanes; audit_step)
        return self.bound.version

    @version.setter
    def version(self, _) -> None:
        pass

    @property
    def audit(self):
        return self.bound.audit

    def _phase(self, i: int, feeds: dict) -> dict:
        return dict(zip(self.program.fetches, self.program.replay(feeds)))


def _share_groups(p: MemoryPlan) -> dict:
    """{(phase, update op): the variables' groups its kernel updates there} of a plan with early updates
    (MemoryPlan.shares): each share's, and the update run's, the rest."""
    if not p.shares:
        return {}
    out = {(s.phase, op): groups for s in p.shares for op, groups in s.groups.items()}
    update = len(p.statistics) + 1
    for op in {op for s in p.shares for op in s.groups}:
        done = {j for s in p.shares for j in s.groups.get(op, ())}
        count = op.attrs["num_vars"] if op.type == "_FusedApply" else 1
        out[update, op] = tuple(j for j in range(count) if j not in done)
    return out


def _on_groups(kernel, op, groups: tuple):
    """`kernel` of update op `op` on the variables of `groups` alone (apply_groups' indices; a single update's
    is 0): a share of a _FusedApply is the op's kernel on those groups' inputs, the scalars and the decay shared."""
    if op.type != "_FusedApply":
        return kernel if groups else (lambda ctx, ins, outs, attrs: None)
    if not groups:
        return lambda ctx, ins, outs, attrs: None

    def run(ctx, ins, outs, attrs):
        part, sub = on_groups(ins, attrs, groups)
        kernel(ctx, part, outs, sub)
    return run


def _with_attrs(kernel, attrs: dict):
    def run(ctx, ins, outs, _):
        kernel(ctx, ins, outs, attrs)
    return run


def _allocate(rt, nbytes: int, align: int):
    return rt.allocate_arena(nbytes, align)


def _slot_view(rt, arena, offset: int, slot: tuple):
    """A paged slot's view of its update's staging buffer at `offset` (planner.paging.Paging.slots: its offset in
    the staging, shape and dtype)."""
    at, shape, dtype = slot
    return rt.sub_buffer(arena, offset + at, shape, np.dtype(dtype))


def _view(rt, arena, b, shift: int = 0):
    """The view of buffer `b` (of a lane's copy `shift` bytes further, MemoryPlan.stream_lanes). A string tensor's
    is an array of its own (an assertion's message): its Python objects cannot live in the arena's bytes."""
    if b.dtype.np.kind == "O":
        return rt.allocate(b.shape, b.dtype)
    return rt.sub_buffer(arena, b.offset + shift, b.shape, b.dtype)
