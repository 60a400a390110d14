"""Issue 12 item 5: a tuning record is trusted only when private, used only when it
names a current template and one of its candidates at the requested level, and the
space level is part of its key."""
import json
import os

import pytest

from hidet_framework.tuner import TuningCache, tune
from hidet_framework.tuner.cache import TuningRecordWarning, validate_record

from .test_tuner import FAKE_COSTS, TARGET, FakeTemplate, _measure, _task


@pytest.fixture
def cache(tmp_path):
    return TuningCache(str(tmp_path / "tuning"))


def _tune(cache, templates, level=1):
    return tune(_task(), {}, "scale", TARGET, templates, level, prepare=lambda s: None, measure=_measure,
                cache=cache, workers=1)


def _only_record(cache):
    names = [n for n in os.listdir(cache.root) if n.endswith(".json")]
    assert len(names) == 1
    return os.path.join(cache.root, names[0])


def _rewrite(path, **changes):
    with open(path) as f:
        record = json.load(f)
    record.update(changes)
    with open(path, "w") as f:
        json.dump(record, f)


def _templates():
    FAKE_COSTS.update(recA=lambda t: abs(t - 16) + 1.0)
    return [FakeTemplate("recA", [4, 8, 16, 32])]


@pytest.mark.parametrize("params", [{"tile": 7}, {"tile": "16"}, {"tile": True}, "tile=16", [16], {},
                                    {"tile": 16, "workers": 0}])
def test_record_outside_the_space_warns_names_the_file_and_is_tuned_again(cache, params):
    templates = _templates()
    first = _tune(cache, templates)
    assert first.params == {"tile": 16} and not first.from_cache
    path = _only_record(cache)
    _rewrite(path, params=params)
    with pytest.warns(TuningRecordWarning, match=os.path.basename(path)):
        again = _tune(cache, templates)
    assert again.params == {"tile": 16} and not again.from_cache
    assert _tune(cache, templates).from_cache  # the re-tune replaced the bad record


def test_record_naming_an_unknown_template_or_old_version_is_tuned_again(cache):
    templates = _templates()
    _tune(cache, templates)
    path = _only_record(cache)
    _rewrite(path, template="someone_else")
    with pytest.warns(TuningRecordWarning, match="not one of"):
        assert not _tune(cache, templates).from_cache
    _rewrite(path, version="0")
    with pytest.warns(TuningRecordWarning, match="version"):
        assert not _tune(cache, templates).from_cache


def test_garbage_numbers_in_a_valid_record_do_not_break_it(cache):
    templates = _templates()
    _tune(cache, templates)
    _rewrite(_only_record(cache), seconds="fast", candidates=-3)
    result = _tune(cache, templates)
    assert result.from_cache and result.seconds == 0.0 and result.candidates == 0


def test_group_writable_record_is_not_trusted(cache):
    templates = _templates()
    _tune(cache, templates)
    path = _only_record(cache)
    os.chmod(path, 0o666)
    with pytest.warns(TuningRecordWarning, match="writable by group or others"):
        assert not _tune(cache, templates).from_cache


def test_symlinked_record_is_not_trusted(cache, tmp_path):
    templates = _templates()
    _tune(cache, templates)
    path = _only_record(cache)
    os.rename(path, tmp_path / "planted.json")
    os.symlink(tmp_path / "planted.json", path)
    with pytest.warns(TuningRecordWarning):
        assert not _tune(cache, templates).from_cache


def test_space_level_is_part_of_the_key(cache):
    FAKE_COSTS.update(lvl=lambda t: float(t))  # smaller is faster

    class Levelled(FakeTemplate):
        def space(self, target, level):
            return [{"tile": t} for t in ([64, 32] if level == 1 else [64, 32, 2])]

    templates = [Levelled("lvl", [])]
    assert _tune(cache, templates, level=1).params == {"tile": 32}
    level2 = _tune(cache, templates, level=2)
    assert level2.params == {"tile": 2} and not level2.from_cache
    assert _tune(cache, templates, level=1).from_cache
    assert TuningCache.key("t", "x", "op", [("a", "1")], 1) != TuningCache.key("t", "x", "op", [("a", "1")], 2)


def test_key_depends_on_each_field():
    base = ("t", "x", "op", [("a", "1")], 1)
    keys = {TuningCache.key(*base)}
    for i, other in enumerate(["t2", "x2", "op2", [("a", "2")], 2]):
        changed = list(base)
        changed[i] = other
        keys.add(TuningCache.key(*changed))
    keys.add(TuningCache.key("t", "x", "op", [("b", "1")], 1))
    assert len(keys) == 7
    assert TuningCache.key("t", "x", "op", [("a", "1"), ("b", "1")], 1) == \
        TuningCache.key("t", "x", "op", [("b", "1"), ("a", "1")], 1)


def test_validate_record_returns_the_templates_own_candidate():
    templates = _templates()
    template, params, why = validate_record({"template": "recA", "params": {"tile": 8}}, templates, TARGET, 1)
    assert template is templates[0] and params == {"tile": 8} and why == ""
    assert validate_record({"template": "recA", "params": {"tile": 8.0}}, templates, TARGET, 1)[0] is None


# -- the tuning key's fields and the record's round trip (mutation-testing survivors) --

def test_target_and_operator_are_part_of_the_key(cache):
    from hidet_framework.backend.contract import Target

    templates = _templates()
    assert not _tune(cache, templates).from_cache
    other_target = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512})
    again = tune(_task(), {}, "scale", other_target, templates, 1, prepare=lambda s: None, measure=_measure,
                 cache=cache, workers=1)
    assert not again.from_cache
    other_op = tune(_task(), {}, "scale_again", TARGET, templates, 1, prepare=lambda s: None, measure=_measure,
                    cache=cache, workers=1)
    assert not other_op.from_cache
    assert _tune(cache, templates).from_cache


def test_level_0_never_reads_the_cache(cache):
    templates = _templates()
    key = TuningCache.key(_task().fingerprint(), TARGET.fingerprint(), "scale", [("recA", "1")], 0)
    cache.put(key, {"template": "recA", "version": "1", "params": {"tile": 32}})  # valid, but not the default
    result = _tune(cache, templates, level=0)
    assert result.params == {"tile": 4} and not result.from_cache  # the default, untouched


def test_a_record_round_trips_every_field(cache):
    FAKE_COSTS.update(rt=lambda t: {4: 1.2, 8: 1.1, 16: 1.0, 32: 3.0}[t])  # three within 1.25x of the leader

    templates = [FakeTemplate("rt", [4, 8, 16, 32])]
    first = _tune(cache, templates)
    assert first.params == {"tile": 16} and first.seconds == 1.0  # not the first of the close ones
    assert first.candidates == 4 and first.failures == () and 0.0 <= first.tuning_seconds < 60
    with open(_only_record(cache)) as f:
        stored = json.load(f)
    assert stored == {"template": "rt", "version": "1", "params": {"tile": 16}, "seconds": 1.0,
                      "candidates": 4, "tuning_seconds": first.tuning_seconds}
    again = _tune(cache, templates)
    assert again.from_cache and again.params == {"tile": 16} and again.seconds == 1.0
    assert again.candidates == 4 and again.failures == () and again.tuning_seconds == 0.0


def test_a_single_candidate_is_returned_without_timing(cache):
    FAKE_COSTS.update(one=lambda t: 5.0)
    result = _tune(cache, [FakeTemplate("one", [8])])
    assert result.params == {"tile": 8} and result.seconds == 0.0 and result.candidates == 1
    assert result.failures == () and 0.0 <= result.tuning_seconds < 60 and result.from_cache is False
    assert not os.path.exists(cache.root) or not os.listdir(cache.root)  # nothing worth caching


# -- the search's boundaries (mutation-testing survivors of tuner.py) --

def _timed(cache, costs, tiles):
    FAKE_COSTS.update(edge=lambda t: costs[t])
    timings = []

    def measure(scheduled, repeat, prepared=None):
        timings.append((scheduled[1], repeat))
        return _measure(scheduled, repeat)

    result = tune(_task(), {}, "scale", TARGET, [FakeTemplate("edge", tiles)], 1, prepare=lambda s: None,
                  measure=measure, cache=cache, workers=1)
    return result, timings


def test_first_round_times_three_runs_and_the_close_ones_ten(cache):
    result, timings = _timed(cache, {1: 1.0, 2: 1.25, 3: 1.2501, 4: 2.0}, [1, 2, 3, 4])
    assert sorted(timings) == [(1, 3), (1, 10), (2, 3), (2, 10), (3, 3), (4, 3)]  # exactly 1.25x is close
    assert result.params == {"tile": 1}


def test_at_most_eight_close_candidates_and_the_fastest_among_them(cache):
    costs = {t: 1.0 + 0.01 * (10 - t) for t in range(1, 11)}  # the last candidate is the fastest
    result, timings = _timed(cache, costs, list(range(1, 11)))
    second = sorted(t for t, n in timings if n == 10)
    assert second == [3, 4, 5, 6, 7, 8, 9, 10] and result.params == {"tile": 10}


def test_run_time_failure_message_quotes_the_first_failure(cache):
    FAKE_COSTS.update(bad=lambda t: 1.0)

    def measure(scheduled, repeat, prepared=None):
        raise RuntimeError(f"candidate {scheduled[1]} crashed")

    with pytest.raises(Exception, match="the first: RuntimeError: candidate 1 crashed"):
        tune(_task(), {}, "scale", TARGET, [FakeTemplate("bad", [1, 2])], 1, prepare=lambda s: None,
             measure=measure, cache=cache, workers=1)


def test_build_failures_name_the_template_and_params(cache):
    FAKE_COSTS.update(named=lambda t: 1.0)
    result = _tune(cache, [FakeTemplate("named", [1, 2], fail=(2,))])
    (index, message), = result.failures
    assert message.startswith("named {'tile': 2}: RuntimeError: tile 2 does not compile"), message


def test_params_with_several_keys_match_in_any_order():
    class TwoKeys(FakeTemplate):
        def space(self, target, level):
            return [{"a": 1, "b": 2}, {"b": 3, "a": 4}]

    templates = [TwoKeys("two", [])]
    for params in ({"b": 2, "a": 1}, {"a": 4, "b": 3}):
        assert validate_record({"template": "two", "params": params}, templates, TARGET, 1)[0] is templates[0]
    assert validate_record({"template": "two", "params": {"a": 1, "b": 3}}, templates, TARGET, 1)[0] is None


def test_a_record_that_cannot_be_written_leaves_no_temp_file(cache):
    with pytest.raises(TypeError):
        cache.put("k" * 32, {"template": "x", "params": object()})
    assert os.listdir(cache.root) == []
