"""One model compiled twice in one process, with opt-in fusion switches off and on,
timed side by side on the GPU (H200; fp16, batch 1).

    python bench/fusion_switch_cuda.py [--models gpt2_s128,bert_base_s128]
        [--switches HIDET_FRAMEWORK_FUSE_MULTIUSE,HIDET_FRAMEWORK_VIEW_EPILOGUE] [--rounds 5] [--calls 50]

The switches are environment variables the fusion pass reads on every compile
(``fusion/epilogue_dag.py``, ``fusion/view_epilogue.py``), so both compiles share the
process, the inputs and the kernels that do not change. Printed per model: median ms
per call of each (CUDA events around every call, the rounds interleaved; the compiled
graph's default CUDA-graph replay, torch tensors in and out), launches, the max
relative error of each against torch fp32 on the same ONNX weights (``bench/onnx_torch.py``;
onnxruntime with ``--target cpu``)
and against each other, and the costliest kernels of each (torch profiler, one call).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import _shared_dir  # noqa: E402
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

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feeds = [i.name for i in session.get_inputs()]
        ref, t16 = session.run(None, dict(zip(feeds, arrays))), arrays
    graph = hf.load(path)
    fns, outs = {}, {}
    for label, value in (("off", None), ("on", "1")):
        for name in switches:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        fns[label] = hf.compile(graph, target=args.target, space=0, dtype="float16" if gpu else None)
        got = fns[label](*t16)
        outs[label] = [_numpy(o) if gpu else np.asarray(o) for o in (got if isinstance(got, tuple) else [got])]
    impls = {label: (lambda f: (lambda: f(*t16)))(f) for label, f in fns.items()}
    for f in impls.values():
        f()
    times = _time_interleaved(impls, args.rounds, args.calls) if gpu else {"off": float("nan"), "on": float("nan")}
    name = os.path.basename(path)[:-5]
    print(f"{name}: off {times['off']:.3f} ms, on {times['on']:.3f} ms (off / on x{times['off'] / times['on']:.3f}) | "
          f"launches {fns['off'].num_launches} -> {fns['on'].num_launches} | err vs torch fp32 off "
          f"{_error(outs['off'], ref):.1e} on {_error(outs['on'], ref):.1e}, on vs off "
          f"{_error(outs['on'], outs['off']):.1e}", flush=True)
    for label, f in impls.items() if gpu else ():
        count, top = _kernels(f, top=args.top)
        print(f"  {label}: {count} kernels seen", flush=True)
        for kernel, us, n in top:
            print(f"  {label} {us:9.1f} us  x{n:<3} {kernel}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt2_s128,bert_base_s128")
    parser.add_argument("--switches", default="HIDET_FRAMEWORK_FUSE_MULTIUSE,HIDET_FRAMEWORK_VIEW_EPILOGUE")
    parser.add_argument("--shared", default=_shared_dir())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--target", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a smoke test (float32, no timing)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models.split(","):
            source = os.path.join(args.shared, "models", f"{name}.onnx")
            path = os.path.join(scratch, f"{name}.onnx")
            subprocess.run([sys.executable, os.path.join(args.shared, "tools", "materialize_onnx.py"), source, path],
                           check=True)
            compare(path, args.switches.split(","), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
