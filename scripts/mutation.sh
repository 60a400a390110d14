#!/usr/bin/env bash
# Mutation testing with mutmut over the modules whose tests issue 12 asked to be strong:
# the IR, its simplifier and interval analysis, compute definitions, fusion, the
# graph, the tuner and the CPU plugin's C code generator. Not part of CI: a full run
# takes hours on two cores. See docs/testing.md for the scores measured and the
# survivors judged.
#
#   scripts/mutation.sh                 every group below
#   scripts/mutation.sh tuner fusion    only these groups
#
# Environment: MUTATION_OUT (default ./mutation-results: per group the stats JSON, the
# survivors list and the log), MUTATION_JOBS (parallel mutants, default 1), MUTATION_NICE
# (niceness, default 10), MUTMUT (the mutmut command; default: mutmut on PATH, so run it
# inside the venv where requirements-dev.txt is installed: it lists mutmut).
#
# Each group runs in a scratch copy of the working tree (tracked and untracked files),
# so mutmut's mutants/ folder and its config never touch the checkout; mutmut puts its
# mutated copy first on sys.path, so the tests import the mutants.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${MUTATION_OUT:-$repo/mutation-results}
jobs=${MUTATION_JOBS:-1}
niceness=${MUTATION_NICE:-10}
mkdir -p "$out"

# group -> "source globs to mutate|test paths that exercise them"
declare -A MUTATION_GROUPS=(
  [simplifier]="hidet_framework/simplifier/*.py hidet_framework/analysis/bounds.py|tests/simplifier tests/analysis"
  [ir]="hidet_framework/ir/*.py|tests/simplifier tests/analysis tests/mapping tests/lowering tests/lang"
  [compute]="hidet_framework/compute/*.py|tests/graph tests/fusion tests/lowering tests/plugins/ops"
  [fusion]="hidet_framework/fusion/*.py|tests/fusion"
  [graph]="hidet_framework/graph/*.py hidet_framework/graph/passes/*.py|tests/graph tests/runtime"
  [tuner]="hidet_framework/tuner/*.py|tests/tuner tests/plugins/example"
  [cpu_codegen]="plugins/hidet_plugin_cpu/src/hidet_plugin_cpu/codegen.py hidet_framework/backend/c_style.py hidet_framework/backend/c_style_expr.py|tests/plugins/cpu tests/backend"
)
ORDER=(tuner simplifier ir compute fusion graph cpu_codegen)
selected=("$@")
[ ${#selected[@]} -eq 0 ] && selected=("${ORDER[@]}")

toml_list() {  # words -> "a", "b"
  local first=1 item
  for item in "$@"; do
    [ $first -eq 1 ] || printf ', '
    printf '"%s"' "$item"
    first=0
  done
}

for group in "${selected[@]}"; do
  spec=${MUTATION_GROUPS[$group]:-}
  if [ -z "$spec" ]; then
    echo "unknown group '$group'; groups: ${ORDER[*]}" >&2
    exit 2
  fi
  read -r -a globs <<<"${spec%%|*}"
  read -r -a tests <<<"${spec#*|}"
  work=$(mktemp -d "${TMPDIR:-/tmp}/hidet-mutation-$group-XXXXXX")
  trap 'rm -rf "$work"' EXIT
  (cd "$repo" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) | tar -C "$work" -xf -
  # mutmut copies these folders (and tests/) into mutants/ and mutates what only_mutate names
  cat >>"$work/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = ["hidet_framework/", "plugins/hidet_plugin_cpu/src/"]
only_mutate = [$(toml_list "${globs[@]}")]
pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider", "-m", "not bigmem and not cuda"]
pytest_add_cli_args_test_selection = [$(toml_list "${tests[@]}")]
EOF
  echo "== $group: mutating ${globs[*]} against ${tests[*]}"
  started=$(date +%s)
  (
    cd "$work"
    export HIDET_FRAMEWORK_CACHE="$work/.hf-cache" HIDET_FRAMEWORK_QUIET=1
    nice -n "$niceness" "${MUTMUT:-mutmut}" run --max-children "$jobs" >"$out/$group.log" 2>&1 || true
    "${MUTMUT:-mutmut}" export-cicd-stats >>"$out/$group.log" 2>&1 || true
    cp mutants/mutmut-cicd-stats.json "$out/$group-stats.json" 2>/dev/null || true
    "${MUTMUT:-mutmut}" results >"$out/$group-survivors.txt" 2>/dev/null || true
  )
  rm -rf "$work"
  trap - EXIT
  python3 - "$out/$group-stats.json" "$group" "$(( $(date +%s) - started ))" <<'EOF'
import json, sys
path, group, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    s = json.load(open(path))
except (OSError, ValueError):
    print(f"{group}: no stats (see {path[:-len('-stats.json')]}.log)")
    raise SystemExit(0)
killed = s.get("killed", 0) + s.get("timeout", 0) + s.get("segfault", 0)
judged = killed + s.get("survived", 0)
score = 100.0 * killed / judged if judged else 0.0
print(f"{group}: {killed}/{judged} mutants killed ({score:.1f}%), survived {s.get('survived', 0)}, "
      f"no tests {s.get('no_tests', 0)}, skipped {s.get('skipped', 0)}, suspicious {s.get('suspicious', 0)}; "
      f"{seconds} s")
EOF
done
