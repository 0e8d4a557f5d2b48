#!/usr/bin/env bash
# cli_vocab.sh — real vocabularies end to end: a byte-level BPE tokenizer learned from the test
# corpus (tests/make_bpe_tokenizer.py), `difftrans tokenize` into a token dataset, training on it,
# a checkpoint that carries its tokenizer, generation through the tokenizer, evaluation in bits
# per byte, sharded and reloaded checkpoints generating the same tokens, and the refusals.
#
# usage: bash tests/cli_vocab.sh PATH_TO_difftrans SCRATCH_DIR
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -z "$PY" ]; then
    echo "cli_vocab: python3 is needed to make the test tokenizer"
    exit 1
fi
TEXT2=/usr/share/common-licenses/Apache-2.0
[ -s "$TEXT2" ] || TEXT2=$CORPUS

check "make a BPE tokenizer" "$PY" "$HERE/make_bpe_tokenizer.py" "$CORPUS" "$S/tok" 200

# ---------------------------------------------------------------- tokenize
expect_ok "tokenize two files" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" "$TEXT2" --out "$S/ds" \
    --val-fraction 0.05 --quiet &&
    out_has "summary: tokens, bytes per token, dtype" "$S/last.out" "tokens \(.* train in 1 shard, .* validation" \
        "bytes per token" "uint16 ids, vocabulary 457"
check "dataset files" test -f "$S/ds/dataset.json" -a -f "$S/ds/train-00000.tok" -a -f "$S/ds/val-00000.tok" \
    -a -f "$S/ds/tokenizer.json" -a -f "$S/ds/tokenizer_config.json"
check "shard headers: magic, version, width, count = size, vocabulary; val holds whole documents" "$PY" - "$S/ds" <<'PYEOF'
import json, os, struct, sys
d = sys.argv[1]
man = json.load(open(os.path.join(d, "dataset.json")))
assert man["format"] == "difftrans-tokens" and man["dtype"] == "uint16" and man["vocab_size"] == 457, man
for split in ("train", "val"):
    total = 0
    for name in man["splits"][split]["shards"]:
        raw = open(os.path.join(d, name), "rb").read()
        magic, version, width, count, vocab = struct.unpack("<8sIIQI", raw[:28])
        assert magic == b"DTTOKENS" and version == 1 and width == 2 and vocab == 457, (magic, version, width, vocab)
        assert len(raw) == 64 + 2 * count, (len(raw), count)
        ids = struct.unpack("<%dH" % count, raw[64:])
        assert max(ids) < 457
        assert ids[-1] == 456, "a shard ends with a document's EOS"
        total += count
    assert total == man["splits"][split]["tokens"], (split, total)
assert man["splits"]["val"]["documents"] >= 1
PYEOF
# nothing lost or repeated: all of the text, in order, decodes back from one split without EOS
expect_ok "tokenize --val-fraction 0 --no-eos --documents line" "$DT" tokenize --tokenizer "$S/tok/tokenizer.json" \
    --data "$CORPUS" --out "$S/ds_all" --val-fraction 0 --no-eos --documents line --shard-tokens 5000 --quiet
check "several shards of at most --shard-tokens" test -f "$S/ds_all/train-00002.tok"
"$PY" - "$S/ds_all" >"$S/all_ids.txt" <<'PYEOF'
import json, os, struct, sys
d = sys.argv[1]
man = json.load(open(os.path.join(d, "dataset.json")))
ids = []
for name in man["splits"]["train"]["shards"]:
    raw = open(os.path.join(d, name), "rb").read()
    count = struct.unpack("<Q", raw[16:24])[0]
    assert count <= 5000
    ids += struct.unpack("<%dH" % count, raw[64:])
print(" ".join(map(str, ids)))
PYEOF
expect_ok "decode the dataset" "$DT" tokenizer decode --tokenizer "$S/tok" <"$S/all_ids.txt"
"$DT" tokenizer decode --tokenizer "$S/tok" <"$S/all_ids.txt" >"$S/decoded.txt" 2>/dev/null
check "the decoded dataset is the input, byte for byte" cmp "$S/decoded.txt" "$CORPUS"

# streamed in 4 KB blocks, one document cut into pieces: the same ids as encoding the whole file.
# Also where a text's end reads differently from the text that follows: CRLF line ends (GPT-2's
# regex makes "\r\n" before a letter two pieces, "\r" and "\n", but one at a text's end) and lines
# ending in spaces; and a Llama 2-style tokenizer, which prepends ▁ to every text it encodes (its
# documents are read whole, never cut).
{ cat "$CORPUS" "$CORPUS" | sed 's/$/\r/'; sed 's/\.$/.  /' "$CORPUS"; } >"$S/crlf.txt"
stream_case() { # NAME TOKENIZER FILE
    local ds=$S/ds_blocks_$1
    rm -rf "$ds"
    expect_ok "tokenize in 4 KB blocks: $1" "$DT" tokenize --tokenizer "$2" --data "$3" --out "$ds" \
        --documents file --block-size 4096 --no-eos --val-fraction 0 --quiet
    "$PY" - "$ds" >"$S/block_ids.txt" <<'PYEOF'
import json, os, struct, sys
d = sys.argv[1]
ids = []
for name in json.load(open(os.path.join(d, "dataset.json")))["splits"]["train"]["shards"]:
    raw = open(os.path.join(d, name), "rb").read()
    count = struct.unpack("<Q", raw[16:24])[0]
    ids += struct.unpack("<%dH" % count, raw[64:])
print(" ".join(map(str, ids)))
PYEOF
    "$DT" tokenizer encode --tokenizer "$2" <"$3" >"$S/whole_ids.txt" 2>/dev/null
    check "$1: a file tokenized in pieces encodes exactly as the whole file" cmp "$S/block_ids.txt" "$S/whole_ids.txt"
}
expect_status "tokenize --block-size below 64 bytes names it" 1 "block_bytes 63: must be in 64..2\^32 \(--block-size\)" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$S/ds_b63" --block-size 63 --quiet
stream_case gpt2 "$S/tok" "$CORPUS"
"$DT" tokenizer train --pattern gpt2 --data "$S/crlf.txt" --vocab-size 400 --out "$S/tok_crlf" --quiet 2>/dev/null
"$DT" tokenizer train --data "$S/crlf.txt" --vocab-size 400 --out "$S/tok_crlf_llama3" --quiet 2>/dev/null
stream_case gpt2_crlf "$S/tok_crlf" "$S/crlf.txt"
stream_case llama3_crlf "$S/tok_crlf_llama3" "$S/crlf.txt"
stream_case llama2 "$HERE/tokenizer/fixtures/llama2_like.json" "$S/crlf.txt"

# more than 65536 tokens: uint32 ids (the same text, EOS now 70000)
"$PY" - "$S/tok" "$S/tok_big" <<'PYEOF'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
t = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
v = t["model"]["vocab"]
for i in range(len(v), 70000):
    v["<unused%d>" % i] = i
t["added_tokens"][0]["id"] = 70000
os.makedirs(dst, exist_ok=True)
json.dump(t, open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
open(os.path.join(dst, "tokenizer_config.json"), "w").write(open(os.path.join(src, "tokenizer_config.json")).read())
PYEOF
expect_ok "tokenize with a 70001-token vocabulary" "$DT" tokenize --tokenizer "$S/tok_big" --data "$CORPUS" \
    --out "$S/ds_big" --val-fraction 0.05 --quiet --documents line
expect_ok "the same with 457 tokens" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" \
    --out "$S/ds_457" --val-fraction 0.05 --quiet --documents line
check "uint32 shards hold the uint16 dataset's ids (EOS 456 → 70000)" "$PY" - "$S/ds_big" "$S/ds_457" <<'PYEOF'
import json, os, struct, sys
def read(d):
    man = json.load(open(os.path.join(d, "dataset.json")))
    out = []
    for split in ("train", "val"):
        for name in man["splits"][split]["shards"]:
            raw = open(os.path.join(d, name), "rb").read()
            width, count = struct.unpack("<IQ", raw[12:24])
            out += struct.unpack("<%d%s" % (count, "H" if width == 2 else "I"), raw[64:])
    return man, out
big_man, big = read(sys.argv[1])
small_man, small = read(sys.argv[2])
assert big_man["dtype"] == "uint32" and small_man["dtype"] == "uint16"
assert big == [70000 if i == 456 else i for i in small]
PYEOF

# ---------------------------------------------------------------- train, checkpoint, generate, eval
expect_ok "train --tokens" "$DT" train --tokens "$S/ds" --out "$S/m" --preset tiny --steps 30 --batch 4 --seq 32 \
    --lr 3e-3 --eval-interval 15 --threads 2 --quiet
# a dataset has its split already: --val-fraction was ignored without a word
expect_status "train --tokens --val-fraction" 1 "--val-fraction: a --tokens dataset holds out its own val split" \
    "$DT" train --tokens "$S/ds" --out "$S/m_vf" --preset tiny --steps 2 --val-fraction 0.5 --threads 1 --quiet
check "nothing written by it" test ! -e "$S/m_vf"
check "the checkpoint carries its tokenizer, not the byte marker" test -f "$S/m/tokenizer.json" \
    -a -f "$S/m/tokenizer_config.json" -a ! -e "$S/m/difftrans_tokenizer.json"
out_has "vocab_size and eos from the tokenizer" "$S/m/config.json" '"vocab_size":[[:space:]]*457' \
    '"eos_token_id":[[:space:]]*456'
out_has "generation_config.json eos" "$S/m/generation_config.json" '"eos_token_id":[[:space:]]*456'
expect_ok "generate --prompt through the tokenizer" "$DT" generate "$S/m" --prompt "The GNU" -n 12 --temperature 0
out_has "the prompt then text" "$S/last.out" "^The GNU"
expect_ok "generate --print-ids" "$DT" generate "$S/m" --prompt "The GNU" -n 12 --temperature 0 --print-ids
cp "$S/last.out" "$S/ids_a.txt"
check "12 ids (no EOS among them)" test "$(wc -w <"$S/ids_a.txt")" -eq 12
expect_ok "eval --data: loss per token, bits per byte" "$DT" eval "$S/m" --data "$CORPUS" --seq 32 &&
    out_has "eval output" "$S/last.out" "per token" "bits per byte" "bytes per token"
expect_ok "eval --tokens (the held-out split)" "$DT" eval "$S/m" --tokens "$S/ds" --seq 32
cp "$S/last.out" "$S/eval_tokens.out"
# its bytes per token are the held-out split's as the tokenizer decodes it (what compare counts), not the
# whole dataset's
check "eval --tokens: bytes per token of the held-out split" "$PY" - "$S/ds" "$DT" "$S/eval_tokens.out" <<'PYEOF'
import array, re, subprocess, sys
d, dt, out = sys.argv[1:]
ids = array.array("H", open(d + "/val-00000.tok", "rb").read()[64:])
text = subprocess.run([dt, "tokenizer", "decode", "--tokenizer", d, "--skip-special"], check=True,
                      input=" ".join(map(str, ids)).encode(), capture_output=True).stdout
got = float(re.search(r"\(([0-9.]+) bytes per token\)", open(out).read()).group(1))
want = len(text) / len(ids)
assert abs(got - want) <= 0.0005, (got, want)
PYEOF
# a dataset of another tokenizer whose ids all fit the embedding: its ids are other text to this model
expect_ok "another tokenizer" "$DT" tokenizer train --data "$CORPUS" --vocab-size 300 --out "$S/tok_other" --quiet
expect_ok "a dataset of it" "$DT" tokenize --tokenizer "$S/tok_other" --data "$CORPUS" --out "$S/ds_other" --quiet
expect_status "eval --tokens of another tokenizer" 1 \
    "--tokens .*ds_other: its ids are another tokenizer's than .*/m's \(their tokenizer.json files differ\)" \
    "$DT" eval "$S/m" --tokens "$S/ds_other" --seq 32
# a run on a dataset that has moved since: the refusal names the path its state recorded and --tokens,
# as a text run's names --data (it said only that the dataset could not be opened)
cp -a "$S/ds_other" "$S/ds_moving"
expect_ok "a run on a dataset" "$DT" train --tokens "$S/ds_moving" --out "$S/m_moving" --preset tiny --steps 2 \
    --batch 2 --seq 32 --threads 1 --quiet
mv "$S/ds_moving" "$S/ds_moved"
expect_status "train --resume when the dataset has moved" 3 \
    "ds_moving: cannot open: .*m_moving/train_state.json recorded.*--tokens" \
    "$DT" train --resume --out "$S/m_moving" --steps 3 --threads 1 --quiet
expect_ok "train --resume --tokens where it is now" "$DT" train --resume --out "$S/m_moving" --steps 3 \
    --tokens "$S/ds_moved" --threads 1 --quiet
# the same ids with another tokenizer.json beside them are other text to the run: refused as eval refuses
# them (the run went on, its checkpoint keeping a tokenizer the new steps' ids did not come from)
rm -rf "$S/ds_swapped" && cp -a "$S/ds_moved" "$S/ds_swapped" && cp "$S/tok/tokenizer.json" "$S/ds_swapped/"
expect_status "train --resume on the same ids of another tokenizer" 1 \
    "ds_swapped: its ids are another tokenizer's than the run in .*m_moving was trained on.*--tokens" \
    "$DT" train --resume --out "$S/m_moving" --steps 4 --tokens "$S/ds_swapped" --threads 1 --quiet
rm -rf "$S/m_moving" "$S/ds_moved" "$S/ds_swapped"
# a copy of the checkpoint without its tokenizer files (an HF model downloaded without them): its 457
# ids are not bytes, so text is refused, ids work, and a quantised copy does not become byte-level
mkdir -p "$S/m_ids" && cp "$S/m/config.json" "$S/m/generation_config.json" "$S/m/model.safetensors" "$S/m_ids/"
expect_ok "info: no tokenizer" "$DT" info "$S/m_ids" &&
    out_has "info says token ids only" "$S/last.out" "token ids only"
expect_status "generate --prompt without a tokenizer" 1 "m_ids: the model has no tokenizer.*tokenizer\.json" \
    "$DT" generate "$S/m_ids" --prompt "The GNU" -n 4
expect_status "generate --prompt-ids without --print-ids" 1 "give --prompt-ids and --print-ids" \
    "$DT" generate "$S/m_ids" --prompt-ids "1 2 3" -n 4
expect_fail "eval --data without a tokenizer" "m_ids: the model has no tokenizer" "$DT" eval "$S/m_ids" --data "$CORPUS"
expect_ok "eval --tokens without a tokenizer (ids work)" "$DT" eval "$S/m_ids" --tokens "$S/ds" --seq 32
expect_fail "serve without a tokenizer" "m_ids: the model has no tokenizer" "$DT" serve "$S/m_ids" --port 1
expect_ok "quantize it" "$DT" quantize "$S/m_ids" "$S/m_ids_q" --scheme q8_0
check "its quantised copy says no more than it" test ! -e "$S/m_ids_q/difftrans_tokenizer.json" \
    -a ! -e "$S/m_ids_q/tokenizer.json"
expect_fail "the copy refuses text too" "m_ids_q: the model has no tokenizer" \
    "$DT" generate "$S/m_ids_q" --prompt "The GNU" -n 4
ids_prompt=$(printf 'The GNU' | "$DT" tokenizer encode --tokenizer "$S/m" --add-special)
expect_ok "generate --prompt-ids --print-ids on ids alone" "$DT" generate "$S/m_ids" --prompt-ids "$ids_prompt" -n 12 \
    --temperature 0 --print-ids
check "the same ids as the model with its tokenizer" cmp -s "$S/last.out" "$S/ids_a.txt"
cp "$S/m/tokenizer.json" "$S/m/tokenizer_config.json" "$S/m_ids/"
expect_ok "its tokenizer copied back: text again" "$DT" generate "$S/m_ids" --prompt "The GNU" -n 4 --temperature 0
# an embedding padded past the tokenizer (512 rows, 457 tokens): an untrained model samples the padding
# ids too; they add no text, and generation goes on
"$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); c["vocab_size"]=512; json.dump(c, open(sys.argv[2], "w"))' \
    "$S/m/config.json" "$S/padded.json"
expect_ok "init a padded model" "$DT" init --config "$S/padded.json" --out "$S/m_pad" --seed 5
rm -f "$S/m_pad/difftrans_tokenizer.json" && cp "$S/m/tokenizer.json" "$S/m/tokenizer_config.json" "$S/m_pad/"
expect_ok "generate --print-ids on it" "$DT" generate "$S/m_pad" --prompt "The GNU" -n 80 --temperature 3 --seed 3 \
    --print-ids
check "it sampled a padding id (457..511)" \
    awk '{ for (i = 1; i <= NF; i++) if ($i >= 457) found = 1 } END { exit !found }' "$S/last.out"
expect_ok "the same as text: padding ids add nothing" "$DT" generate "$S/m_pad" --prompt "The GNU" -n 80 \
    --temperature 3 --seed 3
# the text generate streams as the tokens come is the decode of the whole sequence: untrained models
# sampling at a high temperature over tokenizers whose text depends on the tokens around (ByteFallback
# bytes that make a character only together, a run valid so far that a later byte makes invalid;
# Metaspace's first ▁; a Strip of the text's first space; ByteLevel's bytes of one character), with
# an embedding padded past them
for fx in llama2_like metaspace_first bytelevel_gpt2; do
    "$PY" - "$HERE/tokenizer/fixtures/$fx.json" "$S/m/config.json" "$S/$fx.config.json" <<'PYEOF'
import json, sys
tok, cfg = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok["added_tokens"]]
cfg["vocab_size"] = max(ids) + 1 + 8
cfg["bos_token_id"] = cfg["eos_token_id"] = cfg["pad_token_id"] = None
json.dump(cfg, open(sys.argv[3], "w"))
PYEOF
    expect_ok "$fx: init a padded model" "$DT" init --config "$S/$fx.config.json" --out "$S/m_$fx" --seed 7
    rm -f "$S/m_$fx/difftrans_tokenizer.json" "$S/m_$fx/generation_config.json"
    cp "$HERE/tokenizer/fixtures/$fx.json" "$S/m_$fx/tokenizer.json"
    GEN=("$DT" generate "$S/m_$fx" --prompt-ids "1" -n 160 --temperature 4 --seed 11 --threads 1)
    expect_ok "$fx: generate --print-ids" "${GEN[@]}" --print-ids && cp "$S/last.out" "$S/$fx.ids"
    expect_ok "$fx: generate, the text streamed" "${GEN[@]}" && cp "$S/last.out" "$S/$fx.text"
    # the prompt's id, then the generated ones that are tokens (below the padding)
    V=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"] - 8)' "$S/$fx.config.json")
    awk -v v="$V" '{ printf "1"; for (i = 1; i <= NF; i++) if ($i < v) printf " %s", $i; print "" }' \
        "$S/$fx.ids" >"$S/$fx.kept"
    "$DT" tokenizer decode --tokenizer "$S/m_$fx" --skip-special <"$S/$fx.kept" >"$S/$fx.want" 2>"$S/last.err" &&
        echo >>"$S/$fx.want"
    check "$fx: the streamed text is the whole decode" cmp "$S/$fx.text" "$S/$fx.want"
done
# a prompt given as ids that ends inside a character, which the generated tokens complete: a
# byte-level BPE model that learned a line of 2-, 3- and 4-byte characters, its prompt the line's ids
# cut after each of its first tokens (several cuts fall inside a character). The streamed text (the
# prompt decoded, then the generation) is the decode of the whole sequence; the prompt's cut
# character was printed as U+FFFD and skipped by its 3 bytes when it came, which took bytes of the
# character and of the text after it
for i in $(seq 1 200); do echo 'héllo wörld 日本語 ÅÄÖ привет 😀'; done >"$S/u8.txt"
expect_ok "tokenizer train (UTF-8 text)" "$DT" tokenizer train --data "$S/u8.txt" --vocab-size 262 --out "$S/u8tok" --quiet
expect_ok "train on it" "$DT" train --data "$S/u8.txt" --tokenizer "$S/u8tok" --arch transformer --out "$S/u8m" \
    --preset tiny --steps 150 --batch 8 --seq 64 --lr 1e-2 --warmup 10 --threads 2 --quiet --eval-interval 0
expect_ok "encode the line" sh -c 'head -n 2 "$2" | "$1" tokenizer encode --tokenizer "$3" --add-special' sh "$DT" \
    "$S/u8.txt" "$S/u8tok" && cp "$S/last.out" "$S/u8.ids"
n_cut=0
for k in $(seq 34 2 60); do
    P=$(tr ' ' '\n' <"$S/u8.ids" | head -n "$k" | tr '\n' ' ')
    GEN=("$DT" generate "$S/u8m" --prompt-ids "$P" -n 6 --temperature 0 --threads 1)
    expect_ok "cut after $k ids: generate --print-ids" "${GEN[@]}" --print-ids || continue
    G=$(cat "$S/last.out")
    expect_ok "cut after $k ids: generate" "${GEN[@]}" && cp "$S/last.out" "$S/u8.text"
    echo "$P $G" | "$DT" tokenizer decode --tokenizer "$S/u8tok" --skip-special >"$S/u8.want" 2>"$S/last.err" &&
        echo >>"$S/u8.want"
    check "cut after $k ids: the streamed text is the whole decode" cmp "$S/u8.text" "$S/u8.want"
    # the prompt alone decodes to a cut character (a U+FFFD at its end)
    echo "$P" | "$DT" tokenizer decode --tokenizer "$S/u8tok" --skip-special 2>/dev/null | grep -q $'\xEF\xBF\xBD$' &&
        n_cut=$((n_cut + 1))
done
check "some cuts fall inside a character (the test's premise): $n_cut" test "$n_cut" -ge 2
expect_ok "train --data --tokenizer" "$DT" train --data "$CORPUS" --tokenizer "$S/tok" --out "$S/m2" --preset tiny \
    --steps 4 --batch 2 --seq 32 --threads 2 --quiet
check "its checkpoint carries the tokenizer" test -f "$S/m2/tokenizer.json"
mkdir -p "$S/bare" && cp "$S/tok/tokenizer.json" "$S/bare/"
expect_ok "train with a bare tokenizer.json" "$DT" train --data "$CORPUS" --tokenizer "$S/bare/tokenizer.json" \
    --out "$S/m3" --preset tiny --steps 2 --batch 2 --seq 32 --threads 2 --quiet
out_has "a tokenizer_config.json is written for AutoTokenizer" "$S/m3/tokenizer_config.json" \
    '"tokenizer_class":[[:space:]]*"PreTrainedTokenizerFast"'

# AutoTokenizer.from_pretrained (transformers.js, a test reference from npm) loads what difftrans
# writes — a trained tokenizer, a model checkpoint, an exported sharded copy — and encodes and
# decodes hard strings exactly as difftrans does
TOKREF=$(dirname "$S")/tokref/node_modules
if [ -d "$TOKREF/@huggingface/transformers" ] && command -v node >/dev/null 2>&1; then
    expect_ok "tokenizer train for AutoTokenizer" "$DT" tokenizer train --data "$CORPUS" --vocab-size 400 \
        --out "$S/tok_trained" --quiet
    expect_ok "AutoTokenizer.from_pretrained: the same ids and text as difftrans" node "$HERE/tokenizer/autotokenizer.mjs" \
        "$TOKREF" "$DT" "$S/tok_trained" "$S/m"
    out_has "both directories checked" "$S/last.out" "tok_trained: AutoTokenizer.from_pretrained loads it" \
        "/m: AutoTokenizer.from_pretrained loads it"
else
    echo "SKIPPED: AutoTokenizer check (transformers.js from npm is not installed in $TOKREF, or no node)"
fi

# generation stops at an EOS id: make the third greedy token an end of sequence (with an id the
# model never produces beside it, as generation_config.json lists may)
third=$(cut -d' ' -f3 "$S/ids_a.txt")
want=$("$PY" -c 'import sys; ids = sys.argv[1].split(); print(" ".join(ids[:ids.index(sys.argv[2]) + 1]))' \
    "$(cat "$S/ids_a.txt")" "$third")
mkdir -p "$S/m_eos" && cp "$S/m"/*.json "$S/m"/model.safetensors "$S/m_eos/"
printf '{"eos_token_id": [0, %s]}\n' "$third" >"$S/m_eos/generation_config.json"
expect_ok "generate stops at eos_token_id" "$DT" generate "$S/m_eos" --prompt "The GNU" -n 12 --temperature 0 --print-ids
check "the ids up to the first EOS, then nothing" test "$(tr -s ' \n' ' ' <"$S/last.out" | sed 's/ $//')" = "$want"

# saved, sharded, reloaded: the same tokens
expect_ok "export --max-shard-size" "$DT" export "$S/m" "$S/m_sh" --max-shard-size 20KB
check "sharded, with the tokenizer" test -f "$S/m_sh/model.safetensors.index.json" -a -f "$S/m_sh/tokenizer.json"
check "export carries tokenizer.json and tokenizer_config.json unchanged (what AutoTokenizer loaded)" \
    sh -c 'cmp "$1/tokenizer.json" "$2/tokenizer.json" && cmp "$1/tokenizer_config.json" "$2/tokenizer_config.json"' sh "$S/m" "$S/m_sh"
expect_ok "generate from the sharded copy" "$DT" generate "$S/m_sh" --prompt "The GNU" -n 12 --temperature 0 --print-ids
check "the sharded copy generates the same tokens" cmp "$S/last.out" "$S/ids_a.txt"

# an embedding larger than the vocabulary (padded) works; a vocabulary larger than it is refused
sed -e 's/"vocab_size":[[:space:]]*457/"vocab_size": 512/' "$S/m/config.json" >"$S/cfg512.json"
expect_ok "init with a padded embedding" "$DT" init --config "$S/cfg512.json" --out "$S/pad"
cp "$S/tok/tokenizer.json" "$S/tok/tokenizer_config.json" "$S/pad/"
rm -f "$S/pad/difftrans_tokenizer.json"
expect_ok "generate with a padded embedding" "$DT" generate "$S/pad" --prompt "The" -n 5 --temperature 0
expect_ok "init a byte-level model" "$DT" init --preset tiny --out "$S/small"
cp "$S/tok/tokenizer.json" "$S/small/"
rm -f "$S/small/difftrans_tokenizer.json"
expect_fail "tokenizer larger than the embedding" "small/tokenizer\.json: a vocabulary of 457 tokens is larger than the model's embedding" \
    "$DT" generate "$S/small" --prompt "The" -n 5

expect_ok "init another byte-level model" "$DT" init --preset tiny --out "$S/bytes"
# the analyses read --data through the model's tokenizer; the byte-level tasks refuse it
expect_ok "analyze outliers on a BPE model" "$DT" analyze outliers "$S/m" --data "$CORPUS" --seq 32 --threads 2 &&
    out_has "windows of tokens" "$S/last.out" "window\(s\) of 32 tokens"
expect_fail "analyze: models reading text differently" "read text differently" \
    "$DT" analyze outliers "$S/m" "$S/bytes" --data "$CORPUS" --seq 32
# the needle, allocation and in-context tasks are text: a BPE model reads it through its tokenizer
expect_ok "needle set" "$DT" needle generate --corpus "$CORPUS" --out "$S/needle" --context 160 --needles 2 \
    --queries 2 --train 4 --test 6
expect_ok "needle eval on a BPE model" "$DT" needle eval "$S/m" --data "$S/needle" --json "$S/needle_eval.json" --quiet &&
    out_has "cells and the overall row" "$S/last.out" "^ +160 +0 +" "^ *overall +6 +12 +"
# every answer's tokens: as many as the tokens of the text that overlap the value, and the
# "predicted" text is those ids decoded
check "needle eval JSON: answers as the tokenizer splits them, predicted text decoded" "$PY" - "$DT" "$S/tok" \
    "$S/needle_eval.json" "$S/needle/test.jsonl" <<'PYEOF'
import json, subprocess, sys
dt, tok, res, test = sys.argv[1:5]
def enc(text):
    out = subprocess.run([dt, "tokenizer", "encode", "--tokenizer", tok], input=text.encode(), capture_output=True, check=True)
    return [int(x) for x in out.stdout.split()]
def dec(ids):
    out = subprocess.run([dt, "tokenizer", "decode", "--tokenizer", tok], input=" ".join(map(str, ids)).encode(),
                         capture_output=True, check=True)
    return out.stdout.decode()
samples = [json.loads(l) for l in open(test)]
r = json.load(open(res))
assert r["queries"] == 12 and len(r["items"]) == 12, r["queries"]
checked = 0
for it in r["items"]:
    s = samples[it["id"]]
    q = s["queries"][it["query"]]
    text = s["text"].encode()
    pe, alen = q["prompt_end_offset"], q["answer_length"]
    # the tokens of the text up to the answer's end that are not tokens of the prompt's prefix
    whole = enc(text[:pe + alen].decode())
    cut = 0
    while cut < len(whole) and len(dec(whole[:cut + 1]).encode()) <= pe and dec(whole[:cut + 1]).encode() == text[:len(dec(whole[:cut + 1]).encode())]:
        cut += 1
    want = whole[cut:]
    assert dec(want).encode().endswith(it["expected"].encode()), (dec(want), it["expected"])
    assert len(it["predicted_ids"]) == len(want), (it, want)
    assert it["predicted"] == dec(it["predicted_ids"]), it
    assert it["correct"] == (it["predicted_ids"] == want), it
    checked += 1
assert checked == 12
PYEOF
expect_ok "analyze quantize --needle on a BPE model (teacher-forced)" "$DT" analyze quantize "$S/m" --data "$CORPUS" \
    --needle "$S/needle" --bits 8 --seq 32 --json "$S/q.json"
check "teacher-forced needle accuracy = greedy needle eval's" "$PY" - "$S/q.json" "$S/needle_eval.json" <<'PYEOF'
import json, sys
q = json.load(open(sys.argv[1]))
e = json.load(open(sys.argv[2]))
row = q["models"][0]["rows"][0]
assert row["bits"] == 0 and row["needle_total"] == 12, row
assert row["needle_correct"] == e["correct"], (row, e["correct"])
PYEOF
expect_ok "analyze allocation on a BPE model" "$DT" analyze allocation "$S/m" --needle "$S/needle" --json "$S/alloc.json"
check "allocation: 12 query rows, shares in range" "$PY" - "$S/alloc.json" <<'PYEOF'
import json, sys
a = json.load(open(sys.argv[1]))["models"][0]
assert a["rows"] == 12 and a["samples"] == 6, a
for ans, noise, span, ctx in zip(a["layer_answer_share"], a["layer_noise_share"], a["layer_span_abs_sum"],
                                 a["layer_context_abs_sum"]):
    assert -1 <= ans <= 1 and 0 <= noise <= 1 and ans + noise <= 1 + 1e-9, a
    assert 0 < span < ctx, a  # the answer span is found and is part of the context
PYEOF
expect_ok "analyze icl on a BPE model" "$DT" analyze icl "$S/m" --shots 4 --permutations 2 --queries 4 --json "$S/icl.json"
check "icl: an accuracy per order, each a multiple of 1/4 in [0, 1]" "$PY" - "$S/icl.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))["models"][0]
assert len(m["accuracy"]) == 2 and all(0 <= a <= 1 and (4 * a) % 1 == 0 for a in m["accuracy"]), m
PYEOF

# ---------------------------------------------------------------- bad datasets
bad_copy() { rm -rf "$S/$1" && cp -r "$S/ds" "$S/$1"; }
bad_copy bad_trunc && head -c 1000 "$S/ds/train-00000.tok" >"$S/bad_trunc/train-00000.tok"
expect_fail "truncated shard" "bad_trunc/train-00000\.tok: header count .* disagrees with the file size" \
    "$DT" train --tokens "$S/bad_trunc" --out "$S/x" --preset tiny --steps 1 --batch 2 --seq 16 --quiet
bad_copy bad_short && head -c 40 "$S/ds/train-00000.tok" >"$S/bad_short/train-00000.tok"
expect_fail "shard shorter than its header" "bad_short/train-00000\.tok: truncated" \
    "$DT" train --tokens "$S/bad_short" --out "$S/x" --preset tiny --steps 1 --batch 2 --seq 16 --quiet
bad_copy bad_magic && printf 'XXTOKENS' | dd of="$S/bad_magic/val-00000.tok" conv=notrunc status=none
expect_fail "bad magic" "bad_magic/val-00000\.tok: bad magic" \
    "$DT" eval "$S/m" --tokens "$S/bad_magic"
bad_copy bad_id && printf '\xd0\x07' | dd of="$S/bad_id/train-00000.tok" bs=1 seek=100 conv=notrunc status=none
expect_fail "an id past the model's vocabulary" "bad_id/train-00000\.tok: token id 2000 at index 18 is outside the model's vocabulary of 457" \
    "$DT" train --tokens "$S/bad_id" --out "$S/x" --preset tiny --steps 1 --batch 2 --seq 16 --quiet
expect_fail "a dataset of a larger vocabulary than the model" "val-00000\.tok: ids of a 457-token vocabulary, larger than the model's 256" \
    "$DT" eval "$S/bytes" --tokens "$S/ds"
check "nothing written by the refused runs" test ! -e "$S/x"
expect_fail "tokenize: missing input" "nowhere\.txt" "$DT" tokenize --tokenizer "$S/tok" --data "$S/nowhere.txt" --out "$S/y"
: >"$S/empty.txt"
expect_fail "tokenize: empty input" "empty\.txt: data file is empty" "$DT" tokenize --tokenizer "$S/tok" --data "$S/empty.txt" --out "$S/y"
# an empty file among others adds no documents and is named in a warning (as `tokenizer train`
# does); all of them empty, or every --val file, is refused
expect_ok "tokenize: an empty file among others" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" "$S/empty.txt" \
    --out "$S/y_empty" --documents line --quiet &&
    out_has "the empty file is named in a warning" "$S/last.err" "warning: .*empty\.txt is empty: it adds no documents"
expect_ok "the same without it" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$S/y_alone" --documents line \
    --quiet
check "the empty file changed nothing" cmp "$S/y_empty/train-00000.tok" "$S/y_alone/train-00000.tok"
rm -rf "$S/y_empty" "$S/y_alone"
expect_status "tokenize: empty inputs only" 2 "empty\.txt and every other data file are empty \(2 files\)" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$S/empty.txt" "$S/empty.txt" --out "$S/y"
expect_status "tokenize: an empty --val file alone" 2 "empty\.txt: validation file is empty" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --val "$S/empty.txt" --out "$S/y"
printf 'ok \xff\xfe bad\n\nmore\n' >"$S/bad_utf8.txt"
expect_fail "tokenize: invalid UTF-8 named with its file" "bad_utf8\.txt" "$DT" tokenize --tokenizer "$S/tok" --data "$S/bad_utf8.txt" --out "$S/y" --val-fraction 0 --quiet
# the offset is the file's, not the offset in the document or the piece of it that was encoded
# (tok_other, learned by `tokenizer train`, is one whose long documents are cut into pieces)
{ printf 'first paragraph\n\n'; cat "$CORPUS" "$CORPUS"; printf 'bad \xff here\n'; } >"$S/bad_late.txt"
at=$(( $(wc -c <"$S/bad_late.txt") - 7 ))
expect_status "tokenize: invalid UTF-8 in a later document at its offset in the file" 2 \
    "bad_late\.txt: invalid UTF-8 at byte $at\$" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$S/bad_late.txt" --out "$S/y" --val-fraction 0 --quiet
expect_status "tokenize: invalid UTF-8 in a later piece of a document at its offset in the file" 2 \
    "bad_late\.txt: invalid UTF-8 at byte $at\$" \
    "$DT" tokenize --tokenizer "$S/tok_other" --data "$S/bad_late.txt" --out "$S/y" --val-fraction 0 \
    --documents file --block-size 4096 --quiet
# the advice is the flags', and true: a fraction of 1/N holds one of N documents out (it said "lower")
expect_status "tokenize: too few documents to hold out" 1 \
    "1 documents are too few to hold out 0.01 .*val_fraction of 1/1 or more.*\(--val-fraction, --documents\)" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$S/y" --documents file --quiet
expect_fail "tokenize: too few documents in several files" \
    "and the other inputs: 2 documents .*1/2 or more.*--val-fraction" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" "$CORPUS" --out "$S/y" --documents file --val-fraction 0.4 --quiet
expect_ok "tokenize: a fraction of 1/N holds one out" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" "$CORPUS" \
    --out "$S/y_half" --documents file --val-fraction 0.5 --quiet &&
    out_has "one of two documents held out" "$S/last.out" "from 2 documents"
check "its validation split holds one" grep -qE '"documents":[[:space:]]*1\b' "$S/y_half/dataset.json"
rm -rf "$S/y_half"
check "no dataset written by the refusals" test ! -e "$S/y/dataset.json"

# ---------------------------------------------------------------- an --out that holds a dataset
# is refused without --force; with it the dataset is replaced whole (none of the earlier run's
# shards stay), and a run that fails leaves the old one as it was
R=$S/ds_again
rm -rf "$R"
expect_ok "a dataset in many shards" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$R" \
    --shard-tokens 1000 --quiet
check "it has a second shard" test -f "$R/train-00001.tok"
cp -a "$R" "$S/ds_again.before"
expect_status "tokenize into a dataset without --force is refused" 1 \
    "--out .*ds_again: already holds a token dataset .*dataset\.json.*give --force to replace it" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$R" --quiet
check "the refused run left the dataset as it was" diff -r "$S/ds_again.before" "$R"
expect_fail "tokenize --force of text that fails" "bad_utf8\.txt" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" "$S/bad_utf8.txt" --out "$R" --force --quiet
check "the failed run left the old dataset as it was" diff -r "$S/ds_again.before" "$R"
expect_ok "tokenize --force replaces it" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$R" --force --quiet
check "only the new dataset's files are there" \
    test "$(ls "$R" | tr '\n' ' ')" = "dataset.json tokenizer.json tokenizer_config.json train-00000.tok val-00000.tok "
expect_ok "train on the replaced dataset" "$DT" train --tokens "$R" --out "$S/m_again" --preset tiny --steps 1 \
    --batch 2 --seq 16 --quiet
check "no temporary directory left beside it" test -z "$(ls -d "$S"/ds_again.tmp.* "$S"/ds_again.old.* 2>/dev/null)"
# (a name with ".tmp." in it is the user's too: only "<dataset file>.tmp.<pid>" is a temporary)
echo "my notes" >"$R/notes.tmp.txt"
expect_status "a dataset directory holding a file of the user's is not replaced" 1 \
    "ds_again: holds notes\.tmp\.txt, which is no file of a token dataset" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$R" --force --quiet
check "the user's file is still there" test -f "$R/notes.tmp.txt"
rm -rf "$R" "$S/ds_again.before" "$S/m_again"

finish cli_vocab
