"""Shared test configuration: hypothesis profiles, the `cuda` / `nvcc` markers, and one
fixture for tests that need a plugin host of their own.

Kept small on purpose; put helpers next to the tests that use them unless several test
folders need them.
"""
from __future__ import annotations

import functools
import gc
import importlib.util
import os
import pathlib
import sys
import shutil

import pytest
from hypothesis import HealthCheck, settings

# Derandomized in CI so a red build reproduces; bounded everywhere so `pytest` stays
# fast on CI's two cores. deadline=None: the first example often pays for a C/CUDA
# compile, which is not a performance regression.
settings.register_profile("ci", derandomize=True, max_examples=50, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@functools.cache
def cuda_skip_reason() -> str | None:
    """Why tests marked `cuda` cannot run here, or None when a CUDA device is usable."""
    from hidet_framework.extension import MissingBackendError, plugin_host

    try:
        backend = plugin_host().backend_for("cuda")
    except MissingBackendError as exc:
        return str(exc)
    availability = backend.availability()
    return None if availability.usable else f"CUDA not usable: {availability.reason}"


@functools.cache
def nvcc_skip_reason() -> str | None:
    """Why compile-only CUDA tests cannot run here, or None when NVRTC or nvcc works."""
    if shutil.which("nvcc"):
        return None
    try:
        from cuda.bindings import nvrtc

        # Importing is not enough: the call proves the NVRTC library itself loads.
        err, *_version = nvrtc.nvrtcVersion()
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None
        nvrtc_problem = f"nvrtcVersion() returned {err}"
    except Exception as exc:  # ImportError, or the shared library failing to load
        nvrtc_problem = f"{type(exc).__name__}: {exc}"
    return f"no CUDA compiler: nvcc is not on PATH and NVRTC is unusable ({nvrtc_problem})"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("cuda") is not None:
        reason = cuda_skip_reason()
        if reason:
            pytest.skip(reason)
    if item.get_closest_marker("nvcc") is not None:
        reason = nvcc_skip_reason()
        if reason:
            pytest.skip(reason)


@pytest.fixture
def isolated_plugin_host(monkeypatch: pytest.MonkeyPatch):
    """A fresh process-wide plugin host that autoloads nothing, restored afterwards.

    Register what the test needs with ``host.temporary_plugin(obj)`` or
    ``host.register(obj)``; nothing installed leaks in.
    """
    from hidet_framework.extension import plugin_host, reset_plugin_host

    previous = plugin_host()  # cheap: hosts load lazily; restored so later tests reuse it
    monkeypatch.setenv("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", "1")
    reset_plugin_host()
    try:
        yield plugin_host()
    finally:
        reset_plugin_host(previous)


@pytest.fixture
def rng(request):
    """Fresh random inputs every run; the seed is printed (shown when the test fails).
    (tests/graph and tests/plugins keep their own; this serves every other folder.)"""
    import numpy as np

    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed} for {request.node.name}")
    return np.random.default_rng(seed)


# -- suite time (issue 11): the longest tests start first ---------------------------------
# pytest-xdist's default `--dist load` hands the first quarter of the collection out one
# test at a time, alternately, and the rest to whichever worker asks. In collection
# order the compile-everything checks come late (tests/plugins/...), so a worker could
# start one of them near the end and the other worker would wait for it. Moving them to
# the front, longest first, makes them alternate between the workers from the start and
# lets the many short tests fill the gaps. The order of tests changes, nothing else.
# Node ids (or their prefixes), longest first, from `pytest --durations` (docs/testing.md).
LONGEST_FIRST = (  # wall seconds in the cold CI run of a95b894 at load 11 (session 7)
    "tests/plugins/matmul/test_cuda_templates.py::test_every_space2_candidate_compiles_to_sm90",  # 1165
    "tests/plugins/matmul/test_cuda_short_m.py::test_every_space2_candidate_compiles_to_sm90",  # 1054
    "tests/fusion/test_properties.py::test_fused_unfused_and_reference_agree[cpu]",  # 432
    "tests/plugins/matmul/test_cuda_hopper_ws.py::test_every_space2_candidate_compiles_for_sm90a",  # 287
    "tests/test_packaging.py::test_every_distribution_builds_a_wheel_and_two_install_fresh",  # 159
    "tests/fusion/test_attention_mma.py::test_every_case_and_grafted_blocks_compile",  # 34 (quiet, session 8)
    "tests/fusion/test_properties.py::test_fused_unfused_and_reference_agree[evaluator]",  # 134
    "tests/plugins/reduce/test_cuda_templates.py::test_every_space2_candidate_compiles_to_sm90",  # 126
    "tests/plugins/matmul/test_cuda_defaults.py::test_chosen_defaults_compile_to_sm90a",  # 96
    "tests/plugins/cpu/test_huge_buffers.py::test_relu_int8_beyond_2_31_elements",  # 95
)


def _longest_first_rank(nodeid: str) -> int:
    for rank, prefix in enumerate(LONGEST_FIRST):
        if nodeid.startswith(prefix):
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    _skip_avx2_twins_of_native(items)
    if hasattr(config, "workerinput"):  # an xdist worker (its collection is the order); `-n 0`: as written
        items.sort(key=lambda item: _longest_first_rank(item.nodeid))  # stable: the rest keep their order


# -- suite time (issue 11): no second run of the same code on an AVX2 machine -------------
# Tests parametrized ``isa`` over "native" and "avx2" build AVX2 code beside the machine's
# own (a 256-bit target, gcc told -mno-avx512f). Where the machine's own ISA is AVX2 (no
# AVX-512), both build the same source with the same effective flags: the "avx2" twin
# checks nothing "native" does not, and is skipped with that reason.
@functools.cache
def _native_isa_is_avx2() -> bool:
    try:
        from hidet_plugin_cpu.target import detect_cpu_target
    except ImportError:
        return False
    flags = set(detect_cpu_target().get("flags", ()))
    return "avx2" in flags and not any(f.startswith("avx512") for f in flags)


def _is_avx2_twin(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("isa") != "avx2":
        return False
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        if names == ["isa"] and "native" in [getattr(v, "values", (v,))[0] for v in mark.args[1]]:
            return True
    return False


def _skip_avx2_twins_of_native(items: list) -> None:
    twins = [item for item in items if _is_avx2_twin(item)]
    if twins and _native_isa_is_avx2():
        skip = pytest.mark.skip(reason="this machine's own ISA is AVX2: the 'native' case builds the same code")
        for item in twins:
            item.add_marker(skip)


# -- suite time (issue 11): no frame-stack chunk thrashing on CPython 3.11/3.12 -------------
# tests/stack_chunk_cache.py says why: the IR's recursive walks can map and unmap a 16 KiB
# chunk of the interpreter's frame stack on every call; a C shim keeps one chunk for reuse
# (what CPython 3.13 does). It changes how the interpreter gets that memory, nothing a
# test checks; it is a no-op on other versions or without a C compiler.
def _stack_chunk_cache():
    name = "hidet_tests_stack_chunk_cache"  # one module per process (tests/ is not a package)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, pathlib.Path(__file__).with_name("stack_chunk_cache.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


# -- suite time (issue 11): fewer garbage-collector passes ----------------------------------
# Lowering, the simplifier and the IR evaluator allocate millions of short-lived IR nodes;
# with CPython's default first-generation threshold (700 allocations) the collector runs
# thousands of times per candidate and walks the young objects each time (docs/testing.md,
# "Session 9"). A larger threshold only makes the passes rarer (cycles are still
# collected, and `gc.collect()` works as before); fork pools inherit it. Test processes
# only: the library leaves the interpreter's settings alone.
GC_THRESHOLD = (10_000, 10, 10)


def pytest_configure(config: pytest.Config) -> None:
    _stack_chunk_cache().install()
    gc.set_threshold(*GC_THRESHOLD)
