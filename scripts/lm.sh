#!/usr/bin/env bash
# The language model: a decoder with Llama's block (RMSNorm, SwiGLU, rotary positions, grouped-query attention) on
# byte-level BPE tokens (configs/lm-bible-bpe.toml) trained on the King James Bible, then samples from a few prompts
# and, last, the bits per character of eight whole books it never saw, block by block and in a sliding window. At 10
# minutes on 2 threads BPE tokens learn far more than characters, and Llama's block more than the 2017 block
# (docs/benchmarks.md, "A language model on the King James Bible").
#
#   bash scripts/lm.sh                 # 10 minutes of training on a 2-core CPU, into runs/lm-bible
#   bash scripts/lm.sh --quick         # a smoke run: a few steps on a subset, short samples (what CI runs)
#   MINUTES=1 bash scripts/lm.sh       # a short run
#   MINUTES=60 OUT=runs/lm-long bash scripts/lm.sh
#   CONFIG=configs/lm-bible-modern.toml bash scripts/lm.sh   # one token per character instead
#   CONFIG=configs/lm-bible.toml bash scripts/lm.sh          # characters and the lesson's 2017 block (GPT-2's layout)
#
# It installs what it needs first (scripts/setup.sh: pysword, and the KJV module from Debian when run as root);
# DOTFORMER_SKIP_SETUP=1 skips that when the environment is ready (an installed checkout, CI).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh bible sword-text-kjv  # pysword and the KJV module
out="${OUT:-runs/lm-bible}"
budget=(--max-minutes "${MINUTES:-10}")
new_tokens=60
if [ "${1:-}" = "--quick" ]; then
  out="${OUT:-runs/lm-bible-quick}"
  budget=(--max-steps 10 --warmup 1 --eval-every 10 --limit 2000 --no-progress)  # a smoke run: the peak lr at once
  new_tokens=12
fi
dotformer train --config "${CONFIG:-configs/lm-bible-bpe.toml}" --out "$out" --overwrite "${budget[@]}"
echo "Samples (top-k 20, temperature 0.8):"
printf 'In the beginning\nAnd God said\nBlessed are the\n' |
  dotformer generate --checkpoint "$out" --max-new-tokens "$new_tokens" --top-k 20 --temperature 0.8 --seed 1
echo "The most likely end of a line (beam 4):"
dotformer generate --checkpoint "$out" --prompt "The LORD is my" --beam 4 --max-new-tokens 24
echo "Held-out books ($out/data/test.txt), bits per character, in blocks of 128 tokens as training reads them:"
dotformer evaluate --checkpoint "$out" --split test --json "$out/test_metrics.json"
echo "... and in windows of 128 tokens moved by 64, every token read after 64 or more (as an n-gram reads its history):"
dotformer evaluate --checkpoint "$out" --split test --stride 64 --json "$out/test_metrics_stride64.json"
