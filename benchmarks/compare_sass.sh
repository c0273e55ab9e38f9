#!/usr/bin/env bash
# Compares the machine code of two builds of libvla's CUDA kernels, function by function: for each
# architecture in the fat binaries and each function (kernel, or a device function with its own
# listing), the SASS that `cuobjdump -sass` prints and the resources of `cuobjdump -res-usage`
# (registers, stack, shared memory, constant bank 0). File-level headers and the order of functions
# and files are ignored; instruction offsets are relative to each function, so a function's listing
# does not depend on what else its file holds. For a source change that should change no code (a
# file split, comments, names): prints identical / DIFFERENT / only-in-A / only-in-B for each
# function and exits 1 on any difference.
#
#   benchmarks/compare_sass.sh A B
# A and B: build folders (every *.cu.o under them is read; e.g. two CMake build trees with
# VLA_CUDA=ON), object files or libraries, or source trees (a folder with CMakeLists.txt and
# kernels/cuda/): a source tree is built first, into $SASS_WORK/build-{a,b}, with
#   -DVLA_OPENCL=OFF -DVLA_BUILD_TESTS=OFF -DVLA_BUILD_TOOLS=OFF
#   -DCMAKE_CUDA_ARCHITECTURES=$SASS_ARCHS (default "75;90") $SASS_CMAKE_ARGS
# and only the `vla` target. Development switches go through SASS_CMAKE_ARGS, e.g.
#   SASS_CMAKE_ARGS='-DCMAKE_CUDA_FLAGS=-DVLA_CP_A3=0' benchmarks/compare_sass.sh /tmp/base .
# Environment: SASS_WORK (default a fresh temporary folder, removed at the end unless set),
# SASS_JOBS (build jobs, default nproc), SASS_KEEP=1 (keep the work folder), CUOBJDUMP (the tool;
# else cuobjdump on PATH or in /usr/local/cuda/bin). cuobjdump needs nvdisasm beside it or on PATH;
# where the toolkit came without them, `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm` (in a
# virtual environment) brings both (a newer cuobjdump reads older cubins).
set -euo pipefail

if [ $# -ne 2 ]; then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi

find_cuobjdump() {
  if [ -n "${CUOBJDUMP:-}" ]; then echo "$CUOBJDUMP"; return; fi
  if command -v cuobjdump > /dev/null 2>&1; then command -v cuobjdump; return; fi
  if [ -x /usr/local/cuda/bin/cuobjdump ]; then echo /usr/local/cuda/bin/cuobjdump; return; fi
  echo "compare_sass: no cuobjdump (set CUOBJDUMP, or see the top of this script)" >&2
  exit 2
}
CUOBJ=$(find_cuobjdump)
# nvdisasm: beside cuobjdump first (a pip install puts both in one folder)
export PATH="$(dirname "$CUOBJ"):$PATH"

KEEP=${SASS_KEEP:-0}
if [ -n "${SASS_WORK:-}" ]; then
  WORK=$SASS_WORK
  mkdir -p "$WORK"
else
  WORK=$(mktemp -d /tmp/compare_sass.XXXXXX)
  trap '[ "$KEEP" = 1 ] || rm -rf "$WORK"' EXIT
fi

# The files to read for argument $1 (side a or b, $2): a build folder's CUDA objects, the file
# itself, or a source tree built first.
inputs() {
  local x=$1 side=$2
  if [ -f "$x" ]; then
    echo "$x"
  elif [ -f "$x/CMakeLists.txt" ] && [ -d "$x/kernels/cuda" ]; then
    local b="$WORK/build-$side"
    # shellcheck disable=SC2086 # SASS_CMAKE_ARGS: several words
    cmake -S "$x" -B "$b" -DVLA_OPENCL=OFF -DVLA_BUILD_TESTS=OFF -DVLA_BUILD_TOOLS=OFF \
      "-DCMAKE_CUDA_ARCHITECTURES=${SASS_ARCHS:-75;90}" ${SASS_CMAKE_ARGS:-} > "$WORK/cmake-$side.log" 2>&1 ||
      { echo "compare_sass: configuring $x failed, see $WORK/cmake-$side.log" >&2; KEEP=1; exit 2; }
    cmake --build "$b" -j"${SASS_JOBS:-$(nproc)}" --target vla > "$WORK/build-$side.log" 2>&1 ||
      { echo "compare_sass: building $x failed, see $WORK/build-$side.log" >&2; KEEP=1; exit 2; }
    find "$b" -name '*.cu.o' | sort
  elif [ -d "$x" ]; then
    find "$x" -name '*.cu.o' | sort
  else
    echo "compare_sass: $x: not a file, build folder or source tree" >&2
    exit 2
  fi
}

# Splits cuobjdump's listings of the files on stdin's list into $2/<arch>/<function>.sass and
# .res (a function listed twice for one architecture, as when two files instantiate the same
# template, gets .sass.2 and so on: compared as listed).
split_listing() {
  local side=$1 dir=$2 files
  inputs "$1" "$3" > "$WORK/files-$3"
  mapfile -t files < "$WORK/files-$3"
  if [ "${#files[@]}" -eq 0 ]; then
    echo "compare_sass: no CUDA objects under $side" >&2
    exit 2
  fi
  mkdir -p "$dir"
  # (one file a call: given several, cuobjdump lists none of them)
  for f in "${files[@]}"; do "$CUOBJ" -sass "$f"; done | awk -v d="$dir" '
    function out(f) { n = 1; while ((f (n > 1 ? "." n : "")) in seen) n++; f = f (n > 1 ? "." n : ""); seen[f] = 1; return f }
    /^arch = / { arch = $3; fn = ""; next }
    /^[^ \t]/ { fn = ""; next } # a file-level header line ("Fatbin elf code:", "host = linux", ..)
    /^[ \t]*Function : / { name = $3; system("mkdir -p " d "/" arch); fn = out(d "/" arch "/" name ".sass"); next }
    /^[ \t]*\.section|^[ \t]*code for |^[ \t]*\.target/ { next }
    # (the listing pads its columns to a width that depends on the whole file: blanks collapsed)
    fn != "" && NF > 0 { gsub(/[ \t]+/, " "); sub(/^ /, ""); sub(/ $/, ""); print > fn }'
  for f in "${files[@]}"; do "$CUOBJ" -res-usage "$f"; done | awk -v d="$dir" '
    function out(f) { n = 1; while ((f (n > 1 ? "." n : "")) in seen) n++; f = f (n > 1 ? "." n : ""); seen[f] = 1; return f }
    /^arch = / { arch = $3; next }
    /^[ \t]*Function / { name = $2; sub(/:$/, "", name); system("mkdir -p " d "/" arch); fn = out(d "/" arch "/" name ".res"); next }
    fn != "" && /REG:/ { sub(/^[ \t]+/, ""); print > fn; fn = "" }'
}

split_listing "$1" "$WORK/a" a
split_listing "$2" "$WORK/b" b

demangle() { if command -v c++filt > /dev/null 2>&1; then c++filt; else cat; fi; }

same=0 diff=0 only=0
while read -r rel; do
  arch=${rel%%/*} f=${rel#*/}
  name=${f%.*} kind=${f##*.}
  case "$name" in *.sass|*.res) kind="${name##*.}.$kind" name=${name%.*} ;; esac
  pretty=$(echo "$name" | demangle)
  if [ ! -f "$WORK/a/$rel" ]; then
    echo "only-in-B  $arch $kind $pretty"; only=$((only + 1))
  elif [ ! -f "$WORK/b/$rel" ]; then
    echo "only-in-A  $arch $kind $pretty"; only=$((only + 1))
  elif cmp -s "$WORK/a/$rel" "$WORK/b/$rel"; then
    echo "identical  $arch $kind $pretty"; same=$((same + 1))
  else
    echo "DIFFERENT  $arch $kind $pretty ($(diff "$WORK/a/$rel" "$WORK/b/$rel" | grep -c '^[<>]') lines)"; diff=$((diff + 1))
  fi
done < <( (cd "$WORK/a" && find . -type f; cd "$WORK/b" && find . -type f) | sed 's|^\./||' | sort -u)

nf=$(cd "$WORK/a" && find . -name '*.sass*' | wc -l)
echo "compare_sass: $same identical, $diff different, $only in one build only ($nf function listings in A)"
[ "$KEEP" = 1 ] && echo "compare_sass: listings kept in $WORK/a and $WORK/b"
[ "$diff" -eq 0 ] && [ "$only" -eq 0 ]
