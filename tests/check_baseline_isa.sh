#!/usr/bin/env bash
# check_baseline_isa.sh LIBRARY.a [OBJECT...] (arguments may be ';'-separated lists, as CMake
# passes $<TARGET_OBJECTS:...>) — the portable build runs on any x86-64 CPU: outside the
# dispatched kernel files (*_avx2.c / *_avxvnni.c / *_avx512.c, called only after src/cpu/cpu.c
# found the instruction set), no object may contain an AVX / AVX-512 instruction (VEX or EVEX encoded: every
# such mnemonic starts with "v", or uses a ymm / zmm / mask register) or one of the SSE3..SSE4.2,
# BMI, FMA4 or other post-baseline instructions GCC emits for -march values above x86-64.
# Reads the disassembly with objdump (binutils, installed with gcc).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 LIBRARY.a [OBJECT...]" >&2; exit 2; }
files=()
for arg in "$@"; do IFS=';' read -ra parts <<<"$arg"; files+=("${parts[@]}"); done
set -- "${files[@]}"
command -v objdump >/dev/null || { echo "check_baseline_isa: objdump not found (binutils)" >&2; exit 1; }
report=$(objdump -d --no-show-raw-insn "$@" | awk '
    /^In archive / { next }
    /file format/ {
        file = $1; sub(":$", "", file)
        skip = (file ~ /_avx2\.c\.o$/ || file ~ /_avxvnni\.c\.o$/ || file ~ /_avx512\.c\.o$/); next
    }
    /^[0-9a-f]+ <.*>:$/ { fn = $2; next }
    skip { next }
    /^ *[0-9a-f]+:\t/ {
        split($0, parts, "\t"); insn = parts[2]; split(insn, w, " "); op = w[1]
        bad = 0
        if (op ~ /^v/ || insn ~ /%[yz]mm[0-9]/ || insn ~ /%k[0-7]/) bad = 1
        if (op ~ /^(pshufb|palignr|phadd(w|d|sw)|phsub(w|d|sw)|pabs[bwd]|psign[bwd]|pmaddubsw|pmulhrsw|ptest|pblendw|pblendvb|blendv?p[sd]|round[ps][sd]|dpp[sd]|insertps|extractps|pextr[bdq]|pinsr[bdq]|pmins[bd]|pminu[wd]|pmaxs[bd]|pmaxu[wd]|pmulld|pmuldq|pmov[sz]x[bwd][wdq]|packusdw|pcmpeqq|pcmpgtq|pcmp[ei]str[im]|crc32[bwlq]?|popcnt[wlq]?|lzcnt[wlq]?|tzcnt[wlq]?|andn[lq]?|bextr[lq]?|blsi[lq]?|blsr[lq]?|blsmsk[lq]?|bzhi[lq]?|pdep[lq]?|pext[lq]?|mulx[lq]?|rorx[lq]?|sarx[lq]?|shlx[lq]?|shrx[lq]?|movbe[wlq]?|haddp[sd]|hsubp[sd]|addsubp[sd]|movddup|movs[hl]dup|lddqu)$/) bad = 1
        if (bad) { n++; if (n <= 20) printf "%s %s: %s\n", file, fn, insn }
    }
    END { if (n) printf "%d instructions beyond baseline x86-64\n", n }')
if [ -n "$report" ]; then
    echo "check_baseline_isa: instructions the baseline x86-64 CPU lacks, outside the dispatched kernel files:" >&2
    echo "$report" >&2
    exit 1
fi
echo "check_baseline_isa: no instruction beyond baseline x86-64 outside *_avx2.c / *_avxvnni.c / *_avx512.c ($# files)"
