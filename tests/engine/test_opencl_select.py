"""Choosing an OpenCL device by default where a CPU device's compiler cannot build kernels.

pyopencl's wheel bundles PoCL 3.0 (LLVM 14), which cannot target CPUs newer than its LLVM (AMD Zen 5: every build
fails with "unknown target CPU 'generic'"), while Debian's PoCL on the same host can. The default choice takes the
first CPU device that builds a one-line program; when none can, the error names each device and the fix."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tfplus import distributed
from tfplus.runtime.opencl import discovery


def _cpu(name):
    return SimpleNamespace(type=discovery.cl.device_type.CPU, name=name, platform=SimpleNamespace(
        name="Portable Computing Language", version=f"OpenCL 3.0 {name}"))


@pytest.fixture
def two_pocls(monkeypatch):
    old, new = _cpu("PoCL 3.0-rc2 LLVM 14"), _cpu("PoCL 3.1 LLVM 15")
    errors = {id(old): "error: unknown target CPU 'generic'", id(new): None}
    monkeypatch.setattr(discovery, "cl_devices", lambda: [old, new])
    monkeypatch.setattr(discovery, "build_error", lambda d: errors[id(d)])
    monkeypatch.delenv("TFPLUS_OPENCL_DEVICE", raising=False)
    return old, new, errors


def test_the_default_device_is_the_first_cpu_device_that_builds_a_program(two_pocls):
    old, new, _ = two_pocls
    assert discovery.select(None) is new
    assert discovery.select("0") is old  # a device asked for by index is taken as asked


def test_a_rank_takes_only_cpu_devices_that_build(two_pocls, monkeypatch):
    monkeypatch.setattr(distributed, "local_size", lambda: 1)
    monkeypatch.setattr(distributed, "local_rank", lambda: 0)
    assert distributed.local_device() == "opencl:1"


def test_no_device_that_builds_is_one_error_naming_each_and_the_fix(two_pocls):
    old, new, errors = two_pocls
    errors[id(new)] = "error: unknown target CPU 'generic'"
    with pytest.raises(RuntimeError, match=r"no OpenCL device here can compile a kernel \(0: OpenCL 3.0 PoCL 3.0-rc2.*"
                                           r"unknown target CPU 'generic'.*apt install pocl-opencl-icd"):
        discovery.select(None)


def test_the_probe_builds_on_this_hosts_chosen_device():
    """The device the tests run on (the default choice) passes the probe, so the probe itself works."""
    assert discovery.build_error(discovery.select(None)) is None
