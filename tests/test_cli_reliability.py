"""Nothing silent, nothing lost: the CLI and the Python API given bad inputs, each case with its exact reproduction."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dotformer import ModelConfig, Transformer
from dotformer.checkpoint import save_checkpoint
from dotformer.data.tokenizers import train_tokenizer


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
