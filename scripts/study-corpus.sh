#!/usr/bin/env bash
# study-corpus.sh: the scaling study's corpus (issue 20, README "The study corpus"): English prose
# from named Debian 12 packages, cleaned, deduplicated and split into OUT/train.txt and OUT/val.txt
# by a hash of each document's name, a BPE tokenizer learned on train.txt alone, and the token
# dataset OUT/tokens whose validation split is val.txt exactly. Run `study-corpus.sh --help`.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/study-corpus.sh [options] OUT_DIR

Builds the scaling study's corpus in OUT_DIR from the Debian packages listed below:
  OUT_DIR/train.txt, val.txt   documents (one per source file, node or 64 KB section), paragraphs one
                               per line, a blank line between documents, sorted by name (LC_ALL=C);
                               a document is held out when sha256(name) says so (--val-permille)
  OUT_DIR/tokenizer/           byte-level BPE learned on train.txt only (difftrans tokenizer train)
  OUT_DIR/tokens/              difftrans tokenize --data train.txt --val val.txt
  OUT_DIR/MANIFEST.json        each package's exact version, files, documents and bytes, the files'
                               sha256, the tools' versions, token counts and build times
  OUT_DIR/cache/               each package's converted text (reused by a rerun while the package's
                               version, its rule and this script's text stage are the same)
The same package versions give byte-identical train.txt, val.txt and token shards.

Packages are read where dpkg installed them; missing ones are installed when run as root, else
the apt-get line is printed and nothing is built. With --download they are fetched with
`apt-get download` and unpacked under OUT_DIR/cache instead (no root, nothing installed).

  --download          take the packages' .debs (apt-get download) instead of installed files
  --from-dir DIR      documents from the files under DIR instead of packages (no apt): .html/.htm
                      as HTML, .pod as POD, .info as info, .1-.9 as man pages, anything else as
                      plain text (the tests use it)
  --val-permille N    documents held out per thousand [20]
  --vocab-size N      tokenizer vocabulary [4096]
  --no-tokens         stop after the text: no tokenizer, no token dataset
  --threads N         threads for tokenize [all cores]
  -h, --help          this text and the package list
Environment: DIFFTRANS, the difftrans binary [build/difftrans of this checkout].
EOF
}

# ------------------------------------------------------------------ the packages
# Each source: package, format, the paths taken (extended regex), paths left out, and why.
SRC_PKG=() SRC_FMT=() SRC_INC=() SRC_EXC=() SRC_WHY=()
source_pkg() { SRC_PKG+=("$1") SRC_FMT+=("$2") SRC_INC+=("$3") SRC_EXC+=("$4") SRC_WHY+=("$5"); }

source_pkg linux-doc-6.1 html '^/usr/share/doc/linux-doc-6.1/html/.*\.html$' \
    '/html/(translations|_sources|_static|_images)/|/html/(genindex|search|index)\.html$' \
    "the kernel's own manual: administration, process, driver and subsystem guides; the largest body of continuous English in main (translations left out)"
source_pkg python3.11-doc html '^/usr/share/doc/python3\.11/html/.*\.html$' \
    '/html/(_static|_images|_sources)/|/html/(genindex.*|search|py-modindex|contents)\.html$' \
    'the Python tutorial, language and library references, HOWTOs and What'"'"'s New essays'
source_pkg perl-doc pod '^/usr/share/perl/[0-9.]+/pod/.*\.pod$' '^$' \
    "Perl's manuals (perlfaq, perlop, perlre, the tutorials and deltas) as POD, code blocks dropped"
source_pkg perl-doc man '^/usr/share/man/man3/.*\.3perl\.gz$' '^$' \
    "the core modules' documentation (the same manuals' man1 copies are left out)"
source_pkg postgresql-doc-15 html '^/usr/share/doc/postgresql-doc-15/html/.*\.html$' '/(bookindex|index)\.html$' \
    "PostgreSQL's manual: tutorial, SQL language, administration and internals chapters"
source_pkg manpages man '^/usr/share/man/man[1-8]/.*\.gz$' '^$' \
    'the Linux man-pages project: overviews (man7), file formats, devices, administration'
source_pkg manpages-dev man '^/usr/share/man/man[23]/.*\.gz$' '^$' \
    'system calls and C library functions, each with its description, errors and notes'
source_pkg python-django-doc html '^/usr/share/doc/python-django-doc/html/.*\.html$' \
    '/html/(_static|_images|_modules|_sources)/|/html/(genindex|search|py-modindex)\.html$' \
    "Django's topic guides, how-tos and release notes: tutorial-style English"
source_pkg git-doc html '^/usr/share/doc/git-doc/.*\.html$' '^$' \
    "git's manual pages, user manual and technical essays"
source_pkg jargon-text text '^/usr/share/doc/jargon-text/jargon\.txt\.gz$' '^$' \
    'the Jargon File: essays and definitions in a conversational register unlike the manuals'
source_pkg debian-handbook html '^/usr/share/doc/debian-handbook/html/en-US/.*\.html$' '/(index|ix01)\.html$' \
    "The Debian Administrator's Handbook, a book of continuous prose (English only)"
source_pkg debian-reference-en html '^/usr/share/debian-reference/.*\.en\.html$' '/index\.en\.html$' \
    'the Debian Reference, a user and administrator guide'
source_pkg debian-policy html \
    '^/usr/share/doc/debian-policy/((policy|perl-policy|menu-policy)\.html/.*|fhs/fhs-3\.0|copyright-format-1\.0|debconf_specification|autopkgtest)\.html$' \
    '/(genindex|search|index)\.html$' \
    'the Debian Policy Manual, its Perl and menu sub-policies, the FHS and other specifications: normative English'
source_pkg developers-reference html '^/usr/share/developers-reference/.*\.html$' '/(genindex|search)\.html$' \
    "Debian's guide for its developers"
source_pkg debian-faq html '^/usr/share/doc/debian/FAQ/.*\.html$' '/index(\.en)?\.html$' 'the Debian FAQ: questions and answers'
source_pkg gnu-standards info '^/usr/share/info/.*\.info(-[0-9]+)?\.gz$' '^$' \
    'the GNU Coding Standards and maintainer information as info manuals, one document per node'
source_pkg fortunes fortune '^/usr/share/games/fortunes/[a-z-]+$' '/(art|ascii-art)$' \
    'quotations, jokes and literature, the demo'"'"'s corpus (its ASCII art left out)'
source_pkg fortunes-min fortune '^/usr/share/games/fortunes/[a-z-]+$' '^$' 'the fortunes every fortune-mod install has'

# The tools the text stage runs: python3 (HTML, info, the split), perl's Pod::Text, groff (man).
TOOL_PKGS=(python3-minimal perl perl-modules-5.36 groff-base)

# ------------------------------------------------------------------ arguments
die() { echo "study-corpus: $*" >&2; exit 1; }
OUT= FROM_DIR= DOWNLOAD=0 VAL_PERMILLE=20 VOCAB=4096 TOKENS=1 THREADS=
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help)
            usage
            echo
            echo "Packages (package, format: why):"
            for i in "${!SRC_PKG[@]}"; do printf '  %-20s %-7s %s\n' "${SRC_PKG[$i]}" "${SRC_FMT[$i]}" "${SRC_WHY[$i]}"; done
            exit 0 ;;
        --download) DOWNLOAD=1 ;;
        --from-dir) [ $# -ge 2 ] || die "--from-dir needs a directory"; FROM_DIR=$2; shift ;;
        --val-permille) [ $# -ge 2 ] || die "--val-permille needs a number"; VAL_PERMILLE=$2; shift ;;
        --vocab-size) [ $# -ge 2 ] || die "--vocab-size needs a number"; VOCAB=$2; shift ;;
        --threads) [ $# -ge 2 ] || die "--threads needs a number"; THREADS=$2; shift ;;
        --no-tokens) TOKENS=0 ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) [ -z "$OUT" ] || die "one OUT_DIR only ('$OUT' and '$1')"; OUT=$1 ;;
    esac
    shift
done
[ -n "$OUT" ] || { usage >&2; exit 2; }
[[ "$VAL_PERMILLE" =~ ^[0-9]+$ ]] && [ "$VAL_PERMILLE" -ge 1 ] && [ "$VAL_PERMILLE" -le 500 ] ||
    die "--val-permille $VAL_PERMILLE: expected a whole number in 1..500"
[[ "$VOCAB" =~ ^[0-9]+$ ]] || die "--vocab-size $VOCAB: expected a whole number"
[ -z "$THREADS" ] || [[ "$THREADS" =~ ^[0-9]+$ ]] || die "--threads $THREADS: expected a whole number"
[ -z "$FROM_DIR" ] || [ -d "$FROM_DIR" ] || die "--from-dir $FROM_DIR: not a directory"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEXT="$HERE/study-corpus-text.py"
# Debian's own interpreter, not a version manager's (the tools are part of what the corpus is made with)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
[ -n "$PY" ] || die "python3 is missing; install it with: apt-get install python3-minimal"
DT=${DIFFTRANS:-$HERE/../build/difftrans}
if [ "$TOKENS" = 1 ] && [ ! -x "$DT" ]; then
    die "$DT is not an executable: build difftrans first (make), or set DIFFTRANS, or pass --no-tokens"
fi
mkdir -p "$OUT/cache"
OUT=$(cd "$OUT" && pwd)
CACHE=$OUT/cache
export LC_ALL=C
T0=$SECONDS

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null; }
pkg_installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }
sha() { sha256sum "$@" | cut -d' ' -f1; }

# ------------------------------------------------------------------ the packages' files
ENTRIES=$CACHE/entries.tsv.tmp   # package, version, files, format, why (for the manifest)
: >"$ENTRIES"
CONVERTED=()

if [ -n "$FROM_DIR" ]; then
    FROM_DIR=$(cd "$FROM_DIR" && pwd)
    for fmt in html pod info man text; do
        case $fmt in
            html) re='\.html?$' ;; pod) re='\.pod$' ;; info) re='\.info(-[0-9]+)?(\.gz)?$' ;;
            man) re='\.[1-9]$' ;; text) re='.' ;;
        esac
        list=$CACHE/local.$fmt.list
        if [ $fmt = text ]; then
            (cd "$FROM_DIR" && find . -type f | sed 's|^\.||' | sort) |
                grep -Ev '\.html?$|\.pod$|\.info(-[0-9]+)?(\.gz)?$|\.[1-9]$' >"$list" || true
        else
            (cd "$FROM_DIR" && find . -type f | sed 's|^\.||' | sort) | grep -E "$re" >"$list" || true
        fi
        [ -s "$list" ] || continue
        out=$CACHE/local.$fmt.jsonl
        "$PY" "$TEXT" convert --package local --root "$FROM_DIR" --format $fmt --out "$out" <"$list"
        CONVERTED+=("$out")
        printf 'local\t-\t%s\t%s\t--from-dir %s\n' "$(wc -l <"$list")" $fmt "$FROM_DIR" >>"$ENTRIES"
    done
    [ ${#CONVERTED[@]} -gt 0 ] || die "--from-dir $FROM_DIR: no files"
else
    command -v dpkg-query >/dev/null || die "dpkg-query is missing: the packages mode needs Debian's dpkg"
    mapfile -t NEEDED < <(printf '%s\n' "${SRC_PKG[@]}" | awk '!seen[$0]++')
    # the tools run from the system in both modes
    MISSING=()
    for p in "${TOOL_PKGS[@]}"; do pkg_installed "$p" || MISSING+=("$p"); done
    [ "$DOWNLOAD" = 1 ] || for p in "${NEEDED[@]}"; do pkg_installed "$p" || MISSING+=("$p"); done
    if [ ${#MISSING[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            echo "== installing ${MISSING[*]}"
            DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${MISSING[@]}" ||
                die "apt-get install ${MISSING[*]} failed"
        else
            echo "study-corpus: these packages are missing: ${MISSING[*]}" >&2
            echo "  install them with: sudo apt-get install --no-install-recommends ${MISSING[*]}" >&2
            [ "$DOWNLOAD" = 1 ] ||
                echo "  or run with --download (apt-get download into $CACHE, nothing installed)" >&2
            exit 1
        fi
    fi
    TOOLS_KEY=$(for p in "${TOOL_PKGS[@]}"; do echo "$p=$(pkg_version "$p")"; done | sha)
    TEXT_KEY=$(sha "$TEXT")
    declare -A ROOT VERSION
    for p in "${NEEDED[@]}"; do
        if [ "$DOWNLOAD" = 0 ]; then
            ROOT[$p]=/
            VERSION[$p]=$(pkg_version "$p")
            continue
        fi
        cand=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')
        [ -n "$cand" ] && [ "$cand" != "(none)" ] || die "$p: apt knows no version of it (apt-get update?)"
        mkdir -p "$CACHE/debs"
        deb=$(ls "$CACHE/debs/${p}_${cand//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
        if [ -z "$deb" ]; then
            echo "== apt-get download $p=$cand"
            (cd "$CACHE/debs" && apt-get download "$p=$cand" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2) ||
                die "apt-get download $p=$cand failed"
            deb=$(ls "$CACHE/debs/${p}_${cand//:/%3a}_"*.deb | head -1)
        fi
        VERSION[$p]=$(dpkg-deb -f "$deb" Version)
        ROOT[$p]=$CACHE/root/${p}_${VERSION[$p]}
        if [ ! -d "${ROOT[$p]}" ]; then
            rm -rf "${ROOT[$p]}.tmp"
            mkdir -p "${ROOT[$p]}.tmp"
            dpkg-deb -x "$deb" "${ROOT[$p]}.tmp"
            mv "${ROOT[$p]}.tmp" "${ROOT[$p]}"
        fi
    done
    for i in "${!SRC_PKG[@]}"; do
        p=${SRC_PKG[$i]} fmt=${SRC_FMT[$i]} root=${ROOT[${SRC_PKG[$i]}]} v=${VERSION[${SRC_PKG[$i]}]}
        rule="$p|$fmt|${SRC_INC[$i]}|${SRC_EXC[$i]}"
        key=$(printf '%s\n' "$rule" "$v" "$TEXT_KEY" "$TOOLS_KEY" | sha | cut -c1-16)
        list=$CACHE/$p.$fmt.$key.list
        out=$CACHE/$p.$fmt.$key.jsonl
        if [ "$DOWNLOAD" = 0 ]; then
            dpkg -L "$p" | grep -E "${SRC_INC[$i]}" | grep -Ev "${SRC_EXC[$i]}" | sort >"$list.tmp" || true
        else
            (cd "$root" && find . \( -type f -o -type l \) | sed 's|^\.||') |
                grep -E "${SRC_INC[$i]}" | grep -Ev "${SRC_EXC[$i]}" | sort >"$list.tmp" || true
        fi
        [ -s "$list.tmp" ] || die "$p $v: no file matches ${SRC_INC[$i]}"
        # dpkg lists files that a path-exclude (/etc/dpkg/dpkg.cfg.d) kept off the disk: the
        # corpus would silently lose them
        absent=0
        while IFS= read -r f; do [ -e "$root$f" ] || [ -L "$root$f" ] || absent=$((absent + 1)); done <"$list.tmp"
        [ $absent -eq 0 ] || die "$p $v: $absent of its files are not on disk (a dpkg path-exclude?); use --download"
        mv "$list.tmp" "$list"
        files=0
        while IFS= read -r f; do [ -L "$root$f" ] || files=$((files + 1)); done <"$list"
        if [ -s "$out" ]; then
            echo "== $p $v ($fmt): converted text reused from $out"
        else
            echo "== $p $v ($fmt): converting $files files"
            "$PY" "$TEXT" convert --package "$p" --root "$root" --format "$fmt" --out "$out" <"$list"
        fi
        # text converted from another version (or by another rule) is not needed again
        for old in "$CACHE/$p.$fmt".*.jsonl; do
            [ "$old" = "$out" ] || rm -f "$old" "${old%.jsonl}.list"
        done
        CONVERTED+=("$out")
        printf '%s\t%s\t%s\t%s\t%s\n' "$p" "$v" "$files" "$fmt" "${SRC_WHY[$i]}" >>"$ENTRIES"
    done
fi
mv "$ENTRIES" "$CACHE/entries.tsv"
T_TEXT=$((SECONDS - T0))

# ------------------------------------------------------------------ dedup, split
echo "== assembling train.txt and val.txt (${VAL_PERMILLE} per mille held out)"
"$PY" "$TEXT" assemble --out "$OUT" --val-permille "$VAL_PERMILLE" "${CONVERTED[@]}"
T_SPLIT=$((SECONDS - T0 - T_TEXT))

# ------------------------------------------------------------------ tokenizer and token dataset
T_TOK=0 T_TOKENS=0
EXTRA=$CACHE/extra.json.tmp
{
    printf '{"build_seconds": {"text": %d, "split": %d' "$T_TEXT" "$T_SPLIT"
} >"$EXTRA"
if [ "$TOKENS" = 1 ]; then
    train_sha=$(sha "$OUT/train.txt") val_sha=$(sha "$OUT/val.txt")
    # a rerun keeps what was made from the same text
    stamp="train.txt=$train_sha vocab=$VOCAB $("$DT" --version 2>/dev/null | head -1 || true)"
    t=$SECONDS
    if [ "$(cat "$OUT/tokenizer/made-from" 2>/dev/null || true)" != "$stamp" ]; then
        echo "== learning a $VOCAB-token BPE on train.txt"
        rm -rf "$OUT/tokenizer.tmp"
        "$DT" tokenizer train --data "$OUT/train.txt" --out "$OUT/tokenizer.tmp" --vocab-size "$VOCAB"
        echo "$stamp" >"$OUT/tokenizer.tmp/made-from"
        rm -rf "$OUT/tokenizer"
        mv "$OUT/tokenizer.tmp" "$OUT/tokenizer"
    else
        echo "== tokenizer reused (learned on this train.txt)"
    fi
    T_TOK=$((SECONDS - t))
    tok_sha=$(sha "$OUT/tokenizer/tokenizer.json")
    stamp="train.txt=$train_sha val.txt=$val_sha tokenizer.json=$tok_sha"
    t=$SECONDS
    if [ "$(cat "$OUT/tokens/made-from" 2>/dev/null || true)" != "$stamp" ]; then
        echo "== tokenizing: train split = train.txt, validation split = val.txt"
        rm -rf "$OUT/tokens.tmp"
        "$DT" tokenize --tokenizer "$OUT/tokenizer" --data "$OUT/train.txt" --val "$OUT/val.txt" \
            --out "$OUT/tokens.tmp" --documents paragraph ${THREADS:+--threads "$THREADS"}
        echo "$stamp" >"$OUT/tokens.tmp/made-from"
        rm -rf "$OUT/tokens"
        mv "$OUT/tokens.tmp" "$OUT/tokens"
    else
        echo "== token dataset reused (made from this text and tokenizer)"
    fi
    T_TOKENS=$((SECONDS - t))
    printf ', "tokenizer": %d, "tokenize": %d' "$T_TOK" "$T_TOKENS" >>"$EXTRA"
fi
printf ', "total": %d}, "tools": {' $((SECONDS - T0)) >>"$EXTRA"
sep=
for p in "${TOOL_PKGS[@]}"; do
    printf '%s"%s": "%s"' "$sep" "$p" "$(pkg_version "$p" || echo unknown)" >>"$EXTRA"
    sep=', '
done
printf '}, "mode": "%s"}\n' "$([ -n "$FROM_DIR" ] && echo from-dir || { [ "$DOWNLOAD" = 1 ] && echo download || echo installed; })" >>"$EXTRA"
mv "$EXTRA" "$CACHE/extra.json"

echo "== summary"
MANIFEST_ARGS=(--out "$OUT" --packages "$CACHE/entries.tsv" --extra "$CACHE/extra.json")
[ "$TOKENS" = 0 ] || MANIFEST_ARGS+=(--tokens "$OUT/tokens")
"$PY" "$TEXT" manifest "${MANIFEST_ARGS[@]}"
echo "build time: text $T_TEXT s, split $T_SPLIT s, tokenizer $T_TOK s, tokenize $T_TOKENS s, total $((SECONDS - T0)) s"
echo "== done: $OUT (MANIFEST.json)"
