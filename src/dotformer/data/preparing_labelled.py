"""Preparing a classifier's or a tagger's data once: labelled texts read in passes, split, their label names taken
from the training split, one tokenizer learned on a sample, every text encoded in chunks into memory-mapped arrays
with its labels (the ``labelled`` kind of :mod:`dotformer.data.prepared`).

The passes are a text's (:mod:`dotformer.data.preparing`), over a
:class:`~dotformer.data.labelled_text.LabelledReader` (a file streamed a block at a time; the Bible's verses with
their genres), holding a chunk at a time, never the corpus:

1. **count**: the texts, and the Bible's books; the split is dealt as a language model's text is
   (:func:`~dotformer.data.preparing.held_out_split`: given valid/test files, or whole books of the Bible held out,
   ``test_books`` or at random; each text of a file on its own), and ``limit`` keeps a seeded sample of the training
   texts (a file's first lines may all have one label);
2. **labels**: the label names are the training split's, sorted (a tagger's: of its words); a held-out text whose
   label is not among them is refused here, before anything is written (the model could not predict it);
3. **sample** (only when a tokenizer is learned): as a text's;
4. **encode**: each text's ids (no BOS/EOS: batching adds them, and cuts a text to the block size then), and its
   label id (``SPLIT.labels.npy``) or a label per token aligned with its ids (``SPLIT.tags``: each word's label on
   its first real token, or on every one, :mod:`dotformer.data.words`; -100 elsewhere); the valid and test texts
   are written beside them as ``TEXT<TAB>LABEL`` (``WORDS<TAB>LABELS``) lines, what ``evaluate`` scores.

No torch here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from dotformer.data.arrays import save_array, token_dtype
from dotformer.data.config import EncoderDataConfig
from dotformer.data.fingerprint import InputFile, fingerprint
from dotformer.data.labelled_text import (
    LabelledReader,
    LabelledText,
    LabelledTexts,
    label_vocabulary,
    labels_of,
    read_labelled,
    unknown_label,
)
from dotformer.data.prepared import (
    FORMAT_VERSION,
    SPLIT_FILE,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    UNUSED,
    PreparedLabelled,
    open_prepared,
)
from dotformer.data.preparing import (
    CHUNK_EXAMPLES,
    DEFAULT_SAMPLE_LINES,
    check_sizes,
    check_unknown_share,
    chunks,
    finish,
    held_out_split,
    inputs_of,
    scan_source,
    settings_of,
    text_tokenizer,
    tokenizer_report,
)
from dotformer.data.splits import SPLIT_NAMES, TEST, TRAIN, VALID
from dotformer.data.tokenizers import UNK_ID, EncodedChunk, Tokenizer
from dotformer.data.words import WordPieces, token_labels
from dotformer.data.writing import SplitWriters, writing_directory
from dotformer.errors import ConfigError, DataError

LABEL_DTYPE = np.dtype(np.int16)  # a label id (and -100, no label) of up to 32,767 labels; int32 beyond
NO_LABEL = -1  # the label id of a text left out (past a limit), whose label no name may have


def prepare_labelled(
    config: EncoderDataConfig,
    seed: int,
    directory: str | Path,
    tokenizer: Tokenizer | None = None,
    *,
    sample_lines: int = DEFAULT_SAMPLE_LINES,
    chunk: int = CHUNK_EXAMPLES,
    inputs: list[InputFile] | None = None,
) -> PreparedLabelled:
    """Prepare the labelled texts of a classifier or a tagger into ``directory`` (a new or empty directory) and map
    them (the passes are in the module docstring).

    Args:
        config: the data config of task ``classify`` or ``tag`` (its block size is not used: texts are cut when
            batched).
        seed: the seed of a random split and of a ``limit``'s sample.
        directory: where the prepared data goes.
        tokenizer: use this tokenizer instead of learning or reading one (fine-tuning an encoder).
        sample_lines, chunk, inputs: as :func:`~dotformer.data.preparing.prepare_pairs`.

    Raises:
        ConfigError: another task, test books of a source that is no Bible, unknown books, a directory that is not
            empty. DataError / MissingDataError: a source that cannot be read (FILE:LINE), no texts left for
            training, fewer than two training labels, a held-out label the training texts lack, a word that
            encodes to whitespace only, or a tokenizer file that reads more than half of the training text as <unk>.
    """
    if config.task not in ("classify", "tag"):
        raise ConfigError(f"labelled texts are prepared for --task classify or tag, not {config.task}")
    started = time.monotonic()
    check_sizes(sample_lines, chunk)
    inputs = inputs_of(config) if inputs is None else inputs
    settings = settings_of(config, seed, tokenizer, sample_lines)
    reader = LabelledReader(config.dataset, config.task, config.sword_path, config.tag_format)
    scan = scan_source(reader, None)
    given = {
        role: read_labelled(getattr(config, role), config.task, config.sword_path, config.tag_format)
        for role in ("valid", "test")
        if getattr(config, role)
    }
    split, info = held_out_split(scan, reader, config, seed, given, "texts")
    if config.limit is not None:  # a seeded sample of the training texts (a file's head may be one label)
        train = np.flatnonzero(split == TRAIN)
        if config.limit < len(train):
            keep = np.zeros(len(train), dtype=bool)
            keep[random.Random(seed).sample(range(len(train)), config.limit)] = True
            split[train[~keep]] = UNUSED
        info["limit"] = config.limit
    names = _label_names(reader, scan.used, split, given, config)
    with writing_directory(Path(directory)) as partial:
        save_array(partial / SPLIT_FILE, split)
        texts = (item.text for item, _ in reader.records())
        tokenizer, sample = text_tokenizer(partial, config, texts, scan.used, split, tokenizer, sample_lines)
        written = _encode_labelled(partial, reader, scan.used, split, given, tokenizer, names, config, chunk)
        check_unknown_share(config, written["train"])
        for name in (SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE):
            tokenizer.save(partial / name)
        counts = {name: written[name]["examples"] for name in SPLIT_NAMES}
        how = "given files" if not info["random"] else f"held out at random (seed {seed})"
        limit = f" (--limit keeps a sample of {config.limit:,}, seed {seed})" if config.limit else ""
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        lines = [
            f"labelled texts {reader.name}: {scan.count:,} texts; {how}: {counts['train']:,} train / "
            f"{counts['valid']:,} valid / {counts['test']:,} test texts{limit}; {len(names)} labels: {shown}",
            sample["line"],
        ]
        report = {
            "format": FORMAT_VERSION,
            "kind": "labelled",
            "fingerprint": fingerprint(settings, inputs),
            "task": config.task,
            "seed": seed if settings["seed"] is not None else None,
            "data": config.to_dict(),
            "corpus": {"name": reader.name, "report": scan.report},
            "given": {role: {"name": texts.name, "report": texts.report} for role, texts in given.items()},
            "split": info,
            "labels": names,
            "tokenizers": tokenizer_report(tokenizer, tokenizer, sample),
            "splits": written,
        }
        finish(partial, report, lines, started, inputs, Path(directory))
    return open_prepared(directory)  # type: ignore[return-value]


def _label_names(
    reader: LabelledReader, used: int, split: np.ndarray, given: dict[str, LabelledTexts], config: EncoderDataConfig
) -> list[str]:
    """Pass 2: the training split's labels, sorted; every held-out text's label checked against them.

    Raises:
        DataError: fewer than two training labels, or a held-out label the training texts lack (naming the split).
    """
    train: set[str] = set()
    held: dict[int, set[str]] = {VALID: set(), TEST: set()}
    for i, (item, _) in enumerate(islice(reader.records(), used)):
        code = int(split[i])
        if code == TRAIN:
            train.update(labels_of(item.label))
        elif code in held:
            held[code].update(labels_of(item.label))
    names = label_vocabulary(train, f"{config.dataset} (the training split)")
    known = set(names)
    for code, role in ((VALID, "valid"), (TEST, "test")):
        if role in given:
            texts = given[role]
            unknown = [label for item in texts.labels for label in labels_of(item) if label not in known]
            where = texts.name
        else:
            unknown, where = sorted(held[code] - known), reader.name
        if unknown:
            raise unknown_label(unknown[0], names, f"{where} (the {role} split)")
    return names


def _encode_labelled(
    directory: Path, reader: LabelledReader, used: int, split: np.ndarray, given: dict[str, LabelledTexts],
    tokenizer: Tokenizer, names: list[str], config: EncoderDataConfig, chunk: int,
) -> dict[str, Any]:  # fmt: skip
    """Pass 4: every text's ids and labels into its split's arrays, the valid/test texts written as lines; per split
    the texts and tokens, and the training tokens read as <unk> (how many, and their share)."""
    index = {name: i for i, name in enumerate(names)}
    label_dtype = LABEL_DTYPE if len(names) <= np.iinfo(LABEL_DTYPE).max else np.dtype(np.int32)
    tagging = config.task == "tag"
    pieces = WordPieces(tokenizer) if tagging else None

    def encode(items: Sequence[LabelledText], where: str) -> tuple[tuple[EncodedChunk, ...], np.ndarray | None]:
        """The ids of ``items`` (and a tagger's labels per token; or a classifier's label per text)."""
        if pieces is None:
            labels = np.fromiter((index.get(item.label, NO_LABEL) for item in items), np.int64, len(items))
            return (tokenizer.encode_arrays([item.text for item in items]),), labels
        try:
            tokens = pieces.encode_sentences([item.text.split() for item in items])
        except DataError as exc:
            raise DataError(f"{where}: {exc}; a word needs a token to carry its label") from None
        word_labels = _word_labels((item.label for item in items), index, len(tokens.word_lengths))
        return (tokens.ids, token_labels(tokens, word_labels, config.label_subtokens)), None

    sides = ("text", "tags") if tagging else ("text",)
    dtypes = (token_dtype(tokenizer.vocab_size), label_dtype)[: len(sides)]
    unknown = tokens = 0
    with SplitWriters(directory, sides, dtypes, "labelled", None if tagging else label_dtype) as out:
        start = 0
        for items in chunks((item for item, _ in islice(reader.records(), used)), chunk):
            codes = split[start : start + len(items)]
            start += len(items)
            encoded, labels = encode(items, reader.name)
            train = np.repeat(codes == TRAIN, encoded[0].lengths)
            unknown += int((encoded[0].ids[train] == UNK_ID).sum())
            tokens += int(train.sum())
            for code, name in enumerate(SPLIT_NAMES):
                out.write(name, codes == code, encoded, items if name not in given else (), labels)
        for role, texts in given.items():
            rows = [LabelledText(text, label) for text, label in zip(texts.texts, texts.labels, strict=True)]
            for items in chunks(rows, chunk):
                encoded, labels = encode(items, texts.name)
                out.write(role, np.ones(len(items), dtype=bool), encoded, items, labels)
    summary = out.summary()
    summary["train"].update(unknown=unknown, unknown_share=unknown / tokens if tokens else 0.0)
    return summary


def _word_labels(labels: Iterable[list[str]], index: dict[str, int], words: int) -> np.ndarray:
    """(W,) int64, the label id of every word of a chunk's sentences (:data:`NO_LABEL` for one no name has)."""
    return np.fromiter((index.get(label, NO_LABEL) for sentence in labels for label in sentence), np.int64, words)


__all__ = ["prepare_labelled"]
