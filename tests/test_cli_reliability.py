"""Nothing silent, nothing lost: the CLI and the Python API given bad inputs, each case with its exact reproduction."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dotformer import ModelConfig, Transformer
from dotformer.checkpoint import save_checkpoint
from dotformer.data.tokenize.tokenizer_files import train_tokenizer


def dotformer(*argv: str, stdin: object = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dotformer", *argv],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


def assert_one_error_line(result: subprocess.CompletedProcess[str], command: str, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"dotformer {command}: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model with symbol tokenizers (its outputs are arbitrary but deterministic)."""
    texts = ["a1 a2 a3", "a4 a5 a6 a7", "a8 a9"]
    src_tok, tgt_tok = train_tokenizer("symbol", texts), train_tokenizer("symbol", texts)
    torch.manual_seed(7)
    config = ModelConfig.preset("tiny", src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size)
    path = tmp_path_factory.mktemp("reliability") / "ck"
    save_checkpoint(path, Transformer(config).eval(), src_tok, tgt_tok, {"task": "synthetic"})
    return path


def test_output_over_the_file_on_standard_input_is_refused(checkpoint_dir: Path, tmp_path: Path) -> None:
    """``dotformer translate --checkpoint RUN --output words.txt < words.txt`` used to empty words.txt and exit 0."""
    words = tmp_path / "words.txt"
    words.write_text("a1 a2\na3\n", encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(words)
    for output in ("words.txt", "./sub/../words.txt", "link.txt"):
        if "sub" in output:
            (tmp_path / "sub").mkdir(exist_ok=True)
        with open(words, "rb") as stdin:
            result = dotformer(
                "translate", "--checkpoint", str(checkpoint_dir), "--output", output, stdin=stdin, cwd=tmp_path
            )
        assert_one_error_line(result, "translate", f"--output {output}", "standard input")
        assert words.read_text(encoding="utf-8") == "a1 a2\na3\n"
    # another file, or standard input from a pipe, still works
    with open(words, "rb") as stdin:
        result = dotformer(
            "translate", "--checkpoint", str(checkpoint_dir), "--output", "out.txt", stdin=stdin, cwd=tmp_path
        )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").count("\n") == 2
    with open(os.devnull, "rb") as stdin:  # a device is not a file that can be emptied
        result = dotformer("translate", "--checkpoint", str(checkpoint_dir), "--output", os.devnull, stdin=stdin)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("failure", ["safetensors", "oserror"])
def test_export_on_a_full_disk_is_one_line(
    checkpoint_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failure: str,
) -> None:
    """``export --to marian`` on a full disk ended in a raw SafetensorError traceback: one line, nothing left behind."""
    pytest.importorskip("transformers")
    import transformers.modeling_utils

    from dotformer.cli import main

    def full_disk(*args: object, **kwargs: object) -> None:
        if failure == "oserror":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "out" / "model.safetensors"))
        from safetensors import SafetensorError

        raise SafetensorError(f"Error while serializing: IoError({os.strerror(errno.ENOSPC)} (os error 28))")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
    assert main(["export", "--to", "marian", str(checkpoint_dir), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dotformer export: error: ") and "Traceback" not in err
    assert "No space left on device" in err and "model.safetensors" in err
    assert list(tmp_path.iterdir()) == []  # no OUT, no temporary directory


def test_import_reads_the_projects_own_marian_export(checkpoint_dir: Path, tmp_path: Path) -> None:
    """``dotformer import --from marian`` said "vocab.json is missing" for ``dotformer export --to marian``'s output;
    the round trip now gives back the same weights, tokenizers and translations."""
    pytest.importorskip("transformers")
    import dotformer

    exported, imported = tmp_path / "exported", tmp_path / "imported"
    assert dotformer_cli_ok("export", "--to", "marian", str(checkpoint_dir), str(exported))
    assert not (exported / "vocab.json").exists()
    assert dotformer_cli_ok("import", "--from", "marian", str(exported), str(imported))
    original, back = dotformer.load(checkpoint_dir, device="cpu"), dotformer.load(imported, device="cpu")
    assert back.model.config == original.model.config
    ours, theirs = original.model.state_dict(), back.model.state_dict()
    assert set(ours) == set(theirs)
    for name in ours:
        torch.testing.assert_close(theirs[name], ours[name], atol=0, rtol=0, msg=name)
    texts = ["a1 a2 a3", "a9 a4", "a5"]
    assert back.translate(texts, details=True) == original.translate(texts, details=True)
    assert back.src_tokenizer.encode("a1 a9") == original.src_tokenizer.encode("a1 a9")
    assert back.info["imported_from"]["format"] == "dotformer-marian-export"


def dotformer_cli_ok(*argv: str) -> bool:
    result = dotformer(*argv)
    assert result.returncode == 0, result.stderr
    return True


def test_out_under_a_regular_file_names_the_file(checkpoint_dir: Path, tmp_path: Path) -> None:
    """Export/import with OUT under a regular file said "File exists: fx/notes.txt"."""
    pytest.importorskip("transformers")
    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "notes.txt").write_text("notes\n")
    expected = "its parent fx/notes.txt is a file, not a directory"
    result = dotformer("export", "--to", "marian", str(checkpoint_dir), "fx/notes.txt/out", cwd=tmp_path)
    assert_one_error_line(result, "export", "output fx/notes.txt/out:", expected)
    result = dotformer("import", "--from", "marian", str(checkpoint_dir), "fx/notes.txt/out", cwd=tmp_path)
    assert_one_error_line(result, "import", "output fx/notes.txt/out:", expected)
    assert (tmp_path / "fx" / "notes.txt").read_text() == "notes\n"


def tiny_checkpoint(path: Path, texts: list[str], eos_bias: float | None = None, **fields: object) -> Path:
    """A random tiny model over the symbols of ``texts``; ``eos_bias`` added to EOS's logit (negative: never ends)."""
    from dotformer.data.tokenize.tokenizers import EOS_ID

    tok = train_tokenizer("symbol", texts)
    torch.manual_seed(0)
    extra = {"generator_bias": True} if eos_bias is not None else {}
    config = ModelConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, **extra, **fields)
    model = Transformer(config).eval()
    if eos_bias is not None:
        with torch.no_grad():
            model.generator.bias[EOS_ID] = eos_bias
    save_checkpoint(path, model, tok, tok, {"task": "g2p"})
    return path


def test_an_output_cut_by_a_learned_table_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An output cut at a learned positional table's 8 positions was blamed on --max-len-a/--max-len-b (whose limit,
    1 x 2 + 50 = 52 steps, it never reached)."""
    from dotformer.cli import main

    learned = tiny_checkpoint(tmp_path / "learned", ["k a t"], eos_bias=-30.0, positional="learned", max_len=8)
    # the torch engine: on this random model PAD and BOS hold much of each step's mass, which CTranslate2's beam search
    # renormalises away (tests/test_engines.py covers the engines on a fitted model)
    assert main(["translate", "--checkpoint", str(learned), "--device", "cpu", "--engine", "torch", "k"]) == 0
    out, err = capsys.readouterr()
    assert len(out.split()) == 8  # the table's 8 positions, no more
    assert err.strip() == (
        "dotformer translate: warning: 1 of 1 output(s) reached this model's learned positional table (8 positions), "
        "the most any output can have, before the model ended them and are cut (first: input 1); "
        "--max-len-a/--max-len-b cannot lengthen them"
    )
    # a cut by the flags is still blamed on the flags
    assert (
        main(
            ["translate", "--checkpoint", str(learned), "--device", "cpu", "--engine", "torch", "--max-len-b", "3", "k"]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert len(out.split()) == 5 and "(--max-len-a 1 x input length + --max-len-b 3)" in err  # 1 x 2 + 3
    assert "positional table" not in err
    # evaluate says the same
    test_file = tmp_path / "test.tsv"
    test_file.write_text("k a\tk a\nt\tt\n", encoding="utf-8")
    argv = ["evaluate", "--checkpoint", str(learned), "--device", "cpu", "--data", str(test_file), "--task", "g2p"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "dotformer evaluate: warning: 2 of 2 outputs (100.0%) were cut without an end of sentence: they reached this "
        "model's learned positional table (8 positions), the most any output can have (--max-len-a/--max-len-b "
        "cannot lengthen them)"
    )


def test_unfinished_warning_parts() -> None:
    from dotformer.decoding import DecodeConfig
    from dotformer.decoding.evaluation import count_cut_by_table, unfinished_warning
    from dotformer.decoding.results import Translation

    def cut(n: int) -> list[Translation]:  # no EOS: one log-probability per token
        return [Translation("x " * n, list(range(4, 4 + n)), -1.0, [-0.1] * n, False)]

    done = [Translation("x", [4], -1.0, [-0.1, -0.1], True)]  # one token, then EOS
    learned = ModelConfig.preset("tiny", src_vocab_size=9, tgt_vocab_size=9, positional="learned", max_len=8)
    sinusoidal = ModelConfig.preset("tiny", src_vocab_size=9, tgt_vocab_size=9, max_len=8)
    outputs = [cut(8), cut(5), done, cut(8)]
    assert count_cut_by_table(outputs, learned) == count_cut_by_table(outputs, sinusoidal) == 2  # at max_len
    line = unfinished_warning(3, 4, DecodeConfig(max_len_b=5), at_table=2, table=8)
    assert line == (
        "3 of 4 outputs (75.0%) were cut at the maximum length (1 * source length + 5 tokens) without an end of "
        "sentence; raise --max-len-a/--max-len-b to let them finish (2 of them reached this model's learned "
        "positional table (8 positions), the most any output can have: --max-len-a/--max-len-b cannot lengthen them)"
    )


def test_evaluate_shows_stress_rows_only_for_data_with_stress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``evaluate`` printed "stress kept" and "stress stripped" rows on data without stress digits."""
    from dotformer.cli import main

    plain = tiny_checkpoint(tmp_path / "plain", ["k a t d o g AE1 T"], eos_bias=5.0)
    test_file = tmp_path / "test.tsv"
    test_file.write_text("k a t\tk a t\nd o g\td o g\n", encoding="utf-8")
    json_path = tmp_path / "m.json"
    argv = ["evaluate", "--checkpoint", str(plain), "--device", "cpu", "--data", str(test_file), "--task", "g2p"]
    assert main([*argv, "--json", str(json_path)]) == 0
    out = capsys.readouterr().out
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert rows == ["metric", "WER", "PER", "perplexity", "NLL per token (nats)"]
    assert set(json.loads(json_path.read_text())["metrics"]) == {"wer", "per", "perplexity", "nll_per_token"}
    test_file.write_text("k a t\tk AE1 T\n", encoding="utf-8")
    assert main(argv) == 0
    rows = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[1:5] == ["WER, stress kept", "PER, stress kept", "WER, stress stripped", "PER, stress stripped"]


def test_a_negative_column_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--source-column -1`` was read as a header name ("the header has no column '-1'")."""
    from dotformer.cli import main

    data = tmp_path / "t.tsv"
    data.write_text("a b\tb a\nc\tc\n", encoding="utf-8")
    checkpoint = tiny_checkpoint(tmp_path / "ck", ["a b c"])
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(data), "--target-column", "-2"]) == 2
    assert capsys.readouterr().err == (
        "dotformer evaluate: error: --target-column -2: a column is a number counting from 0 (the first column is 0) "
        "or a header name; negative numbers do not count from the end\n"
    )
    argv = ["train", "--data", str(data), "--source-column", "-1", "--max-steps", "1", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --source-column must be a column number counting from 0" in err
    assert "-1" in err
    assert "header" not in err.split("got")[-1]  # not read as the name of a header column
    assert not (tmp_path / "r").exists()


def test_the_schedule_of_g2p_draws_its_cooldown() -> None:
    """``plot schedule --config g2p`` drew no cooldown though the config sets lr_cooldown = 0.25 (its budget is in
    minutes, so the cooldown is drawn over the last quarter of the steps drawn: 10 x warmup = 2,000)."""
    from dotformer.plots import config_curve

    curve = config_curve("g2p")
    assert curve.steps[-1] == 2000
    assert "cooldown 0.25 (drawn as if the budget ended at step 2,000)" in curve.label
    peak, warmup = 2e-3, 200
    assert curve.lrs[1499] == pytest.approx(peak * (warmup / 1500) ** 0.5)  # step 1,500: 501/2000 left, no cooldown
    assert curve.lrs[1749] == pytest.approx(peak * (warmup / 1750) ** 0.5 * (251 / 2000) / 0.25)  # halfway down
    assert curve.lrs[-1] == pytest.approx(peak * (warmup / 2000) ** 0.5 * (1 / 2000) / 0.25)  # nearly 0
    longer = config_curve("g2p", steps=4000)
    assert longer.lrs[2999] > 0.9 * peak * (warmup / 3000) ** 0.5  # the cooldown moves with the steps drawn


def test_bpe_on_single_words_gets_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Training on words without ``--task`` built an 8,000-token BPE vocabulary on single words without a word."""
    import random

    from dotformer.cli import main

    rng = random.Random(0)
    words = sorted({"".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 8))) for _ in range(300)})
    data = tmp_path / "words.tsv"
    data.write_text("".join(f"{w}\t{' '.join(w.upper())}\n" for w in words), encoding="utf-8")
    quick = ["--data", str(data), "--preset", "tiny", "--max-steps", "1", "--no-progress", "--device", "cpu"]
    assert main(["train", *quick, "--out", str(tmp_path / "bpe")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "single words" in line]
    reference = json.loads((tmp_path / "bpe" / "data" / "data.json").read_text())
    trained = reference["report"]["splits"]["train"]["examples"]
    assert 200 < trained < len(words)  # the training split (the rest is validation and test)
    assert notes == [
        f"dotformer train: warning: the texts are single words ({trained} of {trained} training sources) and get a "
        f"BPE vocabulary of up to 8,000 pieces learned from them, so many words are a piece of their own and a new "
        f"word splits into rare pieces; for words to pronunciations use --task g2p (characters -> phone symbols), "
        f"for words to words --task exact, or give a smaller --vocab-size"
    ]
    assert main(["train", *quick, "--task", "g2p", "--out", str(tmp_path / "g2p")]) == 0
    assert "single words" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["generate", "--checkpoint", "lm", "--length-penalty", "-1e308", "--strategy", "beam"], "--length-penalty"),
        (["generate", "--checkpoint", "lm", "--temperature", "-1e-3"], "--temperature must be a finite number > 0"),
        (["translate", "--checkpoint", "ck", "--top-p", "-1E2", "--strategy", "sample"], "--top-p must be in (0, 1]"),
        (["evaluate", "--checkpoint", "ck", "--temperature", "-inf", "--strategy", "sample"], "got -inf"),
    ],
)
def test_a_negative_number_in_any_notation_reaches_the_flags_own_check(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--length-penalty -1e308`` was read as an option: "argument --length-penalty: expected one argument"."""
    from dotformer.cli import main

    assert main(argv) == 2  # refused by the flag's range check, before any checkpoint is read
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and "expected one argument" not in err, err


def test_every_commands_parser_reads_negative_numbers_as_values() -> None:
    from dotformer.cli import build_parser

    parser = build_parser({"generate", "train"})
    for word, value in [("-1e308", -1e308), ("-1E-3", -1e-3), ("-.5", -0.5), ("-2.", -2.0), ("-3", -3.0)]:
        args = parser.parse_args(["generate", "--checkpoint", "lm", "--length-penalty", word])
        assert args.length_penalty == value
    args = parser.parse_args(["train", "--data", "copy", "--dropout", "-1e-3", "--label-smoothing", "-1e1"])
    assert (args.opt_dropout, args.opt_label_smoothing) == (-1e-3, -10.0)
    with pytest.raises(SystemExit):  # a word that is not a number is still an option (here: an unknown one)
        parser.parse_args(["generate", "--checkpoint", "lm", "--length-penalty", "-e5"])
