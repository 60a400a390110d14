"""One call of a model compiled for cuda, bracketed for Nsight Compute: where a model's
time goes, kernel by kernel, with the profiler's own utilisation figures.

    ncu --profile-from-start off --csv --page raw \
        --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size \
        python3 scripts/ncu_model.py --model resnet50 --shared ../shared > ncu.csv
    python3 scripts/ncu_model.py --summarize ncu.csv

The model is imported through the ONNX frontend and compiled as bench/models.py does
(fp16, space 0) but with plain launches (``cuda_graph=False``), so that every kernel is a
launch of its own for the profiler. Warm-up calls run before the profiled one.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))


def run_model(args: argparse.Namespace) -> None:
    import numpy as np
    import onnx
    import torch

    import hidet_framework as hf
    from models_cuda import _inputs
    from shared_models import materialize

    with tempfile.TemporaryDirectory(prefix="hf-ncu-") as folder:
        path = materialize(args.shared, args.model, folder)
        arrays = _inputs(onnx.load(path), 1, np.random.default_rng(0))
        fn = hf.compile(hf.load(path), target="cuda", space=args.space, dtype="float16", cuda_graph=False)
    inputs = [torch.from_numpy(a).cuda() for a in arrays]
    inputs = [t.half() if t.is_floating_point() else t for t in inputs]
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"# {args.model}: {fn.num_launches} launches profiled", file=sys.stderr)


def summarize(path: str, top: int) -> None:
    """Group ncu's raw CSV rows by kernel name: count, total us, mean SM / DRAM % of peak."""
    text = open(path).read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    units, rows = rows[0], rows[1:]  # the second row holds the units
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
    to_us = scale[units["gpu__time_duration.sum"]]
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[row["Kernel Name"]].append(row)

    def total_us(rs: list[dict]) -> float:
        return sum(float(r["gpu__time_duration.sum"].replace(",", "")) for r in rs) * to_us

    def mean(rs: list[dict], key: str) -> float:
        return sum(float(r[key].replace(",", "")) for r in rs) / len(rs)

    grand = sum(total_us(rs) for rs in groups.values())
    print(f"{len(rows)} kernels, {grand:.1f} us of kernel time")
    print("| kernel | n | us | share | SM % peak | DRAM % peak | grid |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in sorted(groups.items(), key=lambda kv: -total_us(kv[1]))[:top]:
        print(f"| {name[:100]} | {len(rs)} | {total_us(rs):.1f} | {100 * total_us(rs) / grand:.1f}% "
              f"| {mean(rs, 'sm__throughput.avg.pct_of_peak_sustained_elapsed'):.1f} "
              f"| {mean(rs, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f} "
              f"| {rs[0]['launch__grid_size']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    parser.add_argument("--space", type=int, default=0)
    parser.add_argument("--summarize", metavar="CSV", help="print the table of an ncu --csv --page raw file")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize, args.top)
    else:
        run_model(args)


if __name__ == "__main__":
    main()
