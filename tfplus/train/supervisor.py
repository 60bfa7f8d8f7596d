"""tf.train.Supervisor (TF1), one process: a session initialized or restored from `logdir`, and the standard
services, each a thread: a checkpoint every save_model_secs, the summary op every save_summaries_secs, and
global_step/sec.

    sv = tf.train.Supervisor(logdir="runs/a")
    with sv.managed_session() as sess:
        while not sv.should_stop():
            sess.run(train_op)

As TF1's, it finalizes the graph, writes graph.pbtxt to logdir, and ends the managed session quietly at the end of
the input (OutOfRangeError); any other error stops the services and is raised.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

from tfplus import errors, graph_io, logging
from tfplus.framework import GraphKeys, get_default_graph
from tfplus.train.monitored_session import SessionManager
from tfplus.train.saver import Saver
from tfplus.train.training_util import get_global_step
from tfplus.variables import global_variables_initializer, local_variables_initializer

__all__ = ["Supervisor"]


class Supervisor:
    USE_DEFAULT = 0  # TF1's marker: build the default op (None: none)

    def __init__(self, graph=None, ready_op=USE_DEFAULT, ready_for_local_init_op=USE_DEFAULT, is_chief=True,
                 init_op=USE_DEFAULT, init_feed_dict=None, local_init_op=USE_DEFAULT, logdir=None,
                 summary_op=USE_DEFAULT, saver=USE_DEFAULT, global_step=USE_DEFAULT, save_summaries_secs=120,
                 save_model_secs=600, recovery_wait_secs=30, stop_grace_secs=120, checkpoint_basename="model.ckpt",
                 session_manager=None, summary_writer=USE_DEFAULT, init_fn=None, local_init_run_options=None):
        from tfplus import summary
        self._graph = graph or get_default_graph()
        default = self.USE_DEFAULT
        with self._graph.as_default():
            self._init_op = global_variables_initializer() if init_op is default else init_op
            self._local_init_op = local_variables_initializer() if local_init_op is default else local_init_op
            self._summary_op = summary.merge_all() if summary_op is default else summary_op
            if saver is default:
                savers = self._graph.get_collection(GraphKeys.SAVERS)
                saver = savers[0] if savers else Saver()
            self._saver = saver
            self._global_step = get_global_step() if global_step is default else global_step
        self._is_chief, self._logdir, self._init_feed_dict, self._init_fn = is_chief, logdir, init_feed_dict, init_fn
        self._save_summaries_secs, self._save_model_secs = save_summaries_secs, save_model_secs
        self._save_path = os.path.join(logdir, checkpoint_basename) if logdir else None
        self._summary_writer = (summary.FileWriter(logdir) if logdir and is_chief else None) \
            if summary_writer is default else summary_writer
        self._session_manager = session_manager or SessionManager(local_init_op=self._local_init_op,
                                                                  graph=self._graph)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        if is_chief and logdir:
            graph_io.write_graph(self._graph.as_graph_def(), logdir, "graph.pbtxt")
            if self._summary_writer is not None:
                self._summary_writer.add_graph(self._graph)
        self._graph.finalize()

    # -- TF1's properties ----------------------------------------------------------------------------------------
    graph = property(lambda self: self._graph)
    is_chief = property(lambda self: self._is_chief)
    saver = property(lambda self: self._saver)
    save_path = property(lambda self: self._save_path)
    summary_op = property(lambda self: self._summary_op)
    summary_writer = property(lambda self: self._summary_writer)
    global_step = property(lambda self: self._global_step)
    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    session_manager = property(lambda self: self._session_manager)
    save_model_secs = property(lambda self: self._save_model_secs)
    save_summaries_secs = property(lambda self: self._save_summaries_secs)

    @property
    def coord(self):
        return self

    # -- sessions ------------------------------------------------------------------------------------------------
    def prepare_or_wait_for_session(self, master="", config=None, wait_for_checkpoint=False, max_wait_secs=7200,
                                    start_standard_services=True):
        """The session, restored from logdir's newest checkpoint or initialized; with the services started."""
        sess = self._session_manager.prepare_session(
            master, init_op=self._init_op, saver=self._saver, checkpoint_dir=self._logdir, config=config,
            init_feed_dict=self._init_feed_dict, init_fn=self._init_fn)
        if start_standard_services and self._is_chief:
            self.start_standard_services(sess)
        return sess

    @contextlib.contextmanager
    def managed_session(self, master="", config=None, start_standard_services=True, close_summary_writer=True):
        sess = self.prepare_or_wait_for_session(master, config, start_standard_services=start_standard_services)
        try:
            yield sess
        except errors.OutOfRangeError as e:  # the end of the input ends training, as a stop does
            self.request_stop(e)
        except BaseException as e:
            self.request_stop(e)
            raise
        finally:
            try:
                self.stop(close_summary_writer=close_summary_writer)
            finally:
                sess.close()

    def start_standard_services(self, sess) -> list[threading.Thread]:
        """The checkpoint, summary and steps/sec threads (those whose period and output are set)."""
        if self._logdir is None:
            raise ValueError("Supervisor: start_standard_services needs a logdir")
        threads = []
        if self._save_model_secs and self._saver is not None:
            threads.append(self.loop(self._save_model_secs, self._checkpoint, (sess,)))
        if self._save_summaries_secs and self._summary_writer is not None:
            if self._summary_op is not None:
                threads.append(self.loop(self._save_summaries_secs, self._summarize, (sess,)))
            if self._global_step is not None:
                threads.append(self.loop(self._save_summaries_secs, self._steps_per_sec, (sess, [None, None])))
        return threads

    def _checkpoint(self, sess) -> None:
        self._saver.save(sess, self._save_path, global_step=self._global_step)

    def _summarize(self, sess) -> None:
        fetches = [self._summary_op] + ([self._global_step] if self._global_step is not None else [])
        values = sess.run(fetches)
        self.summary_computed(sess, values[0], values[1] if len(values) > 1 else None)

    def _steps_per_sec(self, sess, last: list) -> None:
        from tfplus.summary import Summary
        step, now = int(sess.run(self._global_step)), time.time()
        if last[0] is not None and now > last[1]:
            rate = (step - last[0]) / (now - last[1])
            self._summary_writer.add_summary(Summary(value=[Summary.Value(tag="global_step/sec",
                                                                          simple_value=rate)]), step)
            logging.info("global_step/sec: %g", rate)
        last[:] = [step, now]

    def summary_computed(self, sess, summary, global_step=None) -> None:
        if self._summary_writer is None:
            raise RuntimeError("Supervisor: summary_computed needs a summary writer (give logdir)")
        if global_step is None and self._global_step is not None:
            global_step = sess.run(self._global_step)
        self._summary_writer.add_summary(summary, global_step)

    def loop(self, timer_interval_secs, target, args=None, kwargs=None) -> threading.Thread:
        """A thread calling target(*args, **kwargs) now and then every timer_interval_secs until the stop."""
        def run():
            try:
                while True:
                    target(*(args or ()), **(kwargs or {}))
                    if self._stop.wait(timer_interval_secs):
                        return
            except Exception as e:  # noqa: BLE001 (TF1's: a service's error stops the supervisor, join raises it)
                self.request_stop(e)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def start_queue_runners(self, sess, queue_runners=None) -> list:
        return []  # tfplus's queue pipelines read when their batch runs (tfplus.data.queues)

    # -- stopping ------------------------------------------------------------------------------------------------
    def request_stop(self, ex=None) -> None:
        if ex is not None and self._error is None and not isinstance(ex, errors.OutOfRangeError):
            self._error = ex
        self._stop.set()

    def should_stop(self) -> bool:
        return self._stop.is_set()

    def wait_for_stop(self, timeout=None) -> bool:
        return self._stop.wait(timeout)

    def stop(self, threads=None, close_summary_writer=True, ignore_live_threads=False) -> None:
        """Stops the services and waits for them; raises the error that stopped them, if any."""
        self._stop.set()
        for thread in self._threads + list(threads or ()):
            thread.join()
        self._threads = []
        if close_summary_writer and self._summary_writer is not None:
            self._summary_writer.close()
        error, self._error = self._error, None
        if error is not None:
            raise error

    join = stop
