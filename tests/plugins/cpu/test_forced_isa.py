"""``HIDET_FRAMEWORK_CPU_ISA=avx2``: AVX2 code on an AVX-512 machine (target.py). The
target drops the AVX-512/AMX flags and reports 256-bit vectors, gcc gets
-mno-avx512f, the cache keys differ from native builds, the code still computes the
right values, and a misspelt ISA is refused. On an AVX2 machine forcing AVX2 changes
nothing (faked CPU tables test both kinds of machine on any machine)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from hidet_plugin_cpu import target as cpu_target


@pytest.fixture
def fresh_detect():
    cpu_target.detect_cpu_target.cache_clear()
    yield
    cpu_target.detect_cpu_target.cache_clear()


_AVX512_MACHINE = ("fma", "avx", "avx2", "avx512f", "avx512bw", "amx_tile")
_AVX2_MACHINE = ("fma", "avx", "avx2", "f16c")


def test_avx2_target_has_no_avx512_flags(monkeypatch, fresh_detect):
    monkeypatch.setenv(cpu_target.ISA_ENV, "avx2")
    monkeypatch.setattr(cpu_target, "read_cpu_flags", lambda *a: ("Fake CPU", _AVX512_MACHINE))
    t = cpu_target.detect_cpu_target()
    assert set(t.get("flags", ())) == {"fma", "avx", "avx2"}
    assert t.get("vector_bits") == 256
    assert t.get("model") == "Fake CPU [forced avx2]"
    assert cpu_target.isa_compiler_flags() == ("-mno-avx512f", "-mno-amx-tile")


def test_forcing_avx2_on_an_avx2_machine_changes_nothing(monkeypatch, fresh_detect):
    """Nothing to leave out: the same target, flags and model (so the same cache keys)."""
    monkeypatch.setattr(cpu_target, "read_cpu_flags", lambda *a: ("Fake CPU", _AVX2_MACHINE))
    native = cpu_target.detect_cpu_target()
    cpu_target.detect_cpu_target.cache_clear()
    monkeypatch.setenv(cpu_target.ISA_ENV, "avx2")
    forced = cpu_target.detect_cpu_target()
    assert forced == native and forced.get("model") == "Fake CPU"
    assert cpu_target.isa_compiler_flags() == ()


def test_native_is_the_default(monkeypatch, fresh_detect):
    monkeypatch.delenv(cpu_target.ISA_ENV, raising=False)
    assert cpu_target.forced_isa() is None and cpu_target.isa_compiler_flags() == ()
    monkeypatch.setenv(cpu_target.ISA_ENV, "native")
    assert cpu_target.forced_isa() is None
    _, flags = cpu_target.read_cpu_flags()
    assert cpu_target.detect_cpu_target().get("flags") == flags


def test_unknown_isa_is_refused(monkeypatch):
    monkeypatch.setenv(cpu_target.ISA_ENV, "avx1024")
    with pytest.raises(ValueError, match="avx1024"):
        cpu_target.forced_isa()


_CHILD = textwrap.dedent("""
    import math, os, sys
    import numpy as np
    import hidet_framework as hf
    from hidet_plugin_cpu.build import isa_fingerprint
    n = 4099
    x = hf.symbol((n,), "float32")
    fn = hf.compile(hf.trace(hf.ops.gelu(x), inputs=[x]), target="cpu", space=0)
    a = np.random.default_rng(int(sys.argv[1])).standard_normal(n).astype(np.float32) * 3
    ref = 0.5 * a.astype(np.float64) * (1 + np.vectorize(math.erf)(a.astype(np.float64) / math.sqrt(2)))
    err = float(np.max(np.abs(fn(a) - ref)))
    print("fingerprint", isa_fingerprint(), "err", err)
    assert err < 1e-5, err
""")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_avx2_build_runs_and_keys_differ(tmp_path, rng):
    if "avx2" not in set(cpu_target.read_cpu_flags()[1]):
        pytest.skip("this machine has no AVX2")
    seed = str(int(rng.integers(1 << 30)))
    prints = {}
    for isa in ("avx2", "native"):
        env = dict(os.environ, HIDET_FRAMEWORK_CPU_ISA=isa, HIDET_FRAMEWORK_CACHE=str(tmp_path / "cache"))
        out = subprocess.run([sys.executable, "-c", _CHILD, seed], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
        prints[isa] = out.stdout.split("fingerprint ")[1].split()[0]
    has_avx512 = any(f.startswith("avx512") for f in cpu_target.read_cpu_flags()[1])
    assert (prints["avx2"] != prints["native"]) == has_avx512
