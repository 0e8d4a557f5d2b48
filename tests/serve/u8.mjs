// u8.mjs CONFIG.json — streamed text against whole text where tokens cut characters: the servers
// run.sh started as "u8byte" (a byte-level model) and "u8bpe" (a BPE model of 300 tokens), both
// trained on a line of 2-, 3- and 4-byte UTF-8 characters, so that greedy replies are mostly
// multibyte characters and many tokens hold part of one. For random requests (completions and
// chat, stop strings taken from the greedy text so that they are hit, beside U+FFFD and strings
// that never come) the invariant: the streamed chunks concatenated are the non-streamed reply's
// text, with its finish_reason, and both are the reply without stop strings cut before the stop
// string that came first (with several stop strings, one can end before another that began
// earlier ends: the text is cut when the first one is complete, at the earliest one there then —
// which a byte-level model's reply pins to the character, a BPE model's to a range). Log-
// probabilities likewise: the streamed entries are the whole reply's, text_offset counts
// characters (code points) and a token's is the character its first byte is in, and a stop string
// keeps every token that begins before it (so every character of the text has its token).
// A character the next token may still complete must not show early (it used to go out as
// the start of a stop string beginning with it, and a stop "\ufffd" matched its stand-in).
// The same invariants for untrained models sampling over a ByteFallback tokenizer (a run of <0xXX>
// tokens valid so far turns into U+FFFDs when a byte that cannot go on with it comes: the text sent
// before must not show it) and a Metaspace one; a chat token's bytes are its own (the first byte of
// a character, not U+FFFD's), and a Metaspace prompt token's text_offset is where its space is.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { loadConfig, loadOpenAI, client } from './lib.mjs';

const cfg = loadConfig(process.argv[2]);
const sdk = await loadOpenAI(cfg.modules);
const MODELS = ['u8byte', 'u8bpe'];
const SAMPLED = ['u8fb', 'u8meta']; // untrained: replies sampled (a temperature, a seed)
const api = Object.fromEntries([...MODELS, ...SAMPLED, 'u8fbt']
  .map((m) => [m, client(sdk.default, cfg.servers[m].url)]));
const ROUNDS = process.env.DT_ASAN === '1' ? 20 : 60;

// a small deterministic generator, so that a failure can be replayed
let state = 0x2545f491;
function rand() { state ^= state << 13; state >>>= 0; state ^= state >>> 17; state ^= state << 5; state >>>= 0; return state / 2 ** 32; }
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const PROMPTS = ['héllo', 'h', 'wörld 日', '日本語', 'ÅÄÖ при', 'привет 😀', '😀\n', 'o w'];
const ALPHABET = Array.from('héllo wörld 日本語 ÅÄÖ привет 😀\n');

// a reply's log-probabilities in one shape: tokens, text_offset (completions) or bytes (chat)
function lpOf(kind, lp) {
  if (kind === 'chat') return { tokens: lp.content.map((t) => t.token), bytes: lp.content.map((t) => t.bytes) };
  return { tokens: lp.tokens, text_offset: lp.text_offset, token_logprobs: lp.token_logprobs };
}
function addLp(acc, part) {
  for (const [k, v] of Object.entries(part)) acc[k] = (acc[k] ?? []).concat(v);
  return acc;
}

async function whole(model, kind, req) {
  if (kind === 'chat') {
    const r = await api[model].chat.completions.create(req);
    const c = r.choices[0];
    return { text: c.message.content, finish: c.finish_reason, ...(c.logprobs ? { lp: lpOf(kind, c.logprobs) } : {}) };
  }
  const r = await api[model].completions.create(req);
  const c = r.choices[0];
  return { text: c.text, finish: c.finish_reason, ...(c.logprobs ? { lp: lpOf(kind, c.logprobs) } : {}) };
}

async function streamed(model, kind, req) {
  const st = kind === 'chat' ? await api[model].chat.completions.create({ ...req, stream: true })
    : await api[model].completions.create({ ...req, stream: true });
  let text = '', finish = null, ends = 0, lp = null;
  for await (const ch of st) {
    for (const c of ch.choices) {
      assert.equal(finish, null, 'a chunk after the finish_reason');
      text += kind === 'chat' ? (c.delta?.content ?? '') : c.text;
      if (c.logprobs) lp = addLp(lp ?? {}, lpOf(kind, c.logprobs));
      if (c.finish_reason !== null && c.finish_reason !== undefined) { finish = c.finish_reason; ends++; }
    }
  }
  assert.equal(ends, 1, 'one finish_reason');
  // a chat chunk without entries has logprobs null (the whole reply: an empty list)
  if (!lp && req.logprobs !== undefined) {
    lp = kind === 'chat' ? { tokens: [], bytes: [] } : lpOf(kind, { tokens: [], text_offset: [], token_logprobs: [] });
  }
  return { text, finish, ...(lp ? { lp } : {}) };
}

// A byte-level model's log-probabilities against its text: one token per byte, a completion's
// text_offset the character each byte is in (a U+FFFD at the end, a character max_tokens cut
// short, has one to three), a chat token's bytes the text's bytes (decoded as the server does).
function checkByteLp(kind, text, lp, what) {
  if (kind === 'chat') {
    const bytes = Uint8Array.from(lp.bytes.flat());
    assert.equal(new TextDecoder().decode(bytes), text, `${what}: the tokens' bytes are the text's`);
    return;
  }
  const chars = [...text], cut = chars.length && chars[chars.length - 1] === '\ufffd' ? 1 : 0;
  const want = chars.slice(0, chars.length - cut).flatMap((ch, i) => Array(Buffer.byteLength(ch)).fill(i));
  const got = lp.text_offset;
  assert.deepEqual(got.slice(0, want.length), want, `${what}: text_offset`);
  const rest = got.slice(want.length);
  assert.ok(cut ? rest.length >= 1 && rest.length <= 3 && rest.every((o) => o === chars.length - 1) : !rest.length,
    `${what}: text_offset of the last character ${JSON.stringify(rest)}`);
}

function request(kind, prompt, maxTokens, stop, logprobs, sampling) {
  const req = { model: 'm', max_tokens: maxTokens, temperature: 0, ...(sampling ?? {}) };
  if (logprobs) Object.assign(req, kind === 'chat' ? { logprobs: true, top_logprobs: 1 } : { logprobs: 1 });
  if (kind === 'chat') req.messages = [{ role: 'user', content: prompt }];
  else req.prompt = prompt;
  if (stop !== undefined) req.stop = stop;
  return req;
}

// Where a reply with stop strings ends, in characters of the reply without them: null when no stop
// string is in it; else [lo, hi]: lo the earliest occurrence, hi the earliest one inside the text at
// the moment the first occurrence is complete, where the server cuts whatever its tokens (a token
// of several characters that shows an earlier occurrence at once, lo, still cuts at hi).
function stopRange(chars, stops) {
  const occ = [];
  for (const s of stops) {
    const sc = [...s];
    for (let i = 0; i + sc.length <= chars.length; i++) if (sc.every((c, k) => chars[i + k] === c)) occ.push([i, i + sc.length]);
  }
  if (!occ.length) return null;
  const first = Math.min(...occ.map((o) => o[1]));
  return [Math.min(...occ.map((o) => o[0])), Math.min(...occ.filter((o) => o[1] <= first).map((o) => o[0]))];
}

// the log-probabilities of a reply cut at character `cut` by a stop string: those of the tokens
// that begin before it, the same as without the stop string
function checkLpCut(model, base, cut, got, what) {
  const lp = base.lp, keep = lp.text_offset ? lp.text_offset.filter((o) => o < cut).length : null;
  if (keep === null) return; // chat: no offsets (checkByteLp has its bytes)
  assert.deepEqual(got.lp, Object.fromEntries(Object.entries(lp).map(([k, v]) => [k, v.slice(0, keep)])),
    `${what}: the tokens that begin before the stop string`);
}

// the reply with stops against the one without: cut where a stop string begins, in the range
function checkCut(model, base, stops, got, what) {
  const chars = [...base.text], range = stopRange(chars, stops);
  if (!range) {
    assert.deepEqual(got, base, `${what}: no stop string in the text`);
    return false;
  }
  const cut = [...got.text].length;
  if (base.lp) checkLpCut(model, base, cut, got, what);
  assert.equal(got.finish, 'stop', `${what}: finish_reason`);
  assert.equal(chars.slice(0, cut).join(''), got.text, `${what}: a prefix of the reply without stops`);
  const rest = chars.slice(cut).join('');
  assert.ok(stops.some((s) => rest.startsWith(s)), `${what}: cut where no stop string begins (${JSON.stringify(got.text)})`);
  assert.ok(!stops.some((s) => got.text.includes(s)), `${what}: the text holds a stop string`);
  // where the text first holds a stop string, whatever its tokens (dt_stop_find: the one that ends
  // first), as a byte-level model's one-byte tokens find it
  assert.equal(cut, range[1], `${what}: cut at character ${cut}, not ${range[1]}`);
  return true;
}

for (const model of MODELS) {
  test(`${model}: greedy replies are multibyte text (the test's premise)`, async () => {
    const r = await whole(model, 'completion', request('completion', 'héllo', 24));
    assert.ok([...r.text].filter((ch) => ch.codePointAt(0) > 0x7f).length >= 6, `too little multibyte text: ${JSON.stringify(r.text)}`);
  });

  test(`${model}: a stop string after a multibyte character is never sent in part ("ÄÖ", "\\ufffd")`, async () => {
    const base = await whole(model, 'completion', request('completion', 'héllo', 40));
    for (const stop of ['ÄÖ', 'Ö', '本語', '😀', '\ufffd', ['xyz', 'ет 😀']]) {
      const w = await whole(model, 'completion', request('completion', 'héllo', 40, stop));
      const s = await streamed(model, 'completion', request('completion', 'héllo', 40, stop));
      checkCut(model, base, [stop].flat(), w, `stop ${JSON.stringify(stop)}`);
      assert.deepEqual(s, w, `stop ${JSON.stringify(stop)}: streamed`);
    }
  });

  test(`${model}: logprobs: text_offset in characters, a token's the character its first byte is in; a stop keeps the ` +
    'tokens that begin before it', async () => {
    // the tester's case: greedy " ...ÅÄÖ..." with stop "Ö": the text ends " ÅÄ", both byte tokens of Ä reported
    const base = await whole(model, 'completion', request('completion', 'héllo', 30, undefined, true));
    assert.ok(base.text.includes('Ö'), `test setup: ${JSON.stringify(base.text)}`);
    for (const stop of ['Ö', 'ÄÖ', '日本', 'ö']) {
      const req = request('completion', 'héllo', 30, stop, true);
      const w = await whole(model, 'completion', req);
      const s = await streamed(model, 'completion', req);
      checkCut(model, base, [stop], w, `stop ${JSON.stringify(stop)}`);
      assert.deepEqual(s, w, `stop ${JSON.stringify(stop)}: streamed`);
      if (model === 'u8byte') checkByteLp('completion', w.text, w.lp, `stop ${JSON.stringify(stop)}`);
    }
    if (model === 'u8byte') {
      checkByteLp('completion', base.text, base.lp, 'no stop');
      // echo: the prompt's tokens too, offsets into the prompt + completion text
      const e = await api[model].completions.create({ model: 'm', prompt: '日本 héllo 😀', max_tokens: 4, temperature: 0,
        echo: true, logprobs: 0 });
      const c = e.choices[0];
      assert.equal(c.logprobs.text_offset.length, Buffer.byteLength(c.text));
      checkByteLp('completion', c.text, c.logprobs, 'echo');
      assert.deepEqual(c.logprobs.text_offset.slice(0, 8), [0, 0, 0, 1, 1, 1, 2, 3], 'echo: 日本 h');
    }
  });

  test(`${model}: chat logprobs: the tokens' bytes, one after another, are the text's`, async () => {
    let parts = 0; // tokens that hold part of a character
    for (const prompt of PROMPTS) {
      const w = await whole(model, 'chat', request('chat', prompt, 24, undefined, true));
      checkByteLp('chat', w.text, w.lp, `${JSON.stringify(prompt)} (${JSON.stringify(w.text)})`);
      for (const b of w.lp.bytes) {
        try { new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(b)); } catch { parts++; }
      }
    }
    if (model === 'u8bpe') assert.ok(parts > 0, 'no token held part of a character (the test\'s premise)');
  });

  randomRequests(model);
}

for (const model of SAMPLED) {
  test(`${model}: a sampled reply (a temperature, a seed) is the same twice (the test's premise)`, async () => {
    const req = request('completion', 'o w', 24, undefined, true, { temperature: 1.5, seed: 5 });
    assert.deepEqual(await whole(model, 'completion', req), await whole(model, 'completion', req));
  });
  randomRequests(model, true);
}

test('u8meta: echo: a Metaspace token begins at its space, not where its text alone would put it', async () => {
  const r = await api.u8meta.completions.create({ model: 'm', prompt: 'hello world hello', max_tokens: 0, echo: true,
    logprobs: 0 });
  const c = r.choices[0], lp = c.logprobs;
  assert.equal(c.text, 'hello world hello');
  // ▁hello ▁world ▁hello between the special tokens the tokenizer adds: " world" begins at its space
  // (decoded alone, a token loses its ▁: the offsets came out one short a word, and the tokens'
  // strings had no space); the first ▁ is the one the decoder drops from the text's start
  const w = lp.tokens.indexOf(' world');
  assert.ok(w >= 1 && lp.tokens[w - 1] === ' hello' && lp.tokens[w + 1] === ' hello', JSON.stringify(lp.tokens));
  assert.deepEqual(lp.text_offset.slice(w - 1, w + 2), [0, 5, 11]);
  assert.equal(lp.tokens.slice(w, w + 2).join(''), c.text.slice(5));
});

// A model trained over the ByteFallback tokenizer on text with €, which it writes as <0xE2> <0x82>
// <0xAC>: a run's tokens are placed by their bytes. A run of valid UTF-8 is its characters (é€ in
// one run: <0xE2> begins the second); one that is not (max_tokens cut it, a byte that cannot go on
// with it) is one U+FFFD a token, each token at its own (they were all put at the run's first, and
// the token after the run as many on). A prompt that ends inside a run gives the completion the
// character its generated bytes complete, once: the echo is the sequence's text (it was the prompt's
// text as it read alone, U+FFFDs, then the completion with the character again).
test('u8fbt: ByteFallback runs: text_offset a character or a U+FFFD a token; a prompt ending in a run', async () => {
  const tok = JSON.parse(fs.readFileSync(new URL('../tokenizer/fixtures/llama2_like.json', import.meta.url), 'utf8'));
  const id = (t) => { assert.ok(t in tok.model.vocab, t); return tok.model.vocab[t]; };
  const byte = (v) => id(`<0x${v.toString(16).toUpperCase().padStart(2, '0')}>`);
  const [bos, a, b] = [1, id('\u2581a'), id('b')];
  const [e0, e1, e2, c3, a9] = [0xE2, 0x82, 0xAC, 0xC3, 0xA9].map(byte);
  const cases = [
    // [prompt, max_tokens, echo, text, text_offset]
    [[bos, a], 4, false, '€b', [0, 0, 0, 1]], // the premise: greedy € then b
    [[bos, a], 2, false, '\ufffd\ufffd', [0, 1]],
    [[bos, a], 2, true, 'a\ufffd\ufffd', [0, 0, 1, 2]],
    [[bos, a, e0], 3, false, '€b', [0, 0, 1]],
    [[bos, a, e0], 3, true, 'a€b', [0, 0, 1, 1, 1, 2]],
    [[bos, a, e0, e1, e2, e0], 3, true, 'a€€b', [0, 0, 1, 1, 1, 2, 2, 2, 3]],
    [[bos, a, e0, e1, e2, e0], 3, false, '€b', [0, 0, 1]],
    [[bos, a, c3, a9, e0, e1, e2, b], 0, true, 'aé€b', [0, 0, 1, 1, 2, 2, 2, 3]],
    [[bos, a, c3, a9, e0, b], 0, true, 'a\ufffd\ufffd\ufffdb', [0, 0, 1, 2, 3, 4]],
    [[bos, a, c3, a9, e0], 1, true, 'a\ufffd\ufffd\ufffd\ufffd', [0, 0, 1, 2, 3, 4]],
  ];
  for (const [prompt, maxTokens, echo, text, offsets] of cases) {
    const req = { model: 'm', prompt, max_tokens: maxTokens, temperature: 0, logprobs: 0, echo };
    const what = `${JSON.stringify(prompt)} max_tokens ${maxTokens} echo ${echo}`;
    const w = await whole('u8fbt', 'completion', req);
    assert.equal(w.text, text, `${what}: text`);
    assert.deepEqual(w.lp.text_offset, offsets, `${what}: text_offset`);
    if (maxTokens > 0) assert.deepEqual(await streamed('u8fbt', 'completion', req), w, `${what}: streamed`);
  }
});

function randomRequests(model, sampled = false) {
  test(`${model}: random requests, streamed = whole = the reply without stops, cut at the first (${ROUNDS} requests)`, async () => {
    const bases = new Map(); // the reply without stop strings, by kind, prompt and max_tokens
    let hits = 0;
    for (let i = 0; i < ROUNDS; i++) {
      const kind = !sampled && rand() < 0.3 ? 'chat' : 'completion';
      const prompt = pick(PROMPTS), maxTokens = int(1, 48), logprobs = rand() < 0.5;
      const sampling = sampled ? { temperature: pick([0.7, 1.5, 3]), seed: int(0, 9) } : undefined;
      const key = `${kind}\u0000${prompt}\u0000${maxTokens}\u0000${logprobs}\u0000${JSON.stringify(sampling)}`;
      if (!bases.has(key)) {
        bases.set(key, await whole(model, kind, request(kind, prompt, maxTokens, undefined, logprobs, sampling)));
      }
      const base = bases.get(key);
      const chars = [...base.text];
      const stops = [];
      for (let k = int(rand() < 0.2 ? 0 : 1, 3); k > 0; k--) {
        const r = rand();
        if (r < 0.6 && chars.length) { // a piece of the reply: hit
          const a = int(0, chars.length - 1);
          stops.push(chars.slice(a, a + int(1, 3)).join(''));
        } else if (r < 0.7) stops.push('\ufffd');
        else stops.push(Array.from({ length: int(1, 3) }, () => pick(ALPHABET)).join(''));
      }
      const stop = stops.length === 1 && rand() < 0.5 ? stops[0] : stops;
      const req = request(kind, prompt, maxTokens, stop, logprobs, sampling);
      const what = `${kind} ${JSON.stringify(prompt)} max_tokens ${maxTokens} stop ${JSON.stringify(stop)} (no stop: ${JSON.stringify(base.text)})`;
      const w = await whole(model, kind, req);
      const s = await streamed(model, kind, req);
      hits += checkCut(model, base, stops, w, `${what}: whole`);
      if (logprobs && model === 'u8byte') checkByteLp(kind, w.text, w.lp, what);
      assert.deepEqual(s, w, `${what}: streamed`);
    }
    assert.ok(hits >= ROUNDS / 3, `only ${hits} of ${ROUNDS} requests met a stop string`);
  });
}
