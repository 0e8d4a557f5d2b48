#!/usr/bin/env bash
# cli_workflow.sh — the happy paths of the difftrans CLI, end to end.
#
# usage: bash tests/cli_workflow.sh PATH_TO_difftrans SCRATCH_DIR
#
#   init     both architectures (and --subln): files written, same seed → same bytes
#   info     config, parameter count, λ per layer (DIFF only), subln flag
#   forward  logits [B,T,V] + loss (recomputed from the logits) and grad.<name> for every tensor
#   generate greedy and seeded sampling are deterministic, ids in range, and greedy KV-cache
#            decoding agrees with the argmax of a full `forward` pass
#   export   --hf of a --subln model: no subln tensor, no "difftrans" key, same logits (1e-5)
#   train    checkpoint files, one metrics.jsonl line per step, val loss reported; SIGINT saves
#            and exits 0, --resume finishes the run, and interrupted+resumed == uninterrupted;
#            --stop-at 10 of 20 + --resume == 20 steps straight (byte-identical model)
#   eval     loss, perplexity and bits per byte, consistent with each other
# Tiny models only (--preset tiny, --batch 2, --seq 32, --threads 1). Prints a summary and
# exits 1 when any check failed.
set -u

. "$(dirname "$0")/cli_lib.sh" "$@"
[ -n "$PY" ] || {
    echo "$0: python3 is needed to check the outputs" >&2
    exit 2
}

# ---------------------------------------------------------------- python checks

cat >"$S/wf.py" <<'EOF'
# wf.py CHECK ARGS... — output checks for cli_workflow.sh (struct/array/json only).
# Each check prints what is wrong and exits 1, or exits 0 silently.
import array, json, math, struct, sys


def st_load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    return header, data


def st_tensor(header, data, name):
    t = header[name]
    if t["dtype"] != "F32":
        raise SystemExit("%s: dtype %s, expected F32" % (name, t["dtype"]))
    b, e = t["data_offsets"]
    a = array.array("f")
    a.frombytes(data[b:e])
    if sys.byteorder != "little":
        a.byteswap()
    numel = 1
    for d in t["shape"]:
        numel *= d
    if len(a) != numel:
        raise SystemExit("%s: %d values for shape %s" % (name, len(a), t["shape"]))
    return a


def read_ids(path):
    return [[int(x) for x in line.split()] for line in open(path) if line.split()]


def problems_exit(problems):
    if problems:
        print("\n".join(problems[:20]))
        sys.exit(1)


def forward_check(out, ids_path, model_st, grads):
    """logits [B,T,V] and a scalar loss equal to the mean next-token CE recomputed from the
    logits; with grads, grad.<name> with the shape of every model tensor, all finite."""
    ids = read_ids(ids_path)
    B, T = len(ids), len(ids[0])
    h, d = st_load(out)
    mh, _ = st_load(model_st)
    problems = []
    if "logits" not in h or "loss" not in h:
        problems_exit(["missing logits or loss; tensors: %s" % sorted(h)[:10]])
    V = h["logits"]["shape"][-1] if h["logits"]["shape"] else 0
    if h["logits"]["shape"] != [B, T, V] or V < 2:
        problems.append("logits shape %s, expected [%d, %d, V]" % (h["logits"]["shape"], B, T))
    if h["loss"]["shape"] not in ([], [1]):
        problems.append("loss shape %s, expected [] (a scalar)" % h["loss"]["shape"])
    problems_exit(problems)
    logits = st_tensor(h, d, "logits")
    loss = st_tensor(h, d, "loss")[0]
    if not all(math.isfinite(x) for x in logits):
        problems.append("logits hold non-finite values")
    total, count = 0.0, 0
    for b in range(B):
        for t in range(T - 1):
            row = logits[(b * T + t) * V:(b * T + t + 1) * V]
            m = max(row)
            lse = m + math.log(sum(math.exp(x - m) for x in row))
            total += lse - row[ids[b][t + 1]]
            count += 1
    ref = total / count
    if not (math.isfinite(loss) and abs(loss - ref) <= 1e-4 * max(1.0, abs(ref))):
        problems.append("loss %r but the logits give %r" % (loss, ref))
    if grads:
        want = {"grad." + k: v["shape"] for k, v in mh.items()}
        got = {k: v["shape"] for k, v in h.items() if k.startswith("grad.")}
        if set(want) != set(got):
            problems.append("grad tensors differ from the model's: missing %s, extra %s"
                            % (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
        nonzero = 0
        for k in sorted(set(want) & set(got)):
            if want[k] != got[k]:
                problems.append("%s: shape %s, the parameter has %s" % (k, got[k], want[k]))
                continue
            g = st_tensor(h, d, k)
            if not all(math.isfinite(x) for x in g):
                problems.append("%s holds non-finite values" % k)
            nonzero += any(x != 0 for x in g)
        if nonzero < len(want) // 2:
            problems.append("only %d of %d gradients are nonzero" % (nonzero, len(want)))
    else:
        extra = [k for k in h if k not in ("logits", "loss")]
        if extra:
            problems.append("without --grads the file should hold only logits and loss, has %s" % extra[:5])
    problems_exit(problems)


def logits_close(a, b, tol):
    ha, da = st_load(a)
    hb, db = st_load(b)
    la, lb = st_tensor(ha, da, "logits"), st_tensor(hb, db, "logits")
    if ha["logits"]["shape"] != hb["logits"]["shape"]:
        problems_exit(["logits shapes differ: %s vs %s" % (ha["logits"]["shape"], hb["logits"]["shape"])])
    diff = max(abs(x - y) for x, y in zip(la, lb))
    dl = abs(st_tensor(ha, da, "loss")[0] - st_tensor(hb, db, "loss")[0])
    problems_exit(["max |logit difference| %g > %g" % (diff, tol)] if diff > tol else []
                  + (["loss differs by %g" % dl] if dl > tol else []))


def perturb_subln(path):
    """Set every subln.weight to values in [0.5, 1.5] so that folding it into o_proj matters."""
    raw = bytearray(open(path, "rb").read())
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    names = [k for k in h if k.endswith(".self_attn.subln.weight")]
    if not names:
        problems_exit(["no subln.weight tensor in %s" % path])
    for i, k in enumerate(names):
        b, e = h[k]["data_offsets"]
        for j in range((e - b) // 4):
            struct.pack_into("<f", raw, 8 + n + b + 4 * j, 0.5 + ((j * 37 + i * 11) % 101) / 100.0)
    open(path, "wb").write(raw)


def no_subln(path):
    h, _ = st_load(path)
    bad = [k for k in h if "subln" in k]
    problems_exit(["subln tensors in the export: %s" % bad[:5]] if bad else [])


def has_tensors(path, suffix, count):
    h, _ = st_load(path)
    n = sum(1 for k in h if k.endswith(suffix))
    problems_exit([] if n == count else ["%d tensors named *%s, expected %d" % (n, suffix, count)])


def hf_config(path, model_type):
    cfg = json.load(open(path))

    def keys(o):
        if isinstance(o, dict):
            for k, v in o.items():
                yield k
                yield from keys(v)
        elif isinstance(o, list):
            for v in o:
                yield from keys(v)
    problems = []
    if any("difftrans" in k or "subln" in k for k in keys(cfg)):
        problems.append("config.json carries our own keys: %s"
                        % [k for k in keys(cfg) if "difftrans" in k or "subln" in k])
    if cfg.get("model_type") != model_type:
        problems.append("model_type %r, expected %r" % (cfg.get("model_type"), model_type))
    problems_exit(problems)


def metrics(path, steps, layers, first=1):
    problems = []
    lines = open(path).read().splitlines()
    if len(lines) != steps - first + 1:
        problems.append("%d lines for steps %d..%d" % (len(lines), first, steps))
    val = 0
    for i, line in enumerate(lines):
        try:
            m = json.loads(line)
        except ValueError:
            problems.append("line %d is not JSON: %.80s" % (i + 1, line))
            continue
        for k in ("step", "train_loss", "lr", "grad_norm", "tokens_per_s", "lambda"):
            if k not in m:
                problems.append("line %d lacks %s" % (i + 1, k))
        if m.get("step") != first + i:
            problems.append("line %d has step %r, expected %d" % (i + 1, m.get("step"), first + i))
        for k in ("train_loss", "lr", "grad_norm", "tokens_per_s"):
            if k in m and not (isinstance(m[k], (int, float)) and math.isfinite(m[k])):
                problems.append("line %d: %s = %r" % (i + 1, k, m[k]))
        lam = m.get("lambda")
        if not (isinstance(lam, list) and len(lam) == layers and all(isinstance(x, (int, float)) for x in lam)):
            problems.append("line %d: lambda %r is not a list of %d numbers" % (i + 1, lam, layers))
        if "val_loss" in m:
            val += 1
            if not math.isfinite(m["val_loss"]):
                problems.append("line %d: val_loss %r" % (i + 1, m["val_loss"]))
    if lines and "val_loss" not in json.loads(lines[-1]):
        problems.append("the last step has no val_loss")
    problems_exit(problems)


def state_step(path, want):
    st = json.load(open(path))
    step = st.get("step")
    if want.startswith("<"):
        ok = isinstance(step, int) and 0 < step < int(want[1:])
    else:
        ok = step == int(want)
    problems_exit([] if ok else ["train_state.json step %r, expected %s" % (step, want)])


def greedy_vs_forward(prompt, gen_path, fwd):
    """Greedy KV-cache decoding must pick, at every position, the argmax of the full forward
    pass over prompt + generated tokens (up to a near-tie)."""
    p = [int(x) for x in prompt.split()]
    g = [int(x) for x in open(gen_path).read().split()]
    h, d = st_load(fwd)
    B, T, V = h["logits"]["shape"]
    logits = st_tensor(h, d, "logits")
    problems = []
    for i, tok in enumerate(g):
        pos = len(p) - 1 + i
        row = logits[pos * V:(pos + 1) * V]
        best = max(row)
        if row[tok] < best - 1e-4:
            problems.append("generated token %d = %d has logit %g, the forward argmax %d has %g"
                            % (i, tok, row[tok], row.index(best), best))
    problems_exit(problems)


def eval_line(path):
    text = open(path).read()
    import re
    m = re.search(r"loss ([0-9.]+)(?: per token)? \| perplexity ([0-9.]+) \| ([0-9.]+) bits per byte", text)
    if not m:
        problems_exit(["no 'loss X | perplexity Y | Z bits per byte' in: %r" % text[:300]])
    loss, ppl, bpb = (float(x) for x in m.groups())
    problems = []
    if not 0 < loss < 20:
        problems.append("loss %g is implausible" % loss)
    if abs(ppl - math.exp(loss)) > 1e-3 * ppl + 1e-3:
        problems.append("perplexity %g != exp(loss %g) = %g" % (ppl, loss, math.exp(loss)))
    if abs(bpb - loss / math.log(2)) > 1e-3:
        problems.append("bits per byte %g != loss / ln 2 = %g" % (bpb, loss / math.log(2)))
    problems_exit(problems)


check, args = sys.argv[1], sys.argv[2:]
{"forward": lambda: forward_check(args[0], args[1], args[2], len(args) > 3),
 "logits_close": lambda: logits_close(args[0], args[1], float(args[2])),
 "perturb_subln": lambda: perturb_subln(args[0]),
 "no_subln": lambda: no_subln(args[0]),
 "has_tensors": lambda: has_tensors(args[0], args[1], int(args[2])),
 "hf_config": lambda: hf_config(args[0], args[1]),
 "metrics": lambda: metrics(args[0], int(args[1]), int(args[2])),
 "state_step": lambda: state_step(args[0], args[1]),
 "greedy_vs_forward": lambda: greedy_vs_forward(args[0], args[1], args[2]),
 "eval_line": lambda: eval_line(args[0]),
 }[check]()
EOF
wf() { "$PY" "$S/wf.py" "$@"; }

DATA=/usr/share/common-licenses/GPL-3
if [ ! -r "$DATA" ]; then
    DATA=$S/corpus.txt
    for i in $(seq 1 400); do
        echo "line $i: the quick brown fox jumps over the lazy dog; differential attention cancels noise."
    done >"$DATA"
fi
IDS=$S/ids.txt
printf '1 2 3 4 5 6 7 8\n72 101 108 108 111 32 119 111\n' >"$IDS"
L=2 # layers of the tiny preset

# ---------------------------------------------------------------- top level and --help

expect_ok "difftrans --help" "$DT" --help && out_has "difftrans --help lists the commands" "$S/last.out" \
    train generate forward eval init info export
expect_ok "difftrans --version" "$DT" --version
for c in train generate forward eval init info export; do
    expect_ok "difftrans $c --help" "$DT" $c --help && out_has "difftrans $c --help prints usage" "$S/last.out" "usage: difftrans $c"
done

# ---------------------------------------------------------------- init and info

DIFF=$S/diff
LLAMA=$S/llama
SUBLN=$S/subln
expect_ok "init diff" "$DT" init --preset tiny --arch diff --out "$DIFF" && {
    out_has "init diff output" "$S/last.out" 'diffllama' 'parameters'
    check "init diff wrote config.json, model.safetensors" test -s "$DIFF/config.json" -a -s "$DIFF/model.safetensors"
}
expect_ok "init transformer" "$DT" init --preset tiny --arch transformer --out "$LLAMA" &&
    out_has "init transformer output" "$S/last.out" 'llama' 'parameters'
expect_ok "init diff --subln" "$DT" init --preset tiny --subln --out "$SUBLN" &&
    check "init --subln writes one subln.weight per layer" wf has_tensors "$SUBLN/model.safetensors" .self_attn.subln.weight $L
check "init diff without --subln writes no subln.weight" wf has_tensors "$DIFF/model.safetensors" .self_attn.subln.weight 0
expect_ok "init diff again, same seed" "$DT" init --preset tiny --out "$S/diff_again"
check "init is deterministic for a seed" cmp "$DIFF/model.safetensors" "$S/diff_again/model.safetensors"
expect_ok "init diff, another seed" "$DT" init --preset tiny --seed 7 --out "$S/diff_seed7"
if cmp -s "$DIFF/model.safetensors" "$S/diff_seed7/model.safetensors"; then
    fail "init --seed 7 gives the same weights as the default seed"
else pass; fi

if expect_ok "info diff" "$DT" info "$DIFF"; then
    out_has "info diff: config and λ table" "$S/last.out" 'diffllama' 'layers 2' 'parameters' 'subln weight no' \
        '^ *0 +-?[0-9]+\.[0-9]+ +0\.20000' '^ *1 +-?[0-9]+\.[0-9]+ +0\.35551'
    n=$(grep -cE '^ *[0-9]+ +-?[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$' "$S/last.out")
    [ "$n" -eq $L ] && pass || fail "info diff: $n λ rows, expected one per layer ($L)" "$(tr '\n' '|' <"$S/last.out")"
fi
if expect_ok "info transformer" "$DT" info "$LLAMA"; then
    out_has "info transformer: config" "$S/last.out" 'llama' 'parameters'
    n=$(grep -cE '^ *[0-9]+ +-?[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$' "$S/last.out")
    [ "$n" -eq 0 ] && pass || fail "info transformer prints a λ table" "$(tr '\n' '|' <"$S/last.out")"
fi
expect_ok "info diff --subln" "$DT" info "$SUBLN" && out_has "info --subln says so" "$S/last.out" 'subln weight yes'

# ---------------------------------------------------------------- forward

for m in diff llama subln; do
    expect_ok "forward $m" "$DT" forward "$S/$m" --input "$IDS" --output "$S/fw_$m.safetensors" --threads 1 &&
        check "forward $m: logits [2,8,V] and loss" wf forward "$S/fw_$m.safetensors" "$IDS" "$S/$m/model.safetensors"
    expect_ok "forward $m --grads" "$DT" forward "$S/$m" --input "$IDS" --output "$S/fwg_$m.safetensors" --grads \
        --threads 1 &&
        check "forward $m --grads: logits, loss, grad.* for every parameter" \
            wf forward "$S/fwg_$m.safetensors" "$IDS" "$S/$m/model.safetensors" grads
    check "forward $m: --grads does not change logits" wf logits_close "$S/fw_$m.safetensors" "$S/fwg_$m.safetensors" 0
done

# ---------------------------------------------------------------- generate

for m in diff llama; do
    G=("$DT" generate "$S/$m" --temperature 0 --prompt-ids "1 2 3" -n 10 --print-ids --threads 1)
    expect_ok "generate $m greedy" "${G[@]}" && cp "$S/last.out" "$S/greedy_$m.1"
    expect_ok "generate $m greedy, again" "${G[@]}" && cp "$S/last.out" "$S/greedy_$m.2"
    check "generate $m greedy is deterministic" cmp "$S/greedy_$m.1" "$S/greedy_$m.2"
    if [ -f "$S/greedy_$m.1" ]; then
        ids=$(cat "$S/greedy_$m.1")
        if [[ "$ids" =~ ^[0-9]+( [0-9]+){9}$ ]] && ! echo "$ids" | tr ' ' '\n' | awk '$1 >= 256 {bad=1} END {exit !bad}'; then
            pass
        else
            fail "generate $m --print-ids: expected 10 ids in [0, 256) on one line" "got: '$ids'"
        fi
        # KV-cache decoding vs the full forward pass over prompt + generated tokens.
        echo "1 2 3 $ids" >"$S/greedy_$m.ids"
        expect_ok "forward $m on prompt + greedy output" "$DT" forward "$S/$m" --input "$S/greedy_$m.ids" \
            --output "$S/greedy_$m.safetensors" --threads 1 &&
            check "generate $m: greedy KV-cache decoding = argmax of forward" \
                wf greedy_vs_forward "1 2 3" "$S/greedy_$m.1" "$S/greedy_$m.safetensors"
    fi
    R=("$DT" generate "$S/$m" --temperature 1 --top-k 50 --top-p 0.9 --seed 123 --prompt-ids "5 6" -n 20 --print-ids --threads 1)
    expect_ok "generate $m sampling" "${R[@]}" && cp "$S/last.out" "$S/sample_$m.1"
    expect_ok "generate $m sampling, same seed" "${R[@]}" && cp "$S/last.out" "$S/sample_$m.2"
    check "generate $m: same --seed, same sample" cmp "$S/sample_$m.1" "$S/sample_$m.2"
    # --warmup runs the prompt once first: the printed sample is the one without it, and --timings says so
    expect_ok "generate $m sampling, --warmup --timings" "${R[@]}" --warmup --timings &&
        check "generate $m: --warmup leaves the sample as it was" cmp "$S/sample_$m.1" "$S/last.out" &&
        out_has "generate $m --timings prints the prompt's time" "$S/last.err" '^timings: prompt 2 tokens in '
    n=$(wc -w <"$S/sample_$m.1" 2>/dev/null || echo 0)
    [ "$n" -eq 20 ] && pass || fail "generate $m sampling -n 20 printed $n ids"
done
expect_ok "generate with a text prompt" "$DT" generate "$DIFF" --prompt "Hello" -n 5 --seed 1 --threads 1 &&
    out_has "generate --prompt echoes the prompt" "$S/last.out" '^Hello'
expect_ok "generate -n 0" "$DT" generate "$DIFF" --prompt-ids "1 2" -n 0 --print-ids --threads 1
expect_ok "generate up to max_position_embeddings exactly" "$DT" generate "$DIFF" --prompt-ids "1 2 3" -n 253 \
    --temperature 0 --print-ids --threads 1 && {
    n=$(wc -w <"$S/last.out")
    [ "$n" -eq 253 ] && pass || fail "generate -n 253 printed $n ids"
}

# ---------------------------------------------------------------- export --hf

# Make the subln weights matter, then export: the HF checkpoint folds them into o_proj.
check "perturb subln weights" wf perturb_subln "$SUBLN/model.safetensors"
expect_ok "forward subln (perturbed)" "$DT" forward "$SUBLN" --input "$IDS" --output "$S/fw_subln_p.safetensors" --threads 1
if wf logits_close "$S/fw_subln.safetensors" "$S/fw_subln_p.safetensors" 1e-3 >/dev/null 2>&1; then
    fail "perturbing the subln weights did not change the logits (the export check below would prove nothing)"
else pass; fi
if expect_ok "export --hf of a --subln model" "$DT" export "$SUBLN" "$S/subln_hf" --hf; then
    check "export --hf: no subln tensor" wf no_subln "$S/subln_hf/model.safetensors"
    check "export --hf: no difftrans key in config.json" wf hf_config "$S/subln_hf/config.json" diffllama
    expect_ok "forward on the HF export" "$DT" forward "$S/subln_hf" --input "$IDS" --output "$S/fw_subln_hf.safetensors" \
        --threads 1 &&
        check "export --hf: same logits within 1e-5" wf logits_close "$S/fw_subln_p.safetensors" "$S/fw_subln_hf.safetensors" 1e-5
    expect_ok "info on the HF export" "$DT" info "$S/subln_hf" && out_has "HF export loads without subln" "$S/last.out" \
        'subln weight no'
fi
expect_ok "export (native) of a --subln model" "$DT" export "$SUBLN" "$S/subln_native" &&
    check "export (native) keeps the subln tensors" wf has_tensors "$S/subln_native/model.safetensors" \
        .self_attn.subln.weight $L
for m in diff llama; do
    mt=diffllama
    [ $m = llama ] && mt=llama
    expect_ok "export --hf $m" "$DT" export "$S/$m" "$S/${m}_hf" --hf && {
        check "export --hf $m: HF config" wf hf_config "$S/${m}_hf/config.json" $mt
        expect_ok "forward on export --hf $m" "$DT" forward "$S/${m}_hf" --input "$IDS" --output "$S/fw_${m}_hf.safetensors" \
            --threads 1 &&
            check "export --hf $m: same logits" wf logits_close "$S/fw_$m.safetensors" "$S/fw_${m}_hf.safetensors" 1e-6
    }
done

# ---------------------------------------------------------------- train and eval

TRAIN=("$DT" train --preset tiny --data "$DATA" --batch 2 --seq 32 --threads 1)
T1=$S/train_diff
if expect_ok "train diff 20 steps" "${TRAIN[@]}" --out "$T1" --steps 20; then
    cp "$S/last.err" "$S/train_diff.err"
    for f in config.json model.safetensors optimizer.safetensors train_state.json metrics.jsonl; do
        check "train wrote $f" test -s "$T1/$f"
    done
    check "train metrics.jsonl: one line per step with step, train_loss, lr, grad_norm, tokens_per_s, lambda" \
        wf metrics "$T1/metrics.jsonl" 20 $L
    check "train_state.json records step 20" wf state_step "$T1/train_state.json" 20
    out_has "train reports the validation loss" "$S/train_diff.err" 'val loss [0-9]+\.[0-9]+'
    expect_ok "info on the trained model" "$DT" info "$T1"
    expect_ok "generate from the trained model" "$DT" generate "$T1" --prompt "The " -n 20 --seed 3 --threads 1
    if expect_ok "eval the trained model" "$DT" eval "$T1" --data "$DATA" --seq 32 --batch 4 --threads 1; then
        out_has "eval prints loss, perplexity and bits per byte" "$S/last.out" 'loss' 'perplexity' 'bits per byte'
        check "eval: perplexity = exp(loss), bits per byte = loss / ln 2" wf eval_line "$S/last.out"
    fi
    expect_ok "eval on a file shorter than --seq" "$DT" eval "$T1" --data "$IDS" --seq 256 --threads 1
fi
expect_ok "train transformer 5 steps" "${TRAIN[@]}" --arch transformer --out "$S/train_llama" --steps 5 &&
    check "train transformer metrics.jsonl" wf metrics "$S/train_llama/metrics.jsonl" 5 $L
expect_ok "train diff --subln 5 steps" "${TRAIN[@]}" --subln --out "$S/train_subln" --steps 5 &&
    check "train --subln keeps subln.weight" wf has_tensors "$S/train_subln/model.safetensors" .self_attn.subln.weight $L

# Resume equals an uninterrupted run: B stops after step 10 (--stop-at keeps the schedule of
# --steps 20, as a Ctrl-C would) and is resumed; A runs straight through. Bit for bit equal.
RA=$S/resume_A
RB=$S/resume_B
expect_ok "run A: 20 steps" "${TRAIN[@]}" --warmup 5 --eval-interval 5 --steps 20 --out "$RA" --quiet
expect_ok "run B: stop at step 10 of 20" "${TRAIN[@]}" --warmup 5 --eval-interval 5 --steps 20 --stop-at 10 --out "$RB" --quiet &&
    check "run B: train_state.json at step 10" wf state_step "$RB/train_state.json" 10
expect_ok "run B: --resume" "$DT" train --resume --out "$RB" --threads 1 --quiet && {
    check "run B: train_state.json at step 20" wf state_step "$RB/train_state.json" 20
    check "run B: metrics.jsonl holds steps 1..20 once each" wf metrics "$RB/metrics.jsonl" 20 $L
}
check "resume: model.safetensors of A and B are byte-identical" cmp "$RA/model.safetensors" "$RB/model.safetensors"
check "resume: optimizer.safetensors of A and B are byte-identical" cmp "$RA/optimizer.safetensors" "$RB/optimizer.safetensors"

# SIGINT: saves a checkpoint and exits 0; --resume finishes; the result equals a run that was
# never interrupted.
SIG=$S/sigint
SIGSTEPS=400
SIGOPTS=(--steps "$SIGSTEPS" --save-interval 0 --eval-interval 0 --warmup 10)
"${TRAIN[@]}" "${SIGOPTS[@]}" --out "$SIG" >"$S/sigint.out" 2>"$S/sigint.err" </dev/null &
pid=$!
# Signal once the run is underway (its handler is installed and steps are being logged).
for _ in $(seq 1 1500); do
    lines=$(cat "$SIG/metrics.jsonl" 2>/dev/null | wc -l)
    [ "$lines" -ge 5 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.02
done
sleep 0.2
if kill -0 $pid 2>/dev/null; then
    kill -INT $pid
    wait $pid
    rc=$?
    if [ $rc -eq 0 ]; then pass; else
        fail "train after SIGINT: exit status $rc, expected 0" "stderr: $(tail -c 600 "$S/sigint.err" | tr '\n' '|')"
    fi
    out_has "train after SIGINT says the checkpoint was saved" "$S/sigint.err" 'checkpoint saved|saved'
    check "train after SIGINT: train_state.json present" test -s "$SIG/train_state.json"
    check "train after SIGINT: stopped before the end" wf state_step "$SIG/train_state.json" "<$SIGSTEPS"
    for f in config.json model.safetensors optimizer.safetensors; do check "train after SIGINT: $f present" test -s "$SIG/$f"; done
    if expect_ok "train --resume after SIGINT" timeout 300 "$DT" train --resume --out "$SIG" --threads 1; then
        check "resumed run reached step $SIGSTEPS" wf state_step "$SIG/train_state.json" $SIGSTEPS
        check "resumed run: metrics.jsonl holds steps 1..$SIGSTEPS once each" wf metrics "$SIG/metrics.jsonl" $SIGSTEPS $L
        out_has "resumed run says it resumed" "$S/last.err" 'resum'
    fi
    expect_ok "uninterrupted run with the same options" "${TRAIN[@]}" "${SIGOPTS[@]}" --out "$S/sigint_ref" --quiet &&
        check "interrupted + resumed model == uninterrupted model" cmp "$SIG/model.safetensors" "$S/sigint_ref/model.safetensors"
else
    wait $pid
    fail "SIGINT test: the run ended (status $?) before it could be interrupted" \
        "stderr: $(tail -c 600 "$S/sigint.err" | tr '\n' '|')"
fi

# ---------------------------------------------------------------- summary

left=$(find "$S" -name '*.tmp.*')
if [ -z "$left" ]; then pass; else fail "temporary files left in $S" "$left"; fi

finish cli_workflow
