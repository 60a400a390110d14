"""Concurrent builds across processes, the detected target, and plugin registration."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

from hidet_framework.backend.contract import Backend, Target

CHILD = textwrap.dedent(r"""
    from hidet_plugin_cpu.build import build_shared_library
    source = "#include <stdint.h>\nvoid twice(double *x, int64_t n) { for (int64_t i = 0; i < n; i++) x[i] *= 2; }\n"
    print(build_shared_library(source, name="twice"))
""")


def test_two_processes_build_one_artifact(cpu_backend, isolated_build_cache):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    results = [ast.literal_eval(out.strip()) for out, _ in outs]
    assert results[0][0] == results[1][0]
    assert sorted(hit for _, hit in results) == [False, True]  # exactly one compiled
    entries = [d for d in os.listdir(isolated_build_cache / "builds") if len(d) == 2]
    assert len(entries) == 1
    entry = os.path.dirname(results[0][0])
    assert sorted(os.listdir(entry)) == ["artifact.so", "meta.json", "source.c"]


def test_detected_target_is_sane(cpu_backend):
    target = cpu_backend.detect_target()
    assert isinstance(target, Target) and target.kind == "cpu"
    assert 1 <= target["cores"] <= (os.cpu_count() or 1)
    assert target["vector_bits"] in (128, 256, 512)
    assert 4096 <= target["l1d_bytes"] <= target["l2_bytes"] <= 1 << 34
    assert isinstance(target["fma"], bool)
    assert target.fingerprint() == cpu_backend.detect_target().fingerprint()


def test_target_parsers_fall_back(tmp_path):
    from hidet_plugin_cpu.target import (DEFAULT_CACHE_BYTES, read_cache_sizes, read_cpu_flags,
                                         vector_bits_from_flags)

    assert read_cpu_flags(str(tmp_path / "missing")) == ("", ())
    assert read_cache_sizes(str(tmp_path / "missing")) == DEFAULT_CACHE_BYTES
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Fake CPU\nflags\t\t: sse2 fma avx2\n\nprocessor\t: 1\nflags\t: avx512f\n")
    assert read_cpu_flags(str(info)) == ("Fake CPU", ("avx2", "fma", "sse2"))
    assert vector_bits_from_flags({"avx512f"}) == 512
    assert vector_bits_from_flags({"avx2"}) == 256
    assert vector_bits_from_flags({"sse2"}) == 128
    assert vector_bits_from_flags(set()) == 128
    index = tmp_path / "cache" / "index0"
    index.mkdir(parents=True)
    (index / "level").write_text("2\n")
    (index / "type").write_text("Unified\n")
    (index / "size").write_text("2048K\n")
    assert read_cache_sizes(str(tmp_path / "cache"))["l2_bytes"] == 2 * 1024 * 1024


def test_plugin_registers_cpu_backend():
    import hidet_plugin_cpu

    registered = {}
    hidet_plugin_cpu.register_backends(lambda name, obj: registered.__setitem__(name, obj))
    backend = registered["cpu"]
    assert isinstance(backend, Backend) and backend.name == "cpu" and backend.target_kinds == ("cpu",)


def test_plugin_import_survives_missing_gcc(tmp_path):
    """Importing the plugin must not need gcc; availability() reports it instead."""
    env = dict(os.environ, PATH=str(tmp_path), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    code = ("import hidet_plugin_cpu as p; a = p.CpuBackend().availability(); "
            "print(a.usable, '|', a.reason)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("False |") and "not found" in out.stdout


def test_device_interface(cpu_backend, rng):
    device = cpu_backend.device
    x = device.empty((3, 5), "float32")
    assert x.shape == (3, 5) and x.dtype == "float32" and x.ctypes.data % 64 == 0 and x.flags.c_contiguous
    host = rng.standard_normal((4, 7))
    on_device = device.from_numpy(host)
    assert on_device is not host and on_device.ctypes.data % 64 == 0
    back = device.to_numpy(on_device)
    assert back is not on_device and np_equal(back, host)
    device.synchronize()
    times = device.time(lambda: None, warmup=1, repeat=5)
    assert len(times) == 5 and all(0 <= t < 1 for t in times)


def np_equal(a, b):
    import numpy as np

    return np.array_equal(a, b)


def test_plugin_host_finds_cpu_backend(monkeypatch):
    """Through the real seam: a private plugin host with only this plugin registered."""
    import hidet_plugin_cpu
    from hidet_framework.extension.host import PluginHost

    monkeypatch.setenv("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", "1")
    host = PluginHost()
    host.register(hidet_plugin_cpu, "cpu")
    backend = host.backend_for("cpu")
    assert backend.name == "cpu" and backend.availability().usable in (True, False)
