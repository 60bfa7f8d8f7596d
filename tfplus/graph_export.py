"""Graph -> GraphDef: the NodeDefs and FunctionDefs of a graph's nodes (Graph.as_graph_def, Operation.node_def).

Below the graph: it reads a graph through what its nodes have (an op's type, name, device, inputs, control inputs,
attrs, outputs and op_def; a tensor's op, value_index, dtype and consumers; a sub-graph's operations, all_inputs
and outputs), and imports no graph, op or kernel module. GraphDef -> Graph is tfplus.graph_io's.
"""
from __future__ import annotations

import re

import numpy as np

from tfplus import dtypes as _dt
from tfplus.proto import attr_value_pb2, graph_pb2, types_pb2
from tfplus.tensor_util import attr_to_proto, make_tensor_proto

# GraphDef.versions.producer: a TensorFlow-1.x-era GraphDef version (our ops have TF1 semantics). TensorFlow
# accepts any producer at or above its min_producer (0); min_consumer stays 0, so every consumer may read it.
PRODUCER = 134


# NOTE (control flow): tfplus's If and While hold their sub-graphs (FuncGraph) as attrs. A GraphDef holds them as
# FunctionDefs in its library, called by name, in TensorFlow's functional form (TF2's If/While), so TensorFlow
# imports and runs what tfplus writes:
# - If: both branches take every input (Tin); tfplus's then branch uses the first n_then, the else branch the rest.
# - While: TensorFlow's loop carries every input (the loop variables, then cond's and body's captures, which its
#   body returns unchanged) and has one output per input. tfplus's While also outputs each loop variable's history
#   and the iteration count (what its gradient reads); where the graph reads them, the loop also carries what
#   TensorFlow's while_v2 carries for that: one TensorList per loop variable (EmptyTensorList before the loop,
#   TensorListPushBack in the body, TensorListStack after it gives the history) and a counter. Those nodes have the
#   attr _tfplus_accumulator: tfplus's import drops them and reads the history and count from its While again.
# The attrs _tfplus_n_then, _tfplus_n_loop_vars and _tfplus_n_cond (TensorFlow ignores attrs named "_...") keep
# the split, so a round trip is exact; an If or While that TensorFlow wrote imports with every input used by both
# branches, or carried as a loop variable.
_ACC, _ACC_SCOPE = "_tfplus_accumulator", "tfplus_accumulator"  # the nodes' marking attr, their names' scope
_VARIANT, _INT32 = types_pb2.DT_VARIANT, types_pb2.DT_INT32


def _accumulates(op) -> bool:
    """Whether a While's history or count is read, so that its GraphDef form carries the accumulators."""
    return op.type == "While" and any(t.consumers() for t in op.outputs[len(op.attrs["T"]):])


def _output_number(t) -> int:
    """`t`'s output index in a GraphDef: a While's TensorLists and count come after the captures it passes on."""
    op, i = t.op, t.value_index
    if op.type != "While" or i < len(op.attrs["T"]):
        return i
    return i + len(op.inputs) - len(op.attrs["T"])


def _history_node(t) -> str | None:
    """The name of the TensorListStack node that gives a While's history output `t` (None for other tensors)."""
    op, n = t.op, len(t.op.attrs["T"]) if t.op.type == "While" else 0
    return f"{op.name}/{_ACC_SCOPE}/history_{t.value_index - n}" if n <= t.value_index < 2 * n else None


def _input_name(t) -> str:
    i = _output_number(t)
    return _history_node(t) or (t.op.name if i == 0 else f"{t.op.name}:{i}")


def _output_arg(op, i: int) -> tuple[str, int]:
    """Output `i` (GraphDef numbering) of `op` as (output arg name, index in that arg), how a FunctionDef names it:
    one name per output, or one list-valued arg (Split's `output`, a While's `output`)."""
    names = op.op_def.outputs
    if len(names) == len(op.outputs):
        return names[i], 0
    if len(names) == 1:
        return names[0], i
    raise ValueError(f"{op.type} '{op.name}': its registration names outputs {names} but it has {len(op.outputs)}, "
                     "so a function cannot refer to them; give each output a name in register_op(outputs=...)")


class _Library:
    """The FunctionDefs of a graph's control-flow sub-graphs, named once each, in the order they are met."""

    def __init__(self):
        self.functions: list[graph_pb2.FunctionDef] = []
        self._names: dict[tuple, str] = {}
        self._taken: set[str] = set()

    def function(self, sub, what: str, layout: tuple) -> graph_pb2.NameAttrList:
        """`sub` as a function taking the args `layout` describes (see _function_def); what calls it by name."""
        key = (id(sub), layout)
        if key not in self._names:
            name = base = re.sub(r"[^A-Za-z0-9_]", "_", what)
            k = 0
            while name in self._taken:
                k += 1
                name = f"{base}_{k}"
            self._taken.add(name)
            self._names[key] = name
            self.functions.append(_function_def(sub, name, *layout, self))
        return attr_value_pb2.NameAttrList(name=self._names[key])


def _acc_node(name: str, op: str, inputs: list, **attrs) -> graph_pb2.NodeDef:
    """A node of a While's accumulators (see the NOTE above); attrs are AttrValue keyword arguments."""
    node = graph_pb2.NodeDef(name=name, op=op, input=inputs)
    for key, value in {**attrs, _ACC: attr_value_pb2.AttrValue(b=True)}.items():
        node.attr[key].CopyFrom(value if isinstance(value, attr_value_pb2.AttrValue) else
                                attr_value_pb2.AttrValue(**value))
    return node


def _int32_const(name: str, values) -> graph_pb2.NodeDef:
    return _acc_node(name, "Const", [], dtype={"type": _INT32},
                     value={"tensor": make_tensor_proto(np.int32(values))})


def _function_def(sub, name: str, arg_types: tuple, owned: tuple, n_passed: int, n_acc: int, push: bool,
                  library: _Library):
    """A FunctionDef of `sub` whose args have `arg_types`; sub.all_inputs are the args at indices `owned` (the
    others are unused); it returns sub.outputs, then the last `n_passed` args unchanged (a While's captures).
    With `n_acc`, n_acc TensorLists and a counter follow those args; with `push` (a While's body), the first n_acc
    args are pushed onto the lists and the counter counts (see the NOTE above), returned after the rest."""
    fdef = graph_pb2.FunctionDef()
    fdef.signature.name = name
    args = set(sub.all_inputs)
    ops = [op for op in sub.get_operations() if not (op.type == "Placeholder" and op.outputs[0] in args)]
    taken = {op.name for op in ops}
    by_index = dict(zip(owned, sub.all_inputs))
    arg_names, refs = [], {}
    acc_args = [(f"{_ACC_SCOPE}_list_{k}", _VARIANT) for k in range(n_acc)] + [(f"{_ACC_SCOPE}_count", _INT32)]
    acc_args = acc_args if n_acc else []
    for i, dtype in enumerate([_dt.as_dtype(d).as_datatype_enum for d in arg_types] + [t for _, t in acc_args]):
        ph = by_index.get(i)
        # NOTE: TensorFlow wants argument names to be lowercase identifiers, unique among the body's nodes.
        if i >= len(arg_types):
            base = acc_args[i - len(arg_types)][0]
        else:
            base = re.sub(r"[^a-z0-9_]", "_", ph.op.name.lower()) if ph is not None else f"unused{i}"
        arg = base = base if base[0].isalpha() else f"arg_{base}"
        k = 0
        while arg in taken:
            k += 1
            arg = f"{base}_{k}"
        taken.add(arg)
        arg_names.append(arg)
        fdef.signature.input_arg.add(name=arg, type=dtype)
        if ph is not None:
            refs[ph] = arg
            fdef.arg_attr[i].attr["_output_shapes"].CopyFrom(attr_to_proto("list(shape)", [ph._shape]))

    def ref(t) -> str:
        if t in refs:
            return refs[t]
        history = _history_node(t)
        if history:
            return f"{history}:tensor:0"
        out, k = _output_arg(t.op, _output_number(t))
        return f"{t.op.name}:{out}:{k}"
    for op in ops:
        fdef.node_def.extend(_node_defs(op, library, ref, f"{name}/"))
    passed = range(len(arg_types) - n_passed, len(arg_types))
    returns = [(ref(t), t.dtype.as_datatype_enum) for t in sub.outputs]
    returns += [(arg_names[i], _dt.as_dtype(arg_types[i]).as_datatype_enum) for i in passed]
    if push and n_acc:
        lists, count = arg_names[len(arg_types):-1], arg_names[-1]
        for k, lst in enumerate(lists):
            fdef.node_def.append(_acc_node(f"{_ACC_SCOPE}/push_{k}", "TensorListPushBack", [lst, arg_names[k]],
                                           element_dtype={"type": _dt.as_dtype(arg_types[k]).as_datatype_enum}))
            returns.append((f"{_ACC_SCOPE}/push_{k}:output_handle:0", _VARIANT))
        fdef.node_def.append(_int32_const(f"{_ACC_SCOPE}/one", 1))
        fdef.node_def.append(_acc_node(f"{_ACC_SCOPE}/count", "AddV2", [count, f"{_ACC_SCOPE}/one:output:0"],
                                       T={"type": _INT32}))
        returns.append((f"{_ACC_SCOPE}/count:z:0", _INT32))
    for k, (r, dtype) in enumerate(returns):
        fdef.signature.output_arg.add(name=f"output_{k}", type=dtype)
        fdef.ret[f"output_{k}"] = r
    fdef.signature.is_stateful = any(op.op_def.stateful for op in ops)
    return fdef


def _control_flow_attrs(op, library: _Library, prefix: str, n_acc: int) -> dict:
    """A tfplus If or While's attrs in TensorFlow's functional form, its sub-graphs added to `library`; a While
    with `n_acc` carries that many TensorLists and a counter after its inputs."""
    a, where = op.attrs, f"{prefix}{op.name}"
    types = tuple(t.dtype for t in op.inputs[op.type == "If":])
    if op.type == "If":
        n = a["n_then"]
        then = library.function(a["then_branch"], f"{where}_then", (types, tuple(range(n)), 0, 0, False))
        other = library.function(a["else_branch"], f"{where}_else", (types, tuple(range(n, len(types))), 0, 0, False))
        return {"Tcond": attr_to_proto("type", a["Tcond"]), "Tin": attr_to_proto("list(type)", types),
                "Tout": attr_to_proto("list(type)", a["Tout"]), "then_branch": attr_value_pb2.AttrValue(func=then),
                "else_branch": attr_value_pb2.AttrValue(func=other),
                "output_shapes": attr_to_proto("list(shape)", a["output_shapes"]),
                "_tfplus_n_then": attr_to_proto("int", n)}
    n, n_cond = len(a["T"]), a["n_cond"]
    loop, caps = tuple(range(n)), len(types) - n
    cond = library.function(a["cond"], f"{where}_cond", (types, loop + tuple(range(n, n + n_cond)), 0, n_acc, False))
    body = library.function(a["body"], f"{where}_body",
                            (types, loop + tuple(range(n + n_cond, len(types))), caps, n_acc, True))
    carried = attr_to_proto("list(type)", types)
    carried.list.type.extend([_VARIANT] * n_acc + [_INT32] * bool(n_acc))
    return {"T": carried, "cond": attr_value_pb2.AttrValue(func=cond), "body": attr_value_pb2.AttrValue(func=body),
            "output_shapes": attr_to_proto("list(shape)", _gd_output_shapes(op)),
            "parallel_iterations": attr_to_proto("int", a["parallel_iterations"]),
            "_tfplus_n_loop_vars": attr_to_proto("int", n), "_tfplus_n_cond": attr_to_proto("int", n_cond)}


def _gd_output_shapes(op) -> list:
    """`op`'s output shapes in GraphDef order: a While's are what TensorFlow's While carries (see the NOTE above)."""
    if op.type != "While":
        return [t._shape for t in op.outputs]
    n = len(op.attrs["T"])
    return [t._shape for t in op.outputs[:n] + op.inputs[n:]] + [()] * (n + 1) * _accumulates(op)


def node_to_proto(op) -> graph_pb2.NodeDef:
    """One Operation as a NodeDef: inputs "node[:idx]" then control inputs "^node", attrs by declared type (an If's
    or While's sub-graphs as calls of functions named after the node, which as_graph_def writes to its library)."""
    return next(node for node in _node_defs(op, _Library(), _input_name, "") if node.name == op.name)


def _node_defs(op, library: _Library, ref, prefix: str) -> list[graph_pb2.NodeDef]:
    """`op` as a NodeDef; a While whose history or count is read comes with its accumulators' nodes (see the
    NOTE above), written where `ref` names them (a GraphDef's or a function's inputs)."""
    node = graph_pb2.NodeDef(name=op.name, op=op.type, device=op.device or "")
    node.input.extend([ref(t) for t in op.inputs] + ["^" + c.name for c in op.control_inputs])
    if op.type in ("If", "While"):
        n_acc = len(op.attrs["T"]) if _accumulates(op) else 0
        for key, av in _control_flow_attrs(op, library, prefix, n_acc).items():
            node.attr[key].CopyFrom(av)
        return _with_accumulators(op, node, function=ref is not _input_name) if n_acc else [node]
    declared = op.op_def.attrs
    for key, value in sorted(op.attrs.items()):
        if key not in declared and key.startswith("_"):
            continue  # an internal annotation, as TF's '_' attrs are (finetune's _scratch_divisor for the planner)
        if key not in declared:
            raise ValueError(f"{op.type} '{op.name}': attr {key!r} is not declared by the op registration "
                             f"(declared: {sorted(declared)}); add it to register_op({op.type!r}, attrs=...)")
        if value is None and declared[key] != "shape":  # NOTE: None is a shape (unknown rank), else "unset"
            continue
        try:
            node.attr[key].CopyFrom(attr_to_proto(declared[key], value))
        except (TypeError, ValueError) as e:
            raise type(e)(f"{op.type} '{op.name}': cannot serialize attr {key!r} = {value!r} as "
                          f"{declared[key]!r}: {e}") from None
    return [node]


def _with_accumulators(op, node: graph_pb2.NodeDef, function: bool) -> list[graph_pb2.NodeDef]:
    """A While's NodeDef carrying its accumulators (see the NOTE above): their nodes before it, then it, then the
    TensorListStack of each history that is read. `function`: the nodes are a function's (inputs name output args)."""
    base, n = f"{op.name}/{_ACC_SCOPE}/", len(op.attrs["T"])

    def out(name: str, arg: str, i: int = 0) -> str:
        return f"{name}:{arg}:{i}" if function else (name if i == 0 else f"{name}:{i}")
    before, after = [_int32_const(f"{base}max_size", -1), _int32_const(f"{base}count0", 0)], []
    for k in range(n):
        shape, dtype = op.attrs["output_shapes"][k], {"type": op.attrs["T"][k].as_datatype_enum}
        dims = -1 if shape is None else [-1 if d is None else d for d in shape]  # TensorFlow's -1: unknown
        before.append(_int32_const(f"{base}shape_{k}", dims))
        before.append(_acc_node(f"{base}list_{k}", "EmptyTensorList", [out(f"{base}shape_{k}", "output"),
                                out(f"{base}max_size", "output")], element_dtype=dtype, shape_type={"type": _INT32}))
        if op.outputs[n + k].consumers():
            after.append(_acc_node(f"{base}history_{k}", "TensorListStack",
                                   [out(op.name, "output", len(op.inputs) + k), out(f"{base}shape_{k}", "output")],
                                   element_dtype=dtype, num_elements={"i": -1}))
    controls = list(node.input[len(op.inputs):])
    del node.input[len(op.inputs):]
    node.input.extend([out(f"{base}list_{k}", "handle") for k in range(n)] + [out(f"{base}count0", "output")] +
                      controls)
    return before + [node] + after


def as_graph_def(graph, add_shapes: bool = False) -> graph_pb2.GraphDef:
    """The graph as a GraphDef, nodes in creation order; tf.cond / tf.while_loop sub-graphs as functions of its
    library (see the NOTE above). `add_shapes` adds TensorFlow's `_output_shapes` attr.

        >>> import tfplus as tf
        >>> as_graph_def(tf.Graph()).versions.producer
        134
    """
    gd = graph_pb2.GraphDef(versions=graph_pb2.VersionDef(producer=PRODUCER, min_consumer=0))
    library = _Library()
    reads_first = _reads_before_updates(graph.get_operations())
    for op in graph.get_operations():
        nodes = _node_defs(op, library, _input_name, "")
        if op in reads_first:
            node = next(node for node in nodes if node.name == op.name)
            node.input.extend("^" + r.name for r in reads_first[op])
        if add_shapes and op.outputs:
            node = next(node for node in nodes if node.name == op.name)
            node.attr["_output_shapes"].CopyFrom(attr_to_proto("list(shape)", _gd_output_shapes(op)))
        gd.node.extend(nodes)
    if library.functions:
        gd.library.function.extend(library.functions)
    return gd


# NOTE (reads before updates): tfplus runs every read of a variable that a step needs before the step's in-place
# update of it (the planner adds those edges), so its optimizers need no gates. TensorFlow keeps only the edges a
# GraphDef has, and its ref variables' `read` aliases the buffer: without TF's gate_gradients tuples, its executor
# may apply a weight's gradient before the backward pass has read the old weight (a 5% different gradient in
# test_import_train). So a GraphDef states those edges: an update waits, by control inputs, for the reads of its
# variable that run with it (those its consumers, the train op, need) and do not depend on it.
def _reads_before_updates(ops: list) -> dict:
    """Writer op -> the reads of its variable that must run before it, for the ops that update a variable."""
    succ: dict = {}
    for op in ops:
        for p in _preds(op):
            succ.setdefault(p, []).append(op)
    added: dict = {}
    groups: dict = {}  # the ancestors of a set of consumers (a train op's updates share theirs)
    for w in ops:
        refs = [w.inputs[k] for k in w.op_def.ref_inputs]
        consumers = tuple(sorted(set(succ.get(w, ())), key=lambda op: op._id))
        if not refs or not consumers:
            continue
        after, before = _walk([w], lambda op: succ.get(op, ())), set(_preds(w))
        reads = [r for r in variable_readers(refs[0]) if r is not w and r not in after and r not in before]
        if not reads:
            continue
        if consumers not in groups:
            groups[consumers] = _walk(consumers, lambda op: _preds(op) + added.get(op, []))
        reads = sorted((r for r in reads if r in groups[consumers]), key=lambda op: op._id)
        for r in reads:
            added.setdefault(w, []).append(r)
            succ.setdefault(r, []).append(w)
    return added


def variable_readers(var, within: set | None = None) -> set:
    """The ops (of `within`, if given) that read a variable's buffer, directly or through ops whose outputs alias
    it (its `read` Identity); the ops that update it are not readers."""
    out, stack = set(), [var]
    while stack:
        x = stack.pop()
        for c in x.consumers():
            if (within is not None and c not in within) or any(c.inputs[k] is x for k in c.op_def.ref_inputs):
                continue
            out.add(c)
            stack.extend(c.outputs[k] for k, i in c.op_def.aliases.items() if c.inputs[i] is x)
    return out


def _preds(op) -> list:
    return [t.op for t in op.inputs] + list(op.control_inputs)


def _walk(starts, edges) -> set:
    """What `edges` reach from `starts`, not counting the starts themselves unless reached."""
    out, stack = set(), list(starts)
    while stack:
        for n in edges(stack.pop()):
            if n not in out:
                out.add(n)
                stack.append(n)
    return out
