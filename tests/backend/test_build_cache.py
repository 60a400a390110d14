"""The content-addressed build cache: keys, hits, corruption, privacy, concurrency."""
from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from hidet_framework.backend.build_cache import BuildCache, CacheSecurityError, CacheWarning, make_key

PARTS = {"backend": "test", "source": "int f(void) { return 1; }", "flags": ["-O2"],
         "compiler": "cc 1.0", "target": "abc"}


def writer(content: bytes, calls: list):
    def build(tmp_dir: str) -> str:
        calls.append(tmp_dir)
        path = os.path.join(tmp_dir, "out.bin")
        with open(path, "wb") as f:
            f.write(content)
        return path
    return build


def test_key_depends_on_every_part():
    base = make_key(PARTS)
    for name in PARTS:
        changed = dict(PARTS, **{name: PARTS[name] + ["x"] if isinstance(PARTS[name], list) else PARTS[name] + "x"})
        assert make_key(changed) != base, name
    assert make_key(dict(reversed(list(PARTS.items())))) == base  # order-independent
    with pytest.raises(TypeError):
        make_key({"x": object()})


def test_default_root_follows_env_and_is_private(isolated_build_cache):
    cache = BuildCache.default()
    assert cache.root == str(isolated_build_cache)
    for path in (cache.root, cache.builds_dir):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700


def test_world_writable_root_is_repaired(isolated_build_cache):
    os.makedirs(isolated_build_cache)
    os.chmod(isolated_build_cache, 0o777)
    with pytest.warns(CacheWarning, match="mode 777.*it is now 0700"):
        BuildCache.default()
    assert stat.S_IMODE(os.stat(isolated_build_cache).st_mode) == 0o700


def test_foreign_owned_root_is_refused(isolated_build_cache, monkeypatch):
    os.makedirs(isolated_build_cache)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(isolated_build_cache).st_uid + 1)
    with pytest.raises(CacheSecurityError, match="owned by uid"):
        BuildCache.default()


def test_miss_then_hit_keeps_source_and_sidecar():
    cache, calls = BuildCache.default(), []
    path, hit = cache.get_or_build(PARTS, writer(b"artifact-1", calls), suffix=".bin")
    assert not hit and len(calls) == 1 and open(path, "rb").read() == b"artifact-1"
    again, hit = cache.get_or_build(PARTS, writer(b"other", calls), suffix=".bin")
    assert hit and again == path and len(calls) == 1
    entry = os.path.dirname(path)
    assert open(os.path.join(entry, "source.c")).read() == PARTS["source"]
    meta = json.load(open(os.path.join(entry, "meta.json")))
    assert meta["key_parts"]["compiler"] == "cc 1.0" and "source" not in meta["key_parts"]
    assert os.listdir(os.path.join(cache.builds_dir, "tmp")) == []  # build dirs cleaned up


def test_corrupted_artifact_is_rebuilt():
    cache, calls = BuildCache.default(), []
    path, _ = cache.get_or_build(PARTS, writer(b"good bytes", calls), suffix=".bin")
    with open(path, "r+b") as f:
        f.write(b"BAD!")
    assert cache.lookup(make_key(PARTS)) is None
    path2, hit = cache.get_or_build(PARTS, writer(b"good bytes", calls), suffix=".bin")
    assert not hit and path2 == path and open(path).read() == "good bytes" and len(calls) == 2


def test_sidecar_cannot_point_outside_the_entry():
    cache = BuildCache.default()
    path, _ = cache.get_or_build(PARTS, writer(b"x", []), suffix=".bin")
    meta_path = os.path.join(os.path.dirname(path), "meta.json")
    meta = json.load(open(meta_path))
    meta["artifact"] = "../../../etc/passwd"
    json.dump(meta, open(meta_path, "w"))
    assert cache.lookup(make_key(PARTS)) is None


def test_failed_build_caches_nothing():
    cache = BuildCache.default()

    def fails(tmp_dir):
        raise RuntimeError("compiler exploded")

    with pytest.raises(RuntimeError, match="exploded"):
        cache.get_or_build(PARTS, fails)
    assert cache.lookup(make_key(PARTS)) is None
    assert os.listdir(os.path.join(cache.builds_dir, "tmp")) == []


CHILD = textwrap.dedent("""
    import os, sys, time
    from hidet_framework.backend.build_cache import BuildCache
    parts = {"backend": "test", "source": "concurrent"}
    def build(tmp_dir):
        with open(sys.argv[1], "a") as log:
            log.write("built\\n")
        time.sleep(0.5)  # hold the lock long enough for the other process to wait on it
        path = os.path.join(tmp_dir, "a.bin")
        open(path, "wb").write(b"payload")
        return path
    print(BuildCache.default().get_or_build(parts, build, suffix=".bin"))
""")


def test_two_processes_build_once(tmp_path):
    log = tmp_path / "builds.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(log)], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    results = [ast.literal_eval(o) for o in outs]
    assert results[0][0] == results[1][0]
    assert sorted(hit for _, hit in results) == [False, True]
    assert log.read_text().count("built") == 1
    entry = os.path.dirname(results[0][0])
    assert sorted(os.listdir(entry)) == ["artifact.bin", "meta.json", "source.c"]
