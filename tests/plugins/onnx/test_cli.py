"""The command line as a new user meets it: run with --check/--bench/--save, compile
then run the folder, env, cache, plugins at 80 columns, a core-only install."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from hidet_framework.cli import main

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "models", "tiny_resnet.onnx")


@pytest.fixture
def example():
    if not os.path.isfile(EXAMPLE):
        pytest.skip("examples/models/tiny_resnet.onnx is not in this checkout")
    return EXAMPLE


def test_run_check_bench_and_save(example, tmp_path):
    folder = str(tmp_path / "saved")
    result = CliRunner().invoke(main, ["run", example, "--target", "cpu", "--check", "--bench", "3",
                                       "--save", folder])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "kernel launches:" in out and "compile:" in out and "fusion:" in out
    assert "latency over 3 runs: median" in out and "p90" in out
    assert "max relative error" in out and "(ok," in out
    again = CliRunner().invoke(main, ["run", folder, "--check"])
    assert again.exit_code == 0, again.output
    assert "nothing compiled" in again.output and "(ok," in again.output


def test_compile_then_run_the_folder_with_inputs(example, tmp_path):
    folder = str(tmp_path / "out")
    result = CliRunner().invoke(main, ["compile", example, "--target", "cpu", "--out", folder])
    assert result.exit_code == 0, result.output
    inputs = tmp_path / "in.npz"
    np.savez(inputs, image=np.zeros((1, 3, 32, 32), np.float32))
    result = CliRunner().invoke(main, ["run", folder, "--inputs", str(inputs)])
    assert result.exit_code == 0, result.output
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=np.zeros(3))
    result = CliRunner().invoke(main, ["run", folder, "--inputs", str(bad)])
    assert result.exit_code != 0 and "has no array 'image'" in result.output


@pytest.mark.parametrize("options, says", [
    (["--input-shape", "image=1x3x64x64"], "--input-shape cannot change"),
    (["--space", "0"], "--space cannot change"),
    (["--dtype", "float32"], "--dtype cannot change"),
    (["--target", "cuda"], "was compiled for cpu; --target cuda"),
])
def test_a_saved_model_refuses_options_that_only_steer_compiling(example, tmp_path, options, says):
    folder = str(tmp_path / "out")
    assert CliRunner().invoke(main, ["compile", example, "--target", "cpu", "--out", folder]).exit_code == 0
    result = CliRunner().invoke(main, ["run", folder, *options])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output, result.output
    for fine in (["--target", "cpu"], ["--target", "auto"], []):
        result = CliRunner().invoke(main, ["run", folder, *fine])
        assert result.exit_code == 0 and "nothing compiled" in result.output, result.output


def test_bad_input_shape_option_and_bad_model(example, tmp_path):
    result = CliRunner().invoke(main, ["run", example, "--input-shape", "image=1x3xa"])
    assert result.exit_code != 0 and "NAME=1x3x224x224" in result.output
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01garbage")
    result = CliRunner().invoke(main, ["run", str(junk)])
    assert result.exit_code != 0 and "not an ONNX model" in result.output and "Traceback" not in result.output


def test_env_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(main, ["env"])
    assert result.exit_code == 0, result.output
    for key in ("python", "C compiler", "cpu", "cuda", "cache"):
        assert any(line.startswith(key) for line in result.output.splitlines()), key
    (tmp_path / "cache" / "builds").mkdir(parents=True)
    (tmp_path / "cache" / "builds" / "x.so").write_bytes(b"1234")
    info = CliRunner().invoke(main, ["cache", "info"])
    assert "4 B in 1 files" in info.output
    cleared = CliRunner().invoke(main, ["cache", "clear"])
    assert cleared.exit_code == 0 and "cleared" in cleared.output
    assert os.listdir(tmp_path / "cache") == []


def _cli(*args, env=None):
    environment = dict(os.environ, COLUMNS="80", **(env or {}))
    return subprocess.run([sys.executable, "-m", "hidet_framework", *args], capture_output=True, text=True,
                          env=environment, timeout=120)


def test_plugins_fits_80_columns_and_explains_unusable_backends():
    result = _cli("plugins")
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout
    from hidet_framework.extension import plugin_host

    try:
        usable = bool(plugin_host().backend_for("cuda").availability())
    except LookupError:
        pytest.skip("the cuda plugin is not installed")
    if not usable:
        assert "not usable here" in result.stdout and "cannot run here" in result.stdout


def test_core_only_install_says_no_plugin_is_installed():
    result = _cli("plugins", env={"HIDET_FRAMEWORK_PLUGINS": "no-such-plugin"})
    assert result.returncode == 0
    # everything is installed but not allowed: the table says so per plugin
    assert "not-allowed" in result.stdout
    from hidet_framework.cli import plugin_table

    runner = CliRunner()
    from hidet_framework.extension import ExtensionManager, PluginHost, reset_plugin_host

    reset_plugin_host(PluginHost(ExtensionManager(entry_points=lambda: [])))
    try:
        result = runner.invoke(plugin_table.plugins, [])
    finally:
        reset_plugin_host()
    assert "no plugin is installed" in result.output and "hidet-plugin-cpu" in result.output


def test_run_and_compile_in_float16(example, tmp_path):
    """--dtype float16 goes through hf.compile's dtype pass; checked against the float32
    reference at the float16 tolerance (1e-2), also after saving and loading."""
    folder = str(tmp_path / "half")
    result = CliRunner().invoke(main, ["run", example, "--target", "cpu", "--dtype", "float16", "--check",
                                       "--save", folder])
    assert result.exit_code == 0, result.output
    assert "tolerance 0.01" in result.output and "(ok," in result.output
    again = CliRunner().invoke(main, ["run", folder, "--check"])
    assert again.exit_code == 0, again.output
    assert "nothing compiled" in again.output and "tolerance 0.01" in again.output and "(ok," in again.output


def test_check_compares_non_finite_values_by_position_and_the_rest_relatively():
    from hidet_framework.cli.model_check import relative_error

    nan, inf = float("nan"), float("inf")
    ref = np.array([nan, inf, -inf, 4.0, -2.0])
    assert relative_error(ref + np.array([0, 0, 0, 0.004, 0]), ref) == pytest.approx(1e-3)  # 0.004 / max|4|
    assert relative_error(np.full(3, nan), np.full(3, nan)) == 0.0  # nothing finite to compare
    for wrong in ([1.0, inf, -inf, 4.0, -2.0],     # a number where the reference has NaN
                  [nan, nan, -inf, 4.0, -2.0],     # NaN where it has +inf
                  [nan, -inf, -inf, 4.0, -2.0],    # the other infinity
                  [nan, inf, -inf, inf, -2.0],     # an infinity where it is finite
                  [nan, inf, -inf, nan, -2.0]):    # NaN where it is finite
        assert relative_error(np.array(wrong), ref) == inf, wrong
    assert relative_error(np.zeros((2, 3)), np.zeros((3, 2))) == inf
    assert relative_error(np.zeros(0), np.zeros(0)) == 0.0


def test_check_of_a_nan_input_agrees_with_the_reference(example, tmp_path):
    inputs = tmp_path / "nan.npz"
    np.savez(inputs, image=np.full((1, 3, 32, 32), np.nan, np.float32))
    result = CliRunner().invoke(main, ["run", example, "--target", "cpu", "--inputs", str(inputs), "--check"])
    assert result.exit_code == 0 and "(ok," in result.output, result.output
