#!/bin/sh
# Fails (exit 1) when any tracked C file differs from the project's .clang-format, naming each.
# Usage: tools/check-format.sh [REPO_ROOT]. Skips (77) where clang-format or git is missing.
set -eu
cd "${1:-$(dirname "$0")/..}"
command -v clang-format >/dev/null || { echo "skip: clang-format not installed" >&2; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "skip: not a git checkout" >&2; exit 77; }
bad=0
for f in $(git ls-files '*.c' '*.h'); do
    [ -f "$f" ] || continue
    if ! clang-format --style=file "$f" | cmp -s - "$f"; then
        echo "differs from .clang-format: $f (fix: clang-format -i $f)"
        bad=$((bad + 1))
    fi
done
[ "$bad" -eq 0 ] || { echo "$bad file(s) differ from .clang-format" >&2; exit 1; }
echo "all C files match .clang-format"
