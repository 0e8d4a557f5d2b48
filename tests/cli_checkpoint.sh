#!/usr/bin/env bash
# cli_checkpoint.sh — complete Hugging Face checkpoints from the command line: `export` and `init`
# with --dtype and --max-shard-size, generation_config.json, and their refusals.
#
# usage: bash tests/cli_checkpoint.sh PATH_TO_difftrans SCRATCH_DIR
#
#   shards    export --max-shard-size splits the weights as transformers does (index + shards),
#             and forward on the sharded copy gives the original's logits bit for bit
#   dtypes    export --dtype bf16 / f16: every stored value equals numpy's rounding of the F32
#             original (python3-numpy, an independent reference); torch_dtype follows
#   refusals  bad --dtype / --max-shard-size values: exit status 1 naming the option
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"

expect_ok "init" "$DT" init --out "$S/m" --preset tiny --seed 3
printf '1 2 3 4 5 6 7 8\n9 10 11 12 13 14 15 16\n' >"$S/ids.txt"
expect_ok "forward on the original" "$DT" forward "$S/m" --input "$S/ids.txt" --output "$S/orig.safetensors"

# ---------------------------------------------------------------- shards
expect_ok "export --max-shard-size 40KB" "$DT" export "$S/m" "$S/sh" --max-shard-size 40KB
n_shards() { ls "$1" | grep -cE '^model-[0-9]{5}-of-[0-9]{5}\.safetensors$'; }
check "index and several shards written, no single file" test -f "$S/sh/model.safetensors.index.json" \
    -a "$(n_shards "$S/sh")" -gt 2 -a ! -e "$S/sh/model.safetensors"
expect_ok "forward on the sharded copy" "$DT" forward "$S/sh" --input "$S/ids.txt" --output "$S/sh.safetensors"
check "sharded logits equal the original's bit for bit" cmp "$S/orig.safetensors" "$S/sh.safetensors"
expect_ok "info on the sharded copy" "$DT" info "$S/sh"
expect_ok "export back to one file" "$DT" export "$S/sh" "$S/sh"
check "one file again, no index or shards left" test -f "$S/sh/model.safetensors" \
    -a ! -e "$S/sh/model.safetensors.index.json" -a "$(n_shards "$S/sh")" -eq 0

# ---------------------------------------------------------------- dtypes
for dt in bf16 f16; do
    expect_ok "export --dtype $dt" "$DT" export "$S/m" "$S/$dt" --dtype $dt --max-shard-size 100000
    want=$([ $dt = bf16 ] && echo bfloat16 || echo float16)
    out_has "torch_dtype $want" "$S/$dt/config.json" "\"torch_dtype\":[[:space:]]*\"$want\""
    expect_ok "forward on the $dt copy" "$DT" forward "$S/$dt" --input "$S/ids.txt" --output "$S/$dt.out"
done
if [ -n "$PY" ] && "$PY" -c 'import numpy' 2>/dev/null; then
    check "stored bf16/f16 values are numpy's round-to-nearest-even of the F32 weights" "$PY" - "$S" <<'PYEOF'
import glob, json, os, struct, sys
import numpy as np
S = sys.argv[1]
def read_dir(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        hdr = json.loads(raw[8:8 + n])
        for name, t in hdr.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            dt = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[t["dtype"]]
            out[name] = (t["dtype"], np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dt).reshape(t["shape"]))
    return out
orig = read_dir(os.path.join(S, "m"))
for kind, want in (("bf16", "BF16"), ("f16", "F16")):
    got = read_dir(os.path.join(S, kind))
    assert set(got) == set(orig), "tensor names differ"
    for name, (dtype, a) in got.items():
        assert dtype == want, (name, dtype)
        x = orig[name][1].astype(np.float32)
        if want == "F16":
            ref = x.astype(np.float16)
            assert np.array_equal(a.view(np.uint16), ref.view(np.uint16)), name
        else:
            u = x.view(np.uint32).astype(np.uint64)
            ref = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            assert np.array_equal(a, ref), name
print("ok")
PYEOF
fi

# ---------------------------------------------------------------- generation_config.json
out_has "generation_config.json written" "$S/m/generation_config.json" '"eos_token_id"'
printf '{"eos_token_id": [3, 7], "bos_token_id": 1}\n' >"$S/m/generation_config.json"
expect_ok "info reads generation_config.json" "$DT" info "$S/m" && out_has "eos ids listed" "$S/last.out" "eos 3 7"
printf '{"eos_token_id": 4000}\n' >"$S/m/generation_config.json"
expect_fail "eos id past the vocabulary" "generation_config\.json.*eos_token_id 4000 is outside the vocabulary" \
    "$DT" info "$S/m"
printf '{"eos_token_id": ' >"$S/m/generation_config.json"
expect_fail "generation_config.json not JSON" "generation_config\.json is not valid JSON" "$DT" info "$S/m"
rm -f "$S/m/generation_config.json"
expect_ok "no generation_config.json is fine" "$DT" info "$S/m"
# its sampling is generate's default as transformers' generate reads it; the flags win; -n from max_new_tokens
expect_ok "generate, difftrans's sampling" "$DT" generate "$S/m" --prompt-ids "1 2" -n 12 --print-ids --seed 5
cp "$S/last.out" "$S/sampled.out"
expect_ok "generate greedy" "$DT" generate "$S/m" --prompt-ids "1 2" -n 12 --print-ids --temperature 0
cp "$S/last.out" "$S/greedy.out"
check "sampling and greedy differ on this model" test "$(cat "$S/sampled.out")" != "$(cat "$S/greedy.out")"
printf '{"temperature": 0.6, "max_new_tokens": 12}\n' >"$S/m/generation_config.json"
expect_ok "generate under a temperature without do_sample" "$DT" generate "$S/m" --prompt-ids "1 2" --print-ids --seed 5
check "greedy, as transformers decodes without do_sample, 12 tokens" cmp "$S/last.out" "$S/greedy.out"
out_has "the sampling is said" "$S/last.err" "sampling: greedy \\(generation_config.json's"
expect_ok "generate with --temperature over it" "$DT" generate "$S/m" --prompt-ids "1 2" --print-ids --seed 5 \
    --temperature 0.8 --top-p 0.95 --top-k 0
check "the flags win" cmp "$S/last.out" "$S/sampled.out"
printf '{"do_sample": 1}\n' >"$S/m/generation_config.json"
expect_status "a do_sample that is not a boolean" 2 "$S/m/generation_config.json: key 'do_sample' must be true or false" \
    "$DT" generate "$S/m" --prompt-ids "1 2" --print-ids
rm -f "$S/m/generation_config.json"

# ---------------------------------------------------------------- refusals
expect_fail "bad --dtype" "--dtype 'f8'" "$DT" export "$S/m" "$S/x" --dtype f8
expect_fail "bad --max-shard-size unit" "--max-shard-size '5XB': unknown unit" "$DT" export "$S/m" "$S/x" --max-shard-size 5XB
expect_fail "zero --max-shard-size" "--max-shard-size '0'" "$DT" export "$S/m" "$S/x" --max-shard-size 0
expect_fail "init bad --dtype" "--dtype" "$DT" init --out "$S/x" --dtype int8
check "nothing written by the refusals" test ! -e "$S/x"

finish cli_checkpoint
