"""Run metadata: where one `Session.run`'s time, FLOPs, memory and host<->device transfers go (TF1 names).

    >>> import tfplus as tf
    >>> md = tf.RunMetadata()
    >>> sess.run(train_op, feeds, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
    ...          run_metadata=md)                                           # doctest: +SKIP
    >>> md.step_stats[0]                                                    # doctest: +SKIP
    OpStats(name='conv1/Conv2D', type='Conv2D', phase='forward', layer='conv1', wall_us=812.0, ...)
    >>> json.dump(chrome_trace([md]), open("step.json", "w"))              # chrome://tracing, ui.perfetto.dev

What a traced run records, per executed op (`OpStats`): its wall time on the host (the executor's work for
the op plus its kernel; on opencl the queue is drained after each op, so this includes the device time),
its device time (OpenCL event profiling on opencl, the wall time on cpu), analytic FLOPs (`flops()`), bytes
read and written, forward/backward/update (`phase_of`), the layer (`layer_of`) and the bytes live after it
(the memory plan's, when the session has a budget; else the executor's own count of the buffers it holds,
variables included). And every host<->device transfer (`Transfer`), with the op it happened in.

A run without `options` (or with trace_level NO_TRACE) does none of this: the executor's only cost is one
`is None` test per op.
"""
from __future__ import annotations

import bisect
import re
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tfplus import flops as _flops

__all__ = ["RunOptions", "RunMetadata"]  # tf.<name>; chrome_trace and flops: tfplus.profiler


class RunOptions:
    """TF1's tf.RunOptions: `trace_level` other than NO_TRACE makes `Session.run` fill its `run_metadata`
    (every level records everything tfplus can measure). TF's other fields are accepted and kept: a run has no
    deadline (timeout_in_ms) and an out-of-memory error always names the op and its sizes."""

    NO_TRACE, SOFTWARE_TRACE, HARDWARE_TRACE, FULL_TRACE = 0, 1, 2, 3

    def __init__(self, trace_level: int = NO_TRACE, timeout_in_ms: int = 0, inter_op_thread_pool: int = 0,
                 output_partition_graphs: bool = False, debug_options=None,
                 report_tensor_allocations_upon_oom: bool = False, experimental=None):
        self.trace_level = int(trace_level)
        self.timeout_in_ms, self.inter_op_thread_pool = timeout_in_ms, inter_op_thread_pool
        self.output_partition_graphs, self.debug_options = output_partition_graphs, debug_options
        self.report_tensor_allocations_upon_oom, self.experimental = report_tensor_allocations_upon_oom, experimental


@dataclass
class OpStats:
    """One executed op of a traced run. Times in microseconds from the start of the run."""
    name: str
    type: str
    phase: str                       # 'forward', 'backward' or 'update'
    layer: str
    input_shapes: list[tuple]
    output_shapes: list[tuple]
    start_us: float
    wall_us: float
    device_us: float                 # OpenCL kernel time (event profiling); the wall time on cpu
    flops: float
    bytes_read: int
    bytes_written: int
    live_bytes: int                  # bytes live after the op (see the module docstring)
    kernels: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start_us, dur_us)


@dataclass
class Transfer:
    """One host<->device copy: direction 'h2d' or 'd2h'; `op` is the op it happened in, or 'feed'/'fetch'."""
    direction: str
    bytes: int
    start_us: float
    dur_us: float
    op: str


class StepStats(list):
    """RunMetadata.step_stats: the OpStats of a traced run in execution order; `dev_stats` shows them as
    TensorFlow's StepStats proto does (one device; per node its name, op and start/end microseconds), for
    scripts that read TF's fields and for timeline.Timeline."""

    @property
    def dev_stats(self) -> list:
        nodes = [NodeExecStats(s.name, int(s.start_us), 0, int(s.wall_us), int(s.wall_us),
                               f"{s.name} = {s.type}()", s.type) for s in self]
        return [DeviceStepStats("/job:localhost/replica:0/task:0/device:CPU:0", nodes)] if nodes else []


class NodeExecStats(NamedTuple):
    node_name: str
    all_start_micros: int
    op_start_rel_micros: int
    op_end_rel_micros: int
    all_end_rel_micros: int
    timeline_label: str
    op_type: str


class DeviceStepStats(NamedTuple):
    device: str
    node_stats: list


class RunMetadata:
    """TF1's tf.RunMetadata, filled by a traced `Session.run`: `step_stats` (OpStats per executed op, in
    execution order), `transfers`, `step_us` (the whole run call), `device`, `planned` (whether the live
    bytes are the memory plan's) and `start` (time.perf_counter() at the start of the run)."""

    def __init__(self):
        self.step_stats = StepStats()
        self.transfers: list[Transfer] = []
        self.step_us = 0.0
        self.device = ""
        self.planned = False
        self.start = 0.0

    def summary(self) -> dict[str, Any]:
        """A few numbers for a log row (field names are stable): step_ms, op_ms, forward_ms, backward_ms,
        update_ms, device_ms, gflop, gflop_per_s, h2d_bytes, d2h_bytes, transfer_ms, peak_live_bytes, ops."""
        by_phase = {"forward": 0.0, "backward": 0.0, "update": 0.0}
        for s in self.step_stats:
            by_phase[s.phase] += s.wall_us
        flop = sum(s.flops for s in self.step_stats)
        return {
            "step_ms": self.step_us / 1e3, "op_ms": sum(by_phase.values()) / 1e3,
            **{f"{k}_ms": v / 1e3 for k, v in by_phase.items()},
            "device_ms": sum(s.device_us for s in self.step_stats) / 1e3,
            "gflop": flop / 1e9, "gflop_per_s": flop / 1e3 / max(self.step_us, 1e-9),
            "h2d_bytes": sum(t.bytes for t in self.transfers if t.direction == "h2d"),
            "d2h_bytes": sum(t.bytes for t in self.transfers if t.direction == "d2h"),
            "transfer_ms": sum(t.dur_us for t in self.transfers) / 1e3,
            "peak_live_bytes": max((s.live_bytes for s in self.step_stats), default=0),
            "ops": len(self.step_stats),
        }


def top_op_types(md: RunMetadata, n: int = 5) -> list[list]:
    """The n op types that took the most wall time in a traced run: [[op type, ms], ...]."""
    ms: dict[str, float] = {}
    for s in md.step_stats:
        ms[s.type] = ms.get(s.type, 0.0) + s.wall_us / 1e3
    return [[k, round(v, 3)] for k, v in sorted(ms.items(), key=lambda kv: -kv[1])[:n]]


def tracing(options, run_metadata) -> bool:
    """Whether a run with these arguments is traced: a trace level was asked for and there is somewhere to
    put it."""
    return run_metadata is not None and options is not None and getattr(options, "trace_level", 0) > 0


# -- classification ------------------------------------------------------------------------------------------
_PREFIX = re.compile(r"^(gradients(_\d+)?/|.*?/update_)")


def layer_of(name: str) -> str:
    """The layer an op belongs to: its first name scope once autodiff's `gradients/` and an optimizer's
    `.../update_` prefixes are dropped ('gradients/conv1/Conv2D_grad/...' -> 'conv1'; an unscoped op is
    its own layer, e.g. 'MaxPool_1')."""
    rest = _PREFIX.sub("", name, count=1)
    return rest.split("/", 1)[0].removesuffix("_grad")


def phases(ops: list) -> list[str]:
    """'forward', 'backward' or 'update' for each op of an executed step (in execution order).

    Ops tf.gradients made (the `gradients` name scope) are backward; ops that change a variable in place
    (Apply*, Assign*) are update (tfplus.planner.liveness.phase_of). So are the optimizer's helpers: a
    forward op whose every consumer in the step is an update op (its learning rate, momentum constant), and
    one whose every input is (the group that is train_op).
    """
    from tfplus.planner.liveness import phase_of  # here: `import tfplus` loads this module, not the planner
    phase = {op: phase_of(op) for op in ops}
    users: dict = {op: [] for op in ops}
    for op in ops:
        for p in {t.op for t in op.inputs} | set(op.control_inputs):
            if p in users:
                users[p].append(op)
    for op in reversed(ops):  # consumers run later: reversed, each op's consumers are already settled
        if phase[op] == "forward" and users[op] and all(phase[u] == "update" for u in users[op]):
            phase[op] = "update"
    for op in ops:
        preds = [p for p in {t.op for t in op.inputs} | set(op.control_inputs) if p in phase]
        if phase[op] == "forward" and preds and all(phase[p] == "update" for p in preds):
            phase[op] = "update"
    return [phase[op] for op in ops]


# -- analytic FLOPs ------------------------------------------------------------------------------------------
def flops(op_type: str, in_shapes: list, out_shapes: list, attrs: dict) -> float:
    """Analytic FLOPs of one op (a multiply-add is 2), by the formula the op declares (tfplus.flops):
    convolutions 2 * output elements * kh * kw * C_in, their two backward ops the same as the forward they
    differentiate; MatMul 2 * M * N * K; pooling window size per output (per gradient element for the
    backward); elementwise ops one per output element, reductions one per input element, softmax
    cross-entropy 5 per logit, AddN (n-1) per element, optimizer updates a few per variable element; data
    movement (reshape, copy, cast, shape, constants) 0.

        >>> flops("MatMul", [(8, 64), (64, 10)], [(8, 10)], {})
        10240.0
    """
    return _flops.of(op_type, in_shapes, out_shapes, attrs)


# -- the tracer the executor drives --------------------------------------------------------------------------
class StepTracer:
    """Records one traced `Session.run` into a RunMetadata. The executor calls `mark()` when a program starts,
    `op_done(i, op, ins, outs)` after each op, and the session `finish()` at the end (always)."""

    def __init__(self, session, md: RunMetadata):
        self.session, self.md, self.rt = session, md, session.runtime
        md.step_stats, md.transfers = StepStats(), []
        md.device, md.planned = session.device, False
        self.t0 = md.start = time.perf_counter()
        self.last = self.t0
        self.events: list[list] = []      # per op: the OpenCL events of its kernels
        self.ops: list = []               # the executed Operations, in order
        # (kernel name, event) of each launch not yet drained by op_done; None: the device has no clock of its own
        self.kernel_events, self._undo = _hook_runtime(self.rt, self)

    def mark(self, plan, values: dict) -> None:
        """The executor starts `plan` (a tfplus.engine.executor.Program) with `values` (the feeds): the next op's time
        starts now, and the count of the buffers it holds starts from the feeds and the variables."""
        self.plan = plan
        self.refs: dict[int, int] = {}     # storage -> tensors holding it (views share one)
        self.sizes: dict[int, int] = {}    # storage -> bytes
        self.key_of: dict = {}             # tensor -> storage
        self.held = 0
        self._count_variables()
        for t, buf in values.items():
            self._hold(t, buf)
        self.last = time.perf_counter()

    def _count_variables(self) -> None:
        bufs = list(self.session.variables.values())
        self.var_keys = {_storage(b) for b in bufs}
        self.var_bytes = sum(b.nbytes for b in bufs)

    def _hold(self, t, buf) -> None:
        key = _storage(buf) if hasattr(buf, "shape") else None  # not a VariableV2 output's placeholder
        if key is None or key in self.var_keys:  # a variable (or a view of one) is counted as a variable
            return
        self.key_of[t] = key
        n = self.refs.get(key, 0)
        if n == 0:
            self.sizes[key] = buf.nbytes
            self.held += buf.nbytes
        self.refs[key] = n + 1

    def _drop(self, t) -> None:
        key = self.key_of.pop(t, None)
        if key is None:
            return
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.held -= self.sizes.pop(key)

    def transfer(self, direction: str, nbytes: int, t0: float, t1: float) -> None:
        self.md.transfers.append(Transfer(direction, nbytes, (t0 - self.t0) * 1e6, (t1 - t0) * 1e6, ""))

    def op_done(self, i: int, op, ins, outs) -> None:
        kernel_events = self.kernel_events
        if kernel_events is not None:
            # NOTE: drained per op so that the op's wall time covers its kernels and transfers are not
            # charged for the queue's backlog.
            self.rt.synchronize()
            self.events.append(kernel_events[:])
            kernel_events.clear()
        now = time.perf_counter()
        in_shapes = [tuple(b.shape) for b in ins]
        out_shapes = [tuple(b.shape) for b in outs]
        # In-place updates write their variable (an alias of input 0); other aliases are views: no bytes.
        written = [b.nbytes for k, b in enumerate(outs) if k not in op.op_def.aliases or op.op_def.ref_inputs]
        wall = (now - self.last) * 1e6
        self.ops.append(op)
        self.md.step_stats.append(OpStats(
            op.name, op.type, "", layer_of(op.name), in_shapes, out_shapes,
            (self.last - self.t0) * 1e6, wall, wall, flops(op.type, in_shapes, out_shapes, op.attrs),
            sum(b.nbytes for b in ins), sum(written), self._live_bytes(i, op, outs)))
        self.last = now

    def _live_bytes(self, i: int, op, outs) -> int:
        if op.type == "Assign":  # a variable is (re)made
            self._count_variables()
        for t, buf in zip(op.outputs, outs):
            self._hold(t, buf)
        for t in self.plan.release[i]:
            self._drop(t)
        bound = self.plan.bound
        if bound is not None:  # the memory plan's count: transient bytes at this step + the fixed bytes
            p = bound.plan
            self.md.planned = True
            return int(p.live[min(p.phases[bound.phase].start + i, len(p.live) - 1)]) + p.fixed_bytes
        return self.held + self.var_bytes

    def finish(self) -> None:
        self._undo()
        md = self.md
        md.step_us = (time.perf_counter() - self.t0) * 1e6
        for st, phase in zip(md.step_stats, phases(self.ops)):
            st.phase = phase
        if self.events:
            self._device_times()
        starts = [s.start_us for s in md.step_stats]
        for t in md.transfers:
            k = bisect.bisect_right(starts, t.start_us) - 1
            if k < 0:
                t.op = "feed"
            elif t.start_us >= starts[k] + md.step_stats[k].wall_us:
                t.op = "fetch" if k == len(starts) - 1 else md.step_stats[k].name
            else:
                t.op = md.step_stats[k].name

    def _device_times(self) -> None:
        """Device time from OpenCL events; the device clock is put on the host's by one offset per run (the
        smallest gap seen between an op's start on the host and its first kernel's enqueue on the device)."""
        pairs = [(s, evs) for s, evs in zip(self.md.step_stats, self.events)]
        gaps = [evs[0][1].profile.queued / 1e3 - s.start_us for s, evs in pairs if evs]
        offset = min(gaps, default=0.0)
        for s, evs in pairs:
            s.device_us = sum((ev.profile.end - ev.profile.start) / 1e3 for _, ev in evs)
            s.kernels = [(name, ev.profile.start / 1e3 - offset, (ev.profile.end - ev.profile.start) / 1e3)
                         for name, ev in evs]


def _storage(buf) -> int:
    """An id shared by every view of one buffer (NumPy base arrays; OpenCL blocks)."""
    block = getattr(buf, "block", None)
    if block is not None:
        return id(block)
    while getattr(buf, "base", None) is not None:
        buf = buf.base
    return id(buf)


def _hook_runtime(rt, tracer: StepTracer):
    """Has the runtime tell `tracer` of its host<->device copies and time its kernels by the device's clock (on
    OpenCL, a profiling queue) for the run; returns the list of its launches' (kernel name, event) (None on the
    cpu) and the function that undoes it."""
    rt.on_transfer = tracer.transfer
    kernels = rt.timing()
    events = kernels.__enter__()

    def undo():
        kernels.__exit__(None, None, None)
        rt.on_transfer = None
    return events, undo


# -- Chrome trace ----------------------------------------------------------------------------------------------
_TRACKS = {0: "steps", 1: "ops (host)", 2: "kernels (device)", 3: "host<->device transfers"}


def chrome_trace(runs: list[RunMetadata], name: str = "tfplus") -> dict:
    """The Chrome trace event format (chrome://tracing, ui.perfetto.dev) of traced runs: a span per step, per
    op (with its type, phase, layer, shapes, FLOPs and bytes), per OpenCL kernel and per transfer, and a
    counter track of the live bytes. Events are sorted by time; `ts` and `dur` are microseconds.

        json.dump(chrome_trace([md]), open("step.json", "w"))
    """
    base = min((md.start for md in runs), default=0.0)
    pid = 1
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
                           "args": {"name": f"{name} on {runs[0].device if runs else '?'}"}}]
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": label}}
               for tid, label in _TRACKS.items()]
    timed = []
    for n, md in enumerate(runs):
        at = (md.start - base) * 1e6
        timed.append({"ph": "X", "cat": "step", "name": f"step {n}", "pid": pid, "tid": 0, "ts": at,
                      "dur": md.step_us, "args": md.summary()})
        for s in md.step_stats:
            timed.append({"ph": "X", "cat": "op", "name": s.name, "pid": pid, "tid": 1, "ts": at + s.start_us,
                          "dur": s.wall_us, "args": {
                              "type": s.type, "phase": s.phase, "layer": s.layer, "flops": s.flops,
                              "inputs": [list(x) for x in s.input_shapes],
                              "outputs": [list(x) for x in s.output_shapes], "device_us": s.device_us,
                              "bytes_read": s.bytes_read, "bytes_written": s.bytes_written}})
            timed += [{"ph": "X", "cat": "kernel", "name": k, "pid": pid, "tid": 2, "ts": at + t, "dur": d,
                       "args": {"op": s.name}} for k, t, d in s.kernels]
            timed.append({"ph": "C", "name": "live bytes", "pid": pid, "tid": 0, "ts": at + s.start_us + s.wall_us,
                          "args": {"bytes": s.live_bytes}})
        timed += [{"ph": "X", "cat": "transfer", "name": f"{t.direction} {t.bytes} B", "pid": pid, "tid": 3,
                   "ts": at + t.start_us, "dur": t.dur_us, "args": {"bytes": t.bytes, "op": t.op}}
                  for t in md.transfers]
    timed.sort(key=lambda e: e["ts"])
    return {"traceEvents": events + timed, "displayTimeUnit": "ms"}


# TF1's tf.profiler.profile and its option builder (tfplus.model_analyzer).
from tfplus.model_analyzer import ProfileOptionBuilder, profile  # noqa: E402,F401
