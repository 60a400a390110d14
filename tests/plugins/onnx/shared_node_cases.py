"""ONNX's node test cases, generated once per pytest session and shared by the xdist
workers (issue 11's suite time).

`conformance.node_cases()` runs ONNX's case generators (about 5 CPU-seconds); every
xdist worker collects test_node_conformance.py, so every worker paid it, and the
exclusions test paid it once more. Here the first worker of a session generates the
cases and pickles them under the temporary folder, keyed on the session's run id
(``PYTEST_XDIST_TESTRUNUID``, the same in every worker of one run, new in every run),
while the other workers wait on a lock and load the file. Each session still draws
its own cases: several of ONNX's generators draw random inputs, and those stay fresh
per run; a run without xdist generates in-process as before.
"""
from __future__ import annotations

import fcntl
import functools
import os
import pickle
import tempfile
import time


def _generate() -> list:
    from hidet_plugin_onnx import conformance

    return conformance.node_cases()


def _prune(folder: str, keep: str, max_age_s: float = 3600) -> None:
    """Remove other runs' files older than an hour (read only while workers collect)."""
    now = time.time()
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.startswith(keep):
            continue
        try:
            if now - os.path.getmtime(path) > max_age_s:
                os.remove(path)
        except OSError:
            pass


@functools.cache
def node_cases() -> list:
    """`conformance.node_cases()`, shared by the workers of this run."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run_id:
        return _generate()
    folder = os.path.join(tempfile.gettempdir(), f"hidet-framework-tests-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    stem = f"onnx-node-cases-{run_id}"
    path = os.path.join(folder, stem + ".pkl")
    with open(os.path.join(folder, stem + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if os.path.exists(path):
            with open(path, "rb") as f:
                return pickle.load(f)
        cases = _generate()
        partial = f"{path}.{os.getpid()}.part"
        with open(partial, "wb") as f:
            pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)
        _prune(folder, stem)
        return cases
