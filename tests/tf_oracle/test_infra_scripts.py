"""TF1 scaffolding scripts (tests/infra_scripts.py: tf.test.TestCase, profiler and traces, Supervisor and
monitored sessions, devices and towers, checkpoint utilities, graph plumbing, tf.app/flags/logging/gfile) run with
`import tfplus as tf` as they run with TensorFlow's tf.compat.v1: the same printed lines, the same returned values,
the same files written."""
import contextlib
import io
import subprocess
import sys

import numpy as np
import pytest
from infra_scripts import SCRIPTS
from io_scripts import run_script, same

import tfplus


def _run(lib, script, folder):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = run_script(lib, script, folder)
    return out.getvalue(), result


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.__name__)
def test_script_runs_as_in_tensorflow(tf1, script, tmp_path):
    (tmp_path / "tf").mkdir()
    (tmp_path / "tfplus").mkdir()
    printed, result = _run(tf1, script, str(tmp_path / "tf"))
    got_printed, got = _run(tfplus, script, str(tmp_path / "tfplus"))
    assert printed, "the script printed nothing under TensorFlow"
    assert got_printed == printed
    same(result, got, script.__name__)


# -- single behaviours -----------------------------------------------------------------------------------------
def test_is_variable_initialized_on_every_device(device):
    """IsVariableInitialized reads no value: False before the initializer on every device, True after; the report
    names exactly the variables not yet initialized."""
    with tfplus.Graph().as_default():
        a = tfplus.Variable([1.0, 2.0], name="a")
        tfplus.get_variable("s/b", [3], initializer=tfplus.zeros_initializer())
        flag, report = tfplus.is_variable_initialized(a), tfplus.report_uninitialized_variables()
        with tfplus.Session(device=device) as sess:
            value = sess.run(flag)
            assert value.dtype == np.bool_ and value.shape == () and not value
            assert sess.run(report).tolist() == [b"a", b"s/b"]
            sess.run(a.initializer)
            assert bool(sess.run(flag)) and sess.run(report).tolist() == [b"s/b"]
            with pytest.raises(tfplus.errors.FailedPreconditionError, match="s/b"):
                sess.run(tfplus.assert_variables_initialized())


def test_device_blocks_merge_as_in_tensorflow(tf1):
    """Nested tf.device strings and functions give each op TF1's device string."""
    def build(lib):
        out = []
        with lib.device("/job:w/task:1"):
            out.append(lib.constant(1.0, name="a"))
            with lib.device("/gpu:1"):
                out.append(lib.constant(1.0, name="b"))
                with lib.device("/job:v"):
                    out.append(lib.constant(1.0, name="c"))
            with lib.device(lambda op: "/cpu:0" if op.type == "Const" else ""):
                out.append(lib.constant(1.0, name="d"))
                with lib.device("/replica:2"):
                    out.append(lib.constant(1.0, name="e"))
        with lib.device(lib.DeviceSpec(job="ps", task=3)):
            out.append(lib.constant(1.0, name="f"))
        return [t.device for t in out]
    results = []
    for lib in (tf1, tfplus):
        with lib.Graph().as_default():
            results.append(build(lib))
    assert results[1] == results[0]


def test_partitioned_variable_slices_and_errors():
    """fixed_size_partitioner splits as TF1 does (the first parts one row longer); a partitioner giving several
    split axes and a value initializer are refused with the variable's name."""
    with tfplus.Graph().as_default():
        v = tfplus.get_variable("v", [7, 2], initializer=tfplus.ones_initializer(),
                                partitioner=tfplus.fixed_size_partitioner(3))
        assert [p.get_shape().as_list() for p in v] == [[3, 2], [2, 2], [2, 2]]
        with pytest.raises(ValueError, match="get_variable bad: the partitioner gave"):
            tfplus.get_variable("bad", [4, 4], partitioner=lambda shape, dtype: [2, 2])
        with pytest.raises(ValueError, match="get_variable val: a partitioned variable needs an initializer"):
            tfplus.get_variable("val", initializer=tfplus.constant(np.ones((4, 2), np.float32)),
                                partitioner=tfplus.fixed_size_partitioner(2))
        with tfplus.Session() as sess:
            sess.run(tfplus.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(tfplus.convert_to_tensor(v)), np.ones((7, 2)))


def test_local_session_refuses_an_op_on_another_job():
    with tfplus.Graph().as_default():
        x = tfplus.constant(1.0)
        with tfplus.device("/job:worker/task:0"):
            tfplus.identity(x, name="remote")
        with tfplus.Session() as sess, pytest.raises(tfplus.errors.InvalidArgumentError,
                                                     match="'remote'.*/job:worker/task:0"):
            sess.run(x)


def test_compute_gradient_error_is_small_for_a_right_gradient_and_large_for_a_wrong_one():
    """tf.test.compute_gradient_error compares tf.gradients with central differences (float64)."""
    with tfplus.Graph().as_default(), tfplus.Session().as_default():
        x = tfplus.placeholder(tfplus.float64, [3])
        y = tfplus.reduce_sum(tfplus.sin(x) * x)
        assert tfplus.test.compute_gradient_error(x, [3], y, []) < 1e-6
        wrong = tfplus.py_func(lambda a: np.sum(a ** 2), [x], tfplus.float64)  # no gradient: Jacobian 0
        wrong.set_shape([])
        assert tfplus.test.compute_gradient_error(x, [3], wrong + tfplus.reduce_sum(x) * 0.0, [],
                                                  x_init_value=np.ones(3)) > 1.0


def test_tf_test_main_runs_a_users_test_file(tmp_path):
    """A user's test file ending in tf.test.main(), run as a script: its tests run, and the exit status says
    whether they passed."""
    body = '''import tfplus as tf


class SquareTest(tf.test.TestCase):
    def test_square(self):
        with self.cached_session():
            self.assertAllEqual(tf.square([2, 3]).eval(), [4, {nine}])


if __name__ == "__main__":
    tf.test.main()
'''
    for nine, status in ((9, 0), (10, 1)):
        path = tmp_path / f"square_test_{nine}.py"
        path.write_text(body.format(nine=nine))
        run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
        assert run.returncode == status, run.stderr
        assert ("OK" if status == 0 else "FAILED (failures=1)") in run.stderr, run.stderr
