"""Whole models: ours next to onnxruntime (cpu) or torch (cuda), same inputs, same process.

    python bench/models.py --target cpu [--models resnet50,bert_base_s128] [--repeat 10] [--out DIR]
    python bench/models.py --target cuda [--batches 1,16] [--budget-s 600] [--ort-check] [--out DIR]

``--target cuda`` (half precision, against torch eager / torch.compile / torch.compile
with CUDA graphs) is described in ``bench/models_cuda.py``; the rest of this text is the
cpu table.

The five ONNX graphs of ``../shared/models`` (ResNet-50, MobileNet-V2, Inception-V3,
BERT-base and GPT-2 at sequence 128, batch 1; weights stripped) get their weights
refilled by ``../shared/tools/materialize_onnx.py`` into a temporary folder. For each:
compile time at ``--space`` (a fresh build and tuning cache unless ``--keep-cache``, so
identical tasks are compiled once and nothing comes from an earlier run), then
``--repeat`` interleaved runs of ours and of onnxruntime on the same inputs, both at
``--threads`` threads (OMP_NUM_THREADS for ours, intra_op_num_threads for
onnxruntime). Printed per model: max relative error (max |ours - ort| / max |ort|;
target 1e-4 in fp32), median latencies, ratio = onnxruntime / ours (> 1: we are
faster), compile time and kernel launches. A model that does not import or compile is
reported with the reason. The CPU's model name and vector ISA, and the load average
(the machine may be shared), are printed with the table; ``--out`` writes JSON.
``--clock cpu`` (with ``--threads 1``: both sides then compute on the calling thread)
times with the thread's CPU clock, which does not count the waits for a core: on a
loaded, shared machine the figure that stays put.

Idle threads (cpu), as in bench/conv.py: onnxruntime runs with
``session.intra_op.allow_spinning=0`` and our pool spins only briefly
(HIDET_FRAMEWORK_CPU_SPIN_US), because in call-by-call interleaving a side whose idle
threads spin takes the CPUs the other side runs on next. Measured on a quiet 2-CPU box,
2 threads (session 8): with onnxruntime spinning, our MobileNet-V2 took 15.3 ms and
ResNet-50 73.8 ms, against 4.9 and 44.6 ms with it sleeping. ``--spin`` keeps
onnxruntime's default (its own figure then is its spinning speed; ours is not valid).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

from shared_models import MODELS, materialize  # noqa: E402  (MODELS: fusion.py imports it from here)
from shared_models import shared_dir as _shared_dir  # noqa: E402


def cpu_description() -> str:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "avx2", "fma") if f in flags]
    return f"{model} ({', '.join(isa) or 'no AVX'}), {os.cpu_count()} logical CPUs"


def _inputs(session, rng):
    import numpy as np

    feed = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int" in i.type:
            feed[i.name] = rng.integers(0, 1000, shape).astype(np.int64 if "int64" in i.type else np.int32)
        else:
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def bench_model(path: str, args) -> dict:
    import numpy as np
    import onnxruntime as ort

    import hidet_framework as hf

    row: dict = {"model": os.path.basename(path)[:-5]}
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    if not args.spin:  # as bench/conv.py: a spinning side steals the CPUs the other runs on next
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = _inputs(session, np.random.default_rng(0))
    load_avg = os.getloadavg()[0]
    try:
        start = time.perf_counter()
        graph = hf.load(path)
        loaded = time.perf_counter()
        fn = hf.compile(graph, target=args.target, space=args.space, dtype=args.dtype)
        row["compile_s"] = time.perf_counter() - loaded
        row["import_s"] = loaded - start
    except Exception as exc:  # a model that does not import or compile is a result
        row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        for line in str(exc).strip().splitlines()[1:4]:
            row["error"] += " | " + line.strip()[:200]
        return row
    names = [t.name for t in graph.inputs]
    arrays = [feed[i.name] for i in session.get_inputs()]
    ours, ref = fn(*arrays), session.run(None, feed)
    ours = list(ours) if isinstance(ours, tuple) else [ours]
    if args.dtype == "bfloat16":  # outputs are bfloat16 bits
        ours = [(np.asarray(o).astype(np.uint32) << 16).view(np.float32) if o.dtype == np.uint16 else o for o in ours]
    row["max_rel_err"] = max(float(np.max(np.abs(o.astype(np.float64) - r))) / max(float(np.max(np.abs(r))), 1e-30)
                             for o, r in zip(ours, ref))
    ours_t, ort_t = [], []
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    for _ in range(args.repeat):  # interleaved: load changes hit both alike
        t = clock()
        fn(*arrays)
        ours_t.append(clock() - t)
        t = clock()
        session.run(None, feed)
        ort_t.append(clock() - t)
    row.update(ours_ms=statistics.median(ours_t) * 1e3, ort_ms=statistics.median(ort_t) * 1e3,
               launches=fn.num_launches, inputs=len(names),
               load_avg=(load_avg + os.getloadavg()[0]) / 2)
    row["ratio"] = row["ort_ms"] / row["ours_ms"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--space", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--shared", default=_shared_dir(), help="folder with models/ and tools/ (../shared)")
    parser.add_argument("--keep-cache", action="store_true", help="use $HIDET_FRAMEWORK_CACHE as it is")
    parser.add_argument("--spin", action="store_true",
                        help="cpu: keep onnxruntime's spinning idle threads (its default; see the docstring)")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="cpu: the calling thread's CPU time (cpu target, --threads 1)")
    parser.add_argument("--dtype", default=None, choices=["bfloat16", "float16"],
                        help="cpu: compile in half precision (hf.compile's dtype; onnxruntime stays float32)")
    parser.add_argument("--out", help="folder for models.json")
    parser.add_argument("--batches", default="1", help="cuda: batch sizes, e.g. 1,16")
    parser.add_argument("--budget-s", type=float, default=1e9,
                        help="cuda: seconds after which torch.compile is skipped for the remaining models")
    parser.add_argument("--rounds", type=int, default=5, help="cuda: interleaved rounds")
    parser.add_argument("--calls", type=int, default=20, help="cuda: timed calls per impl per round")
    parser.add_argument("--top", type=int, default=5, help="cuda: our costliest kernels to print per model")
    parser.add_argument("--peers", default="eager,inductor_cg,inductor",
                        help="cuda: torch.compile peers (inductor_cg: mode='reduce-overhead'; inductor: default)")
    parser.add_argument("--ort-check", action="store_true", help="cuda: torch fp32 module vs onnxruntime too")
    args = parser.parse_args()
    if args.target == "cuda":
        return main_cuda(args)
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu measures the calling thread only: use it with --threads 1")
    if os.environ.get("OMP_NUM_THREADS") != str(args.threads):  # must be set before OpenMP starts
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    os.environ.setdefault("HIDET_FRAMEWORK_QUIET", "1")
    scratch = tempfile.mkdtemp(prefix="hf-models-")
    if not args.keep_cache:
        os.environ["HIDET_FRAMEWORK_CACHE"] = os.path.join(scratch, "cache")
    print(f"cpu: {cpu_description()}; {args.threads} threads each; {args.clock} clock; space {args.space}; "
          f"dtype {args.dtype or 'float32'}; "
          f"cache {'kept' if args.keep_cache else 'fresh'}; load average at start {os.getloadavg()[0]:.1f}",
          flush=True)
    rows = []
    for name in args.models.split(","):
        path = materialize(args.shared, name, scratch)
        row = bench_model(path, args)
        os.remove(path)
        rows.append(row)
        _print_row(row)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "models.json"), "w") as f:
            json.dump({"cpu": cpu_description(), "threads": args.threads, "space": args.space, "rows": rows}, f,
                      indent=1)
    return 0


def main_cuda(args) -> int:
    from models_cuda import batched_copy, bench_model_cuda, print_row_cuda

    import torch

    started = time.perf_counter()
    os.environ.setdefault("HIDET_FRAMEWORK_QUIET", "1")
    scratch = tempfile.mkdtemp(prefix="hf-models-")
    if not args.keep_cache:  # one fresh cache for the run: shared across its models
        os.environ["HIDET_FRAMEWORK_CACHE"] = os.path.join(scratch, "cache")
    print(f"gpu: {torch.cuda.get_device_name()}; torch {torch.__version__}; fp16; space {args.space}; "
          f"cache {'kept' if args.keep_cache else 'fresh'}; {os.cpu_count()} cpus", flush=True)
    rows = []
    for name in args.models.split(","):
        path = materialize(args.shared, name, scratch)
        for batch in [int(b) for b in args.batches.split(",")]:
            model_path = batched_copy(path, batch, os.path.join(scratch, f"{name}_b{batch}.onnx"))
            row = bench_model_cuda(model_path, batch, args, started)
            rows.append(row)
            print_row_cuda(row)
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, "models_cuda.json"), "w") as f:
                    json.dump({"gpu": torch.cuda.get_device_name(), "space": args.space, "rows": rows}, f,
                              indent=1, default=str)
        os.remove(path)
    return 0


def _print_row(row: dict) -> None:
    if "error" in row:
        print(f"{row['model']:<16} FAILED: {row['error']}", flush=True)
        return
    print(f"{row['model']:<16} err {row['max_rel_err']:.1e}  ours {row['ours_ms']:9.2f} ms  ort {row['ort_ms']:8.2f} ms"
          f"  ratio {row['ratio']:.3f}  compile {row['compile_s']:6.1f} s (import {row['import_s']:.1f} s)"
          f"  launches {row['launches']}  load {row['load_avg']:.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
