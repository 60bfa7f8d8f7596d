"""OpenCL kernels for the optimizer update ops (ApplyGradientDescent, ApplyMomentum, ApplyAdam, ApplyRMSProp,
ApplyCenteredRMSProp, ApplyAdagrad, ApplyAdadelta): one fused kernel each, updating the variable and its slots
in place, so variables never leave the device. Source: training.cl."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import kernel, plan, register
from tfplus.registry import register_variant

SRC = "training.cl"
F = ("float32", "float64")


def _update(ctx, ins, name: str, *flags) -> None:
    """Runs update kernel `name` over the variable (ins[0]) with all inputs, then its size and `flags`."""
    rt, var = ctx.runtime, ins[0]

    def make():
        return (kernel(rt, SRC, name, var.dtype), *rt.grid1d(var.size), np.int32(var.size),
                *(np.int32(f) for f in flags))
    k, g, loc, *scalars = plan(rt, (ctx.op, name, var.size), make)
    rt.run(k, g, loc, *ins, *scalars)


@register("ApplyGradientDescent", F)
def _apply_gradient_descent(ctx, ins, outs, attrs):
    _update(ctx, ins, "apply_gradient_descent")


@register("ApplyMomentum", F)
def _apply_momentum(ctx, ins, outs, attrs):
    _update(ctx, ins, "apply_momentum", attrs.get("use_nesterov", False))


@register_variant("ApplyMomentum", "opencl", "folded")
def _apply_momentum_folded(ctx, ins, outs, attrs):
    """var -= lr * accum: a momentum update whose accum the micro-batches already made momentum * accum + grad
    (tfplus.planner.batch.slot_folds); grad and momentum are not read. Without Nesterov only."""
    var, accum, lr, _, _ = ins
    _update(ctx, [var, lr, accum], "apply_gradient_descent")


@register("ApplyAdam", F)
def _apply_adam(ctx, ins, outs, attrs):
    _update(ctx, ins, "apply_adam", attrs.get("use_nesterov", False))


@register("ApplyRMSProp", F)
def _apply_rms_prop(ctx, ins, outs, attrs):
    _update(ctx, ins, "apply_rms_prop")


@register("ApplyCenteredRMSProp", F)
def _apply_centered_rms_prop(ctx, ins, outs, attrs):
    _update(ctx, ins, "apply_centered_rms_prop")


@register("ApplyAdagrad", F)
def _apply_adagrad(ctx, ins, outs, attrs):
    _update(ctx, ins, "apply_adagrad", attrs.get("update_slots", True))


@register("ApplyAdadelta", F)
def _apply_adadelta(ctx, ins, outs, attrs):
    _update(ctx, ins, "apply_adadelta")
