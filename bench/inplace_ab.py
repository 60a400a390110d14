"""A/B of in-place outputs (fusion/inplace.py) on a model of ../shared/models, one process:

    python bench/inplace_ab.py --models resnet50 [--threads 1] [--repeat 15]

Three builds of the same model, their passes interleaved (load changes hit all alike):
``inplace`` (outputs proven safe take their dying input's buffer), ``no-alias``
(HIDET_FRAMEWORK_INPLACE=0: the same kernels, printed without restrict on the pair,
planned apart) and ``main`` (no pair proven: restrict everywhere, planned apart, as
before the change). Prints each build's median pass (thread CPU clock at one thread,
wall clock otherwise) and, with ``--layers``, the kernels whose output is in place,
timed in sequence inside whole passes (cpu_model_profile.profile).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from thread_env import threads_from_argv  # noqa: E402

if not any(a == "--threads" or a.startswith("--threads=") for a in sys.argv):
    sys.argv += ["--threads", "1"]
THREADS = threads_from_argv(sys.argv)

import numpy as np  # noqa: E402

from cpu_model_profile import bound_launches  # noqa: E402
from models import _inputs, _shared_dir  # noqa: E402
from ops_cpu import machine_line  # noqa: E402
from shared_models import materialize  # noqa: E402


def build(path, variant):
    import hidet_framework as hf
    from hidet_framework.driver.task_compiler import clear_task_cache
    import importlib
    fg = importlib.import_module("hidet_framework.fusion.fuse_group")

    clear_task_cache()
    os.environ["HIDET_FRAMEWORK_INPLACE"] = "0" if variant == "no-alias" else "1"
    saved = fg.with_output_aliases
    if variant == "main":
        fg.with_output_aliases = lambda scheduled, *_: scheduled
    try:
        return hf.compile(hf.load(path), target="cpu", space=0)
    finally:
        fg.with_output_aliases = saved


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="resnet50")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--layers", action="store_true")
    args = p.parse_args()
    import onnxruntime as ort

    clock = time.thread_time if args.threads == 1 else time.perf_counter
    print(machine_line())
    variants = ("inplace", "no-alias", "main")
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models.split(","):
            path = materialize(_shared_dir(), name, scratch)
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feed = _inputs(session, np.random.default_rng(0))
            arrays = [feed[i.name] for i in session.get_inputs()]
            fns = {v: build(path, v) for v in variants}
            ref = fns["main"](*arrays)
            for v, fn in fns.items():
                err = float(np.abs(fn(*arrays) - ref).max() / np.abs(ref).max())
                print(f"{name} {v}: {len(fn.in_place)} outputs in place, max rel diff to main {err:.2g}")
            times = {v: [] for v in variants}
            for _ in range(args.repeat):
                for v, fn in fns.items():
                    t = clock()
                    fn(*arrays)
                    times[v].append(clock() - t)
            print(f"{name} load {os.getloadavg()[0]:.1f}: " + ", ".join(
                f"{v} {statistics.median(t) * 1e3:.2f} ms" for v, t in times.items()))
            if args.layers:  # each launch timed inside whole passes, the builds' passes interleaved
                bound = {v: bound_launches(fns[v], arrays) for v in variants}
                per = {v: [[] for _ in bound[v]] for v in variants}
                for _ in range(args.repeat):
                    for v in variants:
                        for k, (f, a) in enumerate(bound[v]):
                            t = clock()
                            f(*a)
                            per[v][k].append(clock() - t)
                med = {v: [statistics.median(x) * 1e6 for x in per[v]] for v in variants}
                print("launch, kernel, output shape, " + ", ".join(f"{v} us" for v in variants))
                for k, (f, a) in enumerate(bound["inplace"]):
                    shape = tuple(a[-1].shape) if hasattr(a[-1], "shape") else ()
                    print(f"{k:3d} {getattr(f, '__name__', '?'):26s} {str(shape):22s} "
                          + " ".join(f"{med[v][k]:8.0f}" for v in variants))
                print("sum us: " + ", ".join(f"{v} {sum(med[v]):.0f}" for v in variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
