"""TensorFlow's V2 checkpoint format, the "tensor bundle": `<prefix>.index` and `<prefix>.data-NNNNN-of-MMMMM`.

    >>> write_bundle("/tmp/run/model.ckpt", {"w": np.ones((2, 3), np.float32)})  # doctest: +SKIP
    >>> BundleReader("/tmp/run/model.ckpt").read("w").shape  # doctest: +SKIP
    (2, 3)

What TensorFlow's BundleWriter writes (tensorflow/core/util/tensor_bundle), and so what this writes:
- The data files: the tensors' bytes one after another, little-endian, row-major. A string tensor is the
  varint64 length of each element, the masked CRC32C of those lengths (each as a uint32), then the bytes.
- The index: a LevelDB-format table with keys sorted bytewise: "" -> BundleHeaderProto, then each tensor's
  name -> BundleEntryProto (dtype, shape, shard, offset, size, masked CRC32C of the bytes), protos in
  tfplus/proto/tensor_bundle.proto. The table is data blocks, each [entries | restart offsets, u32 each |
  restart count, u32] and a 5-byte trailer (compression type, masked CRC32C of block + type byte), where an
  entry is three varints (key bytes shared with the previous key, unshared key bytes, value bytes), the
  unshared key bytes and the value; then a metaindex block (empty), an index block (per data block: a key
  >= its last key -> the block's varint offset and size) and a 48-byte footer (the metaindex and index
  handles, zeros up to 40 bytes, the 8-byte magic number).

Reading trusts nothing in the files: each is opened only as a regular file of bounded size (never a FIFO, a
device or a folder; an index of at most MAX_INDEX_BYTES), every offset, size and shape is checked against the
files' real sizes before anything is read or allocated, the index's keys may not decode to much more than the
file holds, every block's and tensor's checksum is verified, and a bad file gives a DataLossError naming the file
and the entry. Nothing is executed. A reader opens the index and every data file at once, so a checkpoint deleted
by another process's Saver (max_to_keep) while it is being read stays readable. Writing goes through temporary
files, fsynced and renamed into place, the data file first and the index last, so a new index on disk always
describes complete data (replacing a bundle that exists is not atomic: replace_bundle and tfplus.train.saver take
care of that).
"""
from __future__ import annotations

import contextlib
import os
import re
import struct
import threading
import uuid
import warnings

import numpy as np
from google.protobuf import message as _message

from tfplus import crc32c
from tfplus import dtypes as _dt
from tfplus.errors import DataLossError, InvalidArgumentError, NotFoundError
from tfplus.gfile import atomic_open, folder_lock, fsync_folder, link_or_copy, open_regular, read_regular
from tfplus.proto import graph_pb2, tensor_bundle_pb2, types_pb2
from tfplus.tensor_util import shape_to_proto

__all__ = ["BundleReader", "write_bundle", "replace_bundle", "whole_bundle", "merge_bundles", "is_bundle", "index_path",
           "data_path"]

_MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic number, the footer's last 8 bytes
_FOOTER = 48
_HANDLES = 40  # two block handles (varint offset + size, at most 10 bytes each) and zero padding
_TRAILER = 5  # compression type byte + masked CRC32C
_BLOCK_SIZE = 256 << 10  # TensorFlow's table block size: a block is closed once it reaches this
_RESTART_INTERVAL = 16  # entries between two full (unshared) keys in a data block
_FORMAT_VERSION = 1  # TensorFlow's kTensorBundleVersion
_DT_STRING = types_pb2.DT_STRING
# The largest index read. An entry takes tens of bytes: a checkpoint of a million tensors has an index of a few
# tens of MB; a larger (e.g. sparse) file is refused before it is read.
MAX_INDEX_BYTES = 256 << 20
# The keys of an index share prefixes with the keys before them, so a small file could describe huge keys: their
# decoded bytes may be at most this multiple of the file's size (real ones, restarted every 16 keys, stay < 16).
_KEY_EXPANSION = 32


def index_path(prefix: str) -> str:
    return prefix + ".index"


def data_path(prefix: str, shard: int = 0, num_shards: int = 1) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def is_bundle(prefix: str) -> bool:
    """Whether `prefix` names a TensorFlow-format checkpoint: its index exists (whatever it is: the reader says
    what is wrong with one that is not a regular file)."""
    return os.path.lexists(index_path(prefix))


# -- varints -------------------------------------------------------------------------------------------------
def _put_varint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _get_varint(buf: bytes, pos: int, end: int, what) -> tuple[int, int]:
    """(value, position after it); a varint longer than 10 bytes or running past `end` is corruption."""
    value = shift = 0
    while pos < end and shift < 70:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise what(f"a varint runs past its block at byte {pos}")


# -- writing -------------------------------------------------------------------------------------------------
def _tensor_bytes(value) -> tuple[int, tuple[int, ...], list]:
    """(DataType enum, shape, [bytes-like pieces]) of one tensor as TensorFlow lays it out."""
    if isinstance(value, (bytes, str)) or (isinstance(value, np.ndarray) and value.dtype.kind in "OSU"):
        arr = np.asarray(value, dtype=object)
        if not all(isinstance(e, (bytes, str)) for e in arr.reshape(-1)):
            raise TypeError("write_bundle: an object array must hold bytes or str (a string tensor)")
        elems = [e.encode() if isinstance(e, str) else e for e in arr.reshape(-1)]
        lengths, crc = bytearray(), 0
        for e in elems:
            _put_varint(lengths, len(e))
            crc = crc32c.extend(crc, struct.pack("<I" if len(e) <= 0xFFFFFFFF else "<Q", len(e)))
        return _DT_STRING, arr.shape, [bytes(lengths), struct.pack("<I", crc32c.mask(crc)), *elems]
    arr = np.asarray(value)
    dtype = _dt.as_dtype(arr.dtype)
    flat = np.ascontiguousarray(arr.reshape(-1), dtype=arr.dtype.newbyteorder("<"))
    return dtype.as_datatype_enum, arr.shape, [flat.view(np.uint8)]


def _string_crc(pieces: list) -> int:
    """A string tensor's entry CRC: of the lengths as uint32s, the lengths' checksum, then the bytes (what
    TensorFlow computes while writing)."""
    lengths, rest = pieces[0], pieces[1:]
    crc, pos = 0, 0
    while pos < len(lengths):
        n, pos = _get_varint(lengths, pos, len(lengths), ValueError)
        crc = crc32c.extend(crc, struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n))
    for p in rest:
        crc = crc32c.extend(crc, p)
    return crc


class _BlockBuilder:
    def __init__(self, restart_interval: int):
        self.interval = restart_interval
        self.buf, self.restarts, self.count, self.last = bytearray(), [0], 0, b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count % self.interval:  # the common prefix's length, by halving: slices compare in C
            high = min(len(key), len(self.last))
            while shared < high:
                mid = (shared + high + 1) // 2
                if key[:mid] == self.last[:mid]:
                    shared = mid
                else:
                    high = mid - 1
        elif self.count:
            self.restarts.append(len(self.buf))
        for v in (shared, len(key) - shared, len(value)):
            _put_varint(self.buf, v)
        self.buf += key[shared:]
        self.buf += value
        self.last, self.count = key, self.count + 1

    def size(self) -> int:
        return len(self.buf) + 4 * (len(self.restarts) + 1)

    def finish(self) -> bytes:
        return bytes(self.buf) + struct.pack(f"<{len(self.restarts) + 1}I", *self.restarts, len(self.restarts))


def _table_bytes(items: list[tuple[bytes, bytes]]) -> bytes:
    """A LevelDB table of sorted (key, value) pairs, uncompressed, as TensorFlow's TableBuilder makes it."""
    out = bytearray()

    def emit(contents: bytes) -> bytes:
        handle = bytearray()
        _put_varint(handle, len(out))
        _put_varint(handle, len(contents))
        out.extend(contents)
        out.extend(struct.pack("<BI", 0, crc32c.mask(crc32c.value(contents + b"\0"))))
        return bytes(handle)

    index, block = _BlockBuilder(1), _BlockBuilder(_RESTART_INTERVAL)
    for key, value in items:
        block.add(key, value)
        if block.size() >= _BLOCK_SIZE:
            index.add(block.last, emit(block.finish()))
            block = _BlockBuilder(_RESTART_INTERVAL)
    if block.count:
        index.add(block.last, emit(block.finish()))
    footer = bytearray(emit(_BlockBuilder(1).finish()))  # the metaindex: no meta blocks
    footer += emit(index.finish())
    footer += bytes(_HANDLES - len(footer)) + struct.pack("<Q", _MAGIC)
    return bytes(out + footer)


def write_bundle(prefix: str, tensors: dict) -> None:
    """Writes {name: array} as a one-shard TensorFlow checkpoint `prefix`.index/.data-00000-of-00001,
    atomically file by file (the data first, the index last). Arrays of bytes or str are string tensors."""
    entries = {}
    existed = os.path.lexists(data_path(prefix))
    with atomic_open(data_path(prefix)) as f:
        offset = 0
        for name in sorted(tensors, key=lambda k: k.encode()):
            if not name:
                raise ValueError("write_bundle: a tensor's name must not be empty (the header's key)")
            enum, shape, pieces = _tensor_bytes(tensors[name])
            size = 0
            for p in pieces:
                f.write(p)
                size += len(p) if isinstance(p, bytes) else p.nbytes
            crc = _string_crc(pieces) if enum == _DT_STRING else crc32c.value(pieces[0])
            entries[name] = tensor_bundle_pb2.BundleEntryProto(
                dtype=enum, shape=shape_to_proto(shape), shard_id=0, offset=offset, size=size,
                crc32c=crc32c.mask(crc))
            offset += size
    try:
        _write_index(prefix, entries, 1)
    except BaseException:  # e.g. a full disk: no data file of this write is left without its index
        if not existed:  # NOTE: one that was there before stays: its old index without it would hold no data
            with contextlib.suppress(OSError):
                os.remove(data_path(prefix))
        raise


def _write_index(prefix: str, entries: dict, num_shards: int) -> None:
    header = tensor_bundle_pb2.BundleHeaderProto(num_shards=num_shards,
                                                 version=graph_pb2.VersionDef(producer=_FORMAT_VERSION))
    items = [(b"", header.SerializeToString(deterministic=True))]
    items += sorted((k.encode("utf-8", "surrogateescape"), e.SerializeToString(deterministic=True))
                    for k, e in entries.items())
    with atomic_open(index_path(prefix)) as f:
        f.write(_table_bytes(items))


def replace_bundle(prefix: str, tensors: dict) -> None:
    """write_bundle at a prefix that may hold a bundle already (weights saved again at one path: Keras's
    save_weights, ModelCheckpoint). Its two files cannot be replaced at once, so: the new bundle is written whole
    under a temporary prefix (a failure there changes nothing), the old one is linked under
    `<prefix>.previous-<tag>`, the new files are renamed over the old ones, and the backup is deleted. A process
    killed between the two renames leaves `prefix` torn and the backup whole: whole_bundle(prefix) finds it.
    (tf.train.Saver does the same through its state file.)"""
    folder = os.path.dirname(os.path.abspath(prefix))
    tag = uuid.uuid4().hex[:12]
    new = f"{prefix}.new-{tag}"
    # Two writers of one prefix (processes, threads) take turns: interleaved renames tore it, and what one left
    # beside it when killed is deleted here only while no other writes.
    with folder_lock(folder):
        write_bundle(new, tensors)
        try:
            # A prefix torn by an earlier killed replace is not backed up: the backup it left is the whole one.
            if os.path.isfile(index_path(prefix)) and whole_bundle(prefix) == prefix:
                base = os.path.basename(prefix)
                for name in _files(prefix):  # the data first: an index is never left without its data
                    backup = f"{base}.previous-{tag}{name[len(base):]}"
                    link_or_copy(os.path.join(folder, name), os.path.join(folder, backup))
                fsync_folder(folder)
            os.replace(data_path(new), data_path(prefix))
            os.replace(index_path(new), index_path(prefix))
            fsync_folder(folder)
        except BaseException:
            for path in (index_path(new), data_path(new)):
                with contextlib.suppress(OSError):
                    os.remove(path)
            raise
        for old in _leftovers(prefix):  # this backup, and what an earlier killed replace left
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, old))


def whole_bundle(prefix: str) -> str:
    """`prefix`, or, where replace_bundle was killed between its two renames (so `prefix` does not verify), the
    newest backup it left that does (a warning names both). Without such a backup `prefix` itself, whatever it
    holds: its reader reports the damage."""
    folder = os.path.dirname(os.path.abspath(prefix))
    backups = sorted((os.path.join(folder, n[:-len(".index")]) for n in _leftovers(prefix)
                      if n.endswith(".index") and ".previous-" in n), key=lambda p: -os.path.getmtime(index_path(p)))
    if not backups or _verifies(prefix):
        return prefix
    for backup in backups:
        if _verifies(backup):
            warnings.warn(f"checkpoint {prefix!r} is torn (a save killed between renaming its two files); read "
                          f"the one it replaced, {backup!r}, instead", stacklevel=3)
            return backup
    return prefix


def _verifies(prefix: str) -> bool:
    try:
        with BundleReader(prefix) as reader:
            reader.verify()
        return True
    except (DataLossError, NotFoundError, OSError):
        return False


def _files(prefix: str) -> list[str]:
    """The names of the bundle `prefix`'s files in its folder, its data files first."""
    folder, base = os.path.split(os.path.abspath(prefix))
    data = re.compile(re.escape(base) + r"\.data-\d{5}-of-\d{5}")
    return sorted(n for n in os.listdir(folder) if data.fullmatch(n)) + [base + ".index"]


def _leftovers(prefix: str) -> list[str]:
    """The names of the files that replace_bundle made beside `prefix` and a kill left there (new bundles, the
    temporary files atomic_open was writing them through, backups), indexes last."""
    folder, base = os.path.split(os.path.abspath(prefix))
    if not os.path.isdir(folder):
        return []
    files = r"\.(?:index|data-\d{5}-of-\d{5})"
    left = re.compile(rf"{re.escape(base)}\.(?:new|previous)-[0-9a-f]{{12}}{files}|"
                      rf"\.{re.escape(base)}\.new-[0-9a-f]{{12}}{files}\.[0-9a-f]{{12}}\.tmp")
    return sorted((n for n in os.listdir(folder) if left.fullmatch(n)), key=lambda n: (n.endswith(".index"), n))


def merge_bundles(prefixes: list[str], destination: str, delete_old: bool = True) -> None:
    """MergeV2Checkpoints: one checkpoint `destination` made of the shards `prefixes` (one-shard bundles with
    distinct keys, e.g. each device's part); their data files become its shards. With `delete_old` the
    sources' index files and (emptied) folders are removed."""
    entries: dict[str, tensor_bundle_pb2.BundleEntryProto] = {}
    readers = [BundleReader(p) for p in prefixes]
    for shard, reader in enumerate(readers):
        if reader.num_shards != 1:
            raise InvalidArgumentError(None, "MergeV2Checkpoints", f"{reader.index!r} has {reader.num_shards} "
                                       "shards; only one-shard checkpoints can be merged")
        for key, entry in reader.entries.items():
            if key in entries:
                raise InvalidArgumentError(None, "MergeV2Checkpoints", f"key {key!r} is in two of the "
                                           f"checkpoints being merged (the second: {reader.index!r})")
            entries[key] = tensor_bundle_pb2.BundleEntryProto()
            entries[key].CopyFrom(entry)
            entries[key].shard_id = shard
    for shard, p in enumerate(prefixes):
        os.replace(data_path(p), data_path(destination, shard, len(prefixes)))
    _write_index(destination, entries, len(prefixes))
    if delete_old:
        for p in prefixes:
            os.remove(index_path(p))
            folder = os.path.dirname(os.path.abspath(p))
            if folder != os.path.dirname(os.path.abspath(destination)) and not os.listdir(folder):
                os.rmdir(folder)


# -- reading -------------------------------------------------------------------------------------------------
class BundleReader:
    """A TensorFlow checkpoint opened for reading: the index is read and verified here; `read(key)` reads
    and verifies one tensor.

    `keys()` lists the tensors (not the slices of partitioned ones); `shape(key)` and `dtype(key)` describe one
    without reading it; `verify()` checks every tensor's checksum. The data files are opened here too (those that
    exist: an index alone can still be listed) and stay open until `close()`."""

    def __init__(self, prefix: str):
        self.prefix, self.index = prefix, index_path(prefix)
        try:
            data = read_regular(self.index, "checkpoint index", MAX_INDEX_BYTES)
        except NotFoundError:
            raise NotFoundError(None, None, f"checkpoint {prefix!r} does not exist (no file {self.index!r})") \
                from None
        table = _read_table(data, self._error)
        if not table or table[0][0] != b"":
            self._fail("its table has no header (the entry under the empty key)")
        header = self._parse(tensor_bundle_pb2.BundleHeaderProto, table[0][1], "the header")
        if header.endianness != tensor_bundle_pb2.BundleHeaderProto.LITTLE:
            self._fail("it was written big-endian; tfplus reads little-endian checkpoints only")
        if header.version.min_consumer > _FORMAT_VERSION or _FORMAT_VERSION in header.version.bad_consumers:
            self._fail(f"its format version (producer {header.version.producer}, min_consumer "
                       f"{header.version.min_consumer}) is newer than this reader's ({_FORMAT_VERSION})")
        if not 1 <= header.num_shards <= len(table):  # each data file holds an entry's bytes
            self._fail(f"its header says {header.num_shards} data files for {len(table) - 1} entries")
        self.num_shards = header.num_shards
        self.entries: dict[str, tensor_bundle_pb2.BundleEntryProto] = {}
        for key, value in table[1:]:
            # A partitioned variable's slices have binary keys: kept byte for byte (for merging).
            name = key.decode("utf-8", "surrogateescape")
            self.entries[name] = self._parse(tensor_bundle_pb2.BundleEntryProto, value, f"entry {name!r}")
        self._keys = [k for k in self.entries if not k.startswith("\0")]
        self._files: list = []
        self._checked: dict[str, bytearray] = {}
        self._lock = threading.Lock()
        try:
            for shard in range(self.num_shards):
                try:  # the entries bound the reads: a data file may have any size
                    self._files.append(open_regular(data_path(prefix, shard, self.num_shards),
                                                    "checkpoint data file", 1 << 62))
                except NotFoundError:
                    self._files.append(None)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._checked.clear()
        for f in self._files:
            if f is not None:
                f.close()

    def __enter__(self) -> BundleReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def keys(self) -> list[str]:
        # Slices of a partitioned variable live under keys starting with a NUL byte (TensorFlow's encoding).
        return list(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self.entries and not key.startswith("\0")

    def shape(self, key: str) -> tuple[int, ...]:
        entry = self._entry(key)
        if entry.shape.unknown_rank or any(d.size < 0 for d in entry.shape.dim):
            self._fail(f"entry {key!r} has an unknown shape")
        return tuple(int(d.size) for d in entry.shape.dim)

    def dtype(self, key: str):
        """A tfplus DType (tf.string for strings: object arrays of bytes); for a dtype tfplus lacks, TensorFlow's
        name of it in lower case ("bfloat16", ...), which read() refuses."""
        enum = self._entry(key).dtype
        try:
            return _dt.as_dtype(int(enum))
        except TypeError:
            name = types_pb2.DataType.Name(enum) if enum in types_pb2.DataType.values() else f"DT_{enum}"
            return name[3:].lower()

    def read(self, key: str) -> np.ndarray:
        """The tensor `key` (a new array; strings as an object array of bytes), checksum verified."""
        entry, shape, dtype = self._entry(key), self.shape(key), self.dtype(key)
        if isinstance(dtype, str):
            raise InvalidArgumentError(None, None, f"checkpoint {self.prefix!r}: tensor {key!r} is {dtype}, which "
                                       f"tfplus does not support (it has {', '.join(d.name for d in _dt.ALL)})")
        if entry.slices:
            raise InvalidArgumentError(None, None, f"checkpoint {self.prefix!r}: {key!r} is saved in "
                                       f"{len(entry.slices)} slices (a partitioned variable); tfplus does not "
                                       "support partitioned variables: save it unpartitioned in TensorFlow")
        count = int(np.prod(shape, dtype=object))
        if dtype is _dt.string:
            if count > entry.size:  # every element takes at least a one-byte length
                self._fail(f"entry {key!r}: {count} strings cannot fit in {entry.size} bytes")
        elif entry.size != count * dtype.size:
            self._fail(f"entry {key!r} says {entry.size} bytes but a {dtype.name} tensor of shape "
                       f"{list(shape)} has {count * dtype.size}")
        buf = self._checked.pop(key, None)  # verify()'s bytes, checked already
        crc = None if buf is not None else entry.crc32c
        if buf is None:
            buf, path = self._bytes(key, entry)
        if dtype is _dt.string:
            return self._strings(key, buf, count, shape, crc)
        if crc is not None and crc32c.mask(crc32c.value(buf)) != crc:
            self._fail(f"tensor {key!r} does not match its checksum (the data file {path!r} is corrupted)")
        return np.frombuffer(buf, dtype.np.newbyteorder("<")).astype(dtype.np, copy=False).reshape(shape)

    def verify(self) -> None:
        """Checks every stored tensor's checksum (whatever its dtype) without decoding it: DataLossError if one
        is missing, truncated or corrupted. The bytes checked are kept for read() (a restore reads them all next)
        until then or close()."""
        for key, entry in self.entries.items():
            if entry.slices:  # a partitioned variable's entry: its slices hold the bytes
                continue
            buf, path = self._bytes(key, entry)
            if entry.dtype == _DT_STRING:
                dims = [d.size for d in entry.shape.dim]
                count = int(np.prod(dims, dtype=object))
                if entry.shape.unknown_rank or min(dims, default=0) < 0 or count > entry.size:
                    self._fail(f"entry {key!r} has a shape {dims} that its {entry.size} bytes cannot hold")
                self._strings(key, buf, count, dims, entry.crc32c)
            elif crc32c.mask(crc32c.value(buf)) != entry.crc32c:
                self._fail(f"tensor {key!r} does not match its checksum (the data file {path!r} is corrupted)")
            self._checked[key] = buf

    def _bytes(self, key: str, entry) -> tuple[bytearray, str]:
        """The stored bytes of `entry` (not yet checked) and the data file's path."""
        if not 0 <= entry.shard_id < self.num_shards:
            self._fail(f"entry {key!r} names data file {entry.shard_id} of {self.num_shards}")
        path, f = data_path(self.prefix, entry.shard_id, self.num_shards), self._files[entry.shard_id]
        if f is None:
            raise DataLossError(None, None, f"checkpoint {self.prefix!r}: its data file {path!r} is missing")
        file_size = os.fstat(f.fileno()).st_size
        if entry.offset < 0 or entry.offset + entry.size > file_size:
            self._fail(f"entry {key!r} spans bytes [{entry.offset}, {entry.offset + entry.size}) of {path!r}, "
                       f"which has {file_size} (truncated?)")
        buf = bytearray(entry.size)
        with self._lock:  # threads reading this checkpoint share its files' positions
            f.seek(entry.offset)
            if f.readinto(buf) != entry.size:
                self._fail(f"{path!r} ended while reading {key!r}")
        return buf, path

    def _strings(self, key, buf: bytearray, count: int, shape, masked_crc: int | None) -> np.ndarray:
        """A string tensor's elements from its stored bytes (their checksum: masked_crc; None: checked)."""
        lengths, pos = [], 0
        for _ in range(count):
            n, pos = _get_varint(buf, pos, len(buf), lambda m: self._error(f"tensor {key!r}: {m}"))
            lengths.append(n)
        if pos + 4 + sum(lengths) != len(buf):
            self._fail(f"tensor {key!r}: its string lengths do not add up to its size")
        elems, start = np.empty(count, dtype=object), pos + 4
        for i, n in enumerate(lengths):
            elems[i], start = bytes(buf[start:start + n]), start + n
        if masked_crc is not None and crc32c.mask(_string_crc([bytes(buf[:pos]), bytes(buf[pos:])])) != masked_crc:
            self._fail(f"tensor {key!r} does not match its checksum (the data file is corrupted)")
        return elems.reshape(shape)

    def _entry(self, key: str) -> tensor_bundle_pb2.BundleEntryProto:
        if key not in self:
            raise NotFoundError(None, None, f"key {key!r} not found in checkpoint {self.prefix!r}")
        return self.entries[key]

    def _parse(self, cls, data: bytes, what: str):
        msg = cls()
        try:
            msg.ParseFromString(data)
        except _message.DecodeError as e:
            self._fail(f"{what} does not parse as a {cls.__name__}: {e}")
        return msg

    def _error(self, message: str) -> DataLossError:
        return DataLossError(None, None, f"checkpoint {self.prefix!r} is corrupted: {message}")

    def _fail(self, message: str):
        raise self._error(message)


def _read_table(data: bytes, error) -> list[tuple[bytes, bytes]]:
    """The (key, value) pairs of a LevelDB table file's bytes, every block checksum verified."""
    if len(data) < _FOOTER:
        raise error(f"the index file has {len(data)} bytes, fewer than a table's {_FOOTER}-byte footer")
    footer = data[-_FOOTER:]
    if struct.unpack("<Q", footer[_HANDLES:])[0] != _MAGIC:
        raise error("the index file does not end with the table magic number (not a TensorFlow checkpoint "
                    "index, or truncated)")
    metaindex, pos = _handle(footer, 0, _HANDLES, error)
    _block(data, *metaindex, error)  # it lists no meta blocks, but damage to it is damage all the same
    index = _block(data, *_handle(footer, pos, _HANDLES, error)[0], error)
    out: list[tuple[bytes, bytes]] = []
    key_bytes, most = 0, _KEY_EXPANSION * len(data)
    for _, handle in _entries(index, error):
        (offset, size), _ = _handle(handle, 0, len(handle), error)
        for key, value in _entries(_block(data, offset, size, error), error):
            if out and key <= out[-1][0]:
                raise error(f"its keys are out of order ({out[-1][0]!r} then {key!r})")
            key_bytes += len(key)
            if key_bytes > most:  # checked as they grow: a crafted file must not expand to gigabytes
                raise error(f"its keys decode to more than {most} bytes, {_KEY_EXPANSION} times the index file's "
                            f"{len(data)} (crafted prefix sharing)")
            out.append((key, value))
    return out


def _handle(buf: bytes, pos: int, end: int, error) -> tuple[tuple[int, int], int]:
    offset, pos = _get_varint(buf, pos, end, error)
    size, pos = _get_varint(buf, pos, end, error)
    return (offset, size), pos


def _block(data: bytes, offset: int, size: int, error) -> bytes:
    """One block's contents, checked: inside the file (before the footer), checksum, not compressed."""
    if offset + size + _TRAILER > len(data) - _FOOTER:
        raise error(f"a block at bytes [{offset}, {offset + size}) lies outside the index file "
                    f"({len(data)} bytes; truncated?)")
    contents, kind = data[offset:offset + size], data[offset + size]
    (masked,) = struct.unpack_from("<I", data, offset + size + 1)
    if crc32c.mask(crc32c.value(data[offset:offset + size + 1])) != masked:
        raise error(f"the index block at byte {offset} does not match its checksum")
    if kind != 0:
        raise error(f"the index block at byte {offset} is compressed (type {kind}); TensorFlow writes them "
                    "uncompressed and tfplus reads only those")
    return contents


def _entries(block: bytes, error):
    """Yields a block's (key, value) pairs in order."""
    if len(block) < 4:
        raise error("a block is too short for its restart count")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 * (restarts + 1)
    if end < 0:
        raise error(f"a block of {len(block)} bytes claims {restarts} restart points")
    pos, key = 0, b""
    while pos < end:
        shared, pos = _get_varint(block, pos, end, error)
        unshared, pos = _get_varint(block, pos, end, error)
        size, pos = _get_varint(block, pos, end, error)
        if shared > len(key) or pos + unshared + size > end:
            raise error(f"a block entry at byte {pos} overruns its block")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + size]
        pos += size
