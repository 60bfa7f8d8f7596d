"""Host ops on every device: PyFunc (the Python function runs on the host, on the inputs' NumPy values), Print
and CheckNumerics (their input passed through, looked at on the host)."""
from __future__ import annotations

import sys

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
        # NOTE: strings straight to objects: NumPy's bytes dtype (np.asarray(b"a\0")) drops trailing NUL bytes
        a = np.array(value, dtype=object) if dtype.name == "string" else np.asarray(value)
        if dtype.name != "string" and a.dtype.kind in "SUO":
            raise TypeError(f"result {k} of the Python function is {a.dtype}, Tout says {dtype.name}")
        arrays.append(rt.copy_in(np.array(a, dtype=dtype.np, order="C")))
    outs[:] = arrays


register_kernel("PyFunc", "cpu")(py_func_kernel)


def print_kernel(ctx, ins, outs, attrs):
    rt = ctx.runtime
    value = np.asarray(rt.copy_out(ins[0]))
    counts = ctx.op.__dict__.setdefault("_printed", [0])  # runs printed so far (first_n)
    if attrs["first_n"] < 0 or counts[0] < attrs["first_n"]:
        counts[0] += 1
        n = attrs["summarize"]
        shown = "".join(np.array2string(np.asarray(rt.copy_out(d)).reshape(-1)[:n] if n >= 0 else
                                        np.asarray(rt.copy_out(d)), separator=" ") for d in ins[1:])
        print(attrs["message"] + shown, file=sys.stderr)
    outs[:] = [rt.copy_in(value.copy())]


def check_numerics_kernel(ctx, ins, outs, attrs):
    rt = ctx.runtime
    value = np.asarray(rt.copy_out(ins[0]))
    bad = [what for what, found in (("NaN", np.isnan(value).any()), ("Inf", np.isinf(value).any())) if found]
    if bad:
        raise errors.InvalidArgumentError(None, None, f"{attrs['message']} : Tensor had {' and '.join(bad)} "
                                          "values")
    outs[:] = [rt.copy_in(value.copy())]


register_kernel("Print", "cpu")(print_kernel)
register_kernel("CheckNumerics", "cpu")(check_numerics_kernel)
