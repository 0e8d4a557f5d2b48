#!/bin/sh
# Check the Debian packages difftrans needs; with --install, install the missing ones when
# running as root, otherwise print the apt-get line to run. Every package is there on purpose:
#   cmake, gcc, make, pkg-config   the build
#   libopenblas-openmp-dev          matrix products (OpenMP build: one thread pool with our loops)
#   libcjson-dev                    config.json and safetensors headers
#   libcmocka-dev                   the C unit-test framework under CTest
#   fortunes                        the demo's English corpus (/usr/share/games/fortunes)
#   python3-numpy                   reads the committed PyTorch golden files in `make test`
#   gnuplot-nox                     the PNG plots of `difftrans compare` reports
# Optional: python3-torch also regenerates those golden files and checks they match.
install=0
[ "$1" = "--install" ] && install=1
need="cmake gcc make pkg-config libopenblas-openmp-dev libcjson-dev libcmocka-dev fortunes python3-numpy gnuplot-nox"
missing=""
for p in $need; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$install" = 1 ] && [ "$(id -u)" = 0 ]; then
    echo "difftrans: installing missing Debian packages:$missing"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing && exit 0
    echo "difftrans: apt-get failed; install by hand: apt-get install$missing" >&2
    exit 1
fi
echo "difftrans: missing Debian packages:$missing" >&2
echo "  run as root:  apt-get install -y$missing" >&2
[ "$install" = 1 ] && exit 1
# a plain build only warns for the demo corpus
case "$missing" in *lib*|*cmake*|*gcc*|*pkg-config*) exit 1;; esac
exit 0
