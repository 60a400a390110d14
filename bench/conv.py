"""ResNet-50's convolution shapes: ours against onnxruntime (cpu) or cuDNN (cuda).

    python bench/conv.py --target cpu [--batch 1,8] [--only 3x3,1x1] [--rounds 9] [--threads 2] [--set depthwise|mobilenet]
    python bench/conv.py --target cuda [--batch 1,8] [--dtypes float16,float32] [--repeat 50] [--warm 16]

Every shape is one conv2d with constant weights and bias (as in a model), compiled
through the public path (``hf.compile(hf.trace(...), target=..., space=...)``).

cpu: the peer is onnxruntime running a one-node ONNX ``Conv`` model of the same
weights (``intra_op_num_threads`` = ``--threads``; ours gets the same number through
OMP_NUM_THREADS, set before numpy loads), in this process; every round runs ours
then onnxruntime on the same input (interleaved, so load from other processes hits
both alike); medians; ratio = onnxruntime time / ours (> 1: ours faster); "of
mins" is the ratio of the fastest rounds (what each side reaches when the machine
lets it). Our time is a whole call, ``fn(x)`` (a fresh output array each call, as onnxruntime returns one).

cuda: the peer is ``torch.nn.functional.conv2d`` (cuDNN, ``benchmark=True`` so it
picks its best algorithm, TF32 off so float32 is float32) on the same device
tensors; ours is the public call ``fn(x)`` with a torch CUDA tensor (bound where it
lies, a fresh torch output, on the current stream). Each call is timed with CUDA
events recorded right around it, after a ~100 us spin kernel (``torch.cuda._sleep``)
so that the GPU is still busy while the host queues the call: the events measure the
device time of the call's kernels, not the host's submission (both sides alike);
interleaved, medians; ratio = cuDNN time / ours. torch is imported only for
``--target cuda``.

Idle threads: by default neither side's threads spin while waiting for work (ours:
the CPU thread pool spins only briefly, HIDET_FRAMEWORK_CPU_SPIN_US, and
OMP_WAIT_POLICY=passive covers OpenMP-built kernels; onnxruntime:
``session.intra_op.allow_spinning=0``): on a shared machine the spinning threads of one side steal the CPUs the
other side runs on next, and each side's measurement then depends on who ran before
it (measured: our 1x1 256->64 at 56x56 took 10.5 ms right after a spinning
onnxruntime run and 1.35 ms after a sleeping one, onnxruntime 1.34 ms). ``--spin``
keeps both libraries' defaults (threads spin).

``--clock cpu`` (cpu, with ``--threads 1`` only: both sides then run on the calling
thread) times each call with the thread's CPU clock (``time.thread_time``), which does
not count the time the thread waits for a core: on a loaded, shared machine the figure
that stays put (the kernels' quality; the 2-thread medians there are decided by the
scheduler). The default is the wall clock.

"cores" (cpu): per call, the process's CPU time over the call's wall time, median:
about ``--threads`` where a side computed on all its threads, 1 where it ran on one
(the other CPU taken by another process). The CPU time is read after 2 ms of idling
(not timed): Linux accounts a thread's CPU time when it stops running or at a tick, so
read at once, a worker's share of a 1-2 ms call landed in the next call's window (ours
read 1.0 at 184 GFLOP/s, above one core's peak). A 2-thread ratio is a comparison of the
kernels only where both sides show 2. numpy (the float64 reference) runs one BLAS
thread: OpenBLAS's worker busy-waits for 0.06-0.1 s after a call, which held a CPU
through the timed rounds that follow each shape's reference (before session 9).

Errors are max |ours - ref| / max |ref| against a float64 reference (numpy on cpu,
torch float64 on cuda). The header names the CPU model and ISA, the thread count and
the load average (the machine may be shared: only the side-by-side ratios mean much).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


from thread_env import threads_from_argv  # noqa: E402  (bench/ is the script's folder)

THREADS, SPIN = threads_from_argv(sys.argv), "--spin" in sys.argv
# numpy computes only the float64 reference here (it is no peer in this bench): one BLAS
# thread. With OPENBLAS_NUM_THREADS = --threads, OpenBLAS's worker busy-waits for work
# after each call: measured 0.06-0.1 s of CPU in the 0.1-0.5 s after one 512x512 matmul.
# Each shape's reference is computed right before its timed rounds (about 40 ms of
# calls at 2 threads), so that spinner held one of the CPUs through them.
for _blas_var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_blas_var] = "1"
if not SPIN:  # read by libgomp when the first kernel library loads
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402  (after the thread variables)

# (name, in channels, out channels, input size, kernel, stride) of ResNet-50 v1.5 at
# 224x224 (stride on the 3x3 of a downsampling bottleneck), each distinct shape once.
SHAPES = [
    ("7x7s2_3_64_224", 3, 64, 224, 7, 2),          # stem
    ("1x1_64_64_56", 64, 64, 56, 1, 1),            # layer1 reduction (first block)
    ("3x3_64_64_56", 64, 64, 56, 3, 1),
    ("1x1_64_256_56", 64, 256, 56, 1, 1),          # layer1 expansion (and its downsample)
    ("1x1_256_64_56", 256, 64, 56, 1, 1),          # layer1 reduction
    ("1x1_256_128_56", 256, 128, 56, 1, 1),        # layer2 first reduction
    ("3x3s2_128_128_56", 128, 128, 56, 3, 2),
    ("1x1s2_256_512_56", 256, 512, 56, 1, 2),      # layer2 downsample
    ("3x3_128_128_28", 128, 128, 28, 3, 1),
    ("1x1_128_512_28", 128, 512, 28, 1, 1),
    ("1x1_512_128_28", 512, 128, 28, 1, 1),
    ("1x1_512_256_28", 512, 256, 28, 1, 1),        # layer3 first reduction
    ("3x3s2_256_256_28", 256, 256, 28, 3, 2),
    ("1x1s2_512_1024_28", 512, 1024, 28, 1, 2),    # layer3 downsample
    ("3x3_256_256_14", 256, 256, 14, 3, 1),
    ("1x1_256_1024_14", 256, 1024, 14, 1, 1),
    ("1x1_1024_256_14", 1024, 256, 14, 1, 1),
    ("1x1_1024_512_14", 1024, 512, 14, 1, 1),      # layer4 first reduction
    ("3x3s2_512_512_14", 512, 512, 14, 3, 2),
    ("1x1s2_1024_2048_14", 1024, 2048, 14, 1, 2),  # layer4 downsample
    ("3x3_512_512_7", 512, 512, 7, 3, 1),
    ("1x1_512_2048_7", 512, 2048, 7, 1, 1),
    ("1x1_2048_512_7", 2048, 512, 7, 1, 1),
]


# MobileNet-V2's depthwise 3x3 convolutions (cpu only: `--set depthwise`), each distinct
# shape once; the 7th field is groups (= channels)
DEPTHWISE = [(f"dw3x3{'s2' if s == 2 else ''}_{c}_{size}", c, c, size, 3, s, c)
             for c, size, s in ((32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2),
                                (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1))]

# MobileNet-V2's other convolutions (cpu only: `--set mobilenet`): the 3x3 stride-2 stem
# and every distinct pointwise (1x1) shape, then the depthwise ones above
MOBILENET = [("3x3s2_3_32_224", 3, 32, 224, 3, 2)] + [
    (f"1x1_{ci}_{co}_{size}", ci, co, size, 1, 1)
    for ci, co, size in ((32, 16, 112), (16, 96, 112), (96, 24, 56), (24, 144, 56), (144, 24, 56), (144, 32, 28),
                         (32, 192, 28), (192, 32, 28), (192, 64, 14), (64, 384, 14), (384, 64, 14), (384, 96, 14),
                         (96, 576, 14), (576, 96, 14), (576, 160, 7), (160, 960, 7), (960, 160, 7), (960, 320, 7),
                         (320, 1280, 7))] + DEPTHWISE


# Inception-V3's stem (valid padding where the model has it: the 8th field is the
# padding) and its 1x1 64->80 (cpu only: `--set inception`)
INCEPTION = [("3x3s2_3_32_299_p0", 3, 32, 299, 3, 2, 1, 0), ("3x3_32_32_149_p0", 32, 32, 149, 3, 1, 1, 0),
             ("3x3_32_64_147", 32, 64, 147, 3, 1, 1, 1), ("1x1_64_80_73", 64, 80, 73, 1, 1, 1, 0),
             ("3x3_80_192_73_p0", 80, 192, 73, 3, 1, 1, 0)]


SPIN_CYCLES = 200_000   # torch.cuda._sleep: about 100 us on an H200
SETTLE_S = 0.002        # cpu: idle time after each call before its CPU time is read (not timed)


def out_size(size: int, kernel: int, stride: int, pad: int | None = None) -> int:
    pad = kernel // 2 if pad is None else pad
    return (size + 2 * pad - kernel) // stride + 1


def make_weights(rng, cin, cout, kernel, groups=1):
    cin //= groups
    w = (rng.standard_normal((cout, cin, kernel, kernel)) / np.sqrt(cin * kernel * kernel)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    return w, b


def reference64(x, w, b, stride, pad, groups=1):
    """float64 convolution: zero-pad, windows, one tensordot (depthwise: per channel)."""
    x64 = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kernel = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(x64, (kernel, kernel), axis=(2, 3))[:, :, ::stride, ::stride]
    if groups > 1:   # depthwise (one channel per group)
        y = np.einsum("nchwij,cij->nchw", win, w[:, 0].astype(np.float64))
        return y + b.astype(np.float64)[None, :, None, None]
    y = np.tensordot(win, w.astype(np.float64), axes=([1, 4, 5], [1, 2, 3]))   # [N, OH, OW, O]
    return y.transpose(0, 3, 1, 2) + b.astype(np.float64)[None, :, None, None]


def rel_error(got, ref) -> float:
    got = np.asarray(got, np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def machine_line() -> str:
    flags, model = set(), "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "?":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    extras = [f for f in ("avx512_bf16", "amx_tile", "fma") if f in flags]
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    waiting = ("threads spin between calls (OpenMP and onnxruntime defaults)" if SPIN else
               f"idle threads sleep (ours: the CPU thread pool's short spin, "
               f"HIDET_FRAMEWORK_CPU_SPIN_US={os.environ.get('HIDET_FRAMEWORK_CPU_SPIN_US', 'default')}, "
               f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} for OpenMP; onnxruntime allow_spinning=0)")
    if os.environ.get("OMP_DYNAMIC"):
        waiting += f", OMP_DYNAMIC={os.environ['OMP_DYNAMIC']}"
    return (f"machine: {model} | ISA {isa} ({' '.join(extras)}) | {THREADS} threads (of {os.cpu_count()} cpus), "
            f"{waiting} | load average {load}")


def our_graph(shape, w, b, stride, pad, dtype="float32", groups=1):
    import hidet_framework as hf
    x = hf.symbol(shape, dtype)
    y = hf.ops.conv2d(x, hf.constant(w), hf.constant(b), stride=stride, padding=pad, groups=groups)
    return hf.trace(y, inputs=[x])


def templates_used(fn) -> str:
    names = []
    for task in getattr(fn, "tasks", []):
        source = getattr(getattr(task, "scheduled", None), "source", "") or "?"
        if source not in names:
            names.append(source)
    return "+".join(names)


def conv_params(fn) -> str:
    """The conv candidate the build chose, e.g. 64x64x64 s4 sk1 (tile, stages, split-K)."""
    for task in getattr(fn, "tasks", []):
        p = getattr(getattr(task, "scheduled", None), "params", None) or {}
        if "block_m" in p:
            extra = " reg" if p.get("reg_stage") else ""
            return f"{p['block_m']}x{p['block_n']}x{p['block_k']} s{p['stages']} sk{p.get('split_k', 1)}{extra}"
    return ""


# ------------------------------------------------------------------ cpu

def ort_conv(x_shape, w, b, stride, pad, threads, groups=1):
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    kernel = w.shape[2]
    o = out_size(x_shape[2], kernel, stride, pad)
    f32 = onnx.TensorProto.FLOAT
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride, stride], pads=[pad] * 4,
                            kernel_shape=[kernel, kernel], group=groups)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", f32, x_shape)],
                              [helper.make_tensor_value_info("y", f32, (x_shape[0], w.shape[0], o, o))],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not SPIN:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def bench_cpu_shape(spec, batch, args, rng) -> dict:
    import hidet_framework as hf
    name, cin, cout, size, kernel, stride = spec[:6]
    groups = spec[6] if len(spec) > 6 else 1
    pad = spec[7] if len(spec) > 7 else kernel // 2
    w, b = make_weights(rng, cin, cout, kernel, groups)
    x = rng.standard_normal((batch, cin, size, size)).astype(np.float32)
    started = time.perf_counter()
    fn = hf.compile(our_graph(x.shape, w, b, stride, pad, groups=groups), target="cpu", space=args.space)
    compile_s = time.perf_counter() - started
    peer = ort_conv(x.shape, w, b, stride, pad, THREADS, groups)
    ref = reference64(x, w, b, stride, pad, groups)
    err_ours, err_peer = rel_error(fn(x), ref), rel_error(peer(x), ref)   # also the warm-up
    times = {"ours": [], "ort": []}
    busy = {"ours": [], "ort": []}     # the process's CPU time per call / its wall time
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    for _ in range(args.rounds):
        for key, impl in (("ours", fn), ("ort", peer)):
            c0, w0 = time.process_time(), time.perf_counter()
            t0 = clock()
            impl(x)
            times[key].append(clock() - t0)
            wall = max(time.perf_counter() - w0, 1e-9)
            # a thread's CPU time is accounted when it stops running or at a tick: let the
            # side's worker threads go idle before reading the process's CPU time (else a
            # worker's share lands in the next call's window)
            time.sleep(SETTLE_S)
            busy[key].append((time.process_time() - c0) / wall)
    med = {k: statistics.median(v) for k, v in times.items()}
    flops = 2.0 * batch * cout * out_size(size, kernel, stride, pad) ** 2 * cin // groups * kernel * kernel
    return {"shape": name, "batch": batch, "ours_ms": med["ours"] * 1e3, "ort_ms": med["ort"] * 1e3,
            "ratio": med["ort"] / med["ours"], "ratio_min": min(times["ort"]) / min(times["ours"]),
            "ours_gflops": flops / med["ours"] / 1e9,
            "err_ours": err_ours, "err_ort": err_peer, "compile_s": compile_s,
            "cores_ours": statistics.median(busy["ours"]), "cores_ort": statistics.median(busy["ort"]),
            "launches": fn.num_launches, "template": templates_used(fn)}


def run_cpu(args, shapes) -> list:
    rng = np.random.default_rng(0)
    print(machine_line())
    clock = "the thread's CPU time" if args.clock == "cpu" else "wall time"
    print(f"space {args.space}; {clock}, median of {args.rounds} interleaved rounds; ratio = onnxruntime / ours "
          f"(> 1: ours faster), of the medians and of the minimums; whole calls on both sides; cores: the "
          f"process's CPU time over the wall time of a call, median (about {THREADS} where a side got its "
          f"{THREADS} CPUs, 1 where it ran on one)\n")
    print("| shape | batch | ours ms | ort ms | ort/ours | of mins | ours GFLOP/s | cores ours / ort | err ours "
          "| err ort | launches | template |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for batch in args.batch:
        for spec in shapes:
            r = bench_cpu_shape(spec, batch, args, rng)
            rows.append(r)
            print(f"| {r['shape']} | {batch} | {r['ours_ms']:.3f} | {r['ort_ms']:.3f} | {r['ratio']:.2f}x | "
                  f"{r['ratio_min']:.2f}x | {r['ours_gflops']:.1f} | {r['cores_ours']:.2f} / {r['cores_ort']:.2f} | "
                  f"{r['err_ours']:.1e} | {r['err_ort']:.1e} | {r['launches']} | "
                  f"{r['template']} |", flush=True)
    summarize(rows)
    print("\n" + machine_line())
    return rows


# ------------------------------------------------------------------ cuda

def _compile_cuda(job) -> float:
    """One shape compiled in a worker process (fills the shared build cache)."""
    import hidet_framework as hf

    (name, cin, cout, size, kernel, stride), batch, dtype, space = job
    rng = np.random.default_rng(0)
    w, b = make_weights(rng, cin, cout, kernel)
    np_dtype = np.float16 if dtype == "float16" else np.float32
    started = time.perf_counter()
    hf.compile(our_graph((batch, cin, size, size), w.astype(np_dtype), b.astype(np_dtype), stride, kernel // 2,
                         dtype), target="cuda", space=space)
    return time.perf_counter() - started


def warm_cuda(args, shapes) -> None:
    """--warm N: compile every shape first in N processes, so that the timed run's
    compiles hit the build cache (46 sequential compiles otherwise take most of a
    short device call); compile_s in the table is then the cached compile."""
    import concurrent.futures
    import multiprocessing

    jobs = [(spec, batch, dtype, args.space) for dtype in args.dtypes for batch in args.batch for spec in shapes]
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(args.warm, mp_context=multiprocessing.get_context("spawn")) as ex:
        done = list(ex.map(_compile_cuda, jobs))
    print(f"warm-up: {len(jobs)} compiles in {args.warm} processes, {time.perf_counter() - started:.1f} s "
          f"(sum {sum(done):.1f} s)\n", flush=True)


def bench_cuda_shape(spec, batch, dtype, args, rng) -> dict:
    import torch
    import hidet_framework as hf

    name, cin, cout, size, kernel, stride = spec
    pad, groups = kernel // 2, 1
    w, b = make_weights(rng, cin, cout, kernel)
    x = rng.standard_normal((batch, cin, size, size)).astype(np.float32)
    np_dtype = np.float16 if dtype == "float16" else np.float32
    wq, bq, xq = w.astype(np_dtype), b.astype(np_dtype), x.astype(np_dtype)
    started = time.perf_counter()
    fn = hf.compile(our_graph(xq.shape, wq, bq, stride, pad, dtype), target="cuda", space=args.space)
    compile_s = time.perf_counter() - started
    xt = torch.from_numpy(xq).to("cuda")
    wt, bt = torch.from_numpy(wq).to("cuda"), torch.from_numpy(bq).to("cuda")
    ours_out = fn(xt)     # torch CUDA tensors in and out, on the current stream, bound where they lie
    got = (ours_out if isinstance(ours_out, torch.Tensor) else torch.from_dlpack(ours_out)).double().cpu().numpy()
    ref = torch.nn.functional.conv2d(xt.double(), wt.double(), bt.double(), stride=stride, padding=pad)
    ref = ref.cpu().numpy()
    peer_out = torch.nn.functional.conv2d(xt, wt, bt, stride=stride, padding=pad)
    err_ours, err_peer = rel_error(got, ref), rel_error(peer_out.double().cpu().numpy(), ref)

    def ours():
        fn(xt)

    def peer():
        torch.nn.functional.conv2d(xt, wt, bt, stride=stride, padding=pad)

    for f in (ours, peer):
        for _ in range(5):
            f()
    torch.cuda.synchronize()
    spin = getattr(torch.cuda, "_sleep", None)
    events = {"ours": [], "cudnn": []}
    for _ in range(args.repeat):
        for key, f in (("ours", ours), ("cudnn", peer)):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if spin is not None:
                spin(SPIN_CYCLES)   # the GPU is busy while the host queues the call: device time only
            s.record()
            f()
            e.record()
            events[key].append((s, e))
        torch.cuda.synchronize()
    med = {k: statistics.median(s.elapsed_time(e) for s, e in v) / 1e3 for k, v in events.items()}
    flops = 2.0 * batch * cout * out_size(size, kernel, stride) ** 2 * cin // groups * kernel * kernel
    return {"shape": name, "batch": batch, "dtype": dtype, "ours_us": med["ours"] * 1e6,
            "cudnn_us": med["cudnn"] * 1e6, "ratio": med["cudnn"] / med["ours"],
            "ours_tflops": flops / med["ours"] / 1e12, "err_ours": err_ours, "err_cudnn": err_peer,
            "compile_s": compile_s, "launches": fn.num_launches, "template": templates_used(fn),
            "params": conv_params(fn)}


def run_cuda(args, shapes) -> list:
    import torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rng = np.random.default_rng(0)
    if args.warm:
        warm_cuda(args, shapes)
    print(f"CUDA: {torch.cuda.get_device_name()}; space {args.space}; median of {args.repeat} interleaved "
          f"runs (CUDA events after a spin kernel); ratio = cuDNN / ours (> 1: ours faster); device time of "
          f"each call on both sides (ours: fn(x) with torch tensors)\n")
    print("| shape | batch | dtype | ours us | cudnn us | cudnn/ours | ours TFLOP/s | err ours | err cudnn "
          "| launches | template | candidate |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for dtype in args.dtypes:
        for batch in args.batch:
            for spec in shapes:
                try:
                    r = bench_cuda_shape(spec, batch, dtype, args, rng)
                except Exception as exc:  # noqa: BLE001  (one failing shape must not hide the others)
                    print(f"| {spec[0]} | {batch} | {dtype} | failed: {type(exc).__name__}: {exc} ||||||||||",
                          flush=True)
                    continue
                rows.append(r)
                print(f"| {r['shape']} | {batch} | {dtype} | {r['ours_us']:.1f} | {r['cudnn_us']:.1f} | "
                      f"{r['ratio']:.2f}x | {r['ours_tflops']:.1f} | {r['err_ours']:.1e} | {r['err_cudnn']:.1e} | "
                      f"{r['launches']} | {r['template']} | {r['params']} |", flush=True)
    summarize(rows)
    return rows


def summarize(rows) -> None:
    if not rows:
        return
    ratios = [r["ratio"] for r in rows]
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"\nratios: min {min(ratios):.2f}x, geometric mean {geo:.2f}x, max {max(ratios):.2f}x; "
          f"{sum(r >= 0.8 for r in ratios)} of {len(ratios)} at 0.8x or better")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch", default="1", help="comma-separated batch sizes (1,8)")
    parser.add_argument("--only", default="", help="comma-separated substrings of shape names (3x3,1x1_64)")
    parser.add_argument("--space", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=9, help="cpu: interleaved rounds")
    parser.add_argument("--repeat", type=int, default=50, help="cuda: interleaved runs")
    parser.add_argument("--threads", type=int, default=2, help="cpu: threads for ours and onnxruntime")
    parser.add_argument("--spin", action="store_true", help="cpu: keep spinning idle threads on both sides "
                        "(the libraries' defaults); read before numpy loads")
    parser.add_argument("--dtypes", default="float16,float32", help="cuda: comma-separated dtypes")
    parser.add_argument("--warm", type=int, default=0, help="cuda: compile every shape first in this many "
                        "processes (build cache)")
    parser.add_argument("--out", default="", help="write the rows as JSON to this file")
    parser.add_argument("--set", default="resnet50", choices=["resnet50", "depthwise", "mobilenet", "inception"],
                        help="cpu: ResNet-50's shapes, MobileNet-V2's depthwise 3x3 ones, or all of "
                        "MobileNet-V2's (stem, pointwise, depthwise), or Inception-V3's stem")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="cpu: time calls with the thread's CPU clock (with --threads 1 only)")
    args = parser.parse_args()
    if args.clock == "cpu" and (args.target != "cpu" or args.threads != 1):
        parser.error("--clock cpu needs --target cpu and --threads 1 (both sides on the calling thread)")
    args.batch = [int(v) for v in args.batch.split(",") if v]
    args.dtypes = [v for v in args.dtypes.split(",") if v]
    pool = {"depthwise": DEPTHWISE, "mobilenet": MOBILENET, "inception": INCEPTION}.get(args.set, SHAPES) if args.target == "cpu" else SHAPES
    shapes = [s for s in pool if not args.only or any(p in s[0] for p in args.only.split(","))]
    rows = run_cpu(args, shapes) if args.target == "cpu" else run_cuda(args, shapes)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
