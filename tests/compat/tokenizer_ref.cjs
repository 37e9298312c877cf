// tokenizer_ref.cjs — the reference tokenization and chat templating
// (@lenml/tokenizers, Hugging Face tokenizers' semantics) for
// tests/test_tokenizer_real.c and tests/test_chat_template.c.
// Usage: node tokenizer_ref.cjs NODE_MODULES NAME INPUT.json
//   NAME: llama3 | qwen3 | deepseek_v3 (the package @lenml/tokenizer-NAME)
//   INPUT: {"texts": [string...], "chats": [{"messages": [...],
//           "add_generation_prompt": bool, "tools": [...]?, "vars": {...}?}]}
// Writes {"ids": [[id...]...], "decoded": [string...], "chat": [string...]}:
// each text encoded without added special tokens (BOS is the caller's), its
// ids decoded back with special tokens kept and no clean-up, and each chat
// rendered by apply_chat_template(tokenize: false).
'use strict';
const fs = require('fs');
const path = require('path');
const [modules, name, input] = process.argv.slice(2);
if (!modules || !name || !input) {
  console.error('usage: node tokenizer_ref.cjs NODE_MODULES NAME INPUT.json');
  process.exit(2);
}
const pkg = require(path.join(modules, '@lenml', 'tokenizer-' + name));
const tok = pkg.fromPreTrained();
const job = JSON.parse(fs.readFileSync(input, 'utf8'));
const out = { ids: [], decoded: [], chat: [] };
for (const text of job.texts || []) {
  const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
  out.ids.push(ids);
  out.decoded.push(ids.length ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : '');
}
for (const c of job.chats || []) {
  const opts = Object.assign({ tokenize: false, add_generation_prompt: !!c.add_generation_prompt }, c.vars || {});
  if (c.tools) opts.tools = c.tools;
  try {
    out.chat.push(tok.apply_chat_template(c.messages, opts));
  } catch (err) {
    out.chat.push({ error: String(err && err.message || err) });
  }
}
process.stdout.write(JSON.stringify(out));
