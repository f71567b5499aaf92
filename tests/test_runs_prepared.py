"""Runs on prepared data: ``dotformer prepare`` once, then ``train --data DIR`` maps it as it is; a run on raw files
prepares into the cache and a second run maps the same directory; the run directory refers to its prepared data and
never copies the corpus; a resumed run whose prepared directory is gone prepares it again, the same, or names the
input that changed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from dotformer.checkpoint import load_weights
from dotformer.cli import main

QUICK = ["--preset", "tiny", "--max-steps", "4", "--warmup", "1", "--max-tokens", "128", "--device", "cpu",
         "--no-progress", "--eval-every", "2", "--save-every", "2"]  # fmt: skip


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def words(tmp_path: Path) -> Path:
    """A small g2p file: made-up words, one phone per letter."""
    letters = "abcdefgh"
    lines = []
    for i in range(240):
        word = "".join(letters[(i * 7 + j * 3) % 8] for j in range(2 + i % 5)) + letters[i % 8] * (i // 80)
        lines.append(f"{word}{i}\t{' '.join(c.upper() for c in word)} N{i % 10}\n")
    path = tmp_path / "words.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def prepared_dirs(cache: Path) -> list[Path]:
    """The prepared directories of the cache of this test (conftest points DOTFORMER_CACHE at one per test)."""
    return sorted(p for p in (cache / "prepared").glob("pairs-*") if p.is_dir())


def test_prepare_then_train_maps_the_directory(words: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data"
    assert main(["prepare", "--data", str(words), "--task", "g2p", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out)
    assert "data: prepared " in captured.err and (out / "prepared.json").is_file()
    run = tmp_path / "run"
    assert main(["train", "--data", str(out), *QUICK, "--out", str(run)]) == 0
    reference = json.loads((run / "data" / "data.json").read_text())
    assert Path(reference["prepared"]) == out.resolve()
    assert not any((run / "data").glob("train.*"))  # the corpus is never copied into the run
    record = json.loads((run / "run.json").read_text())
    assert record["task"] == "g2p" and record["data"]["dataset"] == str(words)
    assert prepared_dirs(Path(os.environ["DOTFORMER_CACHE"])) == []  # nothing prepared again


def test_settings_beside_prepared_data_are_one_line(words: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "data"
    assert main(["prepare", "--data", str(words), "--task", "g2p", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(out), "--vocab-size", "99", *QUICK, "--out", str(tmp_path / "r")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"dotformer train: error: {out} is prepared data") and "vocab_size" in line
    assert not (tmp_path / "r").exists()
    assert main(["prepare", "--data", str(words), "--out", str(out)]) == 2  # a directory that holds data already
    assert "not empty" in capsys.readouterr().err


def test_a_config_file_beside_prepared_data_may_repeat_its_settings(words: Path, tmp_path: Path, capsys) -> None:
    """train --data DIR --config FILE: the file's [data] values that are the prepared data's own (given, or its
    task's defaults) change nothing and are accepted; one that differs is named with both values."""
    out = tmp_path / "data"
    assert main(["prepare", "--data", str(words), "--task", "g2p", "--out", str(out)]) == 0
    same = tmp_path / "same.toml"
    same.write_text(
        f'[data]\ndataset = "{words}"\ntask = "g2p"\nsrc_tokenizer = "char"\ntgt_tokenizer = "symbol"\n'
        "valid_fraction = 0.05\n\n[train]\nclip_norm = 0.5\n",
        encoding="utf-8",
    )
    run = tmp_path / "run"
    assert main(["train", "--data", str(out), "--config", str(same), *QUICK, "--out", str(run)]) == 0
    record = json.loads((run / "run.json").read_text())
    assert record["data"] == json.loads((out / "prepared.json").read_text())["data"]
    assert record["train"]["clip_norm"] == 0.5  # the file's other sections apply
    other = tmp_path / "other.toml"
    other.write_text(same.read_text().replace("valid_fraction = 0.05", "valid_fraction = 0.2"), encoding="utf-8")
    capsys.readouterr()
    assert main(["train", "--data", str(out), "--config", str(other), *QUICK, "--out", str(tmp_path / "r")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"dotformer train: error: {out} is prepared data") and "tokenizer" not in line
    assert "valid_fraction = 0.2 (prepared with 0.05)" in line
    assert not (tmp_path / "r").exists()


def test_a_second_run_on_the_same_files_maps_the_cache(words: Path, tmp_path: Path) -> None:
    cache = Path(os.environ["DOTFORMER_CACHE"])
    data = ["--data", str(words), "--task", "g2p"]
    assert main(["train", *data, *QUICK, "--out", str(tmp_path / "a")]) == 0
    (first,) = prepared_dirs(cache)
    assert main(["train", *data, *QUICK, "--out", str(tmp_path / "b")]) == 0
    assert prepared_dirs(cache) == [first]  # mapped, not prepared again
    for run in ("a", "b"):
        assert json.loads((tmp_path / run / "data" / "data.json").read_text())["prepared"] == str(first.resolve())
    assert main(["train", *data, "--seed", "2", *QUICK, "--out", str(tmp_path / "c")]) == 0
    assert len(prepared_dirs(cache)) == 2  # another seed deals another random split


def test_a_resume_without_its_prepared_data_prepares_it_again_the_same(words: Path, tmp_path: Path) -> None:
    cache = Path(os.environ["DOTFORMER_CACHE"])
    data = ["--data", str(words), "--task", "g2p"]
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert main(["train", *data, *QUICK, "--out", str(straight)]) == 0
    assert main(["train", *data, *QUICK, "--max-steps", "2", "--out", str(run)]) == 0
    shutil.rmtree(cache / "prepared")  # a cleared cache
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "4", "--no-progress"]) == 0
    for name, tensor in load_weights(straight / "last" / "model.safetensors").items():
        assert torch.equal(load_weights(run / "last" / "model.safetensors")[name], tensor), name


def test_a_resume_on_changed_data_names_the_file(words: Path, tmp_path: Path, capsys) -> None:
    cache = Path(os.environ["DOTFORMER_CACHE"])
    run = tmp_path / "run"
    assert main(["train", "--data", str(words), "--task", "g2p", *QUICK, "--max-steps", "2", "--out", str(run)]) == 0
    shutil.rmtree(cache / "prepared")
    with words.open("a", encoding="utf-8") as f:
        f.write("zzz\tZ Z Z\n")
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "4", "--no-progress"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"dotformer train: error: cannot resume {run}") and str(words) in line and "changed" in line


def test_a_language_model_prepared_once_trains_at_any_block_size(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("".join(f"line {i} of the text, the {i % 7}th kind\n" for i in range(300)), encoding="utf-8")
    out = tmp_path / "text"
    assert main(["prepare", "--task", "lm", "--data", str(text), "--out", str(out)]) == 0
    for block in ("8", "16"):
        run = tmp_path / f"lm{block}"
        argv = ["train", "--data", str(out), "--block-size", block, "--preset", "tiny", "--max-steps", "2",
                "--device", "cpu", "--no-progress", "--out", str(run)]  # fmt: skip
        assert main(argv) == 0
        record = json.loads((run / "run.json").read_text())
        assert record["task"] == "lm" and record["data"]["block_size"] == int(block)
        assert record["model"]["max_len"] == int(block)
