"""Running text (a language model's :class:`~dotformer.data.config.LMDataConfig`, a masked language model's
:class:`~dotformer.data.config.EncoderDataConfig` of task ``mlm``): one tokenizer, each line its ids and EOS, a
split's rows one after the other its token stream; the held-out lines kept as ``valid.txt`` and ``test.txt``, each
split's characters counted (bits per character). A masked language model's text differs by its tokenizer, which has
a mask token (in the fingerprint).

An imported model's text (``text_form = "document"``, set by ``train --task lm --init-from IMPORTED``) is read as
its released tokenizer reads a file: each split's lines, every one ending in ``"\\n"``, encoded as one document (a
chunk of lines at a time: :meth:`~dotformer.data.tokenize.tokenizers.Tokenizer.encode_document`), so a line end is the
tokenizer's own newline piece, never dotformer's EOS (a row an imported model holds down); and, where its family
starts a text with BOS (``add_bos``), BOS once at the start of each split's text: BOS per document, as continued
pretraining does (HF's ``run_clm``, litgpt) and as ``evaluate --task lm`` scores a file, not per training block (a
block cut from the middle of the text starts without it, as an evaluated one does). Both settings are in the
fingerprint, so a cache of line-stream text is never reused for a document, and a line stream's config leaves them
out (:meth:`~dotformer.data.config.LMDataConfig.to_dict`), so its fingerprint is what it was. No torch here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dotformer.data.config import LM_TASK, EncoderDataConfig, LMDataConfig
from dotformer.data.prepared.arrays import RaggedArray, token_dtype
from dotformer.data.prepared.fingerprint import InputFile, text_inputs
from dotformer.data.prepared.layout import REPORT_FILE, UNUSED, PreparedData, SplitName
from dotformer.data.prepared.skeleton import (
    DataKind,
    Reading,
    UnknownCount,
    chunks,
    held_out_split,
    scan_source,
    tokenizer_report,
    training_chunks,
)
from dotformer.data.prepared.splits import SPLIT_NAMES, TRAIN
from dotformer.data.prepared.writing import SplitWriters
from dotformer.data.read.text_corpus import TextReader, pieces, read_file_text
from dotformer.data.tokenize.tokenizer_files import TokenizerPair
from dotformer.data.tokenize.tokenizers import Tokenizer
from dotformer.errors import ConfigError, DataError

# a task's data config fields decided when batching, so no part of its prepared data: a language model's block size,
# a masked language model's unit and masking (and the most tokens it reads)
BATCH_TIME_FIELDS = {LM_TASK: ("block_size",), "mlm": ("block_size", "mlm_unit", "mask_probability")}


@dataclass(frozen=True)
class PreparedText(PreparedData):
    """Prepared text of a language model or a masked language model (task ``mlm``: its tokenizer has a mask token):
    its tokenizer and, per split, its lines as one mapped token stream.

    Attributes:
        directory, report: the prepared directory, its ``prepared.json``.
        tokenizer: the one tokenizer.
        splits: ``"train"``, ``"valid"``, ``"test"`` -> :class:`~dotformer.data.prepared.arrays.RaggedArray` whose rows
            are the lines (ids, then EOS; a document's: the pieces that start in the line, BOS first when its family
            adds one); its ``ids`` are the split's token stream.
    """

    held_out_suffix = "txt"
    batch_time_fields = BATCH_TIME_FIELDS
    directory: Path
    report: dict[str, Any]
    tokenizer: Tokenizer
    splits: dict[str, RaggedArray]

    @property
    def data_config(self) -> LMDataConfig | EncoderDataConfig:
        """The data config it was prepared from (its block size is the one given then: blocks are cut later); a
        masked language model's :class:`EncoderDataConfig`."""
        return self._config(self.report["data"], str(self.directory / REPORT_FILE))

    def _config(self, data: dict[str, Any], where: str = "[data]") -> LMDataConfig | EncoderDataConfig:
        """The data config of the task it was prepared for, from ``data``."""
        return (LMDataConfig if self.task == LM_TASK else EncoderDataConfig).from_section(data, where)

    def same_setting(self, key: str, value: Any) -> bool:
        """Whether ``key = value`` leaves the data settings as they were prepared (the task's config compared, its
        defaults filled in); a value the config refuses is another setting."""
        own = self.report["data"]
        try:
            return self._config({**own, key: value}) == self._config(own)
        except ConfigError:
            return False

    def stream(self, split: SplitName) -> np.ndarray:
        """(N,) the token stream of ``split`` (every line's ids and EOS, in order), memory-mapped."""
        return self.splits[split].ids

    def characters(self, split: SplitName) -> int:
        """C, the characters of ``split``, each line end counted as one (bits per character need it)."""
        return int(self.report["splits"][split]["characters"])

    def training_lines(self) -> Iterator[str]:
        """The training lines as text, in order, read again from the text (for a peer that trains on the same text).

        Raises:
            DataError: the text changed since it was prepared.
        """

        self._check_inputs()
        config = self.data_config
        yield from self._training_records(TextReader(config.dataset, config.sword_path).records())


class TextKind(DataKind):
    """Running text: read in passes (:class:`~dotformer.data.read.text_corpus.TextReader`: a file, or the Bible's
    verses), whole groups (Bible books, or pieces of 100 lines) held out with the seed, or given files; ``limit`` keeps
    the first lines of the training split.

    Args:
        config: the text, held-out files, tokenizer settings (what is decided when batching is not used: the block
            size, a masked language model's unit and masking).
    """

    name = "text"
    unit = "lines"
    handle = PreparedText
    held_out_suffix = "txt"
    counts_characters = True
    config: LMDataConfig | EncoderDataConfig

    @property
    def masked(self) -> bool:
        """Whether it is a masked language model's text (its tokenizer has a mask token)."""
        return self.config.task != LM_TASK

    def inputs(self) -> list[InputFile]:
        return text_inputs(self.config)

    @property
    def document(self) -> bool:
        """Whether the text is read as a released tokenizer reads a document (an imported model's text)."""
        return getattr(self.config, "text_form", "lines") == "document"

    def read(self, seed: int) -> Reading:

        config = self.config
        source = TextReader(config.dataset, config.sword_path)
        scan = scan_source(source, None)
        if scan.used == 0:
            raise DataError(f"{config.dataset}: no lines to train on")
        if source.groups is None:  # a file: pieces of PIECE_LINES lines, fewer in a short file
            scan.group_of, scan.group_names = pieces(scan.used)
        given = {
            role: read_file_text(getattr(config, role)).lines for role in ("valid", "test") if getattr(config, role)
        }
        split, info = held_out_split(scan, source, config, seed, given, "lines")
        if config.limit is not None:
            train = np.flatnonzero(split == TRAIN)
            split[train[config.limit :]] = UNUSED
            info["limit"] = config.limit
        return Reading(source, scan, split, given, info)

    def encode(self, directory: Path, reading: Reading, tokenizers: TokenizerPair, chunk: int) -> dict[str, Any]:
        """Every line's ids and EOS into its split's array (a document: the split's lines of a chunk encoded as one
        text, a row per line, BOS first in the split when ``add_bos``), the valid/test lines written as text; per
        split the lines, tokens and characters, and the training tokens read as <unk> (how many, and their share of
        the training tokens but the line ends).

        Raises:
            DataError: a tokenizer file that reads more than half of the training text as <unk>.
        """
        given, tokenizer, unknown = reading.given, tokenizers.src, UnknownCount()
        with SplitWriters(directory, ("text",), (token_dtype(tokenizer.vocab_size),), self) as out:
            if self.document:
                self._encode_document(out, reading, tokenizer, chunk, unknown)
            else:
                for lines, codes in training_chunks(reading, chunk):
                    encoded = tokenizer.encode_arrays(lines)
                    unknown.add(encoded, codes == TRAIN)
                    for code, name in enumerate(SPLIT_NAMES):
                        out.write(name, codes == code, (encoded.with_eos(),), lines if name not in given else ())
                for role, held_out in given.items():
                    for lines in chunks(held_out, chunk):
                        out.write(
                            role, np.ones(len(lines), dtype=bool), (tokenizer.encode_arrays(lines).with_eos(),), lines
                        )
        return unknown.checked(self.config, out.summary())

    def _encode_document(
        self, out: SplitWriters, reading: Reading, tokenizer: Tokenizer, chunk: int, unknown: UnknownCount
    ) -> None:
        """Write each split's lines as one document (module docstring): per chunk, the lines of each split encoded
        together, a row per line; BOS before a split's first line when ``add_bos``; the training tokens counted in
        ``unknown``."""
        add_bos = bool(getattr(self.config, "add_bos", False))
        started: set[str] = set()

        def write(name: str, lines: list[str], keep_text: bool) -> None:
            if not lines:
                return
            encoded = tokenizer.encode_document(lines)
            if add_bos and name not in started:
                encoded = encoded.with_bos()
            started.add(name)
            if name == SPLIT_NAMES[TRAIN]:
                unknown.add(encoded, np.ones(len(lines), dtype=bool))
            out.write(name, np.ones(len(lines), dtype=bool), (encoded,), lines if keep_text else ())

        for lines, codes in training_chunks(reading, chunk):
            for code, name in enumerate(SPLIT_NAMES):
                write(
                    name, [line for line, c in zip(lines, codes, strict=True) if c == code], name not in reading.given
                )
        for role, held_out in reading.given.items():
            for lines in chunks(held_out, chunk):
                write(role, list(lines), True)

    def report(
        self, reading: Reading, written: dict[str, Any], tokenizers: TokenizerPair, sample: dict[str, Any], seed: int
    ) -> tuple[dict[str, Any], list[str]]:
        config, source, info = self.config, reading.source, reading.info
        counts = {name: written[name]["examples"] for name in SPLIT_NAMES}
        how = "given files" if not info["random"] else f"whole groups held out at random (seed {seed})"
        lines = [
            f"text {source.name}: {reading.scan.count:,} lines; {how}: {counts['train']:,} train / "
            f"{counts['valid']:,} valid / "
            f"{counts['test']:,} test lines" + (f" (--limit keeps the first {config.limit:,})" if config.limit else ""),
            sample["line"],
        ]
        body = {
            "data": config.to_dict(),
            "corpus": {"name": source.name, "report": {**source.report, "lines": reading.scan.count}},
            "split": info,
            "tokenizers": tokenizer_report(tokenizers.src, tokenizers.tgt, sample),
            "splits": written,
        }
        return body, lines

    @classmethod
    def mapped(
        cls, directory: Path, report: dict[str, Any], tokenizers: TokenizerPair, arrays: dict[str, dict[str, Any]]
    ) -> PreparedText:
        return PreparedText(directory, report, tokenizers.src, {split: arrays[split]["text"] for split in SPLIT_NAMES})
