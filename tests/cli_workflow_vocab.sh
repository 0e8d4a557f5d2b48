#!/usr/bin/env bash
# cli_workflow_vocab.sh — the whole user workflow on a BPE model and on a byte-level model, checking
# after every step that the model still has the vocabulary and special ids it was trained with:
# tokenizer train → tokenize → train → quantize (q8_0, q4_0, w8a8 calibrated) → eval (a quantised
# model scores exactly as many tokens as the float one, its loss close) → generate → export --hf
# (f32, bf16, sharded) → load again. A quantised BPE model once became a byte-level model here.
#
# usage: bash tests/cli_workflow_vocab.sh PATH_TO_difftrans SCRATCH_DIR
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
TOKREF=$(dirname "$S")/tokref/node_modules
if [ -z "$PY" ]; then
    echo "cli_workflow_vocab: python3 is needed to read the checkpoints' JSON"
    exit 1
fi
TRAIN=(--preset tiny --steps 20 --batch 4 --seq 32 --lr 3e-3 --threads 2 --quiet)

# The vocabulary and special ids of checkpoint $2 are those of $1: the same tokenizer files byte
# for byte (or both byte-level), the same bos / eos / pad ids in config.json and generation_config.json.
same_vocab() {
    "$PY" - "$1" "$2" <<'PYEOF'
import json, os, sys
a, b = sys.argv[1], sys.argv[2]
def vocab(d):
    files = {}
    for name in ("tokenizer.json", "tokenizer_config.json", "difftrans_tokenizer.json"):
        p = os.path.join(d, name)
        files[name] = open(p, "rb").read() if os.path.exists(p) else None
    byte_level = files["difftrans_tokenizer.json"] is not None or files["tokenizer.json"] is None
    return ("bytes",) if byte_level else (files["tokenizer.json"], files["tokenizer_config.json"])
def special(d):
    ids = {}
    for name in ("config.json", "generation_config.json"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            j = json.load(open(p))
            for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
                if k in j and j[k] is not None:
                    ids[k] = j[k]
    return ids
assert vocab(a) == vocab(b), "%s and %s have different vocabularies" % (a, b)
assert special(a) == special(b), (special(a), special(b))
assert json.load(open(os.path.join(a, "config.json")))["vocab_size"] == \
    json.load(open(os.path.join(b, "config.json")))["vocab_size"]
PYEOF
}

# "N tokens scored" and the loss of an eval output
scored() { sed -n 's/.*| \([0-9]*\) tokens scored.*/\1/p' "$1"; }
loss() { sed -n 's/.*: loss \([0-9.]*\) per token.*/\1/p' "$1"; }

# the steps after training, for model $1 (float) with calibration text $2; $3 names the case
after_training() {
    local M=$1 CAL=$2 name=$3 s
    expect_ok "$name: eval the float model" "$DT" eval "$M" --data "$CORPUS" --seq 32
    local n_float l_float
    n_float=$(scored "$S/last.out")
    l_float=$(loss "$S/last.out")
    check "$name: eval printed a token count" test -n "$n_float"
    for s in q8_0 q4_0 w8a8; do
        local Q=$M.$s extra=()
        [ $s = w8a8 ] && extra=(--calib "$CAL" --calib-samples 20 --seq 32)
        expect_ok "$name: quantize $s" "$DT" quantize "$M" "$Q" --scheme $s "${extra[@]}"
        check "$name $s: vocabulary and special ids kept" same_vocab "$M" "$Q"
        expect_ok "$name $s: eval" "$DT" eval "$Q" --data "$CORPUS" --seq 32
        check "$name $s: scores as many tokens as the float model ($n_float)" test "$(scored "$S/last.out")" = "$n_float"
        check "$name $s: loss within 10% of the float model's ($l_float)" "$PY" -c \
            'import sys; q, f = float(sys.argv[1]), float(sys.argv[2]); assert abs(q - f) < 0.1 * f, (q, f)' \
            "$(loss "$S/last.out")" "$l_float"
        expect_ok "$name $s: generate" "$DT" generate "$Q" --prompt "The " -n 8 --temperature 0 --print-ids
        check "$name $s: generated ids" test "$(wc -w <"$S/last.out")" -ge 1
        expect_ok "$name $s: info" "$DT" info "$Q"
    done
    expect_ok "$name: generate" "$DT" generate "$M" --prompt "The " -n 8 --temperature 0
    for e in f32 bf16 sharded; do
        local E=$M.hf_$e opts=(--hf)
        [ $e = bf16 ] && opts+=(--dtype bf16)
        [ $e = sharded ] && opts+=(--max-shard-size 40000)
        expect_ok "$name: export --hf $e" "$DT" export "$M" "$E" "${opts[@]}"
        check "$name export $e: vocabulary and special ids kept" same_vocab "$M" "$E"
        check "$name export $e: a tokenizer.json for AutoTokenizer" test -f "$E/tokenizer.json" -a -f "$E/tokenizer_config.json"
        expect_ok "$name export $e: load again and eval" "$DT" eval "$E" --data "$CORPUS" --seq 32
        check "$name export $e: scores as many tokens" test "$(scored "$S/last.out")" = "$n_float"
    done
    check "$name: the sharded export has shards" test -f "$M.hf_sharded/model.safetensors.index.json"
    check "$name: shards assigned as save_pretrained assigns the state dict" "$PY" - "$M.hf_sharded" 40000 <<'PYEOF'
import json, os, re, struct, sys
d, limit = sys.argv[1], int(sys.argv[2])
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
sizes = {}
for shard in sorted(set(index["weight_map"].values())):
    raw = open(os.path.join(d, shard), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    for k, v in json.loads(raw[8:8 + n]).items():
        if k != "__metadata__":
            sizes[k] = v["data_offsets"][1] - v["data_offsets"][0]
# torch's state_dict of (Diff)LlamaForCausalLM: a module's own parameters, then its children
# in registration order: attention's lambdas before q/k/v/o, then mlp, then the two norms
part = ["self_attn.lambda_q1", "self_attn.lambda_k1", "self_attn.lambda_q2", "self_attn.lambda_k2",
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        "input_layernorm.weight", "post_attention_layernorm.weight"]
def key(name):
    m = re.match(r"model\.layers\.(\d+)\.(.*)", name)
    if name == "model.embed_tokens.weight": return (0, 0, 0)
    if m: return (1, int(m.group(1)), part.index(m.group(2)))
    return (2, ["model.norm.weight", "lm_head.weight"].index(name), 0)
order = sorted(sizes, key=key)
# huggingface_hub's split_state_dict_into_shards_factory
shards, current, size = [], {}, 0
for k in order:
    if sizes[k] > limit:
        shards.append([k])
        continue
    if size + sizes[k] > limit and current:
        shards.append(list(current)); current, size = {}, 0
    current[k] = 1; size += sizes[k]
if current: shards.append(list(current))
want = {k: "model-%05d-of-%05d.safetensors" % (i + 1, len(shards)) for i, s in enumerate(shards) for k in s}
assert want == index["weight_map"], (want, index["weight_map"])
assert index["metadata"]["total_size"] == sum(sizes.values())
PYEOF
    expect_ok "$name: export of the export" "$DT" export "$M.hf_sharded" "$M.again"
    check "$name: vocabulary kept through two exports" same_vocab "$M" "$M.again"
}

# ---------------------------------------------------------------- a BPE model
expect_ok "tokenizer train" "$DT" tokenizer train --data "$CORPUS" --vocab-size 400 --out "$S/tok" --quiet
expect_ok "tokenize" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$S/ds" --val-fraction 0.05 --quiet
expect_ok "train --tokens" "$DT" train --tokens "$S/ds" --out "$S/bpe" "${TRAIN[@]}"
check "bpe: the model has the trained tokenizer" cmp "$S/tok/tokenizer.json" "$S/bpe/tokenizer.json"
check "bpe: and its special ids" "$PY" -c '
import json, sys
c = json.load(open(sys.argv[1] + "/config.json")); g = json.load(open(sys.argv[1] + "/generation_config.json"))
assert c["vocab_size"] == 400 and c["bos_token_id"] == 397 and g["eos_token_id"] == 398, (c, g)' "$S/bpe"
after_training "$S/bpe" "$CORPUS" bpe
expect_ok "bpe: eval reads text as tokens, not bytes" "$DT" eval "$S/bpe.q8_0" --data "$CORPUS" --seq 32
out_has "bpe: more than one byte per token" "$S/last.out" "\(([2-9]|1\.[1-9])[0-9.]* bytes per token\)"

# an empty prompt starts from BOS; a tokenizer without one is refused, naming the flag once (it read "--prompt:
# prompt: empty", and the server's 400 "prompt: prompt: empty")
expect_ok "bpe: an empty prompt on a quantised model" "$DT" generate "$S/bpe.q4_0" --prompt "" -n 4 --print-ids
expect_ok "a tokenizer without BOS" "$DT" tokenizer train --data "$CORPUS" --vocab-size 300 --bos '' --out "$S/tok_nobos" \
    --quiet
expect_ok "train on it" "$DT" train --data "$CORPUS" --tokenizer "$S/tok_nobos" --out "$S/nobos" "${TRAIN[@]}"
expect_ok "quantize it" "$DT" quantize "$S/nobos" "$S/nobos.q4_0" --scheme q4_0
expect_status "no BOS: an empty prompt refused" 1 \
    "^difftrans generate: --prompt: text: empty, and the tokenizer has no BOS token to start from\$" \
    "$DT" generate "$S/nobos.q4_0" --prompt "" -n 4

# ---------------------------------------------------------------- a byte-level model
expect_ok "train --data (bytes)" "$DT" train --data "$CORPUS" --out "$S/bytes" "${TRAIN[@]}"
check "bytes: the byte-level marker, no tokenizer.json" test -f "$S/bytes/difftrans_tokenizer.json" -a ! -e "$S/bytes/tokenizer.json"
after_training "$S/bytes" "$CORPUS" bytes
check "bytes: a quantised copy stays byte-level" test -f "$S/bytes.q4_0/difftrans_tokenizer.json" -a ! -e "$S/bytes.q4_0/tokenizer.json"
expect_ok "bytes: eval a quantised copy" "$DT" eval "$S/bytes.q4_0" --data "$CORPUS" --seq 32
out_has "bytes: one byte per token" "$S/last.out" "\(1\.000 bytes per token\)"

# AutoTokenizer (transformers.js from npm, a test reference) reads the exported byte-level model's ids
# as its bytes, and agrees with difftrans on the BPE model and both exports
if [ -d "$TOKREF/@huggingface/transformers" ] && command -v node >/dev/null 2>&1; then
    expect_ok "AutoTokenizer on the exports: the same ids and text as difftrans" node "$HERE/tokenizer/autotokenizer.mjs" \
        "$TOKREF" "$DT" "$S/bpe.hf_f32" "$S/bytes.hf_f32"
    cat >"$S/bytes_ids.mjs" <<'EOF'
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const [modules, dir] = process.argv.slice(2);
const { AutoTokenizer, env } = await import(
  pathToFileURL(path.join(modules, '@huggingface/transformers/dist/transformers.node.mjs')).href);
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(path.resolve(dir)) + path.sep;
const tok = await AutoTokenizer.from_pretrained(path.basename(dir));
for (const text of ['Hello, world!\n', 'café 日本 🤗', ' \t two  spaces', '\u0000\u007f~']) {
  const ids = Array.from(tok.encode(text, { add_special_tokens: true }));
  const bytes = Array.from(Buffer.from(text, 'utf8'));
  if (ids.join(' ') !== bytes.join(' ')) {
    console.error(`${JSON.stringify(text)}: ids ${ids.join(' ')} are not the bytes ${bytes.join(' ')}`);
    process.exit(1);
  }
  if (tok.decode(ids) !== text) { console.error(`${JSON.stringify(text)}: decodes to ${tok.decode(ids)}`); process.exit(1); }
}
console.log(`${dir}: AutoTokenizer reads ids as bytes`);
EOF
    expect_ok "AutoTokenizer reads the byte-level export's ids as bytes" node "$S/bytes_ids.mjs" "$TOKREF" "$S/bytes.hf_bf16"
else
    echo "SKIPPED: AutoTokenizer checks (transformers.js from npm is not installed in $TOKREF, or no node)"
fi

finish cli_workflow_vocab
