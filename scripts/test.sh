#!/usr/bin/env bash
# Set up and run the checks: ruff (lint + format) and the test suite without the slow tests.
# Usage: bash scripts/test.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev sword-text-sparv sword-text-kjv sword-text-web chromium chromium-driver
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m pytest -q -m "not slow" -n 2 "$@"
