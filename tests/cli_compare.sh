#!/usr/bin/env bash
# cli_compare.sh — `difftrans compare`, end to end on tiny budgets.
#
# usage: bash tests/cli_compare.sh PATH_TO_difftrans SCRATCH_DIR
#
#   --quick            REPORT.md (command line, seeds, tables with intervals, verdicts, task tables and
#                      learning curves), report.json (python3: every run, the summary), the run
#                      directories of both seeds, the PNGs when gnuplot is on PATH
#   --ablations        three variants side by side, one table per measure with parameter counts
#   --quick --needle   refused at --quick's 64 bytes, naming the --seq that holds a sample; with --seq 128
#                      the needle set (filling the training window, recorded in compare.json),
#                      DIR/train.txt, the retrieval / allocation tables and needle accuracy per
#                      post-training quantisation scheme (REPORT.md, report.json)
#   --tokenizer        BPE runs (a tokenizer from tests/make_bpe_tokenizer.py) with --needle and the
#                      tasks: every run carries the tokenizer, the report counts tokens and has the task
#                      tables (each symbol one token); the needle set fills the training window in its
#                      tokens, a resume takes compare.json's set (an older plan without one: the byte
#                      sizing; either past the window: said in the progress and REPORT.md),
#                      a planned set too long is refused; --tokens (a token dataset) too; a tokenizer
#                      without a token for a task symbol is refused naming it
#   resuming           SIGINT inside the first run (status 9) and SIGKILL inside the second (its checkpoint
#                      then staged as a kill inside its first commit leaves it), each resumed by the same
#                      command: the models and report.json of the uninterrupted comparison; other options
#                      refused naming the field and its flag, --force starts over (a staged checkpoint too)
#   refusals           missing --data / --out, bad --steps, a missing data file, an unknown preset,
#                      variant or task: exit status 1 and a message naming the argument or the file
# Prints a summary and exits 1 when any check failed.
set -u

# A hang, not slowness, is what the limit catches: on a 2-core machine shared by several builds
# `compare --quick` alone has taken over 240 s.
TMO=${TMO:-900}
. "$(dirname "$0")/cli_lib.sh" "$@"
# one thread per training (the default --jobs 2) and passive OpenMP waits: spinning threads
# crawl on a machine shared with other busy processes
export OMP_WAIT_POLICY=PASSIVE

expect_ok "compare --help" "$DT" compare --help &&
    out_has "compare --help lists the options" "$S/last.out" "--data" "--out" "--preset" "--steps" "--needle" \
        "--quick" "--seed" "--seeds" "--tasks" "--task-ratio" "--ablations" "diff-subln"
expect_ok "difftrans --help lists compare" "$DT" --help && out_has "compare in the command list" "$S/last.out" "compare"

# ---------------------------------------------------------------- --quick

Q=$S/quick
expect_ok "compare --quick" "$DT" compare --quick --quiet --threads 1 --seed 7 --data "$CORPUS" --out "$Q"
check "REPORT.md written" test -s "$Q/REPORT.md"
check "report.json written" test -s "$Q/report.json"
check "DIFF run directories" test -s "$Q/diff/metrics.jsonl" -a -s "$Q/diff-seed1/metrics.jsonl"
check "Transformer run directories" test -s "$Q/transformer/metrics.jsonl" -a -s "$Q/transformer-seed1/metrics.jsonl"
out_has "REPORT.md has the command line, seeds, tables and verdicts" "$Q/REPORT.md" \
    "difftrans compare --quick --quiet --threads 1 --seed 7 --data" "2 run\(s\) per model with seeds 7..8" \
    "\| measure \| paper DIFF \| paper Transformer \| DIFF \| Transformer \|" \
    "largest attention logit \| 38.8 \| 318.0 \| [0-9.]+ ± [0-9.]+ \|" "largest hidden-state activation \| 1,688 \| 3,609" \
    "## Tasks learned in training" "### recall" "### depth" "### icl" "### Learning curves" \
    "(DIFF better|Transformer better|No difference this run can resolve) on recall accuracy" \
    "In-context learning and the order of the examples" "std of accuracy over orders \\| much smaller" \
    "final validation loss" "λ per layer" "No needle set" "Post-training quantisation of weights and activations" \
    "\| w8a8-smooth: KL from F32 \|"
if [ -n "$PY" ]; then
    check "report.json parses and holds every run" "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["seed"] == "7" and r["seeds"] == 2 and r["unit"] == "byte", (r["seed"], r["seeds"], r["unit"])
runs = [(m["variant"], m["seed"]) for m in r["runs"]]
assert runs == [("diff", "7"), ("diff", "8"), ("transformer", "7"), ("transformer", "8")], runs
for m in r["runs"]:
    assert m["quantisation"][0]["bits"] == 0 and len(m["quantisation"]) == 7
    assert m["outliers"]["attention_logits"]["top1"] > 0
    assert m["training"]["final_val_loss"] is not None
    wq = [x["scheme"] for x in m["weight_quantisation"]]
    assert wq == ["f32", "q8_0", "q4_0", "w8a8", "w8a8-smooth"], wq
    assert set(m["tasks"]) == {"recall", "depth", "icl"}
    assert len(m["learning_curve"]) >= 2 and "recall" in m["learning_curve"][-1]
assert len(r["runs"][0]["lambda_final"]) == r["runs"][0]["layers"]
s = r["summary"]["recall_accuracy"]
assert s["diff"]["n"] == 2 and s["transformer"]["n"] == 2
assert s["diff"]["verdict"] in ("variant better", "Transformer better", "no difference this run can resolve")
' "$Q/report.json"
fi
if command -v gnuplot >/dev/null 2>&1; then
    for p in loss lambda grad_norm quantisation outliers curve_recall curve_depth curve_icl; do
        check "plot $p.png" test -s "$Q/plots/$p.png"
    done
    out_has "REPORT.md embeds the plots" "$Q/REPORT.md" "!\[loss\]\(plots/loss.png\)" "!\[curve_icl\]\(plots/curve_icl.png\)"
else
    out_has "REPORT.md says gnuplot is missing" "$Q/REPORT.md" "gnuplot is not on PATH"
fi

# ---------------------------------------------------------------- --ablations

A=$S/ablations
expect_ok "compare --ablations" "$DT" compare --quick --quiet --threads 1 --seeds 1 --steps 20 --tasks recall \
    --ablations diff,transformer,diff-subln --data "$CORPUS" --out "$A" &&
    out_has "one table per measure, every variant with its parameters" "$A/REPORT.md" \
        "## Every variant, one table per measure" "### recall accuracy" \
        "\| variant \| parameters \|" "\| DIFF \| [0-9]+ \|" "\| Transformer \| [0-9]+ \|" "\| DIFF\+subln \| [0-9]+ \|" \
        "\| recall DIFF\+subln \|"
check "a run directory per variant" test -s "$A/diff-subln/metrics.jsonl"
expect_ok "compare --ablations with named ablations" "$DT" compare --quick --quiet --threads 1 --seeds 1 --steps 10 \
    --tasks icl --ablations diff,transformer+alibi,v2 --data "$CORPUS" --out "$S/abl2" &&
    out_has "the ablations side by side" "$S/abl2/REPORT.md" "\| transformer\+alibi \| [0-9]+ \|" "\| DIFF V2 \| [0-9]+ \|"
# without the diff / transformer pair there is no loss-against-size point (it was read from before the runs)
check "report.json: no size points without the pair" "$PY" -c \
    "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['sizes']==[] else 1)" "$S/abl2/report.json"
expect_fail "an unknown variant" "variant 'bogus'" "$DT" compare --quick --ablations diff,bogus --data "$CORPUS" --out "$S/x"
expect_fail "an unknown task" "--tasks: unknown task 'nope'" "$DT" compare --quick --tasks recall,nope --data "$CORPUS" --out "$S/x"

expect_ok "compare --quick --scaling small" "$DT" compare --quick --quiet --threads 1 --steps 20 --seeds 1 \
    --tasks none --data "$CORPUS" --out "$S/scaling" --scaling small &&
    out_has "the report fits loss against size" "$S/scaling/REPORT.md" "## Loss against model size" "\| tiny \|" \
        "\| small \|" "fitted exponent b" "N the non-embedding parameters" "\| DIFF N \| Transformer N \|"
check "report.json lists both sizes" "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if [s['preset'] for s in j['sizes']]==['tiny','small'] else 1)" "$S/scaling/report.json"
expect_fail "--scaling with an unknown preset" "huge" "$DT" compare --quick --data "$CORPUS" --out "$S/bad" --scaling huge
expect_fail "--scaling naming the comparison's own preset" "scaling tiny: the comparison's own preset" \
    "$DT" compare --quick --data "$CORPUS" --out "$S/bad" --scaling tiny,small

# ---------------------------------------------------------------- resuming

# stopped by SIGINT inside the first training, then killed inside the second, the same command finishes
# the comparison: the finished run is kept, the other continues from its checkpoint, and the report is
# the one an uninterrupted comparison writes (every number; only the command line and the paths differ)
RUN=(compare --quick --threads 1 --jobs 1 --seeds 1 --steps 400 --tasks recall --data "$CORPUS")
expect_ok "an uninterrupted comparison" "$DT" "${RUN[@]}" --quiet --out "$S/whole"
mid_run() { # mid_run DIR: DIR holds a checkpoint before its run's last step
    local st
    st=$(grep -o '"step":[[:space:]]*[0-9]*' "$1/train_state.json" 2>/dev/null | grep -o '[0-9]*$')
    [ -n "$st" ] && [ "$st" -lt 400 ]
}
R=$S/resume
"$DT" "${RUN[@]}" --quiet --out "$R" >/dev/null 2>"$S/r.err" </dev/null &
pid=$!
if wait_for $pid 'mid_run "$R/diff"'; then pass; else fail "SIGINT: the first run was not caught in training"; fi
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc -eq 9 ]; then pass; else fail "SIGINT: exit status $rc, not 9: $(cat "$S/r.err")"; fi
out_has "SIGINT: the message says how to resume" "$S/r.err" "stopped; the finished runs and the checkpoint of each"
check "the stopped run is not done" bash -c '! grep -qs "\"done\":[[:space:]]*true" "$1"' _ "$R/diff/curve.json"
"$DT" "${RUN[@]}" --quiet --out "$R" >/dev/null 2>"$S/r.err" </dev/null &
pid=$!
if wait_for $pid 'mid_run "$R/transformer"'; then pass
else fail "SIGKILL: the second run was not caught in training"; fi
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
check "the first run finished before the kill" grep -q '"done":[[:space:]]*true' "$R/diff/curve.json"
# the second run's checkpoint as a kill inside the commit of its first leaves it: whole in DIR/.next (written
# last there, train_state.json says it is complete), DIR without a train_state.json; the resume finishes the commit
staged_first() {
    local f
    if [ ! -f "$1/.next/train_state.json" ]; then
        rm -rf "$1/.next" && mkdir "$1/.next" || return 1
        for f in "$1"/*; do
            case ${f##*/} in metrics.jsonl | curve.json) ;; *) mv "$f" "$1/.next/" || return 1 ;; esac
        done
    fi
    rm -f "$1/train_state.json" && [ -f "$1/.next/train_state.json" ]
}
check "a checkpoint whose first commit a kill interrupted" staged_first "$R/transformer"
expect_ok "the stopped comparison resumes" "$DT" "${RUN[@]}" --out "$R"
out_has "it says what it kept" "$S/last.err" "resuming .*resume: 1 of 2 trainings done, 1 continued from a checkpoint"
check "the resumed models are the uninterrupted ones" cmp "$R/transformer/model.safetensors" \
    "$S/whole/transformer/model.safetensors"
check "the first one too" cmp "$R/diff/model.safetensors" "$S/whole/diff/model.safetensors"
if [ -n "$PY" ]; then
    check "the resumed report is the uninterrupted one" "$PY" -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for r in (a, b):
    del r["command"]
    for m in r["runs"]:
        del m["dir"]
assert a == b, [k for k in a if a[k] != b.get(k)]
assert len(a["runs"][0]["learning_curve"]) == 3, "the learning curve was kept"
' "$R/report.json" "$S/whole/report.json"
fi
cp "$R/compare.json" "$S/plan.json"
expect_status "a resume with other options" 1 \
    "compare.json: the comparison there was planned with steps 400, not 500: .*--force to start it over \(--steps\)" \
    "$DT" compare --quick --threads 1 --jobs 1 --seeds 1 --steps 500 --tasks recall --data "$CORPUS" --out "$R"
expect_status "a resume on other data" 1 "planned with data_fingerprint .*\(--data/--tokens\)" \
    "$DT" compare --quick --threads 1 --jobs 1 --seeds 1 --steps 400 --tasks recall --data "$S/plan.json" --out "$R"
check "the plan is unchanged" cmp "$R/compare.json" "$S/plan.json"
expect_ok "--force starts it over with other options" "$DT" compare --quick --quiet --threads 1 --seeds 1 \
    --steps 8 --tasks none --data "$CORPUS" --out "$R" --force
check "the plan is the new one" grep -q '"steps":[[:space:]]*8,' "$R/compare.json"
check "so is every run" test "$(wc -l <"$R/diff/metrics.jsonl")" = 8 -a "$(wc -l <"$R/transformer/metrics.jsonl")" = 8
# started over again and stopped in its first run: the report of the comparison it replaces is gone, and so is
# a checkpoint of it a kill left staged in a run not started yet (a resume would continue that run)
mkdir -p "$R/transformer/.next" && cp "$R/transformer/train_state.json" "$R/transformer/.next/"
"$DT" compare --quick --quiet --threads 1 --jobs 1 --seeds 1 --steps 400 --tasks none --data "$CORPUS" --out "$R" \
    --force >/dev/null 2>"$S/r.err" </dev/null &
pid=$!
past_old() { # a checkpoint of the new run: past the 8 steps of the replaced one, before its last
    local st
    st=$(grep -o '"step":[[:space:]]*[0-9]*' "$R/diff/train_state.json" 2>/dev/null | grep -o '[0-9]*$')
    [ -n "$st" ] && [ "$st" -gt 8 ] && [ "$st" -lt 400 ]
}
if wait_for $pid past_old; then pass; else fail "--force: the new run was not caught in training"; fi
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc -eq 9 ]; then pass; else fail "--force, SIGINT: exit status $rc, not 9: $(cat "$S/r.err")"; fi
check "no report of the replaced comparison is left" test ! -e "$R/REPORT.md" -a ! -e "$R/report.json"
check "nor its staged checkpoint" test ! -e "$R/transformer/.next" -a ! -e "$R/transformer/train_state.json"

# ---------------------------------------------------------------- --quick --needle

N=$S/needle
# the runs train on windows of --seq and the paper scores retrieval within the trained context: a window too
# short for one needle and its question (101 bytes of this corpus) is refused before anything is written
expect_status "compare --quick --needle: 64-byte windows hold no needle sample" 1 \
    "needle: seq 64 cannot hold a test sample of one needle and one query \(up to 101 bytes\).* seq 101 or more is needed \(--seq, --needle\)$" \
    "$DT" compare --quick --needle --quiet --threads 1 --seeds 1 --tasks none --data "$CORPUS" --out "$N"
check "and writes nothing" test ! -e "$N"
expect_ok "compare --quick --needle --seq 128" "$DT" compare --quick --needle --quiet --threads 1 --seeds 1 \
    --tasks none --seq 128 --data "$CORPUS" --out "$N"
check "needle test set" test -s "$N/needle/test.jsonl"
out_has "REPORT.md says the needle samples are within the training window" "$N/REPORT.md" \
    "Its test samples take up to 12[0-9] bytes, within the training window of 128"
if [ -n "$PY" ]; then
    # the longest context whose test samples fit the training window of 128 bytes (it was the tiny preset's 256
    # positions, which the 64- or 128-byte windows never trained), recorded in compare.json
    check "the byte-level needle set fills the training window" "$PY" -c '
import json, sys
lengths = [json.loads(l)["text_length"] for l in open(sys.argv[1] + "/needle/test.jsonl")]
assert max(lengths) <= 128 and max(lengths) >= 120, lengths
ns = json.load(open(sys.argv[1] + "/report.json"))["needle_set"]
assert ns["longest_test_sample"] == max(lengths) and ns["within_training_window"] is True, ns
n, plan = json.load(open(sys.argv[1] + "/needle/needle.json")), json.load(open(sys.argv[1] + "/compare.json"))
assert plan["needle_set"] == {"contexts": n["contexts"], "needles": n["needles"], "queries": n["queries"],
                              "train": n["train"], "test": n["test"]}, (plan["needle_set"], n)
' "$N"
fi
check "training text with the needle set" test -s "$N/train.txt"
# the needle samples first, the corpus after them: dt_train holds out the text's tail, which must
# be the corpus's (the samples were once appended, and the held-out loss was measured on them)
check "train.txt starts with the needle set's samples" \
    cmp -n "$(wc -c <"$N/needle/train.txt")" "$N/needle/train.txt" "$N/train.txt"
check "train.txt ends with the corpus" \
    cmp <(tail -c "$(wc -c <"$CORPUS")" "$N/train.txt") "$CORPUS"
out_has "REPORT.md has the retrieval tables" "$N/REPORT.md" "exact-match accuracy, all queries \| 0.85 \| 0.55" \
    "answer share \(mean over layers\) \| 0.27–0.40 \| 0.03–0.09" \
    "\| f32: needle exact match \| — \| — \| [0-9.]+ \| [0-9.]+ \|" "\| w8a8-smooth: needle exact match \|"
if [ -n "$PY" ]; then
    check "report.json has needle and allocation numbers" "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
for m in r["runs"]:
    assert m["needle"]["total"] > 0 and "answer_share" in m["allocation"]
    for row in m["weight_quantisation"]:
        assert row["needle_total"] > 0 and 0 <= row["needle_accuracy"] <= 1, row
assert "diff" in r["summary"]["needle_accuracy_w8a8"] and "transformer" in r["summary"]["needle_accuracy_w8a8"]
# --tasks none: no task batch was trained, as compare.json says (report.json said the default 0.95)
assert r["tasks"] == [] and r["task_ratio"] == 0, (r["tasks"], r["task_ratio"])
assert json.load(open(sys.argv[2]))["task_ratio"] == 0
' "$N/report.json" "$N/compare.json"
fi

# ---------------------------------------------------------------- real vocabularies

if [ -n "$PY" ]; then
    HERE=$(cd "$(dirname "$0")" && pwd)
    check "make a BPE tokenizer" "$PY" "$HERE/make_bpe_tokenizer.py" "$CORPUS" "$S/tok" 200
    B=$S/bpe
    expect_ok "compare --tokenizer --needle" "$DT" compare --quick --quiet --threads 1 --seeds 1 --steps 4 \
        --seq 128 --tokenizer "$S/tok" --needle --data "$CORPUS" --out "$B"
    # the scaling sizes' parameters are their trained models' (the tokenizer's vocabulary), not the preset's
    expect_ok "compare --tokenizer --scaling small" "$DT" compare --quick --quiet --threads 1 --seeds 1 --steps 4 \
        --tasks none --tokenizer "$S/tok" --data "$CORPUS" --out "$S/bpe_scaling" --scaling small
    check "the BPE scaling size counts its vocabulary's parameters" "$PY" -c '
import json, sys
bpe, byte = (json.load(open(p))["sizes"] for p in sys.argv[1:3])
assert bpe[1]["preset"] == "small" and byte[1]["preset"] == "small"
# 457 tokens against 256: the embedding and (untied) LM head grow by 201 rows of hidden_size each
d = bpe[1]["diff_params"] - byte[1]["diff_params"]
assert d > 0 and d % 201 == 0, (bpe[1], byte[1])
assert bpe[1]["transformer_params"] - byte[1]["transformer_params"] == d, (bpe[1], byte[1])
# the fit'"'"'s size leaves them out (as `difftrans study` and `analyze scaling` count): the same under either vocabulary
for k in ("diff", "transformer"):
    n = bpe[1][k + "_nonembedding_params"]
    assert n == byte[1][k + "_nonembedding_params"] and 0 < n < bpe[1][k + "_params"] - d, (bpe[1], byte[1])' \
        "$S/bpe_scaling/report.json" "$S/scaling/report.json"
    # the held-out text in bytes as well as tokens: the last tenth of the corpus's ids, decoded (the same
    # tokenizer through the CLI), and bits per byte from them
    "$DT" tokenizer encode --tokenizer "$S/tok" <"$CORPUS" | tr -s ' \n' '\n' | grep . >"$S/ids.txt"
    n=$(wc -l <"$S/ids.txt")
    tail_n=$((n - (n - n / 10)))
    tail_bytes=$(tail -n "$tail_n" "$S/ids.txt" | tr '\n' ' ' | "$DT" tokenizer decode --tokenizer "$S/tok" \
        --skip-special | wc -c)
    check "report.json: the held-out text in tokens and in bytes, and bits per byte" "$PY" -c '
import json, math, sys
r = json.load(open(sys.argv[1]))
tokens, nbytes = int(sys.argv[2]), int(sys.argv[3])
assert r["unit"] == "token" and r["heldout_tokens"] == tokens and r["heldout_bytes"] == nbytes, (r["heldout_tokens"],
    r["heldout_bytes"], tokens, nbytes)
assert abs(r["bytes_per_token"] - nbytes / tokens) < 1e-12
for m in r["runs"]:
    want = m["training"]["final_val_loss"] / math.log(2) / (nbytes / tokens)
    assert abs(m["final_val_bits_per_byte"] - want) < 1e-6 * want, (m["final_val_bits_per_byte"], want)
b = json.load(open(sys.argv[4])) # bytes: one per token
assert b["unit"] == "byte" and b["heldout_bytes"] == b["heldout_tokens"] and b["bytes_per_token"] == 1
for m in b["runs"]:
    assert abs(m["final_val_bits_per_byte"] - m["training"]["final_val_loss"] / math.log(2)) < 1e-9
' "$S/bpe_scaling/report.json" "$tail_n" "$tail_bytes" "$S/scaling/report.json"
    out_has "REPORT.md gives the bytes and bits per byte" "$S/bpe_scaling/REPORT.md" \
        "validation split, $tail_n tokens, $tail_bytes bytes as the tokenizer decodes them" \
        "\| final validation loss \(bits/byte\) \| — \| — \| [0-9.]+ \| [0-9.]+ \|"
    # the needle set in the runs' tokens, within their 128-token training window
    check "compare --tokenizer --needle: the needle set fills the training window in its tokens" "$PY" -c '
import json, subprocess, sys
most = 0
for line in open(sys.argv[1] + "/needle/test.jsonl"):
    ids = subprocess.run([sys.argv[2], "tokenizer", "encode", "--tokenizer", sys.argv[3]],
                         input=json.loads(line)["text"], capture_output=True, text=True, check=True).stdout.split()
    most = max(most, len(ids))
assert 112 <= most <= 128, most
assert json.load(open(sys.argv[1] + "/compare.json"))["needle_set"]["contexts"] == \
    json.load(open(sys.argv[1] + "/needle/needle.json"))["contexts"]
' "$B" "$DT" "$S/tok"
    check "its needle.json records the runs it was sized for" "$PY" -c '
import json, re, sys
m = json.load(open(sys.argv[1] + "/needle/needle.json"))["model"]
assert m["path"] == sys.argv[1] + "/diff" and m["max_position_embeddings"] == 256, m
assert re.fullmatch("[0-9a-f]{16}", m["tokenizer_fingerprint"]), m' "$B"
    expect_ok "needle eval of a run on it" "$DT" needle eval "$B/transformer" --data "$B/needle" --quiet --threads 1
    check "says nothing of its sizing" test ! -s "$S/last.err"
    # a resume takes the set compare.json records (the runs trained on it), and a compare.json from before the
    # record keeps the byte sizing its runs trained on
    BPE_RUN=(compare --quick --quiet --threads 1 --seeds 1 --steps 4 --seq 128 --tokenizer "$S/tok" --needle
        --data "$CORPUS")
    cp -r "$B" "$S/bpe_planned"
    "$PY" -c '
import json, sys
p = json.load(open(sys.argv[1])); p["needle_set"].update(contexts=[150], needles=3, queries=1)
json.dump(p, open(sys.argv[1], "w"))' "$S/bpe_planned/compare.json"
    # a set planned when sets filled the models' 256 positions: kept, and said to pass the 128-token window
    expect_ok "a resume keeps compare.json's needle set" "$DT" "${BPE_RUN[@]}" --out "$S/bpe_planned"
    out_has "and says it passes the training window" "$S/bpe_planned/REPORT.md" \
        "Its test samples take up to 1[3-9][0-9] tokens, more than the training window of 128: the positions past it"
    check "its needle set is the planned one" "$PY" -c '
import json, sys
p = json.load(open(sys.argv[1] + "/compare.json"))["needle_set"]
n = json.load(open(sys.argv[1] + "/needle/needle.json"))
assert (n["contexts"], n["needles"], n["queries"]) == (p["contexts"], p["needles"], p["queries"]), (n, p)
' "$S/bpe_planned"
    cp -r "$B" "$S/bpe_old"
    "$PY" -c '
import json, sys
p = json.load(open(sys.argv[1])); del p["needle_set"]; json.dump(p, open(sys.argv[1], "w"))' "$S/bpe_old/compare.json"
    expect_ok "a resume of a comparison planned before compare.json recorded its needle set" "$DT" "${BPE_RUN[@]}" \
        --out "$S/bpe_old"
    out_has "it keeps the set its runs trained on" "$S/bpe_old/REPORT.md" \
        "ours uses 160-byte contexts, 4 needles, 1 query" "needle set: .* \(context 160 bytes, 4 needles, 1 query\)" \
        "Its test samples take up to [0-9]+ tokens, more than the training window of 128: the positions past it"
    check "and its plan as it was" test "$(grep -c needle_set "$S/bpe_old/compare.json")" = 0
    check "a set sized for no model" grep -q '"model":[[:space:]]*null' "$S/bpe_old/needle/needle.json"
    expect_ok "--force replans it" "$DT" "${BPE_RUN[@]}" --out "$S/bpe_old" --force
    check "with the fitted set" cmp "$S/bpe_old/needle/test.jsonl" "$B/needle/test.jsonl"
    "$PY" -c '
import json, sys
p = json.load(open(sys.argv[1])); p["needle_set"]["contexts"] = [900]; json.dump(p, open(sys.argv[1], "w"))' \
        "$S/bpe_old/compare.json"
    expect_status "a planned needle set longer than the models' positions" 1 \
        "compare.json plans 900-byte needle contexts, whose test samples take up to [0-9]+ tokens, .*256 positions; restart starts the comparison over with a set that fits \(--force\)" \
        "$DT" "${BPE_RUN[@]}" --out "$S/bpe_old"
    check "every run carries the tokenizer" cmp "$B/diff/tokenizer.json" "$S/tok/tokenizer.json"
    check "the baseline too" cmp "$B/transformer/tokenizer.json" "$S/tok/tokenizer.json"
    out_has "REPORT.md counts tokens" "$B/REPORT.md" "vocabulary: the BPE tokenizer of" "nats/token" \
        "128 tokens = 4096 training tokens per run" "## Multi-needle retrieval"
    out_has "REPORT.md has the tasks, in tokens" "$B/REPORT.md" "## Tasks learned in training" \
        "a query every 3 tokens" "every symbol of the formats below is one token" "### recall" "### depth" \
        "### icl" "\| length 64, K = 2 \|" "### Learning curves"
    check "report.json: BPE runs of the tokenizer's vocabulary, needle, allocation and tasks scored" "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["tokenizer"].endswith("tok") and r["unit"] == "token", (r.get("tokenizer"), r.get("unit"))
cfg = json.load(open(sys.argv[2]))
assert cfg["vocab_size"] == 457, cfg["vocab_size"]
# make_bpe_tokenizer.py gives byte b the id b: space and newline are their GPT-2 stand-ins
assert r["task_symbols"][" "] == 32 and r["task_symbols"]["\n"] == 10 and r["task_symbols"]["@"] == 64
assert len(r["task_symbols"]) == 83 and r["tasks"] == ["recall", "depth", "icl"]
for m in r["runs"]:
    assert m["needle"]["total"] > 0 and 0 <= m["allocation"]["answer_share"] <= 1
    assert set(m["tasks"]) == {"recall", "depth", "icl"}, m["tasks"]
    for t in m["tasks"].values():
        assert t["total"] > 0 and 0 <= t["accuracy"] <= 1, t
    assert len(m["learning_curve"]) >= 1 and "depth" in m["learning_curve"][-1]
' "$B/report.json" "$B/diff/config.json"
    expect_ok "tokenize for compare --tokens" "$DT" tokenize --tokenizer "$S/tok" --data "$CORPUS" --out "$S/ds" \
        --documents line --val-fraction 0.1 --quiet
    expect_ok "compare --tokens" "$DT" compare --quick --quiet --threads 1 --seeds 1 --steps 4 --tokens "$S/ds" \
        --tasks recall --out "$S/bpe_tokens"
    check "its runs trained on the dataset" test -f "$S/bpe_tokens/diff/tokenizer.json"
    check "report.json: the val split in tokens and bytes (its documents' text, no end-of-document tokens)" "$PY" -c '
import json, sys
r, d = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert r["heldout_tokens"] == d["splits"]["val"]["tokens"], (r["heldout_tokens"], d["splits"]["val"])
assert r["heldout_tokens"] - d["splits"]["val"]["documents"] < r["heldout_bytes"] < d["bytes"], r["heldout_bytes"]
' "$S/bpe_tokens/report.json" "$S/ds/dataset.json"
    out_has "with the recall task in tokens" "$S/bpe_tokens/REPORT.md" "### recall" "a query every 3 tokens"
    expect_fail "a tokenizer without a token for a task symbol" "the task symbol '.n' .newline. has no token.*metaspace_first.json|metaspace_first.json.*the task symbol '.n'" \
        "$DT" compare --quick --tokenizer "$HERE/tokenizer/fixtures/metaspace_first.json" --data "$CORPUS" --out "$S/x"
    expect_fail "--needle with --tokens" "--needle: the needle set is made from text" \
        "$DT" compare --quick --needle --tokens "$S/ds" --out "$S/x"
    expect_fail "--tokenizer with --tokens" "--tokenizer: the token dataset" \
        "$DT" compare --quick --tokenizer "$S/tok" --tokens "$S/ds" --out "$S/x"
    expect_fail "a missing tokenizer" "nowhere" \
        "$DT" compare --quick --tokenizer "$S/nowhere" --data "$CORPUS" --out "$S/x"
fi

# ---------------------------------------------------------------- refusals

expect_fail "missing --data" "--data" "$DT" compare --quick --out "$S/x"
expect_fail "missing --out" "--out" "$DT" compare --quick --data "$CORPUS"
expect_fail "bad --steps" "--steps 'abc'" "$DT" compare --quick --steps abc --data "$CORPUS" --out "$S/x"
expect_fail "zero --steps" "--steps 0" "$DT" compare --quick --steps 0 --data "$CORPUS" --out "$S/x"
expect_fail "missing data file" "$S/nope.txt" "$DT" compare --quick --data "$S/nope.txt" --out "$S/x"
expect_fail "unknown preset" "huge" "$DT" compare --quick --preset huge --data "$CORPUS" --out "$S/x"
expect_fail "--seq beyond the context" "seq 100000" "$DT" compare --quick --seq 100000 --data "$CORPUS" --out "$S/x"
expect_fail "--task-ratio without tasks" "--task-ratio 0.5: no task is mixed into training \(--tasks none\)" \
    "$DT" compare --quick --tasks none --task-ratio 0.5 --data "$CORPUS" --out "$S/x"
printf 'A short corpus. Only a few words here.\n\nAnother paragraph.\n' >"$S/short.txt"
expect_status "a corpus shorter than one window" 1 "short.txt: 54 training tokens, fewer than seq \+ 1 = 65$" \
    "$DT" compare --quick --data "$S/short.txt" --out "$S/x"
expect_fail "unexpected argument" "unexpected argument 'extra'" "$DT" compare --quick --data "$CORPUS" --out "$S/x" extra
# a directory that holds an earlier comparison or a study is not written over by mistake
# (one from before comparisons resumed: a report and no compare.json)
mkdir -p "$S/old" && cp "$N/report.json" "$S/old/"
expect_fail "--out holding an earlier comparison" "holds an earlier comparison.*--force" \
    "$DT" compare --quick --data "$CORPUS" --out "$S/old"
check "the earlier report is unchanged" cmp "$N/report.json" "$S/old/report.json"
mkdir -p "$S/a_study" && echo '{}' >"$S/a_study/study.json"
expect_fail "--out holding a study" "holds a study" "$DT" compare --quick --data "$CORPUS" --out "$S/a_study" --force
expect_fail "study into a comparison's directory" "holds a comparison's report" \
    "$DT" study --tokens "$S/nope" --out "$N"
# nor a model's directory (a training run's): neither grows its runs inside a checkpoint
expect_ok "a model's directory" "$DT" init --out "$S/a_model" --preset tiny
expect_status "--out holding a model" 1 "a_model: holds a model \(config.json\)" \
    "$DT" compare --quick --data "$CORPUS" --out "$S/a_model" --force
expect_status "study into a model's directory" 1 "a_model: holds a model \(config.json\)" \
    "$DT" study --tokens "$S/nope" --out "$S/a_model"
check "nothing was written into the model's directory" test "$(ls "$S/a_model" | tr '\n' ' ')" = \
    "config.json difftrans_tokenizer.json generation_config.json model.safetensors "

finish cli_compare
