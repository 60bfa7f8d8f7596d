"""Packaging and project layout: the license as an SPDX expression with its file; every test module collected;
tfplus imports whole from any folder, a source checkout's or an install's."""
from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[2]


def test_license_is_spdx_with_its_file_and_no_deprecation_warning(monkeypatch):
    monkeypatch.chdir(ROOT)  # license-files and the readme are relative to the project
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the TOML-table form warned in every install
        meta = apply_configuration(Distribution(), "pyproject.toml").metadata
    assert meta.license_expression == "Apache-2.0" and meta.license_files == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"] and "END OF TERMS AND CONDITIONS" in text
    # setuptools reads PEP 639's string form from version 77 on
    build = (ROOT / "pyproject.toml").read_text().split("[project]")[0]
    assert re.search(r'requires = \["setuptools>=(\d+)"\]', build).group(1) == "77"


def test_every_package_folder_is_in_the_package_list():
    """setuptools installs only the packages pyproject lists: a subpackage left out (tfplus.runtime.opencl) is
    missing from the wheel, and importing tfplus's opencl device fails in an install."""
    from setuptools.config.pyprojecttoml import load_file  # the TOML as it is (tomllib is Python 3.11's)
    listed = load_file(ROOT / "pyproject.toml")["tool"]["setuptools"]["packages"]
    homes = {"tfplus": ROOT / "tfplus", **{f"tfplus.{d}": ROOT / d for d in ("ops", "kernels", "graphs")}}
    found = {".".join((name, *p.parent.relative_to(home).parts))
             for name, home in homes.items() for p in home.rglob("__init__.py")}
    assert found == set(listed)


def test_every_module_with_tests_is_collected(pytestconfig):
    """A test function in a file pytest does not collect never runs (tests/cases_*.py held 16 such)."""
    import fnmatch
    patterns = pytestconfig.getini("python_files")
    holders = [p.name for p in sorted((ROOT / "tests").glob("*.py"))
               if re.search(r"^def test_", p.read_text(), re.MULTILINE)]
    assert "cases_array.py" in holders and "cases_math.py" in holders
    assert [h for h in holders if not any(fnmatch.fnmatch(h, pat) for pat in patterns)] == []


def test_docs_cite_commands_not_paths_of_the_machine_they_ran_on():
    docs = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "benchmarks").glob("*.md"))]
    machine_paths = re.compile(r"(?<![\w.~])/(work|root|home|tmp|Users|mnt)/")
    found = [f"{p.name}:{n}: {line.strip()}" for p in docs
             for n, line in enumerate(p.read_text().splitlines(), 1) if machine_paths.search(line)]
    assert found == []


# What an import saw, printed as lines "name path" (or "name ExceptionType") for the tests below.
_PROBE = """
import importlib
for name in ("tfplus", "tfplus.ops", "tfplus.kernels", "tfplus.graphs", "tfplus.kernels.opencl",
             "ops", "kernels", "graphs", "tfplus.tests", "tfplus.tools", "tfplus.tfplus"):
    try:
        print(name, importlib.import_module(name).__file__)
    except ImportError as e:
        print(name, type(e).__name__)
"""


def _imports(cwd: Path, install: Path, *flags: str) -> dict[str, str]:
    """What `python [flags] -c PROBE` run in `cwd` imports, with `install` on its path and the dependencies, but
    no editable install's finder (-S skips the .pth files that install one), as after a plain `pip install .`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(install), *site.getsitepackages(),
                                                        site.getusersitepackages()])}
    out = subprocess.run([sys.executable, "-S", *flags, "-c", _PROBE], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A folder laid out as `pip install .` lays out site-packages (pyproject's package-dir): ops, kernels and
    graphs inside tfplus/."""
    site_dir = tmp_path_factory.mktemp("site-packages")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "tfplus", site_dir / "tfplus", ignore=skip)
    for sub in ("ops", "kernels", "graphs"):
        shutil.copytree(ROOT / sub, site_dir / "tfplus" / sub, ignore=skip)
    return site_dir


def test_from_the_checkout_s_root_its_tfplus_imports_whole(installed):
    """Run from the root, Python puts the working folder first, so the checkout's tfplus/ is imported even over
    an install: its ops, kernels and graphs (beside it, not inside) were a ModuleNotFoundError."""
    seen = _imports(ROOT, installed)
    assert seen["tfplus"] == str(ROOT / "tfplus" / "__init__.py")
    for sub in ("ops", "kernels", "graphs"):  # the checkout's own, never the install's half of a package
        assert seen[f"tfplus.{sub}"] == str(ROOT / sub / "__init__.py")
    assert seen["tfplus.kernels.opencl"] == str(ROOT / "kernels" / "opencl" / "__init__.py")
    # Bare names still refuse, and the root's other folders (and tfplus/ a second time) are not subpackages.
    assert [seen[n] for n in ("ops", "kernels", "graphs", "tfplus.tests", "tfplus.tools", "tfplus.tfplus")] == \
        ["ImportError"] * 3 + ["ModuleNotFoundError"] * 3


@pytest.mark.parametrize("where", ["root with -P", "another folder"])
def test_elsewhere_the_installed_tfplus_is_imported(installed, tmp_path, where):
    seen = _imports(ROOT, installed, "-P") if where == "root with -P" else _imports(tmp_path, installed)
    for name in ("tfplus", "tfplus.ops", "tfplus.kernels", "tfplus.graphs"):
        assert seen[name] == str(installed / Path(*name.split(".")) / "__init__.py")
    assert seen["tfplus.tools"] == "ModuleNotFoundError"


def test_pytest_runs_the_suite_s_files_in_parallel_and_one_file_in_this_process(pytestconfig):
    """The README's plain `pytest` takes its options from pyproject: test processes by file (-n auto, whose count
    conftest decides), the skips' reasons and the slowest tests; a single file starts no processes."""
    from types import SimpleNamespace

    from conftest import pytest_xdist_auto_num_workers as workers
    addopts = " ".join(pytestconfig.getini("addopts"))
    assert "-n auto" in addopts and "--dist loadfile" in addopts and "-ra" in addopts and "--durations" in addopts

    def count(*args):
        return workers(SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=ROOT),
                                       getini=pytestconfig.getini))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parallel = min(cores, 4)
    assert count("tests") == (parallel if parallel > 1 else 0)
    assert count("tests/core/test_api.py") == count("tests/core/test_api.py::test_x", "tests/core/test_api.py") == 0
    assert count("tests/core/test_api.py", "tests/cases_math.py") == (2 if cores > 1 else 0)
