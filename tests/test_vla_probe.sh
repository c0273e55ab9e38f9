#!/usr/bin/env bash
# Tests of the vla-probe tool on tiny sizes (its maths is tested by test_probe.c).
#
#   test_vla_probe.sh VLA_PROBE
#
# (a) every subcommand runs in md and csv (csv: the header, one field count, the row count);
# (b) --help (top level and per subcommand) exits 0; (c) bad input exits non-zero with exactly
# one line "vla-probe: ..." on stderr and nothing on stdout; (d) same seeds, same output;
# --preset paper says it draws u; (e) the plot script makes a PNG and an SVG (when gnuplot is
# installed). Prints one line per check; exits 0 only if all pass.
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 VLA_PROBE" >&2
    exit 2
fi
PROBE=$1
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/test_vla_probe.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT

NPASS=0
NFAIL=0
pass() { echo "PASS: $*"; NPASS=$((NPASS + 1)); }
fail() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }

# run NAME ARGS...: runs the probe, stdout to $WORK/NAME.out, stderr to $WORK/NAME.err; sets RC.
run() {
    local name=$1
    shift
    "$PROBE" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
    RC=$?
}

# ---- (a) every subcommand, md and csv ----------------------------------------------------------
TINY_states="-T 50 -d 8"
TINY_jacobian="-T 50 -d 8"
TINY_capacity="-d 8 --nmax 12"
HEAD_states="t,linear_S,delta_S,vla_S,vla_A"
HEAD_jacobian="variant,d,T,steps,step_median,step_max,step_median_pow_window,window,windows,window_median,window_max,closed_form_max_reldiff,dense_check_max_reldiff,library_a_max_absdiff,paper_step_norm,paper_after_25"
HEAD_capacity="n,linear_recall,linear_mean_cos,delta_recall,delta_mean_cos,delta_mean_relerr,vla_recall,vla_mean_cos,vla_mean_relerr"
ROWS_states=50
ROWS_jacobian=2
ROWS_capacity=12

for sub in states jacobian capacity; do
    tiny_var=TINY_$sub
    head_var=HEAD_$sub
    rows_var=ROWS_$sub
    # shellcheck disable=SC2086
    run "$sub-md" $sub ${!tiny_var}
    if [ $RC -eq 0 ] && [ ! -s "$WORK/$sub-md.err" ] && grep -q "^# vla-probe $sub" "$WORK/$sub-md.out"; then
        pass "$sub md"
    else
        fail "$sub md (rc $RC): $(head -c 300 "$WORK/$sub-md.err")"
    fi
    # shellcheck disable=SC2086
    run "$sub-csv" $sub ${!tiny_var} --output csv
    out="$WORK/$sub-csv.out"
    nf=$(awk -F, '{print NF}' "$out" | sort -u | wc -l)
    nrows=$(($(wc -l < "$out") - 1))
    if [ $RC -eq 0 ] && [ "$(head -n 1 "$out")" = "${!head_var}" ] && [ "$nf" -eq 1 ] && [ "$nrows" -eq "${!rows_var}" ] &&
        ! grep -qiE 'nan|inf' "$out"; then
        pass "$sub csv ($nrows rows)"
    else
        fail "$sub csv (rc $RC, $nrows rows, $nf field counts): $(head -c 300 "$WORK/$sub-csv.err")"
    fi
done

# Stated content: the paper's numbers beside ours; the checks of the Jacobian.
grep -q "1,630" "$WORK/states-md.out" && grep -q "109" "$WORK/states-md.out" &&
    pass "states md quotes the paper" || fail "states md does not quote the paper's numbers"
grep -q "5.36" "$WORK/jacobian-md.out" && grep -q "closed forms" "$WORK/jacobian-md.out" &&
    pass "jacobian md prints Table 2 and the closed-form check" || fail "jacobian md lacks Table 2 or the check"
awk -F, 'NR > 1 && ($12 > 1e-12 || $13 > 1e-12) { bad = 1 } END { exit bad }' "$WORK/jacobian-csv.out" &&
    pass "jacobian csv: numeric norms match the closed forms and the dense SVD" ||
    fail "jacobian csv: closed form or dense check differs"

run states-every states -T 50 -d 8 --every 10 --output csv
[ $RC -eq 0 ] && [ "$(($(wc -l < "$WORK/states-every.out") - 1))" -eq 5 ] &&
    [ "$(tail -n 1 "$WORK/states-every.out" | cut -d, -f1)" = 50 ] &&
    pass "states --every 10: 5 rows, last t = 50" || fail "states --every 10"

run cap-orth capacity -d 8 --nmax 8 --keys orthonormal --output csv
awk -F, 'NR > 1 && ($4 != 1 || $7 != 1 || $8 < 0.9999) { bad = 1 } END { exit bad }' "$WORK/cap-orth.out" &&
    [ $RC -eq 0 ] && pass "capacity --keys orthonormal: DeltaNet and VLA recall every pair, n <= d" ||
    fail "capacity --keys orthonormal: not exact"

# ---- (b) --help ----------------------------------------------------------------------------------
for args in "--help" "states --help" "jacobian --help" "capacity --help" "capacity -h"; do
    # shellcheck disable=SC2086
    run help $args
    if [ $RC -eq 0 ] && grep -q "usage: vla-probe" "$WORK/help.out" && [ ! -s "$WORK/help.err" ]; then
        pass "$args"
    else
        fail "$args (rc $RC)"
    fi
done
run help states --help
grep -q -- "--every N" "$WORK/help.out" && grep -q "default 1000" "$WORK/help.out" &&
    pass "states --help lists flags with defaults" || fail "states --help lacks flags or defaults"

# ---- (c) bad input ----------------------------------------------------------------------------------
bad_cases=(
    ""
    "nosuch"
    "states --nosuch"
    "states -T 0"
    "states -T abc"
    "states -T"
    "states -d 0"
    "states -d 300"
    "states -d 8,16"
    "states --every 0 -T 10"
    "states --every 20 -T 10"
    "states --output xml"
    "states --seeds 1,x"
    "states --lambda0 -1"
    "states --lambda0 nan"
    "states --eps 0"
    "states --refresh -2"
    "states --preset nosuch"
    "states --u sometimes"
    "states --backend nosuch -T 5 -d 4"
    "states --help=yes"
    "states --keys orthonormal"
    "jacobian -d 1"
    "jacobian --window 0"
    "jacobian --nmax 4"
    "capacity -T 50"
    "capacity --keys weird"
    "capacity --nmax 0"
)
for args in "${bad_cases[@]}"; do
    # shellcheck disable=SC2086
    run bad $args
    nl=$(wc -l < "$WORK/bad.err")
    if [ $RC -ne 0 ] && [ "$nl" -eq 1 ] && grep -q "^vla-probe: " "$WORK/bad.err" && [ ! -s "$WORK/bad.out" ]; then
        pass "bad input '$args': $(cat "$WORK/bad.err")"
    else
        fail "bad input '$args': rc $RC, $nl stderr lines, $(wc -c < "$WORK/bad.out") stdout bytes"
    fi
done

# ---- (d) reproducible; the preset ---------------------------------------------------------------------
run rep1 states -T 30 -d 4 --seeds 7 --output csv
cp "$WORK/rep1.out" "$WORK/rep1.keep"
run rep2 states -T 30 -d 4 --seeds 7 --output csv
cmp -s "$WORK/rep1.keep" "$WORK/rep2.out" && pass "same seed, same output" || fail "same seed, different output"
run rep3 states -T 30 -d 4 --seeds 8 --output csv
cmp -s "$WORK/rep1.keep" "$WORK/rep3.out" && fail "another seed, same output" || pass "another seed, other output"

for sub in states jacobian capacity; do
    tiny_var=TINY_$sub
    # shellcheck disable=SC2086
    run preset $sub ${!tiny_var} --preset paper
    if [ $RC -eq 0 ] && grep -q "preset paper" "$WORK/preset.out" && grep -q "u drawn N(0, 1)" "$WORK/preset.out"; then
        pass "$sub --preset paper (draws u and says so)"
    else
        fail "$sub --preset paper (rc $RC): $(head -c 300 "$WORK/preset.err")"
    fi
done

# ---- (e) the plot ---------------------------------------------------------------------------------------
PLOT="$HERE/../benchmarks/plot_states.sh"
if command -v gnuplot > /dev/null && [ -f "$PLOT" ]; then
    if bash "$PLOT" "$WORK/states-csv.out" "$WORK/plot" > /dev/null 2> "$WORK/plot.err" &&
        [ -s "$WORK/plot.png" ] && [ -s "$WORK/plot.svg" ] && head -c 8 "$WORK/plot.png" | grep -q PNG; then
        pass "plot_states.sh: PNG and SVG"
    else
        fail "plot_states.sh: $(head -c 300 "$WORK/plot.err")"
    fi
    bash "$PLOT" "$WORK/jacobian-csv.out" "$WORK/plot2" > /dev/null 2>&1 && fail "plot_states.sh took a non-states csv" ||
        pass "plot_states.sh refuses a csv that is not of states"
else
    echo "SKIP: plot_states.sh (no gnuplot)"
fi

echo "vla-probe tests: $NPASS passed, $NFAIL failed"
[ "$NFAIL" -eq 0 ]
