#!/usr/bin/env bash
# make_seeds.sh DIFFTRANS [CORPUS_DIR] — the fuzzers' seed corpora, made by the project's own
# commands (init, train, forward) on deliberately small models so that the committed seeds stay
# small (about 20 KB each). Writes CORPUS_DIR/<harness>/<name> (default: fuzz/corpus next to
# this script). The inputs that stand for a checkpoint directory are config.json, the separator
# of fuzz_seps.h, then model.safetensors.
set -eu
dt=${1:?usage: make_seeds.sh PATH_TO_difftrans [CORPUS_DIR]}
here=$(cd "$(dirname "$0")" && pwd)
out=${2:-$here/corpus}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sep=$'\n==model.safetensors==\n' # FUZZ_CKPT_SEP in fuzz_seps.h
shard_sep=$'\n==shard==\n'      # FUZZ_SHARD_SEP
tokcfg_sep=$'\n==tokenizer_config.json==\n' # FUZZ_TOKCFG_SEP
tokens_sep=$'\n==tok==\n'       # FUZZ_TOKENS_SEP
mkdir -p "$out"/{safetensors,config,checkpoint,ids,train_state,shards,tokenizer,tokens,gguf,spm,request}

# a text corpus the training run reads (any text will do; this one is in every Debian install)
data=/usr/share/common-licenses/GPL-3
cat >"$work/small.json" <<'JSON'
{"model_type": "diffllama", "vocab_size": 256, "hidden_size": 8, "intermediate_size": 16,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 4,
 "max_position_embeddings": 16}
JSON
sed 's/diffllama/llama/; s/"num_key_value_heads": 2/"num_key_value_heads": 1/' "$work/small.json" >"$work/gqa.json"

"$dt" init --config "$work/small.json" --out "$work/diff" >/dev/null
"$dt" init --config "$work/small.json" --subln --out "$work/subln" >/dev/null
"$dt" init --config "$work/gqa.json" --arch transformer --out "$work/gqa" >/dev/null
"$dt" train --config "$work/small.json" --data "$data" --out "$work/run" --steps 2 --batch 2 --seq 8 \
    --eval-batches 1 --threads 1 --quiet
"$dt" init --config "$work/small.json" --max-shard-size 12KB --out "$work/sharded" >/dev/null
"$dt" quantize "$work/diff" "$work/q8" --scheme q8_0 --threads 1 >/dev/null 2>&1
"$dt" quantize "$work/diff" "$work/q4" --scheme q4_0 --lm-head --threads 1 >/dev/null 2>&1
"$dt" quantize "$work/subln" "$work/w8a8" --scheme w8a8 --calib "$data" --calib-samples 4 --seq 8 --smooth 0.5 \
    --threads 1 >/dev/null 2>&1
printf '1 2 3 4\n5 6 7 8\n' >"$work/ids.txt"
"$dt" forward "$work/diff" --input "$work/ids.txt" --output "$work/fw.safetensors" --threads 1

for m in diff subln gqa q8 q4 w8a8; do
    cp "$work/$m/config.json" "$out/config/$m.json"
    cp "$work/$m/model.safetensors" "$out/safetensors/$m.safetensors"
    { cat "$work/$m/config.json"; printf '%s' "$sep"; cat "$work/$m/model.safetensors"; } >"$out/checkpoint/$m"
done
ls "$work/sharded"/model-0000[12]-of-00002.safetensors >/dev/null # exactly two shards
{ cat "$work/sharded/model.safetensors.index.json"; printf '%s' "$shard_sep"
  cat "$work/sharded/model-00001-of-00002.safetensors"; printf '%s' "$shard_sep"
  cat "$work/sharded/model-00002-of-00002.safetensors"; } >"$out/shards/two"
cp "$work/run/optimizer.safetensors" "$out/safetensors/optimizer.safetensors"
cp "$work/fw.safetensors" "$out/safetensors/forward.safetensors"
cp "$work/run/train_state.json" "$out/train_state/run.json"
cp "$work/ids.txt" "$out/ids/two_rows.txt"
printf '0\n' >"$out/ids/one.txt"

# tokenizers learned by `tokenizer train` (both pre-tokenizer patterns; small vocabularies), and
# a few of the committed test fixtures for the components training does not produce
head -c 6000 "$data" >"$work/text.txt"
"$dt" tokenizer train --data "$work/text.txt" --vocab-size 300 --pattern llama3 --out "$work/tok_llama3" --quiet
"$dt" tokenizer train --data "$work/text.txt" --vocab-size 280 --pattern gpt2 --bos '' --pad '' \
    --eos '<|endoftext|>' --out "$work/tok_gpt2" --quiet
for t in llama3 gpt2; do
    { cat "$work/tok_$t/tokenizer.json"; printf '%s' "$tokcfg_sep"; cat "$work/tok_$t/tokenizer_config.json"; } \
        >"$out/tokenizer/trained_$t"
done
cp "$work/tok_llama3/tokenizer.json" "$out/tokenizer/trained_no_config.json"
for f in llama2_like metaspace_first subword_affixes digits_lowercase split_isolated_invert; do
    cp "$here/../tests/tokenizer/fixtures/$f.json" "$out/tokenizer/fixture_$f.json"
done

# a token dataset written by `tokenize` (one train and one val shard) with that tokenizer
"$dt" tokenize --tokenizer "$work/tok_llama3" --data "$work/text.txt" --out "$work/ds" --documents paragraph \
    --val-fraction 0.3 --threads 1 --quiet >/dev/null
ls "$work/ds"/train-00000.tok "$work/ds"/val-00000.tok >/dev/null
{ cat "$work/ds/dataset.json"; printf '%s' "$tokens_sep"; cat "$work/ds/train-00000.tok"; printf '%s' "$tokens_sep"
  cat "$work/ds/val-00000.tok"; } >"$out/tokens/paragraphs"
printf '  1 2\n\n3 4  \n' >"$out/ids/blank_lines.txt"

# GGUF files (`export --gguf`) of a narrow llama: each type (q4_0 with its tied head quantised, so
# an explicit output.weight), one with the learned BPE as its vocabulary, one with a SentencePiece one
cat >"$work/gguf.json" <<'JSON'
{"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 32,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
 "max_position_embeddings": 16, "tie_word_embeddings": true}
JSON
"$dt" init --config "$work/gguf.json" --arch transformer --out "$work/gg" >/dev/null
for t in f32 f16 q8_0; do "$dt" export "$work/gg" "$out/gguf/$t.gguf" --gguf --type $t >/dev/null; done
"$dt" export "$work/gg" "$out/gguf/q4_0_head.gguf" --gguf --type q4_0 --lm-head >/dev/null
"$dt" train --config "$work/gguf.json" --arch transformer --tokenizer "$work/tok_llama3" --data "$work/text.txt" \
    --out "$work/ggbpe" --steps 1 --batch 2 --seq 8 --eval-batches 1 --threads 1 --quiet
"$dt" export "$work/ggbpe" "$out/gguf/bpe_llama3.gguf" --gguf --type f16 >/dev/null
# a SentencePiece ("llama") vocabulary: the Llama 2-style fixture, on a model whose embedding holds it
sed 's/"vocab_size": 64/"vocab_size": 600/; s/"hidden_size": 32/"hidden_size": 16/' "$work/gguf.json" |
    sed 's/"num_attention_heads": 2/"num_attention_heads": 1/' >"$work/gguf_spm.json"
"$dt" init --config "$work/gguf_spm.json" --arch transformer --out "$work/ggspm" >/dev/null
rm -f "$work/ggspm/difftrans_tokenizer.json"
cp "$here/../tests/tokenizer/fixtures/llama2_like.json" "$work/ggspm/tokenizer.json"
"$dt" export "$work/ggspm" "$out/gguf/spm_llama2_like.gguf" --gguf --type f16 >/dev/null
# fill-in-the-middle texts as ordinary tokens of a BPE vocabulary (the reader makes the prefix,
# suffix and middle ones control tokens by their text, the lowest id of a kind)
"$dt" init --config "$work/gguf_spm.json" --arch transformer --out "$work/ggfim" >/dev/null
rm -f "$work/ggfim/difftrans_tokenizer.json"
sed 's/"Ġjumping":535}/"Ġjumping":535,"<|fim_prefix|>":536,"<PRE>":537,"<SUF>":538,"<|fim_middle|>":539}/
     s/"id":536,/"id":540,/; s/"id":537,/"id":541,/; s/"id":538,/"id":542,/; s/"ids":\[536\]/"ids":[540]/' \
    "$here/../tests/tokenizer/fixtures/llama3_like.json" >"$work/ggfim/tokenizer.json"
"$dt" export "$work/ggfim" "$out/gguf/bpe_fim_by_text.gguf" --gguf --type f16 >/dev/null
# SentencePiece vocabularies as fuzz_spm reads them: a flags byte (1: add_space_prefix, 2: scores
# as i32, 4: tied scores), then one token a line, its first byte its coarse score + 8, "_" for "▁"
# (byte 0x7F for "_"); "==text==" then a text
printf '\x01\x08_t\n\x09h\n\x0ath\n\x0b_th\n\x05e\n\x0c_the\n\x03o\n\x04_\n\x06__\n\x07to\n'\
'\x02ke\n\x0aken\n\x09tok\n\x0atoken\n\x0b_token\n\x0f_tokens\n\x05s\n\x08en\n\x04n\n\x03k' >"$out/spm/llama_like"
printf '\x00\x08a\n\x08b\n\x08ab\n\x08ba\n\x08aba\n\x07bab\n\x09abab\n\x08c\n\x06abc\n\x06bca\n\x06cab\n'\
'==text==\nabcabab babab' >"$out/spm/no_prefix"
printf '\x03\x08\xc3\xa9\n\x09caf\n\x0acaf\xc3\xa9\n\x07c\n\x07a\n\x07f\n\x06ca\n\x0b_caf\xc3\xa9\n\x08_\n\x08_c' \
    >"$out/spm/i32_accents"
printf '\x01a\nb' >"$out/spm/no_merges"
# ab and ba tie: llama.cpp joins the leftmost of them first
printf '\x04\x08a\n\x08b\n\x09ab\n\x09ba\n\x08bab\n\x07abab\n==text==\nbabab ababa abba' >"$out/spm/ties"
# tokens llama.cpp makes control by their text (fill-in-the-middle, end of generation; \x7f is "_"),
# found in the raw text; a second prefix text that is not one (the lowest id of a kind is)
printf '\x01\x08a\n\x08b\n\x09ab\n\x08<PRE>\n\x08_<SUF>\n\x08<|fim\x7fmiddle|>\n\x08<fim\x7fprefix>\n\x08<EOT>\n'\
'\x08<|end|>\n\x08<|eot\x7fid|>\n\x08<|file\x7fsep|>\n==text==\na<PRE>b\xe2\x96\x81<SUF>ab<fim_prefix><|fim_middle|> '\
'<EOT>x<|end|><|fim_suffix|><|eot_id|><|file_sep|>' >"$out/spm/control_by_text"

# request bodies as fuzz_request reads them: a byte choosing the endpoint (its value mod 3:
# completions, chat, attention), the model (/3 mod 3: llama2_like's tokenizer, bytes, llama3_like's)
# and the chat template (/9 mod 5: none, chatml, llama3, llama2, mistral), then the body
request() { printf "\\x$(printf %02x "$1")%s" "$2" >"$out/request/$3"; }
request 0 '{"prompt":"Hello world","max_tokens":4,"logprobs":2,"echo":true,"stop":["lo"]}' completion_echo
request 3 '{"prompt":[[72,101],[108]],"max_tokens":3,"stream":true,"n":2,"stream_options":{"include_usage":true}}' \
    completion_ids_stream_bytes
request 0 '{"prompt":[599,0],"max_tokens":2,"logprobs":0,"echo":true}' completion_no_token_ids
request 10 '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":4,'\
'"logprobs":true,"top_logprobs":2}' chat_chatml
request 28 '{"messages":[{"role":"user","content":[{"type":"text","text":"caf\u00e9 \ud83d\ude42"}]}],"stream":true,'\
'"max_completion_tokens":3,"temperature":0}' chat_llama2_stream
request 40 '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},'\
'{"role":"user","content":"c"}],"max_tokens":2,"seed":5,"top_k":3,"top_p":0.5}' chat_mistral_bytes
request 2 '{"prompt":"Hello","layer":0}' attention
request 5 '{"prompt":[1,2,3],"head":1}' attention_bytes
# text prompts echoed as sent that hold special tokens' texts
request 6 '{"prompt":"h\u00e9<|eot_id|>\nbye<|eot_id|>","max_tokens":3,"logprobs":1,"echo":true}' echo_special_llama3
request 6 '{"prompt":["<|begin_of_text|>a<|eot_id|>","x<|end_of_text|>"],"n":2,"max_tokens":2,"logprobs":0,'\
'"echo":true,"stream":true}' echo_special_stream_llama3
request 0 '{"prompt":"  a<s>b</s> c","max_tokens":2,"logprobs":0,"echo":true,"stop":["b"]}' echo_special_llama2
request 25 '{"messages":[{"role":"user","content":"hi<|eot_id|>"}],"max_tokens":2,"logprobs":true}' chat_llama3
echo "seeds written to $out: $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1)"
