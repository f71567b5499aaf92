#!/usr/bin/env bash
# The GPU check of the real jobs, as one prepared script: the paper's base model on the Bible pair in bf16 and the
# long G2P config, each for a minute or two and evaluated on their test splits; the paper's WMT job at its shape
# (configs/wmt-base.toml on ~1M synthetic WMT-shaped pairs: prepared, then trained for two minutes); then
# benchmarks/gpu.py with the time left. A GPU machine here may have no internet and no Debian packages (no SWORD
# modules, no CMUdict), so the data travel with the repository: `prepare` writes each job's prepared data (tokenizers,
# memory-mapped token arrays, held-out text: `dotformer prepare --out`) on this machine, `run` trains on those
# directories on the other (`train --data DIR --config`: the same pairs, the same vocabularies, nothing read again).
#
#   bash scripts/gpu.sh prepare        # where setup.sh can install the corpora: writes gpu_data/ (about 20 MB)
#   bash scripts/gpu.sh run            # on the GPU machine, from the repository root: results in $OUT or runs/gpu
#   BIBLE_MINUTES=10 G2P_MINUTES=10 WMT_MINUTES=10 BENCH_SECONDS=340 bash scripts/gpu.sh run   # longer runs
#   SMOKE=1 bash scripts/gpu.sh run    # a few steps of each on whatever device there is (a check of the script)
#
# Defaults (1.5 + 1 + 2 minutes of training, 100 s of benchmarks; with the evaluations, the WMT-shaped corpus written
# and prepared, and each command's start, about 9 minutes on one H200) fit a 10-minute limit. `run` uses the installed
# dotformer if there is one, else src/ (PYTHONPATH), and installs the wheels of gpu_data/wheels/ (rapidfuzz for
# WER/PER) where they are missing: carry gpu_data with it. GPU_DATA=DIR puts the prepared data elsewhere; WMT_PAIRS
# sets the synthetic corpus's size (default 1,000,000 pairs), written with its prepared data and run to a temporary
# directory (deleted at the end: only the reports come back in $OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
data="${GPU_DATA:-gpu_data}"

prepare() {
  # it replaces what an earlier prepare wrote, and nothing else
  if [ -e "$data" ] && [ ! -f "$data/prepared-by-gpu.sh" ]; then
    echo "error: $data exists and was not written by 'scripts/gpu.sh prepare': give GPU_DATA=another directory" >&2
    exit 2
  fi
  bash scripts/setup.sh g2p,bible,eval sword-text-sparv sword-text-kjv
  mkdir -p "$data"
  date -u +%FT%TZ >"$data/prepared-by-gpu.sh"
  # each config's data prepared once (its split, tokenizers and token arrays), as `train --config` would prepare it
  rm -rf "${data:?}/g2p" "${data:?}/bible"
  dotformer prepare --config configs/g2p-long.toml --out "$data/g2p"
  dotformer prepare --config configs/bible.toml --out "$data/bible"
  # WER/PER need rapidfuzz, which the GPU machine's image lacks: its wheel for that machine's Python (3.12, x86-64)
  local version
  version=$(python3 -c "import rapidfuzz; print(rapidfuzz.__version__)")
  rm -rf "$data/wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${GPU_PYTHON:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$data/wheels" "rapidfuzz==$version"
  du -sh "$data"/*
}

run() {
  local out="${OUT:-runs/gpu}" repo="$PWD"
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  if [ -d "$data/wheels" ] && ! python3 -c "import rapidfuzz" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$data"/wheels/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  local dotformer=(dotformer)
  if ! command -v dotformer >/dev/null; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    dotformer=(python3 -m dotformer)
  fi
  [ -f "$data/g2p/prepared.json" ] && [ -f "$data/bible/prepared.json" ] || {
    echo "error: $data/ holds no prepared data: run 'bash scripts/gpu.sh prepare' where the corpora can be installed" >&2
    exit 2
  }
  local bible_budget=(--max-minutes "${BIBLE_MINUTES:-1.5}") g2p_budget=(--max-minutes "${G2P_MINUTES:-1}")
  local wmt_budget=(--max-minutes "${WMT_MINUTES:-2}") limit=() bench=(--time-limit "${BENCH_SECONDS:-100}")
  local pairs="${WMT_PAIRS:-1000000}" wmt_corpus=() wmt_small=()
  if [ -n "${SMOKE:-}" ]; then
    bible_budget=(--max-steps 3 --max-tokens 2048) g2p_budget=(--max-steps 3) limit=(--limit 20) bench=(--time-limit 30)
    pairs="${WMT_PAIRS:-2000}" wmt_corpus=(--held-out 100) wmt_budget=(--max-steps 3)
    wmt_small=(--vocab-size 500)  # beside prepared data, a setting equal to the prepared one is accepted
    wmt_budget+=(--preset tiny --max-tokens 1024)
  fi
  local started=$SECONDS
  stage() { echo "$(( SECONDS - started )) s: $*" | tee -a "$out/timings.txt" >&2; }
  : >"$out/timings.txt"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$out/gpu.txt" || true

  stage "the Bible, base, bf16"
  "${dotformer[@]}" train --data "$data/bible" --config configs/bible.toml --preset base --amp bf16 \
    --max-tokens 16384 --out "$out/bible-base" --overwrite --save-every 0 --no-progress "${bible_budget[@]}"
  "${dotformer[@]}" evaluate --checkpoint "$out/bible-base/last" --split test "${limit[@]}" --json "$out/bible_test.json"
  "${dotformer[@]}" evaluate --checkpoint "$out/bible-base/last" --split valid "${limit[@]}" --json "$out/bible_valid.json"

  stage "G2P, g2p-long, bf16"
  "${dotformer[@]}" train --data "$data/g2p" --config configs/g2p-long.toml --amp bf16 \
    --out "$out/g2p-long" --overwrite --no-progress "${g2p_budget[@]}"
  "${dotformer[@]}" average --overwrite --last 5 --out "$out/g2p-long/averaged" "$out/g2p-long"
  "${dotformer[@]}" evaluate --checkpoint "$out/g2p-long/averaged" --split test "${limit[@]}" --json "$out/g2p_test.json"

  # The WMT job's shape: configs/wmt-base.toml as the guide runs it, on synthetic files in WORK/data/wmt14/ (its
  # corpus, prepared data and checkpoints stay out of $OUT: hundreds of MB). Reports: wmt.json, wmt_*.txt.
  local work
  work=$(mktemp -d)
  stage "WMT-shaped: writing $pairs pairs"
  python3 benchmarks/wmt_synthetic.py --pairs "$pairs" "${wmt_corpus[@]}" --wmt14-names --out "$work/data/wmt14" >/dev/null
  stage "WMT-shaped: dotformer prepare"
  (cd "$work" && "${dotformer[@]}" prepare --config "$repo/configs/wmt-base.toml" "${wmt_small[@]}" --out prepared) \
    2>"$out/wmt_prepare.txt" || { cat "$out/wmt_prepare.txt" >&2; exit 1; }
  cat "$out/wmt_prepare.txt" >&2
  stage "WMT-shaped: train configs/wmt-base.toml"
  (cd "$work" && "${dotformer[@]}" train --data prepared --config "$repo/configs/wmt-base.toml" "${wmt_small[@]}" \
    --out run --eval-every 0 --save-every 0 --no-progress "${wmt_budget[@]}") | tee "$out/wmt_train.txt"
  mkdir -p "$out/wmt-base"
  cp "$work/run/run.json" "$work/run/metrics.jsonl" "$work/prepared/prepared.json" "$out/wmt-base/"
  python3 - "$out/wmt-base" "$out/wmt.json" <<'EOF'
import json, sys
from pathlib import Path

run, out = Path(sys.argv[1]), Path(sys.argv[2])
report = json.loads((run / "prepared.json").read_text())
tokens = sum(sum(split["tokens"].values()) for split in report["splits"].values())
lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
train = [line for line in lines if line["split"] == "train"]
skip = 10 if len(train) > 20 else 0  # the rate past the first steps (the GPU's warm-up), when there are enough
steady = train[skip:]
seconds = train[-1]["elapsed_s"] - (train[skip - 1]["elapsed_s"] if skip else 0.0)
result = {
    "pairs": report["splits"]["train"]["examples"],
    "prepare": {"tokens": tokens, "seconds": report["seconds"], "tokens_per_s": round(tokens / report["seconds"]),
                "sample": report["tokenizers"]["sample"]},
    "train": {"steps": train[-1]["step"], "elapsed_s": train[-1]["elapsed_s"],
              "target_tokens_per_s": round(sum(line["tokens"] for line in steady) / seconds) if seconds > 0 else None,
              "target_tokens_per_step": round(sum(line["tokens"] for line in train) / len(train)),
              "valid": [line for line in lines if line["split"] == "valid"][-1:]},
}
out.write_text(json.dumps(result, indent=2) + "\n")
p, t = result["prepare"], result["train"]
print(f"WMT-shaped: {result['pairs']:,} pairs; prepare {p['tokens']:,} tokens in {p['seconds']:.1f} s "
      f"({p['tokens_per_s']:,} tokens/s); train {t['steps']:,} steps in {t['elapsed_s']:.0f} s, "
      f"{t['target_tokens_per_s'] or 0:,} target tokens/s (past step {skip}), {t['target_tokens_per_step']:,} a step")
EOF
  rm -rf "$work"

  stage "benchmarks/gpu.py"
  OUT="$out" python3 benchmarks/gpu.py "${bench[@]}"
  stage "done"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *)
    echo "usage: bash scripts/gpu.sh prepare|run" >&2
    exit 2
    ;;
esac
