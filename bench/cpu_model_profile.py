"""Where a model's time goes on the CPU: ours vs onnxruntime, and our top tasks.

    python bench/cpu_model_profile.py --models bert_base_s128,gpt2_s128 [--threads 2] [--repeat 7] [--top 10]

For each model of ``../shared/models`` (weights refilled by
``../shared/tools/materialize_onnx.py``, as bench/models.py does): compile at space 0,
check the output against onnxruntime, time ``fn(*inputs)`` and ``session.run``
interleaved (``--gap-ms`` idle before each timed call, for the spinning pool threads
of the other side), then time every bound launch alone (median of ``--repeat``) and
print the top tasks by total time: the template (``source``), the kernel, its
operand shapes, milliseconds per call and share of the sum. The header names the ISA
and the load average: on a shared machine only the ratios mean anything.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _set_threads(argv: list[str]) -> int:
    threads = 2
    for k, arg in enumerate(argv):
        if arg == "--threads" and k + 1 < len(argv):
            threads = int(argv[k + 1])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    return threads


THREADS = _set_threads(sys.argv)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import numpy as np  # noqa: E402  (after the thread variables)

from models import _inputs, _shared_dir  # noqa: E402  (bench/models.py's input feed and shared folder)
from ops_cpu import machine_line  # noqa: E402


def materialize(shared: str, name: str, folder: str) -> str:
    out = os.path.join(folder, name + ".onnx")
    subprocess.run([sys.executable, os.path.join(shared, "tools", "materialize_onnx.py"),
                    os.path.join(shared, "models", name + ".onnx"), out], check=True)
    return out


def timed(fn, gap_s: float) -> float:
    if gap_s:
        time.sleep(gap_s)
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bound_launches(fn, arrays) -> list[tuple]:
    """The launches as a call binds them: the graph's inputs and fresh outputs in place
    of the arena views (which hold no valid token ids, for instance). Private
    attributes: this bench measures around the runtime."""
    direct = fn._direct
    if direct is None:
        return list(fn._launches)
    outs = direct._fresh_outputs()
    launches = []
    for f, args, changes in direct._plan:
        args = list(args)
        for arg, kind, k in changes:
            args[arg] = outs[k] if kind else arrays[k]
        launches.append((f, tuple(args)))
    return launches


def profile(fn, arrays, repeat: int) -> list[tuple]:
    """(median s, launch index, kernel name, argument shapes) per bound launch."""
    rows = []
    for k, (f, args) in enumerate(bound_launches(fn, arrays)):
        f(*args)
        ts = []
        for _ in range(repeat):
            t = time.perf_counter()
            f(*args)
            ts.append(time.perf_counter() - t)
        shapes = [tuple(a.shape) for a in args if hasattr(a, "shape")]
        rows.append((statistics.median(ts), k, getattr(f, "__name__", "?"), shapes))
    return rows


def kernel_sources(fn) -> dict:
    """Kernel name -> the template (or ``auto``) that scheduled it."""
    out = {}
    for task in fn.tasks:
        scheduled = getattr(task, "scheduled", None)
        for launch in getattr(scheduled, "launches", ()):
            out[launch.function] = getattr(scheduled, "source", "") or "auto"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert_base_s128,gpt2_s128")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--gap-ms", type=float, default=50.0)
    parser.add_argument("--space", type=int, default=0)
    args = parser.parse_args()
    import onnxruntime as ort

    import hidet_framework as hf

    shared = _shared_dir()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="hf-profile-") as folder:
        for name in args.models.split(","):
            path = materialize(shared, name, folder)
            options = ort.SessionOptions()
            options.intra_op_num_threads = args.threads
            options.inter_op_num_threads = 1
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            feed = _inputs(session, np.random.default_rng(0))
            start = time.perf_counter()
            fn = hf.compile(hf.load(path), target="cpu", space=args.space)
            compile_s = time.perf_counter() - start
            arrays = [feed[i.name] for i in session.get_inputs()]
            ours, ref = fn(*arrays), session.run(None, feed)
            ours = list(ours) if isinstance(ours, tuple) else [ours]
            err = max(float(np.max(np.abs(o.astype(np.float64) - r))) / max(float(np.max(np.abs(r))), 1e-30)
                      for o, r in zip(ours, ref))
            ours_t, ort_t = [], []
            for _ in range(args.repeat):
                ours_t.append(timed(lambda: fn(*arrays), args.gap_ms / 1e3))
                ort_t.append(timed(lambda: session.run(None, feed), args.gap_ms / 1e3))
            o_ms, r_ms = statistics.median(ours_t) * 1e3, statistics.median(ort_t) * 1e3
            print(f"\n## {name}: ours {o_ms:.2f} ms, onnxruntime {r_ms:.2f} ms, ratio {r_ms / o_ms:.2f}x "
                  f"(max rel err {err:.1e}, {fn.num_launches} launches, compile {compile_s:.1f} s, "
                  f"load average {os.getloadavg()[0]:.1f})")
            rows = profile(fn, arrays, args.repeat)
            sources = kernel_sources(fn)
            total = sum(r[0] for r in rows)
            by_kernel: dict = {}
            for t, k, kname, shapes in rows:
                src = sources.get(kname, "auto")
                key = (src, kname.rsplit("_", 1)[0] if kname[-1:].isdigit() else kname, str(shapes))
                entry = by_kernel.setdefault(key, [0.0, 0])
                entry[0] += t
                entry[1] += 1
            print(f"sum of launches alone {total * 1e3:.2f} ms; top {args.top} by total time:\n")
            print("| # | template | kernel | operand shapes | calls | ms | share |")
            print("|---|---|---|---|---|---|---|")
            ranked = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:args.top]
            for n, ((src, kname, shapes), (t, calls)) in enumerate(ranked, 1):
                print(f"| {n} | {src} | {kname} | {shapes} | {calls} | {t * 1e3:.2f} | {t / total:.0%} |")
    print("\n" + machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
