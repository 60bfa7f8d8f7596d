"""The TF1 TFRecord input pipeline's throughput, tfplus against TensorFlow: CIFAR-sized tf.train.Examples (a
3072-byte image and a label) written with TFRecordWriter, then read back through TFRecordDataset -> map(
parse_single_example, decode_raw, reshape, cast) -> batch(128) in a Session, and through tf_record_iterator alone.
Run: `python benchmarks/bench_tfrecord.py [--records 2000] [--repeat 3]` (TensorFlow's figures need the `oracle`
extra). Each figure is the best of `--repeat` runs, the two libraries interleaved.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np


def _write(tf, path: str, images: np.ndarray, labels: np.ndarray) -> float:
    start = time.perf_counter()
    with tf.io.TFRecordWriter(path) as w:
        for image, label in zip(images, labels):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))})).SerializeToString())
    return time.perf_counter() - start


def _iterate(tf, path: str) -> float:
    start = time.perf_counter()
    n = sum(1 for _ in tf.io.tf_record_iterator(path))
    assert n > 0
    return time.perf_counter() - start


def _pipeline(tf, path: str) -> float:
    def parse(record):
        f = tf.parse_single_example(record, {"image": tf.FixedLenFeature([], tf.string),
                                             "label": tf.FixedLenFeature([], tf.int64)})
        image = tf.cast(tf.reshape(tf.decode_raw(f["image"], tf.uint8), [32, 32, 3]), tf.float32)
        return image, f["label"]
    with tf.Graph().as_default():
        images, _ = tf.data.make_one_shot_iterator(tf.data.TFRecordDataset(path).map(parse).batch(128)).get_next()
        with tf.Session() as sess:
            start = time.perf_counter()
            while True:
                try:
                    sess.run(images)
                except tf.errors.OutOfRangeError:
                    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import tfplus
    libs = {"tfplus": tfplus}
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow
        libs["tensorflow"] = tensorflow.compat.v1
        libs["tensorflow"].disable_eager_execution()
    except ImportError:
        print("TensorFlow is not installed: tfplus's figures only")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.records, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, args.records)
    best: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeat):
            for name, tf in libs.items():
                path = os.path.join(folder, f"{name}.tfrecord")
                for what, seconds in (("write", _write(tf, path, images, labels)), ("iterate", _iterate(tf, path)),
                                      ("pipeline", _pipeline(tf, path))):
                    key = (name, what)
                    best[key] = min(best.get(key, float("inf")), seconds)
    print(f"{args.records} CIFAR-sized Examples, records per second (best of {args.repeat}):")
    for what in ("write", "iterate", "pipeline"):
        cells = ", ".join(f"{name} {args.records / best[(name, what)]:,.0f}" for name in libs)
        print(f"  {what:9s} {cells}")


if __name__ == "__main__":
    main()
