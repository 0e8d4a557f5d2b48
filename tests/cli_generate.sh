#!/usr/bin/env bash
# cli_generate.sh — what `difftrans generate` reads, samples and where it stops: --prompt-file,
# --min-p, --stop, on untrained models (their text is what they sample, so every expected output is
# worked out here from a run without the option).
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

# ---------------------------------------------------------------- --min-p

expect_ok "greedy" "${GEN[@]}" --prompt "The" -n 12 --temperature 0 --print-ids && cp "$S/last.out" "$S/greedy.ids"
# min-p 1 keeps the most likely token alone: greedy, at any temperature
expect_ok "--min-p 1 at temperature 1.5" "${GEN[@]}" --prompt "The" -n 12 --temperature 1.5 --top-p 1 --min-p 1 --print-ids
check "--min-p 1 is greedy" cmp "$S/last.out" "$S/greedy.ids"
expect_ok "sampling" "${GEN[@]}" --prompt "The" -n 12 --temperature 1.5 --seed 4 --print-ids && cp "$S/last.out" "$S/s.ids"
expect_ok "--min-p 0" "${GEN[@]}" --prompt "The" -n 12 --temperature 1.5 --seed 4 --min-p 0 --print-ids
check "--min-p 0 is off (the default)" cmp "$S/last.out" "$S/s.ids"
# generation_config.json's min_p is --min-p's default, as transformers' generate reads it
cp -r "$S/m" "$S/m_gc"
printf '{"do_sample": true, "temperature": 1.5, "top_k": 0, "top_p": 0.95, "min_p": 1.0}\n' >"$S/m_gc/generation_config.json"
expect_ok "generation_config.json's min_p 1" "$DT" generate "$S/m_gc" --threads 1 --prompt "The" -n 12 --print-ids
check "generation_config.json's min_p 1 is greedy" cmp "$S/last.out" "$S/greedy.ids"
out_has "it says so" "$S/last.err" 'min-p 1 \(generation_config'
expect_ok "--min-p 0 over it" "$DT" generate "$S/m_gc" --threads 1 --prompt "The" -n 12 --seed 4 --min-p 0 --print-ids
check "--min-p 0 over generation_config.json's: sampling again" cmp "$S/last.out" "$S/s.ids"
for bad in 2 -0.1 abc nan; do
    expect_status "--min-p $bad" 1 "--min-p" "${GEN[@]}" --prompt "a" -n 2 --min-p "$bad"
done

# ---------------------------------------------------------------- --stop

expect_status "--stop empty" 1 '--stop: empty' "${GEN[@]}" --prompt "a" -n 2 --stop ""
# a stop string that begins inside a character (its continuation byte) is no text
expect_status "--stop not UTF-8" 1 '--stop: not valid UTF-8 \(byte 0xA9 at offset 0\)' \
    "${GEN[@]}" --prompt "a" -n 2 --stop $'\xa9x'
expect_status "five --stop" 1 '--stop: at most 4' "${GEN[@]}" --prompt "a" -n 2 --stop a --stop b --stop c --stop d \
    --stop e
expect_status "--stop with --print-ids" 1 '--stop .*--print-ids' "${GEN[@]}" --prompt "a" -n 2 --stop a --print-ids

if [ -z "$PY" ]; then
    echo "SKIPPED: --stop on generated text (python3 is needed to work out the expected text)"
else
    # a model with a byte-level BPE (tests/tokenizer/fixtures): text with characters of several bytes,
    # which tokens of one byte cut
    sed 's/"vocab_size":[^,]*/"vocab_size": 540/' "$S/m/config.json" >"$S/c540.json"
    expect_ok "fixture: a model of 540 tokens" "$DT" init --config "$S/c540.json" --out "$S/bm"
    rm -f "$S/bm/difftrans_tokenizer.json"
    cp "$(dirname "$0")/tokenizer/fixtures/bytelevel_gpt2.json" "$S/bm/tokenizer.json"
    BGEN=("$DT" generate "$S/bm" --threads 1 --prompt "Zq" -n 60 --temperature 1.5 --seed 3)
    expect_ok "generate without --stop" "${BGEN[@]}" && cp "$S/last.out" "$S/full.txt"
    # the stop strings picked from the text generated, and what generate must print with them: the
    # text cut where it first holds one (OpenAI's stop), the rest never printed
    check "stop strings from the text" "$PY" - "$S" <<'PYEOF'
import os, sys
d = sys.argv[1]
full = open(os.path.join(d, "full.txt"), encoding="utf-8").read()
assert full.startswith("Zq") and full.endswith("\n"), repr(full[:40])
c = full[2:-1]
assert len(c) > 30, repr(c)
def cut(stops):
    for e in range(1, len(c) + 1):
        hits = [e - len(s) for s in stops if c[:e].endswith(s)]
        if hits:
            return c[:min(hits)]
    return c
clean = lambda s: "\n" not in s and "\0" not in s
cases = {}
# spans tokens: four characters from the middle
i = next(i for i in range(8, len(c) - 4) if clean(c[i:i + 4]))
cases["span"] = [c[i:i + 4]]
# begins with a character of several bytes (generated as tokens of its bytes or more)
j = next(j for j in range(len(c) - 1) if ord(c[j]) > 0x7F and c[j] != "\ufffd" and clean(c[j:j + 2]))
cases["multibyte"] = [c[j:j + 2]]
# never completes: the text's last characters begin it (held back while streaming, printed at the end)
cases["never"] = [c[-2:] + "\u2603\u2603"]
# two, one inside the other: the one whose end comes first cuts, not the one that starts first
k = next(k for k in range(8, len(c) - 6) if clean(c[k:k + 6]) and c.index(c[k + 2]) == k + 2)
cases["two"] = [c[k:k + 6], c[k + 2]]
# the prompt's text is not the generated text
cases["prompt"] = ["Zq"]
for name, stops in cases.items():
    assert all(clean(s) and s for s in stops), (name, stops)
    for n, s in enumerate(stops):
        open(os.path.join(d, "stop_%s_%d" % (name, n)), "w", encoding="utf-8").write(s)
    open(os.path.join(d, "want_%s" % name), "w", encoding="utf-8").write("Zq" + cut(stops) + "\n")
assert cut(cases["span"]) != c and cut(cases["multibyte"]) != c and cut(cases["never"]) == c
assert cut(cases["two"]) == c[:k + 2]
assert "Zq" in c or cut(cases["prompt"]) == c
PYEOF
    for name in span multibyte never two prompt; do
        args=()
        for f in "$S"/stop_"$name"_*; do args+=(--stop "$(<"$f")"); done
        expect_ok "--stop ($name)" "${BGEN[@]}" "${args[@]}"
        check "--stop ($name): the text cut before the stop string" cmp "$S/last.out" "$S/want_$name"
    done

    # ids that end inside a character: the prompt's rest (a U+FFFD where the completion leaves it as
    # it is) is printed with the completion but is the prompt's, so a stop string that needs it does
    # not match; a character the completion's bytes complete is the completion's (the server's text)
    PGEN=("$DT" generate "$S/bm" --threads 1 --prompt-ids "65 195" -n 6 --temperature 1 --seed 1)
    expect_ok "--prompt-ids ending in a lead byte, without --stop" "${PGEN[@]}" && cp "$S/last.out" "$S/rest.txt"
    check "a stop string across the prompt's rest and the completion" "$PY" - "$S" <<'PYEOF'
import os, sys
d = sys.argv[1]
full = open(os.path.join(d, "rest.txt"), encoding="utf-8", errors="strict").read()
c = full[1:-1]
# the rest stays a U+FFFD (the first generated byte completes nothing), and the stop string is only
# there across it
assert full.startswith("A\ufffd") and full.endswith("\n") and c[1:2] not in "\ufffd\n\0", repr(full)
assert c[:2] not in c[1:], repr(c)
open(os.path.join(d, "stop_rest"), "w", encoding="utf-8").write(c[:2])
PYEOF
    expect_ok "--stop across the prompt's rest" "${PGEN[@]}" --stop "$(<"$S/stop_rest")"
    check "--stop across the prompt's rest: the whole text" cmp "$S/last.out" "$S/rest.txt"
fi

finish cli_generate
