"""Broken plugins are isolated; the environment's switches decide what loads.

Every host here is built from fake entry points (see conftest.make_host), so nothing
depends on what is installed — except the subprocess test, which installs fake
distributions on PYTHONPATH and allow-lists only them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from hidet_framework.cli import main as cli
from hidet_framework.extension import MissingBackendError, hookimpl, reset_plugin_host
from hidet_framework.extension.registry import NameCollisionError


def raising_plugin() -> types.ModuleType:
    module = types.ModuleType("raising")

    @hookimpl
    def register_operators(register):
        register("will_be_dropped", object())
        raise ZeroDivisionError("plugin bug")

    module.register_operators = register_operators
    return module


def misspelled_plugin() -> types.ModuleType:
    module = types.ModuleType("misspelled")
    module.register_backend = hookimpl(lambda register: None)  # no such hook
    return module


@pytest.fixture
def broken_host(make_host, fakes):
    """Two good plugins and four broken ones in every way a plugin can break."""
    return make_host(
        good=fakes.backend_plugin(fakes.Backend("cpu")),
        also_good=fakes.backend_plugin(fakes.Backend("other")),
        missing=None,  # ModuleNotFoundError on import
        raising=raising_plugin(),
        duplicate=fakes.backend_plugin(fakes.Backend("cpu")),  # loads after 'also_good', before 'good'
        misspelled=misspelled_plugin(),
    )


def test_broken_plugins_are_recorded_and_the_rest_keep_working(broken_host):
    info = {i.name: i for i in broken_host.report()}
    assert set(info) == {"good", "also_good", "missing", "raising", "duplicate", "misspelled"}
    assert info["missing"].error.phase == "import"
    assert info["missing"].error.type == "ModuleNotFoundError"
    assert info["raising"].error.phase == "register_operators"
    assert (info["raising"].error.type, info["raising"].error.message) == ("ZeroDivisionError", "plugin bug")
    assert "will_be_dropped" not in broken_host.operators
    assert info["misspelled"].error.phase == "validate" and "register_backend" in info["misspelled"].error.message
    # 'duplicate' and 'good' both register "cpu" at priority 0: a collision that neither
    # wins, whatever the load order (issue 12 item 7); both are reported.
    with pytest.raises(NameCollisionError, match="'duplicate' and 'good'"):
        broken_host.backends["cpu"]
    assert "cpu" not in broken_host.backends
    assert info["good"].status == info["duplicate"].status == "conflict"
    assert info["good"].error is None and "'cpu'" in info["good"].conflicts[0]
    assert broken_host.backends.provider("other") == "also_good"
    assert info["also_good"].error is None and info["also_good"].status == "loaded"
    assert info["also_good"].hooks == ("register_backends",)


def test_cli_still_prints_and_exits_0_with_broken_plugins(broken_host):
    reset_plugin_host(broken_host)
    try:
        runner = CliRunner()
        table = runner.invoke(cli, ["plugins"], env={"COLUMNS": "200"})
        as_json = runner.invoke(cli, ["plugins", "--json"])
    finally:
        reset_plugin_host()
    assert table.exit_code == 0, table.output
    assert "ModuleNotFoundError" in table.output and "plugin bug" in table.output
    assert as_json.exit_code == 0, as_json.output
    rows = {row["name"]: row for row in json.loads(as_json.output)}
    assert rows["raising"]["error"]["type"] == "ZeroDivisionError"
    assert rows["also_good"]["registered"] == {"backends": ["other"]}


def test_allow_list_loads_only_the_named_plugins(make_host, fakes, monkeypatch):
    host = make_host(a=fakes.backend_plugin(fakes.Backend("a")), b=fakes.backend_plugin(fakes.Backend("b")),
                     missing=None)
    monkeypatch.setenv("HIDET_FRAMEWORK_PLUGINS", "b, missing")
    status = {i.name: i.status for i in host.report()}
    assert status == {"a": "not-allowed", "b": "loaded", "missing": "failed"}
    assert list(host.backends) == ["b"]


def test_block_list_skips_the_named_plugins_without_importing_them(make_host, fakes, monkeypatch):
    host = make_host(a=fakes.backend_plugin(fakes.Backend("a")), missing=None)
    monkeypatch.setenv("HIDET_FRAMEWORK_BLOCK_PLUGINS", "missing")
    info = {i.name: i for i in host.report()}
    assert info["missing"].status == "blocked" and info["missing"].error is None  # never imported
    assert list(host.backends) == ["a"]


def test_disable_autoload_loads_nothing(make_host, fakes, monkeypatch):
    host = make_host(a=fakes.backend_plugin(fakes.Backend("a")))
    monkeypatch.setenv("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", "1")
    assert host.report() == [] and len(host.backends) == 0
    with pytest.raises(MissingBackendError, match="HIDET_FRAMEWORK_DISABLE_AUTOLOAD"):
        host.backend_for("cpu")


def test_missing_backend_message_says_why_an_installed_plugin_does_not_serve(make_host, monkeypatch):
    assert "failed (import: ModuleNotFoundError" in _missing_message(make_host(cpu=None), "cpu")
    monkeypatch.setenv("HIDET_FRAMEWORK_BLOCK_PLUGINS", "cpu")
    assert "blocked by HIDET_FRAMEWORK_BLOCK_PLUGINS" in _missing_message(make_host(cpu=None), "cpu")


def _missing_message(host, kind: str) -> str:
    with pytest.raises(MissingBackendError) as excinfo:
        host.backend_for(kind)
    return str(excinfo.value)


def _fake_distribution(site: Path, dist: str, module: str, entry_name: str, source: str) -> None:
    """A minimal installed distribution: a module plus a dist-info with an entry point."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 9.9\n")
    (info / "entry_points.txt").write_text(f"[hidet_framework]\n{entry_name} = {module}\n")


def test_installed_broken_plugin_does_not_break_the_cli(tmp_path):
    _fake_distribution(tmp_path, "hf-test-broken", "hf_test_broken", "hf_broken",
                       "raise ImportError('deliberately broken plugin')\n")
    _fake_distribution(tmp_path, "hf-test-good", "hf_test_good", "hf_good", """
        from hidet_framework.extension import hookimpl

        @hookimpl
        def register_frontends(register):
            register("hf_test_frontend", object())
        """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "HIDET_FRAMEWORK_PLUGINS": "hf_broken,hf_good", "COLUMNS": "250"}
    env.pop("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", None)
    env.pop("HIDET_FRAMEWORK_BLOCK_PLUGINS", None)
    run = lambda *args: subprocess.run([sys.executable, "-m", "hidet_framework", "plugins", *args],
                                       env=env, capture_output=True, text=True, timeout=120)
    table, as_json = run(), run("--json")
    assert table.returncode == 0, table.stderr
    assert "deliberately broken plugin" in table.stdout
    assert as_json.returncode == 0, as_json.stderr
    rows = {row["name"]: row for row in json.loads(as_json.stdout)}
    assert rows["hf_broken"]["error"]["type"] == "ImportError"
    assert rows["hf_broken"]["distribution"] == "hf-test-broken" and rows["hf_broken"]["version"] == "9.9"
    assert rows["hf_good"]["registered"] == {"frontends": ["hf_test_frontend"]}
    assert rows["hf_good"]["error"] is None


def test_core_builtins_show_only_with_all(make_host, monkeypatch):
    from hidet_framework.extension import manager

    builtin = types.ModuleType("_hidet_test_builtin_passes")
    builtin.register_operators = hookimpl(lambda register: register("core_op", object()))
    monkeypatch.setitem(sys.modules, builtin.__name__, builtin)
    monkeypatch.setattr(manager, "BUILTIN_PLUGIN_MODULES", (builtin.__name__,))
    reset_plugin_host(make_host())
    try:
        plain = CliRunner().invoke(cli, ["plugins", "--json"])
        everything = CliRunner().invoke(cli, ["plugins", "--json", "--all"])
    finally:
        reset_plugin_host()
    assert json.loads(plain.output) == []
    (row,) = json.loads(everything.output)
    assert row["name"] == "core._hidet_test_builtin_passes" and row["builtin"] is True
    assert row["registered"] == {"operators": ["core_op"]}
