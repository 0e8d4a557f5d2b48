#!/usr/bin/env bash
# check_public_archive.sh LIBRARY.a — the archive a program links: its only global symbols are the
# public dt_* ones (and the lock OpenMP names for unnamed critical sections, shared with the program
# as OpenMP wants), and no common symbol is left unallocated (an executable linked against it never
# allocated one: clang's critical-section lock then read whatever sat at its address).
set -u
lib=$1
command -v nm >/dev/null || { echo "check_public_archive: nm not found (binutils)" >&2; exit 1; }
extra=$(nm -g --defined-only "$lib" | awk 'NF == 3 { print $3 }' | grep -v -e '^dt_' -e '^\.gomp_critical_user_')
common=$(nm "$lib" | awk '$2 == "C" { print $3 }')
fail=0
if [ -n "$extra" ]; then
    echo "global symbols without the dt_ prefix in $lib:"; echo "$extra" | head -20; fail=1
fi
if [ -n "$common" ]; then
    echo "common symbols left unallocated in $lib:"; echo "$common"; fail=1
fi
[ "$fail" = 0 ] && echo "$lib: $(nm -g --defined-only "$lib" | grep -c ' dt_') public symbols, nothing else global"
exit "$fail"
