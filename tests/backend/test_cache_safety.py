"""Issue 12 items 4, 6, 9: the build cache trusts only files nobody else could have
written, checked on the descriptor the bytes are read from; unusable entries are
rebuilt; leftovers of killed builds are pruned; unusable cache folders say so."""
from __future__ import annotations

import json
import os
import stat

import pytest

from hidet_framework.backend.build_cache import (BuildCache, CacheError, CacheWarning, make_key,
                                                 read_artifact)
from hidet_framework.backend.private_files import UnsafeCacheFile, read_private

is_root = hasattr(os, "geteuid") and os.geteuid() == 0


def _builder(payload: bytes, calls: list):
    def build(work: str) -> str:
        calls.append(work)
        path = os.path.join(work, "out.so")
        with open(path, "wb") as f:
            f.write(payload)
        return path
    return build


def _entry(cache: BuildCache, parts) -> tuple[str, str]:
    key = make_key(parts)
    return key, cache.entry_dir(key)


def _forge_sidecar(entry: str, payload: bytes) -> None:
    """What an attacker who can write the entry does: make the sidecar's hash match."""
    import hashlib

    meta_path = os.path.join(entry, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta["sha256"] = hashlib.sha256(payload).hexdigest()
    os.chmod(meta_path, 0o600)
    with open(meta_path, "w") as f:
        json.dump(meta, f)


PARTS = {"backend": "test", "source": "int x;"}


def test_group_writable_artifact_is_not_trusted_and_is_rebuilt():
    cache, calls = BuildCache.default(), []
    path, hit = cache.get_or_build(PARTS, _builder(b"good", calls))
    assert not hit
    os.chmod(path, 0o666)
    assert cache.lookup(make_key(PARTS)) is None
    with pytest.raises(UnsafeCacheFile, match="writable by group or others"):
        read_artifact(path)
    with pytest.warns(CacheWarning, match="discarded and rebuilt"):
        path2, hit = cache.get_or_build(PARTS, _builder(b"good", calls))
    assert not hit and len(calls) == 2 and read_artifact(path2) == b"good"
    assert stat.S_IMODE(os.stat(path2).st_mode) & 0o022 == 0


def test_group_writable_entry_folder_is_not_trusted():
    cache, calls = BuildCache.default(), []
    cache.get_or_build(PARTS, _builder(b"good", calls))
    key, entry = _entry(cache, PARTS)
    os.chmod(entry, 0o777)
    assert cache.lookup(key) is None


def test_symlinked_artifact_with_matching_hash_is_refused(tmp_path):
    cache, calls = BuildCache.default(), []
    path, _ = cache.get_or_build(PARTS, _builder(b"good", calls))
    foreign = tmp_path / "foreign.so"
    foreign.write_bytes(b"evil")
    os.unlink(path)
    os.symlink(foreign, path)
    _forge_sidecar(os.path.dirname(path), b"evil")
    assert cache.lookup(make_key(PARTS)) is None
    with pytest.raises(UnsafeCacheFile):
        read_artifact(path)


def test_symlinked_entry_folder_is_refused(tmp_path):
    cache, calls = BuildCache.default(), []
    path, _ = cache.get_or_build(PARTS, _builder(b"good", calls))
    key, entry = _entry(cache, PARTS)
    elsewhere = tmp_path / "elsewhere"
    os.rename(entry, elsewhere)
    os.symlink(elsewhere, entry)
    assert cache.lookup(key) is None
    with pytest.raises(UnsafeCacheFile):
        read_artifact(path)


@pytest.mark.skipif(not is_root, reason="giving a file to another user needs root")
def test_foreign_owned_entry_is_refused_and_replaced():
    cache, calls = BuildCache.default(), []
    path, _ = cache.get_or_build(PARTS, _builder(b"good", calls))
    key, entry = _entry(cache, PARTS)
    os.chown(path, 4242, -1)
    assert cache.lookup(key) is None
    with pytest.raises(UnsafeCacheFile, match="owned by uid 4242"):
        read_artifact(path)
    os.chown(path, os.getuid(), -1)
    os.chown(entry, 4242, -1)
    assert cache.lookup(key) is None
    with pytest.warns(CacheWarning):
        path2, hit = cache.get_or_build(PARTS, _builder(b"good", calls))
    assert not hit and os.stat(os.path.dirname(path2)).st_uid == os.getuid()


def test_tampered_bytes_are_not_returned():
    cache, calls = BuildCache.default(), []
    path, _ = cache.get_or_build(PARTS, _builder(b"good", calls))
    with open(path, "wb") as f:
        f.write(b"evil")
    with pytest.raises(UnsafeCacheFile, match="does not match its sidecar"):
        read_artifact(path)


def test_once_world_writable_cache_is_emptied_by_the_repair(isolated_build_cache):
    cache, calls = BuildCache.default(), []
    path, _ = cache.get_or_build(PARTS, _builder(b"good", calls))
    # While the folder was open to everyone, anybody could have planted an entry.
    os.chmod(cache.builds_dir, 0o777)
    with pytest.warns(CacheWarning, match="was writable by group or others"):
        cache = BuildCache.default()
    assert stat.S_IMODE(os.stat(cache.builds_dir).st_mode) == 0o700
    assert not os.path.exists(path)
    _, hit = cache.get_or_build(PARTS, _builder(b"good", calls))
    assert not hit


def test_artifact_that_is_a_folder_is_rebuilt_without_leftovers():
    cache, calls = BuildCache.default(), []
    path, _ = cache.get_or_build(PARTS, _builder(b"good", calls))
    os.unlink(path)
    os.mkdir(path)
    with pytest.warns(CacheWarning, match="not a regular file"):
        path2, hit = cache.get_or_build(PARTS, _builder(b"good", calls))
    assert not hit and path2 == path and read_artifact(path) == b"good"
    entry = os.path.dirname(path)
    assert sorted(os.listdir(entry)) == ["artifact.so", "meta.json", "source.c"]
    assert os.listdir(cache._tmp_dir) == []
    assert cache.get_or_build(PARTS, _builder(b"good", calls))[1]


def test_read_private_refuses_a_symlinked_parent(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (real / "f").write_bytes(b"x")
    os.symlink(real, tmp_path / "link")
    assert read_private(str(tmp_path), "real/f") == b"x"
    with pytest.raises(UnsafeCacheFile):
        read_private(str(tmp_path), "link/f")
    with pytest.raises(UnsafeCacheFile):
        read_private(str(tmp_path), "../f")


def test_prune_removes_leftovers_of_killed_builds():
    cache, calls = BuildCache.default(), []
    cache.get_or_build(PARTS, _builder(b"good", calls))
    key = make_key(PARTS)
    built_lock = os.path.join(cache._locks_dir, key + ".lock")
    assert os.path.exists(built_lock)
    other = "f" * 64
    killed = os.path.join(cache._tmp_dir, other + "-abc")  # a build killed mid-way
    os.makedirs(os.path.join(killed, "sub"))
    assert cache.prune(force=True) >= 2
    assert not os.path.exists(killed) and not os.path.exists(built_lock)
    assert cache.get_or_build(PARTS, _builder(b"good", calls))[1]


def test_prune_keeps_the_folder_of_a_running_build():
    import filelock

    cache = BuildCache.default()
    key = "e" * 64
    running = os.path.join(cache._tmp_dir, key + "-xyz")
    os.makedirs(running)
    with filelock.FileLock(os.path.join(cache._locks_dir, key + ".lock")):
        cache.prune(force=True)
        assert os.path.isdir(running)
    cache.prune(force=True)
    assert not os.path.exists(running)


def test_prune_runs_at_most_once_an_hour():
    cache = BuildCache.default()
    cache.prune(force=True)
    killed = os.path.join(cache._tmp_dir, "d" * 64 + "-abc")
    os.makedirs(killed)
    assert cache.prune() == 0 and os.path.isdir(killed)


def test_cache_path_that_is_a_file_says_so(isolated_build_cache):
    isolated_build_cache.write_text("not a folder")
    with pytest.raises(CacheError, match="exists and is not a folder.*HIDET_FRAMEWORK_CACHE"):
        BuildCache.default()


@pytest.mark.skipif(is_root, reason="root may write into read-only folders")
def test_read_only_cache_folder_says_so(isolated_build_cache):
    isolated_build_cache.mkdir(mode=0o500)
    try:
        with pytest.raises(CacheError, match="HIDET_FRAMEWORK_CACHE"):
            BuildCache.default()
    finally:
        os.chmod(isolated_build_cache, 0o700)


def test_read_only_cache_folder_says_so_even_for_root(isolated_build_cache, monkeypatch):
    isolated_build_cache.mkdir(mode=0o500)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # what a non-root user gets
    with pytest.raises(CacheError, match="not writable.*HIDET_FRAMEWORK_CACHE"):
        BuildCache.default()


def test_an_exposed_root_is_repaired_without_touching_the_users_files(isolated_build_cache):
    cache, calls = BuildCache.default(), []
    path, _ = cache.get_or_build(PARTS, _builder(b"good", calls))
    notes = isolated_build_cache / "notes.txt"  # the root may be a folder the user keeps things in
    notes.write_text("mine")
    (isolated_build_cache / "tuning").mkdir()
    (isolated_build_cache / "tuning" / "planted.json").write_text("{}")
    os.chmod(isolated_build_cache, 0o777)
    with pytest.warns(CacheWarning, match="was writable by group or others"):
        cache = BuildCache.default()
    assert stat.S_IMODE(os.stat(isolated_build_cache).st_mode) == 0o700
    assert notes.read_text() == "mine"
    assert not os.path.exists(path) and not (isolated_build_cache / "tuning" / "planted.json").exists()
    assert not cache.get_or_build(PARTS, _builder(b"good", calls))[1]


def test_a_shared_sticky_folder_is_refused_as_a_root(isolated_build_cache):
    from hidet_framework.backend.build_cache import CacheSecurityError

    isolated_build_cache.mkdir()
    os.chmod(isolated_build_cache, 0o1777)
    try:
        with pytest.raises(CacheSecurityError, match="shared folder"):
            BuildCache.default()
        assert stat.S_IMODE(os.stat(isolated_build_cache).st_mode) == 0o1777  # left as it is
    finally:
        os.chmod(isolated_build_cache, 0o700)
