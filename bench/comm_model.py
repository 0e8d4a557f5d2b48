#!/usr/bin/env python3
"""comm_model.py — the α–β cost of a ring all-reduce of the gradients, per preset, link speed and
node count, and the per-node batch at which the backward hides it (docs/DISTRIBUTED.md).

  ring all-reduce of M bytes over N nodes:  t(N) = 2(N−1)·α + 2·(N−1)/N · M / β
  (reduce-scatter then all-gather, each N−1 steps of M/N bytes; ZeRO-1's reduce-scatter +
  all-gather of the parameters costs the same.) difftrans reduces the gradients in k buckets
  (about P/8 parameters each, 64 Ki to 4 Mi: src/train/step.c), which pays the latency k times:
  t(N) = k·2(N−1)·α + 2·(N−1)/N · 4P / β.

The backward takes about 2/3 of a step's compute and the gradients are reduced in buckets while it
runs, so the reduction is hidden when t(N) <= (2/3) · tokens_per_node / node_tokens_per_s, i.e.
  tokens per node per step >= 1.5 · t(N) · node_tokens_per_s.
node_tokens_per_s is a measurement (difftrans train on one node, one rank), passed per preset.

usage: comm_model.py [--alpha-us 20] [--rate PRESET=TOK_PER_S ...] [--markdown]
"""
import argparse

PRESETS = {"tiny": 133568, "small": 870016, "medium": 3345152, "base": 25963008}  # DIFF parameters
LINKS = {"10 Gb/s": 10e9 / 8, "100 Gb/s": 100e9 / 8}
NODES = [2, 4, 8, 16, 32, 64, 128, 256]


def buckets(params):
    target = min(max(params // 8, 1 << 16), 1 << 22)
    return -(-params // target)


def allreduce_s(params, nodes, alpha, beta):
    m = 4.0 * params
    return buckets(params) * 2 * (nodes - 1) * alpha + 2 * (nodes - 1) / nodes * m / beta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha-us", type=float, default=20.0, help="per-message latency, µs")
    ap.add_argument("--rate", action="append", default=[], help="PRESET=TOKENS_PER_S of one node")
    a = ap.parse_args()
    alpha = a.alpha_us * 1e-6
    rates = dict((k, float(v)) for k, v in (r.split("=") for r in a.rate))
    for link, beta in LINKS.items():
        print(f"\n{link}, α = {a.alpha_us:g} µs: all-reduce time per step, ms (tokens per node per step to hide it)\n")
        print("| preset | params (buckets) | " + " | ".join(f"N={n}" for n in NODES) + " |")
        print("| --- | ---: | " + " | ".join("---:" for _ in NODES) + " |")
        for name, p in PRESETS.items():
            cells = []
            for n in NODES:
                t = allreduce_s(p, n, alpha, beta)
                cell = f"{1e3 * t:.2f}"
                if name in rates:
                    cell += f" ({1.5 * t * rates[name]:,.0f})"
                cells.append(cell)
            print(f"| {name} | {p / 1e6:.2f} M ({buckets(p)}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
