"""``dotformer train --init-from CKPT`` on data the checkpoint's vocabulary does not know: one line, exit 2, nothing
written; data it knows fine-tunes as before."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from dotformer.cli import main
from dotformer.data.read.types import Pair
from dotformer.data.tokenize.tokenizers import CharTokenizer, SymbolTokenizer
from dotformer.errors import CheckpointError
from dotformer.runs.finetune import check_known_symbols, unknown_symbols

LATIN = "abcdefgh"
CYRILLIC = "абвгдежз"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def g2p_file(path: Path, letters: str, phone_case: str, seed: int, count: int = 60) -> Path:
    """Words of ``letters`` and one phone per letter (``P0`` for "a", or ``p0`` with phone_case "lower"); the words of
    an even seed have 2-4 letters, of an odd one 5-7 (a training and a validation file share none)."""
    rng = random.Random(seed)
    rows = []
    shortest = 2 if seed % 2 == 0 else 5
    for _ in range(count):
        word = "".join(rng.choice(letters) for _ in range(rng.randint(shortest, shortest + 2)))
        phones = " ".join(str(LATIN.index(c) if c in LATIN else letters.index(c)) for c in word)
        phones = " ".join(f"P{p}" if phone_case == "upper" else f"p{p}" for p in phones.split())
        rows.append(f"{word}\t{phones}\n")
    path.write_text("".join(rows), encoding="utf-8")
    return path


def train_args(data: Path, valid: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--data", str(data), "--valid", str(valid), "--task", "g2p", "--preset", "tiny",
            "--max-steps", "2", "--warmup", "1", "--max-tokens", "128", "--device", "cpu", "--no-progress",
            "--out", str(out), *extra]  # fmt: skip


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("init_from")
    train, valid = g2p_file(root / "train.tsv", LATIN, "upper", 0), g2p_file(root / "valid.tsv", LATIN, "upper", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(train_args(train, valid, root / "base")) == 0
    finally:
        torch.set_num_threads(threads)
    return root / "base"


def test_data_in_another_alphabet_is_one_error_line_and_nothing_is_written(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    train = g2p_file(tmp_path / "mine.tsv", CYRILLIC, "lower", 2)
    valid = g2p_file(tmp_path / "mine_valid.tsv", CYRILLIC, "lower", 3)
    source_symbols = sum(len(line.split("\t")[0]) for f in (train, valid) for line in f.read_text().splitlines())
    target_symbols = sum(
        len(line.split("\t")[1].split()) for f in (train, valid) for line in f.read_text().splitlines()
    )
    out = tmp_path / "tuned"
    assert main(train_args(train, valid, out, "--init-from", str(base))) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    err = captured.err
    assert err.startswith(f"dotformer train: error: --init-from {base / 'best'}: "), err
    assert f"{source_symbols:,} source symbols (e.g. " in err and f"{target_symbols:,} target symbols (e.g. " in err
    assert "train without --init-from" in err and "<unk>" in err
    assert not (out / "run.json").exists() and not (out / "data").exists()


def test_only_the_unknown_side_is_counted(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    train = g2p_file(tmp_path / "mine.tsv", LATIN, "lower", 2)  # known letters, unknown (lower-case) phones
    valid = g2p_file(tmp_path / "mine_valid.tsv", LATIN, "upper", 3)
    assert main(train_args(train, valid, tmp_path / "tuned", "--init-from", str(base))) == 2
    err = capsys.readouterr().err
    assert "hold 0 source symbols and " in err and "target symbols (e.g. 'p" in err, err


def test_known_data_fine_tunes(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train = g2p_file(tmp_path / "mine.tsv", LATIN, "upper", 4)
    valid = g2p_file(tmp_path / "mine_valid.tsv", LATIN, "upper", 5)
    assert main(train_args(train, valid, tmp_path / "tuned", "--init-from", str(base))) == 0, capsys.readouterr().err
    assert "warning" not in capsys.readouterr().err


def test_overwrite_keeps_the_old_run_when_the_new_data_is_refused(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    known = g2p_file(tmp_path / "known.tsv", LATIN, "upper", 6)
    known_valid = g2p_file(tmp_path / "known_valid.tsv", LATIN, "upper", 7)
    out = tmp_path / "tuned"
    assert main(train_args(known, known_valid, out, "--init-from", str(base))) == 0
    before = (out / "run.json").read_bytes()
    capsys.readouterr()
    foreign = g2p_file(tmp_path / "foreign.tsv", CYRILLIC, "upper", 8)
    assert main(train_args(foreign, known_valid, out, "--init-from", str(base), "--overwrite")) == 2
    assert "does not know" in capsys.readouterr().err
    assert (out / "run.json").read_bytes() == before and (out / "last").is_dir()


def test_unknown_symbols_are_counted_and_the_most_frequent_named() -> None:
    chars = CharTokenizer(["<pad>", "<s>", "</s>", "<unk>", "a", "b"])
    assert unknown_symbols(["ab", "ba"], chars) == (0, [])
    assert unknown_symbols(["axyy", "by"], chars) == (4, ["y", "x"])
    phones = SymbolTokenizer(["<pad>", "<s>", "</s>", "<unk>", "A", "B"])
    assert unknown_symbols(["A <s> B C"], phones) == (2, ["<s>", "C"])  # specials are not read from text
    pairs = [Pair("ab", "A B"), Pair("ax", "A C C")]
    with pytest.raises(CheckpointError, match=r"--init-from ck: .* 1 source symbol \(e\.g\. 'x'\) and 2 target "
                       r"symbols \(e\.g\. 'C'\) that the checkpoint's vocabulary does not know"):  # fmt: skip
        check_known_symbols(pairs, chars, phones, Path("ck"))
    check_known_symbols(pairs[:1], chars, phones, Path("ck"))


# -- --extend-vocab ---------------------------------------------------------------------------------------------------


def test_extend_vocab_adds_the_new_symbols_and_fine_tunes(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dotformer import checkpoint as ckpt

    train = g2p_file(tmp_path / "mine.tsv", LATIN + "жз", "lower", 2)  # two new letters, all-new phones
    valid = g2p_file(tmp_path / "mine_valid.tsv", LATIN, "upper", 3)
    out = tmp_path / "tuned"
    assert main(train_args(train, valid, out, "--init-from", str(base), "--extend-vocab")) == 0, capsys.readouterr()
    old, new = ckpt.load_checkpoint(base / "best"), ckpt.load_checkpoint(out / "last")
    for side in ("src_tokenizer", "tgt_tokenizer"):
        before, after = getattr(old, side).vocab, getattr(new, side).vocab
        assert after[: len(before)] == before and len(after) > len(before)  # the old ids unchanged
    assert set(new.src_tokenizer.vocab) - set(old.src_tokenizer.vocab) == {"ж", "з"}
    assert {f"p{i}" for i in range(8)} <= set(new.tgt_tokenizer.vocab) - set(old.tgt_tokenizer.vocab)
    assert new.config.src_vocab_size == new.src_tokenizer.vocab_size
    assert new.config.tgt_vocab_size == new.tgt_tokenizer.vocab_size
    assert new.info["init_from"] == str(base / "best")
    assert json.loads((out / "run.json").read_text())["extend_vocab"] is True


def test_extended_weights_keep_the_checkpoints_rows_and_a_fresh_models_new_rows(base: Path) -> None:
    from dotformer import checkpoint as ckpt
    from dotformer.model import Transformer
    from dotformer.runs.finetune import extend_vocabulary, load_extended_weights, read_init_source

    source = read_init_source(base, {}, {})
    extended, added_src, added_tgt = extend_vocabulary(source, [Pair("abж", "P0 P1 Q"), Pair("з", "R Q")])
    assert (added_src, added_tgt) == (2, 2)
    assert extended.src_tokenizer.vocab[-2:] == ["ж", "з"] and extended.tgt_tokenizer.vocab[-2:] == ["Q", "R"]
    torch.manual_seed(5)
    model = Transformer(extended.model_config)
    fresh = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    load_extended_weights(model, source.path)
    saved = ckpt.load_weights(source.path / ckpt.MODEL_FILE)
    grown = 0
    for name, tensor in model.state_dict().items():
        rows = saved[name].shape[0] if saved[name].dim() else None
        if saved[name].shape == tensor.shape:
            assert torch.equal(tensor, saved[name]), name
        else:
            grown += 1
            assert torch.equal(tensor[:rows], saved[name]) and torch.equal(tensor[rows:], fresh[name][rows:]), name
    assert grown >= 3  # the source and target embeddings and the output projection


def test_extend_vocab_refuses_bpe_and_needs_init_from(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer
    from dotformer.runs.finetune import extend_vocabulary, read_init_source

    source = read_init_source(base, {}, {})
    bpe = train_tokenizer("bpe", ["abc abd", "bcd"], 300)
    with pytest.raises(CheckpointError, match=r"--extend-vocab: the source vocabulary of .* is bpe; only char and"):
        extend_vocabulary(source._replace(src_tokenizer=bpe), [Pair("ab", "P0")])
    train = g2p_file(tmp_path / "mine.tsv", LATIN, "upper", 2)
    assert main(train_args(train, train, tmp_path / "x", "--extend-vocab")) == 2
    assert capsys.readouterr().err == (
        "dotformer train: error: --extend-vocab extends the vocabulary of a checkpoint: it needs --init-from CKPT\n"
    )


def test_a_shared_vocabulary_grows_once_by_both_sides_symbols(base: Path) -> None:
    from dotformer.runs.finetune import extend_vocabulary, read_init_source

    shared = SymbolTokenizer(["<pad>", "<s>", "</s>", "<unk>", "a", "B"])
    source = read_init_source(base, {}, {})
    config = source.model_config.replace(src_vocab_size=6, tgt_vocab_size=6)
    source = source._replace(src_tokenizer=shared, tgt_tokenizer=shared, model_config=config)
    extended, added_src, added_tgt = extend_vocabulary(source, [Pair("a c", "B D D"), Pair("c", "a")])
    assert extended.src_tokenizer is extended.tgt_tokenizer and (added_src, added_tgt) == (2, 0)
    assert extended.src_tokenizer.vocab[4:] == ["a", "B", "D", "c"]  # the new ones most frequent first
    assert extended.model_config.src_vocab_size == extended.model_config.tgt_vocab_size == 8


def test_a_language_model_checkpoint_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_model
) -> None:
    from dotformer.checkpoint import save_checkpoint

    chars = CharTokenizer(["<pad>", "<s>", "</s>", "<unk>", *LATIN, " "])
    lm = save_checkpoint(tmp_path / "lm", make_model(arch="decoder-only"), chars, chars, {"task": "lm"})
    train, valid = g2p_file(tmp_path / "t.tsv", LATIN, "upper", 0), g2p_file(tmp_path / "v.tsv", LATIN, "upper", 1)
    assert main(train_args(train, valid, tmp_path / "out", "--init-from", str(lm))) == 2
    err = capsys.readouterr().err
    assert err == (
        f"dotformer train: error: {lm} is a decoder-only language model; --init-from needs an encoder-decoder "
        f"checkpoint\n"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("model_table", "flags", "expected"),
    [
        ("d_ff = 96", [], "model d_ff = 96 ({toml} [model]), the checkpoint has 256"),
        ("", ["--preset", "small"], "model d_model = 256 of preset 'small' (--preset), the checkpoint has 64"),
        ("", ["--vocab-size", "40"], "vocab_size = 40 (--vocab-size), the checkpoint's vocabulary was built with 13"),
    ],
)
def test_a_value_the_checkpoint_lacks_is_named_with_where_it_was_asked(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_model,
    model_table: str,
    flags: list[str],
    expected: str,
) -> None:
    """``train --config classify-bible-modern --init-from MLM`` said the preset has the d_ff that its config file sets:
    each value is named with its origin (the config file's table, the flag, or the preset and where it was named)."""
    from dotformer.checkpoint import save_checkpoint

    chars = CharTokenizer(["<pad>", "<s>", "</s>", "<unk>", *LATIN, " "])
    info = {"task": "mlm", "data": {"tokenizer": "char", "vocab_size": 13}}
    encoder = save_checkpoint(tmp_path / "mlm", make_model(arch="encoder-only"), chars, chars, info)
    toml = tmp_path / "classify.toml"
    toml.write_text(f'[data]\ntask = "classify"\n\n[model]\npreset = "tiny"\narch = "encoder-only"\n{model_table}\n')
    labels = tmp_path / "labels.tsv"
    labels.write_text("".join(f"{word}\t{word[0]}\n" for word in ("ab", "ba", "cd", "dc") * 10), encoding="utf-8")
    argv = ["train", "--config", str(toml), "--data", str(labels), "--init-from", str(encoder), *flags]
    assert main([*argv, "--max-steps", "1", "--no-progress", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"dotformer train: error: --init-from {encoder}: {expected.format(toml=toml)} ({encoder}/config.json); "
        f"fine-tuning keeps the checkpoint's {'tokenizer' if 'vocab' in expected else 'shapes'}\n"
    )
    assert not (tmp_path / "out").exists()
