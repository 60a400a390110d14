"""Every candidate of chosen CUDA matmul templates on chosen shapes, with the driver's own
builds (the tuner's parallel build and loader), next to cuBLAS in the same process:
what the tuner chose among, with every build or run failure printed, not hidden.

    python bench/matmul_sweep.py --space 1 --dtypes float32,float16,bfloat16 --out OUT
    python bench/matmul_sweep.py --templates matmul.cuda_gemv --shapes 1x4096x11008
    python bench/matmul_sweep.py --templates matmul.cuda_hopper_ws --params '[{}, {"epilogue": 0}]'

Each candidate's time is its kernel time by CUDA graph replay (`matmul.cuda_graph_timed`:
no host launch cost, which for 10-50 us kernels is as large as the kernel); the fastest
is also timed with events as `bench/matmul.py` times the tuner's winner. Rows: the
fastest candidate of the templates against cuBLAS (torch.matmul, TF32 off), both by
graph replay; every candidate's figure goes to OUT/matmul_sweep.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matmul import SHORT_M, cuda_graph_timed, cuda_timed, operand_shapes, parse_shape, rel_error  # noqa: E402

SHORT_M_TEMPLATES = "matmul.cuda_gemv,matmul.cuda_simt_splitk,matmul.cuda_hopper_skinny"


def sweep(shape_text: str, dtype: str, args) -> dict:
    import torch

    from hidet_framework.driver.targets import resolve_compile_target
    from hidet_framework.extension import plugin_host
    from hidet_framework.schedule.template import build_scheduled
    from hidet_framework.tuner.tuner import Candidate, TuneRequest, _build_all  # the tuner's own build pool
    from hidet_plugin_cuda.memory import DeviceArray
    from hidet_plugin_matmul.operators import matmul_task

    torch.backends.cuda.matmul.allow_tf32 = False
    ct = resolve_compile_target("cuda")
    batch, m, n, k = parse_shape(shape_text)
    a_shape, b_shape = operand_shapes(batch, m, n, k)
    task, attrs = matmul_task(a_shape, b_shape, dtype)
    names = args.templates.split(",")
    chosen = json.loads(args.params) if args.params else None  # a list, or {template: list}

    def params_of(t):
        if chosen is None:
            return t.space(ct.target, args.space)
        return chosen.get(t.name, []) if isinstance(chosen, dict) else chosen

    cands = [Candidate(t, p) for t in plugin_host().templates.templates_for("matmul", "cuda")
             if t.name in names and t.applies(task, attrs) for p in params_of(t)]
    started = time.perf_counter()
    request = TuneRequest(task, attrs, "matmul", ct.target, [], args.space, ct.build, lambda *_: [],
                          build_scheduled)
    prepared, failures = _build_all([(request, c) for c in cands], None)
    build_s = time.perf_counter() - started
    tdt = getattr(torch, dtype)
    a, b = torch.randn(a_shape, device="cuda", dtype=tdt), torch.randn(b_shape, device="cuda", dtype=tdt)
    c = torch.empty(((batch,) if batch else ()) + (m, n), device="cuda", dtype=tdt)
    ref = torch.matmul(a.double(), b.double()).cpu().numpy()
    a_dev, b_dev, c_dev = (DeviceArray.from_dlpack(x) for x in (a, b, c))
    results, errors = [], [f"build: {e}" for _, e in failures]
    for i in sorted(prepared):
        template, params = cands[i].template, cands[i].params
        try:
            compiled = ct.load(task, *prepared[i])
            launches = compiled.bind([a_dev, b_dev], [c_dev], compiled.allocate_workspace())

            def run(stream=None, launches=launches) -> None:
                for launch, launch_args in launches:
                    launch(*launch_args, stream=stream)

            c.fill_(float("nan"))
            run()
            err = rel_error(c.double().cpu().numpy(), ref)
            results.append({"template": template.name, "params": dict(params), "launches": len(launches),
                            "graph_s": cuda_graph_timed(run, args.repeat), "max_rel_error": err, "run": run})
        except Exception as exc:
            errors.append(f"{template.name} {dict(params)}: {type(exc).__name__}: {str(exc)[:300]}")
    peer_graph = cuda_graph_timed(lambda stream: torch.matmul(a, b), args.repeat)
    peer = cuda_timed(lambda: torch.matmul(a, b), args.repeat)
    results.sort(key=lambda r: r["graph_s"])
    for e in errors[:3]:
        print(f"  {shape_text} {dtype}: {e}", file=sys.stderr)
    for r in results[:None if args.params else 4]:  # explicit candidates: every one
        print(f"  {shape_text} {dtype}: {r['graph_s'] * 1e6:8.1f} us  x{peer_graph / r['graph_s']:.2f}  "
              f"{r['template']} {r['params']}", file=sys.stderr, flush=True)
    if not results:
        return {"shape": shape_text, "dtype": dtype, "candidates": len(cands), "failed": len(errors),
                "errors": errors, "all": []}
    best = results[0]
    events = cuda_timed(best["run"], args.repeat)
    for r in results:
        del r["run"]
    return {"shape": shape_text, "dtype": dtype, "ours_graph_s": best["graph_s"], "peer_graph_s": peer_graph,
            "ratio_graph": peer_graph / best["graph_s"], "ours_events_s": events, "peer_events_s": peer,
            "ratio_events": peer / events, "max_rel_error": best["max_rel_error"], "template": best["template"],
            "params": best["params"], "candidates": len(cands), "built_s": build_s, "failed": len(errors),
            "errors": errors, "all": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHORT_M))
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--templates", default=SHORT_M_TEMPLATES)
    parser.add_argument("--space", type=int, default=1, choices=(0, 1, 2))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", default=None)
    parser.add_argument("--params", default=None,
                        help="JSON: a list of parameter dicts to time instead of the space, or "
                             "{template name: list}")
    args = parser.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        for dtype in args.dtypes.split(","):
            rows.append(sweep(shape, dtype, args))
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, "matmul_sweep.json"), "w") as f:
                    json.dump({"space": args.space, "templates": args.templates, "rows": rows}, f, indent=1)
    print("fastest candidate of the templates vs cuBLAS; g: CUDA graph replay (kernel time), ev: events as "
          "bench/matmul.py (launch cost included); ratio = cuBLAS / ours")
    print(f"{'shape':>14} {'dtype':>8} {'ours g us':>9} {'cuBLAS g':>8} {'ratio g':>7} {'ours ev':>8} "
          f"{'cuBLAS ev':>9} {'ratio ev':>8} {'rel err':>8} {'cands':>5} {'fail':>4}  winner")
    for r in rows:
        if "ratio_graph" not in r:
            print(f"{r['shape']:>14} {r['dtype']:>8}  no candidate ran: {r['errors'][:1]}")
            continue
        print(f"{r['shape']:>14} {r['dtype']:>8} {r['ours_graph_s'] * 1e6:9.1f} {r['peer_graph_s'] * 1e6:8.1f} "
              f"{r['ratio_graph']:7.2f} {r['ours_events_s'] * 1e6:8.1f} {r['peer_events_s'] * 1e6:9.1f} "
              f"{r['ratio_events']:8.2f} {r['max_rel_error']:8.1e} {r['candidates']:>5} {r['failed']:>4}  "
              f"{r['template'].split('.')[-1]} {r['params']}")


if __name__ == "__main__":
    main()
