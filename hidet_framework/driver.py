"""The driver: the one place that strings graph passes, scheduling (tuner or
auto-scheduler), lowering and backends together. Lower layers never import it; what
they need from here (compiling a task) is handed to them as a function.

    import hidet_framework as hf
    fn = hf.compile(graph, target="auto", space=0)   # -> CompiledGraph
    task_fn = compile_task(task, "cpu")              # -> CompiledTask

Task path: ``_schedule`` (tuner over plugin templates when any serve the operator,
else the rule-based auto-scheduler) gives a ScheduledTask = IR module + launches over
input/output/workspace buffers; ``transforms.pipeline.lower`` lowers the module; the
backend compiles it; `CompiledTask` binds each launch's function to buffers.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Callable, Iterator, Sequence

import numpy as np

import hidet_framework.ops as ops  # noqa: F401 - the module behind ``hf.ops`` (see __init__)
from hidet_framework.backend.signature import numpy_dtype
from hidet_framework.compute.task import Task
from hidet_framework.extension import MissingBackendError, plugin_host
from hidet_framework.graph.compiled_graph import CompiledGraph, GraphInputError
from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.fusion import ChainedTask, FusionError, FusionGroup, fuse_group
from hidet_framework.graph.passes import (
    FUSED_OPERATOR, FUSION_PASSES, GRAPH_PASSES, GraphPassContext, interpret_task, run_graph_passes,
)
from hidet_framework.graph.passes.base import attributes_key
from hidet_framework.graph.passes.partition_fusion_groups import GROUP_ATTRIBUTE
from hidet_framework.schedule import ScheduledTask, auto_schedule

__all__ = ["compile", "compile_task", "compile_fused", "CompiledTask", "TargetUnavailableError", "MissingBackendError",
           "ENV_SPACE", "ENV_QUIET", "EVALUATOR_TARGET"]

ENV_SPACE = "HIDET_FRAMEWORK_SPACE"  # default search-space level when `space` is not given
ENV_QUIET = "HIDET_FRAMEWORK_QUIET"  # "1": no progress bars
# Runs the auto-scheduled CPU module in the pure-Python IR evaluator: no compiler needed,
# very slow; for tests and tiny constant folding. "auto" never picks it.
EVALUATOR_TARGET = "evaluator"


class TargetUnavailableError(RuntimeError):
    """A backend serves the target, but it cannot run code on this machine."""


# ------------------------------------------------------------------ compiled tasks

class CompiledTask:
    """A task compiled for one target: launches bound to the backend's functions.

    :param task: the task. :param scheduled: how it was scheduled.
    :param functions: name -> callable (a LoadedModule). :param device: memory/copies.
    :param target: the target kind. ``tuning``: the TuningResult that chose the
        template candidate (set by `compile_task`; None when the auto-scheduler ran).
    """

    def __init__(self, task: Task, scheduled: ScheduledTask, functions: Any, device: Any, target: str) -> None:
        self.task, self.scheduled, self.device, self.target = task, scheduled, device, target
        self.tuning: Any = None
        self.workspace = tuple(scheduled.workspace)
        self._calls = tuple((functions[launch.function], launch.buffers, tuple(launch.scalars))
                            for launch in scheduled.launches)

    def bind(self, inputs: Sequence[Any], outputs: Sequence[Any],
             workspace: Sequence[Any] = ()) -> list[tuple[Callable[..., None], tuple]]:
        """(function, arguments) per launch, for buffers fixed once (a compiled graph
        binds every launch at compile time and then only calls ``fn(*args)``)."""
        pools = {"input": list(inputs), "output": list(outputs), "workspace": list(workspace)}
        for kind, want in (("input", len(self.task.inputs)), ("output", len(self.task.outputs)),
                           ("workspace", len(self.workspace))):
            if len(pools[kind]) != want:
                raise ValueError(f"task {self.task.name!r} takes {want} {kind} buffers, got {len(pools[kind])}")
        return [(fn, tuple(pools[ref.kind][ref.index] for ref in refs) + scalars)
                for fn, refs, scalars in self._calls]

    def allocate_workspace(self) -> list[Any]:
        return [self.device.empty(w.shape, w.dtype.name) for w in self.workspace]

    def run(self, inputs: Sequence[Any], outputs: Sequence[Any], workspace: Sequence[Any] | None = None) -> None:
        """Run the launches on device buffers (workspace allocated when not given)."""
        for fn, args in self.bind(inputs, outputs, self.allocate_workspace() if workspace is None else workspace):
            fn(*args)

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
                f"launches={len(self._calls)})")


class _HostDevice:
    """Numpy arrays as device memory (the evaluator target)."""

    def empty(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        return np.empty(tuple(int(s) for s in shape), dtype=numpy_dtype(dtype))

    def from_numpy(self, array: Any) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def synchronize(self) -> None:
        pass


class _EvaluatedFunctions:
    """A module's functions run by the IR evaluator, looked up like a LoadedModule."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def __getitem__(self, name: str) -> Callable[..., None]:
        from hidet_framework.ir.evaluator import evaluate_function

        fn, module = self.module.functions[name], self.module
        return lambda *args: evaluate_function(fn, *args, module=module)


# ------------------------------------------------------------------ targets

_lock = threading.RLock()
_task_cache: dict[tuple, CompiledTask] = {}
_targets: dict[int, Any] = {}


def _usable_backend(kind: str) -> Any:
    backend = plugin_host().backend_for(kind)  # MissingBackendError names what to install
    availability = backend.availability()
    if not availability:
        raise TargetUnavailableError(f"target {kind!r} is not usable here: {availability.reason}")
    return backend


def _detected_target(backend: Any) -> Any:
    with _lock:
        if id(backend) not in _targets:
            _targets[id(backend)] = (backend, backend.detect_target())  # keep backend alive: ids stay unique
        return _targets[id(backend)][1]


def resolve_target(target: str) -> str:
    """The target kind to compile for: "auto" is cuda when its backend is usable, else cpu."""
    if not isinstance(target, str) or not target:
        raise TypeError(f"target must be a target kind such as 'cpu', 'cuda' or 'auto', got {target!r}")
    if target != "auto":
        return target
    try:
        if plugin_host().backend_for("cuda").availability():
            return "cuda"
    except MissingBackendError:
        pass
    return "cpu"


def resolve_space(space: int | None) -> int:
    """`space`, else $HIDET_FRAMEWORK_SPACE, else 0; one of 0, 1, 2."""
    if space is None:
        text = os.environ.get(ENV_SPACE, "").strip() or "0"
        if text not in ("0", "1", "2"):
            raise ValueError(f"{ENV_SPACE}={text!r}: expected 0, 1 or 2")
        space = int(text)
    if space not in (0, 1, 2) or isinstance(space, bool):
        raise ValueError(f"space must be 0 (default candidate), 1 (~30 candidates) or 2 (full space), got {space!r}")
    return space


# ------------------------------------------------------------------ scheduling seam

def _random_array(shape: Sequence[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    carrier = numpy_dtype(dtype)
    if carrier.kind == "f":
        return rng.standard_normal(shape).astype(carrier)
    if carrier.kind == "b":
        return rng.integers(0, 2, shape).astype(carrier)
    return rng.integers(0, 8, shape).astype(carrier)  # small: safe as indices and divisors


def _tuner_hooks(task: Task, backend: Any, target: Any) -> tuple[Callable, Callable]:
    """The tuner's `prepare` (run in its build workers: lower + codegen + build, which
    fills the build cache; returns the lowered module and the artifact) and `measure`
    (here: load that artifact, time it with the device's timers). Every candidate is
    timed on the same random inputs, made once: drawing and copying them per candidate
    would cost more than the timing of large ones."""
    from hidet_framework.transforms.pipeline import lower

    def prepare(scheduled: ScheduledTask) -> tuple:
        lowered = lower(scheduled.module, target.kind)
        return lowered, backend.build(backend.codegen(lowered, target), target, name=lowered.name)

    buffers: dict[str, list] = {}

    def measure(scheduled: ScheduledTask, repeat: int, prepared: tuple) -> list[float]:
        device = backend.device
        lowered, artifact = prepared
        compiled = CompiledTask(task, scheduled, backend.load(artifact, lowered), device, target.kind)
        if not buffers:
            rng = np.random.default_rng(0)
            buffers["inputs"] = [device.from_numpy(_random_array([int(s) for s in t.shape], t.dtype.name, rng))
                                 for t in task.inputs]
            buffers["outputs"] = [device.empty([int(s) for s in t.shape], t.dtype.name) for t in task.outputs]
        launches = compiled.bind(buffers["inputs"], buffers["outputs"], compiled.allocate_workspace())

        def run() -> None:
            for fn, args in launches:
                fn(*args)

        return device.time(run, warmup=1, repeat=repeat)

    return prepare, measure


def _schedule(task: Task, op_name: str, target: Any, space: int, attributes: dict | None = None,
              backend: Any = None) -> tuple[ScheduledTask, Any]:
    """(the ScheduledTask of `task`, the TuningResult or None): when plugins registered
    templates for (`op_name`, target kind) that apply to it, the tuner's pick among their
    candidates (at space level `space`); otherwise the rule-based auto-scheduler."""
    attributes = dict(attributes or {})
    templates = [t for t in plugin_host().templates.templates_for(op_name, target.kind)
                 if not hasattr(t, "applies") or t.applies(task, attributes)]
    if not templates:
        return auto_schedule(task, target.kind), None
    from hidet_framework.tuner import tune

    prepare, measure = _tuner_hooks(task, backend, target)
    result = tune(task, attributes, op_name, target, templates, space, prepare=prepare, measure=measure)
    return result.template.build(task, attributes, result.params, target), result


def compile_task(task: Task, target: str = "cpu", space: int = 0, *, op_name: str | None = None,
                 attributes: dict | None = None) -> CompiledTask:
    """Schedule, lower and build `task` for `target`; cached in-process by (task
    fingerprint, target, space, operator name, attributes). `op_name` and
    `attributes` (the operator's; by default those recorded on the task) select and
    parameterise templates."""
    kind = resolve_target(target)
    op_name = op_name or task.name
    if attributes is None:  # the attributes the operator recorded on its task
        attributes = dict(task.attributes)
    key = (task.fingerprint(), kind, space, op_name, attributes_key(attributes or {}))
    with _lock:
        cached = _task_cache.get(key)
    if cached is not None:
        return cached
    scheduled, tuning = _schedule_for(task, op_name, kind, space, attributes)
    compiled = _build(task, scheduled, kind)
    compiled.tuning = tuning
    with _lock:
        return _task_cache.setdefault(key, compiled)


def _schedule_for(task: Task, op_name: str, kind: str, space: int, attributes: dict) -> tuple:
    """`_schedule` for target kind `kind` (the evaluator runs the CPU auto-schedule)."""
    if kind == EVALUATOR_TARGET:
        return auto_schedule(task, "cpu"), None
    backend = _usable_backend(kind)
    return _schedule(task, op_name, _detected_target(backend), space, attributes, backend)


def _build(task: Task, scheduled: ScheduledTask, kind: str) -> CompiledTask:
    """Lower and compile `scheduled` (or hand it to the IR evaluator)."""
    if kind == EVALUATOR_TARGET:
        return CompiledTask(task, scheduled, _EvaluatedFunctions(scheduled.module), _HostDevice(), kind)
    from hidet_framework.transforms.pipeline import lower

    backend = _usable_backend(kind)
    loaded = backend.compile(lower(scheduled.module, kind), _detected_target(backend))
    return CompiledTask(task, scheduled, loaded, backend.device, kind)


def compile_fused(task: Task, group: FusionGroup, target: str = "cpu", space: int = 0) -> Any:
    """Compile a fusion group (the ``fused`` operator's `task`) as one kernel: the anchor
    scheduled as if alone (tuned as usual), its producers and consumers grafted onto
    its loads and stores. Where a graft is impossible, the members' own compiled tasks
    run one after another (a ChainedTask, whose ``fallback_reason`` says why).
    Cached in-process by the fused task's fingerprint, the group's structure and the
    members' attributes (which, as in `compile_task`, select and parameterise templates)."""
    kind = resolve_target(target)
    key = ("fused", task.fingerprint(), kind, space, group.structure_key(),
           tuple(attributes_key(dict(m.attributes)) for m in group.members))
    with _lock:
        cached = _task_cache.get(key)
    if cached is not None:
        return cached
    anchor = group.anchor_member
    try:
        scheduled = fuse_group(_schedule_for(anchor.task, anchor.name, kind, space, dict(anchor.attributes))[0],
                               group)
    except FusionError as exc:
        members = [compile_task(m.task, kind, space, op_name=m.name, attributes=dict(m.attributes))
                   for m in group.members]
        compiled: Any = ChainedTask(task, group, members, str(exc) or type(exc).__name__)
    else:
        compiled = _build(task, scheduled, kind)
    with _lock:
        return _task_cache.setdefault(key, compiled)


def clear_task_cache() -> None:
    with _lock:
        _task_cache.clear()


# ------------------------------------------------------------------ graphs

def _cpu_can_compile() -> bool:
    try:
        _usable_backend("cpu")
    except (MissingBackendError, TargetUnavailableError):
        return False
    import importlib.util

    return importlib.util.find_spec("hidet_framework.transforms.pipeline") is not None


def evaluate_on_cpu(task: Task, arrays: Sequence[np.ndarray]) -> Sequence[np.ndarray] | None:
    """Constant folding's evaluator: compiled for the CPU when possible, else the IR
    evaluator for tiny tasks (None beyond that: the operator stays in the graph)."""
    if _cpu_can_compile():
        result = compile_task(task, "cpu")(*arrays)
        return [result] if len(task.outputs) == 1 else list(result)
    return interpret_task(task, arrays)


def _quiet() -> bool:
    return os.environ.get(ENV_QUIET, "") not in ("", "0") or not sys.stderr.isatty()


@contextlib.contextmanager
def _progress(total: int, what: str) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for long work; quiet for short work, when stderr is not
    a TTY, or with HIDET_FRAMEWORK_QUIET=1. Yields ``advance()``."""
    if total < 4 or _quiet():
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        handle = bar.add_task(what, total=total)
        yield lambda: bar.advance(handle)


def compile(graph: FlowGraph, target: str = "auto", space: int | None = None,  # noqa: A001
            fusion: bool = True) -> CompiledGraph:
    """Compile a traced graph for `target` ("cpu", "cuda", or "auto": cuda when its
    backend is usable here, else cpu; ``CompiledGraph.target`` says which).

    :param space: schedule search-space level 0/1/2; None reads $HIDET_FRAMEWORK_SPACE (default 0).
    :param fusion: fuse producers and consumers onto anchors (fewer kernels, see
        ``CompiledGraph.fusion_report()``); False keeps one kernel per operator.
    :raises MissingBackendError: no installed plugin serves the target.
    :raises TargetUnavailableError: the backend is installed but cannot run here.
    """
    if not isinstance(graph, FlowGraph):
        raise TypeError(f"hf.compile takes a FlowGraph (hf.trace(outputs, inputs=[...])), got {type(graph).__name__}")
    kind = resolve_target(target)
    space = resolve_space(space)
    if kind == EVALUATOR_TARGET:
        device: Any = _HostDevice()
    else:
        device = _usable_backend(kind).device
    # The evaluator target promises not to need a compiler, constant folding included.
    ctx = GraphPassContext(evaluate=interpret_task if kind == EVALUATOR_TARGET else evaluate_on_cpu, target=kind)
    graph = run_graph_passes(graph, ctx, GRAPH_PASSES + FUSION_PASSES if fusion else GRAPH_PASSES)
    distinct = len({op.task.fingerprint() for op in graph.nodes})
    with _progress(distinct, f"compiling {distinct} tasks for {kind}") as advance:
        def compile_operator(op: Any) -> CompiledTask:
            if op.name == FUSED_OPERATOR and GROUP_ATTRIBUTE in op.attributes:
                compiled = compile_fused(op.task, op.attributes[GROUP_ATTRIBUTE], kind, space)
            else:
                compiled = compile_task(op.task, kind, space, op_name=op.name, attributes=op.attributes)
            advance()
            return compiled

        return CompiledGraph(graph, compile_operator, device, kind, pass_stats=ctx.stats)
