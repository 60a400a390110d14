"""The thread count of a CPU benchmark, set in the environment before numpy,
onnxruntime or our kernel libraries load (they read it once, at load time).

    from thread_env import threads_from_argv   # bench/ is the script's own folder
    THREADS = threads_from_argv(sys.argv)       # before `import numpy`
"""
from __future__ import annotations

import os


def threads_from_argv(argv: list[str], default: int = 2) -> int:
    """``--threads N`` or ``--threads=N`` from `argv` (else `default`), exported as
    OMP_NUM_THREADS (ours), OPENBLAS_NUM_THREADS and MKL_NUM_THREADS (numpy's BLAS)."""
    threads = default
    for k, arg in enumerate(argv):
        if arg == "--threads" and k + 1 < len(argv):
            threads = int(argv[k + 1])
        elif arg.startswith("--threads="):
            threads = int(arg.split("=", 1)[1])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    return threads


def threads_unless_imported(argv: list[str], is_main: bool, default: int = 2) -> int:
    """`threads_from_argv` for a bench that is also imported by other benches (for its
    helpers): run as a script, or imported where OMP_NUM_THREADS is not set yet, it reads
    `argv`; imported under a script that already set OMP_NUM_THREADS, it keeps that value
    (setting it again would switch our pool to `default` threads under a script that
    asked for 1)."""
    if is_main or "OMP_NUM_THREADS" not in os.environ:
        return threads_from_argv(argv, default)
    return int(os.environ["OMP_NUM_THREADS"])
