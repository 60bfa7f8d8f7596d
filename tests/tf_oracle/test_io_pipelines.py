"""TF1 input-pipeline scripts (tests/io_scripts.py: records, Examples, CSV, text, sparse tensors, strings, files)
run with `import tfplus as tf` as they run with TensorFlow's tf.compat.v1: the same fetched values, the same
losses and weights after training on the parsed data, the same bytes in the files they write."""
import pytest
from conftest import needs_opencl
from io_scripts import SCRIPTS, run_script, same
from tutorials import sessions_on_opencl

import tfplus
from tfplus.unsupported import UnsupportedError


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


@pytest.mark.xfail(raises=UnsupportedError, strict=True,
                   reason="TF1's queue-based readers (tf.train.string_input_producer, tf.TFRecordReader, "
                          "start_queue_runners) are not implemented: queues and their runner threads are too large "
                          "for now; tf.data.TFRecordDataset reads the same files")
def test_queue_based_tfrecord_reader(tmp_path):
    path = str(tmp_path / "q.tfrecord")
    with tfplus.io.TFRecordWriter(path) as w:
        w.write(b"record")
    with tfplus.Graph().as_default():
        queue = tfplus.train.string_input_producer([path], num_epochs=1)
        _, record = tfplus.TFRecordReader().read(queue)
        with tfplus.Session() as sess:
            coord = tfplus.train.Coordinator()
            tfplus.train.start_queue_runners(sess, coord)
            assert sess.run(record) == b"record"
