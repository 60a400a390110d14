"""The on-disk cache of tuning results.

One small JSON file per (task fingerprint, target, operator, template versions, space
level) in ``<cache root>/tuning/``. Files are written to a temporary name and moved
into place (atomic on POSIX), so concurrent processes never read half a record; a
record that does not parse is treated as absent. No pickles.

A record picks the code that runs, so it is read like the build cache's files
(:func:`~hidet_framework.backend.private_files.read_private`: folder and file owned by
this user, not group- or world-writable, not symlinks, checked on the descriptor read
from), and :func:`validate_record` checks it against the templates before it is used:
a record naming no current template, or parameters outside that template's space at
the requested level, is reported with a warning naming the file and tuned again (the
new result replaces it). The level is part of the key: a level-1 result never answers
a level-2 request.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from typing import Any, Optional, Sequence

from hidet_framework.backend.build_cache import cache_root, secure_dir
from hidet_framework.backend.private_files import UnsafeCacheFile, read_private

__all__ = ["TuningCache", "TuningRecordWarning", "validate_record"]


class TuningRecordWarning(UserWarning):
    """A tuning record was ignored (untrusted or invalid); the task is tuned again."""


class TuningCache:
    def __init__(self, root: Optional[str] = None) -> None:
        self.root = root or os.path.join(cache_root(), "tuning")

    @staticmethod
    def key(task_fingerprint: str, target_fingerprint: str, operator: str, templates: list[tuple[str, str]],
            level: int) -> str:
        """The record's name: every input that decides which candidate wins."""
        payload = json.dumps([task_fingerprint, target_fingerprint, operator, sorted(templates), level])
        return hashlib.sha256(payload.encode()).hexdigest()[:32]

    def path(self, key: str) -> str:
        return os.path.join(self.root, f"{key}.json")

    def get(self, key: str) -> Optional[dict]:
        """The record of `key`, or None when absent, unreadable or untrusted (the last
        with a TuningRecordWarning naming the file)."""
        try:
            record = json.loads(read_private(self.root, f"{key}.json", max_bytes=1 << 24))
        except FileNotFoundError:
            return None
        except UnsafeCacheFile as exc:
            warnings.warn(f"tuning record {self.path(key)} ignored and tuned again: {exc}",
                          TuningRecordWarning, stacklevel=2)
            return None
        except ValueError:
            return None
        if not isinstance(record, dict) or "template" not in record or "params" not in record:
            return None
        return record

    def put(self, key: str, record: dict[str, Any]) -> None:
        secure_dir(self.root)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(record, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path(key))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def validate_record(record: dict, templates: Sequence[Any], target: Any, level: int) -> tuple[Any, Any, str]:
    """(template, its candidate, '') when `record` names one of `templates` at its
    current version with parameters equal to one of its candidates at `level` on
    `target`; else (None, None, why). Only candidates the template itself proposes are ever built from a
    record, so a hand-edited or stale record cannot reach a template's build()."""
    by_name = {t.name: t for t in templates}
    name = record.get("template")
    if not isinstance(name, str) or name not in by_name:
        return None, None, f"template {name!r} is not one of {sorted(by_name)}"
    template = by_name[name]
    if "version" in record and record["version"] != template.version:
        return None, None, f"template {name} is at version {template.version!r}, the record at {record['version']!r}"
    params = record.get("params")
    if not isinstance(params, dict):
        return None, None, f"params is a {type(params).__name__}, not a mapping"
    try:
        space = template.bounded_space(target, level)
    except Exception as exc:  # a template that cannot enumerate cannot vouch for the record
        return None, None, f"template {name} could not list its space: {type(exc).__name__}: {exc}"
    for candidate in space:
        if _same_params(params, candidate):
            return template, candidate, ""
    return None, None, f"params {params!r} are not a candidate of {name} at space level {level}"


def _same_params(a: Any, b: Any) -> bool:
    """Equality after a JSON round trip (tuples come back as lists), and no bool/int
    confusion (True == 1 in Python, not in a kernel parameter)."""
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):  # a candidate that is not JSON data never matches a record
        return False
