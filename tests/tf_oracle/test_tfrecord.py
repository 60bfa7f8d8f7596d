"""TFRecord files against TensorFlow: the bytes tf.io.TFRecordWriter writes (uncompressed, ZLIB, GZIP, options),
what tf_record_iterator and tf.data.TFRecordDataset read (TensorFlow's files too, several files interleaved), and
damaged or missing files: DataLossError naming the file and the record's offset, NotFoundError."""
import numpy as np
import pytest

import tfplus as tf
from tfplus import crc32c
from tfplus.io import tfrecord

# one past the CRC's 4 KB lane threshold; 300 more for the writer's batches of checksums
RECORDS = [b"", b"x", bytes(range(256)) * 41, "text record"] + [bytes([i % 256]) * (i % 50) for i in range(300)]


def _write(lib, path, options=None, records=RECORDS):
    with lib.io.TFRecordWriter(str(path), options) as w:
        for r in records:
            w.write(r)
    return path.read_bytes()


def _read_all(lib, dataset):
    nxt = lib.data.make_one_shot_iterator(dataset).get_next()
    out = []
    with lib.Session() as sess:
        while True:
            try:
                out.append(sess.run(nxt))
            except lib.errors.OutOfRangeError:
                return out


@pytest.mark.parametrize("options", [None, "", "ZLIB", "GZIP", ("GZIP", 9), ("ZLIB", 1)], ids=str)
def test_files_are_tensorflows_bytes(tf1, tmp_path, options):
    def make(lib):
        if isinstance(options, tuple):
            return lib.io.TFRecordOptions(compression_type=options[0], compression_level=options[1])
        return options
    assert _write(tf, tmp_path / "ours", make(tf)) == _write(tf1, tmp_path / "theirs", make(tf1))


def test_reads_the_files_tensorflow_wrote(tf1, tmp_path):
    expected = [r.encode() if isinstance(r, str) else r for r in RECORDS]
    for kind in ("", "GZIP", "ZLIB"):
        path = tmp_path / f"tf{kind}"
        _write(tf1, path, kind)
        assert list(tf.io.tf_record_iterator(str(path), tf.io.TFRecordOptions(kind))) == expected
        with tf.Graph().as_default():
            assert _read_all(tf, tf.data.TFRecordDataset([str(path)], compression_type=kind)) == expected


@pytest.mark.parametrize("parallel", [None, 2, 3])
def test_files_interleave_as_in_tensorflow(tf1, tmp_path, parallel):
    paths = []
    for k, n in enumerate((3, 1, 4, 2)):
        paths.append(tmp_path / f"f{k}")
        _write(tf, paths[-1], records=[f"{k}:{i}".encode() for i in range(n)])
    names = [str(p) for p in paths]
    with tf1.Graph().as_default():
        expected = _read_all(tf1, tf1.data.TFRecordDataset(tf1.constant(names), num_parallel_reads=parallel))
    with tf.Graph().as_default():
        assert _read_all(tf, tf.data.TFRecordDataset(tf.constant(names), num_parallel_reads=parallel)) == expected
    assert len(expected) == 10


@pytest.mark.parametrize("where, what", [(9, "length's checksum"), (30, "data's checksum"), (-3, "truncated")])
def test_a_damaged_file_is_a_data_loss_error_naming_the_file_and_offset(tf1, tmp_path, where, what):
    path = tmp_path / "damaged.tfrecord"
    data = bytearray(_write(tf, path, records=[b"a" * 10, b"b" * 10]))
    if what == "truncated":
        data = data[:where]
    else:
        data[where] ^= 0x55
    path.write_bytes(bytes(data))
    offset = 0 if where == 9 else 26
    with pytest.raises(tf1.errors.DataLossError):
        list(tf1.io.tf_record_iterator(str(path)))
    with pytest.raises(tf.errors.DataLossError, match=f"at {offset} in '{path}'"):
        list(tf.io.tf_record_iterator(str(path)))
    records = tf.io.tf_record_iterator(str(path))
    if offset:  # the sound record before the damaged one comes first
        assert next(records) == b"a" * 10
    with pytest.raises(tf.errors.DataLossError):
        next(records)
    with tf.Graph().as_default():
        with pytest.raises(tf.errors.DataLossError, match=str(path)):
            _read_all(tf, tf.data.TFRecordDataset(str(path)))


def test_a_missing_file_is_not_found_and_a_wrong_compression_is_data_loss(tf1, tmp_path):
    with tf.Graph().as_default():
        with pytest.raises(tf.errors.NotFoundError, match="missing.tfrecord"):
            _read_all(tf, tf.data.TFRecordDataset(str(tmp_path / "missing.tfrecord")))
    _write(tf, tmp_path / "plain")
    with pytest.raises(tf.errors.DataLossError, match="GZIP"):
        list(tf.io.tf_record_iterator(str(tmp_path / "plain"), "GZIP"))
    with pytest.raises(ValueError, match="compression_type 'LZ4'"):
        tf.io.TFRecordWriter(str(tmp_path / "x"), "LZ4")


def test_a_closed_writer_refuses_records(tmp_path):
    w = tf.python_io.TFRecordWriter(str(tmp_path / "w"))
    w.close()
    with pytest.raises(tf.errors.FailedPreconditionError, match="closed"):
        w.write(b"late")


def test_record_framing_is_length_crc_data_crc():
    encoded = tfrecord.encode_record(b"abc")
    assert len(encoded) == 8 + 4 + 3 + 4 and encoded[:8] == (3).to_bytes(8, "little")
    assert encoded[12:15] == b"abc"


@pytest.mark.parametrize("kind", ["", "GZIP"])
def test_text_line_and_fixed_length_datasets_read_as_tensorflows(tf1, tmp_path, kind):
    import gzip
    text = b"header\nline one\r\nline two\n\nlast without newline"
    body = b"HDR" + bytes(range(18)) + b"FOOTER"
    for name, data in (("t.txt", text), ("f.bin", body)):
        (tmp_path / name).write_bytes(gzip.compress(data, mtime=0) if kind else data)
    results = []
    for lib in (tf1, tf):
        with lib.Graph().as_default():
            results.append([
                _read_all(lib, lib.data.TextLineDataset(str(tmp_path / "t.txt"), compression_type=kind).skip(1)),
                _read_all(lib, lib.data.FixedLengthRecordDataset(str(tmp_path / "f.bin"), 6, header_bytes=3,
                                                                 footer_bytes=6, compression_type=kind)),
            ])
    assert results[0] == results[1]
    assert results[1][0] == [b"line one", b"line two", b"", b"last without newline"]
    assert results[1][1] == [bytes(range(k, k + 6)) for k in (0, 6, 12)]
    (tmp_path / "odd.bin").write_bytes(b"HDR" + bytes(20))  # not a whole number of records
    for lib in (tf1, tf):
        with lib.Graph().as_default(), pytest.raises(lib.errors.InvalidArgumentError, match="multiple"):
            _read_all(lib, lib.data.FixedLengthRecordDataset(str(tmp_path / "odd.bin"), 6, header_bytes=3))


def test_filenames_from_a_fed_placeholder_and_a_list(tmp_path):
    paths = [tmp_path / "a", tmp_path / "b"]
    for k, p in enumerate(paths):
        _write(tf, p, records=[bytes([k]) * 3])
    names = tf.placeholder(tf.string, [None])
    it = tf.data.make_initializable_iterator(tf.data.TFRecordDataset(names))
    nxt = it.get_next()
    with tf.Session() as sess:
        sess.run(it.initializer, {names: [str(paths[1]), str(paths[0])]})
        assert [sess.run(nxt), sess.run(nxt)] == [b"\1\1\1", b"\0\0\0"]
    assert np.asarray(tf.data.TFRecordDataset([str(p) for p in paths]).output_shapes.as_list()).size == 0


def test_record_checksums_taken_together_are_each_records():
    """crc32c.values (the reader's checksums, many records at once in lanes) equals value() of each: lengths
    that are and are not whole words, empty, and groups too small for lanes."""
    rng = np.random.default_rng(11)
    buffers = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 300, 150)]
    buffers += [b"", b"\0", b"\0\0\0\0", bytes(4096 + 3)]
    assert crc32c.values(buffers) == [crc32c.value(b) for b in buffers]
    assert crc32c.values(buffers[:5]) == [crc32c.value(b) for b in buffers[:5]]
    assert crc32c.values([b"123456789"] * 20) == [0xE3069283] * 20
