"""bench/models.py --target cuda: the five models in half precision on the GPU, ours
against torch eager, torch.compile (Inductor, default mode) and torch.compile
(mode="reduce-overhead": Inductor with CUDA graphs), in one process on the same inputs.

- Ours: ``hf.load`` (the ONNX frontend, float32) then ``hf.compile(graph,
  target="cuda", space=S, dtype="float16")``: the dtype graph pass converts weights
  and activations. Called with torch CUDA tensors (torch out, no copies, one CUDA
  graph replay per call: the call path of docs/call_path.md).
- Torch: `bench/onnx_torch.py` rebuilds each model from the same ONNX weights (a
  module that evaluates the graph node by node with torch ops; onnx2torch is not
  installed on the GPU machine), converted with ``.to_half()``; TF32 off.
- Accuracy: error = max |out - ref| / max |ref| over all outputs (the metric of the
  cpu table), ref = the torch module in float32 on the GPU (TF32 off). Printed for
  ours (fp16) and for torch eager fp16, for scale; ``--ort-check`` also compares the
  float32 torch module with onnxruntime (a check of the evaluator itself).
- Time: CUDA events around every call, warm-up first, calls of the four interleaved
  in rounds, medians. Launches per call: ours counted by the compiled graph; torch's
  kernels per call read by torch.profiler (CUPTI), which also gives our per-kernel
  profile (the top kernels by GPU time).
- Batch 16: the ONNX files fix batch 1 in their inputs and Reshape constants; the
  bench writes a batch-N copy: input and output dimension 0 set to N; every constant
  Reshape shape resolved against the batch-1 shapes (onnx shape inference: 0 and -1
  made explicit) and its leading extent replaced by -1, which then holds the batch,
  alone or folded with the heads ([1, 128, -1, 64] -> [-1, 128, 12, 64], [-1, 128, 64]
  -> [-1, 128, 64] with 12 x N rows, GPT-2's [128, 768] -> [-1, 768]). Checked here
  against onnxruntime, entry by entry, against the batch-1 model.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

def batched_copy(path: str, batch: int, out: str) -> str:
    """A copy of the ONNX file at `path` at batch `batch` (see the module docstring)."""
    import onnx
    from onnx import numpy_helper, shape_inference

    if batch == 1:
        return path
    model = onnx.load(path)
    known = shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(known.graph.value_info) + list(known.graph.input)}
    for i in list(model.graph.input) + list(model.graph.output):
        i.type.tensor_type.shape.dim[0].dim_value = batch
    del model.graph.value_info[:]  # shapes recorded for batch 1
    consts = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "Reshape" or node.input[1] not in consts:
            continue
        shape = numpy_helper.to_array(consts[node.input[1]]).tolist()
        source = shapes.get(node.input[0])
        if not shape or not source or not all(source):
            continue
        shape = [source[k] if s == 0 else s for k, s in enumerate(shape)]  # allowzero=0
        if -1 in shape:  # resolve it from the batch-1 element count
            rest = int(np.prod([s for s in shape if s != -1]))
            shape[shape.index(-1)] = int(np.prod(source)) // rest
        shape[0] = -1  # the leading extent holds the batch (alone, or folded with heads)
        consts[node.input[1]].CopyFrom(numpy_helper.from_array(np.array(shape, np.int64), node.input[1]))
    onnx.save(model, out)
    return out


def _inputs(model: Any, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    consts = {t.name for t in model.graph.initializer}
    arrays = []
    for i in model.graph.input:
        if i.name in consts:
            continue
        shape = [d.dim_value or batch for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == 7:
            arrays.append(rng.integers(0, 1000, shape).astype(np.int64))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays


def _error(outs: Any, refs: Any) -> float:
    worst = 0.0
    for o, r in zip(outs, refs):
        o = np.asarray(o, dtype=np.float64)
        r = np.asarray(r, dtype=np.float64)
        worst = max(worst, float(np.max(np.abs(o - r)) / max(float(np.max(np.abs(r))), 1e-30)))
    return worst


def _numpy(t: Any) -> np.ndarray:
    import torch

    if isinstance(t, torch.Tensor):
        return t.detach().float().cpu().numpy()
    return np.asarray(t)


def _time_interleaved(impls: dict, rounds: int, calls: int) -> dict[str, float]:
    """Median milliseconds per call of each impl, CUDA events around every call."""
    import torch

    samples: dict[str, list] = {k: [] for k in impls}
    for _ in range(rounds):
        for name, f in impls.items():
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(calls)]
            for start, end in events:
                start.record()
                f()
                end.record()
            torch.cuda.synchronize()
            samples[name] += [s.elapsed_time(e) for s, e in events]
    return {k: statistics.median(v) for k, v in samples.items()}


def _kernels(f: Any, top: int = 0) -> tuple[int, list]:
    """(kernels per call, [(name, microseconds, count)] of the `top` costliest)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        f()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if t and "memcpy" not in e.key.lower() and "memset" not in e.key.lower():
            rows.append((e.key, float(t), int(e.count)))
    rows.sort(key=lambda r: -r[1])
    return sum(r[2] for r in rows), [(n[:70], round(t, 1), c) for n, t, c in rows[:top]]


def bench_model_cuda(path: str, batch: int, args: Any, started: float) -> dict:
    import onnx
    import torch

    import hidet_framework as hf
    from onnx_torch import OnnxModule

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    row: dict = {"model": os.path.basename(path)[:-5].replace(f"_b{batch}", ""), "batch": batch}
    model = onnx.load(path)
    arrays = _inputs(model, batch, np.random.default_rng(0))
    t32 = [torch.from_numpy(a).cuda() for a in arrays]
    t16 = [t.half() if t.is_floating_point() else t for t in t32]
    with torch.no_grad():
        ref_module = OnnxModule(model).cuda().eval()
        ref = [_numpy(o) for o in ref_module(*t32)]
        del ref_module
        mod16 = OnnxModule(model).to_half().cuda().eval()
        row["torch16_err"] = _error([_numpy(o) for o in mod16(*t16)], ref)
    if args.ort_check:
        import onnxruntime as ort

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        row["torch32_vs_ort"] = _error(ref, session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays)}))
    try:
        t0 = time.perf_counter()
        graph = hf.load(path)
        t1 = time.perf_counter()
        fn = hf.compile(graph, target="cuda", space=args.space, dtype="float16")
        row.update(import_s=t1 - t0, compile_s=time.perf_counter() - t1, launches=fn.num_launches)
        row["compile_stats"] = {k: (round(v, 1) if isinstance(v, float) else v)
                                for k, v in fn.pass_stats.get("compile_model_tasks", {}).items()}
        ours16 = [a.astype(np.float16) if a.dtype == np.float32 else a for a in arrays]
        outs = fn(*ours16)
        row["ours_err"] = _error(outs if isinstance(outs, tuple) else [outs], ref)
    except Exception as exc:  # a model that does not import or compile is a result
        row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        return row
    impls: dict[str, Any] = {"ours": lambda: fn(*t16)}  # torch in, torch out: zero copy, CUDA graph
    with torch.no_grad():
        impls["eager"] = lambda: mod16(*t16)
        if time.perf_counter() - started < args.budget_s:
            # every model's module shares one `forward` code object, and dynamo keeps at most
            # `recompile_limit` (8) compiled versions of it: past that it silently runs eager,
            # which made the fifth model's torch.compile figures eager ones. Start each model clean.
            torch._dynamo.reset()
            # reduce-overhead (the target's peer) first: the default mode may not fit the budget
            for mode, label in (("reduce-overhead", "inductor_cg"), (None, "inductor")):
                if label not in args.peers.split(","):
                    continue
                if label == "inductor" and time.perf_counter() - started >= args.budget_s:
                    row["skipped"] = "torch.compile (default mode) skipped: the bench's time budget was spent"
                    break
                compiled = torch.compile(mod16, mode=mode) if mode else torch.compile(mod16)
                t0 = time.perf_counter()
                for _ in range(3):  # compile, then the CUDA graph's recording
                    compiled(*t16)
                torch.cuda.synchronize()
                row[f"{label}_compile_s"] = time.perf_counter() - t0
                impls[label] = (lambda c: (lambda: c(*t16)))(compiled)
        else:
            row["skipped"] = f"torch.compile skipped: the bench's time budget ({args.budget_s:.0f} s) was spent"
        impls = {"ours": impls["ours"], "eager": impls["eager"], **{k: v for k, v in impls.items()
                                                                    if k not in ("ours", "eager")}}
        for f in impls.values():
            f()
        times = _time_interleaved(impls, args.rounds, args.calls)
        row.update({f"{k}_ms": v for k, v in times.items()})
        row["ours_kernels"], row["ours_top"] = _kernels(impls["ours"], top=args.top)
        if "inductor_cg" in impls:
            row["inductor_cg_kernels"] = _kernels(impls["inductor_cg"])[0]
        row["eager_kernels"] = _kernels(impls["eager"])[0]
    for peer in ("eager", "inductor", "inductor_cg"):
        if f"{peer}_ms" in row:
            row[f"ratio_{peer}"] = row[f"{peer}_ms"] / row["ours_ms"]
    return row


def print_row_cuda(row: dict) -> None:
    head = f"{row['model']:<15} b{row['batch']:<3}"
    if "error" in row:
        print(f"{head} FAILED: {row['error']}", flush=True)
        return
    peers = "  ".join(f"{p} {row[p + '_ms']:.3f} ms (x{row['ratio_' + p]:.2f})"
                      for p in ("eager", "inductor", "inductor_cg") if p + "_ms" in row)
    print(f"{head} ours {row['ours_ms']:.3f} ms  {peers}  | err ours {row['ours_err']:.1e} torch16 "
          f"{row['torch16_err']:.1e}  | launches {row['launches']} (kernels seen {row['ours_kernels']}; "
          f"torch eager {row.get('eager_kernels')}, reduce-overhead {row.get('inductor_cg_kernels', '-')})  | compile "
          f"ours {row['compile_s']:.1f} s {row.get('compile_stats', '')}, torch.compile "
          + ", ".join(f"{p} {row[p + '_compile_s']:.1f} s" for p in ("inductor_cg", "inductor")
                      if p + "_compile_s" in row), flush=True)
    if "torch32_vs_ort" in row:
        print(f"{'':20}torch fp32 (bench/onnx_torch.py) vs onnxruntime: {row['torch32_vs_ort']:.1e}", flush=True)
    for name, us, count in row.get("ours_top", []):
        print(f"{'':20}{us:9.1f} us  x{count:<3} {name}", flush=True)
    if "skipped" in row:
        print(f"{'':20}{row['skipped']}", flush=True)
