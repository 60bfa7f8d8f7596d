"""TF1 input-pipeline scripts (tests/io_scripts.py: records, Examples, CSV, text, sparse tensors, strings, files)
run with `import tfplus as tf` as they run with TensorFlow's tf.compat.v1: the same fetched values, the same
losses and weights after training on the parsed data, the same bytes in the files they write."""
import pytest
from conftest import needs_opencl
from io_scripts import SCRIPTS, run_script, same
from tutorials import sessions_on_opencl

import tfplus


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.__name__)
def test_script_runs_as_in_tensorflow(tf1, script, tmp_path):
    (tmp_path / "tf").mkdir()
    (tmp_path / "tfplus").mkdir()
    same(run_script(tf1, script, str(tmp_path / "tf")), run_script(tfplus, script, str(tmp_path / "tfplus")),
         script.__name__)


@needs_opencl
@pytest.mark.parametrize("name", ["mnist_tfrecords_train", "sparse_model", "parse_example_batch"])
def test_script_runs_as_in_tensorflow_on_opencl(tf1, name, tmp_path, monkeypatch):
    """The host ops run on the OpenCL device's sessions too (their values go through the host)."""
    script = next(s for s in SCRIPTS if s.__name__ == name)
    (tmp_path / "tf").mkdir()
    (tmp_path / "tfplus").mkdir()
    expected = run_script(tf1, script, str(tmp_path / "tf"))
    sessions_on_opencl(monkeypatch)
    same(expected, run_script(tfplus, script, str(tmp_path / "tfplus")), name)

