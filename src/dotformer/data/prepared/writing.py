"""Writing a prepared directory (its layout: :mod:`dotformer.data.prepared.layout`): the arrays of the three splits
and the held-out text, filled chunk by chunk, inside a partial directory renamed to its name only when everything is
written."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np

from dotformer.data.prepared.arrays import RaggedWriter, save_array
from dotformer.data.prepared.layout import array_stem, labels_file
from dotformer.data.prepared.splits import SPLIT_NAMES
from dotformer.data.tokenize.tokenizers import EncodedChunk
from dotformer.errors import ConfigError


class HeldOutText(Protocol):
    """What a data kind says of its held-out text: the files' suffix, whether characters are counted, and a line."""

    held_out_suffix: str
    counts_characters: bool

    def text_line(self, item: Any, split: str) -> str: ...


class SplitWriters:
    """The arrays of the three splits (one per side: ``src`` and ``tgt`` of pairs, ``text`` of a language model,
    ``text`` and ``tags`` of a tagger) and the valid/test text files of a directory being written; leaving a ``with``
    block by an exception removes the arrays' partial files.

    Args:
        directory: the (partial) directory. sides: the arrays of each split. dtypes: their ids' dtypes.
        kind: the data kind (:class:`~dotformer.data.prepared.skeleton.DataKind`): its held-out files'
            suffix (valid.tsv or valid.txt), whether characters are counted, the line of an example.
        label_dtype: a classifier's: the dtype of its label per text, saved as ``SPLIT.labels.npy`` at the end.
    """

    def __init__(
        self,
        directory: Path,
        sides: tuple[str, ...],
        dtypes: tuple[np.dtype, ...],
        kind: HeldOutText,
        label_dtype: np.dtype | None = None,
    ) -> None:
        self.directory = directory
        self.kind = kind
        self.sides = sides
        self.label_dtype = label_dtype
        self.labels: dict[str, list[np.ndarray]] = {name: [] for name in SPLIT_NAMES}
        stems = {name: [array_stem(directory, name, side) for side in sides] for name in SPLIT_NAMES}
        self.arrays = {
            name: [RaggedWriter(stem, dtype) for stem, dtype in zip(stems[name], dtypes, strict=True)]
            for name in SPLIT_NAMES
        }
        self.texts: dict[str, TextIO] = {
            name: (directory / f"{name}.{kind.held_out_suffix}").open("w", encoding="utf-8")
            for name in ("valid", "test")
        }
        self.characters = dict.fromkeys(SPLIT_NAMES, 0)

    def write(
        self,
        name: str,
        mask: np.ndarray,
        encoded: Sequence[EncodedChunk],
        items: Sequence[Any],
        labels: np.ndarray | None = None,
    ) -> None:
        """Append the examples of a chunk that ``mask`` selects to split ``name`` (and their text, when ``items``
        is given and the split keeps its text; and their label per example, a classifier's ``labels``)."""
        if not mask.any():
            return
        for writer, side in zip(self.arrays[name], encoded, strict=True):
            writer.append(side.ids[np.repeat(mask, side.lengths)], side.lengths[mask])
        if self.label_dtype is not None:
            assert labels is not None
            self.labels[name].append(np.asarray(labels)[mask].astype(self.label_dtype))
        if not items or (name not in self.texts and not self.kind.counts_characters):
            return
        selected = [item for item, keep in zip(items, mask, strict=True) if keep]
        if self.kind.counts_characters:
            self.characters[name] += sum(len(line) + 1 for line in selected)
        if name in self.texts:
            self.texts[name].write("".join(self.kind.text_line(item, name) for item in selected))

    def summary(self) -> dict[str, Any]:
        """Per split: the examples, the tokens of each side (and the characters of a text)."""
        out = {}
        for name, writers in self.arrays.items():
            tokens = {side: writer.tokens for side, writer in zip(self.sides, writers, strict=True)}
            out[name] = {"examples": writers[0].rows, "tokens": tokens}
            if self.kind.counts_characters:
                out[name]["characters"] = self.characters[name]
        return out

    def __enter__(self) -> SplitWriters:
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        for handle in self.texts.values():
            handle.close()
        if kind is None and self.label_dtype is not None:
            for name, parts in self.labels.items():
                save_array(labels_file(self.directory, name), np.concatenate([np.zeros(0, self.label_dtype), *parts]))
        for writers in self.arrays.values():
            for writer in writers:
                if kind is None:
                    writer.close()
                else:
                    writer.abort()


@contextmanager
def writing_directory(directory: Path) -> Iterator[Path]:
    """A partial directory beside ``directory``, renamed to it when the block ends, removed when it raises.

    Raises:
        ConfigError: ``directory`` exists and is not an empty directory (nothing there is touched).
        OSError: a write failed; one that named no file (a full disk under numpy) is raised again naming
            ``directory``.
    """
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ConfigError(f"{directory} exists and is not empty: prepared data goes to a new or empty directory")
    directory.parent.mkdir(parents=True, exist_ok=True)
    partial = directory.with_name(f".{directory.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)  # this process's own leftover, if any
    partial.mkdir()
    try:
        yield partial
        for path in partial.iterdir():
            fsync(path)
        if directory.exists():
            directory.rmdir()  # empty: checked above
        os.replace(partial, directory)
        fsync(directory.parent)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if exc.filename is not None:
            raise
        reason = exc.strerror or f"{exc}: is the disk full?"  # numpy's "N requested and M written" names no file
        raise OSError(exc.errno, f"cannot write the prepared data ({reason})", str(directory)) from exc
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def fsync(path: Path) -> None:
    """Flush a file's (or a directory's entries') writes to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
