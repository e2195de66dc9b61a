#!/bin/bash
# Every `muster run` option is defined once, in launcher/options.def (docs/ARCHITECTURE.md
# "Adding an option"); --help, the man page and the README's flag table are made from it. This
# compares the table with all three: each row's name (and short name) in `muster run --help`
# and in muster(1), no option in --help that the table lacks, and the README's table between
# its markers exactly what `muster run --help-markdown` prints now (regenerate it when not).
# Likewise `muster server`'s limit flags (launcher/server_limits.def): each in `muster server
# --help` and in docs/SECURITY.md's table of limits.
. "$(dirname "$0")/lib.sh"

def="$MUSTER_SRC/launcher/options.def"
[ -f "$def" ] || fail "no option table at $def"
names=$(sed -n 's/.*\.name = "\([a-z-]*\)".*/\1/p' "$def")
shorts=$(sed -n "s/.*\.short_name = '\\(.\\)'.*/\\1/p" "$def")
nrows=$(grep -c '^LAUNCHER_OPTION(' "$def")
[ "$(wc -w <<<"$names")" = "$nrows" ] ||
    fail "read $(wc -w <<<"$names") names from $nrows rows of options.def (one .name per row)"

"$MUSTER_BIN" run --help >"$T/help" || fail "muster run --help failed"
sh "$MUSTER_SRC/tools/gen-manpage.sh" "$MUSTER_BIN" 0 "$T/muster.1" || fail "gen-manpage.sh failed"
# the man page as text: roff's escaped hyphens back to hyphens
sed 's/\\-/-/g' "$T/muster.1" >"$T/man"

for n in $names; do
    grep -qE -- "(^|[ ,])--$n([ =[]|$)" "$T/help" || fail "muster run --help does not list --$n"
    grep -qE -- "(^|[ ,])--$n([ =[]|$)" "$T/man" || fail "the man page does not list --$n"
done
wide=$(awk 'length($0) > 100' "$T/help")
[ -z "$wide" ] || fail "muster run --help has lines over 100 columns: $wide"
for c in $shorts; do
    grep -qE -- "^  -$c, --" "$T/help" || fail "muster run --help does not list -$c"
done

# the other way: every option line of --help is a row of the table
grep -oE -- '^  (-[a-z], )?--[a-z][a-z-]*' "$T/help" | sed 's/.*--//' | sort -u >"$T/listed"
sort -u <<<"$names" >"$T/table"
extra=$(comm -23 "$T/listed" "$T/table")
[ -z "$extra" ] || fail "muster run --help lists options that options.def lacks: $extra"

"$MUSTER_BIN" run --help-markdown >"$T/md" || fail "muster run --help-markdown failed"
sed -n '/^<!-- BEGIN muster run --help-markdown -->$/,/^<!-- END muster run --help-markdown -->$/p' \
    "$MUSTER_SRC/README.md" | sed '1d;$d' >"$T/readme"
[ -s "$T/readme" ] || fail "README.md has no table between the muster run --help-markdown markers"
if ! diff -u "$T/readme" <(sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' "$T/md") >"$T/diff"; then
    head -40 "$T/diff" >&2
    fail "README.md's option table is stale: sh tools/gen-readme-options.sh $MUSTER_BIN"
fi
for n in $names; do
    grep -qE -- "^\| \`(-[a-z], )?--$n[ \`[]" "$T/md" || fail "--help-markdown has no row for --$n"
done

"$MUSTER_BIN" server --help >"$T/srv" || fail "muster server --help failed"
limits=$(sed -n 's/^LIMIT("\(--[a-z-]*\)".*/\1/p' "$MUSTER_SRC/launcher/server_limits.def")
[ "$(wc -w <<<"$limits")" -gt 10 ] || fail "cannot read launcher/server_limits.def"
for f in $limits; do
    grep -qE -- "^  $f +.*\(default [0-9]+\)$" "$T/srv" || fail "muster server --help does not list $f"
    grep -qF -- "\`$f\`" "$MUSTER_SRC/docs/SECURITY.md" || fail "docs/SECURITY.md does not list $f"
done
exit 0
