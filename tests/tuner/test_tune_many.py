"""Whole-model tuning: tune_many tunes identical tasks once, builds every task's
candidates in one pool, shares the on-disk cache; the driver's model compiler builds
every task of a graph up front and gives the same results as operator by operator."""
import numpy as np
import pytest

from hidet_framework.tuner import TuneRequest, TuningError, TuningResult, tune_many
from .test_tuner import FAKE_COSTS, TARGET, FakeTemplate, _measure, _task, cache  # noqa: F401


def _request(task, templates, measured, level=1):
    def measure(scheduled, repeat, prepared=None):
        measured.append(scheduled)
        return _measure(scheduled, repeat)

    return TuneRequest(task, {}, "scale", TARGET, templates, level, lambda s: s, measure)


def test_identical_tasks_once_distinct_tasks_each(cache):
    FAKE_COSTS["m"] = lambda tile: abs(tile - 16) + 1.0
    template = FakeTemplate("m", [4, 8, 16, 32], fail=(8,))
    measured = []
    a, a_again, b = _task(7), _task(7), _task(11)
    results = tune_many([_request(a, [template], measured), _request(a_again, [template], measured),
                         _request(b, [template], measured)], cache=cache, workers=2)
    assert [r.params for r in results] == [{"tile": 16}] * 3
    assert results[0] is results[1]  # one tuning for the identical tasks
    # two distinct tasks, 3 candidates each that build (8 fails), each timed at least once
    assert sorted(set(measured)) == [("m", 4), ("m", 16), ("m", 32)] and 6 <= len(measured) <= 6 + 2 * 3 * 10
    assert all(len(r.failures) == 1 and "tile 8" in r.failures[0][1] for r in results)
    # the cache is shared: a second model with task b tunes nothing
    measured.clear()
    again = tune_many([_request(_task(11), [template], measured)], cache=cache, workers=2)
    assert again[0].from_cache and again[0].params == {"tile": 16} and measured == []


def test_a_task_whose_candidates_all_fail(cache):
    FAKE_COSTS["f"] = lambda tile: 1.0
    bad = FakeTemplate("f", [2, 4], fail=(2, 4))
    FAKE_COSTS["g"] = lambda tile: float(tile)
    good = FakeTemplate("g", [8, 2])
    requests = [_request(_task(5), [bad], []), _request(_task(6), [good], [])]
    with pytest.raises(TuningError, match="every candidate failed to build"):
        tune_many(requests, cache=cache, workers=1)
    results = tune_many(requests, cache=cache, workers=1, quiet_errors=True)
    assert isinstance(results[0], TuningError) and isinstance(results[1], TuningResult)
    assert results[1].params == {"tile": 2}


def test_model_compiler_builds_every_task_up_front(tmp_path, monkeypatch):
    import hidet_framework as hf
    from hidet_framework import driver

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    driver.clear_task_cache()
    rng = np.random.default_rng()
    w = rng.standard_normal((13, 13)).astype(np.float32)
    x = hf.symbol((3, 13), "float32", name="x")
    h = x
    for _ in range(3):  # three identical blocks: identical tasks
        h = hf.ops.relu(hf.ops.matmul(h, hf.constant(w)))
    graph = hf.trace(hf.ops.softmax(h, axis=-1), inputs=[x])
    fn = hf.compile(graph, target="cpu")
    stats = fn.pass_stats["compile_model_tasks"]
    assert stats["built"] >= 1 and stats["units"] == stats["built"] < len(fn.graph.nodes)
    driver.clear_task_cache()
    serial = hf.compile(graph, target="cpu", parallel=False)
    assert "compile_model_tasks" not in serial.pass_stats
    xv = rng.standard_normal((3, 13)).astype(np.float32)
    ref = xv.astype(np.float64)
    for _ in range(3):
        ref = np.maximum(ref @ w, 0)
    ref = np.exp(ref - ref.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    assert np.allclose(fn(xv), ref, rtol=1e-4, atol=1e-6) and np.allclose(serial(xv), ref, rtol=1e-4, atol=1e-6)


def test_progress_counts_tasks_and_shows_time_left(cache, monkeypatch):
    import io
    import sys

    from hidet_framework.tuner import tuner as tuner_module

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.delenv("HIDET_FRAMEWORK_QUIET", raising=False)
    seen, real = [], tuner_module._progress

    def spy():
        p = real()
        add = p.add_task
        p.add_task = lambda text, **kw: seen.append((text, kw["total"])) or add(text, **kw)
        return p

    monkeypatch.setattr(tuner_module, "_progress", spy)
    FAKE_COSTS["p"] = lambda tile: float(tile)
    template = FakeTemplate("p", [4, 8])
    tune_many([_request(_task(3), [template], []), _request(_task(5), [template], [])], cache=cache, workers=1)
    assert seen[0] == ("building 4 candidates of 2 tasks", 4)
    assert seen[1] == ("timing the candidates of 2 tasks", 2)
    assert "Remaining" in type(real().columns[-1]).__name__
