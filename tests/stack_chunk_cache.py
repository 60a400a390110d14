"""Test processes only: keep one freed frame-stack chunk for reuse on CPython 3.11 and 3.12.

CPython 3.11 and 3.12 keep the frames of Python calls on a per-thread stack made of
16 KiB chunks. A call that does not fit in the current chunk maps a new one (``mmap``),
and the return that empties it unmaps it (``munmap``) at once. Code that keeps calling
across one chunk boundary maps and unmaps a chunk, and page-faults it in, on every call
(CPython issue gh-142183, "Calls across stack chunks perform badly"; fixed in 3.13 and
3.14 by keeping one chunk per thread). The IR's recursive visitors (simplifier, lowering
passes, the IR evaluator) hit it whenever their depth hovers at a boundary, which the
stack depth of the caller decides: in the evaluator fusion property 1.2 million
mmap/munmap pairs, 7.7 of its 19.5 CPU-seconds, spent in the kernel (docs/testing.md,
"Session 9").

`install()` does here what the CPython fix does: the frame stack's chunks are allocated
through the interpreter's arena allocator (``PyObject_SetArenaAllocator``), which this
wraps with a C shim (compiled with the C compiler the cpu plugin uses) that keeps one
freed 16 KiB chunk and hands it back on the next 16 KiB request. Every other request
(obmalloc's 1 MiB arenas, larger chunks) goes to the allocator it replaces, so memory
allocated before the switch is freed by the allocator that made it. Nothing else
changes: no test asserts anything about memory mapping. Without a C compiler, on
another interpreter or version, it does nothing. Fork pools inherit it.
"""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import sys
import tempfile

CHUNK_BYTES = 16 * 1024  # _PY_DATA_STACK_CHUNK_SIZE of CPython 3.11 and 3.12
AFFECTED = ((3, 11), (3, 12))

_SOURCE = r"""
#include <stddef.h>
typedef struct {
    void *ctx;
    void *(*alloc)(void *ctx, size_t size);
    void (*free)(void *ctx, void *ptr, size_t size);
} arena_allocator;

static arena_allocator previous;  /* the allocator this one wraps */
static void *spare;               /* one freed chunk of CHUNK_BYTES, or NULL */
static long reused;

static void *chunk_alloc(void *ctx, size_t size) {
    if (spare != NULL && size == CHUNK_BYTES) {
        void *p = spare;
        spare = NULL;
        ++reused;
        return p;
    }
    return previous.alloc(previous.ctx, size);
}

static void chunk_free(void *ctx, void *p, size_t size) {
    if (spare == NULL && size == CHUNK_BYTES) {
        spare = p;
        return;
    }
    previous.free(previous.ctx, p, size);
}

/* called with the GIL held, as the allocator itself always is */
void hidet_wrap_arena_allocator(const arena_allocator *current, arena_allocator *wrapped) {
    previous = *current;
    wrapped->ctx = NULL;
    wrapped->alloc = chunk_alloc;
    wrapped->free = chunk_free;
}

long hidet_chunks_reused(void) { return reused; }
"""


class _ArenaAllocator(ctypes.Structure):  # PyObjectArenaAllocator
    _fields_ = [("ctx", ctypes.c_void_p), ("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]


_shim: ctypes.CDLL | None = None


def installed() -> bool:
    return _shim is not None


def chunks_reused() -> int:
    """How many chunk allocations the kept chunk served (0 when not installed)."""
    if _shim is None:
        return 0
    _shim.hidet_chunks_reused.restype = ctypes.c_long
    return int(_shim.hidet_chunks_reused())


def needed() -> bool:
    return platform.python_implementation() == "CPython" and sys.version_info[:2] in AFFECTED


def install() -> bool:
    """Install the shim once per process; True when it is in place."""
    global _shim
    if _shim is not None:
        return True
    compiler = shutil.which(os.environ.get("HIDET_FRAMEWORK_CC", "gcc")) or shutil.which("cc")
    if not needed() or compiler is None:
        return False
    folder = tempfile.mkdtemp(prefix="hidet-stack-chunks-")
    try:
        source, library = os.path.join(folder, "shim.c"), os.path.join(folder, "shim.so")
        with open(source, "w") as f:
            f.write(_SOURCE)
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-DCHUNK_BYTES={CHUNK_BYTES}",
                               "-o", library, source], capture_output=True, timeout=120)
        if done.returncode != 0:
            return False
        shim = ctypes.CDLL(library)  # stays mapped after the folder is removed
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    current, wrapped = _ArenaAllocator(), _ArenaAllocator()
    ctypes.pythonapi.PyObject_GetArenaAllocator(ctypes.byref(current))
    shim.hidet_wrap_arena_allocator(ctypes.byref(current), ctypes.byref(wrapped))
    ctypes.pythonapi.PyObject_SetArenaAllocator(ctypes.byref(wrapped))
    _shim = shim
    return True
