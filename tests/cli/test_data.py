"""tfplus.data: CIFAR-10 readers, download, augmentation, batching and resume, on tiny generated files."""
from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import pickle
import socket
import struct
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from tfplus.data import (
    MEAN,
    STD,
    DataError,
    Prefetch,
    crop_flip,
    download,
    eval_batches,
    find_data_dir,
    load,
    normalize,
    read_batches,
    synthetic,
    train_batches,
    write_binary_batches,
)

RECORDS = 20  # per file: 100 training and 20 test images


@pytest.fixture(scope="module")
def tiny():
    return synthetic(5 * RECORDS, RECORDS, seed=0)


@pytest.fixture
def bin_dir(tmp_path, tiny):
    return write_binary_batches(tmp_path, tiny)


def _same(a, b):
    return all(np.array_equal(getattr(a, k), getattr(b, k))
               for k in ("train_images", "train_labels", "test_images", "test_labels"))


# ---------------------------------------------------------------------------------------------------------
# Readers


def test_binary_roundtrip_and_finder(tmp_path, bin_dir, tiny, monkeypatch):
    assert _same(read_batches(bin_dir, RECORDS), tiny)
    assert find_data_dir(tmp_path) == bin_dir          # a folder containing cifar-10-batches-bin
    assert find_data_dir(bin_dir) == bin_dir           # the batches folder itself
    ds = load(tmp_path, records_per_file=RECORDS)
    assert ds.train_images.shape == (100, 3, 32, 32) and ds.train_labels.dtype == np.int32
    monkeypatch.setenv("TFPLUS_DATA", str(tmp_path))
    assert find_data_dir() == bin_dir
    monkeypatch.delenv("TFPLUS_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert find_data_dir() is None
    write_binary_batches(tmp_path / "cache" / "tfplus", tiny)
    assert find_data_dir() == tmp_path / "cache" / "tfplus" / "cifar-10-batches-bin"


def test_missing_data_says_how_to_fix(tmp_path):
    with pytest.raises(DataError, match="not found in .*empty(.|\n)*--data DIR or TFPLUS_DATA"):
        load(tmp_path / "empty")


class _Py2Pickler(pickle._Pickler):
    """Writes bytes and str as Python 2 str opcodes, as in the official cifar-10-batches-py files.

    NOTE: uses the pure-Python pickler (pickle._Pickler) because only it has a per-type dispatch table.
    """

    dispatch = dict(pickle._Pickler.dispatch)

    def _save_py2_str(self, obj):
        data = obj.encode("latin-1") if isinstance(obj, str) else obj
        self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str
    dispatch[str] = _save_py2_str


def _write_python_batches(folder: Path, ds) -> None:
    folder.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    xs = np.split(ds.train_images, 5) + [ds.test_images]
    ys = np.split(ds.train_labels, 5) + [ds.test_labels]
    for name, x, y in zip(names, xs, ys):
        batch = {b"batch_label": name.encode(), b"labels": [int(v) for v in y],
                 b"data": x.reshape(len(x), -1), b"filenames": [b"x.png"] * len(x)}
        with open(folder / name, "wb") as f:
            _Py2Pickler(f, protocol=2).dump(batch)


def test_python_format(tmp_path, tiny):
    _write_python_batches(tmp_path / "cifar-10-batches-py", tiny)
    assert find_data_dir(tmp_path) == tmp_path / "cifar-10-batches-py"
    assert _same(load(tmp_path, records_per_file=RECORDS), tiny)


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_pickle_that_runs_code_is_refused(tmp_path, tiny):
    folder = tmp_path / "cifar-10-batches-py"
    _write_python_batches(folder, tiny)
    marker = tmp_path / "pwned"
    (folder / "data_batch_2").write_bytes(pickle.dumps({b"data": _Evil(marker)}, protocol=4))
    with pytest.raises(DataError, match="data_batch_2: .*refused to load .*system"):
        load(tmp_path, records_per_file=RECORDS)
    assert not marker.exists()


@pytest.mark.parametrize("extra", [-100, 3073])  # truncated; one record too many
def test_wrong_size_binary_file(bin_dir, extra):
    path = bin_dir / "data_batch_3.bin"
    data = path.read_bytes()
    path.write_bytes(data[:extra] if extra < 0 else data + bytes(extra))
    with pytest.raises(DataError, match=f"data_batch_3.bin: expected {len(data)} bytes .* found "
                                        f"{len(data) + extra}"):
        read_batches(bin_dir, RECORDS)


def test_bad_label(bin_dir):
    path = bin_dir / "test_batch.bin"
    data = bytearray(path.read_bytes())
    data[5 * 3073] = 10  # the label byte of record 5
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="test_batch.bin: record 5 has label 10 .* labels are 0..9"):
        read_batches(bin_dir, RECORDS)


# ---------------------------------------------------------------------------------------------------------
# Augmentation and normalization


def test_crop_flip_by_hand():
    image = np.arange(1, 10, dtype=np.uint8).reshape(1, 1, 3, 3)   # [[1 2 3] [4 5 6] [7 8 9]]
    images = np.repeat(image, 3, axis=0)
    out = crop_flip(images, top=np.array([0, 2, 1]), left=np.array([0, 1, 1]),
                    flip=np.array([False, True, False]), pad=1)
    np.testing.assert_array_equal(out[0, 0], [[0, 0, 0], [0, 1, 2], [0, 4, 5]])   # shifted down-right
    np.testing.assert_array_equal(out[1, 0], [[6, 5, 4], [9, 8, 7], [0, 0, 0]])   # shifted up, mirrored
    np.testing.assert_array_equal(out[2], image[0])                               # centre: identity


def test_normalize_layouts():
    x = np.broadcast_to(np.rint(MEAN * 255).astype(np.uint8)[None, :, None, None], (2, 3, 4, 5))
    nchw, nhwc = normalize(x), normalize(x, "NHWC")
    assert nchw.dtype == np.float32 and nchw.shape == (2, 3, 4, 5) and nhwc.shape == (2, 4, 5, 3)
    assert np.abs(nchw).max() < 0.01                   # the mean colour maps to 0
    np.testing.assert_array_equal(nchw.transpose(0, 2, 3, 1), nhwc)
    np.testing.assert_allclose(normalize(np.full((1, 3, 1, 1), 255, np.uint8))[0, :, 0, 0], (1 - MEAN) / STD,
                               rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# Batching, determinism and resume


def _take(batches, n):
    with batches:
        return [next(batches) for _ in range(n)]


def _equal(a, b):
    return len(a) == len(b) and all(np.array_equal(x1, x2) and np.array_equal(y1, y2)
                                    for (x1, y1), (x2, y2) in zip(a, b))


def test_train_batches_shapes_and_epochs(tiny):
    with train_batches(tiny, 32, seed=1, augment=False, data_format="NHWC") as batches:
        assert batches.steps_per_epoch == 3   # 100 // 32: the last 4 examples of each epoch are dropped
        epoch = [next(batches) for _ in range(3)]
        assert batches.state() == {"seed": 1, "epoch": 1, "batch_index": 0}
    x, y = epoch[0]
    assert x.shape == (32, 32, 32, 3) and x.dtype == np.float32 and y.shape == (32,) and y.dtype == np.int32
    # Unaugmented, an epoch's images are 96 distinct training images.
    rows = {img.tobytes() for xb, _ in epoch for img in xb}
    assert len(rows) == 96


def test_same_seed_same_batches_and_exact_resume(tiny):
    run = _take(train_batches(tiny, 32, seed=7), 7)   # crosses two epoch boundaries (3 steps each)
    assert _equal(run, _take(train_batches(tiny, 32, seed=7), 7))
    assert not np.array_equal(run[0][0], _take(train_batches(tiny, 32, seed=8), 1)[0][0])
    assert not np.array_equal(run[0][0], run[3][0])   # each epoch reshuffles and re-augments
    with train_batches(tiny, 32, seed=7) as batches:
        states = []
        for _ in range(7):
            states.append(json.loads(json.dumps(batches.state())))   # must survive a JSON checkpoint
            next(batches)
    for k in (1, 3, 5):
        assert _equal(run[k:], _take(train_batches(tiny, 32, seed=7, state=states[k]), 7 - k))


def test_bad_resume_state(tiny):
    with pytest.raises(ValueError, match="saved with seed 3 but seed=0"):
        train_batches(tiny, 32, seed=0, state={"seed": 3, "epoch": 0, "batch_index": 0})
    with pytest.raises(ValueError, match="out of range"):
        train_batches(tiny, 32, seed=0, state={"seed": 0, "epoch": 0, "batch_index": 3})


def test_eval_batches_every_example_in_order(tiny):
    with eval_batches(tiny, 8) as batches:
        got = list(batches)
    assert [len(y) for _, y in got] == [8, 8, 4]
    np.testing.assert_array_equal(np.concatenate([y for _, y in got]), tiny.test_labels)
    np.testing.assert_array_equal(np.concatenate([x for x, _ in got]), normalize(tiny.test_images))


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "tfplus-prefetch"]


def test_prefetch_propagates_errors_and_closes():
    def failing():
        yield 1
        yield 2
        raise ValueError("boom in the worker")

    items = Prefetch(failing())
    assert next(items) == 1 and next(items) == 2
    with pytest.raises(ValueError, match="boom in the worker"):
        next(items)
    with pytest.raises(StopIteration):
        next(items)

    def endless():
        while True:
            yield np.zeros(10)

    with Prefetch(endless(), size=3) as items:
        next(items)
        assert _prefetch_threads()
    assert not _prefetch_threads()
    assert list(Prefetch(iter(range(3)), size=0)) == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------
# Download, against a local HTTP server


@pytest.fixture
def server(tmp_path):
    """Serves tmp_path/www on 127.0.0.1; yields (folder, base url)."""
    www = tmp_path / "www"
    www.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(www)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield www, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.md5(path.read_bytes()).hexdigest()


def _cifar_members(bin_dir: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    dir_info = tarfile.TarInfo("cifar-10-batches-bin")
    dir_info.type = tarfile.DIRTYPE
    return [(dir_info, b"")] + [(tarfile.TarInfo(f"cifar-10-batches-bin/{f.name}"), f.read_bytes())
                                for f in sorted(bin_dir.iterdir())]


def test_download(tmp_path, server, bin_dir, tiny, capsys):
    www, url = server
    md5 = _archive(www / "c10.tar.gz", _cifar_members(bin_dir))
    dest = tmp_path / "dest"
    folder = download(dest, url=f"{url}/c10.tar.gz", md5=md5)
    assert folder == dest / "cifar-10-batches-bin"
    assert _same(load(dest, records_per_file=RECORDS), tiny)
    assert sorted(p.name for p in dest.iterdir()) == ["cifar-10-batches-bin"]   # no temp files left
    assert "100%" in capsys.readouterr().err


def test_download_bad_md5(tmp_path, server, bin_dir):
    www, url = server
    _archive(www / "c10.tar.gz", _cifar_members(bin_dir))
    dest = tmp_path / "dest"
    with pytest.raises(DataError, match="md5 is [0-9a-f]{32}, expected 0{32}"):
        download(dest, url=f"{url}/c10.tar.gz", md5="0" * 32, progress=False)
    assert list(dest.iterdir()) == []


def _bad_member(kind: str) -> tarfile.TarInfo:
    # dotdot climbs from dest/<temp>/unpacked/cifar-10-batches-bin to tmp_path/evil.
    names = {"dotdot": "cifar-10-batches-bin/../../../../../evil", "absolute": "/tmp/tfplus-evil"}
    info = tarfile.TarInfo(names.get(kind, "cifar-10-batches-bin/evil"))
    if kind in ("symlink", "hardlink"):
        info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
        info.linkname = "/etc/passwd"
    elif kind == "device":
        info.type = tarfile.CHRTYPE
    return info


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "hardlink", "device"])
def test_download_refuses_unsafe_archive(tmp_path, server, bin_dir, kind):
    www, url = server
    md5 = _archive(www / "evil.tar.gz", _cifar_members(bin_dir) + [(_bad_member(kind), b"")])
    dest = tmp_path / "a" / "dest"
    with pytest.raises(DataError, match="refusing to unpack member"):
        download(dest, url=f"{url}/evil.tar.gz", md5=md5, progress=False)
    assert list(dest.iterdir()) == [] and not (tmp_path / "evil").exists()


def test_offline_error_says_where_to_put_the_files(tmp_path):
    with socket.socket() as s:   # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as error:
        download(dest, url=f"http://127.0.0.1:{port}/cifar-10-binary.tar.gz", progress=False)
    message = str(error.value)
    for needed in ("could not download", str(dest / "cifar-10-batches-bin"), "data_batch_1.bin",
                   "test_batch.bin", "--data DIR", "TFPLUS_DATA"):
        assert needed in message
