#!/usr/bin/env bash
# gpu_report.sh: libvla's GPU report in one device call (an H200 with 16 cores: about 8 minutes).
#
# Stages, in this order (each under its own `timeout`, none past the whole run's deadline; a
# stage that no longer fits is left out and says so):
#   build         Release, CMAKE_CUDA_ARCHITECTURES="75;90" (sm_75 and sm_90 code, as shipped),
#                 OpenCL on; every target; `vla-run --list-devices`
#   test_cuda     tests/test_cuda (CK_FORK=no): the CUDA backend against the CPU backend and float64
#   ctest         the CTest suite (less `cuda`, run just before), OpenCL on NVIDIA's driver
#   check_cuda    vla-check --backend cuda --hash
#   check_opencl  vla-check --backend opencl:0:0 --hash (the first OpenCL device: NVIDIA's driver there;
#                 PoCL beside it would take the stage's 90 s)
#   check_grad    vla-check --grad (the backward against ref64's float64 backward) on cuda and on
#                 opencl:0:0 (NVIDIA's driver; "opencl" alone takes PoCL too, past the stage's
#                 limit), every backward algorithm
#   targets       the speed-target table: vla-bench --targets --json (with the copy and GEMM rates)
#   gated         the VLA chunked target rows again behind a host hold (--gate US): the GPU's time
#   sweep         vla-bench --backend cuda at (B,H,d) = (1,4,32), T = 512..32768 (the paper's plot)
#   sdpa          PyTorch's causal SDPA at the target shapes (benchmarks/bench_sdpa.py)
#   backward      (--backward, or --only backward) forward + backward beside the forward alone:
#                 vla-bench --backend cuda --backward at (B,H,d) = (1,4,32), T = 2048, 8192, 32768
#                 and (8,16,64), T = 2048, 8192; then the peers' .peers/public_fwdbwd.py (SDPA,
#                 FLA's chunked IPLR and DeltaNet, fp32 and bf16) at the same shapes
#   train         (--train, or --only train) the training step, ms per step: vla-train on cuda
#                 and opencl per mechanism at MQAR n = 24, T = 73, batch 64
#                 (benchmarks/train_speed.sh), VLA's attention phases per call over a few steps
#                 (VLA_CUDA_KERNEL_TIMES=1: train-vla-phases.txt), then the paper's own step
#                 (.peers/paper_train_speed.py) at the same setting, and paper ms / ours ms
#   opencl_speed  (--opencl-speed, or --only opencl_speed) the OpenCL issue's speed table on
#                 NVIDIA's OpenCL beside CUDA (benchmarks/opencl_speed.sh), in opencl-speed/
#   throughput    (--throughput, or --only throughput) steps/s of 1, 4 and 8 vla-train processes
#                 on the GPU, plain and under MPS (benchmarks/train_throughput.sh), in throughput/
#   paper         (--paper, or --only paper) the paper's experiments (issue #37):
#                 benchmarks/reproduce_paper.sh --backend cuda within the stage's limit, its
#                 results kept in /tmp/vla-paper-results (a later call on a warm machine continues
#                 them) and copied, without checkpoints, to paper/ in the report
#   sanitizers    compute-sanitizer over vla-check --backend cuda: memcheck, racecheck one
#                 algorithm at a time, synccheck
#   jit75         a compute_75-only build (PTX, JIT-compiled by the driver: the T4's code on this
#                 GPU), built beside the sanitizers: test_cuda and vla-check --backend cuda
#   baseline      (--baseline DIR) a second source tree built beside the sanitizers; vla-check
#                 --hash on cuda and opencl compared with the stage above, case by case
#                 ("bit-identical: N/N cases")
#   peers         the public kernels (.peers/public_fwd.py: SDPA, FLA's chunked IPLR and
#                 DeltaNet), last: it gets what time is left, and no build runs beside it
# The timings come before the background builds, so that no build loads the host meanwhile.
#
# Results: a folder DATE-DEVICE-cuda-report (e.g. 2026-12-03-h200-cuda-report) with README.md
# (device, driver, nvcc, commit, the command, every stage's exit status, the headline tables) and
# the tables and logs (sanitizer logs xz-compressed), packed into OUT/report.tar.gz after every
# stage; OUT/summary.txt is written line by line, so a cut run still says how far it got. Unpack
# here with benchmarks/unpack_report.sh.
#
# Usage: bash benchmarks/gpu_report.sh [options]
#   --out DIR          where report.tar.gz and summary.txt go (default: $OUT, else ./gpu-out)
#   --name NAME        the report folder (default: DATE-DEVICE-cuda-report)
#   --commit HASH      the commit measured, for the README (default: $VLA_COMMIT, else git's;
#                      .git does not travel to the device machine)
#   --deadline S       the whole run's limit in seconds (default 525); stages shrink to fit
#   --arch LIST        CMAKE_CUDA_ARCHITECTURES of the main build (default "75;90")
#   --cmake-arg ARG    one more CMake argument for every build (repeatable; no spaces in ARG),
#                      e.g. -DCMAKE_CUDA_FLAGS=-DVLA_INV16_WARPS=8 for a variant
#   --jobs N           build jobs (default: nproc)
#   --gate US          host hold of the gated rows, microseconds (default 3000)
#   --peers LIST       comma-separated peers' scripts (default public_fwd.py; also public_fwdbwd.py)
#   --backward         add the backward stage (off by default; up to 360 s of the deadline)
#   --bwd-ab LIST      with the backward stage: after the default rows, the chunk form again under
#                      each VAR=VALUE of the comma-separated LIST (development switches, e.g.
#                      VLA_CUDA_APART=block,VLA_CUDA_BMM=simple), one at a time, in
#                      backward-B-H-d-VAR.md: an A/B within one call
#   --test-ab LIST     after test_cuda: its backward tcase again under each VAR=VALUE of the
#                      comma-separated LIST (development switches, e.g. VLA_CUDA_APART=segment), in
#                      test_cuda-backward-VAR.log
#   --train            add the train stage (off by default; up to 250 s of the deadline)
#   --opencl-speed     add the opencl_speed stage (off by default; up to 200 s)
#   --ocl-rows ROWS    its rows, B,H,d,T separated by ';' (default: opencl_speed.sh's, the issue's)
#   --throughput       add the throughput stage (off by default; up to 90 s)
#   --paper            add the paper stage (off by default; what is left of the deadline)
#   --paper-args ARGS  more reproduce_paper.sh flags for the paper stage, one string split at
#                      spaces (e.g. "--only table11,table9 --mechanisms vla"; --results DIR replaces
#                      /tmp/vla-paper-results)
#   --baseline DIR     a source tree to compare with bit for bit (e.g. .baseline from
#                      `fetch_device_deps.sh --baseline COMMIT`), built with the same --arch
#   --quick            build, test_cuda, ctest, the two vla-checks and the target table (--quick)
#   --only LIST        only these stages (comma-separated names above; build too, where one of
#                      them needs it)
#   --skip-tests       no test_cuda and no ctest     --skip-ctest      no ctest
#   --skip-check       neither vla-check             --skip-opencl     OpenCL off, no check_opencl
#   --skip-targets, --skip-gated, --skip-sweep, --skip-sdpa, --skip-peers, --skip-sanitizers,
#   --skip-jit         leave that stage out
#   --clean            remove the builds under /tmp/vla-gpu-build first (kept between calls on a
#                      warm machine, so a second call builds only what changed)
#   --no-env           do not source benchmarks/device_env.sh (done already, or not wanted)
#   --digest           print the source digest (sha256 of the sources that build libvla, as in
#                      the README) and exit: run it here to see that a report measured this tree
#   --dry-run          print the stages, their time limits and commands; run nothing
#   -h, --help         this text
#
# On the device (carry [".debs", ".whl", ".peers"], and ".baseline" with --baseline):
#   VLA_COMMIT=<hash> bash benchmarks/gpu_report.sh
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ARGS=("$@")
OUTDIR=${OUT:-$ROOT/gpu-out}
ENV_COMMIT=${VLA_COMMIT:-}
NAME="" COMMIT=$ENV_COMMIT DEADLINE=525 ARCH="75;90" JOBS=$(nproc 2> /dev/null || echo 8) GATE=3000
CMAKE_ARGS=() PEERS="public_fwd.py" BASELINE="" ONLY="" DRY=0 QUICK=0 NOENV=0 CLEAN=0 OPENCL=ON
STAGES=(build test_cuda ctest check_cuda check_opencl check_grad targets gated sweep sdpa backward train opencl_speed throughput paper sanitizers jit75 baseline peers)
declare -A SKIP=()
BWD_AB="" TEST_AB="" BACKWARD=0 TRAIN=0 PAPER=0 PAPER_ARGS="" OCLSPEED=0 OCL_ROWS="" THROUGHPUT=0

die() { echo "gpu_report.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUTDIR=${2:?--out needs a folder}; shift ;;
    --name) NAME=${2:?--name needs a name}; shift ;;
    --commit) COMMIT=${2:?--commit needs a hash}; shift ;;
    --deadline) DEADLINE=${2:?}; shift ;;
    --arch) ARCH=${2:?}; shift ;;
    --cmake-arg) CMAKE_ARGS+=("${2:?}"); shift ;;
    --jobs) JOBS=${2:?}; shift ;;
    --gate) GATE=${2:?}; shift ;;
    --peers) PEERS=${2:?}; shift ;;
    --baseline) BASELINE=${2:?--baseline needs a folder}; shift ;;
    --quick) QUICK=1 ;;
    --backward) BACKWARD=1 ;;
    --bwd-ab) BWD_AB=${2:?--bwd-ab needs VAR=VALUE[,...]}; shift ;;
    --test-ab) TEST_AB=${2:?--test-ab needs VAR=VALUE[,...]}; shift ;;
    --train) TRAIN=1 ;;
    --paper) PAPER=1 ;;
    --opencl-speed) OCLSPEED=1 ;;
    --ocl-rows) OCL_ROWS=${2:?--ocl-rows needs rows}; shift ;;
    --throughput) THROUGHPUT=1 ;;
    --paper-args) PAPER_ARGS=${2?--paper-args needs a string}; shift ;;
    --only) ONLY=${2:?--only needs stage names}; shift ;;
    --skip-tests) SKIP[test_cuda]=1 SKIP[ctest]=1 ;;
    --skip-ctest) SKIP[ctest]=1 ;;
    --skip-check) SKIP[check_cuda]=1 SKIP[check_opencl]=1 SKIP[check_grad]=1 ;;
    --skip-opencl) OPENCL=OFF SKIP[check_opencl]=1 ;;
    --skip-targets) SKIP[targets]=1 ;;
    --skip-gated) SKIP[gated]=1 ;;
    --skip-sweep) SKIP[sweep]=1 ;;
    --skip-sdpa) SKIP[sdpa]=1 ;;
    --skip-peers) SKIP[peers]=1 ;;
    --skip-sanitizers) SKIP[sanitizers]=1 ;;
    --skip-jit) SKIP[jit75]=1 ;;
    --clean) CLEAN=1 ;;
    --no-env) NOENV=1 ;;
    --digest) DIGEST_ONLY=1 ;;
    --dry-run) DRY=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[[ $DEADLINE =~ ^[0-9]+$ && $JOBS =~ ^[0-9]+$ && $GATE =~ ^[0-9]+$ ]] || die "--deadline, --jobs and --gate take whole numbers"
if [ "$QUICK" = 1 ]; then for s in gated sweep sdpa peers sanitizers jit75; do SKIP[$s]=1; done; fi
# The backward stage runs when asked for: --backward, or named in --only.
[ "$BACKWARD" = 1 ] || [[ ",$ONLY," == *",backward,"* ]] || SKIP[backward]=1
# So does the train stage: --train, or named in --only.
[ "$TRAIN" = 1 ] || [[ ",$ONLY," == *",train,"* ]] || SKIP[train]=1
# And opencl_speed, throughput and paper: their flag, or named in --only.
[ "$OCLSPEED" = 1 ] || [[ ",$ONLY," == *",opencl_speed,"* ]] || SKIP[opencl_speed]=1
[ "$THROUGHPUT" = 1 ] || [[ ",$ONLY," == *",throughput,"* ]] || SKIP[throughput]=1
[ "$PAPER" = 1 ] || [[ ",$ONLY," == *",paper,"* ]] || SKIP[paper]=1
if [ -n "$ONLY" ]; then
  for s in "${STAGES[@]}"; do [[ ",$ONLY," == *",$s,"* ]] || SKIP[$s]=1; done
  for s in ${ONLY//,/ }; do [[ " ${STAGES[*]} " == *" $s "* ]] || die "--only: no stage '$s' (${STAGES[*]})"; done
  SKIP[build]=""
  # sdpa, peers and jit75 need no main build.
  [[ ",$ONLY," =~ ,(test_cuda|ctest|check_cuda|check_opencl|check_grad|targets|gated|sweep|backward|train|opencl_speed|throughput|paper|sanitizers|baseline|build), ]] || SKIP[build]=1
fi
[ -n "$BASELINE" ] || SKIP[baseline]=1
cd "$ROOT" || exit 2
if [ -n "$BASELINE" ]; then
  [ -f "$BASELINE/CMakeLists.txt" ] || die "--baseline $BASELINE: no CMakeLists.txt there"
  BASELINE=$(cd "$BASELINE" && pwd)
fi

# The source digest: sha256 over the files that build and test libvla (the same here and on the
# device, where .git is absent).
digest() {
  find CMakeLists.txt cmake core backends kernels tools tests -type f ! -path '*/__pycache__/*' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}
if [ -n "${DIGEST_ONLY:-}" ]; then digest; exit 0; fi
[ -n "$COMMIT" ] || COMMIT=$(git -C "$ROOT" describe --always --dirty --abbrev=40 2> /dev/null || echo unknown)

# ---- places -------------------------------------------------------------------------------------
W=/tmp/vla-gpu-report           # scratch: stderr of the timings, raw sanitizer logs
BUILDS=/tmp/vla-gpu-build       # builds, kept between calls on a warm machine
B=$BUILDS/main B75=$BUILDS/jit75 BBASE=$BUILDS/baseline
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1)
SLUG=$(echo "${GPU:-gpu}" | tr '[:upper:]' '[:lower:]' | sed -e 's/^nvidia //' -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//')
NAME=${NAME:-$(date -u +%F)-${SLUG:-gpu}-cuda-report}
R=$W/$NAME                      # the report folder
SUM=$OUTDIR/summary.txt
START=$SECONDS RESERVE=10
ROWS=() RESULT="" LIM=0
GATED_SHAPES=()
for s in 1,4,32,2048 1,4,32,8192 1,4,32,32768 1,4,32,131072 8,16,64,2048 8,16,64,32768; do GATED_SHAPES+=(--shape "$s"); done
SWEEP_T=512,1024,2048,4096,8192,16384,32768
RACE_ALGOS=(chunked two-level scan sequential fused auto)

# ---- helpers ------------------------------------------------------------------------------------
# q WORD...: the words as a shell reads them back (quoted only where needed).
q() {
  local w out=""
  for w in "$@"; do
    if [[ $w =~ ^[A-Za-z0-9_./,:=+@%-]+$ ]]; then out+="$w "; else out+="'${w//\'/\'\\\'\'}' "; fi
  done
  echo "${out% }"
}
left() { echo $((DEADLINE - (SECONDS - START))); }
# lim CAP: CAP, or what is left before the deadline (less the packing reserve) if that is less.
lim() { local l=$(($(left) - RESERVE)); if ((l < $1)); then echo "$l"; else echo "$1"; fi; }
log() { echo "[$((SECONDS - START)) s] $*" | { if ((DRY)); then cat; else tee -a "$SUM"; fi; }; }
last() { tail -n 1 "$1" 2> /dev/null | tr -s ' '; }
first_error() { grep -m 1 -E 'error:|CMake Error|Terminated|Error [0-9]' "$1" 2> /dev/null | cut -c1-200; }
# x LIMIT STDOUT STDERR COMMAND...: COMMAND under timeout; STDERR "+" joins stdout.
x() {
  local l=$1 o=$2 e=$3
  shift 3
  if ((l < 1)); then
    ((DRY)) || echo "not run: no time left" > "$o"
    return 124
  fi
  if ((DRY)); then
    echo "    timeout $l $(q "$@") > ${o/#$R/REPORT}$([ "$e" = + ] && echo " 2>&1" || echo " 2> ${e/#$W/SCRATCH}")"
    return 0
  fi
  if [ "$e" = + ]; then timeout -k 10 "$l" "$@" > "$o" 2>&1; else timeout -k 10 "$l" "$@" > "$o" 2> "$e"; fi
}
# need FILE...: each exists (a binary of the build), else RESULT says so and it returns 127.
need() {
  ((DRY)) && return 0
  local f
  for f in "$@"; do [ -e "$f" ] || { RESULT="not built: ${f#"$BUILDS"/}"; return 127; }; done
}
# build_tree SRC BUILD ARCH OPENCL JOBS LOG LIMIT [TARGET...]: configure and build, under timeout.
build_tree() {
  local src=$1 bd=$2 arch=$3 ocl=$4 j=$5 lg=$6 l=$7
  shift 7
  local tg=()
  [ $# -gt 0 ] && tg=(--target "$@")
  if ((DRY)); then
    echo "    timeout $l: cmake -S $src -B $bd -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=\"$arch\" -DVLA_OPENCL=$ocl${CMAKE_ARGS[*]:+ ${CMAKE_ARGS[*]}} &&"
    echo "      cmake --build $bd -j$j ${tg[*]} > ${lg/#$R/REPORT} 2>&1"
    return 0
  fi
  # A build folder configured from another source tree is started afresh.
  if [ -e "$bd/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$bd/CMakeCache.txt"; then rm -rf "$bd"; fi
  # shellcheck disable=SC2016 # the arguments expand in the inner shell
  local sh='cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$3" -DVLA_OPENCL="$4" $VLA_CMAKE_ARGS &&
    cmake --build "$2" -j"$5" "${@:6}"'
  x "$l" "$lg" + env VLA_CMAKE_ARGS="${CMAKE_ARGS[*]}" bash -c "$sh" build "$src" "$bd" "$arch" "$ocl" "$j" "${tg[@]}"
}

# sublim CAP: CAP, or what is left of the stage's limit or before the deadline if that is less.
sublim() {
  local l s=$((LIM - (SECONDS - STAGE_T0)))
  l=$(lim "$1")
  if ((s < l)); then echo "$s"; else echo "$l"; fi
}
# stage NAME CAP FUNCTION: runs FUNCTION with LIM set, records its exit status and RESULT.
stage() {
  local name=$1 cap=$2 fn=$3 t0=$SECONDS rc
  STAGE_T0=$SECONDS
  if [ -n "${SKIP[$name]:-}" ]; then
    ROWS+=("$name|-|0|skipped")
    log "$name: skipped"
    return 0
  fi
  LIM=$(lim "$cap")
  if ((LIM < 5)); then
    ROWS+=("$name|-|0|left out: $(left) s left of the ${DEADLINE} s deadline")
    log "$name: left out ($(left) s left)"
    return 0
  fi
  RESULT=""
  if ((DRY)); then
    echo "stage $name (limit $LIM s):"
    "$fn"
    return 0
  fi
  "$fn"
  rc=$?
  ((rc == 124 || rc == 137)) && RESULT="timed out after $LIM s${RESULT:+; $RESULT}"
  ROWS+=("$name|$rc|$((SECONDS - t0))|$RESULT")
  log "$name: exit $rc ($((SECONDS - t0)) s)${RESULT:+: $RESULT}"
  pack
}

# ---- the stages ---------------------------------------------------------------------------------
st_build() {
  build_tree "$ROOT" "$B" "$ARCH" "$OPENCL" "$JOBS" "$R/build.log" "$LIM"
  local rc=$?
  ((DRY)) || RESULT="$(grep -E 'libvla: (cuda|opencl) backend|CPU BLAS|CLBlast' "$R/build.log" | sed 's/.*libvla: //' | sort -u | tr '\n' ';' | sed 's/;$//'); $(grep -c -i 'warning' "$R/build.log") lines with 'warning'"
  ((rc == 0)) || { RESULT="$RESULT; $(first_error "$R/build.log")"; return $rc; }
  x 30 "$R/devices.txt" + "$B/tools/vla-run" --list-devices
  return $rc
}
st_test_cuda() {
  need "$B/tests/test_cuda" || return
  x "$LIM" "$R/test_cuda.log" + env CK_FORK=no "$B/tests/test_cuda"
  local rc=$? sw r
  RESULT=$(last "$R/test_cuda.log")
  for sw in ${TEST_AB//,/ }; do # the backward tcase under each switch, within the stage's limit
    [[ $sw == *=* ]] || { RESULT="$RESULT; --test-ab: '$sw' is not VAR=VALUE"; continue; }
    x "$(sublim 60)" "$R/test_cuda-backward-${sw%%=*}.log" + env CK_FORK=no CK_RUN_CASE=backward "$sw" "$B/tests/test_cuda"
    r=$?
    ((r == 0)) || rc=$r
    RESULT="$RESULT; $sw backward: $(last "$R/test_cuda-backward-${sw%%=*}.log")"
  done
  return $rc
}
st_ctest() {
  need "$B/CTestTestfile.cmake" || return
  local ct
  ct=$(command -v ctest || echo "$(dirname "$(command -v cmake)")/ctest")
  x "$LIM" "$R/ctest.log" + "$ct" --test-dir "$B" -j 8 --output-on-failure --timeout "$LIM" -E '^cuda$'
  local rc=$?
  RESULT=$(grep -E 'tests passed|tests failed' "$R/ctest.log" 2> /dev/null | tr -s ' ')
  [ -n "$RESULT" ] || RESULT="$(grep -c ' Passed ' "$R/ctest.log" 2> /dev/null) passed, $(grep -cE '\*\*\*|Failed ' "$R/ctest.log" 2> /dev/null) failed when it stopped"
  return $rc
}
st_check_cuda() {
  need "$B/tools/vla-check" || return
  x "$LIM" "$R/vla-check-cuda.txt" + "$B/tools/vla-check" --backend cuda --hash
  local rc=$?
  RESULT=$(last "$R/vla-check-cuda.txt")
  return $rc
}
st_check_opencl() {
  need "$B/tools/vla-check" || return
  x "$LIM" "$R/vla-check-opencl.txt" + "$B/tools/vla-check" --backend opencl:0:0 --hash
  local rc=$?
  RESULT="$(head -n 1 "$R/vla-check-opencl.txt" 2> /dev/null | cut -c1-100): $(last "$R/vla-check-opencl.txt")"
  return $rc
}
st_check_grad() {
  need "$B/tools/vla-check" || return
  x "$LIM" "$R/vla-check-grad-cuda.txt" + "$B/tools/vla-check" --grad --backend cuda
  local rc=$?
  local oc=0
  if [ "$OPENCL" = ON ]; then
    x "$LIM" "$R/vla-check-grad-opencl.txt" + "$B/tools/vla-check" --grad --backend opencl:0:0
    oc=$?
  fi
  RESULT="cuda: $(last "$R/vla-check-grad-cuda.txt"); opencl: $(last "$R/vla-check-grad-opencl.txt" 2> /dev/null)"
  ((rc)) && return $rc
  return $oc
}
# The speed-target table: every call of it goes through this one command.
TARGETS=("$B/tools/vla-bench" --targets)
st_targets() {
  need "$B/tools/vla-bench" || return
  local qk=()
  ((QUICK)) && qk=(--quick)
  x "$LIM" "$R/targets.md" "$W/targets.err" "${TARGETS[@]}" "${qk[@]}" --json "$R/targets.json"
  local rc=$?
  RESULT="$(grep -c '^|' "$R/targets.md" 2> /dev/null) table rows; $(last "$W/targets.err")"
  return $rc
}
st_gated() {
  need "$B/tools/vla-bench" || return
  x "$LIM" "$R/gated.md" "$W/gated.err" "${TARGETS[@]}" --no-limits --gate "$GATE" --only vla-chunked \
    "${GATED_SHAPES[@]}" --json "$R/gated.json"
  local rc=$?
  RESULT="--gate $GATE; $(last "$W/gated.err")"
  return $rc
}
st_sweep() {
  need "$B/tools/vla-bench" || return
  x "$LIM" /dev/null "$W/sweep.err" "$B/tools/vla-bench" --backend cuda -T "$SWEEP_T" -B 1 -H 4 -d 32 -r 10 \
    --budget $((LIM > 20 ? LIM - 10 : LIM)) --save "$R/vla-bench-cuda"
  local rc=$?
  RESULT="VLA chunked: $(grep -m 1 -E '^\| vla \| chunked \|' <(sed -n '/^### Summary/,$p' "$R/vla-bench-cuda.md" 2> /dev/null) |
    cut -d'|' -f4-5 | tr -s ' ')"
  return $rc
}
# Python (PyTorch) without the Debian prefix's libraries ahead of its own.
PY=(env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3)
# The backward stage: vla-bench --backward at each shape (B H d T-list), then the peers' forward +
# backward (public_fwdbwd.py, whose shapes are these). Files: backward-B-H-d.{md,csv,json},
# backward-peers.txt (its stdout) and backward-peers.csv.
BWD_SHAPES=("1 4 32 2048,8192,32768" "8 16 64 2048,8192")
st_backward() {
  need "$B/tools/vla-bench" || return
  local sh b h d t tag l rc=0 r n src="" dir
  for sh in "${BWD_SHAPES[@]}"; do
    read -r b h d t <<< "$sh"
    tag=$b-$h-$d
    l=$(sublim 75)
    x "$l" /dev/null "$W/backward-$tag.err" "$B/tools/vla-bench" --backend cuda --backward -T "$t" -B "$b" -H "$h" \
      -d "$d" -r 10 --budget $((l > 20 ? l - 10 : (l > 1 ? l - 1 : 1))) --save "$R/backward-$tag"
    r=$?
    ((r == 0)) || rc=$r
    n=$(awk -F, 'NR > 1 && $10 != ""' "$R/backward-$tag.csv" 2> /dev/null | wc -l)
    RESULT="$RESULT($b,$h,$d) exit $r, $n points measured ($(last "$W/backward-$tag.err" | cut -c1-80)); "
  done
  # The A/B: the chunk form under each switch, the same shapes, right after the default rows.
  local sw
  for sw in ${BWD_AB//,/ }; do
    [[ $sw == *=* ]] || { RESULT="${RESULT}--bwd-ab: '$sw' is not VAR=VALUE; "; continue; }
    for sh in "${BWD_SHAPES[@]}"; do
      read -r b h d t <<< "$sh"
      tag=$b-$h-$d-${sw%%=*}
      l=$(sublim 60)
      x "$l" /dev/null "$W/backward-$tag.err" env "$sw" "$B/tools/vla-bench" --backend cuda --backward --algo chunked \
        -T "$t" -B "$b" -H "$h" -d "$d" -r 10 --budget $((l > 20 ? l - 10 : (l > 1 ? l - 1 : 1))) --save "$R/backward-$tag"
      r=$?
      ((r == 0)) || rc=$r
      RESULT="$RESULT$sw ($b,$h,$d) exit $r; "
    done
  done
  for dir in "$ROOT/.peers" "$ROOT/../shared/peers" "$ROOT/shared/peers"; do
    [ -f "$dir/public_fwdbwd.py" ] && src=$dir/public_fwdbwd.py && break
  done
  if [ -z "$src" ] && ((!DRY)); then
    RESULT="${RESULT}public_fwdbwd.py: not in .peers/ (fetch_device_deps.sh; carry .peers)"
    return 127
  fi
  ((DRY)) || mkdir -p "$W/bwd-peers"
  x "$(sublim 120)" "$R/backward-peers.txt" + env OUT="$W/bwd-peers" "${PY[@]}" "${src:-.peers/public_fwdbwd.py}"
  r=$?
  ((DRY)) || cp "$W/bwd-peers/peers_bwd.csv" "$R/backward-peers.csv" 2> /dev/null
  ((r == 0)) || rc=$r
  RESULT="${RESULT}public_fwdbwd.py exit $r, $(grep -c -E ',[0-9.]+$' "$R/backward-peers.txt" 2> /dev/null) rows"
  return $rc
}
# The train stage: vla-train's step per mechanism on cuda and opencl (benchmarks/train_speed.sh,
# within its own budget), then the paper's step (paper_train_speed.py: 5 warm-up and 30 timed
# steps per mechanism, its batches made before the timing), then paper ms / ours ms. Files:
# train/ (train_speed.md, .csv, the blocks and each run's logs), train-paper.txt (the paper
# script's stdout), train-paper.csv (its CSV lines) and train-compare.md.
PAPER_TRAIN_ARGS=(--mech "softmax,linear,deltanet,vla" --npairs 24 --batch 64 --warmup 5 --steps 30)
st_train() {
  need "$B/tools/vla-train" || return
  local l bes=cuda rc=0 r src="" dir
  [ "$OPENCL" = OFF ] || bes=cuda,opencl
  l=$(sublim 150)
  # MECH:chunked (vla-train --algo chunked) beside AUTO: on CUDA AUTO takes the chunk form at the
  # trainer's T = 73 as well (the two rows should agree); OpenCL's backward has one form, so there
  # the rows differ in the forward only.
  x "$l" "$R/train-speed.log" + bash "$ROOT/benchmarks/train_speed.sh" --build "$B" --backends "$bes" \
    --mechanisms softmax,linear,linear:chunked,delta,delta:chunked,vla,vla:chunked,deltanet \
    --budget $((l > 20 ? l - 10 : (l > 1 ? l - 1 : 1))) --out "$R/train"
  rc=$?
  RESULT="vla-train exit $rc, $(grep -c ',ok$' "$R/train/train_speed.csv" 2> /dev/null) runs ok; "
  # Where VLA's attention time goes in a step: the chunked backward's phases per call, by events
  # (VLA_CUDA_KERNEL_TIMES=1; the forward's kernels too), over a few steps (train-vla-phases.txt).
  x "$(sublim 30)" "$R/train-vla-phases.txt" + env VLA_CUDA_KERNEL_TIMES=1 "$B/tools/vla-train" --backend cuda \
    --mechanism vla --task mqar --pairs 24 --batch 64 --seed 42 --steps 6 --log-every 3 --eval-batches 1 \
    --eval-batch 1 --ckpt-every 0 --out "$W/vla-phases"
  for dir in "$ROOT/.peers" "$ROOT/../shared/peers" "$ROOT/shared/peers"; do
    [ -f "$dir/paper_train_speed.py" ] && src=$dir/paper_train_speed.py && break
  done
  if [ -z "$src" ] && ((!DRY)); then
    # The comparison still comes, against TRAINER.md's figures.
    RESULT="${RESULT}paper_train_speed.py: not in .peers/ (fetch_device_deps.sh; carry .peers)"
    r=127
  else
    x "$(sublim 90)" "$R/train-paper.txt" "$W/train-paper.err" "${PY[@]}" "${src:-.peers/paper_train_speed.py}" "${PAPER_TRAIN_ARGS[@]}"
    r=$?
    RESULT="${RESULT}paper_train_speed.py exit $r"
  fi
  ((r == 0)) || rc=$r
  ((DRY)) && return 0
  grep -v '^#' "$R/train-paper.txt" 2> /dev/null | grep -E '^(mech,|[a-z]+,[0-9]+,)' > "$R/train-paper.csv"
  [ -s "$R/train/train_speed.csv" ] && train_compare "$R/train/train_speed.csv" "$R/train-paper.csv" > "$R/train-compare.md"
  RESULT="$RESULT, $(grep -c -v '^mech,' "$R/train-paper.csv") rows"
  return $rc
}
# The opencl_speed stage: benchmarks/opencl_speed.sh --profile within the stage's limit (its own
# deadline 10 s short of it); its table, CSV, SGEMM rate and per-kernel profile in opencl-speed/, its raw vla-bench logs
# packed into opencl-speed/raw.tar.xz (a device call returns a bounded number of files).
st_opencl_speed() {
  need "$B/tools/vla-bench" || return
  local rows=()
  [ -n "$OCL_ROWS" ] && rows=(--rows "$OCL_ROWS")
  x "$LIM" "$R/opencl-speed.log" + bash "$ROOT/benchmarks/opencl_speed.sh" --build "$B" --out "$R/opencl-speed" \
    --deadline $((LIM > 20 ? LIM - 10 : 10)) --profile "${rows[@]}"
  local rc=$?
  ((DRY)) && return 0
  if [ -d "$R/opencl-speed/raw" ]; then
    tar -C "$R/opencl-speed" -cJf "$R/opencl-speed/raw.tar.xz" raw && rm -rf "$R/opencl-speed/raw"
  fi
  RESULT="$(grep -c '^| [0-9]' "$R/opencl-speed/opencl_speed.md" 2> /dev/null) table rows; $(last "$R/opencl-speed.log" | cut -c1-120)"
  return $rc
}
# The throughput stage: 1, 4 and 8 vla-train processes (VLA, MQAR n = 24, 100 steps each) side by
# side, plain and under MPS: whether the paper stage gains from --mps --jobs N on this GPU.
st_throughput() {
  need "$B/tools/vla-train" || return
  x "$LIM" "$R/throughput.log" + bash "$ROOT/benchmarks/train_throughput.sh" --build "$B" --procs 1,4,8 --steps 100 \
    --log-every 20 --out "$R/throughput"
  local rc=$?
  ((DRY)) && return 0
  [ -d "$R/throughput/runs" ] && tar -C "$R/throughput" -cJf "$R/throughput/runs.tar.xz" runs && rm -rf "$R/throughput/runs"
  RESULT=$(awk -F, '$7 == "ok" && $5 > b { b = $5; w = $1 " x" $2 } END { if (w != "") printf "best: %s, %.2fx one plain process", w, b }' \
    "$R/throughput/throughput.csv" 2> /dev/null)
  return $rc
}
# train_compare OURS PAPER: paper ms / ours ms per mechanism (ours: train_speed.csv; paper: the
# CSV lines of paper_train_speed.py; where it gave no number, TRAINER.md's H200 figures: 5.1, 118,
# 124 and 361 ms).
train_compare() {
  awk -F, 'BEGIN { ref["softmax"] = 5.1; ref["linear"] = 118; ref["deltanet"] = 124; ref["vla"] = 361
                   split("softmax linear deltanet delta vla", order, " ") }
    FNR == 1 { for (i = 1; i <= NF; i++) col[FILENAME, $i] = i; next }
    FILENAME == ARGV[1] { be = $col[FILENAME, "backend"]; ms = $col[FILENAME, "ms_per_step"]
      if (!(be in seen)) { seen[be] = 1; bes[++nb] = be }
      if (ms != "") ours[be, $col[FILENAME, "mechanism"]] = ms; next }
    { paper[$col[FILENAME, "mech"]] = $col[FILENAME, "ms_per_step"] }
    END {
      printf "| mechanism | paper'"'"'s code, ms/step |"; for (j = 1; j <= nb; j++) printf " vla-train %s, ms/step | paper / %s |", bes[j], bes[j]
      printf "\n|---|--:|"; for (j = 1; j <= nb; j++) printf "--:|--:|"; printf "\n"
      for (i = 1; i <= 5; i++) { m = order[i]; p = paper[m]; star = ""
        if (p == "" && m in ref) { p = ref[m]; star = " *" }
        printf "| %s | %s%s |", m == "delta" ? "delta (the standard DeltaNet: not in the paper)" : m, p == "" ? "-" : p, star
        for (j = 1; j <= nb; j++) { o = ours[bes[j], m]
          if (o == "" || p == "") printf " %s | - |", o == "" ? "-" : sprintf("%.3f", o)
          else printf " %.3f | %." (p < o ? 2 : 1) "fx |", o, p / o }
        printf "\n" }
      print ""
      print "paper: .peers/paper_train_speed.py in this run (its notebook 07 step in PyTorch, fp32, batches made"
      print "before the timing); * where it gave no number: TRAINER.md'"'"'s H200 figures (torch 2.11). ours: the"
      print "median ms/step of benchmarks/train_speed.sh (batch generation on the host inside the step)."
      print "deltanet is the paper'"'"'s DeltaNet (a gate per state row, no write strength); delta, the"
      print "standard DeltaNet (a write strength per head), is not in the paper and has no paper figure."
    }' "$1" "$2"
}
# The paper stage: benchmarks/reproduce_paper.sh on cuda with the stage's limit as its deadline,
# into PAPER_RES (kept between calls on a warm machine: a later call continues the runs not
# done); then its folder, less the checkpoints of cut runs, is copied to paper/ in the report
# (paper/tables.md: the tables; paper/README.md). Flags: --paper-args.
PAPER_RES=/tmp/vla-paper-results
st_paper() {
  need "$B/tools/vla-train" || return
  local l rc args=() res=$PAPER_RES i
  read -r -a args <<< "$PAPER_ARGS"
  for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[i]}" = --results ] && res=${args[i + 1]:-$res}; done
  l=$(sublim 600)
  x "$l" "$R/paper.log" + env VLA_COMMIT="$COMMIT" bash "$ROOT/benchmarks/reproduce_paper.sh" --build "$B" --backend cuda \
    --results "$res" --deadline $((l > 30 ? l - 15 : (l > 1 ? l - 1 : 1))) --no-plots "${args[@]}"
  rc=$?
  ((DRY)) && return 0
  rm -rf "$R/paper"
  if [ -d "$res" ]; then
    mkdir -p "$R/paper" && tar -C "$res" --exclude=checkpoint.bin -cf - . | tar -C "$R/paper" -xf -
  fi
  RESULT="reproduce_paper.sh exit $rc: $(grep -m 1 -o '^[0-9]* of [0-9]* planned runs done' "$R/paper/tables.md" 2> /dev/null || echo 'no tables.md')"
  return $rc
}
st_sdpa() {
  local qk=()
  ((QUICK)) && qk=(--quick)
  x "$LIM" "$R/sdpa.md" "$W/sdpa.err" "${PY[@]}" "$ROOT/benchmarks/bench_sdpa.py" "${qk[@]}" --json "$R/sdpa.json"
  local rc=$?
  RESULT="$(grep -c '^| (' "$R/sdpa.md" 2> /dev/null) rows"
  return $rc
}
st_peers() {
  local p src n rc=0 r
  for p in ${PEERS//,/ }; do
    src=""
    for d in "$ROOT/.peers" "$ROOT/../shared/peers" "$ROOT/shared/peers"; do [ -f "$d/$p" ] && src=$d/$p && break; done
    [ -n "$src" ] || ((DRY)) || { RESULT="$RESULT$p: not in .peers/ (fetch_device_deps.sh; carry .peers); "; rc=127; continue; }
    n=${p%.py}
    ((DRY)) || mkdir -p "$W/$n"
    x "$(sublim "$LIM")" "$R/peers-$n.txt" + env OUT="$W/$n" "${PY[@]}" "${src:-.peers/$p}"
    r=$?
    ((DRY)) || cp "$W/$n"/*.csv "$R/" 2> /dev/null
    ((r == 0)) || rc=$r
    RESULT="$RESULT$p exit $r, $(grep -c -E ',[0-9.]+$' "$R/peers-$n.txt" 2> /dev/null) rows; "
  done
  RESULT=${RESULT%; }
  return $rc
}
# Background builds (after the timings): the compute_75 JIT build and the baseline.
start_builds() {
  local j=$((JOBS > 2 ? JOBS / 2 : 1)) l
  l=$(lim 300)
  if [ -z "${SKIP[jit75]:-}" ] && ((l > 30)); then
    if ((DRY)); then
      echo "background build (jit75, limit $l s):"
      build_tree "$ROOT" "$B75" 75-virtual OFF "$j" "$W/build-jit75.log" "$l" test_cuda vla-check
    else
      build_tree "$ROOT" "$B75" 75-virtual OFF "$j" "$W/build-jit75.log" "$l" test_cuda vla-check &
      PID75=$!
    fi
  fi
  if [ -n "$BASELINE" ] && ((l > 30)); then
    if ((DRY)); then
      echo "background build (baseline $BASELINE, limit $l s):"
      build_tree "$BASELINE" "$BBASE" "$ARCH" "$OPENCL" "$j" "$W/build-baseline.log" "$l" vla-check
    else
      build_tree "$BASELINE" "$BBASE" "$ARCH" "$OPENCL" "$j" "$W/build-baseline.log" "$l" vla-check &
      PIDBASE=$!
    fi
  fi
}
# san TOOL LABEL CAP ARGS...: compute-sanitizer TOOL over vla-check --backend cuda ARGS.
san() {
  local tool=$1 label=$2 cap=$3 l rc line
  shift 3
  l=$(sublim "$cap")
  ((l >= 5)) || { ((DRY)) || echo "$tool ($label): left out (time)" >> "$R/sanitizers.txt"; SAN_BAD=$((SAN_BAD + 1)); return; }
  x "$l" "$W/san/$label.log" + "$CS" --tool "$tool" --error-exitcode 9 "$B/tools/vla-check" --backend cuda "$@"
  rc=$?
  ((DRY)) && return
  line="$tool ($label) exit $rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$W/san/$label.log" | tail -n 1 | tr -s ' =')"
  line="$line | vla-check: $(grep -E '[0-9]+ passed' "$W/san/$label.log" | tail -n 1)"
  echo "$line" >> "$R/sanitizers.txt"
  SAN_RUNS=$((SAN_RUNS + 1))
  if ((rc == 0)) && grep -Eq 'SUMMARY: 0 (errors|hazards)' "$W/san/$label.log"; then :; else SAN_BAD=$((SAN_BAD + 1)); fi
}
st_sanitizers() {
  need "$B/tools/vla-check" || return
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  SAN_RUNS=0 SAN_BAD=0
  ((DRY)) || { mkdir -p "$W/san" && : > "$R/sanitizers.txt"; }
  san memcheck memcheck-all 120
  local a
  for a in "${RACE_ALGOS[@]}"; do san racecheck "racecheck-$a" 90 --algo "$a"; done
  san synccheck synccheck-all 90
  ((DRY)) && return 0
  xz -9 -f "$W"/san/*.log 2> /dev/null
  tar -C "$W" -cf "$R/sanitizer-logs.tar" san 2> /dev/null
  RESULT="$((SAN_RUNS - SAN_BAD)) of $((1 + ${#RACE_ALGOS[@]} + 1)) runs clean (sanitizers.txt)"
  ((SAN_BAD == 0))
}
st_jit75() {
  if [ -n "${PID75:-}" ]; then wait "$PID75" || { RESULT="build failed: $(first_error "$W/build-jit75.log")"; return 1; }; fi
  need "$B75/tests/test_cuda" "$B75/tools/vla-check" || return
  x "$(sublim 120)" "$R/jit75-test_cuda.log" + env CK_FORK=no "$B75/tests/test_cuda"
  local r1=$?
  x "$(sublim 60)" "$R/jit75-vla-check-cuda.txt" + "$B75/tools/vla-check" --backend cuda
  local r2=$?
  RESULT="CMAKE_CUDA_ARCHITECTURES=75-virtual: test_cuda exit $r1: $(last "$R/jit75-test_cuda.log"); vla-check exit $r2: $(last "$R/jit75-vla-check-cuda.txt")"
  ((r1 == 0 && r2 == 0))
}
# compare NEW BASE: the cases of two vla-check --hash outputs, by case name and backend.
compare() {
  awk '($7 == "ok" || $7 == "FAIL") && length($12) == 16 && $12 ~ /^[0-9a-f]+$/ { k = $1 " " $2
         if (FNR == NR) { base[k] = $12; next } new[k] = $12 }
       END { n = 0; same = 0; only = 0
         for (k in new) { if (k in base) { n++; if (new[k] == base[k]) same++; else d[++nd] = k } else only++ }
         for (k in base) if (!(k in new)) gone++
         if (n == 0) { printf "no cases with hashes in both (%d in the new build, %d in the baseline)\n", only, gone; exit }
         printf "bit-identical: %d/%d cases", same, n
         if (only + gone) printf " (%d cases only in the new build, %d only in the baseline)", only, gone
         printf "\n"; for (i = 1; i <= nd && i <= 20; i++) print "  differs: " d[i] }' "$2" "$1"
}
st_baseline() {
  if [ -n "${PIDBASE:-}" ]; then wait "$PIDBASE" || { RESULT="build failed: $(first_error "$W/build-baseline.log")"; return 1; }; fi
  need "$BBASE/tools/vla-check" || return
  local be rc=0 r
  ((DRY)) || echo "baseline: $BASELINE ($(cat "$BASELINE/.commit" 2> /dev/null || echo 'commit not recorded'))" > "$R/baseline-compare.txt"
  for be in cuda opencl; do
    [ "$be" = opencl ] && [ "$OPENCL" = OFF ] && continue
    # The new build's hashes, where its check stage did not run.
    [ -s "$R/vla-check-$be.txt" ] || ((DRY)) || x "$(sublim 90)" "$R/vla-check-$be.txt" + "$B/tools/vla-check" --backend "$be" --hash
    x "$(sublim 90)" "$R/baseline-vla-check-$be.txt" + "$BBASE/tools/vla-check" --backend "$be" --hash
    r=$?
    ((DRY)) && continue
    if ((r != 0)); then rc=$r; fi
    echo "$be: $(compare "$R/vla-check-$be.txt" "$R/baseline-vla-check-$be.txt")" >> "$R/baseline-compare.txt"
  done
  ((DRY)) && return 0
  RESULT=$(grep -E '^(cuda|opencl):' "$R/baseline-compare.txt" | tr '\n' ';' | sed 's/;$//')
  return $rc
}

# ---- the README and the tarball -----------------------------------------------------------------
section() { # title file [filter command...]
  local title=$1 f=$2
  shift 2
  [ -s "$f" ] || return 0
  printf '\n## %s (%s)\n\n' "$title" "\`${f#"$R"/}\`"
  if [ $# -gt 0 ]; then "$@" < "$f"; else cat "$f"; fi
}
csv_table() { awk -F, 'NR == 1 { h = "|"; s = "|"; for (i = 1; i <= NF; i++) { h = h " " $i " |"; s = s "---|" } print h; print s; next }
  { r = "|"; for (i = 1; i <= NF; i++) r = r " " $i " |"; print r }'; }
sweep_summary() { sed -n '/^### Summary/,/fused-vs-sequential/p'; }
write_readme() {
  local row
  {
    echo "# libvla GPU report: ${GPU:-no GPU found}, $(date -u +%F)"
    echo
    echo "- Device: $(sed -n 's/^gpu: //p' "$R/env.txt" 2> /dev/null)"
    echo "- CUDA: $(sed -n 's/^nvcc: //p' "$R/env.txt" 2> /dev/null); $(sed -n 's/^cmake: //p' "$R/env.txt" 2> /dev/null); $(sed -n 's/^cc: //p' "$R/env.txt" 2> /dev/null)"
    echo "- Python: $(sed -n 's/^python: //p' "$R/env.txt" 2> /dev/null)"
    echo "- Commit: $COMMIT (source digest $(sed -n 's/^digest: //p' "$R/env.txt" 2> /dev/null): \`bash benchmarks/gpu_report.sh --digest\` on a checkout prints the same for the same tree)"
    echo "- Carried: $(cd "$ROOT" && for d in .debs .whl .peers .baseline; do [ -d "$d" ] && printf '%s ' "$d"; done)"
    echo "- Command (repository root, on the device): \`${ENV_COMMIT:+VLA_COMMIT=$ENV_COMMIT }bash benchmarks/gpu_report.sh$([ ${#ARGS[@]} -gt 0 ] && printf ' %s' "$(q "${ARGS[@]}")")\`"
    echo "- Build: Release, CMAKE_CUDA_ARCHITECTURES=\"$ARCH\", VLA_OPENCL=$OPENCL; the stages' limits within a ${DEADLINE} s deadline"
    echo "- Wall time so far: $((SECONDS - START)) s$([ -n "${FINISHED:-}" ] && echo ' (finished)' || echo ' (not finished: cut, or still running)')"
    echo
    echo "| stage | exit | seconds | result |"
    echo "|---|--:|--:|---|"
    for row in "${ROWS[@]}"; do echo "| ${row//|/ | } |"; done
    section "Speed targets" "$R/targets.md"
    section "Gated rows: the GPU's time alone (--gate $GATE)" "$R/gated.md"
    section "PyTorch SDPA (causal)" "$R/sdpa.md"
    local f
    for f in "$R"/peers*.csv; do [ -e "$f" ] && section "Public kernels (ms)" "$f" csv_table; done
    section "Scaling sweep at (1,4,32), the summary" "$R/vla-bench-cuda.md" sweep_summary
    for f in "$R"/backward-[0-9]*.md; do [ -e "$f" ] && section "Forward + backward (vla-bench --backward$(sed -n 's/^backward-[0-9]*-[0-9]*-[0-9]*-\(.*\)[.]md$/, the chunk form under \1/p' <<< "${f##*/}"))" "$f" sed -n '/^| backend |/,/^$/p'; done
    section "Public kernels, forward + backward (ms)" "$R/backward-peers.csv" csv_table
    section "Training step: vla-train (benchmarks/train_speed.sh)" "$R/train/train_speed.md" sed '1,2d'
    section "Training step: the paper's code (paper_train_speed.py)" "$R/train-paper.csv" csv_table
    section "Training step: paper ms / ours ms" "$R/train-compare.md"
    section "OpenCL against CUDA (benchmarks/opencl_speed.sh)" "$R/opencl-speed/opencl_speed.md"
    section "OpenCL per kernel (opencl_speed.sh --profile)" "$R/opencl-speed/profile.txt" sed 's/^/    /'
    section "Training processes side by side (benchmarks/train_throughput.sh)" "$R/throughput/throughput.md"
    section "The paper's experiments (benchmarks/reproduce_paper.sh)" "$R/paper/tables.md" sed '1,2d'
    section "compute-sanitizer over vla-check --backend cuda" "$R/sanitizers.txt" sed 's/^/    /'
    section "Against the baseline" "$R/baseline-compare.txt" sed 's/^/    /'
    printf '\n## Files\n\n'
    (cd "$R" && for f in *; do case $f in README.md*) ;; *) echo "- \`$f\`" ;; esac; done)
  } > "$R/README.md.tmp" && mv "$R/README.md.tmp" "$R/README.md"
}
pack() {
  ((DRY)) && return 0
  write_readme
  cp "$SUM" "$R/summary.txt" 2> /dev/null
  tar -C "$W" -czf "$OUTDIR/report.tar.gz.tmp" "$NAME" && mv "$OUTDIR/report.tar.gz.tmp" "$OUTDIR/report.tar.gz"
}

# ---- run ----------------------------------------------------------------------------------------
if ((DRY)); then
  echo "gpu_report.sh --dry-run: report folder $NAME, packed into $OUTDIR/report.tar.gz; deadline $DEADLINE s"
  echo "commit $COMMIT; REPORT = $R; SCRATCH = $W; builds in $BUILDS"
  [ "$NOENV" = 1 ] || echo "source benchmarks/device_env.sh"
else
  mkdir -p "$OUTDIR" && : > "$SUM" || exit 2
  rm -rf "$W" && mkdir -p "$R" || exit 2
  ((CLEAN)) && rm -rf "$BUILDS"
  mkdir -p "$BUILDS"
  if [ "$NOENV" = 0 ] && [ -z "${VLA_DEVICE_ENV:-}" ]; then
    # shellcheck source=device_env.sh disable=SC1091
    source "$ROOT/benchmarks/device_env.sh" 2> "$W/device_env.txt"
  fi
  {
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2> /dev/null || echo none)"
    echo "nvcc: $(nvcc --version 2> /dev/null | grep -m 1 release || echo none)"
    echo "cmake: $(cmake --version 2> /dev/null | head -n 1)"
    echo "cc: $(cc --version 2> /dev/null | head -n 1)"
    echo "python: $(timeout 60 env -u LD_LIBRARY_PATH python3 -c 'import sys, torch; v = [sys.version.split()[0], "torch " + torch.__version__]
try:
    import triton; v.append("triton " + triton.__version__)
    import fla; v.append("fla " + fla.__version__)
except Exception as e: v.append(repr(e)[:60])
print(", ".join(v))' 2>&1 | tail -n 1)"
    echo "digest: $(digest)"
    echo "commit: $COMMIT"
    echo "host: $(uname -sr), $(nproc) cores, $(free -g 2> /dev/null | awk '/^Mem/ {print $2 " GiB"}')"
    echo "device_env: $(tr '\n' ' ' < "$W/device_env.txt" 2> /dev/null)"
    nvidia-smi 2> /dev/null
  } > "$R/env.txt" 2>&1
  log "report $NAME; $(sed -n 's/^gpu: //p' "$R/env.txt"); $(sed -n 's/^nvcc: //p' "$R/env.txt"); commit $COMMIT"
fi

stage build 240 st_build
n_test_ab=$(awk -F, '{ print NF }' <<< "$TEST_AB") # 0 when empty
stage test_cuda $((150 + 60 * n_test_ab)) st_test_cuda
stage ctest 150 st_ctest
stage check_cuda 60 st_check_cuda
stage check_opencl 90 st_check_opencl
stage check_grad 120 st_check_grad
stage targets 150 st_targets
stage gated 90 st_gated
stage sweep 90 st_sweep
stage sdpa 90 st_sdpa
stage backward 360 st_backward
stage train 250 st_train
stage opencl_speed 200 st_opencl_speed
stage throughput 90 st_throughput
stage paper 600 st_paper
start_builds
stage sanitizers 360 st_sanitizers
stage jit75 200 st_jit75
stage baseline 200 st_baseline
wait
stage peers 150 st_peers

((DRY)) && exit 0
FINISHED=1
for f in "$W/build-jit75.log" "$W/build-baseline.log" "$W"/*.err; do [ -e "$f" ] && cp "$f" "$R/"; done
xz -9 -f "$R"/build*.log 2> /dev/null
log "done in $((SECONDS - START)) s: $OUTDIR/report.tar.gz ($NAME)"
pack
sed -n '/^| stage/,/^$/p' "$R/README.md"
