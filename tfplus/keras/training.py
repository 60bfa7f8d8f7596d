"""A Keras model's compile / fit / evaluate / predict / train_on_batch and its weights' checkpoints, in graph mode
as TF1's Keras (training_v1): one graph of the loss, metrics and training step, run batch by batch in
tf.keras.backend.get_session().

    model.compile(tf.keras.optimizers.Adam(), "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=5, validation_split=0.1, verbose=0)
    history.history          # {'loss': [...], 'accuracy': [...], 'val_loss': [...], 'val_accuracy': [...]}

The per-batch loss and metrics are those of the weights before the batch's step; an epoch's are their mean over
its samples. fit shuffles with NumPy's global generator (np.random.seed makes it repeatable), as Keras does.
"""
from __future__ import annotations

import itertools
import os
import threading

import numpy as np

from tfplus.framework import control_dependencies, name_scope
from tfplus.keras import backend, losses, metrics, optimizers
from tfplus.keras import callbacks as _callbacks
from tfplus.ops import math_ops
from tfplus.ops.array_ops import placeholder
from tfplus.ops.control_flow_ops import group
from tfplus.tensor_bundle import replace_bundle, whole_bundle
from tfplus.train import NewCheckpointReader, Saver

__all__ = ["Training"]


def _per_output(value, names: list, what: str) -> list:
    """compile's loss / metrics / loss_weights for each output: one for all, a list in order or a dict by name."""
    if isinstance(value, dict):
        unknown = set(value) - set(names)
        if unknown:
            raise ValueError(f"compile: {what} names {sorted(unknown)} are not outputs of the model ({names})")
        return [value.get(n) for n in names]
    if isinstance(value, (list, tuple)) and what != "metrics":
        if len(value) != len(names):
            raise ValueError(f"compile: {len(value)} {what} for {len(names)} outputs ({names})")
        return list(value)
    return [value] * len(names)


def _batches(n: int, batch_size: int) -> list:
    return [(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


def _is_dataset(x) -> bool:
    from tfplus.data.dataset_ops import Dataset
    return isinstance(x, Dataset)


def _dataset_passes(dataset, tensors: list, what: str):
    """A function giving a fresh pass over `dataset`: its batches as lists of arrays for `tensors` (the element's
    components in order: x's, then y's), read by an iterator in the model's graph and session, as TF1's Keras."""
    from tfplus import errors
    from tfplus.data.dataset_ops import make_one_shot_iterator

    def leaves(structure) -> list:
        if isinstance(structure, (list, tuple)):
            return [leaf for part in structure for leaf in leaves(part)]
        if isinstance(structure, dict):
            return [leaf for k in sorted(structure) for leaf in leaves(structure[k])]
        return [structure]

    def one_pass():
        parts = leaves(make_one_shot_iterator(dataset).get_next())[:len(tensors)]
        if len(parts) != len(tensors):
            raise ValueError(f"{what}: the dataset's elements have {len(parts)} components; the model takes "
                             f"{len(tensors)} (its inputs, then its targets)")
        sess = backend.get_session()
        while True:
            try:
                values = sess.run(parts)
            except errors.OutOfRangeError:
                return
            yield [_as_array(v, t) for v, t in zip(values, tensors)]
    return one_pass


def _as_array(data, tensor):
    """`data` for `tensor`: its dtype, and (as Keras) a last axis of 1 added to a vector fed to a matrix."""
    a = np.asarray(data, dtype=tensor.dtype.np)
    rank = tensor.shape.ndims
    return a[:, None] if a.ndim == 1 and rank is not None and rank > 1 else a


# What fit and predict build on their first call, built by one thread at a time (request threads of a server): two
# threads' first fits made two training ops, each with its own optimizer state.
_building = threading.RLock()


class Training:
    """The training half of tf.keras.Model (mixed into it)."""

    # -- compile ------------------------------------------------------------------------------------------------
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None, sample_weight_mode=None,
                weighted_metrics=None, target_tensors=None, **kwargs):
        """The optimizer (a name, a tf.keras.optimizers or a tf.train optimizer), the loss(es) and the metrics;
        the loss graph is built now (or at fit, for a Sequential model without an input shape yet)."""
        given = {"sample_weight_mode": sample_weight_mode, "weighted_metrics": weighted_metrics,
                 "target_tensors": target_tensors, **kwargs}
        bad = sorted(k for k, v in given.items() if v is not None and k != "run_eagerly")
        if bad or kwargs.get("run_eagerly"):
            raise NotImplementedError(f"{self.name}.compile: {bad or ['run_eagerly']} not supported by tfplus")
        self.optimizer = optimizers.get(optimizer)
        self._compile_args = (loss, metrics or [], loss_weights)
        self._train_op = None
        self._fetches = None
        if self.outputs:
            self._build_loss()

    def _build_loss(self) -> None:
        """Per output with a loss, a target placeholder `<output layer>_target` and the batch mean of the loss;
        the total is their weighted sum plus the layers' losses (regularizers, add_loss)."""
        loss, metric_ids, loss_weights = self._compile_args
        names = self._output_names
        loss_list = _per_output(loss, names, "losses")
        weights = _per_output(1.0 if loss_weights is None else loss_weights, names, "loss_weights")
        metric_lists = _per_output(metric_ids, names, "metrics")
        self.targets, self._target_names, self.metrics_names = [], [], ["loss"]
        per_output = []
        with name_scope("loss"):
            for out, name, lo, w, ids in zip(self.outputs, names, loss_list, weights, metric_lists):
                if lo is None:  # as Keras: an output without a loss has no target (add_loss's models)
                    continue
                fn = losses.get(lo)
                # As Keras, of the output's rank (a vector of class ids is fed as a column)
                target = placeholder(out.dtype, [None] * out.shape.ndims, name=f"{name}_target")
                self.targets.append(target)
                self._target_names.append(name)
                per_output.append((name, math_ops.reduce_mean(fn(target, out)), w, fn, target, out, ids))
            terms = [w * value for _, value, w, *_ in per_output] + self.losses
            if not terms:
                raise ValueError(f"{self.name}.compile: give a loss (or add one to the model with add_loss)")
            total = math_ops.add_n(terms) if len(terms) > 1 else terms[0]
        self.total_loss = total
        tensors = [total]
        if len(per_output) > 1:
            self.metrics_names += [f"{name}_loss" for name, *_ in per_output]
            tensors += [value for _, value, *_ in per_output]
        with name_scope("metrics"):
            for name, _, _, fn, target, out, ids in per_output:
                for m in ids if isinstance(ids, (list, tuple)) else [ids] if ids else []:
                    mname, mfn = metrics.get(m, fn, out.shape.as_list())
                    self.metrics_names.append(mname if len(per_output) == 1 else f"{name}_{mname}")
                    tensors.append(math_ops.reduce_mean(mfn(target, out)))
        self._fetches = tensors

    def _train_step(self):
        """The training step, made on the first fit / train_on_batch: the optimizer's update of the trainable
        weights and the layers' updates, after the loss and metrics are computed."""
        with _building:
            if self._train_op is None:
                with name_scope("training"), control_dependencies(self._fetches):
                    step = self.optimizer.minimize(self.total_loss, var_list=self.trainable_weights)
                    self._train_op = group(step, *self.updates)
        return self._train_op

    # -- data -----------------------------------------------------------------------------------------------
    def _check_compiled(self, what: str) -> None:
        if getattr(self, "_compile_args", None) is None:
            raise RuntimeError(f"{self.name}.{what}: compile the model first (model.compile(optimizer, loss))")

    def _arrays(self, data, tensors: list, what: str) -> list:
        """`data` (one array, a list in order, or a dict by input / output layer name) as arrays for `tensors`
        (the inputs, or the targets of the outputs)."""
        if data is None and not tensors:  # no targets: the model's losses are its own (add_loss)
            return []
        if data is None:
            raise ValueError(f"{self.name}: give the {what} data ({[t.name for t in tensors]})")
        if isinstance(data, dict):
            names = self._target_names if what == "target" else [t._keras_history[0].name for t in tensors]
            missing = set(names) - set(data)
            if missing:
                raise ValueError(f"{self.name}: no {what} data for {sorted(missing)} (given {sorted(data)})")
            data = [data[name] for name in names]
        elif not isinstance(data, (list, tuple)):
            data = [data]
        if len(data) != len(tensors):
            raise ValueError(f"{self.name}: {len(data)} {what} arrays for {len(tensors)} {what}s "
                             f"({[t.name for t in tensors]})")
        return [_as_array(d, t) for d, t in zip(data, tensors)]

    def _ensure_built(self, x) -> None:
        with _building:
            if not self.outputs:
                first = np.asarray(x[0] if isinstance(x, (list, tuple)) else x)
                self._build_from_data((None,) + first.shape[1:])
                if getattr(self, "_compile_args", None) is not None:
                    self._build_loss()

    def _run(self, fetches, arrays: list, tensors: list, training: bool):
        feed = dict(zip(tensors, arrays))
        feed.update(backend.learning_phase_feed(training))
        return backend.get_session().run(fetches, feed)

    def _loop(self, fetches, arrays: list, tensors: list, batch_size: int, training: bool, shuffle=False) -> list:
        """The fetches' sample-weighted means over `arrays` in batches (`shuffle`d as fit's validation: Keras
        shuffles it too, drawing from NumPy's generator)."""
        n = len(arrays[0])
        order = np.arange(n)
        if shuffle:
            np.random.shuffle(order)
        totals = np.zeros(len(fetches))
        for start, end in _batches(n, batch_size):
            outs = self._run(fetches, [a[order[start:end]] for a in arrays], tensors, training)
            totals += np.asarray(outs, dtype=np.float64) * (end - start)
        return list(totals / n)

    @staticmethod
    def _result(values: list):
        values = [np.float32(v) for v in values]
        return values[0] if len(values) == 1 else values

    # -- the loops ------------------------------------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose=1, callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_freq=1, **kwargs):
        """Trains for `epochs` over (x, y) in batches; returns the History."""
        self._check_compiled("fit")
        dataset = _is_dataset(x)
        if kwargs or class_weight is not None or sample_weight is not None or validation_steps is not None \
                or x is None or (steps_per_epoch is not None and not dataset) or (dataset and y is not None):
            raise NotImplementedError(f"{self.name}.fit: only arrays x and y, or a tf.data.Dataset of (x, y) with "
                                      "or without steps_per_epoch (no generators, validation_steps, class or "
                                      "sample weights) are supported by tfplus")
        if dataset:
            passes = _dataset_passes(x, self.inputs + self.targets, f"{self.name}.fit")
            if steps_per_epoch is not None:  # Keras: the steps continue the dataset's iterator from epoch to epoch
                stream = passes()
                passes = lambda: itertools.islice(stream, steps_per_epoch)  # noqa: E731
            xs = ys = []
        else:
            xs, ys = self._arrays(x, self.inputs, "input"), self._arrays(y, self.targets, "target")
        self._ensure_built(x)
        batch_size = batch_size or 32
        if validation_data is None and validation_split:
            split = int(len(xs[0]) * (1.0 - validation_split))
            validation_data = ([a[split:] for a in xs], [a[split:] for a in ys])
            xs, ys = [a[:split] for a in xs], [a[:split] for a in ys]
        val = None
        if validation_data is not None:
            if len(validation_data) != 2:
                raise NotImplementedError(f"{self.name}.fit: validation_data must be (x, y) in tfplus")
            val = (self._arrays(validation_data[0], self.inputs, "input") +
                   self._arrays(validation_data[1], self.targets, "target"))
        tensors = self.inputs + self.targets
        data = xs + ys
        n = None if dataset else len(data[0])
        step = self._train_step()
        names = self.metrics_names
        history = _callbacks.History()
        cbs = list(callbacks or []) + [history]
        params = {"batch_size": batch_size, "epochs": epochs, "steps": steps_per_epoch, "samples": n,
                  "verbose": verbose,
                  "do_validation": val is not None,
                  "metrics": names + ([f"val_{m}" for m in names] if val is not None else [])}
        for cb in cbs:
            cb.set_model(self)
            cb.set_params(params)
        self.stop_training = False
        self.history = history
        for cb in cbs:
            cb.on_train_begin()
        for epoch in range(initial_epoch, epochs):
            for cb in cbs:
                cb.on_epoch_begin(epoch)
            if dataset:
                batches = passes()
            else:
                order = np.arange(n)
                if shuffle:
                    np.random.shuffle(order)
                batches = ([a[order[start:end]] for a in data] for start, end in _batches(n, batch_size))
            totals, losses, seen = np.zeros(len(names)), [], 0
            for b, batch in enumerate(batches):
                logs = {"batch": b, "size": len(batch[0])}
                for cb in cbs:
                    cb.on_batch_begin(b, logs)
                outs = self._run([step] + self._fetches, batch, tensors, True)[1:]
                totals += np.asarray(outs, dtype=np.float64) * len(batch[0])
                losses.append(outs[0])
                seen += len(batch[0])
                logs.update(zip(names, outs))
                for cb in cbs:
                    cb.on_batch_end(b, logs)
            epoch_logs = dict(zip(names, (totals / max(seen, 1)).tolist()))
            if dataset:  # Keras averages the loss over a dataset's steps, the metrics over its samples
                epoch_logs[names[0]] = float(np.mean(losses))
            if val is not None and (epoch + 1) % validation_freq == 0:
                values = self._loop(self._fetches, val, tensors, batch_size, False, shuffle)
                epoch_logs.update({f"val_{m}": v for m, v in zip(names, values)})
            if verbose:
                print(f"Epoch {epoch + 1}/{epochs} - " + " - ".join(f"{k}: {v:.4f}" for k, v in epoch_logs.items()))
            for cb in cbs:
                cb.on_epoch_end(epoch, epoch_logs)
            if self.stop_training:
                break
        for cb in cbs:
            cb.on_train_end()
        return history

    def evaluate(self, x=None, y=None, batch_size=None, verbose=1, sample_weight=None, steps=None, callbacks=None,
                 return_dict=False):
        """The loss (and metrics: a list, in metrics_names' order) over (x, y), in test mode."""
        self._check_compiled("evaluate")
        if sample_weight is not None or (steps is not None and not _is_dataset(x)):
            raise NotImplementedError(f"{self.name}.evaluate: sample_weight, and steps without a dataset, are not "
                                      "supported by tfplus")
        self._ensure_built(x)
        tensors = self.inputs + self.targets
        if _is_dataset(x):  # Keras averages the loss over the steps, the metrics over the samples
            rows = [(len(b[0]), self._run(self._fetches, b, tensors, False)) for b in itertools.islice(
                _dataset_passes(x, tensors, f"{self.name}.evaluate")(), steps)]
            sizes = np.array([n for n, _ in rows], np.float64)
            outs = np.array([o for _, o in rows], np.float64)
            values = [float(outs[:, 0].mean())] + list(sizes @ outs[:, 1:] / sizes.sum())
        else:
            data = self._arrays(x, self.inputs, "input") + self._arrays(y, self.targets, "target")
            values = self._loop(self._fetches, data, tensors, batch_size or 32, False)
        if return_dict:
            return dict(zip(self.metrics_names, values))
        return self._result(values)

    def predict(self, x, batch_size=None, verbose=0, steps=None, callbacks=None):
        """The outputs for x, in test mode, computed in batches."""
        self._ensure_built(x)
        if _is_dataset(x):
            outs = [self._run(self.outputs, b, self.inputs, False) for b in itertools.islice(
                _dataset_passes(x, self.inputs, f"{self.name}.predict")(), steps)]
        else:
            xs = self._arrays(x, self.inputs, "input")
            outs = [self._run(self.outputs, [a[s:e] for a in xs], self.inputs, False)
                    for s, e in _batches(len(xs[0]), batch_size or 32)]
        joined = [np.concatenate([o[i] for o in outs]) for i in range(len(self.outputs))]
        return joined[0] if len(joined) == 1 else joined

    def train_on_batch(self, x, y, sample_weight=None, class_weight=None, reset_metrics=True):
        """One training step on (x, y); the loss (and metrics) before it."""
        self._check_compiled("train_on_batch")
        self._ensure_built(x)
        step = self._train_step()
        data = self._arrays(x, self.inputs, "input") + self._arrays(y, self.targets, "target")
        return self._result(self._run([step] + self._fetches, data, self.inputs + self.targets, True)[1:])

    def reset_metrics(self) -> None:
        """Keras's metrics keep running totals between calls; tfplus's are each call's own: nothing to reset."""

    def test_on_batch(self, x, y, sample_weight=None, reset_metrics=True):
        self._check_compiled("test_on_batch")
        data = self._arrays(x, self.inputs, "input") + self._arrays(y, self.targets, "target")
        return self._result(self._run(self._fetches, data, self.inputs + self.targets, False))

    def predict_on_batch(self, x):
        outs = self._run(self.outputs, self._arrays(x, self.inputs, "input"), self.inputs, False)
        return outs[0] if len(outs) == 1 else outs

    # -- weights' files ---------------------------------------------------------------------------------------
    def save_weights(self, filepath, overwrite=True, save_format=None) -> None:
        """The weights as TensorFlow Keras's object-based checkpoint (`filepath`.index, .data-*: the weights
        under `layer_with_weights-<i>/<attribute>/.ATTRIBUTES/VARIABLE_VALUE` and the object graph that
        TensorFlow's load_weights matches them by)."""
        _refuse_h5(filepath, save_format)
        keyed = self._checkpoint_keys()
        values = backend.batch_get_value([v for _, v in keyed])
        tensors = {key: value for (key, _), value in zip(keyed, values)}
        tensors[_OBJECT_GRAPH] = _object_graph(keyed)
        os.makedirs(os.path.dirname(os.path.abspath(str(filepath))), exist_ok=True)
        replace_bundle(str(filepath), tensors)  # a save killed midway leaves the weights saved before readable

    def _checkpoint_keys(self) -> list:
        """[(checkpoint key, variable)] of the weights, layer by layer, as TensorFlow's Keras keys them."""
        return [(f"layer_with_weights-{i}/{path}/.ATTRIBUTES/VARIABLE_VALUE", v)
                for i, layer in enumerate(la for la in self.layers if la.weights)
                for path, v in layer._checkpoint_paths()]

    def load_weights(self, filepath, by_name=False, skip_mismatch=False):
        """Weights from a TensorFlow checkpoint: save_weights' or TensorFlow Keras's (object-based), or a
        tf.train.Saver's (by variable name)."""
        _refuse_h5(filepath, None)
        if by_name or skip_mismatch:
            raise NotImplementedError(f"{self.name}.load_weights: by_name and skip_mismatch are for HDF5 files, "
                                      "which tfplus does not read")
        reader = NewCheckpointReader(whole_bundle(str(filepath)))
        if not reader.has_tensor(_OBJECT_GRAPH):
            Saver(self.weights, max_to_keep=None).restore(backend.get_session(), reader)
            return
        pairs = []
        shapes = reader.get_variable_to_shape_map()
        for key, v in self._checkpoint_keys():
            if not reader.has_tensor(key):
                raise ValueError(f"{self.name}.load_weights: {reader.path} has no {key} for weight {v.op.name}")
            if tuple(shapes[key]) != tuple(v.shape.as_list()):
                raise ValueError(f"{self.name}.load_weights: {reader.path} holds {key} with shape "
                                 f"{tuple(shapes[key])}, but weight {v.op.name} has shape {tuple(v.shape.as_list())}: "
                                 "the file was saved from a different model")
            pairs.append((v, reader.get_tensor(key)))
        backend.batch_set_value(pairs)


_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append(v & 0x7F | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _proto_field(number: int, payload) -> bytes:
    """One protobuf field: a varint (int) or a length-delimited one (bytes / str)."""
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    payload = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _object_graph(keyed: list) -> bytes:
    """The TrackableObjectGraph proto of a model whose weights are `keyed` [(key, variable)]: the root, a node
    per path component of the keys (`layer_with_weights-0`, `cell`, `kernel`), each weight's node holding its
    VARIABLE_VALUE attribute."""
    children: list[list] = [[]]
    attributes: list[bytes] = [b""]
    ids: dict = {}
    for key, v in keyed:
        node = 0
        for name in key.split("/.ATTRIBUTES/")[0].split("/"):
            if (node, name) not in ids:
                ids[node, name] = len(children)
                children[node].append((len(children), name))
                children.append([])
                attributes.append(b"")
            node = ids[node, name]
        attributes[node] = _proto_field(2, _proto_field(1, "VARIABLE_VALUE") + _proto_field(2, v.op.name) +
                                        _proto_field(3, key))
    has_values = _proto_field(5, _proto_field(1, 1))
    nodes = [b"".join(_proto_field(1, _proto_field(1, i) + _proto_field(2, name)) for i, name in kids) + attr +
             has_values for kids, attr in zip(children, attributes)]
    return b"".join(_proto_field(1, node) for node in nodes)


def _refuse_h5(filepath, save_format) -> None:
    if save_format in ("h5", "keras") or str(filepath).endswith((".h5", ".hdf5", ".keras")):
        raise NotImplementedError(f"Keras's HDF5 weight files ({filepath}) are not supported by tfplus: use the "
                                  "TensorFlow checkpoint format (a path without .h5), which tfplus and TensorFlow "
                                  "both read")
