"""Build a scheduled task, bind its launches to buffers, run it: the one place that does.

A `ScheduledTask` (an IR module and the launches that run it over input, output and
workspace buffers) becomes runnable in three steps, each a function here:

    source = generate_source(scheduled, backend, target)      # lower + codegen
    built = build_scheduled(scheduled, backend, target)       # + build (cached on disk)
    compiled = load_scheduled(task, scheduled, backend, target, built)   # + load
    compiled = compile_scheduled(task, scheduled, backend, target)       # all three

and `CompiledTask` binds each launch's function to buffers and runs the launches in
order. The driver (one task, a fusion group), the tuner's build workers and timing,
the compiled graph, tests and benchmarks all go through these; nothing else lowers,
builds or binds a scheduled task. `build_in_parallel` builds many candidates at once
(compile-only checks). Backends are used only through their contract
(``hidet_framework.backend.contract.Backend``).
"""
from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from hidet_framework.backend.signature import numpy_dtype
from hidet_framework.compute.task import Task
from hidet_framework.schedule.scheduled_task import ScheduledTask

__all__ = ["CompiledTask", "GraphInputError", "generate_source", "build_scheduled", "load_scheduled",
           "compile_scheduled", "build_in_parallel"]


class GraphInputError(ValueError):
    """A compiled graph or task was called with the wrong number, dtypes or shapes of inputs."""


def _lowered(scheduled: ScheduledTask, target: Any) -> Any:
    from hidet_framework.lowering.pipeline import lower

    return lower(scheduled.module, target.kind)


def generate_source(scheduled: ScheduledTask, backend: Any, target: Any) -> str:
    """The source code `backend` prints for `scheduled` on `target` (any machine)."""
    return backend.codegen(_lowered(scheduled, target), target)


def build_scheduled(scheduled: ScheduledTask, backend: Any, target: Any) -> tuple:
    """(lowered module, artifact): lower, codegen and build (through the build cache).
    Picklable, so the tuner's build workers return it."""
    lowered = _lowered(scheduled, target)
    return lowered, backend.build(backend.codegen(lowered, target), target, name=lowered.name)


def load_scheduled(task: Task, scheduled: ScheduledTask, backend: Any, target: Any, built: tuple) -> "CompiledTask":
    """The CompiledTask of what `build_scheduled` returned."""
    lowered, artifact = built
    compiled = CompiledTask(task, scheduled, backend.load(artifact, lowered), backend.device, target.kind)
    compiled.artifact = artifact  # what fn.save() copies (saved_graph.py)
    return compiled


def compile_scheduled(task: Task, scheduled: ScheduledTask, backend: Any, target: Any) -> "CompiledTask":
    """Lower, codegen, build and load `scheduled`."""
    return load_scheduled(task, scheduled, backend, target, build_scheduled(scheduled, backend, target))


class CompiledTask:
    """A task compiled for one target: launches bound to the backend's functions.

    :param task: the task. :param scheduled: how it was scheduled.
    :param functions: name -> callable (a LoadedModule). :param device: memory/copies.
    :param target: the target kind. ``tuning``: the TuningResult that chose the
        template candidate (set by the driver; None when the auto-scheduler ran).
    """

    def __init__(self, task: Task, scheduled: ScheduledTask, functions: Any, device: Any, target: str) -> None:
        self.task, self.scheduled, self.device, self.target = task, scheduled, device, target
        self.tuning: Any = None
        self.workspace = tuple(scheduled.workspace)
        self._functions = {launch.function: functions[launch.function] for launch in scheduled.launches}

    def bind(self, inputs: Sequence[Any], outputs: Sequence[Any],
             workspace: Sequence[Any] = ()) -> list[tuple[Callable[..., None], tuple]]:
        """(function, arguments) per launch, for buffers fixed once (a compiled graph
        binds every launch at compile time and then only calls ``fn(*args)``)."""
        for kind, given, want in (("input", inputs, len(self.task.inputs)), ("output", outputs, len(self.task.outputs)),
                                  ("workspace", workspace, len(self.workspace))):
            if len(given) != want:
                raise ValueError(f"task {self.task.name!r} takes {want} {kind} buffers, got {len(given)}")
        return [(self._functions[name], buffers + scalars)
                for name, buffers, scalars in self.scheduled.bind(inputs, outputs, workspace)]

    def allocate_workspace(self) -> list[Any]:
        return [self.device.empty(w.shape, w.dtype.name) for w in self.workspace]

    def run(self, inputs: Sequence[Any], outputs: Sequence[Any], workspace: Sequence[Any] | None = None) -> None:
        """Run the launches on device buffers (workspace allocated when not given)."""
        for fn, args in self.bind(inputs, outputs, self.allocate_workspace() if workspace is None else workspace):
            fn(*args)

    def time(self, inputs: Sequence[Any], outputs: Sequence[Any], *, warmup: int = 1, repeat: int = 5) -> list[float]:
        """Run times in seconds of the launches on these buffers, by the device's timers."""
        launches = self.bind(inputs, outputs, self.allocate_workspace())

        def run() -> None:
            for fn, args in launches:
                fn(*args)

        return self.device.time(run, warmup=warmup, repeat=repeat)

    def __call__(self, *arrays: Any) -> Any:
        """Numpy in, numpy out (one array, or a tuple for several outputs)."""
        if len(arrays) != len(self.task.inputs):
            raise GraphInputError(f"task {self.task.name!r} takes {len(self.task.inputs)} inputs, got {len(arrays)}")
        device_inputs = []
        for k, (node, value) in enumerate(zip(self.task.inputs, arrays)):
            value = np.asarray(value)
            want = numpy_dtype(node.dtype.name)
            if value.dtype != want or value.shape != tuple(int(s) for s in node.shape):
                raise GraphInputError(f"task {self.task.name!r} input {k} ({node.name!r}): expected "
                                     f"{node.dtype.name}{[int(s) for s in node.shape]}, got {value.dtype}{list(value.shape)}")
            device_inputs.append(self.device.from_numpy(value))
        outputs = [self.device.empty([int(s) for s in t.shape], t.dtype.name) for t in self.task.outputs]
        self.run(device_inputs, outputs)
        results = [self.device.to_numpy(o) for o in outputs]
        return results[0] if len(results) == 1 else tuple(results)

    def __repr__(self) -> str:
        return (f"CompiledTask({self.task.name!r}, target={self.target!r}, source={self.scheduled.source!r}, "
                f"launches={len(self.scheduled.launches)})")


# ------------------------------------------------------------------ many at once

_JOBS: dict[str, Any] = {}  # set before the pool forks: the workers read it, nothing is pickled


def _build_job(index: int) -> tuple:
    make, backend, target = _JOBS["jobs"][index], _JOBS["backend"], _JOBS["target"]
    started = time.perf_counter()
    try:
        _, artifact = build_scheduled(make(), backend, target)
        return index, artifact.path, None, time.perf_counter() - started
    except Exception as exc:  # a failing candidate is reported, not fatal
        return index, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started


def _source_job(index: int) -> tuple:
    make, backend, target = _JOBS["jobs"][index], _JOBS["backend"], _JOBS["target"]
    started = time.perf_counter()
    try:
        lowered = _lowered(make(), target)
        return index, lowered.name, backend.codegen(lowered, target), None, time.perf_counter() - started
    except Exception as exc:
        return index, None, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started


def _compile_job(item: tuple) -> tuple:
    index, name, source = item
    started = time.perf_counter()
    try:
        path = _JOBS["backend"].build(source, _JOBS["target"], name=name).path
        return index, path, None, time.perf_counter() - started
    except Exception as exc:
        return index, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started


def _renamed_key(name: str | None, source: str | None) -> str | None:
    """The source with its module name replaced: equal for the same kernel under two names
    (the name is a generated identifier; every occurrence is renamed, none is left)."""
    if source is None or not name or len(name) < 8 or not name.isidentifier() or "\0" in source:
        return None
    return source.replace(name, "\0")


def build_in_parallel(jobs: Sequence[Callable[[], ScheduledTask]], backend: Any, target: Any,
                      workers: int | None = None, *, skip_renamed: bool = False) -> list[tuple]:
    """Build many scheduled tasks in worker processes (through the build cache). Each
    job makes its ScheduledTask (e.g. ``lambda: template.build(...)``). Returns, in
    order, (index, artifact path or None, error or None, seconds) per job.

    ``skip_renamed`` (compile-only checks): every job is lowered and printed, but a source
    that equals an earlier job's source up to the module name (candidates that one shape
    makes equal, e.g. a row tile clamped to M) is not compiled again: such a job gets the
    earlier job's artifact path, or its error prefixed with ``same source as job K``."""
    workers = workers or min(len(jobs), len(os.sched_getaffinity(0))) or 1
    _JOBS.update(jobs=list(jobs), backend=backend, target=target)
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None

    def run(fn: Callable, items: Sequence) -> list:
        if pool is None:
            return [fn(item) for item in items]
        return sorted(pool.imap_unordered(fn, items), key=lambda r: r[0])

    try:
        if not skip_renamed:
            return run(_build_job, range(len(jobs)))
        printed = run(_source_job, range(len(jobs)))
        first: dict = {}  # renamed source -> index of the job that compiles it
        same_as = {}
        for index, name, source, _, _ in printed:
            key = _renamed_key(name, source)
            if key is not None:
                same_as[index] = first.setdefault(key, index)
        built = {r[0]: r for r in run(_compile_job, [(i, n, s) for i, n, s, err, _ in printed
                                                     if err is None and same_as.get(i, i) == i])}
        results = []
        for index, _, _, err, seconds in printed:
            k, path = same_as.get(index, index), None
            if err is None and k in built:
                _, path, err, more = built[k]
                err = err if k == index or err is None else f"same source as job {k}, which failed: {err}"
                seconds += more if k == index else 0.0
            results.append((index, path if err is None else None, err, seconds))
        return results
    finally:
        if pool is not None:
            pool.close()
            pool.join()
        _JOBS.clear()
