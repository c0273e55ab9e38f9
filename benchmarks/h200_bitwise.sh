#!/usr/bin/env bash
# Session 10: whether two builds give the same bits. Runs vla-run (CUDA, chunked) from the builds
# build-ab-$1 and build-ab-$2 (h200_ab.sh's build folders; vla-run is built in them here) on the
# same random inputs (numpy, fixed seeds) and compares the outputs and final states byte for byte
# (cmp). For changes that should only reorder independent work (session 10: norm_rows' rows at
# once, apart_kernel's first chunk before its wait), "same" is the check.
# Usage on the device, after h200_ab.sh: bash benchmarks/h200_bitwise.sh old new
# Session 18: a fourth mode, "vla-seq": the sequential form (the decode kernel's, dk <= 64) with
# states in (A_in, S_in), so that its loads and stores of A are compared too.
# Session 12: BITWISE_ENV_A / BITWISE_ENV_B ("VAR=value ...") set for the first / second side's runs
# only, so that one build can be compared with itself under a development switch
# (BITWISE_ENV_A="VLA_CP_OUTFOLD=0" bash benchmarks/h200_bitwise.sh new new).
# Session 22: BITWISE_SHAPES ("B-H-d-T ...", default the four below) and BITWISE_MODES (default
# "vla vla-u delta vla-seq") pick the cases, e.g. the (8,16,64) T = 32768 target shape alone.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
A=${1:-old} B=${2:-new}
W=/tmp/bitwise && rm -rf "$W" && mkdir -p "$W"
for x in $(printf "%s\n" "$A" "$B" | sort -u); do
  cmake --build "build-ab-$x" -j"$(nproc)" --target vla-run > "$W/build-$x.log" 2>&1 || { tail -20 "$W/build-$x.log"; exit 1; }
done
run() { find "$ROOT/build-ab-$1/" -name vla-run -type f | head -1; }
SHAPES=${BITWISE_SHAPES:-1-4-32-2048 1-4-32-8192 8-16-64-2048 2-4-40-1000}
python3 - "$W" $SHAPES <<'EOF' || { echo "bitwise: numpy is missing"; exit 1; }
import sys, numpy as np
w = sys.argv[1]
seeds = {"1-4-32-2048": 1, "1-4-32-8192": 2, "8-16-64-2048": 3, "2-4-40-1000": 4} # (the seeds before session 22)
for k, sh in enumerate(sys.argv[2:]):
    B, H, d, T = map(int, sh.split("-"))
    seed = seeds.get(sh, 100 + k)
    r = np.random.default_rng(seed)
    for n in "qkvu":
        np.save(f"{w}/{n}-{B}-{H}-{d}-{T}.npy", r.standard_normal((B, T, H, d)).astype(np.float32))
    np.save(f"{w}/beta-{B}-{H}-{d}-{T}.npy", r.uniform(0.1, 1.0, (B, T, H)).astype(np.float32))
    # session 18: states in for the sequential form (A = 10 I + a small symmetric part, S random)
    X = r.standard_normal((B, H, d, d))
    np.save(f"{w}/a0-{B}-{H}-{d}-{T}.npy", (10 * np.eye(d) + 0.1 * (X @ X.transpose(0, 1, 3, 2)) / d).astype(np.float32))
    np.save(f"{w}/s0-{B}-{H}-{d}-{T}.npy", (0.1 * r.standard_normal((B, H, d, d))).astype(np.float32))
EOF
same=0 diff=0
for s in $SHAPES; do
  for m in ${BITWISE_MODES:-vla vla-u delta vla-seq}; do
    args=(--backend "${BITWISE_BACKEND:-cuda}" --algo chunked --q "$W/q-$s.npy" --k "$W/k-$s.npy" --v "$W/v-$s.npy")
    case $m in
      vla-seq) args=(--backend "${BITWISE_BACKEND:-cuda}" --algo sequential --q "$W/q-$s.npy" --k "$W/k-$s.npy" --v "$W/v-$s.npy"
                     --mechanism vla --a-state-in "$W/a0-$s.npy" --state-in "$W/s0-$s.npy" --a-state-out A.npy) ;;
      vla) args+=(--mechanism vla --a-state-out A.npy) ;;
      vla-u) args+=(--mechanism vla --u "$W/u-$s.npy" --a-state-out A.npy) ;;
      delta) args+=(--mechanism delta --beta "$W/beta-$s.npy") ;;
    esac
    for side in a b; do # side a: build $A with BITWISE_ENV_A; side b: $B with BITWISE_ENV_B
      if [ $side = a ]; then x=$A envs=(${BITWISE_ENV_A:-}); else x=$B envs=(${BITWISE_ENV_B:-}); fi
      mkdir -p "$W/$side" && (cd "$W/$side" && env "${envs[@]}" "$(run "$x")" "${args[@]}" --o o.npy --state-out S.npy > run.log 2>&1) ||
        { echo "$side ($x) $s $m: vla-run failed: $(tail -1 "$W/$side/run.log")"; continue 2; }
      for f in o S A; do [ -f "$W/$side/$f.npy" ] && mv "$W/$side/$f.npy" "$W/$side/$s-$m-$f.npy"; done
    done
    for f in o S A; do
      [ -f "$W/a/$s-$m-$f.npy" ] || continue
      if cmp -s "$W/a/$s-$m-$f.npy" "$W/b/$s-$m-$f.npy"; then same=$((same + 1)); r=same
      else diff=$((diff + 1)); r="DIFFERENT ($(python3 -c "import numpy as np; a=np.load('$W/a/$s-$m-$f.npy'); b=np.load('$W/b/$s-$m-$f.npy'); print('max |a-b| / max |a| = %.3g' % (abs(a.astype('f8')-b).max() / abs(a).max()))"))"; fi
      echo "bitwise $A vs $B: $s $m $f: $r"
    done
  done
done
echo "bitwise $A vs $B: $same same, $diff different"
