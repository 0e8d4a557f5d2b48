#!/usr/bin/env python3
"""llama_cpp_bench.py — difftrans and llama.cpp side by side on the same weights (issue 19, item 6).

One llama model (config E's shapes: 1024 wide, 12 layers, 16 heads of 64, SwiGLU 2816, a
32000-token BPE learned on the fortunes, untied LM head: 220M parameters; randomly initialised,
seed 1) is exported by difftrans as F32, Q8_0 and Q4_0 GGUF (quantised: every layer matrix and the
LM head, the token embedding and the norms F32), and both engines load the same file:

  agreement  first, so that a reader knows the comparison is like for like: the logits of a
             64-token prompt in both (difftrans forward; llama.cpp with flash attention off and an
             F32 KV cache, then with its defaults), the largest difference as a fraction of the
             logit range, and the positions whose argmax agrees
  decode     tokens/s of one stream at positions 64..127 (past 32, so that attention over the
             cache is part of every step): difftrans generate --timings (a 64-token prompt, then
             65 tokens: the first comes from the prompt's logits, 64 are decoded), llama.cpp
             64 one-token llama_decode calls after the same 64-token prompt
  prompt     tokens/s of a 128- and a 1024-token prompt from an empty cache to its last logits:
             difftrans generate --timings -n 1 (the prompt in chunks of 128), llama.cpp one
             llama_decode of the prompt (n_batch covers it, n_ubatch its default 512)

Both engines get --threads (2) threads. llama.cpp runs in two settings: flash attention off with an
F32 KV cache (what difftrans computes), and its defaults (flash attention auto, F16 KV cache). Every
repetition measures every scheme with both engines, llama.cpp first in even repetitions and
difftrans first in odd ones (each measurement a fresh process), and the median of --reps (3)
counts. llama.cpp's process warms up first (one prompt, a few decoded tokens), as llama-bench
does, and so does difftrans's (generate --warmup: the prompt once, untimed); a process's first
prompt also pays thread start-up and first touches of OpenBLAS's buffers (docs/PERFORMANCE.md has
the time to the first token of a fresh process). difftrans runs without OPENBLAS_CORETYPE
(OpenBLAS's own kernels for the CPU, as llama.cpp picks its CPU variant) unless
--keep-openblas-core; the header line names the core it used. --avx2 puts both engines on their
AVX2 code (difftrans DT_ISA=avx2 with OpenBLAS's Haswell kernels, llama.cpp's haswell variant alone
in a directory of its own, or its alderlake one where the CPU has AVX-VNNI, which difftrans's AVX2
path then uses too; --no-avx-vnni keeps both off it): on an AVX-512 CPU, a stand-in for an AVX2 CPU
of the same cores.

llama.cpp comes from npm (tests/llama_cpp/fetch.sh: the prebuilt CPU libraries of
@node-llama-cpp/linux-x64, the CPU variant picked at run time, and the harness llama_ref compiled
against the same commit's headers), installed into --work. Prints Markdown tables with the CPU
model, llama.cpp's commit and CPU variant, what each engine quantises (the tensor types of the
file both load, and difftrans's own account of it); --json writes everything. Standard library only.

  /usr/bin/python3 bench/llama_cpp_bench.py                          # config E, F32 Q8_0 Q4_0, 3 reps
  /usr/bin/python3 bench/llama_cpp_bench.py --small --reps 3         # a smoke run on a small model
  /usr/bin/python3 bench/llama_cpp_bench.py --avx2                   # both engines' AVX2 code
"""
import argparse
import datetime
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "llama_cpp"))
from serve_bench import FORTUNES, cpu_model, positive_ints  # noqa: E402
import compare  # noqa: E402

LLAMA_E = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
    "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 12, "num_attention_heads": 16,
    "num_key_value_heads": 16, "head_dim": 64, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
    "rope_theta": 10000, "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
    "mlp_bias": False, "torch_dtype": "float32", "bos_token_id": None, "eos_token_id": None,
    "pad_token_id": None,
}
AGREE_TOKENS = 64  # the prompt whose logits both engines are compared on


def ids_needed(prompts, decode_at):
    """token ids to draw: the longest prompt, the decoding stream's prompt and the agreement's
    (with --prompts 16 --decode-at 16 the agreement was said to be on 64 tokens and ran on 16)"""
    return max(list(prompts) + [decode_at, AGREE_TOKENS])


# --small: the same kind of model at 1/20 of the size, for a smoke run
LLAMA_SMALL = dict(LLAMA_E, vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=4, head_dim=64)

SETTINGS = {  # llama.cpp's context settings
    "fa-off-f32": ["--flash-attn", "off", "--kv", "f32"],
    "defaults": [],
}
GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
              12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 30: "BF16"}


def log(msg):
    print(f"llama_cpp_bench: {msg}", file=sys.stderr, flush=True)


def run(cmd, env=None, timeout=3600):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"llama_cpp_bench: {' '.join(cmd)[:300]} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r


def gguf_tensors(path):
    """{name: (type name, shape)} from a GGUF file's header"""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]

        def rstr():
            return f.read(rd("Q")).decode("utf-8", "replace")

        magic, _version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF":
            sys.exit(f"llama_cpp_bench: {path} is not a GGUF file")
        for _ in range(n_kv):
            rstr()
            t = rd("I")
            if t == 8:
                rstr()
            elif t == 9:
                et, n = rd("I"), rd("Q")
                if et == 8:
                    for _ in range(n):
                        rstr()
                else:
                    f.seek(n * sizes[et], 1)
            else:
                f.seek(sizes[t], 1)
        out = {}
        for _ in range(n_tensors):
            name = rstr()
            ne = [rd("q") for _ in range(rd("I"))]
            ty = rd("I")
            rd("Q")
            out[name] = (GGML_TYPES.get(ty, f"type {ty}"), ne)
    return out


def describe_types(path):
    """'token_embd F32 · output Q8_0 · 84 layer matrices Q8_0 · 25 vectors F32'"""
    t = gguf_tensors(path)
    parts = [f"token_embd {t['token_embd.weight'][0]}" if "token_embd.weight" in t else "no token_embd",
             f"output (LM head) {t['output.weight'][0]}" if "output.weight" in t else "LM head tied to token_embd"]
    groups = {}
    for name, (ty, ne) in t.items():
        if name.startswith("blk."):
            key = ("layer matrices" if len(ne) == 2 else "layer vectors", ty)
            groups[key] = groups.get(key, 0) + 1
        elif name not in ("token_embd.weight", "output.weight"):
            groups[(name, ty)] = groups.get((name, ty), 0) + 1
    parts += [f"{n} {what} {ty}" if n > 1 else f"{what} {ty}" for (what, ty), n in sorted(groups.items())]
    return " · ".join(parts)


def fortunes_text(work):
    text = os.path.join(work, "fortunes.txt")
    if not os.path.exists(text):
        if not os.path.isdir(FORTUNES):
            sys.exit(f"llama_cpp_bench: {FORTUNES} is missing (apt-get install fortunes): its text trains the tokenizer")
        with open(text + ".tmp", "wb") as out:
            for name in sorted(os.listdir(FORTUNES)):
                path = os.path.join(FORTUNES, name)
                if os.path.isfile(path) and "." not in name:
                    with open(path, "rb") as f:
                        out.write(f.read())
        os.replace(text + ".tmp", text)
    return text


def make_model(dt, work, cfg, tag, schemes):
    """the float checkpoint (BPE vocabulary, no EOS: a random model's greedy stream runs on) and its
    GGUF files, reused when already there"""
    base = os.path.join(work, f"{tag}-llama")
    if not os.path.exists(os.path.join(base, "model.safetensors")):
        tok = os.path.join(work, f"tokenizer-{cfg['vocab_size']}")
        if not os.path.exists(os.path.join(tok, "tokenizer.json")):
            log(f"learning a {cfg['vocab_size']}-token BPE on the fortunes")
            run([dt, "tokenizer", "train", "--data", fortunes_text(work), "--out", tok, "--vocab-size",
                 str(cfg["vocab_size"]), "--eos", "", "--quiet"])
        path = os.path.join(work, f"config-{tag}.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        log(f"writing the {tag} llama model to {base}")
        run([dt, "init", "--out", base, "--config", path, "--arch", "transformer", "--seed", "1"])
        os.remove(os.path.join(base, "difftrans_tokenizer.json"))  # the BPE replaces the byte-level marker
        for name in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(tok, name), "rb") as f, open(os.path.join(base, name), "wb") as g:
                g.write(f.read())
    files = {}
    for s in schemes:
        # quantised: the LM head too (--lm-head), as llama-quantize does; the embedding stays F32
        q = s in ("q8_0", "q4_0")
        g = os.path.join(work, f"{tag}-llama-{s}{'-lm-head' if q else ''}.gguf")
        if not os.path.exists(g):
            log(f"exporting {s} GGUF")
            run([dt, "export", base, g, "--gguf", "--type", s] + (["--lm-head"] if q else []))
        files[s] = g
    return base, files


# OPENBLAS_CORETYPE in the environment (a sandbox may set Haswell) would keep difftrans's matrix
# products off OpenBLAS's AVX-512 kernels where llama.cpp picks its own best CPU variant; unless
# --keep-openblas-core, difftrans runs with OpenBLAS's own choice of core, as llama.cpp does
KEEP_OPENBLAS_CORE = False
# --avx2: difftrans on its AVX2 kernels and OpenBLAS's Haswell ones (--no-avx-vnni: without AVX-VNNI)
AVX2 = False
NO_AVX_VNNI = False


def dt_env(threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if AVX2:
        env.update(DT_ISA="avx2", OPENBLAS_CORETYPE="Haswell")
        if NO_AVX_VNNI:
            env["DT_AVXVNNI"] = "0"
    elif not KEEP_OPENBLAS_CORE:
        env.pop("OPENBLAS_CORETYPE", None)
    return env


def only_variant(modules, work, name):
    """A directory holding llama.cpp's libraries with one CPU variant (libggml-cpu-NAME.so) among the
    CPU variants, so that ggml_backend_load_all_from_path can pick no other; returns its path."""
    bins = os.path.join(modules, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
    want = f"libggml-cpu-{name}.so"
    if not os.path.exists(os.path.join(bins, want)):
        sys.exit(f"llama_cpp_bench: llama.cpp's package has no CPU variant {want} in {bins}")
    out = os.path.join(work, f"llama-cpu-{name}")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(bins):
        if f.startswith("libggml-cpu-") and f != want:
            continue
        link = os.path.join(out, f)
        if not os.path.lexists(link):
            os.symlink(os.path.join(bins, f), link)
    return out


def dt_generate(dt, model, ids, n, threads):
    """(prompt tokens/s, decode steps/s or None) from generate --timings"""
    env = dt_env(threads)
    r = run([dt, "generate", model, "--prompt-ids", " ".join(map(str, ids)), "-n", str(n), "--temperature", "0",
             "--print-ids", "--timings", "--warmup", "--threads", str(threads)], env=env)
    m = re.search(r"timings: prompt (\d+) tokens in [0-9.]+ s \(([0-9.]+) tokens/s[^)]*\), (\d+) generated in "
                  r"[0-9.]+ s \(([0-9.]+) tokens/s\)", r.stderr)
    if not m:
        sys.exit(f"llama_cpp_bench: no timings line from difftrans generate:\n{r.stderr[-1000:]}")
    gen, rate = int(m.group(3)), float(m.group(4))
    # the first generated token comes from the prompt's logits: gen − 1 decode steps in the time
    return float(m.group(2)), rate * (gen - 1) / gen if gen > 1 else None


def agreement(dt, lr, files, ids, threads, work):
    rows = []
    path = os.path.join(work, "agree-ids.txt")
    with open(path, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    for s, g in files.items():
        st = os.path.join(work, f"agree-{s}.st")
        run([dt, "forward", g, "--input", path, "--output", st, "--threads", str(threads)], env=dt_env(threads))
        for setting, flags in SETTINGS.items():
            b = os.path.join(work, f"agree-{s}-{setting}.bin")
            run([lr, "logits", g, "--ids", path, "--out", b, "--threads", str(threads)] + flags)
            r = compare.stats(b, st)
            r.update(scheme=s, setting=setting)
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--difftrans", default=os.path.join(HERE, "..", "build", "difftrans"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "difftrans-llama-bench"),
                    help="models, GGUF files and llama.cpp's packages, kept between runs")
    ap.add_argument("--schemes", default="f32,q8_0,q4_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", default="128,1024")
    ap.add_argument("--decode", type=int, default=64, help="decoded tokens timed [64]")
    ap.add_argument("--decode-at", type=int, default=64, help="the position decoding starts at [64]")
    ap.add_argument("--small", action="store_true", help="a small model instead of config E (a smoke run)")
    ap.add_argument("--keep-openblas-core", action="store_true",
                    help="run difftrans with OPENBLAS_CORETYPE as the environment sets it (default: removed, so that "
                         "OpenBLAS picks its kernels for the CPU as llama.cpp picks its CPU variant)")
    ap.add_argument("--avx2", action="store_true",
                    help="both engines on their AVX2 code on a CPU that has more (a stand-in for an AVX2-only CPU "
                         "of the same cores): difftrans with DT_ISA=avx2 and OPENBLAS_CORETYPE=Haswell, llama.cpp "
                         "with its haswell CPU variant only (alderlake where the CPU has AVX-VNNI)")
    ap.add_argument("--no-avx-vnni", action="store_true",
                    help="with --avx2 on a CPU with AVX-VNNI: neither engine uses it (difftrans DT_AVXVNNI=0, "
                         "llama.cpp's haswell variant), a stand-in for an AVX2 CPU without it (Zen 3)")
    ap.add_argument("--json", help="write the results here")
    o = ap.parse_args()
    # refused before llama.cpp is installed and the model made, naming the flag
    prompts = positive_ints(ap, "--prompts", o.prompts, "prompt lengths >= 1, e.g. 128,1024")
    if any(s not in ("f32", "q8_0", "q4_0") for s in o.schemes.split(",")):
        ap.error(f"--schemes {o.schemes}: expected f32, q8_0 and/or q4_0 (the GGUF types both engines read)")
    if o.threads < 1 or o.reps < 1 or o.decode < 1 or o.decode_at < 1:
        ap.error("--threads, --reps, --decode and --decode-at must be >= 1")
    global KEEP_OPENBLAS_CORE, AVX2, NO_AVX_VNNI
    KEEP_OPENBLAS_CORE = o.keep_openblas_core
    AVX2 = o.avx2
    NO_AVX_VNNI = o.no_avx_vnni
    dt = os.path.abspath(o.difftrans)
    work = os.path.abspath(o.work)
    os.makedirs(work, exist_ok=True)
    schemes = o.schemes.split(",")

    modules = os.path.join(work, "llama_cpp_modules")
    r = subprocess.run(["sh", os.path.join(HERE, "..", "tests", "llama_cpp", "fetch.sh"), modules],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"llama_cpp_bench: installing llama.cpp failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    lr = os.path.join(modules, "llama_ref")
    if o.avx2:  # llama_ref loads its CPU variants from LLAMA_REF_BACKENDS
        # difftrans's AVX2 path multiplies with AVX-VNNI where the CPU has it, as llama.cpp's
        # alderlake variant does (haswell: AVX2 alone)
        avx_vnni = "avx_vnni" in open("/proc/cpuinfo").read().split() and not o.no_avx_vnni
        os.environ["LLAMA_REF_BACKENDS"] = only_variant(modules, work, "alderlake" if avx_vnni else "haswell")
    info = run([lr, "info"]).stdout
    variant = re.search(r"registered CPU backend: (\S+)", info).group(1)
    commit = re.search(r"llama.cpp commit (.*?),", info).group(1)

    cfg, tag = (LLAMA_SMALL, "small") if o.small else (LLAMA_E, "e")
    base, files = make_model(dt, work, cfg, tag, schemes)
    rng = random.Random(1)
    ids = [rng.randrange(cfg["vocab_size"]) for _ in range(ids_needed(prompts, o.decode_at))]
    ids_path = os.path.join(work, "bench-ids.txt")
    with open(ids_path, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")

    cpu = cpu_model()
    print(f"# difftrans vs llama.cpp: {tag} llama model, {o.threads} threads\n")
    print(f"CPU: {cpu}; {datetime.date.today().isoformat()}; llama.cpp {commit} (npm @node-llama-cpp/linux-x64, "
          f"CPU variant {variant}); difftrans kernels: "
          + run([dt, "info", "--system"], env=dt_env(o.threads)).stdout.strip().replace("\n", "; ") + "\n")

    quantises = {}
    print("What each engine quantises (both load the same file):\n")
    for s, g in files.items():
        dinfo = run([dt, "info", g]).stdout
        m = re.search(r"^quantised: (.*)$", dinfo, re.M)
        p = re.search(r"^parameters: (\d+)", dinfo, re.M)
        quantises[s] = {"gguf_tensor_types": describe_types(g),
                        "difftrans": m.group(1) if m else "float32 weights (not quantised)",
                        "parameters": int(p.group(1)) if p else None}
        print(f"- {s}: the file: {quantises[s]['gguf_tensor_types']}; difftrans loads it as: {quantises[s]['difftrans']}")
    print()

    log("agreement")
    agree = agreement(dt, lr, files, ids[:AGREE_TOKENS], o.threads, work)
    print(f"Agreement on a {AGREE_TOKENS}-token prompt (largest |Δ logit| as a fraction of the logit range; "
          "argmax agreement):\n")
    print("| scheme | llama.cpp setting | max \\|Δ\\| / range | mean \\|Δ\\| / range | argmax agrees |")
    print("| --- | --- | --- | --- | --- |")
    for a in agree:
        print(f"| {a['scheme']} | {a['setting']} | {a['max_rel']:.2e} | {a['mean_rel']:.2e} | {a['argmax_agree']}/{a['rows']} |")
    print()

    # results[engine][scheme][measure] = [values per repetition]
    engines = ["difftrans"] + [f"llama.cpp {s}" for s in SETTINGS]
    res = {e: {s: {} for s in schemes} for e in engines}
    for rep in range(o.reps):
        for s in schemes:
            order = ["llama.cpp", "difftrans"] if rep % 2 == 0 else ["difftrans", "llama.cpp"]
            for eng in order:
                log(f"rep {rep + 1}/{o.reps} {s} {eng}")
                if eng == "difftrans":
                    r = res["difftrans"][s]
                    for n in prompts:
                        tps, _ = dt_generate(dt, files[s], ids[:n], 1, o.threads)
                        r.setdefault(f"prompt {n}", []).append(tps)
                    _, steps = dt_generate(dt, files[s], ids[:o.decode_at], o.decode + 1, o.threads)
                    r.setdefault("decode", []).append(steps)
                    continue
                for setting, flags in SETTINGS.items():
                    out = run([lr, "bench", files[s], "--ids", ids_path, "--prompt", o.prompts, "--decode", str(o.decode),
                               "--decode-at", str(o.decode_at), "--reps", "1", "--threads", str(o.threads)] + flags).stdout
                    j = json.loads(out.strip().splitlines()[-1])
                    r = res[f"llama.cpp {setting}"][s]
                    for n in prompts:
                        r.setdefault(f"prompt {n}", []).append(j["prompt"][str(n)]["median"])
                    r.setdefault("decode", []).append(j["decode"]["median"])
                    r.setdefault("flash_attn_resolved", []).append(j["flash_attn_resolved"])

    measures = ["decode"] + [f"prompt {n}" for n in prompts]
    med = {e: {s: {m: statistics.median(res[e][s][m]) for m in measures} for s in schemes} for e in engines}
    print(f"Tokens/s, medians of {o.reps} repetitions (decode at positions {o.decode_at}..{o.decode_at + o.decode - 1}); "
          "difftrans ÷ llama.cpp with flash attention off and an F32 KV cache, its defaults in brackets:\n")
    print("| scheme | measure | difftrans | llama.cpp FA off, F32 KV | llama.cpp defaults | difftrans ÷ llama.cpp |")
    print("| --- | --- | --- | --- | --- | --- |")
    for s in schemes:
        for m in measures:
            d, a, b = med["difftrans"][s][m], med["llama.cpp fa-off-f32"][s][m], med["llama.cpp defaults"][s][m]
            print(f"| {s} | {m} | {d:.1f} | {a:.1f} | {b:.1f} | {d / a:.2f} ({d / b:.2f}) |")
    fa = sorted({x for s in schemes for x in res["llama.cpp defaults"][s].get("flash_attn_resolved", [])})
    print(f"\nllama.cpp's defaults: flash attention auto → {', '.join(fa)}; KV cache F16.")
    spreads = {e: {s: {m: (max(v) - min(v)) / max(v) for m, v in res[e][s].items() if m in measures}
                   for s in schemes} for e in engines}
    worst = max(x for e in spreads.values() for s in e.values() for x in s.values())
    print(f"Largest spread between repetitions ((max − min) ÷ max): {worst:.0%}.")

    if o.json:
        with open(o.json, "w") as f:
            json.dump({"cpu": cpu, "date": datetime.date.today().isoformat(), "model": tag, "config": cfg,
                       "threads": o.threads, "reps": o.reps, "avx2": o.avx2, "no_avx_vnni": o.no_avx_vnni, "llama_cpp": {"commit": commit, "cpu_variant": variant,
                                                                          "settings": SETTINGS},
                       "decode_at": o.decode_at, "decode_tokens": o.decode, "quantises": quantises,
                       "agreement": agree, "runs": res, "medians": med, "spreads": spreads}, f, indent=1)


if __name__ == "__main__":
    main()
