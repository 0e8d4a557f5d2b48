#!/usr/bin/env bash
# run.sh PATH_TO_difftrans SCRATCH_DIR MODULES_DIR — `difftrans serve` end to end, with the official
# OpenAI SDK as the client (CTest: serve_openai; MODULES_DIR is where serve_fetch installed the npm
# packages). Builds tiny models with the command line — a BPE DIFF model (its tokenizer trained here,
# BOS and EOS included), its q8_0 copy, a byte-level llama baseline and its GGUF file, a DIFF V2
# model and its v2-crossgroup ablation (query heads j and j+h), an untrained medium DIFF model that decodes slowly
# enough to hold a slot, a byte-level and a BPE model of multibyte text, and untrained models over a
# Metaspace and a ByteFallback tokenizer — computes what
# `difftrans generate` and `difftrans forward` answer (expect.mjs), starts the servers with --port 0
# and reads their ports from the one line each prints, runs sdk.mjs (completions, streaming, chat,
# logprobs, models, health, metrics, attention, every error), u8.mjs (streamed text against whole
# text where tokens cut characters), the page's browser test and cors.mjs (a page of another origin
# calling a --cors server) when Chromium is there, and load.mjs (16
# clients, a few hundred requests), then stops every server with SIGTERM, one of them in the middle
# of a stream: each must exit 0. Exits 77 (skipped) when node or the npm packages are missing.
set -u
MODULES=${3:-}
if [ $# -ne 3 ]; then
    echo "usage: $0 PATH_TO_difftrans SCRATCH_DIR MODULES_DIR" >&2
    exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../cli_lib.sh" "$1" "$2"
if ! command -v node >/dev/null 2>&1 || [ ! -f "$MODULES/node_modules/openai/package.json" ]; then
    echo "SKIPPED: node or the OpenAI SDK is not installed in $MODULES (serve_fetch: npm ci from the registry)"
    exit 77
fi
MODULES=$(cd "$MODULES" && pwd)
SCALE=${DT_TEST_TIMEOUT_SCALE:-1}
[ "${DT_ASAN:-0}" = 1 ] && SCALE=$((SCALE * 5))

# ---------------------------------------------------------------- the models
TRAIN=(--preset tiny --batch 8 --seq 64 --lr 1e-2 --warmup 10 --threads 2 --quiet --eval-interval 0)
expect_ok "tokenizer train (BOS and EOS)" "$DT" tokenizer train --data "$CORPUS" --vocab-size 400 --out "$S/tok" --quiet
expect_ok "train the DIFF model (BPE)" "$DT" train --data "$CORPUS" --tokenizer "$S/tok" --arch diff --out "$S/diff" --steps 200 "${TRAIN[@]}"
expect_ok "quantize it to q8_0" "$DT" quantize "$S/diff" "$S/diff.q8_0" --scheme q8_0
expect_ok "train the llama baseline (bytes)" "$DT" train --data "$CORPUS" --arch transformer --out "$S/llama" --steps 100 "${TRAIN[@]}"
expect_ok "export the llama baseline to GGUF" "$DT" export "$S/llama" "$S/llama.gguf" --gguf
expect_ok "train the V2 model (BPE)" "$DT" train --data "$CORPUS" --tokenizer "$S/tok" --arch v2 --out "$S/v2" --steps 20 \
    --preset tiny --batch 4 --seq 32 --lr 1e-2 --warmup 5 --threads 2 --quiet --eval-interval 0
expect_ok "train the V2 crossgroup ablation (BPE)" "$DT" train --data "$CORPUS" --tokenizer "$S/tok" --arch v2 \
    --ablation v2-crossgroup --out "$S/v2x" --steps 20 --preset tiny --batch 4 --seq 32 --lr 1e-2 --warmup 5 --threads 2 \
    --quiet --eval-interval 0
# a line of 2-, 3- and 4-byte characters: a byte-level and a BPE model whose tokens cut characters
for i in $(seq 1 300); do echo 'héllo wörld 日本語 ÅÄÖ привет 😀'; done >"$S/u8.txt"
expect_ok "train the UTF-8 model (bytes)" "$DT" train --data "$S/u8.txt" --arch transformer --out "$S/u8byte" --steps 150 "${TRAIN[@]}"
expect_ok "tokenizer train (UTF-8)" "$DT" tokenizer train --data "$S/u8.txt" --vocab-size 300 --out "$S/u8tok" --quiet
expect_ok "train the UTF-8 model (BPE)" "$DT" train --data "$S/u8.txt" --tokenizer "$S/u8tok" --arch transformer --out "$S/u8bpe" \
    --steps 150 "${TRAIN[@]}"
# untrained models over hand-made tokenizers whose text depends on the tokens around it: Metaspace (a
# token's ▁ is a space after the first token), ByteFallback (<0xXX> runs, a Strip of the text's first space)
for fx in metaspace_first llama2_like; do
    check "the $fx model's config" "$PY" - "$HERE/../tokenizer/fixtures/$fx.json" "$S/u8bpe/config.json" \
        "$S/$fx.config.json" <<'PYEOF'
import json, sys
tok, cfg = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cfg["vocab_size"] = max(list(tok["model"]["vocab"].values()) + [a["id"] for a in tok["added_tokens"]]) + 1 + 8
cfg["bos_token_id"] = cfg["eos_token_id"] = cfg["pad_token_id"] = None
json.dump(cfg, open(sys.argv[3], "w"))
PYEOF
    expect_ok "init the $fx model" "$DT" init --config "$S/$fx.config.json" --out "$S/$fx" --seed 3
    rm -f "$S/$fx/difftrans_tokenizer.json" "$S/$fx/generation_config.json"
    cp "$HERE/../tokenizer/fixtures/$fx.json" "$S/$fx/tokenizer.json"
done
# a model trained over the ByteFallback tokenizer on text whose € is not in its vocabulary: greedy
# replies hold runs of <0xXX> tokens (E2 82 AC) that prompts and max_tokens can cut
mkdir -p "$S/fbtok" && cp "$HERE/../tokenizer/fixtures/llama2_like.json" "$S/fbtok/tokenizer.json"
for i in $(seq 1 400); do echo 'a€b c€d a€b é€'; done >"$S/fb.txt"
expect_ok "train the ByteFallback model" "$DT" train --data "$S/fb.txt" --tokenizer "$S/fbtok" --arch transformer \
    --out "$S/u8fbt" --steps 150 "${TRAIN[@]}"
expect_ok "init an untrained medium model (slow to decode)" "$DT" init --out "$S/slow" --preset medium --arch diff
# the llama baseline with a final norm at the largest float (loading refuses a NaN or inf weight, not
# one that overflows what it multiplies): its logits are inf and NaN
rm -rf "$S/broken" && cp -r "$S/llama" "$S/broken" && rm -f "$S/broken/optimizer.safetensors"
check "set the broken model's final norm to 3.4e38" "$PY" - "$S/broken/model.safetensors" <<'PYEOF'
import json, struct, sys
f = open(sys.argv[1], "r+b")
n = struct.unpack("<Q", f.read(8))[0]
t = json.loads(f.read(n))["model.norm.weight"]
assert t["dtype"] == "F32", t
a, b = t["data_offsets"]
f.seek(8 + n + a)
f.write(struct.pack("<%df" % ((b - a) // 4), *[3.4e38] * ((b - a) // 4)))
PYEOF
if [ "$N_FAIL" -ne 0 ]; then finish serve_openai; fi
expect_ok "what generate and forward answer (expect.mjs)" node "$HERE/expect.mjs" "$DT" "$S/expect.json" "$S" \
    diff="$S/diff" q8="$S/diff.q8_0" llama="$S/llama" v2="$S/v2" v2x="$S/v2x"
if [ "$N_FAIL" -ne 0 ]; then finish serve_openai; fi

# ---------------------------------------------------------------- the servers
declare -A PID PORT
SERVE_ENV=() # what a server's environment adds
# start_server NAME MODEL_NAME_RE ARCH_RE SLOTS CTX MODEL_DIR OPTIONS...: the one stdout line, exactly
start_server() {
    local name=$1 mre=$2 are=$3 slots=$4 ctx=$5 dir=$6
    shift 6
    env "${SERVE_ENV[@]}" "$DT" serve "$dir" --port 0 --threads 1 "$@" >"$S/$name.out" 2>"$S/$name.err" </dev/null &
    PID[$name]=$!
    local k line=""
    for k in $(seq 1 $((300 * SCALE))); do
        # a whole line: the newline written too
        if [ "$(wc -l <"$S/$name.out")" -ge 1 ]; then line=$(head -n 1 "$S/$name.out"); break; fi
        kill -0 "${PID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    local re="^difftrans serve: listening on http://127\.0\.0\.1:([0-9]+) \(model $mre, $are, $slots slots × $ctx tokens\)$"
    if [[ "$line" =~ $re ]]; then
        PORT[$name]=${BASH_REMATCH[1]}
        pass
    else
        fail "serve $name: the listening line" "stdout: $(head -c 400 "$S/$name.out")" "expected /$re/" \
            "stderr: $(head -c 800 "$S/$name.err" | tr '\n' '|')"
        return 1
    fi
}
# stop_server NAME [signalled]: SIGTERM (unless sent already: a second one cuts the 10 s the
# requests in flight get short), exit status 0 within 20 s
stop_server() {
    local name=$1 pid=${PID[$1]} k
    [ -z "$pid" ] && return
    [ "${2:-}" = signalled ] || kill -TERM "$pid" 2>/dev/null
    for k in $(seq 1 $((200 * SCALE))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        fail "serve $name: still running $((20 * SCALE)) s after SIGTERM"
        kill -KILL "$pid"
        wait "$pid" 2>/dev/null
    else
        wait "$pid"
        local rc=$?
        if [ $rc -eq 0 ]; then pass; else fail "serve $name: exit status $rc after SIGTERM" "stderr: $(tail -c 1500 "$S/$name.err" | tr '\n' '|')"; fi
    fi
    PID[$name]=
}
stop_all() { local n; for n in "${!PID[@]}"; do [ -n "${PID[$n]}" ] && kill -KILL "${PID[$n]}" 2>/dev/null; done; }
trap stop_all EXIT

KEY=sekrit-key-0123456789
MAXBODY=4096
SLOW_TOKENS=400
[ "${DT_ASAN:-0}" = 1 ] && SLOW_TOKENS=100
start_server main dt-diff "diffllama" 4 256 "$S/diff" --parallel 4 --chat-template chatml --attention-max-tokens 64 \
    --model-name dt-diff --cors http://allowed.example:8000,https://also.example
start_server key diff "diffllama" 2 256 "$S/diff" --parallel 2 --api-key "$KEY" --max-body $MAXBODY --quiet --cors '*'
start_server q8 'diff\.q8_0' 'diffllama( q8_0)?' 4 256 "$S/diff.q8_0"
start_server llama llama "llama" 4 256 "$S/llama"
start_server gguf 'llama\.gguf' "llama" 2 256 "$S/llama.gguf" --parallel 2
start_server v2 v2 "difftrans_v2" 4 256 "$S/v2" --ctx 256
start_server v2x v2x "difftrans_v2" 2 256 "$S/v2x" --parallel 2
start_server slow slow "diffllama" 1 1024 "$S/slow" --parallel 1 --queue 1
start_server broken broken "llama" 2 256 "$S/broken" --parallel 2
start_server u8byte u8byte "llama" 2 256 "$S/u8byte" --parallel 2 --chat-template chatml
start_server u8bpe u8bpe "llama" 2 256 "$S/u8bpe" --parallel 2 --chat-template chatml
start_server u8meta metaspace_first "llama" 2 256 "$S/metaspace_first" --parallel 2
start_server u8fb llama2_like "llama" 2 256 "$S/llama2_like" --parallel 2
start_server u8fbt u8fbt "llama" 2 256 "$S/u8fbt" --parallel 2
if [ "$N_FAIL" -ne 0 ]; then finish serve_openai; fi
url() { echo "http://127.0.0.1:${PORT[$1]}"; }
cat >"$S/config.json" <<EOF
{
 "modules": "$MODULES/node_modules",
 "dt": "$DT",
 "expect_file": "$S/expect.json",
 "servers": {
  "main": {"url": "$(url main)", "pid": ${PID[main]}, "name": "dt-diff", "attention_max_tokens": 64},
  "key": {"url": "$(url key)", "pid": ${PID[key]}, "name": "diff", "key": "$KEY", "max_body": $MAXBODY},
  "q8": {"url": "$(url q8)", "pid": ${PID[q8]}, "name": "diff.q8_0"},
  "llama": {"url": "$(url llama)", "pid": ${PID[llama]}, "name": "llama"},
  "gguf": {"url": "$(url gguf)", "pid": ${PID[gguf]}, "name": "llama.gguf"},
  "v2": {"url": "$(url v2)", "pid": ${PID[v2]}, "name": "v2"},
  "v2x": {"url": "$(url v2x)", "pid": ${PID[v2x]}, "name": "v2x"},
  "slow": {"url": "$(url slow)", "pid": ${PID[slow]}, "name": "slow", "max_tokens": $SLOW_TOKENS, "context": 1024},
  "broken": {"url": "$(url broken)", "pid": ${PID[broken]}, "name": "broken"},
  "u8byte": {"url": "$(url u8byte)", "pid": ${PID[u8byte]}, "name": "u8byte"},
  "u8bpe": {"url": "$(url u8bpe)", "pid": ${PID[u8bpe]}, "name": "u8bpe"},
  "u8meta": {"url": "$(url u8meta)", "pid": ${PID[u8meta]}, "name": "metaspace_first"},
  "u8fb": {"url": "$(url u8fb)", "pid": ${PID[u8fb]}, "name": "llama2_like"},
  "u8fbt": {"url": "$(url u8fbt)", "pid": ${PID[u8fbt]}, "name": "u8fbt"}
 }
}
EOF

# ---------------------------------------------------------------- the SDK tests
TMO=$((300 * SCALE))
expect_ok "sdk.mjs: the OpenAI SDK against the contract" node --test-reporter=spec "$HERE/sdk.mjs" "$S/config.json"
cat "$S/last.out"
expect_ok "u8.mjs: streamed text is the whole text where tokens cut characters (stop strings)" node --test-reporter=spec \
    "$HERE/u8.mjs" "$S/config.json"
cat "$S/last.out"
out_has "the server logs one line per request on stderr (method path status)" "$S/main.err" \
    "POST /v1/completions 200" "GET /v1/models 200" "POST /v1/completions 400"
# chatml on a vocabulary without <|im_end|> (the tokenizer trained above): said at the start
out_has "a chat template whose end token the vocabulary lacks is said" "$S/main.err" \
    "chat template chatml: .*vocabulary has no token <\|im_end\|>, so the template's markers are read as plain text"
out_has "a GGUF model without a chat template is said to lack its tokenizer.chat_template" "$S/gguf.err" \
    "no chat template recognised in .*llama\.gguf's tokenizer\.chat_template: /v1/chat/completions is refused"
check "--quiet: no request lines on stderr" sh -c "! grep -q 'POST /v1' '$S/key.err'"

# the page in headless Chromium (browser.mjs, the page helper's), its screenshot kept in the build tree
if [ -f "$HERE/browser.mjs" ] && { command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; } &&
   [ -d "$MODULES/node_modules/playwright-core" ]; then
    # the page's three kinds of map and V2's two pairings of query heads; under ASan the DIFF one alone
    BROWSE=(main llama v2 v2x)
    [ "${DT_ASAN:-0}" = 1 ] && BROWSE=(main)
    for m in "${BROWSE[@]}"; do
        pairs=()
        [ "$m" = v2x ] && pairs=("j,j+h")
        expect_ok "browser.mjs: the page on the $m server" node "$HERE/browser.mjs" "$(url $m)" "$(dirname "$S")/serve_page_$m.png" \
            "$MODULES/node_modules" "${pairs[@]}"
        tail -n 5 "$S/last.out"
    done
    # a cross-origin page's fetch, preflight and all, against a server of its own with --cors
    expect_ok "cors.mjs: a page of another origin calls the server (--cors)" node "$HERE/cors.mjs" "$DT" "$S/llama" \
        "$MODULES/node_modules" "$(url q8)"
    tail -n 3 "$S/last.out"
else
    echo "SKIPPED: the browser test (browser.mjs, Debian's chromium or playwright-core missing)"
fi

for n in main key q8 llama gguf v2 v2x broken u8byte u8bpe u8meta u8fb u8fbt; do stop_server $n; done

# ---------------------------------------------------------------- SIGTERM in the middle of a stream
# The slow server's one slot streams a long reply; SIGTERM arrives after its first chunk: the server
# stops accepting, lets the stream end (finish_reason set, usage, [DONE]) within 10 s, exits 0; a
# machine too slow for 1000 tokens in 10 s sees the stream end with the shutting_down error event.
curl -sN -H 'content-type: application/json' \
    -d "{\"prompt\": \"a\", \"max_tokens\": 1000, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" \
    "$(url slow)/v1/completions" >"$S/term_stream.txt" 2>/dev/null &
CURL=$!
for k in $(seq 1 $((200 * SCALE))); do grep -q '^data: {' "$S/term_stream.txt" 2>/dev/null && break; sleep 0.05; done
check "a stream has begun on the slow server" grep -q '^data: {' "$S/term_stream.txt"
if grep -q '^data: \[DONE\]' "$S/term_stream.txt"; then
    echo "NOTE: the 1000-token stream ended before SIGTERM: this machine decodes too fast for the test to catch it mid-stream"
fi
kill -TERM "${PID[slow]}"
T_TERM=$(date +%s.%N)
sleep 0.3
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'content-type: application/json' -d '{"prompt": "a", "max_tokens": 2}' \
    "$(url slow)/v1/completions" 2>/dev/null)
check "after SIGTERM no new request is served (got HTTP ${code:-none})" test "${code:-000}" != 200
stop_server slow signalled
T_EXIT=$(date +%s.%N)
T_DRAIN=$(awk -v a="$T_EXIT" -v b="$T_TERM" 'BEGIN { printf "%.1f", a - b }')
wait $CURL
if grep -q '"shutting_down"' "$S/term_stream.txt"; then
    check "the stream cut by the shutdown was given its 10 s (the server exited $T_DRAIN s after SIGTERM)" \
        awk -v t="$T_DRAIN" 'BEGIN { exit !(t >= 9.5) }'
else
    check "the stream in flight ended with a finish_reason" \
        grep -qE '"finish_reason": ?"(length|stop)"' "$S/term_stream.txt"
    done_tokens=$(grep -o '"completion_tokens": \?[0-9]*' "$S/term_stream.txt" | grep -o '[0-9]*$' | tail -n 1)
    check "the stream in flight finished (${done_tokens:-no} of 1000 tokens)" test "${done_tokens:-0}" = 1000
    check "then its usage and [DONE]" sh -c "tail -n 4 '$S/term_stream.txt' | grep -q '\"usage\"' &&
        tail -n 2 '$S/term_stream.txt' | grep -qx 'data: \[DONE\]'"
fi

# ---------------------------------------------------------------- requests cut by the shutdown
# --drain-timeout 0: what is in flight at SIGTERM is cut at once. A reply cut short is not one that
# reached max_tokens (it came back as 200 with finish_reason "length"): a whole reply is a 503
# shutting_down, a stream ends with that error event and no [DONE] (the SDKs raise it); exit 0.
start_server cut slow "diffllama" 2 1024 "$S/slow" --parallel 2 --drain-timeout 0
if [ -n "${PORT[cut]:-}" ]; then
    curl -sN -H 'content-type: application/json' -d '{"prompt": "a", "max_tokens": 1000, "stream": true}' \
        "$(url cut)/v1/completions" >"$S/cut_stream.txt" 2>/dev/null &
    CURL_S=$!
    curl -s -o "$S/cut_whole.txt" -w '%{http_code}' -H 'content-type: application/json' \
        -d '{"prompt": "a", "max_tokens": 1000}' "$(url cut)/v1/completions" >"$S/cut_whole.code" 2>/dev/null &
    CURL_W=$!
    # both in a slot, the stream past its first chunk
    for k in $(seq 1 $((200 * SCALE))); do
        grep -q '^data: {' "$S/cut_stream.txt" 2>/dev/null &&
            curl -s "$(url cut)/health" 2>/dev/null | grep -q '"slots_in_use": \?2' && break
        sleep 0.05
    done
    kill -TERM "${PID[cut]}"
    stop_server cut signalled
    wait $CURL_S $CURL_W
    check "a stream cut by the shutdown ends with the shutting_down error event" \
        sh -c "tail -n 2 '$S/cut_stream.txt' | grep -q '^data: {\"error\":.*\"code\":\"shutting_down\"'"
    check "and neither a finish_reason nor [DONE]" \
        sh -c "! grep -qE '\"finish_reason\":\"|^data: \[DONE\]' '$S/cut_stream.txt'"
    check "a whole reply cut by the shutdown is 503 shutting_down (got $(cat "$S/cut_whole.code"))" \
        sh -c "test \"\$(cat '$S/cut_whole.code')\" = 503 && grep -q '\"code\":\"shutting_down\"' '$S/cut_whole.txt'"
fi

# ---------------------------------------------------------------- stalled connections
# --max-connections 8: eight clients that connect and send half a request hold every connection (a
# ninth is closed at once); --timeout 4 closes them after 4 silent seconds, and requests go through.
# The ninth waits 1 s at most: waiting longer, it was served once the timeout had freed a connection
# (a busy machine slow to refuse it).
start_server stall llama "llama" 4 256 "$S/llama" --max-connections 8 --timeout 4 --quiet
if [ -n "${PORT[stall]:-}" ]; then
    check "--max-connections / --timeout: stalled clients hold the connections until the timeout" \
        "$PY" - "${PORT[stall]}" <<'PYEOF'
import http.client, socket, sys, time
port = int(sys.argv[1])
def get(wait=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=wait)
    try:
        c.request("GET", "/health")
        return c.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        c.close()
assert get() == 200
stalled = []
for _ in range(8):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    stalled.append(s)
time.sleep(0.5)
assert get(1) is None, "a ninth connection was served past --max-connections 8"
time.sleep(4)
t0 = time.time()
while get() != 200:
    assert time.time() - t0 < 5, "still refused 5 s after --timeout 4"
    time.sleep(0.2)
for s in stalled:
    assert s.recv(100) == b"", "a stalled connection is still open after --timeout"
PYEOF
    stop_server stall
fi

# ---------------------------------------------------------------- the load test
# Its RSS is compared before and after the load. Every connection is a thread, so glibc's defaults
# would add two kinds of noise unrelated to leaks: up to 8 malloc arenas per core, each keeping its
# own high-water mark, and a cache of up to 40 MiB of exited threads' stacks. Measured here: RSS
# between rounds moved by up to 14 MiB either way with them, by at most 2.3 MiB with two arenas
# and no stack cache. The server's own allocations are unchanged by either.
SERVE_ENV=(MALLOC_ARENA_MAX=2 GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0)
start_server load load "diffllama" 4 256 "$S/diff" --parallel 4 --model-name load --quiet
if [ -n "${PORT[load]:-}" ]; then
    node -e '
const fs = require("fs"); const c = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
c.servers.load = { url: process.argv[2], pid: Number(process.argv[3]), name: "load" };
fs.writeFileSync(process.argv[1], JSON.stringify(c, null, 1));' "$S/config.json" "$(url load)" "${PID[load]}"
    expect_ok "load.mjs: 16 clients, a few hundred requests" node --test-reporter=spec "$HERE/load.mjs" "$S/config.json"
    cat "$S/last.out"
    stop_server load
fi
for f in "$S"/*.err; do
    check "no sanitizer report in $(basename "$f")" sh -c "! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' '$f'"
done
finish serve_openai
