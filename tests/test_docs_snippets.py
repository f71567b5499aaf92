"""Every Python block of the README and of the documentation pages runs, so the tutorial cannot drift from the code.

Each file's ```python blocks run in order in one namespace (a later block uses the names of an earlier one), as a
reader pastes them into one Python shell. They run in a temporary directory holding ``runs/g2p/last``, a small
untrained G2P checkpoint in the layout ``bash scripts/g2p.sh`` writes, so the README's example of the Python API runs
as written; the blocks' own ``assert`` lines check the lesson's numbers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
OPTIONAL_PEERS = {"ctranslate2", "transformers", "onnxruntime", "openai"}  # other engines' snippets; a server's client
FENCE = re.compile(r"^( *)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of a Markdown text, each with the line number of its first code line."""
    blocks = []
    for m in FENCE.finditer(text):
        indent = len(m.group(1))  # a block inside a list item is indented with it
        code = "".join(line[indent:] for line in m.group(2).splitlines(keepends=True))
        blocks.append((text.count("\n", 0, m.start(2)) + 1, code))
    return blocks


def test_the_fence_pattern_finds_blocks_and_their_lines() -> None:
    text = (
        "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = x + 1\n```\n"
        "- item\n\n  ```python\n  z = 2\n  ```\n"
    )
    assert python_blocks(text) == [(3, "x = 1\n"), (10, "y = x + 1\n"), (15, "z = 2\n")]


def test_the_pages_have_snippets() -> None:
    counts = {p.name: len(python_blocks(p.read_text(encoding="utf-8"))) for p in PAGES}
    assert counts["README.md"] >= 1 and counts["lesson.md"] >= 10 and counts["modern.md"] >= 10


@pytest.fixture
def reader_dir(tmp_path: Path) -> Iterator[Path]:
    """A working directory with ``runs/g2p/last``: a small untrained letters-to-phones checkpoint;
    ``runs/lm-bible/best``, a small untrained character language model with lm-bible's block size; and the guide's
    classifier ``runs/genres`` (the Bible's six genres) and tagger ``runs/ner``, small and untrained."""
    from dotformer import ModelConfig, Transformer
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    letters = train_tokenizer("char", ["abcdefghijklmnopqrstuvwxyz'"])
    phones = train_tokenizer(
        "symbol", ["AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T"]
    )
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", src_vocab_size=letters.vocab_size, tgt_vocab_size=phones.vocab_size)
    save_checkpoint(
        tmp_path / "runs/g2p/last", Transformer(config).eval(), letters, phones, {"task": "g2p", "dataset": "cmudict"}
    )
    text = train_tokenizer("char", ["In the beginning God created the heaven and the earth. LORD:;,"])
    lm = ModelConfig.preset(
        "tiny", src_vocab_size=text.vocab_size, tgt_vocab_size=text.vocab_size, arch="decoder-only", max_len=128
    )
    info = {"task": "lm", "dataset": "bible", "data": {"block_size": 128}}
    save_checkpoint(tmp_path / "runs/lm-bible/best", Transformer(lm).eval(), text, text, info)
    genres = ["gospels", "history", "law", "letters", "poetry", "prophets"]
    entities = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    letters_and_space = train_tokenizer(
        "char", ["Blessed is the man that walketh not in the counsel of the ungodly", "John lives in Paris"]
    )
    for path, task, head, labels in (("genres", "classify", "sequence", genres), ("ner", "tag", "token", entities)):
        encoder = ModelConfig.preset(
            "tiny", src_vocab_size=letters_and_space.vocab_size, tgt_vocab_size=letters_and_space.vocab_size,
            arch="encoder-only", num_decoder_layers=0, head=head, num_labels=len(labels),
        )  # fmt: skip
        model = Transformer(encoder).eval()
        save_checkpoint(
            tmp_path / "runs" / path, model, letters_and_space, letters_and_space, {"task": task, "labels": labels}
        )
    cwd = os.getcwd()
    threads = torch.get_num_threads()
    os.chdir(tmp_path)
    torch.set_num_threads(1)
    try:
        yield tmp_path
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_python_block_runs(page: Path, reader_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, object] = {"__name__": "__snippet__"}
    for line, code in python_blocks(page.read_text(encoding="utf-8")):
        # Line numbers in a traceback point into the page: the block is compiled at its own line.
        try:
            exec(compile("\n" * (line - 1) + code, str(page), "exec"), namespace)  # noqa: S102
        except ModuleNotFoundError as error:
            if error.name not in OPTIONAL_PEERS:
                raise
            pytest.skip(f"{page.name}:{line}: needs {error.name} (the bench extra)")


ANY_FENCE = re.compile(r"^( *)```(\w*)[ \t]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)
PYTHON_LINE = re.compile(r"dotformer\.load\(|^ *import \w|^ *from [\w.]+ import ", re.MULTILINE)


def test_python_of_the_pages_is_in_python_blocks_that_run() -> None:
    """A Python example in a ```text (or unmarked) block would never run, so it could drift from the code: every block
    that calls the API or imports is a ```python block (the guide's classifier example was one)."""
    assert PYTHON_LINE.search('model = dotformer.load("runs/genres")\n') and not PYTHON_LINE.search("dotformer train\n")
    stray = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in ANY_FENCE.finditer(text):
            if m.group(2) != "python" and PYTHON_LINE.search(m.group(3)):
                stray.append(f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1} ```{m.group(2)}")
    assert not stray, stray
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    assert any('dotformer.load("runs/genres")' in code for _, code in python_blocks(guide))
