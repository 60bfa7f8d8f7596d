"""Layering: the graph core (TensorFlow's python/framework) sits below everything that runs a graph. Its modules
import only each other, never an op, the session, the executor, a kernel, graph_io, the planner or a runtime;
and `import tfplus` builds graphs only, so it loads no kernel module and not the planner."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import tfplus

PACKAGE = Path(tfplus.__file__).resolve().parent
# The graph core, bottom first; each module may import those of this list and the messages of tfplus.proto.
CORE = ("dtypes", "registry", "tensor_shape", "tensor_util", "graph_export", "framework")
# What the graph core must never reach, at any nesting level (a function's lazy import counts too).
ABOVE = ("session", "executor", "workers", "ops", "kernels", "graph_io", "planner", "runtime", "engine")


def _tfplus_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every tfplus module `path` imports, anywhere in it: `from tfplus import x` imports
    tfplus.x."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("tfplus.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "tfplus":
                found += [(node.lineno, f"tfplus.{a.name}") for a in node.names]
            elif node.module.startswith("tfplus."):
                found.append((node.lineno, node.module))
    return found


def test_graph_core_imports_nothing_above_it():
    allowed = {f"tfplus.{m}" for m in CORE}
    bad = []
    for name in CORE:
        path = PACKAGE / f"{name}.py"
        for line, module in _tfplus_imports(path):
            top = module.split(".")[1]
            if top in ABOVE or not (module in allowed or module.startswith("tfplus.proto")):
                bad.append(f"tfplus/{name}.py:{line} imports {module}")
    assert not bad, ("the graph core imports above itself; move the code up, or have the upper layer install "
                     "it (Tensor._override_operator, register_tensor_conversion_function, default_session):\n"
                     + "\n".join(bad))


def test_graph_core_order_has_no_upward_import():
    """Within the core, a module imports only those listed before it in CORE (no circle among them)."""
    bad = []
    for i, name in enumerate(CORE):
        below = {f"tfplus.{m}" for m in CORE[:i]}
        for line, module in _tfplus_imports(PACKAGE / f"{name}.py"):
            if module.startswith("tfplus.") and not module.startswith("tfplus.proto") and module not in below:
                bad.append(f"tfplus/{name}.py:{line} imports {module}")
    assert not bad, "\n".join(bad)


def test_import_tfplus_loads_no_kernel_and_not_the_planner():
    code = ("import sys, tfplus; "
            "print(sorted(m for m in sys.modules if m.startswith(('tfplus.kernels', 'tfplus.planner'))))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", f"`import tfplus` loads {out.stdout.strip()}; import them where a step runs"
