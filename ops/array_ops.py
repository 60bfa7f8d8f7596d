"""Array ops: constants, placeholders, identity, shape manipulation and slicing.
Each op: registration, gradient, wrapper."""
from __future__ import annotations

import builtins

import numpy as np

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import (
    IndexedSlices,
    Tensor,
    apply_op,
    constant_value,
    convert_to_tensor,
    get_default_graph,
    name_scope,
    register_tensor_conversion_function,
)
from tfplus.ops.row_rules import ONE_ROW, aligned, along, attr, const, keeps, value_of
from tfplus.registry import not_differentiable, register_gradient, register_op, register_rows
from tfplus.tensor_shape import (
    TensorShape,
    broadcast,
    broadcast_gradient_args_value,
    check_same_dtype,
    fmt,
    merge_dim,
    num_elements,
    same_as_input,
    spec,
    strided_slice_index,
)
from tfplus.tensor_util import infer_dtype

__all__ = ["constant", "placeholder", "placeholder_with_default", "identity", "fill", "zeros", "ones",
           "zeros_like", "ones_like", "reshape", "transpose", "concat", "squeeze", "expand_dims", "pad",
           "stop_gradient", "shape", "size", "rank", "one_hot", "tile", "slice", "strided_slice", "stack",
           "unstack", "broadcast_to", "invert_permutation", "newaxis", "gather", "gather_nd", "shape_n",
           "dynamic_stitch", "split", "identity_n", "snapshot", "prevent_gradient"]

newaxis = None  # `x[:, tf.newaxis]`, as in NumPy
_INDEX = (_dt.int32, _dt.int64)


# -- Const ------------------------------------------------------------------------------------------------
register_op("Const", outputs=("output",), attrs={"value": "tensor", "dtype": "type"},
            shape_fn=lambda ins, attrs: [spec(attrs["value"].shape, attrs["dtype"], attrs["value"])], flops=_flops.zero)
not_differentiable("Const")


def constant(value, dtype=None, shape=None, name="Const"):
    """`tf.constant([[1., 2.]])` -> a Const node holding the value (broadcast to `shape` if given)."""
    dtype = _dt.as_dtype(dtype) if dtype is not None else None
    if dtype is _dt.string or (dtype is None and _is_strings(value)):
        dtype, arr = _dt.string, _bytes_array(value)
    else:
        arr = np.asarray(value, dtype=dtype.np if dtype is not None else None)
    if dtype is None:
        dtype = infer_dtype(value)
        arr = arr.astype(dtype.np, copy=False)
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        if arr.size == 1:
            arr = np.broadcast_to(arr.reshape(()), shape)
        elif arr.size == int(np.prod(shape)):
            arr = arr.reshape(shape)
        else:
            raise ValueError(f"tf.constant: {arr.size} values cannot fill shape {shape}")
    arr = np.array(arr, order="C")  # a private copy (np.ascontiguousarray would make 0-d arrays 1-d)
    arr.flags.writeable = False  # the graph owns it; kernels copy out of it
    op = get_default_graph().create_op("Const", [], {"value": arr, "dtype": dtype}, name)
    return op.outputs[0]


def _is_strings(value) -> bool:
    """Whether `value` is a string, or a non-empty (nested) list or array of strings only."""
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return True
    if isinstance(value, np.ndarray):
        return value.size > 0 and (value.dtype.kind in "SU" or (value.dtype == object and all(
            isinstance(v, (str, bytes)) for v in value.reshape(-1))))
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(_is_strings(v) for v in value)


def _bytes_array(value) -> np.ndarray:
    """A string constant's elements as bytes objects, str UTF-8 encoded, as TensorFlow holds them. NOTE: not
    np.asarray(value): its 'S' dtype drops a string's trailing NUL bytes (decode_raw's zeros)."""
    src = np.array(value, dtype=object)
    out = np.empty(src.shape, object)
    for i, v in np.ndenumerate(src):
        if isinstance(v, (str, np.str_)):
            v = v.encode()
        elif not isinstance(v, bytes):
            raise TypeError(f"tf.constant: a string tensor's element {v!r} is a {type(v).__name__}, not a string")
        out[i] = bytes(v)
    return out


def _constant_conversion(value, dtype=None, name=None, preferred_dtype=None):
    """convert_to_tensor of a Python or NumPy value: a Const, its dtype by TensorFlow's rules (tensor_util's
    infer_dtype) unless given; `preferred_dtype` is taken by a value that is not a NumPy array or scalar."""
    return constant(value, dtype=dtype or infer_dtype(value, preferred_dtype), name=name or "Const")


# Below any conversion registered for a particular type (priority 200: TensorFlow's for `object`).
register_tensor_conversion_function(object, _constant_conversion, priority=200)


def _has_tensor(value) -> bool:
    if isinstance(value, (list, tuple)):
        return builtins.any(_has_tensor(v) for v in value)
    return isinstance(value, Tensor) or hasattr(value, "_as_tensor")


def _first_dtype(value):
    if isinstance(value, (list, tuple)):
        return next((d for d in map(_first_dtype, value) if d is not None), None)
    return convert_to_tensor(value).dtype if _has_tensor(value) else None


def _autopacking_conversion(value, dtype=None, name=None, preferred_dtype=None):
    """TF's auto-packing: a (nested) list or tuple holding Tensors becomes a Pack of its elements
    (tf.stop_gradient([t, u]) is tf.stop_gradient(tf.stack([t, u]))); Python numbers in it take the first
    Tensor's dtype. A list of plain values stays a Const."""
    if not _has_tensor(value):
        return _constant_conversion(value, dtype, name, preferred_dtype)
    dtype = dtype or _first_dtype(value)

    def pack(v):
        if isinstance(v, (list, tuple)):
            return stack([pack(e) for e in v])
        return convert_to_tensor(v, dtype=dtype)
    with name_scope(name, "packed"):
        return pack(value)


register_tensor_conversion_function((list, tuple), _autopacking_conversion, priority=99)


# -- Placeholder -------------------------------------------------------------------------------------------
register_op("Placeholder", outputs=("output",), attrs={"dtype": "type", "shape": "shape"},
            shape_fn=lambda ins, attrs: [spec(attrs["shape"], attrs["dtype"])], flops=_flops.zero)
not_differentiable("Placeholder")


def placeholder(dtype, shape=None, name=None):
    """`x = tf.placeholder(tf.float32, [None, 784])`: a value fed at `Session.run` time."""
    if isinstance(shape, (int, np.integer)):  # TF1: shape=3 is the shape (3,)
        shape = (shape,)
    shape = None if shape is None else tuple(None if d is None or d == -1 else int(d) for d in shape)
    op = get_default_graph().create_op("Placeholder", [], {"dtype": _dt.as_dtype(dtype), "shape": shape},
                                       name or "Placeholder")
    return op.outputs[0]


register_op("PlaceholderWithDefault", inputs=("input",), outputs=("output",),
            attrs={"dtype": "type", "shape": "shape"}, aliases={0: 0},
            shape_fn=lambda ins, attrs: [spec(_default_shape(attrs["shape"], ins[0].shape), ins[0].dtype)],
            flops=_flops.zero, tags=("view",))
register_rows(keeps, "PlaceholderWithDefault")
not_differentiable("PlaceholderWithDefault")


def _default_shape(declared, given):
    """The declared shape, its unknown dimensions taken from the default (or fed) value's: at run time the
    value decides them, so an unfed `placeholder_with_default(x, [None, 7])` has x's batch size."""
    if declared is None or given is None:
        return declared if given is None else given
    if len(declared) != len(given) or any(d is not None and g is not None and d != g
                                           for d, g in zip(declared, given)):
        raise ValueError(f"the value's shape {fmt(given)} does not match the declared shape {fmt(declared)}")
    return tuple(g if d is None else d for d, g in zip(declared, given))


def placeholder_with_default(input, shape, name=None):
    """A placeholder that takes `input`'s value when not fed."""
    from tfplus.framework import convert_to_tensor
    input = convert_to_tensor(input)
    declared = None if shape is None else TensorShape(shape).dims_tuple
    out = apply_op("PlaceholderWithDefault", [input], {"shape": declared, "dtype": input.dtype}, name)
    # NOTE: the shape function gives the value's shape (what the kernel makes when nothing is fed); the static
    # shape is the declared one, as TF's, so a feed may give the unknown dimensions another size.
    out._shape = declared
    return out


# -- Identity ------------------------------------------------------------------------------------------------
register_op("Identity", inputs=("input",), outputs=("output",), attrs={"T": "type"},
            shape_fn=same_as_input(0), aliases={0: 0}, flops=_flops.zero, tags=("view",))
register_rows(keeps, "Identity")


@register_gradient("Identity")
def _identity_grad(op, grad):
    """dx = dy"""
    return [grad]


def identity(input, name=None):
    """Returns a tensor with the same value (shares the buffer; no copy)."""
    return apply_op("Identity", [input], name=name)


# -- Fill / zeros / ones -------------------------------------------------------------------------------------
def _fill_shape(ins, attrs):
    dims, value = ins
    if dims.value is None:
        return [spec(dims.partial, value.dtype)]
    return [spec(tuple(int(d) for d in dims.value), value.dtype)]


register_op("Fill", inputs=("dims", "value"), outputs=("output",), attrs={"T": "type", "index_type": "type"},
            shape_fn=_fill_shape, value_inputs=(0,), flops=_flops.zero)
register_rows(keeps, "Fill")  # the same value in every row


@register_gradient("Fill")
def _fill_grad(op, grad):
    """d value = sum(dy)"""
    from tfplus.ops.math_ops import reduce_sum
    return [None, reduce_sum(grad)]


def fill(dims, value, name=None):
    """A tensor of shape `dims` filled with scalar `value`."""
    from tfplus.framework import convert_to_tensor
    dims = convert_to_tensor(dims, dtype=_dt.int32) if not hasattr(dims, "op") else dims
    value = convert_to_tensor(value)
    return apply_op("Fill", [dims, value], {"T": value.dtype, "index_type": dims.dtype}, name)


def _shape_vector(shape):
    """tf.zeros' and tf.ones' shape as Fill's dims: a scalar (`tf.zeros(3)`, a 0-d tensor) is a vector of one."""
    if hasattr(shape, "op"):
        return reshape(shape, [-1]) if shape.shape.ndims == 0 else shape
    return [shape] if np.ndim(shape) == 0 else shape


def zeros(shape, dtype=_dt.float32, name=None):
    """`tf.zeros([2, 3])`"""
    dtype = _dt.as_dtype(dtype)
    return fill(_shape_vector(shape), np.zeros((), dtype.np), name=name or "zeros")


def ones(shape, dtype=_dt.float32, name=None):
    """`tf.ones([2, 3])`"""
    dtype = _dt.as_dtype(dtype)
    return fill(_shape_vector(shape), np.ones((), dtype.np), name=name or "ones")


# -- ZerosLike / OnesLike ---------------------------------------------------------------------------------
register_op("ZerosLike", inputs=("x",), outputs=("y",), attrs={"T": "type"}, shape_fn=same_as_input(0),
            flops=_flops.zero, tags=("shape_only",))
register_op("OnesLike", inputs=("x",), outputs=("y",), attrs={"T": "type"}, shape_fn=same_as_input(0),
            flops=_flops.zero, tags=("shape_only",))
not_differentiable("ZerosLike", "OnesLike")


def zeros_like(tensor, dtype=None, name=None):
    """Zeros with the shape (and dtype) of `tensor`."""
    out = apply_op("ZerosLike", [tensor], name=name)
    return out if dtype is None else _cast(out, dtype)


def ones_like(tensor, dtype=None, name=None):
    """Ones with the shape (and dtype) of `tensor`."""
    out = apply_op("OnesLike", [tensor], name=name)
    return out if dtype is None else _cast(out, dtype)


def _cast(x, dtype):
    from tfplus.ops.math_ops import cast
    return cast(x, dtype)


# -- helpers for shape-like arguments ------------------------------------------------------------------------
def _index_tensor(value, dtype=_dt.int32, name=None) -> Tensor:
    """A shape, axis or index argument as an integer tensor: tensors pass through, a list holding tensors is
    packed (TF's auto-packing: `tf.reshape(x, [tf.shape(x)[0], -1])`), numbers become a Const."""
    if isinstance(value, Tensor) or hasattr(value, "_as_tensor"):
        return convert_to_tensor(value)
    if isinstance(value, TensorShape):
        value = value.as_list()
    if isinstance(value, (list, tuple)):
        value = [v if isinstance(v, Tensor) else getattr(v, "value", v) for v in value]  # Dimension -> int
        if any(isinstance(v, Tensor) for v in value):
            return stack([_index_tensor(v, dtype) for v in value], name=name or "stack")
        if any(v is None for v in value):
            raise ValueError(f"shape {value} has unknown dimensions; pass tf.shape(x) to use run-time sizes")
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" and arr.size:
        raise TypeError(f"expected integers for a shape or index argument, got {value!r}")
    return constant(arr.astype(dtype.np), dtype=dtype, name=name or "Const")


def _shape_of(x: Tensor):
    """x's shape as a tuple when it is fully known at build time (a constant), else a Shape tensor."""
    s = x._shape
    return s if s is not None and None not in s else shape(x)


def _check_index_dtype(s, what: str) -> None:
    if s.dtype not in _INDEX:
        raise TypeError(f"{what} must be int32 or int64, got {s.dtype.name}")


def _vector(s, what: str) -> list[int] | None:
    """The value of a shape-like input as a list of ints, or None when it is unknown."""
    if s.value is None:
        return None
    if np.ndim(s.value) != 1:
        raise ValueError(f"{what} must be a vector, got shape {fmt(np.shape(s.value))}")
    return [int(v) for v in s.value]


def _unknown_dims(*candidates):
    """(None,) * rank for the first candidate whose rank is known (a shape tuple or a vector's length)."""
    for c in candidates:
        if c is not None:
            return (None,) * c if isinstance(c, int) else (None,) * len(c)
    return None


def _vector_len(s):
    return None if s.shape is None or len(s.shape) != 1 else s.shape[0]


def _axis(a: int, rank: int, what: str = "axis", extra: int = 0) -> int:
    """Normalizes axis `a` in [-rank - extra, rank + extra); raises naming the valid range."""
    lo, hi = -rank - extra, rank + extra
    if not lo <= a < hi:
        raise ValueError(f"{what} {a} is out of range for a tensor of rank {rank} (valid: [{lo}, {hi}))")
    return a + rank + extra if a < 0 else a


# -- Reshape -------------------------------------------------------------------------------------------------
def _reshape_shape(ins, attrs):
    x, target = ins
    _check_index_dtype(target, "Reshape's shape")
    dims = _vector(target, "Reshape's shape")
    if dims is None:
        if target.partial is not None:  # some entries known (tf.stack([batch, 4, -1])): those are the dims
            n = num_elements(x.shape)
            known = [d for d in target.partial if d is not None and d != -1]
            free = [d for d in target.partial if d is None or d == -1]
            rest = n // int(np.prod(known, dtype=np.int64)) if n is not None and len(free) == 1 and known \
                and int(np.prod(known, dtype=np.int64)) else None
            return [spec(tuple(rest if d is None or d == -1 else d for d in target.partial), x.dtype)]
        return [spec(_unknown_dims(_vector_len(target)), x.dtype)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise ValueError(f"shape {dims}: at most one dimension may be -1 and the others must be >= 0")
    n, known = num_elements(x.shape), int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if -1 in dims:
        if n is not None:
            if known == 0 or n % known:
                raise ValueError(f"cannot reshape a tensor with {n} elements to shape {dims}")
            dims[dims.index(-1)] = n // known
        else:
            dims[dims.index(-1)] = None
    elif n is not None and n != known:
        raise ValueError(f"cannot reshape a tensor with {n} elements to shape {dims} ({known} elements)")
    return [spec(tuple(dims), x.dtype)]


register_op("Reshape", inputs=("tensor", "shape"), outputs=("output",), attrs={"T": "type", "Tshape": "type"},
            shape_fn=_reshape_shape, value_inputs=(1,), aliases={0: 0}, flops=_flops.zero, tags=("view",))


def _reshape_rows(op, rows) -> str | None:
    """Row by row where as many entries come before the batch's axis in the output as in the input (each such
    block of entries then holds the same examples in the same order: [B, T, F] -> [B * T, F] and back, [T, B, F]
    -> [T, B * F]); [B, F] -> [F, B] would scramble them."""
    x, y = op.inputs[0], op.outputs[0]
    if x not in rows:
        return None
    before = [None if t not in rows or rows.shape(t) is None or None in rows.shape(t)[:rows[t]] else
              int(np.prod(rows.shape(t)[:rows[t]])) for t in (x, y)]
    if before[0] is not None and before[0] == before[1]:
        return None
    return (f"reshapes the batch's rows (shape {rows.shape(x)} to {rows.shape(y)}) so that its examples' entries "
            "may mix along the axes before the batch's")


register_rows(_reshape_rows, "Reshape")


@register_gradient("Reshape")
def _reshape_grad(op, grad):
    """dx = reshape(dy, shape(x))"""
    return [reshape(grad, _shape_of(op.inputs[0])), None]


def reshape(tensor, shape, name=None) -> Tensor:
    """`tf.reshape(x, [-1, 784])`: same values, new shape (one dim may be -1). Shares x's buffer."""
    listed = shape if isinstance(shape, (list, tuple)) else None
    with name_scope(name, "Reshape", [tensor]) as scope:
        tensor, shape = convert_to_tensor(tensor), _index_tensor(shape, name="shape")
        out = apply_op("Reshape", [tensor, shape], {"Tshape": shape.dtype}, scope)
    if listed is not None and out.shape.ndims == len(listed):
        # A list holding Tensors (tf.reshape(x, [tf.shape(x)[0], 3])) is packed: its known entries are still
        # static dimensions, as TF's constant_value_as_shape finds them.
        out.set_shape([_static_dim(d) for d in listed])
    return out


def _static_dim(d):
    value = constant_value(d) if isinstance(d, Tensor) else getattr(d, "value", d)  # a Dimension: its value
    if value is None or isinstance(value, Tensor) or hasattr(value, "_as_tensor"):
        return None
    value = int(np.asarray(value))
    return value if value >= 0 else None


# -- Transpose -----------------------------------------------------------------------------------------------
def _transpose_shape(ins, attrs):
    x, perm = ins
    _check_index_dtype(perm, "Transpose's perm")
    p = _vector(perm, "Transpose's perm")
    if p is None:
        return [spec(_unknown_dims(x.shape, _vector_len(perm)), x.dtype)]
    if x.shape is None:
        return [spec((None,) * len(p), x.dtype)]
    if sorted(p) != list(builtins.range(len(x.shape))):
        raise ValueError(f"perm {p} is not a permutation of the dimensions of shape {fmt(x.shape)}")
    return [spec(tuple(x.shape[i] for i in p), x.dtype)]


register_op("Transpose", inputs=("x", "perm"), outputs=("y",), attrs={"T": "type", "Tperm": "type"},
            shape_fn=_transpose_shape, value_inputs=(1,), flops=_flops.zero)


register_rows(keeps, "Transpose")  # the axes after it follow the batch's


@register_gradient("Transpose")
def _transpose_grad(op, grad):
    """dx = transpose(dy, inverse(perm))"""
    from tfplus.framework import constant_value
    perm = constant_value(op.inputs[1])
    inverse = np.argsort(perm).astype(np.int32) if perm is not None else invert_permutation(op.inputs[1])
    return [transpose(grad, inverse), None]


def transpose(a, perm=None, name="transpose", conjugate=False) -> Tensor:
    """`tf.transpose(x, [0, 2, 1])`; perm=None reverses the dimensions."""
    with name_scope(name, "transpose", [a]) as scope:
        a = convert_to_tensor(a)
        if perm is None:
            if a._shape is not None:
                perm = list(builtins.range(len(a._shape) - 1, -1, -1))
            else:
                from tfplus.ops import math_ops
                perm = math_ops.range(rank(a) - 1, -1, -1)
        perm = _index_tensor(perm, name="perm")
        return apply_op("Transpose", [a, perm], {"Tperm": perm.dtype}, scope)


# -- InvertPermutation ---------------------------------------------------------------------------------------
def _invert_permutation_shape(ins, attrs):
    _check_index_dtype(ins[0], "InvertPermutation's input")
    if ins[0].shape is not None and len(ins[0].shape) != 1:
        raise ValueError(f"the permutation must be a vector, got shape {fmt(ins[0].shape)}")
    return [spec(ins[0].shape, ins[0].dtype)]


register_op("InvertPermutation", inputs=("x",), outputs=("y",), attrs={"T": "type"},
            shape_fn=_invert_permutation_shape, flops=_flops.zero)
not_differentiable("InvertPermutation")


def invert_permutation(x, name=None) -> Tensor:
    """y[x[i]] = i: `tf.invert_permutation([2, 0, 1])` -> [1, 2, 0]."""
    return apply_op("InvertPermutation", [_index_tensor(x)], name=name)


# -- ConcatV2 ------------------------------------------------------------------------------------------------
def _concat_shape(ins, attrs):
    *values, axis = ins
    check_same_dtype(values, "concat's values")
    _check_index_dtype(axis, "concat's axis")
    ranks = {len(v.shape) for v in values if v.shape is not None}
    if len(ranks) > 1:
        shapes = ", ".join(fmt(v.shape) for v in values)
        raise ValueError(f"all values must have the same rank, got shapes {shapes}")
    if not ranks:
        return [spec(None, values[0].dtype)]
    r = ranks.pop()
    if axis.value is None:
        return [spec((None,) * r, values[0].dtype)]
    a = _axis(int(axis.value), r)
    out = []
    for d in builtins.range(r):
        dims = [None if v.shape is None else v.shape[d] for v in values]
        if d == a:
            out.append(None if None in dims else sum(dims))
        else:
            merged = None
            for x in dims:
                merged = merge_dim(merged, x, f"concat along axis {a}: dimension {d} of the values")
            out.append(merged)
    return [spec(tuple(out), values[0].dtype)]


# value_inputs=(-1,): the axis is the last input, after the variadic values.
register_op("ConcatV2", inputs=("values*", "axis"), outputs=("output",),
            attrs={"N": "int", "T": "type", "Tidx": "type"}, shape_fn=_concat_shape, value_inputs=(-1,),
            flops=_flops.zero)
register_rows(along(value_of(-1), "concatenates"), "ConcatV2")


@register_gradient("ConcatV2")
def _concat_grad(op, grad):
    """dx_i = dy[..., offset_i : offset_i + size_i, ...] along axis"""
    from tfplus.framework import constant_value
    *values, axis_t = op.inputs
    axis = constant_value(axis_t)
    shapes = [v._shape for v in values]
    if axis is not None and all(s is not None for s in shapes):
        r = len(shapes[0])
        a = _axis(int(axis), r)
        if all(s[a] is not None for s in shapes):  # offsets known: constant slices
            grads, offset = [], 0
            for s in shapes:
                begin, size_ = [0] * r, [-1] * r
                begin[a], size_[a] = offset, s[a]
                grads.append(slice(grad, begin, size_))
                offset += s[a]
            return grads + [None]
    offsets = concat_offset(axis_t, [shape(v) for v in values])
    return [slice(grad, o, shape(v)) for o, v in zip(offsets, values)] + [None]


def concat(values, axis, name="concat") -> Tensor:
    """`tf.concat([a, b], axis=1)`: joins tensors along an existing axis."""
    values = list(values)
    if len(values) == 1:  # as TF does: no node for a one-element concat
        return identity(values[0], name=name)
    with name_scope(name, "concat", values) as scope:
        axis = _index_tensor(axis, name="axis")
        return apply_op("ConcatV2", [values, axis], {"Tidx": axis.dtype}, scope)


# -- ConcatOffset (ConcatV2's gradient when shapes are only known at run time) -------------------------------
def _concat_offset_shape(ins, attrs):
    _check_index_dtype(ins[0], "ConcatOffset's concat_dim")
    for s in ins[1:]:
        if s.dtype is not _dt.int32:
            raise TypeError(f"ConcatOffset's shapes must be int32, got {s.dtype.name}")
    return [spec(s.shape, _dt.int32) for s in ins[1:]]


register_op("ConcatOffset", inputs=("concat_dim", "shape*"), outputs=("offset",), attrs={"N": "int"},
            shape_fn=_concat_offset_shape, flops=_flops.zero)
not_differentiable("ConcatOffset")


def concat_offset(concat_dim, shape, name=None) -> list:
    """Where each of the concatenated `shape`s starts in the result: one int32 offset vector per input."""
    out = apply_op("ConcatOffset", [_index_tensor(concat_dim), list(shape)], name=name)
    return list(out) if isinstance(out, tuple) else [out]


# -- Squeeze -------------------------------------------------------------------------------------------------
def _squeeze_shape(ins, attrs):
    x, dims = ins[0], attrs["squeeze_dims"]
    if x.shape is None:
        return [spec(None, x.dtype)]
    if not dims:  # all size-1 dims: unknowable while some dim is unknown
        return [spec(None if None in x.shape else tuple(d for d in x.shape if d != 1), x.dtype)]
    r = len(x.shape)
    axes = {_axis(a, r, "squeeze dim") for a in dims}
    for a in axes:
        if x.shape[a] not in (1, None):
            raise ValueError(f"cannot squeeze dim {a} of shape {fmt(x.shape)}: its size is not 1")
    return [spec(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)]


register_op("Squeeze", inputs=("input",), outputs=("output",),
            attrs={"T": "type", "squeeze_dims": "list(int)"}, shape_fn=_squeeze_shape, aliases={0: 0},
            flops=_flops.zero, tags=("view",))
register_rows(lambda op, rows: None if op.inputs[0] not in rows or op.outputs[0] in rows else
              "removes the batch's axis", "Squeeze")


@register_gradient("Squeeze")
def _squeeze_grad(op, grad):
    """dx = reshape(dy, shape(x))"""
    return [reshape(grad, _shape_of(op.inputs[0]))]


def squeeze(input, axis=None, name=None, squeeze_dims=None) -> Tensor:
    """Removes size-1 dimensions (all of them, or those in `axis`). Shares the input's buffer."""
    axis = squeeze_dims if axis is None else axis
    axis = [] if axis is None else [int(axis)] if np.ndim(axis) == 0 else [int(a) for a in axis]
    return apply_op("Squeeze", [convert_to_tensor(input)], {"squeeze_dims": axis}, name)


# -- ExpandDims ----------------------------------------------------------------------------------------------
def _expand_dims_shape(ins, attrs):
    x, dim = ins
    _check_index_dtype(dim, "ExpandDims' dim")
    if x.shape is None:
        return [spec(None, x.dtype)]
    if dim.value is None:
        return [spec((None,) * (len(x.shape) + 1), x.dtype)]
    if np.size(dim.value) != 1:
        raise ValueError(f"dim must be a scalar, got {dim.value!r}")
    d = _axis(int(np.ravel(dim.value)[0]), len(x.shape), "dim", extra=1)  # -1 appends
    return [spec(x.shape[:d] + (1,) + x.shape[d:], x.dtype)]


register_op("ExpandDims", inputs=("input", "dim"), outputs=("output",), attrs={"T": "type", "Tdim": "type"},
            shape_fn=_expand_dims_shape, value_inputs=(1,), aliases={0: 0}, flops=_flops.zero, tags=("view",))
register_rows(keeps, "ExpandDims")


@register_gradient("ExpandDims")
def _expand_dims_grad(op, grad):
    """dx = reshape(dy, shape(x))"""
    return [reshape(grad, _shape_of(op.inputs[0])), None]


def expand_dims(input, axis=None, name=None, dim=None) -> Tensor:
    """Inserts a size-1 dimension at `axis` (-1 appends). Shares the input's buffer."""
    axis = dim if axis is None else axis
    if axis is None:
        raise ValueError("tf.expand_dims: pass axis")
    axis = _index_tensor(axis)
    return apply_op("ExpandDims", [convert_to_tensor(input), axis], {"Tdim": axis.dtype}, name)


# -- Pad / PadV2 ---------------------------------------------------------------------------------------------
def _pad_shape(ins, attrs):
    x, paddings = ins[0], ins[1]
    _check_index_dtype(paddings, "paddings")
    if len(ins) == 3 and ins[2].dtype is not x.dtype:
        raise TypeError(f"constant_values has dtype {ins[2].dtype.name}, the input {x.dtype.name}")
    if paddings.value is None:
        n = None if paddings.shape is None else paddings.shape[0]
        return [spec(_unknown_dims(x.shape, n), x.dtype)]
    p = np.asarray(paddings.value)
    rank = len(x.shape) if x.shape is not None else p.shape[0]
    if p.shape != (rank, 2) or (p < 0).any():
        raise ValueError(f"paddings must be a non-negative [{rank}, 2] matrix for a rank-{rank} input, "
                         f"got {p.tolist()}")
    dims = x.shape or (None,) * rank
    return [spec(tuple(None if d is None else d + int(a) + int(b) for d, (a, b) in zip(dims, p)), x.dtype)]


register_op("Pad", inputs=("input", "paddings"), outputs=("output",),
            attrs={"T": "type", "Tpaddings": "type"}, shape_fn=_pad_shape, value_inputs=(1,), flops=_flops.zero)
register_op("PadV2", inputs=("input", "paddings", "constant_values"), outputs=("output",),
            attrs={"T": "type", "Tpaddings": "type"}, shape_fn=_pad_shape, value_inputs=(1,), flops=_flops.zero)


def _pad_rows(op, rows) -> str | None:
    paddings, x = const(op.inputs[1]), op.inputs[0]
    if x not in rows or paddings is not None and not paddings[rows[x]].any():
        return None
    return "pads the batch's axis: each micro-batch would pad its own rows"
    return "pads axis 0, the batch's rows: each micro-batch would pad its own"


register_rows(_pad_rows, "Pad", "PadV2")


@register_gradient("Pad")
@register_gradient("PadV2")
def _pad_grad(op, grad):
    """dx = dy[before : before + shape(x)] (constant_values get no gradient, as in TF)"""
    from tfplus.framework import constant_value
    x, paddings = op.inputs[0], op.inputs[1]
    p = constant_value(paddings)
    begin = [int(b) for b in p[:, 0]] if p is not None else paddings[:, 0]
    size_ = _shape_of(x)
    if isinstance(begin, Tensor) and not isinstance(size_, Tensor):
        size_ = _index_tensor(size_, begin.dtype)
    elif isinstance(begin, Tensor):
        size_ = shape(x, out_type=begin.dtype)
    return [slice(grad, begin, size_)] + [None] * (len(op.inputs) - 1)


def _mirror_pad(tensor: Tensor, paddings, mode: str, name) -> Tensor:
    """REFLECT (edge not repeated) or SYMMETRIC (edge repeated) padding as one gather of mirrored indices per
    padded axis, so that it has GatherV2's gradient and kernels; the paddings and padded sizes must be static."""
    value = constant_value(convert_to_tensor(paddings))
    shape_ = tensor.shape.as_list() if tensor.shape.ndims is not None else None
    if value is None or shape_ is None:
        raise ValueError(f"tf.pad mode={mode!r} of '{tensor.name}': tfplus needs the paddings and the input's "
                         f"rank known when the graph is built, got paddings {paddings} and shape {tensor.shape}")
    value = np.asarray(value).reshape(len(shape_), 2)
    edge = 1 if mode == "REFLECT" else 0
    with name_scope(name, "MirrorPad"):
        for axis, (before, after) in enumerate(value.tolist()):
            if before == after == 0:
                continue
            n = shape_[axis]
            if n is None or before > n - edge or after > n - edge:
                raise ValueError(f"tf.pad mode={mode!r} of '{tensor.name}': axis {axis} of size {n} cannot be "
                                 f"padded by ({before}, {after}) (at most {'size - 1' if edge else 'size'} each)")
            index = np.concatenate([np.arange(before + edge - 1, edge - 1, -1), np.arange(n),
                                    np.arange(n - 1 - edge, n - 1 - edge - after, -1)]).astype(np.int32)
            tensor = gather(tensor, index, axis=axis)
        return identity(tensor)


def pad(tensor, paddings, mode="CONSTANT", name=None, constant_values=0) -> Tensor:
    """`tf.pad(x, [[0, 0], [2, 2]])`: surrounds x with `constant_values`; mode 'REFLECT' or 'SYMMETRIC' mirrors
    x's edges instead (`tf.pad(img, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")`)."""
    tensor = convert_to_tensor(tensor)
    if mode.upper() in ("REFLECT", "SYMMETRIC"):
        return _mirror_pad(tensor, paddings, mode.upper(), name)
    if mode.upper() != "CONSTANT":
        raise ValueError(f"tf.pad: mode must be 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}")
    paddings = _index_tensor(paddings)
    if isinstance(constant_values, (int, float)) and constant_values == 0:
        return apply_op("Pad", [tensor, paddings], {"Tpaddings": paddings.dtype}, name)
    return apply_op("PadV2", [tensor, paddings, constant_values], {"Tpaddings": paddings.dtype}, name)


# -- StopGradient --------------------------------------------------------------------------------------------
register_op("StopGradient", inputs=("input",), outputs=("output",), attrs={"T": "type"},
            shape_fn=same_as_input(0), aliases={0: 0}, flops=_flops.zero, tags=("view",))
register_rows(keeps, "StopGradient")
not_differentiable("StopGradient")


def stop_gradient(input, name=None) -> Tensor:
    """The same value, but tf.gradients treats it as a constant."""
    return apply_op("StopGradient", [convert_to_tensor(input)], name=name)


# -- Shape / Size / Rank: they fold to constants when the input's static shape is known ----------------------
def _shape_shape(ins, attrs):
    x, out_type = ins[0], attrs["out_type"]
    if out_type not in _INDEX:
        raise TypeError(f"out_type must be int32 or int64, got {out_type.name}")
    if x.shape is None:
        return [spec((None,), out_type)]
    value = np.array(x.shape, out_type.np) if None not in x.shape else None
    return [spec((len(x.shape),), out_type, value)]


register_op("Shape", inputs=("input",), outputs=("output",), attrs={"T": "type", "out_type": "type"},
            shape_fn=_shape_shape, flops=_flops.zero, tags=("shape_only",))
not_differentiable("Shape")


def shape(input, name=None, out_type=_dt.int32) -> Tensor:
    """The run-time shape of `input` as an int vector (a constant when the static shape is fully known)."""
    return apply_op("Shape", [convert_to_tensor(input)], {"out_type": _dt.as_dtype(out_type)}, name)


def _size_shape(ins, attrs):
    out_type = attrs["out_type"]
    if out_type not in _INDEX:
        raise TypeError(f"out_type must be int32 or int64, got {out_type.name}")
    n = num_elements(ins[0].shape)
    return [spec((), out_type, None if n is None else np.array(n, out_type.np))]


register_op("Size", inputs=("input",), outputs=("output",), attrs={"T": "type", "out_type": "type"},
            shape_fn=_size_shape, flops=_flops.zero, tags=("shape_only",))
not_differentiable("Size")


def size(input, name=None, out_type=_dt.int32) -> Tensor:
    """The number of elements of `input` (a scalar)."""
    return apply_op("Size", [convert_to_tensor(input)], {"out_type": _dt.as_dtype(out_type)}, name)


def _rank_shape(ins, attrs):
    s = ins[0].shape
    return [spec((), _dt.int32, None if s is None else np.array(len(s), np.int32))]


register_op("Rank", inputs=("input",), outputs=("output",), attrs={"T": "type"}, shape_fn=_rank_shape,
            flops=_flops.zero, tags=("shape_only",))
not_differentiable("Rank")


def rank(input, name=None) -> Tensor:
    """The number of dimensions of `input` (an int32 scalar)."""
    return apply_op("Rank", [convert_to_tensor(input)], name=name)


# -- OneHot --------------------------------------------------------------------------------------------------
def _one_hot_shape(ins, attrs):
    indices, depth, on, off = ins
    if indices.dtype not in (_dt.uint8, _dt.int32, _dt.int64):
        raise TypeError(f"indices must be uint8, int32 or int64, got {indices.dtype.name}")
    if on.dtype is not off.dtype:
        raise TypeError(f"on_value ({on.dtype.name}) and off_value ({off.dtype.name}) must have one dtype")
    d = None if depth.value is None else int(depth.value)
    if d is not None and d < 0:
        raise ValueError(f"depth must be non-negative, got {d}")
    if indices.shape is None:
        return [spec(None, on.dtype)]
    r, axis = len(indices.shape), attrs["axis"]
    if not -1 <= axis <= r:
        raise ValueError(f"axis {axis} is out of range for indices of rank {r} (valid: -1 to {r})")
    pos = r if axis == -1 else axis
    return [spec(indices.shape[:pos] + (d,) + indices.shape[pos:], on.dtype)]


register_op("OneHot", inputs=("indices", "depth", "on_value", "off_value"), outputs=("output",),
            attrs={"axis": "int", "T": "type", "TI": "type"}, shape_fn=_one_hot_shape, value_inputs=(1,),
            flops=_flops.zero)
register_rows(keeps, "OneHot")
not_differentiable("OneHot")


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None) -> Tensor:
    """`tf.one_hot([0, 2], 3)` -> [[1, 0, 0], [0, 0, 1]] (float32 unless dtype or on_value say otherwise)."""
    indices = convert_to_tensor(indices)
    if dtype is None:
        known = next((v for v in (on_value, off_value) if isinstance(v, Tensor)), None)
        dtype = known.dtype if known is not None else _dt.float32
    dtype = _dt.as_dtype(dtype)
    on = convert_to_tensor(1 if on_value is None else on_value, dtype=None if isinstance(on_value, Tensor)
                           else dtype)
    off = convert_to_tensor(0 if off_value is None else off_value, dtype=None if isinstance(off_value, Tensor)
                            else dtype)
    return apply_op("OneHot", [indices, _index_tensor(depth), on, off],
                    {"axis": -1 if axis is None else int(axis), "T": on.dtype, "TI": indices.dtype}, name)


# -- Tile ----------------------------------------------------------------------------------------------------
def _tile_shape(ins, attrs):
    x, multiples = ins
    _check_index_dtype(multiples, "multiples")
    m = _vector(multiples, "multiples")
    if m is None:
        return [spec(_unknown_dims(x.shape, _vector_len(multiples)), x.dtype)]
    if x.shape is not None and len(m) != len(x.shape):
        raise ValueError(f"multiples {m} must have one entry per dimension of shape {fmt(x.shape)}")
    if any(k < 0 for k in m):
        raise ValueError(f"multiples {m} must be non-negative")
    dims = x.shape or (None,) * len(m)
    return [spec(tuple(None if d is None else d * k for d, k in zip(dims, m)), x.dtype)]


register_op("Tile", inputs=("input", "multiples"), outputs=("output",),
            attrs={"T": "type", "Tmultiples": "type"}, shape_fn=_tile_shape, value_inputs=(1,), flops=_flops.zero)


def _tile_rows(op, rows) -> str | None:
    multiples, x = const(op.inputs[1]), op.inputs[0]
    if x not in rows or multiples is not None and multiples[rows[x]] == 1:
        return None
    return "repeats the batch's rows along their axis (tf.tile): each micro-batch would repeat its own"
    return "repeats the batch's rows along axis 0 (tf.tile): each micro-batch would repeat its own"


register_rows(_tile_rows, "Tile")


@register_gradient("Tile")
def _tile_grad(op, grad):
    """dx = sum of dy's tiles: reshape dy to [m0, d0, m1, d1, ...] and sum the m axes"""
    from tfplus.framework import constant_value
    from tfplus.ops.math_ops import reduce_sum
    x, multiples = op.inputs
    m, s = constant_value(multiples), x._shape
    if s is None:
        raise ValueError(f"gradient of Tile '{op.name}' needs the input's rank; it is unknown")
    if m is not None and None not in s:
        split = [int(v) for pair in zip(m, s) for v in pair]
    else:
        split = reshape(transpose(stack([multiples, shape(x, out_type=multiples.dtype)])), [-1])
    return [reduce_sum(reshape(grad, split), list(builtins.range(0, 2 * len(s), 2))), None]


def tile(input, multiples, name=None) -> Tensor:
    """`tf.tile(x, [2, 1])` repeats x twice along dim 0."""
    multiples = _index_tensor(multiples)
    return apply_op("Tile", [convert_to_tensor(input), multiples], {"Tmultiples": multiples.dtype}, name)


# -- Slice ---------------------------------------------------------------------------------------------------
def _slice_shape(ins, attrs):
    x, begin, size_ = ins
    _check_index_dtype(begin, "begin")
    if begin.dtype is not size_.dtype:
        raise TypeError(f"begin ({begin.dtype.name}) and size ({size_.dtype.name}) must have one dtype")
    b, n = _vector(begin, "begin"), _vector(size_, "size")
    if b is None or n is None:
        return [spec(_unknown_dims(x.shape, b, n, _vector_len(begin)), x.dtype)]
    if len(b) != len(n) or (x.shape is not None and len(b) != len(x.shape)):
        raise ValueError(f"begin {b} and size {n} must have one entry per dimension of shape {fmt(x.shape)}")
    dims = x.shape or (None,) * len(b)
    out = []
    for i, (d, bi, ni) in enumerate(zip(dims, b, n)):
        end = (d if ni == -1 else bi + ni) if d is not None or ni != -1 else None
        if bi < 0 or ni < -1 or (d is not None and end > d):
            raise ValueError(f"slice begin {b}, size {n} is out of bounds in dim {i} of shape {fmt(x.shape)}")
        out.append(None if end is None else end - bi)
    return [spec(tuple(out), x.dtype)]


register_op("Slice", inputs=("input", "begin", "size"), outputs=("output",),
            attrs={"T": "type", "Index": "type"}, shape_fn=_slice_shape, value_inputs=(1, 2), flops=_flops.zero)


def _slice_rows(op, rows) -> str | None:
    begin, x = const(op.inputs[1]), op.inputs[0]
    if x not in rows or begin is not None and begin[rows[x]] == 0 and _every_row(op.inputs[2], rows[x], rows):
        return None
    return "takes some of the batch's rows (tf.slice along their axis): each micro-batch would take its own"


def _every_row(size: Tensor, axis: int, rows) -> bool:
    """Whether a slice of `size` from row 0 takes every row on `axis`: size -1 there, or the shape of a tensor with
    its rows on that axis (a Pad's gradient, tf.slice(dy, before, tf.shape(x)): a micro-batch's x has its rows)."""
    v = const(size)
    if v is not None:
        return v[axis] == -1
    return size.op.type == "Shape" and rows.get(size.op.inputs[0]) == axis


register_rows(_slice_rows, "Slice")


@register_gradient("Slice")
def _slice_grad(op, grad):
    """dx = pad(dy, [begin, shape(x) - begin - shape(dy)])"""
    from tfplus.framework import constant_value
    x, begin_t = op.inputs[0], op.inputs[1]
    begin, xs, ys = constant_value(begin_t), x._shape, op.outputs[0]._shape
    if begin is not None and _known(xs) and _known(ys):
        paddings = [[int(b), d - int(b) - s] for b, d, s in zip(begin, xs, ys)]
    else:
        before = begin_t
        after = shape(x, out_type=begin_t.dtype) - begin_t - shape(op.outputs[0], out_type=begin_t.dtype)
        paddings = stack([before, after], axis=1)
    return [pad(grad, paddings), None, None]


def _known(s) -> bool:
    return s is not None and None not in s


def slice(input_, begin, size, name=None) -> Tensor:
    """`tf.slice(x, [1, 0], [2, -1])`: x[1:3, 0:]; size -1 takes the rest of the dimension."""
    begin = _index_tensor(begin)
    size = _index_tensor(size, begin.dtype)
    return apply_op("Slice", [convert_to_tensor(input_), begin, size], {"Index": begin.dtype}, name)


# -- StridedSlice --------------------------------------------------------------------------------------------
_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _indexed_shape(shape_, index):
    """The shape NumPy basic indexing `x[index]` gives for a possibly partially known shape."""
    if shape_ is None:
        return None
    consumed = sum(1 for k in index if k is not None and k is not Ellipsis)
    if consumed > len(shape_):
        raise ValueError(f"{consumed} indices for a tensor of shape {fmt(shape_)}")
    fill = [builtins.slice(None)] * (len(shape_) - consumed)
    if any(k is Ellipsis for k in index):
        at = next(i for i, k in enumerate(index) if k is Ellipsis)
        index = list(index[:at]) + fill + [k for k in index[at + 1:] if k is not Ellipsis]
    else:
        index = list(index) + fill
    out, dim = [], 0
    for k in index:
        if k is None:
            out.append(1)
            continue
        d = shape_[dim]
        dim += 1
        if isinstance(k, builtins.slice):
            out.append(None if d is None else len(builtins.range(*k.indices(d))))
        elif d is not None and not -d <= k < d:
            raise ValueError(f"index {k} is out of bounds for dimension {dim - 1} of shape {fmt(shape_)}")
    return tuple(out)


def _strided_slice_shape(ins, attrs):
    x, begin, end, strides = ins
    for s in (begin, end, strides):
        _check_index_dtype(s, "begin, end and strides")
    b, e, s = (_vector(t, "begin, end and strides") for t in (begin, end, strides))
    if b is None or e is None or s is None:
        return [spec(_masked_shape(x.shape, _vector_len(begin), s, attrs), x.dtype)]
    if not len(b) == len(e) == len(s):
        raise ValueError(f"begin {b}, end {e} and strides {s} must have one length")
    if 0 in s:
        raise ValueError(f"strides {s} must be non-zero")
    return [spec(_indexed_shape(x.shape, strided_slice_index(b, e, s, attrs)), x.dtype)]


def _masked_shape(shape_, n, strides, masks):
    """StridedSlice's output shape when begin or end is known only at run time (`x[t]` in a loop): what the
    masks alone tell (shrunk dims go, new axes are 1, fully masked unit-stride dims keep their size)."""
    if shape_ is None or n is None or masks["ellipsis_mask"]:
        return None
    out, dim = [], 0
    for i in builtins.range(n):
        bit = 1 << i
        if masks["new_axis_mask"] & bit:
            out.append(1)
            continue
        if dim >= len(shape_):
            return None
        if not masks["shrink_axis_mask"] & bit:
            whole = masks["begin_mask"] & masks["end_mask"] & bit and strides is not None and strides[i] == 1
            out.append(shape_[dim] if whole else None)
        dim += 1
    return tuple(out) + tuple(shape_[dim:])


register_op("StridedSlice", inputs=("input", "begin", "end", "strides"), outputs=("output",),
            attrs={"T": "type", "Index": "type", **{m: "int" for m in _MASKS}},
            shape_fn=_strided_slice_shape, value_inputs=(1, 2, 3), flops=_flops.zero)


def _strided_slice_rows(op, rows) -> str | None:
    """Row by row where it takes all of the batch's axis in order: x[:, 3], x[..., :5], x[:], x[None]; not
    x[:25], x[1:], x[::-1] or x[0]. (StridedSliceGrad: where its forward slice is.)"""
    whole = op.outputs[0] if op.type == "StridedSliceGrad" else op.inputs[0]  # the tensor sliced
    if whole not in rows:
        return None if not any(t in rows for t in (*op.inputs, *op.outputs)) else \
            "slices a tensor whose batch axis is not known"
    begin, end, strides = (const(t) for t in op.inputs[1:4])
    if begin is None or end is None or strides is None or rows.shape(whole) is None:
        return "slices the batch's rows with bounds computed when the step runs"
    masks = {m: op.attrs.get(m, 0) for m in _MASKS}
    # the entry of the slice that addresses the batch's axis: an ellipsis stands for the axes no entry names
    named = len(begin) - bin(masks["new_axis_mask"]).count("1") - bin(masks["ellipsis_mask"]).count("1")
    dim = 0
    for i in builtins.range(len(begin)):
        bit = 1 << i
        if masks["ellipsis_mask"] & bit:
            dim += len(rows.shape(whole)) - named
        elif not masks["new_axis_mask"] & bit:
            if dim > rows[whole]:
                break
            if dim == rows[whole]:
                return _takes_rows(begin[i], end[i], strides[i], {m: v & bit for m, v in masks.items()})
            dim += 1
    return None


def _takes_rows(begin, end, stride, masks) -> str | None:
    """Why a slice's entry for the batch's axis does not take all of it in order (None if it does)."""
    if masks["shrink_axis_mask"]:
        return f"{ONE_ROW} {begin} of the batch alone: each micro-batch would take its own"
    if stride != 1:
        return f"steps through the batch's rows by {stride} (x[::-1] reverses them): each micro-batch its own"
    if not (masks["begin_mask"] or begin == 0) or not masks["end_mask"]:
        span = f"{'' if masks['begin_mask'] else begin}:{'' if masks['end_mask'] else end}"
        return (f"takes rows {span} of the batch (a tower of tf.split, a GAN's real or fake half): each "
                "micro-batch takes its own")
    return None


register_rows(_strided_slice_rows, "StridedSlice")


@register_gradient("StridedSlice")
def _strided_slice_grad(op, grad):
    """dx = zeros(shape(x)) with dy scattered into the sliced positions"""
    x, begin, end, strides = op.inputs
    s = _shape_of(x)
    s = _index_tensor(s, begin.dtype) if not isinstance(s, Tensor) else shape(x, out_type=begin.dtype)
    return [strided_slice_grad(s, begin, end, strides, grad, **{m: op.attrs[m] for m in _MASKS}),
            None, None, None]


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0,
                  new_axis_mask=0, shrink_axis_mask=0, var=None, name=None) -> Tensor:
    """NumPy-style slicing with TF's masks; `x[1:, ::2, tf.newaxis]` builds one of these."""
    begin = _index_tensor(begin)
    end = _index_tensor(end, begin.dtype)
    if strides is None:
        strides = [1] * begin.shape.as_list()[0]
    strides = _index_tensor(strides, begin.dtype)
    masks = dict(begin_mask=begin_mask, end_mask=end_mask, ellipsis_mask=ellipsis_mask,
                 new_axis_mask=new_axis_mask, shrink_axis_mask=shrink_axis_mask)
    return apply_op("StridedSlice", [convert_to_tensor(input_), begin, end, strides],
                    {"Index": begin.dtype, **masks}, name)


def _slice_helper(tensor, key):
    """Tensor.__getitem__: ints, slices (with steps), Ellipsis and tf.newaxis (None), as in NumPy."""
    tensor = convert_to_tensor(tensor)
    key = key if isinstance(key, tuple) else (key,)
    begin, end, strides = [], [], []
    masks = dict.fromkeys(_MASKS, 0)
    for i, k in enumerate(key):
        bit = 1 << i
        if isinstance(k, builtins.slice):
            for part, mask, default, out in ((k.start, "begin_mask", 0, begin), (k.stop, "end_mask", 0, end),
                                             (k.step, None, 1, strides)):
                if part is None:
                    out.append(default)
                    if mask:
                        masks[mask] |= bit
                else:
                    out.append(_slice_index(part))
        elif k is Ellipsis:
            begin.append(0), end.append(0), strides.append(1)
            masks["ellipsis_mask"] |= bit
        elif k is None:
            begin.append(0), end.append(0), strides.append(1)
            masks["new_axis_mask"] |= bit
        else:
            k = _slice_index(k)
            begin.append(k), end.append(k + 1), strides.append(1)
            masks["shrink_axis_mask"] |= bit
    with name_scope(None, "strided_slice", [tensor]) as scope:  # TF's names: 'strided_slice/stack', ..._1, _2
        begin = _index_tensor(begin, name="stack")
        end, strides = (_index_tensor(v, begin.dtype, name="stack") for v in (end, strides))
        return strided_slice(tensor, begin, end, strides, name=scope, **masks)


Tensor._override_operator("__getitem__", _slice_helper)  # `x[1:, None]`, as TensorFlow's array_ops installs it


def _slice_index(k):
    if isinstance(k, Tensor):
        if k.dtype not in _INDEX or (k._shape is not None and k._shape != ()):
            raise TypeError(f"a tensor index must be an int32/int64 scalar, got {k!r}")
        return k
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"unsupported index {k!r}: tensors take ints, slices, Ellipsis, tf.newaxis and int "
                        "scalar tensors (use tf.gather for lists of indices, tf.boolean_mask for masks)")
    return int(k)


# -- StridedSliceGrad ----------------------------------------------------------------------------------------
def _strided_slice_grad_shape(ins, attrs):
    shape_, dy = ins[0], ins[4]
    _check_index_dtype(shape_, "StridedSliceGrad's shape")
    dims = _vector(shape_, "StridedSliceGrad's shape")
    return [spec(_unknown_dims(_vector_len(shape_)) if dims is None else tuple(dims), dy.dtype)]


register_op("StridedSliceGrad", inputs=("shape", "begin", "end", "strides", "dy"), outputs=("output",),
            attrs={"T": "type", "Index": "type", **{m: "int" for m in _MASKS}},
            shape_fn=_strided_slice_grad_shape, value_inputs=(0, 1, 2, 3), flops=_flops.zero)
register_rows(_strided_slice_rows, "StridedSliceGrad")


@register_gradient("StridedSliceGrad")
def _strided_slice_grad_grad(op, grad):
    """d dy = strided_slice(d output)"""
    _, begin, end, strides, _ = op.inputs
    return [None, None, None, None,
            strided_slice(grad, begin, end, strides, **{m: op.attrs[m] for m in _MASKS})]


def strided_slice_grad(shape, begin, end, strides, dy, begin_mask=0, end_mask=0, ellipsis_mask=0,
                       new_axis_mask=0, shrink_axis_mask=0, name=None) -> Tensor:
    """Zeros of `shape` with `dy` written where StridedSlice(begin, end, strides) reads."""
    begin = _index_tensor(begin)
    shape, end, strides = (_index_tensor(t, begin.dtype) for t in (shape, end, strides))
    masks = dict(begin_mask=begin_mask, end_mask=end_mask, ellipsis_mask=ellipsis_mask,
                 new_axis_mask=new_axis_mask, shrink_axis_mask=shrink_axis_mask)
    dy = convert_to_tensor(dy)
    return apply_op("StridedSliceGrad", [shape, begin, end, strides, dy],
                    {"T": dy.dtype, "Index": begin.dtype, **masks}, name)


# -- Pack / Unpack (tf.stack / tf.unstack) -------------------------------------------------------------------
def _pack_shape(ins, attrs):
    check_same_dtype(ins, "stack's values")
    merged = None
    for s in ins:
        if s.shape is None:
            continue
        if merged is not None and len(merged) != len(s.shape):
            raise ValueError("all values must have one shape, got " + ", ".join(fmt(v.shape) for v in ins))
        merged = s.shape if merged is None else tuple(
            merge_dim(a, b, "stack: the values' shapes " + ", ".join(fmt(v.shape) for v in ins))
            for a, b in zip(merged, s.shape))
    if merged is None:
        return [spec(None, ins[0].dtype)]
    a = _axis(attrs["axis"], len(merged), extra=1)
    return [spec(merged[:a] + (len(ins),) + merged[a:], ins[0].dtype)]


register_op("Pack", inputs=("values*",), outputs=("output",), attrs={"N": "int", "T": "type", "axis": "int"},
            shape_fn=_pack_shape, flops=_flops.zero)
register_rows(keeps, "Pack")


@register_gradient("Pack")
def _pack_grad(op, grad):
    """dx_i = unstack(dy, axis)[i]"""
    return unstack(grad, num=op.attrs["N"], axis=op.attrs["axis"])


def stack(values, axis=0, name="stack") -> Tensor:
    """`tf.stack([a, b], axis=1)`: joins same-shaped tensors along a new axis."""
    return apply_op("Pack", [list(values)], {"axis": int(axis)}, name)


_MAX_OUTPUTS = 2**24


def _unpack_shape(ins, attrs):
    x, num = ins[0], attrs["num"]
    if not 0 <= num <= _MAX_OUTPUTS:  # NOTE: a GraphDef's num, unchecked, makes that many Tensors
        raise ValueError(f"num must be in [0, {_MAX_OUTPUTS}], got {num}")
    if x.shape is None:
        return [spec(None, x.dtype)] * num
    a = _axis(attrs["axis"], len(x.shape))
    if x.shape[a] not in (None, num):
        raise ValueError(f"cannot unstack dim {a} of shape {fmt(x.shape)} into {num} tensors")
    return [spec(x.shape[:a] + x.shape[a + 1:], x.dtype)] * num


register_op("Unpack", inputs=("value",), outputs=("output",),
            attrs={"num": "int", "T": "type", "axis": "int"}, shape_fn=_unpack_shape, flops=_flops.zero)
register_rows(along(attr("axis"), "unstacks"), "Unpack")


@register_gradient("Unpack")
def _unpack_grad(op, *grads):
    """dx = stack(dy_i, axis), zeros for outputs that got no gradient"""
    parts = [zeros_like(t) if g is None else g for t, g in zip(op.outputs, grads)]
    return [stack(parts, axis=op.attrs["axis"])]


def unstack(value, num=None, axis=0, name="unstack") -> list:
    """`a, b = tf.unstack(x)`: splits x along `axis` into tensors of one rank less."""
    value = convert_to_tensor(value)
    if num is None:
        s = value._shape
        if s is None or s[_axis(axis, len(s))] is None:
            raise ValueError(f"tf.unstack: the size of axis {axis} of '{value.name}' (shape {fmt(s)}) is "
                             "unknown; pass num")
        num = s[_axis(axis, len(s))]
    out = apply_op("Unpack", [value], {"num": int(num), "axis": int(axis)}, name)
    return list(out) if isinstance(out, tuple) else [out] if num == 1 else []


# -- BroadcastTo ---------------------------------------------------------------------------------------------
def _broadcast_to_shape(ins, attrs):
    x, target = ins
    _check_index_dtype(target, "BroadcastTo's shape")
    dims = _vector(target, "BroadcastTo's shape")
    if dims is None:
        return [spec(_unknown_dims(_vector_len(target)), x.dtype)]
    out = broadcast(x.shape, tuple(dims))
    if out is not None and tuple(d if o is None else o for d, o in zip(dims, out)) != tuple(dims):
        raise ValueError(f"shape {fmt(x.shape)} cannot be broadcast to {dims}")
    return [spec(tuple(dims), x.dtype)]


register_op("BroadcastTo", inputs=("input", "shape"), outputs=("output",),
            attrs={"T": "type", "Tidx": "type"}, shape_fn=_broadcast_to_shape, value_inputs=(1,), flops=_flops.zero)
register_rows(aligned, "BroadcastTo")


@register_gradient("BroadcastTo")
def _broadcast_to_grad(op, grad):
    """dx = dy summed over the broadcast dims"""
    from tfplus.ops.math_ops import _reduce_to
    return [_reduce_to(grad, _shape_of(op.inputs[0])), None]


def broadcast_to(input, shape, name=None) -> Tensor:
    """`tf.broadcast_to([1, 2], [3, 2])`: NumPy broadcasting, materialized."""
    shape = _index_tensor(shape)
    return apply_op("BroadcastTo", [convert_to_tensor(input), shape], {"Tidx": shape.dtype}, name)


# -- BroadcastGradientArgs -----------------------------------------------------------------------------------
def _bcast_args_shape(ins, attrs):
    s0, s1 = ins
    for s in ins:
        _check_index_dtype(s, "BroadcastGradientArgs' inputs")
    a, b = _vector(s0, "s0"), _vector(s1, "s1")
    if a is None or b is None:
        return [spec((None,), s0.dtype), spec((None,), s0.dtype)]
    r0, r1 = broadcast_gradient_args_value(a, b)
    return [spec((len(r0),), s0.dtype, np.array(r0, s0.dtype.np)),
            spec((len(r1),), s0.dtype, np.array(r1, s0.dtype.np))]


register_op("BroadcastGradientArgs", inputs=("s0", "s1"), outputs=("r0", "r1"), attrs={"T": "type"},
            shape_fn=_bcast_args_shape, value_inputs=(0, 1), flops=_flops.zero)
not_differentiable("BroadcastGradientArgs")


def broadcast_gradient_args(s0, s1, name=None) -> tuple:
    """The axes to sum a gradient of broadcast(s0, s1) over to get back to s0, and to s1."""
    return apply_op("BroadcastGradientArgs", [_index_tensor(s0), _index_tensor(s1)], name=name)


# -- GatherV2 / Gather ---------------------------------------------------------------------------------------
def _gather_out(params, indices, axis):
    if params.shape is None or indices.shape is None:
        return None
    return params.shape[:axis] + indices.shape + params.shape[axis + 1:]


def _gather_v2_shape(ins, attrs):
    params, indices, axis_t = ins
    _check_index_dtype(indices, "gather's indices")
    _check_index_dtype(axis_t, "gather's axis")
    if attrs.get("batch_dims", 0):
        raise ValueError(f"batch_dims={attrs['batch_dims']} is not supported; tfplus gathers with batch_dims=0")
    if axis_t.value is None or params.shape is None:
        return [spec(None, params.dtype)]
    return [spec(_gather_out(params, indices, _axis(int(axis_t.value), len(params.shape))), params.dtype)]


register_op("GatherV2", inputs=("params", "indices", "axis"), outputs=("output",),
            attrs={"Tparams": "type", "Tindices": "type", "Taxis": "type", "batch_dims": "int"},
            shape_fn=_gather_v2_shape, value_inputs=(2,), flops=_flops.zero)
register_op("Gather", inputs=("params", "indices"), outputs=("output",),
            attrs={"Tparams": "type", "Tindices": "type", "validate_indices": "bool"},
            shape_fn=lambda ins, attrs: _gather_v2_shape([*ins, spec((), _dt.int32, np.int32(0))], attrs),
            flops=_flops.zero)


def _gather_rows(op, rows) -> str | None:
    """Row by row where it looks up entries of params without rows by indices with rows (an embedding), or takes
    entries along another axis than the batch's by indices without rows (x[:, cols]). Picking rows of the batch by
    index is not: planner.rows allows gather_nd's taking each row's own entry alone."""
    params, indices = op.inputs[:2]
    axis = 0 if op.type == "Gather" else value_of(2)(op)
    if params not in rows:
        return None
    if axis is not None and rows.shape(params) is not None:
        axis %= len(rows.shape(params))
    if axis is not None and axis != rows[params] and indices not in rows:
        return None
    computed = " computed from the batch" if indices in rows else ""
    return (f"picks rows of the batch's '{params.name}' by indices '{indices.name}'{computed} (tf.gather, "
            "tf.gather_nd, tf.boolean_mask, tf.reverse, mixup): each micro-batch's indices would name rows of the "
            "whole batch")


register_rows(_gather_rows, "GatherV2", "Gather")


def _gather_grad_along(op, grad, axis: int):
    """d params = unsorted_segment_sum of dy's slices into the gathered rows (axis moved to the front)"""
    from tfplus.ops.math_ops import unsorted_segment_sum
    params, indices = op.inputs[0], op.inputs[1]
    p_shape, i_rank = params._shape, indices._shape
    if p_shape is None or i_rank is None:
        raise ValueError(f"the gradient of {op.type} '{op.name}' needs the ranks of params and indices")
    flat_idx = reshape(indices, [-1])
    n_outer, r = axis, len(p_shape)
    # dy: outer + indices + inner -> (indices..., outer, inner) -> [n, outer..., inner...]
    k = len(i_rank)
    perm = list(builtins.range(n_outer, n_outer + k)) + list(builtins.range(n_outer)) + \
        list(builtins.range(n_outer + k, n_outer + k + r - axis - 1))
    moved = transpose(grad, perm) if axis else grad
    dims = _shape_of(params)
    rest = [dims[i] for i in builtins.range(r) if i != axis] if isinstance(dims, tuple) else \
        gather(dims, [i for i in builtins.range(r) if i != axis])
    flat = reshape(moved, concat([[-1], rest], 0) if isinstance(rest, Tensor) else [-1] + rest)
    n = dims[axis] if isinstance(dims, tuple) else dims[axis]
    summed = unsorted_segment_sum(flat, flat_idx, n)  # [params.shape[axis], outer..., inner...]
    if axis:
        back = list(builtins.range(1, axis + 1)) + [0] + list(builtins.range(axis + 1, r))
        summed = transpose(summed, back)
    return summed


def _gather_rows_grad(op, grad) -> IndexedSlices:
    """d params = IndexedSlices(dy's rows, indices, params.shape): only the rows gathered (TF's sparse gradient)"""
    params, indices = op.inputs[0], op.inputs[1]
    if params._shape is None:
        raise ValueError(f"the gradient of {op.type} '{op.name}' needs params of known rank")
    dims = _shape_of(params)
    dense_shape = constant(list(dims), _dt.int32) if isinstance(dims, tuple) else dims
    rest = list(dims[1:]) if isinstance(dims, tuple) else dims[1:]
    values = reshape(grad, [-1] + rest if isinstance(rest, list) else concat([[-1], rest], 0))
    return IndexedSlices(values, reshape(indices, [-1]), dense_shape)


@register_gradient("GatherV2")
def _gather_v2_grad(op, grad):
    """d params = IndexedSlices(dy, indices) along axis 0, else unsorted_segment_sum(dy, indices) along axis"""
    from tfplus.framework import constant_value
    axis = constant_value(op.inputs[2])
    if axis is None or op.inputs[0]._shape is None:
        raise ValueError(f"the gradient of GatherV2 '{op.name}' needs a constant axis and params of known rank")
    axis = _axis(int(axis), len(op.inputs[0]._shape))
    return [_gather_rows_grad(op, grad) if axis == 0 else _gather_grad_along(op, grad, axis), None, None]


@register_gradient("Gather")
def _gather_grad(op, grad):
    """d params = IndexedSlices(dy, indices, params.shape)"""
    return [_gather_rows_grad(op, grad), None]


def _indexed_slices_to_tensor(value: IndexedSlices, dtype=None, name=None, preferred_dtype=None) -> Tensor:
    """The dense tensor of `value`: its rows summed into dense_shape[0] rows (TF's conversion)."""
    from tfplus.ops.math_ops import unsorted_segment_sum
    if dtype is not None and _dt.as_dtype(dtype) is not value.dtype:
        raise TypeError(f"IndexedSlices '{value.name}' has dtype {value.dtype.name} where "
                        f"{_dt.as_dtype(dtype).name} is required; use tf.cast")
    if value.dense_shape is None:
        raise ValueError(f"IndexedSlices '{value.name}' has no dense_shape, so it cannot be made a dense tensor")
    dims = value.shape.dims_tuple
    rows = dims[0] if dims else None
    return unsorted_segment_sum(value.values, value.indices, rows if rows is not None else value.dense_shape[0],
                                name=name)


register_tensor_conversion_function(IndexedSlices, _indexed_slices_to_tensor)


def gather(params, indices, validate_indices=None, name=None, axis=None, batch_dims=0) -> Tensor:
    """`tf.gather(p, [2, 0])`: p[[2, 0]] along `axis` (0 by default); indices out of range are an error
    on the cpu and give zeros on opencl (as TF's CPU and GPU kernels do). With batch_dims=b (axis b by default),
    each example of the first b axes takes its own entries: out[i, ..., j] = p[i, ..., indices[i, j]] (tf.batch_gather),
    built as gather_nd with each entry's batch coordinates (_batch_coords)."""
    params = convert_to_tensor(params)
    indices = _index_tensor(indices)
    if batch_dims:
        return _gather_batched(params, indices, axis, batch_dims, name)
    axis = _index_tensor(0 if axis is None else axis)
    return apply_op("GatherV2", [params, indices, axis], {"Tparams": params.dtype, "Tindices": indices.dtype,
                                                         "Taxis": axis.dtype, "batch_dims": 0}, name)


def _gather_batched(params: Tensor, indices: Tensor, axis, batch_dims: int, name) -> Tensor:
    """gather with batch_dims: params' gathered axis moved after the batch axes, gather_nd of (batch coordinates,
    index), the axes moved back."""
    rank, irank = params.shape.ndims, indices.shape.ndims
    if rank is None or irank is None:
        raise ValueError(f"tf.gather: batch_dims={batch_dims} needs the ranks of params '{params.name}' and indices "
                         f"'{indices.name}'")
    b = batch_dims % irank if batch_dims < 0 else batch_dims
    a = b if axis is None else int(axis) % rank
    if not 0 < b <= min(a, irank):
        raise ValueError(f"tf.gather: batch_dims={batch_dims} must be in [1, rank of indices {irank}] and at most "
                         f"axis {a} (params '{params.name}' of rank {rank})")
    with name_scope(name, "GatherV2"):
        front = list(builtins.range(b)) + [a] + [i for i in builtins.range(b, rank) if i != a]
        moved = transpose(params, front) if a != b else params
        out = gather_nd(moved, stack(_batch_coords(indices, b) + [indices], -1), batch_dims=0)
        n = irank - b  # the index axes, now after the batch axes: back after params' axes b..a-1
        back = list(builtins.range(b)) + [b + n + i for i in builtins.range(a - b)] + \
            [b + i for i in builtins.range(n)] + list(builtins.range(a + n, rank + n - 1))
        return transpose(out, back) if a != b else out


def _batch_coords(like: Tensor, batch_dims: int) -> list:
    """Each entry's index along each of `like`'s first batch_dims axes, as tensors of like's shape: tf.range of
    the axis laid out along the others (the first one the row index of the batch: planner.rows.own_picks)."""
    from tfplus.ops.math_ops import range as _range
    dims, rank = shape(like, out_type=like.dtype), like.shape.ndims
    out = []
    for j in builtins.range(batch_dims):
        c = _range(dims[j])
        for _ in builtins.range(j):
            c = expand_dims(c, 0)
        for _ in builtins.range(rank - j - 1):
            c = expand_dims(c, -1)
        out.append(broadcast_to(c, dims))
    return out


def gather_nd(params, indices, name=None, batch_dims=0) -> Tensor:
    """`tf.gather_nd(p, [[0, 1], [2, 0]])`: [p[0, 1], p[2, 0]]: indices' last axis (of static length k) indexes
    params' first k axes (after the first batch_dims, where each example indexes its own). Built as a GatherV2
    of params with those k axes flattened, so its gradient is the gather's (IndexedSlices of the rows taken)."""
    from tfplus.ops.math_ops import multiply, reduce_prod, reduce_sum
    with name_scope(name, "GatherNd"):
        params = convert_to_tensor(params)
        indices = _index_tensor(indices)
        k = indices.shape.as_list()[-1] if indices.shape.ndims else None
        if k is None:
            raise ValueError(f"tf.gather_nd: indices '{indices.name}' need a known last dimension (the number of "
                             f"axes of params they index), got shape {indices.shape}")
        if batch_dims:  # each entry's batch coordinates first, then its k indices
            if not 0 < batch_dims < indices.shape.ndims:
                raise ValueError(f"tf.gather_nd: batch_dims={batch_dims} must be in [1, rank of indices "
                                 f"'{indices.name}' ({indices.shape.ndims}))")
            columns = unstack(indices, k, axis=-1)
            indices, k = stack(_batch_coords(columns[0], batch_dims) + columns, -1), k + batch_dims
        dims = shape(params, out_type=indices.dtype)
        # Row-major strides of params' first k axes: index (i0, .., ik-1) is row sum(i_j * stride_j).
        strides = stack([reduce_prod(dims[j + 1:k]) for j in builtins.range(k)])
        rows = reduce_sum(multiply(indices, strides), -1)
        flat = reshape(params, concat([[-1], dims[k:]], 0))
        out = gather(flat, rows)
        if params.shape.ndims is not None:
            out.set_shape(indices.shape.as_list()[:-1] + params.shape.as_list()[k:])
        return out


# -- ShapeN --------------------------------------------------------------------------------------------------
register_op("ShapeN", inputs=("input*",), outputs=("output",), attrs={"N": "int", "T": "type", "out_type": "type"},
            shape_fn=lambda ins, attrs: [_shape_shape([s], attrs)[0] for s in ins], flops=_flops.zero,
            tags=("shape_only",))
not_differentiable("ShapeN")


def shape_n(input, out_type=_dt.int32, name=None) -> list:
    """The shapes of several tensors at once (one node)."""
    out = apply_op("ShapeN", [list(input)], {"out_type": _dt.as_dtype(out_type)}, name)
    return list(out) if isinstance(out, tuple) else [out]


# -- DynamicStitch -------------------------------------------------------------------------------------------
def _dynamic_stitch_shape(ins, attrs):
    n = attrs["N"]
    indices, data = ins[:n], ins[n:]
    check_same_dtype(data, "dynamic_stitch's data")
    for s in indices:
        if s.dtype is not _dt.int32:
            raise TypeError(f"dynamic_stitch's indices must be int32, got {s.dtype.name}")
    inner = None
    for i, d in zip(indices, data):
        if i.shape is not None and d.shape is not None:
            if d.shape[:len(i.shape)] != i.shape and None not in d.shape[:len(i.shape)] + i.shape:
                raise ValueError(f"data shape {fmt(d.shape)} must start with its indices' shape {fmt(i.shape)}")
            inner = d.shape[len(i.shape):]
    if inner is None:
        return [spec(None, data[0].dtype)]
    values = [s.value for s in indices]
    rows = None if any(v is None for v in values) else \
        builtins.max([int(np.max(v)) + 1 for v in values if np.size(v)], default=0)
    return [spec((rows,) + tuple(inner), data[0].dtype)]


# NOTE: the output's length is the largest index + 1, so the shape function reads the indices' values; they
# are the first N inputs and N varies, so value_inputs names the first 16 positions (a DynamicStitch with
# N < 16 also has some data inputs read; TF's gradient code stitches small int32 shape vectors with N = 2).
register_op("DynamicStitch", inputs=("indices*", "data*"), outputs=("merged",), attrs={"N": "int", "T": "type"},
            shape_fn=_dynamic_stitch_shape, value_inputs=tuple(builtins.range(16)), flops=_flops.zero)


@register_gradient("DynamicStitch")
def _dynamic_stitch_grad(op, grad):
    """d data_i = gather(dy, indices_i) (a slot written twice gives its gradient to the later write only in
    TF; here every writer gets it, matching TF when indices are distinct)"""
    n = op.attrs["N"]
    return [None] * n + [gather(grad, i) for i in op.inputs[:n]]


def dynamic_stitch(indices, data, name=None) -> Tensor:
    """merged[indices[m][i]] = data[m][i]: `tf.dynamic_stitch([[0, 2], [1]], [a, b])`."""
    indices = [_index_tensor(i) for i in indices]
    data = [convert_to_tensor(d) for d in data]
    n = len(indices)
    if len(data) != n:
        raise ValueError(f"tf.dynamic_stitch: {n} index tensors but {len(data)} data tensors")
    if n > 16:
        raise ValueError(f"tf.dynamic_stitch takes at most 16 index tensors, got {n}")
    return apply_op("DynamicStitch", [indices + data], {"N": n, "T": data[0].dtype}, name)


# -- Split / SplitV ------------------------------------------------------------------------------------------
def _split_sizes(x, axis_t, sizes, num):
    """(axis, [size per output] with None where unknown) or (None, None) when the axis is unknown."""
    if axis_t.value is None or x.shape is None:
        return None, None
    a = _axis(int(axis_t.value), len(x.shape), "split axis")
    d = x.shape[a]
    if sizes is None:
        if d is not None and d % num:
            raise ValueError(f"dimension {a} of shape {fmt(x.shape)} ({d}) does not divide into {num} splits")
        return a, [None if d is None else d // num] * num
    if len(sizes) != num:
        raise ValueError(f"size_splits has {len(sizes)} entries for num_split={num}")
    if sizes.count(-1) > 1:
        raise ValueError(f"size_splits {sizes}: at most one size may be -1")
    if -1 in sizes:
        rest = d - sum(s for s in sizes if s != -1) if d is not None else None
        if rest is not None and rest < 0:
            raise ValueError(f"size_splits {sizes} add up to more than dimension {a} ({d})")
        sizes = [rest if s == -1 else s for s in sizes]
    elif d is not None and sum(sizes) != d:
        raise ValueError(f"size_splits {sizes} must add up to dimension {a} of shape {fmt(x.shape)} ({d})")
    return a, sizes


def _split_specs(x, a, sizes, num):
    if a is None:
        return [spec(None if x.shape is None else (None,) * len(x.shape), x.dtype)] * num
    return [spec(x.shape[:a] + (s,) + x.shape[a + 1:], x.dtype) for s in sizes]


def _split_shape(ins, attrs):
    axis_t, x = ins
    _check_index_dtype(axis_t, "split's axis")
    a, sizes = _split_sizes(x, axis_t, None, attrs["num_split"])
    return _split_specs(x, a, sizes, attrs["num_split"])


def _split_v_shape(ins, attrs):
    x, size_splits, axis_t = ins
    _check_index_dtype(size_splits, "size_splits")
    _check_index_dtype(axis_t, "split's axis")
    sizes = _vector(size_splits, "size_splits")
    if sizes is None:
        return _split_specs(x, None, None, attrs["num_split"])
    a, sizes = _split_sizes(x, axis_t, sizes, attrs["num_split"])
    return _split_specs(x, a, sizes, attrs["num_split"])


register_op("Split", inputs=("split_dim", "value"), outputs=("output",),
            attrs={"num_split": "int", "T": "type"}, shape_fn=_split_shape, value_inputs=(0,), flops=_flops.zero)
register_rows(along(value_of(0), "splits"), "Split")
register_op("SplitV", inputs=("value", "size_splits", "split_dim"), outputs=("output",),
            attrs={"num_split": "int", "T": "type", "Tlen": "type"}, shape_fn=_split_v_shape,
            value_inputs=(1, 2), flops=_flops.zero)
register_rows(along(value_of(2), "splits"), "SplitV")


def _split_grads(op, grads, axis_t):
    """dx = concat(dy_i, axis), zeros for outputs that got no gradient"""
    parts = [zeros_like(t) if g is None else g for t, g in zip(op.outputs, grads)]
    return concat(parts, axis_t)


@register_gradient("Split")
def _split_grad(op, *grads):
    """dx = concat(dy_i, axis)"""
    return [None, _split_grads(op, grads, op.inputs[0])]


@register_gradient("SplitV")
def _split_v_grad(op, *grads):
    """dx = concat(dy_i, axis)"""
    return [_split_grads(op, grads, op.inputs[2]), None, None]


def split(value, num_or_size_splits, axis=0, num=None, name="split") -> list:
    """`a, b = tf.split(x, 2, axis=1)` (equal parts) or `tf.split(x, [3, -1], 1)` (given sizes)."""
    value = convert_to_tensor(value)
    axis = _index_tensor(axis)
    if isinstance(num_or_size_splits, (int, np.integer)):
        out = apply_op("Split", [axis, value], {"num_split": int(num_or_size_splits), "T": value.dtype}, name)
    else:
        sizes = _index_tensor(num_or_size_splits)
        if num is None:
            n = sizes._shape[0] if sizes._shape else None
            if n is None:
                raise ValueError("tf.split: size_splits of unknown length; pass num")
            num = n
        out = apply_op("SplitV", [value, sizes, axis], {"num_split": int(num), "T": value.dtype,
                                                        "Tlen": sizes.dtype}, name)
    return list(out) if isinstance(out, tuple) else [out]


# -- IdentityN / Snapshot / PreventGradient ------------------------------------------------------------------
register_op("IdentityN", inputs=("input*",), outputs=("output",), attrs={"T": "list(type)"},
            shape_fn=lambda ins, attrs: [spec(s.shape, s.dtype) for s in ins], flops=_flops.zero)
register_rows(keeps, "IdentityN")


@register_gradient("IdentityN")
def _identity_n_grad(op, *grads):
    """dx_i = dy_i"""
    return list(grads)


def identity_n(input, name=None) -> list:
    """Several tensors passed through one node (each output a copy of its input)."""
    tensors = [convert_to_tensor(t) for t in input]
    op = get_default_graph().create_op("IdentityN", tensors, {"T": [t.dtype for t in tensors]},
                                       name or "IdentityN")
    return list(op.outputs)


register_op("Snapshot", inputs=("input",), outputs=("output",), attrs={"T": "type"}, shape_fn=same_as_input(0),
            flops=_flops.zero)
register_rows(keeps, "Snapshot")


@register_gradient("Snapshot")
def _snapshot_grad(op, grad):
    """dx = dy"""
    return [grad]


def snapshot(input, name=None) -> Tensor:
    """A copy of `input` taken now (later in-place updates of a variable do not change it)."""
    return apply_op("Snapshot", [convert_to_tensor(input)], name=name)


register_op("PreventGradient", inputs=("input",), outputs=("output",), attrs={"T": "type", "message": "string"},
            shape_fn=same_as_input(0), aliases={0: 0}, flops=_flops.zero)
register_rows(keeps, "PreventGradient")


@register_gradient("PreventGradient")
def _prevent_gradient_grad(op, grad):
    """no gradient: asking for one is an error"""
    raise LookupError(f"Gradient explicitly disabled for PreventGradient '{op.name}'. Reason: "
                      f"{op.attrs.get('message', '')}")


def prevent_gradient(input, message="", name=None) -> Tensor:
    """The same value; tf.gradients through it raises with `message`."""
    return apply_op("PreventGradient", [convert_to_tensor(input)], {"message": str(message)}, name)


def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True, max_norm=None):
    """`tf.nn.embedding_lookup(table, ids)`: rows of `table` for `ids`. A table split in a list of partitions is
    read as TF reads it: id i lives in partition i % n at row i // n ("mod"), or in contiguous blocks, the first
    (total % n) partitions one row longer ("div"). `max_norm` clips each row found to that L2 norm."""
    from tfplus.ops import math_ops
    if not isinstance(params, (list, tuple)):
        params = [params]
    if len(params) == 1 and max_norm is None:
        return gather(params[0], ids, name=name or "embedding_lookup")  # one node, named as TF names it
    with name_scope(name, "embedding_lookup"):
        params = [convert_to_tensor(p) for p in params]
        ids = convert_to_tensor(ids)
        if len(params) == 1:
            out = gather(params[0], ids)
        else:
            sizes = [p.shape.as_list()[0] if p.shape.ndims else None for p in params]
            if None in sizes:
                raise ValueError(f"tf.nn.embedding_lookup: partition sizes {sizes} must be known along axis 0 "
                                 "(set_shape on the partitions)")
            if partition_strategy not in ("mod", "div"):
                raise ValueError(f"tf.nn.embedding_lookup: partition_strategy {partition_strategy!r} is not 'mod' "
                                 "or 'div'")
            n, offsets = len(params), np.cumsum([0] + sizes[:-1])
            if partition_strategy == "mod":
                part, row = ids % n, ids // n
            else:
                per, extras = sum(sizes) // n, sum(sizes) % n
                part = math_ops.maximum(ids // (per + 1), (ids - extras) // per)
                first = math_ops.cast(part < extras, ids.dtype)
                row = first * (ids % (per + 1)) + (1 - first) * ((ids - extras) % per)
            start = gather(constant(offsets.astype(ids.dtype.np)), part)
            out = gather(concat(params, 0), start + row)
        if max_norm is not None:
            from tfplus.nn_impl import clip_by_norm
            axes = list(range(ids.shape.ndims, out.shape.ndims)) if ids.shape.ndims is not None else [-1]
            out = clip_by_norm(out, max_norm, axes=axes)
        return out
