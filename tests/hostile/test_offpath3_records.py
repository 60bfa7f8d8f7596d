"""A killed TFRecordWriter's compressed file, read as TensorFlow reads it: the whole records before the tear, then a
DataLossError naming the file and the torn record's offset (a stream cut at a record's end, as after flush(), reads
whole); a damaged stream keeps the records before the damage and names the file. (Such files gave no record.)"""
import re
import shutil

import numpy as np
import pytest

import tfplus as tf

RECORDS = [np.random.default_rng(i).bytes(300) for i in range(200)]  # incompressible: the cut falls mid-stream


def _read(lib, path, kind) -> tuple[list, str | None]:
    """The records read before an error, and the error's message (None: none)."""
    got = []
    try:
        for r in lib.io.tf_record_iterator(str(path), lib.io.TFRecordOptions(kind)):
            got.append(r)
    except lib.errors.DataLossError as e:
        return got, e.message
    return got, None


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_a_compressed_file_cut_short_reads_as_in_tensorflow(tf1, tmp_path, kind):
    path = tmp_path / "torn.tfrecord"
    with tf.io.TFRecordWriter(str(path), kind) as w:
        for r in RECORDS:
            w.write(r)
    path.write_bytes(path.read_bytes()[:len(RECORDS) * 300 * 2 // 3])
    theirs, their_error = _read(tf1, path, kind)
    ours, our_error = _read(tf, path, kind)
    assert their_error is not None and 0 < len(theirs) < len(RECORDS)
    assert ours == theirs == RECORDS[:len(theirs)]
    offset = re.search(r"truncated record at (\d+)", their_error).group(1)
    assert our_error is not None and f"truncated record at {offset} in '{path}'" in our_error


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_a_writer_killed_after_flush_leaves_its_records_readable_as_in_tensorflow(tf1, tmp_path, kind):
    path, killed = tmp_path / "live.tfrecord", tmp_path / "killed.tfrecord"
    with tf.io.TFRecordWriter(str(path), kind) as w:
        for r in RECORDS[:50]:
            w.write(r)
        w.flush()
        shutil.copyfile(path, killed)  # the file as a kill now would leave it: no end of stream
    assert _read(tf, killed, kind) == _read(tf1, killed, kind) == (RECORDS[:50], None)


def test_a_damaged_compressed_stream_keeps_the_records_before_and_names_the_file(tmp_path):
    path = tmp_path / "damaged.tfrecord"
    records = [bytes(np.random.default_rng(i).integers(97, 101, 2000, dtype=np.uint8)) for i in range(200)]
    with tf.io.TFRecordWriter(str(path), "ZLIB") as w:  # compressible: deflate's coded blocks, not stored ones
        for r in records:
            w.write(r)
    data = bytearray(path.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = bytes(64)  # zlib notices at the stream's end (its Adler-32)
    path.write_bytes(bytes(data))
    ours, error = _read(tf, path, "ZLIB")
    assert error is not None and str(path) in error  # the damaged record's checksum, or the stream's
    assert len(ours) > 0 and ours == records[:len(ours)]
