"""tf.io's parsing and string ops against TensorFlow, the cases scripts hit beyond tests/io_scripts.py: CSV quoting,
NA values, column selection and errors; decode_raw's errors; Example parsing's errors (missing, mistyped,
mis-sized features, bytes that are no Example); string splitting and substr edge cases; PNG files TensorFlow
wrote (libpng's row filters) and palette files; the APIs tfplus refuses."""
import struct
import zlib

import numpy as np
import pytest
from io_scripts import same

import tfplus as tf
from tfplus.unsupported import UnsupportedError


def _run_both(tf1, build, feeds=None):
    results = []
    for lib in (tf1, tf):
        with lib.Graph().as_default(), lib.Session() as sess:
            fetches = build(lib)
            results.append(sess.run(fetches, feeds(lib, fetches) if feeds else None))
    same(results[0], results[1])
    return results[1]


def _errors_both(tf1, build, error: str, match: str):
    """build(lib) -> fetches whose run fails in TensorFlow and tfplus with the error class `error`."""
    for lib in (tf1, tf):
        with lib.Graph().as_default(), lib.Session() as sess:
            fetches = build(lib)
            with pytest.raises(getattr(lib.errors, error), match=match if lib is tf else None):
                sess.run(fetches)


def test_decode_csv_quotes_na_values_columns_and_dtypes(tf1):
    lines = ['1,"a, b",2.5,7', '2,"say ""hi""",,8', '3,plain,NA,9']
    _run_both(tf1, lambda t: t.decode_csv(t.constant(lines), [[0], [""], [-1.0], t.constant([0], t.int64)],
                                          na_value="NA"))
    _run_both(tf1, lambda t: t.io.decode_csv(t.constant(["1;x;2.5", "4;y;5"]), [[0.0], [0.0]], field_delim=";",
                                             select_cols=[0, 2]))
    _run_both(tf1, lambda t: t.decode_csv(t.constant([["1.5|2"], ["3|4"]]), [t.constant([], t.float64), [0]],
                                          field_delim="|"))


@pytest.mark.parametrize("line, defaults, match", [
    ("1,2", [[0], [0], [0]], "Expect 3 fields but have 2 in record 0"),
    ("1,,3", [[0], [], [0]], "Field 1 is required but missing in record 0"),
    ("1,x", [[0], [0]], "Field 1 in record 0 is not a valid int32"),
])
def test_decode_csv_errors(tf1, line, defaults, match):
    def build(t):
        return t.decode_csv(t.constant([line]), [t.constant(d, t.int32) for d in defaults])
    _errors_both(tf1, build, "InvalidArgumentError", match)


def test_decode_raw_errors_and_endianness(tf1):
    _errors_both(tf1, lambda t: t.decode_raw(t.constant([b"abcd", b"ab"]), t.int16), "InvalidArgumentError",
                 "same size")
    _errors_both(tf1, lambda t: t.decode_raw(t.constant(b"abc"), t.int32), "InvalidArgumentError",
                 "not a multiple of 4")
    _run_both(tf1, lambda t: [t.decode_raw(t.constant(b"\x01\x02\x03\x04"), t.int32, little_endian=False),
                              t.decode_raw(t.constant([[b"\x00\x80"]]), t.int8)])


def _example(**features) -> bytes:
    from tfplus.proto import example_pb2
    e = example_pb2.Example()
    for key, values in features.items():
        kind = "bytes_list" if isinstance(values[0], bytes) else "float_list" if isinstance(values[0], float) \
            else "int64_list"
        getattr(e.features.feature[key], kind).value.extend(values)
    return e.SerializeToString()


@pytest.mark.parametrize("record, features, match", [
    (_example(a=[1]), {"b": ("fixed", [], "int64")}, "Feature: b .* is required"),
    (_example(a=[1]), {"a": ("fixed", [], "float32")}, "Data types don't match"),
    (_example(a=[1, 2, 3]), {"a": ("fixed", [2], "int64")}, "Key: a"),
    (b"\x0a\x50 truncated", {"a": ("fixed", [], "int64")}, "Could not parse example input"),
    (_example(a=[1, 2, 3]), {"a": ("seq", [2], "int64")}, "Key: a"),
])
def test_parse_example_errors(tf1, record, features, match):
    def spec(t, kind, shape, dtype):
        if kind == "fixed":
            return t.FixedLenFeature(shape, getattr(t, dtype))
        return t.FixedLenSequenceFeature(shape, getattr(t, dtype), allow_missing=True)

    def build(t):
        return t.parse_single_example(t.constant(record), {k: spec(t, *v) for k, v in features.items()})
    _errors_both(tf1, build, "InvalidArgumentError", match)


def test_parse_example_of_examples_tensorflow_serialized(tf1):
    records = []
    for i in range(3):
        e = tf1.train.Example()
        e.features.feature["v"].float_list.value.extend([0.5] * i)
        e.features.feature["s"].bytes_list.value.append(b"x" * i)
        records.append(e.SerializeToString())
        ours = tf.train.Example.FromString(records[-1]).features.feature
        assert list(ours["v"].float_list.value) == [0.5] * i and list(ours["s"].bytes_list.value) == [b"x" * i]

    def build(t):
        return t.io.parse_example(t.constant(records), {"v": t.io.VarLenFeature(t.float32),
                                                        "s": t.io.FixedLenFeature([], t.string, default_value="")})
    _run_both(tf1, build)


def test_string_split_and_substr_edge_cases(tf1):
    def build(t):
        s = t.constant(["a  b", "", " c "])
        return {"keep_empty": t.string_split(s, " ", skip_empty=False), "two_delims": t.string_split(
            t.constant(["a,b;c"]), delimiter=",;"), "maxsplit": t.strings.split(t.constant(["a b c d"]), maxsplit=2),
            "whitespace": t.strings.split(s), "substr_neg": t.strings.substr(t.constant(["hello", "abc"]), -2, 5),
            "length_utf8": t.strings.length(t.constant(["h\u00e9"]), unit="UTF8_CHAR")}
    _run_both(tf1, build)
    _errors_both(tf1, lambda t: t.substr(t.constant(["ab"]), 3, 1), "InvalidArgumentError", "out of range")
    _errors_both(tf1, lambda t: t.string_to_number(t.constant(["1x"])), "InvalidArgumentError",
                 "could not correctly convert")


def _png(tf1, image: np.ndarray) -> bytes:
    with tf1.Graph().as_default(), tf1.Session() as sess:
        return sess.run(tf1.image.encode_png(image))


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_decode_png_of_files_tensorflow_wrote(tf1, channels):
    """libpng picks a row filter per row (sub, up, average, paeth): smooth gradients and noise use them all."""
    y, x = np.mgrid[0:23, 0:17]
    smooth = np.stack([(x * 7 + y * 3 + 10 * c) % 256 for c in range(channels)], -1)
    noise = np.random.default_rng(channels).integers(0, 256, (23, 17, channels))
    image = np.concatenate([smooth, noise], axis=0).astype(np.uint8)
    data = _png(tf1, image)
    for wanted in (0, 3, 4) + ((1,) if channels <= 2 else ()):
        _run_both(tf1, lambda t, w=wanted: t.image.decode_png(t.constant(data), channels=w))
    # and TensorFlow reads what tfplus writes
    with tf.Graph().as_default(), tf.Session() as sess:
        ours = sess.run(tf.image.encode_png(tf.constant(image)))
    with tf1.Graph().as_default(), tf1.Session() as sess:
        assert np.array_equal(sess.run(tf1.image.decode_png(ours)), image)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def test_decode_png_palette_with_transparency_and_low_bit_depth(tf1):
    """A 4-bit palette image with a tRNS chunk, and a 2-bit gray one (rows packed, scaled to 8 bits)."""
    palette = bytes(np.random.default_rng(4).integers(0, 256, 3 * 5, dtype=np.uint8))
    rows = [bytes([0, 0x01, 0x23, 0x40, 0x10]), bytes([0, 0x44, 0x32, 0x10, 0x00])]  # 7 pixels of 4 bits a row
    pal = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 7, 2, 4, 3, 0, 0, 0)) +
           _chunk(b"PLTE", palette) + _chunk(b"tRNS", bytes([255, 0, 128])) +
           _chunk(b"IDAT", zlib.compress(b"".join(rows))) + _chunk(b"IEND", b""))
    gray = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 5, 1, 2, 0, 0, 0, 0)) +
            _chunk(b"IDAT", zlib.compress(bytes([0, 0b00011011, 0b11000000]))) + _chunk(b"IEND", b""))
    _run_both(tf1, lambda t: [t.image.decode_png(t.constant(pal)), t.image.decode_png(t.constant(pal), channels=3),
                              t.image.decode_png(t.constant(gray)), t.image.decode_png(t.constant(gray), channels=3)])


def test_damaged_png_and_jpeg_are_refused_clearly():
    with tf.Graph().as_default(), tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="not a PNG file"):
            sess.run(tf.image.decode_png(tf.constant(b"\xff\xd8\xff not png")))
    with pytest.raises(UnsupportedError, match="tf.image.decode_jpeg .*decode_png"):
        tf.image.decode_jpeg  # noqa: B018
    with pytest.raises(UnsupportedError, match="tf.train.QueueRunner .*TFRecordDataset"):
        tf.train.QueueRunner  # noqa: B018
    with pytest.raises(UnsupportedError, match="tf.io.no_such_op"):
        tf.io.no_such_op  # noqa: B018


def test_serialized_tensors_are_tensorflows_bytes(tf1):
    def build(t):
        return [t.serialize_tensor(t.constant(np.arange(6, dtype=np.int64).reshape(2, 3))),
                t.io.serialize_tensor(t.constant([[True, False]])), t.serialize_tensor(t.constant("x"))]
    ours = _run_both(tf1, build)
    with tf.Graph().as_default(), tf.Session() as sess:
        back = sess.run(tf.parse_tensor(tf.constant(ours[0]), tf.int64))
        assert back.tolist() == [[0, 1, 2], [3, 4, 5]]
        with pytest.raises(tf.errors.InvalidArgumentError, match="Type mismatch"):
            sess.run(tf.parse_tensor(tf.constant(ours[0]), tf.float32))
