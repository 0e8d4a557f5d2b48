#!/usr/bin/env python3
"""ttft.py — time to the first token of `difftrans generate` for prompts of 16 to 2040 tokens.

`generate` feeds the prompt through the model in batched chunks (dt_generate); before that it was
fed one token a step, at decoding speed. For each model given (by default serve_bench.py's config E,
F32 and q8_0) and each prompt length, it runs `generate --prompt-ids ... -n 8 --timings` --reps
times (lengths in ascending order, then descending) and prints the best prompt time, the prompt's
tokens/s, the decoding tokens/s of the same run, and their ratio: how much faster the prompt goes
than it would one token a step.

  /usr/bin/python3 bench/ttft.py                                   # after bench/serve_bench.py made the models
  /usr/bin/python3 bench/ttft.py --models runs/m --lengths 16,128,1024
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serve_bench import cpu_model, positive_ints  # noqa: E402  (the same CPU line as the serving tables)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--difftrans", default=os.path.join(HERE, "..", "build", "difftrans"))
    work = os.path.join("/tmp", "difftrans-serve-bench")
    ap.add_argument("--models", default=f"{work}/e-f32,{work}/e-q8_0")
    ap.add_argument("--lengths", default="16,64,256,1024,2040")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    # refused here, naming the flag: a word was a traceback, --reps 0 a KeyError after the runs
    lengths = positive_ints(ap, "--lengths", a.lengths, "prompt lengths >= 1, e.g. 16,128,1024")
    if a.threads < 1 or a.reps < 1:
        ap.error("--threads and --reps must be >= 1")
    for model in a.models.split(","):
        if not os.path.exists(model):
            ap.error(f"--models: {model} does not exist (bench/serve_bench.py writes the default ones)")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    print(f"### Time to the first token of `generate` ({cpu_model()}, {a.threads} threads)\n")
    print("| model | prompt tokens | time to first token (s) | prompt tokens/s | decode tokens/s | prompt ÷ decode |")
    print("|---|---|---|---|---|---|")
    for model in a.models.split(","):
        best = {}
        for r in range(a.reps):
            for n in (lengths if r % 2 == 0 else lengths[::-1]):
                ids = " ".join(str(3 + (7 * i) % 3000) for i in range(n))
                p = subprocess.run([a.difftrans, "generate", model, "--prompt-ids", ids, "-n", "8", "--temperature", "0",
                                    "--print-ids", "--timings"], capture_output=True, text=True, env=env)
                m = re.search(r"prompt (\d+) tokens in ([\d.]+) s .* (\d+) generated in ([\d.]+) s \(([\d.]+) tokens/s\)",
                              p.stderr)
                if p.returncode != 0 or not m:
                    sys.exit(f"ttft: generate failed on {model} with {n} tokens ({p.returncode}): {p.stderr[-500:]}")
                t, dec = float(m.group(2)), float(m.group(5))
                if n not in best or t < best[n][0]:
                    best[n] = (t, dec)
        for n in lengths:
            t, dec = best[n]
            print(f"| {os.path.basename(model.rstrip('/'))} | {n} | {t:.3f} | {n / t:.1f} | {dec:.1f} | {n / t / dec:.1f}× |")


if __name__ == "__main__":
    main()
