#!/usr/bin/env bash
# Session 20 on the H200: benchmarks/h200_session19.sh with its S19_* variables (builds, timelines,
# A/B rounds, test_cuda, profiles), then, with S20_BITWISE=1, benchmarks/h200_bitwise.sh on the "new"
# build against itself with the chunk flags off on one side (BITWISE_ENV_A="VLA_CP_FLAGS=0"):
# bitwise.txt. (VLA_CP_FLAGS existed in session 20's runs 4-8 only: the chunk flags were reverted.)
# Usage on the device (carry [".debs"]): OUT=... S19_...=... S20_BITWISE=1 bash benchmarks/h200_session20.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
OUT=$OUT bash "$ROOT/benchmarks/h200_session19.sh"
if [ "${S20_BITWISE:-0}" = 1 ]; then
  ln -sfn build-s19-new "$ROOT/build-ab-new"
  BITWISE_ENV_A="VLA_CP_FLAGS=0" bash "$ROOT/benchmarks/h200_bitwise.sh" new new > "$OUT/bitwise.txt" 2>&1
  tail -n 3 "$OUT/bitwise.txt"
fi
