"""Source files stay small: no module of the core or of a bundled plugin grows past
MAX_LINES (split it by what its parts are instead). Prints the totals, so CI logs show
how the code base grows."""
from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 400
SOURCES = ["hidet_framework", "plugins/*/src", "hidet_plugin_*/src"]


def _sources() -> list[pathlib.Path]:
    return sorted(p for pattern in SOURCES for folder in ROOT.glob(pattern) for p in folder.rglob("*.py"))


def test_no_source_file_is_longer_than_the_limit():
    counts = {p.relative_to(ROOT): len(p.read_text().splitlines()) for p in _sources()}
    assert len(counts) > 50, "the source folders were not found"
    core = sum(n for p, n in counts.items() if p.parts[0] == "hidet_framework")
    print(f"\n{len(counts)} source files, {sum(counts.values())} lines ({core} in the core)")
    too_long = {str(p): n for p, n in counts.items() if n > MAX_LINES}
    assert not too_long, f"over {MAX_LINES} lines: {too_long}"
