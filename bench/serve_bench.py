#!/usr/bin/env python3
"""serve_bench.py — `difftrans serve` under concurrent streams, measured over HTTP.

For each scheme (a config E DIFF model, 220M parameters, randomly initialised; F32 and its q8_0
copy by default) it starts `difftrans serve --parallel 16` and measures, on loopback:

  streams   aggregate decode tokens/s with 1, 2, 4, 8 and 16 concurrent streaming completions
            (greedy, --tokens each, one-token prompts): tokens counted between each stream's first
            and last token, over the window where all streams decode; the levels are run in
            ascending order in even repetitions and descending in odd ones, so that a busy moment
            of a shared machine does not fall on one level only; the best repetition counts and
            the ratio to one stream is taken within each repetition.
  prefill   while --background streams decode, a --long-prompt token prompt arrives: its time to
            first token, and the other streams' gaps between tokens while it is prefilled (p50,
            p90, p99, largest) in units of their median gap before it (the per-token interval;
            target: a token delayed by at most 2 intervals, a gap of at most 3), beside the same
            streams over as long a window with no prompt arriving (what the machine alone does).

Python's standard library only; the server is the only difftrans process. Prints a Markdown table
per measurement with the CPU model, and --json writes everything.

  /usr/bin/python3 bench/serve_bench.py                      # F32 and q8_0, 2 threads, 3 reps
  /usr/bin/python3 bench/serve_bench.py --schemes q8_0 --reps 1 --tokens 32
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CONFIG_E = {
    "architectures": ["DiffLlamaForCausalLM"], "model_type": "diffllama", "vocab_size": 32000,
    "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 12, "num_attention_heads": 16,
    "num_key_value_heads": 16, "head_dim": 64, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
    "rope_theta": 10000, "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
    "mlp_bias": False, "torch_dtype": "float32", "lambda_std_dev": 0.1, "bos_token_id": None,
    "eos_token_id": None, "pad_token_id": None,
}


def positive_ints(ap, flag, text, example):
    """a comma-separated list of integers >= 1 from flag's text, or ap.error naming the flag (a word was a
    traceback, and a bad list failed only after the model was made)"""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        ap.error(f"{flag} {text}: expected {example}")
    return values


def cpu_model():
    """the brand string with the family and model numbers (some brand strings say only 'AMD EPYC')"""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                info.setdefault(k.strip(), v.strip())
    except OSError:
        return "unknown CPU"
    flags = info.get("flags", "").split()
    isa = "AVX-512" + (" VNNI" if "avx512_vnni" in flags else "") if "avx512f" in flags else \
        "AVX2" if "avx2" in flags else "no AVX2"
    return f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')}, model " \
           f"{info.get('model', '?')}, {isa})"


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"serve_bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


FORTUNES = "/usr/share/games/fortunes"


def make_models(difftrans, work, schemes):
    """config E (random) with a 32000-token BPE learned on the fortunes (every id is text, and no
    EOS: a random model's greedy stream runs to max_tokens), and its quantised copies; reused when
    already there"""
    dirs = {}
    base = os.path.join(work, "e-f32")
    if not os.path.exists(os.path.join(base, "model.safetensors")):
        if not os.path.isdir(FORTUNES):
            sys.exit(f"serve_bench: {FORTUNES} is missing (apt-get install fortunes): its text trains the tokenizer")
        text = os.path.join(work, "fortunes.txt")
        with open(text, "wb") as out:
            for name in sorted(os.listdir(FORTUNES)):
                path = os.path.join(FORTUNES, name)
                if os.path.isfile(path) and "." not in name:
                    with open(path, "rb") as f:
                        out.write(f.read())
        tok = os.path.join(work, "tokenizer")
        run([difftrans, "tokenizer", "train", "--data", text, "--out", tok, "--vocab-size", "32000", "--eos", "",
             "--quiet"])
        cfg = os.path.join(work, "config-e.json")
        with open(cfg, "w") as f:
            json.dump(CONFIG_E, f)
        print(f"serve_bench: writing config E (220M parameters) to {base}", file=sys.stderr)
        run([difftrans, "init", "--out", base, "--config", cfg, "--arch", "diff", "--seed", "1"])
        # the BPE is the model's vocabulary: its files replace the byte-level marker
        os.remove(os.path.join(base, "difftrans_tokenizer.json"))
        for name in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(tok, name), "rb") as f, open(os.path.join(base, name), "wb") as g:
                g.write(f.read())
    for s in schemes:
        if s == "f32":
            dirs[s] = base
            continue
        d = os.path.join(work, "e-" + s)
        if not os.path.exists(os.path.join(d, "config.json")):
            print(f"serve_bench: quantising to {s}", file=sys.stderr)
            run([difftrans, "quantize", base, d, "--scheme", s] + (["--dynamic"] if s == "w8a8" else []))
        dirs[s] = d
    return dirs


class Server:
    def __init__(self, difftrans, model, threads, parallel, ctx):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))  # OpenMP's default wait policy: steps run back to back
        self.p = subprocess.Popen([difftrans, "serve", model, "--port", "0", "--parallel", str(parallel),
                                   "--ctx", str(ctx), "--threads", str(threads), "--quiet"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.p.stdout.readline()
        m = re.search(r"http://([^:/]+|\[[^\]]+\]):(\d+)", line)
        if not m:
            err = self.p.stderr.read()
            sys.exit(f"serve_bench: the server did not start: {line!r} {err[-2000:]}")
        self.host, self.port = m.group(1), int(m.group(2))

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def stream_completion(host, port, prompt, max_tokens, out):
    """one streaming completion; appends the arrival time of every chunk with text to out['t']"""
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True})
    out["sent"] = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        out["error"] = f"{r.status} {r.read()[:300]!r}"
        return
    times = out.setdefault("t", [])
    for raw in r:
        line = raw.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("choices") and chunk["choices"][0].get("text") is not None and \
                chunk["choices"][0].get("finish_reason") is None:
            times.append(time.monotonic())
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
    conn.close()


def aggregate(host, port, k, tokens):
    outs = [dict() for _ in range(k)]
    threads = [threading.Thread(target=stream_completion, args=(host, port, [1 + i], tokens, outs[i]))
               for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        if "error" in o:
            sys.exit(f"serve_bench: a request failed: {o['error']}")
    # the window where every stream decodes: from the last first token to the first last token
    lo = max(o["t"][0] for o in outs)
    hi = min(o["t"][-1] for o in outs)
    n = sum(sum(1 for x in o["t"] if lo <= x <= hi) for o in outs) - k  # intervals, not tokens
    if hi <= lo or n <= 0:
        return float("nan")
    return n / (hi - lo)


def gap_stats(gaps, interval):
    """quantiles of token gaps, in ms and in units of the interval before"""
    q = lambda p: sorted(gaps)[min(len(gaps) - 1, int(p * len(gaps)))]
    out = {"n": len(gaps)}
    for name, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)):
        out[name + "_s"] = q(p) if gaps else float("nan")
        out[name + "_intervals"] = out[name + "_s"] / interval if gaps else float("nan")
    return out


def prefill_interference(host, port, background, long_prompt, tokens, window_s=None):
    """background streams decode; once each has a third of its tokens, a long_prompt-token prompt
    arrives, and the streams' token gaps are taken before it and until its first token. With
    long_prompt 0, the control: nothing arrives, and the gaps are taken over window_s from the same
    point, so that what the machine alone does to the gaps (another thread taking a core now and
    then) is measured beside what the prompt does."""
    outs = [dict() for _ in range(background)]
    threads = [threading.Thread(target=stream_completion, args=(host, port, [2 + i], tokens, outs[i]))
               for i in range(background)]
    for t in threads:
        t.start()
    # wait until every stream has decoded a while, then send the long prompt
    while not all(len(o.get("t", [])) >= tokens // 3 for o in outs):
        time.sleep(0.01)
    long_out = {}
    if long_prompt > 0:
        prompt = [3 + (7 * i) % 31000 for i in range(long_prompt)]
        lt = threading.Thread(target=stream_completion, args=(host, port, prompt, 2, long_out))
        lt.start()
        lt.join()
        if "error" in long_out:
            sys.exit(f"serve_bench: the long prompt failed: {long_out['error']}")
        t0, t1 = long_out["sent"], long_out["t"][0]
    else:
        t0 = time.monotonic()
        time.sleep(window_s)
        t1 = t0 + window_s
    for t in threads:
        t.join()
    for o in outs:
        if "error" in o:
            sys.exit(f"serve_bench: a request failed: {o['error']}")
    before, during = [], []
    for o in outs:
        ts = o["t"]
        for a, b in zip(ts, ts[1:]):
            if b <= t0:
                before.append(b - a)
            elif a <= t1 and b > t0:
                during.append(b - a)
    med = statistics.median(before)
    return {"ttft_s": t1 - t0, "interval_s": med, "before": gap_stats(before, med),
            "during": gap_stats(during, med)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--difftrans", default=os.path.join(here, "..", "build", "difftrans"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "difftrans-serve-bench"),
                    help="where the models are written (reused on the next run)")
    ap.add_argument("--schemes", default="f32,q8_0")
    ap.add_argument("--streams", default="1,2,4,8,16")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per stream [64]")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--long-prompt", type=int, default=1000, help="tokens of the prompt that arrives mid-stream [1000]; 0: skip that measurement")
    ap.add_argument("--background", type=int, default=4, help="streams decoding while the long prompt arrives")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    # refused before the 220M-parameter model is made, naming the flag (a bad --reps or --schemes
    # failed only after it, a bad --streams was a traceback)
    levels = positive_ints(ap, "--streams", a.streams, "stream counts >= 1, e.g. 1,2,4,8")
    schemes = a.schemes.split(",")
    if any(s not in ("f32", "q8_0", "q4_0", "w8a8") for s in schemes):
        ap.error(f"--schemes {a.schemes}: expected f32, q8_0, q4_0 and/or w8a8")
    if a.tokens < 1 or a.threads < 1 or a.reps < 1 or a.long_prompt < 0 or (a.long_prompt > 0 and a.background < 1):
        ap.error("--tokens, --threads, --reps and --background (with a --long-prompt) must be >= 1, --long-prompt >= 0")
    os.makedirs(a.work, exist_ok=True)
    # the client measures arrival times: it must not wait behind the server's compute threads for a
    # core (2 cores, both busy with the model), or its own scheduling shows up as token gaps
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        print("serve_bench: could not raise this process's priority (not root): token gaps include the "
              "client's own waits for a core", file=sys.stderr)
    dirs = make_models(a.difftrans, a.work, schemes)
    cpu = cpu_model()
    results = {"cpu": cpu, "threads": a.threads, "tokens": a.tokens, "schemes": {}}
    ctx = max(a.long_prompt + 8, a.tokens * 2 + 8)
    for s in schemes:
        srv = Server(a.difftrans, dirs[s], a.threads, max(levels + [a.background + 1]), ctx)
        try:
            # warm-up: pages in the weights, and every slot's KV-cache pages the streams will write
            # (calloc'd: first touched by the first request in each slot, not a steady-state cost)
            aggregate(srv.host, srv.port, max(levels), a.tokens)
            reps = []
            for r in range(a.reps):
                order = levels if r % 2 == 0 else levels[::-1]
                rep = {k: aggregate(srv.host, srv.port, k, a.tokens) for k in order}
                reps.append(rep)
                print(f"serve_bench: {s} rep {r + 1}: " + ", ".join(f"{k}: {rep[k]:.1f}" for k in levels),
                      file=sys.stderr)
            inter = []
            for _ in range(a.reps if a.long_prompt > 0 else 0):
                x = prefill_interference(srv.host, srv.port, a.background, a.long_prompt, a.tokens * 3)
                x["control"] = prefill_interference(srv.host, srv.port, a.background, 0, a.tokens * 3,
                                                    window_s=x["ttft_s"])
                inter.append(x)
        finally:
            srv.stop()
        results["schemes"][s] = {"reps": reps, "prefill": inter}

    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"\n### Serving: aggregate decode tokens/s (config E, {cpu}, {a.threads} threads)\n")
    print("| scheme | " + " | ".join(f"{k} stream{'s' if k > 1 else ''}" for k in levels) +
          f" | {max(levels) if 8 not in levels else 8} ÷ 1 |")
    print("|---" * (len(levels) + 2) + "|")
    for s in schemes:
        reps = results["schemes"][s]["reps"]
        best = {k: max(r[k] for r in reps) for k in levels}
        top = 8 if 8 in levels else max(levels)
        ratios = [r[top] / r[levels[0]] for r in reps]
        print(f"| {s} | " + " | ".join(f"{best[k]:.1f}" for k in levels) +
              f" | {min(ratios):.2f}–{max(ratios):.2f} (median {statistics.median(ratios):.2f}) |")
    if a.long_prompt <= 0:
        return
    print(f"\n### Serving: a {a.long_prompt}-token prompt arriving while {a.background} streams decode\n")
    print("Token gaps of the decoding streams in units of their median gap before the prompt came (the "
          "per-token interval); the delay the prompt adds to a token is its gap less one interval. "
          "*Without it*: the same streams over as long a window with no prompt arriving.\n")
    print("| scheme | its time to first token (s) | interval (ms) | gap while it prefills: p50 / p90 / p99 / "
          "largest | without it: p50 / p90 / p99 / largest |")
    print("|---|---|---|---|---|")
    for s in schemes:
        for x in results["schemes"][s]["prefill"]:
            d, c = x["during"], x["control"]["during"]
            cell = lambda g: " / ".join(f"{g[k + '_intervals']:.2f}" for k in ("p50", "p90", "p99", "max"))
            print(f"| {s} | {x['ttft_s']:.2f} | {1e3 * x['interval_s']:.1f} | {cell(d)} | {cell(c)} |")


if __name__ == "__main__":
    main()
