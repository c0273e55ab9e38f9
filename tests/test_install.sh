#!/usr/bin/env bash
# Installs a build into a scratch prefix and uses it as a consumer would:
#   1. cmake --install BUILD_DIR --prefix <tmp>
#   2. tests/install (find_package(vla REQUIRED), vla::vla) configured, built and run against it
#   3. tests/install/main.c built with `pkg-config --cflags --libs vla` and run
#   4. the installed vla-run runs (--version)
#
#   test_install.sh SOURCE_DIR BUILD_DIR
#
# Prints one line per check; exits 0 only if all pass.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 SOURCE_DIR BUILD_DIR" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd) || exit 2
BLD=$(cd "$2" && pwd) || exit 2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/test_install.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
CC=${CC:-cc}
# A sanitized libvla needs sanitized consumers (the ASan runtime must come first).
SANFLAGS=
grep -q '^VLA_SANITIZE:BOOL=ON' "$BLD/CMakeCache.txt" 2>/dev/null && SANFLAGS="-fsanitize=address,undefined"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

NFAIL=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
# Shows the tail of a log after a failure.
show() { sed 's/^/    /' "$1" | tail -n 20; }

# 1. install
if cmake --install "$BLD" --prefix "$PREFIX" >"$WORK/install.log" 2>&1; then
    pass "cmake --install into $PREFIX"
else
    fail "cmake --install failed"
    show "$WORK/install.log"
    exit 1
fi
LIB=$(find "$PREFIX" \( -name 'libvla.so*' -o -name 'libvla.a' \) | sort | head -n 1)
PC=$(find "$PREFIX" -name vla.pc | head -n 1)
if [ -z "$LIB" ] || [ -z "$PC" ] || [ ! -f "$PREFIX/include/vla/vla.h" ]; then
    fail "install is incomplete: library '${LIB}', vla.pc '${PC}', header $PREFIX/include/vla/vla.h"
    find "$PREFIX" | sed 's/^/    /'
    exit 1
fi
LIBDIR=$(dirname "$LIB")
pass "installed: ${LIB#"$PREFIX"/}, ${PC#"$PREFIX"/}, include/vla/vla.h"

# Runs a consumer binary against the installed library; it must print OK.
run_consumer() { # what binary
    local out
    if out=$(LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$2" 2>&1) && echo "$out" | grep -q '^OK'; then
        pass "$1: $out"
    else
        fail "$1: did not print OK: $out"
    fi
}

# 2. the CMake package
if cmake -S "$SRC/tests/install" -B "$WORK/cmake-build" -DCMAKE_PREFIX_PATH="$PREFIX" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$SANFLAGS" >"$WORK/cmake.log" 2>&1 &&
    cmake --build "$WORK/cmake-build" >>"$WORK/cmake.log" 2>&1; then
    # It must have found this install, not another libvla on the machine.
    found=$(sed -n 's/^vla_DIR:PATH=//p' "$WORK/cmake-build/CMakeCache.txt")
    case $found in
    "$PREFIX"/*) pass "find_package(vla) found $found; vla::vla links" ;;
    *) fail "find_package(vla) found '$found', not the scratch install" ;;
    esac
    run_consumer "find_package consumer" "$WORK/cmake-build/vla_install_consumer"
else
    fail "find_package(vla REQUIRED) consumer did not configure or build"
    show "$WORK/cmake.log"
fi

# 3. pkg-config
STATIC=
[ "${LIB##*/}" = libvla.a ] && STATIC=--static # a static libvla needs its Libs.private
if FLAGS=$(PKG_CONFIG_PATH="$(dirname "$PC")" pkg-config $STATIC --cflags --libs vla 2>"$WORK/pc.log"); then
    # The flags must point into the install: a .pc holding the configure-time prefix sends a
    # consumer to another (or no) libvla.
    if ! echo "$FLAGS" | grep -q -- "-I$PREFIX/"; then
        fail "pkg-config --cflags --libs vla gives '$FLAGS': not the install prefix $PREFIX (vla.pc: $(grep '^prefix=' "$PC"); a relocatable .pc sets prefix=\${pcfiledir}/<path from the .pc's folder to the prefix>)"
        # Say whether that is the only problem: pkgconf can override the prefix from the .pc's place.
        if DFLAGS=$(PKG_CONFIG_PATH="$(dirname "$PC")" pkg-config --define-prefix $STATIC --cflags --libs vla 2>/dev/null) &&
            $CC -std=c11 $SANFLAGS -o "$WORK/pc-consumer-dp" "$SRC/tests/install/main.c" $DFLAGS -lm >/dev/null 2>&1 &&
            LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$WORK/pc-consumer-dp" >/dev/null 2>&1; then
            echo "NOTE: with pkg-config --define-prefix ('$DFLAGS') the consumer builds and runs: only the .pc's prefix is wrong"
        fi
    fi
    # shellcheck disable=SC2086  # FLAGS is a list of words
    if $CC -std=c11 $SANFLAGS -o "$WORK/pc-consumer" "$SRC/tests/install/main.c" $FLAGS -lm >"$WORK/pc-build.log" 2>&1; then
        run_consumer "pkg-config consumer ($FLAGS)" "$WORK/pc-consumer"
    else
        fail "pkg-config consumer did not build with '$FLAGS'"
        show "$WORK/pc-build.log"
    fi
else
    fail "pkg-config --cflags --libs vla failed"
    show "$WORK/pc.log"
fi

# 4. the installed tool
if [ -x "$PREFIX/bin/vla-run" ]; then
    if out=$(LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PREFIX/bin/vla-run" --version 2>&1); then
        pass "installed vla-run: $out"
    else
        fail "installed vla-run --version failed: $out"
    fi
else
    echo "SKIP: no bin/vla-run installed (built without the tools?)"
fi

[ $NFAIL -eq 0 ] && echo "test_install: all passed" || echo "test_install: $NFAIL failed"
[ $NFAIL -eq 0 ]
