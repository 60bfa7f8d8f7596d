"""tf.data's file readers (TF1): TFRecordDataset (tfplus.io.tfrecord's records), TextLineDataset (lines) and
FixedLengthRecordDataset (fixed-size records between a header and a footer). Each element is a string scalar
(bytes); `filenames` is a string, a list of them, or a string tensor (its value read when the iterator starts).
With num_parallel_reads > 1 the files are read in turn, one element from each, as TensorFlow interleaves them.

    import tfplus as tf
    ds = tf.data.TFRecordDataset(["a.tfrecord", "b.tfrecord"]).map(parse).batch(32)
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tfplus import dtypes as _dt
from tfplus import errors
from tfplus.data.dataset_ops import Dataset, _Spec
from tfplus.data.interleave import interleave_streams
from tfplus.framework import Tensor, constant_value
from tfplus.io import tfrecord
from tfplus.ops.host_ops import bytes_array

__all__ = ["TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset"]


class _FileDataset(Dataset):
    """Elements read from each of `filenames` in turn (`num_parallel_reads` of them at once, round robin)."""

    def __init__(self, filenames, compression_type, num_parallel_reads, what: str):
        if isinstance(filenames, Dataset):
            raise TypeError(f"{what}: filenames as a Dataset is not supported; pass a list of names or a string "
                            "tensor (tf.io.matching_files, say)")
        self._files = filenames if isinstance(filenames, Tensor) else \
            bytes_array([filenames] if isinstance(filenames, (str, bytes)) else list(filenames))
        if isinstance(self._files, Tensor) and self._files.dtype is not _dt.string:
            raise TypeError(f"{what}: filenames must be strings, got a {self._files.dtype.name} tensor")
        if isinstance(compression_type, Tensor):
            compression_type = _value(compression_type, int_=False)
        self._compression = tfrecord.compression_type_string(compression_type)
        self._parallel = 1 if num_parallel_reads is None or num_parallel_reads < 1 else int(num_parallel_reads)
        self._structure = _Spec(_dt.string, [])

    def _captured(self):
        return [self._files] if isinstance(self._files, Tensor) else []

    def _read(self, path: str) -> Iterator[bytes]:
        raise NotImplementedError

    def _elements(self, values):
        files = values[id(self._files)] if isinstance(self._files, Tensor) else self._files
        names = [f.decode() for f in bytes_array(files).reshape(-1)]
        # NOTE: each record an object array: NumPy's bytes dtype would drop its trailing NUL bytes
        records = interleave_streams((lambda n=n: self._read(n) for n in names), self._parallel, 1)
        return (np.array(r, object) for r in records)


class TFRecordDataset(_FileDataset):
    """The records of TFRecord files (compression_type "", "ZLIB" or "GZIP")."""

    def __init__(self, filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None):
        super().__init__(filenames, compression_type, num_parallel_reads, "tf.data.TFRecordDataset")

    def _read(self, path):
        return tfrecord.read_records(path, self._compression)


class TextLineDataset(_FileDataset):
    """The lines of text files, without their line ends ("\\n" or "\\r\\n")."""

    def __init__(self, filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None):
        super().__init__(filenames, compression_type, num_parallel_reads, "tf.data.TextLineDataset")

    def _read(self, path):
        data = tfrecord.read_file_bytes(path, self._compression)
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()  # the file's final newline ends the last line; it starts none
        return (line[:-1] if line.endswith(b"\r") else line for line in lines)


class FixedLengthRecordDataset(_FileDataset):
    """Records of record_bytes bytes each, after header_bytes and before footer_bytes of each file, whose body
    must be a whole number of records (InvalidArgumentError, or DataLossError for a compressed file, as in
    TensorFlow)."""

    def __init__(self, filenames, record_bytes, header_bytes=None, footer_bytes=None, buffer_size=None,
                 compression_type=None, num_parallel_reads=None, name=None):
        super().__init__(filenames, compression_type, num_parallel_reads, "tf.data.FixedLengthRecordDataset")
        self._record = int(_value(record_bytes))
        self._header, self._footer = int(_value(header_bytes or 0)), int(_value(footer_bytes or 0))
        if self._record < 1:
            raise ValueError(f"tf.data.FixedLengthRecordDataset: record_bytes must be positive, got {self._record}")

    def _read(self, path):
        data = tfrecord.read_file_bytes(path, self._compression)
        body = data[self._header:len(data) - self._footer]
        if len(body) % self._record:
            error = errors.DataLossError if self._compression else errors.InvalidArgumentError
            raise error(None, None, f"Excluding the header ({self._header} bytes) and footer ({self._footer} "
                        f"bytes), input file \"{path}\" has body length {len(body)} bytes, which is not an exact "
                        f"multiple of the record length ({self._record} bytes).")
        return (body[i:i + self._record] for i in range(0, len(body), self._record))


def _value(x, int_: bool = True):
    """A Python int (or a string) given directly or as a constant tensor."""
    if isinstance(x, Tensor):
        v = constant_value(x)
        if v is None:
            raise ValueError(f"tf.data reader: {x.name} must be a constant (its value is needed to build the "
                             "dataset)")
        v = np.asarray(v).reshape(())[()]
        return int(v) if int_ else v
    return x


