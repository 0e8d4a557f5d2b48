#!/usr/bin/env node
// encode_reference.js NODE_MODULES_DIR TOKENIZER_JSON FILE [--add-special] — the ids the Rust
// `tokenizers` library gives for FILE's text, on one line (as `difftrans tokenizer encode` prints).
'use strict';
const fs = require('fs');
const path = require('path');
const [modules, tokPath, file, flag] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
const tok = Tokenizer.fromFile(tokPath);
tok.encode(fs.readFileSync(file, 'utf8'), null, { addSpecialTokens: flag === '--add-special' })
  .then((e) => process.stdout.write(e.getIds().join(' ') + '\n'))
  .catch((e) => { console.error(e); process.exit(1); });
