"""Packaging and project layout: the license as an SPDX expression with its file; every test module collected."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[1]


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
