"""What the environment adds to a compile: the search-space level and progress bars."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator

ENV_SPACE = "HIDET_FRAMEWORK_SPACE"  # default search-space level when `space` is not given
ENV_QUIET = "HIDET_FRAMEWORK_QUIET"  # "1": no progress bars


def resolve_space(space: int | None) -> int:
    """`space`, else $HIDET_FRAMEWORK_SPACE, else 0; one of 0, 1, 2."""
    if space is None:
        text = os.environ.get(ENV_SPACE, "").strip() or "0"
        if text not in ("0", "1", "2"):
            raise ValueError(f"{ENV_SPACE}={text!r}: expected 0, 1 or 2")
        space = int(text)
    if space not in (0, 1, 2) or isinstance(space, bool):
        raise ValueError(f"space must be 0 (default candidate), 1 (~30 candidates) or 2 (full space), got {space!r}")
    return space


def _quiet() -> bool:
    return os.environ.get(ENV_QUIET, "") not in ("", "0") or not sys.stderr.isatty()


@contextlib.contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for long work (done / total, time spent, time left); quiet for short work, when stderr is not
    a TTY, or with HIDET_FRAMEWORK_QUIET=1. Yields ``advance()``."""
    if total < 4 or _quiet():
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("left"), TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        handle = bar.add_task(what, total=total)
        yield lambda: bar.advance(handle)
