"""Checkpoint ops of TensorFlow-built graphs: SaveV2, RestoreV2, MergeV2Checkpoints (TensorFlow's io_ops).

TensorFlow's Saver puts them in the graphs it exports (`save/SaveV2`, `save/RestoreV2`, `save/restore_all`), so
that `sess.run(saver_def.restore_op_name, {saver_def.filename_tensor_name: path})` restores. tfplus's own
tf.train.Saver reads and writes the same files in Python (tfplus/tensor_bundle.py) and needs none of them.
They read and write files: host only, a cpu kernel and no OpenCL kernel, by design.
"""
from __future__ import annotations

import os

import numpy as np

from tfplus import dtypes
from tfplus import flops as _flops
from tfplus.framework import convert_to_tensor, get_default_graph
from tfplus.ops.array_ops import placeholder_with_default
from tfplus.registry import not_differentiable, register_op
from tfplus.tensor_shape import spec

__all__: list[str] = []  # reached as tfplus.ops.io_ops.save_v2 etc., as TensorFlow's raw ops


def _names(value) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(value, object).reshape(-1)]


def _check_names_and_slices(ins, n: int, op: str) -> None:
    prefix, names, slices = ins[:3]
    for t, rank, what in ((prefix, 0, "prefix"), (names, 1, "tensor_names"), (slices, 1, "shape_and_slices")):
        if t.dtype is not dtypes.string:
            raise TypeError(f"{op}: {what} must be a string tensor, got {t.dtype.name}")
        if t.shape is not None and len(t.shape) != rank:
            raise ValueError(f"{op}: {what} must have rank {rank}, got shape {t.shape}")
    for t, what in ((names, "tensor_names"), (slices, "shape_and_slices")):
        if t.shape is not None and t.shape[0] not in (None, n):
            raise ValueError(f"{op}: {what} has {t.shape[0]} elements for {n} tensors")


# -- SaveV2 --------------------------------------------------------------------------------------------------
def _save_v2_shape(ins, attrs):
    _check_names_and_slices(ins, len(ins) - 3, "SaveV2")
    return []


register_op("SaveV2", inputs=("prefix", "tensor_names", "shape_and_slices", "tensors*"), outputs=(),
            attrs={"dtypes": "list(type)"}, shape_fn=_save_v2_shape, stateful=True, flops=_flops.zero)
not_differentiable("SaveV2")


def save_v2(prefix, tensor_names, shape_and_slices, tensors, name=None):
    """Writes `tensors` as TensorFlow checkpoint `prefix` (slices must be "": whole tensors)."""
    tensors = [convert_to_tensor(t) for t in tensors]
    return get_default_graph().create_op(
        "SaveV2", [_string(prefix), _string(tensor_names), _string(shape_and_slices), *tensors],
        {"dtypes": [t.dtype for t in tensors]}, name or "SaveV2")


# -- RestoreV2 -----------------------------------------------------------------------------------------------
def _restore_v2_shape(ins, attrs):
    """The shapes are in the checkpoint, not the graph: read from its index once the file names are known (at
    run time; at graph time only for a constant prefix, which then must name an existing checkpoint)."""
    kinds = attrs["dtypes"]
    _check_names_and_slices(ins, len(kinds), "RestoreV2")
    prefix, names = ins[0].value, ins[1].value
    if prefix is None or names is None:
        return [spec(None, d) for d in kinds]
    from tfplus import tensor_bundle
    path = _names(prefix)[0]
    if not tensor_bundle.is_bundle(path):
        raise ValueError(f"checkpoint {path!r} does not exist (no file {tensor_bundle.index_path(path)!r})")
    reader = tensor_bundle.BundleReader(path)
    for n in _names(names):
        if n not in reader:
            raise ValueError(f"key {n!r} not found in checkpoint {path!r}")
    return [spec(reader.shape(n), d) for n, d in zip(_names(names), kinds)]


register_op("RestoreV2", inputs=("prefix", "tensor_names", "shape_and_slices"), outputs=("tensors",),
            attrs={"dtypes": "list(type)"}, shape_fn=_restore_v2_shape, value_inputs=(0, 1, 2), stateful=True,
            flops=_flops.zero)
not_differentiable("RestoreV2")


def restore_v2(prefix, tensor_names, shape_and_slices, dtypes_, name=None) -> list:
    """The tensors `tensor_names` of TensorFlow checkpoint `prefix`, of dtypes `dtypes_`. A Python string
    prefix becomes a placeholder with that default (as TensorFlow's Saver feeds its file name), so the
    checkpoint need not exist until the op runs."""
    if isinstance(prefix, (str, bytes)):
        prefix = placeholder_with_default(_string(prefix), (), name="filename")
    op = get_default_graph().create_op(
        "RestoreV2", [_string(prefix), _string(tensor_names), _string(shape_and_slices)],
        {"dtypes": [dtypes.as_dtype(d) for d in dtypes_]}, name or "RestoreV2")
    return list(op.outputs)


# -- MergeV2Checkpoints --------------------------------------------------------------------------------------
def _merge_shape(ins, attrs):
    sources, dest = ins
    if sources.dtype is not dtypes.string or dest.dtype is not dtypes.string:
        raise TypeError("MergeV2Checkpoints: checkpoint_prefixes and destination_prefix must be strings")
    if dest.shape is not None and len(dest.shape) != 0:
        raise ValueError(f"MergeV2Checkpoints: destination_prefix must be a scalar, got shape {dest.shape}")
    return []


register_op("MergeV2Checkpoints", inputs=("checkpoint_prefixes", "destination_prefix"), outputs=(),
            attrs={"delete_old_dirs": "bool", "allow_missing_files": "bool"}, shape_fn=_merge_shape,
            stateful=True, flops=_flops.zero)
not_differentiable("MergeV2Checkpoints")


def merge_v2_checkpoints(checkpoint_prefixes, destination_prefix, delete_old_dirs=True, name=None):
    """Merges one-shard checkpoints into one checkpoint `destination_prefix` (their data files become its
    shards)."""
    return get_default_graph().create_op(
        "MergeV2Checkpoints", [_string(checkpoint_prefixes), _string(destination_prefix)],
        {"delete_old_dirs": bool(delete_old_dirs), "allow_missing_files": False}, name or "MergeV2Checkpoints")


def _string(value):
    if hasattr(value, "dtype") and not isinstance(value, np.ndarray):
        return convert_to_tensor(value)
    arr = np.asarray(value, object)
    arr = np.vectorize(lambda v: os.fsencode(v) if isinstance(v, str) else bytes(v), otypes=[object])(arr) \
        if arr.size else arr
    return convert_to_tensor(arr, dtype=dtypes.string)
