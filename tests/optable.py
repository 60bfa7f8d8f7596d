"""The op table: one `Case` per op configuration drives forward checks against a NumPy reference on every
device and float64 finite-difference gradient checks on the cpu.

    # tests/cases_<family>.py
    import numpy as np
    import tfplus as tf
    from optable import Case
    CASES = [Case("relu", lambda x: tf.nn.relu(x), inputs=[(3, 4)], ref=lambda x: np.maximum(x, 0))]

test_op_table.py collects `CASES` from every tests/cases_*.py module.
"""
from __future__ import annotations

import importlib
import pathlib
import zlib
from typing import Callable, Sequence

import numpy as np

import tfplus as tf

# Forward tolerances by output dtype. float64 stays tight: kernel and reference differ only in rounding order.
DEFAULT_TOL = {"float16": (1e-3, 1e-3), "float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}
FD_EPS = 1e-6  # central differences in float64: truncation ~eps^2, rounding ~1e-16/eps
FD_RTOL, FD_ATOL = 1e-5, 1e-7


class Case:
    """One op configuration of the table.

    inputs: shapes (random normal floats, ints in [-5, 5], or random bools, in the test dtype) or callables
        `rng, np_dtype -> np.ndarray` (integer indices, positive values, distinct values); an array's own
        dtype becomes its placeholder's dtype.
    build(*tensors): builds the op(s) from the placeholders; returns a tensor or a tuple of tensors.
    ref(*arrays): the NumPy reference; an array or a tuple matching build's outputs.
    grad: True checks the gradient of every floating input, a list checks those input indices, False none.
    dtypes: the dtypes the forward check runs in; the gradient check needs "float64".
    rtol, atol: a number overrides the forward tolerance of every dtype but float64; a dict {dtype name: tol}
        overrides per dtype.
    make: `rng, np_dtype -> [arrays]`, for inputs that depend on each other (it replaces `inputs`).
    static_shapes: False feeds placeholders of unknown dims (shape [None] * rank), exercising the shape
        functions' partial-shape paths and the run-time shapes.
    """

    def __init__(self, name: str, build: Callable, inputs: Sequence = (), ref: Callable | None = None,
                 grad=True, dtypes=("float32", "float64"), rtol=None, atol=None, make: Callable | None = None,
                 static_shapes: bool = True):
        if ref is None:
            raise ValueError(f"Case {name!r}: ref (the NumPy reference) is required")
        if grad and "float64" not in dtypes:
            raise ValueError(f"Case {name!r}: the gradient check runs in float64, which is not in dtypes "
                             f"{tuple(dtypes)}; add it or pass grad=False")
        self.name, self.build, self.inputs, self.ref = name, build, list(inputs), ref
        self.grad, self.dtypes, self.rtol, self.atol = grad, tuple(dtypes), rtol, atol
        self.make, self.static_shapes = make, static_shapes
        self.seed = zlib.crc32(name.encode())

    def __repr__(self) -> str:
        return f"Case({self.name!r})"

    # -- inputs and graph ------------------------------------------------------------------------------------
    def arrays(self, dtype) -> list[np.ndarray]:
        """The input arrays for one dtype; the same every call."""
        np_dtype = tf.as_dtype(dtype).np
        rng = np.random.default_rng(self.seed)
        if self.make is not None:
            return [np.asarray(a) for a in self.make(rng, np_dtype)]
        return [np.asarray(spec(rng, np_dtype)) if callable(spec) else _random(rng, tuple(spec), np_dtype)
                for spec in self.inputs]

    def build_graph(self, dtype, arrays=None):
        """Placeholders for the inputs and the case's outputs, in the default graph.
        Returns (placeholders, outputs (a list), arrays)."""
        arrays = self.arrays(dtype) if arrays is None else arrays
        phs = [tf.placeholder(tf.as_dtype(a.dtype), a.shape if self.static_shapes else [None] * a.ndim,
                              name=f"input{i}") for i, a in enumerate(arrays)]
        outs = self.build(*phs)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        return phs, outs, arrays

    def tolerance(self, dtype_name: str) -> tuple[float, float]:
        rtol, atol = DEFAULT_TOL.get(dtype_name, (0.0, 0.0))
        return _override(self.rtol, dtype_name, rtol), _override(self.atol, dtype_name, atol)

    def grad_inputs(self, arrays) -> list[int]:
        if not self.grad:
            return []
        idx = range(len(arrays)) if self.grad is True else self.grad
        return [i for i in idx if arrays[i].dtype.kind == "f"]


def _override(value, dtype_name, default):
    if value is None:
        return default
    if isinstance(value, dict):
        return value.get(dtype_name, default)
    return default if dtype_name == "float64" else value


def _random(rng, shape, np_dtype) -> np.ndarray:
    if np_dtype.kind == "f":
        return rng.standard_normal(shape).astype(np_dtype)
    if np_dtype.kind in "iu":
        return rng.integers(-5, 6, shape).astype(np_dtype)
    if np_dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise TypeError(f"no random inputs for dtype {np_dtype}")


# -- checks --------------------------------------------------------------------------------------------------
def check_forward(case: Case, dtype: str, device: str) -> None:
    """Runs the case on `device` and compares every output with the NumPy reference."""
    g = tf.Graph()
    with g.as_default():
        phs, outs, arrays = case.build_graph(dtype)
    expected = case.ref(*[a.copy() for a in arrays])
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    assert len(expected) == len(outs), f"{case.name}: ref gives {len(expected)} outputs, build {len(outs)}"
    with tf.Session(graph=g, device=device) as sess:
        got = sess.run(outs, dict(zip(phs, arrays)))
    for k, (t, value, want) in enumerate(zip(outs, got, expected)):
        want = np.asarray(want)
        what = f"{case.name}[{dtype}, {device}] output {k} ({t.op.type} '{t.op.name}')"
        assert value.dtype == t.dtype.np, f"{what}: kernel gave {value.dtype}, graph says {t.dtype.name}"
        assert t.shape.is_compatible_with(value.shape), \
            f"{what}: run-time shape {value.shape} vs static shape {t.shape}"
        assert value.shape == want.shape, f"{what}: shape {value.shape}, reference {want.shape}"
        if value.dtype.kind == "f":
            rtol, atol = case.tolerance(value.dtype.name)
            np.testing.assert_allclose(value, want, rtol=rtol, atol=atol, err_msg=what)
        else:
            np.testing.assert_array_equal(value, want.astype(value.dtype), err_msg=what)


def check_gradient(case: Case) -> None:
    """d sum(w * outputs) / d inputs from tf.gradients vs float64 central differences, on the cpu."""
    g = tf.Graph()
    with g.as_default():
        phs, outs, arrays = case.build_graph("float64")
        which = case.grad_inputs(arrays)
        assert which, f"{case.name}: grad is set but no input is floating point"
        feeds = dict(zip(phs, arrays))
        with tf.Session(graph=g) as sess:
            values = sess.run(outs, feeds)
            rng = np.random.default_rng(case.seed + 1)
            terms = [tf.reduce_sum(t * tf.constant(rng.standard_normal(v.shape), dtype=t.dtype))
                     for t, v in zip(outs, values) if t.dtype.is_floating]
            assert terms, f"{case.name}: grad is set but no output is floating point"
            loss = terms[0] if len(terms) == 1 else tf.add_n(terms)
            grads = tf.gradients(loss, [phs[i] for i in which])
            # A gather's params get an IndexedSlices: made dense, to compare with the differences.
            analytic = sess.run([tf.convert_to_tensor(gr) for gr in grads if gr is not None], feeds)
            analytic_iter = iter(analytic)
            for i, gr in zip(which, grads):
                got = np.zeros_like(arrays[i]) if gr is None else next(analytic_iter)
                assert got.shape == arrays[i].shape, \
                    f"{case.name}: gradient of input {i} has shape {got.shape}, input {arrays[i].shape}"
                want, scale = _numeric_grad(sess, loss, feeds, phs[i], arrays[i])
                np.testing.assert_allclose(got, want, rtol=FD_RTOL, atol=FD_ATOL * scale,
                                           err_msg=f"{case.name}: gradient of input {i}")


def _numeric_grad(sess, loss, feeds, ph, array):
    x = array.copy()
    feeds = dict(feeds)
    feeds[ph] = x
    flat = x.reshape(-1)
    out = np.empty(flat.size)
    for j in range(flat.size):
        orig = flat[j]
        flat[j] = orig + FD_EPS
        plus = sess.run(loss, feeds)
        flat[j] = orig - FD_EPS
        minus = sess.run(loss, feeds)
        flat[j] = orig
        out[j] = (plus - minus) / (2 * FD_EPS)
    base = abs(float(sess.run(loss, feeds)))
    # Rounding in the loss (~1e-16 |loss|) becomes ~1e-10 |loss| in a difference quotient: scale atol with it.
    return out.reshape(array.shape), max(1.0, base, float(np.abs(out).max(initial=0.0)))


def all_cases() -> list[Case]:
    """CASES of every tests/cases_*.py module, in file order; case names must be unique."""
    cases: list[Case] = []
    where: dict[str, str] = {}
    for path in sorted(pathlib.Path(__file__).parent.glob("cases_*.py")):
        module = importlib.import_module(path.stem)  # tests/ is on sys.path (pytest's rootdir insertion)
        for case in module.CASES:
            if case.name in where:
                raise ValueError(f"op-table case {case.name!r} defined in {where[case.name]} and {path.name}")
            where[case.name] = path.name
            cases.append(case)
    return cases

