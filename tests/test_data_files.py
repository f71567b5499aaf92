"""A user's own files: which columns hold the pair, what the data line says, g2p grouping, given valid/test files,
DataConfig's reader options, and existing tokenizers (tokenizer.json, sentencepiece .model) trained here."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from dotformer.data.config import DataConfig, data_table
from dotformer.data.prepared.pair_kind import make_tokenizers, read_run_data
from dotformer.data.read.corpora import load_pairs
from dotformer.data.read.types import CorpusOptions, Pair, describe_corpus, parse_column, parse_delimiter
from dotformer.data.tokenize.tokenizer_files import load_tokenizer, tokenizer_from_dict
from dotformer.data.tokenize.tokenizers import UNK_ID
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.evaluation import (
    check_same_task,
    count_unfinished,
    sample_sources,
    unfinished_warning,
    unknown_fraction,
)
from dotformer.decoding.results import Translation
from dotformer.errors import ConfigError, DataError

THREE = "id1\tword\tW ER1 D\nid2\tcat\tK AE1 T\n"
WITH_HEADER = "id\tphones\tword\nid1\tW ER1 D\tword\nid2\tK AE1 T\tcat\n"


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- columns ------------------------------------------------------------------------------------------------------


def test_three_columns_without_names_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "three.tsv", THREE)
    with pytest.raises(DataError, match=r"three\.tsv:1: 3 columns .*say which hold the source and the target"):
        load_pairs(path)


def test_three_columns_by_number(tmp_path: Path) -> None:
    corpus = load_pairs(write(tmp_path / "three.tsv", THREE), CorpusOptions(source_column=1, target_column=2))
    assert corpus.pairs == [Pair("word", "W ER1 D"), Pair("cat", "K AE1 T")]
    assert corpus.report["columns"] == {"source": 1, "target": 2}
    assert "source = column 1, target = column 2" in describe_corpus(corpus, "train")


def test_three_columns_by_header_name(tmp_path: Path) -> None:
    path = write(tmp_path / "named.tsv", WITH_HEADER)
    corpus = load_pairs(path, CorpusOptions(source_column="word", target_column="phones"))  # header implied
    assert corpus.pairs == [Pair("word", "W ER1 D"), Pair("cat", "K AE1 T")]
    assert corpus.report["read"] == 2  # the header row is not a pair
    line = describe_corpus(corpus, "train")
    assert "source = column 2 'word', target = column 1 'phones'" in line, line
    with pytest.raises(DataError, match=r"named\.tsv:1: the header has no column 'graphemes' .*'phones', 'word'"):
        load_pairs(path, CorpusOptions(source_column="graphemes", target_column="phones"))


def test_header_source_target_names_are_found(tmp_path: Path) -> None:
    path = write(tmp_path / "h.tsv", "id\tTarget\tsource\n1\tone\tuno\n")
    corpus = load_pairs(path, CorpusOptions(header=True))
    assert corpus.pairs == [Pair("uno", "one")]
    # without the header flag the same 3-column file is refused
    with pytest.raises(DataError, match="3 columns"):
        load_pairs(path)


def test_one_named_side_of_two_columns_gives_the_other(tmp_path: Path) -> None:
    path = write(tmp_path / "two.tsv", "one\tuno\ntwo\tdos\n")
    assert load_pairs(path, CorpusOptions(source_column=1)).pairs == [Pair("uno", "one"), Pair("dos", "two")]


def test_a_column_past_the_last_is_named(tmp_path: Path) -> None:
    path = write(tmp_path / "two.tsv", "one\tuno\n")
    with pytest.raises(DataError, match=r"two\.tsv:1: 2 column\(s\) .* the target is read from column 5"):
        load_pairs(path, CorpusOptions(source_column=0, target_column=5))


def test_named_columns_need_a_header() -> None:
    with pytest.raises(ConfigError, match="header"):
        CorpusOptions(source_column="word", target_column=1, header=False)


def test_parse_delimiter_and_column() -> None:
    assert parse_delimiter("tab") == parse_delimiter("\\t") == parse_delimiter("\t") == "\t"
    assert parse_delimiter("comma") == "," and parse_delimiter("|") == "|"
    with pytest.raises(ConfigError, match="one character"):
        parse_delimiter("ab")
    assert parse_column("2") == 2 and parse_column("word") == "word"


# --- the data line: every dropped pair counted -------------------------------------------------------------------


def test_data_line_counts_every_drop(tmp_path: Path) -> None:
    path = write(tmp_path / "d.tsv", "uno\tone\n\n   \t \ndos\t\n\tthree\ncuatro\tfour\n")
    corpus = load_pairs(path)
    line = describe_corpus(corpus, "train")
    assert corpus.report["read"] == 6 and len(corpus.pairs) == 2
    assert "6 rows read, 2 pairs kept, 4 dropped (2 blank_line, 1 empty_source, 1 empty_target)" in line, line


# --- g2p files: a word's pronunciations stay together --------------------------------------------------------------


def test_g2p_file_groups_a_words_pronunciations(tmp_path: Path) -> None:
    rows = [(f"w{i}", f"P{j} Q{i}") for i in range(40) for j in range(1 + i % 3)]
    path = write(tmp_path / "g2p.tsv", "".join(f"{s}\t{t}\n" for s, t in rows))
    corpus = load_pairs(path, CorpusOptions(task="g2p"))
    assert corpus.task == "g2p" and corpus.groups == [s for s, _ in rows]
    config = DataConfig(dataset=str(path), task="g2p", valid_fraction=0.2, test_fraction=0.2)
    splits = read_run_data(config, seed=3).splits
    words = [{pair.source for pair in getattr(splits, name)} for name in ("train", "valid", "test")]
    assert not (words[0] & words[1] or words[0] & words[2] or words[1] & words[2])
    assert load_pairs(path).groups is None  # translation files have no groups


# --- given valid / test files --------------------------------------------------------------------------------------


def _pairs_file(path: Path, n: int, start: int = 0) -> str:
    return write(path, "".join(f"s{i}\tt{i}\n" for i in range(start, start + n)))


def test_given_files_are_the_splits(tmp_path: Path) -> None:
    train = _pairs_file(tmp_path / "train.tsv", 30)
    valid = _pairs_file(tmp_path / "valid.tsv", 5, 100)
    test = _pairs_file(tmp_path / "test.tsv", 7, 200)
    data = read_run_data(DataConfig(dataset=train, valid=valid, test=test, limit=10), seed=1)
    assert data.splits.train == load_pairs(train).pairs[:10]  # limit cuts the training file only
    assert data.splits.valid == load_pairs(valid).pairs and data.splits.test == load_pairs(test).pairs
    assert data.splits.info["given"] == {"train": train, "valid": valid, "test": test}
    assert [line.split()[0] for line in data.lines] == ["train", "valid", "test"]


def test_valid_without_test_has_no_test_split(tmp_path: Path) -> None:
    train, valid = _pairs_file(tmp_path / "train.tsv", 30), _pairs_file(tmp_path / "valid.tsv", 5, 100)
    data = read_run_data(DataConfig(dataset=train, valid=valid), seed=1)
    assert data.splits.test == [] and len(data.splits.train) == 30
    assert any(line.startswith("test: none") and "dotformer evaluate" in line for line in data.lines)


def test_test_without_valid_draws_valid_from_train(tmp_path: Path) -> None:
    train, test = _pairs_file(tmp_path / "train.tsv", 40), _pairs_file(tmp_path / "test.tsv", 5, 100)
    data = read_run_data(DataConfig(dataset=train, test=test, valid_fraction=0.25), seed=1)
    assert len(data.splits.valid) == 10 and len(data.splits.train) == 30
    assert sorted(data.splits.train + data.splits.valid) == sorted(load_pairs(train).pairs)
    assert data.splits.test == load_pairs(test).pairs


def test_test_books_beside_given_files_name_the_books_and_the_way_out(tmp_path: Path) -> None:
    train, valid = _pairs_file(tmp_path / "train.tsv", 30), _pairs_file(tmp_path / "valid.tsv", 5, 100)
    with pytest.raises(ConfigError, match=r"test_books \(Ruth,Jude\) .*\(--test-books '' clears"):
        read_run_data(DataConfig(dataset=train, valid=valid, test_books=("Ruth", "Jude")), seed=1)
    assert read_run_data(DataConfig(dataset=train, valid=valid, test_books=()), seed=1).splits.test == []


def test_a_task_that_contradicts_a_named_corpus() -> None:
    with pytest.raises(ConfigError, match="cmudict is a g2p corpus"):
        read_run_data(DataConfig(dataset="cmudict", task="translation"), seed=1)


# --- DataConfig: every reader option ---------------------------------------------------------------------------------


def test_data_config_maps_onto_the_reader() -> None:
    data = DataConfig(
        dataset="hf:wmt14",
        hf_config="de-en",
        source_field="de",
        target_field="en",
        hf_split="train[:100]",
        delimiter="semicolon",
        source_column="2",
        synthetic_symbols=30,
        limit=5,
    )
    assert data.delimiter == ";"
    train, valid, test = (data.corpus_options(role) for role in ("train", "valid", "test"))
    assert (train.hf_split, valid.hf_split, test.hf_split) == ("train[:100]", "validation", "test")
    assert train.limit == 5 and valid.limit is None and test.limit is None
    assert train.hf_config == "de-en" and train.source_field == "de" and train.target_field == "en"
    assert train.vocab == 30 and train.delimiter == ";"
    # a column given as text in TOML stays a name; as a number, a number
    assert train.source_column == "2" and DataConfig(source_column=2).corpus_options().source_column == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(synthetic_symbols=300), "DataConfig.synthetic_symbols must be in"),
        (dict(delimiter="ab"), "DataConfig.delimiter must be one character"),
        (dict(source_column=1, target_column=1), "two different columns"),
        (dict(task="summarise"), "DataConfig.task must be one of g2p, translation, exact"),
        (dict(src_tokenizer="bpe", src_tokenizer_file="t.json"), "not both"),
        (dict(valid=""), "DataConfig.valid must be a non-empty string"),
    ],
)
def test_data_config_errors_name_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DataConfig(**fields)


def test_toml_train_key_is_the_dataset() -> None:
    assert data_table({"train": "a.tsv", "valid": "b.tsv"}, "x.toml") == {"dataset": "a.tsv", "valid": "b.tsv"}
    with pytest.raises(ConfigError, match="not both"):
        data_table({"train": "a.tsv", "dataset": "b.tsv"}, "x.toml")


def test_data_config_round_trips_through_json() -> None:
    data = DataConfig(dataset="a.tsv", valid="b.tsv", hf_data_files=("x.jsonl",), source_column="word")
    assert DataConfig.from_dict(json.loads(json.dumps(data.to_dict()))) == data


def test_exact_task_defaults_to_characters() -> None:
    data = DataConfig(dataset="a.tsv", task="exact").resolved("exact")
    assert (data.src_tokenizer, data.tgt_tokenizer, data.shared_vocab) == ("char", "char", False)


# --- existing tokenizers ---------------------------------------------------------------------------------------------

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "el gato se sentó", "un perro corrió"] * 20


def _sentencepiece(path: Path, **ids: int) -> str:
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS), model_writer=model, vocab_size=25, minloglevel=2, **ids
    )
    path.write_bytes(model.getvalue())
    return str(path)


def _hf_word_level(path: Path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.train_from_iterator(TEXTS, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    hf.enable_truncation(2)  # switched off when read: nothing is cut
    hf.save(str(path))
    return str(path)


@pytest.mark.parametrize("layout", ["default ids", "dotformer ids"])
def test_sentencepiece_model_file(tmp_path: Path, layout: str) -> None:
    import sentencepiece

    ids = dict(pad_id=0, bos_id=1, eos_id=2, unk_id=3) if layout == "dotformer ids" else {}
    path = _sentencepiece(tmp_path / "sp.model", **ids)
    from dotformer.data.tokenize.tokenizer_files import read_tokenizer_file

    tokenizer = read_tokenizer_file(path)
    reference = sentencepiece.SentencePieceProcessor(model_file=path)
    offset = 0 if ids else 4
    assert tokenizer.kind == "sentencepiece" and tokenizer.offset == offset
    assert tokenizer.vocab_size == reference.get_piece_size() + offset
    text = "the cat ran in the park"
    expected = [i + offset for i in reference.encode(text)]
    assert tokenizer.encode(text) == expected and tokenizer.decode(expected) == reference.decode(reference.encode(text))
    assert UNK_ID in tokenizer.encode("zebra")  # 'z', 'b' are not in the model: its unknown is our UNK
    assert tokenizer.id_to_token(expected[1]) == reference.id_to_piece(expected[1] - offset)
    # saved as dotformer's one JSON file and read back without the .model
    saved = tokenizer.save(tmp_path / "tokenizer_src.json")
    Path(path).unlink()
    again = load_tokenizer(saved)
    assert again.encode(text) == expected and again.vocab_size == tokenizer.vocab_size


def test_hf_tokenizer_json_file(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    from dotformer.data.tokenize.tokenizer_files import read_tokenizer_file

    path = _hf_word_level(tmp_path / "tokenizer.json")
    reference = Tokenizer.from_file(path)
    reference.no_truncation()
    tokenizer = read_tokenizer_file(path)
    text = "the cat sat on the mat"
    expected = [i + 4 for i in reference.encode(text).ids]
    assert tokenizer.kind == "hf" and tokenizer.offset == 4 and len(expected) == 6  # no truncation
    assert tokenizer.encode(text) == expected and tokenizer.decode(expected) == text
    assert tokenizer.encode("the zebra") == [expected[0], UNK_ID]
    assert tokenizer.vocab_size == reference.get_vocab_size() + 4
    assert tokenizer.decode([0, 1, *expected[:2], 2]) == "the cat"  # our specials are skipped
    data = json.loads(json.dumps(tokenizer.to_dict()))
    assert tokenizer_from_dict(data).encode(text) == expected


def test_tokenizer_files_in_a_run(tmp_path: Path) -> None:
    sp, hf = _sentencepiece(tmp_path / "sp.model"), _hf_word_level(tmp_path / "tokenizer.json")
    train = [Pair(t, t) for t in TEXTS]
    data = DataConfig(dataset="x.tsv", src_tokenizer_file=sp, tgt_tokenizer_file=hf).resolved("translation")
    assert data.src_tokenizer is None and data.tgt_tokenizer is None and data.shared_vocab is False
    pair = make_tokenizers(data, train)
    assert (pair.src.kind, pair.tgt.kind) == ("sentencepiece", "hf")
    same = DataConfig(dataset="x.tsv", src_tokenizer_file=hf, tgt_tokenizer_file=hf).resolved("g2p")
    shared = make_tokenizers(same, train)
    assert same.shared_vocab and shared.src is shared.tgt
    one_side = DataConfig(dataset="x.tsv", tgt_tokenizer_file=hf).resolved("g2p")
    mixed = make_tokenizers(one_side, train)
    assert mixed.src.kind == "char" and mixed.tgt.kind == "hf"


def test_a_bad_tokenizer_file_is_one_error(tmp_path: Path) -> None:
    from dotformer.data.tokenize.tokenizer_files import read_tokenizer_file

    with pytest.raises(DataError, match=r"x\.json: a JSON file, but not"):
        read_tokenizer_file(write(tmp_path / "x.json", '{"a": 1}'))
    with pytest.raises(DataError, match=r"vocab\.txt: a text file, not a tokenizer \(a tokenizer file is a Hugging"):
        read_tokenizer_file(write(tmp_path / "vocab.txt", "the\nof\nand\n"))  # with or without sentencepiece
    pytest.importorskip("sentencepiece")
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"\n\x00not a model")
    with pytest.raises(DataError, match=r"junk\.model: not a sentencepiece model") as caught:
        read_tokenizer_file(junk)
    assert "INTERNAL" not in str(caught.value) and ".cc" not in str(caught.value)  # no C++ source lines


# --- evaluation helpers ----------------------------------------------------------------------------------------------


def test_sample_sources_is_seeded_and_keeps_references() -> None:
    pairs = [Pair(f"w{i:03d}", f"P{j}") for i in range(100) for j in range(1 + i % 2)]
    sample = sample_sources(pairs, 10, seed=5)
    sources = {p.source for p in sample}
    assert len(sources) == 10 and sample == sample_sources(pairs, 10, seed=5)
    assert sources == set(random.Random(5).sample(list(dict.fromkeys(p.source for p in pairs)), 10))
    assert sample == [p for p in pairs if p.source in sources]  # every reference, in file order
    assert sources != {p.source for p in pairs[:15]}  # not the head
    assert sample_sources(pairs, 10, seed=6) != sample
    assert sample_sources(pairs, 1000, seed=5) == pairs and sample_sources(pairs, None) == pairs


def test_unfinished_outputs_are_counted() -> None:
    done = Translation("a", [5], -1.0, [-0.5, -0.5], True)  # EOS scored: finished
    cut = Translation("b b", [6, 6], -2.0, [-1.0, -1.0], False)  # no EOS: cut at the maximum length
    assert count_unfinished([[done], [cut], [cut, done], []]) == 2
    assert unfinished_warning(0, 4, DecodeConfig()) is None
    warning = unfinished_warning(2, 4, DecodeConfig(max_len_a=1.5, max_len_b=7))
    assert warning.startswith("2 of 4 outputs (50.0%) were cut") and "1.5 * source length + 7 tokens" in warning


def test_task_checks() -> None:
    check_same_task("synthetic", "exact", "t.tsv", "ck")  # copy/reverse and exact are scored alike
    with pytest.raises(DataError, match=r"t\.tsv is translation data, but the checkpoint ck was trained for g2p"):
        check_same_task("g2p", "translation", "t.tsv", "ck")
    with pytest.raises(DataError, match=r"with a translation checkpoint, or leave --task out \(a file is read as"):
        check_same_task("g2p", "translation", "t.tsv", "ck", asked=True)  # --task translation on a g2p checkpoint
    with pytest.raises(DataError, match=r"cmudict is g2p data, .* a g2p checkpoint, or give --data a file of exact"):
        check_same_task("exact", "g2p", "cmudict", "ck")  # a named corpus has its own task
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    phones = train_tokenizer("symbol", ["K AE1 T", "D AO1 G"])
    assert unknown_fraction(phones, ["K AE1 T"]) == 0.0
    assert unknown_fraction(phones, ["the cat", "K"]) == pytest.approx(2 / 3)
