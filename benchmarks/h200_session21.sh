#!/usr/bin/env bash
# Session 21 on the H200: development switches against session 19's tree in one call.
#  1. builds (sm_90, in parallel): "old" from .ab/old (carried: a `git archive` of the tree to compare
#     against: c842e3a in session 21, 416e00f in session 22), each of
#     $S21_BUILDS ("name:flags", commas between a build's flags) from the working tree, and each of
#     $S21_PATCHED ("name:patch:flags") from a copy of the working tree with that patch applied
#     (patch -p1; e.g. the session's chunk-flags-windowed.patch, tried without landing it);
#  2. sass.txt: bytes of SASS of apart_kernel<32, 2> by kernel-level source line (nvdisasm -gi of a
#     -lineinfo cubin of vla_chunkpar.cu; session 19's sass_bytes_by_line.py) for each flags set of
#     $S21_SASS ("name:flags");
#  3. timeline.txt: for each "build:VAR=v,VAR2=v" of $S21_TL (a timeline build: -DVLA_CP_TIMELINE among
#     its flags), VLA_CP_TIMELINE=1 at $S21_TL_SHAPES; the A-part block records in tl.tar.xz;
#  4. ab.txt: gated (--gate 3000) medians of each "build[:VAR=v,...]" of $S21_AB at $S21_SHAPES,
#     $S21_ROUNDS rounds in turn;
#  5. bitwise-*.txt: benchmarks/h200_bitwise.sh for each pair "a:b" of $S21_BITWISE (same bits?);
#  6. test_cuda on each of $S21_TESTS.
# Before 3, each build that 3 and 4 use runs (1,4,32) T = 2048 once, within 30 s; one that fails is
# left out of 3 and 4 (logged).
# A variable set to " " skips its step. Usage on the device (carry [".debs", ".ab"]):
#   OUT=... S21_...=... bash benchmarks/h200_session21.sh
H200_SCRATCH=/tmp/s21
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
build() { # name, source tree, extra CUDA flags (commas between them)
  local d="$ROOT/build-s21-$1" f="${3//,/ }"
  { cmake -S "$2" -B "$d" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF ${f:+"-DCMAKE_CUDA_FLAGS=$f"} &&
    cmake --build "$d" -j"$(nproc)" --target test_cuda bench_cuda_targets vla-run; } > "$W/build-$1.log" 2>&1 ||
    { echo "build $1 failed"; tail -30 "$W/build-$1.log"; }
}
build old "$ROOT/.ab/old" "" &
for x in ${S21_BUILDS:-new:}; do
  build "${x%%:*}" "$ROOT" "${x#*:}" &
done
for x in ${S21_PATCHED:-}; do # name:patch:flags
  n=${x%%:*} r=${x#*:}; p=${r%%:*} f=""; [ "$r" != "$p" ] && f=${r#*:}
  t="$W/tree-$n" && mkdir -p "$t" &&
    tar -C "$ROOT" --exclude='./build*' --exclude=./.ab --exclude=./.git -cf - . | tar -C "$t" -xf - &&
    (cd "$t" && patch -p1 -s < "$ROOT/$p") && build "$n" "$t" "$f" &
done
{ # 2. SASS by source line (CPU only, beside the builds)
  for x in ${S21_SASS:-}; do
    f="${x#*:}"
    nvcc -std=c++17 -O3 -arch=sm_90 -lineinfo -Ikernels/cuda -Icore/include ${f//,/ } -cubin -o "$W/${x%%:*}.cubin" kernels/cuda/vla_chunkpar.cu &&
      nvdisasm -gi "$W/${x%%:*}.cubin" > "$W/${x%%:*}.sass" &&
      { echo "== ${x%%:*} ($f)"; python3 benchmarks/results/2026-12-01-h200-session19/sass_bytes_by_line.py "$W/${x%%:*}.sass" apart_kernelILi32ELi2ELb0E; }
  done > "$OUT/sass.txt" 2>&1
} &
wait
log "built"
bench() { find "$ROOT/build-s21-$1" -name bench_cuda_targets -type f | head -1; }
# a smoke test of each build the later steps use (30 s at most: a hang, e.g. a flag never set, then
# costs one timeout, not one a round); a build that fails it is left out of the timelines and rounds
dead=" "
for b in $(for c in ${S21_TL:-} ${S21_AB:-old new}; do echo "${c%%:*}"; done | sort -u); do
  if ! timeout 30 "$(bench "$b")" --no-limits --quick --only vla-chunked --shape 1,4,32,2048 > "$W/smoke-$b.txt" 2>&1; then
    dead="$dead$b "
    log "smoke $b FAILED ($(tail -n 1 "$W/smoke-$b.txt")): left out"
  fi
done
alive() { [[ "$dead" != *" $1 "* ]]; }
mkdir -p "$W/tl"
for t in ${S21_TL:-}; do
  b=${t%%:*}; envs=(X=1); [ "$t" != "$b" ] && envs=(${t#*:}); envs=(${envs[*]//,/ })
  alive "$b" || continue
  for s in ${S21_TL_SHAPES:-1,4,32,2048}; do
    f="$W/tl/${t//[:=,]/_}-${s//,/_}.csv"
    echo "== $t $s"
    env "${envs[@]}" VLA_CP_TIMELINE=1 VLA_CP_TIMELINE_DUMP="$f" timeout 60 "$(bench "$b")" --no-limits --quick --only vla-chunked --shape "$s" 2>&1 |
      grep -E "^apart blocks|^timeline| ms \(" | tail -n 3 | sed -E 's/last out \(segment: entry, run\):[^;]*;[^;]*;[^;]*;[^;]*;[^;]*;[^;]*;//'
  done
done 2>&1 | tee "$OUT/timeline.txt"
tar -C "$W/tl" -cJf "$OUT/tl.tar.xz" . 2>/dev/null
log "timelines done"
shapes=(); for s in ${S21_SHAPES:-1,4,32,2048 1,4,32,8192 1,4,32,32768 1,4,32,131072 8,16,64,2048 8,16,64,32768}; do shapes+=(--shape "$s"); done
{
  for round in $(seq 1 "${S21_ROUNDS:-2}"); do
    for c in ${S21_AB:-old new}; do
      b=${c%%:*}; envs=(X=1); [ "$c" != "$b" ] && envs=(${c#*:}); envs=(${envs[*]//,/ })
      alive "$b" || continue
      f="$W/bench-r$round-${c//[:=,]/_}-gate.txt"
      env "${envs[@]}" timeout 150 "$(bench "$b")" --no-limits --gate 3000 --only vla-chunked "${shapes[@]}" > "$f.md" 2> "$f"
      echo "== round $round $c gated: $(grep -E ' ms \(' "$f" | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
    done
  done
} 2>&1 | tee "$OUT/ab.txt"
log "A/B done"
for p in ${S21_BITWISE:-}; do
  a=${p%%:*} b=${p#*:}
  alive "$a" && alive "$b" || continue
  ln -sfn "build-s21-$a" "$ROOT/build-ab-$a"; ln -sfn "build-s21-$b" "$ROOT/build-ab-$b"
  bash "$ROOT/benchmarks/h200_bitwise.sh" "$a" "$b" > "$W/bitwise-$a-$b.txt" 2>&1
  log "bitwise $a $b: $(tail -n 1 "$W/bitwise-$a-$b.txt")"
done
for c in ${S21_TESTS:-}; do
  alive "$c" || continue
  CK_FORK=no timeout 150 "$ROOT/build-s21-$c/tests/test_cuda" > "$W/test_cuda-$c.log" 2>&1
  log "test_cuda $c exit $?: $(tail -n 1 "$W/test_cuda-$c.log")"
done
log "done"
tar -C "$W" --exclude=./tl --exclude='./tree-*' --exclude='*.cubin' --exclude='*.sass' -czf "$OUT/logs.tar.gz" .
cp "$S" "$OUT/summary.txt" 2>/dev/null
