"""benchmarks/peer_budget.py end to end on a tiny budget: dotformer (its CLI) then HF Marian on the same G2P split."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("rapidfuzz")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peer_budget.py"


def test_peer_budget_runs_both_systems_on_the_same_test_set(tmp_path: Path) -> None:
    out = tmp_path / "peer_budget.json"
    work = tmp_path / "work"
    command = [sys.executable, str(SCRIPT), "--task", "g2p", "--max-steps", "5", "--limit", "20"]
    command += ["--corpus-limit", "3000", "--threads", "1", "--work-dir", str(work), "--out", str(out)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "| dotformer" in done.stdout and "| marian" in done.stdout  # the table
    result = json.loads(out.read_text())
    systems = result["systems"]
    assert set(systems) == {"dotformer", "marian"}
    for name, system in systems.items():
        assert system["steps"] == 5, name
        assert 0 < system["epochs"] < 1 and system["target_tokens"] > 0 and system["seconds"] > 0, name
        metrics = system["metrics"]
        for key in ("wer", "per", "perplexity"):
            assert math.isfinite(metrics[key]), (name, key)
        assert 0.0 <= metrics["wer"] <= 100.0 and metrics["per"] >= 0.0 and metrics["perplexity"] >= 1.0, name
        assert 0 <= system["unfinished"] <= system["num_sources"]
    dotformer, marian = systems["dotformer"], systems["marian"]
    assert dotformer["num_sources"] == marian["num_sources"] == 20
    assert dotformer["num_pairs"] == marian["num_pairs"] >= 20  # a word's pronunciations are all its references
    assert dotformer["epochs"] == pytest.approx(marian["epochs"])  # the same batches, in the same order
    assert marian["extra"]["tied_output"] and marian["extra"]["stopped_by"] == "max_steps"
    assert result["marian_settings"]["warmup_steps"] == 200 and result["marian_settings"]["lr_peak"] == 2e-3
    assert result["target"]["metric"] == "wer" and math.isfinite(result["target"]["dotformer_lead"])
    # both wrote one output line per test pair, for the same pairs
    for name in ("dotformer", "marian"):
        assert len((work / f"{name}_test.hyp").read_text().splitlines()) == dotformer["num_pairs"]
