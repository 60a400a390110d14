"""CPU operators: ours beside numpy and onnxruntime, same process, interleaved.

    python bench/ops_cpu.py                  # every case, 2 threads, 9 rounds
    python bench/ops_cpu.py --only gelu,matmul --rounds 15 --threads 2

Each case compiles our graph (``hf.compile(..., target="cpu", space=0)``, constant
weights as in a model) and builds the peers: numpy (OpenBLAS) where numpy has the
operator, and an onnxruntime session of the same one-operator ONNX graph (the
initializers are the same weights). Every round runs each implementation once, in
turn (interleaved, so load from other processes hits all alike); the table shows the
median per implementation and ratio = peer median / ours (> 1: we are faster), and the
max relative error of ours and of onnxruntime against a float64 numpy reference.
Before each timed call the process sleeps ``--gap-ms`` (50 ms; not timed): OpenBLAS,
onnxruntime and our pool keep their threads spinning for a while after a call, and
back to back the next implementation would run against them (seen: our 2.4 ms GEMV
read 37-72 ms right after numpy and onnxruntime on the 2-core box).

``HIDET_FRAMEWORK_CPU_ISA=avx2`` (with ``OPENBLAS_CORETYPE=Haswell`` for the peer)
measures the AVX2 code path on an AVX-512 machine; the header then says so.

The header names the machine: model, ISA (AVX-512 / AVX2, AMX), thread count and the
load average, because on a shared machine only the ratios mean anything.
Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are set before numpy loads (our
kernels are OpenMP), onnxruntime gets ``intra_op_num_threads``.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time


from thread_env import threads_unless_imported  # noqa: E402  (bench/ is the script's folder)

THREADS = threads_unless_imported(sys.argv, __name__ == "__main__")  # keeps an importer's OMP_NUM_THREADS

import numpy as np  # noqa: E402  (after the thread variables)

CASES = ["gelu_erf", "gelu_tanh", "softmax", "softmax_h12_s128", "softmax_h12_s128_causal", "layer_norm",
         "conv_7x7s2_3_64_224", "conv_3x3_64_64_56", "conv_1x1_256_64_56", "conv_1x1_64_256_56",
         "conv_3x3s2_512_512_14",
         "matmul_1x4096x4096", "matmul_16x4096x4096", "matmul_64x768x3072", "matmul_square_1024"]


def machine_line() -> str:
    from hidet_plugin_cpu.target import detect_cpu_target

    t = detect_cpu_target()
    flags = set(t.get("flags", ()))
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE/NEON"
    extras = [f for f in ("avx512_bf16", "amx_tile", "amx_bf16", "fma") if f in flags]
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return (f"machine: {t.get('model', '?')} | ISA {isa} ({' '.join(extras)}) | {THREADS} threads "
            f"(of {os.cpu_count()} cpus) | load average {load}")


def erf64(v):
    return np.vectorize(math.erf, otypes=[np.float64])(v)


# ------------------------------------------------------------------ cases
# Each returns (inputs, ours: graph builder, numpy callable or None, onnx graph builder,
# float64 reference)

def _gelu(rng, approximate):
    import hidet_framework as hf
    n = 1 << 24
    a = rng.standard_normal(n).astype(np.float32) * 3

    def ours():
        x = hf.symbol((n,), "float32")
        return hf.trace(hf.ops.gelu(x, approximate=approximate), inputs=[x])

    def onnx_graph(h):
        return [h.make_node("Gelu", ["x"], ["y"], approximate=approximate)], [], [("x", (n,))], [("y", (n,))]

    x64 = a[:1 << 16].astype(np.float64)   # the reference on a prefix: erf in Python is slow
    if approximate == "tanh":
        ref = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        ref = 0.5 * x64 * (1 + erf64(x64 / math.sqrt(2)))
    return [a], ours, None, onnx_graph, (ref, 1 << 16)


def _conv(rng, cin, cout, size, kernel, stride):
    import hidet_framework as hf
    pad = kernel // 2
    a = rng.standard_normal((1, cin, size, size)).astype(np.float32)
    w = (rng.standard_normal((cout, cin, kernel, kernel)) / math.sqrt(cin * kernel * kernel)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)

    def ours():
        x = hf.symbol(a.shape, "float32")
        y = hf.ops.conv2d(x, hf.constant(w), hf.constant(b), stride=stride, padding=pad)
        return hf.trace(y, inputs=[x])

    def onnx_graph(h):
        out = (size + 2 * pad - kernel) // stride + 1
        node = h.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride, stride], pads=[pad] * 4,
                           kernel_shape=[kernel, kernel])
        return [node], [("w", w), ("b", b)], [("x", a.shape)], [("y", (1, cout, out, out))]

    return [a], ours, None, onnx_graph, None


def _matmul(rng, m, k, n, constant_b=True):
    import hidet_framework as hf
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)

    def ours():
        x = hf.symbol((m, k), "float32")
        if constant_b:
            return hf.trace(hf.ops.matmul(x, hf.constant(w)), inputs=[x])
        y = hf.symbol((k, n), "float32")
        return hf.trace(hf.ops.matmul(x, y), inputs=[x, y])

    def onnx_graph(h):
        inits = [("w", w)] if constant_b else []
        inputs = [("x", (m, k))] + ([] if constant_b else [("w", (k, n))])
        return [h.make_node("MatMul", ["x", "w"], ["y"])], inits, inputs, [("y", (m, n))]

    inputs = [a] if constant_b else [a, w]
    ref = a.astype(np.float64) @ w.astype(np.float64)
    return inputs, ours, (lambda *xs: xs[0] @ (w if constant_b else xs[1])), onnx_graph, (ref, None)


def _softmax(rng, shape=(8 * 12 * 128, 128), causal=False):
    """BERT-base attention scores at sequence 128 (batch 8) by default; the models' own
    shape is 12 heads x 128 x 128 at batch 1, GPT-2's causally masked with -inf."""
    import hidet_framework as hf
    a = rng.standard_normal(shape).astype(np.float32) * 4
    if causal:
        a = np.where(np.triu(np.ones(shape[-2:], bool), 1), np.float32(-np.inf), a)

    def ours():
        x = hf.symbol(shape, "float32")
        return hf.trace(hf.ops.softmax(x, axis=-1), inputs=[x])

    def onnx_graph(h):
        return [h.make_node("Softmax", ["x"], ["y"], axis=-1)], [], [("x", shape)], [("y", shape)]

    e = np.exp(a.astype(np.float64) - a.max(axis=-1, keepdims=True))
    return [a], ours, None, onnx_graph, (e / e.sum(axis=-1, keepdims=True), None)


def _layer_norm(rng):
    import hidet_framework as hf
    shape = (8 * 128, 768)         # BERT-base hidden states at sequence 128 (batch 8)
    a = rng.standard_normal(shape).astype(np.float32)
    gamma = rng.standard_normal(shape[-1]).astype(np.float32)
    beta = rng.standard_normal(shape[-1]).astype(np.float32)

    def ours():
        x = hf.symbol(shape, "float32")
        return hf.trace(hf.ops.layer_norm(x, hf.constant(gamma), hf.constant(beta), axis=-1, epsilon=1e-5),
                        inputs=[x])

    def onnx_graph(h):
        node = h.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)
        return [node], [("g", gamma), ("b", beta)], [("x", shape)], [("y", shape)]

    x64 = a.astype(np.float64)
    mean, var = x64.mean(axis=-1, keepdims=True), x64.var(axis=-1, keepdims=True)
    return [a], ours, None, onnx_graph, ((x64 - mean) / np.sqrt(var + 1e-5) * gamma + beta, None)


def build_case(name, rng):
    if name == "softmax":
        return _softmax(rng)
    if name.startswith("softmax_h12_s128"):
        return _softmax(rng, (1, 12, 128, 128), causal=name.endswith("causal"))
    if name == "layer_norm":
        return _layer_norm(rng)
    if name == "gelu_erf":
        return _gelu(rng, "none")
    if name == "gelu_tanh":
        return _gelu(rng, "tanh")
    if name.startswith("conv_"):
        _, geometry, cin, cout, size = name.split("_")
        kernel = int(geometry[0])
        stride = 2 if geometry.endswith("s2") else 1
        return _conv(rng, int(cin), int(cout), int(size), kernel, stride)
    if name == "matmul_square_1024":
        return _matmul(rng, 1024, 1024, 1024, constant_b=False)
    if name.startswith("matmul_"):
        m, k, n = (int(v) for v in name.split("_")[1].split("x"))
        return _matmul(rng, m, k, n)
    return None


def onnx_session(onnx_graph, threads):
    try:
        import onnx
        import onnxruntime as ort
        from onnx import helper, numpy_helper
    except ImportError:
        return None
    nodes, inits, inputs, outputs = onnx_graph(helper)
    f32 = onnx.TensorProto.FLOAT
    graph = helper.make_graph(nodes, "bench", [helper.make_tensor_value_info(n, f32, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, f32, s) for n, s in outputs],
                              [numpy_helper.from_array(v, n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [n for n, _ in inputs]
    return lambda *xs: session.run(None, dict(zip(names, xs)))[0]


def rel_error(got, ref):
    if ref is None:
        return None
    want, prefix = ref
    got = np.asarray(got, np.float64).reshape(-1)[:prefix] if prefix else np.asarray(got, np.float64)
    want = want.reshape(got.shape)
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def run_case(name, rounds, rng, gap_s=0.0):
    import hidet_framework as hf
    op = "softmax" if name.startswith("softmax") else name
    if op in ("softmax", "layer_norm") and not hasattr(hf.ops, op):
        return {"name": name, "note": f"skipped: no '{op}' operator registered (the reduce plugin has not landed)"}
    inputs, ours_graph, numpy_fn, onnx_graph, ref = build_case(name, rng)
    start = time.perf_counter()
    fn = hf.compile(ours_graph(), target="cpu", space=0)
    compile_s = time.perf_counter() - start
    impls = {"ours": lambda: fn(*inputs)}
    if numpy_fn is not None:
        impls["numpy"] = lambda: numpy_fn(*inputs)
    session = onnx_session(onnx_graph, THREADS)
    if session is not None:
        impls["onnxruntime"] = lambda: session(*inputs)
    errors = {k: rel_error(impl(), ref) for k, impl in impls.items()}  # also the warm-up
    if ref is None and "onnxruntime" in impls:    # no float64 reference here: compare with onnxruntime
        errors = {"ours": float(np.max(np.abs(impls["ours"]() - impls["onnxruntime"]()))
                                / max(float(np.max(np.abs(impls["onnxruntime"]()))), 1e-30))}
    times = {k: [] for k in impls}
    for _ in range(rounds):
        for k, impl in impls.items():
            if gap_s:
                time.sleep(gap_s)  # let the previous implementation's spinning threads go idle
            t0 = time.perf_counter()
            impl()
            times[k].append(time.perf_counter() - t0)
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {"name": name, "medians": medians, "errors": errors, "compile_s": compile_s}


def call_overhead(calls: int = 2000) -> str:
    """What a compiled graph's call adds to its kernels: a 1-element relu graph, median
    over `calls` calls of ``fn(x)`` minus the median of its bound launches called
    directly (the kernels alone), beside numpy's ``np.maximum`` on the same array."""
    import hidet_framework as hf
    x = hf.symbol((1,), "float32")
    fn = hf.compile(hf.trace(hf.ops.relu(x), inputs=[x]), target="cpu", space=0)
    a = np.array([-1.5], np.float32)
    launches = fn._launches  # the bound kernels (private: this bench measures around them)

    def kernels():
        for f, args in launches:
            f(*args)

    def median_us(op):
        times = []
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            op()
            times.append(time.perf_counter_ns() - t0)
        return statistics.median(times) / 1e3

    rows = {}
    for _ in range(3):  # interleaved
        for key, op in (("call", lambda: fn(a)), ("kernels", kernels), ("numpy", lambda: np.maximum(a, 0))):
            rows.setdefault(key, []).append(median_us(op))
    call, kern, ref = (statistics.median(rows[k]) for k in ("call", "kernels", "numpy"))
    return (f"call overhead (1-element relu graph, median of {calls} calls x 3): fn(x) {call:.2f} us, "
            f"kernels alone {kern:.2f} us, added {call - kern:.2f} us (target <= 5 us); np.maximum {ref:.2f} us")


def fmt_ms(v):
    return "—" if v is None else f"{v * 1e3:.3f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated name prefixes (gelu,conv,matmul...)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gap-ms", type=float, default=50.0,
                        help="idle time before each timed call (not timed): the previous implementation's "
                             "pool threads (OpenBLAS, onnxruntime, ours) spin after a call and would otherwise "
                             "take the cores from the next one; 0 to time back to back")
    args = parser.parse_args()
    wanted = [c for c in CASES if not args.only or any(c.startswith(p) for p in args.only.split(","))]
    rng = np.random.default_rng(0)
    print(machine_line())
    print(f"median of {args.rounds} interleaved rounds, {args.gap_ms:g} ms idle before each timed call; "
          f"ratio = peer / ours (> 1: ours faster)\n")
    print("| case | ours ms | numpy ms | onnxruntime ms | numpy/ours | ort/ours | ours err | compile s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in wanted:
        row = run_case(name, args.rounds, rng, args.gap_ms / 1e3)
        if "note" in row:
            print(f"| {name} | {row['note']} |||||||")
            continue
        med, err = row["medians"], row["errors"]
        ours = med["ours"]
        ratio = lambda peer: "—" if peer not in med else f"{med[peer] / ours:.2f}x"  # noqa: E731
        e = err.get("ours")
        print(f"| {name} | {fmt_ms(ours)} | {fmt_ms(med.get('numpy'))} | {fmt_ms(med.get('onnxruntime'))} | "
              f"{ratio('numpy')} | {ratio('onnxruntime')} | {'—' if e is None else f'{e:.1e}'} | "
              f"{row['compile_s']:.1f} |", flush=True)
    if not args.only or "overhead" in args.only:
        print("\n" + call_overhead())
    print("\n" + machine_line())


if __name__ == "__main__":
    main()
