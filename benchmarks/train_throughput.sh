#!/usr/bin/env bash
# train_throughput.sh: how many training steps per second one GPU gives when P vla-train
# processes share it, with and without NVIDIA's Multi-Process Service (MPS). The paper's
# experiments are many small runs (TinyLM at T <= 145 leaves most of an H200 idle between
# launches), so this decides reproduce_paper.sh's --jobs and --mps.
#
# For each P in --procs and each mode (plain: the driver time-slices between processes; mps:
# their kernels run side by side), P identical runs (seeds 1..P, same mechanism and task) start
# together; each logs steps_per_s every --log-every steps; a process's ms/step is the median of
# 1000 / steps_per_s over its blocks after the first (the first holds start-up); the aggregate
# rate is the sum over processes of 1000 / ms_step. Ratio: aggregate / the plain P = 1 rate
# measured in the same call. Also printed: each mode's wall time of the whole group.
#
# Usage: bash benchmarks/train_throughput.sh --build DIR [options]
#   --build DIR        the build folder holding tools/vla-train
#   --backend NAME     vla-train's backend (default cuda)
#   --mechanism M      (default vla)
#   --pairs N          mqar pairs, T = 3N + 1 (default 24)
#   --steps N          steps per run (default 200)
#   --log-every K      (default 20)
#   --procs LIST       process counts (default 1,4,8)
#   --modes LIST       plain,mps (default both; mps needs nvidia-cuda-mps-control)
#   --out DIR          throughput.md, throughput.csv and runs/ (default train-throughput)
#   -h, --help         this text
# Exit status 0 when every group gave a rate, 1 when one did not, 2 on a bad command line.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "train_throughput.sh: $*" >&2; exit 2; }
val() { [ $# -ge 2 ] && [[ $2 != --* ]] || die "$1 needs a value"; echo "$2"; }

BDIR="" BACKEND=cuda MECH=vla PAIRS=24 STEPS=200 LOGE=20 PROCS=1,4,8 MODES=plain,mps OUTD=train-throughput
while [ $# -gt 0 ]; do
  case $1 in
    --build) BDIR=$(val "$@") || exit 2; shift ;;
    --backend) BACKEND=$(val "$@") || exit 2; shift ;;
    --mechanism) MECH=$(val "$@") || exit 2; shift ;;
    --pairs) PAIRS=$(val "$@") || exit 2; shift ;;
    --steps) STEPS=$(val "$@") || exit 2; shift ;;
    --log-every) LOGE=$(val "$@") || exit 2; shift ;;
    --procs) PROCS=$(val "$@") || exit 2; shift ;;
    --modes) MODES=$(val "$@") || exit 2; shift ;;
    --out) OUTD=$(val "$@") || exit 2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[ -n "$BDIR" ] || die "--build DIR is required"
TRAIN=$BDIR/tools/vla-train
[ -x "$TRAIN" ] || die "$TRAIN: not found (build first)"
for v in "$PAIRS" "$STEPS" "$LOGE"; do [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v': --pairs, --steps, --log-every take positive whole numbers"; done
[[ $PROCS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--procs: '$PROCS' is not a list of positive numbers"
for m in ${MODES//,/ }; do [[ $m == plain || $m == mps ]] || die "--modes: '$m' is not plain or mps"; done
((STEPS >= 3 * LOGE)) || die "--steps must be at least 3 x --log-every (blocks after the first)"
mkdir -p "$OUTD/runs" || die "cannot create $OUTD"

MPS_UP=0
mps_start() {
  command -v nvidia-cuda-mps-control > /dev/null || { echo "no nvidia-cuda-mps-control" >&2; return 1; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/vla-tp-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/vla-tp-mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || return 1
  MPS_UP=1
}
mps_stop() {
  ((MPS_UP)) || return 0
  echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
  sleep 1
  MPS_UP=0
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
trap mps_stop EXIT

# ms_of CSV: the median of 1000 / steps_per_s over the rows after the first.
ms_of() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "steps_per_s") c = i; next }
           c && $1 ~ /^[0-9]+$/ { n++; if (n > 1 && $c > 0) print 1000 / $c }' "$1" | sort -g |
    awk '{ v[NR] = $1 } END { if (!NR) exit 1; printf "%.3f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "mode,procs,ms_step_median_of_procs,aggregate_steps_per_s,ratio,wall_s,status" > "$OUTD/throughput.csv"
rc=0 base=""
for mode in ${MODES//,/ }; do
  if [ "$mode" = mps ] && ! mps_start; then
    echo "mps,-,-,-,-,-,MPS did not start" >> "$OUTD/throughput.csv"
    rc=1
    continue
  fi
  for p in ${PROCS//,/ }; do
    pids=() t0=$(date +%s.%N)
    for i in $(seq 1 "$p"); do
      d=$OUTD/runs/$mode-p$p-$i
      rm -rf "$d"
      "$TRAIN" --backend "$BACKEND" --mechanism "$MECH" --task mqar --pairs "$PAIRS" --steps "$STEPS" \
        --log-every "$LOGE" --seed "$i" --out "$d" > "$d.stdout" 2> "$d.stderr" &
      pids+=($!)
    done
    bad=0
    for pid in "${pids[@]}"; do wait "$pid" || bad=$((bad + 1)); done
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    sum=0 mss=()
    for i in $(seq 1 "$p"); do
      ms=$(ms_of "$OUTD/runs/$mode-p$p-$i/train.csv" 2> /dev/null) || { bad=$((bad + 1)); continue; }
      mss+=("$ms")
      sum=$(awk -v s="$sum" -v m="$ms" 'BEGIN { printf "%.3f", s + 1000 / m }')
    done
    if ((bad)); then
      echo "$mode,$p,-,-,-,$wall,$bad of $p runs failed ($(tail -n 1 "$OUTD/runs/$mode-p$p-1.stderr" 2> /dev/null | tr ',' ';' | cut -c1-120))" >> "$OUTD/throughput.csv"
      rc=1
      continue
    fi
    med=$(printf '%s\n' "${mss[@]}" | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    [ -z "$base" ] && [ "$mode" = plain ] && [ "$p" = 1 ] && base=$sum
    ratio=$([ -n "$base" ] && awk -v s="$sum" -v b="$base" 'BEGIN { printf "%.2f", s / b }' || echo -)
    echo "$mode,$p,$med,$sum,$ratio,$wall,ok" >> "$OUTD/throughput.csv"
    echo "[train_throughput] $mode P=$p: $med ms/step per process, $sum steps/s in all (x$ratio), $wall s" >&2
  done
  [ "$mode" = mps ] && mps_stop
done
{
  echo "vla-train $MECH, mqar n = $PAIRS, $STEPS steps, backend $BACKEND; ratio: aggregate steps/s over plain P = 1"
  echo
  echo "| mode | processes | ms/step (median of the processes' medians) | steps/s, all processes | ratio | wall s | status |"
  echo "|---|--:|--:|--:|--:|--:|---|"
  tail -n +2 "$OUTD/throughput.csv" | awk -F, '{ printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }'
} | tee "$OUTD/throughput.md"
exit $rc
