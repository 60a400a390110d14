"""Host and device time per call of compiled graphs called with torch CUDA tensors,
side by side with torch eager running the same ops, in one process.

    python bench/call_overhead.py [--calls 1000] [--out DIR]

Cases: relu on 1 float32 element; a 4-op float16 elementwise chain on 16M elements
(``relu(x * y + x) - y``, one fused kernel for us, four for torch); a 128x768x3072
MLP block in float16 (``relu(x @ w1 + b1) @ w2 + b2``). Ours in three variants:
``cuda_graph=True`` (one graph launch per call, pointers bound by kernel-node
parameter update: the default), ``"copy"`` (the graph stays bound to the arena;
inputs and outputs are copied through it) and ``False`` (plain launches).

Columns, all medians over two interleaved rounds (every variant of a case measured
once, then all again):
- host us: perf_counter_ns around each of 1,000 calls, the device synchronized every
  32 calls outside the timed region (so the launch queue never pushes back).
- cold: the same with a sync before every call (the GPU idle when the call starts).
- new ptrs: as host us, with three input sets in turn, so every call binds new input
  pointers (kernel-node parameter updates, or copies, every time).
- device us: CUDA events on the current stream around one call, queued behind a
  ~100 us spin kernel (torch.cuda._sleep) so the host's submission time is not in it.
- loop us: wall time of 1,000 back-to-back calls / 1,000 (then one sync).
- err: ||ours - ref|| / ||ref|| against float64 numpy (torch rows: torch's own).

Then where a relu call's host time goes (ours, graph=True): the call with the
launch stubbed out (Python binding + torch.empty of the output), a bare
cuGraphLaunch of its graph and a bare cuLaunchKernel of its kernel through ctypes, and
torch.empty alone. And a cpu row: the
numpy zero-copy path of a 1-element relu (cpu target), host us.
Prints the table last; with --out writes call_overhead.json there.
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


def host_times(fn, inputs, calls, sync, every=32):
    """Per-call host times in us; the device synchronized every `every` calls."""
    times = []
    for i in range(calls):
        args = inputs[i % len(inputs)]
        if i % every == 0:
            sync()
        start = time.perf_counter_ns()
        fn(*args)
        times.append((time.perf_counter_ns() - start) / 1e3)
    sync()
    return times


def host_us(fn, inputs, calls, sync, every=32):
    return statistics.median(host_times(fn, inputs, calls, sync, every))


def device_times(torch, fn, args, calls=200):
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(200_000)  # ~100 us: the call is queued before the GPU reaches it
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return times


def loop_us(torch, fn, args, calls):
    torch.cuda.synchronize()
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(*args)
    torch.cuda.synchronize()
    return [(time.perf_counter_ns() - start) / calls / 1e3]


def cases(hf, torch, rng):
    """(name, graph, torch eager function, input sets (numpy), float64 reference)."""
    x = hf.symbol((1,), "float32", name="x")
    yield ("relu 1 fp32", hf.trace(hf.ops.relu(x), inputs=[x]), torch.relu,
           [[rng.standard_normal(1).astype(np.float32)] for _ in range(3)], lambda a: np.maximum(a, 0))

    n = 16 * 1024 * 1024
    a, b = hf.symbol((n,), "float16", name="a"), hf.symbol((n,), "float16", name="b")
    chain = hf.ops.sub(hf.ops.relu(hf.ops.add(hf.ops.mul(a, b), a)), b)
    yield ("4-op fp16 chain 16M", hf.trace(chain, inputs=[a, b]), lambda p, q: torch.relu(p * q + p) - q,
           [[rng.standard_normal(n).astype(np.float16) for _ in range(2)] for _ in range(3)],
           lambda p, q: np.maximum(p * q + p, 0) - q)

    m, d, f = 128, 768, 3072
    w1 = (rng.standard_normal((d, f)) / np.sqrt(d)).astype(np.float16)
    b1 = rng.standard_normal(f).astype(np.float16)
    w2 = (rng.standard_normal((f, d)) / np.sqrt(f)).astype(np.float16)
    b2 = rng.standard_normal(d).astype(np.float16)
    xs = hf.symbol((m, d), "float16", name="x")
    h = hf.ops.relu(hf.ops.add(hf.ops.matmul(xs, hf.constant(w1)), hf.constant(b1)))
    mlp = hf.ops.add(hf.ops.matmul(h, hf.constant(w2)), hf.constant(b2))
    tw = [torch.from_numpy(v).cuda() for v in (w1, b1, w2, b2)]
    yield ("MLP 128x768x3072 fp16", hf.trace(mlp, inputs=[xs]),
           lambda t: torch.relu(t @ tw[0] + tw[1]) @ tw[2] + tw[3],
           [[rng.standard_normal((m, d)).astype(np.float16)] for _ in range(3)],
           lambda t: np.maximum(t @ w1.astype(np.float64) + b1, 0) @ w2.astype(np.float64) + b2)


def breakdown(torch, fn, args, calls, sync):
    """Rows: the call with its launch stubbed out, a bare cuGraphLaunch, torch.empty."""
    plan = fn._device_plan.launch
    lib, graph_exec = plan._lib, plan._exec
    plan._launch = lambda stream: None  # an instance attribute hides the method
    try:
        binding = host_us(fn, [args], calls, sync)
    finally:
        del plan._launch
    bare = host_us(lambda: lib.graph_launch(graph_exec, 0), [[]], calls, sync)
    func, gx, gy, gz, bx, by, bz, smem, params = plan._plain[0]
    kernel = host_us(lambda: lib.launch_kernel(func, gx, gy, gz, bx, by, bz, smem, 0, params, None), [[]], calls, sync)
    empty = host_us(lambda: torch.empty((1,), device="cuda"), [[]], calls, sync)
    name = "relu 1 fp32, parts"
    return [(name, "ours: call with the launch stubbed", binding, None, None, None, None, None),
            (name, "bare cuGraphLaunch (ctypes)", bare, None, None, None, None, None),
            (name, "bare cuLaunchKernel (ctypes)", kernel, None, None, None, None, None),
            (name, "torch.empty((1,))", empty, None, None, None, None, None)]


def rel_err(got, want):
    got = np.asarray(got, dtype=np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def cpu_row(hf, rng, calls):
    x = hf.symbol((1,), "float32", name="x")
    fn = hf.compile(hf.trace(hf.ops.relu(x), inputs=[x]), target="cpu")
    xv = rng.standard_normal(1).astype(np.float32)
    assert fn(xv)[0] == max(xv[0], 0)
    return host_us(fn, [[xv]], calls, lambda: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("HIDET_FRAMEWORK_CACHE", tempfile.mkdtemp(prefix="hf-bench-cache-"))
    import hidet_framework as hf

    rng = np.random.default_rng()
    rows = [("cpu: relu 1 fp32 (numpy)", "ours", cpu_row(hf, rng, args.calls), None, None, None, None, None)]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print(f"torch with CUDA not available here ({'no torch' if torch is None else 'no GPU'}): cpu row only")
    else:
        sync = torch.cuda.synchronize
        for name, graph, eager, sets, reference in cases(hf, torch, rng):
            inputs = [[torch.from_numpy(v).cuda() for v in s] for s in sets]
            want = reference(*[v.astype(np.float64) for v in sets[0]])
            started = time.perf_counter()
            variants = [(f"ours graph={mode!r}", hf.compile(graph, target="cuda", cuda_graph=mode))
                        for mode in (True, "copy", False)]
            print(f"{name}: compiled in {time.perf_counter() - started:.1f} s; "
                  f"launches per call {variants[0][1].num_launches}", flush=True)
            runs = variants + [("torch eager", eager)]
            samples = {label: [[] for _ in range(5)] for label, _ in runs}
            errors = {}
            for _ in range(2):  # two rounds, interleaved: drift hits every variant alike
                for label, fn in runs:
                    for _ in range(20):
                        fn(*inputs[0])
                    sync()
                    out = fn(*inputs[0])
                    out = out[0] if isinstance(out, (tuple, list)) else out
                    errors[label] = rel_err(out.float().cpu().numpy(), want)
                    for column, values in zip(samples[label], (
                            host_times(fn, inputs[:1], args.calls, sync),
                            host_times(fn, inputs[:1], args.calls // 2, sync, every=1),
                            host_times(fn, inputs, args.calls, sync), device_times(torch, fn, inputs[0]),
                            loop_us(torch, fn, inputs[0], args.calls))):
                        column.extend(values)
            for label, _ in runs:
                rows.append((name, label, *[statistics.median(c) for c in samples[label]], errors[label]))
                print("  ", rows[-1], flush=True)
            if name.startswith("relu"):
                rows += breakdown(torch, variants[0][1], inputs[0], args.calls, sync)
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    header = ("case", "variant", "host us", "cold", "new ptrs", "device us", "loop us", "err")
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for row in rows:
        lines.append(" | ".join(row[0:2]) + " | " + " | ".join(
            "—" if v is None else (f"{v:.1e}" if i == 5 else f"{v:.2f}") for i, v in enumerate(row[2:])))
    print("\n".join(lines))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "call_overhead.json"), "w") as f:
            json.dump({"header": header, "rows": rows, "calls": args.calls, "argv": sys.argv}, f, indent=1)


if __name__ == "__main__":
    main()
