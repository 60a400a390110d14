"""The tuner's search, early stop, failure isolation and cache, with fake templates
whose 'run time' is a known function of their parameters."""
import json
import os

import pytest

from hidet_framework.backend.contract import Target
from hidet_framework.compute import Task, compute, tensor_input
from hidet_framework.tuner import Template, TuningCache, TuningError, tune

TARGET = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 256})


def _task(n=7):
    x = tensor_input("x", "float32", [n])
    return Task("scale", [x], [compute("y", [n], lambda i: x[i] * 2.0)])


class FakeTemplate(Template):
    operator = "scale"
    target = "cpu"

    def __init__(self, name, tiles, fail=(), priority=0):
        self.name, self.tiles, self.fail, self.priority = name, tiles, fail, priority

    def space(self, target, level):
        # derived from the target only, never from the task's shape
        return [{"tile": t * target["vector_bits"] // 256} for t in self.tiles]

    def build(self, task, attributes, params, target):
        if params["tile"] in self.fail:
            raise RuntimeError(f"tile {params['tile']} does not compile")
        return (self.name, params["tile"])


def _measure(scheduled, repeat, prepared=None):
    name, tile = scheduled
    return [FAKE_COSTS[name](tile)] * repeat


FAKE_COSTS = {}


@pytest.fixture
def cache(tmp_path):
    return TuningCache(str(tmp_path / "tuning"))


def test_level0_takes_the_default_of_the_highest_priority_template(cache):
    a = FakeTemplate("a", [4, 8], priority=1)
    b = FakeTemplate("b", [16])
    r = tune(_task(), {}, "scale", TARGET, [b, a], 0, prepare=lambda s: s, measure=_measure, cache=cache, workers=1)
    assert (r.template.name, r.params, r.candidates) == ("a", {"tile": 4}, 1)


def test_level0_passes_over_a_template_with_no_candidate_on_the_target(cache):
    # e.g. an arch-specific template (wgmma) on another GPU: its space is empty there
    hopper_only = FakeTemplate("h", [], priority=5)
    a = FakeTemplate("a", [4], priority=1)
    r = tune(_task(), {}, "scale", TARGET, [hopper_only, a], 0, prepare=lambda s: s, measure=_measure,
             cache=cache, workers=1)
    assert r.template.name == "a"
    with pytest.raises(TuningError, match="no template has a candidate"):
        tune(_task(), {}, "scale", TARGET, [hopper_only], 0, prepare=lambda s: s, measure=_measure,
             cache=cache, workers=1)


def test_fastest_candidate_wins_across_templates_and_failures_are_isolated(cache):
    FAKE_COSTS.update(a=lambda t: 1.0 / t, b=lambda t: 0.05 if t == 32 else 1.0)
    a = FakeTemplate("a", [1, 2, 4, 8], fail=(2,))
    b = FakeTemplate("b", [16, 32])
    r = tune(_task(), {}, "scale", TARGET, [a, b], 1, prepare=lambda s: s, measure=_measure, cache=cache, workers=2)
    assert (r.template.name, r.params) == ("b", {"tile": 32})
    assert r.candidates == 6 and len(r.failures) == 1 and "does not compile" in r.failures[0][1]
    # the winner is recorded on disk as JSON and served next time without tuning
    files = os.listdir(cache.root)
    assert len(files) == 1 and json.load(open(os.path.join(cache.root, files[0])))["template"] == "b"
    FAKE_COSTS.update(b=lambda t: 99.0)  # would lose now, but the cache decides
    again = tune(_task(), {}, "scale", TARGET, [a, b], 1, prepare=lambda s: s, measure=_measure, cache=cache)
    assert again.from_cache and (again.template.name, again.params) == ("b", {"tile": 32})
    # another shape is another task: tuned anew
    other = tune(_task(11), {}, "scale", TARGET, [a, b], 1, prepare=lambda s: s, measure=_measure, cache=cache, workers=1)
    assert not other.from_cache and (other.template.name, other.params) == ("a", {"tile": 8})


def test_every_candidate_failing_is_a_clear_error(cache):
    a = FakeTemplate("a", [1, 2], fail=(1, 2))
    with pytest.raises(TuningError, match="every candidate failed to build"):
        tune(_task(), {}, "scale", TARGET, [a], 1, prepare=lambda s: s, measure=_measure, cache=cache, workers=1)


def test_space_levels_are_bounded():
    a = FakeTemplate("a", list(range(1, 500)))
    assert len(a.bounded_space(TARGET, 1)) == 30 and len(a.bounded_space(TARGET, 2)) == 200
    with pytest.raises(ValueError, match="space level"):
        a.bounded_space(TARGET, 3)


def test_only_candidates_near_the_leader_are_timed_again_and_each_is_built_once(cache):
    # built once, in the (here: in-process) build worker; timing reuses what it sent back
    FAKE_COSTS.update(c=lambda t: {1: 1.0, 2: 1.1, 4: 5.0}[t])
    builds, timings = [], []

    class Counting(FakeTemplate):
        def build(self, task, attributes, params, target):
            builds.append(params["tile"])
            return super().build(task, attributes, params, target)

    def measure(scheduled, repeat, prepared=None):
        assert prepared == ("prepared", scheduled)  # prepare's result comes along
        timings.append((scheduled[1], repeat))
        return _measure(scheduled, repeat)

    r = tune(_task(), {}, "scale", TARGET, [Counting("c", [1, 2, 4])], 1, prepare=lambda s: ("prepared", s),
             measure=measure, cache=cache, workers=1)
    assert r.params == {"tile": 1}
    assert sorted(t for t, n in timings if n == 10) == [1, 2]  # 4 is 5x slower: not timed again
    assert sorted(builds) == [1, 2, 4]


def test_when_every_candidate_fails_at_run_time_the_error_says_why(cache):
    def broken(scheduled, repeat, prepared=None):
        raise RuntimeError("launch failed: out of resources")

    with pytest.raises(TuningError, match="the first: RuntimeError: launch failed: out of resources"):
        tune(_task(), {}, "scale", TARGET, [FakeTemplate("a", [1, 2])], 1, prepare=lambda s: s, measure=broken,
             cache=cache, workers=1)


def test_a_candidate_whose_prepared_result_cannot_travel_back_fails_alone(cache):
    # the build workers return prepare's result by pickling; a lambda cannot be pickled
    FAKE_COSTS.update(a=lambda t: 1.0 / t)
    r = tune(_task(), {}, "scale", TARGET, [FakeTemplate("a", [1, 2, 4])], 1,
             prepare=lambda s: (lambda: None) if s[1] == 4 else s, measure=_measure, cache=cache, workers=2)
    assert r.params == {"tile": 2} and len(r.failures) == 1 and "pickle" in r.failures[0][1].lower()

