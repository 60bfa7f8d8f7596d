"""The executor: compiles the ops one (fetches, feeds) pair needs into a flat program once, and replays it.

    >>> ex = Executor(get_runtime("cpu"))                                   # doctest: +SKIP
    >>> ex.run([y], {x: np.ones(3, np.float32)})                           # doctest: +SKIP
    [array([2., 2., 2.], dtype=float32)]

`compile` (a `Program`) resolves everything that does not change from one run to the next: the op order,
every op's kernel (the device's, the cpu fallback, the memory plan's variants and chunked wrappers), its
inputs and outputs as indices into one flat list of slots, variables and the ops that rebind them, the
release point of every tensor and one KernelContext per op. The output shapes are found by the first run
with a new signature (the fed shapes and the variables' shapes) and kept: later runs allocate by them
without running a shape function, except for the ops whose shapes depend on values only known at run
time (data-dependent outputs, shapes computed from fed values), which keep doing so.

Memory comes from an allocator: `Pool` (the runtime's own buffers, freed after their last use) or a memory
plan's arena (tfplus.engine.memory.Bound), whose outputs are fixed views bound once per program.

The fast loop of a pool program runs no static op (stateless, its value fixed per signature: constants, shapes,
arithmetic on them): the first run of a signature keeps their small outputs, later runs take them as they are
(`Program._specialize`); ops that only make views call no kernel.

A planned program (fixed buffers) on a runtime that records launches (OpenCL) runs its fast loop recording them,
and once two runs of a signature recorded the same launches, replays them instead of running the loop
(`Program._taped`, by engine.replay's rule): the launchers' Python is paid twice per signature, not per run.

A run takes the fast loop unless something needs the careful one (run first for a new signature, and for
programs that (re)create variables, read one before it exists, trace the step, or must raise at an op): the
careful loop does every check per op, as TF1's executor does, and is the reference for the fast one.
"""
from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from tfplus import debug, errors, threads
from tfplus.engine import paging
from tfplus.engine import step as step_mod
from tfplus.engine.replay import Recording
from tfplus.framework import Graph, Operation, Tensor, _fmt_shape, constant_value, needed_ops, topo_order
from tfplus.registry import TensorSpec, devices_with_kernel, find_kernel, kernel_dtype


class Draw(NamedTuple):
    """A random node's draw (KernelContext.random_draw): the Philox key, the run, the first element's counter;
    `again()`, the run a replay of the draw takes (advancing the node's counter if the draw did: `advances`)."""
    key: tuple[int, int]
    run: int
    first: int
    again: Callable[[], int]
    advances: bool


class KernelContext:
    """What a kernel may ask of the executor: its node, the runtime, a per-node random stream, scratch space.
    One per op of a compiled program, reused by every run."""

    __slots__ = ("op", "runtime", "_executor", "_alloc")

    def __init__(self, executor: Executor, op: Operation, alloc):
        self.op, self.runtime, self._executor, self._alloc = op, executor.runtime, executor, alloc

    @property
    def node_name(self) -> str:
        return self.op.name

    def random_stream(self, size: int) -> tuple[tuple[int, int], int, int]:
        """(Philox key, run, first) of this random node's draw of `size` numbers (kernels/numpy/random.py and
        kernels/opencl/random.cl draw element i from counter (first + i, attempt, run) under the key). The key is the
        op's seeds, or random ones fixed for the session if both are 0; the run counts the node's runs in this
        session, so each run draws new numbers and a new session starts over (as TF1). A micro-batched step draws
        once: each of its runs (micro-batches, statistics passes) takes the step's run, and a micro-batch of rows
        starts at its rows' place (`first`), so it draws the numbers of its rows in the unsplit step; so does a slice
        of a step on the cpu's worker processes (the parent counts the step's run: Executor.step_runs).
        A tape being recorded is refused (a replay would draw the recorded numbers again): a kernel that puts
        its draw on the tape takes random_draw instead."""
        d = self.random_draw(size)
        self.runtime.tape_refuse(f"random op '{self.op.name}' draws anew each run")
        return d.key, d.run, d.first

    def random_draw(self, size: int) -> Draw:
        """random_stream's draw, with what a replay of it needs: the caller makes a replay call `again`
        (opencl: runtime.tape_vary)."""
        streams = self._executor.rngs
        # Rows of the batch: a shape whose leading dimension the graph leaves open, as the batch's (planner.batch).
        # NOTE: a draw of such a shape that is not the micro-batch's rows would take a micro-batch's offset too.
        out = self.op.outputs[0]
        rowed = self._alloc.draw_step is not None and bool(out._shape) and out._shape[0] is None
        first = self._alloc.draw_slice * size if rowed else 0
        attrs = self.op.attrs
        # A copy of a loop body's op in a loop unrolled for `trips` iterations (engine.step._unrolled): the draw of
        # its `iteration` among the loop's, which its step draws at once (the first copy to draw advances by trips).
        trips, iteration = attrs.get("_trips", 1), attrs.get("_iteration")
        if attrs.get("_rows"):  # a map's copy in micro-batch j of _rows rows: the loop's iteration of its row, whose
            iteration += self._alloc.draw_slice * attrs["_rows"]  # draw has no rows of the batch
            first = 0
        drawn = attrs.get("_redraw")
        if drawn:  # a gradient recomputing a tf.cond branch or a loop's body: the original's draws, last first
            state = streams.get(drawn)
            if state is None:
                raise RuntimeError(f"random op '{self.op.name}' redraws the numbers of '{drawn}', which has not run")

            def taken() -> int:
                if iteration is not None:  # its forward iteration's, which the step's forward copies drew
                    return state[2] - trips + iteration
                return state[4].pop() if state[4] else state[2] - 1
            return Draw((state[0], state[1]), taken(), first, taken, False)
        name = attrs.get("_stream", self.op.name)
        state = streams.get(name)
        if state is None:
            seed, seed2 = self.op.attrs.get("seed", 0), self.op.attrs.get("seed2", 0)
            if not (seed or seed2):
                seed, seed2 = (int.from_bytes(os.urandom(4), "little") for _ in range(2))
            # 64-bit seeds fold into the 32-bit key words
            # A gradient's copy redraws this op's draws (attr _redrawn): the runs, newest last; bounded, as an
            # evaluation's runs are never taken.
            state = streams[name] = [(seed ^ (seed >> 32)) & 0xFFFFFFFF,
                                             (seed2 ^ (seed2 >> 32)) & 0xFFFFFFFF, 0, None,
                                             deque(maxlen=_REDRAWN_RUNS)]
        kept = state[4] if attrs.get("_redrawn") else None
        step = self._alloc.draw_step
        if step is None and iteration is not None:  # (engine.memory.Bound gives each run of a plan its step)
            raise RuntimeError(f"random op '{self.op.name}' of an unrolled tf.while_loop runs outside a planned "
                               "step, which alone tells its iterations' draws apart")
        advances = step is None or state[3] is not step  # only a (micro-batched) step's first draw advances
        offset = trips - (iteration or 0)  # its run: `offset` before the runs drawn so far
        if advances:
            state[2] += trips
            state[3] = step

        def again() -> int:
            if advances:
                state[2] += trips
            if kept is not None:
                kept.append(state[2] - offset)
            return state[2] - offset
        if kept is not None:
            kept.append(state[2] - offset)
        return Draw((state[0], state[1]), state[2] - offset, first, again, advances)

    def workspace(self, shape, dtype):
        """Scratch memory that lives only while this kernel runs (im2col columns, partial sums). Under a
        memory budget: the next buffer the planner reserved from the kernel's declaration (WORKSPACES)."""
        return self._alloc.workspace(self.op, shape, dtype)

    def run_subgraph(self, graph: Graph, feeds: dict, fetches: list) -> list:
        """Runs a control-flow sub-graph (a tf.cond branch, a tf.while_loop condition or body) on this
        session's device: `feeds` maps its placeholders to device buffers; returns the fetches' buffers."""
        return self._executor.run_subgraph(graph, feeds, fetches)


class Pool:
    """The allocator of the plain executor: every output and workspace a new runtime buffer."""

    # A run of a step split in slices, whose random draws are the step's: the cpu's step workers' (workers._drawing)
    draw_step = None
    draw_slice = 0  # the slice whose rows a run draws, in that step
    version = 0  # an arena's views change when it grows (Bound.version); the pool's never do
    fixed = False

    def __init__(self, runtime):
        self.runtime = runtime

    def output(self, op, k: int, shape, dtype):
        return self.runtime.allocate(shape, dtype)

    def workspace(self, op, shape, dtype):
        return self.runtime.allocate(shape, dtype)

    def kernel(self, op, kernel):
        return kernel


# The most signatures (fed shapes, variable shapes) a program keeps its fast loop for.
_SIGNATURES = 16
# The draws a random op keeps for a gradient's copy of it (a while loop's iterations, last first).
_REDRAWN_RUNS = 1 << 16

# The most bytes a static op's outputs may take to be kept from run to run (shapes, small constants).
_KEEP_BYTES = 1 << 16

# What the careful loop does with an op.
_RUN, _SKIP, _VARIABLE, _UNFED = range(4)


class _Op:
    """One op of a program: its kernel and context, and its inputs and outputs as slot indices."""

    __slots__ = ("op", "kind", "kernel", "ctx", "ins", "outs", "release", "refs", "reads", "dynamic", "static")


class Program:
    """The ops that `fetches` need given `feeds`, in `order`, compiled for `alloc` (see the module doc).
    `replay(feeds)` runs them and returns the fetched tensors' buffers, in the order of `fetches`."""

    def __init__(self, executor: Executor, order: list[Operation], fetches: list[Tensor], feeds, alloc):
        self.executor, self.order, self.alloc = executor, order, alloc
        self.fetches = fetches
        self.feeds = sorted(feeds, key=lambda t: (t.op._id, t.value_index))
        slot: dict[Tensor, int] = {}
        self.var_slots: dict[str, int] = {}  # VariableV2 name -> the slot its buffer is put in
        self.updates: set[str] = set()  # the variables its ops update in place

        def new(t=None) -> int:
            n = len(slot) + len(self.var_slots) + 1  # slot 0 takes the outputs of ops whose tensors are fed
            if t is not None:
                slot[t] = n
            return n
        self.feed_slots = [new(t) for t in self.feeds]
        fed = set(self.feeds)

        def var_slot(name: str) -> int:
            s = self.var_slots.get(name)
            if s is None:
                s = self.var_slots[name] = len(slot) + len(self.var_slots) + 1
            return s

        def source(t: Tensor) -> int:
            if t in slot:
                return slot[t]
            if t.op.type == "VariableV2":
                return var_slot(t.op.name)
            raise ValueError(f"{t.name} is read before it is computed (the program's order is wrong)")

        # Where a value input's value is fixed per signature (so the shape function's answer is too).
        determined: dict[Tensor, bool] = {t: False for t in fed}
        dynamic: set[Operation] = set()
        self.fast = True  # False: every run takes the careful loop
        self.ops: list[_Op] = []
        for op in order:
            r = _Op()
            r.op, r.kernel, r.ctx, r.dynamic = op, None, None, False
            r.refs, r.reads, r.release, r.static = (), (), (), False
            if op.outputs and all(t in fed for t in op.outputs):
                r.kind, r.ins, r.outs = _SKIP, (), ()
                self.ops.append(r)
                continue
            if op.type == "VariableV2":
                r.kind, r.ins, r.outs = _VARIABLE, (), (var_slot(op.name),)
                for t in op.outputs:
                    determined[t] = False
                self.ops.append(r)
                continue
            if op.type == "Placeholder":
                r.kind, r.ins, r.outs = _UNFED, (), tuple(new(t) for t in op.outputs)
                self.fast = False
                self.ops.append(r)
                continue
            op_def = op.op_def
            r.kind = _RUN
            refs = []
            for k in op_def.ref_inputs:
                t = op.inputs[k]
                if t.op.type != "VariableV2" or t in fed:
                    self.fast = False  # the careful loop raises, naming the op
                refs.append((k, t.op.name))
            r.refs = tuple(refs)
            self.updates.update(name for _, name in refs)
            if op.type in ("Assign", "IsVariableInitialized"):
                self.fast = False  # it may make a variable or change its shape; or read one that is not made yet
            r.ins = tuple(var_slot(t.op.name) if k in op_def.ref_inputs else source(t)
                          for k, t in enumerate(op.inputs))
            r.reads = tuple((k, t.op.name) for k, t in enumerate(op.inputs)
                            if t.op.type == "VariableV2" and t not in fed and k not in op_def.ref_inputs)
            r.outs = tuple(0 if t in fed else new(t) for t in op.outputs)
            n = len(op.inputs)
            values_known = all(determined.get(t, constant_value(t) is not None)
                               for k, t in enumerate(op.inputs)
                               if k in op_def.value_inputs or k - n in op_def.value_inputs)
            r.dynamic = (op_def.allocates_outputs or not values_known
                         or any(t.op in dynamic for t in op.inputs))
            if r.dynamic:
                dynamic.add(op)
            shape_only = "shape_only" in op_def.tags and not r.dynamic
            pure = not op_def.stateful and all(determined.get(t, constant_value(t) is not None)
                                               for t in op.inputs)
            for t in op.outputs:
                determined[t] = constant_value(t) is not None or shape_only or pure
            # Its outputs are the same every run of a signature: the fast loop keeps them (_specialize).
            r.static = (bool(op.outputs) and not r.dynamic and not op_def.stateful and not refs
                        and all(determined[t] for t in op.outputs) and 0 not in r.outs)
            self.ops.append(r)
        # Release points: a tensor's slot is emptied after its last reader, unless it is fetched.
        keep = set(fetches)
        last: dict[Tensor, int] = {}
        for i, op in enumerate(order):
            for t in op.inputs:
                last[t] = i
        self.release: list[list[Tensor]] = [[] for _ in order]  # the profiler's view (Tensors)
        for t, i in last.items():
            if t not in keep:
                self.release[i].append(t)
        for r, dead in zip(self.ops, self.release):
            r.release = tuple(slot[t] for t in dead if t in slot and t not in fed)
        self.fetch_slots = [(source(t), t.op.name if t.op.type == "VariableV2" and t not in fed else None)
                            for t in fetches]
        self.n_slots = len(slot) + len(self.var_slots) + 1
        self.bound = alloc if alloc.fixed else None  # the memory plan the profiler reports
        self._version = None
        self._specialized: dict[tuple, list] = {}  # signature -> the fast loop's steps, one per op run
        self.tapes: dict[tuple, Recording] = {}  # signature -> its recorded launches (a planned program's)

    # -- compiling what depends on the allocator ----------------------------------------------------------------
    def _bind(self) -> None:
        """Resolves every op's kernel through the allocator (again when the arena's views changed)."""
        ex, alloc = self.executor, self.alloc
        rt = ex.runtime
        for r in self.ops:
            if r.kind != _RUN:
                continue
            op = r.op
            kernel = find_kernel(op.type, rt.kernel_device, kernel_dtype(op))
            if kernel is None:  # opt-in: the cpu kernel on host copies
                kernel = rt.fallback_kernel(op.type, kernel_dtype(op))
            if kernel is None:
                r.kernel = None
                self.fast = False
                continue
            r.kernel = paging.kernel(ex, op, alloc.kernel(op, kernel), alloc) if r.refs and op.type != "Assign" \
                else alloc.kernel(op, kernel)
            r.ctx = KernelContext(ex, op, alloc)
        self._version = alloc.version
        self._specialized.clear()
        self.tapes.clear()

    def _maker(self, r: _Op, specs: list[tuple]):
        """A function of an op's inputs that returns its output buffers, for outputs of `specs` [(shape,
        dtype)]: views of an input (aliases), the arena's fixed views, or new buffers from the pool."""
        op = r.op
        rt, alloc = self.executor.runtime, self.alloc
        aliases = op.op_def.aliases
        if not aliases and not alloc.fixed:
            allocate = rt.allocate
            if len(specs) == 1:
                (shape, dtype), = specs
                return lambda ins: [allocate(shape, dtype)]
            return lambda ins: [allocate(s, d) for s, d in specs]
        view = rt.view
        fresh = rt.fresh if alloc.fixed else None
        parts = []
        for k, (shape, dtype) in enumerate(specs):
            if k in aliases:
                parts.append((aliases[k], shape, None))
            else:
                # slot(), not output(): the run whose record this is has not handed its fetches over yet, and
                # output() would make a host-held value among them (OpenCL set_host) read as the arena's bytes.
                buf = alloc.slot(op, k, shape, dtype) if alloc.fixed else None
                parts.append((None, (shape, dtype), buf))
        allocate = alloc.output

        def make(ins):
            outs = []
            for k, (a, shape, buf) in enumerate(parts):
                if a is not None:
                    outs.append(view(ins[a], shape))
                elif buf is None:
                    outs.append(allocate(op, k, *shape))
                else:
                    outs.append(buf if fresh is None else fresh(buf))
            return outs
        return make

    # -- running ------------------------------------------------------------------------------------------------
    def replay(self, feeds: dict) -> list:
        ex = self.executor
        if self._version != self.alloc.version:
            self._bind()
        slots = [None] * self.n_slots
        for s, t in zip(self.feed_slots, self.feeds):
            slots[s] = feeds[t]
        present = True
        variables, paged = ex.vars, ex.paged
        for name, s in self.var_slots.items():
            buf = slots[s] = variables.get(name)
            present = present and buf is not None
            if paged is not None and buf is not None and name in paged.host and name not in self.updates:
                slots[s] = ex.read_variable(name)  # read, not updated: its value, not its staging view
        if ex.trace is None and self.fast and present:
            # inter_op: its fast loop is in waves (a forked worker runs the parent's programs on one thread)
            key = (ex.var_epoch, ex.inter_op, *[slots[s].shape for s in self.feed_slots])
            hit = self._specialized.get(key)
            if hit is None:
                self._careful(slots, None, record := [])
                steps, kept = self._specialize(record)
                if ex.inter_op > 1 and not self.alloc.fixed:
                    steps = self._waves(steps, ex.inter_op)
                if len(self._specialized) >= _SIGNATURES:  # e.g. a variable reshaped every run
                    self._specialized.clear()
                self._specialized[key] = steps, kept
            else:
                steps, kept = hit
                for s, buf in kept:
                    slots[s] = buf
                if ex.inter_op > 1 and not self.alloc.fixed:
                    self._fast_waves(slots, steps, ex.inter_op)
                elif not (self.alloc.fixed and self._taped(key, slots, steps)):
                    self._fast(slots, steps)
        else:
            self._careful(slots, ex.trace, None)
        return [slots[s] if name is None else ex.read_variable(name) for s, name in self.fetch_slots]

    def _taped(self, key: tuple, slots: list, steps: list) -> bool:
        """Runs a planned program's signature by replaying its launches (a device runtime's tape, by the rule of
        engine.replay.Recording) once runs of the fast loop recorded the same ones; until then runs the fast
        loop, recording it. False: no tape for this run (the caller runs the fast loop)."""
        rt = self.executor.runtime
        t = self.tapes.get(key)
        if t is None:
            if not rt.records_launches:
                return False
            t = self.tapes[key] = Recording()

        def record():
            self._fast(slots, steps)
            given = set(self.feed_slots)
            fetched = [(s, slots[s]) for s, name in self.fetch_slots if name is None and s not in given]
            return fetched, [b for _, b in fetched]
        if step_mod.mark is not None:
            step_mod.mark("tape's run begins")
        ran = t.run(rt, [slots[s] for s in self.feed_slots], lambda: [slots[s] for s in self.var_slots.values()],
                    self.executor.var_version, record)
        if step_mod.mark is not None:
            step_mod.mark("tape's run returned")
        if ran and t.tape is not None:
            for s, buf in t.fetched:
                slots[s] = buf
        if ran and t.given_up and debug.on():
            print(f"tfplus: a step of {len(self.order)} ops runs without a tape: {t.why}", file=sys.stderr)
        return ran

    def _specialize(self, record: list) -> tuple[list, list]:
        """The fast loop's steps for a signature from its careful run's `record` [(output specs, outputs) per
        op], and the outputs it keeps [(slot, buffer)]: those of the static ops (r.static) whose outputs are
        small (an alias holds its input), which later runs take as they are instead of running the op.
        NOTE: from the pool, whose buffers nobody else writes while the program holds them; a memory plan's
        arena hands the same memory to later ops (and counts it as theirs), so there only outputs whose value
        the runtime holds apart from the arena are kept (runtime.held_apart: OpenCL's host values)."""
        pooled = not self.alloc.fixed
        apart = self.executor.runtime.held_apart
        kept: list = []
        steps: list = []
        carried: tuple = ()  # slots a skipped op released, released by the step before it (or after it)
        for i, (r, rec) in enumerate(zip(self.ops, record)):
            if r.kind != _RUN:
                continue
            specs, outs = rec
            if (r.static and specs is not None and (pooled or (apart and all(map(apart, outs))))
                    and sum(_nbytes(shape, dtype) for shape, dtype in specs) <= _KEEP_BYTES):
                kept += zip(r.outs, outs)
                if steps:
                    steps[-1] = (*steps[-1][:7], steps[-1][7] + r.release)
                else:
                    carried += r.release
                continue
            make, kernel = self._dynamic_maker(r) if r.dynamic else self._maker(r, specs), r.kernel
            if (pooled and not r.dynamic and "view" in r.op.op_def.tags
                    and len(specs) == len(r.op.op_def.aliases)):
                make, kernel = self._view_maker(r, specs), None  # the views are all there is to do
            steps.append((i, make, kernel, r.ctx, r.op.attrs, r.ins, r.outs, r.release + carried))
            carried = ()
        return steps, kept

    def _view_maker(self, r: _Op, specs: list[tuple]):
        """_maker for an op whose outputs are all views of its inputs."""
        view, aliases = self.executor.runtime.view, r.op.op_def.aliases
        if len(specs) == 1:
            (shape, _), a = specs[0], aliases[0]
            return lambda ins: [view(ins[a], shape)]
        parts = [(aliases[k], shape) for k, (shape, _) in enumerate(specs)]
        return lambda ins: [view(ins[a], shape) for a, shape in parts]

    def _dynamic_maker(self, r: _Op):
        ex = self.executor
        return lambda ins: ex.outputs(r.op, ins, self.alloc)

    def _fast(self, slots: list, steps: list) -> None:
        """The loop of a run whose signature was seen: no checks, no shape functions, no dict lookups."""
        i = 0
        try:
            for i, make, kernel, ctx, attrs, ins_at, outs_at, release in steps:  # noqa: B007  i: the except
                ins = [slots[s] for s in ins_at]
                outs = make(ins)
                if kernel is not None:  # None: an op of views only (_specialize)
                    kernel(ctx, ins, outs, attrs)
                for s, buf in zip(outs_at, outs):
                    slots[s] = buf
                for s in release:
                    slots[s] = None
        except errors.OpError as e:
            op = self.ops[i].op
            if e.node_name is None:
                raise type(e)(op.name, op.type, e.message) from None
            raise
        except (ValueError, TypeError, IndexError, FloatingPointError) as e:
            op = self.ops[i].op
            raise errors.InvalidArgumentError(op.name, op.type, f"{type(e).__name__}: {e}") from e

    # -- inter-op parallelism (the cpu device, the runtime's pool) ------------------------------------------------
    def _waves(self, steps: list, width: int) -> list[list]:
        """The fast loop's steps put in waves of ops that may run at once, each op as early as it can go (its
        wave follows those of the ops making its inputs, of its control inputs, and, for a variable, of the
        ops before it in the compiled order that update it, or read it when this op updates it); a
        control-flow op runs alone. Each step's last element becomes the slots emptied after its wave."""
        view_of = {s: name for name, s in self.var_slots.items()}  # slot -> the variable it is a view of
        wave_of_slot: dict[int, int] = {}
        wave_of_op: dict[Operation, int] = {}
        last_write: dict[str, int] = {}  # variable -> the wave of its latest update so far
        last_read: dict[str, int] = {}  # variable -> the latest wave reading it since then
        floor = 0  # after a control-flow op
        placed = []
        for st in steps:
            r = self.ops[st[0]]
            op = r.op
            reads = {view_of[s] for s in r.ins if s in view_of}
            writes = {name for _, name in r.refs}
            after = [wave_of_slot.get(s, -1) for s in r.ins]
            after += [wave_of_op.get(c, -1) for c in op.control_inputs]
            after += [last_write.get(v, -1) for v in reads | writes]
            after += [last_read.get(v, -1) for v in writes]
            w = max(floor, 1 + max(after, default=-1))
            if op.op_def.allocates_outputs:
                w = max([w, *wave_of_op.values()]) + 1 if wave_of_op else w
                floor = w + 1
            wave_of_op[op] = w
            for s in r.outs:
                wave_of_slot[s] = w
            for v in reads:
                last_read[v] = max(last_read.get(v, -1), w)
            for v in writes:
                last_write[v], last_read[v] = w, -1
            for k, a in op.op_def.aliases.items():  # Identity, Reshape, an update's output: views
                if r.ins[a] in view_of:
                    view_of[r.outs[k]] = view_of[r.ins[a]]
            placed.append((w, st))
        # A tensor is released after the last wave that reads it (its last reader in the compiled order may
        # run in an earlier wave than another).
        releasable = {s for st in steps for s in st[7]}
        last_use: dict[int, int] = {}
        for w, st in placed:
            for s in st[5]:
                if s in releasable:
                    last_use[s] = max(last_use.get(s, -1), w)
        levels: dict[int, list] = {}
        for w, st in placed:
            levels.setdefault(w, []).append(st)
        dead: dict[int, list] = {}
        for s, w in last_use.items():
            dead.setdefault(w, []).append(s)
        waves = []
        for w in sorted(levels):
            ops = levels[w]
            chunks = [ops[j:j + width] for j in range(0, len(ops), width)]
            for j, chunk in enumerate(chunks):
                release = tuple(dead.get(w, ())) if j == len(chunks) - 1 else ()
                waves.append(([st[:7] for st in chunk], release))
        return waves

    def _fast_waves(self, slots: list, waves: list, width: int) -> None:
        """The fast loop, each wave's ops at once on the inter-op pool. Each op's kernel splits its work for
        the session's intra-op threads as it does in the sequential loop, so the results are the same bits."""
        intra = threads.current()
        ops = self.ops

        def one(st):
            i, make, kernel, ctx, attrs, ins_at, outs_at = st
            with threads.using(intra):
                try:
                    ins = [slots[s] for s in ins_at]
                    outs = make(ins)
                    if kernel is not None:
                        kernel(ctx, ins, outs, attrs)
                except errors.OpError as e:
                    if e.node_name is None:
                        raise type(e)(ops[i].op.name, ops[i].op.type, e.message) from None
                    raise
                except (ValueError, TypeError, IndexError, FloatingPointError) as e:
                    raise errors.InvalidArgumentError(ops[i].op.name, ops[i].op.type,
                                                      f"{type(e).__name__}: {e}") from e
            for s, buf in zip(outs_at, outs):
                slots[s] = buf
        pool = _inter_pool(width)
        for wave, release in waves:
            if len(wave) == 1:
                one(wave[0])
            else:
                pool.run(one, wave)
            for s in release:
                slots[s] = None

    def _careful(self, slots: list, trace, record: list | None) -> None:
        """The loop that checks everything per op (see the module doc); with `record`, appends each op's
        output (shape, dtype)s and output buffers (None for the ops that run nothing) for the fast loop."""
        ex = self.executor
        rt = ex.runtime
        if trace is not None:
            trace.mark(self, {t: slots[s] for t, s in zip(self.feeds, self.feed_slots)})
        for i, r in enumerate(self.ops):
            op = r.op
            if r.kind != _RUN:
                if record is not None:
                    record.append(None)
                if r.kind == _UNFED:
                    raise errors.InvalidArgumentError(
                        op.name, op.type, f"You must feed a value for placeholder tensor '{op.name}' with dtype "
                        f"{op.attrs['dtype'].name} and shape {_fmt_shape(op.attrs['shape'])}")
                continue
            ins = [slots[s] for s in r.ins]
            for k, name in r.reads:
                ins[k] = ex.read_variable(name)
            for k, _ in r.refs:
                ins[k] = ex.ref(op, k, ins)
            if op.op_def.allocates_outputs:
                outs, specs = [None] * len(op.outputs), None
            else:
                specs = ex.output_specs(op, ins)
                outs = ex.allocate_outputs(op, specs, ins, self.alloc)
            if record is not None:
                record.append((specs, outs))
            if r.kernel is None:
                kd = rt.kernel_device
                raise NotImplementedError(
                    f"{op.type} '{op.name}': no {kd} kernel for dtype {kernel_dtype(op).name}; "
                    f"devices with a kernel for {op.type}: {devices_with_kernel(op.type) or 'none'}")
            try:
                r.kernel(r.ctx, ins, outs, op.attrs)
            except errors.OpError as e:
                if e.node_name is None:
                    raise type(e)(op.name, op.type, e.message) from None
                raise
            except (ValueError, TypeError, IndexError, FloatingPointError) as e:
                raise errors.InvalidArgumentError(op.name, op.type, f"{type(e).__name__}: {e}") from e
            if op.type == "Assign":
                ex.assigned(op.inputs[0].op.name, ins[0])
                slots[r.ins[0]] = ins[0]
            for s, buf in zip(r.outs, outs):
                slots[s] = buf
            for s in r.release:
                slots[s] = None
            if trace is not None:
                trace.op_done(i, op, ins, outs)


class Executor:
    """A session's device state (variables, random streams) and its compiled programs."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.vars: dict[str, object] = {}  # VariableV2 node name -> buffer
        self.var_epoch = 0  # bumped when a variable is made or changes shape: programs re-find their shapes
        self.var_version = 0  # bumped when a variable gets another buffer: replayed tapes check their places
        self.rngs: dict[str, list] = {}  # random node -> [key word 0, key word 1, runs so far, step of the last run]
        self.programs: dict[tuple, Program] = {}  # (fetch ids, fed tensor ids[, sub-graph id]) -> Program
        # The memory plans' arena (engine.memory._Arena), made when a first plan is bound: shared by the session's
        # planned steps and released with its programs.
        self.arena = None
        # (op, input shapes[, value inputs' values]) -> output (shape, dtype)s, for the careful loop
        self.out_specs: dict[tuple, list[tuple]] = {}
        self.pool = Pool(runtime)
        # TF1's inter_op_parallelism_threads: > 1 runs independent ops of a step at once (the cpu device, steps
        # without a memory plan: the plan's arena reuses memory in the compiled order).
        self.inter_op = 1
        self.trace = None  # the running step's tfplus.profiler.StepTracer, when traced
        self.paged = None  # optimizer slots kept in host memory (tfplus.engine.paging.Paged), once a plan pages them

    def compile(self, fetches: list, feeds, alloc=None, order: list[Operation] | None = None,
                done: frozenset = frozenset()) -> Program:
        """The program that evaluates `fetches` (Tensors and Operations) from the tensors `feeds`: `order` (by
        default every op they need, less the control inputs `done` ran already, in topological order), memory from
        `alloc` (default: the pool)."""
        # NOTE: `fetches` are already in the step's rewritten graph (tfplus.engine.rewrite, applied by the Session
        # before the plain and the planned path alike, so that a memory plan is made for the ops that run).
        if order is None:
            order = topo_order(needed_ops(fetches, set(feeds), done))
        return Program(self, order, [f for f in fetches if isinstance(f, Tensor)], feeds, alloc or self.pool)

    def run(self, fetches: list, feeds: dict, done: frozenset = frozenset()) -> list:
        """Buffers of the Tensors among `fetches`, in order, from `feeds` ({Tensor: device buffer}); the control
        inputs `done` ran already (a split step's update run: planner.batch.Split.done)."""
        return self.program(fetches, feeds, done).replay(feeds)

    def program(self, fetches: list, feeds, done: frozenset = frozenset()) -> Program:
        """The pool program of `fetches` given the tensors `feeds`, compiled once for any fed shapes."""
        key = (tuple(id(f) for f in fetches), tuple(sorted(id(t) for t in feeds)), tuple(sorted(id(c) for c in done)))
        prog = self.programs.get(key)
        if prog is None:
            prog = self.programs[key] = self.compile(fetches, feeds, done=done)
        return prog

    def run_subgraph(self, graph: Graph, feeds: dict, fetches: list) -> list:
        """Executes the ops of `graph` that `fetches` need, from device-buffer `feeds` (see KernelContext).
        NOTE: a sub-graph runs from the pool and untraced: its buffers are not in the step's memory plan, and
        the trace shows the control-flow op as one op."""
        key = (id(graph), tuple(id(f) for f in fetches), tuple(sorted(id(t) for t in feeds)))
        prog = self.programs.get(key)
        if prog is None:
            prog = self.programs[key] = self.compile(fetches, feeds)
        trace, self.trace = self.trace, None
        try:
            return prog.replay(feeds)
        finally:
            self.trace = trace

    def clear(self) -> None:
        self.paged = None
        self.vars.clear()
        self.var_version += 1
        self.programs.clear()
        self.arena = None
        self.out_specs.clear()

    # -- variables ----------------------------------------------------------------------------------------------
    def read_variable(self, name: str):
        """The buffer holding variable `name` (a paged slot's value: a fresh copy of its host array)."""
        buf = self.vars.get(name)
        if buf is None:
            raise errors.FailedPreconditionError(
                name, "VariableV2", f"Attempting to use uninitialized value {name}; "
                "run tf.global_variables_initializer() (or restore a checkpoint) first")
        if self.paged is not None and name in self.paged.host:
            return self.runtime.copy_in(self.paged.value(name).copy())
        return buf

    def variable_value(self, name: str):
        """A host copy of variable `name`'s value, or None where it is not made."""
        if self.paged is not None and name in self.paged.host:
            return self.paged.value(name).copy()
        buf = self.vars.get(name)
        return None if buf is None else self.runtime.copy_out(buf)

    def ref(self, op: Operation, k: int, ins: list):
        """The buffer of the variable behind ref input k; Assign creates it (or replaces it on a new shape)."""
        t = op.inputs[k]
        # In a control-flow sub-graph an outer variable arrives through its capture placeholder: the op updates the
        # variable itself (ExponentialMovingAverage.apply in a tf.cond branch).
        while t.op.type == "Placeholder" and hasattr(t.graph, "capture_source"):
            source = t.graph.capture_source(t)
            if source is None:
                break
            t = source
        var = t.op
        if var.type != "VariableV2":
            raise errors.InvalidArgumentError(op.name, op.type, f"input '{t.name}' must be a variable, "
                                              f"got a {var.type} output")
        buf = self.vars.get(var.name)
        if op.type == "Assign" and self.paged is not None and var.name in self.paged.views:
            buf = None  # a buffer of its own (assigned() takes it home): the staging view is the paging plan's
        if op.type == "Assign":
            shape = tuple(ins[1].shape)
            if buf is None or tuple(buf.shape) != shape:
                buf = self.runtime.allocate(shape, t.dtype)
            return buf
        if buf is None and op.type == "IsVariableInitialized":
            return None
        if buf is None:
            raise errors.FailedPreconditionError(
                var.name, "VariableV2", f"Attempting to use uninitialized value {var.name} (in {op.type} "
                f"'{op.name}'); run tf.global_variables_initializer() first")
        return buf

    def assigned(self, name: str, buf) -> None:
        """Variable `name` lives in `buf` from now on (an Assign's output, the workers' shared memory)."""
        paged = self.paged
        if paged is not None and name in paged.views:
            if tuple(buf.shape) != tuple(paged.views[name].shape):
                raise errors.InvalidArgumentError(name, "VariableV2", f"the paged optimizer slot has shape "
                                                  f"{tuple(paged.views[name].shape)}; an Assign cannot reshape it")
            paged.take(name, buf)  # the value goes home; the executor keeps the staging view
            buf = paged.views[name]
        old = self.vars.get(name)
        if old is None or tuple(old.shape) != tuple(buf.shape):
            self.var_epoch += 1
        if old is not buf:
            self.var_version += 1
        self.vars[name] = buf

    # -- random streams -----------------------------------------------------------------------------------------
    def step_runs(self, names: list[str]) -> list[int]:
        """The runs random nodes `names` draw in a step run in slices by other processes (tfplus.engine.workers):
        each stream advanced once, as a run of the unsplit step advances it. The nodes have drawn before (their
        keys are made)."""
        runs = []
        for name in names:
            state = self.rngs[name]
            state[2], state[3] = state[2] + 1, None
            runs.append(state[2] - 1)
        return runs

    def take_runs(self, names: list[str], runs, step: object) -> None:
        """In a process running a slice of a step (tfplus.engine.workers): random nodes `names` draw runs `runs`
        (step_runs' in the parent) in the runs of the allocator whose draw_step is `step`."""
        for name, run in zip(names, runs):
            state = self.rngs[name]
            state[2], state[3] = int(run) + 1, step

    # -- output shapes ------------------------------------------------------------------------------------------
    def output_specs(self, op: Operation, ins: list) -> list[tuple]:
        op_def = op.op_def
        # Shape functions cost more than most kernels of a small step, so each op keeps their result per input
        # shapes (input dtypes are fixed by the graph), and per value for the inputs whose values they read.
        key = (op, *[b.shape for b in ins])
        given = None
        if op_def.value_inputs:
            given = self._value_inputs(op, ins)
            key += tuple(None if v is None else (v.dtype.str, v.shape, v.tobytes()) for v in given)
        specs = self.out_specs.get(key)
        if specs is None:
            specs = self.out_specs[key] = _infer_outputs(op, ins, given)
        return specs

    def allocate_outputs(self, op: Operation, specs: list[tuple], ins: list, alloc) -> list:
        aliases = op.op_def.aliases
        return [self.runtime.view(ins[aliases[k]], shape) if k in aliases else alloc.output(op, k, shape, dtype)
                for k, (shape, dtype) in enumerate(specs)]

    def outputs(self, op: Operation, ins: list, alloc) -> list:
        """An op's output buffers found the careful way (the fast loop's dynamic-shape ops)."""
        if op.op_def.allocates_outputs:
            return [None] * len(op.outputs)
        return self.allocate_outputs(op, self.output_specs(op, ins), ins, alloc)

    def _value_inputs(self, op: Operation, ins) -> list:
        """The values of the inputs the shape function reads (op_def.value_inputs), None for the others."""
        value_inputs, n = op.op_def.value_inputs, len(ins)
        values = []
        for k, (t, buf) in enumerate(zip(op.inputs, ins)):
            value = None
            if k in value_inputs or k - n in value_inputs:  # negative: from the end
                value = constant_value(t)
                if value is None:
                    value = self.runtime.copy_out(buf)
            values.append(value)
        return values


_inter_pools: dict[int, threads._Pool] = {}
_inter_lock = threading.Lock()


def _inter_pool(n: int) -> threads._Pool:
    """The inter-op pool of `n` threads, shared by sessions; apart from the intra-op pools, which the ops it
    runs call into (one pool for both would wait on itself)."""
    with _inter_lock:
        pool = _inter_pools.get(n)
        if pool is None:
            pool = _inter_pools[n] = threads._Pool(n)
    return pool


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's workers
    os.register_at_fork(after_in_child=_inter_pools.clear)


def _nbytes(shape: tuple, dtype) -> int:
    n = dtype.size  # a tfplus DType (the output specs')
    for d in shape:
        n *= d
    return n


def _infer_outputs(op: Operation, ins, given) -> list[tuple]:
    """Runs the op's shape function on the run's input shapes: [(shape, dtype)] per output."""
    given = given or [None] * len(ins)
    specs = [TensorSpec(tuple(buf.shape), t.dtype, v) for t, buf, v in zip(op.inputs, ins, given)]
    try:
        out_specs = op.op_def.shape_fn(specs, op.attrs)
    except (ValueError, TypeError) as e:
        shapes = ", ".join(f"{t.name} {_fmt_shape(s.shape)}" for t, s in zip(op.inputs, specs))
        raise errors.InvalidArgumentError(op.name, op.type, f"{e} (inputs: {shapes})") from None
    for k, s in enumerate(out_specs):
        if s.shape is None or None in s.shape:
            raise errors.InvalidArgumentError(op.name, op.type, f"output {k} has unknown shape "
                                              f"{_fmt_shape(s.shape)} at run time")
    return [(tuple(s.shape), s.dtype) for s in out_specs]
