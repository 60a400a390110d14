#!/usr/bin/env bash
# One check of the AMX bfloat16 matmul (cpu_amx_tiles.py) on an Intel Xeon with AMX
# (no network needed): install the project editable, record the CPU's amx flags and
# whether this process gets the tile permission, run the AMX and half-operand tests,
# the emulated kernel, and the bf16 bench at 1 and 16 threads (short). Every step runs
# even when an earlier one failed; exit status non-zero when any failed. Under 3 minutes.
# Usage, from the repository root: bash scripts/amx_check.sh "$OUT"
# shellcheck source=scripts/check_lib.sh
source "$(dirname "$0")/check_lib.sh" "${1:-}" check.log

cpu_facts() {
  lscpu | grep -m1 'Model name'
  echo "lscpu amx flags:"; lscpu | grep -o 'amx[a-z_]*' 
  nproc
  "$PY" -c "
from hidet_plugin_cpu.target import amx_permission, detect_cpu_target
t = detect_cpu_target()
print('tile permission:', amx_permission(), '| detected model:', t.get('model'))
print('detected amx flags:', [f for f in t.get('flags', ()) if f.startswith('amx')], 'cores', t.get('cores'))"
  gcc --version | head -1; as --version | head -1
}

step install install_project
step cpu cpu_facts
# pyproject's addopts less its -n auto (xdist may be absent there); -n 8 where it is present
XDIST=(-p no:xdist); "$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 8)
step pytest timeout 120 "$PY" -m pytest -q -p no:cacheprovider \
  -o addopts="-ra --strict-markers --import-mode=importlib" "${XDIST[@]}" -rs \
  tests/plugins/matmul/test_cpu_amx.py tests/plugins/matmul/test_cpu_half_operands.py
step emulated timeout 40 "$PY" scripts/amx_emulate.py
SHAPES="${AMX_CHECK_SHAPES:-1024x1024x1024,128x4096x1024,31x4096x4096c}"
STEP_LOG=bench_1thread.log step bench1 timeout 60 "$PY" bench/matmul_bf16.py --threads 1 --rounds 5 --shapes "$SHAPES"
STEP_LOG=bench_16threads.log step bench16 timeout 60 "$PY" bench/matmul_bf16.py --threads 16 --rounds 7 --shapes "$SHAPES"

{ echo "failed steps: ${FAILED[*]:-none}"; } | tee "$OUT/summary.txt"
[ ${#FAILED[@]} -eq 0 ]
