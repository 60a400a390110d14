"""The tuner's and the tuning cache's smaller promises, each at its boundary: where the
cache lives, the record file's form, the size limit, the temporary file, the warnings, the progress display (shown on a terminal, hidden otherwise or when quiet) and
the worker count. Written to kill mutants of tuner/ the search tests let through
(issue 12)."""
import io
import json
import os
import sys
import warnings

import pytest

from hidet_framework.tuner import TuningCache, tune
from hidet_framework.tuner import cache as cache_module
from hidet_framework.tuner import tuner as tuner_module
from hidet_framework.tuner.cache import TuningRecordWarning

from .test_tuner import FAKE_COSTS, TARGET, FakeTemplate, _measure, _task


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def cache(tmp_path):
    return TuningCache(str(tmp_path / "tuning"))


def _templates():
    FAKE_COSTS.update(bndA=lambda t: abs(t - 16) + 1.0)
    return [FakeTemplate("bndA", [4, 8, 16, 32])]


def _tune(cache, templates, level=1, **kw):
    return tune(_task(), {}, "scale", TARGET, templates, level, prepare=lambda s: None, measure=_measure,
                cache=cache, **kw)


def test_default_cache_folder_is_tuning_under_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "root"))
    assert TuningCache().root == os.path.join(str(tmp_path / "root"), "tuning")
    assert TuningCache(str(tmp_path / "mine")).root == str(tmp_path / "mine")


def test_record_file_is_sorted_indented_json_named_by_key(cache):
    cache.put("k1", {"b": 1, "a": [1, 2], "template": "t", "params": {"z": 1, "y": 2}})
    path = os.path.join(cache.root, "k1.json")
    assert cache.path("k1") == path
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # the same record always gives the same bytes (stable across runs and dict orders)
    assert text == json.dumps({"params": {"y": 2, "z": 1}, "template": "t", "a": [1, 2], "b": 1},
                              indent=1, sort_keys=True)
    assert cache.get("k1")["params"] == {"z": 1, "y": 2}
    assert sorted(os.listdir(cache.root)) == ["k1.json"]


def test_put_writes_a_temporary_file_beside_the_record_then_renames(cache, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((src, dst, os.path.exists(src)))
        return real_replace(src, dst)

    monkeypatch.setattr(cache_module.os, "replace", spy)
    cache.put("k2", {"template": "t", "params": {}})
    (src, dst, existed), = seen
    assert existed and dst == cache.path("k2")
    assert os.path.dirname(src) == cache.root  # same folder: the rename is atomic
    name = os.path.basename(src)
    assert name.startswith(".tmp-") and name.endswith(".json") and name != "k2.json"


def test_records_over_16_mib_are_refused(cache):
    cache.put("big", {"template": "t", "params": {}})
    limit = 1 << 24
    body = json.dumps({"template": "t", "params": {}, "pad": ""})
    for size, readable in ((limit, True), (limit + 1, False)):
        text = body[:-2] + "x" * (size - len(body)) + body[-2:]
        assert len(text) == size
        with open(cache.path("big"), "w") as f:
            f.write(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = cache.get("big")
        assert (got is not None) == readable, size


def test_records_missing_a_field_or_not_an_object_are_absent(cache):
    for record in ({"template": "t"}, {"params": {}}, [1, 2], "x"):
        os.makedirs(cache.root, exist_ok=True)
        with open(cache.path("f"), "w") as f:
            json.dump(record, f)
        assert cache.get("f") is None, record
    with open(cache.path("f"), "w") as f:
        f.write("{not json")
    assert cache.get("f") is None
    assert cache.get("never-written") is None


def test_untrusted_record_warning_names_the_file(cache):
    cache.put("w", {"template": "t", "params": {}})
    os.chmod(cache.path("w"), 0o666)
    with pytest.warns(TuningRecordWarning, match="ignored and tuned again") as caught:
        assert cache.get("w") is None
    assert str(caught[0].message).startswith(f"tuning record {cache.path('w')} ignored and tuned again: ")


def test_invalid_record_warning_names_the_file_and_tunes_again(cache):
    templates = _templates()
    _tune(cache, templates, workers=1)
    (name,) = [n for n in os.listdir(cache.root) if n.endswith(".json")]
    path = os.path.join(cache.root, name)
    with open(path) as f:
        record = json.load(f)
    record["params"] = {"tile": 5}
    with open(path, "w") as f:
        json.dump(record, f)
    with pytest.warns(TuningRecordWarning) as caught:
        _tune_here = tune(_task(), {}, "scale", TARGET, templates, 1, prepare=lambda s: None,
                          measure=_measure, cache=cache, workers=1)
    assert _tune_here.params == {"tile": 16}
    assert path in str(caught[0].message)


def test_progress_is_shown_only_on_a_terminal_and_not_when_quiet(monkeypatch):
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    for quiet, shown in ((None, True), ("0", True), ("1", False)):
        if quiet is None:
            monkeypatch.delenv("HIDET_FRAMEWORK_QUIET", raising=False)
        else:
            monkeypatch.setenv("HIDET_FRAMEWORK_QUIET", quiet)
        p = tuner_module._progress()
        assert p.disable is (not shown), quiet
        assert p.live.transient and p.console.file is term
        assert [type(c) for c in p.columns] == [TextColumn, BarColumn, MofNCompleteColumn, TimeElapsedColumn,
                                                TextColumn, TimeRemainingColumn]  # done / total, time left
        assert p.columns[0].text_format == "{task.description}"
    monkeypatch.delenv("HIDET_FRAMEWORK_QUIET", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert tuner_module._progress().disable


def test_progress_names_what_it_builds_and_times(cache, monkeypatch):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.delenv("HIDET_FRAMEWORK_QUIET", raising=False)
    seen = []
    real = tuner_module._progress

    def spy():
        p = real()
        real_add = p.add_task
        p.add_task = lambda text, **kw: seen.append((text, kw)) or real_add(text, **kw)
        return p

    monkeypatch.setattr(tuner_module, "_progress", spy)
    _tune(cache, _templates(), workers=1)
    assert seen == [("building 4 candidates", {"total": 4}), ("timing 4 candidates", {"total": 4})]


def test_worker_count_is_the_candidates_or_the_cores_whichever_is_fewer(cache, monkeypatch):
    pools = []
    import multiprocessing

    real_ctx = multiprocessing.get_context

    class Ctx:
        def __init__(self, kind):
            assert kind == "fork"
            self.real = real_ctx(kind)

        def Pool(self, n):
            pools.append(n)
            return self.real.Pool(n)

    monkeypatch.setattr(tuner_module.multiprocessing, "get_context", Ctx)
    monkeypatch.setattr(tuner_module.os, "sched_getaffinity", lambda pid: set(range(3)))
    result = _tune(cache, _templates(), level=1)           # 4 candidates, 3 cores
    assert result.params == {"tile": 16} and pools == [3]
    monkeypatch.setattr(tuner_module.os, "sched_getaffinity", lambda pid: set(range(64)))
    _tune(TuningCache(cache.root + "2"), _templates(), level=1)   # 4 candidates, 64 cores
    assert pools == [3, 4]
    monkeypatch.setattr(tuner_module.os, "sched_getaffinity", lambda pid: {0})
    _tune(TuningCache(cache.root + "3"), _templates(), level=1)   # one core: no pool at all
    assert pools == [3, 4]


def test_counts_and_numbers_from_a_record_are_sanitised():
    assert tuner_module._count(0) == 0 and tuner_module._count(5) == 5 and tuner_module._count(-1) == 0
    assert tuner_module._count(True) == 0 and tuner_module._count(2.0) == 0 and tuner_module._count(None) == 0
    assert tuner_module._number(1) == 1.0 and tuner_module._number(2.5) == 2.5
    assert tuner_module._number(True) == 0.0 and tuner_module._number("3") == 0.0 and tuner_module._number(None) == 0.0


def test_a_result_that_cannot_travel_back_fails_only_its_candidate(cache):
    FAKE_COSTS.update(bndP=lambda t: abs(t - 16) + 1.0)

    def prepare(scheduled):
        name, tile = scheduled
        return (lambda: tile) if tile == 8 else tile  # a lambda does not pickle

    result = tune(_task(), {}, "scale", TARGET, [FakeTemplate("bndP", [4, 8, 16, 32])], 1, prepare=prepare,
                  measure=_measure, cache=cache, workers=2)
    assert result.params == {"tile": 16} and result.candidates == 4
    (index, why), = result.failures
    assert index == 1 and "bndP {'tile': 8}" in why and "pickle" in why.lower()


class _TaskReadingTemplate(FakeTemplate):
    def build(self, task, attributes, params, target):
        return (self.name, params["tile"] * task.outputs[0].shape[0] // 7)  # the task's extent (7)


def test_build_receives_the_task(cache):
    FAKE_COSTS.update(bndT=lambda t: abs(t - 16) + 1.0)
    result = _tune(cache, [_TaskReadingTemplate("bndT", [4, 16])], workers=1)
    assert result.params == {"tile": 16} and result.failures == ()


def test_validate_record_says_why():
    from hidet_framework.tuner.cache import validate_record

    (t,) = _templates()
    cases = [({"template": "nope", "params": {}}, "template 'nope' is not one of ['bndA']"),
             ({"template": 3, "params": {}}, "template 3 is not one of ['bndA']"),
             ({"template": "bndA", "version": "old", "params": {"tile": 16}},
              f"template bndA is at version {t.version!r}, the record at 'old'"),
             ({"template": "bndA", "params": [16]}, "params is a list, not a mapping"),
             ({"template": "bndA", "params": {"tile": 5}},
              "params {'tile': 5} are not a candidate of bndA at space level 1")]
    for record, why in cases:
        assert validate_record(record, [t], TARGET, 1) == (None, None, why)
    assert validate_record({"template": "bndA", "params": {"tile": 16}}, [t], TARGET, 1)[:2] == (t, {"tile": 16})


def test_the_pool_worker_fails_a_result_that_cannot_travel(cache):
    # what _build_all's workers run, called here (a forked worker is not traced)
    FAKE_COSTS.update(bndW=lambda t: 1.0)
    cand = tuner_module.Candidate(FakeTemplate("bndW", [4]), {"tile": 4})
    for in_pool, fails in ((True, True), (False, False)):
        request = tuner_module.TuneRequest(_task(), {}, "scale", TARGET, [cand.template], 1,
                                           prepare=lambda s: (lambda: s), measure=_measure,
                                           build=tuner_module._template_build)
        tuner_module._JOB.update(items=[(request, cand)], in_pool=in_pool)
        try:
            index, error, result = tuner_module._prepare_one(0)
        finally:
            tuner_module._JOB.clear()
        assert index == 0 and (error is not None) == fails and (result is None) == fails
        if fails:
            assert error.startswith("bndW {'tile': 4}: ") and "pickle" in error.lower()


def test_one_worker_keeps_results_that_do_not_pickle(cache):
    FAKE_COSTS.update(bndO=lambda t: abs(t - 16) + 1.0)
    result = tune(_task(), {}, "scale", TARGET, [FakeTemplate("bndO", [4, 16])], 1,
                  prepare=lambda s: (lambda: s), measure=_measure, cache=cache, workers=1)
    assert result.params == {"tile": 16} and result.failures == ()


class _Levelled(FakeTemplate):
    def space(self, target, level):
        return [{"tile": 1}] if level == 0 else [{"tile": 2}, {"tile": 4}]


def test_level_0_takes_the_level_0_default_and_ignores_even_a_valid_record(cache):
    FAKE_COSTS.update(bndL=lambda t: float(t))
    t = _Levelled("bndL", [])
    key = TuningCache.key(_task().fingerprint(), TARGET.fingerprint(), "scale", [(t.name, t.version)], 0)
    cache.put(key, {"template": "bndL", "version": t.version, "params": {"tile": 1}, "seconds": 9.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = _tune(cache, [t], level=0, workers=1)
    assert result.params == {"tile": 1} and not result.from_cache and result.seconds == 0.0


def test_errors_name_what_is_missing(cache):
    from hidet_framework.tuner import TuningError

    with pytest.raises(TuningError, match="^no template to tune$"):
        _tune(cache, [], workers=1)
    FAKE_COSTS.update(bndF=lambda t: 1.0)
    failing = FakeTemplate("bndF", [1, 2, 3, 4], fail=(1, 2, 3, 4))
    with pytest.raises(TuningError, match="every candidate failed to build for scale") as info:
        _tune(cache, [failing], workers=1)
    assert "tile 3 does not compile" in str(info.value) and "tile 4 does not compile" not in str(info.value)
    assert len(TuningCache.key("a", "b", "c", [], 1)) == 32
