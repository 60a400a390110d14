# What the one-shot machine checks share (sourced by gpu_check.sh and amx_check.sh, not
# run): the output folder, the repository root as the working directory, the Python to
# use, `step` (run one step, log it, remember a failure) and the offline editable install.
# Usage, first thing in a check script: source "$(dirname "$0")/check_lib.sh" "$1" LOGNAME
# Sets OUT (absolute), PY, FAILED and STEP_LOG (the log `step` appends to).
set -u
OUT="${1:?usage: $(basename "$0") OUTDIR}"
STEP_LOG="${2:-check.log}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
FAILED=()

step() {  # step NAME COMMAND...: run with output to OUT/$STEP_LOG (and the terminal)
  local name="$1"; shift
  echo "=== $name: $*" | tee -a "$OUT/$STEP_LOG"
  local start=$SECONDS
  "$@" 2>&1 | tee -a "$OUT/$STEP_LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$OUT/$STEP_LOG"
  [ $rc -eq 0 ] || FAILED+=("$name($rc)")
}

install_project() {  # every distribution of the repository, editable, without the network
  local d rc=0
  for d in . plugins/* hidet_plugin_* examples/plugin_template; do
    if [ -f "$d/pyproject.toml" ]; then
      "$PY" -m pip install -q --no-build-isolation --no-deps -e "$d" || { echo "install of $d failed"; rc=1; }
    fi
  done
  return $rc
}
