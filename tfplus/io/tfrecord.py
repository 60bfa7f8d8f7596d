"""TFRecord files (tf.io.TFRecordWriter, tf.io.tf_record_iterator, TFRecordOptions): each record is its length
(uint64, little-endian), the masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the data, as
TensorFlow writes them (tensorflow/core/lib/io/record_writer.cc); GZIP and ZLIB files are that stream compressed
as a whole with zlib's settings of TensorFlow's writer, so the bytes are TensorFlow's.

    import tfplus as tf
    with tf.io.TFRecordWriter("train.tfrecord") as w:
        w.write(example.SerializeToString())
    for record in tf.io.tf_record_iterator("train.tfrecord"):
        ...
"""
from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator

from tfplus import crc32c, errors

__all__ = ["TFRecordWriter", "TFRecordOptions", "TFRecordCompressionType", "tf_record_iterator", "read_records"]


class TFRecordCompressionType:
    """tf.io.TFRecordCompressionType (TF1: tf.python_io.TFRecordCompressionType)."""
    NONE = 0
    ZLIB = 1
    GZIP = 2


_BY_NUMBER = {0: "", 1: "ZLIB", 2: "GZIP"}
_WBITS = {"ZLIB": zlib.MAX_WBITS, "GZIP": 16 + zlib.MAX_WBITS}  # zlib's window bits: +16 means a gzip wrapper


class TFRecordOptions:
    """How a record file is compressed: compression_type "" / "ZLIB" / "GZIP" (or a TFRecordCompressionType),
    and zlib's compression_level, mem_level and compression_strategy (TensorFlow's defaults: -1, 9, 0). The
    buffer sizes and flush mode are accepted for TF's signature; they do not change the bytes written."""

    def __init__(self, compression_type=None, flush_mode=None, input_buffer_size=None, output_buffer_size=None,
                 window_bits=None, compression_level=None, compression_method=None, mem_level=None,
                 compression_strategy=None):
        self.compression_type = compression_type_string(compression_type)
        self.compression_level = -1 if compression_level is None else int(compression_level)
        self.mem_level = 9 if mem_level is None else int(mem_level)
        self.compression_strategy = 0 if compression_strategy is None else int(compression_strategy)
        self.window_bits = window_bits

    @classmethod
    def get_compression_type_string(cls, options) -> str:
        return compression_type_string(options)


def compression_type_string(options) -> str:
    """"", "ZLIB" or "GZIP" for a TFRecordOptions, a TFRecordCompressionType, a string or None."""
    if options is None:
        return ""
    if isinstance(options, TFRecordOptions):
        return options.compression_type
    if isinstance(options, bytes):
        options = options.decode()
    if isinstance(options, int) and options in _BY_NUMBER:
        return _BY_NUMBER[options]
    if isinstance(options, str) and options.upper() in ("", "NONE", "ZLIB", "GZIP"):
        return "" if options.upper() == "NONE" else options.upper()
    raise ValueError(f"TFRecord compression_type {options!r}: use '', 'ZLIB' or 'GZIP' (or "
                     "tf.io.TFRecordCompressionType.NONE / ZLIB / GZIP)")


def _masked_crc(data: bytes) -> bytes:
    return struct.pack("<I", crc32c.mask(crc32c.value(data)))


def encode_record(data: bytes, crc: int | None = None) -> bytes:
    """One record as it lies in an uncompressed file (`crc`: its data's CRC32C, when already known)."""
    header = struct.pack("<Q", len(data))
    data_crc = _masked_crc(data) if crc is None else struct.pack("<I", crc32c.mask(crc))
    return header + _masked_crc(header) + data + data_crc


class TFRecordWriter:
    """Writes records (bytes; a str is UTF-8 encoded) to `path`, compressed as `options` says. Records are
    checksummed _BATCH at a time (crc32c.values), so they reach the file at flush() and close() (or every _BATCH
    records), as a buffered file's data does."""

    _BATCH = 256

    def __init__(self, path, options=None):
        self.path = os.fspath(path)
        kind = compression_type_string(options)
        opts = options if isinstance(options, TFRecordOptions) else TFRecordOptions(kind)
        self._zip = None if not kind else zlib.compressobj(opts.compression_level, zlib.DEFLATED, _WBITS[kind],
                                                           opts.mem_level, opts.compression_strategy)
        self._pending: list[bytes] = []
        try:
            self._f = open(self.path, "wb")
        except FileNotFoundError:
            raise errors.NotFoundError(None, None, f"TFRecordWriter: {self.path}: no such folder; create it "
                                       "first (tf.io.gfile.makedirs)") from None

    def write(self, record) -> None:
        if self._f is None:
            raise errors.FailedPreconditionError(None, None, f"TFRecordWriter {self.path!r} is closed")
        self._pending.append(record.encode() if isinstance(record, str) else bytes(record))
        if len(self._pending) == self._BATCH:
            self._drain()

    def _drain(self) -> None:
        data = b"".join(encode_record(r, crc) for r, crc in zip(self._pending, crc32c.values(self._pending)))
        self._pending = []
        self._f.write(self._zip.compress(data) if self._zip is not None else data)

    def flush(self) -> None:
        self._drain()
        if self._zip is not None:
            self._f.write(self._zip.flush(zlib.Z_SYNC_FLUSH))
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._drain()
            if self._zip is not None:
                self._f.write(self._zip.flush(zlib.Z_FINISH))
            self._f.close()
            self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_file_bytes(path, compression_type="") -> bytes:
    """The bytes of `path`, decompressed as `compression_type` says ("" / "ZLIB" / "GZIP")."""
    data, error = _read(path, compression_type)
    if error is not None:
        raise error
    return data


def _read(path, compression_type) -> tuple[bytes, Exception | None]:
    """The bytes of `path`, decompressed, and None; or, for a damaged compressed stream, what decompresses before
    the damage and the DataLossError to raise after the records it holds."""
    path = os.fspath(path.decode() if isinstance(path, bytes) else path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise errors.NotFoundError(None, None, f"{path}; No such file or directory") from None
    kind = compression_type_string(compression_type)
    if not kind:
        return data, None
    unzip = zlib.decompressobj(_WBITS[kind])
    try:
        out = unzip.decompress(data)
    except zlib.error as e:
        # NOTE: the bytes that decompressed before the damage are lost with the exception: 4 KB at a time keeps
        # them, but for what the damaged 4 KB held (its records are reported with the damage, not skipped).
        out, unzip = bytearray(), zlib.decompressobj(_WBITS[kind])
        for start in range(0, len(data), 4096):
            try:
                out += unzip.decompress(data[start:start + 4096])
            except zlib.error:
                break
        return bytes(out), errors.DataLossError(None, None, f"{path}: not a {kind} file or a damaged one ({e}) "
                                                f"after {len(out)} uncompressed bytes; is compression_type right?")
    # A stream that ends early (a writer killed, or still writing, after flush()) is read up to its end, as in
    # TensorFlow: a record cut there is reported by the framing.
    return out, None


def read_records(path, compression_type="") -> Iterator[bytes]:
    """The records of the file `path`, each checked: a damaged one is a DataLossError naming the file and the
    record's offset (in the uncompressed stream), raised after the records before it, also in a compressed file
    cut short (a killed writer's): TensorFlow reads it so. The data's checksums are taken a batch of records at a
    time (crc32c.values)."""
    name = os.fspath(path.decode() if isinstance(path, bytes) else path)
    data, damaged = _read(path, compression_type)
    pending: list[tuple[int, bytes]] = []  # (offset, record) framed, their data's checksums not yet checked
    for offset, record, error in _frames(data, name):
        if record is not None:
            pending.append((offset, record))
        if error is not None or len(pending) == 1024:
            yield from _checked(pending, data, name)
            pending = []
        if error is not None:
            raise damaged or error  # a record cut by the damage: the damage is the cause
    yield from _checked(pending, data, name)
    if damaged is not None:  # the damage came at a record's end
        raise damaged


def _frames(data: bytes, name: str):
    """(offset, record, None) for each record whose length header is sound, then (offset, None, error) at the first
    one that is not."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            yield pos, None, errors.DataLossError(None, None, f"truncated record at {pos} in {name!r}: "
                                                  f"{len(data) - pos} bytes left, a record header has 12")
            return
        header = data[pos:pos + 8]
        if data[pos + 8:pos + 12] != _masked_crc(header):
            yield pos, None, errors.DataLossError(None, None, f"corrupted record at {pos} in {name!r}: the "
                                                  "length's checksum does not match")
            return
        n = struct.unpack("<Q", header)[0]
        end = pos + 12 + n + 4
        if end > len(data):
            yield pos, None, errors.DataLossError(None, None, f"truncated record at {pos} in {name!r}: it claims "
                                                  f"{n} bytes, the file has {len(data) - pos - 12} after its header")
            return
        yield pos, data[pos + 12:pos + 12 + n], None
        pos = end


def _checked(pending: list, data: bytes, name: str) -> Iterator[bytes]:
    crcs = crc32c.values([record for _, record in pending])
    for (offset, record), crc in zip(pending, crcs):
        stored = data[offset + 12 + len(record):offset + 16 + len(record)]
        if stored != struct.pack("<I", crc32c.mask(crc)):
            raise errors.DataLossError(None, None, f"corrupted record at {offset} in {name!r}: the data's "
                                       "checksum does not match")
        yield record


def tf_record_iterator(path, options=None) -> Iterator[bytes]:
    """tf.io.tf_record_iterator (TF1: tf.python_io.tf_record_iterator): the records of `path` as bytes."""
    return read_records(path, compression_type_string(options))
