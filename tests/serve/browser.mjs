#!/usr/bin/env node
// browser.mjs URL SCREENSHOT [NODE_MODULES_DIR [V2_PAIRS]] — the page of `difftrans serve` in headless
// Chromium (Debian's /usr/bin/chromium, driven by playwright-core; no browser is downloaded). URL is a
// running server (no --api-key); SCREENSHOT the PNG kept as the test artefact; NODE_MODULES_DIR where
// playwright-core is installed (default: resolved from this file, as node does); V2_PAIRS, for a DIFF V2
// model, its config's v2_pairs: "2j,2j+1" (the default) or "j,j+h" (the v2-crossgroup ablation).
//
// It loads the page and fails on any console error or warning, uncaught page error, failed request
// or error reply, except in the one step that asks for an error on purpose. It streams a greedy
// completion and checks the text equals the same request made without streaming; stops a long one;
// analyses the prompt and reads back the heat maps' pixels: every map shown has positive-colour
// cells, a softmax map has no negative-colour cell, and the difference map has negative-colour cells
// exactly when the API's differential weights for that head have negative values (required for a
// DIFF model); llama shows map 1 only. It switches layer and head and checks the maps are redrawn,
// marks an answer span by clicking two tokens and checks #span-share against the share computed
// here from the API's rows, checks an API error reaches the message box, that the page fits a
// narrow window, and saves the screenshot.
// The heads' titles and the head selector name the query heads the model pairs (DIFF j and j + h,
// DIFF V2 2j and 2j + 1 or, crossgroup, j and j + h), as the API's query_heads does.
// From the keyboard: Tab reaches the layer and head selectors, the maps and the λ charts; in a map the
// arrow keys, Home / End, Ctrl+Home / Ctrl+End and Page Down move a cursor whose cell (aria-activedescendant,
// role gridcell, its row and column indices) and tooltip give that cell's values, Escape leaves it and the
// map is as before; in the λ per layer chart Enter shows the layer of the bar under the cursor.
// Colour scales: the softmax maps' legend runs from 0 to their largest weight, the difference's from
// −m to +m, m its largest |value|; a negative cell is orange, a positive one blue; with the reply
// rewritten on its way to the page (a +x and a −x cell; then a difference reaching far past every
// softmax weight) the ±x cells differ in colour and the softmax maps' pixels do not change.
// Exit 0 on success, 1 with a message on failure.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [url, shot, modules, pairsArg] = process.argv.slice(2);
if (!url || !shot || (pairsArg && !['2j,2j+1', 'j,j+h'].includes(pairsArg))) {
  console.error('usage: browser.mjs URL SCREENSHOT [NODE_MODULES_DIR [2j,2j+1|j,j+h]]');
  process.exit(2);
}
const v2Pairs = pairsArg || '2j,2j+1';
const base = url.replace(/\/+$/, '');
const from = modules ? path.join(path.resolve(modules), 'noop.js') : import.meta.filename;
const pw = await import(pathToFileURL(createRequire(from).resolve('playwright-core')).href);
const chromium = pw.chromium || pw.default.chromium;

class Failure extends Error {}
const fail = (msg) => { throw new Failure(msg); };
const check = (ok, msg) => { if (!ok) fail(msg); };
const log = (msg) => console.log('browser: ' + msg);

async function api(p, body) {
  const res = await fetch(base + p, body === undefined ? {} : {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) fail(`${p} answered ${res.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

// Pixels of a canvas by colour: positive (the blue ramp: blue well above red), negative (the orange
// ramp: red well above blue); greys (background, masked triangle, labels) count as neither. Read from
// a copy, so that the page's own canvas is read back only once per call.
function pixels(page, id) {
  return page.evaluate((id) => {
    const cv = document.getElementById(id);
    if (!cv || cv.width === 0 || cv.height === 0) return null;
    const copy = document.createElement('canvas');
    copy.width = cv.width;
    copy.height = cv.height;
    const g = copy.getContext('2d', { willReadFrequently: true });
    g.drawImage(cv, 0, 0);
    const d = g.getImageData(0, 0, cv.width, cv.height).data;
    let pos = 0, neg = 0, hash = 0;
    for (let i = 0; i < d.length; i += 4) {
      const r = d[i], b = d[i + 2];
      if (b - r > 8) pos++;
      else if (r - b > 8) neg++;
      hash = (hash * 31 + r * 7 + d[i + 1] * 3 + b) >>> 0;
    }
    return { pos, neg, hash, w: cv.width, h: cv.height, drawn: cv.dataset.drawn || '',
      visible: cv.offsetParent !== null };
  }, id);
}

// The colour [r, g, b] at the middle of cell (query t, key k) of a map.
function cellColour(page, id, t, k) {
  return page.evaluate(([id, t, k]) => {
    const cv = document.getElementById(id), geo = cv._geo, s = cv.width / geo.W;
    const copy = document.createElement('canvas');
    copy.width = cv.width;
    copy.height = cv.height;
    const g = copy.getContext('2d', { willReadFrequently: true });
    g.drawImage(cv, 0, 0);
    const edge = (i) => geo.margin + Math.round(i * geo.cell);
    const mid = (i) => Math.floor((edge(i) + edge(i + 1)) / 2 * s);
    return [...g.getImageData(mid(k), mid(t), 1, 1).data.slice(0, 3)];
  }, [id, t, k]);
}
const blue = (c) => c[2] - c[0] > 8;
const orange = (c) => c[0] - c[2] > 8;

// A map's legend: its range (data-min, data-max) and text.
function legendOf(page, id) {
  return page.evaluate((id) => {
    const e = document.getElementById('legend-' + id);
    return { min: Number(e.dataset.min), max: Number(e.dataset.max), text: e.textContent };
  }, id);
}
const maxAbsOf = (rowsList) => Math.max(...rowsList.flat(2).map(Math.abs));

// The page's number format (fmt): 4 decimals, or 3 significant digits below 0.001.
const fmt = (v) => (Math.abs(v) >= 0.001 || v === 0 ? v.toFixed(4) : v.toExponential(2));

function shareOf(row, a, b) {
  let all = 0, sp = 0;
  row.forEach((v, k) => { all += v; if (k >= a && k <= b) sp += v; });
  return sp / all;
}

const problems = [];
let expectError = false;
let stopping = false;
const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'difftrans-browser-'));
let ctx = null;
let code = 0;
try {
  const models = await api('/v1/models');
  const info = models.data && models.data[0] && models.data[0].difftrans;
  check(info && info.arch, '/v1/models has no difftrans.arch');
  const arch = info.arch, llama = arch === 'llama';
  log(`model ${models.data[0].id}: ${arch}, ${info.layers} layers × ${info.heads} heads, context ${info.context}`);

  ctx = await chromium.launchPersistentContext(userDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1400, height: 1000 },
  });
  const page = ctx.pages()[0] || await ctx.newPage();
  page.on('console', (m) => {
    const t = m.type();
    if (t !== 'error' && t !== 'warning') return;
    if (expectError && /status of 400/.test(m.text())) return;
    problems.push(`console ${t}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('requestfailed', (r) => {
    const why = r.failure() ? r.failure().errorText : '?';
    if (stopping && why === 'net::ERR_ABORTED' && r.url().endsWith('/v1/completions')) return;
    problems.push(`request failed: ${r.method()} ${r.url()}: ${why}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400 && !(expectError && r.status() === 400)) problems.push(`reply ${r.status()} to ${r.request().method()} ${r.url()}`);
  });
  const noProblems = (step) => check(problems.length === 0, `${step}:\n  ${problems.join('\n  ')}`);

  const res = await page.goto(base + '/', { waitUntil: 'load' });
  check(res && res.ok(), `GET / answered ${res ? res.status() : 'nothing'}`);
  check(/text\/html/.test(res.headers()['content-type'] || ''), 'GET / is not text/html');
  await page.waitForFunction(() => !/loading/.test(document.getElementById('model-info').textContent), null, { timeout: 15000 });
  const header = await page.textContent('#model-info');
  check(header.includes(models.data[0].id), `the header does not name the model: "${header}"`);
  noProblems('loading the page');

  // Streaming: greedy, so that the streamed text must equal the reply without streaming.
  // Short enough for a server started with --attention-max-tokens 64 and a small BPE vocabulary.
  const prompt = 'The code of kx is 9078. What is the code of kx? Answer:';
  await page.fill('#prompt', prompt);
  await page.fill('#max-tokens', '24');
  await page.fill('#temperature', '0');
  // min_p: off unless set, and sent as set (greedy: it changes nothing the comparison below sees)
  check(await page.inputValue('#min-p') === '0', `#min-p starts at "${await page.inputValue('#min-p')}", not 0 (off)`);
  await page.fill('#min-p', '0.05');
  const sent = [];
  const onRequest = (r) => { if (r.url().endsWith('/v1/completions')) sent.push(r.postData()); };
  page.on('request', onRequest);
  await page.evaluate(() => {
    window.__pieces = 0;
    // Records, not callbacks: a fast server's whole stream can arrive in one read.
    new MutationObserver((records) => { window.__pieces += records.length; }).observe(document.getElementById('output'), { childList: true, characterData: true, subtree: true });
  });
  await page.click('#generate');
  await page.waitForFunction(() => ['done', 'error', 'stopped'].includes(document.getElementById('output').dataset.state), null, { timeout: 120000 });
  const streamed = await page.evaluate(() => ({ state: document.getElementById('output').dataset.state,
    text: document.getElementById('output').textContent, pieces: window.__pieces, status: document.getElementById('gen-status').textContent,
    message: document.getElementById('message').textContent }));
  check(streamed.state === 'done', `generation ended in state ${streamed.state}: ${streamed.message}`);
  page.off('request', onRequest);
  check(sent.length === 1 && JSON.parse(sent[0]).min_p === 0.05, `the page sent min_p ${sent.map((b) => JSON.parse(b).min_p)}, not 0.05`);
  const plain = await api('/v1/completions', { prompt, max_tokens: 24, temperature: 0, top_p: 0.95, min_p: 0.05, top_k: 40, seed: 0 });
  check(streamed.text === plain.choices[0].text,
    `the streamed text ${JSON.stringify(streamed.text)} differs from the reply without streaming ${JSON.stringify(plain.choices[0].text)}`);
  check(plain.usage.completion_tokens === 0 || streamed.text.length > 0, 'nothing streamed into #output');
  check(plain.usage.completion_tokens < 2 || streamed.pieces >= 2, `#output changed ${streamed.pieces} times for ${plain.usage.completion_tokens} tokens: not appended piece by piece`);
  check(/tokens/.test(streamed.status), `no summary after the stream: "${streamed.status}"`);
  check(await page.isEnabled('#generate') && !(await page.isEnabled('#stop')), 'Generate/Stop not reset after the stream');
  log(`streamed ${plain.usage.completion_tokens} tokens in ${streamed.pieces} updates: ${JSON.stringify(streamed.text.slice(0, 60))}`);
  noProblems('streaming a completion');

  // Stop: a long generation stopped after its first text (a tiny model may finish before the click).
  const long = Math.max(1, Math.min(400, info.context - plain.usage.prompt_tokens));
  await page.fill('#max-tokens', String(long));
  await page.fill('#temperature', '0.8');
  stopping = true;
  await page.click('#generate');
  await page.waitForFunction(() => {
    const o = document.getElementById('output');
    return o.textContent.length > 0 || o.dataset.state !== 'streaming';
  }, null, { timeout: 120000 });
  // checked and clicked in one step inside the page: between a separate check and click a fast server
  // can finish the stream, which disables Stop, and the click then waits for a button that stays disabled
  await page.evaluate(() => {
    const stop = document.getElementById('stop');
    if (!stop.disabled) stop.click();
  });
  await page.waitForFunction(() => ['done', 'error', 'stopped'].includes(document.getElementById('output').dataset.state), null, { timeout: 60000 });
  const stopState = await page.getAttribute('#output', 'data-state');
  check(stopState === 'stopped' || stopState === 'done', `after Stop the output is in state ${stopState}`);
  check(!(await page.isVisible('#message')), 'Stop showed an error message: ' + await page.textContent('#message'));
  await page.waitForTimeout(300);
  stopping = false;
  log(`stop: ${stopState}`);
  noProblems('stopping a completion');

  // The attention view.
  await page.fill('#max-tokens', '24');
  await page.click('#analyse');
  await page.waitForFunction(() => document.getElementById('map1').dataset.drawn || document.getElementById('message').classList.contains('shown'), null, { timeout: 120000 });
  check(!(await page.isVisible('#message')), 'Analyse showed an error: ' + await page.textContent('#message'));
  const att = await api('/v1/difftrans/attention', { prompt });
  const n = att.tokens.length, L = att.n_layers, H = att.n_heads;
  check(att.arch === arch, `attention arch ${att.arch} vs model ${arch}`);
  const headOf = (l, j) => att.layers.find((x) => x.layer === l).heads.find((h) => h.head === j);
  const hasNeg = (rows) => rows.some((r) => r.some((v) => v < 0));
  const ids = llama ? ['map1'] : ['map1', 'map2', 'diff'];

  async function checkMaps(l, j, step) {
    const h = headOf(l, j);
    const out = {};
    for (const id of ['map1', 'map2', 'diff']) {
      const p = await pixels(page, id);
      check(p, `${step}: no canvas#${id}`);
      if (!ids.includes(id)) { check(!p.visible, `${step}: canvas#${id} shows for a llama model`); continue; }
      check(p.visible, `${step}: canvas#${id} is hidden`);
      check(p.drawn === `${l}:${j}:${n}`, `${step}: canvas#${id} shows "${p.drawn}", not layer ${l} head ${j} of ${n} tokens`);
      check(p.pos >= n, `${step}: canvas#${id} has ${p.pos} positive-colour pixels (blank?)`);
      const rows = llama ? h.map : h[id];
      if (id === 'diff') {
        check(hasNeg(rows) === p.neg > 0, `${step}: the difference has ${hasNeg(rows) ? '' : 'no '}negative weights but the map ${p.neg} negative-colour pixels`);
      } else {
        check(p.neg === 0, `${step}: softmax canvas#${id} has ${p.neg} negative-colour pixels`);
      }
      out[id] = p;
    }
    return out;
  }
  const first = await checkMaps(0, 0, 'layer 0 head 0');
  log('maps at layer 0 head 0: ' + ids.map((id) => `${id} ${first[id].w}×${first[id].h} px, +${first[id].pos} −${first[id].neg}`).join('; '));

  if (llama) {
    check(/does not apply/.test(await page.textContent('#lambda')), '#lambda does not say λ does not apply to llama');
  } else {
    const bars = await page.locator('#lambda svg rect.bar').count();
    check(bars === L, `#lambda has ${bars} bars for ${L} layers`);
  }
  check(await page.isVisible('#token-lambda-box') === (arch === 'difftrans_v2'), '#token-lambda-box shown for the wrong architecture');

  // Another layer and head: the one whose difference has the most negative weights (the last when
  // none has any), so that the negative colour is seen where there is one.
  let l2 = L - 1, j2 = H - 1, most = 0;
  const negCount = (l, j) => (llama ? 0 : headOf(l, j).diff.reduce((c, r) => c + r.filter((v) => v < 0).length, 0));
  for (let l = 0; l < L; l++) for (let j = 0; j < H; j++) {
    const c = negCount(l, j);
    if ((l !== 0 || j !== 0) && c > most) { most = c; l2 = l; j2 = j; }
  }
  if (arch === 'diffllama') {
    check(most > 0 || negCount(0, 0) > 0, 'the DIFF model\'s differential weights have no negative value in any layer or head ' +
      '(λ·map 2 never exceeds map 1: the maps are still near uniform); the page cannot be shown drawing them: train the test model longer');
  }
  await page.selectOption('#layer', String(l2));
  await page.selectOption('#head', String(j2));
  const second = await checkMaps(l2, j2, `layer ${l2} head ${j2}`);
  if (arch === 'diffllama') check(first.diff.neg + second.diff.neg > 0, 'no negative-colour pixels in the DIFF difference maps');
  if (!llama) log(`maps at layer ${l2} head ${j2}: diff +${second.diff.pos} −${second.diff.neg} (${negCount(l2, j2)} negative weights)`);
  if (l2 !== 0 || j2 !== 0) {
    for (const id of ids) {
      const same = JSON.stringify(llama ? headOf(0, 0).map : headOf(0, 0)[id]) === JSON.stringify(llama ? headOf(l2, j2).map : headOf(l2, j2)[id]);
      check(same || second[id].hash !== first[id].hash, `canvas#${id} was not redrawn for layer ${l2} head ${j2}`);
    }
  }
  noProblems('the attention view');

  // The query heads each head's maps read: DIFF j and j + h, DIFF V2 2j and 2j + 1 or (crossgroup)
  // j and j + h, llama j — in the API, the head selector and the maps' titles.
  const queryHeads = (j) => {
    if (llama) return [j];
    return arch === 'diffllama' || v2Pairs === 'j,j+h' ? [j, j + H] : [2 * j, 2 * j + 1];
  };
  if (arch === 'difftrans_v2') {
    check(att.v2_pairs === v2Pairs, `the API's v2_pairs is ${JSON.stringify(att.v2_pairs)}, the model's ${v2Pairs}`);
  }
  for (const Lx of att.layers) for (const h of Lx.heads) {
    const want = JSON.stringify(queryHeads(h.head));
    check(JSON.stringify(h.query_heads) === want,
      `layer ${Lx.layer} head ${h.head}: the API's query_heads ${JSON.stringify(h.query_heads)}, expected ${want}`);
  }
  const headOptions = await page.$$eval('#head option', (os) => os.map((o) => o.textContent));
  check(headOptions.length === H, `#head has ${headOptions.length} options for ${H} heads`);
  headOptions.forEach((text, j) => {
    const q = queryHeads(j);
    check(llama ? !/query heads/.test(text) : text.includes(`query heads ${q[0]} and ${q[1]}`),
      `#head option ${j}: "${text}", expected query heads ${q}`);
  });
  for (const [w, id] of ids.entries()) {
    const title = await page.textContent('#title-' + id);
    if (id === 'diff') continue;
    const want = llama ? new RegExp(`head ${j2}(?!\\d)`) : new RegExp(`query head ${queryHeads(j2)[w]}(?!\\d)`);
    check(want.test(title), `head ${j2}: #title-${id} is "${title}", expected ${want}`);
  }
  log(`head ${j2}: ${llama ? 'head ' + j2 : 'query heads ' + queryHeads(j2).join(' and ')}` +
    (arch === 'difftrans_v2' ? ` (v2_pairs ${v2Pairs})` : ''));

  // The answer span — the tokens of the needle "9078" in the context (the last two tokens when the
  // texts do not show it): click its first and last token; the share against the API's rows.
  let a = Math.max(1, n - 3), b = Math.max(1, n - 2);
  {
    const starts = [];
    let text = '';
    for (const t of att.tokens) { starts.push(text.length); text += t; }
    const at = text.indexOf('9078');
    if (at >= 0) {
      a = starts.findLastIndex((s0) => s0 <= at);
      b = starts.findLastIndex((s0) => s0 < at + 4);
    }
  }
  await page.click(`#tokens .tok[data-i="${a}"]`);
  await page.click(`#tokens .tok[data-i="${b}"]`);
  const inSpan = await page.locator('#tokens .tok.in-span').count();
  check(inSpan === b - a + 1, `${inSpan} tokens marked for the span ${a}–${b}`);
  const rowsText = await page.$$eval('#span-share tr', (trs) => trs.slice(1).map((tr) => [...tr.children].map((td) => td.textContent)));
  check(rowsText.length === ids.length, `#span-share has ${rowsText.length} rows for ${ids.length} maps`);
  const h2 = headOf(l2, j2);
  rowsText.forEach((cells, i) => {
    const rows = llama ? h2.map : h2[ids[i]];
    const want = 100 * shareOf(rows[n - 1], a, b);
    const got = parseFloat(cells[1]);
    check(/%/.test(cells[1]) && Math.abs(got - want) <= 0.051, `#span-share ${cells[0]}: "${cells[1]}", computed ${want.toFixed(2)} %`);
  });
  log('span share (last query token): ' + rowsText.map((c) => `${c[0]} ${c[1]}`).join(', '));
  // The from/to inputs mark a span too.
  await page.fill('#span-from', '0');
  await page.fill('#span-to', '1');
  await page.dispatchEvent('#span-to', 'change');
  check(await page.locator('#tokens .tok.in-span').count() === 2, 'the from/to inputs did not mark tokens 0–1');
  await page.click(`#tokens .tok[data-i="${a}"]`);
  await page.click(`#tokens .tok[data-i="${b}"]`);

  // Hover: the tooltip names the query and key and gives the weight.
  await page.evaluate(() => document.getElementById('map1').scrollIntoView({ block: 'start' }));
  const box = await page.locator('#map1').boundingBox();
  const geo = await page.evaluate(() => document.getElementById('map1')._geo);
  const tq = Math.min(n - 1, 5), tk = Math.max(0, tq - 1);
  await page.mouse.move(box.x + geo.margin + (tk + 0.5) * geo.cell, box.y + geo.margin + (tq + 0.5) * geo.cell);
  const tip = await page.textContent('#tooltip');
  check(await page.isVisible('#tooltip') && tip.includes(`query ${tq}`) && tip.includes(`key   ${tk}`), `hover tooltip: "${tip}"`);
  await page.mouse.move(0, 0);
  noProblems('marking a span');

  // The head shown (layer l2, head j2) and the last query token.
  const hc = headOf(l2, j2), last = n - 1;

  // The keyboard. From Analyse, Tab reaches the selectors, the maps and the λ charts, in that order.
  const focusedId = () => page.evaluate(() => {
    const e = document.activeElement;
    const c = e && e.closest('[id]');
    return c ? c.id : e ? e.tagName : '';
  });
  const stopsWanted = ['layer', 'head', ...ids];
  if (!llama) stopsWanted.push('lambda');
  if (arch === 'difftrans_v2') stopsWanted.push('token-lambda');
  await page.focus('#analyse');
  const stops = [];
  for (let i = 0; i < n + 40 && stops[stops.length - 1] !== stopsWanted[stopsWanted.length - 1]; i++) {
    await page.keyboard.press('Tab');
    stops.push(await focusedId());
  }
  const reached = stops.filter((x) => stopsWanted.includes(x));
  check(JSON.stringify(reached) === JSON.stringify(stopsWanted),
    `Tab from Analyse reached ${JSON.stringify(stops)}, not ${stopsWanted.join(', ')} in that order, each once`);
  // A map's cursor: its cell (aria-activedescendant) and the tooltip.
  const cursorOf = (id) => page.evaluate((id) => {
    const cv = document.getElementById(id);
    const ad = cv.getAttribute('aria-activedescendant');
    const c = ad ? document.getElementById(ad) : null;
    const row = c && c.parentElement;
    const tip = document.getElementById('tooltip');
    return {
      focused: document.activeElement === cv, ad, inside: !!c && cv.contains(c), role: c && c.getAttribute('role'),
      rowRole: row && row.getAttribute('role'), row: row && Number(row.getAttribute('aria-rowindex')),
      col: c && Number(c.getAttribute('aria-colindex')), text: c ? c.textContent : null,
      tip: tip.style.display === 'block' ? tip.textContent : null, rowcount: cv.getAttribute('aria-rowcount'),
    };
  }, id);
  async function expectCursor(id, t, k, step) {
    const c = await cursorOf(id);
    check(c.focused && c.inside && c.role === 'gridcell' && c.rowRole === 'row',
      `${step}: canvas#${id} has no active grid cell: ${JSON.stringify(c)}`);
    check(c.row === t + 1 && c.col === k + 1 && c.rowcount === String(n),
      `${step}: the cell is at row ${c.row}, column ${c.col} of ${c.rowcount}, not query ${t} key ${k}`);
    const want = [`query ${t}  `, `key   ${k}  `];
    if (llama) want.push(`softmax map = ${fmt(hc.map[t][k])}`);
    else {
      want.push(`map 1      = ${fmt(hc.map1[t][k])}`, `map 2      = ${fmt(hc.map2[t][k])}`,
        `difference = ${fmt(hc.diff[t][k])}`);
    }
    for (const w of want) check(c.text.includes(w), `${step}: the cell's text "${c.text}" lacks "${w}"`);
    check(c.tip === c.text.split('; ').join('\n'), `${step}: the tooltip "${c.tip}" is not the cell's text`);
  }
  await page.focus('#span-clear');
  const plainMap = await pixels(page, 'map1');
  await page.keyboard.press('Tab');
  await expectCursor('map1', 0, 0, 'map 1 reached by Tab');
  const p8 = Math.min(8, last);
  const moves = [
    ['ArrowDown', 1, 0], ['ArrowDown', 2, 0], ['ArrowDown', 3, 0], ['ArrowDown', 4, 0], ['ArrowRight', 4, 1],
    ['ArrowRight', 4, 2], ['End', 4, 4], ['ArrowRight', 4, 4], ['ArrowUp', 3, 3], ['ArrowLeft', 3, 2], ['Home', 3, 0],
    ['Control+End', last, last], ['ArrowDown', last, last], ['Control+Home', 0, 0], ['PageDown', p8, 0],
    ['End', p8, p8],
  ].map(([key, t, k]) => [key, Math.min(t, last), Math.min(k, t, last)]);
  for (const [key, t, k] of moves) {
    await page.keyboard.press(key);
    await expectCursor('map1', t, k, `map 1 after ${key}`);
  }
  const withCursor = await pixels(page, 'map1');
  check(withCursor.hash !== plainMap.hash, 'the keyboard cursor is not drawn on map 1');
  await page.keyboard.press('Escape');
  const left = await cursorOf('map1');
  check(left.focused && !left.ad && !left.text && left.tip === null,
    `Escape did not leave the cell: ${JSON.stringify(left)}`);
  check((await pixels(page, 'map1')).hash === plainMap.hash, 'after Escape map 1 is not as it was drawn');
  await page.keyboard.press('ArrowLeft');
  await expectCursor('map1', p8, p8 - 1, 'map 1, an arrow key after Escape');
  if (!llama) {
    // the cursor is the same cell on the next map, and leaves the one before
    await page.keyboard.press('Tab');
    await expectCursor('map2', p8, p8 - 1, 'map 2 reached by Tab');
    check((await cursorOf('map1')).ad === null && (await pixels(page, 'map1')).hash === plainMap.hash,
      'map 1 keeps its cursor after Tab');
    // the λ per layer chart: its cursor starts on the layer shown; Home and Enter show layer 0, End and
    // Enter the last, and the chart drawn again keeps the focus
    await page.focus('#diff');
    await page.keyboard.press('Tab');
    const bar = () => page.evaluate(() => {
      const svg = document.activeElement;
      const ad = svg && svg.getAttribute('aria-activedescendant');
      const b = ad ? document.getElementById(ad) : null;
      const tip = document.getElementById('tooltip');
      const box = svg.closest('[id]');
      return {
        box: box && box.id, role: svg.getAttribute('role'), ad, barRole: b && b.getAttribute('role'),
        selected: b && b.getAttribute('aria-selected'), col: b && b.getAttribute('aria-colindex'),
        label: b && b.getAttribute('aria-label'), tip: tip.style.display === 'block' ? tip.textContent : null,
      };
    });
    let bs = await bar();
    check(bs.box === 'lambda' && bs.role === 'listbox' && bs.ad === `lambda-bar-${l2}` && bs.barRole === 'option' &&
      bs.selected === 'true' && bs.tip === bs.label && bs.label.startsWith(`layer ${l2}: λ = `),
    `the λ chart reached by Tab: ${JSON.stringify(bs)}`);
    const drawn = () => page.evaluate(() => [document.getElementById('layer').value,
      document.getElementById('map1').dataset.drawn]);
    for (const [key, l] of [['Home', 0], ['End', L - 1]]) {
      await page.keyboard.press(key);
      await page.keyboard.press('Enter');
      bs = await bar();
      const shown = await drawn();
      check(shown[0] === String(l) && shown[1] === `${l}:${j2}:${n}`,
        `${key} and Enter in the λ chart show layer ${shown[0]} (maps ${shown[1]}), not ${l}`);
      check(bs.box === 'lambda' && bs.ad === `lambda-bar-${l}` && bs.selected === 'true' && bs.tip === bs.label,
        `after Enter on layer ${l} the λ chart lost the focus or its cursor: ${JSON.stringify(bs)}`);
    }
    if (arch === 'difftrans_v2') {
      await page.keyboard.press('Tab');
      await page.keyboard.press('ArrowRight');
      bs = await bar();
      check(bs.box === 'token-lambda' && bs.role === 'grid' && bs.ad === 'token-lambda-bar-1' &&
        bs.barRole === 'gridcell' && bs.col === '2' && bs.tip === bs.label && bs.label.startsWith('token 1 '),
      `the λₜ chart, ArrowRight: ${JSON.stringify(bs)}`);
    }
    // the layer selector from the keyboard, back to layer l2
    await page.focus('#layer');
    for (let i = 0; i < L && (await page.inputValue('#layer')) !== String(l2); i++) {
      await page.keyboard.press('ArrowUp');
    }
    const shown = await drawn();
    check(shown[1] === `${l2}:${j2}:${n}`, `the layer selector did not go back to layer ${l2}: maps ${shown[1]}`);
  }
  log(`keyboard: ${stopsWanted.join(' → ')}; the cursor moved through ${moves.length} keys`);
  noProblems('the keyboard');

  // Colour scales: map 1 and map 2 from 0 to their largest weight, the difference ±its largest |value|.
  const softIds = llama ? ['map1'] : ['map1', 'map2'];
  const softMax = maxAbsOf(softIds.map((id) => (llama ? hc.map : hc[id])));
  for (const id of softIds) {
    const g = await legendOf(page, id);
    check(g.min === 0 && g.max === softMax,
      `the legend of ${id} runs ${g.min}..${g.max}, not 0..${softMax} (the softmax maps' largest weight)`);
  }
  if (!llama) {
    const dMax = maxAbsOf([hc.diff]);
    const g = await legendOf(page, 'diff');
    check(g.min === -dMax && g.max === dMax, `the difference's legend runs ${g.min}..${g.max}, not ±${dMax}`);
    // its most negative and most positive cells, orange and blue
    let lo = [0, 0, Infinity], hi = [0, 0, -Infinity];
    hc.diff.forEach((r, t) => r.forEach((v, k) => {
      if (v < lo[2]) lo = [t, k, v];
      if (v > hi[2]) hi = [t, k, v];
    }));
    if (lo[2] < 0) {
      const c = await cellColour(page, 'diff', lo[0], lo[1]);
      check(orange(c), `the difference's cell ${lo[0]},${lo[1]} (${lo[2]}) is rgb(${c}), not orange`);
    }
    const c = await cellColour(page, 'diff', hi[0], hi[1]);
    check(blue(c), `the difference's cell ${hi[0]},${hi[1]} (${hi[2]}) is rgb(${c}), not blue`);

    // The reply rewritten for this head on its way to the page: cells of +x and −x (x half the largest
    // |value|, which stays), then the same with one cell at −4 × the largest of all, far past every
    // softmax weight.
    const ta = last, ka = 0, tb = last, kb = Math.min(1, last);
    const x = dMax / 2, far = -4 * Math.max(dMax, softMax);
    let patch = null;
    await page.route('**/v1/difftrans/attention', async (route) => {
      const res = await route.fetch();
      const j = await res.json();
      if (patch && res.ok()) patch(j.layers.find((y) => y.layer === l2).heads.find((y) => y.head === j2));
      await route.fulfill({ response: res, json: j });
    });
    const reanalyse = async () => {
      await page.evaluate(() => { document.getElementById('att-status').textContent = ''; });
      await page.click('#analyse');
      await page.waitForFunction((k) => document.getElementById('att-status').textContent.startsWith(k + ' tokens'), n,
        { timeout: 60000 });
    };
    patch = (h) => { h.diff[ta][ka] = x; h.diff[tb][kb] = -x; };
    await reanalyse();
    const plus = await cellColour(page, 'diff', ta, ka), minus = await cellColour(page, 'diff', tb, kb);
    check(blue(plus) && orange(minus) && plus.join() !== minus.join(),
      `+${x} is rgb(${plus}) and −${x} rgb(${minus}): not blue and orange`);
    const before = {};
    for (const id of ids) before[id] = await pixels(page, id);
    patch = (h) => { h.diff[ta][ka] = x; h.diff[tb][kb] = -x; h.diff[last][last] = far; };
    await reanalyse();
    const g2 = await legendOf(page, 'diff');
    check(g2.min === far && g2.max === -far,
      `with a difference of ${far} its legend runs ${g2.min}..${g2.max}, not ±${-far}`);
    for (const id of softIds) {
      check((await pixels(page, id)).hash === before[id].hash, `${id}'s colours changed with the difference's range`);
      const g = await legendOf(page, id);
      check(g.max === softMax, `${id}'s legend runs to ${g.max} with the difference at ${far}, not ${softMax}`);
    }
    check((await pixels(page, 'diff')).hash !== before.diff.hash, 'the difference was not drawn again, wider');
    const plus2 = await cellColour(page, 'diff', ta, ka);
    check(blue(plus2) && plus2.join() !== plus.join(), `+${x} on the wider scale is rgb(${plus2}), as before`);
    patch = null;
    await page.unroute('**/v1/difftrans/attention');
    await reanalyse();
    log(`colour scales: softmax 0..${softMax.toPrecision(3)}, difference ±${dMax.toPrecision(3)}; ` +
      `±${x.toPrecision(3)}: rgb(${plus}) / rgb(${minus})`);
  }
  noProblems('the colour scales');

  await page.screenshot({ path: shot, fullPage: true });
  log('screenshot: ' + shot);

  // An error reply goes to the message box (and the browser logs the 400 it got).
  expectError = true;
  await page.fill('#max-tokens', String(info.context + 10));
  await page.click('#generate');
  await page.waitForSelector('#message.shown', { timeout: 30000 });
  const msg = await page.textContent('#message');
  check(/400/.test(msg) && /context/.test(msg), `the error message box says "${msg}"`);
  await page.waitForTimeout(200);
  expectError = false;
  await page.click('#message-close');
  check(!(await page.isVisible('#message')), 'the message box does not close');
  noProblems('an error reply');

  // Tokens that cut a character (byte tokens of "é", "日", "😀", in a byte-level model and in a small
  // BPE vocabulary) decode alone to U+FFFD: the strip names the character instead, and a span over
  // a character's pieces reads as that character.
  const u8 = 'café 日本 😀';
  const u8att = await api('/v1/difftrans/attention', { prompt: u8, layer: 0, head: 0 });
  await page.fill('#prompt', u8);
  await page.click('#analyse');
  await page.waitForFunction((n) => document.getElementById('att-status').textContent.startsWith(n + ' tokens'), u8att.tokens.length, { timeout: 60000 });
  const labels = await page.$$eval('#tokens .tok', (bs) => bs.map((b) => b.lastChild.textContent));
  const cut = u8att.tokens.map((t, i) => (t.includes('\ufffd') ? i : -1)).filter((i) => i >= 0);
  check(cut.length > 0, `no token of ${JSON.stringify(u8)} cuts a character: ${JSON.stringify(u8att.tokens)}`);
  for (const i of cut) {
    check(!labels[i].includes('\ufffd') && /[é日本😀]/u.test(labels[i]), `token ${i} (${JSON.stringify(u8att.tokens[i])}) is labelled ${JSON.stringify(labels[i])}, not by its character`);
  }
  const e0 = u8att.tokens.findIndex((t, i) => i > 0 && t.includes('\ufffd') && labels[i].includes('é'));
  if (e0 >= 0) {
    let e1 = e0;
    while (e1 + 1 < labels.length && labels[e1 + 1] === labels[e0] && u8att.text_offset[e1 + 1] === u8att.text_offset[e0]) e1++;
    await page.click(`#tokens .tok[data-i="${e0}"]`);
    await page.click(`#tokens .tok[data-i="${e1}"]`);
    const st = await page.textContent('#span-text');
    check(st.startsWith('“é”'), `the span of tokens ${e0}–${e1} (é) reads ${JSON.stringify(st)}`);
    // Analysed again, the same prompt keeps its marked span; another text of as many tokens does not
    const analyse = async (text, n) => {
      await page.evaluate(() => { document.getElementById('att-status').textContent = ''; });
      await page.fill('#prompt', text);
      await page.click('#analyse');
      await page.waitForFunction((k) => document.getElementById('att-status').textContent.startsWith(k + ' tokens'), n,
        { timeout: 60000 });
    };
    await analyse(u8, u8att.tokens.length);
    check(await page.locator('#tokens .tok.in-span').count() === e1 - e0 + 1, 'the same prompt analysed again lost its span');
    const other = 'cafë 日本 😀';
    const otherAtt = await api('/v1/difftrans/attention', { prompt: other, layer: 0, head: 0 });
    if (otherAtt.tokens.length === u8att.tokens.length) {
      await analyse(other, otherAtt.tokens.length);
      check(await page.locator('#tokens .tok.in-span').count() === 0,
        `a span marked on ${JSON.stringify(u8)} stayed on ${JSON.stringify(other)} (as many tokens)`);
    }
  }
  log('cut characters labelled: ' + cut.map((i) => labels[i]).join(' '));
  noProblems('tokens that cut characters');

  // An attention error (a prompt past --attention-max-tokens) reaches the message box, and the
  // maps left from the last prompt are said to be that prompt's.
  const tooLong = 'qzjv '.repeat(400);
  const refused = await fetch(base + '/v1/difftrans/attention', { method: 'POST', body: JSON.stringify({ prompt: tooLong, layer: 0, head: 0 }) });
  check(refused.status === 400, `an attention prompt of ${tooLong.length} characters answered ${refused.status}, not 400`);
  expectError = true;
  await page.fill('#prompt', tooLong);
  await page.click('#analyse');
  await page.waitForSelector('#message.shown', { timeout: 30000 });
  const attMsg = await page.textContent('#message');
  check(/400/.test(attMsg) && /tokens/.test(attMsg), `the attention error message box says "${attMsg}"`);
  const attStatus = await page.textContent('#att-status');
  check(/previous prompt/.test(attStatus), `after a refused Analyse the status says "${attStatus}", not that the maps are the previous prompt's`);
  await page.waitForTimeout(200);
  expectError = false;
  await page.click('#message-close');
  noProblems('an attention error');

  // A narrow window: nothing wider than the window.
  await page.setViewportSize({ width: 400, height: 900 });
  await page.waitForTimeout(300);
  const widths = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  check(widths[0] <= widths[1] + 1, `in a 400 px window the page is ${widths[0]} px wide`);
  const narrow = await pixels(page, 'map1');
  check(narrow.pos >= n && narrow.w <= 400 * 2, `map1 in a narrow window: ${JSON.stringify(narrow)}`);
  noProblems('a narrow window');
  log(`ok: ${arch}, ${n} tokens`);
} catch (e) {
  console.error('browser: FAILED: ' + (e instanceof Failure ? e.message : e.stack || e));
  code = 1;
} finally {
  if (ctx) await ctx.close().catch(() => {});
  fs.rmSync(userDir, { recursive: true, force: true });
}
process.exit(code);
