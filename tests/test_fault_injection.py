"""Training under faults, from the outside: ``dotformer train`` in a subprocess on real files, killed with SIGKILL at
random points, interrupted with SIGINT/SIGTERM, resumed from a corrupted newest checkpoint, refused a budget that
allows no step, and restarted over a run that died before its first checkpoint.

The kill test checks what matters after a crash: every checkpoint directory under the run is loadable or absent at
every moment, and the resumed run ends bit-identical (weights, optimizer moments, best/) to one that was never
interrupted, with each step logged once in metrics.jsonl.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import Cli

from dotformer import checkpoint as ckpt

TINY = """
[model]
d_model = 16
num_heads = 2
d_ff = 32
num_encoder_layers = 1
num_decoder_layers = 1
[train]
max_tokens = 64
warmup_steps = 10
save_every = 2
eval_every = 3
keep_last = 2
log_every = 1
progress = false
"""
PAIRS = 80  # a copy task written as a TSV file: "s3 s1 s7<TAB>s3 s1 s7"
CLI = Cli()  # the conftest fixture's runner: its command, environment and time limit


def env() -> dict[str, str]:
    """The child's environment, read when a test runs: it inherits the test's own cache of prepared data
    ($DOTFORMER_CACHE, set by a conftest fixture), never the user's ~/.cache/dotformer."""
    return CLI.env(PYTHONWARNINGS="ignore::DeprecationWarning")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A TOML config of a tiny model and recipe; its data file (a copy task as TSV) is written beside it."""
    rng = random.Random(0)
    rows = [" ".join(f"s{rng.randint(0, 7)}" for _ in range(rng.randint(2, 6))) for _ in range(PAIRS)]
    (tmp_path / "pairs.tsv").write_text("".join(f"{row}\t{row}\n" for row in rows))
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def train_command(config: Path, out: Path, *extra: str) -> list[str]:
    data = ["--data", str(config.parent / "pairs.tsv"), "--tokenizer", "symbol"]
    return CLI.command("train", *data, "--config", str(config), "--out", str(out), "--threads", "1", *extra)


def train(config: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = train_command(config, out, *extra)
    return subprocess.run(command, capture_output=True, text=True, env=env(), timeout=CLI.timeout_s, check=False)


def train_steps(run: Path) -> list[int]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in records if r["split"] == "train"]


def tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def assert_same_state(a: Path, b: Path) -> None:
    """Same weights and same training state (optimizer moments, RNG states, data position, step, best score)."""
    for name in (ckpt.MODEL_FILE, ckpt.TRAIN_STATE_TENSORS):
        ta, tb = tensors(a / name), tensors(b / name)
        assert ta.keys() == tb.keys(), name
        assert all(torch.equal(ta[k], tb[k]) for k in ta), name
    ja, jb = (json.loads((d / ckpt.TRAIN_STATE_JSON).read_text()) for d in (a, b))
    ja.pop("seconds"), jb.pop("seconds")  # wall-clock time differs, nothing else may
    assert ja == jb


def assert_every_checkpoint_loadable(run: Path) -> None:
    """Every checkpoint directory of the run (step_*, last/, best/) is absent or loads completely; once run.json
    is written, the prepared data it refers to and the tokenizers in data/ (written before it) load too."""
    from dotformer.data.prepared.splits import load_split
    from dotformer.data.tokenize.tokenizer_files import load_tokenizer
    from dotformer.runs.run_data import open_run_data

    if (run / "run.json").exists():
        json.loads((run / "run.json").read_text())
        assert len(open_run_data(run).splits["train"]) and load_split(run / "data", "valid")
        load_tokenizer(run / "data" / "tokenizer_src.json"), load_tokenizer(run / "data" / "tokenizer_tgt.json")
    candidates = [run / "best", run / "last", *ckpt.step_checkpoints(run / "checkpoints")]
    for directory in candidates:
        if directory.exists():
            ckpt.load_checkpoint(directory)  # verifies sizes and SHA-256 of every file
            if directory.name != "best":
                ckpt.load_train_state(directory)


def next_command(config: Path, run: Path, steps: int) -> list[str]:
    """What a user does after a crash, following the messages: resume; start afresh over a run with no checkpoint."""
    budget = ["--max-steps", str(steps)]
    if not (run / "run.json").exists():
        return train_command(config, run, *budget)
    if not ckpt.run_has_checkpoint(run):
        return train_command(config, run, *budget, "--overwrite")
    return train_command(config, run, *budget, "--resume")


def wait_until(process: subprocess.Popen[str], deadline: float) -> None:
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.002)


def finished(run: Path, steps: int) -> bool:
    """True when the run's newest checkpoint is the final one (a kill may come after the last save)."""
    try:
        return ckpt.load_train_state(ckpt.find_resume_checkpoint(run))["step"] == steps
    except ckpt.CheckpointError:
        return False


def resume_finished(config: Path, run: Path, steps: int) -> None:
    """What a user does after a kill that came after the final checkpoint: resume, and be told the run is done (that
    start also finishes what the kill interrupted, e.g. links last/ to the final step)."""
    done = subprocess.run(
        next_command(config, run, steps), capture_output=True, text=True, env=env(), timeout=CLI.timeout_s, check=False
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(f"the budget allows no step: the run is at step {steps}, max_steps={steps}")


def assert_same_as_reference(run: Path, reference: Path, steps: int) -> None:
    assert_every_checkpoint_loadable(run)
    assert_same_state(reference / "last", run / "last")
    ra, rb = (tensors(d / "best" / ckpt.MODEL_FILE) for d in (reference, run))
    assert all(torch.equal(ra[k], rb[k]) for k in ra)
    assert train_steps(run) == list(range(1, steps + 1))  # replayed steps trimmed: each step logged once


def kill_and_resume(tmp_path: Path, config: Path, kills: int, steps: int, seed: int) -> None:
    reference = tmp_path / "reference"
    done = train(config, reference, "--max-steps", str(steps))
    assert done.returncode == 0, done.stderr
    run = tmp_path / "killed"
    rng = random.Random(seed)
    killed = 0
    while True:
        log = run / "metrics.jsonl"
        size = log.stat().st_size if log.exists() else -1
        process = subprocess.Popen(next_command(config, run, steps), env=env(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
        if killed == kills:  # the last start runs to the end
            wait_until(process, time.monotonic() + CLI.timeout_s)
        elif rng.random() < 0.2:  # during the start: reading data, writing data/ and run.json, restoring
            wait_until(process, time.monotonic() + rng.uniform(0.5, 3.5))
        else:  # during training: a step, an evaluation, a checkpoint write, a prune
            while process.poll() is None and (log.stat().st_size if log.exists() else -1) == size:
                time.sleep(0.005)
            wait_until(process, time.monotonic() + rng.uniform(0.0, 1.0))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            killed += 1
        _, err = process.communicate()
        assert process.returncode in (0, -signal.SIGKILL), err
        assert_every_checkpoint_loadable(run)
        if process.returncode == 0 or finished(run, steps):  # the run reached its end: compare, start again
            if process.returncode != 0:
                resume_finished(config, run, steps)
            assert_same_as_reference(run, reference, steps)
            if killed == kills:
                break
            ckpt.clear_run_directory(run)
    leftovers = [p for d in (run, run / "checkpoints") for p in d.iterdir() if p.name.startswith(".")]
    assert leftovers == [run / ckpt.TRAIN_LOCK]  # the run directory's lock file stays (its owner file goes)


def test_kill_9_at_random_points_resumes_bit_identical(tmp_path: Path, config: Path) -> None:
    kill_and_resume(tmp_path, config, kills=10, steps=60, seed=0)


@pytest.mark.slow
def test_kill_9_many_times_resumes_bit_identical(tmp_path: Path, config: Path) -> None:
    kill_and_resume(tmp_path, config, kills=40, steps=200, seed=1)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_a_checkpoint_and_says_how_to_resume(tmp_path: Path, config: Path, signum: int) -> None:
    run = tmp_path / "run"
    process = subprocess.Popen(train_command(config, run, "--max-steps", "100000", "--save-every", "100000"),
                               env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    while process.poll() is None and not ((run / "metrics.jsonl").exists() and len(train_steps(run)) >= 5):
        time.sleep(0.02)
    process.send_signal(signum)
    out, err = process.communicate(timeout=CLI.timeout_s)
    assert process.returncode == 130, err
    lines = [line for line in err.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and "--resume" in lines[0] and signal.Signals(signum).name in lines[0], err
    step = train_steps(run)[-1]
    assert f"step {step}" in lines[0]
    saved = ckpt.load_checkpoint(run / "last")  # atomically written, verified
    assert saved.info["step"] == step and ckpt.load_train_state(run / "last")["step"] == step
    resumed = train(config, run, "--max-steps", str(step + 2), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert train_steps(run) == list(range(1, step + 3))


def test_a_corrupted_newest_checkpoint_is_named_on_resume(tmp_path: Path, config: Path) -> None:
    run = tmp_path / "run"
    first = train(config, run, "--max-steps", "6", "--save-every", "3", "--keep-last", "3")
    assert first.returncode == 0, first.stderr
    weights = run / "checkpoints" / "step_0000006" / ckpt.MODEL_FILE  # hard-linked into last/: both are broken
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01
    weights.write_bytes(bytes(data))
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"split": "train", "step": 7, "lo')  # a line a kill cut short
    resumed = train(config, run, "--max-steps", "8", "--save-every", "3", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    warning = [line for line in resumed.stderr.splitlines() if "failed verification" in line]
    assert len(warning) == 1, resumed.stderr
    assert "step_0000006" in warning[0] and "model.safetensors is corrupted" in warning[0]
    assert f"resuming from {run / 'checkpoints' / 'step_0000003'} (step 3)" in warning[0]
    assert any("removed" in line and "metrics.jsonl" in line for line in resumed.stderr.splitlines())
    assert train_steps(run) == list(range(1, 9))
    assert ckpt.load_checkpoint(run / "last").info["step"] == 8


def test_no_step_budget_is_refused_and_a_run_without_checkpoint_offers_overwrite(tmp_path: Path, config: Path) -> None:
    run = tmp_path / "run"
    result = train(config, run, "--max-minutes", "1e-9")  # a budget that allows no step
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "allows no step" in errors[0] and "max_minutes=1e-09" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not run.exists()  # a run that fails before its first checkpoint leaves nothing it made
    # a run killed before its first checkpoint: run.json and data/ are there, no checkpoint: both ways name --overwrite
    assert train(config, run, "--max-steps", "2").returncode == 0
    for name in ("best", "last", "checkpoints"):
        shutil.rmtree(run / name)
    for extra in (["--resume"], []):
        result = train(config, run, "--max-steps", "2", *extra)
        assert result.returncode == 2 and "--overwrite" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    (run / "notes.txt").write_text("mine")  # a user's file in the run directory survives --overwrite
    result = train(config, run, "--max-steps", "2", "--overwrite")
    assert result.returncode == 0, result.stderr
    assert train_steps(run) == [1, 2] and (run / "notes.txt").read_text() == "mine"
    again = train(config, run, "--max-steps", "4")  # a run with a checkpoint: both ways are named
    assert again.returncode == 2 and "--resume" in again.stderr and "--overwrite" in again.stderr
    folder = tmp_path / "folder"  # not a run: --overwrite refuses, nothing deleted
    folder.mkdir()
    (folder / "thesis.tex").write_text("x")
    refused = train(config, folder, "--max-steps", "2", "--overwrite")
    assert refused.returncode == 2 and "not a dotformer run directory" in refused.stderr
    assert [p.name for p in folder.iterdir()] == ["thesis.tex"]


def test_a_half_deleted_pruned_checkpoint_is_cleaned_at_the_next_start(tmp_path: Path, config: Path) -> None:
    run = tmp_path / "run"
    assert train(config, run, "--max-steps", "4").returncode == 0
    aside = run / "checkpoints" / ".step_0000002.pruned-abc"  # a kill came during the deletion of step 2
    aside.mkdir()
    (run / "checkpoints" / "step_0000002").rename(aside / "step_0000002")
    (aside / "step_0000002" / ckpt.MODEL_FILE).unlink()  # half deleted
    assert [p.name for p in ckpt.step_checkpoints(run / "checkpoints")] == ["step_0000004"]  # never picked up
    resumed = train(config, run, "--max-steps", "6", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert not aside.exists()
    assert [p.name for p in ckpt.step_checkpoints(run / "checkpoints")] == ["step_0000004", "step_0000006"]


# -- the training conveniences, from the outside --------------------------------------------------------------------


def test_init_from_best_metric_and_patience_on_the_command_line(tmp_path: Path, config: Path) -> None:
    base = tmp_path / "base"
    assert train(config, base, "--max-steps", "4").returncode == 0
    tuned = tmp_path / "tuned"
    result = train(config, tuned, "--max-steps", "3", "--init-from", str(base), "--best-metric", "chrf",
                   "--valid-decode-limit", "3", "--patience", "5", "--eval-every", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "best valid chrf" in result.stdout
    assert json.loads((tuned / "run.json").read_text())["init_from"] == str(base / "best")
    records = [json.loads(line) for line in (tuned / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["split"] == "valid"]
    assert [r["step"] for r in valid] == [1, 2, 3] and all(r["decoded"] == 3 and "chrf" in r for r in valid)
    for extra, words in (
        (["--preset", "small"], ["preset 'small' (--preset) has d_model = 256", "the checkpoint has 16"]),
        (["--tokenizer", "char"], ["src_tokenizer = 'char' (--tokenizer)", "built with 'symbol'"]),
        (["--resume"], ["cannot be combined with --init-from"]),
    ):
        refused = train(config, tmp_path / "other", "--max-steps", "2", "--init-from", str(base), *extra)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert all(word in refused.stderr for word in words), refused.stderr
