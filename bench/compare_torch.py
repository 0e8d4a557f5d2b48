#!/usr/bin/python3
"""Benchmark difftrans against an eager PyTorch implementation of the same two models.

The PyTorch side is written the way a typical PyTorch user writes a LLaMA-style model (an
nn.Module tree named like Hugging Face's `LlamaForCausalLM` / `DiffLlamaForCausalLM`, nn.Linear
layers without bias, masked-softmax attention with plain matmuls, float32, eager mode, no
torch.compile / jit). Before measuring anything it checks, on a tiny model, that its logits, loss
and gradients equal tests/golden/reference.py's for the same weights, and that its KV-cache
decoding reproduces the full forward.

Every (config, arch) is measured in a fresh subprocess, so its peak RSS (ru_maxrss) is its own;
`difftrans bench` is run in the same invocation with the same config and thread count and its
JSON line is parsed. Each (config, arch) is measured --reps times, the two sides alternating
(PyTorch first in even repetitions, difftrans first in odd ones), so that a busy moment of the
machine falls on both sides; within a repetition the DIFF model and its baseline run one after
the other (their order alternating too), so that DIFF ÷ baseline compares neighbouring runs. The
tables show the best repetition of each side, the spread ((max − min) ÷ max) of each, and the
range of the same-repetition ratios. Every table states the
CPU model, the difftrans kernel path (`--isa` forces one through DT_ISA) and the OpenBLAS core
each side ran: both reach the same OpenBLAS (difftrans links it, Debian's torch calls it through
libblas.so.3), which reads OPENBLAS_CORETYPE at load time; `--openblas-core` sets or removes that
variable for both sides alike. Progress goes to stderr, the tables to stdout.

    /usr/bin/python3 bench/compare_torch.py --configs A,B,C --threads 2 --steps 5
    /usr/bin/python3 bench/compare_torch.py --quick            # a smoke test of a few seconds
    /usr/bin/python3 bench/compare_torch.py --configs D,E --markdown --json out.json
    /usr/bin/python3 bench/compare_torch.py --configs A --isa avx2 --reps 3   # the AVX2 path
    /usr/bin/python3 bench/compare_torch.py --configs A --openblas-core auto    # OpenBLAS's own core

See bench/README.md and docs/PERFORMANCE.md.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

ARCHS = ("diffllama", "llama")
CLI_ARCH = {"diffllama": "diff", "llama": "transformer"}

# The configurations of the performance issue. vocab 256 (bytes) unless said; kv_heads = heads.
#   train/prefill/decode: which measurements the config asks for.
CONFIGS = {
    "A": dict(d_model=512, layers=8, heads=8, kv_heads=8, ffn=1408, vocab=256, batch=8,
              seqs=[256], train=True, prefill=True, decode=True),
    "B": dict(d_model=256, layers=4, heads=8, kv_heads=8, ffn=704, vocab=256, batch=8,
              seqs=[256], train=True, prefill=True, decode=True),
    "C": dict(d_model=512, layers=4, heads=8, kv_heads=8, ffn=1408, vocab=256, batch=2,
              seqs=[1024], train=True, prefill=True, decode=True),
    "D": dict(d_model=256, layers=4, heads=8, kv_heads=8, ffn=704, vocab=256, batch=1,
              seqs=[1024, 2048, 4096, 8192], train=True, prefill=True, decode=False),
    "E": dict(d_model=1024, layers=12, heads=16, kv_heads=16, ffn=2816, vocab=32000, batch=1,
              seqs=[128], train=False, prefill=True, decode=True),
}

# --quick: the same shapes of problem, tiny sizes (a smoke test of the whole pipeline).
QUICK = {
    "A": dict(d_model=64, layers=2, heads=4, kv_heads=4, ffn=176, vocab=256, batch=2, seqs=[32]),
    "B": dict(d_model=32, layers=2, heads=4, kv_heads=4, ffn=88, vocab=256, batch=2, seqs=[32]),
    "C": dict(d_model=64, layers=2, heads=4, kv_heads=4, ffn=176, vocab=256, batch=1, seqs=[128]),
    "D": dict(d_model=32, layers=2, heads=4, kv_heads=4, ffn=88, vocab=256, batch=1,
              seqs=[64, 128, 256, 512]),
    "E": dict(d_model=128, layers=2, heads=4, kv_heads=4, ffn=352, vocab=2000, batch=1, seqs=[32]),
}

RMS_EPS = 1e-5
ROPE_THETA = 10000.0


def log(msg):
    sys.stderr.write("[compare_torch %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# ============================================================================= the PyTorch model

def lambda_init_fn(layer_idx):
    return 0.8 - 0.6 * math.exp(-0.3 * layer_idx)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=RMS_EPS, affine=True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * self.weight if self.weight is not None else x


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim, theta=ROPE_THETA):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions):
        angle = torch.outer(positions.float(), self.inv_freq)
        emb = torch.cat([angle, angle], dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    B, KV, T, hd = x.shape
    return x[:, :, None].expand(B, KV, n_rep, T, hd).reshape(B, KV * n_rep, T, hd)


class KVCache:
    """One stream's cache: per layer, keys (after RoPE) and values [B, KV, S, hd], grown by cat."""

    def __init__(self, n_layers):
        self.k = [None] * n_layers
        self.v = [None] * n_layers

    def length(self):
        return 0 if self.k[0] is None else self.k[0].shape[2]

    def update(self, layer, k, v):
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v


class Attention(nn.Module):
    def __init__(self, cfg, layer_idx, diff):
        super().__init__()
        C, H, KV = cfg["d_model"], cfg["heads"], cfg["kv_heads"]
        self.layer_idx, self.diff = layer_idx, diff
        self.num_heads, self.num_kv_heads = H, KV
        self.head_dim = C // H
        hd = self.head_dim
        self.q_proj = nn.Linear(C, H * hd, bias=False)
        self.k_proj = nn.Linear(C, KV * hd, bias=False)
        self.v_proj = nn.Linear(C, KV * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, C, bias=False)
        if diff:
            self.lambda_init = lambda_init_fn(layer_idx)
            self.lambda_q1 = nn.Parameter(torch.zeros(hd).normal_(0, 0.1))
            self.lambda_k1 = nn.Parameter(torch.zeros(hd).normal_(0, 0.1))
            self.lambda_q2 = nn.Parameter(torch.zeros(hd).normal_(0, 0.1))
            self.lambda_k2 = nn.Parameter(torch.zeros(hd).normal_(0, 0.1))
            self.groupnorm = RMSNorm(2 * hd, affine=False)

    def forward(self, x, cos, sin, cache=None):
        B, T, _ = x.shape
        H, KV, hd = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, hd).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        S = k.shape[2]

        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd)
        if T > 1:   # query t (absolute position S-T+t) sees keys 0..S-T+t
            future = torch.ones(T, S, dtype=torch.bool, device=x.device).triu(S - T + 1)
            scores = scores.masked_fill(future, float("-inf"))
        attn = torch.softmax(scores, dim=-1)

        if not self.diff:
            out = torch.matmul(attn, v)                                  # [B, H, T, hd]
        else:
            half = H // 2
            lam = (torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1))
                   - torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2)) + self.lambda_init)
            attn = attn[:, :half] - lam * attn[:, half:]                 # [B, H/2, T, S]
            v = torch.cat([v[:, :half], v[:, half:]], dim=-1)            # [B, H/2, S, 2hd]
            out = torch.matmul(attn, v)                                  # [B, H/2, T, 2hd]
            out = self.groupnorm(out) * (1.0 - self.lambda_init)
        out = out.transpose(1, 2).reshape(B, T, H * hd)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, C, Fi):
        super().__init__()
        self.gate_proj = nn.Linear(C, Fi, bias=False)
        self.up_proj = nn.Linear(C, Fi, bias=False)
        self.down_proj = nn.Linear(Fi, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx, diff):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["d_model"])
        self.self_attn = Attention(cfg, layer_idx, diff)
        self.post_attention_layernorm = RMSNorm(cfg["d_model"])
        self.mlp = MLP(cfg["d_model"], cfg["ffn"])

    def forward(self, x, cos, sin, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class Backbone(nn.Module):
    def __init__(self, cfg, diff):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab"], cfg["d_model"])
        self.layers = nn.ModuleList([DecoderLayer(cfg, l, diff) for l in range(cfg["layers"])])
        self.norm = RMSNorm(cfg["d_model"])
        self.rotary_emb = RotaryEmbedding(cfg["d_model"] // cfg["heads"])

    def forward(self, ids, cache=None):
        past = cache.length() if cache is not None else 0
        positions = torch.arange(past, past + ids.shape[1], device=ids.device)
        cos, sin = self.rotary_emb(positions)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, cache)
        return self.norm(x)


class CausalLM(nn.Module):
    """Parameter names equal the checkpoint names of the contract (model.layers.N.self_attn...)."""

    def __init__(self, cfg, arch):
        super().__init__()
        self.cfg = dict(cfg)
        self.model = Backbone(cfg, diff=(arch == "diffllama"))
        self.lm_head = nn.Linear(cfg["d_model"], cfg["vocab"], bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids, cache=None):
        return self.lm_head(self.model(ids, cache))


def lm_loss(logits, ids):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))


# ============================================================================= startup check

def check_against_reference():
    """Tiny models of both archs: logits, loss and gradients vs tests/golden/reference.py; KV-cache
    decoding vs the full forward. Raises SystemExit on a mismatch."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
    import reference  # noqa: E402  (the project's contract)

    torch.manual_seed(1234)
    cfg = dict(d_model=32, layers=3, heads=4, kv_heads=2, ffn=48, vocab=61)
    B, T = 2, 11
    ids = torch.randint(0, cfg["vocab"], (B, T))
    worst = {}
    for arch in ARCHS:
        model = CausalLM(cfg, arch)
        with torch.no_grad():   # make RMSNorm weights non-trivial too
            for name, p in model.named_parameters():
                if p.dim() == 1 and "lambda" not in name:
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
        ref_cfg = {"model_type": arch, "vocab_size": cfg["vocab"], "hidden_size": cfg["d_model"],
                   "intermediate_size": cfg["ffn"], "num_hidden_layers": cfg["layers"],
                   "num_attention_heads": cfg["heads"], "num_key_value_heads": cfg["kv_heads"],
                   "rms_norm_eps": RMS_EPS, "rope_theta": ROPE_THETA, "tie_word_embeddings": False}
        weights = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
        reference.check_weights(ref_cfg, weights)          # same tensor names and shapes
        ref = reference.run_reference(ref_cfg, weights, ids.numpy(), grads=True)

        logits = model(ids)
        loss = lm_loss(logits, ids)
        loss.backward()
        ref_logits = torch.from_numpy(ref["logits"])
        errs = {"logits": (logits.detach() - ref_logits).abs().max().item()
                / (1.0 + ref_logits.abs().max().item()),
                "loss": abs(loss.item() - float(ref["loss"]))}
        gerr = 0.0
        for n, p in model.named_parameters():
            g = torch.from_numpy(ref["grad." + n])
            gerr = max(gerr, (p.grad - g).abs().max().item() / (1e-3 + g.abs().max().item()))
        errs["grads"] = gerr

        with torch.no_grad():   # prefill 4 tokens, then one token at a time through the cache
            full = model(ids[:1])
            cache = KVCache(cfg["layers"])
            steps = [model(ids[:1, :4], cache)]
            for t in range(4, T):
                steps.append(model(ids[:1, t:t + 1], cache))
            inc = torch.cat(steps, dim=1)
        errs["kv_cache"] = (inc - full).abs().max().item() / (1.0 + full.abs().max().item())
        worst[arch] = errs
        tol = {"logits": 1e-5, "loss": 1e-5, "grads": 1e-4, "kv_cache": 1e-5}
        bad = [k for k in errs if not errs[k] <= tol[k]]
        if bad:
            raise SystemExit("compare_torch: the PyTorch %s model does not match "
                             "tests/golden/reference.py: %s" % (arch, errs))
    log("check vs tests/golden/reference.py passed: " + "; ".join(
        "%s %s" % (a, ", ".join("%s %.1e" % kv for kv in e.items())) for a, e in worst.items()))


# ============================================================================= the worker

def rss_peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # Linux: KiB


def emit(d):
    sys.stdout.write(json.dumps(d) + "\n")
    sys.stdout.flush()


def blas_core():
    """The core of the BLAS torch calls, when it is OpenBLAS (Debian's torch reaches it through
    libblas.so.3, already loaded in this process); None for another BLAS."""
    import ctypes
    try:
        f = ctypes.CDLL("libblas.so.3").openblas_get_corename
    except (OSError, AttributeError):
        return None
    f.restype = ctypes.c_char_p
    name = f()
    return name.decode("ascii", "replace") if name else None


_DT_CORE_CHOICE = {}


def difftrans_core_choice(dt, env):
    """The OpenBLAS core difftrans's CLI names for itself with OPENBLAS_CORETYPE unset (it does when
    OpenBLAS's own choice has no AVX-512 kernels on an AVX-512 CPU, README "Kernels"), or None."""
    if dt not in _DT_CORE_CHOICE:
        try:
            out = subprocess.run([dt, "info", "--system"], env=env, capture_output=True, text=True,
                                 timeout=120).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        m = re.search(r"core (\S+) \(chosen by difftrans", out)
        _DT_CORE_CHOICE[dt] = m.group(1) if m else None
    return _DT_CORE_CHOICE[dt]


def side_env(args):
    """The environment of both sides' subprocesses: the caller's, with --openblas-core applied.
    'auto' removes the variable, so OpenBLAS chooses, unless difftrans would then name a core for
    itself: that core is named for both, so PyTorch runs the same kernels."""
    env = dict(os.environ)
    if args.openblas_core == "auto":
        env.pop("OPENBLAS_CORETYPE", None)
        core = difftrans_core_choice(args.difftrans, env) if os.path.exists(args.difftrans) else None
        if core:
            env["OPENBLAS_CORETYPE"] = core
    elif args.openblas_core:
        env["OPENBLAS_CORETYPE"] = args.openblas_core
    return env


def worker(spec):
    """Measures one (config, arch, seq) in this process; prints one JSON line per phase."""
    threads = spec["threads"]
    torch.set_num_threads(threads)
    torch.manual_seed(spec.get("seed", 0))
    base = rss_peak_mb()
    cfg = {k: spec[k] for k in ("d_model", "layers", "heads", "kv_heads", "ffn", "vocab")}
    model = CausalLM(cfg, spec["arch"])
    B, T, V = spec["batch"], spec["seq"], spec["vocab"]
    n = max(1, spec["steps"])
    info = {"phase": "start", "params": sum(p.numel() for p in model.parameters()),
            "base_rss_mb": base, "threads": torch.get_num_threads(), "blas_core": blas_core()}
    emit(info)

    if spec["prefill"]:
        model.eval()
        ids = torch.randint(0, V, (B, T))
        times = []
        with torch.no_grad():
            for i in range(n + 1):          # 1 warm-up + n timed
                t0 = time.perf_counter()
                model(ids)
                dt = time.perf_counter() - t0
                if i:
                    times.append(dt)
        emit({"phase": "prefill", "prefill_tokens_per_s": B * T / statistics.median(times),
              "prefill_step_s": times, "peak_rss_mb": rss_peak_mb()})

    if spec["decode"]:
        model.eval()
        M = spec["decode_tokens"]

        def stream(m):
            cache = KVCache(cfg["layers"])
            tok = torch.randint(0, V, (1, 1))
            out = []
            with torch.no_grad():
                for _ in range(m):
                    logits = model(tok, cache)
                    tok = logits[:, -1].argmax(-1, keepdim=True)   # greedy
                    out.append(int(tok))
            return out

        stream(min(8, M))                   # warm-up
        t0 = time.perf_counter()
        stream(M)
        dt = time.perf_counter() - t0
        emit({"phase": "decode", "decode_tokens_per_s": M / dt, "decode_s": dt,
              "peak_rss_mb": rss_peak_mb()})

    if spec["train"]:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        batches = [torch.randint(0, V, (B, T)) for _ in range(n + 1)]
        times, losses = [], []
        for i, ids in enumerate(batches):   # 1 warm-up + n timed
            t0 = time.perf_counter()
            logits = model(ids)
            loss = lm_loss(logits, ids)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # as difftrans's step does
            opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            losses.append(loss.item())
            if i:
                times.append(dt)
        emit({"phase": "train", "train_tokens_per_s": B * T / statistics.median(times),
              "train_step_s": times, "train_loss": losses, "peak_rss_mb": rss_peak_mb()})

    emit({"phase": "done", "peak_rss_mb": rss_peak_mb()})


# ============================================================================= subprocesses

def tree_rss_mb(root):
    """-> (current RSS summed over root and its descendants, largest peak RSS of any of them), in
    MB. `difftrans bench` measures in forked children, so the whole tree is watched."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, frontier = {root}, [root]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier and p not in tree]
        tree.update(kids)
        frontier = kids
    now = peak = 0.0
    for pid in tree:
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        now += int(line.split()[1]) / 1024.0
                    elif line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) / 1024.0)
        except (OSError, ValueError):
            pass
    return now, max(now, peak)


def mem_available_mb():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 8192.0


def run_monitored(cmd, env, timeout_s, mem_limit_mb):
    """Run cmd; kill it (by its pid) past timeout_s or when its RSS passes mem_limit_mb, so that
    a benchmark never pushes a shared machine into swap or the OOM killer.
    -> (returncode, stdout, stderr, why_killed or None, peak RSS MB seen by polling)."""
    with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        # its own session, so that a kill reaches the children difftrans forks (and only them)
        p = subprocess.Popen(cmd, stdout=fout, stderr=ferr, env=env, start_new_session=True)
        t0, killed, seen = time.time(), None, 0.0
        while p.poll() is None:
            time.sleep(0.25)
            now, peak = tree_rss_mb(p.pid)
            seen = max(seen, peak)
            if time.time() - t0 > timeout_s:
                killed = "timeout after %.0f s" % timeout_s
            elif now > mem_limit_mb:
                killed = "RSS above the %.0f MB limit" % mem_limit_mb
            if killed:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    p.kill()
                p.wait()
                break
        fout.seek(0)
        ferr.seek(0)
        out = fout.read().decode("utf-8", "replace")
        err = ferr.read().decode("utf-8", "replace")
    return p.returncode, out, err, killed, seen


def json_lines(text):
    res = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                res.append(json.loads(line))
            except ValueError:
                pass
    return res


def torch_mem_estimate_mb(c, T, arch, phase):
    """A rough (somewhat high) estimate of the eager PyTorch peak RSS, dominated by the
    [B, H, T, T] maps: autograd keeps about 1.3 (llama) / 1.7 (diffllama) of them per layer
    (measured on config D at T = 1024 and 2048), and a few more live during the backward pass;
    the per-token term is fitted to config A (~2.8 GB above the interpreter's RSS)."""
    C, L, H, Fi, V, B = c["d_model"], c["layers"], c["heads"], c["ffn"], c["vocab"], c["batch"]
    P = 2 * V * C + L * (4 * C * C + 3 * C * Fi)
    amap = B * H * T * T * 4.0
    if phase == "train":
        per_layer_maps = 2.0 if arch == "llama" else 2.5
        b = 16 * P + B * T * L * (28 * C + 8 * Fi) * 4 + amap * (L * per_layer_maps + 3) + B * T * V * 12
    else:
        b = 4 * P + amap * 4 + B * T * (8 * C + 3 * Fi) * 4 + B * T * V * 8
    return 400 + b / 2 ** 20           # + the interpreter and libtorch


def run_torch(args, c, T, arch, phases):
    spec = dict(arch=arch, seq=T, threads=args.threads, steps=args.steps,
                decode_tokens=args.decode_tokens, seed=args.seed,
                train=phases["train"], prefill=phases["prefill"], decode=phases["decode"],
                **{k: c[k] for k in ("d_model", "layers", "heads", "kv_heads", "ffn", "vocab", "batch")})
    res = {"skipped": {}}
    for ph in ("train", "prefill"):
        if spec[ph]:
            est = torch_mem_estimate_mb(c, T, arch, ph)
            if est > args.mem_limit_mb:
                spec[ph] = False
                res["skipped"][ph] = "estimated %.0f MB > the %.0f MB limit" % (est, args.mem_limit_mb)
                log("  PyTorch %s T=%d: %s skipped (%s)" % (arch, T, ph, res["skipped"][ph]))
    if not (spec["train"] or spec["prefill"] or spec["decode"]):
        return res
    env = side_env(args)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(args.threads)   # Debian's torch calls OpenBLAS (pthread build) for sgemm
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    t0 = time.time()
    rc, out, err, killed, seen = run_monitored(cmd, env, args.timeout, args.mem_limit_mb)
    for d in json_lines(out):
        d.pop("phase", None)
        res.update(d)
    res["wall_s"] = time.time() - t0
    if killed or rc != 0:
        res["error"] = killed or ("exit status %s: %s" % (rc, err.strip()[-400:]))
        res["peak_rss_mb"] = max(res.get("peak_rss_mb", 0.0), seen)   # at least this much
        log("  PyTorch %s T=%d: %s" % (arch, T, res["error"]))
    return res


def run_difftrans(args, c, T, arch, phases):
    cmd = [args.difftrans, "bench", "--arch", CLI_ARCH[arch],
           "--d-model", str(c["d_model"]), "--layers", str(c["layers"]),
           "--heads", str(c["heads"]), "--kv-heads", str(c["kv_heads"]), "--ffn", str(c["ffn"]),
           "--vocab", str(c["vocab"]), "--batch", str(c["batch"]), "--seq", str(T),
           "--threads", str(args.threads), "--steps", str(args.steps),
           "--decode-tokens", str(args.decode_tokens), "--json-only"]
    if not phases["train"]:
        cmd.append("--no-train")
    if not phases["decode"]:
        cmd.append("--no-decode")
    res = {"command": " ".join(cmd)}
    if not os.path.exists(args.difftrans):
        res["error"] = "%s not found (build it with `make`)" % args.difftrans
        return res
    env = side_env(args)
    if args.isa:
        env["DT_ISA"] = args.isa
    t0 = time.time()
    rc, out, err, killed, seen = run_monitored(cmd, env, args.timeout, args.mem_limit_mb)
    res["polled_peak_rss_mb"] = seen
    res["wall_s"] = time.time() - t0
    lines = json_lines(out)
    mine = [d for d in lines if d.get("arch") == arch] or lines
    if mine:
        res.update(mine[-1])
    if killed or rc != 0 or not mine:
        res["error"] = killed or ("exit status %s; %s" % (rc, (err.strip() or "no JSON line on stdout")[-400:]))
        log("  difftrans %s T=%d: %s" % (arch, T, res["error"]))
    # the echoed config must be ours (key names tolerated in either spelling)
    want = {"d_model": c["d_model"], "layers": c["layers"], "heads": c["heads"],
            "kv_heads": c["kv_heads"], "ffn": c["ffn"], "vocab": c["vocab"], "batch": c["batch"],
            "seq": T, "threads": args.threads}
    for k, v in want.items():
        for key in (k, k.replace("_", "-")):
            if key in res and isinstance(res[key], (int, float)) and res[key] != v:
                log("  WARNING: difftrans echoed %s=%s, asked for %s" % (key, res[key], v))
    return res


THROUGHPUTS = ("train_tokens_per_s", "prefill_tokens_per_s", "decode_tokens_per_s")


def best_of(reps):
    """One side's repetitions -> the best of each throughput; the other fields (efficiency,
    memory) from the repetition with the best training (else prefill, else decode) rate."""
    ok = [r for r in reps if any(isinstance(r.get(k), (int, float)) for k in THROUGHPUTS)]
    if not ok:
        return dict(reps[-1]) if reps else {}
    def key(r):
        return tuple(r.get(k) if isinstance(r.get(k), (int, float)) else -1.0 for k in THROUGHPUTS)
    best = dict(max(ok, key=key))
    for k in THROUGHPUTS:
        vals = [r[k] for r in ok if isinstance(r.get(k), (int, float))]
        if vals:
            best[k] = max(vals)
            best[k + "_spread"] = (max(vals) - min(vals)) / max(vals) if max(vals) > 0 else None
            best[k + "_reps"] = vals
    return best


def same_rep_ratios(pt_reps, dt_reps, key):
    out = []
    for a, b in zip(dt_reps, pt_reps):
        r = ratio(a.get(key), b.get(key))
        if r is not None:
            out.append(r)
    return out


# ============================================================================= report

def ratio(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
        return a / b
    return None


def fmt(x, kind="num"):
    if x is None:
        return "—"
    if kind == "ratio":
        return "%.2f×" % x
    if kind == "pct":
        return "%.0f%%" % (100 * x)
    if kind == "mb":
        return "%.0f" % x
    if x >= 100:
        return "%.0f" % x
    if x >= 10:
        return "%.1f" % x
    return "%.2f" % x


def build_rows(results):
    rows = []
    for r in results:
        pt, dt = r["torch"], r["difftrans"]
        row = {"config": r["config"], "seq": r["seq"], "arch": r["arch"]}
        for ph in ("train", "prefill", "decode"):
            key = ph + "_tokens_per_s"
            row["pt_" + ph] = pt.get(key)
            row["dt_" + ph] = dt.get(key)
            row["ratio_" + ph] = ratio(dt.get(key), pt.get(key))
            row["pt_" + ph + "_spread"] = pt.get(key + "_spread")
            row["dt_" + ph + "_spread"] = dt.get(key + "_spread")
            rr = same_rep_ratios(r.get("torch_reps", []), r.get("difftrans_reps", []), key)
            row["rep_ratios_" + ph] = rr
        row["reps"] = len(r.get("difftrans_reps", []) or r.get("torch_reps", []))
        row["kernels"] = dt.get("kernels")
        row["dt_blas_core"] = dt.get("blas_core")
        row["pt_blas_core"] = pt.get("blas_core")
        row["pt_peak_rss_mb"] = pt.get("peak_rss_mb")
        row["pt_base_rss_mb"] = pt.get("base_rss_mb")
        for k in ("train_gflops", "sgemm_peak_gflops", "peak_fraction", "peak_rss_mb",
                  "decode_weight_bytes_per_token", "read_bandwidth_gbs", "decode_bandwidth_gbs",
                  "decode_bound_fraction"):
            row["dt_" + k] = dt.get(k)
        # PyTorch's decode against the same bound: bytes per token at difftrans's measured read bandwidth
        bpt, bw = dt.get("decode_weight_bytes_per_token"), dt.get("read_bandwidth_gbs")
        row["pt_decode_bound_fraction"] = (ratio(pt.get("decode_tokens_per_s") * bpt, bw * 1e9)
                                           if pt.get("decode_tokens_per_s") and bpt and bw else None)
        row["notes"] = "; ".join(
            ["PyTorch %s skipped: %s" % (k, v) for k, v in pt.get("skipped", {}).items()]
            + (["PyTorch: " + pt["error"]] if pt.get("error") else [])
            + (["difftrans: " + dt["error"]] if dt.get("error") else []))
        rows.append(row)
    # DIFF ÷ baseline training throughput, for each implementation
    by = {(r["config"], r["seq"], r["arch"]): r for r in rows}
    reps = {(r["config"], r["seq"], r["arch"]): (r.get("torch_reps", []), r.get("difftrans_reps", []))
            for r in results}
    pairs = []
    for (cfgname, seq, arch), r in by.items():
        if arch != "diffllama":
            continue
        base = by.get((cfgname, seq, "llama"))
        if base is None:
            continue
        (pt_d, dt_d), (pt_b, dt_b) = reps[(cfgname, seq, arch)], reps[(cfgname, seq, "llama")]
        pairs.append({"config": cfgname, "seq": seq,
                      # DIFF ÷ baseline of the same repetition (run next to each other)
                      "pt_diff_over_base_train_reps": same_rep_ratios(pt_b, pt_d, "train_tokens_per_s"),
                      "dt_diff_over_base_train_reps": same_rep_ratios(dt_b, dt_d, "train_tokens_per_s"),
                      "pt_diff_over_base_train": ratio(r["pt_train"], base["pt_train"]),
                      "dt_diff_over_base_train": ratio(r["dt_train"], base["dt_train"]),
                      "pt_diff_over_base_prefill": ratio(r["pt_prefill"], base["pt_prefill"]),
                      "dt_diff_over_base_prefill": ratio(r["dt_prefill"], base["dt_prefill"])})
    return rows, pairs


def memory_growth(rows, impl):
    """Config D: MB of peak (training) RSS per 1k tokens between consecutive T, per arch."""
    out = []
    side = impl[:2]                     # "pt" or "dt": only runs whose training was measured
    for arch in ARCHS:
        pts = sorted((r["seq"], r[impl]) for r in rows
                     if r["config"] == "D" and r["arch"] == arch and r[impl] is not None
                     and r[side + "_train"] is not None)
        slopes = []
        for (t1, m1), (t2, m2) in zip(pts, pts[1:]):
            slopes.append((t1, t2, (m2 - m1) / ((t2 - t1) / 1024.0)))
        if slopes:
            out.append((arch, pts, slopes))
    return out


def targets(rows, pairs):
    """The issue's targets -> list of (target, value, verdict)."""
    res = []
    for r in rows:
        if r["config"] in ("A", "B", "C"):
            res.append(("training ≥ 1.5× eager PyTorch, %s %s" % (r["config"], r["arch"]),
                        fmt(r["ratio_train"], "ratio"),
                        None if r["ratio_train"] is None else r["ratio_train"] >= 1.5))
    # issue 12's shares of the sgemm peak measured in the same run (docs/PERFORMANCE.md, Targets)
    for r in rows:
        if r["config"] in ("A", "B", "C"):
            need = 0.80 if r["config"] == "A" else 0.70
            v = r["dt_peak_fraction"]
            res.append(("difftrans training ≥ %.0f%% of the sgemm peak, %s %s" % (100 * need, r["config"], r["arch"]),
                        fmt(v, "pct"), None if v is None else v >= need))
    for p in pairs:
        if p["config"] in ("A", "B", "C"):
            need = 0.95 if p["seq"] <= 256 else 0.93
            v = p["dt_diff_over_base_train"]
            res.append(("difftrans DIFF ≥ %.2f× baseline training, %s (T=%d)" % (need, p["config"], p["seq"]),
                        fmt(v, "ratio"), None if v is None else v >= need))
    for arch, pts, slopes in memory_growth(rows, "dt_peak_rss_mb"):
        tmax = max(r["seq"] for r in rows if r["config"] == "D" and r["arch"] == arch)
        ran = any(r["config"] == "D" and r["arch"] == arch and r["seq"] == tmax and r["dt_train"]
                  for r in rows)
        s = [x[2] for x in slopes]
        lin = max(s) / min(s) if len(s) >= 2 and min(s) > 0 else None
        res.append(("D %s: training at T=%d runs, memory ~linear in T (max ÷ min slope of peak RSS; "
                    "1 = linear, ≈4 = quadratic)" % (arch, tmax),
                    "%s; slope ratio %s" % ("ran" if ran else "did not run", fmt(lin)),
                    None if lin is None else (ran and lin <= 2.0)))
    for r in rows:
        if r["config"] == "E":
            v = r["dt_decode_bound_fraction"]
            res.append(("decode ≥ 90%% of the bandwidth bound, E %s" % r["arch"], fmt(v, "pct"),
                        None if v is None else v >= 0.9))
    return res


TEXT_COLUMNS = ("config", "arch", "impl", "target", "measured", "peak RSS MB by T", "slope by interval")


def table(headers, data, markdown):
    data = [[str(x) for x in row] for row in data]
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in data]
        return "\n".join(lines)
    w = [max(len(h), *(len(row[i]) for row in data)) if data else len(h) for i, h in enumerate(headers)]
    left = [h in TEXT_COLUMNS for h in headers]

    def just(x, i):
        return x.ljust(w[i]) if left[i] else x.rjust(w[i])
    lines = ["  ".join(just(h, i) for i, h in enumerate(headers)).rstrip()]
    lines += ["  ".join(just(x, i) for i, x in enumerate(row)).rstrip() for row in data]
    return "\n".join(lines)


def spread_range(vals):
    if not vals:
        return "—"
    return "%.2f–%.2f×" % (min(vals), max(vals)) if len(vals) > 1 else "%.2f×" % vals[0]


def core_lines(rows, meta):
    """The OpenBLAS core each side ran, and a warning when they differ: by default both inherit the
    environment, and on a CPU newer than OpenBLAS knows difftrans names the AVX-512 core for itself
    while PyTorch keeps OpenBLAS's SSE3 fallback (Emerald Rapids: 305 against 62 GFLOP/s), which
    the line alone reported, as "OpenBLAS's own choice" for both."""
    cores = {side: sorted({r[side + "_blas_core"] for r in rows if r.get(side + "_blas_core")})
             for side in ("dt", "pt")}
    lines = ["OpenBLAS core: difftrans %s, PyTorch %s (%s)." % (
        ", ".join(cores["dt"]) or "—", ", ".join(cores["pt"]) or "—",
        "OPENBLAS_CORETYPE=%s for both" % meta["openblas_coretype"] if meta.get("openblas_coretype")
        else "OPENBLAS_CORETYPE unset")]
    if cores["dt"] and cores["pt"] and cores["dt"] != cores["pt"]:
        lines.append("WARNING: the two sides ran different OpenBLAS cores, so their ratios compare different "
                     "matrix kernels; --openblas-core auto (or a NAME) gives both the same.")
    return lines


def report(rows, pairs, meta, markdown):
    md = markdown
    out = []
    h = "### " if md else "== "
    kernels = sorted({r["kernels"] for r in rows if r.get("kernels")})
    out.append("CPU: %s; difftrans kernel path: %s%s; %d thread(s); best of %d alternating repetitions "
               "per side." % (meta["cpu"], ", ".join(kernels) or "—",
                              " (forced with DT_ISA=%s)" % meta["isa"] if meta.get("isa") else "",
                              meta["threads"], meta["reps"]))
    out += core_lines(rows, meta)
    out.append("")
    out.append("%sThroughput, tokens/s (difftrans ÷ PyTorch), best repetition of each side" % h)
    out.append("")
    out.append(table(
        ["config", "T", "arch", "train PT", "train dt", "×", "prefill PT", "prefill dt", "×",
         "decode PT", "decode dt", "×"],
        [[r["config"], r["seq"], r["arch"], fmt(r["pt_train"]), fmt(r["dt_train"]),
          fmt(r["ratio_train"], "ratio"), fmt(r["pt_prefill"]), fmt(r["dt_prefill"]),
          fmt(r["ratio_prefill"], "ratio"), fmt(r["pt_decode"]), fmt(r["dt_decode"]),
          fmt(r["ratio_decode"], "ratio")] for r in rows], md))
    out.append("")
    out.append("%sRepetitions: spread of each side ((max − min) ÷ max) and the same-repetition ratios" % h)
    out.append("")
    out.append(table(
        ["config", "T", "arch", "train PT spread", "train dt spread", "train × per rep",
         "prefill × per rep", "decode × per rep"],
        [[r["config"], r["seq"], r["arch"], fmt(r["pt_train_spread"], "pct"), fmt(r["dt_train_spread"], "pct"),
          spread_range(r["rep_ratios_train"]), spread_range(r["rep_ratios_prefill"]),
          spread_range(r["rep_ratios_decode"])] for r in rows], md))
    if pairs:
        out.append("")
        out.append("%sDIFF ÷ baseline throughput: best repetition of each, and the same-repetition ratios" % h)
        out.append("")
        out.append(table(["config", "T", "train PT", "train difftrans", "train PT per rep",
                          "train difftrans per rep", "prefill PT", "prefill difftrans"],
                         [[p["config"], p["seq"], fmt(p["pt_diff_over_base_train"], "ratio"),
                           fmt(p["dt_diff_over_base_train"], "ratio"),
                           spread_range(p["pt_diff_over_base_train_reps"]),
                           spread_range(p["dt_diff_over_base_train_reps"]),
                           fmt(p["pt_diff_over_base_prefill"], "ratio"),
                           fmt(p["dt_diff_over_base_prefill"], "ratio")] for p in pairs], md))
    out.append("")
    out.append("%sdifftrans efficiency and memory" % h)
    out.append("")
    out.append(table(
        ["config", "T", "arch", "train GFLOP/s", "sgemm peak", "of peak", "peak RSS MB PT",
         "peak RSS MB dt", "decode MB/token", "read GB/s", "decode GB/s", "of bound dt",
         "of bound PT"],
        [[r["config"], r["seq"], r["arch"], fmt(r["dt_train_gflops"]), fmt(r["dt_sgemm_peak_gflops"]),
          fmt(r["dt_peak_fraction"], "pct"), fmt(r["pt_peak_rss_mb"], "mb"), fmt(r["dt_peak_rss_mb"], "mb"),
          fmt(r["dt_decode_weight_bytes_per_token"] / 2 ** 20
              if r["dt_decode_weight_bytes_per_token"] else None),
          fmt(r["dt_read_bandwidth_gbs"]), fmt(r["dt_decode_bandwidth_gbs"]),
          fmt(r["dt_decode_bound_fraction"], "pct"), fmt(r["pt_decode_bound_fraction"], "pct")]
         for r in rows], md))
    growth = [("PyTorch", g) for g in memory_growth(rows, "pt_peak_rss_mb")] + \
             [("difftrans", g) for g in memory_growth(rows, "dt_peak_rss_mb")]
    if growth:
        out.append("")
        out.append("%sConfig D: peak RSS growth, MB per 1024 more tokens" % h)
        out.append("")
        out.append(table(["impl", "arch", "peak RSS MB by T", "slope by interval"],
                         [[impl, arch, ", ".join("%d: %.0f" % p for p in pts),
                           ", ".join("%d→%d: %.1f" % s for s in slopes)]
                          for impl, (arch, pts, slopes) in growth], md))
    tg = targets(rows, pairs)
    if tg:
        out.append("")
        out.append("%sTargets" % h)
        out.append("")
        out.append(table(["target", "measured", "met"],
                         [[t, v, "—" if ok is None else ("yes" if ok else "NO")] for t, v, ok in tg], md))
    notes = [(r["config"], r["seq"], r["arch"], r["notes"]) for r in rows if r["notes"]]
    if notes:
        out.append("")
        out.append("Notes:")
        for n in notes:
            out.append("- %s T=%d %s: %s" % n)
    out.append("")
    out.append("Measured %s on %s (%s cores), %d thread(s), %d timed steps (median) per repetition, %d decode "
               "tokens%s; torch %s; load average %s at start, %s at end."
               % (meta["date"], meta["cpu"], meta["cores"], meta["threads"], meta["steps"],
                  meta["decode_tokens"], " (--quick sizes)" if meta["quick"] else "", meta["torch"],
                  fmt(meta["loadavg_start"]), fmt(meta.get("loadavg_end"))))
    return "\n".join(out)


def loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# ============================================================================= main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="A,B,C", help="comma-separated subset of A,B,C,D,E (default A,B,C)")
    ap.add_argument("--archs", default="diffllama,llama", help="diffllama,llama (default both)")
    ap.add_argument("--threads", type=int, default=2, help="threads for PyTorch and difftrans (default 2)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed training / prefill steps after 1 warm-up step; the median counts "
                         "(default 5; 2 with --quick)")
    ap.add_argument("--decode-tokens", type=int, default=None,
                    help="tokens decoded in the single stream (default 128; 16 with --quick)")
    ap.add_argument("--d-seqs", default=None,
                    help="sequence lengths of config D (default 1024,2048,4096,8192)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of everything")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables (for docs/PERFORMANCE.md)")
    ap.add_argument("--json", metavar="OUT", help="also write every measurement to this JSON file")
    ap.add_argument("--difftrans", default=os.path.join(ROOT, "build", "difftrans"),
                    help="the difftrans binary (default build/difftrans)")
    ap.add_argument("--skip-torch", action="store_true", help="run difftrans only")
    ap.add_argument("--skip-difftrans", action="store_true", help="run PyTorch only")
    ap.add_argument("--timeout", type=float, default=3600.0,
                    help="seconds allowed to each (config, arch) subprocess (default 3600)")
    ap.add_argument("--mem-limit-gb", type=float, default=None,
                    help="kill (and skip, for PyTorch by estimate) any run above this RSS "
                         "(default 60%% of MemAvailable at start)")
    ap.add_argument("--reps", type=int, default=3,
                    help="repetitions of every (config, arch), the two sides alternating (default 3)")
    ap.add_argument("--isa", choices=("portable", "avx2", "avx512"), default=None,
                    help="force difftrans's kernel path (DT_ISA); default: the widest the CPU supports")
    ap.add_argument("--openblas-core", metavar="CORE", default=None,
                    help="OPENBLAS_CORETYPE for both sides (e.g. Haswell, SkylakeX); 'auto' removes it so "
                         "that OpenBLAS picks its kernels for the CPU (or, where difftrans names a core for "
                         "itself, names that one for both); default: the environment as it is")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        worker(json.loads(args.worker))
        return 0

    names = [s.strip().upper() for s in args.configs.split(",") if s.strip()]
    bad = [n for n in names if n not in CONFIGS]
    if bad or not names:
        ap.error("--configs: unknown config(s) %s; choose from %s" % (",".join(bad) or repr(args.configs),
                                                                      ",".join(CONFIGS)))
    archs = [a.strip() for a in args.archs.split(",") if a.strip()]
    if not archs or any(a not in ARCHS for a in archs):
        ap.error("--archs takes diffllama and/or llama")
    if args.steps is None:
        args.steps = 2 if args.quick else 5
    if args.decode_tokens is None:
        args.decode_tokens = 16 if args.quick else 128
    if args.threads < 1 or args.steps < 1 or args.decode_tokens < 1 or args.reps < 1:
        ap.error("--threads, --steps, --decode-tokens and --reps must be ≥ 1")
    # Checked before any work: a bad --d-seqs stopped the run at config D after A-C's hours, a
    # --timeout or --mem-limit-gb of 0 or below killed every run and printed tables of dashes with
    # status 0, as did skipping both sides or a missing binary with --skip-torch.
    if args.d_seqs is not None:
        try:
            args.d_seqs = [int(t) for t in args.d_seqs.split(",")]
        except ValueError:
            args.d_seqs = []
        if not args.d_seqs or min(args.d_seqs) < 1:
            ap.error("--d-seqs takes sequence lengths ≥ 1, e.g. 1024,2048")
    if not args.timeout > 0:
        ap.error("--timeout must be > 0 seconds")
    if args.mem_limit_gb is not None and not args.mem_limit_gb > 0:
        ap.error("--mem-limit-gb must be > 0")
    if args.skip_torch and args.skip_difftrans:
        ap.error("--skip-torch and --skip-difftrans leave nothing to measure")
    if args.skip_torch and not os.path.exists(args.difftrans):
        ap.error("--difftrans %s: not found, and --skip-torch leaves nothing else to measure" % args.difftrans)
    args.mem_limit_mb = (args.mem_limit_gb * 1024.0 if args.mem_limit_gb
                         else 0.6 * mem_available_mb())
    args.difftrans = os.path.abspath(args.difftrans)

    if not args.skip_torch:
        check_against_reference()
    if not args.skip_difftrans and not os.path.exists(args.difftrans):
        log("WARNING: %s not found; only the PyTorch side will be measured" % args.difftrans)

    load = loadavg()
    if load is not None and load > 0.5:
        log("WARNING: load average %.2f: other processes share the cores, and the 2-thread numbers "
            "of both implementations (OpenMP spin-waits) can be off by large factors" % load)
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(),
            "loadavg_start": load,
            "cores": os.cpu_count(), "threads": args.threads, "steps": args.steps,
            "decode_tokens": args.decode_tokens, "quick": args.quick, "torch": torch.__version__,
            "reps": args.reps, "isa": args.isa,
            "openblas_coretype": side_env(args).get("OPENBLAS_CORETYPE"),
            "mem_limit_mb": args.mem_limit_mb, "difftrans": args.difftrans}
    results = []
    for name in names:
        base = CONFIGS[name]
        c = dict(base)
        if args.quick:
            c.update(QUICK[name])
        seqs = c["seqs"]
        if name == "D" and args.d_seqs:
            seqs = args.d_seqs
        phases = {k: base[k] for k in ("train", "prefill", "decode")}
        for T in seqs:
            runs = {}
            for arch in archs:
                desc = ("%s: d_model %d, %d layers, %d heads, SwiGLU %d, vocab %d, batch %d × %d, %s"
                        % (name, c["d_model"], c["layers"], c["heads"], c["ffn"], c["vocab"],
                           c["batch"], T, arch))
                runs[arch] = {"config": name, "seq": T, "arch": arch, "batch": c["batch"],
                              "model": {k: c[k] for k in ("d_model", "layers", "heads", "kv_heads", "ffn",
                                                          "vocab")},
                              "torch": {}, "difftrans": {}, "torch_reps": [], "difftrans_reps": [],
                              "desc": desc}
            for rep in range(args.reps):
                # the two architectures alternate within a repetition too, so that DIFF ÷ baseline
                # compares runs minutes apart at most, not one block of repetitions with the next
                for arch in (archs if rep % 2 == 0 else archs[::-1]):
                    r, desc = runs[arch], runs[arch]["desc"]
                    # alternate which side goes first, so that neither always gets the quieter moment
                    for side in (("torch", "difftrans") if rep % 2 == 0 else ("difftrans", "torch")):
                        if side == "torch" and not args.skip_torch:
                            log("PyTorch   [rep %d/%d] %s" % (rep + 1, args.reps, desc))
                            res = run_torch(args, c, T, arch, phases)
                            log("  -> " + ", ".join("%s %.1f tok/s" % (k.split("_")[0], res[k])
                                                    for k in THROUGHPUTS if k in res)
                                + (", peak RSS %.0f MB" % res["peak_rss_mb"] if "peak_rss_mb" in res else ""))
                            r["torch_reps"].append(res)
                        if side == "difftrans" and not args.skip_difftrans and os.path.exists(args.difftrans):
                            log("difftrans [rep %d/%d] %s" % (rep + 1, args.reps, desc))
                            res = run_difftrans(args, c, T, arch, phases)
                            log("  -> " + ", ".join("%s %.1f tok/s" % (k.split("_")[0], res[k])
                                                    for k in THROUGHPUTS if isinstance(res.get(k), (int, float))))
                            r["difftrans_reps"].append(res)
            for arch in archs:
                r = runs[arch]
                del r["desc"]
                r["torch"] = best_of(r["torch_reps"])
                r["difftrans"] = best_of(r["difftrans_reps"])
                results.append(r)

    meta["loadavg_end"] = loadavg()
    rows, pairs = build_rows(results)
    print(report(rows, pairs, meta, args.markdown))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"meta": meta, "results": results, "rows": rows, "diff_over_base": pairs,
                       "targets": [{"target": t, "measured": v, "met": ok}
                                   for t, v, ok in targets(rows, pairs)]}, f, indent=1)
            f.write("\n")
        os.replace(args.json + ".tmp", args.json)
        log("wrote " + args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
