"""Kernels launched and bytes moved per inference, before and after fusion.

    python bench/fusion.py [--target cpu|cuda] [--models resnet50,gpt2_s128] [--out DIR]
    python bench/fusion.py --attention-timing [--target cpu|cuda]

The five ONNX graphs of ``../shared/models`` (weights refilled by
``../shared/tools/materialize_onnx.py`` into a temporary folder), each compiled three
ways from the same imported graph:

- ``unfused``: ``hf.compile(..., fusion=False)`` with the fusion rewrite rules off
  (``fuse_attention``, the conv2d + batch-norm folds ``fold_*_into_conv2d``, the
  horizontal ``fuse_horizontal_matmul``, ``split_to_slices`` and ``fuse_horizontal_conv2d``): every
  operator is its own kernel (or kernels: a template may launch more than one). The
  lowering rewrites stay (conv2d -> im2col + matmul, the CPU's weight prepacking):
  they decide which operators exist, not what is fused.
- ``fused, no attn``: fusion on, the attention rule off (the folds on): what the
  partition and the grafts alone give.
- ``fused``: the default compile (every rule, fusion on).

Per compile: kernels launched per inference (``CompiledGraph.num_launches``) and
**bytes moved** = for every launched kernel, the sum of the sizes of the buffers it is
given (its inputs, weights included, its outputs and its workspaces), each counted in
full once per launch. It is a model of the traffic to and from memory that ignores
caches (a buffer read twice by one kernel counts once; one read by two kernels counts
twice), so it measures what fusion removes: intermediates written by one kernel and
read back by the next. Listed under each model: the operators that are still their own
kernel in ``fused`` (status ``single``, or a group whose graft fell back, ``separate``)
with the reason the report gives. Also the max relative error against onnxruntime (CPU provider)
on the same inputs (``max |ours - ort| / max |ort|``). The rules are turned off for
the one compile by ``hidet_framework.extension.rules_off`` (docs/plugins.md).

``--attention-timing`` instead times BERT-base's attention block alone (12 heads,
sequence 128, head size 64, in the exported form) with the attention rule on (one
kernel) and off (matmul, softmax, matmul), interleaved rounds, medians.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import MODELS, _inputs, _shared_dir, cpu_description  # noqa: E402
from shared_models import materialize  # noqa: E402

FUSION_RULES = ("fuse_attention", "fold_batch_norm_into_conv2d", "fold_scale_into_conv2d", "fold_shift_into_conv2d",
                "fuse_horizontal_matmul", "split_to_slices", "fuse_horizontal_conv2d")
CONFIGS = {"unfused": (False, FUSION_RULES), "fused, no attn": (True, ("fuse_attention",)), "fused": (True, ())}


def _buffer_bytes(arg) -> int:
    nbytes = getattr(arg, "nbytes", None)
    if nbytes is not None:
        return int(nbytes)
    shape, dtype = getattr(arg, "shape", None), getattr(arg, "dtype", None)
    if shape is None or dtype is None:
        return 0  # a scalar argument
    import numpy as np

    from hidet_framework.ir.dtypes import data_type

    count = int(np.prod([int(s) for s in shape], dtype=np.int64))
    return count * (data_type(str(dtype)).bits // 8 if not isinstance(dtype, np.dtype) else dtype.itemsize)


def traffic(fn) -> tuple[int, int]:
    """(kernels launched, bytes moved) per call of a compiled graph (module docstring)."""
    launches = fn._launches  # (kernel, bound buffers) per launch, in call order
    return len(launches), sum(_buffer_bytes(a) for _, args in launches for a in args)


def measure(path: str, target: str, check: bool, configs=tuple(CONFIGS)) -> dict:
    import numpy as np

    import hidet_framework as hf
    from hidet_framework.extension import rules_off

    row: dict = {"model": os.path.basename(path)[:-5]}
    graph = hf.load(path)
    feed, ref, arrays = None, None, None
    if check:
        import onnxruntime as ort

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = _inputs(session, np.random.default_rng(0))
        ref = session.run(None, feed)
        arrays = [feed[i.name] for i in session.get_inputs()]
    for label, (fusion, off) in CONFIGS.items():
        if label not in configs:
            continue
        try:
            with rules_off(*off):
                fn = hf.compile(graph, target=target, fusion=fusion)
        except Exception as exc:  # a model that does not compile is a result
            row[label] = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"}
            continue
        launches, moved = traffic(fn)
        entry = {"launches": launches, "bytes": moved, "operators": len(fn.graph.nodes),
                 "attention": sum(op.name == "attention" for op in fn.graph.nodes)}
        if check:
            ours = fn(*arrays)
            ours = list(ours) if isinstance(ours, tuple) else [ours]
            entry["max_rel_err"] = max(float(np.max(np.abs(o.astype(np.float64) - r))) / max(float(np.max(np.abs(r))), 1e-30)
                                       for o, r in zip(ours, ref))
        if label == "fused":  # what stayed its own kernel, and why (epilogues that did not graft)
            alone: dict = {}
            for r in fn.fusion_report():
                if r.status != "fused":
                    key = f"{r.operators} ({r.status}{': ' + r.reason if r.reason else ''})"
                    alone[key] = alone.get(key, 0) + 1
            entry["not_fused"] = alone
        row[label] = entry
    return row


def time_attention(target: str, rounds: int = 15) -> None:
    """BERT-base's attention block (12 heads, sequence 128, head size 64, the export's
    form: q and k scaled by d**-0.25, a constant mask, the NaN guard) with the rule on
    (one attention kernel) and off (matmul, softmax, matmul), interleaved; medians."""
    import statistics
    import time

    import numpy as np

    import hidet_framework as hf
    from hidet_framework.extension import rules_off

    rng = np.random.default_rng(0)
    h, s, d = 12, 128, 64
    # kt as the model's attention reads it: the head split is grafted onto the key
    # projection's stores, so the keys arrive transposed and contiguous
    q, k, v = hf.symbol((1, h, s, d), "float32"), hf.symbol((1, h, d, s), "float32"), hf.symbol((1, h, s, d), "float32")
    quarter = hf.constant(np.float32(d ** -0.25))
    kt = hf.ops.mul(k, quarter)
    z = hf.ops.add(hf.ops.matmul(hf.ops.mul(q, quarter), kt), hf.constant(np.triu(np.full((s, s), -1e30, np.float32), 1)))
    p = hf.ops.softmax(z, axis=-1)
    y = hf.ops.matmul(hf.ops.where(hf.ops.isnan(p), hf.constant(np.float32(0)), p), v)
    graph = hf.trace(y, inputs=[q, k, v])
    on = hf.compile(graph, target=target)
    with rules_off("fuse_attention"):
        off = hf.compile(graph, target=target)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (q, k, v)]
    err = float(np.max(np.abs(on(*arrays) - off(*arrays))))
    times: dict = {"on": [], "off": []}
    for _ in range(rounds):
        for label, fn in (("on", on), ("off", off)):
            start = time.perf_counter()
            fn(*arrays)
            times[label].append(time.perf_counter() - start)
    t_on, t_off = (statistics.median(times[x]) * 1e3 for x in ("on", "off"))
    print(f"attention block 12x128x64 on {target}: rule on {t_on:.3f} ms ({on.num_launches} launches), "
          f"rule off {t_off:.3f} ms ({off.num_launches} launches), off/on {t_off / t_on:.2f}x, "
          f"max |on - off| {err:.1e}; load average {os.getloadavg()[0]:.1f}", flush=True)


def _print_row(row: dict) -> None:
    cells = []
    for label in CONFIGS:
        if label not in row:
            continue  # not measured (--configs)
        e = row[label]
        if "error" in e:
            cells.append(f"{label}: FAILED {e['error']}")
            continue
        err = f" err {e['max_rel_err']:.1e}" if "max_rel_err" in e else ""
        cells.append(f"{label}: {e['launches']:5d} launches {e['bytes'] / 2**20:9.1f} MiB{err}")
    base, fused = row.get("unfused", {}), row.get("fused", {})
    ratio = ""
    if "launches" in base and "launches" in fused:
        ratio = (f" | fused/unfused: launches {fused['launches'] / base['launches']:.2f}x, "
                 f"bytes {fused['bytes'] / base['bytes']:.2f}x")
    print(f"{row['model']:<15} " + " | ".join(cells) + ratio, flush=True)
    for what, count in sorted(fused.get("not_fused", {}).items(), key=lambda kv: -kv[1]):
        print(f"    alone in 'fused': {count} x {what}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--shared", default=_shared_dir(), help="folder with models/ and tools/ (../shared)")
    parser.add_argument("--no-check", action="store_true", help="skip the comparison with onnxruntime")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"a subset of {','.join(CONFIGS)}")
    parser.add_argument("--out", help="folder for fusion.json")
    parser.add_argument("--attention-timing", action="store_true",
                        help="only time BERT's attention block with the rule on and off (interleaved medians)")
    args = parser.parse_args()
    if args.attention_timing:
        time_attention(args.target)
        return 0
    os.environ.setdefault("HIDET_FRAMEWORK_QUIET", "1")
    scratch = tempfile.mkdtemp(prefix="hf-fusion-")
    print(f"target {args.target}; cpu: {cpu_description()}; bytes moved = sum over launched kernels of their "
          f"buffers' sizes (inputs, weights, outputs, workspaces)", flush=True)
    rows = []
    for name in args.models.split(","):
        path = materialize(args.shared, name, scratch)
        row = measure(path, args.target, not args.no_check, tuple(args.configs.split(",")))
        os.remove(path)
        rows.append(row)
        _print_row(row)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "fusion.json"), "w") as f:
            json.dump({"target": args.target, "cpu": cpu_description(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
