"""Scheduling one task: the tuner's pick among the plugin templates that serve its
operator on the target, else the rule-based auto-scheduler."""
from __future__ import annotations

import inspect

from typing import Any, Callable, Sequence

import numpy as np

from hidet_framework.backend.signature import numpy_dtype
from hidet_framework.compute.task import Task
from hidet_framework.extension import plugin_host
from hidet_framework.runtime.compile_target import CompileTarget
from hidet_framework.schedule import ScheduledTask


def _random_array(shape: Sequence[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    carrier = numpy_dtype(dtype)
    if dtype == "bfloat16":  # real values in their uint16 carrier: the top half of float32 normals
        return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if carrier.kind == "f":
        return rng.standard_normal(shape).astype(carrier)
    if carrier.kind == "b":
        return rng.integers(0, 2, shape).astype(carrier)
    return rng.integers(0, 8, shape).astype(carrier)  # small: safe as indices and divisors


def _upload(device: Any, array: np.ndarray, dtype: str) -> Any:
    """`array` on the device. bfloat16 travels as uint16 bits (numpy has no bfloat16): a
    device whose arrays carry a dtype (CUDA: a kernel refuses a uint16 array for a
    bfloat16 parameter) is told which; the CPU's kernels take the bits as they are."""
    if dtype == "bfloat16" and "dtype" in inspect.signature(device.from_numpy).parameters:
        return device.from_numpy(array, dtype=dtype)
    return device.from_numpy(array)


def tuner_hooks(task: Task, target: CompileTarget) -> tuple[Callable, Callable]:
    """The tuner's `prepare` (run in its build workers: lower + codegen + build, which
    fills the build cache; returns the lowered module and the artifact) and `measure`
    (here: load that artifact, time it with the device's timers, device time only
    where the device offers it: `tuner.timing`). Every candidate is
    timed on the same random inputs, made once: drawing and copying them per candidate
    would cost more than the timing of large ones."""
    from hidet_framework.tuner.timing import device_seconds

    buffers: dict[str, list] = {}

    def measure(scheduled: ScheduledTask, repeat: int, prepared: tuple) -> list[float]:
        compiled = target.load(task, scheduled, prepared)
        device = target.device
        if not buffers:
            rng = np.random.default_rng(0)
            buffers["inputs"] = [_upload(device, _random_array([int(s) for s in t.shape], t.dtype.name, rng),
                                         t.dtype.name) for t in task.inputs]
            buffers["outputs"] = [device.empty([int(s) for s in t.shape], t.dtype.name) for t in task.outputs]
        return device_seconds(compiled, buffers["inputs"], buffers["outputs"], warmup=1, repeat=repeat)

    return target.build, measure


def applicable_templates(task: Task, op_name: str, target: CompileTarget, attributes: dict) -> list:
    """The plugin templates registered for (`op_name`, target kind) that apply to `task`."""
    if not target.uses_templates:
        return []
    return [t for t in plugin_host().templates.templates_for(op_name, target.kind)
            if _applies(t, task, attributes, target)]


def _applies(template: Any, task: Task, attributes: dict, target: CompileTarget) -> bool:
    """The template's `applies_on` for the build's target (a Template's default asks
    `applies`); a template without either (not a Template subclass) applies."""
    if hasattr(template, "applies_on"):
        return template.applies_on(task, attributes, target.target)
    return not hasattr(template, "applies") or template.applies(task, attributes)


def tune_request(task: Task, op_name: str, target: CompileTarget, space: int, attributes: dict,
                 templates: list) -> Any:
    """The tuner's request for `task` (see ``tuner.tune_many``)."""
    from hidet_framework.schedule.template import build_scheduled
    from hidet_framework.tuner import TuneRequest

    prepare, measure = tuner_hooks(task, target)
    return TuneRequest(task, attributes, op_name, target.target, templates, space, prepare, measure,
                       build_scheduled)


def schedule(task: Task, op_name: str, target: CompileTarget, space: int,
             attributes: dict | None = None) -> tuple[ScheduledTask, Any]:
    """(the ScheduledTask of `task`, the TuningResult or None): when plugins registered
    templates for (`op_name`, target kind) that apply to it, the tuner's pick among their
    candidates (at space level `space`); otherwise the rule-based auto-scheduler."""
    attributes = dict(attributes or {})
    templates = applicable_templates(task, op_name, target, attributes)
    if not templates:
        return target.auto_schedule(task), None
    from hidet_framework.schedule.template import build_scheduled
    from hidet_framework.tuner import tune

    prepare, measure = tuner_hooks(task, target)
    # build_scheduled: a template whose build() fails or returns no ScheduledTask is
    # named with its plugin, instead of an AttributeError deep in lowering
    result = tune(task, attributes, op_name, target.target, templates, space, prepare=prepare, measure=measure,
                  build=build_scheduled)
    return build_scheduled(result.template, task, attributes, result.params, target.target), result
