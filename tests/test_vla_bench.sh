#!/usr/bin/env bash
# vla-bench end to end: a tiny sweep in md, csv and json, and bad input.
#   bash tests/test_vla_bench.sh path/to/vla-bench
set -u
BENCH=${1:?usage: test_vla_bench.sh path/to/vla-bench}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

TINY=(-T 16,32 -B 1 -H 1 -d 8 -r 2 --budget 20)
# 9 series (softmax fused; linear, delta: sequential, chunked; vla: 4) x 2 T values.
ROWS=18
HEADER='backend,device,mechanism,algo,B,H,T,dk,dv,median_ms,min_ms,max_ms,tokens_per_s,gflops,gbps'

# ---- md ----
if "$BENCH" "${TINY[@]}" >"$TMP/out.md" 2>"$TMP/err.md"; then
    grep -q '^<!-- vla-bench date: ' "$TMP/out.md" || fail "md: no date comment"
    grep -q '^<!-- build: libvla ' "$TMP/out.md" || fail "md: no build comment"
    grep -q '^| backend | mechanism | algo |' "$TMP/out.md" || fail "md: no table header"
    # main-table rows: | backend | mechanism | ... (the summary table starts with the mechanism)
    n=$(awk -F'|' '$3 ~ /^ (softmax|linear|delta|vla) $/' "$TMP/out.md" | wc -l)
    [ "$n" -eq "$ROWS" ] || fail "md: $n table rows, expected $ROWS"
    grep -q '^### Summary' "$TMP/out.md" || fail "md: no summary"
    grep -q 'T = 4096 not in this run' "$TMP/out.md" || fail "md: no 'T = 4096 not in this run'"
    n=$(grep -c 'B=1 H=1 T=' "$TMP/err.md")
    [ "$n" -eq "$ROWS" ] || fail "md: $n progress lines on stderr, expected $ROWS"
    pass "md"
else
    fail "md run exited non-zero: $(tail -1 "$TMP/err.md")"
fi

# ---- csv ----
if "$BENCH" "${TINY[@]}" --output csv >"$TMP/out.csv" 2>"$TMP/err.csv"; then
    [ "$(head -1 "$TMP/out.csv")" = "$HEADER" ] || fail "csv: header is '$(head -1 "$TMP/out.csv")'"
    n=$(($(wc -l <"$TMP/out.csv") - 1))
    [ "$n" -eq "$ROWS" ] || fail "csv: $n rows, expected $ROWS"
    # 15 columns a row; B..dv integers; median..gbps finite positive numbers.
    bad=$(awk -F, 'NR > 1 {
        if (NF != 15) { print "line " NR ": " NF " columns"; next }
        for (i = 5; i <= 9; i++) if ($i !~ /^[0-9]+$/) print "line " NR ": column " i " = " $i
        for (i = 10; i <= 15; i++) if ($i !~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ || $i + 0 <= 0) print "line " NR ": column " i " = " $i
        if ($11 + 0 > $10 + 0 || $10 + 0 > $12 + 0) print "line " NR ": not min <= median <= max"
    }' "$TMP/out.csv")
    [ -z "$bad" ] || fail "csv: $bad"
    grep -q '^summary: ' "$TMP/err.csv" || fail "csv: no summary on stderr"
    ! grep -q '^summary' "$TMP/out.csv" || fail "csv: summary on stdout"
    pass "csv"
else
    fail "csv run exited non-zero: $(tail -1 "$TMP/err.csv")"
fi

# ---- json ----
if "$BENCH" "${TINY[@]}" --output json >"$TMP/out.json" 2>"$TMP/err.json"; then
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys; json.load(sys.stdin)' <"$TMP/out.json" || fail "json: does not parse"
        python3 - "$TMP/out.json" "$ROWS" <<'EOF' || fail "json: content"
import json, sys
d = json.load(open(sys.argv[1]))
rows = int(sys.argv[2])
assert len(d["results"]) == rows, len(d["results"])
for r in d["results"]:
    assert not r["skipped"], r
    assert len(r["samples_ms"]) == 2, r
    assert min(r["samples_ms"]) == r["min_ms"] and max(r["samples_ms"]) == r["max_ms"], r
    assert r["flops"] > 0 and r["bytes"] > 0, r
s = d["summary"]
assert s["backend"] == d["backend"]
assert s["paper"]["vla_crossover_T"] == 43000
assert len(s["shapes"]) == 1 and len(s["shapes"][0]["series"]) == 9
assert s["shapes"][0]["fused_vs_sequential"]["text"] == "T = 4096 not in this run"
EOF
    else
        grep -q '"results": \[' "$TMP/out.json" || fail "json: no results"
        grep -q '"summary": {' "$TMP/out.json" || fail "json: no summary"
        [ "$(tail -1 "$TMP/out.json")" = "}" ] || fail "json: not closed"
    fi
    pass "json"
else
    fail "json run exited non-zero: $(tail -1 "$TMP/err.json")"
fi

# ---- --save: the same run in all three formats ----
if "$BENCH" -T 16 -B 1 -H 1 -d 8 -r 2 --budget 20 --mechanism vla --algo chunked --output csv --save "$TMP/saved" \
    >"$TMP/save.out" 2>/dev/null; then
    for e in md csv json; do [ -s "$TMP/saved.$e" ] || fail "--save: no $TMP/saved.$e"; done
    cmp -s "$TMP/save.out" "$TMP/saved.csv" || fail "--save: saved.csv differs from stdout"
    pass "--save"
else
    fail "--save run exited non-zero"
fi

# ---- budget: a point it cannot afford is skipped with a note, not run ----
# softmax at T = 64 takes > 2 us, so T = 65536 (x 1024^2) is estimated at > 2 s a run: 4 runs
# exceed the 2 s budget whatever the machine.
if "$BENCH" --mechanism softmax -T 64,65536 -B 1 -H 1 -d 8 -r 2 --budget 2 --output csv >"$TMP/skip.csv" 2>"$TMP/skip.err"; then
    [ "$(head -1 "$TMP/skip.csv")" = "$HEADER,note" ] || fail "skip: header is '$(head -1 "$TMP/skip.csv")'"
    awk -F, 'NR > 1 && NF != 16 { bad = 1 } END { exit bad }' "$TMP/skip.csv" || fail "skip: a row without 16 columns"
    grep -q '^[^,]*,[^,]*,softmax,fused,1,1,64,8,8,[0-9]' "$TMP/skip.csv" || fail "skip: T = 64 not measured"
    grep -q '^[^,]*,[^,]*,softmax,fused,1,1,65536,8,8,,,,,,,skipped: budget: estimated' "$TMP/skip.csv" ||
        fail "skip: T = 65536 not skipped by the estimate: $(tail -1 "$TMP/skip.csv")"
    pass "budget skip"
else
    fail "budget skip run exited non-zero: $(tail -1 "$TMP/skip.err")"
fi

# ---- bad input: non-zero exit, exactly one line on stderr, nothing on stdout ----
bad_case() {
    local what=$1
    shift
    "$BENCH" "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"
    local rc=$?
    local lines
    lines=$(wc -l <"$TMP/bad.err")
    if [ "$rc" -eq 0 ]; then
        fail "$what: exit status 0"
    elif [ "$lines" -ne 1 ]; then
        fail "$what: $lines stderr lines: $(cat "$TMP/bad.err")"
    elif [ -s "$TMP/bad.out" ]; then
        fail "$what: wrote to stdout"
    else
        pass "$what (exit $rc: $(cat "$TMP/bad.err"))"
    fi
}
bad_case "unknown backend" --backend no-such-backend "${TINY[@]}"
bad_case "-T abc" -T abc
bad_case "-T 0" -T 0
bad_case "-T 16,,32" -T 16,,32
bad_case "unknown flag" --no-such-flag
bad_case "flag without value" -T
bad_case "--output xml" --output xml
bad_case "--mechanism bogus" --mechanism bogus

# --help lists every flag with its default.
"$BENCH" --help >"$TMP/help" 2>&1 || fail "--help exited non-zero"
for f in --backend -T -B -H -d --mechanism --algo -r --warmup --output --budget --crossover --threads --seed --save; do
    grep -q -- "^  $f" "$TMP/help" || fail "--help does not list $f"
done
[ "$(grep -c 'default:' "$TMP/help")" -ge 15 ] || fail "--help: a flag without its default"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all vla-bench checks passed"
