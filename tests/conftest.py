"""Shared fixtures. `device` runs a test on both devices: "cpu" and "opencl" (PoCL provides one everywhere)."""
from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import os

import pytest

import tfplus.kernels.numpy  # noqa: F401  the cpu kernels, as any session registers them: tests that plan

# without a session (planner.plan(..., "cpu")) then see every kernel's facts whichever test ran first

# pyopencl and pocl-binary-distribution are dependencies, so every install has an OpenCL device; a missing one
# is an error, not a reason to skip half the suite. TFPLUS_TESTS_CPU_ONLY=1 runs the cpu device's tests only
# (on a machine where the OpenCL runtime cannot load), and says so in each skipped test's reason.
CPU_ONLY = "TFPLUS_TESTS_CPU_ONLY"

# Tests that start tfplus's program cache empty point XDG_CACHE_HOME at a temporary folder, and PoCL's cache of
# compiled kernels (the driver's own, as CUDA_CACHE_PATH is) would follow it into their child processes, which then
# compile every program from source. Pinned where PoCL keeps it (before any device loads); a set one wins.
_CACHE_HOME = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
os.environ.setdefault("POCL_CACHE_DIR", os.path.join(_CACHE_HOME, "pocl", "kcache"))


def _devices() -> list[str]:
    if os.environ.get(CPU_ONLY) == "1":
        return ["cpu"]
    try:
        opencl = importlib.import_module("tfplus.runtime.opencl")
    except ImportError as e:
        raise pytest.UsageError(f"the OpenCL runtime does not load ({e}): pip install -e '.[test,oracle]', "
                                f"or set {CPU_ONLY}=1 to test the cpu device only") from None
    if not opencl.available():
        raise pytest.UsageError(f"no OpenCL device found (pocl-binary-distribution provides one): reinstall "
                                f"the project, or set {CPU_ONLY}=1 to test the cpu device only")
    return ["cpu", "opencl"]


DEVICES = _devices()
needs_opencl = pytest.mark.skipif("opencl" not in DEVICES, reason=f"{CPU_ONLY}=1: cpu device only")

# Tests run tiny shapes, where a CPU OpenCL device's optimizer (PoCL) costs far more than it saves: a cold CI
# run compiles every kernel source in about a third of the time without it. Set before any program is built;
# a user's own TFPLUS_OPENCL_BUILD_OPTIONS wins. Not on GPUs: unoptimized kernels there can need more
# registers than a work-group may have.
if "opencl" in DEVICES:
    _opencl = importlib.import_module("tfplus.runtime.opencl")
    if not any("GPU" in d["type"] for d in _opencl.list_devices()):
        os.environ.setdefault("TFPLUS_OPENCL_BUILD_OPTIONS", "-cl-opt-disable")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_auto_num_workers(config) -> int:
    """How many test processes `-n auto` (pyproject's addopts) starts: one per core, at most 4 (each holds
    TensorFlow, the oracle, ~1.5 GB) and one per test file asked for, since each process takes whole files. One
    file (`pytest tests/test_x.py -k name`) runs in this process: 0 starts none."""
    patterns = config.getini("python_files")
    files = set()
    for arg in config.args:
        path = config.invocation_params.dir / arg.split("::")[0]
        found = path.rglob("*.py") if path.is_dir() else [path]
        files |= {f for f in found if any(fnmatch.fnmatch(f.name, p) for p in patterns)}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    n = min(cores, 4, len(files))
    return n if n > 1 else 0


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def oracle_module(name: str):
    """A module of the `oracle` extra (TensorFlow, TensorBoard's event reader); missing, the test fails."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.fail(f"{name} (the `oracle` extra) is not installed: pip install -e '.[test,oracle]' ({e})")


@pytest.fixture(scope="session")
def tf1():
    """TensorFlow's TF1 API (tf.compat.v1 in graph mode, reference variables): the oracle for TF1 behaviour.

    Install it with the `oracle` extra (README's test command does). Missing, it is an error: a skip would hide
    every comparison with TensorFlow."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.compat.v1.layers and rnn_cell need Keras 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The oracle's own kernels, not oneDNN's: which of those run depends on the machine's CPU, and they differ
    # (FusedBatchNormV3's unused reserve_space_3 is an empty vector there, TF's kernel gives a scalar).
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    tensorflow = oracle_module("tensorflow")

    v1 = tensorflow.compat.v1
    v1.disable_eager_execution()
    v1.disable_resource_variables()
    return v1


@pytest.fixture
def conv_builds(monkeypatch):
    """(kernel name, its -D defines) of each conv.cl kernel the OpenCL conv launchers build while a test runs."""
    from tfplus.kernels.opencl import conv
    builds: list = []
    make = conv.kernel

    def kernel(rt, src, base, *a, **k):
        builds.append((base, k))
        return make(rt, src, base, *a, **k)
    monkeypatch.setattr(conv, "kernel", kernel)
    return builds


# The third outsider sweep's scripts run TensorFlow's side in the test process, and what it leaves there (its
# Keras's thread pools among it) hung test_thread_sweep's forked cpu step workers when both files shared an xdist
# worker (stop 53's CI, every time the scripts ran first). The sweep runs in a pytest process of its own
# (tests/tf_oracle/test_outsider_scripts3_apart.py), which sets this variable.
SWEEP3_APART = "TFPLUS_TESTS_SWEEP3_INNER"
collect_ignore = [] if os.environ.get(SWEEP3_APART) == "1" else ["tf_oracle/test_outsider_scripts3.py"]
