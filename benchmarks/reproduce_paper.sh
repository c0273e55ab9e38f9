#!/usr/bin/env bash
# reproduce_paper.sh: the paper's MQAR experiments (issue #37), rerun with vla-train, into one
# results folder: every run's logs, tables.md (the paper's numbers beside ours, mean +- std over
# seeds) and plots (capacity curve, accuracy against T, loss curves).
#
# Experiments (--only names; the model, tasks and recipe are docs/TRAINER.md's):
#   table11  capacity: mqar n = 8, 16, 24, 32, 48 (T = 3n + 1), seed 42, 1000 steps (the paper's
#            text) and 3000 (its code's schedule)
#   table9   mqar n = 24, seeds 42, 123, 999, 3000 steps (the code) and 2000 (the text)
#   table11-seeds  Table 11's seeds 123 and 999 at n = 32 and 48 (1000 steps, then 3000)
#   fig6     long context: mqar n = 8, T = 64, 128, 256, 512, seed 42, 1000 steps
#   copy     copy-paper (the paper's identity-scored copy) at T = 64, 500 steps, evaluated every
#            25 steps (the paper: 100% by about step 150), and copy (the real copy task) at
#            T = 64, 2000 steps, evaluated every 100
#   zoology  mqar-zoology n = 24 at T = 128 (Table 9's pairs with filler between), 3000 steps:
#            learning rates 3e-4, 1e-3, 3e-3 at seed 42 for every mechanism, then seeds 123
#            and 999 at each mechanism's best rate (highest eval accuracy at seed 42)
# Every mechanism: softmax, linear, delta (the standard DeltaNet, not in the paper), deltanet
# (the paper's DeltaNet) and vla. Batch 64, a fresh batch every step; evaluation: the code's 20
# batches of 32. The state norms ||S_T||, ||A_T|| of every run come from vla-train's summary.
# The runs go in this order (the headline numbers first, cheapest first within an experiment):
# table11 at 1000 steps, table9, table11 at 3000 steps, table11-seeds, fig6, copy, zoology.
# --dry-run prints the steps per experiment and the minutes they take on an H200 (all: about 30).
# Parts of under 9 minutes each: `--only table11`, `--only table9,copy`, `--only table11-seeds`,
# `--only zoology`, `--only fig6` (same --results); or the same command again and again with
# --deadline 540, each call going on where the one before stopped.
#
# Each run is one vla-train process, RESULTS/runs/NAME/ (NAME: task, mechanism, n, T, steps,
# seed, lr; a run two experiments share is run once). A run whose summary.csv says done is
# skipped: a later call with the same --results continues where an earlier one stopped (a run
# cut with a checkpoint is resumed with vla-train --resume). Then RESULTS/tables.md,
# RESULTS/README.md (benchmarks/paper_tables.py) and RESULTS/plots/ (benchmarks/plot_paper.sh,
# where gnuplot exists: else `--tables-only RESULTS` draws them later on another machine).
#
# Usage: bash benchmarks/reproduce_paper.sh [options]
#   --build DIR         the build folder holding tools/vla-train (default: build)
#   --results DIR       the results folder (default: paper-results, paper-results-quick with
#                       --quick; under $OUT when it is set)
#   --backend NAME      vla-train's backend (default: cuda; cpu with --quick)
#   --only LIST         comma-separated experiments (default: all; with --quick: table11)
#   --mechanisms LIST   default softmax,linear,delta,deltanet,vla
#   --jobs N            vla-train processes at once (default 1: on an H200, two at once take
#                       twice as long each and eight ten times or more: the GPU time-slices
#                       between processes, so more than one gains nothing there; see --mps)
#   --mps               run the CUDA runs under NVIDIA's Multi-Process Service, so that the
#                       kernels of --jobs processes share the GPU at once instead of taking
#                       turns (the daemon is started for this call and stopped at its end; one
#                       already answering is used and left running). Changes no number of a
#                       run: each process runs the same kernels on its own data
#   --threads N         CPU threads of each cpu-backend run (default: cores / jobs)
#   --deadline S        launch no run that would not finish within S seconds of the start
#                       (estimated from the ms/step seen so far), cut a run still going at S
#                       (it keeps a checkpoint); 0: no deadline (default 0)
#   --quick             a reduced set on the cpu backend, not the paper's setting: Table 11 at
#                       n = 4 (T = 13), 1500 steps, batch 64, seed 42, evaluated every 100 steps
#                       (the paper: n = 8..48, 1000 steps); every mechanism; about 11 minutes on
#                       2 CPU cores. Chance is about 1/4 at n = 4: there VLA reaches 0.96 by step
#                       1500 and the other four stay near 0.27 (the paper's DeltaNet learns only
#                       at n = 6 to 8 with 3000 steps, beyond this budget: see --steps)
#                       (benchmarks/results/2026-12-06-cpu-paper-quick). With --only: table9:
#                       three seeds at n = 4, 1500 steps; fig6: n = 8, T = 64, 300 steps; copy:
#                       T = 32, 300 steps; zoology: n = 8 at T = 64, lr 1e-3, 300 steps (at 300
#                       steps nothing is above chance yet)
#   --steps N           every run's steps (for tests, or another --quick length: a 1000-step
#                       schedule leaves VLA at chance at n = 4 on the CPU, 0.27; on an H200 a
#                       1500-step schedule takes VLA to 0.98 at n = 8, softmax stays at 0.15, and
#                       the paper's DeltaNet needs about 1300 steps of a 3000-step schedule; on
#                       the CPU it does the same at n = 6 and 8, and stays at chance at n = 4)
#   --eval-batches N    (for tests) every run's evaluation batches (default: the code's 20)
#   --from DIR          start from an earlier results folder of the same setting (e.g. one
#                       committed under benchmarks/results/ and carried to the device): each run
#                       done there and absent from --results is copied into it, and so is not
#                       run again, and its invocations.txt lines go first into --results';
#                       DIR itself is only read
#   --pack FILE         at the end, the results folder (less the checkpoints of cut runs) packed
#                       into FILE (.tar.gz): one file to bring back from a device call
#   --no-plots          no plots
#   --tables-only DIR   redo DIR's tables and plots from its runs; run nothing
#   --dry-run           print the runs in order and the steps per experiment; run nothing
#   -h, --help          this text
# Exit status: 0 when every planned run is done, 1 when some are not (cut, failed, left out by the
# deadline), 2 on a bad command line.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "reproduce_paper.sh: $*" >&2; exit 2; }
# q WORD...: the words as a shell reads them back (quoted only where needed).
q() { local w out=""; for w in "$@"; do if [[ $w =~ ^[A-Za-z0-9_./,:=+@%-]+$ ]]; then out+="$w "; else out+="'${w//\'/\'\\\'\'}' "; fi; done; echo "${out% }"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ARGS=("$@")
# val FLAG VALUE...: the flag's value, or a one-line error when it has none.
val() {
  if [ $# -lt 2 ] || [[ $2 == --* && $2 != --*[!a-z-]* ]]; then die "$1 needs a value"; fi
  echo "$2"
}
BDIR=build RESULTS="" BACKEND="" ONLY="" MECHS=softmax,linear,delta,deltanet,vla JOBS="" THREADS=""
DEADLINE=0 QUICK=0 STEPS_OVR="" EVALB=20 PLOTS=1 TABLES_ONLY="" DRY=0 PACK="" MPS=0 FROM=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) BDIR=$(val "$@") || exit 2; shift ;;
    --results) RESULTS=$(val "$@") || exit 2; shift ;;
    --backend) BACKEND=$(val "$@") || exit 2; shift ;;
    --only) ONLY=$(val "$@") || exit 2; shift ;;
    --mechanisms) MECHS=$(val "$@") || exit 2; shift ;;
    --jobs) JOBS=$(val "$@") || exit 2; shift ;;
    --threads) THREADS=$(val "$@") || exit 2; shift ;;
    --deadline) DEADLINE=$(val "$@") || exit 2; shift ;;
    --quick) QUICK=1 ;;
    --mps) MPS=1 ;;
    --steps) STEPS_OVR=$(val "$@") || exit 2; shift ;;
    --eval-batches) EVALB=$(val "$@") || exit 2; shift ;;
    --pack) PACK=$(val "$@") || exit 2; shift ;;
    --from) FROM=$(val "$@") || exit 2; shift ;;
    --no-plots) PLOTS=0 ;;
    --tables-only) TABLES_ONLY=$(val "$@") || exit 2; shift ;;
    --dry-run) DRY=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
for v in "$DEADLINE" "$EVALB" ${JOBS:+"$JOBS"} ${THREADS:+"$THREADS"} ${STEPS_OVR:+"$STEPS_OVR"}; do
  [[ $v =~ ^[0-9]+$ ]] || die "'$v': --jobs, --threads, --deadline, --steps and --eval-batches take whole numbers"
done
[ -z "$JOBS" ] || ((JOBS >= 1)) || die "--jobs must be >= 1"
[ -z "$STEPS_OVR" ] || ((STEPS_OVR >= 1)) || die "--steps must be >= 1"
((EVALB >= 1)) || die "--eval-batches must be >= 1"
EXPS=(table11 table9 table11-seeds fig6 copy zoology)
ALL_MECHS=(softmax linear delta deltanet vla)
[ -n "$ONLY" ] || { if ((QUICK)); then ONLY=table11; else ONLY=$(IFS=,; echo "${EXPS[*]}"); fi; }
for e in ${ONLY//,/ }; do [[ " ${EXPS[*]} " == *" $e "* ]] || die "--only: no experiment '$e' (${EXPS[*]})"; done
[[ $ONLY =~ ^[a-z0-9-]+(,[a-z0-9-]+)*$ ]] || die "--only: '$ONLY' is not a comma-separated list"
[[ $MECHS =~ ^[a-z]+(,[a-z]+)*$ ]] || die "--mechanisms: '$MECHS' is not a comma-separated list"
for m in ${MECHS//,/ }; do [[ " ${ALL_MECHS[*]} " == *" $m "* ]] || die "--mechanisms: no mechanism '$m' (${ALL_MECHS[*]})"; done
# The mechanisms in the fixed order (cheapest first).
M_LIST=()
for m in "${ALL_MECHS[@]}"; do [[ ",$MECHS," == *",$m,"* ]] && M_LIST+=("$m"); done
has() { [[ ",$ONLY," == *",$1,"* ]]; }

# --tables-only: the tables and plots of an existing folder.
tables() {
  local r=$1 rc=0
  if command -v python3 > /dev/null; then
    python3 "$ROOT/benchmarks/paper_tables.py" "$r" || rc=1
  else
    echo "reproduce_paper.sh: no python3: tables not written (run --tables-only $r where it is)" >&2
    rc=1
  fi
  if ((PLOTS)); then
    if command -v gnuplot > /dev/null; then
      bash "$ROOT/benchmarks/plot_paper.sh" "$r" || rc=1
    else
      echo "reproduce_paper.sh: no gnuplot: no plots (bash benchmarks/reproduce_paper.sh --tables-only $r where it is)" >&2
    fi
  fi
  return $rc
}
if [ -n "$TABLES_ONLY" ]; then
  [ -f "$TABLES_ONLY/plan.csv" ] || die "--tables-only: '$TABLES_ONLY' holds no plan.csv (not a results folder)"
  tables "$TABLES_ONLY"
  exit $?
fi

if ((QUICK)); then BACKEND=${BACKEND:-cpu}; else BACKEND=${BACKEND:-cuda}; fi
[[ $BACKEND =~ ^(cpu|cuda(:[0-9]+)?|opencl(:[0-9]+:[0-9]+)?|auto)$ ]] || die "--backend: '$BACKEND' is not cpu, cuda[:N], opencl[:P:D] or auto"
JOBS=${JOBS:-1}
NCPU=$(nproc 2> /dev/null || echo 2)
if [ -z "$THREADS" ]; then THREADS=$((NCPU / JOBS)); ((THREADS >= 1)) || THREADS=1; fi
# OpenMP threads that spin while waiting slow every step down on a shared CPU (several runs at once,
# or a loaded machine); passive waiting changes no number.
[[ $BACKEND == cpu ]] && export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
((MPS)) && [[ $BACKEND != cuda* ]] && die "--mps is for the cuda backend (this: $BACKEND)"
RESULTS=${RESULTS:-${OUT:+$OUT/}paper-results$( ((QUICK)) && echo -quick)}
TRAIN=""
for f in "$BDIR/tools/vla-train" "$BDIR/vla-train"; do [ -x "$f" ] && TRAIN=$f && break; done
[ -n "$TRAIN" ] || ((DRY)) || die "no vla-train in $BDIR/tools (build it: cmake --build $BDIR --target vla-train)"
TRAIN=${TRAIN:-$BDIR/tools/vla-train}
MODE="$([ "$QUICK" = 1 ] && echo quick || echo full) backend=$BACKEND steps=${STEPS_OVR:-plan} eval_batches=$EVALB"

# ---- the plan -----------------------------------------------------------------------------------
# One row per (experiment, run): EXP|NAME|TASK|MECH|N|T|STEPS|SEED|LR|EVAL_EVERY. LR "best": the
# mechanism's best rate of the zoology sweep, known once the sweep is done.
PLAN=()
declare -A SEEN=() STEPS_OF=() T_OF=() MECH_OF=() ROW_OF=()
ORDER=()
add() { # EXP TASK MECH N T STEPS SEED LR EVAL_EVERY
  local exp=$1 task=$2 m=$3 n=$4 t=$5 s=${STEPS_OVR:-$6} seed=$7 lr=$8 ee=$9 name
  if [[ $task == copy* ]]; then name=$task-$m-T$t-s$s-seed$seed-lr$lr; else name=$task-$m-n$n-T$t-s$s-seed$seed-lr$lr; fi
  ((ee >= s)) && ee=0
  PLAN+=("$exp|$name|$task|$m|$n|$t|$s|$seed|$lr|$ee")
  if [ -z "${SEEN[$name]:-}" ]; then
    SEEN[$name]=1 ORDER+=("$name") STEPS_OF[$name]=$s T_OF[$name]=$t MECH_OF[$name]=$m
    ROW_OF[$name]="$task|$m|$n|$t|$s|$seed|$lr|$ee"
  fi
}
mqar() { add "$1" mqar "$2" "$3" $((3 * $3 + 1)) "$4" "$5" 3e-4 "$MQ_EE"; }
# --quick: a reduced set (n = 4, 1500 steps, evaluated every 100 steps to show when a mechanism
# learns); the full set evaluates at the end only.
if ((QUICK)); then
  P_N=(4) P_SEEDS=(42) S_SHORT=1500 MQ_EE=100
else
  P_N=(8 16 24 32 48) P_SEEDS=(42 123 999) S_SHORT=1000 MQ_EE=0
fi
if has table11; then
  for n in "${P_N[@]}"; do for m in "${M_LIST[@]}"; do mqar table11 "$m" "$n" "$S_SHORT" 42; done; done
fi
if has table9; then
  if ((QUICK)); then
    for seed in 42 123 999; do for m in "${M_LIST[@]}"; do mqar table9 "$m" "${P_N[0]}" "$S_SHORT" "$seed"; done; done
  else
    for steps in 3000 2000; do
      for seed in "${P_SEEDS[@]}"; do for m in "${M_LIST[@]}"; do mqar table9 "$m" 24 "$steps" "$seed"; done; done
    done
  fi
fi
if has table11 && ((!QUICK)); then
  for n in "${P_N[@]}"; do for m in "${M_LIST[@]}"; do mqar table11 "$m" "$n" 3000 42; done; done
fi
if has table11-seeds && ((!QUICK)); then
  for steps in 1000 3000; do
    for n in 32 48; do for seed in 123 999; do for m in "${M_LIST[@]}"; do mqar table11-seeds "$m" "$n" "$steps" "$seed"; done; done; done
  done
fi
if has fig6; then
  if ((QUICK)); then F_T=(64) F_S=300; else F_T=(64 128 256 512) F_S=1000; fi
  for t in "${F_T[@]}"; do for m in "${M_LIST[@]}"; do add fig6 mqar "$m" 8 "$t" "$F_S" 42 3e-4 0; done; done
fi
if has copy; then
  if ((QUICK)); then
    for m in "${M_LIST[@]}"; do add copy copy-paper "$m" 0 32 300 42 3e-4 25; done
    for m in "${M_LIST[@]}"; do add copy copy "$m" 0 32 300 42 3e-4 50; done
  else
    for m in "${M_LIST[@]}"; do add copy copy-paper "$m" 0 64 500 42 3e-4 25; done
    for m in "${M_LIST[@]}"; do add copy copy "$m" 0 64 2000 42 3e-4 100; done
  fi
fi
if has zoology; then
  if ((QUICK)); then
    for m in "${M_LIST[@]}"; do add zoology-sweep mqar-zoology "$m" 8 64 300 42 1e-3 0; done
  else
    for m in "${M_LIST[@]}"; do for lr in 3e-4 1e-3 3e-3; do add zoology-sweep mqar-zoology "$m" 24 128 3000 42 "$lr" 0; done; done
    for seed in 123 999; do for m in "${M_LIST[@]}"; do add zoology-seeds mqar-zoology "$m" 24 128 3000 "$seed" best 0; done; done
  fi
fi

# Steps per experiment, the token-steps (steps x T: the cost grows with T) and the minutes the
# runs take on an H200 by the model above (one at a time); a run two experiments share is
# counted in the first.
plan_summary() {
  local row exp name s t total=0 tt=0 e p ptot=0
  declare -A ES=() ET=() EN=() EP=() counted=()
  for row in "${PLAN[@]}"; do
    IFS='|' read -r exp name _ _ _ t s _ _ _ <<< "$row"
    e=${exp/zoology-*/zoology}
    [ -n "${counted[$name]:-}" ] && continue
    p=$(prior_s "$name")
    counted[$name]=1 total=$((total + s)) tt=$((tt + s * t))
    EN[$e]=$((${EN[$e]:-0} + 1)) ES[$e]=$((${ES[$e]:-0} + s)) ET[$e]=$((${ET[$e]:-0} + s * t))
    EP[$e]=$(awk -v x="${EP[$e]:-0}" -v y="$p" 'BEGIN { print x + y }') ptot=$(awk -v x="$ptot" -v y="$p" 'BEGIN { print x + y }')
  done
  for e in "${EXPS[@]}"; do
    [ -n "${EN[$e]:-}" ] && printf '  %-13s %4d runs, %7d steps, %9d token-steps, %5.1f min on an H200\n' "$e" "${EN[$e]}" "${ES[$e]}" "${ET[$e]}" \
      "$(awk -v x="${EP[$e]}" 'BEGIN { print x / 60 }')"
  done
  printf '  %-13s %4d runs, %7d steps, %9d token-steps, %5.1f min on an H200\n' all "${#ORDER[@]}" "$total" "$tt" "$(awk -v x="$ptot" 'BEGIN { print x / 60 }')"
  echo "  (steps x T: the cost grows with T; H200 minutes: one run at a time, by a + b T ms per step"
  echo "  per mechanism, measured; runs shared with an earlier experiment counted there only)"
}

# The H200's ms per step (vla-train --backend cuda, one run at a time, batch 64, measured at
# T = 25, 49, 73): a + b T per mechanism, the evaluation included; about 0.5 s per run to start.
declare -A PRIOR_A=([softmax]=1.10 [linear]=0.99 [delta]=0.84 [deltanet]=1.04 [vla]=0.94)
declare -A PRIOR_B=([softmax]=0.0113 [linear]=0.0358 [delta]=0.0369 [deltanet]=0.0325 [vla]=0.066)
# prior_s NAME: the seconds a run takes on an H200 by that model.
prior_s() { awk -v a="${PRIOR_A[${MECH_OF[$1]}]}" -v b="${PRIOR_B[${MECH_OF[$1]}]}" -v t="${T_OF[$1]}" -v s="${STEPS_OF[$1]}" \
  'BEGIN { printf "%.1f\n", s * (a + b * t) / 1000 + 0.5 }'; }

# The vla-train command of a run, into CMD (LR resolved).
train_cmd() { # NAME LR DIR
  local task m n t s seed lr ee
  IFS='|' read -r task m n t s seed lr ee <<< "${ROW_OF[$1]}"
  CMD=("$TRAIN" --backend "$BACKEND" --mechanism "$m" --task "$task" --seq-len "$t" --steps "$s" --batch 64
    --lr "$2" --seed "$seed" --eval-batches "$EVALB" --eval-batch 32 --log-every 10 --ckpt-every 500 --out "$3")
  [[ $task == copy* ]] || CMD+=(--pairs "$n")
  ((ee > 0)) && CMD+=(--eval-every "$ee")
  [[ $BACKEND == cpu ]] && CMD+=(--threads "$THREADS")
  return 0
}

if ((DRY)); then
  echo "reproduce_paper.sh --dry-run: $MODE; jobs $JOBS$([[ $BACKEND == cpu ]] && echo ", $THREADS threads each"); deadline ${DEADLINE} s; results $RESULTS"
  IFS='|' read -r _ _ _ _ _ _ lr _ <<< "${ROW_OF[${ORDER[0]}]}"
  train_cmd "${ORDER[0]}" "$lr" "RESULTS/runs/${ORDER[0]}"
  echo "the first run's command (the others differ in --mechanism --task --seq-len --steps --lr --seed --pairs --eval-every):"
  echo "  $(q "${CMD[@]}")"
  echo "runs, in order (name: task-mechanism-nN-TT-sSTEPS-seedSEED-lrLR; [experiments]; E: evaluated every E steps):"
  i=0
  for name in "${ORDER[@]}"; do
    i=$((i + 1))
    IFS='|' read -r _ _ _ _ _ _ lr ee <<< "${ROW_OF[$name]}"
    exps=$(printf '%s\n' "${PLAN[@]}" | awk -F'|' -v n="$name" '$2 == n { printf "%s%s", s, $1; s = "," }')
    printf '%4d %-50s [%s]%s%s\n' "$i" "$name" "$exps" "$( ((ee > 0)) && echo " E $ee")" \
      "$([ "$lr" = best ] && echo " (lr: the mechanism's best rate of the sweep)")"
  done
  echo "steps per experiment:"
  plan_summary
  exit 0
fi

# ---- the results folder -------------------------------------------------------------------------
if [ -n "$FROM" ]; then # before anything is written
  [ -f "$FROM/settings.txt" ] || die "--from $FROM: no settings.txt there (not a results folder of this script)"
  [ "$(cat "$FROM/settings.txt")" = "$MODE" ] || die "--from $FROM: runs of another setting ($(cat "$FROM/settings.txt"); this: $MODE)"
fi
mkdir -p "$RESULTS/runs" || die "cannot create $RESULTS/runs"
if [ -f "$RESULTS/settings.txt" ]; then
  old=$(cat "$RESULTS/settings.txt")
  [ "$old" = "$MODE" ] || die "$RESULTS holds runs of another setting ($old; this: $MODE): choose another --results"
else
  echo "$MODE" > "$RESULTS/settings.txt"
fi
# plan.csv: the union of this plan and the folder's earlier ones.
{
  echo "experiment,name,task,mechanism,pairs,seq_len,steps,seed,lr,eval_every"
  {
    [ -f "$RESULTS/plan.csv" ] && tail -n +2 "$RESULTS/plan.csv"
    printf '%s\n' "${PLAN[@]}" | tr '|' ','
  } | awk '!seen[$0]++'
} > "$RESULTS/plan.csv.tmp" && mv "$RESULTS/plan.csv.tmp" "$RESULTS/plan.csv"
COMMIT=${VLA_COMMIT:-$(git -C "$ROOT" describe --always --dirty --abbrev=12 2> /dev/null || echo unknown)}
# --from: the earlier folder's invocations first (the commands and commits its copied runs came
# from), then this folder's own, each line once.
if [ -n "$FROM" ] && [ -f "$FROM/invocations.txt" ]; then
  { cat "$FROM/invocations.txt"; cat "$RESULTS/invocations.txt" 2> /dev/null || true; } | awk '!seen[$0]++' \
    > "$RESULTS/invocations.txt.tmp" && mv "$RESULTS/invocations.txt.tmp" "$RESULTS/invocations.txt"
fi
echo "$(date -u '+%F %H:%M UTC')|$COMMIT|$(uname -n), $NCPU cores|bash benchmarks/reproduce_paper.sh$([ ${#ARGS[@]} -gt 0 ] && printf ' %s' "$(q "${ARGS[@]}")")" >> "$RESULTS/invocations.txt"

LOG=$RESULTS/progress.log
T0=$SECONDS RESERVE=15
say() { echo "[reproduce_paper $((SECONDS - T0)) s] $*" | tee -a "$LOG" >&2; }
left() { echo $((DEADLINE - (SECONDS - T0))); }

# status NAME: done, interrupted (a checkpoint to resume), failed, or new.
status() {
  local d=$RESULTS/runs/$1 st
  if [ -f "$d/summary.csv" ]; then
    st=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "status") c = i } NR == 2 && c { print $c }' "$d/summary.csv")
    [ "$st" = "done" ] && { echo "done"; return; }
  elif [ "$(cat "$d/exit.txt" 2> /dev/null)" = 0 ] && grep -q '^eval: ' "$d/stdout.txt" 2> /dev/null; then
    echo "done" # a vla-train without summary.csv
    return
  fi
  if [ -f "$d/checkpoint.bin" ]; then echo interrupted; elif [ -e "$d" ]; then echo failed; else echo new; fi
}

# --from (checked above): the runs done in the earlier folder, copied in where absent.
if [ -n "$FROM" ]; then
  n_from=0
  for d in "$FROM"/runs/*/; do
    [ -d "$d" ] || continue
    name=$(basename "$d")
    [ -e "$RESULTS/runs/$name" ] && continue
    [ "$(RESULTS=$FROM status "$name")" = "done" ] || continue
    cp -r "$FROM/runs/$name" "$RESULTS/runs/$name" || die "--from: cannot copy $FROM/runs/$name"
    n_from=$((n_from + 1))
  done
  say "--from $FROM: $n_from runs done there copied in"
fi

# best_lr MECH: the zoology sweep's best rate (highest eval accuracy, then lowest final loss) of
# the runs done; "wait" while a sweep run may still come, "none" when none is done.
best_lr() {
  local m=$1 name f best="" wait=0
  for name in "${ORDER[@]}"; do
    [[ $name == mqar-zoology-$m-*-seed42-lr* && ${ROW_OF[$name]} != *"|best|"* ]] || continue
    f=$RESULTS/runs/$name/summary.csv
    if [ "$(status "$name")" = "done" ]; then
      best+=$(awk -F, -v lr="${name##*-lr}" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR == 2 { print $c["eval_acc"], -$c["final_loss"], lr }' "$f")$'\n'
    elif [ -z "${GIVEN_UP[$name]:-}" ]; then
      wait=1
    fi
  done
  if ((wait)); then echo wait; elif [ -z "$best" ]; then echo none; else sort -g -k1,1 -k2,2 <<< "${best%$'\n'}" | tail -n 1 | cut -d' ' -f3; fi
}

# est NAME: the seconds a run is expected to take: its steps times the seconds per step seen in
# the train.csv of the runs (done or running) of the same mechanism at the nearest T (scaled by
# T where this one's is larger; between the first logged row and the last, so without the
# start), plus 15% and 10 s (start, final evaluation); empty when nothing is known yet.
est() {
  local m=${MECH_OF[$1]} t=${T_OF[$1]} s=${STEPS_OF[$1]} files=() name
  for name in "${ORDER[@]}"; do
    [ "${MECH_OF[$name]}" = "$m" ] || continue
    [ -f "$RESULTS/runs/$name/train.csv" ] && files+=("$RESULTS/runs/$name/train.csv")
  done
  if ((${#files[@]} == 0)); then
    # nothing seen yet: the H200's model, on a CUDA backend
    [[ $BACKEND == cuda* ]] && awk -v p="$(prior_s "$1")" 'BEGIN { printf "%d\n", p * 1.15 + 10 }'
    return 0
  fi
  awk -F, -v t="$t" -v s="$s" '
    function close_file() { if (n >= 2 && s1 > s0) { r = (e1 - e0) / (s1 - s0); sum[ft] += r; cnt[ft]++ } }
    FNR == 1 { close_file(); n = 0; f = FILENAME; match(f, /-T[0-9]+-/); ft = substr(f, RSTART + 2, RLENGTH - 3) + 0 }
    FNR > 1 && $1 ~ /^[0-9]+$/ { if (!n) { s0 = $1; e0 = $9 } s1 = $1; e1 = $9; n++ }
    END { close_file(); bt = -1
      for (k in cnt) { d = (k > t ? k - t : t - k); if (bt < 0 || d < bd) { bt = k; bd = d } }
      if (bt < 0) exit; sps = sum[bt] / cnt[bt] * (t > bt ? t / bt : 1); printf "%d\n", s * sps * 1.15 + 10 }' "${files[@]}"
}

declare -A RUNNING=() GIVEN_UP=() NOTE=()
# run_one NAME LR LIMIT: one run (in the background); an interrupted run resumes from its
# checkpoint, and a resume that fails starts the run afresh. exit.txt: vla-train's exit status.
run_one() {
  local name=$1 lr=$2 l=$3 d=$RESULTS/runs/$1 c=0 rc st
  trap '((c)) && kill -TERM $c 2> /dev/null' TERM
  st=$(status "$name")
  for _ in 1 2; do
    [ "$st" = interrupted ] || rm -rf "$d"
    mkdir -p "$d" || return 1
    train_cmd "$name" "$lr" "$d"
    [ "$st" = interrupted ] && CMD+=(--resume)
    q "${CMD[@]}" >> "$d/cmd.txt"
    if ((l > 0)); then
      timeout -s TERM -k 30 "$l" "${CMD[@]}" >> "$d/stdout.txt" 2>> "$d/stderr.txt" &
    else
      "${CMD[@]}" >> "$d/stdout.txt" 2>> "$d/stderr.txt" &
    fi
    c=$!
    wait $c
    rc=$?
    while kill -0 $c 2> /dev/null; do wait $c; rc=$?; done
    echo "$rc" > "$d/exit.txt"
    if [ "$st" = interrupted ] && ((rc == 1 || rc == 2)) && [ "$(status "$name")" != "done" ]; then
      st=new # the checkpoint did not resume: start afresh
    else
      break
    fi
  done
  [ "$(status "$name")" = "done" ] && rm -f "$d/checkpoint.bin"
  return 0
}

KILLED=0
on_signal() {
  KILLED=1
  say "interrupted: stopping the runs"
  local n
  for n in "${!RUNNING[@]}"; do kill -TERM "${RUNNING[$n]}" 2> /dev/null; done
}
trap on_signal INT TERM

# --mps: the daemon's pipes under /tmp (the defaults need /var/run); stopped on exit if started here.
MPS_STARTED=0
mps_stop() { ((MPS_STARTED)) && echo quit | nvidia-cuda-mps-control > /dev/null 2>&1; MPS_STARTED=0; }
if ((MPS)); then
  command -v nvidia-cuda-mps-control > /dev/null || die "--mps: nvidia-cuda-mps-control is not on PATH"
  export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/vla-mps/pipe}
  export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/vla-mps/log}
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY" || die "--mps: cannot create $CUDA_MPS_PIPE_DIRECTORY"
  if echo get_server_list | timeout 5 nvidia-cuda-mps-control > /dev/null 2>&1; then
    say "MPS: the daemon already answering at $CUDA_MPS_PIPE_DIRECTORY is used"
  else
    nvidia-cuda-mps-control -d || die "--mps: the MPS control daemon did not start"
    MPS_STARTED=1
    trap mps_stop EXIT
    say "MPS: daemon started (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
  fi
fi
say "$MODE; jobs $JOBS$([[ $BACKEND == cpu ]] && echo ", $THREADS threads each")$( ((MPS)) && echo " under MPS"); deadline $DEADLINE s; $TRAIN; results $RESULTS"
plan_summary | tee -a "$LOG" >&2
PENDING=("${ORDER[@]}")
skipped=0
for name in "${ORDER[@]}"; do [ "$(status "$name")" = "done" ] && skipped=$((skipped + 1)); done
((skipped)) && say "$skipped runs already done: skipped"
while :; do
  # reap the runs that ended
  for name in "${!RUNNING[@]}"; do
    kill -0 "${RUNNING[$name]}" 2> /dev/null && continue
    wait "${RUNNING[$name]}" 2> /dev/null
    unset "RUNNING[$name]"
    st=$(status "$name")
    if [ "$st" = "done" ]; then
      say "$name: done, eval accuracy $(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR == 2 { printf "%s, %s s", $c["eval_acc"], $c["wall_s"] }' "$RESULTS/runs/$name/summary.csv" 2> /dev/null)"
    else
      GIVEN_UP[$name]=1
      say "$name: $st (exit $(cat "$RESULTS/runs/$name/exit.txt" 2> /dev/null): $(tail -n 1 "$RESULTS/runs/$name/stderr.txt" 2> /dev/null | cut -c1-160))"
    fi
  done
  ((KILLED)) && { ((${#RUNNING[@]})) && { sleep 1; continue; }; break; }
  # launch what fits
  NEXT=()
  for name in "${PENDING[@]}"; do
    if ((${#RUNNING[@]} >= JOBS)); then NEXT+=("$name"); continue; fi
    [ "$(status "$name")" = "done" ] && continue
    IFS='|' read -r _ m _ _ _ _ lr _ <<< "${ROW_OF[$name]}"
    if [ "$lr" = best ]; then
      lr=$(best_lr "$m")
      [ "$lr" = wait ] && { NEXT+=("$name"); continue; }
      if [ "$lr" = none ]; then GIVEN_UP[$name]=1; NOTE[$name]="no zoology sweep run of $m done"; say "$name: left out (${NOTE[$name]})"; continue; fi
      # the run at the best rate, under its own name (seed 42's is the sweep's)
      real=${name%-lrbest}-lr$lr
      if [ -z "${ROW_OF[$real]:-}" ]; then
        ROW_OF[$real]=${ROW_OF[$name]/|best|/|$lr|} STEPS_OF[$real]=${STEPS_OF[$name]} T_OF[$real]=${T_OF[$name]} MECH_OF[$real]=$m
        ORDER+=("$real")
      fi
      name=$real
      [ "$(status "$name")" = "done" ] && continue
    fi
    l=0 eta=""
    if ((DEADLINE > 0)); then
      l=$(($(left) - RESERVE))
      eta=$(est "$name")
      if ((l < 20)) || { [ -n "$eta" ] && ((eta > l)); }; then
        GIVEN_UP[$name]=1
        say "$name: left out by the deadline (${eta:-?} s expected, $l s left)"
        continue
      fi
    fi
    st=$(status "$name")
    run_one "$name" "$lr" "$l" &
    RUNNING[$name]=$!
    say "$name: started$([ "$st" = interrupted ] && echo ' (resumed)') (${#RUNNING[@]} running$([ -n "$eta" ] && echo ", about $eta s expected"))"
  done
  PENDING=("${NEXT[@]}")
  ((${#RUNNING[@]})) || break
  sleep 1 # (a finished run is reaped by the shell; kill -0 then fails)
done
trap - INT TERM

tables "$RESULTS"
# the runs done and not: a zoology "best" row counts as its run at the best rate, once resolved
missing=0 total=0
for name in "${ORDER[@]}"; do
  if [[ ${ROW_OF[$name]} == *"|best|"* ]]; then
    IFS='|' read -r _ m _ _ _ _ _ _ <<< "${ROW_OF[$name]}"
    lr=$(best_lr "$m")
    [[ $lr == wait || $lr == none || -z ${ROW_OF[${name%-lrbest}-lr$lr]:-} ]] && missing=$((missing + 1)) total=$((total + 1))
    continue
  fi
  total=$((total + 1))
  [ "$(status "$name")" = "done" ] || missing=$((missing + 1))
done
say "finished: $((total - missing)) of $total runs done; $RESULTS/tables.md"
if [ -n "$PACK" ]; then
  if tar -C "$(dirname "$RESULTS")" --exclude=checkpoint.bin -czf "$PACK.tmp" "$(basename "$RESULTS")" && mv "$PACK.tmp" "$PACK"; then
    say "packed: $PACK"
  else
    rm -f "$PACK.tmp"
    say "packing $PACK failed"
    missing=$((missing + 1))
  fi
fi
((missing == 0 && !KILLED))
