"""The on-disk cache of tuning results.

One small JSON file per (task fingerprint, target, operator, template versions) in
``<cache root>/tuning/``. Files are written to a temporary name and moved into place
(atomic on POSIX), so concurrent processes never read half a record; a record that
does not parse is treated as absent. No pickles.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Optional

from hidet_framework.backend.build_cache import cache_root, secure_dir


class TuningCache:
    def __init__(self, root: Optional[str] = None) -> None:
        self.root = root or os.path.join(cache_root(), "tuning")

    @staticmethod
    def key(task_fingerprint: str, target_fingerprint: str, operator: str, templates: list[tuple[str, str]]) -> str:
        payload = json.dumps([task_fingerprint, target_fingerprint, operator, sorted(templates)])
        return hashlib.sha256(payload.encode()).hexdigest()[:32]

    def _path(self, key: str) -> str:
        return os.path.join(self.root, f"{key}.json")

    def get(self, key: str) -> Optional[dict]:
        try:
            with open(self._path(key), encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
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
            os.replace(tmp, self._path(key))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
