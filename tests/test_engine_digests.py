"""dotformer.engines.digests: a checkpoint file's SHA-256 remembered by its (size, mtime_ns, inode); any of the three
changed hashes it again; the one change a memo cannot see (the same size, time and inode) is shown as such."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from dotformer.engines.digests import MEMO_FILE, checkpoint_sha256, memo_sha256


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    path = tmp_path / "ck" / "model.safetensors"
    path.parent.mkdir()
    path.write_bytes(b"weights " * 1000)
    return path


def planted(memo: Path, weights: Path) -> str:
    """Replace the remembered digest of ``weights`` by a fake one: a memo hit returns it, a recomputation does not."""
    entries = json.loads(memo.read_text())
    fake = "f" * 64
    entries[str(weights.resolve())][3] = fake
    memo.write_text(json.dumps(entries))
    return fake


def test_the_digest_is_remembered_while_size_mtime_and_inode_stay(weights: Path, tmp_path: Path) -> None:
    memo = tmp_path / "cache" / MEMO_FILE
    assert memo_sha256(weights, memo) == sha(weights)
    fake = planted(memo, weights)
    assert memo_sha256(weights, memo) == fake  # read from the memo, not from the file


@pytest.mark.parametrize("change", ["size", "mtime", "inode"])
def test_any_of_the_three_changed_hashes_the_file_again(weights: Path, tmp_path: Path, change: str) -> None:
    memo = tmp_path / "cache" / MEMO_FILE
    memo_sha256(weights, memo)
    planted(memo, weights)
    stat = os.stat(weights)
    if change == "size":
        weights.write_bytes(weights.read_bytes() + b"!")
    elif change == "mtime":
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    else:  # another file of the same size and time moved over it: a new inode
        other = weights.with_name("other")
        other.write_bytes(weights.read_bytes().replace(b"weights", b"WEIGHTS"))
        os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.replace(other, weights)
        assert os.stat(weights).st_size == stat.st_size and os.stat(weights).st_mtime_ns == stat.st_mtime_ns
    assert memo_sha256(weights, memo) == sha(weights)


def test_content_changed_with_size_mtime_and_inode_kept_is_what_a_memo_cannot_see(
    weights: Path, tmp_path: Path
) -> None:
    """The documented blind spot: rewritten in place, the same size, the old time set back: the old digest."""
    memo = tmp_path / "cache" / MEMO_FILE
    before = memo_sha256(weights, memo)
    stat = os.stat(weights)
    with open(weights, "r+b") as f:  # in place: the same inode
        f.write(b"WEIGHTS")
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert memo_sha256(weights, memo) == before != sha(weights)
    memo.unlink()  # the remedy the docstring names
    assert memo_sha256(weights, memo) == sha(weights)


def test_an_unwritable_memo_still_gives_the_digest(weights: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert memo_sha256(weights, blocker / MEMO_FILE) == sha(weights)


def test_the_checkpoint_memo_lives_in_the_cache_beside_it(weights: Path) -> None:
    assert checkpoint_sha256(weights) == sha(weights)
    memo = weights.parent.parent / ".ct2-cache" / MEMO_FILE
    assert json.loads(memo.read_text())[str(weights.resolve())][3] == sha(weights)


def test_a_memo_hit_finds_the_same_converted_copy(tmp_path: Path) -> None:
    """Loading a checkpoint for CTranslate2 twice: the second finds its copy through the remembered digests (the
    memo holds the four files), and a checkpoint saved again (new weights) gets a copy of its own."""
    pytest.importorskip("ctranslate2")
    import torch

    import dotformer
    from dotformer import ModelConfig, Transformer
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    tokenizer = train_tokenizer("symbol", ["a1 a2 a3"])
    config = ModelConfig.preset("tiny", src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    path = tmp_path / "ck"
    save_checkpoint(path, Transformer(config).eval(), tokenizer, tokenizer, {"task": "synthetic"})
    first = dotformer.load(path, device="cpu", engine="ctranslate2")
    memo = json.loads((tmp_path / ".ct2-cache" / MEMO_FILE).read_text())
    assert len([key for key in memo if key.startswith(str(path.resolve()))]) == 4
    again = dotformer.load(path, device="cpu", engine="ctranslate2")
    assert again.files.fingerprint == first.files.fingerprint
    assert again.translate(["a1 a2"], beam=2) == first.translate(["a1 a2"], beam=2)
    shutil.rmtree(path)
    save_checkpoint(path, Transformer(config).eval(), tokenizer, tokenizer, {"task": "synthetic"})
    assert dotformer.load(path, device="cpu", engine="ctranslate2").files.fingerprint != first.files.fingerprint
