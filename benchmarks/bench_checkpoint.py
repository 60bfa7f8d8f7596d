"""Checkpoint throughput on ~100 MB of float32 variables: CRC32C alone, tfplus writing and reading TensorFlow's
format (tensor_bundle, every checksum verified), tfplus's one-file format, and TensorFlow's own BundleWriter /
BundleReader (through tf.raw_ops.SaveV2/RestoreV2) on the same tensors when TensorFlow is installed.
Run: `python benchmarks/bench_checkpoint.py [--mb 100] [--repeat 3] [--dir DIR]`.

Writes fsync each file (as a checkpoint must); the folder's disk therefore bounds the write figures. Each figure
is the best of `--repeat` runs, the alternatives interleaved so that load on a shared machine affects them
alike. Reads come from the page cache (the files were just written).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time

import numpy as np

from tfplus import crc32c, tensor_bundle
from tfplus.gfile import atomic_write
from tfplus.proto import checkpoint_pb2
from tfplus.tensor_util import make_tensor_proto
from tfplus.train import saver as saver_lib


def _tensors(mb: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    n = mb * (1 << 20) // 4 // 20  # 20 variables, like a small CNN's weights and optimizer slots
    return {f"layer{i:02d}/w": rng.standard_normal(n).astype(np.float32) for i in range(20)}


def _write_tfplus_file(path: str, tensors: dict) -> None:
    """What Saver(format="tfplus") writes."""
    ckpt = checkpoint_pb2.Checkpoint()
    for k, v in tensors.items():
        ckpt.tensors.add(name=k, tensor=make_tensor_proto(v))
    payload = ckpt.SerializeToString(deterministic=True)
    atomic_write(path, saver_lib.MAGIC + hashlib.sha256(payload).digest() + payload)


def _tf_ops():
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
    except ImportError:
        return None
    return tf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = ap.parse_args()
    tensors = _tensors(args.mb)
    total = sum(v.nbytes for v in tensors.values())
    mb = total / 1e6
    tf = _tf_ops()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        ours, theirs, onefile = (os.path.join(d, n) for n in ("ours", "theirs", "onefile"))
        names, values = list(tensors), list(tensors.values())
        runs = {
            "crc32c (NumPy)": lambda: [crc32c.value(v) for v in values],
            "tfplus write TF format": lambda: tensor_bundle.write_bundle(ours, tensors),
            "tfplus read TF format": lambda: [tensor_bundle.BundleReader(ours).read(k) for k in names],
            "tfplus write one-file format": lambda: _write_tfplus_file(onefile, tensors),
            "tfplus read one-file format": lambda: saver_lib._read(onefile),
        }
        if tf is not None:
            dtypes = [tf.float32] * len(names)
            slices = [""] * len(names)
            runs["TensorFlow write (SaveV2)"] = lambda: tf.raw_ops.SaveV2(
                prefix=theirs, tensor_names=names, shape_and_slices=slices, tensors=values)
            runs["TensorFlow read (RestoreV2)"] = lambda: tf.raw_ops.RestoreV2(
                prefix=theirs, tensor_names=names, shape_and_slices=slices, dtypes=dtypes)
        best = {k: float("inf") for k in runs}
        for _ in range(args.repeat):
            for k, fn in runs.items():
                t = time.perf_counter()
                fn()
                best[k] = min(best[k], time.perf_counter() - t)
        if tf is not None:  # both readers agree on both writers' files
            mine = tensor_bundle.BundleReader(theirs).read(names[-1])
            assert mine.tobytes() == tensors[names[-1]].tobytes()
    print(f"{len(tensors)} float32 tensors, {mb:.1f} MB; best of {args.repeat}")
    for k, s in best.items():
        print(f"  {k:32s} {s * 1e3:8.1f} ms  {mb / s:8.1f} MB/s")


if __name__ == "__main__":
    main()
