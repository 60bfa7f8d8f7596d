"""Sparse optimizer updates: only the rows of a variable (and of its slots) that an IndexedSlices gradient names.

TF1's optimizers update a variable whose gradient is an IndexedSlices (the params of tf.nn.embedding_lookup)
row by row, leaving the rows a step never looked up, and their slots, alone:
- GradientDescent subtracts lr * values with ScatterSub, TensorFlow's op: repeated indices subtract in turn.
- Momentum, RMSProp, Adagrad and Adadelta first sum the rows of repeated indices (Optimizer.
  _apply_sparse_duplicate_indices), then update each row once with the dense formula (SparseApply*). tfplus
  has no op with a data-dependent shape (TF's Unique), so each `_SparseApply*` op below is both steps: the
  rows of `grad` whose indices repeat are summed in their order, then each named row is updated as the dense
  Apply* op of training_ops updates every element. The leading underscore says so: TensorFlow's SparseApply*
  ops would apply repeated rows one after another.
Like the dense ops, the variable and slot inputs are refs updated in place; output 0 aliases the variable.
Indices out of the variable's rows are an error on the cpu and are skipped on opencl (as gather's are there).
"""
from __future__ import annotations

import math

from tfplus.framework import Tensor, apply_op
from tfplus.registry import not_differentiable, register_op
from tfplus.tensor_shape import check_same_dtype, fmt, spec

__all__ = ["scatter_update", "scatter_add", "scatter_sub", "scatter_mul", "scatter_div", "scatter_min",
           "scatter_max", "scatter_nd_update", "scatter_nd_add", "scatter_nd_sub",
           "sparse_apply_momentum", "sparse_apply_rms_prop", "sparse_apply_centered_rms_prop",
           "sparse_apply_adagrad", "sparse_apply_adadelta"]

_INDEX_DTYPES = ("int32", "int64")


def _check_rows(what: str, var, rows, indices) -> None:
    """`rows` (a gradient's values) must be indices.shape + var.shape[1:]."""
    if indices.dtype.name not in _INDEX_DTYPES:
        raise TypeError(f"{what}: indices must be int32 or int64, got {indices.dtype.name}")
    if var.shape is None or rows.shape is None or indices.shape is None:
        return
    if len(var.shape) == 0:
        raise ValueError(f"{what}: the variable must have rank >= 1 to be updated by rows, got a scalar")
    want = tuple(indices.shape) + tuple(var.shape[1:])
    if len(want) != len(rows.shape) or any(a is not None and b is not None and a != b
                                           for a, b in zip(want, rows.shape)):
        raise ValueError(f"{what}: the rows have shape {fmt(rows.shape)} but indices {fmt(indices.shape)} and "
                         f"the variable {fmt(var.shape)} need {fmt(want)}")


def _sparse_shape(op_type: str, names: tuple, scalars: tuple):
    """Shape function of a _SparseApply* op: slots have the variable's shape, hyperparameters are scalars, grad
    has a row per index."""
    def fn(ins, attrs):
        by = dict(zip(names, ins))
        check_same_dtype([s for n, s in by.items() if n != "indices"],
                         "the variable, its slots, the hyperparameters and the gradient")
        var = by["var"]
        for name, s in by.items():
            if name in scalars and s.shape is not None and len(s.shape) != 0:
                raise ValueError(f"{op_type}: {name} must be a scalar, got shape {fmt(s.shape)}")
            if name not in scalars and name not in ("var", "grad", "indices") and s.shape is not None \
                    and var.shape is not None and tuple(s.shape) != tuple(var.shape):
                raise ValueError(f"{op_type}: slot {name} has shape {fmt(s.shape)} but the variable has shape "
                                 f"{fmt(var.shape)}")
        _check_rows(op_type, var, by["grad"], by["indices"])
        return [spec(var.shape, var.dtype)]
    return fn


def _per_grad_element(k: int, grad_at: int):
    """Flops: `k` per element of the gradient's rows (the dense update's count for the rows it touches)."""
    def fn(ins, outs, attrs) -> float:
        return float(k * math.prod(ins[grad_at]))
    fn.__name__ = f"per_grad_element_{k}"
    return fn


def _ref_of(v) -> Tensor:
    """A Variable's VariableV2 output (the ref the kernel updates); a ref tensor passes through."""
    return v._ref() if hasattr(v, "_ref") else v


def _register_sparse(op_type: str, inputs: tuple, scalars: tuple, refs: tuple, flops: int, **extra) -> None:
    attrs = {"T": "type", "Tindices": "type", "use_locking": "bool", **extra}
    register_op(op_type, inputs=inputs, outputs=("out",), attrs=attrs,
                shape_fn=_sparse_shape(op_type, inputs, scalars), aliases={0: 0}, ref_inputs=refs, stateful=True,
                flops=_per_grad_element(flops, inputs.index("grad")))
    not_differentiable(op_type)


def _apply(op_type: str, refs: list, rest: list, indices: Tensor, attrs: dict, name) -> Tensor:
    return apply_op(op_type, [_ref_of(r) for r in refs] + rest, {"Tindices": indices.dtype, **attrs},
                    name or op_type.lstrip("_"))


def _idx(indices) -> Tensor:
    """Indices as a tensor (a list becomes an int32 constant)."""
    from tfplus.ops.array_ops import constant
    return indices if isinstance(indices, Tensor) else constant(indices, "int32")


# -- ScatterUpdate, ScatterAdd, ScatterSub, ScatterMul, ScatterDiv, ScatterMin, ScatterMax ----------------------
# ref[indices[i]] = combine(ref[indices[i]], updates[i]), for i in order (repeated indices combine in turn; for
# ScatterUpdate the last one is written)
SCATTERS = ("ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax")


def _scatter_shape(op_type: str):
    def fn(ins, attrs):
        ref, indices, updates = ins
        check_same_dtype([ref, updates], "the variable and the updates")
        _check_rows(op_type, ref, updates, indices)
        return [spec(ref.shape, ref.dtype)]
    return fn


for _op in SCATTERS:
    register_op(_op, inputs=("ref", "indices", "updates"), outputs=("output_ref",),
                attrs={"T": "type", "Tindices": "type", "use_locking": "bool"}, shape_fn=_scatter_shape(_op),
                aliases={0: 0}, ref_inputs=(0,), stateful=True, flops=_per_grad_element(1, 2))
    not_differentiable(_op)


def _scatter(op_type: str, ref, indices, updates, use_locking: bool, name) -> Tensor:
    from tfplus.framework import convert_to_tensor
    indices = _idx(indices)
    ref = _ref_of(ref)
    updates = convert_to_tensor(updates, dtype=ref.dtype)
    return apply_op(op_type, [ref, indices, updates], {"Tindices": indices.dtype, "use_locking": use_locking},
                    name or op_type)


def scatter_update(ref, indices, updates, use_locking: bool = True, name=None) -> Tensor:
    """`tf.scatter_update`: ref[indices[i]] = updates[i] (a repeated index: the last row); returns the variable.

        >>> import tfplus as tf
        >>> w = tf.Variable([[1.0], [2.0], [3.0]])
        >>> step = tf.scatter_update(w, [0, 2], [[9.0], [8.0]])  # w becomes [[9], [2], [8]]
    """
    return _scatter("ScatterUpdate", ref, indices, updates, use_locking, name)


def scatter_add(ref, indices, updates, use_locking: bool = False, name=None) -> Tensor:
    """`tf.scatter_add`: ref[indices[i]] += updates[i] (repeated indices add in turn); returns the variable."""
    return _scatter("ScatterAdd", ref, indices, updates, use_locking, name)


def scatter_sub(ref, indices, updates, use_locking: bool = False, name=None) -> Tensor:
    """`tf.scatter_sub`: ref[indices[i]] -= updates[i]; returns the variable (updated in place).

        >>> import tfplus as tf
        >>> w = tf.Variable([[1.0], [2.0], [3.0]])
        >>> step = scatter_sub(w, [2, 2], tf.constant([[1.0], [0.5]]))  # w becomes [[1], [2], [1.5]]
    """
    return _scatter("ScatterSub", ref, indices, updates, use_locking, name)


def scatter_mul(ref, indices, updates, use_locking: bool = False, name=None) -> Tensor:
    """`tf.scatter_mul`: ref[indices[i]] *= updates[i]; returns the variable."""
    return _scatter("ScatterMul", ref, indices, updates, use_locking, name)


def scatter_div(ref, indices, updates, use_locking: bool = False, name=None) -> Tensor:
    """`tf.scatter_div`: ref[indices[i]] /= updates[i]; returns the variable."""
    return _scatter("ScatterDiv", ref, indices, updates, use_locking, name)


def scatter_min(ref, indices, updates, use_locking: bool = False, name=None) -> Tensor:
    """`tf.scatter_min`: ref[indices[i]] = min(ref[indices[i]], updates[i]); returns the variable."""
    return _scatter("ScatterMin", ref, indices, updates, use_locking, name)


def scatter_max(ref, indices, updates, use_locking: bool = False, name=None) -> Tensor:
    """`tf.scatter_max`: ref[indices[i]] = max(ref[indices[i]], updates[i]); returns the variable."""
    return _scatter("ScatterMax", ref, indices, updates, use_locking, name)


# -- scatter_nd_update / _add / _sub: the variable's new value made by tensor_scatter_nd_*, then assigned ------
def _scatter_nd(kind: str, ref, indices, updates, use_locking: bool, name) -> Tensor:
    from tfplus.framework import name_scope
    from tfplus.ops import special_math_ops, state_ops
    new_value = getattr(special_math_ops, f"tensor_scatter_nd_{kind}")
    with name_scope(name, f"ScatterNd{kind.capitalize()}"):
        return state_ops.assign(ref, new_value(ref, indices, updates), use_locking=use_locking)


def scatter_nd_update(ref, indices, updates, use_locking: bool = True, name=None) -> Tensor:
    """`tf.scatter_nd_update`: the variable's elements (or slices) at `indices` (its last axis an index into
    ref's leading axes) set to `updates`; returns the variable.

        >>> import tfplus as tf
        >>> q = tf.Variable(tf.zeros([3, 2]))
        >>> step = tf.scatter_nd_update(q, [[0, 1], [2, 0]], [5.0, 7.0])  # q becomes [[0, 5], [0, 0], [7, 0]]
    """
    return _scatter_nd("update", ref, indices, updates, use_locking, name)


def scatter_nd_add(ref, indices, updates, use_locking: bool = False, name=None) -> Tensor:
    """`tf.scatter_nd_add`: `updates` added to the variable at `indices` (repeated indices add); returns it."""
    return _scatter_nd("add", ref, indices, updates, use_locking, name)


def scatter_nd_sub(ref, indices, updates, use_locking: bool = False, name=None) -> Tensor:
    """`tf.scatter_nd_sub`: `updates` subtracted from the variable at `indices`; returns it."""
    return _scatter_nd("sub", ref, indices, updates, use_locking, name)


# -- _SparseApplyMomentum ------------------------------------------------------------------------------------
# per named row, with grad's repeated rows summed: accum = accum * momentum + grad; var -= lr * accum
# (nesterov: var -= lr * grad + lr * momentum * accum)
_register_sparse("_SparseApplyMomentum", ("var", "accum", "lr", "grad", "indices", "momentum"), ("lr", "momentum"),
                 (0, 1), flops=4, use_nesterov="bool")


def sparse_apply_momentum(var, accum, lr, grad, indices, momentum, use_locking: bool = False,
                          use_nesterov: bool = False, name=None) -> Tensor:
    """Momentum on the rows `indices` of `var` and `accum` (repeated rows of `grad` summed); returns the variable.

        >>> import tfplus as tf
        >>> w, acc = tf.Variable([[1.0], [1.0]]), tf.Variable([[0.0], [0.0]])
        >>> step = sparse_apply_momentum(w, acc, 0.1, tf.constant([[1.0]]), [1], 0.9)  # w = [[1], [0.9]]
    """
    indices = _idx(indices)
    return _apply("_SparseApplyMomentum", [var, accum], [lr, grad, indices, momentum], indices,
                  {"use_locking": use_locking, "use_nesterov": use_nesterov}, name)


# -- _SparseApplyRMSProp -------------------------------------------------------------------------------------
# per named row, with grad's repeated rows summed: ms = rho * ms + (1 - rho) * grad^2;
# mom = momentum * mom + lr * grad / sqrt(ms + epsilon); var -= mom
_register_sparse("_SparseApplyRMSProp", ("var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad", "indices"),
                 ("lr", "rho", "momentum", "epsilon"), (0, 1, 2), flops=11)


def sparse_apply_rms_prop(var, ms, mom, lr, rho, momentum, epsilon, grad, indices, use_locking: bool = False,
                          name=None) -> Tensor:
    """RMSProp on the rows `indices` of `var`, `ms` and `mom` (repeated rows of `grad` summed)."""
    indices = _idx(indices)
    return _apply("_SparseApplyRMSProp", [var, ms, mom], [lr, rho, momentum, epsilon, grad, indices],
                  indices, {"use_locking": use_locking}, name)


# -- _SparseApplyCenteredRMSProp -----------------------------------------------------------------------------
# per named row, with grad's repeated rows summed: ms = rho * ms + (1 - rho) * grad^2;
# mg = rho * mg + (1 - rho) * grad; mom = momentum * mom + lr * grad / sqrt(ms - mg^2 + epsilon); var -= mom
_register_sparse("_SparseApplyCenteredRMSProp",
                 ("var", "mg", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad", "indices"),
                 ("lr", "rho", "momentum", "epsilon"), (0, 1, 2, 3), flops=16)


def sparse_apply_centered_rms_prop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad, indices,
                                   use_locking: bool = False, name=None) -> Tensor:
    """Centered RMSProp on the rows `indices` of `var` and its slots (repeated rows of `grad` summed)."""
    indices = _idx(indices)
    return _apply("_SparseApplyCenteredRMSProp", [var, mg, ms, mom],
                  [lr, rho, momentum, epsilon, grad, indices], indices, {"use_locking": use_locking}, name)


# -- _SparseApplyAdagrad -------------------------------------------------------------------------------------
# per named row, with grad's repeated rows summed: accum += grad^2 (when update_slots); var -= lr * grad / sqrt(accum)
_register_sparse("_SparseApplyAdagrad", ("var", "accum", "lr", "grad", "indices"), ("lr",), (0, 1), flops=6,
                 update_slots="bool")


def sparse_apply_adagrad(var, accum, lr, grad, indices, use_locking: bool = False, update_slots: bool = True,
                         name=None) -> Tensor:
    """Adagrad on the rows `indices` of `var` and `accum` (repeated rows of `grad` summed)."""
    indices = _idx(indices)
    return _apply("_SparseApplyAdagrad", [var, accum], [lr, grad, indices], indices,
                  {"use_locking": use_locking, "update_slots": update_slots}, name)


# -- _SparseApplyAdadelta ------------------------------------------------------------------------------------
# per named row, with grad's repeated rows summed: accum = rho * accum + (1 - rho) * grad^2;
# update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad;
# accum_update = rho * accum_update + (1 - rho) * update^2; var -= lr * update
_register_sparse("_SparseApplyAdadelta", ("var", "accum", "accum_update", "lr", "rho", "epsilon", "grad", "indices"),
                 ("lr", "rho", "epsilon"), (0, 1, 2), flops=16)


def sparse_apply_adadelta(var, accum, accum_update, lr, rho, epsilon, grad, indices, use_locking: bool = False,
                          name=None) -> Tensor:
    """Adadelta on the rows `indices` of `var` and its slots (repeated rows of `grad` summed)."""
    indices = _idx(indices)
    return _apply("_SparseApplyAdadelta", [var, accum, accum_update], [lr, rho, epsilon, grad, indices],
                  indices, {"use_locking": use_locking}, name)
