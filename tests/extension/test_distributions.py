"""The distributions declare themselves the way the plugin seam expects, and the
README's set-up lines are exactly what CI runs."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import hidet_framework

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = {  # folder -> (distribution, entry-point name, package)
    "plugins/hidet_plugin_cpu": ("hidet-plugin-cpu", "cpu", "hidet_plugin_cpu"),
    "plugins/hidet_plugin_cuda": ("hidet-plugin-cuda", "cuda", "hidet_plugin_cuda"),
    "plugins/hidet_plugin_ops": ("hidet-plugin-ops", "ops", "hidet_plugin_ops"),
    "plugins/hidet_plugin_example": ("hidet-plugin-example", "example", "hidet_plugin_example"),
    "hidet_plugin_matmul": ("hidet-plugin-matmul", "matmul", "hidet_plugin_matmul"),
    "hidet_plugin_reduce": ("hidet-plugin-reduce", "reduce", "hidet_plugin_reduce"),
}


def _pyproject(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())


def test_core_distribution():
    project = _pyproject(".")["project"]
    assert project["name"] == "hidet-framework"
    assert project["version"] == hidet_framework.__version__
    assert project["scripts"] == {"hidet-framework": "hidet_framework.cli:main"}


@pytest.mark.parametrize("folder", PLUGINS)
def test_plugin_distribution_declares_its_entry_point(folder):
    dist, entry_name, package = PLUGINS[folder]
    project = _pyproject(folder)["project"]
    assert project["name"] == dist and project["version"] == hidet_framework.__version__
    assert "hidet-framework" in project["dependencies"]
    assert project["entry-points"]["hidet_framework"] == {entry_name: package}


def test_requirements_dev_installs_every_distribution():
    lines = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert "-e ." in lines
    for folder in PLUGINS:
        assert f"-e ./{folder}" in lines


def test_ci_runs_exactly_the_readme_setup_lines():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).splitlines()
    install, test = first_block[0], first_block[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install in ci
    assert any(line.startswith(test + " ") or line == test for line in ci)
