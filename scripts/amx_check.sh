#!/usr/bin/env bash
# One check of the AMX bfloat16 matmul (cpu_amx_tiles.py) on an Intel Xeon with AMX
# (no network needed): install the project editable, record the CPU's amx flags and
# whether this process gets the tile permission, run the AMX and half-operand tests,
# the emulated kernel, and the bf16 bench at 1 and 16 threads (short). Every step runs
# even when an earlier one failed; exit status non-zero when any failed. Under 3 minutes.
# Usage, from the repository root: bash scripts/amx_check.sh "$OUT"
set -u
OUT="${1:?usage: amx_check.sh OUTDIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
FAILED=()

step() {  # step NAME LOG COMMAND...: run with output to OUT/LOG (and the terminal)
  local name="$1" log="$2"; shift 2
  echo "=== $name: $*" | tee -a "$OUT/$log"
  local start=$SECONDS
  "$@" 2>&1 | tee -a "$OUT/$log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$OUT/$log"
  [ $rc -eq 0 ] || FAILED+=("$name($rc)")
}

install_project() {
  local d rc=0
  for d in . plugins/* hidet_plugin_*; do
    if [ -f "$d/pyproject.toml" ]; then
      "$PY" -m pip install -q --no-build-isolation --no-deps -e "$d" || { echo "install of $d failed"; rc=1; }
    fi
  done
  return $rc
}

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

step install check.log install_project
step cpu check.log cpu_facts
# pyproject's addopts less its -n auto (xdist may be absent there); -n 8 where it is present
XDIST=(-p no:xdist); "$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 8)
step pytest check.log timeout 120 "$PY" -m pytest -q -p no:cacheprovider \
  -o addopts="-ra --strict-markers --import-mode=importlib" "${XDIST[@]}" -rs \
  tests/plugins/matmul/test_cpu_amx.py tests/plugins/matmul/test_cpu_half_operands.py
step emulated check.log timeout 40 "$PY" scripts/amx_emulate.py
SHAPES="${AMX_CHECK_SHAPES:-1024x1024x1024,128x4096x1024,31x4096x4096c}"
step bench1 bench_1thread.log timeout 60 "$PY" bench/matmul_bf16.py --threads 1 --rounds 5 --shapes "$SHAPES"
step bench16 bench_16threads.log timeout 60 "$PY" bench/matmul_bf16.py --threads 16 --rounds 7 --shapes "$SHAPES"

{ echo "failed steps: ${FAILED[*]:-none}"; } | tee "$OUT/summary.txt"
[ ${#FAILED[@]} -eq 0 ]
