#!/usr/bin/env bash
# cli_study.sh — `difftrans study` end to end on tiny models, and what makes a study survive its machine.
#
# usage: bash tests/cli_study.sh PATH_TO_difftrans SCRATCH_DIR
#
#   a study        a BPE tokenizer learned on the corpus, a token dataset, 2 sizes × 2 variants × 2 seeds:
#                  REPORT.md (the command at its top, the per-size table with intervals and verdicts, the
#                  fits, the protocol's tables), report.json (python3: the fit, the sizes, every run), plots
#   the same again nothing is trained again (the runs' files are untouched) and the report is rewritten
#   a staged run   a run's checkpoint whole in DIR/.next only (a kill inside its first commit): the resume
#                  commits it and measures it, training nothing
#   stopped        SIGTERM once the first run is measured: exit status 9, finished runs kept; SIGKILL in the
#                  middle of a run (after one of its checkpoints); each time the same command resumes, and the
#                  resumed study's every run measures exactly what the uninterrupted one's did
#   MPI            mpirun -np 2: the runs spread over the ranks, one report, the same numbers
#   refusals       another plan in the same directory (naming the option that differs), a missing dataset,
#                  an unknown size or variant, one variant, no --tokens: a message and the documented status
# Prints a summary and exits 1 when any check failed.
set -u
TMO=${TMO:-600}
. "$(dirname "$0")/cli_lib.sh" "$@"
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1

expect_ok "learn a BPE tokenizer" "$DT" tokenizer train --data "$CORPUS" --out "$S/tok" --vocab-size 320 --quiet
expect_ok "tokenize the corpus" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$S/ds" --val-fraction 0.1 \
    --quiet

STUDY=(--tokens "$S/ds" --sizes 16x1,24x1 --seeds 2 --tokens-per-param 3 --seq 32 --batch 4 --eval-windows 3
       --bins 4 --resamples 100)
expect_ok "a study" "$DT" study "${STUDY[@]}" --out "$S/a" --jobs 2 --threads 2 --quiet
out_has "REPORT.md: the command, the sizes, the fits, the protocol" "$S/a/REPORT.md" \
    "^    difftrans study --tokens .*--sizes 16x1,24x1" "^## Held-out loss by size" "^\| 16x1 \| [0-9.]+ ± [0-9.]+ \|" \
    "^\| 24x1 \| .*\| (DIFF lower|Transformer lower|no difference resolved) \|" "^## Loss against size" \
    "^- parameters DIFF needs" "^### Training and held-out loss" "^### Held-out loss by position" \
    "^### Training stability" "^\| DIFF \| 0 \| [0-9.]+ → " "^\| Transformer \| 0 \| — \|" "smaller than the paper" \
    "With 2 seeds a size, no interval below can be trusted"
if [ -n "$PY" ]; then
    check "report.json: the fit, both sizes, 8 runs" "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
f = r["fit"]
assert f["kind_0"] == "diff" and f["kind_1"] == "transformer", f
assert f["fraction"]["mean"] is None or f["fraction"]["mean"] > 0
assert [s["name"] for s in r["sizes"]] == ["16x1", "24x1"]
for s in r["sizes"]:
    assert s["difference"]["n"] == 2 and len(s["variants"]) == 2
assert len(r["runs"]) == 8
for run in r["runs"]:
    h = run["heldout"]
    assert h["loss"] > 0 and len(h["bins"]) == 4 and run["train"]["loss"] > 0, run
    assert run["tokens"] >= 3 * run["nonembedding_params"] * 0.9
' "$S/a/report.json"
fi
[ -n "$(command -v gnuplot)" ] && out_has "plots" "$S/a/REPORT.md" "plots/loss.png"

# the same command: nothing is trained again
sums() { find "$1/runs" -name model.safetensors -o -name metrics.jsonl | sort | xargs md5sum; }
sums "$S/a" >"$S/before.md5"
touch -d '2000-01-01' "$S/a/REPORT.md"
expect_ok "the same study again" "$DT" study "${STUDY[@]}" --out "$S/a" --quiet
sums "$S/a" >"$S/after.md5"
check "no run was trained again" cmp -s "$S/before.md5" "$S/after.md5"

# a run whose last checkpoint a kill left inside the commit of its first: whole in DIR/.next, no train_state.json
# in DIR; the resume finishes the commit (the staged model becomes the run's) instead of training the run again
cp -r "$S/a" "$S/k"
K=$(ls -d "$S"/k/runs/*/ | head -n 1)
K=${K%/}
rm "$K/run.json" && mkdir "$K/.next" &&
    for f in "$K"/*; do case ${f##*/} in metrics.jsonl) ;; *) mv "$f" "$K/.next/" ;; esac; done
staged=$(stat -c %i "$K/.next/model.safetensors")
expect_ok "a study with a run's first checkpoint staged" "$DT" study "${STUDY[@]}" --out "$S/k" --quiet
check "the staged checkpoint was committed, not trained again" \
    test "$(stat -c %i "$K/model.safetensors")" = "$staged" -a ! -e "$K/.next"
check "... and measures what it did" cmp "$K/run.json" "$S/a/runs/${K##*/}/run.json"
check "the report was written again" test "$S/a/REPORT.md" -nt "$S/before.md5"

# every DIFF run of the larger size diverged (planted in a copy's run.json files): that size is not compared,
# and with one size left no fit, fraction or crossing exists; the report says so instead of "not resolved",
# "a fit that does not fall with size" and "do not cross"
if [ -n "$PY" ]; then
    rm -rf "$S/dv" && cp -a "$S/a" "$S/dv" && rm -rf "$S/dv/plots"
    "$PY" -c '
import json, sys
for p in sys.argv[1:]:
    r = json.load(open(p))
    r["diverged"] = "step 9: λ of layer 0 is -inf after the update — training diverged (try a lower lr)"
    json.dump(r, open(p, "w"))
' "$S"/dv/runs/24x1-diff-s*/run.json
    expect_ok "a study whose DIFF runs diverged at one size" "$DT" study "${STUDY[@]}" --out "$S/dv" --quiet
    out_has "REPORT.md: a size with no pair of runs is not compared, and no fit is claimed" "$S/dv/REPORT.md" \
        "^\| 24x1 \| n/a \| [0-9.]+ ± [0-9.]+ \| n/a \[n/a, n/a\] \| not compared" \
        "^\| 24x1 \| .*\| not compared: no seed has both runs \(diverged\) \|$" \
        "not resolved at [01] .*; at 1 there was nothing to compare: every seed had a run that diverged\." \
        "The fits give no fraction of the parameters: a fit needs two sizes with measured runs of both kinds" \
        "The fits give no crossing\." "^\| 24x1 \| DIFF \| 2 of 2 \|"
    check "REPORT.md: no claim about fits that do not exist" bash -c \
        '! grep -E "does not fall with size|do not cross|^\| 24x1 \|.*no difference resolved" "$1"' _ "$S/dv/REPORT.md"
    # planted held-out losses: DIFF's fall with size, the Transformer's rise. DIFF's curve reaches the Transformer's
    # loss, but there is no Transformer curve to compare with, and the headline says so
    rm -rf "$S/rise" && cp -a "$S/a" "$S/rise"
    "$PY" -c '
import json, sys, glob
loss = {"16x1-diff": 5.0, "24x1-diff": 4.8, "16x1-transformer": 4.9, "24x1-transformer": 5.1}
for p in glob.glob(sys.argv[1] + "/runs/*/run.json"):
    r = json.load(open(p))
    r["heldout"]["loss"] = loss[r["size"] + "-" + r["variant"]] + 0.01 * r["seed_index"]
    json.dump(r, open(p, "w"))
' "$S/rise"
    expect_ok "a study whose Transformer loss rose with size" "$DT" study "${STUDY[@]}" --out "$S/rise" --quiet
    out_has "REPORT.md: the fraction is not read as the paper's claim" "$S/rise/REPORT.md" \
        "From the power-law fits, DIFF reaches the Transformer's loss at .* But the Transformer's fitted loss" \
        "does not fall with size \(slope 0\.[0-9]+\): at this budget its larger models were no better"
    # the plots are drawn without the fits that do not exist (gnuplot stopped at "nan" and drew nothing)
    [ -n "$(command -v gnuplot)" ] && check "plots without the fits" test -s "$S/dv/plots/loss.png" -a \
        -s "$S/dv/plots/position.png" -a ! -e "$S/dv/plots/loss.png.tmp"
fi

# stopped between runs (SIGTERM after the first run.json), then inside one (SIGKILL after a checkpoint)
"$DT" study "${STUDY[@]}" --out "$S/b" --jobs 1 --threads 1 --quiet >/dev/null 2>"$S/b.err" </dev/null &
pid=$!
wait_for $pid 'ls "$S"/b/runs/*/run.json >/dev/null 2>&1'
kill -TERM $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc -eq 9 ]; then pass; else fail "SIGTERM: exit status $rc, not 9: $(cat "$S/b.err")"; fi
out_has "SIGTERM: the message says how to resume" "$S/b.err" "the same command resumes"
n=$(ls "$S"/b/runs/*/run.json 2>/dev/null | wc -l)
if [ "$n" -ge 1 ] && [ "$n" -lt 8 ]; then pass; else fail "SIGTERM: $n runs finished (expected 1..7)"; fi

# a run with a checkpoint and no run.json yet: killed without warning
"$DT" study "${STUDY[@]}" --out "$S/b" --jobs 1 --threads 1 --quiet >/dev/null 2>"$S/b.err" </dev/null &
pid=$!
# a run between two of its checkpoints: train_state.json says a step before its last
mid_run() {
    local d st n
    for d in "$S"/b/runs/*/; do
        [ -f "$d/train_state.json" ] && [ ! -f "$d/run.json" ] || continue
        st=$(grep -o '"step":[[:space:]]*[0-9]*' "$d/train_state.json" | grep -o '[0-9]*$')
        n=$(grep -o '"steps":[[:space:]]*[0-9]*' "$d/train_state.json" | grep -o '[0-9]*$')
        [ -n "$st" ] && [ -n "$n" ] && [ "$st" -lt "$n" ] && return 0
    done
    return 1
}
inside=mid_run
if wait_for $pid "$inside"; then pass; else fail "SIGKILL: no run was caught between two of its checkpoints"; fi
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
expect_ok "the stopped study resumes" "$DT" study "${STUDY[@]}" --out "$S/b" --jobs 1 --threads 1 --quiet
if [ -n "$PY" ]; then
    check "every resumed run measures what the uninterrupted one did" "$PY" -c '
import json, sys, glob, os
a, b = sys.argv[1], sys.argv[2]
runs = sorted(glob.glob(a + "/runs/*/run.json"))
assert len(runs) == 8
for p in runs:
    x = json.load(open(p))
    y = json.load(open(os.path.join(b, "runs", os.path.basename(os.path.dirname(p)), "run.json")))
    for k in ("heldout", "train"):
        assert x[k]["loss"] == y[k]["loss"], (p, k, x[k]["loss"], y[k]["loss"])
        assert x[k]["bins"] == y[k]["bins"], (p, k)
    assert x["training"]["final_train_loss"] == y["training"]["final_train_loss"], p
' "$S/a" "$S/b"
fi

# over MPI: the runs spread over two ranks, the same numbers as one process
if command -v mpirun >/dev/null; then
    MPIRUN=(mpirun --oversubscribe -np 2 -x OMP_WAIT_POLICY -x OPENBLAS_NUM_THREADS)
    [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(cd "$(dirname "$0")" && pwd)/lsan_openmpi.supp"
    expect_ok "the study on 2 MPI ranks" "${MPIRUN[@]}" "$DT" study "${STUDY[@]}" --out "$S/m" --threads 1 --jobs 1 \
        --quiet
    out_has "MPI: one report" "$S/m/REPORT.md" "^## Held-out loss by size"
    if [ -n "$PY" ]; then
        check "MPI: every run measures what the one-process study's did" "$PY" -c '
import json, sys, glob, os
for p in sorted(glob.glob(sys.argv[1] + "/runs/*/run.json")):
    x = json.load(open(p))
    y = json.load(open(os.path.join(sys.argv[2], "runs", os.path.basename(os.path.dirname(p)), "run.json")))
    assert x["heldout"]["loss"] == y["heldout"]["loss"], p
' "$S/a" "$S/m"
    fi
else
    fail "mpirun is installed (scripts/check-deps.sh installs openmpi-bin)"
fi

# refusals
expect_status "another plan in the same directory" 1 "study.json.*seeds 2, not 3" \
    "$DT" study "${STUDY[@]}" --seeds 3 --out "$S/a" --quiet
expect_ok "the corpus tokenised again, another split" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" \
    --out "$S/ds2" --val-fraction 0.2 --quiet
check "the plan's lr as written (0.002, not the float widened)" "$PY" -c \
    'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["lr"] == 0.002 else 1)' "$S/a/study.json"
expect_status "another lr" 1 "study.json: the study there was planned with lr 0.002, not 0.003" \
    "$DT" study "${STUDY[@]}" --lr 0.003 --out "$S/a" --quiet
sed -i -E 's/"lr":[[:space:]]*0\.002([,}])/"lr": 0.0020000000949949026\1/' "$S/a/study.json"
check "a plan written before (lr widened from the float)" grep -q '"lr": 0.0020000000949949026' "$S/a/study.json"
expect_ok "still resumes" "$DT" study "${STUDY[@]}" --out "$S/a" --quiet
expect_status "a study resumed on another dataset" 1 "study.json: the study there was planned with" \
    "$DT" study "${STUDY[@]/$S\/ds/$S/ds2}" --out "$S/a" --quiet
expect_status "a missing dataset" 3 "$S/nope" "$DT" study --tokens "$S/nope" --out "$S/c" --quiet
expect_status "a text file given as the dataset" 2 "$CORPUS: not a token dataset" \
    "$DT" study --tokens "$CORPUS" --out "$S/c" --quiet
expect_status "an unknown size" 1 "size 'huge'.*s1" "$DT" study --tokens "$S/ds" --sizes s1,huge --out "$S/c"
# the report reads the first size as the smallest and the last as the largest
expect_status "sizes from the largest down" 1 \
    "sizes: 16x1 \(3392 non-embedding parameters\) after 24x1 \(7008\): list the sizes from the smallest" \
    "$DT" study --tokens "$S/ds" --sizes 24x1,16x1 --out "$S/c" --quiet
check "nothing written for sizes out of order" test ! -e "$S/c"
expect_status "an unknown variant" 1 "variant 'nonsense'" "$DT" study "${STUDY[@]}" --variants diff,nonsense \
    --out "$S/c" --quiet
expect_status "one variant" 1 "--variants" "$DT" study "${STUDY[@]}" --variants diff --out "$S/c" --quiet
expect_status "no --tokens" 1 "--tokens DATASET is required" "$DT" study --out "$S/c"
expect_ok "--help" "$DT" study --help
out_has "--help names the defaults" "$S/last.out" "--sizes LIST .*\[s1,s2,s3,s4\]" "--tokens-per-param"
finish cli_study
