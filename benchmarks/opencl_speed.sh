#!/usr/bin/env bash
# opencl_speed.sh: issue #38's OpenCL speed table ("OpenCL: fast on GPUs") in one call, beside the
# CUDA backend on the same GPU. For each row (B, H, d, T), dk = dv = d, the median ms (vla-bench)
# of:
#   OpenCL VLA chunked     the chunk-parallel form (backends/opencl/ocl_chunkpar.c), run with
#                          VLA_OPENCL_CHUNKPAR_GPU=1 (its GPU form, many items a group; on a GPU
#                          that is the form --algo chunked takes anyway)
#   OpenCL VLA sequential
#   CUDA VLA chunked       where the build has the CUDA backend and a device; else "-"
#   OpenCL softmax rb      the register-blocked softmax_rb64/128 (kernels/opencl/softmax.cl),
#                          GPUs' default (forced with VLA_OPENCL_SOFTMAX_KERNEL=rb, and on
#                          other devices VLA_OPENCL_SOFTMAX_TILED=1); d > 128 falls back to
#                          softmax_fused; CSV algo "fused-rb"
#   OpenCL softmax fused   the tiled softmax_fused (VLA_OPENCL_SOFTMAX_KERNEL=fused), beside it
#   CUDA softmax (fused)
#   OpenCL linear and DeltaNet, chunked and sequential (--no-extras leaves them out)
# and, once, CLBlast's SGEMM rate on the OpenCL device (backends/opencl/bench_clblast.c, n x n x
# n up to n = 1024, compiled here with cc), which the GFLOP/s columns are set against.
#
# The issue's targets, per row: VLA chunked within 5x of CUDA VLA chunked (--ratio), VLA chunked
# faster than OpenCL VLA sequential, softmax (rb, the GPU default) within 5x of CUDA softmax. A target whose numbers
# are missing (CUDA absent, a point cut by its limit) reads "-", not pass.
#
# Timing: one vla-bench call per (row, series group): OpenCL VLA chunked; CUDA VLA chunked and
# softmax; OpenCL VLA sequential; OpenCL softmax; OpenCL softmax rb; OpenCL linear and DeltaNet. Each gets
# vla-bench's --budget (the row's time left or the deadline's, whichever is less; vla-bench
# skips a point whose first run shows the rest would not fit) under `timeout` (that budget plus
# 10 s, so a row may overrun --row-timeout by that much; the deadline holds). A point skipped for the budget is tried once more with -r 2 --warmup 1 when twice its
# first run still fits. vla-bench's medians are of host-timed calls (each call ends with the
# device's work done), after its warm-up runs.
#
# Usage: bash benchmarks/opencl_speed.sh --build DIR [options]
#   --build DIR        the build folder holding tools/vla-bench (a CUDA + OpenCL build on a GPU
#                      machine; an OpenCL-only build gives "-" in the CUDA columns)
#   --out DIR          where opencl_speed.md, opencl_speed.csv (every vla-bench row), sgemm.txt
#                      and raw/ (each call's CSV and stderr) go (default opencl-speed)
#   --rows LIST        rows B,H,d,T separated by spaces or ';' (default: the issue's
#                      "1,4,32,2048 1,4,32,8192 1,4,32,32768 8,16,64,2048 8,16,64,8192
#                      8,16,64,32768")
#   --reps N           timed runs per point (default 10)
#   --warmup N         untimed runs before them (default 2)
#   --row-timeout S    one row's limit in seconds, all its calls together (default 150)
#   --deadline S       the whole script's limit in seconds (default 540); a call that no longer
#                      fits is left out and says so
#   --opencl NAME      the OpenCL device (default opencl: the first OpenCL GPU, else the first
#                      device)
#   --cuda NAME        the CUDA device (default cuda; another backend's name puts it in the CUDA
#                      columns, e.g. cpu to try the script where there is no CUDA)
#   --ratio X          the "within X times CUDA" targets (default 5)
#   --no-extras        no linear and DeltaNet series
#   --no-cuda          no CUDA series (the columns read "-")
#   --no-sgemm         no CLBlast SGEMM rate
#   --profile          after the timed rows, in a quarter of the deadline (at most 90 s) kept
#                      back from them: per row, one more call each of OpenCL VLA chunked and
#                      sequential and softmax (-r 1 --warmup 1)
#                      with VLA_OPENCL_PROFILE=1, its per-kernel times (launches, ms) in
#                      OUT/profile.txt: where the time goes, not a timing
#   --cpu-form         leave VLA_OPENCL_CHUNKPAR_GPU and VLA_OPENCL_SOFTMAX_TILED unset: on a CPU
#                      device (PoCL) the series then time the CPU kernels (the chunk-parallel form
#                      with one item a group, softmax one row an item), as that device runs them
#   --env              source benchmarks/device_env.sh first (the GPU machine: CLBlast, the ICD
#                      loader and NVIDIA's OpenCL driver registered; skip where done already)
#   --commit HASH      the commit measured, for the header (default $VLA_COMMIT, else git's)
#   --dry-run          print the calls; run nothing
#   -h, --help         this text
# The markdown tables go to stdout and OUT/opencl_speed.md, progress to stderr. Exit status: 0
# when every target that could be judged passed, 1 when one failed or a series gave no number,
# 2 on a bad command line.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "opencl_speed.sh: $*" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BDIR="" OUTD=opencl-speed REPS=10 WARM=2 ROW_CAP=150 DEADLINE=540 OCL=opencl CUDA=cuda RATIO=5
ROWS="1,4,32,2048 1,4,32,8192 1,4,32,32768 8,16,64,2048 8,16,64,8192 8,16,64,32768"
EXTRAS=1 USE_CUDA=1 SGEMM=1 CP_GPU=1 SRC_ENV=0 DRY=0 PROFILE=0 COMMIT=${VLA_COMMIT:-}
while [ $# -gt 0 ]; do
  case $1 in
    --build) BDIR=${2:?--build needs a folder}; shift ;;
    --out) OUTD=${2:?--out needs a folder}; shift ;;
    --rows) ROWS=${2:?--rows needs a list}; shift ;;
    --reps) REPS=${2:?}; shift ;;
    --warmup) WARM=${2:?}; shift ;;
    --row-timeout) ROW_CAP=${2:?}; shift ;;
    --deadline) DEADLINE=${2:?}; shift ;;
    --opencl) OCL=${2:?}; shift ;;
    --cuda) CUDA=${2:?}; shift ;;
    --ratio) RATIO=${2:?}; shift ;;
    --no-extras) EXTRAS=0 ;;
    --no-cuda) USE_CUDA=0 ;;
    --no-sgemm) SGEMM=0 ;;
    --profile) PROFILE=1 ;;
    --cpu-form) CP_GPU=0 ;;
    --env) SRC_ENV=1 ;;
    --commit) COMMIT=${2:?}; shift ;;
    --dry-run) DRY=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
for v in "$REPS" "$WARM" "$ROW_CAP" "$DEADLINE"; do
  [[ $v =~ ^[0-9]+$ ]] || die "'$v': --reps, --warmup, --row-timeout and --deadline take whole numbers"
done
((REPS >= 1 && ROW_CAP >= 1 && DEADLINE >= 1)) || die "--reps, --row-timeout and --deadline must be >= 1"
[[ $RATIO =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--ratio '$RATIO' is not a number"
[ -n "$BDIR" ] || die "--build DIR is required (the build folder holding tools/vla-bench)"
BENCH=$BDIR/tools/vla-bench
[ -x "$BENCH" ] || ((DRY)) || die "no $BENCH (build it: cmake --build $BDIR --target vla-bench)"
ROW_LIST=()
for r in ${ROWS//;/ }; do
  [[ $r =~ ^[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*$ ]] || die "--rows: '$r' is not B,H,d,T"
  ROW_LIST+=("$r")
done
((${#ROW_LIST[@]})) || die "--rows: no row"
# shellcheck source=/dev/null
((SRC_ENV)) && source "$ROOT/benchmarks/device_env.sh"

T0=$SECONDS
left() { echo $((DEADLINE - (SECONDS - T0))); }
say() { echo "[opencl_speed $((SECONDS - T0)) s] $*" >&2; }
mkdir -p "$OUTD/raw" || die "cannot make $OUTD/raw"
CSV=$OUTD/opencl_speed.csv
echo "backend,device,mechanism,algo,B,H,T,dk,dv,median_ms,min_ms,max_ms,tokens_per_s,gflops,gbps" > "$CSV"
: > "$OUTD/raw/notes.txt"
NOTES=()

# bench_call TAG CAP BACKEND MECHS ALGOS B H d T [VAR=VALUE...]: one vla-bench call within CAP
# seconds; its CSV rows are appended to $CSV (the header once), their algo column replaced by
# $ALGO_AS where that is set (two kernels of one algorithm, told apart in the tables). A point skipped for the budget
# whose first run took X s is tried once more with -r 2 --warmup 1 when 2X + 5 s fits what is left.
bench_call() {
  local tag=$1 cap=$2 be=$3 mechs=$4 algos=$5 b=$6 h=$7 d=$8 t=$9
  shift 9
  local raw=$OUTD/raw/$tag reps=$REPS warm=$WARM try
  for try in 1 2; do
    local cmd=(env "$@" timeout -k 5 $((cap + 10)) "$BENCH" --backend "$be" --mechanism "$mechs" --algo "$algos"
      -B "$b" -H "$h" -d "$d" -T "$t" -r "$reps" --warmup "$warm" --budget "$cap" --output csv)
    if ((DRY)); then
      echo "${cmd[*]}"
      return 0
    fi
    say "$tag: ${cmd[*]:1}"
    local t1=$SECONDS
    "${cmd[@]}" > "$raw.csv" 2> "$raw.log"
    local rc=$?
    ((rc == 124 || rc == 137)) && NOTES+=("$tag: cut by its limit ($cap + 10 s)")
    # The measured rows, their first 15 fields (a call with a skipped point adds a note column).
    [ -s "$raw.csv" ] && tail -n +2 "$raw.csv" | awk -F, -v OFS=, -v lab="${ALGO_AS:-}" '$10 != "" { NF = 15; if (lab != "") $4 = lab; print }' >> "$CSV"
    grep -E ': (skipped|error)' "$raw.log" | sed 's/^\[ *[0-9.]* s\] //' | while read -r l; do echo "$tag: $l"; done >> "$OUTD/raw/notes.txt"
    local one
    one=$(sed -n 's/.*skipped: budget: one run took \([0-9.e+-]*\) s.*/\1/p' "$raw.log" | sort -g | tail -n 1)
    cap=$((cap - (SECONDS - t1)))
    if [ -z "$one" ] || ((try == 2)); then break; fi
    local need
    need=$(awk -v x="$one" 'BEGIN { printf "%d", 2 * x + 5.5 }')
    ((need <= cap)) || break
    reps=2 warm=1
    NOTES+=("$tag: one run took $one s; measured again with -r 2 --warmup 1")
  done
  return 0
}

# cap_for ROW_START: the next call's budget, the row's time left or the deadline's less 15 s (a
# call's `timeout` is its budget + 10 s; then the tables) and less the profile's share, whichever
# is less.
PROF_RESERVE=0
((PROFILE)) && PROF_RESERVE=$((DEADLINE / 4 < 90 ? DEADLINE / 4 : 90))
cap_for() {
  local r=$((ROW_CAP - (SECONDS - $1))) l=$(($(left) - 15 - PROF_RESERVE))
  ((l < r)) && r=$l
  echo "$r"
}

# ---- the devices, the driver, SGEMM ----
OCL_DEV="" OCL_NAME="" CUDA_DEV="" CUDA_NAME=""
if ((DRY)); then
  OCL_NAME=$OCL CUDA_NAME=$CUDA
else
  probe() { # probe BACKEND: "name|device" of a tiny call, or empty
    env VLA_OPENCL_CHUNKPAR_GPU=0 timeout 60 "$BENCH" --backend "$1" --mechanism linear --algo sequential -T 16 -r 1 \
      --warmup 0 --output csv 2> "$OUTD/raw/probe-${1//[^A-Za-z0-9]/-}.log" | awk -F, 'NR == 2 { print $1 "|" $2 }'
  }
  p=$(probe "$OCL")
  OCL_NAME=${p%%|*} OCL_DEV=${p#*|}
  [ -n "$p" ] || die "the OpenCL backend '$OCL' gave no result ($OUTD/raw/probe-*.log)"
  if ((USE_CUDA)); then
    p=$(probe "$CUDA")
    if [ -n "$p" ]; then
      CUDA_NAME=${p%%|*} CUDA_DEV=${p#*|}
    else
      USE_CUDA=0
      NOTES+=("CUDA: no result from '$CUDA' ($(head -c 200 "$OUTD/raw/probe-${CUDA//[^A-Za-z0-9]/-}.log" | tr '\n' ' ')): its columns read -")
    fi
  fi
fi
say "OpenCL: $OCL_NAME $OCL_DEV"
((USE_CUDA)) && say "CUDA: $CUDA_NAME $CUDA_DEV"

SGEMM_GF=""
if ((SGEMM && !DRY)); then
  sg=$OUTD/bench_clblast
  # shellcheck disable=SC2046
  if cc -O2 -std=c11 -DCL_TARGET_OPENCL_VERSION=120 "$ROOT/backends/opencl/bench_clblast.c" \
    $(pkg-config --cflags --libs clblast 2> /dev/null || echo -lclblast) -lOpenCL -lm -o "$sg" 2> "$OUTD/raw/sgemm-build.log"; then
    IFS=: read -r _ plat dev <<< "$OCL_NAME"
    say "CLBlast SGEMM on OpenCL platform ${plat:-0} device ${dev:-0}"
    timeout -k 5 60 "$sg" "$ROOT/kernels/opencl" "${plat:-0}" "${dev:-0}" sgemm > "$OUTD/sgemm.txt" 2> "$OUTD/raw/sgemm.log"
    SGEMM_GF=$(awk -F'|' 'NF >= 5 && $2 ~ /^ *[0-9]+ *$/ { g = $4 + 0; if (g > m) m = g } END { if (m > 0) printf "%.1f", m }' "$OUTD/sgemm.txt")
  else
    NOTES+=("CLBlast SGEMM: bench_clblast.c did not build ($OUTD/raw/sgemm-build.log)")
  fi
  [ -n "$SGEMM_GF" ] || NOTES+=("CLBlast SGEMM: no rate ($OUTD/raw/sgemm.log)")
fi

# ---- the rows ----
CPENV=()
((CP_GPU)) && CPENV=(VLA_OPENCL_CHUNKPAR_GPU=1 VLA_OPENCL_SOFTMAX_TILED=1)
for r in "${ROW_LIST[@]}"; do
  IFS=, read -r b h d t <<< "$r"
  rs=$SECONDS
  key="$b-$h-$d-$t"
  calls=("ocl-vla-chunked|$OCL|vla|chunked")
  ((USE_CUDA)) && calls+=("cuda-vla-softmax|$CUDA|vla,softmax|chunked")
  calls+=("ocl-vla-sequential|$OCL|vla|sequential" "ocl-softmax|$OCL|softmax|fused" "ocl-softmax-rb|$OCL|softmax|fused")
  ((EXTRAS)) && calls+=("ocl-linear-delta|$OCL|linear,delta|chunked,sequential")
  for c in "${calls[@]}"; do
    IFS='|' read -r tag be mechs algos <<< "$c"
    cap=$(cap_for "$rs")
    if ((!DRY && cap < 3)); then
      NOTES+=("$key $tag: left out ($(($(left) > 0 ? $(left) : 0)) s left of the deadline, row limit $ROW_CAP s)")
      say "$key $tag: left out, no time"
      continue
    fi
    ((DRY)) && cap=$ROW_CAP
    if [[ $tag == ocl-softmax-rb ]]; then
      ALGO_AS=fused-rb bench_call "$key-$tag" "$cap" "$be" "$mechs" "$algos" "$b" "$h" "$d" "$t" "${CPENV[@]}" \
        VLA_OPENCL_SOFTMAX_KERNEL=rb
    elif [[ $tag == ocl-softmax ]]; then
      bench_call "$key-$tag" "$cap" "$be" "$mechs" "$algos" "$b" "$h" "$d" "$t" "${CPENV[@]}" \
        VLA_OPENCL_SOFTMAX_KERNEL=fused
    elif [[ $tag == ocl-* ]]; then
      bench_call "$key-$tag" "$cap" "$be" "$mechs" "$algos" "$b" "$h" "$d" "$t" "${CPENV[@]}"
    else
      bench_call "$key-$tag" "$cap" "$be" "$mechs" "$algos" "$b" "$h" "$d" "$t"
    fi
  done
done

# ---- the per-kernel profile (--profile) ----
if ((PROFILE)); then
  PROF=$OUTD/profile.txt
  ((DRY)) || : > "$PROF"
  for r in "${ROW_LIST[@]}"; do
    IFS=, read -r b h d t <<< "$r"
    for c in "vla|chunked" "vla|sequential" "softmax|fused"; do
      IFS='|' read -r m a <<< "$c"
      cmd=(env "${CPENV[@]}" VLA_OPENCL_PROFILE=1 timeout -k 5 30 "$BENCH" --backend "$OCL" --mechanism "$m" --algo "$a"
        -B "$b" -H "$h" -d "$d" -T "$t" -r 1 --warmup 1 --budget 20 --output csv)
      if ((DRY)); then echo "${cmd[*]}"; continue; fi
      if (($(left) < 40)); then
        echo "## ($b,$h,$d) T = $t $m $a: left out, $(left) s left of the deadline" >> "$PROF"
        continue
      fi
      say "profile ($b,$h,$d) T = $t $m $a"
      {
        echo "## ($b,$h,$d) T = $t, OpenCL $m $a: per kernel, over one warm-up and one timed call"
        "${cmd[@]}" 2>&1 > /dev/null | grep 'profile:' | sed 's/^vla opencl profile: //'
        echo
      } >> "$PROF"
    done
  done
fi
((DRY)) && exit 0

# ---- the tables ----
# get BACKEND MECH ALGO B H d T FIELD (10 median_ms, 14 gflops): the value or empty.
get() {
  awk -F, -v be="$1" -v m="$2" -v a="$3" -v B="$4" -v H="$5" -v d="$6" -v T="$7" -v f="$8" \
    'be != "" && $1 == be && $3 == m && $4 == a && $5 == B && $6 == H && $8 == d && $7 == T && $f != "" { v = $f } END { print v }' "$CSV"
}
fmt() { [ -n "$1" ] && awk -v x="$1" 'BEGIN { if (x >= 100) printf "%.0f", x; else if (x >= 10) printf "%.1f", x; else printf "%.3g", x }' || echo "-"; }
div() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }' || echo "-"; }
# judge A B X: pass when A <= X * B, FAIL when not, "-" without both.
judge() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" -v x="$3" 'BEGIN { print (a <= x * b) ? "pass" : "FAIL" }' || echo "-"; }
faster() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { print (a < b) ? "pass" : "FAIL" }' || echo "-"; }
pct() {
  if [ -z "$1" ]; then echo "-"
  elif [ -z "$SGEMM_GF" ]; then fmt "$1"
  else awk -v g="$1" -v s="$SGEMM_GF" 'BEGIN { printf "%.1f (%.1f%%)", g, 100 * g / s }'; fi
}

MD=$OUTD/opencl_speed.md
fails=0 missing=0
{
  echo "# OpenCL speed (issue #38)"
  echo
  echo "- OpenCL: \`$OCL_NAME\` $OCL_DEV"
  if ((USE_CUDA)); then echo "- CUDA: \`$CUDA_NAME\` $CUDA_DEV"; else echo "- CUDA: none (its columns read -)"; fi
  if command -v nvidia-smi > /dev/null 2>&1; then
    echo "- nvidia-smi: $(nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv,noheader 2> /dev/null | paste -sd ';' -)"
  fi
  if command -v clinfo > /dev/null 2>&1; then
    echo "- OpenCL drivers (clinfo): $(clinfo 2> /dev/null | awk -F'  +' '/^  Device Name/ { n = $3 } /^  Driver Version/ { printf "%s%s: %s", s, n, $3; s = "; " }')"
  fi
  c=$COMMIT
  [ -n "$c" ] || c=$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)
  dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no 2> /dev/null | wc -l)
  echo "- commit $c$( ((dirty > 0)) && echo " (+$dirty changed files)"), build $BDIR, $(date -u +%Y-%m-%dT%H:%MZ), $(hostname)"
  echo "- vla-bench: median of $REPS runs after $WARM warm-up, host-timed; dk = dv = d;" \
    "OpenCL with VLA_OPENCL_CHUNKPAR_GPU=$CP_GPU VLA_OPENCL_SOFTMAX_TILED=$CP_GPU"
  echo "- CLBlast SGEMM (n x n x n, best n of 256, 512, 1024): ${SGEMM_GF:--} GFLOP/s"
  echo
  echo "| B,H,d | T | OCL VLA chunked ms | OCL VLA seq ms | CUDA VLA chunked ms | chunked / CUDA | chunked / seq | OCL softmax fused ms | OCL softmax rb ms | CUDA softmax ms | fused / CUDA | rb / CUDA | VLA <= ${RATIO}x CUDA | VLA chunked < seq | softmax <= ${RATIO}x CUDA |"
  echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|:-:|:-:|"
  for r in "${ROW_LIST[@]}"; do
    IFS=, read -r b h d t <<< "$r"
    oc=$(get "$OCL_NAME" vla chunked "$b" "$h" "$d" "$t" 10)
    os=$(get "$OCL_NAME" vla sequential "$b" "$h" "$d" "$t" 10)
    cc_=$(get "$CUDA_NAME" vla chunked "$b" "$h" "$d" "$t" 10)
    of=$(get "$OCL_NAME" softmax fused "$b" "$h" "$d" "$t" 10)
    orb=$(get "$OCL_NAME" softmax fused-rb "$b" "$h" "$d" "$t" 10)
    cf=$(get "$CUDA_NAME" softmax fused "$b" "$h" "$d" "$t" 10)
    j1=$(judge "$oc" "$cc_" "$RATIO") j2=$(faster "$oc" "$os") j3=$(judge "$orb" "$cf" "$RATIO")
    for j in "$j1" "$j2" "$j3"; do [ "$j" = FAIL ] && fails=$((fails + 1)); done
    for v in "$oc" "$os" "$of" "$orb"; do [ -n "$v" ] || missing=$((missing + 1)); done
    if ((USE_CUDA)); then for v in "$cc_" "$cf"; do [ -n "$v" ] || missing=$((missing + 1)); done; fi
    echo "| $b,$h,$d | $t | $(fmt "$oc") | $(fmt "$os") | $(fmt "$cc_") | $(div "$oc" "$cc_") | $(div "$oc" "$os") |" \
      "$(fmt "$of") | $(fmt "$orb") | $(fmt "$cf") | $(div "$of" "$cf") | $(div "$orb" "$cf") | $j1 | $j2 | $j3 |"
  done
  echo
  echo "GFLOP/s (vla-bench's FLOP counts; in brackets, of CLBlast's SGEMM rate):"
  echo
  if ((EXTRAS)); then
    echo "| B,H,d | T | OCL VLA chunked | OCL VLA seq | OCL softmax fused | OCL softmax rb | CUDA VLA chunked | OCL linear chunked / seq ms | OCL DeltaNet chunked / seq ms |"
    echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
  else
    echo "| B,H,d | T | OCL VLA chunked | OCL VLA seq | OCL softmax fused | OCL softmax rb | CUDA VLA chunked |"
    echo "|---|--:|--:|--:|--:|--:|--:|"
  fi
  for r in "${ROW_LIST[@]}"; do
    IFS=, read -r b h d t <<< "$r"
    line="| $b,$h,$d | $t | $(pct "$(get "$OCL_NAME" vla chunked "$b" "$h" "$d" "$t" 14)")"
    line+=" | $(pct "$(get "$OCL_NAME" vla sequential "$b" "$h" "$d" "$t" 14)") | $(pct "$(get "$OCL_NAME" softmax fused "$b" "$h" "$d" "$t" 14)")"
    line+=" | $(pct "$(get "$OCL_NAME" softmax fused-rb "$b" "$h" "$d" "$t" 14)")"
    line+=" | $(pct "$(get "$CUDA_NAME" vla chunked "$b" "$h" "$d" "$t" 14)")"
    if ((EXTRAS)); then
      for m in linear delta; do
        ch=$(get "$OCL_NAME" "$m" chunked "$b" "$h" "$d" "$t" 10) sq=$(get "$OCL_NAME" "$m" sequential "$b" "$h" "$d" "$t" 10)
        line+=" | $(fmt "$ch") / $(fmt "$sq") ($(div "$ch" "$sq"))"
      done
    fi
    echo "$line |"
  done
  echo
  echo "Targets (issue #38): VLA chunked within ${RATIO}x of CUDA VLA chunked and faster than OpenCL VLA" \
    "sequential at every row; softmax (the GPU default, softmax_rb) within ${RATIO}x of CUDA softmax." \
    "\"-\": not judged (a number missing)." \
    "FAIL: $fails; series without a number: $missing."
  if ((${#NOTES[@]})) || [ -s "$OUTD/raw/notes.txt" ]; then
    echo
    echo "Notes:"
    echo
    for n in "${NOTES[@]}"; do echo "- $n"; done
    [ -s "$OUTD/raw/notes.txt" ] && sed 's/^/- /' "$OUTD/raw/notes.txt"
  fi
  echo
  echo "CSV (every vla-bench row; also $CSV):"
  echo
  echo '```'
  cat "$CSV"
  echo '```'
} > "$MD"
cat "$MD"
say "done in $((SECONDS - T0)) s: $MD"
((fails == 0 && missing == 0))
