"""tf.summary (TF1): summaries of tensors, written to TensorBoard event files.

    import tfplus as tf
    tf.summary.scalar("loss", loss)
    tf.summary.histogram("weights", w)
    merged = tf.summary.merge_all()
    writer = tf.summary.FileWriter(logdir, sess.graph)
    summary, _ = sess.run([merged, train_op], feeds)
    writer.add_summary(summary, step)        # then: tensorboard --logdir logdir

A summary here is a fetchable handle, not a graph node: Session.run fetches the tensors it summarizes and
returns the serialized Summary protobuf (bytes), as TF1's string-valued summary ops do. The handles are not
part of as_graph_def() (tfplus has no string tensors).

Event files are TFRecord files (length, masked CRC-32C of the length, record, masked CRC-32C of the record) of
Event protobufs, the first one saying the file version, named events.out.tfevents.<time>.<host>.
"""
from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
import zlib

import numpy as np

from tfplus import crc32c, logging
from tfplus.framework import (
    Graph,
    GraphKeys,
    Tensor,
    add_to_collection,
    convert_to_tensor,
    get_collection,
    get_default_graph,
)
from tfplus.proto import event_pb2, summary_pb2

Summary = summary_pb2.Summary
HistogramProto = summary_pb2.HistogramProto
SummaryMetadata = summary_pb2.SummaryMetadata
Event = event_pb2.Event
SessionLog = event_pb2.SessionLog

__all__ = ["FileWriter", "FileWriterCache", "scalar", "histogram", "image", "text", "merge", "merge_all",
           "Summary", "SummaryMetadata", "HistogramProto", "Event", "SessionLog"]


def _masked(data: bytes) -> int:
    return crc32c.mask(crc32c.value(data))


def tfrecord(data: bytes) -> bytes:
    """One TFRecord: uint64 length, uint32 masked CRC of the length, the data, uint32 masked CRC of the data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked(length)) + data + struct.pack("<I", _masked(data))


# -- summary handles -----------------------------------------------------------------------------------------
class SummaryHandle:
    """What tf.summary.scalar & co. return: Session.run fetches `tensors` and gives build(values) (bytes)."""

    def __init__(self, tensors: list, build, name: str):
        self.tensors, self._build, self.name = tensors, build, name + ":0"  # TF1's summary tensor's name

    def _fetch_expand(self):
        return self.tensors, self._build

    def __repr__(self):
        return f"<tf.summary {self.name!r}>"


def _add(handle: SummaryHandle, collections) -> SummaryHandle:
    for key in (collections if collections is not None else [GraphKeys.SUMMARIES]):
        add_to_collection(key, handle)
    return handle


_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w.]")


def clean_tag(name: str) -> str:
    """`name` as TF1's summary ops clean it before using it as a tag and name scope: each character other than
    letters, digits, '_', '-', '/', '.' becomes '_' and leading '/' go ('W1:0' -> 'W1_0'), with a warning."""
    if name is None:
        return None
    new = _INVALID_TAG_CHARACTERS.sub("_", name).lstrip("/")
    if new != name:
        logging.warning("Summary name %s is illegal; using %s instead.", name, new)
    return new


def _tag(name: str, family=None) -> str:
    """The summary's tag: its name (cleaned) inside the current name scope, made unique ('loss', 'loss_1'), like
    the name scope TF1's summary ops take their tag from; with a family, the scope is family/name and the tag
    family/<scope>, as TF1 prefixes it again so that TensorBoard shows it in the family's tab."""
    name, family = clean_tag(name), clean_tag(family)
    if not family:
        return get_default_graph().unique_name(name)
    return f"{family}/{get_default_graph().unique_name(f'{family}/{name}')}"


def _one_value(**fields) -> bytes:
    return Summary(value=[Summary.Value(**fields)]).SerializeToString()


def scalar(name: str, tensor, collections=None, family=None) -> SummaryHandle:
    """A scalar summary (`loss`, `accuracy`); the tensor must hold one real number."""
    t = convert_to_tensor(tensor)
    if t.shape.ndims not in (None, 0) and t.shape.num_elements() != 1:
        raise ValueError(f"tf.summary.scalar {name!r}: tensor {t.name} has shape {t.shape}; a scalar is needed")
    tag = _tag(name, family)

    def build(values):
        return _one_value(tag=tag, simple_value=float(np.asarray(values[0]).reshape(())))
    return _add(SummaryHandle([t], build, tag), collections)


def _bucket_limits() -> np.ndarray:
    """TF's default histogram buckets: +-1e-12 * 1.1^k up to 1e20, and the largest double at each end."""
    pos = []
    v = 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    pos = np.array(pos)
    return np.concatenate([[-np.finfo(np.float64).max], -pos[::-1], [0.0], pos, [np.finfo(np.float64).max]])


_LIMITS = _bucket_limits()


def histogram_proto(values) -> HistogramProto:
    """The histogram of `values` in TF's default buckets (left-open, right-closed), empty buckets left out."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size and not np.all(np.isfinite(x)):
        raise ValueError(f"histogram: the values hold NaN or infinity ({np.sum(~np.isfinite(x))} of {x.size})")
    index = np.searchsorted(_LIMITS, x, side="left")  # bucket i holds (limit[i-1], limit[i]]
    counts = np.bincount(index, minlength=_LIMITS.size)
    keep = np.nonzero(counts)[0]
    return HistogramProto(min=float(x.min()) if x.size else 0.0, max=float(x.max()) if x.size else 0.0,
                          num=float(x.size), sum=float(x.sum()), sum_squares=float((x * x).sum()),
                          bucket_limit=_LIMITS[keep].tolist(), bucket=counts[keep].astype(np.float64).tolist())


def histogram(name: str, values, collections=None, family=None) -> SummaryHandle:
    """A histogram of a tensor's values (e.g. weights, activations)."""
    t = convert_to_tensor(values)
    tag = _tag(name, family)

    def build(vals):
        return _one_value(tag=tag, histo=histogram_proto(vals[0]))
    return _add(SummaryHandle([t], build, tag), collections)


def encode_png(image: np.ndarray) -> bytes:
    """A PNG file of an [h, w, c] uint8 image, c = 1 (gray), 3 (RGB) or 4 (RGBA); no filtering."""
    h, w, c = image.shape
    color_type = {1: 0, 3: 2, 4: 6}[c]
    raw = b"".join(b"\x00" + image[row].tobytes() for row in range(h))  # filter byte 0 per scanline

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _to_uint8(batch: np.ndarray) -> np.ndarray:
    """TF1's image summary scaling: uint8 as is; floats all >= 0 scale so the max is 255, otherwise so the
    largest magnitude maps to 127 around 128."""
    if batch.dtype == np.uint8:
        return batch
    x = batch.astype(np.float64)
    out = np.empty(x.shape, np.uint8)
    for i, img in enumerate(x):
        finite = img[np.isfinite(img)]
        if finite.size and finite.min() >= 0:
            peak = finite.max()
            scale = 255.0 / peak if peak > 0 else 0.0
            offset = 0.0
        else:
            peak = np.abs(finite).max() if finite.size else 0.0
            scale = 127.0 / peak if peak > 0 else 0.0
            offset = 128.0
        out[i] = np.clip(np.nan_to_num(img * scale + offset), 0, 255).astype(np.uint8)
    return out


def image(name: str, tensor, max_outputs: int = 3, collections=None, family=None) -> SummaryHandle:
    """Up to max_outputs images of a [batch, h, w, c] tensor (c = 1, 3 or 4), tagged `<name>/image/<i>` (just
    `<name>/image` for one), as TF1 does."""
    t = convert_to_tensor(tensor)
    if t.shape.ndims not in (None, 4) or (t.shape.ndims == 4 and t.shape[3].value not in (None, 1, 3, 4)):
        raise ValueError(f"tf.summary.image {name!r}: tensor {t.name} has shape {t.shape}; need [batch, height, "
                         "width, channels] with 1, 3 or 4 channels")
    tag = _tag(name, family)

    def build(vals):
        batch = _to_uint8(np.asarray(vals[0])[:max_outputs])
        out = Summary()
        for i, img in enumerate(batch):
            out.value.add(tag=f"{tag}/image" if len(batch) == 1 else f"{tag}/image/{i}",
                          image=Summary.Image(height=img.shape[0], width=img.shape[1], colorspace=img.shape[2],
                                              encoded_image_string=encode_png(img)))
        return out.SerializeToString()
    return _add(SummaryHandle([t], build, tag), collections)


def text(name: str, tensor, collections=None) -> SummaryHandle:
    """A text summary (TensorBoard's text plugin) of a Python string or a string tensor (tf.constant("notes"))."""
    from tfplus.proto import tensor_pb2, tensor_shape_pb2
    tag = _tag(name)
    fetched = [tensor] if isinstance(tensor, Tensor) else []
    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))

    def build(vals):
        value = np.asarray(vals[0] if fetched else tensor)
        words = [w if isinstance(w, bytes) else str(w).encode() for w in value.reshape(-1)]
        dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in value.shape]
        # dtype 7 is TensorFlow's DT_STRING
        proto = tensor_pb2.TensorProto(dtype=7, tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims),
                                       string_val=words)
        return _one_value(tag=tag, metadata=meta, tensor=proto)
    return _add(SummaryHandle(fetched, build, tag), collections)


def merge(inputs, collections=None, name=None) -> SummaryHandle:
    """One summary holding every value of `inputs` (handles or serialized summaries)."""
    handles = [h for h in inputs if h is not None]
    for h in handles:
        if not isinstance(h, (SummaryHandle, bytes)):
            raise TypeError(f"tf.summary.merge: {h!r} is not a summary")
    live = [h for h in handles if isinstance(h, SummaryHandle)]
    tensors = [t for h in live for t in h.tensors]

    def build(vals):
        out, i = Summary(), 0
        for h in handles:
            if isinstance(h, bytes):
                out.MergeFromString(h)
                continue
            n = len(h.tensors)
            out.MergeFromString(h._build(vals[i:i + n]))
            i += n
        return out.SerializeToString()
    handle = SummaryHandle(tensors, build, name or "Merge/MergeSummary")
    for key in collections or ():
        add_to_collection(key, handle)
    return handle


def merge_all(key=GraphKeys.SUMMARIES, scope=None, name=None):
    """Every summary in collection `key` merged into one; None when there are none (as in TF1)."""
    handles = get_collection(key, scope)
    return merge(handles, name=name) if handles else None


# -- writing -------------------------------------------------------------------------------------------------
_file_counter = [0]
_counter_lock = threading.Lock()


class FileWriter:
    """Writes Event records to `logdir/events.out.tfevents.<time>.<host>`: summaries, the graph, session logs.
    Records are buffered and written by flush() (also every `flush_secs` on the next add, and by close()).

        writer = tf.summary.FileWriter("logs", sess.graph)
        writer.add_summary(sess.run(merged), step)
        writer.close()
    """

    def __init__(self, logdir, graph=None, max_queue: int = 10, flush_secs: float = 120, graph_def=None,
                 filename_suffix: str = "", session=None):
        self._logdir = os.fspath(logdir)
        os.makedirs(self._logdir, exist_ok=True)
        with _counter_lock:  # two writers in one second get different files
            _file_counter[0] += 1
            n = _file_counter[0]
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{n}"
        self._path = os.path.join(self._logdir, name + filename_suffix)
        self._file = open(self._path, "wb")
        self._pending: list[bytes] = []
        self._max_queue, self._flush_secs, self._last_flush = max_queue, flush_secs, time.time()
        self._closed = False
        # Training threads share a writer (TF1's is thread-safe): an event added while another thread flushed was
        # lost, or written twice by two flushes.
        self._lock = threading.RLock()
        self.add_event(Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()
        if graph is not None or graph_def is not None:
            self.add_graph(graph, graph_def=graph_def)

    def get_logdir(self) -> str:
        return self._logdir

    @property
    def path(self) -> str:
        """The event file being written."""
        return self._path

    def add_event(self, event) -> None:
        record = tfrecord(event.SerializeToString())
        with self._lock:
            if self._closed:
                raise RuntimeError(f"FileWriter for {self._logdir} is closed; use reopen() first")
            self._pending.append(record)
            if len(self._pending) >= self._max_queue or time.time() - self._last_flush >= self._flush_secs:
                self.flush()

    def add_summary(self, summary, global_step=None) -> None:
        """`summary`: what Session.run returned for a tf.summary (bytes) or a Summary proto."""
        if isinstance(summary, bytes):
            summary = Summary.FromString(summary)
        elif not isinstance(summary, Summary):
            raise TypeError(f"add_summary: expected a serialized Summary (bytes) or a Summary proto, got "
                            f"{type(summary).__name__}")
        self.add_event(Event(wall_time=time.time(), step=int(global_step or 0), summary=summary))

    def add_graph(self, graph=None, global_step=None, graph_def=None) -> None:
        """The graph TensorBoard's Graphs tab shows: a tf.Graph, with its tensors' shapes as TF1 writes them, or a
        GraphDef (tfplus's or TensorFlow's), as given."""
        if graph is not None and graph_def is not None:
            raise ValueError("add_graph: give graph or graph_def, not both")
        given = graph if graph is not None else graph_def
        if isinstance(given, Graph):
            data = given.as_graph_def(add_shapes=True).SerializeToString()
        elif hasattr(given, "SerializeToString"):
            data = given.SerializeToString()
        else:
            raise TypeError(f"add_graph: pass a tf.Graph (e.g. sess.graph) or a GraphDef, got {type(given).__name__}")
        self.add_event(Event(wall_time=time.time(), step=int(global_step or 0), graph_def=data))

    def add_session_log(self, session_log, global_step=None) -> None:
        self.add_event(Event(wall_time=time.time(), step=int(global_step or 0), session_log=session_log))

    def add_run_metadata(self, run_metadata, tag, global_step=None) -> None:
        """Accepted for TF1 scripts; tfplus's run traces are read with `tfplus profile`, not written here."""

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._file.write(b"".join(self._pending))
                self._pending.clear()
            self._file.flush()
            self._last_flush = time.time()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self.flush()
                self._file.close()
                self._closed = True

    def reopen(self) -> None:
        with self._lock:
            if self._closed:
                self._file = open(self._path, "ab")
                self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def summary_iterator(path: str):
    """tf.train.summary_iterator: the Event protos of an event file, in order (each record's checksums verified).

        >>> for event in tf.train.summary_iterator(path):                     # doctest: +SKIP
        ...     for value in event.summary.value: print(event.step, value.tag, value.simple_value)
    """
    from tfplus.io.tfrecord import tf_record_iterator
    for record in tf_record_iterator(path):
        yield Event.FromString(record)


class FileWriterCache:
    """One FileWriter per log directory (TF1's FileWriterCache)."""
    _writers: dict[str, FileWriter] = {}

    @classmethod
    def get(cls, logdir) -> FileWriter:
        key = os.path.abspath(os.fspath(logdir))
        if key not in cls._writers:
            cls._writers[key] = FileWriter(logdir, graph=get_default_graph())
        return cls._writers[key]

    @classmethod
    def clear(cls) -> None:
        for w in cls._writers.values():
            w.close()
        cls._writers.clear()


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.summary")
