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
  to is a code-execution hole. The root and its folders are created 0700; a root owned
  by someone else, or a shared sticky folder such as /tmp, is refused. A folder of ours
  that group or others could write is repaired to 0700 and what the cache keeps below
  it is discarded (for the root: builds/ and tuning/, never the user's other files):
  whatever it held may have been planted while it was open, so a once-world-writable
  cache is never trusted after the repair.
- Every file that is read back (sidecar, artifact) goes through
  :func:`~hidet_framework.backend.private_files.read_private`: each folder from the root
  down and the file itself must be owned by this user, not group- or world-writable and
  not a symlink, checked with ``fstat`` on the descriptor the bytes are then read from.
  Loaders use :func:`read_artifact`, which returns those checked bytes (the CPU backend
  ``dlopen``s a private copy of them, the CUDA backend hands them to the driver), so no
  path is reopened between the check and the load.
- Nothing is ever unpickled; the sidecar is JSON.
- An artifact is only trusted when its sha256 matches the sidecar; a mismatch (disk
  corruption, a truncated write from a crash, tampering) counts as absent and is rebuilt.
  An entry that cannot be trusted or used (a folder where ``artifact.so`` should be,
  a foreign-owned entry folder) is discarded with a warning and rebuilt.
- A build runs in a temp dir on the same filesystem and is moved in with ``os.replace``
  (atomic), and the sidecar is written last, so no reader ever sees a half-written file;
  a per-key ``filelock.FileLock`` makes concurrent processes build each key once.
- Leftovers of killed builds (temp folders, lock files of built keys, half-written
  sidecars) are pruned at most once an hour (:meth:`BuildCache.prune`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import warnings
from typing import Any, Callable, Mapping

import filelock

from hidet_framework.backend.private_files import UnsafeCacheFile, read_private

__all__ = ["BuildCache", "CacheError", "CacheSecurityError", "CacheWarning", "cache_root", "make_key",
           "read_artifact", "secure_dir"]

ENV_VAR = "HIDET_FRAMEWORK_CACHE"
META_NAME = "meta.json"
LOCK_TIMEOUT_S = 1800.0  # a stuck build elsewhere should fail loudly, not hang forever


class CacheSecurityError(PermissionError):
    """The cache directory is owned by another user: using it could run their code."""


class CacheError(OSError):
    """The cache folder cannot be used (read-only, a file in its place...)."""


class CacheWarning(UserWarning):
    """Something in the cache was discarded (untrusted or unusable) and will be rebuilt."""


def cache_root() -> str:
    """The cache root: ``$HIDET_FRAMEWORK_CACHE`` or ``~/.cache/hidet_framework``."""
    root = os.environ.get(ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache", "hidet_framework")
    return os.path.abspath(root)


def secure_dir(path: str, *, discard_if_exposed: bool = True) -> str:
    """Create `path` (and parents) private to this user, or check an existing one:
    refuse a directory owned by someone else, or a shared one (world-writable with the
    sticky bit, like /tmp); a directory of ours that group or others could write is
    tightened to 0700 and, with `discard_if_exposed` (the cache's own folders), emptied:
    its contents are not trusted. The root is never emptied (it may be a folder the user
    keeps other things in); BuildCache empties its builds/ and tuning/ instead."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        raise CacheError(f"cache path {path} exists and is not a folder; set {ENV_VAR} to a folder "
                         f"of your own (or remove that file)") from None
    except OSError as exc:
        raise CacheError(f"cannot create the cache folder {path}: {exc.strerror}; set {ENV_VAR} to a "
                         f"writable folder of your own") from None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise CacheSecurityError(f"cache path {path} is not a plain directory")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheSecurityError(
            f"cache directory {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
            f"refusing to load code from it. Set {ENV_VAR} to a directory of your own.")
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_ISVTX and mode & 0o002:
        raise CacheSecurityError(f"cache folder {path} is a shared folder (mode {mode:o}, like /tmp); set "
                                 f"{ENV_VAR} to a folder of your own inside it")
    if mode & 0o077:
        # makedirs honours the umask and an old root may predate us: tighten it to 0700.
        os.chmod(path, 0o700)
        if mode & 0o022:  # others could write here: anything inside may be theirs
            if discard_if_exposed:
                _empty_folder(path)
            _EXPOSED.add(path)
            warnings.warn(f"cache folder {path} was writable by group or others (mode {mode:o}); it is "
                          f"now 0700" + (" and what it held was discarded" if discard_if_exposed else ""),
                          CacheWarning, stacklevel=2)
    if not os.access(path, os.W_OK | os.X_OK):
        raise CacheError(f"cache folder {path} is not writable; set {ENV_VAR} to a writable folder "
                         f"of your own (or chmod u+rwx it)")
    return path


_EXPOSED: set[str] = set()  # folders found writable by others (and repaired) in this process


def _empty_folder(path: str) -> None:
    for name in os.listdir(path):
        _remove(os.path.join(path, name))


def _remove(path: str) -> None:
    """Remove a file, link or folder tree (best effort)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def read_artifact(path: str) -> bytes:
    """The bytes of a built artifact, checked before they are handed to a loader.

    Inside the build cache: read through the checked descriptor chain and compared with
    the sidecar's sha256 (:meth:`BuildCache.read_verified`). Elsewhere (a build made
    without the cache, into a private temp folder): its folder and the file must pass
    the same ownership and mode checks. Raises UnsafeCacheFile or FileNotFoundError.
    """
    path = os.path.abspath(path)
    builds = os.path.join(cache_root(), "builds") + os.sep
    if path.startswith(builds):
        return BuildCache.default().read_verified(path)
    folder, name = os.path.split(path)
    return read_private(folder, name)


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
        self.root = secure_dir(os.path.abspath(root or cache_root()), discard_if_exposed=False)
        if self.root in _EXPOSED:  # whatever the open root let others plant below it goes
            _EXPOSED.discard(self.root)
            for sub in ("builds", "tuning"):
                if os.path.isdir(os.path.join(self.root, sub)):
                    _remove(os.path.join(self.root, sub))
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
    def _relative(self, key: str, name: str) -> str:
        return os.path.join(key[:2], key, name)

    def read_meta(self, key: str) -> dict | None:
        """The sidecar of `key`, or None when missing or unreadable. Raises
        UnsafeCacheFile when it could have been written by someone else."""
        try:
            meta = json.loads(read_private(self.builds_dir, self._relative(key, META_NAME), max_bytes=1 << 24))
        except FileNotFoundError:
            return None
        except ValueError:
            return None
        return meta if isinstance(meta, dict) else None

    def _read_entry(self, key: str) -> tuple[str, bytes] | None:
        """(artifact path, its checked bytes) of `key`; None when absent or stale.
        Raises UnsafeCacheFile when the entry cannot be trusted or used."""
        meta = self.read_meta(key)
        if meta is None:
            return None
        name = meta.get("artifact")
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", "..", META_NAME):
            return None  # never follow a path the sidecar makes up
        try:
            data = read_private(self.builds_dir, self._relative(key, name))
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            return None
        return os.path.join(self.entry_dir(key), name), data

    def lookup(self, key: str) -> str | None:
        """The artifact path for `key` if present, trusted and its sha256 matches the
        sidecar. Loaders must still read it with :func:`read_artifact`."""
        try:
            found = self._read_entry(key)
        except UnsafeCacheFile:
            return None
        return None if found is None else found[0]

    def read_verified(self, path: str) -> bytes:
        """The checked bytes of the artifact at `path` (an entry of this cache), whose
        sha256 matches its sidecar. Raises UnsafeCacheFile otherwise."""
        entry, name = os.path.split(os.path.abspath(path))
        key = os.path.basename(entry)
        if os.path.abspath(path) != os.path.join(self.entry_dir(key), name):
            raise UnsafeCacheFile(f"{path} is not an artifact of the build cache {self.builds_dir}")
        found = self._read_entry(key)
        if found is None or found[0] != os.path.abspath(path):
            raise UnsafeCacheFile(f"{path} does not match its sidecar (changed after it was built?)")
        return found[1]

    def _discard_entry(self, key: str, why: Exception) -> None:
        """Move an untrusted or unusable entry out of the way and delete it."""
        entry = self.entry_dir(key)
        warnings.warn(f"build cache entry {entry} discarded and rebuilt: {why}", CacheWarning, stacklevel=3)
        parent = os.path.dirname(entry)
        doomed = os.path.join(parent, f".discarded-{key}-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(entry, doomed)  # same parent (ours): works even when the entry is not ours
        except OSError:
            doomed = entry
        _remove(doomed)

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
        self.prune()
        with filelock.FileLock(os.path.join(self._locks_dir, key + ".lock"), timeout=LOCK_TIMEOUT_S):
            try:  # another process may have built it while we waited
                entry = self._read_entry(key)
            except UnsafeCacheFile as exc:
                self._discard_entry(key, exc)
                entry = None
            if entry is not None:
                return entry[0], True
            work = tempfile.mkdtemp(dir=self._tmp_dir, prefix=key + "-")
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
        if os.path.lexists(dest) and (os.path.islink(dest) or not os.path.isfile(dest)):
            _remove(dest)  # a folder or link in the artifact's place: os.replace cannot overwrite it
        try:
            os.replace(built, dest)  # same filesystem as tmp/, so atomic
        except OSError:  # the build put its output elsewhere (another filesystem)
            staged = dest + f".tmp-{os.getpid()}"
            try:
                shutil.copyfile(built, staged)
                os.replace(staged, dest)
            finally:
                if os.path.lexists(staged):
                    _remove(staged)
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

    def prune(self, *, force: bool = False) -> int:
        """Remove leftovers of killed builds (see :func:`prune_build_cache`)."""
        from hidet_framework.backend.build_cache_prune import prune_build_cache

        return prune_build_cache(self, force=force)

    def clear(self) -> None:
        """Remove every cached build (the root itself stays)."""
        for name in os.listdir(self.builds_dir):
            if len(name) == 2:
                shutil.rmtree(os.path.join(self.builds_dir, name), ignore_errors=True)

