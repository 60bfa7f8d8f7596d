"""Fused ops that only the graph rewrite (tfplus.engine.rewrite) creates: each does the work of a chain of ops in one
kernel launch (one pass over memory on the cpu). They exist only after autodiff, so they are declared not
differentiable; their names start with '_' as TensorFlow's grappler-made `_Fused*` ops do.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tfplus import flops
from tfplus.ops import nn_ops  # noqa: F401  (Conv2D's OpDef, which _FusedConv2DBiasRelu extends)
from tfplus.ops.row_rules import aligned, reduces, rowwise
from tfplus.registry import get_op_def, not_differentiable, register_op, register_rows
from tfplus.tensor_shape import check_rank, check_same_dtype, fmt, merge_dim, spec

if TYPE_CHECKING:
    from tfplus.framework import Operation

# The activations a fused bias op may end in; the mask their gradient applies is (0 < f) or (0 < f < 6).
ACTIVATIONS = ("Relu", "Relu6")
_ATTRS = {"T": "type", "data_format": "string", "activation": "string"}


def _channel_axis(shape: tuple, attrs) -> int:
    return 1 if attrs["data_format"] == "NCHW" else len(shape) - 1


def _check_attrs(attrs) -> None:
    if attrs.get("activation") not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {attrs.get('activation')!r}")
    if attrs.get("data_format") not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format must be NHWC or NCHW, got {attrs.get('data_format')!r}")


# -- _FusedBiasAddRelu: activation(value + bias) ---------------------------------------------------------------
def _fused_bias_add_shape(ins, attrs):
    x, b = ins
    _check_attrs(attrs)
    check_same_dtype(ins, "value and bias")
    check_rank(b, 1, "bias")
    if x.shape is None:
        return [spec(None, x.dtype)]
    if len(x.shape) < (3 if attrs["data_format"] == "NCHW" else 2):
        raise ValueError(f"value of shape {fmt(x.shape)} is too small for data_format {attrs['data_format']}")
    axis = _channel_axis(x.shape, attrs)
    c = merge_dim(x.shape[axis], b.shape[0] if b.shape else None,
                  f"bias of shape {fmt(b.shape)} must match the channel dimension of value {fmt(x.shape)}")
    return [spec(x.shape[:axis] + (c,) + x.shape[axis + 1:], x.dtype)]


register_op("_FusedBiasAddRelu", inputs=("value", "bias"), outputs=("activations",), attrs=_ATTRS,
            shape_fn=_fused_bias_add_shape, flops=flops.per_output, tags=("activation_last",))
register_rows(aligned, "_FusedBiasAddRelu")
not_differentiable("_FusedBiasAddRelu")


# -- _FusedConv2DBiasRelu: activation(conv2d(input, filter) + bias) -------------------------------------------------
# Conv2D's attrs plus `activation`; the bias is added in the conv's output format (data_format).
def _fused_conv_shape(ins, attrs):
    x, f, b = ins
    _check_attrs(attrs)
    check_same_dtype(ins, "input, filter and bias")
    check_rank(b, 1, "bias")
    (y,) = get_op_def("Conv2D").shape_fn([x, f], attrs)
    if y.shape is None:
        return [y]
    axis = _channel_axis(y.shape, attrs)
    c = merge_dim(y.shape[axis], b.shape[0] if b.shape else None,
                  f"bias of shape {fmt(b.shape)} must match the output channels of the convolution {fmt(y.shape)}")
    return [spec(y.shape[:axis] + (c,) + y.shape[axis + 1:], y.dtype)]


register_op("_FusedConv2DBiasRelu", inputs=("input", "filter", "bias"), outputs=("activations",),
            attrs={**get_op_def("Conv2D").attrs, "activation": "string"}, shape_fn=_fused_conv_shape,
            flops=flops.conv2d, tags=("gemm", "activation_last"))
register_rows(rowwise, "_FusedConv2DBiasRelu")
not_differentiable("_FusedConv2DBiasRelu")


# -- _FusedMatMul: activation(matmul(a, b) + bias) ------------------------------------------------------------
# MatMul's attrs (written out: math_ops is not imported yet when this module is) plus `activation`: Relu, Relu6,
# or "" (the bias alone: a logits layer). TensorFlow's remapper makes the same op (its attr fused_ops lists
# BiasAdd and the activation).
MATMUL_ACTIVATIONS = ("", *ACTIVATIONS)


def _fused_matmul_shape(ins, attrs):
    a, b, bias = ins
    if attrs.get("activation") not in MATMUL_ACTIVATIONS:
        raise ValueError(f"activation must be one of {MATMUL_ACTIVATIONS}, got {attrs.get('activation')!r}")
    check_same_dtype(ins, "a, b and bias")
    check_rank(bias, 1, "bias")
    (y,) = get_op_def("MatMul").shape_fn([a, b], attrs)
    if y.shape is None:
        return [y]
    n = merge_dim(y.shape[1], bias.shape[0] if bias.shape else None,
                  f"bias of shape {fmt(bias.shape)} must match the columns of the product {fmt(y.shape)}")
    return [spec((y.shape[0], n), y.dtype)]


register_op("_FusedMatMul", inputs=("a", "b", "bias"), outputs=("product",),
            attrs={"T": "type", "transpose_a": "bool", "transpose_b": "bool", "activation": "string"},
            shape_fn=_fused_matmul_shape,
            flops=flops.matmul, tags=("gemm",))
register_rows(get_op_def("MatMul").rows, "_FusedMatMul")
not_differentiable("_FusedMatMul")


# -- _FusedReluGradBiasAddGrad: dx = gradients * mask(features), db = dx summed over all but the channel axis ------
# `features` is what the activation's own gradient reads: the Relu output, or the Relu6 input.
def _fused_relu_grad_shape(ins, attrs):
    g, f = ins
    _check_attrs(attrs)
    check_same_dtype(ins, "gradients and features")
    shape = g.shape if g.shape is not None else f.shape
    if g.shape is not None and f.shape is not None:
        if len(g.shape) != len(f.shape):
            raise ValueError(f"gradients {fmt(g.shape)} and features {fmt(f.shape)} must have one shape")
        shape = tuple(merge_dim(a, b, "gradients and features must have one shape") for a, b in zip(g.shape, f.shape))
    if shape is None:
        return [spec(None, g.dtype), spec((None,), g.dtype)]
    if len(shape) < (3 if attrs["data_format"] == "NCHW" else 2):
        raise ValueError(f"gradients of shape {fmt(shape)} are too small for data_format {attrs['data_format']}")
    return [spec(shape, g.dtype), spec((shape[_channel_axis(shape, attrs)],), g.dtype)]


register_op("_FusedReluGradBiasAddGrad", inputs=("gradients", "features"), outputs=("backprops", "bias_backprop"),
            attrs=_ATTRS, shape_fn=_fused_relu_grad_shape, flops=flops.per_input,
            tags=("row_sums", "activation_grad_first"))
register_rows(rowwise, "_FusedReluGradBiasAddGrad")
not_differentiable("_FusedReluGradBiasAddGrad")


# -- The backward folds (issue 37): the ReLU gradient's mask applied as its gradient is written, the bias gradient
# summed where the filter gradient reads the same dy. Each output equals the chain it replaces; the rewrite makes
# them on a GPU (tfplus.engine.rewrite.backward_folds).
def _mask_shape(ins, attrs, base: str, what: str):
    """The output of op `base` over ins[:-1], checked against the ReLU's features (the last input)."""
    (y,) = get_op_def(base).shape_fn(ins[:-1], attrs)
    f = ins[-1]
    check_same_dtype([y, f], what)
    if y.shape is None or f.shape is None:
        return [spec(y.shape if y.shape is not None else f.shape, y.dtype)]
    if len(y.shape) != len(f.shape):
        raise ValueError(f"{what} must have one shape, not {fmt(y.shape)} and {fmt(f.shape)}")
    return [spec(tuple(merge_dim(a, b, f"{what} must have one shape") for a, b in zip(y.shape, f.shape)), y.dtype)]


# _FusedConv2DBackpropInputReluGrad: Conv2DBackpropInput(input_sizes, filter, out_backprop) masked by the gradient
# of `activation` at `features` (ReluGrad's second input: the Relu's output; Relu6Grad's: its input).
def _dx_relu_grad_shape(ins, attrs):
    _check_attrs(attrs)
    return _mask_shape(ins, attrs, "Conv2DBackpropInput", "the input gradient and the features")


register_op("_FusedConv2DBackpropInputReluGrad", inputs=("input_sizes", "filter", "out_backprop", "features"),
            outputs=("backprops",), attrs={**get_op_def("Conv2DBackpropInput").attrs, "activation": "string"},
            shape_fn=_dx_relu_grad_shape, value_inputs=(0,), flops=flops.conv2d_backprop_input,
            tags=("gemm",))
register_rows(rowwise, "_FusedConv2DBackpropInputReluGrad")
not_differentiable("_FusedConv2DBackpropInputReluGrad")


# _FusedMaxPoolGradReluGrad: ReluGrad(MaxPoolGrad(orig_input, orig_output, grad), orig_input): the pool's input is
# the Relu's output, so the mask is orig_input > 0, read where MaxPoolGrad reads it anyway.
def _pool_relu_grad_shape(ins, attrs):
    return get_op_def("MaxPoolGrad").shape_fn(ins, attrs)


register_op("_FusedMaxPoolGradReluGrad", inputs=("orig_input", "orig_output", "grad"), outputs=("backprops",),
            attrs=get_op_def("MaxPoolGrad").attrs, shape_fn=_pool_relu_grad_shape, flops=flops.pool_grad)
register_rows(rowwise, "_FusedMaxPoolGradReluGrad")
not_differentiable("_FusedMaxPoolGradReluGrad")


# _FusedConv2DBackpropFilterBiasAddGrad: Conv2DBackpropFilter(input, filter_sizes, out_backprop) and
# BiasAddGrad(out_backprop): one more GEMM row, of ones, sums dy per output channel as the filter gradient reads it.
def _dw_bias_shape(ins, attrs):
    (dw,) = get_op_def("Conv2DBackpropFilter").shape_fn(ins, attrs)
    return [dw, spec((dw.shape[3] if dw.shape is not None else None,), dw.dtype)]


register_op("_FusedConv2DBackpropFilterBiasAddGrad", inputs=("input", "filter_sizes", "out_backprop"),
            outputs=("output", "bias_backprop"), attrs=get_op_def("Conv2DBackpropFilter").attrs,
            shape_fn=_dw_bias_shape, value_inputs=(1,), flops=flops.conv2d_backprop_filter,
            tags=("gemm", "row_sums"))
register_rows(reduces, "_FusedConv2DBackpropFilterBiasAddGrad")
not_differentiable("_FusedConv2DBackpropFilterBiasAddGrad")


# -- _FusedL2Loss: sum of L2Loss(t) over its inputs, i.e. (sum of t ** 2 over every input) / 2 -------------------
# The AddN of weight decay's L2Losses in one op (one or two launches instead of one per weight and the AddN).
def _fused_l2_loss_shape(ins, attrs):
    check_same_dtype(ins, "the tensors of _FusedL2Loss")
    if not ins or ins[0].dtype.name not in ("float32", "float64"):
        raise TypeError("_FusedL2Loss sums float32 or float64 tensors, got "
                        + (ins[0].dtype.name if ins else "none"))
    return [spec((), ins[0].dtype)]


def _fused_l2_loss_flops(ins, outs, attrs) -> float:
    return float(sum(math.prod(shape) for shape in ins))  # one per element of every input, as L2Loss


register_op("_FusedL2Loss", inputs=("t*",), outputs=("output",), attrs={"T": "type", "N": "int"},
            shape_fn=_fused_l2_loss_shape, flops=_fused_l2_loss_flops)
register_rows(reduces, "_FusedL2Loss")
not_differentiable("_FusedL2Loss")


# -- _FusedSparseXentMean: a mean sparse cross-entropy loss and its gradient w.r.t. the logits, in one op ---------
# outputs: loss = mean over the rows of -log(softmax(logits)[label]); backprop = (softmax(logits) - onehot(label))
# / max(rows, 1), the logits' gradient when the loss is what tf.gradients differentiates (its grad_ys: ones). The
# rewrite replaces SparseSoftmaxCrossEntropyWithLogits, the Mean and Mean's and the cross-entropy's gradient chain
# (tfplus.engine.rewrite._fused_loss), three launches on opencl, with it. The scale is 1 / rows in T, as RealDiv over
# the casts of the sizes makes it, so the gradient keeps its bits.
def _fused_xent_mean_shape(ins, attrs):
    loss, backprop = get_op_def("SparseSoftmaxCrossEntropyWithLogits").shape_fn(ins, attrs)
    return [spec((), loss.dtype), backprop]


register_op("_FusedSparseXentMean", inputs=("features", "labels"), outputs=("loss", "backprop"),
            attrs={"T": "type", "Tlabels": "type"}, shape_fn=_fused_xent_mean_shape, flops=flops.times_input(6),
            tags=("row_means",))
register_rows(rowwise, "_FusedSparseXentMean")
not_differentiable("_FusedSparseXentMean")


# -- _FusedApply: one optimizer update (attr `op`) over `num_vars` variables in one op ---------------------------
# Inputs: the update's scalar inputs once (in its order), then each variable's other inputs (in its order), so
# the variables must share their scalar tensors (learning rate, momentum...). The variable and slot inputs are
# updated in place; which inputs those are depends on num_vars, so the rewrite gives each node its own OpDef
# (ref_inputs) from `apply_refs`. Weight decay: attr `decayed` (one 0/1 per variable) marks the variables whose
# gradient is grad + decay * var, where `decay`, a scalar, is the last input (present when any is marked): the
# rewrite folds L2Loss's gradient AddN(Mul(var, decay), grad) into the update.
APPLY_SCALARS = {"ApplyGradientDescent": (1,), "ApplyMomentum": (2, 4), "ApplyAdam": (3, 4, 5, 6, 7, 8)}
APPLY_GRAD = {"ApplyGradientDescent": 2, "ApplyMomentum": 3, "ApplyAdam": 9}  # the gradient's input position
# The updates whose _FusedApply kernels add the decay on both devices (the opencl kernels of the others would
# need a pass of their own).
DECAY_FUSES = ("ApplyGradientDescent", "ApplyMomentum")


def split_decay(ins: list, attrs) -> tuple[list, object]:
    """(the inputs less the decay coefficient, the coefficient or None) of a _FusedApply."""
    if any(attrs.get("decayed") or ()):
        return ins[:-1], ins[-1]
    return ins, None


def apply_groups(op_type: str, ins: list) -> list[list]:
    """Each variable's inputs of a _FusedApply (`ins`: its inputs, or their specs) in `op_type`'s order."""
    scalars = APPLY_SCALARS[op_type]
    k = len(get_op_def(op_type).inputs)
    per_var = k - len(scalars)
    if (len(ins) - len(scalars)) % per_var:
        raise ValueError(f"{len(ins)} inputs do not make {op_type} groups of {per_var} after {len(scalars)} "
                         "scalars")
    groups = []
    for j in range(len(scalars), len(ins), per_var):
        rest = iter(ins[j:j + per_var])
        shared = iter(ins[:len(scalars)])
        groups.append([next(shared) if i in scalars else next(rest) for i in range(k)])
    return groups


def on_groups(ins: list, attrs, groups) -> tuple[list, dict]:
    """(inputs, attrs) of a _FusedApply over the variables of `groups` alone (apply_groups' indices): the scalars
    and the decay shared."""
    body, decay = split_decay(list(ins), attrs)
    n = len(APPLY_SCALARS[attrs["op"]])
    per = (len(body) - n) // attrs["num_vars"]
    part = body[:n] + [x for j in groups for x in body[n + j * per:n + (j + 1) * per]]
    decayed = [attrs["decayed"][j] for j in groups] if attrs.get("decayed") else []
    return part + ([decay] if any(decayed) else []), {**attrs, "num_vars": len(groups), "decayed": decayed}


# The updates whose slots may live in host memory (tfplus.planner.paging): the refs of each variable's group other
# than the variable itself.
PAGED_UPDATES = ("ApplyMomentum", "ApplyAdam")


def slot_positions(op: Operation) -> list[list[int]]:
    """Per variable group of update op `op` (ApplyMomentum, ApplyAdam or a _FusedApply of them), the input positions
    of the slots it updates in place; [] for other ops."""
    kind = op.attrs.get("op") if op.type == "_FusedApply" else op.type
    if kind not in PAGED_UPDATES:
        return []
    refs = [k for k in get_op_def(kind).ref_inputs if k != 0]  # 0: the variable itself
    if op.type != "_FusedApply":
        return [refs]
    scalars = APPLY_SCALARS[kind]
    rest = [i for i in range(len(get_op_def(kind).inputs)) if i not in scalars]
    return [[len(scalars) + j * len(rest) + rest.index(k) for k in refs] for j in range(op.attrs["num_vars"])]


def slot_refs(op: Operation) -> list[list]:
    """Per variable group of update op `op`, the slot tensors it updates in place (none for other ops)."""
    return [[op.inputs[k] for k in g] for g in slot_positions(op)]


def apply_refs(op_type: str, num_vars: int) -> tuple:
    """The input positions of a _FusedApply of `num_vars` variables that its kernel updates in place."""
    scalars = APPLY_SCALARS[op_type]
    rest = [i for i in range(len(get_op_def(op_type).inputs)) if i not in scalars]
    refs = get_op_def(op_type).ref_inputs
    return tuple(len(scalars) + j * len(rest) + rest.index(r) for j in range(num_vars) for r in refs)


def _fused_apply_shape(ins, attrs):
    op_type = attrs["op"]
    if op_type not in APPLY_SCALARS:
        raise ValueError(f"op must be one of {sorted(APPLY_SCALARS)}, got {op_type!r}")
    ins, decay = split_decay(list(ins), attrs)
    groups = apply_groups(op_type, ins)
    if len(groups) != attrs["num_vars"]:
        raise ValueError(f"num_vars is {attrs['num_vars']} but the inputs make {len(groups)} {op_type} groups")
    decayed = attrs.get("decayed") or ()
    if decayed and len(decayed) != len(groups):
        raise ValueError(f"decayed has {len(decayed)} entries for {len(groups)} variables; give one per variable")
    if decay is not None:
        if op_type not in DECAY_FUSES:
            raise ValueError(f"{op_type} updates take no decay here; only {DECAY_FUSES} do")
        check_rank(decay, 0, "decay")
        check_same_dtype([groups[0][0], decay], "the variables and decay")
    for group in groups:
        get_op_def(op_type).shape_fn(group, attrs)
    return []


def _fused_apply_flops(ins, outs, attrs) -> float:
    """The updates', plus a multiply and an add per element of a decayed variable (the Mul and AddN folded in)."""
    groups = apply_groups(attrs["op"], split_decay(list(ins), attrs)[0])
    decayed = attrs.get("decayed") or [0] * len(groups)
    return sum(flops.of(attrs["op"], group, [], attrs) + 2 * d * math.prod(group[0])
               for group, d in zip(groups, decayed))


register_op("_FusedApply", inputs=("input*",), outputs=(), stateful=True, shape_fn=_fused_apply_shape,
            flops=_fused_apply_flops,
            attrs={"T": "type", "op": "string", "num_vars": "int", "use_locking": "bool", "use_nesterov": "bool",
                   "decayed": "list(int)"})
not_differentiable("_FusedApply")


# -- _FusedMovingAverages: variable -= (variable - value) * factor, for `num_vars` variables in one op ---------
# Inputs: (variable, value, factor) per variable, factor a scalar (1 - decay). The rewrite
# (tfplus.engine.rewrite_bn.moving_average_groups) replaces each AssignSub(v, Mul(Sub(v, value), factor)) that
# tf.layers.batch_normalization and tf.train.ExponentialMovingAverage build, three launches a variable, with one
# op: the variables are updated in place (inputs 0, 3, 6...: the rewrite gives each node its OpDef's ref_inputs
# from `moving_average_refs`, as _FusedApply's). The arithmetic is the chain's, rounded as it rounds.
def moving_average_refs(num_vars: int) -> tuple:
    """The input positions of a _FusedMovingAverages of `num_vars` variables that it updates in place."""
    return tuple(3 * j for j in range(num_vars))


def _fused_moving_averages_shape(ins, attrs):
    if len(ins) != 3 * attrs["num_vars"]:
        n = attrs["num_vars"]
        raise ValueError(f"_FusedMovingAverages takes (variable, value, factor) for each of its num_vars={n} "
                         f"variables: {3 * n} inputs, got {len(ins)}")
    for j in range(0, len(ins), 3):
        var, value, factor = ins[j:j + 3]
        check_same_dtype([var, value, factor], f"variable {j // 3}, its value and its factor")
        if var.dtype.name not in ("float32", "float64"):
            raise TypeError(f"_FusedMovingAverages averages float32 or float64 variables, got {var.dtype.name} "
                            f"(variable {j // 3})")
        check_rank(factor, 0, f"factor {j // 3}")
        if var.shape is not None and value.shape is not None:
            wrong = f"variable {j // 3} has shape {fmt(var.shape)} but its value {fmt(value.shape)}"
            if len(var.shape) != len(value.shape):
                raise ValueError(wrong)
            for a, b in zip(var.shape, value.shape):
                merge_dim(a, b, wrong)
    return []


def _fused_moving_averages_flops(ins, outs, attrs) -> float:
    return float(3 * sum(math.prod(shape) for shape in ins[0::3]))  # a subtract, a multiply, a subtract each


register_op("_FusedMovingAverages", inputs=("input*",), outputs=(), attrs={"T": "type", "num_vars": "int"},
            stateful=True, shape_fn=_fused_moving_averages_shape, flops=_fused_moving_averages_flops)
not_differentiable("_FusedMovingAverages")


# -- _FusedBatchNormRelu: activation(FusedBatchNormV3(x, ...)) -------------------------------------------------------
# FusedBatchNormV3's inputs, outputs and attrs plus `activation` (Relu or Relu6): output y is the activation's
# output, z; the others are the batch norm's. The rewrite (tfplus.engine.rewrite_bn) makes it when the normalized
# value is read only by the activation and by the activation's gradient (which reads the mask from z instead: z
# is in (0, 6), or > 0, exactly where the value is). Tagged cross_batch as FusedBatchNormV3: in training mode it
# mixes the batch's rows (the planner's micro-batching computes its statistics in passes).
_BN_ACT_ATTRS = {**get_op_def("FusedBatchNormV3").attrs, "activation": "string"}


def _fused_batch_norm_relu_shape(ins, attrs):
    if attrs.get("activation") not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {attrs.get('activation')!r}")
    return get_op_def("FusedBatchNormV3").shape_fn(ins, attrs)


register_op("_FusedBatchNormRelu", inputs=get_op_def("FusedBatchNormV3").inputs,
            outputs=get_op_def("FusedBatchNormV3").outputs, attrs=_BN_ACT_ATTRS, shape_fn=_fused_batch_norm_relu_shape,
            flops=flops.times_input(8), tags=("cross_batch",))
register_rows(rowwise, "_FusedBatchNormRelu")
not_differentiable("_FusedBatchNormRelu")


# -- _FusedBatchNormReluGrad: FusedBatchNormGradV3(activation's gradient(dz, z), x, ...) -----------------------------
# FusedBatchNormGradV3's inputs plus the activation's output z last (so that the batch norm's keep their places),
# its outputs, and its attrs plus `activation`: dy = dz masked where z is in (0, 6) (Relu6) or > 0 (Relu), then the
# batch norm's gradient of dy, in the same passes (the mask is applied as each pass reads dz).
def _fused_batch_norm_relu_grad_shape(ins, attrs):
    if attrs.get("activation") not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {attrs.get('activation')!r}")
    outs = get_op_def("FusedBatchNormGradV3").shape_fn(ins[:6], attrs)
    z, x = ins[6], ins[1]
    check_same_dtype([x, z], "x and activations")
    if z.shape is not None and x.shape is not None:
        if len(z.shape) != len(x.shape):
            raise ValueError(f"activations {fmt(z.shape)} and x {fmt(x.shape)} must have one shape")
        for a, b in zip(z.shape, x.shape):
            merge_dim(a, b, f"activations {fmt(z.shape)} and x {fmt(x.shape)} must have one shape")
    return outs


register_op("_FusedBatchNormReluGrad", inputs=(*get_op_def("FusedBatchNormGradV3").inputs, "activations"),
            outputs=get_op_def("FusedBatchNormGradV3").outputs,
            attrs={**get_op_def("FusedBatchNormGradV3").attrs, "activation": "string"},
            shape_fn=_fused_batch_norm_relu_grad_shape, flops=flops.times_input(11))
register_rows(rowwise, "_FusedBatchNormReluGrad")
not_differentiable("_FusedBatchNormReluGrad")
