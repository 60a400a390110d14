"""Packaging: ``pip wheel`` of every distribution works in a fresh virtual env (the
build needs are declared in each pyproject.toml), and the wheels of the core and one
plugin install into another fresh env where the plugin is found by its entry point.

Marked ``wheel_build`` (about a minute: two venvs, pip): ``pytest -m "not wheel_build"``
leaves it out; it needs PyPI (or a configured index) for the build backend and the
core's dependencies."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRIBUTIONS = [".", "plugins/hidet_plugin_cpu", "plugins/hidet_plugin_cuda", "plugins/hidet_plugin_ops",
                 "plugins/hidet_plugin_example", "hidet_plugin_matmul", "hidet_plugin_onnx"]
_IGNORE = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis")


def _copy_distribution(relative: str, into: str) -> str:
    """The distribution's files in a scratch folder (setuptools builds in place)."""
    source = os.path.join(ROOT, relative)
    target = os.path.join(into, os.path.basename(os.path.abspath(source)) or "core")
    if relative == ".":
        os.makedirs(target)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(os.path.join(source, name), target)
        shutil.copytree(os.path.join(source, "hidet_framework"), os.path.join(target, "hidet_framework"),
                        ignore=_IGNORE)
    else:
        shutil.copytree(source, target, ignore=_IGNORE)
    return target


def _venv(path: str, *, with_pip: bool = True) -> str:
    subprocess.run([sys.executable, "-m", "venv", *(() if with_pip else ("--without-pip",)), path], check=True,
                   timeout=300)
    return os.path.join(path, "bin", "python")


def _pip(python: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                          text=True, timeout=900)


@pytest.mark.wheel_build
def test_every_distribution_builds_a_wheel_and_two_install_fresh(tmp_path):
    if not os.path.isfile(os.path.join(ROOT, "pyproject.toml")):
        pytest.skip("not run from a source checkout")
    sources = [_copy_distribution(d, str(tmp_path / "src")) for d in DISTRIBUTIONS]
    builder = _venv(str(tmp_path / "build-venv"))
    wheels = tmp_path / "wheels"
    built = _pip(builder, "wheel", "--no-deps", "-w", str(wheels), *sources)
    if built.returncode != 0 and "Could not find a version" in built.stderr + built.stdout:
        pytest.skip("no package index reachable for the build backend")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    names = sorted(os.listdir(wheels))
    assert len(names) == len(DISTRIBUTIONS), names
    # the user's env gets no pip of its own (ensurepip: ~4 CPU-s): the builder's pip installs into it
    # (`pip --python`: pip runs under that interpreter, as the env's own pip would)
    user = _venv(str(tmp_path / "user-venv"), with_pip=False)
    pick = [str(wheels / n) for n in names if n.startswith(("hidet_framework-", "hidet_plugin_ops-"))]
    installed = _pip(builder, "--python", user, "install", *pick)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    probe = subprocess.run([user, "-c", "import hidet_framework as hf; print(hf.ops.relu.__module__)"],
                           capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert probe.returncode == 0 and probe.stdout.strip() == "hidet_plugin_ops.unary", probe.stderr
    table = subprocess.run([os.path.join(os.path.dirname(user), "hidet-framework"), "plugins"],
                           capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert table.returncode == 0 and "ops" in table.stdout, table.stderr
