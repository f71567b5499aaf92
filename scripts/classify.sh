#!/usr/bin/env bash
# The encoder's job: pretrain a masked language model on the King James Bible (configs/mlm-bible.toml, about 6
# minutes on a 2-core CPU), fine-tune it to tell which kind of book a verse comes from (configs/classify-bible.toml:
# law, history, poetry, prophets, gospels, letters; about 3 minutes), then score it on whole books it never saw,
# held out from both (accuracy and macro-F1), and label a few verses.
#
#   bash scripts/classify.sh            # about 10 minutes: runs/genres-mlm (the encoder), runs/genres (the classifier)
#   bash scripts/classify.sh --quick    # a smoke run: a few steps on a subset (what CI runs)
#   MLM_MINUTES=30 MINUTES=10 OUT=runs/genres-long bash scripts/classify.sh
#   MODERN=1 bash scripts/classify.sh   # the modern encoder block (configs/*-bible-modern.toml)
#
# It installs what it needs first (scripts/setup.sh: pysword, scikit-learn, and the KJV module from Debian when run
# as root); DOTFORMER_SKIP_SETUP=1 skips that when the environment is ready (an installed checkout, CI).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh bible,eval sword-text-kjv  # pysword and the KJV module; scikit-learn for the metrics
out="${OUT:-runs/genres}"
mlm="${out}-mlm"
block=""
if [ -n "${MODERN:-}" ]; then block="-modern"; fi
pretrain=(--max-minutes "${MLM_MINUTES:-6}")
finetune=(--max-minutes "${MINUTES:-3}")
limit=()
if [ "${1:-}" = "--quick" ]; then
  out="${OUT:-runs/genres-quick}"
  mlm="${out}-mlm"
  pretrain=(--max-steps 10 --eval-every 10 --warmup 2 --limit 3000 --no-progress)
  finetune=(--max-steps 10 --eval-every 10 --warmup 2 --limit 3000 --no-progress)
  limit=(--limit 500)
fi
for dir in "$mlm" "$out"; do  # two runs: refuse before the first one trains, as --overwrite would refuse the second
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -e "$dir/run.json" ] && [ ! -e "$dir/last" ] &&
    ! compgen -G "$dir/checkpoints/step_*" >/dev/null; then
    echo "scripts/classify.sh: error: $dir is not a dotformer run directory (no run.json, last/ or" \
      "checkpoints/step_*); --overwrite deletes only runs: choose another OUT" >&2
    exit 2
  fi
done
echo "Pretraining a masked language model on the Bible, the held-out books left out ($mlm):"
dotformer train --config "configs/mlm-bible${block}.toml" --out "$mlm" --overwrite "${pretrain[@]}"
echo "Fine-tuning it to classify verses by the genre of their book ($out):"
dotformer train --config "configs/classify-bible${block}.toml" --init-from "$mlm" --out "$out" --overwrite "${finetune[@]}"
echo "A few held-out verses: the genre the model gives (its probability), the true one, the verse:"
sample=$(awk 'NR % 1100 == 2' "$out/data/test.tsv" | head -n 4)
printf '%s\n' "$sample" | cut -f1 | dotformer classify --checkpoint "$out" |
  paste - <(printf '%s\n' "$sample" | cut -f2) <(printf '%s\n' "$sample" | cut -f1 | cut -c1-60) |
  awk -F'\t' '{printf "  %-9s %s  (truly %-9s) %s\n", $1, $2, $3, $4}'
echo "Held-out books ($out/data/test.tsv), accuracy and macro-F1 over the six genres:"
dotformer evaluate --checkpoint "$out" --split test "${limit[@]}" --json "$out/test_metrics.json"
