"""tf.io (TF1) and its record files, Example parsing, string decoding and tf.io.gfile: TFRecordWriter,
tf_record_iterator, parse_example, decode_raw, decode_csv, read_file, ... (see tfplus.io.tfrecord,
tfplus.io.parsing, tfplus.io.string_ops). A name tfplus lacks raises UnsupportedError.

    import tfplus as tf
    with tf.io.TFRecordWriter("data.tfrecord") as w:
        w.write(tf.train.Example(features=tf.train.Features(feature={...})).SerializeToString())
"""
from __future__ import annotations

from tfplus import gfile as _gfile
from tfplus.io.parsing import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    parse_example,
    parse_single_example,
    parse_single_sequence_example,
)
from tfplus.io.png import decode_image, decode_png, encode_png
from tfplus.io.string_ops import (
    decode_base64,
    decode_csv,
    decode_raw,
    encode_base64,
    matching_files,
    parse_tensor,
    read_file,
    serialize_tensor,
    write_file,
)
from tfplus.io.tfrecord import TFRecordCompressionType, TFRecordOptions, TFRecordWriter, tf_record_iterator
from tfplus.unsupported import namespace as _namespace

__all__ = ["FixedLenFeature", "FixedLenSequenceFeature", "VarLenFeature", "parse_example", "parse_single_example",
           "parse_single_sequence_example", "decode_csv", "decode_raw", "matching_files", "parse_tensor",
           "read_file", "serialize_tensor", "write_file", "TFRecordCompressionType", "TFRecordOptions",
           "TFRecordWriter", "tf_record_iterator", "gfile", "decode_png", "encode_png",
           "decode_image", "decode_base64", "encode_base64"]

# tf.io.gfile: TF2's lower-case names for tf.gfile's functions.
gfile = _namespace("tf.io.gfile", GFile=_gfile.GFile, exists=_gfile.Exists, glob=_gfile.Glob,
                   makedirs=_gfile.MakeDirs, mkdir=_gfile.MkDir, listdir=_gfile.ListDirectory,
                   remove=_gfile.Remove, rename=_gfile.Rename, copy=_gfile.Copy, rmtree=_gfile.DeleteRecursively,
                   isdir=_gfile.IsDirectory, walk=_gfile.Walk, stat=_gfile.Stat)

from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.io")
