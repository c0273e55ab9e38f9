#!/usr/bin/env bash
# train_speed.sh: vla-train's training step, timed per backend and mechanism, at the paper's
# MQAR setting (TinyLM, mqar n = 24, T = 73, batch 64, seed 42, fp32), to set beside the
# paper's own step (.peers/paper_train_speed.py; on an H200 with torch 2.11 it takes 5.1, 118, 124
# and 361 ms per step for softmax, linear, DeltaNet and VLA: TRAINER.md). deltanet is the paper's
# DeltaNet; delta the standard one (not in the paper).
#
# How a step is timed: one vla-train run per backend and mechanism, W warm-up steps and then N
# timed steps (--steps W + N; the learning-rate schedule is the paper's over those W + N steps),
# logging every K steps. Each row of vla-train's train.csv holds steps_per_s over the K steps
# since the row before (host wall clock; every logged step downloads the loss, so the row's
# interval ends with the device's work done; the evaluation is excluded). A row is a block of
# K steps; the blocks that start at or after step W are timed; ms/step is the median over
# them of 1000 / steps_per_s (each block's mean step time), and the CSV has the mean over all
# timed steps and the blocks' min and max beside it. A step is everything vla-train does for
# one: a fresh batch generated on the host and uploaded, forward, loss, backward, clip, AdamW;
# a logged step also downloads the logits for the training accuracy (2.4 MB and a host argmax
# at batch 64), which K > 1 spreads over the block (K = 1: a true per-step median, every step
# paying it). K is --log-every, lowered to a divisor of W so that no block straddles W.
#
# Attention / GEMMs / rest: one more short run per backend and mechanism with vla-train
# --profile, on every backend: per step the host time in the attention op (forward and backward),
# in the matrix products (the nn GEMM calls) and the rest (batch generation and upload, the other
# nn ops, the update), each bracketed by a device synchronisation. Those synchronisations make the
# profiled step slower than the unprofiled one (much so on a GPU, where a step is many short
# launches), so the headline stays the unprofiled ms/step above and the profile gives the shares
# (and its own, slower, ms/step beside them): vla-train's closing line 'profile: attention X
# ms/step (P%), gemm Y ms/step (P%), rest Z ms/step (P%), total T ms/step', its means over the
# profiled steps without the first.
#
# Each run is capped by `timeout` (--run-timeout) and the whole script by --budget: a run that
# no longer fits is left out and says so; a run cut by its cap keeps the blocks it logged.
#
# Usage: bash benchmarks/train_speed.sh --build DIR [options]
#   --build DIR          the build folder holding tools/vla-train (and tools/vla-run, whose
#                        --list-devices picks the default backends)
#   --backends LIST      comma-separated vla-train backends (cpu, cuda[:N], opencl[:P:D]); default:
#                        cuda and opencl where the build has them with a GPU, else cpu (the CPU is
#                        off by default where there is a GPU: name it to add it)
#   --mechanisms LIST    default softmax,linear,delta,vla,deltanet; an item MECH:ALGO runs vla-train
#                        --algo ALGO (e.g. vla:chunked beside vla, whose AUTO may differ), its row
#                        named so
#   --steps N            timed steps per run (default 60)
#   --warmup-steps W     steps before them, not timed (default 10)
#   --log-every K        steps per timed block (default 5; lowered to a divisor of W)
#   --pairs N            mqar pairs, T = 3N + 1 (default 24)
#   --batch B            sequences per step (default 64)
#   --seed S             (default 42)
#   --threads N          CPU threads of the cpu backend (default 0: OpenMP's default)
#   --profile-steps P    steps of each profiled run (vla-train --profile; default 20; 0: none)
#   --run-timeout S      cap of one run in seconds (default 40)
#   --budget S           the whole script's limit in seconds (default 140)
#   --out DIR            where train_speed.md, train_speed.csv, train_speed_blocks.csv and
#                        runs/ (each run's train.csv, stdout, stderr) go (default train-speed)
#   --dry-run            print the runs' commands; run nothing
#   -h, --help           this text
# The CSV has no quoted fields (commas in the device and status texts become ';'). The markdown
# table is printed on stdout at the end; progress goes to stderr. Exit status: 0
# when every run gave a timing, 1 when one did not, 2 on a bad command line.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "train_speed.sh: $*" >&2; exit 2; }

BDIR="" BACKENDS="" MECHS=softmax,linear,delta,vla,deltanet STEPS=60 WARM=10 BLOCK=5 PAIRS=24 BATCH=64 SEED=42
THREADS=0 PROF_STEPS=20 RUN_CAP=40 BUDGET=140 OUTD=train-speed DRY=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) BDIR=${2:?--build needs a folder}; shift ;;
    --backends) BACKENDS=${2:?--backends needs a list}; shift ;;
    --mechanisms) MECHS=${2:?--mechanisms needs a list}; shift ;;
    --steps) STEPS=${2:?}; shift ;;
    --warmup-steps) WARM=${2:?}; shift ;;
    --log-every) BLOCK=${2:?}; shift ;;
    --pairs) PAIRS=${2:?}; shift ;;
    --batch) BATCH=${2:?}; shift ;;
    --seed) SEED=${2:?}; shift ;;
    --threads) THREADS=${2:?}; shift ;;
    --profile-steps) PROF_STEPS=${2:?}; shift ;;
    --run-timeout) RUN_CAP=${2:?}; shift ;;
    --budget) BUDGET=${2:?}; shift ;;
    --out) OUTD=${2:?--out needs a folder}; shift ;;
    --dry-run) DRY=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
for v in "$STEPS" "$WARM" "$BLOCK" "$PAIRS" "$BATCH" "$SEED" "$THREADS" "$PROF_STEPS" "$RUN_CAP" "$BUDGET"; do
  [[ $v =~ ^[0-9]+$ ]] || die "'$v': the numeric options take whole numbers"
done
((STEPS >= 1 && BLOCK >= 1 && PAIRS >= 1 && BATCH >= 1)) || die "--steps, --log-every, --pairs and --batch must be >= 1"
[ -n "$BDIR" ] || die "--build DIR is required (the build folder holding tools/vla-train)"
TRAIN=""
for f in "$BDIR/tools/vla-train" "$BDIR/vla-train"; do [ -x "$f" ] && TRAIN=$f && break; done
[ -n "$TRAIN" ] || ((DRY)) || die "no vla-train in $BDIR/tools (build it: cmake --build $BDIR --target vla-train)"
TRAIN=${TRAIN:-$BDIR/tools/vla-train}
VLA_RUN=$(dirname "$TRAIN")/vla-run
T=$((3 * PAIRS + 1))

# K: the block, a divisor of W so that the first timed block starts at step W.
gcd() { local a=$1 b=$2 t; while ((b)); do t=$((a % b)) a=$b b=$t; done; echo "$a"; }
K=$BLOCK
((WARM > 0)) && K=$(gcd "$BLOCK" "$WARM")

# The default backends: CUDA, and OpenCL on a GPU, where the build has them; else the CPU.
if [ -z "$BACKENDS" ]; then
  devs=$("$VLA_RUN" --list-devices 2> /dev/null)
  grep -q '^cuda' <<< "$devs" && BACKENDS=cuda
  grep '^opencl' <<< "$devs" | grep -q '(gpu)$' && BACKENDS=${BACKENDS:+$BACKENDS,}opencl
  BACKENDS=${BACKENDS:-cpu}
fi
IFS=, read -r -a BE_LIST <<< "$BACKENDS"
IFS=, read -r -a M_LIST <<< "$MECHS"
((${#BE_LIST[@]} && ${#M_LIST[@]})) || die "--backends and --mechanisms need at least one name each"

RUNS=$OUTD/runs
T0=$SECONDS
left() { echo $((BUDGET - (SECONDS - T0))); }
# cap: the run's limit, --run-timeout or what is left of the budget (less 3 s to write the tables).
cap() { local l=$(($(left) - 3)); if ((l < RUN_CAP)); then echo "$l"; else echo "$RUN_CAP"; fi; }
say() { echo "[train_speed $((SECONDS - T0)) s] $*" >&2; }
tag() { echo "${1//[^A-Za-z0-9]/-}-${2//[^A-Za-z0-9]/-}"; }
declare -A MS MEAN MIN MAX NB DEV STATUS PROF

# train_cmd BACKEND MECH STEPS LOG_EVERY DIR: the vla-train command line, into CMD.
train_cmd() {
  local mech=${2%%:*}
  CMD=("$TRAIN" --backend "$1" --mechanism "$mech" --task mqar --pairs "$PAIRS" --batch "$BATCH" --seed "$SEED"
    --steps "$3" --log-every "$4" --eval-batches 1 --eval-batch 1 --ckpt-every 0 --out "$5")
  [[ $2 == *:* ]] && CMD+=(--algo "${2#*:}")
  [[ $1 == cpu* ]] && ((THREADS)) && CMD+=(--threads "$THREADS")
}

# blocks CSV: "steps ms" of each timed block of a train.csv (started at or after step W).
blocks() {
  awk -F, -v w="$WARM" 'NR > 1 && $1 ~ /^[0-9]+$/ { n = $1 - prev
      if (prev >= w && $7 + 0 > 0) printf "%d %.6f\n", n, 1000 / $7
      prev = $1 }' "$1" 2> /dev/null
}

# time_one BACKEND MECH: the timed run; fills MS, MEAN, MIN, MAX, NB, DEV, STATUS.
time_one() {
  local be=$1 m=$2 key="$1|$2" dir l rc stats
  dir=$RUNS/$(tag "$be" "$m")
  train_cmd "$be" "$m" $((WARM + STEPS)) "$K" "$dir"
  l=$(cap)
  if ((DRY)); then
    echo "timeout -k 5 $l ${CMD[*]} > $dir/stdout.txt 2> $dir/stderr.txt"
    return 0
  fi
  if ((l < 5)); then
    STATUS[$key]="left out: $(left) s left of the $BUDGET s budget"
    say "$be $m: ${STATUS[$key]}"
    return 1
  fi
  rm -rf "$dir" && mkdir -p "$dir" || return 1
  say "$be $m: ${CMD[*]} (limit $l s)"
  timeout -k 5 "$l" "${CMD[@]}" > "$dir/stdout.txt" 2> "$dir/stderr.txt"
  rc=$?
  rm -f "$dir/checkpoint.bin"
  DEV[$key]=$(sed -n '1s/^vla-train: .* on \(.*\)$/\1/p' "$dir/stdout.txt")
  blocks "$dir/train.csv" | awk -v be="$be" -v m="$m" '{ printf "%s,%s,%d,%.4f\n", be, m, $1, $2 }' >> "$OUTD/train_speed_blocks.csv"
  # median, mean over the timed steps, min, max, number of blocks
  stats=$(blocks "$dir/train.csv" | sort -g -k2,2 | awk '{ n[NR] = $1; v[NR] = $2; s += $1 * $2; c += $1 }
      END { if (!NR) exit; med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%.4f %.4f %.4f %.4f %d %d\n", med, s / c, v[1], v[NR], NR, c }')
  if [ -n "$stats" ]; then
    local med mean lo hi nb
    read -r med mean lo hi nb _ <<< "$stats"
    MS[$key]=$med MEAN[$key]=$mean MIN[$key]=$lo MAX[$key]=$hi NB[$key]=$nb
  fi
  if ((rc == 0)); then
    STATUS[$key]=ok
  elif ((rc == 124 || rc == 137)); then
    STATUS[$key]="cut at its $l s limit after step $(tail -n 1 "$dir/train.csv" 2> /dev/null | cut -d, -f1)"
  else
    STATUS[$key]="exit $rc: $(tail -n 1 "$dir/stderr.txt" | cut -c1-160)"
  fi
  [ -n "$stats" ] || STATUS[$key]="${STATUS[$key]}; no timed block"
  say "$be $m: ${MS[$key]:-?} ms/step (median of ${NB[$key]:-0} blocks of $K); ${STATUS[$key]}"
  [ -n "$stats" ]
}

# profile_one BACKEND MECH: a vla-train --profile run; fills PROF with "attn gemm rest total"
# (profiled ms per step) from its closing 'profile:' line.
profile_one() {
  local be=$1 m=$2 key="$1|$2" dir l rc
  dir=$RUNS/$(tag "$be" "$m")-profile
  train_cmd "$be" "$m" "$PROF_STEPS" "$PROF_STEPS" "$dir"
  CMD+=(--profile)
  l=$(cap)
  if ((DRY)); then
    echo "timeout -k 5 $l ${CMD[*]} > $dir/stdout.txt 2> $dir/stderr.txt"
    return 0
  fi
  ((l >= 5)) || { say "$be $m profile: left out ($(left) s left)"; return 0; }
  rm -rf "$dir" && mkdir -p "$dir" || return 0
  say "$be $m profile: ${CMD[*]} (limit $l s)"
  timeout -k 5 "$l" "${CMD[@]}" > "$dir/stdout.txt" 2> "$dir/stderr.txt"
  rc=$?
  rm -f "$dir/checkpoint.bin"
  ((rc == 0)) && PROF[$key]=$(awk '/^profile: attention / { print $3, $7, $11, $15 }' "$dir/stdout.txt")
  say "$be $m profile: exit $rc; attention, gemm, rest, total ms/step (profiled): ${PROF[$key]:-?}"
}

write_tables() {
  local be m key sps tps prof pa pg pr pt attn dev devs st csv=$OUTD/train_speed.csv md=$OUTD/train_speed.md
  {
    echo "backend,mechanism,device,pairs,T,batch,warmup_steps,timed_steps,block,blocks,ms_per_step,ms_per_step_mean,ms_block_min,ms_block_max,steps_per_s,tokens_per_s,prof_attn_ms,prof_gemm_ms,prof_rest_ms,prof_total_ms,attn_share,gemm_share,rest_share,status"
    for be in "${BE_LIST[@]}"; do
      for m in "${M_LIST[@]}"; do
        key="$be|$m" sps="" tps="" prof=",,,,,,"
        if [ -n "${MS[$key]:-}" ]; then
          sps=$(awk -v x="${MS[$key]}" 'BEGIN { printf "%.3f", 1000 / x }')
          tps=$(awk -v x="${MS[$key]}" -v n=$((BATCH * T)) 'BEGIN { printf "%.0f", n * 1000 / x }')
        fi
        if [ -n "${PROF[$key]:-}" ]; then
          read -r pa pg pr pt <<< "${PROF[$key]}"
          prof=$(awk -v a="$pa" -v g="$pg" -v r="$pr" -v t="$pt" 'BEGIN { printf "%s,%s,%s,%s,%.3f,%.3f,%.3f", a, g, r, t, a / t, g / t, r / t }')
        fi
        dev=${DEV[$key]:-} st=${STATUS[$key]:-not run}
        echo "$be,$m,${dev//,/;},$PAIRS,$T,$BATCH,$WARM,$STEPS,$K,${NB[$key]:-0},${MS[$key]:-},${MEAN[$key]:-},${MIN[$key]:-},${MAX[$key]:-},$sps,$tps,$prof,${st//,/;}"
      done
    done
  } > "$csv.tmp" && mv "$csv.tmp" "$csv"
  {
    echo "# Training step: vla-train, ms per step"
    echo
    echo "TinyLM (the paper's: d 128, 4 heads of 32, 2 blocks, FFN 256, V 128), fp32; mqar n = $PAIRS (T = $T), batch $BATCH, seed $SEED."
    echo "Each run: warm-up $WARM steps (not timed), then $STEPS timed steps in blocks of $K (vla-train --log-every $K);"
    echo "ms/step is the median over the timed blocks of each block's mean step time (vla-train's CSV"
    echo "steps_per_s, host wall clock, evaluation excluded); a step includes generating and uploading"
    echo "its batch, and a logged step (one per block) reads the loss, the gradient norm and the logits back."
    echo "$("$TRAIN" --version 2> /dev/null || echo vla-train): \`$TRAIN\`; $(date -u '+%F %H:%M UTC'); $(uname -n), $(nproc 2> /dev/null) cores."
    echo
    echo "| backend | mechanism | ms/step | steps/s | tokens/s | blocks: min - max ms | attention / gemm / rest (profiled ms/step) | status |"
    echo "|---|---|--:|--:|--:|---|---|---|"
    for be in "${BE_LIST[@]}"; do
      for m in "${M_LIST[@]}"; do
        key="$be|$m" attn="not profiled"
        if [ -n "${PROF[$key]:-}" ]; then
          read -r pa pg pr pt <<< "${PROF[$key]}"
          attn=$(awk -v a="$pa" -v g="$pg" -v r="$pr" -v t="$pt" 'BEGIN { printf "%.0f%% / %.0f%% / %.0f%% (%.3f)", 100 * a / t, 100 * g / t, 100 * r / t, t }')
        fi
        if [ -n "${MS[$key]:-}" ]; then
          sps=$(awk -v x="${MS[$key]}" 'BEGIN { printf "%.2f", 1000 / x }')
          tps=$(awk -v x="${MS[$key]}" -v n=$((BATCH * T)) 'BEGIN { x = n * 1000 / x; if (x >= 1e6) printf "%.2fM", x / 1e6; else printf "%.1fk", x / 1e3 }')
          printf '| %s | %s | %.3f | %s | %s | %.3f - %.3f (%d) | %s | %s |\n' "$be" "$m" "${MS[$key]}" "$sps" "$tps" \
            "${MIN[$key]}" "${MAX[$key]}" "${NB[$key]}" "$attn" "${STATUS[$key]:-}"
        else
          echo "| $be | $m | - | - | - | - | $attn | ${STATUS[$key]:-not run} |"
        fi
      done
    done
    echo
    devs=""
    for be in "${BE_LIST[@]}"; do
      for m in "${M_LIST[@]}"; do
        [ -n "${DEV[$be|$m]:-}" ] && { devs+="- $be: ${DEV[$be|$m]}"$'\n'; break; }
      done
    done
    [ -z "$devs" ] || printf 'Devices:\n%s\n' "$devs"
    echo "Attention / gemm / rest: shares of a step from a separate run of $PROF_STEPS steps with vla-train --profile"
    echo "(means over its steps without the first): host time in the attention op (forward and backward of"
    echo "both blocks), in the nn matrix products, and everything else (batch generation and upload, the"
    echo "other nn ops, clip and AdamW), each call bracketed by a device synchronisation. In parentheses that"
    echo "run's own ms/step, slower than the headline (the synchronisations); the headline ms/step is the"
    echo "unprofiled run's."
  } > "$md.tmp" && mv "$md.tmp" "$md"
}

if ((DRY)); then
  echo "train_speed.sh --dry-run: backends $BACKENDS; mechanisms $MECHS; $WARM + $STEPS steps, blocks of $K; budget $BUDGET s, each run <= $RUN_CAP s; out $OUTD"
else
  mkdir -p "$RUNS" || die "cannot create $RUNS"
  echo "backend,mechanism,steps,ms_per_step" > "$OUTD/train_speed_blocks.csv"
  say "backends $BACKENDS; mechanisms $MECHS; $WARM + $STEPS steps, blocks of $K; budget $BUDGET s"
fi
bad=0
for be in "${BE_LIST[@]}"; do
  for m in "${M_LIST[@]}"; do
    time_one "$be" "$m" || bad=1
    ((DRY)) || write_tables
  done
done
if ((PROF_STEPS > 0)); then
  for be in "${BE_LIST[@]}"; do
    for m in "${M_LIST[@]}"; do
      [ -n "${MS[$be|$m]:-}" ] || ((DRY)) || continue
      profile_one "$be" "$m"
      ((DRY)) || write_tables
    done
  done
fi
((DRY)) && exit 0
write_tables
say "done: $OUTD/train_speed.md, $OUTD/train_speed.csv"
sed -n '/^| backend/,/^$/p' "$OUTD/train_speed.md"
exit "$bad"
