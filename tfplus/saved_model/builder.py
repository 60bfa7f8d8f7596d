"""tf.saved_model.builder.SavedModelBuilder and simple_save: a SavedModel folder in TensorFlow's format.

    builder = tf.saved_model.builder.SavedModelBuilder("export/1")
    builder.add_meta_graph_and_variables(sess, [tf.saved_model.tag_constants.SERVING],
                                         signature_def_map={"serving_default": sig})
    builder.save()      # export/1/saved_model.pb and export/1/variables/variables.{index,data-00000-of-00001}

saved_model.pb holds one MetaGraphDef per add_meta_graph* call (its graph, saver, collections, tags and
signatures); variables/ is a TensorFlow checkpoint of the values the session had at add_meta_graph_and_variables.
TensorFlow's loader reads the folder, and so does tfplus.saved_model.loader.
"""
from __future__ import annotations

import os

from google.protobuf import text_format

from tfplus.framework import GraphKeys
from tfplus.gfile import atomic_write
from tfplus.proto.meta_graph_pb2 import SignatureDef
from tfplus.proto.saved_model_pb2 import SavedModel
from tfplus.saved_model import constants
from tfplus.saved_model.signature_def_utils import predict_signature_def


def variables_prefix(export_dir: str) -> str:
    """The checkpoint prefix of a SavedModel's variables: <export_dir>/variables/variables."""
    return os.path.join(export_dir, constants.VARIABLES_DIRECTORY, constants.VARIABLES_FILENAME)


class SavedModelBuilder:
    """Builds a SavedModel in `export_dir` (which must not exist, or be empty): add_meta_graph_and_variables
    once (the variables' values), add_meta_graph for further tag sets of the same variables, then save()."""

    def __init__(self, export_dir: str):
        export_dir = os.fspath(export_dir.decode() if isinstance(export_dir, bytes) else export_dir)
        if os.path.exists(export_dir) and (not os.path.isdir(export_dir) or os.listdir(export_dir)):
            # NOTE: TensorFlow's own error, type included (scripts catch it to pick another version folder).
            raise AssertionError(f"Export directory already exists, and isn't empty. Please choose a different "
                                 f"export directory, or delete all the contents of the specified directory: "
                                 f"{export_dir}")
        os.makedirs(export_dir, exist_ok=True)
        self._export_dir = export_dir
        self._saved_model = SavedModel(saved_model_schema_version=constants.SAVED_MODEL_SCHEMA_VERSION)
        self._saver = None
        self._has_variables = False

    def add_meta_graph_and_variables(self, sess, tags, signature_def_map: dict | None = None,
                                     assets_collection=None, legacy_init_op=None, clear_devices: bool = False,
                                     main_op=None, strip_default_attrs: bool = False, saver=None) -> None:
        """Saves the session's variables into variables/ and adds the session graph's MetaGraphDef under
        `tags` with `signature_def_map` ({key: SignatureDef}); `main_op` (or `legacy_init_op`) is what a loader
        runs after restoring (e.g. tf.tables_initializer, local variables)."""
        if self._has_variables:
            raise AssertionError("Graph state including variables and assets has already been saved. Please "
                                 "invoke `add_meta_graph()` instead.")
        _refuse_assets(assets_collection)
        graph = sess.graph
        with graph.as_default():
            _add_init_ops(graph, main_op, legacy_init_op)
            self._saver = saver or _default_saver(graph)
        os.makedirs(os.path.dirname(variables_prefix(self._export_dir)), exist_ok=True)
        if self._saver is not None:
            # TensorFlow's builder writes no state file and no .meta beside the variables.
            self._saver.save(sess, variables_prefix(self._export_dir), write_meta_graph=False, write_state=False)
        self._add_meta_graph(graph, tags, signature_def_map, clear_devices)
        self._has_variables = True

    def add_meta_graph(self, tags, signature_def_map: dict | None = None, assets_collection=None,
                       legacy_init_op=None, clear_devices: bool = False, main_op=None,
                       strip_default_attrs: bool = False, saver=None) -> None:
        """Adds the default graph's MetaGraphDef under `tags`, for the variables saved by
        add_meta_graph_and_variables (which must come first)."""
        from tfplus.framework import get_default_graph
        if not self._has_variables:
            raise AssertionError("Graph state including variables and assets has not been saved yet. Please "
                                 "invoke `add_meta_graph_and_variables()` first.")
        _refuse_assets(assets_collection)
        graph = get_default_graph()
        _add_init_ops(graph, main_op, legacy_init_op)
        if saver is not None:
            self._saver = saver
        elif self._saver is None or self._saver._graph is not graph:
            self._saver = _default_saver(graph)
        self._add_meta_graph(graph, tags, signature_def_map, clear_devices)

    def _add_meta_graph(self, graph, tags, signature_def_map, clear_devices: bool) -> None:
        from tfplus.train.meta_graph import export_meta_graph
        for key, sig in (signature_def_map or {}).items():
            if not isinstance(sig, SignatureDef):
                raise TypeError(f"SavedModelBuilder: signature_def_map[{key!r}] is a {type(sig).__name__}, not a "
                                "SignatureDef (build it with tf.saved_model.signature_def_utils)")
        tags = [tags] if isinstance(tags, str) else list(tags or ())
        meta = export_meta_graph(graph=graph, saver_def=self._saver.saver_def if self._saver else None)
        meta.meta_info_def.tags.extend(tags)
        for key, sig in (signature_def_map or {}).items():
            meta.signature_def[key].CopyFrom(sig)
        if clear_devices:
            for node in meta.graph_def.node:
                node.device = ""
        self._saved_model.meta_graphs.add().CopyFrom(meta)

    def save(self, as_text: bool = False) -> str:
        """Writes saved_model.pb (or saved_model.pbtxt with as_text); returns its path."""
        name = constants.SAVED_MODEL_FILENAME_PBTXT if as_text else constants.SAVED_MODEL_FILENAME_PB
        path = os.path.join(self._export_dir, name)
        data = text_format.MessageToString(self._saved_model).encode() if as_text else \
            self._saved_model.SerializeToString()
        atomic_write(path, data)
        return path


def _refuse_assets(assets_collection) -> None:
    if assets_collection:
        raise NotImplementedError("SavedModelBuilder: tfplus does not implement assets (assets_collection); "
                                  "read such files in Python and feed their contents")


def _add_init_ops(graph, main_op, legacy_init_op) -> None:
    for key, op in ((constants.MAIN_OP_KEY, main_op), (constants.LEGACY_INIT_OP_KEY, legacy_init_op)):
        if op is not None:
            del graph.get_collection_ref(key)[:]
            graph.add_to_collection(key, op)


def _default_saver(graph):
    """TensorFlow's builder: the graph's one Saver, else a new one over every global variable; None (no
    variables/ checkpoint) when there are no variables."""
    from tfplus.train.saver import Saver
    savers = graph.get_collection(GraphKeys.SAVERS)
    if savers:
        return savers[0]
    return Saver() if graph.get_collection(GraphKeys.GLOBAL_VARIABLES) else None


def simple_save(session, export_dir: str, inputs: dict, outputs: dict, legacy_init_op=None) -> None:
    """A SavedModel for serving in one call: the session's graph and variables under the tag "serve", with
    one predict signature "serving_default" of `inputs` and `outputs` ({key: tensor})."""
    builder = SavedModelBuilder(export_dir)
    builder.add_meta_graph_and_variables(
        session, [constants.SERVING], clear_devices=True, legacy_init_op=legacy_init_op,
        signature_def_map={constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY: predict_signature_def(inputs, outputs)})
    builder.save()


__all__ = ["SavedModelBuilder", "simple_save"]
