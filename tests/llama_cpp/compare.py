#!/usr/bin/env python3
"""compare.py — how far two engines' logits for the same token ids are apart.

    compare.py LABEL A B --max-rel X [--mean-rel Y] [--against C D --max-ratio R] [--json OUT]

A, B, C, D are logits files: `difftrans forward` output (safetensors, `logits` F32 [1, T, V]) or
llama_ref's (magic LRF1, int32 rows, vocab, first position, then F32 [rows, vocab]); llama_ref's
may hold only the last position, which is then compared with that position of the other file.

The measure is the largest absolute difference over every position and vocabulary entry, as a
fraction of the logit range (max − min of A's logits at the positions compared): a scale-free
number that does not depend on how confident the model is. --max-rel bounds it, --mean-rel bounds
the mean absolute difference (same scale). --against C D --max-ratio R also requires
mean|A − B| ≤ R · mean|C − D|: the two engines must be closer to each other than, say, the
quantised model is to the float one (the mean, not the largest difference: one outlier of a
rounding step does not decide it). NaN or infinity anywhere fails. Exit 0 within the bounds, 1 outside
them, 2 when a file cannot be read. Prints one line (and --json appends a JSON line to OUT).
Standard library only.
"""
import argparse
import array
import json
import math
import struct
import sys


def read_logits(path):
    """(first position, rows, vocab, flat array of floats)"""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == b"LRF1":
        rows, vocab, first = struct.unpack_from("<iii", data, 4)
        a = array.array("f")
        a.frombytes(data[16:16 + 4 * rows * vocab])
        if len(a) != rows * vocab:
            raise ValueError(f"{path}: truncated ({len(a)} of {rows * vocab} floats)")
        return first, rows, vocab, a
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    e = header.get("logits")
    if not e or e["dtype"] != "F32" or len(e["shape"]) != 3 or e["shape"][0] != 1:
        raise ValueError(f"{path}: no F32 logits [1, T, V]")
    _, rows, vocab = e["shape"]
    lo, hi = e["data_offsets"]
    a = array.array("f")
    a.frombytes(data[8 + n + lo:8 + n + hi])
    if sys.byteorder != "little":
        a.byteswap()
    if len(a) != rows * vocab:
        raise ValueError(f"{path}: logits hold {len(a)} floats, not {rows * vocab}")
    return 0, rows, vocab, a


def aligned(pa, pb):
    """the positions both files hold, as (slice of a, slice of b, positions, vocab)"""
    fa, ra, va, a = read_logits(pa)
    fb, rb, vb, b = read_logits(pb)
    if va != vb:
        raise ValueError(f"{pa} has a vocabulary of {va}, {pb} of {vb}")
    lo, hi = max(fa, fb), min(fa + ra, fb + rb)
    if hi <= lo:
        raise ValueError(f"{pa} (positions {fa}..{fa + ra - 1}) and {pb} ({fb}..{fb + rb - 1}) share none")
    return a[(lo - fa) * va:(hi - fa) * va], b[(lo - fb) * vb:(hi - fb) * vb], hi - lo, va


def stats(pa, pb):
    a, b, rows, vocab = aligned(pa, pb)
    finite = all(math.isfinite(x) for x in a) and all(math.isfinite(x) for x in b)
    if not finite:
        return {"finite": False, "rows": rows}
    d = [abs(x - y) for x, y in zip(a, b)]
    rng = max(a) - min(a)
    agree = sum(1 for r in range(rows)
                if max(range(vocab), key=lambda j: a[r * vocab + j]) == max(range(vocab), key=lambda j: b[r * vocab + j]))
    return {"finite": True, "rows": rows, "vocab": vocab, "range": rng, "max_abs": max(d), "mean_abs": sum(d) / len(d),
            "max_rel": max(d) / rng if rng > 0 else math.inf, "mean_rel": sum(d) / len(d) / rng if rng > 0 else math.inf,
            "argmax_agree": agree}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--max-rel", type=float, required=True)
    ap.add_argument("--mean-rel", type=float)
    ap.add_argument("--against", nargs=2, metavar=("C", "D"))
    ap.add_argument("--max-ratio", type=float)
    ap.add_argument("--json")
    o = ap.parse_args()
    try:
        s = stats(o.a, o.b)
        ref = stats(*o.against) if o.against else None
    except (OSError, ValueError, KeyError, struct.error, json.JSONDecodeError) as e:
        print(f"{o.label}: {e}")
        return 2
    ok = s["finite"]
    if not ok:
        line = f"{o.label}: a logit is NaN or infinite"
    else:
        ok = s["max_rel"] <= o.max_rel and (o.mean_rel is None or s["mean_rel"] <= o.mean_rel)
        line = (f"{o.label}: max |Δ| {s['max_abs']:.3g} = {s['max_rel']:.3g} of the logit range {s['range']:.3g} "
                f"(bound {o.max_rel:g}), mean |Δ| {s['mean_rel']:.3g} of it"
                + (f" (bound {o.mean_rel:g})" if o.mean_rel is not None else "")
                + f", argmax agrees at {s['argmax_agree']}/{s['rows']} positions")
        if ref is not None:
            if not ref["finite"] or o.max_ratio is None:
                ok = False
                line += "; the reference pair is not finite" if not ref["finite"] else "; --against needs --max-ratio"
            else:
                ratio = s["mean_abs"] / ref["mean_abs"] if ref["mean_abs"] > 0 else math.inf
                s["ratio"] = ratio
                ok = ok and ratio <= o.max_ratio
                line += f"; mean |Δ| {ratio:.3g} × the reference pair's {ref['mean_abs']:.3g} (bound {o.max_ratio:g})"
    print(("" if ok else "OUTSIDE THE BOUND: ") + line)
    if o.json:
        with open(o.json, "a") as f:
            f.write(json.dumps(dict(s, label=o.label, ok=ok, bound_max_rel=o.max_rel)) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
