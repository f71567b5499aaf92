"""The language-model task (``lm``): the lesson's decoder alone, trained GPT-style on running text.

The text is read and split by :mod:`dotformer.data.text` (given files, or whole books / pieces of a file held out,
seeded), one tokenizer is trained on the training text (characters or byte-level BPE) or read from a file, and the
model is built decoder-only with ``max_len`` = the block size (its positions are those it trained on; generation
reads at most that many tokens). Batches are contiguous blocks of the text (:mod:`dotformer.data.blocks`). The
defaults are the shipped ``lm-bible`` config's ``[model]`` and ``[train]`` (a 128-wide pre-LN model, a constant
learning rate with a cooldown, no label smoothing, so that the validation loss is the NLL bits per character are
computed from).

In the run directory, ``RUN/data`` holds train.txt, valid.txt, test.txt (one line each), split.json, and the one
tokenizer as tokenizer_src.json and tokenizer_tgt.json (the names checkpoints use).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.data.config import LM_TASK, LMDataConfig
from dotformer.errors import ConfigError, DataError
from dotformer.runs.pairs import record_data_config
from dotformer.runs.task import EvalReport, EvalRequest, Loaded, Prepared, Task, run_split_file

if TYPE_CHECKING:
    from dotformer.data.text import TextSplits
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.decoding.engine import TranslationEngine
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.finetune import InitSource

SPLIT_NAMES = ("train", "valid", "test")
RECIPE = "lm-bible"  # the shipped config whose [model] and [train] are a language model's defaults
ANY_VOCAB_SIZE = 1 << 20  # the vocabulary size of the model config checked before the text is read


class LanguageModelTask(Task):
    """A decoder-only language model of one text."""

    name = LM_TASK
    title = "a language model"
    decodes = False

    def data_config(self, section: dict[str, Any], source: str) -> LMDataConfig:
        return LMDataConfig.from_section(section, source)

    def defaults(self, fine_tuning: bool = False) -> ConfigSections:
        from dotformer.runs.config_files import recipe_defaults

        return recipe_defaults(RECIPE, fine_tuning)

    def default_run_dir(self, data: LMDataConfig, model_section: dict[str, Any]) -> Path:
        return Path("runs") / f"{Path(data.dataset.replace(':', '-')).stem}-lm"

    def check_model(self, model_section: dict[str, Any], data: LMDataConfig) -> None:
        lm_model_config(model_section, ANY_VOCAB_SIZE, data.block_size)

    def prepare(
        self, data: LMDataConfig, seed: int, init: InitSource | None, extend_vocab: bool, progress: bool
    ) -> tuple[Prepared, InitSource | None]:
        from dotformer.data.tokenizer_files import TokenizerPair

        splits, corpus = make_lm_splits(data, seed)
        tokenizer = make_lm_tokenizer(data, splits.train)
        return Prepared(data, corpus, TokenizerPair(tokenizer, tokenizer), [], splits), init

    def save(self, prepared: Prepared, data_dir: Path) -> None:
        from dotformer.checkpoint import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE

        save_text_splits(prepared.splits, data_dir)
        for name in (SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE):
            prepared.tokenizers.tgt.save(data_dir / name)

    def model_config(self, model_section: dict[str, Any], prepared: Prepared) -> tuple[ModelConfig, str | None]:
        return lm_model_config(model_section, prepared.tokenizers.tgt.vocab_size, prepared.data.block_size)

    def load(self, run_dir: Path, record: dict[str, Any]) -> Loaded:
        from dotformer.checkpoint import TGT_TOKENIZER_FILE
        from dotformer.data.blocks import check_training_stream, encode_text
        from dotformer.data.tokenizer_files import load_tokenizer
        from dotformer.training.state import TrainData

        data_dir = run_dir / "data"
        data = record_data_config(self, record, run_dir)
        tokenizer = load_tokenizer(data_dir / TGT_TOKENIZER_FILE)
        train_lines, valid_lines = load_text_split(data_dir, "train"), load_text_split(data_dir, "valid")
        T = data.block_size
        train = encode_text(train_lines, tokenizer, T)
        check_training_stream(train)  # before the data line: an error is one line
        train_data = TrainData(
            train=train, valid=encode_text(valid_lines, tokenizer, T), src_tokenizer=tokenizer, tgt_tokenizer=tokenizer
        )
        line = (
            f"{len(train_lines):,} train lines ({train.characters:,} characters, {len(train):,} tokens), "
            f"{len(valid_lines):,} valid lines; blocks of {T} tokens"
        )
        return Loaded(data, train_data, [line])

    def evaluate(self, engine: TranslationEngine, request: EvalRequest) -> EvalReport:
        """Perplexity, nats and bits per token and bits per character of a text file or the run's held-out text
        (its first ``limit`` lines), read as one stream and scored block by block with the training block size
        (:func:`dotformer.metrics.language.score_text`).

        Raises:
            ConfigError: a ``limit`` below 1. CheckpointError: no run directory and no ``data``. DataError /
                MissingDataError: an unreadable or empty text.
        """
        from dotformer.data.text import read_text_corpus
        from dotformer.metrics.language import score_text
        from dotformer.training.progress import count

        loaded: Any = engine.checkpoint  # the torch engine's loaded checkpoint: its model scores the text

        if request.data is not None:
            lines, where = read_text_corpus(request.data).lines, request.data
        else:
            path = run_split_file(loaded.path, f"{request.split}.txt")
            lines, where = load_text_split(path.parent, request.split), str(path)
        if not lines:
            raise DataError(f"{where} holds no text to score")
        if request.limit is not None:
            if request.limit < 1:
                raise ConfigError(f"--limit must be a positive number of lines, got {request.limit}")
            shown = f"the first {min(request.limit, len(lines)):,} of {count(len(lines), 'line')}"
            lines = lines[: request.limit]
        else:
            shown = count(len(lines), "line")
        block = loaded.context_window
        batch_tokens = request.batch_size * block  # B blocks a batch
        score = score_text(loaded.model, lines, loaded.tgt_tokenizer, block, batch_tokens)
        description = f"({shown}, {score.tokens:,} tokens scored), task lm, blocks of {block} tokens"
        table = (
            f"perplexity {score.perplexity:.3f}  nats/token {score.nats_per_token:.4f}  bits/token "
            f"{score.bits_per_token:.4f}  bits/char {score.bits_per_character:.4f}"
        )
        return EvalReport(where, description, table, payload=score.to_dict())

    def summary(self, run_dir: Path, best_valid_loss: float | None) -> str:
        bits = valid_bits_per_character(run_dir, best_valid_loss)
        return f"; valid {bits:.3f} bits/char" if bits is not None else ""


def lm_model_config(model_section: dict[str, Any], vocab_size: int, block_size: int) -> tuple[ModelConfig, str]:
    """The decoder-only ModelConfig: the preset (default "small") + the section's fields, ``max_len`` = the block size
    unless set.

    Raises:
        ConfigError: an unknown preset, an ``arch`` other than decoder-only, a ``max_len`` below the block size, or
            an invalid field.
    """
    section = dict(model_section)
    preset = section.pop("preset", None) or "small"
    if preset not in PRESETS:
        raise ConfigError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if section.setdefault("arch", "decoder-only") != "decoder-only":
        raise ConfigError(f"a language model is decoder-only; [model] arch = {section['arch']!r}")
    if section.setdefault("max_len", block_size) < block_size:
        raise ConfigError(f"[model] max_len = {section['max_len']} is shorter than the block size {block_size}")
    config = ModelConfig.preset(preset, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, **section)
    return config, preset


def make_lm_splits(data: LMDataConfig, seed: int) -> tuple[TextSplits, dict[str, Any]]:
    """The train / valid / test lines: given files, or whole groups held out of ``data.dataset`` (seeded); and the
    corpus description for run.json.

    Raises:
        MissingDataError, DataError: a text cannot be read. ConfigError: bad fractions or books.
    """
    from dotformer.data.text import TextSplits, check_books, read_file_text, read_text_corpus, split_text

    corpus = read_text_corpus(data.dataset, data.sword_path)
    test_file = read_file_text(data.test).lines if data.test else None
    if data.valid:
        splits = TextSplits(corpus.lines, read_file_text(data.valid).lines, test_file or [], {"valid": data.valid})
    else:
        books = check_books(corpus, data.test_books or ())
        test_fraction = 0.0 if test_file is not None else data.test_fraction
        splits = split_text(corpus, seed, data.valid_fraction, test_fraction, books or None)
        if test_file is not None:
            splits = TextSplits(splits.train, splits.valid, test_file, {**splits.info, "test": data.test})
    if data.limit is not None and data.limit < len(splits.train):
        splits = TextSplits(splits.train[: data.limit], splits.valid, splits.test, {**splits.info, "limit": data.limit})
    return splits, {"name": corpus.name, "report": corpus.report}


def make_lm_tokenizer(data: LMDataConfig, train_lines: list[str]) -> Tokenizer:
    """The tokenizer file when given, else a char or BPE tokenizer trained on the training lines.

    Raises:
        MissingDataError, DataError: the file cannot be read, or it reads more than half of the training text's
            tokens as <unk> (the tokenizer of another text: the model would learn <unk>). ConfigError: a bad
            vocabulary size.
    """
    from dotformer.data.tokenizer_files import train_tokenizer

    if data.tokenizer_file:
        from dotformer.data.tokenizer_files import read_tokenizer_file
        from dotformer.decoding.evaluation import unknown_fraction

        tokenizer = read_tokenizer_file(data.tokenizer_file)
        share = unknown_fraction(tokenizer, train_lines)
        if share > 0.5:
            raise DataError(
                f"{data.tokenizer_file}: {share:.0%} of the training text's tokens are unknown to this tokenizer "
                f"(<unk>): is it the tokenizer of this text?"
            )
        return tokenizer
    return train_tokenizer(data.tokenizer, train_lines, data.vocab_size)


def save_text_splits(splits: TextSplits, directory: Path) -> None:
    """data/train.txt, valid.txt, test.txt (one line each, newline-terminated) and split.json."""
    from dotformer.runs.records import write_json_atomic

    directory.mkdir(parents=True, exist_ok=True)
    for name in SPLIT_NAMES:
        lines = getattr(splits, name)
        (directory / f"{name}.txt").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    write_json_atomic(directory / "split.json", splits.info)


def load_text_split(directory: Path, name: str) -> list[str]:
    """The lines of a saved split (empty for a split saved empty)."""
    from dotformer.data.textio import split_lines

    return split_lines((directory / f"{name}.txt").read_text(encoding="utf-8"))


def valid_bits_per_character(run_dir: Path, nats_per_token: float | None) -> float | None:
    """Bits per character of the run's validation text at ``nats_per_token`` (the best validation loss, which is
    the NLL without label smoothing): nats · scored tokens / (scored characters · ln 2)."""
    from dotformer.checkpoint import TGT_TOKENIZER_FILE
    from dotformer.data.blocks import encode_text
    from dotformer.data.tokenizer_files import load_tokenizer
    from dotformer.metrics.language import LanguageModelScore, scored_characters

    if nats_per_token is None:
        return None
    tokenizer = load_tokenizer(run_dir / "data" / TGT_TOKENIZER_FILE)
    stream = encode_text(load_text_split(run_dir / "data", "valid"), tokenizer, block_size=1)
    if len(stream) < 2:
        return None
    scored = len(stream) - 1  # every token but the first
    return LanguageModelScore(nats_per_token * scored, scored, scored_characters(stream, tokenizer)).bits_per_character
