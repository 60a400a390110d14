"""How the tuner times a built candidate: device time only, where the device can.

A device that offers ``time_launches(launches, warmup=, repeat=)`` (CUDA: a CUDA
graph of the launches, replayed; `hidet_plugin_cuda.launch_timing`) is timed without
the host's launch cost, which is how compiled graphs run candidates (one graph
replay), so a two-launch split-K candidate is judged by its kernels, not by two
Python launches. Other devices (the CPU: the host is the device) are timed as
before, by `CompiledTask.time`.
"""
from __future__ import annotations

from typing import Any, Sequence


def device_seconds(compiled: Any, inputs: Sequence[Any], outputs: Sequence[Any], *, warmup: int = 1,
                   repeat: int = 5) -> list[float]:
    """Run times in seconds of `compiled` (a CompiledTask) on these buffers."""
    timer = getattr(compiled.device, "time_launches", None)
    if timer is None:
        return compiled.time(inputs, outputs, warmup=warmup, repeat=repeat)
    launches = compiled.bind(inputs, outputs, compiled.allocate_workspace())
    return timer(launches, warmup=warmup, repeat=repeat)
