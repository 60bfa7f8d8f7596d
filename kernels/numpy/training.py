"""NumPy kernels for the optimizer update ops. ins[0] (and the slots) are the variables' live buffers: the
kernels update them in place, with one scratch buffer of the variable's size (two for Nesterov Adam). Each
update runs on element ranges split over the intra-op threads (tfplus.threads): every element's arithmetic is
the same whatever the split."""
from __future__ import annotations

import numpy as np

from tfplus import threads
from tfplus.dtypes import float16, float32, float64
from tfplus.registry import register_kernel, register_variant, register_workspace

DTYPES = (float16, float32, float64)  # the dtypes optimizers accept


def _scratch(n: int):
    """Workspace declaration: `n` buffers shaped like the variable."""
    def fn(ins, attrs):
        return [(ins[0].shape, attrs["T"])] * n
    return fn


@register_kernel("ApplyGradientDescent", "cpu", DTYPES)
def _apply_gradient_descent(ctx, ins, outs, attrs):
    var, alpha, delta = ins
    tmp = ctx.workspace(var.shape, attrs["T"])

    def body(var, delta, tmp):
        np.multiply(delta, alpha, out=tmp)
        var -= tmp
    threads.sharded(body, var, delta, tmp)


register_workspace("ApplyGradientDescent", "cpu")(_scratch(1))


@register_kernel("ApplyMomentum", "cpu", DTYPES)
def _apply_momentum(ctx, ins, outs, attrs):
    var, accum, lr, grad, momentum = ins
    tmp = ctx.workspace(var.shape, attrs["T"])
    nesterov = attrs.get("use_nesterov", False)

    def body(var, accum, grad, tmp):
        accum *= momentum
        accum += grad
        if nesterov:
            # lr * grad + lr * momentum * accum, as lr * (grad + momentum * accum): one scratch buffer.
            np.multiply(accum, momentum, out=tmp)
            tmp += grad
            tmp *= lr
        else:
            np.multiply(accum, lr, out=tmp)
        var -= tmp
    threads.sharded(body, var, accum, grad, tmp)


register_workspace("ApplyMomentum", "cpu")(_scratch(1))


@register_variant("ApplyMomentum", "cpu", "folded")
def _apply_momentum_folded(ctx, ins, outs, attrs):
    """var -= lr * accum: a momentum update whose accum the micro-batches already made momentum * accum + grad
    (tfplus.planner.batch.slot_folds); grad and momentum are not read. Without Nesterov only."""
    var, accum, lr, _, _ = ins
    _apply_gradient_descent(ctx, [var, lr, accum], outs, attrs)


@register_kernel("ApplyAdam", "cpu", DTYPES)
def _apply_adam(ctx, ins, outs, attrs):
    var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad = ins
    one = var.dtype.type(1)
    # Scalars stay in the variable's dtype, as in TF's kernel.
    alpha = lr * np.sqrt(one - beta2_power) / (one - beta1_power)
    tmp = ctx.workspace(var.shape, attrs["T"])
    nesterov = attrs.get("use_nesterov", False)
    den = ctx.workspace(var.shape, attrs["T"]) if nesterov else tmp

    def body(var, m, v, grad, tmp, den):
        # m += (grad - m) * (1 - beta1) is m = beta1 * m + (1 - beta1) * grad without a second scratch buffer.
        np.subtract(grad, m, out=tmp)
        tmp *= one - beta1
        m += tmp
        np.multiply(grad, grad, out=tmp)
        tmp -= v
        tmp *= one - beta2
        v += tmp
        if nesterov:
            # numerator beta1 * m + (1 - beta1) * grad = m + (1 - beta1) * (grad - m)
            np.sqrt(v, out=den)
            den += epsilon
            np.subtract(grad, m, out=tmp)
            tmp *= one - beta1
            tmp += m
            tmp /= den
        else:
            np.sqrt(v, out=tmp)
            tmp += epsilon
            np.divide(m, tmp, out=tmp)
        tmp *= alpha
        var -= tmp
    threads.sharded(body, var, m, v, grad, tmp, den)


@register_workspace("ApplyAdam", "cpu")
def _apply_adam_workspace(ins, attrs):
    return _scratch(2 if attrs.get("use_nesterov", False) else 1)(ins, attrs)


def _mean_square_step(avg, x, one_minus_rho, tmp) -> None:
    """avg += (x - avg) * (1 - rho) in place (TF's order of operations); `x` None means grad^2 already in tmp."""
    if x is not None:
        np.subtract(x, avg, out=tmp)
    else:
        tmp -= avg
    tmp *= one_minus_rho
    avg += tmp


def _rms_momentum_step(var, mom, grad, lr, momentum, tmp) -> None:
    """With tmp = the RMS denominator: mom = mom * momentum + lr * grad / tmp; var -= mom."""
    np.divide(grad, tmp, out=tmp)
    tmp *= lr
    mom *= momentum
    mom += tmp
    var -= mom


@register_kernel("ApplyRMSProp", "cpu", DTYPES)
def _apply_rms_prop(ctx, ins, outs, attrs):
    var, ms, mom, lr, rho, momentum, epsilon, grad = ins
    tmp = ctx.workspace(var.shape, attrs["T"])
    np.multiply(grad, grad, out=tmp)
    _mean_square_step(ms, None, var.dtype.type(1) - rho, tmp)
    np.add(ms, epsilon, out=tmp)
    np.sqrt(tmp, out=tmp)
    _rms_momentum_step(var, mom, grad, lr, momentum, tmp)


register_workspace("ApplyRMSProp", "cpu")(_scratch(1))


@register_kernel("ApplyCenteredRMSProp", "cpu", DTYPES)
def _apply_centered_rms_prop(ctx, ins, outs, attrs):
    var, mg, ms, mom, lr, rho, momentum, epsilon, grad = ins
    one_minus_rho = var.dtype.type(1) - rho
    tmp = ctx.workspace(var.shape, attrs["T"])
    np.multiply(grad, grad, out=tmp)
    _mean_square_step(ms, None, one_minus_rho, tmp)
    _mean_square_step(mg, grad, one_minus_rho, tmp)
    # denominator sqrt(ms - mg^2 + epsilon)
    np.multiply(mg, mg, out=tmp)
    np.subtract(ms, tmp, out=tmp)
    tmp += epsilon
    np.sqrt(tmp, out=tmp)
    _rms_momentum_step(var, mom, grad, lr, momentum, tmp)


register_workspace("ApplyCenteredRMSProp", "cpu")(_scratch(1))


@register_kernel("ApplyAdagrad", "cpu", DTYPES)
def _apply_adagrad(ctx, ins, outs, attrs):
    var, accum, lr, grad = ins
    tmp = ctx.workspace(var.shape, attrs["T"])
    if attrs.get("update_slots", True):
        np.multiply(grad, grad, out=tmp)
        accum += tmp
    np.sqrt(accum, out=tmp)
    np.divide(grad, tmp, out=tmp)
    tmp *= lr
    var -= tmp


register_workspace("ApplyAdagrad", "cpu")(_scratch(1))


@register_kernel("ApplyAdadelta", "cpu", DTYPES)
def _apply_adadelta(ctx, ins, outs, attrs):
    var, accum, accum_update, lr, rho, epsilon, grad = ins
    one_minus_rho = var.dtype.type(1) - rho
    update, tmp = ctx.workspace(var.shape, attrs["T"]), ctx.workspace(var.shape, attrs["T"])
    accum *= rho
    np.multiply(grad, grad, out=tmp)
    tmp *= one_minus_rho
    accum += tmp
    # update = sqrt(accum_update + eps) / sqrt(accum + eps) * grad
    np.add(accum_update, epsilon, out=update)
    np.sqrt(update, out=update)
    np.add(accum, epsilon, out=tmp)
    np.sqrt(tmp, out=tmp)
    update /= tmp
    update *= grad
    np.multiply(update, lr, out=tmp)
    var -= tmp
    accum_update *= rho
    np.multiply(update, update, out=tmp)
    tmp *= one_minus_rho
    accum_update += tmp


register_workspace("ApplyAdadelta", "cpu")(_scratch(2))
