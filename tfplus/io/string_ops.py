"""String and file ops on the host, with TensorFlow's names and results: decode_raw, decode_csv, string_split /
strings.split (-> tf.SparseTensor), strings.to_number, join, length, substr, regex_replace, lower, upper, strip,
as_string, read_file, write_file, serialize_tensor, parse_tensor, matching_files. Strings are bytes.

    import tfplus as tf
    pixels = tf.decode_raw(record, tf.uint8)          # [n] uint8 from a string scalar
    a, b = tf.decode_csv(lines, record_defaults=[[0.0], [0]])
"""
from __future__ import annotations

import base64
import binascii
import builtins  # NOTE: substr's parameter `len` (TF's name) shadows the builtin
import csv
import glob as _glob
import os
import re

import numpy as np

from tfplus import dtypes as _dt
from tfplus import errors
from tfplus.framework import Tensor, convert_to_tensor
from tfplus.ops.host_ops import bytes_array, host_op, object_vector, to_bytes
from tfplus.sparse import SparseTensor
from tfplus.tensor_util import make_ndarray, make_tensor_proto

__all__ = ["decode_raw", "decode_csv", "string_split", "split", "string_to_number", "to_number", "join",
           "reduce_join", "length", "substr", "regex_replace", "lower", "upper", "strip", "as_string", "read_file",
           "write_file", "serialize_tensor", "parse_tensor", "matching_files", "regex_full_match", "encode_base64",
           "decode_base64", "ngrams"]


def _strings(value) -> Tensor:
    return convert_to_tensor(value, dtype=_dt.string)


def _shape(t: Tensor):
    return t.shape.dims_tuple if t.shape.ndims is not None else None


def _invalid(message: str):
    return errors.InvalidArgumentError(None, None, message)


def _map(name: str, fn, t: Tensor, out_dtype, *extra) -> Tensor:
    """An elementwise host op: out[i] = fn(bytes of t[i], *extra values)."""
    def run(values, *args):
        a = bytes_array(values)
        out = np.empty(a.shape, object if out_dtype is _dt.string else out_dtype.np)
        for i, v in np.ndenumerate(a):
            out[i] = fn(v, *args)
        return [out]
    return host_op(name, run, [t, *extra], [out_dtype], [_shape(t)])[0]


# -- decode_raw ------------------------------------------------------------------------------------------------
def decode_raw(input_bytes=None, out_type=None, little_endian=True, fixed_length=None, name=None, bytes=None):
    """Each string's bytes reinterpreted as a vector of `out_type` numbers: shape input.shape + [n]. All strings
    must be the same size (a multiple of the dtype's); fixed_length pads or cuts them to that many bytes."""
    value = input_bytes if input_bytes is not None else bytes
    out_type = _dt.as_dtype(out_type)
    if out_type is _dt.string:
        raise TypeError("decode_raw: out_type must be a number dtype (tf.uint8, tf.float32, ...), not tf.string")
    t = _strings(value)
    np_type = np.dtype(out_type.np).newbyteorder("<" if little_endian else ">")
    size = np_type.itemsize

    def run(values):
        a = bytes_array(values)
        if fixed_length is not None:
            a = np.vectorize(lambda s: s[:fixed_length].ljust(fixed_length, b"\0"), otypes=[object])(a) \
                if a.size else a
        lengths = {len(s) for s in a.reshape(-1)}
        if len(lengths) > 1:
            first = len(a.reshape(-1)[0])
            k = next(i for i, s in enumerate(a.reshape(-1)) if len(s) != first)
            raise _invalid(f"DecodeRaw requires input strings to all be the same size, but element {k} has size "
                           f"{len(a.reshape(-1)[k])} != {first}")
        n = lengths.pop() if lengths else 0
        if n % size:
            raise _invalid(f"Input to DecodeRaw has length {n} that is not a multiple of {size}, the size of "
                           f"{out_type.name}")
        flat = [np.frombuffer(s, np_type) for s in a.reshape(-1)]
        out = np.stack(flat) if flat else np.zeros((0, n // size), np_type)
        return [out.astype(out_type.np).reshape(a.shape + (n // size,))]
    shape = _shape(t)
    last = None if fixed_length is None else fixed_length // size
    return host_op(name or "DecodeRaw", run, [t], [out_type], [None if shape is None else shape + (last,)])[0]


# -- decode_csv ------------------------------------------------------------------------------------------------
def _csv_field(text: bytes, kind: _dt.DType, default, col: int, row: int, na_value: bytes):
    if text == b"" or (na_value and text == na_value):
        if default is None:
            raise _invalid(f"Field {col} is required but missing in record {row}!")
        return default
    try:
        if kind is _dt.string:
            return text
        if kind in (_dt.int32, _dt.int64):
            value = int(text)
            info = np.iinfo(kind.np)
            if not info.min <= value <= info.max:
                raise ValueError
            return value
        return float(text)
    except ValueError:
        raise _invalid(f"Field {col} in record {row} is not a valid {kind.name}: {text!r}") from None


def decode_csv(records, record_defaults, field_delim=",", use_quote_delim=True, name=None, na_value="",
               select_cols=None):
    """Each record (a line of CSV) split into its fields, one output per column, of the dtype of that column's
    default ([1.0] float32, [0] int32, [""] string, an empty tensor: required)."""
    t = _strings(records)
    defaults, kinds = [], []
    for d in record_defaults:
        d = convert_to_tensor(d)
        if d.dtype not in (_dt.float32, _dt.float64, _dt.int32, _dt.int64, _dt.string):
            raise TypeError(f"decode_csv: record_defaults of dtype {d.dtype.name}; use float32, float64, int32, "
                            "int64 or string")
        defaults.append(d)
        kinds.append(d.dtype)
    if select_cols is not None and len(select_cols) != len(kinds):
        raise ValueError(f"decode_csv: {len(select_cols)} select_cols for {len(kinds)} record_defaults")
    delim, na = to_bytes(field_delim), to_bytes(na_value)
    if len(delim) != 1:
        raise ValueError(f"decode_csv: field_delim must be one character, got {field_delim!r}")

    def run(values, *default_values):
        a = bytes_array(values)
        given = [None if np.asarray(v).size == 0 else np.asarray(v).reshape(-1)[0] for v in default_values]
        outs = [np.empty(a.shape, object if k is _dt.string else k.np) for k in kinds]
        for row, (i, line) in enumerate(np.ndenumerate(a)):
            reader = csv.reader([line.decode("utf-8", "surrogateescape")], delimiter=delim.decode(),
                                quotechar='"', quoting=csv.QUOTE_MINIMAL if use_quote_delim else csv.QUOTE_NONE,
                                strict=use_quote_delim)
            try:
                fields = [f.encode("utf-8", "surrogateescape") for f in next(reader, [""])]
            except csv.Error as e:
                raise _invalid(f"Quote error in record {row}: {e}") from None
            cols = select_cols if select_cols is not None else range(len(kinds))
            if select_cols is None and len(fields) != len(kinds):
                raise _invalid(f"Expect {len(kinds)} fields but have {len(fields)} in record {row}")
            for k, c in enumerate(cols):
                if c >= len(fields):
                    raise _invalid(f"Expect at least {c + 1} fields but have {len(fields)} in record {row}")
                outs[k][i] = _csv_field(fields[c], kinds[k], given[k], c, row, na)
        return outs
    return host_op(name or "DecodeCSV", run, [t, *defaults], kinds, [_shape(t)] * len(kinds))


# -- splitting ---------------------------------------------------------------------------------------------------
def _split_sparse(name: str, t: Tensor, split_one) -> SparseTensor:
    def run(values):
        a = bytes_array(values).reshape(-1)
        parts = [split_one(s) for s in a]
        idx = [[i, j] for i, p in enumerate(parts) for j in range(len(p))]
        out = object_vector([w for p in parts for w in p])
        return [np.array(idx, np.int64).reshape(-1, 2), out,
                np.array([len(a), max((len(p) for p in parts), default=0)], np.int64)]
    if t.shape.ndims not in (None, 1):
        raise ValueError(f"{name}: the input must be a vector of strings, got shape {t.shape}")
    indices, values, dense_shape = host_op(name, run, [t], [_dt.int64, _dt.string, _dt.int64],
                                           [(None, 2), (None,), (2,)])
    return SparseTensor(indices, values, dense_shape)


def string_split(source, sep=None, skip_empty=True, delimiter=None, result_type="SparseTensor", name=None):
    """TF1's tf.string_split: each string split at every character of `delimiter` (default " "; "" splits
    into characters), empty tokens dropped when skip_empty: a SparseTensor [batch, most tokens]."""
    if result_type != "SparseTensor":
        raise ValueError("string_split: tfplus gives SparseTensors only (result_type='SparseTensor'); it has no "
                         "RaggedTensor")
    delim = to_bytes(delimiter if delimiter is not None else sep if sep is not None else " ")
    chars = set(delim)

    def split_one(s: bytes) -> list:
        if not s:  # an empty string has no tokens, even an empty one (as TensorFlow)
            return []
        if not delim:
            return [bytes([c]) for c in s]
        tokens, cur = [], bytearray()
        for c in s:
            if c in chars:
                tokens.append(bytes(cur))
                cur = bytearray()
            else:
                cur.append(c)
        tokens.append(bytes(cur))
        return [w for w in tokens if w or not skip_empty]
    return _split_sparse(name or "StringSplit", _strings(source), split_one)


def split(input=None, sep=None, maxsplit=-1, result_type="SparseTensor", source=None, name=None):  # noqa: A002
    """tf.strings.split (TF1): each string split as Python's bytes.split(sep, maxsplit) splits it (sep None: runs
    of whitespace): a SparseTensor [batch, most tokens]."""
    if result_type != "SparseTensor":
        raise ValueError("tf.strings.split: tfplus gives SparseTensors only (result_type='SparseTensor'); it has no "
                         "RaggedTensor")
    value = input if input is not None else source
    s = None if sep is None else to_bytes(sep)
    if s == b"":
        raise ValueError("tf.strings.split: sep must not be empty (use tf.strings.bytes_split's way: "
                         "tf.string_split(x, delimiter=''))")
    return _split_sparse(name or "StringSplitV2", _strings(value), lambda b: b.split(s, maxsplit))


# -- conversions ----------------------------------------------------------------------------------------------
def string_to_number(string_tensor, out_type=_dt.float32, name=None) -> Tensor:
    """Each string parsed as a number of `out_type` (float32, float64, int32, int64)."""
    out_type = _dt.as_dtype(out_type)
    if out_type not in (_dt.float32, _dt.float64, _dt.int32, _dt.int64):
        raise TypeError(f"string_to_number: out_type {out_type.name}; use float32, float64, int32 or int64")

    def convert(s: bytes):
        try:
            if out_type.is_floating:
                return float(s.strip())
            v = int(s.strip())
            info = np.iinfo(out_type.np)
            if not info.min <= v <= info.max:
                raise ValueError
            return v
        except ValueError:
            raise _invalid(f"StringToNumberOp could not correctly convert string: {s.decode('utf-8', 'replace')}") \
                from None
    return _map(name or "StringToNumber", convert, _strings(string_tensor), out_type)


to_number = string_to_number


def as_string(input, precision=-1, scientific=False, shortest=False, width=-1, fill="", name=None):  # noqa: A002
    """Each number formatted as a string, as printf formats it (%f / %e / %g for floats, %d for integers; "true"
    and "false" for bools), padded to `width` with `fill` (" " or "0")."""
    t = convert_to_tensor(input)
    if t.dtype is _dt.string:
        raise TypeError("as_string: the input is already a string tensor")
    flags = ("0" if fill == "0" else "") + (str(width) if width > -1 else "")
    if t.dtype.is_floating:
        spec = "%" + flags + (f".{precision}" if precision > -1 else "") + \
            ("g" if shortest else "e" if scientific else "f")
    else:
        spec = "%" + flags + "d"
    if fill not in ("", " ", "0"):
        raise ValueError(f"as_string: fill {fill!r}; use '', ' ' or '0'")

    def run(values):
        out = np.empty(values.shape, object)
        for i, v in np.ndenumerate(values):
            out[i] = (b"true" if v else b"false") if values.dtype == bool else (spec % v).encode()
        return [out]
    return host_op(name or "AsString", run, [t], [_dt.string], [_shape(t)])[0]


# -- elementwise string ops ----------------------------------------------------------------------------------------
def join(inputs, separator="", name=None) -> Tensor:
    """Elementwise concatenation of the string tensors `inputs` (scalars broadcast), with `separator`."""
    tensors = [_strings(x) for x in inputs]
    sep = to_bytes(separator)

    def run(*values):
        arrays = np.broadcast_arrays(*[bytes_array(v) for v in values])
        out = np.empty(arrays[0].shape, object)
        for i in np.ndindex(out.shape):
            out[i] = sep.join(a[i] for a in arrays)
        return [out]
    shapes = [_shape(t) for t in tensors]
    known = None if any(s is None for s in shapes) else max(shapes, key=len)
    return host_op(name or "StringJoin", run, tensors, [_dt.string], [known])[0]


def ngrams(data, ngram_width, separator=" ", pad_values=None, padding_width=None, preserve_short_sequences=False,
           name=None) -> Tensor:
    """The ngrams of each row of dense strings `data` (along its last axis), each `separator`-joined; for a list
    of widths, each width's ngrams in turn. With pad_values (one string or a (left, right) pair) each row is
    first padded by padding_width strings each side (width - 1 by default); with preserve_short_sequences a row
    shorter than a width gives itself as its one ngram (TF's tf.strings.ngrams on a dense tensor)."""
    widths = [ngram_width] if isinstance(ngram_width, int) else list(ngram_width)
    if any(w < 1 for w in widths):
        raise ValueError(f"tf.strings.ngrams: ngram_width {ngram_width} must be positive")
    if pad_values is not None and isinstance(pad_values, (list, tuple)):
        left, right = (to_bytes(v) for v in pad_values)
    else:
        left = right = None if pad_values is None else to_bytes(pad_values)
    sep, t = to_bytes(separator), _strings(data)
    if _shape(t) is not None and len(_shape(t)) == 0:
        raise ValueError("tf.strings.ngrams: data must have at least one dimension (the tokens)")

    def grams(row, width):
        pad = 0 if left is None else (width - 1 if padding_width is None else padding_width)
        tokens = [left] * pad + list(row) + [right] * pad
        if len(tokens) < width:
            return [sep.join(tokens)] if preserve_short_sequences and tokens else []
        return [sep.join(tokens[i:i + width]) for i in range(len(tokens) - width + 1)]

    def run(values):
        a = bytes_array(values)
        rows = a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)
        out = [[g for w in widths for g in grams(r, w)] for r in rows]
        flat = np.empty((len(out), len(out[0]) if out else 0), object)
        for i, r in enumerate(out):
            flat[i, :] = r
        return [flat.reshape(a.shape[:-1] + (flat.shape[1],))]
    shape = _shape(t)
    n = None if shape is None else shape[-1]
    known = None if shape is None or n is None or left is not None or preserve_short_sequences else \
        tuple(shape[:-1]) + (sum(max(n - w + 1, 0) for w in widths),)
    return host_op(name or "StringNGrams", run, [t], [_dt.string], [known])[0]


def reduce_join(inputs, axis=None, keep_dims=False, separator="", name=None, reduction_indices=None,
                keepdims=None) -> Tensor:
    """The strings joined along `axis` (all axes when None) with `separator`."""
    axis = axis if axis is not None else reduction_indices
    keep = bool(keepdims if keepdims is not None else keep_dims)
    sep = to_bytes(separator)

    def run(values):
        a = bytes_array(values)
        axes = tuple(range(a.ndim)) if axis is None else tuple(np.atleast_1d(axis) % max(a.ndim, 1))
        moved = np.moveaxis(a, axes, list(range(a.ndim - len(axes), a.ndim)))
        lead = moved.shape[:a.ndim - len(axes)]
        flat = moved.reshape(lead + (-1,))
        out = np.empty(lead, object)
        for i in np.ndindex(lead):
            out[i] = sep.join(flat[i])
        if keep:
            out = out.reshape([1 if d in axes else n for d, n in enumerate(a.shape)])
        return [out]
    return host_op(name or "ReduceJoin", run, [_strings(inputs)], [_dt.string], [None])[0]


def length(input, name=None, unit="BYTE") -> Tensor:  # noqa: A002
    """Each string's length in bytes (unit "BYTE") or in UTF-8 characters ("UTF8_CHAR"), int32."""
    if unit not in ("BYTE", "UTF8_CHAR"):
        raise ValueError(f"tf.strings.length: unit {unit!r}; use 'BYTE' or 'UTF8_CHAR'")
    count = len if unit == "BYTE" else (lambda s: len(s.decode("utf-8", "replace")))
    return _map(name or "StringLength", count, _strings(input), _dt.int32)


def substr(input, pos, len, name=None, unit="BYTE") -> Tensor:  # noqa: A002
    """Each string's `len` bytes from `pos` (pos may be negative: from the end; pos and len broadcast)."""
    if unit != "BYTE":
        raise ValueError("tf.strings.substr: tfplus supports unit='BYTE' only")
    t = _strings(input)
    p, n = convert_to_tensor(pos, dtype=_dt.int32), convert_to_tensor(len, dtype=_dt.int32)

    def run(values, positions, lengths):
        a, positions, lengths = np.broadcast_arrays(bytes_array(values), positions, lengths)
        out = np.empty(a.shape, object)
        for i in np.ndindex(a.shape):
            s, start = a[i], int(positions[i])
            if not -builtins.len(s) <= start <= builtins.len(s):
                raise _invalid(f"pos {start} out of range for string b'{s.decode('utf-8', 'replace')}' at index "
                               f"{i}")
            start = start + builtins.len(s) if start < 0 else start
            out[i] = s[start:start + max(int(lengths[i]), 0)]
        return [out]
    return host_op(name or "Substr", run, [t, p, n], [_dt.string], [_shape(t)])[0]


def regex_replace(input, pattern, rewrite, replace_global=True, name=None) -> Tensor:  # noqa: A002
    """Each string with the matches of `pattern` replaced by `rewrite` (\\1 .. \\9 name the groups; Python's re
    for RE2: the common syntax is the same)."""
    regex = re.compile(to_bytes(pattern))
    repl = to_bytes(rewrite)
    return _map(name or "StaticRegexReplace", lambda s: regex.sub(repl, s, count=0 if replace_global else 1),
                _strings(input), _dt.string)


def regex_full_match(input, pattern, name=None) -> Tensor:  # noqa: A002
    """Whether each string matches `pattern` as a whole."""
    regex = re.compile(to_bytes(pattern))
    return _map(name or "StaticRegexFullMatch", lambda s: regex.fullmatch(s) is not None, _strings(input),
                _dt.bool_)


def lower(input, name=None, encoding="") -> Tensor:  # noqa: A002
    return _map(name or "StringLower", lambda s: s.lower(), _strings(input), _dt.string)


def upper(input, name=None, encoding="") -> Tensor:  # noqa: A002
    return _map(name or "StringUpper", lambda s: s.upper(), _strings(input), _dt.string)


def strip(input, name=None) -> Tensor:  # noqa: A002
    """Each string without leading and trailing whitespace."""
    return _map(name or "StringStrip", lambda s: s.strip(), _strings(input), _dt.string)


def encode_base64(input, pad=False, name=None) -> Tensor:  # noqa: A002
    """Each string in web-safe base64 ("-" and "_" for "+" and "/"), "=" padding only with pad=True."""
    def encode(s: bytes) -> bytes:
        out = base64.urlsafe_b64encode(s)
        return out if pad else out.rstrip(b"=")
    return _map(name or "EncodeBase64", encode, _strings(input), _dt.string)


def decode_base64(input, name=None) -> Tensor:  # noqa: A002
    """Each web-safe base64 string decoded (with or without its "=" padding)."""
    def decode(s: bytes) -> bytes:
        try:
            return base64.urlsafe_b64decode(s + b"=" * (-len(s) % 4))
        except (binascii.Error, ValueError):
            raise _invalid(f"Invalid character found in base64: {s[:40]!r}") from None
    return _map(name or "DecodeBase64", decode, _strings(input), _dt.string)


# -- files and tensors ------------------------------------------------------------------------------------------
def read_file(filename, name=None) -> Tensor:
    """The bytes of the file `filename` (a string scalar) as a string scalar."""
    def run(path):
        p = to_bytes(path[()]).decode()
        try:
            with open(p, "rb") as f:
                return [np.array(f.read(), object)]
        except FileNotFoundError:
            raise errors.NotFoundError(None, None, f"{p}; No such file or directory") from None
    return host_op(name or "ReadFile", run, [_strings(filename)], [_dt.string], [()])[0]


def write_file(filename, contents, name=None):
    """The op that writes the string scalar `contents` to the file `filename` (its folders are created)."""
    def run(path, data):
        p = to_bytes(path[()]).decode()
        if os.path.dirname(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(to_bytes(data[()]))
        return []
    from tfplus.ops.script_ops import call_py_func
    return call_py_func(run, [_strings(filename), _strings(contents)], [], name=name or "WriteFile")


def serialize_tensor(tensor, name=None) -> Tensor:
    """The TensorProto of `tensor`'s value, serialized (what TensorFlow's SerializeTensor writes)."""
    t = convert_to_tensor(tensor)

    def run(value):
        proto = make_tensor_proto(value if t.dtype is not _dt.string else bytes_array(value), dtype=t.dtype)
        return [np.array(proto.SerializeToString(), object)]
    return host_op(name or "SerializeTensor", run, [t], [_dt.string], [()])[0]


def parse_tensor(serialized, out_type, name=None) -> Tensor:
    """The tensor a serialized TensorProto holds; its dtype must be `out_type`."""
    out_type = _dt.as_dtype(out_type)

    def run(value):
        from tfplus.proto import tensor_pb2
        try:
            proto = tensor_pb2.TensorProto.FromString(to_bytes(value[()]))
        except Exception:
            raise _invalid("Could not parse `serialized` as TensorProto") from None
        arr = make_ndarray(proto)
        if _dt.as_dtype(proto.dtype) is not out_type:
            raise _invalid(f"Type mismatch between parsed tensor ({_dt.as_dtype(proto.dtype).name}) and dtype "
                           f"({out_type.name})")
        return [arr]
    return host_op(name or "ParseTensor", run, [_strings(serialized)], [out_type], [None])[0]


def matching_files(pattern, name=None) -> Tensor:
    """The sorted file names that match the glob `pattern` (a string scalar or vector)."""
    def run(patterns):
        found = sorted({f for p in bytes_array(patterns).reshape(-1) for f in _glob.glob(p.decode())})
        return [object_vector([f.encode() for f in found])]
    return host_op(name or "MatchingFiles", run, [_strings(pattern)], [_dt.string], [(None,)])[0]
