"""Time candidates of the CUDA implicit-GEMM conv template on ResNet-50 shapes, with the
cost model's estimate beside each (which candidate the model should pick).

    python bench/conv_sweep.py --shapes 3x3_128_128_28,3x3_256_256_14 --batch 8 [--top 8] [--repeat 20]

For every shape: the level-2 candidates with the least modelled time (``--top``), the
best two of other kinds (split-K, BK = 32, 5 stages, register-staged) and the space-0
default (``auto``; on 1x1 shapes that allow it also the default's tile through the
channels-first opt-in, not yet run on a GPU), built in parallel processes first, then each timed as the bench times ours
(`conv.py`: device time of all its launches, CUDA events after a spin kernel, medians
of interleaved runs), torch's cuDNN conv interleaved with them. Inputs NCHW fp16 as in
a model (the NHWC copy launch counted where the candidate has one); every candidate's
output is checked against torch's float64 conv first.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conv import SHAPES, SPIN_CYCLES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", required=True, help="comma-separated shape names of conv.py")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dry", action="store_true", help="build and list the candidates only (no GPU)")
    args = parser.parse_args()

    from hidet_framework.runtime.compiled_task import build_in_parallel, compile_scheduled
    from hidet_plugin_cuda import CudaBackend
    from hidet_plugin_matmul.cuda_conv import CudaConvImplicitGemm, conv_kernel, conv_space
    from hidet_plugin_matmul.cuda_conv_gather import channels_first, conv_staging
    import hidet_framework as hf
    from hidet_plugin_matmul.cuda_conv_op import ConvGeometry, conv2d_igemm
    from hidet_plugin_matmul.cuda_defaults import Gemm, Gpu, modelled_seconds

    backend = CudaBackend()
    if args.dry:
        from hidet_plugin_cuda.target import default_cuda_target
        target = default_cuda_target()
    else:
        target = backend.detect_target()
    gpu = Gpu.from_target(target)
    t = CudaConvImplicitGemm()
    jobs = []
    for name in args.shapes.split(","):
        _, cin, cout, size, k, s = next(spec for spec in SHAPES if spec[0] == name)
        geo = ConvGeometry(args.batch, cin, size, size, cout, (k, k), (s, s), (k // 2,) * 4, (1, 1), 1)
        g = Gemm(geo.m, geo.cog, geo.k, 1, 2)
        rows = [(modelled_seconds(g, conv_kernel(geo, p, 2), gpu), p) for p in conv_space(target, 2)[1:]]
        ranked = sorted(rows, key=lambda r: r[0])
        picks = [(0.0, {"auto": 1})] + ranked[:args.top]
        kinds = (lambda q: q["split_k"] > 1, lambda q: q["block_k"] == 32, lambda q: q["stages"] >= 5,
                 lambda q: q.get("reg_stage"))
        for want in kinds:
            picks += [r for r in ranked if want(r[1]) and r not in picks][:2]  # a few of other kinds
        if channels_first(geo):  # the default's tile through the channels-first opt-in (no copy)
            picks.insert(1, (0.0, {"auto": 1, "channels_first": 1}))
        jobs += [(name, geo, p, est) for est, p in picks]
    def task_of(geo):  # the conv2d_igemm operator's task and attributes, as the rewrite makes them
        y = conv2d_igemm(hf.symbol(geo.x_shape, "float16"), hf.symbol(geo.w_shape, "float16"), geo)
        return y.producer.task, dict(y.producer.attributes)

    tasks = [task_of(geo) for _, geo, _, _ in jobs]
    makers = [lambda i=i: t.build(*tasks[i], jobs[i][2], target) for i in range(len(jobs))]
    results = build_in_parallel(makers, backend, target)
    if args.dry:
        for (name, _, p, est), (_, _, err, sec) in zip(jobs, results):
            print(name, p, f"model {est * 1e6:.1f} us", f"build {sec:.1f} s", err or "")
        return
    import torch

    torch.backends.cudnn.benchmark = True
    spin = getattr(torch.cuda, "_sleep", None)
    print(f"{torch.cuda.get_device_name()}, batch {args.batch}, fp16, medians of {args.repeat}\n")
    print("| shape | candidate | model us | ours us | cudnn us | cudnn/ours | launches | err |")
    print("|---|---|---|---|---|---|---|---|")
    for i, ((name, geo, p, est), (_, _, err, _)) in enumerate(zip(jobs, results)):
        if err:
            print(f"| {name} | {p} | build failed: {str(err)[:80]} |||||")
            continue
        st = makers[i]()
        compiled = compile_scheduled(tasks[i][0], st, backend, target)
        rng = np.random.default_rng(0)
        x = torch.from_numpy(rng.standard_normal((geo.batch, geo.channels, geo.height, geo.width))).cuda().half()
        w = torch.from_numpy(rng.standard_normal((geo.out_channels, geo.channels) + geo.kernel) / 30).cuda().half()
        wp = torch.zeros(geo.w_shape, dtype=torch.half, device="cuda")
        wp[0, :geo.k, :geo.cog] = w.permute(2, 3, 1, 0).reshape(geo.k, geo.cog)
        y = torch.full(geo.y_shape, float("nan"), dtype=torch.half, device="cuda")
        ws = compiled.allocate_workspace()  # once: run() would allocate it every call (host time)
        compiled.run([x, wp], [y], ws)
        ref = torch.nn.functional.conv2d(x.double(), w.double(), stride=geo.stride, padding=geo.pads[:2])
        error = float((y.double() - ref).abs().max() / ref.abs().max())
        times = {"ours": [], "cudnn": []}
        calls = {"ours": lambda: compiled.run([x, wp], [y], ws),
                 "cudnn": lambda: torch.nn.functional.conv2d(x, w, stride=geo.stride, padding=geo.pads[:2])}
        for f in calls.values():
            f()
        for _ in range(args.repeat):
            for key, f in calls.items():
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if spin is not None:  # ~1 ms: the host's own work per call stays hidden behind it
                    spin(10 * SPIN_CYCLES)
                a.record()
                f()
                b.record()
                times[key].append((a, b))
        torch.cuda.synchronize()
        med = {k: statistics.median(a.elapsed_time(b) for a, b in v) * 1e3 for k, v in times.items()}
        label = "auto -> " if p.get("auto") else ""
        q = st.params
        cand = (f"{label}{q['block_m']}x{q['block_n']}x{q['block_k']} w{q['warps_m']}x{q['warps_n']} "
                f"s{q['stages']} sk{q['split_k']} {conv_staging(geo, q)}")
        print(f"| {name} | {cand} | {est * 1e6:.1f} | {med['ours']:.1f} | {med['cudnn']:.1f} | "
              f"{med['cudnn'] / med['ours']:.2f}x | {len(st.launches)} | {error:.1e} |", flush=True)


if __name__ == "__main__":
    main()
