"""MetaGraphDef (TF1's `.meta` file): the graph, its saver and its collections, written by Saver.save beside each
checkpoint and read by tf.train.import_meta_graph, in TensorFlow's format both ways.

    saver = tf.train.Saver()
    saver.save(sess, "run/model.ckpt", global_step=100)       # also writes run/model.ckpt-100.meta
    # later, in a fresh program with no model code:
    saver = tf.train.import_meta_graph("run/model.ckpt-100.meta")
    saver.restore(sess, "run/model.ckpt-100")
    loss = tf.get_collection("losses")[0]

Collections are written as TF1 writes them: the variable collections as VariableDef protos, tensors and ops by
name, strings and numbers as lists. Members of other kinds (summary handles, Python objects) are left out, with a
warning, as TF1 leaves out what it cannot serialize. Reading runs no code: the file is protobuf, parsed.
"""
from __future__ import annotations

import numbers

from google.protobuf import message as _message
from google.protobuf import text_format

from tfplus import errors, logging
from tfplus.framework import GraphKeys, Operation, Tensor, constant_value, get_default_graph
from tfplus.gfile import atomic_write, read_regular
from tfplus.graph_io import import_graph_def, parse_graph_def
from tfplus.proto import meta_graph_pb2
from tfplus.variables import Variable

MetaGraphDef = meta_graph_pb2.MetaGraphDef
CollectionDef = meta_graph_pb2.CollectionDef
VariableDef = meta_graph_pb2.VariableDef

# The collections whose members are variables, written as VariableDef protos (TF1 registers these keys so).
VARIABLE_COLLECTIONS = (GraphKeys.GLOBAL_VARIABLES, GraphKeys.TRAINABLE_VARIABLES, GraphKeys.LOCAL_VARIABLES,
                        GraphKeys.MODEL_VARIABLES, GraphKeys.MOVING_AVERAGE_VARIABLES, GraphKeys.METRIC_VARIABLES,
                        GraphKeys.GLOBAL_STEP)
_MAX_META_BYTES = 2 << 30  # a .meta may come from elsewhere: a larger file is refused before it is read


def export_meta_graph(filename: str | None = None, graph=None, saver_def=None, collection_list=None,
                      as_text: bool = False, **_ignored) -> MetaGraphDef:
    """tf.train.export_meta_graph: the MetaGraphDef of `graph` (the default graph) with `saver_def` and the
    collections `collection_list` (all by default); written to `filename` (atomically) when given."""
    graph = graph or get_default_graph()
    meta = MetaGraphDef()
    meta.meta_info_def.tensorflow_version = "1.15.0"  # the TF1 API the graph is written against
    meta.graph_def.ParseFromString(graph.as_graph_def().SerializeToString())
    if saver_def is not None:
        meta.saver_def.CopyFrom(saver_def)
    for key in graph.get_all_collection_keys() if collection_list is None else collection_list:
        _add_collection(meta, key, graph.get_collection(key))
    if filename:
        data = text_format.MessageToString(meta).encode() if as_text else meta.SerializeToString()
        atomic_write(filename, data)
    return meta


_warned: set[tuple[str, str]] = set()  # (collection, kinds) left out of an export and said so


def _add_collection(meta: MetaGraphDef, key: str, items: list) -> None:
    if not items:
        return
    col = CollectionDef()
    if key in VARIABLE_COLLECTIONS and all(isinstance(v, Variable) for v in items):
        col.bytes_list.value.extend(_variable_def(v).SerializeToString() for v in items)
    elif all(isinstance(v, (Tensor, Operation, Variable)) for v in items):
        col.node_list.value.extend(v.name for v in items)
    elif all(isinstance(v, (str, bytes)) for v in items):
        col.bytes_list.value.extend(v.encode() if isinstance(v, str) else v for v in items)
    elif all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
        col.int64_list.value.extend(int(v) for v in items)
    elif all(isinstance(v, numbers.Real) for v in items):
        col.float_list.value.extend(float(v) for v in items)
    else:
        kinds = ", ".join(sorted({type(v).__name__ for v in items}))
        if (key, kinds) not in _warned:  # once: a saver exports at every save (an Estimator's, every checkpoint)
            _warned.add((key, kinds))
            logging.warning("export_meta_graph: collection %r holds %s, which a MetaGraphDef cannot hold; it is "
                            "left out", key, kinds)
        return
    meta.collection_def[key].CopyFrom(col)


def _variable_def(v: Variable) -> VariableDef:
    initial = v.initial_value
    return VariableDef(variable_name=v.name, initializer_name=v.initializer.name, snapshot_name=v.value().name,
                       initial_value_name=initial.name if initial is not None else "", trainable=v.trainable)


def read_meta_graph_file(filename: str) -> MetaGraphDef:
    """The MetaGraphDef in `filename`: binary (what Savers write), else text format."""
    data = read_regular(filename, "MetaGraphDef file", _MAX_META_BYTES)
    meta = MetaGraphDef()
    try:
        meta.ParseFromString(data)
        return meta
    except _message.DecodeError:
        pass
    try:
        return text_format.Parse(data.decode("utf-8"), MetaGraphDef())
    except (UnicodeDecodeError, text_format.ParseError) as e:
        raise errors.DataLossError(None, None, f"{filename!r} is not a MetaGraphDef (neither binary nor text "
                                   f"protobuf): {e}") from None


def import_meta_graph(meta_graph_or_file, clear_devices: bool = False, import_scope: str | None = None,
                      **_ignored):
    """tf.train.import_meta_graph: adds the graph of a MetaGraphDef (or `.meta` file, tfplus's or TensorFlow's) to
    the default graph under `import_scope`, restores its collections, and returns a Saver that restores its
    checkpoints (the variables its saver_def's restore op assigns, under the same keys); None when it has no
    saver and no variables."""
    meta = meta_graph_or_file if isinstance(meta_graph_or_file, MetaGraphDef) else \
        read_meta_graph_file(meta_graph_or_file)
    graph_def = parse_graph_def(meta.graph_def.SerializeToString(), source="MetaGraphDef.graph_def")
    if clear_devices:
        for node in graph_def.node:
            node.device = ""
    graph = get_default_graph()
    import_graph_def(graph_def, name=import_scope or "")
    prefix = f"{import_scope}/" if import_scope else ""

    def element(name: str):
        return graph.as_graph_element(prefix + name)

    variables: dict[str, Variable] = {}  # variable op name -> its Variable, one per variable across collections
    for key in sorted(meta.collection_def):
        col = meta.collection_def[key]
        kind = col.WhichOneof("kind")
        if key in VARIABLE_COLLECTIONS and kind == "bytes_list":
            for data in col.bytes_list.value:
                vdef = VariableDef.FromString(data)
                var = variables.get(vdef.variable_name)
                if var is None:
                    var = variables[vdef.variable_name] = Variable.from_nodes(
                        element(vdef.variable_name), element(vdef.initializer_name), element(vdef.snapshot_name),
                        element(vdef.initial_value_name) if vdef.initial_value_name else None, vdef.trainable)
                graph.add_to_collection(key, var)
        elif kind == "node_list":
            for name in col.node_list.value:
                graph.add_to_collection(key, element(name))
        elif kind == "bytes_list":
            for value in col.bytes_list.value:
                graph.add_to_collection(key, value)
        elif kind in ("int64_list", "float_list"):
            for value in getattr(col, kind).value:
                graph.add_to_collection(key, value)
    return _saver_for(meta.saver_def if meta.HasField("saver_def") else None, element, variables, import_scope)


def _saver_for(saver_def, element, variables: dict, scope: str | None):
    """A tfplus Saver of the imported graph: the {checkpoint key: variable} that `saver_def`'s restore op
    assigns (TF1's group of Assigns from one RestoreV2), else every imported global variable by its name."""
    from tfplus.train.saver import Saver
    var_list = None
    if saver_def is not None and saver_def.restore_op_name:
        var_list = _restored_variables(element(saver_def.restore_op_name))
    if var_list is None:
        var_list = list(variables.values())
        if not var_list:
            return None
    kw = {"max_to_keep": saver_def.max_to_keep} if saver_def is not None else {}
    return Saver(var_list, name=f"{scope}/save" if scope else None, **kw)


def _restored_variables(restore: Operation) -> dict | None:
    """{key: VariableV2 tensor} from TF1's restore op: a NoOp over Assign(variable, RestoreV2:i) ops (a graph
    Saver built in TF or tfplus), the keys read from the RestoreV2's tensor_names; None for another shape."""
    out = {}
    for assign in restore.control_inputs:
        if assign.type != "Assign" or assign.inputs[1].op.type != "RestoreV2":
            return None
        names = constant_value(assign.inputs[1].op.inputs[1])
        if names is None:
            return None
        key = names.reshape(-1)[assign.inputs[1].value_index]
        out[key.decode() if isinstance(key, bytes) else str(key)] = assign.inputs[0]
    return out or None


__all__ = ["export_meta_graph", "import_meta_graph", "MetaGraphDef", "CollectionDef", "VariableDef",
           "read_meta_graph_file"]
