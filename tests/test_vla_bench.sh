#!/usr/bin/env bash
# vla-bench end to end: a tiny sweep in md, csv and json, --backward, --save, bad input, and
# --targets as this build can run it.
#   bash tests/test_vla_bench.sh path/to/vla-bench [ON|OFF: whether the build has the CUDA backend]
set -u
BENCH=${1:?usage: test_vla_bench.sh path/to/vla-bench [ON|OFF]}
CUDA=${2:-OFF}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

# shellcheck disable=SC2054 # -T takes a comma-separated list
TINY=(-T 16,32 -B 1 -H 1 -d 8 -r 2 --budget 20)
# 10 series (softmax fused; linear, delta: sequential, chunked; vla: 4; delta-paper: sequential)
# x 2 T values.
ROWS=20
HEADER='backend,device,mechanism,algo,B,H,T,dk,dv,median_ms,min_ms,max_ms,tokens_per_s,gflops,gbps'

# ---- md ----
if "$BENCH" "${TINY[@]}" >"$TMP/out.md" 2>"$TMP/err.md"; then
    grep -q '^<!-- vla-bench date: ' "$TMP/out.md" || fail "md: no date comment"
    grep -q '^<!-- build: libvla ' "$TMP/out.md" || fail "md: no build comment"
    grep -q '^| backend | mechanism | algo |' "$TMP/out.md" || fail "md: no table header"
    # main-table rows: | backend | mechanism | ... (the summary table starts with the mechanism)
    n=$(awk -F'|' '$3 ~ /^ (softmax|linear|delta|vla|delta-paper) $/' "$TMP/out.md" | wc -l)
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
assert len(s["shapes"]) == 1 and len(s["shapes"][0]["series"]) == 10
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

# ---- --backward: forward + backward beside the forward, for the backward's 7 series ----
# softmax fused; linear, delta, vla: sequential, chunked (no scan, no two-level); delta-paper:
# sequential; x 2 T values.
# On the CPU backend, which has every backward (auto may pick a backend without one).
BROWS=16
BHEADER="$HEADER,fwdbwd_median_ms,fwdbwd_min_ms,fwdbwd_max_ms,ratio,bwd_gflop,fwdbwd_gflops,fwdbwd_gbps"
if "$BENCH" "${TINY[@]}" --backend cpu --backward --output csv --save "$TMP/bwd" >"$TMP/bwd.out" 2>"$TMP/bwd.err"; then
    [ "$(head -1 "$TMP/bwd.csv")" = "$BHEADER" ] || fail "--backward csv: header is '$(head -1 "$TMP/bwd.csv")'"
    n=$(($(wc -l <"$TMP/bwd.csv") - 1))
    [ "$n" -eq "$BROWS" ] || fail "--backward csv: $n rows, expected $BROWS"
    # 22 columns; every number finite and positive; min <= median <= max for both timings; the
    # ratio is the two medians' quotient; no scan or two-level row.
    bad=$(awk -F, 'NR > 1 {
        if (NF != 22) { print "line " NR ": " NF " columns"; next }
        for (i = 10; i <= 22; i++) if ($i !~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ || $i + 0 <= 0) print "line " NR ": column " i " = " $i
        if ($11 + 0 > $10 + 0 || $10 + 0 > $12 + 0) print "line " NR ": forward not min <= median <= max"
        if ($17 + 0 > $16 + 0 || $16 + 0 > $18 + 0) print "line " NR ": fwd+bwd not min <= median <= max"
        r = $16 / $10; if (r / $19 > 1.0001 || r / $19 < 0.9999) print "line " NR ": ratio " $19 " is not " r
        if ($4 == "scan" || $4 == "two-level") print "line " NR ": " $4 " has no backward"
    }' "$TMP/bwd.csv")
    [ -z "$bad" ] || fail "--backward csv: $bad"
    cmp -s "$TMP/bwd.out" "$TMP/bwd.csv" || fail "--backward: saved csv differs from stdout"
    grep -q 'fwd+bwd: crossover' "$TMP/bwd.err" || fail "--backward csv: no fwd+bwd summary on stderr"
    n=$(grep -c 'B=1 H=1 T=.*fwd+bwd median' "$TMP/bwd.err")
    [ "$n" -eq "$BROWS" ] || fail "--backward: $n progress lines with fwd+bwd, expected $BROWS"
    grep -q '^| backend | mechanism | algo |.* fwd+bwd ms |.* (fwd+bwd)/fwd | bwd GFLOP |' "$TMP/bwd.md" ||
        fail "--backward md: no fwd+bwd columns"
    n=$(awk -F'|' '$3 ~ /^ (softmax|linear|delta|vla|delta-paper) $/ && NF == 23' "$TMP/bwd.md" | wc -l)
    [ "$n" -eq "$BROWS" ] || fail "--backward md: $n table rows of 21 columns, expected $BROWS"
    grep -q 'fused-vs-sequential, forward + backward' "$TMP/bwd.md" || fail "--backward md: no fwd+bwd summary line"
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$TMP/bwd.json" "$BROWS" <<'EOF' || fail "--backward json: content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["settings"]["backward"] is True
assert len(d["results"]) == int(sys.argv[2]), len(d["results"])
for r in d["results"]:
    b = r["backward"]
    assert not r["skipped"] and b["flops"] > 0 and b["bytes"] > 0, r
    assert len(b["fwdbwd_samples_ms"]) == 2, r
    assert min(b["fwdbwd_samples_ms"]) == b["fwdbwd_min_ms"] and max(b["fwdbwd_samples_ms"]) == b["fwdbwd_max_ms"], r
    assert abs(b["ratio"] - b["fwdbwd_median_ms"] / r["median_ms"]) < 1e-6 * b["ratio"], r
    assert abs(b["fwdbwd_gflops"] - (r["flops"] + b["flops"]) / b["fwdbwd_median_ms"] / 1e6) < 1e-6 * b["fwdbwd_gflops"], r
for sh in d["summary"]["shapes"]:
    assert len(sh["series"]) == 8 and all("fwdbwd" in s for s in sh["series"])
    assert "fwdbwd_fused_vs_sequential" in sh
EOF
    fi
    pass "--backward"
else
    fail "--backward run exited non-zero: $(tail -1 "$TMP/bwd.err")"
fi

# ---- --save: the same run in all three formats ----
if "$BENCH" -T 16 -B 1 -H 1 -d 8 -r 2 --budget 20 --mechanism vla --algo chunked --output csv --save "$TMP/saved" \
    >"$TMP/save.out" 2>/dev/null; then
    for e in md csv json; do [ -s "$TMP/saved.$e" ] || fail "--save: no $TMP/saved.$e"; done
    cmp -s "$TMP/save.out" "$TMP/saved.csv" || fail "--save: saved.csv differs from stdout"
    ! ls "$TMP"/saved.*.tmp* >/dev/null 2>&1 || fail "--save: temporary files left: $(ls "$TMP"/saved.*.tmp*)"
    pass "--save"
else
    fail "--save run exited non-zero"
fi

# ---- --save that cannot be written: non-zero, the reason last, nothing on stdout, no file ----
"$BENCH" -T 16 -B 1 -H 1 -d 8 -r 2 --budget 20 --mechanism vla --algo chunked --save "$TMP/no-such-dir/x" \
    >"$TMP/nosave.out" 2>"$TMP/nosave.err"
rc=$?
if [ "$rc" -eq 0 ]; then
    fail "--save to a missing folder: exit status 0"
elif ! tail -1 "$TMP/nosave.err" | grep -q '^vla-bench: --save: cannot write'; then
    fail "--save to a missing folder: last stderr line is '$(tail -1 "$TMP/nosave.err")'"
elif [ -s "$TMP/nosave.out" ]; then
    fail "--save to a missing folder: wrote to stdout"
else
    pass "--save to a missing folder (exit $rc: $(tail -1 "$TMP/nosave.err"))"
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
# The same with --backward: the skipped row keeps every column (22 + note), empty.
if "$BENCH" --backend cpu --backward --mechanism softmax -T 64,65536 -B 1 -H 1 -d 8 -r 2 --budget 2 --output csv \
    >"$TMP/bskip.csv" 2>"$TMP/bskip.err"; then
    awk -F, 'NR > 1 && NF != 23 { bad = 1 } END { exit bad }' "$TMP/bskip.csv" || fail "--backward skip: a row without 23 columns"
    grep -q '^[^,]*,[^,]*,softmax,fused,1,1,65536,8,8,,,,,,,,,,,,,,skipped: budget: estimated' "$TMP/bskip.csv" ||
        fail "--backward skip: T = 65536 not skipped by the estimate: $(tail -1 "$TMP/bskip.csv")"
    pass "--backward budget skip"
else
    fail "--backward budget skip run exited non-zero: $(tail -1 "$TMP/bskip.err")"
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
bad_case "--gate without --targets" --gate 100
bad_case "--backward --mechanism vla --algo scan,two-level" --backward --mechanism vla --algo scan,two-level "${TINY[@]}"
bad_case "--backward with a value" --backward 1
bad_case "--targets --backward" --targets --backward
bad_case "--targets -T" --targets -T 16
bad_case "--targets --gate 0" --targets --gate 0
bad_case "--targets --shape 1,2,3" --targets --shape 1,2,3
bad_case "--targets --shape d > 256" --targets --shape 1,1,512,64
bad_case "--targets --shape MS 0" --targets --shape 1,4,32,2048,0
bad_case "--targets --decode 8,16" --targets --decode 8,16
bad_case "--targets --only bogus" --targets --only vla-chunked,bogus
bad_case "--targets --json without value" --targets --json

# ---- --targets on this build -------------------------------------------------------------------
# Without the CUDA backend: exit 1, one line saying it needs the CUDA backend. With it but no
# usable device (CI: nvcc, no GPU): exit 77, one line "--targets: skipped: ...". With a device: a
# smoke run of the decode rows, the table and the JSON checked. Never a partial --json file.
"$BENCH" --targets --quick --no-limits --only decode --decode 1,2,16 --json "$TMP/targets.json" \
    >"$TMP/targets.out" 2>"$TMP/targets.err"
rc=$?
case "$CUDA:$rc" in
OFF:1 | ON:77)
    want='needs the CUDA backend'
    [ "$rc" -eq 77 ] && want='^vla-bench: --targets: skipped: '
    if [ "$(wc -l <"$TMP/targets.err")" -ne 1 ]; then
        fail "--targets: $(wc -l <"$TMP/targets.err") stderr lines: $(cat "$TMP/targets.err")"
    elif ! grep -q -- "$want" "$TMP/targets.err"; then
        fail "--targets: stderr is '$(cat "$TMP/targets.err")', expected '$want'"
    elif [ -s "$TMP/targets.out" ] || [ -e "$TMP/targets.json" ]; then
        fail "--targets: wrote stdout or the --json file"
    else
        pass "--targets without a usable CUDA device (exit $rc: $(cat "$TMP/targets.err"))"
    fi
    ;;
ON:0)
    n=$(grep -cE '^\| decode \(1,2,16\) T=1 \| (vla|delta|linear) \| sequential \| ' "$TMP/targets.out")
    [ "$n" -eq 3 ] || fail "--targets: $n decode rows, expected 3 (vla, delta, linear)"
    grep -q '^Device limits measured in this run: ' "$TMP/targets.out" || fail "--targets: no limits line"
    grep -q '^### VLA targets' "$TMP/targets.out" || fail "--targets: no VLA targets table"
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$TMP/targets.json" <<'EOF' || fail "--targets: json content"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["rows"]) == 3, d["rows"]
for r in d["rows"]:
    assert r["status"].startswith("ok"), r
    assert r["median_ms"] > 0 and r["flop"] > 0 and r["bytes"] > 0 and r["formula"], r
    assert len(r["samples_ms"]) == 64, r
EOF
    fi
    pass "--targets decode smoke run on the device"
    ;;
*)
    fail "--targets (CUDA $CUDA): exit $rc: $(tail -1 "$TMP/targets.err")"
    ;;
esac

# --help lists every flag with its default.
"$BENCH" --help >"$TMP/help" 2>&1 || fail "--help exited non-zero"
for f in --backend -T -B -H -d --mechanism --algo -r --warmup --output --budget --crossover --backward --threads --seed --save \
    --targets --quick --only --shape --decode --no-limits --u-given --gate --json; do
    grep -q -- "^  $f" "$TMP/help" || fail "--help does not list $f"
done
[ "$(grep -c 'default:' "$TMP/help")" -ge 25 ] || fail "--help: a flag without its default"
"$BENCH" --targets --help >"$TMP/help2" 2>&1 || fail "--targets --help exited non-zero"
cmp -s "$TMP/help" "$TMP/help2" || fail "--targets --help differs from --help"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all vla-bench checks passed"
