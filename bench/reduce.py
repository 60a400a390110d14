"""Reductions, softmax and layer norm: our templates against a peer, side by side in one
process, interleaved, medians.

CPU (fp32, both sides on the same number of threads, 2 by default): softmax and layer
norm over 4096 x 1024 and 16384 x 768 against onnxruntime (one-node models, outputs
bound to preallocated buffers) and against ``numpy.copyto`` on the same bytes (the
bandwidth ceiling of one read and one write). Targets: ours >= 1.0x onnxruntime and
>= 70% of the copyto bandwidth.

CUDA: fp16 softmax and layer norm over 32768 x 4096 and 65536 x 768, fp32 sum and max
over the last and over the first axis of 8192 x 8192, against torch (eager) and a
device-to-device copy of the same bytes (``dst.copy_(src)``: the copy ceiling).
Target: ours >= 80% of the copy ceiling measured in the same run.

Bytes counted: x read once and y written once. Every row is checked against a
float64 (CPU: numpy; CUDA: torch in float32/float64) reference first.

    python bench/reduce.py --target cpu [--threads 2] [--repeat 15] [--space 0]
    python bench/reduce.py --target cuda [--repeat 50] [--space 1]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time

import numpy as np


def cpu_isa() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        text = ""
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Model name")), platform.processor())
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("Flags")), [])
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    if "amx_tile" in flags:
        isa += "+AMX"
    return f"{model}, {isa}"


def interleaved(fns: dict, repeat: int) -> dict:
    """Median seconds of each callable, the callables taking turns run by run."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


# ------------------------------------------------------------------ graphs

def build(op: str, shape: tuple, dtype: str):
    import hidet_framework as hf

    x = hf.symbol(shape, dtype)
    if op == "softmax":
        return hf.ops.softmax(x, -1), [x]
    if op == "layer_norm":
        s, b = hf.symbol(shape[-1:], dtype), hf.symbol(shape[-1:], dtype)
        return hf.ops.layer_norm(x, s, b), [x, s, b]
    kind, axis = op.split("@")
    return getattr(hf.ops, f"reduce_{kind}")(x, int(axis)), [x]


def reference(op: str, arrays: list) -> np.ndarray:
    e = [a.astype(np.float64) for a in arrays]
    x = e[0]
    if op == "softmax":
        z = np.exp(x - x.max(-1, keepdims=True))
        return z / z.sum(-1, keepdims=True)
    if op == "layer_norm":
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * e[1] + e[2]
    kind, axis = op.split("@")
    return {"sum": np.sum, "max": np.max}[kind](x, axis=int(axis))


# ------------------------------------------------------------------ cpu

def ort_session(op: str, shape: tuple, threads: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    n = shape[-1]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    if op == "softmax":
        node, inputs = helper.make_node("Softmax", ["x"], ["y"], axis=-1), [x]
    else:
        node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)
        inputs = [x, helper.make_tensor_value_info("s", TensorProto.FLOAT, [n]),
                  helper.make_tensor_value_info("b", TensorProto.FLOAT, [n])]
    model = helper.make_model(helper.make_graph([node], op, inputs, [y]), opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def bench_cpu(args) -> list:
    from hidet_framework.driver import compile_task

    rng = np.random.default_rng(0)
    rows = []
    for op in ("softmax", "layer_norm"):
        for shape in ((4096, 1024), (16384, 768)):
            y, inputs = build(op, shape, "float32")
            fn = compile_task(y.producer.task, "cpu", space=args.space, op_name=y.producer.name,
                              attributes=y.producer.attributes)
            arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
            out = np.full(shape, np.nan, np.float32)
            launches = fn.bind([fn.device.from_numpy(a) for a in arrays], [out], fn.allocate_workspace())

            def ours():
                for launch, launch_args in launches:
                    launch(*launch_args)

            ours()
            error = float(np.abs(out - reference(op, arrays)).max())
            sess = ort_session(op, shape, args.threads)
            binding = sess.io_binding()
            names = [i.name for i in sess.get_inputs()]
            for name, a in zip(names, arrays):
                binding.bind_cpu_input(name, a)
            peer_out = np.empty(shape, np.float32)
            binding.bind_output("y", "cpu", 0, np.float32, list(shape), peer_out.ctypes.data)
            src, dst = arrays[0], np.empty_like(arrays[0])
            t = interleaved({"ours": ours, "ort": lambda: sess.run_with_iobinding(binding),
                             "copy": lambda: np.copyto(dst, src)}, args.repeat)
            nbytes = 2 * arrays[0].nbytes
            rows.append({"op": op, "shape": shape, "ours_ms": t["ours"] * 1e3, "ort_ms": t["ort"] * 1e3,
                         "copy_ms": t["copy"] * 1e3, "vs_ort": t["ort"] / t["ours"], "of_copy": t["copy"] / t["ours"],
                         "ours_gbs": nbytes / t["ours"] / 1e9, "max_abs_error": error,
                         "template": fn.scheduled.source})
    return rows


# ------------------------------------------------------------------ cuda

def bench_cuda(args) -> list:
    import torch

    from hidet_framework.driver import compile_task
    from hidet_plugin_cuda.memory import DeviceArray

    def timed(fns: dict) -> dict:
        """Median seconds per call with CUDA events, the callables interleaved."""
        for f in fns.values():
            for _ in range(3):
                f()
        torch.cuda.synchronize()
        events = {k: [] for k in fns}
        for _ in range(args.repeat):
            for k, f in fns.items():
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                f()
                e.record()
                events[k].append((s, e))
        torch.cuda.synchronize()
        return {k: statistics.median(s.elapsed_time(e) / 1e3 for s, e in v) for k, v in events.items()}

    cases = [("softmax", (32768, 4096), "float16"), ("softmax", (65536, 768), "float16"),
             ("layer_norm", (32768, 4096), "float16"), ("layer_norm", (65536, 768), "float16"),
             ("sum@-1", (8192, 8192), "float32"), ("max@-1", (8192, 8192), "float32"),
             ("sum@0", (8192, 8192), "float32"), ("max@0", (8192, 8192), "float32")]
    rows = []
    for op, shape, dtype in cases:
        y, inputs = build(op, shape, dtype)
        started = time.perf_counter()
        fn = compile_task(y.producer.task, "cuda", space=args.space, op_name=y.producer.name,
                          attributes=y.producer.attributes)
        tuning = time.perf_counter() - started
        tdt = getattr(torch, dtype)
        xs = [torch.randn(t.shape, device="cuda", dtype=torch.float32).to(tdt) for t in inputs]
        out = torch.full(tuple(y.shape), float("nan"), device="cuda", dtype=tdt)
        launches = fn.bind([DeviceArray.from_dlpack(t) for t in xs], [DeviceArray.from_dlpack(out)],
                           fn.allocate_workspace())

        def ours():
            for launch, launch_args in launches:
                launch(*launch_args)

        ours()
        torch.cuda.synchronize()
        ref = reference(op, [t.float().cpu().numpy() for t in xs])
        error = float(np.abs(out.double().cpu().numpy() - ref).max())
        if op == "softmax":
            peer = lambda: torch.softmax(xs[0], -1)  # noqa: E731
        elif op == "layer_norm":
            peer = lambda: torch.nn.functional.layer_norm(xs[0], shape[-1:], xs[1], xs[2], 1e-5)  # noqa: E731
        else:
            kind, axis = op.split("@")
            peer = (lambda: torch.sum(xs[0], int(axis))) if kind == "sum" else (lambda: torch.amax(xs[0], int(axis)))
        src = xs[0]
        dst = torch.empty_like(src)
        t = timed({"ours": ours, "torch": peer, "copy": lambda: dst.copy_(src)})
        read = src.numel() * src.element_size()
        nbytes = read + out.numel() * out.element_size()
        rows.append({"op": op, "shape": shape, "dtype": dtype, "ours_us": t["ours"] * 1e6, "torch_us": t["torch"] * 1e6,
                     "ours_tbs": nbytes / t["ours"] / 1e12, "torch_tbs": nbytes / t["torch"] / 1e12,
                     "copy_tbs": 2 * read / t["copy"] / 1e12, "of_copy": (nbytes / t["ours"]) / (2 * read / t["copy"]),
                     "max_abs_error": error, "template": fn.scheduled.source, "tuning_s": tuning,
                     "params": getattr(fn.scheduled, "params", None)})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of both sides")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--space", type=int, default=None, help="tuning space (default: cpu 1, cuda 1)")
    args = parser.parse_args()
    args.space = 1 if args.space is None else args.space
    if args.target == "cpu":
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        args.repeat = args.repeat or 15
        print(f"CPU: {cpu_isa()}; {args.threads} threads each side; space {args.space}")
        rows = bench_cpu(args)
        print(f"{'op':11s} {'shape':>12s} {'ours ms':>8s} {'ort ms':>8s} {'copy ms':>8s} {'vs ort':>7s} "
              f"{'of copy':>8s} {'GB/s':>6s}  template")
        for r in rows:
            print(f"{r['op']:11s} {str(r['shape']):>12s} {r['ours_ms']:8.3f} {r['ort_ms']:8.3f} {r['copy_ms']:8.3f} "
                  f"{r['vs_ort']:6.2f}x {r['of_copy']:7.0%} {r['ours_gbs']:6.1f}  {r['template']} "
                  f"(err {r['max_abs_error']:.1e})")
        met = all(r["vs_ort"] >= 1.0 and r["of_copy"] >= 0.7 for r in rows)
    else:
        args.repeat = args.repeat or 50
        import torch

        print(f"CUDA: {torch.cuda.get_device_name()}; space {args.space}")
        rows = bench_cuda(args)
        print(f"{'op':11s} {'shape':>14s} {'dtype':8s} {'ours us':>9s} {'torch us':>9s} {'ours TB/s':>9s} "
              f"{'torch':>6s} {'copy':>6s} {'of copy':>8s}  template")
        for r in rows:
            print(f"{r['op']:11s} {str(r['shape']):>14s} {r['dtype']:8s} {r['ours_us']:9.1f} {r['torch_us']:9.1f} "
                  f"{r['ours_tbs']:9.2f} {r['torch_tbs']:6.2f} {r['copy_tbs']:6.2f} {r['of_copy']:7.0%}  "
                  f"{r['template']} (err {r['max_abs_error']:.1e})")
        met = all(r["of_copy"] >= 0.8 for r in rows)
    print("targets met" if met else "targets missed (see the table)")


if __name__ == "__main__":
    main()
