#!/usr/bin/env bash
# The levers of the genre classifier's fine-tuning, each trained and scored the same way (docs/benchmarks.md,
# "Levers of the genre classifier").
#
#   bash benchmarks/classify_levers.sh MLM NAME STEPS [dotformer train flags...]
#   bash benchmarks/classify_levers.sh runs/genres-mlm base 500                  # classify-bible.toml as shipped
#   bash benchmarks/classify_levers.sh runs/genres-mlm mean 500 --pooling mean --eval-every 100
#
# Fine-tunes configs/classify-bible.toml from the masked language model MLM (scripts/classify.sh's runs/genres-mlm,
# or any `dotformer train --config mlm-bible` run) for STEPS optimizer steps on one torch thread (fixed steps, so
# the figure does not depend on the machine's load; 500 is about what the script's 3 minutes on 2 threads make),
# then scores best/ (the config's last step; with --eval-every N the validation pass of the highest accuracy) on
# the held-out books. Prints one line and writes OUT.json; OUT is benchmarks/out/classify-levers/NAME (LEVERS_OUT to
# move). Two runs side by side (one thread each) take about 5 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -lt 3 ]; then
  sed -n 2,14p "$0" >&2
  exit 2
fi
mlm=$1 name=$2 steps=$3
shift 3
out="${LEVERS_OUT:-benchmarks/out/classify-levers}/$name"
mkdir -p "$(dirname "$out")"
# --max-minutes far beyond the steps: the nearest limit sets the cooldown, and it must be the steps
dotformer train --config classify-bible --init-from "$mlm" --out "$out" --overwrite --threads 1 --no-progress \
  --max-steps "$steps" --max-minutes 100000 "$@" >"$out.train.log" 2>&1
dotformer evaluate --checkpoint "$out" --split test --threads 1 --json "$out.test.json" >"$out.eval.log" 2>&1
python3 - "$out" "$name" "$*" <<'PY'
import json
import sys

out, name, flags = sys.argv[1:]
rows = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
train = [r for r in rows if r["split"] == "train"]
best = [r for r in rows if r["split"] == "valid" and r["best"]][-1]  # the pass best/ holds
test = json.load(open(f"{out}.test.json"))["metrics"]
row = {"name": name, "flags": flags, "steps": train[-1]["step"], "cpu_s": train[-1]["cpu_s"], "best_step": best["step"],
       "valid": {"accuracy": round(best["accuracy"], 2), "macro_f1": round(best["f1"], 2)},
       "test": {"accuracy": round(test["accuracy"], 2), "macro_f1": round(test["macro_f1"], 2)}}
json.dump(row, open(f"{out}.json", "w"), indent=1)
print("\t".join(f"{k} {v}" for k, v in row.items()))
PY
