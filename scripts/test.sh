#!/usr/bin/env bash
# Set up and run the checks: ruff (lint + format) and the test suite without the slow tests.
# all: every optional feature (corpora, metrics, plots, TensorBoard, hf: corpora) so its tests run; bench brings the
# peers (HF transformers, CTranslate2) and onnx so the exporter and importer tests run too.
# Usage: bash scripts/test.sh [PYTEST ARGS...]
#   bash scripts/test.sh               the checks and every test not marked slow; none depends on the machine's speed
#                                      or load (fixed step budgets, time limits that only a hung command reaches)
#   bash scripts/test.sh -m slow       the slow tests alone (a later -m wins): the copy task trained to 100% exact
#                                      match, pip installing into a fresh virtual environment, 40 kills of a training,
#                                      torchrun, the GPU script
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh all,dev,bench,onnx sword-text-sparv sword-text-kjv sword-text-web chromium chromium-driver
python3 -m ruff check .
python3 -m ruff format --check .
# Two test processes on two cores, one torch thread each (small tensors gain nothing from a second thread);
# worksteal lets the idle process take queued tests while the other runs a main job's end-to-end test.
export OMP_NUM_THREADS=1
python3 -m pytest -q -m "not slow" -n 2 --dist worksteal "$@"
