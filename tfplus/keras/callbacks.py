"""tf.keras.callbacks for fit: Callback (on_epoch_end, ...), History, EarlyStopping, ModelCheckpoint,
LambdaCallback. The logs are Keras's: {'loss': ..., 'accuracy': ..., 'val_loss': ...} per epoch."""
from __future__ import annotations

import numpy as np

from tfplus.keras import backend
from tfplus.summary import FileWriter, Summary


class Callback:
    """Override any of on_{train,epoch,batch}_{begin,end}; `self.model` and `self.params` are set by fit."""

    def __init__(self):
        self.model, self.params = None, {}

    def set_model(self, model) -> None:
        self.model = model

    def set_params(self, params: dict) -> None:
        self.params = params

    def on_train_begin(self, logs=None): ...

    def on_train_end(self, logs=None): ...

    def on_epoch_begin(self, epoch, logs=None): ...

    def on_epoch_end(self, epoch, logs=None): ...

    def on_batch_begin(self, batch, logs=None): ...

    def on_batch_end(self, batch, logs=None): ...

    on_train_batch_begin = on_batch_begin
    on_train_batch_end = on_batch_end


class History(Callback):
    """fit's return value: `history.history[name]`, one value per epoch, and `history.epoch`."""

    def on_train_begin(self, logs=None):
        self.epoch, self.history = [], {}

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)


class LambdaCallback(Callback):
    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_batch_begin=None, on_batch_end=None,
                 on_train_begin=None, on_train_end=None):
        super().__init__()
        for name, fn in (("on_epoch_begin", on_epoch_begin), ("on_epoch_end", on_epoch_end),
                         ("on_batch_begin", on_batch_begin), ("on_batch_end", on_batch_end),
                         ("on_train_begin", on_train_begin), ("on_train_end", on_train_end)):
            if fn is not None:
                setattr(self, name, fn)


def _better(mode: str, monitor: str):
    if mode == "auto":
        mode = "max" if "acc" in monitor else "min"
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'auto', 'min' or 'max', got {mode!r}")
    return (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)


class EarlyStopping(Callback):
    """Stops fit when `monitor` has not improved by more than min_delta for `patience` epochs."""

    def __init__(self, monitor="val_loss", min_delta=0.0, patience=0, verbose=0, mode="auto", baseline=None,
                 restore_best_weights=False):
        super().__init__()
        self.monitor, self.patience, self.baseline = monitor, patience, baseline
        self.restore_best_weights = restore_best_weights
        better = _better(mode, monitor)
        self._minimizing = better(0, 1)
        self.min_delta = -abs(min_delta) if self._minimizing else abs(min_delta)
        self._better = lambda a, b: better(a - self.min_delta, b)
        self.stopped_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait, self.stopped_epoch, self.best_weights = 0, 0, None
        self.best = self.baseline if self.baseline is not None else (np.inf if self._minimizing else -np.inf)

    def on_epoch_end(self, epoch, logs=None):
        current = (logs or {}).get(self.monitor)
        if current is None:
            raise KeyError(f"EarlyStopping: monitor {self.monitor!r} is not in the logs ({sorted(logs or {})})")
        self.wait += 1
        if self._better(current, self.best):
            self.best, self.wait = current, 0
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                self.model.set_weights(self.best_weights)


class ModelCheckpoint(Callback):
    """Saves the weights (TF checkpoint format) after each epoch, or only when `monitor` improved
    (save_best_only); `filepath` may hold {epoch} and log names: 'ckpt-{epoch:02d}'."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                 mode="auto", save_freq="epoch", period=1):
        super().__init__()
        if not save_weights_only:
            raise NotImplementedError("ModelCheckpoint(save_weights_only=False): whole-model files are not supported "
                                      "by tfplus; pass save_weights_only=True")
        self.filepath, self.monitor, self.save_best_only, self.period = filepath, monitor, save_best_only, period
        self._better = _better(mode, monitor)
        self.best = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if (epoch + 1) % self.period:
            return
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None or (self.best is not None and not self._better(current, self.best)):
                return
            self.best = current
        self.model.save_weights(self.filepath.format(epoch=epoch + 1, **logs))


class LearningRateScheduler(Callback):
    """Sets the optimizer's learning rate to schedule(epoch, lr) (or schedule(epoch)) before each epoch; the
    epoch's logs get 'lr'."""

    def __init__(self, schedule, verbose=0):
        super().__init__()
        self.schedule, self.verbose = schedule, verbose

    def on_epoch_begin(self, epoch, logs=None):
        lr = self.model.optimizer.lr
        current = float(backend.get_value(lr))
        try:
            new = self.schedule(epoch, current)
        except TypeError:  # the one-argument form
            new = self.schedule(epoch)
        backend.set_value(lr, new)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = backend.get_value(self.model.optimizer.lr)


class ReduceLROnPlateau(Callback):
    """Multiplies the learning rate by `factor` (not below min_lr) when `monitor` has not improved by more than
    min_delta for `patience` epochs, then waits `cooldown` epochs; the epoch's logs get 'lr'."""

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto", min_delta=1e-4,
                 cooldown=0, min_lr=0, **kwargs):
        super().__init__()
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor {factor} must be < 1")
        self.monitor, self.factor, self.patience, self.min_delta = monitor, factor, patience, min_delta
        self.cooldown, self.min_lr = cooldown, min_lr
        better = _better(mode, monitor)
        self._minimizing = better(0, 1)
        self._improved = (lambda a, b: a < b - min_delta) if self._minimizing else (lambda a, b: a > b + min_delta)

    def on_train_begin(self, logs=None):
        self.best = np.inf if self._minimizing else -np.inf
        self.wait = self.cooldown_counter = 0

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        lr = self.model.optimizer.lr
        logs["lr"] = backend.get_value(lr)
        current = logs.get(self.monitor)
        if current is None:
            raise KeyError(f"ReduceLROnPlateau: monitor {self.monitor!r} is not in the logs ({sorted(logs)})")
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        if self._improved(current, self.best):
            self.best, self.wait = current, 0
        elif self.cooldown_counter <= 0:
            self.wait += 1
            if self.wait >= self.patience:
                old = float(backend.get_value(lr))
                if old > np.float32(self.min_lr):
                    backend.set_value(lr, max(old * self.factor, self.min_lr))
                    self.cooldown_counter, self.wait = self.cooldown, 0


class TensorBoard(Callback):
    """Writes each epoch's logs ('loss', 'val_loss', ...) as scalar summaries to an event file in log_dir (and
    the graph, with write_graph), as TF1's Keras does; histograms, images and embeddings are not supported."""

    def __init__(self, log_dir="./logs", histogram_freq=0, batch_size=32, write_graph=True, write_grads=False,
                 write_images=False, update_freq="epoch", **kwargs):
        super().__init__()
        kwargs.pop("profile_batch", None)  # profiling: nothing to do in tfplus
        given = {"histogram_freq": histogram_freq, "write_grads": write_grads, "write_images": write_images,
                 **kwargs}
        bad = sorted(k for k, v in given.items() if v) + (["update_freq"] if update_freq != "epoch" else [])
        if bad:
            raise NotImplementedError(f"tf.keras.callbacks.TensorBoard: {bad} not supported by tfplus (it writes the "
                                      "epochs' scalars and the graph)")
        self.log_dir, self.write_graph, self.writer = log_dir, write_graph, None

    def on_train_begin(self, logs=None):
        graph = backend.get_session().graph if self.write_graph else None
        self.writer = FileWriter(self.log_dir, graph)

    def on_epoch_end(self, epoch, logs=None):
        for name, value in (logs or {}).items():
            if name not in ("batch", "size"):
                self.writer.add_summary(Summary(value=[Summary.Value(tag=name, simple_value=float(value))]), epoch)
        self.writer.flush()

    def on_train_end(self, logs=None):
        self.writer.close()


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.callbacks")
