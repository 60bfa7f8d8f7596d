"""Hostile CIFAR-10 files: each is refused with a DataError naming the file, quickly, and runs no code.

Every case writes a tiny valid dataset (20 records per file), spoils one file, and loads the folder.
"""
from __future__ import annotations

import os
import pickle
import time

import numpy as np
import pytest

from tfplus.data import DataError, cifar10, load, synthetic, write_binary_batches

RECORDS = 20
NAMES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


@pytest.fixture(scope="module")
def tiny():
    return synthetic(5 * RECORDS, RECORDS, seed=1)


def _batches(ds) -> list[dict]:
    xs = np.split(ds.train_images, 5) + [ds.test_images]
    ys = np.split(ds.train_labels, 5) + [ds.test_labels]
    return [{b"batch_label": name.encode(), b"labels": [int(v) for v in y], b"data": x.reshape(len(x), -1),
             b"filenames": [b"img.png"] * len(x)} for name, x, y in zip(NAMES, xs, ys)]


def _python_folder(tmp_path, ds, protocol=2):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name, batch in zip(NAMES, _batches(ds)):
        (folder / name).write_bytes(pickle.dumps(batch, protocol=protocol))
    return folder


def _load(tmp_path):
    t0 = time.perf_counter()
    try:
        return load(tmp_path, records_per_file=RECORDS)
    finally:
        # Not a speed claim: a hang guard. The labels bomb below took 42 s before it was checked up front.
        assert time.perf_counter() - t0 < 10


@pytest.mark.parametrize("protocol", [0, 2, 3, 4, 5])
def test_python3_pickles_of_every_protocol_load(tmp_path, tiny, protocol):
    """Python 3 re-pickles of the batches (protocol 2 used to be refused as unsafe: bytes come as
    _codecs.encode, b'' as bytes(), protocol-5 arrays as numpy _frombuffer)."""
    _python_folder(tmp_path, tiny, protocol)
    ds = _load(tmp_path)
    assert np.array_equal(ds.train_images, tiny.train_images) and np.array_equal(ds.test_labels, tiny.test_labels)


def test_empty_bytes_and_label_arrays_load(tmp_path, tiny):
    folder = _python_folder(tmp_path, tiny)
    batch = _batches(tiny)[2]
    batch[b"batch_label"], batch[b"labels"] = b"", np.asarray(batch[b"labels"], np.int64)
    (folder / NAMES[2]).write_bytes(pickle.dumps(batch, protocol=2))
    assert np.array_equal(_load(tmp_path).train_labels, tiny.train_labels)


# -- crafted pickles: (what goes into data_batch_3, the message expected) ------------------------------------
class _Call:
    """Pickles as a call of `fn(*args)` (and optionally BUILD with `state`), whatever fn is."""

    def __init__(self, fn, args, state=None):
        self.fn, self.args, self.state = fn, args, state

    def __reduce__(self):
        return (self.fn, self.args) if self.state is None else (self.fn, self.args, self.state)


_RECONSTRUCT = np.zeros(0).__reduce__()[0]
_FROMBUFFER = np.zeros(1).__reduce_ex__(5)[0]


def _nested_labels(depth: int) -> list:
    """A list of RECORDS references to one list tree of 2**depth leaves: a few hundred bytes pickled."""
    tree: list = [0, 0]
    for _ in range(depth - 1):
        tree = [tree, tree]
    return [tree] * RECORDS


def _with(tiny, **changes):
    batch = _batches(tiny)[2]
    batch.update({k.encode(): v for k, v in changes.items()})
    return batch


CRAFTED = {
    "os.system": (lambda tiny, m: {b"data": _Call(os.system, (f"touch {m}",))}, "refused to load .*system"),
    "eval": (lambda tiny, m: _Call(eval, (f"open({str(m)!r}, 'w')",)), "refused to load .*builtin.*\\.eval"),
    "exec inside labels": (lambda tiny, m: _with(tiny, labels=[_Call(exec, (f"open({str(m)!r}, 'w')",))]),
                           "refused to load .*builtin.*\\.exec"),
    "getattr chain": (lambda tiny, m: _Call(getattr, (_Call(__import__, ("os",)), "system")),
                      "refused to load .*builtin.*\\.getattr"),
    "numpy function": (lambda tiny, m: _Call(np.save, (str(m), np.zeros(1))), "refused to load numpy"),
    "codecs with another codec": (lambda tiny, m: _Call(__import__("_codecs").encode, ("x", "rot13")),
                                  "unexpected _codecs.encode"),
    "bytes of a huge size": (lambda tiny, m: _Call(bytes, (10**12,)), "unexpected bytes"),
    "ndarray called directly": (lambda tiny, m: _Call(np.ndarray, ((10**12,),)), "numpy.ndarray called"),
    "reconstruct of a huge shape": (lambda tiny, m: _with(tiny, data=_Call(_RECONSTRUCT, (np.ndarray, (10**12,),
                                                                                          b"b"))),
                                    "unexpected array recipe"),
    "array state larger than its bytes": (
        lambda tiny, m: _with(tiny, data=_Call(_RECONSTRUCT, (np.ndarray, (0,), b"b"),
                                               (1, (10**9,), np.dtype("u1"), False, b"abc"))),
        "not a readable CIFAR-10 python batch"),
    "object array": (lambda tiny, m: _with(tiny, data=np.array([None, 1], dtype=object)), "refused dtype object"),
    "frombuffer with a bad shape": (lambda tiny, m: _with(tiny, data=_Call(_FROMBUFFER, (b"abc", np.dtype("u1"),
                                                                                       (10**6,), "C"))),
                                    "not a readable CIFAR-10 python batch"),
    "not a dict": (lambda tiny, m: [1, 2, 3], "expected b'data'"),
    "data float32": (lambda tiny, m: _with(tiny, data=np.zeros((RECORDS, 3072), np.float32)), "expected b'data'"),
    "data wrong shape": (lambda tiny, m: _with(tiny, data=np.zeros((RECORDS, 3071), np.uint8)), "expected b'data'"),
    "no labels": (lambda tiny, m: {b"data": np.zeros((RECORDS, 3072), np.uint8)}, "found NoneType"),
    "labels too few": (lambda tiny, m: _with(tiny, labels=[0] * (RECORDS - 1)), f"found {RECORDS - 1} items"),
    "label 10": (lambda tiny, m: _with(tiny, labels=[0] * 5 + [10] + [0] * (RECORDS - 6)), "record 5 has label 10"),
    "label -1": (lambda tiny, m: _with(tiny, labels=[-1] * RECORDS), "record 0 has label -1"),
    "label 2**100": (lambda tiny, m: _with(tiny, labels=[2**100] * RECORDS), "record 0 has label 1267"),
    "label float": (lambda tiny, m: _with(tiny, labels=[1.0] * RECORDS), "record 0 has label float"),
    "label bool": (lambda tiny, m: _with(tiny, labels=[True] * RECORDS), "record 0 has label bool"),
    "label array float": (lambda tiny, m: _with(tiny, labels=np.zeros(RECORDS, np.float32)), "found ndarray"),
    "shared-reference bomb": (lambda tiny, m: _with(tiny, labels=_nested_labels(24)), "record 0 has label list"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_pickle_is_refused_and_runs_nothing(tmp_path, tiny, case):
    make, message = CRAFTED[case]
    folder = _python_folder(tmp_path, tiny)
    marker = tmp_path / "pwned"
    (folder / "data_batch_3").write_bytes(pickle.dumps(make(tiny, marker), protocol=2))
    with pytest.raises(DataError, match=f"data_batch_3: (.|\n)*{message}"):
        _load(tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize("spoil", ["truncated", "empty", "random bytes", "persistent id", "too big"])
def test_damaged_python_batch(tmp_path, tiny, spoil):
    folder = _python_folder(tmp_path, tiny)
    path = folder / "data_batch_4"
    good = path.read_bytes()
    data = {"truncated": good[:len(good) // 2], "empty": b"",
            "random bytes": np.random.default_rng(0).bytes(5000),
            "persistent id": pickle.PERSID + b"x\n" + pickle.STOP,
            "too big": good[:-1] + b"\0" * (RECORDS * 4096 + (1 << 20)) + pickle.STOP}[spoil]
    path.write_bytes(data)
    message = "too big for a CIFAR-10 python batch" if spoil == "too big" else "not a readable CIFAR-10"
    with pytest.raises(DataError, match=f"data_batch_4: .*{message}"):
        _load(tmp_path)


@pytest.mark.parametrize("spoil,message", [
    ("truncated", r"expected 61460 bytes \(20 records of 3073 bytes\), found 61459; the file is truncated"),
    ("one record more", "found 64533"), ("empty", "found 0;"),
    ("label 255", "record 7 has label 255 .*Is this CIFAR-100"),
])
def test_damaged_binary_batch(tmp_path, tiny, spoil, message):
    folder = write_binary_batches(tmp_path, tiny)
    path = folder / "test_batch.bin"
    data = bytearray(path.read_bytes())
    if spoil == "label 255":
        data[7 * 3073] = 255
    path.write_bytes({"truncated": data[:-1], "one record more": data + data[:3073], "empty": b"",
                      "label 255": data}[spoil])
    with pytest.raises(DataError, match=f"test_batch.bin: .*{message}"):
        _load(tmp_path)


@pytest.mark.parametrize("fmt", ["binary", "python"])
def test_unreadable_file(tmp_path, tiny, monkeypatch, fmt):
    folder = write_binary_batches(tmp_path, tiny) if fmt == "binary" else _python_folder(tmp_path, tiny)
    path = folder / ("data_batch_2.bin" if fmt == "binary" else "data_batch_2")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads any file: make this one fail as it would for a user
        real_open = open

        def open_as_user(file, *args, **kwargs):
            if os.fspath(file) == os.fspath(path):
                raise PermissionError(13, "Permission denied", os.fspath(file))
            return real_open(file, *args, **kwargs)
        monkeypatch.setattr(cifar10, "open", open_as_user, raising=False)
    with pytest.raises(DataError, match=f"cannot read {path}: Permission denied; check its permissions"):
        _load(tmp_path)
