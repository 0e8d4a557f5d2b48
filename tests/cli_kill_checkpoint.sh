#!/usr/bin/env bash
# cli_kill_checkpoint.sh — a training run killed with SIGKILL at random moments, while it writes a
# checkpoint after every step, always leaves a checkpoint that loads and resumes.
#
# usage: bash tests/cli_kill_checkpoint.sh PATH_TO_difftrans SCRATCH_DIR
#
# A small model with --save-interval 1 spends most of its time in checkpointing, so random kill
# times land inside it (the model, optimizer and train-state files are staged and moved into
# place with train_state.json last; see src/train/checkpoint.c). ROUNDS kills (default 12), each
# at a random delay after the run has made its first checkpoint; after each: `info` loads the
# directory and `train --resume` continues it by one step. Deterministic from KILL_SEED.
set -u
. "$(dirname "$0")/cli_lib.sh" "$@"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ROUNDS=${ROUNDS:-12}
RANDOM=${KILL_SEED:-11}
run=$S/run
cfg=$S/config.json
cat >"$cfg" <<'JSON'
{"model_type": "diffllama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 8,
 "max_position_embeddings": 64}
JSON
expect_ok "first checkpoint" "$DT" train --config "$cfg" --data "$CORPUS" --out "$run" --steps 1 --batch 2 --seq 16 \
    --eval-batches 1 --threads 1 --quiet
steps=1
for round in $(seq 1 "$ROUNDS"); do
    "$DT" train --resume --out "$run" --steps 100000 --save-interval 1 --eval-interval 0 --threads 1 --quiet \
        >/dev/null 2>"$S/train.err" </dev/null &
    pid=$!
    # 20..400 ms: the run is reading the checkpoint, stepping, or writing the next one
    sleep "0.$(printf '%03d' $((20 + RANDOM % 380)))"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    expect_ok "round $round: the killed run's directory loads" "$DT" info "$run"
    # the step a resume continues from: a complete stage (.next/train_state.json, written last) is
    # committed by the resume before it reads anything, so a kill inside a commit can leave
    # train_state.json one checkpoint behind the model files (src/train/checkpoint.h)
    state=$run/train_state.json
    [ -f "$run/.next/train_state.json" ] && state=$run/.next/train_state.json
    now=$("${PY:-python3}" -c 'import json, sys; print(json.load(open(sys.argv[1]))["step"])' "$state" \
        2>/dev/null || echo 0)
    if [ "$now" -lt "$steps" ]; then fail "round $round: the run went back from step $steps to $now"; else pass; fi
    steps=$((now + 1))
    expect_ok "round $round: it resumes (step $now → $steps)" "$DT" train --resume --out "$run" --steps "$steps" \
        --threads 1 --quiet
done
echo "cli_kill_checkpoint: $ROUNDS kills, run at step $steps"
finish cli_kill_checkpoint
