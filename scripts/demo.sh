#!/bin/sh
# make demo: train a small DIFF Transformer on the English text of Debian's `fortunes` package,
# show the validation loss falling, save the model and generate a sample from it.
# Knobs: DEMO_STEPS (default 1000), DEMO_OUT (default demo-out), DEMO_THREADS (default: all cores).
set -eu
bin=${1:-build/difftrans}
out=${DEMO_OUT:-demo-out}
steps=${DEMO_STEPS:-1000}
threads=${DEMO_THREADS:-$(nproc 2>/dev/null || echo 2)}
fortunes=/usr/share/games/fortunes

if [ ! -d "$fortunes" ]; then
    echo "demo: $fortunes is missing; install the corpus with: apt-get install fortunes" >&2
    exit 1
fi
mkdir -p "$out"
corpus="$out/fortunes.txt"
# the plain-text fortune files (not the .dat indexes, .u8 copies or links), in a fixed order
find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort | xargs cat > "$corpus"
if [ ! -s "$corpus" ]; then
    echo "demo: no text found in $fortunes" >&2
    exit 1
fi
echo "== corpus: $corpus ($(wc -c < "$corpus") bytes of English from Debian's fortunes package)"
echo "== training a DIFF Transformer (preset small) for $steps steps on $threads threads"
# --force: each demo trains afresh, replacing the model an earlier demo left there
"$bin" train --data "$corpus" --out "$out/diff-small" --arch diff --preset small --force \
    --steps "$steps" --batch 16 --seq 128 --lr 2e-3 --warmup 100 --eval-interval 100 \
    --save-interval 400 --threads "$threads"
echo
echo "== the trained model"
"$bin" info "$out/diff-small"
echo
echo "== held-out validation loss per evaluation (from $out/diff-small/metrics.jsonl)"
grep '"val_loss"' "$out/diff-small/metrics.jsonl" | sed 's/.*"step":\([0-9]*\).*"val_loss":\([0-9.]*\).*/  step \1: val loss \2/'
echo
echo "== a sample (temperature 0.8, top-p 0.95; the model was trained on 128-byte windows, so it stays within them)"
"$bin" generate "$out/diff-small" --prompt "The meaning of life is " -n 100 --temperature 0.8 --seed 7
echo
echo "== done: the model is in $out/diff-small (config.json, model.safetensors, metrics.jsonl)"
