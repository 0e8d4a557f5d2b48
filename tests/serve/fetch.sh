#!/bin/sh
# fetch.sh DEST — installs the serve tests' clients from the npm registry into DEST (the build
# tree): the official OpenAI Node SDK, which drives `difftrans serve` in sdk.mjs and load.mjs as
# the tools people use drive it, and playwright-core, which drives Debian's headless Chromium in
# browser.mjs (playwright-core ships no browser and downloads none). Test-only, versions pinned by
# package-lock.json, install scripts not run. Exits 77 (CTest: skipped) with a clear message when
# node/npm are missing or the registry is unreachable; serve_openai then skips too.
set -u
DEST=$1
SRC=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DEST" || exit 1
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "SKIPPED: node/npm not installed (apt-get install nodejs npm): the OpenAI SDK tests of difftrans serve do not run"
    exit 77
fi
if cmp -s "$SRC/package-lock.json" "$DEST/package-lock.json" && [ -d "$DEST/node_modules/openai" ]; then
    echo "serve test packages already installed in $DEST"
    exit 0
fi
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/" || exit 1
cd "$DEST" || exit 1
if out=$(timeout 600 npm ci --ignore-scripts --no-audit --no-fund 2>&1); then
    echo "installed the serve test packages into $DEST"
    exit 0
fi
echo "$out" | tail -5
# a half-installed tree must not pass for an installed one (the lock is what says "installed")
rm -f "$DEST/package-lock.json"
case "$out" in
*ENOTFOUND* | *EAI_AGAIN* | *ECONNREFUSED* | *ETIMEDOUT* | *ECONNRESET* | *network*)
    echo "SKIPPED: the npm registry is unreachable: the OpenAI SDK tests of difftrans serve do not run"
    exit 77 ;;
esac
exit 1
