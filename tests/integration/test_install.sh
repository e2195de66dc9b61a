#!/bin/bash
# `cmake --install` gives a tree others can build against: muster, muster-preflight (when
# built), libmuster static and shared, include/muster.h (and nothing private), muster.pc,
# MusterConfig.cmake and muster.1. examples/c/kv_example.c is then compiled against the
# installed tree three ways: `pkg-config --cflags --libs muster` (shared), `pkg-config --static`
# (static archive) and a find_package(Muster) CMake project (muster::muster and
# muster::muster_static); each binary runs as the 2 workers of an installed
# `muster run --standalone --no-python` and must agree on the exchanged id.
#
# Environment: MUSTER_BUILD (the build folder; ctest sets it), else MUSTER_BIN's folder.
. "$(dirname "$0")/lib.sh"

B=${MUSTER_BUILD:-$(dirname "$MUSTER_BIN")}
[ -f "$B/cmake_install.cmake" ] || skip "no build folder with cmake_install.cmake at $B"
command -v pkg-config >/dev/null || skip "pkg-config is not installed"
CC=${CC:-cc}
command -v "$CC" >/dev/null || skip "no C compiler ($CC)"
CMAKE=$(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' "$B/CMakeCache.txt")
[ -x "$CMAKE" ] || CMAKE=cmake
EXAMPLE="$MUSTER_SRC/examples/c/kv_example.c"
# A -DMUSTER_SANITIZE=ON build installs an instrumented libmuster: its consumers need the same
# runtime (CI runs this test in such a build too).
SAN_FLAGS=""
grep -q '^MUSTER_SANITIZE:BOOL=ON$' "$B/CMakeCache.txt" && SAN_FLAGS="-fsanitize=address,undefined"

P="$T/prefix"
"$CMAKE" --install "$B" --prefix "$P" > "$T/install.log" 2>&1 ||
    fail "cmake --install failed: $(tail -20 "$T/install.log")"

# --- the installed files --------------------------------------------------------------------
pc=$(find "$P" -name muster.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || fail "no pkgconfig/muster.pc under $P"
LIBDIR=$(dirname "$(dirname "$pc")")
for f in bin/muster include/muster.h include/muster_version.h share/man/man1/muster.1.gz; do
    [ -e "$P/$f" ] || fail "cmake --install did not install $f"
done
for f in libmuster.a libmuster.so libmuster.so.0 cmake/Muster/MusterConfig.cmake \
    cmake/Muster/MusterConfigVersion.cmake cmake/Muster/MusterTargets.cmake; do
    [ -e "$LIBDIR/$f" ] || fail "cmake --install did not install ${LIBDIR#"$P"/}/$f"
done
if [ -x "$B/muster-preflight" ]; then
    [ -x "$P/bin/muster-preflight" ] || fail "muster-preflight is built but not installed"
fi
# only the public headers: the codec's and the library's internals stay in the source tree
extra=$(find "$P/include" -type f ! -name muster.h ! -name muster_version.h)
[ -z "$extra" ] || fail "private headers installed: $extra"
# the shared library exports only the muster_* API
leaked=$(nm -D --defined-only "$LIBDIR/libmuster.so" | awk '$2 ~ /^[TDBR]$/ && $3 !~ /^muster_/')
[ -z "$leaked" ] || fail "libmuster.so exports non-muster_ symbols: $leaked"
gzip -dc "$P/share/man/man1/muster.1.gz" | grep -q '^\.TH MUSTER 1 ' ||
    fail "muster.1.gz is not a man page"
gzip -dc "$P/share/man/man1/muster.1.gz" | grep -q 'muster server' ||
    fail "muster.1 lacks the server command's help"

# --- the installed muster: --version, -V, version ---------------------------------------------
MUSTER_BIN="$P/bin/muster"
want=$(sed -n 's/^#define MUSTER_VERSION "\(.*\)"$/\1/p' "$P/include/muster_version.h")
[ -n "$want" ] || fail "include/muster_version.h defines no MUSTER_VERSION"
for v in --version -V version; do
    IT_TIMEOUT=20 mrun -- "$v"
    expect_rc "muster $v" 0
    [ "$(head -1 "$T/out")" = "muster $want" ] ||
        fail "muster $v: first line '$(head -1 "$T/out")', expected 'muster $want'"
    grep -qE '^protocol [0-9]+; built with libuv [0-9.]+, mbedTLS [0-9.]+, jansson [0-9.]+' "$T/out" ||
        fail "muster $v: no protocol/library line: $(cat "$T/out")"
done
grep -q -- '--version' <("$MUSTER_BIN" --help) || fail "muster --help does not mention --version"

# run_example WHAT BINARY [VAR=VALUE...]: 2 workers under the installed muster, same id for both
run_example() {
    local what=$1 bin=$2
    shift 2
    IT_TIMEOUT=60 mrun "$@" -- run --standalone --nproc-per-node 2 --no-python "$bin"
    expect_rc "$what" 0
    local ids
    ids=$(sed -n 's/^\[rank[01]\]: \[rank [01]\] got id \([0-9a-f]*\)$/\1/p' "$T/out" | sort -u)
    if [ "$(grep -c 'got id' "$T/out")" != 2 ] || [ "$(wc -l <<<"$ids")" != 1 ]; then
        show_output
        fail "$what: expected both ranks to print the same id"
    fi
}

# needed LIB BINARY: whether BINARY has LIB among its DT_NEEDED entries
needed() {
    readelf -d "$2" | grep -q "(NEEDED).*\[$1"
}

# --- pkg-config: shared, then static ----------------------------------------------------------
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
pkg-config --exists muster || fail "pkg-config does not find muster.pc: $(pkg-config --print-errors muster 2>&1)"
[ "$(pkg-config --modversion muster)" = "$want" ] || fail "muster.pc's version is not $want"
pkg-config --static --libs muster | grep -q -- '-lmbedtls' ||
    fail "pkg-config --static --libs muster lacks mbedTLS: $(pkg-config --static --libs muster)"

# shellcheck disable=SC2046
"$CC" $SAN_FLAGS -o "$T/kv_shared" "$EXAMPLE" $(pkg-config --cflags --libs muster) 2> "$T/cc.err" ||
    fail "cc \$(pkg-config --cflags --libs muster) failed: $(cat "$T/cc.err")"
needed libmuster.so.0 "$T/kv_shared" || fail "kv_shared does not link libmuster.so.0"
run_example "pkg-config shared build" "$T/kv_shared" LD_LIBRARY_PATH="$LIBDIR"

# A static link takes the archive although libmuster.so sits next to it: -Bstatic around
# pkg-config --static's libraries (mbedTLS's archives come from libmbedtls-dev).
# shellcheck disable=SC2046
"$CC" $SAN_FLAGS -o "$T/kv_static" "$EXAMPLE" $(pkg-config --cflags muster) \
    -Wl,-Bstatic $(pkg-config --static --libs muster) -Wl,-Bdynamic 2> "$T/cc.err" ||
    fail "cc \$(pkg-config --static --cflags --libs muster) failed: $(cat "$T/cc.err")"
needed libmuster "$T/kv_static" && fail "kv_static links libmuster dynamically"
needed libmbed "$T/kv_static" && fail "kv_static links mbedTLS dynamically"
run_example "pkg-config static build" "$T/kv_static"

# --- find_package(Muster) -----------------------------------------------------------------------
mkdir -p "$T/consumer"
cat > "$T/consumer/CMakeLists.txt" << EOF
cmake_minimum_required(VERSION 3.25)
project(muster_consumer C)
find_package(Muster $want REQUIRED)
add_executable(kv_shared "$EXAMPLE")
target_link_libraries(kv_shared PRIVATE muster::muster)
add_executable(kv_static "$EXAMPLE")
target_link_libraries(kv_static PRIVATE muster::muster_static)
EOF
"$CMAKE" -S "$T/consumer" -B "$T/consumer/build" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_FLAGS="$SAN_FLAGS" \
    > "$T/consumer.log" 2>&1 || fail "find_package(Muster) configure failed: $(tail -20 "$T/consumer.log")"
"$CMAKE" --build "$T/consumer/build" >> "$T/consumer.log" 2>&1 ||
    fail "find_package(Muster) build failed: $(tail -20 "$T/consumer.log")"
needed libmuster.so.0 "$T/consumer/build/kv_shared" || fail "muster::muster is not the shared library"
needed libmuster "$T/consumer/build/kv_static" && fail "muster::muster_static links libmuster.so"
# CMake's build RPATH points at the installed libdir: no LD_LIBRARY_PATH needed
run_example "find_package muster::muster" "$T/consumer/build/kv_shared"
run_example "find_package muster::muster_static" "$T/consumer/build/kv_static"

assert_no_marked_left "after the example runs" 5
exit 0
