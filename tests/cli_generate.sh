#!/usr/bin/env bash
# cli_generate.sh — what `difftrans generate` reads and where it stops: --prompt-file, on an untrained
# byte-level model (its text is the bytes it samples, so every expected output is worked out here).
# usage: cli_generate.sh PATH_TO_difftrans SCRATCH_DIR
. "$(dirname "$0")/cli_lib.sh" "$@"

expect_ok "fixture: a tiny byte-level model" "$DT" init --preset tiny --out "$S/m" || {
    echo "cannot build the fixture model; stopping" >&2
    exit 1
}
GEN=("$DT" generate "$S/m" --threads 1)

# ---------------------------------------------------------------- --prompt-file

printf 'The cat\n' >"$S/p.txt"
expect_ok "--prompt: ids of a prompt with a trailing newline" "${GEN[@]}" --prompt $'The cat\n' -n 8 --temperature 0 \
    --print-ids && cp "$S/last.out" "$S/p.ids"
expect_ok "--prompt-file: the file's bytes, its trailing newline kept" "${GEN[@]}" --prompt-file "$S/p.txt" -n 8 \
    --temperature 0 --print-ids
check "--prompt-file gives --prompt's ids" cmp "$S/last.out" "$S/p.ids"
expect_ok "--prompt-file -: stdin" bash -c '"$@" <"'"$S/p.txt"'"' _ "${GEN[@]}" --prompt-file - -n 8 --temperature 0 \
    --print-ids
check "--prompt-file - gives the same ids" cmp "$S/last.out" "$S/p.ids"
expect_ok "--prompt-file: the text printed as it is" "${GEN[@]}" --prompt-file "$S/p.txt" -n 0
check "the prompt printed as read, then the line break generate ends with" cmp "$S/last.out" <(printf 'The cat\n\n')
# a NUL byte is text like any other (the prompt is not cut there)
printf 'x\0y' >"$S/nul.txt"
expect_ok "--prompt-file with a NUL byte" "${GEN[@]}" --prompt-file "$S/nul.txt" -n 3 --temperature 0 --print-ids
cp "$S/last.out" "$S/nul.ids"
expect_ok "the same as its ids" "${GEN[@]}" --prompt-ids "120 0 121" -n 3 --temperature 0 --print-ids
check "a NUL byte in --prompt-file is part of the prompt" cmp "$S/last.out" "$S/nul.ids"
printf 'ab\xffc' >"$S/bad.txt"
expect_status "--prompt-file not UTF-8" 2 '--prompt-file .*bad\.txt: not valid UTF-8 .*0xFF at offset 2' \
    "${GEN[@]}" --prompt-file "$S/bad.txt" -n 2
printf 'ab\xe2\x82' >"$S/cut.txt"
expect_status "--prompt-file ending inside a character" 2 '--prompt-file .*cut\.txt: not valid UTF-8 .*offset 2' \
    "${GEN[@]}" --prompt-file "$S/cut.txt" -n 2
expect_status "--prompt-file - not UTF-8" 2 '--prompt-file stdin: not valid UTF-8' \
    bash -c '"$@" <"'"$S/bad.txt"'"' _ "${GEN[@]}" --prompt-file - -n 2
expect_status "--prompt-file missing" 3 '--prompt-file .*no_such\.txt: No such file' \
    "${GEN[@]}" --prompt-file "$S/no_such.txt" -n 2
expect_status "--prompt-file a directory" 3 "--prompt-file $S: read failed" "${GEN[@]}" --prompt-file "$S" -n 2
expect_status "--prompt-file and --prompt" 1 'not --prompt and --prompt-file' \
    "${GEN[@]}" --prompt-file "$S/p.txt" --prompt "a" -n 2
expect_status "--prompt-file and --prompt-ids" 1 'not --prompt-file and --prompt-ids' \
    "${GEN[@]}" --prompt-file "$S/p.txt" --prompt-ids "1" -n 2

finish cli_generate
