// cors.mjs DIFFTRANS MODEL_DIR NODE_MODULES_DIR NO_CORS_URL — --cors seen from a real browser: a page
// served here from another origin (node:http on 127.0.0.1, another port) calls `difftrans serve`
// with fetch as a browser client of the OpenAI API does (a JSON body, an Authorization header, so
// Chromium sends a preflight first), in Debian's Chromium driven by playwright-core. The server is
// started here, with --cors naming the page's origin and an --api-key: a whole reply and a stream
// reach the page; a page on an origin --cors does not name (localhost instead of 127.0.0.1, the
// same port) and a server without --cors (NO_CORS_URL) are refused by the browser, as they must be.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [dt, modelDir, modules, noCorsUrl] = process.argv.slice(2);
if (!dt || !modelDir || !modules || !noCorsUrl) {
  console.error('usage: cors.mjs DIFFTRANS MODEL_DIR NODE_MODULES_DIR NO_CORS_URL');
  process.exit(2);
}
const pw = await import(pathToFileURL(createRequire(path.join(path.resolve(modules), 'noop.js'))
  .resolve('playwright-core')).href);
const chromium = pw.chromium || pw.default.chromium;
const log = (msg) => console.log('cors: ' + msg);
class Failure extends Error {}
const check = (ok, msg) => { if (!ok) throw new Failure(msg); };

const KEY = 'cors-key-42';
const pageServer = http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end('<!doctype html><title>another origin</title><p>a page of another origin</p>');
});
await new Promise((r) => pageServer.listen(0, '127.0.0.1', r));
const pagePort = pageServer.address().port;
const origin = `http://127.0.0.1:${pagePort}`;

// the server under test: the page's origin allowed, and a key (a preflight carries none)
const child = spawn(dt, ['serve', modelDir, '--port', '0', '--threads', '1', '--quiet', '--api-key', KEY,
  '--cors', `http://other.example:1, ${origin}`], { stdio: ['ignore', 'pipe', 'pipe'] });
let stderr = '';
child.stderr.on('data', (d) => { stderr += d; });
const exited = new Promise((r) => child.on('exit', (code, sig) => r([code, sig])));
const serverUrl = await new Promise((resolve, reject) => {
  let out = '';
  child.stdout.on('data', (d) => {
    out += d;
    const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
    if (m) resolve(m[1]);
  });
  child.on('exit', () => reject(new Error(`the server exited before listening: ${stderr.slice(0, 500)}`)));
});
log(`page ${origin}, server ${serverUrl} --cors ${origin}`);

// What a browser client sends (as the OpenAI SDK in a browser does): JSON, a key, one of the SDK's
// own headers. Returns what the page could read, or the error fetch raised.
function callFrom(page, url, body, key) {
  return page.evaluate(async ([url, body, key]) => {
    try {
      const res = await fetch(url + '/v1/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + key, 'X-Stainless-Lang': 'js' },
        body: JSON.stringify(body),
      });
      return { status: res.status, text: await res.text() };
    } catch (e) {
      return { error: String(e) };
    }
  }, [url, body, key]);
}

const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'difftrans-cors-'));
let ctx = null, code = 0;
try {
  ctx = await chromium.launchPersistentContext(userDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = ctx.pages()[0] || await ctx.newPage();
  await page.goto(origin + '/');

  const whole = await callFrom(page, serverUrl, { prompt: 'a', max_tokens: 3, temperature: 0 }, KEY);
  check(whole.status === 200, `a cross-origin POST from ${origin}: ${JSON.stringify(whole).slice(0, 300)}`);
  const reply = JSON.parse(whole.text);
  check(reply.object === 'text_completion' && reply.usage.completion_tokens === 3,
    `the page read the reply: ${whole.text.slice(0, 300)}`);

  const stream = await callFrom(page, serverUrl, { prompt: 'a', max_tokens: 3, stream: true }, KEY);
  check(stream.status === 200 && /\ndata: \[DONE\]\n\n$/.test('\n' + stream.text),
    `a cross-origin stream: ${JSON.stringify(stream).slice(0, 300)}`);

  // an error reply reaches the page too: a wrong key is the server's 401, not a network error
  const denied = await callFrom(page, serverUrl, { prompt: 'a', max_tokens: 1 }, 'wrong');
  check(denied.status === 401 && /invalid_api_key/.test(denied.text),
    `a wrong key from the page: ${JSON.stringify(denied).slice(0, 300)}`);

  // the browser keeps replies from origins the server does not name
  const other = await ctx.newPage();
  await other.goto(`http://localhost:${pagePort}/`);
  const refused = await callFrom(other, serverUrl, { prompt: 'a', max_tokens: 1 }, KEY);
  check(refused.error && /TypeError/.test(refused.error),
    `a page on http://localhost:${pagePort} (not in --cors) read a reply: ${JSON.stringify(refused).slice(0, 300)}`);
  const noCors = await callFrom(page, noCorsUrl, { prompt: 'a', max_tokens: 1 }, 'unused');
  check(noCors.error && /TypeError/.test(noCors.error),
    `a server without --cors answered a cross-origin page: ${JSON.stringify(noCors).slice(0, 300)}`);
  log('ok: a whole reply, a stream and a 401 reach the allowed origin; another origin and a server without --cors are refused');
} catch (e) {
  console.error('cors: FAILED: ' + (e instanceof Failure ? e.message : e.stack || e));
  code = 1;
} finally {
  if (ctx) await ctx.close().catch(() => {});
  fs.rmSync(userDir, { recursive: true, force: true });
  pageServer.close();
  child.kill('SIGTERM');
  const [rc, sig] = await exited;
  if (rc !== 0) {
    console.error(`cors: the server exited with ${rc ?? sig} after SIGTERM: ${stderr.slice(-800)}`);
    code = 1;
  }
}
process.exit(code);
