"""Compiling one task, or one fusion group, for a resolved target; cached in-process.

    compiled = compile_task(task, "cpu")     # -> CompiledTask
    compiled(x_numpy)                         # numpy in, numpy out
"""
from __future__ import annotations

import threading
from typing import Any

from hidet_framework.compute.task import Task
from hidet_framework.fusion import ChainedTask, FusionError, FusionGroup, fuse_group
from hidet_framework.fusion.chained_task import split_prologues
from hidet_framework.fusion.view_epilogue import view_tail
from hidet_framework.graph.passes.base import attributes_key
from hidet_framework.runtime.compiled_task import CompiledTask
from hidet_framework.driver.scheduling import schedule
from hidet_framework.driver.targets import resolve_compile_target

_lock = threading.RLock()
_task_cache: dict[tuple, Any] = {}


def compile_task(task: Task, target: Any = "auto", space: int = 0, *, op_name: str | None = None,
                 attributes: dict | None = None) -> CompiledTask:
    """Schedule, lower and build `task` for `target` (a kind, "auto", or a resolved
    CompileTarget); cached in-process by (task fingerprint, target kind, space,
    operator name, attributes). `op_name` and `attributes` (the operator's; by default
    those recorded on the task) select and parameterise templates."""
    target = resolve_compile_target(target)
    op_name = op_name or task.name
    if attributes is None:  # the attributes the operator recorded on its task
        attributes = dict(task.attributes)
    key = task_key(task, target, space, op_name, attributes)
    with _lock:
        cached = _task_cache.get(key)
    if cached is not None:
        return cached
    scheduled, tuning = schedule(task, op_name, target, space, attributes)
    compiled = target.compile(task, scheduled)
    compiled.tuning = tuning
    with _lock:
        return _task_cache.setdefault(key, compiled)


def compile_fused(task: Task, group: FusionGroup, target: Any = "auto", space: int = 0) -> Any:
    """Compile a fusion group (the ``fused`` operator's `task`) as one kernel: the anchor
    scheduled as if alone (tuned as usual), its producers and consumers grafted onto
    its loads and stores. Where a graft is impossible, the members' own compiled tasks
    run one after another (a ChainedTask, whose ``fallback_reason`` says why).
    Cached in-process by the fused task's fingerprint, the group's structure and the
    members' attributes (which, as in `compile_task`, select and parameterise templates)."""
    target = resolve_compile_target(target)
    key = fused_key(task, group, target, space)
    with _lock:
        cached = _task_cache.get(key)
    if cached is not None:
        return cached
    anchor = group.anchor_member
    try:
        scheduled = fuse_anchor(lambda attributes: schedule(anchor.task, anchor.name, target, space, attributes)[0],
                                group)
    except FusionError as exc:
        reason = str(exc) or type(exc).__name__
        split = split_prologues(task, group)
        if split is not None:   # the producers apart, the anchor and its consumers still one kernel
            outer, inner, inner_task = split
            members = [compile_task(m.task, target, space, op_name=m.name, attributes=dict(m.attributes))
                       for _, m in outer.members_in("prologue")] + [compile_fused(inner_task, inner, target, space)]
            compiled: Any = ChainedTask(task, outer, members, reason)
        else:
            members = [compile_task(m.task, target, space, op_name=m.name, attributes=dict(m.attributes))
                       for m in group.members]
            compiled = ChainedTask(task, group, members, reason)
    else:
        compiled = target.compile(task, scheduled)
    with _lock:
        return _task_cache.setdefault(key, compiled)


def fuse_anchor(schedule_anchor: Any, group: FusionGroup) -> Any:
    """`fuse_group` over ``schedule_anchor(group.anchor_attributes())``: the kernel must
    take grafts, or, when only views follow the anchor (``fusion/view_epilogue.py``), is
    the lone operator's; if that one cannot take the renamed buffer (it uses the output
    other than through elements), the graftable kernel with the views grafted.
    :raises FusionError: as `fuse_group`."""
    try:
        return fuse_group(schedule_anchor(group.anchor_attributes()), group)
    except FusionError:
        if not view_tail(group):
            raise
    return fuse_group(schedule_anchor(group.anchor_attributes(views=False)), group, views=False)


def task_key(task: Task, target: Any, space: int, op_name: str, attributes: dict) -> tuple:
    """The in-process cache key of `compile_task` (target resolved)."""
    return (task.fingerprint(), target.kind, space, op_name, attributes_key(attributes or {}))


def fused_key(task: Task, group: FusionGroup, target: Any, space: int) -> tuple:
    """The in-process cache key of `compile_fused` (target resolved)."""
    return ("fused", task.fingerprint(), target.kind, space, group.structure_key(),
            tuple(attributes_key(dict(m.attributes)) for m in group.members),
            attributes_key(group.anchor_attributes()))  # what the anchor is built with (fusion switches)


def cached(key: tuple) -> Any:
    with _lock:
        return _task_cache.get(key)


def store(key: tuple, compiled: Any) -> Any:
    """Put a compiled task in the in-process cache (the whole-model compiler's results)."""
    with _lock:
        return _task_cache.setdefault(key, compiled)


def clear_task_cache() -> None:
    with _lock:
        _task_cache.clear()
