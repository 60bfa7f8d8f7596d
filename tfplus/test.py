"""tf.test (TF1): users' unit tests of their graphs, run by unittest or pytest.

    class MyTest(tf.test.TestCase):
        def test_square(self):
            with self.cached_session() as sess:
                self.assertAllClose(sess.run(tf.square([2.0])), [4.0])

    if __name__ == "__main__":
        tf.test.main()

Each test runs in a fresh default graph; session()/cached_session()/test_session() give a Session on it (the
cached one is reused within a test and closed after it); evaluate() runs tensors in the default session.
tfplus has no CUDA build: is_gpu_available() is False and gpu_device_name() is ''.
"""
from __future__ import annotations

import contextlib
import math
import re
import shutil
import sys
import tempfile
import unittest
from unittest import mock  # noqa: F401 (tf.test.mock)

import numpy as np

from tfplus import errors
from tfplus.engine.session import Session
from tfplus.framework import Graph, get_default_graph, get_default_session

__all__ = ["TestCase", "main", "get_temp_dir", "is_gpu_available", "gpu_device_name", "is_built_with_cuda",
           "is_built_with_gpu_support", "compute_gradient", "compute_gradient_error", "mock", "Benchmark",
           "assert_equal_graph_def"]

_TEMP_DIR: list[str] = []


def get_temp_dir() -> str:
    """A temporary folder for this process's tests (removed at exit by the OS's temp cleaning, as TF1's)."""
    if not _TEMP_DIR:
        _TEMP_DIR.append(tempfile.mkdtemp(prefix="tfplus_test_"))
    return _TEMP_DIR[0]


def is_gpu_available(cuda_only: bool = False, min_cuda_compute_capability=None) -> bool:
    return False


def gpu_device_name() -> str:
    return ""


def is_built_with_cuda() -> bool:
    return False


def is_built_with_gpu_support() -> bool:
    return False


def main(argv=None):
    """Runs the tests of the __main__ module (TF1's tf.test.main; exits with their status)."""
    return unittest.main(module="__main__", argv=argv)


class TestCase(unittest.TestCase):
    """TF1's tf.test.TestCase in graph mode: sessions on a fresh default graph per test, and the assertions
    users' tests call (assertAllClose, assertAllEqual, assertRaisesOpError, ...)."""

    def setUp(self):
        super().setUp()
        self._graph_scope = Graph().as_default()
        self._graph_scope.__enter__()
        self._cached = None
        self._temp_dir = None
        np.random.seed(87654321)

    def tearDown(self):
        if self._cached is not None:
            self._cached[1].close()
        self._graph_scope.__exit__(None, None, None)
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
        super().tearDown()

    def get_temp_dir(self) -> str:
        """A folder of this test's own (removed after it)."""
        if self._temp_dir is None:
            self._temp_dir = tempfile.mkdtemp(dir=get_temp_dir())
        return self._temp_dir

    # -- sessions ----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """A new Session on `graph` (the default graph), the default session inside the block."""
        if force_gpu:
            raise errors.InvalidArgumentError(None, None, "force_gpu=True: tfplus has no GPU device; run the "
                                              "test on the default device")
        with Session(graph=graph or get_default_graph(), config=config) as sess, sess.as_default():
            yield sess

    @contextlib.contextmanager
    def cached_session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """The test's Session on `graph` (the default graph), made at the first call and reused after."""
        graph = graph or get_default_graph()
        if self._cached is None or self._cached[0] is not graph:
            if self._cached is not None:
                self._cached[1].close()
            self._cached = (graph, Session(graph=graph, config=config))
        with self._cached[1].as_default():
            yield self._cached[1]

    test_session = cached_session  # TF1's older name

    def evaluate(self, tensors):
        """The values of `tensors` (any nesting) in the default session, or in the test's cached session."""
        sess = get_default_session()
        if sess is not None:
            return sess.run(tensors)
        with self.cached_session() as sess:
            return sess.run(tensors)

    # -- assertions --------------------------------------------------------------------------------------------
    def _values(self, a):
        return self.evaluate(a) if hasattr(a, "op") or hasattr(a, "_as_tensor") else a

    def assertAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):  # noqa: N802 (TF's names)
        """Equal shapes and values to within atol + rtol * |b|, through nested lists, tuples and dicts."""
        a, b = self._values(a), self._values(b)
        if isinstance(a, dict) or isinstance(b, dict):
            self.assertEqual(sorted(a), sorted(b), msg)
            for k in a:
                self.assertAllClose(a[k], b[k], rtol, atol, f"{msg or ''} [{k!r}]")
            return
        if isinstance(a, (list, tuple)) and any(isinstance(x, (dict, list, tuple, np.ndarray)) for x in a) \
                and not _regular(a):
            self.assertEqual(len(a), len(b), msg)
            for i, (x, y) in enumerate(zip(a, b)):
                self.assertAllClose(x, y, rtol, atol, f"{msg or ''} [{i}]")
            return
        x, y = np.asarray(a), np.asarray(b)
        self.assertEqual(x.shape, y.shape, f"{msg or ''} shapes differ: {x.shape} vs {y.shape}")
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=msg or "", equal_nan=True)

    def assertAllCloseAccordingToType(self, a, b, rtol=1e-6, atol=1e-6, float_rtol=1e-6,  # noqa: N802
                                      float_atol=1e-6, half_rtol=1e-3, half_atol=1e-3, msg=None):
        a, b = np.asarray(self._values(a)), np.asarray(self._values(b))
        if np.float16 in (a.dtype, b.dtype):
            rtol, atol = max(rtol, half_rtol), max(atol, half_atol)
        elif np.float32 in (a.dtype, b.dtype):
            rtol, atol = max(rtol, float_rtol), max(atol, float_atol)
        self.assertAllClose(a, b, rtol, atol, msg)

    def assertNotAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):  # noqa: N802
        try:
            self.assertAllClose(a, b, rtol, atol, msg)
        except AssertionError:
            return
        raise AssertionError(msg or "The two values are close at all elements")

    def assertAllEqual(self, a, b, msg=None):  # noqa: N802
        x, y = np.asarray(self._values(a)), np.asarray(self._values(b))
        self.assertEqual(x.shape, y.shape, f"{msg or ''} shapes differ: {x.shape} vs {y.shape}")
        np.testing.assert_array_equal(x, y, err_msg=msg or "")

    def assertNotAllEqual(self, a, b, msg=None):  # noqa: N802
        x, y = np.asarray(self._values(a)), np.asarray(self._values(b))
        self.assertTrue(x.shape != y.shape or not np.array_equal(x, y), msg or "the two values are equal")

    def assertAllGreater(self, a, comparison_target):  # noqa: N802
        self.assertGreater(np.min(self._values(a)), comparison_target)

    def assertAllGreaterEqual(self, a, comparison_target):  # noqa: N802
        self.assertGreaterEqual(np.min(self._values(a)), comparison_target)

    def assertAllLess(self, a, comparison_target):  # noqa: N802
        self.assertLess(np.max(self._values(a)), comparison_target)

    def assertAllLessEqual(self, a, comparison_target):  # noqa: N802
        self.assertLessEqual(np.max(self._values(a)), comparison_target)

    def assertAllInRange(self, target, lower_bound, upper_bound, open_lower_bound=False,  # noqa: N802
                         open_upper_bound=False):
        t = np.asarray(self._values(target))
        low = t > lower_bound if open_lower_bound else t >= lower_bound
        high = t < upper_bound if open_upper_bound else t <= upper_bound
        self.assertTrue(np.all(low & high), f"{t} is not all in the range [{lower_bound}, {upper_bound}]")

    def assertAllInSet(self, target, expected_set):  # noqa: N802
        values = set(np.asarray(self._values(target)).ravel().tolist())
        self.assertTrue(values <= set(expected_set), f"{sorted(values - set(expected_set))} not in {expected_set}")

    def assertNear(self, f1, f2, err, msg=None):  # noqa: N802
        self.assertTrue(f1 == f2 or math.fabs(f1 - f2) <= err, f"{f1} != {f2} +/- {err}{' : ' + msg if msg else ''}")

    def assertArrayNear(self, farray1, farray2, err, msg=None):  # noqa: N802
        self.assertEqual(len(farray1), len(farray2), msg)
        for f1, f2 in zip(farray1, farray2):
            self.assertNear(float(f1), float(f2), err, msg)

    def assertShapeEqual(self, np_array, tf_tensor, msg=None):  # noqa: N802
        """The NumPy array's shape is the tensor's static shape."""
        if not hasattr(tf_tensor, "get_shape") or not hasattr(tf_tensor, "op") or hasattr(tf_tensor, "initializer"):
            raise TypeError(f"input_b must be a Numpy ndarray, Numpy scalar, or a Tensor. Instead received "
                            f"{type(tf_tensor)}")
        self.assertEqual(list(np.shape(np_array)), tf_tensor.get_shape().as_list(), msg)

    def assertDTypeEqual(self, target, expected_dtype):  # noqa: N802
        self.assertEqual(np.asarray(self._values(target)).dtype, np.dtype(expected_dtype))

    def assertDeviceEqual(self, device1, device2, msg=None):  # noqa: N802
        from tfplus.device_spec import canonical
        self.assertEqual(canonical(device1 or ""), canonical(device2 or ""), msg)

    def assertStartsWith(self, actual, expected_start, msg=None):  # noqa: N802
        self.assertTrue(actual.startswith(expected_start), msg or f"{actual!r} does not start with "
                        f"{expected_start!r}")

    def assertProtoEquals(self, expected_message_maybe_ascii, message, msg=None):  # noqa: N802
        from google.protobuf import text_format
        expected = expected_message_maybe_ascii
        if isinstance(expected, str):
            expected = text_format.Parse(expected, type(message)())
        self.assertEqual(text_format.MessageToString(expected), text_format.MessageToString(message), msg)

    @contextlib.contextmanager
    def assertRaisesWithPredicateMatch(self, exception_type, expected_err_re_or_predicate):  # noqa: N802
        """The block raises `exception_type` whose message matches the regular expression (re.search), or for
        which the predicate is true."""
        if callable(expected_err_re_or_predicate):
            predicate = expected_err_re_or_predicate
        else:
            def predicate(e):
                return re.search(expected_err_re_or_predicate, str(getattr(e, "message", e))) is not None
        try:
            yield
        except exception_type as e:
            if not predicate(e):
                raise AssertionError(f"Exception of type {type(e).__name__}: {e} does not match "
                                     f"{expected_err_re_or_predicate!r}") from e
        else:
            raise AssertionError(f"{exception_type.__name__} not raised")

    def assertRaisesOpError(self, expected_err_re_or_predicate):  # noqa: N802
        return self.assertRaisesWithPredicateMatch(errors.OpError, expected_err_re_or_predicate)

    assertItemsEqual = unittest.TestCase.assertCountEqual  # noqa: N815 (TF's name)


def _regular(values) -> bool:
    """Whether a nested list makes one NumPy array (not a ragged structure to compare part by part)."""
    try:
        return np.asarray(values).dtype != object
    except ValueError:
        return False


def compute_gradient(x, x_shape, y, y_shape, x_init_value=None, delta=1e-3, init_targets=None,
                     extra_feed_dict=None):
    """tf.test.compute_gradient: (theoretical, numerical) Jacobians of y by x, each of shape (x size, y size),
    from tf.gradients and from central differences of step `delta`, in the default session. Lists of x give
    lists of pairs."""
    from tfplus.gradients import gradients
    from tfplus.ops.array_ops import placeholder
    if isinstance(x, (list, tuple)):
        inits = x_init_value or [None] * len(x)
        return [compute_gradient(xi, si, y, y_shape, v, delta, init_targets, extra_feed_dict)
                for xi, si, v in zip(x, x_shape, inits)]
    sess = get_default_session()
    if sess is None:
        raise ValueError("compute_gradient needs a default session: call it inside `with self.cached_session():`")
    if init_targets is not None:
        sess.run(init_targets)
    feeds = dict(extra_feed_dict or {})
    dtype = x.dtype.as_numpy_dtype
    value = np.asarray(x_init_value if x_init_value is not None else
                       np.random.random_sample(x_shape), dtype).reshape(x_shape)
    x_size, y_size = int(np.prod(x_shape)), int(np.prod(y_shape))
    dy = placeholder(y.dtype, y_shape)
    grad = gradients(y, x, grad_ys=dy)[0]
    theoretical = np.zeros((x_size, y_size), dtype)
    for j in range(y_size):
        seed = np.zeros(y_size, y.dtype.as_numpy_dtype)
        seed[j] = 1
        if grad is not None:
            g = sess.run(grad, {**feeds, x: value, dy: seed.reshape(y_shape)})
            theoretical[:, j] = np.asarray(g).ravel()
    numerical = np.zeros((x_size, y_size), dtype)
    for i in range(x_size):
        flat = value.ravel().copy()
        flat[i] += delta
        up = sess.run(y, {**feeds, x: flat.reshape(x_shape)})
        flat[i] -= 2 * delta
        down = sess.run(y, {**feeds, x: flat.reshape(x_shape)})
        numerical[i] = (np.asarray(up, np.float64) - np.asarray(down, np.float64)).ravel() / (2 * delta)
    return theoretical, numerical


def compute_gradient_error(x, x_shape, y, y_shape, x_init_value=None, delta=1e-3, init_targets=None,
                           extra_feed_dict=None) -> float:
    """tf.test.compute_gradient_error: the largest difference between the two Jacobians of compute_gradient."""
    pairs = compute_gradient(x, x_shape, y, y_shape, x_init_value, delta, init_targets, extra_feed_dict)
    pairs = pairs if isinstance(pairs, list) else [pairs]
    return max(float(np.max(np.abs(t - n))) if t.size else 0.0 for t, n in pairs)


def assert_equal_graph_def(actual, expected, checkpoint_v2=False, hash_table_shared_name=False) -> None:
    """tf.test.assert_equal_graph_def: the same nodes (by name, in any order) with the same op, inputs, device and
    attrs; AssertionError naming the first difference."""
    from google.protobuf import text_format
    mine, theirs = {n.name: n for n in actual.node}, {n.name: n for n in expected.node}
    if sorted(mine) != sorted(theirs):
        raise AssertionError(f"GraphDefs differ in their nodes: only in actual {sorted(set(mine) - set(theirs))}, "
                             f"only in expected {sorted(set(theirs) - set(mine))}")
    for name in sorted(mine):
        if mine[name] != theirs[name]:
            raise AssertionError(f"GraphDefs differ at node {name!r}:\nactual:\n"
                                 f"{text_format.MessageToString(mine[name])}expected:\n"
                                 f"{text_format.MessageToString(theirs[name])}")


class Benchmark:
    """TF1's tf.test.Benchmark: subclasses time code in benchmark* methods and report_benchmark() their figures,
    printed as TF's BenchmarkEntries text ("Class.name" by default "Class.method")."""

    def report_benchmark(self, iters=None, cpu_time=None, wall_time=None, throughput=None, extras=None,
                         name=None, metrics=None) -> None:
        if name is None:
            frame = sys._getframe(1)
            while frame is not None and not frame.f_code.co_name.startswith("benchmark"):
                frame = frame.f_back
            name = frame.f_code.co_name if frame is not None else "benchmark"
        lines = [f'  name: "{type(self).__name__}.{name}"']
        for key, value in (("iters", iters), ("cpu_time", cpu_time), ("wall_time", wall_time),
                           ("throughput", throughput)):
            if value is not None:
                lines.append(f"  {key}: {int(value) if key == 'iters' else _number(value)}")
        for key, value in sorted((extras or {}).items()):
            kind, text = ("double_value", _number(value)) if isinstance(value, (int, float)) else \
                ("string_value", f'"{value}"')
            lines += ["  extras {", f'    key: "{key}"', "    value {", f"      {kind}: {text}", "    }", "  }"]
        for metric in metrics or ():
            lines += ["  metrics {", f'    name: "{metric["name"]}"', f"    value: {_number(metric['value'])}", "  }"]
        print("entry {\n" + "\n".join(lines) + "\n}\n")


def _number(value) -> str:
    """A double as protobuf's text format writes it (2.0 as 2)."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)
