#!/bin/sh
# Rewrites README.md's table of `muster run` options, between its two marker comments, with what
# `muster run --help-markdown` prints (the table is launcher/options.def's; tests/integration/
# test_help_options.sh fails while the README's copy differs). Run after changing an option:
#
#     sh tools/gen-readme-options.sh build/muster [README.md]
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 MUSTER_BIN [README]" >&2
    exit 2
fi
bin=$1 readme=${2:-$(dirname "$0")/../README.md}
begin='<!-- BEGIN muster run --help-markdown -->'
end='<!-- END muster run --help-markdown -->'
grep -qxF "$begin" "$readme" && grep -qxF "$end" "$readme" || {
    echo "$0: $readme has no '$begin' ... '$end' markers" >&2
    exit 1
}
table=$(mktemp) tmp="$readme.tmp"
trap 'rm -f "$table" "$tmp"' EXIT
"$bin" run --help-markdown >"$table"
awk -v begin="$begin" -v end="$end" -v table="$table" '
    $0 == begin { print; while ((getline line < table) > 0) buf[n++] = line
                  while (n > 0 && buf[n - 1] == "") n--          # no trailing blank lines
                  for (i = 0; i < n; i++) print buf[i]; skip = 1; next }
    $0 == end   { skip = 0 }
    !skip' "$readme" >"$tmp"
mv "$tmp" "$readme"
