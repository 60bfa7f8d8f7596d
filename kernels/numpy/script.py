"""PyFunc on every device: the Python function runs on the host, on the inputs' NumPy values."""
from __future__ import annotations

import numpy as np

from tfplus import errors
from tfplus.registry import PY_FUNCS, register_kernel


def py_func_kernel(ctx, ins, outs, attrs):
    rt = ctx.runtime
    values = [np.asarray(rt.copy_out(b)) for b in ins]
    try:
        result = PY_FUNCS[attrs["token"]](*values)
    except StopIteration:  # a generator's end (tf.data's iterators): TF1's end of input
        raise errors.OutOfRangeError(None, None, "End of sequence") from None
    if len(attrs["Tout"]) == 1 and not isinstance(result, (list, tuple)):
        result = [result]
    result = list(result) if result is not None else []
    if len(result) != len(attrs["Tout"]):
        raise ValueError(f"the Python function returned {len(result)} values; Tout lists {len(attrs['Tout'])}")
    arrays = []
    for k, (value, dtype) in enumerate(zip(result, attrs["Tout"])):
        a = np.asarray(value)
        if dtype.name != "string" and a.dtype.kind in "SUO":
            raise TypeError(f"result {k} of the Python function is {a.dtype}, Tout says {dtype.name}")
        arrays.append(rt.copy_in(np.array(a, dtype=dtype.np, order="C")))
    outs[:] = arrays


register_kernel("PyFunc", "cpu")(py_func_kernel)
