"""The CPU defaults derive from the machine's feature table (issue 15 item 5), checked
for machines this box is not: an AVX2-only Zen 3, an AVX-512 Zen 4 (this box), an
AVX-512 + AMX Sapphire Rapids, an SSE-only x86-64 and an ARM core. Each gets a faked
``/proc/cpuinfo`` and cache sysfs; the target read from them decides the vector width,
and from it the level-0 defaults of the CPU templates (matmul register tile, depthwise
accumulators, reduce-row lanes). The generated C of those defaults is then compiled
for that machine's ISA (``-march=haswell`` / ``sapphirerapids`` / ``x86-64``
instead of ``native``) and the assembly checked for the registers that ISA has: an
AVX2 build must not touch a zmm register, an SSE build not even a ymm one. There is
AMX matmul candidate space of its own: an AMX machine gets the AVX-512 defaults (its
amx flags stay in the target's flags, so its builds are keyed apart, and the packed
template builds bfloat16 x bfloat16 with tiles: cpu_amx_tiles.py), provided Linux grants
the process the tile permission (faked granted here; refused: the amx flags are
dropped); ``HIDET_FRAMEWORK_CPU_ISA=avx2`` on it drops avx512 and amx.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import hidet_framework as hf
from hidet_framework.lang import attrs, f32, i32, parallel, script, script_module
from hidet_framework.ir.math_functions import erf, exp, tanh
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_cpu import build, target as cpu_target
from hidet_plugin_cpu.codegen import generate

BASE = "fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt"
MACHINES = {  # name: (cpuinfo flags / Features, L1d, L2, gcc -march, vector bits)
    "zen3_avx2": (BASE + " avx fma avx2 f16c bmi2", "32K", "512K", "haswell", 256),
    "zen4_avx512": (BASE + " avx fma avx2 avx512f avx512bw avx512vl avx512_bf16", "32K", "1024K", None, 512),
    "spr_amx": (BASE + " avx fma avx2 avx512f avx512bw avx512vl avx512_bf16 amx_tile amx_bf16 amx_int8",
                "48K", "2048K", "sapphirerapids", 512),
    "x86_sse": (BASE, "32K", "256K", "x86-64", 128),
    "arm_neon": ("fp asimd evtstrm aes crc32 atomics", "64K", "1024K", None, 128),
}


def _fake_machine(tmp_path, name):
    flags, l1, l2, _, _ = MACHINES[name]
    key = "Features" if name.startswith("arm") else "flags"
    info = tmp_path / f"cpuinfo_{name}"
    info.write_text(f"processor\t: 0\nmodel name\t: Fake {name}\n{key}\t\t: {flags}\n\nprocessor\t: 1\n")
    cache = tmp_path / f"cache_{name}"
    for index, (level, kind, size) in enumerate([("1", "Data", l1), ("2", "Unified", l2), ("3", "Unified", "32768K")]):
        d = cache / f"index{index}"
        d.mkdir(parents=True)
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    return str(info), str(cache)


@pytest.fixture
def faked_target(tmp_path, monkeypatch):
    """detect_cpu_target() as it reads on the named machine."""
    read_flags, read_cache = cpu_target.read_cpu_flags, cpu_target.read_cache_sizes

    def make(name, machine="x86_64", permitted=True):
        info, cache = _fake_machine(tmp_path, name)
        monkeypatch.setattr(cpu_target, "read_cpu_flags", lambda path="/proc/cpuinfo": read_flags(info))
        monkeypatch.setattr(cpu_target, "read_cache_sizes", lambda path="": read_cache(cache))
        monkeypatch.setattr(cpu_target.platform, "machine", lambda: "aarch64" if name.startswith("arm") else machine)
        monkeypatch.setattr(cpu_target, "amx_permission", lambda: permitted)
        cpu_target.detect_cpu_target.cache_clear()
        return cpu_target.detect_cpu_target()
    yield make
    cpu_target.detect_cpu_target.cache_clear()


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_target_from_the_feature_table(faked_target, monkeypatch, name):
    monkeypatch.delenv(cpu_target.ISA_ENV, raising=False)
    flags, l1, l2, _, bits = MACHINES[name]
    t = faked_target(name)
    assert t["vector_bits"] == bits and t["model"] == f"Fake {name}"
    assert t["fma"] == ("fma" in flags.split() or name.startswith("arm"))
    assert t["l1d_bytes"] == int(l1[:-1]) * 1024 and t["l2_bytes"] == int(l2[:-1]) * 1024
    assert set(t["flags"]) == set(flags.split())
    assert t.arch == ("aarch64" if name.startswith("arm") else "x86-64")


def test_defaults_follow_the_vector_width(faked_target, monkeypatch):
    from hidet_plugin_matmul.cpu_space import default_params
    from hidet_plugin_ops.cpu_depthwise_conv import depthwise_space
    from hidet_plugin_reduce.cpu_rows import cpu_space

    monkeypatch.delenv(cpu_target.ISA_ENV, raising=False)
    seen = {}
    for name in MACHINES:
        t = faked_target(name)
        mm, dw, rows = default_params(t), depthwise_space(t, 0)[0], cpu_space(t, 0)[0]
        lanes = t["vector_bits"] // 32
        registers = 32 if t["vector_bits"] >= 512 else 16
        assert mm["lanes"] == lanes and mm["nr"] % lanes == 0 and rows["lanes"] == 2 * lanes
        # the register tile fits the register file: accumulators + B vectors + a broadcast
        assert mm["mr"] * (mm["nr"] // lanes) + mm["nr"] // lanes + 1 <= registers
        assert dw["unroll"] + 9 + 1 <= max(registers, dw["unroll"] + 10) and dw["unroll"] == (8 if registers == 32 else 6)
        seen[name] = (mm["mr"], mm["nr"] // lanes, mm["kc"], dw["unroll"], mm["order"])
    # AVX2: 6 x 16 in the GotoBLAS order (a 256-deep B micro-panel in half of the 32 KB
    # L1; the 4 x 24 tile with its A micro-panel in L1 was 0.80-0.88x numpy, session 14);
    # AVX-512: 14 x 32 with its A micro-panel in L1 (a B micro-panel only 128 deep)
    assert seen["zen3_avx2"][:3] + seen["zen3_avx2"][4:] == (6, 2, 256, "b_in_l1"), seen
    assert seen["zen4_avx512"][:3] + seen["zen4_avx512"][4:] == (14, 2, 288, "a_in_l1"), seen
    assert seen["spr_amx"][:2] == seen["zen4_avx512"][:2]        # the AVX-512 default (AMX kernels override mr, nr)
    assert seen["spr_amx"][4] == "a_in_l1"                       # 48K L1: a B micro-panel 192 deep, < 256
    assert seen["spr_amx"][2] > seen["zen4_avx512"][2]           # 48K L1: deeper k blocks


def test_amx_flags_dropped_where_the_tile_permission_is_refused(faked_target, monkeypatch):
    monkeypatch.delenv(cpu_target.ISA_ENV, raising=False)
    t = faked_target("spr_amx", permitted=False)
    assert not any(f.startswith("amx") for f in t["flags"]) and "avx512_bf16" in t["flags"]
    assert t["model"].endswith("[amx not permitted]")


def test_forced_avx2_on_an_amx_machine_drops_avx512_and_amx(faked_target, monkeypatch):
    monkeypatch.setenv(cpu_target.ISA_ENV, "avx2")
    t = faked_target("spr_amx")
    assert t["vector_bits"] == 256 and not any(f.startswith(("avx512", "amx")) for f in t["flags"])
    assert "avx2" in t["flags"] and "[forced avx2]" in t["model"]


@script
def math_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = erf(a[i]) + tanh(a[i]) * exp(a[i])


def _sources(target):
    """Generated C of the level-0 defaults on `target`: vector math (own erf and tanh,
    libmvec exp), the packed matmul and the depthwise convolution."""
    from hidet_plugin_matmul.cpu_space import default_params
    from hidet_plugin_matmul.cpu_template import CpuPackedMatmul
    from hidet_plugin_ops.cpu_depthwise_conv import CpuDepthwiseConv2d, depthwise_space

    out = {"math": generate(lower(script_module(math_k, name="math_k"), "cpu"))}
    a, b = hf.symbol((61, 67), "float32"), hf.symbol((67, 71), "float32")
    y = hf.ops.matmul(a, b)
    st = CpuPackedMatmul().build(y.producer.task, dict(y.producer.attributes), default_params(target), target)
    out["matmul"] = generate(lower(st.module, "cpu"))
    x, w = hf.symbol((1, 24, 29, 29), "float32"), hf.symbol((24, 1, 3, 3), "float32")
    y = hf.ops.conv2d(x, w, None, stride=2, padding=1, groups=24)
    st = CpuDepthwiseConv2d().build(y.producer.task, dict(y.producer.attributes), depthwise_space(target, 0)[0], target)
    out["depthwise"] = generate(lower(st.module, "cpu"))
    return out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("name", ["zen3_avx2", "spr_amx", "x86_sse"])
def test_defaults_compile_for_that_isa(faked_target, monkeypatch, tmp_path, name):
    monkeypatch.delenv(cpu_target.ISA_ENV, raising=False)
    if os.uname().machine not in ("x86_64", "amd64"):
        pytest.skip("x86 compile check")
    march = MACHINES[name][3]
    target = faked_target(name)
    for kind, source in _sources(target).items():
        path = tmp_path / f"{kind}.c"
        path.write_text(source)
        flags = [f"-march={march}" if f == "-march=native" else f for f in build.CFLAGS if f != "-shared"]
        asm = subprocess.run(["gcc", *flags, "-S", "-o", "-", str(path)],
                             capture_output=True, text=True, timeout=600)
        assert asm.returncode == 0, f"{name} {kind}: {asm.stderr[-2000:]}"
        zmm, ymm = bool(re.search(r"%zmm\d", asm.stdout)), bool(re.search(r"%ymm\d", asm.stdout))
        if target["vector_bits"] == 512:
            # the templates' own vector types are 512-bit; gcc's loop vectorizer prefers
            # 256-bit vectors on Intel AVX-512 cores (-mprefer-vector-width=256)
            assert zmm or (kind == "math" and ymm), f"{name} {kind}: no AVX-512 code"
        elif target["vector_bits"] == 256:
            assert ymm and not zmm, f"{name} {kind}: expected AVX2 code only"
        else:
            assert not ymm and not zmm, f"{name} {kind}: expected SSE code only"
        if kind == "math" and cpu_target.platform.system() == "Linux":
            # libmvec's variant of the width gcc vectorized with (declared where this machine has it)
            variants = {512: ("_ZGVeN16v_expf", "_ZGVdN8v_expf"), 256: ("_ZGVdN8v_expf",), 128: ("_ZGVbN4v_expf",)}
            if "extern float expf(" in source:
                assert any(v in asm.stdout for v in variants[target["vector_bits"]]), f"{name}: expf stayed scalar"
