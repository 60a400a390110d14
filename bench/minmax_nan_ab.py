"""A/B of the NaN-propagating min/max (session 14 nanfix) against an older tree, one process:

    python bench/minmax_nan_ab.py --base /path/to/old/tree [--repeat 41] [--threads 1]

The kernels whose code has a max (ResNet-50's blocked 3x3/2 max pool at 112x112 with 64
channels, Inception-V3's stem and second max pools, a reduce_max over rows and over
columns, a softmax, BERT's attention) are scheduled by this tree's templates
(default candidate) and printed twice: by this tree, and by the tree at ``--base`` (a
``git archive`` of the old commit, its sources put first on PYTHONPATH in a child
process that prints the same kernels). Both sources are built here and their calls
alternated on the same buffers; each side's median of the thread CPU clock
(`time.thread_time`, one thread) over ``--repeat`` rounds is printed with the ratio
new / old and the load. ``--isa avx2`` prints both for a 256-bit target built with
-mno-avx512f.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from thread_env import threads_from_argv  # noqa: E402

if not any(a == "--threads" or a.startswith("--threads=") for a in sys.argv):
    sys.argv += ["--threads", "1"]
THREADS = threads_from_argv(sys.argv)

import numpy as np  # noqa: E402

PACKAGES = ("", "plugins/hidet_plugin_cpu/src", "plugins/hidet_plugin_cuda/src", "plugins/hidet_plugin_ops/src",
            "hidet_plugin_matmul/src", "hidet_plugin_onnx/src", "hidet_plugin_reduce/src",
            "plugins/hidet_plugin_example/src", "examples/plugin_template/src")


def _target(isa: str):
    from hidet_framework.backend.contract import Target
    from hidet_framework.extension import plugin_host

    native = plugin_host().backend_for("cpu").detect_target()
    if isa == "avx2":
        return Target("cpu", native.arch, {**native.properties, "vector_bits": 256})
    return native


def _cases(lanes: int) -> dict:
    """name -> (task, scheduled, input shapes), each the template's default candidate."""
    import hidet_framework as hf
    from hidet_framework.extension import plugin_host
    from hidet_plugin_ops.cpu_max_pool import CpuMaxPool2d
    from hidet_plugin_ops.cpu_max_pool_blocked import CpuMaxPool2dBlocked, max_pool2d_blocked

    target = _target(ISA)
    out = {}

    def add(name, y, template=None):
        task, attributes = y.producer.task, dict(y.producer.attributes)
        if template is None:
            template = next(t for t in plugin_host().templates.templates_for(y.producer.task.name, "cpu")
                            if t.applies(task, attributes))
        params = template.space(target, 0)[0]
        out[name] = (task, template.build(task, attributes, params, target), [tuple(int(d) for d in t.shape)
                                                                               for t in task.inputs])

    xb = hf.symbol((1, 64 // lanes, 112, 112, lanes), "float32")
    add("max_pool blocked 3x3/2 64x112x112 (ResNet-50)",
        max_pool2d_blocked(xb, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (56, 56)), CpuMaxPool2dBlocked())
    add("max_pool 3x3/2 64x147x147 (Inception-V3 stem)", hf.ops.max_pool2d(hf.symbol((1, 64, 147, 147), "float32"),
                                                                          3, 2, 0), CpuMaxPool2d())
    add("max_pool 3x3/2 192x71x71 (Inception-V3)", hf.ops.max_pool2d(hf.symbol((1, 192, 71, 71), "float32"), 3, 2, 0),
        CpuMaxPool2d())
    add("reduce_max rows 2048x1000", hf.ops.reduce_max(hf.symbol((2048, 1000), "float32"), -1))
    add("reduce_max columns 1000x2048", hf.ops.reduce_max(hf.symbol((1000, 2048), "float32"), 0))
    add("softmax rows 12288x128", hf.ops.softmax(hf.symbol((12288, 128), "float32"), -1))
    q, kt, v = (hf.symbol(s, "float32") for s in ((12, 128, 64), (12, 64, 128), (12, 128, 64)))
    add("attention 12 heads x 128 x 64 (BERT)", hf.ops.attention(q, kt, v, scale=0.125))
    return out


def sources() -> dict:
    from hidet_framework.extension import plugin_host
    from hidet_framework.runtime.compiled_task import generate_source

    backend = plugin_host().backend_for("cpu")
    target = _target(ISA)
    lanes = int(target.get("vector_bits", 256)) // 32
    return {name: generate_source(s, backend, target) for name, (_, s, _) in _cases(lanes).items()}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--repeat", type=int, default=41)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--isa", default="native", choices=["native", "avx2"])
    args = p.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.join(args.base, d) for d in PACKAGES),
               NANFIX_AB_ISA=args.isa)
    old = json.loads(subprocess.run([sys.executable, __file__, "--emit"], env=env, check=True,
                                    capture_output=True, text=True, cwd="/tmp").stdout)
    from hidet_framework.extension import plugin_host
    from hidet_framework.runtime.compiled_task import build_scheduled, generate_source, load_scheduled
    from hidet_plugin_cpu import build

    if ISA == "avx2":
        build.CFLAGS = build.CFLAGS + ("-mno-avx512f",)
    backend = plugin_host().backend_for("cpu")
    target = _target(ISA)
    lanes = int(target.get("vector_bits", 256)) // 32
    rng = np.random.default_rng(0)
    print(f"threads {THREADS}, isa {ISA} ({lanes} lanes), repeat {args.repeat}, load {os.getloadavg()}")
    for name, (task, scheduled, shapes) in _cases(lanes).items():
        lowered, artifact = build_scheduled(scheduled, backend, target)
        new = load_scheduled(task, scheduled, backend, target, (lowered, artifact))
        same = old[name] == generate_source(scheduled, backend, target)
        base = load_scheduled(task, scheduled, backend, target,
                              (lowered, backend.build(old[name], target, name=lowered.name + "_base")))
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        ys = [np.empty(tuple(int(d) for d in t.shape), np.float32) for t in task.outputs]
        y_old = [y.copy() for y in ys]
        new.run(xs, ys)
        base.run(xs, y_old)
        assert all(np.array_equal(a, b) for a, b in zip(ys, y_old)), name
        reps = max(1, int(2e-3 / max(1e-6, _once(new, xs, ys))))
        times = {"new": [], "old": []}
        for _ in range(args.repeat):
            for side, c in (("new", new), ("old", base)):
                t0 = time.thread_time()
                for _ in range(reps):
                    c.run(xs, ys)
                times[side].append((time.thread_time() - t0) / reps)
        a, b = statistics.median(times["new"]), statistics.median(times["old"])
        print(f"{name:48s} old {b * 1e3:8.4f} ms  new {a * 1e3:8.4f} ms  new/old {a / b:.3f}"
              f"{'  (same source)' if same else ''}")
    print(f"load after {os.getloadavg()}")
    return 0


def _once(c, xs, ys) -> float:
    t0 = time.thread_time()
    c.run(xs, ys)
    return time.thread_time() - t0


ISA = os.environ.get("NANFIX_AB_ISA") or ("avx2" if "--isa=avx2" in sys.argv or
                                          ("--isa" in sys.argv and sys.argv[sys.argv.index("--isa") + 1] == "avx2")
                                          else "native")

if __name__ == "__main__":
    if "--emit" in sys.argv:
        print(json.dumps(sources()))
        sys.exit(0)
    sys.exit(main())
