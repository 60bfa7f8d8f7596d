"""Shared fixtures. `device` runs a test on every device present: "cpu" always, "opencl" when the OpenCL
runtime is part of the build and finds a device (PoCL provides one everywhere)."""
from __future__ import annotations

import importlib
import importlib.util
import os

import pytest


def _devices() -> list[str]:
    devices = ["cpu"]
    if importlib.util.find_spec("tfplus.runtime.opencl") is not None:
        try:
            opencl = importlib.import_module("tfplus.runtime.opencl")
        except ImportError:  # pyopencl itself missing: this machine has no OpenCL device
            return devices
        if opencl.available():
            devices.append("opencl")
    return devices


DEVICES = _devices()

# Tests run tiny shapes, where a CPU OpenCL device's optimizer (PoCL) costs far more than it saves: a cold CI
# run compiles every kernel source in about a third of the time without it. Set before any program is built;
# a user's own TFPLUS_OPENCL_BUILD_OPTIONS wins. Not on GPUs: unoptimized kernels there can need more
# registers than a work-group may have.
if "opencl" in DEVICES:
    _opencl = importlib.import_module("tfplus.runtime.opencl")
    if not any("GPU" in d["type"] for d in _opencl.list_devices()):
        os.environ.setdefault("TFPLUS_OPENCL_BUILD_OPTIONS", "-cl-opt-disable")


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def tf1():
    """TensorFlow's TF1 API (tf.compat.v1 in graph mode, reference variables): the oracle for TF1 behaviour.

    Install it with the `oracle` extra. Skipped with the reason where TensorFlow is absent, except under CI
    (CI=true), where a missing oracle is an error: CI always installs it, so a skip there would hide a hole."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.compat.v1.layers and rnn_cell need Keras 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if importlib.util.find_spec("tensorflow") is None:
        if os.environ.get("CI"):
            pytest.fail("TensorFlow (the TF1 oracle) is not installed: pip install -e '.[test,oracle]'")
        pytest.skip("TensorFlow is not installed (pip install -e '.[test,oracle]'): no TF1 oracle to compare with")
    import tensorflow as tensorflow

    v1 = tensorflow.compat.v1
    v1.disable_eager_execution()
    v1.disable_resource_variables()
    return v1
