#!/usr/bin/env bash
# cli_needle.sh — `difftrans needle generate` and `difftrans needle eval`, end to end.
#
# usage: bash tests/cli_needle.sh PATH_TO_difftrans SCRATCH_DIR
#
#   generate  a tiny set from the GPL-3 text: the three files, byte-identical on a rerun, different
#             with another seed; every recorded offset checked against the text (python3)
#   eval      a fresh `init --preset tiny` model: the accuracy table and the --json cells
#   --model   sets sized for a byte-level and a BPE model; needle.json records the model (path, positions,
#             tokenizer fingerprint), and eval / analyze allocation on another tokenizer's model warn
#   refusals  bad arguments, an empty or missing corpus, samples longer than the model's context:
#             exit status 1 and a message naming the argument or the file
# Prints a summary and exits 1 when any check failed.
set -u

TMO=120
. "$(dirname "$0")/cli_lib.sh" "$@"

# ---------------------------------------------------------------- help

expect_ok "needle --help" "$DT" needle --help && out_has "needle --help describes the format" "$S/last.out" \
    "The magic number of KEY is VALUE" "Question: What is the magic number of KEY1" "Answer: VALUE1" "train.txt" \
    "test.jsonl" "needle.json"
expect_ok "needle generate --help" "$DT" needle generate --help &&
    out_has "generate --help lists the options" "$S/last.out" "--corpus" "--context" "--needles" "--queries" \
        "--depths" "--train" "--test" "--seed" "--model"
expect_ok "needle eval --help" "$DT" needle eval --help &&
    out_has "eval --help lists the options" "$S/last.out" "--data" "--json" "--threads"
expect_ok "difftrans --help lists needle" "$DT" --help && out_has "needle in the command list" "$S/last.out" "needle"

# ---------------------------------------------------------------- generate

GEN=(needle generate --corpus "$CORPUS" --context 96,128 --needles 2 --queries 2 --depths 0,0.5,1 --train 9
    --test 12 --seed 5)
expect_ok "generate a tiny set" "$DT" "${GEN[@]}" --out "$S/a" &&
    out_has "generate reports what it wrote" "$S/last.out" "train.txt \(9 samples\)" "test.jsonl \(12 samples\)" \
        "cells: 2 context lengths x 3 depths, 2 needles, 2 queries per sample, seed 5"
expect_ok "generate a set of one of each" "$DT" needle generate --corpus "$CORPUS" --context 96 --needles 1 --queries 1 \
    --depths 0.5 --train 1 --test 1 --out "$S/one" &&
    out_has "its counts in the singular" "$S/last.out" "train.txt \(1 sample\), .*test.jsonl \(1 sample\)" \
        "cells: 1 context length x 1 depth, 1 needle, 1 query per sample, seed 42"
for f in train.txt test.jsonl needle.json; do
    check "$f written and not empty" test -s "$S/a/$f"
done
expect_ok "generate again" "$DT" "${GEN[@]}" --out "$S/b"
for f in train.txt test.jsonl needle.json; do
    check "same seed: identical $f" cmp "$S/a/$f" "$S/b/$f"
done
expect_ok "generate with another seed" "$DT" needle generate --corpus "$CORPUS" --context 96,128 --needles 2 \
    --queries 2 --depths 0,0.5,1 --train 9 --test 12 --seed 6 --out "$S/c"
if cmp -s "$S/a/test.jsonl" "$S/c/test.jsonl"; then fail "another seed: test.jsonl differs"; else pass; fi
check "train.txt ends with \"\\n\\n\"" test "$(tail -c 2 "$S/a/train.txt" | od -An -tx1 | tr -d ' \n')" = 0a0a

if [ -n "$PY" ]; then
    cat >"$S/check.py" <<'EOF'
# check.py DIR — every offset in test.jsonl against the text, the cells, needle.json.
import json, sys
d = sys.argv[1]
meta = json.load(open(d + "/needle.json"))
assert meta["version"] == 1 and meta["seed"] == "5", meta
assert meta["contexts"] == [96, 128] and meta["depths"] == [0, 0.5, 1], meta
lines = [l for l in open(d + "/test.jsonl", "rb").read().split(b"\n") if l.strip()]
assert len(lines) == 12, len(lines)
for i, raw in enumerate(lines):
    s = json.loads(raw)
    t = s["text"].encode("utf-8")
    assert s["id"] == i and len(t) == s["text_length"], (i, len(t), s["text_length"])
    assert s["context_length"] == [96, 128][(i // 3) % 2] and s["depth"] == [0, 0.5, 1][i % 3], s
    keys = [n["key"] for n in s["needles"]]
    assert len(set(keys)) == len(keys) == 2, keys
    for n in s["needles"]:
        sent = ("The magic number of %s is %s." % (n["key"], n["value"])).encode()
        assert t[n["offset"]:n["offset"] + n["length"]] == sent, (i, n)
        assert n["offset"] + n["length"] <= s["context_length"], (i, n)
        assert t[n["value_offset"]:n["value_offset"] + n["value_length"]] == n["value"].encode(), (i, n)
    at = s["context_length"]
    for q in s["queries"]:
        ask = ("\nQuestion: What is the magic number of %s?\nAnswer: " % q["key"]).encode()
        assert t[at:at + len(ask)] == ask and q["question_offset"] == at + 1, (i, q)
        assert q["prompt_end_offset"] == at + len(ask), (i, q)
        assert t[q["prompt_end_offset"]:q["prompt_end_offset"] + q["answer_length"]] == q["value"].encode(), (i, q)
        assert s["needles"][q["needle"]]["key"] == q["key"], (i, q)
        at = q["prompt_end_offset"] + q["answer_length"]
    assert at == len(t), (i, at, len(t))
    first = s["needles"][s["queries"][0]["needle"]]
    if s["depth"] == 0:
        assert first["offset"] == 0, (i, first)
    if s["depth"] == 1:
        assert first["offset"] + first["length"] >= s["context_length"] - 1, (i, first)
train = open(d + "/train.txt", "rb").read()
assert train.count(b"\nQuestion: ") == 9 * 2, train.count(b"\nQuestion: ")
EOF
    check "test.jsonl offsets, cells and needle.json (python3)" "$PY" "$S/check.py" "$S/a"
else
    echo "note: python3 not found; the JSON content checks are skipped"
fi

# ---------------------------------------------------------------- eval

expect_ok "init a tiny model" "$DT" init --preset tiny --arch diff --out "$S/model"
if expect_ok "needle eval on the tiny model" "$DT" needle eval "$S/model" --data "$S/a" --json "$S/eval.json" --threads 1; then
    out_has "eval prints the accuracy table" "$S/last.out" "context +depth +samples +queries +correct +accuracy" \
        "^ +96 +0 +2 +4 " "^ +128 +1 +2 +4 " "^ +overall +12 +24 +[0-9]+ +[01]\.[0-9]{3}"
    out_has "eval shows progress on stderr" "$S/last.err" "12/12 samples"
    check "eval.json written" test -s "$S/eval.json"
    if [ -n "$PY" ]; then
        check "eval.json cells and items (python3)" "$PY" -c "
import json
r = json.load(open('$S/eval.json'))
assert r['samples'] == 12 and r['queries'] == 24 and 0 <= r['correct'] <= 24, r
cells = r['cells']
assert [(c['context_length'], c['depth']) for c in cells] == [(96, 0), (96, 0.5), (96, 1), (128, 0), (128, 0.5), (128, 1)], cells
for c in cells:
    assert c['n'] == 4 and c['samples'] == 2 and abs(c['accuracy'] - c['correct'] / 4) < 1e-12, c
assert sum(c['correct'] for c in cells) == r['correct']
assert len(r['items']) == 24 and all(len(i['predicted_ids']) == 5 for i in r['items'])
"
    fi
fi
expect_ok "eval takes the test.jsonl path too" "$DT" needle eval "$S/model" --data "$S/a/test.jsonl" --quiet --threads 1
if [ -s "$S/last.err" ]; then fail "--quiet prints nothing on stderr" "$(head -c 300 "$S/last.err")"; else pass; fi

# ---------------------------------------------------------------- sized for a model (--model)

# the default contexts (512 and 1024 bytes) are too long for a tiny model, byte-level or BPE
expect_ok "generate with the default contexts" "$DT" needle generate --corpus "$CORPUS" --out "$S/dflt" \
    --train 0 --test 5
expect_fail "eval refuses the defaults on the tiny model, saying how to fit them" \
    "longer than the model's max_position_embeddings 256; .difftrans needle generate --model $S/model. makes a set" \
    "$DT" needle eval "$S/model" --data "$S/dflt" --quiet --threads 1
expect_fail "so does analyze allocation" "max_position_embeddings 256; .difftrans needle generate --model $S/model" \
    "$DT" analyze allocation "$S/model" --needle "$S/dflt"
if expect_ok "generate sized for the tiny byte-level model" "$DT" needle generate --corpus "$CORPUS" --out "$S/fit" \
    --model "$S/model" --train 4 --test 10; then
    out_has "generate --model says what it chose" "$S/last.out" \
        "^[1-5] needles and 2 queries per sample, the most whose samples fit .*256 positions" \
        "contexts for .*max_position_embeddings 256, read as bytes.*test samples of at most 25[0-6] bytes"
    check "and no note of a training window for a model that records none (init)" \
        bash -c '! grep -q "^note:" "$1"' _ "$S/last.out"
fi
expect_ok "eval takes the set sized for it" "$DT" needle eval "$S/model" --data "$S/fit" --quiet --threads 1
expect_ok "learn a BPE tokenizer" "$DT" tokenizer train --data "$CORPUS" --vocab-size 400 --out "$S/tok"
expect_ok "a tiny BPE model" "$DT" train --data "$CORPUS" --tokenizer "$S/tok" --out "$S/bpe" --preset tiny \
    --steps 1 --batch 1 --seq 32 --threads 1
if expect_ok "generate sized for the BPE model" "$DT" needle generate --corpus "$CORPUS" --out "$S/fitbpe" \
    --model "$S/bpe" --needles 2 --queries 1 --train 4 --test 10; then
    out_has "contexts in the BPE model's tokens" "$S/last.out" \
        "read as its tokenizer's tokens\): [0-9]+ bytes \(test samples of at most 1[0-2][0-9] tokens\)," \
        ", [0-9]+ bytes \(test samples of at most 2[45][0-9] tokens\)" \
        "^note: $S/bpe was trained on windows of 32 tokens \(its train_state.json seq\); test samples of up to 2[45][0-9] tokens reach positions past them"
fi
cp -r "$S/bpe" "$S/bpe_noseq"
sed -i 's/"seq":/"window":/' "$S/bpe_noseq/train_state.json"
expect_fail "generate --model on a run whose train_state.json records no seq" \
    "bpe_noseq/train_state.json: seq: not a positive integer" \
    "$DT" needle generate --corpus "$CORPUS" --out "$S/bad" --model "$S/bpe_noseq" --needles 2 --queries 1 --test 2
expect_ok "eval takes the BPE set" "$DT" needle eval "$S/bpe" --data "$S/fitbpe" --quiet --threads 1
check "and says nothing of its sizing" test ! -s "$S/last.err"
# needle.json records the model a set was sized for; another tokenizer's model is told so (the set is text it reads,
# as --data is: scored, not refused), a copy of the model with its tokenizer.json laid out otherwise is not
if [ -n "$PY" ]; then
    check "needle.json records the model: its path, positions and tokenizer" "$PY" -c '
import json, re, sys
bpe, byte, none = (json.load(open(d + "/needle.json"))["model"] for d in sys.argv[1:4])
assert bpe["path"].endswith("/bpe") and bpe["max_position_embeddings"] == 256, bpe
assert re.fullmatch("[0-9a-f]{16}", bpe["tokenizer_fingerprint"]), bpe
assert byte["path"].endswith("/model") and byte["max_position_embeddings"] == 256, byte
assert byte["tokenizer_fingerprint"] is None and none is None, (byte, none)' "$S/fitbpe" "$S/fit" "$S/dflt"
    cp -r "$S/bpe" "$S/bpe_copy"
    "$PY" -c '
import json, sys
j = json.load(open(sys.argv[1])); json.dump(j, open(sys.argv[1], "w"), indent=2, sort_keys=True)' \
        "$S/bpe_copy/tokenizer.json"
    expect_ok "eval of the BPE set on the model with its tokenizer laid out otherwise" "$DT" needle eval \
        "$S/bpe_copy" --data "$S/fitbpe" --quiet --threads 1
    check "says nothing of its sizing" test ! -s "$S/last.err"
fi
expect_ok "eval of the byte-level set on the BPE model" "$DT" needle eval "$S/bpe" --data "$S/fit" --quiet --threads 1
out_has "warns that it was sized for another tokenizer" "$S/last.err" \
    "needle eval: warning: $S/fit was sized for $S/model \(bytes, 256 positions\), not for $S/bpe " \
    "not for $S/bpe \(tokenizer [0-9a-f]{16}, 256 positions\): its contexts are the longest that fit that model" \
    "not this one; .difftrans needle generate --model $S/bpe. makes a set sized for it"
expect_ok "so does analyze allocation" "$DT" analyze allocation "$S/model" "$S/bpe" --needle "$S/fit" --max-samples 1
out_has "for the model of the other tokenizer" "$S/last.err" \
    "analyze allocation: warning: $S/fit was sized for .* not for $S/bpe "
check "only for it" test "$(grep -c warning "$S/last.err")" = 1
printf '{"model": {"path": 3}}\n' >"$S/fit/needle.json"
expect_status "a needle.json whose model is not a model record" 2 "$S/fit/needle.json: model: not a path" \
    "$DT" needle eval "$S/model" --data "$S/fit" --quiet --threads 1
expect_fail "a --context too long for the model" \
    "--context 1024: a test sample of that context is [0-9]+ tokens as .*bpe reads it, more than its max_pos" \
    "$DT" needle generate --corpus "$CORPUS" --out "$S/bad" --model "$S/bpe" --context 1024
expect_fail "--needles that no context of the model holds" \
    "model holds 256 positions: a test sample of 6 needles and 2 queries .* give fewer --needles or --queries" \
    "$DT" needle generate --corpus "$CORPUS" --out "$S/bad" --model "$S/model" --needles 6
expect_fail "--model that is not a model" "$S/nomodel" "$DT" needle generate --corpus "$CORPUS" --out "$S/bad" \
    --model "$S/nomodel"

# ---------------------------------------------------------------- refusals

G=(needle generate --corpus "$CORPUS" --out "$S/bad" --train 1 --test 1)
expect_fail "queries > needles" "queries = 3: must be in 1..needles .2.*--needles, --queries" "$DT" "${G[@]}" --needles 2 --queries 3
expect_fail "depth above 1" "--depths 1.5: must be in \[0, 1\]" "$DT" "${G[@]}" --depths 0,1.5
expect_fail "depth below 0" "--depths -0.25: must be in \[0, 1\]" "$DT" "${G[@]}" --depths -0.25
expect_fail "depth not a number" "--depths '0.5x': not a number" "$DT" "${G[@]}" --depths 0.5x
expect_fail "empty list item" "--context '512,,1024': empty item" "$DT" "${G[@]}" --context 512,,1024
expect_fail "context too small" "context length 100 is too small to hold 6 needles" "$DT" "${G[@]}" --context 100
expect_fail "context too small for one needle, in the singular" \
    "context length 30 is too small to hold 1 needle of up to 39 bytes \(needs >= 39\)" \
    "$DT" "${G[@]}" --context 30 --needles 1 --queries 1
expect_fail "needles not a number" "--needles 'abc': not an integer" "$DT" "${G[@]}" --needles abc
expect_fail "negative train count" "--train -1: must be in" "$DT" "${G[@]}" --train -1
expect_fail "missing --out" "--corpus FILE and --out DIR are required" "$DT" needle generate --corpus "$CORPUS"
expect_fail "missing corpus file" "$S/nothing.txt: cannot open corpus" "$DT" needle generate --corpus "$S/nothing.txt" --out "$S/bad"
: >"$S/empty.txt"
expect_fail "empty corpus" "$S/empty.txt: corpus is empty" "$DT" needle generate --corpus "$S/empty.txt" --out "$S/bad"
expect_fail "unknown option" "bad option or missing value near '--bogus'" "$DT" "${G[@]}" --bogus
expect_fail "unknown subcommand" "unknown subcommand 'frobnicate'" "$DT" needle frobnicate
expect_fail "no subcommand" "expected a subcommand" "$DT" needle

expect_ok "generate samples too long for the tiny model" "$DT" needle generate --corpus "$CORPUS" --out "$S/long" \
    --context 240 --needles 2 --queries 1 --depths 0.5 --train 0 --test 2
expect_fail "eval refuses samples longer than max_position_embeddings" \
    "$S/long/test.jsonl: sample 0 \(line 1\) is [0-9]+ bytes, longer than the model's max_position_embeddings 256" \
    "$DT" needle eval "$S/model" --data "$S/long"
expect_fail "eval without --data" "--data DIR is required" "$DT" needle eval "$S/model"
expect_fail "eval without a model" "expected one MODEL_DIR" "$DT" needle eval --data "$S/a"
expect_fail "eval on a missing test set" "$S/nowhere: cannot open test set" "$DT" needle eval "$S/model" --data "$S/nowhere"
expect_fail "eval on a missing model" "$S/nomodel" "$DT" needle eval "$S/nomodel" --data "$S/a"
head -c 300 "$S/a/test.jsonl" >"$S/cut.jsonl"
expect_fail "eval on a truncated test.jsonl" "$S/cut.jsonl:1: not valid JSON" "$DT" needle eval "$S/model" --data "$S/cut.jsonl"
# a NUL for the first newline: the parser stopped at it and the second sample was silently gone
tr '\n' '\000' <"$S/a/test.jsonl" | head -c "$(($(head -n 1 "$S/a/test.jsonl" | wc -c) + 40))" >"$S/nul.jsonl"
tail -n +3 "$S/a/test.jsonl" >>"$S/nul.jsonl"
expect_fail "eval on a test.jsonl with a NUL byte" "$S/nul.jsonl:1: a NUL byte" "$DT" needle eval "$S/model" --data "$S/nul.jsonl"
expect_fail "eval --threads 0" "--threads 0: must be in 1..1024" "$DT" needle eval "$S/model" --data "$S/a" --threads 0

# ---------------------------------------------------------------- summary

finish cli_needle
