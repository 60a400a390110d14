"""One model compiled twice in one process, with opt-in fusion switches off and on,
timed side by side (cuda: fp16, batch 1; cpu: float32, onnxruntime interleaved too).

    python bench/fusion_switch.py [--target cuda|cpu] [--models gpt2_s128,bert_base_s128]
        [--switches HIDET_FRAMEWORK_FUSE_MULTIUSE,HIDET_FRAMEWORK_VIEW_EPILOGUE] [--rounds 5] [--calls 50]
    python bench/fusion_switch.py --target cpu --threads 1 --clock cpu --rounds 5 --calls 4

The switches are environment variables (set to 0, then to 1) the fusion pass reads on every compile
(``fusion/epilogue_dag.py``, ``fusion/view_epilogue.py``), so both compiles share the
process, the inputs and the kernels that do not change. Printed per model: median ms
per call of each (CUDA events around every call, the rounds interleaved; the compiled
graph's default CUDA-graph replay, torch tensors in and out), launches, the max
relative error of each against torch fp32 on the same ONNX weights (``bench/onnx_torch.py``;
onnxruntime with ``--target cpu``)
and against each other, and the costliest kernels of each (torch profiler, one call).
On cpu: median ms per call of off, on and onnxruntime (CPU provider, ``--threads`` each),
the three interleaved call by call, wall clock or (``--clock cpu``, with ``--threads 1``)
the calling thread's CPU time, which a loaded machine's waits for a core do not inflate.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from thread_env import threads_from_argv  # noqa: E402

THREADS = threads_from_argv(sys.argv, default=1)  # before numpy and our kernel libraries load

import numpy as np  # noqa: E402

from models import _shared_dir, cpu_description  # noqa: E402
from shared_models import materialized  # noqa: E402
from models_cuda import _error, _inputs, _kernels, _numpy, _time_interleaved  # noqa: E402


def compare(path: str, switches: list[str], args) -> None:
    import onnx

    import hidet_framework as hf

    model = onnx.load(path)
    arrays = _inputs(model, 1, np.random.default_rng(0))
    gpu = args.target == "cuda"
    if gpu:
        import torch
        from onnx_torch import OnnxModule

        t32 = [torch.from_numpy(a).cuda() for a in arrays]
        t16 = [t.half() if t.is_floating_point() else t for t in t32]
        with torch.no_grad():
            ref = [_numpy(o) for o in OnnxModule(model).cuda().eval()(*t32)]
    else:  # the smoke test: onnxruntime's CPU provider as the reference
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = dict(zip([i.name for i in session.get_inputs()], arrays))
        ref, t16 = session.run(None, feed), arrays
    graph = hf.load(path)
    fns, outs = {}, {}
    for label, value in (("off", "0"), ("on", "1")):
        for name in switches:
            os.environ[name] = value
        # compiled tasks are cached in-process by task: a switch that changes only a level-0
        # pick (HIDET_FRAMEWORK_HOPPER_WS_MODEL) would otherwise get the first compile's kernels
        from hidet_framework.driver.task_compiler import clear_task_cache
        clear_task_cache()
        fns[label] = hf.compile(graph, target=args.target, space=0, dtype="float16" if gpu else None)
        got = fns[label](*t16)
        outs[label] = [_numpy(o) if gpu else np.asarray(o) for o in (got if isinstance(got, tuple) else [got])]
    reports = {label: {str(r) for r in f.fusion_report()} for label, f in fns.items()}
    impls = {label: (lambda f: (lambda: f(*t16)))(f) for label, f in fns.items()}
    for f in impls.values():
        f()
    if gpu:
        times = _time_interleaved(impls, args.rounds, args.calls)
    else:
        impls["onnxruntime"] = lambda: session.run(None, feed)
        times = _time_cpu(impls, args.rounds * args.calls, time.thread_time if args.clock == "cpu" else time.perf_counter)
    name = os.path.basename(path)[:-5]
    print(f"{name} ({args.target}, {THREADS} thread(s), {args.clock} clock, load {os.getloadavg()[0]:.1f}): off {times['off']:.3f} ms, on {times['on']:.3f} ms (off / on x{times['off'] / times['on']:.3f}) | "
          f"launches {fns['off'].num_launches} -> {fns['on'].num_launches} | err vs torch fp32 off "
          f"{_error(outs['off'], ref):.1e} on {_error(outs['on'], ref):.1e}, on vs off "
          f"{_error(outs['on'], outs['off']):.1e}" + (f" | onnxruntime {times['onnxruntime']:.3f} ms (onnxruntime / on "
                                                      f"x{times['onnxruntime'] / times['on']:.3f}, / off "
                                                      f"x{times['onnxruntime'] / times['off']:.3f})" if not gpu else ""),
          flush=True)
    for line in sorted(reports["on"] - reports["off"]):
        print(f"  only on:  {line[:160]}", flush=True)
    for line in sorted(reports["off"] - reports["on"]):
        print(f"  only off: {line[:160]}", flush=True)
    for label, f in impls.items() if gpu else ():
        count, top = _kernels(f, top=args.top)
        print(f"  {label}: {count} kernels seen", flush=True)
        for kernel, us, n in top:
            print(f"  {label} {us:9.1f} us  x{n:<3} {kernel}", flush=True)


def _time_cpu(impls: dict, calls: int, clock) -> dict[str, float]:
    """Median ms per call of each impl, the impls interleaved call by call."""
    samples: dict[str, list] = {k: [] for k in impls}
    for _ in range(calls):
        for name, f in impls.items():
            t = clock()
            f()
            samples[name].append((clock() - t) * 1e3)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt2_s128,bert_base_s128")
    parser.add_argument("--switches", default="HIDET_FRAMEWORK_FUSE_MULTIUSE,HIDET_FRAMEWORK_VIEW_EPILOGUE")
    parser.add_argument("--shared", default=_shared_dir())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--target", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--threads", type=int, default=1, help="cpu: threads of ours and of onnxruntime")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"], help="cpu: wall or thread CPU time")
    args = parser.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu measures the calling thread only: use it with --threads 1")
    if args.target == "cpu":
        print(f"cpu: {cpu_description()}", flush=True)
    for name in args.models.split(","):
        with materialized(args.shared, name) as path:
            compare(path, args.switches.split(","), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
