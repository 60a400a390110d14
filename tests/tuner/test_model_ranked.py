"""From level 2 the tuner builds only a template's best-modelled candidates (its
``estimate``), so whole-model tuning spends its builds near the best; a template
without a model, or whose model fails, keeps its whole space; levels 0 and 1 are
unchanged."""
from __future__ import annotations

import pytest

from hidet_framework.backend.contract import Target
from hidet_framework.compute import Task, compute, tensor_input
from hidet_framework.tuner import Template, TuningCache, tune
from hidet_framework.tuner import tuner as tuner_module
from hidet_framework.tuner.tuner import MODEL_KEEP, candidates_of

TARGET = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 256})


def _task(n=5):
    x = tensor_input("x", "float32", [n])
    return Task("scale", [x], [compute("y", [n], lambda i: x[i] * 2.0)])


class Modelled(Template):
    operator, target = "scale", "cpu"

    def __init__(self, name, count, cost, priority=1):
        self.name, self.count, self.cost, self.priority = name, count, cost, priority

    def space(self, target, level):
        return [{"tile": t} for t in range(self.count if level else 1)]

    def build(self, task, attributes, params, target):
        return (self.name, params["tile"])

    def estimate(self, task, attributes, params, target):
        return self.cost(params["tile"])


class Unmodelled(Modelled):
    def estimate(self, task, attributes, params, target):
        return None


def test_level2_keeps_the_best_modelled_candidates_in_space_order():
    n = MODEL_KEEP + 17
    t = Modelled("m", n, lambda tile: abs(tile - 20) + 1.0)  # best around tile 20
    got = [c.params["tile"] for c in candidates_of([t], TARGET, 2, _task(), {})]
    want = sorted(sorted(range(n), key=lambda i: (abs(i - 20), i))[:MODEL_KEEP])
    assert got == want and len(got) == MODEL_KEEP


def test_no_model_a_failing_model_and_level1_keep_the_whole_space():
    n = MODEL_KEEP + 5

    def failing(tile):
        if tile == 3:
            raise RuntimeError("no model for this one")
        return 1.0

    assert len(candidates_of([Unmodelled("u", n, None)], TARGET, 2, _task(), {})) == n
    assert len(candidates_of([Modelled("f", n, failing)], TARGET, 2, _task(), {})) == n
    assert len(candidates_of([Modelled("m", n, float)], TARGET, 1, _task(), {})) == n
    assert len(candidates_of([Modelled("m", n, float)], TARGET, 2, None, {})) == n  # no task: nothing to price
    # an estimate that is not a number of seconds (a bool, a string) is no model either
    assert len(candidates_of([Modelled("b", n, lambda tile: tile != 3)], TARGET, 2, _task(), {})) == n
    assert len(candidates_of([Modelled("s", n, lambda tile: "fast")], TARGET, 2, _task(), {})) == n


def test_each_template_is_ranked_on_its_own():
    n = MODEL_KEEP + 8
    fast = Modelled("fast", n, lambda tile: 1e-6 * (tile + 1))
    slow = Modelled("slow", n, lambda tile: 1.0 + tile)
    got = candidates_of([fast, slow], TARGET, 2, _task(), {})
    assert [c.params["tile"] for c in got if c.template is fast] == list(range(MODEL_KEEP))
    assert [c.params["tile"] for c in got if c.template is slow] == list(range(MODEL_KEEP))


def test_tuning_at_level2_times_only_the_kept_candidates(tmp_path, monkeypatch):
    monkeypatch.setattr(tuner_module, "MODEL_KEEP", 4)
    # the model is right about the order except that it ranks tile 0 last: tile 0 is
    # then never timed, even though it would be the fastest
    t = Modelled("m", 10, lambda tile: 100.0 if tile == 0 else float(tile))
    timed = []

    def measure(scheduled, repeat, prepared):
        timed.append(scheduled[1])
        return [0.5 if scheduled[1] == 0 else float(scheduled[1])] * repeat

    r = tune(_task(), {}, "scale", TARGET, [t], 2, prepare=lambda s: s, measure=measure,
             cache=TuningCache(str(tmp_path / "c")), workers=1)
    assert set(timed) == {1, 2, 3, 4} and r.params == {"tile": 1} and r.candidates == 4


@pytest.mark.parametrize("level", [0, 1])
def test_levels_below_2_are_not_ranked(level, tmp_path):
    t = Modelled("m", MODEL_KEEP + 3, float)
    assert len(candidates_of([t], TARGET, level, _task(), {})) == (1 if level == 0 else MODEL_KEEP + 3)
