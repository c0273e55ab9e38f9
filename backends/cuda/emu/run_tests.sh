#!/usr/bin/env bash
# Builds libvla with the CUDA backend against the CPU emulator (this folder), with test_cuda, vla-check and
# test_nn_backends, and runs tests/test_nn_backends.c (the nn ops against the CPU backend; VLA_EMU_NN=0 skips it)
# and tests/test_cuda.c on it: the kernels' index maths, barriers and shuffles run for real, on host
# threads, under AddressSanitizer + UBSan (out-of-bounds shared/global accesses, unwritten
# memory shows as NaN) or ThreadSanitizer (a missing __syncthreads is a data race between
# threads). For development on a machine without a GPU; CI does not run it.
#   backends/cuda/emu/run_tests.sh [address|thread|none] [build dir] [test_cuda args...]
# Environment for the emulator: VLA_EMU_SMEM (bytes of shared memory a block may use: small
# values force the global-memory placement of working arrays), VLA_EMU_SMS, VLA_EMU_NODEV.
# VLA_EMU_TC=0 builds the chunk-parallel products for FMA units (the sm_75 form); the default, 1,
# the tensor-core form (sm_80+: emulated mma.sync tiles). VLA_EMU_CFLAGS: more compiler flags for
# every file (development switches, e.g. -DVLA_CP_PQ_APART=0); use a fresh build dir when they change.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SAN=${1:-address}
B=${2:-$ROOT/build-emu-$SAN}
shift $(( $# > 2 ? 2 : $# )) || true
case "$SAN" in
  address) F="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" ;;
  thread) F="-fsanitize=thread" ;;
  none) F="" ;;
  *) echo "sanitizer: address, thread or none" >&2; exit 2 ;;
esac
mkdir -p "$B/lib" "$B/test" "$B/check" "$B/nn"
rm -f "$B"/lib/*.o "$B"/test/*.o "$B"/check/*.o "$B"/nn/*.o # (everything is rebuilt; a stale object of a removed file would link twice)
CF="-O1 -g $F ${VLA_EMU_CFLAGS:-}"
INC="-I$ROOT/backends/cuda/emu -I$ROOT/kernels/cuda -I$ROOT/core/include -I$ROOT/core -I$ROOT/backends/cpu -I$ROOT/tests -I$ROOT/tools"
jobs=()
for f in "$ROOT"/kernels/cuda/*.cu; do
  jobs+=("g++ -std=c++17 $CF -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -DVLA_CUDA_EMU -DVLA_EMU_TC=${VLA_EMU_TC:-1} -DVLACU_NT=${VLA_EMU_NT:-64} $INC -x c++ -c $f -o $B/lib/$(basename "$f" .cu).o")
done
jobs+=("g++ -std=c++17 $CF -Wall -Wextra $INC -c $ROOT/backends/cuda/emu/emu.cpp -o $B/lib/emu.o")
# the library's C sources: core/ and backends/cpu/ (as `vla` in the top CMakeLists), and the CUDA backend
for f in "$ROOT"/core/*.c "$ROOT"/backends/cpu/*.c "$ROOT"/backends/cuda/cuda_backend.c "$ROOT"/backends/cuda/cuda_nn.c \
         "$ROOT"/backends/cuda/cuda_grad.c; do
  jobs+=("gcc -std=c11 $CF -Wall -Wextra -fopenmp -DVLA_HAVE_CUDA $INC -c $f -o $B/lib/$(basename "$f" .c).o")
done
for f in tests/test_cuda.c tests/test_util.c tests/ref64.c; do
  jobs+=("gcc -std=c11 $CF -Wall -Wextra $INC $(pkg-config --cflags check) -c $ROOT/$f -o $B/test/$(basename "$f" .c).o")
done
# vla-check's sources (tools/CMakeLists.txt); check_grad.c where the tree has it
for f in tools/vla-check.c tools/check_grad.c tools/npy.c tests/ref64.c; do
  [ -f "$ROOT/$f" ] || continue
  jobs+=("gcc -std=c11 $CF -Wall -Wextra $INC -c $ROOT/$f -o $B/check/$(basename "$f" .c).o")
done
jobs+=("gcc -std=c11 $CF -Wall -Wextra $INC $(pkg-config --cflags check) -c $ROOT/tests/test_nn_backends.c -o $B/nn/test_nn_backends.o")
printf '%s\n' "${jobs[@]}" | xargs -P "$(nproc)" -I{} sh -c '{}'
g++ $F -fopenmp "$B"/lib/*.o "$B"/test/*.o $(pkg-config --libs check) -lm -lpthread -o "$B/test_cuda"
g++ $F -fopenmp "$B"/lib/*.o "$B"/check/*.o -lm -lpthread -o "$B/vla-check"
g++ $F -fopenmp "$B"/lib/*.o "$B"/nn/*.o "$B"/test/test_util.o "$B"/test/ref64.o $(pkg-config --libs check) -lm -lpthread \
  -o "$B/test_nn_backends"
echo "built $B/test_cuda, $B/vla-check and $B/test_nn_backends"
if [ "$SAN" = thread ]; then export OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}"; fi
if [ "${VLA_EMU_NN:-1}" != 0 ]; then "$B/test_nn_backends"; fi
exec "$B/test_cuda" "$@"
