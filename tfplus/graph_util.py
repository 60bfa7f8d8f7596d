"""tf.graph_util: freezing a trained graph for inference, as TF1's tensorflow/python/tools/freeze_graph.py does it,
on GraphDef protos (TensorFlow's own or tfplus's): the subgraph the outputs need, its variables turned into
constants holding their trained values, and the training-only nodes (CheckNumerics, Identity) removed.

    frozen = tf.graph_util.convert_variables_to_constants(sess, sess.graph.as_graph_def(), ["output"])
    frozen = tf.graph_util.remove_training_nodes(frozen)
    tf.train.write_graph(frozen, ".", "frozen.pb", as_text=False)
"""
from __future__ import annotations

import re

from tfplus.proto import graph_pb2
from tfplus.tensor_util import make_tensor_proto

__all__ = ["extract_sub_graph", "convert_variables_to_constants", "remove_training_nodes",
           "tensor_shape_from_node_def_name", "import_graph_def"]

_VARIABLE_OPS = ("Variable", "VariableV2", "VarHandleOp")


def _node_name(name: str) -> str:
    """'^scope/op:1' -> 'scope/op'."""
    return name[1:].split(":")[0] if name.startswith("^") else name.split(":")[0]


def extract_sub_graph(graph_def, dest_nodes) -> graph_pb2.GraphDef:
    """The nodes of `graph_def` that `dest_nodes` (node names) depend on, through data and control inputs, in
    their original order (with the function library and versions)."""
    if isinstance(dest_nodes, str):
        raise TypeError("tf.graph_util.extract_sub_graph: dest_nodes must be a list of node names, got the string "
                        f"{dest_nodes!r}")
    by_name = {node.name: node for node in graph_def.node}
    missing = [n for n in dest_nodes if _node_name(n) not in by_name]
    if missing:
        raise ValueError(f"tf.graph_util.extract_sub_graph: {missing} not in the graph (it has "
                         f"{len(by_name)} nodes); pass node names, without ':0', as graph.get_operations() lists them")
    keep: set = set()
    todo = [_node_name(n) for n in dest_nodes]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        todo.extend(_node_name(i) for i in by_name[name].input)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(node for node in graph_def.node if node.name in keep)
    return out


def convert_variables_to_constants(sess, input_graph_def, output_node_names, variable_names_whitelist=None,
                                   variable_names_blacklist=None) -> graph_pb2.GraphDef:
    """The subgraph `output_node_names` need, with each variable node (VariableV2; a resource variable's handle,
    whose reads become Identity) replaced by a Const of its value in `sess`."""
    graph = extract_sub_graph(input_graph_def, output_node_names)
    chosen = [node for node in graph.node if node.op in _VARIABLE_OPS
              and (variable_names_whitelist is None or node.name in variable_names_whitelist)
              and (variable_names_blacklist is None or node.name not in variable_names_blacklist)]
    values = dict(zip((node.name for node in chosen), sess.run([node.name + ":0" for node in chosen])))
    resources = {node.name for node in chosen if node.op == "VarHandleOp"}
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph.versions)
    out.library.CopyFrom(graph.library)
    for node in graph.node:
        new = out.node.add()
        if node.name in values:
            new.name, new.op = node.name, "Const"
            new.attr["dtype"].CopyFrom(node.attr["dtype"])
            new.attr["value"].tensor.CopyFrom(make_tensor_proto(values[node.name]))
            if "_class" in node.attr:
                new.attr["_class"].CopyFrom(node.attr["_class"])
        elif node.op == "ReadVariableOp" and _node_name(node.input[0]) in resources:
            new.name, new.op = node.name, "Identity"
            new.input.extend(node.input)
            new.attr["T"].CopyFrom(node.attr["dtype"])
        else:
            new.CopyFrom(node)
    return out


def remove_training_nodes(input_graph, protected_nodes=None) -> graph_pb2.GraphDef:
    """`input_graph` without CheckNumerics nodes (the inputs naming them dropped) and with Identity and
    StopGradient nodes spliced out (their consumers read their input), except those in `protected_nodes`, those
    with or used as control inputs, and colocated ones; as TF1 does it."""
    protected = set(protected_nodes or ())
    removed = {node.name for node in input_graph.node if node.op == "CheckNumerics" and node.name not in protected}
    nodes = []
    for node in input_graph.node:
        if node.name in removed:
            continue
        new = graph_pb2.NodeDef()
        new.CopyFrom(node)
        del new.input[:]
        new.input.extend(i for i in node.input if _node_name(i) not in removed)
        nodes.append(new)
    control_inputs, with_control, colocated = set(), set(), set()
    for node in nodes:
        for i in node.input:
            if i.startswith("^"):
                control_inputs.add(i[1:])
                with_control.add(node.name)
        if "_class" in node.attr:
            colocated.update(re.sub(rb"^loc:@", b"", s).decode() for s in node.attr["_class"].list.s)
    splice = {node.name: node.input[0] for node in nodes
              if node.op in ("Identity", "StopGradient") and node.name not in protected | colocated | with_control
              | control_inputs and node.input}
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(input_graph.versions)
    out.library.CopyFrom(input_graph.library)
    for node in nodes:
        if node.name in splice:
            continue
        new = out.node.add()
        new.CopyFrom(node)
        del new.input[:]
        for i in node.input:
            while _node_name(i) in splice:  # never a control input: those nodes are not spliced
                i = splice[_node_name(i)]
            new.input.append(i)
    return out


def tensor_shape_from_node_def_name(graph, input_name: str):
    """The static shape of the tensor `input_name` ('node' means 'node:0') of `graph`."""
    return graph.get_tensor_by_name(input_name if ":" in input_name else input_name + ":0").get_shape()


def import_graph_def(*args, **kwargs):
    """tf.graph_util.import_graph_def: tf.import_graph_def."""
    from tfplus.graph_io import import_graph_def as load
    return load(*args, **kwargs)
