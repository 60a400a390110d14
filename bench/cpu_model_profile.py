"""Where a model's time goes on the CPU: ours vs onnxruntime, and our top tasks.

    python bench/cpu_model_profile.py --models bert_base_s128,gpt2_s128 [--threads 2] [--repeat 7] [--top 10]
    python bench/cpu_model_profile.py --models mobilenet_v2 --threads 1 --clock cpu --in-sequence

For each model of ``../shared/models`` (weights refilled by
``../shared/tools/materialize_onnx.py``, as bench/models.py does): compile at space 0,
check the output against onnxruntime, time ``fn(*inputs)`` and ``session.run``
interleaved (``--gap-ms`` idle before each timed call, for the spinning pool threads
of the other side), then time every bound launch alone (median of ``--repeat``) and
print the top tasks by total time: the template (``source``), the kernel, its
operand shapes, milliseconds per call and share of the sum. The header names the ISA
and the load average: on a shared machine only the ratios mean anything.

``--clock cpu`` (with ``--threads 1`` only: both sides then run on the calling
thread) times with the thread's CPU clock, which does not count the time the thread
waits for a core: on a loaded machine the only figure that stays put. ``--in-sequence``
times each launch inside whole passes over the launch list (caches as a real call
leaves them: the previous kernel's output in L2, this kernel's output buffer cold)
instead of each launch repeated alone (everything hot).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


from thread_env import threads_unless_imported  # noqa: E402  (bench/ is the script's folder)

THREADS = threads_unless_imported(sys.argv, __name__ == "__main__")  # keeps an importer's OMP_NUM_THREADS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import numpy as np  # noqa: E402  (after the thread variables)

from models import _inputs, _shared_dir  # noqa: E402  (bench/models.py's input feed and shared folder)
from ops_cpu import machine_line  # noqa: E402
from shared_models import materialize  # noqa: E402


def timed(fn, gap_s: float, clock=time.perf_counter) -> float:
    if gap_s:
        time.sleep(gap_s)
    t = clock()
    fn()
    return clock() - t


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


def profile(fn, arrays, repeat: int, clock=time.perf_counter, in_sequence: bool = False) -> list[tuple]:
    """(median s, launch index, kernel name, argument shapes) per bound launch."""
    launches = bound_launches(fn, arrays)
    times: list = [[] for _ in launches]
    if in_sequence:
        for f, args in launches:   # warm-up pass
            f(*args)
        for _ in range(repeat):
            for k, (f, args) in enumerate(launches):
                t = clock()
                f(*args)
                times[k].append(clock() - t)
    else:
        for k, (f, args) in enumerate(launches):
            f(*args)
            for _ in range(repeat):
                t = clock()
                f(*args)
                times[k].append(clock() - t)
    rows = []
    for k, (f, args) in enumerate(launches):
        shapes = [tuple(a.shape) for a in args if hasattr(a, "shape")]
        rows.append((statistics.median(times[k]), k, getattr(f, "__name__", "?"), shapes))
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
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="cpu: the calling thread's CPU time (needs --threads 1)")
    parser.add_argument("--in-sequence", action="store_true",
                        help="time each launch inside passes over all launches, not repeated alone")
    args = parser.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu measures the calling thread only: use it with --threads 1")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
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
                ours_t.append(timed(lambda: fn(*arrays), args.gap_ms / 1e3, clock))
                ort_t.append(timed(lambda: session.run(None, feed), args.gap_ms / 1e3, clock))
            o_ms, r_ms = statistics.median(ours_t) * 1e3, statistics.median(ort_t) * 1e3
            print(f"\n## {name} ({args.clock} clock): ours {o_ms:.2f} ms, onnxruntime {r_ms:.2f} ms, ratio {r_ms / o_ms:.2f}x "
                  f"(max rel err {err:.1e}, {fn.num_launches} launches, compile {compile_s:.1f} s, "
                  f"load average {os.getloadavg()[0]:.1f})")
            rows = profile(fn, arrays, args.repeat, clock, args.in_sequence)
            sources = kernel_sources(fn)
            total = sum(r[0] for r in rows)
            by_kernel: dict = {}
            for t, k, kname, shapes in rows:
                src = sources.get(kname, "auto")
                key = (src, kname.rsplit("_", 1)[0] if kname[-1:].isdigit() else kname, str(shapes))
                entry = by_kernel.setdefault(key, [0.0, 0])
                entry[0] += t
                entry[1] += 1
            how = "in sequence" if args.in_sequence else "alone"
            print(f"sum of launches timed {how} {total * 1e3:.2f} ms; top {args.top} by total time:\n")
            print("| # | template | kernel | operand shapes | calls | ms | share |")
            print("|---|---|---|---|---|---|---|")
            ranked = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:args.top]
            for n, ((src, kname, shapes), (t, calls)) in enumerate(ranked, 1):
                print(f"| {n} | {src} | {kname} | {shapes} | {calls} | {t * 1e3:.2f} | {t / total:.0%} |")
    print("\n" + machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
