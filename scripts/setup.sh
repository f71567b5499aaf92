#!/usr/bin/env bash
# Install dotformer and what it needs on a fresh machine. Usage: bash scripts/setup.sh [EXTRAS] [DEBIAN PACKAGES...]
#   EXTRAS: pip extras, e.g. "g2p,eval" or "all,dev,bench" (default: none: the core only).
#   DEBIAN PACKAGES: installed with apt-get when running as root (the Bible corpus, Chromium for the explorer test).
# torch is pinned by constraints.txt (a CPU build where one lies on disk; pip picks the right build elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
# DOTFORMER_SKIP_SETUP=1: the environment is ready (the smoke tests of the main job set it).
if [ "${DOTFORMER_SKIP_SETUP:-0}" = "1" ]; then exit 0; fi
extras="${1:-}"
shift || true
if [ "$#" -gt 0 ]; then
  missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
      echo "setup: installing Debian packages: ${missing[*]}" >&2
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
      echo "setup: not root: run 'sudo apt-get install -y ${missing[*]}' for the tests that need them" >&2
    fi
  fi
fi
target="."
[ -n "$extras" ] && target=".[$extras]"
python3 -m pip install -q --disable-pip-version-check -c constraints.txt -e "$target"
