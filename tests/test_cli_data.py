"""Your own data from the outside: ``dotformer train --data --valid --test`` and ``dotformer evaluate --data`` in
subprocesses on real TSV files, metrics recomputed from the ``--hyps`` file, and bad input that ends in one line."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Cli

LETTERS = {"a": "AE1", "b": "B", "c": "K", "d": "D", "e": "EH1", "g": "G", "i": "IH1", "k": "K", "o": "AA1", "t": "T"}


def one_error_line(result: subprocess.CompletedProcess[str], command: str) -> str:
    """The single stderr line of a refused command (exit 2, no traceback)."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"dotformer {command}: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


def g2p_rows(words: list[str], rng: random.Random) -> list[tuple[str, str]]:
    """Made-up pronunciations: one phone per letter, and a second pronunciation for a third of the words."""
    rows = []
    for word in words:
        phones = [LETTERS[letter] for letter in word]
        rows.append((word, " ".join(phones)))
        if rng.random() < 0.33:
            rows.append((word, " ".join([*phones[:-1], "AH0"])))
    return rows


def write_tsv(path: Path, rows: list[tuple[str, ...]]) -> Path:
    path.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("own_data")
    rng = random.Random(0)
    words = sorted({"".join(rng.choice(list(LETTERS)) for _ in range(rng.randint(2, 5))) for _ in range(700)})
    rng.shuffle(words)
    return {
        "root": root,
        "train": write_tsv(root / "train.tsv", g2p_rows(words[:450], rng)),
        "valid": write_tsv(root / "valid.tsv", g2p_rows(words[450:500], rng)),
        "test": write_tsv(root / "test.tsv", g2p_rows(words[500:550], rng)),
        "other_test": write_tsv(root / "other_test.tsv", g2p_rows(words[550:640], rng)),
    }


@pytest.fixture(scope="module")
def run(files: dict[str, Path], cli: Cli) -> Iterator[Path]:
    out = files["root"] / "run"
    result = cli(
        "train", "--data", str(files["train"]), "--valid", str(files["valid"]), "--test", str(files["test"]),
        "--task", "g2p", "--preset", "tiny", "--max-steps", "80", "--max-tokens", "600", "--lr-schedule", "constant",
        "--lr-peak", "3e-3", "--warmup", "10", "--eval-every", "0", "--device", "cpu", "--threads", "1",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out.joinpath("train.stderr").write_text(result.stderr, encoding="utf-8")
    yield out


def test_given_files_are_the_saved_split(files: dict[str, Path], run: Path) -> None:
    from dotformer.runs.run_data import open_run_data

    for name in ("valid", "test"):
        assert (run / "data" / f"{name}.tsv").read_bytes() == files[name].read_bytes(), name
    prepared = open_run_data(run)
    trained = "".join(f"{source}\t{target}\n" for source, target in prepared.training_pairs())  # type: ignore[union-attr]
    assert trained == files["train"].read_text()
    record = json.loads((run / "run.json").read_text())
    assert record["task"] == "g2p" and record["data"]["valid"] == str(files["valid"])
    assert (record["data"]["src_tokenizer"], record["data"]["tgt_tokenizer"]) == ("char", "symbol")
    stderr = (run / "train.stderr").read_text()
    train_rows = len(files["train"].read_text().splitlines())
    assert (
        f"data: train {files['train']} (tsv, source = column 0, target = column 1), task g2p: {train_rows:,} rows"
        in stderr
    )
    assert f"data: test {files['test']}" in stderr and "none dropped" in stderr


def levenshtein(a: list[str], b: list[str]) -> int:
    """Plain dynamic-programming edit distance (insertions, deletions, substitutions cost 1)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def error_rates(pairs: list[tuple[str, str]], hyps: list[str]) -> tuple[float, float]:
    """WER and PER recomputed from a hypothesis per pair: a word is right when it equals one of its pronunciations;
    PER sums the distance to the closest (first on ties) reference over the sum of those references' lengths."""
    by_word: dict[str, list[str]] = {}
    hyp_of: dict[str, str] = {}
    for (word, ref), hyp in zip(pairs, hyps, strict=True):
        by_word.setdefault(word, []).append(ref)
        assert hyp_of.setdefault(word, hyp) == hyp  # one output per word, repeated on each of its lines
    wrong = distance = length = 0
    for word, refs in by_word.items():
        scored = [(levenshtein(hyp_of[word].split(), ref.split()), len(ref.split())) for ref in refs]
        best = min(scored, key=lambda item: item[0])
        wrong += best[0] > 0
        distance += best[0]
        length += best[1]
    return 100 * wrong / len(by_word), 100 * distance / length


def test_evaluate_a_separate_test_file_against_an_independent_computation(
    files: dict[str, Path], run: Path, cli: Cli
) -> None:
    out = files["root"] / "eval"
    result = cli(
        "evaluate", "--checkpoint", str(run), "--data", str(files["other_test"]), "--beam", "2",
        "--hyps", str(out / "test.hyp"), "--json", str(out / "metrics.json"), "--device", "cpu",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    pairs = [tuple(line.split("\t")) for line in files["other_test"].read_text().splitlines()]
    hyps = (out / "test.hyp").read_text(encoding="utf-8").split("\n")
    assert hyps[-1] == "" and len(hyps) - 1 == len(pairs)  # one line per pair, in the file's order
    metrics = json.loads((out / "metrics.json").read_text())
    wer, per = error_rates(pairs, hyps[:-1])
    assert metrics["metrics"]["wer"] == pytest.approx(wer) and metrics["metrics"]["per"] == pytest.approx(per)
    assert metrics["num_pairs"] == len(pairs) and metrics["num_sources"] == len({p[0] for p in pairs})
    assert metrics["data"] == str(files["other_test"]) and metrics["unfinished"] >= 0
    assert wer < 90 and per < 50  # 80 steps learn much of a one-phone-per-letter task (about 47% WER)
    # the same checkpoint copied out of its run directory gives the same numbers
    elsewhere = files["root"] / "copied" / "model"
    shutil.copytree(run / "best", elsewhere)
    again = cli(
        "evaluate", "--checkpoint", str(elsewhere), "--data", str(files["other_test"]), "--beam", "2",
        "--json", str(out / "copied.json"), "--device", "cpu",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "copied.json").read_text())["metrics"] == metrics["metrics"]
    # without --data, a checkpoint out of its run says what to do, in one line
    err = one_error_line(cli("evaluate", "--checkpoint", str(elsewhere), "--device", "cpu"), "evaluate")
    assert "--data FILE" in err


def test_limit_is_a_seeded_sample_and_cut_outputs_are_counted(files: dict[str, Path], run: Path, cli: Cli) -> None:
    from dotformer.checkpoint import load_checkpoint
    from dotformer.decoding import DecodeConfig
    from dotformer.decoding.evaluation import sample_sources
    from dotformer.decoding.translate import translate

    out = files["root"] / "limited"
    args = ["evaluate", "--checkpoint", str(run), "--data", str(files["other_test"]), "--strategy", "greedy",
            "--limit", "12", "--seed", "4", "--max-len-a", "0", "--max-len-b", "3", "--device", "cpu"]  # fmt: skip
    result = cli(*args, "--hyps", str(out / "h.txt"), "--json", str(out / "m.json"))
    assert result.returncode == 0, result.stderr
    metrics = json.loads((out / "m.json").read_text())
    pairs = [tuple(line.split("\t")) for line in files["other_test"].read_text().splitlines()]
    from dotformer.data.read.types import Pair

    sample = sample_sources([Pair(*p) for p in pairs], 12, seed=4)
    assert metrics["num_sources"] == 12 and metrics["num_pairs"] == len(sample) and metrics["seed"] == 4
    hyps = (out / "h.txt").read_text().splitlines()
    assert len(hyps) == len(sample) and all(len(h.split()) <= 3 for h in hyps)
    sources = list(dict.fromkeys(p.source for p in sample))
    loaded = load_checkpoint(run)
    outputs = translate(loaded, sources, DecodeConfig(strategy="greedy", max_len_a=0.0, max_len_b=3))
    cut = sum(not hyps_[0].finished for hyps_ in outputs)
    assert metrics["unfinished"] == cut
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == (1 if cut else 0)
    if cut:
        assert warnings[0].startswith(f"dotformer evaluate: warning: {cut} of 12 outputs")


def in_process_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The single stderr line of a refused command run in this process (cheaper than a subprocess)."""
    from dotformer.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dotformer {argv[0]}: error: "), err
    return err


def test_task_mismatch_is_one_line(
    files: dict[str, Path], run: Path, capsys: pytest.CaptureFixture[str], cli: Cli
) -> None:
    args = ["evaluate", "--checkpoint", str(run), "--data", str(files["other_test"]), "--device", "cpu"]
    err = one_error_line(cli(*args, "--task", "translation"), "evaluate")
    assert "translation data" in err and "trained for g2p" in err
    sentences = write_tsv(files["root"] / "sentences.tsv", [("el gato", "the cat sat"), ("un perro", "a dog ran")])
    args[4] = str(sentences)
    err = in_process_error(capsys, args)
    assert "unknown to the checkpoint's target vocabulary" in err and "sentences.tsv" in err


def test_bad_files_are_one_line(files: dict[str, Path], capsys: pytest.CaptureFixture[str], cli: Cli) -> None:
    root = files["root"]
    three = write_tsv(root / "three.tsv", [("id1", "cab", "K AE1 B"), ("id2", "dog", "D AA1 G")])
    base = ["train", "--preset", "tiny", "--max-steps", "1", "--device", "cpu", "--no-progress"]
    err = one_error_line(cli(*base, "--data", str(three), "--out", str(root / "bad1")), "train")
    assert "three.tsv:1: 3 columns" in err and "--source-column" in err
    err = in_process_error(
        capsys, [*base, "--data", str(files["train"]), "--target-column", "4", "--out", str(root / "bad2")]
    )
    assert "train.tsv:1" in err and "column 4" in err
    err = in_process_error(
        capsys,
        [*base, "--data", str(three), "--source-column", "word", "--target-column", "2", "--out", str(root / "bad3")],
    )
    assert "the header has no column 'word'" in err
    for name in ("bad1", "bad2", "bad3"):
        assert not (root / name / "run.json").exists()


def test_toml_named_columns_and_dropped_pairs_in_the_data_line(files: dict[str, Path], cli: Cli) -> None:
    root = files["root"]
    rows = [("id", "phones", "word"), ("1", "K AE1 B", "cab"), ("2", "", "dog"), ("", "", ""), ("3", "T AA1", "to")]
    data = write_tsv(root / "named.tsv", rows)
    config = root / "own.toml"
    config.write_text(
        f'[data]\ntrain = "{data}"\nvalid = "{data}"\ntask = "g2p"\nsource_column = "word"\n'
        f'target_column = "phones"\n\n[model]\npreset = "tiny"\n\n[train]\nmax_steps = 1\ndevice = "cpu"\n',
        encoding="utf-8",
    )
    result = cli("train", "--config", str(config), "--out", str(root / "toml_run"))
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stderr.splitlines() if line.startswith("data: train"))
    assert "source = column 2 'word', target = column 1 'phones'" in line, line
    assert "4 rows read, 2 pairs kept, 2 dropped (1 blank_line, 1 empty_target)" in line, line
    from dotformer.runs.run_data import open_run_data

    trained = list(open_run_data(root / "toml_run").training_pairs())  # type: ignore[union-attr]
    assert trained == [("cab", "K AE1 B"), ("to", "T AA1")]
    assert "test: none" in result.stderr


def test_tokenizer_files_travel_with_the_checkpoint(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """--src/--tgt-tokenizer-file: a sentencepiece .model and a tokenizer.json trained here, saved with the
    checkpoint, read back by evaluate after the original files are gone."""
    spm = pytest.importorskip("sentencepiece")
    import io

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from dotformer.checkpoint import load_checkpoint
    from dotformer.cli import main

    root = files["root"] / "tokenizer_files"
    root.mkdir()
    rows = [tuple(line.split("\t")) for line in files["train"].read_text().splitlines()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([s for s, _ in rows]), model_writer=model, vocab_size=20, minloglevel=2
    )
    (root / "src.model").write_bytes(model.getvalue())
    phones = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    phones.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    phones.train_from_iterator([t for _, t in rows], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    phones.save(str(root / "tgt.json"))
    run = root / "run"
    argv = ["train", "--data", str(files["train"]), "--valid", str(files["valid"]), "--task", "g2p",
            "--preset", "tiny", "--max-steps", "2", "--device", "cpu", "--no-progress", "--out", str(run),
            "--src-tokenizer-file", str(root / "src.model"),
            "--tgt-tokenizer-file", str(root / "tgt.json")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    expected_src = spm.SentencePieceProcessor(model_file=str(root / "src.model")).encode("cab")
    expected_tgt = phones.encode("K AE1 B").ids
    (root / "src.model").unlink()
    (root / "tgt.json").unlink()
    loaded = load_checkpoint(run)
    assert (loaded.src_tokenizer.kind, loaded.tgt_tokenizer.kind) == ("sentencepiece", "hf")
    assert loaded.src_tokenizer.encode("cab") == [i + 4 for i in expected_src]  # default ids: shifted by 4
    assert loaded.tgt_tokenizer.encode("K AE1 B") == [i + 4 for i in expected_tgt]
    assert loaded.config.src_vocab_size == 20 + 4 and loaded.config.tgt_vocab_size == phones.get_vocab_size() + 4
    record = json.loads((run / "run.json").read_text())
    assert record["data"]["src_tokenizer_file"] == str(root / "src.model") and record["data"]["src_tokenizer"] is None
    status = main(["evaluate", "--checkpoint", str(run), "--data", str(files["test"]), "--strategy", "greedy",
                   "--max-len-b", "5", "--device", "cpu"])  # fmt: skip
    assert status == 0 and "WER" in capsys.readouterr().out


def test_hf_reader_options_from_the_config(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from dotformer.data.config import DataConfig
    from dotformer.data.prepared.pair_kind import read_run_data

    data = tmp_path / "pairs.jsonl"
    words = [("uno", "one"), ("dos", "two"), ("tres", "three"), ("cuatro", "four"), ("cinco", "five")]
    data.write_text("".join(json.dumps({"translation": {"es": s, "en": t}}) + "\n" for s, t in words), "utf-8")
    config = DataConfig(
        dataset=f"hf:{data}", valid=f"hf:{data}", source_field="es", target_field="en", hf_split="train[:2]",
        hf_valid_split="train[2:]", hf_cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    run_data = read_run_data(config, seed=1)
    assert [tuple(p) for p in run_data.splits.train] == words[:2]
    assert [tuple(p) for p in run_data.splits.valid] == words[2:]
    assert "split train[:2]" in run_data.lines[0] and "split train[2:]" in run_data.lines[1]
