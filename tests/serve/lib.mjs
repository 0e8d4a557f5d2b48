// lib.mjs — what sdk.mjs and load.mjs share: the configuration run.sh writes, the OpenAI SDK loaded
// from the build tree's node_modules (fetch.sh installs it there, not beside the sources), raw HTTP
// for what the SDK cannot send, a server-sent-events reader, and reading a safetensors file.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

export function loadConfig(file) {
  const cfg = JSON.parse(fs.readFileSync(file, 'utf8'));
  cfg.expect = JSON.parse(fs.readFileSync(cfg.expect_file, 'utf8'));
  return cfg;
}

export async function loadOpenAI(modules) {
  const mod = await import(pathToFileURL(path.join(modules, 'openai', 'index.mjs')).href);
  return mod;
}

// A client of one server: no retries (a 503 must reach the test, not be retried away) and a
// timeout well under the test's own.
export function client(OpenAI, url, apiKey = 'unused', extra = {}) {
  return new OpenAI({ baseURL: url + '/v1', apiKey, maxRetries: 0, timeout: 60_000, ...extra });
}

// One request as bytes on the wire: status, headers, the body as text and, when it parses, JSON.
export async function raw(url, pathname, { method = 'POST', body, headers = {}, signal } = {}) {
  const init = { method, headers: { ...headers }, signal };
  if (body !== undefined) {
    init.body = typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body);
    if (!init.headers['content-type']) init.headers['content-type'] = 'application/json';
  }
  const res = await fetch(url + pathname, init);
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON: json stays null and the test says so */ }
  return { status: res.status, headers: res.headers, text, json };
}

// Parses a text/event-stream body into its data payloads, in order ("[DONE]" kept as a string).
// Every event must be exactly `data: ...` followed by a blank line, as the contract says.
export function parseSSE(text) {
  const events = [];
  const blocks = text.split('\n\n');
  const tail = blocks.pop();
  if (tail !== '') throw new Error(`the stream does not end with a blank line: ${JSON.stringify(tail.slice(0, 200))}`);
  for (const b of blocks) {
    if (!b.startsWith('data: ')) throw new Error(`not a data event: ${JSON.stringify(b.slice(0, 200))}`);
    const payload = b.slice(6);
    events.push(payload === '[DONE]' ? payload : JSON.parse(payload));
  }
  return events;
}

// safetensors: 8 bytes of little-endian header length, the JSON header, then the data.
export function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    if (t.dtype !== 'F32') throw new Error(`${file}: ${name} is ${t.dtype}, expected F32`);
    const [a, b] = t.data_offsets;
    const bytes = buf.subarray(8 + n + a, 8 + n + b);
    const data = new Float32Array(bytes.length / 4);
    for (let i = 0; i < data.length; i++) data[i] = bytes.readFloatLE(i * 4);
    out[name] = { shape: t.shape, data };
  }
  return out;
}

export function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// VmRSS of a process, in bytes.
export function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`/proc/${pid}/status has no VmRSS`);
  return Number(m[1]) * 1024;
}

// A request with the path exactly as given (fetch resolves "..", "%2e%2e" and "." before sending).
export function rawPath(url, pathname, method = 'GET', body = method === 'POST' ? '{}' : undefined) {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: pathname, method,
      headers: body === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch { /* stays null */ }
        resolve({ status: res.statusCode, headers: new Headers(Object.entries(res.headers).map(([k, v]) => [k, String(v)])), text, json });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}
