"""TF1's queue-based input pipelines, run without queues or threads: tf.train.string_input_producer gives the file
names, a reader (tf.TFRecordReader, FixedLengthRecordReader, TextLineReader, WholeFileReader) reads one record a
run (or slice_input_producer gives one row of in-memory tensors a run; range_input_producer and input_producer an
index or a row each dequeue()), and tf.train.batch / shuffle_batch gather `batch_size` of them. Each is a host node
(PyFunc); a batch node runs the reading part of the graph itself, batch_size times, in a session of its own, when
it runs. start_queue_runners is kept for the scripts' sake: there are no runner threads to start or stop.
Coordinator is TF1's, for the threads a script starts itself (join waits for them). The end of the input (num_epochs) is
tf.errors.OutOfRangeError, as in TensorFlow.

    queue = tf.train.string_input_producer(["train.tfrecord"], num_epochs=2, shuffle=False)
    _, record = tf.TFRecordReader().read(queue)
    images, labels = tf.train.batch(parse(record), batch_size=32)
"""
from __future__ import annotations

import itertools
import threading
import time

import numpy as np

from tfplus import dtypes as _dt
from tfplus import errors
from tfplus.framework import Tensor, convert_to_tensor, get_default_graph
from tfplus.io import tfrecord
from tfplus.ops import array_ops
from tfplus.ops.host_ops import bytes_array, host_op

__all__ = ["string_input_producer", "range_input_producer", "input_producer", "slice_input_producer",
           "TFRecordReader", "FixedLengthRecordReader", "TextLineReader",
           "WholeFileReader", "batch", "shuffle_batch", "Coordinator", "start_queue_runners"]


class _FilenameQueue:
    """The file names a reader takes one by one: `names` (strings or a string tensor, read on first use), each
    epoch's order shuffled when asked; after num_epochs passes (None: forever) the input ends."""

    def __init__(self, names, num_epochs, shuffle: bool, seed):
        if isinstance(names, Tensor):
            from tfplus.framework import constant_value
            value = constant_value(names)
            if value is None:
                raise ValueError("tf.train.string_input_producer: the file names must be a constant (a list of "
                                 "strings, or tf.train.match_filenames_once's result)")
            names = value
        self.names = [n.decode() for n in bytes_array(names).reshape(-1)]
        if not self.names:
            raise ValueError("tf.train.string_input_producer: no file names given")
        self.num_epochs, self.shuffle = num_epochs, shuffle
        graph_seed = get_default_graph().seed
        self._rng = np.random.default_rng(seed if seed is not None else graph_seed)
        self._order = self._epochs()
        self.lock = threading.Lock()

    def _epochs(self):
        yield from (self.names[i] for i in _epoch_order(len(self.names), self.num_epochs, self.shuffle, self._rng))

    def next_file(self) -> str | None:
        return next(self._order, None)


def _epoch_order(n: int, num_epochs, shuffle: bool, rng):
    """0..n-1 once an epoch (a new permutation each epoch when shuffled), num_epochs times (None: forever)."""
    for _ in itertools.count() if num_epochs is None else range(num_epochs):
        yield from (rng.permutation(n) if shuffle else range(n))


def _static_rows(tensor, what: str) -> int:
    n = tensor.shape.as_list()[0] if tensor.shape.ndims else None
    if n is None:
        raise ValueError(f"tf.train.{what}: the first dimension of {tensor.name} must be known (the number of rows "
                         "to produce)")
    return n


class _RangeQueue:
    """range_input_producer's and input_producer's "queue": each run of dequeue() gives the next index of
    0..limit-1 (or the next row of `rows`), epoch after epoch; past num_epochs, tf.errors.OutOfRangeError."""

    def __init__(self, limit: int, num_epochs, shuffle: bool, seed, what: str, rows=None):
        graph_seed = get_default_graph().seed
        self._order = _epoch_order(limit, num_epochs, shuffle,
                                   np.random.default_rng(seed if seed is not None else graph_seed))
        self._lock, self._what, self._rows = threading.Lock(), what, rows

    def dequeue(self, name=None) -> Tensor:
        def next_index():
            with self._lock:
                i = next(self._order, None)
            if i is None:
                raise errors.OutOfRangeError(None, None, f"tf.train.{self._what}: its num_epochs are done")
            return [np.int32(i)]
        (index,) = host_op(name or f"{self._what}_dequeue", next_index, [], [_dt.int32], [[]])
        return index if self._rows is None else array_ops.gather(self._rows, index)


def range_input_producer(limit, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None, name=None):
    """A "queue" of the int32 indices 0..limit-1, one a dequeue() (see _RangeQueue)."""
    from tfplus.framework import constant_value
    value = constant_value(convert_to_tensor(limit))
    if value is None:
        raise ValueError("tf.train.range_input_producer: limit must be a constant")
    return _RangeQueue(int(value), num_epochs, shuffle, seed, "range_input_producer")


def input_producer(input_tensor, element_shape=None, num_epochs=None, shuffle=True, seed=None, capacity=32,
                   shared_name=None, summary_name=None, name=None, cancel_op=None):
    """A "queue" of the rows of `input_tensor`, one a dequeue()."""
    rows = convert_to_tensor(input_tensor)
    return _RangeQueue(_static_rows(rows, "input_producer"), num_epochs, shuffle, seed, "input_producer", rows)


def slice_input_producer(tensor_list, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                         name=None) -> list:
    """One row of every tensor in `tensor_list` (the same row of each) a run, as tf.train.batch takes them."""
    tensors = [convert_to_tensor(t) for t in tensor_list]
    if not tensors:
        raise ValueError("tf.train.slice_input_producer: tensor_list is empty")
    n = {_static_rows(t, "slice_input_producer") for t in tensors}
    if len(n) != 1:
        raise ValueError(f"tf.train.slice_input_producer: the tensors' first dimensions differ ({sorted(n)})")
    index = _RangeQueue(n.pop(), num_epochs, shuffle, seed, "slice_input_producer").dequeue(name)
    return [array_ops.gather(t, index) for t in tensors]


def string_input_producer(string_tensor, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                          name=None, cancel_op=None) -> _FilenameQueue:
    """The file-name "queue" readers read from (see the module's docstring)."""
    return _FilenameQueue(string_tensor, num_epochs, shuffle, seed)


class _Reader:
    """A reader: read(queue) is the (key, value) node giving the next record of the queue's files each run."""

    def __init__(self, name=None):
        self._name = name

    def _records(self, path: str):
        raise NotImplementedError

    def read(self, queue: _FilenameQueue, name=None):
        if not isinstance(queue, _FilenameQueue):
            raise TypeError(f"{type(self).__name__}.read: the queue must come from tf.train.string_input_producer, "
                            f"got {type(queue).__name__}")
        stream = self._stream(queue)
        lock = threading.Lock()

        def next_record():
            with lock:
                item = next(stream, None)
            if item is None:
                raise errors.OutOfRangeError(None, None, f"{type(self).__name__} '{self._name or 'reader'}': the "
                                             "queue's files are exhausted (num_epochs passes done)")
            return [np.array(item[0], object), np.array(item[1], object)]
        key, value = host_op(name or self._name or "ReaderReadV2", lambda: next_record(), [],
                             [_dt.string, _dt.string], [(), ()])
        return key, value

    def _stream(self, queue: _FilenameQueue):
        while True:
            with queue.lock:
                path = queue.next_file()
            if path is None:
                return
            for k, record in self._records(path):
                yield f"{path}:{k}".encode(), record


class TFRecordReader(_Reader):
    """tf.TFRecordReader(options=None): the records of TFRecord files; the key is "file:offset"."""

    def __init__(self, name=None, options=None):
        super().__init__(name)
        self._compression = tfrecord.compression_type_string(options)

    def _records(self, path):
        offset = 0
        for record in tfrecord.read_records(path, self._compression):
            yield offset, record
            offset += len(record) + 16


class FixedLengthRecordReader(_Reader):
    """tf.FixedLengthRecordReader(record_bytes, header_bytes, footer_bytes): fixed-size records; the key is
    "file:record number"."""

    def __init__(self, record_bytes, header_bytes=None, footer_bytes=None, hop_bytes=None, name=None,
                 encoding=None):
        super().__init__(name)
        if hop_bytes:
            raise ValueError("tf.FixedLengthRecordReader: hop_bytes is not supported")
        self._record, self._header, self._footer = int(record_bytes), int(header_bytes or 0), int(footer_bytes or 0)
        self._compression = tfrecord.compression_type_string(encoding)

    def _records(self, path):
        data = tfrecord.read_file_bytes(path, self._compression)
        body = data[self._header:len(data) - self._footer]
        for k in range(len(body) // self._record):
            yield k, body[k * self._record:(k + 1) * self._record]


class TextLineReader(_Reader):
    """tf.TextLineReader(skip_header_lines): the lines of text files, without their line ends; the key is
    "file:line number" (from 1)."""

    def __init__(self, skip_header_lines=None, name=None):
        super().__init__(name)
        self._skip = int(skip_header_lines or 0)

    def _records(self, path):
        lines = tfrecord.read_file_bytes(path).split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for k, line in enumerate(lines[self._skip:], start=self._skip + 1):
            yield k, line[:-1] if line.endswith(b"\r") else line


class WholeFileReader(_Reader):
    """tf.WholeFileReader: each file's bytes as one record; the key is the file name."""

    def _records(self, path):
        yield "", tfrecord.read_file_bytes(path)

    def _stream(self, queue):
        for key, record in super()._stream(queue):
            yield key[:-1], record  # "file:" -> "file"


# -- batching ------------------------------------------------------------------------------------------------
def _gather(tensors, what: str):
    """(flat list of tensors, a function packing a flat list back into the caller's structure)."""
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return [convert_to_tensor(tensors[k]) for k in keys], lambda vals: dict(zip(keys, vals))
    if isinstance(tensors, (list, tuple)):
        return [convert_to_tensor(t) for t in tensors], list
    return [convert_to_tensor(tensors)], lambda vals: vals[0]


class _Source:
    """The rows batches are made of: the tensors' values, evaluated by a session of its own (one row per run, or
    rows of a batch with enqueue_many)."""

    def __init__(self, tensors: list, enqueue_many: bool):
        self._tensors, self._many, self._session, self._rows = tensors, enqueue_many, None, iter(())

    def next_row(self):
        """The next row (a list of arrays), or None at the end of the input."""
        while True:
            row = next(self._rows, None)
            if row is not None:
                return row
            if self._session is None:
                from tfplus.engine.session import Session  # the batch node's own session, made when it first runs
                self._session = Session(graph=self._tensors[0].graph)
            try:
                values = self._session.run(self._tensors)
            except errors.OutOfRangeError:
                return None
            self._rows = iter(list(zip(*values))) if self._many else iter([values])


def _batch_node(tensors, batch_size: int, enqueue_many: bool, allow_smaller: bool, pick, name: str):
    flat, pack = _gather(tensors, name)
    if not flat:
        raise ValueError(f"tf.train.{name}: no tensors to batch")
    source, lock = _Source(flat, enqueue_many), threading.Lock()
    size = int(batch_size)

    def next_batch():
        with lock:
            rows = pick(source, size)
        if len(rows) < size and not (allow_smaller and rows):
            raise errors.OutOfRangeError(None, None, f"tf.train.{name}: the input ended ({len(rows)} elements "
                                         f"left, fewer than batch_size {size})")
        return [np.stack([np.asarray(r[k]) for r in rows]) for k in range(len(flat))]
    first = None if allow_smaller else size
    shapes = [None if t.shape.ndims is None else
              (first,) + tuple(t.shape.as_list()[1 if enqueue_many else 0:]) for t in flat]
    return pack(host_op(name, next_batch, [], [t.dtype for t in flat], shapes))


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None, dynamic_pad=False,
          allow_smaller_final_batch=False, shared_name=None, name=None):
    """`batch_size` rows of `tensors` (a list, tuple or dict of tensors) stacked, in the order they were read."""
    if dynamic_pad:
        raise ValueError("tf.train.batch: dynamic_pad is not supported; use tf.data's padded_batch")

    def pick(source, size):
        rows = []
        while len(rows) < size:
            row = source.next_row()
            if row is None:
                break
            rows.append(row)
        return rows
    return _batch_node(tensors, batch_size, enqueue_many, allow_smaller_final_batch, pick, name or "batch")


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1, seed=None, enqueue_many=False,
                  shapes=None, allow_smaller_final_batch=False, shared_name=None, name=None):
    """`batch_size` rows drawn at random from a buffer kept at least `min_after_dequeue` rows full (while the
    input lasts). The draws are NumPy's: the order differs from TensorFlow's."""
    graph_seed = get_default_graph().seed
    rng = np.random.default_rng(seed if seed is not None else graph_seed)
    buffer: list = []

    def pick(source, size):
        while len(buffer) < int(min_after_dequeue) + size:
            row = source.next_row()
            if row is None:
                break
            buffer.append(row)
        return [buffer.pop(int(rng.integers(len(buffer)))) for _ in range(min(size, len(buffer)))]
    return _batch_node(tensors, batch_size, enqueue_many, allow_smaller_final_batch, pick, name or "shuffle_batch")


class Coordinator:
    """tf.train.Coordinator: a stop flag that threads share, and join(), which waits for them, as TF1's does.

        coord = tf.train.Coordinator()
        threads = [threading.Thread(target=loop, args=(coord,)) for _ in range(4)]   # loop: until should_stop()
        for t in threads: t.start()
        coord.join(threads)     # returns once every thread has ended; raises the error one reported, if any
    """

    def __init__(self, clean_stop_exception_types=None):
        # An error of these types stops the threads as request_stop() does and is not raised by join: the end of
        # the input (tf.errors.OutOfRangeError) by default.
        self._clean = tuple((errors.OutOfRangeError,) if clean_stop_exception_types is None else
                            clean_stop_exception_types)
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._error: BaseException | None = None
        self._threads: set = set()
        self._joined = False

    def request_stop(self, ex=None):
        """Asks the threads to stop; `ex` (an exception or a sys.exc_info() tuple), the first one reported, is
        what join raises. After join, a reported error is raised at once (nothing would raise it later)."""
        ex = ex[1] if isinstance(ex, tuple) else ex
        if isinstance(ex, self._clean):
            ex = None
        with self._lock:
            if self._joined and ex is not None:
                raise ex
            if not self._stop.is_set():
                self._error = self._error or ex
                self._stop.set()

    def should_stop(self) -> bool:
        return self._stop.is_set()

    def clear_stop(self):
        with self._lock:
            self._joined, self._error = False, None
            self._stop.clear()

    def wait_for_stop(self, timeout=None) -> bool:
        """Waits up to `timeout` seconds (None: for ever) for a stop; whether one was asked."""
        return self._stop.wait(timeout)

    def register_thread(self, thread):
        with self._lock:
            self._threads.add(thread)

    @property
    def joined(self) -> bool:
        return self._joined

    def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False):
        """Waits until `threads` and the registered ones have all ended, or a stop is asked and then they end
        within `stop_grace_period_secs`; raises the error reported to request_stop, else a RuntimeError naming
        the threads still running (unless ignore_live_threads)."""
        with self._lock:
            threads = list(self._threads.union(threads or ()))
        while any(t.is_alive() for t in threads) and not self._stop.wait(0.05):
            pass
        deadline = time.monotonic() + stop_grace_period_secs
        for t in threads:
            if t.is_alive():  # (a thread never started cannot be joined)
                t.join(max(0.0, deadline - time.monotonic()))
        stragglers = [t.name for t in threads if t.is_alive()]
        with self._lock:
            self._joined, self._threads = True, set()
            if self._error is not None:
                raise self._error
        if stragglers and not ignore_live_threads:
            raise RuntimeError(f"Coordinator stopped with threads still running: {' '.join(stragglers)}")

    def raise_requested_exception(self):
        with self._lock:
            if self._error is not None:
                raise self._error

    def stop_on_exception(self):
        """A context in which an Exception is reported to request_stop (and not raised), as TF1's."""
        import contextlib

        @contextlib.contextmanager
        def guard():
            try:
                yield
            except Exception as e:  # noqa: BLE001 (what TF's does: any error stops the coordinator)
                self.request_stop(e)
        return guard()


def start_queue_runners(sess=None, coord=None, daemon=True, start=True, collection=None) -> list:
    """No runner threads to start (the batch nodes read when they run): an empty list of threads."""
    return []
