#!/usr/bin/env bash
# check_layers.sh [ROOT] — the layer check: every folder of the product may
# include only folders below it in the layer order that README.md's Layout
# section lists (the first fenced block after "## Layout", top first; a
# line's first word is the folder, `rehearse.c` stands for the root).
#
# Reads every #include "..." of the product's C, CUDA and C++ files (tests,
# benches and fuzz targets are outside it) and prints, for each include that
# breaks the order, the file, the line and the include; for two folders that
# include each other, both directions; for a folder the list does not name,
# the file. Exit status 0 when the tree keeps its order, 1 otherwise.
#
# A quoted include resolves as the compiler resolves it: next to the file,
# then from the root (-I.), then in the CUDA emulator's headers (the one
# other -I the build gives). An include that resolves nowhere is the
# compiler's business, not this check's.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
[ -f README.md ] || { echo "check_layers: $root/README.md not found" >&2; exit 1; }

order=$(awk '
    /^## Layout/ { inlayout = 1; next }
    inlayout && /^## / { exit }
    inlayout && /^```/ { if (inblock) exit; inblock = 1; next }
    inblock && NF { print ($1 == "rehearse.c" ? "." : $1) }' README.md)
[ -n "$order" ] || { echo "check_layers: README.md has no layer order (a fenced block under ## Layout)" >&2; exit 1; }

files=$( { find . -path ./tests -prune -o -path './build*' -prune -o -path ./.git -prune -o -path ./reports -prune \
               -o -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cc' \) -print; } | sed 's|^\./||' | sort)

# file<TAB>line<TAB>include, for every quoted include.
includes=$(for f in $files; do
    awk -v f="$f" 'match($0, /^[ \t]*#[ \t]*include[ \t]*"[^"]+"/) {
        s = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", s); sub(/"$/, "", s)
        printf "%s\t%d\t%s\n", f, FNR, s }' "$f"
done)

printf '%s\n' "$includes" | awk -F '\t' -v order="$order" '
    function dir(p) { return p ~ /\// ? substr(p, 1, match(p, /\/[^\/]*$/) - 1) : "." }
    # "a/b/../c" -> "a/c", "./x" -> "x": an include may climb out of its folder.
    function norm(p,   n, i, k, part, out) {
        n = split(p, part, "/"); k = 0
        for (i = 1; i <= n; i++) {
            if (part[i] == "." || part[i] == "") continue
            if (part[i] == ".." && k > 0 && out[k] != "..") { k--; continue }
            out[++k] = part[i]
        }
        p = ""
        for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
        return p
    }
    function exists(p,   r, first) { r = (getline first < p); close(p); return r >= 0 }
    BEGIN {
        n = split(order, layer, "\n")
        for (i = 1; i <= n; i++) rank[layer[i]] = n - i + 1    # bottom = 1
        bad = 0
    }
    NF < 3 { next }
    {
        file = $1; line = $2; inc = $3; from = dir(file)
        here = (from == "." ? inc : from "/" inc)
        if (exists(here)) target = norm(here)
        else if (exists(inc)) target = inc
        else if (exists("kernels/cuda/emu/include/" inc)) target = "kernels/cuda/emu/include/" inc
        else next
        to = dir(target)
        if (!(from in rank)) { if (!(from in unnamed)) { unnamed[from] = file; bad = 1 } next }
        if (to == from) next
        if (!(to in rank)) { if (!(to in unnamed)) { unnamed[to] = target; bad = 1 } next }
        edge = from SUBSEP to
        if (!(edge in seen)) seen[edge] = file ":" line ": #include \"" inc "\""
        if (rank[to] > rank[from]) {
            printf "%s:%s: #include \"%s\": %s includes %s, which is above it in the layer order (README.md, Layout)\n",
                   file, line, inc, from, to
            bad = 1
        }
    }
    END {
        for (f in unnamed)
            printf "%s: folder %s is not in the layer order (README.md, Layout): add it where it belongs\n", unnamed[f], f
        for (e in seen) {
            split(e, p, SUBSEP)
            back = p[2] SUBSEP p[1]
            if ((back in seen) && p[1] < p[2]) {
                printf "folders %s and %s include each other:\n  %s\n  %s\n", p[1], p[2], seen[e], seen[back]
                bad = 1
            }
        }
        exit bad
    }'
