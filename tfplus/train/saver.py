"""tf.train.Saver: checksummed, atomically written checkpoints of variables, and the `checkpoint` state file.

    >>> import tfplus as tf
    >>> w = tf.Variable(tf.zeros([2]), name="w")
    >>> saver = tf.train.Saver(max_to_keep=3)
    >>> with tf.Session() as sess:  # doctest: +SKIP
    ...     sess.run(tf.global_variables_initializer())
    ...     path = saver.save(sess, "/tmp/run/model.ckpt", global_step=100, metadata={"epoch": 3})
    ...     saver.restore(sess, tf.train.latest_checkpoint("/tmp/run"))   # '/tmp/run/model.ckpt-100'

A checkpoint is one file, the returned path: the 8 bytes `MAGIC`, the SHA-256 of the payload, and the payload,
a serialized `tfplus.Checkpoint` protobuf (tfplus/proto/checkpoint.proto) with one TensorProto per variable,
keyed by the variable's node name (as TensorFlow keys its checkpoints), and optional JSON metadata. Loading
one runs no code. Beside it, the text file `checkpoint` (TensorFlow's CheckpointState) lists the kept ones.

NOTE: a checkpoint folder may come from elsewhere (shared, downloaded), so its state file is not trusted: an
entry that resolves outside the folder (an absolute path elsewhere, `..`, a symlink out) or names a folder is
ignored with a warning, and max_to_keep deletes only regular files that start with MAGIC and that this Saver
wrote or that lie directly in the folder it saves to.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings

import numpy as np
from google.protobuf import message as _message
from google.protobuf import text_format

from tfplus import errors
from tfplus.framework import GraphKeys, Operation, Tensor, _fmt_shape, get_default_graph, shapes_compatible
from tfplus.graph_io import atomic_write, make_ndarray, make_tensor_proto
from tfplus.ops.array_ops import placeholder
from tfplus.ops.control_flow_ops import group
from tfplus.ops.state_ops import assign
from tfplus.proto import checkpoint_pb2

__all__ = ["Saver", "latest_checkpoint", "get_checkpoint_state", "list_variables", "load_variable",
           "read_checkpoint_metadata"]

MAGIC = b"TFPCKPT1"
_HEADER = len(MAGIC) + hashlib.sha256().digest_size


class Saver:
    """Saves and restores variables (every global variable by default).

    `var_list`: a list of Variables (or VariableV2 tensors/operations, e.g. from an imported GraphDef), or a
    dict {checkpoint key: variable}. `max_to_keep`: how many recent checkpoints to keep (None or 0: all).
    The restore ops (a placeholder and an Assign per variable, grouped by `<name>/restore_all`) are built
    here, once, under the name scope `name` ("save").
    """

    def __init__(self, var_list=None, *, max_to_keep: int | None = 5, name: str | None = None):
        graph = _graph_of(var_list)
        self._vars = _variables_by_key(graph.get_collection(GraphKeys.GLOBAL_VARIABLES) if var_list is None
                                       else var_list)
        if not self._vars:
            raise ValueError("Saver: no variables to save (create variables first, or pass var_list)")
        self._graph = graph
        self._max_to_keep = max_to_keep
        self._last: list[str] = []
        self._written: set[str] = set()  # absolute paths of the checkpoints this Saver wrote
        self._feeds: dict[str, Tensor] = {}
        with graph.as_default(), graph.control_dependencies(None), graph.name_scope(name or "save"):
            assigns = []
            for key, ref in self._vars.items():
                self._feeds[key] = placeholder(ref.dtype, ref._shape, name="restore_value")
                assigns.append(assign(ref, self._feeds[key], validate_shape=ref._shape is not None))
            self._restore_op = group(*assigns, name="restore_all")

    @property
    def last_checkpoints(self) -> list[str]:
        """The checkpoints this Saver keeps, oldest first."""
        return list(self._last)

    def recover_last_checkpoints(self, checkpoint_paths: list[str]) -> None:
        """Adopts checkpoints of an earlier run (e.g. `get_checkpoint_state(dir).all_model_checkpoint_paths`)
        so that max_to_keep also deletes them. Only tfplus checkpoint files are adopted."""
        self._last = [p for p in checkpoint_paths if _is_checkpoint_file(p)]

    def save(self, sess, save_path: str, global_step=None, latest_filename: str | None = None,
             write_state: bool = True, metadata: dict | None = None) -> str:
        """Writes the variables' values (and the JSON object `metadata`, e.g. the input pipeline's position)
        to `save_path` or `save_path-<step>`; returns that path. Updates the state file and deletes the
        checkpoints beyond max_to_keep."""
        self._check_session(sess)
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"Saver.save: metadata must be a dict (saved as JSON), not "
                            f"{type(metadata).__name__}")
        if global_step is not None:
            step = global_step if isinstance(global_step, (int, np.integer)) else sess.run(global_step)
            save_path = f"{save_path}-{int(step)}"
        meta_json = "" if metadata is None else json.dumps(metadata, sort_keys=True)
        ckpt = checkpoint_pb2.Checkpoint(meta_json=meta_json)
        for key, ref in self._vars.items():
            ckpt.tensors.add(name=key, tensor=make_tensor_proto(sess.variable_value(ref.op.name)))
        payload = ckpt.SerializeToString(deterministic=True)
        os.makedirs(os.path.dirname(os.path.abspath(save_path)), exist_ok=True)
        atomic_write(save_path, MAGIC + hashlib.sha256(payload).digest() + payload)
        self._written.add(os.path.abspath(save_path))
        if write_state:
            self._record(save_path, latest_filename)
        return save_path

    def restore(self, sess, save_path: str) -> None:
        """Loads every variable from the checkpoint. Everything is checked (checksum, each variable present
        with the graph's dtype and shape) before any variable changes: on error the session is unchanged."""
        if save_path is None:
            raise ValueError("Saver.restore: save_path is None (tf.train.latest_checkpoint found nothing?)")
        self._check_session(sess)
        tensors, _ = _read(save_path)
        feeds = {}
        for key, ref in self._vars.items():
            var = ref.op.name
            if key not in tensors:
                raise errors.NotFoundError(var, "VariableV2", f"key {key!r} not found in checkpoint "
                                           f"{save_path!r} (it holds {_summary(tensors)})")
            value = tensors[key]
            if value.dtype != ref.dtype.np:
                raise errors.InvalidArgumentError(
                    var, "VariableV2", f"checkpoint {save_path!r} holds {key!r} as {value.dtype} but the "
                    f"graph's variable is {ref.dtype.name}")
            if not shapes_compatible(value.shape, ref._shape):
                raise errors.InvalidArgumentError(
                    var, "VariableV2", f"checkpoint {save_path!r} holds {key!r} with shape "
                    f"{_fmt_shape(value.shape)} but the graph's variable has shape {ref.shape}")
            feeds[self._feeds[key]] = value
        sess.run(self._restore_op, feeds)

    @staticmethod
    def read_meta(save_path: str) -> dict:
        """Same as tf.train.read_checkpoint_metadata."""
        return read_checkpoint_metadata(save_path)

    def _check_session(self, sess) -> None:
        if sess.graph is not self._graph:
            raise ValueError("Saver: the session runs a different graph than the one this Saver's variables "
                             "belong to; create the Saver in the session's graph")

    def _record(self, path: str, latest_filename: str | None) -> None:
        """Appends `path` to the kept checkpoints, writes the state file, then deletes the dropped ones."""
        kept, dropped = [p for p in self._last if p != path] + [path], []
        if self._max_to_keep:
            dropped, kept = kept[:-self._max_to_keep], kept[-self._max_to_keep:]
        folder = os.path.dirname(os.path.abspath(path))
        _write_state(folder, kept, latest_filename)
        self._last = kept
        for p in dropped:
            p = os.path.abspath(p)
            if (p in self._written or os.path.dirname(p) == folder) and _is_checkpoint_file(p):
                os.remove(p)
                self._written.discard(p)
            elif os.path.lexists(p):
                warnings.warn(f"Saver: not deleting {p!r}: it is not a tfplus checkpoint that this Saver wrote "
                              f"or that lies in {folder!r}", stacklevel=3)


# -- which variables -----------------------------------------------------------------------------------------
def _as_ref(v) -> Tensor:
    """The VariableV2 output behind a Variable, a VariableV2 tensor or a VariableV2 operation."""
    ref = v._ref() if hasattr(v, "_ref") else v.outputs[0] if isinstance(v, Operation) and v.outputs else v
    if not isinstance(ref, Tensor) or ref.op.type != "VariableV2":
        raise TypeError(f"Saver: {v!r} is not a variable (a tf.Variable, a VariableV2 tensor or operation)")
    return ref


def _variables_by_key(var_list) -> dict[str, Tensor]:
    items = var_list.items() if isinstance(var_list, dict) else ((None, v) for v in var_list)
    out: dict[str, Tensor] = {}
    for key, v in items:
        ref = _as_ref(v)
        key = ref.op.name if key is None else key
        if key in out:
            raise ValueError(f"Saver: two variables would be saved under the key {key!r}")
        out[key] = ref
    return out


def _graph_of(var_list):
    if not var_list:
        return get_default_graph()
    first = next(iter(var_list.values() if isinstance(var_list, dict) else var_list))
    return _as_ref(first).graph


# -- checkpoint files ----------------------------------------------------------------------------------------
def _read(path: str) -> tuple[dict[str, np.ndarray], dict]:
    """Verifies and decodes one checkpoint file: ({key: array}, meta)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        hint = " (that is a TensorFlow checkpoint; tfplus reads only its own format)" \
            if os.path.exists(path + ".index") else ""
        raise errors.NotFoundError(None, None, f"checkpoint {path!r} does not exist{hint}") from None
    except IsADirectoryError:
        raise errors.NotFoundError(None, None, f"{path!r} is a folder, not a checkpoint; pass "
                                   "tf.train.latest_checkpoint(folder)") from None
    if data[:len(MAGIC)] != MAGIC:
        raise errors.DataLossError(None, None, f"{path!r} is not a tfplus checkpoint: it does not start with "
                                   f"{MAGIC!r}")
    digest, payload = data[len(MAGIC):_HEADER], data[_HEADER:]
    if hashlib.sha256(payload).digest() != digest:
        raise errors.DataLossError(None, None, f"checkpoint {path!r} is corrupted: its SHA-256 does not "
                                   "match its contents (truncated or modified on disk); use an older one")
    ckpt = checkpoint_pb2.Checkpoint()
    try:
        ckpt.ParseFromString(payload)
        tensors = {t.name: make_ndarray(t.tensor) for t in ckpt.tensors}
        meta = json.loads(ckpt.meta_json) if ckpt.meta_json else {}
    except (_message.DecodeError, ValueError, TypeError) as e:
        raise errors.DataLossError(None, None, f"checkpoint {path!r} cannot be decoded: {e}") from e
    return tensors, meta


def _summary(tensors: dict) -> str:
    """The first few keys, for error messages."""
    names = sorted(tensors)
    if not names:
        return "no tensors"
    more = f" and {len(names) - 8} more" if len(names) > 8 else ""
    return ", ".join(map(repr, names[:8])) + more


def read_checkpoint_metadata(save_path: str) -> dict:
    """The `metadata` dict saved with a checkpoint ({} if none), after verifying the file's checksum."""
    return _read(save_path)[1]


def list_variables(ckpt_dir_or_file: str) -> list[tuple[str, list[int]]]:
    """tf.train.list_variables: [(key, shape)] of a checkpoint file or a folder's latest checkpoint."""
    tensors, _ = _read(_resolve(ckpt_dir_or_file))
    return [(k, list(tensors[k].shape)) for k in sorted(tensors)]


def load_variable(ckpt_dir_or_file: str, name: str) -> np.ndarray:
    """tf.train.load_variable: one saved value, e.g. `load_variable(dir, "conv1/weights")`."""
    path = _resolve(ckpt_dir_or_file)
    tensors, _ = _read(path)
    if name not in tensors:
        raise errors.NotFoundError(None, None, f"key {name!r} not found in checkpoint {path!r} "
                                   f"(it holds {_summary(tensors)})")
    return tensors[name]


def _resolve(ckpt_dir_or_file: str) -> str:
    if not os.path.isdir(ckpt_dir_or_file):
        return ckpt_dir_or_file
    path = latest_checkpoint(ckpt_dir_or_file)
    if path is None:
        raise errors.NotFoundError(None, None, f"no checkpoint state file in {ckpt_dir_or_file!r}")
    return path


def _is_checkpoint_file(path: str) -> bool:
    """Whether `path` is a regular file (not a link, not a folder) that starts with MAGIC."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


# -- the state file ------------------------------------------------------------------------------------------
def _write_state(folder: str, paths: list[str], latest_filename: str | None) -> None:
    # Only the checkpoints in the state file's own folder, relative to it, so that the folder can be moved
    # (and because a state file naming anything else is refused on reading).
    rel = [os.path.basename(p) for p in paths if os.path.dirname(os.path.abspath(p)) == folder]
    state = checkpoint_pb2.CheckpointState(model_checkpoint_path=rel[-1], all_model_checkpoint_paths=rel)
    text = text_format.MessageToString(state)
    atomic_write(os.path.join(folder, latest_filename or "checkpoint"), text.encode())


def get_checkpoint_state(checkpoint_dir: str, latest_filename: str | None = None
                         ) -> checkpoint_pb2.CheckpointState | None:
    """tf.train.get_checkpoint_state: the folder's CheckpointState with relative paths joined to the folder,
    or None if it has no state file. A state file that does not parse, or whose newest checkpoint lies outside
    the folder or is a folder, raises DataLossError (better than silently starting over); other entries that
    do are left out, with a warning."""
    path = os.path.join(checkpoint_dir, latest_filename or "checkpoint")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        state = text_format.Parse(text, checkpoint_pb2.CheckpointState())
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise errors.DataLossError(None, None, f"checkpoint state file {path!r} is corrupted: {e}") from e
    if not state.model_checkpoint_path:
        raise errors.DataLossError(None, None, f"checkpoint state file {path!r} names no checkpoint")
    why = _outside_reason(checkpoint_dir, state.model_checkpoint_path)
    if why:
        raise errors.DataLossError(None, None, f"checkpoint state file {path!r} names "
                                   f"{state.model_checkpoint_path!r}, which {why}; a state file may only name "
                                   "checkpoint files in its own folder")
    state.model_checkpoint_path = os.path.join(checkpoint_dir, state.model_checkpoint_path)
    kept = []
    for p in state.all_model_checkpoint_paths:
        why = _outside_reason(checkpoint_dir, p)
        if why:
            warnings.warn(f"checkpoint state file {path!r}: ignoring {p!r}, which {why} (a state file may only "
                          "name checkpoint files in its own folder)", stacklevel=2)
        else:
            kept.append(os.path.join(checkpoint_dir, p))
    state.all_model_checkpoint_paths[:] = kept
    return state


def _outside_reason(folder: str, entry: str) -> str | None:
    """Why a state file in `folder` may not name `entry` (None if it may): the entry must resolve (links
    followed) to a path inside the folder that is not a folder."""
    path = os.path.realpath(os.path.join(folder, entry))
    root = os.path.realpath(folder)
    if os.path.commonpath([root, path]) != root:
        return "lies outside the folder"
    if os.path.isdir(path):
        return "is a folder"
    return None


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """tf.train.latest_checkpoint: the newest checkpoint's path, or None if the folder has no state file.

        >>> latest_checkpoint("/tmp/run")  # doctest: +SKIP
        '/tmp/run/model.ckpt-100'
    """
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None:
        return None
    if not os.path.exists(state.model_checkpoint_path):
        raise errors.NotFoundError(None, None, f"the checkpoint state file in {checkpoint_dir!r} names "
                                   f"{state.model_checkpoint_path!r}, which does not exist")
    return state.model_checkpoint_path
