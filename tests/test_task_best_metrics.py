"""Each task validates, picks ``best/`` and reports by its own figures: a classifier's and a tagger's validation
passes compute accuracy and macro-F1 as ``dotformer evaluate`` does (the same numbers at the same checkpoint),
``--best-metric accuracy|f1`` chooses ``best/`` by them (patience and resume included), a metric a task does not
offer is refused in one line before anything is written, and the progress lines of a classifier count texts and show
no perplexity."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from encoder_support import ANIMALS, PLACES, encoder_toml, sentence

from dotformer.cli import main

MODEL = encoder_toml(eval_every=10)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Texts labelled animal or place, sentences tagged ANIMAL / PLACE / O word by word, and a tiny config."""
    root = tmp_path_factory.mktemp("figures")
    rng = random.Random(0)

    rows = [(sentence(rng, ANIMALS), "animal") if i % 2 else (sentence(rng, PLACES), "place") for i in range(300)]
    (root / "labels.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in rows))
    tagged, bio = [], []
    for _ in range(160):
        words = sentence(rng, ANIMALS + PLACES).split()
        tags = ["ANIMAL" if w in ANIMALS else "PLACE" if w in PLACES else "O" for w in words]
        tagged.append("\n".join(f"{w} X {t}" for w, t in zip(words, tags, strict=True)))
        bio.append("\n".join(f"{w} X {'O' if t == 'O' else 'B-' + t}" for w, t in zip(words, tags, strict=True)))
    (root / "tags.conll").write_text("\n\n".join(tagged) + "\n")
    (root / "bio.conll").write_text("\n\n".join(bio) + "\n")  # entities: F1 by seqeval
    (root / "labels.txt").write_text("".join(f"{t}\n" for t, _ in rows))
    (root / "tiny.toml").write_text(MODEL)
    return {path.name: path for path in root.iterdir()}


def run(*argv: Any) -> int:
    torch.set_num_threads(1)
    return main([str(a) for a in argv])


def train(files: dict[str, Path], out: Path, task: str, data: str, *extra: Any) -> int:
    common = ["--config", files["tiny.toml"], "--tokenizer", "char", "--threads", "1"]
    return run("train", "--task", task, "--data", files[data], "--out", out, *common, *extra)


def valid_records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["split"] == "valid"]


def evaluated(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """What ``dotformer evaluate --split valid`` computes for a checkpoint."""
    capsys.readouterr()
    out = checkpoint.parent.parent / f"{checkpoint.parent.name}-{checkpoint.name}.json"
    assert run("evaluate", "--checkpoint", checkpoint, "--split", "valid", "--json", out) == 0
    return json.loads(out.read_text())["metrics"]  # type: ignore[no-any-return]


def test_a_classifier_picks_best_by_accuracy_as_evaluate_computes_it(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cls"
    assert train(files, out, "classify", "labels.tsv", "--max-steps", "40", "--best-metric", "accuracy") == 0
    captured = capsys.readouterr()
    records = valid_records(out)
    assert [r["step"] for r in records] == [10, 20, 30, 40]
    accuracies = [r["accuracy"] for r in records]
    best = accuracies.index(max(accuracies))  # the first pass of the highest accuracy: ties do not count
    assert [r["best"] for r in records] == [a > max(accuracies[:i], default=-1) for i, a in enumerate(accuracies)]
    info = json.loads((out / "best" / "config.json").read_text())
    assert info["step"] == records[best]["step"]
    assert info["best"] == {"metric": "accuracy", "score": records[best]["accuracy"]}
    figures = evaluated(out / "best", capsys)  # the same texts, the same code: the same numbers
    assert figures["count"] == 15
    assert figures["accuracy"] == pytest.approx(records[best]["accuracy"], abs=1e-9)
    assert figures["macro_f1"] == pytest.approx(records[best]["f1"], abs=1e-9)
    last = evaluated(out / "last", capsys)
    assert (last["accuracy"], last["macro_f1"]) == pytest.approx((records[-1]["accuracy"], records[-1]["f1"]))
    assert all("ppl" not in r for r in records)  # a loss over labels has no perplexity
    # the lines: texts per second, accuracy and macro-F1, no perplexity; the summary says what chose best/
    valid_lines = [line for line in captured.err.splitlines() if ": valid loss" in line]
    assert len(valid_lines) == 4 and all("ppl" not in line for line in valid_lines)
    shown = f"step {records[best]['step']}: valid loss {records[best]['loss']:.4f}, "
    shown += f"accuracy {records[best]['accuracy']:.2f}%, macro-F1 {records[best]['f1']:.2f}"
    assert any(line.startswith(shown) for line in valid_lines)
    progress = [line for line in captured.err.splitlines() if line.startswith("train: step")]
    assert progress and all(" texts/s" in line and "tok/s" not in line for line in progress)
    summary = captured.out.strip().splitlines()[-1]
    assert " texts/s" in summary and "ppl" not in summary
    assert f"best valid accuracy {records[best]['accuracy']:.2f}" in summary


@pytest.mark.parametrize(("data", "f1_by"), [("tags.conll", "labels"), ("bio.conll", "entities")])
def test_a_tagger_records_word_accuracy_and_macro_f1_as_evaluate_computes_them(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], data: str, f1_by: str
) -> None:
    out = tmp_path / "tag"
    assert train(files, out, "tag", data, "--max-steps", "20", "--best-metric", "f1") == 0
    err = capsys.readouterr().err.splitlines()
    progress = [line for line in err if line.startswith("train: step")]
    assert progress and all(" words/s, epoch " in line for line in progress)
    assert all("ppl" not in line for line in err if ": valid loss" in line)
    records = valid_records(out)
    best = [r["f1"] for r in records].index(max(r["f1"] for r in records))
    info = json.loads((out / "best" / "config.json").read_text())
    assert info["best"] == {"metric": "f1", "score": records[best]["f1"]} and info["step"] == records[best]["step"]
    figures = evaluated(out / "last", capsys)
    assert figures["f1_by"] == f1_by
    assert figures["accuracy"] == pytest.approx(records[-1]["accuracy"], abs=1e-9)
    assert figures["macro_f1"] == pytest.approx(records[-1]["f1"], abs=1e-9)


def test_a_masked_language_model_counts_masked_tokens_and_keeps_its_perplexity(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mlm"
    assert train(files, out, "mlm", "labels.txt", "--max-steps", "10", "--block-size", "48") == 0
    err = capsys.readouterr().err.splitlines()
    progress = [line for line in err if line.startswith("train: step")]
    assert progress and all(" masked tok/s" in line for line in progress)
    (record,) = valid_records(out)
    assert "accuracy" not in record and record["ppl"] == pytest.approx(math.exp(record["nll"]))
    assert [line for line in err if ": valid loss" in line] == [
        f"step 10: valid loss {record['loss']:.4f}, ppl {record['ppl']:.3f} (best)"
    ]


def test_patience_and_resume_keep_the_best_by_accuracy(files: dict[str, Path], tmp_path: Path) -> None:
    """A model that does not learn (lr 1e-9) gives the same accuracy pass after pass: with patience 2 the run stops
    at the third pass, the first one the best; resumed with a larger patience it goes on, and the best stays the
    first pass's (a resume that forgot it would take the next pass as a new best)."""
    out = tmp_path / "still"
    frozen = ("--lr-peak", "1e-9", "--eval-every", "5", "--no-progress", "--best-metric", "accuracy")
    assert train(files, out, "classify", "labels.tsv", "--max-steps", "50", "--patience", "2", *frozen) == 0
    records = valid_records(out)
    assert [r["step"] for r in records] == [5, 10, 15]
    assert len({r["accuracy"] for r in records}) == 1 and [r["best"] for r in records] == [True, False, False]
    assert json.loads((out / "best" / "config.json").read_text())["step"] == 5
    resumed = ("--resume", "--patience", "4", "--max-steps", "50", "--no-progress")
    assert run("train", "--out", out, *resumed) == 0
    records = valid_records(out)
    assert [r["step"] for r in records] == [5, 10, 15, 20, 25] and not any(r["best"] for r in records[1:])
    state = json.loads((out / "last" / "train_state.json").read_text())
    assert state["best_metric"] == "accuracy" and state["best_step"] == 5
    assert state["best_score"] == records[0]["accuracy"] and state["evals_without_improvement"] == 4
    assert json.loads((out / "best" / "config.json").read_text())["step"] == 5


@pytest.mark.parametrize(
    ("task", "data", "metric", "message"),
    [
        ("classify", "labels.tsv", "bleu", "--best-metric bleu scores the greedy outputs of validation pairs, and a "
         "classifier has none; choose loss, accuracy or f1"),
        ("tag", "tags.conll", "wer", "--best-metric wer scores the greedy outputs of validation pairs, and a tagger "
         "has none; choose loss, accuracy or f1"),
        ("mlm", "labels.txt", "accuracy", "--best-metric accuracy is not a figure of a masked language model's "
         "validation; choose loss"),
        ("lm", "labels.txt", "f1", "--best-metric f1 is not a figure of a language model's validation; choose loss"),
        ("translation", "labels.tsv", "accuracy", "--best-metric accuracy is not a figure of a translation model's "
         "validation; choose loss, bleu, chrf, wer or per"),
        ("exact", "labels.tsv", "f1", "--best-metric f1 is not a figure of an exact model's validation; choose loss, "
         "bleu, chrf, wer or per"),
    ],
)  # fmt: skip
def test_a_best_metric_the_task_does_not_offer_is_one_line(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], task: str, data: str, metric: str,
    message: str,
) -> None:  # fmt: skip
    capsys.readouterr()
    assert train(files, tmp_path / "run", task, data, "--max-steps", "1", "--best-metric", metric) == 2
    assert capsys.readouterr().err == f"dotformer train: error: {message}\n"
    assert not (tmp_path / "run").exists()  # refused before anything is read or written


def test_train_help_names_the_best_metrics_of_each_task(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--best-metric {loss,bleu,chrf,wer,per,accuracy,f1}" in text
    assert "of a classifier or a tagger (classify, tag), the accuracy or macro-F1 (f1) of its labels" in text
