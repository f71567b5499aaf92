"""Frozen configuration of a run's data: :class:`DataConfig` (which pairs, how to read and tokenize them),
:class:`LMDataConfig` (the text of a language model, how it is tokenized and cut into blocks), and the helpers every
frozen config of the package uses to check its fields and to be built from a TOML table or JSON.

:class:`DataConfig` maps one-to-one onto the ``[data]`` section of a TOML config file (see ``configs/*.toml``) and the
data flags of ``dotformer train``; the reader options map onto :class:`dotformer.data.read.types.CorpusOptions`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from dotformer.data.read.types import CorpusOptions
from dotformer.data.tokenize.tokenizer_files import default_kinds
from dotformer.data.tokenize.tokenizers import DEFAULT_BPE_VOCAB_SIZE
from dotformer.errors import ConfigError

TokenizerKind = Literal["char", "symbol", "bpe"]
FileTask = Literal["g2p", "translation", "exact"]
FILE_TASKS = ("g2p", "translation", "exact")
# the DataConfig fields a test file is read with (dotformer evaluate's reader flags), over a checkpoint's own
READER_FIELDS = (
    "task",
    "delimiter",
    "source_column",
    "target_column",
    "header",
    "num_columns",
    "empty_lines",
    "hf_config",
    "hf_split",
    "source_field",
    "target_field",
    "hf_data_files",
    "hf_cache_dir",
)
# DataConfig fields passed to CorpusOptions under another name (DataConfig -> CorpusOptions); the others that
# CorpusOptions has are passed under their own name
_RENAMED_READER_FIELDS = {
    "synthetic_examples": "num_examples",
    "synthetic_symbols": "vocab",
    "synthetic_min_len": "min_len",
    "synthetic_max_len": "max_len",
    "synthetic_seed": "seed",
}

_T = TypeVar("_T")


@dataclass(frozen=True)
class DataConfig:
    """Which pairs to train on, how to read them, and how to tokenize them.

    The reader options map onto :class:`dotformer.data.read.corpora.CorpusOptions` (:meth:`corpus_options`); None
    means the reader's default, written after each field.

    Raises:
        ConfigError: a field is out of range (the message names it).
    """

    kind: ClassVar[str] = "pairs"  # its data kind (dotformer.data.prepared.kinds)
    # --- the pairs ---
    dataset: str = "copy"  # "cmudict", "bible", "copy", "reverse", a TSV/CSV path, "train.src,train.tgt", "hf:NAME"
    valid: str | None = None  # validation pairs (same forms as dataset); given: nothing is split at random
    test: str | None = None  # test pairs; None: split from dataset, or no test split when valid is given
    task: FileTask | None = None  # a file's task: "g2p", "translation" (None) or "exact" (metrics, tokenizers)
    limit: int | None = None  # keep only the first N training pairs (quick experiments); valid/test files stay whole
    # --- TSV / CSV files ---
    delimiter: str | None = None  # one character, or tab/comma/semicolon/pipe/space (None: "," for .csv, else tab)
    source_column: int | str | None = None  # 0-based number or header name (None: 0 of 2 columns, or header "source")
    target_column: int | str | None = None  # 0-based number or header name (None: 1 of 2 columns, or header "target")
    header: bool | None = None  # the first row names the columns (None: yes when a column is given by name)
    num_columns: int | None = None  # columns every row must have (None: as many as the first row has)
    empty_lines: Literal["skip", "error"] | None = None  # an empty source/target: skip and count (None), or error
    # --- Hugging Face datasets ("hf:NAME_OR_PATH") ---
    hf_config: str | None = None  # the dataset's configuration, e.g. "de-en" for wmt14
    hf_split: str | None = None  # split of dataset (None: "train"), e.g. "train[:10000]"
    hf_valid_split: str | None = None  # split read for an hf: valid (None: "validation")
    hf_test_split: str | None = None  # split read for an hf: test (None: "test")
    source_field: str | None = None  # the source column or translation key (None: "source"), e.g. "de"
    target_field: str | None = None  # the target column or translation key (None: "target"), e.g. "en"
    hf_data_files: tuple[str, ...] | None = None  # data files of a generic builder (hf:json, hf:csv, ...)
    hf_cache_dir: str | None = None  # datasets' cache directory (None: its default)
    # --- tokenizers ---
    src_tokenizer: TokenizerKind | None = None  # None: the task's default (char for cmudict, bpe for bible, ...)
    tgt_tokenizer: TokenizerKind | None = None  # None: the task's default (symbol for cmudict, bpe for bible, ...)
    src_tokenizer_file: str | None = None  # an existing tokenizer: HF tokenizer.json or sentencepiece .model
    tgt_tokenizer_file: str | None = None  # the same for the target side (the same file: one shared vocabulary)
    vocab_size: int | None = None  # BPE vocabulary size (None: 8000); ignored by char/symbol tokenizers
    shared_vocab: bool | None = None  # one tokenizer for both sides (None: yes for bpe on both sides)
    # --- CMUdict ---
    strip_stress: bool = False  # cmudict: drop the stress digits of vowels (AH0 -> AH)
    # --- Bible ---
    source_module: str | None = None  # bible: the SWORD module of the source side (None: the reader's default)
    target_module: str | None = None  # bible: the SWORD module of the target side (None: the reader's default)
    test_books: tuple[str, ...] | None = None  # bible: books held out as the test split (None: a random fraction)
    sword_path: str | None = None  # bible: SWORD library root (None: $SWORD_PATH, ~/.sword, /usr/share/sword)
    bible_max_ratio: float | None = None  # bible: drop verse pairs whose length ratio exceeds this (None: 2.0)
    bible_check_alignment: bool | None = None  # bible: drop chapters numbered differently (None: yes)
    # --- copy / reverse ---
    synthetic_examples: int | None = None  # copy/reverse: number of sequences (None: 10000)
    synthetic_symbols: int | None = None  # copy/reverse: distinct symbols, at most 260 (None: 20)
    synthetic_min_len: int | None = None  # copy/reverse: shortest sequence in symbols (None: 1)
    synthetic_max_len: int | None = None  # copy/reverse: longest sequence in symbols (None: 10)
    synthetic_seed: int | None = None  # copy/reverse: seed of the sequences (None: 0)
    # --- the random split (when valid is not given) ---
    valid_fraction: float = 0.05  # share of pairs (or groups) in the validation split
    test_fraction: float = 0.05  # share of pairs (or groups) in the test split

    def __post_init__(self) -> None:
        for name in ("dataset", "valid", "test"):
            value = getattr(self, name)
            if (value is not None or name == "dataset") and (not isinstance(value, str) or not value):
                raise ConfigError(f"DataConfig.{name} must be a non-empty string, got {value!r}")
        if self.task is not None and self.task not in FILE_TASKS:
            raise ConfigError(f"DataConfig.task must be one of {', '.join(FILE_TASKS)}, got {self.task!r}")
        for name in ("src_tokenizer", "tgt_tokenizer"):
            value = getattr(self, name)
            if value is not None and value not in ("char", "symbol", "bpe"):
                raise ConfigError(f"DataConfig.{name} must be 'char', 'symbol' or 'bpe', got {value!r}")
            if value is not None and getattr(self, f"{name}_file") is not None:
                raise ConfigError(f"DataConfig: give {name} (a kind to train) or {name}_file (a file), not both")
        positive_int(self, "vocab_size", "limit", optional=True)
        for name in ("valid_fraction", "test_fraction"):
            value = getattr(self, name)
            if not (is_number(value) and 0.0 <= value < 1.0):
                raise ConfigError(f"DataConfig.{name} must be in [0, 1), got {value!r}")
        if self.valid_fraction + self.test_fraction >= 1.0:
            raise ConfigError(
                f"DataConfig: valid_fraction + test_fraction = {self.valid_fraction + self.test_fraction} leaves no "
                f"training data"
            )
        for name in ("test_books", "hf_data_files"):
            if isinstance(getattr(self, name), list):  # from TOML or JSON
                object.__setattr__(self, name, tuple(getattr(self, name)))
        try:
            options = self.corpus_options()  # the reader checks its own options
        except ConfigError as exc:
            renamed = {reader: name for name, reader in _RENAMED_READER_FIELDS.items()}
            text = re.sub(r"CorpusOptions\.(\w+)", lambda m: f"DataConfig.{renamed.get(m[1], m[1])}", str(exc))
            raise ConfigError(text.replace("CorpusOptions", "DataConfig")) from None
        object.__setattr__(self, "delimiter", options.delimiter)  # "tab" -> "\t"

    def corpus_options(self, role: Literal["train", "valid", "test"] = "train") -> CorpusOptions:
        """The reader options of the ``role`` file: every field set here, the reader's defaults for the rest.

        ``limit`` applies to the training file only; an ``hf:`` valid or test file reads ``hf_valid_split``
        ("validation") or ``hf_test_split`` ("test").

        Raises:
            ConfigError: an invalid reader option.
        """

        split = {"train": self.hf_split, "valid": self.hf_valid_split or "validation", "test": self.hf_test_split}
        if role == "test" and split["test"] is None:
            split["test"] = "test"
        own = {field.name for field in dataclasses.fields(self)}
        same_named = [field.name for field in dataclasses.fields(CorpusOptions) if field.name in own]
        fields: dict[str, Any] = {
            **{name: getattr(self, name) for name in same_named},
            **{reader: getattr(self, name) for name, reader in _RENAMED_READER_FIELDS.items()},
            "limit": self.limit if role == "train" else None,
            "hf_split": split[role],
        }
        return CorpusOptions(**{name: value for name, value in fields.items() if value is not None})

    def replace(self, **changes: Any) -> DataConfig:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def resolved(self, task: str) -> DataConfig:
        """A copy with the defaults that depend on the task filled: the tokenizer kinds (characters -> phone symbols
        for g2p, symbols for copy/reverse, characters for exact, BPE otherwise; none for a side read from a file), a
        shared vocabulary for BPE on both sides (or one file for both), and 8000 BPE tokens.

        Raises:
            ConfigError: a shared vocabulary with two kinds or two different tokenizer files.
        """

        src_default, tgt_default = default_kinds(task)
        src = None if self.src_tokenizer_file else self.src_tokenizer or src_default
        tgt = None if self.tgt_tokenizer_file else self.tgt_tokenizer or tgt_default
        if self.src_tokenizer_file or self.tgt_tokenizer_file:
            same_file = self.src_tokenizer_file == self.tgt_tokenizer_file
            if self.shared_vocab and not same_file:
                raise ConfigError("a shared vocabulary with tokenizer files needs the same file on both sides")
            shared = same_file
        else:
            shared = self.shared_vocab if self.shared_vocab is not None else (src == tgt == "bpe")
        vocab = self.vocab_size
        if vocab is None and "bpe" in (src, tgt):
            vocab = DEFAULT_BPE_VOCAB_SIZE
        if shared and src != tgt:
            raise ConfigError(f"a shared vocabulary needs one tokenizer kind for both sides, got {src} and {tgt}")
        return self.replace(src_tokenizer=src, tgt_tokenizer=tgt, shared_vocab=shared, vocab_size=vocab)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (saved in run.json and in every checkpoint)."""
        data = dataclasses.asdict(self)
        for name in ("test_books", "hf_data_files"):
            if data[name] is not None:
                data[name] = list(data[name])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "DataConfig") -> DataConfig:
        """Inverse of :meth:`to_dict`. Raises ConfigError naming an unknown key and ``source`` (e.g. a file)."""
        return config_from_dict(cls, data, source)


def data_table(table: dict[str, Any], source: str) -> dict[str, Any]:
    """A TOML ``[data]`` table with ``train = "FILE"`` read as ``dataset`` (``[data] train/valid/test`` name the
    three files, as the flags ``--data/--valid/--test`` do).

    Raises:
        ConfigError: both ``train`` and ``dataset`` are set (naming ``source``).
    """
    table = dict(table)
    if "train" in table:
        if "dataset" in table:
            raise ConfigError(f"{source} [data]: give train or dataset (the same thing), not both")
        table["dataset"] = table.pop("train")
    return table


def config_from_dict(cls: type[_T], data: dict[str, Any], source: str) -> _T:
    """Build the frozen dataclass ``cls`` from ``data``.

    Raises:
        ConfigError: an unknown key (named with ``source``, e.g. "run.toml [train]") or an invalid value.
    """
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def positive_int(config: Any, *names: str, optional: bool = False) -> None:
    for name in names:
        value = getattr(config, name)
        if optional and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{type(config).__name__}.{name} must be a positive integer, got {value!r}")


def non_negative_int(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{type(config).__name__}.{name} must be a non-negative integer, got {value!r}")


def choice(config: Any, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(config, name)
    if value not in choices:
        raise ConfigError(f"{type(config).__name__}.{name} must be one of {', '.join(choices)}, got {value!r}")


LM_TASK = "lm"
DEFAULT_BLOCK_SIZE = 128
# translation [data] keys that mean one LM key (the flags of dotformer train write them)
_ALIASES = {"src_tokenizer": "tokenizer", "tgt_tokenizer": "tokenizer", "tgt_tokenizer_file": "tokenizer_file",
            "src_tokenizer_file": "tokenizer_file", "train": "dataset"}  # fmt: skip


def one_tokenizer_section(section: dict[str, Any], source: str) -> dict[str, Any]:
    """A ``[data]`` table of a one-tokenizer config (a language model's, an encoder's) with the translation names of
    its keys read as its own (``src_tokenizer`` -> ``tokenizer``, ...) and ``shared_vocab`` dropped (always shared).

    Raises:
        ConfigError: two keys that name one field with different values (named with ``source``).
    """
    data: dict[str, Any] = {}
    for key, value in section.items():
        name = _ALIASES.get(key, key)
        if name in data and data[name] != value:
            raise ConfigError(f"{source}: {key} = {value!r} contradicts {name} = {data[name]!r}")
        data[name] = value
    data.pop("shared_vocab", None)
    return data


@dataclass(frozen=True)
class LMDataConfig:
    """Which text a language model trains on and how it is cut; frozen, validated.

    Raises:
        ConfigError: a field out of range (the message names it).
    """

    kind: ClassVar[str] = "text"  # its data kind (dotformer.data.prepared.kinds)
    dataset: str = "bible"  # "bible" (KJV), "bible:WEB", "bible:MODULE", or a UTF-8 text file
    task: str = LM_TASK  # always "lm" (it marks a language-model config)
    valid: str | None = None  # held-out text file for validation; given: nothing is split at random
    test: str | None = None  # held-out text file for testing (saved as the run's data/test.txt)
    limit: int | None = None  # keep only the first N lines of the training text (quick experiments)
    tokenizer: Literal["char", "bpe"] = "char"  # one token per character, or byte-level BPE trained on the train text
    tokenizer_file: str | None = None  # an existing tokenizer instead: HF tokenizer.json or sentencepiece .model
    vocab_size: int | None = None  # at most this many tokens (BPE: the merge budget, default 8000)
    block_size: int = DEFAULT_BLOCK_SIZE  # T, tokens of context per training block (the model's window)
    test_books: tuple[str, ...] | None = None  # bible: whole books held out as the test split
    valid_fraction: float = 0.05  # share of the lines (whole books / pieces of 100 lines) held out for validation
    test_fraction: float = 0.05  # the same for the test split (unused with test_books or a test file)
    sword_path: str | None = None  # bible: the SWORD library root (None: $SWORD_PATH, ~/.sword, /usr/share/sword)
    text_form: Literal["lines", "document"] = "lines"  # lines: each line's ids and EOS (dotformer's own models);
    # document: the text as a released tokenizer reads a file, line ends its own newline pieces (an imported model's)
    add_bos: bool = False  # document: BOS before each split's text (the families that start a text with BOS)

    def __post_init__(self) -> None:
        if self.text_form not in ("lines", "document"):
            raise ConfigError(f"text_form must be lines or document, got {self.text_form!r}")
        if self.text_form == "document" and not self.tokenizer_file:
            raise ConfigError("text_form = document reads the text as a released tokenizer does: give tokenizer_file")
        if not isinstance(self.add_bos, bool) or (self.add_bos and self.text_form != "document"):
            raise ConfigError(f"add_bos starts a document with BOS (text_form = document), got {self.add_bos!r}")
        if self.task != LM_TASK:
            raise ConfigError(f"LMDataConfig.task must be {LM_TASK!r}, got {self.task!r}")
        if self.tokenizer not in ("char", "bpe"):
            raise ConfigError(f"a language model's tokenizer must be char or bpe, got {self.tokenizer!r}")
        if not isinstance(self.block_size, int) or self.block_size < 2:
            raise ConfigError(f"block_size must be an integer >= 2 tokens, got {self.block_size!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise ConfigError(f"limit must be a positive number of lines, got {self.limit!r}")
        if self.test_books is not None:
            object.__setattr__(self, "test_books", tuple(self.test_books))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (run.json, every checkpoint's config.json, the fingerprint of its
        prepared data); a line stream's has no ``text_form`` and ``add_bos`` (it reads as it always has)."""
        data = dataclasses.asdict(self)
        data["test_books"] = list(self.test_books) if self.test_books is not None else None
        if self.text_form == "lines":
            del data["text_form"], data["add_bos"]
        return data

    @classmethod
    def from_section(cls, section: dict[str, Any], source: str = "[data]") -> LMDataConfig:
        """Build from a ``[data]`` table or the flags' values, reading the translation names of the same keys.

        Raises:
            ConfigError: an unknown key (named with ``source``), two values for one key, or a bad value.
        """
        return config_from_dict(cls, one_tokenizer_section(section, source), source)


# the encoder's tasks (masked language model, classification, tagging) and the data kind each reads
ENCODER_KINDS = {"mlm": "text", "classify": "labelled", "tag": "labelled"}
ENCODER_TASKS = tuple(ENCODER_KINDS)
DEFAULT_ENCODER_BLOCK = 128  # an encoder's example: most tokens, [BOS] and [EOS] included
_TASK_FIELDS = {"mlm_unit": "mlm", "mask_probability": "mlm", "tag_format": "tag", "label_subtokens": "tag"}


@dataclass(frozen=True)
class EncoderDataConfig:
    """The data of an encoder task: text for a masked language model (``mlm``), texts with labels (``classify``),
    sentences with a label per word (``tag``); frozen, validated.

    Raises:
        ConfigError: a field out of range, or a field of another task (the message names it).
    """

    task: Literal["mlm", "classify", "tag"] = "mlm"  # which of the three
    dataset: str = "bible"  # mlm: "bible", "bible:MODULE" or a text file; classify: a TEXT<TAB>LABEL file or "bible"
    # (verses labelled by the genre of their book); tag: a WORDS<TAB>LABELS or CoNLL-style file
    valid: str | None = None  # held-out validation file of the same form; given: nothing is split at random
    test: str | None = None  # held-out test file (saved in the run's data/)
    limit: int | None = None  # mlm: the first N training lines; classify, tag: a seeded sample of N training texts
    tokenizer: Literal["char", "bpe"] = "bpe"  # one token per character, or byte-level BPE trained on the train text
    tokenizer_file: str | None = None  # an existing tokenizer instead: HF tokenizer.json or sentencepiece .model
    vocab_size: int | None = None  # at most this many tokens (BPE: the merge budget, default 8000)
    block_size: int | None = None  # most tokens of an example, [BOS] and [EOS] included (longer texts are cut,
    # counted); None: 128, or the --init-from checkpoint's positions
    test_books: tuple[str, ...] | None = None  # bible: whole books held out as the test split
    valid_fraction: float = 0.05  # share held out for validation (whole books of the Bible; lines or texts of a file)
    test_fraction: float = 0.05  # the same for the test split (unused with test_books or a test file)
    sword_path: str | None = None  # bible: the SWORD library root (None: $SWORD_PATH, ~/.sword, /usr/share/sword)
    mlm_unit: Literal["lines", "blocks"] = "lines"  # mlm: one line an example, or blocks of running text
    mask_probability: float = 0.15  # mlm: share of the tokens masked (BERT: 80% [MASK], 10% random, 10% kept)
    tag_format: Literal["conll", "tsv"] | None = None  # tag: the file's form (None: from the file)
    label_subtokens: Literal["first", "all"] = "first"  # tag: a word's label on its first token, or on all of them

    def __post_init__(self) -> None:
        choice(self, "task", ENCODER_TASKS)
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError(f"EncoderDataConfig.dataset must be a non-empty string, got {self.dataset!r}")
        choice(self, "tokenizer", ("char", "bpe"))
        choice(self, "mlm_unit", ("lines", "blocks"))
        choice(self, "label_subtokens", ("first", "all"))
        if self.tag_format is not None:
            choice(self, "tag_format", ("conll", "tsv"))
        block = self.block_size
        if block is not None and (not isinstance(block, int) or isinstance(block, bool) or block < 3):
            raise ConfigError(f"block_size must be an integer >= 3 tokens, got {block!r}")
        positive_int(self, "limit", "vocab_size", optional=True)
        if not (is_number(self.mask_probability) and 0.0 < self.mask_probability < 1.0):
            raise ConfigError(f"mask_probability must be in (0, 1), got {self.mask_probability!r}")
        for name in ("valid_fraction", "test_fraction"):
            value = getattr(self, name)
            if not (is_number(value) and 0.0 <= value < 1.0):
                raise ConfigError(f"{name} must be in [0, 1), got {value!r}")
        if self.test_books is not None:
            object.__setattr__(self, "test_books", tuple(self.test_books))

    @property
    def kind(self) -> str:
        """Its data kind: running text (mlm) or labelled texts (classify, tag)."""
        return ENCODER_KINDS[self.task]

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (run.json, every checkpoint's config.json)."""
        data = dataclasses.asdict(self)
        data["test_books"] = list(self.test_books) if self.test_books is not None else None
        return data

    @classmethod
    def from_section(cls, section: dict[str, Any], source: str = "[data]") -> EncoderDataConfig:
        """Build from a ``[data]`` table or the flags' values, reading the translation names of the same keys.

        Raises:
            ConfigError: an unknown key (named with ``source``), a key of another encoder task set (to anything but
                its default), two values for one key, or a bad value.
        """
        data = one_tokenizer_section(section, source)
        task = data.get("task", "mlm")
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for name, owner in _TASK_FIELDS.items():
            if name in data and owner != task and data[name] != defaults[name]:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{source}: {name} ({flag}) is for --task {owner}, not {task}")
        return config_from_dict(cls, data, source)
