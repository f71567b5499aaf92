"""`dotformer train`: a smoke run on the copy task, resuming, config files, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dotformer import checkpoint as ckpt
from dotformer.cli import main
from dotformer.config import PRESETS

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


QUICK = ["--data", "copy", "--preset", "tiny", "--limit", "200", "--no-progress", "--device", "cpu"]


def one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dotformer train: error: "), err
    return err


def test_smoke_run_then_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["train", *QUICK, "--max-steps", "30", "--out", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("trained 30 steps") and str(run / "best") in out
    for name in ("run.json", "metrics.jsonl", "best", "last", "checkpoints", "data/data.json", "data/valid.tsv"):
        assert (run / name).exists(), name
    record = json.loads((run / "run.json").read_text())
    assert record["dataset"] == "copy" and record["task"] == "synthetic" and record["preset"] == "tiny"
    assert record["model"]["d_model"] == 64 and record["train"]["max_steps"] == 30
    assert record["data"]["src_tokenizer"] == "symbol" and "torch" in record["versions"]
    assert record["flags"]["train"] == {"max_steps": 30, "progress": False, "device": "cpu"}
    assert record["flags"]["data"] == {"limit": 200, "dataset": "copy"} and record["config_file"] is None
    loaded = ckpt.load_checkpoint(run)
    assert loaded.src_tokenizer.decode(loaded.src_tokenizer.encode("a1 a2")) == "a1 a2"
    resume = ["--max-steps", "35", "--out", str(run), "--resume", "--lr-cooldown", "0.5", "--log-every", "1"]
    assert main(["train", *QUICK, *resume]) == 0  # a longer budget, and a cooldown over its second half
    assert capsys.readouterr().out.startswith("trained 35 steps")
    resumed = json.loads((run / "run.json").read_text())["resumes"][0]["train"]
    assert resumed["max_steps"] == 35 and resumed["lr_cooldown"] == 0.5
    lrs = {r["step"]: r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "lr" in r}
    # the copy recipe's warmup (300 steps) is kept on resume, so the learning rate still rises linearly with the step:
    # step 35 has 35/30 of step 30's rate, times the cooldown's factor (1/35 of the budget left before it, over the
    # final half: 2/35); step 30 ran before the cooldown was asked for
    assert json.loads((run / "run.json").read_text())["train"]["warmup_steps"] == 300 == resumed["warmup_steps"]
    assert lrs[35] == pytest.approx(lrs[30] * (35 / 30) * 2 / 35, rel=1e-6)
    # a changed data or model config cannot resume
    err = one_error_line(capsys, [*QUICK, "--max-steps", "40", "--out", str(run), "--resume", "--vocab-size", "99"])
    assert "vocab_size" in err and "run.json" in err
    err = one_error_line(capsys, [*QUICK, "--max-steps", "40", "--out", str(run), "--resume", "--preset", "small"])
    assert "preset" in err
    # the same directory without --resume is refused
    assert "--resume" in one_error_line(capsys, [*QUICK, "--max-steps", "40", "--out", str(run)])


def test_config_file_and_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[data]\ndataset = "reverse"\nlimit = 100\n[model]\npreset = "tiny"\nd_ff = 32\nnum_decoder_layers = 1\n'
        "[train]\nmax_steps = 5\nmax_tokens = 512\nprogress = false\n"
    )
    assert main(["train", "--config", str(config), "--max-steps", "2", "--out", str(tmp_path / "r")]) == 0
    assert capsys.readouterr().out.startswith("trained 2 steps")
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["dataset"] == "reverse" and record["model"]["d_ff"] == 32 and record["train"]["max_tokens"] == 512
    assert record["model"]["num_decoder_layers"] == 1 and record["train"]["max_steps"] == 2


def test_a_preset_flag_replaces_the_config_files_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--config FILE --preset tiny``: the tiny shape, not the file's sizes under a tiny label."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[data]\ndataset = "copy"\nlimit = 100\n[model]\nd_model = 32\nnum_heads = 2\nd_ff = 48\nnorm_first = true\n'
        "[train]\nmax_steps = 1\nprogress = false\n"
    )
    out = tmp_path / "r"
    assert main(["train", "--config", str(config), "--preset", "tiny", "--dropout", "0.2", "--out", str(out)]) == 0
    capsys.readouterr()
    record = json.loads((out / "run.json").read_text())
    tiny = PRESETS["tiny"]
    assert record["preset"] == "tiny"
    for key in ("d_model", "num_heads", "d_ff", "num_encoder_layers", "num_decoder_layers"):
        assert record["model"][key] == tiny[key], key
    assert record["model"]["dropout"] == 0.2  # a flag still wins over the preset
    assert record["model"]["norm_first"] is True  # a field the preset does not define carries over
    assert ckpt.load_checkpoint(out).config.d_model == tiny["d_model"]


@pytest.mark.parametrize(
    ("toml", "argv", "message"),
    [
        ("[train]\nmax_step = 3\n", [], r"c\.toml.*unknown key 'max_step' in \[train\]"),
        ("[trainer]\nmax_steps = 3\n", [], r"c\.toml.*unknown section or key 'trainer'"),
        ("[model]\nwidth = 3\n", ["--max-steps", "1"], r"unknown key 'width' in \[model\]"),
        ("[train\n", [], r"c\.toml: not valid TOML"),
        (None, [], r"no training budget"),
        (None, ["--max-steps", "1", "--amp", "fp16"], r"fp16 needs a CUDA device"),
        (None, ["--max-steps", "1", "--valid-fraction", "1.5"], r"error: --valid-fraction must be in \[0, 1\)"),
        (None, ["--max-steps", "1", "--data", "no/such/file.tsv"], r"file\.tsv"),
        (None, ["--max-steps", "1", "--resume"], r"nothing to resume"),
        (None, ["--max-steps", "1", "--threads", "0"], r"--threads"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str | None, argv: list[str], message: str
) -> None:
    extra = []
    if toml is not None:
        (tmp_path / "c.toml").write_text(toml)
        extra = ["--config", str(tmp_path / "c.toml")]
    err = one_error_line(capsys, [*QUICK, "--out", str(tmp_path / "run"), *extra, *argv])
    assert __import__("re").search(message, err), err
