"""tf.saved_model.loader.load (TF1's form): a SavedModel's MetaGraphDef of the given tags imported into a
session's graph, its variables restored, its main op run.

    meta = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING], "export/1")
    sig = meta.signature_def["serving_default"]
    y = sess.run(sig.outputs["y"].name, {sig.inputs["x"].name: batch})

Reads TensorFlow's SavedModels and tfplus's. Loading runs no code: saved_model.pb is protobuf, parsed.
"""
from __future__ import annotations

import os

from google.protobuf import message as _message
from google.protobuf import text_format

from tfplus import errors, logging
from tfplus.gfile import read_regular
from tfplus.proto.meta_graph_pb2 import MetaGraphDef
from tfplus.proto.saved_model_pb2 import SavedModel
from tfplus.saved_model import constants
from tfplus.saved_model.builder import variables_prefix

_MAX_SAVED_MODEL_BYTES = 2 << 30  # a SavedModel may come from elsewhere: a larger file is refused before it is read


def maybe_saved_model_directory(export_dir) -> bool:
    """Whether `export_dir` holds a saved_model.pb or saved_model.pbtxt."""
    export_dir = os.fspath(export_dir.decode() if isinstance(export_dir, bytes) else export_dir)
    return any(os.path.isfile(os.path.join(export_dir, name))
               for name in (constants.SAVED_MODEL_FILENAME_PB, constants.SAVED_MODEL_FILENAME_PBTXT))


contains_saved_model = maybe_saved_model_directory


def read_saved_model(export_dir: str) -> SavedModel:
    """The SavedModel proto of `export_dir` (saved_model.pb, else saved_model.pbtxt)."""
    pb = os.path.join(export_dir, constants.SAVED_MODEL_FILENAME_PB)
    if os.path.isfile(pb):
        try:
            return SavedModel.FromString(read_regular(pb, "SavedModel", _MAX_SAVED_MODEL_BYTES))
        except _message.DecodeError as e:
            raise errors.DataLossError(None, None, f"{pb!r} is not a SavedModel: {e}") from None
    pbtxt = os.path.join(export_dir, constants.SAVED_MODEL_FILENAME_PBTXT)
    if os.path.isfile(pbtxt):
        try:
            return text_format.Parse(read_regular(pbtxt, "SavedModel", _MAX_SAVED_MODEL_BYTES).decode("utf-8"),
                                     SavedModel())
        except (UnicodeDecodeError, text_format.ParseError) as e:
            raise errors.DataLossError(None, None, f"{pbtxt!r} is not a SavedModel: {e}") from None
    raise OSError(f"SavedModel file does not exist at: {export_dir}{os.sep}{{{constants.SAVED_MODEL_FILENAME_PBTXT}"
                  f"|{constants.SAVED_MODEL_FILENAME_PB}}}")


def _meta_graph_of(saved_model: SavedModel, tags, export_dir: str) -> MetaGraphDef:
    wanted = set([tags] if isinstance(tags, str) else tags or ())
    for meta in saved_model.meta_graphs:
        if set(meta.meta_info_def.tags) == wanted:
            return meta
    available = [list(m.meta_info_def.tags) for m in saved_model.meta_graphs]
    raise RuntimeError(f"MetaGraphDef associated with tags {sorted(wanted)} could not be found in SavedModel "
                       f"{export_dir!r}; available tag-sets: {available}. Pass one of them as `tags`.")


def _loadable(meta: MetaGraphDef, export_dir: str) -> MetaGraphDef:
    """`meta` less its savers' nodes (every node in the name scope of a SaveV2 or RestoreV2 node: "save/",
    "save_1/") and SaverDef. A loader restores the variables by name with a Saver of its own, so the savers' ops
    (TensorFlow's sharded saver has string ops tfplus does not run: StringJoin, ShardedFilename,
    StaticRegexFullMatch) need not be imported. A PyFunc node is refused: its token would call whatever Python
    function this process registered under that name, and loading a file runs no code."""
    for node in meta.graph_def.node:
        if node.op in ("PyFunc", "PyFuncStateless", "EagerPyFunc"):
            raise ValueError(f"SavedModel {export_dir!r}: node {node.name!r} is a {node.op} (a Python function of "
                             "the process that saved it), which a SavedModel cannot carry; export a graph without "
                             "tf.py_func / tf.data input (serve through placeholders)")
    out = MetaGraphDef()
    out.CopyFrom(meta)
    scopes = tuple({n.name.rsplit("/", 1)[0] + "/" for n in meta.graph_def.node
                    if n.op in ("SaveV2", "RestoreV2") and "/" in n.name})
    del out.graph_def.node[:]
    out.graph_def.node.extend(n for n in meta.graph_def.node if not (scopes and n.name.startswith(scopes)))
    out.ClearField("saver_def")
    return out


def _saver(graph, import_scope: str | None):
    """A Saver of the loaded graph's global variables under their names in the SavedModel (without
    import_scope's prefix); None when there are none."""
    from tfplus.framework import GraphKeys
    from tfplus.train.saver import Saver
    prefix = f"{import_scope}/" if import_scope else ""
    variables = {v.op.name[len(prefix):]: v for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
                 if v.op.name.startswith(prefix)}
    return Saver(variables, name=f"{prefix}save") if variables else None


def load(sess, tags, export_dir, import_scope: str | None = None, **saver_kwargs) -> MetaGraphDef:
    """Imports the MetaGraphDef of `tags` from the SavedModel in `export_dir` into `sess`'s graph (under
    `import_scope`), restores its variables from variables/ and runs its main op (else its legacy init op);
    returns the MetaGraphDef (its signature_def names the tensors to feed and fetch)."""
    from tfplus.train.meta_graph import import_meta_graph
    export_dir = os.fspath(export_dir.decode() if isinstance(export_dir, bytes) else export_dir)
    meta = _meta_graph_of(read_saved_model(export_dir), tags, export_dir)
    graph = sess.graph
    with graph.as_default():
        import_meta_graph(_loadable(meta, export_dir), import_scope=import_scope)
        saver = _saver(graph, import_scope)
        if saver is not None:
            saver.restore(sess, variables_prefix(export_dir))
        else:
            logging.info("The specified SavedModel has no variables; no checkpoints were restored.")
        init = graph.get_collection(constants.MAIN_OP_KEY) or graph.get_collection(constants.LEGACY_INIT_OP_KEY)
        if init:
            sess.run(init[0])
    return meta


__all__ = ["load", "maybe_saved_model_directory"]
