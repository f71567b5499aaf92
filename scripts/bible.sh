#!/usr/bin/env bash
# The second job: Spanish (Reina-Valera 1909) -> English (King James) Bible verses with a shared BPE vocabulary;
# installs the SWORD modules from Debian when run as root, trains Llama's block (configs/bible-modern.toml: RMSNorm,
# SwiGLU, rotary positions, grouped-query attention), reports BLEU and chrF on two held-out sets: eight whole books
# never seen in training (the test split) and random verses of the other books (the valid split; its loss is watched
# in training, but the last checkpoint, not the best, is scored), and translates a few verses of the held-out books.
#
#   bash scripts/bible.sh              # about 20 minutes on a 2-core CPU, into runs/bible
#   bash scripts/bible.sh --quick      # a smoke run on a subset (what CI runs)
#   MINUTES=120 bash scripts/bible.sh  # a longer budget
#   CONFIG=configs/bible.toml bash scripts/bible.sh   # the lesson's 2017 block instead
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
  extra=(--no-progress --eval-every 30 --vocab-size 1000 --limit 3000 --preset tiny --test-books Exod)
  limit=(--limit 40)
fi
dotformer train --config "${CONFIG:-configs/bible-modern.toml}" --out "$out" --overwrite "${budget[@]}" "${extra[@]}"
echo "Held-out books ($out/data/test.tsv):"
dotformer evaluate --checkpoint "$out/last" --split test "${limit[@]}" --json "$out/test_metrics.json"
echo "Random held-out verses of the other books ($out/data/valid.tsv):"
dotformer evaluate --checkpoint "$out/last" --split valid "${limit[@]}" --json "$out/verses_metrics.json"
echo "Some verses of the held-out books and the model's translation:"
examples="$out/examples.txt"
head -n 3 "$out/data/test.tsv" | cut -f1 >"$examples"
dotformer translate --checkpoint "$out/last" <"$examples" | paste "$examples" - | sed 's/\t/\n  -> /'
