// expect.mjs DIFFTRANS OUT.json SCRATCH NAME=MODEL_DIR... — what the server must answer, computed
// with the command line (run by run.sh before any server starts): greedy continuations from
// `difftrans generate --temperature 0` (text and ids) for a few prompts and lengths on every model,
// the prompts' ids from `difftrans tokenizer encode --add-special` (checked here to be what
// `generate --prompt` feeds, so that a token-id prompt and a text prompt are the same request), and
// the log-probabilities of one prompt from the logits `difftrans forward` writes (the reference
// attention kernel, one sequence, no batching): the numbers echo + logprobs must give back.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { readSafetensors } from './lib.mjs';

const [dt, outFile, scratch, ...modelArgs] = process.argv.slice(2);
const models = Object.fromEntries(modelArgs.map((a) => a.split('=')));

function run(args, input) {
  return execFileSync(dt, args, { input, maxBuffer: 1 << 26, stdio: ['pipe', 'pipe', 'pipe'] });
}
function fail(msg) { console.error(`expect.mjs: ${msg}`); process.exit(1); }

const PROMPTS = ['The program', 'You may', 'the GNU General Public License', 'Everyone is permitted to copy',
  'This License', 'If you'];
const LENGTHS = [1, 6, 24];

function hasTokenizer(dir) { return fs.existsSync(path.join(dir, 'tokenizer.json')); }

function encode(dir, text) {
  if (!hasTokenizer(dir)) return [...Buffer.from(text, 'utf8')]; // byte-level: id = byte, no BOS
  return run(['tokenizer', 'encode', '--tokenizer', dir, '--add-special'], text).toString().trim().split(/\s+/).map(Number);
}
function decodeOne(dir, id) {
  if (!hasTokenizer(dir)) return Buffer.from([id]).toString('utf8');
  return run(['tokenizer', 'decode', '--tokenizer', dir], String(id)).toString();
}

function greedy(dir, prompt, n) {
  const base = ['generate', dir, '--prompt', prompt, '-n', String(n), '--temperature', '0', '--threads', '1'];
  const ids = run([...base, '--print-ids']).toString().trim().split(/\s+/).filter((s) => s !== '').map(Number);
  const out = run(base);
  // stdout: the prompt as typed, the continuation, one newline
  const p = Buffer.from(prompt, 'utf8');
  if (!out.subarray(0, p.length).equals(p) || out[out.length - 1] !== 10) fail(`${dir}: generate printed ${JSON.stringify(out.toString())}`);
  const textBytes = out.subarray(p.length, out.length - 1);
  const text = new TextDecoder('utf-8', { fatal: true }).decode(textBytes); // the models write ASCII
  const pids = encode(dir, prompt);
  // the same request by ids: what a token-id prompt must give
  const byIds = run(['generate', dir, '--prompt-ids', pids.join(' '), '-n', String(n), '--temperature', '0',
    '--threads', '1', '--print-ids']).toString().trim();
  if (byIds !== ids.join(' ')) fail(`${dir} ${JSON.stringify(prompt)}: --prompt-ids ${pids.join(' ')} gives ${byIds}, --prompt gives ${ids.join(' ')}: tokenizer encode --add-special is not what generate feeds`);
  return { prompt, prompt_ids: pids, max_tokens: n, text, ids };
}

const expect = { models: {} };
for (const [name, dir] of Object.entries(models)) {
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const gen = fs.existsSync(path.join(dir, 'generation_config.json'))
    ? JSON.parse(fs.readFileSync(path.join(dir, 'generation_config.json'), 'utf8')) : {};
  const eos = gen.eos_token_id ?? cfg.eos_token_id ?? null;
  const m = {
    dir, vocab_size: cfg.vocab_size, context: cfg.max_position_embeddings, layers: cfg.num_hidden_layers,
    heads: cfg.num_attention_heads, model_type: cfg.model_type, eos_ids: eos === null ? [] : [].concat(eos),
    // DIFF V2's pairing of query heads, as config.json spells it (absent: the default)
    v2_pairs: cfg.model_type === 'difftrans_v2' ? cfg.difftrans?.v2_pairs ?? '2j,2j+1' : null,
    greedy: [],
  };
  // `difftrans info`: the parameter count and (DIFF) λ per layer the server must report
  const info = run(['info', dir]).toString();
  m.parameters = Number(/^parameters: (\d+) in /m.exec(info)?.[1] ?? NaN);
  m.lambda = [...info.matchAll(/^\s+(\d+)\s+(-?[0-9.]+)\s+(-?[0-9.]+)$/gm)].map((r) => Number(r[2]));
  if (!(m.parameters > 0)) fail(`${dir}: no parameter count in difftrans info: ${info}`);
  if (cfg.model_type === 'diffllama' && m.lambda.length !== cfg.num_hidden_layers) fail(`${dir}: no λ table in difftrans info`);
  const prompts = name === 'diff' ? PROMPTS : PROMPTS.slice(0, 2);
  const lengths = name === 'diff' ? LENGTHS : [16];
  for (const p of prompts) for (const n of lengths) m.greedy.push(greedy(dir, p, n));
  expect.models[name] = m;
}

// log-probabilities of a prompt on the DIFF model, from forward's logits
{
  const dir = models.diff;
  const text = 'This License applies to any program';
  const ids = encode(dir, text);
  const idsFile = path.join(scratch, 'logprob_ids.txt');
  const stFile = path.join(scratch, 'logprob_logits.safetensors');
  fs.writeFileSync(idsFile, ids.join(' ') + '\n');
  run(['forward', dir, '--input', idsFile, '--output', stFile, '--threads', '1']);
  const { logits } = readSafetensors(stFile);
  const [B, T, V] = logits.shape;
  if (B !== 1 || T !== ids.length) fail(`forward wrote logits ${logits.shape}`);
  const logsoftmax = (t) => {
    const row = logits.data.subarray(t * V, (t + 1) * V);
    let mx = -Infinity;
    for (const x of row) mx = Math.max(mx, x);
    let s = 0;
    for (const x of row) s += Math.exp(x - mx);
    const lse = mx + Math.log(s);
    return Array.from(row, (x) => x - lse);
  };
  const token_logprobs = [null];
  const best = [null];
  for (let t = 1; t <= T; t++) {
    const lp = logsoftmax(t - 1);
    let arg = 0;
    for (let v = 1; v < V; v++) if (lp[v] > lp[arg]) arg = v;
    if (t < T) token_logprobs.push(lp[ids[t]]);
    best.push({ id: arg, logprob: lp[arg], text: decodeOne(dir, arg) });
  }
  expect.logprobs = { text, ids, token_logprobs, best, token_texts: ids.map((id) => decodeOne(dir, id)) };
}

fs.writeFileSync(outFile, JSON.stringify(expect, null, 1));
console.log(`expect.mjs: wrote ${outFile}`);
