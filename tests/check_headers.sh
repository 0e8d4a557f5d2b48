#!/usr/bin/env bash
# check_headers.sh INCLUDE_DIR CC [CXX] — every public header compiles on its own (it includes what
# it uses), as strict C11 and, when a C++ compiler is given, as C++ (its extern "C" guards): what a
# library user's first #include meets. The CLI never sees this, since it includes them in one order.
set -u
inc=$1 cc=$2 cxx=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
for h in "$inc"/*.h; do
    name=$(basename "$h")
    printf '#include "%s"\n' "$name" >"$work/t.c"
    if ! "$cc" -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I"$inc" "$work/t.c"; then
        echo "FAIL: $name does not compile alone as C11"
        fail=1
    fi
    if [ -n "$cxx" ]; then
        cp "$work/t.c" "$work/t.cpp"
        if ! "$cxx" -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I"$inc" "$work/t.cpp"; then
            echo "FAIL: $name does not compile alone as C++"
            fail=1
        fi
    fi
done
[ "$fail" = 0 ] && echo "every public header compiles alone"
exit "$fail"
