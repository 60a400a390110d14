"""ONNX's own backend node tests (onnx.backend.test, kind "node") through
HidetBackend on the cpu target, for every test whose ops this frontend claims.
Excluded tests (conformance_exclusions.py) are skipped with their reason, and so are
tests needing an operator whose plugin is not installed (reported by name)."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

conformance = pytest.importorskip("hidet_plugin_onnx.conformance")

# conformance.node_cases(), generated once per session and shared by the xdist workers
_spec = importlib.util.spec_from_file_location(
    "onnx_shared_node_cases", pathlib.Path(__file__).with_name("shared_node_cases.py"))
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

_CASES = [c for c in _shared.node_cases() if conformance.is_claimed(c)]


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("HIDET_FRAMEWORK_QUIET", "1")


@pytest.mark.onnx_node
@pytest.mark.parametrize("case", _CASES, ids=[c.name for c in _CASES])
def test_node(case):
    result = conformance.run_case(case)
    if result.status in ("excluded", "unavailable"):
        pytest.skip(f"{result.status}: {result.detail}")
    assert result.status == "passed", result.detail


def test_the_claimed_tests_cover_every_claimed_op():
    covered = {conformance.op_of(c) for c in _CASES}
    from hidet_plugin_onnx.op_table import CONVERTERS

    # every claimed op has node tests of its own (an op ONNX tests only inside others'
    # tests would need listing here)
    assert set(CONVERTERS) <= covered, sorted(set(CONVERTERS) - covered)


def test_exclusions_all_have_a_reason_and_match_a_test():
    names = [c.name for c in _shared.node_cases()]
    import re

    from hidet_plugin_onnx.conformance_exclusions import EXCLUSIONS

    for pattern, reason in EXCLUSIONS:
        assert len(reason) > 15, pattern
        assert any(re.fullmatch(pattern, n) for n in names), f"exclusion {pattern!r} matches no node test"
