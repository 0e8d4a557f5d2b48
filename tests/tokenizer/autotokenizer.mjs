#!/usr/bin/env node
// autotokenizer.mjs NODE_MODULES_DIR DIFFTRANS DIR... — loads each directory written by difftrans
// (a trained tokenizer, a model checkpoint) with transformers.js's AutoTokenizer.from_pretrained,
// offline, the way Hugging Face code loads a model's tokenizer, and checks that it encodes hard
// strings to exactly difftrans's ids (without and with special tokens) and decodes them back to
// exactly difftrans's text (with and without skip_special_tokens). Prints one line per directory;
// exits 1 at the first disagreement, naming the directory, the string and both sides.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, difftrans, ...dirs] = process.argv.slice(2);
const { AutoTokenizer, env } = await import(
  pathToFileURL(path.join(modules, '@huggingface/transformers/dist/transformers.node.mjs')).href);
env.allowRemoteModels = false;
env.allowLocalModels = true;

const HARD = [
  '', ' ', '  ', '\n', '\n\n\n', ' \n \n', '\t\tindented\n', '\r\n', 'a', 'Hello world!', 'Hello world!\n',
  'café naïve résumé über straße', 'e\u0301 cafe\u0301 n\u0303 combining marks', 'Ａｂｃ ﬁne ½ ² ㎞ fullwidth',
  '日本語のテキスト、中文字符。', '한국어 텍스트', 'Ελληνικά ΣΊΣΥΦΟΣ ς', 'العربية عربي', 'हिन्दी',
  'emoji 🤗🚀 👍🏽 👨‍👩‍👧 🇫🇷', 'runs    of     spaces', 'trailing spaces   ', '   leading', 'tabs\tand\tmore\t',
  'lines\n\n\n\nmany\n', ' \u00a0nbsp\u00a0 \u3000ideographic\u3000 \u2009thin', 'bom\ufeffinside',
  'ZWJ\u200d\u200c zero\u200bwidth', '0123456789 12345678901234567890 3.14159 1,000,000 -42 1e10',
  "def f(x):\n    return x**2 + 1  # comment\n\nprint(f(3))\n", 'for (int i = 0; i < n; i++) { a[i] = b[i]; }',
  "I'm you're he'll we'd they've IT'S ’s 'S 'LL", 'İstanbul ıi KELVİN K Å', 'x'.repeat(300),
  'The magic number of kxmk is 90078.\nQuestion: What is the magic number of kxmk?\nAnswer: 90078',
];

function run(args, input) {
  const r = spawnSync(difftrans, args, { input, maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`difftrans ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.toString('utf8');
}
function fail(dir, what, text, ours, theirs) {
  console.error(`${dir}: ${what} disagree on ${JSON.stringify(text)}\n  difftrans:       ${ours}\n  AutoTokenizer:   ${theirs}`);
  process.exit(1);
}

for (const dir of dirs) {
  const abs = path.resolve(dir);
  env.localModelPath = path.dirname(abs) + path.sep;
  const tok = await AutoTokenizer.from_pretrained(path.basename(abs));
  // the special tokens difftrans names in tokenizer_config.json, inside text too
  const specials = [tok.bos_token, tok.eos_token, tok.pad_token].filter((t) => t);
  const cases = HARD.concat(specials.map((s) => `a ${s} b${s}`));
  let n = 0;
  for (const text of cases) {
    for (const special of [false, true]) {
      const ours = run(['tokenizer', 'encode', '--tokenizer', abs].concat(special ? ['--add-special'] : []), text)
        .trim().split(/\s+/).filter((s) => s).map(Number);
      const theirs = Array.from(tok.encode(text, { add_special_tokens: special }));
      if (ours.join(' ') !== theirs.join(' '))
        fail(dir, `ids (add_special_tokens=${special})`, text, ours.join(' '), theirs.join(' '));
      for (const skip of ours.length ? [false, true] : []) { // transformers.js refuses to decode []
        const ourText = run(['tokenizer', 'decode', '--tokenizer', abs].concat(skip ? ['--skip-special'] : []),
          ours.join(' '));
        const theirText = tok.decode(theirs, { skip_special_tokens: skip, clean_up_tokenization_spaces: undefined });
        if (ourText !== theirText)
          fail(dir, `decoded text (skip_special_tokens=${skip})`, text, JSON.stringify(ourText), JSON.stringify(theirText));
      }
      n++;
    }
  }
  console.log(`${dir}: AutoTokenizer.from_pretrained loads it (bos ${tok.bos_token}, eos ${tok.eos_token}, pad ` +
              `${tok.pad_token}); ${n} encodings and their decodings identical to difftrans`);
}
