"""Independent PyTorch reference of the difftrans model contract.

This file documents, as runnable code, what `difftrans forward` must compute. Everything is
float32. Two architectures share the LLaMA macro layout:

    x = embed_tokens[ids]
    for each layer l:   x = x + Attn_l(RMSNorm(x));  x = x + SwiGLU_l(RMSNorm(x))
    logits = RMSNorm(x) @ lm_head^T          (lm_head = embed_tokens when tied)
    loss   = mean cross-entropy of token t+1 given tokens <= t, over all B*(T-1) positions

RMSNorm(x) = x / sqrt(mean(x^2) + eps) * weight.  SwiGLU(x) = down(silu(gate(x)) * up(x)).
RoPE is Hugging Face Llama's non-interleaved `rotate_half` form. No biases anywhere. Linear
weights use PyTorch layout [out, in].

  llama      causal multi-head attention with GQA (query head i reads kv head i // (H/KV)).
  diffllama  differential attention: H ordinary softmax maps A_0..A_{H-1}; differential head
             j < H/2 uses D_j = A_j - lam * A_{j+H/2} on V_j = [v_{j//g} | v_{(j+H/2)//g}]
             (2*hd wide), then a per-head RMSNorm over its 2*hd channels (no affine weight),
             times the optional `subln.weight` [2*hd], times (1 - lam_init(l)).
             lam = exp(lq1.lk1) - exp(lq2.lk2) + lam_init(l), lam_init(l) = 0.8 - 0.6 exp(-0.3 l),
             layer index l counted from 0 (as in HF `diffllama`).

The safetensors reader/writer below needs only numpy (json + struct + numpy), so the golden
check can still read files where torch is missing; the model functions need torch.
"""

import json
import math
import os
import struct

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the safetensors helpers still work
    torch = None
    F = None


# ----------------------------------------------------------------------------- safetensors

_ST_DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I32": 4, "I64": 8}


def f32_to_bf16_bits(a):
    """Round float32 values to bfloat16 (round to nearest, ties to even); returns uint16 bits."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = ((u >> 16) & 1) + 0x7FFF
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_dtype(a, dtype):
    """float32 array -> float32 array holding the values a file of `dtype` would store."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.copy()
    if dtype == "F16":
        return a.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(a)).reshape(a.shape)
    raise ValueError("unsupported dtype %r" % dtype)


def _encode(a, dtype):
    a = np.asarray(a)
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype(np.float32).astype("<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
    if dtype == "F64":
        return a.astype("<f8").tobytes()
    if dtype == "I32":
        return a.astype("<i4").tobytes()
    if dtype == "I64":
        return a.astype("<i8").tobytes()
    raise ValueError("unsupported dtype %r" % dtype)


def _decode(raw, dtype, shape):
    if dtype == "F32":
        a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    elif dtype == "F16":
        a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        a = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
    elif dtype == "F64":
        a = np.frombuffer(raw, dtype="<f8").astype(np.float64)
    elif dtype == "I32":
        a = np.frombuffer(raw, dtype="<i4").astype(np.int32)
    elif dtype == "I64":
        a = np.frombuffer(raw, dtype="<i8").astype(np.int64)
    else:
        raise ValueError("unsupported dtype %r" % dtype)
    return a.reshape(shape)


def save_safetensors(path, tensors, dtypes=None, metadata=None):
    """Write {name: array}. dtypes maps a name to "F32"|"F16"|"BF16" (default F32).

    Tensors are stored in name order; the JSON header is padded with spaces to a multiple of 8
    bytes so the data section is aligned. The output is byte-for-byte deterministic."""
    dtypes = dtypes or {}
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        dt = dtypes.get(name, "F32")
        blob = _encode(a, dt)
        header[name] = {"dtype": dt, "shape": [int(s) for s in a.shape],
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = dict(metadata if metadata is not None else {"format": "pt"})
    hjson = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def load_safetensors(path, with_dtypes=False):
    """Read a .safetensors file -> {name: float32 array} (and {name: dtype} when with_dtypes).

    Validates the header against the file size; raises ValueError on anything malformed."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (hlen,) = struct.unpack("<Q", data[:8])
    if hlen > len(data) - 8:
        raise ValueError("%s: header length %d past the end of the file" % (path, hlen))
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    body = data[8 + hlen:]
    out, dtypes = {}, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _ST_DTYPES:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        shape = tuple(int(s) for s in info["shape"])
        begin, end = info["data_offsets"]
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= begin <= end <= len(body)) or end - begin != n * _ST_DTYPES[dt]:
            raise ValueError("%s: tensor %s has bad data_offsets %s for shape %s %s"
                             % (path, name, info["data_offsets"], list(shape), dt))
        out[name] = _decode(body[begin:end], dt, shape)
        dtypes[name] = dt
    return (out, dtypes) if with_dtypes else out


def safetensors_metadata(path):
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(hlen).decode("utf-8")).get("__metadata__", {})


# ----------------------------------------------------------------------------- checkpoints

def head_dim_of(cfg):
    hd = cfg.get("head_dim")
    return int(hd) if hd else cfg["hidden_size"] // cfg["num_attention_heads"]


def has_subln(cfg):
    return bool(cfg.get("difftrans", {}).get("subln_weight", False))


def param_names(cfg):
    """Every parameter tensor name of a checkpoint described by cfg, in canonical order."""
    names = ["model.embed_tokens.weight"]
    diff = cfg["model_type"] == "diffllama"
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        names.append(p + "input_layernorm.weight")
        for m in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names.append(p + "self_attn.%s.weight" % m)
        if diff:
            for v in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                names.append(p + "self_attn." + v)
            if has_subln(cfg):
                names.append(p + "self_attn.subln.weight")
        names.append(p + "post_attention_layernorm.weight")
        for m in ("gate_proj", "up_proj", "down_proj"):
            names.append(p + "mlp.%s.weight" % m)
    names.append("model.norm.weight")
    if not cfg.get("tie_word_embeddings", False):
        names.append("lm_head.weight")
    return names


def param_shapes(cfg):
    V, C, Fi = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim_of(cfg)
    shapes = {}
    for n in param_names(cfg):
        leaf = n.split(".")[-2] if n.endswith(".weight") else n.split(".")[-1]
        shapes[n] = {
            "embed_tokens": (V, C), "lm_head": (V, C), "norm": (C,),
            "input_layernorm": (C,), "post_attention_layernorm": (C,),
            "q_proj": (H * hd, C), "k_proj": (KV * hd, C), "v_proj": (KV * hd, C),
            "o_proj": (C, H * hd), "gate_proj": (Fi, C), "up_proj": (Fi, C), "down_proj": (C, Fi),
            "lambda_q1": (hd,), "lambda_k1": (hd,), "lambda_q2": (hd,), "lambda_k2": (hd,),
            "subln": (2 * hd,),
        }[leaf]
    return shapes


def load_checkpoint(model_dir):
    """-> (config dict, {name: float32 numpy array}) with F16/BF16 tensors widened to float32."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    weights = load_safetensors(os.path.join(model_dir, "model.safetensors"))
    return cfg, weights


def save_checkpoint(model_dir, cfg, weights, dtype="F32"):
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    save_safetensors(os.path.join(model_dir, "model.safetensors"), weights,
                     dtypes={n: dtype for n in weights})


def read_ids(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append([int(t) for t in line.split()])
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("%s: need one or more sequences, all the same length" % path)
    return np.array(rows, dtype=np.int64)


def write_ids(path, ids):
    with open(path, "w") as f:
        for row in ids:
            f.write(" ".join(str(int(t)) for t in row) + "\n")


def fold_subln(cfg, weights):
    """HF export: o_proj[:, j*2hd + c] *= subln[c] for every differential head j; drop the
    subln tensors and the "difftrans" config key. Returns (new cfg, new weights)."""
    cfg = json.loads(json.dumps(cfg))
    out = {k: np.array(v, dtype=np.float32) for k, v in weights.items()}
    if cfg["model_type"] == "diffllama" and has_subln(cfg):
        H = cfg["num_attention_heads"]
        for l in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d.self_attn." % l
            s = out.pop(p + "subln.weight")
            out[p + "o_proj.weight"] = out[p + "o_proj.weight"] * np.tile(s, H // 2)[None, :]
    cfg.pop("difftrans", None)
    return cfg, out


# ----------------------------------------------------------------------------- the model

def lambda_init(layer):
    """lam_init for layer index `layer` counted from 0."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


def rms_norm(x, weight, eps):
    y = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


# The contract computes the RoPE tables in float32 (as HF does). Only the self-test switches this
# to float64, to compare with an all-float64 loop implementation.
ROPE_TABLE_DTYPE = torch.float32 if torch is not None else None


def scale_inv_freq(inv_freq, scaling):
    """config.json rope_scaling applied to the inverse frequencies, with HF's semantics: each step
    a float32 tensor operation, Python floats entering as scalars.
      linear: inv_freq / factor.
      llama3: wavelengths 2*pi/inv_freq longer than original/low_freq_factor are divided by factor,
              those shorter than original/high_freq_factor kept, and in between the two are mixed
              with s = (original/wavelen - low) / (high - low): (1 - s)*inv/factor + s*inv."""
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
    factor = scaling["factor"]
    if kind == "linear":
        return inv_freq / factor
    if kind != "llama3":
        raise ValueError("rope_scaling type %r is not part of the contract" % kind)
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    low_freq = wavelen > original / low
    high_freq = wavelen < original / high
    divided = torch.where(low_freq, inv_freq / factor, inv_freq)
    s = (original / wavelen - low) / (high - low)
    ramp = (1 - s) * divided / factor + s * divided
    return torch.where(~high_freq & ~low_freq, ramp, divided)


def rope_cos_sin(T, hd, theta, dtype, scaling=None):
    """HF Llama RoPE tables [T, hd], computed in float32 (then cast to dtype)."""
    td = ROPE_TABLE_DTYPE
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(td) / hd))
    inv_freq = scale_inv_freq(inv_freq, scaling)
    angle = torch.outer(torch.arange(T, dtype=torch.int64).to(td), inv_freq)
    emb = torch.cat([angle, angle], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    # x: [B, heads, T, hd]; cos/sin: [T, hd]
    return x * cos + rotate_half(x) * sin


def causal_softmax(q, k):
    """q: [B, H, T, hd], k: [B, H, T, hd] -> softmax(q k^T / sqrt(hd) + causal mask) [B, H, T, T]."""
    T, hd = q.shape[-2], q.shape[-1]
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1)


def attention(cfg, w, p, layer, h):
    """One layer's attention on the normed input h [B, T, C]; p is the tensor-name prefix."""
    B, T, _ = h.shape
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim_of(cfg)
    g = H // KV
    q = (h @ w[p + "q_proj.weight"].t()).view(B, T, H, hd).transpose(1, 2)
    k = (h @ w[p + "k_proj.weight"].t()).view(B, T, KV, hd).transpose(1, 2)
    v = (h @ w[p + "v_proj.weight"].t()).view(B, T, KV, hd).transpose(1, 2)
    cos, sin = rope_cos_sin(T, hd, float(cfg.get("rope_theta", 10000.0)), h.dtype, cfg.get("rope_scaling"))
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    kv_of = [i // g for i in range(H)]            # query head i reads kv head i // g
    k_rep, v_rep = k[:, kv_of], v[:, kv_of]       # [B, H, T, hd]
    A = causal_softmax(q, k_rep)                  # [B, H, T, T]

    if cfg["model_type"] == "llama":
        out = torch.matmul(A, v_rep)              # [B, H, T, hd]
    else:
        half = H // 2
        lam_init = lambda_init(layer)
        lam = (torch.exp(torch.dot(w[p + "lambda_q1"], w[p + "lambda_k1"]))
               - torch.exp(torch.dot(w[p + "lambda_q2"], w[p + "lambda_k2"])) + lam_init)
        subln = w.get(p + "subln.weight")
        heads = []
        for j in range(half):
            D = A[:, j] - lam * A[:, j + half]                          # [B, T, T]
            Vj = torch.cat([v_rep[:, j], v_rep[:, j + half]], dim=-1)   # [B, T, 2hd]
            u = torch.matmul(D, Vj)                                      # [B, T, 2hd]
            o = rms_norm(u, subln, cfg["rms_norm_eps"]) * (1.0 - lam_init)
            heads.append(o.unsqueeze(1))
        out = torch.cat(heads, dim=1)             # [B, H/2, T, 2hd]
    out = out.transpose(1, 2).reshape(B, T, H * hd)
    return out @ w[p + "o_proj.weight"].t()


def forward(cfg, w, ids):
    """w: {name: tensor}; ids: LongTensor [B, T] -> (logits [B, T, V], loss scalar)."""
    eps = cfg["rms_norm_eps"]
    x = w["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        x = x + attention(cfg, w, p + "self_attn.", l, rms_norm(x, w[p + "input_layernorm.weight"], eps))
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].t()
        up = h @ w[p + "mlp.up_proj.weight"].t()
        x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = x @ head.t()
    V = logits.shape[-1]
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
    return logits, loss


def check_weights(cfg, weights):
    """The checkpoint must hold exactly the contract's tensors, with the contract's shapes."""
    shapes = param_shapes(cfg)
    if set(weights) != set(shapes):
        raise ValueError("tensor set mismatch: missing %s, unexpected %s"
                         % (sorted(set(shapes) - set(weights)), sorted(set(weights) - set(shapes))))
    for n, s in shapes.items():
        if tuple(weights[n].shape) != tuple(s):
            raise ValueError("%s: shape %s, expected %s" % (n, list(weights[n].shape), list(s)))


def run_reference(cfg, weights, ids, grads=True, dtype=None):
    """numpy in, numpy out: {"logits", "loss", and "grad.<name>" for every parameter}."""
    dtype = dtype or torch.float32
    check_weights(cfg, weights)
    w = {n: torch.tensor(np.asarray(a), dtype=dtype, requires_grad=grads) for n, a in weights.items()}
    logits, loss = forward(cfg, w, torch.as_tensor(np.asarray(ids), dtype=torch.int64))
    out = {"logits": logits.detach().numpy(), "loss": loss.detach().numpy().reshape(())}
    if grads:
        names = sorted(w)
        gs = torch.autograd.grad(loss, [w[n] for n in names])
        for n, gv in zip(names, gs):
            out["grad." + n] = gv.numpy()
    return out
