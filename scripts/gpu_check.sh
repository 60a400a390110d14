#!/usr/bin/env bash
# One full check on the lent GPU machine (no network): install the project offline,
# record the GPU, run the `cuda` tests, the GPU benchmarks and compute-sanitizer.
# Every step runs even when an earlier one failed; the exit status is non-zero when
# any step failed. Usage: bash scripts/gpu_check.sh OUTDIR
# OUTDIR gets at most 8 files (what the device tool brings back): every step's output
# in one check.log, summary.txt, the pytest junit XML, and the benchmarks' JSON; any
# overflow is bundled into extra.tar.gz.
# shellcheck source=scripts/check_lib.sh
source "$(dirname "$0")/check_lib.sh" "${1:-}" check.log

torch_import() {  # torch must import from the repository root (nothing here may shadow it)
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
}

bundle_overflow() {  # keep OUT within 8 files: everything past the first 7 goes into one tarball
  local files extra
  mapfile -t files < <(cd "$OUT" && find . -type f | sed 's|^\./||' | sort)
  [ ${#files[@]} -le 8 ] && return 0
  mapfile -t extra < <(printf '%s\n' "${files[@]}" | grep -v -x -e check.log -e summary.txt \
    -e pytest_cuda.xml -e gpu_bandwidth.json | tail -n +4)
  (cd "$OUT" && tar czf extra.tar.gz "${extra[@]}" && rm -f "${extra[@]}")
}

# What the matmul benchmark runs (a full space-2 table of every shape and dtype takes
# longer than one device call may): override with GPU_CHECK_MATMUL_ARGS.
MATMUL_ARGS="${GPU_CHECK_MATMUL_ARGS:---space 1 --shapes 4096,2039,1021x3001x997 --dtypes float32,float16}"

run_benchmarks() {
  local b rc=0 found=0
  for b in bench/gpu_*.py; do
    [ -f "$b" ] || continue
    # the quick matmul script tunes whole spaces itself; bench/matmul.py covers matmul here
    [ "$b" = bench/gpu_matmul_quick.py ] && continue
    found=1
    echo "--- $b"
    "$PY" "$b" --out "$OUT" || { echo "$b failed"; rc=1; }
  done
  if [ -f bench/matmul.py ]; then
    found=1
    echo "--- bench/matmul.py --target cuda"
    # shellcheck disable=SC2086  (word splitting of the arguments is intended)
    "$PY" bench/matmul.py --target cuda --out "$OUT" $MATMUL_ARGS || { echo "bench/matmul.py failed"; rc=1; }
  fi
  [ $found -eq 1 ] || echo "no GPU benchmarks in bench/"
  return $rc
}

sanitize() {
  if [ ! -d tests/plugins/cuda ]; then echo "no tests/plugins/cuda: skipped"; return 0; fi
  if ! command -v compute-sanitizer >/dev/null; then echo "compute-sanitizer not found"; return 1; fi
  # the CUDA backend's own tests only: memcheck slows every launch down a lot
  compute-sanitizer --tool memcheck --error-exitcode 99 --target-processes all \
    "$PY" -m pytest -m cuda -q -p no:cacheprovider tests/plugins/cuda
}

# GPU_CHECK_STEPS picks steps (one device call may run 10 minutes at most, so the tests
# and the benchmarks can go in separate calls); install always runs.
STEPS="${GPU_CHECK_STEPS:-probe tests memcheck bench}"
wants() { [[ " $STEPS " == *" $1 "* ]]; }
# pytest-xdist spreads the tests over the machine's cores when it is installed there
if [ -z "${GPU_CHECK_PYTEST_ARGS+x}" ]; then
  GPU_CHECK_PYTEST_ARGS=""
  "$PY" -c "import xdist" 2>/dev/null && GPU_CHECK_PYTEST_ARGS="-n 8"
fi

step install install_project
if wants probe; then
  step nvidia_smi nvidia-smi
  step torch_import torch_import
  step probe_torch_import timeout 120 "$PY" scripts/probe_torch_import.py
fi
# the tests first: if the call runs out of time, the correctness record is what must survive
if wants tests; then
  # shellcheck disable=SC2086  (word splitting of the arguments is intended)
  step pytest_cuda timeout "${GPU_CHECK_PYTEST_TIMEOUT:-600}" "$PY" -m pytest -m cuda -v -rs \
    $GPU_CHECK_PYTEST_ARGS --junitxml="$OUT/pytest_cuda.xml"
fi
wants memcheck && step memcheck timeout "${GPU_CHECK_MEMCHECK_TIMEOUT:-240}" bash -c "$(declare -f sanitize); PY='$PY' sanitize"
wants bench && step bench run_benchmarks

if [ ${#FAILED[@]} -gt 0 ]; then
  echo "FAILED steps: ${FAILED[*]}" | tee "$OUT/summary.txt"
  bundle_overflow
  exit 1
fi
echo "all steps passed" | tee "$OUT/summary.txt"
bundle_overflow
