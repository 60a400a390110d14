"""The driver: the one place that strings graph passes, fusion, scheduling (tuner or
auto-scheduler), lowering and backends together. Lower layers never import it.

    import hidet_framework as hf
    fn = hf.compile(graph, target="auto", space=0)   # -> CompiledGraph
    task_fn = compile_task(task, "cpu")              # -> CompiledTask

One job per module:

- ``targets.py``: the `target` argument resolved once into a `CompileTarget` ("auto":
  the most preferred usable backend);
- ``options.py``: the search-space level ($HIDET_FRAMEWORK_SPACE) and progress bars;
- ``scheduling.py``: the tuner's pick among plugin templates, else the auto-scheduler;
- ``task_compiler.py``: one task or one fusion group, cached in-process;
- ``graph_compiler.py``: ``hf.compile`` and constant folding's evaluator.

Building, binding and running a scheduled task is ``runtime/compiled_task.py``.
"""
import hidet_framework.ops as ops  # noqa: F401 - the module behind ``hf.ops`` (see hidet_framework/__init__)
from hidet_framework.extension import MissingBackendError
from hidet_framework.runtime.compile_target import CompileTarget, TargetUnavailableError
from hidet_framework.runtime.compiled_task import CompiledTask
from hidet_framework.runtime.evaluate_task import EVALUATOR_TARGET
from hidet_framework.schedule import auto_schedule
from hidet_framework.driver.graph_compiler import compile, evaluate_constants, host_target
from hidet_framework.driver.task_compiler import clear_task_cache, compile_fused, compile_task
from hidet_framework.driver.options import ENV_QUIET, ENV_SPACE, resolve_space
from hidet_framework.driver.scheduling import schedule
from hidet_framework.driver.targets import resolve_compile_target, resolve_target

__all__ = ["compile", "compile_task", "compile_fused", "CompiledTask", "CompileTarget", "TargetUnavailableError",
           "MissingBackendError", "ENV_SPACE", "ENV_QUIET", "EVALUATOR_TARGET", "resolve_target",
           "resolve_compile_target", "resolve_space", "clear_task_cache", "evaluate_constants", "host_target",
           "schedule", "auto_schedule"]
