"""The classic TF1 tutorial and model-zoo scripts (tests/tutorials.py) run with `import tfplus as tf` as they run
with TensorFlow's tf.compat.v1: the same losses, weights and outputs after a few training steps, with the same
initial values and random numbers. All of them on the cpu device; on OpenCL, those whose ops are new for them
(the rest share their kernels with the op table's OpenCL tests)."""
import pytest
from conftest import needs_opencl
from tutorials import SCRIPTS, Feeder, compare, run_script

import tfplus

_ON_OPENCL = ("word2vec_nce", "dilated", "transformer_block", "dcgan_carpedm20", "dqn", "birnn_classifier")


def _check(tf1, name):
    feeder = Feeder()
    want = run_script(tf1, name, feeder)
    got = run_script(tfplus, name, Feeder(feeder.shapes))
    diffs = compare(want, got)
    assert not diffs, f"{name} differs from TensorFlow:\n" + "\n".join(diffs)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_runs_as_in_tensorflow(tf1, name):
    _check(tf1, name)


@needs_opencl
@pytest.mark.parametrize("name", _ON_OPENCL)
def test_script_runs_as_in_tensorflow_on_opencl(tf1, name, monkeypatch):
    # The scripts open plain tf.Session()s: their default device becomes OpenCL's.
    init = tfplus.Session.__init__
    monkeypatch.setattr(tfplus.Session, "__init__", lambda self, *a, device="opencl", **k: init(self, *a,
                                                                                              device=device, **k))
    _check(tf1, name)
