"""Matmul: our tuned templates next to the vendor library, shape by shape.

    python bench/matmul.py --target cpu --space 2 --out bench-out
    python bench/matmul.py --target cpu --shapes 1024,2048 --space 0
    python bench/matmul.py --target cuda --space 1 --all --out bench-out
    python bench/matmul.py --target cuda --space 1 --short-m --dtypes float32,float16,bfloat16

For each shape and dtype: our time (median of --repeat runs of the tuner's winner),
the peer's time in the same process (CPU: numpy/OpenBLAS on the same thread count;
GPU: torch.matmul / cuBLAS with TF32 off), ratio = peer / ours (> 1: we are faster),
max relative error (max |C - ref| / max |ref|) against a float64 reference (on the GPU:
torch in float64, or a float32 cuBLAS result for shapes too big for that), the number
of candidates and the tuning time (a fresh tuning cache per run unless --keep-cache).
A table goes to stdout and one JSON file into --out.

Shapes are written MxNxK (C[M, N] = A[M, K] @ B[K, N]); ``BxMxNxK`` is a batch. A bare
``1024`` means 1024x1024x1024.

CPU notes: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, set on some machines for old
OpenBLAS builds, slow a current numpy down; this script re-executes itself without
them (the benchmark process only) and reports which OpenBLAS kernel numpy then uses
(threadpoolctl, when installed).

Until the driver runs the tuner for templates, the CPU path tunes with
``hidet_framework.tuner.tune`` over the registered CPU templates and runs the winner
through ``hidet_framework.runtime.compiled_task``; ``--via-driver`` uses
``hidet_framework.driver.compile_task`` instead (CPU and CUDA).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ALL_SHAPES = ["4096", "2048", "1024", "2039", "1021x3001x997", "128x4096x4096", "16x4096x4096", "8x512x512x512"]
# issue 18's short-M targets (decode and small batches): MxNxK
SHORT_M = ["16x4096x4096", "32x4096x11008", "1x4096x11008", "1x11008x4096", "128x4096x4096"]
CPU_DEFAULT = ["1024", "2048", "2039", "1021x3001x997", "128x4096x4096", "16x4096x4096", "8x512x512x512"]
_BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """(batch, m, n, k); batch 0 means plain 2-D operands."""
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        return 0, parts[0], parts[0], parts[0]
    if len(parts) == 3:
        return 0, *parts
    if len(parts) == 4:
        return tuple(parts)  # type: ignore[return-value]
    raise ValueError(f"shape {text!r}: write N, MxNxK or BxMxNxK")


def operand_shapes(batch: int, m: int, n: int, k: int) -> tuple[tuple, tuple]:
    return ((batch, m, k), (batch, k, n)) if batch else ((m, k), (k, n))


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def median_time(fn, repeat: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ------------------------------------------------------------------------ CPU

def blas_info(threads: int) -> dict:
    """numpy's BLAS libraries as threadpoolctl sees them (kernel architecture, threads)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {"note": "threadpoolctl not installed: numpy's BLAS thread count unchecked"}
    info = [{k: d.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
            for d in threadpool_info() if d.get("user_api") == "blas"]
    return {"blas": info}


def tune_cpu(task, attributes, level: int, cache_dir: str):
    """The tuner over the registered CPU matmul templates; returns (compiled, result)."""
    from hidet_framework.extension import plugin_host
    from hidet_framework.runtime.compiled_task import build_scheduled, compile_scheduled, load_scheduled
    from hidet_framework.tuner import TuningCache, tune

    host = plugin_host()
    backend = host.backend_for("cpu")
    target = backend.detect_target()
    templates = [t for t in host.templates.templates_for("matmul", "cpu") if t.applies(task, attributes)]
    rng = np.random.default_rng(0)
    a = rng.standard_normal(_input_shape(attributes, "a")).astype(np.float32)
    b = rng.standard_normal(_input_shape(attributes, "b")).astype(np.float32)
    c = np.empty(_output_shape(attributes), np.float32)

    def prepare(scheduled):  # in the tuner's workers: lower and build; `measure` loads the result
        return build_scheduled(scheduled, backend, target)

    def measure(scheduled, runs, prepared):
        return load_scheduled(task, scheduled, backend, target, prepared).time([a, b], [c], repeat=runs, warmup=1)

    result = tune(task, attributes, "matmul", target, templates, level, prepare, measure,
                  cache=TuningCache(cache_dir))
    scheduled = result.template.build(task, attributes, result.params, target)
    compiled = compile_scheduled(task, scheduled, backend, target)
    return compiled, result


def _input_shape(attributes, which: str) -> tuple:
    m, n, k, batch = attributes["m"], attributes["n"], attributes["k"], attributes["batch"]
    rank, batched = attributes[f"{which}_rank"], attributes[f"{which}_batched"]
    rows, cols = (m, k) if which == "a" else (k, n)
    return ((batch if batched else 1), rows, cols) if rank == 3 else (rows, cols)


def _output_shape(attributes) -> tuple:
    m, n, batch = attributes["m"], attributes["n"], attributes["batch"]
    return (batch, m, n) if attributes["out_rank"] == 3 else (m, n)


def bench_cpu(shape_text: str, args, cache_dir: str) -> dict:
    from hidet_plugin_matmul.operators import matmul_task

    batch, m, n, k = parse_shape(shape_text)
    a_shape, b_shape = operand_shapes(batch, m, n, k)
    task, attributes = matmul_task(a_shape, b_shape, "float32")
    started = time.perf_counter()
    if args.via_driver:
        from hidet_framework.driver import compile_task

        fn = compile_task(task, "cpu", space=args.space)
        run = lambda a, b, c: fn.run([a, b], [c])  # noqa: E731
        candidates = fn.tuning.candidates if fn.tuning is not None else 1
        params = getattr(fn.scheduled, "params", None)
    else:
        compiled, result = tune_cpu(task, attributes, args.space, cache_dir)
        workspace = compiled.allocate_workspace()  # once, as the tuner's timing does
        run = lambda a, b, c: compiled.run([a, b], [c], workspace)  # noqa: E731
        candidates, params = result.candidates, {"template": result.template.name, **dict(result.params)}
    tuning = time.perf_counter() - started
    rng = np.random.default_rng()
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    c = np.full(_output_shape(attributes), np.nan, np.float32)
    run(a, b, c)
    error = rel_error(c, np.matmul(a.astype(np.float64), b.astype(np.float64)))
    # OpenBLAS worker threads busy-wait for a while after a call (and OpenMP's after a
    # region); on a 2-core machine they would steal the cores of the next timing.
    time.sleep(0.5)
    ours = median_time(lambda: run(a, b, c), args.repeat)
    time.sleep(0.5)
    peer = median_time(lambda: np.matmul(a, b), args.repeat)
    return {"shape": shape_text, "dtype": "float32", "ours_s": ours, "peer_s": peer, "ratio": peer / ours,
            "gflops": 2.0 * max(batch, 1) * m * n * k / ours / 1e9, "max_rel_error": error,
            "candidates": candidates, "tuning_s": tuning, "params": params}


# ----------------------------------------------------------------------- CUDA

def cuda_timed(f, repeat: int) -> float:
    """Median seconds of one run: events around each run, all queued back to back after
    warm-ups with one synchronisation at the end, so the GPU never waits for the host's
    launch (a sync per run would add the launch latency to both sides)."""
    import torch

    for _ in range(3):
        f()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
    for start, end in events:
        start.record()
        f()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) / 1e3 for start, end in events)


def cuda_graph_timed(f, repeat: int, inner: int = 20) -> float:
    """Median seconds of one run by CUDA graph replay: `inner` runs captured into one
    graph, each replay timed with events. The host's launch cost (Python's, for our
    launches; the dispatcher's, for torch) is out of the figure: kernel time, with the
    GPU's own gap between consecutive kernels. `f(stream)` launches on that stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            f(side.cuda_stream)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(inner):
            f(stream)
    return cuda_timed(graph.replay, max(3, repeat // 3)) / inner


def bench_cuda(shape_text: str, dtype: str, args) -> dict:
    import torch

    from hidet_framework.driver import compile_task
    from hidet_plugin_matmul.operators import matmul_task

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    batch, m, n, k = parse_shape(shape_text)
    a_shape, b_shape = operand_shapes(batch, m, n, k)
    task, _ = matmul_task(a_shape, b_shape, dtype)
    started = time.perf_counter()
    fn = compile_task(task, "cuda", space=args.space)
    tuning = time.perf_counter() - started
    candidates = fn.tuning.candidates if fn.tuning is not None else 1
    template = getattr(getattr(fn.tuning, "template", None), "name", None) or getattr(fn.scheduled, "source", None)
    tdt = getattr(torch, dtype)
    a = torch.randn(a_shape, device="cuda", dtype=tdt)
    b = torch.randn(b_shape, device="cuda", dtype=tdt)
    c = torch.full(tuple(torch.matmul(a[..., :1, :], b).shape[:-2]) + (m, n), float("nan"), device="cuda", dtype=tdt)
    fn.run([a, b], [c])
    torch.cuda.synchronize()
    big = max(batch, 1) * m * n * k > 2 ** 33
    ref = torch.matmul(a.float(), b.float()) if big else torch.matmul(a.double(), b.double())
    error = rel_error(c.double().cpu().numpy(), ref.double().cpu().numpy())

    # time the launch list bound once to the tensors (as a compiled graph runs it), so the
    # per-call DLPack conversion of torch tensors is not counted as kernel time
    from hidet_plugin_cuda.memory import DeviceArray

    a_dev, b_dev, c_dev = (DeviceArray.from_dlpack(t) for t in (a, b, c))
    launches = fn.bind([a_dev, b_dev], [c_dev], fn.allocate_workspace())

    def run_bound(stream=None) -> None:
        for launch, launch_args in launches:
            launch(*launch_args, stream=stream)

    ours = cuda_timed(run_bound, args.repeat)
    peer = cuda_timed(lambda: torch.matmul(a, b), args.repeat)
    graph = {}
    if args.graph:
        graph = {"ours_graph_s": cuda_graph_timed(run_bound, args.repeat),
                 "peer_graph_s": cuda_graph_timed(lambda stream: torch.matmul(a, b), args.repeat)}
        graph["ratio_graph"] = graph["peer_graph_s"] / graph["ours_graph_s"]
    return {"shape": shape_text, "dtype": dtype, "ours_s": ours, "peer_s": peer, "ratio": peer / ours, **graph,
            "gflops": 2.0 * max(batch, 1) * m * n * k / ours / 1e9, "max_rel_error": error,
            "reference": "torch float32" if big else "torch float64",
            "candidates": candidates, "tuning_s": tuning, "template": template,
            "params": getattr(fn.scheduled, "params", None)}



# ----------------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--space", type=int, default=2, choices=(0, 1, 2))
    parser.add_argument("--out", default=None, help="folder for the JSON result")
    parser.add_argument("--shapes", default=None, help="comma-separated subset, e.g. 1024,2048,8x512x512x512")
    parser.add_argument("--all", action="store_true", help="every shape (4096^3 included)")
    parser.add_argument("--short-m", action="store_true", help="issue 18's short-M shapes: " + ",".join(SHORT_M))
    parser.add_argument("--dtypes", default="float32,float16,bfloat16",
                        help="comma-separated dtypes on cuda (cpu runs float32)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs (median): 7 on cpu, 30 on cuda")
    parser.add_argument("--via-driver", action="store_true", help="compile through hidet_framework.driver")
    parser.add_argument("--keep-cache", action="store_true", help="use the user's tuning cache")
    parser.add_argument("--graph", action="store_true",
                        help="cuda: also time both sides by CUDA graph replay (kernel time without launch cost)")
    args = parser.parse_args()
    if args.repeat is None:
        args.repeat = 7 if args.target == "cpu" else 30

    if args.target == "cpu" and any(v in os.environ for v in _BLAS_ENV):
        env = {k: v for k, v in os.environ.items() if k not in _BLAS_ENV}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)  # numpy must load without them

    shapes = args.shapes.split(",") if args.shapes else SHORT_M if args.short_m \
        else ALL_SHAPES if args.all or args.target == "cuda" else CPU_DEFAULT
    rows, info = [], {}
    cache_dir = tempfile.mkdtemp(prefix="hf-bench-tuning-")
    if args.keep_cache:
        cache_dir = os.environ.get("HIDET_FRAMEWORK_CACHE", os.path.expanduser("~/.cache/hidet_framework"))
    if args.target == "cpu":
        from hidet_plugin_cpu.target import detect_cpu_target

        threads = detect_cpu_target()["cores"]
        _limit_blas(threads)
        info = {"threads": threads, **blas_info(threads)}
        for shape in shapes:
            rows.append(bench_cpu(shape, args, os.path.join(cache_dir, "tuning")))
            _print_row(rows[-1])
    else:
        for shape in shapes:
            for dtype in args.dtypes.split(","):
                rows.append(bench_cuda(shape, dtype, args))
                _print_row(rows[-1])
                _write_json(rows, info, args)  # after every row: a cut-short run keeps its rows
    _print_table(rows, args)
    path = _write_json(rows, info, args)
    if path:
        print(f"wrote {path}")


def _write_json(rows: list, info: dict, args) -> str | None:
    if not args.out:
        return None
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"matmul_{args.target}_space{args.space}.json")
    with open(path, "w") as f:
        json.dump({"target": args.target, "space": args.space, "info": info, "rows": rows}, f, indent=2)
    return path


def _limit_blas(threads: int) -> None:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(threads, user_api="blas")


def _print_row(r: dict) -> None:
    graph = f", graph replay x{r['ratio_graph']:.2f}" if "ratio_graph" in r else ""
    print(f"  {r['shape']:>16} {r['dtype']:>8}: ours {r['ours_s'] * 1e6:9.1f} us, peer {r['peer_s'] * 1e6:9.1f} us, "
          f"x{r['ratio']:.2f}{graph}", file=sys.stderr, flush=True)


def _print_table(rows: list, args) -> None:
    graph = any("ratio_graph" in r for r in rows)
    head = f"{'shape':>16} {'dtype':>8} {'ours us':>9} {'peer us':>9} {'ratio':>6} " + \
        (f"{'ours g':>8} {'peer g':>8} {'ratio g':>7} " if graph else "") + \
        f"{'GFLOP/s':>8} {'rel err':>8} {'cands':>5} {'tune s':>7}  winner"
    print(f"matmul on {args.target}, space {args.space} (ratio = peer time / our time; > 1: we are faster"
          + ("; g: CUDA graph replay, kernel time without launch cost)" if graph else ")"))
    print(head)
    print("-" * len(head))
    for r in rows:
        g = f"{r['ours_graph_s'] * 1e6:8.1f} {r['peer_graph_s'] * 1e6:8.1f} {r['ratio_graph']:7.2f} " \
            if "ratio_graph" in r else (" " * 26 if graph else "")
        print(f"{r['shape']:>16} {r['dtype']:>8} {r['ours_s'] * 1e6:9.1f} {r['peer_s'] * 1e6:9.1f} "
              f"{r['ratio']:6.2f} {g}{r['gflops']:8.1f} {r['max_rel_error']:8.1e} "
              f"{r['candidates'] if r['candidates'] is not None else '-':>5} {r['tuning_s']:7.1f}  "
              f"{r.get('template') or ''}")


if __name__ == "__main__":
    main()
