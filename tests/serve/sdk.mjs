// sdk.mjs CONFIG.json — `difftrans serve` against docs/serve contract (notes: serve_api.md), with the
// official OpenAI Node SDK as the client wherever the SDK can send the request, raw fetch where it
// cannot (bodies that are not JSON, too large, missing keys, unknown paths). run.sh starts the
// servers and writes CONFIG: their URLs and pids, the difftrans binary, and what the command line
// answers for the same requests (expect.mjs). node:test runs the tests one after another, so the
// metrics deltas below are exactly one request's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { loadConfig, loadOpenAI, client, raw, rawPath, parseSSE } from './lib.mjs';

const cfg = loadConfig(process.argv[2]);
const sdk = await loadOpenAI(cfg.modules);
const OpenAI = sdk.default;
const S = cfg.servers;
const E = cfg.expect.models;
const main = client(OpenAI, S.main.url);
const keyed = client(OpenAI, S.key.url, S.key.key);
const near = (a, b, tol, what) => assert.ok(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b} (tolerance ${tol})`);
const isLogprob = (x, what) => assert.ok(typeof x === 'number' && Number.isFinite(x) && x <= 0, `${what}: ${x} is not a log-probability`);

// what a greedy choice must say, from `difftrans generate`: its text, and "stop" when generate's
// last id is an end-of-sequence id (generate prints the stop id; the text leaves it out)
function finishOf(exp, model) {
  const last = exp.ids[exp.ids.length - 1];
  return exp.ids.length < exp.max_tokens || E[model].eos_ids.includes(last) ? 'stop' : 'length';
}
function checkUsage(u, prompt, completion, what) {
  assert.equal(u.prompt_tokens, prompt, `${what}: usage.prompt_tokens`);
  if (completion !== undefined) assert.equal(u.completion_tokens, completion, `${what}: usage.completion_tokens`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: usage.total_tokens`);
}
function genTokens(exp, model) { // completion_tokens of a greedy reply: generate's ids, an end id included or not
  const last = exp.ids[exp.ids.length - 1];
  return E[model].eos_ids.includes(last) ? [exp.ids.length, exp.ids.length - 1] : [exp.ids.length];
}
function checkGreedy(choice, exp, model, what) {
  assert.equal(choice.text, exp.text, `${what}: the text of ${JSON.stringify(exp.prompt)} max_tokens ${exp.max_tokens} is generate's`);
  assert.equal(choice.finish_reason, finishOf(exp, model), `${what}: finish_reason`);
}
function encode(text, special) {
  const args = ['tokenizer', 'encode', '--tokenizer', E.diff.dir, ...(special ? ['--add-special'] : [])];
  return execFileSync(cfg.dt, args, { input: text }).toString().trim().split(/\s+/).map(Number);
}
// an SDK call that must fail: the error class, status and OpenAI-shaped body
async function sdkError(promise, Cls, status, type, code, what) {
  let err = null;
  try { await promise; } catch (e) { err = e; }
  assert.ok(err, `${what}: the request succeeded`);
  assert.ok(err instanceof Cls, `${what}: ${err?.constructor?.name} (${err?.message}), expected ${Cls.name}`);
  assert.equal(err.status, status, `${what}: status`);
  assert.equal(err.type, type, `${what}: error.type (${err.message})`);
  if (code !== undefined) assert.equal(err.code, code, `${what}: error.code (${err.message})`);
  assert.equal(typeof err.error?.message, 'string', `${what}: error.message`);
  assert.ok('param' in err.error && 'code' in err.error, `${what}: error has param and code: ${JSON.stringify(err.error)}`);
  return err;
}
function rawError(r, status, type, code, what) {
  assert.equal(r.status, status, `${what}: status (body ${r.text.slice(0, 300)})`);
  assert.ok(r.json && r.json.error, `${what}: the body is not an OpenAI error: ${r.text.slice(0, 300)}`);
  const e = r.json.error;
  assert.equal(typeof e.message, 'string', `${what}: error.message`);
  assert.ok(e.message.length > 0, `${what}: empty message`);
  assert.equal(e.type, type, `${what}: error.type`);
  assert.ok('param' in e && 'code' in e, `${what}: error has param and code: ${JSON.stringify(e)}`);
  if (code !== undefined) assert.equal(e.code, code, `${what}: error.code`);
  assert.match(r.headers.get('content-type') ?? '', /application\/json/, `${what}: content-type`);
  return e;
}

// ---------------------------------------------------------------- completions

test('completions: a text prompt at temperature 0 is `difftrans generate --temperature 0`', async () => {
  for (const exp of E.diff.greedy) {
    const r = await main.completions.create({ model: 'any-name', prompt: exp.prompt, max_tokens: exp.max_tokens, temperature: 0 });
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.model, 'any-name', 'the model field is echoed as given');
    assert.ok(Number.isInteger(r.created) && Math.abs(r.created - Date.now() / 1000) < 600, `created ${r.created}`);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].index, 0);
    assert.equal(r.choices[0].logprobs, null, 'logprobs null unless asked for');
    checkGreedy(r.choices[0], exp, 'diff', 'text prompt');
    assert.ok(genTokens(exp, 'diff').includes(r.usage.completion_tokens), `completion_tokens ${r.usage.completion_tokens}`);
    checkUsage(r.usage, exp.prompt_ids.length, undefined, 'text prompt (tokenised as generate --prompt, BOS included)');
  }
});

test('completions: the other models (q8_0, llama, its GGUF file, V2) are generate too', async () => {
  // the GGUF file holds the llama baseline's weights: the same greedy replies
  for (const [name, srv, want] of [['q8', S.q8, 'q8'], ['llama', S.llama, 'llama'], ['gguf', S.gguf, 'llama'], ['v2', S.v2, 'v2']]) {
    const c = client(OpenAI, srv.url);
    for (const exp of E[want].greedy) {
      const r = await c.completions.create({ model: name, prompt: exp.prompt, max_tokens: exp.max_tokens, temperature: 0 });
      checkGreedy(r.choices[0], exp, want, name);
      checkUsage(r.usage, exp.prompt_ids.length, undefined, name);
    }
  }
  const models = await client(OpenAI, S.gguf.url).models.list();
  assert.equal(models.data[0].id, S.gguf.name, 'a GGUF model\'s id is its file name');
});

test('completions: a token-id prompt is taken as given', async () => {
  for (const exp of E.diff.greedy.filter((g) => g.max_tokens === 24)) {
    const r = await main.completions.create({ model: 'm', prompt: exp.prompt_ids, max_tokens: 24, temperature: 0 });
    checkGreedy(r.choices[0], exp, 'diff', 'id prompt');
    checkUsage(r.usage, exp.prompt_ids.length, undefined, 'id prompt');
    // without the BOS the model sees another sequence: prompt_tokens says so
    const r2 = await main.completions.create({ model: 'm', prompt: exp.prompt_ids.slice(1), max_tokens: 2, temperature: 0 });
    checkUsage(r2.usage, exp.prompt_ids.length - 1, undefined, 'id prompt without BOS: no BOS added');
  }
});

test('completions: a list of prompts (text and ids), n > 1, index = prompt_index·n + j', async () => {
  const exps = E.diff.greedy.filter((g) => g.max_tokens === 6).slice(0, 3);
  for (const prompt of [exps.map((e) => e.prompt), exps.map((e) => e.prompt_ids)]) {
    const r = await main.completions.create({ model: 'm', prompt, max_tokens: 6, temperature: 0, n: 2 });
    assert.equal(r.choices.length, 6);
    const byIndex = [...r.choices].sort((a, b) => a.index - b.index);
    assert.deepEqual(byIndex.map((c) => c.index), [0, 1, 2, 3, 4, 5]);
    byIndex.forEach((c, i) => checkGreedy(c, exps[Math.floor(i / 2)], 'diff', `choice ${i}`));
    const prompts = exps.reduce((s, e) => s + e.prompt_ids.length, 0);
    const gen = byIndex.reduce((s, c) => s + (c.finish_reason === 'length' ? 6 : 0), 0);
    checkUsage(r.usage, prompts, byIndex.every((c) => c.finish_reason === 'length') ? gen : undefined,
      'prompt tokens counted once per prompt, completion tokens summed over choices');
  }
});

test('completions: sampling with n > 1 gives different choices; a seed reproduces them; without one each request draws anew',
  async () => {
  const req = { model: 'm', prompt: 'The program', max_tokens: 24, temperature: 1, n: 3, seed: 123 };
  const a = await main.completions.create(req);
  const b = await main.completions.create(req);
  const texts = (r) => [...r.choices].sort((x, y) => x.index - y.index).map((c) => c.text);
  assert.deepEqual(texts(a), texts(b), 'the same seed gives the same choices');
  assert.ok(new Set(texts(a)).size > 1, `n = 3 sampled choices are all ${JSON.stringify(texts(a)[0])}`);
  const c = await main.completions.create({ ...req, seed: 124 });
  assert.notDeepEqual(texts(c), texts(a), 'another seed gives other choices');
  // choice j drew with seed + j, another request's seed: seed 123's second choice was seed 124's first
  const shared = texts(c).filter((t) => texts(a).includes(t));
  assert.deepEqual(shared, [], 'seeds 123 and 124 with n = 3 share choices');
  const greedy = E.diff.greedy.find((g) => g.prompt === 'The program' && g.max_tokens === 24);
  assert.ok(texts(a).some((t) => t !== greedy.text), 'temperature 1 is not greedy');
  // as OpenAI's: without a seed the same request twice samples two replies (a fixed default seed
  // gave every unseeded request the same text); null is no seed
  const { seed, ...noSeed } = req;
  const d = await main.completions.create(noSeed);
  const e = await main.completions.create({ ...noSeed, seed: null });
  assert.notDeepEqual(texts(d), texts(e), 'without a seed two requests sampled the same 3 × 24 tokens');
  assert.notDeepEqual(texts(d), texts(a), 'without a seed, the choices of seed 123');
});

test('completions: top_k 1, a tiny top_p and min_p 1 are greedy at temperature 1; max_tokens defaults to 16', async () => {
  const exp = E.diff.greedy.find((g) => g.prompt === 'You may' && g.max_tokens === 24);
  const k = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 24, temperature: 1, top_k: 1, seed: 5 });
  checkGreedy(k.choices[0], exp, 'diff', 'top_k 1');
  const p = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 24, temperature: 1, top_p: 1e-6, seed: 5 });
  checkGreedy(p.choices[0], exp, 'diff', 'top_p 1e-6');
  // min_p (vLLM's field): 1 keeps the most likely token alone; read, not ignored
  const mp = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 24, temperature: 1, top_p: 1, min_p: 1,
    seed: 5 });
  checkGreedy(mp.choices[0], exp, 'diff', 'min_p 1');
  const d = await main.completions.create({ model: 'm', prompt: exp.prompt, temperature: 0 });
  if (finishOf(exp, 'diff') === 'length') assert.equal(d.usage.completion_tokens, 16, 'max_tokens defaults to 16');
  assert.ok(exp.text.startsWith(d.choices[0].text), `${JSON.stringify(d.choices[0].text)} is not a prefix of ${JSON.stringify(exp.text)}`);
  // accepted: zero penalties, user, unknown fields
  const z = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 6, temperature: 0, presence_penalty: 0,
    frequency_penalty: 0, user: 'someone', an_unknown_field: { a: 1 } });
  assert.equal(z.choices[0].text, E.diff.greedy.find((g) => g.prompt === 'You may' && g.max_tokens === 6).text);
});

// the first stop candidate of a greedy text: a piece that starts after its beginning
function stopCase(exp) {
  const stop = exp.text.slice(3, 6);
  const cut = exp.text.slice(0, exp.text.indexOf(stop));
  return { stop, cut };
}

test('completions: stop strings cut the text before them, finish_reason "stop"', async () => {
  for (const exp of E.diff.greedy.filter((g) => g.max_tokens === 24).slice(0, 3)) {
    const { stop, cut } = stopCase(exp);
    assert.ok(stop.length === 3 && exp.text.length > 6, `test setup: generate's text ${JSON.stringify(exp.text)} is too short`);
    for (const s of [stop, ['never-in-the-text', stop], ['xyzzy', 'plugh', 'never', stop]]) {
      const r = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 24, temperature: 0, stop: s });
      assert.equal(r.choices[0].text, cut, `stop ${JSON.stringify(s)} on ${JSON.stringify(exp.text)}`);
      assert.equal(r.choices[0].finish_reason, 'stop');
      // streamed: what is held back while it could begin a stop string never shows
      const st = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 24, temperature: 0, stop: s, stream: true });
      let text = '';
      for await (const ch of st) for (const c of ch.choices) text += c.text;
      assert.equal(text, cut, `streamed, stop ${JSON.stringify(s)}`);
    }
    const none = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 24, temperature: 0, stop: ['qqqq'] });
    checkGreedy(none.choices[0], exp, 'diff', 'a stop string that never comes');
  }
});

// ---------------------------------------------------------------- streaming

async function collectStream(stream) {
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  return chunks;
}

test('streaming completions: the chunks concatenate to the reply, each choice ends once, a final usage chunk', async () => {
  const exps = E.diff.greedy.filter((g) => g.max_tokens === 24).slice(0, 2);
  const req = { model: 'streamer', prompt: exps.map((e) => e.prompt), max_tokens: 24, temperature: 0, n: 2 };
  const whole = await main.completions.create(req);
  const chunks = await collectStream(await main.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }));
  assert.ok(chunks.length > 4, `only ${chunks.length} chunks: not streamed`);
  const id = chunks[0].id;
  const text = {}, ends = {};
  for (const ch of chunks.slice(0, -1)) {
    assert.equal(ch.object, 'text_completion');
    assert.equal(ch.id, id, 'one id for the whole stream');
    assert.equal(ch.model, 'streamer');
    assert.ok(ch.choices.length >= 1, 'only the last chunk has no choices');
    for (const c of ch.choices) {
      assert.ok(!ends[c.index], `choice ${c.index} has a chunk after its finish_reason`);
      text[c.index] = (text[c.index] ?? '') + c.text;
      if (c.finish_reason !== null) ends[c.index] = c.finish_reason;
    }
  }
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, [], 'the usage chunk has "choices": []');
  assert.deepEqual(last.usage, whole.usage, 'the final usage is the non-streamed one');
  for (const c of whole.choices) {
    assert.equal(text[c.index], c.text, `choice ${c.index}: the chunks concatenate to the non-streamed text`);
    assert.equal(ends[c.index], c.finish_reason, `choice ${c.index}: finish_reason`);
  }
  // on the wire: text/event-stream, `data: {json}` events, the usage chunk, then [DONE]
  const r = await raw(S.main.url, '/v1/completions', { body: { ...req, stream: true, stream_options: { include_usage: true } } });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /^text\/event-stream/);
  const ev = parseSSE(r.text);
  assert.equal(ev[ev.length - 1], '[DONE]');
  assert.deepEqual(ev[ev.length - 2].usage, whole.usage);
  assert.equal(ev.filter((e) => e === '[DONE]').length, 1);
  for (const e of ev.slice(0, -2)) for (const c of e.choices) assert.ok('logprobs' in c && 'finish_reason' in c, JSON.stringify(c));
});

test('streaming completions: logprobs ride along with the chunks', async () => {
  const r = await raw(S.main.url, '/v1/completions', { body: { prompt: 'The program', max_tokens: 6, temperature: 0, logprobs: 2, stream: true,
    stream_options: { include_usage: true } } });
  const ev = parseSSE(r.text);
  let n = 0;
  for (const e of ev.slice(0, -2)) for (const c of e.choices) if (c.logprobs) {
    n += c.logprobs.tokens.length;
    c.logprobs.token_logprobs.forEach((x) => isLogprob(x, 'streamed token_logprob'));
  }
  assert.equal(n, ev[ev.length - 2].usage.completion_tokens, 'one logprob per streamed token');
  // with echo the prompt's text comes with its tokens' entries (it came with the first token's
  // alone, the others in the next chunk with the first generated token's text)
  const body = { prompt: 'The program', max_tokens: 3, temperature: 0, logprobs: 0, echo: true, stream: true,
    stream_options: { include_usage: true } };
  const e = parseSSE((await raw(S.main.url, '/v1/completions', { body })).text);
  const first = e[0].choices[0];
  assert.ok(first.text.startsWith('The program'), JSON.stringify(first.text));
  assert.ok(first.logprobs.tokens.length >= e[e.length - 2].usage.prompt_tokens, JSON.stringify(first.logprobs));
});

// ---------------------------------------------------------------- chat

const MESSAGES = [{ role: 'system', content: 'You are a license.' }, { role: 'user', content: 'What may you do?' }];
function chatml(messages) {
  return messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
}

test('chat completions with --chat-template chatml: the reply is the completion of the ChatML text', async () => {
  const r = await main.chat.completions.create({ model: 'chat', messages: MESSAGES, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-|^cmpl-/);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  // the same model on the rendered template (the vocabulary has no <|im_start|>: it is text),
  // with or without a BOS before it
  const text = chatml(MESSAGES);
  const alt = [];
  for (const ids of [encode(text, true), encode(text, false)]) {
    const p = await main.completions.create({ model: 'm', prompt: ids, max_tokens: 12, temperature: 0 });
    alt.push({ ids: ids.length, text: p.choices[0].text });
  }
  const match = alt.find((a) => a.text === c.message.content && a.ids === r.usage.prompt_tokens);
  assert.ok(match, `chat reply ${JSON.stringify(c.message.content)} (${r.usage.prompt_tokens} prompt tokens) is not the completion of the ChatML text: ${JSON.stringify(alt)}`);
  checkUsage(r.usage, match.ids, undefined, 'chat');
  // max_completion_tokens is max_tokens
  const m = await main.chat.completions.create({ model: 'chat', messages: MESSAGES, max_completion_tokens: 3, temperature: 0 });
  assert.ok(m.usage.completion_tokens <= 3 && c.message.content.startsWith(m.choices[0].message.content), JSON.stringify(m));
});

test('chat completions streamed: role first, then content deltas that concatenate to the reply, usage, [DONE]', async () => {
  const req = { model: 'chat', messages: MESSAGES, max_tokens: 12, temperature: 0, n: 2 };
  const whole = await main.chat.completions.create(req);
  const chunks = await collectStream(await main.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }));
  const content = {}, role = {}, ends = {};
  for (const ch of chunks.slice(0, -1)) {
    assert.equal(ch.object, 'chat.completion.chunk');
    for (const c of ch.choices) {
      if (content[c.index] === undefined) {
        assert.equal(c.delta.role, 'assistant', `choice ${c.index}: the first delta gives the role`);
        role[c.index] = true;
        content[c.index] = '';
      }
      if (c.delta.content) content[c.index] += c.delta.content;
      if (c.finish_reason) ends[c.index] = c.finish_reason;
    }
  }
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, whole.usage);
  for (const c of whole.choices) {
    assert.equal(content[c.index], c.message.content, `choice ${c.index}`);
    assert.equal(ends[c.index], c.finish_reason);
  }
  const r = await raw(S.main.url, '/v1/chat/completions', { body: { ...req, stream: true } });
  const ev = parseSSE(r.text);
  assert.equal(ev[ev.length - 1], '[DONE]');
  // not asked for, no usage chunk (as OpenAI): every chunk has a choice, the common loop over
  // chunk.choices[0] runs to the end, and no chunk carries "usage"
  for (const e of ev.slice(0, -1)) {
    assert.ok(e.choices.length > 0 && e.choices[0].delta, `a chunk without a choice: ${JSON.stringify(e)}`);
    assert.ok(!('usage' in e), `usage in a chunk not asked for: ${JSON.stringify(e)}`);
  }
  let said = '';
  for await (const ch of await main.chat.completions.create({ ...req, n: 1, stream: true })) said += ch.choices[0].delta.content ?? '';
  assert.equal(said, whole.choices[0].message.content);
  // asked for: usage null in every chunk but the last
  for (const e of chunks.slice(0, -1)) assert.equal(e.usage, null, `usage in a chunk before the last: ${JSON.stringify(e)}`);
});

test('chat completions: logprobs and top_logprobs', async () => {
  const r = await main.chat.completions.create({ model: 'c', messages: MESSAGES, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.ok(lp && Array.isArray(lp.content), `logprobs.content: ${JSON.stringify(lp)}`);
  assert.equal(lp.content.length, r.usage.completion_tokens);
  for (const t of lp.content) {
    isLogprob(t.logprob, 'chat logprob');
    assert.equal(t.top_logprobs.length, 3);
    near(t.logprob, t.top_logprobs[0].logprob, 1e-4, 'greedy: the chosen token is the most probable');
  }
});

test('chat completions: a server without a template refuses with unsupported_chat_template', async () => {
  const e = await sdkError(keyed.chat.completions.create({ model: 'c', messages: MESSAGES }), sdk.BadRequestError, 400,
    'invalid_request_error', 'unsupported_chat_template', 'no chat template');
  assert.match(e.message, /\/v1\/completions/);
  assert.match(e.message, /--chat-template/);
});

test('chat completions: bad messages are refused', async () => {
  for (const [body, what] of [[{ messages: [] }, 'no messages'], [{ messages: [{ role: 'robot', content: 'x' }] }, 'unknown role'],
    [{ messages: [{ role: 'user', content: 5 }] }, 'content not a string'], [{ messages: 'hi' }, 'messages not a list'], [{}, 'no messages field']]) {
    await sdkError(main.chat.completions.create({ model: 'c', max_tokens: 2, ...body }), sdk.BadRequestError, 400, 'invalid_request_error', undefined, what);
  }
  // what the server cannot honour is refused naming it (a tool list or a JSON response_format was
  // read past: a plain-text reply came back as if they had been honoured); neutral values pass
  const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } };
  for (const [extra, param] of [[{ tools: [tool] }, 'tools'], [{ tool_choice: 'required' }, 'tool_choice'],
    [{ response_format: { type: 'json_object' } }, 'response_format'], [{ logit_bias: { 5: -100 } }, 'logit_bias']]) {
    const e = await sdkError(main.chat.completions.create({ model: 'c', max_tokens: 2, messages: MESSAGES, ...extra }),
      sdk.BadRequestError, 400, 'invalid_request_error', undefined, param);
    assert.equal(e.param, param);
  }
  const ok = await main.chat.completions.create({ model: 'c', max_tokens: 2, messages: MESSAGES, tools: [],
    tool_choice: 'none', response_format: { type: 'text' }, logit_bias: {} });
  assert.equal(ok.choices.length, 1);
});

test('chat completions: a developer message is a system message (OpenAI\'s newer name for it)', async () => {
  const req = { model: 'c', max_tokens: 8, temperature: 0 };
  const sys = await main.chat.completions.create({ ...req, messages: MESSAGES });
  const developer = [{ ...MESSAGES[0], role: 'developer' }, MESSAGES[1]];
  const dev = await main.chat.completions.create({ ...req, messages: developer });
  assert.equal(dev.choices[0].message.content, sys.choices[0].message.content);
  assert.deepEqual(dev.usage, sys.usage);
});

// ---------------------------------------------------------------- logprobs and echo

const LP = cfg.expect.logprobs;

test('logprobs with echo: what lm-evaluation-harness local-completions sends, unchanged, against forward\'s logits', async () => {
  // exactly the payload lm_eval/models/openai_completions.py builds for loglikelihood requests
  const payload = { model: 'dt-diff', prompt: [LP.ids], max_tokens: 1, temperature: 0, logprobs: 1, seed: 1234, echo: true };
  const r = await raw(S.main.url, '/v1/completions', { body: payload });
  assert.equal(r.status, 200, r.text.slice(0, 300));
  const ch = r.json.choices;
  assert.equal(ch.length, 1);
  const lp = ch[0].logprobs;
  const T = LP.ids.length;
  assert.equal(lp.tokens.length, T + 1, 'echo: the prompt tokens, then the one generated');
  assert.equal(lp.token_logprobs.length, T + 1);
  assert.equal(lp.top_logprobs.length, T + 1);
  assert.equal(lp.text_offset.length, T + 1);
  assert.equal(lp.token_logprobs[0], null, 'the first prompt token has no logprob');
  assert.equal(lp.top_logprobs[0], null, 'nor alternatives');
  // the BOS may be shown as its text or as nothing; every other token is its text decoded alone
  assert.ok(lp.tokens[0] === LP.token_texts[0] || lp.tokens[0] === '', `the first token ${JSON.stringify(lp.tokens[0])}`);
  for (let t = 1; t < T; t++) assert.equal(lp.tokens[t], LP.token_texts[t], `token ${t}'s text`);
  for (let t = 1; t <= T; t++) {
    if (t < T) near(lp.token_logprobs[t], LP.token_logprobs[t], 2e-3, `token_logprobs[${t}] against forward`);
    const top = Object.entries(lp.top_logprobs[t]);
    assert.equal(top.length, 1, `logprobs 1: one alternative at ${t}`);
    assert.equal(top[0][0], LP.best[t].text, `the most probable token after position ${t - 1}`);
    near(top[0][1], LP.best[t].logprob, 2e-3, `top_logprobs[${t}]`);
    isLogprob(lp.token_logprobs[t], `token_logprobs[${t}]`);
  }
  // the generated token is the greedy one, and its logprob is the best alternative's
  assert.equal(lp.tokens[T], LP.best[T].text);
  near(lp.token_logprobs[T], Object.values(lp.top_logprobs[T])[0], 1e-6, 'greedy token = top alternative');
  for (let t = 1; t <= T; t++) assert.ok(lp.text_offset[t] >= lp.text_offset[t - 1], 'text_offset grows');
  // what lm-eval computes: the continuation's log-likelihood and whether it is greedy
  const ctxlen = 4;
  const cont = lp.token_logprobs.slice(ctxlen, -1);
  const want = LP.token_logprobs.slice(ctxlen).reduce((a, b) => a + b, 0);
  near(cont.reduce((a, b) => a + b, 0), want, 1e-2, 'sum of token_logprobs[ctxlen:-1]');
  let isGreedy = true;
  for (let i = ctxlen; i < T; i++) {
    const best = Object.entries(lp.top_logprobs[i]).sort((a, b) => b[1] - a[1])[0][0];
    if (best !== lp.tokens[i]) isGreedy = false;
  }
  const wantGreedy = LP.ids.slice(ctxlen).every((id, k) => LP.best[ctxlen + k].id === id);
  assert.equal(isGreedy, wantGreedy);
  checkUsage(r.json.usage, T, 1, 'lm-eval request');
});

test('logprobs with echo: max_tokens 0 scores the prompt only; a text prompt echoes its text', async () => {
  const T = LP.ids.length;
  const r = await main.completions.create({ model: 'm', prompt: LP.text, max_tokens: 0, echo: true, logprobs: 3, temperature: 0 });
  const c = r.choices[0];
  assert.equal(c.text, LP.text, 'echo with max_tokens 0: the prompt\'s text');
  assert.equal(c.finish_reason, 'length');
  checkUsage(r.usage, T, 0, 'max_tokens 0');
  assert.equal(c.logprobs.tokens.length, T);
  assert.equal(c.logprobs.token_logprobs[0], null);
  for (let t = 1; t < T; t++) {
    near(c.logprobs.token_logprobs[t], LP.token_logprobs[t], 2e-3, `text prompt token_logprobs[${t}]`);
    const top = Object.values(c.logprobs.top_logprobs[t]);
    assert.ok(top.length >= 1 && top.length <= 3, `top_logprobs[${t}] has ${top.length} entries`);
    assert.ok(Math.max(...top) >= c.logprobs.token_logprobs[t] - 1e-4, 'no token beats the best alternative');
  }
  const one = await main.completions.create({ model: 'm', prompt: LP.text, max_tokens: 1, echo: true, logprobs: 1, temperature: 0 });
  assert.equal(one.choices[0].text, LP.text + LP.best[T].text, 'echo: prompt text + completion');
  assert.equal(one.choices[0].logprobs.tokens.length, T + 1);
});

test('echo: a text prompt is echoed as sent, its special tokens too (its decoding left them out); text_offset indexes into it', async () => {
  const prompt = '<|end_of_text|>The program<|end_of_text|>\nIt';
  const req = { model: 'm', prompt, max_tokens: 4, temperature: 0 };
  const plain = (await main.completions.create(req)).choices[0].text;
  const r = await main.completions.create({ ...req, echo: true, logprobs: 0 });
  const c = r.choices[0], lp = c.logprobs;
  assert.equal(c.text, prompt + plain, 'the prompt as sent, then the completion');
  // the BOS the tokenizer adds is in no text: it is where the text begins; every other token's text
  // is where its offset says, the prompt's special tokens at their own
  assert.equal(lp.tokens[0], '<|begin_of_text|>');
  assert.equal(lp.text_offset[0], 0);
  assert.equal(lp.tokens.filter((t) => t === '<|end_of_text|>').length, 2, JSON.stringify(lp.tokens));
  for (let i = 1; i < lp.tokens.length; i++) {
    assert.equal(c.text.substr(lp.text_offset[i], lp.tokens[i].length), lp.tokens[i],
      `token ${i} ${JSON.stringify(lp.tokens[i])} at ${lp.text_offset[i]} of ${JSON.stringify(c.text)}`);
  }
  assert.equal(lp.text_offset[r.usage.prompt_tokens], prompt.length, 'the completion begins after the prompt');
  // streamed: the same text and entries
  const ev = parseSSE((await raw(S.main.url, '/v1/completions', { body: { ...req, echo: true, logprobs: 0, stream: true } })).text);
  const chunks = ev.slice(0, -1).map((e) => e.choices[0]);
  assert.equal(chunks.map((ch) => ch.text).join(''), c.text, 'streamed text');
  assert.deepEqual(chunks.flatMap((ch) => ch.logprobs.text_offset), lp.text_offset, 'streamed text_offset');
});

test('logprobs without echo: one per generated token, the greedy token is the top alternative', async () => {
  const exp = E.diff.greedy.find((g) => g.prompt === 'The program' && g.max_tokens === 24);
  const r = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 24, temperature: 0, logprobs: 5 });
  const lp = r.choices[0].logprobs;
  assert.equal(r.choices[0].text, exp.text, 'asking for logprobs changes nothing in the text');
  assert.equal(lp.tokens.length, r.usage.completion_tokens);
  assert.equal(lp.tokens.join(''), exp.text, 'the tokens spell the text');
  lp.token_logprobs.forEach((x, i) => {
    isLogprob(x, `token ${i}`);
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 5);
    near(x, Math.max(...top), 1e-5, `greedy token ${i} has the best logprob`);
  });
  // sampled: the token drawn is never above the best alternative
  const s = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 24, temperature: 1.5, seed: 9, logprobs: 2 });
  s.choices[0].logprobs.token_logprobs.forEach((x, i) => {
    isLogprob(x, `sampled token ${i}`);
    assert.ok(x <= Math.max(...Object.values(s.choices[0].logprobs.top_logprobs[i])) + 1e-5);
  });
  const z = await main.completions.create({ model: 'm', prompt: exp.prompt, max_tokens: 3, temperature: 0, logprobs: 0 });
  assert.equal(z.choices[0].logprobs.token_logprobs.length, 3, 'logprobs 0: the chosen tokens\' logprobs, no alternatives');
  await sdkError(main.completions.create({ model: 'm', prompt: 'x', logprobs: 21 }), sdk.BadRequestError, 400, 'invalid_request_error', undefined, 'logprobs 21');
});

// ---------------------------------------------------------------- models, health, metrics

test('reply objects: id, object, created, model, system_fingerprint as OpenAI\'s, alike in every chunk', async () => {
  const now = () => Math.floor(Date.now() / 1000);
  const t0 = now();
  const fp = /^fp_[0-9a-f]{16}$/;
  const c = await main.completions.create({ model: 'any-name', prompt: 'a', max_tokens: 1 });
  const msgs = [{ role: 'user', content: 'a' }];
  const ch = await main.chat.completions.create({ model: 'm', messages: msgs, max_tokens: 1 });
  for (const [r, prefix, object] of [[c, 'cmpl-', 'text_completion'], [ch, 'chatcmpl-', 'chat.completion']]) {
    assert.ok(r.id.startsWith(prefix), `${object}: id ${r.id}`);
    assert.equal(r.object, object);
    assert.ok(Number.isInteger(r.created) && r.created >= t0 - 1 && r.created <= now() + 1,
      `${object}: created ${r.created}`);
    assert.match(r.system_fingerprint ?? '', fp, `${object}: system_fingerprint`);
  }
  assert.equal(c.model, 'any-name', 'the model the request named');
  assert.equal(ch.system_fingerprint, c.system_fingerprint, 'one server, one fingerprint');
  assert.notEqual(c.id, (await main.completions.create({ model: 'm', prompt: 'a', max_tokens: 1 })).id, 'ids differ');
  // every chunk of a stream: the same id, created and fingerprint
  const chunks = [];
  for await (const k of await main.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'a' }],
    max_tokens: 2, stream: true, stream_options: { include_usage: true } })) chunks.push(k);
  assert.ok(chunks.length >= 3);
  for (const k of chunks) {
    assert.equal(k.object, 'chat.completion.chunk');
    assert.equal(k.id, chunks[0].id);
    assert.equal(k.created, chunks[0].created);
    assert.equal(k.system_fingerprint, c.system_fingerprint);
  }
  // another backend (q8_0 weights): another fingerprint
  const q = await client(OpenAI, S.q8.url).completions.create({ model: 'm', prompt: 'a', max_tokens: 1 });
  assert.match(q.system_fingerprint ?? '', fp);
  assert.notEqual(q.system_fingerprint, c.system_fingerprint, 'q8_0 and float weights');
});

test('/v1/models describes each served model', async () => {
  const want = [[S.main, 'diff', 'diffllama', 'none', 2], [S.q8, 'q8', 'diffllama', 'q8_0', 2],
    [S.llama, 'llama', 'llama', 'none', E.llama.heads], [S.v2, 'v2', 'difftrans_v2', 'none', E.v2.heads / 2]];
  for (const [srv, name, arch, quant, heads] of want) {
    const list = await client(OpenAI, srv.url).models.list();
    assert.equal(list.data.length, 1);
    const m = list.data[0];
    assert.equal(m.id, srv.name, `${name}: id is --model-name or the directory's name`);
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'difftrans');
    assert.ok(Number.isInteger(m.created));
    const d = m.difftrans;
    assert.equal(d.arch, arch, name);
    assert.equal(d.quantization, quant, name);
    assert.equal(d.parameters, E[name].parameters, `${name}: parameters`);
    assert.equal(d.context, E[name].context, `${name}: context`);
    assert.equal(d.vocab_size, E[name].vocab_size, `${name}: vocab_size`);
    assert.equal(d.layers, E[name].layers, `${name}: layers`);
    assert.equal(d.heads, heads, `${name}: output heads`);
  }
  const r = await raw(S.main.url, '/v1/models', { method: 'GET' });
  assert.equal(r.json.object, 'list');
});

test('/health: idle server, no key needed', async () => {
  for (const [srv, slots] of [[S.main, 4], [S.key, 2]]) {
    const r = await raw(srv.url, '/health', { method: 'GET' });
    assert.equal(r.status, 200);
    assert.deepEqual({ ...r.json }, { status: 'ok', slots_in_use: 0, n_slots: slots, queue_depth: 0 });
  }
});

function parseProm(text) {
  const samples = [];
  const types = {};
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const t = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (t) { types[t[1]] = t[2]; continue; }
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)( \d+)?$/.exec(line);
    assert.ok(m, `not a Prometheus sample line: ${JSON.stringify(line)}`);
    const labels = {};
    if (m[3]) for (const kv of m[3].match(/[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"/g) ?? []) {
      const i = kv.indexOf('=');
      labels[kv.slice(0, i)] = kv.slice(i + 2, -1);
    }
    const v = m[4] === '+Inf' ? Infinity : Number(m[4]);
    assert.ok(!Number.isNaN(v), `value of ${line}`);
    samples.push({ name: m[1], labels, value: v });
  }
  return { samples, types };
}
async function metrics(srv, headers = {}) {
  const r = await raw(srv.url, '/metrics', { method: 'GET', headers });
  assert.equal(r.status, 200, r.text.slice(0, 200));
  assert.match(r.headers.get('content-type') ?? '', /^text\/plain/);
  return parseProm(r.text);
}
const sum = (p, name, f = () => true) => p.samples.filter((s) => s.name === name && f(s.labels)).reduce((a, s) => a + s.value, 0);

test('/metrics: Prometheus text; counters grow by what a request did; histograms with buckets', async () => {
  const before = await metrics(S.main);
  for (const n of ['difftrans_requests_total', 'difftrans_prompt_tokens_total', 'difftrans_generated_tokens_total']) assert.equal(before.types[n], 'counter', n);
  for (const n of ['difftrans_queue_depth', 'difftrans_batch_rows', 'difftrans_batch_sequences', 'difftrans_kv_slots_in_use', 'difftrans_kv_slots']) assert.equal(before.types[n], 'gauge', n);
  assert.equal(sum(before, 'difftrans_kv_slots'), 4);
  assert.equal(sum(before, 'difftrans_kv_slots_in_use'), 0);
  const r = await main.completions.create({ model: 'm', prompt: 'The program', max_tokens: 6, temperature: 0 });
  await sdkError(main.completions.create({ model: 'm', prompt: 5 }), sdk.BadRequestError, 400, 'invalid_request_error', undefined, 'prompt 5');
  const after = await metrics(S.main);
  const ok = (l) => l.status === '200' && /completions/.test(l.endpoint ?? '') && !/chat/.test(l.endpoint);
  assert.equal(sum(after, 'difftrans_requests_total', ok) - sum(before, 'difftrans_requests_total', ok), 1, 'one more 200 on /v1/completions');
  const bad = (l) => l.status === '400';
  assert.equal(sum(after, 'difftrans_requests_total', bad) - sum(before, 'difftrans_requests_total', bad), 1, 'one more 400');
  assert.equal(sum(after, 'difftrans_prompt_tokens_total') - sum(before, 'difftrans_prompt_tokens_total'), r.usage.prompt_tokens);
  assert.equal(sum(after, 'difftrans_generated_tokens_total') - sum(before, 'difftrans_generated_tokens_total'), r.usage.completion_tokens);
  for (const h of ['difftrans_time_to_first_token_seconds', 'difftrans_time_per_output_token_seconds']) {
    assert.equal(after.types[h], 'histogram', h);
    const buckets = after.samples.filter((s) => s.name === h + '_bucket');
    assert.ok(buckets.length >= 3, `${h}: ${buckets.length} buckets`);
    const les = buckets.map((b) => (b.labels.le === '+Inf' ? Infinity : Number(b.labels.le)));
    for (let i = 1; i < buckets.length; i++) {
      assert.ok(les[i] > les[i - 1], `${h}: le in increasing order`);
      assert.ok(buckets[i].value >= buckets[i - 1].value, `${h}: buckets are cumulative`);
    }
    assert.equal(les[les.length - 1], Infinity, `${h}: a +Inf bucket`);
    const count = sum(after, h + '_count');
    assert.equal(buckets[buckets.length - 1].value, count, `${h}: +Inf bucket = _count`);
    assert.ok(count > sum(before, h + '_count'), `${h}: _count grew`);
    assert.ok(sum(after, h + '_sum') > 0);
  }
});

// ---------------------------------------------------------------- the attention extension

function checkRows(rows, T, what, { sumsTo1 = true } = {}) {
  assert.equal(rows.length, T, `${what}: one row per query token`);
  rows.forEach((row, t) => {
    assert.equal(row.length, t + 1, `${what}: row ${t} has keys 0..${t}`);
    row.forEach((x) => assert.ok(Number.isFinite(x), `${what}: ${x}`));
    if (sumsTo1) {
      row.forEach((x) => assert.ok(x >= 0 && x <= 1 + 1e-6, `${what}: weight ${x}`));
      near(row.reduce((a, b) => a + b, 0), 1, 1e-3, `${what}: row ${t} sums to 1`);
    }
  });
}
async function attention(srv, body) {
  const r = await raw(srv.url, '/v1/difftrans/attention', { body });
  assert.equal(r.status, 200, r.text.slice(0, 300));
  return r.json;
}

test('attention (DIFF): map1, map2, diff = map1 − λ·map2, λ per layer as difftrans info prints it', async () => {
  const a = await attention(S.main, { prompt: LP.text });
  const T = LP.ids.length;
  assert.equal(a.object, 'difftrans.attention');
  assert.equal(a.arch, 'diffllama');
  assert.deepEqual(a.ids, LP.ids, 'tokenised as generate --prompt');
  assert.deepEqual(a.tokens, LP.token_texts, 'each token as decoded alone');
  assert.equal(a.n_layers, E.diff.layers);
  assert.equal(a.n_heads, E.diff.heads / 2, 'DIFF: H/2 differential heads');
  assert.equal(a.lambda.length, a.n_layers);
  assert.equal(a.v2_pairs, null);
  a.lambda.forEach((l, i) => near(l, E.diff.lambda[i], 1e-4, `λ of layer ${i}`));
  assert.equal(a.layers.length, a.n_layers);
  let differ = false;
  a.layers.forEach((L, l) => {
    assert.equal(L.layer, l);
    near(L.lambda, a.lambda[l], 1e-6, `layer ${l}'s λ`);
    assert.equal(L.heads.length, a.n_heads);
    L.heads.forEach((h, j) => {
      assert.equal(h.head, j);
      assert.deepEqual(h.query_heads, [j, j + a.n_heads], 'DIFF: head j reads query heads j and j + h');
      checkRows(h.map1, T, `layer ${l} head ${j} map1`);
      checkRows(h.map2, T, `layer ${l} head ${j} map2`);
      checkRows(h.diff, T, `layer ${l} head ${j} diff`, { sumsTo1: false });
      assert.deepEqual(h.map1[0], [1], 'the first token attends to itself only');
      for (let t = 0; t < T; t++) for (let k = 0; k <= t; k++) {
        near(h.diff[t][k], h.map1[t][k] - L.lambda * h.map2[t][k], 1e-3 + 1e-3 * Math.abs(h.map1[t][k]), `diff[${t}][${k}]`);
        if (Math.abs(h.map1[t][k] - h.map2[t][k]) > 1e-3) differ = true;
      }
    });
  });
  assert.ok(differ, 'map1 and map2 are the same map everywhere: not two query heads');
  // one layer and head
  const one = await attention(S.main, { prompt: LP.ids, layer: 1, head: 1 });
  assert.equal(one.layers.length, 1);
  assert.equal(one.layers[0].layer, 1);
  assert.equal(one.layers[0].heads.length, 1);
  assert.equal(one.layers[0].heads[0].head, 1);
  assert.deepEqual(one.layers[0].heads[0].map1, a.layers[1].heads[1].map1, 'the same map asked alone');
});

test('attention (llama): one softmax map per head, λ null', async () => {
  const a = await attention(S.llama, { prompt: 'This License' });
  assert.equal(a.arch, 'llama');
  assert.equal(a.lambda, null);
  assert.equal(a.n_heads, E.llama.heads);
  const T = 'This License'.length; // byte-level, no BOS
  assert.deepEqual(a.ids, [...Buffer.from('This License')]);
  for (const L of a.layers) {
    assert.equal(L.lambda, null);
    for (const h of L.heads) {
      checkRows(h.map, T, `llama layer ${L.layer} head ${h.head}`);
      assert.deepEqual(h.query_heads, [h.head]);
      assert.ok(!('map2' in h) || h.map2 === null, 'llama has no second map');
    }
  }
});

for (const name of ['v2', 'v2x']) {
  const what = `attention (V2, ${name}): query heads 2j and 2j+1 (crossgroup: j and j+h), per-token λ, diff = map1 − λ_t·map2`;
  test(what, async () => {
    const text = 'This License applies';
    const a = await attention(S[name], { prompt: text });
    assert.equal(a.arch, 'difftrans_v2');
    assert.equal(a.lambda, null);
    assert.equal(a.n_heads, E[name].heads / 2);
    assert.equal(a.v2_pairs, E[name].v2_pairs, 'the pairing of config.json');
    const T = a.ids.length;
    assert.deepEqual(a.ids, encode(text, true));
    let varies = false;
    for (const L of a.layers) for (const h of L.heads) {
      const j = h.head;
      const want = E[name].v2_pairs === 'j,j+h' ? [j, j + a.n_heads] : [2 * j, 2 * j + 1];
      assert.deepEqual(h.query_heads, want, `${name} head ${j}'s query heads`);
      checkRows(h.map1, T, 'V2 map1');
      checkRows(h.map2, T, 'V2 map2');
      checkRows(h.diff, T, 'V2 diff', { sumsTo1: false });
      assert.equal(h.lambda.length, T, 'one λ per query token');
      for (let t = 0; t < T; t++) {
        assert.ok(Number.isFinite(h.lambda[t]));
        if (Math.abs(h.lambda[t] - h.lambda[0]) > 1e-4) varies = true;
        for (let k = 0; k <= t; k++) near(h.diff[t][k], h.map1[t][k] - h.lambda[t] * h.map2[t][k], 1.5e-3, `V2 diff[${t}][${k}]`);
      }
    }
    assert.ok(varies, 'V2\'s λ is the same for every token: not per token');
  });
}

test('attention: too long a prompt, layer or head out of range are refused with 400', async () => {
  const max = S.main.attention_max_tokens;
  const ok = await raw(S.main.url, '/v1/difftrans/attention', { body: { prompt: Array(max).fill(84), layer: 0, head: 0 } });
  assert.equal(ok.status, 200, `${max} tokens are allowed: ${ok.text.slice(0, 200)}`);
  const long = await raw(S.main.url, '/v1/difftrans/attention', { body: { prompt: Array(max + 1).fill(84) } });
  const e = rawError(long, 400, 'invalid_request_error', undefined, 'too long for attention');
  assert.match(e.message, new RegExp(`\\b${max + 1}\\b`));
  assert.match(e.message, new RegExp(`\\b${max}\\b`));
  for (const body of [{ layer: E.diff.layers }, { layer: -1 }, { head: E.diff.heads / 2 }, { head: -1 }, { layer: 'x' }]) {
    const r = await raw(S.main.url, '/v1/difftrans/attention', { body: { prompt: 'The', ...body } });
    rawError(r, 400, 'invalid_request_error', undefined, `attention ${JSON.stringify(body)}`);
  }
  rawError(await raw(S.main.url, '/v1/difftrans/attention', { body: { prompt: [400] } }), 400, 'invalid_request_error', 'invalid_token', 'attention on id 400');
});

// ---------------------------------------------------------------- every error

test('errors: a body over --max-body is 413 body_too_large; one under it is served', async () => {
  const limit = S.key.max_body;
  const auth = { authorization: `Bearer ${S.key.key}` };
  const body = (size) => {
    const base = JSON.stringify({ prompt: 'The', max_tokens: 1, pad: '' });
    return base.replace('"pad":""', `"pad":"${'x'.repeat(size - base.length)}"`);
  };
  assert.equal(body(limit).length, limit);
  const under = await raw(S.key.url, '/v1/completions', { body: body(limit), headers: auth });
  assert.equal(under.status, 200, `a body of exactly ${limit} bytes: ${under.text.slice(0, 200)}`);
  rawError(await raw(S.key.url, '/v1/completions', { body: body(limit + 1), headers: auth }), 413, 'invalid_request_error', 'body_too_large', `${limit + 1} bytes`);
  // the default limit, 1 MiB
  rawError(await raw(S.main.url, '/v1/completions', { body: body(2 << 20) }), 413, 'invalid_request_error', 'body_too_large', '2 MiB');
  // through the SDK too (a 1.5 MiB prompt)
  await sdkError(main.completions.create({ model: 'm', prompt: 'x'.repeat(1536 << 10) }), sdk.APIError, 413, 'invalid_request_error', 'body_too_large', 'SDK 1.5 MiB');
});

test('errors: JSON that does not parse, or is not an object', async () => {
  // a second value or anything else after the object (cJSON read the first and dropped the rest)
  for (const text of ['{"prompt": ', 'not json', '', '[1, 2]', '"a string"', '{"prompt": "x",}', '{"prompt": "x"} x',
    '{"prompt": "x"}{"max_tokens": 1}']) {
    rawError(await raw(S.main.url, '/v1/completions', { body: text }), 400, 'invalid_request_error', undefined, `body ${JSON.stringify(text)}`);
    rawError(await raw(S.main.url, '/v1/chat/completions', { body: text }), 400, 'invalid_request_error', undefined, `chat body ${JSON.stringify(text)}`);
    rawError(await raw(S.main.url, '/v1/difftrans/attention', { body: text }), 400, 'invalid_request_error', undefined,
      `attention body ${JSON.stringify(text)}`);
  }
});

test('errors: a key given twice is refused with 400 naming it, not read as its first value', async () => {
  // JSON.parse keeps the last value, cJSON found the first: max_tokens 50 was served as 1
  const cases = [
    ['/v1/completions', '{"prompt": "a", "max_tokens": 1, "max_tokens": 50}', 'max_tokens'],
    ['/v1/completions', '{"prompt": "a", "prom\\u0070t": "b"}', 'prompt'], // the same key, escaped
    ['/v1/completions', '{"prompt": "a", "stream": true, "stream_options": {"include_usage": true, '
      + '"include_usage": false}}', 'stream_options.include_usage'],
    ['/v1/chat/completions', '{"messages": [{"role": "user", "content": "a", "role": "system"}]}', 'messages[0].role'],
    ['/v1/difftrans/attention', '{"prompt": "a b", "layer": 0, "layer": 1}', 'layer'],
  ];
  for (const [p, body, param] of cases) {
    const e = rawError(await raw(S.main.url, p, { body }), 400, 'invalid_request_error', undefined, `${p} ${body}`);
    assert.equal(e.param, param, `${body}: param`);
    assert.match(e.message, /duplicate key/, `${body}: message`);
  }
  // distinct keys, and the same key in different objects, are not duplicates
  const ok = await raw(S.main.url, '/v1/chat/completions', { body: '{"max_tokens": 1, "messages": [{"role": "system", '
    + '"content": "a"}, {"role": "user", "content": "b"}]}' });
  assert.equal(ok.status, 200, ok.text.slice(0, 300));
});

test('errors: wrong types and invalid values name the field', async () => {
  const cases = [
    [{ prompt: 5 }, 'prompt'], [{ prompt: [] }, 'prompt'], [{ prompt: [[]] }, 'prompt'], [{ prompt: [1.5] }, 'prompt'],
    [{ prompt: ['a', 5] }, 'prompt'], [{ prompt: { a: 1 } }, 'prompt'], [{ prompt: null }, 'prompt'], [{}, 'prompt'],
    [{ prompt: 'x', max_tokens: 'x' }, 'max_tokens'], [{ prompt: 'x', max_tokens: -1 }, 'max_tokens'], [{ prompt: 'x', max_tokens: 2.5 }, 'max_tokens'],
    [{ prompt: 'x', temperature: 'hot' }, 'temperature'], [{ prompt: 'x', temperature: -1 }, 'temperature'],
    [{ prompt: 'x', top_p: 1.5 }, 'top_p'], [{ prompt: 'x', top_k: -1 }, 'top_k'],
    [{ prompt: 'x', min_p: 1.5 }, 'min_p'], [{ prompt: 'x', min_p: -0.1 }, 'min_p'], [{ prompt: 'x', min_p: 'x' }, 'min_p'],
    [{ prompt: 'x', n: 0 }, 'n'], [{ prompt: 'x', n: 17 }, 'n'], [{ prompt: 'x', stream: 'yes' }, 'stream'],
    [{ prompt: 'x', echo: 1 }, 'echo'], [{ prompt: 'x', stop: 5 }, 'stop'], [{ prompt: 'x', stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    [{ prompt: 'x', seed: 'x' }, 'seed'], [{ prompt: 'x', logprobs: -1 }, 'logprobs'], [{ prompt: 'x', presence_penalty: 0.5 }, 'presence_penalty'],
    [{ prompt: 'x', frequency_penalty: 1 }, 'frequency_penalty'],
    // what the server cannot honour is refused, not read past (the reply came back as if not asked)
    [{ prompt: 'x', logit_bias: { 5: 100 } }, 'logit_bias'], [{ prompt: 'x', best_of: 3 }, 'best_of'],
    [{ prompt: 'x', suffix: 'end' }, 'suffix'],
    // OpenAI's 400: stream_options without streaming
    [{ prompt: 'x', stream_options: { include_usage: true } }, 'stream_options'],
    [{ prompt: 'x', stream: false, stream_options: { include_usage: false } }, 'stream_options'],
  ];
  for (const [body, param] of cases) {
    const e = await sdkError(main.completions.create({ model: 'm', ...body }), sdk.BadRequestError, 400, 'invalid_request_error', undefined, JSON.stringify(body));
    assert.equal(e.param, param, `${JSON.stringify(body)}: param`);
  }
  const ce = await sdkError(main.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }],
    stream_options: { include_usage: true } }), sdk.BadRequestError, 400, 'invalid_request_error', undefined,
  'chat stream_options');
  assert.equal(ce.param, 'stream_options');
  // their neutral values are served, as clients send them
  const ok = await main.completions.create({ model: 'm', prompt: 'x', max_tokens: 2, n: 2, logit_bias: {}, best_of: 2,
    suffix: null, stream_options: null });
  assert.equal(ok.choices.length, 2);
  // and nothing was left running
  const h = await raw(S.main.url, '/health', { method: 'GET' });
  assert.equal(h.json.slots_in_use, 0);
});

test('errors: prompt + max_tokens past the context: 400 context_length_exceeded with the counts', async () => {
  const C = E.diff.context;
  const prompt = Array(200).fill(84);
  const e = await sdkError(main.completions.create({ model: 'm', prompt, max_tokens: 100 }), sdk.BadRequestError, 400,
    'invalid_request_error', 'context_length_exceeded', 'past the context');
  assert.equal(e.error.message, `the prompt has 200 tokens and max_tokens is 100: 200 + 100 = 300 exceeds the context of ${C} tokens`);
  // exactly the context is allowed
  const r = await main.completions.create({ model: 'm', prompt, max_tokens: C - 200, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, 200);
  assert.ok(r.usage.completion_tokens <= C - 200);
  // a text prompt counts its tokens (BOS included), a list of prompts is checked per prompt
  const text = 'The program '.repeat(60);
  const n = encode(text, true).length;
  const e2 = await sdkError(main.completions.create({ model: 'm', prompt: ['x', text], max_tokens: C }), sdk.BadRequestError, 400,
    'invalid_request_error', 'context_length_exceeded', 'text past the context');
  assert.match(e2.error.message, new RegExp(`the prompt has (1|2|${n}) tokens and max_tokens is ${C}`));
  // chat: the rendered template counts
  await sdkError(main.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: text }], max_tokens: C }),
    sdk.BadRequestError, 400, 'invalid_request_error', 'context_length_exceeded', 'chat past the context');
});

test('errors: token ids outside the vocabulary: 400 invalid_token naming the id, its index and the vocabulary', async () => {
  const V = E.diff.vocab_size;
  for (const [prompt, id, index] of [[[-1], -1, 0], [[5, V], V, 1], [[[1, 2], [3, 4, V + 7]], V + 7, 2]]) {
    const e = await sdkError(main.completions.create({ model: 'm', prompt, max_tokens: 1 }), sdk.BadRequestError, 400,
      'invalid_request_error', 'invalid_token', JSON.stringify(prompt));
    assert.match(e.error.message, new RegExp(`(^|[^0-9])${id}([^0-9]|$)`), `${e.error.message}: the id`);
    assert.match(e.error.message, new RegExp(`(^|[^0-9-])${index}([^0-9]|$)`), `${e.error.message}: the index`);
    assert.match(e.error.message, new RegExp(`\\b${V}\\b`), `${e.error.message}: the vocabulary size`);
  }
  // V − 1 is in the vocabulary
  const r = await main.completions.create({ model: 'm', prompt: [V - 1], max_tokens: 1, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, 1);
});

test('errors: a model whose logits are not finite: 500 model_error naming the logit, streamed as an error event', async () => {
  const broken = client(OpenAI, S.broken.url);
  const before = await (await fetch(`${S.broken.url}/metrics`)).text();
  const failedOf = (text) => Number(/^difftrans_engine_requests_failed_total (\d+)/m.exec(text)?.[1]);
  const err = await sdkError(broken.completions.create({ model: 'broken', prompt: 'The', max_tokens: 4 }),
    sdk.InternalServerError, 500, 'server_error', 'model_error', 'NaN logits');
  assert.match(err.error.message, /logit \d+ at position \d+ is (-?inf|nan): the model's weights overflow float32/);
  // streamed: the SDK raises the error event (no [DONE] after it)
  let thrown = null, chunks = 0;
  try {
    const stream = await broken.completions.create({ model: 'broken', prompt: 'The', max_tokens: 4, stream: true });
    for await (const c of stream) chunks++;
  } catch (e) { thrown = e; }
  assert.ok(thrown instanceof sdk.APIError, `the stream ended without an error (${chunks} chunks; ${thrown})`);
  assert.match(thrown.message, /overflow float32/);
  const raw = await (await fetch(`${S.broken.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'The', max_tokens: 4, stream: true }) })).text();
  assert.match(raw, /^data: \{"error":\{"message":"[^"]*overflow float32[^"]*","type":"server_error","param":null,"code":"model_error"\}\}$/m);
  assert.ok(!raw.includes('[DONE]'), `no [DONE] after the error: ${raw.slice(0, 400)}`);
  const after = await (await fetch(`${S.broken.url}/metrics`)).text();
  assert.equal(failedOf(after) - failedOf(before), 3, 'difftrans_engine_requests_failed_total: a reply, then 2 streams');
});

test('errors: a full queue is 503 queue_full with Retry-After: 1', async () => {
  // --parallel 1 --queue 1: one request runs, one waits, the others are refused
  const slow = client(OpenAI, S.slow.url);
  const N = 6;
  const results = await Promise.allSettled(Array.from({ length: N }, (_, i) =>
    slow.completions.create({ model: 'm', prompt: 'a', max_tokens: S.slow.max_tokens, temperature: 0, seed: i })));
  const ok = results.filter((r) => r.status === 'fulfilled');
  const busy = results.filter((r) => r.status === 'rejected');
  assert.ok(ok.length >= 1 && ok.length <= 2, `${ok.length} of ${N} served at once with one slot and a queue of one`);
  assert.equal(ok.length + busy.length, N);
  for (const r of ok) assert.equal(r.value.usage.completion_tokens, S.slow.max_tokens, 'a served request is complete');
  for (const { reason: e } of busy) {
    assert.ok(e instanceof sdk.InternalServerError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.status, 503);
    assert.equal(e.type, 'server_error');
    assert.equal(e.code, 'queue_full');
    assert.equal(e.headers.get('retry-after'), '1');
  }
  // raw and streamed: the 503 comes before any event
  const first = raw(S.slow.url, '/v1/completions', { body: { prompt: 'a', max_tokens: S.slow.max_tokens } });
  const second = raw(S.slow.url, '/v1/completions', { body: { prompt: 'a', max_tokens: S.slow.max_tokens } });
  // the queue is full once /health says so (a fixed wait was not always enough under the sanitizers)
  for (let t0 = Date.now(); ; ) {
    const h = (await raw(S.slow.url, '/health', { method: 'GET' })).json;
    if (h.slots_in_use === 1 && h.queue_depth === 1) break;
    assert.ok(Date.now() - t0 < 30000, `the slow server never showed a full queue: ${JSON.stringify(h)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  const third = await raw(S.slow.url, '/v1/completions', { body: { prompt: 'a', max_tokens: 4, stream: true } });
  rawError(third, 503, 'server_error', 'queue_full', 'a streamed request to a full queue');
  assert.equal(third.headers.get('retry-after'), '1');
  assert.equal((await first).status, 200);
  assert.equal((await second).status, 200);
  // a NUL in a string: cJSON would read the prompt cut short at it, so it is refused
  const nul = await raw(S.slow.url, '/v1/completions', { body: { prompt: 'a\u0000bcdef', max_tokens: 1 } });
  assert.match(rawError(nul, 400, 'invalid_request_error', null, 'a prompt with a NUL').message, /NUL/);
  // more sequences in one request than slots + queue (1 + 1) can never be taken: a 400 naming n,
  // not a 503 a client would retry for ever
  const many = await raw(S.slow.url, '/v1/completions', { body: { prompt: ['a', 'b'], n: 2, max_tokens: 1 } });
  rawError(many, 400, 'invalid_request_error', null, 'prompts × n past slots + queue');
  assert.equal(many.json.error.param, 'n');
  assert.match(many.json.error.message, /2 prompts × n 2 = 4 sequences/);
});

test('a client that disconnects mid-stream frees its slot at the next step (the slow model)', async () => {
  const generated = async () => sum(await metrics(S.slow), 'difftrans_generated_tokens_total');
  const max = S.slow.context - 24;
  const g0 = await generated();
  const ac = new AbortController();
  const res = await fetch(S.slow.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    signal: ac.signal, body: JSON.stringify({ prompt: 'a', max_tokens: max, temperature: 0, stream: true }) });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const first = await reader.read();
  assert.ok(!first.done && first.value.length > 0, 'a first chunk');
  ac.abort();
  await reader.cancel().catch(() => {});
  const t0 = Date.now();
  let h;
  do { await new Promise((r) => setTimeout(r, 20)); h = (await raw(S.slow.url, '/health', { method: 'GET' })).json; }
  while (h.slots_in_use !== 0 && Date.now() - t0 < 30_000);
  assert.equal(h.slots_in_use, 0, 'the slot is free again');
  const made = (await generated()) - g0;
  assert.ok(made < max / 2, `the abandoned stream went on to ${made} of its ${max} tokens`);
  // and the slot serves the next request
  const r = await client(OpenAI, S.slow.url).completions.create({ model: 'm', prompt: 'a', max_tokens: 3, temperature: 0 });
  assert.equal(r.usage.completion_tokens, 3);
  console.log(`# the abandoned stream made ${made} of ${max} tokens; its slot was free ${Date.now() - t0} ms after the abort`);
});

test('errors: --api-key: a wrong or missing key is 401 invalid_api_key on /v1/* and /metrics; /health and / need none', async () => {
  // OpenAI's 401 body: type invalid_request_error, code invalid_api_key (authentication_error is no type of its API)
  const AUTH = 'invalid_request_error';
  await sdkError(client(OpenAI, S.key.url, 'wrong-key').completions.create({ model: 'm', prompt: 'x', max_tokens: 1 }),
    sdk.AuthenticationError, 401, AUTH, 'invalid_api_key', 'wrong key');
  await sdkError(client(OpenAI, S.key.url, S.key.key + 'x').models.list(), sdk.AuthenticationError, 401, AUTH,
    'invalid_api_key', 'key with a suffix');
  await sdkError(client(OpenAI, S.key.url, S.key.key.slice(0, -1)).models.list(), sdk.AuthenticationError, 401, AUTH,
    'invalid_api_key', 'key prefix');
  for (const [method, p, body] of [['POST', '/v1/completions', { prompt: 'x' }], ['POST', '/v1/chat/completions', { messages: MESSAGES }],
    ['GET', '/v1/models'], ['GET', '/metrics'], ['POST', '/v1/difftrans/attention', { prompt: 'x' }]]) {
    rawError(await raw(S.key.url, p, { method, body }), 401, AUTH, 'invalid_api_key', `${p} without a key`);
    rawError(await raw(S.key.url, p, { method, body, headers: { authorization: S.key.key } }), 401, AUTH,
      'invalid_api_key', `${p}: the key without Bearer`);
  }
  assert.equal((await raw(S.key.url, '/health', { method: 'GET' })).status, 200);
  const page = await raw(S.key.url, '/', { method: 'GET' });
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
  // the right key
  const r = await keyed.completions.create({ model: 'm', prompt: 'The program', max_tokens: 6, temperature: 0 });
  assert.equal(r.choices[0].text, E.diff.greedy.find((g) => g.prompt === 'The program' && g.max_tokens === 6).text);
  await metrics(S.key, { authorization: `Bearer ${S.key.key}` });
  // the scheme's case does not matter (RFC 7235), the key's does
  for (const scheme of ['bearer', 'BEARER']) assert.equal((await raw(S.key.url, '/v1/models', { method: 'GET',
    headers: { authorization: `${scheme} ${S.key.key}` } })).status, 200, scheme);
  rawError(await raw(S.key.url, '/v1/models', { method: 'GET', headers: { authorization: `Bearer ${S.key.key.toUpperCase()}` } }),
    401, AUTH, 'invalid_api_key', 'the key in capitals');
});

test('errors: a body that is not UTF-8 is 400, not echoed into a reply', async () => {
  const bad = Buffer.concat([Buffer.from('{"model": "m'), Buffer.from([0xff]), Buffer.from('", "prompt": "a", "max_tokens": 1}')]);
  for (const p of ['/v1/completions', '/v1/difftrans/attention']) {
    const e = rawError(await raw(S.main.url, p, { body: new Uint8Array(bad) }), 400, 'invalid_request_error', undefined, p);
    assert.match(e.message, /not valid UTF-8/);
  }
});

test('errors: unknown paths are 404, wrong methods 405, nothing of the model directory is served', async () => {
  // sent as written (node:http does not normalise dot segments as fetch does)
  for (const p of ['/nope', '/v1/nope', '/v1', '/config.json', '/model.safetensors', '/tokenizer.json', '/v1/completions/x',
    '/../config.json', '/../../../../etc/passwd', '/%2e%2e/%2e%2e/etc/passwd', '/..%2f..%2fetc%2fpasswd', '/./config.json', '//etc/passwd']) {
    for (const method of ['GET', 'POST']) {
      const r = await rawPath(S.main.url, p, method);
      // OpenAI's shape: type invalid_request_error (there is no not_found_error type), code unknown_url
      rawError(r, 404, 'invalid_request_error', 'unknown_url', `${method} ${p}`);
    }
  }
  await sdkError(main.post('/nothing-here', { body: {} }), sdk.NotFoundError, 404, 'invalid_request_error', 'unknown_url',
    'SDK POST /v1/nothing-here');
  const gone = await sdkError(main.models.retrieve('no-such-model'), sdk.NotFoundError, 404, 'invalid_request_error',
    'model_not_found', 'GET /v1/models/no-such-model');
  assert.equal(gone.param, 'model');
  assert.equal((await main.models.retrieve(S.main.name)).id, S.main.name);
  for (const [method, p] of [['GET', '/v1/completions'], ['GET', '/v1/chat/completions'], ['POST', '/health'], ['POST', '/v1/models'],
    ['DELETE', '/v1/completions'], ['GET', '/v1/difftrans/attention'], ['POST', '/metrics']]) {
    const r = await raw(S.main.url, p, { method, body: method === 'POST' ? {} : undefined });
    rawError(r, 405, 'invalid_request_error', 'method_not_allowed', `${method} ${p}`);
  }
});

test('CORS: --cors answers preflights and marks replies (streams, errors) for the origins it names', async () => {
  const ALLOWED = 'http://allowed.example:8000';
  // what a browser sends before the SDK's POST: no key, the method and headers it means to send
  const ask = 'authorization, content-type, x-stainless-lang, x-stainless-retry-count';
  const pre = (url, p, origin) => raw(url, p, { method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': ask } });
  for (const p of ['/v1/completions', '/v1/chat/completions', '/v1/models']) {
    const r = await pre(S.main.url, p, ALLOWED);
    assert.equal(r.status, 204, `preflight ${p}: ${r.status} ${r.text.slice(0, 200)}`);
    assert.equal(r.headers.get('access-control-allow-origin'), ALLOWED, `preflight ${p}: the origin`);
    assert.match(r.headers.get('access-control-allow-methods') ?? '', /\bPOST\b/, `preflight ${p}: methods`);
    const allowed = (r.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(/\s*,\s*/);
    for (const h of ask.split(', ')) assert.ok(allowed.includes(h), `preflight ${p}: ${h} not in ${allowed}`);
    assert.match(r.headers.get('vary') ?? '', /origin/i, `preflight ${p}: Vary: Origin`);
  }
  // the second origin of the list, and an origin it does not name
  const also = await pre(S.main.url, '/v1/completions', 'https://also.example');
  assert.equal(also.headers.get('access-control-allow-origin'), 'https://also.example');
  rawError(await pre(S.main.url, '/v1/completions', 'http://evil.example'), 403, 'invalid_request_error',
    'origin_not_allowed', 'preflight from an origin --cors does not name');
  // a server without --cors answers none, and adds nothing to its replies
  const none = await pre(S.q8.url, '/v1/completions', ALLOWED);
  rawError(none, 403, 'invalid_request_error', 'origin_not_allowed', 'preflight to a server without --cors');
  assert.equal(none.headers.get('access-control-allow-origin'), null);
  const post = (url, body, origin) => raw(url, '/v1/completions', { body, headers: { origin } });
  const plain = await post(S.q8.url, { prompt: 'a', max_tokens: 1 }, ALLOWED);
  assert.equal(plain.status, 200);
  assert.equal(plain.headers.get('access-control-allow-origin'), null, 'no CORS header without --cors');

  // through the SDK, as a browser build of it sends them: a reply, a stream and an error carry the origin
  const fromPage = client(OpenAI, S.main.url, 'unused', { defaultHeaders: { origin: ALLOWED } });
  const { response } = await fromPage.completions.create({ model: 'm', prompt: 'a', max_tokens: 2 }).withResponse();
  assert.equal(response.headers.get('access-control-allow-origin'), ALLOWED, 'a whole reply');
  const st = await fromPage.completions.create({ model: 'm', prompt: 'a', max_tokens: 2, stream: true }).withResponse();
  assert.equal(st.response.headers.get('access-control-allow-origin'), ALLOWED, 'a stream');
  for await (const chunk of st.data) assert.equal(chunk.object, 'text_completion');
  const bad = await post(S.main.url, { prompt: 'a', max_tokens: -1 }, ALLOWED);
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get('access-control-allow-origin'), ALLOWED, 'an error reply (the page can read why)');
  const evil = await post(S.main.url, { prompt: 'a', max_tokens: 1 }, 'http://evil.example');
  assert.equal(evil.headers.get('access-control-allow-origin'), null, 'an origin --cors does not name');

  // --cors '*' with --api-key: the preflight needs no key (a browser sends none), the request does
  const star = await pre(S.key.url, '/v1/chat/completions', 'http://anywhere.example');
  assert.equal(star.status, 204);
  assert.equal(star.headers.get('access-control-allow-origin'), '*');
  const unkeyed = await post(S.key.url, { prompt: 'a', max_tokens: 1 }, 'http://x.example');
  rawError(unkeyed, 401, 'invalid_request_error', 'invalid_api_key', "--cors '*' without the key");
  assert.equal(unkeyed.headers.get('access-control-allow-origin'), '*');
  const keyedPage = client(OpenAI, S.key.url, S.key.key, { defaultHeaders: { origin: 'http://x.example' } });
  const k = await keyedPage.completions.create({ model: 'm', prompt: 'a', max_tokens: 1 }).withResponse();
  assert.equal(k.response.headers.get('access-control-allow-origin'), '*');
});

test('the page: GET / is the built-in HTML with the element ids the browser test uses', async () => {
  const r = await raw(S.main.url, '/', { method: 'GET' });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /^text\/html/);
  for (const id of ['prompt', 'generate', 'output', 'analyse', 'layer', 'head', 'map1', 'map2', 'diff', 'lambda', 'span-share'])
    assert.match(r.text, new RegExp(`id=["']?${id}["'\\s>]`), `#${id}`);
  assert.doesNotMatch(r.text, /<script[^>]+src=|<link[^>]+href=["']?https?:|@import|url\(["']?https?:/i, 'nothing external');
});
