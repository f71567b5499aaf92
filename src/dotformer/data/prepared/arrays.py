"""Token arrays on disk, memory-mapped: many rows of ids of different lengths in two flat files (fairseq's
``.bin``/``.idx`` idea).

A :class:`RaggedArray` of N rows is

* ``STEM.bin``: every row's ids one after the other, one flat array of ``uint16`` when the vocabulary has at most
  65,536 ids, else ``int32`` (:func:`token_dtype`);
* ``STEM.idx``: a 16-byte header (``DOTRAGG1`` and the ids' dtype, e.g. ``<u2``) and N + 1 ``int64`` offsets: row i
  is ``ids[offsets[i] : offsets[i + 1]]``, so its length is ``offsets[i + 1] - offsets[i]``.

Both are opened read-only with :class:`numpy.memmap`: N processes that map the same files share one copy in the page
cache, and nothing is held per token as a Python object. A language model's text is one array whose rows are the
lines (each line's ids followed by EOS): the flat ids *are* the token stream, and the offsets give the lines back.
A label per token is a second array whose offsets equal the first's (:meth:`RaggedArray.aligned_with`).

:class:`RaggedWriter` writes in chunks (memory bounded by a chunk) under temporary names and renames both files only
when the last chunk is written, so a crash never leaves a pair of files that looks complete. :class:`PairArrays`
holds the source and target arrays of a translation task's examples and their lengths; :class:`LabelledArrays` the
texts of a classifier or a tagger and their labels (an ``int`` array, one per text, written by :func:`save_array`; or
a label per token, an array aligned with the texts'). No torch here: preparing data
needs only numpy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

import numpy as np

from dotformer.errors import DataError

MAGIC = b"DOTRAGG1"  # the first 8 bytes of every .idx file
HEADER_BYTES = 16  # MAGIC and the ids' dtype string (e.g. b"<u2"), NUL-padded to 8 bytes
UINT16_IDS = 1 << 16  # a vocabulary of at most this many ids is stored as uint16
PARTIAL = ".partial"  # the suffix of a file being written


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype that holds every id of a vocabulary of ``vocab_size`` ids: uint16 up to 65,536, else
    int32 (2 or 4 bytes a token)."""
    return np.dtype(np.uint16) if vocab_size <= UINT16_IDS else np.dtype(np.int32)


def bin_path(stem: Path) -> Path:
    """``STEM.bin``, the flat ids."""
    return stem.with_name(stem.name + ".bin")


def idx_path(stem: Path) -> Path:
    """``STEM.idx``, the header and the offsets."""
    return stem.with_name(stem.name + ".idx")


def _map(path: Path, dtype: np.dtype, offset: int, count: int) -> np.ndarray:
    """``count`` items of ``dtype`` of ``path`` from byte ``offset``, read-only and memory-mapped (an empty array for
    none: a file cannot map zero bytes)."""
    if count == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))


class RaggedArray:
    """N rows of token ids of different lengths: ``ids`` (flat, (offsets[-1],)) and ``offsets`` ((N + 1,) int64).

    Made by :func:`open_ragged` (memory-mapped files) or :meth:`from_rows` (in memory, e.g. for tests and small data).

    Raises:
        DataError: offsets that do not start at 0, decrease, or end past the ids.
    """

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, name: str = "array") -> None:
        if offsets.ndim != 1 or len(offsets) == 0 or int(offsets[0]) != 0 or int(offsets[-1]) != len(ids):
            raise DataError(
                f"{name}: the offsets must run from 0 to the {len(ids):,} ids, got "
                f"{int(offsets[0]) if len(offsets) else None} .. {int(offsets[-1]) if len(offsets) else None}"
            )
        self.ids = ids  # (T,) uint16 or int32: every row's ids one after the other
        self.offsets = offsets  # (N + 1,) int64
        self.name = name

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], dtype: np.dtype | type = np.int64) -> RaggedArray:
        """An in-memory array of ``rows`` (lists or arrays of ids)."""
        lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((i for row in rows for i in row), dtype=dtype, count=int(offsets[-1]))
        return cls(ids, offsets, "rows")

    def __len__(self) -> int:
        """N, the rows."""
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """(N,) int64, the length of every row (from the offsets)."""
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        """T, the ids of all rows."""
        return int(self.offsets[-1])

    def __getitem__(self, row: int) -> np.ndarray:
        """The ids of one row (a view of the mapped file)."""
        if not -len(self) <= row < len(self):
            raise IndexError(f"row {row} of {self.name} ({len(self)} rows)")
        row %= len(self)
        return self.ids[self.offsets[row] : self.offsets[row + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[row] for row in range(len(self)))

    def aligned_with(self, other: RaggedArray) -> bool:
        """Whether ``other`` has a row of the same length for each row (a label per token of this array)."""
        return len(self) == len(other) and bool(np.array_equal(self.offsets, other.offsets))


def open_ragged(stem: str | Path) -> RaggedArray:
    """The :class:`RaggedArray` of ``STEM.bin`` and ``STEM.idx``, memory-mapped read-only.

    Raises:
        DataError: a file is missing (a write that never finished leaves only ``.partial`` files), the header is not
            ours, or the ids file's size does not match the offsets.
    """
    stem = Path(stem)
    ids_file, idx_file = bin_path(stem), idx_path(stem)
    for path in (idx_file, ids_file):
        if not path.is_file():
            raise DataError(f"{path}: no such array file (a preparation that did not finish leaves none)")
    with idx_file.open("rb") as handle:
        header = handle.read(HEADER_BYTES)
    if len(header) != HEADER_BYTES or header[:8] != MAGIC:
        raise DataError(f"{idx_file}: not a dotformer array index (no {MAGIC.decode()} header)")
    try:
        dtype = np.dtype(header[8:].rstrip(b"\0").decode("ascii"))
    except (TypeError, UnicodeDecodeError) as exc:
        raise DataError(f"{idx_file}: unknown ids dtype in the header ({exc})") from None
    rows = (idx_file.stat().st_size - HEADER_BYTES) // 8 - 1
    if rows < 0 or (idx_file.stat().st_size - HEADER_BYTES) % 8:
        raise DataError(f"{idx_file}: {idx_file.stat().st_size} bytes is no whole number of int64 offsets")
    offsets = _map(idx_file, np.dtype("<i8"), HEADER_BYTES, rows + 1)
    tokens = int(offsets[-1])
    if ids_file.stat().st_size != tokens * dtype.itemsize:
        raise DataError(
            f"{ids_file}: {ids_file.stat().st_size:,} bytes, but {idx_file.name} says {tokens:,} ids of "
            f"{dtype.itemsize} bytes"
        )
    return RaggedArray(_map(ids_file, dtype, 0, tokens), offsets, str(stem))


class RaggedWriter:
    """Write a :class:`RaggedArray` to ``STEM.bin``/``STEM.idx`` chunk by chunk, atomically.

    Rows go to ``STEM.bin.partial`` and ``STEM.idx.partial``; :meth:`close` renames the ids file, then the index
    (the index names the ids' count, so an index is never older than its ids). Leaving a ``with`` block by an
    exception removes the partial files. Memory is bounded by the chunk passed to :meth:`append`.

    Args:
        stem: the path without the suffix.
        dtype: the ids' dtype (:func:`token_dtype` of the vocabulary).

    Raises:
        DataError: an id that does not fit ``dtype`` (checked per chunk).
    """

    def __init__(self, stem: str | Path, dtype: np.dtype | type) -> None:
        self.stem = Path(stem)
        self.dtype = np.dtype(dtype).newbyteorder("<")  # the files are little-endian on every machine
        self.rows = 0
        self.tokens = 0
        self._limits = np.iinfo(self.dtype)
        self._ids_partial = bin_path(self.stem).with_name(bin_path(self.stem).name + PARTIAL)
        self._idx_partial = idx_path(self.stem).with_name(idx_path(self.stem).name + PARTIAL)
        self._ids = self._ids_partial.open("wb")
        self._idx = self._idx_partial.open("wb")
        self._idx.write(MAGIC + self.dtype.str.encode("ascii").ljust(HEADER_BYTES - len(MAGIC), b"\0"))
        self._idx.write(np.zeros(1, dtype="<i8").tobytes())  # offsets[0]
        self._closed = False

    def append(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        """Append ``len(lengths)`` rows whose ids are ``ids`` one after the other (``ids.sum() == lengths.sum()``).

        Raises:
            DataError: the lengths do not add up to the ids, or an id is out of the dtype's range.
        """
        ids = np.asarray(ids)
        lengths = np.asarray(lengths, dtype=np.int64)
        if int(lengths.sum()) != len(ids) or (len(lengths) and int(lengths.min()) < 0):
            raise DataError(f"{self.stem}: {len(ids):,} ids for rows of {int(lengths.sum()):,} ids in all")
        if len(ids) and (int(ids.min()) < self._limits.min or int(ids.max()) > self._limits.max):
            raise DataError(f"{self.stem}: ids {int(ids.min())}..{int(ids.max())} do not fit {self.dtype}")
        self._ids.write(ids.astype(self.dtype, copy=False).tobytes())
        ends = self.tokens + np.cumsum(lengths, dtype=np.int64)
        self._idx.write(ends.astype("<i8", copy=False).tobytes())
        self.rows += len(lengths)
        self.tokens += len(ids)

    def close(self) -> RaggedArray:
        """Flush, sync and rename the files to their final names; the array, mapped."""
        if not self._closed:
            for handle in (self._ids, self._idx):
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()
            os.replace(self._ids_partial, bin_path(self.stem))
            os.replace(self._idx_partial, idx_path(self.stem))
            self._closed = True
        return open_ragged(self.stem)

    def abort(self) -> None:
        """Close and remove the partial files (nothing of this array is left)."""
        if not self._closed:
            self._ids.close()
            self._idx.close()
            self._ids_partial.unlink(missing_ok=True)
            self._idx_partial.unlink(missing_ok=True)
            self._closed = True

    def __enter__(self) -> RaggedWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None):
        if kind is None:
            self.close()
        else:
            self.abort()


def save_array(path: str | Path, values: np.ndarray) -> Path:
    """Write a fixed-size array (a label per example, a split's assignment) as ``.npy``, atomically."""
    path = Path(path)
    partial = path.with_name(path.name + PARTIAL)
    with partial.open("wb") as handle:
        np.save(handle, np.asarray(values), allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    return path


def load_array(path: str | Path) -> np.ndarray:
    """An array written by :func:`save_array`, memory-mapped read-only.

    Raises:
        DataError: no such file, or not an ``.npy`` array.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such array file")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        raise DataError(f"{path}: not a numpy array file ({exc})") from None


class PairRow(NamedTuple):
    """One example of :class:`PairArrays`: its source and target ids (views of the arrays)."""

    src: np.ndarray
    tgt: np.ndarray


@dataclass(frozen=True)
class PairArrays:
    """The examples of a translation task as arrays: row i of ``src`` and of ``tgt`` is example i's token ids,
    without BOS/EOS (batching adds them).

    Raises:
        DataError: the two sides have different numbers of rows.
    """

    src: RaggedArray
    tgt: RaggedArray

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise DataError(f"{len(self.src):,} source rows but {len(self.tgt):,} target rows")

    @classmethod
    def from_rows(cls, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> PairArrays:
        """In-memory arrays of lists of ids (one per example and side)."""
        return cls(RaggedArray.from_rows(sources), RaggedArray.from_rows(targets))

    def __len__(self) -> int:
        """N, the examples."""
        return len(self.src)

    def __getitem__(self, i: int) -> PairRow:
        """Example i's ids (read from the arrays)."""
        return PairRow(self.src[i], self.tgt[i])

    @property
    def lengths(self) -> np.ndarray:
        """(N,) int64, the padded length each example needs: max(source + EOS, target + BOS or EOS)."""
        return np.maximum(self.src.lengths, self.tgt.lengths) + 1

    @property
    def num_tokens(self) -> tuple[int, int]:
        """Source and target ids in all (without EOS)."""
        return self.src.num_tokens, self.tgt.num_tokens


@dataclass(frozen=True)
class LabelledArrays:
    """The examples of a classifier or a tagger as arrays: row i of ``text`` is text i's token ids, without BOS/EOS
    (batching adds them), and its labels: ``labels[i]`` its label id (classification), or row i of ``tags`` a label
    id per token, aligned with ``text`` (tagging; -100 where a token carries none).

    Raises:
        DataError: labels of another count than the texts, or tags not aligned with them.
    """

    text: RaggedArray
    labels: np.ndarray | None = None  # (N,) int16 or int32 (memory-mapped), classification
    tags: RaggedArray | None = None  # N rows aligned with text (int16 or int32), tagging

    def __post_init__(self) -> None:
        if self.labels is not None and len(self.labels) != len(self.text):
            raise DataError(f"{self.text.name}: {len(self.labels):,} labels for {len(self.text):,} texts")
        if self.tags is not None and not self.text.aligned_with(self.tags):
            raise DataError(f"{self.tags.name}: its rows are not aligned with the tokens of {self.text.name}")

    def __len__(self) -> int:
        """N, the texts."""
        return len(self.text)
