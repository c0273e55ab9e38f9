#!/usr/bin/env bash
# Tests of the vla-train tool on the CPU at tiny sizes (the model's gradient, the tasks and the
# checkpoint format are tested by test_train.c).
#
#   test_vla_train.sh VLA_TRAIN
#
# (a) --help lists every flag with its default and every task; (b) a short run: exit 0, its CSV
# (header, one row per logged step), the checkpoint, the eval line; (c) resume: a run stopped
# half way (--stop-after) and resumed gives the same CSV (step, lr, loss, train_acc, grad_norm,
# eval_acc: bit for bit) as the same run uninterrupted, for every mechanism; (d) SIGINT saves a
# checkpoint, exits 130, and the run resumes from it to the same numbers; (e) bad input: one line
# on stderr, the documented exit status, and no file of an existing run changed; (f) the plot
# script writes a PNG and an SVG (when gnuplot is installed); (g) summary.csv: its exact columns,
# one row, status done / interrupted, the final state line ('state: layer 0 |S| x |A| y; ...')
# and its norms in the summary; (h) --profile: the closing 'profile:' line, its three shares
# summing to 100% (+- 0.5 for the rounding of the printed shares), profile.csv with one row per
# step whose parts add up to its total. One line per check; exit 0 only if all pass. Where an
# OpenCL device is present, the same run there agrees with the CPU's.
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 VLA_TRAIN" >&2
    exit 2
fi
TRAIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/test_vla_train.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
# A loaded CI machine with 2 cores: OpenMP threads that spin while waiting slow every step down
# by an order of magnitude when another process holds a core. Passive waiting changes no number.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

NPASS=0
NFAIL=0
pass() { echo "PASS: $*"; NPASS=$((NPASS + 1)); }
fail() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
# no_tmp_left DIR: no file of DIR has "tmp" in its name (a temporary file left behind).
no_tmp_left() {
    local f
    for f in "$1"/*tmp*; do [ -e "$f" ] && return 1; done
    return 0
}

# run NAME ARGS...: stdout to $WORK/NAME.out, stderr to $WORK/NAME.err; sets RC.
run() {
    local name=$1
    shift
    "$TRAIN" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
    RC=$?
}

# The settings of every small run: the paper's model, MQAR with 4 pairs (T 13), batch 4.
SMALL=(--task mqar --pairs 4 --batch 4 --steps 24 --log-every 2 --eval-batches 2 --eval-batch 4)
# The columns a resumed run must reproduce exactly (the others are timings).
det() { cut -d, -f1-6 "$1"; }
# col FILE NAME: the value of column NAME in the row of a summary.csv.
col() { awk -F, -v n="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i } NR == 2 && c { print $c }' "$1" 2> /dev/null; }

# ---- (a) --help ------------------------------------------------------------------------------------
run help --help
missing=
for f in --backend --mechanism --task --pairs --seq-len --steps --batch --lr --warmup --seed --eval-batches \
    --eval-batch --out --resume --profile --help; do
    grep -q -- "^  $f" "$WORK/help.out" || missing="$missing $f"
done
for t in mqar mqar-zoology copy copy-paper; do grep -q "^  $t " "$WORK/help.out" || missing="$missing task:$t"; done
ndef=$(grep -c "^  --.*(default: " "$WORK/help.out")
nflags=$(grep -c "^  --" "$WORK/help.out")
# --version and --help are switches without a default; every other flag shows its default.
if [ $RC -eq 0 ] && [ -z "$missing" ] && [ "$ndef" -ge $((nflags - 2)) ] && grep -q "default: 3e-4" "$WORK/help.out" &&
    grep -q "identity map" "$WORK/help.out" && grep -q "deltanet (the paper's DeltaNet" "$WORK/help.out" &&
    ! grep -qi "not available" "$WORK/help.out" && grep -q "profiled run is slower" "$WORK/help.out"; then
    pass "--help: every flag ($nflags) with its default, every task"
else
    fail "--help (rc $RC): missing:$missing; $ndef of $nflags flags with a default"
fi

# ---- (b) a short run --------------------------------------------------------------------------------
run short --mechanism softmax "${SMALL[@]}" --out "$WORK/short"
rows=$(($(wc -l < "$WORK/short/train.csv") - 1))
if [ $RC -eq 0 ] && [ ! -s "$WORK/short.err" ] && [ "$rows" -eq 12 ] && [ -s "$WORK/short/checkpoint.bin" ] &&
    grep -q "^eval: softmax mqar n=4 T=13 seed 42, 24 steps: accuracy" "$WORK/short.out" &&
    [ "$(head -n 1 "$WORK/short/train.csv")" = "step,lr,loss,train_acc,grad_norm,eval_acc,steps_per_s,tokens_per_s,elapsed_s" ] &&
    [ -n "$(tail -n 1 "$WORK/short/train.csv" | cut -d, -f6)" ] && no_tmp_left "$WORK/short"; then
    pass "short run: 12 CSV rows, checkpoint, eval line ($(grep '^eval' "$WORK/short.out" | sed 's/.*accuracy //'))"
else
    fail "short run (rc $RC, $rows rows): $(head -c 300 "$WORK/short.err")"
fi
# Not a terminal: plain lines, no carriage returns.
if ! grep -q $'\r' "$WORK/short.out" && [ "$(grep -c '^step ' "$WORK/short.out")" -eq 12 ]; then
    pass "stdout not a terminal: one plain line per logged step"
else
    fail "status lines on a non-terminal"
fi

# ---- (c) resume: stopped half way and resumed == uninterrupted ---------------------------------------
for mech in softmax linear delta vla deltanet; do
    run "full-$mech" --mechanism $mech "${SMALL[@]}" --out "$WORK/full-$mech"
    rc_full=$RC
    run "half-$mech" --mechanism $mech "${SMALL[@]}" --stop-after 12 --out "$WORK/half-$mech"
    rc_half=$RC
    stopped=$(grep -c "stopped after step 12 of 24" "$WORK/half-$mech.out")
    run "resume-$mech" --resume --out "$WORK/half-$mech"
    if [ $rc_full -eq 0 ] && [ $rc_half -eq 0 ] && [ "$stopped" -eq 1 ] && [ $RC -eq 0 ] &&
        grep -q "resuming .* at step 12" "$WORK/resume-$mech.out" &&
        cmp -s <(det "$WORK/full-$mech/train.csv") <(det "$WORK/half-$mech/train.csv") &&
        [ "$(grep '^eval' "$WORK/full-$mech.out")" = "$(grep '^eval' "$WORK/resume-$mech.out")" ]; then
        pass "resume $mech: 12 + 12 steps == 24 steps (every loss, accuracy, norm and the eval bit for bit)"
    else
        fail "resume $mech (rc $rc_full/$rc_half/$RC): $(diff <(det "$WORK/full-$mech/train.csv") <(det "$WORK/half-$mech/train.csv") | head -5) $(head -c 300 "$WORK/resume-$mech.err")"
    fi
done
# Rows logged after the last checkpoint (a run killed without its handler) are dropped on resume.
run cut-half --mechanism softmax "${SMALL[@]}" --stop-after 12 --out "$WORK/cut"
echo "14,0,9,0,0,,1,1,1" >> "$WORK/cut/train.csv"
run cut-resume --resume --out "$WORK/cut"
if [ $RC -eq 0 ] && cmp -s <(det "$WORK/full-softmax/train.csv") <(det "$WORK/cut/train.csv"); then
    pass "resume drops CSV rows logged after the checkpoint"
else
    fail "CSV rows after the checkpoint (rc $RC): $(diff <(det "$WORK/full-softmax/train.csv") <(det "$WORK/cut/train.csv") | head -3)"
fi
# Resuming a finished run trains nothing and reports the same evaluation.
cp "$WORK/full-softmax/train.csv" "$WORK/csv.before"
run done-again --resume --out "$WORK/full-softmax"
if [ $RC -eq 0 ] && cmp -s "$WORK/csv.before" "$WORK/full-softmax/train.csv" &&
    [ "$(grep '^eval' "$WORK/full-softmax.out")" = "$(grep '^eval' "$WORK/done-again.out")" ]; then
    pass "resume of a finished run: no step, same eval, CSV unchanged"
else
    fail "resume of a finished run (rc $RC): $(head -c 300 "$WORK/done-again.err")"
fi

# ---- (d) SIGINT ---------------------------------------------------------------------------------------
LONG=(--mechanism softmax --task mqar --pairs 4 --batch 4 --steps 400 --log-every 2 --eval-batches 1 --eval-batch 4)
"$TRAIN" "${LONG[@]}" --out "$WORK/int" > "$WORK/int.out" 2> "$WORK/int.err" &
pid=$!
for _ in $(seq 1 200); do # until the first rows are logged (at most 20 s)
    [ "$({ wc -l < "$WORK/int/train.csv"; } 2> /dev/null || echo 0)" -ge 3 ] && break
    sleep 0.1
done
kill -INT $pid
wait $pid
rc_int=$?
at=$(sed -n 's/^interrupted after step \([0-9]*\) of 400.*/\1/p' "$WORK/int.out")
if [ $rc_int -eq 130 ] && [ -n "$at" ] && [ -s "$WORK/int/checkpoint.bin" ] &&
    [ "$(col "$WORK/int/summary.csv" status)" = interrupted ] && [ "$(col "$WORK/int/summary.csv" eval_acc)" = nan ]; then
    pass "SIGINT: exit 130, checkpoint at step $at, summary.csv with status interrupted"
    target=$((at + 6))
    run int-resume --resume --out "$WORK/int" --stop-after $target
    run int-ref "${LONG[@]}" --stop-after $target --out "$WORK/int-ref"
    if [ $RC -eq 0 ] && cmp -s <(det "$WORK/int/train.csv") <(det "$WORK/int-ref/train.csv"); then
        pass "SIGINT at step $at, resumed to $target == uninterrupted to $target"
    else
        fail "resume after SIGINT (rc $RC): $(diff <(det "$WORK/int/train.csv") <(det "$WORK/int-ref/train.csv") | head -5)"
    fi
else
    fail "SIGINT (rc $rc_int, step '$at'): $(head -c 300 "$WORK/int.err")"
fi

# ---- (e) bad input ------------------------------------------------------------------------------------
# expect NAME RC PATTERN ARGS...: exit status RC, exactly one line "vla-train: ..." on stderr
# matching PATTERN, and the files of the finished run in $WORK/full-softmax unchanged.
run half-again --mechanism softmax "${SMALL[@]}" --stop-after 12 --out "$WORK/half-softmax-again"
snapshot() { (cd "$WORK/full-softmax" && md5sum checkpoint.bin train.csv); }
BEFORE=$(snapshot)
expect() {
    local name=$1 want=$2 pat=$3
    shift 3
    run "$name" "$@"
    local lines
    lines=$(wc -l < "$WORK/$name.err")
    if [ $RC -eq "$want" ] && [ "$lines" -eq 1 ] && grep -q "^vla-train: .*$pat" "$WORK/$name.err" &&
        [ "$(snapshot)" = "$BEFORE" ] && no_tmp_left "$WORK/full-softmax"; then
        pass "$name: exit $want, '$(head -c 150 "$WORK/$name.err")'"
    else
        fail "$name: rc $RC (want $want), $lines lines: $(head -c 300 "$WORK/$name.err")"
    fi
}
expect unknown-task 2 "unknown task 'recall'" --task recall --out "$WORK/x1"
expect unknown-flag 2 "unknown flag" --pair 4 --out "$WORK/x1"
expect unknown-mechanism 2 "unknown mechanism" --mechanism mamba --out "$WORK/x1"
expect bad-number 2 "--steps: not an integer" --steps 1e3 --out "$WORK/x1"
expect pairs-do-not-fit 1 "do not fit" --pairs 30 --seq-len 40 --out "$WORK/x1"
expect zoology-odd 1 "even T" --task mqar-zoology --pairs 4 --seq-len 17 --out "$WORK/x1"
expect run-exists 1 "already holds a run" --mechanism softmax "${SMALL[@]}" --out "$WORK/full-softmax"
expect resume-mismatch 1 "--lr: 0.001 differs from the checkpoint's 0.0003" --resume --lr 1e-3 --out "$WORK/full-softmax"
expect resume-other-task 1 "--task: copy differs" --resume --task copy --out "$WORK/full-softmax"
expect resume-nothing 1 "no checkpoint to resume" --resume --out "$WORK/x1"
expect unknown-backend 1 "--backend" --backend nosuch --mechanism softmax "${SMALL[@]}" --out "$WORK/x1"
expect bad-algo 2 "--algo: 'scan': auto, sequential or chunked" --algo scan "${SMALL[@]}" --out "$WORK/x1"
expect softmax-algo 2 "softmax runs its fused kernel" --mechanism softmax --algo chunked "${SMALL[@]}" --out "$WORK/x1"
expect deltanet-algo 2 "sequential form only" --mechanism deltanet --algo chunked "${SMALL[@]}" --out "$WORK/x1"
expect stop-before-checkpoint 2 "--stop-after: 4 is not after the checkpoint's step 12" --resume --stop-after 4 \
    --out "$WORK/half-softmax-again"
[ ! -e "$WORK/x1" ] && pass "no directory made by a refused run" || fail "a refused run made $WORK/x1"
# Damaged checkpoints: a copy of the run, truncated or with a byte changed.
for kind in truncated damaged magic; do
    mkdir -p "$WORK/$kind"
    cp "$WORK/full-softmax/train.csv" "$WORK/$kind/"
    size=$(stat -c %s "$WORK/full-softmax/checkpoint.bin")
    case $kind in
    truncated) head -c $((size - 100)) "$WORK/full-softmax/checkpoint.bin" > "$WORK/$kind/checkpoint.bin"; pat="truncated" ;;
    damaged) cp "$WORK/full-softmax/checkpoint.bin" "$WORK/$kind/"
        printf '\x55' | dd of="$WORK/$kind/checkpoint.bin" bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
        pat="checksum" ;;
    magic) cp "$WORK/full-softmax/checkpoint.bin" "$WORK/$kind/"
        printf 'X' | dd of="$WORK/$kind/checkpoint.bin" bs=1 seek=0 conv=notrunc 2> /dev/null
        pat="not a vla-train checkpoint" ;;
    esac
    sum=$(cd "$WORK/$kind" && md5sum checkpoint.bin train.csv)
    run "ck-$kind" --resume --out "$WORK/$kind"
    if [ $RC -eq 1 ] && [ "$(wc -l < "$WORK/ck-$kind.err")" -eq 1 ] && grep -q "$pat" "$WORK/ck-$kind.err" &&
        [ "$(cd "$WORK/$kind" && md5sum checkpoint.bin train.csv)" = "$sum" ]; then
        pass "$kind checkpoint: exit 1, '$(head -c 150 "$WORK/ck-$kind.err")', nothing changed"
    else
        fail "$kind checkpoint (rc $RC): $(head -c 300 "$WORK/ck-$kind.err")"
    fi
done
# An --out that cannot be written: under a regular file (and, when not root, a read-only directory).
touch "$WORK/afile"
expect out-under-file 1 "--out" --mechanism softmax "${SMALL[@]}" --out "$WORK/afile/run"
if [ "$(id -u)" -ne 0 ]; then
    mkdir -p "$WORK/ro" && chmod 500 "$WORK/ro"
    expect out-read-only 1 "cannot write" --mechanism softmax "${SMALL[@]}" --out "$WORK/ro"
    chmod 700 "$WORK/ro"
fi

# ---- the same run on another backend (the trainer only uses the public API) ---------------------------
# Where an OpenCL device is present: 8 steps of vla and of deltanet agree with the CPU's to float
# rounding (1e-4 relative on every loss and gradient norm; measured about 1e-7 on PoCL).
# (tests/test_nn_backends.c compares one step's every gradient on every device.)
run ocl-probe --backend opencl --mechanism vla --steps 1 --batch 1 --pairs 1 --eval-batches 1 --eval-batch 1 \
    --out "$WORK/ocl-probe"
if [ $RC -eq 0 ]; then
    for mech in vla deltanet; do
        run "ocl-$mech" --backend opencl --mechanism $mech "${SMALL[@]}" --steps 8 --out "$WORK/ocl-$mech"
        rc_ocl=$RC
        run "ocl-cpu-$mech" --backend cpu --mechanism $mech "${SMALL[@]}" --steps 8 --out "$WORK/ocl-cpu-$mech"
        worst=$(paste -d, <(cut -d, -f3,5 "$WORK/ocl-$mech/train.csv") <(cut -d, -f3,5 "$WORK/ocl-cpu-$mech/train.csv") | awk -F, '
            NR > 1 { for (i = 1; i <= 2; i++) { e = ($i - $(i + 2)) / $(i + 2); if (e < 0) e = -e; if (e > w) w = e } }
            END { printf "%.1e", w + 0 }')
        if [ $rc_ocl -eq 0 ] && [ $RC -eq 0 ] && awk -v w="$worst" 'BEGIN { exit !(w < 1e-4) }' &&
            [[ "$(col "$WORK/ocl-$mech/summary.csv" backend)" == opencl:* ]]; then
            pass "opencl vs cpu, 8 steps of $mech: losses and norms agree to $worst"
        else
            fail "opencl vs cpu $mech (rc $rc_ocl/$RC, worst $worst): $(head -c 300 "$WORK/ocl-$mech.err")"
        fi
    done
    run ocl-prof --backend opencl --mechanism deltanet "${SMALL[@]}" --steps 3 --profile --out "$WORK/ocl-prof"
    if [ $RC -eq 0 ] && grep -q '^profile: attention ' "$WORK/ocl-prof.out" && [ "$(wc -l < "$WORK/ocl-prof/profile.csv")" -eq 4 ]; then
        pass "--profile on opencl: $(grep '^profile:' "$WORK/ocl-prof.out" | cut -c1-110)"
    else
        fail "--profile on opencl (rc $RC): $(head -c 300 "$WORK/ocl-prof.err")"
    fi
else
    echo "SKIP: opencl vs cpu (no OpenCL device)"
fi

# ---- (g) summary.csv and the final state norms --------------------------------------------------------
COLS="backend,mechanism,task,pairs,seq_len,steps,batch,lr,warmup,seed,eval_batches,eval_batch,final_loss,final_train_acc,eval_acc,wall_s,ms_per_step,S_norm_mean,S_norm_max,A_norm_mean,A_norm_max,status"
for mech in softmax vla deltanet; do
    f=$WORK/full-$mech/summary.csv
    sline=$(grep '^state: ' "$WORK/full-$mech.out")
    eval_acc=$(sed -n 's/^eval: .* accuracy \([0-9.]*\) .*/\1/p' "$WORK/full-$mech.out")
    ok=1 why=
    [ -f "$f" ] && [ "$(head -n 1 "$f")" = "$COLS" ] && [ "$(wc -l < "$f")" -eq 2 ] || { ok=0; why="columns or rows"; }
    [ "$(awk -F, 'NR == 2 { print NF }' "$f" 2> /dev/null)" = 22 ] || { ok=0; why="$why; fields"; }
    [ "$(col "$f" status)" = "done" ] && [ "$(col "$f" backend)" = cpu ] && [ "$(col "$f" mechanism)" = $mech ] &&
        [ "$(col "$f" task)" = mqar ] && [ "$(col "$f" pairs)" = 4 ] && [ "$(col "$f" seq_len)" = 13 ] &&
        [ "$(col "$f" steps)" = 24 ] && [ "$(col "$f" batch)" = 4 ] && [ "$(col "$f" seed)" = 42 ] &&
        [ "$(col "$f" eval_batches)" = 2 ] && [ "$(col "$f" eval_batch)" = 4 ] || { ok=0; why="$why; settings"; }
    # final_loss: the last CSV row's loss; eval_acc: the eval line's
    awk -v a="$(col "$f" final_loss)" -v b="$(tail -n 1 "$WORK/full-$mech/train.csv" | cut -d, -f3)" \
        -v e="$(col "$f" eval_acc)" -v x="$eval_acc" -v ms="$(col "$f" ms_per_step)" -v w="$(col "$f" wall_s)" \
        'BEGIN { exit !(a == b && (e - x < 1e-4 && x - e < 1e-4) && ms > 0 && w > 0 && w * 1000 > ms * 24) }' ||
        { ok=0; why="$why; loss, eval or timing"; }
    case $mech in
    softmax) [[ $sline == "state: layer 0 |S| n/a |A| n/a; layer 1 |S| n/a |A| n/a" ]] &&
        [ "$(col "$f" S_norm_mean),$(col "$f" S_norm_max),$(col "$f" A_norm_mean),$(col "$f" A_norm_max)" = nan,nan,nan,nan ] ||
        { ok=0; why="$why; softmax has no state"; } ;;
    *) # per layer |S| (and |A| for vla) > 0; the summary's mean and max over the two layers
        read -r s0 a0 s1 a1 <<< "$(sed -n 's/^state: layer 0 |S| \([^ ]*\) |A| \([^;]*\); layer 1 |S| \([^ ]*\) |A| \(.*\)$/\1 \2 \3 \4/p' "$WORK/full-$mech.out")"
        if [ $mech = vla ]; then want_a=num; else want_a=n/a; fi
        awk -v s0="$s0" -v s1="$s1" -v a0="$a0" -v a1="$a1" -v wa=$want_a -v sm="$(col "$f" S_norm_mean)" \
            -v sx="$(col "$f" S_norm_max)" -v am="$(col "$f" A_norm_mean)" -v ax="$(col "$f" A_norm_max)" '
            function near(x, y) { return x - y < 1e-3 * y && y - x < 1e-3 * y }
            BEGIN { ok = s0 > 0 && s1 > 0 && near(sm, (s0 + s1) / 2) && near(sx, s0 > s1 ? s0 : s1)
                    if (wa == "n/a") ok = ok && a0 == "n/a" && a1 == "n/a" && am == "nan" && ax == "nan"
                    else ok = ok && a0 > 0 && a1 > 0 && near(am, (a0 + a1) / 2) && near(ax, a0 > a1 ? a0 : a1)
                    exit !ok }' || { ok=0; why="$why; state norms '$sline'"; } ;;
    esac
    if [ $ok -eq 1 ]; then
        pass "summary.csv $mech: 22 columns, one row, done; $sline"
    else
        fail "summary.csv $mech:$why: $(tail -n 1 "$f" 2> /dev/null)"
    fi
done
# Stopped (--stop-after, as an interrupt would): status interrupted, no state norms.
f=$WORK/half-softmax-again/summary.csv
if [ "$(col "$f" status)" = interrupted ] && [ "$(col "$f" eval_acc)" = nan ] && [ "$(col "$f" S_norm_mean)" = nan ] &&
    awk -v l="$(col "$f" final_loss)" 'BEGIN { exit !(l > 0) }'; then
    pass "summary.csv of a stopped run: status interrupted, the last loss, no evaluation"
else
    fail "summary.csv of a stopped run: $(tail -n 1 "$f" 2> /dev/null)"
fi
# A refused run writes no summary.
[ ! -e "$WORK/x1/summary.csv" ] && pass "no summary.csv from a refused run" || fail "a refused run wrote a summary"

# ---- (h) --profile ----------------------------------------------------------------------------------
for mech in vla deltanet; do
    run "prof-$mech" --mechanism $mech "${SMALL[@]}" --steps 6 --log-every 3 --profile --out "$WORK/prof-$mech"
    line=$(grep '^profile: ' "$WORK/prof-$mech.out")
    p=$WORK/prof-$mech/profile.csv
    if [ $RC -eq 0 ] &&
        awk -v l="$line" 'BEGIN {
            if (!match(l, /^profile: attention [0-9.]+ ms\/step \([0-9.]+%\), gemm [0-9.]+ ms\/step \([0-9.]+%\), rest [0-9.]+ ms\/step \([0-9.]+%\), total [0-9.]+/)) exit 1
            n = split(l, w, /[(%]/); s = w[2] + w[4] + w[6]
            split(l, v, " "); a = v[3]; g = v[7]; r = v[11]; t = v[15]
            exit !(s > 99.5 && s < 100.5 && a > 0 && g > 0 && r > 0 && (a + g + r - t) ^ 2 < 1e-4 * t * t) }' &&
        [ "$(head -n 1 "$p")" = "step,attention_ms,gemm_ms,rest_ms,total_ms" ] && [ "$(wc -l < "$p")" -eq 7 ] &&
        awk -F, 'NR > 1 { if ($1 != NR - 1 || $2 <= 0 || $3 <= 0 || $4 < 0) bad = 1
                          d = $2 + $3 + $4 - $5; if (d * d > 1e-6 + 1e-6 * $5 * $5) bad = 1 } END { exit bad }' "$p"; then
        pass "--profile $mech: '$line'; profile.csv 6 rows"
    else
        fail "--profile $mech (rc $RC): '$line' $(head -c 300 "$WORK/prof-$mech.err")"
    fi
done
[ ! -e "$WORK/full-vla/profile.csv" ] && pass "no profile.csv without --profile" || fail "profile.csv without --profile"

# ---- (f) the plot -------------------------------------------------------------------------------------
PLOT="$HERE/../benchmarks/plot_training.sh"
if command -v gnuplot > /dev/null && [ -f "$PLOT" ]; then
    if bash "$PLOT" --out "$WORK/plot" "$WORK/full-softmax=softmax" "$WORK/full-vla/train.csv" > /dev/null 2> "$WORK/plot.err" &&
        [ -s "$WORK/plot.png" ] && [ -s "$WORK/plot.svg" ] && head -c 8 "$WORK/plot.png" | grep -q PNG; then
        pass "plot_training.sh: two runs, PNG and SVG"
    else
        fail "plot_training.sh: $(head -c 300 "$WORK/plot.err")"
    fi
    bash "$PLOT" --out "$WORK/plot2" "$WORK/help.out" > /dev/null 2>&1 && fail "plot_training.sh took a file that is not a vla-train CSV" ||
        pass "plot_training.sh refuses a file that is not a vla-train CSV"
    bash "$PLOT" --help | grep -q "^usage:" && pass "plot_training.sh --help" || fail "plot_training.sh --help"
else
    echo "SKIP: plot_training.sh (gnuplot not installed)"
fi

echo "vla-train: $NPASS passed, $NFAIL failed"
[ $NFAIL -eq 0 ]
