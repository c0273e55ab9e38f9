#!/usr/bin/env bash
# Tests of benchmarks/reproduce_paper.sh (and benchmarks/paper_tables.py) on the CPU at a tiny
# size: about 20 s on 2 cores.
#
#   test_reproduce_paper.sh VLA_TRAIN
#
# (a) --help; (b) bad command lines: exit 2, one line on stderr, no results folder made;
# (c) --dry-run lists the whole plan: every experiment, 170 runs in the order the issue asks
# for (Table 11 at 1000 steps first, then Table 9), shared runs once; (d) a --quick run of
# Table 11 (--quick: n = 4) with two mechanisms and a test-only --steps 6 --eval-batches 1: exit 0,
# tables.md with ours (and that the paper has no number at n = 4), the reduced set named,
# results.csv, README.md, every run's summary.csv; (e) the same
# command again skips the runs done, --pack packs the folder; (f) a different setting into the
# same folder is refused;
# (g) --tables-only redoes the tables; (h) without summary.csv (an older vla-train) the tables
# still come, from stdout.txt; (i) --deadline too short for any run: exit 1, every run "not run";
# (j) --from copies an earlier folder's done runs (and its invocations) and runs only the rest;
# another setting: exit 2.
# One line per check; exit 0 only if all pass, 77 (skipped) without python3.
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 VLA_TRAIN" >&2
    exit 2
fi
TRAIN=$1
# The tables need Python 3 (the standard library only): skipped (77) without it.
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
HERE=$(cd "$(dirname "$0")" && pwd)
SCRIPT=$HERE/../benchmarks/reproduce_paper.sh
BDIR=$(dirname "$TRAIN")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/test_reproduce_paper.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

NPASS=0
NFAIL=0
pass() { echo "PASS: $*"; NPASS=$((NPASS + 1)); }
fail() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
# run NAME ARGS...: the script, stdout to $WORK/NAME.out, stderr to $WORK/NAME.err; sets RC.
run() {
    local name=$1
    shift
    bash "$SCRIPT" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
    RC=$?
}

# (a)
run help --help
if [ $RC -eq 0 ] && grep -q -- '--deadline S' "$WORK/help.out" && grep -q -- '--tables-only DIR' "$WORK/help.out"; then
    pass "--help"
else
    fail "--help (exit $RC)"
fi

# (b)
for bad in "--bogus" "--only table10" "--mechanisms softmax,gru" "--jobs two" "--jobs 0" "--steps" \
    "--backend metal" "--deadline -5" "--tables-only $WORK/nothing"; do
    # shellcheck disable=SC2086 # the flags split at spaces
    run bad --build "$BDIR" --results "$WORK/bad" $bad
    if [ $RC -eq 2 ] && [ "$(wc -l < "$WORK/bad.err")" -eq 1 ] && [ ! -e "$WORK/bad" ]; then
        pass "bad command line '$bad': exit 2, one line"
    else
        fail "bad command line '$bad': exit $RC, $(wc -l < "$WORK/bad.err") lines: $(head -c 200 "$WORK/bad.err")"
    fi
done

# (c)
run dry --build "$BDIR" --dry-run
if [ $RC -eq 0 ] && [ "$(grep -c -E '^ *[0-9]+ (mqar|copy)' "$WORK/dry.out")" -eq 170 ] &&
    grep -q -E '^ +all +170 runs, +347500 steps' "$WORK/dry.out"; then
    pass "--dry-run: 170 runs, 347500 steps"
else
    fail "--dry-run (exit $RC): $(grep -E '^ +all ' "$WORK/dry.out")"
fi
ok=1
for e in table11 table9 table11-seeds fig6 copy zoology; do grep -q -E "^ +$e +[0-9]+ runs" "$WORK/dry.out" || ok=0; done
for m in softmax linear delta deltanet vla; do grep -q -E "^ *[0-9]+ mqar-$m-n24-T73-s3000-seed999" "$WORK/dry.out" || ok=0; done
first=$(grep -m 1 -E '^ *1 ' "$WORK/dry.out" | awk '{ print $2 }')
shared=$(grep -c -E ' mqar-vla-n24-T73-s3000-seed42-lr3e-4 +\[table9,table11\]' "$WORK/dry.out")
t9=$(grep -n -m 1 'seed123' "$WORK/dry.out" | cut -d: -f1)
t11=$(grep -n -m 1 's1000-seed42' "$WORK/dry.out" | cut -d: -f1)
if ((ok)) && [ "$first" = mqar-softmax-n8-T25-s1000-seed42-lr3e-4 ] && [ "$shared" = 1 ] && ((t11 < t9)); then
    pass "--dry-run: every experiment and mechanism, Table 11 at 1000 steps first, shared runs once"
else
    fail "--dry-run plan: ok $ok, first '$first', shared $shared, lines $t11 $t9"
fi

# (d)
R=$WORK/r
# shellcheck disable=SC2054 # the commas are --mechanisms' list
QUICK=(--build "$BDIR" --quick --only table11 --mechanisms softmax,vla --steps 6 --eval-batches 1 --jobs 2 --threads 1 --no-plots --results "$R")
t0=$SECONDS
run quick "${QUICK[@]}"
dt=$((SECONDS - t0))
# shellcheck disable=SC2016 # backquotes of the markdown
if [ $RC -eq 0 ] && grep -q -E '^\| softmax \| 0\.[0-9]{3} \|$' "$R/tables.md" &&
    grep -q -E '^\| VLA \(`vla`\) \| 0\.[0-9]{3} \|$' "$R/tables.md" &&
    grep -q '^No paper number at n = 4 ' "$R/tables.md" &&
    grep -q -E '^\*\*A reduced set \(reproduce_paper.sh --quick\): MQAR n = 4, 6 steps, batch 64, not the$' "$R/tables.md" &&
    grep -q -E '^\| Table 11, n = 4, 6 steps \| n/a \| S [0-9.]+ \([0-9.]+\), A [0-9.]+' "$R/tables.md" &&
    grep -q '^2 of 2 planned runs done' "$R/tables.md"; then
    pass "--quick run ($dt s): tables.md with ours, the reduced set named, state norms"
else
    fail "--quick run (exit $RC, $dt s): $(tail -n 3 "$WORK/quick.err")"
fi
if [ "$(grep -c -E ',done,[0-9][0-9.e-]*,' "$R/results.csv" 2> /dev/null)" = 2 ] && [ -s "$R/README.md" ] &&
    [ "$(find "$R/runs" -name summary.csv | wc -l)" = 2 ] && [ -z "$(find "$R/runs" -name checkpoint.bin)" ] &&
    ! ls "$R"/*.tmp "$R"/plots/*.tmp > /dev/null 2>&1; then
    pass "results.csv: 2 runs done; README.md; no checkpoint or temporary file left"
else
    fail "results.csv / README.md / leftovers"
fi

# (e)
before=$(cat "$R"/runs/*/train.csv | cksum)
run again "${QUICK[@]}" --pack "$WORK/r.tar.gz"
if [ $RC -eq 0 ] && grep -q '2 runs already done: skipped' "$WORK/again.err" && ! grep -q 'started' "$WORK/again.err" &&
    [ "$(cat "$R"/runs/*/train.csv | cksum)" = "$before" ] &&
    [ "$(tar -tzf "$WORK/r.tar.gz" 2> /dev/null | grep -c -E '^r/(tables.md|runs/.*/summary.csv)$')" = 3 ]; then
    pass "the same command again: the runs done are skipped; --pack"
else
    fail "the same command again (exit $RC): $(tail -n 2 "$WORK/again.err")"
fi

# (f)
run other --build "$BDIR" --quick --only table11 --mechanisms softmax --steps 7 --results "$R"
if [ $RC -eq 2 ] && [ "$(wc -l < "$WORK/other.err")" -eq 1 ] && grep -q 'another setting' "$WORK/other.err"; then
    pass "another setting into the same folder: refused"
else
    fail "another setting into the same folder (exit $RC): $(head -c 200 "$WORK/other.err")"
fi

# (g)
rm -f "$R/tables.md"
run tables --tables-only "$R" --no-plots
if [ $RC -eq 0 ] && grep -q -E '^\| softmax \| 0\.[0-9]{3} \|$' "$R/tables.md"; then
    pass "--tables-only"
else
    fail "--tables-only (exit $RC): $(head -c 200 "$WORK/tables.err")"
fi

# (h)
cp -r "$R" "$WORK/old"
rm -f "$WORK"/old/runs/*/summary.csv
run old --tables-only "$WORK/old" --no-plots
a=$(grep -E '^\| (softmax|VLA)' "$R/tables.md" | head -n 2)
b=$(grep -E '^\| (softmax|VLA)' "$WORK/old/tables.md" | head -n 2)
if [ $RC -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && grep -q -E '\| S [0-9.]+ \([0-9.]+\), A [0-9.]+' "$WORK/old/tables.md"; then
    pass "without summary.csv: the same accuracies and the state norms from stdout.txt"
else
    fail "without summary.csv (exit $RC): '$a' vs '$b'"
fi

# (i)
run late --build "$BDIR" --quick --only table11 --mechanisms softmax,vla --steps 6 --eval-batches 1 --no-plots \
    --deadline 1 --results "$WORK/late"
if [ $RC -eq 1 ] && [ "$(grep -c '| not run' "$WORK/late/tables.md")" -ge 2 ] &&
    grep -q '^0 of 2 planned runs done' "$WORK/late/tables.md" && grep -q 'left out by the deadline' "$WORK/late.err"; then
    pass "--deadline too short: exit 1, the runs marked not run"
else
    fail "--deadline too short (exit $RC): $(tail -n 2 "$WORK/late.err")"
fi

# (j)
run from1 --build "$BDIR" --quick --only table11 --mechanisms softmax --steps 6 --eval-batches 1 --no-plots \
    --results "$WORK/fromA"
run from2 --build "$BDIR" --quick --only table11 --mechanisms softmax,linear --steps 6 --eval-batches 1 --no-plots \
    --results "$WORK/fromB" --from "$WORK/fromA"
ran=$(grep -c ': started' "$WORK/from2.err")
if [ $RC -eq 0 ] && [ "$ran" -eq 1 ] && grep -q 'linear.*: started' "$WORK/from2.err" &&
    cmp -s "$WORK/fromA/runs/mqar-softmax-n4-T13-s6-seed42-lr3e-4/summary.csv" \
        "$WORK/fromB/runs/mqar-softmax-n4-T13-s6-seed42-lr3e-4/summary.csv"; then
    pass "--from: the earlier folder's run copied in, only the new one run"
else
    fail "--from (exit $RC, $ran started): $(tail -n 2 "$WORK/from2.err")"
fi
# its invocations: fromA's line first, then fromB's own, two lines in all
if [ "$(wc -l < "$WORK/fromB/invocations.txt")" -eq 2 ] &&
    [ "$(head -n 1 "$WORK/fromB/invocations.txt")" = "$(cat "$WORK/fromA/invocations.txt")" ] &&
    tail -n 1 "$WORK/fromB/invocations.txt" | grep -q -- '--from'; then
    pass "--from: the earlier folder's invocations carried over, first"
else
    fail "--from: invocations.txt: $(head -n 3 "$WORK/fromB/invocations.txt" 2> /dev/null)"
fi
run from3 --build "$BDIR" --quick --only table11 --mechanisms softmax --steps 7 --eval-batches 1 --no-plots \
    --results "$WORK/fromC" --from "$WORK/fromA"
if [ $RC -eq 2 ] && [ ! -e "$WORK/fromC" ] && grep -q 'runs of another setting' "$WORK/from3.err"; then
    pass "--from with another setting: exit 2, nothing written"
else
    fail "--from with another setting (exit $RC): $(tail -n 1 "$WORK/from3.err")"
fi

echo "$NPASS passed, $NFAIL failed"
[ "$NFAIL" -eq 0 ]
