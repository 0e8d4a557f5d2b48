#!/usr/bin/python3
"""A small byte-level BPE tokenizer.json (GPT-2 layout) learned from a text, for the tests.

    python3 tests/make_bpe_tokenizer.py TEXT OUT_DIR [MERGES]

Writes OUT_DIR/tokenizer.json (256 byte tokens, MERGES merges [200], "<|endoftext|>" as a
special added token) and OUT_DIR/tokenizer_config.json naming it as BOS and EOS. Only the
standard library: the learned merges are data, and difftrans's own tokenizer does the encoding.
"""
import collections
import json
import os
import re
import sys


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 byte values."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def main():
    text_path, out = sys.argv[1], sys.argv[2]
    n_merges = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    b2u = bytes_to_unicode()
    text = open(text_path, "rb").read().decode("utf-8", errors="replace")
    # an ASCII approximation of the GPT-2 pre-tokenizer: enough to learn sensible merges
    words = collections.Counter(re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", text))
    seqs = {w: [b2u[b] for b in w.encode("utf-8")] for w in words}
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, count in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(a + " " + b)
        vocab[a + b] = len(vocab)
        for w in words:
            s, i, t = seqs[w], 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    t.append(a + b)
                    i += 2
                else:
                    t.append(s[i])
                    i += 1
            seqs[w] = t
    eos = "<|endoftext|>"
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab), "content": eos, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": eos, "eos_token": eos, "unk_token": eos, "model_max_length": 1024,
                   "tokenizer_class": "GPT2Tokenizer"}, f)
    print("%s: %d tokens (%d merges)" % (out, len(vocab) + 1, len(merges)))


if __name__ == "__main__":
    main()
