"""OpenCL cold start: built programs come back from the disk cache without compiling, the first-step line says
what compiling cost, and GEMM tuning stops at its time budget (TFPLUS_OPENCL_TUNE_S)."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from conftest import needs_opencl

from tfplus.kernels.opencl import _tune
from tfplus.runtime import opencl

pytestmark = needs_opencl


def test_a_built_program_is_loaded_from_the_cache_not_compiled(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    dev = opencl.OpenCLRuntime().dev
    monkeypatch.setattr(dev, "compiling", opencl._CompileNotice())
    options = f"-DT=float -DSFX=f32 -DIS_FLOAT=1 -DIS_SIGNED=1 -DWANT_cifar_augment=1 -DNONCE={os.getpid()}"
    dev._build(("image.cl",), options)
    assert dev.compiling.count == 1 and len(list((tmp_path / "tfplus" / "opencl").glob("*.bin"))) == 1
    prg = dev._build(("image.cl",), options)  # a new process would do this: the binary, no compiler
    assert dev.compiling.count == 1 and prg.get_info(opencl.cl.program_info.KERNEL_NAMES) == "cifar_augment_f32"
    assert dev.compiling.summary().startswith("built 1 OpenCL program (first run on this device): ")
    capfd.readouterr()


def _gpu_runtime():
    dev = SimpleNamespace(is_gpu=True, tuning={}, max_wg=1024, tune_seconds=0.0, save_tuning=lambda: None)
    return SimpleNamespace(dev=dev, info={"local_mem_bytes": 49152}, synchronize=lambda: None,
                           describe=lambda: "a GPU")


def test_tuning_stops_at_its_budget(monkeypatch):
    rt, tried = _gpu_runtime(), []
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "inf")
    best = _tune.choose(rt, "gemm|a", 4, tried.append)
    suffix = "|" + os.environ.get("TFPLUS_OPENCL_BUILD_OPTIONS", "")
    assert len(tried) > 4 and rt.dev.tuning["gemm|a" + suffix] == list(best) and rt.dev.tune_seconds > 0
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", str(rt.dev.tune_seconds))  # spent: the default, untimed
    tried.clear()
    assert _tune.choose(rt, "gemm|b", 4, tried.append) == _tune.GPU_DEFAULT and not tried
    assert "gemm|b" + suffix not in rt.dev.tuning  # left for a later process
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "soon")
    with pytest.raises(ValueError, match="TFPLUS_OPENCL_TUNE_S='soon'"):
        _tune.choose(rt, "gemm|c", 4, tried.append)
