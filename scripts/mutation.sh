#!/usr/bin/env bash
# Mutation testing with mutmut over the modules whose tests issue 12 asked to be strong:
# the IR (ir/, analysis/, simplifier/, mapping/), compute definitions, fusion, the
# graph, the tuner and the CPU plugin's C code generation (its printer, and its parallel
# loops, thread pool and vector math). Not part of CI: a full run of the larger groups
# takes hours on two cores. See docs/testing.md for the scores
# measured and the survivors judged.
#
#   scripts/mutation.sh                       every group below, every mutant
#   scripts/mutation.sh tuner simplifier      only these groups
#   MUTATION_SAMPLE=120 scripts/mutation.sh fusion
#                                             a seeded random sample of 120 mutants
#
# Per group it prints "GROUP: killed/judged (score%) ...", and at the end a total line
# summed over the groups run. The score counts a mutant as killed when a test failed
# or timed out, and as not killed when it survived or when no test of the group's
# selection reaches it ("no tests"): an unreached mutant is a test gap, not excused.
#
# Environment:
#   MUTATION_OUT     folder for the results (default ./mutation-results): per group the
#                    stats JSON, the survivors (`GROUP-survivors.txt`, with each
#                    survivor's diff in `GROUP-diffs.txt`), the sampled names and the log
#   MUTATION_SAMPLE  run only this many mutants per group, drawn at random (seeded)
#   MUTATION_SEED    the sample's seed (default 12)
#   MUTATION_JOBS    parallel mutants (default 1)
#   MUTATION_NICE    niceness (default 19)
#   MUTATION_TIMEOUT_MULTIPLIER
#                    a mutant's CPU-time limit is 2 x this x (its tests' clean time + 1 s);
#                    default 5 (mutmut's own 15 let a mutant that loops forever spin for
#                    a quarter of an hour, seen in cpu_parallel_math; 3 once ended an
#                    equivalent mutant whose tests ran long as a "timeout")
#   MUTATION_CACHE   the build cache the tests use (default: a fresh one per group run)
#   MUTATION_KEEP    1: keep the scratch copy (its path is printed) for `mutmut show`
#   MUTATION_REPO    the checkout to copy (default: the one holding this script; set it
#                    when running a copy of the script, so that editing it mid-run is safe)
#   MUTMUT           the mutmut command (default: mutmut on PATH, so run this inside
#                    the venv where requirements-dev.txt is installed: it lists mutmut)
#
# Each group runs in a scratch copy of the working tree (tracked and untracked files),
# so mutmut's mutants/ folder and its config never touch the checkout; mutmut puts its
# mutated copy first on sys.path, so the tests import the mutants. Each mutant runs
# only the tests of its group's selection that reach the mutated function (mutmut
# records them in a first, traced run of the selection), in one process (-n 0), and
# stops at the first failure (-x).
set -euo pipefail

repo=${MUTATION_REPO:-$(cd "$(dirname "$0")/.." && pwd)}
out=${MUTATION_OUT:-$repo/mutation-results}
jobs=${MUTATION_JOBS:-1}
niceness=${MUTATION_NICE:-19}
sample=${MUTATION_SAMPLE:-}
seed=${MUTATION_SEED:-12}
mutmut=${MUTMUT:-mutmut}
mkdir -p "$out"

# group -> "source globs to mutate|test paths that exercise them". The fusion group
# leaves out the slow whole-model and random-graph tests (test_model_graphs.py,
# test_properties.py): their clean run alone takes over ten minutes on two cores.
declare -A MUTATION_GROUPS=(
  [simplifier]="hidet_framework/simplifier/*.py|tests/simplifier tests/analysis"
  [analysis]="hidet_framework/analysis/*.py|tests/analysis tests/simplifier tests/lang tests/lowering tests/mapping"
  [mapping]="hidet_framework/mapping/*.py|tests/mapping"
  [ir]="hidet_framework/ir/*.py|tests/ir tests/simplifier tests/analysis tests/mapping tests/lowering tests/lang"
  [compute]="hidet_framework/compute/*.py|tests/compute tests/graph tests/fusion/test_legality.py tests/fusion/test_legality_negative.py tests/lowering"
  [fusion]="hidet_framework/fusion/*.py|tests/fusion/test_legality.py tests/fusion/test_legality_negative.py tests/fusion/test_fusion_boundaries.py tests/fusion/test_elementwise_chains.py tests/fusion/test_epilogue.py tests/fusion/test_prologue.py tests/fusion/test_fallbacks.py tests/fusion/test_template_graft.py"
  [graph]="hidet_framework/graph/*.py hidet_framework/graph/passes/*.py|tests/graph tests/runtime"
  [tuner]="hidet_framework/tuner/*.py|tests/tuner tests/plugins/example"
  [cpu_parallel_math]="hidet_plugin_cpu/parallel.py hidet_plugin_cpu/thread_pool.py hidet_plugin_cpu/vector_math.py|tests/plugins/cpu/test_thread_pool.py tests/plugins/cpu/test_thread_pool_boundaries.py tests/plugins/cpu/test_parallel_semantics.py tests/plugins/cpu/test_vector_math.py tests/plugins/cpu/test_vector_math_boundaries.py tests/plugins/cpu/test_codegen_source.py tests/plugins/cpu/test_codegen_kernels.py tests/plugins/cpu/test_codegen_boundaries.py tests/plugins/cpu/test_codegen_semantics.py tests/plugins/cpu/test_dsl_kernels.py"
  [cpu_codegen]="hidet_plugin_cpu/codegen.py hidet_framework/backend/c_style.py hidet_framework/backend/c_style_expr.py|tests/plugins/cpu/test_codegen_source.py tests/plugins/cpu/test_codegen_boundaries.py tests/plugins/cpu/test_codegen_semantics.py tests/plugins/cpu/test_codegen_kernels.py tests/plugins/cpu/test_bf16_ties_and_zero_size.py tests/plugins/cpu/test_dsl_kernels.py tests/plugins/cpu/test_vector_math.py tests/plugins/cpu/test_call_time_checks.py tests/plugins/cpu/test_thread_pool.py tests/backend/test_signature.py tests/backend/test_naming.py"
)
# extra pytest arguments per group. graph and compute: the evaluator run of the twenty-op
# model takes 35 of the 49 s that the graph tests need, and every mutant of a core
# function that survives would pay it; its cpu run (same graph, same passes) stays in.
slow_model="--deselect tests/graph/test_ops_graph.py::test_twenty_op_graph_matches_numpy[evaluator]"
declare -A MUTATION_PYTEST_ARGS=(
  [graph]="$slow_model"
  [compute]="$slow_model"
)
ORDER=(simplifier analysis mapping ir compute fusion graph tuner cpu_codegen cpu_parallel_math)
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
  read -r -a wanted <<<"${spec#*|}"
  read -r -a extra <<<"${MUTATION_PYTEST_ARGS[$group]:-}"
  tests=()
  for t in "${wanted[@]}"; do [ -e "$repo/$t" ] && tests+=("$t"); done
  work=$(mktemp -d "${TMPDIR:-/tmp}/hidet-mutation-$group-XXXXXX")
  [ "${MUTATION_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
  (cd "$repo" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) | tar -C "$work" -xf -
  # mutmut names a mutant after its path from the root, and matches it against the
  # module name the tests import (hidet_plugin_cpu.codegen, not plugins.hidet_plugin_cpu
  # .src...): the cpu plugin's package is mutated from a copy at the root, which also
  # comes first on the tests' sys.path (mutants/), ahead of the installed one
  cp -r "$work/plugins/hidet_plugin_cpu/src/hidet_plugin_cpu" "$work/hidet_plugin_cpu"
  # mutmut copies these folders (and tests/) into mutants/ and mutates what only_mutate names
  cat >>"$work/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = ["hidet_framework/", "hidet_plugin_cpu/"]
only_mutate = [$(toml_list "${globs[@]}")]
pytest_add_cli_args = ["-q", "-x", "-n", "0", "-p", "no:cacheprovider", "-m", "not bigmem and not cuda and not nvcc"${extra[0]:+, $(toml_list "${extra[@]}")}]
pytest_add_cli_args_test_selection = [$(toml_list "${tests[@]}")]
timeout_multiplier = ${MUTATION_TIMEOUT_MULTIPLIER:-5}
EOF
  echo "== $group: mutating ${globs[*]} against ${tests[*]}${sample:+ (sample of $sample, seed $seed)}"
  started=$(date +%s)
  (
    cd "$work"
    # a build cache that outlives the scratch copy (MUTATION_CACHE) saves recompiling
    # the C of every unchanged kernel on the next run; entries are keyed by their source
    export HIDET_FRAMEWORK_CACHE="${MUTATION_CACHE:-$work/.hf-cache}" HIDET_FRAMEWORK_QUIET=1
    # mutmut forks each mutant from a process that has run the tests: with an OpenMP
    # thread pool alive in it, a forked child that runs a compiled kernel waits forever
    # on the pool's lock (seen: mutants asleep for ten minutes with no CPU time, which
    # mutmut's CPU-time limit never ends). One thread: no pool, no deadlock.
    export OMP_NUM_THREADS=1
    names=()
    if [ -n "$sample" ]; then
      # generate the mutants and trace the tests once (no mutant matches this name, so
      # mutmut stops there), then draw the sample from every mutant generated
      nice -n "$niceness" "$mutmut" run "no-such-mutant-sample-only" >"$out/$group.log" 2>&1 || true
      python3 - "$sample" "$seed" >"$out/$group-sample.txt" <<'EOF'
import json, pathlib, random, sys
keys = sorted(k for p in pathlib.Path("mutants").rglob("*.meta")
              for k in json.loads(p.read_text()).get("exit_code_by_key", {}))
random.Random(int(sys.argv[2])).shuffle(keys)
print("\n".join(sorted(keys[:int(sys.argv[1])])))
print(f"sampled {min(len(keys), int(sys.argv[1]))} of {len(keys)} mutants", file=sys.stderr)
EOF
      mapfile -t names <"$out/$group-sample.txt"
    fi
    nice -n "$niceness" "$mutmut" run --max-children "$jobs" "${names[@]}" >>"$out/$group.log" 2>&1 || true
    "$mutmut" export-cicd-stats >>"$out/$group.log" 2>&1 || true
    "$mutmut" results >"$out/$group-survivors.txt" 2>/dev/null || true
    # the diffs of the survivors, for judging them
    : >"$out/$group-diffs.txt"
    sed -n 's/^ *\([^ :]*\): \(survived\|no tests\)$/\1/p' "$out/$group-survivors.txt" | while read -r m; do
      "$mutmut" show "$m" >>"$out/$group-diffs.txt" 2>&1 || true
    done
    python3 - "$out/$group-stats.json" "${names[@]}" <<'EOF'
import json, pathlib, sys
# count over the mutants run (all of them, or the sample): mutmut's own stats count
# every generated mutant, the unsampled ones as "not checked"
names = set(sys.argv[2:])
# mutmut's exit-code meanings (mutmut/stats.py); anything else is "suspicious"
status = {0: "survived", 1: "killed", 3: "killed", 5: "no_tests", 2: "interrupted", 33: "no_tests",
          34: "skipped", 35: "suspicious",
          36: "timeout", 37: "caught_by_type_check", -24: "timeout", 24: "timeout", 152: "timeout",
          255: "timeout", -11: "segfault", -9: "segfault", None: "not_checked"}
counts = {}
for p in pathlib.Path("mutants").rglob("*.meta"):
    for k, code in json.loads(p.read_text()).get("exit_code_by_key", {}).items():
        if names and k not in names:
            continue
        s = status.get(code, "suspicious")
        counts[s] = counts.get(s, 0) + 1
json.dump(counts, open(sys.argv[1], "w"), indent=1)
EOF
  )
  if [ "${MUTATION_KEEP:-0}" = 1 ]; then echo "   scratch copy kept: $work"; else rm -rf "$work"; trap - EXIT; fi
  python3 - "$out/$group-stats.json" "$group" "$(( $(date +%s) - started ))" "$sample" <<'EOF'
import json, sys
path, group, seconds, sample = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
try:
    s = json.load(open(path))
except (OSError, ValueError):
    print(f"{group}: no stats (see {path[:-len('-stats.json')]}.log)")
    raise SystemExit(0)
killed = s.get("killed", 0) + s.get("timeout", 0) + s.get("segfault", 0) + s.get("caught_by_type_check", 0)
judged = killed + s.get("survived", 0) + s.get("no_tests", 0)
score = 100.0 * killed / judged if judged else 0.0
print(f"{group}: {killed}/{judged} mutants killed ({score:.1f}%){' [sample]' if sample else ''}, "
      f"survived {s.get('survived', 0)}, no tests {s.get('no_tests', 0)}, not run {s.get('not_checked', 0)}, "
      f"suspicious {s.get('suspicious', 0)}; {seconds} s")
EOF
done | tee "$out/summary.txt"
python3 - "$out/summary.txt" <<'EOF'
import re, sys
k = j = 0
for line in open(sys.argv[1]):
    m = re.match(r"\S+: (\d+)/(\d+) mutants killed", line)
    if m:
        k, j = k + int(m[1]), j + int(m[2])
if j:
    print(f"total: {k}/{j} mutants killed ({100.0 * k / j:.1f}%) over the groups above")
EOF
