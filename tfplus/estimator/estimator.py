"""tf.estimator.Estimator (TF1): a model_fn trained, evaluated, run and exported, each call in a graph of its own
that starts from the newest checkpoint in model_dir.

    def model_fn(features, labels, mode, params):
        logits = tf.layers.dense(features["x"], 10)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"class": tf.argmax(logits, 1)})
        loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        train_op = tf.train.AdamOptimizer().minimize(loss, tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops={
            "accuracy": tf.metrics.accuracy(labels, tf.argmax(logits, 1))})

    est = tf.estimator.Estimator(model_fn, "run", tf.estimator.RunConfig(save_checkpoints_steps=100))
    est.train(input_fn, max_steps=1000)          # resumes from run/'s newest checkpoint
    est.evaluate(eval_input_fn)                  # {"accuracy": ..., "loss": ..., "global_step": 1000}

What Estimator does underneath, as TensorFlow's does: train is a tf.train.MonitoredTrainingSession loop with
StopAtStepHook, NanTensorHook, LoggingTensorHook and CheckpointSaverHook; evaluate runs the metrics' update ops
over the input, then reads their values; predict yields one dict per example; export_saved_model writes a
SavedModel of the PREDICT graph (tfplus.saved_model).
"""
from __future__ import annotations

import collections
import copy
import inspect
import os
import shutil
import tempfile
import time

import numpy as np

from tfplus import errors, logging
from tfplus.data.dataset_ops import Dataset, make_one_shot_iterator
from tfplus.framework import Graph, GraphKeys, Tensor
from tfplus.gfile import fsync_folder
from tfplus.train import monitored_session as _ms
from tfplus.train.saver import Saver, latest_checkpoint, list_variables, load_variable
from tfplus.train.training_util import create_global_step, get_global_step


class ModeKeys:
    """The mode a model_fn builds its graph for."""
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


LOSS_METRIC_KEY = "loss"
GLOBAL_STEP_KEY = "global_step"


class RunConfig:
    """How an Estimator runs: where and how often it checkpoints, how many checkpoints it keeps, the graph
    seed, how often it logs. One process (TF_CONFIG clusters and distribution strategies are not implemented).
    `device` (tfplus's, as tf.Session's): the device its sessions run on ("cpu", "opencl", "opencl:1")."""

    def __init__(self, model_dir=None, tf_random_seed=None, save_summary_steps=100, save_checkpoints_steps=None,
                 save_checkpoints_secs=None, session_config=None, keep_checkpoint_max=5,
                 keep_checkpoint_every_n_hours=10000, log_step_count_steps=100, train_distribute=None,
                 device_fn=None, protocol=None, eval_distribute=None, experimental_distribute=None,
                 experimental_max_worker_delay_secs=None, session_creation_timeout_secs=7200,
                 checkpoint_save_graph_def=True, device: str = "cpu"):
        if save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise ValueError("RunConfig: at most one of save_checkpoints_steps and save_checkpoints_secs can be "
                             f"set (got {save_checkpoints_steps} and {save_checkpoints_secs})")
        for name, value in (("train_distribute", train_distribute), ("eval_distribute", eval_distribute),
                            ("experimental_distribute", experimental_distribute), ("device_fn", device_fn)):
            if value is not None:
                raise NotImplementedError(f"RunConfig({name}=...): tfplus runs an Estimator in one process on one "
                                          "device; leave it unset")
        if save_checkpoints_steps is None and save_checkpoints_secs is None:
            save_checkpoints_secs = 600  # TensorFlow's default
        self.model_dir = os.fspath(model_dir) if model_dir is not None else None
        self.tf_random_seed = tf_random_seed
        self.save_summary_steps = save_summary_steps
        self.save_checkpoints_steps = save_checkpoints_steps
        self.save_checkpoints_secs = save_checkpoints_secs
        self.session_config = session_config
        self.keep_checkpoint_max = keep_checkpoint_max
        self.keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self.log_step_count_steps = log_step_count_steps
        self.session_creation_timeout_secs = session_creation_timeout_secs
        self.checkpoint_save_graph_def = checkpoint_save_graph_def
        self.train_distribute = self.eval_distribute = self.device_fn = None
        self.protocol = protocol
        self.device = device

    # One process: the chief, the only worker.
    is_chief = True
    master = ""
    evaluation_master = ""
    task_type = "worker"
    task_id = 0
    num_ps_replicas = 0
    num_worker_replicas = 1
    cluster_spec = None
    global_id_in_cluster = 0
    service = None

    def replace(self, **kwargs) -> RunConfig:
        """A copy with the given properties changed."""
        new = copy.copy(self)
        unknown = sorted(set(kwargs) - set(vars(self)))
        if unknown:
            raise ValueError(f"RunConfig.replace: {unknown} are not RunConfig properties")
        if kwargs.get("save_checkpoints_steps") is not None:
            kwargs.setdefault("save_checkpoints_secs", None)
        if kwargs.get("save_checkpoints_secs") is not None:
            kwargs.setdefault("save_checkpoints_steps", None)
        vars(new).update(kwargs)
        if new.save_checkpoints_steps is not None and new.save_checkpoints_secs is not None:
            raise ValueError("RunConfig.replace: at most one of save_checkpoints_steps and save_checkpoints_secs "
                             "can be set")
        return new


_SPEC_FIELDS = ("mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs",
                "training_chief_hooks", "training_hooks", "scaffold", "evaluation_hooks", "prediction_hooks")


class EstimatorSpec(collections.namedtuple("EstimatorSpec", _SPEC_FIELDS)):
    """What a model_fn returns: for TRAIN a loss and a train_op; for EVAL a loss (and eval_metric_ops, each
    a (value, update_op) pair as tf.metrics gives); for PREDICT the predictions (a tensor or a dict of them)."""

    def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None, export_outputs=None,
                training_chief_hooks=None, training_hooks=None, scaffold=None, evaluation_hooks=None,
                prediction_hooks=None):
        if mode not in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT):
            raise ValueError(f"EstimatorSpec: mode must be one of tf.estimator.ModeKeys' TRAIN, EVAL, PREDICT; "
                             f"got {mode!r}")
        if mode in (ModeKeys.TRAIN, ModeKeys.EVAL) and loss is None:
            raise ValueError(f"EstimatorSpec(mode={mode!r}): Missing loss.")
        if loss is not None:
            loss = _as_tensor(loss, "loss")
            if loss.shape.ndims not in (None, 0) and loss.shape.num_elements() != 1:
                raise ValueError(f"EstimatorSpec: Loss must be scalar, given: {loss} (shape {loss.shape}); reduce "
                                 "it, e.g. with tf.reduce_mean")
        if mode == ModeKeys.TRAIN and train_op is None:
            raise ValueError("EstimatorSpec(mode='train'): Missing train_op.")
        if mode == ModeKeys.PREDICT and predictions is None:
            raise ValueError("EstimatorSpec(mode='infer'): Missing predictions.")
        for key, pair in (eval_metric_ops or {}).items():
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise TypeError(f"EstimatorSpec: eval_metric_ops[{key!r}] must be a (metric_tensor, update_op) "
                                f"tuple, as tf.metrics returns; given: {pair!r}")
        return super().__new__(cls, mode, {} if predictions is None else predictions, loss, train_op,
                               dict(eval_metric_ops or {}), export_outputs, tuple(training_chief_hooks or ()),
                               tuple(training_hooks or ()), scaffold or _ms.Scaffold(), tuple(evaluation_hooks or ()),
                               tuple(prediction_hooks or ()))


def _as_tensor(value, what: str) -> Tensor:
    from tfplus.framework import convert_to_tensor
    return value if isinstance(value, Tensor) else convert_to_tensor(value, name=what)


class _ListenerBounds(_ms.SessionRunHook):
    """Calls the saving listeners' begin and end (CheckpointSaverHook calls before_save and after_save); runs
    after the checkpoint hook, whose end saves the last checkpoint."""

    def __init__(self, listeners):
        self._listeners = listeners

    def begin(self):
        self._step = get_global_step()
        for listener in self._listeners:
            listener.begin()

    def end(self, session):
        step = int(session.run(self._step))
        for listener in self._listeners:
            listener.end(session, step)


class _RestoringCreator(_ms.SessionCreator):
    """TF1's ChiefSessionCreator for evaluate and predict: the variables restored from `path` (or initialized
    where there is no checkpoint), then the local variables initialized."""

    def __init__(self, graph: Graph, config: RunConfig, saver: Saver | None, path: str | None, local_init_op):
        self._graph, self._config, self._saver, self._path = graph, config, saver, path
        self._local_init_op = local_init_op
        self.session = None

    def create_session(self):
        from tfplus.engine.session import Session
        from tfplus.variables import global_variables_initializer, local_variables_initializer
        sess = Session(graph=self._graph, config=self._config.session_config, device=self._config.device)
        if self._path is not None:
            self._saver.restore(sess, self._path)
            logging.info("Restoring parameters from %s", self._path)
        else:
            sess.run(global_variables_initializer())
        sess.run(self._local_init_op if self._local_init_op is not None else local_variables_initializer())
        self.session = sess
        return sess


def _fn_args(fn) -> set:
    fn = getattr(fn, "func", fn)  # functools.partial
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


class Estimator:
    """tf.estimator.Estimator: trains, evaluates, predicts with and exports the model that `model_fn(features,
    labels, mode, params, config)` builds (it may take any of those arguments but features), keeping its
    checkpoints in `model_dir` (a temporary folder when neither it nor config.model_dir is given)."""

    def __init__(self, model_fn, model_dir=None, config=None, params=None, warm_start_from=None):
        if not callable(model_fn):
            raise TypeError(f"Estimator: model_fn must be a function, got {model_fn!r}")
        args = _fn_args(model_fn)
        if "features" not in args:
            raise ValueError(f"Estimator: model_fn ({model_fn}) must include features argument.")
        if params is not None and "params" not in args:
            raise ValueError(f"Estimator: model_fn ({model_fn}) does not include params argument, but params "
                             f"({params}) is passed to Estimator.")
        if warm_start_from is not None:
            raise NotImplementedError("Estimator(warm_start_from=...): tfplus does not implement warm starting; "
                                      "call tf.train.init_from_checkpoint inside model_fn instead")
        config = config if config is not None else RunConfig()
        if not isinstance(config, RunConfig):
            raise ValueError(f"Estimator: config must be a tf.estimator.RunConfig, got {config!r}")
        model_dir = os.fspath(model_dir) if model_dir is not None else None
        if model_dir and config.model_dir and os.path.abspath(model_dir) != os.path.abspath(config.model_dir):
            raise ValueError(f"Estimator: model_dir are set both in constructor and RunConfig, but with different "
                             f"values. In constructor: '{model_dir}', in RunConfig: '{config.model_dir}' ")
        model_dir = model_dir or config.model_dir
        if not model_dir:
            model_dir = tempfile.mkdtemp()
            logging.warning("Using temporary folder as model directory: %s", model_dir)
        self._model_dir = model_dir
        self._config = config.replace(model_dir=model_dir)
        self._model_fn, self._params = model_fn, dict(params or {})

    @property
    def model_dir(self) -> str:
        return self._model_dir

    @property
    def config(self) -> RunConfig:
        return copy.deepcopy(self._config)

    @property
    def params(self) -> dict:
        return copy.deepcopy(self._params)

    @property
    def model_fn(self):
        return self._model_fn

    # -- checkpoints ----------------------------------------------------------------------------------------
    def latest_checkpoint(self) -> str | None:
        return latest_checkpoint(self._model_dir)

    def _checkpoint(self) -> str:
        path = self.latest_checkpoint()
        if path is None:
            raise ValueError(f"Could not find trained model in model_dir: {self._model_dir}. Train it first "
                             "(Estimator.train).")
        return path

    def get_variable_names(self) -> list[str]:
        """The names of the variables in the newest checkpoint."""
        return [name for name, _ in list_variables(self._checkpoint())]

    def get_variable_value(self, name: str) -> np.ndarray:
        """The value variable `name` has in the newest checkpoint."""
        return load_variable(self._checkpoint(), name)

    # -- building ----------------------------------------------------------------------------------------------
    def _call_input_fn(self, input_fn, mode):
        args, kwargs = _fn_args(input_fn), {}
        if "mode" in args:
            kwargs["mode"] = mode
        if "params" in args:
            kwargs["params"] = self.params
        if "config" in args:
            kwargs["config"] = self.config
        result = input_fn(**kwargs)
        if isinstance(result, Dataset):
            result = make_one_shot_iterator(result).get_next()
        if isinstance(result, (tuple, list)):
            if len(result) != 2:
                raise ValueError(f"input_fn returned {len(result)} values; it returns features, or (features, "
                                 "labels), or a tf.data.Dataset of either")
            return result[0], result[1]
        return result, None

    def _call_model_fn(self, features, labels, mode) -> EstimatorSpec:
        args, kwargs = _fn_args(self._model_fn), {}
        if "labels" in args:
            kwargs["labels"] = labels
        elif labels is not None:
            raise ValueError("model_fn does not take labels, but input_fn returns labels.")
        if "mode" in args:
            kwargs["mode"] = mode
        if "params" in args:
            kwargs["params"] = self.params
        if "config" in args:
            kwargs["config"] = self.config
        logging.info("Calling model_fn.")
        spec = self._model_fn(features=features, **kwargs)
        if not isinstance(spec, EstimatorSpec):
            raise ValueError(f"model_fn should return an EstimatorSpec, got {type(spec).__name__} (mode {mode!r})")
        return spec

    def _graph(self) -> Graph:
        """A new graph with the config's seed and a global step (created first, as TensorFlow's Estimator
        does, so that model_fn finds it with tf.train.get_global_step())."""
        from tfplus.ops.random_ops import set_random_seed
        g = Graph()
        with g.as_default():
            if self._config.tf_random_seed is not None:
                set_random_seed(self._config.tf_random_seed)
            create_global_step(g)
        return g

    def _saver(self, spec: EstimatorSpec, graph: Graph) -> Saver:
        if spec.scaffold.saver is not None:
            return spec.scaffold.saver
        savers = graph.get_collection(GraphKeys.SAVERS)
        return savers[0] if savers else Saver(max_to_keep=self._config.keep_checkpoint_max,
                                              keep_checkpoint_every_n_hours=self._config.keep_checkpoint_every_n_hours)

    # -- train -------------------------------------------------------------------------------------------------
    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None) -> Estimator:
        """Trains `steps` more steps, or up to global step `max_steps`, or until input_fn's data ends; starts
        from the newest checkpoint of model_dir and saves checkpoints there."""
        if steps is not None and max_steps is not None:
            raise ValueError("Can not provide both steps and max_steps.")
        if steps is not None and steps <= 0:
            raise ValueError(f"Must specify steps > 0, given: {steps}")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"Must specify max_steps > 0, given: {max_steps}")
        if max_steps is not None:
            path = self.latest_checkpoint()
            if path is not None and int(load_variable(path, GraphKeys.GLOBAL_STEP)) >= max_steps:
                logging.info("Skipping training since max_steps has already saved.")
                return self
        g = self._graph()
        with g.as_default():
            features, labels = self._call_input_fn(input_fn, ModeKeys.TRAIN)
            spec = self._call_model_fn(features, labels, ModeKeys.TRAIN)
            self._train_with_spec(g, spec, list(hooks or ()), list(saving_listeners or ()), steps, max_steps)
        return self

    def _train_with_spec(self, g: Graph, spec: EstimatorSpec, hooks: list, listeners: list, steps, max_steps):
        from tfplus import summary
        cfg = self._config
        # As TensorFlow's Estimator: a "loss" summary unless model_fn made one, so TensorBoard shows the loss.
        if not any(s.name == "loss" for s in g.get_collection(GraphKeys.SUMMARIES)):
            summary.scalar("loss", spec.loss)
        step = g.get_collection(GraphKeys.GLOBAL_STEP)[0]
        worker_hooks = hooks + list(spec.training_hooks) + [_ms.NanTensorHook(spec.loss)]
        if cfg.log_step_count_steps:
            worker_hooks.append(_ms.LoggingTensorHook({"loss": spec.loss, "step": step},
                                                      every_n_iter=cfg.log_step_count_steps))
        if steps is not None or max_steps is not None:
            worker_hooks.insert(0, _ms.StopAtStepHook(num_steps=steps, last_step=max_steps))
        scaffold = spec.scaffold
        scaffold.saver = self._saver(spec, g)
        chief_hooks = list(spec.training_chief_hooks)
        if cfg.save_checkpoints_steps or cfg.save_checkpoints_secs:
            chief_hooks.append(_ms.CheckpointSaverHook(self._model_dir, save_secs=cfg.save_checkpoints_secs,
                                                       save_steps=cfg.save_checkpoints_steps, scaffold=scaffold,
                                                       listeners=listeners))
            if listeners:
                chief_hooks.append(_ListenerBounds(listeners))
        elif listeners:
            raise ValueError("Estimator.train: saving_listeners need checkpoints: set save_checkpoints_steps or "
                             "save_checkpoints_secs in the RunConfig")
        with _ms.MonitoredTrainingSession(checkpoint_dir=self._model_dir, scaffold=scaffold, hooks=worker_hooks,
                                          chief_only_hooks=chief_hooks, save_checkpoint_secs=0,
                                          save_summaries_steps=cfg.save_summary_steps, config=cfg.session_config,
                                          log_step_count_steps=cfg.log_step_count_steps, device=cfg.device) as sess:
            loss = None
            while not sess.should_stop():
                _, loss = sess.run([spec.train_op, spec.loss])
        if loss is not None:
            logging.info("Loss for final step: %s.", loss)

    # -- evaluate ----------------------------------------------------------------------------------------------
    def _session(self, graph: Graph, spec: EstimatorSpec, checkpoint_path, hooks, what: str):
        """A monitored session on `graph` whose variables come from `checkpoint_path` (the newest checkpoint by
        default; initialized, with a log line, when there is none) and whose local variables are initialized;
        and its creator (whose `session` is the plain session under it)."""
        path = checkpoint_path or self.latest_checkpoint()
        if path is None:
            logging.info("Could not find trained model in model_dir: %s, running initialization to %s.",
                         self._model_dir, what)
        creator = _RestoringCreator(graph, self._config, self._saver(spec, graph) if path else None, path,
                                    spec.scaffold.local_init_op)
        return _ms.MonitoredSession(hooks=hooks, session_creator=creator), creator

    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None) -> dict:
        """Runs the model on input_fn's data (`steps` batches, or until it ends) from the newest checkpoint and
        returns the eval_metric_ops' values, the mean loss over the batches ("loss") and the checkpoint's
        "global_step"."""
        if steps is not None and steps <= 0:
            raise ValueError(f"Must specify steps > 0, given: {steps}")
        from tfplus import metrics
        from tfplus.ops.control_flow_ops import group
        g = self._graph()
        with g.as_default():
            features, labels = self._call_input_fn(input_fn, ModeKeys.EVAL)
            spec = self._call_model_fn(features, labels, ModeKeys.EVAL)
            if LOSS_METRIC_KEY in spec.eval_metric_ops:
                raise ValueError(f"Metric with name \"{LOSS_METRIC_KEY}\" is not allowed, because Estimator "
                                 "already defines a default metric with the same name.")
            ops = dict(spec.eval_metric_ops)
            ops[LOSS_METRIC_KEY] = metrics.mean(spec.loss)
            update = group(*[pair[1] for pair in ops.values()])
            values = {key: pair[0] for key, pair in ops.items()}
            values[GLOBAL_STEP_KEY] = g.get_collection(GraphKeys.GLOBAL_STEP)[0]
            mon, creator = self._session(g, spec, checkpoint_path, list(hooks or ()) + list(spec.evaluation_hooks),
                                         "evaluate")
            logging.info("Starting evaluation at %s", time.strftime("%Y-%m-%dT%H:%M:%S"))
            done = 0
            with mon:
                try:
                    while (steps is None or done < steps) and not mon.should_stop():
                        mon.run(update)
                        done += 1
                except (errors.OutOfRangeError, StopIteration):
                    pass
                results = creator.session.run(values)
        logging.info("Saving dict for global step %d: %s", results[GLOBAL_STEP_KEY],
                     ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
        self._write_eval_summary(results, name)
        return results

    def _write_eval_summary(self, results: dict, name) -> None:
        """The scalar results as summaries in model_dir/eval[_name] (where TensorBoard finds them)."""
        from tfplus import summary
        writer = summary.FileWriterCache.get(os.path.join(self._model_dir, f"eval_{name}" if name else "eval"))
        values = [summary.Summary.Value(tag=k, simple_value=float(v)) for k, v in sorted(results.items())
                  if k != GLOBAL_STEP_KEY and np.ndim(v) == 0 and np.asarray(v).dtype.kind in "biuf"]
        writer.add_summary(summary.Summary(value=values), int(results[GLOBAL_STEP_KEY]))
        writer.flush()

    # -- predict -----------------------------------------------------------------------------------------------
    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None, yield_single_examples=True):
        """Yields the predictions of input_fn's features, one example at a time (a dict, or the value where
        model_fn's predictions are one tensor), until its data ends."""
        g = self._graph()
        with g.as_default():
            features, _ = self._call_input_fn(input_fn, ModeKeys.PREDICT)
            spec = self._call_model_fn(features, None, ModeKeys.PREDICT)
            predictions = _selected(spec.predictions, predict_keys)
            mon, _ = self._session(g, spec, checkpoint_path, list(hooks or ()) + list(spec.prediction_hooks),
                                   "predict")
            with mon:
                while not mon.should_stop():
                    try:
                        batch = mon.run(predictions)
                    except (errors.OutOfRangeError, StopIteration):
                        return
                    if not yield_single_examples:
                        yield batch
                        continue
                    yield from _examples(batch)

    # -- export ------------------------------------------------------------------------------------------------
    def export_saved_model(self, export_dir_base, serving_input_receiver_fn, assets_extra=None,
                           as_text: bool = False, checkpoint_path=None, experimental_mode=ModeKeys.PREDICT):
        """Writes a SavedModel of the PREDICT graph that serving_input_receiver_fn's receiver feeds, with the
        newest checkpoint's variables, into a new folder <export_dir_base>/<timestamp>; returns its path
        (bytes, as TensorFlow's)."""
        from tfplus.estimator import export as _export
        from tfplus.saved_model import constants
        from tfplus.saved_model.builder import SavedModelBuilder
        from tfplus.variables import local_variables_initializer
        if assets_extra:
            raise NotImplementedError("export_saved_model(assets_extra=...): tfplus does not implement SavedModel "
                                      "assets; leave it unset")
        if experimental_mode != ModeKeys.PREDICT:
            raise NotImplementedError(f"export_saved_model(experimental_mode={experimental_mode!r}): tfplus "
                                      "exports the PREDICT graph only")
        if serving_input_receiver_fn is None:
            raise ValueError("An input_receiver_fn must be defined.")
        path = checkpoint_path or self.latest_checkpoint()
        if path is None:
            raise ValueError(f"Couldn't find trained model at {self._model_dir}.")
        g = self._graph()
        with g.as_default():
            receiver = serving_input_receiver_fn()
            spec = self._call_model_fn(receiver.features, None, ModeKeys.PREDICT)
            signatures = _export.build_all_signature_defs(receiver.receiver_tensors, spec.export_outputs,
                                                          spec.predictions)
            saver = self._saver(spec, g)
            local_init = spec.scaffold.local_init_op if spec.scaffold.local_init_op is not None \
                else local_variables_initializer()
            export_dir = _timestamped_dir(os.fspath(export_dir_base))
            temp_dir = os.path.join(os.path.dirname(export_dir), "temp-" + os.path.basename(export_dir))
            from tfplus.engine.session import Session
            try:
                with Session(graph=g, config=self._config.session_config) as sess:
                    saver.restore(sess, path)
                    builder = SavedModelBuilder(temp_dir)
                    builder.add_meta_graph_and_variables(sess, [constants.SERVING], signature_def_map=signatures,
                                                         main_op=local_init, saver=saver)
                    builder.save(as_text)
                os.replace(temp_dir, export_dir)
            except BaseException:  # e.g. Ctrl-C: no half-written temp- folder stays behind
                shutil.rmtree(temp_dir, ignore_errors=True)
                raise
            fsync_folder(os.path.dirname(export_dir))  # the rename made durable: the export is there after a crash
        logging.info("SavedModel written to: %s", export_dir)
        return export_dir.encode()

    def export_savedmodel(self, export_dir_base, serving_input_receiver_fn, assets_extra=None,
                          as_text: bool = False, checkpoint_path=None, strip_default_attrs: bool = False):
        """TF1's older name of export_saved_model."""
        return self.export_saved_model(export_dir_base, serving_input_receiver_fn, assets_extra, as_text,
                                       checkpoint_path)


def _selected(predictions, predict_keys):
    if predict_keys is None:
        return predictions
    if not isinstance(predictions, dict):
        raise ValueError("predict_keys argument is not valid in case of non-dict predictions.")
    keys = [predict_keys] if isinstance(predict_keys, str) else list(predict_keys)
    chosen = {k: v for k, v in predictions.items() if k in keys}
    if not chosen:
        raise ValueError(f"Expected to run at least one output from {sorted(predictions)}, provided {keys}.")
    return chosen


def _examples(batch):
    """The rows of one batch of predictions (a dict of arrays, or one array)."""
    if not isinstance(batch, dict):
        yield from np.asarray(batch)
        return
    sizes = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in batch.items()}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError(f"Batch length of predictions should be same. {sizes} (key: batch size; None: a scalar): "
                         "give each prediction the batch as its first dimension, or predict with "
                         "yield_single_examples=False")
    for i in range(next(iter(sizes.values()))):
        yield {k: v[i] for k, v in batch.items()}


def _timestamped_dir(base: str) -> str:
    """<base>/<seconds since the epoch>, newer than every export in `base` (TensorFlow's naming; a second export
    within a second takes the next number, so the newest export always has the largest)."""
    os.makedirs(base, exist_ok=True)
    taken = [int(d.removeprefix("temp-")) for d in os.listdir(base) if d.removeprefix("temp-").isdigit()]
    return os.path.join(base, str(max([int(time.time()), *(t + 1 for t in taken)])))
