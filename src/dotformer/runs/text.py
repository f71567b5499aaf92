"""The language-model task (``lm``): the lesson's decoder alone, trained GPT-style on running text.

The text is prepared once (:func:`~dotformer.data.prepared.cache.prepared_for`: given files, or whole books / pieces of
a file held out, seeded; one tokenizer learned on a sample of the training text, characters or byte-level BPE, or read
from a file; every line's ids and EOS in one memory-mapped stream per split), the run refers to it
(:mod:`dotformer.runs.run_data`), and the model is built decoder-only with ``max_len`` = the block size (its
positions are those it trained on; generation reads at most that many tokens). Batches are contiguous blocks of the
text (:mod:`dotformer.data.batch.blocks`), cut when batching, so one preparation serves every block size. The defaults
are the shipped ``lm-bible`` config's ``[model]`` and ``[train]`` (a 128-wide pre-LN model, a constant learning rate
with a cooldown, no label smoothing, so that the validation loss is the NLL bits per character are computed from).

In the run directory, ``RUN/data`` holds the reference to the prepared text, valid.txt and test.txt (one line each),
and the one tokenizer as tokenizer_src.json and tokenizer_tgt.json (the names checkpoints use).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import ModelConfig
from dotformer.data.config import LM_TASK, LMDataConfig
from dotformer.data.prepared.cache import prepared_for
from dotformer.data.prepared.text_kind import PreparedText
from dotformer.data.read.text_corpus import read_text_corpus
from dotformer.data.read.textio import split_lines
from dotformer.data.tokenize.tokenizer_files import TokenizerPair, load_tokenizer
from dotformer.errors import ConfigError, DataError, DotformerError
from dotformer.runs.task import (
    ANY_VOCAB_SIZE,
    EvalReport,
    EvalRequest,
    Loaded,
    Prepared,
    Task,
    corpus_record,
    pop_preset,
    run_split_file,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dotformer.decoding.engine import TranslationEngine
    from dotformer.decoding.inputs import TextRules
    from dotformer.runs.finetune import InitSource


class LanguageModelTask(Task):
    """A decoder-only language model of one text."""

    name = LM_TASK
    title = "a language model"
    fine_tunable = True  # from a decoder-only checkpoint, its tokenizer kept (dotformer.runs.text_init)
    decodes = False
    slides = True  # evaluate --stride: a sliding window over the text instead of blocks
    reads_pairs = False  # its --data is running text, read one line after another
    recipe = "lm-bible"

    def data_config(self, section: dict[str, Any], source: str) -> LMDataConfig:
        return LMDataConfig.from_section(section, source)

    def read_init(
        self,
        path: str | Path,
        model_section: dict[str, Any],
        data_section: dict[str, Any],
        origins: Mapping[str, str] | None = None,
    ) -> InitSource:
        """A decoder-only checkpoint, its tokenizer kept (:func:`~dotformer.runs.text_init.read_text_init`)."""
        from dotformer.runs.text_init import read_text_init

        return read_text_init(path, model_section, data_section, origins)

    def check_model(self, model_section: dict[str, Any], data: LMDataConfig) -> None:
        lm_model_config(model_section, ANY_VOCAB_SIZE, data.block_size)

    def prepare(
        self,
        data: LMDataConfig,
        seed: int,
        init: InitSource | None,
        extend_vocab: bool,
        progress: bool,
        source: Any = None,
    ) -> tuple[Prepared, InitSource | None]:

        if extend_vocab:
            raise ConfigError(
                "--extend-vocab grows the char/symbol vocabularies of pairs; a language model keeps its own"
            )
        given = None if init is None else init.tgt_tokenizer  # fine-tuning: the checkpoint's tokenizer
        if init is not None:
            data = dataclasses.replace(data, **init.data)
        prepared = source or prepared_for(data, seed, tokenizers=given)
        assert isinstance(prepared, PreparedText)
        tokenizers = TokenizerPair(prepared.tokenizer, prepared.tokenizer)
        return Prepared(data, corpus_record(prepared), tokenizers, prepared.lines, prepared, given is not None), init

    def model_config(
        self, model_section: dict[str, Any], prepared: Prepared, init: InitSource | None = None
    ) -> tuple[ModelConfig, str | None]:
        if init is not None:
            from dotformer.runs.text_init import text_init_model_config

            return text_init_model_config(init, prepared.data.block_size)
        return lm_model_config(model_section, prepared.tokenizers.tgt.vocab_size, prepared.data.block_size)

    def load(self, run_dir: Path, record: dict[str, Any]) -> Loaded:
        from dotformer.data.batch.blocks import check_training_stream, prepared_stream
        from dotformer.runs.run_data import open_run_data
        from dotformer.training.state import TrainData

        data = self.record_data(record, run_dir)
        prepared = open_run_data(run_dir, data)
        assert isinstance(prepared, PreparedText)
        T = data.block_size
        train = prepared_stream(prepared, "train", T)
        check_training_stream(train)  # before the data line: an error is one line
        valid = prepared_stream(prepared, "valid", T)
        tokenizer = prepared.tokenizer
        train_data = TrainData(
            train=train, valid=valid, src_tokenizer=tokenizer, tgt_tokenizer=tokenizer, best_metrics=self.best_metrics
        )
        lines = prepared.splits["train"], prepared.splits["valid"]
        line = (
            f"{len(lines[0]):,} train lines ({train.characters:,} characters, {len(train):,} tokens), "
            f"{len(lines[1]):,} valid lines; blocks of {T} tokens"
        )
        return Loaded(data, train_data, [line])

    def evaluate(self, engine: TranslationEngine, request: EvalRequest) -> EvalReport:
        """Perplexity, nats and bits per token and bits per character of a text file or the run's held-out text
        (its first ``limit`` lines), read as one stream and scored block by block with the training block size T,
        or in a window of T tokens moved ``stride`` tokens at a time (:func:`dotformer.training.scoring.score_text`);
        an imported model reads the text as its own tokenizer does, BOS first when its family adds one (the
        checkpoint's text rules).

        Raises:
            ConfigError: a ``limit`` below 1, a ``stride`` outside [1, T]. CheckpointError: no run directory and no
                ``data``. DataError / MissingDataError: an unreadable or empty text.
        """
        from dotformer.decoding.inputs import text_rules
        from dotformer.training.progress import count
        from dotformer.training.scoring import score_text

        loaded: Any = engine.checkpoint  # the torch engine's loaded checkpoint: its model scores the text
        block, stride = loaded.context_window, request.stride
        if stride is not None and not 1 <= stride <= block:
            raise ConfigError(f"--stride must be between 1 and the model's block size {block} tokens, got {stride}")

        lines, where = held_out_lines(loaded, request)
        if not lines:
            raise DataError(f"{where} holds no text to score")
        if request.limit is not None:
            if request.limit < 1:
                raise ConfigError(f"--limit must be a positive number of lines, got {request.limit}")
            shown = f"the first {min(request.limit, len(lines)):,} of {count(len(lines), 'line')}"
            lines = lines[: request.limit]
        else:
            shown = count(len(lines), "line")
        batch_tokens = request.batch_size * block  # B blocks (or windows) a batch
        rules = text_rules(loaded.info)  # an imported model reads the text as its tokenizer does, BOS first
        score = score_text(loaded.model, lines, loaded.tgt_tokenizer, block, batch_tokens, rules, stride)
        reading = f"blocks of {block} tokens" if stride is None else f"windows of {block} tokens moved by {stride}"
        description = f"({shown}, {count(score.tokens, 'token')} scored), task lm, {reading}"
        table = (
            f"perplexity {score.perplexity:.3f}  nats/token {score.nats_per_token:.4f}  bits/token "
            f"{score.bits_per_token:.4f}  bits/char {score.bits_per_character:.4f}"
        )
        return EvalReport(where, description, table, payload={**score.to_dict(), "block_size": block, "stride": stride})

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
    preset = pop_preset(section)
    if section.setdefault("arch", "decoder-only") != "decoder-only":
        raise ConfigError(f"a language model is decoder-only; [model] arch = {section['arch']!r}")
    if section.setdefault("max_len", block_size) < block_size:
        raise ConfigError(f"[model] max_len = {section['max_len']} is shorter than the block size {block_size}")
    config = ModelConfig.preset(preset, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, **section)
    return config, preset


def held_out_lines(loaded: Any, request: EvalRequest) -> tuple[list[str], str]:
    """The lines a language model or a masked language model is scored on (``request.data``, or the saved split of
    the checkpoint's run), and where they come from."""
    if request.data is not None:
        return read_text_corpus(request.data).lines, request.data
    path = run_split_file(loaded.path, f"{request.split}.txt")
    return load_text_split(path.parent, request.split), str(path)


def load_text_split(directory: Path, name: str) -> list[str]:
    """The lines of a saved split (empty for a split saved empty)."""

    return split_lines((directory / f"{name}.txt").read_text(encoding="utf-8"))


def valid_bits_per_character(run_dir: Path, nats_per_token: float | None) -> float | None:
    """Bits per character of the run's validation text at ``nats_per_token`` (the best validation loss, which is
    the NLL without label smoothing): nats · scored tokens / (scored characters · ln 2)."""
    from dotformer.checkpoint import TGT_TOKENIZER_FILE
    from dotformer.data.batch.blocks import encode_text
    from dotformer.metrics.language import LanguageModelScore, scored_characters

    if nats_per_token is None:
        return None
    tokenizer = load_tokenizer(run_dir / "data" / TGT_TOKENIZER_FILE)
    lines = load_text_split(run_dir / "data", "valid")
    rules = _base_rules(run_dir)
    if not rules.lines:  # an imported model's text: as its tokenizer reads it, as it was trained on
        from dotformer.decoding.inputs import encode_document

        stream = encode_document(tokenizer, lines, rules, block_size=1)
    else:
        stream = encode_text(lines, tokenizer, block_size=1)
    if len(stream) < 2:
        return None
    scored = len(stream) - 1  # every token but the first
    return LanguageModelScore(nats_per_token * scored, scored, scored_characters(stream, tokenizer)).bits_per_character


def _base_rules(run_dir: Path) -> TextRules:
    """The text rules of the run's imported base (run.json's ``"from_base"``), or dotformer's line stream."""
    from dotformer.decoding.inputs import text_rules
    from dotformer.runs.records import read_run_json

    try:
        base = read_run_json(run_dir).get("from_base")
    except DotformerError:
        base = None
    return text_rules(base if isinstance(base, dict) else {})
