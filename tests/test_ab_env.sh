#!/usr/bin/env bash
# benchmarks/ab_env.sh on the CPU backend: three settings (the third with AB_BUILD, another build's
# tools: here the same build), one tiny row, --check and --profile; the table must hold a number
# for each setting and the ratios, the checks must pass, and bad input must exit 2. Usage: test_ab_env.sh SOURCE_DIR BUILD_DIR
set -u
SRC=$1 BDIR=$2
OUTD=$(mktemp -d)
trap 'rm -rf "$OUTD"' EXIT
fail() { echo "test_ab_env: $*" >&2; exit 1; }
AB=(bash "$SRC/benchmarks/ab_env.sh" --build "$BDIR")
"${AB[@]}" --backend cpu --settings "-;OMP_NUM_THREADS=1;AB_BUILD=$BDIR OMP_NUM_THREADS=2" --rows "1,2,8,64" --passes 2 --reps 1 --warmup 0 \
  --check --profile --out "$OUTD/ab" > "$OUTD/stdout.txt" 2> "$OUTD/stderr.txt" || fail "exit $? ($(tail -n 2 "$OUTD/stderr.txt"))"
row=$(grep '^| 1,2,8,64 |' "$OUTD/ab/ab.md") || fail "no row 1,2,8,64 in ab.md"
# | B,H,d,T | three settings' ms | the first's over the other two |: five numbers
n=$(echo "$row" | tr '|' '\n' | grep -cE '^ *[0-9.]+(e[-+]?[0-9]+)? *$')
[ "$n" = 5 ] || fail "expected 5 numbers in '$row', got $n"
[ "$(grep -c '^-,' "$OUTD/ab/ab.csv")" = 2 ] || fail "expected 2 CSV rows of the defaults (two passes)"
[ "$(grep -c '^AB_BUILD=' "$OUTD/ab/ab.csv")" = 2 ] || fail "expected 2 CSV rows of the AB_BUILD setting"
[ "$(grep -cE '(^|[^0-9])0 failed' "$OUTD/ab/checks.txt")" = 3 ] || fail "expected 3 passing vla-check runs in checks.txt"
cmp -s "$OUTD/stdout.txt" "$OUTD/ab/ab.md" || fail "stdout is not ab.md"
for bad in "--settings foo" "--settings - --rows 1,2,3" "--settings - --passes 0" "--bogus" "--settings -;AB_BUILD=/nonexistent"; do
  # shellcheck disable=SC2086
  "${AB[@]}" $bad --out "$OUTD/bad" > /dev/null 2>&1
  rc=$?
  [ $rc = 2 ] || fail "'$bad' exited $rc, not 2"
done
echo "test_ab_env: ok"
