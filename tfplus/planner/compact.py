"""Compact state saved for backward: a ReLU followed by a 2x2 max-pool keeps one byte per pooling window.

Plain, the ReLU's output r (4 bytes per element) lives from the forward pass until MaxPoolGrad and ReluGrad
read it in the backward pass. Compacted, the max-pool's cpu kernel also writes each window's argmax (a uint8,
one per 4 elements of r, so 1/16 of r's bytes), MaxPoolGrad routes the gradient by it instead of comparing r
with the pooled values, and the ReLU mask is not stored at all: only a window's maximum receives gradient,
and there r > 0 exactly when the pooled value p > 0, which MaxPoolGrad already reads. So MaxPoolGrad applies
the mask and ReluGrad becomes a copy (none when it writes in place): r dies right after the pool. Exact, the
same ties rule (first maximum in scan order). The kernels are the "compact" variants each device declares
(tfplus.registry.register_variant, in kernels/numpy/nn.py and kernels/opencl/nn.py).

Pooled: where the device's ReLU-gradient kernel declares a "pooled" variant (the opencl _FusedReluGradBiasAddGrad),
MaxPoolGrad launches nothing and that variant routes the pool gradient itself, from MaxPoolGrad's inputs (the pool
output and its gradient) and the argmax, in the pass that sums the bias gradient: one launch less per pair and
run. The plan keeps those inputs and the argmax alive until the ReLU gradient (liveness.lifetimes' `reads`).

Kept for a streamed prefix (`keeping`): the argmax above is a buffer of one run, so a streamed prefix (planner.stream),
whose backward runs apart from its forward, recomputed the pool's input for it (conv1 and conv2 again per
micro-batch in Mentee). In a planning copy of the step, each site is instead a pair of ops with the argmax as a
tensor (tfplus/ops/argmax_pool_ops.py): _MaxPoolArgmax writes y and 4 bits a window, the argmax with the ReLU's
mask folded in (no tap where y > 0 fails), and one _ReluMaxPoolGradArgmax gives the ReLU input's gradient and its
bias sums from the pool gradient and those bits alone. A tensor, the prefix keeps it from its forward pass for its
backward pass (1/32 of the pool input's bytes) and reruns only what the other gradients read (Mentee: conv1, for
conv2's filter gradient). In the same copy, a convolution's ReLU output that a filter gradient reads besides the
ReLU's gradient (`bit_sites`: Mentee's conv1 and conv3) gets its mask as bits (_ReluMaskBits, made as soon as the
output is), which the ReLU's gradient reads (_ReluGradBits): the output may die at the filter gradient, before the
input gradient is made (block 2 of Mentee at full batch: 8.4 MB less at its peak).
"""
from __future__ import annotations

from dataclasses import dataclass

from tfplus.framework import Graph, Operation, Tensor
from tfplus.ops import argmax_pool_ops, relu_bits_ops  # noqa: F401  (the ops `keeping` makes)
from tfplus.planner import recompute
from tfplus.planner.liveness import phase_of
from tfplus.registry import has_tag, kernel_facts


@dataclass(eq=False)
class Site:
    """One ReLU -> 2x2 max-pool whose input need not be saved for backward."""
    pool: Operation         # MaxPool (writes the argmax too)
    pool_grad: Operation    # MaxPoolGrad (reads the argmax, not the pool's input)
    relu_grad: Operation    # ReluGrad (a copy of the masked MaxPoolGrad output)
    argmax_shape: tuple


def sites(ops: list[Operation], specs, fetches: list[Tensor]) -> list[Site]:
    """The ReLU -> MaxPool pairs of `ops` whose ReLU output is read only by the pool, its gradient and the
    ReLU's gradient (of that pool gradient), with a 2x2 / stride 2 window tiling the input exactly."""
    found = []
    in_step = set(ops)
    for op in ops:
        if op.type != "MaxPool" or not _is_relu(op.inputs[0].op, "Relu") or op.inputs[0] in fetches:
            continue
        r = op.inputs[0]
        fmt = op.attrs["data_format"]
        hw = (lambda v: (v[2], v[3])) if fmt == "NCHW" else (lambda v: (v[1], v[2]))
        h, w = hw(specs[r].shape)
        if hw(op.attrs["ksize"]) != (2, 2) or hw(op.attrs["strides"]) != (2, 2) or h % 2 or w % 2:
            continue
        users = [c for c in r.consumers() if c in in_step]
        grads = [c for c in users if c.type == "MaxPoolGrad" and c.inputs[0] is r and c.inputs[1] is op.outputs[0]
                 and c.attrs == op.attrs]
        if len(grads) != 1:
            continue
        relu_grads = [c for c in users if _is_relu(c, "ReluGrad") and c.inputs[1] is r
                      and c.inputs[0] is grads[0].outputs[0]]
        if len(relu_grads) != 1 or set(users) != {op, grads[0], relu_grads[0]} or \
                len([c for c in grads[0].outputs[0].consumers() if c in in_step]) != 1:
            continue
        found.append(Site(op, grads[0], relu_grads[0], specs[op.outputs[0]].shape))
    return found


def _is_relu(op: Operation, plain: str) -> bool:
    """`op` is a `plain` op (Relu, ReluGrad) or the graph rewrite's fused op (tfplus.engine.rewrite) ending (for the
    gradient: starting) in one, whose kernels have the same compact variant."""
    fused = "activation_last" if plain == "Relu" else "activation_grad_first"  # registry.TAGS
    return op.type == plain or (has_tag(op.type, fused) and op.attrs["activation"] == "Relu")


def pooled(s: Site, device: str) -> bool:
    """Whether `device`'s ReLU-gradient kernel of site `s` routes the pool gradient itself (see the module)."""
    return "pooled" in kernel_facts(s.relu_grad.type, device).variants


def unread(site_list: list[Site]) -> set[tuple[Operation, int]]:
    """(op, input index) pairs that the compact kernels do not read: the ReLU output at both gradients."""
    return {(s.pool_grad, 0) for s in site_list} | {(s.relu_grad, 1) for s in site_list}


def keeping(order: list[Operation], feeds: set[Tensor], site_list: list[Site], fetches: list) -> recompute.Rewrite:
    """A planning copy of the ops in `order` (and of the fed tensors' ops) in which each site of `site_list` is the
    argmax pair (see the module): its pool a _MaxPoolArgmax of the same name, its MaxPoolGrad and ReLU gradient
    one _ReluMaxPoolGradArgmax named as the ReLU gradient, whose outputs stand for the ReLU gradient's (the
    gradient, and the bias sums where that op gave them); and each of the `bit_sites` the mask bits pair. Its
    tensors' `argmax` outputs: `kept_bytes`."""
    g = Graph()
    op_map: dict[Operation, Operation] = {}
    tmap: dict[Tensor, Tensor] = {}
    pools = {s.pool: s for s in site_list}
    grads = {s.relu_grad: s for s in site_list}
    found = {r: grad for r, grad in bit_sites(order, fetches).items() if grad not in grads}  # the argmax has them
    producers = {r.op for r in found}
    relu_grads = {grad: r for r, grad in found.items()}
    masks: dict[Tensor, Tensor] = {}
    skipped = {s.pool_grad for s in site_list}
    in_step = set(order)
    for op in sorted(in_step | {t.op for t in feeds}, key=lambda o: o._id):
        if op in skipped:
            continue
        if op in pools:
            new = g.create_op("_MaxPoolArgmax", [tmap[op.inputs[0]]], op.attrs, op.name + "/")
        elif op in relu_grads:
            new = g.create_op("_ReluGradBits", [tmap[op.inputs[0]], masks[relu_grads[op]]],
                              {"T": op.attrs["T"], "data_format": op.attrs["data_format"]}, op.name + "/")
            new.backward = True
        elif op in grads:
            s = grads[op]
            new = g.create_op("_ReluMaxPoolGradArgmax", [tmap[s.pool_grad.inputs[2]], op_map[s.pool].outputs[1]],
                              s.pool_grad.attrs, op.name + "/")
            new.backward = True
            op_map[s.pool_grad] = new
        else:
            # A fed tensor's op that the step does not run (an intermediate fed) stands in with no inputs.
            ins = [tmap.get(u) for u in op.inputs] if op in in_step else []
            new = recompute._copy(g, op, ins, op.name, [])
        op_map[op] = new
        tmap.update(zip(op.outputs, new.outputs))
        if op in producers:  # the mask's bits as soon as the ReLU output is made
            r = op.outputs[0]
            masks[r] = g.create_op("_ReluMaskBits", [tmap[r]], {"T": r.dtype}, f"{op.name}/mask_bits/").outputs[0]
            masks[r].op.backward = True
    # Control inputs last: planner.recompute's copies order a later-made op before an earlier one (a filter
    # gradient that reads a recomputed tensor before the input gradient).
    for op, new in op_map.items():
        for c in dict.fromkeys(op_map[c] for c in op.control_inputs if c in op_map):
            if c is not new and c not in new.control_inputs:
                new._add_control_input(c)
    return recompute.Rewrite(g, tmap, op_map, [])


def kept_bytes(ops, outputs: bool = False) -> list[Tensor]:
    """The argmax tensors of the _MaxPoolArgmax ops among `ops` (a `keeping` copy's), with `outputs` their pooled
    outputs too (a quarter of the pool's input: what the next block's filter gradient reads, without rerunning the
    block before)."""
    return [t for op in ops if op.type == "_MaxPoolArgmax" for t in (op.outputs[1:2] if not outputs else op.outputs)]


def bit_sites(order: list[Operation], fetches: list) -> dict[Tensor, Operation]:
    """{ReLU output: its gradient} for the rank-4 ReLU outputs of `order` (not fetched) whose gradient is the graph
    rewrite's _FusedReluGradBiasAddGrad and which another backward op (a filter gradient) reads too."""
    in_step, found = set(order), {}
    for op in order:
        if not _is_relu(op, "Relu") or phase_of(op) != "forward" or op.outputs[0] in fetches:
            continue
        r = op.outputs[0]
        if r.shape is None or len(r.shape) != 4:
            continue
        readers = [c for c in r.consumers() if c in in_step and phase_of(c) == "backward"]
        grads = [c for c in readers if c.type == "_FusedReluGradBiasAddGrad" and c.attrs["activation"] == "Relu"
                 and c.inputs[1] is r and c.inputs[0] is not r]
        if len(grads) == 1 and len(readers) > 1:
            found[r] = grads[0]
    return found
