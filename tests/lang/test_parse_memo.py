"""A script function's source is found and parsed once per `def` (issue 11, session 17:
templates define their kernels inside `build`, so every candidate traced the same `def`
again). Tracing still reads each closure afresh, string annotations still work the
second time, and the memo stays bounded."""
from __future__ import annotations

import importlib

from hidet_framework.ir.equality import assert_structural_equal
from hidet_framework.lang import f32, script

script_module = importlib.import_module("hidet_framework.lang.script")


def _build(n: int, scale: float):
    @script
    def k(a: "f32[n]", b: f32[n]):
        for i in range(n):
            b[i] = a[i] * scale
    return k


def test_each_def_is_parsed_once_and_traced_with_its_own_closure(monkeypatch):
    parsed = []
    real = script_module._parse_source
    monkeypatch.setattr(script_module, "_parse_source", lambda fn: parsed.append(fn) or real(fn))
    monkeypatch.setattr(script_module, "_PARSED", {})
    first, second, again = _build(4, 2.0), _build(8, 3.0), _build(4, 2.0)
    assert len(parsed) == 1
    assert "8" in str(second.ir) and "3.0" in str(second.ir) and "2.0" not in str(second.ir)
    assert_structural_equal(first.ir, again.ir)
    assert_structural_equal(first.ir, script(_fresh_def(4, 2.0)).ir)
    assert len(parsed) == 2


def _fresh_def(n: int, scale: float):
    """The same kernel from another `def` (parsed on its own), to compare with the memo's."""
    def k(a: "f32[n]", b: f32[n]):
        for i in range(n):
            b[i] = a[i] * scale
    return k


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(script_module, "_PARSED", {})
    monkeypatch.setattr(script_module, "_PARSED_LIMIT", 1)
    _build(4, 2.0)
    script(_fresh_def(4, 2.0))
    assert len(script_module._PARSED) <= 1
