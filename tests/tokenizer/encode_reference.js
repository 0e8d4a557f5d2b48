#!/usr/bin/env node
// encode_reference.js NODE_MODULES_DIR TOKENIZER_JSON FILE [--add-special] [--pair FILE_B] — the ids
// the Rust `tokenizers` library gives for FILE's text (with --pair: the pair FILE, FILE_B, through the
// post-processor's "pair" template), on one line (as `difftrans tokenizer encode` prints).
'use strict';
const fs = require('fs');
const path = require('path');
const [modules, tokPath, file, ...flags] = process.argv.slice(2);
const pairAt = flags.indexOf('--pair');
const pair = pairAt >= 0 ? fs.readFileSync(flags[pairAt + 1], 'utf8') : null;
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
const tok = Tokenizer.fromFile(tokPath);
tok.encode(fs.readFileSync(file, 'utf8'), pair, { addSpecialTokens: flags.includes('--add-special') })
  .then((e) => process.stdout.write(e.getIds().join(' ') + '\n'))
  .catch((e) => { console.error(e); process.exit(1); });
