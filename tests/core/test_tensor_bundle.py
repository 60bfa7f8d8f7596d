"""TensorFlow's checkpoint format (tfplus/tensor_bundle.py) and CRC32C: bundles written here read in
TensorFlow and the other way round, and damaged or hostile files fail with a clear DataLossError."""
import os
import struct
import tracemalloc

import numpy as np
import pytest

import tfplus as tf
from tfplus import crc32c
from tfplus import tensor_bundle as tb
from tfplus.proto import tensor_bundle_pb2


def _values():
    rng = np.random.default_rng(0)
    return {
        "conv/w": rng.standard_normal((3, 3, 2, 4)).astype(np.float32), "d": np.float64(3.25),
        "h": np.float16([1.5, -2]), "i8": np.int8([-1, 2]), "i16": np.int16([300, -3]),
        "i32": np.int32([[1], [2]]), "i64": np.arange(5, dtype=np.int64), "u8": np.uint8([0, 255]),
        "flags": np.array([True, False, True]), "empty": np.zeros((0, 3), np.float32),
        "meta": np.array(b'{"epoch": 3}', dtype=object),
        "names": np.array([b"", b"xy", b"z" * 200], dtype=object),
    }


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if b.dtype == object:
        return a.shape == b.shape and list(a.reshape(-1)) == list(b.reshape(-1))
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- CRC32C --------------------------------------------------------------------------------------------------
def test_crc32c_known_values_and_the_lane_path():
    assert crc32c.value(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert crc32c.value(bytes(32)) == 0x8A9136AA and crc32c.value(b"\xff" * 32) == 0x62A8AB43  # RFC 3720
    assert crc32c.unmask(crc32c.mask(0x12345678)) == 0x12345678 and crc32c.mask(0) == 0xA282EAD8
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 4 * crc32c._LANES * 20 + 13, dtype=np.uint8).tobytes()  # lanes + a tail
    slow = crc32c._extend_loop(0xFFFFFFFF, data) ^ 0xFFFFFFFF
    assert crc32c.value(data) == slow
    assert crc32c.extend(crc32c.value(data[:1000]), data[1000:]) == slow


# -- both ways with TensorFlow -------------------------------------------------------------------------------
def test_tensorflow_reads_what_tfplus_writes(tf1, tmp_path, monkeypatch):
    monkeypatch.setattr(tb, "_BLOCK_SIZE", 256)  # many index blocks, as a large checkpoint has
    values = _values()
    values.update({f"many/v{i:03d}": np.float32([i]) for i in range(100)})
    prefix = str(tmp_path / "ours")
    tb.write_bundle(prefix, values)
    assert sorted(os.listdir(tmp_path)) == ["ours.data-00000-of-00001", "ours.index"]
    reader = tf1.train.NewCheckpointReader(prefix)
    assert reader.get_variable_to_shape_map() == {k: list(np.shape(v)) for k, v in values.items()}
    for key, value in values.items():
        assert _same(reader.get_tensor(key), value), key
    ours = tb.BundleReader(prefix)  # and so do we, index blocks and all
    assert sorted(ours.keys()) == sorted(values) and _same(ours.read("many/v099"), np.float32([99]))


def test_tfplus_reads_what_tensorflow_writes(tf1, tmp_path):
    values = _values()
    g = tf1.Graph()
    with g.as_default():
        for key, value in values.items():
            tf1.Variable(value.astype(bytes) if value.dtype == object else value, name=key)
        saver = tf1.train.Saver()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            prefix = saver.save(sess, str(tmp_path / "theirs"))
    reader = tb.BundleReader(prefix)
    assert sorted(reader.keys()) == sorted(values)
    for key, value in values.items():
        assert _same(reader.read(key), value), key
        assert reader.shape(key) == np.shape(value)
    assert reader.dtype("meta") is tf.string and reader.dtype("h") is tf.float16


def test_partitioned_variables_are_refused_clearly(tf1, tmp_path):
    g = tf1.Graph()
    with g.as_default():
        tf1.get_variable("emb", shape=[6, 2], partitioner=tf1.fixed_size_partitioner(2))
        saver = tf1.train.Saver()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            prefix = saver.save(sess, str(tmp_path / "part"))
    reader = tb.BundleReader(prefix)
    assert reader.keys() == ["emb"] and reader.shape("emb") == (6, 2)  # the slices' keys are not listed
    with pytest.raises(tf.errors.InvalidArgumentError, match="'emb' is saved in 2 slices .*partitioned"):
        reader.read("emb")


# -- damage and hostile files --------------------------------------------------------------------------------
def _small(tmp_path):
    prefix = str(tmp_path / "m")
    tb.write_bundle(prefix, {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.int64([7])})
    return prefix


def test_every_flipped_bit_of_the_index_is_caught_or_harmless(tmp_path):
    prefix = _small(tmp_path)
    good = open(tb.index_path(prefix), "rb").read()
    for pos in range(len(good)):
        bad = bytearray(good)
        bad[pos] ^= 0x10
        open(tb.index_path(prefix), "wb").write(bytes(bad))
        try:
            reader = tb.BundleReader(prefix)
            values = {k: reader.read(k) for k in reader.keys()}
        except tf.errors.DataLossError as e:
            assert repr(prefix) in str(e), str(e)
        else:  # only the footer's zero padding carries nothing
            assert len(good) - 48 <= pos < len(good) - 8, pos
            assert set(values) == {"a", "b"}


def test_damaged_data_files(tmp_path):
    prefix = _small(tmp_path)
    data = tb.data_path(prefix)
    good = open(data, "rb").read()
    bad = bytearray(good)
    bad[5] ^= 1
    open(data, "wb").write(bytes(bad))
    reader = tb.BundleReader(prefix)
    with pytest.raises(tf.errors.DataLossError, match="'a' does not match its checksum"):
        reader.read("a")
    assert reader.read("b").tolist() == [7]  # the other tensor is intact
    open(data, "wb").write(good[:-3])
    with pytest.raises(tf.errors.DataLossError, match=r"'b' spans bytes \[24, 32\) .* which has 29 \(truncated"):
        reader.read("b")
    open(data, "wb").write(good)
    reader = tb.BundleReader(prefix)
    os.remove(data)  # e.g. by another process's max_to_keep: the open reader still has the file
    assert reader.read("a").shape == (2, 3)
    with pytest.raises(tf.errors.DataLossError, match="data file .* is missing"):
        tb.BundleReader(prefix).read("a")
    open(tb.index_path(prefix), "wb").write(b"short")
    with pytest.raises(tf.errors.DataLossError, match="fewer than a table's 48-byte footer"):
        tb.BundleReader(prefix)
    with pytest.raises(tf.errors.NotFoundError, match="does not exist"):
        tb.BundleReader(str(tmp_path / "nothing"))


def _hostile(tmp_path, **fields):
    """A well-formed index whose one entry `x` lies about itself; the data file holds 8 bytes."""
    prefix = str(tmp_path / "h")
    open(tb.data_path(prefix), "wb").write(bytes(8))
    entry = tensor_bundle_pb2.BundleEntryProto(dtype=tf.float32.as_datatype_enum, offset=0, size=8,
                                               crc32c=crc32c.mask(crc32c.value(bytes(8))))
    entry.shape.dim.add(size=2)
    for name, value in fields.items():
        if name == "dims":
            del entry.shape.dim[:]
            for d in value:
                entry.shape.dim.add(size=d)
        else:
            setattr(entry, name, value)
    tb._write_index(prefix, {"x": entry}, 1)
    return tb.BundleReader(prefix)


@pytest.mark.parametrize("fields, message", [
    ({}, None),
    ({"dims": [2**40, 2**40]}, r"says 8 bytes but a float32 tensor of shape \[1099511627776, 1099511627776\]"),
    ({"dims": [2**31], "size": 2**33}, r"spans bytes \[0, 8589934592\) .* which has 8"),
    ({"offset": 2**62}, r"spans bytes \[4611686018427387904"),
    ({"dims": [-1]}, "unknown shape"),
    ({"shard_id": 3}, "names data file 3 of 1"),
    ({"dtype": 7, "dims": [10**9]}, "1000000000 strings cannot fit in 8 bytes"),
    ({"crc32c": 1}, "does not match its checksum"),
])
def test_declared_sizes_are_checked_before_anything_is_allocated(tmp_path, fields, message):
    reader = _hostile(tmp_path, **fields)
    if message is None:
        assert reader.read("x").tolist() == [0.0, 0.0]
        return
    tracemalloc.start()
    try:
        with pytest.raises(tf.errors.DataLossError, match=message):
            reader.read("x")
        assert tracemalloc.get_traced_memory()[1] < 10**6  # refused before anything large was allocated
    finally:
        tracemalloc.stop()


def test_unsupported_dtype_and_byte_order(tmp_path):
    reader = _hostile(tmp_path, dtype=14)  # DT_BFLOAT16
    with pytest.raises(tf.errors.InvalidArgumentError, match="'x' is bfloat16, which tfplus does not support"):
        reader.read("x")
    prefix = str(tmp_path / "big")
    header = tensor_bundle_pb2.BundleHeaderProto(num_shards=1, endianness=1)
    open(tb.index_path(prefix), "wb").write(tb._table_bytes([(b"", header.SerializeToString())]))
    with pytest.raises(tf.errors.DataLossError, match="big-endian"):
        tb.BundleReader(prefix)


def test_merge_bundles(tmp_path):
    first, second = str(tmp_path / "tmp" / "part-0"), str(tmp_path / "tmp" / "part-1")
    os.makedirs(tmp_path / "tmp")
    tb.write_bundle(first, {"a": np.float32([1, 2])})
    tb.write_bundle(second, {"b": np.int32([3])})
    dest = str(tmp_path / "model")
    tb.merge_bundles([first, second], dest)
    assert sorted(os.listdir(tmp_path)) == ["model.data-00000-of-00002", "model.data-00001-of-00002",
                                            "model.index"]
    reader = tb.BundleReader(dest)
    assert reader.num_shards == 2 and reader.read("a").tolist() == [1, 2] and reader.read("b").tolist() == [3]
    os.makedirs(tmp_path / "tmp")  # the merge removed the emptied folder of the parts
    tb.write_bundle(first, {"a": np.float32([1])})
    tb.write_bundle(second, {"a": np.float32([2])})
    with pytest.raises(tf.errors.InvalidArgumentError, match="key 'a' is in two"):
        tb.merge_bundles([first, second], dest)
    with pytest.raises(TypeError, match="must hold bytes or str"):
        tb.write_bundle(str(tmp_path / "bad"), {"o": np.array([5], dtype=object)})


def test_protos_match_tensorflows_descriptors(tf1):
    from tensorflow.core.protobuf import tensor_bundle_pb2 as theirs

    def fields(desc):
        return {f.name: (f.number, f.type, f.is_repeated) for f in desc.fields}
    for name in ("BundleHeaderProto", "BundleEntryProto"):
        assert fields(getattr(tensor_bundle_pb2, name).DESCRIPTOR) == fields(getattr(theirs, name).DESCRIPTOR)
    extent = theirs.BundleEntryProto.DESCRIPTOR.fields_by_name["slices"].message_type.nested_types[0]
    assert fields(tensor_bundle_pb2.TensorSliceProto.Extent.DESCRIPTOR) == fields(extent)


def test_the_footer_layout(tmp_path):
    prefix = _small(tmp_path)
    data = open(tb.index_path(prefix), "rb").read()
    assert struct.unpack("<Q", data[-8:])[0] == 0xDB4775248B80FB57


def test_a_failed_index_write_leaves_nothing_behind(tmp_path, monkeypatch):
    real = tb.atomic_open

    def no_space_for_the_index(path):
        if path.endswith(".index"):
            raise OSError(28, "No space left on device")
        return real(path)
    monkeypatch.setattr(tb, "atomic_open", no_space_for_the_index)
    with pytest.raises(OSError, match="No space"):
        tb.write_bundle(str(tmp_path / "m"), {"a": np.float32([1])})
    assert os.listdir(tmp_path) == []


def test_verify_checks_every_tensor_and_read_gives_the_same_values_after_it(tmp_path):
    prefix = str(tmp_path / "m")
    values = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.array([b"x", b"yz"], dtype=object),
              "h": np.float16([1.5])}
    tb.write_bundle(prefix, values)
    with tb.BundleReader(prefix) as reader:
        reader.verify()
        for _ in range(2):  # from what verify() read, then from the file again
            assert all(np.array_equal(reader.read(k), v) for k, v in values.items())
    data = bytearray(open(tb.data_path(prefix), "rb").read())
    data[-1] ^= 1
    open(tb.data_path(prefix), "wb").write(bytes(data))
    with pytest.raises(tf.errors.DataLossError, match="'s' does not match its checksum"):
        tb.BundleReader(prefix).verify()
