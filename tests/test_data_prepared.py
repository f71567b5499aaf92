"""Prepared data: a corpus read in passes, split, tokenizers learned on a sample, encoded into mapped arrays; the
directory reopened, the cache keyed by a fingerprint, a changed file named, one preparation for two processes;
batches planned from lengths equal the ones of the in-memory path."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dotformer.data.batch.batching import BatchSampler, encode_pairs
from dotformer.data.batch.blocks import BlockSampler, encode_text, prepared_stream
from dotformer.data.config import DataConfig, LMDataConfig
from dotformer.data.prepared.arrays import PairArrays
from dotformer.data.prepared.cache import prepared_for
from dotformer.data.prepared.fingerprint import changed_inputs
from dotformer.data.prepared.kinds import kind_of, open_prepared, prepare
from dotformer.data.prepared.pair_kind import PreparedPairs, make_tokenizers, read_run_data
from dotformer.data.prepared.skeleton import SAMPLE_SEED
from dotformer.data.prepared.splits import SPLIT_NAMES, assign_splits
from dotformer.data.prepared.text_kind import PreparedText
from dotformer.data.read.text_corpus import pieces
from dotformer.data.read.types import Pair
from dotformer.data.tokenize.tokenizer_files import train_tokenizer, train_tokenizer_pair
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.errors import ConfigError, DataError, MissingDataError

WORDS = [f"w{i}" for i in range(40)]


def write_pairs(path: Path, count: int, seed: int = 0, words: int = 12) -> Path:
    """A TSV of ``count`` translation-like pairs of symbols (the target: the source reversed and shifted)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        source = [rng.choice(WORDS) for _ in range(rng.randint(1, words))]
        rows.append(f"{' '.join(source)}\t{' '.join(w.upper() for w in reversed(source))}\n")
    path.write_text("".join(rows), encoding="utf-8")
    return path


def rows_of(arrays: PairArrays) -> list[tuple[list[int], list[int]]]:
    return [(arrays.src[i].tolist(), arrays.tgt[i].tolist()) for i in range(len(arrays))]


# --- the in-memory path and the prepared path give the same data ------------------------------------------------


@pytest.mark.parametrize("given_valid", [False, True], ids=["random split", "given valid file"])
def test_prepared_pairs_equal_the_in_memory_path(tmp_path: Path, given_valid: bool) -> None:
    train = write_pairs(tmp_path / "train.tsv", 600)
    valid = write_pairs(tmp_path / "valid.tsv", 40, seed=1) if given_valid else None
    config = DataConfig(dataset=str(train), valid=None if valid is None else str(valid), vocab_size=300)
    prepared = prepare(config, seed=3, directory=tmp_path / "prepared")
    old = read_run_data(config, 3)  # the splits read into memory
    tokenizers = make_tokenizers(config.resolved("translation"), old.splits.train)
    assert tokenizers.src.to_dict() == prepared.tokenizers.src.to_dict()
    assert prepared.tokenizers.src is prepared.tokenizers.tgt  # BPE on both sides: one shared vocabulary
    for name in ("train", "valid", "test"):
        pairs = getattr(old.splits, name)
        expected = [(e.src, e.tgt) for e in encode_pairs(pairs, tokenizers.src, tokenizers.tgt)]
        assert rows_of(prepared.splits[name]) == expected, name
        if name != "train":
            assert prepared.texts(name) == pairs
    assert prepared.lines[: len(old.lines)] == old.lines  # what each file said, the split
    old_batches = BatchSampler(encode_pairs(old.splits.train, tokenizers.src, tokenizers.tgt), 128, seed=1).batches(2)
    new_batches = BatchSampler(prepared.splits["train"], 128, seed=1).batches(2)
    assert len(old_batches) == len(new_batches)
    for a, b in zip(old_batches, new_batches, strict=True):
        assert torch.equal(a.src, b.src) and torch.equal(a.tgt_in, b.tgt_in) and torch.equal(a.tgt_out, b.tgt_out)
        assert (a.num_src_tokens, a.num_tgt_tokens, a.indices) == (b.num_src_tokens, b.num_tgt_tokens, b.indices)


def test_a_reopened_directory_equals_the_first(tmp_path: Path) -> None:
    config = DataConfig(dataset=str(write_pairs(tmp_path / "train.tsv", 300)), task="exact")
    first = prepare(config, seed=0, directory=tmp_path / "p")
    again = open_prepared(tmp_path / "p")
    assert isinstance(again, PreparedPairs) and again.report == first.report
    assert again.fingerprint == first.fingerprint and again.task == "exact"
    assert again.data_config.src_tokenizer == "char"
    assert again.tokenizers.src.to_dict() == first.tokenizers.src.to_dict()
    for name in ("train", "valid", "test"):
        assert rows_of(again.splits[name]) == rows_of(first.splits[name])
        assert again.lengths(name).tolist() == first.lengths(name).tolist()
    assert again.split_of.tolist() == first.split_of.tolist() and len(again.split_of) == 300
    counts = {name: first.report["splits"][name]["examples"] for name in ("train", "valid", "test")}
    assert counts == {"train": 270, "valid": 15, "test": 15}


def test_a_g2p_file_keeps_a_words_pronunciations_in_one_split(tmp_path: Path) -> None:
    path = tmp_path / "words.tsv"
    path.write_text("".join(f"w{i}\tA{i} B\nw{i}\tA{i} C\n" for i in range(200)), encoding="utf-8")
    prepared = prepare(DataConfig(dataset=str(path), task="g2p"), seed=5, directory=tmp_path / "p")
    split = prepared.split_of
    assert (split[0::2] == split[1::2]).all()  # the two pronunciations of each word
    assert prepared.report["tokenizers"]["src"]["kind"] == "char"
    assert prepared.report["tokenizers"]["tgt"]["kind"] == "symbol"


def test_a_limit_keeps_the_first_pairs_and_is_counted(tmp_path: Path) -> None:
    config = DataConfig(dataset=str(write_pairs(tmp_path / "t.tsv", 500)), limit=200, task="exact")
    prepared = prepare(config, seed=0, directory=tmp_path / "p")
    assert sum(prepared.report["splits"][n]["examples"] for n in ("train", "valid", "test")) == 200
    assert (prepared.split_of[200:] == 255).all() and len(prepared.split_of) == 500
    assert "--limit keeps the first 200" in prepared.lines[0]


def test_the_lm_stream_equals_the_in_memory_stream(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    lines = [f"line {i}: {'ab ' * (i % 7)}" if i % 13 else "" for i in range(1000)]  # blank lines are kept
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    prepared = prepare(LMDataConfig(dataset=str(path)), seed=1, directory=tmp_path / "p")
    split = assign_splits(len(lines), 1, 0.05, 0.05, *pieces(len(lines)))  # the lines in memory, dealt by piece
    splits = {
        name: [line for line, c in zip(lines, split, strict=True) if c == code] for code, name in enumerate(SPLIT_NAMES)
    }
    tokenizer = train_tokenizer("char", splits["train"])
    assert isinstance(prepared, PreparedText) and prepared.tokenizer.to_dict() == tokenizer.to_dict()
    for name in SPLIT_NAMES:
        lines = splits[name]
        plain = [i for line in lines for i in [*tokenizer.encode(line), EOS_ID]]
        assert prepared.stream(name).tolist() == plain == encode_text(lines, tokenizer, 8).ids.tolist(), name
        assert prepared.characters(name) == sum(len(line) + 1 for line in lines)
        assert len(prepared.splits[name]) == len(lines)  # one row per line
    assert prepared.texts("valid") == splits["valid"]
    stream = prepared_stream(prepared, "train", 16)
    old = BlockSampler(encode_text(splits["train"], tokenizer, 16), 64, seed=2).batches(1)
    new = BlockSampler(stream, 64, seed=2).batches(1)
    for a, b in zip(old, new, strict=True):
        assert torch.equal(a.tgt_in, b.tgt_in) and torch.equal(a.tgt_out, b.tgt_out)


def test_a_text_limit_and_given_files(tmp_path: Path) -> None:
    for name, count in (("train", 300), ("valid", 20), ("test", 10)):
        (tmp_path / f"{name}.txt").write_text("".join(f"{name} {i}\n" for i in range(count)), encoding="utf-8")
    config = LMDataConfig(dataset=str(tmp_path / "train.txt"), valid=str(tmp_path / "valid.txt"),
                          test=str(tmp_path / "test.txt"), limit=100)  # fmt: skip
    prepared = prepare(config, seed=9, directory=tmp_path / "p")
    assert [len(prepared.splits[n]) for n in ("train", "valid", "test")] == [100, 20, 10]
    assert prepared.seed is None and prepared.texts("test") == [f"test {i}" for i in range(10)]
    assert prepared.data_config == config and open_prepared(tmp_path / "p").report == prepared.report


# --- batches from lengths ------------------------------------------------------------------------------------------


def greedy_batches(lengths: np.ndarray, max_tokens: int, seed: int, epoch: int, shuffle: bool, chunk: int | None):
    """The packing rule written plainly, one example at a time (the reference of BatchSampler.global_plan)."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths)) if shuffle else np.arange(len(lengths))
    chunk = len(order) if chunk is None or not shuffle else chunk
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        piece = order[start : start + chunk]
        batch: list[int] = []
        for index in piece[np.argsort(lengths[piece], kind="stable")].tolist():
            if batch and (len(batch) + 1) * lengths[index] > max_tokens:
                batches.append(batch)
                batch = []
            batch.append(index)
        batches.append(batch)
    return [batches[i] for i in rng.permutation(len(batches))] if shuffle else batches


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=300),
    max_tokens=st.integers(41, 400),
    seed=st.integers(0, 3),
    shuffle=st.booleans(),
    chunk=st.sampled_from([None, 7, 64]),
)
def test_batches_planned_from_lengths_equal_the_greedy_rule(lengths, max_tokens, seed, shuffle, chunk) -> None:
    arrays = PairArrays.from_rows([[4] * n for n in lengths], [[5] * (n // 2) for n in lengths])
    sampler = BatchSampler(arrays, max_tokens, seed=seed, shuffle=shuffle, sort_chunk=chunk)
    expected = greedy_batches(arrays.lengths, max_tokens, seed, 3, shuffle, chunk)
    assert [batch.tolist() for batch in sampler.global_plan(3)] == expected
    plan = sampler.plan(3)
    collated = [sampler.make_batch(plan[i], 3) for i in range(len(plan))]
    cells = sum(b.src.numel() + b.tgt_out.numel() for b in collated)
    real = sum(b.num_src_tokens + b.num_tgt_tokens for b in collated)
    assert sampler.padding_fraction(plan) == pytest.approx(1 - real / cells, abs=1e-12)  # no batch collated for it


# --- the cache -------------------------------------------------------------------------------------------------------


def test_the_cache_maps_what_it_prepared_and_names_a_changed_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_pairs(tmp_path / "train.tsv", 200)
    config = DataConfig(dataset=str(path), task="exact")
    first = prepared_for(config, seed=1, cache_root=tmp_path / "cache")
    assert first.directory.parent == tmp_path / "cache" / "prepared"
    again = prepared_for(config, seed=1, cache_root=tmp_path / "cache")
    assert again.directory == first.directory and again.report == first.report  # mapped, not prepared again
    assert prepared_for(config, seed=2, cache_root=tmp_path / "cache").directory != first.directory  # a random split
    with path.open("a", encoding="utf-8") as handle:
        handle.write("w1 w2\tW2 W1\n")
    assert changed_inputs(first.report["inputs"]) == [
        f"{path.resolve()}: changed since it was prepared ({path.stat().st_size - 12:,} bytes then, "
        f"{path.stat().st_size:,} now)"
    ]
    with caplog.at_level(logging.INFO, logger="dotformer.data.prepared.cache"):
        changed = prepared_for(config, seed=1, cache_root=tmp_path / "cache")
    assert changed.directory != first.directory and len(changed.split_of) == 201
    assert f"{path.resolve()}: changed since it was prepared" in caplog.text
    assert "preparing the data again" in caplog.text
    assert (first.directory / "prepared.json").is_file()  # the older data stays for the runs that use it


def test_the_default_cache_is_the_environments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dotformer.data.prepared.cache import default_cache_root

    monkeypatch.setenv("DOTFORMER_CACHE", str(tmp_path / "mine"))
    assert default_cache_root() == tmp_path / "mine"
    monkeypatch.delenv("DOTFORMER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_root() == tmp_path / "xdg" / "dotformer"


def test_the_fingerprint_holds_what_changes_the_data(tmp_path: Path) -> None:
    train = str(write_pairs(tmp_path / "t.tsv", 50))
    valid = str(write_pairs(tmp_path / "v.tsv", 5, seed=1))
    random_split = DataConfig(dataset=train)
    assert kind_of(random_split).fingerprint(1) != kind_of(random_split).fingerprint(2)  # the seed deals the split
    given = DataConfig(dataset=train, valid=valid)
    assert kind_of(given).fingerprint(1) == kind_of(given).fingerprint(2)  # no seed is used
    assert kind_of(given).fingerprint(1) != kind_of(given.replace(vocab_size=500)).fingerprint(1)
    text = LMDataConfig(dataset=train, valid=valid)
    assert kind_of(text).fingerprint(0) == kind_of(
        LMDataConfig(dataset=train, valid=valid, block_size=512)
    ).fingerprint(0)
    tokenizers = train_tokenizer_pair(["a b"], ["c"], "symbol", "symbol")
    assert kind_of(given).fingerprint(1, tokenizers) != kind_of(given).fingerprint(1)


WORKER = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from dotformer.data.prepared.cache import prepared_for
from dotformer.data.config import DataConfig
prepared = prepared_for(DataConfig(dataset=sys.argv[1], task="exact"), 0, sys.argv[2])
print(prepared.directory, prepared.report["splits"]["train"]["examples"])
"""


def test_two_processes_preparing_one_entry_give_one_directory(tmp_path: Path) -> None:
    """Both wait on the lock this test holds; released, one prepares and the other maps what it wrote."""
    from filelock import FileLock

    path = write_pairs(tmp_path / "train.tsv", 300)
    fingerprint = kind_of(DataConfig(dataset=str(path), task="exact")).fingerprint(0)
    entry = tmp_path / "cache" / "prepared" / f"pairs-{fingerprint}"
    entry.parent.mkdir(parents=True)
    command = [sys.executable, "-c", WORKER, str(path), str(tmp_path / "cache")]
    with FileLock(f"{entry}.lock"):
        workers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in "ab"]
        for worker in workers:  # each says it waits before the lock is released
            assert worker.stderr is not None
            said = [worker.stderr.readline()]
            while "waiting" not in said[-1] and said[-1] and len(said) < 5:  # a library's warning may come first
                said.append(worker.stderr.readline())
            assert f"waiting for another process preparing the same data into {entry}" in said[-1], said
    results = [worker.communicate(timeout=300) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], results
    assert {out for out, _ in results} == {f"{entry} 270\n"}
    assert sorted(p.name for p in entry.parent.iterdir() if p.is_dir()) == ["index", entry.name]
    assert open_prepared(entry).report["splits"]["train"]["examples"] == 270


# --- the tokenizer sample, errors, memory ----------------------------------------------------------------------------


def test_bpe_learned_on_a_sample_is_stated_and_is_that_samples(tmp_path: Path) -> None:
    train = write_pairs(tmp_path / "t.tsv", 400)
    config = DataConfig(dataset=str(train), valid=str(write_pairs(tmp_path / "v.tsv", 10, seed=2)), vocab_size=290)
    prepared = prepare(config, seed=0, directory=tmp_path / "p", sample_lines=100)
    sample = prepared.report["tokenizers"]["sample"]
    assert (sample["lines"], sample["of"], sample["seed"]) == (100, 400, SAMPLE_SEED)
    assert "tokenizers: shared bpe, learned on a sample of 100 of the 400 training pairs (seed 0)" in prepared.lines
    chosen = np.sort(np.random.default_rng(SAMPLE_SEED).choice(400, 100, replace=False))
    pairs = [Pair(*line.split("\t")) for line in train.read_text(encoding="utf-8").splitlines()]
    sampled = [pairs[i] for i in chosen]
    expected = train_tokenizer_pair([p.source for p in sampled], [p.target for p in sampled], "bpe", "bpe", 290,
                                    shared=True)  # fmt: skip
    assert prepared.tokenizers.src.to_dict() == expected.src.to_dict()


def test_bad_input_is_one_error_and_leaves_no_directory(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"a\tb\n" * 50 + b"c\t\xff\n")
    with pytest.raises(DataError, match=r"bad\.tsv:51: byte 0xff at byte offset 202"):
        prepare(DataConfig(dataset=str(bad)), 0, tmp_path / "p")
    text = tmp_path / "t.txt"
    text.write_text("hello world\n" * 200, encoding="utf-8")
    other = train_tokenizer("char", ["xyz"])
    other.save(tmp_path / "other.json")
    with pytest.raises(DataError, match=r"other\.json: 100% of the training text's tokens are unknown"):
        prepare(LMDataConfig(dataset=str(text), tokenizer_file=str(tmp_path / "other.json")), 0, tmp_path / "p")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv", "other.json", "t.txt"]  # no partial directory
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="full exists and is not empty"):
        prepare(DataConfig(dataset="copy"), 0, tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    with pytest.raises(MissingDataError, match="no prepared data here"):
        open_prepared(tmp_path / "full")
    with pytest.raises(ConfigError, match="not a Bible"):
        prepare(LMDataConfig(dataset=str(text), test_books=("Ruth",)), 0, tmp_path / "q")


def test_opening_prepared_data_holds_no_python_object_per_token(tmp_path: Path) -> None:
    """200k tokens prepared, then mapped: the arrays are memory maps, and opening (with the lengths the sampler
    reads) allocates far less than a byte a token (a list of ints would take about 36 bytes a token)."""
    path = tmp_path / "big.tsv"
    rng = random.Random(0)
    path.write_text("".join(f"{' '.join(rng.choices(WORDS, k=25))}\t{' '.join(rng.choices(WORDS, k=25))}\n"
                            for _ in range(4000)), encoding="utf-8")  # fmt: skip
    config = DataConfig(dataset=str(path), src_tokenizer="symbol", tgt_tokenizer="symbol", task="exact")
    prepare(config, seed=0, directory=tmp_path / "p")
    tracemalloc.start()
    prepared = open_prepared(tmp_path / "p")
    assert isinstance(prepared, PreparedPairs)
    lengths = prepared.lengths("train")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tokens = sum(sum(s["tokens"].values()) for s in prepared.report["splits"].values())
    assert tokens == 200_000 and len(lengths) == 3600
    assert peak < tokens  # < 1 byte a token
    for arrays in prepared.splits.values():
        assert isinstance(arrays.src.ids, np.memmap) and isinstance(arrays.tgt.offsets, np.memmap)


def test_the_tokenizer_file_names_are_the_checkpoints() -> None:
    from dotformer import checkpoint
    from dotformer.data.prepared import layout as prepared

    assert (prepared.SRC_TOKENIZER_FILE, prepared.TGT_TOKENIZER_FILE) == (
        checkpoint.SRC_TOKENIZER_FILE,
        checkpoint.TGT_TOKENIZER_FILE,
    )


def test_the_report_is_json_with_its_inputs(tmp_path: Path) -> None:
    path = write_pairs(tmp_path / "t.tsv", 60)
    prepared = prepare(DataConfig(dataset=str(path), task="exact"), 4, tmp_path / "p")
    report = json.loads((tmp_path / "p" / "prepared.json").read_text())
    (entry,) = report["inputs"]
    assert entry["path"] == str(path.resolve()) and entry["size"] == path.stat().st_size
    assert report["seed"] == 4 and report["kind"] == "pairs" and report["format"] == 1
    assert report["corpus"]["report"]["read"] == 60 and report["seconds"] >= 0
    assert prepared.lines[-1].startswith("prepared 54 / 3 / 3 pairs (")
