"""A start-up without torch where torch is not needed: ``dotformer --help``, every command's ``--help``, and
translate, evaluate and generate on a checkpoint whose CTranslate2 copy is cached load neither torch nor the model
code (each run in a fresh interpreter, which then lists what it imported)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dotformer import ModelConfig, Transformer
from dotformer.checkpoint import save_checkpoint
from dotformer.cli import SUBCOMMANDS
from dotformer.data.tokenize.tokenizer_files import train_tokenizer

MODEL_CODE = ("torch", "dotformer.model", "dotformer.attention", "dotformer.layers", "dotformer.decoding.translate")
SYMBOLS = "a0 a1 a2 a3 a4 a5"


def loaded_modules(code: str, cwd: Path, watched: tuple[str, ...] = MODEL_CODE) -> list[str]:
    """Run ``code`` in a fresh interpreter; the modules of ``watched`` it imported (and what it printed)."""
    probe = f"{code}\nimport sys\nprint('MODULES', *sorted(m for m in {watched!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("MODULES")]
    return line.split()[1:]


def test_help_imports_neither_torch_nor_the_model(tmp_path: Path) -> None:
    commands = [[], *([name] for name in SUBCOMMANDS)]
    code = (
        "from dotformer.cli import main\n"
        f"for argv in {commands!r}:\n"
        "    try:\n"
        "        main([*argv, '--help'])\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0, argv\n"
    )
    assert loaded_modules(code, tmp_path) == []


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A translation model and a language model, each converted once for CTranslate2 (in this process: the first
    use may load torch), and a test file."""
    pytest.importorskip("ctranslate2")
    import dotformer

    root = tmp_path_factory.mktemp("startup")
    symbols = train_tokenizer("symbol", [SYMBOLS])
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=10, tgt_vocab_size=10, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
        num_decoder_layers=1, dropout=0.0,
    )  # fmt: skip
    mt = save_checkpoint(root / "mt", Transformer(config).eval(), symbols, symbols, {"task": "synthetic"})
    lm_config = config.replace(arch="decoder-only", num_encoder_layers=0, max_len=64)
    lm = save_checkpoint(root / "lm", Transformer(lm_config).eval(), symbols, symbols, {"task": "lm"})
    for path in (mt, lm):
        assert dotformer.load(path, device="cpu", engine="ctranslate2").engine == "ctranslate2"
    data = root / "test.tsv"
    data.write_text("a1 a2\ta1 a2\na3\ta3\n", encoding="utf-8")
    return {"mt": mt, "lm": lm, "data": data}


def test_a_cached_ctranslate2_copy_decodes_without_torch(converted: dict[str, Path], tmp_path: Path) -> None:
    mt, lm, data = (str(converted[name]) for name in ("mt", "lm", "data"))
    commands = [
        ["translate", "--checkpoint", mt, "a1 a2", "a3"],
        ["translate", "--checkpoint", mt, "--n-best", "2", "--output-format", "json", "--alignments", "a1"],
        ["translate", "--checkpoint", mt, "--strategy", "sample", "--seed", "1", "a1"],
        ["evaluate", "--checkpoint", mt, "--data", data, "--json", str(tmp_path / "metrics.json")],
        ["generate", "--checkpoint", lm, "--prompt", "a1", "--max-new-tokens", "5", "--seed", "1"],
        ["generate", "--checkpoint", lm, "--prompt", "a1", "--max-new-tokens", "5", "--beam", "2"],
    ]
    code = f"from dotformer.cli import main\nfor argv in {commands!r}:\n    assert main(argv) == 0, argv\n"
    assert loaded_modules(code, tmp_path) == []
    assert json.loads((tmp_path / "metrics.json").read_text())["engine"] == "ctranslate2"


def test_translating_a_file_on_a_cached_copy_imports_neither_torch_nor_numpy(
    converted: dict[str, Path], tmp_path: Path
) -> None:
    # the whole command as a user runs it on a file: CTranslate2 and the tokenizers need no array library
    words, out = tmp_path / "words.txt", tmp_path / "out.txt"
    words.write_text("a1 a2\na3\n\na4 a5 a1\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(converted["mt"]), "--beam", "2"]
    argv += ["--input", str(words), "--output", str(out)]
    code = f"from dotformer.cli import main\nassert main({argv!r}) == 0\n"
    assert loaded_modules(code, tmp_path, ("torch", "numpy", *MODEL_CODE)) == []
    assert len(out.read_text(encoding="utf-8").splitlines()) == 4


def test_the_python_api_on_a_cached_copy_loads_no_torch(converted: dict[str, Path], tmp_path: Path) -> None:
    code = (
        "import dotformer\n"
        f"model = dotformer.load({str(converted['mt'])!r})\n"
        "assert model.engine == 'ctranslate2'\n"
        "print(model.translate(['a1 a2', 'a3'], n_best=2, details=True))\n"
    )
    assert loaded_modules(code, tmp_path) == []
    # and the torch engine, or a call only torch runs, loads it (the probe sees an import)
    code = f"import dotformer\ndotformer.load({str(converted['mt'])!r}).translate('a1', attention=True)\n"
    assert "torch" in loaded_modules(code, tmp_path)
