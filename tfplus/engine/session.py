"""Session: converts fetches and feeds, and runs the step compiled for them (tfplus.engine.step) on a device runtime.

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

import itertools
import os
import warnings
import weakref
from dataclasses import replace
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from tfplus import errors, threads
from tfplus.config import field as _config_field
from tfplus.device_spec import DeviceSpec
from tfplus.engine import signals
from tfplus.engine import step as step_mod
from tfplus.engine import workers as workers_mod
from tfplus.engine.executor import Executor
from tfplus.engine.step import Step
from tfplus.framework import Graph, Operation, Tensor, _fmt_shape, default_session, get_default_graph
from tfplus.runtime import get_runtime
from tfplus.units import parse_size


def _check_local_jobs(graph: Graph) -> None:
    """As TensorFlow's local session: a graph with an op on a job other than localhost (a '/job:worker' or
    '/job:ps' of between-graph replication) runs nowhere, whatever the run fetches. Other device strings ('/gpu:0')
    run on the session's device (soft placement: tfplus.device_spec)."""
    for op in graph.get_operations():
        if op.device and "/job:" in op.device and DeviceSpec.from_string(op.device).job not in (None, "localhost"):
            raise errors.InvalidArgumentError(
                op.name, op.type, f"Cannot assign a device for operation {op.name}: it was explicitly assigned to "
                f"{op.device}, but a local Session has only /job:localhost; tfplus runs one process (remove the "
                "tf.device block or tf.train.replica_device_setter, or use tf.device('/cpu:0'))")


class _DeviceAttributes(NamedTuple):
    name: str
    device_type: str
    memory_limit_bytes: int
    incarnation: int


class Session:
    """Runs graphs. `device` is 'cpu' (NumPy) or 'opencl[:N]'. Variables live in the session. On the cpu, a
    training step's batch is split over `workers` forked processes (tfplus.engine.workers; default: one per thread
    when there are 2 or more, for the steps where the split pays, workers.Payoff; 1 for none). `run` may be called
    from many threads: their steps run one at a time (also those of sessions sharing an OpenCL device), each
    returning its own values. In the main thread, Ctrl-C and the Python handlers of SIGTERM and SIGHUP act when the
    step has ended, never halfway through its updates (tfplus.engine.signals)."""

    def __init__(self, target: str = "", graph: Graph | None = None, config: Any = None, device: str = "cpu",
                 memory_budget=None, workers: int | None = None):
        self.graph = graph or get_default_graph()
        self._target = target.encode() if isinstance(target, str) else bytes(target)  # TF1's sess_str
        self._pid = os.getpid()  # the process that made it (run: a forked one may not use every device)
        # With a budget ('64MB', '64MiB', bytes) every step runs by a memory plan (tfplus.planner).
        self._memory_budget = None if memory_budget is None else parse_size(memory_budget, "memory_budget")
        self._runtime = get_runtime(device)
        self._executor = Executor(self._runtime)
        # TF1's ConfigProto(allow_soft_placement=True) (or a dict saying so): ops the device has no kernel for
        # run on the cpu instead of raising (the OpenCL runtime's placement_report() lists them).
        soft = config.get("allow_soft_placement") if isinstance(config, dict) else \
            getattr(config, "allow_soft_placement", False)
        if soft:
            self._runtime.allow_fallback = True
        self.device = device
        # The cpu device's intra-op threads (TF1's ConfigProto.intra_op_parallelism_threads; 0 = the default).
        self._threads = threads.resolve(_config_field(config, "intra_op_parallelism_threads"))
        inter = _config_field(config, "inter_op_parallelism_threads")
        if inter and self._runtime.kernel_device == "cpu" and memory_budget is None:
            self._executor.inter_op = threads.parse_threads(inter, "inter_op_parallelism_threads")
        # Training steps on the cpu split their batch over worker processes (tfplus.engine.workers): `workers`, else
        # $TFPLUS_WORKERS, else one per thread from workers.AUTO_FROM threads on, taking the steps where they pay.
        self._workers = None
        n_workers = workers_mod.resolve(workers, self._threads)
        if n_workers > 1 and self._runtime.kernel_device == "cpu" and memory_budget is None:
            self._workers = workers_mod.Workers(self._executor, n_workers, workers_mod.by_default(workers))
            weakref.finalize(self, self._workers.close)  # a session dropped unclosed lets its workers go
        # What runs its steps (engine.step): a memory plan within the budget; the workers; on a device that
        # replays recorded launches (OpenCL), an unconstrained memory plan, whose buffers stay put from run to
        # run; else the plain executor.
        self._driver = "plan" if memory_budget is not None else "workers" if self._workers is not None else \
            "replay" if self._runtime.replay else "plain"
        self._steps: dict[tuple, Step] = {}  # (fetch ids, (fed tensor id, shape)s) -> its compiled step
        self._variables = MappingProxyType(self._executor.vars)
        # The graph rewrite (tfplus.engine.rewrite): on unless TFPLUS_REWRITE=0 or the config turns the remapper
        # off.
        self._rewrite = _rewrite_enabled(config)
        self._rewrites: dict[tuple, Any] = {}  # (fetch ids, feed ids) -> tfplus.engine.rewrite.Rewritten or None
        self._conds: dict[tuple, list] = {}  # a step's key -> its fed tf.cond predicates (_fed_conds)
        self._levels: dict[tuple, Any] = {}  # a step's key and its conds' values -> its resolved copy (_level)
        self._closed = False
        self._halfway = None  # why the next run warns: a step was stopped halfway (run)
        self._default_cm = None
        # Steps take turns: a step's caches, arena, variables and workers' shared memory are the session's, and
        # an OpenCL device's kernels and tapes are its sessions' (the runtime's step_lock). A step's outputs are
        # copied out before the lock is released (_run).
        self._lock = self._runtime.step_lock
        self._partial_runs: dict[str, tuple] = {}  # handle -> (fetch ids, feed ids, {tensor: value so far})
        # NOTE: a handle's number is drawn atomically (next on a count holds the GIL): numbered by the dict's length,
        # two threads setting up at once took one handle, and each fed and fetched the other's partial run.
        self._partial_numbers = itertools.count()

    # -- public API -----------------------------------------------------------------------------------------
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Evaluates `fetches` (a Tensor, Operation, name, or a nested list/tuple/dict of them).

        With options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE) and run_metadata=tf.RunMetadata(),
        the run is traced into run_metadata (per-op times, FLOPs, bytes, transfers: tfplus.profiler)."""
        if step_mod.mark is not None:
            step_mod.mark("session.run begins")
        if self._pid != os.getpid() and self._runtime.fork_unsafe:  # (before its lock, which a fork may hold)
            raise RuntimeError(
                f"Session on '{self.device}' was made in process {self._pid}, and this process ({os.getpid()}) is a "
                f"fork of it (os.fork, multiprocessing's 'fork' start method), where {self._runtime.fork_unsafe}. "
                "Make the session in a process started with multiprocessing.get_context('spawn'), or fork before "
                "making it; the 'cpu' device works in a forked process")
        with self._lock:
            if self._closed:
                raise RuntimeError("Attempted to use a closed Session")
            # No process is forked while a step runs (tfplus.engine.workers.stepping), in this thread or another.
            # On a device, BLAS's thread count stays as it is: threads.step's limit (threadpoolctl, ~30 us a run,
            # on the host's path between two ranks' steps) is for the cpu device's GEMMs, which its pool splits.
            # Ctrl-C and the like wait for the step's end (engine.signals), as in TF1: never half its updates.
            cpu = self._runtime.kernel_device == "cpu"
            if self._halfway is not None:
                warnings.warn(self._halfway, RuntimeWarning, stacklevel=2)
                self._halfway = None
            with signals.deferred(), workers_mod.stepping(), \
                    threads.step(self._threads) if cpu else threads.using(self._threads):
                try:
                    return self._run_options(fetches, feed_dict, options, run_metadata)
                except BaseException as e:
                    if not isinstance(e, Exception):  # (a deferred signal's raises after the step, outside)
                        self._halfway = (
                            f"a step of this Session was stopped halfway by {type(e).__name__} (a second Ctrl-C, "
                            "or a signal handler that raised): some of its variable updates may have run and others "
                            "not; restore a checkpoint (tf.train.Saver.restore) before training on")
                    raise

    @property
    def sess_str(self) -> bytes:
        return self._target

    def list_devices(self) -> list:
        """TF1's: the devices this session runs on, as TF names them (one: the session's device)."""
        kind = "CPU" if self.device == "cpu" else self.device.split(":")[0].upper()
        return [_DeviceAttributes(f"/job:localhost/replica:0/task:0/device:{kind}:0", kind, 0, 0)]

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        """A function f(*feed_values) that runs `fetches` with feed_list[i] fed feed_values[i] (TF1's
        Session.make_callable; with accept_options, f also takes options= and run_metadata=)."""
        feed_list = list(feed_list or ())

        def call(*values, options=None, run_metadata=None):
            if len(values) != len(feed_list):
                raise TypeError(f"the callable takes {len(feed_list)} feed values (feed_list), got {len(values)}")
            if (options is not None or run_metadata is not None) and not accept_options:
                raise TypeError("options and run_metadata need make_callable(..., accept_options=True)")
            return self.run(fetches, dict(zip(feed_list, values)), options, run_metadata)
        return call

    def partial_run_setup(self, fetches, feeds=None) -> str:
        """A handle for partial_run calls that fetch some of `fetches` each, feeding each of `feeds` once; what
        an earlier call fetched is fed to the later ones, so it is not computed again (TF1's partial runs)."""
        flat, _ = self._flatten_fetches(fetches)
        handle = f"partial_run_{next(self._partial_numbers)}"
        self._partial_runs[handle] = ({id(f) for f in flat}, {id(_as_feed_key(self.graph, f)) for f in feeds or ()},
                                      {})
        return handle

    def partial_run(self, handle: str, fetches, feed_dict=None):
        """One step of the partial run `handle` (partial_run_setup)."""
        if handle not in self._partial_runs:
            raise errors.InvalidArgumentError(None, None, f"no partial run has the handle {handle!r}: make one "
                                              "with partial_run_setup")
        declared_fetches, declared_feeds, known = self._partial_runs[handle]
        for key, value in (feed_dict or {}).items():
            t = _as_feed_key(self.graph, key)
            if id(t) not in declared_feeds:
                raise errors.InvalidArgumentError(None, None, f"partial_run: {t.name} was not a feed of "
                                                  "partial_run_setup")
            if t in known:
                raise errors.InvalidArgumentError(None, None, f"partial_run: {t.name} was fed already")
            known[t] = value
        flat, rebuild = self._flatten_fetches(fetches)
        for f in flat:
            if id(f) not in declared_fetches:
                raise errors.InvalidArgumentError(None, None, f"partial_run: {getattr(f, 'name', f)} was not a "
                                                  "fetch of partial_run_setup")
        values = self.run(flat, dict(known))
        for f, v in zip(flat, values):
            if isinstance(f, Tensor):
                known[f] = v
        return rebuild(values)

    def _run_options(self, fetches, feed_dict, options, run_metadata):
        if options is None or run_metadata is None:  # the untraced path: no profiler import, no hooks
            return self._run(fetches, feed_dict)
        from tfplus import profiler
        if not profiler.tracing(options, run_metadata):
            return self._run(fetches, feed_dict)
        ex = self._executor
        ex.trace = profiler.StepTracer(self, run_metadata)
        try:
            return self._run(fetches, feed_dict)
        finally:
            ex.trace.finish()
            ex.trace = None

    @property
    def _trace(self):
        """The running step's tfplus.profiler.StepTracer, when traced."""
        return self._executor.trace

    def _run(self, fetches, feed_dict):
        flat, rebuild = self._flatten_fetches(fetches)
        feeds = self._prepare_feeds(feed_dict or {})
        if step_mod.mark is not None:
            step_mod.mark("feeds uploaded")
        # The tensor fetches' values, copied to the host while the step lock is held (a worker's shared slot is
        # the next step's too; a planned step copies its values before it releases the arena's lock).
        values = iter(self._step(flat, feeds).run(feeds))
        if step_mod.mark is not None:
            step_mod.mark("fetches copied out")
        return rebuild([None if isinstance(f, Operation) else _fetched(next(values)) for f in flat])

    def _step(self, flat: list, feeds: dict) -> Step:
        key = _step_key(flat, ((t, v.shape) for t, v in feeds.items()))
        # A budgeted step's fed tf.conds, level by level: a cond nested in a taken branch is resolved in the copy
        # its outer cond was resolved in (None: the graph as built).
        taken: tuple = ()
        level = None
        while preds := self._fed_conds(key + taken, flat, feeds, level):
            fed = feeds if level is None else {level.element[t]: b for t, b in feeds.items()}
            values = step_mod.taken(self._executor, preds, fed)
            taken += (values,)
            level = self._level(key + taken, flat, feeds, level, dict(zip(preds, values)))
        resolved = level  # (its maps of the batch's rows are unrolled per micro-batch where it needs: _mapped)
        if self._driver == "plan":
            level = self._unrolled(key + taken, flat, feeds, level)
        step = self._steps.get(key + taken)
        if step is None:
            _check_local_jobs(self.graph)
            shapes = {t: v.shape for t, v in feeds.items()}
            summed = self._driver == "plan" and step_mod.summed_loss(flat, shapes)
            rewrite = self._resolved(level, flat, shapes) if level is not None or summed else \
                self._rewritten(flat, shapes)
            step = self._steps[key + taken] = Step(self._executor, flat, shapes, rewrite, self._driver, self.graph,
                                                   self._memory_budget, self._workers)
            if self._driver == "plan":
                step.mapped = lambda: self._mapped(flat, shapes, resolved)
        return step

    def _mapped(self, flat: list, shapes: dict, level):
        """The step of `flat` fed `shapes` for k micro-batches of its batch, k ascending: its maps of the batch's rows
        (tf.map_fn over the batch, planner.maps) unrolled for k micro-batches (engine.step.resolve_static) in the
        copy `level` its conds are resolved in (None: the graph as built), then rewritten as _resolved does; (k, a
        Rewritten of the graph as built) pairs, none where it has no such map."""
        from tfplus.planner.batch import batch_size
        el = (lambda t: t) if level is None else level.element.__getitem__
        fed = {el(t): s for t, s in shapes.items()}
        batch = batch_size(fed) or 1
        for k in (k for k in range(2, batch + 1) if batch % k == 0):
            r = step_mod.resolve_static(self.graph if level is None else level.graph, [el(f) for f in flat], fed, k)
            if r is None:
                return
            if level is not None:
                r = replace(r, element={t: r.element[v] for t, v in level.element.items()})
            yield k, self._resolved(r, flat, shapes)

    def _fed_conds(self, key: tuple, flat: list, feeds: dict, level) -> list:
        """A budgeted step's tf.cond predicates whose values are known before it runs (engine.step.fed_conds), in
        the graph as built or in the copy `level` (a Rewritten) its outer conds are resolved in: a run's values of
        them key its step, planned for the branches they take."""
        if self._driver != "plan":
            return []
        if key not in self._conds:
            el = (lambda t: t) if level is None else level.element.__getitem__
            self._conds[key] = step_mod.fed_conds([el(f) for f in flat], {el(t): v.shape for t, v in feeds.items()})
        return self._conds[key]

    def _level(self, key: tuple, flat: list, feeds: dict, level, branch: dict):
        """The step with the conds of `branch` ({predicate: value}, in the copy `level` or the graph as built)
        resolved to the branches they take (engine.step.resolve_conds), as a Rewritten of the graph as built;
        made once per `key` (the step's and the values of its conds so far)."""
        if key not in self._levels:
            el = (lambda t: t) if level is None else level.element.__getitem__
            r = step_mod.resolve_conds(self.graph if level is None else level.graph, [el(f) for f in flat],
                                       {el(t): v.shape for t, v in feeds.items()}, branch)
            if level is not None:
                r = replace(r, element={k: r.element[v] for k, v in level.element.items()})
            self._levels[key] = r
        return self._levels[key]

    def _unrolled(self, key: tuple, flat: list, feeds: dict, level):
        """The step with its tf.while_loops of trip counts known from its shapes unrolled (engine.step.resolve_static)
        in the copy `level` its conds are resolved in (None: the graph as built), as a Rewritten of the graph as
        built; `level` where it has none. Made once per `key` (the step's and its conds' values)."""
        key += ("unrolled",)
        if key not in self._levels:
            el = (lambda t: t) if level is None else level.element.__getitem__
            r = step_mod.resolve_static(self.graph if level is None else level.graph, [el(f) for f in flat],
                                      {el(t): v.shape for t, v in feeds.items()})
            if r is not None and level is not None:
                r = replace(r, element={k: r.element[v] for k, v in level.element.items()})
            self._levels[key] = level if r is None else r
        return self._levels[key]

    def step(self, fetches, feed_dict=None) -> Step:
        """The compiled step (tfplus.engine.step.Step) that run(fetches, feed_dict) runs, compiled now if new;
        nothing runs."""
        with self._lock:
            if self._closed:
                raise RuntimeError("Attempted to use a closed Session")
            flat, _ = self._flatten_fetches(fetches)
            feeds = self._prepare_feeds(feed_dict or {})
            return self._step(flat, feeds)

    def _install(self, flat: list, p) -> Step:
        """Runs the step of `flat` fed p.feed_shapes by MemoryPlan `p` of the graph as built (engine.memory.install):
        those fetches and fed tensors are not rewritten from now on, whatever the fed shapes."""
        with self._lock:  # not while a step of the session runs (it reads these caches)
            shapes = {t: tuple(s) for t, s in p.feed_shapes.items()}
            self._rewrites[_rewrite_key(flat, shapes)] = None
            step = Step(self._executor, flat, shapes, None, "plan", self.graph)
            self._steps[_step_key(flat, shapes.items())] = step
            step.use_plan(p)
        return step

    def close(self) -> None:
        with self._lock, workers_mod.stepping():  # after a running step; no fork meanwhile (Workers.close)
            self._closed = True
            if self._workers is not None:
                self._workers.close()
            self._steps.clear()
            self._executor.clear()
            self._rewrites.clear()
            self._conds.clear()

    def __enter__(self):
        # As TF1's: inside `with Session(graph=g)`, g is the default graph too (tf.get_default_graph(),
        # tf.get_collection and new ops see the session's graph, e.g. after tf.saved_model.loader.load).
        self._graph_cm = self.graph.as_default()
        self._graph_cm.__enter__()
        self._default_cm = self.as_default()
        self._default_cm.__enter__()
        return self

    def __exit__(self, *exc):
        self._default_cm.__exit__(*exc)
        self._graph_cm.__exit__(*exc)
        self.close()

    def as_default(self):
        return default_session(self)

    @property
    def runtime(self):
        return self._runtime

    @property
    def workers(self):
        """The cpu worker processes its training steps' batches are split over (tfplus.engine.workers.Workers), or
        None when its steps run in this process."""
        return self._workers

    @property
    def memory_plans(self) -> list:
        """The memory plans (tfplus.planner.MemoryPlan) its steps have run by so far, oldest first."""
        return [s.plan for s in self._steps.values() if s.plan is not None]

    @property
    def steps(self):
        """Its compiled steps (tfplus.engine.step.Step), oldest first: a read-only view."""
        return self._steps.values()

    @property
    def variables(self):
        """{VariableV2 node name: device buffer}, a read-only view (variable_value copies one to the host)."""
        return self._variables

    @property
    def programs(self):
        """The executor's pool programs (tfplus.engine.executor.Program) of its steps and control-flow sub-graphs,
        a read-only view; a memory plan's programs are its step's (Step.programs)."""
        return self._executor.programs.values()

    @property
    def executor(self):
        """Its tfplus.engine.executor.Executor: the device state (variables, random streams) and programs."""
        return self._executor

    @property
    def graph_def(self):
        """The session's graph as a GraphDef proto (TF1's Session.graph_def)."""
        return self.graph.as_graph_def()

    def between_steps(self):
        """Held inside: no step of this session (nor of another session of its OpenCL device) runs in another
        thread, so the variables read there (variable_value, run) are those of one step, e.g. a checkpoint's
        (tf.train.Saver.save). Its thread may run steps inside.

            >>> with sess.between_steps():                                         # doctest: +SKIP
            ...     step, w = sess.run(global_step), sess.variable_value("w")
        """
        return self._lock

    def variable_value(self, name: str) -> np.ndarray:
        """A copy of variable `name`'s current value (the VariableV2 node name)."""
        with self._lock:  # not halfway through another thread's update
            if self._closed:  # (its variables are gone: not "uninitialized")
                raise RuntimeError("Attempted to use a closed Session")
            value = self._executor.variable_value(name)  # (a paged optimizer slot's: its host array's)
            if value is None:
                raise errors.FailedPreconditionError(name, "VariableV2", "Attempting to use uninitialized value")
            return value

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
            if not self.graph.is_fetchable(elem):
                raise ValueError(f"Operation {getattr(elem, 'op', elem).name!r} has been marked as not fetchable "
                                 "(Graph.prevent_fetching)")
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
        for key, value in _expand_sparse_feeds(feed_dict):
            t = self._element(key, "feed key")
            if not isinstance(t, Tensor):
                raise TypeError(f"cannot feed {t!r}: feed keys must be Tensors (e.g. a placeholder)")
            if not self.graph.is_feedable(t):
                raise ValueError(f"Tensor {t.name} may not be fed (Graph.prevent_feeding)")
            feeds[t] = self._runtime.copy_in(_check_feed(t, value))
        return feeds

    # -- the graph rewrite ---------------------------------------------------------------------------------------
    def _rewritten(self, flat: list, shapes: dict):
        """The step's rewritten graph (tfplus.engine.rewrite.Rewritten), made once per (fetches, fed tensors); None
        when the rewrite is off or fuses nothing."""
        if not self._rewrite:
            return None
        key = _rewrite_key(flat, shapes)
        if key not in self._rewrites:
            from tfplus.engine.rewrite import backward_folds, optimize
            folds = backward_folds(self._runtime.info, self._memory_budget)
            self._rewrites[key] = optimize(self.graph, flat, shapes, folds)
        return self._rewrites[key]

    def _resolved(self, r, flat: list, shapes: dict):
        """The step with its fed tf.conds resolved (`r`, _level's Rewritten; None: it has none), its losses summed
        over the batch scaled (engine.step.scale_summed_losses), then rewritten as any step (engine.rewrite) when
        the rewrite is on."""
        el = (lambda t: t) if r is None else r.element.__getitem__
        scaled = step_mod.scale_summed_losses(self.graph if r is None else r.graph, [el(f) for f in flat],
                                              {el(t): s for t, s in shapes.items()})
        if scaled is not None:
            r = scaled if r is None else replace(r, graph=scaled.graph,
                                                 element={k: scaled.element[v] for k, v in r.element.items()})
        if r is None:
            return self._rewritten(flat, shapes)
        if not self._rewrite:
            return r
        from tfplus.engine.rewrite import backward_folds, optimize
        folds = backward_folds(self._runtime.info, self._memory_budget)
        o = optimize(r.graph, [r.element[f] for f in flat], [r.element[t] for t in shapes], folds)
        if o is None:
            return r
        return replace(o, element={k: o.element[v] for k, v in r.element.items()})


def _step_key(flat: list, shapes) -> tuple:
    """A compiled step's key: the ids of its fetches and fed tensors (the Step holds them, so they stay theirs) and
    the fed shapes, from (tensor, shape) pairs."""
    return tuple(id(f) for f in flat), tuple(sorted((id(t), tuple(s)) for t, s in shapes))


def _rewrite_key(flat: list, feeds) -> tuple:
    return tuple(id(f) for f in flat), tuple(sorted(id(t) for t in feeds))


def _rewrite_enabled(config) -> bool:
    from tfplus.engine.rewrite import enabled
    return enabled(config)


def _expand_sparse_feeds(feed_dict) -> list:
    """The (key, value) pairs of `feed_dict`, a tf.SparseTensor key (a sparse_placeholder) as its three tensors."""
    pairs = []
    for key, value in feed_dict.items():
        pairs += key._feed_expand(value) if hasattr(key, "_feed_expand") else [(key, value)]
    return pairs


def _fetched(value):
    """A fetched value as TF1's Session.run gives it: a 0-d result is a NumPy scalar (np.float32, np.int64...;
    bytes for a string), so that int(step), '%d' % step and Saver.save(global_step=step) behave as in TF."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


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


def _as_feed_key(graph: Graph, key) -> Tensor:
    """A feed's tensor, given as a Tensor or its name."""
    return graph.as_graph_element(key) if isinstance(key, str) else key
