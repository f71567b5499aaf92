#!/usr/bin/env bash
# The language model: a character-level GPT-style decoder trained on the King James Bible (configs/lm-bible.toml),
# then samples from a few prompts and the bits per character of eight whole books it never saw.
#
#   bash scripts/lm.sh                 # 10 minutes of training on a 2-core CPU, into runs/lm-bible
#   MINUTES=1 bash scripts/lm.sh       # a smoke run
#   MINUTES=60 OUT=runs/lm-long bash scripts/lm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh bible sword-text-kjv  # pysword and the KJV module
out="${OUT:-runs/lm-bible}"
dotformer train --config configs/lm-bible.toml --out "$out" --overwrite --max-minutes "${MINUTES:-10}"
echo "Samples (top-k 20, temperature 0.8):"
printf 'In the beginning\nAnd God said\nBlessed are the\n' |
  dotformer generate --checkpoint "$out" --max-new-tokens 200 --top-k 20 --temperature 0.8 --seed 1
echo "The most likely end of a line (beam 4):"
dotformer generate --checkpoint "$out" --prompt "The LORD is my" --beam 4 --max-new-tokens 80
echo "Held-out books ($out/data/test.txt):"
dotformer evaluate --checkpoint "$out" --split test --json "$out/test_metrics.json"
