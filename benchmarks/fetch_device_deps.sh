#!/usr/bin/env bash
# Fetches, on this machine (Debian, with a package registry), what the GPU machine lacks and
# cannot download itself, into ignored folders of the repository that a device call carries:
#
#   .debs/   Debian packages for benchmarks/device_env.sh to unpack into a prefix there: Check and
#            subunit (the test suites), pkgconf (pkg-config), OpenBLAS (the CPU backend's BLAS,
#            with libgfortran5 and libquadmath0), CLBlast, the OpenCL ICD loader and headers;
#   .whl/    wheels for the peers (python 3.12, manylinux, --no-deps): fla-core (the `fla` module
#            of flash-linear-attention) and its one pure-Python requirement, einops;
#   .peers/  the peers' scripts (public_fwd.py, public_fwdbwd.py, paper_train_speed.py), copied
#            from shared/peers beside the repository (shared/ does not travel to the device);
#   .baseline/  (only with --baseline COMMIT) `git archive COMMIT` without benchmarks/results,
#            for `gpu_report.sh --baseline .baseline`.
#
# Idempotent: what is there already is kept; a second run downloads nothing new.
#
# Usage (from anywhere; the folders go into the repository root):
#   bash benchmarks/fetch_device_deps.sh [options]
#     --debs-only           only .debs/
#     --wheels-only         only .whl/ (and .peers/)
#     --fla-version V       the fla-core version to fetch (default 0.6.0); other versions in .whl/
#                           are removed (two versions of one package stop the install there)
#     --peers DIR           where the peers' scripts are (default: ../shared/peers, then shared/peers)
#     --baseline COMMIT     also write .baseline/ from that commit (replaced when COMMIT differs)
#     --update              run `apt-get update` first (done anyway when apt knows no `check`)
#     -h, --help            this text
#
# Then carry them in the device call: carry [".debs", ".whl", ".peers"] (and ".baseline").
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEBS=1 WHEELS=1 UPDATE=0 FLA_VERSION=0.6.0 PEERS="" BASELINE=""
while [ $# -gt 0 ]; do
  case $1 in
    --debs-only) WHEELS=0 ;;
    --wheels-only) DEBS=0 ;;
    --fla-version) FLA_VERSION=${2:?--fla-version needs a version}; shift ;;
    --peers) PEERS=${2:?--peers needs a folder}; shift ;;
    --baseline) BASELINE=${2:?--baseline needs a commit}; shift ;;
    --update) UPDATE=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "fetch_device_deps.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
cd "$ROOT"

# The Debian packages (bookworm's run on the GPU machine's newer glibc) and what they need that
# the GPU machine may lack. The metapackages (libopenblas-dev, libopenblas0, opencl-headers'
# parts) are tiny and keep apt's names for what the prefix holds.
DEB_PACKAGES=(
  check libsubunit-dev libsubunit0
  pkgconf pkgconf-bin libpkgconf3
  libopenblas-dev libopenblas0 libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
  libclblast-dev libclblast1
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
)
# The wheels: fla-core and its requirements that are not extras (einops; torch and triton are on
# the GPU machine).
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

fetch_debs() {
  command -v apt-get > /dev/null || { echo "fetch_device_deps.sh: apt-get not found (a Debian machine is needed)" >&2; return 1; }
  local apt=(apt-get -o APT::Sandbox::User=root) arch
  arch=$(dpkg --print-architecture)
  if [ "$arch" != amd64 ]; then # the GPU machine is x86-64
    mkdir -p /tmp/vla-apt-amd64/partial
    apt+=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/vla-apt-amd64)
    UPDATE=1
  fi
  if [ "$UPDATE" = 1 ] || ! apt-cache policy check 2> /dev/null | grep -Eq '^ *Candidate: [0-9]'; then
    "${apt[@]}" update -qq
  fi
  mkdir -p .debs
  local missing=() p
  for p in "${DEB_PACKAGES[@]}"; do
    compgen -G ".debs/${p}_*.deb" > /dev/null || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    (cd .debs && "${apt[@]}" download "${missing[@]}")
  fi
  echo "fetch_device_deps.sh: .debs/ holds $(compgen -G '.debs/*.deb' | wc -l) packages ($(du -sh .debs | cut -f1)); fetched now: ${#missing[@]}"
}

# pip_fetch NAME [VERSION]: the wheel, unless .whl/ holds it (that VERSION, or any without one);
# with VERSION, other versions of NAME are removed.
pip_fetch() {
  local name=$1 version=${2:-} stem f plat=()
  stem=$(echo "$name" | tr '-' '_')
  if [ -n "$version" ]; then
    for f in .whl/"$stem"-*.whl; do
      [ -e "$f" ] || continue
      case $f in .whl/"$stem-$version"-*) ;; *) echo "removing $f (not $version)"; rm -f "$f" ;; esac
    done
  fi
  compgen -G ".whl/$stem-${version:-*}-*.whl" > /dev/null && return 0
  for f in "${PLATFORMS[@]}"; do plat+=(--platform "$f"); done
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${plat[@]}" -d .whl "$name${version:+==$version}"
}

fetch_wheels() {
  mkdir -p .whl
  pip_fetch fla-core "$FLA_VERSION"
  # fla-core's requirements that are not extras, except torch and triton (on the GPU machine).
  local req name
  while read -r req; do
    name=$(echo "$req" | sed -E 's/[ ;<>=!~(\[].*//')
    case $name in torch | triton | "") continue ;; esac
    pip_fetch "$name"
  done < <(unzip -p .whl/fla_core-"$FLA_VERSION"-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==')
  echo "fetch_device_deps.sh: .whl/ holds $(cd .whl && echo *.whl)"
}

fetch_peers() {
  local src=$PEERS f n=0
  if [ -z "$src" ]; then
    for src in "$ROOT/../shared/peers" "$ROOT/shared/peers" ""; do [ -d "$src" ] && break; done
  fi
  [ -d "${src:-/nonexistent}" ] || { echo "fetch_device_deps.sh: no peers folder (../shared/peers); give --peers DIR" >&2; return 1; }
  mkdir -p .peers
  for f in "$src"/*.py "$src"/README.md; do
    [ -e "$f" ] || continue
    cmp -s "$f" ".peers/$(basename "$f")" || { cp "$f" .peers/; n=$((n + 1)); }
  done
  echo "fetch_device_deps.sh: .peers/ holds $(cd .peers && echo *) (copied now: $n, from $src)"
}

fetch_baseline() {
  local commit
  commit=$(git -C "$ROOT" rev-parse --verify "$BASELINE^{commit}")
  if [ "$(cat .baseline/.commit 2> /dev/null)" != "$commit" ]; then
    rm -rf .baseline && mkdir -p .baseline
    git -C "$ROOT" archive "$commit" -- . ':(exclude)benchmarks/results' | tar -x -C .baseline
    echo "$commit" > .baseline/.commit
  fi
  echo "fetch_device_deps.sh: .baseline/ is commit $commit ($(du -sh .baseline | cut -f1))"
}

if [ "$DEBS" = 1 ]; then fetch_debs; fi
if [ "$WHEELS" = 1 ]; then fetch_wheels; fetch_peers; fi
if [ -n "$BASELINE" ]; then fetch_baseline; fi
echo "fetch_device_deps.sh: carry $(for d in .debs .whl .peers .baseline; do [ -d "$d" ] && printf '"%s" ' "$d"; done)($(du -shc .debs .whl .peers .baseline 2> /dev/null | tail -n 1 | cut -f1) in all; 64 MiB at most a call)"
