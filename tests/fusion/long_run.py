"""The long run of the fusion properties (test_properties.py), in parallel processes.

    python tests/fusion/long_run.py --target cpu  --processes 2  --examples 10000 --seconds 7200 --out DIR
    python tests/fusion/long_run.py --target cuda --processes 12 --examples 10000 --seconds 540  --out DIR

Each process runs the property for `target` with hypothesis's ``dev`` profile and its
own seed (so the processes draw different graphs), ``FUSION_EXAMPLES`` = its share of
``--examples``, ``FUSION_LOG`` = ``DIR/<target>-<k>.log`` (one line per checked example:
``ok`` or ``MISMATCH`` with the graph and the error; a mismatch does not stop the run)
and ``FUSION_DEADLINE`` = now + ``--seconds`` (examples drawn after it are not checked,
so the processes end on time). Printed at the end: the examples checked, the distinct
graphs among them, the mismatches (each listed); the exit status is 1 when any
mismatched or a process failed otherwise. Not collected by pytest (no ``test_`` name).
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODES = {"cpu": "test_fused_unfused_and_reference_agree[cpu]",
         "evaluator": "test_fused_unfused_and_reference_agree[evaluator]",
         "cuda": "test_fused_unfused_and_reference_agree_on_cuda"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu", choices=sorted(NODES))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--examples", type=int, default=10000, help="in all, shared between the processes")
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop checking after this long")
    parser.add_argument("--out", required=True, help="folder for the logs")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="first process's seed")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    share = -(-args.examples // args.processes)
    deadline = time.time() + args.seconds
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # CI's profile is derandomized: same graphs everywhere
    env.update(FUSION_EXAMPLES=str(share), FUSION_DEADLINE=str(deadline))
    node = f"{os.path.join(HERE, 'test_properties.py')}::{NODES[args.target]}"
    procs = []
    start = time.time()
    for k in range(args.processes):
        log = os.path.join(args.out, f"{args.target}-{k}.log")
        out = open(os.path.join(args.out, f"{args.target}-{k}.pytest.txt"), "w")
        cmd = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", "--hypothesis-profile",
               "dev", f"--hypothesis-seed={args.seed + k}", node]
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env={**env, "FUSION_LOG": log}, stdout=out,
                                       stderr=subprocess.STDOUT), out))
    codes = []
    for proc, out in procs:
        codes.append(proc.wait())
        out.close()
    ok, mismatches, graphs = 0, [], set()
    for path in sorted(glob.glob(os.path.join(args.out, f"{args.target}-*.log"))):
        with open(path) as f:
            for line in f:
                kind = line.split(" ", 2)[1] if line.count(" ") >= 2 else ""
                if kind == "ok":
                    ok += 1
                    graphs.add(line.split(" ", 2)[2])
                elif kind == "MISMATCH":
                    mismatches.append(line.rstrip())
    checked = ok + len(mismatches)
    print(f"{args.target}: {checked} examples checked ({len(graphs)} distinct graphs among the passing ones) by "
          f"{args.processes} processes in {time.time() - start:.0f} s; {len(mismatches)} mismatches; "
          f"pytest exit codes {codes}")
    for line in mismatches:
        print("  " + line[:2000])
    failed_otherwise = any(c not in (0, 1) for c in codes) or (any(codes) and not mismatches)
    return 1 if mismatches or failed_otherwise else 0


if __name__ == "__main__":
    sys.exit(main())
