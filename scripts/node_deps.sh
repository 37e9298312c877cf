#!/usr/bin/env bash
# Installs the official OpenAI Node SDK (npm package `openai`, pinned) into
# DIR/node_modules for the compatibility suite (tests/test_compat.c), when
# node and npm are there. Never fails the build: without node, npm or the
# registry it says so in one line and the suite skips.
# Usage: scripts/node_deps.sh DIR
set -u
dir=${1:?usage: scripts/node_deps.sh DIR}
version=4.104.0
[ -f "$dir/node_modules/openai/package.json" ] && grep -q "\"version\": \"$version\"" "$dir/node_modules/openai/package.json" && exit 0
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node-deps: node or npm not found: the OpenAI SDK compatibility test will skip" >&2
  exit 0
fi
mkdir -p "$dir"
if ! npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error "openai@$version" >"$dir/npm.log" 2>&1; then
  echo "node-deps: npm could not install openai@$version (see $dir/npm.log): the compatibility test will skip" >&2
fi
exit 0
