#!/usr/bin/env bash
# cli_exit_codes.sh — the exit status tells failures apart (README.md "Exit status", issue 17):
# a bad option or argument 1, a file that is not what it should be 2 (a truncated
# model.safetensors, a config.json that lies about the tensors), the system refusing 3 (a missing
# checkpoint or data file, an output directory that cannot be made or written), out of memory 4 (a model
# too large for an address-space cap), not supported 5 (a config.json asking for gelu), training
# diverged 6; and the message still names the file or argument. A data file that is not UTF-8,
# which the tokenizer's encoder refuses as its argument, is the file's fault (2).
#
# usage: bash tests/cli_exit_codes.sh PATH_TO_difftrans SCRATCH_DIR
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"

expect_ok "init" "$DT" init --out "$S/m" --preset tiny --seed 5
for i in $(seq 1 300); do echo "Line $i of a small corpus. It has sentences, and it has lines."; done >"$S/text.txt"

# ---------------------------------------------------------------- 1: usage, arguments
expect_status "no command" 1 'usage: difftrans COMMAND' "$DT"
expect_status "unknown command" 1 "unknown command 'frobnicate'" "$DT" frobnicate
expect_status "unknown option" 1 "bad option.*--bogus" "$DT" init --bogus --out "$S/o"
expect_status "a number that is not one" 1 "--steps 'many'" "$DT" train --data "$S/text.txt" --out "$S/r0" --steps many
expect_status "an unknown preset" 1 "no-such-preset" "$DT" init --out "$S/p" --preset no-such-preset
printf '1 2 300\n' >"$S/ids.txt"
expect_status "a token id outside the vocabulary" 1 "300" \
    "$DT" forward "$S/m" --input "$S/ids.txt" --output "$S/f.safetensors"

# ---------------------------------------------------------------- 2: files that are not what they should be
cp -r "$S/m" "$S/cut"
head -c 200 "$S/m/model.safetensors" >"$S/cut/model.safetensors"
expect_status "a truncated model.safetensors" 2 "cut/model.safetensors" "$DT" info "$S/cut"
expect_status "eval of it" 2 "cut/model.safetensors" "$DT" eval "$S/cut" --data "$S/text.txt"
cp -r "$S/m" "$S/liar"
sed -E 's/"intermediate_size":[[:space:]]*[0-9]+/"intermediate_size": 4096/' "$S/m/config.json" >"$S/liar/config.json"
check "the lying config.json was written" grep -q '"intermediate_size": 4096' "$S/liar/config.json"
expect_status "a config.json that lies about the tensors" 2 "config.json implies" "$DT" info "$S/liar"
cp -r "$S/m" "$S/badjson"
printf '{"model_type": "diffllama", ' >"$S/badjson/config.json"
expect_status "a config.json that is not JSON" 2 "badjson/config.json" "$DT" info "$S/badjson"
# a data file that is not UTF-8, read through a tokenizer: the file's fault, not the arguments'
expect_ok "tokenizer train" "$DT" tokenizer train --data "$S/text.txt" --vocab-size 300 --out "$S/tok" --quiet
printf 'abc\377\376 def\n' >"$S/not_utf8.txt"
expect_status "tokenize of a file that is not UTF-8" 2 "not_utf8.txt.*invalid UTF-8" \
    "$DT" tokenize --tokenizer "$S/tok" --data "$S/not_utf8.txt" --out "$S/ds"
check "the failed tokenize left no --out directory behind" test ! -e "$S/ds"
expect_status "train on it through the tokenizer" 2 "not_utf8.txt.*invalid UTF-8" \
    "$DT" train --data "$S/not_utf8.txt" --tokenizer "$S/tok" --out "$S/r_utf8" --preset tiny --steps 2

# ---------------------------------------------------------------- 3: the system refuses
expect_status "a missing checkpoint" 3 "no_such_model" "$DT" info "$S/no_such_model"
expect_status "a missing data file" 3 "no_such.txt" "$DT" eval "$S/m" --data "$S/no_such.txt"
rm -f "$S/m_noconf" && cp -r "$S/m" "$S/m_noconf" && rm "$S/m_noconf/config.json"
expect_status "a checkpoint without its config.json" 3 "config.json" "$DT" info "$S/m_noconf"
mkdir -p "$S/data_dir"
expect_status "a directory given as the data file" 3 "data_dir" "$DT" eval "$S/m" --data "$S/data_dir"

# an output's missing directories are made (mkdir -p); a file in their way is status 3 naming the output and it
N=$S/new/a
expect_ok "init --out with missing parents" "$DT" init --out "$N/b/m" --preset tiny
expect_ok "train --out with missing parents" "$DT" train --data "$S/text.txt" --out "$N/c/run" --preset tiny \
    --steps 2 --batch 1 --seq 16 --eval-interval 1 --eval-batches 1 --quiet
check "it wrote its checkpoint there" test -s "$N/c/run/model.safetensors"
expect_ok "quantize into missing parents" "$DT" quantize "$N/b/m" "$N/d/q8" --scheme q8_0
expect_ok "export --hf into missing parents" "$DT" export "$N/b/m" "$N/e/hf" --hf
expect_ok "tokenize --out with missing parents" "$DT" tokenize --tokenizer "$S/tok" --data "$S/text.txt" \
    --documents line --out "$N/f/ds" --quiet
expect_ok "analyze --json with missing parents" "$DT" analyze outliers "$N/b/m" --data "$S/text.txt" --seq 16 \
    --batches 1 --json "$N/g/h/o.json"
check "every output is in place" test -s "$N/d/q8/model.safetensors" -a -s "$N/e/hf/config.json" \
    -a -s "$N/f/ds/dataset.json" -a -s "$N/g/h/o.json"
expect_status "train --out under a file" 3 "text.txt/x/run: .*text.txt exists and is not a directory" \
    "$DT" train --data "$S/text.txt" --out "$S/text.txt/x/run" --preset tiny --steps 2
expect_status "quantize into a path under a file" 3 "text.txt/q: .*text.txt exists and is not a directory" \
    "$DT" quantize "$N/b/m" "$S/text.txt/q" --scheme q8_0
expect_status "analyze --json under a file" 3 "text.txt/o.json: .*text.txt exists and is not a directory" \
    "$DT" analyze outliers "$N/b/m" --data "$S/text.txt" --seq 16 --batches 1 --json "$S/text.txt/o.json"
check "no temporary was left anywhere" test -z "$(find "$S" -name '*.tmp.*')"

# ---------------------------------------------------------------- 4: out of memory
# 2 × 10^6 × 256 float parameters (2 GB) under a 1.5 GB address-space cap
cat >"$S/big.json" <<'EOF'
{"model_type": "llama", "vocab_size": 1000000, "hidden_size": 256, "intermediate_size": 512,
 "num_hidden_layers": 1, "num_attention_heads": 4, "tie_word_embeddings": false}
EOF
if [ -n "${DT_ASAN:-}" ]; then
    echo "skipping the address-space cap under AddressSanitizer (it reserves terabytes of shadow memory)"
else
    expect_status "a model too large for the address space" 4 "out of memory" \
        env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 bash -c 'ulimit -v 1500000 && exec "$0" "$@"' \
        "$DT" init --config "$S/big.json" --out "$S/big"
    check "nothing was written for it" test ! -e "$S/big"
fi

# ---------------------------------------------------------------- 5: valid, not supported here
cp -r "$S/m" "$S/gelu"
sed -E 's/"hidden_act":[[:space:]]*"silu"/"hidden_act": "gelu"/' "$S/m/config.json" >"$S/gelu/config.json"
check "the gelu config.json was written" grep -q '"hidden_act": "gelu"' "$S/gelu/config.json"
expect_status "hidden_act gelu" 5 "gelu" "$DT" info "$S/gelu"

# ---------------------------------------------------------------- 6: training diverged
expect_status "training at lr 10" 6 "diverged" \
    "$DT" train --data "$S/text.txt" --out "$S/diverge" --preset tiny --lr 10 --warmup 1 --steps 200 \
    --batch 2 --seq 32 --eval-interval 0 --threads 1

# ---------------------------------------------------------------- 9: stopped by a signal
# SIGTERM to a command writing its outputs (tokenize, which builds its dataset in a temporary
# directory whose finished shards keep their temporary names until the last one is done): status
# 9, and no temporary file or directory left behind.
for i in $(seq 1 400); do cat "$S/text.txt"; done >"$S/big.txt"
"$DT" tokenize --tokenizer "$S/tok" --data "$S/big.txt" --out "$S/ds_sig" --shard-tokens 2000 --threads 1 --quiet \
    2>"$S/sig.err" &
pid=$!
for _ in $(seq 1 2000); do
    ls "$S"/ds_sig.tmp.* 2>/dev/null | grep -q '\.tmp\.' && break
    sleep 0.005
done
if ls "$S"/ds_sig.tmp.* 2>/dev/null | grep -q '\.tmp\.'; then
    kill -TERM $pid
    wait $pid
    rc=$?
    if [ $rc -eq 9 ]; then pass; else fail "tokenize stopped by SIGTERM: status $rc, not 9: $(cat "$S/sig.err")"; fi
    left=$(ls -d "$S"/ds_sig* 2>/dev/null)
    if [ -z "$left" ]; then pass; else fail "tokenize stopped by SIGTERM left temporary files: $left"; fi
    out_has "the message says it was stopped" "$S/sig.err" "stopped by a signal"
else
    wait $pid
    fail "tokenize of $(wc -c <"$S/big.txt") bytes finished before it showed a temporary shard (status $?)"
fi

finish cli_exit_codes
