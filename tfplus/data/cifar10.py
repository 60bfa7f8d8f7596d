"""CIFAR-10 input pipeline: find, download, read, augment and batch the data.

Reads the official binary (`cifar-10-batches-bin/`) and python (`cifar-10-batches-py/`) releases of
https://www.cs.toronto.edu/~kriz/cifar.html. Images stay uint8 (N, 3, 32, 32), the files' own layout, and
become float32 one batch at a time in a background thread, so the whole training set costs 150 MB.

    ds = load()                               # --data DIR, $TFPLUS_DATA or ~/.cache/tfplus
    with train_batches(ds, 128, seed=0) as batches:
        for step, (x, y) in zip(range(1000), batches):
            ...                               # x: float32 (128, 3, 32, 32), y: int32 (128,)
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import queue
import shutil
import sys
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, NamedTuple, Union

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

PathArg = Union[str, os.PathLike]

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
BIN_DIR, PY_DIR = "cifar-10-batches-bin", "cifar-10-batches-py"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
RECORDS_PER_FILE = 10000
IMAGE_SHAPE = (3, 32, 32)
DATA_FORMATS = ("NCHW", "NHWC")

# Per-channel mean and std of the 50,000 training images with pixels scaled to [0, 1]: the well-known
# constants, which match a fresh computation over the official training set to 4 digits.
MEAN = np.array((0.4914, 0.4822, 0.4465), np.float32)
STD = np.array((0.2470, 0.2435, 0.2616), np.float32)

_PIXELS = 3 * 32 * 32
_RECORD_BYTES = 1 + _PIXELS  # one label byte, then the red, green and blue 32x32 planes
_TRAIN_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5")
_TEST_FILE = "test_batch"
_TIMEOUT_S = 60


class DataError(Exception):
    """Missing, corrupt or unsafe input data; the message names the file and the fix."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """CIFAR-10 in memory: images uint8 (N, 3, 32, 32) in RGB planes, labels int32 in 0..9."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    classes: tuple[str, ...] = CLASSES

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"{split}_images"), getattr(self, f"{split}_labels")
            if x.dtype != np.uint8 or x.shape[1:] != IMAGE_SHAPE or y.shape != (len(x),):
                raise ValueError(f"Dataset: {split}_images must be uint8 (N, 3, 32, 32) and {split}_labels "
                                 f"(N,); got {x.dtype} {x.shape} and {y.shape}")


# ---------------------------------------------------------------------------------------------------------
# Where the data lives


def cache_dir() -> Path:
    """The per-user default data directory: $XDG_CACHE_HOME/tfplus, else ~/.cache/tfplus."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says to ignore a relative value.
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "tfplus"


def data_root(data_dir: PathArg | None = None) -> Path:
    """The directory to search and download into: data_dir if given, else $TFPLUS_DATA, else cache_dir().

    Only the first of these that is set is used, so an explicit --data never silently falls back.
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get("TFPLUS_DATA")
    return Path(env).expanduser() if env else cache_dir()


def find_data_dir(data_dir: PathArg | None = None) -> Path | None:
    """The batches folder under data_root(data_dir), or None if there is none.

    The root may itself be a batches folder or contain cifar-10-batches-bin/ or cifar-10-batches-py/.

        find_data_dir("/data")   # Path('/data/cifar-10-batches-bin') if that holds data_batch_1.bin
    """
    return _batches_in(data_root(data_dir))


def _batches_in(root: Path) -> Path | None:
    for candidate in (root, root / BIN_DIR, root / PY_DIR):
        try:
            if (candidate / "data_batch_1.bin").is_file() or (candidate / "data_batch_1").is_file():
                return candidate
        except OSError as error:  # e.g. a folder without search permission
            raise DataError(f"cannot look into {candidate}: {error.strerror}; check its permissions") from None
    return None


def load(data_dir: PathArg | None = None, download: bool = False,
         records_per_file: int = RECORDS_PER_FILE) -> Dataset:
    """Find (or, with download=True, fetch) CIFAR-10 and read it; see find_data_dir for where it looks.

        ds = load("/data")   # ds.train_images: uint8 (50000, 3, 32, 32)
    """
    batches = find_data_dir(data_dir)
    if batches is None:
        root = data_root(data_dir)
        if not download:
            raise DataError(
                f"CIFAR-10 not found in {root} (looked for data_batch_1.bin there and in {BIN_DIR}/, and for "
                f"data_batch_1 in {PY_DIR}/).\nPoint tfplus at the data with --data DIR or TFPLUS_DATA=DIR, or "
                f"download it (about 170 MB) into {root} with --download (in Python: tfplus.data.download()).")
        batches = _download(root, URL, MD5, progress=True)
    return read_batches(batches, records_per_file)


# ---------------------------------------------------------------------------------------------------------
# Reading the official formats


def read_batches(batches_dir: PathArg, records_per_file: int = RECORDS_PER_FILE) -> Dataset:
    """Read data_batch_1..5 and test_batch, in the binary (.bin) or the python (pickled) format.

    Every file must hold exactly records_per_file records (10000 in the official release).

        ds = read_batches("/data/cifar-10-batches-bin")
    """
    folder = Path(batches_dir)
    binary = (folder / "data_batch_1.bin").is_file()
    suffix, read = (".bin", _read_binary) if binary else ("", _read_python)
    parts = []
    for name in (*_TRAIN_FILES, _TEST_FILE):
        path = folder / (name + suffix)
        if not path.is_file():
            raise DataError(f"{path} is missing; a CIFAR-10 folder holds data_batch_1{suffix} .. "
                            f"data_batch_5{suffix} and test_batch{suffix}. Download the data again.")
        parts.append(read(path, records_per_file))
    return Dataset(np.concatenate([x for x, _ in parts[:-1]]), np.concatenate([y for _, y in parts[:-1]]),
                   *parts[-1])


def binary_files(batches_dir: PathArg) -> list[tuple[Path, int]]:
    """(path, records) of the binary release's files: data_batch_1..5, then test_batch."""
    folder = Path(batches_dir)
    files = []
    for name in (*_TRAIN_FILES, _TEST_FILE):
        path = folder / f"{name}.bin"
        if not path.is_file():
            raise DataError(f"{path} is missing; sharded reading needs the binary release (cifar-10-batches-bin/, "
                            "data_batch_1.bin .. data_batch_5.bin and test_batch.bin). Download the data again.")
        size = path.stat().st_size
        if size == 0 or size % _RECORD_BYTES:
            raise DataError(f"{path}: {size} bytes is not a whole number of {_RECORD_BYTES}-byte records; the file "
                            "is truncated or not a CIFAR-10 binary batch. Delete it and download the data again.")
        files.append((path, size // _RECORD_BYTES))
    return files


def read_labels(batches_dir: PathArg) -> tuple[np.ndarray, np.ndarray]:
    """(training labels, test labels) of a binary release, without keeping its images (a partition of the
    training set needs only these).

        train_labels, test_labels = read_labels("/data/cifar-10-batches-bin")
    """
    labels = [_labels_of(path, records) for path, records in binary_files(batches_dir)]
    return np.concatenate(labels[:-1]), labels[-1]


def _labels_of(path: Path, records: int, chunk: int = 1024) -> np.ndarray:
    """The label bytes of a binary batch, read a chunk of records at a time."""
    out = np.empty(records, np.uint8)
    with _open(path) as f:
        for start in range(0, records, chunk):
            n = min(chunk, records - start)
            block = np.frombuffer(f.read(n * _RECORD_BYTES), np.uint8)
            if block.size != n * _RECORD_BYTES:
                raise DataError(f"{path}: the file changed while being read")
            out[start:start + n] = block.reshape(n, _RECORD_BYTES)[:, 0]
    return _checked_labels(path, out)


def _records_at(path: Path, index: np.ndarray) -> np.ndarray:
    """The records at `index` of a binary batch, each read on its own. NOTE: not through a memory map, whose
    page faults map 64 KB around each record (fault-around): a tenth of the records mapped the whole file."""
    rows = np.empty((len(index), _RECORD_BYTES), np.uint8)
    with _open(path) as f:
        for i, record in enumerate(index):
            data = os.pread(f.fileno(), _RECORD_BYTES, int(record) * _RECORD_BYTES)
            if len(data) != _RECORD_BYTES:
                raise DataError(f"{path}: record {record} is cut short; the file changed while being read")
            rows[i] = np.frombuffer(data, np.uint8)
    return rows


def read_shard(batches_dir: PathArg, train_index: np.ndarray, test_index: np.ndarray | None = None) -> Dataset:
    """The training examples at `train_index` (positions in data_batch_1..5 read as one set, as read_batches
    orders them) and the test examples at `test_index` (default: none), reading only those records from disk:
    a federated client holds its shard, not CIFAR-10.

        shard = read_shard("/data/cifar-10-batches-bin", np.arange(0, 50000, 10))
    """
    *train, (test_path, test_records) = binary_files(batches_dir)
    starts = np.cumsum([0] + [records for _, records in train])
    index = np.asarray(train_index, np.int64)
    tests = np.asarray(test_index if test_index is not None else [], np.int64)
    for what, idx, n in (("training", index, starts[-1]), ("test", tests, test_records)):
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"read_shard: a {what} index is outside 0..{n - 1}")
    file_of = np.searchsorted(starts, index, side="right") - 1
    rows = np.empty((len(index), _RECORD_BYTES), np.uint8)
    for f, (path, _) in enumerate(train):
        here = file_of == f
        rows[here] = _records_at(path, index[here] - starts[f])
    test_rows = _records_at(test_path, tests)
    return Dataset(rows[:, 1:].reshape(len(rows), *IMAGE_SHAPE), _checked_labels(Path(batches_dir), rows[:, 0]),
                   test_rows[:, 1:].reshape(len(test_rows), *IMAGE_SHAPE), _checked_labels(test_path, test_rows[:, 0]))


def _open(path: Path) -> io.BufferedReader:
    """`path` opened for reading; a file that cannot be opened is a DataError that says why."""
    try:
        return open(path, "rb")
    except OSError as error:
        raise DataError(_cannot_read(path, error)) from None


def _cannot_read(path: Path, error: OSError) -> str:
    fix = "check its permissions (e.g. chmod u+r)" if isinstance(error, PermissionError) else \
        "check the file, or download the data again"
    return f"cannot read {path}: {error.strerror or error}; {fix}"


def _read_binary(path: Path, records: int) -> tuple[np.ndarray, np.ndarray]:
    expected = records * _RECORD_BYTES
    with _open(path) as f:
        found = os.fstat(f.fileno()).st_size
        if found != expected:
            raise DataError(f"{path}: expected {expected} bytes ({records} records of {_RECORD_BYTES} bytes), "
                            f"found {found}; the file is truncated or not a CIFAR-10 binary batch. "
                            "Delete it and download the data again.")
        try:
            raw = np.frombuffer(f.read(expected), np.uint8)
        except OSError as error:
            raise DataError(_cannot_read(path, error)) from None
    if raw.size != expected:  # the file shrank while being read
        raise DataError(f"{path}: read {raw.size} of {expected} bytes; the file changed while being read")
    raw = raw.reshape(records, _RECORD_BYTES)
    return raw[:, 1:].reshape(records, *IMAGE_SHAPE), _checked_labels(path, raw[:, 0])


# A python-format batch holds ~3,104 bytes per record (3,072 pixels, a label, a file name); anything much
# larger is refused before it is read.
_PY_BYTES_PER_RECORD = _PIXELS + 1024
_PY_SLACK_BYTES = 1 << 20


def _read_python(path: Path, records: int) -> tuple[np.ndarray, np.ndarray]:
    limit = records * _PY_BYTES_PER_RECORD + _PY_SLACK_BYTES
    with _open(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise DataError(f"{path}: {size} bytes is too big for a CIFAR-10 python batch of {records} records "
                            f"(at most {limit}); the file is not a CIFAR-10 python batch. Download the data "
                            "again.")
        try:
            raw = f.read(limit + 1)
        except OSError as error:
            raise DataError(_cannot_read(path, error)) from None
    try:
        # encoding="bytes": the official pickles come from Python 2, whose str is bytes.
        batch = _BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    # NOTE: a damaged pickle can fail with almost any exception type; all mean the same to the user.
    except Exception as error:
        raise DataError(f"{path}: not a readable CIFAR-10 python batch ({error}). "
                        "Delete it and download the data again.") from error
    data = batch.get(b"data") if isinstance(batch, dict) else None
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.shape != (records, _PIXELS):
        found = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{path}: expected b'data' to be uint8 ({records}, {_PIXELS}), found {found}; "
                        "the file is not a CIFAR-10 python batch. Download the data again.")
    labels = batch.get(b"labels")
    if isinstance(labels, np.ndarray) and labels.dtype.kind in "iu" and labels.shape == (records,):
        return data.reshape(records, *IMAGE_SHAPE), _checked_labels(path, labels)
    # Checked element by element before NumPy sees the list: shared references can make a small file hold
    # a list of millions of nested lists, which np.asarray would spend minutes walking.
    if not isinstance(labels, list) or len(labels) != records:
        found = f"{len(labels)} items" if isinstance(labels, list) else type(labels).__name__
        raise DataError(f"{path}: expected b'labels' to be a list of {records} labels, found {found}; the file "
                        "is not a CIFAR-10 python batch")
    bad = next((i for i, v in enumerate(labels) if type(v) is not int or not 0 <= v < len(CLASSES)), None)
    if bad is not None:
        value = labels[bad] if type(labels[bad]) is int else type(labels[bad]).__name__
        raise DataError(f"{path}: record {bad} has label {value}; CIFAR-10 labels are the integers 0..9. "
                        "Is this CIFAR-100 or a damaged file?")
    return data.reshape(records, *IMAGE_SHAPE), np.array(labels, np.int32)


def _checked_labels(path: Path, labels: np.ndarray) -> np.ndarray:
    bad = np.flatnonzero((labels < 0) | (labels >= len(CLASSES)))
    if bad.size:
        raise DataError(f"{path}: record {bad[0]} has label {labels[bad[0]]} ({bad.size} bad records); "
                        "CIFAR-10 labels are 0..9. Is this CIFAR-100 or a damaged file?")
    return labels.astype(np.int32)


# What a CIFAR-10 pickle may name, each a function that builds only plain data from checked arguments: the
# Python 2 originals and Python 3 re-pickles of them, protocols 0 to 5. None executes anything the file
# chooses, and none allocates more than the file's own bytes.
class _ArrayType:
    """Stands for numpy.ndarray in a pickle: an argument to _reconstruct only. (np.ndarray itself, called by a
    pickle, would allocate any shape the file asks for.)"""

    def __new__(cls, *args: Any) -> Any:
        raise pickle.UnpicklingError("numpy.ndarray called directly; a CIFAR-10 batch never does that")


# NOTE: numpy moved _reconstruct from numpy.core to numpy._core in 2.0, and importing the old path warns;
# an array's own pickle recipe hands us the function under either name.
_RECONSTRUCT = np.zeros(0).__reduce__()[0]


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    """numpy's pickle recipe for an ndarray: an empty array, which the file's state (BUILD) then fills, and
    ndarray.__setstate__ checks that the bytes match the shape."""
    if subtype is not _ArrayType or shape != (0,):
        raise pickle.UnpicklingError(f"unexpected array recipe ({subtype!r}, {shape!r})")
    return _RECONSTRUCT(np.ndarray, (0,), _plain_dtype(dtype))


def _plain_dtype(*args: Any) -> np.dtype:
    """np.dtype(*args) for a dtype of plain numbers (no Python objects, which would unpickle as anything)."""
    if not args or not isinstance(args[0], (str, bytes)) or len(args) > 3:
        raise pickle.UnpicklingError(f"unexpected dtype arguments {args!r}")
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise pickle.UnpicklingError(f"refused dtype {dtype}: a CIFAR-10 batch holds only numbers")
    return dtype


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """numpy's protocol-5 recipe: an array over the pickle's own bytes."""
    if not isinstance(buf, (bytes, bytearray, pickle.PickleBuffer)) or not isinstance(dtype, np.dtype) or \
            dtype.hasobject or not isinstance(shape, tuple) or order not in ("C", "F"):
        raise pickle.UnpicklingError("unexpected array recipe (_frombuffer)")
    return np.frombuffer(buf, dtype).reshape(shape, order=order)


def _latin1(text: Any, encoding: Any) -> bytes:
    """How Python 3 pickles bytes at protocols 0-2: _codecs.encode(str, 'latin1')."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"unexpected _codecs.encode({type(text).__name__}, {encoding!r})")
    return text.encode("latin-1")


def _empty_bytes(*args: Any) -> bytes:
    """How Python 3 pickles b'' at protocols 0-2: bytes()."""
    if args:
        raise pickle.UnpicklingError(f"unexpected bytes{args!r}")
    return b""


_PICKLE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): _ArrayType,
    ("numpy", "dtype"): _plain_dtype,
    ("_codecs", "encode"): _latin1,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
}


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR-10 batch holds: dicts, lists, bytes, ints and numpy arrays of numbers.

    A pickle can name any importable callable (os.system, say) and have it called while loading; every
    global is refused but those in _PICKLE_GLOBALS, which stand in for the few numpy and builtin recipes a
    CIFAR-10 batch uses and check their arguments, so loading a hostile file runs none of its code.
    """

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _PICKLE_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused to load {module}.{name}: a CIFAR-10 batch holds only numpy arrays and lists, "
                "so this file is not genuine and may try to run code") from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent IDs are not part of a CIFAR-10 batch")


def write_binary_batches(directory: PathArg, dataset: Dataset) -> Path:
    """Write dataset in the official binary layout under directory/cifar-10-batches-bin/; return that folder.

    The test set fills test_batch.bin and the training set five files of the same size, so
    read_batches(folder, records_per_file=len(dataset.test_labels)) reads it back.

        folder = write_binary_batches(tmp, synthetic(100, 20))
    """
    records = len(dataset.test_labels)
    if len(dataset.train_labels) != 5 * records:
        raise ValueError(f"write_binary_batches: {len(dataset.train_labels)} training examples do not fill "
                         f"5 files of {records} (the test set's size); use n_train = 5 * n_test")
    folder = Path(directory) / BIN_DIR
    folder.mkdir(parents=True, exist_ok=True)
    train = zip(np.split(dataset.train_images, 5), np.split(dataset.train_labels, 5))
    for name, (images, labels) in zip((*_TRAIN_FILES, _TEST_FILE),
                                      (*train, (dataset.test_images, dataset.test_labels))):
        rows = np.concatenate([labels.astype(np.uint8)[:, None], images.reshape(len(images), -1)], axis=1)
        rows.tofile(folder / f"{name}.bin")
    (folder / "batches.meta.txt").write_text("\n".join(dataset.classes) + "\n")
    return folder


def synthetic(n_train: int = 5000, n_test: int = 1000, seed: int = 0) -> Dataset:
    """A small CIFAR-shaped dataset that a CNN learns in a few hundred steps, for runs without the real data.

    Each class has its own blocky colour pattern (random 4x4 RGB upscaled to 32x32); an image is its
    class's pattern plus Gaussian noise of std 40 grey levels, so no single pixel gives the class away.

        ds = synthetic(500, 100, seed=1)
    """
    rng = np.random.default_rng(seed)
    patterns = rng.uniform(30, 225, (len(CLASSES), 3, 4, 4)).astype(np.float32).repeat(8, 2).repeat(8, 3)
    return Dataset(*_synthetic_split(rng, patterns, n_train), *_synthetic_split(rng, patterns, n_test))


def _synthetic_split(rng: np.random.Generator, patterns: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.permutation(np.arange(n) % len(CLASSES)).astype(np.int32)  # balanced classes
    # patterns + 40 * noise, rounded and clipped, in place: the same floats as out of place without three more
    # arrays of the set's size (every --synthetic process draws it: tests, demos, simulated clients)
    images = rng.standard_normal((n, *IMAGE_SHAPE), dtype=np.float32)
    images *= 40
    images += patterns[labels]
    return np.clip(np.rint(images, out=images), 0, 255, out=images).astype(np.uint8), labels


# ---------------------------------------------------------------------------------------------------------
# Downloading


def download(dest_dir: PathArg | None = None, url: str = URL, md5: str = MD5, progress: bool = True) -> Path:
    """Download the CIFAR-10 binary archive, check its md5 and unpack it; return the batches folder.

    dest_dir defaults to data_root(). The archive goes to a temporary folder inside dest_dir and the
    unpacked batches folder is renamed into place only once complete, so an interrupted download never
    leaves a half dataset behind. Data already there is returned without downloading.

        folder = download("~/data")   # ~/data/cifar-10-batches-bin
    """
    return _download(data_root(dest_dir), url, md5, progress)


def _download(dest: Path, url: str, md5: str, progress: bool) -> Path:
    existing = _batches_in(dest)
    if existing is not None:
        return existing
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".tfplus-download-") as tmp:
        archive, unpacked = Path(tmp) / "archive", Path(tmp) / "unpacked"
        _fetch(url, archive, md5, dest, progress)
        _safe_extract(archive, unpacked, url)
        found = _batches_in(unpacked)
        if found is None or found == unpacked:
            raise DataError(f"{url}: the archive holds no {BIN_DIR}/data_batch_1.bin; it is not CIFAR-10")
        target = dest / found.name
        if target.exists():
            raise DataError(f"{target} exists but holds no complete CIFAR-10 data; delete it and run again")
        os.replace(found, target)
    return target


def _fetch(url: str, path: Path, md5: str, dest: Path, progress: bool) -> None:
    # HTTP and TLS (~10 ms of imports) only for a download, not for every process that reads the data
    import http.client
    import urllib.parse
    import urllib.request
    name = PurePosixPath(urllib.parse.urlparse(url).path).name or url
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, open(path, "wb") as out:
            total, done = int(response.headers.get("Content-Length") or 0), 0
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if progress:
                    _show_progress(name, done, total)
    # URLError (no network, refused, HTTP 404) is an OSError; a connection cut mid-body is an HTTPException.
    except (OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", None) or error
        raise DataError(
            f"could not download {url} ({reason}).\nTo run offline, fetch {name} on another machine and "
            f"unpack it into {dest}, so that\n  {dest / BIN_DIR}/ holds data_batch_1.bin .. data_batch_5.bin "
            f"and test_batch.bin\n(the python version, {PY_DIR}/, works too); then pass --data DIR or set "
            "TFPLUS_DATA=DIR.") from error
    finally:
        if progress:
            sys.stderr.write("\n")
    if digest.hexdigest() != md5:
        raise DataError(f"{url}: md5 is {digest.hexdigest()}, expected {md5}; the download is corrupt or "
                        f"not the CIFAR-10 archive. Nothing was written to {dest}; run again.")


def _show_progress(name: str, done: int, total: int) -> None:
    mib = 1 << 20
    if total:
        line = f"\r{name}: {done / mib:6.1f} / {total / mib:.1f} MiB {100 * done // total:3d}%"
    else:
        line = f"\r{name}: {done / mib:6.1f} MiB"
    sys.stderr.write(line)
    sys.stderr.flush()


def _safe_extract(archive: Path, dest: Path, url: str) -> None:
    """Unpack plain files and folders only, all inside dest.

    NOTE: tarfile.extractall trusts member names, so a hostile archive could write ../../.bashrc or plant a
    link to /etc. CIFAR-10 archives hold no links or devices, so any such member is refused outright.
    """
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member, url)
            for member in members:
                target = dest.joinpath(*PurePosixPath(member.name).parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src, open(target, "wb") as out:  # type: ignore[union-attr]
                    shutil.copyfileobj(src, out)
    except (tarfile.TarError, EOFError) as error:
        raise DataError(f"{url}: not a readable tar archive ({error})") from error


def _check_member(member: tarfile.TarInfo, url: str) -> None:
    path = PurePosixPath(member.name)
    if path.is_absolute():
        why = "absolute path"
    elif ".." in path.parts:
        why = "path leaves the folder with '..'"
    elif member.issym() or member.islnk():
        why = f"link to {member.linkname!r}"
    elif not (member.isfile() or member.isdir()):
        why = "device or fifo"
    else:
        return
    raise DataError(f"{url}: refusing to unpack member {member.name!r} ({why}); a CIFAR-10 archive holds "
                    "only plain files and folders, so this one is damaged or malicious. Nothing was kept.")


# ---------------------------------------------------------------------------------------------------------
# Augmentation and normalization (vectorized over the batch)


def crop_flip(images: np.ndarray, top: np.ndarray, left: np.ndarray, flip: np.ndarray,
              pad: int = 4) -> np.ndarray:
    """Zero-pad (N, C, H, W) images by pad on each side, cut example i's H x W window at (top[i], left[i])
    and mirror it left-right where flip[i]. Offsets run 0..2*pad; pad, pad with no flip is the identity.

        crop_flip(x, np.full(len(x), 4), np.full(len(x), 4), np.zeros(len(x), bool))   # == x
    """
    n, c, h, w = images.shape
    # Zeros and a slice copy: a third of np.pad's time, which is general and slow for this (this runs in the
    # prefetch thread, which shares the GIL with the step's launches).
    padded = np.zeros((n, c, h + 2 * pad, w + 2 * pad), images.dtype)
    padded[:, :, pad:pad + h, pad:pad + w] = images
    # A view of every H x W window; picking one per example copies whole windows (5x faster than gathering
    # pixel by pixel). The indices around the channel slice put the batch axis first: (N, C, H, W).
    out = sliding_window_view(padded, (h, w), axis=(2, 3))[np.arange(n), :, top, left]
    out[flip] = out[flip, :, :, ::-1]
    return out


def random_crops(n: int, rng: np.random.Generator, pad: int = 4) -> np.ndarray:
    """n random crops as int32 (n, 3) rows (top, left, flip): offsets 0..2*pad, a coin flip for the mirror;
    the draws of random_crop_flip, for tfplus.ops.image_ops.cifar_augment. pad, pad, 0 is no change."""
    top, left = rng.integers(0, 2 * pad + 1, (2, n))
    return np.stack([top, left, rng.random(n) < 0.5], 1).astype(np.int32)


def random_crop_flip(images: np.ndarray, rng: np.random.Generator, pad: int = 4) -> np.ndarray:
    """The standard CIFAR augmentation: a random crop of the zero-padded image and a coin-flip mirror.

    Padding is black pixels (0) before normalization, as in the usual pad-crop-normalize recipe.
    """
    crops = random_crops(len(images), rng, pad)
    return crop_flip(images, crops[:, 0], crops[:, 1], crops[:, 2] != 0, pad)


def normalize(images: np.ndarray, data_format: str = "NCHW") -> np.ndarray:
    """uint8 (N, 3, H, W) -> float32 (pixel / 255 - MEAN) / STD per channel, laid out as data_format."""
    _check_format(data_format)
    channels_last = data_format == "NHWC"
    x = images.transpose(0, 2, 3, 1) if channels_last else images
    shape = (1, 1, 1, 3) if channels_last else (1, 3, 1, 1)
    out = np.empty(x.shape, np.float32)
    # The uint8 -> float32 cast inside the multiply: one pass less than astype, the same floats.
    np.multiply(x, (1 / (255 * STD)).reshape(shape), out=out)
    out -= (MEAN / STD).reshape(shape)
    return out


def _check_format(data_format: str) -> None:
    if data_format not in DATA_FORMATS:
        raise ValueError(f"data_format must be one of {DATA_FORMATS}, got {data_format!r}")


# ---------------------------------------------------------------------------------------------------------
# Batching in a background thread


class _Failure(NamedTuple):
    error: BaseException


_END = object()


class Prefetch:
    """Iterates over source in a daemon thread that keeps up to size items ready.

    An exception raised in the worker is re-raised by the consumer's next(). close(), leaving a with block,
    or dropping the iterator stops the worker, and as a daemon it never holds up interpreter exit.
    size=0 runs source in the caller's thread (handy in a debugger).

        with Prefetch(iter(range(3))) as items:
            assert list(items) == [0, 1, 2]
    """

    def __init__(self, source: Iterator[Any], size: int = 2):
        self._stop = threading.Event()  # first, so that __del__ works even if a check below raises
        if size < 0:
            raise ValueError(f"prefetch size must be >= 0, got {size}")
        self._source, self._done = source, False
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(size, 1))
        self._thread = None
        if size:
            # The worker gets no reference to self, so a forgotten Prefetch is still collected (see __del__).
            self._thread = threading.Thread(target=_prefetch_worker, args=(source, self._queue, self._stop),
                                            name="tfplus-prefetch", daemon=True)
            self._thread.start()

    def __iter__(self) -> Prefetch:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if self._thread is None:
            return next(self._source)
        item = self._queue.get()
        if item is _END or isinstance(item, _Failure):
            self.close()
            if item is _END:
                raise StopIteration
            raise item.error
        return item

    def close(self) -> None:
        """Stop the worker and wait (briefly) for it to exit; further next() calls raise StopIteration."""
        self._done = True
        self._stop.set()
        while not self._queue.empty():  # unblock a worker waiting to put
            self._queue.get_nowait()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._stop.set()


def _prefetch_worker(source: Iterator[Any], out: queue.Queue[Any], stop: threading.Event) -> None:
    try:
        for item in source:
            if not _put(out, stop, item):
                return
        _put(out, stop, _END)
    except BaseException as error:  # handed to the consumer, who re-raises it
        _put(out, stop, _Failure(error))


def _put(out: queue.Queue[Any], stop: threading.Event, item: Any) -> bool:
    # Wake up now and then to notice close() even while the queue stays full.
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return True
        except queue.Full:
            pass
    return False


class TrainBatches:
    """Endless shuffled, augmented training batches with an exact resume state; see train_batches()."""

    def __init__(self, dataset: Dataset, batch_size: int, seed: int, augment: bool, data_format: str,
                 state: dict[str, int] | None, prefetch: int, raw: bool = False):
        _check_format(data_format)
        self.batch_size, self.seed = batch_size, seed
        self.steps_per_epoch = len(dataset.train_labels) // max(batch_size, 1)
        if batch_size < 1 or self.steps_per_epoch == 0:
            raise ValueError(f"batch_size must be 1..{len(dataset.train_labels)} (the training set), "
                             f"got {batch_size}")
        state = state or {"seed": seed, "epoch": 0, "batch_index": 0}
        self._check_state(state)
        self._epoch, self._index = state["epoch"], state["batch_index"]
        self._batches = Prefetch(_train_stream(dataset, batch_size, seed, self._epoch, self._index, augment,
                                               data_format, raw), prefetch)

    def _check_state(self, state: dict[str, int]) -> None:
        if set(state) != {"seed", "epoch", "batch_index"}:
            raise ValueError(f"resume state needs keys seed, epoch, batch_index; got {sorted(state)}")
        if state["seed"] != self.seed:
            raise ValueError(f"resume state was saved with seed {state['seed']} but seed={self.seed}; "
                             "pass the saved seed")
        if state["epoch"] < 0 or not 0 <= state["batch_index"] < self.steps_per_epoch:
            raise ValueError(f"resume state {state} is out of range: epoch >= 0 and batch_index in "
                             f"0..{self.steps_per_epoch - 1} (the steps per epoch at batch_size "
                             f"{self.batch_size})")

    def state(self) -> dict[str, int]:
        """Where the next batch comes from, as a JSON-ready dict; pass it to train_batches(state=...)."""
        return {"seed": self.seed, "epoch": self._epoch, "batch_index": self._index}

    def __iter__(self) -> TrainBatches:
        return self

    def __next__(self) -> tuple[Any, np.ndarray]:
        (epoch, index), images, labels = next(self._batches)
        # Track the consumer's position, not the worker's, which runs a few batches ahead.
        self._epoch, self._index = (epoch, index + 1) if index + 1 < self.steps_per_epoch else (epoch + 1, 0)
        return images, labels

    def close(self) -> None:
        """Stop the prefetch thread."""
        self._batches.close()

    def __enter__(self) -> TrainBatches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rng(seed: int, stream: int, epoch: int, batch_index: int) -> np.random.Generator:
    # Every random draw is a pure function of (seed, epoch, batch), so resuming needs no replay.
    # A fixed-length key keeps the shuffle stream (0) and augmentation stream (1) apart.
    return np.random.default_rng((seed, stream, epoch, batch_index))


def _train_stream(dataset: Dataset, batch_size: int, seed: int, epoch: int, index: int, augment: bool,
                  data_format: str, raw: bool) -> Iterator[tuple[tuple[int, int], Any, np.ndarray]]:
    images, labels = dataset.train_images, dataset.train_labels
    steps = len(labels) // batch_size
    while True:
        order = _rng(seed, 0, epoch, 0).permutation(len(labels))
        for i in range(index, steps):
            take = order[i * batch_size:(i + 1) * batch_size]
            crops = random_crops(batch_size, _rng(seed, 1, epoch, i)) if augment else no_crops(batch_size)
            if raw:  # the bytes and the crops: cifar_augment makes the very floats of the branch below
                yield (epoch, i), (images[take], crops), labels[take]
            else:
                x = crop_flip(images[take], crops[:, 0], crops[:, 1], crops[:, 2] != 0) if augment else images[take]
                yield (epoch, i), normalize(x, data_format), labels[take]
        epoch, index = epoch + 1, 0


def no_crops(n: int, pad: int = 4) -> np.ndarray:
    """n crops (top, left, flip) that leave images as they are, for cifar_augment on unaugmented batches."""
    return np.tile(np.array([[pad, pad, 0]], np.int32), (n, 1))


def train_batches(dataset: Dataset, batch_size: int, seed: int = 0, augment: bool = True,
                  data_format: str = "NCHW", state: dict[str, int] | None = None,
                  prefetch: int = 2, raw: bool = False) -> TrainBatches:
    """Endless training batches (float32 images in data_format, int32 labels) made in a background thread.

    Each epoch is a fresh permutation of the training set cut into steps_per_epoch batches of exactly
    batch_size; the last partial batch is dropped (a different few examples each epoch). augment applies
    random_crop_flip. .state() gives the position of the next batch; passing it back as state (with the
    same dataset and batch_size) continues with identical batches. With `raw`, a batch's images are
    (uint8 images, int32 crops (top, left, flip)) for tfplus.ops.image_ops.cifar_augment, which makes the very
    floats of the default path (the same random draws) wherever the graph runs.

        with train_batches(ds, 128, seed=0) as batches:
            x, y = next(batches)
            saved = batches.state()          # {"seed": 0, "epoch": 0, "batch_index": 1}
    """
    return TrainBatches(dataset, batch_size, seed, augment, data_format, state, prefetch, raw)


def eval_batches(dataset: Dataset, batch_size: int, data_format: str = "NCHW", prefetch: int = 2,
                 raw: bool = False) -> Prefetch:
    """The test set in order, normalized, unaugmented; every example once, so the last batch may be smaller.
    With `raw`, the images are the uint8 bytes (normalize them with cifar_augment and no_crops).

        with eval_batches(ds, 500) as batches:
            correct = sum(int((predict(x) == y).sum()) for x, y in batches)
    """
    _check_format(data_format)
    return Prefetch(_eval_stream(dataset, batch_size, data_format, raw), prefetch)


def _eval_stream(dataset: Dataset, batch_size: int, data_format: str,
                 raw: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    images, labels = dataset.test_images, dataset.test_labels
    for start in range(0, len(labels), batch_size):
        x = images[start:start + batch_size]
        yield (x if raw else normalize(x, data_format)), labels[start:start + batch_size]
