"""Sentence-pair classification, a task in one module (:mod:`dotformer.runs.sentence_pairs`): TEXT<TAB>TEXT<TAB>LABEL
files, the two texts joined by the separator token, trained and evaluated through the command line as a classifier."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from dotformer.checkpoint import load_checkpoint
from dotformer.cli import main
from dotformer.runs.sentence_pairs import SEPARATOR, joined_file

pytestmark = pytest.mark.usefixtures("one_thread")

ANIMALS = ["cat", "dog", "horse", "bird"]
FILLER = ["the", "a", "by", "near", "old"]
MODEL = '[model]\npreset = "tiny"\nd_model = 32\nnum_heads = 2\nd_ff = 64\nnum_encoder_layers = 1\ndropout = 0.0\n'
FLAGS = ["--max-tokens", "256", "--warmup", "2", "--device", "cpu", "--no-progress", "--eval-every", "2",
         "--save-every", "2", "--tokenizer", "char"]  # fmt: skip


def pairs_file(path: Path, count: int, seed: int) -> Path:
    """Pairs of short texts, labelled "same" when both name the same animal, else "other"."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        first, second = rng.choice(ANIMALS), rng.choice(ANIMALS)
        texts = [" ".join([rng.choice(FILLER), animal, rng.choice(FILLER)]) for animal in (first, second)]
        lines.append(f"{texts[0]}\t{texts[1]}\t{'same' if first == second else 'other'}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_a_file_of_pairs_is_a_classifiers_file_with_the_separator(tmp_path: Path) -> None:
    source = tmp_path / "pairs.tsv"
    source.write_text("a cat\tthe dog\tother\n\nold bird\ta bird\tsame\n", encoding="utf-8")
    joined = Path(joined_file(str(source)))
    assert joined.read_text(encoding="utf-8") == f"a cat{SEPARATOR}the dog\tother\n\nold bird{SEPARATOR}a bird\tsame\n"
    assert joined_file(str(source)) == str(joined)  # written once, named by the content
    source.write_text("a cat\tother\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"pairs.tsv:1: a line of a sentence-pair file is TEXT<TAB>TEXT<TAB>LABEL"):
        joined_file(str(source))


def test_train_and_evaluate_a_sentence_pair_classifier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train = pairs_file(tmp_path / "train.tsv", 120, seed=1)
    test = pairs_file(tmp_path / "test.tsv", 20, seed=2)
    (tmp_path / "tiny.toml").write_text(MODEL, encoding="utf-8")
    run = tmp_path / "run"
    argv = ["train", "--task", "classify-pairs", "--data", str(train), "--config", str(tmp_path / "tiny.toml")]
    assert main([*argv, *FLAGS, "--max-steps", "4", "--out", str(run)]) == 0
    record = json.loads((run / "run.json").read_text())
    assert record["task"] == "classify-pairs" and record["data"]["task"] == "classify"
    held_out = (run / "data" / "test.tsv").read_text(encoding="utf-8").splitlines()
    assert held_out and all(SEPARATOR in line.split("\t")[0] for line in held_out)
    loaded = load_checkpoint(run / "best")
    assert loaded.model.config.head == "sequence" and loaded.model.config.num_labels == 2
    tokenizer = loaded.src_tokenizer
    assert len(tokenizer.encode(SEPARATOR.strip())) == 1  # one token between the two texts
    capsys.readouterr()
    report = tmp_path / "e.json"
    assert main(["evaluate", "--checkpoint", str(run), "--data", str(test), "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "(20 pairs), task classify-pairs, 2 labels" in out
    scored = json.loads(report.read_text())
    assert scored["labels"] == ["other", "same"] and 0.0 <= scored["metrics"]["accuracy"] <= 100.0
    assert main(["evaluate", "--checkpoint", str(run), "--split", "test"]) == 0


def test_prepare_then_train_a_sentence_pair_classifier_from_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dotformer prepare --task classify-pairs writes a classifier's prepared data (the texts joined), which train
    --task classify-pairs maps as it is, as train --data FILE would have prepared it; another task is refused."""
    train = pairs_file(tmp_path / "train.tsv", 60, seed=1)
    (tmp_path / "tiny.toml").write_text(MODEL, encoding="utf-8")
    prepared = tmp_path / "prepared"
    assert main(["prepare", "--task", "classify-pairs", "--data", str(train), "--tokenizer", "char",
                 "--out", str(prepared)]) == 0  # fmt: skip
    report = json.loads((prepared / "prepared.json").read_text())
    assert (
        report["kind"] == "labelled"
        and report["task"] == "classify"
        and report["data"]["dataset"] == joined_file(str(train))
    )
    held_out = (prepared / "test.tsv").read_text(encoding="utf-8").splitlines()
    assert held_out and all(SEPARATOR in line.split("\t")[0] for line in held_out)
    run = tmp_path / "run"
    argv = ["train", "--task", "classify-pairs", "--data", str(prepared), "--config", str(tmp_path / "tiny.toml")]
    assert main([*argv, *FLAGS[:-2], "--max-steps", "2", "--out", str(run)]) == 0
    record = json.loads((run / "run.json").read_text())
    assert record["task"] == "classify-pairs" and record["data"]["task"] == "classify"
    assert json.loads((run / "data" / "data.json").read_text())["fingerprint"] == report["fingerprint"]
    fresh = tmp_path / "fresh"
    argv = ["train", "--task", "classify-pairs", "--data", str(train), "--config", str(tmp_path / "tiny.toml")]
    assert main([*argv, *FLAGS, "--max-steps", "2", "--out", str(fresh)]) == 0
    assert json.loads((fresh / "data" / "data.json").read_text())["fingerprint"] == report["fingerprint"]
    capsys.readouterr()
    assert main(["train", "--task", "tag", "--data", str(prepared), "--out", str(tmp_path / "tag")]) == 2
    assert "is prepared for task classify, not tag" in capsys.readouterr().err


def test_classify_reads_text_tab_text_as_the_training_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """classify (CLI and Python) joins TEXT<TAB>TEXT with the separator, as training did; one text alone is refused."""
    import torch

    from dotformer.api.classifier import classify_texts
    from dotformer.decoding.classify import label_texts
    from dotformer.errors import DataError

    (tmp_path / "tiny.toml").write_text(MODEL, encoding="utf-8")
    run = tmp_path / "run"
    argv = ["train", "--task", "classify-pairs", "--data", str(pairs_file(tmp_path / "train.tsv", 60, seed=1))]
    assert main([*argv, "--config", str(tmp_path / "tiny.toml"), *FLAGS, "--max-steps", "2", "--out", str(run)]) == 0
    loaded = load_checkpoint(run / "best")
    [result] = classify_texts(loaded, ["the cat old\ta dog by"])
    joined = label_texts(loaded.model, loaded.src_tokenizer, [f"the cat old{SEPARATOR}a dog by"], 8, 8192)
    tabbed = label_texts(loaded.model, loaded.src_tokenizer, ["the cat old\ta dog by"], 8, 8192)
    assert list(result.probabilities.values()) == pytest.approx(joined.probabilities[0].tolist(), abs=1e-6)
    assert not torch.allclose(joined.probabilities[0], tabbed.probabilities[0])  # the tab alone reads otherwise
    with pytest.raises(DataError, match=r"^input 2: a sentence-pair classifier reads TEXT<TAB>TEXT"):
        classify_texts(loaded, ["a cat\tthe cat", "a cat"])
    capsys.readouterr()
    assert main(["classify", "--checkpoint", str(run), "a cat"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
