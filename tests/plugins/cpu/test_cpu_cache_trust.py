"""Issue 12 items 4 and 6 on the CPU backend: a library in the cache is loaded only
from checked bytes, and gcc runs under a time limit."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from hidet_framework.backend.private_files import UnsafeCacheFile

from .test_cpu_build_and_run import VADD_SOURCE, vadd_signature

OTHER_SOURCE = VADD_SOURCE.replace("c[i] = a[i] + b[i];", "c[i] = a[i] - b[i];")


def test_group_writable_cached_library_is_not_loaded(cpu_backend):
    target = cpu_backend.detect_target()
    artifact = cpu_backend.build(VADD_SOURCE, target)
    os.chmod(artifact.path, 0o775)
    with pytest.raises(UnsafeCacheFile, match="writable by group or others"):
        cpu_backend.load(artifact, [vadd_signature()])


def test_swapped_library_is_not_loaded_even_with_a_forged_sidecar(cpu_backend):
    """Replacing artifact.so (and its sidecar hash) through a writable entry is what
    the issue's attacker did; an entry that is not private is refused before hashing,
    and a private one whose bytes differ from the sidecar is refused too."""
    target = cpu_backend.detect_target()
    good = cpu_backend.build(VADD_SOURCE, target)
    evil = cpu_backend.build(OTHER_SOURCE, target)
    os.replace(evil.path, good.path)
    with pytest.raises(UnsafeCacheFile, match="does not match its sidecar"):
        cpu_backend.load(good, [vadd_signature()])


def test_library_runs_from_the_checked_copy(cpu_backend, rng):
    target = cpu_backend.detect_target()
    artifact = cpu_backend.build(VADD_SOURCE, target)
    module = cpu_backend.load(artifact, [vadd_signature()])
    # the cache file changing after the load cannot change the loaded code
    os.chmod(artifact.path, 0o700)
    with open(artifact.path, "wb") as f:
        f.write(b"\0" * 64)
    a, b = rng.standard_normal(11).astype(np.float32), rng.standard_normal(11).astype(np.float32)
    c = np.full(11, np.nan, np.float32)
    module["vadd"](a, b, c, 11)
    np.testing.assert_allclose(c, a.astype(np.float64) + b, rtol=1e-6)
    second = cpu_backend.load(cpu_backend.build(OTHER_SOURCE, target), [vadd_signature()])
    second["vadd"](a, b, c, 11)  # a second library is not served the first one
    np.testing.assert_allclose(c, a.astype(np.float64) - b, rtol=1e-6)


def test_compiler_timeout_is_enforced_and_named(tmp_path, monkeypatch):
    from hidet_plugin_cpu import build

    slow = tmp_path / "slow-cc"
    # gcc for everything (probes of the toolchain), but a compile of the kernel hangs
    slow.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = source.c ] && exec sleep 600; done\nexec gcc "$@"\n')
    slow.chmod(0o700)
    monkeypatch.setattr(build, "COMPILER", str(slow))
    monkeypatch.setenv("HIDET_FRAMEWORK_CC_TIMEOUT", "1")
    started = time.monotonic()
    with pytest.raises(build.CompilerTimeout, match="within 1 s.*HIDET_FRAMEWORK_CC_TIMEOUT"):
        build.build_shared_library("int main;", name="slow")
    # far below the hang (600 s), with room for the toolchain probes on a loaded machine
    assert time.monotonic() - started < 300


@pytest.mark.parametrize("text", ["0", "-3", "soon", "inf"])
def test_bad_compiler_timeout_is_refused(monkeypatch, text):
    from hidet_plugin_cpu import build

    monkeypatch.setenv("HIDET_FRAMEWORK_CC_TIMEOUT", text)
    with pytest.raises(ValueError, match="HIDET_FRAMEWORK_CC_TIMEOUT"):
        build.compiler_timeout()
