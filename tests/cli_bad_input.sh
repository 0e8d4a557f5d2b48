#!/usr/bin/env bash
# cli_bad_input.sh — every bad input to the difftrans CLI must be refused cleanly.
#
# usage: bash tests/cli_bad_input.sh PATH_TO_difftrans SCRATCH_DIR
#
# For each bad input (corrupt model.safetensors / config.json / difftrans_tokenizer.json /
# train_state.json / optimizer.safetensors, bad --input id files, bad --prompt-ids and
# --prompt, bad --data files, bad options) and each command that reads it (info, forward,
# generate, eval, export [--hf], train --resume, init/train --config), checks that
#   - the exit status is non-zero and not a crash or a signal (1..127), and no hang;
#   - stderr names the file or argument and the problem (case-insensitive regexes);
#   - no output is left behind: the --output / OUT_DIR path does not exist afterwards, a
#     failed `train --resume` changes nothing in its directory, and there are no *.tmp.*
#     files anywhere under SCRATCH_DIR.
# Corrupt files are made from a good `init --preset tiny` / tiny `train` checkpoint with
# python3 (struct + json only). Prints a summary; exits 1 when any check failed.
set -u

. "$(dirname "$0")/cli_lib.sh" "$@" # DT, S, PY, counters, pass/fail; expect_fail is redefined below
[ -n "$PY" ] || {
    echo "$0: python3 is needed to build the test files" >&2
    exit 2
}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
TMO=$((30 * ${DT_TEST_TIMEOUT_SCALE:-1})) # seconds before a command counts as hung (scaled on a loaded machine)
[ -n "${DT_ASAN:-}" ] && TMO=$((4 * TMO)) # sanitizer builds start and run several times slower
OUT=$S/out      # where outputs would go; must stay empty of them
mkdir -p "$OUT"

# Leftover temporaries from atomic writes anywhere in the scratch dir (removed once reported).
check_tmp_files() {
    local desc=$1 left
    left=$(find "$S" -name '*.tmp.*' 2>/dev/null)
    if [ -n "$left" ]; then
        echo "$left" | xargs rm -f
        echo "leftover temporary file(s): $(echo "$left" | tr '\n' ' ')"
    fi
}

# expect_fail DESC [-x PATH]... [REGEX]... -- CMD [ARGS...]
#   CMD must exit with a status in 1..127 within $TMO seconds, print something on stderr that
#   matches every REGEX (grep -iE), and leave no PATH given with -x.
expect_fail() {
    local desc=$1
    shift
    local pats=() absent=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        if [ "$1" = "-x" ]; then
            absent+=("$2")
            shift 2
        else
            pats+=("$1")
            shift
        fi
    done
    shift # --
    local errf=$S/.stderr outf=$S/.stdout problems=() rc p
    for p in "${absent[@]+"${absent[@]}"}"; do rm -rf "$p"; done
    timeout -k 5 "$TMO" "$@" >"$outf" 2>"$errf" </dev/null
    rc=$?
    if [ $rc -eq 0 ]; then
        problems+=("exit status 0 (expected a failure)")
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        problems+=("hung: killed after ${TMO}s (status $rc)")
    elif [ $rc -ge 128 ]; then
        problems+=("crashed: status $rc (signal $((rc - 128)))")
    fi
    if [ ! -s "$errf" ]; then
        problems+=("nothing on stderr")
    else
        for p in "${pats[@]+"${pats[@]}"}"; do
            grep -qiE -- "$p" "$errf" || problems+=("stderr does not match /$p/")
        done
    fi
    for p in "${absent[@]+"${absent[@]}"}"; do
        if [ -e "$p" ]; then
            problems+=("left output behind: $p")
            rm -rf "$p"
        fi
    done
    local tmp
    tmp=$(check_tmp_files "$desc")
    [ -n "$tmp" ] && problems+=("$tmp")
    if [ ${#problems[@]} -eq 0 ]; then
        pass
    else
        fail "$desc" "${problems[@]}" "command: ${*}" "status: $rc" "stderr: $(head -c 600 "$errf" | tr '\n' '|')"
    fi
}

# expect_ok DESC CMD [ARGS...] — status 0 (used to build the fixtures).
expect_ok() {
    local desc=$1
    shift
    timeout -k 5 "$TMO" "$@" >"$S/.stdout" 2>"$S/.stderr" </dev/null
    local rc=$?
    if [ $rc -eq 0 ]; then
        pass
    else
        fail "$desc" "command: $*" "status: $rc" "stderr: $(head -c 600 "$S/.stderr" | tr '\n' '|')"
    fi
    return $rc
}

# A checksum listing of a directory's files: a failed `train --resume` must not change it.
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r md5sum); }

# ---------------------------------------------------------------- fixtures

# edit.py JOBS — writes the corrupted copies listed in JOBS, one per line, fields separated by
# \x1f (one python start for all of them: interpreter starts are slow on some machines):
#   st  SRC DST OP ARGS...     a corrupted copy of a safetensors file
#   cfg SRC DST EDIT...        an edited copy of a config.json (KEY=JSON_VALUE or -KEY)
cat >"$S/edit.py" <<'EOF'
import json, struct, sys


def st_edit(src, dst, op, args):
    raw = open(src, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])

    def resize(name, nbytes):       # the tensor's bytes become nbytes; the tensors after it move, so
        b, e = header[name]["data_offsets"]  # the data stays covered exactly once (no hole, no overlap)
        d = nbytes - (e - b)
        if d < 0:
            del data[b + nbytes:e]
        else:
            data[e:e] = bytes(d)
        for k, t in header.items():
            if k not in ("__metadata__", name) and t["data_offsets"][0] >= e:
                t["data_offsets"] = [t["data_offsets"][0] + d, t["data_offsets"][1] + d]
        header[name]["data_offsets"] = [b, b + nbytes]

    def write_header():
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        open(dst, "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))

    if op == "truncate":            # N | hdr+K (K bytes into the data section) | -K (K bytes short)
        a = args[0]
        k = 8 + n + int(a[4:] or 0) if a.startswith("hdr") else (len(raw) + int(a) if a.startswith("-") else int(a))
        open(dst, "wb").write(raw[:k])
    elif op == "setlen":            # overwrite the 8-byte header length ("size" = the file size)
        v = len(raw) if args[0] == "size" else int(args[0])
        open(dst, "wb").write(struct.pack("<Q", v) + raw[8:])
    elif op == "rawheader":         # replace the header by this text (data kept)
        t = args[0].encode()
        open(dst, "wb").write(struct.pack("<Q", len(t)) + t + bytes(data))
    elif op == "dtype":             # NAME DTYPE
        header[args[0]]["dtype"] = args[1]
        write_header()
    elif op == "offsets":           # NAME BEGIN END: expressions in b, e (the old offsets), D (data size)
        b, e = header[args[0]]["data_offsets"]
        env = {"b": b, "e": e, "D": len(data)}
        header[args[0]]["data_offsets"] = [eval(args[1], env), eval(args[2], env)]
        write_header()
    elif op == "shape":             # NAME JSON_SHAPE [fix]: "fix" also resizes the offsets to match
        shape = json.loads(args[1])
        header[args[0]]["shape"] = shape
        if len(args) > 2:
            numel = 1
            for d in shape:
                numel *= d
            resize(args[0], 4 * numel)
        write_header()
    elif op == "duplicate":         # NAME: the entry appears twice in the header
        text = json.dumps(header, separators=(",", ":"))
        text = text[:-1] + "," + json.dumps(args[0]) + ":" + json.dumps(header[args[0]]) + "}"
        header.clear()
        t = text.encode() + b" " * (-len(text) % 8)
        open(dst, "wb").write(struct.pack("<Q", len(t)) + t + bytes(data))
    elif op == "metadata":          # JSON: replace __metadata__
        header["__metadata__"] = json.loads(args[0])
        write_header()
    elif op == "drop":              # NAME (its bytes go too)
        resize(args[0], 0)
        del header[args[0]]
        write_header()
    elif op == "setfloat":          # NAME INDEX VALUE (nan, inf, -inf or a number)
        b = header[args[0]]["data_offsets"][0] + 4 * int(args[1])
        struct.pack_into("<f", data, b, float(args[2]))
        write_header()
    else:
        raise SystemExit("edit.py: unknown st op " + op)


def cfg_edit(src, dst, edits):
    cfg = json.load(open(src))
    for a in edits:
        if a.startswith("-"):
            cfg.pop(a[1:], None)
        else:
            k, v = a.split("=", 1)
            cfg[k] = json.loads(v)
    json.dump(cfg, open(dst, "w"), indent=1)


for line in open(sys.argv[1], encoding="utf-8"):
    f = line.rstrip("\n").split("\x1f")[:-1]
    if f[0] == "st":
        st_edit(f[1], f[2], f[3], f[4:])
    else:
        cfg_edit(f[1], f[2], f[3:])
EOF

DATA=/usr/share/common-licenses/GPL-3
if [ ! -r "$DATA" ]; then
    DATA=$S/corpus.txt
    for i in $(seq 1 400); do
        echo "line $i: the quick brown fox jumps over the lazy dog; differential attention cancels noise."
    done >"$DATA"
fi
SMALL_TXT=$S/small.txt
head -c 2000 "$DATA" >"$SMALL_TXT"
IDS=$S/ids_ok.txt
printf '1 2 3 4 5 6 7 8\n9 10 11 12 13 14 15 16\n' >"$IDS"

# A good checkpoint that is also a training directory (so `train --resume` applies to it).
GOOD=$S/good
expect_ok "fixture: tiny training run" "$DT" train --preset tiny --data "$DATA" --out "$GOOD" --steps 2 --batch 2 \
    --seq 32 --threads 1 --quiet || {
    echo "cannot build the fixture checkpoint; stopping" >&2
    exit 1
}
expect_ok "fixture: good checkpoint loads (info)" "$DT" info "$GOOD"
expect_ok "fixture: good checkpoint runs forward" "$DT" forward "$GOOD" --input "$IDS" --output "$S/good_fw.safetensors" --threads 1
rm -f "$S/good_fw.safetensors"
GST=$GOOD/model.safetensors

# check_model_dir NAME DIR REGEX... — every command that loads a checkpoint must refuse DIR.
check_model_dir() {
    local name=$1 dir=$2
    shift 2
    expect_fail "$name: info" "$@" -- "$DT" info "$dir"
    expect_fail "$name: forward" -x "$OUT/fw.safetensors" "$@" -- \
        "$DT" forward "$dir" --input "$IDS" --output "$OUT/fw.safetensors" --threads 1
    expect_fail "$name: generate" "$@" -- "$DT" generate "$dir" --prompt-ids "1 2 3" -n 4 --threads 1
    expect_fail "$name: eval" "$@" -- "$DT" eval "$dir" --data "$SMALL_TXT" --seq 16 --batch 2 --threads 1
    expect_fail "$name: export" -x "$OUT/exp" "$@" -- "$DT" export "$dir" "$OUT/exp"
    expect_fail "$name: export --hf" -x "$OUT/exp_hf" "$@" -- "$DT" export "$dir" "$OUT/exp_hf" --hf
    [ -f "$dir/train_state.json" ] && resume_check "$name" "$dir" "$@"
}

# The corruption cases run in two phases: PHASE=build copies the good directory and queues the
# edit in $JOBS (edit.py then writes every corrupt file at once); PHASE=check runs the commands.
JOBS=$S/jobs.txt
: >"$JOBS"
job() { printf '%s\x1f' "$@" >>"$JOBS" && printf '\n' >>"$JOBS"; }
mkbad() { rm -rf "${S:?}/${1:?}" && cp -r "$GOOD" "$S/$1"; }

# st_case NAME REGEX OP ARGS... — model.safetensors corrupted by edit.py's OP.
st_case() {
    local name=$1 pat=$2
    shift 2
    if [ "$PHASE" = build ]; then
        mkbad "$name" && job st "$GST" "$S/$name/model.safetensors" "$@"
    else
        check_model_dir "$name" "$S/$name" "$name/model\.safetensors" "$pat"
    fi
}

# cfg_case NAME REGEX EDIT... — config.json edited; every loader, and init/train --config on
# that file, must refuse it with a message naming config.json.
cfg_case() {
    local name=$1 pat=$2
    shift 2
    if [ "$PHASE" = build ]; then
        mkbad "$name" && job cfg "$GOOD/config.json" "$S/$name/config.json" "$@"
    else
        cfg_checks "$name" "$S/$name" "$pat"
    fi
}

cfg_checks() {
    local name=$1 dir=$2 pat=$3
    check_model_dir "$name" "$dir" "$name/config\.json" "$pat"
    expect_fail "$name: init --config" -x "$OUT/init" "$name/config\.json" "$pat" -- \
        "$DT" init --config "$dir/config.json" --out "$OUT/init"
    expect_fail "$name: train --config" -x "$OUT/train" "$name/config\.json" "$pat" -- \
        "$DT" train --config "$dir/config.json" --data "$DATA" --out "$OUT/train" --steps 1 --batch 2 --seq 32 \
        --threads 1 --quiet
}

# cfgw_case NAME REGEX EDIT... — a valid config.json that disagrees with the weights: the
# loaders must refuse the checkpoint with a message naming model.safetensors.
cfgw_case() {
    local name=$1 pat=$2
    shift 2
    if [ "$PHASE" = build ]; then
        mkbad "$name" && job cfg "$GOOD/config.json" "$S/$name/config.json" "$@"
    else
        check_model_dir "$name" "$S/$name" "$name/model\.safetensors" "$pat"
    fi
}

# tok_case NAME REGEX EDIT... — difftrans_tokenizer.json edited: every loader must refuse it.
tok_case() {
    local name=$1 pat=$2
    shift 2
    if [ "$PHASE" = build ]; then
        mkbad "$name" && job cfg "$GOOD/difftrans_tokenizer.json" "$S/$name/difftrans_tokenizer.json" "$@"
    else
        check_model_dir "$name" "$S/$name" "$name/difftrans_tokenizer\.json" "$pat"
    fi
}

# ts_case NAME REGEX EDIT... — train_state.json edited: `train --resume` must refuse it, naming
# train_state.json and the key, and leave every file of the run as it was.
ts_case() {
    local name=$1 pat=$2
    shift 2
    if [ "$PHASE" = build ]; then
        mkbad "$name" && job cfg "$GOOD/train_state.json" "$S/$name/train_state.json" "$@"
    else
        resume_check "$name" "$S/$name" "$name/train_state\.json" "$pat"
    fi
}

# resume_check NAME DIR REGEX... — `train --resume --out DIR` fails and changes nothing in DIR.
resume_check() {
    local name=$1 dir=$2 before after
    shift 2
    before=$(snapshot "$dir")
    expect_fail "$name: train --resume" "$@" -- "$DT" train --resume --out "$dir" --threads 1 --quiet
    after=$(snapshot "$dir")
    if [ "$before" = "$after" ]; then pass; else
        fail "$name: train --resume changed files in $dir" "$(diff <(echo "$before") <(echo "$after") | tr '\n' '|')"
    fi
}

# absurd_case NAME REGEX EDIT... — absurd sizes must be refused by validation, before any
# allocation: the commands run with a 2 GiB address-space cap and a 10 s timeout, so that an
# attempt to allocate shows up as a failure here (wrong message, crash), not as an OOM of the
# machine. The subshell keeps its own counters and reports them on its last lines.
absurd_case() {
    local name=$1 pat=$2
    shift 2
    if [ "$PHASE" = build ]; then
        mkbad "$name" && job cfg "$GOOD/config.json" "$S/$name/config.json" "$@"
        return
    fi
    capped "$name" cfg_checks "$name" "$S/$name" "$pat"
}

# absurdw_case NAME REGEX EDIT... — a config.json claiming a huge model beside small weights:
# the loaders compare the weights with the config before allocating, so under the same cap the
# message is the shape mismatch in model.safetensors, not an out-of-memory.
absurdw_case() {
    local name=$1 pat=$2
    shift 2
    if [ "$PHASE" = build ]; then
        mkbad "$name" && job cfg "$GOOD/config.json" "$S/$name/config.json" "$@"
        return
    fi
    capped "$name" check_model_dir "$name" "$S/$name" "$name/model\.safetensors" "$pat"
}

# capped NAME CHECK ARGS... — CHECK ARGS under a 2 GiB address-space cap and a 10 s timeout.
# AddressSanitizer reserves terabytes of shadow address space, so a capped run is impossible
# there, and uncapped these commands could allocate gigabytes: under ASan they are skipped.
capped() {
    local name=$1 out counts
    shift
    if [ -n "${DT_ASAN:-}" ]; then
        echo "SKIP: $name: needs an address-space cap (ulimit -v), impossible under AddressSanitizer"
        return
    fi
    out=$(
        ulimit -v 2097152
        TMO=$((10 * ${DT_TEST_TIMEOUT_SCALE:-1}))
        N_PASS=0 N_FAIL=0 FAILED=()
        "$@"
        echo "COUNTS $N_PASS $N_FAIL"
        for f in "${FAILED[@]+"${FAILED[@]}"}"; do echo "FAILED $f"; done
    )
    printf '%s\n' "$out" | grep -v -e '^COUNTS ' -e '^FAILED '
    counts=$(printf '%s\n' "$out" | grep '^COUNTS ')
    if [ -z "$counts" ]; then
        fail "$name: the checking subshell died"
        return
    fi
    set -- $counts
    N_PASS=$((N_PASS + $2))
    N_FAIL=$((N_FAIL + $3))
    while IFS= read -r l; do FAILED+=("${l#FAILED }"); done < <(printf '%s\n' "$out" | grep '^FAILED ')
}

corruption_cases() {
    # model.safetensors: truncated, at several offsets
    st_case st_trunc0 'truncat|too short|empty' truncate 0
    st_case st_trunc4 'truncat|too short' truncate 4
    st_case st_trunc8 'truncat|past end' truncate 8
    st_case st_trunc_in_header 'truncat|past end' truncate 100
    st_case st_trunc_header_end 'truncat|out of bounds' truncate hdr+0
    st_case st_trunc_in_data 'truncat|out of bounds' truncate hdr+1000
    st_case st_trunc_last_byte 'truncat|out of bounds' truncate -1
    # header length
    st_case st_hdrlen_past_eof 'past end|truncat' setlen size
    st_case st_hdrlen_2pow60 'absurd|too large' setlen 1152921504606846976
    st_case st_hdrlen_2pow64m1 'absurd|too large' setlen 18446744073709551615
    # header text
    st_case st_header_not_json 'not JSON' rawheader '{"model.norm.weight": {"dtype": "F32", this is not json'
    st_case st_header_trailing 'not JSON' rawheader '{} garbage'
    st_case st_header_array 'not (a JSON )?(an )?object' rawheader '[1, 2, 3]'
    # tensor entries
    st_case st_dtype_f64 'dtype.*F64|F64.*dtype' dtype model.norm.weight F64
    st_case st_dtype_q4 'dtype.*Q4|Q4.*dtype' dtype model.layers.0.self_attn.q_proj.weight Q4
    st_case st_offsets_oob 'model\.norm\.weight.*out of bounds' offsets model.norm.weight D D+256
    st_case st_offsets_huge 'model\.norm\.weight.*out of bounds' offsets model.norm.weight b 10**20
    st_case st_offsets_reversed 'model\.norm\.weight.*(begin after end|offsets)' offsets model.norm.weight e b
    st_case st_offsets_vs_shape 'model\.norm\.weight.*(need|shape)' offsets model.norm.weight b e-4
    st_case st_offsets_negative 'model\.norm\.weight.*offsets' offsets model.norm.weight -4 e
    st_case st_shape_negative 'model\.norm\.weight.*shape' shape model.norm.weight '[-64]'
    st_case st_shape_vs_config 'model\.embed_tokens\.weight.*shape.*config' shape model.embed_tokens.weight '[128, 64]' fix
    st_case st_shape_transposed 'model\.layers\.0\.mlp\.gate_proj\.weight.*shape' \
        shape model.layers.0.mlp.gate_proj.weight '[64, 176]'
    st_case st_missing_tensor 'missing.*model\.norm\.weight' drop model.norm.weight
    st_case st_duplicate_tensor 'duplicate.*model\.norm\.weight' duplicate model.norm.weight
    st_case st_metadata_not_object '__metadata__' metadata '[1, 2]'
    # values
    st_case st_nan 'model\.embed_tokens\.weight.*(non-finite|nan)' setfloat model.embed_tokens.weight 5 nan
    st_case st_inf 'model\.norm\.weight.*(non-finite|inf)' setfloat model.norm.weight 3 inf
    st_case st_neg_inf 'model\.layers\.1\.self_attn\.lambda_q1.*(non-finite|inf)' \
        setfloat model.layers.1.self_attn.lambda_q1 0 -inf

    # config.json
    cfg_case cfg_no_hidden_size 'missing.*hidden_size' -hidden_size
    cfg_case cfg_no_model_type 'missing.*model_type' -model_type
    cfg_case cfg_model_type_gpt2 'gpt2.*(not supported|unknown)' 'model_type="gpt2"'
    cfg_case cfg_hidden_zero 'hidden_size.*(> 0|positive)' hidden_size=0
    cfg_case cfg_hidden_negative 'hidden_size.*(> 0|positive)' hidden_size=-64
    cfg_case cfg_layers_zero 'num_hidden_layers.*(> 0|positive)' num_hidden_layers=0
    cfg_case cfg_vocab_negative 'vocab_size.*(> 0|positive)' vocab_size=-1
    cfg_case cfg_maxpos_zero 'max_position_embeddings.*(> 0|positive)' max_position_embeddings=0
    cfg_case cfg_hidden_string 'hidden_size.*number' 'hidden_size="64"'
    cfg_case cfg_hidden_fraction 'hidden_size.*integer' hidden_size=64.5
    cfg_case cfg_hidden_2pow40 'hidden_size.*(range|large)' hidden_size=1099511627776
    cfg_case cfg_heads_odd_diff 'even.*num_attention_heads|num_attention_heads.*even' \
        num_attention_heads=3 num_key_value_heads=3 head_dim=16
    cfg_case cfg_head_dim_odd 'head_dim must be even' head_dim=15
    cfg_case cfg_heads_kv_indivisible 'divisible|num_key_value_heads' num_key_value_heads=3
    cfg_case cfg_heads_indivisible_hidden 'divisible' -head_dim num_attention_heads=6 num_key_value_heads=6
    cfg_case cfg_eps_zero 'rms_norm_eps' rms_norm_eps=0
    cfg_case cfg_rope_scaling_yarn "rope_scaling type 'yarn' is not supported" 'rope_scaling={"type": "yarn", "factor": 2.0}'
    cfg_case cfg_rope_llama3_incomplete 'llama3.*needs.*low_freq_factor' 'rope_scaling={"rope_type": "llama3", "factor": 8.0}'
    cfgw_case cfg_more_layers_than_weights 'missing.*model\.layers\.2\.' num_hidden_layers=3
    # a 135-byte config claiming 4194304 × 400 embeddings: the tensors are compared with it before
    # the 13 GB of parameters it implies are allocated, so the real error shows, not an OOM
    absurdw_case cfg_claims_huge_model 'embed_tokens.*shape' vocab_size=4194304 hidden_size=400 num_hidden_layers=1
    cfgw_case cfg_wider_than_weights 'gate_proj.*shape.*config' intermediate_size=192
    # difftrans_tokenizer.json
    tok_case tok_bpe 'unsupported|bpe' 'type="bpe"'
    tok_case tok_vocab_300 'vocab' vocab=300

    # train_state.json (train --resume only)
    ts_case ts_step_negative 'step' step=-5
    ts_case ts_step_huge 'step' step=1e300
    ts_case ts_step_fraction 'step' step=3.5
    ts_case ts_batch_huge 'batch' batch=1e12
    ts_case ts_lr_negative 'lr' lr=-1
    ts_case ts_no_seed 'seed' -seed
    ts_case ts_rng_abc 'rng' 'rng="abc"'

    absurd_case cfg_hidden_1e9 'hidden_size.*(large|limit)' hidden_size=1000000000
    absurd_case cfg_vocab_1e9 'vocab_size.*(large|limit)' vocab_size=1000000000
    absurd_case cfg_too_many_params 'too large|large|limit' vocab_size=4000000 hidden_size=60000 \
        num_attention_heads=4 num_key_value_heads=4 head_dim=16 intermediate_size=1000000
}

PHASE=build
corruption_cases
"$PY" "$S/edit.py" "$JOBS" || fail "edit.py could not build the corrupt files"
PHASE=check
corruption_cases

# Files and directories that are missing or of the wrong kind.
mkbad st_missing_file && rm -f "$S/st_missing_file/model.safetensors"
check_model_dir st_missing_file "$S/st_missing_file" 'st_missing_file/model\.safetensors' \
    'no such file|cannot open|missing|not found'
mkbad st_is_directory && rm -f "$S/st_is_directory/model.safetensors" && mkdir "$S/st_is_directory/model.safetensors"
check_model_dir st_is_directory "$S/st_is_directory" 'st_is_directory/model\.safetensors' 'regular file|directory'
check_model_dir missing_dir "$S/no_such_model_dir" 'no_such_model_dir' 'no such file|not found|does not exist|cannot open'
touch "$S/not_a_dir"
check_model_dir file_not_dir "$S/not_a_dir" 'not_a_dir' 'not a (model )?directory'

mkbad cfg_not_json && printf '{"model_type": "diffllama", "hidden_size": 64,, oops\n' >"$S/cfg_not_json/config.json"
cfg_checks cfg_not_json "$S/cfg_not_json" 'not (valid )?JSON'
mkbad cfg_empty && : >"$S/cfg_empty/config.json"
cfg_checks cfg_empty "$S/cfg_empty" 'not (valid )?JSON|empty'
mkbad cfg_array && printf '[1, 2]\n' >"$S/cfg_array/config.json"
cfg_checks cfg_array "$S/cfg_array" 'not a JSON object|object'
mkbad cfg_missing && rm -f "$S/cfg_missing/config.json"
check_model_dir cfg_missing "$S/cfg_missing" 'cfg_missing/config\.json' 'no such file|cannot open|missing|not found'
expect_fail "cfg_missing: init --config" -x "$OUT/init" 'cfg_missing/config\.json' 'no such file|cannot open' -- \
    "$DT" init --config "$S/cfg_missing/config.json" --out "$OUT/init"
expect_fail "cfg_missing: train --config" -x "$OUT/train" 'cfg_missing/config\.json' 'no such file|cannot open' -- \
    "$DT" train --config "$S/cfg_missing/config.json" --data "$DATA" --out "$OUT/train" --steps 1 --threads 1 --quiet

mkbad tok_not_json && printf 'not json\n' >"$S/tok_not_json/difftrans_tokenizer.json"
check_model_dir tok_not_json "$S/tok_not_json" 'tok_not_json/difftrans_tokenizer\.json' 'not (valid )?JSON'
mkbad ts_not_json && printf '{"step": 2, oops\n' >"$S/ts_not_json/train_state.json"
resume_check ts_not_json "$S/ts_not_json" 'ts_not_json/train_state\.json' 'not (valid )?JSON'
mkbad ts_data_missing && sed -i "s|\"data\":[^,]*|\"data\": \"$S/no_such_corpus.txt\"|" "$S/ts_data_missing/train_state.json"
resume_check ts_data_missing "$S/ts_data_missing" 'no_such_corpus\.txt' 'no such file|cannot open'
mkbad opt_missing && rm -f "$S/opt_missing/optimizer.safetensors"
resume_check opt_missing "$S/opt_missing" 'opt_missing/optimizer\.safetensors' 'no such file|cannot open'
mkbad opt_truncated && head -c 1000 "$GOOD/optimizer.safetensors" >"$S/opt_truncated/optimizer.safetensors"
resume_check opt_truncated "$S/opt_truncated" 'opt_truncated/optimizer\.safetensors' 'truncat|past end|out of bounds'
# moments that would carry into the weights at the first step (and the next checkpoint would
# replace the good one): a NaN first moment, a negative second moment
for bad in "adam.m 7 nan" "adam.v 10 -1"; do
    read -r tensor index value <<<"$bad"
    name=opt_${tensor#adam.}_$value
    mkbad "$name" && "$PY" - "$S/$name/optimizer.safetensors" "$tensor" "$index" "$value" <<'EOF2'
import json, struct, sys
path, tensor, index, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
start = json.loads(raw[8:8 + n])[tensor]["data_offsets"][0]
struct.pack_into("<f", raw, 8 + n + start + 4 * index, value)
open(path, "wb").write(raw)
EOF2
    resume_check "$name" "$S/$name" "$name/optimizer\.safetensors" "'$tensor' holds $value at index $index"
done

# ---------------------------------------------------------------- forward --input

fw_case() { # fw_case NAME REGEX CONTENT ('-' = the file does not exist)
    local name=$1 pat=$2 content=$3 f=$S/ids_$1.txt
    rm -f "$f"
    [ "$content" != "-" ] && printf '%b' "$content" >"$f"
    expect_fail "forward --input $name" -x "$OUT/fw.safetensors" "ids_$name\.txt" "$pat" -- \
        "$DT" forward "$GOOD" --input "$f" --output "$OUT/fw.safetensors" --threads 1
    expect_fail "forward --grads --input $name" -x "$OUT/fw.safetensors" "ids_$name\.txt" "$pat" -- \
        "$DT" forward "$GOOD" --input "$f" --output "$OUT/fw.safetensors" --grads --threads 1
}
fw_case id_eq_vocab '256.*(out of range|vocab)' '1 2 3 4\n5 6 7 256\n'
fw_case id_negative '(-1).*(out of range|negative)' '1 2 -1 4\n'
fw_case id_huge 'out of range|too large|not a token id' '1 2 99999999999999999999999 4\n'
fw_case id_abc "abc.*not a token id|not a number|invalid" '1 2 abc 4\n'
fw_case id_float "1\\.5.*not a token id|not a number|invalid" '1 2 1.5 4\n'
fw_case id_trailing_junk "7x.*not a token id|not a number|invalid" '1 2 7x 4\n'
fw_case ragged 'ragged|same length|length' '1 2 3 4\n5 6 7\n'
fw_case empty 'empty' ''
fw_case blank_lines 'empty' '\n  \n\n'
fw_case missing 'no such file|cannot open' '-'
# a NUL byte must not end the line early (the ids after it were silently dropped)
fw_case nul_byte ':1: a NUL byte' '1 2\0 9 9\n'
long=$(seq -s ' ' 1 257 | awk '{for (i = 1; i <= NF; i++) printf "%d ", $i % 256; print ""}')
fw_case too_long 'max_position_embeddings|too long|exceed' "$long\n"

expect_fail "forward without --output" -x "$OUT/fw.safetensors" 'output' -- "$DT" forward "$GOOD" --input "$IDS"
expect_fail "forward without MODEL_DIR" 'MODEL_DIR' -- "$DT" forward --input "$IDS" --output "$OUT/fw.safetensors"
printf 'keep me\n' >"$S/plain_file"
expect_fail "forward --output under a regular file" 'plain_file/fw.safetensors' \
    'plain_file exists and is not a directory' -- "$DT" forward "$GOOD" --input "$IDS" --output "$S/plain_file/fw.safetensors" --threads 1
mkdir -p "$S/out_is_dir.safetensors"
expect_fail "forward --output is a directory" 'out_is_dir\.safetensors' 'directory' -- \
    "$DT" forward "$GOOD" --input "$IDS" --output "$S/out_is_dir.safetensors" --threads 1
expect_fail "forward --threads 0" -x "$OUT/fw.safetensors" 'threads' -- \
    "$DT" forward "$GOOD" --input "$IDS" --output "$OUT/fw.safetensors" --threads 0
expect_fail "forward --threads abc" -x "$OUT/fw.safetensors" 'threads.*abc' -- \
    "$DT" forward "$GOOD" --input "$IDS" --output "$OUT/fw.safetensors" --threads abc
expect_fail "forward --bogus" -x "$OUT/fw.safetensors" 'bogus' -- \
    "$DT" forward "$GOOD" --input "$IDS" --output "$OUT/fw.safetensors" --bogus
expect_fail "forward --input (missing value)" 'input' -- "$DT" forward "$GOOD" --output "$OUT/fw.safetensors" --input

# ---------------------------------------------------------------- generate

GEN=("$DT" generate "$GOOD" --threads 1)
expect_fail "generate --prompt-ids id = vocab_size" 'prompt-ids' '256.*(out of range|vocab)' -- "${GEN[@]}" --prompt-ids "1 2 256" -n 2
expect_fail "generate --prompt-ids negative id" 'prompt-ids' '(-3).*(out of range|negative)' -- "${GEN[@]}" --prompt-ids "1 -3" -n 2
expect_fail "generate --prompt-ids huge id" 'prompt-ids' 'out of range|too large|not a token id' -- "${GEN[@]}" --prompt-ids "1 99999999999999999999999" -n 2
expect_fail "generate --prompt-ids abc" 'prompt-ids' 'abc' -- "${GEN[@]}" --prompt-ids "1 abc 3" -n 2
expect_fail "generate --prompt-ids 1.5" 'prompt-ids' '1\.5' -- "${GEN[@]}" --prompt-ids "1 1.5" -n 2
expect_fail "generate --prompt-ids 1,2" 'prompt-ids' '1,2' -- "${GEN[@]}" --prompt-ids "1,2" -n 2
expect_fail "generate --prompt-ids empty" 'prompt-ids' 'no token|empty' -- "${GEN[@]}" --prompt-ids "  " -n 2
expect_fail "generate -n past max_position_embeddings" 'max_position_embeddings|exceed' -- "${GEN[@]}" --prompt-ids "1 2 3" -n 254
expect_fail "generate --prompt + -n past max_position_embeddings" 'max_position_embeddings|exceed' -- \
    "${GEN[@]}" --prompt "hello" -n 300
expect_fail "generate -n abc" 'tokens|-n' 'abc' -- "${GEN[@]}" --prompt-ids "1" -n abc
expect_fail "generate -n -1" 'tokens|-n' -- "${GEN[@]}" --prompt-ids "1" -n -1
expect_fail "generate --temperature abc" 'temperature.*abc' -- "${GEN[@]}" --prompt-ids "1" -n 2 --temperature abc
expect_fail "generate --temperature -1" 'temperature' -- "${GEN[@]}" --prompt-ids "1" -n 2 --temperature -1
expect_fail "generate --temperature nan" 'temperature' -- "${GEN[@]}" --prompt-ids "1" -n 2 --temperature nan
expect_fail "generate --top-p 2" 'top-p' -- "${GEN[@]}" --prompt-ids "1" -n 2 --top-p 2
expect_fail "generate --top-k x" 'top-k.*x' -- "${GEN[@]}" --prompt-ids "1" -n 2 --top-k x
expect_fail "generate --seed -1" 'seed' -- "${GEN[@]}" --prompt-ids "1" -n 2 --seed -1
expect_fail "generate --seed abc" 'seed.*abc' -- "${GEN[@]}" --prompt-ids "1" -n 2 --seed abc
expect_fail "generate --prompt and --prompt-ids" 'prompt' -- "${GEN[@]}" --prompt "a" --prompt-ids "1" -n 2
expect_fail "generate without MODEL_DIR" 'MODEL_DIR' -- "$DT" generate --prompt-ids "1" -n 2
expect_fail "generate --bogus" 'bogus' -- "${GEN[@]}" --prompt-ids "1" -n 2 --bogus
# A model with a 128-token vocabulary: bytes >= 128 in a text prompt or a data file are not tokens.
sed 's/"vocab_size":[^,]*/"vocab_size": 128/' "$GOOD/config.json" >"$S/vocab128.json"
V128=$S/vocab128
expect_ok "fixture: init a vocab-128 model" "$DT" init --config "$S/vocab128.json" --out "$V128"
printf 'plain ascii text, then a high byte: \xc8 and more text after it.%.0s\n' $(seq 1 60) >"$S/highbyte.txt"
expect_fail "generate --prompt with a byte outside the vocabulary" 'prompt' '195|out of range|vocab' -- \
    "$DT" generate "$V128" --prompt "h$(printf '\xc3\xa9')llo" -n 2 --threads 1
expect_fail "train --data with a byte outside the vocabulary" -x "$OUT/train" 'highbyte\.txt' '200.*vocab' -- \
    "$DT" train --config "$S/vocab128.json" --data "$S/highbyte.txt" --out "$OUT/train" --steps 2 --batch 2 --seq 32 \
    --threads 1 --quiet
expect_fail "eval --data with a byte outside the vocabulary" 'highbyte\.txt' '200.*vocab' -- \
    "$DT" eval "$V128" --data "$S/highbyte.txt" --seq 32 --threads 1
expect_fail "generate --temperature (missing value)" 'temperature' -- "${GEN[@]}" --prompt-ids "1" --temperature

# ---------------------------------------------------------------- train / eval --data

: >"$S/empty.txt"
head -c 40 "$DATA" >"$S/short40.txt"
printf 'x' >"$S/one_byte.txt"
TR=("$DT" train --preset tiny --out "$OUT/train" --steps 2 --batch 2 --seq 32 --threads 1 --quiet)
expect_fail "train --data empty file" -x "$OUT/train" 'empty\.txt' 'empty' -- "${TR[@]}" --data "$S/empty.txt"
expect_fail "train --data missing file" -x "$OUT/train" 'no_such_data\.txt' 'no such file|cannot open' -- \
    "${TR[@]}" --data "$S/no_such_data.txt"
expect_fail "train --data too short for --seq" -x "$OUT/train" 'short40\.txt' 'too short' -- "${TR[@]}" --data "$S/short40.txt"
expect_fail "train --data is a directory" -x "$OUT/train" 'regular file|directory' -- "${TR[@]}" --data "$S"
expect_fail "train --seq past max_position_embeddings" -x "$OUT/train" 'seq' 'max_position_embeddings' -- \
    "$DT" train --preset tiny --data "$DATA" --out "$OUT/train" --steps 2 --batch 2 --seq 300 --threads 1 --quiet
expect_fail "train without --data" -x "$OUT/train" 'data' -- \
    "$DT" train --preset tiny --out "$OUT/train" --steps 2 --threads 1 --quiet
expect_fail "train without --out" 'out' -- "$DT" train --preset tiny --data "$DATA" --steps 2 --threads 1 --quiet
mkdir -p "$S/not_a_run"
expect_fail "train --resume on a directory without a run" 'not_a_run' 'train_state\.json' -- \
    "$DT" train --resume --out "$S/not_a_run" --threads 1 --quiet
if [ -n "$(ls -A "$S/not_a_run")" ]; then
    fail "train --resume on a directory without a run left files: $(ls -A "$S/not_a_run" | tr '\n' ' ')"
else pass; fi
# the batch is the saved run's (2): the refusal says so and points at --grad-accum, not at an ignored --batch
expect_fail "train --resume --grad-accum that does not divide the saved batch" 'grad_accum 3' 'batch of 2' \
    '\(--grad-accum\)$' -- "$DT" train --resume --out "$GOOD" --grad-accum 3 --threads 1 --quiet

EV=("$DT" eval "$GOOD" --seq 32 --batch 2 --threads 1)
expect_fail "eval --data empty file" 'empty\.txt' 'empty' -- "${EV[@]}" --data "$S/empty.txt"
expect_fail "eval --data missing file" 'no_such_data\.txt' 'no such file|cannot open' -- "${EV[@]}" --data "$S/no_such_data.txt"
expect_fail "eval --data one byte (too short)" 'one_byte\.txt' 'too short|at least' -- "${EV[@]}" --data "$S/one_byte.txt"
expect_fail "eval without --data" 'data' -- "${EV[@]}"
expect_fail "eval --seq abc" 'seq.*abc' -- "${EV[@]}" --data "$SMALL_TXT" --seq abc
expect_fail "eval --batch 0" 'batch' -- "${EV[@]}" --data "$SMALL_TXT" --batch 0
expect_fail "eval --bogus" 'bogus' -- "${EV[@]}" --data "$SMALL_TXT" --bogus
expect_fail "eval without MODEL_DIR" 'MODEL_DIR' -- "$DT" eval --data "$SMALL_TXT"
# --seq past max_position_embeddings (256) is capped: a note says so and the windows it used (it was silent)
expect_ok "eval --seq past max_position_embeddings" "${EV[@]}" --data "$SMALL_TXT" --seq 5000
check "eval --seq 5000: a note of the cap" grep -qx \
    "eval: --seq 5000 is more than $GOOD's max_position_embeddings 256: windows of 256 tokens" "$S/.stderr"
expect_ok "eval --seq past max_position_embeddings and the data" "${EV[@]}" --data "$S/short40.txt" --seq 5000
check "eval --seq 5000 on 40 bytes: the windows the data allows" grep -qx \
    "eval: --seq 5000 is more than $GOOD's max_position_embeddings 256: windows of 39 tokens (the data's length)" \
    "$S/.stderr"
expect_ok "eval --seq within max_position_embeddings" "${EV[@]}" --data "$SMALL_TXT" --seq 256
check "eval --seq 256: no note" test ! -s "$S/.stderr"

# ---------------------------------------------------------------- options

expect_fail "no command" 'usage' -- "$DT"
expect_fail "unknown command" 'bogus' 'unknown command' -- "$DT" bogus
expect_fail "train --bogus" -x "$OUT/train" 'bogus' -- "${TR[@]}" --data "$DATA" --bogus
expect_fail "train --steps abc" -x "$OUT/train" 'steps.*abc' -- "${TR[@]}" --data "$DATA" --steps abc
expect_fail "train --steps 0" -x "$OUT/train" 'steps' -- "${TR[@]}" --data "$DATA" --steps 0
expect_fail "train --steps -5" -x "$OUT/train" 'steps' -- "${TR[@]}" --data "$DATA" --steps -5
expect_fail "train --steps 1e3" -x "$OUT/train" 'steps.*1e3' -- "${TR[@]}" --data "$DATA" --steps 1e3
expect_fail "train --steps 99999999999999999999" -x "$OUT/train" 'steps' -- "${TR[@]}" --data "$DATA" --steps 99999999999999999999
expect_fail "train --lr x" -x "$OUT/train" 'lr.*x' -- "${TR[@]}" --data "$DATA" --lr x
expect_fail "train --lr -1" -x "$OUT/train" 'lr' -- "${TR[@]}" --data "$DATA" --lr -1
expect_fail "train --lr inf" -x "$OUT/train" 'lr' -- "${TR[@]}" --data "$DATA" --lr inf
expect_fail "train --batch 0" -x "$OUT/train" 'batch' -- "${TR[@]}" --data "$DATA" --batch 0
expect_fail "train --seq abc" -x "$OUT/train" 'seq.*abc' -- "${TR[@]}" --data "$DATA" --seq abc
expect_fail "train --seq ''" -x "$OUT/train" 'seq' -- "${TR[@]}" --data "$DATA" --seq ''
expect_fail "train --val-fraction 2" -x "$OUT/train" 'val-fraction' -- "${TR[@]}" --data "$DATA" --val-fraction 2
expect_fail "train --seed abc" -x "$OUT/train" 'seed.*abc' -- "${TR[@]}" --data "$DATA" --seed abc
expect_fail "train --arch bogus" -x "$OUT/train" 'arch.*bogus' -- "${TR[@]}" --data "$DATA" --arch bogus
expect_fail "train --preset bogus" -x "$OUT/train" 'preset.*bogus|bogus.*preset' -- \
    "$DT" train --preset bogus --data "$DATA" --out "$OUT/train" --steps 2 --threads 1 --quiet
expect_fail "train --config missing.json" -x "$OUT/train" 'missing_cfg\.json' -- \
    "$DT" train --config "$S/missing_cfg.json" --data "$DATA" --out "$OUT/train" --steps 2 --threads 1 --quiet
expect_fail "train --arch v2 --config a diffllama config.json" -x "$OUT/train" 'arch v2' 'model_type is "diffllama"' -- \
    "$DT" train --arch v2 --config "$GOOD/config.json" --data "$DATA" --out "$OUT/train" --steps 2 --threads 1 --quiet
expect_fail "train --data (missing value)" -x "$OUT/train" 'data' -- "${TR[@]}" --data
expect_fail "train stray argument" -x "$OUT/train" 'stray' -- "${TR[@]}" --data "$DATA" stray

expect_fail "init --preset bogus" -x "$OUT/init" 'preset.*bogus|bogus.*preset' -- "$DT" init --preset bogus --out "$OUT/init"
expect_fail "init --arch bogus" -x "$OUT/init" 'arch.*bogus' -- "$DT" init --preset tiny --arch bogus --out "$OUT/init"
expect_fail "init --seed abc" -x "$OUT/init" 'seed.*abc' -- "$DT" init --preset tiny --seed abc --out "$OUT/init"
expect_fail "init --bogus" -x "$OUT/init" 'bogus' -- "$DT" init --preset tiny --bogus --out "$OUT/init"
expect_fail "init without --out" 'out' -- "$DT" init --preset tiny
expect_fail "init --out (missing value)" 'out' -- "$DT" init --preset tiny --out
printf 'keep me\n' >"$S/a_file"
expect_fail "init --out under a regular file" 'a_file/model' 'a_file exists and is not a directory' -- \
    "$DT" init --preset tiny --out "$S/a_file/model"
expect_fail "init --out is a regular file" 'a_file' 'not a directory|exists|cannot create' -- \
    "$DT" init --preset tiny --out "$S/a_file"
if [ "$(cat "$S/a_file")" = "keep me" ]; then pass; else fail "init --out a regular file changed the file"; fi
expect_fail "init --config not json" -x "$OUT/init" 'cfg_not_json/config\.json' 'JSON' -- \
    "$DT" init --config "$S/cfg_not_json/config.json" --out "$OUT/init"
# --arch and a config file's model_type that disagree: refused, naming both; when they agree, or
# the config is a preset's name (which takes --arch), init writes the model.
expect_fail "init --arch v2 --config a diffllama config.json" -x "$OUT/init" 'arch v2' 'good/config\.json' \
    'model_type is "diffllama"' -- "$DT" init --arch v2 --config "$GOOD/config.json" --out "$OUT/init"
expect_fail "init --arch transformer --config a diffllama config.json" -x "$OUT/init" 'arch transformer' \
    'model_type is "diffllama"' -- "$DT" init --arch transformer --config "$GOOD/config.json" --out "$OUT/init"
expect_ok "init --arch diff --config a diffllama config.json" "$DT" init --arch diff --config "$GOOD/config.json" \
    --out "$S/init_arch_agrees"
expect_ok "init --arch v2 --config tiny (a preset)" "$DT" init --arch v2 --config tiny --out "$S/init_v2_preset"
if grep -qE '"model_type":[[:space:]]*"difftrans_v2"' "$S/init_v2_preset/config.json" 2>/dev/null; then pass
else fail "init --arch v2 --config tiny did not write a difftrans_v2 model"; fi

# A FIFO where a checkpoint file should be: opened for reading before it was checked, it blocked
# `info` forever waiting for a writer.
FIFO_CK=$S/fifo_ckpt
rm -rf "$FIFO_CK" && cp -a "$GOOD" "$FIFO_CK" && rm -f "$FIFO_CK/generation_config.json" &&
    mkfifo "$FIFO_CK/generation_config.json"
expect_fail "info with a FIFO as generation_config.json" 'fifo_ckpt/generation_config\.json' 'not a regular file' -- \
    timeout 20 "$DT" info "$FIFO_CK"
rm -rf "$FIFO_CK"

# An output name that holds a FIFO (or a device): the temporary file renamed over it replaced it
# (`forward --output /dev/null` run as root replaced /dev/null); it is refused and left as it was.
mkfifo "$S/out_fifo"
expect_fail "forward --output is a FIFO" 'out_fifo' 'not a regular file' -- \
    "$DT" forward "$GOOD" --input "$IDS" --output "$S/out_fifo" --threads 1
if [ -p "$S/out_fifo" ]; then pass; else fail "forward --output replaced the FIFO at $S/out_fifo"; fi
rm -f "$S/out_fifo"

# An output that is a file of the model read: the logits replaced the checkpoint's weights (or
# its config, or the GGUF file), with status 0. Refused, and the model left as it was (checked
# at the end: the good checkpoint still loads; the GGUF file compared below).
expect_fail "forward --output is the model's weights" 'model\.safetensors' "model's own" -- \
    "$DT" forward "$GOOD" --input "$IDS" --output "$GST" --threads 1
expect_fail "forward --output is the model's config.json" 'good/config\.json' "model's own" -- \
    "$DT" forward "$GOOD" --input "$IDS" --output "$S/../$(basename "$S")/good/config.json" --threads 1
expect_ok "fixture: a llama checkpoint" "$DT" init --preset tiny --arch transformer --out "$S/fw_llama"
# export --gguf over the checkpoint's own weights wrote the GGUF file there, status 0 (a GGUF
# file rewritten in place, another --type, stays allowed)
expect_fail "export --gguf OUT is the model's weights" 'fw_llama/model\.safetensors' "model's own" -- \
    "$DT" export "$S/fw_llama" "$S/fw_llama/model.safetensors" --gguf
expect_ok "fixture: its GGUF file" "$DT" export "$S/fw_llama" "$S/fw_llama.gguf" --gguf
expect_ok "export --gguf of a GGUF file over itself" "$DT" export "$S/fw_llama.gguf" "$S/fw_llama.gguf" --gguf
cp "$S/fw_llama.gguf" "$S/fw_llama_copy.gguf"
expect_fail "forward --output is the GGUF model" 'fw_llama\.gguf' "model's own" -- \
    "$DT" forward "$S/fw_llama.gguf" --input "$IDS" --output "$S/fw_llama.gguf" --threads 1
if cmp -s "$S/fw_llama.gguf" "$S/fw_llama_copy.gguf"; then pass; else
    fail "forward --output replaced the GGUF model"
fi
rm -rf "$S/fw_llama" "$S/fw_llama.gguf" "$S/fw_llama_copy.gguf"

expect_fail "info without MODEL_DIR" 'MODEL_DIR' -- "$DT" info
expect_fail "info with two directories" "unexpected argument '$GOOD'" 'one MODEL_DIR' -- "$DT" info "$GOOD" "$GOOD"
expect_fail "info --bogus" "near '--bogus'" -- "$DT" info --bogus
expect_fail "info MODEL_DIR --json" "near '--json'" -- "$DT" info "$GOOD" --json
expect_fail "info MODEL_DIR --system" "takes no MODEL_DIR \\(got '$GOOD'\\)" -- "$DT" info "$GOOD" --system
expect_fail "export with one directory" 'OUT_DIR|MODEL_DIR' -- "$DT" export "$GOOD"
expect_fail "export --bogus" -x "$OUT/exp" 'bogus' -- "$DT" export "$GOOD" "$OUT/exp" --bogus
printf 'keep me\n' >"$S/export_file"
expect_fail "export OUT_DIR is a regular file" 'export_file' 'not a directory|exists' -- "$DT" export "$GOOD" "$S/export_file"
if [ "$(cat "$S/export_file")" = "keep me" ]; then pass; else fail "export to a regular file changed the file"; fi
expect_fail "export OUT_DIR under a regular file" 'export_file/exp' \
    'export_file exists and is not a directory' -- "$DT" export "$GOOD" "$S/export_file/exp"
if [ "$(cat "$S/export_file")" = "keep me" ]; then pass; else fail "export under a regular file changed the file"; fi

# ---------------------------------------------------------------- replacing a model, resuming a run

# A new run, an init or an export into a directory that holds a checkpoint is refused (the
# model stays as it was) unless --force; a run continues only on the data it was trained on,
# found by the absolute path its state recorded (from any directory), or at a new path given
# with --data; --stop-at at or before the saved step is refused, and so is one past --steps.
RUN=$S/run_copy
rm -rf "$RUN" && cp -a "$GOOD" "$RUN"
before=$(snapshot "$RUN")
expect_fail "train into a directory that holds a checkpoint" 'run_copy' 'already holds a checkpoint' 'resume' \
    'force' -- "$DT" train --preset tiny --data "$DATA" --out "$RUN" --steps 2 --batch 2 --seq 32 --threads 1 --quiet
expect_fail "init into a directory that holds a checkpoint" 'run_copy' 'already holds a checkpoint' 'force' -- \
    "$DT" init --preset tiny --out "$RUN"
expect_fail "export into a directory that holds a checkpoint" 'run_copy' 'already holds a checkpoint' 'force' -- \
    "$DT" export "$GOOD" "$RUN" --hf
# a run killed inside its first checkpoint's commit has it whole in DIR/.next only: --resume finishes it
STAGED=$S/staged_first
rm -rf "$STAGED" && mkdir -p "$STAGED/.next" && cp -a "$GOOD"/. "$STAGED/.next/" && rm -f "$STAGED/.next/metrics.jsonl"
expect_fail "train into a directory whose first checkpoint a kill left staged" 'staged_first/\.next/train_state\.json' \
    'resume' 'force' -- "$DT" train --preset tiny --data "$DATA" --out "$STAGED" --steps 2 --batch 2 --seq 32 \
    --threads 1 --quiet
check "... and the staged checkpoint is kept" test -s "$STAGED/.next/train_state.json"
expect_fail "train --resume --stop-at at the saved step" 'stop-at' 'already at step 2' -- \
    "$DT" train --resume --out "$RUN" --steps 4 --stop-at 2 --threads 1 --quiet
# --stop-at past --steps was never reached: the run trained to its end unasked
expect_fail "train --resume --stop-at past the saved run's steps" 'stop_at 3: past steps 2' '--steps' '--stop-at' -- \
    "$DT" train --resume --out "$RUN" --stop-at 3 --threads 1 --quiet
expect_fail "train --resume --stop-at past --steps" 'stop_at 5: past steps 4' '--steps' '--stop-at' -- \
    "$DT" train --resume --out "$RUN" --steps 4 --stop-at 5 --threads 1 --quiet
expect_fail "train --stop-at past --steps" 'stop_at 3: past steps 2' '--steps' '--stop-at' -x "$S/stop_past" -- \
    "$DT" train --preset tiny --data "$DATA" --out "$S/stop_past" --steps 2 --stop-at 3 --batch 2 --seq 32 \
    --threads 1 --quiet
head -c 20000 "$DATA" >"$S/other_data.txt"
expect_fail "train --resume on other data" 'other_data\.txt' 'not the data' -- \
    "$DT" train --resume --out "$RUN" --steps 3 --data "$S/other_data.txt" --threads 1 --quiet
expect_fail "train --resume --force" 'force' 'resume' -- "$DT" train --resume --out "$RUN" --force --threads 1 --quiet
after=$(snapshot "$RUN")
if [ "$before" = "$after" ]; then pass; else
    fail "a refused command changed the checkpoint in $RUN" "$(diff <(echo "$before") <(echo "$after") | tr '\n' '|')"
fi
cp "$DATA" "$S/rel_data.txt"
expect_ok "train on a relative --data path" sh -c 'cd "$1" && exec "$0" train --preset tiny --data rel_data.txt \
    --out run_rel --steps 2 --batch 2 --seq 32 --threads 1 --quiet' "$DT" "$S"
expect_ok "train --resume from another directory (the data's absolute path recorded)" \
    sh -c 'cd / && exec "$0" train --resume --out "$1" --steps 3 --threads 1 --quiet' "$DT" "$S/run_rel"
if grep -qF "\"$(realpath "$S/rel_data.txt")\"" "$S/run_rel/train_state.json"; then pass; else
    fail "train_state.json does not record the data's absolute path: $(grep '"data"' "$S/run_rel/train_state.json")"
fi
rm -rf "$S/run_rel" "$S/rel_data.txt"
cp "$DATA" "$S/moved_data.txt"
expect_ok "train --resume with the same data at a new path" "$DT" train --resume --out "$RUN" --steps 4 \
    --data "$S/moved_data.txt" --threads 1 --quiet
if grep -q "moved_data\.txt" "$RUN/train_state.json"; then pass; else
    fail "train --resume --data did not record the data's new path"
fi
expect_ok "train --force replaces the checkpoint" "$DT" train --preset tiny --data "$DATA" --out "$RUN" --steps 1 \
    --batch 2 --seq 32 --threads 1 --quiet --force
if grep -qE '"step":[[:space:]]*1,' "$RUN/train_state.json"; then pass; else fail "train --force did not start afresh"; fi
expect_fail "export to a .gguf name without --gguf" -x "$OUT/m.gguf" 'm\.gguf' '--gguf' -- \
    "$DT" export "$GOOD" "$OUT/m.gguf"
expect_fail "generate --top-p 0" 'top-p' '\(0, 1\]' -- "$DT" generate "$GOOD" --prompt-ids "1 2" -n 2 --top-p 0
if [ -s "$S/.stdout" ]; then fail "generate --top-p 0 printed before refusing: $(head -c 100 "$S/.stdout")"; else pass; fi
rm -rf "$RUN" "$S/other_data.txt" "$S/moved_data.txt"

# ---------------------------------------------------------------- summary

# The good checkpoint must be untouched by all of the above.
expect_ok "good checkpoint still loads" "$DT" info "$GOOD"
left=$(find "$S" -name '*.tmp.*')
if [ -z "$left" ]; then pass; else fail "temporary files left in $S" "$left"; fi
left=$(ls -A "$OUT")
if [ -z "$left" ]; then pass; else fail "outputs left in $OUT" "$left"; fi

echo
finish cli_bad_input
