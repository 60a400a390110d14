"""Layer by layer on the CPU: each of our kernels next to onnxruntime's node, in a model pass.

    python bench/cpu_layer_compare.py --models mobilenet_v2 [--repeat 15] [--threads 1]

For a model of ``../shared/models`` whose kernels map one to one onto onnxruntime's
nodes in graph order (MobileNet-V2: every Conv, with its bias, clip and residual add,
is one kernel on both sides): ours is each bound launch timed inside whole passes over
the launch list (``cpu_model_profile.profile(..., in_sequence=True)``: caches as a
real call leaves them), onnxruntime's is the median duration of the node in its own
profiler (``SessionOptions.enable_profiling``) over ``--repeat`` runs of the session.
Both sides at ``--threads`` (1 by default, where ours is timed with the thread's CPU
clock: on a loaded machine the figure that stays put; onnxruntime's profiler times
the wall clock, so its median and its minimum are both printed, and the ratios are
given against both). ORT's layout nodes (ReorderInput/Output) and Reshape have no
kernel of ours; our copy launches (``*_copy_*``, the GEMV's staging of its input) and
layout conversions (``from_blocked*``, at the end of a blocked chain) are added to the
launch after them. The table then sums each kind of layer (stem,
pointwise by image size, depthwise), which is where a model's gap to onnxruntime is
read from.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from thread_env import threads_from_argv  # noqa: E402  (bench/ is the script's folder)

if not any(a == "--threads" or a.startswith("--threads=") for a in sys.argv):
    sys.argv += ["--threads", "1"]      # before ops_cpu reads it too (its default is 2)
THREADS = threads_from_argv(sys.argv)

import numpy as np  # noqa: E402  (after the thread variables)

from cpu_model_profile import bound_launches, profile  # noqa: E402
from shared_models import materialize  # noqa: E402
from models import _inputs, _shared_dir  # noqa: E402
from ops_cpu import machine_line  # noqa: E402


def ort_node_times(path: str, feed: dict, repeat: int, folder: str) -> list[tuple]:
    """(name, op, input shapes then the first output's, median us, min us) per node of onnxruntime's profile, in
    order (its profiler times the wall clock: on a loaded machine the minimum is the
    figure closer to the node's own time)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(folder, "ort_profile")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(repeat + 2):
        session.run(None, feed)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    order, times, meta = [], {}, {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        name = e["name"][:-len("_kernel_time")]
        if name not in times:
            order.append(name)
            args = e.get("args", {})
            shapes = [next(iter(s.values())) for s in args.get("input_type_shape", [])]
            outs = [next(iter(s.values())) for s in args.get("output_type_shape", [])]
            meta[name] = (args.get("op_name", "?"), shapes + outs[:1])
        times.setdefault(name, []).append(e["dur"])
    return [(n, meta[n][0], meta[n][1], statistics.median(times[n][2:] or times[n]), min(times[n][2:] or times[n]))
            for n in order]


def kind(shapes: list) -> str:
    """stem / pointwise HxW / depthwise HxW / other, from our launch's operand shapes
    (input NCHW or channel-blocked [N, C/L, H, W, L], packed weights [O/ob, C, KH, KW,
    ob], depthwise [O, 1, KH, KW] or blocked [C/L, KH, KW, L])."""
    if len(shapes) < 2 or len(shapes[0]) not in (4, 5):
        return "other"
    x, w = shapes[0], shapes[1]
    if len(x) == 5 and len(w) == 4:
        return f"depthwise {x[2]}x{x[3]}"
    if len(x) != 4 and len(w) != 5:
        return "other"
    if len(w) == 4 and w[1] == 1:
        return f"depthwise {x[2]}x{x[3]}"
    if len(w) == 5 and w[2:4] == (1, 1):
        return f"pointwise {x[2]}x{x[3]}"
    return "stem" if x[1] <= 4 else "other"


def conv_key(shapes: list, peer: bool) -> tuple | None:
    """(C, H, W, KH, KW, OH, OW, 16-channel blocks of O) of a convolution: ours from the
    launch's operands (x NCHW or blocked, packed weights [O/ob, C, KH, KW, ob], y NCHW
    or blocked), onnxruntime's from the node's logical shapes (x, w, ..., y)."""
    if len(shapes) < 3 or len(shapes[1]) not in (4, 5):
        return None
    x, w, y = shapes[0], shapes[1], shapes[-1]
    if peer:
        c, kh, kw, o = w[1], w[2], w[3], w[0]
    elif len(w) == 5:
        c, kh, kw = w[1], w[2], w[3]
        o = y[1] * y[4] if len(y) == 5 else y[1]
    else:
        return None
    return (c, x[2], x[3], kh, kw, y[2], y[3], -(-o // 16))


def by_shape(ours: list, shapes: list, peer: list) -> None:
    """Convolutions matched by shape (ResNet-50's are onnxruntime's one to one by default since
    the cpu's horizontal rule leaves chain members apart; elsewhere ``HIDET_FRAMEWORK_HCONV=0``):
    per distinct shape, the count and both sides' sums, the largest gaps first."""
    mine: dict = {}
    for t, k, kname, _ in ours:
        key = conv_key(shapes[k], False) if kname.startswith("conv2d") else None
        if key:
            mine.setdefault(key, []).append(t * 1e6)
    theirs: dict = {}
    for _, op, pshapes, pus, pmin in peer:
        key = conv_key(pshapes, True) if op == "Conv" else None
        if key:
            theirs.setdefault(key, []).append((pus, pmin))
    print("\n| conv (C, H, W, KH, KW, OH, OW, O/16) | count ours / ORT | ours us | ORT us median / min | "
          "ort/ours | gap us (to the median) |\n|---|---|---|---|---|---|")
    rows = []
    for key in set(mine) | set(theirs):
        us, pt = sum(mine.get(key, [])), theirs.get(key, [])
        pus, pmin = sum(p[0] for p in pt), sum(p[1] for p in pt)
        rows.append((us - pus, key, len(mine.get(key, [])), len(pt), us, pus, pmin))
    for gap, key, n1, n2, us, pus, pmin in sorted(rows, reverse=True):
        ratio = f"{pus / us:.2f}x / {pmin / us:.2f}x" if us and n1 == n2 else "-"
        print(f"| {key} | {n1} / {n2} | {us:.0f} | {pus:.0f} / {pmin:.0f} | {ratio} | {gap:.0f} |")
    tot = [sum(r[i] for r in rows) for i in (4, 5, 6)]
    print(f"| all | {sum(r[2] for r in rows)} / {sum(r[3] for r in rows)} | {tot[0]:.0f} | {tot[1]:.0f} / "
          f"{tot[2]:.0f} | {tot[1] / tot[0]:.2f}x / {tot[2] / tot[0]:.2f}x | {tot[0] - tot[1]:.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--rules-off", default="",
                        help="rewrite rules switched off while compiling ours (comma-separated names): an A/B, e.g. "
                             "cpu_chain_write,cpu_chain_elementwise,cpu_chain_read (the blocked chains)")
    parser.add_argument("--by-shape", action="store_true",
                        help="also the convolutions matched by shape (run with HIDET_FRAMEWORK_HCONV=0 for "
                             "models whose graph differs from onnxruntime's, e.g. Inception-V3)")
    args = parser.parse_args()
    import hidet_framework as hf
    from hidet_framework.extension import rules_off

    clock = time.thread_time if THREADS == 1 else time.perf_counter
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="hf-layers-") as folder:
        for name in args.models.split(","):
            import onnxruntime as ort
            path = materialize(_shared_dir(), name, folder)
            probe = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feed = _inputs(probe, np.random.default_rng(0))
            arrays = [feed[i.name] for i in probe.get_inputs()]
            with rules_off(*[r for r in args.rules_off.split(",") if r]):
                fn = hf.compile(hf.load(path), target="cpu", space=0)
            fn(*arrays)
            ours = sorted(profile(fn, arrays, args.repeat, clock, in_sequence=True), key=lambda r: r[1])
            shapes = [[tuple(a.shape) for a in launch[1] if hasattr(a, "shape")] for launch in bound_launches(fn, arrays)]
            peer = [r for r in ort_node_times(path, feed, args.repeat, folder) if r[1] not in ("ReorderOutput",
                                                                                                "ReorderInput", "Reshape")]
            print(f"\n## {name}: {len(ours)} launches of ours, {len(peer)} onnxruntime nodes "
                  f"(load average {os.getloadavg()[0]:.1f}"
                  + (f"; ours with rules off: {args.rules_off}" if args.rules_off else "") + ")\n")
            print("| # | ours: kernel | input -> output | ours us | ORT node | ORT us median / min | ort/ours |")
            print("|---|---|---|---|---|---|---|")
            rows, carry = [], 0.0
            for k, (t, _, kname, _) in enumerate(ours):
                if "_copy_" in kname or kname.startswith("from_blocked"):
                    carry += t
                    continue
                rows.append((k, kname, t + carry))
                carry = 0.0
            sums: dict = {}
            for (k, kname, t), (pname, op, _, pus, pmin) in zip(rows, peer):
                us = t * 1e6
                group = kind(shapes[k]) if op == "Conv" else op
                entry = sums.setdefault(group, [0.0, 0.0, 0.0, 0])
                entry[0] += us
                entry[1] += pus
                entry[2] += pmin
                entry[3] += 1
                io = f"{shapes[k][0]} -> {shapes[k][-1]}"
                print(f"| {k} | {kname} | {io} | {us:.0f} | {op} {pname} | {pus:.0f} / {pmin:.0f} | "
                      f"{pus / us:.2f}x / {pmin / us:.2f}x |")
            if args.by_shape:
                by_shape(ours, shapes, peer)
            print("\n| layers | count | ours us | ORT us median / min | ort/ours |\n|---|---|---|---|---|")
            for group, (us, pus, pmin, count) in sorted(sums.items(), key=lambda kv: -kv[1][0]):
                print(f"| {group} | {count} | {us:.0f} | {pus:.0f} / {pmin:.0f} | {pus / us:.2f}x / {pmin / us:.2f}x |")
            tot = [sum(v[i] for v in sums.values()) for i in range(4)]
            print(f"| all | {tot[3]:.0f} | {tot[0]:.0f} | {tot[1]:.0f} / {tot[2]:.0f} | "
                  f"{tot[1] / tot[0]:.2f}x / {tot[2] / tot[0]:.2f}x |")
    print("\n" + machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
