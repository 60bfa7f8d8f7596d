"""A TF1 tutorial-style script (tests/scripts/tf1_mlp.py) runs with only its import line changed: flags parsed
from the command line, training that lowers the loss, TensorBoard events and a checkpoint on disk."""
import pathlib
import re
import subprocess
import sys

from conftest import oracle_module

SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "tf1_mlp.py"


def test_tf1_script_runs_unchanged(tmp_path):
    logdir = tmp_path / "run"
    done = subprocess.run([sys.executable, str(SCRIPT), "--steps=25", f"--logdir={logdir}", "--learning_rate",
                           "0.02", "leftover"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    m = re.search(r"RESULT first=([\d.]+) final=([\d.]+) argv=\['leftover'\]", done.stdout)
    assert m, done.stdout
    assert float(m.group(2)) < 0.8 * float(m.group(1))
    assert "step 10 loss" in done.stderr  # tf.logging at INFO
    assert (logdir / "checkpoint").exists()
    event_accumulator = oracle_module("tensorboard.backend.event_processing.event_accumulator")
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    assert len(acc.Scalars("loss")) == 25 and acc.Tags()["histograms"] == ["logits"] and acc.Tags()["graph"]
