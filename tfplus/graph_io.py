"""GraphDef serialization: GraphDef -> nodes of a Graph, and reading/writing graph files. Graph -> GraphDef
(Graph.as_graph_def) is tfplus.graph_export's, below the graph; tensor and attr values are tfplus.tensor_util's.

The messages (tfplus/proto/*.proto) use TensorFlow's field numbers, so TensorFlow parses what we write and we
parse what it writes (for the op types tfplus registers). Attrs are serialized by the type the op registration
declares for them (`tfplus.registry.OPS[op_type].attrs`).

    >>> import tfplus as tf
    >>> from tfplus import graph_io
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, [None, 2], name="x")
    ...     y = tf.identity(x, name="y")
    >>> gd = g.as_graph_def()
    >>> [(n.name, n.op, list(n.input)) for n in gd.node]
    [('x', 'Placeholder', []), ('y', 'Identity', ['x'])]
    >>> data = gd.SerializeToString()
    >>> with tf.Graph().as_default():
    ...     graph_io.import_graph_def(graph_io.parse_graph_def(data), return_elements=["y:0"])
    [<tf.Tensor 'import/y:0' shape=(?, 2) dtype=float32>]
"""
from __future__ import annotations

import contextlib
import gc
import os
import re

from google.protobuf import message as _message
from google.protobuf import text_format, unknown_fields

from tfplus import dtypes as _dt
from tfplus.framework import _VALID_NAME, Graph, Operation, Tensor, get_default_graph, input_count_error, topo_order
from tfplus.gfile import atomic_write
from tfplus.graph_export import _ACC, _INT32, _VARIANT
from tfplus.proto import attr_value_pb2, graph_pb2
from tfplus.registry import OPS
from tfplus.tensor_util import attr_from_proto, dtype_from_enum

__all__ = ["import_graph_def", "parse_graph_def", "read_graph_def", "write_graph"]

# The field of TensorFlow's GraphDef that tfplus does not model (debug_info): a GraphDef that TensorFlow
# wrote may carry them. Any other unknown top-level field means the bytes are not a GraphDef.
_TF_ONLY_GRAPH_FIELDS = {5}
# Attrs TensorFlow writes that do not change the result where tfplus lacks them: kernel-choice hints (cuDNN;
# MatMul's grad_a/grad_b mark a gradient's matmul), explicit paddings left empty (they apply only to
# padding="EXPLICIT"), and Equal's and NotEqual's incompatible_shape_error when true, TensorFlow's default and
# tfplus's behaviour (shapes that do not broadcast are an error; false would make them compare unequal). Dropped
# on import when the op does not declare them; any other undeclared attr is an error, as it may change what the op
# computes.
# TensorFlow's control-flow ops that tfplus does not import: TF1's dataflow ones, and of TF2's functional ones
# (with a function library) all but If and While, which tfplus's own If/While are (see the NOTE in tfplus.graph_export).
_TF_CONTROL_FLOW = {"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "RefSwitch", "RefMerge",
                    "RefEnter", "RefExit", "RefNextIteration", "StatelessCase", "Case", "PartitionedCall",
                    "StatefulPartitionedCall"}
# TensorFlow's functional If/While op types -> tfplus's.
_FUNCTIONAL = {"If": "If", "StatelessIf": "If", "While": "While", "StatelessWhile": "While"}
_TF_NO_EFFECT_ATTRS = {
    "use_cudnn_on_gpu": lambda av: True,
    "grad_a": lambda av: True,
    "grad_b": lambda av: True,
    "explicit_paddings": lambda av: not av.list.i,
    "incompatible_shape_error": lambda av: av.b,
}


# -- bytes and files -----------------------------------------------------------------------------------------
def parse_graph_def(data: bytes, source: str | None = None) -> graph_pb2.GraphDef:
    """Parses a binary GraphDef; truncated or foreign bytes raise ValueError naming `source`."""
    where = source or f"{len(data)} bytes"
    gd = graph_pb2.GraphDef()
    try:
        gd.ParseFromString(data)
    except _message.DecodeError as e:
        raise ValueError(f"cannot parse a GraphDef from {where}: {e} (truncated or not a binary GraphDef? "
                         "a text GraphDef is read with read_graph_def(path, as_text=True))") from e
    # NOTE: protobuf keeps fields it does not know; bytes that parse only into such fields are not a GraphDef.
    stray = sorted({f.field_number for f in unknown_fields.UnknownFieldSet(gd)} - _TF_ONLY_GRAPH_FIELDS)
    if stray:
        raise ValueError(f"{where} is not a GraphDef: it has unknown top-level fields {stray}")
    return gd


def read_graph_def(path: str, as_text: bool | None = None) -> graph_pb2.GraphDef:
    """Reads a GraphDef file; `as_text=None` decides by the extension (.pbtxt/.txt are text)."""
    if as_text is None:
        as_text = os.path.splitext(path)[1].lower() in (".pbtxt", ".txt")
    with open(path, "rb") as f:
        data = f.read()
    if not as_text:
        return parse_graph_def(data, source=repr(path))
    try:
        return text_format.Parse(data.decode("utf-8"), graph_pb2.GraphDef())
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot parse a text GraphDef from {path!r}: {e}") from e


def write_graph(graph_or_graph_def, logdir: str, name: str, as_text: bool = True) -> str:
    """tf.train.write_graph: writes the GraphDef to logdir/name (text by default), atomically; returns the
    path.

        >>> write_graph(tf.get_default_graph(), "/tmp/run", "graph.pbtxt")  # doctest: +SKIP
        '/tmp/run/graph.pbtxt'
    """
    gd = graph_or_graph_def.as_graph_def() if isinstance(graph_or_graph_def, Graph) else graph_or_graph_def
    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(logdir, name)
    data = text_format.MessageToString(gd).encode() if as_text else gd.SerializeToString(deterministic=True)
    atomic_write(path, data)
    return path


# The name scope tf.gradients gives the ops it adds, by default: an imported graph's backward pass (Operation.backward).
_TF_GRADIENTS = re.compile(r"(^|/)gradients(_\d+)?/")
# ... and inside it, the scope of each op's gradient function: 'gradients/<the op's name>_grad/' (Operation.grad_of)
_TF_GRAD_OF = re.compile(r"(?:^|/)gradients(?:_\d+)?/(.+?)_grad/")


# -- GraphDef -> Graph ---------------------------------------------------------------------------------------
def _split_input(s: str) -> tuple[str, int, bool]:
    """'^n' -> ('n', -1, True); 'n:2' -> ('n', 2, False); 'n' -> ('n', 0, False)."""
    if s.startswith("^"):
        return s[1:], -1, True
    name, sep, idx = s.rpartition(":")
    if sep and idx.isdigit():
        return name, int(idx), False
    return s, 0, False


def _canonical(key: str) -> str:
    name, idx, control = _split_input(key)
    return f"^{name}" if control else f"{name}:{idx}"


class _Node:
    """What import needs of one NodeDef, read once: protobuf field access is slow."""
    __slots__ = ("name", "op", "device", "inputs", "controls", "attrs", "calls")

    def __init__(self, node: graph_pb2.NodeDef):
        self.name, self.op, self.device = node.name, node.op, node.device
        self.inputs: list[tuple[str, int, str]] = []  # (source node, output index, as written)
        self.controls: list[str] = []
        self.calls: list[tuple] = []  # an If's or While's sub-graphs (see _functional_attrs)
        for s in node.input:
            src, idx, control = _split_input(s)
            if control:
                self.controls.append(src)
            elif self.controls:
                raise ValueError(f"import_graph_def: node {self.name!r} ({self.op}) lists data input {s!r} "
                                 "after a control input; control inputs ('^name') must come last")
            else:
                self.inputs.append((src, idx, s))


def _node_attrs(node: graph_pb2.NodeDef) -> dict:
    declared = OPS[node.op].attrs
    attrs = {}
    for key, av in node.attr.items():
        if key.startswith("_") or (key not in declared and _TF_NO_EFFECT_ATTRS.get(key, lambda av: False)(av)):
            continue  # TensorFlow's internal attrs (_output_shapes, _class) and kernel hints: not op semantics
        if key not in declared:
            raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) has attr {key!r}, which "
                             f"tfplus's {node.op} does not declare (declared: {sorted(declared)})")
        try:
            attrs[key] = attr_from_proto(declared[key], av)
        except (TypeError, ValueError) as e:
            raise type(e)(f"import_graph_def: node {node.name!r} ({node.op}), attr {key!r}: {e}") from None
    return attrs


def _check_node(node: _Node) -> None:
    """What a node must satisfy before it is created: its input count fits the op's signature, a Const's
    value has the declared dtype."""
    op_def = OPS[node.op]
    problem = input_count_error(op_def, node.attrs, len(node.inputs))
    if problem:
        raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) {problem}: "
                         f"{[s for _, _, s in node.inputs]}; fix the node's inputs (or its attr N)")
    if node.op == "Const" and "value" in node.attrs and "dtype" in node.attrs:
        have, want = _dt.as_dtype(node.attrs["value"].dtype), node.attrs["dtype"]
        if have is not want:
            raise TypeError(f"import_graph_def: node {node.name!r} (Const) declares dtype {want.name} but its "
                            f"value is {have.name}; make attr dtype match the value's dtype")
    for key in ("dtype", "T") if node.op in ("Const", "Placeholder", "VariableV2") else ():
        if key in op_def.attrs and key not in node.attrs:
            raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) lacks attr {key!r}")


def _check_type_attr(node: _Node, op: Operation) -> None:
    """Attr T picks the kernel, so it must be the dtype of an input (every registered op with attr T and
    inputs takes one input of dtype T); a GraphDef can say otherwise."""
    t = node.attrs.get("T")
    if op.op_def.attrs.get("T") != "type" or t is None or not op.inputs:
        return
    if all(x.dtype is not t for x in op.inputs):
        have = ", ".join(f"{x.name} {x.dtype.name}" for x in op.inputs)
        raise TypeError(f"import_graph_def: node {node.name!r} ({node.op}) has attr T={t.name}, but no input "
                        f"has that dtype (inputs: {have}); fix attr T or the inputs")


def _topological(nodes: list[_Node], deps: dict[_Node, list[_Node]]) -> list[_Node]:
    """tfplus.framework.topo_order of the nodes; ties keep GraphDef order (a GraphDef need not be sorted)."""
    position = {node: i for i, node in enumerate(nodes)}
    return topo_order(nodes, deps.__getitem__, position.__getitem__, "import_graph_def: the GraphDef")


@contextlib.contextmanager
def _gc_paused():
    """Pauses the cyclic garbage collector: an import makes many linked objects and frees none, and the
    collector's passes over them took half the time of importing a 100k-node GraphDef."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def _all_or_nothing(graph: Graph):
    """Undoes every node added to `graph` inside the block if the block fails: an import adds all its nodes
    or none."""
    n_ops, names = len(graph._ops), dict(graph._names_in_use)
    try:
        yield
    except BaseException:
        for op in graph._ops[n_ops:]:
            del graph._by_name[op.name]
            for t in op.inputs:
                users = graph._consumers.get(t)
                if users is not None and op in users:
                    users.remove(op)
        del graph._ops[n_ops:]
        graph._names_in_use = names
        raise


def import_graph_def(graph_def, input_map: dict | None = None, return_elements: list | None = None,
                     name: str | None = None) -> list | None:
    """tf.import_graph_def: recreates `graph_def`'s nodes in the default graph under the scope `name`
    ("import" if None, none if ""), through the op registry.

    `input_map` maps GraphDef tensor names ("x:0" or "x") to Tensors of this graph that replace them;
    `return_elements` names what to return: "n:i" gives a Tensor, "n" an Operation (e.g. an imported
    variable's "w/Assign" or the "init" op, which a new Session must run unless it restores a checkpoint).

        >>> y, init = tf.import_graph_def(gd, return_elements=["y:0", "init"])  # doctest: +SKIP

    Everything that can be checked beforehand (op types, attrs, input counts, inputs, names, Const values) is,
    before any node is created; what only shape inference finds (an output index a node does not have, shapes
    that do not fit) undoes the nodes already added, so an import adds all of the GraphDef or nothing.
    """
    with _gc_paused():
        return _import(graph_def, input_map, return_elements, name)


def _import(graph_def, input_map, return_elements, name):
    if not isinstance(graph_def, graph_pb2.GraphDef):
        if not hasattr(graph_def, "SerializeToString"):
            raise TypeError(f"import_graph_def: expected a GraphDef, got {type(graph_def).__name__}; "
                            "parse bytes with tfplus.graph_io.parse_graph_def")
        graph_def = parse_graph_def(graph_def.SerializeToString(), source=type(graph_def).__name__)
    graph = get_default_graph()
    library: dict[str, graph_pb2.FunctionDef] = {}
    for fdef in graph_def.library.function:
        if fdef.signature.name in library:
            raise ValueError(f"import_graph_def: the GraphDef's library defines function "
                             f"{fdef.signature.name!r} twice")
        library[fdef.signature.name] = fdef
    nodes, by_name = _parse(graph_def.node)

    mapped: dict[str, Tensor | Operation] = {}
    for key, value in (input_map or {}).items():
        value = value._as_tensor() if hasattr(value, "_as_tensor") else value
        wanted = Operation if key.startswith("^") else Tensor
        if not isinstance(value, wanted) or value.graph is not graph:
            raise ValueError(f"import_graph_def: input_map[{key!r}] must be a {wanted.__name__} of the "
                             f"default graph, got {value!r}")
        mapped[_canonical(key)] = value
    deps, used = _dependencies(nodes, by_name, mapped)
    unused = sorted(set(mapped) - used)
    if unused:
        raise ValueError(f"import_graph_def: input_map names inputs that no node of the GraphDef uses: "
                         f"{unused}")
    wanted_elements = []
    for elem in return_elements or ():
        src, idx, control = _split_input(elem) if isinstance(elem, str) else ("", 0, True)
        if control or src not in by_name:
            raise ValueError(f"import_graph_def: return element {elem!r} names no node of the GraphDef "
                             "(write 'node' for an operation, 'node:i' for its i-th output)")
        wanted_elements.append((elem, src, idx if ":" in elem else None))
    order = _topological(nodes, deps)

    with _all_or_nothing(graph), graph.name_scope("import" if name is None else name) as scope:
        created = _create(graph, order, mapped, scope, (library, {}), ())
        result = [created[src] if idx is None else
                  _output(created[src], idx, f"return element {elem!r} names output {idx}")
                  for elem, src, idx in wanted_elements]
    return None if return_elements is None else result


def _parse(protos) -> tuple[list[_Node], dict[str, _Node]]:
    """The NodeDefs read and checked as far as they can be before anything is created. A While's accumulators
    (see the NOTE in tfplus.graph_export) are dropped: what reads a history reads the While's output again."""
    nodes: list[_Node] = []
    by_name: dict[str, _Node] = {}
    history = {p.name: _split_input(p.input[0])[:2] for p in protos
               if _ACC in p.attr and p.op == "TensorListStack" and p.input}
    for proto in protos:
        if _ACC in proto.attr:
            continue
        node = _Node(proto)
        node.inputs = [(*history[src], s) if src in history and idx == 0 else (src, idx, s)
                       for src, idx, s in node.inputs]
        if not _VALID_NAME.match(node.name):
            raise ValueError(f"import_graph_def: {node.name!r} is not a valid node name (letters, digits, "
                             "'.', '_', '-', '/')")
        if node.name in by_name:
            raise ValueError(f"import_graph_def: the GraphDef has two nodes named {node.name!r}")
        if node.op in _TF_CONTROL_FLOW:
            raise ValueError(f"import_graph_def: node {node.name!r} is TensorFlow control flow ({node.op}), which "
                             "tfplus does not import; build the loop or branch in tfplus with tf.while_loop / "
                             "tf.cond instead")
        if node.op in _FUNCTIONAL:
            node.attrs = _functional_attrs(node, proto)
            node.op = _FUNCTIONAL[node.op]
        elif node.op not in OPS:
            raise ValueError(f"import_graph_def: node {node.name!r} has op type {node.op!r}, which is not "
                             f"registered in tfplus; registered op types: {', '.join(sorted(OPS))}")
        else:
            node.attrs = _node_attrs(proto)
        _check_node(node)
        by_name[node.name] = node
        nodes.append(node)
    return nodes, by_name


def _dependencies(nodes, by_name, mapped) -> tuple[dict[_Node, list[_Node]], set[str]]:
    """Each node's sources among `nodes`, and the keys of `mapped` that nodes use; an input that is neither
    fails, naming it."""
    used: set[str] = set()
    deps: dict[_Node, list[_Node]] = {}
    for node in nodes:
        ds = deps[node] = []
        for src, idx, s in node.inputs:
            key = f"{src}:{idx}"
            if key in mapped:
                used.add(key)
            elif src in by_name:
                ds.append(by_name[src])
            else:
                raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) has input {s!r}, but the "
                                 f"GraphDef has no node {src!r} and input_map does not provide it")
        for src in node.controls:
            if "^" + src in mapped:
                used.add("^" + src)
            elif src in by_name:
                ds.append(by_name[src])
            else:
                raise ValueError(f"import_graph_def: node {node.name!r} ({node.op}) has control input "
                                 f"'^{src}', but the GraphDef has no node {src!r} and input_map does not "
                                 "provide it")
    return deps, used


def _gather_batched(graph: Graph, inputs: list[Tensor], batch_dims: int, name: str) -> Operation:
    """TensorFlow's GatherV2 with batch_dims (tf.gather(..., batch_dims=1): each example takes its own entries),
    built as tf.gather builds it (gather_nd of each entry's batch coordinates), ending in an Identity of the node's
    name. Its axis must be a constant, as the rows of the batch it keeps depend on it."""
    from tfplus.framework import constant_value
    from tfplus.ops.array_ops import _gather_batched as gather_batched
    params, indices, axis = inputs
    a = constant_value(axis)
    if a is None:
        raise ValueError(f"GatherV2 with batch_dims={batch_dims} needs a constant axis, got '{axis.name}' computed "
                         "when the step runs; gather along a constant axis")
    with graph.as_default():
        out = gather_batched(params, indices, int(a), batch_dims, name + "/batched")
    return graph.create_op("Identity", [out], {"T": out.dtype}, name=name + "/")


def _create(graph: Graph, order: list[_Node], mapped: dict, scope: str, functions: tuple, stack: tuple) -> dict:
    """Creates the sorted nodes in `graph` (an If's or While's functions built as sub-graphs first); returns
    name -> Operation. `functions`: the library by name, and the sub-graphs built from it so far."""
    created: dict[str, Operation] = {}
    for node in order:
        inputs = []
        for src, idx, s in node.inputs:
            target = mapped.get(f"{src}:{idx}")
            if target is None:
                target = _output(created[src], idx, f"node {node.name!r} has input {s!r}")
            inputs.append(target)
        attrs = node.attrs
        if node.calls:
            attrs = dict(attrs)
            where = f"import_graph_def: node {node.name!r} ({node.op})"
            for key, fname, loop, caps, lo, hi, n_out in node.calls:
                args = inputs[lo:hi]
                attrs[key] = _function_graph(graph, functions, fname, where, [t.dtype for t in args], loop, caps,
                                             args[caps.start:caps.stop], n_out, stack)
            if attrs.get("output_shapes") is None:  # TensorFlow's If may leave them out: what both branches give
                from tfplus.ops.control_flow_ops import _merge_shapes
                attrs["output_shapes"] = [_merge_shapes(a._shape, b._shape) for a, b in
                                          zip(attrs["then_branch"].outputs, attrs["else_branch"].outputs)]
        try:
            if node.op == "GatherV2" and attrs.get("batch_dims"):
                op = _gather_batched(graph, inputs, attrs["batch_dims"], f"{scope}{node.name}")
            else:
                op = graph.create_op(node.op, inputs, attrs, name=f"{scope}{node.name}/")
        except (TypeError, ValueError) as e:
            raise type(e)(f"import_graph_def: node {node.name!r}: {e}") from None
        _check_type_attr(node, op)
        op.backward = bool(_TF_GRADIENTS.search(op.name))  # a GraphDef carries no marks: TF's gradient scope
        of = _TF_GRAD_OF.search(node.name)
        if of is not None:  # (what a summed loss's scaling finds: engine.step.scale_summed_losses)
            outer = node.name[:of.start()]  # the scope tf.gradients was called in
            op.grad_of = created.get(f"{outer}/{of.group(1)}" if outer else of.group(1))
        if node.controls:
            have = set(op.control_inputs)
            for src in dict.fromkeys(node.controls):
                c = mapped.get("^" + src) or created[src]
                if c not in have:
                    op.control_inputs.append(c)
                    have.add(c)
        if node.device:
            op.device = node.device
        created[node.name] = op
    return created


def _output(op: Operation, idx: int, what: str) -> Tensor:
    """Output `idx` of `op` as a GraphDef numbers it: a While's passed-through captures (see _output_number) are
    its inputs, unchanged."""
    if op.type == "While":
        n, passed = len(op.attrs["T"]), len(op.inputs) - len(op.attrs["T"])
        if n <= idx < n + passed:
            return op.inputs[idx]
        idx -= passed if idx >= n + passed else 0
    if idx >= len(op.outputs):
        raise ValueError(f"import_graph_def: {what}, but {op.type} '{op.name}' has {len(op.outputs)} "
                         f"output{'' if len(op.outputs) == 1 else 's'}")
    return op.outputs[idx]


# -- GraphDef -> Graph: functional control flow --------------------------------------------------------------
_REQUIRED = object()  # an attr without a default
_MAX_NESTING = 64  # functions calling functions: deeper is not a graph anyone built, and would exhaust the stack


def _functional_attrs(node: _Node, proto: graph_pb2.NodeDef) -> dict:
    """A functional If or While (tfplus's or TensorFlow's, see the NOTE in tfplus.graph_export) as tfplus's attrs;
    its functions, listed in node.calls as (attr, function, loop-variable args, captured args, the node's inputs
    [lo, hi) that are the args, outputs used), become sub-graphs in _create. TensorFlow's If shares its inputs
    between the branches, tfplus's takes each branch's own: those inputs are passed twice."""
    where = f"import_graph_def: node {node.name!r} ({proto.op})"

    def get(key, kind, default):
        if key not in proto.attr:
            if default is _REQUIRED:
                raise ValueError(f"{where} lacks attr {key!r}")
            return default
        try:
            return attr_from_proto(kind, proto.attr[key])
        except (TypeError, ValueError) as e:
            raise type(e)(f"{where}, attr {key!r}: {e}") from None

    def func(key) -> str:
        if key not in proto.attr or proto.attr[key].WhichOneof("value") != "func":
            raise ValueError(f"{where}: attr {key!r} must name a function of the GraphDef's library")
        return proto.attr[key].func.name

    def split(key, lo, hi, total) -> int:
        k = get(key, "int", None)
        if k is not None and not lo <= k <= hi:
            raise ValueError(f"{where}: attr {key!r} is {k}, outside [{lo}, {hi}] for {total} inputs")
        return k
    if _FUNCTIONAL[proto.op] == "If":
        n_in = len(node.inputs) - 1
        tin, tout = get("Tin", "list(type)", _REQUIRED), get("Tout", "list(type)", _REQUIRED)
        if n_in < 0 or len(tin) != n_in:
            raise ValueError(f"{where} has {n_in} inputs after its predicate but attr Tin lists {len(tin)}")
        n_then = split("_tfplus_n_then", 0, n_in, n_in)
        if n_then is None:
            node.inputs = node.inputs + node.inputs[1:]
            node.calls = [("then_branch", func("then_branch"), range(0), range(n_in), 1, 1 + n_in, len(tout)),
                          ("else_branch", func("else_branch"), range(0), range(n_in), 1 + n_in, 1 + 2 * n_in,
                           len(tout))]
            n_then, tin = n_in, tin + tin
        else:
            node.calls = [("then_branch", func("then_branch"), range(0), range(n_then), 1, 1 + n_in, len(tout)),
                          ("else_branch", func("else_branch"), range(0), range(n_then, n_in), 1, 1 + n_in,
                           len(tout))]
        shapes = get("output_shapes", "list(shape)", [])
        return {"Tcond": get("Tcond", "type", _dt.bool_), "Tin": tin, "Tout": tout, "n_then": n_then,
                "output_shapes": shapes if len(shapes) == len(tout) else None}
    n_extra = _accumulators(proto, where)  # carried after the inputs of tfplus's While; dropped here
    types = get("T", "list(type)", _REQUIRED) if not n_extra else \
        attr_from_proto("list(type)", attr_value_pb2.AttrValue(list={"type": proto.attr["T"].list.type[:-n_extra]}))
    if len(types) + n_extra != len(node.inputs):
        raise ValueError(f"{where} has {len(node.inputs)} inputs but attr T lists {len(types) + n_extra}")
    node.inputs = node.inputs[:len(types)]
    n = split("_tfplus_n_loop_vars", 0, len(types), len(types))
    n = len(types) if n is None else n
    n_cond = split("_tfplus_n_cond", 0, len(types) - n, len(types)) or 0
    node.calls = [("cond", func("cond"), range(n), range(n, n + n_cond), 0, len(types), 1),
                  ("body", func("body"), range(n), range(n + n_cond, len(types)), 0, len(types), n)]
    shapes = get("output_shapes", "list(shape)", [])
    return {"T": types[:n], "n_cond": n_cond, "parallel_iterations": get("parallel_iterations", "int", 10),
            "output_shapes": shapes[:n] if len(shapes) >= len(types) else [None] * n}


def _accumulators(proto: graph_pb2.NodeDef, where: str) -> int:
    """How many values a While that tfplus wrote carries for its gradient (a TensorList per loop variable, then a
    counter, see the NOTE in tfplus.graph_export); 0 for any other While."""
    types = list(proto.attr["T"].list.type) if "T" in proto.attr else []
    n_acc = types.count(_VARIANT)
    if n_acc == 0:
        return 0
    n = proto.attr["_tfplus_n_loop_vars"].i if "_tfplus_n_loop_vars" in proto.attr else None
    if n != n_acc or types[-n_acc - 1:] != [_VARIANT] * n_acc + [_INT32]:
        raise TypeError(f"{where} carries DT_VARIANT values, which tfplus has no dtype for (only the TensorLists "
                        "that tfplus writes after a loop's inputs, one per loop variable, then an int32 count)")
    return n_acc + 1


def _function_graph(outer: Graph, functions: tuple, name: str, where: str, arg_types: list, loop: range,
                    caps: range, captured: list, n_out: int, stack: tuple):
    """Function `name` of the library as a sub-graph of `outer`: args `loop` become its loop-variable
    placeholders, args `caps` its capture placeholders (of the outer tensors `captured`), the others are unused
    and must stay so; its first `n_out` results are its outputs. Built once for each such use, and then shared,
    as tfplus shares a sub-graph between an op and its copies (a loop body inlined into its gradient)."""
    from tfplus.ops.control_flow_ops import FuncGraph
    library, built = functions
    if (name, loop, caps, n_out) in built:
        return built[name, loop, caps, n_out]
    fdef = library.get(name)
    if fdef is None:
        raise ValueError(f"{where} calls function {name!r}, which the GraphDef's library does not define")
    if name in stack:
        raise ValueError(f"{where}: function {name!r} calls itself ({' -> '.join(stack + (name,))}); functions "
                         "cannot recurse")
    if len(stack) >= _MAX_NESTING:
        raise ValueError(f"{where}: functions nest more than {_MAX_NESTING} deep ({' -> '.join(stack[:3])} ...)")
    sig = fdef.signature
    # NOTE: a loop body tfplus wrote takes its accumulators after the args the node passes (never read here).
    try:
        have = [dtype_from_enum(a.type) for a in sig.input_arg[:len(arg_types)]]
    except TypeError as e:
        raise TypeError(f"{where}: function {name!r}: {e}") from None
    if have != list(arg_types) or any(a.type != _VARIANT for a in sig.input_arg[len(arg_types):-1]):
        raise TypeError(f"{where}: function {name!r} takes ({', '.join(d.name for d in have)}) but the node "
                        f"passes ({', '.join(d.name for d in arg_types)})")
    if len(sig.output_arg) < n_out:
        raise ValueError(f"{where}: function {name!r} returns {len(sig.output_arg)} values, the node needs {n_out}")
    g = FuncGraph(outer, name)
    args = {a.name: i for i, a in enumerate(sig.input_arg)}
    mapped = {}
    with g.as_default():
        for i in [*loop, *caps]:
            arg = sig.input_arg[i].name
            if not _VALID_NAME.match(arg) or arg in mapped:
                raise ValueError(f"{where}: function {name!r} has argument name {arg!r}: invalid or repeated")
            av = fdef.arg_attr[i].attr.get("_output_shapes") if i in fdef.arg_attr else None
            try:
                shapes = attr_from_proto("list(shape)", av) if av is not None else []
            except (TypeError, ValueError) as e:
                raise type(e)(f"{where}: function {name!r}, argument {arg!r}'s _output_shapes: {e}") from None
            ph = g.create_op("Placeholder", [], {"dtype": have[i], "shape": shapes[0] if shapes else None},
                             name=f"{arg}/")
            mapped[f"{arg}:0"] = ph.outputs[0]
    phs = list(mapped.values())
    g.inputs, g.capture_placeholders, g.captured = phs[:len(loop)], phs[len(loop):], list(captured)
    g._captures = dict(zip(g.captured, g.capture_placeholders))
    op_types = {n.name: _FUNCTIONAL.get(n.op, n.op) for n in fdef.node_def}
    accumulators = {n.name for n in fdef.node_def if _ACC in n.attr and n.op != "TensorListStack"}
    outputs_of = {**{op: OPS[op].outputs for op in set(op_types.values()) if op in OPS}, "TensorListStack": ("tensor",)}

    def graph_input(s: str) -> str:
        """A function's input ("arg", "node:output_arg:i" or "^node") as a GraphDef writes it."""
        if s.startswith("^"):
            return s
        if s in args:
            if f"{s}:0" not in mapped:
                raise ValueError(f"{where}: function {name!r} reads argument {s!r}, which this node does not "
                                 "pass to it")
            return s
        src, out, k = (s.split(":") + ["0"])[:3] if s.count(":") in (1, 2) else (s, None, None)
        if src in accumulators:  # a loop's TensorList or count, which _functional_attrs drops with them
            return s
        names = outputs_of.get(op_types.get(src), ())
        if out not in names or not k.isdigit():
            raise ValueError(f"{where}: function {name!r} has input {s!r}, which names no argument and no "
                             "node output ('node:output_arg:index')")
        return f"{src}:{names.index(out) + int(k)}"
    body, history = [], {}
    for proto in fdef.node_def:
        node = graph_pb2.NodeDef()
        node.CopyFrom(proto)
        if _ACC not in proto.attr or proto.op == "TensorListStack":  # the others are dropped unread
            node.input[:] = [graph_input(s) for s in proto.input[:1 if _ACC in proto.attr else None]]
        if _ACC in proto.attr and proto.op == "TensorListStack" and node.input:
            history[node.name] = node.input[0]
        body.append(node)
    nodes, by_name = _parse(body)
    deps, _ = _dependencies(nodes, by_name, mapped)
    with g.as_default():
        created = _create(g, _topological(nodes, deps), mapped, "", functions, stack + (name,))
    outputs = []
    for out in sig.output_arg[:n_out]:
        if out.name not in fdef.ret:
            raise ValueError(f"{where}: function {name!r} does not say what its result {out.name!r} is (ret)")
        src, idx, _ = _split_input(graph_input(fdef.ret[out.name]))
        if src in history and idx == 0:
            src, idx, _ = _split_input(history[src])
        if src in args:
            outputs.append(mapped[f"{src}:0"])
        elif src in created:
            outputs.append(_output(created[src], idx, f"function {name!r}'s result {out.name!r}"))
        else:
            raise ValueError(f"{where}: function {name!r}'s result {out.name!r} is {fdef.ret[out.name]!r}, which "
                             "names no node of the function")
    g.outputs = outputs
    built[name, loop, caps, n_out] = g
    return g
