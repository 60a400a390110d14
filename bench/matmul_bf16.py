"""Half-precision matmul on the CPU: hf.compile(dtype="bfloat16"/"float16") against
our float32 and numpy's float32 (and torch's bfloat16 when torch is installed).

    python bench/matmul_bf16.py --threads 1
    python bench/matmul_bf16.py --threads 2 --shapes 512x1024x1024,1x4096x4096c
    HIDET_FRAMEWORK_CPU_ISA=avx2 python bench/matmul_bf16.py --threads 2

Where the machine has AMX (amx_tile and amx_bf16, tile permission granted), "bf16 ours"
is the AMX tile kernel (cpu_amx_tiles.py) and a row "bf16 pairs" adds the vdpbf16ps
pair kernel on the same operands (the packed template built for this target less its
amx flags; shapes with a variable B only).

``--widened`` adds "bf16 wide" and "f16 wide" on shapes with a constant B: the same
graphs compiled with the GEMV's weight panels widened to float32 at compile time (as
before session 16), next to the 2-byte panels (cpu_half_panels.py) of "bf16 ours".

Shapes are MxNxK (C[M, N] = A[M, K] @ B[K, N]); a trailing ``c`` makes B a constant
of the graph (short M then takes the prepacked GEMV path). Every variant is compiled
through ``hf.compile`` (space 0: the default candidate), then the variants are timed
interleaved in the same process, ``--rounds`` rounds of one call each (each after a
``--pause``, with OMP_WAIT_POLICY=PASSIVE: see `_pin`), and the median
per variant reported with the ratios to our float32; on a shared machine the ratios
are the figures to quote. ``--threads`` pins the process to that many CPUs before
anything starts a thread (our pool reads the affinity, numpy's BLAS is limited to it).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

LABELS = {"float32": "f32 ours", "bfloat16": "bf16 ours", "float16": "f16 ours"}
DEFAULT_SHAPES = ["512x1024x1024", "1024x1024x1024", "128x4096x1024", "31x4096x4096c", "1x4096x4096c"]


def _pin(threads: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cpus)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    # torch's OpenMP threads spin after a call (and OpenBLAS's): with 2 CPUs they took
    # the cores of whichever variant ran next (our float32, first in a round, measured
    # 2x its 1-thread time). Passive waits and a pause before each timed call.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _without_amx_call(a, w, m: int, n: int, k: int):
    """(call, output) of the packed template's default candidate built for this
    machine's target less its amx flags (the pair kernel where avx512_bf16 is there)."""
    import numpy as np

    from hidet_framework.backend.contract import Target
    from hidet_framework.runtime.compiled_task import compile_scheduled
    from hidet_plugin_cpu import CpuBackend
    from hidet_plugin_matmul.cpu_template import CpuPackedMatmul
    from hidet_plugin_matmul.operators import matmul_task

    backend = CpuBackend()
    full = backend.detect_target()
    target = Target(full.kind, full.arch, dict(full.properties,
                                               flags=tuple(f for f in full.get("flags", ()) if not f.startswith("amx"))))
    packed = CpuPackedMatmul()
    task, attributes = matmul_task((m, k), (k, n), "bfloat16")
    compiled = compile_scheduled(task, packed.build(task, attributes, packed.space(target, 0)[0], target),
                                 backend, target)
    c = np.empty((m, n), np.uint16)
    return (lambda: compiled.run([a, w], [c])), c


@contextlib.contextmanager
def _float32_panels(on: bool):
    """While `on`: the prepack rule widens half weights to float32 panels."""
    from hidet_plugin_matmul import cpu_half_panels

    keep = cpu_half_panels.half_panels_apply
    if on:
        cpu_half_panels.half_panels_apply = lambda *args: False
    try:
        yield
    finally:
        cpu_half_panels.half_panels_apply = keep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--widened", action="store_true", help="constant B: also the float32-panel GEMV")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds of sleep before each timed call")
    args = parser.parse_args()
    _pin(args.threads)

    import numpy as np

    import hidet_framework as hf
    from hidet_framework.graph.passes.convert_float_dtype import float32_to_bfloat16_bits

    torch = None
    if not args.no_torch:
        try:
            import torch  # noqa: F811
            torch.set_num_threads(args.threads)
        except ImportError:
            torch = None
    from hidet_plugin_cpu.target import detect_cpu_target

    amx = {"amx_tile", "amx_bf16"} <= set(detect_cpu_target().get("flags", ()))
    rng = np.random.default_rng()
    print(f"amx {'yes (bf16 ours = AMX tiles)' if amx else 'no'}, threads {args.threads}, ISA env {os.environ.get('HIDET_FRAMEWORK_CPU_ISA', 'native')}, "
          f"load {os.getloadavg()[0]:.2f}, torch {torch.__version__ if torch else '-'}")
    print(f"{'shape':>16} {'variant':>10} {'ms':>9} {'vs f32 ours':>12} {'source':>18} {'max rel err':>12}")
    for text in args.shapes.split(","):
        constant_b = text.endswith("c")
        m, n, k = (int(x) for x in text.rstrip("c").split("x"))
        a32 = rng.standard_normal((m, k)).astype(np.float32)
        w32 = rng.standard_normal((k, n)).astype(np.float32)
        a_bf = float32_to_bfloat16_bits(a32)
        a_bf64 = (a_bf.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        w_bf = float32_to_bfloat16_bits(w32)
        w_bf64 = (w_bf.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        ref_bf = a_bf64 @ w_bf64
        variants, errors, sources = {}, {}, {}
        kinds = [(d, False) for d in ("float32", "bfloat16", "float16")]
        kinds += [(d, True) for d in ("bfloat16", "float16") if args.widened and constant_b]
        for dtype, widened in kinds:
            label = LABELS[dtype].replace("ours", "wide") if widened else LABELS[dtype]
            x = hf.symbol((m, k), "float32")
            wt = hf.constant(w32) if constant_b else hf.symbol((k, n), "float32")
            graph = hf.trace(hf.ops.matmul(x, wt), inputs=[x] if constant_b else [x, wt])
            with _float32_panels(widened):
                fn = hf.compile(graph, target="cpu", dtype=None if dtype == "float32" else dtype)
            sources[label] = ",".join(t.scheduled.source for t in fn.tasks)
            if dtype == "bfloat16":
                a_in, w_in, ref = a_bf, w_bf, ref_bf
            elif dtype == "float16":
                a_in, w_in = a32.astype(np.float16), w32.astype(np.float16)
                ref = a_in.astype(np.float64) @ w_in.astype(np.float64)
            else:
                a_in, w_in, ref = a32, w32, a32.astype(np.float64) @ w32.astype(np.float64)
            call = (lambda f=fn, a=a_in: f(a)) if constant_b else (lambda f=fn, a=a_in, w=w_in: f(a, w))
            out = np.asarray(call())
            got = ((out.astype(np.uint32) << 16).view(np.float32) if dtype == "bfloat16" else out).astype(np.float64)
            errors[label] = float(np.abs(got - ref).max() / np.abs(ref).max())
            variants[label] = call
        if amx and not constant_b:
            call, out = _without_amx_call(a_bf, w_bf, m, n, k)
            call()
            got = (out.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            errors["bf16 pairs"], sources["bf16 pairs"] = float(np.abs(got - ref_bf).max() / np.abs(ref_bf).max()), \
                "matmul.cpu_packed"
            variants["bf16 pairs"] = call
        variants["f32 numpy"] = lambda: np.matmul(a32, w32)
        if torch is not None:
            ta, tw = torch.from_numpy(a32).bfloat16(), torch.from_numpy(w32).bfloat16()
            variants["bf16 torch"] = lambda: torch.matmul(ta, tw)
        times = {name: [] for name in variants}
        for f in variants.values():
            f()
        for _ in range(args.rounds):
            for name, f in variants.items():
                time.sleep(args.pause)
                started = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - started)
        base = statistics.median(times[LABELS["float32"]])
        for name, ts in times.items():
            med = statistics.median(ts)
            src, err = (sources[name], f"{errors[name]:.2e}") if name in sources else ("", "")
            print(f"{text:>16} {name:>10} {med * 1e3:9.3f} {med / base:12.2f} {src:>18} {err:>12}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
