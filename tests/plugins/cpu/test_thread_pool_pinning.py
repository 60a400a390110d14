"""Where the thread pool's workers may run (hidet_plugin_cpu/thread_pool.py): each worker
pinned to a CPU of its own with one CPU of the set left free, a worker re-pinned to the
free CPU when a loop starts on its CPU, and no pinning with ``HIDET_FRAMEWORK_CPU_PIN=0``
or more threads than CPUs. Read from ``/proc/self/task/<tid>/status`` in a fresh child
process, since the pool starts once per process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2 or not os.path.isdir("/proc/self/task"),
    reason="needs Linux and at least two CPUs to pin to")

_CHILD = textwrap.dedent("""
    import ctypes, json, os, sys, threading, time
    from hidet_plugin_cpu import thread_pool

    TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    PFOR = ctypes.CFUNCTYPE(None, TASK, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    pfor = PFOR(thread_pool.pool_function_address())

    def allowed(tid):
        for line in open(f"/proc/self/task/{tid}/status"):
            if line.startswith("Cpus_allowed_list:"):
                cpus = set()
                for part in line.split(":", 1)[1].strip().split(","):
                    lo, _, hi = part.partition("-")
                    cpus.update(range(int(lo), int(hi or lo) + 1))
                return sorted(cpus)
        raise RuntimeError("no Cpus_allowed_list")

    seen, lock = set(), threading.Lock()
    def chunk(ctx, begin, end):
        with lock:
            seen.add(threading.get_native_id())
        time.sleep(0.003)   # long enough that every worker joins the loop
    task = TASK(chunk)

    def worker_tids():
        seen.clear()
        pfor(task, None, 8 * thread_pool.pool_threads(), 1)
        return sorted(seen - {threading.get_native_id()})

    out = {"threads": thread_pool.pool_threads(), "set": sorted(os.sched_getaffinity(0))}
    worker_tids()       # a worker that starts after a loop opened waits for the next one
    tids = worker_tids()
    out["before"] = {str(t): allowed(t) for t in tids}
    if tids and len(allowed(tids[0])) == 1:
        # the caller moves onto the first worker's CPU; the next loop must move that worker away
        os.sched_setaffinity(0, set(allowed(tids[0])))
        pfor(task, None, 8 * out["threads"], 1)
        out["moved"] = tids[0]
        out["after"] = {str(t): allowed(t) for t in tids}
    print(json.dumps(out))
""")


def _child(tmp_path, **env) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("HIDET_FRAMEWORK_CPU_PIN", "OMP_NUM_THREADS")}
    environ.update(HIDET_FRAMEWORK_CACHE=str(tmp_path / "cache"), **env)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=environ, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_each_worker_has_a_cpu_of_its_own_and_leaves_one_free(tmp_path):
    r = _child(tmp_path)
    assert r["threads"] == len(r["set"]) and len(r["before"]) == r["threads"] - 1
    pinned = [cpus for cpus in r["before"].values()]
    assert all(len(cpus) == 1 and cpus[0] in r["set"] for cpus in pinned)
    held = {cpus[0] for cpus in pinned}
    assert len(held) == len(pinned)                      # no two workers share a CPU
    free = set(r["set"]) - held
    assert len(free) == 1                                # one CPU left to the caller
    # the caller started a loop on the first worker's CPU: that worker took the free CPU
    assert r["after"][str(r["moved"])] == sorted(free)
    others = {t: cpus for t, cpus in r["after"].items() if t != str(r["moved"])}
    assert others == {t: cpus for t, cpus in r["before"].items() if t != str(r["moved"])}


def test_pinning_switch_only_turns_off_at_zero(tmp_path):
    off = _child(tmp_path, HIDET_FRAMEWORK_CPU_PIN="0")
    assert off["before"] and all(cpus == off["set"] for cpus in off["before"].values())
    assert "after" not in off
    on = _child(tmp_path, HIDET_FRAMEWORK_CPU_PIN="1")
    assert all(len(cpus) == 1 for cpus in on["before"].values())


def test_more_threads_than_cpus_stay_unpinned(tmp_path):
    n = len(os.sched_getaffinity(0)) + 1
    r = _child(tmp_path, OMP_NUM_THREADS=str(n))
    assert r["threads"] == n and len(r["before"]) == n - 1
    assert all(cpus == r["set"] for cpus in r["before"].values())
