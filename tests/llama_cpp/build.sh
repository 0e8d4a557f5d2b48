#!/bin/sh
# build.sh DEST — compiles the llama.cpp reference harness (llama_ref.c) into DEST/llama_ref,
# against what fetch.sh installed into DEST: the prebuilt libraries of @node-llama-cpp/linux-x64
# and the headers of the same llama.cpp commit, taken from node-llama-cpp's llama/gitRelease.bundle
# (a git bundle of that commit's source) into DEST/llama.cpp/, with llama.cpp's own test vocabulary
# of Llama's SentencePiece (models/ggml-vocab-llama-spm.gguf, its texts and their ids: run.sh reads
# it). Never part of difftrans's build.
# Rebuilds only when llama_ref.c or this script changed. Exits 77 (skipped) when the packages are
# not installed or git is missing, 1 when the compiler fails.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=$(cd "$1" 2>/dev/null && pwd) || { echo "SKIPPED: $1 does not exist (llama_cpp_fetch installs the packages there)"; exit 77; }
BIN=$DEST/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
PKG=$DEST/node_modules/node-llama-cpp/llama
if [ ! -d "$BIN" ] || [ ! -f "$PKG/gitRelease.bundle" ]; then
    echo "SKIPPED: llama.cpp's npm packages are not installed in $DEST (llama_cpp_fetch: npm ci from the registry)"
    exit 77
fi
# the two packages must carry the same llama.cpp release, or the headers would not match the libraries
tag_src=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$PKG/llama.cpp.info.json")
tag_bin=$(sed -n 's/.*"release": *"\([^"]*\)".*/\1/p' "$BIN/_nlcBuildMetadata.json")
if [ -z "$tag_src" ] || [ "$tag_src" != "$tag_bin" ]; then
    echo "llama.cpp release of the source ($tag_src) and of the libraries ($tag_bin) differ: pin both packages at one version" >&2
    exit 1
fi
SRC=$DEST/llama.cpp
SPM_VOCAB=models/ggml-vocab-llama-spm.gguf
if [ ! -f "$SRC/include/llama.h" ] || [ "$PKG/gitRelease.bundle" -nt "$SRC/include/llama.h" ] ||
    [ ! -f "$SRC/$SPM_VOCAB.out" ]; then
    if ! command -v git >/dev/null 2>&1; then
        echo "SKIPPED: git is not installed (it unpacks llama.cpp's headers from node-llama-cpp's git bundle)"
        exit 77
    fi
    rm -rf "$SRC" "$DEST/llama.cpp.git" || exit 1
    mkdir -p "$SRC" || exit 1
    git init -q --bare "$DEST/llama.cpp.git" &&
        git --git-dir="$DEST/llama.cpp.git" fetch -q "$PKG/gitRelease.bundle" HEAD &&
        git --git-dir="$DEST/llama.cpp.git" rev-parse FETCH_HEAD >"$SRC/COMMIT" &&
        git --git-dir="$DEST/llama.cpp.git" archive FETCH_HEAD include ggml/include "$SPM_VOCAB" "$SPM_VOCAB.inp" \
            "$SPM_VOCAB.out" | tar -x -C "$SRC" || {
        echo "cannot unpack the headers from $PKG/gitRelease.bundle" >&2
        rm -rf "$SRC"
        exit 1
    }
    rm -rf "$DEST/llama.cpp.git"
fi
OUT=$DEST/llama_ref
if [ -x "$OUT" ] && [ "$OUT" -nt "$HERE/llama_ref.c" ] && [ "$OUT" -nt "$HERE/build.sh" ] && [ "$OUT" -nt "$SRC/include/llama.h" ]; then
    exit 0
fi
# the versioned names (libllama.v0.5.0.so) are the libraries' sonames: link them by file name
libllama=$(cd "$BIN" && ls libllama.*so 2>/dev/null | grep -v common | head -1)
libggml=$(cd "$BIN" && ls libggml.*so 2>/dev/null | head -1)
if [ -z "$libllama" ] || [ -z "$libggml" ] || [ ! -f "$BIN/libggml-base.so" ]; then
    echo "$BIN: libllama / libggml / libggml-base missing" >&2
    exit 1
fi
CC=${CC:-cc}
$CC -std=c11 -O2 -Wall -Wextra -o "$OUT.tmp" "$HERE/llama_ref.c" \
    -I"$SRC/include" -I"$SRC/ggml/include" \
    -DLLAMA_REF_BACKEND_DIR="\"$BIN\"" -DLLAMA_REF_COMMIT="\"$tag_src $(cut -c1-12 "$SRC/COMMIT")\"" \
    -L"$BIN" -l:"$libllama" -l:"$libggml" -l:libggml-base.so -Wl,-rpath,"$BIN" -ldl -lm || exit 1
mv "$OUT.tmp" "$OUT" || exit 1
echo "built $OUT (llama.cpp $tag_src, $(cut -c1-12 "$SRC/COMMIT"))"
