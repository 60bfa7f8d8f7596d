"""The classic TF1 tutorial and model-zoo scripts (tests/tutorials.py) run with `import tfplus as tf` as they run
with TensorFlow's tf.compat.v1: the same losses, weights and outputs after a few training steps, with the same
initial values and random numbers."""
import pytest
from tutorials import SCRIPTS, Feeder, compare, run_script

import tfplus


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_runs_as_in_tensorflow(tf1, name):
    feeder = Feeder()
    want = run_script(tf1, name, feeder)
    got = run_script(tfplus, name, Feeder(feeder.shapes))
    assert not compare(want, got), f"{name} differs from TensorFlow:\n" + "\n".join(compare(want, got))
