#!/usr/bin/env bash
# cli_bench.sh — smoke test of `difftrans bench`.
#
# usage: bash tests/cli_bench.sh PATH_TO_difftrans SCRATCH_DIR
#
# Runs a tiny bench of all three architectures and checks that stdout has exactly three JSON lines,
# arch "diffllama", "llama" and "difftrans_v2", each with every key, the sizes asked for and a
# positive number for every measurement; that --help works; that bad flag values fail with
# a message naming the flag; and that `info --system` and DT_ISA work. Exits 1 when any check
# failed.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 PATH_TO_difftrans SCRATCH_DIR" >&2
    exit 2
fi
DT=$1
S=$2
case "$S" in "" | / | "$HOME" | .) echo "$0: refusing to use $S as the scratch directory" >&2; exit 2 ;; esac
rm -rf "$S" && mkdir -p "$S" || exit 2
[ -x "$DT" ] || { echo "$0: $DT is not an executable" >&2; exit 2; }
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || echo /usr/bin/python3)
# Busy shared machines: passive waiting keeps an oversubscribed OpenMP barrier from spinning.
export OMP_WAIT_POLICY=PASSIVE

FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

# ---- a tiny run of the three models
if timeout 90 "$DT" bench --arch all --d-model 64 --layers 1 --heads 4 --ffn 128 --vocab 64 --batch 2 --seq 16 \
    --steps 1 --decode-tokens 4 --threads 2 >"$S/out.txt" 2>"$S/err.txt"; then
    grep '^{' "$S/out.txt" >"$S/json.txt"
    "$PY" - "$S/json.txt" "$S/out.txt" <<'EOF' || fail "bench JSON lines (see above; stdout in $S/out.txt)"
import json, math, re, sys
keys = ["arch", "d_model", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab", "batch", "seq", "threads",
        "params", "steps", "decode_tokens", "train_tokens_per_s", "train_step_ms", "prefill_tokens_per_s",
        "decode_tokens_per_s", "train_gflops", "train_flops_per_step", "sgemm_peak_gflops", "sgemm_n",
        "peak_fraction", "peak_rss_mb", "decode_weight_bytes_per_token", "read_bandwidth_gbs",
        "read_bandwidth_sum_gbs", "read_bandwidth_decoder_gbs", "read_bandwidth_bytes", "decode_bandwidth_gbs",
        "decode_bound_fraction", "loadavg", "cpu", "kernels", "blas_core", "blas_core_forced", "blas_core_chosen",
        "quant"]
sizes = {"d_model": 64, "layers": 1, "heads": 4, "kv_heads": 4, "head_dim": 16, "ffn": 128, "vocab": 64,
         "batch": 2, "seq": 16, "threads": 2, "steps": 1, "decode_tokens": 4}
lines = open(sys.argv[1]).read().splitlines()
ok = True
def bad(msg):
    global ok
    print("  " + msg)
    ok = False
if len(lines) != 3:
    bad("expected 3 JSON lines, got %d" % len(lines))
archs = []
for line in lines:
    try:
        j = json.loads(line)
    except ValueError as e:
        bad("not JSON (%s): %s" % (e, line))
        continue
    archs.append(j.get("arch"))
    if list(j.keys()) != keys:
        bad("keys differ: missing %s, extra %s" % (sorted(set(keys) - set(j)), sorted(set(j) - set(keys))))
    for k, v in sizes.items():
        if j.get(k) != v:
            bad("%s: %s = %r, expected %r" % (j.get("arch"), k, j.get(k), v))
    if j.get("kernels") not in ("portable", "avx2", "avx512") or not isinstance(j.get("cpu"), str):
        bad("%s: kernels %r / cpu %r" % (j.get("arch"), j.get("kernels"), j.get("cpu")))
    if j.get("quant") != "f32":
        bad("%s: quant %r, expected f32" % (j.get("arch"), j.get("quant")))
    if not isinstance(j.get("blas_core"), str) or not isinstance(j.get("blas_core_forced"), bool) or \
            not isinstance(j.get("blas_core_chosen"), bool) or (j["blas_core_forced"] and j["blas_core_chosen"]):
        bad("%s: blas_core %r / blas_core_forced %r / blas_core_chosen %r" % (
            j.get("arch"), j.get("blas_core"), j.get("blas_core_forced"), j.get("blas_core_chosen")))
    load = j.get("loadavg")
    if load is not None and (not isinstance(load, (int, float)) or isinstance(load, bool) or not load >= 0):
        bad("%s: loadavg = %r is neither null nor a number >= 0" % (j.get("arch"), load))
    for k in keys[11:keys.index("loadavg")]:
        v = j.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            bad("%s: %s = %r is not a positive number" % (j.get("arch"), k, v))
    # every derived number from the measured ones and the shapes: C 64, F 128, V 64, 1 layer, 4 heads of 16
    if all(isinstance(j.get(k), (int, float)) for k in keys[11:keys.index("loadavg")]):
        def near(a, b):
            return abs(a - b) <= 1e-6 * abs(b)
        C, F, V, H, hd, B, T = 64, 128, 64, 4, 16, 2, 16
        # DIFF V2: o_proj [C, H/2·hd] and its λ projection [H/2, C]; DIFF: 4 λ vectors of hd
        v2 = j["arch"] == "difftrans_v2"
        layer_mm = 3 * C * H * hd + C * (H // 2 if v2 else H) * hd + (H // 2 * C if v2 else 0) + 3 * F * C
        params = layer_mm + 2 * C + (4 * hd if j["arch"] == "diffllama" else 0) + 2 * V * C + C
        flops = 6 * (layer_mm + V * C) * B * T + 3 * H * 4 * hd * B * T * (T + 1) / 2
        if j["params"] != params:
            bad("%s: params = %r, by hand %r" % (j["arch"], j["params"], params))
        checks = [("train_flops_per_step", j["train_flops_per_step"], flops),
                  ("decode_weight_bytes_per_token", j["decode_weight_bytes_per_token"], 4 * (params - V * C + C)),
                  ("train_tokens_per_s", j["train_tokens_per_s"], B * T / (j["train_step_ms"] / 1e3)),
                  ("train_gflops", j["train_gflops"], flops / (j["train_step_ms"] / 1e3) / 1e9),
                  ("peak_fraction", j["peak_fraction"], j["train_gflops"] / j["sgemm_peak_gflops"]),
                  ("decode_bandwidth_gbs", j["decode_bandwidth_gbs"],
                   j["decode_weight_bytes_per_token"] * j["decode_tokens_per_s"] / 1e9),
                  ("decode_bound_fraction", j["decode_bound_fraction"],
                   j["decode_bandwidth_gbs"] / j["read_bandwidth_gbs"]),
                  ("read_bandwidth_gbs", j["read_bandwidth_gbs"],
                   max(j["read_bandwidth_sum_gbs"], j["read_bandwidth_decoder_gbs"]))]
        for name, got, want in checks:
            if not near(got, want):
                bad("%s: %s = %r, recomputed %r" % (j["arch"], name, got, want))
        if j["read_bandwidth_bytes"] != 1 << 20 or j["sgemm_n"] not in (512, 1024, 2048):
            bad("%s: read_bandwidth_bytes %r (1 MiB, the least), sgemm_n %r" % (
                j["arch"], j["read_bandwidth_bytes"], j["sgemm_n"]))
        # the table says the same numbers, to the digits it prints
        block = [b for b in open(sys.argv[2]).read().split("\n\n") if b.startswith(j["arch"] + ":")]
        said = [(r"train +([0-9.]+) tokens/s", [j["train_tokens_per_s"]]),
                (r"prefill +([0-9.]+) tokens/s", [j["prefill_tokens_per_s"]]),
                (r"decode +([0-9.]+) tokens/s", [j["decode_tokens_per_s"]]),
                (r"([0-9.]+) GFLOP/s = ([0-9.]+)% of the sgemm peak ([0-9.]+) GFLOP/s \((\d+)³\)",
                 [j["train_gflops"], 100 * j["peak_fraction"], j["sgemm_peak_gflops"], j["sgemm_n"]]),
                (r"FLOPs/step ([0-9.e+]+) ", [j["train_flops_per_step"]]),
                (r"([0-9.]+) MB of weights/token → ([0-9.]+) GB/s = ([0-9.]+)% of the read bandwidth bound \(([0-9.]+)",
                 [j["decode_weight_bytes_per_token"] / 1e6, j["decode_bandwidth_gbs"], 100 * j["decode_bound_fraction"],
                  j["read_bandwidth_gbs"]]),
                (r"the larger; ([0-9]+\.[0-9]) MiB, best of 10\): streaming sum ([0-9.]+), decoder's product ([0-9.]+) GB/s",
                 [j["read_bandwidth_bytes"] / 2**20, j["read_bandwidth_sum_gbs"], j["read_bandwidth_decoder_gbs"]])]
        for pattern, values in said:
            m = re.search(pattern, block[0]) if len(block) == 1 else None
            if not m:
                bad("%s: no %r in its table" % (j["arch"], pattern))
                continue
            for shown, v in zip(m.groups(), values):
                tol = 5e-4 * abs(v) if "e" in shown else 0.5001 * 10 ** -len((shown + ".").split(".")[1]) + 1e-7 * abs(v)
                if not abs(float(shown) - v) <= tol:
                    bad("%s: the table says %s where the JSON has %r" % (j["arch"], shown, v))
if sorted(archs) != ["diffllama", "difftrans_v2", "llama"]:
    bad("arch values %r, expected diffllama, llama and difftrans_v2" % archs)
sys.exit(0 if ok else 1)
EOF
    grep -q 'bench diffllama: training' "$S/err.txt" || fail "no progress lines on stderr"
    grep -q '^difftrans_v2: .*, 4 query heads = 2 output heads of width 16,' "$S/out.txt" ||
        fail "the V2 table does not say its query and output heads"
else
    fail "tiny bench exited with status $?: $(tail -3 "$S/err.txt")"
fi

# ---- quantised copies: one line per scheme, the quantised kernels' path named
if timeout 60 "$DT" bench --arch diff --d-model 64 --layers 1 --heads 4 --ffn 96 --vocab 64 --batch 1 --seq 16 \
    --steps 1 --decode-tokens 4 --threads 2 --no-train --quant f32,q8_0,w8a8 >"$S/q.txt" 2>"$S/qerr.txt"; then
    grep '^{' "$S/q.txt" >"$S/qjson.txt"
    "$PY" - "$S/qjson.txt" <<'EOF' || fail "bench --quant JSON lines (stdout in $S/q.txt)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["quant"] for r in rows] == ["f32", "q8_0", "w8a8"], rows
assert all(r["decode_tokens_per_s"] > 0 and r["prefill_tokens_per_s"] > 0 for r in rows)
assert rows[1]["decode_weight_bytes_per_token"] < rows[0]["decode_weight_bytes_per_token"]
assert rows[1]["quant_kernels"].split()[0] in ("portable", "avx2", "avx512") and "quant_kernels" not in rows[0]
# a quantised row says whether its LM head is; the float row has none to say
assert "quant_lm_head" not in rows[0] and rows[1]["quant_lm_head"] is False and rows[2]["quant_lm_head"] is False
EOF
    grep -q '^quantised kernels: ' "$S/q.txt" || fail "bench --quant does not name the quantised kernels' path"
else
    fail "bench --quant exited with status $?: $(tail -3 "$S/qerr.txt")"
fi
# --quant-lm-head: said in the JSON and the table, and the weight bytes per token are the blocks'
# (q8_0 34 bytes per 32 weights, q4_0 18) of every product, the LM head's too, + the float norms,
# DIFF's four λ vectors of head_dim and the embedding row: C 64, F 96, V 64, 1 layer, head_dim 16
if timeout 60 "$DT" bench --arch diff --d-model 64 --layers 1 --heads 4 --ffn 96 --vocab 64 --batch 1 --seq 16 \
    --steps 1 --decode-tokens 4 --threads 2 --no-prefill --quant q8_0,q4_0 --quant-lm-head \
    >"$S/ql.txt" 2>"$S/qlerr.txt"; then
    grep '^{' "$S/ql.txt" >"$S/qljson.txt"
    "$PY" - "$S/qljson.txt" <<'EOF' || fail "bench --quant-lm-head JSON lines (stdout in $S/ql.txt)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["quant"], r["quant_lm_head"]) for r in rows] == [("q8_0", True), ("q4_0", True)], rows
# quantised copies are not trained, so no sgemm peak is measured for them (training is on by default)
assert all(r["sgemm_peak_gflops"] is None and r["train_tokens_per_s"] is None for r in rows), rows
C, F, V = 64, 96, 64
products = [(C, C)] * 4 + [(F, C), (F, C), (C, F), (V, C)]  # q k v o gate up down, LM head: [out, in]
floats = 4 * (C * (2 * 1 + 2) + 4 * 16)
for r, block in zip(rows, (34, 18)):
    want = floats + sum(out * (inp // 32) * block for out, inp in products)
    assert r["decode_weight_bytes_per_token"] == want, (r["quant"], r["decode_weight_bytes_per_token"], want)
EOF
    grep -q 'sgemm peak\|^machine: .*sgemm' "$S/ql.txt" "$S/qlerr.txt" &&
        fail "bench --quant q8_0,q4_0 measured an sgemm peak it has no use for"
    [ "$(grep -c '^diffllama q[48]_0 (LM head quantised too): ' "$S/ql.txt")" = 2 ] ||
        fail "bench --quant-lm-head: the tables do not say the LM head is quantised"
else
    fail "bench --quant-lm-head exited with status $?: $(tail -3 "$S/qlerr.txt")"
fi
# DIFF V2 quantised: its o_proj [C, H/2·hd] = [64, 32] in blocks too, its λ projection [H/2, C] float
if timeout 60 "$DT" bench --arch v2 --d-model 64 --layers 1 --heads 4 --ffn 96 --vocab 64 --batch 1 --seq 16 \
    --steps 1 --decode-tokens 4 --threads 2 --no-prefill --quant q8_0,q4_0 --quant-lm-head \
    >"$S/qv2.txt" 2>"$S/qv2err.txt"; then
    grep '^{' "$S/qv2.txt" >"$S/qv2json.txt"
    "$PY" - "$S/qv2json.txt" <<'EOF' || fail "bench --arch v2 --quant JSON lines (stdout in $S/qv2.txt)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["arch"], r["quant"]) for r in rows] == [("difftrans_v2", "q8_0"), ("difftrans_v2", "q4_0")], rows
assert all(r["decode_tokens_per_s"] > 0 for r in rows), rows
C, F, V = 64, 96, 64
products = [(C, C)] * 3 + [(C, 32), (F, C), (F, C), (C, F), (V, C)]  # q k v o gate up down, LM head: [out, in]
floats = 4 * (C * (2 * 1 + 2) + 2 * C)
for r, block in zip(rows, (34, 18)):
    want = floats + sum(out * (inp // 32) * block for out, inp in products)
    assert r["decode_weight_bytes_per_token"] == want, (r["quant"], r["decode_weight_bytes_per_token"], want)
EOF
else
    fail "bench --arch v2 --quant exited with status $?: $(tail -3 "$S/qv2err.txt")"
fi
"$DT" bench --quant q3 >/dev/null 2>"$S/bad.err" && fail "bench --quant q3 accepted"
grep -q "unknown quantisation scheme 'q3'" "$S/bad.err" || fail "bench --quant q3: $(cat "$S/bad.err")"

# ---- the decode step's profile, on its own (no training) and for a quantised copy
if timeout 60 "$DT" bench --arch diff --d-model 64 --layers 1 --heads 4 --ffn 96 --vocab 64 --batch 1 --seq 16 \
    --steps 1 --decode-tokens 4 --threads 2 --no-train --no-prefill --quant f32,q8_0 --profile \
    >"$S/p.txt" 2>"$S/perr.txt"; then
    grep '^{' "$S/p.txt" >"$S/pjson.txt"
    "$PY" - "$S/pjson.txt" <<'EOF' || fail "bench --profile decode JSON (stdout in $S/p.txt)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["quant"] for r in rows] == ["f32", "q8_0"], rows
for r in rows:
    p = r["decode_profile"]
    parts = ["qkv", "o", "gate_up", "down", "lm_head", "attention", "other"]
    assert all(p[k + "_ms"] >= 0 for k in parts), p
    assert sum(p[k + "_ms"] for k in parts) <= p["step_ms"] * 1.0001, p
    assert all(p[k + "_bytes"] > 0 for k in parts[:5]) and "attention_bytes" not in p, p
    assert "profile" not in r  # no training step to break down
assert rows[1]["decode_profile"]["gate_up_bytes"] < rows[0]["decode_profile"]["gate_up_bytes"]
EOF
    grep -q '^  decode step profile: mean of 4 timed steps' "$S/p.txt" || fail "bench --profile prints no decode table"
else
    fail "bench --no-train --profile exited with status $?: $(tail -3 "$S/perr.txt")"
fi

# ---- the training step's profile: its parts (products and the rest) add up to at most the step,
# and the LM head's FLOPs are those of the products it ran (a byte vocabulary's batch is one chunk
# of the loss: forward and backward, 6·B·T·C·V), which its GFLOP/s line divides
if timeout 60 "$DT" bench --arch diff --d-model 64 --layers 1 --heads 4 --ffn 96 --vocab 64 --batch 2 --seq 16 \
    --steps 2 --threads 2 --no-prefill --no-decode --profile >"$S/tp.txt" 2>"$S/tperr.txt"; then
    "$PY" - "$S/tp.txt" <<'EOF' || fail "bench --profile training (stdout in $S/tp.txt)"
import json, re, sys
text = open(sys.argv[1]).read()
rows = [json.loads(l) for l in text.splitlines() if l.startswith("{")]
assert len(rows) == 1, rows
p = rows[0]["profile"]
parts = ["embedding", "norms", "rope", "swiglu", "zeroing", "attention_forward", "attention_backward", "lm_head",
         "loss", "grad_norm_clip", "adamw"]
total = sum(p[k + "_ms"] for k in parts) + sum(sum(v) for k, v in p.items() if k.startswith("mm_"))
# at most the step (no time counted twice); the rest is "between the parts", which on a loaded machine
# can hold a preempted moment, so it is held only to the step's remainder
assert 0 < total <= p["step_ms"] * 1.0001, (total, p)
m = re.search(r"^    between the parts +(-?[0-9.]+) ms", text, re.M)
assert m and abs(float(m.group(1)) - (p["step_ms"] - total)) <= 0.006, (m and m.group(1), p["step_ms"] - total)
assert p["lm_head_flops"] == 6 * 2 * 16 * 64 * 64, p["lm_head_flops"]
m = re.search(r"^    LM head products +[0-9.]+ ms +[0-9.]+% +([0-9.]+) GFLOP/s$", text, re.M)
assert m, "no LM head line"
want = p["lm_head_flops"] / p["lm_head_ms"] / 1e6
assert abs(float(m.group(1)) - want) <= 0.01 * want + 0.01, (m.group(1), want)
EOF
else
    fail "bench --profile (training) exited with status $?: $(tail -3 "$S/tperr.txt")"
fi

# ---- DIFF V2's training profile: its o products read H/2 heads, and its λ projection's FLOPs are
# counted where they are timed: forward in the attention forward, backward beside the q/k/v
# products (C 64, H 4 of 16, B·T 32: the attention's forward 69632, the λ projection's 2·32·64·2)
if timeout 60 "$DT" bench --arch v2 --d-model 64 --layers 1 --heads 4 --ffn 96 --vocab 64 --batch 2 --seq 16 \
    --steps 2 --threads 2 --no-prefill --no-decode --profile >"$S/v2p.txt" 2>"$S/v2perr.txt"; then
    "$PY" - "$S/v2p.txt" <<'EOF' || fail "bench --arch v2 --profile (stdout in $S/v2p.txt)"
import json, re, sys
text = open(sys.argv[1]).read()
p = [json.loads(l) for l in text.splitlines() if l.startswith("{")][0]["profile"]
for name, ms, flops in [("attention forward", p["attention_forward_ms"], 69632 + 8192),
                        ("o forward", p["mm_o_forward_ms"][0], 2 * 32 * 32 * 64),
                        ("q/k/v backward", p["mm_qkv_backward_ms"][0], 2 * 2 * 32 * 64 * (64 + 128) + 2 * 8192)]:
    m = re.search(r"^ +" + re.escape(name) + r" +[0-9.]+ ms +[0-9.]+% +([0-9.]+) GFLOP/s$", text, re.M)
    assert m, "no %s line" % name
    want = flops / ms / 1e6
    assert abs(float(m.group(1)) - want) <= 0.01 * want + 0.01, (name, m.group(1), want)
EOF
else
    fail "bench --arch v2 --profile exited with status $?: $(tail -3 "$S/v2perr.txt")"
fi

# ---- --help
if "$DT" bench --help >"$S/help.txt" 2>&1; then
    for flag in --arch --d-model --kv-heads --decode-tokens --no-train --json-only; do
        grep -q -- "$flag" "$S/help.txt" || fail "--help does not mention $flag"
    done
else
    fail "bench --help exited with status $?"
fi

# ---- bad values: non-zero exit (not a crash) and a message naming the flag
expect_error() { # FLAG_REGEX ARGS...
    local want=$1 rc
    shift
    timeout 30 "$DT" bench "$@" >"$S/bad.out" 2>"$S/bad.err"
    rc=$?
    if [ $rc -eq 0 ] || [ $rc -gt 127 ]; then
        fail "bench $* exited with status $rc"
    elif ! grep -q -e "$want" "$S/bad.err"; then
        fail "bench $*: stderr does not name $want: $(cat "$S/bad.err")"
    elif grep -q '^{' "$S/bad.out"; then
        fail "bench $*: printed results despite the error"
    fi
}
expect_error '--profile' --profile --no-train --no-decode
expect_error '--quant without f32 trains nothing' --profile --no-decode --quant q8_0 # only f32 trains
expect_error '--no-prefill and --no-decode' --quant f32,q8_0 --no-prefill --no-decode # a q8_0 copy left nothing
expect_error '--d-model' --d-model abc
expect_error '--seq' --seq 0
expect_error '--steps' --steps 5x
expect_error '--arch' --arch rnn
expect_error '--heads' --heads 3 --arch diff
expect_error '--heads' --heads 3 --head-dim 16 --arch v2 # V2 pairs its query heads
expect_error '--heads' --heads 3 --head-dim 16 --arch all # the third model is V2
expect_error "expected diff, transformer, v2, both or all" --arch v3
expect_error '--kv-heads' --heads 4 --kv-heads 3
expect_error '--d-model, --heads, --head-dim' --d-model 65536 --heads 1 # head_dim derived past its limit
expect_error 'unexpected-flag' --unexpected-flag

# ---- the machine: `info --system` names the CPU and the kernel path; DT_ISA forces a path, and
# a path that is unknown (or that this CPU lacks) is refused before any work
if "$DT" info --system >"$S/sys.txt" 2>&1; then
    grep -q '^cpu: ' "$S/sys.txt" || fail "info --system: no cpu line: $(cat "$S/sys.txt")"
    grep -Eq '^kernels: (portable|avx2|avx512) ' "$S/sys.txt" || fail "info --system: no kernels line"
else
    fail "info --system exited with status $?"
fi
DT_ISA=portable "$DT" info --system >"$S/sys.txt" 2>&1
grep -q '^kernels: portable .*forced by DT_ISA' "$S/sys.txt" || fail "DT_ISA=portable not in use: $(cat "$S/sys.txt")"
# OpenBLAS's core: a core named by OPENBLAS_CORETYPE is used and reported as set by it (Prescott:
# one every x86-64 CPU runs, and the CLI never replaces it)
OPENBLAS_CORETYPE=Prescott "$DT" info --system >"$S/sys.txt" 2>&1
grep -q '^matrix products: OpenBLAS, core Prescott (set by OPENBLAS_CORETYPE)' "$S/sys.txt" ||
    fail "OPENBLAS_CORETYPE=Prescott not reported: $(cat "$S/sys.txt")"
# without the variable OpenBLAS chooses, or, where its choice has no AVX-512 kernels on an AVX-512
# CPU (a CPU newer than it knows), the CLI names the AVX-512 core: on such a CPU the core is one
# with AVX-512 kernels either way
env -u OPENBLAS_CORETYPE -u DT_BLAS_CORE_CHOSEN "$DT" info --system >"$S/sys.txt" 2>&1
grep -Eq "^matrix products: OpenBLAS, core .* \((OpenBLAS's choice for this CPU|chosen by difftrans: OpenBLAS's own choice had no AVX-512 kernels)\)" "$S/sys.txt" ||
    fail "OpenBLAS's core choice not reported: $(cat "$S/sys.txt")"
if grep -Eq '^features: .*avx512f yes, avx512bw yes, avx512vl yes, avx512dq yes' "$S/sys.txt"; then
    grep -Eq '^matrix products: OpenBLAS, core (SkylakeX|Cooperlake|SapphireRapids) ' "$S/sys.txt" ||
        fail "an AVX-512 CPU without OpenBLAS's AVX-512 kernels: $(cat "$S/sys.txt")"
    grep -q '^note:' "$S/sys.txt" && fail "a note about the core where none is due: $(cat "$S/sys.txt")"
fi
# the CLI's own choice (its mark equal to the variable, as a child process inherits both) is
# reported as such, and never replaced
OPENBLAS_CORETYPE=Prescott DT_BLAS_CORE_CHOSEN=Prescott "$DT" info --system >"$S/sys.txt" 2>&1
grep -q "^matrix products: OpenBLAS, core Prescott (chosen by difftrans" "$S/sys.txt" ||
    fail "the CLI's choice of core not reported as its own: $(cat "$S/sys.txt")"
# DT_AVXVNNI=0 hides AVX-VNNI (the avx2 path as on a CPU without it), whatever the CPU has
DT_AVXVNNI=0 "$DT" info --system >"$S/sys.txt" 2>&1
grep -Eq '^features: avx2 (yes|no), fma (yes|no), avxvnni no,' "$S/sys.txt" ||
    fail "DT_AVXVNNI=0 did not hide AVX-VNNI: $(cat "$S/sys.txt")"
DT_ISA=sse9 timeout 30 "$DT" bench --json-only >"$S/bad.out" 2>"$S/bad.err"
rc=$?
if [ $rc -eq 0 ] || [ $rc -gt 127 ] || ! grep -q 'DT_ISA=sse9' "$S/bad.err"; then
    fail "DT_ISA=sse9: status $rc, stderr $(cat "$S/bad.err")"
fi

# ---- bench/comm_model.py: a cell recomputed by hand (tiny, 133568 parameters in 3 buckets, 2 nodes
# at 10 Gb/s, α 20 µs: 3·2·α + 4P/β = 0.547 ms, hidden by 1.5·t·1000 = 1 token), and bad values
# refused naming the flag (an unknown preset or a rate without "=" was a traceback or no column)
CM="$(dirname "$0")/../bench/comm_model.py"
if "$PY" "$CM" --rate tiny=1000 >"$S/cm.txt" 2>&1; then
    grep -q '^| tiny | 0.13 M (3) | 0.55 (1) | ' "$S/cm.txt" ||
        fail "comm_model.py: tiny at N=2: $(grep '^| tiny' "$S/cm.txt" | head -1)"
else
    fail "comm_model.py --rate tiny=1000 exited with status $?: $(tail -2 "$S/cm.txt")"
fi
for args in "--rate tiny" "--rate tiny=abc" "--rate huge=5" "--rate tiny=0" "--alpha-us -5 --predict tiny 2 1000"; do
    # shellcheck disable=SC2086 # the arguments split on purpose
    "$PY" "$CM" $args >"$S/cm.txt" 2>&1
    rc=$?
    flag=${args%% *}
    if [ $rc -ne 2 ] || ! grep -q "error: $flag " "$S/cm.txt" || grep -q Traceback "$S/cm.txt"; then
        fail "comm_model.py $args: status $rc: $(tail -1 "$S/cm.txt")"
    fi
done

# ---- bench/compare_tokenizers.sh: --help, and bad values refused naming the flag before any work
# (--reps 0 printed a table of 0.000 s and nan×; a missing value or a word was "unbound variable")
CT="$(dirname "$0")/../bench/compare_tokenizers.sh"
bash "$CT" --help >"$S/ct.txt" 2>&1 && grep -q '^usage: .*--reps N' "$S/ct.txt" ||
    fail "compare_tokenizers.sh --help: $(head -3 "$S/ct.txt")"
for args in "--reps 0" "--reps" "--mb x" "--threads 0" "--bogus"; do
    # shellcheck disable=SC2086 # the arguments split on purpose
    bash "$CT" $args >"$S/ct.txt" 2>&1
    rc=$?
    flag=${args%% *}
    if [ $rc -ne 2 ] || ! grep -q -- "$flag" "$S/ct.txt" || grep -q 'unbound variable' "$S/ct.txt"; then
        fail "compare_tokenizers.sh $args: status $rc: $(tail -1 "$S/ct.txt")"
    fi
done

# ---- bench/compare_torch.py: values that leave nothing to measure, or that failed only hours in,
# are refused naming the flag before any work (they ran, printed tables of dashes and exited 0)
TP=/usr/bin/python3
if "$TP" -c 'import torch' 2>/dev/null; then
    CTP="$(dirname "$0")/../bench/compare_torch.py"
    # (each start imports torch: a few cases only)
    for case in "--configs|--configs ," "--d-seqs|--d-seqs x" "--mem-limit-gb|--mem-limit-gb -1" \
        "--difftrans|--skip-torch --difftrans $S/none"; do
        flag=${case%%|*} args=${case#*|}
        # shellcheck disable=SC2086 # the arguments split on purpose
        timeout 60 "$TP" "$CTP" $args >"$S/ctp.txt" 2>&1
        rc=$?
        if [ $rc -ne 2 ] || ! grep -q -- "error: .*$flag" "$S/ctp.txt"; then
            fail "compare_torch.py $args: status $rc: $(tail -1 "$S/ctp.txt")"
        fi
    done
    # its Targets table judges every target of docs/PERFORMANCE.md it measures: the sgemm-peak
    # shares too (A ≥ 80%, B and C ≥ 70%), which it left out
    "$TP" - "$(dirname "$0")/../bench" <<'EOF' || fail "compare_torch.py: targets"
import sys
sys.path.insert(0, sys.argv[1])
import compare_torch as c
rows = [{"config": n, "arch": "llama", "ratio_train": 2.0, "dt_peak_fraction": f, "dt_decode_bound_fraction": None}
        for n, f in (("A", 0.79), ("B", 0.71))]
got = {t: met for t, _, met in c.targets(rows, [])}
assert got.get("difftrans training ≥ 80% of the sgemm peak, A llama") is False, got
assert got.get("difftrans training ≥ 70% of the sgemm peak, B llama") is True, got
EOF
    # the report says when the two sides ran different OpenBLAS cores (the default inherits the
    # environment, and difftrans may name a core for itself that PyTorch does not get)
    "$TP" - "$(dirname "$0")/../bench" <<'EOF' || fail "compare_torch.py: core_lines"
import sys
sys.path.insert(0, sys.argv[1])
import compare_torch as c
differ = c.core_lines([{"dt_blas_core": "Cooperlake", "pt_blas_core": "Prescott"}], {})
same = c.core_lines([{"dt_blas_core": "Cooperlake", "pt_blas_core": "Cooperlake"}],
                    {"openblas_coretype": "Cooperlake"})
assert len(differ) == 2 and differ[1].startswith("WARNING: the two sides ran different OpenBLAS cores"), differ
assert same == ["OpenBLAS core: difftrans Cooperlake, PyTorch Cooperlake "
                "(OPENBLAS_CORETYPE=Cooperlake for both)."], same
EOF
else
    echo "compare_torch.py's arguments not checked: no torch for $TP"
fi

# ---- bench/ttft.py, serve_bench.py, llama_cpp_bench.py: bad values refused naming the flag before
# any model is made (tracebacks, or failures after the 220M-parameter model was written)
B="$(dirname "$0")/../bench"
for case in "--lengths|ttft.py --lengths x" "--reps|ttft.py --reps 0" "--models|ttft.py --models $S/none" \
    "--streams|serve_bench.py --streams 1,x --work $S/sb" "--schemes|serve_bench.py --schemes q5 --work $S/sb" \
    "--reps|serve_bench.py --reps 0 --work $S/sb" "--prompts|llama_cpp_bench.py --prompts 0 --work $S/lb" \
    "--schemes|llama_cpp_bench.py --schemes w8a8 --work $S/lb" "--decode|llama_cpp_bench.py --decode 0 --work $S/lb"; do
    flag=${case%%|*} args=${case#*|}
    # shellcheck disable=SC2086 # the arguments split on purpose
    timeout 30 "$PY" "$B"/$args >"$S/sc.txt" 2>&1
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "error: .*$flag" "$S/sc.txt" || [ -e "$S/sb" ] || [ -e "$S/lb" ]; then
        fail "bench/$args: status $rc: $(tail -1 "$S/sc.txt")"
    fi
    rm -rf "$S/sb" "$S/lb"
done

# ---- bench/scaling.sh: a repeated configuration runs again (every run after the first wrote into
# the --out of the one before, which train refuses: "already holds a checkpoint"), and its rows
# and JSON lines carry the step's parts
if command -v mpirun >/dev/null; then
    if RANKS=1 PRESET=tiny BATCH=2 SEQ=16 STEPS=2 REPS=2 timeout 300 bash "$(dirname "$0")/../bench/scaling.sh" "$DT" \
        >"$S/scaling.txt" 2>&1; then
        "$PY" - "$S/scaling.txt" <<'EOF' || fail "bench/scaling.sh output (in $S/scaling.txt)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert [(r["ranks"], r["mode"], r["preset"]) for r in rows] == [(1, "plain", "tiny")], rows
assert rows[0]["step_ms"] > 0 and rows[0]["tokens_per_s"] > 0 and rows[0]["optimizer_mb_per_rank"] > 0, rows
EOF
    else
        fail "bench/scaling.sh (RANKS=1 REPS=2) exited with status $?: $(tail -3 "$S/scaling.txt")"
    fi
else
    echo "bench/scaling.sh not run: no mpirun"
fi

# ---- bench/llama_cpp_bench.py draws enough token ids for its 64-token agreement prompt whatever
# --prompts and --decode-at ask (with 16 and 16 the agreement ran on 16 tokens, said to be 64)
"$PY" - "$(dirname "$0")/../bench" <<'EOF' || fail "llama_cpp_bench.py: ids_needed"
import sys
sys.path.insert(0, sys.argv[1])
import llama_cpp_bench as b
assert b.ids_needed([16], 16) == b.AGREE_TOKENS == 64, b.ids_needed([16], 16)
assert b.ids_needed([128, 1024], 64) == 1024 and b.ids_needed([16], 100) == 100
EOF

if [ $FAILS -ne 0 ]; then
    echo "cli_bench: $FAILS check(s) failed"
    exit 1
fi
echo "cli_bench: all checks passed"
