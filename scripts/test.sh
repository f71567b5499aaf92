#!/usr/bin/env bash
# Set up and run the checks: ruff (lint + format), the test suite without the slow tests, and the documentation build.
# all: every optional feature (corpora, metrics, plots, TensorBoard, hf: corpora, the servers' aiohttp) so its tests
# run; bench brings the peers (HF transformers, CTranslate2) and onnx so the exporter and importer tests run too; docs
# brings Sphinx.
# Usage: bash scripts/test.sh [PYTEST ARGS...]
#   bash scripts/test.sh               the checks and every test not marked slow; none depends on the machine's speed
#                                      or load (fixed step budgets, time limits that only a hung command reaches)
#   bash scripts/test.sh -m slow       the slow tests alone (a later -m wins): the copy task trained to 100% exact
#                                      match, pip installing into a fresh virtual environment, 40 kills of a training,
#                                      torchrun, the GPU script
# The numerical tests (marked `numerical`: attention, layers, model, decoding, equality with peers, import, export,
# embeddings) then run a second time on another vector unit, so that a tolerance that holds for one CPU's rounding
# only fails here, not on a user's machine: on an AVX-512 CPU as on an AVX2 one (PyTorch's, oneDNN's and MKL's kernels
# limited to AVX2), on any other CPU on the baseline kernels (ATEN_CPU_CAPABILITY=default). The tolerances are derived
# from the arithmetic (tests/tolerance.py). DOTFORMER_SECOND_PASS=0 skips that pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh all,dev,bench,onnx,docs sword-text-sparv sword-text-kjv sword-text-web chromium chromium-driver nodejs
python3 -m ruff check .
python3 -m ruff format --check .
# The explorer page's JavaScript (package data, inlined into the page): a syntax check of each file.
if command -v node >/dev/null; then for js in src/dotformer/explore/static/*.js; do node --check "$js"; done
else echo "test: node not found: no JavaScript syntax check (install the Debian package nodejs)" >&2; fi
# Two test processes on two cores, one torch thread each (small tensors gain nothing from a second thread);
# worksteal lets the idle process take queued tests while the other runs a main job's end-to-end test.
export OMP_NUM_THREADS=1
python3 -m pytest -q -m "not slow" -n 2 --dist worksteal "$@"
if [ "${DOTFORMER_SECOND_PASS:-1}" = "1" ]; then
  # ATen's capability, oneDNN's and MKL's instruction sets: one level below what this CPU runs by default
  read -r aten onednn mkl < <(python3 -c "import torch
print('avx2 AVX2 AVX2' if torch.backends.cpu.get_cpu_capability() == 'AVX512' else 'default SSE41 SSE4_2')")
  echo "test: the numerical tests again with ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn MKL_ENABLE_INSTRUCTIONS=$mkl" >&2
  ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn MKL_ENABLE_INSTRUCTIONS=$mkl \
    python3 -m pytest -q -m "numerical and not slow" -n 2 --dist worksteal -p no:cacheprovider
fi
# The documentation: warnings are errors, so a broken reference or docstring fails here (its snippets run in pytest).
python3 -m sphinx -W --keep-going -q -b html docs docs/_build/html
