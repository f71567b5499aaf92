"""The encoder's tasks on prepared, memory-mapped data: a masked language model's text (its tokenizer has the mask
token, which is in the fingerprint), a classifier's and a tagger's labelled texts (the ``labelled`` kind: token ids, a
label id per text or a label per token); each prepared, reopened and read back equal to the tokenizer's encoding of
the source, its arrays memory-mapped; ``dotformer prepare --task mlm|classify|tag`` then ``train --data DIR``; a
second run maps the cache; a resumed run equals a straight one, also when its prepared data is gone and the
checkpoint it was fine-tuned from gave the tokenizer."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from dotformer.checkpoint import load_weights
from dotformer.cli import main
from dotformer.data.batch.labelled import LabelledSampler, Masking, labelled_examples, masked_examples
from dotformer.data.config import EncoderDataConfig, LMDataConfig
from dotformer.data.prepared.kinds import kind_of, open_prepared, prepare
from dotformer.data.prepared.labelled_kind import PreparedLabelled
from dotformer.data.prepared.splits import TRAIN
from dotformer.data.prepared.text_kind import PreparedText
from dotformer.data.read.labelled_reader import read_classified, read_tagged
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.data.tokenize.words import IGNORE_LABEL, WordPieces, label_positions
from dotformer.errors import DataError

ANIMALS = ["cat", "dog", "horse", "bird", "fish", "cow"]
PLACES = ["hill", "river", "city", "field", "road", "sea"]
FILLER = ["the", "a", "by", "near", "old", "and"]
MODEL = """
[model]
preset = "tiny"
d_model = 32
num_heads = 2
d_ff = 64
num_encoder_layers = 2
dropout = 0.0
positional = "learned"
"""
FLAGS = ["--max-tokens", "256", "--warmup", "2", "--device", "cpu", "--no-progress", "--eval-every", "2",
         "--save-every", "2"]  # fmt: skip


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(FILLER + words) for _ in range(rng.randint(2, 7)))


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A text (with an empty line), labelled texts (animal / place), and tagged sentences (CoNLL columns)."""
    rng = random.Random(0)
    text = [sentence(rng, ANIMALS + PLACES) for _ in range(200)]
    text[5] = ""
    (tmp_path / "text.txt").write_text("\n".join(text) + "\n")
    rows = [(sentence(rng, ANIMALS), "animal") if i % 2 else (sentence(rng, PLACES), "place") for i in range(160)]
    (tmp_path / "labels.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows))
    sentences = []
    for _ in range(120):
        words = sentence(rng, ANIMALS + PLACES).split()
        tags = ["ANIMAL" if w in ANIMALS else "PLACE" if w in PLACES else "O" for w in words]
        sentences.append("\n".join(f"{w} X {t}" for w, t in zip(words, tags, strict=True)))
    (tmp_path / "tags.conll").write_text("-DOCSTART- O\n\n" + "\n\n".join(sentences) + "\n")
    (tmp_path / "tiny.toml").write_text(MODEL)
    return {name: tmp_path / name for name in ("text.txt", "labels.tsv", "tags.conll", "tiny.toml")}


def training_rows(prepared: PreparedLabelled | PreparedText, source: list) -> list:  # type: ignore[type-arg]
    """The items of ``source`` in the training split, in order."""
    return [item for item, code in zip(source, prepared.split_of.tolist(), strict=True) if code == TRAIN]


def test_a_masked_language_models_text_is_prepared_with_its_mask_token(files: dict[str, Path], tmp_path: Path) -> None:
    config = EncoderDataConfig(task="mlm", dataset=str(files["text.txt"]), tokenizer="char", block_size=16)
    prepared = prepare(config, 3, tmp_path / "mlm")
    again = open_prepared(tmp_path / "mlm")
    assert isinstance(again, PreparedText) and again.task == "mlm" and again.report == prepared.report
    tokenizer = again.tokenizer
    assert tokenizer.mask_id == 4 and again.data_config == config
    lines = files["text.txt"].read_text().splitlines()
    train = training_rows(again, lines)
    assert [row.tolist() for row in again.splits["train"]] == [[*tokenizer.encode(line), EOS_ID] for line in train]
    assert again.texts("valid") == training_rows_of(again, lines, 1) and len(again.texts("valid")) > 0
    for split in again.splits.values():  # mapped, not held as lists
        assert isinstance(split.ids, np.memmap) and isinstance(split.offsets, np.memmap)
    examples = masked_examples(again.splits["train"], 16, Masking(4, tokenizer.vocab_size), "lines")
    assert isinstance(examples.ids, np.memmap) and examples.num_texts == sum(1 for line in train if line)
    # what batching decides is no part of the data; the mask token is (a language model's text is another)
    same = [config, EncoderDataConfig(task="mlm", dataset=str(files["text.txt"]), tokenizer="char", block_size=64,
                                      mlm_unit="blocks", mask_probability=0.2)]  # fmt: skip
    assert {kind_of(c).fingerprint(3) for c in same} == {prepared.fingerprint}
    lm = LMDataConfig(dataset=str(files["text.txt"]), tokenizer="char")
    assert kind_of(lm).fingerprint(3) != prepared.fingerprint


def training_rows_of(prepared: PreparedText, source: list[str], code: int) -> list[str]:
    return [item for item, c in zip(source, prepared.split_of.tolist(), strict=True) if c == code]


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_a_classifiers_texts_round_trip(files: dict[str, Path], tmp_path: Path, tokenizer: str) -> None:
    config = EncoderDataConfig(task="classify", dataset=str(files["labels.tsv"]), tokenizer=tokenizer,
                               vocab_size=300 if tokenizer == "bpe" else None)  # fmt: skip
    prepare(config, 1, tmp_path / "cls")
    prepared = open_prepared(tmp_path / "cls")
    assert isinstance(prepared, PreparedLabelled) and prepared.task == "classify"
    assert prepared.labels == ["animal", "place"] and prepared.report["labels"] == prepared.labels
    source = read_classified(files["labels.tsv"])
    rows = list(zip(source.texts, source.labels, strict=True))
    train = training_rows(prepared, rows)
    arrays = prepared.splits["train"]
    assert [row.tolist() for row in arrays.text] == prepared.tokenizer.encode_batch([t for t, _ in train])
    assert arrays.labels is not None and arrays.labels.tolist() == [prepared.labels.index(label) for _, label in train]
    assert list(prepared.training_texts()) == [(t, label) for t, label in train]
    valid = prepared.texts("valid")
    held_out = [row for row, code in zip(rows, prepared.split_of.tolist(), strict=True) if code == 1]
    assert list(zip(valid.texts, valid.labels, strict=True)) == held_out
    assert len(prepared.splits["valid"]) == len(valid.texts) > 0 and arrays.tags is None
    for split in prepared.splits.values():
        assert isinstance(split.text.ids, np.memmap) and isinstance(split.labels, np.memmap)
        assert split.labels.dtype == np.int16
    examples = labelled_examples(arrays, 8)  # texts cut to 6 tokens when batched, not when prepared
    assert examples.kind == "sequence" and isinstance(examples.ids, np.memmap) and examples.cut > 0
    batch = LabelledSampler(examples, 256).make_batch([0, 1], 0)
    assert batch.labels.tolist() == arrays.labels[:2].tolist() and batch.src.shape == (2, 8)


def test_a_taggers_labels_sit_on_the_first_token_of_each_word(files: dict[str, Path], tmp_path: Path) -> None:
    config = EncoderDataConfig(task="tag", dataset=str(files["tags.conll"]), tokenizer="bpe", vocab_size=300)
    prepared = prepare(config, 1, tmp_path / "tag")
    assert prepared.labels == ["ANIMAL", "O", "PLACE"] and prepared.report["corpus"]["report"]["skipped"] == 1
    source = read_tagged(files["tags.conll"])
    train = training_rows(prepared, list(zip(source.texts, source.labels, strict=True)))
    arrays = prepared.splits["train"]
    assert arrays.tags is not None and arrays.text.aligned_with(arrays.tags)
    assert isinstance(arrays.tags.ids, np.memmap) and arrays.labels is None
    pieces = WordPieces(prepared.tokenizer)
    for (text, labels), ids, tags in zip(train, arrays.text, arrays.tags, strict=True):
        expected_ids, positions = pieces.encode(text.split())
        assert ids.tolist() == expected_ids
        expected = np.full(len(ids), IGNORE_LABEL)
        expected[[where[0] for where in positions]] = [prepared.labels.index(label) for label in labels]
        assert tags.tolist() == expected.tolist()
    every = EncoderDataConfig(task="tag", dataset=str(files["tags.conll"]), tokenizer="bpe", vocab_size=300,
                              label_subtokens="all")  # fmt: skip
    assert kind_of(every).fingerprint(1) != prepared.fingerprint  # the labels per token are prepared
    tokens = pieces.encode_sentences([["horses", "near", "the", "river"]])
    assert label_positions(tokens, "all").sum() >= label_positions(tokens, "first").sum() == 4


def test_a_held_out_label_unknown_to_the_training_texts_is_one_line(files: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "test.tsv").write_text("the cat\tanimal\na town\tcity\n")
    config = EncoderDataConfig(task="classify", dataset=str(files["labels.tsv"]), test=str(tmp_path / "test.tsv"))
    with pytest.raises(DataError, match=r"test.tsv \(the test split\): label 'city' is not among the training labels"):
        prepare(config, 1, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial*"))


@pytest.mark.parametrize(("task", "data"), [("mlm", "text.txt"), ("classify", "labels.tsv"), ("tag", "tags.conll")])
def test_prepare_then_train_on_the_directory(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], task: str, data: str
) -> None:
    out = tmp_path / "prepared"
    assert main(["prepare", "--task", task, "--data", str(files[data]), "--tokenizer", "char", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    run = tmp_path / "run"
    extra = ["--mlm-unit", "blocks", "--block-size", "64"] if task == "mlm" else ["--block-size", "64"]
    quick = ["--config", str(files["tiny.toml"]), *FLAGS]
    assert main(["train", "--data", str(out), *extra, *quick, "--max-steps", "3", "--out", str(run)]) == 0
    record = json.loads((run / "run.json").read_text())
    assert record["task"] == task and record["data"]["block_size"] == 64 and record["model"]["max_len"] == 64
    reference = json.loads((run / "data" / "data.json").read_text())
    assert Path(reference["prepared"]) == out.resolve() and reference["report"]["task"] == task
    assert not any((run / "data").glob("train.*"))  # the corpus is never copied into the run
    held_out = "test.txt" if task == "mlm" else "test.tsv"
    assert (run / "data" / held_out).read_text() == (out / held_out).read_text()
    assert main(["evaluate", "--checkpoint", str(run), "--split", "test", "--json", str(tmp_path / "e.json")]) == 0
    assert json.loads((tmp_path / "e.json").read_text())
    assert main(["train", "--data", str(out), "--vocab-size", "50", *quick, "--out", str(tmp_path / "r2")]) == 2
    assert "vocab_size = 50 (prepared with None) would change them" in capsys.readouterr().err


def cached(kind: str) -> list[Path]:
    return sorted(p for p in (Path(os.environ["DOTFORMER_CACHE"]) / "prepared").glob(f"{kind}-*") if p.is_dir())


def test_a_second_run_maps_the_cache_and_a_resume_without_it_prepares_it_again(
    files: dict[str, Path], tmp_path: Path
) -> None:
    data = ["--task", "classify", "--data", str(files["labels.tsv"]), "--test-fraction", "0.1", "--tokenizer", "char"]
    quick = ["--config", str(files["tiny.toml"]), *FLAGS]
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert main(["train", *data, *quick, "--max-steps", "4", "--out", str(straight)]) == 0
    (first,) = cached("labelled")
    assert main(["train", *data, *quick, "--max-steps", "2", "--out", str(run)]) == 0
    assert cached("labelled") == [first]  # mapped, not prepared again
    shutil.rmtree(first.parent)  # a cleared cache
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "4", "--no-progress"]) == 0
    assert [p.name for p in cached("labelled")] == [first.name]  # prepared again, the same
    once, twice = (load_weights(d / "last" / "model.safetensors") for d in (straight, run))
    assert all(torch.equal(once[name], twice[name]) for name in once)


def test_a_fine_tuned_run_resumes_exactly_on_the_checkpoints_tokenizer(files: dict[str, Path], tmp_path: Path) -> None:
    mlm = tmp_path / "mlm"
    tiny = ["--config", str(files["tiny.toml"]), "--tokenizer", "char", *FLAGS]
    assert main(["train", "--task", "mlm", "--data", str(files["text.txt"]), *tiny, "--max-steps", "2",
                 "--block-size", "32", "--out", str(mlm)]) == 0  # fmt: skip
    data = ["--task", "tag", "--data", str(files["tags.conll"]), "--init-from", str(mlm)]
    quick = FLAGS
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert main(["train", *data, *quick, "--max-steps", "4", "--out", str(straight)]) == 0
    reference = json.loads((straight / "data" / "data.json").read_text())
    assert reference["given_tokenizers"] and reference["report"]["tokenizers"]["sample"]["given"]
    assert main(["train", *data, *quick, "--max-steps", "2", "--out", str(run)]) == 0
    shutil.rmtree(Path(os.environ["DOTFORMER_CACHE"]) / "prepared")
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "4", "--no-progress"]) == 0
    assert json.loads((run / "data" / "data.json").read_text())["fingerprint"] == reference["fingerprint"]
    once, twice = (load_weights(d / "last" / "model.safetensors") for d in (straight, run))
    assert all(torch.equal(once[name], twice[name]) for name in once)
    scratch = ["--task", "tag", "--data", str(files["tags.conll"]), *tiny, "--max-steps", "1"]
    assert main(["train", *scratch, "--out", str(tmp_path / "scratch")]) == 0
    assert len(cached("labelled")) == 2  # the checkpoint's tokenizer is in the fingerprint


def test_a_masked_language_models_settings_beside_its_prepared_text_are_compared_as_its_own(
    files: dict[str, Path], tmp_path: Path
) -> None:
    """A [data] table beside prepared mlm text may repeat its settings (given, or the task's defaults) and set its
    batch-time ones; a setting that differs is named with both values."""
    from dotformer.errors import ConfigError
    from dotformer.runs.tasks import prepared_source

    out = tmp_path / "prepared"
    prepare(EncoderDataConfig(task="mlm", dataset=str(files["text.txt"]), tokenizer="char"), 1, out)
    same = {"dataset": str(out), "task": "mlm", "tokenizer": "char", "valid_fraction": 0.05, "mlm_unit": "blocks"}
    data, prepared = prepared_source(same)  # type: ignore[misc]
    assert prepared.task == "mlm" and data["mlm_unit"] == "blocks" and data["tokenizer"] == "char"
    with pytest.raises(ConfigError, match=r"valid_fraction = 0\.2 \(prepared with 0\.05\) would change them"):
        prepared_source({**same, "valid_fraction": 0.2})
    with pytest.raises(ConfigError, match=r"tokenizer = 'bpe' \(prepared with 'char'\)"):
        prepared_source({**same, "tokenizer": "bpe"})


DATA = Path(__file__).resolve().parent / "data"


def test_conll_comment_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    """A line that starts with # before a sentence's words is a comment (CoNLL-U's ``# sent_id``), counted in the
    report and its lines; a # inside a sentence is a word."""
    texts = read_tagged(DATA / "tagged_comments.conll")
    assert texts.texts == ["the cat sat", "a dog by the river", "the # horse"]
    assert texts.labels[2] == ["O", "O", "ANIMAL"]
    assert texts.report["comments"] == 7 and texts.report["skipped"] == 1 and texts.report["words"] == 11
    config = EncoderDataConfig(task="tag", dataset=str(DATA / "tagged_comments.conll"), tokenizer="char",
                               valid_fraction=0.0, test_fraction=0.0)  # fmt: skip
    prepared = prepare(config, 1, tmp_path / "out")
    assert f"{DATA / 'tagged_comments.conll'}: 7 comment lines (#) skipped" in prepared.lines
    assert prepared.labels == ["ANIMAL", "O", "PLACE"] and prepared.warnings == []


def test_a_conll_file_of_one_sentence_or_a_sentence_far_past_the_block_is_warned_about(tmp_path: Path) -> None:
    """Sentences that run together (no blank line between them) make one long sentence: the preparation warns of a
    file of one sentence, and a tagging run of a sentence over four blocks long (it is cut short)."""
    from dotformer.runs.tasks import task_named

    rng = random.Random(0)
    one = tmp_path / "one.conll"
    one.write_text("".join(f"{rng.choice(FILLER + ANIMALS)} {rng.choice('NO')}\n" for _ in range(60)))
    config = EncoderDataConfig(task="tag", dataset=str(one), tokenizer="char", valid_fraction=0.0, test_fraction=0.0)
    prepared = prepare(config, 1, tmp_path / "one")
    assert prepared.warnings == [f"{one} holds one sentence of 60 words: a blank line ends a CoNLL sentence"]
    tagged = tmp_path / "tagged.conll"
    sentences = [[rng.choice(FILLER + ANIMALS) for _ in range(n)] for n in [3, 4, 5, 40]]
    tagged.write_text("\n".join("".join(f"{w} {'N' if w in ANIMALS else 'O'}\n" for w in s) for s in sentences))
    task = task_named("tag")
    data = task.data_config({"dataset": str(tagged), "tokenizer": "char", "valid_fraction": 0.0,
                             "test_fraction": 0.0, "block_size": 24}, "test")  # fmt: skip
    (warning,) = task.prepare(data, 1, None, False, False)[0].warnings
    longest = sum(map(len, sentences[3])) + len(sentences[3]) - 1 + 2  # characters and spaces, [BOS] and [EOS]
    assert warning == (
        f"{tagged}: a training sentence of {longest} tokens is over 4 times the block size 24, and is cut short: "
        f"is every sentence apart?"
    )
    assert task.prepare(dataclasses.replace(data, block_size=longest), 1, None, False, False)[0].warnings == []
