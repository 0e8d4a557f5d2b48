#!/usr/bin/python3
"""Generate the golden cases that `check_golden.py` compares `difftrans forward` against.

    /usr/bin/python3 tests/golden/make_golden.py                 # rewrite tests/golden/cases/
    /usr/bin/python3 tests/golden/make_golden.py --out DIR       # write the cases elsewhere
    /usr/bin/python3 tests/golden/make_golden.py --selftest      # check reference.py itself

Every case directory holds config.json, model.safetensors (the checkpoint, F32/F16/BF16),
ids.txt (B lines of T token ids) and expected.safetensors: `logits` F32 [B, T, V], `loss` F32 []
and `grad.<name>` F32 for every parameter tensor, from reference.py. Weights and ids come from
numpy's PCG64 generator with a fixed seed per case, so config.json, model.safetensors and ids.txt
are byte-for-byte reproducible on any machine; the expected outputs are reproducible up to
float32 rounding. Cases that store F16/BF16 weights get outputs computed from the rounded
weights (what a loader widening them to float32 sees).

diff_subln also gets expected_hf_export.safetensors: the `logits`/`loss` of the HF-semantics
model after `difftrans export --hf` (subln folded into o_proj) and the folded
`weight.model.layers.N.self_attn.o_proj.weight` tensors.
"""

import argparse
import json
import math
import os
import shutil
import sys
import zlib

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# Sizes are kept tiny so that the committed files stay small. Each case varies something a C
# implementation could get wrong: GQA grouping, tying, head_dim != C/H, an odd number of
# differential heads, rope_theta/eps from config, subln weights, and F16/BF16 storage.
CASES = [
    dict(name="llama_basic", model_type="llama", V=48, C=16, F=40, H=4, KV=4,
         tied=False, theta=10000.0, eps=1e-5, dtype="F32"),
    dict(name="llama_gqa_tied", model_type="llama", V=40, C=16, F=32, H=4, KV=2,
         tied=True, theta=500000.0, eps=1e-6, dtype="F32"),
    dict(name="diff_basic", model_type="diffllama", V=48, C=16, F=40, H=4, KV=4,
         tied=False, theta=10000.0, eps=1e-5, dtype="F32"),
    dict(name="diff_gqa_tied_headdim", model_type="diffllama", V=40, C=24, F=48, H=4, KV=2, hd=8,
         tied=True, theta=10000.0, eps=1e-6, dtype="F32"),
    dict(name="diff_subln", model_type="diffllama", V=48, C=16, F=40, H=4, KV=1,
         tied=False, theta=10000.0, eps=1e-5, dtype="F32", subln=True, hf_export=True),
    # H = 6: three differential heads over KV = 3 kv heads (g = 2), so head j reads
    # v[j//2] and v[(j+3)//2] = (0,1), (0,2), (1,2).
    dict(name="diff_bf16", model_type="diffllama", V=48, C=24, F=40, H=6, KV=3,
         tied=False, theta=10000.0, eps=1e-5, dtype="BF16"),
    dict(name="llama_f16", model_type="llama", V=40, C=16, F=32, H=4, KV=1,
         tied=False, theta=10000.0, eps=1e-5, dtype="F16"),
    # rope_scaling: linear halves every frequency; llama3 with hd = 8 and theta 10^4 has the
    # wavelengths 6.3, 63, 628, 6283 against thresholds 60/4 = 15 and 60/0.5 = 120, so the first
    # frequency is kept, the second is on the ramp and the last two are divided by the factor.
    dict(name="llama_rope_linear", model_type="llama", V=40, C=16, F=32, H=4, KV=2,
         tied=False, theta=10000.0, eps=1e-5, dtype="F32",
         rope_scaling={"rope_type": "linear", "factor": 2.0}),
    dict(name="diff_rope_llama3", model_type="diffllama", V=40, C=32, F=40, H=4, KV=2, hd=8,
         tied=False, theta=10000.0, eps=1e-5, dtype="F32",
         rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 0.5,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 60}),
]
L, B, T = 2, 2, 7

# Standard deviations: large enough that attention maps are far from uniform and λ varies.
STD = {"embed_tokens": 0.5, "lm_head": 0.3, "q_proj": 0.3, "k_proj": 0.3, "v_proj": 0.3,
       "o_proj": 0.2, "gate_proj": 0.2, "up_proj": 0.2, "down_proj": 0.2, "lambda": 0.3}


def make_config(c, layers=L):
    hd = c.get("hd", c["C"] // c["H"])
    cfg = {
        "model_type": c["model_type"],
        "architectures": ["DiffLlamaForCausalLM" if c["model_type"] == "diffllama" else "LlamaForCausalLM"],
        "vocab_size": c["V"],
        "hidden_size": c["C"],
        "intermediate_size": c["F"],
        "num_hidden_layers": layers,
        "num_attention_heads": c["H"],
        "num_key_value_heads": c["KV"],
        "head_dim": hd,
        "max_position_embeddings": 64,
        "rms_norm_eps": c["eps"],
        "rope_theta": c["theta"],
        "tie_word_embeddings": c["tied"],
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[c["dtype"]],
    }
    if c.get("rope_scaling"):
        cfg["rope_scaling"] = dict(c["rope_scaling"])
    if c["model_type"] == "llama":
        cfg["mlp_bias"] = False
    else:
        cfg["lambda_std_dev"] = 0.1
        if c.get("subln"):
            cfg["difftrans"] = {"subln_weight": True}
    return cfg


def make_weights(cfg, rng):
    w = {}
    for name, shape in ref.param_shapes(cfg).items():
        leaf = name.split(".")[-2] if name.endswith(".weight") else name.split(".")[-1]
        if leaf.endswith("norm") or leaf.endswith("layernorm"):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif leaf == "subln":
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif leaf.startswith("lambda_"):
            a = STD["lambda"] * rng.standard_normal(shape)
        else:
            a = STD[leaf] * rng.standard_normal(shape)
        w[name] = a.astype(np.float32)
    return w


def case_seed(name):
    return zlib.crc32(name.encode("utf-8")) ^ 0x5EED


def generate_case(c, out_root, verbose=True):
    d = os.path.join(out_root, c["name"])
    if os.path.isdir(d):
        shutil.rmtree(d)
    rng = np.random.default_rng(case_seed(c["name"]))
    cfg = make_config(c)
    weights = make_weights(cfg, rng)
    ids = rng.integers(0, c["V"], size=(B, T))
    ref.save_checkpoint(d, cfg, weights, dtype=c["dtype"])
    ref.write_ids(os.path.join(d, "ids.txt"), ids)

    # Outputs from exactly what the checkpoint stores (F16/BF16 rounded, widened to float32).
    cfg2, stored = ref.load_checkpoint(d)
    assert cfg2 == cfg
    exp = ref.run_reference(cfg, stored, ids, grads=True)
    ref.save_safetensors(os.path.join(d, "expected.safetensors"), exp,
                         metadata={"format": "pt", "generator": "tests/golden/make_golden.py"})
    info = describe(c, cfg, stored, ids, exp)

    if c.get("hf_export"):
        hcfg, hw = ref.fold_subln(cfg, stored)
        hexp = ref.run_reference(hcfg, hw, ids, grads=False)
        for l in range(cfg["num_hidden_layers"]):
            n = "model.layers.%d.self_attn.o_proj.weight" % l
            hexp["weight." + n] = hw[n]
        ref.save_safetensors(os.path.join(d, "expected_hf_export.safetensors"), hexp,
                             metadata={"format": "pt", "generator": "tests/golden/make_golden.py"})
        dmax = float(np.max(np.abs(hexp["logits"] - exp["logits"])))
        info += "; hf_export max|dlogits| %.2e" % dmax
        assert dmax <= 1e-4 * max(1.0, float(np.max(np.abs(exp["logits"])))), dmax
    if verbose:
        print(info)


def describe(c, cfg, w, ids, exp):
    """One line per case, with a few numbers showing that the case exercises something."""
    import torch
    s = "%-22s %-9s %-4s loss %.4f |logits|max %.3f" % (
        c["name"], cfg["model_type"], c["dtype"], float(exp["loss"]), float(np.max(np.abs(exp["logits"]))))
    # the sharpest causal attention weight of layer 0 (1/T would mean uniform attention)
    with torch.no_grad():
        tw = {n: torch.tensor(a) for n, a in w.items()}
        x = tw["model.embed_tokens.weight"][torch.tensor(ids)]
        h = ref.rms_norm(x, tw["model.layers.0.input_layernorm.weight"], cfg["rms_norm_eps"])
        H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], ref.head_dim_of(cfg)
        q = (h @ tw["model.layers.0.self_attn.q_proj.weight"].t()).view(B, T, H, hd).transpose(1, 2)
        k = (h @ tw["model.layers.0.self_attn.k_proj.weight"].t()).view(B, T, KV, hd).transpose(1, 2)
        cos, sin = ref.rope_cos_sin(T, hd, cfg["rope_theta"], torch.float32, cfg.get("rope_scaling"))
        A = ref.causal_softmax(ref.apply_rope(q, cos, sin),
                               ref.apply_rope(k, cos, sin)[:, [i // (H // KV) for i in range(H)]])
        s += " attn(last row) max %.2f" % float(A[:, :, -1].max())
    if cfg["model_type"] == "diffllama":
        lams = []
        for l in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d.self_attn." % l
            lams.append(math.exp(float(np.dot(w[p + "lambda_q1"], w[p + "lambda_k1"])))
                        - math.exp(float(np.dot(w[p + "lambda_q2"], w[p + "lambda_k2"])))
                        + ref.lambda_init(l))
        s += " lambda " + ",".join("%.3f" % x for x in lams)
    return s


# ----------------------------------------------------------------------------- self-test

def _naive_forward(cfg, w, ids):
    """A second, loop-by-loop float64 numpy implementation of the contract (logits only), written
    from the contract text, to cross-check the vectorised torch code in reference.py."""
    V = cfg["vocab_size"]
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], ref.head_dim_of(cfg)
    g, eps, theta = H // KV, cfg["rms_norm_eps"], cfg["rope_theta"]
    w = {n: a.astype(np.float64) for n, a in w.items()}

    def rms(v, weight=None):
        y = v / math.sqrt(float(np.mean(v * v)) + eps)
        return y * weight if weight is not None else y

    def rope(vec, pos):
        out = vec.copy()
        for i in range(hd // 2):
            a = pos * theta ** (-(2.0 * i) / hd)
            x1, x2 = vec[i], vec[i + hd // 2]
            out[i] = x1 * math.cos(a) - x2 * math.sin(a)
            out[i + hd // 2] = x2 * math.cos(a) + x1 * math.sin(a)
        return out

    Bn, Tn = ids.shape
    logits = np.zeros((Bn, Tn, V))
    for b in range(Bn):
        x = [w["model.embed_tokens.weight"][ids[b, t]].copy() for t in range(Tn)]
        for l in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % l
            a = "model.layers.%d.self_attn." % l
            hs = [rms(x[t], w[p + "input_layernorm.weight"]) for t in range(Tn)]
            q = [[rope((w[a + "q_proj.weight"] @ hs[t])[i * hd:(i + 1) * hd], t) for i in range(H)] for t in range(Tn)]
            k = [[rope((w[a + "k_proj.weight"] @ hs[t])[i * hd:(i + 1) * hd], t) for i in range(KV)] for t in range(Tn)]
            v = [[(w[a + "v_proj.weight"] @ hs[t])[i * hd:(i + 1) * hd] for i in range(KV)] for t in range(Tn)]

            def probs(i, t):
                s = np.array([np.dot(q[t][i], k[u][i // g]) / math.sqrt(hd) for u in range(t + 1)])
                e = np.exp(s - s.max())
                return e / e.sum()

            for t in range(Tn):
                if cfg["model_type"] == "llama":
                    cat = []
                    for i in range(H):
                        pr = probs(i, t)
                        cat.append(sum(pr[u] * v[u][i // g] for u in range(t + 1)))
                else:
                    li = 0.8 - 0.6 * math.exp(-0.3 * l)
                    lam = (math.exp(np.dot(w[a + "lambda_q1"], w[a + "lambda_k1"]))
                           - math.exp(np.dot(w[a + "lambda_q2"], w[a + "lambda_k2"])) + li)
                    sub = w.get(a + "subln.weight", np.ones(2 * hd))
                    cat = []
                    for j in range(H // 2):
                        p1, p2 = probs(j, t), probs(j + H // 2, t)
                        u_ = sum((p1[u] - lam * p2[u]) * np.concatenate([v[u][j // g], v[u][(j + H // 2) // g]])
                                 for u in range(t + 1))
                        cat.append(rms(u_) * sub * (1 - li))
                x[t] = x[t] + w[a + "o_proj.weight"] @ np.concatenate(cat)
            for t in range(Tn):
                h = rms(x[t], w[p + "post_attention_layernorm.weight"])
                gt = w[p + "mlp.gate_proj.weight"] @ h
                up = w[p + "mlp.up_proj.weight"] @ h
                x[t] = x[t] + w[p + "mlp.down_proj.weight"] @ (gt / (1 + np.exp(-gt)) * up)
        head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
        for t in range(Tn):
            logits[b, t] = head @ rms(x[t], w["model.norm.weight"])
    return logits


def _hf_style_diff_attention(cfg, w, p, layer, h):
    """Differential attention written the way HF's DiffLlamaAttention arranges its tensors
    (repeat kv heads, split heads in halves and join them along features, repeat twice, take
    the difference of the two halves of the outputs), to show it equals the per-head contract."""
    import torch
    Bn, Tn, _ = h.shape
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], ref.head_dim_of(cfg)
    q = (h @ w[p + "q_proj.weight"].t()).view(Bn, Tn, H, hd).transpose(1, 2)
    k = (h @ w[p + "k_proj.weight"].t()).view(Bn, Tn, KV, hd).transpose(1, 2)
    v = (h @ w[p + "v_proj.weight"].t()).view(Bn, Tn, KV, hd).transpose(1, 2)
    cos, sin = ref.rope_cos_sin(Tn, hd, cfg["rope_theta"], h.dtype)
    q, k = ref.apply_rope(q, cos, sin), ref.apply_rope(k, cos, sin)
    k = k.repeat_interleave(H // KV, dim=1)
    v = v.repeat_interleave(H // KV, dim=1)
    v = torch.cat(torch.chunk(v, 2, dim=1), dim=-1).repeat(1, 2, 1, 1)     # [B, H, T, 2hd]
    out = torch.matmul(ref.causal_softmax(q, k), v)
    o1, o2 = torch.chunk(out, 2, dim=1)
    li = ref.lambda_init(layer)
    lam = (torch.exp((w[p + "lambda_q1"] * w[p + "lambda_k1"]).sum())
           - torch.exp((w[p + "lambda_q2"] * w[p + "lambda_k2"]).sum()) + li)
    out = ref.rms_norm(o1 - lam * o2, w.get(p + "subln.weight"), cfg["rms_norm_eps"]) * (1 - li)
    return out.transpose(1, 2).reshape(Bn, Tn, H * hd) @ w[p + "o_proj.weight"].t()


def selftest():
    import tempfile
    import torch
    ok = True

    def report(label, err, tol):
        nonlocal ok
        good = err <= tol
        ok &= good
        print("  %-58s %.3e (tol %.0e) %s" % (label, err, tol, "ok" if good else "FAIL"))

    print("safetensors round trip")
    rng = np.random.default_rng(1)
    tensors = {"a": rng.standard_normal((3, 5)).astype(np.float32),
               "scalar": np.array(2.5, dtype=np.float32),
               "h": rng.standard_normal((4, 2, 3)).astype(np.float32) * 100,
               "b": rng.standard_normal((7,)).astype(np.float32),
               "empty": np.zeros((0,), dtype=np.float32)}
    dtypes = {"h": "F16", "b": "BF16"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.safetensors")
        ref.save_safetensors(path, tensors, dtypes=dtypes, metadata={"k": "v"})
        back, dts = ref.load_safetensors(path, with_dtypes=True)
        raw = open(path, "rb").read()
        hlen = int.from_bytes(raw[:8], "little")
        report("header length multiple of 8", hlen % 8, 0)
        report("metadata kept", 0 if ref.safetensors_metadata(path) == {"k": "v"} else 1, 0)
        report("names and dtypes", 0 if dts == {n: dtypes.get(n, "F32") for n in tensors} else 1, 0)
        for n, a in tensors.items():
            want = ref.round_to_dtype(a, dts[n])
            if n == "h":   # independent rounding: torch's own half / bfloat16 casts
                want2 = torch.tensor(a).half().float().numpy()
            elif n == "b":
                want2 = torch.tensor(a).bfloat16().float().numpy()
            else:
                want2 = a
            err = 0.0 if back[n].shape == a.shape and np.array_equal(back[n], want) and np.array_equal(want, want2) else 1.0
            report("tensor %s %s %s bit-exact" % (n, dts[n], list(a.shape)), err, 0)
        # bf16 rounding: ties go to even
        tie = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -1.0 - 2 ** -8], dtype=np.float32)
        got = ref.round_to_dtype(tie, "BF16")
        report("bf16 ties to even", float(np.max(np.abs(got - np.array([1.0, 1.0 + 2 ** -6, -1.0])))), 0)
        # a writer that does not pad its header must still be readable
        body = np.arange(3, dtype="<f4").tobytes()
        hdr = json.dumps({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}).encode()
        with open(path, "wb") as f:
            f.write(len(hdr).to_bytes(8, "little") + hdr + body)
        report("unpadded header read", float(np.max(np.abs(ref.load_safetensors(path)["x"] - np.arange(3)))), 0)
        with open(path, "wb") as f:
            f.write(len(hdr).to_bytes(8, "little") + hdr + body[:8])
        try:
            ref.load_safetensors(path)
            report("truncated file rejected", 1, 0)
        except ValueError:
            report("truncated file rejected", 0, 0)

    tiny = [
        dict(name="t_llama", model_type="llama", V=11, C=8, F=12, H=4, KV=4,
             tied=False, theta=10000.0, eps=1e-5, dtype="F32"),
        dict(name="t_llama_gqa_tied", model_type="llama", V=11, C=8, F=12, H=4, KV=2, hd=4,
             tied=True, theta=500.0, eps=1e-6, dtype="F32"),
        dict(name="t_diff", model_type="diffllama", V=11, C=8, F=12, H=4, KV=4,
             tied=False, theta=10000.0, eps=1e-5, dtype="F32"),
        dict(name="t_diff_subln_gqa_tied_hd", model_type="diffllama", V=11, C=8, F=12, H=4, KV=2, hd=4,
             tied=True, theta=100.0, eps=1e-5, dtype="F32", subln=True),
        dict(name="t_diff_h6_kv3_subln", model_type="diffllama", V=9, C=12, F=8, H=6, KV=3, hd=2,
             tied=False, theta=10000.0, eps=1e-5, dtype="F32", subln=True),
    ]
    for c in tiny:
        print("model %s" % c["name"])
        rng = np.random.default_rng(case_seed(c["name"]))
        cfg = make_config(c)
        w = make_weights(cfg, rng)
        ids = rng.integers(0, c["V"], size=(2, 5))

        # 1. the vectorised torch forward equals the naive loop version (float64)
        ref.ROPE_TABLE_DTYPE = torch.float64
        exact = ref.run_reference(cfg, w, ids, grads=False, dtype=torch.float64)
        ref.ROPE_TABLE_DTYPE = torch.float32
        report("logits vs naive loop implementation (f64)",
               float(np.max(np.abs(exact["logits"] - _naive_forward(cfg, w, ids)))), 1e-10)
        out64 = ref.run_reference(cfg, w, ids, grads=True, dtype=torch.float64)
        # float32 agrees with float64
        out32 = ref.run_reference(cfg, w, ids, grads=True)
        report("logits f32 vs f64", float(np.max(np.abs(out32["logits"] - out64["logits"]))), 1e-5)
        # loss is the mean next-token cross-entropy
        lg = out64["logits"][:, :-1]
        lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
        ce = lse - np.take_along_axis(lg, ids[:, 1:, None], -1)[..., 0]
        report("loss vs numpy cross-entropy", abs(float(ce.mean()) - float(out64["loss"])), 1e-12)

        # 2. autograd grads vs central finite differences, every element of every tensor (f64)
        tw = {n: torch.tensor(a, dtype=torch.float64) for n, a in w.items()}
        tids = torch.tensor(ids)

        def loss_of():
            return float(ref.forward(cfg, tw, tids)[1])

        eps_fd = 1e-6
        worst = 0.0
        worst_name = ""
        for n in ref.param_names(cfg):
            flat = tw[n].view(-1)
            fd = np.zeros(flat.numel())
            for i in range(flat.numel()):
                old = float(flat[i])
                flat[i] = old + eps_fd
                lp = loss_of()
                flat[i] = old - eps_fd
                lm = loss_of()
                flat[i] = old
                fd[i] = (lp - lm) / (2 * eps_fd)
            g = out64["grad." + n].reshape(-1)
            err = float(np.max(np.abs(fd - g))) / max(1e-3, float(np.max(np.abs(g))))
            if err >= worst:
                worst, worst_name = err, n
        report("grads vs finite differences, worst: %s" % worst_name.replace("model.", ""), worst, 1e-6)
        report("grad set == parameter set",
               0 if {k[5:] for k in out64 if k.startswith("grad.")} == set(ref.param_names(cfg)) else 1, 0)

        if cfg["model_type"] == "diffllama":
            # 3. per-head contract == HF DiffLlama tensor arrangement
            with torch.no_grad():
                x = torch.randn(2, 5, cfg["hidden_size"], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
                for l in range(cfg["num_hidden_layers"]):
                    p = "model.layers.%d.self_attn." % l
                    a1 = ref.attention(cfg, tw, p, l, x)
                    a2 = _hf_style_diff_attention(cfg, tw, p, l, x)
                    report("layer %d attention vs HF-style arrangement" % l, float((a1 - a2).abs().max()), 1e-12)
            # 4. folding subln into o_proj keeps the logits
            if ref.has_subln(cfg):
                hcfg, hw = ref.fold_subln(cfg, w)
                assert "difftrans" not in hcfg and not any("subln" in n for n in hw)
                o2 = ref.run_reference(hcfg, hw, ids, grads=False, dtype=torch.float64)
                report("folded subln (f32 fold): logits unchanged",
                       float(np.max(np.abs(o2["logits"] - out64["logits"]))), 1e-5)

    print("selftest %s" % ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "cases"), help="output root (default: tests/golden/cases)")
    ap.add_argument("--selftest", action="store_true", help="check reference.py (finite differences etc.) and exit")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    args = ap.parse_args()
    if ref.torch is None:
        print("make_golden.py needs torch (Debian: apt-get install python3-torch; run with /usr/bin/python3)",
              file=sys.stderr)
        return 2
    ref.torch.set_num_threads(1)   # one thread: the same summation order on every run
    if args.selftest:
        return selftest()
    os.makedirs(args.out, exist_ok=True)
    for c in CASES:
        if not args.case or c["name"] in args.case:
            generate_case(c, args.out, verbose=not args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
