#!/usr/bin/env bash
# Tests of the vla-run tool. No Python needed: tests/npy_relerr.c compares, slices and
# concatenates .npy files.
#
#   test_vla_run.sh VLA_RUN GOLDEN_DIR NPY_RELERR
#
# (a) every golden case, with every algorithm its mechanism has, reproduces o.npy and the final
#     states to relative error < 1e-5; (b) bad input fails with a non-zero status, exactly one
#     line "vla-run: ..." on stderr and no output file; (c) --help, --version, --list-devices;
#     (d) streaming in two pieces equals one whole run; plus the preset's override order, float64
#     and format 2.0/3.0 inputs, the beta warning, --verbose; (e) the backward (--grad-*): every
#     golden case with every backward algorithm agrees with the sequential one, known answers
#     (softmax at T = 1: dv = dO; linear with dO = 0: dS_0 = dS_end), two pieces chained
#     through the state gradients equal one whole run, and bad backward input; (f) the paper's
#     DeltaNet (--mechanism delta-paper, no golden case): with phi = none and no gate it is
#     standard DeltaNet (delta without beta and g), forward and backward; a gate of ones equals no
#     gate; its gate [B,T,H,dv] streams and its gradient (--grad-g) comes back in that layout,
#     chained across two pieces; its bad input.
# Prints one line per check; exits 0 only if all pass.
set -u

if [ $# -ne 3 ]; then
    echo "usage: $0 VLA_RUN GOLDEN_DIR NPY_RELERR" >&2
    exit 2
fi
RUN=$1
GOLD=$2
REL=$3
TOL=1e-5
WORK=$(mktemp -d "${TMPDIR:-/tmp}/test_vla_run.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT

NPASS=0
NFAIL=0
pass() { echo "PASS: $*"; NPASS=$((NPASS + 1)); }
fail() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }

# ---- golden cases -----------------------------------------------------------------------------
# Flags for each case of cases.json (its mechanism and non-default parameters). Optional input
# files (u, beta, g) and state outputs are added from what the case folder holds.
declare -A CASE_FLAGS=(
    [softmax_b2t37h3_dk16_dv24]="--mechanism softmax"
    [linear_b2t37h3_dk16_dv24]="--mechanism linear"
    [delta_b2t37h3_dk16_dv24]="--mechanism delta"
    [delta_gated_b1t50h2_dk8_dv8]="--mechanism delta"
    [vla_b2t37h3_dk16_dv24]="--mechanism vla"
    [vla_u_b1t130h2_dk32_dv32]="--mechanism vla"
    [vla_refresh20_b1t100h1_dk8_dv8]="--mechanism vla --refresh 20 --refresh-size 0.001"
    [vla_refresh4_rho0.5_b2t45h2_dk8_dv12]="--mechanism vla --refresh 4 --refresh-size 0.5"
    [vla_preset_paper_b2t61h2_dk16_dv16]="--preset paper"
)

# Algorithms to try per mechanism ("|" separates runs). Small chunks make several chunks and
# segments out of the short golden sequences.
algos_for() {
    case $1 in
    softmax) echo "--algo auto|--algo fused" ;;
    linear | delta) echo "--algo auto|--algo sequential|--algo chunked|--algo chunked --chunk 16|--algo chunked --chunk 5" ;;
    vla) echo "--algo auto|--algo sequential|--algo scan|--algo chunked|--algo chunked --chunk 16|--algo chunked --chunk 5|--algo two-level|--algo two-level --chunk 8|--algo two-level --chunk 4 --segment-chunks 2" ;;
    esac
}

# Every case listed in cases.json must be known here (and every known case listed), so a new
# golden case cannot be skipped silently.
check_case_list() {
    local listed
    listed=$(grep -oE '^ "[^"]+": \{' "$GOLD/cases.json" | sed -E 's/^ "([^"]+)".*/\1/' | sort)
    if [ -z "$listed" ]; then
        fail "cases.json: no cases found in $GOLD/cases.json"
        return
    fi
    local known
    known=$(printf '%s\n' "${!CASE_FLAGS[@]}" | sort)
    if [ "$listed" = "$known" ]; then
        pass "cases.json lists exactly the $(echo "$listed" | wc -l) cases this script knows"
    else
        fail "cases.json and this script's case table differ: $(diff <(echo "$listed") <(echo "$known") | grep '^[<>]' | tr '\n' ' ')"
    fi
}

# Compares each produced file with its reference (pairs MINE=REF, REF relative to ref_dir or
# absolute; a missing REF is skipped); sets $CMP_REPORT to "name=relerr ...".
compare_files() { # out_dir ref_dir pairs...
    local out=$1 ref=$2 ok=0 e
    shift 2
    CMP_REPORT=""
    for pair in "$@"; do
        local mine=${pair%%=*} theirs=${pair#*=}
        case $theirs in /*) ;; *) theirs=$ref/$theirs ;; esac
        [ -f "$theirs" ] || continue
        if e=$("$REL" "$out/$mine" "$theirs" "$TOL" 2>&1); then
            CMP_REPORT+=" ${mine%.npy}=$e"
        else
            CMP_REPORT+=" ${mine%.npy}=$(echo "$e" | tr '\n' ' ')(over $TOL)"
            ok=1
        fi
    done
    return $ok
}

# Input flags for a case folder: q, k, v and whichever of u, beta, g it has.
input_flags() { # dir
    local d=$1 x
    printf -- '--q\n%s\n--k\n%s\n--v\n%s\n' "$d/q.npy" "$d/k.npy" "$d/v.npy"
    for x in u beta g; do
        [ -f "$d/$x.npy" ] && printf -- '--%s\n%s\n' "$x" "$d/$x.npy"
    done
}

run_golden() { # case algo_flags
    local c=$1 algo=$2 d=$GOLD/$1 out
    out=$(mktemp -d "$WORK/golden.XXXXXX")
    local -a args
    mapfile -t args < <(input_flags "$d")
    args+=(--o "$out/o.npy")
    [ -f "$d/S_final.npy" ] && args+=(--state-out "$out/S.npy")
    [ -f "$d/A_final.npy" ] && args+=(--a-state-out "$out/A.npy")
    [ -f "$d/n_final.npy" ] && args+=(--n-state-out "$out/n.npy")
    # shellcheck disable=SC2086  # the flag strings are meant to split into words
    if ! "$RUN" ${CASE_FLAGS[$c]} $algo "${args[@]}" >"$out/stdout" 2>"$out/stderr"; then
        fail "golden $c [$algo]: vla-run failed: $(head -n 3 "$out/stderr")"
        return
    fi
    if [ -s "$out/stdout" ] || [ -s "$out/stderr" ]; then
        fail "golden $c [$algo]: printed something on success: $(head -c 200 "$out/stdout" "$out/stderr")"
        return
    fi
    if compare_files "$out" "$d" o.npy=o.npy S.npy=S_final.npy A.npy=A_final.npy n.npy="$(n_reference "$c")"; then
        pass "golden $c [$algo]:$CMP_REPORT"
    else
        fail "golden $c [$algo]:$CMP_REPORT"
    fi
}

# The reference for the final n of a case: its n_final.npy when that is a readable float
# array; otherwise sum_t elu(k_t) + 1 (what n is for linear and for VLA with phi = elu1, the
# only mechanisms that carry n), computed here, with a NOTE, so the check still happens.
n_reference() { # case
    local d=$GOLD/$1 e
    [ -f "$d/n_final.npy" ] || return 0
    if "$REL" "$d/n_final.npy" "$d/n_final.npy" 0 >/dev/null 2>&1; then
        echo "$d/n_final.npy"
        return
    fi
    local alt=$WORK/nref/$1/n_final.npy
    if [ ! -f "$alt" ]; then
        mkdir -p "${alt%/*}"
        e=$("$REL" "$d/n_final.npy" "$d/n_final.npy" 0 2>&1 | head -n 1)
        echo "NOTE: golden $1: unusable n_final.npy ($e); checking n against sum_t elu(k_t)+1 instead" >&2
        "$REL" --elu1-sum "$d/k.npy" "$alt" >&2
    fi
    echo "$alt"
}

golden_tests() {
    check_case_list
    local c mech algo
    for c in $(printf '%s\n' "${!CASE_FLAGS[@]}" | sort); do
        if [ ! -f "$GOLD/$c/q.npy" ]; then
            fail "golden $c: no such case folder in $GOLD"
            continue
        fi
        mech=$(echo "${CASE_FLAGS[$c]}" | sed -nE 's/.*--mechanism ([a-z]+).*/\1/p')
        [ -n "$mech" ] || mech=vla # --preset paper
        IFS='|' read -r -a algos <<<"$(algos_for "$mech")"
        for algo in "${algos[@]}"; do run_golden "$c" "$algo"; done
    done
}

# ---- crafted .npy files -------------------------------------------------------------------------

# make_npy PATH MAJOR DICT DATA_FILE: a .npy of format MAJOR.0 with header DICT (padded to 64
# bytes, ending in '\n') followed by the bytes of DATA_FILE.
make_npy() {
    local path=$1 major=$2 dict=$3 data=$4 pre hl
    pre=$([ "$major" = 1 ] && echo 10 || echo 12)
    hl=$(((pre + ${#dict} + 1 + 63) / 64 * 64 - pre))
    {
        printf '\x93NUMPY'
        printf "\\x$(printf %02x "$major")\\x00"
        printf "\\x$(printf %02x $((hl & 255)))\\x$(printf %02x $(((hl >> 8) & 255)))"
        [ "$major" = 1 ] || printf '\x00\x00'
        printf '%s' "$dict"
        printf "%$((hl - ${#dict} - 1))s" ''
        printf '\n'
        cat "$data"
    } >"$path"
}

# The header dict and the data bytes of an existing version 1.0 .npy.
npy_dict() { # file
    local hl
    hl=$(od -An -tu1 -j8 -N2 "$1" | awk '{print $1 + 256 * $2}')
    head -c $((10 + hl)) "$1" | tail -c "$hl" | sed -E 's/[[:space:]]+$//'
}
npy_data() { # file out
    local hl
    hl=$(od -An -tu1 -j8 -N2 "$1" | awk '{print $1 + 256 * $2}')
    tail -c +$((10 + hl + 1)) "$1" >"$2"
}

# n bytes of zeros, and n float32 copies of 2.0 (outside beta's (0, 1]).
zeros() { head -c "$1" /dev/zero; }
twos() {
    local i
    for ((i = 0; i < $1; i++)); do printf '\x00\x00\x00\x40'; done
}

# ---- bad input ------------------------------------------------------------------------------------
BN=0
BD=
new_bad() { # fresh empty folder for one bad run's outputs: $BD
    BN=$((BN + 1))
    BD=$WORK/bad$BN
    mkdir -p "$BD"
}

# expect_bad NAME ARGS...: non-zero exit (not a signal), exactly one stderr line starting
# "vla-run: ", nothing on stdout, nothing left in $BD.
expect_bad() {
    local name=$1 rc lines left
    shift
    "$RUN" "$@" >"$WORK/bad$BN.out" 2>"$WORK/bad$BN.err"
    rc=$?
    lines=$(wc -l <"$WORK/bad$BN.err")
    left=$(ls -A "$BD")
    local msg
    msg=$(head -c 300 "$WORK/bad$BN.err" | tr '\n' ' ')
    if [ $rc -eq 0 ]; then
        fail "bad input: $name: exit status 0"
    elif [ $rc -ge 126 ]; then
        fail "bad input: $name: exit status $rc (crash or signal): $msg"
    elif [ "$lines" -ne 1 ] || ! head -n 1 "$WORK/bad$BN.err" | grep -q '^vla-run: .*: .'; then
        fail "bad input: $name: expected one stderr line 'vla-run: <what>: <problem>', got $lines: $msg"
    elif [ -s "$WORK/bad$BN.out" ]; then
        fail "bad input: $name: printed on stdout"
    elif [ -n "$left" ]; then
        fail "bad input: $name: left files behind: $left"
    else
        pass "bad input: $name (exit $rc): $msg"
    fi
}

bad_input_tests() {
    local C=$GOLD/vla_b2t37h3_dk16_dv24 L=$GOLD/linear_b2t37h3_dk16_dv24 D=$GOLD/delta_b2t37h3_dk16_dv24
    local P=$GOLD/vla_preset_paper_b2t61h2_dk16_dv16 X=$WORK/inputs
    mkdir -p "$X"
    local -a VLA=(--mechanism vla --k "$C/k.npy" --v "$C/v.npy") # --q and --o added per case
    local qdict
    qdict=$(npy_dict "$C/q.npy")

    # files
    new_bad; expect_bad "missing file" "${VLA[@]}" --q "$X/no-such.npy" --o "$BD/o.npy"
    head -c $(($(wc -c <"$C/q.npy") - 4)) "$C/q.npy" >"$X/trunc.npy"
    new_bad; expect_bad "truncated file" "${VLA[@]}" --q "$X/trunc.npy" --o "$BD/o.npy"
    cat "$C/q.npy" >"$X/extra.npy"; printf 'abcd' >>"$X/extra.npy"
    new_bad; expect_bad "bytes after the data" "${VLA[@]}" --q "$X/extra.npy" --o "$BD/o.npy"
    zeros $((2 * 37 * 3 * 16 * 8)) >"$X/z8"
    make_npy "$X/i8.npy" 1 "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 37, 3, 16), }" "$X/z8"
    new_bad; expect_bad "int64 npy" "${VLA[@]}" --q "$X/i8.npy" --o "$BD/o.npy"
    zeros $((2 * 37 * 3 * 16 * 4)) >"$X/z4"
    make_npy "$X/be.npy" 1 "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 37, 3, 16), }" "$X/z4"
    new_bad; expect_bad "big-endian float32" "${VLA[@]}" --q "$X/be.npy" --o "$BD/o.npy"
    make_npy "$X/fo.npy" 1 "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 37, 3, 16), }" "$X/z4"
    new_bad; expect_bad "fortran order" "${VLA[@]}" --q "$X/fo.npy" --o "$BD/o.npy"
    make_npy "$X/obj.npy" 1 "{'descr': '|O', 'fortran_order': False, 'shape': (2, 37, 3, 16), }" "$X/z8"
    new_bad; expect_bad "object dtype" "${VLA[@]}" --q "$X/obj.npy" --o "$BD/o.npy"
    make_npy "$X/garbage.npy" 1 "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 37, 3, 16), } junk" "$X/z4"
    new_bad; expect_bad "header garbage" "${VLA[@]}" --q "$X/garbage.npy" --o "$BD/o.npy"
    make_npy "$X/nodict.npy" 1 "print('hello')" "$X/z4"
    new_bad; expect_bad "header not a dict" "${VLA[@]}" --q "$X/nodict.npy" --o "$BD/o.npy"
    make_npy "$X/v9.npy" 9 "$qdict" "$X/z4"
    new_bad; expect_bad "format version 9.0" "${VLA[@]}" --q "$X/v9.npy" --o "$BD/o.npy"
    make_npy "$X/ovf.npy" 1 "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4, 4, 16), }" "$X/z4"
    new_bad; expect_bad "shape product overflow" "${VLA[@]}" --q "$X/ovf.npy" --o "$BD/o.npy"
    make_npy "$X/huge.npy" 1 "{'descr': '<f4', 'fortran_order': False, 'shape': (200000, 100000, 3, 16), }" "$X/z4"
    new_bad; expect_bad "absurd shape for the file size" "${VLA[@]}" --q "$X/huge.npy" --o "$BD/o.npy"
    { printf '\x93NUMPY\x02\x00\xff\xff\xff\xff'; cat "$X/z4"; } >"$X/hlen.npy"
    new_bad; expect_bad "header length past the end" "${VLA[@]}" --q "$X/hlen.npy" --o "$BD/o.npy"
    { printf 'XNUMPY'; tail -c +7 "$C/q.npy"; } >"$X/magic.npy"
    new_bad; expect_bad "bad magic" "${VLA[@]}" --q "$X/magic.npy" --o "$BD/o.npy"
    : >"$X/empty.npy"
    new_bad; expect_bad "empty file" "${VLA[@]}" --q "$X/empty.npy" --o "$BD/o.npy"
    new_bad; expect_bad "a folder as input" "${VLA[@]}" --q "$X" --o "$BD/o.npy"
    : >"$X/nothing"
    make_npy "$X/zero.npy" 1 "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 37, 3, 16), }" "$X/nothing"
    new_bad; expect_bad "zero-length axis" "${VLA[@]}" --q "$X/zero.npy" --o "$BD/o.npy"

    # shapes
    new_bad; expect_bad "k shape != q shape" "${VLA[@]}" --q "$C/q.npy" --k "$GOLD/vla_refresh20_b1t100h1_dk8_dv8/k.npy" --o "$BD/o.npy"
    "$REL" --slice "$C/v.npy" 1 0 36 "$X/v_t36.npy"
    new_bad; expect_bad "v with the wrong T" "${VLA[@]}" --q "$C/q.npy" --v "$X/v_t36.npy" --o "$BD/o.npy"
    "$REL" --slice "$C/q.npy" 3 0 8 "$X/q_dk8.npy"
    new_bad; expect_bad "u shape != q shape" "${VLA[@]}" --q "$C/q.npy" --u "$X/q_dk8.npy" --o "$BD/o.npy"
    "$REL" --slice "$C/q.npy" 3 0 1 "$X/q_dk1.npy"
    new_bad; expect_bad "q with 4 dims but k of another dk" "${VLA[@]}" --q "$X/q_dk1.npy" --o "$BD/o.npy"
    new_bad; expect_bad "beta not [B,T,H]" --mechanism delta --q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy" --beta "$D/q.npy" --o "$BD/o.npy"
    new_bad; expect_bad "state file of the wrong shape" "${VLA[@]}" --q "$C/q.npy" --state-in "$C/A_final.npy" --o "$BD/o.npy"
    new_bad; expect_bad "A state of the wrong shape" "${VLA[@]}" --q "$C/q.npy" --a-state-in "$C/S_final.npy" --o "$BD/o.npy"
    new_bad; expect_bad "n state of the wrong shape" --mechanism linear --q "$L/q.npy" --k "$L/k.npy" --v "$L/v.npy" --n-state-in "$L/S_final.npy" --o "$BD/o.npy"

    # command line
    new_bad; expect_bad "unknown flag" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --bogus 3
    new_bad; expect_bad "positional argument" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" stray
    new_bad; expect_bad "missing value at the end" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --lambda0
    new_bad; expect_bad "missing value before a flag" "${VLA[@]}" --q --o "$BD/o.npy"
    new_bad; expect_bad "missing --mechanism" --q "$C/q.npy" --k "$C/k.npy" --v "$C/v.npy" --o "$BD/o.npy"
    new_bad; expect_bad "missing --o" "${VLA[@]}" --q "$C/q.npy"
    new_bad; expect_bad "--lambda0 -1" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --lambda0 -1
    new_bad; expect_bad "--lambda0 abc" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --lambda0 abc
    new_bad; expect_bad "--lambda0 0.1x" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --lambda0 0.1x
    new_bad; expect_bad "--lambda0 1e999" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --lambda0 1e999
    new_bad; expect_bad "--lambda0 nan" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --lambda0 nan
    new_bad; expect_bad "--eps 0" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --eps 0
    new_bad; expect_bad "--chunk 1.5" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --chunk 1.5
    new_bad; expect_bad "--chunk 99999999999" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --chunk 99999999999
    new_bad; expect_bad "--chunk 0" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --algo chunked --chunk 0
    new_bad; expect_bad "--refresh -1" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --refresh -1
    new_bad; expect_bad "--position -1" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --position -1
    new_bad; expect_bad "--threads -1" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --threads -1
    new_bad; expect_bad "--verbose=1 (takes no value)" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --verbose=1
    new_bad; expect_bad "--normalize-output with --feature-map none on vla" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --normalize-output --feature-map none
    new_bad; expect_bad "--mechanism bogus" --mechanism bogus --q "$C/q.npy" --k "$C/k.npy" --v "$C/v.npy" --o "$BD/o.npy"
    new_bad; expect_bad "--feature-map bogus" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --feature-map bogus
    new_bad; expect_bad "--preset bogus" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --preset bogus
    new_bad; expect_bad "--algo bogus" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --algo bogus
    new_bad; expect_bad "--backend nosuch" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --backend nosuch
    new_bad; expect_bad "--algo scan for linear" --mechanism linear --q "$L/q.npy" --k "$L/k.npy" --v "$L/v.npy" --o "$BD/o.npy" --algo scan
    new_bad; expect_bad "--beta given to vla" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --beta "$D/beta.npy"
    new_bad; expect_bad "--state-in for softmax" --mechanism softmax --q "$C/q.npy" --k "$C/k.npy" --v "$C/v.npy" --state-in "$C/S_final.npy" --o "$BD/o.npy"
    new_bad; expect_bad "--n-state-out for unnormalised vla" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --n-state-out "$BD/n.npy"
    new_bad; expect_bad "--no-normalize-output with --normalize-output" --preset paper --q "$P/q.npy" --k "$P/k.npy" --v "$P/v.npy" --o "$BD/o.npy" --normalize-output --no-normalize-output
    new_bad; expect_bad "--o and --state-out the same file" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --state-out "$BD/o.npy"
    # The op succeeds, o is written, then S cannot be: o must be removed again.
    new_bad; expect_bad "second output unwritable (first one removed)" "${VLA[@]}" --q "$C/q.npy" --o "$BD/o.npy" --state-out "$BD/no/such/dir/S.npy"
    new_bad; expect_bad "output into a missing folder" "${VLA[@]}" --q "$C/q.npy" --o "$BD/no/such/dir/o.npy"
}

# Overwrites bytes of q.npy's prefix and header one at a time: whatever vla-run makes of it,
# it must not crash, and a failure must keep the one-line, no-output contract.
fuzz_header_tests() {
    local C=$GOLD/vla_b2t37h3_dk16_dv24 X=$WORK/fuzz off val rc bad=0 n=0 hl
    mkdir -p "$X"
    hl=$(od -An -tu1 -j8 -N2 "$C/q.npy" | awk '{print $1 + 256 * $2}')
    for ((off = 0; off < 10 + hl; off++)); do
        for val in '\xff' '\x00' '9' ')' "'"; do
            cp "$C/q.npy" "$X/q.npy"
            printf "$val" | dd of="$X/q.npy" bs=1 seek="$off" conv=notrunc status=none
            rm -f "$X/o.npy"
            "$RUN" --mechanism vla --q "$X/q.npy" --k "$C/k.npy" --v "$C/v.npy" --o "$X/o.npy" >/dev/null 2>"$X/err"
            rc=$?
            n=$((n + 1))
            if [ $rc -ge 126 ] || { [ $rc -ne 0 ] && { [ "$(wc -l <"$X/err")" -ne 1 ] || [ -e "$X/o.npy" ]; }; }; then
                bad=$((bad + 1))
                [ $bad -le 3 ] && echo "  fuzz: byte $off = $val: exit $rc: $(head -c 200 "$X/err")"
            fi
        done
    done
    if [ $bad -eq 0 ]; then
        pass "header fuzz: $n corrupted files, no crash, every failure one line and no output"
    else
        fail "header fuzz: $bad of $n corrupted files broke the contract"
    fi
}

# ---- help, version, devices -----------------------------------------------------------------------
info_tests() {
    local out=$WORK/help.txt rc missing=""
    "$RUN" --help >"$out" 2>"$WORK/help.err"
    rc=$?
    local f
    for f in --backend --mechanism --algo --chunk --q --k --v --u --beta --g --o --lambda0 --eps --refresh \
        --refresh-size --u-scale --feature-map --normalize-output --scale --position --state-in --state-out \
        --a-state-in --a-state-out --n-state-in --n-state-out --preset --threads --list-devices --version --help \
        --verbose --grad-o --grad-state-out --grad-a-state-out --grad-n-state-out --grad-q --grad-k --grad-v \
        --grad-u --grad-beta --grad-g --grad-state-in --grad-a-state-in --grad-n-state-in; do
        grep -qE -- "(^|[[:space:]])$f([[:space:]=]|$)" "$out" || missing+=" $f"
    done
    if [ $rc -ne 0 ]; then
        fail "--help: exit status $rc"
    elif [ -n "$missing" ]; then
        fail "--help: does not mention:$missing"
    elif ! grep -q 'default' "$out"; then
        fail "--help: shows no defaults"
    else
        pass "--help: exit 0, mentions every flag, with defaults"
    fi
    if "$RUN" --version >"$out" 2>/dev/null && grep -qE '[0-9]+\.[0-9]+\.[0-9]+' "$out"; then
        pass "--version: $(cat "$out")"
    else
        fail "--version: no version printed"
    fi
    if "$RUN" --list-devices >"$out" 2>/dev/null && grep -q '^cpu' "$out"; then
        pass "--list-devices: lists cpu"
    else
        fail "--list-devices: did not list cpu: $(head -c 200 "$out")"
    fi
}

# ---- streaming ---------------------------------------------------------------------------------------
# run_whole / run_piece print nothing; they leave o.npy and the states in the folder given.
PAPER=$GOLD/vla_preset_paper_b2t61h2_dk16_dv16
STREAM=(--preset paper --refresh 4 --refresh-size 0.5)

streaming_tests() {
    local X=$WORK/stream algo tag T=61 SPLIT=23
    mkdir -p "$X"
    local x
    for x in q k v u; do
        "$REL" --slice "$PAPER/$x.npy" 1 0 $SPLIT "$X/${x}1.npy" || { fail "streaming: cannot split $x.npy"; return; }
        "$REL" --slice "$PAPER/$x.npy" 1 $SPLIT $T "$X/${x}2.npy" || { fail "streaming: cannot split $x.npy"; return; }
    done
    local -a algos=("--algo sequential" "--algo scan" "--algo chunked" "--algo chunked --chunk 8"
        "--algo two-level --chunk 4" "--algo auto")
    local ref=$X/whole_seq
    for algo in "${algos[@]}"; do
        tag=$(echo "$algo" | tr -c 'a-z0-9' '_')
        local w=$X/whole_$tag p=$X/piece_$tag
        mkdir -p "$w" "$p"
        # shellcheck disable=SC2086
        if ! "$RUN" "${STREAM[@]}" $algo --q "$PAPER/q.npy" --k "$PAPER/k.npy" --v "$PAPER/v.npy" --u "$PAPER/u.npy" \
            --o "$w/o.npy" --state-out "$w/S.npy" --a-state-out "$w/A.npy" --n-state-out "$w/n.npy" 2>"$w/err" ||
            ! "$RUN" "${STREAM[@]}" $algo --q "$X/q1.npy" --k "$X/k1.npy" --v "$X/v1.npy" --u "$X/u1.npy" \
                --o "$p/o1.npy" --state-out "$p/S1.npy" --a-state-out "$p/A1.npy" --n-state-out "$p/n1.npy" 2>"$p/err1" ||
            ! "$RUN" "${STREAM[@]}" $algo --q "$X/q2.npy" --k "$X/k2.npy" --v "$X/v2.npy" --u "$X/u2.npy" \
                --position $SPLIT --state-in "$p/S1.npy" --a-state-in "$p/A1.npy" --n-state-in "$p/n1.npy" \
                --o "$p/o2.npy" --state-out "$p/S.npy" --a-state-out "$p/A.npy" --n-state-out "$p/n.npy" 2>"$p/err2"; then
            fail "streaming [$algo]: vla-run failed: $(cat "$w/err" "$p"/err* 2>/dev/null | head -c 300)"
            continue
        fi
        "$REL" --concat 1 "$p/o1.npy" "$p/o2.npy" "$p/o.npy" || { fail "streaming [$algo]: concat failed"; continue; }
        if compare_files "$p" "$w" o.npy=o.npy S.npy=S.npy A.npy=A.npy n.npy=n.npy; then
            pass "streaming [$algo]: pieces 0:$SPLIT + $SPLIT:$T equal the whole run:$CMP_REPORT"
        else
            fail "streaming [$algo]: pieces differ from the whole run:$CMP_REPORT"
        fi
        if [ "$algo" = "--algo sequential" ]; then
            ref=$w
        elif compare_files "$w" "$ref" o.npy=o.npy S.npy=S.npy A.npy=A.npy n.npy=n.npy; then
            pass "streaming [$algo]: whole run equals sequential:$CMP_REPORT"
        else
            fail "streaming [$algo]: whole run differs from sequential:$CMP_REPORT"
        fi
    done
}

# ---- the preset and explicit flags, input formats, warnings, --verbose ---------------------------------
run_paper() { # out_dir extra flags...
    local out=$1
    shift
    mkdir -p "$out"
    "$RUN" --q "$PAPER/q.npy" --k "$PAPER/k.npy" --v "$PAPER/v.npy" --u "$PAPER/u.npy" --o "$out/o.npy" "$@" 2>"$out/err"
}

misc_tests() {
    local X=$WORK/misc e
    mkdir -p "$X"
    # Explicit flags beat the preset whatever their order; and they do change the result.
    if run_paper "$X/a" --refresh 4 --refresh-size 0.5 --preset paper &&
        run_paper "$X/b" --preset paper --refresh 4 --refresh-size 0.5 && run_paper "$X/c" --preset paper; then
        if e=$("$REL" "$X/a/o.npy" "$X/b/o.npy" 0) && ! "$REL" "$X/a/o.npy" "$X/c/o.npy" 1e-6 >/dev/null 2>&1; then
            pass "preset: explicit flags override it before or after --preset (difference $e)"
        else
            fail "preset: explicit flags do not override it in both orders"
        fi
    else
        fail "preset: vla-run failed: $(cat "$X"/*/err | head -c 300)"
    fi

    # float64 inputs (the reference o.npy used as v) give what their float32 rounding gives;
    # format 2.0 and 3.0 files read as 1.0 does.
    local C=$GOLD/vla_b2t37h3_dk16_dv24
    "$REL" --slice "$C/o.npy" 0 0 2 "$X/v32.npy"
    npy_data "$C/q.npy" "$X/qdata"
    make_npy "$X/q_v2.npy" 2 "$(npy_dict "$C/q.npy")" "$X/qdata"
    make_npy "$X/q_v3.npy" 3 "$(npy_dict "$C/q.npy")" "$X/qdata"
    mkdir -p "$X/f64" "$X/f32" "$X/v2" "$X/v3"
    if "$RUN" --mechanism vla --q "$C/q.npy" --k "$C/k.npy" --v "$C/o.npy" --o "$X/f64/o.npy" &&
        "$RUN" --mechanism vla --q "$C/q.npy" --k "$C/k.npy" --v "$X/v32.npy" --o "$X/f32/o.npy" &&
        e=$("$REL" "$X/f64/o.npy" "$X/f32/o.npy" 0); then
        pass "float64 input: same result as its float32 rounding ($e)"
    else
        fail "float64 input: failed or differs"
    fi
    "$RUN" --mechanism vla --q "$C/q.npy" --k "$C/k.npy" --v "$C/v.npy" --o "$X/f32/o_ref.npy"
    local ver
    for ver in 2 3; do
        if "$RUN" --mechanism vla --q "$X/q_v$ver.npy" --k "$C/k.npy" --v "$C/v.npy" --o "$X/v$ver/o.npy" &&
            e=$("$REL" "$X/v$ver/o.npy" "$X/f32/o_ref.npy" 0); then
            pass "format $ver.0 input: read like 1.0 ($e)"
        else
            fail "format $ver.0 input: failed or differs"
        fi
    done

    # beta outside (0, 1]: a warning on stderr, and the op still runs.
    local G=$GOLD/delta_gated_b1t50h2_dk8_dv8
    twos 100 >"$X/twos"
    make_npy "$X/beta2.npy" 1 "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 50, 2), }" "$X/twos"
    mkdir -p "$X/warn"
    if "$RUN" --mechanism delta --q "$G/q.npy" --k "$G/k.npy" --v "$G/v.npy" --beta "$X/beta2.npy" \
        --o "$X/warn/o.npy" 2>"$X/warn/err" && [ -f "$X/warn/o.npy" ] && grep -q 'warning.*beta2.npy.*outside' "$X/warn/err"; then
        pass "beta = 2: warns and still runs: $(head -n 1 "$X/warn/err")"
    else
        fail "beta = 2: no warning, or the op did not run: $(head -c 300 "$X/warn/err")"
    fi

    # --verbose: one summary line on stderr, nothing on stdout.
    mkdir -p "$X/verbose"
    if "$RUN" --mechanism vla --q "$C/q.npy" --k "$C/k.npy" --v "$C/v.npy" --o "$X/verbose/o.npy" --verbose \
        >"$X/verbose/out" 2>"$X/verbose/err" && [ ! -s "$X/verbose/out" ] && [ "$(wc -l <"$X/verbose/err")" -eq 1 ]; then
        pass "--verbose: $(cat "$X/verbose/err")"
    else
        fail "--verbose: expected one stderr line and an empty stdout"
    fi

    # --flag=value works like --flag value.
    mkdir -p "$X/eq"
    if "$RUN" --mechanism=vla --q="$C/q.npy" --k="$C/k.npy" --v="$C/v.npy" --o="$X/eq/o.npy" &&
        e=$("$REL" "$X/eq/o.npy" "$X/f32/o_ref.npy" 0); then
        pass "--flag=value form ($e)"
    else
        fail "--flag=value form: failed or differs"
    fi
}

# ---- the backward (--grad-*) ----------------------------------------------------------------------

# Backward algorithms per mechanism ("|" separates runs); chunk sizes that do not divide T.
grad_algos_for() {
    case $1 in
    softmax) echo "--algo fused|--algo auto" ;;
    *) echo "--algo sequential|--algo chunked|--algo chunked --chunk 5|--algo auto" ;;
    esac
}

# Runs the forward + backward of a golden case with every gradient it has into folder $2.
# dO is the case's o.npy; the final states' upstream gradients are the case's final states.
run_grad() { # case out_dir algo_flags
    local c=$1 out=$2 algo=$3 d=$GOLD/$1
    mkdir -p "$out"
    local -a args
    mapfile -t args < <(input_flags "$d")
    args+=(--o "$out/o.npy" --grad-o "$d/o.npy" --grad-q "$out/dq.npy" --grad-k "$out/dk.npy" --grad-v "$out/dv.npy")
    [ -f "$d/u.npy" ] && args+=(--grad-u "$out/du.npy")
    [ -f "$d/beta.npy" ] && args+=(--grad-beta "$out/dbeta.npy")
    [ -f "$d/g.npy" ] && args+=(--grad-g "$out/dg.npy")
    [ -f "$d/S_final.npy" ] && args+=(--grad-state-out "$d/S_final.npy" --grad-state-in "$out/dS.npy")
    [ -f "$d/A_final.npy" ] && args+=(--grad-a-state-out "$d/A_final.npy" --grad-a-state-in "$out/dA.npy")
    [ -f "$d/n_final.npy" ] && args+=(--grad-n-state-out "$(n_reference "$c")" --grad-n-state-in "$out/dn.npy")
    # shellcheck disable=SC2086
    "$RUN" ${CASE_FLAGS[$c]} $algo "${args[@]}" >"$out/stdout" 2>"$out/stderr"
}

GRAD_FILES=(dq.npy=dq.npy dk.npy=dk.npy dv.npy=dv.npy du.npy=du.npy dbeta.npy=dbeta.npy dg.npy=dg.npy
    dS.npy=dS.npy dA.npy=dA.npy dn.npy=dn.npy)

grad_golden_tests() {
    local c mech algo ref out tag
    for c in $(printf '%s\n' "${!CASE_FLAGS[@]}" | sort); do
        [ -f "$GOLD/$c/q.npy" ] || continue
        mech=$(echo "${CASE_FLAGS[$c]}" | sed -nE 's/.*--mechanism ([a-z]+).*/\1/p')
        [ -n "$mech" ] || mech=vla
        IFS='|' read -r -a algos <<<"$(grad_algos_for "$mech")"
        ref=
        for algo in "${algos[@]}"; do
            tag=$(echo "$algo" | tr -c 'a-z0-9' '_')
            out=$WORK/grad/$c/$tag
            if ! run_grad "$c" "$out" "$algo"; then
                fail "grad $c [$algo]: vla-run failed: $(head -n 3 "$out/stderr")"
                continue
            fi
            if [ -s "$out/stdout" ] || [ -s "$out/stderr" ]; then
                fail "grad $c [$algo]: printed something on success: $(head -c 200 "$out/stdout" "$out/stderr")"
                continue
            fi
            # The forward's output is what it is without the backward.
            if ! compare_files "$out" "$GOLD/$c" o.npy=o.npy; then
                fail "grad $c [$algo]: o differs from the golden o:$CMP_REPORT"
                continue
            fi
            if [ -z "$ref" ]; then
                ref=$out
                local f n=0
                for f in "$out"/d*.npy; do n=$((n + 1)); done
                pass "grad $c [$algo]: $n gradient files written"
            elif compare_files "$out" "$ref" "${GRAD_FILES[@]}"; then
                pass "grad $c [$algo]: equals ${algos[0]#--algo }:$CMP_REPORT"
            else
                fail "grad $c [$algo]: differs from ${algos[0]#--algo }:$CMP_REPORT"
            fi
        done
    done
}

# Answers known without a reference. Softmax over one token is o = v: dv = dO, dq = dk = 0.
# Linear attention's S_T = S_0 + sum_t v_t phi(k_t)^T: with dO = 0, dS_0 = dS_end exactly.
grad_known_tests() {
    local X=$WORK/gradknown S=$GOLD/softmax_b2t37h3_dk16_dv24 L=$GOLD/linear_b2t37h3_dk16_dv24 x e
    mkdir -p "$X"
    for x in q k v; do "$REL" --slice "$S/$x.npy" 1 0 1 "$X/${x}1.npy"; done
    "$REL" --slice "$S/o.npy" 1 0 1 "$X/dO1.npy"
    if "$RUN" --mechanism softmax --q "$X/q1.npy" --k "$X/k1.npy" --v "$X/v1.npy" --o "$X/o1.npy" \
        --grad-o "$X/dO1.npy" --grad-v "$X/dv1.npy" 2>"$X/err1" && e=$("$REL" "$X/dv1.npy" "$X/dO1.npy" 0); then
        pass "grad known: softmax at T = 1 gives dv = dO ($e)"
    else
        fail "grad known: softmax at T = 1: dv != dO: $(head -c 300 "$X/err1") $e"
    fi
    zeros $(($(wc -c <"$L/v.npy") - 128)) >"$X/zv"
    make_npy "$X/dO0.npy" 1 "$(npy_dict "$L/v.npy")" "$X/zv"
    if "$RUN" --mechanism linear --q "$L/q.npy" --k "$L/k.npy" --v "$L/v.npy" --o "$X/o.npy" --grad-o "$X/dO0.npy" \
        --grad-state-out "$L/S_final.npy" --grad-state-in "$X/dS0.npy" 2>"$X/err2" &&
        e=$("$REL" "$X/dS0.npy" "$L/S_final.npy" 1e-7); then
        # S_final.npy is float64: vla-run reads it as float32, hence the 1e-7
        pass "grad known: linear with dO = 0 gives dS_0 = dS_end to float32 rounding ($e)"
    else
        fail "grad known: linear with dO = 0: dS_0 != dS_end: $(head -c 300 "$X/err2") $e"
    fi
}

# Two pieces: piece 2's backward with the whole run's upstream, piece 1's with piece 2's
# gradients of its initial states; the per-token gradients concatenated and piece 1's state
# gradients equal the whole run's.
grad_streaming_tests() {
    local X=$WORK/gradstream T=61 SPLIT=23 x algo tag
    mkdir -p "$X"
    for x in q k v u o; do
        "$REL" --slice "$PAPER/$x.npy" 1 0 $SPLIT "$X/${x}1.npy" || { fail "grad streaming: cannot split"; return; }
        "$REL" --slice "$PAPER/$x.npy" 1 $SPLIT $T "$X/${x}2.npy" || { fail "grad streaming: cannot split"; return; }
    done
    local -a algos=("--algo sequential" "--algo chunked --chunk 8")
    for algo in "${algos[@]}"; do
        tag=$(echo "$algo" | tr -c 'a-z0-9' '_')
        local w=$X/whole_$tag p=$X/piece_$tag
        mkdir -p "$w" "$p"
        # shellcheck disable=SC2086
        if ! "$RUN" "${STREAM[@]}" $algo --q "$PAPER/q.npy" --k "$PAPER/k.npy" --v "$PAPER/v.npy" --u "$PAPER/u.npy" \
            --o "$w/o.npy" --grad-o "$PAPER/o.npy" --grad-state-out "$PAPER/S_final.npy" \
            --grad-a-state-out "$PAPER/A_final.npy" --grad-q "$w/dq.npy" --grad-k "$w/dk.npy" --grad-v "$w/dv.npy" \
            --grad-u "$w/du.npy" --grad-state-in "$w/dS.npy" --grad-a-state-in "$w/dA.npy" \
            --grad-n-state-in "$w/dn.npy" 2>"$w/err" ||
            ! "$RUN" "${STREAM[@]}" $algo --q "$X/q1.npy" --k "$X/k1.npy" --v "$X/v1.npy" --u "$X/u1.npy" \
                --o "$p/o1.npy" --state-out "$p/S1.npy" --a-state-out "$p/A1.npy" --n-state-out "$p/n1.npy" 2>"$p/err1" ||
            ! "$RUN" "${STREAM[@]}" $algo --q "$X/q2.npy" --k "$X/k2.npy" --v "$X/v2.npy" --u "$X/u2.npy" \
                --position $SPLIT --state-in "$p/S1.npy" --a-state-in "$p/A1.npy" --n-state-in "$p/n1.npy" \
                --o "$p/o2.npy" --grad-o "$X/o2.npy" --grad-state-out "$PAPER/S_final.npy" \
                --grad-a-state-out "$PAPER/A_final.npy" --grad-q "$p/dq2.npy" --grad-k "$p/dk2.npy" \
                --grad-v "$p/dv2.npy" --grad-u "$p/du2.npy" --grad-state-in "$p/dS2.npy" \
                --grad-a-state-in "$p/dA2.npy" --grad-n-state-in "$p/dn2.npy" 2>"$p/err2" ||
            ! "$RUN" "${STREAM[@]}" $algo --q "$X/q1.npy" --k "$X/k1.npy" --v "$X/v1.npy" --u "$X/u1.npy" \
                --o "$p/o1b.npy" --grad-o "$X/o1.npy" --grad-state-out "$p/dS2.npy" --grad-a-state-out "$p/dA2.npy" \
                --grad-n-state-out "$p/dn2.npy" --grad-q "$p/dq1.npy" --grad-k "$p/dk1.npy" --grad-v "$p/dv1.npy" \
                --grad-u "$p/du1.npy" --grad-state-in "$p/dS.npy" --grad-a-state-in "$p/dA.npy" \
                --grad-n-state-in "$p/dn.npy" 2>"$p/err3"; then
            fail "grad streaming [$algo]: vla-run failed: $(cat "$w/err" "$p"/err* 2>/dev/null | head -c 300)"
            continue
        fi
        for x in dq dk dv du; do
            "$REL" --concat 1 "$p/${x}1.npy" "$p/${x}2.npy" "$p/$x.npy" || fail "grad streaming [$algo]: concat $x"
        done
        if compare_files "$p" "$w" "${GRAD_FILES[@]}"; then
            pass "grad streaming [$algo]: pieces 0:$SPLIT + $SPLIT:$T chained through the state gradients:$CMP_REPORT"
        else
            fail "grad streaming [$algo]: pieces differ from the whole run:$CMP_REPORT"
        fi
    done
}

grad_bad_input_tests() {
    local C=$GOLD/vla_b2t37h3_dk16_dv24 D=$GOLD/delta_b2t37h3_dk16_dv24 S=$GOLD/softmax_b2t37h3_dk16_dv24
    local -a VLA=(--mechanism vla --q "$C/q.npy" --k "$C/k.npy" --v "$C/v.npy")
    new_bad; expect_bad "--grad-q without --grad-o" "${VLA[@]}" --o "$BD/o.npy" --grad-q "$BD/dq.npy"
    new_bad; expect_bad "--grad-state-out without --grad-o" "${VLA[@]}" --o "$BD/o.npy" --grad-state-out "$C/S_final.npy"
    new_bad; expect_bad "--grad-u without --u" "${VLA[@]}" --o "$BD/o.npy" --grad-o "$C/o.npy" --grad-u "$BD/du.npy"
    new_bad; expect_bad "--grad-beta without --beta" --mechanism delta --q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy" \
        --o "$BD/o.npy" --grad-o "$D/o.npy" --grad-beta "$BD/db.npy"
    new_bad; expect_bad "--grad-o of the wrong shape" "${VLA[@]}" --o "$BD/o.npy" --grad-o "$C/q.npy" --grad-q "$BD/dq.npy"
    new_bad; expect_bad "--grad-state-out of the wrong shape" "${VLA[@]}" --o "$BD/o.npy" --grad-o "$C/o.npy" \
        --grad-state-out "$C/A_final.npy" --grad-q "$BD/dq.npy"
    new_bad; expect_bad "--grad-state-in for softmax" --mechanism softmax --q "$S/q.npy" --k "$S/k.npy" --v "$S/v.npy" \
        --o "$BD/o.npy" --grad-o "$S/o.npy" --grad-state-in "$BD/dS.npy"
    new_bad; expect_bad "--grad-a-state-in for delta" --mechanism delta --q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy" \
        --o "$BD/o.npy" --grad-o "$D/o.npy" --grad-a-state-in "$BD/dA.npy"
    local X=$WORK/gradbad
    mkdir -p "$X"
    zeros $((2 * 3 * 16 * 4)) >"$X/zn"
    make_npy "$X/n0.npy" 1 "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 16), }" "$X/zn"
    new_bad; expect_bad "--grad-n-state-out for unnormalised vla" "${VLA[@]}" --o "$BD/o.npy" --grad-o "$C/o.npy" \
        --grad-n-state-out "$X/n0.npy" --grad-q "$BD/dq.npy"
    new_bad; expect_bad "--algo scan with the backward" "${VLA[@]}" --algo scan --o "$BD/o.npy" --grad-o "$C/o.npy" \
        --grad-q "$BD/dq.npy"
    new_bad; expect_bad "--grad-q and --o the same file" "${VLA[@]}" --o "$BD/o.npy" --grad-o "$C/o.npy" --grad-q "$BD/o.npy"
    new_bad; expect_bad "--grad-k and --grad-v the same file" "${VLA[@]}" --o "$BD/o.npy" --grad-o "$C/o.npy" \
        --grad-k "$BD/d.npy" --grad-v "$BD/d.npy"
    # Both ops succeed, o and dq are written, then dk cannot be: both must be removed again.
    new_bad; expect_bad "a gradient output unwritable (the others removed)" "${VLA[@]}" --o "$BD/o.npy" \
        --grad-o "$C/o.npy" --grad-q "$BD/dq.npy" --grad-k "$BD/no/such/dir/dk.npy"
}

# ---- the paper's DeltaNet (delta-paper) ------------------------------------------------------------
# No golden case: its checks are identities with other runs. Its gate is [B,T,H,dv], values in
# (0, 1) cycling with period 7 (not a divisor of dv = 24, so rows and tokens differ).
gates() { # n: n float32 gate values
    local -a vals=('\x00\x00\x00\x3f' '\x00\x00\x40\x3f' '\x66\x66\x66\x3f' '\x00\x00\x80\x3e'
        '\x33\x33\x73\x3f' '\x9a\x99\x19\x3f' '\x9a\x99\x99\x3e')
    local i
    for ((i = 0; i < $1; i++)); do printf "${vals[i % 7]}"; done
}
ones() { # n: n float32 copies of 1.0
    local i
    for ((i = 0; i < $1; i++)); do printf '\x00\x00\x80\x3f'; done
}

paper_delta_tests() {
    local X=$WORK/dp D=$GOLD/delta_b2t37h3_dk16_dv24 T=37 SPLIT=23 e x
    mkdir -p "$X"
    local GDICT="{'descr': '<f4', 'fortran_order': False, 'shape': (2, 37, 3, 24), }"
    gates $((2 * 37 * 3 * 24)) >"$X/gdata"
    ones $((2 * 37 * 3 * 24)) >"$X/onesdata"
    make_npy "$X/g.npy" 1 "$GDICT" "$X/gdata"
    make_npy "$X/g1.npy" 1 "$GDICT" "$X/onesdata"
    local -a QKV=(--q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy")

    # With phi = none and no gate, S_t = S_{t-1} + (v_t - S_{t-1} k^_t) k^_t^T is standard DeltaNet.
    mkdir -p "$X/dn" "$X/dnc" "$X/dp"
    if "$RUN" --mechanism delta "${QKV[@]}" --o "$X/dn/o.npy" --state-out "$X/dn/S.npy" 2>"$X/dn/err" &&
        "$RUN" --mechanism delta --algo chunked --chunk 16 "${QKV[@]}" --o "$X/dnc/o.npy" --state-out "$X/dnc/S.npy" \
            2>"$X/dnc/err" &&
        "$RUN" --mechanism delta-paper --feature-map none "${QKV[@]}" --o "$X/dp/o.npy" --state-out "$X/dp/S.npy" \
            2>"$X/dp/err"; then
        if compare_files "$X/dp" "$X/dn" o.npy=o.npy S.npy=S.npy && compare_files "$X/dp" "$X/dnc" o.npy=o.npy S.npy=S.npy; then
            pass "delta-paper, phi none, no g: equals delta without beta and g (sequential and chunked):$CMP_REPORT"
        else
            fail "delta-paper, phi none, no g: differs from delta without beta and g:$CMP_REPORT"
        fi
    else
        fail "delta-paper vs delta: vla-run failed: $(cat "$X"/dn/err "$X"/dnc/err "$X"/dp/err | head -c 300)"
    fi

    # A gate of ones is no gate; the cycling gate changes the result; phi = elu1 is the default.
    mkdir -p "$X/ng" "$X/g1" "$X/g" "$X/elu"
    if "$RUN" --mechanism delta-paper "${QKV[@]}" --o "$X/ng/o.npy" --state-out "$X/ng/S.npy" 2>"$X/ng/err" &&
        "$RUN" --mechanism delta-paper "${QKV[@]}" --g "$X/g1.npy" --o "$X/g1/o.npy" --state-out "$X/g1/S.npy" \
            2>"$X/g1/err" &&
        "$RUN" --mechanism delta-paper "${QKV[@]}" --g "$X/g.npy" --o "$X/g/o.npy" --state-out "$X/g/S.npy" \
            2>"$X/g/err" &&
        "$RUN" --mechanism delta-paper --feature-map elu1 "${QKV[@]}" --o "$X/elu/o.npy" 2>"$X/elu/err"; then
        if compare_files "$X/g1" "$X/ng" o.npy=o.npy S.npy=S.npy; then
            pass "delta-paper: a gate of ones equals no gate:$CMP_REPORT"
        else
            fail "delta-paper: a gate of ones differs from no gate:$CMP_REPORT"
        fi
        if ! "$REL" "$X/g/o.npy" "$X/ng/o.npy" 1e-2 >/dev/null 2>&1 && e=$("$REL" "$X/elu/o.npy" "$X/ng/o.npy" 0) &&
            ! "$REL" "$X/ng/o.npy" "$X/dp/o.npy" 1e-2 >/dev/null 2>&1; then
            pass "delta-paper: the gate and phi change o; phi = elu1 is the default ($e)"
        else
            fail "delta-paper: the gate or phi has no effect, or elu1 is not the default"
        fi
    else
        fail "delta-paper gate runs: vla-run failed: $(cat "$X"/ng/err "$X"/g1/err "$X"/g/err "$X"/elu/err | head -c 300)"
    fi

    # Streaming: two pieces (the gate sliced along T), S carried, equal the whole run.
    for x in q k v; do
        "$REL" --slice "$D/$x.npy" 1 0 $SPLIT "$X/${x}1.npy" && "$REL" --slice "$D/$x.npy" 1 $SPLIT $T "$X/${x}2.npy" ||
            { fail "delta-paper streaming: cannot split $x.npy"; return; }
    done
    "$REL" --slice "$X/g.npy" 1 0 $SPLIT "$X/g_1.npy" && "$REL" --slice "$X/g.npy" 1 $SPLIT $T "$X/g_2.npy" ||
        { fail "delta-paper streaming: cannot split g.npy"; return; }
    local P=$X/pieces
    mkdir -p "$P"
    if "$RUN" --mechanism delta-paper --q "$X/q1.npy" --k "$X/k1.npy" --v "$X/v1.npy" --g "$X/g_1.npy" \
        --o "$P/o1.npy" --state-out "$P/S1.npy" 2>"$P/err1" &&
        "$RUN" --mechanism delta-paper --q "$X/q2.npy" --k "$X/k2.npy" --v "$X/v2.npy" --g "$X/g_2.npy" \
            --position $SPLIT --state-in "$P/S1.npy" --o "$P/o2.npy" --state-out "$P/S.npy" 2>"$P/err2" &&
        "$REL" --concat 1 "$P/o1.npy" "$P/o2.npy" "$P/o.npy"; then
        if compare_files "$P" "$X/g" o.npy=o.npy S.npy=S.npy; then
            pass "delta-paper streaming: pieces 0:$SPLIT + $SPLIT:$T equal the whole run:$CMP_REPORT"
        else
            fail "delta-paper streaming: pieces differ from the whole run:$CMP_REPORT"
        fi
    else
        fail "delta-paper streaming: vla-run failed: $(cat "$P"/err* | head -c 300)"
    fi

    # Backward, phi = none and no gate: every gradient equals delta's (no beta, no g).
    local -a UP=(--grad-o "$D/o.npy" --grad-state-out "$D/S_final.npy")
    local -a OUT_N=(--o "$X/bdn/o.npy" --grad-q "$X/bdn/dq.npy" --grad-k "$X/bdn/dk.npy" --grad-v "$X/bdn/dv.npy"
        --grad-state-in "$X/bdn/dS.npy")
    local -a OUT_P=(--o "$X/bdp/o.npy" --grad-q "$X/bdp/dq.npy" --grad-k "$X/bdp/dk.npy" --grad-v "$X/bdp/dv.npy"
        --grad-state-in "$X/bdp/dS.npy")
    mkdir -p "$X/bdn" "$X/bdp"
    if "$RUN" --mechanism delta "${QKV[@]}" "${UP[@]}" "${OUT_N[@]}" 2>"$X/bdn/err" &&
        "$RUN" --mechanism delta-paper --feature-map none "${QKV[@]}" "${UP[@]}" "${OUT_P[@]}" 2>"$X/bdp/err"; then
        if compare_files "$X/bdp" "$X/bdn" dq.npy=dq.npy dk.npy=dk.npy dv.npy=dv.npy dS.npy=dS.npy; then
            pass "delta-paper backward, phi none, no g: equals delta's:$CMP_REPORT"
        else
            fail "delta-paper backward, phi none, no g: differs from delta's:$CMP_REPORT"
        fi
    else
        fail "delta-paper backward vs delta: vla-run failed: $(cat "$X"/bdn/err "$X"/bdp/err | head -c 300)"
    fi

    # Backward with the gate: --grad-g is [B,T,H,dv]; two pieces chained through dS_0 equal the whole run.
    local W=$X/bw B2=$X/bp
    mkdir -p "$W" "$B2"
    "$REL" --slice "$D/o.npy" 1 0 $SPLIT "$X/dO1.npy" && "$REL" --slice "$D/o.npy" 1 $SPLIT $T "$X/dO2.npy" ||
        { fail "delta-paper grad streaming: cannot split o.npy"; return; }
    if "$RUN" --mechanism delta-paper "${QKV[@]}" --g "$X/g.npy" --o "$W/o.npy" "${UP[@]}" --grad-q "$W/dq.npy" \
        --grad-k "$W/dk.npy" --grad-v "$W/dv.npy" --grad-g "$W/dg.npy" --grad-state-in "$W/dS.npy" 2>"$W/err" &&
        "$RUN" --mechanism delta-paper --q "$X/q2.npy" --k "$X/k2.npy" --v "$X/v2.npy" --g "$X/g_2.npy" \
            --position $SPLIT --state-in "$P/S1.npy" --o "$B2/o2.npy" --grad-o "$X/dO2.npy" \
            --grad-state-out "$D/S_final.npy" --grad-q "$B2/dq2.npy" --grad-k "$B2/dk2.npy" --grad-v "$B2/dv2.npy" \
            --grad-g "$B2/dg2.npy" --grad-state-in "$B2/dS2.npy" 2>"$B2/err2" &&
        "$RUN" --mechanism delta-paper --q "$X/q1.npy" --k "$X/k1.npy" --v "$X/v1.npy" --g "$X/g_1.npy" \
            --o "$B2/o1.npy" --grad-o "$X/dO1.npy" --grad-state-out "$B2/dS2.npy" --grad-q "$B2/dq1.npy" \
            --grad-k "$B2/dk1.npy" --grad-v "$B2/dv1.npy" --grad-g "$B2/dg1.npy" --grad-state-in "$B2/dS.npy" \
            2>"$B2/err1"; then
        if npy_dict "$W/dg.npy" | grep -q "'shape': (2, 37, 3, 24)"; then
            pass "delta-paper --grad-g: written as [B,T,H,dv] = (2, 37, 3, 24)"
        else
            fail "delta-paper --grad-g: header $(npy_dict "$W/dg.npy"), expected shape (2, 37, 3, 24)"
        fi
        for x in dq dk dv dg; do
            "$REL" --concat 1 "$B2/${x}1.npy" "$B2/${x}2.npy" "$B2/$x.npy" || fail "delta-paper grad streaming: concat $x"
        done
        if compare_files "$B2" "$W" dq.npy=dq.npy dk.npy=dk.npy dv.npy=dv.npy dg.npy=dg.npy dS.npy=dS.npy; then
            pass "delta-paper grad streaming: pieces chained through the state gradients, gate included:$CMP_REPORT"
        else
            fail "delta-paper grad streaming: pieces differ from the whole run:$CMP_REPORT"
        fi
    else
        fail "delta-paper backward with g: vla-run failed: $(cat "$W"/err "$B2"/err* 2>/dev/null | head -c 300)"
    fi

    # Bad input: delta's [B,T,H] gate, a write strength, the chunked form.
    new_bad; expect_bad "delta-paper: --g of [B,T,H]" --mechanism delta-paper "${QKV[@]}" --g "$D/beta.npy" --o "$BD/o.npy"
    new_bad; expect_bad "delta-paper: --beta" --mechanism delta-paper "${QKV[@]}" --beta "$D/beta.npy" --o "$BD/o.npy"
    new_bad; expect_bad "delta-paper: --algo chunked" --mechanism delta-paper --algo chunked "${QKV[@]}" --o "$BD/o.npy"
    new_bad; expect_bad "delta-paper: --grad-g without --g" --mechanism delta-paper "${QKV[@]}" --o "$BD/o.npy" \
        --grad-o "$D/o.npy" --grad-g "$BD/dg.npy"
    new_bad; expect_bad "delta-paper: --grad-a-state-in" --mechanism delta-paper "${QKV[@]}" --o "$BD/o.npy" \
        --grad-o "$D/o.npy" --grad-a-state-in "$BD/dA.npy"
}

golden_tests
bad_input_tests
fuzz_header_tests
info_tests
streaming_tests
misc_tests
grad_golden_tests
grad_known_tests
grad_streaming_tests
grad_bad_input_tests
paper_delta_tests

echo "test_vla_run: $NPASS passed, $NFAIL failed"
[ $NFAIL -eq 0 ]
