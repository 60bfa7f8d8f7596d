"""A compiled step: what a Session runs for one (fetches, fed tensors, fed shapes), decided once.

    >>> with tf.Session() as sess:                                          # doctest: +SKIP
    ...     sess.run(y, {x: [1.0]}); [s.driver for s in sess.steps]
    ['plain']

The session compiles a step the first time it sees its fetches, fed tensors and their shapes: the graph rewrite
(engine.rewrite) gives the fetches and feeds it runs, and the session's configuration the driver that runs them:
- "plan": by a memory plan within the session's budget (engine.memory.Bound on the executor's arena);
- "workers": split over the cpu worker processes (engine.workers) when they take the step, else plainly;
- "replay": plainly PLAIN_RUNS times, then by an unconstrained plan, whose buffers stay put from run to run so
  that the device replays its recorded launches; a step the planner cannot plan (control flow) stays plain
  (TFPLUS_DEBUG=1 says why);
- "plain": the executor's program, its memory from the runtime's pool.
A budgeted step's tf.conds (If ops) whose predicates follow from fed scalars and constants alone (TF1's
`is_training` placeholder) are resolved before planning: the session keys the step by the predicates' values of the
run (fed_conds, taken) and plans a copy of the step's graph with each cond's taken branch inlined (resolve_conds),
so that the planner sees straight-line code; a step fed True and one fed False are two steps, two plans. Its
tf.while_loops whose trip counts follow from the fed shapes and constants (a dynamic_rnn over a fed time axis) are
then unrolled, and its conds on constants folded (resolve_static): the same for every run of its shapes. One that
does not fit its budget so with maps of the batch's rows in it (tf.map_fn over the batch: planner.maps) is planned
in k micro-batches with them unrolled for a micro-batch's rows, the fewest k that fits (Step.mapped).
A traced run (tfplus.profiler) runs plainly where the workers would take it or no plan is bound yet.

`run(feeds)` returns the tensor fetches' values copied to the host: a planned step's before the arena's lock is
released (the next planned run writes over them), the others' while the session holds the runtime's step lock.
"""
from __future__ import annotations

import sys

import numpy as np

from tfplus import debug
from tfplus.framework import Graph, Operation, Tensor, needed_ops, topo_order
from tfplus.registry import has_tag

# Plain runs of a step before the "replay" driver gives it a plan.
PLAIN_RUNS = 1

# A function noting that the host reached a label of a step's run (`mark("feeds uploaded")`), or None: with
# TFPLUS_ALLREDUCE_TRACE=1, tfplus.distributed.init installs its trace's, which times the host's path between
# two steps' all-reduces through these labels (session.run's parts, beside the trainer's hooks).
mark = None


class Step:
    """One compiled (fetches, fed tensors, fed shapes) of a session: `fetches` and `feed_shapes` are the rewritten
    step's (`rewrite`: the engine.rewrite.Rewritten, None when the graph runs as built), `driver` runs it, `bound`
    is its memory plan bound to the arena (None until planned; `plan` its MemoryPlan), `program` its pool program
    (None until it runs plainly) and `plain_runs` its plain runs before the "replay" driver planned it (-1: the
    planner could not plan it, it runs plainly for good)."""

    # A budgeted step's rewrites for k micro-batches of its batch, its maps of the rows unrolled for them
    # (resolve_static's microbatches), k ascending, or None: tried where the step does not fit its budget otherwise.
    mapped = None

    def __init__(self, executor, flat: list, shapes: dict, rewrite, driver: str, graph, budget=None, workers=None):
        self.executor, self.driver = executor, driver
        # NOTE: holds the given tensors, whose ids key the step in the session's cache, so no other takes them.
        self._given = flat, dict(shapes)
        self._adopt(rewrite, graph)
        self.budget, self.workers = budget, workers
        self.bound = self.program = None
        self.plain_runs = 0
        self._copy_out = executor.runtime.copy_out
        self._drive = {"plan": self._planned, "workers": self._on_workers, "replay": self._replayed,
                       "plain": self._plain}[driver]

    def _adopt(self, rewrite, graph=None) -> None:
        """Runs the given fetches and feeds as `rewrite` (an engine.rewrite.Rewritten, None: as built) has them."""
        flat, shapes = self._given
        self.rewrite = rewrite
        element = self._element = None if rewrite is None else rewrite.element
        self.fetches = flat if element is None else [element[f] for f in flat]
        self.feed_shapes = {t if element is None else element[t]: tuple(s) for t, s in shapes.items()}
        self.tensors = [f for f in self.fetches if isinstance(f, Tensor)]
        self.graph = self.fetches[0].graph if self.fetches else graph or self.graph

    @property
    def plan(self):
        """The MemoryPlan it runs by (tfplus.planner), or None."""
        return None if self.bound is None else self.bound.plan

    @property
    def programs(self) -> list:
        """The executor programs it has run: its memory plan's phases (and lanes), its pool program."""
        progs = [] if self.bound is None else self.bound.programs + [lane.program for lane in self.bound.lanes]
        return progs if self.program is None else progs + [self.program]

    def run(self, feeds: dict) -> list:
        """The values of its tensor fetches, in order, from `feeds` ({given Tensor: device buffer})."""
        if self.bound is None and self.driver == "plan":  # (first: the plan may run the step as another rewrite)
            self.use_plan(self._make_plan(self.budget))
        if self._element is not None:
            feeds = {self._element[t]: v for t, v in feeds.items()}
        return self._drive(feeds)

    def make_plan(self):
        """The MemoryPlan the step would run by within its budget, made now and not bound (nothing allocated):
        for a caller that plans before it starts tracing memory (tracemalloc slows the planner ~tenfold); bind it
        with use_plan."""
        return self._make_plan(self.budget)

    def use_plan(self, p):
        """Runs the step by MemoryPlan `p` (made for its fetches and feed shapes) from now on; its Bound."""
        from tfplus.engine import memory
        ex = self.executor
        with memory.arena_of(ex).lock:
            self.bound = memory.Bound(p, ex)
        return self.bound

    # -- the drivers -----------------------------------------------------------------------------------------
    def _plain(self, feeds: dict) -> list:
        prog = self.program
        if prog is None:
            prog = self.program = self.executor.program(self.fetches, feeds)
        copy_out = self._copy_out
        return [copy_out(b) for b in prog.replay(feeds)]

    def _on_workers(self, feeds: dict) -> list:
        if self.executor.trace is None:
            bufs = self.workers.run(self.fetches, feeds)
            if bufs is not None:  # None: the step runs in this process
                copy_out = self._copy_out
                return [copy_out(b) for b in bufs]
        return self._plain(feeds)

    def _planned(self, feeds: dict) -> list:
        bound = self.bound
        if bound is None:
            bound = self.use_plan(self._make_plan(self.budget))
        ex = self.executor
        with ex.arena.lock:
            if mark is not None:
                mark("plan's run begins")
            values = bound.run(feeds)
            if mark is not None:
                mark("plan's run returned")
            # NOTE: copied out before the lock is released: the buffers are views of the arena, which the next
            # planned run writes over (a fetched variable too: the next step may update it).
            copy_out = self._copy_out
            return [copy_out(values[f] if f in values else ex.read_variable(f.op.name)) for f in self.tensors]

    def _replayed(self, feeds: dict) -> list:
        if self.bound is None:
            n = self.plain_runs
            if n == -1 or self.executor.trace is not None:
                return self._plain(feeds)
            if n < PLAIN_RUNS:
                self.plain_runs = n + 1
                return self._plain(feeds)
            try:
                p = self._make_plan(None)
            except Exception as e:  # noqa: BLE001  a step that runs plainly must not fail for want of a plan
                self.plain_runs = -1
                if debug.on():
                    print(f"tfplus: a step of {len(self.fetches)} fetches runs without a plan (no replay): {e}",
                          file=sys.stderr)
                return self._plain(feeds)
            self.use_plan(p)
            # The plain run's buffers went back to the runtime's pool; the plan's arena replaces them, so that a
            # device holds one step's memory, not two.
            self.executor.runtime.trim()
        return self._planned(feeds)

    def _make_plan(self, budget):
        from tfplus.planner.plan import BudgetError, plan
        from tfplus.runtime.facts import device_facts  # in the step: the thread count is the step's
        facts = device_facts(self.executor.runtime)
        try:
            return plan(self.fetches, self.feed_shapes, facts, budget, graph=self.graph)
        except BudgetError:
            if budget is None or self.mapped is None:
                raise
            # its maps of the rows run whole in the plans above: in k micro-batches, unrolled for them (planner.maps)
            least = None
            for k, rewrite in self.mapped():
                fetches = [rewrite.element[f] for f in self._given[0]]
                shapes = {rewrite.element[t]: tuple(s) for t, s in self._given[1].items()}
                p = plan(fetches, shapes, facts, budget, graph=fetches[0].graph, raise_if_infeasible=False)
                if p.microbatches != k:  # (held to k by its marked copies: never the whole batch)
                    continue
                if p.fits:
                    self._adopt(rewrite)
                    return p
                if least is None or p.peak_bytes < least[0]:
                    least = p.peak_bytes, fetches, shapes
            if least is None:
                raise
        # the error of the way that came closest, naming its floor
        return plan(least[1], least[2], facts, budget, graph=least[1][0].graph)


# -- tf.cond on fed predicates (a budgeted step) ---------------------------------------------------------------
def fed_conds(fetches: list, shapes: dict) -> list[Tensor]:
    """The predicates of the tf.conds (If ops) a step of `fetches` fed `shapes` ({Tensor: fed shape}) runs, when
    every one's value is known before the step runs: it follows from fed scalars, the fed tensors' shapes,
    constants and variables alone (a fed `is_training`, tf.equal(mode, 0), tf.less(global_step, N), TensorFlow's
    check that tf.losses' weights broadcast onto the losses), and no op of the step that may run before the cond
    writes those variables. [] when the step runs no cond, or one whose predicate reads the batch's values or
    draws random numbers (the planner refuses such a step, naming the op). A cond nested in a branch, or whose
    predicate another cond computes, is resolved once that cond is (the session resolves level by level); a
    tf.while_loop is unrolled after (resolve_static)."""
    preds: list[Tensor] = []
    needed = needed_ops(fetches, set(shapes))
    later = False  # a cond left for the next level
    for op in topo_order(needed):
        if op.op_def.allocates_outputs and op.type != "While":
            if op.type == "If" and any(o.type == "If" for o in needed_ops([op.inputs[0]], set(shapes))):
                later = True
                continue
            if op.type != "If" or not _known_before(op, needed, shapes):
                return []
            if op.inputs[0] not in preds:
                preds.append(op.inputs[0])
    return preds if preds or not later else []


def _known_before(cond: Operation, needed: set[Operation], shapes: dict) -> bool:
    """Whether the predicate of If `cond` has its value before the step runs (fed_conds)."""
    t = cond.inputs[0]
    if t in shapes:
        return tuple(shapes[t]) == ()
    if _from_shapes(t, shapes) is not None:
        return True
    variables = set()
    for op in needed_ops([t], set(shapes)):
        if op.type == "VariableV2":
            variables.add(op.outputs[0])
        # (an Assert only checks: TensorFlow's tf.losses orders their weights' broadcast after its shape check)
        elif op.op_def.stateful and op.type != "Assert" or op.op_def.allocates_outputs or op.type == "Placeholder":
            return False
        if not has_tag(op.type, "shape_only") and any(i in shapes and tuple(shapes[i]) != () for i in op.inputs):
            return False
    if not variables:
        return True
    later = {cond}  # the ops that run after the cond: a write there is the next step's value
    for op in topo_order(needed):
        if any(i.op in later for i in op.inputs) or any(c in later for c in op.control_inputs):
            later.add(op)
    return not any(op.op_def.ref_inputs and any(i in variables for i in op.inputs) for op in needed - later)


def _from_shapes(t: Tensor, shapes: dict):
    """Predicate `t`'s value where it follows from the fed shapes ({Tensor: shape}) alone, else None: the step's
    key holds them."""
    from tfplus.planner.liveness import known_value
    value = known_value(t, shapes)
    return None if value is None else bool(value)


def taken(executor, preds: list[Tensor], feeds: dict) -> tuple:
    """The values of `preds` (fed_conds) in a run fed `feeds` ({Tensor: device buffer}): part of the step's key.
    One the fed shapes give is not run (computing the shape of a loss would run the forward pass)."""
    shapes = {t: tuple(b.shape) for t, b in feeds.items()}
    known = {t: _from_shapes(t, shapes) for t in preds if t not in feeds}
    computed = [t for t in preds if t not in feeds and known[t] is None]
    values = dict(zip(computed, executor.run(computed, feeds))) if computed else {}
    return tuple(bool(executor.runtime.copy_out(feeds[t])) if t in feeds else known[t] if known[t] is not None
                 else bool(executor.runtime.copy_out(values[t])) for t in preds)


def resolve_conds(graph: Graph, fetches: list, shapes: dict, branch: dict):
    """The step of `fetches` fed `shapes`, copied into a private Graph with each If whose predicate `branch` maps
    ({Tensor: bool}) replaced by the ops of the branch it takes (those its outputs need), as a
    tfplus.engine.rewrite.Rewritten. Copies keep their names (variables and random streams find them); a branch's
    ops are named under the If's ('cond/If/then/mul'), and a NoOp of the If's name after them stands for the If
    (what is ordered after it, or fetches it)."""
    return _resolve(graph, fetches, shapes, branch, {})


def _resolve(graph: Graph, fetches: list, shapes: dict, branch: dict, trips: dict, mapped: dict | None = None):
    """resolve_conds, with each While of `trips` ({While: its trip count}) unrolled as well (resolve_static), the
    copies of those of `mapped` marked with its rows ({While: (a micro-batch's rows, the batch's)})."""
    feeds = set(shapes)
    needed = needed_ops(fetches, feeds)
    g = Graph()
    g.seed = graph.seed
    tensor: dict[Tensor, Tensor] = {}
    op_of: dict[Operation, Operation] = {}
    _stand_ins(g, feeds, needed, tensor)
    for op in topo_order(needed):
        controls = [op_of[o] for o in op.control_inputs]
        if op in trips:
            made, outputs = _unrolled(g, op, trips[op], tensor, controls, needed, (mapped or {}).get(op))
        elif op.type == "If" and op.inputs[0] in branch:
            made, outputs = _taken(g, op, branch[op.inputs[0]], tensor, controls)
        else:
            op_of[op] = _copy(g, op, [tensor[t] for t in op.inputs], op.name, controls, op_of, True)
            tensor.update(zip(op.outputs, op_of[op].outputs))
            continue
        op_of[op] = g.create_op("NoOp", [], {}, op.name + "/")
        op_of[op].control_inputs = controls + made
        tensor.update(zip(op.outputs, outputs))
    return _rewritten(graph, g, fetches, feeds, op_of, tensor)


def _taken(g: Graph, op: Operation, then: bool, tensor: dict, controls: list) -> tuple[list, list]:
    """If `op`'s branch `then` (True: true_fn's) copied into `g` after `controls`, its inputs `tensor`'s copies:
    (the ops made, its outputs' copies)."""
    sub = op.attrs["then_branch" if then else "else_branch"]
    n_then = op.attrs["n_then"]
    ins = op.inputs[1:1 + n_then] if then else op.inputs[1 + n_then:]
    local = dict(zip(sub.capture_placeholders, (tensor[t] for t in ins)))
    made: dict[Operation, Operation] = {}
    for b in topo_order(needed_ops(sub.outputs, set(local))):
        made[b] = _copy(g, b, [local[t] for t in b.inputs], f"{op.name}/{'then' if then else 'else'}/{b.name}",
                        controls + [made[o] for o in b.control_inputs], made, True)
        local.update(zip(b.outputs, made[b].outputs))
    return list(made.values()), [local[t] for t in sub.outputs]


# -- tf.while_loop of a trip count known from the shapes (a budgeted step) ------------------------------------
# The most iterations a loop is unrolled for: a longer one stays a loop (which the planner refuses, naming it).
MAX_UNROLLED = 4096


def trip_counts(order: list, shapes: dict, branch: dict | None = None) -> dict:
    """{While op: its trip count} for the tf.while_loops of a step (its ops in `order`, fed `shapes`) whose
    condition follows from constants and the fed shapes alone, through loop variables that the body computes
    from those alone (a counter up to tf.shape(x)[1]: a dynamic_rnn over a fed time axis, a tf.while_loop to a
    constant), as the planner's shape arithmetic folds them on the cpu kernels; {} where one does not (read from
    a fed value, a variable or the batch's values), or a loop's body is stateful (a random op tagged "random", a
    dropout's, is not: its unrolled copies draw the loop's numbers), runs control flow of its own or changes a
    variable's shape. The count is then the same at every run of the step's
    shapes, so the session plans the loop unrolled (resolve_static). `branch` gets {predicate: value} of the
    tf.conds whose predicates fold so (not from a fed tensor)."""
    import tfplus.kernels.numpy  # noqa: F401  the shape arithmetic folds on the cpu kernels
    from tfplus.planner.liveness import PlanError, _fold, static_specs
    from tfplus.planner.rows import control_specs
    from tfplus.registry import TensorSpec
    counts: dict = {}
    fed = {t.op for t in shapes if t.op.outputs and t.op.type != "Placeholder"}  # fed outputs of ops
    unsure: dict = {}
    shape_only = control_specs({}, unsure)

    def inner(op, specs):
        if op.type == "If" and branch is not None and not (needed_ops([op.inputs[0]], set()) & fed):
            value = _fold(op.inputs[0], specs)
            if value is not None:
                branch[op.inputs[0]] = bool(value)
        outs = shape_only(op, specs)
        if op in unsure:  # the shapes after it are not known: nor any later loop's count
            raise PlanError(f"{op.type} '{op.name}' {unsure[op]}")
        if op.type != "While":
            return outs
        if needed_ops(op.inputs, set()) & fed:  # a fed value's producer would fold to another value
            raise PlanError(f"While '{op.name}' reads a fed tensor")
        n, trips = len(op.attrs["T"]), _simulate(op, specs)
        if trips is None:
            raise PlanError(f"While '{op.name}': no trip count")
        counts[op] = trips
        ins = [specs[t] for t in op.inputs[:n]]
        finals = [s._replace(value=None) for s in ins]
        return finals + [s._replace(shape=(trips, *s.shape)) for s in finals] + \
            [TensorSpec((), op.outputs[-1].dtype, np.int32(trips))]
    try:
        static_specs(order, shapes, inner)
    except PlanError:
        return {}
    return counts


def _simulate(op: Operation, specs: dict) -> int | None:
    """The trip count of While `op` whose inputs' specs so far are `specs`, by running its condition and the loop
    variables it reads (through the body) on the folded values; None where they do not fold (trip_counts)."""
    from tfplus.planner.liveness import _fold, static_specs
    from tfplus.registry import TensorSpec
    cond, body = op.attrs["cond"], op.attrs["body"]
    n, n_cond = len(op.attrs["T"]), op.attrs["n_cond"]
    for g in (cond, body):  # (a body's dropout draws in its unrolled copies as in the loop: _unrolled)
        if any(o.op_def.stateful and not (g is body and has_tag(o.type, "random")) or o.op_def.allocates_outputs
               for o in g.get_operations()):
            return None
    reads = {k for k, ph in enumerate(cond.inputs) if ph.op in needed_ops(cond.outputs, set())}
    grown = True
    while grown:  # the variables the condition reads and those their next values are computed from
        more = {k for j in reads for k, ph in enumerate(body.inputs) if ph.op in needed_ops([body.outputs[j]], set())}
        grown, reads = bool(more - reads), reads | more

    def given(t):
        s = specs[t]
        return s if s.value is not None else s._replace(value=_fold(t, specs))
    values = {k: given(op.inputs[k]).value for k in reads}
    caps = ({ph: given(t) for ph, t in zip(cond.capture_placeholders, op.inputs[n:n + n_cond])},
            {ph: given(t) for ph, t in zip(body.capture_placeholders, op.inputs[n + n_cond:])})
    steps = (topo_order(needed_ops(cond.outputs, set(cond.all_inputs))),
             topo_order(needed_ops([body.outputs[k] for k in reads], set(body.all_inputs))))
    ins = [specs[t] for t in op.inputs[:n]]
    for trips in range(MAX_UNROLLED + 1):
        if any(v is None for v in values.values()):
            return None
        loop = {ph: TensorSpec(ins[k].shape, ins[k].dtype, values.get(k)) for k, ph in enumerate(cond.inputs)}
        stop = _fold(cond.outputs[0], static_specs(steps[0], {**loop, **caps[0]}))
        if stop is None or not bool(stop):
            return None if stop is None or trips == 0 else trips
        loop = {ph: TensorSpec(ins[k].shape, ins[k].dtype, values.get(k)) for k, ph in enumerate(body.inputs)}
        out = static_specs(steps[1], {**loop, **caps[1]})
        values = {k: _fold(body.outputs[k], out) for k in reads}
    return None


def resolve_static(graph: Graph, fetches: list, shapes: dict, microbatches: int = 1):
    """The step of `fetches` fed `shapes` copied into a private Graph with each tf.while_loop of a known trip count
    (trip_counts) replaced by that many copies of its body, one after another (named under the While's,
    'rnn/while/While/3/add'), and each tf.cond whose predicate folds with them (a constant, an unfed
    placeholder_with_default) by the branch it takes (resolve_conds). A loop's outputs become the last copy's, the
    stacked values of each iteration it records for a gradient (tf.stack), and the count (a constant). A gradient's
    loop (whose count is the forward loop's) is unrolled too, so the planner sees straight-line ops, whose rows and
    micro-batches it knows. A tfplus.engine.rewrite.Rewritten, or None where nothing is resolved.
    With `microbatches` k > 1: the step for k micro-batches of its batch, its maps of the batch's rows one by one
    (tf.map_fn over the batch and its gradient: planner.maps) unrolled for a micro-batch's rows, each copy marked
    so (attr _row_map: the rows, which planner.plan holds it to); None where it has no such map, or its rows do
    not split (planner.rows)."""
    feeds = set(shapes)
    order = topo_order(needed_ops(fetches, feeds))
    branch: dict[Tensor, bool] = {}
    trips = trip_counts(order, shapes, branch) if any(op.op_def.allocates_outputs for op in order) else {}
    mapped: dict[Operation, tuple[int, int]] = {}
    if microbatches > 1:
        if not any(op.type == "While" for op in order):
            return None
        from tfplus.planner import batch as batch_mod
        from tfplus.planner import rows as row_rules
        rowed = batch_mod.batch_feeds(shapes, batch_mod.batch_size(shapes))
        if not rowed or batch_mod.batch_size(shapes) % microbatches or \
                row_rules.why_not(order, feeds, shapes, rowed):
            return None
        sliced = batch_mod.slice_shapes(shapes, rowed, microbatches)
        rows = sliced[next(iter(rowed))][0], batch_mod.batch_size(shapes)
        # the loops whose trip counts follow the batch's rows: its maps (planner.rows refuses any other)
        mapped = {op: rows for op, n in trip_counts(order, sliced).items() if trips.get(op) != n}
        if not mapped:
            return None
        trips.update((op, n) for op, n in trip_counts(order, sliced).items() if op in mapped)
    if not trips and not branch:
        return None
    return _resolve(graph, fetches, shapes, branch, trips, mapped)


def _unrolled(g: Graph, op: Operation, trips: int, tensor: dict, controls: list, needed: set,
              rows: tuple[int, int] | None = None) -> tuple[list, list]:
    """While `op` copied into `g` as `trips` copies of its body after `controls`, its inputs `tensor`'s copies: (the
    ops made, its outputs' copies: the last iteration's variables, the stacked history the step reads, the count);
    with `rows` (a micro-batch's rows, the batch's), a map of a micro-batch's rows: every op made marked so (attr
    _row_map)."""
    from tfplus.ops import array_ops
    n, body = len(op.attrs["T"]), op.attrs["body"]
    values = [tensor[t] for t in op.inputs[:n]]
    caps = [tensor[t] for t in op.inputs[n + op.attrs["n_cond"]:]]
    steps = topo_order(needed_ops(body.outputs, set(body.all_inputs)))
    history: list[list[Tensor]] = [[] for _ in range(n)]
    made: list[Operation] = []
    rows, batch = rows or (None, None)
    mark = {"_row_map": rows} if rows else None
    for i in range(trips):
        local = dict(zip(body.all_inputs, values + caps))
        for k in range(n):
            history[k].append(values[k])
        copies: dict[Operation, Operation] = {}
        for b in steps:
            copies[b] = _copy(g, b, [local[t] for t in b.inputs], f"{op.name}/{i}/{b.name}",
                              controls + [copies[o] for o in b.control_inputs], copies, True,
                              {**(mark or {}), **_iteration(b, i, trips, batch)} if has_tag(b.type, "random")
                              else mark)
            local.update(zip(b.outputs, copies[b].outputs))
        made += copies.values()
        values = [local[y] for y in body.outputs]
    first = len(g._ops)
    with g.as_default():
        stacked = [array_ops.stack(h, name=f"{op.name}/history_{k}/") if any(
            c in needed for c in op.outputs[n + k].consumers()) else None for k, h in enumerate(history)]
        count = array_ops.constant(trips, op.outputs[-1].dtype, name=f"{op.name}/count/")
    for new in g._ops[first:] if mark else ():
        new.attrs.update(mark)
    return made, values + stacked + [count]


def _iteration(b: Operation, i: int, trips: int, batch: int | None = None) -> dict:
    """The attributes that make copy `i` of random op `b` of an unrolled loop's body draw what `b` draws in
    iteration i of the loop (KernelContext.random_draw): its node's stream ('_stream': the loop ran `b` under its
    name, once an iteration), the draw of the step's `trips` that is its iteration's. A gradient loop's recomputation
    of a forward body (attr _redraw: the forward op) walks the forward's iterations last first. A map of the rows
    unrolled for micro-batches of `trips` rows of a `batch` (planner.maps) loops `batch` times in the unsplit step:
    micro-batch j's copy i draws iteration j * trips + i ('_rows': trips)."""
    it = trips - 1 - i if b.attrs.get("_redraw") else i
    attrs = {"_iteration": it, "_trips": batch or trips}
    if batch:
        attrs["_rows"] = trips
    if not b.attrs.get("_redraw"):
        attrs["_stream"] = b.name
    return attrs


def _stand_ins(g: Graph, feeds: set[Tensor], needed: set[Operation], tensor: dict) -> None:
    """Placeholders in copy `g` for the fed tensors whose producers do not run (in `tensor`, the copy's map)."""
    for t in sorted(feeds, key=lambda t: (t.op._id, t.value_index)):
        if t.op not in needed:
            name = t.op.name + "/" if t.value_index == 0 else f"{t.op.name}_output_{t.value_index}/"
            tensor[t] = g.create_op("Placeholder", [], {"dtype": t.dtype, "shape": t._shape}, name).outputs[0]


def _copy(g: Graph, op: Operation, inputs: list[Tensor], name: str, controls: list[Operation], copies: dict,
          resolving: bool = False, extra: dict | None = None) -> Operation:
    """`op` copied into `g` under `name` (kept: variables and random streams find their ops by name), with the
    shapes set_shape told the original, its device, phase and gradient's op (in `copies`, the copy's map), and the
    attributes `extra` added."""
    attrs = op.attrs
    if resolving and attrs.get("_redraw_in"):  # a gradient's copy of a branch's random op: the original is
        attrs = {k: v for k, v in attrs.items() if k != "_redraw_in"}  # renamed (resolve_conds), once
        attrs["_redraw"] = f"{op.attrs['_redraw_in']}/{op.attrs['_redraw']}"
    if extra:
        attrs = {**attrs, **extra}
    new = g.create_op(op.type, inputs, attrs, name + "/")
    for t, n in zip(op.outputs, new.outputs):
        n._shape = t._shape
    new.control_inputs = list(dict.fromkeys(controls))
    new.device, new.backward, new.grad_of = op.device, op.backward, copies.get(op.grad_of)
    return new


def _rewritten(graph: Graph, g: Graph, fetches: list, feeds: set[Tensor], op_of: dict, tensor: dict):
    """The copy `g` of a step of `graph` as a tfplus.engine.rewrite.Rewritten: its trainable variables, and each
    fetch and feed's stand-in."""
    from tfplus.engine.rewrite import Rewritten
    for v in graph.get_collection("trainable_variables"):
        var = getattr(v, "op", None)
        if var in op_of:
            g.add_to_collection("trainable_variables", op_of[var].outputs[0])
    element = {f: (op_of[f] if isinstance(f, Operation) else tensor[f]) for f in fetches}
    element.update({t: tensor[t] for t in feeds})
    return Rewritten(g, element, {})


# -- a loss summed over the batch (a budgeted step) ---------------------------------------------------------------
def scale_summed_losses(graph: Graph, fetches: list, shapes: dict):
    """The step of `fetches` fed `shapes` ({Tensor: fed shape}) copied into a private Graph in which each sum over
    the batch's rows on the way to a loss (planner.batch.summed_losses: tf.reduce_sum of the examples' losses,
    tf.losses' reduction=SUM) is multiplied by B / m, B the fed batch's rows, m a fed batch tensor's rows at run
    time, and so is the gradient its gradient function starts from; None when the step has no such sum. Unsplit,
    the factor is 1; in each of k micro-batches it is k, so each micro-batch's loss and gradients are k times its
    share of the batch's, as a mean loss's are, and the micro-batches' average is the batch's (what the planner's
    merges and statistics passes take). A tfplus.engine.rewrite.Rewritten; the sum's fetch stands for the scaled
    one. The gradient's ops are those tf.gradients made in the sum's gradient function (Operation.grad_of)."""
    from tfplus.ops import array_ops, math_ops
    feeds = set(shapes)
    needed = needed_ops(fetches, feeds)
    order = topo_order(needed)
    summed, rowed = _summed(order, shapes)
    if not summed:
        return None
    rows_of = min(rowed, key=lambda t: (t.op._id, t.value_index))  # its rows: the micro-batch's at run time
    rows = shapes[rows_of][0]
    g = Graph()
    g.seed = graph.seed
    tensor: dict[Tensor, Tensor] = {}
    op_of: dict[Operation, Operation] = {}
    _stand_ins(g, feeds, needed, tensor)
    scaled_grads: dict[Tensor, Tensor] = {}
    factors: dict[Operation, Tensor] = {}
    for op in order:
        ins = [tensor[t] for t in op.inputs]
        if op.grad_of in summed:  # the sum's gradient starts from the gradient it is given, scaled
            for i, t in enumerate(op.inputs):
                if t.op.backward and t.op.grad_of is not op.grad_of and t.dtype.is_floating:
                    if t not in scaled_grads:
                        scaled_grads[t] = _scaled(g, tensor[t], factors[op.grad_of], True)
                    ins[i] = scaled_grads[t]
        # The scaled sum takes the sum's name (_scaled), its unscaled copy another: a BudgetError or a plan names
        # the tensor the user fetched.
        name = op.name + "/micro_scale/unscaled" if op in summed else op.name
        op_of[op] = _copy(g, op, ins, name, [op_of[o] for o in op.control_inputs], op_of)
        tensor.update(zip(op.outputs, op_of[op].outputs))
        if op in summed:
            with g.as_default(), g.name_scope(op.name + "/micro_scale"):  # names the step's ops do not have
                n = array_ops.shape(tensor[rows_of], out_type="int32", name="rows")[0]
                dtype = op.outputs[0].dtype
                factors[op] = math_ops.divide(array_ops.constant(float(rows), dtype=dtype), math_ops.cast(n, dtype),
                                              name="factor")
            tensor[op.outputs[0]] = _scaled(g, op_of[op].outputs[0], factors[op], False)
    return _rewritten(graph, g, fetches, feeds, op_of, tensor)


def summed_loss(fetches: list, shapes: dict) -> bool:
    """Whether the step of `fetches` fed `shapes` sums over the batch on the way to a loss (scale_summed_losses)."""
    return bool(_summed(topo_order(needed_ops(fetches, set(shapes))), shapes)[0])


def _summed(order: list[Operation], shapes: dict) -> tuple[set[Operation], set[Tensor]]:
    """The sums of scale_summed_losses among the step's ops (`order`), and the fed tensors with the batch's rows."""
    from tfplus.planner import batch as batch_mod
    from tfplus.planner import rows as row_rules
    from tfplus.planner.crossbatch import open_rows
    rowed = batch_mod.batch_feeds(shapes, batch_mod.batch_size(shapes))
    if not rowed:
        return set(), rowed
    # the tensors with rows by their shapes at two batch sizes, as the planner finds them; a static shape left open
    # is no row axis (TensorFlow's reduce_sum of a scalar over range(rank) has an unknown shape)
    rows = row_rules.batch_axes(order, shapes, rowed)
    sums, _ = batch_mod.summed_losses(order, set(shapes), rowed, open_rows(order, rowed) if isinstance(rows, str)
                                      else rows)
    return {op for _, op in sums}, rowed


def _scaled(g: Graph, t: Tensor, factor: Tensor, backward: bool) -> Tensor:
    """`t` (in copy `g`) times the micro-batch `factor` of the sum it belongs to (scale_summed_losses); the
    forward product is named as the sum (exactly: a name ending in '/')."""
    from tfplus.ops import math_ops
    first = len(g._ops)
    scope = factor.op.name.rsplit("/", 1)[0]  # the sum's name + "/micro_scale"
    with g.as_default():
        out = math_ops.multiply(t, factor, name=scope + "/grad" if backward else scope.rsplit("/", 1)[0] + "/")
    for op in g._ops[first:]:
        op.backward = backward
    return out
