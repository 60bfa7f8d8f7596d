"""Host callbacks: tf.py_func / tf.numpy_function (op PyFunc) call a Python function on the inputs' NumPy values
during the run. tf.data's iterators (tfplus.data.dataset_ops) are PyFuncs too: get_next() is a call that returns
the next element, or raises tf.errors.OutOfRangeError at the end."""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import Operation, convert_to_tensor, get_default_graph
from tfplus.registry import not_differentiable, register_op, register_py_func
from tfplus.tensor_shape import spec

__all__ = ["py_func", "numpy_function"]


def _py_func_shape(ins, attrs):
    shapes = attrs.get("output_shapes") or [None] * len(attrs["Tout"])
    return [spec(s, t) for s, t in zip(shapes, attrs["Tout"])]


# Its outputs' shapes are known once the function has returned: the kernel makes them (allocates_outputs).
register_op("PyFunc", inputs=("input*",), outputs=("output",),
            attrs={"token": "string", "Tin": "list(type)", "Tout": "list(type)", "output_shapes": "list(shape)"},
            shape_fn=_py_func_shape, stateful=True, allocates_outputs=True, flops=_flops.zero)
not_differentiable("PyFunc")


def call_py_func(func, inputs, Tout, output_shapes=None, name="PyFunc") -> Operation:  # noqa: N803
    """The PyFunc op calling `func(*values of inputs)`, whose results are converted to the dtypes `Tout`
    (`output_shapes`: their static shapes, None entries for unknown)."""
    inputs = [convert_to_tensor(t) for t in inputs]
    attrs = {"token": register_py_func(func), "Tin": [t.dtype for t in inputs],
             "Tout": [_dt.as_dtype(t) for t in Tout]}
    if output_shapes is not None:
        attrs["output_shapes"] = [None if s is None else tuple(s) for s in output_shapes]
    return get_default_graph().create_op("PyFunc", inputs, attrs, name)


def py_func(func, inp, Tout, stateful=True, name=None):  # noqa: N803
    """`tf.py_func(lambda a: np.sort(a), [x], tf.float32)`: `func` runs on the host, on the NumPy values of `inp`,
    each time the op runs; it returns one array (Tout a dtype) or a list of them (Tout a list). Not
    differentiable; the results' shapes are unknown until it runs.

        >>> import tfplus as tf, numpy as np
        >>> y = tf.py_func(lambda a: (a * 2).astype(np.float32), [tf.constant([1.0])], tf.float32)
    """
    single = not isinstance(Tout, (list, tuple))
    op = call_py_func(func, inp, [Tout] if single else list(Tout), name=name or "PyFunc")
    return op.outputs[0] if single else list(op.outputs)


numpy_function = py_func
