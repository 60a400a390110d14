"""Quick GPU benchmark of the CUDA matmul templates against cuBLAS (torch.matmul), in one
run, before the driver's tuner is wired: for each case, build every candidate of the
template's space at --level in parallel processes (through the build cache), time each
with CUDA events (median), check the winner against torch in float64, and time cuBLAS
on the same inputs. fp32 runs with TF32 off on both sides.

    python bench/gpu_matmul_quick.py --level 2 --out OUTDIR
    python bench/gpu_matmul_quick.py --picks --out OUTDIR   # a few chosen candidates only

--picks times only the handful of space-2 candidates listed in PICKS for the four
target cases (what a short device lease allows); the tuner still sees the whole space.

Prints a table last and writes OUTDIR/gpu_matmul_quick.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

CASES = [  # (dtype, m, n, k)
    ("float32", 4096, 4096, 4096), ("float32", 2039, 2039, 2039),
    ("float16", 4096, 4096, 4096), ("float16", 2039, 2039, 2039), ("float16", 1021, 3001, 997),
    ("bfloat16", 4096, 4096, 4096),
]


def _tile(bm, bn, bk, wm, wn, stages, split=1, **extra):
    return dict({"block_m": bm, "block_n": bn, "block_k": bk, "warps_m": wm, "warps_n": wn, "stages": stages,
                 "split_k": split}, **extra)


def _simt(tm, tn, wm, wn, lm, ln, bk):
    return {"thread_m": tm, "thread_n": tn, "warps_m": wm, "warps_n": wn, "lanes_m": lm, "lanes_n": ln,
            "block_k": bk}


PICKS = {  # (dtype, m, n, k) -> candidates (members of the level-2 space), v1's winners included
    ("float32", 4096, 4096, 4096): [_simt(8, 8, 4, 2, 4, 8, 16), _simt(8, 8, 2, 4, 8, 4, 16),
                                    _simt(8, 8, 2, 4, 8, 4, 8)],
    ("float16", 4096, 4096, 4096): [_tile(256, 128, 64, 4, 2, 4), _tile(256, 128, 64, 4, 2, 4, raster=8),
                                    _tile(128, 256, 64, 2, 4, 4), _tile(128, 256, 64, 2, 4, 4, raster=8),
                                    _tile(256, 128, 64, 4, 2, 3), _tile(256, 128, 32, 4, 2, 4, raster=8),
                                    _tile(128, 128, 64, 2, 2, 4), _tile(128, 128, 32, 2, 2, 4)],
    ("float16", 2039, 2039, 2039): [_tile(128, 128, 64, 2, 4, 2), _tile(128, 128, 64, 2, 4, 3, pad=1),
                                    _tile(128, 128, 32, 2, 4, 3, pad=1), _tile(256, 128, 64, 4, 2, 4, pad=1)],
    ("float16", 1021, 3001, 997): [_tile(256, 128, 32, 4, 2, 4), _tile(128, 128, 32, 2, 4, 3),
                                   _tile(128, 128, 32, 2, 4, 3, pad=1), _tile(64, 128, 32, 2, 2, 4, pad=1),
                                   _tile(64, 128, 32, 2, 2, 4), _tile(128, 128, 32, 2, 2, 3, 2),
                                   _tile(128, 128, 64, 2, 4, 3, pad=1), _tile(256, 128, 64, 4, 2, 4, pad=1)],
}


def _median_seconds(device, fn, repeat):
    return statistics.median(device.time(fn, warmup=3, repeat=repeat))


def run_case(dtype, m, n, k, level, backend, target, torch, log, picks=False):
    from hidet_framework.runtime.compiled_task import build_in_parallel, compile_scheduled
    from hidet_plugin_matmul.cuda_simt import CudaSimtMatmul
    from hidet_plugin_matmul.cuda_tensor_core import CudaTensorCoreMatmul
    from hidet_plugin_matmul.operators import matmul_task

    template = CudaSimtMatmul() if dtype == "float32" else CudaTensorCoreMatmul()
    task, attrs = matmul_task((m, k), (k, n), dtype)
    space = template.space(target, level)
    if picks:
        full = template.space(target, 2)
        space = [p for p in PICKS[(dtype, m, n, k)] if p in full]
        assert space, "no pick is in the space"
    started = time.perf_counter()
    built = build_in_parallel([lambda p=p: template.build(task, attrs, p, target) for p in space], backend, target)
    compile_s = time.perf_counter() - started
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((m, k), device="cuda", generator=gen).to(tdt)
    b = torch.randn((k, n), device="cuda", generator=gen).to(tdt)
    c = torch.empty((m, n), device="cuda", dtype=tdt)
    flops = 2.0 * m * n * k
    repeat = 10 if flops > 1e11 else 30
    times = {}
    for index, path, error, _ in built:
        if error:
            log.write(f"  candidate {space[index]} failed to build: {error[:300]}\n")
            continue
        params = space[index]
        try:
            st = template.build(task, attrs, params, target)
            compiled = compile_scheduled(task, st, backend, target)
            ws = compiled.allocate_workspace()
            compiled.run([a, b], [c], ws)
            times[index] = _median_seconds(backend.device, lambda: compiled.run([a, b], [c], ws), repeat)
        except Exception as exc:
            log.write(f"  candidate {params} failed to run: {type(exc).__name__}: {exc}\n")
    tune_s = time.perf_counter() - started
    if picks:  # every pick's figure, not just the winner's
        for index in sorted(times, key=times.get):
            print(f"  {dtype} {m}x{n}x{k} {flops / times[index] / 1e12:7.1f} TFLOP/s  {space[index]}", flush=True)
    best = min(times, key=times.get)
    st = template.build(task, attrs, space[best], target)
    compiled = compile_scheduled(task, st, backend, target)
    c.fill_(float("nan"))
    compiled.run([a, b], [c])
    ref = a.double() @ b.double()
    err = float((c.double() - ref).norm() / ref.norm())
    torch.backends.cuda.matmul.allow_tf32 = False
    cublas = _median_seconds(backend.device, lambda: torch.matmul(a, b, out=c), repeat)
    ours = times[best]
    row = {"dtype": dtype, "m": m, "n": n, "k": k, "template": template.name, "version": template.version,
           "level": "picks" if picks else level, "candidates": len(space), "built": len(times), "compile_s": round(compile_s, 1),
           "tune_s": round(tune_s, 1), "best": space[best], "ours_ms": ours * 1e3, "cublas_ms": cublas * 1e3,
           "ours_tflops": flops / ours / 1e12, "cublas_tflops": flops / cublas / 1e12,
           "ratio": cublas / ours, "rel_err": err,
           "default_tflops": flops / times[0] / 1e12 if 0 in times else None}
    log.write(json.dumps(row) + "\n")
    log.flush()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--only", default="", help="comma-separated dtypes to run")
    parser.add_argument("--shape", default="", help="only this MxNxK")
    parser.add_argument("--picks", action="store_true", help="only the PICKS candidates of the four target cases")
    args = parser.parse_args()
    import torch

    from hidet_plugin_cuda import CudaBackend

    backend = CudaBackend()
    if not backend.availability():
        print(f"no usable GPU: {backend.availability().reason}")
        return 1
    target = backend.detect_target()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    with open(os.path.join(args.out, "gpu_matmul_quick.log"), "w") as log:
        for case in (list(PICKS) if args.picks else CASES):
            if args.only and case[0] not in args.only.split(","):
                continue
            if args.shape and "x".join(map(str, case[1:])) != args.shape:
                continue
            try:
                rows.append(run_case(*case, args.level, backend, target, torch, log, args.picks))
            except Exception as exc:
                print(f"case {case} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    with open(os.path.join(args.out, "gpu_matmul_quick.json"), "w") as f:
        json.dump({"device": target.get("name"), "rows": rows}, f, indent=1)
    print(f"\n{'dtype':9} {'M x N x K':>18} {'cands':>5} {'tune s':>6} {'ours TF/s':>9} {'cuBLAS':>8} "
          f"{'ratio':>6} {'default':>7} {'rel err':>8}  best")
    for r in rows:
        best = r["best"]
        short = ",".join(f"{v}" for v in best.values())
        default = f"{r['default_tflops']:.1f}" if r["default_tflops"] else "-"
        print(f"{r['dtype']:9} {r['m']:>5}x{r['n']:>5}x{r['k']:>5} {r['candidates']:>5} {r['tune_s']:>6.1f} "
              f"{r['ours_tflops']:>9.1f} {r['cublas_tflops']:>8.1f} {r['ratio']:>6.2f} {default:>7} "
              f"{r['rel_err']:>8.1e}  {short}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
