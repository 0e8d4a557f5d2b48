#!/usr/bin/env python3
"""make_fixtures.py OUT_DIR — writes the small hand-made tokenizer.json files of the golden tests.

Each file exercises a group of the components difftrans supports (normalizers, pre-tokenizers,
model options, added tokens, post-processors, decoders). Vocabularies and merges are learned by a
tiny BPE over TRAIN below: they only need to be plausible; the expected ids come from the Rust
library (make_goldens.js), never from this script.
"""
import json, os, re, sys
from collections import Counter

TRAIN = """The quick brown fox jumps over the lazy dog. It's 2024 and the fox's den is 1234 steps away!
In the beginning there was nothing, then there were numbers 0123456789 and words like running,
jumping, tokenization, tokenizer, token, tokens. Hello hello HELLO world World WORLD.
def main(argv):\n    return sum(int(x) for x in argv[1:])  # code, with    spaces\n\n\tand tabs
café naïve résumé über straße ﬁne Ｆｕｌｌ 日本語のテキスト 中文 한국어 Ελληνικά emoji 🤗🚀👍🏽
"""

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

B2U = bytes_to_unicode()

def learn(words, n_merges, prefix="", suffix=""):
    """words: Counter of tuples of symbols. Returns merges [(a, b)] and the symbols made."""
    words = Counter({tuple(w): c for w, c in words.items()})
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        new = a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)
        nw = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new); i += 2
                else:
                    out.append(w[i]); i += 1
            nw[tuple(out)] += c
        words = nw
    return merges

def vocab_from(base, merges, prefix=""):
    vocab = {}
    for t in base:
        if t not in vocab:
            vocab[t] = len(vocab)
    for a, b in merges:
        t = a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)
        if t not in vocab:
            vocab[t] = len(vocab)
    return vocab

def bytelevel_model(n_merges, split_re, prefix_space, ignore_merges=False, legacy=True):
    words = Counter()
    for w in re.findall(split_re, (" " if prefix_space else "") + TRAIN):
        words[tuple(B2U[b] for b in w.encode())] += 1
    merges = learn(words, n_merges)
    base = [B2U[b] for b in range(256)]
    vocab = vocab_from(base, merges)
    return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
            "vocab": vocab, "merges": [f"{a} {b}" if legacy else [a, b] for a, b in merges]}

def char_model(text, n_merges, byte_fallback=False, unk="<unk>", fuse_unk=False, prefix=None, suffix=None,
               specials=(), legacy=False, word_re=r"\S+", skip_chars=""):
    words = Counter()
    for w in re.findall(word_re, text):
        syms = [c for c in w if c not in skip_chars]
        if not syms:
            continue
        if prefix:
            syms = [syms[0]] + [prefix + c for c in syms[1:]]
        if suffix:
            syms[-1] = syms[-1] + suffix
        words[tuple(syms)] += 1
    merges = learn(words, n_merges, prefix or "")
    base = list(specials)
    if byte_fallback:
        base += [f"<0x{b:02X}>" for b in range(256)]
    chars = sorted({c for w in re.findall(word_re, text) for c in w if c not in skip_chars})
    base += chars
    if prefix:
        base += [prefix + c for c in chars]
    if suffix:
        base += [c + suffix for c in chars] + [prefix + c + suffix for c in chars] if prefix else [c + suffix for c in chars]
    vocab = vocab_from(base, merges, prefix or "")
    return {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": prefix,
            "end_of_word_suffix": suffix, "fuse_unk": fuse_unk, "byte_fallback": byte_fallback,
            "vocab": vocab, "merges": [f"{a} {b}" if legacy else [a, b] for a, b in merges]}

def added(id_, content, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}

def tokenizer(model, normalizer=None, pre=None, post=None, decoder=None, added_tokens=()):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added_tokens),
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post, "decoder": decoder, "model": model}

def template(single, specials):
    items = [{"Sequence": {"id": "A", "type_id": 0}} if s == "$A" else {"SpecialToken": {"id": s, "type_id": 0}}
             for s in single]
    return {"type": "TemplateProcessing", "single": items, "pair": items,
            "special_tokens": {n: {"id": n, "ids": [i], "tokens": [n]} for n, i in specials}}

def with_added(model, contents, **kw):
    out = []
    for c in contents:
        if isinstance(c, tuple):
            c, opts = c
        else:
            opts = {}
        i = model["vocab"].get(c)
        if i is None:
            i = max(model["vocab"].values()) + 1 + sum(1 for o in out if o["content"] not in model["vocab"])
        out.append(added(i, c, **{**kw, **opts}))
    return out

GPT2_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+"""
LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}

def main(out):
    os.makedirs(out, exist_ok=True)
    fx = {}
    # 1. GPT-2 style: ByteLevel with its regex and add_prefix_space; added tokens special and not,
    #    lstrip / rstrip / single_word; legacy "a b" merges
    m = bytelevel_model(300, GPT2_RE, True)
    fx["bytelevel_gpt2"] = tokenizer(
        m, pre={**BL, "add_prefix_space": True}, post={**BL, "add_prefix_space": True},
        decoder={**BL, "add_prefix_space": True},
        added_tokens=with_added(m, ["<|endoftext|>", ("[MASK]", {"lstrip": True, "rstrip": True, "special": False}),
                                    ("fox", {"single_word": True, "special": False}),
                                    ("<sep>", {"rstrip": True})]))
    # 2. Llama-3 style: Split (Llama-3 regex) + ByteLevel without regex, ignore_merges, list merges,
    #    TemplateProcessing with a bos
    m = bytelevel_model(300, GPT2_RE, False, ignore_merges=True, legacy=False)
    m["vocab"]["Ġjumping"] = len(m["vocab"])  # a word only ignore_merges can produce whole
    a = with_added(m, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    fx["llama3_like"] = tokenizer(
        m, pre={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
            {**BL, "use_regex": False}]},
        post={"type": "Sequence", "processors": [{**BL, "use_regex": False},
                                                 template(["<|begin_of_text|>", "$A"], [("<|begin_of_text|>", a[0]["id"])])]},
        decoder=BL, added_tokens=a)
    # 3. Llama-2 / Mistral style: Prepend + Replace normalizers, byte_fallback, fuse_unk, decoder
    #    Replace / ByteFallback / Fuse / Strip, <s> template
    m = char_model(TRAIN.replace(" ", "\u2581"), 250, byte_fallback=True, fuse_unk=True,
                   specials=["<unk>", "<s>", "</s>"], word_re=r"[^\n]+", skip_chars="🤗🚀👍🏽中文")
    fx["llama2_like"] = tokenizer(
        m, normalizer={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        post=template(["<s>", "$A"], [("<s>", 1)]),
        decoder={"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        added_tokens=with_added(m, ["<unk>", "<s>", "</s>"]))
    # 4. Metaspace pre-tokenizer (prepend_scheme first, split), NFKC + Lowercase, unk without fuse,
    #    normalized added tokens, a bos/eos template, Metaspace decoder
    low = TRAIN.lower()
    m = char_model(re.sub(" ", "\u2581", low), 200, unk="<unk>", fuse_unk=False, specials=["<unk>", "<s>", "</s>"],
                   word_re=r"\u2581?[^\u2581\s]+", skip_chars="🤗🚀")
    fx["metaspace_first"] = tokenizer(
        m, normalizer={"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
        pre={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        post=template(["<s>", "$A", "</s>"], [("<s>", 1), ("</s>", 2)]),
        decoder={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        added_tokens=with_added(m, ["<unk>", "<s>", "</s>", ("[Day]", {"normalized": True, "special": False}),
                                    ("<Mask>", {"normalized": True, "special": True})]))
    # 5. Metaspace always without split, NFKD + left Strip, Metaspace decoder always
    m = char_model(re.sub(" ", "\u2581", TRAIN), 150, byte_fallback=True, specials=["<unk>"],
                   word_re=r"\u2581?[^\u2581]+", skip_chars="")
    fx["metaspace_nosplit"] = tokenizer(
        m, normalizer={"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "Strip", "strip_left": True,
                                                                              "strip_right": False}]},
        pre={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
        decoder={"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                                  {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False}]})
    # 6. subwords: continuing_subword_prefix / end_of_word_suffix, Whitespace, Strip + regex
    #    Replace + NFC, fuse_unk, Bert processing, Replace / Fuse decoders
    m = char_model(TRAIN, 200, unk="[UNK]", fuse_unk=True, prefix="##", suffix="</w>",
                   specials=["[UNK]", "[CLS]", "[SEP]"], word_re=r"\w+|[^\w\s]+")
    fx["subword_affixes"] = tokenizer(
        m, normalizer={"type": "Sequence", "normalizers": [
            {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}, {"type": "NFC"}]},
        pre={"type": "Whitespace"},
        post={"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
        decoder={"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "</w>"}, "content": " "},
            {"type": "Replace", "pattern": {"Regex": "^##|(?<= )##"}, "content": ""}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        added_tokens=with_added(m, ["[UNK]", "[CLS]", "[SEP]"]))
    # 7. WhitespaceSplit, Punctuation (Contiguous), Digits (individual), Roberta processing
    m = char_model(TRAIN, 150, byte_fallback=True, unk="<unk>", specials=["<unk>", "<s>", "</s>"],
                   word_re=r"[^\W\d]+|\d|[^\w\s]+")
    fx["digits_punct"] = tokenizer(
        m, pre={"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"}, {"type": "Punctuation", "behavior": "Contiguous"},
            {"type": "Digits", "individual_digits": True}]},
        post={"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1], "trim_offsets": True,
              "add_prefix_space": False},
        # Strip with a stop first, while every token is non-empty (the Rust library panics on an
        # empty token when stop > 0)
        decoder={"type": "Sequence", "decoders": [{"type": "Strip", "content": "e", "start": 0, "stop": 1},
                                                  {"type": "ByteFallback"}, {"type": "Fuse"}]},
        added_tokens=with_added(m, ["<unk>", "<s>", "</s>"]))
    # 8. Split behaviours, one file each (byte-level model so that every piece has tokens)
    bm = bytelevel_model(200, GPT2_RE, False)
    splits = {
        "removed": ({"Regex": "\\s+"}, "Removed", False),
        "removed_invert": ({"Regex": "\\p{L}+|\\p{N}+"}, "Removed", True),
        "isolated_string": ({"String": "an"}, "Isolated", False),
        "merged_previous": ({"Regex": "[,.!?]"}, "MergedWithPrevious", False),
        "merged_next": ({"String": " "}, "MergedWithNext", False),
        "contiguous": ({"Regex": "\\d"}, "Contiguous", False),
        "isolated_invert": ({"Regex": "\\s"}, "Isolated", True),
        "contiguous_invert": ({"Regex": "[aeiou]"}, "Contiguous", True),
    }
    for name, (pat, behavior, invert) in splits.items():
        fx["split_" + name] = tokenizer(
            bm, pre={"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": pat, "behavior": behavior, "invert": invert},
                {**BL, "use_regex": False}]}, decoder=BL)
    # 9. Digits contiguous + Lowercase + Replace(regex) normaliser before a ByteLevel with prefix space
    fx["digits_lowercase"] = tokenizer(
        bm, normalizer={"type": "Sequence", "normalizers": [
            {"type": "Lowercase"}, {"type": "Replace", "pattern": {"Regex": "[0-9]{4,}"}, "content": "#"}]},
        pre={"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": False},
                                                   {**BL, "add_prefix_space": True}]}, decoder=BL)
    for name, t in fx.items():
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(t, f, ensure_ascii=False, indent=None, separators=(",", ":"))
            f.write("\n")

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures")
