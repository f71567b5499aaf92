#!/usr/bin/env bash
# The GPU check of the real jobs, as one prepared script: the paper's base model on the Bible pair in bf16, the
# long G2P config, each for a few minutes, both evaluated on their test splits, then benchmarks/gpu.py with the
# time left. A GPU machine here may have no internet and no Debian packages (no SWORD modules, no CMUdict), so the
# data travel with the repository: `prepare` writes the two configs' splits and tokenizers as files on this
# machine, `run` trains from those files on the other (dotformer's own-data path: the same pairs, the same
# vocabularies).
#
#   bash scripts/gpu.sh prepare        # where setup.sh can install the corpora: writes gpu_data/ (14 MB)
#   bash scripts/gpu.sh run            # on the GPU machine, from the repository root: results in $OUT or runs/gpu
#   BIBLE_MINUTES=10 G2P_MINUTES=10 BENCH_SECONDS=340 bash scripts/gpu.sh run   # 10 + 10 minutes of training
#   SMOKE=1 bash scripts/gpu.sh run    # a few steps of each on whatever device there is (a check of the script)
#
# Defaults (3 + 2 minutes of training, 150 s of benchmarks, ~8 minutes in all with the evaluations) fit a 15-minute
# lease with the machine's start. `run` uses the installed dotformer if there is one, else src/ (PYTHONPATH), and
# installs the wheels of gpu_data/wheels/ (rapidfuzz for WER/PER) where they are missing: carry gpu_data with it.
# GPU_DATA=DIR puts the prepared files elsewhere.
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
  local tmp
  tmp=$(mktemp -d)
  # One optimizer step writes each config's split and tokenizers into the run's data/ (the training is thrown away).
  dotformer train --config configs/g2p-long.toml --out "$tmp/g2p" --max-steps 1 --eval-every 0 --save-every 0 --no-progress
  dotformer train --config configs/bible.toml --out "$tmp/bible" --max-steps 1 --eval-every 0 --save-every 0 --no-progress
  mkdir -p "$data"
  date -u +%FT%TZ >"$data/prepared-by-gpu.sh"
  for job in g2p bible; do
    rm -rf "${data:?}/$job"
    cp -r "$tmp/$job/data" "$data/$job"
  done
  rm -rf "$tmp"
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
  local out="${OUT:-runs/gpu}"
  mkdir -p "$out"
  if [ -d "$data/wheels" ] && ! python3 -c "import rapidfuzz" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$data"/wheels/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  local dotformer=(dotformer)
  if ! command -v dotformer >/dev/null; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    dotformer=(python3 -m dotformer)
  fi
  [ -f "$data/g2p/train.tsv" ] && [ -f "$data/bible/train.tsv" ] || {
    echo "error: $data/ is missing: run 'bash scripts/gpu.sh prepare' where the corpora can be installed" >&2
    exit 2
  }
  local bible_budget=(--max-minutes "${BIBLE_MINUTES:-3}") g2p_budget=(--max-minutes "${G2P_MINUTES:-2}")
  local limit=() bench=(--time-limit "${BENCH_SECONDS:-150}")
  if [ -n "${SMOKE:-}" ]; then
    bible_budget=(--max-steps 3) g2p_budget=(--max-steps 3) limit=(--limit 20) bench=(--time-limit 30)
  fi
  # the pairs and the vocabularies of a prepared job (the Bible's one shared vocabulary is its two equal files)
  files() {
    local tgt="$data/$1/tokenizer_tgt.json"
    cmp -s "$data/$1/tokenizer_src.json" "$tgt" && tgt="$data/$1/tokenizer_src.json"
    echo --data "$data/$1/train.tsv" --valid "$data/$1/valid.tsv" --test "$data/$1/test.tsv" \
      --src-tokenizer-file "$data/$1/tokenizer_src.json" --tgt-tokenizer-file "$tgt"
  }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$out/gpu.txt" || true
  # --test-books '': the test split is the file of bible.toml's held-out books, no longer drawn from the corpus
  # shellcheck disable=SC2046  # files() prints flags and paths without spaces
  "${dotformer[@]}" train --config configs/bible.toml $(files bible) --test-books '' --task translation --preset base --amp bf16 \
    --max-tokens 16384 --out "$out/bible-base" --overwrite --save-every 0 --no-progress "${bible_budget[@]}"
  "${dotformer[@]}" evaluate --checkpoint "$out/bible-base/last" --split test "${limit[@]}" --json "$out/bible_test.json"
  "${dotformer[@]}" evaluate --checkpoint "$out/bible-base/last" --split valid "${limit[@]}" --json "$out/bible_valid.json"
  # shellcheck disable=SC2046
  "${dotformer[@]}" train --config configs/g2p-long.toml $(files g2p) --task g2p --amp bf16 \
    --out "$out/g2p-long" --overwrite --no-progress "${g2p_budget[@]}"
  "${dotformer[@]}" average --overwrite --last 5 --out "$out/g2p-long/averaged" "$out/g2p-long"
  "${dotformer[@]}" evaluate --checkpoint "$out/g2p-long/averaged" --split test "${limit[@]}" --json "$out/g2p_test.json"
  OUT="$out" python3 benchmarks/gpu.py "${bench[@]}"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *)
    echo "usage: bash scripts/gpu.sh prepare|run" >&2
    exit 2
    ;;
esac
