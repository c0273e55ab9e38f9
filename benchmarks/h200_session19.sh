#!/usr/bin/env bash
# Session 19 on the H200: one device call per use, the builds and measurements chosen by variables.
#  1. builds (sm_90) of the working tree: $S19_BUILDS ("name:flags ...", commas between a build's
#     flags; default "new: tl:-DVLA_CP_TIMELINE"). (Run 1 built "warm" and "tlw" with
#     -DVLA_CP_TLB_WARM, the switch of tlb-warm.patch in benchmarks/results/2026-12-01-h200-session19,
#     since removed: it changed nothing.)
#  2. timeline.txt: for each of $S19_TL_BUILDS (default "tl") and each configuration of
#     $S19_TL_CONFIGS ("X=1" for none, else VAR=value[,VAR=value]), the timeline build at
#     $S19_TL_SHAPES with VLA_CP_TIMELINE=1 and VLA_CP_TIMELINE_DUMP (every A-part block's record,
#     CSV, in $OUT/tl.tar.xz); the summary lines ("apart blocks ... by segment quarter") printed;
#  3. ab.txt: gated (--gate 3000) and ungated medians of $S19_AB (default "new") at $S19_SHAPES,
#     $S19_ROUNDS (default two) rounds in turn;
#  4. test_cuda on each of $S19_TESTS (default "new");
#  5. profile.txt: each of $S19_PROF (builds) at $S19_PROF_SHAPES with VLA_CUDA_KERNEL_TIMES=1.
# A variable set to " " (a space) skips its step. The commands of each run are in the results'
# README. Usage on the device (carry [".debs"]): OUT=... S19_...=... bash benchmarks/h200_session19.sh
H200_SCRATCH=/tmp/s19
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
build() { # name, extra CUDA flags (commas between them)
  local d="$ROOT/build-s19-$1" f="${2//,/ }"
  { cmake -S . -B "$d" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF ${f:+"-DCMAKE_CUDA_FLAGS=$f"} &&
    cmake --build "$d" -j"$(nproc)" --target test_cuda bench_cuda_targets; } > "$W/build-$1.log" 2>&1 ||
    { tail -30 "$W/build-$1.log"; exit 1; }
}
for x in ${S19_BUILDS:-new: tl:-DVLA_CP_TIMELINE}; do
  build "${x%%:*}" "${x#*:}" &
done
wait
log "built"
bench() { find "$ROOT/build-s19-$1" -name bench_cuda_targets -type f | head -1; }
mkdir -p "$W/tl"
{
  for b in ${S19_TL_BUILDS:-tl}; do
    for c in ${S19_TL_CONFIGS:-X=1 VLA_CP_WS_PAD=65536 VLA_CP_WS_PAD=2097152 VLA_BENCH_PAD=2097152 VLA_CP_PDL=0}; do
      envs=(${c//,/ })
      for s in ${S19_TL_SHAPES:-1,4,32,2048}; do
        f="$W/tl/$b-${c//[=,]/_}-${s//,/_}.csv"
        echo "== $b $c $s"
        env "${envs[@]}" VLA_CP_TIMELINE=1 VLA_CP_TIMELINE_DUMP="$f" timeout 60 "$(bench "$b")" --no-limits --quick --only vla-chunked --shape "$s" 2>&1 |
          grep -E "^apart blocks|^timeline| ms \(" | tail -n 3 | sed -E 's/last out \(segment: entry, run\):[^;]*;[^;]*;[^;]*;[^;]*;[^;]*;[^;]*;//'
      done
    done
  done
} 2>&1 | tee "$OUT/timeline.txt"
tar -C "$W/tl" -cJf "$OUT/tl.tar.xz" . 2>/dev/null || tar -C "$W/tl" -czf "$OUT/tl.tar.gz" .
log "timelines done"
shapes=(); for s in ${S19_SHAPES:-1,4,32,2048 1,4,32,8192 1,4,32,32768 8,16,64,2048}; do shapes+=(--shape "$s"); done
{
  for round in $(seq 1 "${S19_ROUNDS:-2}"); do
    for c in ${S19_AB:-new}; do
      b=${c%%:*}; envs=(); [ "$c" != "$b" ] && envs=(${c#*:}); envs=(${envs[*]//,/ })
      for gate in "" 3000; do
        f="$W/bench-r$round-${c//[:=,]/_}${gate:+-gate}.txt"
        env "${envs[@]}" timeout 120 "$(bench "$b")" --no-limits ${gate:+--gate $gate} --only vla-chunked "${shapes[@]}" > "$f.md" 2> "$f"
        echo "== round $round $c${gate:+ gated}: $(grep -E ' ms \(' "$f" | awk '{printf "%s %s %s | ", $1, $2, $(NF-3)}')"
      done
    done
  done
} 2>&1 | tee "$OUT/ab.txt"
log "A/B done"
for b in ${S19_PROF:-}; do # 5. per-kernel times and the profiled block's cycles (VLA_CUDA_KERNEL_TIMES=1)
  for s in ${S19_PROF_SHAPES:-1,4,32,2048}; do
    echo "== profile $b $s"
    VLA_CUDA_KERNEL_TIMES=1 timeout 60 "$(bench "$b")" --no-limits --quick --only vla-chunked --shape "$s" 2>&1 |
      grep -E "walk cycles|^chunkpar|ms \(" | tail -n 7
  done
done 2>&1 | tee "$OUT/profile.txt"
for c in ${S19_TESTS:-new}; do
  CK_FORK=no timeout 150 "$ROOT/build-s19-$c/tests/test_cuda" > "$W/test_cuda-$c.log" 2>&1
  log "test_cuda $c exit $?: $(tail -n 1 "$W/test_cuda-$c.log")"
done
log "done"
tar -C "$W" --exclude=tl -czf "$OUT/logs.tar.gz" .
cp "$S" "$OUT/summary.txt" 2>/dev/null
