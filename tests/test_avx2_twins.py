"""tests/conftest.py skips the "avx2" case of an ``isa`` parametrization over "native" and
"avx2" where the machine's own ISA is AVX2 (both build the same code); only that case,
only there. Fake items and a faked machine, so both kinds of machine are checked here."""
from __future__ import annotations

import pathlib
import sys
from types import SimpleNamespace

import pytest

_CONFTEST = str(pathlib.Path(__file__).with_name("conftest.py"))
conftest = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == _CONFTEST)


class FakeItem:
    def __init__(self, isa, values, names="isa"):
        self.callspec = SimpleNamespace(params={"isa": isa})
        self._marks = [pytest.mark.parametrize(names, values).mark]
        self.added = []

    def iter_markers(self, name):
        return iter(self._marks if name == "parametrize" else [])

    def add_marker(self, mark):
        self.added.append(mark)


def _skipped(item):
    return [m for m in item.added if m.name == "skip"]


@pytest.mark.parametrize("native_is_avx2", [True, False])
def test_only_the_avx2_twin_of_native_is_skipped_and_only_on_avx2(monkeypatch, native_is_avx2):
    monkeypatch.setattr(conftest, "_native_isa_is_avx2", lambda: native_is_avx2)
    twin = FakeItem("avx2", ["native", "avx2"])
    twin_param = FakeItem("avx2", [pytest.param("native"), pytest.param("avx2", id="a2")])
    native = FakeItem("native", ["native", "avx2"])
    fake_targets = FakeItem("avx2", ["avx512", "avx2"])          # fixed fake targets: no twin
    other_name = FakeItem("avx2", [("native", 1), ("avx2", 2)], names="isa,n")
    plain = SimpleNamespace(nodeid="t", add_marker=lambda m: pytest.fail("no callspec: nothing to skip"))
    conftest._skip_avx2_twins_of_native([twin, twin_param, native, fake_targets, other_name, plain])
    assert bool(_skipped(twin)) == native_is_avx2 and bool(_skipped(twin_param)) == native_is_avx2
    assert not _skipped(native) and not _skipped(fake_targets) and not _skipped(other_name)
    if native_is_avx2:
        assert "same code" in _skipped(twin)[0].kwargs["reason"]


def test_the_machine_reading_follows_the_target(monkeypatch):
    from hidet_plugin_cpu import target as cpu_target

    for flags, want in ((("avx", "avx2", "fma"), True), (("avx2", "avx512f", "fma"), False), (("sse2",), False)):
        cpu_target.detect_cpu_target.cache_clear()
        conftest._native_isa_is_avx2.cache_clear()
        monkeypatch.setattr(cpu_target, "read_cpu_flags", lambda *a, f=flags: ("Fake CPU", f))
        try:
            assert conftest._native_isa_is_avx2() is want, flags
        finally:
            cpu_target.detect_cpu_target.cache_clear()
            conftest._native_isa_is_avx2.cache_clear()
