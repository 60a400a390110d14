"""Remove what killed builds leave in the build cache.

A compile killed mid-way (Ctrl-C, OOM killer, a closed terminal) leaves its temp build
folder under ``builds/tmp/``; every key ever built leaves a lock file under
``builds/locks/``; a crash between writing and renaming a sidecar leaves a ``.tmp-*``
file in the entry. None of these is ever read, but they accumulate. A temp folder is
named ``<key>-<random>`` so its key's lock says whether a build still owns it: a free
lock means nobody does. Lock files are removed while held, so a process that was
waiting on the removed inode gets it next, finds the entry built (or builds it: the
install is atomic, so a duplicate build is only wasted time, never a wrong artifact).
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator

import filelock

__all__ = ["prune_build_cache"]

PRUNE_INTERVAL_S = 3600.0  # how often leftovers are looked for
STALE_AGE_S = 3600.0  # a temp file or an unbuilt key's lock this old is abandoned
_STAMP = ".last-prune"


def prune_build_cache(cache: Any, *, force: bool = False) -> int:
    """Prune `cache` (a BuildCache) at most once per PRUNE_INTERVAL_S (a stamp file
    records the last run) unless `force`. Returns how many things were removed."""
    from hidet_framework.backend.build_cache import _remove

    stamp = os.path.join(cache.builds_dir, _STAMP)
    now = time.time()
    try:
        if not force and now - os.stat(stamp).st_mtime < PRUNE_INTERVAL_S:
            return 0
    except FileNotFoundError:
        pass
    with open(stamp, "w"):
        pass
    locks_dir, tmp_dir = cache._locks_dir, cache._tmp_dir
    removed = 0
    for name in os.listdir(tmp_dir):
        key = name.split("-", 1)[0]
        path = os.path.join(tmp_dir, name)
        if len(key) != 64:  # not made by get_or_build: remove it once it is old
            if _age(path, now) > STALE_AGE_S:
                _remove(path)
                removed += 1
            continue
        with _try_lock(locks_dir, key) as held:
            if held:
                _remove(path)
                _unlink_lock(locks_dir, key)
                removed += 1
    for name in os.listdir(locks_dir):
        key = name[: -len(".lock")] if name.endswith(".lock") else ""
        if len(key) != 64:
            continue
        path = os.path.join(locks_dir, name)
        with _try_lock(locks_dir, key) as held:
            if held and (cache.lookup(key) is not None or _age(path, now) > STALE_AGE_S):
                _unlink_lock(locks_dir, key)
                removed += 1
    for prefix in os.listdir(cache.builds_dir):
        if len(prefix) != 2:
            continue
        for entry in os.scandir(os.path.join(cache.builds_dir, prefix)):
            if entry.name.startswith(".discarded-"):
                _remove(entry.path)
                removed += 1
            elif entry.is_dir(follow_symlinks=False):
                for leftover in os.scandir(entry.path):
                    if leftover.name.startswith(".tmp-") and _age(leftover.path, now) > STALE_AGE_S:
                        _remove(leftover.path)
                        removed += 1
    return removed


@contextlib.contextmanager
def _try_lock(locks_dir: str, key: str) -> Iterator[bool]:
    """True when `key`'s lock was free (it is then held inside the block)."""
    lock = filelock.FileLock(os.path.join(locks_dir, key + ".lock"), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def _unlink_lock(locks_dir: str, key: str) -> None:
    try:
        os.unlink(os.path.join(locks_dir, key + ".lock"))
    except OSError:
        pass


def _age(path: str, now: float) -> float:
    try:
        return now - os.lstat(path).st_mtime
    except OSError:
        return 0.0
