#!/usr/bin/env bash
# The second job: Spanish (Reina-Valera 1909) -> English (King James) Bible verses with a shared BPE vocabulary;
# installs the SWORD modules from Debian when run as root, trains, reports BLEU and chrF on held-out verses,
# and translates a few of them.
#
#   bash scripts/bible.sh              # about 20 minutes on a 2-core CPU, into runs/bible
#   bash scripts/bible.sh --quick      # a smoke run on a subset (what CI runs)
#   MINUTES=120 bash scripts/bible.sh  # a longer budget
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh bible,eval sword-text-sparv sword-text-kjv sword-text-web  # pysword and BLEU/chrF
out="${OUT:-runs/bible}"
budget=(--max-minutes "${MINUTES:-20}")
extra=()
limit=()
if [ "${1:-}" = "--quick" ]; then
  out="${OUT:-runs/bible-quick}"
  budget=(--max-steps 60)
  extra=(--no-progress --eval-every 30 --vocab-size 1000 --limit 3000 --preset tiny)
  limit=(--limit 40)
fi
rm -rf "$out"
dotformer train --config configs/bible.toml --out "$out" "${budget[@]}" "${extra[@]}"
dotformer evaluate --checkpoint "$out" --split test "${limit[@]}" --json "$out/test_metrics.json"
echo "Some held-out verses and the model's translation:"
examples="$out/examples.txt"
head -n 3 "$out/data/test.tsv" | cut -f1 >"$examples"
dotformer translate --checkpoint "$out" <"$examples" | paste "$examples" - | sed 's/\t/\n  -> /'
