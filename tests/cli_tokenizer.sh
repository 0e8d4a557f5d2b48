#!/usr/bin/env bash
# cli_tokenizer.sh — `difftrans tokenizer encode|decode|info|train` end to end.
#
# usage: bash tests/cli_tokenizer.sh PATH_TO_difftrans SCRATCH_DIR
#
# Stdin is encoded byte for byte (a trailing newline has its own id), decode writes exactly the
# text, bad inputs are refused with the file or argument named; `train` learns tokenizers with
# both patterns whose round trip is exact. When the reference (the Rust library's Node binding,
# installed by the tokenizer_reference test into the build tree) is there: the trained tokenizers
# encode the corpus and the hard strings identically in the reference, and the golden files are
# regenerated and compared with the committed ones.
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
FIX=$HERE/tokenizer/fixtures
TOKREF=$(dirname "$S")/tokref/node_modules
export OMP_NUM_THREADS=1

# ---- encode / decode / info on a hand-made tokenizer
T=$FIX/llama3_like.json
printf 'Hello world!' >"$S/a.txt"
printf 'Hello world!\n' >"$S/b.txt"
expect_ok "encode" sh -c "'$DT' tokenizer encode --tokenizer '$T' <'$S/a.txt' >'$S/a.ids'"
expect_ok "encode with a trailing newline" sh -c "'$DT' tokenizer encode --tokenizer '$T' <'$S/b.txt' >'$S/b.ids'"
check "a trailing newline adds ids" test "$(wc -w <"$S/b.ids")" -gt "$(wc -w <"$S/a.ids")"
check "ids on one line" test "$(wc -l <"$S/a.ids")" -eq 1
expect_ok "encode --add-special" sh -c "'$DT' tokenizer encode --tokenizer '$T' --add-special <'$S/a.txt' >'$S/as.ids'"
check "--add-special prepends the bos id" test "$(cut -d' ' -f1 "$S/as.ids")" = \
    "$("$PY" -c 'import json,sys; print([t["id"] for t in json.load(open(sys.argv[1]))["added_tokens"]][0])' "$T")"
expect_ok "decode" sh -c "'$DT' tokenizer decode --tokenizer '$T' <'$S/b.ids' >'$S/b.out'"
check "decode gives the text back byte for byte" cmp "$S/b.txt" "$S/b.out"
expect_ok "decode --skip-special" sh -c "'$DT' tokenizer decode --tokenizer '$T' --skip-special <'$S/as.ids' >'$S/as.out'"
check "--skip-special drops the bos" cmp "$S/a.txt" "$S/as.out"
mkdir -p "$S/dir" && cp "$FIX/llama2_like.json" "$S/dir/tokenizer.json"
expect_ok "info on a directory" "$DT" tokenizer info "$S/dir"
out_has "info lists the components" "$S/last.out" "byte_fallback" "vocab size" "normalizer +Sequence" "bos +1 <s>"
expect_ok "tokenizer --help" "$DT" tokenizer --help
out_has "help names the subcommands" "$S/last.out" "encode" "decode" "info" "train"
# --vocab-size has a default: every usage line shows it optional (one showed it required)
TRAIN_USAGE='tokenizer train --data FILE\.\.\. --out DIR \[--vocab-size N\]'
out_has "tokenizer --help: train's --vocab-size optional, its default said" "$S/last.out" "$TRAIN_USAGE" \
    "--vocab-size tokens \[8192\]"
out_has "README: train's --vocab-size optional" "$HERE/../README.md" \
    '`train --data FILE\.\.\. --out DIR \[--vocab-size N\]'
# train has no --add-special: its help says which command adds the bos it names
expect_ok "tokenizer train --help" "$DT" tokenizer train --help
out_has "the bos is added by encode --add-special" "$S/last.out" "tokenizer encode --add-special"
out_has "tokenizer train --help: --vocab-size optional, its default said" "$S/last.out" "$TRAIN_USAGE" \
    "--vocab-size N .*\[8192\]"

# ---- --threads: the same ids as one thread on a large text whose long runs of spaces and
#      newlines, and added tokens, straddle the cut points
"$PY" - "$CORPUS" "$S/big.txt" <<'PYEOF'
import random, sys
random.seed(7)
text = open(sys.argv[1], encoding="utf-8").read()
out = []
while sum(map(len, out)) < 1_500_000:
    r = random.random()
    out.append(" " * random.randint(1, 400) if r < 0.1 else "\n" * random.randint(1, 60) if r < 0.2
               else random.choice(["<|begin_of_text|>", "<|eot_id|>", "<s>", "</s>"]) if r < 0.25
               else text[random.randint(0, len(text) - 1):][:random.randint(1, 3000)])
open(sys.argv[2], "w", encoding="utf-8").write("".join(out))
PYEOF
for f in bytelevel_gpt2 llama3_like split_merged_next metaspace_first; do
    "$DT" tokenizer encode --tokenizer "$FIX/$f.json" --add-special <"$S/big.txt" >"$S/t1.ids"
    for t in 2 5; do
        expect_ok "$f: --threads $t" sh -c "'$DT' tokenizer encode --tokenizer '$FIX/$f.json' --add-special --threads $t <'$S/big.txt' >'$S/tn.ids'"
        check "$f: --threads $t gives the ids of one thread" cmp "$S/t1.ids" "$S/tn.ids"
    done
done

# ---- refusals
printf 'ok \xff\xfe bad' >"$S/bad.txt"
expect_fail "invalid UTF-8 is refused" "stdin: invalid UTF-8 at byte 3" sh -c "'$DT' tokenizer encode --tokenizer '$T' <'$S/bad.txt'"
echo "1 2 999999" >"$S/far.ids"
expect_fail "an id past the vocabulary" "ids\[2\] = 999999: not a token" sh -c "'$DT' tokenizer decode --tokenizer '$T' <'$S/far.ids'"
echo "1 two 3" >"$S/word.ids"
expect_fail "a word among the ids" "'two' is not a token id" sh -c "'$DT' tokenizer decode --tokenizer '$T' <'$S/word.ids'"
echo '{"model": ' >"$S/trunc.json"
expect_fail "truncated tokenizer.json" "trunc.json: not valid JSON" "$DT" tokenizer info "$S/trunc.json"
printf 'GGUF\003\000\000\000' >"$S/model.gguf"
expect_fail "a GGUF file is no tokenizer: where its vocabulary is read" \
    "model.gguf: a GGUF model file, not a tokenizer: .*a checkpoint directory.*difftrans export .*model.gguf DIR" \
    "$DT" tokenizer encode --tokenizer "$S/model.gguf"
expect_fail "missing tokenizer" "nothing-here.json: cannot open" "$DT" tokenizer encode --tokenizer "$S/nothing-here.json"
expect_fail "no --tokenizer" "--tokenizer PATH is required" "$DT" tokenizer encode
expect_fail "unknown subcommand" "unknown subcommand 'frob'" "$DT" tokenizer frob
expect_fail "train without data" "--data" "$DT" tokenizer train --vocab-size 300 --out "$S/none"
: >"$S/empty.txt"
expect_fail "train on an empty file" "empty.txt: no text" "$DT" tokenizer train --data "$S/empty.txt" --vocab-size 300 --out "$S/empty-out" --quiet
check "no output directory content after a failed train" test ! -e "$S/empty-out/tokenizer.json"
# an empty file among others adds nothing and is named in a warning (as `tokenize` does); all
# empty is no text at all
expect_ok "train on a corpus and an empty file" "$DT" tokenizer train --data "$CORPUS" "$S/empty.txt" --vocab-size 300 \
    --out "$S/with-empty" --quiet &&
    out_has "the empty file is named in a warning" "$S/last.err" "warning: .*empty\.txt is empty: it adds no text"
expect_status "train on empty files only" 2 "empty\.txt and every other data file are empty \(2 files\)" \
    "$DT" tokenizer train --data "$S/empty.txt" "$S/empty.txt" --vocab-size 300 --out "$S/empty-out" --quiet
expect_fail "train on invalid UTF-8" "bad.txt: invalid UTF-8 at byte 3" "$DT" tokenizer train --data "$S/bad.txt" --vocab-size 300 --out "$S/bad-out" --quiet
expect_fail "a special token that is already a token" "bos 'a': already token 97.*--bos" \
    "$DT" tokenizer train --data "$CORPUS" --vocab-size 300 --bos a --out "$S/bos_a" --quiet
check "no tokenizer written for it" test ! -e "$S/bos_a/tokenizer.json"
expect_fail "vocab size below 256 + specials" "vocab_size 100.*--vocab-size" "$DT" tokenizer train --data "$CORPUS" --vocab-size 100 --out "$S/small" --quiet
expect_status "min-frequency below 1" 1 "--min-frequency 0: must be in 1\.\." \
    "$DT" tokenizer train --data "$CORPUS" --vocab-size 300 --min-frequency 0 --out "$S/minf" --quiet
# one string in three roles is one token serving them all (GPT-2's <|endoftext|>)
expect_ok "bos, eos and pad one token" "$DT" tokenizer train --data "$CORPUS" --vocab-size 300 \
    --bos '<|endoftext|>' --eos '<|endoftext|>' --pad '<|endoftext|>' --out "$S/shared" --quiet

# ---- train with both patterns; exact round trip; the reference agrees
for pat in gpt2 llama3; do
    D=$S/trained-$pat
    expect_ok "train --pattern $pat" "$DT" tokenizer train --data "$CORPUS" --data "$S/b.txt" --vocab-size 700 --pattern $pat --out "$D"
    check "$pat: tokenizer.json and tokenizer_config.json written" test -s "$D/tokenizer.json" -a -s "$D/tokenizer_config.json"
    expect_ok "train --pattern $pat, both files after one --data" "$DT" tokenizer train --data "$CORPUS" "$S/b.txt" \
        --vocab-size 700 --pattern $pat --out "$D-one" --quiet
    check "$pat: --data a b learns what --data a --data b does" cmp "$D/tokenizer.json" "$D-one/tokenizer.json"
    expect_ok "$pat: info" "$DT" tokenizer info "$D"
    out_has "$pat: 700 tokens" "$S/last.out" "vocab size +700" "bos +[0-9]+ <\|begin_of_text\|>" "eos +[0-9]+ <\|end_of_text\|>"
    expect_ok "$pat: encode the corpus" sh -c "'$DT' tokenizer encode --tokenizer '$D' <'$CORPUS' >'$S/$pat.ids'"
    expect_ok "$pat: decode it" sh -c "'$DT' tokenizer decode --tokenizer '$D' <'$S/$pat.ids' >'$S/$pat.out'"
    check "$pat: round trip is exact" cmp "$CORPUS" "$S/$pat.out"
    check "$pat: fewer tokens than bytes" test "$(wc -w <"$S/$pat.ids")" -lt "$(($(wc -c <"$CORPUS") / 2))"
    # a pair of sequences as HF's Llama 3 tokenizer has it: each after its own bos, the second's of type 1
    check "$pat: the pair template keeps the second sequence" "$PY" -c '
import json, sys
pp = json.load(open(sys.argv[1]))["post_processor"]
bos = {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}
assert pp["single"] == [bos, {"Sequence": {"id": "A", "type_id": 0}}], pp["single"]
assert pp["pair"] == [bos, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}], pp["pair"]' "$D/tokenizer.json"
    if [ -d "$TOKREF/tokenizers" ] && command -v node >/dev/null 2>&1; then
        for f in "$CORPUS" "$S/b.txt"; do
            node "$HERE/tokenizer/encode_reference.js" "$TOKREF" "$D/tokenizer.json" "$f" --add-special >"$S/ref.ids" 2>"$S/ref.err"
            "$DT" tokenizer encode --tokenizer "$D" --add-special <"$f" >"$S/our.ids"
            check "$pat: the reference encodes $(basename "$f") identically" cmp "$S/ref.ids" "$S/our.ids"
        done
        node "$HERE/tokenizer/encode_reference.js" "$TOKREF" "$D/tokenizer.json" "$S/a.txt" --add-special \
            --pair "$S/b.txt" >"$S/ref.ids" 2>"$S/ref.err"
        { "$DT" tokenizer encode --tokenizer "$D" --add-special <"$S/a.txt" | tr '\n' ' '
          "$DT" tokenizer encode --tokenizer "$D" --add-special <"$S/b.txt"; } >"$S/our.ids"
        check "$pat: the reference encodes a pair as both sequences, each after its bos" cmp "$S/ref.ids" "$S/our.ids"
    fi
done

# ---- a Split regex that backtracks without bound: PCRE2's match limit stops it, and the message
# says so and names the pattern (status 5, not "out of memory"), one thread and several
mkdir -p "$S/redos"
"$PY" - "$S/trained-gpt2/tokenizer.json" "$S/redos/tokenizer.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
j["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a|a)*b|\\s+|[^\\s]+"}, "behavior": "Isolated",
                      "invert": False}
json.dump(j, open(sys.argv[2], "w"))
PYEOF
printf 'hello %s\n' "$(head -c 40 /dev/zero | tr '\0' a)" >"$S/redos.txt"
for threads in 1 2; do
    expect_status "a regex past PCRE2's match limit, --threads $threads" 5 "the regex '\(a\|a\)\*b.*gave up.*match limit" \
        sh -c '"$0" tokenizer encode --tokenizer "$1" --threads "$2" <"$3"' "$DT" "$S/redos" "$threads" "$S/redos.txt"
done

# ---- the committed golden files are what the reference gives today
if [ -d "$TOKREF/tokenizers" ] && command -v node >/dev/null 2>&1; then
    expect_ok "regenerate the golden files" node "$HERE/tokenizer/make_goldens.js" "$S/golden" "$FIX" "$TOKREF"
    for g in "$HERE"/tokenizer/golden/*.json; do
        check "golden $(basename "$g") matches the reference" cmp "$g" "$S/golden/$(basename "$g")"
    done
else
    echo "NOT CHECKED: the reference library is not installed in $TOKREF (see the tokenizer_reference test)"
fi
finish cli_tokenizer
