// load.mjs CONFIG.json — a bounded load test of `difftrans serve` on loopback (the server run.sh
// started as "load", --parallel 4): 16 concurrent clients, a few hundred requests of mixed prompt
// lengths and max_tokens, streamed and not, some through the OpenAI SDK and some raw, some
// abandoned mid-way by aborting the stream or the request. Every reply that completes must be
// complete and right: greedy ones are `difftrans generate --temperature 0` on the same prompt
// (expect.mjs computed them), usage counts agree with the choices, a prompt always counts the same
// tokens; greedy requests with stop strings, n > 1, echo and log-probabilities are the reply the
// same request got alone on the idle server. After the load the server must be idle (/health: no slot in use, nothing queued: the
// abandoned requests gave their slots back), have generated at least the tokens its replies hold,
// and its memory must not have grown. (That an abandoned stream is stopped at the next step, not run
// to its max_tokens, is sdk.mjs's test on the slow model: the tiny model here decodes 200 tokens in
// ~30 ms, about as long as the abort takes to arrive.)
//
// Under the sanitizers (DT_ASAN=1) it sends a third of the requests (ASan makes each ~10x
// slower) and skips the memory check: ASan's quarantine keeps freed memory resident on purpose, so
// RSS grows there without a leak; LeakSanitizer's report when the server exits (run.sh requires
// exit status 0) is the leak check of that build.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig, loadOpenAI, client, raw, parseSSE, rssBytes, sleep } from './lib.mjs';

const cfg = loadConfig(process.argv[2]);
const sdk = await loadOpenAI(cfg.modules);
const srv = cfg.servers.load;
const E = cfg.expect.models.diff;
const api = client(sdk.default, srv.url);
const ASAN = process.env.DT_ASAN === '1';
const CLIENTS = 16;
const TOTAL = ASAN ? 96 : 320;
const WARMUP = ASAN ? 16 : 64;

// a small deterministic generator, so that a failure can be replayed
let state = 0x9e3779b9;
function rand() { state ^= state << 13; state >>>= 0; state ^= state >>> 17; state ^= state << 5; state >>>= 0; return state / 2 ** 32; }
const pick = (a) => a[Math.floor(rand() * a.length)];

const WORDS = 'This License applies to any program or other work which contains a notice placed by the copyright holder'.split(' ');
function longPrompt() { // 1 to ~150 tokens of text
  const n = 1 + Math.floor(rand() * 60);
  return Array.from({ length: n }, () => pick(WORDS)).join(' ');
}

const stats = { greedy: 0, streamed: 0, sampled: 0, varied: 0, aborted: 0, abortedBudget: 0, completedTokens: 0 };
const promptTokens = new Map(); // prompt text → the prompt_tokens first seen

function checkPromptTokens(prompt, n) {
  const seen = promptTokens.get(prompt);
  if (seen === undefined) promptTokens.set(prompt, n);
  else assert.equal(n, seen, `${JSON.stringify(prompt)} counted ${n} prompt tokens, earlier ${seen}`);
}
function finishOf(exp) {
  const last = exp.ids[exp.ids.length - 1];
  return exp.ids.length < exp.max_tokens || E.eos_ids.includes(last) ? 'stop' : 'length';
}
function checkGreedyUsage(u, exp, what) {
  assert.equal(u.prompt_tokens, exp.prompt_ids.length, `${what}: prompt_tokens`);
  const last = exp.ids[exp.ids.length - 1];
  const ok = E.eos_ids.includes(last) ? [exp.ids.length, exp.ids.length - 1] : [exp.ids.length];
  assert.ok(ok.includes(u.completion_tokens), `${what}: completion_tokens ${u.completion_tokens}, generate made ${exp.ids.length}`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: total_tokens`);
}

// Greedy requests whose replies hold more than text: stop strings, n > 1, echo with
// log-probabilities (the prompt's and the completion's), token-id prompts. Each is sent alone first,
// on the idle server (alone[k]); under load, streamed or not, the reply must be that one: the same
// choices, texts, finish_reasons, usage and tokens, and log-probabilities within rounding (the
// batched products sum in another order, README "Continuous batching").
const STOPS = [[' the'], ['e', '\n'], ['or', 'ic', ' a'], ['\n']];
const VARIED = Array.from({ length: 12 }, (_, k) => {
  const exp = E.greedy[(k * 5) % E.greedy.length];
  const r = { model: 'load', prompt: k % 3 === 1 ? exp.prompt_ids : exp.prompt, max_tokens: 4 + 3 * k, temperature: 0,
    n: 1 + (k % 3) };
  if (k % 2 === 0) r.stop = STOPS[(k / 2) % STOPS.length];
  if (k % 4 === 1) { r.echo = true; r.logprobs = 2; } else if (k % 4 === 3) r.logprobs = 1;
  return r;
});
const alone = [];
// a reply's choices by index: text, finish_reason and the logprobs' lists, streamed chunks joined
function choicesOf(reply, events) {
  const out = [];
  for (const e of events ?? [reply]) {
    for (const c of e.choices ?? []) {
      const o = (out[c.index] ??= { text: '', finish_reason: null, tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] });
      o.text += c.text;
      if (c.finish_reason) o.finish_reason = c.finish_reason;
      for (const f of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) o[f].push(...(c.logprobs?.[f] ?? []));
    }
  }
  return out;
}
function sameReply(got, want, what) {
  assert.equal(got.length, want.length, `${what}: choices`);
  want.forEach((w, c) => {
    const g = got[c], at = `${what}: choice ${c}`;
    assert.ok(g, `${at} missing`);
    assert.equal(g.text, w.text, `${at}: text`);
    assert.equal(g.finish_reason, w.finish_reason, `${at}: finish_reason`);
    assert.deepEqual(g.tokens, w.tokens, `${at}: tokens`);
    assert.deepEqual(g.text_offset, w.text_offset, `${at}: text_offset`);
    w.token_logprobs.forEach((x, t) => {
      const y = g.token_logprobs[t];
      assert.ok(x === null ? y === null : Math.abs(y - x) <= 1e-4, `${at}: token_logprobs[${t}] ${y}, alone ${x}`);
    });
    w.top_logprobs.forEach((x, t) => {
      const y = g.top_logprobs[t];
      if (x === null) return assert.equal(y, null, `${at}: top_logprobs[${t}]`);
      assert.deepEqual(Object.keys(y).sort(), Object.keys(x).sort(), `${at}: top_logprobs[${t}]'s tokens`);
      for (const k of Object.keys(x)) assert.ok(Math.abs(y[k] - x[k]) <= 1e-4, `${at}: top_logprobs[${t}][${JSON.stringify(k)}]`);
    });
  });
}

// one request of the mix; returns nothing, throws on a wrong reply
async function one(i) {
  if (rand() < 0.15) { // greedy with stop strings, n, echo, logprobs: the reply it got alone
    const k = Math.floor(rand() * VARIED.length), req = VARIED[k];
    const what = `request ${i}: varied ${k} ${JSON.stringify(req)}`;
    let got, usage;
    if (rand() < 0.5) {
      const r = await api.completions.create(req);
      [got, usage] = [choicesOf(r), r.usage];
    } else {
      const r = await raw(srv.url, '/v1/completions', { body: { ...req, stream: true, stream_options: { include_usage: true } } });
      assert.equal(r.status, 200, `${what}: ${r.text.slice(0, 200)}`);
      const ev = parseSSE(r.text);
      assert.equal(ev[ev.length - 1], '[DONE]', `${what}: ends with [DONE]`);
      [got, usage] = [choicesOf(null, ev.slice(0, -2)), ev[ev.length - 2].usage];
    }
    sameReply(got, alone[k].choices, what);
    assert.deepEqual(usage, alone[k].usage, `${what}: usage`);
    stats.varied++;
    stats.completedTokens += usage.completion_tokens;
    return;
  }
  const kind = rand();
  if (kind < 0.3) { // greedy, not streamed, text or ids
    const exp = pick(E.greedy);
    const prompt = rand() < 0.5 ? exp.prompt : exp.prompt_ids;
    const r = await api.completions.create({ model: 'load', prompt, max_tokens: exp.max_tokens, temperature: 0 });
    const what = `request ${i}: greedy ${JSON.stringify(exp.prompt)} max_tokens ${exp.max_tokens}`;
    assert.equal(r.choices.length, 1, what);
    assert.equal(r.choices[0].text, exp.text, `${what}: the text is generate's`);
    assert.equal(r.choices[0].finish_reason, finishOf(exp), what);
    checkGreedyUsage(r.usage, exp, what);
    stats.greedy++;
    stats.completedTokens += r.usage.completion_tokens;
  } else if (kind < 0.55) { // greedy, streamed: through the SDK or raw
    const exp = pick(E.greedy);
    const what = `request ${i}: streamed greedy ${JSON.stringify(exp.prompt)} max_tokens ${exp.max_tokens}`;
    const req = { model: 'load', prompt: exp.prompt, max_tokens: exp.max_tokens, temperature: 0, stream: true,
      stream_options: { include_usage: true } };
    let text = '', finish = null, usage = null, n = 0;
    if (rand() < 0.5) {
      for await (const ch of await api.completions.create(req)) {
        if (ch.usage) usage = ch.usage;
        for (const c of ch.choices) { text += c.text; assert.equal(finish, null, `${what}: text after the end`); finish = c.finish_reason; n++; }
      }
    } else {
      const r = await raw(srv.url, '/v1/completions', { body: req });
      assert.equal(r.status, 200, `${what}: ${r.text.slice(0, 200)}`);
      const ev = parseSSE(r.text);
      assert.equal(ev[ev.length - 1], '[DONE]', `${what}: ends with [DONE]`);
      usage = ev[ev.length - 2].usage;
      for (const e of ev.slice(0, -2)) for (const c of e.choices) { text += c.text; assert.equal(finish, null, `${what}: text after the end`); finish = c.finish_reason; n++; }
    }
    assert.equal(text, exp.text, `${what}: the chunks spell generate's text`);
    assert.equal(finish, finishOf(exp), `${what}: finish_reason`);
    assert.ok(usage, `${what}: no usage chunk`);
    checkGreedyUsage(usage, exp, what);
    stats.streamed++;
    stats.completedTokens += usage.completion_tokens;
  } else if (kind < 0.8) { // sampled, mixed lengths, sometimes n = 2
    const prompt = longPrompt();
    const max = 1 + Math.floor(rand() * 40);
    const n = rand() < 0.3 ? 2 : 1;
    const r = await api.completions.create({ model: 'load', prompt, max_tokens: max, temperature: 0.9, top_p: 0.95, seed: i, n });
    const what = `request ${i}: sampled, ${prompt.length} characters, max_tokens ${max}, n ${n}`;
    assert.equal(r.choices.length, n, what);
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [...Array(n).keys()], what);
    for (const c of r.choices) {
      assert.ok(['stop', 'length'].includes(c.finish_reason), `${what}: finish_reason ${c.finish_reason}`);
      assert.equal(typeof c.text, 'string');
    }
    checkPromptTokens(prompt, r.usage.prompt_tokens);
    assert.ok(r.usage.completion_tokens <= n * max, `${what}: ${r.usage.completion_tokens} completion tokens`);
    if (r.choices.every((c) => c.finish_reason === 'length')) assert.equal(r.usage.completion_tokens, n * max, `${what}: all "length"`);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, what);
    stats.sampled++;
    stats.completedTokens += r.usage.completion_tokens;
  } else { // abandoned: a long stream aborted after its first chunks, or a request given up on
    const ac = new AbortController();
    const max = 200;
    if (rand() < 0.7) {
      const res = await fetch(srv.url + '/v1/completions', {
        method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
        body: JSON.stringify({ model: 'load', prompt: pick(WORDS), max_tokens: max, temperature: 0.9, seed: i, stream: true }),
      });
      assert.equal(res.status, 200, `request ${i}: abandoned stream`);
      const reader = res.body.getReader();
      const want = 1 + Math.floor(rand() * 3);
      for (let k = 0; k < want; k++) { const { done } = await reader.read(); if (done) break; }
      ac.abort();
      await reader.cancel().catch(() => {});
      stats.abortedBudget += max;
    } else {
      const small = 30;
      const p = fetch(srv.url + '/v1/completions', {
        method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
        body: JSON.stringify({ model: 'load', prompt: longPrompt(), max_tokens: small, temperature: 0.9, seed: i }),
      }).then((r) => r.text());
      await sleep(rand() * 20);
      ac.abort();
      await p.catch(() => {});
      stats.abortedBudget += small;
    }
    stats.aborted++;
  }
}

async function round(count, offset) {
  let next = 0;
  const failures = [];
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (next < count) {
      const i = offset + next++;
      try { await one(i); } catch (e) { failures.push(e); }
    }
  }));
  if (failures.length) {
    console.error(`${failures.length} of ${count} requests failed; the first ones:`);
    for (const f of failures.slice(0, 5)) console.error(f.message);
    throw failures[0];
  }
}

async function idle(what) {
  let h;
  for (let k = 0; k < 100; k++) {
    h = (await raw(srv.url, '/health', { method: 'GET' })).json;
    if (h && h.slots_in_use === 0 && h.queue_depth === 0) return h;
    await sleep(100);
  }
  assert.fail(`${what}: the server is not idle 10 s after the last reply: ${JSON.stringify(h)}`);
}
async function generatedTotal() {
  const r = await raw(srv.url, '/metrics', { method: 'GET' });
  const m = /^difftrans_generated_tokens_total(?:\{[^}]*\})? (\S+)$/m.exec(r.text);
  assert.ok(m, 'difftrans_generated_tokens_total in /metrics');
  return Number(m[1]);
}

test(`load: ${CLIENTS} clients, ${TOTAL} requests after ${WARMUP} to warm up`, async () => {
  for (const req of VARIED) {
    const r = await api.completions.create(req);
    alone.push({ choices: choicesOf(r), usage: r.usage });
  }
  await round(WARMUP, 0);
  await idle('after the warm-up');
  const rss0 = rssBytes(srv.pid);
  const gen0 = await generatedTotal();
  for (const k of Object.keys(stats)) stats[k] = 0;
  const t0 = Date.now();
  await round(TOTAL, WARMUP);
  const seconds = (Date.now() - t0) / 1000;
  const h = await idle('after the load');
  assert.equal(h.status, 'ok');
  const gen1 = await generatedTotal();
  const rss1 = rssBytes(srv.pid);
  console.log(`load: ${TOTAL} requests in ${seconds.toFixed(1)} s: ${stats.greedy} greedy, ${stats.streamed} streamed greedy, ` +
    `${stats.sampled} sampled, ${stats.varied} with stop / n / echo / logprobs, ${stats.aborted} abandoned; generated ${gen1 - gen0} tokens (${stats.completedTokens} in complete replies); ` +
    `RSS ${(rss0 / 2 ** 20).toFixed(1)} → ${(rss1 / 2 ** 20).toFixed(1)} MiB`);
  assert.ok(stats.greedy > 0 && stats.streamed > 0 && stats.sampled > 0 && stats.varied > 0 && stats.aborted > 0,
    'every kind of request ran');
  const extra = gen1 - gen0 - stats.completedTokens;
  assert.ok(extra >= 0, `the server counts ${gen1 - gen0} generated tokens, fewer than the ${stats.completedTokens} the replies hold`);
  assert.ok(extra <= stats.abortedBudget, `${extra} tokens for abandoned requests whose max_tokens add up to ${stats.abortedBudget}`);
  if (ASAN) {
    console.log('load: the memory check is skipped under ASan (its quarantine holds freed memory); LeakSanitizer checks at exit');
    return;
  }
  // Flat memory: after the warm-up every slot and malloc arena the server uses has been touched
  // (run.sh starts this server with two arenas and no cache of thread stacks, see there), so what
  // remains is the variation of the allocator's free lists between rounds: at most 2.3 MiB
  // measured over five rounds. The bound, 4 MiB or 10 % of the warm-up's RSS, is what a leak of
  // about 13 KB per request would add over these requests (one request's logits for its tokens,
  // its token list or its reply text are of that size).
  const allowed = Math.max(4 * 2 ** 20, 0.1 * rss0);
  assert.ok(rss1 - rss0 <= allowed,
    `RSS grew from ${(rss0 / 2 ** 20).toFixed(1)} to ${(rss1 / 2 ** 20).toFixed(1)} MiB over the load (allowed ${(allowed / 2 ** 20).toFixed(1)} MiB)`);
});
