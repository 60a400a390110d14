"""The target a compilation is for, resolved once into one object passed down.

``hf.compile(graph, target="auto")`` turns its `target` string into a `CompileTarget`
once (``driver.targets.resolve_compile_target``): the backend that serves it, the
hardware it detected (the `Target` templates read their spaces from) and its device.
Everything below the driver — scheduling, tuning, fusion, building, the compiled
graph — receives this object and asks it, never a string, so nothing in the core
dispatches on a target's name. The IR evaluator is one more `CompileTarget`
(``evaluate_task.EvaluatorTarget``), served by the core itself.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.compute.task import Task
from hidet_framework.runtime.compiled_task import CompiledTask, build_scheduled, compile_scheduled, load_scheduled
from hidet_framework.schedule.auto_scheduler import auto_schedule
from hidet_framework.schedule.scheduled_task import ScheduledTask


class TargetUnavailableError(RuntimeError):
    """A backend serves the target, but it cannot run code on this machine."""


class CompileTarget:
    """A usable backend and the hardware it detected.

    :param kind: the target kind (``CompiledGraph.target`` reports it).
    :param backend: the backend (``hidet_framework.backend.contract.Backend``).
    :param target: the detected `Target` (hardware properties).
    ``uses_templates``: whether plugin templates (and so the tuner) schedule for it.
    """

    uses_templates = True

    def __init__(self, kind: str, backend: Any, target: Any) -> None:
        self.kind, self.backend, self.target = kind, backend, target

    @property
    def device(self) -> Any:
        return self.backend.device

    def auto_schedule(self, task: Task) -> ScheduledTask:
        """The rule-based schedule of `task`, kernels built by this target's backend."""
        return auto_schedule(task, self.backend)

    def build(self, scheduled: ScheduledTask) -> tuple:
        """Lower, codegen and build (the tuner runs this in its build workers)."""
        return build_scheduled(scheduled, self.backend, self.target)

    def load(self, task: Task, scheduled: ScheduledTask, built: tuple) -> CompiledTask:
        return load_scheduled(task, scheduled, self.backend, self.target, built)

    def compile(self, task: Task, scheduled: ScheduledTask) -> CompiledTask:
        return compile_scheduled(task, scheduled, self.backend, self.target)

    def __repr__(self) -> str:
        return f"CompileTarget({self.kind!r}, backend={getattr(self.backend, 'name', self.backend)!r})"
