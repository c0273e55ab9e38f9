#!/usr/bin/env bash
# Session 10: the T4's code on the H200. Builds with CMAKE_CUDA_ARCHITECTURES=75-virtual (compute_75
# PTX only, so the driver JIT-compiles the sm_75 forms: FMA products, no griddepcontrol), for the
# working tree and for each "name:dir" of $PTX_TREES (ignored folders, carried), then runs test_cuda
# and vla-check --backend cuda on each. This runs the sm_75 device code on real hardware (not its
# speed: a T4 is not an H200), with the host's sm_90 launch choices: programmatic dependent launch
# there is plain stream order, since a kernel that never executes griddepcontrol.launch_dependents
# lets its successor start only when it completes.
# Usage on the device (carry [".debs", ".ab"]): OUT=... bash benchmarks/h200_ptx75.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
W=/tmp/ptx75 && rm -rf "$W" && mkdir -p "$W" "$OUT"
source "$ROOT/benchmarks/h200_env.sh"
build() { # name, source dir
  { cmake -S "$2" -B "$ROOT/build-ptx75-$1" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=75-virtual -DVLA_OPENCL=OFF &&
    cmake --build "$ROOT/build-ptx75-$1" -j"$(nproc)" --target test_cuda vla-check; } > "$W/build-$1.log" 2>&1 ||
    { echo "$1: build failed"; tail -20 "$W/build-$1.log"; }
}
trees="new:."
for x in ${PTX_TREES:-}; do trees="$trees $x"; done
for x in $trees; do build "${x%%:*}" "${x#*:}" & done
wait
for x in $trees; do
  n=${x%%:*} B=$ROOT/build-ptx75-$n
  CK_FORK=no timeout 300 "$B/tests/test_cuda" > "$W/test_cuda-$n.log" 2>&1
  echo "$n: test_cuda (compute_75 JIT) exit $?: $(tail -n 1 "$W/test_cuda-$n.log")" | tee -a "$W/summary.txt"
  grep -E "FAIL|Failure|fail" "$W/test_cuda-$n.log" | head -5 | tee -a "$W/summary.txt"
  timeout 120 "$B/tools/vla-check" --backend cuda > "$W/vla-check-$n.txt" 2>&1
  echo "$n: vla-check --backend cuda (compute_75 JIT) exit $?: $(tail -n 1 "$W/vla-check-$n.txt")" | tee -a "$W/summary.txt"
done
tar -C "$W" -czf "$OUT/ptx75.tar.gz" .
