"""Kernel times of CUDA matmul candidates on chosen GEMM shapes, next to the cost model of
`hidet_plugin_matmul.cuda_defaults`: the figures its constants are fitted to, and a check
of the tuner's timing.

    python bench/gemm_fit.py --shapes 128x768x768,128x768x3072 --out OUT
    python bench/gemm_fit.py --templates matmul.cuda_tensor_core:2,matmul.cuda_wgmma:1 --max-seconds 90

Candidates: the spaces of the given templates at the given levels (``name:level``),
without the ``auto`` entry, the ``pad`` / ``raster`` variants (on aligned shapes they
build the plain kernel or tie with it), block tiles of 2*M rows or more and mma.sync
pipelines of 2 stages. All of a
batch of shapes are built in one parallel pool (the tuner's own), then each candidate
is checked once against float64 (output poisoned with NaN) and timed three ways:

- ``cold_us``: one CUDA graph (torch) of the candidate's launches repeated over copies of
  B that together exceed twice the L2 (weights come from DRAM, as a model's layers read
  theirs), replayed; per run. What the model is fitted to.
- ``dev_us``: the tuner's timing now (`CudaDevice.time_launches`: a graph of the launches,
  device time only; B stays in L2).
- ``ev_us``: the tuner's timing before (`CompiledTask.time`: events around Python
  launches, host launch cost included).

Also cuBLAS (torch.matmul) per shape by the ``cold`` method, and ``model_us``: the cost
model's figure for every candidate of a template that has one (`Template.estimate`).
Writes OUT/gemm_fit.json after each batch and prints the fastest candidates per shape.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matmul import cuda_timed, operand_shapes, parse_shape, rel_error  # noqa: E402

SHAPES = "128x768x768,128x768x3072|128x3072x768,128x2304x768"
TEMPLATES = "matmul.cuda_tensor_core:2,matmul.cuda_wgmma:1,matmul.cuda_hopper_skinny:1,matmul.cuda_hopper_ws:1"


def candidates(task, attrs, m: int, target, spec: str) -> list:
    from hidet_framework.extension import plugin_host
    from hidet_framework.tuner.tuner import Candidate

    levels = dict((name, int(level)) for name, level in (s.split(":") for s in spec.split(",")))
    out = []
    for t in plugin_host().templates.templates_for("matmul", "cuda"):
        if t.name not in levels or (hasattr(t, "applies") and not t.applies(task, attrs)):
            continue
        for p in t.space(target, levels[t.name]):
            if p.get("auto") or p.get("pad") or p.get("raster") or p.get("block_m", 0) >= 2 * max(m, 64):
                continue
            if p.get("stages") == 2 and "block_m" in p:  # mma.sync with 2 stages: never near the best
                continue
            out.append(Candidate(t, p))
    return out


def graph_cold(launch_sets, repeat: int) -> float:
    """Seconds per run: every bound launch list of `launch_sets` (one per copy of B) once,
    captured into one torch CUDA graph, replayed."""
    import torch

    def run(stream):
        for launches in launch_sets:
            for launch, args in launches:
                launch(*args, stream=stream)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run(side.cuda_stream)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(torch.cuda.current_stream().cuda_stream)
    return cuda_timed(graph.replay, repeat) / len(launch_sets)


def run_batch(shapes: list[str], args, ct, rows: list) -> None:
    import torch

    from hidet_framework.schedule.template import build_scheduled
    from hidet_framework.tuner.tuner import TuneRequest, _build_all
    from hidet_plugin_cuda.memory import DeviceArray
    from hidet_plugin_matmul.operators import matmul_task

    items, per = [], []
    for text in shapes:
        batch, m, n, k = parse_shape(text)
        a_shape, b_shape = operand_shapes(batch, m, n, k)
        task, attrs = matmul_task(a_shape, b_shape, "float16")
        request = TuneRequest(task, attrs, "matmul", ct.target, [], 2, ct.build, lambda *_: [], build_scheduled)
        cands = candidates(task, attrs, m, ct.target, args.templates)
        per.append((text, task, attrs, a_shape, b_shape, len(items), cands))
        items += [(request, c) for c in cands]
    started = time.perf_counter()
    prepared, failures = _build_all(items, None)
    print(f"built {len(prepared)} of {len(items)} candidates of {shapes} in {time.perf_counter() - started:.1f} s",
          flush=True)
    l2 = int(ct.target.properties.get("l2_bytes", 50 << 20))
    for text, task, attrs, a_shape, b_shape, offset, cands in per:
        if time.perf_counter() > args.deadline:
            print(f"{text}: skipped (time)", flush=True)
            continue
        b_bytes = 2 * b_shape[-1] * b_shape[-2]
        copies = max(2, min(64, -(-2 * l2 // b_bytes)))
        a = torch.randn(a_shape, device="cuda", dtype=torch.float16)
        bs = [torch.randn(b_shape, device="cuda", dtype=torch.float16) for _ in range(copies)]
        c = torch.empty(a_shape[:-1] + (b_shape[-1],), device="cuda", dtype=torch.float16)
        ref = torch.matmul(a.double(), bs[0].double()).cpu().numpy()
        a_dev, c_dev = DeviceArray.from_dlpack(a), DeviceArray.from_dlpack(c)
        b_devs = [DeviceArray.from_dlpack(b) for b in bs]
        peer = graph_cold([[(lambda *_, stream=None, b=b: torch.matmul(a, b, out=c), ())] for b in bs],
                          args.repeat)
        row = {"shape": text, "cublas_cold_us": peer * 1e6, "candidates": len(cands), "failed": [], "all": []}
        rows.append(row)
        for j, cand in enumerate(cands):
            i = offset + j
            name, params = cand.template.name, dict(cand.params)
            if i not in prepared:
                continue
            try:
                compiled = ct.load(task, *prepared[i])
                ws = compiled.allocate_workspace()
                c.fill_(float("nan"))
                compiled.run([a_dev, b_devs[0]], [c_dev], ws)
                err = rel_error(c.double().cpu().numpy(), ref)
                sets = [compiled.bind([a_dev, b], [c_dev], ws) for b in b_devs]
                cold = graph_cold(sets, args.repeat)
                dev = statistics.median(compiled.device.time_launches(sets[0], warmup=1, repeat=args.repeat))
                ev = statistics.median(compiled.time([a_dev, b_devs[0]], [c_dev], warmup=1, repeat=args.repeat))
                model = None
                if hasattr(cand.template, "estimate"):
                    try:
                        model = cand.template.estimate(task, attrs, params, ct.target) * 1e6
                    except Exception:
                        model = None
                row["all"].append({"template": name, "params": params, "launches": len(sets[0]), "err": err,
                                   "cold_us": cold * 1e6, "dev_us": dev * 1e6, "ev_us": ev * 1e6,
                                   "model_us": model})
            except Exception as exc:
                row["failed"].append(f"{name} {params}: {type(exc).__name__}: {str(exc)[:200]}")
        row["failed"] += [e for k, e in failures if offset <= k < offset + len(cands)]
        row["all"].sort(key=lambda r: r["cold_us"])
        print(f"{text}: cuBLAS {peer * 1e6:.2f} us cold; {len(row['all'])} timed, {len(row['failed'])} failed",
              flush=True)
        for r in row["all"][:args.top]:
            print(f"  cold {r['cold_us']:6.2f}  dev {r['dev_us']:6.2f}  ev {r['ev_us']:6.2f}  model "
                  f"{r['model_us'] or float('nan'):6.2f}  err {r['err']:.1e}  {r['template'].split('.')[-1]} "
                  f"{r['params']}", flush=True)
        for e in row["failed"][:3]:
            print(f"  failed: {e}", flush=True)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "gemm_fit.json"), "w") as f:
                json.dump({"templates": args.templates, "rows": rows}, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=SHAPES, help="MxNxK list; '|' separates build batches")
    parser.add_argument("--templates", default=TEMPLATES, help="name:level list")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--max-seconds", type=float, default=1e9, help="start no new batch or shape after this")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.deadline = time.perf_counter() + args.max_seconds

    from hidet_framework.driver.targets import resolve_compile_target

    ct = resolve_compile_target("cuda")
    rows: list = []
    for batch in args.shapes.split("|"):
        if time.perf_counter() > args.deadline:
            print(f"batch {batch}: skipped (time)", flush=True)
            continue
        run_batch(batch.split(","), args, ct, rows)


if __name__ == "__main__":
    main()
