"""Optimizer update ops (TF's training_ops): each updates a variable and its slots in place.

Like Assign, the variable and slot inputs are refs (`ref_inputs`): the kernel gets the session's live buffers
and writes into them; output 0 aliases the variable. The ops are declared not differentiable.
"""
from __future__ import annotations

from tfplus import flops as _flops
from tfplus.framework import Tensor, apply_op
from tfplus.registry import not_differentiable, register_op
from tfplus.tensor_shape import check_same_dtype, fmt, merge_dim, spec

__all__ = ["apply_gradient_descent", "apply_momentum", "apply_adam", "apply_rms_prop", "apply_adagrad",
           "apply_adadelta", "apply_centered_rms_prop"]


def _apply_shape(names: tuple, scalars: tuple):
    """Shape function of an Apply* op: non-scalar inputs have the variable's shape, the others are scalars."""
    def fn(ins, attrs):
        check_same_dtype(ins, "the variable, its slots, the hyperparameters and the gradient")
        shape = ins[0].shape
        for name, s in zip(names, ins):
            if name in scalars:
                if s.shape is not None and len(s.shape) != 0:
                    raise ValueError(f"{name} must be a scalar, got shape {fmt(s.shape)}")
            elif shape is None:
                shape = s.shape
            elif s.shape is not None:
                if len(s.shape) != len(shape):
                    raise ValueError(f"{name} has shape {fmt(s.shape)} but the variable has shape "
                                     f"{fmt(shape)}")
                shape = tuple(merge_dim(a, b, f"{name} shape {fmt(s.shape)} vs variable shape {fmt(shape)}")
                              for a, b in zip(shape, s.shape))
        return [spec(shape, ins[0].dtype)]
    return fn


def _ref_of(v) -> Tensor:
    """A Variable's VariableV2 output (the ref the kernel updates); a ref tensor passes through."""
    return v._ref() if hasattr(v, "_ref") else v


def _register_apply(op_type: str, inputs: tuple, scalars: tuple, refs: tuple, nesterov: bool, flops: int) -> None:
    """`flops`: per element of the variable, from the update formula above the op."""
    attrs = {"T": "type", "use_locking": "bool"}
    if nesterov:
        attrs["use_nesterov"] = "bool"
    register_op(op_type, inputs=inputs, outputs=("out",), attrs=attrs, shape_fn=_apply_shape(inputs, scalars),
                aliases={0: 0}, ref_inputs=refs, stateful=True, flops=_flops.times_input(flops))
    not_differentiable(op_type)


# -- ApplyGradientDescent ------------------------------------------------------------------------------------
# var -= alpha * delta
_register_apply("ApplyGradientDescent", ("var", "alpha", "delta"), ("alpha",), (0,), nesterov=False, flops=2)


def apply_gradient_descent(var, alpha, delta, use_locking: bool = False, name=None) -> Tensor:
    """`var -= alpha * delta`; returns the variable (updated in place).

        >>> import tfplus as tf
        >>> from tfplus.ops.training_ops import apply_gradient_descent
        >>> w = tf.Variable([1.0, 2.0])
        >>> step = apply_gradient_descent(w, 0.5, tf.constant([2.0, 2.0]))  # w becomes [0., 1.]
    """
    return apply_op("ApplyGradientDescent", [_ref_of(var), alpha, delta], {"use_locking": use_locking},
                    name or "ApplyGradientDescent")


# -- ApplyMomentum -------------------------------------------------------------------------------------------
# accum = accum * momentum + grad; var -= lr * accum (nesterov: var -= lr * grad + lr * momentum * accum)
_register_apply("ApplyMomentum", ("var", "accum", "lr", "grad", "momentum"), ("lr", "momentum"), (0, 1),
                nesterov=True, flops=4)


def apply_momentum(var, accum, lr, grad, momentum, use_locking: bool = False, use_nesterov: bool = False,
                   name=None) -> Tensor:
    """Heavy-ball (or Nesterov) momentum on `var` with velocity slot `accum`; returns the variable.

        >>> import tfplus as tf
        >>> from tfplus.ops.training_ops import apply_momentum
        >>> w, acc = tf.Variable([1.0]), tf.Variable([0.0])
        >>> step = apply_momentum(w, acc, 0.1, tf.constant([1.0]), 0.9)  # acc = 1, w = 0.9
    """
    return apply_op("ApplyMomentum", [_ref_of(var), _ref_of(accum), lr, grad, momentum],
                    {"use_locking": use_locking, "use_nesterov": use_nesterov}, name or "ApplyMomentum")


# -- ApplyAdam ----------------------------------------------------------------------------------------------
# lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power); m = beta1 * m + (1 - beta1) * grad;
# v = beta2 * v + (1 - beta2) * grad^2; var -= lr_t * m / (sqrt(v) + epsilon)
# (nesterov: var -= lr_t * (beta1 * m + (1 - beta1) * grad) / (sqrt(v) + epsilon))
_register_apply("ApplyAdam",
                ("var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"),
                ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"), (0, 1, 2), nesterov=True, flops=12)


def apply_adam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
               use_locking: bool = False, use_nesterov: bool = False, name=None) -> Tensor:
    """One Adam step (TF1's formula, bias correction folded into the step size); returns the variable.

        >>> import tfplus as tf
        >>> from tfplus.ops.training_ops import apply_adam
        >>> w, m, v = tf.Variable([1.0]), tf.Variable([0.0]), tf.Variable([0.0])
        >>> step = apply_adam(w, m, v, 0.9, 0.999, 0.1, 0.9, 0.999, 1e-8, tf.constant([3.0]))  # w ~ 0.9
    """
    return apply_op("ApplyAdam", [_ref_of(var), _ref_of(m), _ref_of(v), beta1_power, beta2_power, lr, beta1,
                                  beta2, epsilon, grad],
                    {"use_locking": use_locking, "use_nesterov": use_nesterov}, name or "ApplyAdam")


# -- ApplyRMSProp --------------------------------------------------------------------------------------------
# ms = rho * ms + (1 - rho) * grad^2; mom = momentum * mom + lr * grad / sqrt(ms + epsilon); var -= mom
_register_apply("ApplyRMSProp", ("var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad"),
                ("lr", "rho", "momentum", "epsilon"), (0, 1, 2), nesterov=False, flops=11)


def apply_rms_prop(var, ms, mom, lr, rho, momentum, epsilon, grad, use_locking: bool = False,
                   name=None) -> Tensor:
    """One RMSProp step (TF1's, with momentum) on `var` with slots `ms` and `mom`; returns the variable.

        >>> import tfplus as tf
        >>> from tfplus.ops.training_ops import apply_rms_prop
        >>> w, ms, mom = tf.Variable([1.0]), tf.Variable([1.0]), tf.Variable([0.0])
        >>> step = apply_rms_prop(w, ms, mom, 0.1, 0.9, 0.0, 1e-10, tf.constant([2.0]))  # ms = 1.3
    """
    return apply_op("ApplyRMSProp", [_ref_of(var), _ref_of(ms), _ref_of(mom), lr, rho, momentum, epsilon, grad],
                    {"use_locking": use_locking}, name or "ApplyRMSProp")


# -- ApplyCenteredRMSProp ------------------------------------------------------------------------------------
# ms = rho * ms + (1 - rho) * grad^2; mg = rho * mg + (1 - rho) * grad;
# mom = momentum * mom + lr * grad / sqrt(ms - mg^2 + epsilon); var -= mom
_register_apply("ApplyCenteredRMSProp", ("var", "mg", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad"),
                ("lr", "rho", "momentum", "epsilon"), (0, 1, 2, 3), nesterov=False, flops=16)


def apply_centered_rms_prop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad, use_locking: bool = False,
                            name=None) -> Tensor:
    """One centered RMSProp step (the mean square less the squared mean gradient normalizes); returns the
    variable.

        >>> import tfplus as tf
        >>> from tfplus.ops.training_ops import apply_centered_rms_prop
        >>> w, mg, ms, mom = tf.Variable([1.0]), tf.Variable([0.0]), tf.Variable([1.0]), tf.Variable([0.0])
        >>> step = apply_centered_rms_prop(w, mg, ms, mom, 0.1, 0.9, 0.0, 1e-10, tf.constant([2.0]))
    """
    return apply_op("ApplyCenteredRMSProp", [_ref_of(var), _ref_of(mg), _ref_of(ms), _ref_of(mom), lr, rho,
                                             momentum, epsilon, grad],
                    {"use_locking": use_locking}, name or "ApplyCenteredRMSProp")


# -- ApplyAdagrad --------------------------------------------------------------------------------------------
# accum += grad^2 (when update_slots); var -= lr * grad / sqrt(accum)
register_op("ApplyAdagrad", inputs=("var", "accum", "lr", "grad"), outputs=("out",),
            attrs={"T": "type", "use_locking": "bool", "update_slots": "bool"},
            shape_fn=_apply_shape(("var", "accum", "lr", "grad"), ("lr",)), aliases={0: 0}, ref_inputs=(0, 1),
            stateful=True, flops=_flops.times_input(6))
not_differentiable("ApplyAdagrad")


def apply_adagrad(var, accum, lr, grad, use_locking: bool = False, update_slots: bool = True,
                  name=None) -> Tensor:
    """One Adagrad step on `var` with accumulator slot `accum`; returns the variable.

        >>> import tfplus as tf
        >>> from tfplus.ops.training_ops import apply_adagrad
        >>> w, acc = tf.Variable([1.0]), tf.Variable([0.0])
        >>> step = apply_adagrad(w, acc, 0.5, tf.constant([2.0]))  # acc = 4, w = 0.5
    """
    return apply_op("ApplyAdagrad", [_ref_of(var), _ref_of(accum), lr, grad],
                    {"use_locking": use_locking, "update_slots": update_slots}, name or "ApplyAdagrad")


# -- ApplyAdadelta -------------------------------------------------------------------------------------------
# accum = rho * accum + (1 - rho) * grad^2; update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad;
# accum_update = rho * accum_update + (1 - rho) * update^2; var -= lr * update
_register_apply("ApplyAdadelta", ("var", "accum", "accum_update", "lr", "rho", "epsilon", "grad"),
                ("lr", "rho", "epsilon"), (0, 1, 2), nesterov=False, flops=16)


def apply_adadelta(var, accum, accum_update, lr, rho, epsilon, grad, use_locking: bool = False,
                   name=None) -> Tensor:
    """One Adadelta step on `var` with slots `accum` and `accum_update`; returns the variable.

        >>> import tfplus as tf
        >>> from tfplus.ops.training_ops import apply_adadelta
        >>> w, a, u = tf.Variable([1.0]), tf.Variable([0.0]), tf.Variable([0.0])
        >>> step = apply_adadelta(w, a, u, 1.0, 0.95, 1e-6, tf.constant([1.0]))
    """
    return apply_op("ApplyAdadelta", [_ref_of(var), _ref_of(accum), _ref_of(accum_update), lr, rho, epsilon, grad],
                    {"use_locking": use_locking}, name or "ApplyAdadelta")
