"""A content-addressed on-disk cache of built artifacts (shared libraries, cubins).

Compiling generated source is the slowest step after tuning, and the same kernels are
built again and again across runs and across tuner worker processes. Artifacts are
therefore stored under a key that is the sha256 of everything that determines the
bytes produced: source, flags, compiler identity, target fingerprint and backend name.

Layout under the root (``$HIDET_FRAMEWORK_CACHE`` or ``~/.cache/hidet_framework``)::

    builds/<k[:2]>/<k>/artifact.so     the artifact
    builds/<k[:2]>/<k>/source.c        the source it was built from (for debugging)
    builds/<k[:2]>/<k>/meta.json       sidecar: artifact sha256, size, key parts
    builds/locks/<k>.lock              one file lock per key
    builds/tmp/<random>/               where builds run before being moved into place

Safety properties:

- Loading a shared library runs its constructors, so a cache another user can write
  to is a code-execution hole: the root is created 0700, a group/world-writable root
  we own is repaired to 0700, and a root owned by someone else is refused.
- Nothing is ever unpickled; the sidecar is JSON.
- An artifact is only trusted when its sha256 matches the sidecar; a mismatch (disk
  corruption, a truncated write from a crash, tampering) counts as absent and is rebuilt.
- A build runs in a temp dir on the same filesystem and is moved in with ``os.replace``
  (atomic), and the sidecar is written last, so no reader ever sees a half-written file;
  a per-key ``filelock.FileLock`` makes concurrent processes build each key once.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from typing import Any, Callable, Mapping

import filelock

__all__ = ["BuildCache", "CacheSecurityError", "cache_root", "make_key", "secure_dir"]

ENV_VAR = "HIDET_FRAMEWORK_CACHE"
META_NAME = "meta.json"
LOCK_TIMEOUT_S = 1800.0  # a stuck build elsewhere should fail loudly, not hang forever


class CacheSecurityError(PermissionError):
    """The cache directory is owned by another user: using it could run their code."""


def cache_root() -> str:
    """The cache root: ``$HIDET_FRAMEWORK_CACHE`` or ``~/.cache/hidet_framework``."""
    root = os.environ.get(ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache", "hidet_framework")
    return os.path.abspath(root)


def secure_dir(path: str) -> str:
    """Create `path` (and parents) private to this user, or check an existing one:
    refuse a directory owned by someone else, repair group/world write permission."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise CacheSecurityError(f"cache path {path} is not a plain directory")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheSecurityError(
            f"cache directory {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
            f"refusing to load code from it. Set {ENV_VAR} to a directory of your own.")
    if stat.S_IMODE(st.st_mode) & 0o077:
        # makedirs honours the umask and an old root may predate us: tighten it to 0700.
        os.chmod(path, 0o700)
    return path


def make_key(key_parts: Mapping[str, Any]) -> str:
    """sha256 (hex) over a canonical JSON encoding of `key_parts`.

    Key parts must be JSON data (str, numbers, bools, None, lists, dicts with str keys);
    anything else raises TypeError, because ``str()`` of an arbitrary object is not a
    stable identity and would make the cache silently miss or, worse, collide.
    """
    payload = json.dumps(key_parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class BuildCache:
    """Built artifacts by content key. See the module docstring for the layout."""

    def __init__(self, root: str | None = None) -> None:
        self.root = secure_dir(os.path.abspath(root or cache_root()))
        self.builds_dir = secure_dir(os.path.join(self.root, "builds"))
        self._locks_dir = secure_dir(os.path.join(self.builds_dir, "locks"))
        self._tmp_dir = secure_dir(os.path.join(self.builds_dir, "tmp"))

    @classmethod
    def default(cls) -> "BuildCache":
        """The cache at :func:`cache_root` (re-read from the environment each call)."""
        return cls(cache_root())

    # -- paths ---------------------------------------------------------------------------
    @staticmethod
    def key_of(key_parts: Mapping[str, Any]) -> str:
        return make_key(key_parts)

    def entry_dir(self, key: str) -> str:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a build cache key (64 lowercase hex digits): {key!r}")
        return os.path.join(self.builds_dir, key[:2], key)

    def _meta_path(self, key: str) -> str:
        return os.path.join(self.entry_dir(key), META_NAME)

    # -- lookup ----------------------------------------------------------------------------
    def read_meta(self, key: str) -> dict | None:
        """The sidecar of `key`, or None when missing or unreadable."""
        try:
            with open(self._meta_path(key), "rb") as f:
                meta = json.loads(f.read())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def lookup(self, key: str) -> str | None:
        """The artifact path for `key` if present and its sha256 matches the sidecar."""
        meta = self.read_meta(key)
        if meta is None:
            return None
        name = meta.get("artifact")
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
            return None  # never follow a path the sidecar makes up
        path = os.path.join(self.entry_dir(key), name)
        try:
            if file_sha256(path) != meta.get("sha256"):
                return None
        except OSError:
            return None
        return path

    # -- build -----------------------------------------------------------------------------
    def get_or_build(
        self,
        key_parts: Mapping[str, Any],
        build: Callable[[str], str],
        suffix: str = ".so",
        *,
        source_suffix: str = ".c",
    ) -> tuple[str, bool]:
        """The artifact for `key_parts`, building it with ``build(tmp_dir) -> path`` on a
        miss. Returns ``(artifact_path, hit)``; `hit` is False only when this call ran
        `build`. A ``"source"`` entry of `key_parts` (a str) is kept as ``source<suffix>``
        next to the artifact. Exceptions from `build` propagate; nothing is cached then.
        """
        key = make_key(key_parts)
        found = self.lookup(key)
        if found is not None:
            return found, True
        with filelock.FileLock(os.path.join(self._locks_dir, key + ".lock"), timeout=LOCK_TIMEOUT_S):
            found = self.lookup(key)  # another process may have built it while we waited
            if found is not None:
                return found, True
            work = tempfile.mkdtemp(dir=self._tmp_dir, prefix=key[:12] + "-")
            try:
                built = build(work)
                if not isinstance(built, str) or not os.path.isfile(built):
                    raise RuntimeError(f"build function returned {built!r}, which is not a file")
                return self._install(key, key_parts, built, suffix, source_suffix), False
            finally:
                shutil.rmtree(work, ignore_errors=True)

    def _install(self, key: str, key_parts: Mapping[str, Any], built: str, suffix: str,
                 source_suffix: str) -> str:
        entry = self.entry_dir(key)
        secure_dir(os.path.dirname(entry))
        secure_dir(entry)
        meta_path = os.path.join(entry, META_NAME)
        if os.path.exists(meta_path):
            os.unlink(meta_path)  # an entry being replaced is invalid until its new sidecar lands
        source = key_parts.get("source")
        if isinstance(source, str):
            _write_atomic(os.path.join(entry, "source" + source_suffix), source.encode("utf-8", "surrogatepass"))
        artifact_name = "artifact" + suffix
        dest = os.path.join(entry, artifact_name)
        digest = file_sha256(built)
        size = os.path.getsize(built)
        try:
            os.replace(built, dest)  # same filesystem as tmp/, so atomic
        except OSError:  # the build put its output elsewhere (another filesystem)
            staged = dest + f".tmp-{os.getpid()}"
            shutil.copyfile(built, staged)
            os.replace(staged, dest)
        meta = {
            "key": key,
            "artifact": artifact_name,
            "sha256": digest,
            "size": size,
            "created": time.time(),
            "key_parts": {k: v for k, v in key_parts.items() if k != "source"},
        }
        _write_atomic(meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())
        return dest

    def clear(self) -> None:
        """Remove every cached build (the root itself stays)."""
        for name in os.listdir(self.builds_dir):
            if len(name) == 2:
                shutil.rmtree(os.path.join(self.builds_dir, name), ignore_errors=True)
