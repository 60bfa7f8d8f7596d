"""tf.train.MonitoredTrainingSession and the standard SessionRunHooks (TF1), single process.

    import tfplus as tf
    step = tf.train.get_or_create_global_step()
    train_op = tf.train.AdamOptimizer().minimize(loss, global_step=step)
    hooks = [tf.train.StopAtStepHook(last_step=1000), tf.train.NanTensorHook(loss)]
    with tf.train.MonitoredTrainingSession(checkpoint_dir="ckpt", hooks=hooks) as sess:
        while not sess.should_stop():
            sess.run(train_op, feeds)

The session initializes the variables or restores the newest checkpoint in checkpoint_dir (or a SessionCreator
makes it), saves checkpoints and summaries there, and runs each hook's before_run/after_run around every run call.
"""
from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

import numpy as np

from tfplus import errors, graph_io, logging
from tfplus.engine.session import Session
from tfplus.framework import GraphKeys, get_default_graph
from tfplus.train.saver import Saver, latest_checkpoint
from tfplus.train.training_util import get_global_step
from tfplus.variables import global_variables_initializer, local_variables_initializer

__all__ = ["SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues", "Scaffold", "SessionCreator",
           "MonitoredTrainingSession", "MonitoredSession", "SingularMonitoredSession", "StopAtStepHook",
           "LoggingTensorHook", "CheckpointSaverHook", "SummarySaverHook", "NanTensorHook", "StepCounterHook",
           "NanLossDuringTrainingError", "SecondOrStepTimer", "SessionManager", "CheckpointSaverListener",
           "ChiefSessionCreator", "WorkerSessionCreator", "FinalOpsHook", "FeedFnHook", "ProfilerHook",
           "basic_train_loop"]


class NanLossDuringTrainingError(RuntimeError):
    def __str__(self):
        return "NaN loss during training."


class SessionRunArgs(NamedTuple):
    """What a hook adds to the next run: extra fetches (any nesting) and feeds."""
    fetches: Any
    feed_dict: Any = None
    options: Any = None


class SessionRunValues(NamedTuple):
    results: Any
    options: Any = None
    run_metadata: Any = None


class SessionRunContext:
    """The run in progress as hooks see it; request_stop() ends the training loop after this run."""

    def __init__(self, original_args: SessionRunArgs, session):
        self.original_args, self.session = original_args, session
        self._stop_requested = False

    def request_stop(self) -> None:
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested


class SessionRunHook:
    """Override what you need: begin (graph still open), after_create_session, before_run, after_run, end."""

    def begin(self):
        pass

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        pass

    def end(self, session):
        pass


class SecondOrStepTimer:
    """Fires every `every_secs` seconds or every `every_steps` steps (exactly one of them)."""

    def __init__(self, every_secs=None, every_steps=None):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("exactly one of every_secs and every_steps must be given")
        self._secs, self._steps = every_secs, every_steps
        self._last_time = self._last_step = None

    def should_trigger_for_step(self, step: int) -> bool:
        if self._last_step is None:
            return True
        if self._last_step == step:
            return False
        if self._steps is not None:
            return step >= self._last_step + self._steps
        return time.time() >= self._last_time + self._secs

    def update_last_triggered_step(self, step: int) -> None:
        self._last_time, self._last_step = time.time(), step

    def last_triggered_step(self):
        return self._last_step


def _global_step_tensor(hook_name: str):
    step = get_global_step()
    if step is None:
        raise RuntimeError(f"{hook_name} needs a global step: create it with "
                           "tf.train.get_or_create_global_step() before the session")
    return step


class StopAtStepHook(SessionRunHook):
    """Requests a stop once the global step reaches last_step (or num_steps past its value at the start)."""

    def __init__(self, num_steps=None, last_step=None):
        if (num_steps is None) == (last_step is None):
            raise ValueError("StopAtStepHook: give exactly one of num_steps and last_step")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self):
        self._step = _global_step_tensor("StopAtStepHook")

    def after_create_session(self, session, coord):
        if self._last_step is None:
            self._last_step = int(session.run(self._step)) + self._num_steps

    def before_run(self, run_context):
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        # The step read in this run may come before its increment (TensorFlow's order) or after (tfplus's):
        # +1 is the latest it can be; the variable itself decides.
        if int(run_values.results) + 1 >= self._last_step:
            if int(run_context.session.run(self._step)) >= self._last_step:
                run_context.request_stop()


class LoggingTensorHook(SessionRunHook):
    """Logs (tf.logging.info) the given tensors every_n_iter runs or every_n_secs seconds, and at_end."""

    def __init__(self, tensors, every_n_iter=None, every_n_secs=None, at_end=False, formatter=None):
        if not at_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError("LoggingTensorHook: give exactly one of every_n_iter and every_n_secs (or at_end)")
        if isinstance(tensors, dict):
            self._tags, self._tensors = list(tensors), list(tensors.values())
        else:
            self._tensors = list(tensors)
            self._tags = [getattr(t, "name", str(t)) for t in self._tensors]
        self._timer = None if every_n_iter is None and every_n_secs is None else \
            SecondOrStepTimer(every_n_secs, every_n_iter)
        self._at_end, self._formatter, self._iter = at_end, formatter, 0
        self._triggered = False

    def before_run(self, run_context):
        self._triggered = self._timer is not None and self._timer.should_trigger_for_step(self._iter)
        return SessionRunArgs(self._tensors) if self._triggered else None

    def _log(self, values):
        by_tag = dict(zip(self._tags, values))
        if self._formatter is not None:
            logging.info(self._formatter(by_tag))
        else:
            logging.info(", ".join(f"{tag} = {np.asarray(v)}" for tag, v in by_tag.items()))

    def after_run(self, run_context, run_values):
        if self._triggered:
            self._timer.update_last_triggered_step(self._iter)
            self._log(run_values.results)
        self._iter += 1

    def end(self, session):
        if self._at_end:
            self._log(session.run(self._tensors))


class CheckpointSaverListener:
    """Called around each checkpoint a training run saves (TF1's tf.train.CheckpointSaverListener): begin
    before the first, before_save / after_save around each, end after the last. CheckpointSaverHook's
    listeners (and Estimator.train's saving_listeners) subclass it."""

    def begin(self):
        pass

    def before_save(self, session, global_step_value):
        pass

    def after_save(self, session, global_step_value):
        pass

    def end(self, session, global_step_value):
        pass


class CheckpointSaverHook(SessionRunHook):
    """Saves a checkpoint `<checkpoint_dir>/<basename>-<step>` after the session starts, every save_secs
    seconds or save_steps steps, and at the end."""

    def __init__(self, checkpoint_dir, save_secs=None, save_steps=None, saver=None,
                 checkpoint_basename="model.ckpt", scaffold=None, listeners=None):
        self._dir, self._saver, self._scaffold = checkpoint_dir, saver, scaffold
        self._path = os.path.join(checkpoint_dir, checkpoint_basename)
        self._timer = SecondOrStepTimer(save_secs, save_steps)
        self._listeners = list(listeners or ())

    def begin(self):
        self._step = _global_step_tensor("CheckpointSaverHook")
        os.makedirs(self._dir, exist_ok=True)

    def _save(self, session, step: int) -> None:
        logging.info("Saving checkpoints for %d into %s.", step, self._path)
        for listener in self._listeners:
            listener.before_save(session, step)
        if self._saver is None:  # the scaffold's saver exists only once the session is made
            self._saver = (self._scaffold.saver if self._scaffold is not None else None) or Saver()
        self._saver.save(session, self._path, global_step=step)
        for listener in self._listeners:
            listener.after_save(session, step)

    def after_create_session(self, session, coord):
        # As TF1's hook: the graph beside its checkpoints, written once every hook's begin() has added its ops.
        graph_io.write_graph(session.graph.as_graph_def(add_shapes=True), self._dir, "graph.pbtxt")
        step = int(session.run(self._step))
        self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def before_run(self, run_context):
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        step = int(run_context.session.run(self._step))
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            self._save(run_context.session, step)

    def end(self, session):
        step = int(session.run(self._step))
        if step != self._timer.last_triggered_step():
            self._save(session, step)


class SummarySaverHook(SessionRunHook):
    """Runs `summary_op` (default: tf.summary.merge_all()) every save_steps steps or save_secs seconds and
    writes it with a FileWriter on output_dir."""

    def __init__(self, save_steps=None, save_secs=None, output_dir=None, summary_writer=None, scaffold=None,
                 summary_op=None):
        if summary_writer is None and output_dir is None:
            raise ValueError("SummarySaverHook: give output_dir or summary_writer")
        self._timer = SecondOrStepTimer(save_secs, save_steps)
        self._output_dir, self._writer, self._summary_op = output_dir, summary_writer, summary_op
        self._scaffold = scaffold

    def begin(self):
        from tfplus import summary
        if self._writer is None:
            self._writer = summary.FileWriterCache.get(self._output_dir)
        if self._summary_op is None:  # the scaffold's own, else (what it defaults to) every summary
            given = self._scaffold.summary_op if self._scaffold is not None else None
            self._summary_op = given if given is not None else summary.merge_all()
        self._step = _global_step_tensor("SummarySaverHook")
        self._next = None

    def before_run(self, run_context):
        fetches = {"step": self._step}
        self._request = self._summary_op is not None and (
            self._next is None or self._timer.should_trigger_for_step(self._next))
        if self._request:
            fetches["summary"] = self._summary_op
        return SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        step = int(run_values.results["step"])
        if self._request:
            self._timer.update_last_triggered_step(step)
            self._writer.add_summary(run_values.results["summary"], step)
        self._next = step + 1

    def end(self, session):
        self._writer.flush()


class StepCounterHook(SessionRunHook):
    """Writes global_step/sec to a FileWriter (and the log) every every_n_steps steps."""

    def __init__(self, every_n_steps=100, every_n_secs=None, output_dir=None, summary_writer=None):
        self._timer = SecondOrStepTimer(every_n_secs, None if every_n_secs is not None else every_n_steps)
        self._output_dir, self._writer = output_dir, summary_writer

    def begin(self):
        from tfplus import summary
        if self._writer is None and self._output_dir is not None:
            self._writer = summary.FileWriterCache.get(self._output_dir)
        self._step = _global_step_tensor("StepCounterHook")
        self._last = None

    def before_run(self, run_context):
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results) + 1
        if self._last is None:
            self._last = (time.time(), step)
            self._timer.update_last_triggered_step(step)
            return
        if self._timer.should_trigger_for_step(step):
            t0, s0 = self._last
            rate = (step - s0) / max(time.time() - t0, 1e-9)
            logging.info("global_step/sec: %g", rate)
            if self._writer is not None:
                from tfplus import summary
                self._writer.add_summary(summary.Summary(value=[summary.Summary.Value(
                    tag="global_step/sec", simple_value=rate)]), step)
            self._last = (time.time(), step)
            self._timer.update_last_triggered_step(step)


class NanTensorHook(SessionRunHook):
    """Checks the loss after every run: NaN raises NanLossDuringTrainingError (or, with fail_on_nan_loss=False,
    logs and requests a stop)."""

    def __init__(self, loss_tensor, fail_on_nan_loss=True):
        self._loss, self._fail = loss_tensor, fail_on_nan_loss

    def before_run(self, run_context):
        return SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        if np.isnan(run_values.results).any():
            if self._fail:
                raise NanLossDuringTrainingError
            logging.error("Model diverged with loss = NaN.")
            run_context.request_stop()


class FinalOpsHook(SessionRunHook):
    """Runs `final_ops` once when the session ends; their values are then `final_ops_values`."""

    def __init__(self, final_ops, final_ops_feed_dict=None):
        self._ops, self._feeds, self.final_ops_values = final_ops, final_ops_feed_dict, None

    def end(self, session):
        if self._ops is not None:
            self.final_ops_values = session.run(self._ops, feed_dict=self._feeds)


class FeedFnHook(SessionRunHook):
    """Adds feed_fn()'s feeds to every run."""

    def __init__(self, feed_fn):
        self._feed_fn = feed_fn

    def before_run(self, run_context):
        return SessionRunArgs(fetches=None, feed_dict=self._feed_fn())


class ProfilerHook(SessionRunHook):
    """Traces a run every save_steps steps (or save_secs seconds) and writes its Chrome trace to
    output_dir/timeline-<global step>.json (TF1's; chrome://tracing, ui.perfetto.dev). The first run is not
    traced (it builds the step)."""

    def __init__(self, save_steps=None, save_secs=None, output_dir="", show_dataflow=True, show_memory=False):
        self._timer = SecondOrStepTimer(save_secs, save_steps)
        self._dir, self._next_step, self._tracing = output_dir, None, False

    def begin(self):
        from tfplus.summary import FileWriterCache
        self._step = _global_step_tensor("ProfilerHook")
        self._writer = FileWriterCache.get(self._dir)

    def before_run(self, run_context):
        from tfplus.profiler import RunOptions
        self._tracing = self._next_step is not None and self._timer.should_trigger_for_step(self._next_step)
        return SessionRunArgs({"step": self._step},
                              options=RunOptions(trace_level=RunOptions.FULL_TRACE) if self._tracing else None)

    def after_run(self, run_context, run_values):
        from tfplus.python.client.timeline import Timeline
        step = int(run_values.results["step"])
        if self._next_step is None:
            self._timer.update_last_triggered_step(step)
        step += 1
        if self._tracing:
            step = int(run_context.session.run(self._step))
            self._timer.update_last_triggered_step(step)
            os.makedirs(self._dir or ".", exist_ok=True)
            with open(os.path.join(self._dir, f"timeline-{step}.json"), "w") as f:
                f.write(Timeline(run_values.run_metadata.step_stats).generate_chrome_trace_format())
            self._writer.add_run_metadata(run_values.run_metadata, f"step_{step}")
        self._next_step = step + 1


class Scaffold:
    """The init op, saver and summary op a monitored session uses (made from the graph when not given)."""

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None, local_init_op=None,
                 summary_op=None, saver=None):
        self.init_op, self.init_feed_dict, self.init_fn = init_op, init_feed_dict, init_fn
        self.local_init_op, self.summary_op, self.saver = local_init_op, summary_op, saver

    def finalize(self):
        """Makes what is not given, or takes it from the graph's collections where an earlier Scaffold put it
        (TF1's get_or_default: a second monitored session on the graph builds nothing), then finalizes the graph
        (a MonitoredSession unfinalizes it when it closes)."""
        from tfplus import summary
        if self.init_op is None:
            self.init_op = Scaffold.get_or_default("init_op", GraphKeys.INIT_OP, global_variables_initializer)
        if self.local_init_op is None:
            self.local_init_op = Scaffold.get_or_default("local_init_op", "local_init_op",
                                                         local_variables_initializer)
        if self.summary_op is None:
            self.summary_op = Scaffold.get_or_default("summary_op", "summary_op", summary.merge_all)
        if self.saver is None:
            self.saver = Scaffold.get_or_default("saver", GraphKeys.SAVERS, Saver)
        get_default_graph().finalize()
        return self

    @staticmethod
    def get_or_default(arg_name: str, collection_key: str, default_constructor):
        """The one item of the graph's collection `collection_key`, else default_constructor()'s (added to it)."""
        graph = get_default_graph()
        items = graph.get_collection(collection_key)
        if len(items) > 1:
            raise RuntimeError(f"More than one item in the collection {collection_key!r}; give the Scaffold "
                               f"its {arg_name}")
        if items:
            return items[0]
        item = default_constructor()
        if item is not None:
            graph.add_to_collection(collection_key, item)
        return item


class SessionCreator:
    """Makes the session a MonitoredSession runs (TF1's): override create_session, which returns it initialized
    or restored."""

    def create_session(self):
        raise NotImplementedError(f"{type(self).__name__}.create_session: a SessionCreator returns the session")


class ChiefSessionCreator(SessionCreator):
    """TF1's: a session with the scaffold's variables initialized, or restored from checkpoint_filename_with_path
    or the newest checkpoint of checkpoint_dir; then the scaffold's local_init_op."""

    def __init__(self, scaffold=None, master="", config=None, checkpoint_dir=None,
                 checkpoint_filename_with_path=None, device: str = "cpu"):
        if master:
            raise NotImplementedError("ChiefSessionCreator(master=...): distributed training is not implemented in "
                                      "tfplus; leave master=''")
        self._scaffold, self._config, self._device = scaffold or Scaffold(), config, device
        self._dir, self._path = checkpoint_dir, checkpoint_filename_with_path

    def create_session(self) -> Session:
        scaffold = self._scaffold.finalize()
        sess = Session(graph=get_default_graph(), config=self._config, device=self._device)
        path = self._path or (latest_checkpoint(self._dir) if self._dir else None)
        if path is not None:
            scaffold.saver.restore(sess, path)
            logging.info("Restored from %s", path)
        else:
            sess.run(scaffold.init_op, scaffold.init_feed_dict)
            if scaffold.init_fn is not None:
                scaffold.init_fn(scaffold, sess)
        sess.run(scaffold.local_init_op)
        return sess


class WorkerSessionCreator(ChiefSessionCreator):
    """TF1's, for one process: there is no chief to wait for, so the worker is its own chief (it initializes or
    restores as ChiefSessionCreator does)."""

    def __init__(self, scaffold=None, master="", config=None, max_wait_secs=30 * 60, device: str = "cpu"):
        super().__init__(scaffold, master, config, device=device)


class _Coordinator:
    """The stop flag a monitored session shares with its hooks: the part of TF1's tf.train.Coordinator that one
    process needs. A hook given it in after_create_session may request a stop at any time (from a signal
    handler, say); the session's should_stop() then says so, before the next run."""

    def __init__(self):
        self._stop = False

    def request_stop(self, ex=None) -> None:
        self._stop = True

    def should_stop(self) -> bool:
        return self._stop


class MonitoredSession:
    """A session with hooks: run() = before_run of every hook, one Session.run with their fetches merged in,
    after_run of every hook. Initializes, or restores the newest checkpoint in checkpoint_dir; or, given a
    session_creator (TF1's), runs the session it makes (scaffold, checkpoint_dir, config and device are then the
    creator's business)."""

    def __init__(self, hooks=None, scaffold=None, checkpoint_dir=None, config=None, device: str = "cpu",
                 stop_grace_period_secs=120, session_creator=None):
        if session_creator is not None and (scaffold, checkpoint_dir, config) != (None, None, None):
            raise ValueError("MonitoredSession: give session_creator, or scaffold/checkpoint_dir/config, not both "
                             "(the creator makes and restores the session)")
        self._hooks = list(hooks or ())
        self._graph = get_default_graph()
        self._graph_was_finalized = self._graph.finalized
        for hook in self._hooks:
            hook.begin()
        creator = session_creator or ChiefSessionCreator(scaffold, config=config, checkpoint_dir=checkpoint_dir,
                                                         device=device)
        self._sess = creator.create_session()
        self._stop, self._coord = False, _Coordinator()
        self._default = self._sess.as_default()
        self._default.__enter__()
        for hook in self._hooks:
            hook.after_create_session(self._sess, self._coord)

    @property
    def graph(self):
        return self._graph

    def should_stop(self) -> bool:
        return self._stop or self._coord.should_stop()

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if self.should_stop():
            raise RuntimeError("Run called even after should_stop requested.")
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict), self._sess)
        extra, feeds = {}, dict(feed_dict or {})
        for hook in self._hooks:
            args = hook.before_run(context)
            if args is None:
                continue
            if args.options is not None and args.options.trace_level > getattr(options, "trace_level", 0):
                from tfplus.profiler import RunMetadata, RunOptions  # a hook asks for a traced run (ProfilerHook)
                options = RunOptions(trace_level=args.options.trace_level)
                run_metadata = run_metadata if run_metadata is not None else RunMetadata()
            if args.fetches is not None:
                extra[hook] = args.fetches
            for key, value in (args.feed_dict or {}).items():
                if key in feeds:
                    raise RuntimeError(f"the feed of {key} is given twice (by the caller and by a hook)")
                feeds[key] = value
        # A run that no hook adds to is the caller's as it is (the same fetches, so the same plans as without hooks).
        results = self._sess.run({"caller": fetches, "hooks": extra}, feeds, options, run_metadata) if extra else \
            {"caller": self._sess.run(fetches, feeds, options, run_metadata), "hooks": {}}
        for hook in self._hooks:
            hook.after_run(context, SessionRunValues(results["hooks"].get(hook), options, run_metadata))
        self._stop = self._stop or context.stop_requested
        return results["caller"]

    def run_step_fn(self, step_fn):
        """TF1's: step_fn(step_context) makes one step its own way: step_context.session is the raw session,
        run_with_hooks(...) is this session's run, request_stop() ends the loop after the step."""
        context = _StepContext(self)
        value = step_fn(context)
        self._stop = self._stop or context.stop_requested
        return value

    def close(self) -> None:
        """Ends every hook (end(): a last checkpoint, say), then closes the session."""
        self._close(ended=True)

    def _close(self, ended: bool) -> None:
        if self._sess is None:
            return
        try:
            if ended:
                for hook in self._hooks:
                    hook.end(self._sess)
        finally:
            self._default.__exit__(None, None, None)
            self._sess.close()
            self._sess = None
            if not self._graph_was_finalized:  # TF1's: the graph takes new ops again after the session
                self._graph._unsafe_unfinalize()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # As TF1's: the end of the input (OutOfRangeError from an iterator's get_next, StopIteration) ends the
        # session as a stop does, and is swallowed; after another error the hooks are not ended (no checkpoint
        # of the state the error left); the session is closed all the same.
        end_of_input = exc_type is not None and issubclass(exc_type, (errors.OutOfRangeError, StopIteration))
        self._close(ended=exc_type is None or end_of_input)
        return end_of_input


class _StepContext:
    """What MonitoredSession.run_step_fn gives its step_fn."""

    def __init__(self, monitored: MonitoredSession):
        self._monitored, self.stop_requested = monitored, False

    @property
    def session(self) -> Session:
        return self._monitored._sess

    def run_with_hooks(self, *args, **kwargs):
        return self._monitored.run(*args, **kwargs)

    def request_stop(self) -> None:
        self.stop_requested = True


class SingularMonitoredSession(MonitoredSession):
    """TF1's SingularMonitoredSession: a MonitoredSession whose underlying tf.Session raw_session() gives."""

    def raw_session(self) -> Session:
        return self._sess


def MonitoredTrainingSession(master="", is_chief=True, checkpoint_dir=None, scaffold=None, hooks=None,  # noqa: N802
                             chief_only_hooks=None, save_checkpoint_secs=600, save_summaries_steps=100,
                             save_summaries_secs=None, config=None, stop_grace_period_secs=120,
                             log_step_count_steps=100, max_wait_secs=7200, save_checkpoint_steps=None,
                             summary_dir=None, device: str = "cpu") -> MonitoredSession:
    """TF1's MonitoredTrainingSession for one process: with checkpoint_dir, it restores from / saves
    checkpoints there (every save_checkpoint_secs seconds, or save_checkpoint_steps steps) and writes summaries
    (every save_summaries_steps) and global_step/sec (every log_step_count_steps) to summary_dir (default
    checkpoint_dir)."""
    if master:
        raise NotImplementedError("MonitoredTrainingSession(master=...): distributed training is not implemented "
                                  "in tfplus; leave master=''")
    scaffold = scaffold or Scaffold()
    all_hooks = list(hooks or ()) + (list(chief_only_hooks or ()) if is_chief else [])
    summary_dir = summary_dir or checkpoint_dir
    if is_chief and summary_dir:
        if log_step_count_steps and log_step_count_steps > 0:
            all_hooks.append(StepCounterHook(log_step_count_steps, output_dir=summary_dir))
        if save_summaries_steps or save_summaries_secs:
            all_hooks.append(SummarySaverHook(save_steps=None if save_summaries_secs else save_summaries_steps,
                                              save_secs=save_summaries_secs, output_dir=summary_dir,
                                              scaffold=scaffold))
    if is_chief and checkpoint_dir and (save_checkpoint_secs or save_checkpoint_steps):
        all_hooks.append(CheckpointSaverHook(checkpoint_dir, save_secs=None if save_checkpoint_steps else
                                             save_checkpoint_secs, save_steps=save_checkpoint_steps,
                                             scaffold=scaffold))
    return MonitoredSession(all_hooks, scaffold, checkpoint_dir if is_chief else None, config, device,
                            stop_grace_period_secs)


class SessionManager:
    """TF1's tf.train.SessionManager for one process: prepare_session restores the newest checkpoint of
    checkpoint_dir (or checkpoint_filename_with_path) with `saver`, else runs init_op and init_fn."""

    def __init__(self, local_init_op=None, ready_op=None, ready_for_local_init_op=None, graph=None,
                 recovery_wait_secs=30, local_init_run_options=None, local_init_feed_dict=None):
        self._graph = graph or get_default_graph()
        self._local_init_op, self._local_init_feed_dict = local_init_op, local_init_feed_dict

    def prepare_session(self, master="", init_op=None, saver=None, checkpoint_dir=None, wait_for_checkpoint=False,
                        max_wait_secs=7200, config=None, init_feed_dict=None, init_fn=None,
                        checkpoint_filename_with_path=None, device: str = "cpu") -> Session:
        if master:
            raise NotImplementedError("SessionManager.prepare_session(master=...): distributed training is not "
                                      "implemented in tfplus; leave master=''")
        sess = Session(graph=self._graph, config=config, device=device)
        path = checkpoint_filename_with_path or (latest_checkpoint(checkpoint_dir) if checkpoint_dir else None)
        if saver is not None and path is not None:
            saver.restore(sess, path)
        else:
            if init_op is None and init_fn is None:
                sess.close()
                raise RuntimeError("SessionManager.prepare_session: there is no checkpoint to restore and neither "
                                   "init_op nor init_fn to initialize the model")
            if init_op is not None:
                sess.run(init_op, init_feed_dict)
            if init_fn is not None:
                init_fn(sess)
        if self._local_init_op is not None:
            sess.run(self._local_init_op, self._local_init_feed_dict)
        return sess


def basic_train_loop(supervisor, train_step_fn, args=None, kwargs=None, master="") -> None:
    """tf.train.basic_train_loop: train_step_fn(sess, *args, **kwargs) in a supervisor's managed session until it
    stops."""
    with supervisor.managed_session(master) as sess:
        while not supervisor.should_stop():
            train_step_fn(sess, *(args or ()), **(kwargs or {}))
