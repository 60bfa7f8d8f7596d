"""tf.estimator.train_and_evaluate for one process: trains to train_spec.max_steps, evaluating on the eval input
after a new checkpoint at most every eval_spec.throttle_secs seconds and once at the end (TensorFlow's local
mode), then runs eval_spec's exporters on the final evaluation.

    train_spec = tf.estimator.TrainSpec(train_input_fn, max_steps=1000)
    eval_spec = tf.estimator.EvalSpec(eval_input_fn, steps=None, throttle_secs=0)
    metrics, exports = tf.estimator.train_and_evaluate(est, train_spec, eval_spec)
"""
from __future__ import annotations

import os
from typing import NamedTuple

from tfplus import logging
from tfplus.estimator.estimator import Estimator
from tfplus.train.monitored_session import CheckpointSaverListener, SecondOrStepTimer


class TrainSpec(NamedTuple):
    """What train_and_evaluate trains on: input_fn, up to global step max_steps (None: until the input ends),
    with hooks."""
    input_fn: object
    max_steps: int | None = None
    hooks: tuple = ()


class EvalSpec(NamedTuple):
    """What train_and_evaluate evaluates on: input_fn for `steps` batches (None: until the input ends), at most
    every throttle_secs seconds; `exporters` run after each evaluation (their export(estimator, export_path,
    checkpoint_path, eval_result, is_the_final_export))."""
    input_fn: object
    steps: int | None = 100
    name: str | None = None
    hooks: tuple = ()
    exporters: tuple = ()
    start_delay_secs: int = 120
    throttle_secs: int = 600


class _EvaluateOnCheckpoints(CheckpointSaverListener):
    """Evaluates after a checkpoint is saved (not the first, which holds the state training started from), at
    most every throttle_secs seconds, and at the end unless the last checkpoint was evaluated."""

    def __init__(self, estimator: Estimator, eval_spec: EvalSpec, max_steps: int | None):
        self._estimator, self._spec, self._max_steps = estimator, eval_spec, max_steps
        self.eval_result, self.export_results = None, []

    def begin(self):
        self._timer = SecondOrStepTimer(every_secs=self._spec.throttle_secs)
        self._first = True

    def after_save(self, session, global_step_value):
        if self._first:
            self._first = False
            return
        if self._timer.should_trigger_for_step(global_step_value):
            # As TensorFlow's: the export of the evaluation at max_steps is the final one.
            self._evaluate(global_step_value, final=self._max_steps is not None and
                           global_step_value >= self._max_steps)
        else:
            logging.info("Skip the current checkpoint eval due to throttle secs (%s secs).", self._spec.throttle_secs)

    def end(self, session, global_step_value):
        if global_step_value != self._timer.last_triggered_step():
            self._evaluate(global_step_value, final=True)

    def _evaluate(self, step: int, final: bool) -> None:
        self._timer.update_last_triggered_step(step)
        self.eval_result = self._estimator.evaluate(self._spec.input_fn, steps=self._spec.steps,
                                                    hooks=self._spec.hooks, name=self._spec.name)
        path = self._estimator.latest_checkpoint()
        for exporter in self._spec.exporters:
            folder = os.path.join(self._estimator.model_dir, "export", exporter.name)
            self.export_results.append(exporter.export(self._estimator, folder, path, self.eval_result, final))


def train_and_evaluate(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec):
    """Trains and evaluates `estimator` in this process; returns (the last evaluation's metrics, the
    exporters' results)."""
    if not isinstance(estimator, Estimator):
        raise TypeError(f"train_and_evaluate: estimator must be a tf.estimator.Estimator, got {estimator!r}")
    if not isinstance(train_spec, TrainSpec) or not isinstance(eval_spec, EvalSpec):
        raise TypeError("train_and_evaluate: give a tf.estimator.TrainSpec and a tf.estimator.EvalSpec")
    config = estimator.config
    if not (config.save_checkpoints_steps or config.save_checkpoints_secs):
        raise ValueError("train_and_evaluate evaluates each new checkpoint: set save_checkpoints_steps or "
                         "save_checkpoints_secs in the Estimator's RunConfig")
    listener = _EvaluateOnCheckpoints(estimator, eval_spec, train_spec.max_steps)
    estimator.train(train_spec.input_fn, hooks=list(train_spec.hooks), max_steps=train_spec.max_steps,
                    saving_listeners=[listener])
    return listener.eval_result, listener.export_results


__all__ = ["TrainSpec", "EvalSpec", "train_and_evaluate"]
