#!/usr/bin/env bash
# cli_quant.sh — `difftrans quantize` end to end: every scheme written and read back by the
# inference commands (generate, eval, forward, needle eval, info), and every bad input of issue 9:
# an unknown scheme, calibration text too short, a checkpoint whose scales disagree with its
# shapes, training and --grads on a quantised checkpoint, export --hf / --dtype / --max-shard-size — each a
# message, status 1 (5 for the exports) and no output left behind.
#
# usage: bash tests/cli_quant.sh PATH_TO_difftrans SCRATCH_DIR
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2

M=$S/model
check "a short training run" "$DT" train --data "$CORPUS" --out "$M" --preset tiny --steps 30 --batch 4 --seq 32 --quiet
head -c 4000 "$CORPUS" >"$S/short.txt"
# sizes with the unit that shows them (KB below 1 MB, bytes below 1 KB): a tiny model's read "0.00 MB"
SIZE_RE='[1-9][0-9]*(\.[0-9]+)? (bytes|KB|MB)'

for scheme in q8_0 q4_0 w8a8; do
    Q=$S/$scheme
    calib=()
    [ "$scheme" = w8a8 ] && calib=(--calib "$CORPUS" --calib-samples 40 --seq 32)
    expect_ok "quantize $scheme" "$DT" quantize "$M" "$Q" --scheme "$scheme" "${calib[@]}"
    out_has "quantize $scheme reports the size" "$S/last.out" "wrote .*$scheme" "smaller" \
        "weights read per decoded token $SIZE_RE \\(float32: $SIZE_RE, "
    out_has "$scheme config" "$Q/config.json" '"quantization_config"' "\"scheme\":[[:space:]]*\"$scheme\"" '"quant_method"'
    expect_ok "generate $scheme" "$DT" generate "$Q" --prompt "The " -n 8 --temperature 0
    expect_ok "eval $scheme" "$DT" eval "$Q" --data "$S/short.txt" --seq 32
    out_has "eval $scheme prints a loss" "$S/last.out" "loss [0-9]"
    echo "1 2 3 4 5 6" >"$S/ids.txt"
    expect_ok "forward $scheme" "$DT" forward "$Q" --input "$S/ids.txt" --output "$S/f_$scheme.safetensors"
    expect_fail "forward --grads $scheme refused" "quantised.*float model" \
        "$DT" forward "$Q" --input "$S/ids.txt" --output "$S/g_$scheme.safetensors" --grads
    check "no gradient file left" test ! -e "$S/g_$scheme.safetensors"
    expect_fail "export --hf $scheme refused, naming the model" "^difftrans export: $Q: a quantised model.*float model" \
        "$DT" export "$Q" "$S/hf_$scheme" --hf
    check "no HF export left" test ! -e "$S/hf_$scheme"
    # the quantised layout is one file of F32 float tensors: these options were dropped without a word
    expect_status "export --dtype bf16 $scheme refused" 5 "a quantised model.*dtype applies to float models.*--dtype" \
        "$DT" export "$Q" "$S/bf_$scheme" --dtype bf16
    expect_status "export --max-shard-size $scheme refused" 5 "max_shard_bytes applies to float models.*--max-shard-size" \
        "$DT" export "$Q" "$S/bf_$scheme" --max-shard-size 100KB
    check "no copy left" test ! -e "$S/bf_$scheme"
done
expect_ok "info on a quantised model" "$DT" info "$S/w8a8"
out_has "info names the scheme" "$S/last.out" "quantised: w8a8, static activation scales"
out_has "info: the weights read per token, its unit showing the number" "$S/last.out" \
    "weights read per decoded token $SIZE_RE\$"
expect_ok "analyze outliers on a quantised model" "$DT" analyze outliers "$S/q4_0" --data "$S/short.txt" --seq 32 --batches 2
expect_ok "w8a8 dynamic, no calibration" "$DT" quantize "$M" "$S/dyn" --scheme w8a8 --dynamic
out_has "dynamic config" "$S/dyn/config.json" 'int8-dynamic-per-token'
expect_ok "w8a8 smoothed" "$DT" quantize "$M" "$S/smooth" --scheme w8a8 --smooth 0.5 --calib "$CORPUS" --calib-samples 20 --seq 32
out_has "smoothed checkpoint" "$S/smooth/config.json" '"smoothquant_alpha":[[:space:]]*0.5'
expect_ok "needle generate" "$DT" needle generate --corpus "$CORPUS" --out "$S/needle" --context 128 --needles 2 --queries 1 --depths 0.5 --train 1 --test 2
expect_ok "needle eval on q8_0" "$DT" needle eval "$S/q8_0" --data "$S/needle"

# narrower KV caches, memory reported
for kv in f16 int8; do
    expect_ok "generate --kv-cache $kv" "$DT" generate "$S/q8_0" --prompt "The " -n 8 --temperature 0 --kv-cache "$kv"
    # a tiny model's cache is KBs: a number with its unit (it read "0.00 MB")
    out_has "KV cache memory ($kv)" "$S/last.err" \
        "KV cache: 12 positions, $SIZE_RE \\($kv; f32 would take $SIZE_RE\\)"
done
expect_fail "bad --kv-cache" "--kv-cache 'f8'" "$DT" generate "$M" --prompt "a" -n 2 --kv-cache f8

# calibration is deterministic for a fixed seed
expect_ok "quantize again" "$DT" quantize "$M" "$S/w8a8_again" --scheme w8a8 --calib "$CORPUS" --calib-samples 40 --seq 32
check "same seed, same bytes" cmp "$S/w8a8/model.safetensors" "$S/w8a8_again/model.safetensors"

# bad input
expect_fail "unknown scheme" "unknown quantisation scheme 'q3_k'" "$DT" quantize "$M" "$S/bad1" --scheme q3_k
check "nothing written for an unknown scheme" test ! -e "$S/bad1"
# a token dataset's directory was refused only as "DIR: not a regular file", naming neither the flag
# nor what it takes
mkdir -p "$S/calib_dir"
expect_status "a directory as --calib" 3 "calib_path .*calib_dir: a directory \(a token dataset is not accepted\): \
calibration reads a text file \(--calib\)" "$DT" quantize "$M" "$S/bad_dir" --scheme w8a8 --calib "$S/calib_dir"
expect_status "a missing --calib file" 3 "calib_path: .*no-such\.txt.*\(--calib\)" \
    "$DT" quantize "$M" "$S/bad_missing" --scheme w8a8 --calib "$S/no-such.txt"
expect_fail "calibration text too short" "short.txt.*fewer than the 300 samples" \
    "$DT" quantize "$M" "$S/bad2" --scheme w8a8 --calib "$S/short.txt"
check "nothing written for short calibration" bash -c "! ls -d '$S'/bad2* 2>/dev/null"
expect_fail "w8a8 without --calib" "needs --calib" "$DT" quantize "$M" "$S/bad3" --scheme w8a8
# calibration options where nothing is calibrated were dropped without a word
for case in "q8_0|--calib" "q4_0|--seed 3" "q8_0|--calib-samples 20 --seq 32" "w8a8 --dynamic|--calib"; do
    IFS='|' read -r how opts <<<"$case"
    flags=$(echo "$opts" | sed -E 's/ [0-9]+//g; s/ /, /g')
    read -ra how_a <<<"$how"
    read -ra opts_a <<<"$opts"
    [ "${opts_a[0]}" = --calib ] && opts_a+=("$CORPUS")
    expect_status "$how with $opts refused" 1 "^difftrans quantize: $flags: $how takes no calibration" \
        "$DT" quantize "$M" "$S/bad_calib" --scheme "${how_a[@]}" "${opts_a[@]}"
    check "nothing written for $how with $opts" test ! -e "$S/bad_calib"
done
expect_fail "--smooth on q8_0" "w8a8 only" "$DT" quantize "$M" "$S/bad4" --scheme q8_0 --smooth 0.5
expect_fail "--smooth out of range" "--smooth" "$DT" quantize "$M" "$S/bad5" --scheme w8a8 --smooth 2 --calib "$CORPUS"
expect_fail "existing output" "already exists" "$DT" quantize "$M" "$S/q8_0" --scheme q8_0
expect_ok "OUT_DIR with a trailing slash" "$DT" quantize "$M" "$S/slash/" --scheme q4_0
check "written as the directory it names" test -f "$S/slash/model.safetensors"
check "no temporary left beside it" bash -c "! ls -d '$S'/slash.tmp.* '$S'/slash/.tmp.* 2>/dev/null"
expect_fail "an existing OUT_DIR/ too" "already exists" "$DT" quantize "$M" "$S/slash//" --scheme q4_0
expect_fail "existing output, w8a8" "already exists" \
    "$DT" quantize "$M" "$S/q8_0" --scheme w8a8 --calib "$CORPUS" --calib-samples 40 --seq 32
check "refused before the calibration, not after it" bash -c "! grep -q calibrating '$S/last.err'"
expect_fail "quantising a quantised model" "already quantised" "$DT" quantize "$S/q8_0" "$S/bad6" --scheme q4_0
expect_fail "training a quantised checkpoint" "quantised.*train the float model" \
    "$DT" train --resume --out "$S/q8_0"
if [ -n "$PY" ]; then
    # blocks whose count disagrees with the weight's shape (same byte count, so the safetensors
    # layer accepts it and the quantisation loader must catch it)
    cp -r "$S/q8_0" "$S/lying"
    check "rewrite a blocks shape" "$PY" - "$S/lying/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
t = h["model.layers.0.mlp.down_proj.qblocks"]
t["shape"] = [t["shape"][0] * t["shape"][1] // 34, 34]
s = json.dumps(h, separators=(",", ":")).encode()
s += b" " * (-len(s) % 8)  # the header padded to 8 bytes, its length rewritten
open(p, "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:])
PYEOF
    expect_fail "blocks disagree with shapes" "down_proj.qblocks.*has shape.*imply" "$DT" eval "$S/lying" --data "$S/short.txt"
    expect_fail "lying checkpoint in generate" "down_proj.qblocks" "$DT" generate "$S/lying" --prompt "a" -n 2
    # a quantization_config whose description contradicts its scheme, or whose scheme is unknown (it
    # was status 1, bad usage, as for --scheme), a layer that keeps its float weight beside its
    # blocks, smoothing missing from a layer of a smoothed model: refused (2)
    cat >"$S/edit_quant.py" <<'PYEOF'
import json, struct, sys
src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
c = json.load(open(src + "/config.json"))
b = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__", None)
data = {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
if what == "bits": c["quantization_config"]["weight_bits"] = 4
if what == "block": c["quantization_config"]["block_size"] = 64
if what == "scheme": c["quantization_config"]["scheme"] = "q3_k"
if what == "both":  # the float up_proj beside its blocks
    rows, cols = h["model.embed_tokens.weight"]["shape"]
    h["model.layers.0.mlp.up_proj.weight"] = dict(h["model.embed_tokens.weight"])
    data["model.layers.0.mlp.up_proj.weight"] = data["model.embed_tokens.weight"]
if what == "nosmooth":
    del h["model.layers.0.mlp.up_proj.smooth"]
out, blobs, off = {}, [], 0
for k in h:
    out[k] = dict(h[k], data_offsets=[off, off + len(data[k])])
    blobs.append(data[k]); off += len(data[k])
if meta is not None: out["__metadata__"] = meta
hdr = json.dumps(out, separators=(",", ":")).encode()
hdr += b" " * (-len(hdr) % 8)
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(hdr)) + hdr + b"".join(blobs))
json.dump(c, open(dst + "/config.json", "w"))
PYEOF
    for case in "q8_0 bits weight_bits must be 8" "q8_0 block block_size must be 32" \
        "q8_0 both up_proj.weight' beside its quantised form" "smooth nosmooth up_proj.smooth' is missing" \
        "q8_0 scheme config.json: quantization_config: unknown quantisation scheme 'q3_k'"; do
        read -r from what want <<<"$case"
        rm -rf "$S/edit_$what" && cp -r "$S/$from" "$S/edit_$what"
        check "edit a quantised checkpoint: $what" "$PY" "$S/edit_quant.py" "$S/$from" "$S/edit_$what" "$what"
        expect_status "a quantised checkpoint that contradicts itself: $what" 2 "$want" \
            "$DT" generate "$S/edit_$what" --prompt-ids "1 2" -n 2
    done
    # a checkpoint from before the blocks were ggml's (int8 values and float32 scales in two
    # tensors, activations float) still loads, and gives the float-activation model's loss; a
    # scale no half can hold is refused with the command that re-quantises
    cat > "$S/to_old.py" <<'PYEOF'
import json, struct, sys
src, dst, floats, big = sys.argv[1], sys.argv[2], sys.argv[3], len(sys.argv) > 4
def header(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
h, data = header(src + "/model.safetensors")
shapes = {k: v["shape"] for k, v in header(floats + "/model.safetensors")[0].items() if k != "__metadata__"}
out, blobs, off = {}, [], 0
def put(name, dtype, shape, blob):
    global off
    out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
    blobs.append(blob); off += len(blob)
for name, t in h.items():
    if name == "__metadata__": continue
    raw = data[t["data_offsets"][0]:t["data_offsets"][1]]
    if not name.endswith(".qblocks"):
        put(name, t["dtype"], t["shape"], raw); continue
    rows, width = t["shape"]; nb = width // 34; base = name[:-len(".qblocks")]
    cols = shapes[base + ".weight"][1]
    q, sc = bytearray(), []
    for r in range(rows):
        row = bytearray()
        for k in range(nb):
            blk = raw[(r * nb + k) * 34:(r * nb + k + 1) * 34]
            sc.append(struct.unpack("<e", blk[:2])[0]); row += blk[2:]
        q += row[:cols]
    if big: sc[0] = 1e6
    put(base + ".qweight", "I8", [rows, cols], bytes(q))
    put(base + ".scales", "F32", [rows, nb], struct.pack("<%df" % len(sc), *sc))
hdr = json.dumps(out, separators=(",", ":")).encode()
hdr += b" " * (-len(hdr) % 8)
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(hdr)) + hdr + b"".join(blobs))
c = json.load(open(src + "/config.json"))
c["quantization_config"]["activations"] = "float32"
del c["quantization_config"]["block_layout"]
json.dump(c, open(dst + "/config.json", "w"))
PYEOF
    cp -r "$S/q8_0" "$S/old" && cp -r "$S/q8_0" "$S/old_big"
    check "an old-layout q8_0 checkpoint" "$PY" "$S/to_old.py" "$S/q8_0" "$S/old" "$M"
    check "one with a scale past a half" "$PY" "$S/to_old.py" "$S/q8_0" "$S/old_big" "$M" big
    expect_ok "eval the old layout" "$DT" eval "$S/old" --data "$S/short.txt"
    cp "$S/last.out" "$S/old.eval"
    check "float activations written" "$DT" quantize "$M" "$S/q8_0f" --scheme q8_0 --float-activations
    check "config says so" "$PY" -c 'import json, sys; q = json.load(open(sys.argv[1]))["quantization_config"]; assert q["activations"] == "float32" and q["block_layout"] == "ggml", q' "$S/q8_0f/config.json"
    check "and by default" "$PY" -c 'import json, sys; q = json.load(open(sys.argv[1]))["quantization_config"]; assert q["activations"] == "int8-dynamic-per-block", q' "$S/q8_0/config.json"
    expect_ok "eval float activations" "$DT" eval "$S/q8_0f" --data "$S/short.txt"
    check "old layout = float activations (same integers, same half scales)" \
        test "$(sed 's/.* on //' "$S/old.eval")" = "$(sed 's/.* on //' "$S/last.out")"
    expect_fail "old scale past a half" "past the range of the half-precision scales.*difftrans quantize FLOAT_MODEL OUT --scheme q8_0" \
        "$DT" eval "$S/old_big" --data "$S/short.txt"
    expect_fail "--float-activations on w8a8" "applies to q8_0 and q4_0" "$DT" quantize "$M" "$S/bad7" --scheme w8a8 --dynamic --float-activations
    # a float LM head of finite weights whose logits overflow: eval printed "loss nan" and exited 0
    rm -rf "$S/overflow" && cp -r "$S/q8_0" "$S/overflow"
    check "an LM head that overflows float32" "$PY" - "$S/overflow/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
lo, hi = json.loads(b[8:8 + n])["lm_head.weight"]["data_offsets"]
b[8 + n + lo:8 + n + hi] = struct.pack("<2f", 3e38, -3e38) * ((hi - lo) // 8)
open(p, "wb").write(bytes(b))
PYEOF
    expect_status "eval of weights that overflow" 2 "^difftrans eval: $S/overflow on $S/short.txt: the loss of windows 0\\.\\.[0-9]+ \\(tokens 0\\.\\.[0-9]+\\) is (nan|inf|-inf): the model's weights overflow float32" \
        "$DT" eval "$S/overflow" --data "$S/short.txt"
fi
# quality of each scheme, DIFF and baseline side by side
check "a baseline" "$DT" train --data "$CORPUS" --out "$S/base" --arch transformer --preset tiny --steps 30 --batch 4 --seq 32 --quiet
expect_ok "analyze quantize --schemes" "$DT" analyze quantize "$M" "$S/base" --data "$CORPUS" \
    --schemes q8_0,q4_0,w8a8,w8a8-dynamic,w8a8-smooth --calib-samples 40 --seq 32 --batches 3 --json "$S/wq.json"
out_has "the table" "$S/last.out" "DIFF +f32" "Transformer +q4_0" "w8a8-smooth +down_proj"
if [ -n "$PY" ]; then
    check "analysis JSON" "$PY" - "$S/wq.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["analysis"] == "quantize_weights" and len(r["models"]) == 2, r.keys()
for m in r["models"]:
    rows = {x["scheme"]: x for x in m["schemes"]}
    assert list(rows) == ["f32", "q8_0", "q4_0", "w8a8", "w8a8-dynamic", "w8a8-smooth"], list(rows)
    assert rows["f32"]["kl"] == 0 and rows["f32"]["top1_agreement"] == 1
    for name, x in rows.items():
        assert 0 <= x["top1_agreement"] <= 1 and x["kl"] >= 0 and x["count"] == 3 * 32, (name, x)
        assert abs(x["loss"] - rows["f32"]["loss"] - x["loss_delta"]) < 1e-9
    assert rows["q4_0"]["kl"] > 0                       # 4 bits do change the distribution
    assert rows["q4_0"]["decode_weight_mb"] < rows["q8_0"]["decode_weight_mb"] < rows["f32"]["decode_weight_mb"]
    sm = {o["layer_type"]: o for o in rows["w8a8-smooth"]["activation_outliers"]}
    assert sm["down_proj"]["absmax_over_median_smoothed"] < sm["down_proj"]["absmax_over_median"]
    assert len(rows["w8a8"]["layers"]) == 2 * 7 and "activation_outliers" not in rows["q8_0"]
PYEOF
fi
expect_fail "unknown scheme in --schemes" "unknown quantisation scheme 'q5'" \
    "$DT" analyze quantize "$M" --data "$CORPUS" --schemes q8_0,q5
expect_fail "-smooth on q8_0" "only w8a8" "$DT" analyze quantize "$M" --data "$CORPUS" --schemes q8_0-smooth
expect_fail "--bits with --schemes" "one at a time" "$DT" analyze quantize "$M" --data "$CORPUS" --schemes q8_0 --bits 8
expect_fail "--calib without --schemes" "need --schemes" "$DT" analyze quantize "$M" --data "$CORPUS" --calib "$CORPUS"
expect_fail "analysis calibration too short" "fewer than the 300 samples" \
    "$DT" analyze quantize "$M" --data "$S/short.txt" --schemes w8a8 --seq 32 --batches 1
expect_ok "help" "$DT" quantize --help
out_has "help names every scheme" "$S/last.out" q8_0 q4_0 w8a8 --smooth --dynamic --calib-samples
finish cli_quant
