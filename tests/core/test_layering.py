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
# The graph core, bottom first; each module may import those of this list, the messages of tfplus.proto and the
# base utilities below the graph (errors, dtypes, thread counts).
CORE = ("dtypes", "registry", "tensor_shape", "tensor_util", "graph_export", "framework")
BASE = ("tfplus.proto", "tfplus.errors", "tfplus.threads", "tfplus.units", "tfplus.debug", "tfplus.device_spec")
# What the graph core must never reach, at any nesting level (a function's lazy import counts too).
ABOVE = ("session", "executor", "workers", "ops", "kernels", "graph_io", "planner", "runtime", "engine")


def _tfplus_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every tfplus module `path` imports, anywhere in it: `from tfplus import x` imports
    tfplus.x."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "tfplus"]
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
            top = module.split(".")[1] if "." in module else "tfplus"
            if top in ABOVE or not (module in allowed or module.startswith(BASE)):
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
            if module.startswith("tfplus.") and not module.startswith(BASE) and module not in below:
                bad.append(f"tfplus/{name}.py:{line} imports {module}")
    assert not bad, "\n".join(bad)


def test_import_tfplus_loads_no_kernel_and_not_the_planner():
    code = ("import sys, tfplus; "
            "print(sorted(m for m in sys.modules if m.startswith(('tfplus.kernels', 'tfplus.planner'))))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", f"`import tfplus` loads {out.stdout.strip()}; import them where a step runs"


# The whole house, bottom first (issue 33): a module imports only modules of its own layer or of those below.
# Names are module prefixes; a module belongs to its longest prefix. `import tfplus` (the API's face) is the API.
LAYERS = {
    "base": ("tfplus.errors", "tfplus.dtypes", "tfplus.units", "tfplus.config", "tfplus.logging", "tfplus.threads",
             "tfplus.crc32c", "tfplus.debug", "tfplus._layout", "tfplus.unsupported", "tfplus.proto", "tfplus.gfile",
             "tfplus.flags", "tfplus.app", "tfplus.data.cifar10", "tfplus.device_spec"),
    "graph core": ("tfplus.registry", "tfplus.tensor_shape", "tfplus.tensor_util", "tfplus.graph_export",
                   "tfplus.framework", "tfplus.tensor_bundle", "tfplus.flops"),
    "ops": ("tfplus.ops", "tfplus.gradients", "tfplus.graph_io", "tfplus.init_ops", "tfplus.nn_impl"),
    # The step tracer (tfplus.profiler) is the engine's: it reads the planner's phases and the runtime's clocks.
    "engine": ("tfplus.kernels", "tfplus.runtime", "tfplus.planner", "tfplus.engine", "tfplus.profiler",
               "tfplus.model_analyzer"),
    "API": ("tfplus", "tfplus.variables", "tfplus.layers", "tfplus.layers_ext", "tfplus.nn", "tfplus.rnn",
            "tfplus.losses", "tfplus.summary", "tfplus.train", "tfplus.contrib", "tfplus.data", "tfplus.test",
            "tfplus.python"),
    "tools": ("tfplus.graphs", "tfplus.trainer", "tfplus.cli", "tfplus.cli_args", "tfplus.plan_cli",
              "tfplus.profile_cli", "tfplus.step_budget", "tfplus.finetune", "tfplus.__main__", "tfplus.federated"),
}
# The planner is a pure function of (graph, device facts, budget): no device, kernel, engine or thread state.
PLANNER_NEVER = ("tfplus.runtime", "tfplus.kernels", "tfplus.engine", "tfplus.threads")
ROOT = PACKAGE.parent if (PACKAGE.parent / "ops").is_dir() else PACKAGE  # a checkout keeps ops/ beside tfplus/


def _layer(module: str) -> int:
    found = [(len(prefix), i) for i, prefixes in enumerate(LAYERS.values()) for prefix in prefixes
             if module == prefix or module.startswith(prefix + ".")]
    assert found, f"{module} is in no layer of LAYERS: place it"
    return max(found)[1]


def _modules():
    """(path, dotted name) of every module of the package, ops/, kernels/ and graphs/ included."""
    for folder in ("tfplus", "ops", "kernels", "graphs"):
        base = ROOT / folder if (ROOT / folder).is_dir() else PACKAGE / folder
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            name = ".".join(["tfplus"] + ([] if folder == "tfplus" else [folder]) + parts)
            yield path, name.removesuffix(".__init__")


def test_every_import_points_down_the_layers():
    names = list(LAYERS)
    bad = []
    for path, name in _modules():
        mine = _layer(name)
        for line, module in _tfplus_imports(path):
            if _layer(module) > mine:
                bad.append(f"{name}:{line} ({names[mine]}) imports {module} ({names[_layer(module)]})")
            if name.startswith("tfplus.planner") and module.startswith(PLANNER_NEVER):
                bad.append(f"{name}:{line} (the planner) imports {module}")
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)
