"""TF1's API as TensorFlow lists it (tools/tf1_api.txt, from tools/gen_tf_api_inventory.py): every name is either
implemented by tfplus or refused with UnsupportedError naming it; none ends in a plain AttributeError. The file
matches the installed TensorFlow, README's coverage table matches tfplus, and no refusal's advice names an API
that tfplus implements."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tfplus as tf
from tfplus.unsupported import ALTERNATIVES, UnsupportedError, resolve

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("gen_tf_api_inventory", ROOT / "tools" / "gen_tf_api_inventory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_tf1_name_is_implemented_or_refused():
    tool = _tool()
    names = tool.read_inventory()
    assert len(names) > 1000 and "tf.layers.Dense" in names and "tf.contrib.seq2seq.sequence_loss" in names
    neither = []
    for name in names:
        try:
            resolve(tf, name)
        except Exception as e:  # noqa: BLE001 (any other error is what this test is for)
            neither.append(f"{name}: {type(e).__name__}: {e}")
    assert not neither, "names neither implemented nor refused with UnsupportedError:\n" + "\n".join(neither)


def test_a_refusal_names_the_api_and_the_nearest_alternative():
    with pytest.raises(UnsupportedError, match=r"tf\.train\.AdagradDAOptimizer .*AdagradOptimizer"):
        tf.train.AdagradDAOptimizer  # noqa: B018
    with pytest.raises(UnsupportedError, match=r"tf\.initializers\.identity"):
        tf.initializers.identity  # noqa: B018
    assert not hasattr(tf.math, "igamma") and hasattr(tf.math, "reduce_sum")


def test_no_alternative_is_given_for_an_api_tfplus_implements():
    # NOTE: tfplus.data (CIFAR-10 input pipelines) is tfplus's attribute `data` once anything imports it; the
    # advice for TF's tf.data stands.
    assert [name for name in ALTERNATIVES if name != "tf.data" and resolve(tf, name)] == []


def test_readme_coverage_table_is_current():
    # A fresh process: what this one imported (tfplus.data, say) must not change the counts.
    table = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_tf_api_inventory.py"), "--table"],
                           capture_output=True, text=True, check=True).stdout
    assert table in (ROOT / "README.md").read_text(), f"README.md's coverage table is stale; it is now:\n{table}"


def test_inventory_is_tensorflows_api(tf1):
    # NOTE: in a fresh process: what tf.compat.v1 lists depends on what was imported before (a test that loads
    # Keras first adds tf.rnn_cell), so only a clean import gives the API the file was made from.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_USE_LEGACY_KERAS")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_tf_api_inventory.py"), "--check"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, f"run tools/gen_tf_api_inventory.py to refresh it:\n{out.stdout}{out.stderr[-2000:]}"
