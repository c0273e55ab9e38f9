#!/usr/bin/env bash
# Session 5 on the H200: A/B of the chunk-parallel form in one device call. Builds (sm_90) the
# working tree ("new") and the tree in .ab/old ("old": `git archive <commit> | tar -x -C .ab/old`,
# an ignored folder, carried), then times bench_cuda_targets --only vla-chunked,delta at
# $AB_SHAPES under each configuration of $AB_CONFIGS ("build" or "build:VAR=value", the variable
# set for that run), twice in turn (drift shows as a difference between the rounds), runs
# test_cuda on "new" and prints per-kernel profiles
# (VLA_CUDA_KERNEL_TIMES=1) at $AB_PROFILE. Every log goes into $OUT/ab.tar.gz (the device tool
# brings back 8 files at most); the medians are printed.
# Usage on the device (carry [".debs", ".ab"]): OUT=... bash benchmarks/h200_ab.sh
# Session 6 added: AB_BUILDS ("name:CUDA flags ...": more builds of the working tree, e.g.
# "newf3:-DVLA_TF32_FAST3"), AB_TESTS (test_cuda configurations, default "new"; it was "new
# new:VLA_CP_VARIANT=0" until session 11 removed that switch), AB_PROFILE_CONFIGS (default "old new"; the profile now includes delta),
# AB_TREES ("name:dir": more source trees, e.g. "mid:.ab/mid").
# Session 9 added: AB_GATE (microseconds; every configuration is timed a second time with
# bench_cuda_targets --gate, which needs that option in the old tree's benchmark too).
# Session 14 added: AB_CHECKS (builds to run `vla-check --backend cuda` with, after the tests).
# Session 15: a configuration may set several variables, and a build take several flags, commas
# between them ("new:A=1,B=0", "name:-DX=1,-DY=2").
# (Runs 2-4 of benchmarks/results/2026-11-30-h200-session5 used earlier states of this script
# with development switches since removed; that folder's README lists them.)
H200_SCRATCH=/tmp/ab
source "$(dirname "${BASH_SOURCE[0]}")/h200_preamble.sh" # ROOT, cd, OUT, W, S, log()
source "$ROOT/benchmarks/h200_env.sh"
build() { # src dir, build dir, extra CUDA flags
  { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF ${3:+"-DCMAKE_CUDA_FLAGS=$3"} &&
    cmake --build "$2" -j"$(nproc)" --target test_cuda bench_cuda_targets ${AB_CHECKS:+vla-check}; } > "$W/build-$(basename "$2").log" 2>&1 ||
    { tail -30 "$W/build-$(basename "$2").log"; exit 1; }
}
build . "$ROOT/build-ab-new" & build .ab/old "$ROOT/build-ab-old" &
for x in ${AB_BUILDS:-}; do f=${x#*:}; build . "$ROOT/build-ab-${x%%:*}" "${f//,/ }" & done # name:flags (commas between them), the working tree
for x in ${AB_TREES:-}; do build "${x#*:}" "$ROOT/build-ab-${x%%:*}" & done # name:dir (an ignored folder, carried)
wait
log "built"
bench() { find "$ROOT/build-ab-$1" -name bench_cuda_targets -type f | head -1; }
shapes=(); for s in ${AB_SHAPES:-1,4,32,2048 1,4,32,8192 8,16,64,2048}; do shapes+=(--shape "$s"); done
"$(bench new)" --only delta --shape 1,4,32,2048 > "$W/limits.md" 2>&1; log "limits: $(grep -h 'copy' "$W/limits.md" | head -1)"
CONFIGS=${AB_CONFIGS:-"old new"}
for round in 1 2; do
  for c in $CONFIGS; do
    b=${c%%:*}; envs=(); [ "$c" != "$b" ] && envs=(${c#*:}); envs=(${envs[*]//,/ })
    for gate in "" ${AB_GATE:+$AB_GATE}; do # AB_GATE=us (session 9): each configuration also gated (GPU time alone)
      f="$W/bench-r$round-${c//[:=]/_}${gate:+-gate}.txt"
      env "${envs[@]}" timeout 120 "$(bench "$b")" --no-limits ${gate:+--gate $gate} --only vla-chunked,delta "${shapes[@]}" > "$f.md" 2> "$f"
      echo "== round $round $c${gate:+ gated}: $(grep -E ' ms \(' "$f" | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-3)}')" | tee -a "$S"
    done
  done
done
for c in ${AB_TESTS:-new}; do
  b=${c%%:*}; envs=(); [ "$c" != "$b" ] && envs=(${c#*:}); envs=(${envs[*]//,/ })
  env "${envs[@]}" CK_FORK=no timeout 150 "$ROOT/build-ab-$b/tests/test_cuda" > "$W/test_cuda-${c//[:=]/_}.log" 2>&1
  log "test_cuda $c exit $?: $(tail -n 1 "$W/test_cuda-${c//[:=]/_}.log")"
done
for b in ${AB_CHECKS:-}; do
  timeout 120 "$ROOT/build-ab-$b/tools/vla-check" --backend cuda > "$W/vla-check-$b.txt" 2>&1
  log "vla-check $b exit $?: $(grep -E "passed" "$W/vla-check-$b.txt" | tail -n 1)"
done
for c in ${AB_PROFILE_CONFIGS:-old new}; do
  b=${c%%:*}; envs=(); [ "$c" != "$b" ] && envs=(${c#*:}); envs=(${envs[*]//,/ })
  for s in ${AB_PROFILE:-1,4,32,2048 8,16,64,2048}; do
    echo "== $c shape $s" >> "$W/profile.txt"
    env "${envs[@]}" VLA_CUDA_KERNEL_TIMES=1 timeout 60 "$(bench $b)" --no-limits --quick ${AB_GATE:+--gate $AB_GATE} --only vla-chunked,delta --shape "$s" 2>&1 |
      grep -E "chunkpar|cycles|ms \(" >> "$W/profile.txt"
  done
done
log "done"
tar -C "$W" -czf "$OUT/ab.tar.gz" .
cat "$W/profile.txt"
