#!/usr/bin/env python3
"""ONNX's backend node tests through hidet-plugin-onnx on the cpu target: passed /
failed / excluded / unavailable per op, then the totals.

    python scripts/onnx_conformance.py [--op Gather] [--failures] [--json FILE]

Only the tests whose every op this frontend claims are run. "excluded" tests are
listed in hidet_plugin_onnx/conformance_exclusions.py with the reason; "unavailable"
ones need an operator whose plugin is not installed (e.g. hidet-plugin-reduce).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", help="only the tests of this op (repeatable)")
    parser.add_argument("--failures", action="store_true", help="print each failed test and why")
    parser.add_argument("--json", help="write every result to this file")
    args = parser.parse_args()
    os.environ.setdefault("HIDET_FRAMEWORK_QUIET", "1")
    from hidet_plugin_onnx import conformance

    cases = [c for c in conformance.node_cases() if conformance.is_claimed(c)]
    if args.op:
        cases = [c for c in cases if conformance.op_of(c) in args.op]
    start = time.perf_counter()
    results = []
    for k, case in enumerate(cases):
        results.append(conformance.run_case(case))
        print(f"\r{k + 1}/{len(cases)} tests", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        per_op[r.op][r.status] += 1
    statuses = ("passed", "failed", "excluded", "unavailable")
    print(f"{'op':<24}" + "".join(f"{s:>12}" for s in statuses))
    for op in sorted(per_op):
        print(f"{op:<24}" + "".join(f"{per_op[op][s]:>12}" for s in statuses))
    totals = collections.Counter(r.status for r in results)
    print(f"{'TOTAL':<24}" + "".join(f"{totals[s]:>12}" for s in statuses))
    print(f"{len(results)} node tests of {len(per_op)} ops in {time.perf_counter() - start:.0f} s "
          f"(onnx {__import__('onnx').__version__})")
    if args.failures:
        for r in results:
            if r.status == "failed":
                print(f"FAILED {r.name}: {r.detail}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ if hasattr(r, "__dict__") else {"name": r.name, "op": r.op, "status": r.status,
                                                                  "detail": r.detail} for r in results], f, indent=1)
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
