"""Values out of range and misplaced paths are one line that names the flag, field or file, on every surface."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
import torch
from decoding_support import single_thread

import dotformer
from dotformer import ModelConfig, Transformer
from dotformer.checkpoint import save_checkpoint
from dotformer.cli import main
from dotformer.cli.threads import apply_threads
from dotformer.cli.translate import add_arguments
from dotformer.data.read.corpora import load_pairs
from dotformer.data.read.textio import read_text
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.decoding import DecodeConfig
from dotformer.decoding.options import SEARCH_OPTIONS, misplaced_message
from dotformer.errors import ConfigError, DataError
from dotformer.plots.positional import positional_data
from dotformer.training.config import TrainConfig

HUGE = 2**70  # 1180591620717411303424: more than torch's generators take
HUGE_SEED = "must be an integer in [0, 2**63 - 1], got 1180591620717411303424"


def error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one stderr line of a refused command (exit status 2)."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ranges")
    symbols = train_tokenizer("symbol", ["a0 a1 a2 a3 a4 a5 a6 a7"])
    torch.manual_seed(0)
    mt = ModelConfig.preset("tiny", src_vocab_size=symbols.vocab_size, tgt_vocab_size=symbols.vocab_size)
    save_checkpoint(root / "mt", Transformer(mt).eval(), symbols, symbols, {"task": "synthetic"})
    lm = ModelConfig(
        arch="decoder-only", src_vocab_size=symbols.vocab_size, tgt_vocab_size=symbols.vocab_size, d_model=32,
        num_heads=4, d_ff=64, num_encoder_layers=0, num_decoder_layers=2, dropout=0.0, max_len=64,
    )  # fmt: skip
    save_checkpoint(root / "lm", Transformer(lm).eval(), symbols, symbols, {"task": "lm"})
    return {"mt": root / "mt", "lm": root / "lm"}


# seeds: [0, 2**63 - 1] everywhere one enters


def test_decode_config_takes_seeds_of_torch_generators_only() -> None:
    assert DecodeConfig(strategy="sample", seed=2**63 - 1).seed == 2**63 - 1
    with pytest.raises(ConfigError) as info:
        DecodeConfig(strategy="sample", seed=HUGE)
    assert str(info.value) == f"DecodeConfig.seed {HUGE_SEED}"
    with pytest.raises(ConfigError, match=r"^DecodeConfig\.seed must be an integer in \[0, 2\*\*63 - 1\], got -1$"):
        DecodeConfig(strategy="sample", seed=-1)


def test_train_config_takes_seeds_of_torch_generators_only() -> None:
    assert TrainConfig(seed=2**63 - 1).seed == 2**63 - 1
    with pytest.raises(ConfigError) as info:
        TrainConfig(seed=HUGE)
    assert str(info.value) == f"TrainConfig.seed {HUGE_SEED}"


def test_a_huge_seed_is_refused_by_the_api(checkpoints: dict[str, Path]) -> None:
    with single_thread():
        with pytest.raises(ConfigError) as info:
            dotformer.load(checkpoints["mt"], device="cpu").translate("a1", strategy="sample", seed=HUGE)
        assert str(info.value) == f"DecodeConfig.seed {HUGE_SEED}"
        with pytest.raises(ConfigError) as info:
            dotformer.load(checkpoints["lm"], device="cpu").generate("a1", seed=HUGE)
        assert str(info.value) == f"DecodeConfig.seed {HUGE_SEED}"


def test_a_huge_seed_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    translate = ["translate", "--checkpoint", str(tmp_path / "none"), "--strategy", "sample", "--seed", str(HUGE), "a"]
    assert error_line(capsys, translate) == f"dotformer translate: error: --seed {HUGE_SEED}"
    generate = ["generate", "--checkpoint", str(tmp_path / "none"), "--prompt", "a", "--seed", str(HUGE)]
    assert error_line(capsys, generate) == f"dotformer generate: error: --seed {HUGE_SEED}"


def test_seeds_of_evaluate_and_of_generates_later_prompts_are_checked(
    capsys: pytest.CaptureFixture[str], checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    argv = ["evaluate", "--checkpoint", str(tmp_path / "none"), "--limit", "3", "--seed", str(HUGE)]
    assert error_line(capsys, argv) == f"dotformer evaluate: error: --seed {HUGE_SEED}"
    monkeypatch.setattr("sys.stdin", io.StringIO("a1\na2\n"))
    argv = ["generate", "--checkpoint", str(checkpoints["lm"]), "--device", "cpu", "--seed", str(2**63 - 1)]
    with single_thread():
        line = error_line(capsys, argv)
    assert (
        line
        == "dotformer generate: error: <stdin>:2: prompt 2 would draw with --seed + 1, above 2**63 - 1; lower --seed"
    )


@pytest.mark.parametrize("task", [[], ["--task", "lm"]])
def test_train_refuses_a_huge_seed_before_making_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, task: list[str]
) -> None:
    data = tmp_path / ("text.txt" if task else "pairs.tsv")
    data.write_text("ab\tAB\ncd\tCD\nef\tEF\n" if not task else "ab cd\nef gh\n", encoding="utf-8")
    out = tmp_path / "run"
    argv = ["train", *task, "--data", str(data), "--out", str(out), "--max-steps", "1", "--seed", str(HUGE)]
    assert error_line(capsys, argv) == f"dotformer train: error: --seed {HUGE_SEED}"
    assert not out.exists()


# threads, beam sizes, plot sizes


def test_threads_are_from_1_to_1024(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--threads must be at most 1024, got 100000$"):
        apply_threads(100000)
    argv = ["translate", "--checkpoint", str(tmp_path / "none"), "--threads", "1025", "a"]
    assert error_line(capsys, argv) == "dotformer translate: error: --threads must be at most 1024, got 1025"


def test_beam_size_is_at_most_1024(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert DecodeConfig(beam_size=1024).beam_size == 1024
    with pytest.raises(ConfigError, match=r"^DecodeConfig\.beam_size must be at most 1024, got 1025$"):
        DecodeConfig(beam_size=1025)
    argv = ["translate", "--checkpoint", str(tmp_path / "none"), "--beam", "100000", "a"]
    assert error_line(capsys, argv) == "dotformer translate: error: --beam must be at most 1024, got 100000"


def test_plot_positional_sizes_are_bounded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = str(tmp_path / "p.png")
    argv = ["plot", "positional", "--d-model", "128", "--length", "100000000", "--out", out]
    assert error_line(capsys, argv) == "dotformer plot: error: --length must be at most 100,000, got 100,000,000"
    argv = ["plot", "positional", "--d-model", "100000", "--length", "10", "--out", out]
    assert error_line(capsys, argv) == "dotformer plot: error: --d-model must be at most 65,536, got 100,000"
    with pytest.raises(ConfigError) as info:
        positional_data(1024, 100_000)
    assert str(info.value) == (
        "--length 100,000 x --d-model 1,024 is 102,400,000 table entries; at most 16,777,216 are drawn "
        "(shorten --length or narrow --d-model)"
    )
    assert positional_data(2, 100_000).encoding.shape == (100_000, 2)


# messages name the flag or the file


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--beam", "0"], "--beam must be a positive integer, got 0"),
        (
            ["--beam", "2", "--n-best", "3"],
            "--n-best=3 cannot exceed --beam=2: beam search keeps only --beam hypotheses",
        ),
        (["--max-len-b", "-1"], "--max-len-b must be a non-negative integer, got -1"),
        (["--top-k", "3"], "--top-k only applies to --strategy sample"),
        (["--top-k", "3", "--seed", "1"], "--top-k, --seed only apply to --strategy sample"),
    ],
)
def test_translate_errors_name_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], message: str
) -> None:
    argv = ["translate", "--checkpoint", str(tmp_path / "none"), *flags, "a"]
    assert error_line(capsys, argv) == f"dotformer translate: error: {message}"


def test_generate_errors_name_the_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["generate", "--checkpoint", str(tmp_path / "none"), "--prompt", "a", "--n", "0"]
    assert error_line(capsys, argv) == "dotformer generate: error: --n must be a positive integer, got 0"
    argv = ["generate", "--checkpoint", str(tmp_path / "none"), "--prompt", "a", "--max-new-tokens", "0"]
    assert error_line(capsys, argv) == "dotformer generate: error: --max-new-tokens must be a positive integer, got 0"


def test_a_bad_value_of_a_config_file_names_the_file_and_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[train]\nmax_steps = "ten"\n', encoding="utf-8")
    data = tmp_path / "pairs.tsv"
    data.write_text("ab\tAB\ncd\tCD\nef\tEF\n", encoding="utf-8")
    argv = ["train", "--config", str(config), "--data", str(data), "--out", str(tmp_path / "run")]
    expected = f"dotformer train: error: {config} [train] max_steps must be a positive integer, got 'ten'"
    assert error_line(capsys, argv) == expected
    argv += ["--max-steps", "0"]  # the flag's value replaces the file's: the message names the flag
    assert error_line(capsys, argv) == "dotformer train: error: --max-steps must be a positive integer, got 0"


def test_an_unknown_train_flag_prints_trains_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["train", "--d-model", "30"])
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("usage: dotformer train ")
    assert lines[-1] == "dotformer train: error: unrecognized arguments: --d-model 30"


def test_dtype_help_is_one_sentence() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    (dtype,) = [action for action in parser._actions if action.dest == "dtype"]
    assert dtype.help == (
        "precision of the weights while decoding (default float32; scores are still summed in float32): bfloat16 "
        "halves the weights' memory and suits GPUs; float16 needs CUDA; int8 (torch: CPU only; --device auto then "
        "picks the CPU) stores the linear layers' weights in 8 bits and multiplies in integers, 1.2-3.5x faster on "
        "this project's CPU, with outputs that may differ slightly from float32's and change with --batch-size; on "
        "CTranslate2, its compute type of that name"
    )


# a directory where a file is expected


def test_a_directory_is_said_to_be_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    with pytest.raises(DataError, match=rf"^{folder} is a directory; give a file$"):
        read_text(folder)
    with pytest.raises(DataError, match=rf"^{folder} is a directory, not a corpus file; a corpus is one of "):
        load_pairs(str(folder))
    out = str(tmp_path / "run")
    argv = ["train", "--task", "lm", "--data", str(folder), "--out", out, "--max-steps", "1"]
    assert error_line(capsys, argv) == f"dotformer train: error: {folder} is a directory; give a file"
    argv = ["train", "--config", str(folder), "--out", out]
    expected = (
        f"dotformer train: error: {folder} is a directory; give a config file (TOML) or the name of a shipped config"
    )
    assert error_line(capsys, argv) == expected
    argv = ["translate", "--checkpoint", str(tmp_path / "none"), "--prefix-file", str(folder), "a"]
    assert error_line(capsys, argv) == f"dotformer translate: error: --prefix-file {folder} is a directory; give a file"


# grammar


def test_one_misplaced_option_applies_several_apply() -> None:
    top_k, seed = [o for o in SEARCH_OPTIONS if o.name in ("top_k", "seed")]
    assert misplaced_message([seed], "sample", "beam") == "seed only applies to strategy='sample', not strategy='beam'"
    assert misplaced_message([top_k, seed], "sample", "greedy") == (
        "top_k, seed only apply to strategy='sample', not strategy='greedy'"
    )


def test_generate_on_a_translation_model_says_an_encoder_decoder(checkpoints: dict[str, Path]) -> None:
    with single_thread(), pytest.raises(ConfigError, match=r"is an encoder-decoder model: generate continues text"):
        dotformer.load(checkpoints["mt"], device="cpu").generate("a1")


def test_evaluating_one_line_says_1_line(
    capsys: pytest.CaptureFixture[str], checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    text = tmp_path / "one.txt"
    text.write_text("a1 a2 a3\n", encoding="utf-8")
    with single_thread():
        assert main(["evaluate", "--checkpoint", str(checkpoints["lm"]), "--device", "cpu", "--data", str(text)]) == 0
    assert f"{checkpoints['lm']} on {text} (1 line, " in capsys.readouterr().out
