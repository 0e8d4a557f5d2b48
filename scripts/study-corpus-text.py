#!/usr/bin/python3
"""study-corpus-text.py: the text stage of scripts/study-corpus.sh (the standard library only).

  convert --package P --root DIR --format F --out FILE   (relative paths on stdin)
      Turns each listed file of a package (html, pod, info, man, text, fortune) into documents of
      plain English paragraphs and writes them as JSON lines {"name", "text"} to FILE.
  assemble --out DIR [--val-permille N] FILE...
      Deduplicates the documents of the converted FILEs (sha256 of the text),
      splits them by a hash of their names into DIR/train.txt and DIR/val.txt, sorted by name, and
      writes DIR/documents.json (counts and bytes per package and split).
  manifest --out DIR --packages TSV [--extra JSON] [--tokens DATASET]
      DIR/MANIFEST.json from the package table (package, version, files, format, why), documents.json,
      the two files' sha256 and the token dataset's counts; prints the summary.

A document is written as its paragraphs one per line and documents are separated by one blank
line, so `difftrans tokenize --documents paragraph` sees each as one document. Everything written
goes to a temporary name first and is renamed into place.
"""
import argparse
import concurrent.futures
import gzip
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import unicodedata

SECTION_BYTES = 64 * 1024   # longer documents are cut at paragraph boundaries into sections
MIN_DOC_LETTERS = 200       # shorter documents (redirect pages, empty nodes) are dropped
MIN_WORDS_PER_PARAGRAPH = 5  # documents that are mostly headings and lists (indexes, tables of contents)

# ------------------------------------------------------------------ reading


def read_bytes(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def decode(data, charset=None):
    """UTF-8 unless the file declares another charset; bytes that do not decode are dropped (as iconv -c)."""
    if charset:
        try:
            return data.decode(charset, errors="ignore")
        except LookupError:
            pass
    return data.decode("utf-8", errors="ignore")


# ------------------------------------------------------------------ cleaning

# Characters that are common in code and markup and rare in prose.
CODE_CHARS = set("{}[]<>=;$\\|&_*#@^~`")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u00ad\ufeff]")
SPACE = re.compile(r"\s+")
SECTION_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)*\.? ")


def clean_paragraph(p):
    """Whitespace collapsed, control characters gone; None when the paragraph is not prose."""
    p = unicodedata.normalize("NFC", CONTROL.sub("", p.replace("\u00a0", " ").replace("\u00b6", "")))
    p = SPACE.sub(" ", p).strip()
    # a heading's section number ("2.11.7.1. Description") does not make it a table of numbers
    chars = [c for c in SECTION_NUMBER.sub("", p) if not c.isspace()]
    if not chars:
        return None
    letters = sum(1 for c in chars if c.isalpha())
    code = sum(1 for c in chars if c in CODE_CHARS)
    if letters < 2 or letters < 0.6 * len(chars) or code > 0.04 * len(chars):
        return None
    return p


def english(paragraphs):
    """Most letters are ASCII: a translation that slipped through a package's file list is refused."""
    letters = ascii_letters = 0
    for p in paragraphs:
        for c in p:
            if c.isalpha():
                letters += 1
                ascii_letters += c < "\x80"
    return letters > 0 and ascii_letters >= 0.97 * letters


def prose(paras):
    """Enough letters, English, and not mostly headings and list items."""
    letters = sum(1 for p in paras for c in p if c.isalpha())
    words = sum(len(p.split()) for p in paras)
    return letters >= MIN_DOC_LETTERS and words >= MIN_WORDS_PER_PARAGRAPH * len(paras) and english(paras)


def finish(name, paragraphs):
    """The documents (name, text) that a converted file gives: cleaned, cut into sections of at
    most SECTION_BYTES (name#001, name#002, ... when there are several), and each section kept
    when it is prose."""
    paras = [q for q in (clean_paragraph(p) for p in paragraphs) if q]
    sections, cur, size = [], [], 0
    for p in paras:
        n = len(p.encode()) + 1
        if cur and size + n > SECTION_BYTES:
            sections.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += n
    if cur:
        sections.append(cur)
    if len(sections) == 1:
        return [(name, "\n".join(sections[0]))] if prose(sections[0]) else []
    return [("%s#%03d" % (name, i + 1), "\n".join(s)) for i, s in enumerate(sections) if prose(s)]


def reflow(text):
    """Plain text into paragraphs: blank lines separate them, their lines are joined."""
    return [p for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


# ------------------------------------------------------------------ HTML

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track",
        "wbr"}
BLOCK = {"p", "div", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "br", "tr", "td", "th", "blockquote",
         "section", "table", "ul", "ol", "dl", "caption", "figcaption", "article", "aside", "hr", "title", "body"}
CELLS = {"td", "th"}
MIN_CELL_WORDS = 4
SKIP_TAGS = {"script", "style", "head", "pre", "nav", "header", "footer", "noscript", "svg", "math", "form",
             "button", "select", "textarea", "object", "iframe"}
SKIP_ROLES = {"navigation", "search", "contentinfo", "banner"}
# classes of navigation, tables of contents, code blocks and boilerplate in Sphinx, DocBook and
# asciidoc output
SKIP_CLASSES = {"sphinxsidebar", "related", "navheader", "navfooter", "footer", "headerlink", "toc", "toctree-wrapper",
                "contents", "highlight", "literal-block", "programlisting", "screen", "synopsis", "funcsynopsis",
                "cmdsynopsis", "literallayout", "rst-footer-buttons", "wy-nav-side", "breadcrumbs",
                "wy-breadcrumbs", "version_switcher_placeholder", "language_switcher_placeholder", "mobile-nav",
                "sig", "sig-object", "index", "legalnotice", "copyright", "docnav", "listingblock", "literalblock",
                "doctest", "rst-versions", "clearer", "navigation", "breadcrumb", "prevnext", "nav",
                "header", "footnotes", "citation", "bibliography", "revhistory"}
# ids of page headers, footers and sidebars (Django's and asciidoc's pages)
SKIP_IDS = {"hd", "ft", "global-nav", "searchbox", "sidebar", "footer"}
CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_-]+)""", re.I)


class TextHTML(html.parser.HTMLParser):
    """Paragraph text of an HTML page: block elements end paragraphs, navigation and code are skipped."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []         # open elements: (tag, skipped)
        self.skip = 0           # open elements that are skipped
        self.cells = 0          # open table cells
        self.paras, self.cur = [], []

    def _break(self):
        if self.cur:
            text = "".join(self.cur)
            # a data table's cells (numbers, names, flags) are not sentences; a cell that holds a
            # description is
            if self.cells == 0 or len(text.split()) >= MIN_CELL_WORDS:
                self.paras.append(text)
            self.cur = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        skipped = (tag in SKIP_TAGS or (a.get("role") or "") in SKIP_ROLES or bool(classes & SKIP_CLASSES) or
                   (a.get("id") or "") in SKIP_IDS)
        if tag in BLOCK:
            self._break()
        if tag in VOID:
            return
        self.stack.append((tag, skipped))
        self.skip += skipped
        self.cells += tag in CELLS

    def handle_startendtag(self, tag, attrs):
        if tag in BLOCK:
            self._break()

    def handle_endtag(self, tag):
        if tag in BLOCK:
            self._break()
        if not any(t == tag for t, _ in self.stack):
            return  # a stray end tag
        while self.stack:  # elements left open inside this one end with it
            t, skipped = self.stack.pop()
            self.skip -= skipped
            self.cells -= t in CELLS
            if t == tag:
                break

    def handle_data(self, data):
        if self.skip == 0:
            self.cur.append(data)

    def paragraphs(self):
        self._break()
        return self.paras


def convert_html(path):
    data = read_bytes(path)
    m = CHARSET.search(data[:4096])
    p = TextHTML()
    p.feed(decode(data, m.group(1).decode() if m else None))
    p.close()
    return p.paragraphs()


# ------------------------------------------------------------------ info

NOTE = re.compile(r"\*[Nn]ote[ \n]+([^:]+?)::")
NOTE_NAMED = re.compile(r"\*[Nn]ote[ \n]+([^:]+?):[^.,]*[.,]")


def convert_info(path):
    """(node name, paragraphs) of each node of an info file; menus and tag tables are left out."""
    text = decode(read_bytes(path))
    nodes = []
    for chunk in text.split("\x1f"):
        chunk = chunk.lstrip("\n\x0c")
        head, _, body = chunk.partition("\n")
        m = re.search(r"Node: ([^,\n]+)", head)
        if not head.startswith("File:") or not m:
            continue  # the preamble, Indirect:, Tag Table:, Local Variables
        body = body.split("\n* Menu:", 1)[0]
        body = NOTE_NAMED.sub(r"\1", NOTE.sub(r"\1", body))
        nodes.append((m.group(1).strip(), reflow(body)))
    return nodes


# ------------------------------------------------------------------ POD, man pages

# Pod::Text without verbatim paragraphs (code), one paragraph per line; each file's text is
# written after a NUL, in the order of the paths given on stdin.
POD_TEXT = r"""
package NoVerbatim;
use parent 'Pod::Text';
sub cmd_verbatim { return '' }
package main;
binmode STDOUT;
while (my $path = <STDIN>) {
    chomp $path;
    my $out = '';
    my $p = NoVerbatim->new(width => 1000000, indent => 0, margin => 0, sentence => 0, utf8 => 1,
                            errors => 'none');
    $p->output_string(\$out);
    $p->parse_file($path);
    print "\0", $out;
}
"""


def convert_pods(paths):
    """Each POD file's text (one string per path) from one perl process."""
    r = subprocess.run(["perl", "-e", POD_TEXT], input="".join(p + "\n" for p in paths).encode(),
                       stdout=subprocess.PIPE, check=True)
    parts = r.stdout.split(b"\0")[1:]
    if len(parts) != len(paths):
        raise SystemExit("study-corpus-text: perl gave %d POD texts for %d files" % (len(parts), len(paths)))
    return [decode(p) for p in parts]


MAN_SO = re.compile(rb"^(?:\.\\\".*\n|'\\\".*\n)*\.so ", re.M)


def convert_man(path):
    """A man page rendered by groff without formatting, each paragraph on one line; a page that is
    only a link to another (.so) gives nothing (the other is read on its own)."""
    data = read_bytes(path)
    if MAN_SO.match(data):
        return []
    r = subprocess.run(["groff", "-k", "-t", "-man", "-Tutf8", "-rLL=2000n", "-rHY=0", "-P-cbou", "-ww"],
                       input=data, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ, LC_ALL="C.UTF-8"))
    lines = decode(r.stdout).strip("\n").split("\n")
    # the first and last lines are the page's header and footer
    return reflow("\n".join(lines[1:-1]))


def convert_fortune(path):
    """A fortune file: fortunes are separated by lines of '%'; each one a paragraph."""
    return re.split(r"\n%\n", decode(read_bytes(path)))


# ------------------------------------------------------------------ convert


def doc_name(package, rel):
    rel = rel.lstrip("/")
    return "%s:%s" % (package, rel[:-3] if rel.endswith(".gz") else rel)


def cmd_convert(args):
    rels = sorted(set(line.strip() for line in sys.stdin if line.strip()))
    docs = []
    pods, mans = [], []
    files = 0
    for rel in rels:
        path = os.path.join(args.root, rel.lstrip("/"))
        if os.path.islink(path):
            continue  # an alias of a page the package has (and the list has) itself
        files += 1
        name = doc_name(args.package, rel)
        if args.format == "html":
            docs += finish(name, convert_html(path))
        elif args.format == "info":
            for node, paras in convert_info(path):
                docs += finish("%s#%s" % (name, node), paras)
        elif args.format == "pod":
            pods.append((name, path))
        elif args.format == "man":
            mans.append((name, path))
        elif args.format == "fortune":
            docs += finish(name, convert_fortune(path))
        elif args.format == "text":
            docs += finish(name, reflow(decode(read_bytes(path))))
        else:
            raise SystemExit("study-corpus-text: unknown format '%s'" % args.format)
    if mans:  # one groff per page, as many at a time as there are cores
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for (name, _), paras in zip(mans, pool.map(convert_man, [p for _, p in mans])):
                docs += finish(name, paras)
    if pods:
        for (name, _), text in zip(pods, convert_pods([p for _, p in pods])):
            docs += finish(name, reflow(text))
    write_atomic(args.out, "".join(json.dumps({"name": n, "text": t}, ensure_ascii=False) + "\n" for n, t in docs))
    print("%s: %d files, %d documents, %.2f MB" % (args.package, files, len(docs),
                                                    sum(len(t.encode()) for _, t in docs) / 1e6), file=sys.stderr)


# ------------------------------------------------------------------ assemble


def write_atomic(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(tmp, path)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def held_out(name, permille):
    """Validation when the first 8 bytes of sha256(name), as a number, fall in the first permille of 1000."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % 1000 < permille


def cmd_assemble(args):
    docs = {}
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                if d["name"] in docs:
                    raise SystemExit("study-corpus-text: document %s appears twice" % d["name"])
                docs[d["name"]] = d["text"]
    # exact duplicates: the first name in byte order keeps the text (Python orders str by code
    # point, which is UTF-8's byte order: LC_ALL=C sort's order)
    seen, kept, dropped = set(), [], {}
    for name in sorted(docs):
        h = hashlib.sha256(docs[name].encode()).digest()
        pkg = name.split(":", 1)[0]
        if h in seen:
            dropped[pkg] = dropped.get(pkg, 0) + 1
            continue
        seen.add(h)
        kept.append(name)
    splits = {"train": [], "val": []}
    for name in kept:
        splits["val" if held_out(name, args.val_permille) else "train"].append(name)
    stats = {"val_permille": args.val_permille, "packages": {}, "splits": {}}
    for split, names in splits.items():
        write_atomic(os.path.join(args.out, split + ".txt"), "\n".join(docs[n] + "\n" for n in names))
        stats["splits"][split] = {"documents": len(names), "bytes": sum(len(docs[n].encode()) + 2 for n in names) - 1
                                  if names else 0}
        for n in names:
            pkg = n.split(":", 1)[0]
            s = stats["packages"].setdefault(pkg, {"documents": 0, "bytes": 0, "val_documents": 0, "val_bytes": 0,
                                                   "duplicates_dropped": dropped.get(pkg, 0)})
            s["documents"] += 1
            s["bytes"] += len(docs[n].encode()) + 1
            if split == "val":
                s["val_documents"] += 1
                s["val_bytes"] += len(docs[n].encode()) + 1
    stats["duplicates_dropped"] = sum(dropped.values())
    write_atomic(os.path.join(args.out, "documents.json"), json.dumps(stats, indent=1, sort_keys=True) + "\n")
    print("assembled %d documents (%d exact duplicates dropped): train %d (%.2f MB), val %d (%.2f MB)"
          % (len(kept), stats["duplicates_dropped"], len(splits["train"]), stats["splits"]["train"]["bytes"] / 1e6,
             len(splits["val"]), stats["splits"]["val"]["bytes"] / 1e6), file=sys.stderr)


def cmd_manifest(args):
    with open(os.path.join(args.out, "documents.json"), encoding="utf-8") as f:
        stats = json.load(f)
    packages = {}
    with open(args.packages, encoding="utf-8") as f:
        for line in f:
            pkg, version, files, fmt, reason = line.rstrip("\n").split("\t", 4)
            p = packages.setdefault(pkg, {"package": pkg, "version": version, "sources": []})
            p["sources"].append({"format": fmt, "files": int(files), "reason": reason})
    for pkg, p in packages.items():
        s = stats["packages"].get(pkg, {})
        p["files"] = sum(x["files"] for x in p["sources"])
        for k in ("documents", "bytes", "val_documents", "val_bytes", "duplicates_dropped"):
            p[k] = s.get(k, 0)
    plist = sorted(packages.values(), key=lambda p: p["package"])
    m = {"format": "difftrans-study-corpus", "version": 1, "packages": plist, "val_permille": stats["val_permille"],
         "duplicates_dropped": stats["duplicates_dropped"], "files": {}}
    for split in ("train", "val"):
        path = os.path.join(args.out, split + ".txt")
        m["files"][split + ".txt"] = {"bytes": os.path.getsize(path), "sha256": sha256_file(path),
                                      "documents": stats["splits"][split]["documents"]}
    if args.tokens:
        with open(os.path.join(args.tokens, "dataset.json"), encoding="utf-8") as f:
            ds = json.load(f)
        m["tokenizer"] = {"sha256": sha256_file(os.path.join(args.tokens, "tokenizer.json")),
                          "vocab_size": ds["vocab_size"]}
        m["tokens"] = {}
        for split in ("train", "val"):
            n = ds["splits"][split]["tokens"]
            b = m["files"][split + ".txt"]["bytes"]
            m["tokens"][split] = {"tokens": n, "documents": ds["splits"][split]["documents"],
                                  "bytes_per_token": round(b / n, 4) if n else None}
    if args.extra:
        with open(args.extra, encoding="utf-8") as f:
            m.update(json.load(f))
    write_atomic(os.path.join(args.out, "MANIFEST.json"), json.dumps(m, indent=1, sort_keys=True) + "\n")
    total = sum(p["bytes"] for p in plist)
    print("%-22s %-26s %6s %7s %8s" % ("package", "version", "files", "docs", "MB"))
    for p in sorted(plist, key=lambda p: (-p["bytes"], p["package"])):
        print("%-22s %-26s %6d %7d %8.2f" % (p["package"], p["version"], p["files"], p["documents"], p["bytes"] / 1e6))
    val = sum(p["val_bytes"] for p in plist)
    print("total %.2f MB in %d documents; held out %.2f MB in %d documents (%.1f%%); %d exact duplicates dropped"
          % (total / 1e6, sum(p["documents"] for p in plist), val / 1e6, sum(p["val_documents"] for p in plist),
             100.0 * val / total if total else 0.0, stats["duplicates_dropped"]))
    if args.tokens:
        t = m["tokens"]
        print("tokens: train %d (%.3f bytes per token), val %d (%.3f bytes per token), vocabulary %d"
              % (t["train"]["tokens"], t["train"]["bytes_per_token"] or 0, t["val"]["tokens"],
                 t["val"]["bytes_per_token"] or 0, m["tokenizer"]["vocab_size"]))


def main():
    ap = argparse.ArgumentParser(prog="study-corpus-text.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--package", required=True)
    c.add_argument("--root", required=True)
    c.add_argument("--format", required=True, choices=["html", "info", "pod", "man", "fortune", "text"])
    c.add_argument("--out", required=True)
    a = sub.add_parser("assemble")
    a.add_argument("--out", required=True)
    a.add_argument("--val-permille", type=int, default=20)
    a.add_argument("files", nargs="+")
    m = sub.add_parser("manifest")
    m.add_argument("--out", required=True)
    m.add_argument("--packages", required=True)
    m.add_argument("--extra")
    m.add_argument("--tokens")
    args = ap.parse_args()
    {"convert": cmd_convert, "assemble": cmd_assemble, "manifest": cmd_manifest}[args.cmd](args)


if __name__ == "__main__":
    main()
