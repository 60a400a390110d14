"""Compiling a whole model's tasks at once, before the compiled graph asks for them.

``hf.compile`` calls `compile_model_tasks` after the graph passes. Compiling operator
by operator would keep one core busy while a task is lowered and built, and would
tune each task's few candidates on their own. Instead:

1. **Tuning** (space 1 or 2): one `TuneRequest` per distinct schedulable task (a
   fusion group's anchor stands for its group); ``tuner.tune_many`` tunes identical
   tasks once, reuses the on-disk tuning cache (shared by every model compiled with
   the same cache folder), builds the candidates of *all* tasks in one parallel pool,
   and times each task's candidates on the device.
2. **Building the winners**: every distinct operator's final ScheduledTask (the
   tuner's pick read back from the cache, or the auto-scheduler's; a fusion group's
   grafted kernel) is scheduled, lowered, generated and built in one parallel pool
   (fork-based, all cores; the workers never touch the device), then loaded here and
   put in the driver's in-process task cache.

The compiled graph then finds every task in that cache. Anything this step cannot do
(a candidate that does not build, a fusion that falls back to separate kernels) is
left to the per-operator path, which raises or falls back exactly as before: this
module changes how fast a model compiles, never what it runs.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any, Sequence

from hidet_framework.fusion import FUSED_OPERATOR, GROUP_ATTRIBUTE, FusionError
from hidet_framework.fusion.chained_task import split_prologues
from hidet_framework.driver.options import progress
from hidet_framework.driver import task_compiler
from hidet_framework.driver.scheduling import applicable_templates, tune_request
from hidet_framework.driver.task_compiler import cached, fused_key, store, task_key

MIN_UNITS_FOR_POOL = 4
_JOBS: dict[str, Any] = {}  # set before the pool forks: the workers read it, nothing is pickled


def _units(nodes: Sequence[Any], target: Any, space: int) -> list[tuple]:
    """(cache key, task, op name, attributes, fusion group or None) per distinct
    compiled unit of the graph's operators, in graph order."""
    units, seen = [], set()
    for op in nodes:
        group = op.attributes.get(GROUP_ATTRIBUTE) if op.name == FUSED_OPERATOR else None
        if group is not None:
            key = fused_key(op.task, group, target, space)
            unit = (key, op.task, op.name, {}, group)
        else:
            attributes = dict(op.attributes)
            key = task_key(op.task, target, space, op.name, attributes)
            unit = (key, op.task, op.name, attributes, None)
        if key not in seen and cached(key) is None:
            seen.add(key)
            units.append(unit)
    return units


def _schedule_request(unit: tuple) -> tuple:
    """(task, op name, attributes) that the scheduler sees for a unit."""
    _, task, name, attributes, group = unit
    if group is None:
        return task, name, attributes
    anchor = group.anchor_member
    return anchor.task, anchor.name, group.anchor_attributes()


def _tune_all(units: list[tuple], target: Any, space: int) -> int:
    """Tune every unit's schedulable task in one go; returns how many distinct tasks."""
    from hidet_framework.tuner import tune_many

    requests = []
    for unit in units:
        task, name, attributes = _schedule_request(unit)
        templates = applicable_templates(task, name, target, attributes)
        if templates:
            requests.append(tune_request(task, name, target, space, attributes, templates))
    if requests:
        tune_many(requests, quiet_errors=True)  # errors resurface on the per-operator path
    return len({r.key() for r in requests})


def _plan(unit: tuple, target: Any, space: int) -> list[tuple]:
    """(key, task, ScheduledTask, TuningResult or None) to build for a unit: the
    tuner's cached pick (or the auto-scheduler's) and, for a group, its grafted kernel;
    a group that cannot be grafted plans its members instead (its producers and, as one
    unit, the anchor with its consumers where only the producers were refused)."""
    key, task, name, attributes, group = unit
    if group is None:
        # through task_compiler's names: the same seams as the per-operator path
        scheduled, tuning = task_compiler.schedule(task, name, target, space, attributes)
        return [(key, task, scheduled, tuning)]
    anchor_task, anchor_name, _ = _schedule_request(unit)
    try:
        return [(key, task, task_compiler.fuse_anchor(
            lambda attributes: task_compiler.schedule(anchor_task, anchor_name, target, space, attributes)[0], group),
            None)]
    except FusionError:
        plans = []
        members = list(group.members)
        split = split_prologues(task, group)
        if split is not None:   # as task_compiler.compile_fused: the producers apart, the rest one unit
            outer, inner, inner_task = split
            plans += _plan((fused_key(inner_task, inner, target, space), inner_task, FUSED_OPERATOR, {}, inner),
                           target, space)
            members = [m for _, m in outer.members_in("prologue")]
        for m in members:
            member_key = task_key(m.task, target, space, m.name, dict(m.attributes))
            if cached(member_key) is None:
                plans += _plan((member_key, m.task, m.name, dict(m.attributes), None), target, space)
        return plans


def _plan_and_build(index: int) -> tuple:
    """In a worker: schedule unit `index` (the tuner's pick comes from the on-disk cache
    filled before the fork) and lower, generate and build its kernels."""
    unit, target, space = _JOBS["units"][index], _JOBS["target"], _JOBS["space"]
    try:
        return index, [(key, task, scheduled, tuning, target.build(scheduled))
                       for key, task, scheduled, tuning in _plan(unit, target, space)], None
    except Exception as exc:  # left to the per-operator path, which reports it
        return index, [], f"{type(exc).__name__}: {exc}"


def _build_all(units: list[tuple], target: Any, space: int, workers: int | None) -> list[tuple]:
    """(key, task, ScheduledTask, TuningResult, built) of every unit that planned and
    built, from one fork-based pool."""
    # a pool pays for itself from a few units on; tiny graphs (conformance tests) build here
    workers = workers or (1 if len(units) < MIN_UNITS_FOR_POOL else min(len(units), len(os.sched_getaffinity(0))))
    _JOBS.update(units=units, target=target, space=space)
    done: list[tuple] = []
    try:
        with progress(len(units), f"building the kernels of {len(units)} tasks on {workers} cores") as advance:
            pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
            results = pool.imap_unordered(_plan_and_build, range(len(units))) if pool else \
                map(_plan_and_build, range(len(units)))
            try:
                for _, built, _ in results:
                    done += built
                    advance()
            finally:
                if pool is not None:
                    pool.close()
                    pool.join()
    finally:
        _JOBS.clear()
    return done


def compile_model_tasks(nodes: Sequence[Any], target: Any, space: int, workers: int | None = None) -> dict:
    """Tune and build every distinct task of a model in parallel (see the module
    docstring); returns what it did: ``units``, ``tuned_tasks``, ``built``,
    ``tuning_s``, ``build_s``."""
    started = time.perf_counter()
    units = _units(nodes, target, space)
    tuned = _tune_all(units, target, space) if space > 0 and units else 0
    tuned_at = time.perf_counter()
    built = _build_all(units, target, space, workers) if units else []
    stored = set()
    for key, task, scheduled, tuning, result in built:
        if key in stored or cached(key) is not None:
            continue  # a group's fallback member planned twice
        compiled = target.load(task, scheduled, result)
        compiled.tuning = tuning
        store(key, compiled)
        stored.add(key)
    return {"units": len(units), "tuned_tasks": tuned, "built": len(stored),
            "tuning_s": tuned_at - started, "build_s": time.perf_counter() - tuned_at}
