"""The pass context: configuration and instruments for the passes run inside it.

    with PassContext(config={"bounds_check": True}, instruments=[PrintAfter("simplify_expr")]):
        lowered = lower(module, "cpu")

Contexts nest; `PassContext.current()` is the innermost one, or a default context
(default config, no instruments) outside any ``with``. The stack is per thread, so
parallel compilation threads do not see each other's contexts.
"""
from __future__ import annotations

import threading
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence

# Known config keys and their defaults; passes read ``ctx.config[key]``. Unknown keys
# are allowed (plugin passes may read their own) but kept apart from typos by `get`.
DEFAULT_CONFIG: Mapping[str, Any] = MappingProxyType({
    "bounds_check": False,  # insert_bounds_check: assert every tensor index is in range
    "unroll": True,         # unroll_loops: honour unroll hints on constant-extent loops
    "max_unroll": 1024,     # unroll_loops: never expand more copies of a body than this
    "max_unroll_statements": 4096,  # unroll_loops: nor more statements than this (copies x body)
})

_local = threading.local()


def _stack() -> list["PassContext"]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class PassContext:
    """Config and instruments for a pipeline run.

    :param config: overrides of `DEFAULT_CONFIG` (and extra keys for plugin passes).
    :param instruments: objects with any of ``enter_pipeline(module, ctx)``,
        ``before_pass(pass_, module, ctx)``, ``after_pass(pass_, module, ctx)``,
        ``exit_pipeline(module, ctx)``; see ``lowering.instruments``.
    """

    def __init__(self, config: Optional[Mapping[str, Any]] = None,
                 instruments: Optional[Sequence[Any]] = None) -> None:
        self.config: dict[str, Any] = {**DEFAULT_CONFIG, **dict(config or {})}
        self.instruments: list[Any] = list(instruments or [])

    @staticmethod
    def current() -> "PassContext":
        """The innermost active context, or a fresh default one."""
        stack = _stack()
        return stack[-1] if stack else PassContext()

    def __enter__(self) -> "PassContext":
        _stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        stack = _stack()
        if not stack or stack[-1] is not self:
            raise RuntimeError("PassContext exited out of order")
        stack.pop()

    # instrument hooks, called by run_pipeline
    def _notify(self, hook: str, *args: Any) -> None:
        for instrument in self.instruments:
            method = getattr(instrument, hook, None)
            if method is not None:
                method(*args, self)

    def __repr__(self) -> str:
        names = ", ".join(type(i).__name__ for i in self.instruments)
        return f"PassContext(config={self.config}, instruments=[{names}])"
