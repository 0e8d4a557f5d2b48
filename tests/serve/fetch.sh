#!/bin/sh
# fetch.sh DEST — installs the serve tests' clients from the npm registry into DEST (the build
# tree): the official OpenAI Node SDK, which drives `difftrans serve` in sdk.mjs and load.mjs as
# the tools people use drive it, and playwright-core, which drives Debian's headless Chromium in
# browser.mjs (playwright-core ships no browser and downloads none). Test-only, versions pinned by
# package-lock.json, install scripts not run. Exits 77 (CTest: skipped) with a clear message when
# node/npm are missing or the registry is unreachable; serve_openai then skips too.
HERE=$(cd "$(dirname "$0")" && pwd)
exec sh "$HERE/../npm_ci.sh" "$HERE" "$1" openai "the OpenAI SDK tests of difftrans serve do not run"
