"""Tasks run by the pure-Python IR evaluator: no compiler, no backend plugin, slow.

``EvaluatorTarget`` is the `CompileTarget` of ``hf.compile(..., target="evaluator")``
(tests, machines without a compiler): the serial reference schedule, evaluated on
numpy arrays. `interpret_task` runs one small task that way, which is what constant
folding falls back to when nothing can compile for the CPU.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from hidet_framework.backend.signature import numpy_dtype
from hidet_framework.compute.task import Task
from hidet_framework.runtime.compile_target import CompileTarget
from hidet_framework.runtime.compiled_task import CompiledTask
from hidet_framework.schedule.auto_scheduler import SerialKernels, auto_schedule
from hidet_framework.schedule.scheduled_task import ScheduledTask

EVALUATOR_TARGET = "evaluator"  # "auto" never picks it

# The IR evaluator runs about 10^4..10^5 elements per second; beyond this, folding
# through it would make compiling slower than running.
INTERPRETER_ELEMENT_LIMIT = 1 << 14


class HostDevice:
    """Numpy arrays as device memory."""

    def empty(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        return np.empty(tuple(int(s) for s in shape), dtype=numpy_dtype(dtype))

    def from_numpy(self, array: Any) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def synchronize(self) -> None:
        pass


class EvaluatedFunctions:
    """A module's functions run by the IR evaluator, looked up like a LoadedModule."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def __getitem__(self, name: str) -> Callable[..., None]:
        from hidet_framework.analysis.evaluator import evaluate_function

        fn, module = self.module.functions[name], self.module
        return lambda *args: evaluate_function(fn, *args, module=module)


class EvaluatorTarget(CompileTarget):
    """The IR evaluator as a target: the serial reference schedule, never templates."""

    uses_templates = False

    def __init__(self) -> None:
        super().__init__(EVALUATOR_TARGET, SerialKernels(), None)
        self._device = HostDevice()

    @property
    def device(self) -> Any:
        return self._device

    def compile(self, task: Task, scheduled: ScheduledTask) -> CompiledTask:
        return CompiledTask(task, scheduled, EvaluatedFunctions(scheduled.module), self._device, self.kind)

    def build(self, scheduled: ScheduledTask) -> tuple:
        raise TypeError("the IR evaluator builds nothing: use compile()")

    def load(self, task: Task, scheduled: ScheduledTask, built: tuple) -> CompiledTask:
        raise TypeError("the IR evaluator loads nothing: use compile()")


EVALUATOR = EvaluatorTarget()


def interpret_task(task: Task, arrays: Sequence[np.ndarray]) -> Optional[list[np.ndarray]]:
    """Run `task` with the pure-Python IR evaluator; None when it is too big for that."""
    sizes = [int(np.prod([int(s) for s in t.shape], dtype=np.int64)) for t in task.outputs]
    if sum(sizes) > INTERPRETER_ELEMENT_LIMIT:
        return None
    compiled = EVALUATOR.compile(task, auto_schedule(task, EVALUATOR.backend))
    outputs = [np.empty([int(s) for s in t.shape], dtype=t.dtype.numpy_name) for t in task.outputs]
    compiled.run([np.asarray(a, order="C") for a in arrays], outputs)
    return outputs
