"""Names from a model are data, never code: they are sanitized before they become the
names of tensors (which may reach generated sources and error messages)."""
from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def sanitize(name: str, prefix: str = "v", limit: int = 48) -> str:
    """An identifier made of ``[A-Za-z0-9_]`` only, not starting with a digit, at most
    `limit` characters; empty or non-string names become `prefix`."""
    if not isinstance(name, str) or not name:
        return prefix
    clean = _UNSAFE.sub("_", name)[:limit]
    if not clean or clean[0].isdigit():
        clean = f"{prefix}_{clean}"[:limit]
    return clean


def shown(name: str, limit: int = 80) -> str:
    """A model name as error messages show it: printable, quoted, bounded."""
    text = name if isinstance(name, str) else repr(name)
    text = "".join(c if c.isprintable() else "?" for c in text)
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return repr(text)
