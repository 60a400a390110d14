"""Run one template candidate on the CPU without the driver: build, lower, compile, and
call its launches on numpy buffers. Tests and ``bench/matmul.py`` use it; the driver's
``compile_task`` does the same for the tuner's winner.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import numpy as np

from hidet_framework.schedule.scheduled_task import ScheduledTask

__all__ = ["CompiledCandidate", "compile_candidate"]


class CompiledCandidate:
    """A ScheduledTask compiled for the CPU, with its workspace allocated once."""

    def __init__(self, scheduled: ScheduledTask, loaded: Any, device: Any) -> None:
        self.scheduled = scheduled
        self.functions = loaded
        self.device = device
        self.workspace = [device.empty(w.shape, w.dtype.name) for w in scheduled.workspace]

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        pools = {"input": list(inputs), "output": list(outputs), "workspace": self.workspace}
        for launch in self.scheduled.launches:
            args = [pools[ref.kind][ref.index] for ref in launch.buffers] + list(launch.scalars)
            self.functions[launch.function](*args)

    def time(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], repeat: int = 5,
             warmup: int = 1) -> list[float]:
        for _ in range(warmup):
            self.run(inputs, outputs)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            self.run(inputs, outputs)
            times.append(time.perf_counter() - start)
        return times


def compile_candidate(template: Any, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                      target: Any = None, backend: Any = None) -> CompiledCandidate:
    """`template.build(...)` → ``lower(module, "cpu")`` → ``backend.compile``."""
    from hidet_framework.transforms.pipeline import lower

    if backend is None:
        from hidet_framework.extension import plugin_host

        backend = plugin_host().backend_for("cpu")
    target = target if target is not None else backend.detect_target()
    scheduled = template.build(task, attributes, params, target)
    loaded = backend.compile(lower(scheduled.module, "cpu"), target)
    return CompiledCandidate(scheduled, loaded, backend.device)
