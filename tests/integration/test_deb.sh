#!/bin/bash
# `cpack -G DEB` makes the packages muster (binaries, man page), libmuster0 (libmuster.so.0) and
# libmuster-dev (header, static library, libmuster.so, pkg-config, CMake package), each with the
# right files and dependencies. They are installed with `dpkg --root` into a scratch root with its
# own dpkg database (the host's packages are not in it, hence --force-depends), and the muster
# installed there runs --version and a 2-worker standalone job; kv_example.c builds against the
# scratch root's libmuster-dev through pkg-config.
#
# Environment: MUSTER_BUILD (the build folder; ctest sets it), else MUSTER_BIN's folder.
. "$(dirname "$0")/lib.sh"

B=${MUSTER_BUILD:-$(dirname "$MUSTER_BIN")}
[ -f "$B/CPackConfig.cmake" ] || skip "no CPackConfig.cmake in $B"
for tool in dpkg-deb dpkg dpkg-shlibdeps file; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (dpkg-dev, file): cannot build .deb packages"
done
CPACK=$(sed -n 's/^CMAKE_CPACK_COMMAND:INTERNAL=//p' "$B/CMakeCache.txt")
[ -x "$CPACK" ] || CPACK=$(command -v cpack) || skip "cpack is not installed"

cpack_log="$T/cpack.log"
"$CPACK" --config "$B/CPackConfig.cmake" -G DEB -B "$T/pkg" > "$cpack_log" 2>&1 ||
    fail "cpack -G DEB failed: $(tail -20 "$cpack_log")"

# deb NAME: the path of package NAME's .deb
deb() {
    local f
    for f in "$T"/pkg/*.deb; do
        [ "$(dpkg-deb -f "$f" Package)" = "$1" ] && echo "$f" && return 0
    done
    fail "cpack made no package named $1: $(ls "$T/pkg")"
}
# has PACKAGE PATH_REGEX: the package holds a file matching the regex (anchored, without ./)
has() {
    dpkg-deb -c "$(deb "$1")" | awk '{print $6}' | sed 's|^\./||' | grep -qE "^$2\$" ||
        fail "package $1 lacks $2"
}
# lacks PACKAGE PATH_REGEX
lacks() {
    dpkg-deb -c "$(deb "$1")" | awk '{print $6}' | sed 's|^\./||' | grep -qE "^$2\$" &&
        fail "package $1 holds $2 (belongs elsewhere)"
    return 0
}

has muster usr/bin/muster
has muster 'usr/share/man/man1/muster\.1\.gz'
[ -x "$B/muster-preflight" ] && has muster usr/bin/muster-preflight
lacks muster 'usr/lib/.*'
has libmuster0 'usr/lib/(.*/)?libmuster\.so\.0'
lacks libmuster0 'usr/include/.*'
has libmuster-dev 'usr/include/muster\.h'
has libmuster-dev 'usr/include/muster_version\.h'
has libmuster-dev 'usr/lib/(.*/)?libmuster\.a'
has libmuster-dev 'usr/lib/(.*/)?libmuster\.so'
has libmuster-dev 'usr/lib/(.*/)?pkgconfig/muster\.pc'
has libmuster-dev 'usr/lib/(.*/)?cmake/Muster/MusterConfig\.cmake'
lacks libmuster-dev 'usr/bin/.*'

# dependencies: shlibdeps found the libraries; the -dev package needs its library and mbedTLS
dpkg-deb -f "$(deb muster)" Depends | grep -q 'libuv1' ||
    fail "muster does not depend on libuv1: $(dpkg-deb -f "$(deb muster)" Depends)"
dpkg-deb -f "$(deb libmuster0)" Depends | grep -q 'libmbedtls' ||
    fail "libmuster0 does not depend on mbedTLS: $(dpkg-deb -f "$(deb libmuster0)" Depends)"
dev_deps=$(dpkg-deb -f "$(deb libmuster-dev)" Depends)
grep -q 'libmuster0 (= ' <<<"$dev_deps" || fail "libmuster-dev does not depend on libmuster0: $dev_deps"
grep -q 'libmbedtls-dev' <<<"$dev_deps" || fail "libmuster-dev does not depend on libmbedtls-dev: $dev_deps"

# --- install into a scratch root ----------------------------------------------------------------
R="$T/root"
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/var/lib/dpkg/triggers" "$T/stub"
: > "$R/var/lib/dpkg/status"
: > "$R/var/lib/dpkg/available"
# libmuster0's postinst runs ldconfig; chrootless, that would be the host's: a stub stands in
# shellcheck disable=SC2016 # $DPKG_ROOT is for the stub to expand
printf '#!/bin/sh\necho "$DPKG_ROOT" >> "%s/ldconfig.ran"\n' "$T" > "$T/stub/ldconfig"
chmod +x "$T/stub/ldconfig"
PATH="$T/stub:$PATH" dpkg --root="$R" --log=/dev/null --force-depends --force-script-chrootless \
    -i "$T"/pkg/*.deb > "$T/dpkg.log" 2>&1 || fail "dpkg --root -i failed: $(tail -20 "$T/dpkg.log")"
for p in muster libmuster0 libmuster-dev; do
    [ "$(dpkg-query --admindir="$R/var/lib/dpkg" -W -f '${Status}' "$p")" = "install ok installed" ] ||
        fail "$p is not installed in the scratch root: $(tail -20 "$T/dpkg.log")"
done
[ -s "$T/ldconfig.ran" ] || fail "libmuster0's postinst did not run ldconfig"

MUSTER_BIN="$R/usr/bin/muster"
[ -x "$MUSTER_BIN" ] || fail "no usr/bin/muster in the scratch root"
IT_TIMEOUT=20 mrun -- --version
expect_rc "installed muster --version" 0
grep -qE '^muster [0-9]+\.[0-9]+\.[0-9]+$' "$T/out" || fail "muster --version: $(cat "$T/out")"
grep -q '^protocol ' "$T/out" || fail "muster --version has no protocol line: $(cat "$T/out")"
IT_TIMEOUT=60 mrun -- run --standalone --nproc-per-node 2 --no-python /bin/true
expect_rc "installed muster run --standalone --nproc-per-node 2 --no-python /bin/true" 0

# libmuster-dev from the scratch root: muster.pc finds its own prefix
pc=$(find "$R/usr/lib" -name muster.pc | head -1)
LIBDIR=$(dirname "$(dirname "$pc")")
CC=${CC:-cc}
# A -DMUSTER_SANITIZE=ON build installs an instrumented libmuster: its consumers need the same
# runtime (CI runs this test in such a build too).
SAN_FLAGS=""
grep -q '^MUSTER_SANITIZE:BOOL=ON$' "$B/CMakeCache.txt" && SAN_FLAGS="-fsanitize=address,undefined"
if command -v "$CC" >/dev/null && command -v pkg-config >/dev/null; then
    # shellcheck disable=SC2046
    "$CC" $SAN_FLAGS -o "$T/kv_example" "$MUSTER_SRC/examples/c/kv_example.c" \
        $(PKG_CONFIG_PATH="$LIBDIR/pkgconfig" pkg-config --cflags --libs muster) 2> "$T/cc.err" ||
        fail "kv_example against libmuster-dev failed to build: $(cat "$T/cc.err")"
    IT_TIMEOUT=60 mrun LD_LIBRARY_PATH="$LIBDIR" -- run --standalone --nproc-per-node 2 --no-python \
        "$T/kv_example"
    expect_rc "kv_example against libmuster-dev, 2 workers" 0
    [ "$(grep -c 'got id' "$T/out")" = 2 ] || { show_output; fail "kv_example: not both ranks got the id"; }
else
    note "no C compiler or pkg-config: kv_example against libmuster-dev not built"
fi

assert_no_marked_left "after the runs" 5
exit 0
