#!/bin/sh
# check-deps.sh [--install] [build|test|demo] — the Debian packages difftrans needs for a purpose.
# With --install, running as root, the missing ones are installed; otherwise the apt-get line is
# printed, and the script fails only when something the purpose cannot do without is missing.
# Every package is there on purpose:
#   cmake, gcc, make, pkg-config   the build
#   libopenblas-openmp-dev          matrix products (OpenMP build: one thread pool with our loops)
#   libcjson-dev                    config.json and safetensors headers
#   libcmocka-dev                   the C unit-test framework under CTest
#   libopenmpi-dev, openmpi-bin     Open MPI: data-parallel training (`mpirun -np N difftrans train`)
#                                   and its tests (mpirun)
#   libpcre2-dev                    tokenizer.json pre-tokenizer regexes (UTF + UCP + JIT)
#   libutf8proc-dev                 tokenizer.json NFC / NFKC normalizers and Unicode categories
#   libmicrohttpd-dev               the HTTP server of `difftrans serve` (linked into the CLI only)
#   python3-numpy                   reads the committed PyTorch golden files (tests)
#   fortunes                        the demo's English corpus (/usr/share/games/fortunes)
#   gnuplot-nox                     the PNG plots of `difftrans compare` reports (optional)
#   nodejs, npm                     tests (optional): npm installs the tokenizer references (the Rust
#                                   `tokenizers` library's Node binding, published tokenizer.json
#                                   files); wanted only when no npm is on the PATH already
#   chromium                        tests (optional): the browser test of `difftrans serve`'s page
#                                   (headless, driven by playwright-core from npm)
#   clang-14, libclang-rt-14-dev,   `make test` / `make check-asan` / `make fuzz`: the sanitizer build
#   libomp-14-dev                   (ASan + UBSan) and the libFuzzer harnesses in fuzz/; clang's
#                                   OpenMP runtime for that build
# Optional too: python3-torch, with which the tests also regenerate the golden files.
install=0
if [ "${1:-}" = "--install" ]; then install=1; shift; fi
purpose=${1:-build}
required="cmake gcc make pkg-config libopenblas-openmp-dev libcjson-dev libcmocka-dev libopenmpi-dev openmpi-bin libpcre2-dev libutf8proc-dev libmicrohttpd-dev"
case "$purpose" in
test) required="$required python3-numpy clang-14 libclang-rt-14-dev libomp-14-dev" ;;
demo) required="$required fortunes" ;;
esac
wanted="$required python3-numpy fortunes gnuplot-nox"
if [ "$purpose" = test ] && ! command -v npm >/dev/null 2>&1; then wanted="$wanted nodejs npm"; fi
if [ "$purpose" = test ]; then wanted="$wanted chromium"; fi

missing="" missing_required=""
for p in $wanted; do
    case " $missing " in *" $p "*) continue ;; esac
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
        case " $required " in *" $p "*) missing_required="$missing_required $p" ;; esac
    fi
done
[ -z "$missing" ] && exit 0
if [ "$install" = 1 ] && [ "$(id -u)" = 0 ]; then
    echo "difftrans: installing missing Debian packages:$missing"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing && exit 0
    echo "difftrans: apt-get failed; install by hand: apt-get install$missing" >&2
    [ -n "$missing_required" ] && exit 1
    exit 0
fi
echo "difftrans: missing Debian packages:$missing" >&2
echo "  run as root:  apt-get install -y$missing" >&2
[ -n "$missing_required" ] && exit 1
exit 0
