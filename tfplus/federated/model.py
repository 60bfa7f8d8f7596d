"""A tfplus model as a federated client or server holds it: weights in and out as NumPy arrays in one session run
each, optimizer state reset between rounds, local training on a shard with the trainer's pipeline, evaluation.

    m = FederatedModel(TrainConfig(model="lenet", batch_size=32), steps_per_round=50, rounds=5)
    w = m.get_weights()                  # {"conv1/weights": ndarray, ...}: one run
    m.set_weights(w)                     # one run of one grouped assign
    m.train(shard, steps=50, server_round=2)   # the schedule goes on from step 50, the global step's
    accuracy, loss = m.evaluate(test_set)
    save_weights("w.npz", w); load_weights("w.npz")   # an .npz keyed by variable name, no pickles
"""
from __future__ import annotations

import dataclasses
import json
import os
import tracemalloc
import zipfile
import zlib
from typing import Any

import numpy as np

import tfplus as tf
from tfplus import data as tfdata
from tfplus import errors, trainer
from tfplus.gfile import atomic_open
from tfplus.train.optimizer import WrapperOptimizer


def save_weights(path: str, weights: dict[str, np.ndarray]) -> None:
    """Writes {variable name: array} (get_weights()'s) as an .npz keyed by the names: what another framework's
    peer loads to start from the very same weights (NumPy reads it without pickles). Atomically: a killed
    server leaves the file whole or as it was."""
    with atomic_open(path) as f:
        np.savez(f, **weights)


def load_weights(path: str) -> dict[str, np.ndarray]:
    """save_weights' {variable name: array}, read with pickles refused; a damaged file (its zip structure or an
    array's CRC-32) is a DataLossError naming it."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return {name: f[name] for name in f.files}
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as e:  # ValueError: also a pickled array
        raise errors.DataLossError(None, None, f"{path}: not a whole weights file (an .npz of arrays, as "
                                   f"save_weights writes): {e}") from None


def pytorch_layout(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights in PyTorch's layout, same names: a conv filter HWIO -> OIHW (nn.Conv2d's), a depthwise one
    (H, W, C, 1) -> (C, 1, H, W), a dense matrix (in, out) -> (out, in) (nn.Linear's), vectors as they are. For
    an NCHW model (the default), whose flatten orders features (C, H, W) as torch's nn.Flatten does; an NHWC
    model's first dense rows would need reordering.

        pytorch_layout({"conv1/weights": np.zeros((3, 3, 3, 32))})["conv1/weights"].shape == (32, 3, 3, 3)
    """
    def move(name: str, w: np.ndarray) -> np.ndarray:
        if w.ndim == 4:
            return w.transpose((2, 3, 0, 1) if "depthwise" in name else (3, 2, 0, 1))
        return w.T if w.ndim == 2 else w
    return {name: np.ascontiguousarray(move(name, w)) for name, w in weights.items()}


def _stages(sizes: list[int]) -> list[list[int]]:
    """The variables (indices into `sizes`, their elements) in consecutive runs of at most the largest one's
    elements each: as few runs as loading them one at a time allows at the same peak."""
    most, out = max(sizes), [[]]
    for i, n in enumerate(sizes):
        if out[-1] and sum(sizes[j] for j in out[-1]) + n > most:
            out.append([])
        out[-1].append(i)
    return out


class _Proximal(WrapperOptimizer):
    """FedProx's local objective (Li et al. 2020), F(w) + mu/2 * ||w - w_global||^2, as the wrapped optimizer's
    gradients plus mu * (w - w_global) for each trained variable: the term goes through momentum and Adam's moments
    as the loss's gradient does (what Flower's FedProx asks of a client: it only sends proximal_mu). `mu` is fed
    each step (0: plain training); `anchors` ({variable: its w_global}) are a copy of the trained weights."""

    def __init__(self, optimizer):
        super().__init__(optimizer, False, f"Proximal{optimizer.get_name()}")
        with tf.control_dependencies(None):  # made inside training_graph's UPDATE_OPS dependencies: not theirs
            self.mu = tf.placeholder(tf.float32, [], name="proximal_mu")
        self.anchors: dict = {}

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        for g, v in pairs:
            if g is not None:
                # NOTE: outside training_graph's control dependencies (batch norm's UPDATE_OPS), or initializing
                # an anchor would run the model's forward pass and ask for images
                with tf.control_dependencies(None):
                    self.anchors[v] = tf.Variable(tf.zeros(v.shape, v.dtype.base_dtype), trainable=False,
                                                  collections=[tf.GraphKeys.LOCAL_VARIABLES], name="anchor")
        return [(g if g is None else g + self.mu * (v - self.anchors[v]), v) for g, v in pairs]


class FederatedModel:
    """One training graph and its session. The learning-rate schedule spans `rounds` x `steps_per_round` steps
    and is driven by the server's round: round r trains global steps (r-1)*steps_per_round onwards, so the warm-up
    happens once (round 1) and the decay goes on across rounds, instead of restarting in every round. `cpus`
    caps the session's threads and its forked worker processes (a simulated client's share of the machine).
    `proximal` makes FedProx's anchors (a copy of the round's global weights) and its proximal term (_Proximal);
    without it the model holds no more than the training step needs. `measure` starts tracemalloc (if it is not
    tracing yet) before the session allocates anything, for train(measure=True); under a memory budget the
    training step is planned first, untraced (tracing slows the planner's search about tenfold)."""

    def __init__(self, cfg: trainer.TrainConfig, steps_per_round: int, rounds: int, cpus: int | None = None,
                 proximal: bool = False, measure: bool = False):
        # eval_every 0: no evaluation programs built beside the steps (prebuild_opencl); the server evaluates
        cfg = dataclasses.replace(cfg, warmup_steps=cfg.warmup_steps if cfg.warmup_steps is not None
                                  else steps_per_round, steps=steps_per_round * rounds, epochs=None, eval_every=0)
        if cpus is not None:  # a client's share of the machine: its threads, and no more forked step workers
            cfg = dataclasses.replace(cfg, threads=min(cfg.threads or cpus, cpus),
                                      workers=min(cfg.workers or cpus, cpus))
        self.cfg = cfg = trainer.resolve(trainer.resolve_options(cfg)[0])
        self.steps_per_round = steps_per_round
        self.proximal = proximal
        # On opencl: the programs this model's step used last time load from the cache on background threads
        # while the graph is made, as in `tfplus train` (a Deployment Engine client is a fresh process each round).
        trainer.prebuild_opencl(cfg)
        self._recorded = False  # whether this model's first step recorded its programs for the next process
        made: list[_Proximal] = []  # the wrapper training_graph makes, if proximal
        wrap = (lambda opt: made.append(_Proximal(opt)) or made[0]) if proximal else None
        self.tg = tg = trainer.build_graph(cfg, total_steps=steps_per_round * rounds,
                                           device_input=trainer.device_input(cfg), wrap_optimizer=wrap)
        with tg.graph.as_default(), tf.name_scope("federated"):
            self.variables = trainer.model_variables(tg)
            self.names = [v.op.name for v in self.variables]
            # Batch norm's moving mean and variance: part of the model (they travel with the weights and are
            # averaged), but statistics of the data, not trained: no FedProx term, no server optimizer step.
            trainable = {id(v) for v in tf.trainable_variables()}
            self.statistics = [v.op.name for v in self.variables if id(v) not in trainable]
            # FedProx's anchors, the global weights as the round began (_Proximal): set with the weights (from the
            # same vector, in the same run).
            anchors = made[0].anchors if made else {}
            self._mu = made[0].mu if made else None
            # The weights travel as one float32 vector, split and reshaped in the graph: one feed (one upload on
            # OpenCL) and one fetch (one download), not one per variable.
            for v in self.variables:
                if v.dtype.base_dtype != tf.float32:
                    raise TypeError(f"FederatedModel: variable {v.op.name!r} is {v.dtype.base_dtype.name}; the "
                                    "weights travel as one float32 vector, so every model variable must be float32")
            self.shapes = [tuple(v.shape.as_list()) for v in self.variables]
            self._sizes = [int(np.prod(shape)) for shape in self.shapes]
            self._flat = tf.placeholder(tf.float32, [sum(self._sizes)], name="weights")
            parts = [tf.reshape(p, shape) for p, shape in zip(tf.split(self._flat, self._sizes), self.shapes)]
            self._assign = tf.group(*[v.assign(p) for v, p in zip(self.variables, parts)],
                                    *[anchors[v].assign(p) for v, p in zip(self.variables, parts) if v in anchors],
                                    name="set_weights")
            # NOTE: under a memory budget the vector, fed and split, is two copies of the model in the plan beside
            # the model and its slots (MobileNet: 4 x 13 MB, over a 32 MB budget). There the weights load in runs of
            # a few variables each, fed straight into their assigns (`_stages`): a run holds no more than the
            # largest variable's bytes beside the model, and each run's step is planned once.
            self._stages: list[tuple[list[int], tf.Operation, list[tf.Tensor]]] = []
            if cfg.memory_budget:
                with tf.name_scope("set_weights_staged"):
                    fed = [tf.placeholder(tf.float32, shape, name="weights") for shape in self.shapes]
                    for i, idx in enumerate(_stages(self._sizes)):
                        self._stages.append((idx, tf.group(
                            *[self.variables[j].assign(fed[j]) for j in idx],
                            *[anchors[self.variables[j]].assign(fed[j]) for j in idx if self.variables[j] in anchors],
                            name=f"stage_{i}"), [fed[j] for j in idx]))
            self._read = tf.concat([tf.reshape(v, [-1]) for v in self.variables], 0, name="get_weights")
            # Optimizer slots and the global step: everything the optimizer made, never the model's weights.
            model = set(map(id, self.variables))
            slots = [v for v in tf.global_variables() if id(v) not in model and v is not tg.global_step]
            self._step_value = tf.placeholder(tf.int64, [], name="global_step")
            self._reset = tf.group(tf.variables_initializer(slots), tg.global_step.assign(self._step_value),
                                   name="reset_optimizer")
            self._eval_loss = trainer.eval_loss_sum(tg)
        # The local steps' loss and accuracy summed on the device by the step itself, read once a round: a step
        # copies nothing back, so the host queues the next one while the device runs this one (`tfplus train`'s
        # step; fetching both each step made an H200 wait for the host: 2.4 ms a Mentee step against 1.5 ms).
        self.sums = trainer.RunningSums(tg)
        with tg.graph.as_default(), tf.name_scope("federated"):
            self._local_init = tf.variables_initializer(list(anchors.values()))
            self.saver = tf.train.Saver(max_to_keep=None)
        self.sess = tf.Session(graph=tg.graph, device=cfg.device, memory_budget=cfg.memory_budget,
                               workers=cfg.workers, config=tf.ConfigProto(intra_op_parallelism_threads=cfg.threads))
        if measure and not tracemalloc.is_tracing():
            ahead = self._plan_training_step() if cfg.memory_budget else None
            tracemalloc.start(16)  # frames enough to reach the planner's, which measure_step leaves out
            if ahead is not None:
                ahead[0].use_plan(ahead[1])  # its arena, allocated under the trace
        self.sess.run([tg.init_op, self._local_init])
        self.sums.start(self.sess)

    def _feed(self, images, labels, proximal_mu: float, lr: float | None) -> dict:
        """A local step's feed: the batch, FedProx's mu (a proximal model), the server's learning rate if given."""
        feed = {**trainer.image_feed(self.tg, images), self.tg.labels: labels}
        if self._mu is not None:
            feed[self._mu] = proximal_mu
        if lr is not None:
            feed[self.tg.learning_rate] = np.float32(lr)  # fed: the schedule's tensor takes the server's value
        return feed

    def _plan_training_step(self):
        """(the session's Step of a local step at cfg.batch_size on the schedule's rate, its MemoryPlan), planned
        now and not bound: nothing of the step is allocated."""
        cfg, b = self.cfg, self.cfg.batch_size
        batch = tfdata.synthetic(b, 0)  # any images: the plan depends on the batch's shapes only
        with tfdata.train_batches(batch, b, seed=0, augment=cfg.augment, data_format=cfg.data_format,
                                  raw=self.tg.raw_images is not None) as batches:
            x, y = next(iter(batches))
        step = self.sess.step(self.sums.step_op, self._feed(x, y, 0.0, None))
        return step, step.make_plan()

    def get_weights(self) -> dict[str, np.ndarray]:
        """{variable name: value} of the model's variables (weights, batch norm's moving statistics), read in one
        session run as one vector (one download on OpenCL), or under a memory budget as the variables themselves,
        without the vector's copy of the model."""
        if self.cfg.memory_budget:  # one fetch per variable: the vector would be a copy of the model in the plan
            return dict(zip(self.names, self.sess.run(self.variables)))
        flat = self.sess.run(self._read)
        return {name: part.reshape(shape) for name, part, shape in
                zip(self.names, np.split(flat, np.cumsum(self._sizes)[:-1]), self.shapes)}

    def set_weights(self, weights: dict[str, np.ndarray] | list[np.ndarray]) -> None:
        """Assigns every model variable from `weights` in one session run: {name: array} (get_weights()'s), or a
        list in the order of self.names (Keras's set_weights; what Flower's ArrayRecord.to_numpy_ndarrays() gives
        back for an ArrayRecord(list(get_weights().values()))). A missing, extra or misshapen array is a
        ValueError naming the variable."""
        if isinstance(weights, (list, tuple)):
            if len(weights) != len(self.names):
                raise ValueError(f"set_weights: model {self.cfg.model!r} has {len(self.names)} variables, the list "
                                 f"gives {len(weights)} arrays; send list(get_weights().values()) of the same model")
            weights = dict(zip(self.names, weights))
        missing, extra = set(self.names) - set(weights), set(weights) - set(self.names)
        if missing or extra:
            what = [f"{label} {', '.join(sorted(names)[:3])}{', ...' * (len(names) > 3)}"
                    for label, names in (("missing", missing), ("unexpected", extra)) if names]
            raise ValueError(f"set_weights: the weights do not match model {self.cfg.model!r} ({'; '.join(what)}); "
                             "send weights of the same model and widths")
        for name, shape in zip(self.names, self.shapes):
            if np.shape(weights[name]) != shape:
                raise ValueError(f"set_weights: variable {name!r} has shape {shape}, the weights give "
                                 f"{np.shape(weights[name])}; send weights of the same model and widths")
        if self._stages:  # under a memory budget: a few variables a run (_stages)
            for idx, op, fed in self._stages:
                self.sess.run(op, {t: np.asarray(weights[self.names[j]], np.float32) for j, t in zip(idx, fed)})
            return
        flat = np.concatenate([np.asarray(weights[name], np.float32).reshape(-1) for name in self.names])
        self.sess.run(self._assign, {self._flat: flat})

    def reset_optimizer(self, global_step: int = 0) -> None:
        """Zeroes the optimizer's slots (momentum, Adam's moments) and sets the global step, in one run; the
        weights stay as they are."""
        self.sess.run(self._reset, {self._step_value: global_step})

    def train(self, dataset: tfdata.CifarDataset, steps: int, server_round: int = 1, proximal_mu: float = 0.0,
              seed: int | None = None, measure: bool = False, lr: float | None = None) -> dict[str, float]:
        """`steps` optimizer steps on `dataset`'s training set (the trainer's shuffling, augmentation and
        normalization, batch size cfg.batch_size or the shard's size if smaller), from a fresh optimizer at global
        step (server_round-1)*steps_per_round, each step `tfplus train`'s (RunningSums: nothing read back until
        the round's end). Returns {"loss", "accuracy"}: the means over the steps. `lr`, if
        given (the server's, e.g. Flower's train config "lr"), is every step's learning rate instead of the
        schedule's.

        `measure` (tracemalloc tracing since before this model's session allocated anything: made with
        measure=True): the last of two or more steps runs under
        tfplus.engine.memory.measure_step, whose "peak" (the NumPy data alive as it starts, the process's own
        included, plus what the step adds) is returned as "measured_peak_bytes"."""
        tg, n = self.tg, len(dataset.train_labels)
        if n == 0:
            raise ValueError("train: the client's shard holds no training examples (a skewed partition); give "
                             "fewer clients or a larger Dirichlet alpha")
        if proximal_mu and self._mu is None:
            raise ValueError(f"train: proximal_mu={proximal_mu} but this model was made without FedProx's anchors; "
                             "make it with FederatedModel(..., proximal=True)")
        self.reset_optimizer((server_round - 1) * self.steps_per_round)
        self.sums.start(self.sess)
        raw = tg.raw_images is not None
        seed = self.cfg.seed * 1_000_003 + server_round if seed is None else seed
        out: dict[str, float] = {}
        with tfdata.train_batches(dataset, min(self.cfg.batch_size, n), seed=seed, augment=self.cfg.augment,
                                  data_format=self.cfg.data_format, raw=raw) as batches:
            for i, (x, y) in zip(range(steps), batches):
                feed = self._feed(x, y, proximal_mu, lr)
                if measure and steps > 1 and i == steps - 1:  # the others' fetches, so the others' compiled step
                    from tfplus.engine.memory import measure_step
                    out["measured_peak_bytes"] = measure_step(self.sess, self.sums.step_op, feed)["peak"]
                else:
                    self.sess.run(self.sums.step_op, feed)
                if not self._recorded:
                    self._recorded = True
                    trainer.prebuild_opencl(self.cfg, self.sess)
        loss, accuracy = self.sums.read(self.sess)
        if not np.isfinite(loss):
            raise trainer.DivergedError(f"train: the mean loss of round {server_round}'s {steps} steps is "
                                        f"{loss / steps}; lower the learning rate (--lr)")
        return {"loss": loss / steps, "accuracy": accuracy / steps, **out}

    def evaluate(self, dataset: tfdata.CifarDataset, batch_size: int = 500) -> tuple[float, float]:
        """(accuracy, mean cross-entropy) of the evaluation-mode model on `dataset`'s test set."""
        if self.cfg.memory_budget:  # a plan was made for the training batch; evaluate at that size
            batch_size = self.cfg.batch_size
        accuracy, _, loss = trainer.evaluate_predictions(self.sess, self.tg, dataset, batch_size,
                                                         self.cfg.data_format, loss_sum=self._eval_loss)
        return accuracy, float(loss)

    def peak_bytes(self) -> int | None:
        """The largest memory plan's peak of the steps run so far (None without a memory budget)."""
        plans = self.sess.memory_plans
        return max(p.peak_bytes for p in plans) if plans else None

    def save(self, checkpoint_dir: str, server_round: int, data_dir: str | None,
             history: list[dict[str, Any]], federation: dict[str, Any] | None = None) -> str:
        """Writes the model as a TensorFlow-format checkpoint `tfplus eval` reads (a `tfplus train` checkpoint's
        metadata, its step the rounds' steps so far, and `federation`: the settings a resumed run must share) and
        returns its path."""
        step = server_round * self.steps_per_round
        self.reset_optimizer(step)
        recipe = {k: list(v) if isinstance(v, tuple) else v for k, v in
                  ((k, getattr(self.cfg, k)) for k in trainer.RECIPE)}
        meta = {"format": trainer.CHECKPOINT_FORMAT, "step": step, "recipe": recipe, "data": data_dir,
                "data_state": {"seed": self.cfg.seed, "epoch": 0, "batch_index": 0}, "history": history[-100:],
                "sums": [0.0, 0.0, 0], "elapsed_s": 0.0, "epoch_s": 0.0, "h2d_bytes": 0, "d2h_bytes": 0,
                "federation": federation}
        json.dumps(meta)  # fails here, naming the value, rather than inside the Saver
        return self.saver.save(self.sess, os.path.join(checkpoint_dir, trainer.CHECKPOINT_PREFIX),
                               global_step=step, metadata=meta)

    def close(self) -> None:
        self.sess.close()
