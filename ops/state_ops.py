"""Variables as graph nodes: VariableV2 holds state in the Session; Assign* update it in place."""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import apply_op, get_default_graph
from tfplus.ops.row_rules import keeps
from tfplus.registry import not_differentiable, register_gradient, register_op, register_rows
from tfplus.tensor_shape import merge_dim, spec

# -- VariableV2 ------------------------------------------------------------------------------------------
# Its output is the session-held buffer itself; consumers read the current value.
register_op("VariableV2", outputs=("ref",), attrs={"shape": "shape", "dtype": "type", "container": "string",
                                                   "shared_name": "string"},
            shape_fn=lambda ins, attrs: [spec(attrs["shape"], attrs["dtype"])], stateful=True, flops=_flops.zero)


@register_gradient("VariableV2")
def _variable_grad(op, grad):
    """A variable has no inputs; tf.gradients stops here."""
    return []


def variable_op(shape, dtype, name="Variable"):
    return get_default_graph().create_op(
        "VariableV2", [], {"shape": tuple(shape), "dtype": dtype, "container": "", "shared_name": ""},
        name).outputs[0]


def _assign_shape(ins, attrs):
    ref, value = ins
    if ref.dtype is not value.dtype:
        raise TypeError(f"cannot assign a {value.dtype.name} value to a {ref.dtype.name} variable")
    if attrs.get("validate_shape", True) and ref.shape is not None and value.shape is not None:
        if len(ref.shape) != len(value.shape):
            raise ValueError(f"shape {value.shape} does not match the variable's shape {ref.shape}")
        for a, b in zip(ref.shape, value.shape):
            merge_dim(a, b, f"value shape {value.shape} vs variable shape {ref.shape}")
    return [spec(ref.shape if attrs.get("validate_shape", True) else value.shape, ref.dtype)]


# -- Assign ------------------------------------------------------------------------------------------------
register_op("Assign", inputs=("ref", "value"), outputs=("output_ref",),
            attrs={"T": "type", "validate_shape": "bool", "use_locking": "bool"},
            shape_fn=_assign_shape, aliases={0: 0}, ref_inputs=(0,), stateful=True, flops=_flops.zero)
not_differentiable("Assign")


def assign(ref, value, validate_shape=True, use_locking=True, name=None):
    """Writes `value` into variable `ref`; returns the variable's new value."""
    return apply_op("Assign", [_ref_of(ref), value],
                    {"validate_shape": validate_shape, "use_locking": use_locking}, name or "Assign")


# -- AssignAdd / AssignSub ---------------------------------------------------------------------------------
for _t in ("AssignAdd", "AssignSub"):
    register_op(_t, inputs=("ref", "value"), outputs=("output_ref",), attrs={"T": "type", "use_locking": "bool"},
                shape_fn=_assign_shape, aliases={0: 0}, ref_inputs=(0,), stateful=True, flops=_flops.per_output)
    not_differentiable(_t)


def assign_add(ref, value, use_locking=False, name=None):
    """ref += value"""
    return apply_op("AssignAdd", [_ref_of(ref), value], {"use_locking": use_locking}, name or "AssignAdd")


def assign_sub(ref, value, use_locking=False, name=None):
    """ref -= value"""
    return apply_op("AssignSub", [_ref_of(ref), value], {"use_locking": use_locking}, name or "AssignSub")


def _ref_of(v):
    return v._ref() if hasattr(v, "_ref") else v


# -- IsVariableInitialized -----------------------------------------------------------------------------------
# Its ref input may be a variable that no Assign has made yet (the executor passes None: engine.executor.ref).
register_op("IsVariableInitialized", inputs=("ref",), outputs=("is_initialized",), attrs={"dtype": "type"},
            shape_fn=lambda ins, attrs: [spec((), _dt.bool_)], ref_inputs=(0,), stateful=True,
            allocates_outputs=True, flops=_flops.zero)
register_rows(keeps, "IsVariableInitialized")
not_differentiable("IsVariableInitialized")


def is_variable_initialized(variable, name=None):
    """tf.is_variable_initialized: a bool scalar, whether `variable` holds a value in the running session."""
    ref = _ref_of(variable)
    return apply_op("IsVariableInitialized", [ref], {"dtype": ref.dtype}, name or "IsVariableInitialized")
