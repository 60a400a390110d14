"""The test processes' frame-stack chunk cache (tests/stack_chunk_cache.py, installed by
tests/conftest.py): in place where it is needed, reused at a chunk boundary, and deep
recursion still computes the right values through it."""
from __future__ import annotations

import shutil
import sys

import pytest

shim = sys.modules.get("hidet_tests_stack_chunk_cache")  # loaded by tests/conftest.py


def _depth(n: int) -> int:
    return 0 if n == 0 else 1 + _depth(n - 1)


def _leaf(a: int, b: int, c: int, d: int, e: int, f: int, g: int, h: int) -> int:
    x1 = x2 = x3 = x4 = x5 = x6 = x7 = x8 = a  # a frame of some size
    return a + b + c + d + e + f + g + h + x1 + x2 + x3 + x4 + x5 + x6 + x7 + x8 - 8 * a


def _call_leaves_at_every_depth(depth: int, calls: int) -> int:
    """At each depth below `depth`, call `_leaf` `calls` times: at the depth where the
    current chunk has less room left than `_leaf`'s frame, every call crosses the chunk
    boundary (2 KiB of the 16 KiB chunk's room per 100 frames, so 400 depths cover a chunk)."""
    total = sum(_leaf(depth, 1, 1, 1, 1, 1, 1, 1) for _ in range(calls))
    return total + (_call_leaves_at_every_depth(depth - 1, calls) if depth else 0)


def test_deep_recursion_is_right_through_the_cache():
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 30_000))
    try:
        assert [_depth(n) for n in (0, 1, 500, 5_000, 20_000)] == [0, 1, 500, 5_000, 20_000]
        assert _call_leaves_at_every_depth(600, 3) == sum(3 * (d + 7) for d in range(601))
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.skipif(shim is None or not shim.needed(), reason="CPython 3.13+ keeps a chunk itself")
def test_installed_where_needed_and_a_boundary_call_reuses_the_kept_chunk():
    if not shim.installed():
        assert shutil.which("gcc") is None and shutil.which("cc") is None, "a C compiler is here: it should be in"
        pytest.skip("no C compiler")
    before = shim.chunks_reused()
    _call_leaves_at_every_depth(600, 200)
    # at least one depth sits at a chunk boundary: its 200 calls each take the kept chunk
    assert shim.chunks_reused() - before >= 200
