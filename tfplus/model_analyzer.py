"""tf.profiler.profile and tf.profiler.ProfileOptionBuilder (TF1) over a graph's static shapes: the float
operations TensorFlow's profiler counts (tfplus.flops.tf_profiler) and the parameters of the trainable variables.

    opts = tf.profiler.ProfileOptionBuilder.float_operation()
    flops = tf.profiler.profile(tf.get_default_graph(), cmd="op", options=opts)
    print(flops.total_float_ops)

cmd "scope" (and "graph") gives the tree of name scopes, "op" (and "code") one child per op type. An op whose
shapes are not all known counts nothing (as in TF without run_meta). What a run measured (time, memory) is in
tfplus.profiler's RunMetadata and `tfplus profile`.
"""
from __future__ import annotations

import math
import re
import sys

from tfplus import flops as _flops
from tfplus.framework import GraphKeys, get_default_graph

__all__ = ["profile", "ProfileOptionBuilder"]


class ProfileOptionBuilder:
    """TF1's option builder: start from float_operation(), trainable_variables_parameter() or
    time_and_memory(), chain with_* and select/order_by, then build() (a dict)."""

    def __init__(self, options: dict | None = None):
        self._options = dict(options or _defaults())

    @staticmethod
    def float_operation() -> dict:
        return {**_defaults(), "min_float_ops": 1, "select": ["float_ops"], "order_by": "float_ops",
                "account_type_regexes": [".*"]}

    @staticmethod
    def trainable_variables_parameter() -> dict:
        return {**_defaults(), "select": ["params"], "order_by": "name",
                "account_type_regexes": ["_trainable_variables"]}

    @staticmethod
    def time_and_memory(min_micros=1, min_bytes=1, min_accelerator_micros=0, min_cpu_micros=0,
                        min_peak_bytes=0, min_residual_bytes=0, min_output_bytes=0) -> dict:
        return {**_defaults(), "min_micros": min_micros, "min_bytes": min_bytes,
                "select": ["micros", "bytes"], "order_by": "micros"}

    def _set(self, **kv) -> ProfileOptionBuilder:
        self._options.update(kv)
        return self

    def with_empty_output(self):
        return self._set(output="none")

    def with_stdout_output(self):
        return self._set(output="stdout")

    def with_file_output(self, outfile):
        return self._set(output=f"file:outfile={outfile}")

    def with_max_depth(self, max_depth):
        return self._set(max_depth=max_depth)

    def with_min_float_operations(self, min_float_ops):
        return self._set(min_float_ops=min_float_ops)

    def with_min_parameters(self, min_params):
        return self._set(min_params=min_params)

    def with_accounted_types(self, account_type_regexes):
        return self._set(account_type_regexes=list(account_type_regexes))

    def with_node_names(self, start_name_regexes=None, show_name_regexes=None, hide_name_regexes=None,
                        trim_name_regexes=None):
        for key, value in (("start_name_regexes", start_name_regexes), ("show_name_regexes", show_name_regexes),
                           ("hide_name_regexes", hide_name_regexes), ("trim_name_regexes", trim_name_regexes)):
            if value is not None:
                self._options[key] = list(value)
        return self

    def select(self, attributes):
        return self._set(select=list(attributes))

    def order_by(self, attribute):
        return self._set(order_by=attribute)

    def account_displayed_op_only(self, is_true):
        return self._set(account_displayed_op_only=bool(is_true))

    def with_step(self, step):
        return self._set(step=step)

    def with_timeline_output(self, timeline_file):
        return self._set(output=f"timeline:outfile={timeline_file}")

    def build(self) -> dict:
        return dict(self._options)


def _defaults() -> dict:
    return {"max_depth": 100, "min_bytes": 0, "min_micros": 0, "min_params": 0, "min_float_ops": 0,
            "min_occurrence": 0, "order_by": "name", "account_type_regexes": [".*"],
            "start_name_regexes": [".*"], "trim_name_regexes": [], "show_name_regexes": [".*"],
            "hide_name_regexes": [], "account_displayed_op_only": True, "select": ["micros"], "step": -1,
            "output": "stdout"}


class ProfileNode:
    """One node of profile()'s answer (TF's GraphNodeProto / MultiGraphNodeProto fields that scripts read)."""

    def __init__(self, name: str):
        self.name = name
        self.float_ops = self.total_float_ops = self.parameters = self.total_parameters = 0
        self.children: list[ProfileNode] = []

    def __repr__(self):
        return f"ProfileNode({self.name!r}, total_float_ops={self.total_float_ops}, " \
               f"total_parameters={self.total_parameters}, children={len(self.children)})"


def profile(graph=None, run_meta=None, op_log=None, cmd: str = "scope", options=None) -> ProfileNode:
    """TF1's tf.profiler.profile over `graph` (the default graph): the accounted ops' float operations and the
    trainable variables' parameters, as a tree by name scope (cmd 'scope'/'graph') or by op type ('op'/'code'),
    printed unless the options say output 'none'."""
    if cmd not in ("scope", "graph", "op", "code"):
        raise ValueError(f"tf.profiler.profile: cmd must be 'scope', 'graph', 'op' or 'code', got {cmd!r}")
    graph = graph or get_default_graph()
    options = dict(options or ProfileOptionBuilder.trainable_variables_parameter())
    accounted = [re.compile(r) for r in options.get("account_type_regexes", [".*"])]
    trainable = {v.op.name for v in graph.get_collection(GraphKeys.TRAINABLE_VARIABLES)}
    root = ProfileNode("_TFProfRoot")
    by_key: dict[str, ProfileNode] = {}
    for op in graph.get_operations():
        types = [op.type] + (["_trainable_variables"] if op.name in trainable else [])
        if not any(r.fullmatch(t) for r in accounted for t in types):
            continue
        flops = _op_flops(op)
        params = _params(op) if op.name in trainable else 0
        if not flops and not params:
            continue
        path = [op.type] if cmd in ("op", "code") else op.name.split("/")
        node, at = root, ""
        for part in path:
            at = f"{at}/{part}" if at else part
            if at not in by_key:
                by_key[at] = ProfileNode(at)
                node.children.append(by_key[at])
            node = by_key[at]
            node.total_float_ops += flops
            node.total_parameters += params
        node.float_ops += flops
        node.parameters += params
        root.total_float_ops += flops
        root.total_parameters += params
    if options.get("min_float_ops", 0) > 0:
        root.children = [c for c in root.children if c.total_float_ops >= options["min_float_ops"]]
    root.children.sort(key=lambda c: c.name)
    _output(root, options)
    return root


def _op_flops(op) -> int:
    ins = [t._shape for t in op.inputs]
    outs = [t._shape for t in op.outputs]
    if any(s is None or None in s for s in ins + outs):
        return 0
    return int(_flops.tf_profiler(op.type, ins, outs, op.attrs))


def _params(op) -> int:
    shape = op.outputs[0]._shape
    return 0 if shape is None or None in shape else math.prod(shape)


def _output(root: ProfileNode, options: dict) -> None:
    where = options.get("output", "stdout")
    if where == "none":
        return
    lines = [f"{'node name':<40} | {'# float_ops':>12} | {'# parameters':>12}"]
    lines += [f"{c.name:<40} | {c.total_float_ops:>12} | {c.total_parameters:>12}" for c in root.children]
    lines.append(f"{'total':<40} | {root.total_float_ops:>12} | {root.total_parameters:>12}")
    text = "\n".join(lines) + "\n"
    if where.startswith("file:outfile="):
        with open(where[len("file:outfile="):], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
