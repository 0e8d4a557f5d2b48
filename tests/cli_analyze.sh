#!/usr/bin/env bash
# cli_analyze.sh — `difftrans analyze outliers|quantize|allocation|training`, end to end.
#
# usage: bash tests/cli_analyze.sh PATH_TO_difftrans SCRATCH_DIR
#
#   on a fresh `init --preset tiny` pair (DIFF and Transformer), the GPL-3 text, a tiny
#   `needle generate` set and a 5-step `train` run: every kind prints its table (one row per
#   model, both architectures) and writes its JSON (parsed with python3 when there is one);
#   bad inputs fail with status 1 and a message naming the argument or file, leaving no output file.
# Prints a summary and exits 1 when any check failed.
set -u

TMO=60
. "$(dirname "$0")/cli_lib.sh" "$@"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=PASSIVE

# json_ok DESC FILE PYTHON_EXPR — the file is JSON and the expression (over `j`) is true.
json_ok() {
    local desc=$1 file=$2 expr=$3
    if [ ! -s "$file" ]; then fail "$desc" "$file missing or empty"; return; fi
    if [ -z "$PY" ]; then pass; return; fi
    if "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($expr) else 1)" "$file" 2>"$S/py.err"; then
        pass
    else
        fail "$desc" "expression failed: $expr" "$(head -c 600 "$S/py.err" | tr '\n' '|')" "json: $(head -c 600 "$file" | tr '\n' '|')"
    fi
}

# ---------------------------------------------------------------- setup

expect_ok "init DIFF" "$DT" init --out "$S/diff" --arch diff --preset tiny
expect_ok "init Transformer" "$DT" init --out "$S/base" --arch transformer --preset tiny
expect_ok "needle generate" "$DT" needle generate --corpus "$CORPUS" --out "$S/needle" --context 128 --needles 2 \
    --queries 1 --depths 0,1 --train 0 --test 4
expect_ok "train 5 steps" "$DT" train --data "$CORPUS" --out "$S/run" --preset tiny --steps 5 --batch 2 --seq 32 \
    --eval-interval 2 --eval-batches 1 --quiet
M=("$S/diff" "$S/base")

# ---------------------------------------------------------------- the four kinds

expect_ok "--help" "$DT" analyze --help && out_has "--help lists the kinds" "$S/last.out" outliers quantize allocation training

expect_ok "outliers" "$DT" analyze outliers "${M[@]}" --data "$CORPUS" --seq 64 --batches 2 --json "$S/o.json" &&
    out_has "outliers table" "$S/last.out" "logit top1" "hidden top10" "diff +DIFF" "base +Transformer"
json_ok "outliers JSON" "$S/o.json" \
    "len(j['models'])==2 and j['models'][0]['attention_logits']['top1']>=j['models'][0]['attention_logits']['top10']>=j['models'][0]['attention_logits']['median']>0 and len(j['models'][1]['layer_hidden_max'])==3 and len(j['models'][0]['layer_logit_max'])==2"

expect_ok "quantize" "$DT" analyze quantize "${M[@]}" --data "$CORPUS" --seq 64 --batches 2 --bits 8,2 \
    --needle "$S/needle" --max-samples 2 --json "$S/q.json" &&
    out_has "quantize table" "$S/last.out" "per head map" "needle acc" "DIFF +none" "DIFF +8" "Transformer +2"
json_ok "quantize JSON" "$S/q.json" \
    "j['scale']=='per_head_map' and [r['bits'] for r in j['models'][0]['rows']]==[0,8,2] and j['models'][1]['rows'][0]['needle_total']==2 and 0<=j['models'][0]['rows'][2]['accuracy']<=1"
# a q8_0 checkpoint's row of unquantised logits is not an fp32 model's: it says what stays quantised
expect_ok "quantize q8_0 fixture" "$DT" quantize "$S/diff" "$S/diff_q8" --scheme q8_0
expect_ok "quantize on a q8_0 model" "$DT" analyze quantize "$S/diff_q8" --data "$CORPUS" --seq 32 --batches 1 --bits 4 &&
    out_has "its rows say what is quantised" "$S/last.out" "diff_q8: weights q8_0 in every row, the logits alone" \
        "diff_q8 +DIFF +none \|" &&
    check "no row says fp32" bash -c '! grep -q fp32 "$1"' _ "$S/last.out"
expect_ok "quantize --per-row" "$DT" analyze quantize "$S/diff" --data "$CORPUS" --seq 32 --batches 1 --bits 4 --per-row &&
    out_has "--per-row says so" "$S/last.out" "per query row"

expect_ok "allocation" "$DT" analyze allocation "${M[@]}" --needle "$S/needle" --max-samples 3 --json "$S/a.json" &&
    out_has "allocation table" "$S/last.out" "answer" "noise" "3 sample" "diff +DIFF" "base +Transformer"
json_ok "allocation JSON" "$S/a.json" \
    "j['models'][0]['rows']==3 and j['models'][0]['heads']==2 and j['models'][1]['heads']==4 and all(abs(x-1)<1e-4 for x in j['models'][1]['layer_row_sum']) and all(abs(r-(1-l))<1e-4 for r,l in zip(j['models'][0]['layer_row_sum'], j['models'][0]['lambda']))"

expect_ok "training" "$DT" analyze training "$S/run" --json "$S/t.json" &&
    out_has "training table" "$S/last.out" "spikes" "run +DIFF +5 " "L0 "
json_ok "training JSON" "$S/t.json" \
    "j['runs'][0]['steps_logged']==5 and j['runs'][0]['spikes']==0 and len(j['runs'][0]['lambda_first'])==2 and j['runs'][0]['final_val_loss'] is not None"

expect_ok "icl" "$DT" analyze icl "$S/diff" "$S/base" --shots 4 --permutations 3 --queries 6 --json "$S/i.json" &&
    out_has "icl table" "$S/last.out" "4 shots, 3 orders" "DIFF" "Transformer" "spread"
json_ok "icl JSON" "$S/i.json" \
    "len(j['models'])==2 and all(len(m['accuracy'])==3 and 0<=m['min']<=m['mean']<=m['max']<=1 for m in j['models'])"
# the table's spread column is in the JSON too
json_ok "icl JSON: spread" "$S/i.json" "all(abs(m['spread']-(m['max']-m['min']))<1e-12 for m in j['models'])"
expect_ok "icl in one order" "$DT" analyze icl "$S/diff" --shots 2 --permutations 1 --queries 2 &&
    out_has "one order is singular" "$S/last.out" "^analyze icl: 2 shots, 1 order, 2 queries" &&
    out_has "its progress too" "$S/last.err" "\(1 order × 2 queries\)"
expect_ok "scaling on one run" "$DT" analyze scaling "$S/run" --json "$S/s.json" &&
    out_has "scaling table" "$S/last.out" "log\(val loss\)" "not available" "run\(s\): none \(needs runs at >= 2 sizes\)" &&
    { if grep -qw nan "$S/last.out"; then fail "scaling on one run" "prints nan"; else pass; fi; } &&
    # the run's path ($S/run, often past 28 characters) widens the first column instead of pushing the row out of line
    { if awk 'NR == 2 { h = index($0, " arch") } NR == 3 { r = index($0, " " $2 " ") } END { exit !(h > 0 && h == r) }' \
        "$S/last.out"; then pass; else fail "scaling table" "columns out of line: $(sed -n 2,3p "$S/last.out")"; fi; }
json_ok "scaling JSON" "$S/s.json" "len(j['runs'])==1 and j['diff_params_fraction'] is None and j['runs'][0]['params']>0
    and j['runs'][0]['tokens']==5*2*32 and j['one_token_budget'] is True"
expect_fail "scaling on a model without metrics" "metrics" "$DT" analyze scaling "$S/diff"
# a model file (a GGUF one, say) where a run directory belongs: said so, not "Not a directory"
expect_status "scaling on a file" 1 "run/config.json: is a file; analyze scaling reads training run directories" \
    "$DT" analyze scaling "$S/run" "$S/run/config.json"
expect_status "training on a file" 1 "metrics.jsonl: is a file; analyze training reads training run directories" \
    "$DT" analyze training "$S/run/metrics.jsonl"
# the same run under another vocabulary (a tokenizer.json of its own): its loss per token is another measure
rm -rf "$S/run_bpe" && cp -r "$S/run" "$S/run_bpe" && rm -f "$S/run_bpe/difftrans_tokenizer.json" &&
    sed -i -E 's/"vocab_size":[[:space:]]*256/"vocab_size": 300/' "$S/run_bpe/config.json" &&
    "$DT" tokenizer train --data "$CORPUS" --vocab-size 300 --out "$S/run_bpe" >/dev/null 2>&1
expect_fail "scaling over runs of two vocabularies" "run_bpe read text differently.*share one vocabulary" \
    "$DT" analyze scaling "$S/run" "$S/run_bpe"
# planted runs at two sizes: DIFF's loss falls, the Transformer's rises; the fraction exists (DIFF's curve reaches
# the Transformer's loss) but there is no Transformer curve to compare with, and the output says so
plant_run() { # plant_run DIR ARCH PRESET LAYERS VAL_LOSS
    "$DT" init --out "$1" --arch "$2" --preset "$3" >/dev/null 2>&1
    local lam
    lam=$(printf '0.5,%.0s' $(seq 1 "$4"))
    printf '{"step":1,"train_loss":5.0,"val_loss":%s,"lr":0.001,"grad_norm":1.0,"lambda":[%s]}\n' "$5" "${lam%,}" \
        >"$1/metrics.jsonl"
}
plant_run "$S/sc_d1" diff tiny 2 5.84
plant_run "$S/sc_d2" diff small 4 5.70
plant_run "$S/sc_t1" transformer tiny 2 5.63
plant_run "$S/sc_t2" transformer small 4 5.84
expect_ok "scaling with a baseline whose loss rose with size" "$DT" analyze scaling "$S"/sc_d1 "$S"/sc_d2 "$S"/sc_t1 \
    "$S"/sc_t2 --json "$S/sc.json" && out_has "the fraction is not read as the paper's claim" "$S/last.out" \
    "b 0\.0176" "= 0\.13 of the baseline's" "^but the baseline's loss did not fall with size \(b 0\.0176\): there is no scaling"
# the size is the non-embedding count, as `difftrans study` fits it: tiny's untied embedding and LM head (256 x 64
# each) are left out, and the slope is that of log(loss) on log(N) through those counts
out_has "the table and the fit name N" "$S/last.out" "N = non-embedding parameters" "sc_d1 +DIFF +100800 +133568 "
json_ok "scaling JSON: the fit is over the non-embedding counts" "$S/sc.json" "j['size']=='nonembedding_params'
    and all(r['params'] - r['nonembedding_params'] == (32768 if r['run'].endswith('1') else 65536) for r in j['runs'])
    and abs(__import__('math').log(5.70 / 5.84) / __import__('math').log(804480 / 100800) - j['fit_diff']['b']) < 1e-9"
# the fraction's terms, as the text prints them: the baseline's largest N and loss, and the DIFF N for that loss
json_ok "scaling JSON: what the fraction is taken at" "$S/sc.json" "j['baseline_nonembedding_params']==803968
    and abs(j['baseline_val_loss']-5.84)<1e-9 and j['baseline_runs']==1
    and abs(j['diff_nonembedding_params']/803968-j['diff_params_fraction'])<1e-12"
json_ok "scaling JSON on one run: no fraction, no terms" "$S/s.json" "j['diff_nonembedding_params'] is None
    and j['baseline_runs']==(0 if j['runs'][0]['arch']=='DIFF' else 1)"
plant_run "$S/sc_t2" transformer small 4 5.50
expect_ok "scaling with both losses falling" "$DT" analyze scaling "$S"/sc_d1 "$S"/sc_d2 "$S"/sc_t1 "$S"/sc_t2
check "then no such warning" bash -c '! grep -q "did not fall" "$1"' _ "$S/last.out"
# a DIFF curve and a baseline of one size: the fraction exists, the baseline's slope does not (it printed "b nan")
expect_ok "scaling with the baseline at one size" "$DT" analyze scaling "$S"/sc_d1 "$S"/sc_d2 "$S"/sc_t1 &&
    out_has "the baseline's one size is said" "$S/last.out" "^but the baseline's runs are of one size" &&
    check "no nan" bash -c '! grep -qiw nan "$1"' _ "$S/last.out"
expect_ok "scaling without a DIFF curve" "$DT" analyze scaling "$S"/sc_d1 "$S"/sc_t1 "$S"/sc_t2 &&
    out_has "what the fraction needs" "$S/last.out" "not available \(needs DIFF runs at >= 2 sizes"
json_ok "scaling JSON: runs without train_state.json have no known budget" "$S/sc.json" \
    "j['one_token_budget'] is None and all(r['tokens'] is None for r in j['runs'])"
# a curve of loss against size is one of runs trained on one budget; another budget is said, naming the runs
for r in sc_d1 sc_d2 sc_t1 sc_t2; do printf '{"batch": 4, "seq": 64}\n' >"$S/$r/train_state.json"; done
expect_ok "scaling with one token budget" "$DT" analyze scaling "$S"/sc_d1 "$S"/sc_d2 "$S"/sc_t1 "$S"/sc_t2 \
    --json "$S/sc1.json" && check "then no budget warning" bash -c '! grep -q "budget" "$1"' _ "$S/last.out"
json_ok "scaling JSON: one budget" "$S/sc1.json" "j['one_token_budget'] is True and all(r['tokens']==256 for r in j['runs'])"
printf '{"batch": 4, "grad_accum": 2, "seq": 64}\n' >"$S/sc_d1/train_state.json"
expect_ok "scaling over two token budgets" "$DT" analyze scaling "$S"/sc_d1 "$S"/sc_d2 "$S"/sc_t1 "$S"/sc_t2 \
    --json "$S/sc2.json" && out_has "the budgets are said, with their runs" "$S/last.out" "^but the runs' token budgets differ" \
    "sc_d1: 512 \(1 step × batch 4 × grad_accum 2 × seq 64\); [^ ]*sc_d2 and 2 other runs: 256 \(1 step × batch 4 × seq 64\)\."
json_ok "scaling JSON: two budgets" "$S/sc2.json" "j['one_token_budget'] is False
    and [r['tokens'] for r in j['runs']]==[512,256,256,256]"
printf '{"batch": 4, "seq": 0}\n' >"$S/sc_d1/train_state.json"
expect_status "scaling over a run whose train_state.json is corrupt" 2 'sc_d1/train_state.json: "seq" is not an integer' \
    "$DT" analyze scaling "$S"/sc_d1 "$S"/sc_d2
# one curve per kind through one model's runs: DIFF V2 is neither kind, an ablation is another model
expect_ok "train DIFF V2 5 steps" "$DT" train --data "$CORPUS" --out "$S/run_v2" --arch v2 --preset tiny --steps 5 \
    --batch 2 --seq 32 --eval-interval 5 --eval-batches 1 --quiet
# a V2 run's λ is per token and head: the table and the JSON say its logged value is a mean, a DIFF run's not
expect_ok "training on DIFF V2 and DIFF" "$DT" analyze training "$S/run_v2" "$S/run" --json "$S/t2.json" &&
    out_has "V2's λ is said to be a mean" "$S/last.out" "DIFF V2: λ_t is per token and head; each logged value is its mean" \
        "run_v2 +\(mean λ_t\) L0 " && check "the DIFF run's λ is not called a mean" bash -c \
        '! grep -E "/run +\(mean" "$1"' _ "$S/last.out"
json_ok "training JSON: V2's λ is a mean" "$S/t2.json" "'lambda_is' in j['runs'][0] and 'lambda_is' not in j['runs'][1]"
expect_status "scaling over a DIFF V2 run" 1 "run_v2: a DIFF V2 model \(difftrans_v2\); the scaling fit takes DIFF" \
    "$DT" analyze scaling "$S/run" "$S/run_v2"
expect_ok "train DIFF+ALiBi 5 steps" "$DT" train --data "$CORPUS" --out "$S/run_alibi" --ablation alibi --preset tiny \
    --steps 5 --batch 2 --seq 32 --eval-interval 5 --eval-batches 1 --quiet
expect_status "scaling over DIFF and DIFF+ALiBi runs" 1 "run_alibi is diffllama\+alibi but .*/run is diffllama" \
    "$DT" analyze scaling "$S/run" "$S/run_alibi"
expect_fail "icl with odd --shots" "shots 3: must be even.*--shots" "$DT" analyze icl "$S/diff" --shots 3
expect_fail "icl options do not apply elsewhere" "does not apply" "$DT" analyze training "$S/run" --shots 4

# ---------------------------------------------------------------- refusals

expect_fail "no kind" "expected a kind" "$DT" analyze
expect_fail "unknown kind" "unknown kind 'outlier'" "$DT" analyze outlier "$S/diff" --data "$CORPUS"
expect_fail "no model" "expected at least one MODEL_DIR" "$DT" analyze outliers --data "$CORPUS"
expect_fail "outliers without --data" "--data FILE.txt is required" "$DT" analyze outliers "$S/diff"
expect_fail "missing data file" "$S/nothere.txt" "$DT" analyze outliers "$S/diff" --data "$S/nothere.txt"
expect_fail "missing model" "$S/nomodel" "$DT" analyze outliers "$S/nomodel" --data "$CORPUS"
expect_fail "--seq beyond the model's context" "--seq 300: more than .*max_position_embeddings 256" \
    "$DT" analyze outliers "$S/diff" --data "$CORPUS" --seq 300
expect_fail "--seq not a number" "--seq 'x': not an integer" "$DT" analyze outliers "$S/diff" --data "$CORPUS" --seq x
expect_fail "--bits 0" "--bits 0: must be in 2..24" "$DT" analyze quantize "$S/diff" --data "$CORPUS" --bits 0
expect_status "--bits 1 (no level but zero)" 1 "--bits 1: must be in 2..24" \
    "$DT" analyze quantize "$S/diff" --data "$CORPUS" --bits 8,1
expect_fail "--bits empty item" "--bits '8,,4': empty" "$DT" analyze quantize "$S/diff" --data "$CORPUS" --bits 8,,4
printf 'tiny text\n' >"$S/short.txt"
expect_fail "a --calib too short is named as such" "--calib .*short\.txt: [0-9]+ tokens make only 0 calibration windows" \
    "$DT" analyze quantize "$S/diff" --data "$CORPUS" --calib "$S/short.txt" --schemes w8a8
expect_fail "--bits on outliers" "--bits does not apply to analyze outliers" \
    "$DT" analyze outliers "$S/diff" --data "$CORPUS" --bits 8
expect_fail "allocation without --needle" "--needle DIR is required" "$DT" analyze allocation "$S/diff"
expect_fail "allocation on a missing set" "$S/noneedle" "$DT" analyze allocation "$S/diff" --needle "$S/noneedle"
expect_fail "training on a missing run" "$S/norun" "$DT" analyze training "$S/norun"
mkdir -p "$S/badrun" && echo '{"step": 1, "nothing": 2}' >"$S/badrun/metrics.jsonl"
expect_fail "training on a malformed metrics file" "$S/badrun/metrics.jsonl:1: not a metrics line" \
    "$DT" analyze training "$S/badrun"
# lines that parse but lie: steps that do not count up, a gradient norm of inf (cJSON reads
# 1e999 so), λ for another number of layers than the run's config.json
LINE1='{"step":1,"train_loss":5.5,"grad_norm":4.8,"lambda":[0.2,0.3]}'
for bad in 'back {"step":1,"train_loss":5,"grad_norm":4.8,"lambda":[0.2,0.3]}|:2: step 1' \
    'inf {"step":2,"train_loss":5,"grad_norm":1e999,"lambda":[0.2,0.3]}|:2: not a metrics line' \
    'layers {"step":2,"train_loss":5,"grad_norm":4.8,"lambda":[0.2,0.3,0.4]}|:2: 3 λ values'; do
    name=${bad%% *} rest=${bad#* }
    mkdir -p "$S/lie_$name" && printf '%s\n%s\n' "$LINE1" "${rest%|*}" >"$S/lie_$name/metrics.jsonl"
    cp "$S/run/config.json" "$S/lie_$name/" # the tiny preset's 2 layers
    expect_fail "training on a metrics file that lies: $name" "lie_$name/metrics.jsonl${rest#*|}" \
        "$DT" analyze training "$S/lie_$name"
done
expect_ok "--json into a missing directory creates it" "$DT" analyze training "$S/run" --json "$S/nodir/x.json"
check "the JSON is there" test -s "$S/nodir/x.json"
expect_status "--json under a file" 3 "x.json/y.json: .*x.json exists and is not a directory" \
    "$DT" analyze training "$S/run" --json "$S/nodir/x.json/y.json"
expect_fail "a failing analysis writes no JSON" "$S/nomodel" \
    "$DT" analyze allocation "$S/diff" "$S/nomodel" --needle "$S/needle" --json "$S/fail.json"
if [ -e "$S/fail.json" ] || ls "$S"/*.tmp.* >/dev/null 2>&1; then fail "no partial JSON files left"; else pass; fi

# ---------------------------------------------------------------- summary

finish cli_analyze
