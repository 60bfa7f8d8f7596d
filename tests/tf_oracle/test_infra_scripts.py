"""TF1 scaffolding scripts (tests/infra_scripts.py: tf.test.TestCase, profiler and traces, Supervisor and
monitored sessions, devices and towers, checkpoint utilities, graph plumbing, tf.app/flags/logging/gfile) run with
`import tfplus as tf` as they run with TensorFlow's tf.compat.v1: the same printed lines, the same returned values,
the same files written."""
import contextlib
import io

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
