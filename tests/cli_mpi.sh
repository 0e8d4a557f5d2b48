#!/usr/bin/env bash
# cli_mpi.sh — data-parallel training under `mpirun --oversubscribe -np 2`.
#
# usage: bash tests/cli_mpi.sh PATH_TO_difftrans SCRATCH_DIR
#
# The same global batch gives the one-process result: per-step train loss within 1e-4 relative
# over 50 steps for plain, --grad-accum and --zero 1 runs, and two 2-rank runs agree bit for
# bit; resume 2 → 1 and 1 → 2 ranks follows the uninterrupted run; ranks with different data are
# refused; Ctrl-C to mpirun (status 1) or SIGTERM to a rank (status 0) saves and stops every rank;
# a rank killed with SIGKILL (status 137) or stopped (hung: 7) ends the job within a bounded time
# naming the rank, and the last checkpoint resumes.
TMO=120
. "$(dirname "$0")/cli_lib.sh" "$@"
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
# containers often forbid the cross-memory attach Open MPI's shared-memory transport tries first
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# under AddressSanitizer: Open MPI's own allocations live until exit; ours are still checked
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(cd "$(dirname "$0")" && pwd)/lsan_openmpi.supp"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
if ! command -v mpirun >/dev/null; then
    fail "mpirun is installed (scripts/check-deps.sh installs openmpi-bin)"
    finish cli_mpi
fi

RUN=(train --data "$CORPUS" --preset tiny --batch 4 --seq 32 --warmup 5 --eval-interval 25 --eval-batches 2
     --quiet --threads 1)

# same_losses DESC A B [N]: the first N (50) per-step train losses of runs A and B within 1e-4 relative
same_losses() {
    local desc=$1 a=$2 b=$3 n=${4:-50} out
    if out=$("$PY" - "$a/metrics.jsonl" "$b/metrics.jsonl" "$n" 2>&1 <<'EOF'
import json, math, sys
a = [json.loads(l)["train_loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["train_loss"] for l in open(sys.argv[2])]
n = int(sys.argv[3])
if len(a) < n or len(b) < n:
    sys.exit(f"{len(a)} and {len(b)} steps, expected {n}")
worst = max(abs(x - y) / abs(x) if math.isfinite(x) and math.isfinite(y) else math.inf for x, y in zip(a[:n], b[:n]))
print(f"largest relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-4 else f"largest relative difference {worst:.2e} > 1e-4")
EOF
    ); then pass; else fail "$desc" "$out"; fi
}

# rank_pid MPIRUN_PID RANK: the process of that rank (a child of mpirun)
rank_pid() {
    local p
    for p in $(pgrep -P "$1"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# wait_for_file FILE SECONDS
wait_for_file() {
    local i
    for i in $(seq 1 $(($2 * 10))); do
        [ -e "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# ---- the same global batch: one process against two ranks
expect_ok "one process, 50 steps" "$DT" "${RUN[@]}" --steps 50 --out "$S/one"
expect_ok "one process, --grad-accum 2" "$DT" "${RUN[@]}" --steps 50 --grad-accum 2 --out "$S/one_k2"
expect_ok "2 ranks, 50 steps" "${MPIRUN[@]}" -np 2 "$DT" "${RUN[@]}" --steps 50 --out "$S/two"
same_losses "2 ranks follow one process" "$S/one" "$S/two"
expect_ok "2 ranks again" "${MPIRUN[@]}" -np 2 "$DT" "${RUN[@]}" --steps 50 --out "$S/two_again"
check "2 ranks twice: the same model bit for bit" cmp "$S/two/model.safetensors" "$S/two_again/model.safetensors"
check "2 ranks twice: the same metrics losses" cmp <(cut -d, -f1-2 "$S/two/metrics.jsonl") \
    <(cut -d, -f1-2 "$S/two_again/metrics.jsonl")
expect_ok "2 ranks, --grad-accum 2" "${MPIRUN[@]}" -np 2 "$DT" "${RUN[@]}" --steps 50 --grad-accum 2 \
    --out "$S/two_k2"
same_losses "2 ranks × 2 micro-batches follow one process" "$S/one" "$S/two_k2"
same_losses "... and one process with 2 micro-batches" "$S/one_k2" "$S/two_k2"
expect_ok "2 ranks, --zero 1" "${MPIRUN[@]}" -np 2 "$DT" "${RUN[@]}" --steps 50 --zero 1 --out "$S/two_z"
same_losses "ZeRO-1 on 2 ranks follows one process" "$S/one" "$S/two_z"
check "ZeRO-1 checkpoint has the whole optimizer state" test "$(stat -c %s "$S/one/optimizer.safetensors")" = \
    "$(stat -c %s "$S/two_z/optimizer.safetensors")"

# ---- resume across N: stop at step 25 with one N, finish with the other
expect_ok "2 ranks stop at 25" "${MPIRUN[@]}" -np 2 "$DT" "${RUN[@]}" --steps 50 --stop-at 25 --out "$S/r21"
expect_ok "resume on 1 process" "$DT" train --resume --out "$S/r21" --quiet --threads 1
same_losses "2 → 1 ranks follows the uninterrupted run" "$S/one" "$S/r21"
expect_ok "2 ranks stop at 25 again" "${MPIRUN[@]}" -np 2 "$DT" "${RUN[@]}" --steps 50 --stop-at 25 --out "$S/r22"
expect_ok "resume on 2 ranks" "${MPIRUN[@]}" -np 2 "$DT" train --resume --out "$S/r22" --quiet --threads 1
check "2 → 2 ranks equals the uninterrupted 2-rank run bit for bit" cmp "$S/two/model.safetensors" \
    "$S/r22/model.safetensors"
expect_ok "1 process stops at 25" "$DT" "${RUN[@]}" --steps 50 --stop-at 25 --out "$S/r12"
expect_ok "resume on 2 ranks with ZeRO-1" "${MPIRUN[@]}" -np 2 "$DT" train --resume --out "$S/r12" --quiet --zero 1
same_losses "1 → 2 ranks follows the uninterrupted run" "$S/one" "$S/r12"

# ---- resume on N ranks that the saved batch (4) does not fit: what may change is named
expect_ok "1 process, --grad-accum 4, stops at 2" "$DT" "${RUN[@]}" --steps 4 --stop-at 2 --grad-accum 4 \
    --out "$S/k4"
expect_fail "resume of --grad-accum 4 on 2 ranks names --grad-accum, not the saved --batch" \
    "grad_accum 4: must divide the 2 sequences per rank .*k4 \(a batch of 4 on 2 ranks\) \(--grad-accum\)$" \
    "${MPIRUN[@]}" -np 2 "$DT" train --resume --out "$S/k4" --quiet --threads 1
expect_ok "... and resumes with --grad-accum 2" "${MPIRUN[@]}" -np 2 "$DT" train --resume --out "$S/k4" --quiet \
    --threads 1 --grad-accum 2
expect_ok "1 process, --batch 3, stops at 2" "$DT" "${RUN[@]}" --steps 4 --stop-at 2 --batch 3 --out "$S/b3"
expect_fail "resume of --batch 3 on 2 ranks says the run's batch cannot be split" \
    "the run in .*b3 has a batch of 3 sequences, which 2 ranks cannot split" \
    "${MPIRUN[@]}" -np 2 "$DT" train --resume --out "$S/b3" --quiet --threads 1

# ---- refused at start-up
cp "$CORPUS" "$S/other.txt" && echo "one more line" >>"$S/other.txt"
# what differs is named, with each rank's value, and the flag (a hash alone left the user to guess)
expect_fail "ranks with different data are refused, naming both files" \
    "ranks differ in the data file: data_path .*/[^/ ]+ on rank 0, .*other\.txt on rank 1; n_tokens [0-9]+ on rank 0, "\
"[0-9]+ on rank 1 \(--data\)$" \
    "${MPIRUN[@]}" -np 1 "$DT" "${RUN[@]}" --steps 5 --out "$S/mix" : -np 1 "$DT" "${RUN[@]}" --steps 5 \
    --out "$S/mix" --data "$S/other.txt"
# rank 0 made --out and its metrics.jsonl before the ranks compared their starts
check "a refused job leaves no --out" test ! -e "$S/mix"
expect_fail "ranks with different options are refused, naming the option and both values" \
    "ranks differ in the options or model config: lr 0\.001 on rank 0, 0\.01 on rank 1 \(--lr\)$" \
    "${MPIRUN[@]}" -np 1 "$DT" "${RUN[@]}" --steps 5 --out "$S/mix" : -np 1 "$DT" "${RUN[@]}" --steps 5 \
    --out "$S/mix" --lr 0.01
check "nor does that one" test ! -e "$S/mix"
"$DT" tokenizer train --data "$CORPUS" --vocab-size 300 --out "$S/tok_a" --quiet 2>/dev/null
"$DT" tokenizer train --data "$CORPUS" --vocab-size 320 --out "$S/tok_b" --quiet 2>/dev/null
"$DT" tokenize --tokenizer "$S/tok_a" --data "$CORPUS" --out "$S/ds_a" --quiet >/dev/null 2>&1
"$DT" tokenize --tokenizer "$S/tok_b" --data "$CORPUS" --out "$S/ds_b" --quiet >/dev/null 2>&1
expect_fail "ranks with datasets of other tokenizers: the vocabularies and the datasets are named" \
    "options or model config: vocab_size 300 on rank 0, 320 on rank 1; and in the data file: "\
"tokens_path .*ds_a on rank 0, .*ds_b on rank 1; n_tokens" \
    "${MPIRUN[@]}" -np 1 "$DT" train --tokens "$S/ds_a" --preset tiny --batch 4 --seq 32 --steps 5 --quiet \
    --threads 1 --out "$S/mix" : -np 1 "$DT" train --tokens "$S/ds_b" --preset tiny --batch 4 --seq 32 --steps 5 \
    --quiet --threads 1 --out "$S/mix"
expect_fail "a batch the ranks cannot split is refused" "batch 3: must be a multiple of ranks.*--batch" \
    "${MPIRUN[@]}" -np 2 "$DT" "${RUN[@]}" --steps 5 --batch 3 --out "$S/odd"

# ---- faults; the runs are long and checkpoint every 10 steps
LONG=("${RUN[@]}" --steps 1000000 --eval-interval 0 --save-interval 10)

# Ctrl-C to mpirun: every rank stops after the same step and rank 0 saves (no checkpoint before)
# (not --quiet: rank 0's closing line says whether it saved)
LOUD=()
for a in "${LONG[@]}"; do [ "$a" = --quiet ] || LOUD+=("$a"); done
"${MPIRUN[@]}" -np 2 "$DT" "${LOUD[@]}" --save-interval 0 --out "$S/int" >"$S/int.log" 2>&1 &
MP=$!
if wait_for_file "$S/int/metrics.jsonl" 60; then
    sleep 0.5
    kill -INT $MP
    t0=$SECONDS
    wait $MP
    rc=$?
    if [ $((SECONDS - t0)) -le 20 ] && [ -s "$S/int/train_state.json" ]; then pass; else
        fail "Ctrl-C to mpirun saves and stops" "$(tail -c 600 "$S/int.log")"
    fi
    # README: mpirun's status after a signal is 1 although the ranks exited 0; rank 0 says it saved
    if [ $rc -eq 1 ] && grep -q "interrupted at step .*: checkpoint saved" "$S/int.log" &&
        ! grep -q "non-zero" "$S/int.log"; then pass; else
        fail "Ctrl-C to mpirun: status 1 from mpirun, 0 from the ranks, rank 0 says it saved (status $rc)" \
            "$(tail -c 600 "$S/int.log")"
    fi
    expect_ok "the interrupted run resumes" "$DT" train --resume --out "$S/int" --threads 1 --quiet \
        --steps "$(($(sed -n 's/.*"step":[[:space:]]*\([0-9]*\).*/\1/p' "$S/int/train_state.json") + 3))"
else
    fail "the Ctrl-C run started" "$(tail -c 600 "$S/int.log")"
    kill -9 $MP 2>/dev/null
fi

# SIGTERM to one rank (README: the way to stop at once): every rank stops after the same step, rank
# 0 saves, and mpirun exits 0
"${MPIRUN[@]}" -np 2 "$DT" "${LOUD[@]}" --save-interval 0 --out "$S/term" >"$S/term.log" 2>&1 &
MP=$!
if wait_for_file "$S/term/metrics.jsonl" 60 && sleep 0.5 && pid=$(rank_pid $MP 1); then
    kill -TERM "$pid"
    t0=$SECONDS
    wait $MP
    rc=$?
    if [ $rc -eq 0 ] && [ $((SECONDS - t0)) -le 10 ] && [ -s "$S/term/train_state.json" ] &&
        grep -q "interrupted at step .*: checkpoint saved" "$S/term.log"; then pass; else
        fail "SIGTERM to rank 1 stops the job with status 0 and a checkpoint (status $rc)" \
            "$(tail -c 600 "$S/term.log")"
    fi
else
    fail "the SIGTERM run started" "$(tail -c 600 "$S/term.log")"
    kill -9 $MP 2>/dev/null
fi

# fault_run NAME SIGNAL STATUS EXTRA...: start a long job, send SIGNAL to rank 1 once it has
# checkpointed, and expect the job to end with STATUS (README) within 30 s with a message naming rank 1.
fault_run() {
    local name=$1 sig=$2 want=$3 pid t0 rc
    shift 3
    "${MPIRUN[@]}" -np 2 "$DT" "${LONG[@]}" --out "$S/$name" "$@" >"$S/$name.log" 2>&1 &
    local mp=$!
    if ! wait_for_file "$S/$name/train_state.json" 60 || ! pid=$(rank_pid $mp 1); then
        fail "$name: the job started and checkpointed" "$(tail -c 600 "$S/$name.log")"
        kill -9 $mp 2>/dev/null
        return
    fi
    kill "-$sig" "$pid"
    t0=$SECONDS
    for _ in $(seq 1 300); do kill -0 $mp 2>/dev/null || break; sleep 0.1; done
    if kill -0 $mp 2>/dev/null; then
        fail "$name: the job ends within 30 s" "$(tail -c 600 "$S/$name.log")"
        kill -9 $mp "$pid" 2>/dev/null
    fi
    wait $mp
    rc=$?
    if [ $rc -eq "$want" ] && grep -qE "rank 1[^0-9]" "$S/$name.log"; then pass; else
        fail "$name: the job fails with status $want naming rank 1 (status $rc)" "$(tail -c 800 "$S/$name.log")"
    fi
    kill -9 "$pid" 2>/dev/null # a stopped rank, should the launcher have left it
    expect_ok "$name: the last checkpoint resumes" "$DT" train --resume --out "$S/$name" --threads 1 --quiet \
        --steps "$(($(sed -n 's/.*"step":[[:space:]]*\([0-9]*\).*/\1/p' "$S/$name/train_state.json") + 3))"
}
fault_run killed KILL 137
fault_run hung STOP 7 --comm-timeout 3

finish cli_mpi
