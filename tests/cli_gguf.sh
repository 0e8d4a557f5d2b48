#!/usr/bin/env bash
# cli_gguf.sh — `export --gguf` and GGUF files wherever a model is taken: every type written; info,
# generate, eval and forward on each; the F32 file (and a quantised model's own blocks) giving the
# checkpoint's logits byte for byte; a BPE vocabulary carried, and a SentencePiece one; GGUF back to
# a checkpoint; and the refusals: DIFF, a quantised model asked for another type, sizes ggml's
# blocks cannot hold, a tokenizer llama.cpp cannot reproduce, bad flags, a truncated file and a file
# that is not GGUF — each a message and its status (README "Exit status": 1 a bad argument, 2 a bad
# file, 5 unsupported), no file left behind.
#
# usage: bash tests/cli_gguf.sh PATH_TO_difftrans SCRATCH_DIR
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2

expect_ok "difftrans --help" "$DT" --help
out_has "its command list says export writes GGUF" "$S/last.out" "^  export .*GGUF .*--gguf"
M=$S/m
check "init a small Transformer" "$DT" init --preset small --arch transformer --out "$M"
echo "72 101 108 108 111 32 119 111 114 108 100 10 84 104 101 32" >"$S/ids.txt"
head -c 3000 "$CORPUS" >"$S/short.txt"
expect_ok "forward on the checkpoint" "$DT" forward "$M" --input "$S/ids.txt" --output "$S/ref.safetensors"
expect_ok "generate on the checkpoint" "$DT" generate "$M" --prompt "The " -n 16 --temperature 0
cp "$S/last.out" "$S/ref_gen.txt"

for t in f32 f16 bf16 q8_0 q4_0; do
    G=$S/m-$t.gguf
    expect_ok "export --gguf --type $t" "$DT" export "$M" "$G" --gguf --type "$t"
    out_has "export $t says what it wrote" "$S/last.out" "wrote .*m-$t.gguf \\(GGUF, $t"
    check "$t: the GGUF magic" sh -c "head -c 4 '$G' | grep -q GGUF"
    expect_ok "info $t" "$DT" info "$G"
    out_has "info $t" "$S/last.out" "model_type: llama" "layers 4" "tokenizer:  byte-level"
    expect_ok "generate $t" "$DT" generate "$G" --prompt "The " -n 8 --temperature 0
    expect_ok "eval $t" "$DT" eval "$G" --data "$S/short.txt" --seq 32 --batch 2
    out_has "eval $t prints a loss" "$S/last.out" "loss [0-9]"
    expect_ok "forward $t" "$DT" forward "$G" --input "$S/ids.txt" --output "$S/f_$t.safetensors"
done
expect_ok "info q4_0" "$DT" info "$S/m-q4_0.gguf"
out_has "q4_0 read as quantised" "$S/last.out" "quantised: q4_0"
check "F32 GGUF: the checkpoint's logits, byte for byte" cmp "$S/ref.safetensors" "$S/f_f32.safetensors"
expect_ok "generate on the F32 GGUF" "$DT" generate "$S/m-f32.gguf" --prompt "The " -n 16 --temperature 0
check "F32 GGUF: the checkpoint's greedy text" cmp "$S/ref_gen.txt" "$S/last.out"

# a quantised checkpoint keeps its blocks: the same logits through the GGUF file
expect_ok "quantize q8_0 with the head" "$DT" quantize "$M" "$S/q8" --scheme q8_0 --lm-head
expect_ok "forward on the q8_0 checkpoint" "$DT" forward "$S/q8" --input "$S/ids.txt" --output "$S/q8.safetensors"
expect_ok "export the q8_0 checkpoint" "$DT" export "$S/q8" "$S/q8.gguf" --gguf
out_has "its own scheme and head" "$S/last.out" "GGUF, q8_0, LM head quantised"
expect_ok "forward on its GGUF" "$DT" forward "$S/q8.gguf" --input "$S/ids.txt" --output "$S/q8g.safetensors"
check "q8_0 GGUF: the quantised checkpoint's logits, byte for byte" cmp "$S/q8.safetensors" "$S/q8g.safetensors"
expect_status "a quantised model asked for another type" 1 "quantised as q8_0.*--type q8_0" \
    "$DT" export "$S/q8" "$S/q8-as-q4.gguf" --gguf --type q4_0
check "no file left" test ! -e "$S/q8-as-q4.gguf"

# GGUF back into a checkpoint directory, and GGUF from GGUF
expect_ok "export a GGUF file as a checkpoint" "$DT" export "$S/m-f32.gguf" "$S/back"
expect_ok "forward on it" "$DT" forward "$S/back" --input "$S/ids.txt" --output "$S/back.safetensors"
check "the round trip keeps the logits" cmp "$S/ref.safetensors" "$S/back.safetensors"
expect_ok "GGUF to GGUF" "$DT" export "$S/m-f32.gguf" "$S/again.gguf" --gguf
expect_ok "forward on that" "$DT" forward "$S/again.gguf" --input "$S/ids.txt" --output "$S/again.safetensors"
check "still the logits" cmp "$S/ref.safetensors" "$S/again.safetensors"

# a BPE vocabulary (Llama 3's pre-tokenizer, BOS added) goes into the file and comes back
expect_ok "tokenizer train" "$DT" tokenizer train --data "$CORPUS" --vocab-size 400 --out "$S/tok" --quiet
cat >"$S/cfg.json" <<'EOF'
{"model_type": "llama", "vocab_size": 400, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128}
EOF
expect_ok "train with it" "$DT" train --data "$CORPUS" --tokenizer "$S/tok" --config "$S/cfg.json" --arch transformer \
    --out "$S/bpe" --steps 3 --batch 2 --seq 32 --quiet --eval-interval 0
expect_ok "export the BPE model" "$DT" export "$S/bpe" "$S/bpe.gguf" --gguf --type q8_0
expect_ok "info on it" "$DT" info "$S/bpe.gguf"
out_has "its tokenizer is the file's" "$S/last.out" "tokenizer:  .*bpe.gguf \\(400 tokens" "special tokens: bos 397"
expect_ok "the BPE file back to a checkpoint" "$DT" export "$S/bpe.gguf" "$S/bpe-back"
check "its post-processor is the trained tokenizer's (single and pair templates)" "$PY" -c '
import json, sys
a, b = (json.load(open(p))["post_processor"] for p in sys.argv[1:])
assert a == b, (a, b)' "$S/tok/tokenizer.json" "$S/bpe-back/tokenizer.json"
expect_ok "the same model quantised as a checkpoint" "$DT" quantize "$S/bpe" "$S/bpe-q8" --scheme q8_0
expect_ok "generate on the q8_0 BPE checkpoint" "$DT" generate "$S/bpe-q8" --prompt "The license" -n 12 --temperature 0
cp "$S/last.out" "$S/bpe_gen.txt"
expect_ok "generate on its GGUF" "$DT" generate "$S/bpe.gguf" --prompt "The license" -n 12 --temperature 0
check "the same text" cmp "$S/bpe_gen.txt" "$S/last.out"
expect_ok "a dataset of the trained tokenizer" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$S/bpe-ds"
expect_ok "eval --tokens on the GGUF (its rebuilt tokenizer.json is the trained one)" "$DT" eval "$S/bpe.gguf" \
    --tokens "$S/bpe-ds"
# OUT is replaced when it is a GGUF file; any other file only with --force (a checkpoint's weights were lost)
cp "$S/bpe/config.json" "$S/keep.json"
expect_status "export --gguf over a file that is not GGUF" 1 "keep.json: exists and is not a GGUF file.*--force" \
    "$DT" export "$S/bpe" "$S/keep.json" --gguf
check "the file is untouched" cmp "$S/keep.json" "$S/bpe/config.json"
expect_ok "export --gguf over an earlier GGUF file" "$DT" export "$S/bpe" "$S/bpe.gguf" --gguf --type q8_0
expect_ok "export --gguf --force over the other file" "$DT" export "$S/bpe" "$S/keep.json" --gguf --force
check "now a GGUF file" sh -c "head -c 4 '$S/keep.json' | grep -q GGUF"
expect_ok "analyze outliers on the checkpoint and its GGUF" "$DT" analyze outliers "$S/bpe" "$S/bpe.gguf" \
    --data "$S/short.txt" --seq 32 --batches 1
out_has "both models measured" "$S/last.out" "bpe.gguf +Transformer"

# an embedding larger than the tokenizer and a config naming no EOS: an unused row stands in for it
# in the file (llama.cpp cannot be told "no EOS"), and the file read back does not take it for one;
# it stops where llama.cpp does, at the control token "<|end_of_text|>" (found by its text)
sed 's/"vocab_size": 400/"vocab_size": 448/' "$S/cfg.json" >"$S/cfg448.json"
expect_ok "init with an embedding of 448 rows" "$DT" init --config "$S/cfg448.json" --out "$S/pad"
rm -f "$S/pad/difftrans_tokenizer.json" && cp "$S/tok/tokenizer.json" "$S/tok/tokenizer_config.json" "$S/pad/"
expect_ok "export it" "$DT" export "$S/pad" "$S/pad.gguf" --gguf
expect_ok "back to a checkpoint" "$DT" export "$S/pad.gguf" "$S/pad-back"
expect_ok "which loads" "$DT" info "$S/pad-back"
out_has "the stand-in is no EOS" "$S/last.out" "special tokens: bos 397 .*eos 398$"

# a SentencePiece-style tokenizer.json (Llama 2's form) is written as a "llama" vocabulary and read
# back the same; Metaspace's form, which llama.cpp does not reproduce, is refused (status 5)
sed 's/"vocab_size": 400/"vocab_size": 600/' "$S/cfg.json" >"$S/cfg600.json"
expect_ok "init a model for llama2_like.json" "$DT" init --config "$S/cfg600.json" --out "$S/spm"
FIXTURE=$(dirname "$0")/tokenizer/fixtures/llama2_like.json
rm -f "$S/spm/difftrans_tokenizer.json" && cp "$FIXTURE" "$S/spm/tokenizer.json"
expect_ok "export it" "$DT" export "$S/spm" "$S/spm.gguf" --gguf
expect_ok "info on it" "$DT" info "$S/spm.gguf"
out_has "its tokenizer is the file's" "$S/last.out" "tokenizer:  .*spm.gguf \\(592 tokens; the embedding has 600"
expect_ok "back to a checkpoint" "$DT" export "$S/spm.gguf" "$S/spm-back"
printf '  Hello world, caf\xc3\xa9 \xf0\x9f\x99\x82\n<s>x</s>' >"$S/spm.txt"
for tok in spm spm-back; do
    expect_ok "encode with $tok" sh -c '"$1" tokenizer encode --tokenizer "$2" --add-special <"$3"' sh "$DT" "$S/$tok" \
        "$S/spm.txt" && cp "$S/last.out" "$S/ids-$tok.txt"
done
check "the file read back encodes as the model did" cmp "$S/ids-spm.txt" "$S/ids-spm-back.txt"
sed 's/"pre_tokenizer":null/"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first"}/' \
    "$FIXTURE" >"$S/spm/tokenizer.json"
expect_status "a Metaspace pre-tokenizer" 5 "a Metaspace pre-tokenizer.*SentencePiece" \
    "$DT" export "$S/spm" "$S/metaspace.gguf" --gguf
check "no file left" test ! -e "$S/metaspace.gguf"

# refusals
expect_ok "init a DIFF model" "$DT" init --preset small --out "$S/diff"
expect_status "DIFF has no GGUF form" 5 "diffllama.*llama.cpp has no differential-attention architecture" \
    "$DT" export "$S/diff" "$S/diff.gguf" --gguf
check "no DIFF file left" test ! -e "$S/diff.gguf"
# DIFF V2 and a DIFF ablation have no Hugging Face form either: the refusal pointed to --hf, which refuses them
expect_ok "init a DIFF V2 model" "$DT" init --preset tiny --arch v2 --out "$S/v2"
expect_ok "init a DIFF model with ALiBi" "$DT" init --preset tiny --ablation alibi --out "$S/diff-alibi"
for case in "v2|model_type difftrans_v2" "diff-alibi|difftrans.position = alibi"; do
    IFS='|' read -r name why <<<"$case"
    expect_status "$name has no GGUF form" 5 "nor has Hugging Face \\(transformers has no equivalent of $why" \
        "$DT" export "$S/$name" "$S/$name.gguf" --gguf
    check "$name: no --hf advised" bash -c "! grep -q -- --hf '$S/last.err'"
    check "no $name file left" test ! -e "$S/$name.gguf"
done
expect_ok "init a tiny Transformer (SwiGLU 176)" "$DT" init --preset tiny --arch transformer --out "$S/tiny"
expect_status "rows that are not whole blocks" 5 "176 inputs, not a multiple of 32" \
    "$DT" export "$S/tiny" "$S/tiny.gguf" --gguf --type q4_0
expect_ok "the tiny one as F16" "$DT" export "$S/tiny" "$S/tiny.gguf" --gguf --type f16
expect_status "--type unknown" 1 "--type 'q5_k'" "$DT" export "$M" "$S/x.gguf" --gguf --type q5_k
expect_status "--lm-head without a quantised type" 1 "--lm-head" "$DT" export "$M" "$S/x.gguf" --gguf --lm-head
expect_status "--hf with --gguf" 1 "--hf is for checkpoint directories" "$DT" export "$M" "$S/x.gguf" --gguf --hf
expect_status "--type without --gguf" 1 "--type goes with --gguf" "$DT" export "$M" "$S/x" --type f16
check "nothing written by the refusals" test ! -e "$S/x.gguf" -a ! -e "$S/x"
head -c 5000 "$S/m-f32.gguf" >"$S/cut.gguf"
expect_status "a truncated GGUF file" 2 "cut.gguf: .*(truncated|past the end)" "$DT" generate "$S/cut.gguf" --prompt "a" -n 2
printf '{"model_type": "llama"}' >"$S/fake.gguf"
expect_status "a .gguf that is not one" 2 "fake.gguf: not a GGUF file" "$DT" info "$S/fake.gguf"
expect_ok "export --help" "$DT" export --help
out_has "the help tells of --gguf" "$S/last.out" "--gguf" "--type T" "q8_0" "llama.cpp has no" "--lm-head"
# both vocabularies README documents (it told of the byte-level BPE "gpt2" alone)
out_has "the help tells of both GGUF vocabularies" "$S/last.out" 'BPE tokenizer.json as "gpt2"' \
    'SentencePiece-style BPE \(Llama 2' 'as "llama"'

finish cli_gguf
