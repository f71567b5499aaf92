"""benchmarks/lm_peer.py on a tiny budget: dotformer's language model (its CLI) then HF GPT-2 of the same shape on
the same blocks, both reported as validation nats per token and bits per character."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "lm_peer.py"
CONFIG = """
[data]
task = "lm"
block_size = 16
valid_fraction = 0.1
test_fraction = 0.1

[model]
preset = "tiny"

[train]
max_tokens = 64
label_smoothing = 0.0
"""


def test_lm_peer_runs_both_systems(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"and the {i % 7} day was {i % 5}\n" for i in range(400)), encoding="utf-8")
    config = tmp_path / "lm.toml"
    config.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "lm_peer.json"
    command = [sys.executable, str(SCRIPT), "--config", str(config), "--data", str(corpus), "--max-steps", "4"]
    command += ["--eval-every", "2", "--threads", "1", "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    points = json.loads(out.read_text())["points"]
    for system in ("dotformer", "gpt2"):
        steps = [p["step"] for p in points if p["system"] == system]
        assert steps == [2, 4], (system, points)
    assert all(p["bits_per_char"] > 0 and p["nats_per_token"] > 0 for p in points)
