#!/bin/sh
# npm_ci.sh SRC DEST PACKAGE WHAT — installs the test-only npm packages that SRC/package.json and
# SRC/package-lock.json pin into DEST (the build tree) with `npm ci --ignore-scripts` (no install
# script runs, nothing but the registry's tarballs is fetched). PACKAGE is one of them, whose
# presence with an unchanged lock means "already installed". Exits 77 (CTest: skipped), saying
# that WHAT, when node/npm are missing or the registry is unreachable; 1 on any other failure.
set -u
SRC=$1 DEST=$2 PACKAGE=$3 WHAT=$4
mkdir -p "$DEST" || exit 1
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "SKIPPED: node/npm not installed (apt-get install nodejs npm): $WHAT"
    exit 77
fi
if cmp -s "$SRC/package-lock.json" "$DEST/package-lock.json" && [ -d "$DEST/node_modules/$PACKAGE" ]; then
    echo "test packages already installed in $DEST"
    exit 0
fi
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/" || exit 1
cd "$DEST" || exit 1
if out=$(timeout 600 npm ci --ignore-scripts --no-audit --no-fund 2>&1); then
    echo "installed the test packages into $DEST"
    exit 0
fi
echo "$out" | tail -5
# a half-installed tree must not pass for an installed one (the lock is what says "installed")
rm -f "$DEST/package-lock.json"
case "$out" in
*ENOTFOUND* | *EAI_AGAIN* | *ECONNREFUSED* | *ETIMEDOUT* | *ECONNRESET* | *network*)
    echo "SKIPPED: the npm registry is unreachable: $WHAT"
    exit 77 ;;
esac
exit 1
