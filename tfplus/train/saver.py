"""tf.train.Saver: checksummed, atomically written checkpoints of variables, and the `checkpoint` state file.

    >>> import tfplus as tf
    >>> w = tf.Variable(tf.zeros([2]), name="w")
    >>> saver = tf.train.Saver(max_to_keep=3)
    >>> with tf.Session() as sess:  # doctest: +SKIP
    ...     sess.run(tf.global_variables_initializer())
    ...     path = saver.save(sess, "/tmp/run/model.ckpt", global_step=100, metadata={"epoch": 3})
    ...     saver.restore(sess, tf.train.latest_checkpoint("/tmp/run"))   # '/tmp/run/model.ckpt-100'

Checkpoints are written in TensorFlow's format by default (format="tensorflow"): the returned path is a prefix,
the files are `<path>.index` and `<path>.data-00000-of-00001` (tfplus/tensor_bundle.py), keyed by the
variables' node names, so TensorFlow's Saver, tf.train.load_variable and NewCheckpointReader read them and
TensorFlow's checkpoints restore here. The `metadata` JSON (the trainer's input-pipeline position, recipe, ...)
is one more entry of the bundle, the string scalar METADATA_KEY: checksummed and written with the variables,
and harmless to TensorFlow, which restores by key. tfplus's earlier format (format="tfplus") is one file, the
returned path: the 8 bytes `MAGIC`, the SHA-256 of the payload, and the payload, a serialized `tfplus.Checkpoint`
protobuf (tfplus/proto/checkpoint.proto) with one TensorProto per variable and the JSON metadata. Every
function here reads both formats. Loading runs no code and verifies every checksum before any variable changes.
Beside the checkpoints, the text file `checkpoint` (TensorFlow's CheckpointState) lists the kept ones.

A listed checkpoint is never torn: each file is written to a temporary name, fsynced and renamed, the data before
the index, and the state file last (max_to_keep deletes only after it); saving again to a listed checkpoint's path
(the same step twice) lists a backup of the old one while its files are replaced. A failed save changes no file a
listed checkpoint needs. Savers of any process saving into one folder take turns on the state file (flock on the
folder) and keep listing each other's checkpoints that still exist (TF1's Saver writes its own list only, so the
last writer's list hides the other's, or names one the other deleted); each deletes only its own beyond max_to_keep.
Readers hold a checkpoint's files open from the start, so a process saving beside them
(max_to_keep) cannot take them away; newest_valid_checkpoint finds the newest checkpoint that verifies, for
resuming after a crash.

NOTE: a checkpoint folder may come from elsewhere (shared, downloaded), so its state file is not trusted: an
entry that resolves outside the folder (an absolute path elsewhere, `..`, a symlink out) or names a folder is
ignored with a warning (for TensorFlow-format checkpoints, also when its `.index` or data files are links out of
the folder), and max_to_keep deletes only checkpoints (regular files: one starting with MAGIC, or an index
ending with the table magic and its data files) that this Saver wrote or that lie directly in the folder it
saves to.
"""
from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import re
import stat
import time
import uuid
import warnings

import numpy as np
from google.protobuf import message as _message
from google.protobuf import text_format

from tfplus import dtypes as _dt
from tfplus import errors, tensor_bundle
from tfplus.dtypes import as_dtype
from tfplus.framework import (
    GraphKeys,
    Operation,
    Tensor,
    _fmt_shape,
    convert_to_tensor,
    get_default_graph,
    shapes_compatible,
)
from tfplus.gfile import atomic_write, folder_lock, link_or_copy, open_regular, read_regular, remove_orphan_temps
from tfplus.ops import io_ops
from tfplus.ops.array_ops import identity, placeholder, placeholder_with_default
from tfplus.ops.control_flow_ops import group
from tfplus.ops.state_ops import assign
from tfplus.proto import checkpoint_pb2, saver_pb2
from tfplus.tensor_util import make_ndarray, make_tensor_proto

__all__ = ["Saver", "latest_checkpoint", "get_checkpoint_state", "list_variables", "load_variable",
           "read_checkpoint_metadata", "NewCheckpointReader", "load_checkpoint", "checkpoint_exists",
           "newest_valid_checkpoint", "get_checkpoint_mtimes", "checkpoints_iterator",
           "wait_for_new_checkpoint", "generate_checkpoint_state_proto", "update_checkpoint_state",
           "remove_checkpoint"]

MAGIC = b"TFPCKPT1"
# Bounds on what is read from a checkpoint folder (which may come from elsewhere): a larger file is refused before
# it is read. A state file lists names; metadata is a small JSON object; a one-file checkpoint holds a model.
_MAX_STATE_BYTES = 4 << 20
_MAX_METADATA_BYTES = 16 << 20
_MAX_ONE_FILE_BYTES = 4 << 30
_HEADER = len(MAGIC) + hashlib.sha256().digest_size
FORMATS = ("tensorflow", "tfplus")
# The bundle entry holding Saver.save's `metadata` (JSON, UTF-8). Not a variable: the listing functions and
# CheckpointReader here leave it out (TensorFlow's list it as a string scalar).
METADATA_KEY = "_tfplus_metadata"


class Saver:
    """Saves and restores variables (every global variable by default).

    `var_list`: a list of Variables (or VariableV2 tensors/operations, e.g. from an imported GraphDef), or a
    dict {checkpoint key: variable}. `max_to_keep`: how many recent checkpoints to keep (None or 0: all).
    The restore ops (a placeholder and an Assign per variable, grouped by `<name>/restore_all`) are built
    here, once, under the name scope `name` ("save"). `format`: "tensorflow" (TensorFlow's .index/.data files)
    or "tfplus" (tfplus's earlier one-file format); restore reads either.

    TensorFlow's other arguments are taken as TF1 scripts pass them: `pad_step_number` (`-00000100`),
    `allow_empty` (no variables: save and restore do nothing); `sharded`, `save_relative_paths`,
    `restore_sequentially` and `defer_build` change nothing here (one device writes one shard; state files hold
    relative paths anyway); `filename` is the default of the SaverDef's filename tensor (TF1's);
    `keep_checkpoint_every_n_hours` is not implemented (a warning; max_to_keep alone decides); V1 checkpoints,
    `reshape`, `saver_def` and `builder` raise.
    """

    def __init__(self, var_list=None, *, max_to_keep: int | None = 5, name: str | None = None,
                 format: str = "tensorflow", write_version: int = 2, pad_step_number: bool = False,
                 allow_empty: bool = False, keep_checkpoint_every_n_hours: float = 10000.0, sharded: bool = False,
                 save_relative_paths: bool = False, restore_sequentially: bool = False, defer_build: bool = False,
                 reshape: bool = False, saver_def=None, builder=None, filename: str | None = None):
        if format not in FORMATS:
            raise ValueError(f"Saver: format must be one of {FORMATS}, got {format!r}")
        if write_version != 2:
            raise ValueError(f"Saver: write_version={write_version!r}: tfplus writes TensorFlow's V2 checkpoints "
                             "only (tf.train.SaverDef.V2, TensorFlow's default); drop the argument")
        for arg, value in (("reshape", reshape), ("saver_def", saver_def), ("builder", builder)):
            if value:
                raise NotImplementedError(f"Saver: tfplus does not implement {arg}={value!r}; leave it unset")
        if keep_checkpoint_every_n_hours != 10000.0:
            warnings.warn("Saver: keep_checkpoint_every_n_hours is not implemented in tfplus; only the newest "
                          "max_to_keep checkpoints are kept", stacklevel=2)
        graph = _graph_of(var_list)
        self._vars = _variables_by_key(graph.get_collection(GraphKeys.GLOBAL_VARIABLES) if var_list is None
                                       else var_list)
        if not self._vars and not allow_empty:
            raise ValueError("Saver: no variables to save (create variables first, pass var_list, or "
                             "allow_empty=True)")
        self._pad_step_number = pad_step_number
        if METADATA_KEY in self._vars:
            raise ValueError(f"Saver: the key {METADATA_KEY!r} is reserved for the checkpoint's metadata; "
                             "save that variable under another key (var_list={key: variable})")
        self._format = format
        self._graph = graph
        self._max_to_keep = max_to_keep
        self._last: list[str] = []
        self._written: set[str] = set()  # absolute paths of the checkpoints this Saver wrote
        self._feeds: dict[str, Tensor] = {}
        with graph.as_default(), graph.control_dependencies(None), graph.name_scope(name or "save"):
            self.saver_def = _tf_save_ops(self._vars, filename or "model")
            assigns = []
            for key, ref in self._vars.items():
                self._feeds[key] = placeholder(ref.dtype, ref._shape, name="restore_value")
                assigns.append(assign(ref, self._feeds[key], validate_shape=ref._shape is not None))
            self._restore_op = group(*assigns, name="restore_fed")
        self.saver_def.max_to_keep = max_to_keep or 0
        self.saver_def.keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours

    @property
    def last_checkpoints(self) -> list[str]:
        """The checkpoints this Saver keeps, oldest first."""
        return list(self._last)

    def recover_last_checkpoints(self, checkpoint_paths: list[str]) -> None:
        """Adopts checkpoints of an earlier run (e.g. `get_checkpoint_state(dir).all_model_checkpoint_paths`)
        so that max_to_keep also deletes them. Only checkpoints (of either format) are adopted."""
        self._last = [p for p in checkpoint_paths if _checkpoint_files(p)]

    def save(self, sess, save_path: str, global_step=None, latest_filename: str | None = None,
             meta_graph_suffix: str = "meta", write_meta_graph: bool = True, write_state: bool = True,
             strip_default_attrs: bool = False, save_debug_info: bool = False, *,
             metadata: dict | None = None) -> str | None:
        """Writes the variables' values (and the JSON object `metadata`, e.g. the input pipeline's position)
        to `save_path` or `save_path-<step>`; returns that path. Updates the state file and deletes the
        checkpoints beyond max_to_keep. With `write_meta_graph` (TF1's default), `<path>.<meta_graph_suffix>`
        holds the graph's MetaGraphDef (tfplus.train.meta_graph: what tf.train.import_meta_graph reads, here or
        in TensorFlow)."""
        if not self._vars:  # allow_empty
            return None
        self._check_session(sess)
        backup = None
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"Saver.save: metadata must be a dict (saved as JSON), not "
                            f"{type(metadata).__name__}")
        # NOTE: one step's values, also while other threads train (TF1's Saver reads each variable when it gets to
        # it): the step number and the variables are read with no step in between.
        with sess.between_steps():
            if global_step is not None:
                # TF1 takes an integer (Python's, NumPy's: what Session.run fetched) or a tensor / variable / name
                # to fetch; a 0-d integer array (an older fetch) is an integer too.
                integral = isinstance(global_step, numbers.Integral) or \
                    (isinstance(global_step, np.ndarray) and global_step.ndim == 0 and global_step.dtype.kind in "iu")
                step = global_step if integral else sess.run(global_step)
                save_path = f"{save_path}-{int(step):08d}" if self._pad_step_number else f"{save_path}-{int(step)}"
            values = {key: sess.variable_value(ref.op.name) for key, ref in self._vars.items()}
        meta_json = "" if metadata is None else json.dumps(metadata, sort_keys=True)
        os.makedirs(os.path.dirname(os.path.abspath(save_path)), exist_ok=True)
        # One save at a time into a folder, from any process (a save replaces, lists and deletes files there).
        folder = os.path.dirname(os.path.abspath(save_path))
        with _state_lock(folder):
            remove_orphan_temps(folder)  # what saves and other atomic writes killed there left (TF1's stay)
            if self._format == "tensorflow":
                if meta_json:
                    values[METADATA_KEY] = np.array(meta_json.encode(), dtype=object)
                if write_state and self._listed(save_path, latest_filename) and _checkpoint_files(save_path,
                                                                                                   "tensorflow"):
                    backup = self._replace_listed(save_path, values, latest_filename)
                else:
                    tensor_bundle.write_bundle(save_path, values)
            else:
                ckpt = checkpoint_pb2.Checkpoint(meta_json=meta_json)
                for key, value in values.items():
                    ckpt.tensors.add(name=key, tensor=make_tensor_proto(value))
                payload = ckpt.SerializeToString(deterministic=True)
                atomic_write(save_path, MAGIC + hashlib.sha256(payload).digest() + payload)
            # A checkpoint of the other format at the same path would be stale (and the bundle is read first).
            _remove_checkpoint(save_path, "tfplus" if self._format == "tensorflow" else "tensorflow")
            self._written.add(os.path.abspath(save_path))
            if write_meta_graph:
                self.export_meta_graph(f"{save_path}.{meta_graph_suffix}")
            if write_state:
                self._record(save_path, latest_filename, backup)
            if backup is not None:  # only now that the state file lists save_path again
                _remove_checkpoint(backup, "tensorflow")
                self._written.discard(os.path.abspath(backup))
        return save_path

    def export_meta_graph(self, filename: str | None = None, collection_list=None, as_text: bool = False,
                          **_ignored):
        """The MetaGraphDef of this Saver's graph with its SaverDef (written to `filename` when given)."""
        from tfplus.train.meta_graph import export_meta_graph
        return export_meta_graph(filename, self._graph, self.saver_def, collection_list, as_text)

    def as_saver_def(self) -> saver_pb2.SaverDef:
        return self.saver_def

    def restore(self, sess, save_path) -> None:
        """Loads every variable from the checkpoint `save_path` (a path, or a CheckpointReader already open,
        e.g. newest_valid_checkpoint's). Everything is checked (checksum, each variable present with the graph's
        dtype and shape) before any variable changes: on error the session is unchanged."""
        if save_path is None:
            raise ValueError("Saver.restore: save_path is None (tf.train.latest_checkpoint found nothing?)")
        if not self._vars:  # allow_empty
            return
        self._check_session(sess)
        if isinstance(save_path, CheckpointReader):
            reader, save_path = save_path, save_path.path
        else:
            reader = CheckpointReader(save_path)
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
        for key, ref in self._vars.items():  # names, dtypes and shapes first: nothing is read yet
            var = ref.op.name
            if key not in shapes:
                raise errors.NotFoundError(var, "VariableV2", f"key {key!r} not found in checkpoint "
                                           f"{save_path!r} (it holds {_summary(shapes)})")
            if dtypes[key] is not ref.dtype:
                raise errors.InvalidArgumentError(
                    var, "VariableV2", f"checkpoint {save_path!r} holds {key!r} as "
                    f"{getattr(dtypes[key], 'name', dtypes[key])} but the graph's variable is {ref.dtype.name}")
            if not shapes_compatible(tuple(shapes[key]), ref._shape):
                raise errors.InvalidArgumentError(
                    var, "VariableV2", f"checkpoint {save_path!r} holds {key!r} with shape "
                    f"{_fmt_shape(tuple(shapes[key]))} but the graph's variable has shape {ref.shape}")
        feeds = {self._feeds[key]: reader.get_tensor(key) for key in self._vars}  # each checksum verified
        sess.run(self._restore_op, feeds)

    def _listed(self, path: str, latest_filename: str | None) -> bool:
        """Whether `path` is one of this Saver's checkpoints or listed in the state file it writes to."""
        if path in self._last:
            return True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                state = get_checkpoint_state(os.path.dirname(os.path.abspath(path)), latest_filename)
            except errors.OpError:  # a damaged state file lists nothing that can be relied on
                return False
        return state is not None and os.path.abspath(path) in map(os.path.abspath,
                                                                   state.all_model_checkpoint_paths)

    def _replace_listed(self, path: str, values: dict, latest_filename: str | None) -> str:
        """Writes `values` over the listed TensorFlow-format checkpoint `path` (e.g. the same step saved again)
        so that the state file lists a whole checkpoint at every moment. The bundle's two files cannot be
        replaced at once, so: the new bundle is written whole under a temporary name (a failure there changes
        nothing); the old one is linked under a backup name, which the state file lists in its place; the new
        files are renamed over the old ones; then save() lists `path` again and deletes the backup, whose
        prefix this returns."""
        tag = uuid.uuid4().hex[:12]
        new, backup = f"{path}.new-{tag}", f"{path}.previous-{tag}"
        tensor_bundle.write_bundle(new, values)
        folder = os.path.dirname(os.path.abspath(path))
        listed = [backup if p == path else p for p in self._last] + ([] if path in self._last else [backup])
        try:
            for f in _checkpoint_files(path, "tensorflow"):  # the index first: a partial backup is removable
                # NOTE: the data files come back absolute, the index as given: cut the suffix off the file name
                link_or_copy(f, backup + os.path.basename(f)[len(os.path.basename(path)):])
            listed = [p for p in listed if p == backup or _checkpoint_files(p)]  # (as in _record)
            _write_state(folder, _others(folder, listed + [path], latest_filename) + listed, latest_filename)
        except BaseException:  # the state file still lists `path`, untouched
            _remove_checkpoint(new, "tensorflow")
            if self._lists(folder, backup, latest_filename):  # it failed once renamed (syncing the folder): the
                self._last = listed                          # backup, whole, is listed in path's place
                self._written.add(os.path.abspath(backup))
            else:
                _remove_checkpoint(backup, "tensorflow")
            raise
        # The state file lists the backup now; `path` is torn between the two renames. Should they fail, the
        # backup stays listed (and max_to_keep deletes it in time).
        self._last = listed
        self._written.add(os.path.abspath(backup))
        try:
            os.replace(tensor_bundle.data_path(new), tensor_bundle.data_path(path))
            os.replace(tensor_bundle.index_path(new), tensor_bundle.index_path(path))
        finally:
            _remove_checkpoint(new, "tensorflow")
        self._last = [path if p == backup else p for p in listed]
        return backup

    @staticmethod
    def _lists(folder: str, path: str, latest_filename: str | None) -> bool:
        """Whether the state file in `folder` lists `path` now."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                state = get_checkpoint_state(folder, latest_filename)
            except errors.OpError:
                return False
        return state is not None and os.path.abspath(path) in map(os.path.abspath, state.all_model_checkpoint_paths)

    @staticmethod
    def read_meta(save_path: str) -> dict:
        """Same as tf.train.read_checkpoint_metadata."""
        return read_checkpoint_metadata(save_path)

    def _check_session(self, sess) -> None:
        if sess.graph is not self._graph:
            raise ValueError("Saver: the session runs a different graph than the one this Saver's variables "
                             "belong to; create the Saver in the session's graph")

    def _record(self, path: str, latest_filename: str | None, backup: str | None = None) -> None:
        """Appends `path` to the kept checkpoints, writes the state file, then deletes the dropped ones. `backup`:
        the one listed in path's place while it was replaced (_replace_listed), no longer listed."""
        kept, dropped = [p for p in self._last if p != path] + [path], []
        if self._max_to_keep:
            dropped, kept = kept[:-self._max_to_keep], kept[-self._max_to_keep:]
        folder = os.path.dirname(os.path.abspath(path))
        # (save holds _state_lock; another process saving here under the same names may have deleted one of ours)
        kept = [p for p in kept if _checkpoint_files(p)]
        mine = kept + dropped + ([backup] if backup else [])
        _write_state(folder, _others(folder, mine, latest_filename) + kept, latest_filename)
        self._last = kept
        self._delete(dropped, folder)

    def _delete(self, dropped: list[str], folder: str) -> None:
        for p in dropped:
            p = os.path.abspath(p)
            if (p in self._written or os.path.dirname(p) == folder) and _checkpoint_files(p):
                _remove_checkpoint(p)
                self._written.discard(p)
                if os.path.isfile(f"{p}.meta") and not os.path.islink(f"{p}.meta"):  # its MetaGraphDef
                    os.remove(f"{p}.meta")
            elif os.path.lexists(p) or os.path.lexists(tensor_bundle.index_path(p)):
                warnings.warn(f"Saver: not deleting {p!r}: it is not a tfplus checkpoint that this Saver wrote "
                              f"or that lies in {folder!r}", stacklevel=4)


def _tf_save_ops(variables: dict, filename: str) -> saver_pb2.SaverDef:
    """TensorFlow's save and restore ops for `variables` ({key: VariableV2 tensor}), named as TF1's Saver names
    them in the current name scope, and the SaverDef naming them: what a `.meta` file needs so that TensorFlow's
    Saver (and import_meta_graph here) can save and restore with the graph alone, feeding the path to
    `<scope>/Const:0` (default: `filename`). tfplus's own save and restore read the variables in Python and run
    none of them."""
    keys = sorted(variables)  # TF1's order
    default = convert_to_tensor(np.array(filename.encode(), object), dtype=_dt.string, name="filename/input")
    filename = placeholder_with_default(default, (), name="filename")
    filename = placeholder_with_default(filename, (), name="Const")  # TF1 keeps the name "Const"
    refs = [variables[k] for k in keys]
    save = io_ops.save_v2(filename, keys, [""] * len(keys), refs)
    with get_default_graph().control_dependencies([save]):
        saved = identity(filename, name="control_dependency")
    restored = io_ops.restore_v2(filename, keys, [""] * len(keys), [r.dtype.base_dtype for r in refs]) if keys \
        else []
    restore = group(*[assign(r, t, validate_shape=r._shape is not None) for r, t in zip(refs, restored)],
                    name="restore_all")
    return saver_pb2.SaverDef(filename_tensor_name=filename.name, save_tensor_name=saved.name,
                              restore_op_name=restore.name, version=saver_pb2.SaverDef.V2)


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
class CheckpointReader:
    """tf.train.NewCheckpointReader: a checkpoint of either format, opened and checked.

        >>> reader = NewCheckpointReader(tf.train.latest_checkpoint("/tmp/run"))  # doctest: +SKIP
        >>> reader.get_variable_to_shape_map()  # doctest: +SKIP
        {'w': [2]}

    A TensorFlow checkpoint's index is verified here and each tensor's checksum when it is read; a tfplus
    one-file checkpoint is verified and decoded whole here."""

    def __init__(self, path: str):
        self.path = path
        if tensor_bundle.is_bundle(path):
            self._bundle: tensor_bundle.BundleReader | None = tensor_bundle.BundleReader(path)
            keys = [k for k in self._bundle.keys() if k != METADATA_KEY]
        else:
            self._bundle = None
            self._tensors, self._meta = _read(path)
            keys = list(self._tensors)
        self._key_list, self._key_set = keys, set(keys)

    def close(self) -> None:
        """Closes the checkpoint's files (a reader holds them open, so that a Saver deleting the checkpoint
        meanwhile does not take them away)."""
        if self._bundle is not None:
            self._bundle.close()

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def verify(self) -> None:
        """Checks every tensor's checksum: DataLossError (or NotFoundError for a missing file) if the
        checkpoint is not whole. (A one-file checkpoint was checked whole when opened.)"""
        if self._bundle is not None:
            self._bundle.verify()

    def _keys(self) -> list[str]:
        return self._key_list

    def has_tensor(self, name: str) -> bool:
        return name in self._key_set

    def get_tensor(self, name: str) -> np.ndarray:
        if not self.has_tensor(name):
            raise errors.NotFoundError(None, None, f"key {name!r} not found in checkpoint {self.path!r} "
                                       f"(it holds {_summary(self._keys())})")
        return self._tensors[name] if self._bundle is None else self._bundle.read(name)

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        if self._bundle is None:
            return {k: list(v.shape) for k, v in self._tensors.items()}
        return {k: list(self._bundle.shape(k)) for k in self._keys()}

    def get_variable_to_dtype_map(self) -> dict:
        """{key: DType}; for a dtype tfplus lacks, its TensorFlow name in lower case (e.g. "bfloat16")."""
        if self._bundle is None:
            return {k: as_dtype(v.dtype) for k, v in self._tensors.items()}
        return {k: self._bundle.dtype(k) for k in self._keys()}

    def metadata(self):
        """The `metadata` given to Saver.save (a dict), {} if none."""
        if self._bundle is None:
            return self._meta
        if METADATA_KEY not in self._bundle:
            return {}
        dtype, shape = self._bundle.dtype(METADATA_KEY), self._bundle.shape(METADATA_KEY)
        size = self._bundle.entries[METADATA_KEY].size
        if dtype is not _dt.string or shape != () or size > _MAX_METADATA_BYTES:
            what = f"{getattr(dtype, 'name', dtype)} tensor of shape {list(shape)} ({size} bytes)"
            raise errors.DataLossError(None, None, f"checkpoint {self.path!r} cannot be decoded: its "
                                       f"{METADATA_KEY!r} entry is a {what}, not a string scalar (JSON) of at "
                                       f"most {_MAX_METADATA_BYTES} bytes")
        raw = self._bundle.read(METADATA_KEY)
        try:  # any JSON value, as the one-file format gives: its user checks what it needs
            return json.loads(raw.item())
        except RecursionError:
            raise errors.DataLossError(None, None, f"checkpoint {self.path!r} cannot be decoded: its metadata is "
                                       "nested too deeply") from None
        except ValueError as e:  # UnicodeDecodeError included
            raise errors.DataLossError(None, None, f"checkpoint {self.path!r} cannot be decoded: {e}") from e


def NewCheckpointReader(filepattern: str) -> CheckpointReader:  # noqa: N802 (TensorFlow's name)
    """tf.train.NewCheckpointReader(path): see CheckpointReader."""
    return CheckpointReader(filepattern)


def load_checkpoint(ckpt_dir_or_file: str) -> CheckpointReader:
    """tf.train.load_checkpoint: a CheckpointReader of a checkpoint or of a folder's latest one. A folder's
    latest checkpoint that is deleted or saved again while it is being opened (another process saving) is
    followed to the state file's new latest one."""
    if not os.path.isdir(ckpt_dir_or_file):
        return CheckpointReader(ckpt_dir_or_file)
    state_path = os.path.join(ckpt_dir_or_file, "checkpoint")
    for attempt in range(_ATTEMPTS):
        _pause(attempt)
        last, before = attempt + 1 == _ATTEMPTS, _state_mark(state_path)
        try:
            reader = CheckpointReader(_resolve(ckpt_dir_or_file))
        except (errors.NotFoundError, errors.DataLossError):
            if last or _state_mark(state_path) == before:
                raise
            continue
        # The files opened are one checkpoint's, whole, if the state file did not change meanwhile: a saver lists
        # a backup before it renames a listed checkpoint's new files in (one at a time), and deletes with
        # max_to_keep only after listing the new one. Else look again (the index may be the old one, a data
        # file the new one, or deleted).
        if last or _state_mark(state_path) == before:
            return reader
        reader.close()


# How often a reader starts again when the state file changes under it (another process saving), and how many
# checkpoints the state file does not list it tries (the newest). Between tries it waits a little longer each time
# (1 ms doubling to 100 ms: about 1.4 s in all), so that a saver writing in a tight loop does not outrun it.
_ATTEMPTS = 20


def _pause(attempt: int) -> None:
    if attempt:
        time.sleep(min(0.1, 0.001 * 2 ** (attempt - 1)))
_MAX_UNLISTED = 100


def _state_mark(path: str) -> tuple | None:
    """Which write of the state file is there now (None if unreadable): to tell whether another process rewrote
    it. The file's identity with its bytes: a listed step saved again writes the same bytes back (after listing
    its backup meanwhile), and every write is a new file renamed in."""
    try:
        with open_regular(path, "checkpoint state file", _MAX_STATE_BYTES) as f:
            st = os.fstat(f.fileno())
            return st.st_ino, st.st_mtime_ns, st.st_ctime_ns, f.read(st.st_size + 1)
    except (OSError, errors.OpError):
        return None


def newest_valid_checkpoint(checkpoint_dir: str, latest_filename: str | None = None
                            ) -> tuple[CheckpointReader | None, list[tuple[str, str]]]:
    """The newest checkpoint of `checkpoint_dir` that verifies (its files are there and match their checksums),
    opened (its `.path` says which), and [(path, why)] for the newer ones it skipped. It walks the state file's
    checkpoints newest first, then the checkpoints in the folder that the state file does not list (a save
    killed before listing it), newest index file first; (None, skipped) if none verifies or there is none. A
    state file that cannot be trusted raises, as in get_checkpoint_state. If the state file changes during the
    walk (another process saving, whose max_to_keep deletes what it listed), the walk starts again, a few times
    at most. Close the reader when done.

        >>> reader, skipped = newest_valid_checkpoint("/tmp/run")  # doctest: +SKIP
        >>> with reader:  # doctest: +SKIP
        ...     saver.restore(sess, reader)
    """
    state_path = os.path.join(checkpoint_dir, latest_filename or "checkpoint")
    for attempt in range(_ATTEMPTS):
        _pause(attempt)
        before, skipped, vanished = _state_mark(state_path), [], False
        for path in _candidates(checkpoint_dir, latest_filename):
            try:
                reader = CheckpointReader(path)
            except errors.OpError as e:
                skipped.append((path, e.message))
                vanished |= isinstance(e, errors.NotFoundError)  # deleted meanwhile by a saver, most likely
                continue
            try:
                reader.verify()
            except errors.OpError as e:
                reader.close()
                skipped.append((path, e.message))
                continue
            if skipped and attempt + 1 < _ATTEMPTS and _state_mark(state_path) != before:
                reader.close()  # what was skipped may have been replaced meanwhile: look again
                break
            return reader, skipped
        else:
            if attempt + 1 == _ATTEMPTS or _state_mark(state_path) == before and not vanished:
                return None, skipped


def _candidates(folder: str, latest_filename: str | None) -> list[str]:
    """newest_valid_checkpoint's checkpoints to try, in order."""
    listed: list[str] = []
    with warnings.catch_warnings():  # the entries it leaves out are not candidates
        warnings.simplefilter("ignore")
        state = get_checkpoint_state(folder, latest_filename)
    if state is not None:
        for p in [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]:
            if p not in listed:
                listed.append(p)
    unlisted = []
    for entry in os.scandir(folder):
        prefix = os.path.join(folder, entry.name[:-len(".index")])
        if entry.name.endswith(".index") and prefix not in listed:
            try:
                unlisted.append((entry.stat(follow_symlinks=False).st_mtime_ns, prefix))
            except FileNotFoundError:  # renamed or deleted meanwhile by a process saving there
                pass
    listings: dict = {}
    newest = [p for _, p in sorted(unlisted, reverse=True)[:_MAX_UNLISTED]]
    return listed + [p for p in newest if _outside_reason(folder, os.path.basename(p), listings) is None]


def _read(path: str) -> tuple[dict[str, np.ndarray], dict]:
    """Verifies and decodes one tfplus-format checkpoint file: ({key: array}, meta)."""
    if os.path.isdir(path):
        raise errors.NotFoundError(None, None, f"{path!r} is a folder, not a checkpoint; pass "
                                   "tf.train.latest_checkpoint(folder)")
    try:
        data = read_regular(path, "checkpoint", _MAX_ONE_FILE_BYTES)
    except errors.NotFoundError:
        raise errors.NotFoundError(None, None, f"checkpoint {path!r} does not exist (neither a TensorFlow "
                                   f"checkpoint, {tensor_bundle.index_path(path)!r}, nor a tfplus one)") from None
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
        tensors = {t.name: _entry_value(t) for t in ckpt.tensors}
        if len(tensors) != len(ckpt.tensors):
            raise ValueError("an entry name appears twice")
        meta = json.loads(ckpt.meta_json) if ckpt.meta_json else {}
    except RecursionError:
        raise errors.DataLossError(None, None, f"checkpoint {path!r} cannot be decoded: its metadata is nested "
                                   "too deeply") from None
    except (_message.DecodeError, ValueError, TypeError) as e:
        raise errors.DataLossError(None, None, f"checkpoint {path!r} cannot be decoded: {e}") from e
    return tensors, meta


def _entry_value(entry) -> np.ndarray:
    """One entry's array, once its bytes are exactly what its dtype and shape declare (a Saver always writes
    tensor_content): a small crafted entry must not make the reader allocate a huge array."""
    t = entry.tensor
    dims = [d.size for d in t.tensor_shape.dim]
    if t.tensor_shape.unknown_rank or min(dims, default=0) < 0:
        raise ValueError(f"entry {entry.name!r} has an unknown shape")
    try:
        dtype = _dt.as_dtype(int(t.dtype))
        itemsize = 0 if dtype is _dt.string else dtype.size  # a Saver never writes strings here
    except TypeError:
        itemsize = 0
    need = math.prod(dims) * itemsize
    if not itemsize or len(t.tensor_content) != need:
        raise ValueError(f"entry {entry.name!r} declares a tensor of shape {tuple(dims)} and dtype enum "
                         f"{t.dtype} ({need} bytes) but holds {len(t.tensor_content)} bytes of content")
    return make_ndarray(t)


def _summary(tensors) -> str:
    """The first few keys, for error messages."""
    names = sorted(tensors)
    if not names:
        return "no tensors"
    more = f" and {len(names) - 8} more" if len(names) > 8 else ""
    return ", ".join(map(repr, names[:8])) + more


def read_checkpoint_metadata(save_path: str) -> dict:
    """The `metadata` dict saved with a checkpoint ({} if none), after verifying its checksum."""
    with CheckpointReader(save_path) as reader:
        return reader.metadata()


def list_variables(ckpt_dir_or_file: str) -> list[tuple[str, list[int]]]:
    """tf.train.list_variables: [(key, shape)] of a checkpoint or a folder's latest checkpoint."""
    with load_checkpoint(ckpt_dir_or_file) as reader:
        shapes = reader.get_variable_to_shape_map()
    return [(k, shapes[k]) for k in sorted(shapes)]


def load_variable(ckpt_dir_or_file: str, name: str) -> np.ndarray:
    """tf.train.load_variable: one saved value, e.g. `load_variable(dir, "conv1/weights")`."""
    with load_checkpoint(ckpt_dir_or_file) as reader:
        return reader.get_tensor(name)


def checkpoint_exists(checkpoint_prefix: str) -> bool:
    """tf.train.checkpoint_exists: whether a checkpoint of either format is at `checkpoint_prefix`."""
    return tensor_bundle.is_bundle(checkpoint_prefix) or os.path.isfile(checkpoint_prefix)


def get_checkpoint_mtimes(checkpoint_prefixes: list[str]) -> list[float]:
    """tf.train.get_checkpoint_mtimes: the modification time of each checkpoint that exists (its index file, or
    the one file of tfplus's format), in the order given; prefixes without a checkpoint are left out."""
    return [os.path.getmtime(files[0]) for files in map(_checkpoint_files, checkpoint_prefixes) if files]


def wait_for_new_checkpoint(checkpoint_dir: str, last_checkpoint: str | None = None, seconds_to_sleep: float = 1,
                            timeout: float | None = None) -> str | None:
    """tf.train.wait_for_new_checkpoint: the newest checkpoint of `checkpoint_dir` once it is not
    `last_checkpoint`, checking every `seconds_to_sleep`; None after `timeout` seconds without one."""
    deadline = None if timeout is None else time.time() + timeout
    while True:
        path = latest_checkpoint(checkpoint_dir) if os.path.isdir(checkpoint_dir) else None
        if path is not None and path != last_checkpoint:
            return path
        if deadline is not None and time.time() >= deadline:
            return None
        time.sleep(seconds_to_sleep if deadline is None else min(seconds_to_sleep, deadline - time.time()))


def checkpoints_iterator(checkpoint_dir: str, min_interval_secs: float = 0, timeout: float | None = None,
                         timeout_fn=None):
    """tf.train.checkpoints_iterator: yields the newest checkpoint of `checkpoint_dir` each time a new one
    appears (the evaluation loop beside a training job), at most once every `min_interval_secs`; after
    `timeout` seconds without one it ends, unless timeout_fn() returns False (then it waits again)."""
    last = None
    while True:
        path = wait_for_new_checkpoint(checkpoint_dir, last, timeout=timeout)
        if path is None:
            if timeout_fn is None or timeout_fn():
                return
            continue
        start, last = time.time(), path
        yield path
        time.sleep(max(0.0, start + min_interval_secs - time.time()))


def _resolve(ckpt_dir_or_file: str) -> str:
    if not os.path.isdir(ckpt_dir_or_file):
        return ckpt_dir_or_file
    path = latest_checkpoint(ckpt_dir_or_file)
    if path is None:
        raise errors.NotFoundError(None, None, f"no checkpoint state file in {ckpt_dir_or_file!r}")
    return path


def _is_regular_file_with(path: str, magic: bytes, at: int) -> bool:
    """Whether `path` is a regular file (not a link, not a folder) holding `magic` at offset `at` (from the
    end if negative)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open(path, "rb") as f:
            f.seek(at, os.SEEK_END if at < 0 else os.SEEK_SET)
            return f.read(len(magic)) == magic
    except OSError:
        return False


_TABLE_MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")  # the last 8 bytes of a TensorFlow checkpoint index


def _checkpoint_files(prefix: str, fmt: str | None = None) -> list[str]:
    """The files of the checkpoint `prefix` (of format `fmt`, or either), index first; [] if there is none.
    Only regular files count: a link or a folder of that name is never taken for (or deleted as) one."""
    files = []
    if fmt != "tfplus" and _is_regular_file_with(tensor_bundle.index_path(prefix), _TABLE_MAGIC, -8):
        folder, base = os.path.split(os.path.abspath(prefix))
        data = re.compile(re.escape(base) + r"\.data-\d{5}-of-\d{5}")
        files = [tensor_bundle.index_path(prefix)] + sorted(
            os.path.join(folder, n) for n in os.listdir(folder)
            if data.fullmatch(n) and stat.S_ISREG(os.lstat(os.path.join(folder, n)).st_mode))
    if fmt != "tensorflow" and _is_regular_file_with(prefix, MAGIC, 0):
        files.append(prefix)
    return files


# The files a same-path save killed midway leaves: its new bundle, or its backup (see Saver._replace_listed).
_INTERRUPTED = re.compile(r".+\.(?:new|previous)-[0-9a-f]{12}(\.index|\.data-\d{5}-of-\d{5})")


def remove_interrupted_saves(folder: str, latest_filename: str | None = None) -> list[str]:
    """Deletes what saves killed while replacing a listed checkpoint left in `folder` (the new bundle; the
    backup, unless the state file lists it), regular files only; returns their names. Call it only while no
    other process saves into `folder`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            state = get_checkpoint_state(folder, latest_filename)
        except errors.OpError:  # nothing can be known to be unlisted
            return []
    listed = {os.path.basename(p) for p in state.all_model_checkpoint_paths} if state else set()
    removed = []
    for entry in os.scandir(folder):
        match = _INTERRUPTED.fullmatch(entry.name)
        if match and entry.name[:match.start(1)] not in listed and entry.is_file(follow_symlinks=False):
            os.remove(entry.path)
            removed.append(entry.name)
    return sorted(removed)


def _remove_checkpoint(prefix: str, fmt: str | None = None) -> None:
    """Deletes the checkpoint `prefix` (index first, so that no index outlives its data)."""
    for path in _checkpoint_files(prefix, fmt):
        os.remove(path)


# -- the state file ------------------------------------------------------------------------------------------
def _state_lock(folder: str):
    """Held (gfile.folder_lock) while a Saver saves into `folder`: two processes saving into one folder take turns,
    each keeps the other's checkpoints listed, and none lists one that the other deleted (nor replaces or deletes
    files under the other's save)."""
    return folder_lock(folder)


def _others(folder: str, mine: list[str], latest_filename: str | None) -> list[str]:
    """The checkpoints the state file lists that are not in `mine` and still exist: other Savers' (another
    process saving into the folder), which a state file written now must keep listing (held: _state_lock)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            state = get_checkpoint_state(folder, latest_filename)
        except errors.OpError:  # a damaged state file lists nothing that can be relied on
            return []
    ours = set(map(os.path.abspath, mine))
    return [p for p in state.all_model_checkpoint_paths if os.path.abspath(p) not in ours and _checkpoint_files(p)] \
        if state else []


def _write_state(folder: str, paths: list[str], latest_filename: str | None) -> None:
    # Only the checkpoints in the state file's own folder, relative to it, so that the folder can be moved
    # (and because a state file naming anything else is refused on reading).
    rel = [os.path.basename(p) for p in paths if os.path.dirname(os.path.abspath(p)) == folder]
    state = checkpoint_pb2.CheckpointState(model_checkpoint_path=rel[-1], all_model_checkpoint_paths=rel)
    text = text_format.MessageToString(state)
    atomic_write(os.path.join(folder, latest_filename or "checkpoint"), text.encode())


def generate_checkpoint_state_proto(save_dir: str, model_checkpoint_path: str, all_model_checkpoint_paths=None,
                                    **_timestamps) -> checkpoint_pb2.CheckpointState:
    """tf.train.generate_checkpoint_state_proto: the CheckpointState listing `all_model_checkpoint_paths` then
    `model_checkpoint_path` (once); relative paths are made relative to a relative save_dir (TF1's)."""
    paths = list(all_model_checkpoint_paths or [])
    if not paths or paths[-1] != model_checkpoint_path:
        paths.append(model_checkpoint_path)
    if not os.path.isabs(save_dir):
        paths = [p if os.path.isabs(p) else os.path.relpath(p, save_dir) for p in paths]
        if not os.path.isabs(model_checkpoint_path):
            model_checkpoint_path = os.path.relpath(model_checkpoint_path, save_dir)
    return checkpoint_pb2.CheckpointState(model_checkpoint_path=model_checkpoint_path,
                                          all_model_checkpoint_paths=paths)


def update_checkpoint_state(save_dir: str, model_checkpoint_path: str, all_model_checkpoint_paths=None,
                            latest_filename: str | None = None, **_timestamps) -> None:
    """tf.train.update_checkpoint_state: writes save_dir's state file (atomically) listing the checkpoints, the
    newest last. As every state file here, it names checkpoints of its own folder only (others are left out)."""
    paths = list(all_model_checkpoint_paths or [])
    if not paths or paths[-1] != model_checkpoint_path:
        paths.append(model_checkpoint_path)
    folder = os.path.abspath(save_dir)
    paths = [os.path.join(folder, os.path.basename(p)) if not os.path.isabs(p) else p for p in paths]
    if os.path.dirname(paths[-1]) != folder:
        raise ValueError(f"update_checkpoint_state: {model_checkpoint_path!r} is not in {save_dir!r}; a state "
                         "file may only name checkpoint files in its own folder")
    with _state_lock(folder):
        _write_state(folder, paths, latest_filename)


def remove_checkpoint(checkpoint_prefix: str, checkpoint_format_version=2, meta_graph_suffix: str = "meta"):
    """tf.train.remove_checkpoint: deletes the checkpoint's files and its .meta file."""
    _remove_checkpoint(checkpoint_prefix)
    meta = f"{checkpoint_prefix}.{meta_graph_suffix}"
    if os.path.isfile(meta):
        os.remove(meta)


def get_checkpoint_state(checkpoint_dir: str, latest_filename: str | None = None
                         ) -> checkpoint_pb2.CheckpointState | None:
    """tf.train.get_checkpoint_state: the folder's CheckpointState with relative paths joined to the folder,
    or None if it has no state file. A state file that does not parse, or whose newest checkpoint lies outside
    the folder or is a folder, raises DataLossError (better than silently starting over); other entries that
    do are left out, with a warning."""
    path = os.path.join(checkpoint_dir, latest_filename or "checkpoint")
    try:
        text = read_regular(path, "checkpoint state file", _MAX_STATE_BYTES).decode("utf-8")
    except errors.NotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise errors.DataLossError(None, None, f"checkpoint state file {path!r} is corrupted: {e}") from e
    try:
        state = text_format.Parse(text, checkpoint_pb2.CheckpointState())
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise errors.DataLossError(None, None, f"checkpoint state file {path!r} is corrupted: {e}") from e
    if not state.model_checkpoint_path:
        raise errors.DataLossError(None, None, f"checkpoint state file {path!r} names no checkpoint")
    listings: dict = {}
    why = _outside_reason(checkpoint_dir, state.model_checkpoint_path, listings)
    if why:
        raise errors.DataLossError(None, None, f"checkpoint state file {path!r} names "
                                   f"{state.model_checkpoint_path!r}, which {why}; a state file may only name "
                                   "checkpoint files in its own folder")
    state.model_checkpoint_path = os.path.join(checkpoint_dir, state.model_checkpoint_path)
    kept = []
    for p in state.all_model_checkpoint_paths:
        why = _outside_reason(checkpoint_dir, p, listings)
        if why:
            warnings.warn(f"checkpoint state file {path!r}: ignoring {p!r}, which {why} (a state file may only "
                          "name checkpoint files in its own folder)", stacklevel=2)
        else:
            kept.append(os.path.join(checkpoint_dir, p))
    state.all_model_checkpoint_paths[:] = kept
    return state


def _outside_reason(folder: str, entry: str, listings: dict) -> str | None:
    """Why a state file in `folder` may not name `entry` (None if it may): the entry, and for a TensorFlow
    checkpoint its index and data files, must resolve (links followed) to paths inside the folder, and the
    entry must not be a folder. `listings` caches the folders' data files across calls (a state file may name
    thousands)."""
    if "\0" in entry:
        return "holds a NUL character"
    path = os.path.join(folder, entry)
    root = os.path.realpath(folder)
    head, base = os.path.split(path)
    files = [path, tensor_bundle.index_path(path)]
    if os.path.isdir(head):
        if head not in listings:  # {prefix: its data files' names}
            listings[head] = {}
            for n in os.listdir(head):
                at = n.find(".data-")
                while at >= 0:
                    listings[head].setdefault(n[:at], []).append(n)
                    at = n.find(".data-", at + 1)
        files += [os.path.join(head, n) for n in listings[head].get(base, [])]
    if not all(_inside(root, folder, f) for f in files):
        return "lies outside the folder"
    if os.path.isdir(path):
        return "is a folder"
    return None


def _inside(root: str, folder: str, path: str) -> bool:
    """Whether `path` resolves (links followed) to a path inside `folder`, whose realpath is `root`."""
    if os.path.dirname(path) == folder and os.path.basename(path) not in ("", ".", "..") \
            and not os.path.islink(path):  # the common case, in one lstat rather than realpath's one a component
        return True
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """tf.train.latest_checkpoint: the newest checkpoint's path, or None if the folder has no state file.

        >>> latest_checkpoint("/tmp/run")  # doctest: +SKIP
        '/tmp/run/model.ckpt-100'
    """
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None:
        return None
    if not (os.path.exists(state.model_checkpoint_path)
            or os.path.exists(tensor_bundle.index_path(state.model_checkpoint_path))):
        raise errors.NotFoundError(None, None, f"the checkpoint state file in {checkpoint_dir!r} names "
                                   f"{state.model_checkpoint_path!r}, which does not exist")
    return state.model_checkpoint_path
