"""Ragged token arrays on disk: round trips, dtypes, chunked and atomic writes, damaged files named; the fast batch
encoders of every tokenizer kind equal the plain ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dotformer.data.prepared.arrays import (
    PairArrays,
    RaggedArray,
    RaggedWriter,
    bin_path,
    idx_path,
    load_array,
    open_ragged,
    save_array,
    token_dtype,
)
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.errors import DataError

ROWS = st.lists(st.lists(st.integers(0, 70_000), max_size=12), max_size=40)


def append_rows(writer: RaggedWriter, rows: list[list[int]]) -> None:
    """Append ``rows`` as a kind's encoder appends a chunk: all ids one after the other, and each row's length."""
    chunk = RaggedArray.from_rows(rows)
    writer.append(chunk.ids, chunk.lengths)


def written(stem: Path, rows: list[list[int]]) -> RaggedArray:
    """``rows`` written as uint16 by a :class:`RaggedWriter` (as a kind's preparation writes them), mapped back."""
    with RaggedWriter(stem, np.uint16) as writer:
        append_rows(writer, rows)
    return open_ragged(stem)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=ROWS, cut=st.integers(0, 40))
def test_rows_written_in_chunks_and_mapped_back_are_equal(tmp_path: Path, rows: list[list[int]], cut: int) -> None:
    """Random ragged ints -> written in two chunks -> memory-mapped: the same rows, lengths and dtype."""
    vocab = max((i for row in rows for i in row), default=0) + 1
    stem = tmp_path / f"a{len(rows)}-{cut}"
    with RaggedWriter(stem, token_dtype(vocab)) as writer:
        append_rows(writer, rows[:cut])
        append_rows(writer, rows[cut:])
    array = open_ragged(stem)
    assert [row.tolist() for row in array] == rows
    assert array.lengths.tolist() == [len(row) for row in rows] and len(array) == len(rows)
    assert array.ids.dtype == (np.uint16 if vocab <= 1 << 16 else np.int32)
    assert bin_path(stem).stat().st_size == array.num_tokens * array.ids.dtype.itemsize
    if array.num_tokens:
        assert isinstance(array.ids, np.memmap) and not array.ids.flags.writeable


def test_dtype_is_the_smallest_that_holds_the_vocabulary() -> None:
    assert token_dtype(65_536) == np.uint16 and token_dtype(65_537) == np.int32


def test_an_id_that_does_not_fit_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="do not fit uint16"), RaggedWriter(tmp_path / "a", np.uint16) as writer:
        append_rows(writer, [[1, 2], [70_000]])
    assert list(tmp_path.iterdir()) == []  # no partial file, no final file


def test_an_unfinished_write_leaves_no_array_that_opens(tmp_path: Path) -> None:
    writer = RaggedWriter(tmp_path / "a", np.uint16)
    append_rows(writer, [[1, 2, 3]])
    with pytest.raises(DataError, match="no such array file"):
        open_ragged(tmp_path / "a")  # only .partial files so far
    assert writer.close()[0].tolist() == [1, 2, 3]


def test_damaged_files_are_named(tmp_path: Path) -> None:
    written(tmp_path / "a", [[5, 6], [7]])
    bin_path(tmp_path / "a").write_bytes(b"\0\0")  # one id where the index says three
    with pytest.raises(DataError, match=r"a\.bin: 2 bytes, but a\.idx says 3 ids of 2 bytes"):
        open_ragged(tmp_path / "a")
    idx_path(tmp_path / "a").write_bytes(b"not an index at all")
    with pytest.raises(DataError, match="not a dotformer array index"):
        open_ragged(tmp_path / "a")


def test_labels_per_token_are_aligned_and_labels_per_example_saved(tmp_path: Path) -> None:
    ids = written(tmp_path / "ids", [[4, 5], [], [6, 7, 8]])
    tags = written(tmp_path / "tags", [[1, 0], [], [0, 0, 2]])
    assert ids.aligned_with(tags) and not ids.aligned_with(RaggedArray.from_rows([[1], [], [0, 0, 2]]))
    save_array(tmp_path / "labels.npy", np.array([3, 1, 2], dtype=np.int32))
    labels = load_array(tmp_path / "labels.npy")
    assert labels.tolist() == [3, 1, 2] and isinstance(labels, np.memmap)


def test_pair_arrays_lengths_are_the_padded_lengths() -> None:
    pairs = PairArrays.from_rows([[4, 5, 6], [], [7]], [[8], [9, 10], []])
    assert pairs.lengths.tolist() == [4, 3, 2]  # max(source, target) + 1
    assert pairs[1].tgt.tolist() == [9, 10] and len(pairs) == 3
    with pytest.raises(DataError, match="3 source rows but 2 target rows"):
        PairArrays.from_rows([[1], [2], [3]], [[1], [2]])


TEXTS = st.lists(st.text(alphabet="ab cé€😀\t", max_size=20), max_size=30)


@pytest.mark.parametrize("kind", ["char", "symbol", "bpe"])
@settings(max_examples=25, deadline=None)
@given(texts=TEXTS)
def test_the_fast_batch_encoders_equal_the_plain_ones(kind: str, texts: list[str]) -> None:
    tokenizer = train_tokenizer(kind, ["ab cé", "€ a b", "c c a"], 300 if kind == "bpe" else None)
    chunk = tokenizer.encode_arrays(texts)
    rows = [tokenizer.encode(text) for text in texts]
    assert chunk.ids.tolist() == [i for row in rows for i in row]
    assert chunk.lengths.tolist() == [len(row) for row in rows]
    with_eos = chunk.with_eos()
    assert with_eos.ids.tolist() == [i for row in rows for i in [*row, EOS_ID]]
