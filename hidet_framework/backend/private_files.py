"""Read files of the cache only when nobody but this user could have written them.

Loading a shared library runs its constructors and a cubin runs on the GPU, so every
file that becomes code (and every tuning record, which picks the code) is read through
:func:`read_private`: each folder from the cache root down to the file is opened with
``O_NOFOLLOW`` relative to the previous folder's descriptor and checked with ``fstat``
on that descriptor (a plain folder, owned by this user, not group- or world-writable),
then the file itself likewise (a plain file, same owner and mode rules). The bytes are
read from that same descriptor, so there is no gap between the check and the read in
which a path could be swapped (a symlink, a renamed folder).

The bytes read are the bytes loaded. :func:`load_library_bytes` does not reopen the
cache path: it writes the checked bytes to a new file (``O_EXCL``, 0600) in a 0700
folder of this process and ``dlopen``s that. Reopening the checked descriptor through
``/proc/self/fd/N`` would avoid the copy, but another process that still holds a
writable descriptor of the cache file (one opened while the cache was world-writable,
before its repair) could change the library after its hash was checked; a private copy
cannot be reached by anyone else. (An anonymous ``memfd`` would do as well, but glibc's
``dlopen`` recognises libraries by name and ``/proc/self/fd/N`` names repeat once a
descriptor is closed, so a later library could be served the earlier one.) The copy
costs one write of the library per load, next to a ``dlopen`` that costs far more.
"""
from __future__ import annotations

import atexit
import ctypes
import itertools
import os
import shutil
import stat
import tempfile

__all__ = ["UnsafeCacheFile", "check_private", "read_private", "load_library_bytes"]

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


class UnsafeCacheFile(PermissionError):
    """A cache file or folder could have been written by another user (or is a
    symlink, or not what it should be): it is never read as trusted."""


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1


def check_private(st: os.stat_result, path: str, *, directory: bool) -> None:
    """Raise UnsafeCacheFile unless `st` (an fstat/lstat result of `path`) is a plain
    folder/file owned by this user that neither group nor others may write."""
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        want = "a folder" if directory else "a regular file"
        raise UnsafeCacheFile(f"{path} is not {want} (a symlink, a device, or the wrong kind)")
    uid = _uid()
    if uid >= 0 and st.st_uid != uid:
        raise UnsafeCacheFile(f"{path} is owned by uid {st.st_uid}, not by you (uid {uid})")
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise UnsafeCacheFile(f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")


def _open_checked(root: str, relative: str) -> int:
    """A descriptor of `root`/`relative` opened component by component, each checked."""
    parts = [p for p in relative.split(os.sep) if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise UnsafeCacheFile(f"{relative!r} is not a plain path below {root}")
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnsafeCacheFile(f"cannot open cache folder {root}: {exc.strerror}") from None
    path = root
    try:
        check_private(os.fstat(fd), path, directory=True)
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            path = os.path.join(path, name)
            try:
                child = os.open(name, _FILE_FLAGS if last else _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file where a folder should be
                raise UnsafeCacheFile(f"cannot open {path} safely: {exc.strerror}") from exc
            os.close(fd)
            fd = child
            check_private(os.fstat(fd), path, directory=not last)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_private(root: str, relative: str, *, max_bytes: int = 1 << 31) -> bytes:
    """The bytes of `root`/`relative`, read from a descriptor whose folder chain and
    file were checked with :func:`check_private`. Raises FileNotFoundError when a part
    is missing, UnsafeCacheFile when a part could have been written by someone else."""
    fd = _open_checked(os.path.abspath(root), relative)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise UnsafeCacheFile(f"{os.path.join(root, relative)} is larger than {max_bytes} bytes")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_PRIVATE_DIR: list[str] = []
_LOADED = itertools.count()


def _private_dir() -> str:
    """A folder of this process only (mkdtemp: 0700, a fresh random name)."""
    if not _PRIVATE_DIR or not os.path.isdir(_PRIVATE_DIR[0]):
        _PRIVATE_DIR[:] = [tempfile.mkdtemp(prefix="hidet-libs-")]
        atexit.register(shutil.rmtree, _PRIVATE_DIR[0], True)
    return _PRIVATE_DIR[0]


def load_library_bytes(image: bytes, name: str = "module") -> ctypes.CDLL:
    """``dlopen`` a shared library given as bytes, from a copy nobody else can reach:
    a new 0600 file (O_EXCL) in a 0700 folder of this process, named uniquely (dlopen
    returns an already loaded library when the name repeats), unlinked once mapped."""
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64]
    path = os.path.join(_private_dir(), f"{next(_LOADED)}-{safe}.so")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                 0o600)
    try:
        try:
            _write_all(fd, image)
        finally:
            os.close(fd)
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    finally:
        os.unlink(path)  # the mapping stays valid after the name is gone


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
