"""Checkpoint ops on the host: SaveV2, RestoreV2, MergeV2Checkpoints read and write TensorFlow's checkpoint
files through tfplus.tensor_bundle (which checks every size and checksum)."""
from __future__ import annotations

import numpy as np

from tfplus.errors import InvalidArgumentError
from tfplus.registry import register_kernel


def _bundle():
    # NOTE: imported when a kernel runs, not with the kernels: tfplus.train (the Saver) builds graph ops, and
    # ops modules import kernel helpers, so importing it here would be circular.
    from tfplus import tensor_bundle
    return tensor_bundle


def _strings(buf) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(buf, object).reshape(-1)]


def _whole_tensors_only(slices: list[str], names: list[str]) -> None:
    for name, s in zip(names, slices):
        if s:
            raise InvalidArgumentError(None, None, f"tensor {name!r} has shape_and_slices {s!r}: tfplus reads and "
                                       "writes whole tensors only (partitioned variables are not supported)")


@register_kernel("SaveV2", "cpu")
def _save_v2(ctx, ins, outs, attrs):
    prefix, names, slices = _strings(ins[0])[0], _strings(ins[1]), _strings(ins[2])
    _whole_tensors_only(slices, names)
    _bundle().write_bundle(prefix, dict(zip(names, ins[3:])))


@register_kernel("RestoreV2", "cpu")
def _restore_v2(ctx, ins, outs, attrs):
    prefix, names, slices = _strings(ins[0])[0], _strings(ins[1]), _strings(ins[2])
    _whole_tensors_only(slices, names)
    reader = _bundle().BundleReader(prefix)
    for name, dtype, out in zip(names, attrs["dtypes"], outs):
        if reader.dtype(name) is not dtype:
            raise InvalidArgumentError(None, None, f"checkpoint {prefix!r} holds {name!r} as "
                                       f"{getattr(reader.dtype(name), 'name', reader.dtype(name))}, not "
                                       f"{dtype.name}")
        np.copyto(out, reader.read(name))


@register_kernel("MergeV2Checkpoints", "cpu")
def _merge_v2_checkpoints(ctx, ins, outs, attrs):
    _bundle().merge_bundles(_strings(ins[0]), _strings(ins[1])[0], delete_old=attrs["delete_old_dirs"])
