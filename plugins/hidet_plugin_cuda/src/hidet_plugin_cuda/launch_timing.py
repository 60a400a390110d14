"""Device time of a task's launches, without the host's launch cost (what the tuner
compares candidates by).

Timing events around Python launches measures the host too: a 5 us kernel launched
through Python (~10-20 us a launch) reads as the launch cost, and a split-K candidate
(main kernel + reduce) as twice that, so one-launch candidates win whatever their
kernels take. Compiled graphs replay their launches as one CUDA graph, so what a
candidate costs in a model is its kernels plus the GPU's own gap between them.

`time_launches` therefore replays a CUDA graph of the launches (`cuda_graph.LaunchPlan`,
the compiled graph's own replay path) repeated `inner` times, so that one replay keeps
the GPU busy for at least `BUSY_S`, much longer than the host needs to queue the next
replay and event. `inner` comes from one timed replay of a `PROBE`-fold graph (which
also warms up): that figure is PROBE runs plus one host launch, so dividing it by
PROBE over-estimates a run by at most a launch / PROBE, and the host's cost per run
(larger than the kernels' for small ones) never enters it. Then one untimed replay
(the GPU is busy while the timed ones are queued) and `repeat` timed replays separated
by events: each sample is the time between consecutive events, divided by `inner`.
Timestamps are taken when the GPU reaches an event, and the GPU never waits for the
host, so the host's costs are out.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

BUSY_S = 100e-6  # device time one timed replay aims at
MAX_INNER = 48  # launches repeated at most this often in one graph
PROBE = 8  # repetitions in the graph whose first replay sizes `inner`


def inner_for(seconds: float) -> int:
    """How many repetitions of launches taking `seconds` (an over-estimate: see the
    module docstring) one graph holds so that a replay lasts BUSY_S."""
    if not seconds > 0:
        return MAX_INNER
    return max(1, min(MAX_INNER, math.ceil(BUSY_S / seconds)))


def time_launches(device: Any, launches: Sequence[tuple], *, warmup: int = 1, repeat: int = 5,
                  plan_type: Any = None, event_type: Any = None) -> list[float]:
    """Seconds per run of `launches` (``(KernelLauncher, arguments)`` pairs, as
    `CompiledTask.bind` returns them), device time only; see the module docstring.
    `plan_type` / `event_type` default to `LaunchPlan` / `device.Event` (tests pass
    simulated ones)."""
    if plan_type is None:
        from .cuda_graph import LaunchPlan as plan_type
    if event_type is None:
        from .device import Event as event_type
    launches = list(launches)
    if repeat <= 0:
        return []
    if not launches:
        return [0.0] * repeat
    ordinal = getattr(device, "device_id", 0)
    probe = plan_type(launches * PROBE, [], [], 0, "update", ordinal)
    for _ in range(max(1, warmup)):  # first runs: module loads, caches; errors surface here
        probe.run([], 0)
    device.synchronize()
    start, end = event_type(ordinal), event_type(ordinal)
    start.record(None)
    probe.run([], 0)
    end.record(None)
    end.synchronize()
    inner = max(PROBE, inner_for(end.seconds_since(start) / PROBE))
    plan = probe if inner == PROBE else plan_type(launches * inner, [], [], 0, "update", ordinal)
    marks = [event_type(ordinal) for _ in range(repeat + 1)]
    plan.run([], 0)  # untimed: the GPU works on it while the timed replays are queued
    marks[0].record(None)
    for mark in marks[1:]:
        plan.run([], 0)
        mark.record(None)
    marks[-1].synchronize()
    return [b.seconds_since(a) / inner for a, b in zip(marks, marks[1:])]
