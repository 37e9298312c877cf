#!/usr/bin/env bash
# Installs the Debian packages the build needs, when any is missing.
# As root: apt-get installs them. Otherwise: prints the exact apt-get line and
# exits 1, so `make` stops before a confusing compiler error.
# Usage: scripts/deps.sh [--check] [--fuzz]
#   --check: report only, never install
#   --fuzz:  also clang and its libFuzzer runtime (only `make fuzz` needs them)
set -u
pkgs=(build-essential pkg-config liblua5.4-dev libzstd-dev zstd libcunit1-dev libopenblas-dev
      libmicrohttpd-dev libjansson-dev libxxhash-dev libcurl4-openssl-dev libutf8proc-dev gnuplot-nox
      python3-jinja2 valgrind slurmctld slurmd slurm-client munge jq)
      # python3-jinja2: the second reference of the chat-template test (it skips without); valgrind: make
      # bench counts instructions with callgrind; slurm and munge: tests/slurm/plan.sh starts a one-node
      # Slurm on localhost for `rehearse plan --emit-jobs` (it skips without); jq: scripts/vidur_compare.sh
check=0
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    --fuzz) pkgs+=(clang libclang-rt-14-dev) ;;
    *) echo "deps: unknown option '$a' (use --check, --fuzz)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$check" -eq 1 ]; then
  echo "deps: missing: ${missing[*]}" >&2; exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing Debian packages: ${missing[*]}" >&2
  echo "deps: run as root:  $line" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/rehearse-deps.log 2>&1; then
  apt-get update >>/tmp/rehearse-deps.log 2>&1
  apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/rehearse-deps.log 2>&1 || {
    echo "deps: apt-get failed; see /tmp/rehearse-deps.log" >&2; tail -n 20 /tmp/rehearse-deps.log >&2; exit 1; }
fi
echo "deps: done" >&2
