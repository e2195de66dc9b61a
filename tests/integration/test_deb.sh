#!/bin/bash
# `cpack -G DEB` makes the packages muster (binaries, man pages), libmuster0 (libmuster.so.0) and
# libmuster-dev (header, static library, libmuster.so, pkg-config, CMake package), each with the
# right files and dependencies, a copyright file and a changelog, and lintian finds no error or
# warning in them that the package does not override with a reason
# (/usr/share/lintian/overrides/<package>, from cmake/debian/). They are installed with
# `dpkg --root` into a scratch root with its own dpkg database (the host's packages are not in it,
# hence --force-depends), and the muster installed there runs --version and a 2-worker standalone
# job, the installed muster-preflight (no RUNPATH) starts where the loader knows libnccl.so.2,
# and examples/c builds against the scratch root's libmuster-dev through pkg-config and, on its
# own, through examples/c/CMakeLists.txt (find_package(Muster), static and shared).
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

# Debian's files in every package; the ldconfig trigger; no RUNPATH to the build host's NCCL
for p in muster libmuster0 libmuster-dev; do
    has $p "usr/share/doc/$p/copyright"
    has $p "usr/share/doc/$p/changelog\.gz"
    dpkg-deb --fsys-tarfile "$(deb $p)" | tar -xO "./usr/share/doc/$p/copyright" |
        grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/$' ||
        fail "$p's copyright file is not in the machine-readable format (DEP-5)"
    dpkg-deb --fsys-tarfile "$(deb $p)" | tar -xO "./usr/share/doc/$p/changelog.gz" | gzip -dc |
        head -1 | grep -qF "muster ($(dpkg-deb -f "$(deb $p)" Version)) " ||
        fail "$p's changelog does not start with its version $(dpkg-deb -f "$(deb $p)" Version)"
done
dpkg-deb -I "$(deb libmuster0)" triggers 2> /dev/null | grep -qx 'activate-noawait ldconfig' ||
    fail "libmuster0 has no ldconfig trigger (control file triggers)"
dpkg-deb -f "$(deb muster)" Maintainer | grep -q '@localhost' &&
    fail "muster's maintainer is a localhost address: $(dpkg-deb -f "$(deb muster)" Maintainer)"

# lintian (package lintian, in tools/bootstrap.sh): fails on any error or warning tag that the
# package does not override; --no-cfg so that a ~/.lintianrc cannot change what is checked
if command -v lintian > /dev/null; then
    lintian --no-cfg --fail-on error,warning "$T"/pkg/*.deb > "$T/lintian.log" 2>&1 ||
        fail "lintian: errors or warnings: $(grep -v '^running with root' "$T/lintian.log")"
else
    note "lintian is not installed: the packages were not checked with lintian"
fi

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

# The installed muster-preflight has no RUNPATH (the build tree's has this host's NCCL folder) and
# still starts where the loader knows NCCL: from /usr/lib/<arch> or a folder NVIDIA's CUDA
# packages put in /etc/ld.so.conf.d (docs/INSTALL.md)
PF="$R/usr/bin/muster-preflight"
if [ -x "$PF" ]; then
    readelf -d "$PF" | grep -qE '\((RUNPATH|RPATH)\)' &&
        fail "the installed muster-preflight has a RUNPATH: $(readelf -d "$PF" | grep -E 'R(UN)?PATH')"
    if "$(command -v ldconfig || echo /sbin/ldconfig)" -p | grep -q 'libnccl\.so\.2 '; then
        "$PF" --version > "$T/pf.out" 2>&1 ||
            fail "the installed muster-preflight does not start: $(cat "$T/pf.out")"
        grep -qE '^muster-preflight [0-9]+\.[0-9]+\.[0-9]+$' "$T/pf.out" ||
            fail "muster-preflight --version: $(cat "$T/pf.out")"
    else
        note "libnccl.so.2 is not in the loader's cache: the installed muster-preflight was not started"
    fi
fi

# libmuster-dev from the scratch root. Its muster.pc names the installed prefix (/usr, absolute
# paths), so pkg-config filters its -I and -L as system folders; pkg-config's sysroot maps them
# into the scratch root.
pc=$(find "$R/usr/lib" -name muster.pc | head -1)
[ -n "$pc" ] || fail "no muster.pc in the scratch root"
LIBDIR=$(dirname "$(dirname "$pc")")
CC=${CC:-cc}
# A -DMUSTER_SANITIZE=ON build installs an instrumented libmuster: its consumers need the same
# runtime (CI runs this test in such a build too).
SAN_FLAGS=""
grep -q '^MUSTER_SANITIZE:BOOL=ON$' "$B/CMakeCache.txt" && SAN_FLAGS="-fsanitize=address,undefined"
if command -v pkg-config > /dev/null; then
    prefix=$(PKG_CONFIG_LIBDIR="$LIBDIR/pkgconfig" pkg-config --variable=prefix muster)
    [ "$prefix" = /usr ] || fail "the packaged muster.pc's prefix is '$prefix', not /usr"
    cflags=$(PKG_CONFIG_LIBDIR="$LIBDIR/pkgconfig" pkg-config --cflags muster)
    [ -z "$cflags" ] || fail "pkg-config --cflags muster prints '$cflags' for /usr/include"
fi
# kv_run WHAT BINARY [VAR=VALUE...]: BINARY as the 2 workers of the installed muster
kv_run() {
    local what=$1 bin=$2
    shift 2
    IT_TIMEOUT=60 mrun "$@" -- run --standalone --nproc-per-node 2 --no-python "$bin"
    expect_rc "$what, 2 workers" 0
    [ "$(grep -c 'got id' "$T/out")" = 2 ] || { show_output; fail "$what: not both ranks got the id"; }
}
if command -v "$CC" > /dev/null && command -v pkg-config > /dev/null; then
    # shellcheck disable=SC2046
    "$CC" $SAN_FLAGS -o "$T/kv_example" "$MUSTER_SRC/examples/c/kv_example.c" \
        $(PKG_CONFIG_SYSROOT_DIR="$R" PKG_CONFIG_LIBDIR="$LIBDIR/pkgconfig" pkg-config --cflags --libs muster) \
        2> "$T/cc.err" || fail "kv_example against libmuster-dev failed to build: $(cat "$T/cc.err")"
    kv_run "kv_example through pkg-config" "$T/kv_example" LD_LIBRARY_PATH="$LIBDIR"
else
    note "no C compiler or pkg-config: kv_example against libmuster-dev not built"
fi

# examples/c on its own (find_package(Muster) from the scratch root), both ways it links
CMAKE=$(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' "$B/CMakeCache.txt")
[ -x "$CMAKE" ] || CMAKE=cmake
if command -v "$CC" > /dev/null; then
    for link in static shared; do
        ex="$T/example-$link"
        "$CMAKE" -S "$MUSTER_SRC/examples/c" -B "$ex" -DCMAKE_PREFIX_PATH="$R/usr" \
            -DMUSTER_EXAMPLE_LINK=$link -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$SAN_FLAGS" \
            > "$ex.log" 2>&1 || fail "examples/c ($link) does not configure: $(tail -20 "$ex.log")"
        grep -q "Muster_DIR:PATH=$R/usr/lib/" "$ex/CMakeCache.txt" ||
            fail "examples/c found another Muster: $(grep Muster_DIR "$ex/CMakeCache.txt")"
        "$CMAKE" --build "$ex" >> "$ex.log" 2>&1 ||
            fail "examples/c ($link) does not build: $(tail -20 "$ex.log")"
        if [ $link = shared ]; then
            readelf -d "$ex/kv_example" | grep -q '(NEEDED).*\[libmuster\.so\.0\]' ||
                fail "examples/c with MUSTER_EXAMPLE_LINK=shared does not link libmuster.so.0"
        else
            readelf -d "$ex/kv_example" | grep -q '(NEEDED).*\[libmuster' &&
                fail "examples/c with MUSTER_EXAMPLE_LINK=static links libmuster dynamically"
        fi
        # shared: CMake's build RPATH names the scratch root's libdir
        kv_run "examples/c CMake build ($link)" "$ex/kv_example"
    done
else
    note "no C compiler: examples/c not built against libmuster-dev"
fi

assert_no_marked_left "after the runs" 5
exit 0
