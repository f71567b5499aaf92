#!/usr/bin/env bash
# The levers of the 10-minute G2P default, each trained and scored the same way (docs/benchmarks.md, "Levers").
#
#   bash benchmarks/g2p_levers.sh NAME STEPS SAVE_EVERY [dotformer train flags...]
#   bash benchmarks/g2p_levers.sh old 1080 100 --dropout 0.1 --max-tokens 4096 --lr-cooldown 0   # the 4096-token recipe
#   bash benchmarks/g2p_levers.sh tok1k 4600 200 --lr-cooldown 0     # without the cooldown (test its avg5)
#   bash benchmarks/g2p_levers.sh cool25 4600 200                    # g2p.toml as shipped (its cooldown: test its last)
#
# Trains configs/g2p.toml with the given flags for STEPS optimizer steps on one torch thread (fixed steps, so the
# figure does not depend on the machine's load; compare levers that change the cost of a step at equal tokens:
# STEPS x --max-tokens), keeps the last 10 checkpoints (one every SAVE_EVERY steps), and scores on the VALIDATION
# split (the test split stays for the README's figure), beam 4: the last checkpoint, the average of the last 5 and
# of the last 10. Prints one line and writes OUT/levers.json. OUT is benchmarks/out/levers/NAME (LEVERS_OUT to move).
# Two runs side by side (one thread each) take ~15 minutes on this project's 2-core VM.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -lt 3 ]; then
  sed -n 2,14p "$0" >&2
  exit 2
fi
name=$1 steps=$2 save=$3
shift 3
out="${LEVERS_OUT:-benchmarks/out/levers}/$name"
rm -rf "$out" "$out-avg5" "$out-avg10"
mkdir -p "$(dirname "$out")"
dotformer train --config g2p --out "$out" --threads 1 --no-progress --max-steps "$steps" --save-every "$save" \
  --keep-last 10 --eval-every 100000 "$@" >"$out.train.log" 2>&1
export OMP_NUM_THREADS=1
score() { dotformer evaluate --checkpoint "$1" --split valid --json "$2" >>"$out.eval.log" 2>&1; }
score "$out/last" "$out/last.json"
for k in 5 10; do
  dotformer average --last "$k" --out "$out/avg$k" "$out" >>"$out.eval.log"
  score "$out/avg$k" "$out/avg$k.json"
done
python3 - "$out" "$name" "$*" <<'PY'
import json
import sys

out, name, flags = sys.argv[1:]
train = [r for r in map(json.loads, open(f"{out}/metrics.jsonl")) if r["split"] == "train"]
row = {"name": name, "flags": flags, "steps": train[-1]["step"], "epochs": round(train[-1]["epoch"], 2),
       "train_s": train[-1]["elapsed_s"], "cpu_s": train[-1]["cpu_s"]}
for weights in ("last", "avg5", "avg10"):
    metrics = json.load(open(f"{out}/{weights}.json"))["metrics"]
    row[weights] = {"wer": round(metrics["wer"], 2), "per": round(metrics["per"], 2)}
json.dump(row, open(f"{out}/levers.json", "w"), indent=1)
print("\t".join(f"{k} {v}" for k, v in row.items()))
PY
