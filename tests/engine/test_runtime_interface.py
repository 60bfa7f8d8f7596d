"""The device interface is declared, not probed: every runtime is a tfplus.runtime.base.Runtime with nothing
abstract left, and no code outside tfplus/runtime/ asks a runtime with hasattr or getattr what it can do (the base
class declares each optional capability with the answer of a device that lacks it)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tfplus.runtime.base import Runtime
from tfplus.runtime.cpu import CPURuntime

ROOT = Path(__file__).resolve().parents[2]

# An expression naming a runtime or a device: `rt`, `runtime`, `sess.runtime`, `self._runtime`, `rt.dev`.
_RUNTIME = re.compile(r"(?:^|\.)_?(runtime|rt|dev)$")

def _probes(source: str, where: str) -> list[str]:
    """'where:line: call' of each hasattr/getattr in `source` whose object is a runtime or a device."""
    return [f"{where}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(ast.parse(source, where))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
            and node.args and _RUNTIME.search(ast.unparse(node.args[0]))]


def test_every_runtime_is_a_runtime_with_nothing_abstract_left():
    from tfplus.runtime.opencl import OpenCLRuntime
    for cls in (CPURuntime, OpenCLRuntime):
        assert issubclass(cls, Runtime) and not cls.__abstractmethods__, cls
    assert {CPURuntime, OpenCLRuntime} == set(Runtime.__subclasses__())


def test_the_cpu_answers_every_optional_capability_as_the_base_declares_it():
    rt = CPURuntime()
    assert (rt.records_launches, rt.replay, rt.allow_fallback, rt.fresh, rt.held_apart) == (False,) * 3 + (None,) * 2
    assert (rt.on_transfer, rt.compiling, rt.pool_bytes, rt.trim(), rt.fallback_kernel("Relu", None)) == \
        (None, None, 0, 0, None)
    assert not rt.tape_recording() and not rt.tape_begin([], [])
    with rt.timing() as kernels:
        assert kernels is None  # the cpu's kernels are timed by the host's clock


def test_no_code_outside_the_runtime_package_probes_a_runtime():
    files = [p for folder in ("tfplus", "kernels") for p in (ROOT / folder).rglob("*.py")
             if (ROOT / "tfplus" / "runtime") not in p.parents]
    probes = [f for p in files for f in _probes(p.read_text(), str(p.relative_to(ROOT)))]
    assert probes == []


def test_the_scan_finds_probes_of_runtimes_and_devices_only():
    source = ("hasattr(sess.runtime, 'a')\ngetattr(rt, 'b', None)\ngetattr(getattr(self._runtime, 'dev', None), 'c')\n"
              "getattr(cfg, 'd')\nhasattr(os, 'fork')\ngetattr(runtimes, 'e')\n")
    assert _probes(source, "x.py") == [
        "x.py:1: hasattr(sess.runtime, 'a')", "x.py:2: getattr(rt, 'b', None)",
        "x.py:3: getattr(self._runtime, 'dev', None)"]
