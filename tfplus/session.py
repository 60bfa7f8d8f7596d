"""Session: prunes the graph to what the fetches need, orders it, and runs kernels on a device runtime.

    >>> import tfplus as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, [None])
    ...     y = x * 2.0
    >>> with tf.Session(graph=g) as sess:
    ...     sess.run(y, {x: [1.0, 2.0]})
    array([2., 4.], dtype=float32)
"""
from __future__ import annotations

import contextlib
import heapq
import os
import threading
from typing import Any

import numpy as np

from tfplus import errors, threads
from tfplus.config import field as _config_field
from tfplus.framework import Graph, Operation, Tensor, _fmt_shape, constant_value, get_default_graph, needed_ops
from tfplus.registry import TensorSpec, devices_with_kernel, find_kernel, kernel_dtype
from tfplus.runtime import get_runtime
from tfplus.units import parse_size

_local = threading.local()


def get_default_session():
    stack = getattr(_local, "stack", [])
    if not stack:
        raise ValueError("no default session: use `with tf.Session() as sess:` or pass session=")
    return stack[-1]


class _Unset:
    """Marks a VariableV2 output inside one run: resolved to the session's buffer when read."""


_VAR = _Unset()


class KernelContext:
    """What a kernel may ask of the executor: its node, the runtime, a per-node random stream, scratch space."""

    def __init__(self, session: Session, op: Operation):
        self.op, self.runtime, self._session = op, session._runtime, session

    @property
    def node_name(self) -> str:
        return self.op.name

    def random_stream(self) -> tuple[tuple[int, int], int]:
        """(Philox key, run) of this random node (kernels/numpy/random.py and kernels/opencl/random.cl draw by
        it). The key is the op's seeds, or random ones fixed for the session if both are 0; the run counts the
        node's runs in this session, so each run draws new numbers and a new session starts over (as TF1)."""
        streams = self._session._rngs
        state = streams.get(self.op.name)
        if state is None:
            seed, seed2 = self.op.attrs.get("seed", 0), self.op.attrs.get("seed2", 0)
            if not (seed or seed2):
                seed, seed2 = (int.from_bytes(os.urandom(4), "little") for _ in range(2))
            # 64-bit seeds fold into the 32-bit key words
            state = streams[self.op.name] = [(seed ^ (seed >> 32)) & 0xFFFFFFFF,
                                             (seed2 ^ (seed2 >> 32)) & 0xFFFFFFFF, 0]
        state[2] += 1
        return (state[0], state[1]), state[2] - 1

    def workspace(self, shape, dtype):
        """Scratch memory that lives only while this kernel runs (im2col columns, partial sums). Under a
        memory budget: the next buffer the planner reserved from the kernel's declaration (WORKSPACES)."""
        if self._session._arena is not None:
            return self._session._arena.workspace(self.op, shape, dtype)
        return self.runtime.allocate(shape, dtype)

    def run_subgraph(self, graph: Graph, feeds: dict, fetches: list) -> list:
        """Runs a control-flow sub-graph (a tf.cond branch, a tf.while_loop condition or body) on this
        session's device: `feeds` maps its placeholders to device buffers; returns the fetches' buffers."""
        return self._session._run_subgraph(graph, feeds, fetches)


class _Plan:
    """The ops one (fetches, feeds) pair needs, in execution order, with each tensor's last use."""

    def __init__(self, order: list[Operation], fetch_tensors: list[Tensor], feeds: set[Tensor]):
        self.order = order
        keep = set(fetch_tensors)
        self.release: list[list[Tensor]] = [[] for _ in order]
        last: dict[Tensor, int] = {}
        for i, op in enumerate(order):
            for t in op.inputs:
                last[t] = i
        for t, i in last.items():
            if t not in keep:
                self.release[i].append(t)


def _topo_order(needed: set[Operation]) -> list[Operation]:
    """Kahn's algorithm over data and control edges, breaking ties by creation order (deterministic, and
    it keeps TF1's habit of running optimizer updates after the reads created before them)."""
    indeg = {op: 0 for op in needed}
    succ: dict[Operation, list[Operation]] = {op: [] for op in needed}
    for op in needed:
        preds = {t.op for t in op.inputs} | set(op.control_inputs)
        for p in preds:
            if p in needed:
                indeg[op] += 1
                succ[p].append(op)
    heap = [(op._id, op) for op, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, op = heapq.heappop(heap)
        order.append(op)
        for s in succ[op]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (s._id, s))
    if len(order) != len(needed):
        stuck = sorted(op.name for op in needed if indeg[op] > 0)[:5]
        raise ValueError(f"the graph has a cycle through {stuck}")
    return order


class Session:
    """Runs graphs. `device` is 'cpu' (NumPy) or 'opencl[:N]'. Variables live in the session."""

    def __init__(self, target: str = "", graph: Graph | None = None, config: Any = None, device: str = "cpu",
                 memory_budget=None):
        self.graph = graph or get_default_graph()
        # With a budget ('64MB', '64MiB', bytes) every step runs by a memory plan (tfplus.planner).
        self._memory_budget = None if memory_budget is None else parse_size(memory_budget, "memory_budget")
        self._arena = None  # the running step's planned memory (a tfplus.planner.execute.Bound), if any
        self._runtime = get_runtime(device)
        # TF1's ConfigProto(allow_soft_placement=True) (or a dict saying so): ops the device has no kernel for
        # run on the cpu instead of raising (the OpenCL runtime's placement_report() lists them).
        soft = config.get("allow_soft_placement") if isinstance(config, dict) else \
            getattr(config, "allow_soft_placement", False)
        if soft and hasattr(self._runtime, "allow_fallback"):
            self._runtime.allow_fallback = True
        self.device = device
        # The cpu device's intra-op threads (TF1's ConfigProto.intra_op_parallelism_threads; 0 = the default).
        self._threads = threads.resolve(_config_field(config, "intra_op_parallelism_threads"))
        self._vars: dict[str, Any] = {}  # VariableV2 node name -> buffer
        self._rngs: dict[str, list[int]] = {}  # random node -> [key word 0, key word 1, runs so far]
        self._plans: dict[tuple, _Plan] = {}
        # (op, input shapes[, value inputs' values]) -> output (shape, dtype)s: see _outputs.
        self._out_specs: dict[tuple, list[tuple]] = {}
        self._trace = None  # the running step's tfplus.profiler.StepTracer, when traced
        # The graph rewrite (tfplus.optimize): on unless TFPLUS_REWRITE=0 or the config turns the remapper off.
        self._rewrite = _rewrite_enabled(config)
        self._rewrites: dict[tuple, Any] = {}  # (fetch ids, feed ids) -> tfplus.optimize.Rewritten or None
        self._closed = False
        self._default_cm = None

    # -- public API -----------------------------------------------------------------------------------------
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Evaluates `fetches` (a Tensor, Operation, name, or a nested list/tuple/dict of them).

        With options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE) and run_metadata=tf.RunMetadata(),
        the run is traced into run_metadata (per-op times, FLOPs, bytes, transfers: tfplus.profiler)."""
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session")
        with threads.step(self._threads):
            return self._run_options(fetches, feed_dict, options, run_metadata)

    def _run_options(self, fetches, feed_dict, options, run_metadata):
        if options is None or run_metadata is None:  # the untraced path: no profiler import, no hooks
            return self._run(fetches, feed_dict)
        from tfplus import profiler
        if not profiler.tracing(options, run_metadata):
            return self._run(fetches, feed_dict)
        self._trace = profiler.StepTracer(self, run_metadata)
        try:
            return self._run(fetches, feed_dict)
        finally:
            self._trace.finish()
            self._trace = None

    def _run(self, fetches, feed_dict):
        flat, rebuild = self._flatten_fetches(fetches)
        feeds = self._prepare_feeds(feed_dict or {})
        flat, feeds = self._rewritten(flat, feeds)
        if self._memory_budget is not None:
            from tfplus.planner.execute import run_planned
            values = run_planned(self, flat, feeds)
        else:
            key = (tuple(id(f) for f in flat), tuple(sorted(id(t) for t in feeds)))
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = self._make_plan(flat, set(feeds))
            values = self._execute(plan, feeds)
        results = [None if isinstance(f, Operation) else
                   self._runtime.copy_out(self._read(values, f)) for f in flat]
        return rebuild(results)

    def close(self) -> None:
        self._closed = True
        self._vars.clear()
        self._plans.clear()
        self._rewrites.clear()
        self._out_specs.clear()

    def __enter__(self):
        self._default_cm = self.as_default()
        self._default_cm.__enter__()
        return self

    def __exit__(self, *exc):
        self._default_cm.__exit__(*exc)
        self.close()

    @contextlib.contextmanager
    def as_default(self):
        if not hasattr(_local, "stack"):
            _local.stack = []
        _local.stack.append(self)
        try:
            yield self
        finally:
            _local.stack.pop()

    @property
    def runtime(self):
        return self._runtime

    @property
    def graph_def(self):
        """The session's graph as a GraphDef proto (TF1's Session.graph_def)."""
        return self.graph.as_graph_def()

    def variable_value(self, name: str) -> np.ndarray:
        """A copy of variable `name`'s current value (the VariableV2 node name)."""
        if name not in self._vars:
            raise errors.FailedPreconditionError(name, "VariableV2", "Attempting to use uninitialized value")
        return self._runtime.copy_out(self._vars[name])

    # -- fetches and feeds -----------------------------------------------------------------------------------
    def _flatten_fetches(self, fetches):
        flat: list = []

        def walk(f):
            if isinstance(f, (list, tuple)) and not hasattr(f, "_as_graph_element"):
                parts = [walk(x) for x in f]
                if hasattr(f, "_fields"):  # namedtuple
                    return lambda r: type(f)(*[p(r) for p in parts])
                return lambda r: type(f)(p(r) for p in parts) if isinstance(f, tuple) else [p(r) for p in parts]
            if isinstance(f, dict):
                parts = {k: walk(v) for k, v in f.items()}
                return lambda r: type(f)((k, p(r)) for k, p in parts.items())
            if hasattr(f, "_fetch_expand"):  # a tf.summary: fetch its tensors, build its value from theirs
                tensors, build = f._fetch_expand()
                parts = [walk(t) for t in tensors]
                return lambda r: build([p(r) for p in parts])
            elem = self._element(f, "fetch")
            flat.append(elem)
            i = len(flat) - 1
            return lambda r: r[i]
        rebuild = walk(fetches)
        return flat, rebuild

    def _element(self, f, what: str):
        if f is None:
            raise TypeError(f"{what} argument None has invalid type; fetch a Tensor, Operation or name")
        try:
            elem = self.graph.as_graph_element(f)
        except (KeyError, ValueError, TypeError) as e:
            raise type(e)(f"cannot interpret {what} {f!r}: {e}") from None
        return elem

    def _prepare_feeds(self, feed_dict) -> dict[Tensor, Any]:
        feeds = {}
        for key, value in feed_dict.items():
            t = self._element(key, "feed key")
            if not isinstance(t, Tensor):
                raise TypeError(f"cannot feed {t!r}: feed keys must be Tensors (e.g. a placeholder)")
            feeds[t] = self._runtime.copy_in(_check_feed(t, value))
        return feeds

    # -- the graph rewrite ---------------------------------------------------------------------------------------
    def _rewritten(self, flat: list, feeds: dict) -> tuple[list, dict]:
        """The step's fetches and feeds in its rewritten graph (tfplus.optimize), made once per (fetches, fed
        tensors); the given ones when the rewrite is off or fuses nothing."""
        if not self._rewrite:
            return flat, feeds
        key = _rewrite_key(flat, feeds)
        if key not in self._rewrites:
            from tfplus.optimize import optimize
            self._rewrites[key] = optimize(self.graph, flat, feeds)
        r = self._rewrites[key]
        if r is None:
            return flat, feeds
        return [r.element[f] for f in flat], {r.element[t]: v for t, v in feeds.items()}

    def _keep_graph(self, flat: list, feeds) -> None:
        """Runs this (fetches, fed tensors) step on the graph as built (a plan made for it was installed)."""
        self._rewrites[_rewrite_key(flat, feeds)] = None

    # -- planning and execution ----------------------------------------------------------------------------
    def _make_plan(self, flat, feeds: set[Tensor]) -> _Plan:
        return _Plan(_topo_order(needed_ops(flat, feeds)), [f for f in flat if isinstance(f, Tensor)], feeds)

    def _execute(self, plan: _Plan, feeds: dict[Tensor, Any]) -> dict[Tensor, Any]:
        values: dict[Tensor, Any] = dict(feeds)
        rt = self._runtime
        trace = self._trace
        if trace is not None:
            trace.mark(plan, values)
        for i, op in enumerate(plan.order):
            if op.outputs and all(t in feeds for t in op.outputs):
                continue
            if op.type == "VariableV2":
                values[op.outputs[0]] = _VAR
                continue
            if op.type == "Placeholder":
                raise errors.InvalidArgumentError(
                    op.name, op.type, f"You must feed a value for placeholder tensor '{op.name}' with dtype "
                    f"{op.attrs['dtype'].name} and shape {_fmt_shape(op.attrs['shape'])}")
            op_def = op.op_def
            ins = [self._ref(t, op, values) if k in op_def.ref_inputs else self._read(values, t)
                   for k, t in enumerate(op.inputs)]
            outs = [None] * len(op.outputs) if op_def.allocates_outputs else self._outputs(op, ins, values)
            kernel = find_kernel(op.type, rt.kernel_device, kernel_dtype(op))
            if kernel is None and hasattr(rt, "fallback_kernel"):  # opt-in: the cpu kernel on host copies
                kernel = rt.fallback_kernel(op.type, kernel_dtype(op))
            if kernel is None:
                raise NotImplementedError(
                    f"{op.type} '{op.name}': no {rt.kernel_device} kernel for dtype {kernel_dtype(op).name}; "
                    f"devices with a kernel for {op.type}: {devices_with_kernel(op.type) or 'none'}")
            if self._arena is not None:
                kernel = self._arena.kernel(op, kernel)
            try:
                kernel(KernelContext(self, op), ins, outs, op.attrs)
            except errors.OpError as e:
                if e.node_name is None:
                    raise type(e)(op.name, op.type, e.message) from None
                raise
            except (ValueError, TypeError, IndexError, FloatingPointError) as e:
                raise errors.InvalidArgumentError(op.name, op.type, f"{type(e).__name__}: {e}") from e
            if op.type == "Assign":
                self._vars[op.inputs[0].op.name] = ins[0]
            for t, buf in zip(op.outputs, outs):
                values[t] = buf
            for t in plan.release[i]:
                values.pop(t, None)
            if trace is not None:
                trace.op_done(i, op, ins, outs)
        return values

    def _run_subgraph(self, graph: Graph, feeds: dict, fetches: list) -> list:
        """Executes the ops of `graph` that `fetches` need, from device-buffer `feeds` (see KernelContext)."""
        key = (id(graph), tuple(id(f) for f in fetches), tuple(sorted(id(t) for t in feeds)))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan(fetches, set(feeds))
        # NOTE: a sub-graph runs unplanned and untraced: its buffers are not in the step's memory plan, and the
        # trace shows the control-flow op as one op.
        arena, trace = self._arena, self._trace
        self._arena = self._trace = None
        try:
            values = self._execute(plan, dict(feeds))
        finally:
            self._arena, self._trace = arena, trace
        return [self._read(values, f) for f in fetches]

    def _outputs(self, op: Operation, ins, values) -> list:
        op_def = op.op_def
        # Shape functions cost more than most kernels of a small step, so each op keeps their result per input
        # shapes (input dtypes are fixed by the graph), and per value for the inputs whose values they read.
        key = (op, *[b.shape for b in ins])
        given = None
        if op_def.value_inputs:
            given = self._value_inputs(op, ins)
            key += tuple(None if v is None else (v.dtype.str, v.shape, v.tobytes()) for v in given)
        out_specs = self._out_specs.get(key)
        if out_specs is None:
            out_specs = self._out_specs[key] = self._infer_outputs(op, ins, given)
        outs = []
        for k, (shape, dtype) in enumerate(out_specs):
            if k in op_def.aliases:
                outs.append(self._runtime.view(ins[op_def.aliases[k]], shape))
            elif self._arena is not None:
                outs.append(self._arena.output(op, k, shape, dtype))
            else:
                outs.append(self._runtime.allocate(shape, dtype))
        return outs

    def _value_inputs(self, op: Operation, ins) -> list:
        """The values of the inputs the shape function reads (op_def.value_inputs), None for the others."""
        value_inputs, n = op.op_def.value_inputs, len(ins)
        values = []
        for k, (t, buf) in enumerate(zip(op.inputs, ins)):
            value = None
            if k in value_inputs or k - n in value_inputs:  # negative: from the end
                value = constant_value(t)
                if value is None:
                    value = self._runtime.copy_out(buf)
            values.append(value)
        return values

    def _infer_outputs(self, op: Operation, ins, given) -> list[tuple]:
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

    def _read(self, values, t: Tensor):
        v = values[t]
        if v is _VAR:
            name = t.op.name
            if name not in self._vars:
                raise errors.FailedPreconditionError(
                    name, "VariableV2", f"Attempting to use uninitialized value {name}; "
                    "run tf.global_variables_initializer() (or restore a checkpoint) first")
            return self._vars[name]
        return v

    def _ref(self, t: Tensor, op: Operation, values):
        """The buffer of the variable behind a ref input; Assign creates it (or replaces it on a new shape)."""
        var = t.op
        if var.type != "VariableV2":
            raise errors.InvalidArgumentError(op.name, op.type, f"input '{t.name}' must be a variable, "
                                              f"got a {var.type} output")
        buf = self._vars.get(var.name)
        if op.type == "Assign":
            shape = tuple(self._read(values, op.inputs[1]).shape)
            if buf is None or tuple(buf.shape) != shape:
                buf = self._runtime.allocate(shape, t.dtype)
            return buf
        if buf is None:
            raise errors.FailedPreconditionError(
                var.name, "VariableV2", f"Attempting to use uninitialized value {var.name} (in {op.type} "
                f"'{op.name}'); run tf.global_variables_initializer() first")
        return buf


def _rewrite_key(flat: list, feeds) -> tuple:
    return tuple(id(f) for f in flat), tuple(sorted(id(t) for t in feeds))


def _rewrite_enabled(config) -> bool:
    from tfplus.optimize import enabled
    return enabled(config)


def _check_feed(t: Tensor, value) -> np.ndarray:
    """A fed value converted to the tensor's dtype as TF1's Session converts it (NumPy's asarray: a float64 array
    fed to an int32 placeholder is truncated), and checked against the tensor's shape. Unlike TF1, a value the
    dtype cannot hold is an error instead of wrapping or overflowing: integers out of range, NaN or infinity
    into an integer dtype, finite floats that would become infinite, complex values."""
    target = t.dtype.np
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as e:  # e.g. ragged nested lists
        raise ValueError(f"cannot feed a {type(value).__name__} to Tensor '{t.name}': {e}") from None
    if arr.dtype != target:
        arr = _convert_feed(arr, value, t)
    if not _compatible(arr.shape, t._shape):
        raise ValueError(f"Cannot feed value of shape {_fmt_shape(arr.shape)} for Tensor '{t.name}', "
                         f"which has shape {_fmt_shape(t._shape)}")
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


def _convert_feed(arr: np.ndarray, value, t: Tensor) -> np.ndarray:
    target = t.dtype.np
    where = f"Tensor '{t.name}' of dtype {t.dtype.name}"
    kind = arr.dtype.kind
    if kind == "c":
        raise TypeError(f"cannot feed complex values to {where}: the imaginary part would be lost")
    if kind not in "biuf":  # Python objects (ints beyond int64) and strings: NumPy parses or refuses them
        try:
            arr = np.asarray(value, dtype=target)
        except OverflowError as e:
            raise ValueError(f"cannot feed {_sample(value)} to {where}: {e}; feed values in range or use a "
                             "wider dtype") from None
        except (ValueError, TypeError) as e:
            raise TypeError(f"cannot feed {_sample(value)} to {where}: {e}") from None
        return arr
    if np.can_cast(arr.dtype, target, "safe") or target.kind == "b" or arr.size == 0:
        return arr.astype(target)
    if target.kind in "iu":
        info = np.iinfo(target)
        if kind == "f":
            if not np.isfinite(arr).all():
                raise ValueError(f"cannot feed NaN or infinity to {where}")
            whole = np.trunc(arr.astype(np.float64))
            # NOTE: compared in float64, where 2^63 is exact and int64's max is not
            bad = (whole < float(info.min)) | (whole >= float(info.max) + 1)
        else:
            bad = (arr < info.min) | (arr > info.max) if arr.dtype.kind == target.kind or kind == "b" else \
                (arr.astype(object) < info.min) | (arr.astype(object) > info.max)
        if bad.any():
            raise ValueError(f"cannot feed {arr[bad].flat[0]} to {where}: out of its range "
                             f"[{info.min}, {info.max}]; feed values in range or use a wider dtype")
        return arr.astype(target)
    with np.errstate(over="ignore"):
        out = arr.astype(target)
    overflow = np.isinf(out) & (np.isfinite(arr) if kind == "f" else True)
    if overflow.any():
        raise ValueError(f"cannot feed {arr[overflow].flat[0]} to {where}: out of its range "
                         f"(+-{np.finfo(target).max}); feed values in range or use a wider dtype")
    return out


def _sample(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _compatible(actual, static) -> bool:
    if static is None:
        return True
    return len(actual) == len(static) and all(s is None or a == s for a, s in zip(actual, static))


class InteractiveSession(Session):
    """TF1's session for shells and notebooks: on creation it becomes the default session and its graph the
    default graph, so `t.eval()` and `op.run()` work without a `with` block; close() undoes both.

        >>> import tfplus as tf
        >>> sess = tf.InteractiveSession()
        >>> tf.constant(2.0).eval()
        2.0
        >>> sess.close()
    """

    def __init__(self, target: str = "", graph: Graph | None = None, config: Any = None, **kwargs):
        super().__init__(target, graph, config, **kwargs)
        self._graph_cm = self.graph.as_default()
        self._graph_cm.__enter__()
        self._interactive_cm = self.as_default()
        self._interactive_cm.__enter__()

    def close(self) -> None:
        if self._interactive_cm is not None:
            self._interactive_cm.__exit__(None, None, None)
            self._graph_cm.__exit__(None, None, None)
            self._interactive_cm = None
        super().close()
