"""The tuner: pick the fastest candidate of the templates serving an operator.

`tune` tunes one task; `tune_many` a whole model's tasks at once (identical tasks
once, every task's candidates in one parallel build). Candidates are built in parallel on all cores (a fork-based process pool: the
compilers run in the workers and fill the build cache; a failing candidate is recorded,
not fatal), then timed in this process with the backend's device timers: every
candidate briefly, and only those near the leader again, so tuning stops early once the
leader is clear. The winner is stored in the on-disk tuning cache, keyed by task
fingerprint, target and template versions, so the next compile does no tuning.

The tuner knows nothing of backends or the driver: the caller gives it `prepare`
(ScheduledTask → anything picklable, run in the workers: lowering, codegen, build)
and `measure` ((ScheduledTask, repeat, what `prepare` returned) → run times in
seconds, run here). Workers send back each candidate's ScheduledTask together with
`prepare`'s result, so this process neither rebuilds nor re-lowers a candidate: with
a hundred candidates that serial work would cost more than timing them.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import statistics
import sys
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import attrs

from hidet_framework.backend.contract import Target
from hidet_framework.tuner.cache import TuningCache, TuningRecordWarning, validate_record
from hidet_framework.schedule.template import Template


class TuningError(RuntimeError):
    pass


@attrs.frozen
class Candidate:
    template: Template
    params: Mapping[str, Any]


@attrs.frozen
class TuningResult:
    """The winner and what it took to find it."""

    template: Template
    params: Mapping[str, Any]
    seconds: float
    candidates: int
    failures: tuple
    tuning_seconds: float  # with tune_many: this task's share of the shared build, plus its timing
    from_cache: bool


@attrs.frozen
class TuneRequest:
    """One task to tune (see `tune`); `tune_many` takes a list of them."""

    task: Any
    attributes: Mapping[str, Any]
    operator: str
    target: Target
    templates: Sequence[Template]
    level: int
    prepare: Callable[[Any], Any]
    measure: Callable[[Any, int, Any], list[float]]
    build: Optional[Callable[..., Any]] = None

    def key(self) -> str:
        return TuningCache.key(self.task.fingerprint(), self.target.fingerprint(), self.operator,
                               [(t.name, t.version) for t in self.templates], self.level)


# Set before the pool forks, read by the workers: nothing is pickled but the index.
_JOB: dict[str, Any] = {}


def _prepare_one(index: int) -> tuple[int, Optional[str], Any]:
    """(index, error or None, (ScheduledTask, prepare's result) or None) of item
    `index`: a (request, candidate) pair."""
    request, cand = _JOB["items"][index]
    build = request.build or _template_build
    try:
        scheduled = build(cand.template, request.task, request.attributes, cand.params, request.target)
        result = (scheduled, request.prepare(scheduled))
        if _JOB["in_pool"]:  # what cannot travel back fails this candidate here, not the pool
            pickle.dumps(result)
        return index, None, result
    except Exception as exc:  # one bad candidate must not stop the search
        return index, f"{getattr(cand.template, 'name', '?')} {dict(cand.params)!r}: {type(exc).__name__}: {exc}", None


def _progress():
    """A progress display on standard error (hidden when it is not a terminal or
    HIDET_FRAMEWORK_QUIET=1): done / total, time spent and time left."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    from rich.console import Console

    quiet = os.environ.get("HIDET_FRAMEWORK_QUIET") == "1" or not sys.stderr.isatty()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                    console=Console(file=sys.stderr), disable=quiet, transient=True)


def candidates_of(templates: Sequence[Template], target: Target, level: int, task: Any = None,
                  attributes: Optional[Mapping[str, Any]] = None) -> list[Candidate]:
    """Level 0: the default of the highest-priority template that has candidates on
    `target`, unless that template has a cost model (``estimate`` gives a number for
    `task`): then the modelled fastest default among the templates of priority > 0
    that have one; else every template's bounded space (from level 2, a template
    with a model: its best-modelled candidates, `_model_ranked`)."""
    if not templates:
        raise TuningError("no template to tune")
    if level == 0:  # a template may have no candidate on this target (e.g. an arch-specific one)
        defaults = [(t, space[0]) for t in sorted(templates, key=lambda t: -t.priority)
                    for space in [t.bounded_space(target, 0)] if space]
        if not defaults:
            raise TuningError(f"no template has a candidate for target {target.arch}")
        modelled = [(_estimate(t, task, attributes, p, target), i) for i, (t, p) in enumerate(defaults)
                    if t.priority > 0 or i == 0] if task is not None else []
        if modelled and modelled[0][0] is not None:
            best = min((s, i) for s, i in modelled if s is not None)[1]
            return [Candidate(*defaults[best])]
        return [Candidate(*defaults[0])]
    out = [Candidate(t, p) for t in templates
           for p in _model_ranked(t, t.bounded_space(target, level), level, task, attributes, target)]
    if not out:
        raise TuningError(f"no template has a candidate for target {target.arch}")
    return out


MODEL_KEEP = 24  # at level >= MODEL_LEVEL: a template's best-modelled candidates built and timed
MODEL_LEVEL = 2


def _model_ranked(template: Any, space: list, level: int, task: Any, attributes: Any, target: Target) -> list:
    """`space`, or at level >= MODEL_LEVEL, when the template prices every candidate
    (``estimate``), its MODEL_KEEP best-modelled candidates in space order: the builds
    are what whole-model tuning spends its time on, and a model that ranks the
    candidates (docs/perf_notes.md, gpumodels) leaves the far ones out. A template
    without a model, or one failing on any candidate, keeps its whole space."""
    if level < MODEL_LEVEL or task is None or len(space) <= MODEL_KEEP:
        return space
    modelled = [_estimate(template, task, attributes, p, target) for p in space]
    if any(m is None for m in modelled):
        return space
    keep = set(sorted(range(len(space)), key=lambda i: (modelled[i], i))[:MODEL_KEEP])
    return [p for i, p in enumerate(space) if i in keep]


def _estimate(template: Any, task: Any, attributes: Any, params: Any, target: Target) -> Optional[float]:
    """A template's modelled seconds for its candidate, or None (no model, or it failed:
    the template then competes by priority only)."""
    estimate = getattr(template, "estimate", None)
    try:
        value = estimate(task, attributes or {}, params, target) if estimate is not None else None
    except Exception:
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def tune(task: Any, attributes: Mapping[str, Any], operator: str, target: Target,
         templates: Sequence[Template], level: int,
         prepare: Callable[[Any], Any], measure: Callable[[Any, int, Any], list[float]],
         cache: Optional[TuningCache] = None, workers: Optional[int] = None,
         build: Optional[Callable[..., Any]] = None) -> TuningResult:
    """Tune `task` over the templates' candidates at space `level`. `build(template,
    task, attributes, params, target)` makes a candidate's schedule (default: the
    template's own build(); the driver passes ``template.build_scheduled``, which checks
    the result)."""
    request = TuneRequest(task, attributes, operator, target, templates, level, prepare, measure, build)
    return tune_many([request], cache, workers)[0]


def tune_many(requests: Sequence[TuneRequest], cache: Optional[TuningCache] = None,
              workers: Optional[int] = None, quiet_errors: bool = False) -> list:
    """Tune every request (a whole model's tasks) at once: requests with the same key
    (identical tasks, operator, target, templates and level) are tuned once; answers
    in the on-disk cache are reused (a cache shared by every model compiled with the
    same cache folder); the candidates of all the others are built in ONE parallel
    pool (all cores busy across tasks, not one task's few candidates at a time), then
    each task's candidates are timed here. Returns one TuningResult per request, in
    order; with `quiet_errors`, a request whose candidates all failed gets its
    TuningError instead of raising it."""
    started = time.perf_counter()
    cache = cache or TuningCache()
    results: dict[str, Any] = {}
    pending: dict[str, tuple[TuneRequest, list[Candidate]]] = {}
    for request in requests:
        key = request.key()
        if key in results or key in pending:
            continue  # identical tasks are tuned once
        cached = _from_cache(request, key, cache)
        if cached is not None:
            results[key] = cached
            continue
        try:
            candidates = candidates_of(request.templates, request.target, request.level, request.task,
                                       request.attributes)
        except TuningError as exc:
            results[key] = exc
            continue
        if len(candidates) == 1:
            c = candidates[0]
            results[key] = TuningResult(c.template, c.params, 0.0, 1, (), time.perf_counter() - started, False)
        else:
            pending[key] = (request, candidates)
    if pending:
        items = [(request, c) for request, candidates in pending.values() for c in candidates]
        prepared, failures = _build_all(items, workers)
        build_seconds = time.perf_counter() - started
        offset = 0
        with _progress() if len(pending) > 1 else contextlib.nullcontext() as progress:
            bar = progress.add_task(f"timing the candidates of {len(pending)} tasks", total=len(pending)) \
                if progress is not None else None
            for key, (request, candidates) in pending.items():
                mine = {i - offset: prepared[i] for i in range(offset, offset + len(candidates)) if i in prepared}
                errors = tuple((i - offset, f) for i, f in failures if offset <= i < offset + len(candidates))
                offset += len(candidates)
                share = build_seconds * len(candidates) / len(items)  # its part of the shared build
                results[key] = _finish(request, key, candidates, mine, errors, cache, share)
                if progress is not None:
                    progress.advance(bar)
    out = []
    for request in requests:
        result = results[request.key()]
        if isinstance(result, Exception) and not quiet_errors:
            raise result
        out.append(result)
    return out


def _from_cache(request: TuneRequest, key: str, cache: TuningCache) -> Optional[TuningResult]:
    record = cache.get(key) if request.level > 0 else None
    if record is None:
        return None
    template, params, why = validate_record(record, request.templates, request.target, request.level)
    if template is not None:
        return TuningResult(template, params, _number(record.get("seconds")), _count(record.get("candidates")),
                            (), 0.0, True)
    import warnings

    warnings.warn(f"tuning record {cache.path(key)} ignored and tuned again: {why}", TuningRecordWarning,
                  stacklevel=3)
    return None


def _finish(request: TuneRequest, key: str, candidates: list, prepared: dict, failures: tuple,
            cache: TuningCache, build_share: float) -> Any:
    """Time one task's built candidates, store and return the winner (or the TuningError)."""
    started = time.perf_counter()
    if not prepared:
        return TuningError(f"every candidate failed to build for {request.operator}: {list(failures[:3])}")
    try:
        times = _measure_all(prepared, request.measure)
    except TuningError as exc:
        return exc
    best = min(times, key=times.get)
    seconds = build_share + time.perf_counter() - started
    result = TuningResult(candidates[best].template, candidates[best].params, times[best], len(candidates),
                          tuple(failures), seconds, False)
    cache.put(key, {"template": result.template.name, "version": result.template.version,
                    "params": dict(result.params), "seconds": result.seconds,
                    "candidates": result.candidates, "tuning_seconds": result.tuning_seconds})
    return result


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _template_build(template: Any, task: Any, attributes: Any, params: Any, target: Any) -> Any:
    return template.build(task, attributes, params, target)


def _build_all(items: list, workers: Optional[int]) -> tuple[dict, list[tuple[int, str]]]:
    """({item index: (ScheduledTask, prepared)} of the (request, candidate) items that
    built, sorted failures), built in one fork-based pool."""
    workers = workers or max(1, min(len(items), len(os.sched_getaffinity(0))))
    _JOB.update(items=items, in_pool=workers > 1)
    failures: list[tuple[int, str]] = []
    prepared: dict[int, Any] = {}
    tasks = len({id(r) for r, _ in items})
    try:
        pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else contextlib.nullcontext()
        with _progress() as progress, pool:
            what = f"building {len(items)} candidates" + (f" of {tasks} tasks" if tasks > 1 else "")
            bar = progress.add_task(what, total=len(items))
            run = pool.imap_unordered if workers > 1 else map
            for index, error, result in run(_prepare_one, range(len(items))):
                if error:
                    failures.append((index, error))
                else:
                    prepared[index] = result
                progress.advance(bar)
    finally:
        _JOB.clear()
    return prepared, sorted(failures)


def _measure_all(prepared: dict, measure) -> dict[int, float]:
    """Two rounds: 3 runs each; then 10 runs for those within 1.25x of the leader."""
    first: dict[int, float] = {}
    errors: list[str] = []
    with _progress() as progress:
        bar = progress.add_task(f"timing {len(prepared)} candidates", total=len(prepared))
        for i in sorted(prepared):
            try:
                first[i] = statistics.median(measure(prepared[i][0], 3, prepared[i][1]))
            except Exception as exc:  # a candidate that fails at run time loses
                errors.append(f"{type(exc).__name__}: {exc}")
            progress.advance(bar)
    if not first:
        raise TuningError(f"every candidate failed at run time; the first: {errors[0]}")
    leader = min(first.values())
    close = sorted((i for i in first if first[i] <= 1.25 * leader), key=first.get)[:8]
    if len(close) == 1:
        return {close[0]: first[close[0]]}
    return {i: statistics.median(measure(prepared[i][0], 10, prepared[i][1])) for i in close}
