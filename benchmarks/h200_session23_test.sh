#!/usr/bin/env bash
# Session 23 run 5: test_cuda (sm_90 build) on the final tree, after the "s_u 3" case was limited to chunked.
# Usage on the device (carry [".debs"]): OUT=... bash benchmarks/h200_session23_test.sh
set -uo pipefail
source benchmarks/h200_env.sh
cmake -S . -B build-t5 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DVLA_OPENCL=OFF > $OUT/build.log 2>&1 && cmake --build build-t5 -j16 --target test_cuda >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
CK_FORK=no timeout 200 build-t5/tests/test_cuda > $OUT/test_cuda.log 2>&1; echo "test_cuda exit $?: $(tail -n 1 $OUT/test_cuda.log)"
grep -E 'FAIL|s_u|lambda0 3e4' $OUT/test_cuda.log | head -30
