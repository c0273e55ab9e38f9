#!/usr/bin/env bash
# ab_env.sh: an A/B of environment settings (the backends' development switches, e.g.
# VLA_OPENCL_CP_FP64=0, VLA_OPENCL_CP_ACHUNK=32) on one forward series, in one call: for each
# row, vla-bench under every setting in turn, the whole round repeated --passes times (so that a
# drift of the machine falls on every setting alike), then the baseline backend once. Optionally
# vla-check under each setting first (--check) and one profiled call per setting and row after
# (--profile, VLA_OPENCL_PROFILE=1 / VLA_CUDA_KERNEL_TIMES=1: where the time goes).
#
# Results in OUT: ab.csv (every vla-bench row, the setting first), ab.md (per row and setting the
# mean of the passes' medians, the first setting's mean over each other's, and with a baseline
# each setting's mean over the baseline's), checks.txt, profile.txt. The table also goes to
# stdout; progress to stderr.
#
# Usage: bash benchmarks/ab_env.sh --build DIR --settings LIST [options]
#   --build DIR        the build folder holding tools/vla-bench (and tools/vla-check)
#   --settings LIST    settings separated by ';', each one or more VAR=VALUE separated by spaces
#                      (VALUE of letters, digits and . _ : / + -); "-" is the defaults (e.g.
#                      "-;VLA_OPENCL_CP_FP64=0;VLA_OPENCL_CP_ACHUNK=64"); AB_BUILD=DIR runs that
#                      setting with DIR's tools instead of --build's (two commits' builds, e.g.
#                      "-;AB_BUILD=/tmp/b0" with .baseline from fetch_device_deps.sh built there)
#   --rows LIST        B,H,d,T[,T...] separated by ';' (default "1,4,32,2048,8192,32768;8,16,64,2048,8192")
#   --backend NAME     the backend the settings apply to (default opencl:0:0)
#   --baseline NAME    timed once a row beside them, e.g. cuda; "none" for none (default none)
#   --mechanism M      (default vla)
#   --algo A           (default chunked)
#   --passes N         rounds over the settings (default 2)
#   --reps N           timed runs per point (default 7)
#   --warmup N         untimed runs before them (default 1)
#   --budget S         vla-bench's --budget per call (default 60)
#   --check            vla-check --backend NAME --mechanism M --algo A under each setting first
#   --profile          one call per setting and row with the kernel timers, into profile.txt
#   --out DIR          (default ab-out)
#   --env              source benchmarks/device_env.sh first (the GPU machine)
#   -h, --help         this text
# Exit status: 0 when every call gave its numbers (and every check passed), 1 otherwise, 2 on a
# bad command line. A call that gives no number leaves "-" in the table.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "ab_env.sh: $*" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BDIR="" SETTINGS="" ROWS="1,4,32,2048,8192,32768;8,16,64,2048,8192" BE=opencl:0:0 BASE=none
MECH=vla ALGO=chunked PASSES=2 REPS=7 WARM=1 BUDGET=60 CHECK=0 PROFILE=0 OUTD=ab-out SRC_ENV=0
while [ $# -gt 0 ]; do
  case $1 in
    --build | --settings | --rows | --backend | --baseline | --mechanism | --algo | --passes | --reps | --warmup | \
      --budget | --out) [ $# -ge 2 ] || die "$1 needs a value" ;;
  esac
  case $1 in
    --build) BDIR=$2; shift ;;
    --settings) SETTINGS=$2; shift ;;
    --rows) ROWS=$2; shift ;;
    --backend) BE=$2; shift ;;
    --baseline) BASE=$2; shift ;;
    --mechanism) MECH=$2; shift ;;
    --algo) ALGO=$2; shift ;;
    --passes) PASSES=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --warmup) WARM=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --check) CHECK=1 ;;
    --profile) PROFILE=1 ;;
    --out) OUTD=$2; shift ;;
    --env) SRC_ENV=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
for v in "$PASSES" "$REPS" "$WARM" "$BUDGET"; do
  [[ $v =~ ^[0-9]+$ ]] || die "'$v': --passes, --reps, --warmup and --budget take whole numbers"
done
((PASSES >= 1 && REPS >= 1 && BUDGET >= 1)) || die "--passes, --reps and --budget must be >= 1"
[ -n "$BDIR" ] || die "--build DIR is required"
[ -x "$BDIR/tools/vla-bench" ] || die "no $BDIR/tools/vla-bench (cmake --build $BDIR --target vla-bench)"
((CHECK == 0)) || [ -x "$BDIR/tools/vla-check" ] || die "--check: no $BDIR/tools/vla-check"
[ -n "$SETTINGS" ] || die "--settings is required"
SET_LIST=()
IFS=';' read -r -a _sets <<< "$SETTINGS"
for s in "${_sets[@]}"; do
  s=$(echo "$s" | xargs)
  [ -n "$s" ] || continue
  if [ "$s" != - ]; then
    for kv in $s; do
      [[ $kv =~ ^[A-Z_][A-Z0-9_]*=[A-Za-z0-9._:/+-]*$ ]] || die "--settings: '$kv' is not VAR=VALUE"
      [[ $kv != AB_BUILD=* ]] || [ -x "${kv#AB_BUILD=}/tools/vla-bench" ] || die "--settings: no ${kv#AB_BUILD=}/tools/vla-bench"
      [[ $kv != AB_BUILD=* ]] || ((CHECK == 0)) || [ -x "${kv#AB_BUILD=}/tools/vla-check" ] ||
        die "--check: no ${kv#AB_BUILD=}/tools/vla-check"
    done
  fi
  SET_LIST+=("$s")
done
((${#SET_LIST[@]} >= 1)) || die "--settings: no setting"
ROW_LIST=()
IFS=';' read -r -a _rows <<< "$ROWS"
for r in "${_rows[@]}"; do
  r=$(echo "$r" | xargs)
  [ -n "$r" ] || continue
  [[ $r =~ ^[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*(,[1-9][0-9]*)+$ ]] || die "--rows: '$r' is not B,H,d,T[,T...]"
  ROW_LIST+=("$r")
done
((${#ROW_LIST[@]})) || die "--rows: no row"
# shellcheck source=/dev/null
((SRC_ENV)) && source "$ROOT/benchmarks/device_env.sh"
mkdir -p "$OUTD" || die "cannot make $OUTD"

say() { echo "[ab_env $SECONDS s] $*" >&2; }
envs() { [ "$1" = - ] && return; echo "$1" | tr ' ' '\n' | grep -v '^AB_BUILD=' | tr '\n' ' '; } # as env arguments
bdir() { local kv; for kv in $1; do [[ $kv == AB_BUILD=* ]] && { echo "${kv#AB_BUILD=}"; return; }; done; echo "$BDIR"; }
tag() { echo "${1// /+}"; }                     # a setting as one CSV field and table header
TAGS=""
for s in "${SET_LIST[@]}"; do TAGS="$TAGS${TAGS:+,}$(tag "$s")"; done
[ "$BASE" = none ] || TAGS="$TAGS,baseline"
set -f # the settings' words go to env unglobbed
FAILED=0
CSV=$OUTD/ab.csv
echo "setting,backend,device,mechanism,algo,B,H,T,dk,dv,median_ms,min_ms,max_ms,tokens_per_s,gflops,gbps" > "$CSV"

if ((CHECK)); then
  : > "$OUTD/checks.txt"
  for s in "${SET_LIST[@]}"; do
    # shellcheck disable=SC2046
    out=$(env $(envs "$s") "$(bdir "$s")/tools/vla-check" --backend "$BE" --mechanism "$MECH" --algo "$ALGO" 2>&1)
    rc=$?
    { echo "\$ $s vla-check --backend $BE --mechanism $MECH --algo $ALGO"; echo "$out"; echo; } >> "$OUTD/checks.txt"
    say "check $s: $(echo "$out" | tail -n 1)"
    ((rc)) && FAILED=1
  done
fi

# bench SETTING_TAG BUILD BACKEND B H d TLIST [VAR=VALUE...]: one vla-bench call, its rows into
# ab.csv. A failed call or a point without a median (vla-bench skipped it: budget, memory) fails
# the run.
bench() {
  local tag=$1 bd=$2 be=$3 b=$4 h=$5 d=$6 t=$7
  shift 7
  local out rc rows timed
  out=$(env "$@" "$bd/tools/vla-bench" --backend "$be" --mechanism "$MECH" --algo "$ALGO" -B "$b" -H "$h" -d "$d" \
    -T "$t" -r "$REPS" --warmup "$WARM" --budget "$BUDGET" --output csv 2> "$OUTD/last-stderr.txt")
  rc=$?
  rows=$(echo "$out" | grep -v '^backend' | grep .)
  timed=$(echo "$rows" | awk -F, '$10 != ""' | grep -c .)
  if ((rc)) || [ "$timed" -ne "$(echo "$t" | tr ',' '\n' | grep -c .)" ]; then
    say "$tag $be ($b,$h,$d T=$t): exit $rc, $timed of the points timed: $(tail -n 1 "$OUTD/last-stderr.txt")"
    FAILED=1
  fi
  [ -z "$rows" ] || echo "$rows" | awk -v t="$tag" '{ print t "," $0 }' >> "$CSV"
}

for r in "${ROW_LIST[@]}"; do
  IFS=, read -r b h d t <<< "$r"
  for ((p = 1; p <= PASSES; p++)); do
    for s in "${SET_LIST[@]}"; do
      say "$b,$h,$d T=$t pass $p: $s"
      # shellcheck disable=SC2046
      bench "$(tag "$s")" "$(bdir "$s")" "$BE" "$b" "$h" "$d" "$t" $(envs "$s")
    done
  done
  if [ "$BASE" != none ]; then
    say "$b,$h,$d T=$t baseline $BASE"
    bench baseline "$BDIR" "$BASE" "$b" "$h" "$d" "$t"
  fi
done

if ((PROFILE)); then
  : > "$OUTD/profile.txt"
  for r in "${ROW_LIST[@]}"; do
    IFS=, read -r b h d t <<< "$r"
    for s in "${SET_LIST[@]}"; do
      echo "== $s: ($b,$h,$d) T = $t, one call after one warm-up (the sums cover both)" >> "$OUTD/profile.txt"
      # shellcheck disable=SC2046
      env $(envs "$s") VLA_OPENCL_PROFILE=1 VLA_CUDA_KERNEL_TIMES=1 "$(bdir "$s")/tools/vla-bench" --backend "$BE" \
        --mechanism "$MECH" --algo "$ALGO" -B "$b" -H "$h" -d "$d" -T "$t" -r 1 --warmup 1 --output csv 2>&1 |
        grep -Ei 'profile|kernel' >> "$OUTD/profile.txt"
    done
  done
fi
rm -f "$OUTD/last-stderr.txt"

# The table: per (row, T) and setting the mean of the medians (points without one left out; a
# setting with none reads "-"); ratios of the first setting's mean to each other's, and of each
# setting's to the baseline's.
{
  echo "# A/B of settings: $MECH $ALGO on $BE ($PASSES passes, -r $REPS --warmup $WARM; baseline: $BASE)"
  echo
  awk -F, -v tags="$TAGS" '
    BEGIN { ns = split(tags, sets, ","); first = sets[1]; hasb = sets[ns] == "baseline" }
    NR == 1 || $11 == "" { next }
    { key = $6 "," $7 "," $9 "," $8; sum[key, $1] += $11; n[key, $1]++
      if (!(key in seen)) { seen[key] = 1; keys[++nk] = key } }
    function mean(k, s) { return n[k, s] ? sum[k, s] / n[k, s] : -1 }
    function ratio(a, b) { return a > 0 && b > 0 ? sprintf(" %.3f |", a / b) : " - |" }
    END {
      printf "| B,H,d,T |"; for (j = 1; j <= ns; j++) printf " %s ms |", sets[j]
      for (j = 2; j <= ns - hasb; j++) printf " %s / %s |", first, sets[j]
      if (hasb) for (j = 1; j < ns; j++) printf " %s / baseline |", sets[j]
      printf "\n|---|"; for (j = 1; j <= ns; j++) printf "--:|"
      for (j = 2; j <= ns - hasb; j++) printf "--:|"
      if (hasb) for (j = 1; j < ns; j++) printf "--:|"
      printf "\n"
      for (i = 1; i <= nk; i++) {
        k = keys[i]; printf "| %s |", k
        for (j = 1; j <= ns; j++) { m = mean(k, sets[j]); if (m > 0) printf " %.4g |", m; else printf " - |" }
        for (j = 2; j <= ns - hasb; j++) printf "%s", ratio(mean(k, first), mean(k, sets[j]))
        if (hasb) for (j = 1; j < ns; j++) printf "%s", ratio(mean(k, sets[j]), mean(k, "baseline"))
        printf "\n"
      }
    }' "$CSV"
  echo
  echo "first / other above 1: the other setting is faster. Every row in ab.csv; \"-\": no number."
} | tee "$OUTD/ab.md"
exit $FAILED
