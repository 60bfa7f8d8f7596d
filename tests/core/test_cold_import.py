"""What a fresh process loads. `import tfplus` builds graphs only: it loads none of the optional dependencies
(pyopencl, scipy, networkx, Flower, mpi4py, TensorFlow) nor the submodules few programs use (tf.keras,
tf.estimator, tf.contrib, tf.test, which dir(tf) still lists and which import on first use), and `tfplus --help`
loads no OpenCL. Every process pays these imports: the CLI, a Flower client each round, an OpenCL build process
(benchmarks/bench_cold_start.py measures them)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

# Never loaded by `import tfplus`, nor by `tfplus --help` (which adds the CLI's parsers).
OPTIONAL = ("pyopencl", "scipy", "networkx", "flwr", "mpi4py", "tensorflow", "tfplus.runtime.opencl",
            "tfplus.kernels", "tfplus.federated.flower")
LAZY = ("tfplus.keras", "tfplus.estimator", "tfplus.contrib", "tfplus.test", "unittest", "http.client")


def _loaded(code: str) -> list[str]:
    """The modules of OPTIONAL and LAZY that a fresh Python has loaded after running `code`."""
    check = f"import json, sys; print(json.dumps(sorted(m for m in {OPTIONAL + LAZY!r} if m in sys.modules)))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", f"{code}\n{check}"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_tfplus_loads_no_optional_dependency_nor_lazy_submodule():
    loaded = _loaded("import tfplus")
    assert loaded == [], f"`import tfplus` loads {loaded}: import them where they are used (tfplus._LAZY)"


def test_cli_help_loads_no_opencl():
    code = "from tfplus.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    loaded = [m for m in _loaded(code) if m in OPTIONAL]
    assert loaded == [], f"`tfplus --help` loads {loaded}: import them in the command that runs, not its parser"


def test_lazy_submodules_are_listed_and_import_on_use():
    # A fresh process: here, another test may have imported them already, and the attributes would be plain.
    code = """
import sys
import tfplus as tf
from tfplus.unsupported import UnsupportedError
assert {"keras", "estimator", "contrib", "test", "feature_column"} <= set(dir(tf)), "dir(tf) misses a lazy name"
assert "tfplus.keras" not in sys.modules
from tfplus import keras
assert keras is sys.modules["tfplus.keras"] is tf.keras and tf.keras.layers.Dense
assert tf.feature_column is sys.modules["tfplus.estimator"].feature_column is tf.estimator.feature_column
assert tf.test.TestCase and tf.contrib.layers.fully_connected
try:
    tf.FIFOQueue
except UnsupportedError as e:
    assert "tf.FIFOQueue" in str(e)
else:
    raise AssertionError("tf.FIFOQueue did not raise UnsupportedError")
"""
    loaded = _loaded(code)
    assert {"tfplus.keras", "tfplus.estimator", "tfplus.contrib", "tfplus.test"} <= set(loaded)
