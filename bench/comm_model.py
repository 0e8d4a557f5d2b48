#!/usr/bin/env python3
"""comm_model.py — the α–β cost of a ring all-reduce of the gradients, per preset, link speed and
node count, and the per-node batch at which the backward hides it (docs/DISTRIBUTED.md).

  ring all-reduce of M bytes over N nodes:  t(N) = 2(N−1)·α + 2·(N−1)/N · M / β
  (reduce-scatter then all-gather, each N−1 steps of M/N bytes; ZeRO-1's reduce-scatter +
  all-gather of the parameters costs the same.) difftrans reduces the gradients in k buckets
  (about P/8 parameters each, 64 Ki to 4 Mi: src/train/step.c), which pays the latency k times:
  t(N) = k·2(N−1)·α + 2·(N−1)/N · 4P / β.

That is the textbook ring. Open MPI 4.1's non-blocking all-reduce (coll/libnbc), which difftrans
calls in place, does not run it by default: it takes a binomial tree (reduce to rank 0, then
broadcast), which moves the whole bucket ⌈log2 N⌉ times up and ⌈log2 N⌉ times down:
  t(N) = k·2⌈log2 N⌉·α + 2⌈log2 N⌉ · 4P / β        (--algorithm binomial)
`mpirun --mca coll_libnbc_iallreduce_algorithm 1` selects the ring (bench/netns_check.sh
measures both on a rate-limited link).

The backward takes about 2/3 of a step's compute and the gradients are reduced in buckets while it
runs, so the reduction is hidden when t(N) <= (2/3) · tokens_per_node / node_tokens_per_s, i.e.
  tokens per node per step >= 1.5 · t(N) · node_tokens_per_s.
node_tokens_per_s is a measurement (difftrans train on one node, one rank), passed per preset.

usage: comm_model.py [--alpha-us 20] [--algorithm ring|binomial] [--rate PRESET=TOK_PER_S ...]
       comm_model.py --predict PRESET|PARAMS NODES MBIT_PER_S [--alpha-us A] [--algorithm ...]
         (one all-reduce time in ms, for a link of MBIT_PER_S megabits per second)
"""
import argparse
import math

PRESETS = {"tiny": 133568, "small": 870016, "medium": 3345152, "base": 25963008}  # DIFF parameters
LINKS = {"10 Gb/s": 10e9 / 8, "100 Gb/s": 100e9 / 8}
NODES = [2, 4, 8, 16, 32, 64, 128, 256]


def buckets(params):
    target = min(max(params // 8, 1 << 16), 1 << 22)
    return -(-params // target)


def allreduce_s(params, nodes, alpha, beta, algorithm="ring"):
    m = 4.0 * params
    if algorithm == "binomial":
        hops = 2 * math.ceil(math.log2(nodes))
        return buckets(params) * hops * alpha + hops * m / beta
    return buckets(params) * 2 * (nodes - 1) * alpha + 2 * (nodes - 1) / nodes * m / beta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha-us", type=float, default=20.0, help="per-message latency, µs")
    ap.add_argument("--rate", action="append", default=[], help="PRESET=TOKENS_PER_S of one node")
    ap.add_argument("--algorithm", choices=["ring", "binomial"], default="ring", help="all-reduce algorithm [ring]")
    ap.add_argument("--predict", nargs=3, metavar=("PRESET|PARAMS", "NODES", "MBIT_PER_S"),
                    help="print one all-reduce time in ms and exit")
    a = ap.parse_args()
    if not (a.alpha_us >= 0 and math.isfinite(a.alpha_us)):
        ap.error(f"--alpha-us {a.alpha_us:g}: a latency is a finite number of µs >= 0")
    alpha = a.alpha_us * 1e-6
    if a.predict:
        what, nodes, mbit = a.predict
        try:
            params = PRESETS[what] if what in PRESETS else int(what)
            nodes, mbit = int(nodes), float(mbit)
        except ValueError:
            ap.error(f"--predict {what} {nodes} {mbit}: expected a preset ({', '.join(PRESETS)}) or a "
                     "parameter count, a node count and megabits per second")
        if nodes < 2 or not mbit > 0 or params < 1:
            ap.error("--predict needs PARAMS >= 1, NODES >= 2 and MBIT_PER_S > 0")
        print(f"{1e3 * allreduce_s(params, nodes, alpha, mbit * 1e6 / 8, a.algorithm):.3f}")
        return
    rates = {}
    for r in a.rate:
        name, _, value = r.partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = math.nan
        # an unknown preset or a rate that is no number was a traceback, or silently no column
        if name not in PRESETS or not (rate > 0 and math.isfinite(rate)):
            ap.error(f"--rate {r}: expected PRESET=TOKENS_PER_S with a preset of {', '.join(PRESETS)} and a "
                     "rate > 0")
        rates[name] = rate
    for link, beta in LINKS.items():
        print(f"\n{link}, α = {a.alpha_us:g} µs, {a.algorithm}: all-reduce time per step, ms (tokens per node per step to hide it)\n")
        print("| preset | params (buckets) | " + " | ".join(f"N={n}" for n in NODES) + " |")
        print("| --- | ---: | " + " | ".join("---:" for _ in NODES) + " |")
        for name, p in PRESETS.items():
            cells = []
            for n in NODES:
                t = allreduce_s(p, n, alpha, beta, a.algorithm)
                cell = f"{1e3 * t:.2f}"
                if name in rates:
                    cell += f" ({1.5 * t * rates[name]:,.0f})"
                cells.append(cell)
            print(f"| {name} | {p / 1e6:.2f} M ({buckets(p)}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
