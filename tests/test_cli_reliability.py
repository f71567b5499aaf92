"""Nothing silent, nothing lost: the CLI and the Python API given bad inputs, each case with its exact reproduction."""

from __future__ import annotations

import errno
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
