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
