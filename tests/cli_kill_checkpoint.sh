#!/usr/bin/env bash
# cli_kill_checkpoint.sh — a training run killed with SIGKILL at random moments, while it writes a
# checkpoint after every step, always leaves a checkpoint that loads and resumes, and the run
# finished through all the kills equals an uninterrupted one bit for bit (README, "Training").
#
# usage: bash tests/cli_kill_checkpoint.sh PATH_TO_difftrans SCRATCH_DIR
#
# A small model with --save-interval 1 spends most of its time in checkpointing, so random kill
# times land inside it (the model, optimizer and train-state files are staged and moved into
# place with train_state.json last; see src/train/checkpoint.c). The interval is given to the
# first run: a resume keeps the saved run's. ROUNDS kills (default 12), each at a random delay
# after the run has made its first checkpoint; after each: `info` loads the directory and
# `train --resume --stop-at` continues it by one step (the schedule of --steps kept). Then the run
# is finished and compared with one never interrupted. Deterministic from KILL_SEED. Last, runs
# into a directory that a run is writing are refused.
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ROUNDS=${ROUNDS:-12}
RANDOM=${KILL_SEED:-11}
STEPS=200
run=$S/run
cfg=$S/config.json
cat >"$cfg" <<'JSON'
{"model_type": "diffllama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 8,
 "max_position_embeddings": 64}
JSON
RUN=(train --config "$cfg" --data "$CORPUS" --steps $STEPS --batch 2 --seq 16 --eval-batches 1 --eval-interval 0
     --threads 1 --quiet)
expect_ok "first checkpoint" "$DT" "${RUN[@]}" --out "$run" --save-interval 1 --stop-at 1
# the step a resume continues from: a complete stage (.next/train_state.json, written last) is
# committed by the resume before it reads anything, so a kill inside a commit can leave
# train_state.json one checkpoint behind the model files (src/train/checkpoint.h)
resume_step() {
    local state=$run/train_state.json
    [ -f "$run/.next/train_state.json" ] && state=$run/.next/train_state.json
    "${PY:-python3}" -c 'import json, sys; print(json.load(open(sys.argv[1]))["step"])' "$state" 2>/dev/null || echo 0
}
steps=1
for round in $(seq 1 "$ROUNDS"); do
    "$DT" train --resume --out "$run" --threads 1 --quiet >/dev/null 2>"$S/train.err" </dev/null &
    pid=$!
    # 20..400 ms: the run is reading the checkpoint, stepping, or writing the next one
    sleep "0.$(printf '%03d' $((20 + RANDOM % 380)))"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    check "round $round: the resumed run said nothing" test ! -s "$S/train.err"
    expect_ok "round $round: the killed run's directory loads" "$DT" info "$run"
    now=$(resume_step)
    if [ "$now" -lt "$steps" ]; then fail "round $round: the run went back from step $steps to $now"; else pass; fi
    [ "$now" -ge $STEPS ] && break # a fast machine: the run ended before the kill
    steps=$((now + 1))
    expect_ok "round $round: it resumes (step $now → $steps)" "$DT" train --resume --out "$run" --stop-at "$steps" \
        --threads 1 --quiet
done
if [ "$(resume_step)" -lt $STEPS ]; then
    expect_ok "the killed run finishes" "$DT" train --resume --out "$run" --threads 1 --quiet
fi
expect_ok "an uninterrupted run" "$DT" "${RUN[@]}" --out "$S/ref" --save-interval 0
check "--eval-interval 0 validates after the first and the last step only (README, --help)" test \
    "$(grep -n '"val_loss"' "$S/ref/metrics.jsonl" | cut -d: -f1 | tr '\n' ' ')" = "1 $STEPS "
for f in model.safetensors optimizer.safetensors; do
    check "$f of the killed and resumed run equals the uninterrupted run's" cmp "$S/ref/$f" "$run/$f"
done
check "the killed run's metrics have each step once, with the uninterrupted run's losses" \
    cmp <(cut -d, -f1-2 "$S/ref/metrics.jsonl") <(cut -d, -f1-2 "$run/metrics.jsonl")

# While a run writes the directory, a second run into it is refused (status 3) — it would stage
# into the same .next/ — and so is --force, which would remove the files from under it.
"$DT" train --resume --out "$run" --steps 100000 --threads 1 --quiet >/dev/null 2>"$S/long.err" </dev/null &
pid=$!
for _ in $(seq 1 600); do
    [ "$(wc -l <"$run/metrics.jsonl")" -gt $((STEPS + 2)) ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
done
expect_status "a second --resume while the run writes its directory" 3 "run: another difftrans train is writing" \
    "$DT" train --resume --out "$run" --threads 1 --quiet
expect_status "a --force run into it" 3 "another difftrans train is writing" "$DT" "${RUN[@]}" --out "$run" --force
expect_status "init --force into it" 3 "another difftrans train is writing" "$DT" init --out "$run" --force --preset tiny
kill -INT $pid
wait $pid
check "the running run, stopped by Ctrl-C, exits 0 having said nothing else" test $? -eq 0 -a ! -s "$S/long.err"
check "... and leaves its state file" test -s "$run/train_state.json"
expect_ok "... which resumes" "$DT" train --resume --out "$run" --stop-at $(($(resume_step) + 1)) --threads 1 --quiet
# --force forgets the old run whole: a checkpoint it had staged but not committed (killed inside
# the commit) would otherwise be committed by the next --resume, the old weights with it
mkdir -p "$run/.next" && cp "$run/train_state.json" "$run/model.safetensors" "$run/.next/"
expect_ok "init --force over a run with a staged checkpoint" "$DT" init --out "$run" --force --preset tiny
check "... removes the staged checkpoint" test ! -e "$run/.next"
check "... and the old run's state" test ! -e "$run/train_state.json" -a ! -e "$run/optimizer.safetensors"
echo "cli_kill_checkpoint: $ROUNDS kills, last at step $steps of $STEPS"
finish cli_kill_checkpoint
