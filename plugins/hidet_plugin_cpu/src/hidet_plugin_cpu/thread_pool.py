"""The process-wide thread pool that runs the parallel loops of generated CPU code.

Why not OpenMP: a ``#pragma omp parallel for schedule(static)`` region hands each
thread a fixed share and ends in a barrier that waits for every thread of the team.
On a machine with more runnable threads than cores (other processes, or onnxruntime
and OpenBLAS pools of the same process) a descheduled team thread holds the region
for a scheduler time slice: a 1024x768 layer norm measured 26.6 ms median with a
static OpenMP split against 1.4 ms on one thread (load average 11 on 2 cores), and
``schedule(dynamic)`` did not help, because the end barrier still waits for the
sleeping thread to arrive. This pool was 1.7 ms in the same run.

How it works (the C below, built once per machine through the build cache and loaded
once per process):

- ``hidet_parallel_for(fn, ctx, n, grain)`` runs ``fn(ctx, begin, end)`` over
  ``[0, n)`` in chunks of ``max(grain, n / (8 * threads))`` iterations, claimed one at
  a time from an atomic counter; the calling thread claims chunks too.
- Workers join a job only while it is open. When the caller runs out of chunks it
  closes the job and waits only for the workers that joined (they are running a
  chunk); a worker that wakes late finds the job closed and goes back to waiting. So
  a descheduled worker costs at most the chunk it holds, never a whole share.
- Loops of one chunk (``n <= grain``), nested parallel loops (inside a chunk) and a
  second Python thread calling while the pool is busy run on the calling thread.
- Idle workers spin ``HIDET_FRAMEWORK_CPU_SPIN_US`` microseconds (default 50, so the
  next kernel of a graph finds them awake), then sleep on a futex.
- Threads: ``OMP_NUM_THREADS`` when set (the variable every peer library reads), else
  the cores this process may run on. A forked child starts its own pool.
- Each worker is pinned to its own CPU of the process's set, when there are no more
  threads than CPUs, leaving free the CPU the pool was started from; the caller is
  never pinned. When a loop
  starts on a worker's CPU (the scheduler moved the caller), that worker is re-pinned
  to the free CPU, so caller and workers never share one. ``HIDET_FRAMEWORK_CPU_PIN=0``
  leaves the workers unpinned. Why: on a guest with two vCPUs idle for a few ms, Linux
  woke a sleeping worker on the waking thread's own CPU about half the time, where it
  either waited until the caller had claimed every chunk or preempted the caller, so a
  ResNet-50 3x3 convolution ran on one core (2.29 ms a call, against 1.29 ms when the
  worker was still spinning). A pinned worker whose CPU is taken by another process
  costs no more than an unpinned one that sleeps: the caller claims its chunks.

Generated modules reach the pool through a function pointer they export a setter for
(``hidet_set_parallel_for``), which `CpuLoadedModule` calls after loading. A module
loaded any other way (plain ctypes) falls back to an OpenMP loop over the same chunks.
"""
from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["POOL_SOURCE", "pool_function_address", "pool_threads"]

POOL_SOURCE = r"""
#define _GNU_SOURCE
#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

typedef void (*hidet_task_fn)(void* ctx, int64_t begin, int64_t end);

#define HP_CLOSED ((uint64_t)1 << 31)
#define HP_ACTIVE ((uint64_t)0x7fffffff)
#define HP_MAX_THREADS 1024

static struct {
    pthread_mutex_t lock;        /* one job at a time; a busy pool runs the caller's loop serially */
    int threads;                 /* workers + the calling thread */
    long spin_ns;
    _Atomic uint32_t epoch;      /* job number; the futex word idle workers sleep on */
    _Atomic uint64_t state;      /* epoch << 32 | closed bit | workers inside the job */
    _Atomic int sleepers;
    _Atomic int64_t next;        /* next chunk to claim */
    hidet_task_fn fn;
    void* ctx;
    int64_t n, chunk;
} P = {PTHREAD_MUTEX_INITIALIZER};
static pthread_mutex_t hp_start_lock = PTHREAD_MUTEX_INITIALIZER;
/* pinning: worker k runs on hp_pin_cpu[k]; hp_free_cpu is the one CPU of the set no worker holds */
static int hp_pinned, hp_free_cpu, hp_pin_cpu[HP_MAX_THREADS];
static pthread_t hp_pin_thread[HP_MAX_THREADS];
static _Atomic int hp_started;
static __thread int hp_inside;

static inline void hp_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
static long hp_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
static void hp_run_chunks(void) {
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&P.next, 1, memory_order_relaxed);
        if (c >= (P.n + P.chunk - 1) / P.chunk) return;
        int64_t b = c * P.chunk;
        P.fn(P.ctx, b, P.n - b > P.chunk ? b + P.chunk : P.n);
    }
}
static void* hp_worker(void* arg) {
    (void)arg;
    hp_inside = 1;
    uint32_t seen = atomic_load(&P.epoch);
    for (;;) {
        uint32_t ep;
        long start = hp_now_ns();
        int k = 0;
        while ((ep = atomic_load_explicit(&P.epoch, memory_order_acquire)) == seen) {
            hp_pause();
            if ((++k & 255) == 0 && hp_now_ns() - start > P.spin_ns) {
                atomic_fetch_add(&P.sleepers, 1);
                syscall(SYS_futex, &P.epoch, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
                atomic_fetch_sub(&P.sleepers, 1);
                start = hp_now_ns();
            }
        }
        seen = ep;
        uint64_t s = atomic_load(&P.state);
        int joined = 0;
        while ((uint32_t)(s >> 32) == ep && !(s & HP_CLOSED)) {
            if (atomic_compare_exchange_weak(&P.state, &s, s + 1)) { joined = 1; break; }
        }
        if (!joined) continue;   /* the job ended before this worker got to it */
        hp_run_chunks();
        atomic_fetch_sub_explicit(&P.state, 1, memory_order_release);
    }
    return NULL;
}
static int hp_env_int(const char* name, int fallback) {
    const char* v = getenv(name);
    if (!v || !*v) return fallback;
    int n = atoi(v);
    return n > 0 ? n : fallback;
}
static void hp_pin(int k, int cpu) {   /* best effort: a worker that cannot be pinned stays where it is */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(hp_pin_thread[k], sizeof one, &one);
    hp_pin_cpu[k] = cpu;
}
/* The caller moved onto a worker's CPU: that worker takes the free CPU, so the two never
   queue behind each other. Called with P.lock held. */
static void hp_avoid_caller_cpu(void) {
    int me = sched_getcpu();
    if (me == hp_free_cpu) return;
    for (int k = 0; k < P.threads - 1; ++k) {
        if (hp_pin_cpu[k] == me) { hp_pin(k, hp_free_cpu); hp_free_cpu = me; return; }
    }
}
static void hp_child_after_fork(void) {  /* the child has no workers: start a new pool on first use */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    P.lock = fresh;
    hp_start_lock = fresh;
    atomic_store(&P.state, 0);
    atomic_store(&P.sleepers, 0);
    atomic_store(&hp_started, 0);
}
static void hp_ensure_started(void) {
    if (atomic_load_explicit(&hp_started, memory_order_acquire)) return;
    pthread_mutex_lock(&hp_start_lock);
    if (!atomic_load(&hp_started)) {
        static int hooked;
        if (!hooked) { pthread_atfork(NULL, NULL, hp_child_after_fork); hooked = 1; }
        cpu_set_t set;
        int have_set = sched_getaffinity(0, sizeof set, &set) == 0;
        int cores = have_set ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        P.threads = hp_env_int("OMP_NUM_THREADS", cores > 0 ? cores : 1);
        if (P.threads > HP_MAX_THREADS) P.threads = HP_MAX_THREADS;
        P.spin_ns = 1000L * hp_env_int("HIDET_FRAMEWORK_CPU_SPIN_US", 50);
        /* the allowed CPUs in order; workers are pinned only when each can have its own */
        int allowed[HP_MAX_THREADS], count = 0;
        for (int c = 0; c < CPU_SETSIZE && count < HP_MAX_THREADS; ++c)
            if (have_set && CPU_ISSET(c, &set)) allowed[count++] = c;
        const char* pin = getenv("HIDET_FRAMEWORK_CPU_PIN");
        hp_pinned = P.threads <= count && !(pin && pin[0] == '0' && pin[1] == 0);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* the CPU the caller runs on now stays free (so processes that each start a pool
           from different CPUs do not pin their workers to the same ones) */
        int here = sched_getcpu();
        for (int i = 1; i < count; ++i)
            if (allowed[i] == here) { allowed[i] = allowed[0]; allowed[0] = here; }
        for (int i = 1; i < P.threads; ++i) {
            if (pthread_create(&hp_pin_thread[i - 1], &attr, hp_worker, NULL) != 0) { P.threads = i; break; }
            if (hp_pinned) hp_pin(i - 1, allowed[i]);
        }
        hp_free_cpu = allowed[0];
        pthread_attr_destroy(&attr);
        atomic_store_explicit(&hp_started, 1, memory_order_release);
    }
    pthread_mutex_unlock(&hp_start_lock);
}
int hidet_pool_threads(void) {
    hp_ensure_started();
    return P.threads;
}
void hidet_parallel_for(hidet_task_fn fn, void* ctx, int64_t n, int64_t grain) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (hp_inside || n <= grain) { fn(ctx, 0, n); return; }
    hp_ensure_started();
    if (P.threads <= 1 || pthread_mutex_trylock(&P.lock) != 0) { fn(ctx, 0, n); return; }
    int64_t chunk = (n + 8 * (int64_t)P.threads - 1) / (8 * (int64_t)P.threads);
    if (chunk < grain) chunk = grain;
    if (hp_pinned) hp_avoid_caller_cpu();
    P.fn = fn; P.ctx = ctx; P.n = n; P.chunk = chunk;
    atomic_store_explicit(&P.next, 0, memory_order_relaxed);
    uint32_t ep = atomic_load(&P.epoch) + 1;
    atomic_store(&P.state, (uint64_t)ep << 32);
    atomic_store(&P.epoch, ep);
    if (atomic_load(&P.sleepers) > 0)
        syscall(SYS_futex, &P.epoch, FUTEX_WAKE_PRIVATE, P.threads - 1, NULL, NULL, 0);
    hp_inside = 1;
    hp_run_chunks();
    hp_inside = 0;
    atomic_fetch_or(&P.state, HP_CLOSED);
    for (int k = 0; atomic_load_explicit(&P.state, memory_order_acquire) & HP_ACTIVE; ++k) {
        if (k < 2048) hp_pause(); else sched_yield();
    }
    pthread_mutex_unlock(&P.lock);
}
"""

_lock = threading.Lock()
_pool: list = []  # [ctypes library] once loaded; [None] when it cannot be built here


def _load():
    from hidet_framework.backend.build_cache import read_artifact
    from hidet_framework.backend.private_files import load_library_bytes

    from .build import build_shared_library

    path, _ = build_shared_library(POOL_SOURCE, name="hidet_thread_pool", extra_flags=("-pthread",))
    lib = load_library_bytes(read_artifact(path), os.path.basename(path))
    lib.hidet_pool_threads.restype = ctypes.c_int
    lib.hidet_pool_threads.argtypes = []
    return lib


def _library():
    with _lock:
        if not _pool:
            if os.environ.get("HIDET_FRAMEWORK_CPU_POOL", "1") == "0":
                _pool.append(None)
            else:
                try:
                    _pool.append(_load())
                except Exception:  # noqa: BLE001 - no pool: modules fall back to their OpenMP loop
                    _pool.append(None)
        return _pool[0]


def pool_function_address() -> int | None:
    """Address of ``hidet_parallel_for`` (what generated modules are given), or None
    where the pool cannot be built or ``HIDET_FRAMEWORK_CPU_POOL=0``."""
    lib = _library()
    if lib is None:
        return None
    return ctypes.cast(lib.hidet_parallel_for, ctypes.c_void_p).value


def pool_threads() -> int:
    """Threads the pool runs loops on (starts it); 0 without a pool."""
    lib = _library()
    return 0 if lib is None else int(lib.hidet_pool_threads())
