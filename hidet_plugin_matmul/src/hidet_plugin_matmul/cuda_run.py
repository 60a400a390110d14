"""A small harness that runs a CUDA template candidate before the driver does: used by
the GPU tests and bench/gpu_matmul_quick.py.

    st = template.build(task, attributes, params, target)
    source = candidate_source(st, target)           # lower + codegen (any machine)
    loaded = backend.compile(lower(st.module, "cuda"), target)
    run_scheduled(loaded, st, [a, b], [c], device)  # launches in order, workspace allocated

`compile_sources` builds many candidates' cubins in parallel processes (through the
build cache), which is what both the compile-only test and the benchmark's tuning use.
"""
from __future__ import annotations

import multiprocessing
import os
from typing import Any, Sequence


def candidate_source(scheduled: Any, target: Any) -> str:
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cuda.codegen import generate

    return generate(lower(scheduled.module, "cuda"), target)


def _build_one(job: tuple) -> tuple:
    import time

    from hidet_plugin_cuda.nvrtc_build import build_cubin

    index, template, task, attributes, params, target, arch = job
    started = time.perf_counter()
    try:
        scheduled = template.build(task, attributes, params, target)
        source = candidate_source(scheduled, target)
        result = build_cubin(source, arch=arch, name=f"cand{index}", target_fingerprint=target.fingerprint())
        return index, result.path, None, time.perf_counter() - started
    except Exception as exc:  # a failing candidate is reported, not fatal
        return index, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started


def compile_sources(jobs: Sequence[tuple], arch: str = "sm_90", workers: int | None = None) -> list[tuple]:
    """jobs: (template, task, attributes, params, target); returns, in order,
    (index, cubin path or None, error or None, seconds) for each."""
    full = [(i, *job, arch) for i, job in enumerate(jobs)]
    workers = workers or min(len(full), len(os.sched_getaffinity(0))) or 1
    if workers == 1:
        return [_build_one(j) for j in full]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return sorted(pool.imap_unordered(_build_one, full), key=lambda r: r[0])


def compile_scheduled(scheduled: Any, backend: Any, target: Any) -> Any:
    from hidet_framework.lowering.pipeline import lower

    return backend.compile(lower(scheduled.module, "cuda"), target)


def run_scheduled(loaded: Any, scheduled: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                  device: Any, workspace: Sequence[Any] | None = None) -> list:
    """Queue the launches of `scheduled` on the default stream; returns the workspace
    buffers (allocated when not given) so callers can reuse them across runs."""
    if workspace is None:
        workspace = [device.empty(w.shape, w.dtype.name) for w in scheduled.workspace]
    pools = {"input": list(inputs), "output": list(outputs), "workspace": list(workspace)}
    for launch in scheduled.launches:
        args = [pools[ref.kind][ref.index] for ref in launch.buffers] + list(launch.scalars)
        loaded[c_identifier_of(launch.function)](*args)
    return list(workspace)


def c_identifier_of(name: str) -> str:
    from hidet_framework.backend.naming import c_identifier

    return c_identifier(name)
