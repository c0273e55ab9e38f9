#!/usr/bin/env bash
# Cross-backend equivalence through the command-line tool: the same random inputs go through
# vla-run on every backend/device this machine has, for every mechanism and algorithm, and each
# device's outputs (o and every final state, as .npy) must equal the CPU backend's within
# tolerance (npy_relerr: ||x - cpu|| / ||cpu||). The inputs come from `vla-check --gen-npy`
# (seeded, no Python needed).
#
#   test_cross_backend.sh VLA_RUN VLA_CHECK NPY_RELERR
#
# Tolerance 1e-5: each backend is within a few 1e-7..1e-6 of the float64 reference on these
# shapes (vla-check), so two of them differ by well under 1e-5.
# Exit: 0 all agree, 1 a difference or a failed run, 2 usage, 77 (skip) when the CPU is the
# only backend here (nothing to compare).
set -u

if [ $# -ne 3 ]; then
    echo "usage: $0 VLA_RUN VLA_CHECK NPY_RELERR" >&2
    exit 2
fi
RUN=$1
CHECK=$2
REL=$3
TOL=1e-5

DEVICES=$("$RUN" --list-devices | awk '{print $1}' | grep -v '^cpu$')
if [ -z "$DEVICES" ]; then
    echo "SKIP: only the CPU backend on this machine; nothing to compare"
    exit 77
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/test_cross_backend.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT

NPASS=0
NFAIL=0
pass() { echo "PASS: $*"; NPASS=$((NPASS + 1)); }
fail() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }

# Two input sets: dk != dv with B*H > 1, and odd sizes with T not a multiple of the chunk.
"$CHECK" --gen-npy "$WORK/in1" --shape 2,45,3,16,24 --seed 7 || exit 1
"$CHECK" --gen-npy "$WORK/in2" --shape 1,70,2,9,5 --seed 8 || exit 1

# name | mechanism flags | algorithms | states written
CASES=(
    "softmax|--mechanism softmax|fused auto|"
    "linear|--mechanism linear|sequential chunked auto|S n"
    "delta|--mechanism delta --beta @/beta.npy --g @/g.npy|sequential chunked auto|S"
    "vla|--mechanism vla|sequential scan chunked two-level auto|S A"
    "vla-u-refresh-norm|--mechanism vla --u @/u.npy --refresh 7 --refresh-size 0.1 --feature-map elu1 --normalize-output --position 3|sequential scan chunked two-level|S A n"
    "vla-paper|--preset paper --u @/u.npy|sequential scan chunked two-level|S A n"
    "delta-paper|--mechanism delta-paper --g @/g_rows.npy|sequential auto|S"
    "delta-paper-phi-none|--mechanism delta-paper --feature-map none --position 5|sequential|S"
)

state_flags() { # dir states...
    local dir=$1 f=""
    shift
    for s in "$@"; do
        case $s in
        S) f="$f --state-out $dir/S.npy" ;;
        A) f="$f --a-state-out $dir/A.npy" ;;
        n) f="$f --n-state-out $dir/n.npy" ;;
        esac
    done
    echo "$f"
}

for input in in1 in2; do
    IN=$WORK/$input
    for entry in "${CASES[@]}"; do
        IFS='|' read -r name mflags algos states <<<"$entry"
        mflags=${mflags//@/$IN}
        for algo in $algos; do
            tag="$input/$name/$algo"
            ref=$WORK/out/$tag/cpu
            mkdir -p "$ref"
            # shellcheck disable=SC2086 # word splitting of the flag strings is intended
            if ! err=$("$RUN" --backend cpu $mflags --algo "$algo" --chunk 16 --q "$IN/q.npy" --k "$IN/k.npy" \
                --v "$IN/v.npy" --o "$ref/o.npy" $(state_flags "$ref" $states) 2>&1); then
                fail "$tag on cpu: $err"
                continue
            fi
            for dev in $DEVICES; do
                out=$WORK/out/$tag/${dev//:/_}
                mkdir -p "$out"
                # shellcheck disable=SC2086
                if ! err=$("$RUN" --backend "$dev" $mflags --algo "$algo" --chunk 16 --q "$IN/q.npy" --k "$IN/k.npy" \
                    --v "$IN/v.npy" --o "$out/o.npy" $(state_flags "$out" $states) 2>&1); then
                    fail "$tag on $dev: $err"
                    continue
                fi
                report=""
                ok=1
                for f in o $states; do
                    if e=$("$REL" "$out/$f.npy" "$ref/$f.npy" "$TOL" 2>&1); then
                        report="$report $f=$e"
                    else
                        report="$report $f=$e(>$TOL)"
                        ok=0
                    fi
                done
                if [ $ok = 1 ]; then
                    pass "$tag: $dev vs cpu:$report"
                else
                    fail "$tag: $dev vs cpu:$report"
                fi
            done
        done
    done
done

echo "$NPASS passed, $NFAIL failed"
[ "$NFAIL" -eq 0 ]
