#!/usr/bin/env bash
# The main job: install dotformer, train a grapheme-to-phoneme Transformer on CMUdict with the modern block
# (configs/g2p-modern.toml; about 10 minutes on a 2-core CPU; its learning rate cools to 0 over the last quarter),
# evaluate the last checkpoint's WER/PER on held-out words, and pronounce a few of them.
#
#   bash scripts/g2p.sh                # the 10-minute default, into runs/g2p
#   bash scripts/g2p.sh --quick        # a 2-minute smoke run: 150 steps, 300 test words evaluated (what CI runs)
#   MINUTES=60 OUT=runs/g2p-60 bash scripts/g2p.sh   # a longer budget
#   CONFIG=configs/g2p.toml bash scripts/g2p.sh      # the lesson's 2017 block instead of the modern one
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh g2p,eval  # the CMUdict corpus and WER/PER
out="${OUT:-runs/g2p}"
budget=(--max-minutes "${MINUTES:-10}")
extra=()
limit=()
if [ "${1:-}" = "--quick" ]; then
  out="${OUT:-runs/g2p-quick}"
  budget=(--max-steps 150)
  extra=(--no-progress --eval-every 50)
  limit=(--limit 300)
fi
dotformer train --config "${CONFIG:-configs/g2p-modern.toml}" --out "$out" --overwrite "${budget[@]}" "${extra[@]}"
# The paper averages the last checkpoints (§6.1); at this budget g2p.toml's cooldown does better (its header).
dotformer evaluate --checkpoint "$out/last" --split test "${limit[@]}" --json "$out/test_metrics.json"
echo "Some held-out words and the model's pronunciation:"
words=$(cut -f1 "$out/data/test.tsv" | awk '/^[a-z]+$/ && !seen[$0]++' | awk 'NR % 700 == 1 && ++n <= 8')
# shellcheck disable=SC2086
paste <(printf '%s\n' $words) <(dotformer translate --checkpoint "$out/last" $words) | column -t -s $'\t'
